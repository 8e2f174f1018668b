// The optimizers of a training step, as com.onnxtrain operators: their names, update algorithm,
// state buffers and attributes with defaults — the optimizer rows of the operator table
// (src/ops/onnxtrain_ops.h). The kernels (src/kernels/cpu/optimizer_ops.cpp) dispatch on the
// algorithm and take their defaults from here; the pass that appends the update nodes to the
// training graph (src/train/attach_optimizer.cpp) reads it to name state initializers and validate
// user attributes. Names are onnxruntime-training's `training_optimizer_name` values and attribute
// names.
//
// Node layout shared by every optimizer (n trained tensors, S = states.size()):
//   inputs:  lr (float32, one element), step (int64, one element, 1-based),
//            grad_scale (optional float64, one element: g = G * grad_scale first),
//            update_signal (bool, one element; only with attribute update_signal = 1),
//            W1..Wn, G1..Gn, then S groups of n state tensors (same dtype and shape as W)
//   outputs: W1'..Wn', then the S groups' n outputs; every output overwrites its input in place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onnxtrain::ops {

/// AccumulateGradients(reset, A1..An, G1..Gn) -> A1'..An' in place: A' = reset ? G : A + G.
inline constexpr const char* kAccumulateGradients = "AccumulateGradients";
/// GlobalNormClip(G1..Gn) -> scale[1] (, norm[1]), float64; attribute max_norm.
inline constexpr const char* kGlobalNormClip = "GlobalNormClip";
/// LossScaleCheck(loss_scale: float32 [1], G1..Gn) -> grad_scale: float64 [1], all_finite: bool [1]
/// (gradients of a scaled loss: grad_scale = 1 / loss_scale times the clipping coefficient of
/// attribute max_norm > 0; all_finite: no infinity or NaN in any gradient).
inline constexpr const char* kLossScaleCheck = "LossScaleCheck";

/// Input positions of an optimizer node. With attribute kOptimizerUpdateSignalAttr = 1, input
/// kOptimizerUpdateSignalInput is a bool [1] (false: the node leaves weights and states
/// unchanged) and the weights start one input later.
inline constexpr size_t kOptimizerLrInput = 0, kOptimizerStepInput = 1, kOptimizerGradScaleInput = 2,
                        kOptimizerFirstWeightInput = 3, kOptimizerUpdateSignalInput = 3;
inline constexpr const char* kOptimizerUpdateSignalAttr = "update_signal";

/// The update rule an optimizer row runs.
enum class OptimizerAlgorithm : uint8_t { kSgd, kMomentum, kAdam, kAdamW, kLamb, kAdagrad };

struct OptimizerFloatAttr {
  std::string name;
  float dflt;
};
struct OptimizerIntAttr {
  std::string name;
  int64_t dflt;
};

struct OptimizerSpec {
  std::string name;                          ///< op type, e.g. "AdamOptimizer"
  OptimizerAlgorithm algorithm;              ///< its update rule
  std::vector<std::string> states;           ///< state buffer names, e.g. {"Moment_1", "Moment_2"}
  std::vector<OptimizerFloatAttr> float_attrs;  ///< node attributes
  std::vector<OptimizerIntAttr> int_attrs;      ///< node attributes
  /// Attributes the pass applies when it creates the state initializers (the value every state
  /// element starts from); never node attributes. Adagrad: initial_accumulator_value.
  std::vector<OptimizerFloatAttr> state_init_attrs;
  std::string doc;                           ///< one line: the update it computes

  /// Default of a float / int node attribute; throws InvalidArgument when the optimizer has none.
  float float_default(const std::string& attr) const;
  int64_t int_default(const std::string& attr) const;
  bool has_float(const std::string& attr) const;
  bool has_int(const std::string& attr) const;
  /// "alpha, beta, ..." (the node attributes: float, then int) for error messages.
  std::string attr_list() const;
};

/// Every optimizer, in a fixed order (SGD, Momentum, Adam, AdamW, LAMB, Adagrad).
const std::vector<OptimizerSpec>& optimizer_specs();
/// The spec named `name`, or null.
const OptimizerSpec* find_optimizer_spec(const std::string& name);

}  // namespace onnxtrain::ops
