// The CUDA provider as a user reaches it (SessionOptions.providers) and the pieces the kernel
// tests do not cover: copies between host and device, the allocator, and whole training steps
// against the CPU provider. Without a device (or without -DONNXTRAIN_CUDA=ON) the device tests
// report themselves skipped with the reason; the error a session gives then is tested everywhere.
// (Every kernel and gradient test of the suite also reruns on the CUDA provider when a device is
// present: tests/cpp/test_provider.cpp, check_providers_agree.)
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>

#include "ir/onnx_io.h"
#include "onnxtrain/session.h"
#include "onnxtrain/training.h"
#include "index_image_test_util.h"
#include "test_provider.h"
#include "test_util.h"
#ifdef ONNXTRAIN_WITH_CUDA
#include "kernels/cuda/cuda_provider.h"
#endif

using namespace onnxtrain;
using ot_test::make_node;

namespace {

#define SKIP_WITHOUT_CUDA()                                                   \
  do {                                                                        \
    std::string why_;                                                         \
    if (!ot_test::cuda_axis_available(&why_)) GTEST_SKIP() << why_;           \
  } while (0)

// X [N, 16] -> MatMul W1 + b1 -> LayerNormalization -> Relu -> MatMul W2 + b2 -> Tanh -> MatMul W3
// -> logits [N, 4]; the loss is added by add_loss_output.
std::string mlp_model(uint32_t seed) {
  ir::Model m;
  m.opsets = {{"", 17}};
  m.graph = std::make_shared<ir::Graph>();
  auto& g = *m.graph;
  std::mt19937 rng(seed);
  g.inputs = {ir::ValueInfo{"X", ir::TypeInfo::tensor(DType::kFloat32, {-1, 16}), ""}};
  auto init = [&](const std::string& n, Shape s, double r) {
    g.initializers.emplace_back(n, ot_test::random_tensor(DType::kFloat32, s, rng, -r, r));
  };
  init("W1", {16, 32}, 0.4);
  init("b1", {32}, 0.1);
  init("gamma", {32}, 1.0);
  init("beta", {32}, 0.1);
  init("W2", {32, 24}, 0.3);
  init("b2", {24}, 0.1);
  init("W3", {24, 4}, 0.4);
  g.nodes.push_back(make_node("MatMul", {"X", "W1"}, {"h1"}));
  g.nodes.push_back(make_node("Add", {"h1", "b1"}, {"h2"}));
  g.nodes.push_back(make_node("LayerNormalization", {"h2", "gamma", "beta"}, {"h3"}, {ot_test::attr_float("epsilon", 1e-5f)}));
  g.nodes.push_back(make_node("Relu", {"h3"}, {"h4"}));
  g.nodes.push_back(make_node("MatMul", {"h4", "W2"}, {"h5"}));
  g.nodes.push_back(make_node("Add", {"h5", "b2"}, {"h6"}));
  g.nodes.push_back(make_node("Tanh", {"h6"}, {"h7"}));
  g.nodes.push_back(make_node("MatMul", {"h7", "W3"}, {"y"}));
  g.outputs = {ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kFloat32, {-1, 4}), ""}};
  return add_loss_output(ir::serialize_model(m), "cross_entropy", "loss", "label", "", {}, "", {{"reduction", "mean"}});
}

// Runs `steps` training steps of the MLP with `optimizer` on `providers`, the weights scaled by 0.9
// through get_state / load_state halfway, every feed (the learning rate too) placed on
// `feed_device`; returns the losses and the final state.
std::pair<std::vector<double>, std::vector<std::pair<std::string, Tensor>>> train_mlp(
    const std::vector<std::string>& providers, const std::string& optimizer, int steps,
    const Device& feed_device = Device::cpu()) {
  const std::string model = mlp_model(7);
  TrainingParameters p;
  p.loss_output_name = "loss";
  p.training_optimizer_name = optimizer;
  p.enable_grad_norm_clip = optimizer == "AdamOptimizer";
  SessionOptions so;
  so.providers = providers;
  TrainingSession s(model.data(), model.size(), p, so);
  std::mt19937 rng(3);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    Tensor X = ot_test::random_tensor(DType::kFloat32, {64, 16}, rng);
    Tensor label = Tensor::empty(DType::kInt64, {64});
    for (int64_t k = 0; k < 64; ++k) label.data<int64_t>()[k] = int64_t(rng() % 4);
    const Tensor lr = Tensor::from_vector<float>({1}, {0.05f});
    auto out = s.run({"loss"}, {{"X", Value::of(to_device(X, feed_device))},
                                {"label", Value::of(to_device(label, feed_device))},
                                {"Learning_Rate", Value::of(to_device(lr, feed_device))}});
    EXPECT_TRUE(out[0].tensor.device().is_host());
    losses.push_back(ot_test::to_double(out[0].tensor)[0]);
    if (i == steps / 2) {
      // The host reads and writes the state mid-training: on CUDA it lives on the device between
      // steps, and both directions must sync (a stale read or a lost write departs from the CPU).
      auto weights = s.get_state();
      for (auto& [n, t] : weights)
        if (t.dtype() == DType::kFloat32)
          for (int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] *= 0.9f;
      s.load_state(weights);
      s.load_optimizer_state(s.get_optimizer_state());
    }
  }
  return {losses, s.get_state()};
}

}  // namespace

TEST(CudaProvider, SessionWithoutADeviceNamesWhy) {
  std::string why;
  if (ot_test::cuda_axis_available(&why)) GTEST_SKIP() << "a CUDA device is present (the device tests run instead)";
  const std::string model = ot_test::linear_model_bytes(false);
  SessionOptions so;
  so.providers = {"CUDAExecutionProvider", "CPUExecutionProvider"};
  try {
    InferenceSession s(model.data(), model.size(), so);
    ADD_FAILURE() << "a session asked for CUDAExecutionProvider was made without a device";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("CUDAExecutionProvider is not available"), std::string::npos) << e.what();
  }
  so.providers = {"NoSuchExecutionProvider"};
  try {
    InferenceSession s(model.data(), model.size(), so);
    ADD_FAILURE() << "an unknown provider was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown execution provider 'NoSuchExecutionProvider'"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(available_execution_providers(), std::vector<std::string>{"CPUExecutionProvider"});
}

TEST(CudaProvider, CopiesRoundTripEveryElementType) {
  SKIP_WITHOUT_CUDA();
  ExecutionProvider& cuda = *ot_test::cuda_axis_provider();
  auto ctx = cuda.make_context(ExecOptions{});
  std::mt19937 rng(11);
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt64, DType::kInt32,
                   DType::kBool, DType::kUInt8})
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), int64_t(1) << 20}) {
      Tensor host = ot_test::random_tensor(dt, {n}, rng);
      Tensor dev = Tensor::empty(dt, {n}, cuda.allocator());
      EXPECT_EQ(dev.device().name(), "cuda:0");
      cuda.copy(host, dev, *ctx);
      Tensor back = Tensor::empty(dt, {n});
      if (n > 0) std::memset(back.raw_data(), 0x5a, back.nbytes());  // poisoned: every byte must come back
      cuda.copy(dev, back, *ctx);
      EXPECT_TRUE(ot_test::same_bits(host, back)) << dtype_name(dt) << " x " << n;
    }
}

TEST(CudaProvider, InferenceMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  const std::string model = mlp_model(5);
  SessionOptions cpu_so, cuda_so;
  cuda_so.providers = {"CUDAExecutionProvider", "CPUExecutionProvider"};
  InferenceSession cpu(model.data(), model.size(), cpu_so), gpu(model.data(), model.size(), cuda_so);
  std::mt19937 rng(1);
  Tensor X = ot_test::random_tensor(DType::kFloat32, {33, 16}, rng);
  Tensor label = Tensor::zeros(DType::kInt64, {33});
  const auto a = cpu.run({"loss", "y"}, {{"X", X}, {"label", label}});
  const auto b = gpu.run({"loss", "y"}, {{"X", X}, {"label", label}});
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = ot_test::to_double(a[i]), y = ot_test::to_double(b[i]);
    ASSERT_EQ(x.size(), y.size());
    for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(y[k], x[k], 1e-4 * (1 + std::fabs(x[k]))) << "output " << i << " [" << k << "]";
  }
  // The products, normalization and activations ran on the device.
  size_t on_cuda = 0;
  for (const auto& n : gpu.node_assignment()) on_cuda += n.provider == "CUDAExecutionProvider";
  EXPECT_GE(on_cuda, 8u);
}

TEST(CudaProvider, TrainingStepsMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  for (const std::string opt : {"SGDOptimizer", "AdamOptimizer"}) {
    const auto [cpu_losses, cpu_state] = train_mlp({}, opt, 6);
    const auto [gpu_losses, gpu_state] = train_mlp({"CUDAExecutionProvider", "CPUExecutionProvider"}, opt, 6);
    ASSERT_EQ(cpu_losses.size(), gpu_losses.size());
    for (size_t i = 0; i < cpu_losses.size(); ++i)
      EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 2e-4 * (1 + std::fabs(cpu_losses[i]))) << opt << " step " << i;
    EXPECT_LT(cpu_losses.back(), cpu_losses.front()) << opt << ": the reference does not learn";
    ASSERT_EQ(cpu_state.size(), gpu_state.size());
    for (size_t k = 0; k < cpu_state.size(); ++k) {
      EXPECT_EQ(cpu_state[k].first, gpu_state[k].first);
      const auto x = ot_test::to_double(cpu_state[k].second), y = ot_test::to_double(gpu_state[k].second);
      ASSERT_EQ(x.size(), y.size()) << cpu_state[k].first;
      double worst = 0;
      for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]) / (1e-3 + std::fabs(x[i])));
      EXPECT_LT(worst, 1e-3) << opt << ": " << cpu_state[k].first;
    }
  }
}

// Tensors on a device outside a session (copy_tensor, to_device: what OrtValues on "cuda" move
// through), shown on the test provider's cpu:1, a device of its own in host memory whose provider
// counts its copies: a round trip keeps every bit, the copies go through the provider, and
// mismatched tensors, strings off the host and devices nobody serves are refused by name.
TEST(DeviceTensors, CopiesGoThroughTheDevicesProvider) {
  ot_test::TestProvider& tp = ot_test::test_provider();
  const Device dev{Device::Type::kCPU, 1};
  std::string why;
  EXPECT_TRUE(device_available(dev, &why)) << why;
  std::mt19937 rng(5);
  for (DType dt : {DType::kFloat32, DType::kInt64, DType::kBool, DType::kFloat16}) {
    const Tensor host = ot_test::random_tensor(dt, {3, 7}, rng);
    const long before = tp.copies.load();
    const Tensor there = to_device(host, dev);
    EXPECT_EQ(there.device(), dev);
    EXPECT_NE(there.raw_data(), host.raw_data());
    const Tensor back = to_device(there, Device::cpu());
    EXPECT_TRUE(back.device().is_host());
    EXPECT_TRUE(ot_test::same_bits(host, back)) << dtype_name(dt);
    EXPECT_EQ(tp.copies.load() - before, 2) << "both copies go through the device's provider";
  }
  Tensor small = Tensor::empty(DType::kFloat32, {2}, device_allocator(dev));
  auto refused = [](const std::function<void()>& f, const char* what) {
    ot_test::expect_error<InvalidArgument>(f, {what});
  };
  refused([&] { copy_tensor(Tensor::zeros(DType::kFloat32, {3}), small); }, "element types and counts must match");
  refused([&] { copy_tensor(Tensor::zeros(DType::kInt32, {2}), small); }, "element types and counts must match");
  Tensor strings = Tensor::empty(DType::kString, {1});
  refused([&] { to_device(strings, dev); }, "string tensors live in host memory only");
  const Device nobody{Device::Type::kCPU, 7};
  EXPECT_FALSE(device_available(nobody, &why));
  EXPECT_NE(why.find("'cpu:7' is not served by any execution provider"), std::string::npos) << why;
  refused([&] { device_allocator(nobody); }, "cpu:7");
  refused([&] { to_device(small, nobody); }, "cpu:7");
  const Device cuda1{Device::Type::kCUDA, 1};
  EXPECT_FALSE(device_available(cuda1, &why));
  EXPECT_NE(why.find("cuda:1"), std::string::npos) << why;
  std::string no_cuda;
  if (!ot_test::cuda_axis_available(&no_cuda)) {
    EXPECT_FALSE(device_available({Device::Type::kCUDA, 0}, &why));
    EXPECT_NE(why.find("CUDAExecutionProvider is not available"), std::string::npos) << why;
  }
}

// Feeds on a device (cpu:1 here; "cuda" OrtValues and IOBinding in Python): a session's plan reads
// its feeds from the host, so they are copied there first, the learning rate too, and the results
// are the host feeds' bit for bit; an output buffer on the device receives a copy of the host result
// and comes back as that buffer.
TEST(DeviceTensors, SessionsTakeFeedsAndBuffersOnADevice) {
  const Device dev{Device::Type::kCPU, 1};
  ot_test::TestProvider& tp = ot_test::test_provider();
  const std::string model = mlp_model(5);
  InferenceSession s(model.data(), model.size(), SessionOptions{});
  std::mt19937 rng(2);
  const Tensor X = ot_test::random_tensor(DType::kFloat32, {9, 16}, rng);
  const Tensor label = Tensor::from_vector<int64_t>({9}, {0, 1, 2, 3, 0, 1, 2, 3, 0});
  const auto host = s.run({"loss", "y"}, {{"X", X}, {"label", label}});
  const Value Xd = Value::of(to_device(X, dev)), labeld = Value::of(to_device(label, dev));
  long before = tp.copies.load();
  const auto fed = s.run({"loss", "y"}, {{"X", Xd.tensor}, {"label", labeld.tensor}});
  EXPECT_EQ(tp.copies.load() - before, 2) << "each device feed copied to the host once";
  ASSERT_EQ(fed.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(fed[i].device().is_host());
    EXPECT_TRUE(ot_test::same_bits(host[i], fed[i])) << "output " << i;
  }
  Tensor buffer = Tensor::empty(DType::kFloat32, {9, 4}, device_allocator(dev));
  const void* mem = buffer.raw_data();
  RunOptions ro;
  before = tp.copies.load();
  auto into = s.run_into({"y"}, {{"X", &Xd}, {"label", &labeld}}, ro, {Value::of(buffer)});
  ASSERT_EQ(into.size(), 1u);
  EXPECT_EQ(into[0].tensor.raw_data(), mem) << "the device buffer is handed back";
  EXPECT_EQ(into[0].tensor.device(), dev);
  EXPECT_EQ(tp.copies.load() - before, 3) << "two feeds in, one output out";
  EXPECT_TRUE(ot_test::same_bits(host[1], to_device(into[0].tensor, Device::cpu())));
  // A buffer of another shape is left as it was; the result is a new host tensor.
  Tensor wrong = Tensor::empty(DType::kFloat32, {3, 4}, device_allocator(dev));
  into = s.run_into({"y"}, {{"X", &Xd}, {"label", &labeld}}, ro, {Value::of(wrong)});
  EXPECT_TRUE(into[0].tensor.device().is_host());
  EXPECT_TRUE(ot_test::same_bits(host[1], into[0].tensor));
  // Training: every feed on the device, the learning rate included (read by the host).
  for (const std::string opt : {"SGDOptimizer", "AdamOptimizer"}) {
    const auto [host_losses, host_state] = train_mlp({}, opt, 4);
    const auto [dev_losses, dev_state] = train_mlp({}, opt, 4, dev);
    EXPECT_EQ(host_losses, dev_losses) << opt;
    ASSERT_EQ(host_state.size(), dev_state.size());
    for (size_t k = 0; k < host_state.size(); ++k)
      EXPECT_TRUE(ot_test::same_bits(host_state[k].second, dev_state[k].second)) << opt << ": " << host_state[k].first;
  }
}

// The same on cuda:0: a round trip of every element type through to_device, and a session fed
// device tensors (the CUDA provider's and the CPU's nodes) with an output buffer on the device.
TEST(CudaProvider, DeviceFeedsAndBuffersMatchHostOnes) {
  SKIP_WITHOUT_CUDA();
  const Device dev{Device::Type::kCUDA, 0};
  std::mt19937 rng(4);
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kInt64, DType::kBool, DType::kUInt8})
    for (int64_t n : {int64_t(0), int64_t(5), int64_t(1) << 18}) {
      const Tensor host = ot_test::random_tensor(dt, {n}, rng);
      const Tensor there = to_device(host, dev);
      EXPECT_EQ(there.device(), dev);
      EXPECT_TRUE(ot_test::same_bits(host, to_device(there, Device::cpu()))) << dtype_name(dt) << " x " << n;
    }
  const std::string model = mlp_model(5);
  SessionOptions so;
  so.providers = {"CUDAExecutionProvider", "CPUExecutionProvider"};
  InferenceSession s(model.data(), model.size(), so);
  const Tensor X = ot_test::random_tensor(DType::kFloat32, {17, 16}, rng);
  const Tensor label = Tensor::zeros(DType::kInt64, {17});
  const auto host = s.run({"y"}, {{"X", X}, {"label", label}});
  const Value Xd = Value::of(to_device(X, dev)), labeld = Value::of(to_device(label, dev));
  Tensor buffer = Tensor::empty(DType::kFloat32, {17, 4}, device_allocator(dev));
  RunOptions ro;
  auto into = s.run_into({"y"}, {{"X", &Xd}, {"label", &labeld}}, ro, {Value::of(buffer)});
  EXPECT_EQ(into[0].tensor.raw_data(), buffer.raw_data());
  EXPECT_TRUE(ot_test::same_bits(host[0], to_device(into[0].tensor, Device::cpu())));
  const auto [host_losses, host_state] = train_mlp({"CUDAExecutionProvider", "CPUExecutionProvider"}, "AdamOptimizer", 4);
  const auto [dev_losses, dev_state] =
      train_mlp({"CUDAExecutionProvider", "CPUExecutionProvider"}, "AdamOptimizer", 4, dev);
  EXPECT_EQ(host_losses, dev_losses);
}

// TrainingSession::node_assignment (what bench_cuda_step reports: which nodes ran where): empty
// before the first run, then the last run's plan step by step, forward, backward and optimizer
// nodes, each on the provider that ran it (here all on the CPU).
TEST(TrainingSessionPlan, NodeAssignmentIsTheLastRunsPlan) {
  const std::string model = mlp_model(7);
  TrainingParameters p;
  p.loss_output_name = "loss";
  p.training_optimizer_name = "SGDOptimizer";
  TrainingSession s(model.data(), model.size(), p);
  EXPECT_TRUE(s.node_assignment().empty());
  std::mt19937 rng(3);
  Tensor X = ot_test::random_tensor(DType::kFloat32, {8, 16}, rng);
  Tensor label = Tensor::from_vector<int64_t>({8}, {0, 1, 2, 3, 0, 1, 2, 3});
  s.run({"loss"}, {{"X", Value::of(X)}, {"label", Value::of(label)},
                   {"Learning_Rate", Value::of(Tensor::from_vector<float>({1}, {0.05f}))}});
  std::map<std::string, int> ops;
  for (const AssignedNode& n : s.node_assignment()) {
    EXPECT_EQ(n.provider, "CPUExecutionProvider") << n.name;
    ++ops[n.op_type];
  }
  EXPECT_EQ(ops["LayerNormalization"], 1);
  EXPECT_EQ(ops["LayerNormalizationGrad"], 1);
  EXPECT_GE(ops["SGDOptimizer"], 1);
}
