// make_artifacts (include/onnxtrain/artifacts.h): onnxruntime's artifact layout, and one training
// step of the artifacts against a naive double-precision computation of a linear model's MSE.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/onnx_io.h"
#include "onnxtrain/artifacts.h"
#include "onnxtrain/on_device.h"
#include "test_util.h"

using namespace onnxtrain;
using ot_test::make_node;

namespace {

// y = (X W + b) * s; s [1] is in neither list (a constant of the models).
std::string linear() { return ot_test::linear_model_bytes(true); }

std::vector<std::string> names_of(const std::vector<NodeArg>& v) {
  std::vector<std::string> r;
  for (const auto& a : v) r.push_back(a.name);
  return r;
}

}  // namespace

TEST(Artifacts, LayoutIsOnnxruntimes) {
  ArtifactOptions o;
  o.requires_grad = {"W"};
  o.frozen_params = {"b"};
  o.loss = "MSELoss";
  o.optimizer = "AdamW";
  const Artifacts a = make_artifacts(linear(), o);
  EXPECT_TRUE(a.onnxtrain_operators.empty());
  InferenceSession train(a.training_model.data(), a.training_model.size());
  EXPECT_EQ(names_of(train.get_inputs()),
            (std::vector<std::string>{"X", "target", "W", "b", "W_grad.accumulation.buffer", "lazy_reset_grad"}));
  EXPECT_EQ(names_of(train.get_outputs()), (std::vector<std::string>{"loss", "W_grad.accumulation.out"}));
  InferenceSession eval(a.eval_model.data(), a.eval_model.size());
  EXPECT_EQ(names_of(eval.get_inputs()), (std::vector<std::string>{"X", "target", "W", "b"}));
  InferenceSession opt(a.optimizer_model.data(), a.optimizer_model.size());
  EXPECT_EQ(names_of(opt.get_inputs()), (std::vector<std::string>{"learning_rate", "step", "params", "gradients",
                                                                   "first_order_moments", "second_order_moments"}));
  ASSERT_EQ(a.checkpoint.parameters.size(), 2u);  // s stays a constant of the models
  EXPECT_TRUE(a.checkpoint.parameters.at("W").requires_grad);
  EXPECT_FALSE(a.checkpoint.parameters.at("b").requires_grad);
}

TEST(Artifacts, TrainStepMatchesNaiveGradient) {
  ArtifactOptions o;
  o.requires_grad = {"W", "b"};
  o.loss = "MSELoss";
  const Artifacts a = make_artifacts(linear(), o);
  CheckpointState state = a.checkpoint;
  on_device::Module module(on_device::ModelSource::buffer(a.training_model), state);
  const std::vector<float> x = {1.f, 2.f, -1.f, 0.5f, 3.f, -2.f}, t = {0.3f, -0.7f, 1.1f};
  const std::vector<Value> out = module.train_step({Value::of(Tensor::from_vector<float>({3, 2}, x)),
                                                    Value::of(Tensor::from_vector<float>({3, 1}, t))});
  double loss = 0, gw[2] = {0, 0}, gb = 0;
  for (int i = 0; i < 3; ++i) {
    const double y = 2.0 * (x[2 * i] * 0.5 - x[2 * i + 1] * 0.25 + 0.1), d = y - t[i];
    loss += d * d / 3;
    for (int k = 0; k < 2; ++k) gw[k] += 2 * d * 2.0 * x[2 * i + k] / 3;
    gb += 2 * d * 2.0 / 3;
  }
  EXPECT_NEAR(out[0].tensor.data<float>()[0], loss, 1e-5 * loss);
  const Tensor& gW = state.parameter("W").grad;
  EXPECT_NEAR(gW.data<float>()[0], gw[0], 1e-5);
  EXPECT_NEAR(gW.data<float>()[1], gw[1], 1e-5);
  EXPECT_NEAR(state.parameter("b").grad.data<float>()[0], gb, 1e-5);
}

TEST(Artifacts, BadOptionsAreRefusedByName) {
  const std::string model = linear();
  auto refused = [&](ArtifactOptions o, const std::string& what) {
    try {
      make_artifacts(model, o);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  ArtifactOptions o;
  o.requires_grad = {"W"};
  refused([&] { auto c = o; c.requires_grad = {}; return c; }(), "requires_grad is empty");
  refused([&] { auto c = o; c.requires_grad = {"X"}; return c; }(), "'X', which is not an initializer");
  refused([&] { auto c = o; c.frozen_params = {"W"}; return c; }(), "both requires_grad and frozen_params");
  refused([&] { auto c = o; c.loss = "Huber"; return c; }(), "unknown loss 'Huber'");
  refused([&] { auto c = o; c.optimizer = "Lamb"; return c; }(), "unknown optimizer 'Lamb'");
  refused([&] { auto c = o; c.loss = "MSELoss"; c.additional_output_names = {"q"}; return c; }(),
          "'q', which is not a value");
  refused([&] { auto c = o; c.loss_input_names = {"y", "z"}; return c; }(), "loss_input_names holds 2 names");
}
