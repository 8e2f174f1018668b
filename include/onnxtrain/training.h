// Training: TrainingParameters and TrainingSession with onnxruntime-training's contract — the
// model holds its loss; run() performs one training step (forward, backward, gradient
// accumulation, optimizer update when due) with the learning rate fed under lr_params_feed_name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/session.h"
#include "onnxtrain/step_driver.h"
#include "onnxtrain/tensor.h"
#include "onnxtrain/value.h"

namespace onnxtrain {

/// Training configuration (the fields of onnxruntime's TrainingParameters that apply on CPU).
struct TrainingParameters {
  std::string loss_output_name;                 ///< scalar loss output of the model (required)
  std::set<std::string> weights_to_train;       ///< empty: every float initializer (see get_train_initializer)
  std::set<std::string> weights_not_to_train;   ///< frozen: never updated
  std::set<std::string> immutable_weights;      ///< constants: never updated, never overwritten by load_state
  std::string training_optimizer_name = "SGDOptimizer";  ///< SGD/Momentum/Adam/AdamW/Lamb/Adagrad + "Optimizer"
  std::string lr_params_feed_name = "Learning_Rate";     ///< float32 [1] input carrying the learning rate
  std::map<std::string, float> optimizer_attributes;     ///< global float attributes (alpha, beta, lambda, ...)
  std::map<std::string, int64_t> optimizer_int_attributes;
  std::map<std::string, std::map<std::string, float>> optimizer_attributes_map;      ///< per weight
  std::map<std::string, std::map<std::string, int64_t>> optimizer_int_attributes_map;
  int64_t gradient_accumulation_steps = 1;  ///< gradients of this many run() calls are summed per update
  bool enable_grad_norm_clip = false;       ///< clip the global gradient norm to max_grad_norm
  float max_grad_norm = 1.0f;
  bool set_gradients_as_graph_outputs = false;  ///< "<w>_grad" outputs may be requested from run()
  std::string model_with_gradient_graph_path;   ///< when set, the gradient model is saved there
  std::string model_with_training_graph_path;   ///< when set, the training model (with optimizer) is saved there
  bool deterministic_compute = false;
  /// Train with (and save under model_with_training_graph_path) a training graph of standard ONNX
  /// operators plus the ai.onnx.preview.training ones whose arithmetic matches, instead of
  /// onnxtrain's fused com.onnxtrain operators: it runs in other ONNX runtimes (onnxtrain extension).
  bool portable_training_graph = false;
  /// Precision of the matrix products: "" or "fp32" (everything in float32), "bf16" (MatMul, Gemm
  /// and Conv and their gradients in bfloat16 with fp32 accumulation, a Conv with one input channel
  /// per group excepted; normalizations, softmax, losses, the optimizer and the master weights in
  /// float32), "fp16" (the same in float16, with loss scaling: the loss is multiplied by the loss
  /// scale before it is differentiated, the gradients are unscaled and checked, and an update
  /// whose gradients hold an infinity or a NaN is skipped — weights, optimizer state and the
  /// step count unchanged). On a CPU without float16 arithmetic (AVX512-FP16) the float16
  /// products run as exact float32 products of float16 operands: fp16's numerics, not its speed.
  std::string mixed_precision;
  /// onnxruntime's switch for float16 mixed precision: true with mixed_precision "" means "fp16"
  /// (with "bf16", bf16; with "fp32", an error).
  bool use_mixed_precision = false;
  /// fp16: the loss scale. 0 (default): dynamic — run() takes it from the feed under
  /// TrainingSession::loss_scale_input_name() when given (onnxruntime's ORTTrainer feeds its
  /// LossScaler's value), else from the session's own dynamic scaler (onnxruntime's
  /// DynamicLossScaler: starts at 2^16, halves after a skipped update, doubles after 2000 applied
  /// updates in a row, within [1, 2^24]; saved in checkpoints). > 0: that fixed scale when the
  /// feed has none.
  float loss_scale = 0.f;
  /// Learning-rate schedule used when the feed omits lr_params_feed_name ("" = the feed is required).
  std::string lr_schedule;
  std::map<std::string, double> lr_schedule_params;  ///< eta0, power_t, alpha, warmup, total, end_lr, power

  // Data parallelism over MPI (docs/distributed.md), onnxruntime-training's fields. Under an MPI
  // launcher (mpirun), world_size 1 and world_rank 0 — the defaults — take the launcher's values;
  // given values must agree with it. As in onnxruntime-training, every rank feeds its own batch
  // (its shard of the data) to run(), and the gradients are averaged over the ranks (see
  // TrainingSession::set_local_batch_share for shards of different sizes).
  int64_t world_rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t data_parallel_size = 1;        ///< 1 or world_size
  int64_t horizontal_parallel_size = 1;  ///< tensor parallelism: > 1 is not implemented
  int64_t pipeline_parallel_size = 1;    ///< pipeline parallelism: > 1 is not implemented
  /// With gradient_accumulation_steps > 1: reduce the accumulated gradients once per update
  /// instead of every run's gradients before accumulating them.
  bool allreduce_post_accumulation = false;
  /// 0, or 1 (ZeRO stage 1: optimizer state partitioned across the ranks).
  int64_t deepspeed_zero_stage = 0;
  /// Combine the ranks' gradients with Adasum instead of averaging them (power-of-two world sizes).
  bool enable_adasum = false;

  // Recompute (activation checkpointing, docs/memory.md): forward activations the backward pass
  // would read are freed during the forward pass and computed again from what is kept, just before
  // the backward pass needs them. Gradients are bitwise those of the run without recompute.
  /// Recompute the outputs of Dropout nodes that follow a Softmax (from the saved mask).
  bool attn_dropout_recompute = false;
  /// Recompute the outputs of Gelu / FastGelu / BiasGelu nodes (the GELU erf pattern is fused first).
  bool gelu_recompute = false;
  /// Recompute whole transformer layers: only each layer's input is kept (a layer ends at the first
  /// LayerNormalization after a Gelu or an Erf); attn_dropout_recompute and gelu_recompute then add nothing.
  bool transformer_layer_recompute = false;
  /// With transformer_layer_recompute: the first this many layers; 0 (or >= the number of layers):
  /// every layer but the last, as onnxruntime.
  int64_t number_recompute_layers = 0;
  /// Forward values to recompute, from the values not listed (onnxtrain extension).
  std::vector<std::string> recompute_values;
  /// > 0: recompute by a memory budget (onnxtrain extension): the bytes of forward activations the
  /// backward pass may hold. The forward graph is cut into segments where a single value carries
  /// everything that depends on the weights (between residual blocks, sublayers, layers); the
  /// fewest segments that bring the estimate within the budget are recomputed. Needs static input
  /// shapes; a budget below what recompute can reach is an error naming the least estimate.
  int64_t recompute_budget_bytes = 0;
  /// Memory-efficient gradients (docs/memory.md): one optimizer update per weight, run as soon as
  /// its gradient is complete and the backward pass no longer reads the weight, so that each
  /// gradient is freed at once instead of all of them living until the update. The same
  /// arithmetic, so the same weights bit for bit. NotImplemented with gradient accumulation,
  /// clipping, fp16 loss scaling or data parallelism (they need every gradient first).
  bool use_memory_efficient_gradient = false;

  /// Throws InvalidArgument naming `field` ("TrainingParameters.<field>") when its value is invalid
  /// by itself: an unknown optimizer or schedule, accumulation steps < 1, a max_grad_norm <= 0,
  /// an empty feed name, an unknown schedule parameter. Fields without a constraint of their own
  /// pass. The Python binding calls it on every assignment.
  void validate_field(const std::string& field) const;
  /// Throws InvalidArgument naming the first invalid field: each field, then the fields together
  /// (loss_output_name set, weight sets disjoint, schedule parameters complete).
  void validate() const;
};

/// Names accepted as TrainingParameters::training_optimizer_name, in a fixed order.
std::vector<std::string> optimizer_names();

/// A hyper-parameter an optimizer accepts (a key of optimizer_attributes or, when `integer`,
/// optimizer_int_attributes), with its default.
struct OptimizerHyperparameter {
  std::string name;
  double default_value = 0;  ///< float defaults as their shortest decimal form (0.9, not 0.899999976)
  bool integer = false;
};
/// The hyper-parameters of optimizer `name`; InvalidArgument naming the known optimizers otherwise.
std::vector<OptimizerHyperparameter> optimizer_hyperparameters(const std::string& name);

/// Names accepted as TrainingParameters::lr_schedule (besides "" for none).
std::vector<std::string> lr_schedule_names();

/// Loss names add_loss_output accepts (aliases included: l2, l1).
std::vector<std::string> loss_names();

/// Time of one node of a training session's plans while profiling (TrainingSession::profile_summary).
struct NodeProfile {
  std::string node;     ///< node name (op type and a number when unnamed)
  std::string op_type;
  /// "forward" (the model and its loss), "backward" (the gradient graph), "optimizer"
  /// (accumulation, clipping, update) or "eval" (TrainingSession::eval runs).
  std::string phase;
  int64_t calls = 0;    ///< runs of the node
  double seconds = 0;   ///< time inside its kernel, summed over the runs
};

/// A text report of `profile` over `steps` training runs: time per phase, per operator type (split
/// by phase) and the `top_nodes` slowest nodes, in milliseconds per step and shares of the total.
std::string format_profile(const std::vector<NodeProfile>& profile, int64_t steps, size_t top_nodes = 12);

/// Trains a model that contains its loss. Thread-safe: concurrent calls (steps, eval, state,
/// checkpoints, export) are serialized, each sees the others whole.
class TrainingSession {
 public:
  TrainingSession(const std::string& path, const TrainingParameters& params, const SessionOptions& options = {});
  TrainingSession(const void* data, size_t size, const TrainingParameters& params, const SessionOptions& options = {},
                  const std::string& base_dir = "");
  ~TrainingSession();
  TrainingSession(TrainingSession&&) noexcept;
  TrainingSession& operator=(TrainingSession&&) noexcept;

  /// One training step. `output_names` empty: the model's outputs. Feeds: the model inputs plus
  /// the learning rate (float32 [1]) under lr_params_feed_name; those on a device are copied to
  /// the host first.
  std::vector<Value> run(const std::vector<std::string>& output_names,
                         const std::vector<std::pair<std::string, Value>>& feeds);
  /// Same, writing into `outputs`: tensors it already holds with the right type and shape (those of
  /// the previous call), referenced nowhere else, are overwritten — a steady-state step then
  /// performs no heap allocation.
  void run(const std::vector<std::string>& output_names, const std::vector<std::pair<std::string, Value>>& feeds,
           std::vector<Value>& outputs);
  /// Forward pass only: weights, optimizer state, counters and running statistics untouched.
  std::vector<Value> eval(const std::vector<std::string>& output_names,
                          const std::vector<std::pair<std::string, Value>>& feeds);

  std::vector<NodeArg> get_inputs() const;   ///< model inputs (the learning rate and the loss scale included)
  std::vector<NodeArg> get_outputs() const;  ///< outputs run() can return
  std::vector<std::string> trained_weights() const;

  // ---- float16 mixed precision (TrainingParameters::mixed_precision "fp16"); "" / no-ops otherwise
  /// Name of the float32 [1] loss-scale input run() accepts (onnxruntime's loss_scale_input_name).
  std::string loss_scale_input_name() const;
  /// Name of the bool [1] output "all gradients finite" of an update step (run() may return it).
  std::string all_finite_output_name() const;
  /// The loss scale the session feeds when run() is not given one (its dynamic scaler's current
  /// value, or TrainingParameters::loss_scale); 0 without fp16.
  double loss_scale() const;
  /// Updates skipped for a non-finite gradient since the session started (or was restored).
  int64_t skipped_updates() const;
  /// The session's loss scaler itself (step_driver.h): its configuration and state, saved in
  /// checkpoints. ORTTrainer's DynamicLossScaler shares it rather than keeping a second scaler.
  /// Not synchronized with a run() in progress on another thread.
  LossScaleState& loss_scaler();

  /// Every initializer (weights and statistics) by name, as copies.
  std::vector<std::pair<std::string, Tensor>> get_state() const;
  /// Trained weights only.
  std::vector<std::pair<std::string, Tensor>> get_model_state() const;
  /// Optimizer state tensors plus "step" (int64 scalar).
  std::vector<std::pair<std::string, Tensor>> get_optimizer_state() const;
  /// get_optimizer_state()'s keys, in its order, without copying the state.
  std::vector<std::string> optimizer_state_names() const;
  /// Overwrites initializers by name. strict: every trainable weight must be given and no
  /// unknown name; otherwise unknown names are an error and missing ones are kept.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, bool strict = false);
  /// Overwrites optimizer state from get_optimizer_state()'s keys ("<state>_<weight>", "step").
  /// Throws InvalidArgument naming an unknown key or a mistyped tensor; with `strict`, every key
  /// of get_optimizer_state() must be given.
  void load_optimizer_state(const std::vector<std::pair<std::string, Tensor>>& state, bool strict = false);

  /// Optimizer steps taken so far.
  int64_t step() const;
  /// Training runs (run() calls) since the session started or was restored; also the position of
  /// the random stream of training-mode Dropout. The Python trainers read their step counters here.
  int64_t run_count() const;
  /// Whether the next run() completes an optimizer update (gradient_accumulation_steps).
  bool update_due() const;
  /// Figures of the plan of the last training run (arena bytes: the activations and temporaries
  /// of a step, which recompute lowers).
  RunStats last_run_stats() const;
  /// The last training run's plan, step by step (forward, backward, optimizer nodes and the copies
  /// between devices), with the provider each ran on: a node a device provider declined at prepare
  /// shows on the CPU provider. Empty before the first run.
  std::vector<AssignedNode> node_assignment() const;
  /// Sets the counters a trainer's state dict carries: `runs` (run_count) and `step` (step). The
  /// accumulation position and the tensors stay as they are (an exact checkpoint restores them).
  /// InvalidArgument when either is negative.
  void set_progress(int64_t runs, int64_t step);
  /// Data parallelism: this rank's share of the global batch (its rows over all ranks' rows); the
  /// combined gradient is the sum over the ranks of share x local gradient. Default 1 / world_size
  /// (every rank feeds a batch of the same size, onnxruntime-training's convention). Losses that sum
  /// over the batch take share 1. InvalidArgument outside [0, 1].
  void set_local_batch_share(double share);
  /// The rank and size of the session's data-parallel job (0 and 1 without one).
  int world_rank() const;
  int world_size() const;
  /// The parameters the session was created with.
  const TrainingParameters& parameters() const;
  /// Learning rate the session's schedule gives update `step` (1-based): the rate run() uses when
  /// the feed omits it. Throws InvalidArgument when the parameters set no schedule.
  double scheduled_learning_rate(int64_t step) const;

  /// Inference model: loss, gradients and optimizer removed, current weights in, training-only
  /// behaviour (BatchNormalization/Dropout training mode) switched off. `outputs` empty: every
  /// model output except the loss and outputs that depend on inputs used only by the loss.
  std::string export_model(const std::vector<std::string>& outputs = {}) const;
  void export_model_to(const std::string& path, const std::vector<std::string>& outputs = {}) const;

  /// Exact checkpoints: weights, optimizer state, step counters, schedule position, RNG state.
  /// Written atomically (temporary file, fsync, rename, fsync of the folder).
  /// `metadata` (e.g. a trainer's epoch and data position) is stored with it.
  /// Data parallelism (every rank calls it): with identical states rank 0 writes one file, which
  /// resumes on any number of ranks; under ZeRO stage 1 (or inside an accumulation reduced after
  /// it) every rank writes its shard `<path>.rank<r>-of-<n>` and, once all are durable, rank 0
  /// writes the manifest at `path`. load_checkpoint(path) of a manifest takes this rank's shard
  /// when the layout matches, else merges the shards (any number of ranks, stage 0 or 1).
  void save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;
  /// Throws naming what is wrong for a truncated, corrupted, foreign or too-new file (nothing is
  /// modified then). Returns the metadata saved with the checkpoint.
  std::map<std::string, std::string> load_checkpoint(const std::string& path);

  /// Starts (or restarts) profiling. SessionOptions.enable_profiling starts it at construction with
  /// a trace; `trace` false keeps only the per-node totals of profile_summary (no file, bounded memory).
  void start_profiling(bool trace = false);
  /// Per-node time of the runs since profiling started, in the order nodes first ran; empty when
  /// profiling never started. Kept after end_profiling.
  std::vector<NodeProfile> profile_summary() const;
  /// Stops profiling; writes onnxruntime's Chrome-trace JSON (one event per node run, training and
  /// eval runs, at most 10^6 events) when it traces and returns its name, else "".
  std::string end_profiling();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Loss builder (onnxcustom's add_loss_output): appends a loss computed from output `score_name`
/// (or output #output_index) and a new `label_name` input; returns the serialized model whose
/// outputs are the loss followed by the original outputs. See docs for the loss names and kwargs.
std::string add_loss_output(const std::string& model_bytes, const std::string& score_name = "squared_error",
                            const std::string& loss_name = "loss", const std::string& label_name = "label",
                            const std::string& weight_name = "",
                            const std::map<std::string, std::map<std::string, float>>& penalty = {},
                            const std::string& output = "", const std::map<std::string, std::string>& kwargs = {});

/// Learning rate the schedule of `params` (lr_schedule, lr_schedule_params) gives optimizer step
/// `step` (1-based) — the rate a TrainingSession uses when the feed omits it. Throws
/// InvalidArgument when no schedule is set or the parameters are invalid.
double scheduled_learning_rate(const TrainingParameters& params, int64_t step);

/// Trainable float initializers (skipping shape and index constants), in file order.
std::vector<std::string> get_train_initializer(const std::string& model_bytes);

}  // namespace onnxtrain
