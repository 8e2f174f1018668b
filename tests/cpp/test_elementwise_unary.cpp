// Unary math, activations, PRelu and Clip against naive double-precision references; the float32
// vector math (Exp Log Tanh Sigmoid Erf) in ulps over a sweep of the whole float range.
#include <cmath>
#include <cstring>
#include <limits>

#include "elementwise_test_util.h"
#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cpu/vmath512.h"

using namespace ew_test;

namespace {

struct UnaryCase {
  std::string op;
  std::function<double(double)> ref;
  double lo, hi;
  std::vector<ir::Attribute> attrs = {};
  int64_t opset = 17;
};

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

const std::vector<UnaryCase>& float_cases() {
  static const std::vector<UnaryCase> cases = {
      {"Neg", [](double x) { return -x; }, -5, 5},
      {"Abs", [](double x) { return std::fabs(x); }, -5, 5},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0, 9},
      {"Reciprocal", [](double x) { return 1 / x; }, 0.2, 5},
      {"Exp", [](double x) { return std::exp(x); }, -20, 20},
      {"Log", [](double x) { return std::log(x); }, 0.01, 100},
      {"Erf", [](double x) { return std::erf(x); }, -4, 4},
      {"Sin", [](double x) { return std::sin(x); }, -6, 6},
      {"Cos", [](double x) { return std::cos(x); }, -6, 6},
      {"Tan", [](double x) { return std::tan(x); }, -1.2, 1.2},
      {"Asin", [](double x) { return std::asin(x); }, -1, 1},
      {"Acos", [](double x) { return std::acos(x); }, -1, 1},
      {"Atan", [](double x) { return std::atan(x); }, -9, 9},
      {"Sinh", [](double x) { return std::sinh(x); }, -5, 5},
      {"Cosh", [](double x) { return std::cosh(x); }, -5, 5},
      {"Tanh", [](double x) { return std::tanh(x); }, -6, 6},
      {"Asinh", [](double x) { return std::asinh(x); }, -9, 9},
      {"Acosh", [](double x) { return std::acosh(x); }, 1, 9},
      {"Atanh", [](double x) { return std::atanh(x); }, -0.95, 0.95},
      {"Sigmoid", sigmoid_ref, -20, 20},
      {"Sign", [](double x) { return double((x > 0) - (x < 0)); }, -3, 3},
      {"Floor", [](double x) { return std::floor(x); }, -5, 5},
      {"Ceil", [](double x) { return std::ceil(x); }, -5, 5},
      {"Round", [](double x) { return std::nearbyint(x); }, -5, 5},
      {"Relu", [](double x) { return x > 0 ? x : 0; }, -5, 5},
      {"Softplus", [](double x) { return std::log1p(std::exp(x)); }, -20, 20},
      {"Softsign", [](double x) { return x / (1 + std::fabs(x)); }, -5, 5},
      {"HardSwish", [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -5, 5},
      {"LeakyRelu", [](double x) { return x < 0 ? double(0.01f) * x : x; }, -5, 5},
      {"LeakyRelu", [](double x) { return x < 0 ? double(0.3f) * x : x; }, -5, 5, {attr_float("alpha", 0.3f)}},
      {"ThresholdedRelu", [](double x) { return x > 1 ? x : 0; }, -3, 3},
      {"ThresholdedRelu", [](double x) { return x > 0.5 ? x : 0; }, -3, 3, {attr_float("alpha", 0.5f)}},
      {"HardSigmoid", [](double x) { return std::clamp(double(0.2f) * x + 0.5, 0.0, 1.0); }, -5, 5, {}, 6},
      {"HardSigmoid", [](double x) { return std::clamp(0.5 * x + 0.25, 0.0, 1.0); }, -5, 5,
       {attr_float("alpha", 0.5f), attr_float("beta", 0.25f)}},
      {"Elu", [](double x) { return x >= 0 ? x : std::expm1(x); }, -5, 5, {}, 6},
      {"Elu", [](double x) { return x >= 0 ? x : 2 * (std::expm1(x)); }, -5, 5, {attr_float("alpha", 2)}},
      {"Selu", [](double x) { return double(1.0507009873554805f) * (x > 0 ? x : double(1.6732632423543772f) * std::expm1(x)); },
       -5, 5, {}, 6},
      {"Selu", [](double x) { return 3 * (x > 0 ? x : 2 * (std::expm1(x))); }, -5, 5,
       {attr_float("alpha", 2), attr_float("gamma", 3)}},
      {"Celu", [](double x) { return std::max(0.0, x) + std::min(0.0, std::expm1(x)); }, -5, 5},
      {"Celu", [](double x) { return std::max(0.0, x) + std::min(0.0, 2 * std::expm1(x / 2)); }, -5, 5,
       {attr_float("alpha", 2)}},
      {"Shrink", [](double x) { return x < -0.5 ? x : x > 0.5 ? x : 0; }, -3, 3},
      {"Shrink", [](double x) { return x < -1 ? x + 0.5 : x > 1 ? x - 0.5 : 0; }, -3, 3,
       {attr_float("bias", 0.5f), attr_float("lambd", 1)}},
  };
  return cases;
}

// Celu is float32-only in ONNX but runs on every float type here.
void check_unary(const UnaryCase& c, DType dt, const Shape& shape, uint32_t seed, bool constants, int threads = 1) {
  std::mt19937 rng(seed);
  Tensor x = random_tensor(dt, shape, rng, c.lo, c.hi);
  std::vector<double> e;
  for (double v : to_double(x)) e.push_back(c.ref(v));
  e = to_double(from_double(dt, shape, e));  // correctly rounded into the output type (float16 overflows)
  auto y = run_node(c.op, {x}, c.attrs, opts(constants, threads, c.opset));
  EXPECT_EQ(y[0].dtype(), dt);
  // Trigonometric and exponential functions: a few float32 ulps.
  const double rt = dt == DType::kFloat32 ? 4e-6 : rtol_for(dt);
  EXPECT_TRUE(all_close(y[0], shape, e, rt, dt == DType::kFloat32 ? 1e-6 : atol_for(dt)))
      << c.op << " " << dtype_name(dt) << " " << shape_to_string(shape) << " seed " << seed
      << " constants " << constants;
}

}  // namespace

TEST(ElementwiseUnary, EveryOpEveryFloatType) {
  uint32_t seed = 1000;
  std::mt19937 shape_rng(1);
  for (const auto& c : float_cases()) {
    for (DType dt : kFloatTypes) {
      // Random rank-0..4 shapes; odd sizes exercise the vector tails.
      auto shape = random_broadcast_shapes(shape_rng, 1)[0];
      check_unary(c, dt, shape, seed, false);
      check_unary(c, dt, {37}, seed + 1, true);
      seed += 2;
    }
  }
}

TEST(ElementwiseUnary, LargeThreaded) {
  uint32_t seed = 1100;
  for (const auto& c : float_cases())
    if (c.op == "Exp" || c.op == "Tanh" || c.op == "Sigmoid" || c.op == "Erf" || c.op == "Log" || c.op == "Abs")
      for (DType dt : {DType::kFloat32, DType::kFloat16}) check_unary(c, dt, {257, 301}, seed++, false, 2);
}

TEST(ElementwiseUnary, IntegerVariants) {
  struct IntCase {
    std::string op;
    std::function<double(double)> ref;
    bool is_signed_only;
  };
  const std::vector<IntCase> cases = {
      {"Neg", [](double x) { return -x; }, true},
      {"Abs", [](double x) { return std::fabs(x); }, false},
      {"Sign", [](double x) { return double((x > 0) - (x < 0)); }, false},
      {"Relu", [](double x) { return std::max(x, 0.0); }, true},
      {"Erf", [](double x) { return std::trunc(std::erf(x)); }, false},
      {"Shrink", [](double x) { return x < -0.5 ? x : x > 0.5 ? x : 0; }, false},
  };
  uint32_t seed = 1200;
  for (const auto& c : cases)
    for (DType dt : kIntTypes) {
      if (c.is_signed_only && is_unsigned(dt)) continue;
      std::mt19937 rng(seed++);
      Tensor x = random_tensor(dt, {3, 5}, rng, is_unsigned(dt) ? 0 : -9, 9);
      std::vector<double> e;
      for (double v : to_double(x)) e.push_back(c.ref(v));
      for (bool constants : {false, true})
        EXPECT_TRUE(all_close(run_node(c.op, {x}, {}, opts(constants))[0], {3, 5}, e, 0, 0))
            << c.op << " " << dtype_name(dt) << " seed " << seed;
    }
  // Abs/Neg of the most negative value wrap (no UB).
  Tensor m = Tensor::from_vector<int64_t>({1}, {std::numeric_limits<int64_t>::min()});
  EXPECT_EQ(run_node("Abs", {m})[0].data<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(run_node("Neg", {m})[0].data<int64_t>()[0], std::numeric_limits<int64_t>::min());
}

TEST(ElementwiseUnary, RoundHalfToEven) {
  Tensor x = Tensor::from_vector<float>({10}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 0.49999997f, 2.6f, -2.4f, 3.5f});
  EXPECT_TRUE(all_close(run_node("Round", {x})[0], {10}, {0, 2, 2, -0, -2, -2, 0, 3, -2, 4}, 0, 0));
  Tensor d = Tensor::from_vector<double>({3}, {4.5, -4.5, 5.5});
  EXPECT_TRUE(all_close(run_node("Round", {d})[0], {3}, {4, -4, 6}, 0, 0));
}

TEST(ElementwiseUnary, UnsupportedTypesNameNode) {
  for (const char* op : {"Sqrt", "Exp", "Tanh", "Sigmoid", "Floor", "LeakyRelu"})
    expect_error<onnxtrain::NotImplemented>([&] { run_node(op, {Tensor::zeros(DType::kInt32, {2})}); }, op, {"int32"});
  expect_error<onnxtrain::NotImplemented>([&] { run_node("Neg", {Tensor::zeros(DType::kUInt8, {2})}); }, "Neg",
                                          {"uint8"});
  expect_error<onnxtrain::NotImplemented>([&] { run_node("Abs", {Tensor::zeros(DType::kBool, {2})}); }, "Abs",
                                          {"bool"});
}

TEST(ElementwiseUnary, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({7}, {nan, inf, -inf, 0.0f, -0.0f, 100.0f, -100.0f});
  struct Expect {
    const char* op;
    std::vector<double> y;
  };
  for (const Expect& c : {Expect{"Exp", {nan, inf, 0, 1, 1, inf, 3.720075976020836e-44}},
                          Expect{"Tanh", {nan, 1, -1, 0, 0, 1, -1}},
                          Expect{"Sigmoid", {nan, 1, 0, 0.5, 0.5, 1, 3.720075976020836e-44}},
                          Expect{"Erf", {nan, 1, -1, 0, 0, 1, -1}},
                          Expect{"Log", {nan, inf, nan, -inf, -inf, 4.605170185988092, nan}},
                          Expect{"Softplus", {nan, inf, 0, 0.6931471805599453, 0.6931471805599453, 100, 3.72e-44}}}) {
    auto y = run_node(c.op, {x})[0];
    EXPECT_TRUE(all_close(y, {7}, c.y, 2e-6, 2e-45)) << c.op;
  }
}

// ---------------------------------------------------------------- vector math in ulps
namespace {

int64_t ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i < 0 ? int64_t(INT32_MIN) - i : i;
}

// Every 4099th float32 bit pattern (the whole range, both signs, subnormals, infinities, NaNs) and
// 2^20 evenly spaced points in [lo, hi].
std::vector<float> float_sweep(double lo, double hi) {
  std::vector<float> xs;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const uint32_t b = uint32_t(u);
    float f;
    std::memcpy(&f, &b, 4);
    xs.push_back(f);
  }
  for (int i = 0; i <= (1 << 20); ++i) xs.push_back(float(lo + (hi - lo) * i / double(1 << 20)));
  return xs;
}

// Max ulp distance to the correctly rounded result over float_sweep(lo, hi). Tails of 1..7
// elements are included by odd lengths.
int64_t max_ulp(const std::string& op, double (*ref)(double), double lo, double hi, float* worst_x) {
  const std::vector<float> xs = float_sweep(lo, hi);
  Tensor x = Tensor::from_vector<float>({int64_t(xs.size())}, xs);
  Tensor y = run_node(op, {x}, {}, opts(false, 2))[0];
  const float* yv = y.data<float>();
  int64_t worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float e = float(ref(double(xs[i])));
    if (std::isnan(e) || std::isnan(yv[i])) {
      if (std::isnan(e) != std::isnan(yv[i])) {
        ADD_FAILURE() << op << "(" << xs[i] << ") = " << yv[i] << ", expected " << e;
        return INT64_MAX;
      }
      continue;
    }
    const int64_t d = std::llabs(ordered(yv[i]) - ordered(e));
    if (d > worst) {
      worst = d;
      *worst_x = xs[i];
    }
  }
  return worst;
}

}  // namespace

TEST(ElementwiseUnary, VectorMathUlpBounds) {
  struct Bound {
    const char* op;
    double (*ref)(double);
    double lo, hi;
    int64_t ulp;
  };
  for (const Bound& b : {Bound{"Exp", [](double x) { return std::exp(x); }, -104, 89, 1},
                         Bound{"Log", [](double x) { return std::log(x); }, 0, 10, 1},
                         Bound{"Tanh", [](double x) { return std::tanh(x); }, -10, 10, 1},
                         Bound{"Sigmoid", sigmoid_ref, -104, 20, 3},
                         Bound{"Erf", [](double x) { return std::erf(x); }, -5, 5, 1},
                         Bound{"Elu", [](double x) { return x >= 0 ? x : std::expm1(x); }, -3, 1, 2},
                         Bound{"Softplus", [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }, -20, 20, 3}}) {
    float worst_x = 0;
    const int64_t ulp = max_ulp(b.op, b.ref, b.lo, b.hi, &worst_x);
    EXPECT_LE(ulp, b.ulp) << b.op << " worst at x = " << worst_x;
    std::cout << "[ ulp      ] " << b.op << ": max " << ulp << " ulp (at x = " << worst_x << ")\n";
  }
}

// The 16-lane erf / GELU loops (vmath512.cpp, run where the CPU has AVX-512) give the 8-lane code's
// bits on every input: a sweep of the float range with NaN, infinities, zeros and subnormals.
TEST(ElementwiseUnary, VectorMath16LanesEqual8Lanes) {
#if OT_EW_SIMD
  namespace vm = onnxtrain::kernels::cpu::vmath;
  namespace vm512 = onnxtrain::kernels::cpu::vmath512;
  if (!vm512::available()) GTEST_SKIP() << "the CPU or this build has no AVX-512F/DQ: the 16-lane code cannot run here";
  std::vector<float> x;
  for (uint32_t bits = 0; bits < 0xFFFFFFFFu - 65537u; bits += 65537u) {  // every sign, exponent and many mantissas
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  for (float f : {0.0f, -0.0f, 1e-40f, -1e-40f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0.99999994f, 1.0f, 4.0f})
    x.push_back(f);
  std::mt19937 rng(77);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int i = 0; i < 4096; ++i) x.push_back(nd(rng));
  x.resize(x.size() / 16 * 16);  // full vectors of both widths
  const int64_t n = int64_t(x.size());
  std::vector<float> dy(x.size()), y8(x.size()), y16(x.size()), a8(x.size()), a16(x.size());
  for (auto& v : dy) v = nd(rng);
  auto same = [&](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], 4) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) {
        ADD_FAILURE() << what << " differs at x = " << x[i] << ": " << a[i] << " (8 lanes) vs " << b[i] << " (16)";
        return;
      }
  };
  ASSERT_EQ(vm512::gelu(x.data(), y16.data(), a16.data(), n), n);
  ASSERT_EQ(vm::gelu_t<vm::O8>(x.data(), y8.data(), a8.data(), n), n);
  same(y8, y16, "Gelu");
  same(a8, a16, "Gelu's A");
  ASSERT_EQ(vm512::gelu_grad(dy.data(), x.data(), y16.data(), n), n);
  ASSERT_EQ(vm::gelu_grad_t<vm::O8>(dy.data(), x.data(), y8.data(), n), n);
  same(y8, y16, "GeluGrad");
  ASSERT_EQ(vm512::erf(x.data(), y16.data(), n), n);
  ASSERT_EQ(vm::erf_map(x.data(), n, [](__m256 v) { return v; },
                        [&](int64_t k, __m256, __m256 e) { _mm256_storeu_ps(y8.data() + k, e); }),
            n);
  same(y8, y16, "Erf");
#else
  GTEST_SKIP() << "built without AVX2: no vector math";
#endif
}

// The fused convolutions' SiLU loop (vmath::silu_t on 8 lanes, vmath512::silu on 16) against
// x / (1 + exp(-x)) in double: within 4 ulp for every x >= -87 of a sweep of the float range and
// of 2^20 points in [-87, 20]; below -87 (|x sigmoid(x)| < 1.5e-36) -0; +inf and NaN kept.
TEST(ElementwiseUnary, SiluWithinFourUlp) {
#if OT_EW_SIMD
  namespace vm = onnxtrain::kernels::cpu::vmath;
  namespace vm512 = onnxtrain::kernels::cpu::vmath512;
  std::vector<float> x = float_sweep(-87, 20);
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, -87.0f, -86.99999f, 1e30f})
    x.push_back(f);
  x.resize((x.size() + 15) / 16 * 16, 1.0f);  // full vectors of both widths
  const int64_t n = int64_t(x.size());
  auto check = [&](const std::vector<float>& y, const char* what) {
    int64_t worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      if (std::isnan(v) || v == inf) {
        if (std::isnan(v) ? !std::isnan(y[i]) : y[i] != inf) ADD_FAILURE() << what << "(" << v << ") = " << y[i];
        continue;
      }
      if (v < -87) {  // -inf included
        if (!(y[i] == 0.f && std::signbit(y[i]))) ADD_FAILURE() << what << "(" << v << ") = " << y[i];
        continue;
      }
      const float e = float(v / (1.0 + std::exp(-v)));
      const int64_t d = std::llabs(ordered(y[i]) - ordered(e));
      if (d > worst) worst = d, worst_x = x[i];
    }
    EXPECT_LE(worst, 4) << what << " worst at x = " << worst_x;
    std::cout << "[ ulp      ] " << what << ": max " << worst << " ulp (at x = " << worst_x << ")\n";
  };
  std::vector<float> y(x.size());
  ASSERT_EQ(vm::silu_t<vm::O8>(x.data(), y.data(), n), n);
  check(y, "SiLU, 8 lanes");
  if (!vm512::available()) GTEST_SKIP() << "the CPU or this build has no AVX-512F/DQ: the 16-lane loop cannot run here";
  ASSERT_EQ(vm512::silu(x.data(), y.data(), n), n);
  check(y, "SiLU, 16 lanes");
#else
  GTEST_SKIP() << "built without AVX2: no vector math";
#endif
}

// erf's 1 / (1 + |x| / 2) and GELU's x / sqrt 2 replace divisions by a few multiply-adds
// (vmath::recip_1_3_t, div_sqrt2_t): they give the division's bits, on 8 lanes and on 16, for every
// float d of [1, 3] and for a sweep of x over the float range (within 2^-60 < |x| < 1e30, where
// the bits can change 1 + erf(x / sqrt 2)); NaN stays NaN.
TEST(ElementwiseUnary, DivisionFreeReciprocalsRoundLikeTheDivision) {
#if OT_EW_SIMD
  namespace vm = onnxtrain::kernels::cpu::vmath;
  namespace vm512 = onnxtrain::kernels::cpu::vmath512;
  auto check = [](const std::vector<float>& in, const std::vector<float>& out, auto&& ref, auto&& in_range,
                  const char* what) {
    int64_t bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const float r = ref(in[i]);
      if (std::isnan(r) ? !std::isnan(out[i]) : (in_range(in[i]) && std::memcmp(&r, &out[i], 4) != 0)) {
        if (bad++ == 0) ADD_FAILURE() << what << " at " << in[i] << ": " << out[i] << ", the division gives " << r;
      }
    }
    EXPECT_EQ(bad, 0) << what;
  };
  auto run8 = [](const std::vector<float>& in, auto&& f) {
    std::vector<float> out(in.size());
    for (size_t i = 0; i + 8 <= in.size(); i += 8) _mm256_storeu_ps(&out[i], f(_mm256_loadu_ps(&in[i])));
    return out;
  };
  std::vector<float> d;
  for (float v = 1.0f; v <= 3.0f; v = std::nextafter(v, 4.0f)) d.push_back(v);
  d.push_back(std::numeric_limits<float>::quiet_NaN());
  std::vector<float> x;
  for (uint32_t bits = 0; bits < 0xFFFFFFFFu - 257u; bits += 257u) {
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  for (float f : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) x.push_back(f);
  d.resize((d.size() + 15) / 16 * 16, 2.0f);
  x.resize((x.size() + 15) / 16 * 16, 1.0f);
  const auto recip = [](float v) {
    volatile float one = 1.0f;
    return one / v;
  };
  const auto div2 = [](float v) {
    volatile float s = vm::kSqrt2f;
    return v / s;
  };
  const auto all = [](float) { return true; };
  const auto bits_matter = [](float v) { return std::fabs(v) > 0x1p-60f && std::fabs(v) < 1e30f; };
  check(d, run8(d, [](__m256 v) { return vm::recip_1_3_t<vm::O8>(v); }), recip, all, "1 / d, 8 lanes");
  check(x, run8(x, [](__m256 v) { return vm::div_sqrt2_t<vm::O8>(v); }), div2, bits_matter, "x / sqrt 2, 8 lanes");
  // Outside the range: |x| <= 2^-60 gives |q| <= 2^-59 (1 + erf(q) rounds to 1), |x| >= 1e30 gives |q| > 4.
  const std::vector<float> edge = {0x1p-60f, -0x1p-70f, 1e-45f, 1e30f, -3e38f, std::numeric_limits<float>::infinity(),
                                   0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const auto q = run8(edge, [](__m256 v) { return vm::div_sqrt2_t<vm::O8>(v); });
  for (size_t i = 0; i < 6; ++i)
    EXPECT_TRUE(std::fabs(edge[i]) <= 0x1p-60f ? std::fabs(q[i]) <= 0x1p-59f : std::fabs(q[i]) > 4.0f) << edge[i] << " -> " << q[i];
  if (!vm512::available()) GTEST_SKIP() << "the CPU or this build has no AVX-512F/DQ: the 16-lane code cannot run here";
  std::vector<float> y(d.size());
  ASSERT_EQ(vm512::recip_1_3(d.data(), y.data(), int64_t(d.size())), int64_t(d.size()));
  check(d, y, recip, all, "1 / d, 16 lanes");
  y.assign(x.size(), 0.0f);
  ASSERT_EQ(vm512::div_sqrt2(x.data(), y.data(), int64_t(x.size())), int64_t(x.size()));
  check(x, y, div2, bits_matter, "x / sqrt 2, 16 lanes");
#else
  GTEST_SKIP() << "built without AVX2: no vector math";
#endif
}

// exp without clamps and special cases (vmath::exp_normal_t: erf's exp, and exp_t's where every
// lane is in range) gives the general exp_any_t's bits on [-87, 88] (every 61st float there); erf's exp argument stays in [-17.5, 0.5], inside that range,
// for a sweep of x over the whole float range.
TEST(ElementwiseUnary, ExpWithoutSpecialCasesKeepsTheBitsOfExp) {
#if OT_EW_SIMD
  namespace vm = onnxtrain::kernels::cpu::vmath;
  int64_t bad = 0;
  alignas(32) float x[8], a[8], b[8];
  for (const float end : {88.0f, -87.0f}) {
    uint32_t lo = end > 0 ? 0u : 0x80000000u, hi;
    std::memcpy(&hi, &end, 4);
    for (uint64_t u = lo; u <= hi; u += 8 * 61) {
      for (int k = 0; k < 8; ++k) {
        const uint32_t w = uint32_t(std::min<uint64_t>(u + 61 * k, hi));
        std::memcpy(&x[k], &w, 4);
      }
      const __m256 v = _mm256_load_ps(x);
      _mm256_store_ps(a, vm::exp_any_t<vm::O8>(v));
      _mm256_store_ps(b, vm::exp_normal_t<vm::O8>(v));
      for (int k = 0; k < 8; ++k)
        if (std::memcmp(&a[k], &b[k], 4) != 0 && bad++ == 0) ADD_FAILURE() << "exp(" << x[k] << "): " << b[k] << " vs " << a[k];
    }
  }
  EXPECT_EQ(bad, 0);
  float lo = 0, hi = -100;
  for (uint64_t u = 0; u < 0xFFFFFFFFull; u += 8 * 4099) {
    for (int k = 0; k < 8; ++k) {
      const uint32_t w = uint32_t(u + 4099 * k);
      std::memcpy(&x[k], &w, 4);
    }
    _mm256_store_ps(a, vm::erf_begin(_mm256_load_ps(x)).arg);
    for (int k = 0; k < 8; ++k)
      if (!std::isnan(x[k])) lo = std::min(lo, a[k]), hi = std::max(hi, a[k]);
  }
  EXPECT_GE(lo, -17.5f);
  EXPECT_LE(hi, 0.5f);
#else
  GTEST_SKIP() << "built without AVX2: no vector math";
#endif
}

// Softmax's exp-and-sum on 16 lanes (vmath512::exp_shift_acc) gives the 8-lane loop's bits: each
// exp (exp8 = exp_flush_t, NaN, +-inf and both flush ends included) and both 8-lane accumulators.
TEST(ElementwiseUnary, ExpShiftSumOn16LanesKeepsThe8LaneBits) {
#if OT_EW_SIMD
  namespace vm512 = onnxtrain::kernels::cpu::vmath512;
  if (!vm512::available()) GTEST_SKIP() << "the CPU or this build has no AVX-512F/DQ: the 16-lane code cannot run here";
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 40.0f);
  std::vector<float> x(16 * 200);
  for (float& v : x) v = nd(rng);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -87.33654f, -87.34f, 88.37f, 88.72283f, 88.8f, -1e30f, 0.0f};
  for (size_t i = 0; i < std::size(specials); ++i) x[7 * i + 3] = specials[i];
  const float shift = 1.5f;
  std::vector<float> y8(x.size()), y16(x.size());
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (size_t j = 0; j < x.size(); j += 16) {  // exp_shift_sum's 8-lane loop
    const __m256 e0 = onnxtrain::kernels::cpu::exp8(_mm256_sub_ps(_mm256_loadu_ps(&x[j]), _mm256_set1_ps(shift)));
    const __m256 e1 = onnxtrain::kernels::cpu::exp8(_mm256_sub_ps(_mm256_loadu_ps(&x[j + 8]), _mm256_set1_ps(shift)));
    _mm256_storeu_ps(&y8[j], e0);
    _mm256_storeu_ps(&y8[j + 8], e1);
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
  }
  alignas(32) float a8[16], a16[16] = {};
  _mm256_store_ps(a8, acc0);
  _mm256_store_ps(a8 + 8, acc1);
  ASSERT_EQ(vm512::exp_shift_acc(x.data(), y16.data(), int64_t(x.size()), shift, a16), int64_t(x.size()));
  EXPECT_EQ(std::memcmp(y8.data(), y16.data(), x.size() * 4), 0);
  EXPECT_EQ(std::memcmp(a8, a16, sizeof a8), 0);
  EXPECT_TRUE(std::isnan(y16[3]));                              // NaN
  EXPECT_EQ(y16[10], std::numeric_limits<float>::infinity());  // +inf
  EXPECT_EQ(y16[17], 0.0f);                                    // -inf
  EXPECT_EQ(y16[24], 0.0f);                                    // below -87.34 after the shift: flushed
#else
  GTEST_SKIP() << "built without AVX2: no vector math";
#endif
}

// ---------------------------------------------------------------- PRelu
TEST(ElementwiseUnary, PReluBroadcastsSlope) {
  uint32_t seed = 1300;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    std::mt19937 rng(seed++);
    for (int trial = 0; trial < 8; ++trial) {
      auto shapes = random_broadcast_shapes(rng);
      Shape xs;
      ASSERT_TRUE(broadcast_ref(shapes, &xs));
      Tensor x = random_tensor(dt, xs, rng, -5, 5), slope = random_tensor(dt, shapes[1], rng, -2, 2);
      Shape so;
      auto e = broadcast_reference({x, slope}, [](const std::vector<double>& v) { return v[0] < 0 ? v[0] * v[1] : v[0]; },
                                   &so);
      for (bool constants : {false, true})
        EXPECT_TRUE(all_close(run_node("PRelu", {x, slope}, {}, opts(constants))[0], so, e, rtol_for(dt), atol_for(dt)))
            << dtype_name(dt) << " seed " << seed << " trial " << trial;
    }
  }
  // The slope must broadcast to X's shape (unidirectional).
  expect_error<onnxtrain::InvalidArgument>(
      [] { run_node("PRelu", {Tensor::zeros(DType::kFloat32, {3}), Tensor::zeros(DType::kFloat32, {2, 3})}); }, "PRelu",
      {"cannot be broadcast to"});
}

// PRelu-1/6 (PyTorch's PReLU(num_parameters=C) exported at those opsets, ONNX's
// PReLU_*_multiparam cases): a 1-D slope of X.shape[1] values is one slope per channel; a
// single value is shared; other slopes broadcast as at later opsets.
TEST(ElementwiseUnary, PReluOpset6SlopePerChannel) {
  std::mt19937 rng(1350);
  for (const Shape& xs : {Shape{2, 3}, Shape{2, 3, 4}, Shape{2, 3, 4, 5}, Shape{2, 3, 4, 5, 6}, Shape{2, 3, 3}}) {
    const int64_t c = xs[1];
    Tensor x = random_tensor(DType::kFloat32, xs, rng, -5, 5), slope = random_tensor(DType::kFloat32, {c}, rng, -2, 2);
    const int64_t inner = onnxtrain::shape_numel(xs) / (xs[0] * c);
    std::vector<double> e(size_t(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.data<float>()[i], s = slope.data<float>()[(i / inner) % c];
      e[size_t(i)] = v < 0 ? v * s : v;
    }
    for (bool constants : {false, true})
      EXPECT_TRUE(all_close(run_node("PRelu", {x, slope}, {}, opts(constants, 1, 6))[0], xs, e, 1e-6, 1e-6))
          << onnxtrain::shape_to_string(xs);
  }
  // A shared slope, and a slope that is not per channel, broadcast as usual.
  Tensor x = random_tensor(DType::kFloat32, {2, 3, 4}, rng, -5, 5);
  for (const Shape& ss : {Shape{1}, Shape{4}, Shape{3, 4}}) {
    Tensor slope = random_tensor(DType::kFloat32, ss, rng, -2, 2);
    Shape so;
    auto e = broadcast_reference({x, slope}, [](const std::vector<double>& v) { return v[0] < 0 ? v[0] * v[1] : v[0]; },
                                 &so);
    EXPECT_TRUE(all_close(run_node("PRelu", {x, slope}, {}, opts(false, 1, 6))[0], so, e, 1e-6, 1e-6))
        << onnxtrain::shape_to_string(ss);
  }
  // At opset 7 a slope of X.shape[1] values broadcasts against the last axis: [2, 3, 4] and [3] do not fit.
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("PRelu", {x, Tensor::zeros(DType::kFloat32, {3})}, {}, opts(false, 1, 7)); }, "PRelu",
      {"[2, 3, 4] and [3] cannot be broadcast"});
}

// ---------------------------------------------------------------- Clip
TEST(ElementwiseUnary, ClipInputsAndAttributes) {
  uint32_t seed = 1400;
  std::vector<DType> types = kFloatTypes;
  types.insert(types.end(), kIntTypes.begin(), kIntTypes.end());
  for (DType dt : types) {
    std::mt19937 rng(seed++);
    const double lo = is_unsigned(dt) ? 0 : -10;
    Tensor x = random_tensor(dt, {4, 6}, rng, lo, 10);
    auto xv = to_double(x);
    struct Bounds {
      bool has_min, has_max;
      double mn, mx;
    };
    for (Bounds b : {Bounds{true, true, 2, 5}, Bounds{true, false, 3, 0}, Bounds{false, true, 0, 4},
                     Bounds{false, false, 0, 0}, Bounds{true, true, 6, 3}}) {
      std::vector<double> e;
      for (double v : xv) {
        double r = v;
        if (b.has_min) r = std::max(r, b.mn);
        if (b.has_max) r = std::min(r, b.mx);  // min > max gives max (numpy.clip)
        e.push_back(r);
      }
      std::vector<Tensor> in{x, b.has_min ? from_double(dt, {}, {b.mn}) : Tensor(),
                             b.has_max ? from_double(dt, {}, {b.mx}) : Tensor()};
      if (!b.has_max) in.pop_back();
      if (!b.has_max && !b.has_min) in.pop_back();
      for (bool constants : {false, true})
        EXPECT_TRUE(all_close(run_node("Clip", in, {}, opts(constants))[0], {4, 6}, e, 0, 0))
            << dtype_name(dt) << " min " << b.has_min << " max " << b.has_max;
      // Opset 6: attributes (float types only in ONNX; accepted for every numeric type here).
      std::vector<ir::Attribute> attrs;
      if (b.has_min) attrs.push_back(attr_float("min", float(b.mn)));
      if (b.has_max) attrs.push_back(attr_float("max", float(b.mx)));
      EXPECT_TRUE(all_close(run_node("Clip", {x}, attrs, opts(false, 1, 6))[0], {4, 6}, e, 0, 0))
          << dtype_name(dt) << " opset 6";
    }
  }
  expect_error<onnxtrain::InvalidArgument>(
      [] { run_node("Clip", {Tensor::zeros(DType::kFloat32, {3}), Tensor::scalar<double>(0)}); }, "Clip",
      {"element type"});
  expect_error<onnxtrain::InvalidArgument>(
      [] { run_node("Clip", {Tensor::zeros(DType::kFloat32, {3}), Tensor::zeros(DType::kFloat32, {2})}); }, "Clip",
      {"scalar"});
}

TEST(ElementwiseUnary, ClipKeepsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto y = run_node("Clip", {Tensor::from_vector<float>({2}, {nan, 7}), Tensor::scalar(0.0f), Tensor::scalar(1.0f)})[0];
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
  EXPECT_EQ(y.data<float>()[1], 1.0f);
}
