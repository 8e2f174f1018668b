// Learning-rate schedules. value(t) is the rate used by optimizer step t (t = 1, 2, ...).
//   constant      eta0
//   invscaling    eta0 / t^power_t                       (scikit-learn / onnxcustom LearningRateSGD)
//   optimal       fact / (alpha (t0 + t - 1)), t0 and fact from Bottou's heuristic so value(1) = eta0
//   linear        warm-up to eta0 over warmup steps, then linear decay to end_lr at total steps
//   cosine        warm-up, then cosine decay to end_lr at total steps
//   polynomial    warm-up, then (1 - progress)^power decay to end_lr
//   constant_warmup  warm-up, then eta0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onnxtrain::train {

struct LrSchedule {
  std::string kind = "constant";
  double eta0 = 0.01;
  double power_t = 0.25;   // invscaling
  double alpha = 1e-4;     // optimal
  int64_t warmup = 0;      // warm-up steps (linear ramp from 0)
  int64_t total = 0;       // steps of the whole run (decay schedules)
  double end_lr = 0.0;     // decay target
  double power = 1.0;      // polynomial

  /// Throws InvalidArgument naming a bad field.
  void validate() const;
  /// Learning rate of step t (1-based).
  double value(int64_t t) const;
};

/// The schedule kinds, in a fixed order (onnxtrain::lr_schedule_names()).
const std::vector<std::string>& lr_schedule_kinds();
/// Throws InvalidArgument naming the known kinds unless `kind` is one.
void check_lr_schedule_kind(const std::string& kind);

}  // namespace onnxtrain::train
