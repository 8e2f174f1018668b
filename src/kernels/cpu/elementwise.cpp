// Elementwise arithmetic with numpy broadcasting, the variadic Min/Max/Sum/Mean, Identity, and the
// family's entry point (unary math and activations, logic and Cast live in elementwise_*.cpp and
// cast.cpp).
//   Add Sub Mul Div Mod BitShift: Y = op(A, B)           Y: broadcast(A, B)
//   Pow:                          Y = A ^ B (B of any numeric type)        Y: broadcast, A's dtype
//   Min Max Sum Mean:             Y = fold(op, X0..Xn-1)                   Y: broadcast(X0..Xn-1)
// Integers wrap on overflow; integer division or modulus by zero raises InvalidArgument naming the
// node.
#include <functional>

#include "kernels/cpu/elementwise_internal.h"

namespace onnxtrain::kernels::cpu {

namespace ew {

// ---------------------------------------------------------------- float16/bfloat16 blocks
void widen(const float16* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
#endif
  for (; i < n; ++i) y[i] = float(x[i]);
}

void narrow(const float* x, float16* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) y[i] = float16(x[i]);
}

void widen_all(const float16* x, float* y, int64_t n) {
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) { widen(x + b, y + b, e - b); });
}
void narrow_all(const float* x, float16* y, int64_t n) {
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) { narrow(x + b, y + b, e - b); });
}

void widen(const bfloat16* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(x[i].bits) << 16;
    std::memcpy(y + i, &u, 4);
  }
}

void narrow(const float* x, bfloat16* y, int64_t n) {
  // bfloat16::from_float, written branch-free so it vectorizes.
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    const uint16_t rounded = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    const uint16_t nan = uint16_t((u >> 16) | 0x40u);
    y[i].bits = (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
  }
}

// ---------------------------------------------------------------- broadcasting
BroadcastPlan binary_plan(const PrepareContext& ctx, const shape::BinaryAttrs& at) {
  const shape::BinaryGeom g = shape::binary_geometry(ctx, at);
  BroadcastPlan plan;
  // The shapes broadcast: only the plan's limit of collapsed dims is left to fail on, reported as
  // shapes that do not broadcast.
  if (!plan.init({g.a, g.b}))
    ctx.fail("shapes ", shape_to_string(g.a), " and ", shape_to_string(ctx.input_shape(1)), " cannot be broadcast");
  return plan;
}

}  // namespace ew

namespace {

using namespace ew;

// ---------------------------------------------------------------- integer arithmetic helpers
// int32/int64 compute as their unsigned type (smaller integers are promoted to int anyway).
template <class C>
using wide_t = typename std::conditional_t<std::is_integral_v<C> && std::is_signed_v<C> && sizeof(C) >= 4,
                                           std::make_unsigned<C>, std::type_identity<C>>::type;

/// a op b with two's-complement wrap-around for int32/int64 (no signed-overflow UB).
template <class F>
struct Wrapping {
  template <class C>
  C operator()(C a, C b) const {
    using W = wide_t<C>;
    return static_cast<C>(F{}(static_cast<W>(a), static_cast<W>(b)));
  }
};
using AddOp = Wrapping<std::plus<>>;
using SubOp = Wrapping<std::minus<>>;
using MulOp = Wrapping<std::multiplies<>>;

template <class C>
void check_divisor(C b) {
  if constexpr (std::is_integral_v<C>)
    if (b == C(0)) throw DomainError{"integer division by zero"};
}

// Integer division truncates toward zero (C semantics, as onnxruntime); MIN / -1 wraps to MIN.
struct DivOp {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      check_divisor(b);
      if constexpr (std::is_signed_v<C>)
        if (b == C(-1)) return static_cast<C>(std::make_unsigned_t<C>(0) - std::make_unsigned_t<C>(a));
    }
    return static_cast<C>(a / b);
  }
};

// fmod = 0: the remainder has the divisor's sign (Python / numpy.mod); fmod = 1: the dividend's
// (C fmod / numpy.fmod).
struct ModOp {
  bool fmod = false;
  template <class C>
  C operator()(C a, C b) const {
    C r;
    if constexpr (std::is_integral_v<C>) {
      check_divisor(b);
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return C(0);
      }
      r = static_cast<C>(a % b);
    } else {
      r = std::fmod(a, b);
      if (!fmod && r == C(0)) return std::copysign(C(0), b);
    }
    if constexpr (std::is_signed_v<C> || std::is_floating_point_v<C>)
      if (!fmod && r != C(0) && ((r < C(0)) != (b < C(0)))) r = static_cast<C>(r + b);
    return r;
  }
};

struct BitShiftOp {
  bool left = true;
  template <class C>
  C operator()(C a, C b) const {
    if (b >= C(sizeof(C) * 8)) return C(0);
    return static_cast<C>(left ? a << b : a >> b);
  }
};

// Max/Min propagate NaN (numpy.maximum / numpy.minimum).
struct MaxOp {
  template <class C>
  C operator()(C a, C b) const {
    return (a > b || a != a) ? a : b;
  }
};
struct MinOp {
  template <class C>
  C operator()(C a, C b) const {
    return (a < b || a != a) ? a : b;
  }
};

// ---------------------------------------------------------------- Pow
template <class T, class U>
T int_pow(T base, U e) {
  if constexpr (std::is_signed_v<U>) {
    if (e < U(0)) {
      if (base == T(1)) return T(1);
      if constexpr (std::is_signed_v<T>)
        if (base == T(-1)) return (e % 2) ? T(-1) : T(1);
      if (base == T(0)) throw DomainError{"integer Pow: zero to a negative power"};
      return T(0);
    }
  }
  uint64_t r = 1, x = static_cast<uint64_t>(static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(base));
  for (uint64_t n = static_cast<uint64_t>(e); n; n >>= 1) {
    if (n & 1) r *= x;
    x *= x;
  }
  return static_cast<T>(r);
}

/// base ^ exponent with numpy's result for (T, U): same float types compute in that type (float
/// for float16/bfloat16); integers exactly (wrapping); mixed types in double, cast to T.
template <class T, class U>
T pow_value(T a, U b) {
  if constexpr (std::is_same_v<T, U> && !std::is_integral_v<T>) {
    using C = compute_t<T>;
    return static_cast<T>(std::pow(static_cast<C>(a), static_cast<C>(b)));
  } else if constexpr (std::is_integral_v<T> && std::is_integral_v<U>) {
    return int_pow(a, b);
  } else {
    return convert<T>(std::pow(convert<double>(a), convert<double>(b)));
  }
}

class PowKernel final : public Kernel {
 public:
  explicit PowKernel(const KernelInfo& info) : at_(shape::read_binary_attrs(info, Bcast::kNumpy)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_pow_types(ctx);
    plan_ = binary_plan(ctx, at_);
    ctx.set_output(0, ctx.input_dtype(0), plan_.out_shape);
  }
  void run(RunContext& ctx) override {
    const Tensor& ta = ctx.input(0);
    const Tensor& tb = ctx.input(1);
    Tensor& ty = ctx.output(0);
    dispatch<NumericTypes>(ta.dtype(), ctx.node(), [&]<class T>() {
      const T* a = ta.data<T>();
      T* y = ty.data<T>();
      if (tb.dtype() == ta.dtype()) {
        const T* b = tb.data<T>();
        if constexpr (std::is_floating_point_v<T>) {
          // Scalar exponents whose power is exact in one operation (pow's result bit for bit):
          // x^2 (variance, norms) and x^1 (the gradient of x^2) are hot.
          if (tb.numel() == 1) {
            const T e = b[0];
            if (e == T(2)) return run_loop(ctx, a, b, y, [](T v, T) { return v * v; });
            if (e == T(1)) return run_loop(ctx, a, b, y, [](T v, T) { return v; });
            if (e == T(0)) return run_loop(ctx, a, b, y, [](T, T) { return T(1); });
            if (e == T(-1)) return run_loop(ctx, a, b, y, [](T v, T) { return T(1) / v; });
          }
        }
        return run_loop(ctx, a, b, y, [](T u, T v) { return pow_value(u, v); });
      }
      // Mixed types: the exponent is read as the one type its result depends on — int64 or uint64
      // for an integer base and exponent (exact), double otherwise — so that one loop per base type
      // serves every exponent type (pow_value gives the same values as with the exponent's own type).
      if constexpr (std::is_integral_v<T>) {
        if (tb.dtype() == DType::kUInt64) return run_mixed<uint64_t>(ctx, a, tb, y);
        if (dtype_is_integer(tb.dtype())) return run_mixed<int64_t>(ctx, a, tb, y);
      }
      run_mixed<double>(ctx, a, tb, y);
    });
  }

 private:
  template <class U, class E>
  static E read_as(const void* p, int64_t i) {
    return convert<E>(static_cast<const U*>(p)[i]);
  }

  template <class E, class T>
  void run_mixed(RunContext& ctx, const T* A, const Tensor& tb, T* Y) {
    E (*read)(const void*, int64_t) = nullptr;
    dispatch<NumericTypes>(tb.dtype(), ctx.node(), [&]<class U>() { read = &read_as<U, E>; });
    const void* B = tb.raw_data();
    const int64_t sa = plan_.inner_step[0], sb = plan_.inner_step[1];
    try {
      parallel_for(plan_.runs, grain_for(plan_.inner), [&](int64_t r0, int64_t r1) {
        plan_.for_runs(r0, r1, [&](int64_t o, const int64_t* off, int64_t n) {
          const T* a = A + off[0];
          T* y = Y + o;
          for (int64_t i = 0; i < n; ++i) y[i] = pow_value(a[i * sa], read(B, off[1] + i * sb));
        });
      });
    } catch (const DomainError& e) {
      ctx.fail(e.what);
    }
  }

  template <class T, class U, class F>
  void run_loop(RunContext& ctx, const T* A, const U* B, T* Y, F f) {
    const int64_t sa = plan_.inner_step[0], sb = plan_.inner_step[1];
    try {
      parallel_for(plan_.runs, grain_for(plan_.inner), [&](int64_t r0, int64_t r1) {
        plan_.for_runs(r0, r1, [&](int64_t o, const int64_t* off, int64_t n) {
          const T* a = A + off[0];
          const U* b = B + off[1];
          T* y = Y + o;
          for (int64_t i = 0; i < n; ++i) y[i] = f(a[i * sa], b[i * sb]);
        });
      });
    } catch (const DomainError& e) {
      ctx.fail(e.what);
    }
  }

  shape::BinaryAttrs at_;
  BroadcastPlan plan_;
};

// ---------------------------------------------------------------- Min Max Sum Mean
/// Folds every input with `op` (numpy broadcasting). Up to BroadcastPlan::kMaxInputs inputs run in
/// one pass; more are folded into the output in further passes of at most kMaxInputs - 1 inputs.
template <class Types, class Op, bool Mean = false>
class VariadicKernel final : public Kernel {
 public:
  VariadicKernel(const KernelInfo&, Op op) : op_(op) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_variadic_inputs(ctx);
    dispatch<Types>(ctx.input_dtype(0), ctx.node(), [&]<class T>() {});
    const shape::VariadicGeom g = shape::variadic_geometry(ctx);
    const std::vector<Shape>& shapes = g.inputs;
    const Shape& out = g.output;
    const size_t n = shapes.size();
    passes_.clear();
    constexpr size_t kMax = BroadcastPlan::kMaxInputs;
    if (n <= kMax) {
      passes_.push_back({BroadcastPlan{}, 0, n, false});
      if (!passes_.back().plan.init(shapes)) ctx.fail("shapes have too many dimensions to broadcast");
    } else {
      // Each pass puts the output first: as a shape only in the first pass, as the accumulator later.
      for (size_t b = 0; b < n; b += kMax - 1) {
        const size_t e = std::min(n, b + kMax - 1);
        std::vector<Shape> s{out};
        s.insert(s.end(), shapes.begin() + long(b), shapes.begin() + long(e));
        passes_.push_back({BroadcastPlan{}, b, e, b > 0});
        if (!passes_.back().plan.init(s)) ctx.fail("shapes have too many dimensions to broadcast");
      }
    }
    n_ = n;
    ctx.set_output(0, ctx.input_dtype(0), out);
  }
  void run(RunContext& ctx) override {
    Tensor& ty = ctx.output(0);
    dispatch<Types>(ty.dtype(), ctx.node(), [&]<class T>() {
      T* Y = ty.data<T>();
      for (size_t p = 0; p < passes_.size(); ++p) {
        const Pass& pass = passes_[p];
        const BroadcastPlan& plan = pass.plan;
        std::vector<const T*> src;
        if (n_ > BroadcastPlan::kMaxInputs) src.push_back(Y);  // accumulator or shape carrier
        for (size_t i = pass.begin; i < pass.end; ++i) src.push_back(ctx.input(i).data<T>());
        const size_t first = n_ > BroadcastPlan::kMaxInputs && !pass.accumulate ? 1 : 0;
        const bool last = p + 1 == passes_.size();
        parallel_for(plan.runs, grain_for(plan.inner), [&](int64_t r0, int64_t r1) {
          plan.for_runs(r0, r1, [&](int64_t o, const int64_t* off, int64_t n) {
            fold_run(src, first, plan, off, Y + o, n, Mean && last);
          });
        });
      }
    });
  }

 private:
  struct Pass {
    BroadcastPlan plan;
    size_t begin, end;  // input range
    bool accumulate;    // the output holds the fold of earlier passes
  };

  /// Loads n values of p (step 0 or 1) into dst as the compute type.
  template <class T, class C>
  static void load(const T* p, int64_t step, C* dst, int64_t n) {
    if (step == 0) {
      C v;
      if constexpr (is_half_v<T>) v = static_cast<float>(p[0]);
      else v = p[0];
      for (int64_t i = 0; i < n; ++i) dst[i] = v;
    } else if constexpr (is_half_v<T>) {
      widen(p, dst, n);
    } else {
      std::memcpy(dst, p, size_t(n) * sizeof(T));
    }
  }

  template <class T>
  void fold_run(const std::vector<const T*>& src, size_t first, const BroadcastPlan& plan, const int64_t* off, T* y,
                int64_t n, bool mean) const {
    using C = compute_t<T>;
    const Op op = op_;  // local copy (no aliasing with acc)
    if constexpr (!is_half_v<T>) {
      // Every operand contiguous: fold straight into y, a block at a time (y stays in cache), in
      // the same left-to-right order as below — no staging copies (a Sum of three gradients ran
      // 2.6x an Add's time through them).
      bool contiguous = src.size() - first >= 2;
      for (size_t j = first; j < src.size(); ++j) contiguous = contiguous && plan.inner_step[j] == 1;
      if (contiguous) {
        for (int64_t b = 0; b < n; b += kBlock) {
          const int64_t m = std::min(kBlock, n - b);
          const T* a = src[first] + off[first] + b;
          const T* c = src[first + 1] + off[first + 1] + b;
          T* q = y + b;
          for (int64_t i = 0; i < m; ++i) q[i] = static_cast<T>(op(C(a[i]), C(c[i])));
          for (size_t j = first + 2; j < src.size(); ++j) {
            const T* d = src[j] + off[j] + b;
            for (int64_t i = 0; i < m; ++i) q[i] = static_cast<T>(op(C(q[i]), C(d[i])));
          }
          if (mean) {
            const C dv = static_cast<C>(n_);
            for (int64_t i = 0; i < m; ++i) q[i] = static_cast<T>(C(q[i]) / dv);
          }
        }
        return;
      }
    }
    C acc[kBlock], tmp[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      load(src[first] + off[first] + b * plan.inner_step[first], plan.inner_step[first], acc, m);
      for (size_t j = first + 1; j < src.size(); ++j) {
        load(src[j] + off[j] + b * plan.inner_step[j], plan.inner_step[j], tmp, m);
        for (int64_t i = 0; i < m; ++i) acc[i] = static_cast<C>(op(acc[i], tmp[i]));
      }
      if (mean) {
        const C d = static_cast<C>(n_);
        for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] / d;
      }
      if constexpr (is_half_v<T>) narrow(acc, y + b, m);
      else std::memcpy(y + b, acc, size_t(m) * sizeof(T));
    }
  }

  Op op_;
  size_t n_ = 0;
  std::vector<Pass> passes_;
};

template <class Types, bool Mean = false, class Op>
KernelFactory variadic(Op op) {
  return [op](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<VariadicKernel<Types, Op, Mean>>(info, op);
  };
}

// ---------------------------------------------------------------- Identity
class IdentityKernel final : public Kernel {
 public:
  explicit IdentityKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override { identity_prepare(ctx); }
  void run(RunContext& ctx) override { identity_run(ctx); }
};

}  // namespace

void identity_prepare(PrepareContext& ctx) {
  if (ctx.input_kind(0) == Value::Kind::kSequence) {
    ctx.set_output_sequence(0, ctx.input_dtype(0));
    return;
  }
  if (ctx.input_kind(0) != Value::Kind::kTensor) {
    ctx.set_output_dynamic(0, DType::kUndefined);
    return;
  }
  ctx.set_output_alias(0, 0, ctx.input_shape(0));
}

void identity_run(RunContext& ctx) {
  if (!ctx.has_input(0) || ctx.input_value(0).kind != Value::Kind::kTensor) {
    ctx.output_value(0) = ctx.input_value(0);
    return;
  }
  if (!ctx.output_aliases_input(0, 0)) ctx.output(0).copy_from(ctx.input(0));
}

void register_elementwise(KernelRegistry& r) {
  using Arith = NumericTypes;
  // Opsets 1-6 use legacy broadcasting (the broadcast/axis attributes); BinaryKernel switches on
  // the node's opset.
  r.add("Add", 1, kMaxOpsetAll, binary<Arith>(AddOp{}));
  r.add("Sub", 1, kMaxOpsetAll, binary<Arith>(SubOp{}));
  r.add("Mul", 1, kMaxOpsetAll, binary<Arith>(MulOp{}));
  r.add("Div", 1, kMaxOpsetAll, binary<Arith>(DivOp{}));
  r.add<PowKernel>("Pow", 1, kMaxOpsetAll);
  r.add("Mod", 10, kMaxOpsetAll, [](const KernelInfo& info) {
    return binary<Arith>(ModOp{info.attr_int("fmod", 0) != 0})(info);
  });
  r.add("BitShift", 11, kMaxOpsetAll, [](const KernelInfo& info) {
    return binary<UnsignedIntTypes>(BitShiftOp{shape::read_bitshift_left(info)})(info);
  });
  r.add("Max", 1, kMaxOpsetAll, variadic<Arith>(MaxOp{}));
  r.add("Min", 1, kMaxOpsetAll, variadic<Arith>(MinOp{}));
  r.add("Sum", 1, kMaxOpsetAll, variadic<Arith>(AddOp{}));
  r.add("Mean", 1, kMaxOpsetAll, variadic<FloatTypes, true>([](auto a, auto b) { return a + b; }));
  r.add<IdentityKernel>("Identity", 1, kMaxOpsetAll);
  register_elementwise_unary(r);
  register_elementwise_logic(r);
  register_cast(r);
}

}  // namespace onnxtrain::kernels::cpu
