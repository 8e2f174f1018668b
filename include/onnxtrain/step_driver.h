// The per-step host logic of training, in one place: gradient accumulation (which run overwrites
// the gradient buffers, which one completes an optimizer step), the optimizer step count, and
// onnxruntime's dynamic loss scaling for float16. TrainingSession runs them; the Python trainers'
// loss scalers (ORTTrainer's DynamicLossScaler, the legacy ORTTrainer's LossScaler) are views of a
// LossScaleState, so the rule and its state exist once.
#pragma once

#include <cstdint>

namespace onnxtrain {

/// onnxruntime's DynamicLossScaler: after an update step with a non-finite gradient the scale
/// halves (not below min_scale) and the count of stable steps restarts; after up_scale_window
/// finite updates in a row it doubles (not above max_scale). A static scaler (dynamic false)
/// keeps its scale and only counts the skipped updates.
struct LossScaleState {
  double scale = 65536.0;          ///< the current loss scale
  double initial_scale = 65536.0;  ///< what reset() restores
  int64_t up_scale_window = 2000;  ///< finite updates in a row before the scale doubles
  double min_scale = 1.0;          ///< lower bound when halving
  double max_scale = 16777216.0;   ///< upper bound when doubling (2^24)
  bool dynamic = true;             ///< false: a fixed scale
  int64_t stable_steps = 0;        ///< finite updates since the scale last changed
  int64_t skipped = 0;             ///< updates skipped for non-finite gradients

  /// The rule above, after an update step whose gradients were all finite or not.
  void update(bool all_finite);
  /// Back to initial_scale with no stable steps counted (skipped updates stay counted).
  void reset();
  /// Throws InvalidArgument naming the first field out of range (scales finite and > 0,
  /// min_scale <= max_scale, up_scale_window >= 1, counts >= 0).
  void validate() const;
};

/// Gradient accumulation and the optimizer step count of a training run.
struct StepDriver {
  int64_t accumulation_steps = 1;  ///< runs per optimizer update
  int64_t step = 0;                ///< optimizer updates applied
  int64_t micro = 0;               ///< runs accumulated since the last update

  /// The next run overwrites the gradient buffers (it starts an accumulation).
  bool reset_due() const { return micro == 0; }
  /// The next run completes an optimizer update.
  bool update_due() const { return micro + 1 >= accumulation_steps; }
  /// Counts a run: one that completed an update (update_due() before it) restarts the
  /// accumulation and, when the update was applied (not skipped), counts a step.
  void finish_run(bool applied);
};

}  // namespace onnxtrain
