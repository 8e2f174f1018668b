// The loss a command trains or evaluates with (the loss builder's names), and the metrics that go
// with it: accuracy for classification losses, R² for regression losses.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "args.h"
#include "data.h"

namespace cli {

/// Options shared by train, eval, grad and export: --loss, --loss-output, --score-output,
/// --label-name, --reduction, --loss-arg.
std::vector<Option> loss_options();

struct LossConfig {
  std::string kind;                 ///< loss builder name; "" = the model already outputs its loss
  std::string loss_output = "loss"; ///< output holding the loss
  std::string score_output;         ///< output the loss scores ("" = the model's first output)
  std::string label_name = "label"; ///< label input (and .npz array)
  std::string reduction = "mean";
  std::map<std::string, std::string> loss_args;
};
LossConfig loss_config(const Args& a);

/// How predictions are scored against labels.
struct Scoring {
  enum Kind { kNone, kArgmax, kThreshold, kRegression } kind = kNone;
  double threshold = 0.5;
  bool has_ignore = false;
  int64_t ignore_index = -100;
  std::string metric_name() const { return kind == kRegression ? "r2" : kind == kNone ? "" : "accuracy"; }
};

/// A model with its loss: the loss builder's output (or the model itself when it has a loss).
struct LossModel {
  std::string bytes;
  LossConfig cfg;
  std::string score_output;  ///< resolved ("" when the model carries its own loss and none was named)
  Scoring scoring;
  std::string base_dir;      ///< folder of the model's external data ("" = none)
};
/// Throws InvalidArgument naming a missing loss output, an unknown score output or loss argument.
/// `base_dir`: the model file's folder, where its external data (if any) lies.
LossModel build_loss_model(const std::string& model_bytes, const LossConfig& cfg, const std::string& base_dir);

/// Accumulates a metric over batches.
class ScoreAccumulator {
 public:
  explicit ScoreAccumulator(Scoring s) : s_(s) {}
  void add(const Tensor& score, const Tensor& label);
  bool defined() const { return s_.kind != Scoring::kNone && total_ > 0; }
  double value() const;  ///< accuracy in [0, 1] or R² (sklearn's r2_score, outputs averaged)
  int64_t correct() const { return correct_; }
  int64_t total() const { return total_; }
  /// Exact text of the running sums (checkpoint metadata) and back; from_text throws
  /// InvalidArgument on damaged text.
  std::string to_text() const;
  void from_text(const std::string& t);

 private:
  Scoring s_;
  int64_t correct_ = 0, total_ = 0;
  std::vector<double> sum_y_, sum_y2_, ss_res_;  // per regression output
};

/// Loss and metric of a model over a whole dataset, batch by batch. `run` returns {loss, score}
/// (score undefined when not scored) for one batch.
struct EvalResult {
  double loss = 0;
  double metric = 0;
  bool has_metric = false;
  int64_t correct = 0, total = 0, samples = 0;
};
EvalResult evaluate(const Dataset& d, int64_t batch_size, const LossModel& lm,
                    const std::function<std::vector<Tensor>(const Dataset&)>& run);

/// Scalar value of a loss tensor.
double scalar_value(const Tensor& t);

}  // namespace cli
