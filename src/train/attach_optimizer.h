// The training step as one graph: attach_optimizer appends to a gradient model the gradient
// accumulation, the global-norm clipping and one optimizer node per group of weights that share
// hyper-parameters, so that forward, backward and update run as one plan. Weights, optimizer state
// and accumulators are initializers that the step updates in place (StateUpdate); the learning
// rate, the step count and (when accumulating) the accumulation reset flag are graph inputs.
//
//   fused (default)  com.onnxtrain operators (src/ops/onnxtrain_ops.h, optimizers.h): AccumulateGradients,
//                    GlobalNormClip, SGDOptimizer, MomentumOptimizer, AdamOptimizer, ...
//   portable         standard ONNX operators, plus the ai.onnx.preview.training Momentum and
//                    Adagrad operators whose arithmetic matches torch.optim's: the saved training
//                    model runs in any runtime that has them.
//
// The saved training model runs by itself: feed the data, the learning rate and the step count;
// the updated weights and optimizer state come out as graph outputs (the metadata entry
// "onnxtrain.state_updates" pairs each with the initializer it replaces).
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/ir.h"
#include "ops/optimizers.h"
#include "train/recompute.h"
#include "train/training_graph.h"

namespace onnxtrain::train {

/// Hyper-parameters with onnxruntime-training's names: global values plus per-weight overrides.
struct OptimizerConfig {
  std::string name = "SGDOptimizer";
  std::map<std::string, float> attrs;
  std::map<std::string, int64_t> int_attrs;
  std::map<std::string, std::map<std::string, float>> weight_attrs;
  std::map<std::string, std::map<std::string, int64_t>> weight_int_attrs;
};

/// The optimizer table's entry for OptimizerConfig::name `name` (onnxruntime-training's
/// training_optimizer_name values; onnxtrain::optimizer_names() lists them); InvalidArgument
/// naming the known ones otherwise.
const ops::OptimizerSpec& optimizer_spec(const std::string& name);

/// Data parallelism: how gradients are combined across the ranks of an MPI job.
struct DataParallelConfig {
  int world_size = 1;               ///< 1: no communication
  bool post_accumulation = false;   ///< reduce the accumulated gradients once per update (else every run)
  bool adasum = false;              ///< combine with Adasum instead of the weighted mean
  int rank = 0;                     ///< this process's rank (ZeRO: which partition it updates)
  /// 1: ZeRO stage 1 — the trained weights, flattened and concatenated in trained order, split in
  /// world_size blocks; this rank keeps optimizer state for its block only, updates it, and an
  /// allgather (com.onnxtrain.ZeroAllGather) rebuilds every weight on every rank.
  int zero_stage = 0;
  int64_t bucket_bytes = 4 << 20;   ///< gradients per reduction, in the order the backward pass produces them
};

/// What a training step does besides forward and backward.
struct StepConfig {
  OptimizerConfig optimizer;
  int64_t accumulation_steps = 1;  ///< gradients of this many runs are summed per update
  bool clip_grad_norm = false;     ///< scale gradients so that their global L2 norm is <= max_grad_norm
  float max_grad_norm = 1.0f;
  bool portable = false;           ///< standard ONNX (+ preview-training ops where they fit) only
  bool host_kernels_only = false;  ///< every kernel runs on the CPU (fusions without device kernels apply)
  /// train::absorb_transposes (with host_kernels_only): the SessionOptions config entry
  /// onnxtrain.absorb_transposes, "1" by default (TrainingSession). Measured on BERT-tiny (Sapphire
  /// Rapids, kernel time per step): 1.5 ms less at 1 thread, 0.6 ms less at 2 (docs/autodiff.md).
  bool absorb_transposes = false;
  std::string lr_input = "Learning_Rate";
  DataParallelConfig data_parallel;
  /// Loss scaling (float16 mixed precision): the float32 [1] graph input the differentiated loss
  /// was multiplied by. The gradients are checked and unscaled by one LossScaleCheck node (which
  /// also clips, when clip_grad_norm), the optimizer nodes skip the update when any gradient is
  /// infinite or NaN, and the graph outputs that flag (TrainingGraph::all_finite_output).
  std::string loss_scale_input;
  /// Activations recomputed in the backward pass (build_training_graph).
  RecomputeConfig recompute;
  /// Memory-efficient gradients: one optimizer node per weight, placed right after the last node
  /// that computes its gradient or reads the weight, so that each gradient is freed as soon as its
  /// update consumed it (instead of all gradients living until one update at the end). Refused
  /// with accumulation, clipping, loss scaling and data parallelism (they need every gradient
  /// first).
  bool memory_efficient_gradient = false;
};

/// A tensor a training step updates: after the step, initializer `state` holds value `value`.
struct StateUpdate {
  enum class Kind { kWeight, kOptimizerState, kAccumulator, kRunningStat };
  Kind kind;
  std::string value, state;
  std::string weight;  ///< the trained weight it belongs to ("" for running statistics)
  std::string key;     ///< checkpoint name: "Moment_1_<w>", the weight for accumulators and weights
};

/// The training model and how to drive it.
struct TrainingGraph {
  ir::Model model;
  std::string lr_input;     ///< float32 [1]
  std::string step_input;   ///< int64 [1]: the 1-based count of the update this step performs
  std::string reset_input;  ///< bool [1]: start a new accumulation (only when accumulating)
  /// float64 [1]: this rank's weight in the mean of the gradients (only with data parallelism).
  std::string contribution_input;
  int64_t reduce_buckets = 0;  ///< gradient reductions per update (data parallelism)
  std::string loss_scale_input;   ///< float32 [1]: the loss scale (only with loss scaling)
  /// bool [1] output: every gradient of this update was finite, so the update was applied (only
  /// with loss scaling; computed by update steps, not by accumulation-only steps).
  std::string all_finite_output;
  std::vector<std::string> trained;    ///< weights the optimizer updates
  std::vector<std::string> gradients;  ///< per trained weight: its gradient ("<w>_grad")
  std::vector<StateUpdate> updates;
  RecomputeStats recompute;  ///< what the recompute pass did

  /// (value, state) pairs applied by a step that updates the weights.
  std::vector<std::pair<std::string, std::string>> update_step() const;
  /// (value, state) pairs applied by a step that only accumulates gradients.
  std::vector<std::pair<std::string, std::string>> accumulate_step() const;
};

/// ZeRO stage 1: the part [first, second) of trained weight `i` (flattened) that rank `rank` of
/// `world` updates: the trained weights, of `numels` elements in trained order, flattened,
/// concatenated and split in `world` blocks of equal size (the last one shorter); empty (first ==
/// second) when the rank's block holds none of it.
std::pair<int64_t, int64_t> zero_part(const std::vector<int64_t>& numels, size_t i, int rank, int world);

/// Appends accumulation, clipping and the optimizer to tg.model, a gradient model with a
/// gradient output tg.gradients[i] for each weight tg.trained[i]. Throws InvalidArgument naming an
/// unknown optimizer, an unknown attribute or a per-weight entry for a weight that is not
/// trained; NotImplemented for weights that are not float32 or float64.
void attach_optimizer(TrainingGraph& tg, const StepConfig& cfg);

/// The whole training model of `forward` (which outputs `loss`): gradient graph of `trained`,
/// BatchNormalization running statistics written back (except those in `frozen_stats`), then
/// attach_optimizer. `gradient_model`, when given, receives the gradient model before the
/// optimizer is attached (for model_with_gradient_graph_path).
TrainingGraph build_training_graph(const ir::Model& forward, const std::string& loss,
                                   const std::vector<std::string>& trained, const std::vector<RunningStat>& running,
                                   const std::set<std::string>& frozen_stats, const StepConfig& cfg,
                                   ir::Model* gradient_model = nullptr);

}  // namespace onnxtrain::train
