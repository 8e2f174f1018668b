// Elementwise operators: unary math and activations, binary arithmetic with numpy broadcasting.
//   unary:  Y[i] = f(X[i])                      Y: shape(X)
//   binary: Y[i] = f(A[bcast(i)], B[bcast(i)])  Y: broadcast(shape(A), shape(B))
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels {

namespace {

// ---------------------------------------------------------------- unary
template <class Types, class F>
class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const KernelInfo& info, F f) : f_(std::move(f)) {}
  void prepare(PrepareContext& ctx) override {
    dispatch<Types>(ctx.input_dtype(0), ctx.node(), [&]<class T>() {});
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    dispatch<Types>(x.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      const T* a = x.data<T>();
      T* out = y.data<T>();
      parallel_for(x.numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(f_(static_cast<C>(a[i])));
      });
    });
  }

 private:
  F f_;
};

template <class Types, class F>
KernelFactory unary(F f) {
  return [f](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel<Types, F>>(info, f);
  };
}

// Unary whose function depends on attributes: make(info) returns the function.
template <class Types, class Make>
KernelFactory unary_attr(Make make) {
  return [make](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    auto f = make(info);
    return std::make_unique<UnaryKernel<Types, decltype(f)>>(info, f);
  };
}

// ---------------------------------------------------------------- binary
template <class Types, class F, bool BoolOut = false>
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const KernelInfo& info, F f) : f_(std::move(f)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    if (ctx.input_dtype(1) != dt)
      ctx.fail("inputs have different element types (", dtype_name(dt), " and ", dtype_name(ctx.input_dtype(1)), ")");
    dispatch<Types>(dt, ctx.node(), [&]<class T>() {});
    if (!plan_.init({ctx.input_shape(0), ctx.input_shape(1)}))
      ctx.fail("shapes ", shape_to_string(ctx.input_shape(0)), " and ", shape_to_string(ctx.input_shape(1)),
               " cannot be broadcast");
    ctx.set_output(0, BoolOut ? DType::kBool : dt, plan_.out_shape);
  }
  void run(RunContext& ctx) override {
    const Tensor& ta = ctx.input(0);
    const Tensor& tb = ctx.input(1);
    Tensor& ty = ctx.output(0);
    dispatch<Types>(ta.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      using O = std::conditional_t<BoolOut, bool, T>;
      const T* A = ta.data<T>();
      const T* B = tb.data<T>();
      O* Y = static_cast<O*>(ty.raw_data());
      const int64_t sa = plan_.inner_step[0], sb = plan_.inner_step[1];
      parallel_for(plan_.runs, grain_for(plan_.inner), [&](int64_t r0, int64_t r1) {
        plan_.for_runs(r0, r1, [&](int64_t o, const int64_t* off, int64_t n) {
          const T* a = A + off[0];
          const T* b = B + off[1];
          O* y = Y + o;
          if (sa && sb) {
            for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(f_(C(a[i]), C(b[i])));
          } else if (sa) {
            const C bv = C(b[0]);
            for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(f_(C(a[i]), bv));
          } else if (sb) {
            const C av = C(a[0]);
            for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(f_(av, C(b[i])));
          } else {
            const O v = static_cast<O>(f_(C(a[0]), C(b[0])));
            for (int64_t i = 0; i < n; ++i) y[i] = v;
          }
        });
      });
    });
  }

 private:
  F f_;
  BroadcastPlan plan_;
};

template <class Types, bool BoolOut = false, class F>
KernelFactory binary(F f) {
  return [f](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<BinaryKernel<Types, F, BoolOut>>(info, f);
  };
}

// ---------------------------------------------------------------- Identity
// Y = X (a view when the executor allows it). Also passes sequences and optionals through.
class IdentityKernel final : public Kernel {
 public:
  explicit IdentityKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
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
  void run(RunContext& ctx) override {
    if (!ctx.has_input(0) || ctx.input_value(0).kind != Value::Kind::kTensor) {
      ctx.output_value(0) = ctx.input_value(0);
      return;
    }
    if (!ctx.output_aliases_input(0, 0)) ctx.output(0).copy_from(ctx.input(0));
  }
};

}  // namespace

void register_elementwise(KernelRegistry& r) {
  using Arith = NumericTypes;
  r.add("Add", 7, kMaxOpsetAll, binary<Arith>([](auto a, auto b) { return a + b; }));
  r.add("Sub", 7, kMaxOpsetAll, binary<Arith>([](auto a, auto b) { return a - b; }));
  r.add("Mul", 7, kMaxOpsetAll, binary<Arith>([](auto a, auto b) { return a * b; }));
  r.add("Relu", 6, kMaxOpsetAll, unary<decltype(FloatTypes{} + SignedIntTypes{})>([](auto x) {
          return x > decltype(x)(0) ? x : decltype(x)(0);
        }));
  r.add("Identity", 1, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<IdentityKernel>(i);
  });
}

}  // namespace onnxtrain::kernels
