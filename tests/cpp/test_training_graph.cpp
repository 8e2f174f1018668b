// The training step as one plan (train::build_training_graph + the executor): optimizer nodes
// update weights and optimizer state in place, accumulators and BatchNormalization statistics too;
// values checked against double-precision references computed from the step's own gradients.
#include <cmath>

#include "runtime/executor.h"
#include "test_util.h"
#include "train/attach_optimizer.h"

using namespace onnxtrain;
using ot_test::make_node;
using ot_test::value_info;

namespace {

// y = BN?(x W + b); loss = sum((y - t)^2). x [4, 3], W [3, 2].
ir::Model regression(bool batchnorm) {
  ir::Model m;
  m.opsets = {{"", 15}};
  m.graph = std::make_shared<ir::Graph>();
  auto& g = *m.graph;
  std::mt19937 rng(4);
  g.inputs = {value_info("x", DType::kFloat32, {4, 3}), value_info("t", DType::kFloat32, {4, 2})};
  g.initializers.emplace_back("W", ot_test::random_tensor(DType::kFloat32, {3, 2}, rng));
  g.initializers.emplace_back("b", ot_test::random_tensor(DType::kFloat32, {2}, rng));
  g.nodes.push_back(make_node("MatMul", {"x", "W"}, {"xw"}));
  g.nodes.push_back(make_node("Add", {"xw", "b"}, {"y"}));
  std::string y = "y";
  if (batchnorm) {
    g.initializers.emplace_back("gamma", Tensor::from_vector<float>({2}, {1.f, 1.f}));
    g.initializers.emplace_back("beta", Tensor::zeros(DType::kFloat32, {2}));
    g.initializers.emplace_back("mean", Tensor::zeros(DType::kFloat32, {2}));
    g.initializers.emplace_back("var", Tensor::from_vector<float>({2}, {1.f, 1.f}));
    g.nodes.push_back(make_node("BatchNormalization", {"y", "gamma", "beta", "mean", "var"}, {"z", "mean_out", "var_out"},
                                {ot_test::attr_int("training_mode", 1), ot_test::attr_float("momentum", 0.75f)}));
    y = "z";
  }
  g.nodes.push_back(make_node("Sub", {y, "t"}, {"d"}));
  g.nodes.push_back(make_node("Mul", {"d", "d"}, {"dd"}));
  g.nodes.push_back(make_node("ReduceSum", {"dd"}, {"loss"}, {ot_test::attr_int("keepdims", 0)}));
  g.outputs = {value_info("loss", DType::kFloat32, {})};
  return m;
}

struct Step {
  train::TrainingGraph tg;
  std::unique_ptr<runtime::GraphExecutor> ex;
  Value x, t, lr, step, reset;
  std::vector<const Value*> feeds;

  Step(ir::Model fwd, const train::StepConfig& cfg, std::vector<std::string> trained, bool batchnorm) {
    std::vector<train::RunningStat> running;
    if (batchnorm) running = {{"mean_out", "mean"}, {"var_out", "var"}};
    tg = train::build_training_graph(fwd, "loss", trained, running, {}, cfg);
    std::unordered_set<std::string> mut;
    for (const auto& [n, v] : tg.model.graph->initializers)
      if (dtype_is_float(v.dtype())) mut.insert(n);
    ExecOptions eo;
    eo.training = true;
    ex = std::make_unique<runtime::GraphExecutor>(tg.model.graph, tg.model.opsets, eo, std::vector<std::string>{}, mut);
    std::mt19937 rng(9);
    x = Value::of(ot_test::random_tensor(DType::kFloat32, {4, 3}, rng));
    t = Value::of(ot_test::random_tensor(DType::kFloat32, {4, 2}, rng));
    lr = Value::of(Tensor::from_vector<float>({1}, {0.1f}));
    step = Value::of(Tensor::from_vector<int64_t>({1}, {1}));
    reset = Value::of(Tensor::from_vector<bool>({1}, {true}));
    for (const auto& n : ex->input_names())
      feeds.push_back(n == "x" ? &x : n == "t" ? &t : n == tg.lr_input ? &lr : n == tg.step_input ? &step : &reset);
  }
  Tensor& state(const std::string& n) { return *tg.model.graph->initializer(n); }
};

}  // namespace

TEST(TrainingPlan, AdamUpdatesWeightsAndMomentsInPlace) {
  train::StepConfig cfg;
  cfg.optimizer.name = "AdamOptimizer";
  Step s(regression(false), cfg, {"W", "b"}, false);
  runtime::PlanRequest req;
  req.outputs = {"loss", "W_grad", "b_grad"};
  req.updates = s.tg.update_step();
  const size_t id = s.ex->add_request(req);
  const void* w_mem = s.state("W").raw_data();
  const auto w0 = ot_test::to_double(s.state("W"));
  std::vector<Value> out;
  s.ex->run(s.feeds, id, out);
  const runtime::PlanStats st = s.ex->last_stats();
  // W, b and their two moments: every update written where its state lives, nothing copied.
  EXPECT_EQ(st.state_in_place, 6u);
  EXPECT_EQ(st.state_copies, 0u);
  EXPECT_EQ(st.inplace_copied, 0u);
  EXPECT_EQ(s.state("W").raw_data(), w_mem);
  // First Adam step (bias-corrected): m = 0.1 g, v = 0.001 g^2, W -= lr m/0.1 / (sqrt(v/0.001) + eps).
  const auto g = ot_test::to_double(out[1].tensor);
  std::vector<double> w1, m1, v1;
  for (size_t i = 0; i < g.size(); ++i) {
    const double m = (1 - double(0.9f)) * g[i], v = (1 - double(0.999f)) * g[i] * g[i];
    m1.push_back(m), v1.push_back(v);
    w1.push_back(w0[i] - 0.1 * (m / (1 - double(0.9f))) / (std::sqrt(v / (1 - double(0.999f))) + 1e-8));
  }
  EXPECT_TRUE(ot_test::all_close(s.state("W"), {3, 2}, w1, 1e-5, 1e-6));
  EXPECT_TRUE(ot_test::all_close(s.state("Moment_1_W"), {3, 2}, m1, 1e-5, 1e-8));
  EXPECT_TRUE(ot_test::all_close(s.state("Moment_2_W"), {3, 2}, v1, 1e-4, 1e-10));
  // The next run computes from the updated state.
  s.ex->run(s.feeds, id, out);
  EXPECT_EQ(s.state("W").raw_data(), w_mem);
  EXPECT_LT(out[0].tensor.data<float>()[0], 1e9f);
}

TEST(TrainingPlan, AccumulationStepsTouchOnlyTheAccumulators) {
  train::StepConfig cfg;
  cfg.optimizer.name = "SGDOptimizer";
  cfg.accumulation_steps = 2;
  cfg.clip_grad_norm = true;
  cfg.max_grad_norm = 1e-3f;  // small: the clipping is active
  Step s(regression(false), cfg, {"W", "b"}, false);
  runtime::PlanRequest acc, upd;
  acc.outputs = upd.outputs = {"W_grad", "b_grad"};
  acc.updates = s.tg.accumulate_step();
  upd.updates = s.tg.update_step();
  const size_t ia = s.ex->add_request(acc), iu = s.ex->add_request(upd);
  const auto w0 = ot_test::to_double(s.state("W"));
  std::vector<Value> out;
  s.ex->run(s.feeds, ia, out);  // reset: the accumulators take the gradients
  const auto g1w = ot_test::to_double(out[0].tensor), g1b = ot_test::to_double(out[1].tensor);
  EXPECT_EQ(s.ex->last_stats().state_in_place, 2u);  // the two accumulators
  EXPECT_EQ(ot_test::to_double(s.state("W")), w0);   // untouched
  EXPECT_TRUE(ot_test::all_close(s.state("W_grad_accumulation_buffer"), {3, 2}, g1w, 0, 0));
  s.reset.tensor.data<bool>()[0] = false;
  s.ex->run(s.feeds, iu, out);  // adds the second gradients, clips, updates
  const auto g2w = ot_test::to_double(out[0].tensor), g2b = ot_test::to_double(out[1].tensor);
  EXPECT_EQ(s.ex->last_stats().state_copies, 0u);
  // Global norm over both accumulated gradients, then W -= lr * scale * (g1 + g2).
  double sq = 0;
  std::vector<double> aw(g1w.size());
  for (size_t i = 0; i < g1w.size(); ++i) aw[i] = g1w[i] + g2w[i], sq += aw[i] * aw[i];
  for (size_t i = 0; i < g1b.size(); ++i) sq += (g1b[i] + g2b[i]) * (g1b[i] + g2b[i]);
  const double scale = std::min(1.0, 1e-3 / (std::sqrt(sq) + 1e-6));
  ASSERT_LT(scale, 1.0);
  std::vector<double> w1;
  for (size_t i = 0; i < aw.size(); ++i) w1.push_back(w0[i] - double(0.1f) * scale * aw[i]);
  EXPECT_TRUE(ot_test::all_close(s.state("W"), {3, 2}, w1, 1e-5, 1e-8));
}

TEST(TrainingPlan, BatchNormStatisticsAreUpdatedInPlace) {
  train::StepConfig cfg;
  cfg.optimizer.name = "MomentumOptimizer";
  Step s(regression(true), cfg, {"W", "b"}, true);
  runtime::PlanRequest req;
  req.outputs = {"loss"};
  req.updates = s.tg.update_step();
  const size_t id = s.ex->add_request(req);
  const void* mean_mem = s.state("mean").raw_data();
  std::vector<Value> out;
  // y = x W + b before the update: its batch mean is what the running mean moves toward.
  const auto X = ot_test::to_double(s.x.tensor), W = ot_test::to_double(s.state("W")), B = ot_test::to_double(s.state("b"));
  std::vector<double> mean(2, 0.0);
  for (int n = 0; n < 4; ++n)
    for (int j = 0; j < 2; ++j) {
      double y = B[size_t(j)];
      for (int k = 0; k < 3; ++k) y += X[size_t(n * 3 + k)] * W[size_t(k * 2 + j)];
      mean[size_t(j)] += y / 4;
    }
  s.ex->run(s.feeds, id, out);
  EXPECT_EQ(s.ex->last_stats().state_copies, 0u);
  EXPECT_EQ(s.ex->last_stats().state_in_place, 6u);  // W, b, 2 momenta, running mean and variance
  EXPECT_EQ(s.state("mean").raw_data(), mean_mem);
  // running_mean = momentum * running_mean + (1 - momentum) * batch mean (ONNX), from zeros.
  EXPECT_TRUE(ot_test::all_close(s.state("mean"), {2}, {0.25 * mean[0], 0.25 * mean[1]}, 1e-5, 1e-7));
}

// Recompute (train/recompute.h): the same step bit for bit, with the dropped values computed again
// by clones in the backward part; a recomputed training-mode BatchNormalization must not read the
// running statistics (its forward node overwrites them in place, and a reader would have to run
// before it).
TEST(TrainingPlan, RecomputeIsBitwiseAndLeavesRunningStatisticsInPlace) {
  auto run = [](const train::RecomputeConfig& rc, std::vector<std::string>* node_names) {
    train::StepConfig cfg;
    cfg.optimizer.name = "AdamOptimizer";
    cfg.recompute = rc;
    Step s(regression(true), cfg, {"W", "b"}, true);
    runtime::PlanRequest req;
    req.outputs = {"loss"};
    req.updates = s.tg.update_step();
    const size_t id = s.ex->add_request(req);
    std::vector<Value> out;
    std::vector<float> losses;
    for (int k = 0; k < 3; ++k) {
      s.ex->run(s.feeds, id, out);
      losses.push_back(out[0].tensor.data<float>()[0]);
    }
    EXPECT_EQ(s.ex->last_stats().state_copies, 0u);
    EXPECT_EQ(s.ex->last_stats().state_in_place, 8u);  // W, b, their 4 moments, running mean and variance
    if (node_names)
      for (const auto& n : s.tg.model.graph->nodes) node_names->push_back(n.name);
    std::vector<std::vector<double>> state;
    for (const char* n : {"W", "b", "mean", "var", "Moment_1_W", "Moment_2_b"}) state.push_back(ot_test::to_double(s.state(n)));
    return std::make_pair(losses, state);
  };
  auto error_of = [&](const train::RecomputeConfig& rc) -> std::string {
    try {
      run(rc, nullptr);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  const auto base = run({}, nullptr);
  // Listed values, recomputed from what is not listed: y (BatchNormGrad reads it) and d (the
  // gradient of d * d reads it) from x W, b and t, through z, which no gradient node reads.
  train::RecomputeConfig rc;
  rc.values = {"y", "z", "d"};
  std::vector<std::string> names;
  const auto re = run(rc, &names);
  EXPECT_EQ(re.first, base.first);
  EXPECT_EQ(re.second, base.second);
  size_t first_grad = names.size(), clones = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].rfind("grad", 0) == 0) first_grad = std::min(first_grad, i);
    if (names[i].find("_recompute") != std::string::npos) {
      ++clones;
      EXPECT_GT(i, first_grad) << names[i];
    }
  }
  EXPECT_EQ(clones, 3u);  // Add (y), BatchNormalization (z), Sub (d)
  EXPECT_TRUE(std::any_of(names.begin(), names.end(), [](const std::string& n) {
    return n.find("BatchNormalization") != std::string::npos && n.find("_recompute") != std::string::npos;
  }));
  // Budgets: this chain's cut values, and a budget below the least estimate names it.
  const auto cuts = train::forward_cuts(*regression(true).graph, ir::topological_order(*regression(true).graph));
  std::vector<std::string> cut_names;
  for (const auto& c : cuts) cut_names.push_back(c.first);
  EXPECT_EQ(cut_names, (std::vector<std::string>{"xw", "y", "z", "d", "dd"}));
  train::RecomputeConfig tiny;
  tiny.budget_bytes = 1;
  const std::string e = error_of(tiny);
  EXPECT_NE(e.find("recompute budget of 1 bytes is below what recompute reaches for this model: "), std::string::npos)
      << e;
  // An unknown value is named.
  train::RecomputeConfig unknown;
  unknown.values = {"nope"};
  const std::string u = error_of(unknown);
  EXPECT_NE(u.find("'nope' is not a value computed by the forward graph"), std::string::npos) << u;
}
