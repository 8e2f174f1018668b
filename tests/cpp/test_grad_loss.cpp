// Gradient rules of SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: finite-difference
// checks (float64; reductions, weights, ignore_index, N-d inputs, the log_prob output, opsets 12
// and 13, portable) and the com.onnxtrain.*LossGrad kernels against a naive double reference.
#include <cmath>

#include "grad_check.h"
#include "test_grad_util.h"

using namespace ot_test;
using onnxtrain::shape_numel;
using onnxtrain::shape_to_string;

namespace {

constexpr DType kF64 = DType::kFloat64, kF32 = DType::kFloat32;

struct LossCase {
  Shape scores;  // [N, C, d..]
  std::string reduction;
  bool weights;
  int64_t ignore;  // -100: no ignore_index attribute
};

// Random labels in [0, C); where ignore_index is set, about one in four positions carries it.
Tensor labels_for(const Shape& s, int64_t ignore, DType dt, std::mt19937& rng) {
  Shape ls = s;
  ls.erase(ls.begin() + 1);
  std::vector<double> v(size_t(shape_numel(ls)));
  std::uniform_int_distribution<int64_t> cls(0, s[1] - 1);
  std::bernoulli_distribution drop(0.25);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(ignore != -100 && (i == 0 || drop(rng)) ? ignore : cls(rng));
  return from_double(dt, ls, v);
}

const std::vector<LossCase> kCases = {
    {{4, 3}, "mean", false, -100},   {{4, 3}, "sum", true, -100},     {{4, 3}, "none", false, -100},
    {{3, 4, 2}, "mean", true, 1},    {{3, 4, 2}, "none", true, -1},   {{2, 3, 2, 2}, "sum", false, 0},
    {{2, 3, 2, 2}, "mean", false, -1}, {{5, 2}, "none", true, 1},     {{2, 3, 3}, "mean", true, -100}};

GradCheck loss_case(const std::string& op, const LossCase& lc, int64_t opset, uint32_t seed) {
  std::mt19937 rng(seed);
  GradCheck g;
  g.op = op;
  g.opset = opset;
  g.seed = seed;
  g.inputs = {random_tensor(kF64, lc.scores, rng, -3, 3),
              labels_for(lc.scores, lc.ignore, seed % 2 ? DType::kInt32 : DType::kInt64, rng)};
  if (lc.weights) g.inputs.push_back(random_tensor(kF64, {lc.scores[1]}, rng, 0.2, 2));
  g.attrs = {attr_string("reduction", lc.reduction)};
  if (lc.ignore != -100) g.attrs.push_back(attr_int("ignore_index", lc.ignore));
  g.wrt = {0};  // labels and weights are not differentiable
  return g;
}

std::string describe(const std::string& op, const LossCase& lc, int64_t opset) {
  return op + " opset " + std::to_string(opset) + " " + shape_to_string(lc.scores) + " " + lc.reduction +
         (lc.weights ? " weighted" : "") + (lc.ignore != -100 ? " ignore " + std::to_string(lc.ignore) : "");
}

// Every case at opsets 12 and 13: default mode, `extra` variants, then portable (symbolic shapes
// for some at opset 13: portable run-time unbroadcasting needs 13).
template <class Extra>
void check_loss(const std::string& op, uint32_t seed, Extra extra) {
  for (int64_t opset : {12, 13})
    for (const auto& lc : kCases) {
      GradCheck g = loss_case(op, lc, opset, ++seed);
      const std::string what = describe(op, lc, opset);
      EXPECT_TRUE(check_gradient(g)) << what;
      extra(GradCheck(g), what);
      g.portable = true;
      g.symbolic_shapes = opset >= 13 && seed % 3 == 0;
      EXPECT_TRUE(check_gradient(g)) << what << " (portable)";
    }
}

}  // namespace

GRAD_COVERS(GradLoss, SoftmaxCrossEntropy, "SoftmaxCrossEntropyLoss");
TEST(GradLoss, SoftmaxCrossEntropy) {
  check_loss("SoftmaxCrossEntropyLoss", 2000, [](GradCheck g, const std::string& what) {
    g.num_outputs = 2;  // log_prob named by the model, and in the loss too
    g.outputs_in_loss = {0, 1};
    EXPECT_TRUE(check_gradient(g)) << what << " with log_prob";
    g.portable = true;
    EXPECT_TRUE(check_gradient(g)) << what << " with log_prob (portable)";
  });
  // Only log_prob in the loss.
  GradCheck g = loss_case("SoftmaxCrossEntropyLoss", kCases[3], 13, 2100);
  g.num_outputs = 2;
  g.outputs_in_loss = {1};
  EXPECT_TRUE(check_gradient(g)) << "log_prob only";
}

GRAD_COVERS(GradLoss, NegativeLogLikelihood, "NegativeLogLikelihoodLoss");
TEST(GradLoss, NegativeLogLikelihood) {
  check_loss("NegativeLogLikelihoodLoss", 2200, [](GradCheck, const std::string&) {});
}

// The gradient kernels against the formulas evaluated naively in double.
TEST(GradLoss, LossGradKernels) {
  std::mt19937 rng(2300);
  for (int trial = 0; trial < 24; ++trial) {
    const bool softmax = trial % 2 == 0;
    Shape s{std::uniform_int_distribution<int64_t>(1, 9)(rng), std::uniform_int_distribution<int64_t>(1, trial % 3 ? 8 : 200)(rng)};
    for (int k = 0; k < trial % 3; ++k) s.push_back(std::uniform_int_distribution<int64_t>(1, 11)(rng));
    const std::string reduction = std::vector<std::string>{"none", "sum", "mean"}[size_t(trial / 2 % 3)];
    const bool weighted = trial % 4 < 2;
    const int64_t ignore = trial % 5 == 0 ? -100 : trial % 5 == 1 ? -1 : 0;
    const DType dt = trial % 6 == 5 ? kF64 : kF32;
    const int64_t N = s[0], C = s[1], D = shape_numel(s) / N / C;
    // log_prob: a genuine log-softmax along axis 1.
    auto xv = to_double(random_tensor(kF64, s, rng, -5, 5));
    std::vector<double> lp(xv.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        double sum = 0;
        for (int64_t c = 0; c < C; ++c) sum += std::exp(xv[size_t((n * C + c) * D + d)]);
        for (int64_t c = 0; c < C; ++c) lp[size_t((n * C + c) * D + d)] = xv[size_t((n * C + c) * D + d)] - std::log(sum);
      }
    const Tensor lpt = from_double(dt, s, lp);
    lp = to_double(lpt);
    const Tensor labels = labels_for(s, ignore, DType::kInt64, rng);
    const Tensor w = random_tensor(dt, {C}, rng, 0.2, 2);
    Shape ls = s;
    ls.erase(ls.begin() + 1);
    const Tensor dloss = random_tensor(dt, reduction == "none" ? ls : Shape{}, rng, -2, 2);
    const auto tv = to_double(labels), wv = to_double(w), gv = to_double(dloss);
    std::vector<double> f(size_t(N * D));
    double total = 0;
    for (size_t p = 0; p < f.size(); ++p) {
      f[p] = int64_t(tv[p]) == ignore ? 0.0 : weighted ? wv[size_t(tv[p])] : 1.0;
      total += f[p];
    }
    for (size_t p = 0; p < f.size(); ++p) f[p] *= reduction == "none" ? gv[p] : reduction == "sum" ? gv[0] : gv[0] / total;
    std::vector<double> expect(lp.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < D; ++d) {
          const size_t i = size_t((n * C + c) * D + d), p = size_t(n * D + d);
          expect[i] = ((softmax ? std::exp(lp[i]) : 0.0) - (int64_t(tv[p]) == c ? 1.0 : 0.0)) * f[p];
        }
    std::vector<ir::Attribute> attrs{attr_string("reduction", reduction)};
    if (ignore != -100) attrs.push_back(attr_int("ignore_index", ignore));
    RunOptions ro;
    ro.domain = "com.onnxtrain";
    ro.threads = 1 + trial % 2;
    std::vector<Tensor> inputs{dloss, softmax ? lpt : from_double(dt, s, xv), labels};
    if (weighted) inputs.push_back(w);
    auto out = run_node(softmax ? "SoftmaxCrossEntropyLossGrad" : "NegativeLogLikelihoodLossGrad", inputs, attrs, ro);
    const double tol = dt == kF64 ? 1e-12 : 1e-5;
    EXPECT_TRUE(all_close(out[0], s, expect, tol, tol))
        << (softmax ? "SCE" : "NLL") << " trial " << trial << " " << shape_to_string(s) << " " << reduction
        << (weighted ? " weighted" : "") << " ignore " << ignore << " (seed 2300)";
  }
}
