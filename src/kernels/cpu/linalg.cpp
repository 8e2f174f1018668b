// Linear algebra: MatMul, Gemm, Einsum (forward).
//   MatMul  Y[b..., M, N] = A[b..., M, K] @ B[b..., K, N]      numpy: 1-D operands, batch broadcast
//   Gemm    Y[M, N] = alpha * op(A)[M, K] @ op(B)[K, N] + beta * C   C broadcast to [M, N]
//   Einsum  Y = einsum(equation, X...)   lowered to gather/sum (diagonals, traces, transposes) and
//           batched matrix products, contracting operands left to right.
// float32 goes through oneDNN (matmul primitive, sgemm); float64 through the blocked gemm; float16
// is widened to float32 (exact), multiplied there and rounded back, as float16 hardware with fp32
// accumulation does; the other types through a plain loop (correct, not fast).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_provider.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_rows512.h"
#include "kernels/registry.h"
#include "kernels/shape/linalg.h"
#include "kernels/shape/matmul.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

using MatMulTypes = decltype(FloatTypes{} + TypeList<int32_t, int64_t, uint32_t, uint64_t>{});

using dnnl_util::float_type;

// Products of fewer multiply-adds than this run on one thread: waking the others (sleeping, with
// the passive OpenMP wait policy) costs more than they save (the digits MLP's 32x64x128 layers ran
// 2x slower on 2 threads).
bool small_product(int64_t macs) { return macs < (int64_t(1) << 19); }

// float32 products of fewer multiply-adds than this skip oneDNN: its primitive execution costs
// ~3 us, more than the blocked gemm spends on them (linear regression: [1000, 10] @ [10, 1]).
bool tiny_product(int64_t macs) { return macs < (int64_t(1) << 14); }

// float32 weights read plain [K, N] whose row stride is a multiple of 4 KiB (N = 1024, 2048,
// 3072, ...) and that are large: oneDNN 2.6's brgemm reads them with cache-set conflicts (BERT-base's
// 1024x768 @ 768x3072: 83 ms plain, 32 ms with the weights reordered into its blocked layout first,
// the reorder 1.7 ms, one thread, Sapphire Rapids). Such weights get format `any` and a reorder
// per run into the workspace.
bool reorder_plain_weights(DType dt, int64_t K, int64_t N, bool tb) {
  return dt == DType::kFloat32 && !tb && (N * 4) % 4096 == 0 && K * N >= (int64_t(1) << 20);
}

// ---------------------------------------------------------------- one oneDNN matmul
// oneDNN's bias argument of a product whose output is `c`: [1, ..., 1, N], contiguous.
dnnl::memory::desc row_bias_desc(const dnnl::memory::desc& c) {
  dnnl::memory::dims d(c.dims().size(), 1), st(d.size(), c.dims().back());
  d.back() = c.dims().back(), st.back() = 1;
  return dnnl::memory::desc(d, c.data_type(), st);
}

// The primitive attributes of a product scaled by alpha (oneDNN's output scale: alpha times the
// float32 sum of products, exact for a power of two).
dnnl::primitive_attr scaled_attr(float alpha) {
  dnnl::primitive_attr attr = dnnl_util::default_attr();
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  return attr;
}

// Sets `op` to a oneDNN matmul over the user layouts a, b, c, plus the row bias when `bias`; macs
// sizes its threading. With `any_weights` or constant weights b_const, the weights take the
// primitive's layout (format `any`): reordered into per run, or once for b_const. False (op
// untouched) where oneDNN offers only its reference kernel.
bool init_matmul(dnnl_util::DnnlOp& op, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                 const dnnl::memory::desc& c, bool bias, const dnnl::primitive_attr& attr, bool any_weights,
                 const void* b_const, int64_t macs) {
  const dnnl::memory::desc b_prim =
      any_weights || b_const ? dnnl::memory::desc(b.dims(), b.data_type(), dnnl::memory::format_tag::any) : b;
  const dnnl::memory::desc bmd = bias ? row_bias_desc(c) : dnnl::memory::desc();
  const dnnl::matmul::primitive_desc pd(bias ? dnnl::matmul::desc(a, b_prim, bmd, c) : dnnl::matmul::desc(a, b_prim, c),
                                        attr, dnnl_util::cpu_engine());
  if (dnnl_util::is_reference(pd)) return false;
  op.init(dnnl::matmul(pd), pd.scratchpad_desc());
  op.add_arg(DNNL_ARG_SRC, a, pd.src_desc(), false);
  if (b_const) op.add_const_arg(DNNL_ARG_WEIGHTS, b, pd.weights_desc(), b_const);
  else op.add_arg(DNNL_ARG_WEIGHTS, b, pd.weights_desc(), false);
  if (bias) op.add_arg(DNNL_ARG_BIAS, bmd, pd.bias_desc(), false);
  op.add_arg(DNNL_ARG_DST, c, pd.dst_desc(), true);
  op.set_single_threaded(small_product(macs));
  return true;
}

// ---------------------------------------------------------------- one matrix product
// C[M, N] = alpha * op(A) @ op(B) + beta * C, row-major with leading dimensions.
template <class T>
void matmul2d(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const T* A, int64_t lda,
              const T* B, int64_t ldb, double beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    gemm(ta, tb, M, N, K, T(alpha), A, lda, B, ldb, T(beta), C, ldc);
  } else {
    using Acc = compute_t<T>;
    const Acc al = Acc(alpha), be = Acc(beta);
    parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N * std::max<int64_t>(K, 1), 1)),
                 [&](int64_t m0, int64_t m1) {
                   std::vector<Acc> row(size_t(std::max<int64_t>(N, 0)));
                   for (int64_t i = m0; i < m1; ++i) {
                     std::fill(row.begin(), row.end(), Acc(0));
                     for (int64_t k = 0; k < K; ++k) {
                       const Acc a = Acc(ta ? A[k * lda + i] : A[i * lda + k]);
                       if (!tb) {
                         const T* b = B + k * ldb;
                         for (int64_t j = 0; j < N; ++j) row[size_t(j)] = wrap_add(row[size_t(j)], wrap_mul(a, Acc(b[j])));
                       } else {
                         for (int64_t j = 0; j < N; ++j) row[size_t(j)] = wrap_add(row[size_t(j)], wrap_mul(a, Acc(B[j * ldb + k])));
                       }
                     }
                     T* c = C + i * ldc;
                     for (int64_t j = 0; j < N; ++j) {
                       Acc v = row[size_t(j)];
                       if (alpha != 1.0) v = wrap_mul(al, v);
                       if (beta != 0.0) v = wrap_add(v, wrap_mul(be, Acc(c[j])));
                       c[j] = T(v);
                     }
                   }
                 });
  }
}

// Runs one(i) for the n products of a batch: many small ones one per thread; otherwise each
// product uses every thread (macs: multiply-adds of one product).
template <class F>
void run_batches(int64_t n, int64_t macs, F&& one) {
  if (n >= 2 * current_threads() && macs < (1 << 18)) {
    parallel_for(n, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < n; ++i) one(i);
  }
}

// y[r, j] += c[j] for `rows` rows of n values, row stride ld (the element type's arithmetic).
template <class T>
void add_row_bias(T* y, int64_t rows, int64_t n, int64_t ld, const T* c) {
  using Acc = compute_t<T>;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) y[r * ld + j] = T(wrap_add(Acc(y[r * ld + j]), Acc(c[j])));
}

// ---------------------------------------------------------------- float16 through float32
size_t align64(size_t n) { return (n + 63) / 64 * 64; }

using ew::narrow_all;
using ew::widen_all;

// ---------------------------------------------------------------- batched matrix product
// C[b] = op(A)[ia(b)] @ op(B)[ib(b)] over the broadcast of the batch shapes.
//   A: [a_batch..., M, K] ([..., K, M] when ta), B: [b_batch..., K, N] ([..., N, K] when tb),
//   C: [batch..., M, N]; all contiguous.
// float32 runs one oneDNN matmul primitive (batch broadcast included); other types loop over
// batches calling matmul2d.
class BatchedMatMul {
 public:
  /// False when the batch shapes do not broadcast.
  /// `b_const`: B's data when it is a constant of the plan (float32 weights are then packed once).
  /// `bias`: a [N] row to add to every row of C, asked for; has_bias() says whether the product
  /// adds it (oneDNN's bias argument) or the caller must. `alpha` scales the product (not the bias).
  bool prepare(DType dt, Shape a_batch, Shape b_batch, int64_t M, int64_t K, int64_t N, bool ta, bool tb,
               const Tensor* b_const = nullptr, bool bias = false, float alpha = 1.f) {
    bias_ = false;
    alpha_ = alpha;
    if (dt == DType::kFloat16) {
      // float16: the float32 product of the widened operands (exact), rounded back to float16.
      widened_ = std::make_shared<BatchedMatMul>();
      a_numel_ = shape_numel(a_batch) * M * K;
      b_numel_ = shape_numel(b_batch) * K * N;
      if (!widened_->prepare(DType::kFloat32, std::move(a_batch), std::move(b_batch), M, K, N, ta, tb, nullptr, false, alpha))
        return false;
      batch_ = widened_->batch();
      dt_ = dt, M_ = M, K_ = K, N_ = N, nbatch_ = shape_numel(batch_);
      return true;
    }
    widened_.reset();
    dt_ = dt, M_ = M, K_ = K, N_ = N, ta_ = ta, tb_ = tb, rows_ = M;
    const size_t r = std::max(a_batch.size(), b_batch.size());
    a_batch.insert(a_batch.begin(), r - a_batch.size(), 1);
    b_batch.insert(b_batch.begin(), r - b_batch.size(), 1);
    if (!broadcast_shapes({a_batch, b_batch}, &batch_)) return false;
    nbatch_ = shape_numel(batch_);
    op_ = dnnl_util::DnnlOp();
    a_off_.clear(), b_off_.clear();
    if (nbatch_ == 0 || M == 0 || N == 0 || K == 0) return true;

    // Collapse batch dims: drop 1s, merge neighbours with the same broadcast pattern.
    Shape ad, bd, cd;
    int prev = -1;
    for (size_t i = 0; i < r; ++i) {
      if (batch_[i] == 1) continue;
      const int pat = (a_batch[i] != 1 ? 1 : 0) | (b_batch[i] != 1 ? 2 : 0);
      if (pat == prev) {
        ad.back() *= a_batch[i], bd.back() *= b_batch[i], cd.back() *= batch_[i];
      } else {
        ad.push_back(a_batch[i]), bd.push_back(b_batch[i]), cd.push_back(batch_[i]);
      }
      prev = pat;
    }
    // B shared by every batch and A not transposed: one [batch*M, K] @ [K, N] product.
    if (!ta && shape_numel(bd) == 1) {
      rows_ = M * shape_numel(ad);
      ad.clear(), bd.clear(), cd.clear();
    }
    // float32: one oneDNN matmul primitive, created now, its scratchpad in the plan's workspace, so
    // that a run allocates nothing (oneDNN's sgemm allocates packing buffers on every call). It
    // measured as fast as sgemm or faster on training shapes; 1.6x slower on a [4, 8192] x
    // [8192, 8192] product.
    tiny_ = dt == DType::kFloat32 && tiny_product(shape_numel(cd) * rows_ * K * N);
    // Large float32 products on AMX tiles (gemm(), gemm_amx.h) where the CPU has them: faster than
    // oneDNN's float32 primitive at float32's accuracy.
    const bool tiles = dt == DType::kFloat32 && amx::pays(rows_, N, K);
    if (float_type(dt) && !tiny_ && !tiles && cd.size() + 2 <= DNNL_MAX_NDIMS &&
        make_dnnl(ad, bd, cd, rows_, b_const, bias)) {
      bias_ = bias;
      return true;
    }
    // Offsets of each batch's matrices over the collapsed dims.
    const int64_t nb = shape_numel(cd);
    std::vector<int64_t> idx(cd.size(), 0);
    a_off_.resize(size_t(nb));
    b_off_.resize(size_t(nb));
    const auto as = contiguous_strides(ad), bs = contiguous_strides(bd);
    for (int64_t i = 0; i < nb; ++i) {
      int64_t ao = 0, bo = 0;
      for (size_t d = 0; d < cd.size(); ++d) {
        if (ad[d] != 1) ao += idx[d] * as[d];
        if (bd[d] != 1) bo += idx[d] * bs[d];
      }
      a_off_[size_t(i)] = ao * rows_ * K;
      b_off_[size_t(i)] = bo * K * N;
      for (size_t d = cd.size(); d-- > 0;) {
        if (++idx[d] < cd[d]) break;
        idx[d] = 0;
      }
    }
    return true;
  }

  const Shape& batch() const { return batch_; }
  /// True when run() adds the bias prepare() was asked for.
  bool has_bias() const { return bias_; }
  /// Runs on a kernel's inputs 0 and 1 (and 2, the bias, when has_bias()) into its output 0.
  void run(RunContext& ctx) {
    run(ctx.input(0).raw_data(), ctx.input(1).raw_data(), ctx.output(0).raw_data(), ctx.workspace(), ctx.node(),
        CpuContext::of(ctx).stream(), bias_ ? ctx.input(2).raw_data() : nullptr);
  }
  size_t workspace_bytes() const {
    if (widened_)
      return widened_->workspace_bytes() +
             4 * (align64(size_t(a_numel_)) + align64(size_t(b_numel_)) + align64(size_t(nbatch_ * M_ * N_)));
    return op_.valid() ? op_.workspace_bytes() : 0;
  }

  void run(const void* a, const void* b, void* c, void* ws, const ir::Node& node, dnnl::stream& stream,
           const void* bias = nullptr) {
    if (nbatch_ == 0 || M_ == 0 || N_ == 0) return;
    if (widened_) {
      float* a32 = static_cast<float*>(ws);
      float* b32 = a32 + align64(size_t(a_numel_));
      float* c32 = b32 + align64(size_t(b_numel_));
      void* rest = c32 + align64(size_t(nbatch_ * M_ * N_));
      widen_all(static_cast<const float16*>(a), a32, a_numel_);
      widen_all(static_cast<const float16*>(b), b32, b_numel_);
      widened_->run(a32, b32, c32, rest, node, stream);
      narrow_all(c32, static_cast<float16*>(c), nbatch_ * M_ * N_);
      return;
    }
    if (op_.valid()) {
      op_.bind(DNNL_ARG_SRC, a);
      op_.bind(DNNL_ARG_WEIGHTS, b);
      op_.bind(DNNL_ARG_DST, c);
      if (bias_) op_.bind(DNNL_ARG_BIAS, bias);
      op_.execute(ws, stream);
      return;
    }
    std::optional<ThreadScope> one;
    if (tiny_) one.emplace(1);  // waking a sleeping thread costs more than the product
    dispatch<NumericTypes>(dt_, node, [&]<class T>() {
      const T* A = static_cast<const T*>(a);
      const T* B = static_cast<const T*>(b);
      T* C = static_cast<T*>(c);
      if (K_ == 0) {
        std::fill(C, C + nbatch_ * M_ * N_, T(0.f));
        return;
      }
      const int64_t lda = ta_ ? M_ : K_, ldb = tb_ ? K_ : N_, n = int64_t(a_off_.size());
      auto one = [&](int64_t i) {
        matmul2d<T>(ta_, tb_, rows_, N_, K_, alpha_, A + a_off_[size_t(i)], lda, B + b_off_[size_t(i)], ldb, 0.0,
                    C + i * rows_ * N_, N_);
      };
      run_batches(n, rows_ * N_ * K_, one);
    });
  }

 private:
  // oneDNN matmul on collapsed batch dims (ad, bd broadcast to cd), M rows; false when oneDNN
  // offers only its reference kernel (the per-batch sgemm loop is faster).
  // A constant 2-D B (b_const, float32) goes into the layout the primitive picks, once.
  // `bias`: a [N] row added to every row of the product (oneDNN's bias argument, [1, ..., 1, N]).
  bool make_dnnl(const Shape& ad, const Shape& bd, const Shape& cd, int64_t M, const Tensor* b_const, bool bias) {
    using dnnl::memory;
    auto md = [this](const Shape& batch, int64_t rows, int64_t cols, bool trans) {
      Shape d = batch;
      d.push_back(rows), d.push_back(cols);
      std::vector<int64_t> st(d.size());
      const size_t n = d.size();
      st[n - 1] = trans ? rows : 1;
      st[n - 2] = trans ? 1 : cols;
      int64_t s = rows * cols;
      for (size_t i = n - 2; i-- > 0;) {
        st[i] = s;
        s *= d[i];
      }
      return memory::desc(dnnl_util::dims(d), *float_type(dt_), dnnl_util::dims(st));
    };
    const memory::desc a = md(ad, M, K_, ta_), b = md(bd, K_, N_, tb_), c = md(cd, M, N_, false);
    const bool pack = b_const && dt_ == DType::kFloat32 && ad.empty() && bd.empty();
    const bool reorder = !pack && ad.empty() && bd.empty() && reorder_plain_weights(dt_, K_, N_, tb_);
    return init_matmul(op_, a, b, c, bias, scaled_attr(alpha_), reorder, pack ? b_const->raw_data() : nullptr,
                       shape_numel(cd) * M * K_ * N_);
  }

  DType dt_ = DType::kFloat32;
  float alpha_ = 1.f;
  int64_t M_ = 0, K_ = 0, N_ = 0, nbatch_ = 0;
  std::shared_ptr<BatchedMatMul> widened_;  // float16: the float32 product it runs through
  int64_t a_numel_ = 0, b_numel_ = 0;         // float16: elements of A and B
  int64_t rows_ = 0;  // rows of each product (M, or batch*M when A's batch folds into the rows)
  bool ta_ = false, tb_ = false, tiny_ = false, bias_ = false;
  Shape batch_;
  std::vector<int64_t> a_off_, b_off_;
  dnnl_util::DnnlOp op_;
};

// Prepares `mm` for the product `g` describes and declares output 0 and the workspace.
void prepare_product(PrepareContext& ctx, BatchedMatMul& mm, DType dt, const shape::MatMulGeom& g, bool ta, bool tb,
                     bool bias = false, float alpha = 1.f) {
  if (!mm.prepare(dt, g.a_batch, g.b_batch, g.M, g.K, g.N, ta, tb, ctx.constant_weights(1), bias, alpha))
    ctx.fail("internal: batch dimensions ", shape_to_string(g.a_batch), " and ", shape_to_string(g.b_batch),
             " do not broadcast");
  ctx.set_output(0, dt, g.output);
  ctx.request_workspace(mm.workspace_bytes());
}

// ---------------------------------------------------------------- MatMul
// A [..., M, K] @ B [..., K, N]; a 1-D A is [1, K] (M dropped), a 1-D B is [K, 1] (N dropped).
class MatMulKernel final : public Kernel {
 public:
  explicit MatMulKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    if (ctx.input_dtype(1) != dt)
      ctx.fail("inputs have different element types (", dtype_name(dt), " and ", dtype_name(ctx.input_dtype(1)), ")");
    dispatch<MatMulTypes>(dt, ctx.node(), [&]<class T>() {});
    const shape::MatMulGeom g = shape::matmul_geometry(ctx, ctx.input_shape(0), ctx.input_shape(1));
    prepare_product(ctx, mm_, dt, g, false, false);
  }
  void run(RunContext& ctx) override { mm_.run(ctx); }

 private:
  BatchedMatMul mm_;
};

// ---------------------------------------------------------------- product of strided batches
// C[b] = A[b] @ B[b] (+ bias on every row) over nb batches, each operand a view: element (b, i, j)
// at b * bs + i * rs + j * cs, bs 0 where a batch is broadcast. What FusedMatMul's transBatchA /
// transBatchB (onnxruntime's: the operand's first axis moved behind its batch axes) and
// transBatchY (com.onnxtrain's: the product's row axis stored first) read and write in place
// of a Transpose copy: the attention products of a batch-first encoder. float32 runs one oneDNN
// matmul over the strided descriptors where oneDNN has a kernel for them; else (or another type)
// one gemm per batch with leading dimensions, which needs each matrix's rows or columns contiguous.
struct MatView {
  int64_t bs = 0, rs = 0, cs = 1;
  bool trans = false;  ///< stored column-major: the gemm's transposed operand (rs 1, leading dimension cs)
};

class StridedMatMul {
 public:
  /// False (nothing prepared) when a matrix has neither unit row nor unit column stride, or C's
  /// columns are not contiguous.
  bool prepare(DType dt, int64_t nb, int64_t M, int64_t K, int64_t N, MatView a, MatView b, MatView c, bool bias,
               float alpha = 1.f) {
    dt_ = dt, nb_ = nb, M_ = M, K_ = K, N_ = N, a_ = a, b_ = b, c_ = c, bias_ = bias, alpha_ = alpha;
    op_ = dnnl_util::DnnlOp();
    tiles_ = false;
    auto gemm_ok = [](const MatView& v) { return v.trans ? v.rs == 1 : v.cs == 1; };
    if (!gemm_ok(a) || !gemm_ok(b) || c.cs != 1 || c.trans) return false;
    if (nb == 0 || M == 0 || N == 0 || K == 0 || !float_type(dt) || dt == DType::kFloat16 ||
        tiny_product(nb * M * K * N))
      return true;
    // float32 products of 64 or more a side on AMX tiles, one product a thread (amx::pays_batched).
    tiles_ = dt == DType::kFloat32 && amx::pays_batched(M, N, K);
    if (tiles_) return true;
    using dnnl::memory;
    auto md = [&](const MatView& v, int64_t batch, int64_t rows, int64_t cols) {
      return memory::desc({batch, rows, cols}, *float_type(dt), {v.bs, v.rs, v.cs});
    };
    const memory::desc amd = md(a, a.bs ? nb : 1, M, K), bmd = md(b, b.bs ? nb : 1, K, N), cmd = md(c, nb, M, N);
    try {
      init_matmul(op_, amd, bmd, cmd, bias, scaled_attr(alpha), false, nullptr, nb * M * K * N);
    } catch (const dnnl::error&) {  // a stride layout oneDNN does not take: the gemm loop
      op_ = dnnl_util::DnnlOp();
    }
    return true;
  }
  size_t workspace_bytes() const { return op_.valid() ? op_.workspace_bytes() : 0; }

  void run(RunContext& ctx) {
    const void* bias = bias_ ? ctx.input(2).raw_data() : nullptr;
    if (nb_ == 0 || M_ == 0 || N_ == 0) return;
    if (op_.valid()) {
      op_.bind(DNNL_ARG_SRC, ctx.input(0).raw_data());
      op_.bind(DNNL_ARG_WEIGHTS, ctx.input(1).raw_data());
      if (bias_) op_.bind(DNNL_ARG_BIAS, bias);
      op_.bind(DNNL_ARG_DST, ctx.output(0).raw_data());
      op_.execute(ctx.workspace(), CpuContext::of(ctx).stream());
      return;
    }
    dispatch<MatMulTypes>(dt_, ctx.node(), [&]<class T>() {
      const T* A = ctx.input(0).data<T>();
      const T* B = ctx.input(1).data<T>();
      T* C = ctx.output(0).data<T>();
      const bool ta = a_.trans, tb = b_.trans;
      const int64_t lda = ta ? a_.cs : a_.rs, ldb = tb ? b_.cs : b_.rs;
      // tiles_: amx::gemm (float32, K > 0), else the generic product.
      auto tiled = [&](int64_t i, T* c) {
        if constexpr (std::is_same_v<T, float>)
          return tiles_ && amx::gemm(ta, tb, M_, N_, K_, alpha_, A + i * a_.bs, lda, B + i * b_.bs, ldb, 0.f, c, c_.rs);
        return false;
      };
      auto one = [&](int64_t i) {
        T* c = C + i * c_.bs;
        if (K_ == 0) {
          for (int64_t r = 0; r < M_; ++r) std::fill(c + r * c_.rs, c + r * c_.rs + N_, T(0.f));
        } else if (!tiled(i, c)) {
          matmul2d<T>(ta, tb, M_, N_, K_, alpha_, A + i * a_.bs, lda, B + i * b_.bs, ldb, 0.0, c, c_.rs);
        }
        if (bias_) add_row_bias(c, M_, N_, c_.rs, static_cast<const T*>(bias));
      };
      if (!tiles_) return run_batches(nb_, M_ * N_ * K_, one);
      parallel_for(nb_, 1, [&](int64_t b0, int64_t b1) {  // one product a thread
        ThreadScope single(1);
        for (int64_t i = b0; i < b1; ++i) one(i);
      });
    });
  }

 private:
  DType dt_ = DType::kFloat32;
  int64_t nb_ = 0, M_ = 0, K_ = 0, N_ = 0;
  MatView a_, b_, c_;
  bool tiles_ = false;  ///< float32 on AMX tiles, one product a thread
  bool bias_ = false;
  float alpha_ = 1.f;
  dnnl_util::DnnlOp op_;
};

// ---------------------------------------------------------------- FusedMatMul (com.onnxtrain)
// Y[b..., M, N] = alpha op(A)[b..., M, K] @ op(B)[b..., K, N] (+ C[N] on every row, alpha 1), op
// transposing the last two dims when transA / transB is set (onnxruntime's com.microsoft.FusedMatMul;
// the bias C is com.onnxtrain's, train::fuse_matmul_bias; alpha is oneDNN's output scale, a power of
// two from train::fold_scales_into_products). The gradient rule of MatMul emits it for
// A^T g and g B^T: the transposed operand is read through its strides, no Transpose node copies it.
// Both operands have rank >= 2; batch dims broadcast. C is oneDNN's bias argument where the
// product runs there (float32: the sum of products, then + C, as Add after the product rounds);
// else a pass after the product.
class FusedMatMulKernel final : public Kernel {
 public:
  explicit FusedMatMulKernel(const KernelInfo& info)
      : ta_(info.attr_int("transA", 0) != 0), tb_(info.attr_int("transB", 0) != 0), alpha_(info.attr_float("alpha", 1.f)) {
    tba_ = info.attr_int("transBatchA", 0) != 0, tbb_ = info.attr_int("transBatchB", 0) != 0;
    tby_ = info.attr_int("transBatchY", 0) != 0;
  }
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    if (ctx.input_dtype(1) != dt)
      ctx.fail("inputs have different element types (", dtype_name(dt), " and ", dtype_name(ctx.input_dtype(1)), ")");
    dispatch<MatMulTypes>(dt, ctx.node(), [&]<class T>() {});
    strided_ = tba_ || tbb_ || tby_;
    if (strided_) return prepare_strided(ctx, dt);
    const shape::MatMulGeom g = shape::fused_matmul_geometry(ctx, ctx.input_shape(0), ctx.input_shape(1), ta_, tb_);
    check_bias(ctx, dt, g.N);
    prepare_product(ctx, mm_, dt, g, ta_, tb_, bias_, alpha_);
  }
  void run(RunContext& ctx) override {
    if (strided_) return smm_.run(ctx);
    mm_.run(ctx);
    if (!bias_ || mm_.has_bias()) return;
    const Tensor& c = ctx.input(2);
    Tensor& y = ctx.output(0);
    dispatch<MatMulTypes>(y.dtype(), ctx.node(), [&]<class T>() {
      add_row_bias(y.data<T>(), c.numel() ? y.numel() / c.numel() : 0, c.numel(), c.numel(), c.data<T>());
    });
  }

 private:
  // The optional bias C (input 2): `dt` [N], with alpha 1.
  void check_bias(PrepareContext& ctx, DType dt, int64_t N) {
    bias_ = ctx.num_inputs() > 2 && ctx.has_input(2);
    if (bias_ && alpha_ != 1.f) ctx.fail("alpha other than 1 with the bias C is not implemented");
    if (bias_ && (ctx.input_dtype(2) != dt || ctx.input_shape(2) != Shape{N}))
      ctx.fail("bias C must be ", dtype_name(dt), " [", N, "], got ", dtype_name(ctx.input_dtype(2)), " ",
               shape_to_string(ctx.input_shape(2)));
  }

  // transBatchA / B / Y: operands of rank 3 (or 2: one matrix for every batch), batch axes equal.
  void prepare_strided(PrepareContext& ctx, DType dt) {
    const Shape &sa = ctx.input_shape(0), &sb = ctx.input_shape(1);
    if (sa.size() < 2 || sb.size() < 2 || sa.size() > 3 || sb.size() > 3)
      ctx.fail("transBatchA / transBatchB / transBatchY are implemented for operands of rank 2 or 3, got ", shape_to_string(sa),
               " and ", shape_to_string(sb));
    // An operand's logical [batch, rows, cols] view of its contiguous storage.
    struct Op {
      int64_t batch = 0, rows = 0, cols = 0;  // batch 0: a 2-D operand
      MatView v;
    };
    auto view = [&](const Shape& s, bool trans_batch, bool trans, const char* name) {
      Op o;
      if (s.size() == 3) {
        if (trans_batch) o = Op{s[1], s[0], s[2], MatView{s[2], s[1] * s[2], 1, false}};  // [s1, s0, s2]
        else o = Op{s[0], s[1], s[2], MatView{s[1] * s[2], s[2], 1, false}};
      } else {
        if (trans_batch) ctx.fail("transBatch", name, " needs an operand of rank 3, got ", shape_to_string(s));
        o = Op{0, s[0], s[1], MatView{0, s[1], 1, false}};
      }
      if (trans) std::swap(o.rows, o.cols), std::swap(o.v.rs, o.v.cs), o.v.trans = true;
      return o;
    };
    const Op a = view(sa, tba_, ta_, "A"), b = view(sb, tbb_, tb_, "B");
    if (a.cols != b.rows)
      ctx.fail("inner dimensions differ: op(A) is [", a.rows, ", ", a.cols, "], op(B) is [", b.rows, ", ", b.cols, "]");
    if (a.batch && b.batch && a.batch != b.batch)
      ctx.fail("batch dimensions differ (", a.batch, " and ", b.batch, "): broadcast with transBatch is not implemented");
    const int64_t nb = std::max(a.batch, b.batch), M = a.rows, K = a.cols, N = b.cols;
    if (nb == 0) ctx.fail("transBatchY needs an operand of rank 3");
    check_bias(ctx, dt, N);
    const MatView c = tby_ ? MatView{N, nb * N, 1, false} : MatView{M * N, N, 1, false};
    MatView av = a.v, bv = b.v;
    if (!a.batch) av.bs = 0;
    if (!b.batch) bv.bs = 0;
    if (!smm_.prepare(dt, nb, M, K, N, av, bv, c, bias_, alpha_)) ctx.fail("internal: an operand view without a unit stride");
    ctx.set_output(0, dt, tby_ ? Shape{M, nb, N} : Shape{nb, M, N});
    ctx.request_workspace(smm_.workspace_bytes());
  }

  bool ta_, tb_;
  float alpha_;
  bool tba_ = false, tbb_ = false, tby_ = false, strided_ = false, bias_ = false;
  BatchedMatMul mm_;
  StridedMatMul smm_;
};

// ---------------------------------------------------------------- Gemm
// Y = alpha * op(A) @ op(B) + beta * C: Y is first filled with C broadcast, then accumulated into.
class GemmKernel final : public Kernel {
 public:
  // sparse_a: com.microsoft SparseToDenseMatMul (A densified at the session boundary): Gemm
  // without C at any opset.
  explicit GemmKernel(const KernelInfo& info, bool sparse_a = false)
      : ta_(info.attr_int("transA", 0) != 0), tb_(info.attr_int("transB", 0) != 0),
        alpha_(info.attr_float("alpha", 1.f)), beta_(info.attr_float("beta", 1.f)),
        legacy_no_broadcast_(!sparse_a && info.opset() < 7 && info.attr_int("broadcast", 0) == 0),
        sparse_a_(sparse_a) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    for (size_t i = 1; i < 3; ++i)
      if (ctx.has_input(i) && ctx.input_dtype(i) != dt)
        ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(i)), ", expected ", dtype_name(dt));
    dispatch<MatMulTypes>(dt, ctx.node(), [&]<class T>() {});
    const Shape& a = ctx.input_shape(0);
    const Shape& b = ctx.input_shape(1);
    has_c_ = ctx.has_input(2);
    if (!has_c_ && ctx.opset() < 11 && !sparse_a_) ctx.fail("input C is required before opset 11");
    const Shape* c = has_c_ ? &ctx.input_shape(2) : nullptr;
    const shape::MatMulGeom g = shape::gemm_geometry(ctx, a, b, c, ta_, tb_, legacy_no_broadcast_);
    M_ = g.M, K_ = g.K, N_ = g.N;
    if (c) {
      c_rows_ = c->size() == 2 ? (*c)[0] : 1;
      c_cols_ = c->empty() ? 1 : c->back();
    }
    ctx.set_output(0, dt, g.output);
    op_ = dnnl_util::DnnlOp();
    tiny_ = dt == DType::kFloat32 && tiny_product(M_ * K_ * N_);
    // float16: oneDNN's float32 product of the widened operands (exact), rounded back.
    widen_ = dt == DType::kFloat16 && !tiny_product(M_ * K_ * N_);
    const DType compute = widen_ ? DType::kFloat32 : dt;
    // A few rows (a classifier at batch 1): matrix-vector products streaming B (small_m_gemm), tiny
    // or not (their grain keeps small ones on one thread).
    small_m_ = dt == DType::kFloat32 && M_ >= 1 && M_ <= 4 && K_ > 0 && N_ > 0 && (!ta_ || M_ == 1);
    // A few columns (a regression or binary classification head): dot products (small_n_gemm).
    small_n_ = dt == DType::kFloat32 && !small_m_ && !ta_ && M_ > 0 && K_ > 0 && N_ >= 1 && N_ <= 4 &&
               (tb_ || N_ == 1);
    // float32 C of N values added as they are (alpha = beta = 1; how torch.onnx exports nn.Linear,
    // and what inference sessions fuse MatMul + Add into): the primitive's bias, no pass filling Y.
    bias_ = dt == DType::kFloat32 && has_c_ && alpha_ == 1.f && beta_ == 1.f && c_rows_ == 1 && c_cols_ == N_ &&
            c->size() <= 2;
    // Constant float32 weights (initializers of an inference plan): packed into the primitive's
    // layout once, here, instead of read plain in every run.
    const Tensor* w_const = dt == DType::kFloat32 ? ctx.constant_weights(1) : nullptr;
    // Large float32 products on AMX tiles where the CPU has them (gemm(), gemm_amx.h; alpha != 1
    // with C stays with oneDNN, which scales the product alone).
    const bool tiles = dt == DType::kFloat32 && amx::pays(M_, N_, K_) && (alpha_ == 1.f || !has_c_ || beta_ == 0.f);
    // Five to eight rows against constant weights (an MLP or a classifier at a small batch, at
    // inference): the weights packed once into the 32-column panels the AVX-512 kernel streams in
    // order (gemm_rows512.h), C added as its bias row where it is one.
    const bool c_as_bias = !has_c_ || beta_ == 0.f || bias_;
    few_rows_ = w_const && !ta_ && alpha_ == 1.f && M_ >= 5 && M_ <= 8 && N_ >= rows512::kPanel && K_ > 0 && !tiny_ &&
            !tiles && c_as_bias && rows512::available();
    packed_ = Tensor();
    if (few_rows_) {
      packed_ = Tensor::empty(DType::kFloat32, {rows512::packed_floats(K_, N_)});
      rows512::pack(tb_, K_, N_, w_const->data<float>(), w_const->dim(1), packed_.data<float>());
    }
    if (float_type(compute) && M_ > 0 && N_ > 0 && K_ > 0 && !tiny_ && !small_m_ && !small_n_ && !tiles && !few_rows_)
      make_dnnl(compute, has_c_ && beta_ != 0.f, w_const);
    bias_ = bias_ && op_.valid();
    widen_ = widen_ && op_.valid();
    const size_t a_n = size_t(a[0] * a[1]), b_n = size_t(b[0] * b[1]), c_n = has_c_ ? size_t(c_rows_ * c_cols_) : 0;
    ctx.request_workspace((op_.valid() ? op_.workspace_bytes() : 0) +
                          (widen_ ? 4 * (align64(a_n) + align64(b_n) + align64(size_t(M_ * N_)) + align64(c_n)) : 0));
    a_numel_ = int64_t(a_n), b_numel_ = int64_t(b_n);
  }
  void run(RunContext& ctx) override {
    const Tensor& A = ctx.input(0);
    if (widen_) {
      float* a32 = static_cast<float*>(ctx.workspace());
      float* b32 = a32 + align64(size_t(a_numel_));
      float* y32 = b32 + align64(size_t(b_numel_));
      float* c32 = y32 + align64(size_t(M_ * N_));
      void* rest = c32 + align64(has_c_ ? size_t(c_rows_ * c_cols_) : 0);
      widen_all(A.data<float16>(), a32, a_numel_);
      widen_all(ctx.input(1).data<float16>(), b32, b_numel_);
      if (has_c_ && beta_ != 0.f) {  // C widened, then broadcast into Y's rows
        widen_all(ctx.input(2).data<float16>(), c32, c_rows_ * c_cols_);
        fill_c(c32, y32);
      }
      op_.bind(DNNL_ARG_SRC, a32);
      op_.bind(DNNL_ARG_WEIGHTS, b32);
      op_.bind(DNNL_ARG_DST, y32);
      op_.execute(rest, CpuContext::of(ctx).stream());
      narrow_all(y32, ctx.output(0).data<float16>(), M_ * N_);
      return;
    }
    if (few_rows_) {
      const float* a = A.data<float>();
      const float* bias = has_c_ && beta_ != 0.f ? ctx.input(2).data<float>() : nullptr;
      float* y = ctx.output(0).data<float>();
      const int64_t panels = (N_ + rows512::kPanel - 1) / rows512::kPanel;
      // Chunks of at least ~64K multiply-adds per thread.
      const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / (M_ * K_ * rows512::kPanel));
      parallel_for(panels, grain, [&](int64_t p0, int64_t p1) {
        rows512::product(M_, K_, N_, a, K_, packed_.data<float>(), bias, y, N_, p0, p1);
      });
      return;
    }
    if (small_n_ && has_c_ && c_rows_ == 1) {  // C's one row added in the dot products' epilogue
      small_n_gemm(tb_, M_, N_, K_, alpha_, A.data<float>(), K_, ctx.input(1).data<float>(), ctx.input(1).dim(1),
                   beta_, ctx.output(0).data<float>(), N_, ctx.input(2).data<float>(), c_cols_ == 1 ? 0 : 1);
      return;
    }
    if (small_m_ || small_n_) {
      float* y = ctx.output(0).data<float>();
      const bool use_c = has_c_ && beta_ != 0.f;
      if (use_c) fill_c(ctx.input(2).data<float>(), y);
      const float* b = ctx.input(1).data<float>();
      if (small_m_) small_m_gemm(tb_, M_, N_, K_, alpha_, A.data<float>(), ta_ ? M_ : K_, b, ctx.input(1).dim(1),
                                 use_c ? beta_ : 0.f, y, N_);
      else small_n_gemm(tb_, M_, N_, K_, alpha_, A.data<float>(), K_, b, ctx.input(1).dim(1), use_c ? beta_ : 0.f, y, N_);
      return;
    }
    if (op_.valid()) {
      void* y = ctx.output(0).raw_data();
      if (bias_) {
        op_.bind(DNNL_ARG_BIAS, ctx.input(2).raw_data());
      } else if (has_c_ && beta_ != 0.f) {
        if (A.dtype() == DType::kBFloat16) fill_c(ctx.input(2).data<bfloat16>(), static_cast<bfloat16*>(y));
        else fill_c(ctx.input(2).data<float>(), static_cast<float*>(y));
      }
      op_.bind(DNNL_ARG_SRC, A.raw_data());
      op_.bind(DNNL_ARG_WEIGHTS, ctx.input(1).raw_data());
      op_.bind(DNNL_ARG_DST, y);
      op_.execute(ctx.workspace(), CpuContext::of(ctx).stream());
      return;
    }
    std::optional<ThreadScope> one;
    if (tiny_) one.emplace(1);  // waking a sleeping thread costs more than the product
    dispatch<MatMulTypes>(A.dtype(), ctx.node(), [&]<class T>() {
      T* y = ctx.output(0).data<T>();
      const bool use_c = has_c_ && beta_ != 0.f;
      if (use_c) fill_c(ctx.input(2).data<T>(), y);
      if (K_ == 0 || M_ == 0 || N_ == 0) {  // Y = beta * C (or 0)
        for (int64_t i = 0; i < M_ * N_; ++i) y[i] = use_c ? T(compute_t<T>(beta_) * compute_t<T>(y[i])) : T(0.f);
        return;
      }
      matmul2d<T>(ta_, tb_, M_, N_, K_, alpha_, A.data<T>(), A.dim(1), ctx.input(1).data<T>(), ctx.input(1).dim(1),
                  use_c ? double(beta_) : 0.0, y, N_);
    });
  }

 private:
  // Y = C broadcast to [M, N].
  template <class T>
  void fill_c(const T* c, T* y) const {
    parallel_for(M_, grain_for(N_), [&](int64_t m0, int64_t m1) {
      for (int64_t i = m0; i < m1; ++i) {
        const T* cr = c + (c_rows_ == 1 ? 0 : i) * c_cols_;
        T* yr = y + i * N_;
        if (c_cols_ == 1) std::fill(yr, yr + N_, cr[0]);
        else std::copy(cr, cr + N_, yr);
      }
    });
  }
  // float32 and bfloat16: a oneDNN matmul with alpha as output scale and beta * Y (Y = C) as a
  // sum post-op, or C as its bias (bias_). Constant weights (w_const) in the layout it picks.
  void make_dnnl(DType dt, bool accumulate, const Tensor* w_const) {
    using dnnl::memory;
    auto md = [dt](int64_t rows, int64_t cols, bool trans) {
      return memory::desc({rows, cols}, *float_type(dt), trans ? memory::dims{1, rows} : memory::dims{cols, 1});
    };
    const memory::desc ad = md(M_, K_, ta_), bd = md(K_, N_, tb_), cd = md(M_, N_, false);
    dnnl::primitive_attr attr = scaled_attr(alpha_);
    if (accumulate && !bias_) {
      dnnl::post_ops po;
      po.append_sum(beta_);
      attr.set_post_ops(po);
    }
    init_matmul(op_, ad, bd, cd, bias_, attr, reorder_plain_weights(dt, K_, N_, tb_), w_const ? w_const->raw_data() : nullptr,
                M_ * K_ * N_);
  }

  bool ta_, tb_;
  float alpha_, beta_;
  bool legacy_no_broadcast_;
  bool sparse_a_ = false;
  dnnl_util::DnnlOp op_;
  bool has_c_ = false, tiny_ = false, widen_ = false, small_m_ = false, small_n_ = false, bias_ = false;
  bool few_rows_ = false;  // the few-rows kernel over packed_ (op(B) in rows512's panels)
  Tensor packed_;
  int64_t M_ = 0, K_ = 0, N_ = 0, c_rows_ = 1, c_cols_ = 1, a_numel_ = 0, b_numel_ = 0;
};

// ---------------------------------------------------------------- Einsum
// Strided gather with summation: out[o] = sum_s in[off(o) + off(s)], out contiguous. Covers
// transposes, diagonals (a repeated label's stride is the sum of its dims' strides), traces, sums and
// broadcast expansion (stride 0).
struct GatherSum {
  Shape out_dims, sum_dims;
  std::vector<int64_t> out_strides, sum_strides;  // in the input

  template <class T>
  void run(const T* in, T* out) const {
    using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, T>;
    const int64_t n = shape_numel(out_dims), ns = shape_numel(sum_dims);
    const size_t r = out_dims.size(), rs = sum_dims.size();
    parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(ns, 1)), [&](int64_t o0, int64_t o1) {
      std::vector<int64_t> idx(r), sidx(rs);
      int64_t off = 0, rem = o0;
      for (size_t d = r; d-- > 0;) {
        idx[d] = rem % out_dims[d];
        rem /= out_dims[d];
        off += idx[d] * out_strides[d];
      }
      for (int64_t o = o0; o < o1; ++o) {
        if (ns == 1) {
          out[o] = in[off];
        } else {
          Acc acc = Acc(0);
          int64_t soff = 0;
          std::fill(sidx.begin(), sidx.end(), 0);
          for (int64_t s = 0; s < ns; ++s) {
            acc = wrap_add(acc, Acc(compute_t<T>(in[off + soff])));
            for (size_t d = rs; d-- > 0;) {
              soff += sum_strides[d];
              if (++sidx[d] < sum_dims[d]) break;
              soff -= sum_strides[d] * sum_dims[d];
              sidx[d] = 0;
            }
          }
          out[o] = T(compute_t<T>(acc));
        }
        for (size_t d = r; d-- > 0;) {
          off += out_strides[d];
          if (++idx[d] < out_dims[d]) break;
          off -= out_strides[d] * out_dims[d];
          idx[d] = 0;
        }
      }
    });
  }
};

class EinsumKernel final : public Kernel {
 public:
  explicit EinsumKernel(const KernelInfo& info) : equation_(info.attr_string("equation")) {}

  void prepare(PrepareContext& ctx) override {
    const size_t n = ctx.num_inputs();
    const shape::EinsumGeom g = shape::einsum_geometry(ctx, equation_);
    const shape::EinsumSpec& spec = g.spec;
    const std::vector<int64_t>& size = g.size;
    dt_ = ctx.input_dtype(0);
    steps_.clear();
    buffers_.clear();
    elem_ = dtype_size(dt_);

    std::vector<Operand> ops;
    for (size_t i = 0; i < n; ++i) ops.push_back({spec.inputs[i], ctx.input_shape(i), -1 - int(i)});
    auto in_any = [](const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); };

    if (n == 1) {  // one gather does diagonals, sums and the transpose
      gather(ops[0], spec.output, size, true);
    } else {
      // Per operand: diagonals, and sums over labels no other operand or the output uses.
      for (size_t i = 0; i < n; ++i) {
        std::vector<int> keep;
        for (int l : ops[i].labels) {
          bool needed = in_any(spec.output, l);
          for (size_t j = 0; j < n && !needed; ++j) needed = j != i && in_any(spec.inputs[j], l);
          if (needed && !in_any(keep, l)) keep.push_back(l);
        }
        if (keep != ops[i].labels) ops[i] = gather(ops[i], keep, size, false);
      }
      // Contract left to right; the last product writes the output when its labels are in order.
      Operand cur = ops[0];
      for (size_t j = 1; j < n; ++j) {
        std::vector<int> needed = spec.output;
        for (size_t k = j + 1; k < n; ++k) needed.insert(needed.end(), spec.inputs[k].begin(), spec.inputs[k].end());
        cur = contract(ctx, cur, ops[j], needed, size, j + 1 == n ? &spec.output : nullptr);
      }
      if (cur.buf != kOutput) gather(cur, spec.output, size, true);
    }
    ctx.set_output(0, dt_, g.output);
    size_t ws = 0;
    for (auto& b : buffers_) {
      b.offset = ws;
      ws += (b.bytes + 63) / 64 * 64;
    }
    mm_ws_offset_ = ws;
    for (const auto& s : steps_) ws = std::max(ws, mm_ws_offset_ + s.mm.workspace_bytes());
    ctx.request_workspace(ws);
  }

  void run(RunContext& ctx) override {
    char* ws = static_cast<char*>(ctx.workspace());
    auto ptr = [&](int buf) -> void* {
      if (buf == kOutput) return ctx.output(0).raw_data();
      if (buf < 0) return const_cast<void*>(ctx.input(size_t(-1 - buf)).raw_data());
      return ws + buffers_[size_t(buf)].offset;
    };
    for (auto& s : steps_) {
      if (s.kind == Step::kGather) {
        dispatch<NumericTypes>(dt_, ctx.node(), [&]<class T>() {
          s.gather.run(static_cast<const T*>(ptr(s.a)), static_cast<T*>(ptr(s.dst)));
        });
      } else {
        s.mm.run(ptr(s.a), ptr(s.b), ptr(s.dst), ws + mm_ws_offset_, ctx.node(), CpuContext::of(ctx).stream());
      }
    }
  }

 private:
  static constexpr int kOutput = 1 << 30;
  struct Operand {
    std::vector<int> labels;
    Shape dims;
    int buf;  // -1-i: input i; kOutput; else a workspace buffer
  };
  struct Step {
    enum Kind { kGather, kMatMul } kind = kGather;
    int a = 0, b = 0, dst = 0;
    GatherSum gather;
    BatchedMatMul mm;
  };
  struct Buffer {
    size_t bytes, offset;
  };

  int new_buffer(const Shape& dims) {
    buffers_.push_back({size_t(shape_numel(dims)) * elem_, 0});
    return int(buffers_.size()) - 1;
  }

  // `src` rearranged to `labels` (each once) at full label sizes; labels of src not listed are summed.
  Operand gather(const Operand& src, const std::vector<int>& labels, const std::vector<int64_t>& size, bool to_output) {
    const auto st = contiguous_strides(src.dims);
    Step s;
    auto stride_of = [&](int l) {
      int64_t t = 0;
      for (size_t d = 0; d < src.labels.size(); ++d)
        if (src.labels[d] == l && src.dims[d] != 1) t += st[d];
      return t;
    };
    for (int l : labels) {
      s.gather.out_dims.push_back(size[size_t(l)]);
      s.gather.out_strides.push_back(stride_of(l));
    }
    std::vector<int> summed;
    for (size_t d = 0; d < src.labels.size(); ++d) {
      const int l = src.labels[d];
      if (std::find(labels.begin(), labels.end(), l) != labels.end() || std::find(summed.begin(), summed.end(), l) != summed.end())
        continue;
      summed.push_back(l);
      s.gather.sum_dims.push_back(src.dims[d]);
      s.gather.sum_strides.push_back(stride_of(l));
    }
    Operand out{labels, s.gather.out_dims, to_output ? kOutput : new_buffer(s.gather.out_dims)};
    s.a = src.buf;
    s.dst = out.buf;
    steps_.push_back(std::move(s));
    return out;
  }

  // A (x) B keeping `needed` labels: batch = A∩B∩needed, contracted = A∩B∖needed,
  // A-only and B-only labels are kept (the per-operand pass summed the others). `output` (last
  // product only) lets the product write the node's output directly.
  Operand contract(const PrepareContext& ctx, const Operand& A, const Operand& B, const std::vector<int>& needed,
                   const std::vector<int64_t>& size, const std::vector<int>* output) {
    auto has = [](const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); };
    std::vector<int> batch, afree, contr, bfree;
    for (int l : A.labels) {
      if (!has(B.labels, l)) afree.push_back(l);
      else if (has(needed, l)) batch.push_back(l);
      else contr.push_back(l);
    }
    for (int l : B.labels)
      if (!has(A.labels, l)) bfree.push_back(l);
    auto cat = [](std::initializer_list<const std::vector<int>*> parts) {
      std::vector<int> r;
      for (auto* p : parts) r.insert(r.end(), p->begin(), p->end());
      return r;
    };
    auto full = [&](const Operand& o) {
      for (size_t d = 0; d < o.labels.size(); ++d)
        if (o.dims[d] != size[size_t(o.labels[d])]) return false;
      return true;
    };
    auto prod = [&](const std::vector<int>& ls) {
      int64_t p = 1;
      for (int l : ls) p *= size[size_t(l)];
      return p;
    };
    // A as [batch, afree, contr] or [batch, contr, afree] (read transposed); B as [batch, contr, bfree]
    // or [batch, bfree, contr]; anything else (or a broadcast dim to expand) is gathered first.
    auto layout = [&](const Operand& o, const std::vector<int>& plain, const std::vector<int>& trans, bool* t) {
      *t = false;
      if (full(o) && o.labels == plain) return o;
      if (full(o) && o.labels == trans) {
        *t = true;
        return o;
      }
      return gather(o, plain, size, false);
    };
    bool ta, tb;
    const Operand a = layout(A, cat({&batch, &afree, &contr}), cat({&batch, &contr, &afree}), &ta);
    const Operand b = layout(B, cat({&batch, &contr, &bfree}), cat({&batch, &bfree, &contr}), &tb);
    Operand out;
    out.labels = cat({&batch, &afree, &bfree});
    for (int l : out.labels) out.dims.push_back(size[size_t(l)]);
    out.buf = output && out.labels == *output ? kOutput : new_buffer(out.dims);
    Shape bd;
    for (int l : batch) bd.push_back(size[size_t(l)]);
    Step s;
    s.kind = Step::kMatMul;
    s.a = a.buf, s.b = b.buf, s.dst = out.buf;
    if (!s.mm.prepare(dt_, bd, bd, prod(afree), prod(contr), prod(bfree), ta, tb))
      ctx.fail("internal error: einsum batch mismatch");
    steps_.push_back(std::move(s));
    return out;
  }

  std::string equation_;
  DType dt_ = DType::kFloat32;
  size_t elem_ = 4;
  std::vector<Step> steps_;
  std::vector<Buffer> buffers_;
  size_t mm_ws_offset_ = 0;
};

}  // namespace

void register_linalg(KernelRegistry& r) {
  r.add<MatMulKernel>("MatMul", 1, kMaxOpsetAll);
  r.add<GemmKernel>("Gemm", 1, kMaxOpsetAll);
  r.add<EinsumKernel>("Einsum", 12, kMaxOpsetAll);
  r.add(ops::kMicrosoftDomain, "SparseToDenseMatMul", 1, kMaxOpsetAll,
        [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<GemmKernel>(info, true); });
  r.add(ops::kDomain, "FusedMatMul", 1, kMaxOpsetAll,
        [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<FusedMatMulKernel>(info); });
}

}  // namespace onnxtrain::kernels::cpu
