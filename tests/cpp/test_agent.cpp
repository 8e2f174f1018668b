// Forward/backward training through the public C++ API (include/onnxtrain/agent.h):
// ModuleGraphBuilder's training graph run by a TrainingAgent, against a naive double-precision
// computation of y = relu(X W + b) and its gradients; several forwards in flight; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "ir/onnx_io.h"
#include "onnxtrain/agent.h"
#include "test_grad_util.h"
#include "test_util.h"

using namespace onnxtrain;
using ot_test::make_node;

namespace {

constexpr int64_t kIn = 4, kOut = 3;

// y = relu(X W + b), plus its shape (an integer output, not differentiable).
std::string relu_model(std::mt19937& rng, Tensor& W, Tensor& b) {
  ir::Model m;
  m.opsets = {{"", 17}};
  m.graph = std::make_shared<ir::Graph>();
  auto& g = *m.graph;
  W = ot_test::random_tensor(DType::kFloat32, {kIn, kOut}, rng, -1, 1);
  b = ot_test::random_tensor(DType::kFloat32, {kOut}, rng, -0.5, 0.5);
  g.inputs = {ir::ValueInfo{"X", ir::TypeInfo::tensor(DType::kFloat32, {-1, kIn}), ""}};
  g.initializers = {{"W", W}, {"b", b}};
  g.nodes = {make_node("MatMul", {"X", "W"}, {"xw"}), make_node("Add", {"xw", "b"}, {"z"}),
             make_node("Relu", {"z"}, {"y"}), make_node("Shape", {"y"}, {"s"})};
  g.outputs = {ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kFloat32, {-1, kOut}), ""},
               ir::ValueInfo{"s", ir::TypeInfo::tensor(DType::kInt64, {2}), ""}};
  return ir::serialize_model(m);
}

struct Reference {
  std::vector<double> y, dX, dW, db;
};

Reference reference(const Tensor& X, const Tensor& W, const Tensor& b, const Tensor& dy) {
  const int64_t n = X.shape()[0];
  Reference r;
  r.y.assign(size_t(n * kOut), 0);
  r.dX.assign(size_t(n * kIn), 0);
  r.dW.assign(size_t(kIn * kOut), 0);
  r.db.assign(size_t(kOut), 0);
  const float *x = X.data<float>(), *w = W.data<float>(), *bb = b.data<float>(), *g = dy.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kOut; ++j) {
      double z = bb[j];
      for (int64_t k = 0; k < kIn; ++k) z += double(x[i * kIn + k]) * w[k * kOut + j];
      r.y[size_t(i * kOut + j)] = z > 0 ? z : 0;
      const double dz = z > 0 ? g[i * kOut + j] : 0;
      r.db[size_t(j)] += dz;
      for (int64_t k = 0; k < kIn; ++k) {
        r.dW[size_t(k * kOut + j)] += double(x[i * kIn + k]) * dz;
        r.dX[size_t(i * kIn + k)] += dz * w[k * kOut + j];
      }
    }
  return r;
}

void expect_near(const Tensor& got, const std::vector<double>& want) {
  ASSERT_EQ(size_t(got.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.data<float>()[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
}

// What f throws ("" when nothing) must contain `needle`.
void expect_error(const std::function<void()>& f, const std::string& needle) {
  const std::string m = ot_test::thrown_by(f);
  EXPECT_NE(m.find(needle), std::string::npos) << "expected '" << needle << "' in: '" << m << "'";
}

ModuleGraphBuilderConfig config() {
  ModuleGraphBuilderConfig c;
  c.initializer_names = {"W", "b"};
  c.initializer_names_to_train = {"W", "b"};
  c.input_names_require_grad = {"X"};
  return c;
}

}  // namespace

TEST(TrainingAgent, ForwardBackwardAgainstReference) {
  std::mt19937 rng(3);
  Tensor W, b;
  const std::string model = relu_model(rng, W, b);
  ModuleGraphBuilder builder;
  builder.initialize(model, config());
  builder.build();
  const ModuleGraphInfo& info = builder.graph_info();
  EXPECT_EQ(info.user_output_names, (std::vector<std::string>{"y", "s"}));
  EXPECT_EQ(info.output_grad_indices_non_differentiable, (std::vector<int64_t>{1}));
  EXPECT_EQ(info.initializer_grad_names_to_train, (std::vector<std::string>{"W_grad", "b_grad"}));

  const std::string train = builder.get_model();
  InferenceSession session(train.data(), train.size());
  TrainingAgent agent(session, {"X", "W", "b"}, {"X_grad", "W_grad", "b_grad"});
  EXPECT_EQ(agent.differentiable_outputs(), (std::vector<size_t>{0}));

  // Three forwards in flight (different batch sizes), backwards in reverse order.
  struct Run {
    Tensor X, dy;
    std::vector<Value> out;
    PartialRunState state;
  };
  std::vector<Run> runs(3);
  const Value w = Value::of(W), bv = Value::of(b);
  for (size_t r = 0; r < runs.size(); ++r) {
    const int64_t n = int64_t(r) + 2;
    runs[r].X = ot_test::random_tensor(DType::kFloat32, {n, kIn}, rng, -1, 1);
    runs[r].dy = ot_test::random_tensor(DType::kFloat32, {n, kOut}, rng, -1, 1);
    const Value x = Value::of(runs[r].X);
    runs[r].out = agent.run_forward({&x, &w, &bv}, runs[r].state);
    EXPECT_TRUE(runs[r].state.pending());
  }
  for (size_t r = runs.size(); r-- > 0;) {
    Run& run = runs[r];
    const Reference ref = reference(run.X, W, b, run.dy);
    ASSERT_EQ(run.out.size(), 2u);
    expect_near(run.out[0].tensor, ref.y);
    EXPECT_EQ(run.out[1].tensor.data<int64_t>()[0], run.X.shape()[0]);
    const Value g = Value::of(run.dy);
    std::vector<Value> grads = agent.run_backward({&g}, run.state);
    EXPECT_FALSE(run.state.pending());
    ASSERT_EQ(grads.size(), 3u);
    expect_near(grads[0].tensor, ref.dX);
    expect_near(grads[1].tensor, ref.dW);
    expect_near(grads[2].tensor, ref.db);
  }
}

TEST(TrainingAgent, Errors) {
  std::mt19937 rng(4);
  Tensor W, b;
  const std::string model = relu_model(rng, W, b);
  ModuleGraphBuilder builder;
  expect_error([&] { builder.build(); }, "call initialize() before build()");
  ModuleGraphBuilderConfig c = config();
  c.initializer_names_to_train = {"W", "nope"};
  expect_error([&] { builder.initialize(model, c); }, "'nope' is not in initializer_names");
  c = config();
  c.enable_caching = true;
  expect_error([&] { builder.initialize(model, c); }, "enable_caching");
  builder.initialize(model, config());
  expect_error([&] { builder.get_model(); }, "call build() before get_model()");
  expect_error([&] { builder.build({{2, 5}}); }, "dimension 1 fixed to 4");
  builder.build();

  // A session over the forward model has no cut.
  const std::string fwd = builder.get_inference_optimized_model();
  InferenceSession plain(fwd.data(), fwd.size());
  expect_error([&] { TrainingAgent(plain, {"X", "W", "b"}, {"y"}); }, "no com.microsoft YieldOp");

  const std::string train = builder.get_model();
  InferenceSession session(train.data(), train.size());
  expect_error([&] { TrainingAgent(session, {"X", "W"}, {"W_grad"}); }, "misses the input 'b'");
  TrainingAgent agent(session, {"X", "W", "b"}, {"W_grad"});
  PartialRunState state;
  const Value x = Value::of(Tensor::zeros(DType::kFloat32, {2, kIn})), w = Value::of(W), bv = Value::of(b);
  const Value g = Value::of(Tensor::zeros(DType::kFloat32, {2, kOut}));
  expect_error([&] { agent.run_backward({&g}, state); }, "holds no forward run");
  expect_error([&] { agent.run_forward({&x, &w}, state); }, "2 feeds for 3 names");
  agent.run_forward({&x, &w, &bv}, state);
  const Value bad = Value::of(Tensor::zeros(DType::kFloat32, {3, kOut}));
  expect_error([&] { agent.run_backward({&bad}, state); }, "must be");
  EXPECT_EQ(agent.run_backward({&g}, state).size(), 1u);
  // The plain run of the training graph names the cut.
  expect_error([&] { session.run({"W_grad"}, {{"X", x.tensor}, {"W", W}, {"b", b}}); }, "YieldOp marks the cut");
}

TEST(TrainingAgent, StateOfADestroyedAgentIsRefused) {
  // An agent knows its states by its executor's id, never by an address: agents made after one is
  // destroyed (often at its address) refuse its pending state instead of running it.
  std::mt19937 rng(5);
  Tensor W, b;
  const std::string model = relu_model(rng, W, b);
  ModuleGraphBuilder builder;
  builder.initialize(model, config());
  builder.build();
  const std::string train = builder.get_model();
  InferenceSession session(train.data(), train.size());
  const Value x = Value::of(Tensor::zeros(DType::kFloat32, {2, kIn})), w = Value::of(W), bv = Value::of(b);
  const Value g = Value::of(Tensor::zeros(DType::kFloat32, {2, kOut}));
  PartialRunState state;
  {
    auto first = std::make_unique<TrainingAgent>(session, std::vector<std::string>{"X", "W", "b"},
                                                 std::vector<std::string>{"W_grad"});
    first->run_forward({&x, &w, &bv}, state);
  }
  for (int i = 0; i < 4; ++i) {
    auto next = std::make_unique<TrainingAgent>(session, std::vector<std::string>{"X", "W", "b"},
                                                std::vector<std::string>{"W_grad"});
    expect_error([&] { next->run_backward({&g}, state); }, "belongs to another agent");
  }
  EXPECT_TRUE(state.pending());
}
