// ai.onnx.preview.training Adagrad / Momentum / Adam against their formulas in double precision.
#include <cmath>

#include "test_util.h"

using namespace ot_test;

namespace {
ot_test::RunOptions preview(size_t outputs) {
  ot_test::RunOptions o;
  o.domain = "ai.onnx.preview.training";
  o.num_outputs = outputs;
  return o;
}
}  // namespace

TEST(OptimizerOps, AdamMatchesFormula) {
  const uint32_t seed = 11;
  std::mt19937 rng(seed);
  Tensor x = random_tensor(DType::kFloat64, {5}, rng), g = random_tensor(DType::kFloat64, {5}, rng);
  Tensor v = random_tensor(DType::kFloat64, {5}, rng), h = random_tensor(DType::kFloat64, {5}, rng, 0.1, 1);
  const double R = 0.05, a = 0.8, b = 0.9, eps = 1e-3, nc = 0.01, post = 0.02;
  const int64_t T = 3;
  auto out = run_node("Adam", {Tensor::scalar<double>(R), Tensor::scalar<int64_t>(T), x, g, v, h},
                      {attr_float("alpha", float(a)), attr_float("beta", float(b)), attr_float("epsilon", float(eps)),
                       attr_float("norm_coefficient", float(nc)), attr_float("norm_coefficient_post", float(post))},
                      preview(3));
  auto X = to_double(x), G = to_double(g), V = to_double(v), H = to_double(h);
  std::vector<double> ex, ev, eh;
  const double fa = float(a), fb = float(b), fe = float(eps), fn = float(nc), fp = float(post);
  const double r = R * std::sqrt(1 - std::pow(fb, T)) / (1 - std::pow(fa, T));
  for (size_t i = 0; i < 5; ++i) {
    const double gr = fn * X[i] + G[i];
    const double vn = fa * V[i] + (1 - fa) * gr, hn = fb * H[i] + (1 - fb) * gr * gr;
    ev.push_back(vn);
    eh.push_back(hn);
    ex.push_back((1 - fp) * (X[i] - r * vn / (std::sqrt(hn) + fe)));
  }
  EXPECT_TRUE(all_close(out[0], {5}, ex, 1e-12, 1e-12)) << "seed " << seed;
  EXPECT_TRUE(all_close(out[1], {5}, ev, 1e-12, 1e-12)) << "seed " << seed;
  EXPECT_TRUE(all_close(out[2], {5}, eh, 1e-12, 1e-12)) << "seed " << seed;
}

TEST(OptimizerOps, MomentumAndAdagradMatchFormulas) {
  const uint32_t seed = 12;
  std::mt19937 rng(seed);
  Tensor x = random_tensor(DType::kFloat64, {4}, rng), g = random_tensor(DType::kFloat64, {4}, rng);
  Tensor v = random_tensor(DType::kFloat64, {4}, rng), h = random_tensor(DType::kFloat64, {4}, rng, 0.1, 1);
  auto X = to_double(x), G = to_double(g), V = to_double(v), H = to_double(h);
  for (const char* mode : {"standard", "nesterov"}) {
    auto out = run_node("Momentum", {Tensor::scalar<double>(0.1), Tensor::scalar<int64_t>(0), x, g, v},
                        {attr_float("alpha", 0.5f), attr_float("beta", 0.25f), attr_string("mode", mode),
                         attr_float("norm_coefficient", 0.125f)},
                        preview(2));
    std::vector<double> ex, ev;
    for (size_t i = 0; i < 4; ++i) {
      const double gr = 0.125 * X[i] + G[i], vn = 0.5 * V[i] + 1.0 * gr;  // T = 0: beta replaced by 1
      ev.push_back(vn);
      ex.push_back(std::string(mode) == "nesterov" ? X[i] - 0.1 * (gr + 0.5 * vn) : X[i] - 0.1 * vn);
    }
    EXPECT_TRUE(all_close(out[0], {4}, ex, 1e-12, 1e-12)) << mode;
    EXPECT_TRUE(all_close(out[1], {4}, ev, 1e-12, 1e-12)) << mode;
  }
  auto out = run_node("Adagrad", {Tensor::scalar<double>(0.2), Tensor::scalar<int64_t>(4), x, g, h},
                      {attr_float("decay_factor", 0.5f), attr_float("epsilon", 0.25f)}, preview(2));
  std::vector<double> ex, eh;
  for (size_t i = 0; i < 4; ++i) {
    const double hn = H[i] + G[i] * G[i];
    eh.push_back(hn);
    ex.push_back(X[i] - (0.2 / 3.0) * G[i] / (std::sqrt(hn) + 0.25));
  }
  EXPECT_TRUE(all_close(out[0], {4}, ex, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(out[1], {4}, eh, 1e-12, 1e-12));
}

TEST(OptimizerOps, MismatchedGroupsNameTheNode) {
  Tensor x = Tensor::zeros(DType::kFloat32, {3});
  try {
    run_node("Momentum", {Tensor::scalar<float>(0.1f), Tensor::scalar<int64_t>(0), x, x, Tensor::zeros(DType::kFloat32, {4})},
             {attr_float("alpha", 0.5f), attr_float("beta", 0.5f), attr_string("mode", "standard")}, preview(2));
    FAIL();
  } catch (const onnxtrain::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("node_Momentum"), std::string::npos) << e.what();
  }
}
