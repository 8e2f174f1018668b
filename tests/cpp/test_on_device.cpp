// onnxruntime's on-device Module, Optimizer and LinearLRScheduler (on_device.h) on artifacts in
// onnxruntime's layout: y = x * w, loss = sum((y - t)^2), the gradient 2 (y - t) x accumulated by
// InPlaceAccumulatorV2, SGDOptimizerV2 as the optimizer. References: the same arithmetic in double
// and onnxruntime's documented semantics (accumulation until lazy_reset_grad, the scheduler's
// formula, nominal states); tests/python/test_on_device.py checks AdamW against onnxruntime-web.
#include <cmath>

#include "ir/onnx_io.h"
#include "onnxtrain/on_device.h"
#include "test_util.h"

using namespace onnxtrain;
using namespace ot_test;
using on_device::LinearLRScheduler;
using on_device::ModelSource;
using on_device::Module;
using on_device::Optimizer;

namespace {

ir::Model model_of(std::vector<ir::Node> nodes, std::vector<ir::ValueInfo> inputs, std::vector<ir::ValueInfo> outputs) {
  ir::Model m;
  m.opsets = {{"", 17}, {"com.microsoft", 1}};
  m.graph = std::make_shared<ir::Graph>();
  m.graph->nodes = std::move(nodes);
  m.graph->inputs = std::move(inputs);
  m.graph->outputs = std::move(outputs);
  return m;
}

ModelSource bytes_of(const ir::Model& m) { return ModelSource::buffer(ir::serialize_model(m)); }

std::vector<ir::Node> forward() {
  return {make_node("Mul", {"x", "w"}, {"y"}), make_node("Sub", {"y", "t"}, {"d"}), make_node("Mul", {"d", "d"}, {"dd"}),
          make_node("ReduceSum", {"dd"}, {"loss"}, {attr_int("keepdims", 0)})};
}

ModelSource train_model() {
  auto nodes = forward();
  nodes.push_back(make_node("Add", {"d", "d"}, {"dy"}));
  nodes.push_back(make_node("Mul", {"dy", "x"}, {"w_grad"}));
  nodes.push_back(make_node("InPlaceAccumulatorV2", {"w_grad.accumulation.buffer", "w_grad", "lazy_reset_grad"},
                            {"w_grad.accumulation.out"}, {}, "com.microsoft"));
  return bytes_of(model_of(nodes,
                           {value_info("x", DType::kFloat32, {2}), value_info("t", DType::kFloat32, {2}),
                            value_info("w", DType::kFloat32, {2}), value_info("w_grad.accumulation.buffer", DType::kFloat32, {2}),
                            value_info("lazy_reset_grad", DType::kBool, {1})},
                           {value_info("loss", DType::kFloat32), value_info("w_grad.accumulation.out", DType::kBool, {1})}));
}

ModelSource eval_model() {
  return bytes_of(model_of(forward(),
                           {value_info("x", DType::kFloat32, {2}), value_info("t", DType::kFloat32, {2}),
                            value_info("w", DType::kFloat32, {2})},
                           {value_info("loss", DType::kFloat32), value_info("y", DType::kFloat32, {2})}));
}

ir::ValueInfo sequence_info(const std::string& name) {
  ir::ValueInfo v{name, {}, {}};
  v.type.kind = ir::TypeInfo::Kind::kSequence;
  v.type.inner = std::make_shared<ir::TypeInfo>(ir::TypeInfo::tensor(DType::kFloat32));
  return v;
}

ModelSource sgd_model() {
  return bytes_of(model_of({make_node("SGDOptimizerV2", {"learning_rate", "params", "gradients"}, {"flag"}, {}, "com.microsoft")},
                           {value_info("learning_rate", DType::kFloat32, {1}), sequence_info("params"), sequence_info("gradients")},
                           {value_info("flag", DType::kBool, {1})}));
}

CheckpointState state_with(const std::vector<float>& w) {
  CheckpointState s;
  Tensor t = Tensor::from_vector<float>({2}, w);
  s.parameters["w"] = {DType::kFloat32, t, true, {}, {}};
  return s;
}

std::vector<Value> inputs(const std::vector<float>& x, const std::vector<float>& t) {
  return {Value::of(Tensor::from_vector<float>({2}, x)), Value::of(Tensor::from_vector<float>({2}, t))};
}

}  // namespace

TEST(OnDevice, TrainStepsAccumulateAndSgdUpdatesTheState) {
  CheckpointState s = state_with({0.5f, -1.0f});
  Module m(train_model(), s, eval_model());
  EXPECT_EQ(m.train_input_names(), (std::vector<std::string>{"x", "t"}));
  EXPECT_EQ(m.train_output_names(), (std::vector<std::string>{"loss"}));
  EXPECT_EQ(m.eval_output_names(), (std::vector<std::string>{"loss", "y"}));
  const std::vector<double> x = {2, 3}, t = {1, -1};
  double w[2] = {0.5, -1.0};
  auto grad = [&](int i) { return 2 * (x[i] * w[i] - t[i]) * x[i]; };
  // Two steps without a reset: twice the gradient (onnxruntime's ModuleTrainStep).
  const std::vector<Value> out = m.train_step(inputs({2, 3}, {1, -1}));
  ASSERT_EQ(out.size(), 1u);
  const double loss = std::pow(x[0] * w[0] - t[0], 2) + std::pow(x[1] * w[1] - t[1], 2);
  EXPECT_NEAR(out[0].tensor.data<float>()[0], loss, 1e-5);
  m.train_step(inputs({2, 3}, {1, -1}));
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(s.parameter("w").grad.data<float>()[i], 2 * grad(i), 1e-5);
  // SGD: w -= lr g, the step counted, the learning rate onnxruntime's default.
  Optimizer opt(sgd_model(), m);
  EXPECT_FLOAT_EQ(opt.learning_rate(), 0.001f);
  opt.set_learning_rate(0.05f);
  opt.step();
  EXPECT_EQ(opt.step_count(), 1);
  for (int i = 0; i < 2; ++i) w[i] -= 0.05 * 2 * grad(i);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(s.parameter("w").data.data<float>()[i], w[i], 1e-6);
  // After lazy_reset_grad the buffer is overwritten.
  m.lazy_reset_grad();
  m.train_step(inputs({2, 3}, {1, -1}));
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(s.parameter("w").grad.data<float>()[i], grad(i), 1e-5);
  // Eval on the updated parameters.
  const std::vector<Value> ev = m.eval_step(inputs({2, 3}, {1, -1}));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_NEAR(ev[1].tensor.data<float>()[1], x[1] * w[1], 1e-6);
}

TEST(OnDevice, LinearSchedulerFollowsTheOptimizerStep) {
  CheckpointState s = state_with({1.0f, 1.0f});
  Module m(train_model(), s);
  Optimizer opt(sgd_model(), m);
  LinearLRScheduler sched(opt, 2, 6, 0.1f);
  EXPECT_FLOAT_EQ(opt.learning_rate(), 0.0f);  // step 0 of a warm-up
  EXPECT_FLOAT_EQ(opt.initial_learning_rate(), 0.1f);
  const float expected[] = {0.05f, 0.1f, 0.075f, 0.05f, 0.025f, 0.0f, 0.0f};
  for (float e : expected) {
    m.train_step(inputs({1, 1}, {0, 0}));
    opt.step();
    m.lazy_reset_grad();
    sched.step();
    EXPECT_NEAR(opt.learning_rate(), e, 1e-7) << "step " << opt.step_count();
  }
  EXPECT_THROW(LinearLRScheduler(opt, -1, 3, 0.1f), InvalidArgument);
}

TEST(OnDevice, NominalStateIsCompletedFromABuffer) {
  CheckpointState s;
  s.parameters["w"] = {DType::kFloat32, Tensor(), true, {}, {2}};
  s.nominal = true;
  Module m(train_model(), s, eval_model());
  EXPECT_EQ(m.parameters_size(), 2);
  EXPECT_THROW(m.train_step(inputs({1, 1}, {0, 0})), InvalidArgument);
  EXPECT_THROW(Optimizer(sgd_model(), m), InvalidArgument);
  EXPECT_THROW(m.copy_buffer_to_parameters(Tensor::from_vector<float>({3}, {1, 2, 3})), InvalidArgument);
  m.copy_buffer_to_parameters(Tensor::from_vector<float>({2}, {0.25f, 4.0f}), false);
  EXPECT_FALSE(s.nominal);
  const Tensor buffer = m.copy_parameters_to_buffer(false);
  EXPECT_EQ(buffer.data<float>()[1], 4.0f);
  m.train_step(inputs({1, 1}, {0, 0}));
  EXPECT_NEAR(s.parameter("w").grad.data<float>()[0], 2 * 0.25, 1e-6);
}

TEST(OnDevice, ExportKeepsWhatTheOutputsNeed) {
  TempDir dir;
  CheckpointState s = state_with({0.5f, -1.0f});
  Module m(train_model(), s, eval_model());
  m.export_model_for_inferencing(dir.path + "/inference.onnx", {"y"});
  InferenceSession sess(dir.path + "/inference.onnx");
  ASSERT_EQ(sess.get_inputs().size(), 1u);  // t and w are gone: t is unused, w an initializer
  EXPECT_EQ(sess.get_inputs()[0].name, "x");
  const auto y = sess.run({}, {{"x", Tensor::from_vector<float>({2}, {2, 3})}});
  EXPECT_FLOAT_EQ(y[0].data<float>()[0], 1.0f);
  EXPECT_FLOAT_EQ(y[0].data<float>()[1], -3.0f);
  EXPECT_THROW(m.export_model_for_inferencing(dir.path + "/bad.onnx", {"nope"}), InvalidArgument);
  Module no_eval(train_model(), s);
  EXPECT_THROW(no_eval.export_model_for_inferencing(dir.path + "/bad.onnx", {"y"}), InvalidArgument);
}

TEST(OnDevice, ArtifactsThatDoNotFitAreRefused) {
  CheckpointState s = state_with({0.5f, -1.0f});
  s.parameters["w"].requires_grad = false;
  EXPECT_THROW(Module(train_model(), s), InvalidArgument);  // a gradient buffer of a frozen parameter
  CheckpointState wrong;
  wrong.parameters["w"] = {DType::kFloat32, Tensor::from_vector<float>({3}, {1, 2, 3}), true, {}, {}};
  EXPECT_THROW(Module(train_model(), wrong), InvalidArgument);  // shape [3] for an input of shape [2]
  CheckpointState ok = state_with({0.5f, -1.0f});
  Module m(train_model(), ok);
  EXPECT_THROW(m.train_step({}), InvalidArgument);
  EXPECT_THROW(Optimizer(eval_model(), m), InvalidArgument);
}
