// The provider seam with the test provider (tests/cpp/test_provider.h: device cpu:1, a subset of
// the CPU kernels): assignment by preference and support, fallback, copies at device boundaries,
// host-memory inputs, in-place outputs across devices, one arena per device, folding on the CPU.
#include <cmath>

#include "runtime/executor.h"
#include "test_provider.h"
#include "test_util.h"

using namespace onnxtrain;
using ot_test::make_node;
using ot_test::value_info;

namespace {

const OpsetMap kOpsets{{"", 17}, {"com.onnxtrain", 1}};

ExecOptions on_test_provider() {
  ExecOptions o;
  o.providers = {&ot_test::test_provider()};
  return o;
}

std::vector<std::string> assignment_of(const runtime::GraphExecutor& ex) { return ex.last_assignment(); }

bool has(const std::vector<std::string>& a, const std::string& text) {
  for (const auto& s : a)
    if (s.find(text) != std::string::npos) return true;
  return false;
}

using ot_test::run;

}  // namespace

TEST(Providers, AssignmentFallbackAndCopies) {
  // Relu (test provider) -> LeakyRelu (CPU only) -> Add (test provider).
  auto g = std::make_shared<ir::Graph>();
  g->inputs = {value_info("x", DType::kFloat32, {2, 3})};
  g->nodes.push_back(make_node("Relu", {"x"}, {"a"}));
  g->nodes.push_back(make_node("LeakyRelu", {"a"}, {"b"}));
  g->nodes.push_back(make_node("Add", {"b", "x"}, {"y"}));
  g->outputs = {value_info("y")};
  std::mt19937 rng(1);
  Tensor x = ot_test::random_tensor(DType::kFloat32, {2, 3}, rng);
  runtime::GraphExecutor cpu(g, kOpsets, ExecOptions{});
  runtime::GraphExecutor dev(g, kOpsets, on_test_provider());
  const auto ref = run(cpu, {x});
  const auto got = run(dev, {x});
  EXPECT_EQ(std::memcmp(ref[0].tensor.raw_data(), got[0].tensor.raw_data(), ref[0].tensor.nbytes()), 0);
  EXPECT_TRUE(got[0].tensor.device().is_host());  // results come back to the host
  const auto a = assignment_of(dev);
  EXPECT_TRUE(has(a, "Relu node 'Relu_a' on TestExecutionProvider"));
  EXPECT_TRUE(has(a, "LeakyRelu node 'LeakyRelu_b' on CPUExecutionProvider"));
  EXPECT_TRUE(has(a, "Add node 'Add_y' on TestExecutionProvider"));
  // x to cpu:1 (read by Relu and Add: one copy), a back to the host for LeakyRelu, b to cpu:1 for
  // Add, y back to the host.
  EXPECT_TRUE(has(a, "copy of 'x' to cpu:1"));
  EXPECT_TRUE(has(a, "copy of 'a' to cpu"));
  EXPECT_TRUE(has(a, "copy of 'b' to cpu:1"));
  EXPECT_TRUE(has(a, "copy of 'y' to cpu"));
  EXPECT_EQ(dev.last_stats().device_copies, 4u);
  EXPECT_EQ(dev.last_stats().fallback_steps, 1u);
  EXPECT_EQ(cpu.last_stats().device_copies, 0u);
}

TEST(Providers, HostMemoryInputsStayOnTheHost) {
  // Reshape on the test provider declares its shape input (1) host memory: a fed shape is read
  // where it is (only the data moves to cpu:1)...
  std::mt19937 rng(2);
  Tensor x = ot_test::random_tensor(DType::kFloat32, {2, 3}, rng);
  {
    auto g = std::make_shared<ir::Graph>();
    g->inputs = {value_info("x", DType::kFloat32, {2, 3}), value_info("s", DType::kInt64, {2})};
    g->nodes.push_back(make_node("Reshape", {"x", "s"}, {"y"}));
    g->outputs = {value_info("y")};
    runtime::GraphExecutor dev(g, kOpsets, on_test_provider());
    const auto out = run(dev, {x, Tensor::from_vector<int64_t>({2}, {3, 2})});
    EXPECT_EQ(out[0].tensor.shape(), (Shape{3, 2}));
    const auto a = assignment_of(dev);
    EXPECT_TRUE(has(a, "Reshape node 'Reshape_y' on TestExecutionProvider"));
    EXPECT_TRUE(has(a, "copy of 'x' to cpu:1"));
    EXPECT_FALSE(has(a, "copy of 's'"));
    EXPECT_EQ(dev.last_stats().device_copies, 2u);  // x there, y back
  }
  // ...and a shape computed on cpu:1 (Add of int64 tensors) is copied to the host for it.
  {
    auto g = std::make_shared<ir::Graph>();
    g->inputs = {value_info("x", DType::kFloat32, {2, 3}), value_info("s", DType::kInt64, {2}),
                 value_info("d", DType::kInt64, {2})};
    g->nodes.push_back(make_node("Add", {"s", "d"}, {"s2"}));
    g->nodes.push_back(make_node("Reshape", {"x", "s2"}, {"z"}));
    g->outputs = {value_info("z")};
    runtime::GraphExecutor dev(g, kOpsets, on_test_provider());
    const auto out = run(dev, {x, Tensor::from_vector<int64_t>({2}, {3, 2}), Tensor::from_vector<int64_t>({2}, {3, -1})});
    EXPECT_EQ(out[0].tensor.shape(), (Shape{6, 1}));
    const auto a = assignment_of(dev);
    EXPECT_TRUE(has(a, "Add node 'Add_s2' on TestExecutionProvider"));
    EXPECT_TRUE(has(a, "copy of 's2' to cpu"));
  }
}

TEST(Providers, InPlaceUpdateAcrossDevicesIsCopiedBack) {
  // AccumulateGradients updates a state in place. On the CPU the update aliases the state; on the
  // test provider the accumulator moves to cpu:1, is updated there and copied back after the run.
  auto g = std::make_shared<ir::Graph>();
  g->inputs = {value_info("g", DType::kFloat32, {4}), value_info("reset", DType::kBool, {1})};
  g->initializers.emplace_back("acc", Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  g->nodes.push_back(make_node("AccumulateGradients", {"reset", "acc", "g"}, {"acc_new"}, {}, "com.onnxtrain"));
  g->outputs = {value_info("acc_new")};
  for (bool device : {false, true}) {
    ExecOptions o = device ? on_test_provider() : ExecOptions{};
    auto gg = std::make_shared<ir::Graph>(*g);
    gg->initializers[0].second = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
    runtime::GraphExecutor ex(gg, kOpsets, o, {}, {"acc"});
    runtime::PlanRequest req;
    req.updates = {{"acc_new", "acc"}};
    const size_t id = ex.add_request(req);
    Value gv = Value::of(Tensor::from_vector<float>({4}, {10, 20, 30, 40}));
    Value rv = Value::of(Tensor::from_vector<bool>({1}, {false}));
    std::vector<Value> out;
    ex.run({&gv, &rv}, id, out);
    const float* acc = gg->initializer("acc")->data<float>();
    EXPECT_EQ(std::vector<float>(acc, acc + 4), (std::vector<float>{11, 22, 33, 44})) << device;
    EXPECT_EQ(ex.last_stats().state_in_place, device ? 0u : 1u);
    EXPECT_EQ(ex.last_stats().state_copies, device ? 1u : 0u);
  }
}

TEST(Providers, StateStaysOnTheDeviceBetweenRuns) {
  // keep_state_on_device: 'acc', read and updated only on cpu:1, lives there between runs (no
  // copies, updated in place) and the host's initializer lags until sync_state_to_host; 'h', read
  // on both devices, stays on the host. A host write reaches the device before the next run.
  auto g = std::make_shared<ir::Graph>();
  g->inputs = {value_info("g", DType::kFloat32, {4}), value_info("reset", DType::kBool, {1})};
  g->initializers.emplace_back("acc", Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  g->initializers.emplace_back("h", Tensor::from_vector<float>({4}, {-1, 2, -3, 4}));
  g->nodes.push_back(make_node("AccumulateGradients", {"reset", "acc", "g"}, {"acc_new"}, {}, "com.onnxtrain"));
  g->nodes.push_back(make_node("Add", {"acc", "g"}, {"y"}));
  g->nodes.push_back(make_node("LeakyRelu", {"h"}, {"hl"}));
  g->nodes.push_back(make_node("Add", {"hl", "h"}, {"z"}));
  g->nodes.push_back(make_node("Shape", {"acc"}, {"acc_shape"}));  // CPU only, but folded: reads no data
  g->outputs = {value_info("y"), value_info("z"), value_info("acc_shape")};
  runtime::GraphExecutor ex(g, kOpsets, on_test_provider(), {}, {"acc", "h"});
  ex.keep_state_on_device(true);
  runtime::PlanRequest req;
  req.outputs = {"y", "z", "acc_shape"};
  req.updates = {{"acc_new", "acc"}};
  const size_t id = ex.add_request(req);
  Value gv = Value::of(Tensor::from_vector<float>({4}, {10, 20, 30, 40}));
  Value rv = Value::of(Tensor::from_vector<bool>({1}, {false}));
  std::vector<Value> out;
  auto floats = [](const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); };
  for (int i = 0; i < 3; ++i) ex.run({&gv, &rv}, id, out);
  // y = acc + g, the update acc + g: after three runs both are 1 + 3 * 10, ...
  EXPECT_EQ(floats(out[0].tensor), (std::vector<float>{31, 62, 93, 124}));
  const std::vector<float> z = floats(out[1].tensor), z_ref{-1.01f, 4, -3.03f, 8};  // LeakyRelu(h) + h
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(z[i], z_ref[i], 1e-6) << i;
  EXPECT_EQ(std::vector<int64_t>(out[2].tensor.data<int64_t>(), out[2].tensor.data<int64_t>() + 1), (std::vector<int64_t>{4}));
  EXPECT_EQ(ex.device_state_count(), 1u);
  EXPECT_EQ(ex.last_stats().state_in_place, 1u);
  EXPECT_EQ(ex.last_stats().state_copies, 0u);
  const auto a = assignment_of(ex);
  EXPECT_FALSE(has(a, "copy of 'acc'"));
  EXPECT_TRUE(has(a, "copy of 'h' to cpu:1"));
  EXPECT_EQ(floats(*g->initializer("acc")), (std::vector<float>{1, 2, 3, 4}));  // the host's lags
  EXPECT_THROW(ex.state_changed_on_host(), RuntimeError);  // it would lose the device's updates
  ex.sync_state_to_host();
  EXPECT_EQ(floats(*g->initializer("acc")), (std::vector<float>{31, 62, 93, 124}));
  ex.sync_state_to_host();  // nothing ran since: no copy
  const long copies = ot_test::test_provider().copies;
  ex.sync_state_to_host();
  EXPECT_EQ(ot_test::test_provider().copies, copies);
  // A host write reaches the device before the next run.
  std::fill_n(g->initializer("acc")->data<float>(), 4, 0.5f);
  ex.state_changed_on_host();
  ex.run({&gv, &rv}, id, out);
  EXPECT_EQ(floats(out[0].tensor), (std::vector<float>{10.5f, 20.5f, 30.5f, 40.5f}));
  ex.sync_state_to_host();
  EXPECT_EQ(floats(*g->initializer("acc")), (std::vector<float>{10.5f, 20.5f, 30.5f, 40.5f}));
  // Without the mode the state is copied each run (InPlaceUpdateAcrossDevicesIsCopiedBack).
  runtime::PlanRequest partial;
  partial.outputs = {"y"};
  partial.backward_outputs = {"z"};
  runtime::GraphExecutor px(g, kOpsets, on_test_provider(), {}, {"acc", "h"});
  px.keep_state_on_device(true);
  const size_t pid = px.add_request(partial);
  runtime::PartialRun state;
  EXPECT_THROW(px.run_forward({&gv, &rv}, pid, state, out), NotImplemented);
}

TEST(Providers, OneArenaPerDeviceAndFoldingOnTheCpu) {
  const long before = ot_test::test_provider_live_bytes();
  auto g = std::make_shared<ir::Graph>();
  g->inputs = {value_info("x", DType::kFloat32, {64})};
  g->initializers.emplace_back("k", Tensor::from_vector<float>({64}, std::vector<float>(64, 0.5f)));
  g->nodes.push_back(make_node("Mul", {"k", "k"}, {"kk"}));  // constant: folded by the CPU provider
  g->nodes.push_back(make_node("Mul", {"x", "kk"}, {"a"}));
  g->nodes.push_back(make_node("Exp", {"a"}, {"b"}));
  g->nodes.push_back(make_node("LeakyRelu", {"b"}, {"c"}));
  g->nodes.push_back(make_node("Exp", {"c"}, {"y"}));
  g->outputs = {value_info("y")};
  {
    runtime::GraphExecutor dev(g, kOpsets, on_test_provider());
    std::mt19937 rng(3);
    const Tensor x = ot_test::random_tensor(DType::kFloat32, {64}, rng);
    const long c0 = ot_test::test_provider().copies;
    run(dev, {x});
    const long c1 = ot_test::test_provider().copies;
    const auto out = run(dev, {x});
    const long c2 = ot_test::test_provider().copies;
    EXPECT_EQ(dev.last_stats().folded_nodes, 1u);
    EXPECT_FALSE(has(assignment_of(dev), "Mul node 'Mul_kk'"));
    // The folded constant moves to the device once, when the plan is made: no copy step per run.
    EXPECT_FALSE(has(assignment_of(dev), "copy of 'kk'"));
    EXPECT_EQ(c1 - c0, c2 - c1 + 1);
    for (int64_t i = 0; i < 64; ++i) {  // Exp(LeakyRelu(Exp(x * 0.25))): LeakyRelu of a positive value
      const double ref = std::exp(std::exp(double(x.data<float>()[i]) * 0.25));
      EXPECT_NEAR(out[0].tensor.data<float>()[i], ref, 1e-5 * ref) << i;
    }
    // cpu:1 holds an arena (a, b, the copies), the host another (c's input copy...).
    EXPECT_GT(ot_test::test_provider_live_bytes(), before);
  }
  EXPECT_EQ(ot_test::test_provider_live_bytes(), before);  // released with the executor
}

TEST(Providers, DecliningKernelFallsBackToTheNextProvider) {
  // The test provider's Cast declines string outputs: the CPU provider runs it.
  auto g = std::make_shared<ir::Graph>();
  g->inputs = {value_info("x", DType::kFloat32, {3})};
  g->nodes.push_back(make_node("Cast", {"x"}, {"s"}, {ot_test::attr_int("to", int64_t(DType::kString))}));
  g->nodes.push_back(make_node("Cast", {"x"}, {"d"}, {ot_test::attr_int("to", int64_t(DType::kFloat64))}));
  g->outputs = {value_info("s", DType::kString), value_info("d", DType::kFloat64)};
  runtime::GraphExecutor dev(g, kOpsets, on_test_provider());
  const auto out = run(dev, {Tensor::from_vector<float>({3}, {1.5f, -2, 0})});
  EXPECT_EQ(out[0].tensor.data<std::string>()[0], "1.5");
  EXPECT_EQ(out[1].tensor.data<double>()[1], -2.0);
  const auto a = assignment_of(dev);
  EXPECT_TRUE(has(a, "Cast node 'Cast_s' on CPUExecutionProvider"));
  EXPECT_TRUE(has(a, "Cast node 'Cast_d' on TestExecutionProvider"));
}
