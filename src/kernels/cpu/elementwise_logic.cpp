// Comparisons, boolean logic, IsNaN/IsInf and Where.
//   Equal Less Greater LessOrEqual GreaterOrEqual: Y = A op B (bool)   Y: broadcast(A, B)
//   And Or Xor: bool A, B; Not: bool X
//   BitwiseAnd BitwiseOr BitwiseXor: integer A, B (broadcast); BitwiseNot: integer X
//   IsNaN IsInf: bool Y of X's shape
//   Where: Y = C ? X : Z    Y: broadcast(C, X, Z), X's dtype (any, strings included)
//   com.onnxtrain.ReluGrad(dY, Y): dX = Y > 0 ? dY : 0
#include "kernels/cpu/elementwise_internal.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

using namespace ew;

using Bool = TypeList<bool>;

struct IsInfOp {
  bool negative, positive;
  template <class C>
  bool operator()(C x) const {
    return (positive && x == std::numeric_limits<C>::infinity()) ||
           (negative && x == -std::numeric_limits<C>::infinity());
  }
};

// y[i] = c[i] ? x[i] : z[i] over one run, each of c, x, z contiguous (1) or broadcast (0).
template <class T, int SC, int SX, int SZ>
void select_run(const bool* c, const T* x, const T* z, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T m = T(0) - T(c[SC ? i : 0]);
    y[i] = T((x[SX ? i : 0] & m) | (z[SZ ? i : 0] & T(~m)));
  }
}

// Where: Y = cond ? X : Z with numpy broadcasting of all three.
class WhereKernel final : public Kernel {
 public:
  explicit WhereKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    const Shape out = shape::where_shape(ctx);
    // The shapes broadcast: only the plan's limit of collapsed dims is left to fail on, reported as
    // shapes that do not broadcast.
    if (!plan_.init({ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)}))
      ctx.fail("shapes ", shape_to_string(ctx.input_shape(0)), ", ", shape_to_string(ctx.input_shape(1)), " and ",
               shape_to_string(ctx.input_shape(2)), " cannot be broadcast");
    ctx.set_output(0, ctx.input_dtype(1), out);
  }
  void run(RunContext& ctx) override {
    const bool* C = ctx.input(0).data<bool>();
    dispatch_by_size(ctx.input(1).dtype(), ctx.node(), [&]<class T>() {
      const T* X = static_cast<const T*>(ctx.input(1).raw_data());
      const T* Z = static_cast<const T*>(ctx.input(2).raw_data());
      T* Y = static_cast<T*>(ctx.output(0).raw_data());
      const int64_t sc = plan_.inner_step[0], sx = plan_.inner_step[1], sz = plan_.inner_step[2];
      parallel_for(plan_.runs, grain_for(plan_.inner), [&](int64_t r0, int64_t r1) {
        plan_.for_runs(r0, r1, [&](int64_t o, const int64_t* off, int64_t n) {
          const bool* c = C + off[0];
          const T* x = X + off[1];
          const T* z = Z + off[2];
          T* y = Y + o;
          if constexpr (std::is_same_v<T, std::string>) {
            for (int64_t i = 0; i < n; ++i) y[i] = c[i * sc] ? x[i * sx] : z[i * sz];
          } else {
            // T is an unsigned integer of the element size: select with a mask, branch-free (a
            // data-dependent branch mispredicts on half the elements of a ReLU gradient), one loop
            // per broadcast pattern so that each vectorizes.
            switch ((sc ? 4 : 0) | (sx ? 2 : 0) | (sz ? 1 : 0)) {
              case 7: select_run<T, 1, 1, 1>(c, x, z, y, n); break;
              case 6: select_run<T, 1, 1, 0>(c, x, z, y, n); break;
              case 5: select_run<T, 1, 0, 1>(c, x, z, y, n); break;
              case 4: select_run<T, 1, 0, 0>(c, x, z, y, n); break;
              case 3: select_run<T, 0, 1, 1>(c, x, z, y, n); break;
              case 2: select_run<T, 0, 1, 0>(c, x, z, y, n); break;
              case 1: select_run<T, 0, 0, 1>(c, x, z, y, n); break;
              default: select_run<T, 0, 0, 0>(c, x, z, y, n); break;
            }
          }
        });
      });
    });
  }

 private:
  BroadcastPlan plan_;
};

// Bitwise*: `inner` on integer operands; another element type is an error naming the node, the
// input and the type (rather than an unsupported type).
KernelFactory integer_operands(KernelFactory inner) {
  class IntegerOperands final : public Kernel {
   public:
    explicit IntegerOperands(std::unique_ptr<Kernel> k) : k_(std::move(k)) {}
    void prepare(PrepareContext& ctx) override {
      for (size_t i = 0; i < ctx.num_inputs(); ++i)
        if (!dtype_is_integer(ctx.input_dtype(i)))
          ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(i)), "; ", ctx.node().op_type,
                   " takes integer types");
      k_->prepare(ctx);
    }
    void run(RunContext& ctx) override { k_->run(ctx); }

   private:
    std::unique_ptr<Kernel> k_;
  };
  return [inner](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<IntegerOperands>(inner(info));
  };
}

}  // namespace

void register_elementwise_logic(KernelRegistry& r) {
  constexpr int64_t M = kMaxOpsetAll;
  // Opsets 1-6 use legacy broadcasting (BinaryKernel switches on the node's opset).
  r.add("Equal", 1, M, binary<PodTypes, true>([](auto a, auto b) { return a == b; }));
  r.add("Less", 1, M, binary<NumericTypes, true>([](auto a, auto b) { return a < b; }));
  r.add("Greater", 1, M, binary<NumericTypes, true>([](auto a, auto b) { return a > b; }));
  r.add("LessOrEqual", 12, M, binary<NumericTypes, true>([](auto a, auto b) { return a <= b; }));
  r.add("GreaterOrEqual", 12, M, binary<NumericTypes, true>([](auto a, auto b) { return a >= b; }));
  r.add("And", 1, M, binary<Bool, true>([](bool a, bool b) { return a && b; }));
  r.add("Or", 1, M, binary<Bool, true>([](bool a, bool b) { return a || b; }));
  r.add("Xor", 1, M, binary<Bool, true>([](bool a, bool b) { return a != b; }));
  r.add("Not", 1, M, unary<Bool>([](bool x) { return !x; }));
  // Bitwise*: ai.onnx opset 18, kept as they are in a graph lowered to 17 (ir/opset_lower.h).
  r.add("BitwiseAnd", 17, M, integer_operands(binary<IntTypes>([](auto a, auto b) { return decltype(a)(a & b); })));
  r.add("BitwiseOr", 17, M, integer_operands(binary<IntTypes>([](auto a, auto b) { return decltype(a)(a | b); })));
  r.add("BitwiseXor", 17, M, integer_operands(binary<IntTypes>([](auto a, auto b) { return decltype(a)(a ^ b); })));
  r.add("BitwiseNot", 17, M, integer_operands(unary<IntTypes>([](auto x) { return decltype(x)(~x); })));
  r.add("IsNaN", 9, M, unary<FloatTypes, true>([](auto x) { return x != x; }));
  // com.onnxtrain.ReluGrad(dY, Y) -> dX = Y > 0 ? dY : 0 (the ReLU gradient in one pass; Y: the
  // forward output, NaN gives 0 as Where(Greater(Y, 0), dY, 0) does). Same shapes.
  r.add(ops::kDomain, "ReluGrad", 1, M,
        binary<FloatTypes>([](auto dy, auto y) { return y > decltype(y)(0) ? dy : decltype(dy)(0); }));
  r.add("IsInf", 10, M, unary_attr<FloatTypes, true>([](const KernelInfo& i) {
          return IsInfOp{i.attr_int("detect_negative", 1) != 0, i.attr_int("detect_positive", 1) != 0};
        }));
  r.add<WhereKernel>("Where", 9, M);
}

}  // namespace onnxtrain::kernels::cpu
