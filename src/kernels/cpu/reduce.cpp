// Reductions, scans, the softmax family and TopK.
//   Reduce*(X, axes)               Y: shape(X) with reduced axes set to 1 (keepdims) or removed
//   ArgMax/ArgMin(X)               Y: int64, shape(X) with `axis` set to 1 (keepdims) or removed
//   CumSum(X, axis)                Y: shape(X), Y[..i..] = sum X[..j..] over j <= i (j < i exclusive)
//   Softmax/LogSoftmax/Hardmax(X)  Y: shape(X); softmax = exp(x - max) / sum exp(x - max)
//   TopK(X, k)                     Values: shape(X) with dim[axis] = k; Indices: int64, same shape
//   com.onnxtrain.SoftmaxGrad / LogSoftmaxGrad(dY, Y)  dX: shape(Y) (backward of Softmax / LogSoftmax)
//
// One reduction engine serves every Reduce*: the input is collapsed (size-1 dims dropped,
// neighbouring dims with the same reduced/kept status merged). When the innermost collapsed dim is
// reduced, each output is a contiguous row reduction (16 accumulator lanes); when it is kept, each
// output block accumulates whole input rows (vectorized along the contiguous dim). Sums of float32
// accumulate in float64, float16/bfloat16 in float32, integers in 64 bits.
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/common.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cpu/vmath512.h"
#include "kernels/registry.h"
#include "kernels/shape/reduce.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

using shape::axes_mask;
using shape::AxisSplit;
using shape::read_ints;
using shape::softmax_split;

namespace {

constexpr int kMaxWalkDims = 32;

// ---------------------------------------------------------------- strided walks
// A row-major walk over a few dims of a contiguous tensor: `off` is the element offset of the
// current index. Copied per thread (the index is mutable state).
struct Walk {
  int n = 0;
  int64_t dims[kMaxWalkDims] = {}, strides[kMaxWalkDims] = {};
  int64_t idx[kMaxWalkDims] = {}, off = 0;

  void push(int64_t dim, int64_t stride) {
    dims[n] = dim;
    strides[n] = stride;
    ++n;
  }
  int64_t count() const {
    int64_t c = 1;
    for (int d = 0; d < n; ++d) c *= dims[d];
    return c;
  }
  void seek(int64_t flat) {
    off = 0;
    for (int d = n; d-- > 0;) {
      idx[d] = flat % dims[d];
      flat /= dims[d];
      off += idx[d] * strides[d];
    }
  }
  void next() {
    for (int d = n; d-- > 0;) {
      off += strides[d];
      if (++idx[d] < dims[d]) return;
      off -= strides[d] * dims[d];
      idx[d] = 0;
    }
  }
};

// ---------------------------------------------------------------- reduction layout
struct ReduceLayout {
  Shape out_shape;
  int64_t out_numel = 0, red_numel = 0;
  bool row = true;    // innermost collapsed dim reduced: contiguous row reductions of `inner`
  int64_t inner = 1;  // row: reduced run length; column: kept run length
  Walk kept;          // kept dims (without the innermost kept run in column mode)
  Walk red;           // reduced dims (without the innermost reduced run in row mode)

  template <class Ctx>
  void init(const Ctx& ctx, const Shape& in, const std::vector<bool>& mask, bool keepdims) {
    const shape::ReduceGeometry r = shape::reduce_geometry(in, mask, keepdims);
    const size_t runs = r.kept.size() + r.red.size() + 1;
    if (runs > size_t(kMaxWalkDims)) ctx.fail("too many dims to reduce (", runs, " after collapsing)");
    out_shape = r.out_shape;
    out_numel = r.out_numel, red_numel = r.red_numel;
    row = r.row, inner = r.inner;
    kept = Walk{};
    red = Walk{};
    for (const auto& k : r.kept) kept.push(k.dim, k.stride);
    for (const auto& k : r.red) red.push(k.dim, k.stride);
  }
};

// ---------------------------------------------------------------- reduction operators
enum class RK { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

template <class T>
using sum_acc_t = std::conditional_t<
    std::is_floating_point_v<compute_t<T>>, std::conditional_t<std::is_same_v<T, double> || std::is_same_v<T, float>, double, float>,
    std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

// map: element -> partial; comb: associative combine (of partials or accumulators); fin:
// accumulator -> output. `shift` (LogSumExp only) holds the per-output max subtracted before exp.
// Partials P are float32 for float32 sums: runs of at most kFold elements per lane are summed in
// float32, then folded into the float64 accumulator A. Measured on N(0,1) [64, 65536] float32 rows
// and columns: worst relative error 86-108 float32 ulps (torch 228-367, numpy 560-10051, float64
// accumulation 0.9) at torch's speed; float64 accumulation throughout was 1.2-1.3x slower.
constexpr int64_t kFold = 8;

template <RK K, class T>
struct RedOp {
  using C = compute_t<T>;
  static constexpr bool kMinMax = K == RK::kMax || K == RK::kMin, kMin = K == RK::kMin;
  static constexpr bool kAdditive = !kMinMax && K != RK::kProd && K != RK::kLogSumExp;
  using A = std::conditional_t<kMinMax, C, std::conditional_t<K == RK::kLogSumExp, double, sum_acc_t<T>>>;
  using P = std::conditional_t<kAdditive && std::is_same_v<T, float>, float, A>;
  const double* shift = nullptr;

  static A init() {
    if constexpr (K == RK::kProd) return A(1);
    if constexpr (K == RK::kMax)
      return std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
    if constexpr (K == RK::kMin)
      return std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
    return A(0);
  }
  P map(C x, int64_t o) const {
    if constexpr (K == RK::kL1) {
      if constexpr (std::is_unsigned_v<C>)
        return P(x);
      else if constexpr (std::is_integral_v<C>)
        return P(x < C(0) ? wrap_neg(P(x)) : P(x));
      else
        return P(x < C(0) ? C(-x) : x);
    }
    if constexpr (K == RK::kL2 || K == RK::kSumSquare) return wrap_mul(P(x), P(x));
    if constexpr (K == RK::kLogSumExp) return P(std::exp(double(x) - shift[o]));
    return P(x);
  }
  // Float min/max lanes hold no NaN (plain vmin/vmax); NaN is flagged in Flag lanes apart.
  static constexpr bool kNanLanes = kMinMax && std::is_floating_point_v<C>;
  using Flag = std::conditional_t<sizeof(C) == 4, int32_t, int64_t>;
  static C pick(C v, C lane) {
    if constexpr (kMin)
      return v < lane ? v : lane;
    else
      return v > lane ? v : lane;
  }
  template <class V>
  static V comb(V a, V b) {
    if constexpr (K == RK::kMax) return (b > a || b != b) ? b : a;  // NaN propagates
    if constexpr (K == RK::kMin) return (b < a || b != b) ? b : a;
    if constexpr (K == RK::kProd) return wrap_mul(a, b);
    return wrap_add(a, b);
  }
  T fin(A a, int64_t o, int64_t n) const {
    if constexpr (K == RK::kMean) {
      // Integers: exact division truncating toward zero, as onnxruntime's integer mean (a float64
      // quotient lost the low bits past 2^53 and overflowed the conversion near the type's limits).
      if constexpr (std::is_integral_v<A>) return n ? T(a / A(n)) : T(0);
      return T(double(a) / double(n));
    }
    if constexpr (K == RK::kL2) return to<T>(std::sqrt(double(a)));
    if constexpr (K == RK::kLogSum) return to<T>(std::log(double(a)));
    if constexpr (K == RK::kLogSumExp) return to<T>(std::log(double(a)) + shift[o]);
    return T(a);
  }
  // double -> T; integers saturate instead of hitting undefined behaviour on inf/NaN.
  template <class U>
  static U to(double v) {
    if constexpr (std::is_integral_v<U>) {
      if (!(v == v)) return U(0);
      if (v <= double(std::numeric_limits<U>::lowest())) return std::numeric_limits<U>::lowest();
      if (v >= double(std::numeric_limits<U>::max())) return std::numeric_limits<U>::max();
      return U(v);
    } else {
      return U(v);
    }
  }
};

// LogSumExp's first pass: the per-output max as float64 (0 when infinite, so that exp(x - max)
// stays defined: all -inf gives log(0) = -inf, any +inf gives +inf).
template <class T>
struct ShiftOp : RedOp<RK::kMax, T> {
  double fin(typename RedOp<RK::kMax, T>::A a, int64_t, int64_t) const {
    const double m = double(a);
    return std::isfinite(m) || m != m ? m : 0.0;
  }
};

// Reduces a contiguous run p[0..n) with W independent lanes (four vectors: vectorizes and hides
// latency). Float min/max track NaN in separate lanes so the value lanes are plain vmax/vmin.
template <class Op, class T>
typename Op::A reduce_run(const Op& op, const T* p, int64_t n, int64_t o) {
  using A = typename Op::A;
  using C = typename Op::C;
  using P = typename Op::P;
  constexpr int W = int(128 / sizeof(P));
  int64_t j = 0;
  A acc = Op::init();
  if constexpr (Op::kNanLanes) {
    using I = typename Op::Flag;
    C lanes[W];
    I nan[W];
    for (int k = 0; k < W; ++k) {
      lanes[k] = acc;
      nan[k] = 0;
    }
    for (; j + W <= n; j += W) {
#pragma omp simd
      for (int k = 0; k < W; ++k) {
        const C v = C(p[j + k]);
        lanes[k] = Op::pick(v, lanes[k]);
        nan[k] |= -I(v != v);
      }
    }
    for (int w = W / 2; w > 0; w /= 2)  // value lanes hold no NaN: plain min/max
      for (int k = 0; k < w; ++k) {
        lanes[k] = Op::kMin ? std::min(lanes[k], lanes[k + w]) : std::max(lanes[k], lanes[k + w]);
        nan[k] |= nan[k + w];
      }
    if (nan[0]) return std::numeric_limits<C>::quiet_NaN();
    acc = lanes[0];
  } else {
    if (n >= W) {
      A folded[W];
      for (int k = 0; k < W; ++k) folded[k] = acc;
      while (n - j >= W) {
        P lanes[W];
        for (int k = 0; k < W; ++k) lanes[k] = P(Op::init());
        const int64_t end = j + std::min((n - j) / W, kFold) * W;
        for (; j < end; j += W) {
#pragma omp simd
          for (int k = 0; k < W; ++k) lanes[k] = Op::comb(lanes[k], op.map(C(p[j + k]), o));
        }
#pragma omp simd
        for (int k = 0; k < W; ++k) folded[k] = Op::comb(folded[k], A(lanes[k]));
      }
      for (int w = W / 2; w > 0; w /= 2)
        for (int k = 0; k < w; ++k) folded[k] = Op::comb(folded[k], folded[k + w]);
      acc = folded[0];
    }
  }
  for (; j < n; ++j) acc = Op::comb(acc, A(op.map(C(p[j]), o)));
  return acc;
}

template <class Op, class T, class Y>
void reduce(const ReduceLayout& L, const Op& op, const T* x, Y* y) {
  using A = typename Op::A;
  using C = typename Op::C;
  using P = typename Op::P;
  if (L.out_numel == 0) return;
  if (L.red_numel == 0) {
    for (int64_t o = 0; o < L.out_numel; ++o) y[o] = op.fin(Op::init(), o, 0);
    return;
  }
  const int64_t nred = L.red.count();
  if (L.row) {
    parallel_for(L.out_numel, grain_for(L.red_numel), [&](int64_t o0, int64_t o1) {
      Walk kw = L.kept, rw = L.red;
      kw.seek(o0);
      for (int64_t o = o0; o < o1; ++o, kw.next()) {
        A acc = Op::init();
        rw.seek(0);
        for (int64_t r = 0; r < nred; ++r, rw.next())
          acc = Op::comb(acc, reduce_run(op, x + kw.off + rw.off, L.inner, o));
        y[o] = op.fin(acc, o, L.red_numel);
      }
    });
    return;
  }
  // Column mode: blocks of B outputs along the contiguous kept run accumulate whole rows, in
  // partials folded into the accumulators every kFold rows.
  constexpr int64_t B = 256;
  const int64_t I = L.inner, nb = (I + B - 1) / B, nk = L.kept.count();
  const int64_t block_elems = std::min(I, B) * L.red_numel;
  parallel_for(nk * nb, grain_for(block_elems), [&](int64_t t0, int64_t t1) {
    A acc[B];
    P part[B];
    typename Op::Flag nan[B];
    Walk kw = L.kept, rw = L.red;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t k = t / nb, j0 = (t % nb) * B, m = std::min(B, I - j0), o0 = k * I + j0;
      kw.seek(k);
      for (int64_t j = 0; j < m; ++j) acc[j] = Op::init();
      const T* base = x + kw.off + j0;
      rw.seek(0);
      for (int64_t r0 = 0; r0 < nred; r0 += kFold) {
        for (int64_t j = 0; j < m; ++j) {
          part[j] = P(Op::init());
          nan[j] = 0;
        }
        const int64_t r1 = std::min(nred, r0 + kFold);
        for (int64_t r = r0; r < r1;) {
          // Four rows per pass over the block (one load/store of the partials for four rows), or one.
          const int64_t g = r1 - r >= 4 ? 4 : 1;
          const T* q[4];
          for (int64_t i = 0; i < g; ++i, rw.next()) q[i] = base + rw.off;
          for (int64_t i = g; i < 4; ++i) q[i] = q[0];
          r += g;
          if constexpr (Op::kNanLanes) {
            using F = typename Op::Flag;
#pragma omp simd
            for (int64_t j = 0; j < m; ++j) {
              const C v0 = C(q[0][j]), v1 = C(q[1][j]), v2 = C(q[2][j]), v3 = C(q[3][j]);
              part[j] = Op::pick(v3, Op::pick(v2, Op::pick(v1, Op::pick(v0, part[j]))));
              nan[j] |= -F((v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3));
            }
          } else if (g == 4) {
#pragma omp simd
            for (int64_t j = 0; j < m; ++j) {
              const int64_t o = o0 + j;
              part[j] = Op::comb(Op::comb(Op::comb(Op::comb(part[j], op.map(C(q[0][j]), o)), op.map(C(q[1][j]), o)),
                                          op.map(C(q[2][j]), o)),
                                 op.map(C(q[3][j]), o));
            }
          } else {
#pragma omp simd
            for (int64_t j = 0; j < m; ++j) part[j] = Op::comb(part[j], op.map(C(q[0][j]), o0 + j));
          }
        }
        for (int64_t j = 0; j < m; ++j) {
          A v = A(part[j]);
          if constexpr (Op::kNanLanes)
            if (nan[j]) v = std::numeric_limits<A>::quiet_NaN();
          acc[j] = Op::comb(acc[j], v);
        }
      }
      for (int64_t j = 0; j < m; ++j) y[o0 + j] = op.fin(acc[j], o0 + j, L.red_numel);
    }
  });
}

// Reduce*: axes from the attribute (axes_input false) or from input 1.
template <RK K>
class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const KernelInfo& info, bool axes_input) : axes_input_(axes_input) {
    keepdims_ = info.attr_int("keepdims", 1) != 0;
    noop_empty_ = info.attr_int("noop_with_empty_axes", 0) != 0;
    if (!axes_input_) axes_ = info.attr_ints("axes", {});
  }
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    dispatch<NumericTypes>(dt, ctx.node(), [&]<class T>() {});
    std::vector<int64_t> axes = axes_;
    if (axes_input_ && ctx.has_input(1)) {
      const Tensor* a = ctx.input_value(1);
      if (!a) {
        ctx.set_output_dynamic(0, dt);
        return;
      }
      axes = read_ints(ctx, *a, "axes");
    }
    const Shape& in = ctx.input_shape(0);
    noop_ = axes.empty() && noop_empty_;
    if (noop_) {
      ctx.set_output_alias(0, 0, in);
      return;
    }
    layout_.init(ctx, in, axes_mask(ctx, axes, in.size()), keepdims_);
    ctx.set_output(0, dt, layout_.out_shape);
    if (K == RK::kLogSumExp) ctx.request_workspace(size_t(layout_.out_numel) * sizeof(double));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (noop_) {
      if (!ctx.output_aliases_input(0, 0)) ctx.output(0).copy_from(x);
      return;
    }
    dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      T* y = ctx.output(0).data<T>();
      if constexpr (K == RK::kLogSumExp) {
        // Pass 1: per-output max (into float64 scratch); pass 2: log(sum exp(x - max)) + max.
        double* shift = static_cast<double*>(ctx.workspace());
        reduce(layout_, ShiftOp<T>{}, x.data<T>(), shift);
        RedOp<K, T> op;
        op.shift = shift;
        reduce(layout_, op, x.data<T>(), y);
      } else {
        reduce(layout_, RedOp<K, T>{}, x.data<T>(), y);
      }
    });
  }

 private:
  bool axes_input_, keepdims_ = true, noop_empty_ = false, noop_ = false;
  std::vector<int64_t> axes_;
  ReduceLayout layout_;
};

template <RK K>
void add_reduce(KernelRegistry& r, const std::string& op, int64_t axes_input_since) {
  shape::add_reduce_kernels(r, op, axes_input_since, [](bool axes_input) -> KernelFactory {
    return [axes_input](const KernelInfo& i) -> std::unique_ptr<Kernel> {
      return std::make_unique<ReduceKernel<K>>(i, axes_input);
    };
  });
}

// ---------------------------------------------------------------- ArgMax / ArgMin
// Y[o, i] = index of the max (min) of X[o, :, i]; first occurrence unless select_last_index.
// NaN counts as the extreme value (like numpy).
template <bool Max>
class ArgKernel final : public Kernel {
 public:
  explicit ArgKernel(const KernelInfo& info) {
    axis_ = info.attr_int("axis", 0);
    keepdims_ = info.attr_int("keepdims", 1) != 0;
    last_ = info.attr_int("select_last_index", 0) != 0;
  }
  void prepare(PrepareContext& ctx) override {
    dispatch<NumericTypes>(ctx.input_dtype(0), ctx.node(), [&]<class T>() {});
    Shape out;
    split_ = shape::arg_reduce_geometry(ctx, axis_, keepdims_, Max ? "ArgMax" : "ArgMin", &out);
    ctx.set_output(0, DType::kInt64, out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    int64_t* y = ctx.output(0).data<int64_t>();
    dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      const T* X = x.data<T>();
      const int64_t n = split_.n, I = split_.inner;
      const bool last = last_;
      constexpr int64_t B = 256;
      const int64_t nb = (I + B - 1) / B;
      parallel_for(split_.outer * nb, grain_for(std::min(I, B) * n), [&](int64_t t0, int64_t t1) {
        C best[B];
        int64_t arg[B];
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t o = t / nb, j0 = (t % nb) * B, m = std::min(B, I - j0);
          const T* base = X + o * n * I + j0;
          for (int64_t j = 0; j < m; ++j) {
            best[j] = C(base[j]);
            arg[j] = 0;
          }
          for (int64_t r = 1; r < n; ++r) {
            const T* p = base + r * I;
            for (int64_t j = 0; j < m; ++j) {
              const C v = C(p[j]), c = best[j];
              const bool nan = v != v;
              const bool b = Max ? (last ? v >= c || nan : v > c || (nan && c == c))
                                 : (last ? v <= c || nan : v < c || (nan && c == c));
              best[j] = b ? v : c;
              arg[j] = b ? r : arg[j];
            }
          }
          for (int64_t j = 0; j < m; ++j) y[o * I + j0 + j] = arg[j];
        }
      });
    });
  }

 private:
  int64_t axis_;
  bool keepdims_, last_;
  AxisSplit split_;
};

// ---------------------------------------------------------------- CumSum
// Y[o, i, k] = sum_{j <= i} X[o, j, k] (j < i when exclusive; j >= i when reverse).
class CumSumKernel final : public Kernel {
 public:
  explicit CumSumKernel(const KernelInfo& info) {
    exclusive_ = info.attr_int("exclusive", 0) != 0;
    reverse_ = info.attr_int("reverse", 0) != 0;
  }
  void prepare(PrepareContext& ctx) override {
    dispatch<NumericTypes>(ctx.input_dtype(0), ctx.node(), [&]<class T>() {});
    shape::check_cumsum_inputs(ctx);
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t axis = normalize_axis(ctx, read_ints(ctx, ctx.input(1), "axis")[0], int64_t(x.rank()));
    const AxisSplit s(x.shape(), size_t(axis));
    dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using A = sum_acc_t<T>;
      const T* X = x.data<T>();
      T* Y = ctx.output(0).data<T>();
      constexpr int64_t B = 256;
      const int64_t n = s.n, I = s.inner, nb = (I + B - 1) / B;
      const int64_t step = reverse_ ? -I : I;
      parallel_for(s.outer * nb, grain_for(std::min(I, B) * n), [&](int64_t t0, int64_t t1) {
        A acc[B];
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t o = t / nb, j0 = (t % nb) * B, m = std::min(B, I - j0);
          const int64_t first = o * n * I + j0 + (reverse_ ? (n - 1) * I : 0);
          for (int64_t j = 0; j < m; ++j) acc[j] = A(0);
          for (int64_t r = 0; r < n; ++r) {
            const T* p = X + first + r * step;
            T* q = Y + first + r * step;
            if (exclusive_) {
              for (int64_t j = 0; j < m; ++j) {
                q[j] = T(acc[j]);
                acc[j] = wrap_add(acc[j], A(compute_t<T>(p[j])));  // integers wrap
              }
            } else {
              for (int64_t j = 0; j < m; ++j) {
                acc[j] = wrap_add(acc[j], A(compute_t<T>(p[j])));  // integers wrap
                q[j] = T(acc[j]);
              }
            }
          }
        }
      });
    });
  }

 private:
  bool exclusive_, reverse_;
};

// y[j] = exp(x[j] - shift) for j < n (y may be x, or null to only sum); returns sum of y.
double exp_shift_sum(const float* x, float* y, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t j = 0;
  if (n >= 16 && vmath512::available()) {  // the same sums, 16 lanes at a time
    alignas(64) float a[16] = {};
    j = vmath512::exp_shift_acc(x, y, n, shift, a);
    acc0 = _mm256_load_ps(a), acc1 = _mm256_load_ps(a + 8);
  }
  for (; j + 16 <= n; j += 16) {
    const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), s));
    const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), s));
    if (y) {
      _mm256_storeu_ps(y + j, e0);
      _mm256_storeu_ps(y + j + 8, e1);
    }
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
  }
  for (; j < n; j += 8) {
    const __m256i mk = tail_mask(std::min<int64_t>(8, n - j));
    __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + j, mk), s));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));
    if (y) _mm256_maskstore_ps(y + j, mk, e);
    acc0 = _mm256_add_ps(acc0, e);
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, _mm256_add_ps(acc0, acc1));
  double t = 0;
  for (float v : l) t += v;
  return t;
}

// In-place exp of n values (float: AVX2; others: std::exp).
template <class C>
void exp_inplace(C* v, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    exp_shift_sum(v, v, n, 0.0f);
  } else {
    for (int64_t j = 0; j < n; ++j) v[j] = std::exp(v[j]);
  }
}

// ---------------------------------------------------------------- Softmax, LogSoftmax, Hardmax
// Opset < 13: X is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])] (default axis 1);
// opset >= 13: along one axis (default -1).
enum class SM { kSoftmax, kLogSoftmax, kHardmax };

template <SM K>
class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(const KernelInfo& info, bool coerce_2d) : coerce_(coerce_2d) {
    axis_ = info.attr_int("axis", coerce_2d ? 1 : -1);
  }
  void prepare(PrepareContext& ctx) override {
    dispatch<FloatTypes>(ctx.input_dtype(0), ctx.node(), [&]<class T>() {});
    const Shape& s = ctx.input_shape(0);
    split_ = softmax_split(ctx, s, axis_, coerce_);
    ctx.set_output(0, ctx.input_dtype(0), s);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      const T* X = x.data<T>();
      T* Y = ctx.output(0).data<T>();
      if (split_.n == 0) return;
      if (split_.inner == 1)
        rows(X, Y);
      else
        columns(X, Y);
    });
  }

 private:
  // Contiguous rows of n.
  template <class T>
  void rows(const T* X, T* Y) const {
    using C = compute_t<T>;
    const int64_t n = split_.n;
    parallel_for(split_.outer, grain_for(n, 16384), [&](int64_t o0, int64_t o1) {
      constexpr int64_t B = 256;
      C tmp[B];
      for (int64_t o = o0; o < o1; ++o) {
        const T* x = X + o * n;
        T* y = Y + o * n;
        if constexpr (K == SM::kHardmax) {
          int64_t best = 0;
          for (int64_t j = 1; j < n; ++j)
            if (C(x[j]) > C(x[best])) best = j;
          for (int64_t j = 0; j < n; ++j) y[j] = T(C(j == best ? 1 : 0));
          continue;
        }
        C m = reduce_run(RedOp<RK::kMax, T>{}, x, n, 0);
        double sum = 0;
        if constexpr (std::is_same_v<T, float>) {
          sum = exp_shift_sum(x, K == SM::kSoftmax ? y : nullptr, n, m);
        } else {
          for (int64_t j0 = 0; j0 < n; j0 += B) {
            const int64_t mm = std::min(B, n - j0);
            for (int64_t j = 0; j < mm; ++j) tmp[j] = C(x[j0 + j]) - m;
            exp_inplace(tmp, mm);
            for (int64_t j = 0; j < mm; ++j) {
              sum += double(tmp[j]);
              if (K == SM::kSoftmax) y[j0 + j] = T(tmp[j]);
            }
          }
        }
        if constexpr (K == SM::kSoftmax) {
          const C inv = C(1.0 / sum);
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) y[j] = T(C(y[j]) * inv);
        } else {
          const C lse = C(std::log(sum));  // (x - m) is exact for x near m: subtract first
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) y[j] = T((C(x[j]) - m) - lse);
        }
      }
    });
  }

  // n rows of a contiguous run of `inner`, processed in blocks of B along the run.
  template <class T>
  void columns(const T* X, T* Y) const {
    using C = compute_t<T>;
    constexpr int64_t B = 256;
    const int64_t n = split_.n, I = split_.inner, nb = (I + B - 1) / B;
    parallel_for(split_.outer * nb, grain_for(std::min(I, B) * n), [&](int64_t t0, int64_t t1) {
      C m[B], tmp[B];
      double sum[B];
      int64_t arg[B];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / nb, j0 = (t % nb) * B, mm = std::min(B, I - j0);
        const T* x = X + o * n * I + j0;
        T* y = Y + o * n * I + j0;
        for (int64_t j = 0; j < mm; ++j) {
          m[j] = C(x[j]);
          arg[j] = 0;
          sum[j] = 0;
        }
        for (int64_t r = 1; r < n; ++r)
          for (int64_t j = 0; j < mm; ++j) {
            const C v = C(x[r * I + j]);
            const bool b = v > m[j] || (v != v && m[j] == m[j]);
            m[j] = b ? v : m[j];
            arg[j] = b ? r : arg[j];
          }
        if constexpr (K == SM::kHardmax) {
          for (int64_t r = 0; r < n; ++r)
            for (int64_t j = 0; j < mm; ++j) y[r * I + j] = T(C(arg[j] == r ? 1 : 0));
          continue;
        }
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t j = 0; j < mm; ++j) tmp[j] = C(x[r * I + j]) - m[j];
          exp_inplace(tmp, mm);
          for (int64_t j = 0; j < mm; ++j) {
            sum[j] += double(tmp[j]);
            if (K == SM::kSoftmax) y[r * I + j] = T(tmp[j]);
          }
        }
        for (int64_t j = 0; j < mm; ++j)
          tmp[j] = K == SM::kSoftmax ? C(1.0 / sum[j]) : C(std::log(sum[j]));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < mm; ++j)
            y[r * I + j] = K == SM::kSoftmax ? T(C(y[r * I + j]) * tmp[j]) : T((C(x[r * I + j]) - m[j]) - tmp[j]);
      }
    });
  }

  bool coerce_;
  int64_t axis_;
  AxisSplit split_;
};

template <SM K>
void add_softmax(KernelRegistry& r, const std::string& op) {
  for (bool coerce : {true, false})
    r.add(op, coerce ? 1 : 13, coerce ? 12 : kMaxOpsetAll, [coerce](const KernelInfo& i) -> std::unique_ptr<Kernel> {
      return std::make_unique<SoftmaxKernel<K>>(i, coerce);
    });
}

// ---------------------------------------------------------------- SoftmaxGrad, LogSoftmaxGrad
// com.onnxtrain.SoftmaxGrad(dY, Y)    -> dX = Y (dY - sum(dY Y))
// com.onnxtrain.LogSoftmaxGrad(dY, Y) -> dX = dY - exp(Y) sum(dY)
// Sums along the forward node's axis (attribute axis; coerce_2d = 1: opset < 13 semantics, every
// dim from axis on). Y is the forward output; sums accumulate in float64.

// dx[j] = dy[j] - exp(y[j]) * s (float: AVX2 exp).
template <class T>
void dy_minus_exp_scaled(const T* y, const T* dy, T* dx, int64_t n, double s) {
  using C = compute_t<T>;
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __m256 vs = _mm256_set1_ps(float(s));
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(dx + j, _mm256_fnmadd_ps(exp8(_mm256_loadu_ps(y + j)), vs, _mm256_loadu_ps(dy + j)));
  }
  for (; j < n; ++j) dx[j] = T(C(dy[j]) - C(std::exp(double(C(y[j]))) * s));
}

template <bool Log>
class SoftmaxGradKernel final : public Kernel {
 public:
  /// `coerce` and `axis`: the defaults when the node has no such attribute (onnxruntime's
  /// com.microsoft SoftmaxGrad coerces at axis 1 by default, its SoftmaxGrad_13 takes axis -1).
  explicit SoftmaxGradKernel(const KernelInfo& info, bool coerce = false, int64_t axis = -1)
      : coerce_(info.attr_int("coerce_2d", coerce) != 0), axis_(info.attr_int("axis", axis)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt, ctx.node(), [&]<class T>() {});
    shape::check_softmax_grad_inputs(ctx, dt);
    const Shape& s = ctx.input_shape(1);
    split_ = softmax_split(ctx, s, axis_, coerce_);
    ctx.set_output(0, dt, s);
  }
  void run(RunContext& ctx) override {
    dispatch<FloatTypes>(ctx.input(0).dtype(), ctx.node(), [&]<class T>() {
      const T* dY = ctx.input(0).data<T>();
      const T* Y = ctx.input(1).data<T>();
      T* dX = ctx.output(0).data<T>();
      if (split_.n == 0) return;
      if (split_.inner == 1)
        rows(dY, Y, dX);
      else
        columns(dY, Y, dX);
    });
  }

 private:
  template <class T>
  void rows(const T* dY, const T* Y, T* dX) const {
    using C = compute_t<T>;
    const int64_t n = split_.n;
    parallel_for(split_.outer, grain_for(2 * n, 16384), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const T *dy = dY + o * n, *y = Y + o * n;
        T* dx = dX + o * n;
        // Log: sum(dy); else sum(dy y), in float64 lanes.
        Lanes<double, 1> l;
        auto add = [&](int64_t k, int64_t j) { l.a[0][k] += Log ? double(C(dy[j])) : double(C(dy[j])) * double(C(y[j])); };
        int64_t j = 0;
        for (; j + l.W <= n; j += l.W)
#pragma omp simd
          for (int64_t k = 0; k < l.W; ++k) add(k, j + k);
        for (int64_t k = 0; j < n; ++j, ++k) add(k, j);
        const double s = l.sum(0);
        if constexpr (Log) {
          dy_minus_exp_scaled(y, dy, dx, n, s);
        } else {
          const C cs = C(s);
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) dx[j] = T(C(y[j]) * (C(dy[j]) - cs));
        }
      }
    });
  }

  // n rows of a contiguous run of `inner`, in blocks of B along the run.
  template <class T>
  void columns(const T* dY, const T* Y, T* dX) const {
    using C = compute_t<T>;
    constexpr int64_t B = 256;
    const int64_t n = split_.n, I = split_.inner, nb = (I + B - 1) / B;
    parallel_for(split_.outer * nb, grain_for(2 * std::min(I, B) * n), [&](int64_t t0, int64_t t1) {
      double s[B];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / nb, j0 = (t % nb) * B, m = std::min(B, I - j0), off = o * n * I + j0;
        const T *dy = dY + off, *y = Y + off;
        T* dx = dX + off;
        std::fill(s, s + m, 0.0);
        for (int64_t r = 0; r < n; ++r)
#pragma omp simd
          for (int64_t j = 0; j < m; ++j) s[j] += Log ? double(C(dy[r * I + j])) : double(C(dy[r * I + j])) * double(C(y[r * I + j]));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < m; ++j) {
            const int64_t k = r * I + j;
            dx[k] = Log ? T(C(dy[k]) - C(std::exp(double(C(y[k]))) * s[j])) : T(C(y[k]) * C(double(C(dy[k])) - s[j]));
          }
      }
    });
  }

  bool coerce_;
  int64_t axis_;
  AxisSplit split_;
};

// ---------------------------------------------------------------- TopK
// Values/Indices: the k largest (smallest) along axis, sorted; ties keep the lower index first;
// NaN sorts after every number in both directions (like numpy's argsort).
class TopKKernel final : public Kernel {
 public:
  explicit TopKKernel(const KernelInfo& info) : at_(shape::read_topk_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    dispatch<NumericTypes>(dt, ctx.node(), [&]<class T>() {});
    Shape out;
    if (!shape::topk_geometry(ctx, at_, &k_, &split_, &out)) {
      ctx.set_output_dynamic(0, dt);
      if (ctx.num_outputs() > 1) ctx.set_output_dynamic(1, DType::kInt64);
      return;
    }
    ctx.set_output(0, dt, out);
    if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kInt64, out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      const T* X = x.data<T>();
      T* V = ctx.output(0).data<T>();
      int64_t* Ix = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : nullptr;
      const int64_t n = split_.n, I = split_.inner, k = k_;
      if (k == 0) return;
      const bool largest = at_.largest;
      parallel_for(split_.outer * I, grain_for(n), [&](int64_t s0, int64_t s1) {
        std::vector<std::pair<C, int64_t>> buf(static_cast<size_t>(n));
        for (int64_t s = s0; s < s1; ++s) {
          const int64_t o = s / I, i = s % I;
          const T* x = X + o * n * I + i;
          for (int64_t j = 0; j < n; ++j) buf[size_t(j)] = {C(x[j * I]), j};
          auto before = [largest](const std::pair<C, int64_t>& a, const std::pair<C, int64_t>& b) {
            const bool an = a.first != a.first, bn = b.first != b.first;
            if (an || bn) return an == bn ? a.second < b.second : bn;
            if (a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
            return a.second < b.second;
          };
          std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), before);
          T* v = V + o * k * I + i;
          int64_t* ix = Ix ? Ix + o * k * I + i : nullptr;
          for (int64_t j = 0; j < k; ++j) {
            v[j * I] = T(buf[size_t(j)].first);
            if (ix) ix[j * I] = buf[size_t(j)].second;
          }
        }
      });
    });
  }

 private:
  shape::TopKAttrs at_;
  int64_t k_ = 0;
  AxisSplit split_;
};

}  // namespace

void register_reduce(KernelRegistry& r) {
  add_reduce<RK::kSum>(r, "ReduceSum", 13);
  add_reduce<RK::kMean>(r, "ReduceMean", 18);
  add_reduce<RK::kMax>(r, "ReduceMax", 18);
  add_reduce<RK::kMin>(r, "ReduceMin", 18);
  add_reduce<RK::kProd>(r, "ReduceProd", 18);
  add_reduce<RK::kL1>(r, "ReduceL1", 18);
  add_reduce<RK::kL2>(r, "ReduceL2", 18);
  add_reduce<RK::kSumSquare>(r, "ReduceSumSquare", 18);
  add_reduce<RK::kLogSum>(r, "ReduceLogSum", 18);
  add_reduce<RK::kLogSumExp>(r, "ReduceLogSumExp", 18);
  r.add<ArgKernel<true>>("ArgMax", 1, kMaxOpsetAll);
  r.add<ArgKernel<false>>("ArgMin", 1, kMaxOpsetAll);
  r.add<CumSumKernel>("CumSum", 11, kMaxOpsetAll);
  add_softmax<SM::kSoftmax>(r, "Softmax");
  add_softmax<SM::kLogSoftmax>(r, "LogSoftmax");
  add_softmax<SM::kHardmax>(r, "Hardmax");
  r.add(ops::kDomain, "SoftmaxGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<SoftmaxGradKernel<false>>(i); });
  r.add(ops::kDomain, "LogSoftmaxGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<SoftmaxGradKernel<true>>(i); });
  // onnxruntime's com.microsoft forms: opset < 13 semantics by default, and the _13 ones.
  for (bool v13 : {false, true})
    for (bool log : {false, true}) {
      const std::string op = std::string(log ? "LogSoftmaxGrad" : "SoftmaxGrad") + (v13 ? "_13" : "");
      r.add(ops::kMicrosoftDomain, op, 1, kMaxOpsetAll, [v13, log](const KernelInfo& i) -> std::unique_ptr<Kernel> {
        if (log) return std::make_unique<SoftmaxGradKernel<true>>(i, !v13, v13 ? -1 : 1);
        return std::make_unique<SoftmaxGradKernel<false>>(i, !v13, v13 ? -1 : 1);
      });
    }
  r.add<TopKKernel>("TopK", 1, kMaxOpsetAll);
}

}  // namespace onnxtrain::kernels::cpu
