// What training shows and writes: the progress display (a bar on a terminal, plain periodic lines
// otherwise), metrics records (JSON lines) and the loss/accuracy curve (SVG, written here).
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "onnxtrain/trainer.h"

namespace cli {

using onnxtrain::TrainRecord;

/// The name metrics files, curves and summaries use for an Objective's metric: "accuracy" (both
/// accuracies), "r2", or "" without a metric.
std::string metric_label(onnxtrain::Metric m);

/// JSON line of a history record; `metric` from metric_label (empty: no metric).
std::string record_json(const TrainRecord& r, const std::string& metric);

/// The curve: loss (train and validation) and, when there is a metric, accuracy or R², against
/// the optimizer step. Returns the SVG document.
std::string curve_svg(const std::vector<TrainRecord>& rs, const std::string& metric, const std::string& title);

/// printf of one double with format `f` ("%.1f s", "%a": hexadecimal, exact).
std::string fmt(const char* f, double v);
/// "1:05", "12s"
std::string format_duration(double seconds);
/// "0.1234", "1.2e-05"
std::string format_number(double v);

class Progress {
 public:
  enum Mode { kNone, kPlain, kBar };
  /// `mode_name`: auto (bar when stderr is a terminal, else plain), bar, plain, none.
  Progress(const std::string& mode_name, int64_t total_steps, int64_t epochs, const std::string& metric);
  /// After a training batch: current counters and running means.
  void update(int64_t step, int64_t epoch, double loss, double metric, double samples_per_s, double eta_s);
  /// A line that stays (epoch summaries, notes); clears the bar first.
  void line(const std::string& s);
  /// Clears the bar for good.
  void finish();
  Mode mode() const { return mode_; }

 private:
  Mode mode_;
  int64_t total_, epochs_;
  std::string metric_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_, last_plain_;
  int width_ = 0;
};

}  // namespace cli
