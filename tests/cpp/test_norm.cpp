// BatchNormalization, InstanceNormalization, LayerNormalization, LRN and Dropout against naive
// double-precision references on random shapes (fixed seeds, printed on failure).
#include <cmath>
#include <functional>

#include "runtime/executor.h"
#include "test_util.h"

namespace ot_test {
std::string thrown_by(const std::function<void()>& f);  // test_reduce.cpp
}

using namespace ot_test;
using onnxtrain::shape_numel;
using onnxtrain::shape_to_string;

namespace {

Shape random_shape(std::mt19937& rng, int min_rank, int max_rank, int max_dim = 5) {
  Shape s(size_t(std::uniform_int_distribution<int>(min_rank, max_rank)(rng)));
  for (auto& d : s) d = std::uniform_int_distribution<int>(1, max_dim)(rng);
  return s;
}

// Population mean and variance of x over the positions `in(i)` selects.
template <class F>
std::pair<double, double> moments(const std::vector<double>& x, F&& in) {
  double s = 0, n = 0, v = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (in(i)) s += x[i], n += 1;
  const double m = n ? s / n : 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (in(i)) v += (x[i] - m) * (x[i] - m);
  return {m, n ? v / n : 0};
}

}  // namespace

// ---------------------------------------------------------------- BatchNormalization
TEST(Norm, BatchNormInferenceAndTraining) {
  std::mt19937 rng(1100);
  for (int trial = 0; trial < 40; ++trial) {
    Shape s = random_shape(rng, 2, 5);
    const int64_t opset = std::vector<int64_t>{7, 9, 14, 15}[size_t(trial % 4)];
    const bool training = trial % 3 == 0;
    const bool spatial = !(opset == 7 && trial % 8 == 3);
    const int64_t C = s[1], S = shape_numel(s) / s[0] / C;
    const int64_t P = spatial ? C : C * S;  // statistics per channel, or per element of dims[1:]
    Shape ps = spatial ? Shape{C} : Shape(s.begin() + 1, s.end());
    const DType pt = opset == 15 && trial % 2 ? DType::kFloat64 : DType::kFloat32;  // T1/T2 may differ
    Tensor x = random_tensor(DType::kFloat32, s, rng, -3, 3);
    Tensor scale = random_tensor(pt, ps, rng, -2, 2), bias = random_tensor(pt, ps, rng, -2, 2);
    Tensor mean = random_tensor(DType::kFloat32, ps, rng, -1, 1), var = random_tensor(DType::kFloat32, ps, rng, 0.1, 2);
    const float eps = trial % 2 ? 1e-5f : 1e-2f, momentum = 0.8f;
    auto xv = to_double(x), sv = to_double(scale), bv = to_double(bias), mv = to_double(mean), vv = to_double(var);
    const size_t np = static_cast<size_t>(P);
    std::vector<double> mu(np), s2(np), y(xv.size()), rm(np), rv(np);
    auto param_of = [&](size_t i) { return size_t(spatial ? int64_t(i) / S % C : int64_t(i) % (C * S)); };
    for (int64_t p = 0; p < P; ++p) {
      if (training)
        std::tie(mu[size_t(p)], s2[size_t(p)]) = moments(xv, [&](size_t i) { return param_of(i) == size_t(p); });
      else
        mu[size_t(p)] = mv[size_t(p)], s2[size_t(p)] = vv[size_t(p)];
      rm[size_t(p)] = mv[size_t(p)] * momentum + mu[size_t(p)] * (1 - momentum);
      rv[size_t(p)] = vv[size_t(p)] * momentum + s2[size_t(p)] * (1 - momentum);
    }
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t p = param_of(i);
      y[i] = (xv[i] - mu[p]) / std::sqrt(s2[p] + double(eps)) * sv[p] + bv[p];
    }
    RunOptions o;
    o.opset = opset;
    o.inputs_as_constants = trial % 5 == 0;
    o.threads = 1 + trial % 2;
    std::vector<ir::Attribute> attrs{attr_float("epsilon", eps), attr_float("momentum", momentum)};
    if (opset >= 14) attrs.push_back(attr_int("training_mode", training));
    if (opset == 7) attrs.push_back(attr_int("spatial", spatial));
    o.num_outputs = !training ? 1 : opset >= 14 ? 3 : 5;
    auto out = run_node("BatchNormalization", {x, scale, bias, mean, var}, attrs, o);
    const std::string what = "opset " + std::to_string(opset) + " training " + std::to_string(training) + " spatial " +
                             std::to_string(spatial) + " x" + shape_to_string(s) + " seed 1100 trial " + std::to_string(trial);
    EXPECT_TRUE(all_close(out[0], s, y, 1e-5, 1e-5)) << what;
    if (training) {
      EXPECT_TRUE(all_close(out[1], ps, rm, 1e-5, 1e-6)) << what;
      EXPECT_TRUE(all_close(out[2], ps, rv, 1e-5, 1e-6)) << what;
      if (opset < 14) {
        EXPECT_TRUE(all_close(out[3], ps, mu, 1e-5, 1e-6)) << what;
        EXPECT_TRUE(all_close(out[4], ps, s2, 1e-5, 1e-6)) << what;
      }
    }
  }
}

// Training: the running statistics overwrite input_mean / input_var in place; the kernel is right
// whether the planner gives them the inputs' memory or buffers of their own.
TEST(Norm, BatchNormTrainingRunningStatisticsInPlace) {
  std::mt19937 rng(1101);
  for (int trial = 0; trial < 8; ++trial) {
    const Shape s = random_shape(rng, 2, 4);
    const int64_t opset = trial % 2 ? 15 : 9, C = s[1], S = shape_numel(s) / s[0] / C;
    const DType dt = trial % 4 < 2 ? DType::kFloat32 : DType::kFloat64;
    Tensor x = random_tensor(dt, s, rng, -3, 3), scale = random_tensor(dt, {C}, rng), bias = random_tensor(dt, {C}, rng);
    Tensor mean = random_tensor(dt, {C}, rng), var = random_tensor(dt, {C}, rng, 0.1, 2);
    const float momentum = 0.75f, eps = 1e-3f;
    const auto xv = to_double(x), sv = to_double(scale), bv = to_double(bias), mv = to_double(mean), vv = to_double(var);
    std::vector<double> y(xv.size()), rm(static_cast<size_t>(C)), rv(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      const auto [mu, s2] = moments(xv, [&](size_t i) { return int64_t(i) / S % C == c; });
      rm[size_t(c)] = mv[size_t(c)] * momentum + mu * (1 - momentum);
      rv[size_t(c)] = vv[size_t(c)] * momentum + s2 * (1 - momentum);
      for (size_t i = 0; i < xv.size(); ++i)
        if (int64_t(i) / S % C == c) y[i] = (xv[i] - mu) / std::sqrt(s2 + double(eps)) * sv[size_t(c)] + bv[size_t(c)];
    }
    RunOptions o;
    o.opset = opset;
    o.num_outputs = 3;
    o.threads = 1 + trial % 2;
    std::vector<ir::Attribute> attrs{attr_float("epsilon", eps), attr_float("momentum", momentum)};
    if (opset >= 14) attrs.push_back(attr_int("training_mode", 1));
    const std::string what = "opset " + std::to_string(opset) + " x" + shape_to_string(s) + " seed 1101 trial " + std::to_string(trial);
    for (InPlace mode : {InPlace::kAliased, InPlace::kSeparate}) {
      const auto r = run_kernel("BatchNormalization", {x, scale, bias, mean, var}, attrs, o, mode);
      EXPECT_EQ(r.inplace_of, (std::vector<int>{-1, 3, 4})) << what;
      const double tol = dt == DType::kFloat32 ? 1e-5 : 1e-12;
      EXPECT_TRUE(all_close(r.outputs[0], s, y, tol, tol)) << what;
      EXPECT_TRUE(all_close(r.outputs[1], {C}, rm, tol, tol)) << what;
      EXPECT_TRUE(all_close(r.outputs[2], {C}, rv, tol, tol)) << what;
    }
    // Inference declares nothing in place.
    std::vector<ir::Attribute> infer{attr_float("epsilon", eps)};
    o.num_outputs = 1;
    EXPECT_EQ(run_kernel("BatchNormalization", {x, scale, bias, mean, var}, infer, o, InPlace::kAliased).inplace_of,
              (std::vector<int>{-1}));
  }
}

// Training moments of channels far from zero (mean 1e4 (c + 1), spread 1e-3): the kernel's one
// pass sums x - x_first in float64, which keeps the variance (~3e-7) that sum(x^2) / n - mean^2
// would lose to cancellation (~1e-8 of 1e8).
TEST(Norm, BatchNormTrainingMomentsFarFromZero) {
  std::mt19937 rng(1102);
  const Shape s = {4, 3, 5, 6};
  const int64_t C = 3, S = 30;
  Tensor x = random_tensor(DType::kFloat64, s, rng, -1e-3, 1e-3);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] += 1e4 * double(i / S % C + 1);
  Tensor scale = random_tensor(DType::kFloat64, {C}, rng, 0.5, 2), bias = random_tensor(DType::kFloat64, {C}, rng);
  Tensor mean = random_tensor(DType::kFloat64, {C}, rng), var = random_tensor(DType::kFloat64, {C}, rng, 0.1, 2);
  const float eps = 1e-10f, momentum = 0.5f;
  const auto xv = to_double(x), sv = to_double(scale), bv = to_double(bias), mv = to_double(mean), vv = to_double(var);
  std::vector<double> y(xv.size()), rm(static_cast<size_t>(C)), rv(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const auto [mu, s2] = moments(xv, [&](size_t i) { return int64_t(i) / S % C == c; });
    ASSERT_GT(s2, 1e-7);
    rm[size_t(c)] = mv[size_t(c)] * momentum + mu * (1 - momentum);
    rv[size_t(c)] = vv[size_t(c)] * momentum + s2 * (1 - momentum);
    for (size_t i = 0; i < xv.size(); ++i)
      if (int64_t(i) / S % C == c) y[i] = (xv[i] - mu) / std::sqrt(s2 + double(eps)) * sv[size_t(c)] + bv[size_t(c)];
  }
  RunOptions o;
  o.opset = 15;
  o.num_outputs = 3;
  const auto out = run_node("BatchNormalization", {x, scale, bias, mean, var},
                            {attr_float("epsilon", eps), attr_float("momentum", momentum), attr_int("training_mode", 1)}, o);
  EXPECT_TRUE(all_close(out[0], s, y, 1e-7, 1e-7));
  EXPECT_TRUE(all_close(out[1], {C}, rm, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(out[2], {C}, rv, 1e-9, 1e-12));
}

TEST(Norm, BatchNormBadParamsNameNode) {
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3, 4}), p3 = Tensor::zeros(DType::kFloat32, {3});
  const std::string e = thrown_by([&] { run_node("BatchNormalization", {x, p3, Tensor::zeros(DType::kFloat32, {4}), p3, p3}); });
  EXPECT_EQ(e.rfind("InvalidArgument: ", 0), 0u) << e;
  EXPECT_NE(e.find("node_BatchNormalization"), std::string::npos) << e;
  EXPECT_NE(e.find("B has shape [4]"), std::string::npos) << e;
  EXPECT_NE(thrown_by([&] { run_node("BatchNormalization", {Tensor::zeros(DType::kFloat32, {3}), p3, p3, p3, p3}); })
                .find("rank >= 2"),
            std::string::npos);
}

// ---------------------------------------------------------------- InstanceNormalization
TEST(Norm, InstanceNormRandom) {
  std::mt19937 rng(1200);
  for (int trial = 0; trial < 30; ++trial) {
    Shape s = random_shape(rng, 2, 5, 6);
    if (trial == 0) s = {2, 3, 1000};
    const DType dt = trial % 3 == 2 ? DType::kFloat64 : DType::kFloat32;
    const int64_t C = s[1], S = shape_numel(s) / s[0] / C;
    Tensor x = random_tensor(dt, s, rng, -3, 3), scale = random_tensor(dt, {C}, rng), bias = random_tensor(dt, {C}, rng);
    const float eps = 1e-3f;
    auto xv = to_double(x), sv = to_double(scale), bv = to_double(bias);
    std::vector<double> y(xv.size());
    for (int64_t r = 0; r < s[0] * C; ++r) {
      auto [m, v] = moments(xv, [&](size_t i) { return int64_t(i) / S == r; });
      for (int64_t j = 0; j < S; ++j) {
        const size_t i = size_t(r * S + j);
        y[i] = (xv[i] - m) / std::sqrt(v + double(eps)) * sv[size_t(r % C)] + bv[size_t(r % C)];
      }
    }
    RunOptions o;
    o.opset = trial % 2 ? 6 : 1;
    o.inputs_as_constants = trial % 4 == 0;
    o.threads = 1 + trial % 2;
    auto out = run_node("InstanceNormalization", {x, scale, bias}, {attr_float("epsilon", eps)}, o);
    EXPECT_TRUE(all_close(out[0], s, y, 1e-5, 1e-5)) << "x" << shape_to_string(s) << " seed 1200 trial " << trial;
  }
}

// ---------------------------------------------------------------- LayerNormalization
TEST(Norm, LayerNormRandomAxesAndBroadcast) {
  std::mt19937 rng(1300);
  for (int trial = 0; trial < 50; ++trial) {
    Shape s = random_shape(rng, 1, 4, 6);
    if (trial == 0) s = {3, 1000};
    const int64_t rank = int64_t(s.size());
    const int64_t axis = int64_t(rng() % uint32_t(rank)) - (rng() % 2 ? rank : 0), a = axis < 0 ? axis + rank : axis;
    Shape ns(s.begin() + a, s.end());
    // Scale/B: the normalized shape, its trailing dims only, or dims set to 1 (broadcast).
    Shape ws = ns;
    if (trial % 3 == 1) ws.erase(ws.begin(), ws.begin() + long(rng() % ws.size()));
    if (trial % 3 == 2)
      for (auto& d : ws)
        if (rng() % 2) d = 1;
    const DType dt = trial % 5 == 4 ? DType::kFloat64 : trial % 5 == 3 ? DType::kFloat16 : DType::kFloat32;
    const bool with_b = trial % 4 != 0;
    Tensor x = random_tensor(dt, s, rng, -3, 3), w = random_tensor(dt, ws, rng), b = random_tensor(dt, ws, rng);
    const float eps = 1e-4f;
    auto xv = to_double(x), wv = to_double(w), bv = to_double(b);
    const int64_t D = shape_numel(ns), R = shape_numel(s) / D;
    std::vector<double> y(xv.size()), mean(static_cast<size_t>(R)), inv(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      auto [m, v] = moments(xv, [&](size_t i) { return int64_t(i) / D == r; });
      mean[size_t(r)] = m;
      inv[size_t(r)] = 1 / std::sqrt(v + double(eps));
      for (int64_t j = 0; j < D; ++j) {
        const size_t i = size_t(r * D + j), k = size_t(broadcast_index(unravel(j, ns), ws));
        y[i] = (xv[i] - m) * inv[size_t(r)] * wv[k] + (with_b ? bv[k] : 0);
      }
    }
    Shape stat(s.begin(), s.begin() + a);
    stat.resize(s.size(), 1);
    RunOptions o;
    o.num_outputs = 3;
    o.inputs_as_constants = trial % 4 == 1;
    o.threads = 1 + trial % 2;
    auto out = run_node("LayerNormalization", {x, w, with_b ? b : Tensor()}, {attr_int("axis", axis), attr_float("epsilon", eps)}, o);
    const double tol = dt == DType::kFloat16 ? 1e-2 : 1e-5;
    const std::string what = "x" + shape_to_string(s) + " axis " + std::to_string(axis) + " scale" +
                             shape_to_string(ws) + " seed 1300 trial " + std::to_string(trial);
    EXPECT_TRUE(all_close(out[0], s, y, tol, tol)) << what;
    EXPECT_EQ(out[1].dtype(), DType::kFloat32) << what;
    EXPECT_TRUE(all_close(out[1], stat, mean, 1e-5, 1e-5)) << what;
    EXPECT_TRUE(all_close(out[2], stat, inv, 1e-4, 1e-5)) << what;
  }
}

TEST(Norm, LayerNormBadScaleNamesNode) {
  Tensor x = Tensor::zeros(DType::kFloat32, {2, 3, 4});
  const std::string e = thrown_by([&] { run_node("LayerNormalization", {x, Tensor::zeros(DType::kFloat32, {3})}); });
  EXPECT_EQ(e.rfind("InvalidArgument: ", 0), 0u) << e;
  EXPECT_NE(e.find("node_LayerNormalization"), std::string::npos) << e;
  EXPECT_NE(e.find("does not broadcast"), std::string::npos) << e;
}

// ---------------------------------------------------------------- LRN
TEST(Norm, LRNRandom) {
  std::mt19937 rng(1400);
  for (int trial = 0; trial < 30; ++trial) {
    Shape s = random_shape(rng, 2, 4, 7);
    const int64_t size = 1 + int64_t(rng() % 5), C = s[1], S = shape_numel(s) / s[0] / C;
    const float alpha = 1e-3f * float(1 + rng() % 100), beta = 0.25f * float(1 + rng() % 4), bias = 0.5f + float(rng() % 3);
    Tensor x = random_tensor(DType::kFloat32, s, rng, -3, 3);
    auto xv = to_double(x);
    std::vector<double> y(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const int64_t c = int64_t(i) / S % C;
      double sq = 0;
      for (int64_t cc = std::max<int64_t>(0, c - (size - 1) / 2); cc <= std::min(C - 1, c + size / 2); ++cc) {
        const double v = xv[size_t(int64_t(i) + (cc - c) * S)];
        sq += v * v;
      }
      y[i] = xv[i] / std::pow(bias + alpha / double(size) * sq, beta);
    }
    RunOptions o;
    o.opset = trial % 2 ? 13 : 1;
    o.threads = 1 + trial % 2;
    auto out = run_node("LRN", {x},
                        {attr_int("size", size), attr_float("alpha", alpha), attr_float("beta", beta), attr_float("bias", bias)}, o);
    EXPECT_TRUE(all_close(out[0], s, y, 1e-5, 1e-5)) << "x" << shape_to_string(s) << " size " << size << " seed 1400 trial " << trial;
  }
}

// ---------------------------------------------------------------- Dropout
namespace {
// Runs one Dropout node `runs` times through one executor with `eo`: every run's outputs.
std::vector<std::vector<Tensor>> run_dropout(int64_t opset, const std::vector<Tensor>& inputs,
                                             const std::vector<ir::Attribute>& attrs, onnxtrain::ExecOptions eo,
                                             int runs, bool constants) {
  auto g = std::make_shared<ir::Graph>();
  ir::Node n;
  n.op_type = "Dropout";
  n.name = "drop";
  n.attrs = attrs;
  n.outputs = {"y", "mask"};
  std::vector<onnxtrain::Value> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    n.inputs.push_back("in" + std::to_string(i));
    if (constants)
      g->initializers.emplace_back(n.inputs.back(), inputs[i]);
    else
      g->inputs.push_back(ir::ValueInfo{n.inputs.back(), ir::TypeInfo::tensor(inputs[i].dtype(), inputs[i].shape()), ""});
    if (!constants) feeds.push_back(onnxtrain::Value::of(inputs[i]));
  }
  g->nodes.push_back(n);
  g->outputs = {ir::ValueInfo{"y", {}, ""}, ir::ValueInfo{"mask", {}, ""}};
  onnxtrain::runtime::GraphExecutor ex(g, {{"", opset}}, eo);
  std::vector<const onnxtrain::Value*> ptrs;
  for (auto& v : feeds) ptrs.push_back(&v);
  std::vector<std::vector<Tensor>> r;
  for (int k = 0; k < runs; ++k) {
    auto outs = ex.run(ptrs);
    r.push_back({outs[0].tensor, outs[1].tensor});
  }
  EXPECT_EQ(ex.last_stats().folded_nodes, 0u);  // random: never evaluated once at plan time
  return r;
}

// Checks y = x * mask / (1 - ratio) elementwise; returns the kept fraction.
double check_dropout(const Tensor& x, const Tensor& y, const Tensor& mask, double ratio, const std::string& what) {
  auto xv = to_double(x), yv = to_double(y), mv = to_double(mask);
  double kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    kept += mv[i];
    const double e = mv[i] ? double(float(xv[i]) / float(1 - ratio)) : 0.0;
    if (std::fabs(yv[i] - e) > 1e-6 * std::fabs(e)) {
      ADD_FAILURE() << what << ": [" << i << "] got " << yv[i] << " expected " << e;
      break;
    }
  }
  return kept / double(xv.size());
}
}  // namespace

TEST(Norm, DropoutInferenceIsIdentity) {
  std::mt19937 rng(1500);
  Tensor x = random_tensor(DType::kFloat32, {3, 4, 5}, rng);
  for (int64_t opset : {7, 10, 12, 13})
    for (bool constants : {false, true}) {
      RunOptions o;
      o.opset = opset;
      o.num_outputs = 2;
      o.inputs_as_constants = constants;
      std::vector<Tensor> ins{x};
      if (opset >= 12) ins = {x, Tensor::scalar<float>(0.5f), Tensor::scalar<bool>(false)};
      auto out = run_node("Dropout", ins, {}, o);
      EXPECT_TRUE(all_close(out[0], x.shape(), to_double(x), 0, 0)) << "opset " << opset;
      EXPECT_EQ(out[1].dtype(), opset >= 10 ? DType::kBool : DType::kFloat32) << "opset " << opset;
      EXPECT_TRUE(all_close(out[1], x.shape(), std::vector<double>(60, 1.0), 0, 0)) << "opset " << opset;
    }
}

TEST(Norm, DropoutSeededMatchesNumpy) {
  // np.random.seed(s); mask = np.random.uniform(0, 1, 12) >= ratio
  const std::vector<std::tuple<int64_t, float, std::vector<double>>> cases = {
      {5, 0.3f, {0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1}}, {1234, 0.6f, {0, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0}}};
  std::mt19937 rng(1600);
  Tensor x = random_tensor(DType::kFloat32, {3, 4}, rng);
  for (const auto& [seed, ratio, mask] : cases) {
    auto ex = run_dropout(13, {x, Tensor::scalar<float>(ratio), Tensor::scalar<bool>(true)}, {attr_int("seed", seed)}, {}, 1, false);
    EXPECT_TRUE(all_close(ex[0][1], {3, 4}, mask, 0, 0)) << "seed " << seed;
    check_dropout(x, ex[0][0], ex[0][1], ratio, "seed " + std::to_string(seed));
  }
}

TEST(Norm, DropoutTrainingStatisticsAndRuns) {
  std::mt19937 rng(1700);
  Tensor x = random_tensor(DType::kFloat32, {100, 1000}, rng, 0.5, 2);
  std::vector<Tensor> ins{x, Tensor::scalar<float>(0.3f), Tensor::scalar<bool>(true)};
  onnxtrain::ExecOptions eo;
  for (bool constants : {false, true}) {
    eo.num_threads = constants ? 2 : 1;
    auto runs = run_dropout(13, ins, {}, eo, 2, constants);
    for (const auto& r : runs) EXPECT_NEAR(check_dropout(x, r[0], r[1], 0.3, "unseeded"), 0.7, 0.01);
    // Random per run (not constant-folded even with constant inputs), masks differ between runs.
    EXPECT_FALSE(all_close(runs[0][1], x.shape(), to_double(runs[1][1]), 0, 0)) << "constants " << constants;
  }
  // The same seed and run count give the same masks whatever the thread count.
  eo.num_threads = 1;
  auto a = run_dropout(13, ins, {}, eo, 1, false);
  eo.num_threads = 2;
  auto b = run_dropout(13, ins, {}, eo, 1, false);
  EXPECT_TRUE(all_close(a[0][1], x.shape(), to_double(b[0][1]), 0, 0));
  // Opset < 12: the session's training flag decides.
  eo.training = true;
  auto c = run_dropout(10, {x}, {attr_float("ratio", 0.4f)}, eo, 1, false);
  EXPECT_NEAR(check_dropout(x, c[0][0], c[0][1], 0.4, "opset 10 training"), 0.6, 0.01);
  // ratio 0 keeps everything.
  auto z = run_dropout(13, {x, Tensor::scalar<float>(0.0f), Tensor::scalar<bool>(true)}, {}, {}, 1, false);
  EXPECT_EQ(check_dropout(x, z[0][0], z[0][1], 0.0, "ratio 0"), 1.0);
}

TEST(Norm, DropoutBadRatioNamesNode) {
  RunOptions o;
  o.opset = 13;
  const std::string e = thrown_by([&] {
    run_node("Dropout", {Tensor::zeros(DType::kFloat32, {4}), Tensor::scalar<float>(1.0f), Tensor::scalar<bool>(true)}, {}, o);
  });
  EXPECT_EQ(e.rfind("InvalidArgument: ", 0), 0u) << e;
  EXPECT_NE(e.find("node_Dropout"), std::string::npos) << e;
  EXPECT_NE(e.find("ratio must be in [0, 1)"), std::string::npos) << e;
}
