// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss against a naive double-precision
// reference on random [N, C, d1, ...] shapes (fixed seeds, printed on failure).
#include <cmath>
#include <functional>

#include "test_util.h"

namespace ot_test {
std::string thrown_by(const std::function<void()>& f);  // test_reduce.cpp
}

using namespace ot_test;
using onnxtrain::shape_numel;
using onnxtrain::shape_to_string;

namespace {

struct LossCase {
  Shape shape;  // [N, C, d...]
  bool weights = false, ignore = false;
  int64_t ignore_index = 0;
  std::string reduction = "mean";
};

// Reference: per-position loss -x[n, t, d] * w[t] (x: log-probabilities) and the reduction.
std::vector<double> ref_loss(const LossCase& c, const std::vector<double>& logp, const std::vector<int64_t>& t,
                             const std::vector<double>& w) {
  const int64_t C = c.shape[1], D = shape_numel(c.shape) / c.shape[0] / C;
  std::vector<double> l(t.size());
  double total = 0, wsum = 0;
  for (size_t p = 0; p < t.size(); ++p) {
    const int64_t n = int64_t(p) / D, d = int64_t(p) % D;
    const bool ignored = c.ignore && t[p] == c.ignore_index;
    const double wt = ignored ? 0 : c.weights ? w[size_t(t[p])] : 1;
    l[p] = ignored ? 0 : -logp[size_t((n * C + t[p]) * D + d)] * wt;
    total += l[p];
    wsum += wt;
  }
  if (c.reduction == "none") return l;
  return {c.reduction == "sum" ? total : total / wsum};
}

std::vector<double> log_softmax_axis1(const std::vector<double>& x, const Shape& s) {
  const int64_t C = s[1], D = shape_numel(s) / s[0] / C;
  std::vector<double> r(x.size());
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t d = 0; d < D; ++d) {
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, x[size_t((n * C + c) * D + d)]);
      for (int64_t c = 0; c < C; ++c) sum += std::exp(x[size_t((n * C + c) * D + d)] - m);
      for (int64_t c = 0; c < C; ++c) r[size_t((n * C + c) * D + d)] = x[size_t((n * C + c) * D + d)] - m - std::log(sum);
    }
  return r;
}

void check_loss(bool softmax, uint32_t seed) {
  const std::string op = softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss";
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    LossCase c;
    c.shape = {1 + int64_t(rng() % 4), 1 + int64_t(rng() % 6)};
    for (int k = int(rng() % 4); k > 0; --k) c.shape.push_back(1 + int64_t(rng() % 4));
    c.weights = rng() % 2;
    c.ignore = rng() % 2;
    c.ignore_index = rng() % 2 ? -1 - int64_t(rng() % 3) : int64_t(rng() % uint32_t(c.shape[1] + 3));
    c.reduction = std::vector<std::string>{"none", "sum", "mean"}[rng() % 3];
    const int64_t C = c.shape[1];
    Shape ts = c.shape;
    ts.erase(ts.begin() + 1);
    const DType dt = trial % 4 == 3 ? DType::kFloat64 : DType::kFloat32;
    Tensor x = random_tensor(dt, c.shape, rng, softmax ? -4 : -3, softmax ? 4 : 0);
    std::vector<int64_t> t(size_t(shape_numel(ts)));
    for (auto& v : t) v = c.ignore && rng() % 4 == 0 ? c.ignore_index : int64_t(rng() % uint32_t(C));
    Tensor w = random_tensor(dt, {C}, rng, 0.1, 2);
    auto xv = to_double(x);
    auto logp = softmax ? log_softmax_axis1(xv, c.shape) : xv;
    auto expect = ref_loss(c, logp, t, to_double(w));
    std::vector<ir::Attribute> attrs{attr_string("reduction", c.reduction)};
    if (c.ignore) attrs.push_back(attr_int("ignore_index", c.ignore_index));
    Tensor labels = trial % 2 ? Tensor::from_vector<int64_t>(ts, t) : [&] {
      std::vector<int32_t> t32(t.begin(), t.end());
      return Tensor::from_vector<int32_t>(ts, t32);
    }();
    RunOptions o;
    o.opset = trial % 3 ? 13 : 12;
    o.num_outputs = softmax && trial % 2 ? 2 : 1;
    o.inputs_as_constants = trial % 5 == 0;
    o.threads = 1 + trial % 2;
    auto out = run_node(op, {x, labels, c.weights ? w : Tensor()}, attrs, o);
    const std::string what = op + " x" + shape_to_string(c.shape) + " weights " + std::to_string(c.weights) +
                             " ignore " + std::to_string(c.ignore) + " (" + std::to_string(c.ignore_index) + ") " +
                             c.reduction + " seed " + std::to_string(seed) + " trial " + std::to_string(trial);
    EXPECT_TRUE(all_close(out[0], c.reduction == "none" ? ts : Shape{}, expect, 1e-5, 1e-5)) << what;
    if (o.num_outputs == 2) {
      EXPECT_TRUE(all_close(out[1], c.shape, logp, 1e-5, 1e-5)) << what;
    }
  }
}

}  // namespace

TEST(Loss, NegativeLogLikelihoodRandom) { check_loss(false, 1800); }
TEST(Loss, SoftmaxCrossEntropyRandom) { check_loss(true, 1801); }

TEST(Loss, MeanDividesBySumOfAppliedWeights) {
  // Two positions, the second ignored: mean = -x[0, t0] * w[t0] / w[t0].
  Tensor x = Tensor::from_vector<float>({2, 3}, {-1, -2, -3, -4, -5, -6});
  Tensor t = Tensor::from_vector<int64_t>({2}, {2, 1});
  Tensor w = Tensor::from_vector<float>({3}, {0.5f, 2.0f, 4.0f});
  auto y = run_node("NegativeLogLikelihoodLoss", {x, t, w}, {attr_int("ignore_index", 1)});
  EXPECT_TRUE(all_close(y[0], {}, {3.0}, 1e-7, 0));
  y = run_node("NegativeLogLikelihoodLoss", {x, t, w}, {attr_string("reduction", "sum")});
  EXPECT_TRUE(all_close(y[0], {}, {3 * 4.0 + 5 * 2.0}, 1e-7, 0));
}

TEST(Loss, LabelOutOfRangeNamesNode) {
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3});
  for (const std::string op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"})
    for (int64_t bad : {3, -1}) {
      const std::string e = thrown_by([&] { run_node(op, {x, Tensor::from_vector<int64_t>({2}, {0, bad})}); });
      EXPECT_EQ(e.rfind("InvalidArgument: ", 0), 0u) << e;
      EXPECT_NE(e.find("node_" + op), std::string::npos) << e;
      EXPECT_NE(e.find("out of range"), std::string::npos) << e;
      // The same label is fine when it is the ignore_index.
      auto y = run_node(op, {x, Tensor::from_vector<int64_t>({2}, {0, bad})}, {attr_int("ignore_index", bad)});
      EXPECT_EQ(y[0].numel(), 1);
    }
}

TEST(Loss, BadShapesNameNode) {
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3, 4});
  std::string e = thrown_by([&] { run_node("SoftmaxCrossEntropyLoss", {x, Tensor::zeros(DType::kInt64, {2, 3})}); });
  EXPECT_NE(e.find("labels have shape [2, 3], expected [2, 4]"), std::string::npos) << e;
  e = thrown_by([&] {
    run_node("NegativeLogLikelihoodLoss", {x, Tensor::zeros(DType::kInt64, {2, 4}), Tensor::zeros(DType::kFloat32, {4})});
  });
  EXPECT_NE(e.find("weights have shape [4], expected [3]"), std::string::npos) << e;
}
