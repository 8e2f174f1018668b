// Elementwise arithmetic (Add Sub Mul Div Pow Mod BitShift) and variadic (Min Max Sum Mean)
// kernels against naive double-precision references on random broadcast shapes.
#include <cmath>
#include <limits>

#include "elementwise_test_util.h"

using namespace ew_test;

namespace {

using Ref2 = std::function<double(double, double)>;

struct BinaryCase {
  std::string op;
  Ref2 ref;
  double lo = -3, hi = 3;
  bool nonzero_b = false;  // divisors
  std::vector<ir::Attribute> attrs = {};
};

Tensor nonzero(Tensor t) {
  auto v = to_double(t);
  for (auto& x : v)
    if (x == 0) x = 1;
  return from_double(t.dtype(), t.shape(), v);
}

// 12 random broadcast shape pairs; both feeding modes; 1 and 2 threads.
void check_binary(const BinaryCase& c, DType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  const double lo = is_unsigned(dt) ? std::max(0.0, c.lo) : c.lo;
  for (int trial = 0; trial < 12; ++trial) {
    auto shapes = random_broadcast_shapes(rng);
    Tensor a = random_tensor(dt, shapes[0], rng, lo, c.hi), b = random_tensor(dt, shapes[1], rng, lo, c.hi);
    if (c.nonzero_b) b = nonzero(b);
    Shape so;
    auto expect =
        broadcast_reference({a, b}, [&](const std::vector<double>& v) { return wrap_to(dt, c.ref(v[0], v[1])); }, &so);
    for (bool constants : {false, true}) {
      auto y = run_node(c.op, {a, b}, c.attrs, opts(constants, 1 + trial % 2));
      EXPECT_EQ(y[0].dtype(), dt);
      EXPECT_TRUE(all_close(y[0], so, expect, rtol_for(dt), atol_for(dt)))
          << c.op << " " << dtype_name(dt) << " " << shape_to_string(a.shape()) << " x " << shape_to_string(b.shape())
          << " seed " << seed << " trial " << trial << " constants " << constants;
    }
  }
}

std::vector<DType> all_numeric() {
  std::vector<DType> r = kFloatTypes;
  r.insert(r.end(), kIntTypes.begin(), kIntTypes.end());
  return r;
}

double trunc_div(double a, double b) { return std::trunc(a / b); }
double py_mod(double a, double b) { return a - std::floor(a / b) * b; }

}  // namespace

TEST(Elementwise, AddSubMulAllTypes) {
  uint32_t seed = 100;
  for (DType dt : all_numeric()) {
    check_binary({"Add", [](double a, double b) { return a + b; }}, dt, seed++);
    check_binary({"Sub", [](double a, double b) { return a - b; }}, dt, seed++);
    check_binary({"Mul", [](double a, double b) { return a * b; }}, dt, seed++);
  }
}

TEST(Elementwise, DivAllTypes) {
  uint32_t seed = 200;
  for (DType dt : kFloatTypes) check_binary({"Div", [](double a, double b) { return a / b; }, -3, 3, true}, dt, seed++);
  for (DType dt : kIntTypes) check_binary({"Div", trunc_div, -9, 9, true}, dt, seed++);
}

// Runs of 16 repeated along the next axis (a blocked [N, C/16, H, W, 16] with a per-channel
// [N, C/16, 1, 1, 16]: squeeze-and-excitation gates; [R, 16] with [1, 16]), the repeated operand on
// either side, float and integer types, 1 and 2 threads, against the double reference; an integer
// division by zero there still names the node; empty tensors of those shapes.
TEST(Elementwise, RepeatedSixteenRuns) {
  std::mt19937 rng(303);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 5, 7, 16}, {2, 3, 1, 1, 16}}, {{9, 16}, {1, 16}}, {{1, 40, 14, 14, 16}, {1, 40, 1, 1, 16}},
      {{3, 1, 4, 16}, {3, 5, 1, 16}}, {{0, 16}, {1, 16}}, {{2, 0, 16}, {2, 1, 16}}};
  for (const auto& [big, small] : shapes)
    for (bool swap : {false, true})
      for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kFloat16}) {
        const Shape& sa = swap ? small : big;
        const Shape& sb = swap ? big : small;
        Tensor a = random_tensor(dt, sa, rng, -3, 3), b = random_tensor(dt, sb, rng, 0.5, 3);  // quotients within float16
        for (const BinaryCase& c : {BinaryCase{"Sub", [](double u, double v) { return u - v; }},
                                    BinaryCase{"Mul", [](double u, double v) { return u * v; }},
                                    BinaryCase{"Div", dt == DType::kInt32 ? Ref2(trunc_div) : Ref2([](double u, double v) { return u / v; })}}) {
          Shape so;
          auto expect = broadcast_reference(
              {a, b}, [&](const std::vector<double>& v) { return wrap_to(dt, c.ref(v[0], v[1])); }, &so);
          for (int threads : {1, 2}) {
            auto y = run_node(c.op, {a, b}, {}, opts(threads == 2, threads));
            EXPECT_TRUE(all_close(y[0], so, expect, rtol_for(dt), atol_for(dt)))
                << c.op << " " << dtype_name(dt) << " " << shape_to_string(sa) << " x " << shape_to_string(sb);
          }
        }
      }
  Tensor a = from_double(DType::kInt32, {3, 16}, std::vector<double>(48, 5.0));
  std::vector<double> bv(16, 1.0);
  bv[7] = 0;
  Tensor b = from_double(DType::kInt32, {1, 16}, bv);
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Div", {a, b}); }, "Div", {"division by zero"});
}

TEST(Elementwise, IntegerWrapAndMinOverMinusOne) {
  const int32_t mn = std::numeric_limits<int32_t>::min(), mx = std::numeric_limits<int32_t>::max();
  Tensor a = Tensor::from_vector<int32_t>({3}, {mn, mx, mn});
  Tensor b = Tensor::from_vector<int32_t>({3}, {-1, 1, -1});
  auto div = run_node("Div", {a, b})[0];
  EXPECT_EQ(div.data<int32_t>()[0], mn);  // wraps instead of trapping
  EXPECT_EQ(div.data<int32_t>()[1], mx);
  auto add = run_node("Add", {a, b})[0];
  EXPECT_EQ(add.data<int32_t>()[0], mx);  // MIN + -1 wraps
  EXPECT_EQ(add.data<int32_t>()[1], mn);  // MAX + 1 wraps
  auto mod = run_node("Mod", {a, b})[0];
  EXPECT_EQ(mod.data<int32_t>()[0], 0);
}

TEST(Elementwise, IntegerDivisionByZeroNamesNode) {
  for (const char* op : {"Div", "Mod"}) {
    for (DType dt : {DType::kInt32, DType::kInt64, DType::kUInt8}) {
      Tensor a = from_double(dt, {2, 3}, {1, 2, 3, 4, 5, 6});
      Tensor b = from_double(dt, {3}, {1, 0, 2});
      for (bool constants : {false, true})
        expect_error<onnxtrain::InvalidArgument>([&] { run_node(op, {a, b}, {}, opts(constants)); }, op,
                                                 {"division by zero"});
    }
  }
  // Float division by zero is IEEE.
  auto y = run_node("Div", {Tensor::from_vector<float>({2}, {1, -1}), Tensor::from_vector<float>({2}, {0, 0})})[0];
  EXPECT_EQ(y.data<float>()[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y.data<float>()[1], -std::numeric_limits<float>::infinity());
}

TEST(Elementwise, ModBothModes) {
  uint32_t seed = 300;
  for (DType dt : all_numeric()) {
    // fmod=1: the dividend's sign (C fmod), every type.
    check_binary({"Mod", [](double a, double b) { return std::fmod(a, b); }, -20, 20, true, {attr_int("fmod", 1)}}, dt,
                 seed++);
    // fmod=0: the divisor's sign (Python %).
    check_binary({"Mod", py_mod, -20, 20, true, {attr_int("fmod", 0)}}, dt, seed++);
  }
}

TEST(Elementwise, ModExamples) {
  Tensor a = Tensor::from_vector<int64_t>({6}, {-4, 7, 5, 4, -7, 8});
  Tensor b = Tensor::from_vector<int64_t>({6}, {2, -3, 8, -2, 3, 5});
  EXPECT_TRUE(all_close(run_node("Mod", {a, b})[0], {6}, {0, -2, 5, 0, 2, 3}, 0, 0));
  EXPECT_TRUE(all_close(run_node("Mod", {a, b}, {attr_int("fmod", 1)})[0], {6}, {0, 1, 5, 0, -1, 3}, 0, 0));
}

TEST(Elementwise, PowSameAndMixedTypes) {
  const Ref2 pw = [](double a, double b) { return std::pow(a, b); };
  uint32_t seed = 400;
  for (DType dt : kFloatTypes) check_binary({"Pow", pw, 0.1, 3}, dt, seed++);
  // Exponent 2 takes a fast path.
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    std::mt19937 rng(seed++);
    Tensor x = random_tensor(dt, {4, 5}, rng, -5, 5);
    std::vector<double> e;
    for (double v : to_double(x)) e.push_back(v * v);
    EXPECT_TRUE(all_close(run_node("Pow", {x, from_double(dt, {}, {2})})[0], {4, 5}, e, rtol_for(dt), 0));
  }
  // Mixed base/exponent types: numpy computes in double and casts to the base type.
  struct Mixed {
    DType base, exp;
  };
  for (Mixed m : {Mixed{DType::kFloat32, DType::kInt64}, Mixed{DType::kFloat32, DType::kInt32},
                  Mixed{DType::kFloat32, DType::kUInt64}, Mixed{DType::kFloat64, DType::kFloat32},
                  Mixed{DType::kFloat16, DType::kFloat32}, Mixed{DType::kInt32, DType::kFloat32},
                  Mixed{DType::kInt64, DType::kFloat64}, Mixed{DType::kInt64, DType::kInt64},
                  Mixed{DType::kInt32, DType::kInt8}, Mixed{DType::kUInt8, DType::kUInt16}}) {
    std::mt19937 rng(seed++);
    for (int trial = 0; trial < 6; ++trial) {
      auto shapes = random_broadcast_shapes(rng);
      Tensor a = random_tensor(m.base, shapes[0], rng, 0, 3), b = random_tensor(m.exp, shapes[1], rng, 0, 4);
      Shape so;
      auto expect = broadcast_reference({a, b}, [&](const std::vector<double>& v) {
        const double p = std::pow(v[0], v[1]);
        return onnxtrain::dtype_is_float(m.base) ? p : std::trunc(p);
      }, &so);
      for (bool constants : {false, true}) {
        auto y = run_node("Pow", {a, b}, {}, opts(constants));
        EXPECT_EQ(y[0].dtype(), m.base);
        EXPECT_TRUE(all_close(y[0], so, expect, rtol_for(m.base), atol_for(m.base)))
            << dtype_name(m.base) << "^" << dtype_name(m.exp) << " seed " << seed << " trial " << trial;
      }
    }
  }
}

TEST(Elementwise, PowIntegerNegativeExponent) {
  Tensor a = Tensor::from_vector<int64_t>({4}, {1, -1, -1, 2});
  Tensor b = Tensor::from_vector<int64_t>({4}, {-3, -3, -2, -1});
  EXPECT_TRUE(all_close(run_node("Pow", {a, b})[0], {4}, {1, -1, 1, 0}, 0, 0));
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Pow", {Tensor::scalar<int32_t>(0), Tensor::scalar<int32_t>(-1)}); }, "Pow", {"negative"});
}

TEST(Elementwise, BitShift) {
  uint32_t seed = 500;
  for (DType dt : {DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64}) {
    const double bits = double(onnxtrain::dtype_size(dt) * 8);
    check_binary({"BitShift", [](double a, double b) { return std::floor(a / std::pow(2.0, b)); }, 0, bits + 2, false,
                  {attr_string("direction", "RIGHT")}},
                 dt, seed++);
    // Left shifts of small values by small amounts (no bits lost).
    check_binary({"BitShift", [](double a, double b) { return a * std::pow(2.0, b); }, 0, 4, false,
                  {attr_string("direction", "LEFT")}},
                 dt, seed++);
  }
  expect_error<onnxtrain::InvalidModel>(
      [] { run_node("BitShift", {Tensor::scalar<uint8_t>(1), Tensor::scalar<uint8_t>(1)}, {attr_string("direction", "UP")}); },
      "BitShift", {"direction"});
}

TEST(Elementwise, LegacyBroadcastOpset6) {
  std::mt19937 rng(600);
  Tensor a = random_tensor(DType::kFloat32, {2, 3, 4}, rng), b = random_tensor(DType::kFloat32, {3}, rng);
  auto av = to_double(a), bv = to_double(b);
  std::vector<double> e(av.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = av[i] + bv[(i / 4) % 3];
  auto y = run_node("Add", {a, b}, {attr_int("broadcast", 1), attr_int("axis", 1)}, opts(false, 1, 6));
  EXPECT_TRUE(all_close(y[0], {2, 3, 4}, e, 1e-6, 1e-6));
  // Default axis: trailing dims.
  Tensor c = random_tensor(DType::kFloat32, {3, 4}, rng);
  auto cv = to_double(c);
  for (size_t i = 0; i < e.size(); ++i) e[i] = av[i] * cv[i % 12];
  EXPECT_TRUE(all_close(run_node("Mul", {a, c}, {attr_int("broadcast", 1)}, opts(false, 1, 6))[0], {2, 3, 4}, e, 1e-6,
                        1e-6));
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Add", {a, b}, {}, opts(false, 1, 6)); }, "Add",
                                           {"broadcast attribute"});
}

TEST(Elementwise, LargeTensorsThreaded) {
  std::mt19937 rng(700);
  Tensor a = random_tensor(DType::kFloat32, {300, 1000}, rng), b = random_tensor(DType::kFloat32, {1000}, rng);
  auto av = to_double(a), bv = to_double(b);
  std::vector<double> e(av.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = av[i] * bv[i % 1000];
  EXPECT_TRUE(all_close(run_node("Mul", {a, b}, {}, opts(false, 2))[0], {300, 1000}, e, 1e-6, 1e-7));
  for (size_t i = 0; i < e.size(); ++i) e[i] = std::max(av[i], bv[i % 1000]);
  EXPECT_TRUE(all_close(run_node("Max", {a, b}, {}, opts(false, 2))[0], {300, 1000}, e, 0, 0));
}

TEST(Elementwise, ErrorsNameNode) {
  Tensor f = Tensor::zeros(DType::kFloat32, {2, 3});
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Add", {f, Tensor::zeros(DType::kFloat32, {4})}); }, "Add",
                                           {"cannot be broadcast"});
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Sub", {f, Tensor::zeros(DType::kFloat64, {2, 3})}); },
                                           "Sub", {"different element types"});
  expect_error<onnxtrain::NotImplemented>(
      [&] { run_node("Mul", {Tensor::zeros(DType::kBool, {2}), Tensor::zeros(DType::kBool, {2})}); }, "Mul",
      {"bool"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Max", {f, Tensor::zeros(DType::kFloat32, {3}), Tensor::zeros(DType::kFloat32, {4, 1})}); },
      "Max", {"cannot be broadcast"});
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Sum", {f, Tensor::zeros(DType::kInt32, {2, 3})}); }, "Sum",
                                           {"different element types"});
  expect_error<onnxtrain::NotImplemented>(
      [&] { run_node("Mean", {Tensor::zeros(DType::kInt32, {2}), Tensor::zeros(DType::kInt32, {2})}); }, "Mean",
      {"int32"});
}

// ---------------------------------------------------------------- variadic
namespace {

void check_variadic(const std::string& op, DType dt, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 6; ++trial) {
    auto shapes = random_broadcast_shapes(rng, count);
    std::vector<Tensor> xs;
    for (const auto& s : shapes) xs.push_back(random_tensor(dt, s, rng, is_unsigned(dt) ? 0 : -9, 9));
    Shape so;
    auto expect = broadcast_reference(xs, [&](const std::vector<double>& v) {
      double r = v[0];
      for (size_t k = 1; k < v.size(); ++k)
        r = op == "Max" ? std::max(r, v[k]) : op == "Min" ? std::min(r, v[k]) : r + v[k];
      return op == "Mean" ? r / double(v.size()) : r;
    }, &so);
    for (bool constants : {false, true}) {
      auto y = run_node(op, xs, {}, opts(constants, 1 + trial % 2));
      EXPECT_EQ(y[0].dtype(), dt);
      // Sums of `count` rounded terms of magnitude <= 9: allow `count` roundings of each.
      const double c = double(count);
      EXPECT_TRUE(all_close(y[0], so, expect, rtol_for(dt) * c, (rtol_for(dt) * 9 + atol_for(dt)) * c))
          << op << " " << dtype_name(dt) << " x" << count << " seed " << seed << " trial " << trial;
    }
  }
}

}  // namespace

TEST(Elementwise, VariadicMinMaxSumMean) {
  uint32_t seed = 800;
  for (size_t count : {1, 2, 3, 5}) {
    for (DType dt : all_numeric()) {
      check_variadic("Max", dt, count, seed++);
      check_variadic("Min", dt, count, seed++);
      check_variadic("Sum", dt, count, seed++);
    }
    for (DType dt : kFloatTypes) check_variadic("Mean", dt, count, seed++);
  }
}

TEST(Elementwise, VariadicMoreThanSixteenInputs) {
  uint32_t seed = 900;
  for (size_t count : {16, 17, 31, 40}) {
    check_variadic("Sum", DType::kFloat32, count, seed++);
    check_variadic("Mean", DType::kFloat16, count, seed++);
    check_variadic("Max", DType::kInt64, count, seed++);
  }
}

TEST(Elementwise, MinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = Tensor::from_vector<float>({3}, {nan, 1, 2});
  Tensor b = Tensor::from_vector<float>({3}, {1, nan, 3});
  for (const char* op : {"Max", "Min"}) {
    auto y = run_node(op, {a, b})[0];
    EXPECT_TRUE(std::isnan(y.data<float>()[0])) << op;
    EXPECT_TRUE(std::isnan(y.data<float>()[1])) << op;
    EXPECT_EQ(y.data<float>()[2], op[1] == 'a' ? 3.0f : 2.0f);
  }
}

TEST(Elementwise, EmptyTensors) {
  Tensor e = Tensor::zeros(DType::kFloat32, {0, 3});
  Tensor row = Tensor::zeros(DType::kFloat32, {3});
  for (bool constants : {false, true}) {
    const RunOptions o = opts(constants);
    EXPECT_EQ(run_node("Add", {e, row}, {}, o)[0].shape(), (Shape{0, 3}));
    EXPECT_EQ(run_node("Exp", {e}, {}, o)[0].shape(), (Shape{0, 3}));
    EXPECT_EQ(run_node("Sum", {e, row, e}, {}, o)[0].shape(), (Shape{0, 3}));
    EXPECT_EQ(run_node("Pow", {e, Tensor::scalar<int64_t>(3)}, {}, o)[0].shape(), (Shape{0, 3}));
    EXPECT_EQ(run_node("Clip", {e, Tensor::scalar(0.0f)}, {}, o)[0].shape(), (Shape{0, 3}));
    EXPECT_EQ(run_node("Where", {Tensor::zeros(DType::kBool, {1, 3}), e, row}, {}, o)[0].shape(), (Shape{0, 3}));
    EXPECT_EQ(run_node("Cast", {e}, {attr_int("to", int64_t(DType::kString))}, o)[0].shape(), (Shape{0, 3}));
    EXPECT_EQ(run_node("Div", {Tensor::zeros(DType::kInt32, {0}), Tensor::zeros(DType::kInt32, {1})}, {}, o)[0].numel(), 0);
  }
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Mul", {e, Tensor::zeros(DType::kFloat32, {2, 3})}); }, "Mul",
                                           {"cannot be broadcast"});
}
