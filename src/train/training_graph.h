// Graph transformations around training: which initializers train, which BatchNormalization
// statistics to write back, and the inference graph of a training model.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace onnxtrain::train {

/// A BatchNormalization running statistic: node output `output` holds the new value of
/// initializer `initializer` after a training step.
struct RunningStat {
  std::string output, initializer;
};

/// BatchNormalization nodes in training mode (training_mode=1, opset >= 14): their running mean
/// and variance outputs (named here when the model leaves them unnamed) and initializers.
std::vector<RunningStat> batchnorm_running_stats(ir::Model& m);

/// Float initializers that are weights: not used only as shape/index/axes inputs of operators,
/// not BatchNormalization running statistics (onnxcustom's get_train_initializer, refined).
std::vector<std::string> trainable_initializers(const ir::Model& m);

/// The model for inference: training-mode BatchNormalization and Dropout switched to inference,
/// outputs `outputs` (empty: all outputs; with `drop_loss`, all but `loss` and the outputs that
/// need inputs only the loss uses), unused nodes, inputs and initializers removed. Shares the
/// initializer storage with `m`.
ir::Model inference_graph(const ir::Model& m, const std::vector<std::string>& outputs, bool drop_loss,
                          const std::string& loss = "");

}  // namespace onnxtrain::train
