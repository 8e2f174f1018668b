#include "onnxtrain/step_driver.h"

#include <algorithm>
#include <cmath>

#include "onnxtrain/error.h"

namespace onnxtrain {

void LossScaleState::update(bool all_finite) {
  if (!all_finite) {
    ++skipped;
    if (dynamic) scale = std::max(min_scale, scale / 2);
    stable_steps = 0;
  } else if (dynamic && ++stable_steps >= up_scale_window) {
    scale = std::min(max_scale, scale * 2);
    stable_steps = 0;
  }
}

void LossScaleState::reset() {
  scale = initial_scale;
  stable_steps = 0;
}

void LossScaleState::validate() const {
  auto positive = [](const char* field, double v) {
    if (!(v > 0) || !std::isfinite(v))
      throw_error<InvalidArgument>("loss scaler: ", field, " ", v, " must be finite and > 0");
  };
  positive("scale", scale);
  positive("initial_scale", initial_scale);
  positive("min_scale", min_scale);
  positive("max_scale", max_scale);
  if (min_scale > max_scale)
    throw_error<InvalidArgument>("loss scaler: min_scale ", min_scale, " is above max_scale ", max_scale);
  if (up_scale_window < 1) throw_error<InvalidArgument>("loss scaler: up_scale_window ", up_scale_window, " must be >= 1");
  if (stable_steps < 0 || skipped < 0)
    throw_error<InvalidArgument>("loss scaler: stable_steps ", stable_steps, " and skipped ", skipped,
                                 " must not be negative");
}

void StepDriver::finish_run(bool applied) {
  if (!update_due()) {
    ++micro;
    return;
  }
  micro = 0;
  if (applied) ++step;
}

}  // namespace onnxtrain
