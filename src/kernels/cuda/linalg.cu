// Matrix products on the CUDA provider through cuBLASLt: MatMul (numpy batching: equal batch
// dims, or one operand without batch dims, which is broadcast with a zero batch stride or folded
// into M), Gemm (C broadcast into Y first, then Y = alpha op(A) op(B) + beta Y) and
// com.onnxtrain FusedMatMul. float32 computes in float32 (TF32 when ONNXTRAIN_CUDA_TF32=1, as
// torch.backends.cuda.matmul.allow_tf32), float64 in float64, float16 and bfloat16 with float32
// accumulation. Other batch broadcasts decline (the node runs on the CPU provider).
//
// Row-major C [m, n] is column-major C^T [n, m] = op(B)^T op(A)^T: cuBLASLt multiplies B's and A's
// memory read column-major, with no copies.
#include <cublasLt.h>

#include "kernels/cuda/broadcast.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/cuda_types.h"
#include "kernels/shape/matmul.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_error<RuntimeError>("cuBLASLt: ", what, " failed with status ", int(s));
}

cudaDataType_t lt_type(DType dt) {
  switch (dt) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kFloat64: return CUDA_R_64F;
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

bool lt_supported(DType dt) {
  return dt == DType::kFloat32 || dt == DType::kFloat64 || dt == DType::kFloat16 || dt == DType::kBFloat16;
}

// One batched product, described once (per plan) and run every step: Y = alpha op(A) op(B) + beta Y.
struct Product {
  DType dt = DType::kFloat32;
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_y = 0;
  float alpha = 1.f, beta = 0.f;

  // cuBLASLt objects, made on first run.
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ly = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ready = false;

  Product() = default;
  Product(const Product&) = delete;
  Product& operator=(const Product&) = delete;
  ~Product() { reset(); }

  void reset() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ly) cublasLtMatrixLayoutDestroy(ly);
    op = nullptr, la = lb = ly = nullptr;
    ready = false;
  }

  static void layout(cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                     int64_t batch, int64_t stride) {
    check_lt(cublasLtMatrixLayoutCreate(l, t, uint64_t(rows), uint64_t(cols), ld), "MatrixLayoutCreate");
    if (batch > 1) {
      const int32_t b = int32_t(batch);
      check_lt(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof(b)), "batch count");
      check_lt(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
               "batch stride");
    }
  }

  void make(CudaContext& c, const ir::Node& node) {
    reset();
    const cudaDataType_t t = lt_type(dt);
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cudaDataType_t scale = CUDA_R_32F;
    if (dt == DType::kFloat64) compute = CUBLAS_COMPUTE_64F, scale = CUDA_R_64F;
    else if (dt == DType::kFloat32 && tf32_allowed()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    check_lt(cublasLtMatmulDescCreate(&op, compute, scale), "MatmulDescCreate");
    // Column-major D^T [n, m] = opB(B_cm) opA(A_cm): B's memory is the first operand.
    const cublasOperation_t first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof(first)), "transa");
    check_lt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof(second)), "transb");
    // B row-major [k, n] = column-major [n, k] (ld n); transposed: [n, k] row-major = [k, n] (ld k).
    layout(&lb, t, tb ? k : n, tb ? n : k, tb ? k : n, batch, stride_b);
    layout(&la, t, ta ? m : k, ta ? k : m, ta ? m : k, batch, stride_a);
    layout(&ly, t, n, m, n, batch, stride_y);
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    const uint64_t ws = c.lt_workspace_bytes();
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(c.lt_handle()), op, lb, la,
                                                            ly, ly, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0)
      throw_error<RuntimeError>(node.describe(), ": cuBLASLt has no algorithm for ", dtype_name(dt), " [", m, "x", k,
                                "] x [", k, "x", n, "] batch ", batch, " (status ", int(s), ")");
    algo = result.algo;
    ready = true;
  }

  void run(CudaContext& c, const ir::Node& node, const void* A, const void* B, void* Y) {
    if (m == 0 || n == 0) return;
    if (!ready) make(c, node);
    const double alpha_d = alpha, beta_d = beta;
    const void* pa = dt == DType::kFloat64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha);
    const void* pb = dt == DType::kFloat64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta);
    check_lt(cublasLtMatmul(static_cast<cublasLtHandle_t>(c.lt_handle()), op, pa, B, lb, A, la, pb, Y, ly, Y, ly, &algo,
                            c.lt_workspace(), c.lt_workspace_bytes(), c.stream()),
             "Matmul");
    count_launch();
  }
};

// Batch layout of op(A) [a_batch, m, k] @ op(B) [b_batch, k, n] -> [batch, m, n]; false when the
// batch broadcast is neither equal nor one-sided.
bool plan_batch(const shape::MatMulGeom& g, bool ta, Product& p) {
  const int64_t na = shape_numel(g.a_batch), nb = shape_numel(g.b_batch), nbatch = shape_numel(g.batch);
  p.m = g.M, p.n = g.N, p.k = g.K;
  p.stride_y = g.M * g.N;
  if (na == nbatch && nb == nbatch) {
    // Equal batches (a broadcast of ones on either side keeps the element count).
    p.batch = nbatch;
    p.stride_a = g.M * g.K, p.stride_b = g.K * g.N;
    return true;
  }
  if (nb == 1 && na == nbatch) {
    if (!ta) {  // fold A's batch into M: one product [batch * m, k] @ [k, n]
      p.m = g.M * nbatch, p.batch = 1;
      p.stride_a = p.stride_b = p.stride_y = 0;
      return true;
    }
    p.batch = nbatch, p.stride_a = g.M * g.K, p.stride_b = 0;
    return true;
  }
  if (na == 1 && nb == nbatch) {
    p.batch = nbatch, p.stride_a = 0, p.stride_b = g.K * g.N;
    return true;
  }
  return false;
}

void check_types(const PrepareContext& ctx, size_t n) {
  const DType dt = ctx.input_dtype(0);
  for (size_t i = 1; i < n; ++i)
    if (ctx.has_input(i) && ctx.input_dtype(i) != dt)
      ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(i)), ", expected ", dtype_name(dt));
  if (!lt_supported(dt))
    throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt), " on the CUDA provider");
}

class MatMulKernel final : public Kernel {
 public:
  MatMulKernel(const KernelInfo& info, bool fused) : fused_(fused) {
    if (fused) {
      ta_ = info.attr_int("transA", 0) != 0, tb_ = info.attr_int("transB", 0) != 0;
      alpha_ = info.attr_float("alpha", 1.f);
      if (info.attr_int("transBatchA", 0) || info.attr_int("transBatchB", 0))
        info.fail("transBatchA / transBatchB are not implemented");
      if (info.node().inputs.size() > 2 && !info.node().inputs[2].empty())
        info.fail("the bias input C is not implemented on CUDA");
    }
  }
  void prepare(PrepareContext& ctx) override {
    check_types(ctx, 2);
    const shape::MatMulGeom g = fused_ ? shape::fused_matmul_geometry(ctx, ctx.input_shape(0), ctx.input_shape(1), ta_, tb_)
                                       : shape::matmul_geometry(ctx, ctx.input_shape(0), ctx.input_shape(1));
    p_.reset();
    p_.dt = ctx.input_dtype(0);
    p_.ta = ta_, p_.tb = tb_, p_.alpha = alpha_, p_.beta = 0.f;
    if (!plan_batch(g, ta_, p_))
      throw_error<NotImplemented>(ctx.node().describe(), ": batch dims ", shape_to_string(g.a_batch), " and ",
                                  shape_to_string(g.b_batch), " broadcast on both sides (CUDA provider)");
    if (g.K == 0) zero_ = true;
    ctx.set_output(0, p_.dt, g.output);
  }
  void run(RunContext& ctx) override {
    CudaContext& c = CudaContext::of(ctx);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (zero_) {  // an empty inner dimension: the product is zeros
      OT_CUDA(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), c.stream()));
      return;
    }
    p_.run(c, ctx.node(), ctx.input(0).raw_data(), ctx.input(1).raw_data(), y.raw_data());
  }

 private:
  bool fused_;
  bool ta_ = false, tb_ = false;
  float alpha_ = 1.f;
  bool zero_ = false;
  Product p_;
};

template <class T>
__global__ void broadcast_copy(const T* c, T* y, int64_t n, Bcast g) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = c[g.offset(0, i)];
}

class GemmKernel final : public Kernel {
 public:
  explicit GemmKernel(const KernelInfo& info)
      : ta_(info.attr_int("transA", 0) != 0), tb_(info.attr_int("transB", 0) != 0),
        alpha_(info.attr_float("alpha", 1.f)), beta_(info.attr_float("beta", 1.f)) {
    if (info.opset() < 7) throw_error<NotImplemented>(info.node().describe(), ": Gemm before opset 7 on the CUDA provider");
  }
  void prepare(PrepareContext& ctx) override {
    check_types(ctx, 3);
    has_c_ = ctx.has_input(2);
    if (!has_c_ && ctx.opset() < 11) ctx.fail("input C is required before opset 11");
    const Shape* c = has_c_ ? &ctx.input_shape(2) : nullptr;
    const shape::MatMulGeom g = shape::gemm_geometry(ctx, ctx.input_shape(0), ctx.input_shape(1), c, ta_, tb_, false);
    p_.reset();
    p_.dt = ctx.input_dtype(0);
    p_.ta = ta_, p_.tb = tb_, p_.alpha = alpha_;
    p_.m = g.M, p_.n = g.N, p_.k = g.K, p_.batch = 1;
    use_c_ = has_c_ && beta_ != 0.f;
    p_.beta = use_c_ ? beta_ : 0.f;
    if (use_c_ && !make_bcast(g.output, {*c}, &cb_)) ctx.fail("C does not broadcast");
    ctx.set_output(0, p_.dt, g.output);
  }
  void run(RunContext& ctx) override {
    CudaContext& c = CudaContext::of(ctx);
    Tensor& y = ctx.output(0);
    const int64_t n = y.numel();
    if (n == 0) return;
    if (use_c_) {
      const Tensor& cin = ctx.input(2);
      switch (dtype_size(y.dtype())) {
        case 2: broadcast_copy<<<grid_for(n, c), 256, 0, c.stream()>>>(static_cast<const uint16_t*>(cin.raw_data()), static_cast<uint16_t*>(y.raw_data()), n, cb_); break;
        case 4: broadcast_copy<<<grid_for(n, c), 256, 0, c.stream()>>>(static_cast<const uint32_t*>(cin.raw_data()), static_cast<uint32_t*>(y.raw_data()), n, cb_); break;
        default: broadcast_copy<<<grid_for(n, c), 256, 0, c.stream()>>>(static_cast<const uint64_t*>(cin.raw_data()), static_cast<uint64_t*>(y.raw_data()), n, cb_); break;
      }
      check_launch("Gemm (C)");
    }
    if (p_.k == 0) {
      if (!use_c_) OT_CUDA(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), c.stream()));
      else if (beta_ != 1.f) throw_error<NotImplemented>(ctx.node().describe(), ": empty K with beta != 1 on the CUDA provider");
      return;
    }
    p_.run(c, ctx.node(), ctx.input(0).raw_data(), ctx.input(1).raw_data(), y.raw_data());
  }

 private:
  bool ta_, tb_;
  float alpha_, beta_;
  bool has_c_ = false, use_c_ = false;
  Bcast cb_;
  Product p_;
};

}  // namespace

void register_linalg(KernelRegistry& r) {
  r.add("MatMul", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<MatMulKernel>(i, false); });
  r.add("Gemm", 1, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GemmKernel>(i); });
  r.add(ops::kDomain, "FusedMatMul", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<MatMulKernel>(i, true); });
}

}  // namespace onnxtrain::kernels::cuda
