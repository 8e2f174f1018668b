// Cast and CastLike between every pair of element types, against an independent double-precision
// reference; string formatting checked against strings numpy produced (numpy 1.24 str()).
#include <cmath>
#include <limits>

#include "elementwise_test_util.h"

using namespace ew_test;

namespace {

const std::vector<DType>& pod_types() {
  static const std::vector<DType> t = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                       DType::kInt8,    DType::kInt16,   DType::kInt32,   DType::kInt64,
                                       DType::kUInt8,   DType::kUInt16,  DType::kUInt32,  DType::kUInt64,
                                       DType::kBool};
  return t;
}

// Range of an integer dtype as doubles.
std::pair<double, double> int_range(DType t) {
  switch (t) {
    case DType::kInt8: return {-128, 127};
    case DType::kInt16: return {-32768, 32767};
    case DType::kInt32: return {-2147483648.0, 2147483647.0};
    case DType::kInt64: return {-9223372036854775808.0, 9223372036854775807.0};
    case DType::kUInt8: return {0, 255};
    case DType::kUInt16: return {0, 65535};
    case DType::kUInt32: return {0, 4294967295.0};
    default: return {0, 18446744073709551615.0};
  }
}

// Expected value of casting v (exactly representable in the source type) to `to`.
double cast_ref(double v, DType to) {
  if (to == DType::kBool) return v != 0;
  if (onnxtrain::dtype_is_float(to)) {
    Tensor t = from_double(to, {}, {v});  // rounding of the target float type
    return to_double(t)[0];
  }
  if (std::isnan(v)) return 0;
  const auto [lo, hi] = int_range(to);
  return std::clamp(std::trunc(v), lo, hi);
}

}  // namespace

TEST(ElementwiseCast, EveryPairOfNumericTypes) {
  uint32_t seed = 3000;
  for (DType from : pod_types())
    for (DType to : pod_types()) {
      std::mt19937 rng(seed++);
      // In-range values of both types (integers wrap only out of range, tested below).
      const double lo = is_unsigned(from) || is_unsigned(to) || from == DType::kBool ? 0 : -100;
      Tensor x = random_tensor(from, {3, 7}, rng, lo, 100);
      std::vector<double> e;
      for (double v : to_double(x)) e.push_back(cast_ref(v, to));
      for (bool constants : {false, true}) {
        auto y = run_node("Cast", {x}, {attr_int("to", int64_t(to))}, opts(constants));
        EXPECT_EQ(y[0].dtype(), to);
        EXPECT_TRUE(all_close(y[0], {3, 7}, e, 0, 0)) << dtype_name(from) << " -> " << dtype_name(to);
      }
      // CastLike takes the target type from its second input.
      auto y = run_node("CastLike", {x, Tensor::zeros(to, {2})});
      EXPECT_EQ(y[0].dtype(), to);
      EXPECT_TRUE(all_close(y[0], {3, 7}, e, 0, 0)) << "CastLike " << dtype_name(from) << " -> " << dtype_name(to);
    }
}

TEST(ElementwiseCast, FloatToIntegerSaturatesAndTruncates) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v = {2.9, -2.9, 1e10, -1e10, inf, -inf, nan, 300, -0.5};
  for (DType from : {DType::kFloat32, DType::kFloat64, DType::kFloat16})
    for (DType to : kIntTypes) {
      Tensor x = from_double(from, {9}, v);
      std::vector<double> e;
      for (double d : to_double(x)) e.push_back(cast_ref(d, to));
      EXPECT_TRUE(all_close(run_node("Cast", {x}, {attr_int("to", int64_t(to))})[0], {9}, e, 0, 0))
          << dtype_name(from) << " -> " << dtype_name(to);
    }
  // Integer -> narrower integer wraps (two's complement), as numpy.
  auto y = run_node("Cast", {Tensor::from_vector<int32_t>({3}, {300, -129, 65535})}, {attr_int("to", int64_t(DType::kInt8))});
  EXPECT_TRUE(all_close(y[0], {3}, {44, 127, -1}, 0, 0));
}

TEST(ElementwiseCast, FloatToFloat16RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1); 1 + 3 * 2^-11 ties up.
  Tensor x = Tensor::from_vector<float>({5}, {1.00048828125f, 1.00146484375f, 65520.0f, 1e-8f, -3.0e-8f});
  auto y = run_node("Cast", {x}, {attr_int("to", int64_t(DType::kFloat16))})[0];
  EXPECT_TRUE(all_close(y, {5}, {1.0, 1.001953125, std::numeric_limits<double>::infinity(), 0.0, -5.960464477539063e-08},
                        0, 0));
}

TEST(ElementwiseCast, DoubleToHalfRoundsOnce) {
  // Just above the midpoint of 1 and 1 + 2^-10: through float it would become the midpoint and
  // tie to 1; numpy (and a single rounding) gives 1 + 2^-10.
  const double v = 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  auto y = run_node("Cast", {Tensor::from_vector<double>({3}, {v, -v, 1e300})}, {attr_int("to", int64_t(DType::kFloat16))});
  EXPECT_TRUE(all_close(y[0], {3}, {1.0009765625, -1.0009765625, std::numeric_limits<double>::infinity()}, 0, 0));
  // bfloat16: midpoint of 1 and 1 + 2^-7, plus a little.
  const double w = 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  y = run_node("Cast", {Tensor::from_vector<double>({1}, {w})}, {attr_int("to", int64_t(DType::kBFloat16))});
  EXPECT_TRUE(all_close(y[0], {1}, {1.0078125}, 0, 0));
}

TEST(ElementwiseCast, ToStringMatchesNumpy) {
  struct Case {
    DType dt;
    std::vector<double> values;
    std::vector<std::string> expect;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {DType::kFloat32,
       {0.9767611, 123456789.0, 1e16, 1e15, 0.0001, 0.00012345, 1e-5, 3.4e38, 1.0, -0.0, 100.0, -2.5, 1e-45,
        16777216.0, 0.1, 1.0 / 3, 7e-5, 9.999999e15, inf, -inf, std::nan("")},
       {"0.9767611", "123456790.0", "1e+16", "1000000000000000.0", "1e-04", "0.00012345", "1e-05", "3.4e+38", "1.0",
        "-0.0", "100.0", "-2.5", "1e-45", "16777216.0", "0.1", "0.33333334", "7e-05", "9999999000000000.0", "inf",
        "-inf", "nan"}},
      {DType::kFloat64,
       {0.1, 1.0 / 3, 1e16, 123456789.0, 1e-5, 5e-324, 2.5, -1e300},
       {"0.1", "0.3333333333333333", "1e+16", "123456789.0", "1e-05", "5e-324", "2.5", "-1e+300"}},
      {DType::kFloat16,
       {65504.0, 0.1, 1.0 / 3, 1e-4, 6e-8, 2.5, 1000.0, 0.0001234},
       {"65500.0", "0.1", "0.3333", "0.0001", "6e-08", "2.5", "1000.0", "0.0001234"}},
      {DType::kInt64, {-5, 0, 1e15}, {"-5", "0", "1000000000000000"}},
      {DType::kUInt8, {0, 255}, {"0", "255"}},
      {DType::kBool, {1, 0}, {"True", "False"}},
  };
  for (const auto& c : cases) {
    Tensor x = from_double(c.dt, {int64_t(c.values.size())}, c.values);
    for (bool constants : {false, true}) {
      auto y = run_node("Cast", {x}, {attr_int("to", int64_t(DType::kString))}, opts(constants))[0];
      ASSERT_EQ(y.dtype(), DType::kString);
      for (size_t i = 0; i < c.expect.size(); ++i)
        EXPECT_EQ(y.data<std::string>()[i], c.expect[i]) << dtype_name(c.dt) << " value " << c.values[i];
    }
  }
}

TEST(ElementwiseCast, FromString) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Tensor s = Tensor::from_vector<std::string>(
      {9}, {"0.47892547", "NaN", "INF", "+INF", "-INF", " 2.5 ", "-1e3", "infinity", "1e-45"});
  const std::vector<double> e = {0.47892547, nan, inf, inf, -inf, 2.5, -1000, inf, 1e-45};
  for (DType to : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    std::vector<double> ee;
    for (double v : e) ee.push_back(cast_ref(v, to));
    for (bool constants : {false, true})
      EXPECT_TRUE(all_close(run_node("Cast", {s}, {attr_int("to", int64_t(to))}, opts(constants))[0], {9}, ee, 0, 0))
          << dtype_name(to);
  }
  Tensor ints = Tensor::from_vector<std::string>({5}, {"42", "-7", "+3", "2.9", "1e3"});
  EXPECT_TRUE(all_close(run_node("Cast", {ints}, {attr_int("to", int64_t(DType::kInt32))})[0], {5}, {42, -7, 3, 2, 1000},
                        0, 0));
  Tensor bools = Tensor::from_vector<std::string>({4}, {"True", "False", "0", "2"});
  EXPECT_TRUE(all_close(run_node("Cast", {bools}, {attr_int("to", int64_t(DType::kBool))})[0], {4}, {1, 0, 0, 1}, 0, 0));
  // Round trip float -> string -> float is exact.
  std::mt19937 rng(3100);
  Tensor x = random_tensor(DType::kFloat32, {50}, rng, -1e6, 1e6);
  auto str = run_node("Cast", {x}, {attr_int("to", int64_t(DType::kString))})[0];
  EXPECT_TRUE(all_close(run_node("Cast", {str}, {attr_int("to", int64_t(DType::kFloat32))})[0], {50}, to_double(x), 0, 0));
  // String to string copies.
  auto same = run_node("Cast", {s}, {attr_int("to", int64_t(DType::kString))})[0];
  EXPECT_EQ(same.data<std::string>()[5], " 2.5 ");
}

TEST(ElementwiseCast, ErrorsNameNode) {
  Tensor bad = Tensor::from_vector<std::string>({2}, {"1.5", "abc"});
  for (DType to : {DType::kFloat32, DType::kInt64, DType::kBool})
    expect_error<onnxtrain::InvalidArgument>([&] { run_node("Cast", {bad}, {attr_int("to", int64_t(to))}); }, "Cast",
                                             {"'abc'"});
  expect_error<onnxtrain::NotImplemented>(
      [] { run_node("Cast", {Tensor::zeros(DType::kFloat32, {2})}, {attr_int("to", int64_t(DType::kComplex64))}); },
      "Cast", {"complex64"});
  expect_error<onnxtrain::InvalidModel>([] { run_node("Cast", {Tensor::zeros(DType::kFloat32, {2})}); }, "Cast",
                                        {"to"});
}

TEST(ElementwiseCast, Opset1TypeNames) {
  Tensor x = Tensor::from_vector<float>({3}, {1.5f, -2.5f, 0});
  auto y = run_node("Cast", {x}, {attr_string("to", "INT32")}, opts(false, 1, 1))[0];
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_TRUE(all_close(y, {3}, {1, -2, 0}, 0, 0));
  expect_error<onnxtrain::InvalidModel>([&] { run_node("Cast", {x}, {attr_string("to", "REAL")}, opts(false, 1, 1)); },
                                        "Cast", {"REAL"});
}

TEST(ElementwiseCast, SameTypeIsACopy) {
  Tensor x = Tensor::from_vector<int64_t>({3}, {1, 2, 3});
  for (bool constants : {false, true}) {
    auto y = run_node("Cast", {x}, {attr_int("to", int64_t(DType::kInt64))}, opts(constants))[0];
    EXPECT_TRUE(all_close(y, {3}, {1, 2, 3}, 0, 0));
  }
}
