// Trainer: the training loop over a TrainingSession — epochs or a step budget, batches drawn in an
// order reproducible from a seed (reshuffled every epoch), validation on held-out data or a split
// with the loss and a score metric, a metrics history, checkpoints that resume bitwise (data order,
// position in the epoch, running metrics of the epoch in progress), stop requests between batches,
// and callbacks for progress displays and metrics files.
//
//   onnxtrain::TrainingSession session(model_with_loss, params);
//   onnxtrain::TrainerOptions o;
//   o.epochs = 20;  o.learning_rate = 1e-3;  o.validation_split = 0.2;
//   o.objective.score_output = "logits";  o.objective.metric = onnxtrain::Metric::kAccuracy;
//   onnxtrain::Trainer trainer(session, o);
//   onnxtrain::FitResult r = trainer.fit(onnxtrain::Dataset({{"X", X}, {"label", y}}));
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/session.h"
#include "onnxtrain/tensor.h"
#include "onnxtrain/training.h"

namespace onnxtrain {

/// Named arrays sharing their first dimension: sample i is row i of every array. Arrays are
/// shared, not copied (Tensor semantics); batches are copies.
class Dataset {
 public:
  Dataset() = default;
  /// Throws InvalidArgument when an array is undefined or a scalar, a name repeats, or the arrays
  /// disagree on the number of samples.
  explicit Dataset(std::vector<std::pair<std::string, Tensor>> arrays);

  int64_t size() const { return size_; }  ///< number of samples
  bool empty() const { return arrays_.empty(); }
  const std::vector<std::pair<std::string, Tensor>>& arrays() const { return arrays_; }
  /// The array named `name`, or null.
  const Tensor* find(const std::string& name) const;
  /// The array named `name`; InvalidArgument naming it (and the arrays there are) when absent.
  const Tensor& at(const std::string& name) const;
  /// Samples idx[begin], ..., idx[end - 1], copied in that order.
  Dataset take(const std::vector<int64_t>& idx, size_t begin, size_t end) const;
  /// Samples [begin, end), copied.
  Dataset slice(int64_t begin, int64_t end) const;

 private:
  std::vector<std::pair<std::string, Tensor>> arrays_;
  int64_t size_ = 0;
};

/// A score metric computed from a score output and the labels.
enum class Metric {
  kNone,
  kAccuracy,        ///< argmax over axis 1 of scores [N, C, ...] equals the label [N, ...]
  kBinaryAccuracy,  ///< (score > threshold) equals (label != 0), element by element
  kR2,              ///< coefficient of determination, per output then averaged (sklearn's r2_score)
};
/// "none", "accuracy", "binary_accuracy", "r2".
const char* metric_name(Metric m);
/// The inverse of metric_name; InvalidArgument naming the choices otherwise.
Metric parse_metric(const std::string& name);

/// What a model's outputs mean for evaluation: which output is the loss and how batch losses
/// combine over a dataset, which output is scored against which labels.
struct Objective {
  std::string loss_output;     ///< scalar loss output ("" in TrainerOptions: the session's loss_output_name)
  bool loss_summed = false;    ///< the batch loss is a sum over its samples (reduction "sum"), else a mean
  /// The batch loss is a weighted mean (class weights, ignored labels): batch means do not combine
  /// exactly, so evaluation runs the whole dataset as one batch.
  bool loss_weighted = false;
  std::string score_output;    ///< output scored against the labels ("" with Metric::kNone)
  std::string label_name = "label";  ///< dataset array holding the labels
  Metric metric = Metric::kNone;
  double threshold = 0.5;              ///< kBinaryAccuracy: a score above it predicts 1
  std::optional<int64_t> ignore_index; ///< kAccuracy: labels equal to it are not counted

  /// Throws InvalidArgument naming the first inconsistent field (`owner` prefixes it).
  void validate(const std::string& owner = "Objective") const;
};

/// The Objective of a loss that add_loss_output(model, kind, loss_output, label_name, ...,
/// kwargs) adds on output `score`: its reduction and weighting, and the metric that goes with it —
/// accuracy for cross_entropy, nll, log and bce_with_logits, R² for the regression losses.
Objective loss_objective(const std::string& kind, const std::map<std::string, std::string>& kwargs,
                         const NodeArg& score, const std::string& loss_output = "loss",
                         const std::string& label_name = "label");

/// Loss and metric of a model over a dataset.
struct EvalResult {
  int64_t samples = 0;
  double loss = NAN;          ///< mean over the samples (their sum with Objective::loss_summed)
  double metric = NAN;        ///< NaN without a metric
  int64_t correct = 0;        ///< accuracies: predictions that match their label
  int64_t counted = 0;        ///< accuracies: labels counted (ignored ones left out)
};

/// Runs one batch forward: returns `outputs` in that order.
using BatchRunner = std::function<std::vector<Tensor>(const std::vector<std::pair<std::string, Tensor>>& batch,
                                                      const std::vector<std::string>& outputs)>;
/// Evaluates `data` batch by batch (`batch_size` samples, the whole dataset with
/// Objective::loss_weighted) through `run`.
EvalResult evaluate(const Dataset& data, const Objective& objective, int64_t batch_size, const BatchRunner& run);
/// Same through an inference session of a model that outputs the loss.
EvalResult evaluate(InferenceSession& session, const Dataset& data, const Objective& objective,
                    int64_t batch_size = 1024);

/// How a Trainer runs.
struct TrainerOptions {
  int64_t batch_size = 32;
  int64_t epochs = 0;         ///< passes over the training data (0: one, unless steps is set)
  int64_t steps = 0;          ///< optimizer steps of the run instead of epochs (0: use epochs)
  bool shuffle = true;        ///< a new order every epoch, drawn from seed; false: the data's order
  bool drop_last = false;     ///< skip an epoch's last batch when it is smaller than batch_size
  uint64_t seed = 0;          ///< data order and validation split
  /// Fraction of the training data held out for validation (0: none) when fit gets no
  /// validation data. Held-out samples are drawn from seed and keep their order.
  double validation_split = 0;
  int64_t eval_batch_size = 1024;  ///< batch size of validation passes
  /// Fed to every step. Required unless the session's parameters set an lr_schedule, which then
  /// gives the rate (setting both is an error).
  std::optional<double> learning_rate;
  Objective objective;        ///< loss, score output, labels and metric
  /// Optimizer steps between history records (0: about 100 records a run). Every epoch, and a run
  /// that ends inside one, also ends with a record.
  int64_t log_every = 0;
  /// Checkpoint written every checkpoint_every optimizer steps (0: never) and when a stop request
  /// ends fit ("" = no checkpoints). Its folder is created.
  std::string checkpoint_path;
  int64_t checkpoint_every = 0;
  /// Stored with every checkpoint, returned by load_checkpoint ("trainer." keys are reserved).
  std::map<std::string, std::string> checkpoint_metadata;

  /// Throws InvalidArgument naming the first invalid field ("TrainerOptions.<field>").
  void validate() const;
};

/// One history record (a line of the CLI's metrics file). NaN: does not apply.
struct TrainRecord {
  int64_t step = 0;    ///< optimizer steps of the run done
  double epoch = 0;    ///< epochs done (fractional)
  double loss = NAN;   ///< mean training loss of the batches since the previous record
  double metric = NAN; ///< training metric over those batches
  double lr = NAN;     ///< learning rate of the last optimizer step
  double val_loss = NAN, val_metric = NAN;  ///< on records that end an epoch (or the run)
  double samples_per_s = NAN;               ///< training throughput since the previous record
};

/// After every batch (one TrainingSession::run call).
struct StepInfo {
  int64_t step = 0;          ///< optimizer steps of the run done
  int64_t total_steps = 0;
  int64_t epoch = 0;         ///< 0-based epoch of the batch
  int64_t epochs = 0;        ///< epochs the run starts
  int64_t batch = 0;         ///< 1-based index of the batch in its epoch
  int64_t batches_per_epoch = 0;
  bool updated = false;      ///< the batch completed an optimizer step (false while accumulating)
  double loss = NAN;         ///< of this batch
  double lr = NAN;           ///< fed to this batch
  double epoch_loss = NAN;   ///< mean loss of the epoch's batches so far
  double epoch_metric = NAN; ///< metric of the epoch's batches so far
  int64_t samples = 0;       ///< trained on in the run (resumed part included)
  double samples_per_s = NAN;  ///< since fit started
  double eta_s = NAN;        ///< estimated seconds left
};

/// After an epoch's last batch (and its validation, when there is one).
struct EpochInfo {
  int64_t epoch = 0;   ///< 0-based index of the finished epoch
  int64_t epochs = 0;  ///< epochs the run starts
  int64_t step = 0;
  double loss = NAN, metric = NAN;          ///< training mean loss and metric of the epoch
  double val_loss = NAN, val_metric = NAN;  ///< NaN without validation
};

/// After a validation pass.
struct ValidationInfo {
  int64_t step = 0;
  double epoch = 0;  ///< epochs done (fractional)
  EvalResult result;
};

/// Hooks of fit. Each may be empty; exceptions they throw end fit and propagate.
struct TrainerCallbacks {
  std::function<void(const StepInfo&)> on_step;
  std::function<void(const EpochInfo&)> on_epoch_end;
  std::function<void(const ValidationInfo&)> on_validation;
  std::function<void(const TrainRecord&)> on_record;
  /// Polled between batches (not after the run's last): true stops fit as Trainer::request_stop does.
  std::function<bool()> should_stop;
};

/// Sizes of a run.
struct TrainingPlan {
  int64_t train_samples = 0, validation_samples = 0;
  int64_t batches_per_epoch = 0;
  int64_t total_steps = 0;  ///< optimizer steps of the run
  int64_t epochs = 0;       ///< epochs the run starts (with steps, the last may be partial)
};

/// How fit ended.
struct FitResult {
  bool stopped = false;     ///< a stop request ended it before the end of the run
  std::string checkpoint;   ///< written because of the stop ("" when none)
  int64_t steps = 0;        ///< optimizer steps of the run done (resumed part included)
  int64_t epoch = 0;        ///< 0-based epoch in progress
  int64_t batch = 0;        ///< batches of it done
  int64_t samples = 0;      ///< trained on (resumed part included)
  double seconds = 0;       ///< wall time of the run (resumed part included)
};

/// Trains a TrainingSession on a Dataset. Not thread-safe, except request_stop.
class Trainer {
 public:
  /// `session` must outlive the trainer. Throws InvalidArgument naming an invalid option.
  explicit Trainer(TrainingSession& session, TrainerOptions options = {});
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  /// The run `options` describe for `samples` training samples (before validation_split), with or
  /// without separate validation data, and `accumulation_steps` batches per optimizer step —
  /// before any session exists (a decaying lr schedule needs total_steps). InvalidArgument naming
  /// the options that leave no training sample, no batch or no optimizer step.
  static TrainingPlan plan(const TrainerOptions& options, int64_t samples, bool validation_data,
                           int64_t accumulation_steps = 1);

  /// Trains on `train` (validating on `validation` when given, else on options.validation_split of
  /// `train`) until the run has done its optimizer steps, or a stop request ends it after a batch
  /// (then writes options.checkpoint_path). After load_checkpoint, or a stop, it continues the run
  /// exactly where it was; the data must be the same. A finished run returns at once. An exception
  /// (from the session or a callback) leaves the run at the failing batch: to continue exactly,
  /// load the last checkpoint.
  FitResult fit(const Dataset& train, const Dataset& validation = {}, const TrainerCallbacks& callbacks = {});
  /// Asks a running fit to stop after its current batch. Thread-safe and async-signal-safe.
  void request_stop();

  /// Loss and metric of `data` (forward passes only: weights and statistics untouched).
  EvalResult evaluate(const Dataset& data);

  /// Writes the session's checkpoint with the run's state (data order, position, running
  /// metrics, history) and options.checkpoint_metadata, atomically; creates its folder.
  void save_checkpoint(const std::string& path) const;
  /// Restores a checkpoint written by a Trainer with the same batch_size, shuffle, drop_last,
  /// seed and validation_split (InvalidArgument naming the first that differs, or what is missing,
  /// before anything changes); the next fit continues that run. Returns its checkpoint_metadata.
  std::map<std::string, std::string> load_checkpoint(const std::string& path);

  const std::vector<TrainRecord>& history() const;
  int64_t step() const;   ///< optimizer steps of the run done
  int64_t epoch() const;  ///< 0-based epoch in progress
  int64_t batch() const;  ///< batches of it done
  const TrainerOptions& options() const;
  TrainingSession& session() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnxtrain
