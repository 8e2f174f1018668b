// Comparisons, boolean logic, IsNaN/IsInf and Where against naive references.
#include <cmath>
#include <limits>

#include "elementwise_test_util.h"

using namespace ew_test;

namespace {

void check_compare(const std::string& op, const std::function<bool(double, double)>& ref, DType dt, uint32_t seed,
                   int64_t opset = 17) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 10; ++trial) {
    auto shapes = random_broadcast_shapes(rng);
    // Few distinct values so that equality happens often.
    Tensor a = random_tensor(dt, shapes[0], rng, 0, 3), b = random_tensor(dt, shapes[1], rng, 0, 3);
    Shape so;
    auto e = broadcast_reference({a, b}, [&](const std::vector<double>& v) { return double(ref(v[0], v[1])); }, &so);
    for (bool constants : {false, true}) {
      auto y = run_node(op, {a, b}, {}, opts(constants, 1 + trial % 2, opset));
      EXPECT_EQ(y[0].dtype(), DType::kBool);
      EXPECT_TRUE(all_close(y[0], so, e, 0, 0)) << op << " " << dtype_name(dt) << " seed " << seed << " trial " << trial;
    }
  }
}

}  // namespace

TEST(ElementwiseLogic, ComparisonsEveryType) {
  std::vector<DType> types = kFloatTypes;
  types.insert(types.end(), kIntTypes.begin(), kIntTypes.end());
  uint32_t seed = 2000;
  for (DType dt : types) {
    check_compare("Equal", [](double a, double b) { return a == b; }, dt, seed++);
    check_compare("Less", [](double a, double b) { return a < b; }, dt, seed++);
    check_compare("Greater", [](double a, double b) { return a > b; }, dt, seed++);
    check_compare("LessOrEqual", [](double a, double b) { return a <= b; }, dt, seed++);
    check_compare("GreaterOrEqual", [](double a, double b) { return a >= b; }, dt, seed++);
  }
  check_compare("Equal", [](double a, double b) { return a == b; }, DType::kBool, seed++);
}

TEST(ElementwiseLogic, ComparisonsWithNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = Tensor::from_vector<float>({3}, {nan, 1, nan});
  Tensor b = Tensor::from_vector<float>({3}, {nan, nan, 1});
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    EXPECT_TRUE(all_close(run_node(op, {a, b})[0], {3}, {0, 0, 0}, 0, 0)) << op;
}

TEST(ElementwiseLogic, AndOrXorNot) {
  uint32_t seed = 2100;
  check_compare("And", [](double a, double b) { return a != 0 && b != 0; }, DType::kBool, seed++);
  check_compare("Or", [](double a, double b) { return a != 0 || b != 0; }, DType::kBool, seed++);
  check_compare("Xor", [](double a, double b) { return (a != 0) != (b != 0); }, DType::kBool, seed++);
  // Opset 1-6: legacy broadcasting.
  Tensor a = Tensor::from_vector<bool>({2, 3}, {true, false, true, false, true, true});
  Tensor b = Tensor::from_vector<bool>({3}, {true, true, false});
  EXPECT_TRUE(all_close(run_node("And", {a, b}, {attr_int("broadcast", 1)}, opts(false, 1, 6))[0], {2, 3},
                        {1, 0, 0, 0, 1, 0}, 0, 0));
  for (bool constants : {false, true})
    EXPECT_TRUE(all_close(run_node("Not", {a}, {}, opts(constants, 1, 1))[0], {2, 3}, {0, 1, 0, 1, 0, 0}, 0, 0));
  expect_error<onnxtrain::NotImplemented>(
      [] { run_node("And", {Tensor::zeros(DType::kInt32, {2}), Tensor::zeros(DType::kInt32, {2})}); }, "And", {"int32"});
  expect_error<onnxtrain::NotImplemented>([] { run_node("Not", {Tensor::zeros(DType::kFloat32, {2})}); }, "Not",
                                          {"float"});
  expect_error<onnxtrain::InvalidArgument>(
      [] { run_node("Less", {Tensor::zeros(DType::kFloat32, {2}), Tensor::zeros(DType::kInt64, {2})}); }, "Less",
      {"different element types"});
}

TEST(ElementwiseLogic, IsNaNIsInf) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v = {nan, inf, -inf, 0, -1.5, 3e38, -0.0, nan};
  for (DType dt : kFloatTypes) {
    Tensor x = from_double(dt, {2, 4}, v);
    for (bool constants : {false, true}) {
      EXPECT_TRUE(all_close(run_node("IsNaN", {x}, {}, opts(constants))[0], {2, 4}, {1, 0, 0, 0, 0, 0, 0, 1}, 0, 0))
          << dtype_name(dt);
      EXPECT_TRUE(all_close(run_node("IsInf", {x}, {}, opts(constants))[0], {2, 4},
                            {0, 1, 1, 0, 0, dt == DType::kFloat16 ? 1.0 : 0.0, 0, 0}, 0, 0))
          << dtype_name(dt);  // 3e38 overflows float16
    }
    EXPECT_TRUE(all_close(run_node("IsInf", {x}, {attr_int("detect_negative", 0)})[0], {2, 4},
                          {0, 1, 0, 0, 0, dt == DType::kFloat16 ? 1.0 : 0.0, 0, 0}, 0, 0));
    EXPECT_TRUE(all_close(run_node("IsInf", {x}, {attr_int("detect_positive", 0)})[0], {2, 4}, {0, 0, 1, 0, 0, 0, 0, 0},
                          0, 0));
  }
}

// ---------------------------------------------------------------- Where
TEST(ElementwiseLogic, WhereBroadcastsThreeInputs) {
  uint32_t seed = 2200;
  std::vector<DType> types = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt8,
                              DType::kInt64,   DType::kUInt16,  DType::kBool,    DType::kBFloat16};
  for (DType dt : types) {
    std::mt19937 rng(seed++);
    for (int trial = 0; trial < 10; ++trial) {
      auto shapes = random_broadcast_shapes(rng, 3);
      Tensor c = random_tensor(DType::kBool, shapes[0], rng);
      Tensor x = random_tensor(dt, shapes[1], rng, 0, 9), z = random_tensor(dt, shapes[2], rng, 0, 9);
      Shape so;
      auto e = broadcast_reference({c, x, z}, [](const std::vector<double>& v) { return v[0] != 0 ? v[1] : v[2]; }, &so);
      for (bool constants : {false, true}) {
        auto y = run_node("Where", {c, x, z}, {}, opts(constants, 1 + trial % 2));
        EXPECT_EQ(y[0].dtype(), dt);
        EXPECT_TRUE(all_close(y[0], so, e, 0, 0)) << dtype_name(dt) << " seed " << seed << " trial " << trial;
      }
    }
  }
}

TEST(ElementwiseLogic, WhereStrings) {
  Tensor c = Tensor::from_vector<bool>({2, 2}, {true, false, false, true});
  Tensor x = Tensor::from_vector<std::string>({2}, {"a", "b"});
  Tensor z = Tensor::from_vector<std::string>({2, 1}, {"p", "q"});
  auto y = run_node("Where", {c, x, z})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 2}));
  const std::vector<std::string> expect = {"a", "p", "q", "b"};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<std::string>()[i], expect[size_t(i)]);
}

TEST(ElementwiseLogic, WhereErrorsNameNode) {
  Tensor f = Tensor::zeros(DType::kFloat32, {2});
  expect_error<onnxtrain::InvalidArgument>([&] { run_node("Where", {Tensor::zeros(DType::kInt32, {2}), f, f}); },
                                           "Where", {"bool"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Where", {Tensor::zeros(DType::kBool, {2}), f, Tensor::zeros(DType::kFloat64, {2})}); }, "Where",
      {"different element types"});
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_node("Where", {Tensor::zeros(DType::kBool, {3}), f, f}); }, "Where", {"cannot be broadcast"});
}
