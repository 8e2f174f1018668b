// On-device training artifacts (onnxruntime's generate_artifacts), made by onnxtrain's own gradient
// builder: from an ONNX model, the training model (forward, loss, backward, gradients accumulated
// into "<p>_grad.accumulation.buffer" inputs by com.microsoft InPlaceAccumulatorV2 under a
// "lazy_reset_grad" input), the eval model, the optimizer model (com.microsoft AdamWOptimizer or
// SGDOptimizerV2 over sequences of tensors) and the checkpoint, in the layout onnxruntime 1.15-1.19
// writes, so that onnxruntime's runtime and onnxtrain's on_device::Module both run them.
// docs/on-device.md describes the layout and what differs from onnxruntime's tool.
#pragma once

#include <string>
#include <vector>

#include "onnxtrain/state.h"

namespace onnxtrain {

/// What generate_artifacts builds (its arguments, by onnxruntime's names).
struct ArtifactOptions {
  /// Initializers to train: inputs of the training and eval models, parameters of the checkpoint
  /// with requires_grad. Not empty.
  std::vector<std::string> requires_grad;
  /// Initializers kept constant but held by the checkpoint (and fed as inputs), e.g. BatchNorm's
  /// running statistics. Initializers in neither list stay constants inside the models.
  std::vector<std::string> frozen_params;
  /// "" (the loss is the model's first output, or loss_input_names[0]: onnxruntime's PassThrough),
  /// "MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss" or "L1Loss" (reduction mean, as
  /// onnxruntime's LossType). MSE, BCE and L1 add the input "target" shaped like the scores;
  /// CrossEntropyLoss adds "labels" (int64, the scores' shape without dimension 1).
  std::string loss;
  /// "" (no optimizer model), "AdamW" (onnxruntime's defaults: betas 0.9/0.999, eps 1e-6, weight
  /// decay 0, bias correction, mode 1) or "SGD".
  std::string optimizer;
  /// Values (model outputs or intermediate) returned after the loss by both models.
  std::vector<std::string> additional_output_names;
  /// The model output the loss scores (one name; empty: the model's only output, or with loss ""
  /// its first output).
  std::vector<std::string> loss_input_names;
  /// BatchNormalization nodes in training mode write their new running mean and variance into
  /// those statistics when they are frozen_params (in place, as InPlaceAccumulatorV2 with the
  /// overwrite flag set). false: onnxruntime's behaviour, the statistics never change.
  bool update_batchnorm_statistics = true;
  /// Folder of the model's external data (empty: a model with external data is refused).
  std::string base_dir;
};

/// The artifacts of one model.
struct Artifacts {
  std::string training_model;   ///< serialized ModelProto
  std::string eval_model;       ///< serialized ModelProto
  std::string optimizer_model;  ///< serialized ModelProto ("" when ArtifactOptions::optimizer is "")
  CheckpointState checkpoint;   ///< requires_grad and frozen parameters with their values
  /// com.onnxtrain operators the training model uses (gradients onnxruntime has no operator for):
  /// such artifacts run in onnxtrain only. Empty when onnxruntime can run them.
  std::vector<std::string> onnxtrain_operators;
};

/// Builds the artifacts of `model_bytes` (a serialized ModelProto). Throws InvalidArgument naming a
/// parameter that is not a float initializer, one in both lists, an unknown loss or optimizer, an
/// output that does not exist; NotImplemented naming a node without a gradient rule.
Artifacts make_artifacts(const std::string& model_bytes, const ArtifactOptions& options);

/// Writes `<dir>/<prefix>training_model.onnx`, `eval_model.onnx`, `optimizer_model.onnx` (when
/// made), `checkpoint` (ODTC; "<...>checkpoint.data" beside it for states over 1.8 GB) and, with
/// `nominal_checkpoint`, `nominal_checkpoint` (names, types and shapes only), each atomically.
/// `dir` must exist.
void save_artifacts(const Artifacts& artifacts, const std::string& dir, const std::string& prefix = "",
                    bool nominal_checkpoint = false);

}  // namespace onnxtrain
