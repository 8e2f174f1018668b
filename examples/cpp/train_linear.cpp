// onnxtrain's C++ API from an installed package (find_package(onnxtrain) or pkg-config): trains
// a model that contains its loss with SGD, then runs the trained model for inference.
//
//   train_linear MODEL.onnx STEPS LR OUT.onnx
//
// MODEL.onnx has inputs X [8, 3] and Y [8, 1] and a scalar output "loss"; it is trained on a fixed
// batch (X[i][j] = sin(3 i + j + 1), Y[i] = cos(i)). Prints "step K LOSS" per step, exports the
// trained inference model (loss removed) to OUT.onnx, and prints its prediction for X ("pred I VALUE").
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "onnxtrain/error.h"
#include "onnxtrain/session.h"
#include "onnxtrain/training.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.onnx STEPS LR OUT.onnx\n", argv[0]);
    return 2;
  }
  const int steps = std::atoi(argv[2]);
  const float lr = std::strtof(argv[3], nullptr);
  std::vector<float> x(8 * 3), y(8);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 3; ++j) x[i * 3 + j] = float(std::sin(3.0 * i + j + 1.0));
    y[i] = float(std::cos(double(i)));
  }
  try {
    onnxtrain::TrainingParameters params;
    params.loss_output_name = "loss";
    params.training_optimizer_name = "SGDOptimizer";
    onnxtrain::TrainingSession session(argv[1], params);
    const std::vector<std::pair<std::string, onnxtrain::Value>> feeds = {
        {"X", onnxtrain::Value::of(onnxtrain::Tensor::from_vector<float>({8, 3}, x))},
        {"Y", onnxtrain::Value::of(onnxtrain::Tensor::from_vector<float>({8, 1}, y))},
        {params.lr_params_feed_name, onnxtrain::Value::of(onnxtrain::Tensor::from_vector<float>({1}, {lr}))}};
    for (int k = 0; k < steps; ++k) {
      const std::vector<onnxtrain::Value> out = session.run({"loss"}, feeds);
      std::printf("step %d %.9g\n", k, double(out.at(0).tensor.data<float>()[0]));
    }
    session.export_model_to(argv[4]);  // the inference model: loss and optimizer removed
    onnxtrain::InferenceSession trained(argv[4]);
    const auto pred = trained.run({}, {{"X", onnxtrain::Tensor::from_vector<float>({8, 3}, x)}});
    for (int i = 0; i < 8; ++i) std::printf("pred %d %.9g\n", i, double(pred.at(0).data<float>()[i]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_linear: %s\n", e.what());
    return 1;
  }
  return 0;
}
