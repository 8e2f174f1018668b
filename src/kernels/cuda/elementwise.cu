// Elementwise operators on the CUDA provider: one grid-stride launcher per arity over a functor
// (the math, __host__ __device__), broadcasting through Bcast (broadcast.h). Shapes, attributes
// and errors come from the provider-neutral shape logic (kernels/shape/elementwise.h), as on the
// CPU. Element types: float32/64, float16 and bfloat16 (computed in float), int32/int64 where
// the operator is defined on integers, bool for logic; others decline (NotImplemented: the node
// runs on the CPU provider).
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kernels/cuda/broadcast.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/cuda_types.h"
#include "kernels/shape/common.h"
#include "kernels/shape/elementwise.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

bool make_bcast(const Shape& output, const std::vector<Shape>& inputs, Bcast* b) {
  const size_t r = output.size(), n = inputs.size();
  // Right-aligned strides per operand (0 where broadcast).
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> st(n);
  std::vector<std::vector<int64_t>> full(n, std::vector<int64_t>(r, 0));
  for (size_t k = 0; k < n; ++k) {
    const Shape& s = inputs[k];
    int64_t stride = 1;
    for (size_t j = 0; j < s.size(); ++j) {
      const size_t d = s.size() - 1 - j, od = r - 1 - j;
      full[k][od] = s[d] == 1 ? 0 : stride;
      stride *= s[d];
    }
  }
  for (size_t d = 0; d < r; ++d) {
    if (output[d] == 1) continue;
    const bool merge = !dims.empty() && [&] {
      for (size_t k = 0; k < n; ++k)
        if (st[k].back() != full[k][d] * output[d]) return false;
      return true;
    }();
    if (merge) {
      dims.back() *= output[d];
      for (size_t k = 0; k < n; ++k) st[k].back() = full[k][d];
    } else {
      dims.push_back(output[d]);
      for (size_t k = 0; k < n; ++k) st[k].push_back(full[k][d]);
    }
  }
  if (dims.size() > size_t(kMaxDims)) return false;
  *b = Bcast{};
  b->rank = int(dims.size());
  b->narrow = shape_numel(output) <= int64_t(UINT32_MAX);
  for (size_t d = 0; d < dims.size(); ++d) b->dims[d] = dims[d];
  for (size_t k = 0; k < n; ++k) {
    bool all_zero = true;
    for (int64_t s : st[k]) all_zero = all_zero && s == 0;
    b->kind[k] = shape_numel(inputs[k]) == shape_numel(output) ? 0 : all_zero ? 1 : 2;
    for (size_t d = 0; d < dims.size(); ++d) b->strides[k][d] = st[k][d];
  }
  return true;
}

namespace {

// ------------------------------------------------------------------------------ launchers
// Contiguous operands move four elements a thread with one access (16 bytes for 4-byte types):
// the kernels take W = 4 where the element count is a multiple of 4 and the pointers are aligned
// to the four elements (quad_ok), else W = 1.
template <class T>
struct alignas(sizeof(T) * 4) Quad {
  T v[4];
};

// Whether n elements at every non-null pointer in `ptrs` can move four at a time.
template <class T>
bool quad_ok(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % 4 != 0) return false;
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % (sizeof(T) * 4) != 0) return false;
  return true;
}

template <int W, class T>
__device__ inline void load_w(const T* p, int64_t e, T* out) {
  if constexpr (W == 4) {
    const Quad<T> q = *reinterpret_cast<const Quad<T>*>(p + e);
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = q.v[k];
  } else {
    out[0] = p[e];
  }
}
template <int W, class T>
__device__ inline void store_w(T* p, int64_t e, const T* in) {
  if constexpr (W == 4) {
    Quad<T> q;
#pragma unroll
    for (int k = 0; k < 4; ++k) q.v[k] = in[k];
    *reinterpret_cast<Quad<T>*>(p + e) = q;
  } else {
    p[e] = in[0];
  }
}

template <int W>
__device__ inline int64_t first_w() {
  return (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W;
}
template <int W>
__device__ inline int64_t step_w() {
  return int64_t(gridDim.x) * blockDim.x * W;
}

template <class TO, class TA, class F, int W>
__global__ void unary_kernel(const TA* a, TO* y, int64_t n, F f) {
  for (int64_t e = first_w<W>(); e < n; e += step_w<W>()) {
    TA x[W];
    TO r[W];
    load_w<W>(a, e, x);
#pragma unroll
    for (int k = 0; k < W; ++k) r[k] = f(x[k]);
    store_w<W>(y, e, r);
  }
}

template <int W, class T>
__device__ inline void load_operand(const T* p, const Bcast& g, int k, int how, int64_t e, T* out) {
  if constexpr (W == 1) {
    out[0] = p[g.offset(k, e)];
  } else if (how == kQuadSame) {
    load_w<W>(p, e, out);
  } else if (how == kQuadRow) {
    load_w<W>(p, g.offset(k, e), out);
  } else {  // kQuadOne, kQuadSpread
    const T v = p[how == kQuadOne ? 0 : g.offset(k, e)];
#pragma unroll
    for (int j = 0; j < W; ++j) out[j] = v;
  }
}

template <class TO, class TA, class TB, class F, int W>
__global__ void binary_kernel(const TA* a, const TB* b, TO* y, int64_t n, Bcast g, int how_a, int how_b, F f) {
  for (int64_t e = first_w<W>(); e < n; e += step_w<W>()) {
    TA xa[W];
    TB xb[W];
    TO r[W];
    load_operand<W>(a, g, 0, how_a, e, xa);
    load_operand<W>(b, g, 1, how_b, e, xb);
#pragma unroll
    for (int k = 0; k < W; ++k) r[k] = f(xa[k], xb[k]);
    store_w<W>(y, e, r);
  }
}

template <class TO, class TA, class TB, class TC, class F>
__global__ void ternary_kernel(const TA* a, const TB* b, const TC* c, TO* y, int64_t n, Bcast g, F f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = f(a[g.offset(0, i)], b[g.offset(1, i)], c[g.offset(2, i)]);
}

template <class TO, class TA, class F>
void launch_unary(RunContext& ctx, const void* a, void* y, int64_t n, F f, const char* name) {
  if (n == 0) return;
  CudaContext& c = CudaContext::of(ctx);
  const TA* pa = static_cast<const TA*>(a);
  TO* py = static_cast<TO*>(y);
  if (quad_ok<TA>(n, {a}) && quad_ok<TO>(n, {y}))
    unary_kernel<TO, TA, F, 4><<<grid_for(n / 4, c), 256, 0, c.stream()>>>(pa, py, n, f);
  else
    unary_kernel<TO, TA, F, 1><<<grid_for(n, c), 256, 0, c.stream()>>>(pa, py, n, f);
  check_launch(name);
}

template <class TO, class TA, class TB, class F>
void launch_binary(RunContext& ctx, const void* a, const void* b, void* y, int64_t n, const Bcast& g, F f,
                   const char* name) {
  if (n == 0) return;
  CudaContext& c = CudaContext::of(ctx);
  const TA* pa = static_cast<const TA*>(a);
  const TB* pb = static_cast<const TB*>(b);
  TO* py = static_cast<TO*>(y);
  const int how_a = quad_read(g, 0, a, sizeof(TA)), how_b = quad_read(g, 1, b, sizeof(TB));
  if (how_a != kQuadNone && how_b != kQuadNone && quad_ok<TO>(n, {y}))
    binary_kernel<TO, TA, TB, F, 4><<<grid_for(n / 4, c), 256, 0, c.stream()>>>(pa, pb, py, n, g, how_a, how_b, f);
  else
    binary_kernel<TO, TA, TB, F, 1><<<grid_for(n, c), 256, 0, c.stream()>>>(pa, pb, py, n, g, kQuadNone, kQuadNone,
                                                                            f);
  check_launch(name);
}

// A functor over the compute type, applied to stored types.
template <class T, class F>
struct OnCompute {
  F f;
  __device__ T operator()(T a) const { return convert<T>(f(convert<compute_t<T>>(a))); }
  __device__ T operator()(T a, T b) const {
    return convert<T>(f(convert<compute_t<T>>(a), convert<compute_t<T>>(b)));
  }
};
template <class T>
struct IsNaNOf {
  __device__ bool operator()(T x) const {
    const compute_t<T> v = convert<compute_t<T>>(x);
    return v != v;
  }
};
template <class T>
struct First {
  __device__ T operator()(T a, T) const { return a; }
};
template <class T>
struct DivideBy {
  float n;
  __device__ T operator()(T v) const { return convert<T>(convert<compute_t<T>>(v) / compute_t<T>(n)); }
};
template <class T>
struct Select {
  __device__ T operator()(bool s, T x, T z) const { return s ? x : z; }
};
template <class D, class S>
struct CastOne {
  __device__ D operator()(S v) const {
    using C = compute_t<S>;
    if constexpr (std::is_same_v<D, bool>) {
      return convert<C>(v) != C(0);
    } else if constexpr (std::is_same_v<S, double> && std::is_same_v<D, __half>) {
      return __double2half(v);  // one rounding, as the CPU provider (numpy)
    } else if constexpr (std::is_same_v<S, double> && std::is_same_v<D, __nv_bfloat16>) {
      return __double2bfloat16(v);
    } else if constexpr (std::is_integral_v<D> && !std::is_integral_v<C>) {
      // Float to integer: NaN gives 0, others truncate and saturate at the type's range.
      const double x = double(convert<C>(v));
      if (x != x) return D(0);
      const double t = trunc(x);
      if (t <= double(std::numeric_limits<D>::lowest())) return std::numeric_limits<D>::lowest();
      if (t >= double(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
      return D(t);
    } else {
      return convert<D>(convert<C>(v));
    }
  }
};
template <class T, class F>
struct Compare {
  F f;
  __device__ bool operator()(T a, T b) const { return f(convert<compute_t<T>>(a), convert<compute_t<T>>(b)); }
};

// ------------------------------------------------------------------------------ the math
struct AddF { template <class C> __host__ __device__ C operator()(C a, C b) const { return a + b; } };
struct SubF { template <class C> __host__ __device__ C operator()(C a, C b) const { return a - b; } };
struct MulF { template <class C> __host__ __device__ C operator()(C a, C b) const { return a * b; } };
struct DivF { template <class C> __host__ __device__ C operator()(C a, C b) const { return a / b; } };
struct MaxF {
  template <class C> __host__ __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) { if (a != a || b != b) return a != a ? a : b; }
    return a > b ? a : b;
  }
};
struct MinF {
  template <class C> __host__ __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) { if (a != a || b != b) return a != a ? a : b; }
    return a < b ? a : b;
  }
};
struct PowF { template <class C> __device__ C operator()(C a, C b) const { return pow(a, b); } };
struct EqF { template <class C> __host__ __device__ bool operator()(C a, C b) const { return a == b; } };
struct LtF { template <class C> __host__ __device__ bool operator()(C a, C b) const { return a < b; } };
struct GtF { template <class C> __host__ __device__ bool operator()(C a, C b) const { return a > b; } };
struct LeF { template <class C> __host__ __device__ bool operator()(C a, C b) const { return a <= b; } };
struct GeF { template <class C> __host__ __device__ bool operator()(C a, C b) const { return a >= b; } };
struct AndF { __host__ __device__ bool operator()(bool a, bool b) const { return a && b; } };
struct OrF { __host__ __device__ bool operator()(bool a, bool b) const { return a || b; } };
struct XorF { __host__ __device__ bool operator()(bool a, bool b) const { return a != b; } };
struct NotF { __host__ __device__ bool operator()(bool a) const { return !a; } };

struct NegF { template <class C> __host__ __device__ C operator()(C x) const { return -x; } };
struct AbsF { template <class C> __host__ __device__ C operator()(C x) const { return x < C(0) ? -x : x; } };
struct ReluF { template <class C> __host__ __device__ C operator()(C x) const { return x > C(0) ? x : C(0); } };
struct ErfF { template <class C> __device__ C operator()(C x) const { return erf(x); } };
struct SqrtF { template <class C> __device__ C operator()(C x) const { return sqrt(x); } };
struct ReciprocalF { template <class C> __host__ __device__ C operator()(C x) const { return C(1) / x; } };
struct ExpF { template <class C> __device__ C operator()(C x) const { return exp(x); } };
struct LogF { template <class C> __device__ C operator()(C x) const { return log(x); } };
struct TanhF { template <class C> __device__ C operator()(C x) const { return tanh(x); } };
struct SigmoidF {
  template <class C> __device__ C operator()(C x) const {
    // Stable on both sides: exp of a non-positive argument only.
    if (x >= C(0)) return C(1) / (C(1) + exp(-x));
    const C e = exp(x);
    return e / (C(1) + e);
  }
};
struct SinF { template <class C> __device__ C operator()(C x) const { return sin(x); } };
struct CosF { template <class C> __device__ C operator()(C x) const { return cos(x); } };
struct FloorF { template <class C> __device__ C operator()(C x) const { return floor(x); } };
struct CeilF { template <class C> __device__ C operator()(C x) const { return ceil(x); } };
struct SoftplusF {
  template <class C> __device__ C operator()(C x) const { return x > C(0) ? x + log1p(exp(-x)) : log1p(exp(x)); }
};
struct LeakyReluF {
  float alpha;
  template <class C> __device__ C operator()(C x) const { return x >= C(0) ? x : C(alpha) * x; }
};
struct ReluGradF {  // (dY, Y): Y > 0 ? dY : 0
  template <class C> __host__ __device__ C operator()(C dy, C y) const { return y > C(0) ? dy : C(0); }
};
template <class C>
struct ClipF {
  C lo, hi;
  __device__ C operator()(C x) const {
    const C v = x < lo ? lo : x;  // min(max(x, lo), hi): lo > hi gives hi; NaN stays NaN
    return v > hi ? hi : v;
  }
};

// ------------------------------------------------------------------------------ kernels
template <class Set>
void check_set(const PrepareContext& ctx, DType dt) {
  if (!in_set<Set>(dt)) throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt),
                                                   " on the CUDA provider");
}

// Operands of two element types: the CPU provider's kernel takes the node (Pow accepts them; the
// others fail there with its message).
void decline_mixed_types(const PrepareContext& ctx) {
  if (ctx.input_kind(0) != Value::Kind::kTensor || ctx.input_kind(1) != Value::Kind::kTensor ||
      ctx.input_dtype(0) != ctx.input_dtype(1))
    throw_error<NotImplemented>(ctx.node().describe(), ": operands of different element types on the CUDA provider");
}

// The operands' broadcast geometry (numpy broadcasting, from the provider-neutral shape code) and the
// output's shape; more than kMaxDims dims after merging declines the node.
Shape binary_bcast(const PrepareContext& ctx, const shape::BinaryAttrs& at, Bcast* g) {
  const shape::BinaryGeom geom = shape::binary_geometry(ctx, at);
  if (!make_bcast(geom.output, {geom.a, geom.b}, g))
    throw_error<NotImplemented>(ctx.node().describe(), ": over ", kMaxDims, " broadcast dims on the CUDA provider");
  return geom.output;
}

// Binary arithmetic (Add, Sub, Mul, Div, Pow with one type, ReluGrad).
template <class Set, class F>
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const KernelInfo& info, F f, const char* name)
      : f_(f), name_(name), at_(shape::read_binary_attrs(info, shape::Bcast::kNumpy)) {}
  void prepare(PrepareContext& ctx) override {
    decline_mixed_types(ctx);
    const DType dt = ctx.input_dtype(0);
    check_set<Set>(ctx, dt);
    const Shape out = binary_bcast(ctx, at_, &g_);
    ctx.set_output(0, dt, out);
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch_type(y.dtype(), ctx.node(), [&]<class T>() {
      if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
        ctx.fail("unsupported element type");
      } else {
        launch_binary<T, T, T>(ctx, ctx.input(0).raw_data(), ctx.input(1).raw_data(), y.raw_data(), y.numel(), g_,
                               OnCompute<T, F>{f_}, name_);
      }
    });
  }

 private:
  F f_;
  const char* name_;
  shape::BinaryAttrs at_;
  Bcast g_;
};

// Comparisons (-> bool).
template <class F>
class CompareKernel final : public Kernel {
 public:
  CompareKernel(const KernelInfo& info, F f, const char* name)
      : f_(f), name_(name), at_(shape::read_binary_attrs(info, shape::Bcast::kNumpy)) {}
  void prepare(PrepareContext& ctx) override {
    decline_mixed_types(ctx);
    dt_ = ctx.input_dtype(0);
    if (!in_set<NumericTypes>(dt_) && dt_ != DType::kBool)
      throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt_), " on the CUDA provider");
    const Shape out = binary_bcast(ctx, at_, &g_);
    ctx.set_output(0, DType::kBool, out);
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch_type(dt_, ctx.node(), [&]<class T>() {
      if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
        ctx.fail("unsupported element type");
      } else {
        launch_binary<bool, T, T>(ctx, ctx.input(0).raw_data(), ctx.input(1).raw_data(), y.raw_data(), y.numel(), g_,
                                  Compare<T, F>{f_}, name_);
      }
    });
  }

 private:
  F f_;
  const char* name_;
  shape::BinaryAttrs at_;
  Bcast g_;
  DType dt_ = DType::kUndefined;
};

template <class F>
class LogicKernel final : public Kernel {
 public:
  LogicKernel(const KernelInfo& info, F f, const char* name)
      : f_(f), name_(name), at_(shape::read_binary_attrs(info, shape::Bcast::kNumpy)) {}
  void prepare(PrepareContext& ctx) override {
    for (size_t i = 0; i < 2; ++i)
      if (ctx.input_dtype(i) != DType::kBool) ctx.fail("input ", i, " must be bool, got ", dtype_name(ctx.input_dtype(i)));
    const Shape out = binary_bcast(ctx, at_, &g_);
    ctx.set_output(0, DType::kBool, out);
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    launch_binary<bool, bool, bool>(ctx, ctx.input(0).raw_data(), ctx.input(1).raw_data(), y.raw_data(), y.numel(),
                                    g_, f_, name_);
  }

 private:
  F f_;
  const char* name_;
  shape::BinaryAttrs at_;
  Bcast g_;
};

template <class Set, class F>
class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(F f, const char* name) : f_(f), name_(name) {}
  void prepare(PrepareContext& ctx) override {
    if (ctx.num_inputs() < 1 || !ctx.has_input(0) || ctx.input_kind(0) != Value::Kind::kTensor) ctx.fail("expects one tensor input");
    check_set<Set>(ctx, ctx.input_dtype(0));
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch_type(y.dtype(), ctx.node(), [&]<class T>() {
      if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
        ctx.fail("unsupported element type");
      } else {
        launch_unary<T, T>(ctx, ctx.input(0).raw_data(), y.raw_data(), y.numel(), OnCompute<T, F>{f_}, name_);
      }
    });
  }

 private:
  F f_;
  const char* name_;
};

// IsNaN, Not: to bool.
class IsNaNKernel final : public Kernel {
 public:
  explicit IsNaNKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    check_set<FloatTypes>(ctx, ctx.input_dtype(0));
    ctx.set_output(0, DType::kBool, ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch_type(ctx.input(0).dtype(), ctx.node(), [&]<class T>() {
      if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_floating_point_v<T>) {
        launch_unary<bool, T>(ctx, ctx.input(0).raw_data(), y.raw_data(), y.numel(),
                              IsNaNOf<T>{}, "IsNaN");
      } else {
        ctx.fail("unsupported element type");
      }
    });
  }
};

class NotKernel final : public Kernel {
 public:
  explicit NotKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    if (ctx.input_dtype(0) != DType::kBool) ctx.fail("input must be bool, got ", dtype_name(ctx.input_dtype(0)));
    ctx.set_output(0, DType::kBool, ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    launch_unary<bool, bool>(ctx, ctx.input(0).raw_data(), ctx.output(0).raw_data(), ctx.output(0).numel(), NotF{}, "Not");
  }
};

// Sum, Mean, Max, Min over one or more inputs, folded as the CPU kernel folds them: up to
// kFoldMax inputs per pass in the compute type (float for float16/bfloat16), rounded once per
// pass; with more inputs, passes of kFoldMax - 1 inputs fold into the output. Mean divides in the
// last pass.
constexpr int kFoldMax = 16;

struct FoldGeom {
  int rank = 0;
  int count = 0;          ///< operands of this pass (the accumulator first when `accumulate`)
  bool accumulate = false;
  bool mean = false;
  float divisor = 1.f;
  bool narrow = false;  ///< the output has fewer than 2^32 elements (strided_offset)
  int64_t dims[kMaxDims] = {};
  int kind[kFoldMax] = {};
  int64_t strides[kFoldMax][kMaxDims] = {};
  const void* ptr[kFoldMax] = {};

  __device__ int64_t offset(int k, int64_t i) const {
    if (kind[k] == 0) return i;
    if (kind[k] == 1) return 0;
    return strided_offset(i, rank, dims, strides[k], narrow);
  }
};

template <class T, class F>
__global__ void fold_kernel(T* y, int64_t n, FoldGeom g, F f) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    C acc = g.accumulate ? convert<C>(y[i]) : convert<C>(static_cast<const T*>(g.ptr[0])[g.offset(0, i)]);
    for (int k = g.accumulate ? 0 : 1; k < g.count; ++k) acc = C(f(acc, convert<C>(static_cast<const T*>(g.ptr[k])[g.offset(k, i)])));
    if (g.mean) acc = acc / C(g.divisor);
    y[i] = convert<T>(acc);
  }
}

template <class Set, class F, bool kMean = false>
class VariadicKernel final : public Kernel {
 public:
  VariadicKernel(F f, const char* name) : f_(f), name_(name) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_variadic_inputs(ctx);
    check_set<Set>(ctx, ctx.input_dtype(0));
    const shape::VariadicGeom vg = shape::variadic_geometry(ctx);
    const size_t n = vg.inputs.size();
    passes_.clear();
    auto add_pass = [&](size_t b, size_t e, bool accumulate) {
      std::vector<Shape> shapes(vg.inputs.begin() + long(b), vg.inputs.begin() + long(e));
      Bcast one;
      FoldGeom g;
      g.accumulate = accumulate;
      g.count = int(e - b);
      for (size_t k = 0; k < shapes.size(); ++k) {
        if (!make_bcast(vg.output, {shapes[k]}, &one))
          throw_error<NotImplemented>(ctx.node().describe(), ": over ", kMaxDims, " broadcast dims on the CUDA provider");
        g.rank = one.rank;
        g.narrow = one.narrow;
        for (int d = 0; d < kMaxDims; ++d) g.dims[d] = one.dims[d], g.strides[k][d] = one.strides[0][d];
        g.kind[k] = one.kind[0];
      }
      passes_.push_back(Pass{g, b});
    };
    if (n <= size_t(kFoldMax)) {
      add_pass(0, n, false);
    } else {
      for (size_t b = 0; b < n; b += kFoldMax - 1) add_pass(b, std::min(n, b + kFoldMax - 1), b > 0);
    }
    // make_bcast merges dims per operand: operands of one pass must share the merged dims, so a
    // pass whose operands merged differently keeps every output dim (no merging).
    for (Pass& p : passes_) {
      bool same = true;
      for (size_t b = p.first; b < p.first + size_t(p.g.count) && same; ++b) {
        Bcast one;
        make_bcast(vg.output, {vg.inputs[b]}, &one);
        same = one.rank == p.g.rank && std::equal(one.dims, one.dims + one.rank, p.g.dims);
      }
      if (!same) unmerged(vg, p);
    }
    passes_.back().g.mean = kMean;
    passes_.back().g.divisor = float(n);
    ctx.set_output(0, ctx.input_dtype(0), vg.output);
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    const int64_t n = y.numel();
    if (n == 0) return;
    CudaContext& c = CudaContext::of(ctx);
    dispatch_type(y.dtype(), ctx.node(), [&]<class T>() {
      if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
        ctx.fail("unsupported element type");
      } else {
        for (Pass p : passes_) {
          for (int k = 0; k < p.g.count; ++k) p.g.ptr[k] = ctx.input(p.first + size_t(k)).raw_data();
          fold_kernel<T><<<grid_for(n, c), 256, 0, c.stream()>>>(static_cast<T*>(y.raw_data()), n, p.g, f_);
          check_launch(name_);
        }
      }
    });
  }

 private:
  struct Pass {
    FoldGeom g;
    size_t first;  ///< index of the pass's first input
  };
  // Every output dim kept (size-1 dims dropped): strides of each operand right-aligned.
  static void unmerged(const shape::VariadicGeom& vg, Pass& p) {
    const Shape& out = vg.output;
    std::vector<size_t> keep;
    for (size_t d = 0; d < out.size(); ++d)
      if (out[d] != 1) keep.push_back(d);
    if (keep.size() > size_t(kMaxDims)) throw_error<NotImplemented>("Sum/Mean/Max/Min over ", keep.size(), " dims on the CUDA provider");
    p.g.rank = int(keep.size());
    for (size_t j = 0; j < keep.size(); ++j) p.g.dims[j] = out[keep[j]];
    for (int k = 0; k < p.g.count; ++k) {
      const Shape& s = vg.inputs[p.first + size_t(k)];
      std::vector<int64_t> full(out.size(), 0);
      int64_t stride = 1;
      for (size_t j = 0; j < s.size(); ++j) {
        const size_t d = s.size() - 1 - j, od = out.size() - 1 - j;
        full[od] = s[d] == 1 ? 0 : stride;
        stride *= s[d];
      }
      bool all_zero = true;
      for (size_t j = 0; j < keep.size(); ++j) {
        p.g.strides[k][j] = full[keep[j]];
        all_zero = all_zero && full[keep[j]] == 0;
      }
      p.g.kind[k] = shape_numel(s) == shape_numel(out) ? 0 : all_zero ? 1 : 2;
    }
  }
  F f_;
  const char* name_;
  std::vector<Pass> passes_;
};

// Where(C, X, Z): any element type of 1, 2, 4 or 8 bytes (selection moves bits).
class WhereKernel final : public Kernel {
 public:
  explicit WhereKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    const Shape out = shape::where_shape(ctx);
    if (ctx.input_dtype(1) == DType::kString) throw_error<NotImplemented>("Where on strings on the CUDA provider");
    if (!make_bcast(out, {ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)}, &g_))
      throw_error<NotImplemented>(ctx.node().describe(), ": over ", kMaxDims, " broadcast dims");
    ctx.set_output(0, ctx.input_dtype(1), out);
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    const int64_t n = y.numel();
    if (n == 0) return;
    CudaContext& c = CudaContext::of(ctx);
    auto go = [&]<class T>() {
      ternary_kernel<<<grid_for(n, c), 256, 0, c.stream()>>>(
          static_cast<const bool*>(ctx.input(0).raw_data()), static_cast<const T*>(ctx.input(1).raw_data()),
          static_cast<const T*>(ctx.input(2).raw_data()), static_cast<T*>(y.raw_data()), n, g_,
          Select<T>{});
      check_launch("Where");
    };
    switch (dtype_size(y.dtype())) {
      case 1: go.template operator()<uint8_t>(); break;
      case 2: go.template operator()<uint16_t>(); break;
      case 4: go.template operator()<uint32_t>(); break;
      case 8: go.template operator()<uint64_t>(); break;
      default: ctx.fail("element type ", dtype_name(y.dtype()), " on the CUDA provider");
    }
  }

 private:
  Bcast g_;
};

// Cast / CastLike between the numeric types and bool.
class CastKernel final : public Kernel {
 public:
  CastKernel(const KernelInfo& info, bool like) : like_(like) {
    if (!like) to_ = shape::read_cast_to(info);
  }
  void prepare(PrepareContext& ctx) override {
    const DType to = like_ ? ctx.input_dtype(1) : to_;
    auto ok = [](DType d) { return in_set<NumericTypes>(d) || d == DType::kBool || d == DType::kInt8 || d == DType::kUInt8; };
    if (!ok(to) || !ok(ctx.input_dtype(0)))
      throw_error<NotImplemented>(ctx.node().describe(), ": Cast from ", dtype_name(ctx.input_dtype(0)), " to ",
                                  dtype_name(to), " on the CUDA provider");
    ctx.set_output(0, to, ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    dispatch_type(x.dtype(), ctx.node(), [&]<class S>() {
      dispatch_type(y.dtype(), ctx.node(), [&]<class D>() {
        launch_unary<D, S>(ctx, x.raw_data(), y.raw_data(), y.numel(), CastOne<D, S>{}, "Cast");
      });
    });
  }

 private:
  bool like_;
  DType to_ = DType::kUndefined;
};

// Clip: bounds from attributes (opset < 11) or optional one-element inputs 1, 2 (host inputs).
class ClipKernel final : public Kernel {
 public:
  explicit ClipKernel(const KernelInfo& info) : at_(shape::read_clip_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_clip(ctx);
    check_set<NumericTypes>(ctx, ctx.input_dtype(0));
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch_type(y.dtype(), ctx.node(), [&]<class T>() {
      if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
        ctx.fail("unsupported element type");
      } else {
        using C = compute_t<T>;
        C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
        if (at_.from_attrs) {
          if (at_.has_min) lo = C(at_.min);
          if (at_.has_max) hi = C(at_.max);
        } else {
          if (ctx.has_input(1)) lo = host_scalar<T, C>(ctx.input(1));
          if (ctx.has_input(2)) hi = host_scalar<T, C>(ctx.input(2));
        }
        launch_unary<T, T>(ctx, ctx.input(0).raw_data(), y.raw_data(), y.numel(), OnCompute<T, ClipF<C>>{ClipF<C>{lo, hi}}, "Clip");
      }
    });
  }

 private:
  template <class T, class C>
  static C host_scalar(const Tensor& t) {
    if constexpr (std::is_same_v<T, __half>) return C(float(t.data<float16>()[0]));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return C(float(t.data<bfloat16>()[0]));
    else return C(t.data<T>()[0]);
  }
  shape::ClipAttrs at_;
};

// com.onnxtrain Gelu(X) -> Y (, A = erf(X / sqrt 2) + 1) and GeluGrad(dY, X (, A)) -> dX, as the
// CPU kernels compute them (kernels/cpu/elementwise_unary.cpp).
constexpr float kSqrt2f = 1.41421356237309515f;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

template <class T, int W>
__global__ void gelu_kernel(const T* x, T* y, T* a, int64_t n) {
  using C = compute_t<T>;
  const C s2 = std::is_same_v<C, double> ? C(1.4142135623730951) : C(kSqrt2f);
  for (int64_t e = first_w<W>(); e < n; e += step_w<W>()) {
    T xs[W], ys[W], as[W];
    load_w<W>(x, e, xs);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const C v = convert<C>(xs[k]);
      const C av = C(erf(C(v / s2))) + C(1);
      ys[k] = convert<T>(C((v * av) * C(0.5f)));
      as[k] = convert<T>(av);
    }
    if (y) store_w<W>(y, e, ys);
    if (a) store_w<W>(a, e, as);
  }
}

template <class T, int W>
__global__ void gelu_grad_kernel(const T* dy, const T* x, const T* a, T* dx, int64_t n) {
  using C = compute_t<T>;
  const C s2 = std::is_same_v<C, double> ? C(1.4142135623730951) : C(kSqrt2f);
  for (int64_t e = first_w<W>(); e < n; e += step_w<W>()) {
    T dys[W], xs[W], as[W], r[W];
    load_w<W>(dy, e, dys);
    load_w<W>(x, e, xs);
    if (a) load_w<W>(a, e, as);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const C v = convert<C>(xs[k]);
      const C av = a ? convert<C>(as[k]) : C(erf(C(v / s2))) + C(1);
      const C phi = C(exp(-0.5 * double(v) * double(v)) * kInvSqrt2Pi);
      r[k] = convert<T>(C(convert<C>(dys[k]) * (C(0.5f) * av + v * phi)));
    }
    store_w<W>(dx, e, r);
  }
}

template <class F>
void dispatch_float(DType dt, const ir::Node& node, F&& body) {
  switch (dt) {
    case DType::kFloat32: return body.template operator()<float>();
    case DType::kFloat64: return body.template operator()<double>();
    case DType::kFloat16: return body.template operator()<__half>();
    case DType::kBFloat16: return body.template operator()<__nv_bfloat16>();
    default: throw_error<NotImplemented>(node.describe(), ": element type ", dtype_name(dt), " on the CUDA provider");
  }
}

class GeluKernel final : public Kernel {
 public:
  explicit GeluKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_elementwise_float_inputs(ctx, 1, 0);
    for (size_t k = 0; k < ctx.num_outputs(); ++k)
      if (ctx.has_output(k)) ctx.set_output(k, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t n = x.numel();
    if (n == 0) return;
    void* y = ctx.has_output(0) ? ctx.output(0).raw_data() : nullptr;
    void* a = ctx.num_outputs() > 1 && ctx.has_output(1) ? ctx.output(1).raw_data() : nullptr;
    CudaContext& c = CudaContext::of(ctx);
    dispatch_float(x.dtype(), ctx.node(), [&]<class T>() {
      const T* px = static_cast<const T*>(x.raw_data());
      if (quad_ok<T>(n, {px, y, a}))
        gelu_kernel<T, 4><<<grid_for(n / 4, c), 256, 0, c.stream()>>>(px, static_cast<T*>(y), static_cast<T*>(a), n);
      else
        gelu_kernel<T, 1><<<grid_for(n, c), 256, 0, c.stream()>>>(px, static_cast<T*>(y), static_cast<T*>(a), n);
      check_launch("Gelu");
    });
  }
};

class GeluGradKernel final : public Kernel {
 public:
  explicit GeluGradKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_elementwise_float_inputs(ctx, 2, 1);
    ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(1));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(1);
    const int64_t n = x.numel();
    if (n == 0) return;
    const bool has_a = ctx.num_inputs() > 2 && ctx.has_input(2);
    CudaContext& c = CudaContext::of(ctx);
    dispatch_float(x.dtype(), ctx.node(), [&]<class T>() {
      const T* dy = static_cast<const T*>(ctx.input(0).raw_data());
      const T* px = static_cast<const T*>(x.raw_data());
      const T* a = has_a ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
      T* dx = static_cast<T*>(ctx.output(0).raw_data());
      if (quad_ok<T>(n, {dy, px, a, dx}))
        gelu_grad_kernel<T, 4><<<grid_for(n / 4, c), 256, 0, c.stream()>>>(dy, px, a, dx, n);
      else
        gelu_grad_kernel<T, 1><<<grid_for(n, c), 256, 0, c.stream()>>>(dy, px, a, dx, n);
      check_launch("GeluGrad");
    });
  }
};

template <class Set, class F>
KernelFactory binary(F f, const char* name) {
  return [f, name](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    if (info.opset() < 7) throw_error<NotImplemented>(info.node().describe(), ": legacy broadcasting (opset < 7) on the CUDA provider");
    return std::make_unique<BinaryKernel<Set, F>>(info, f, name);
  };
}
template <class F>
KernelFactory compare(F f, const char* name) {
  return [f, name](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    if (info.opset() < 7) throw_error<NotImplemented>(info.node().describe(), ": legacy broadcasting (opset < 7) on the CUDA provider");
    return std::make_unique<CompareKernel<F>>(info, f, name);
  };
}
template <class F>
KernelFactory logic(F f, const char* name) {
  return [f, name](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    if (info.opset() < 7) throw_error<NotImplemented>(info.node().describe(), ": legacy broadcasting (opset < 7) on the CUDA provider");
    return std::make_unique<LogicKernel<F>>(info, f, name);
  };
}
template <class Set, class F>
KernelFactory unary(F f, const char* name, int64_t min_opset = 6) {
  return [f, name, min_opset](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    // Opsets before 6 carry consumed_inputs (legacy in-place hints): left to the CPU provider.
    if (info.opset() < min_opset) throw_error<NotImplemented>(info.node().describe(), ": opset ", info.opset(), " on the CUDA provider");
    return std::make_unique<UnaryKernel<Set, F>>(f, name);
  };
}
template <class Set, class F, bool kMean = false>
KernelFactory variadic(F f, const char* name) {
  return [f, name](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    if (info.opset() < 8) throw_error<NotImplemented>(info.node().describe(), ": opset ", info.opset(), " (no broadcasting) on the CUDA provider");
    return std::make_unique<VariadicKernel<Set, F, kMean>>(f, name);
  };
}

}  // namespace

void register_elementwise(KernelRegistry& r) {
  constexpr int64_t M = kMaxOpsetAll;
  r.add("Add", 1, M, binary<NumericTypes>(AddF{}, "Add"));
  r.add("Sub", 1, M, binary<NumericTypes>(SubF{}, "Sub"));
  r.add("Mul", 1, M, binary<NumericTypes>(MulF{}, "Mul"));
  r.add("Div", 1, M, binary<FloatTypes>(DivF{}, "Div"));  // integer division stays on the CPU (division by zero)
  r.add("Pow", 1, M, binary<FloatTypes>(PowF{}, "Pow"));
  r.add("Max", 1, M, variadic<NumericTypes>(MaxF{}, "Max"));
  r.add("Min", 1, M, variadic<NumericTypes>(MinF{}, "Min"));
  r.add("Sum", 1, M, variadic<NumericTypes>(AddF{}, "Sum"));
  r.add("Mean", 1, M, variadic<FloatTypes, AddF, true>(AddF{}, "Mean"));
  r.add("Equal", 1, M, compare(EqF{}, "Equal"));
  r.add("Less", 1, M, compare(LtF{}, "Less"));
  r.add("Greater", 1, M, compare(GtF{}, "Greater"));
  r.add("LessOrEqual", 12, M, compare(LeF{}, "LessOrEqual"));
  r.add("GreaterOrEqual", 12, M, compare(GeF{}, "GreaterOrEqual"));
  r.add("And", 1, M, logic(AndF{}, "And"));
  r.add("Or", 1, M, logic(OrF{}, "Or"));
  r.add("Xor", 1, M, logic(XorF{}, "Xor"));
  r.add<NotKernel>("Not", 1, M);
  r.add<IsNaNKernel>("IsNaN", 9, M);
  r.add<WhereKernel>("Where", 9, M);
  r.add("Cast", 6, M, [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<CastKernel>(i, false); });
  r.add("CastLike", 15, M, [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<CastKernel>(i, true); });
  // Clip's bounds (inputs 1 and 2 from opset 11) are read on the host.
  auto clip = [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ClipKernel>(i); };
  r.add("", "Clip", 6, 10, clip);
  r.add("", "Clip", 11, M, clip, {1, 2});
  r.add("Neg", 1, M, unary<NumericTypes>(NegF{}, "Neg"));
  r.add("Abs", 1, M, unary<NumericTypes>(AbsF{}, "Abs"));
  r.add("Relu", 1, M, unary<NumericTypes>(ReluF{}, "Relu"));
  r.add("Erf", 9, M, unary<FloatTypes>(ErfF{}, "Erf"));
  r.add("Sqrt", 1, M, unary<FloatTypes>(SqrtF{}, "Sqrt"));
  r.add("Reciprocal", 1, M, unary<FloatTypes>(ReciprocalF{}, "Reciprocal"));
  r.add("Exp", 1, M, unary<FloatTypes>(ExpF{}, "Exp"));
  r.add("Log", 1, M, unary<FloatTypes>(LogF{}, "Log"));
  r.add("Tanh", 1, M, unary<FloatTypes>(TanhF{}, "Tanh"));
  r.add("Sigmoid", 1, M, unary<FloatTypes>(SigmoidF{}, "Sigmoid"));
  r.add("Sin", 7, M, unary<FloatTypes>(SinF{}, "Sin"));
  r.add("Cos", 7, M, unary<FloatTypes>(CosF{}, "Cos"));
  r.add("Floor", 1, M, unary<FloatTypes>(FloorF{}, "Floor"));
  r.add("Ceil", 1, M, unary<FloatTypes>(CeilF{}, "Ceil"));
  r.add("Softplus", 1, M, unary<FloatTypes>(SoftplusF{}, "Softplus", 1));
  r.add("LeakyRelu", 1, M, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    if (i.opset() < 6) throw_error<NotImplemented>(i.node().describe(), ": opset ", i.opset(), " on the CUDA provider");
    return std::make_unique<UnaryKernel<FloatTypes, LeakyReluF>>(LeakyReluF{i.attr_float("alpha", 0.01f)}, "LeakyRelu");
  });
  r.add(ops::kDomain, "ReluGrad", 1, M, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<BinaryKernel<FloatTypes, ReluGradF>>(i, ReluGradF{}, "ReluGrad");
  });
  r.add(ops::kDomain, "Gelu", 1, M, [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GeluKernel>(i); });
  r.add(ops::kDomain, "GeluGrad", 1, M, [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GeluGradKernel>(i); });
}

}  // namespace onnxtrain::kernels::cuda
