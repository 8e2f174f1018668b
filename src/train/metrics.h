// Running score metrics over batches (accuracy, binary accuracy, R²), with an exact text form for
// the trainer's checkpoints, and the loss of a batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnxtrain/trainer.h"

namespace onnxtrain::train {

/// The value of loss output `name` as a double; InvalidArgument when it is not a scalar.
double scalar_loss(const Tensor& t, const std::string& name);

/// Accumulates Objective::metric over batches of (scores, labels).
class ScoreAccumulator {
 public:
  explicit ScoreAccumulator(const Objective& o) : metric_(o.metric), threshold_(o.threshold), ignore_(o.ignore_index) {}
  /// Adds one batch; InvalidArgument when the labels do not match the scores.
  void add(const Tensor& score, const Tensor& label);
  bool defined() const { return metric_ != Metric::kNone && total_ > 0; }
  /// Accuracy in [0, 1] or R²; NaN when nothing was added or there is no metric.
  double value() const;
  int64_t correct() const { return correct_; }
  int64_t total() const { return total_; }
  /// Exact text of the running sums (hexadecimal floats) and back; from_text throws
  /// InvalidArgument on damaged text.
  std::string to_text() const;
  void from_text(const std::string& t);

 private:
  Metric metric_;
  double threshold_;
  std::optional<int64_t> ignore_;
  int64_t correct_ = 0, total_ = 0;
  std::vector<double> sum_y_, sum_y2_, ss_res_;  // per regression output
};

}  // namespace onnxtrain::train
