// Forward/backward training (onnxruntime-training's second API): the ONNX graph is one piece of a
// model whose weights something else updates (PyTorch through ORTModule, onnxcustom's
// OrtGradientForwardBackwardOptimizer).
//
//   ModuleGraphBuilder (OrtModuleGraphBuilder): from a forward model, the training graph — user
//     inputs then weights as graph inputs, a com.microsoft YieldOp cutting forward from backward
//     (its inputs: the user outputs; its outputs: the gradients flowing into them), the gradients
//     of the inputs and weights that require them as graph outputs — and the forward model with
//     weights as inputs (for inference).
//   TrainingAgent: runs a training graph loaded in an InferenceSession in two parts. run_forward()
//     returns the user outputs and keeps what the backward part needs in a PartialRunState;
//     run_backward() takes the gradients of the outputs and returns the graph outputs. Several
//     forward parts may be in flight, each with its own state.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "onnxtrain/session.h"
#include "onnxtrain/value.h"

namespace onnxtrain {

/// What ModuleGraphBuilder builds (onnxruntime's OrtModuleGraphBuilderConfiguration).
struct ModuleGraphBuilderConfig {
  /// Initializers that become graph inputs of the training graph, after the user inputs, in this
  /// order (the rest stay initializers, i.e. constants).
  std::vector<std::string> initializer_names;
  /// The subset of initializer_names whose gradients the training graph outputs.
  std::vector<std::string> initializer_names_to_train;
  /// User inputs whose gradients the training graph outputs (non-float ones are skipped).
  std::vector<std::string> input_names_require_grad;
  /// false: build() only prepares the forward model (get_model() is then refused).
  bool build_gradient_graph = true;
  /// onnxruntime caches values computed from frozen weights across runs; not implemented: true
  /// is refused by initialize().
  bool enable_caching = false;
  /// onnxruntime hands gradients out one by one as they are ready; not implemented: true is
  /// refused by initialize().
  bool use_memory_efficient_gradient = false;
  /// Graph transformations (onnxruntime's TrainingGraphTransformerConfiguration) other than
  /// recompute: only the defaults (none) are implemented; the names of non-default ones make
  /// initialize() fail.
  std::vector<std::string> non_default_transformers;
  /// Recompute in the backward part (TrainingGraphTransformerConfiguration's fields; the same
  /// meaning as TrainingParameters', docs/memory.md): gradients bitwise those without.
  bool attn_dropout_recompute = false;
  bool gelu_recompute = false;
  bool transformer_layer_recompute = false;
  int64_t number_recompute_layers = 0;
};

/// How the graphs built by ModuleGraphBuilder relate to the module (onnxruntime's GraphInfo).
struct ModuleGraphInfo {
  std::vector<std::string> user_input_names;                   ///< graph inputs that are not initializers
  std::map<std::string, std::string> user_input_grad_names;    ///< input -> gradient output
  std::vector<std::string> initializer_names;                  ///< weights fed as inputs, in feed order
  std::vector<std::string> initializer_names_to_train;
  std::vector<std::string> initializer_grad_names_to_train;    ///< "<weight>_grad", same order
  std::vector<std::string> user_output_names;
  std::vector<int64_t> output_grad_indices_non_differentiable;  ///< outputs that take no gradient
  std::vector<int64_t> output_grad_indices_require_full_shape;  ///< outputs whose gradient is fed in full
  std::vector<int64_t> module_output_indices_requires_save_for_backward;  ///< always empty here
  std::vector<std::string> frontier_node_arg_map_keys;         ///< always empty (no caching)
  std::vector<std::string> cached_node_arg_names;              ///< always empty (no caching)
  std::vector<std::string> module_output_gradient_name;        ///< gradient fed for each differentiable output
};

/// Builds the training graph of a forward model (onnxruntime's OrtModuleGraphBuilder).
class ModuleGraphBuilder {
 public:
  ModuleGraphBuilder();
  ~ModuleGraphBuilder();
  ModuleGraphBuilder(ModuleGraphBuilder&&) noexcept;
  ModuleGraphBuilder& operator=(ModuleGraphBuilder&&) noexcept;

  /// Loads the forward model; throws InvalidArgument naming an unknown initializer or input, an
  /// initializer to train that is not in initializer_names, NotImplemented for unsupported options.
  void initialize(const std::string& model_bytes, const ModuleGraphBuilderConfig& config);
  /// Builds the graphs. `input_shapes` (one per user input, or empty): concrete shapes replacing
  /// the declared ones (InvalidArgument when a rank or a fixed dimension disagrees). Throws
  /// NotImplemented naming a node without a gradient rule.
  void build(const std::vector<std::vector<int64_t>>& input_shapes = {});
  /// The training graph (serialized ModelProto).
  std::string get_model() const;
  /// The forward model with initializer_names as inputs after the user inputs.
  std::string get_inference_optimized_model() const;
  const ModuleGraphInfo& graph_info() const;

  struct Impl;
 private:
  std::unique_ptr<Impl> impl_;
};

/// The state of one training run between run_forward() and run_backward() (onnxruntime's
/// PartialGraphExecutionState). Movable; destroying one whose backward part never ran frees it.
class PartialRunState {
 public:
  PartialRunState();
  ~PartialRunState();
  PartialRunState(PartialRunState&&) noexcept;
  PartialRunState& operator=(PartialRunState&&) noexcept;
  /// True between run_forward() and run_backward().
  bool pending() const;

  struct Impl;
 private:
  friend class TrainingAgent;
  std::unique_ptr<Impl> impl_;
};

/// Runs a training graph (one com.microsoft YieldOp node) in two parts. The session must
/// outlive the agent. Thread-safe like InferenceSession: runs are serialized.
class TrainingAgent {
 public:
  /// `fw_feed_names`: the order of run_forward()'s feeds (every graph input without a default);
  /// `bw_fetches_names`: the order of run_backward()'s results (graph outputs). Throws
  /// InvalidArgument naming an unknown name, a missing input, or a graph without exactly one
  /// YieldOp.
  TrainingAgent(InferenceSession& session, std::vector<std::string> fw_feed_names,
                std::vector<std::string> bw_fetches_names);
  ~TrainingAgent();

  /// The forward part: returns the YieldOp's inputs (the user outputs) in order. Throws
  /// InvalidArgument when `state` is pending, or naming a mistyped feed.
  std::vector<Value> run_forward(const std::vector<const Value*>& feeds, PartialRunState& state,
                                 const RunOptions* run_options = nullptr);
  /// The backward part of `state`: `grads` holds the gradient of each differentiable output (see
  /// differentiable_outputs()), typed and shaped like it. Returns bw_fetches_names' values.
  std::vector<Value> run_backward(const std::vector<const Value*>& grads, PartialRunState& state,
                                  const RunOptions* run_options = nullptr);

  /// Names of the forward outputs (the YieldOp's inputs).
  const std::vector<std::string>& forward_output_names() const;
  /// Indices (into forward_output_names) of the outputs run_backward() takes gradients for.
  const std::vector<size_t>& differentiable_outputs() const;

  struct Impl;
 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnxtrain
