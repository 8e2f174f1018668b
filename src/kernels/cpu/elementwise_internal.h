// Shared machinery of the elementwise family (elementwise*.cpp, cast.cpp): unary and binary
// kernel templates, float16/bfloat16 block conversion, value conversion between dtypes (checks and
// output shapes: kernels/shape/elementwise.h).
//   unary:  Y[i] = op(X[i])                      Y: shape(X)
//   binary: Y[i] = op(A[bcast(i)], B[bcast(i)])  Y: broadcast(shape(A), shape(B))
// Inner loops run on contiguous pointers of the compute type (float for float16/bfloat16, which
// are converted in blocks), so the compiler vectorizes them; a unary op may also provide
// `vec(__m256)` for float32, used instead of its scalar form.
#pragma once

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/common.h"
#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/vmath512.h"
#include "kernels/registry.h"
#include "kernels/shape/elementwise.h"

namespace onnxtrain::kernels::cpu {

// Family registration helpers (each defined in its own file, called by register_elementwise).
void register_elementwise_unary(KernelRegistry& r);  // elementwise_unary.cpp: math, activations, Clip
void register_elementwise_logic(KernelRegistry& r);  // elementwise_logic.cpp: comparisons, logic, Where
void register_cast(KernelRegistry& r);               // cast.cpp: Cast, CastLike

namespace ew {

/// Thrown by an op inside a loop (integer division by zero, ...); the kernel turns it into an
/// InvalidArgument naming the node.
struct DomainError {
  const char* what;
};

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

/// Elements per block when float16/bfloat16 data is widened to float.
inline constexpr int64_t kBlock = 512;

void widen(const float16* x, float* y, int64_t n);
void widen(const bfloat16* x, float* y, int64_t n);
void narrow(const float* x, float16* y, int64_t n);
void narrow(const float* x, bfloat16* y, int64_t n);
/// widen / narrow of n elements split over the threads (float16 staged through float32 kernels).
void widen_all(const float16* x, float* y, int64_t n);
void narrow_all(const float* x, float16* y, int64_t n);

// ---------------------------------------------------------------- value conversion
/// v rounded to float toward zero, with the last bit set when inexact ("round to odd"): rounding
/// that float again to float16/bfloat16 gives the correctly rounded result of v (no double rounding).
inline float to_float_round_odd(double v) {
  float f = static_cast<float>(v);
  if (!(double(f) != v) || v != v) return f;  // exact, or NaN
  if (std::fabs(double(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

/// Converts one value between element types (not strings): float -> integer truncates toward
/// zero and saturates (NaN -> 0); integer -> integer wraps; -> bool is `v != 0`.
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_half_v<To>) {
    if constexpr (sizeof(From) == 8) return To(to_float_round_odd(static_cast<double>(v)));  // double, (u)int64
    else return To(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (!(v == v)) return To(0);
    if (v <= From(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (v >= From(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

/// c ? a : b on already computed values, as bit masks: GCC does not if-convert a select fed by FP
/// arithmetic under -ftrapping-math (it sinks the arithmetic into the branch), so such loops only
/// vectorize when written this way.
template <class C>
inline C select(bool c, C a, C b) {
  if constexpr (std::is_arithmetic_v<C> && !std::is_same_v<C, bool>) {
    using U = std::conditional_t<sizeof(C) == 8, uint64_t,
                                 std::conditional_t<sizeof(C) == 4, uint32_t,
                                                    std::conditional_t<sizeof(C) == 2, uint16_t, uint8_t>>>;
    const U m = U(U(0) - U(c));
    return std::bit_cast<C>(U((std::bit_cast<U>(a) & m) | (std::bit_cast<U>(b) & U(~m))));
  } else {
    return c ? a : b;
  }
}

// ---------------------------------------------------------------- unary
template <class Op>
concept HasVec = requires(const Op& op) {
#if OT_EW_SIMD
  op.vec(_mm256_setzero_ps());
#else
  requires false;
#endif
};

/// y[i] = op(x[i]) on contiguous arrays of the compute type.
template <class C, class O, class Op>
inline void unary_loop(const Op& op_ref, const C* x, O* y, int64_t n) {
  const Op op = op_ref;  // a local copy: stores to y cannot alias its parameters, so the loop vectorizes
#if OT_EW_SIMD
  if constexpr (std::is_same_v<C, float> && std::is_same_v<O, float> && HasVec<Op>) {
    int64_t done = 0;
    if constexpr (requires { Op::kStagedErf; }) {  // Erf: part by part over blocks, 16 lanes then 8 (the same bits)
      if (vmath512::available()) done = vmath512::erf(x, y, n);
      done += vmath::erf_map(x + done, n - done, [](__m256 v) { return v; },
                             [&](int64_t k, __m256, __m256 e) { _mm256_storeu_ps(y + done + k, e); });
    }
    vmath::apply(x + done, y + done, n - done, [&](__m256 v) { return op.vec(v); });
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(op(x[i]));
}

/// out[i] = op(a[i]) over n elements in parallel; float16/bfloat16 go through float blocks.
template <class T, class O, class Op>
void unary_apply(const Op& op, const T* a, O* out, int64_t n) {
  parallel_for(n, 16384, [&](int64_t b, int64_t e) {
    if constexpr (is_half_v<T>) {
      float in[kBlock], res[kBlock];
      for (int64_t i = b; i < e; i += kBlock) {
        const int64_t m = std::min(kBlock, e - i);
        widen(a + i, in, m);
        if constexpr (std::is_same_v<O, T>) {
          unary_loop(op, in, res, m);
          narrow(res, out + i, m);
        } else {
          unary_loop(op, in, out + i, m);
        }
      }
    } else {
      unary_loop(op, a + b, out + b, e - b);
    }
  });
}

/// Same-shape unary kernel over `Types`; the output has the input's dtype, or bool (BoolOut).
template <class Types, class Op, bool BoolOut = false>
class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const KernelInfo&, Op op) : op_(std::move(op)) {}
  void prepare(PrepareContext& ctx) override {
    dispatch<Types>(ctx.input_dtype(0), ctx.node(), [&]<class T>() {});
    ctx.set_output(0, BoolOut ? DType::kBool : ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    dispatch<Types>(x.dtype(), ctx.node(), [&]<class T>() {
      using O = std::conditional_t<BoolOut, bool, T>;
      unary_apply(op_, x.data<T>(), static_cast<O*>(y.raw_data()), x.numel());
    });
  }

 private:
  Op op_;
};

/// Factory of a unary kernel whose op does not depend on attributes.
template <class Types, bool BoolOut = false, class Op>
KernelFactory unary(Op op) {
  return [op](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel<Types, Op, BoolOut>>(info, op);
  };
}

/// Factory of a unary kernel whose op is built from the node's attributes: make(info) -> op.
template <class Types, bool BoolOut = false, class Make>
KernelFactory unary_attr(Make make) {
  return [make](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    auto op = make(info);
    return std::make_unique<UnaryKernel<Types, decltype(op), BoolOut>>(info, std::move(op));
  };
}

// ---------------------------------------------------------------- binary
/// y[i] = op(a[i * sa], b[i * sb]) for steps sa, sb in {0, 1}, specialized so each case is a
/// plain contiguous loop.
template <class C, class O, class Op>
inline void binary_loop(const Op& op_ref, const C* a, int64_t sa, const C* b, int64_t sb, O* y, int64_t n) {
  const Op op = op_ref;  // local copy (no aliasing with y)
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(op(a[i], b[i]));
  } else if (sa) {
    const C bv = b[0];
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(op(a[i], bv));
  } else if (sb) {
    const C av = a[0];
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(op(av, b[i]));
  } else {
    const O v = static_cast<O>(op(a[0], b[0]));
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

/// binary_loop for any element type: float16/bfloat16 operands are widened to float in blocks.
template <class T, class O, class Op>
inline void binary_any(const Op& op, const T* a, int64_t sa, const T* b, int64_t sb, O* y, int64_t n) {
  if constexpr (is_half_v<T>) {
    float fa[kBlock], fb[kBlock], fy[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      widen(a + i * sa, fa, sa ? m : 1);
      widen(b + i * sb, fb, sb ? m : 1);
      if constexpr (std::is_same_v<O, T>) {
        binary_loop(op, fa, sa, fb, sb, fy, m);
        narrow(fy, y + i, m);
      } else {
        binary_loop(op, fa, sa, fb, sb, y + i, m);
      }
    }
  } else {
    binary_loop(op, a, sa, b, sb, y, n);
  }
}

using shape::Bcast;

/// The run plan of a binary op's operands as shape::binary_geometry lines them up (which checks them).
BroadcastPlan binary_plan(const PrepareContext& ctx, const shape::BinaryAttrs& at);

/// Two operands of one dtype among `Types`; the output has that dtype, or bool (BoolOut).
template <class Types, class Op, bool BoolOut = false>
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const KernelInfo& info, Op op, Bcast mode)
      : op_(std::move(op)), at_(shape::read_binary_attrs(info, mode)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    shape::check_same_type(ctx, 0, 1);
    dispatch<Types>(dt, ctx.node(), [&]<class T>() {});
    plan_ = binary_plan(ctx, at_);
    ctx.set_output(0, BoolOut ? DType::kBool : dt, plan_.out_shape);
    // Runs of 16 where one operand's run repeats along the next axis (a blocked [N, C/16, H, W, 16]
    // times a per-channel [N, C/16, 1, 1, 16]: squeeze-and-excitation gates): walked as groups of
    // those runs, the repeated 16 values held while the other operand streams.
    repeat_ = -1;
    const size_t nd = plan_.outer_dims.size();
    if (plan_.inner == kRepeatRun && nd >= 1 && plan_.runs > 0 && plan_.inner_step[0] == 1 && plan_.inner_step[1] == 1)
      for (int k = 0; k < 2; ++k)
        if (plan_.outer_strides[size_t(k)][nd - 1] == 0 && plan_.outer_strides[size_t(1 - k)][nd - 1] == kRepeatRun) {
          repeat_ = k;
          groups_ = plan_;
          groups_.inner = kRepeatRun * plan_.outer_dims[nd - 1];
          groups_.runs = plan_.runs / plan_.outer_dims[nd - 1];
          groups_.outer_dims.pop_back();
          for (auto& st : groups_.outer_strides) st.pop_back();
        }
  }
  void run(RunContext& ctx) override {
    const Tensor& ta = ctx.input(0);
    const Tensor& tb = ctx.input(1);
    Tensor& ty = ctx.output(0);
    dispatch<Types>(ta.dtype(), ctx.node(), [&]<class T>() {
      using O = std::conditional_t<BoolOut, bool, T>;
      const T* A = ta.data<T>();
      const T* B = tb.data<T>();
      O* Y = static_cast<O*>(ty.raw_data());
      const int64_t sa = plan_.inner_step[0], sb = plan_.inner_step[1];
      try {
        if constexpr (!is_half_v<T>) {
          if (repeat_ >= 0) return run_repeated(A, B, Y);
        }
        parallel_for(plan_.runs, grain_for(plan_.inner), [&](int64_t r0, int64_t r1) {
          plan_.for_runs(r0, r1, [&](int64_t o, const int64_t* off, int64_t n) {
            binary_any(op_, A + off[0], sa, B + off[1], sb, Y + o, n);
          });
        });
      } catch (const DomainError& e) {
        ctx.fail(e.what);
      }
    });
  }

 private:
  static constexpr int64_t kRepeatRun = 16;

  template <class T, class O>
  void run_repeated(const T* A, const T* B, O* Y) const {
    const Op op = op_;
    parallel_for(groups_.runs, grain_for(groups_.inner), [&](int64_t g0, int64_t g1) {
      groups_.for_runs(g0, g1, [&](int64_t o, const int64_t* off, int64_t n) {
        const T* a = A + off[0];
        const T* b = B + off[1];
        O* y = Y + o;
        if (repeat_ == 1) {
          T r[kRepeatRun];
          std::copy(b, b + kRepeatRun, r);
          for (int64_t j = 0; j < n; j += kRepeatRun)
            for (int64_t i = 0; i < kRepeatRun; ++i) y[j + i] = static_cast<O>(op(a[j + i], r[i]));
        } else {
          T r[kRepeatRun];
          std::copy(a, a + kRepeatRun, r);
          for (int64_t j = 0; j < n; j += kRepeatRun)
            for (int64_t i = 0; i < kRepeatRun; ++i) y[j + i] = static_cast<O>(op(r[i], b[j + i]));
        }
      });
    });
  }

  Op op_;
  shape::BinaryAttrs at_;
  BroadcastPlan plan_;
  BroadcastPlan groups_;  // repeat_ >= 0: plan_'s runs grouped along the axis operand repeat_ repeats on
  int repeat_ = -1;
};

template <class Types, bool BoolOut = false, class Op>
KernelFactory binary(Op op, Bcast mode = Bcast::kNumpy) {
  return [op, mode](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<BinaryKernel<Types, Op, BoolOut>>(info, op, mode);
  };
}

}  // namespace ew
}  // namespace onnxtrain::kernels::cpu
