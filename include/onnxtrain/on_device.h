// onnxruntime's on-device training API (its training_api Module, Optimizer and LinearLRScheduler)
// over onnxtrain's one training state, CheckpointState (state.h). The artifacts are onnxruntime's:
//  - a training model whose inputs are the user inputs, the parameters (inputs named as the state's
//    parameters), one "<parameter>_grad.accumulation.buffer" per trained parameter and a bool
//    "lazy_reset_grad"; its com.microsoft InPlaceAccumulatorV2 nodes write the gradients into the
//    buffers (the state's Parameter::grad), and its other outputs are the user's (the loss first);
//  - an optional eval model (user inputs and parameters in, user outputs out);
//  - an optimizer model with onnxruntime's inputs (learning_rate, step, params, gradients,
//    first_order_moments, second_order_moments for AdamW; learning_rate, params, gradients for SGD),
//    sequences that it updates in place, and a bool flag as its first output.
// Every tensor stays in the state: the graphs read and update the state's own tensors (no copies),
// so a state saved after training holds the trained values and Adam's moments.
//
// The state must outlive the Module and Optimizer built over it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "onnxtrain/session.h"
#include "onnxtrain/state.h"
#include "onnxtrain/value.h"

namespace onnxtrain::on_device {

/// A model given by its file path or by its serialized bytes.
struct ModelSource {
  std::string path;   ///< a file (external data resolved beside it)
  std::string bytes;  ///< serialized ModelProto (used when path is empty)
  static ModelSource file(std::string p) { return {std::move(p), {}}; }
  static ModelSource buffer(std::string b) { return {{}, std::move(b)}; }
  bool empty() const { return path.empty() && bytes.empty(); }
};

/// onnxruntime's Module: runs the training model (train_step) and the eval model (eval_step) over
/// the state's parameters and gradient buffers.
class Module {
 public:
  /// Loads the models and sorts the training model's inputs into user inputs, parameters (names
  /// in state.parameters), gradient buffers and lazy_reset_grad; creates the zero gradient buffer
  /// of every trained parameter the training model accumulates into. Throws InvalidArgument for
  /// a gradient buffer of an unknown or frozen parameter, or a parameter input whose type or shape
  /// differs from the state's.
  Module(const ModelSource& train_model, CheckpointState& state, const ModelSource& eval_model = {},
         const SessionOptions& options = {});
  ~Module();
  Module(Module&&) noexcept;
  Module& operator=(Module&&) noexcept;

  /// One training step: the loss and other user outputs of the training model. The gradients go
  /// into the buffers: overwritten on the first step after lazy_reset_grad() (and the first step
  /// ever), added to afterwards (onnxruntime's gradient accumulation).
  std::vector<Value> train_step(const std::vector<Value>& user_inputs);
  /// The eval model's outputs. Throws InvalidArgument when the Module has no eval model.
  std::vector<Value> eval_step(const std::vector<Value>& user_inputs);
  /// The next train_step overwrites the gradient buffers instead of adding to them.
  void lazy_reset_grad();

  /// Elements of the parameters (trainable ones only, or all), from the training model's declared
  /// input shapes when the state is nominal.
  int64_t parameters_size(bool trainable_only = true) const;
  /// The parameters as one float32 vector, in the training model's input order (not the state's
  /// name order). Throws for a nominal state or a parameter that is not float32.
  Tensor copy_parameters_to_buffer(bool trainable_only = true) const;
  /// Copies `buffer` (float32, parameters_size(trainable_only) elements, the same order) into the
  /// parameters. On a nominal state it creates the values (shapes from the training model); once
  /// every parameter has one the state is complete (nominal = false).
  void copy_buffer_to_parameters(const Tensor& buffer, bool trainable_only = true);
  /// Writes the eval model with the parameters as initializers and only `graph_output_names` as
  /// outputs (the nodes and inputs they do not need removed), atomically; large models get
  /// external data. Throws when there is no eval model, for a nominal state or an unknown output.
  void export_model_for_inferencing(const std::string& path, const std::vector<std::string>& graph_output_names) const;

  /// User inputs and outputs of the training and eval models (onnxruntime hides parameters,
  /// gradient buffers, lazy_reset_grad and the accumulators' flags).
  const std::vector<std::string>& train_input_names() const;
  const std::vector<std::string>& train_output_names() const;
  const std::vector<std::string>& eval_input_names() const;
  const std::vector<std::string>& eval_output_names() const;
  bool has_eval_model() const;
  /// The parameters fed to the training model, in its input order.
  const std::vector<std::string>& parameter_names() const;

  CheckpointState& state() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// onnxruntime's Optimizer: runs the optimizer model over the trained parameters, their gradient
/// buffers and the optimizer states of group "group0" (created with zero moments, learning rate
/// 0.001, when the state has none); each run that reports an update counts one step.
class Optimizer {
 public:
  /// Throws InvalidArgument when the model's inputs are neither onnxruntime's AdamW nor its SGD
  /// inputs, the state is nominal, or a trained parameter has no gradient buffer in `module`.
  Optimizer(const ModelSource& optimizer_model, Module& module, const SessionOptions& options = {});
  ~Optimizer();
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;

  /// One update (learning rate and step + 1 fed); the step count grows when the model reports it.
  void step();
  void set_learning_rate(float lr);
  float learning_rate() const;
  /// The learning rate a scheduler starts from (saved in checkpoints, unlike the current one).
  void set_initial_learning_rate(float lr);
  float initial_learning_rate() const;
  /// Updates applied so far (the group's step).
  int64_t step_count() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// onnxruntime's LinearLRScheduler: lr = initial_lr * f(step) with
/// f = step / max(1, warmup) while step < warmup, then max(0, (total - step) / max(1, total - warmup)),
/// step being the optimizer's step count. Construction sets the optimizer's initial learning rate
/// and applies f once.
class LinearLRScheduler {
 public:
  /// Throws InvalidArgument for negative counts.
  LinearLRScheduler(Optimizer& optimizer, int64_t warmup_step_count, int64_t total_step_count, float initial_lr);
  /// Sets the optimizer's learning rate for its current step count.
  void step();

 private:
  Optimizer* optimizer_;
  int64_t warmup_, total_;
};

}  // namespace onnxtrain::on_device
