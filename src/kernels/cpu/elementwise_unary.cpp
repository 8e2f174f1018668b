// Unary math and activations, PRelu and Clip.
//   Y[i] = f(X[i])                        Y: shape(X), X's dtype
//   PRelu: Y = X < 0 ? slope * X : X      slope broadcasts to X (unidirectional)
//   Clip:  Y = min(max(X, lo), hi)        lo/hi: attributes (opset < 11) or optional scalar inputs
//   com.onnxtrain.Gelu(X) -> Y[, A]:      A = 1 + erf(X / sqrt(2)), Y = (X * A) * 0.5
//   com.onnxtrain.GeluGrad(dY, X[, A]):   dX = dY * (0.5 A + X phi(X)), phi(x) = exp(-x^2/2) / sqrt(2 pi)
// float16/bfloat16 compute in float; float32 Exp/Log/Tanh/Sigmoid/Erf use the AVX2 versions of
// elementwise_simd.h (max error 1-2 ulp, documented there).
#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/vmath512.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

using namespace ew;

using FloatAndSigned = decltype(FloatTypes{} + SignedIntTypes{});

#if OT_EW_SIMD
#define OT_VEC(fn) \
  __m256 vec(__m256 x) const { return fn(x); }
#else
#define OT_VEC(fn)
#endif

/// A unary op from a scalar expression of x (compute type C) and optionally a vector function.
#define OT_UNARY(Name, expr, ...)      \
  struct Name {                        \
    template <class C>                 \
    C operator()(C x) const {          \
      return static_cast<C>(expr);     \
    }                                  \
    __VA_ARGS__                        \
  };

template <class C>
C wrap_neg(C x) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C>)
    return static_cast<C>(std::make_unsigned_t<C>(0) - std::make_unsigned_t<C>(x));
  else
    return -x;
}

template <class C>
C sigmoid(C x) {
  const C e = std::exp(-std::fabs(x));
  return (x >= C(0) ? C(1) : e) / (C(1) + e);
}

/// erf for floats; integers go through double (the result is -1, 0 or 1).
template <class C>
C erf_any(C x) {
  if constexpr (std::is_integral_v<C>) return static_cast<C>(std::erf(double(x)));
  else return std::erf(x);
}

OT_UNARY(NegOp, wrap_neg(x))
OT_UNARY(AbsOp, x < C(0) ? wrap_neg(x) : x)
OT_UNARY(SqrtOp, std::sqrt(x))
OT_UNARY(ReciprocalOp, C(1) / x)
OT_UNARY(ExpOp, std::exp(x), OT_VEC(vmath::exp))
OT_UNARY(LogOp, std::log(x), OT_VEC(vmath::log))
OT_UNARY(ErfOp, erf_any(x), OT_VEC(vmath::erf) static constexpr bool kStagedErf = true;)
OT_UNARY(TanhOp, std::tanh(x), OT_VEC(vmath::tanh))
OT_UNARY(SigmoidOp, sigmoid(x), OT_VEC(vmath::sigmoid))
OT_UNARY(SinOp, std::sin(x))
OT_UNARY(CosOp, std::cos(x))
OT_UNARY(TanOp, std::tan(x))
OT_UNARY(AsinOp, std::asin(x))
OT_UNARY(AcosOp, std::acos(x))
OT_UNARY(AtanOp, std::atan(x))
OT_UNARY(SinhOp, std::sinh(x))
OT_UNARY(CoshOp, std::cosh(x))
OT_UNARY(AsinhOp, std::asinh(x))
OT_UNARY(AcoshOp, std::acosh(x))
OT_UNARY(AtanhOp, std::atanh(x))
// Sign keeps NaN (numpy.sign).
OT_UNARY(SignOp, x > C(0) ? C(1) : x < C(0) ? C(-1) : x)
OT_UNARY(FloorOp, std::floor(x))
OT_UNARY(CeilOp, std::ceil(x))
OT_UNARY(RoundOp, std::nearbyint(x))  // default rounding mode: half to even
OT_UNARY(ReluOp, x < C(0) ? C(0) : x)  // NaN stays NaN, as max(x, 0) in ONNX's reference (numpy)
#if OT_EW_SIMD
inline __m256 softplus_vec(__m256 x) {
  const __m256 e = vmath::exp(_mm256_sub_ps(_mm256_setzero_ps(), vmath::abs(x)));
  return _mm256_add_ps(_mm256_max_ps(x, _mm256_setzero_ps()), vmath::log1p_pos(e));  // max(NaN, 0) = 0; e is NaN
}
#endif
// log(1 + e^x) without overflow.
OT_UNARY(SoftplusOp, std::max(x, C(0)) + std::log1p(std::exp(-std::fabs(x))), OT_VEC(softplus_vec))
OT_UNARY(SoftsignOp, x / (C(1) + std::fabs(x)))
// x * HardSigmoid(x) with alpha = 1/6, beta = 1/2.
OT_UNARY(HardSwishOp, x * std::max(C(0), std::min(C(1), x * C(1.0 / 6.0) + C(0.5))))

// ---------------------------------------------------------------- activations with attributes
struct LeakyReluOp {
  float alpha;
  template <class C>
  C operator()(C x) const {
    return select(x < C(0), C(C(alpha) * x), x);
  }
};
struct ThresholdedReluOp {
  float alpha;
  template <class C>
  C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};
struct HardSigmoidOp {
  float alpha, beta;
  template <class C>
  C operator()(C x) const {
    return std::max(C(0), std::min(C(1), C(alpha) * x + C(beta)));
  }
};
struct EluOp {
  float alpha;
  template <class C>
  C operator()(C x) const {
    return x >= C(0) ? x : C(alpha) * std::expm1(x);
  }
#if OT_EW_SIMD
  __m256 vec(__m256 x) const {
    const __m256 neg = _mm256_mul_ps(vmath::set1(alpha), vmath::expm1(x));
    return vmath::select(vmath::ge(x, _mm256_setzero_ps()), x, neg);  // NaN: expm1(NaN)
  }
#endif
};
struct SeluOp {
  float alpha, gamma;
  template <class C>
  C operator()(C x) const {
    return C(gamma) * (x > C(0) ? x : C(alpha) * std::expm1(x));
  }
#if OT_EW_SIMD
  __m256 vec(__m256 x) const {
    const __m256 neg = _mm256_mul_ps(vmath::set1(alpha), vmath::expm1(x));
    const __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
    return _mm256_mul_ps(vmath::set1(gamma), vmath::select(pos, x, neg));
  }
#endif
};
struct CeluOp {
  float alpha;
  template <class C>
  C operator()(C x) const {
    return std::max(C(0), x) + std::min(C(0), C(alpha) * std::expm1(x / C(alpha)));
  }
#if OT_EW_SIMD
  __m256 vec(__m256 x) const {
    const __m256 a = vmath::set1(alpha);
    const __m256 neg = _mm256_mul_ps(a, vmath::expm1(_mm256_div_ps(x, a)));
    return vmath::select(vmath::ge(x, _mm256_setzero_ps()), x, neg);  // alpha * expm1(x / alpha) <= 0 iff x <= 0
  }
#endif
};
// Shrink: x < -lambd ? x + bias : x > lambd ? x - bias : 0 (integers computed in double).
struct ShrinkOp {
  float bias, lambd;
  template <class C>
  C operator()(C x) const {
    using D = std::conditional_t<std::is_integral_v<C>, double, C>;
    const D v = static_cast<D>(x);
    return convert<C>(select(v < -D(lambd), D(v + D(bias)), select(v > D(lambd), D(v - D(bias)), D(0))));
  }
};

struct PReluOp {
  template <class C>
  C operator()(C x, C slope) const {
    return select(x < C(0), static_cast<C>(wrap_mul(slope, x)), x);  // integers wrap, as Mul's
  }
};

// ---------------------------------------------------------------- Clip
template <class C>
struct ClipOp {
  C lo, hi;
  C operator()(C x) const { return std::min(std::max(x, lo), hi); }  // keeps NaN
};

// Opset < 11: min/max attributes (float types); opset >= 11: optional scalar inputs 1 and 2
// (opset >= 12: every numeric type). Absent bounds are the type's range; min > max gives max.
class ClipKernel final : public Kernel {
 public:
  explicit ClipKernel(const KernelInfo& info) : at_(shape::read_clip_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_clip(ctx);
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      C lo = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                                  : std::numeric_limits<C>::lowest();
      C hi = std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
      if (at_.from_attrs) {
        if (at_.has_min) lo = convert<C>(at_.min);
        if (at_.has_max) hi = convert<C>(at_.max);
      } else {
        if (ctx.has_input(1)) lo = convert<C>(ctx.input(1).data<T>()[0]);
        if (ctx.has_input(2)) hi = convert<C>(ctx.input(2).data<T>()[0]);
      }
      unary_apply(ClipOp<C>{lo, hi}, x.data<T>(), ctx.output(0).data<T>(), x.numel());
    });
  }

 private:
  shape::ClipAttrs at_;
};

template <class Op>
KernelFactory simple(Op op) {
  return unary<FloatTypes>(op);
}

// ---------------------------------------------------------------- GELU (com.onnxtrain)
// Forward and backward of the exact GELU that train/fusion.h fuses out of torch.onnx's exported
// arithmetic. The forward repeats that arithmetic in the same order with the same float32
// constants (x / 1.4142135f, erf, + 1, * x, * 0.5): in float32 its bits are those of the unfused
// nodes; float64 divides by sqrt(2) in double; float16/bfloat16 compute in float and round once at
// the end instead of after every node. The
// gradient d/dx [x Phi(x)] = Phi(x) + x phi(x) with Phi = A / 2 reads the forward's A when given,
// else recomputes it with the forward's arithmetic (the same bits; train/fusion.h no longer keeps A,
// which cost an activation-sized tensor per GELU until the backward pass, as PyTorch does not).
// The vector paths are vmath::gelu_t / gelu_grad_t: 16 lanes where the CPU has AVX-512
// (vmath512.cpp), else 8, with the same bits.
using vmath::kInvSqrt2Pi;
using vmath::kSqrt2f;
#if OT_EW_SIMD
// A = 1 + erf(x / sqrt 2) on 8 floats: the forward's and the gradient's (the same bits in both).
inline __m256 gelu_a_ps(__m256 v) {
  return _mm256_add_ps(vmath::erf(vmath::div_sqrt2_t<vmath::O8>(v)), _mm256_set1_ps(1.0f));
}
#endif

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
    void* y = ctx.has_output(0) ? ctx.output(0).raw_data() : nullptr;
    void* a = ctx.num_outputs() > 1 && ctx.has_output(1) ? ctx.output(1).raw_data() : nullptr;
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      const T* X = x.data<T>();
      T* Y = static_cast<T*>(y);
      T* A = static_cast<T*>(a);
      parallel_for(x.numel(), 16384, [&](int64_t b, int64_t e) {
        int64_t i = b;
#if OT_EW_SIMD
        if constexpr (std::is_same_v<T, float>) {
          // Full vectors of 16, then of 8 (erf part by part over blocks: gelu_a_ps's bits).
          auto at = [&](float* p) { return p ? p + i : nullptr; };
          if (vmath512::available()) i += vmath512::gelu(X + i, at(Y), at(A), e - i);
          i += vmath::gelu_t<vmath::O8>(X + i, at(Y), at(A), e - i);
          if (i < e) {  // the tail through a padded vector: the same erf as the blocks (and the Erf kernel)
            alignas(32) float xb[8] = {}, yb[8], ab[8];
            std::copy(X + i, X + e, xb);
            const __m256 v = _mm256_load_ps(xb), av = gelu_a_ps(v);
            _mm256_store_ps(yb, _mm256_mul_ps(_mm256_mul_ps(v, av), _mm256_set1_ps(0.5f)));
            _mm256_store_ps(ab, av);
            if (Y) std::copy(yb, yb + (e - i), Y + i);
            if (A) std::copy(ab, ab + (e - i), A + i);
          }
          return;
        }
#endif
        const C s2 = std::is_same_v<C, double> ? C(std::sqrt(2.0)) : C(kSqrt2f);
        for (; i < e; ++i) {
          const C v = C(X[i]);
          const C av = C(erf_any(C(v / s2))) + C(1);
          if (Y) Y[i] = T((v * av) * C(0.5f));
          if (A) A[i] = T(av);
        }
      });
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
    const bool has_a = ctx.num_inputs() > 2 && ctx.has_input(2);
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      const T* dY = ctx.input(0).data<T>();
      const T* X = x.data<T>();
      const T* A = has_a ? ctx.input(2).data<T>() : nullptr;
      T* dX = ctx.output(0).data<T>();
      parallel_for(x.numel(), 16384, [&](int64_t b, int64_t e) {
        int64_t i = b;
#if OT_EW_SIMD
        if constexpr (std::is_same_v<T, float>) {
          if (A) {
            for (; i + 8 <= e; i += 8)
              _mm256_storeu_ps(dX + i, vmath::gelu_grad_one<vmath::O8>(_mm256_loadu_ps(dY + i), _mm256_loadu_ps(X + i),
                                                                       _mm256_loadu_ps(A + i)));
          } else {  // A recomputed as the forward does (gelu_a_ps's bits): 16 lanes, then 8
            if (vmath512::available()) i += vmath512::gelu_grad(dY + i, X + i, dX + i, e - i);
            i += vmath::gelu_grad_t<vmath::O8>(dY + i, X + i, dX + i, e - i);
          }
          if (!A && i < e) {  // the tail's A as the forward computes it (a padded vector), then as below
            alignas(32) float xb[8] = {}, ab[8];
            std::copy(X + i, X + e, xb);
            _mm256_store_ps(ab, gelu_a_ps(_mm256_load_ps(xb)));
            for (int64_t k = 0; i < e; ++i, ++k) {
              const float v = X[i];
              const float phi = float(std::exp(-0.5 * double(v) * double(v)) * kInvSqrt2Pi);
              dX[i] = dY[i] * (0.5f * ab[k] + v * phi);
            }
            return;
          }
        }
#endif
        const C s2 = std::is_same_v<C, double> ? C(std::sqrt(2.0)) : C(kSqrt2f);
        for (; i < e; ++i) {
          const C v = C(X[i]);
          const C av = A ? C(A[i]) : C(erf_any(C(v / s2))) + C(1);
          const C phi = C(std::exp(-0.5 * double(v) * double(v)) * kInvSqrt2Pi);
          dX[i] = T(C(dY[i]) * (C(0.5f) * av + v * phi));
        }
      });
    });
  }
};

}  // namespace

void register_elementwise_unary(KernelRegistry& r) {
  constexpr int64_t M = kMaxOpsetAll;
  r.add("Neg", 1, M, unary<FloatAndSigned>(NegOp{}));
  r.add("Abs", 1, M, unary<NumericTypes>(AbsOp{}));
  r.add("Sign", 9, M, unary<NumericTypes>(SignOp{}));
  r.add("Relu", 1, M, unary<FloatAndSigned>(ReluOp{}));
  r.add("Erf", 9, M, unary<NumericTypes>(ErfOp{}));
  r.add(ops::kDomain, "Gelu", 1, M,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GeluKernel>(i); });
  r.add(ops::kDomain, "GeluGrad", 1, M,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GeluGradKernel>(i); });
  r.add("Sqrt", 1, M, simple(SqrtOp{}));
  r.add("Reciprocal", 1, M, simple(ReciprocalOp{}));
  r.add("Exp", 1, M, simple(ExpOp{}));
  r.add("Log", 1, M, simple(LogOp{}));
  r.add("Tanh", 1, M, simple(TanhOp{}));
  r.add("Sigmoid", 1, M, simple(SigmoidOp{}));
  r.add("Sin", 7, M, simple(SinOp{}));
  r.add("Cos", 7, M, simple(CosOp{}));
  r.add("Tan", 7, M, simple(TanOp{}));
  r.add("Asin", 7, M, simple(AsinOp{}));
  r.add("Acos", 7, M, simple(AcosOp{}));
  r.add("Atan", 7, M, simple(AtanOp{}));
  r.add("Sinh", 9, M, simple(SinhOp{}));
  r.add("Cosh", 9, M, simple(CoshOp{}));
  r.add("Asinh", 9, M, simple(AsinhOp{}));
  r.add("Acosh", 9, M, simple(AcoshOp{}));
  r.add("Atanh", 9, M, simple(AtanhOp{}));
  r.add("Floor", 1, M, simple(FloorOp{}));
  r.add("Ceil", 1, M, simple(CeilOp{}));
  r.add("Round", 11, M, simple(RoundOp{}));
  r.add("Softplus", 1, M, simple(SoftplusOp{}));
  r.add("Softsign", 1, M, simple(SoftsignOp{}));
  r.add("HardSwish", 14, M, simple(HardSwishOp{}));
  // Opset 1 versions differ only by the ignored consumed_inputs attribute.
  r.add("LeakyRelu", 1, M, unary_attr<FloatTypes>([](const KernelInfo& i) {
          return LeakyReluOp{i.attr_float("alpha", 0.01f)};
        }));
  r.add("ThresholdedRelu", 10, M, unary_attr<FloatTypes>([](const KernelInfo& i) {
          return ThresholdedReluOp{i.attr_float("alpha", 1.0f)};
        }));
  r.add("HardSigmoid", 1, M, unary_attr<FloatTypes>([](const KernelInfo& i) {
          return HardSigmoidOp{i.attr_float("alpha", 0.2f), i.attr_float("beta", 0.5f)};
        }));
  r.add("Elu", 1, M, unary_attr<FloatTypes>([](const KernelInfo& i) { return EluOp{i.attr_float("alpha", 1.0f)}; }));
  r.add("Selu", 1, M, unary_attr<FloatTypes>([](const KernelInfo& i) {
          return SeluOp{i.attr_float("alpha", 1.67326319217681884765625f),
                        i.attr_float("gamma", 1.05070102214813232421875f)};
        }));
  r.add("Celu", 12, M, unary_attr<FloatTypes>([](const KernelInfo& i) { return CeluOp{shape::read_celu_alpha(i)}; }));
  r.add("Shrink", 9, M, unary_attr<NumericTypes>([](const KernelInfo& i) {
          return ShrinkOp{i.attr_float("bias", 0.0f), i.attr_float("lambd", 0.5f)};
        }));
  r.add("PRelu", 1, M, binary<NumericTypes>(PReluOp{}, Bcast::kUnidirectional));
  r.add<ClipKernel>("Clip", 1, M);
}

}  // namespace onnxtrain::kernels::cpu
