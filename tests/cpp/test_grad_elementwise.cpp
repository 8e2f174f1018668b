// Finite-difference checks of the elementwise gradient rules (float64, central differences; each
// input alone and all together, see check_gradient): arithmetic with broadcasting shapes, unary
// math, activations (points away from kinks), Clip, Mod, PRelu, the variadic Sum/Mean/Max/Min,
// Cast/CastLike; a tolerance per operator, the seed in every failure. Operators whose derivative is
// zero almost everywhere are checked to be declared so (check_zero_gradient).
#include <cmath>

#include "grad_check.h"

using namespace ot_test;

namespace {

constexpr DType kF64 = DType::kFloat64;

// Values in [lo, hi) moved at least `margin` away from each kink (where the function is not
// differentiable, or jumps).
Tensor away_from(Tensor t, const std::vector<double>& kinks, double margin = 0.05) {
  std::vector<double> v = to_double(t);
  for (double& x : v)
    for (double k : kinks)
      if (std::fabs(x - k) < margin) x = x < k ? k - margin : k + margin;
  return from_double(t.dtype(), t.shape(), v);
}

GradCheck make(const std::string& op, std::vector<Tensor> inputs, uint32_t seed, double rtol, double atol,
               std::vector<ir::Attribute> attrs = {}, int64_t opset = 17) {
  GradCheck g;
  g.op = op;
  g.inputs = std::move(inputs);
  g.attrs = std::move(attrs);
  g.opset = opset;
  g.seed = seed;
  g.rtol = rtol;
  g.atol = atol;
  return g;
}

// One operand per shape, values in [lo, hi) away from `kinks`.
GradCheck nary(const std::string& op, const std::vector<Shape>& shapes, double lo, double hi, uint32_t seed,
               double rtol = 1e-6, double atol = 1e-8, const std::vector<double>& kinks = {}) {
  std::mt19937 rng(seed);
  std::vector<Tensor> in;
  for (const auto& s : shapes) in.push_back(away_from(random_tensor(kF64, s, rng, lo, hi), kinks));
  return make(op, std::move(in), seed, rtol, atol);
}

struct UnaryCase {
  const char* op;
  double lo, hi;
  std::vector<double> kinks{};  // kept 0.05 away
  std::vector<ir::Attribute> attrs{};
  double rtol = 1e-6, atol = 1e-8;
};

void check_unary(const std::vector<UnaryCase>& cases, uint32_t seed) {
  for (const auto& u : cases) {
    std::mt19937 rng(seed);
    const Tensor x = away_from(random_tensor(kF64, {3, 4}, rng, u.lo, u.hi), u.kinks);
    EXPECT_TRUE(check_gradient(make(u.op, {x}, seed, u.rtol, u.atol, u.attrs))) << u.op;
    ++seed;
  }
}

}  // namespace

// ---------------------------------------------------------------- arithmetic (broadcasting)
GRAD_COVERS(GradElementwise, Add, "Add");
TEST(GradElementwise, Add) {
  EXPECT_TRUE(check_gradient(nary("Add", {{2, 3, 4}, {3, 1}}, -1, 1, 1)));
  auto sym = nary("Add", {{2, 3, 4}, {3, 1}}, -1, 1, 2);
  sym.symbolic_shapes = true;  // broadcast reduced at run time (SumToShape)
  EXPECT_TRUE(check_gradient(sym));
  sym.portable = true;  // standard-ONNX reduction
  EXPECT_TRUE(check_gradient(sym));
}
GRAD_COVERS(GradElementwise, Sub, "Sub");
TEST(GradElementwise, Sub) { EXPECT_TRUE(check_gradient(nary("Sub", {{4, 1}, {3}}, -1, 1, 3))); }
GRAD_COVERS(GradElementwise, Mul, "Mul");
TEST(GradElementwise, Mul) {
  EXPECT_TRUE(check_gradient(nary("Mul", {{2, 3}, {2, 3}}, -1, 1, 4)));
  EXPECT_TRUE(check_gradient(nary("Mul", {{2, 3, 4}, {3, 1}}, -1, 1, 4)));
  EXPECT_TRUE(check_gradient(nary("Mul", {{}, {2, 3}}, -1, 1, 4)));  // scalar operand
}
GRAD_COVERS(GradElementwise, Div, "Div");
TEST(GradElementwise, Div) {
  EXPECT_TRUE(check_gradient(nary("Div", {{2, 3}, {3}}, 0.5, 2, 5)));
  EXPECT_TRUE(check_gradient(nary("Div", {{3, 1}, {2, 1, 4}}, 0.5, 2, 5)));  // both operands broadcast
}
GRAD_COVERS(GradElementwise, Pow, "Pow");
TEST(GradElementwise, Pow) {
  EXPECT_TRUE(check_gradient(nary("Pow", {{2, 3}, {1, 3}}, 0.5, 2, 6)));
  // An integer exponent is not differentiated (only the float base requires a gradient).
  std::mt19937 rng(6);
  GradCheck p = make("Pow", {random_tensor(kF64, {2, 3}, rng, -2, 2), Tensor::from_vector<int64_t>({3}, {2, 3, 1})},
                     6, 1e-6, 1e-8);
  EXPECT_TRUE(check_gradient(p));
}
GRAD_COVERS(GradElementwise, Neg, "Neg");
TEST(GradElementwise, Neg) { EXPECT_TRUE(check_gradient(nary("Neg", {{3, 4}}, -2, 2, 10))); }

// Mod: y = a - b q with q = floor(a / b) (fmod 0) or trunc(a / b) (fmod 1); q jumps where a / b is
// an integer, which random points miss by far more than the step.
GRAD_COVERS(GradElementwise, Mod, "Mod");
TEST(GradElementwise, Mod) {
  for (int64_t fmod : {0, 1}) {
    std::mt19937 rng(11);
    const Tensor a = away_from(random_tensor(kF64, {2, 3}, rng, -4, 4), {0});
    const Tensor b = away_from(random_tensor(kF64, {3}, rng, -1.5, 1.5), {0}, 0.4);
    EXPECT_TRUE(check_gradient(make("Mod", {a, b}, 11, 1e-6, 1e-8, {attr_int("fmod", fmod)}))) << "fmod " << fmod;
  }
}

// ---------------------------------------------------------------- unary math
GRAD_COVERS(GradElementwise, UnaryMath, "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tanh", "Sigmoid");
TEST(GradElementwise, UnaryMath) {
  check_unary({{"Abs", -2, 2, {0}},
               {"Sqrt", 0.3, 3, {}},
               {"Reciprocal", 0.4, 2, {}},
               {"Exp", -2, 2, {}},
               {"Log", 0.3, 3, {}},
               {"Erf", -2, 2, {}},
               {"Sin", -3, 3, {}},
               {"Cos", -3, 3, {}},
               {"Tan", -1.2, 1.2, {}},
               {"Asin", -0.9, 0.9, {}},
               {"Acos", -0.9, 0.9, {}},
               {"Atan", -3, 3, {}},
               {"Sinh", -2, 2, {}},
               {"Cosh", -2, 2, {}},
               {"Asinh", -3, 3, {}},
               {"Acosh", 1.2, 3, {}},
               {"Atanh", -0.9, 0.9, {}},
               {"Tanh", -2, 2, {}},
               {"Sigmoid", -4, 4, {}}},
              100);
  // Reciprocal on negative values too.
  std::mt19937 rng(120);
  EXPECT_TRUE(check_gradient(make("Reciprocal", {random_tensor(kF64, {4}, rng, -2, -0.4)}, 120, 1e-6, 1e-8)));
}

// ---------------------------------------------------------------- activations (points away from kinks)
GRAD_COVERS(GradElementwise, Activations, "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "Softplus", "Softsign", "HardSigmoid", "HardSwish");
TEST(GradElementwise, Activations) {
  check_unary({{"Relu", -1, 1, {0}},
               {"LeakyRelu", -2, 2, {0}, {attr_float("alpha", 0.1f)}},
               {"LeakyRelu", -2, 2, {0}},  // default alpha 0.01
               {"Elu", -2, 2, {0}, {attr_float("alpha", 0.7f)}},
               {"Selu", -2, 2, {0}},
               {"Selu", -2, 2, {0}, {attr_float("alpha", 1.5f), attr_float("gamma", 0.8f)}},
               {"Celu", -2, 2, {0}, {attr_float("alpha", 0.8f)}},
               {"ThresholdedRelu", -1, 2, {0.5}, {attr_float("alpha", 0.5f)}},  // jumps at alpha
               {"ThresholdedRelu", -1, 3, {1}},                                    // default alpha 1
               {"Softplus", -3, 3, {}},
               {"Softsign", -3, 3, {}},
               {"HardSigmoid", -4, 4, {-2.5, 2.5}},                                 // alpha 0.2, beta 0.5
               {"HardSigmoid", -2, 2, {-1.2, 0.8}, {attr_float("alpha", 0.5f), attr_float("beta", 0.6f)}},
               {"HardSwish", -5, 5, {-3, 3}}},
              200);
}

// com.onnxtrain.ReluGrad (the default-mode ReLU gradient): dX = Y > 0 ? dY : 0 against the
// definition, zeros, negatives, NaN and infinities in Y, every float type.
TEST(GradElementwise, ReluGradKernel) {
  std::mt19937 rng(31);
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    const Shape shape = {3, 37};
    std::vector<double> y = to_double(random_tensor(dt, shape, rng, -2, 2)), dy = to_double(random_tensor(dt, shape, rng));
    y[0] = 0, y[1] = -0.0, y[2] = nan, y[3] = inf, y[4] = -inf;
    std::vector<double> e(y.size());
    for (size_t i = 0; i < y.size(); ++i) e[i] = y[i] > 0 ? dy[i] : 0.0;
    RunOptions o;
    o.domain = "com.onnxtrain";
    o.opset = 1;
    auto dx = run_node("ReluGrad", {from_double(dt, shape, dy), from_double(dt, shape, y)}, {}, o);
    EXPECT_TRUE(all_close(dx[0], shape, e, 0, 0)) << dtype_name(dt);
  }
  RunOptions o;
  o.domain = "com.onnxtrain";
  o.opset = 1;
  EXPECT_THROW(run_node("ReluGrad", {random_tensor(DType::kFloat32, {3}, rng), random_tensor(DType::kFloat32, {4}, rng)}, {}, o),
               onnxtrain::Error);
}

// com.onnxtrain.Gelu (fused out of the exported erf GELU by train/fusion.h): its gradient rule
// (GeluGrad reading the forward's A, or recomputing it) against central differences, with the
// optional A output read and not.
GRAD_COVERS(GradElementwise, Gelu, "com.onnxtrain.Gelu");
TEST(GradElementwise, Gelu) {
  std::mt19937 rng(410);
  for (size_t outs : {1, 2}) {
    GradCheck g = make("Gelu", {random_tensor(kF64, {3, 7}, rng, -4, 4)}, 410, 1e-6, 1e-8);
    g.domain = "com.onnxtrain";
    g.num_outputs = outs;
    EXPECT_TRUE(check_gradient(g)) << outs << " outputs";
  }
}

// The Gelu and GeluGrad kernels against the definition in double: y = x Phi(x), A = 1 + erf(x/sqrt2),
// dX = dY (Phi(x) + x phi(x)); every float type, NaN and infinities, the gradient with A given and
// recomputed; float32 y bitwise equal to the unfused nodes (Div, Erf, Add, Mul, Mul).
TEST(GradElementwise, GeluKernels) {
  std::mt19937 rng(411);
  RunOptions o;
  o.domain = "com.onnxtrain";
  o.opset = 1;
  o.num_outputs = 2;
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    const Shape shape = {5, 39};  // blocks of 8 and a tail
    std::vector<double> x = to_double(random_tensor(dt, shape, rng, -6, 6)), dy = to_double(random_tensor(dt, shape, rng));
    x[0] = 0, x[1] = 30, x[2] = -30, x[3] = 1e-30, x[4] = inf;
    std::vector<double> y(x.size()), a(x.size()), dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {  // x = inf: y = inf, A = 2 (dX: inf * 0, NaN)
      a[i] = 1 + std::erf(x[i] / std::sqrt(2.0));
      y[i] = 0.5 * x[i] * a[i];
      dx[i] = dy[i] * (0.5 * a[i] + x[i] * std::exp(-0.5 * x[i] * x[i]) / std::sqrt(2 * M_PI));
    }
    const bool half = dt == DType::kFloat16 || dt == DType::kBFloat16;
    const double tol = dt == DType::kFloat64 ? 1e-12 : half ? (dt == DType::kBFloat16 ? 1e-2 : 2e-3) : 2e-6;
    const Tensor X = from_double(dt, shape, x), dY = from_double(dt, shape, dy);
    auto f = run_node("Gelu", {X}, {}, o);
    EXPECT_TRUE(all_close(f[0], shape, y, tol, tol)) << dtype_name(dt) << " Y";
    EXPECT_TRUE(all_close(f[1], shape, a, tol, tol)) << dtype_name(dt) << " A";
    RunOptions og = o;
    og.num_outputs = 1;
    auto g3 = run_node("GeluGrad", {dY, X, f[1]}, {}, og);
    auto g2 = run_node("GeluGrad", {dY, X}, {}, og);
    EXPECT_TRUE(all_close(g3[0], shape, dx, tol, tol)) << dtype_name(dt) << " dX (A given)";
    EXPECT_TRUE(all_close(g2[0], shape, dx, tol, tol)) << dtype_name(dt) << " dX (A recomputed)";
    if (dt == DType::kFloat32) {  // the unfused arithmetic, node by node
      RunOptions p;
      auto d = run_node("Div", {X, Tensor::scalar<float>(1.41421356237309515f)}, {}, p);
      auto e = run_node("Erf", {d[0]}, {}, p);
      auto a1 = run_node("Add", {e[0], Tensor::scalar<float>(1.f)}, {}, p);
      auto m1 = run_node("Mul", {X, a1[0]}, {}, p);
      auto y1 = run_node("Mul", {m1[0], Tensor::scalar<float>(0.5f)}, {}, p);
      EXPECT_TRUE(same_bits(f[0], y1[0])) << "fused GELU differs from the unfused nodes";
      EXPECT_TRUE(same_bits(f[1], a1[0]));
    }
    std::vector<double> xn = x;
    xn[5] = std::nan("");
    auto fn = run_node("Gelu", {from_double(dt, shape, xn)}, {}, o);
    EXPECT_TRUE(std::isnan(to_double(fn[0])[5])) << dtype_name(dt) << ": NaN must propagate";
  }
  RunOptions og = o;
  og.num_outputs = 1;
  EXPECT_THROW(run_node("GeluGrad", {random_tensor(DType::kFloat32, {3}, rng), random_tensor(DType::kFloat32, {4}, rng)}, {}, og),
               onnxtrain::Error);
}

// PRelu: the slope broadcasts to x (unidirectionally); its gradient sums over the broadcast dims.
GRAD_COVERS(GradElementwise, PRelu, "PRelu");
TEST(GradElementwise, PRelu) {
  std::mt19937 rng(300);
  const Tensor x = away_from(random_tensor(kF64, {2, 3, 4}, rng, -2, 2), {0});
  for (const Shape& s : {Shape{3, 1}, Shape{4}, Shape{2, 3, 4}, Shape{1}}) {
    const Tensor slope = random_tensor(kF64, s, rng, 0.05, 0.5);
    EXPECT_TRUE(check_gradient(make("PRelu", {x, slope}, 300, 1e-6, 1e-8))) << onnxtrain::shape_to_string(s);
  }
}

// Clip: the gradient passes where min <= x <= max; min receives it where x < min, max where
// x > max (or everywhere when min > max: the output is max).
GRAD_COVERS(GradElementwise, Clip, "Clip");
TEST(GradElementwise, Clip) {
  std::mt19937 rng(310);
  const Tensor x = away_from(random_tensor(kF64, {3, 4}, rng, -2, 2), {-0.7, 0.6});
  const Tensor lo = Tensor::scalar<double>(-0.7), hi = Tensor::scalar<double>(0.6);
  EXPECT_TRUE(check_gradient(make("Clip", {x, lo, hi}, 310, 1e-6, 1e-8)));
  EXPECT_TRUE(check_gradient(make("Clip", {x, lo}, 310, 1e-6, 1e-8)));                  // min only
  EXPECT_TRUE(check_gradient(make("Clip", {x, Tensor(), hi}, 310, 1e-6, 1e-8)));        // max only
  EXPECT_TRUE(check_gradient(make("Clip", {x}, 310, 1e-6, 1e-8)));                      // no bounds
  EXPECT_TRUE(check_gradient(make("Clip", {x, Tensor::scalar<double>(0.6), Tensor::scalar<double>(-0.7)}, 310,
                                  1e-6, 1e-8)));                                         // min > max
  EXPECT_TRUE(check_gradient(make("Clip", {x, lo, hi}, 310, 1e-6, 1e-8, {}, 11)));
  // Opsets 6-10: bounds are attributes (float32 tensors: the attribute is a float).
  const Tensor xf = away_from(random_tensor(DType::kFloat32, {3, 4}, rng, -2, 2), {-0.7, 0.6}, 0.1);
  GradCheck old = make("Clip", {xf}, 310, 1e-3, 1e-4, {attr_float("min", -0.7f), attr_float("max", 0.6f)}, 10);
  old.eps = 1e-3;
  EXPECT_TRUE(check_gradient(old));
}

// ---------------------------------------------------------------- variadic (broadcasting)
GRAD_COVERS(GradElementwise, SumMean, "Sum", "Mean");
TEST(GradElementwise, SumMean) {
  for (const char* op : {"Sum", "Mean"}) {
    EXPECT_TRUE(check_gradient(nary(op, {{2, 3}, {3}, {2, 1}}, -1, 1, 400))) << op;
    EXPECT_TRUE(check_gradient(nary(op, {{2, 3}}, -1, 1, 401))) << op;  // one operand
    EXPECT_TRUE(check_gradient(nary(op, {{4, 1, 3}, {2, 1}}, -1, 1, 402))) << op;
  }
}

// Max/Min: the gradient goes to the operand that is the extremum. A two-way tie splits it evenly,
// which is what the central difference measures there.
GRAD_COVERS(GradElementwise, MaxMin, "Max", "Min");
TEST(GradElementwise, MaxMin) {
  for (const char* op : {"Max", "Min"}) {
    EXPECT_TRUE(check_gradient(nary(op, {{2, 3}, {3}, {2, 1}}, -1, 1, 410))) << op;
    EXPECT_TRUE(check_gradient(nary(op, {{2, 3}}, -1, 1, 411))) << op;  // one operand
    std::mt19937 rng(412);
    const Tensor a = random_tensor(kF64, {2, 3}, rng, -1, 1);
    EXPECT_TRUE(check_gradient(make(op, {a, a}, 412, 1e-6, 1e-8))) << op << " tie";
  }
}

// ---------------------------------------------------------------- casts
GRAD_COVERS(GradElementwise, CastCastLike, "Cast", "CastLike");
TEST(GradElementwise, CastCastLike) {
  std::mt19937 rng(500);
  const Tensor x64 = random_tensor(kF64, {2, 3}, rng, -2, 2), x32 = random_tensor(DType::kFloat32, {2, 3}, rng, -2, 2);
  EXPECT_TRUE(check_gradient(make("Cast", {x64}, 500, 1e-9, 1e-12, {attr_int("to", int64_t(kF64))})));
  // Through float32 the loss is float32: a larger step, a float32 tolerance (Cast is linear).
  GradCheck down = make("Cast", {x64}, 500, 1e-3, 1e-4, {attr_int("to", int64_t(DType::kFloat32))});
  down.eps = 1e-2;
  EXPECT_TRUE(check_gradient(down));
  GradCheck up = make("Cast", {x32}, 500, 1e-3, 1e-4, {attr_int("to", int64_t(kF64))});
  up.eps = 1e-2;
  EXPECT_TRUE(check_gradient(up));
  // CastLike: the second input only gives the type; its gradient is zero (checked alone and with x).
  GradCheck like = make("CastLike", {x32, Tensor::scalar<double>(0.0)}, 500, 1e-3, 1e-4);
  like.eps = 1e-2;
  EXPECT_TRUE(check_gradient(like));
  EXPECT_TRUE(check_gradient(make("CastLike", {x64, random_tensor(kF64, {1}, rng)}, 500, 1e-9, 1e-12)));
}

// ---------------------------------------------------------------- zero gradient almost everywhere
GRAD_COVERS(GradElementwise, ZeroGradientOperators, "Round", "Floor", "Ceil", "Sign", "IsNaN", "IsInf", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "BitShift");
TEST(GradElementwise, ZeroGradientOperators) {
  uint32_t seed = 600;
  auto check = [&](ZeroGradCheck z) {
    z.seed = seed++;
    EXPECT_TRUE(check_zero_gradient(z)) << z.op;
  };
  for (const char* op : {"Round", "Floor", "Ceil", "Sign", "IsNaN", "IsInf"}) check({op, {"x"}});
  const std::pair<std::string, Tensor> half{"half", Tensor::scalar<double>(0.5)};
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) check({op, {"x", "half"}, {half}});
  // Logical operators take booleans: a mask computed from x.
  const ir::Node mask = make_node("Greater", {"x", "half"}, {"m"});
  const ir::Node mask2 = make_node("Less", {"x", "half"}, {"m2"});
  check({"Not", {"m"}, {half}, {mask}});
  for (const char* op : {"And", "Or", "Xor"}) check({op, {"m", "m2"}, {half}, {mask, mask2}});
  // BitShift takes unsigned integers: x cast (a path that carries no gradient either).
  const ir::Node to_u8 = make_node("Cast", {"x"}, {"u"}, {attr_int("to", int64_t(DType::kUInt8))});
  check({"BitShift", {"u", "one"}, {{"one", Tensor::scalar<uint8_t>(1)}}, {to_u8}, {attr_string("direction", "LEFT")}});
}
