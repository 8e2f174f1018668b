// Reductions, ArgMax/ArgMin, CumSum, the softmax family and TopK against naive double-precision
// references on random shapes (fixed seeds, printed on failure).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "test_util.h"

using namespace ot_test;
using onnxtrain::shape_numel;
using onnxtrain::shape_to_string;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Shape random_shape(std::mt19937& rng, int max_rank = 4, int max_dim = 5, bool allow_zero = false) {
  Shape s(size_t(std::uniform_int_distribution<int>(0, max_rank)(rng)));
  for (auto& d : s) d = std::uniform_int_distribution<int>(allow_zero && rng() % 8 == 0 ? 0 : 1, max_dim)(rng);
  return s;
}

std::string str(const std::vector<int64_t>& v) { return shape_to_string(v); }

// Keeps the dims of `s` whose mask bit is clear (or sets them to 1 with keepdims).
Shape reduced_shape(const Shape& s, const std::vector<bool>& mask, bool keepdims) {
  Shape r;
  for (size_t i = 0; i < s.size(); ++i)
    if (!mask[i])
      r.push_back(s[i]);
    else if (keepdims)
      r.push_back(1);
  return r;
}

// Groups x's values by output position (reduced dims dropped), in input order.
std::vector<std::vector<double>> buckets(const std::vector<double>& x, const Shape& s, const std::vector<bool>& mask) {
  const Shape ks = reduced_shape(s, mask, true);
  std::vector<std::vector<double>> b(size_t(shape_numel(ks)));
  for (size_t i = 0; i < x.size(); ++i) {
    auto idx = unravel(int64_t(i), s);
    for (size_t d = 0; d < s.size(); ++d)
      if (mask[d]) idx[d] = 0;
    b[size_t(ravel(idx, ks))].push_back(x[i]);
  }
  return b;
}

double ref_reduce(const std::string& op, const std::vector<double>& v) {
  const double n = double(v.size());
  double s = 0;
  if (op == "ReduceMax" || op == "ReduceMin") {
    const bool mx = op == "ReduceMax";
    double m = mx ? -kInf : kInf;
    for (double x : v) {
      if (std::isnan(x)) return kNaN;
      m = mx ? std::max(m, x) : std::min(m, x);
    }
    return m;
  }
  if (op == "ReduceProd") {
    double p = 1;
    for (double x : v) p *= x;
    return p;
  }
  if (op == "ReduceLogSumExp") {
    for (double x : v) s += std::exp(x);
    return std::log(s);
  }
  for (double x : v) s += op == "ReduceL1" ? std::fabs(x) : (op == "ReduceL2" || op == "ReduceSumSquare") ? x * x : x;
  if (op == "ReduceMean") return s / n;
  if (op == "ReduceL2") return std::sqrt(s);
  if (op == "ReduceLogSum") return std::log(s);
  return s;
}

const std::vector<std::string> kReduceOps = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                             "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                                             "ReduceLogSumExp"};

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> axes;  // as given to the node (may be negative; empty: all)
  bool keepdims = true;
  bool axes_as_input = false;
};

// Runs `op` on x; the opset follows where axes live (ReduceSum: input from 13; others from 18).
std::vector<Tensor> run_reduce(const std::string& op, const Tensor& x, const ReduceCase& c, RunOptions o,
                               std::vector<ir::Attribute> attrs = {}) {
  attrs.push_back(attr_int("keepdims", c.keepdims));
  std::vector<Tensor> ins{x};
  if (c.axes_as_input) {
    o.opset = op == "ReduceSum" ? 13 : 18;
    ins.push_back(Tensor::from_vector<int64_t>({int64_t(c.axes.size())}, c.axes));
  } else {
    o.opset = op == "ReduceSum" ? 12 : 17;
    if (!c.axes.empty()) attrs.push_back(attr_ints("axes", c.axes));
  }
  return run_node(op, ins, attrs, o);
}

void check_reduce(const std::string& op, DType dt, uint32_t seed, int trials, double rtol, double atol) {
  std::mt19937 rng(seed);
  double lo = onnxtrain::dtype_is_signed(dt) ? -2 : 0, hi = 2;
  if (op == "ReduceProd") lo = 0.5, hi = 1.5;
  if (op == "ReduceLogSum") lo = 0.1, hi = 1;
  for (int trial = 0; trial < trials; ++trial) {
    ReduceCase c;
    c.shape = random_shape(rng, 4, 5, onnxtrain::dtype_is_float(dt) && op != "ReduceLogSum");
    const size_t rank = c.shape.size();
    std::vector<bool> mask(rank, false);
    for (size_t d = 0; d < rank; ++d)
      if (rng() % 2) {
        mask[d] = true;
        c.axes.push_back(rng() % 2 ? int64_t(d) - int64_t(rank) : int64_t(d));
      }
    std::shuffle(c.axes.begin(), c.axes.end(), rng);
    if (c.axes.empty()) mask.assign(rank, true);  // empty axes: reduce everything
    c.keepdims = rng() % 2;
    c.axes_as_input = rng() % 2;
    Tensor x = random_tensor(dt, c.shape, rng, lo, hi);
    auto xv = to_double(x);
    std::vector<double> expect;
    for (const auto& b : buckets(xv, c.shape, mask)) {
      double r = ref_reduce(op, b);
      if (!onnxtrain::dtype_is_float(dt)) r = std::isnan(r) ? 0 : std::trunc(r);
      expect.push_back(r);
    }
    RunOptions o;
    o.inputs_as_constants = trial % 3 == 0;
    o.threads = trial % 2 ? 2 : 1;
    auto y = run_reduce(op, x, c, o);
    EXPECT_TRUE(all_close(y[0], reduced_shape(c.shape, mask, c.keepdims), expect, rtol, atol))
        << op << " " << onnxtrain::dtype_name(dt) << " x" << shape_to_string(c.shape) << " axes " << str(c.axes)
        << " keepdims " << c.keepdims << " axes_input " << c.axes_as_input << " seed " << seed << " trial " << trial;
  }
}

}  // namespace

TEST(Reduce, AllOpsFloatRandomShapes) {
  uint32_t seed = 100;
  for (const auto& op : kReduceOps) check_reduce(op, DType::kFloat32, seed++, 40, op == "ReduceProd" ? 1e-4 : 1e-5, 1e-5);
}

TEST(Reduce, AllOpsDoubleRandomShapes) {
  uint32_t seed = 200;
  for (const auto& op : kReduceOps) check_reduce(op, DType::kFloat64, seed++, 15, 1e-12, 1e-12);
}

TEST(Reduce, IntegerTypes) {
  check_reduce("ReduceSum", DType::kInt32, 301, 20, 0, 0);
  check_reduce("ReduceSum", DType::kInt64, 302, 20, 0, 0);
  check_reduce("ReduceMax", DType::kInt8, 303, 20, 0, 0);
  check_reduce("ReduceMin", DType::kUInt32, 304, 20, 0, 0);
  check_reduce("ReduceMean", DType::kInt64, 305, 20, 0, 0);
  check_reduce("ReduceSumSquare", DType::kInt32, 306, 20, 0, 0);
  check_reduce("ReduceL1", DType::kInt64, 307, 20, 0, 0);
}

// Integer means divide exactly (truncating toward zero, as onnxruntime): a float64 quotient loses
// the low bits past 2^53 and, at INT64_MAX, overflowed its conversion back (a fuzz finding).
TEST(Reduce, IntegerMeanIsExactNearTheLimits) {
  const int64_t big = int64_t(1) << 60;
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {
      {{INT64_MAX}, INT64_MAX}, {{INT64_MIN}, INT64_MIN}, {{big + 1, big + 3}, big + 2}, {{-7, -8}, -7}, {{7, 8}, 7}};
  for (const auto& [values, mean] : cases) {
    ReduceCase c;
    c.shape = {int64_t(values.size())};
    c.keepdims = false;
    auto y = run_reduce("ReduceMean", Tensor::from_vector<int64_t>(c.shape, values), c, RunOptions{});
    ASSERT_EQ(y[0].numel(), 1);
    EXPECT_EQ(y[0].data<int64_t>()[0], mean) << str(values);
  }
}

TEST(Reduce, HalfTypesAccumulateInFloat) {
  check_reduce("ReduceSum", DType::kFloat16, 401, 15, 2e-3, 2e-3);
  check_reduce("ReduceMean", DType::kBFloat16, 402, 15, 1e-2, 1e-2);
  check_reduce("ReduceMax", DType::kFloat16, 403, 15, 0, 0);
}

// Long rows and columns exercise the lanes, the float32 partials folded into float64, tails and
// the general (non-contiguous) walk.
TEST(Reduce, LargeShapesAllLayouts) {
  std::mt19937 rng(500);
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{3, 5001}, {1}}, {{5001, 3}, {0}}, {{37, 3, 300}, {0, 2}}, {{4, 300, 7}, {1}}, {{2, 3, 4, 5, 6}, {0, 2, 4}},
      {{70000}, {}},    {{3, 600, 2}, {0, 1}}};
  for (const auto& [shape, axes] : cases)
    for (const std::string op : {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp"}) {
      Tensor x = random_tensor(DType::kFloat32, shape, rng, -2, 2);
      std::vector<bool> mask(shape.size(), axes.empty());
      for (int64_t a : axes) mask[size_t(a)] = true;
      std::vector<double> expect;
      for (const auto& b : buckets(to_double(x), shape, mask)) expect.push_back(ref_reduce(op, b));
      RunOptions o;
      o.threads = 2;
      auto y = run_reduce(op, x, {shape, axes, false, false}, o);
      EXPECT_TRUE(all_close(y[0], reduced_shape(shape, mask, false), expect, 2e-6, 1e-5))
          << op << " x" << shape_to_string(shape) << " axes " << str(axes) << " seed 500";
    }
}

TEST(Reduce, Float32SumsKeepFloat64Accuracy) {
  // 2^22 values of 1 + 2^-20 each: float32 sequential sums drift; the folded partials must not.
  const int64_t n = int64_t(1) << 22;
  Tensor x = Tensor::empty(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = 1.0f + 0x1p-20f;
  const double expect = double(n) * (1.0 + 0x1p-20);
  for (int64_t cols : {1, 4}) {  // one row; four columns
    Tensor xi = x.reshaped({n / cols, cols});
    auto y = run_reduce("ReduceSum", xi, {xi.shape(), {0}, false, true}, {});
    for (double v : to_double(y[0])) EXPECT_NEAR(v, expect / double(cols), expect * 1e-8) << cols << " columns";
  }
}

TEST(Reduce, EmptyReductions) {
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 0, 3});
  const std::vector<std::pair<std::string, double>> expect = {
      {"ReduceSum", 0},        {"ReduceMean", kNaN},      {"ReduceMax", -kInf}, {"ReduceMin", kInf},
      {"ReduceProd", 1},       {"ReduceL1", 0},           {"ReduceL2", 0},      {"ReduceSumSquare", 0},
      {"ReduceLogSum", -kInf}, {"ReduceLogSumExp", -kInf}};
  for (const auto& [op, v] : expect) {
    auto y = run_reduce(op, x, {x.shape(), {1}, true, false}, {});
    EXPECT_TRUE(all_close(y[0], {2, 1, 3}, std::vector<double>(6, v))) << op;
  }
  // Reducing a kept zero-size dim's partner: empty output.
  auto y = run_reduce("ReduceSum", x, {x.shape(), {2}, false, true}, {});
  EXPECT_EQ(y[0].shape(), (Shape{2, 0}));
  Tensor xi = Tensor::zeros(DType::kInt32, {0, 4});
  y = run_reduce("ReduceMax", xi, {xi.shape(), {0}, false, false}, {});
  EXPECT_TRUE(all_close(y[0], {4}, std::vector<double>(4, double(std::numeric_limits<int32_t>::lowest()))));
}

TEST(Reduce, NaNPropagatesThroughMinMax) {
  std::vector<float> v(100, 1.0f);
  v[37] = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({2, 50}, v);
  for (const std::string op : {"ReduceMax", "ReduceMin"})
    for (int64_t axis : {0, 1}) {
      auto y = run_reduce(op, x, {x.shape(), {axis}, false, false}, {});
      auto r = to_double(y[0]);
      for (size_t i = 0; i < r.size(); ++i)
        EXPECT_EQ(std::isnan(r[i]), axis == 1 ? i == 0 : i == 37) << op << " axis " << axis << " [" << i << "]";
    }
  // Tall columns: NaN in a row group of four, past the first partial block.
  std::vector<double> t(45 * 3, 1.0);
  t[41 * 3 + 1] = std::numeric_limits<double>::quiet_NaN();
  for (const std::string op : {"ReduceMax", "ReduceMin"}) {
    Tensor tall = from_double(DType::kFloat32, {45, 3}, t);
    auto y = run_reduce(op, tall, {tall.shape(), {0}, false, false}, {});
    EXPECT_TRUE(all_close(y[0], {3}, {1.0, kNaN, 1.0})) << op;
  }
}

TEST(Reduce, LogSumExpIsStable) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1000, 1000, 1000, -1000, -1e30f, -1000});
  auto y = run_reduce("ReduceLogSumExp", x, {x.shape(), {1}, false, false}, {});
  EXPECT_TRUE(all_close(y[0], {2}, {1000 + std::log(3.0), -1000 + std::log(2.0)}, 1e-6, 1e-4));
  Tensor inf = Tensor::from_vector<float>({2}, {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()});
  y = run_reduce("ReduceLogSumExp", inf, {inf.shape(), {}, false, false}, {});
  EXPECT_TRUE(all_close(y[0], {}, {-kInf}));
}

TEST(Reduce, NoopWithEmptyAxes) {
  std::mt19937 rng(600);
  Tensor x = random_tensor(DType::kFloat32, {3, 4}, rng);
  for (bool constants : {false, true}) {
    RunOptions o;
    o.inputs_as_constants = constants;
    auto y = run_reduce("ReduceSum", x, {x.shape(), {}, true, true}, o, {attr_int("noop_with_empty_axes", 1)});
    EXPECT_TRUE(all_close(y[0], {3, 4}, to_double(x), 0, 0));
    y = run_reduce("ReduceSum", x, {x.shape(), {}, false, true}, o);  // without noop: everything
    EXPECT_TRUE(all_close(y[0], {}, {ref_reduce("ReduceSum", to_double(x))}, 1e-6, 1e-6));
  }
}

namespace ot_test {
// What f throws as "<error class>: <message>" ("" when nothing). Also used by test_norm and test_loss.
std::string thrown_by(const std::function<void()>& f) {
  try {
    f();
  } catch (const onnxtrain::Error& e) {
    const char* kind = e.code() == onnxtrain::ErrorCode::kInvalidArgument ? "InvalidArgument"
                       : e.code() == onnxtrain::ErrorCode::kNotImplemented ? "NotImplemented"
                       : e.code() == onnxtrain::ErrorCode::kInvalidModel   ? "InvalidModel"
                                                                           : "Error";
    return std::string(kind) + ": " + e.what();
  }
  return "";
}
}  // namespace ot_test

namespace {
void expect_error(const std::function<void()>& f, const std::string& node, const std::string& what,
                  const std::string& kind = "InvalidArgument") {
  const std::string m = thrown_by(f);
  EXPECT_EQ(m.rfind(kind + ": ", 0), 0u) << "expected " << kind << ", got '" << m << "'";
  EXPECT_NE(m.find(node), std::string::npos) << m;
  EXPECT_NE(m.find(what), std::string::npos) << m;
}
}  // namespace

TEST(Reduce, BadAxesNameTheNode) {
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  expect_error([&] { run_reduce("ReduceMean", x, {x.shape(), {2}, true, false}, {}); }, "node_ReduceMean", "out of range");
  expect_error([&] { run_reduce("ReduceSum", x, {x.shape(), {1, -1}, true, true}, {}); }, "node_ReduceSum", "twice");
  RunOptions o;
  o.opset = 13;
  expect_error([&] { run_node("ReduceSum", {x, Tensor::zeros(DType::kFloat32, {1})}, {}, o); }, "node_ReduceSum",
               "int32 or int64");
  expect_error([&] { run_node("ReduceSum", {Tensor::zeros(DType::kBool, {2})}, {}, o); }, "node_ReduceSum", "bool",
               "NotImplemented");
}

// ---------------------------------------------------------------- ArgMax / ArgMin
TEST(Reduce, ArgMaxArgMinTiesAndOptions) {
  std::mt19937 rng(700);
  for (int trial = 0; trial < 60; ++trial) {
    Shape s = random_shape(rng, 4, 6);
    if (s.empty()) s = {4};
    const bool is_max = trial % 2, keepdims = rng() % 2, last = rng() % 2;
    const int64_t rank = int64_t(s.size());
    const int64_t axis = int64_t(rng() % uint32_t(rank)) - (rng() % 2 ? rank : 0);
    const int64_t a = axis < 0 ? axis + rank : axis;
    Tensor x = random_tensor(trial % 3 ? DType::kFloat32 : DType::kInt32, s, rng, -2, 2);  // few values: ties
    if (x.dtype() == DType::kFloat32)
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::round(x.data<float>()[i]);
    auto xv = to_double(x);
    Shape ks = s;
    ks[size_t(a)] = 1;
    std::vector<double> expect(size_t(shape_numel(ks)));
    for (size_t o = 0; o < expect.size(); ++o) {
      auto idx = unravel(int64_t(o), ks);
      int64_t best = 0;
      for (int64_t j = 0; j < s[size_t(a)]; ++j) {
        idx[size_t(a)] = j;
        const double v = xv[size_t(ravel(idx, s))];
        idx[size_t(a)] = best;
        const double b = xv[size_t(ravel(idx, s))];
        if (is_max ? (v > b || (last && v == b)) : (v < b || (last && v == b))) best = j;
      }
      expect[o] = double(best);
    }
    Shape out = keepdims ? ks : reduced_shape(s, [&] {
      std::vector<bool> m(s.size(), false);
      m[size_t(a)] = true;
      return m;
    }(), false);
    RunOptions o;
    o.inputs_as_constants = trial % 4 == 0;
    o.threads = 1 + trial % 2;
    auto y = run_node(is_max ? "ArgMax" : "ArgMin", {x},
                      {attr_int("axis", axis), attr_int("keepdims", keepdims), attr_int("select_last_index", last)}, o);
    EXPECT_EQ(y[0].dtype(), DType::kInt64);
    EXPECT_TRUE(all_close(y[0], out, expect, 0, 0))
        << (is_max ? "ArgMax" : "ArgMin") << " x" << shape_to_string(s) << " axis " << axis << " last " << last
        << " seed 700 trial " << trial;
  }
}

TEST(Reduce, ArgMaxEmptyAxisFails) {
  expect_error([&] { run_node("ArgMax", {Tensor::zeros(DType::kFloat32, {0, 3})}); }, "node_ArgMax", "empty");
}

// ---------------------------------------------------------------- CumSum
TEST(Reduce, CumSumRandom) {
  std::mt19937 rng(800);
  for (int trial = 0; trial < 60; ++trial) {
    Shape s = random_shape(rng, 4, 6);
    if (s.empty()) s = {5};
    if (trial == 0) s = {3, 700};  // inner blocks of 256
    const int64_t rank = int64_t(s.size());
    const int64_t axis = int64_t(rng() % uint32_t(rank)) - (rng() % 2 ? rank : 0), a = axis < 0 ? axis + rank : axis;
    const bool exclusive = rng() % 2, reverse = rng() % 2;
    const DType dt = trial % 3 == 0 ? DType::kInt64 : trial % 3 == 1 ? DType::kFloat32 : DType::kFloat64;
    Tensor x = random_tensor(dt, s, rng, -5, 5);
    auto xv = to_double(x);
    std::vector<double> expect(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      auto idx = unravel(int64_t(i), s);
      const int64_t p = idx[size_t(a)];
      double acc = 0;
      for (int64_t j = 0; j < s[size_t(a)]; ++j) {
        if (reverse ? (j < p || (exclusive && j == p)) : (j > p || (exclusive && j == p))) continue;
        idx[size_t(a)] = j;
        acc += xv[size_t(ravel(idx, s))];
      }
      expect[i] = acc;
    }
    Tensor ax = trial % 2 ? Tensor::scalar<int32_t>(int32_t(axis)) : Tensor::scalar<int64_t>(axis);
    RunOptions o;
    o.inputs_as_constants = trial % 4 == 0;
    o.threads = 1 + trial % 2;
    auto y = run_node("CumSum", {x, ax}, {attr_int("exclusive", exclusive), attr_int("reverse", reverse)}, o);
    EXPECT_TRUE(all_close(y[0], s, expect, 1e-5, 1e-5))
        << "x" << shape_to_string(s) << " axis " << axis << " exclusive " << exclusive << " reverse " << reverse
        << " seed 800 trial " << trial;
  }
}

TEST(Reduce, CumSumBadAxisNamesNode) {
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  expect_error([&] { run_node("CumSum", {x, Tensor::scalar<int64_t>(2)}); }, "node_CumSum", "out of range");
  expect_error([&] { run_node("CumSum", {x, Tensor::scalar<float>(0)}); }, "node_CumSum", "int32 or int64");
}

// ---------------------------------------------------------------- Softmax family
namespace {
int64_t prod(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

// [outer, n, inner] around `axis` (opset >= 13) or the 2-D coercion (opset < 13).
void check_softmax(const std::string& op, int64_t opset, DType dt, uint32_t seed, double tol) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    Shape s = random_shape(rng, 4, 7);
    if (s.empty()) s = {3};
    if (trial == 0) s = {3, 1000};  // long rows: vector body and tail
    if (trial == 1) s = {5, 300, 3};
    const int64_t rank = int64_t(s.size());
    int64_t axis = int64_t(rng() % uint32_t(rank)) - (rng() % 2 ? rank : 0);
    if (trial == 1) axis = 1;
    const int64_t a = axis < 0 ? axis + rank : axis;
    const int64_t outer = prod(s, 0, size_t(a));
    const int64_t n = opset < 13 ? prod(s, size_t(a), s.size()) : s[size_t(a)];
    const int64_t inner = opset < 13 ? 1 : prod(s, size_t(a) + 1, s.size());
    Tensor x = random_tensor(dt, s, rng, -30, 30);
    if (trial == 2) x = from_double(dt, s, std::vector<double>(size_t(x.numel()), 1e4));  // ties, large values
    auto xv = to_double(x);
    std::vector<double> expect(xv.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto at = [&](int64_t j) { return size_t((o * n + j) * inner + i); };
        double m = -kInf, sum = 0;
        int64_t best = 0;
        for (int64_t j = 0; j < n; ++j) {
          if (xv[at(j)] > m) best = j;
          m = std::max(m, xv[at(j)]);
        }
        for (int64_t j = 0; j < n; ++j) sum += std::exp(xv[at(j)] - m);
        for (int64_t j = 0; j < n; ++j)
          expect[at(j)] = op == "Softmax"      ? std::exp(xv[at(j)] - m) / sum
                          : op == "LogSoftmax" ? xv[at(j)] - m - std::log(sum)
                                               : double(j == best);
      }
    RunOptions o;
    o.opset = opset;
    o.inputs_as_constants = trial % 4 == 0;
    o.threads = 1 + trial % 2;
    auto y = run_node(op, {x}, {attr_int("axis", axis)}, o);
    EXPECT_TRUE(all_close(y[0], s, expect, tol, tol))
        << op << " opset " << opset << " x" << shape_to_string(s) << " axis " << axis << " seed " << seed << " trial " << trial;
  }
}
}  // namespace

TEST(Softmax, Opset13AnyAxis) {
  check_softmax("Softmax", 13, DType::kFloat32, 900, 1e-5);
  check_softmax("LogSoftmax", 13, DType::kFloat32, 901, 1e-5);
  check_softmax("Hardmax", 13, DType::kFloat32, 902, 0);
}

TEST(Softmax, Opset11CoercesTo2D) {
  check_softmax("Softmax", 11, DType::kFloat32, 910, 1e-5);
  check_softmax("LogSoftmax", 11, DType::kFloat32, 911, 1e-5);
  check_softmax("Hardmax", 11, DType::kFloat32, 912, 0);
}

TEST(Softmax, OtherFloatTypes) {
  check_softmax("Softmax", 13, DType::kFloat64, 920, 1e-12);
  check_softmax("LogSoftmax", 13, DType::kFloat64, 921, 1e-12);
  check_softmax("Softmax", 13, DType::kFloat16, 922, 2e-3);
  check_softmax("LogSoftmax", 13, DType::kBFloat16, 923, 0.3);
}

TEST(Softmax, ExtremeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector<float>({3, 3}, {-inf, 0, -inf, 1e30f, -1e30f, 0, -inf, -inf, -inf});
  auto y = run_node("Softmax", {x}, {attr_int("axis", 1)});
  // A row of -inf has no maximum to subtract: NaN, as in numpy and torch.
  EXPECT_TRUE(all_close(y[0], {3, 3}, {0, 1, 0, 1, 0, 0, kNaN, kNaN, kNaN}, 1e-6, 1e-7));
  y = run_node("LogSoftmax", {x}, {attr_int("axis", 1)});
  EXPECT_TRUE(all_close(y[0], {3, 3}, {-kInf, 0, -kInf, 0, -2e30, -1e30, kNaN, kNaN, kNaN}, 1e-6, 1e-6));
}

TEST(Softmax, BadAxisNamesNode) {
  expect_error([&] { run_node("Softmax", {Tensor::zeros(DType::kFloat32, {2, 3})}, {attr_int("axis", 2)}); },
               "node_Softmax", "out of range");
  expect_error([&] { run_node("Softmax", {Tensor::zeros(DType::kInt32, {2})}); }, "node_Softmax", "int32",
               "NotImplemented");
}

// ---------------------------------------------------------------- TopK
TEST(Reduce, TopKRandomWithTies) {
  std::mt19937 rng(1000);
  for (int trial = 0; trial < 60; ++trial) {
    Shape s = random_shape(rng, 3, 8);
    if (s.empty()) s = {6};
    if (trial == 0) s = {2, 500};
    const int64_t rank = int64_t(s.size());
    const int64_t axis = int64_t(rng() % uint32_t(rank)) - (rng() % 2 ? rank : 0), a = axis < 0 ? axis + rank : axis;
    const int64_t k = std::uniform_int_distribution<int64_t>(0, s[size_t(a)])(rng);
    const bool largest = rng() % 2;
    const int64_t opset = trial % 3 == 0 ? 1 : trial % 3 == 1 ? 10 : 11;
    Tensor x = random_tensor(trial % 2 ? DType::kFloat32 : DType::kInt64, s, rng, -3, 3);
    if (x.dtype() == DType::kFloat32)
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::round(x.data<float>()[i] * 2) / 2;
    auto xv = to_double(x);
    Shape os = s;
    os[size_t(a)] = k;
    std::vector<double> ev(size_t(shape_numel(os))), ei(ev.size());
    for (size_t o = 0; o < ev.size(); ++o) {
      auto idx = unravel(int64_t(o), os);
      if (idx[size_t(a)] != 0) continue;
      std::vector<int64_t> order(static_cast<size_t>(s[size_t(a)]));
      std::iota(order.begin(), order.end(), 0);
      auto val = [&](int64_t j) {
        auto t = idx;
        t[size_t(a)] = j;
        return xv[size_t(ravel(t, s))];
      };
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
        return (opset < 11 || largest) ? val(p) > val(q) : val(p) < val(q);
      });
      for (int64_t j = 0; j < k; ++j) {
        idx[size_t(a)] = j;
        ev[size_t(ravel(idx, os))] = val(order[size_t(j)]);
        ei[size_t(ravel(idx, os))] = double(order[size_t(j)]);
      }
    }
    RunOptions o;
    o.opset = opset;
    o.num_outputs = 2;
    o.inputs_as_constants = trial % 4 == 0;
    o.threads = 1 + trial % 2;
    std::vector<ir::Attribute> attrs{attr_int("axis", axis)};
    std::vector<Tensor> ins{x};
    if (opset == 1)
      attrs.push_back(attr_int("k", k));
    else
      ins.push_back(Tensor::from_vector<int64_t>({1}, {k}));
    if (opset >= 11) attrs.push_back(attr_int("largest", largest));
    auto y = run_node("TopK", ins, attrs, o);
    const std::string what = "TopK opset " + std::to_string(opset) + " x" + shape_to_string(s) + " axis " +
                             std::to_string(axis) + " k " + std::to_string(k) + " largest " +
                             std::to_string(largest) + " seed 1000 trial " + std::to_string(trial);
    EXPECT_TRUE(all_close(y[0], os, ev, 0, 0)) << what;
    EXPECT_TRUE(all_close(y[1], os, ei, 0, 0)) << what;
  }
}

TEST(Reduce, TopKBadKNamesNode) {
  RunOptions o;
  o.opset = 11;
  o.num_outputs = 2;
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  expect_error([&] { run_node("TopK", {x, Tensor::from_vector<int64_t>({1}, {4})}, {}, o); }, "node_TopK", "out of range");
  expect_error([&] { run_node("TopK", {x, Tensor::from_vector<int64_t>({1}, {-1})}, {}, o); }, "node_TopK", "out of range");
}
