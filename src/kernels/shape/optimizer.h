// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// The update step: attributes and input checks of the com.onnxtrain optimizers (SGD, Momentum,
// Adam, AdamW, LAMB, Adagrad: rows of src/ops/optimizers.h), AccumulateGradients, GlobalNormClip,
// LossScaleCheck and the ai.onnx.preview.training Adagrad, Momentum and Adam; the inputs their
// outputs overwrite in place.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/shape/common.h"
#include "ops/optimizers.h"

namespace onnxtrain::kernels::shape {

/// Output k of an update node over n tensors, the first tensor input `first`, then n gradients,
/// then the state groups: the input it overwrites in place (tensor k for k < n, else tensor k % n
/// of state group k / n).
inline size_t updated_input(size_t first, size_t n, size_t k) {
  const size_t group = k / n;
  return first + (group == 0 ? 0 : group + 1) * n + k % n;
}

/// A com.onnxtrain optimizer node's attributes, the spec's defaults for those it leaves out; 0 /
/// false for those its optimizer does not have.
struct OptimizerAttrs {
  const ops::OptimizerSpec* spec = nullptr;
  float lambda = 0, momentum = 0, alpha = 0, beta = 0, epsilon = 0, lr_decay = 0, ratio_min = 0, ratio_max = 0;
  bool nesterov = false, bias_correction = false;
  size_t first = ops::kOptimizerFirstWeightInput;  ///< first weight input (one later with update_signal = 1)

  bool gated() const { return first != ops::kOptimizerFirstWeightInput; }
};
/// Fails naming the node for an attribute `spec` does not list (besides update_signal) and for
/// flags (update_signal, nesterov, do_bias_correction) other than 0 or 1.
OptimizerAttrs read_optimizer_attrs(const KernelInfo& info, const ops::OptimizerSpec& spec);
/// Checks an optimizer node's inputs and outputs: lr (float32), step (int64), grad_scale (float64,
/// optional) and update_signal (bool, when gated) of one element; n weights of float32 or float64,
/// gradients and states of their weight's type and shape; every output named. Returns n.
size_t check_optimizer_inputs(const PrepareContext& ctx, const OptimizerAttrs& at);
/// The step's scalars at run time: lr finite, step >= 1.
void check_optimizer_step(const RunContext& ctx, float lr, int64_t step);

/// AccumulateGradients has no attributes.
void check_accumulate_gradients_attrs(const KernelInfo& info);
/// AccumulateGradients(reset, A1..n, G1..n) -> A1..n': reset a bool of one element, accumulators
/// of float32 or float64, gradients of their accumulator's type and shape, every output named.
/// Returns n.
size_t check_accumulate_gradients(const PrepareContext& ctx);

/// GlobalNormClip's only attribute, max_norm: required, finite and > 0.
float read_global_norm_clip_max_norm(const KernelInfo& info);
/// GlobalNormClip(G1..n) -> scale[, norm]: at least one gradient, of float32 or float64; output 0
/// named. The outputs are float64 [1].
void check_global_norm_clip(const PrepareContext& ctx);

/// LossScaleCheck's only attribute, max_norm: finite and >= 0 (0, the default: no clipping).
float read_loss_scale_max_norm(const KernelInfo& info);
/// LossScaleCheck(loss_scale, G1..n) -> grad_scale, all_finite: loss_scale a float32 of one
/// element, at least one gradient of float32 or float64, both outputs named. The outputs are
/// float64 [1] and bool [1].
void check_loss_scale_check(const PrepareContext& ctx);
/// The loss scale at run time: finite and > 0.
void check_loss_scale(const RunContext& ctx, double loss_scale);

/// The ai.onnx.preview.training optimizers.
enum class PreviewAlgorithm { kAdagrad, kMomentum, kAdam };
/// Their attributes (ONNX's defaults; Momentum's alpha, beta and mode are required).
struct PreviewAttrs {
  PreviewAlgorithm algo = PreviewAlgorithm::kAdagrad;
  size_t groups = 3;  ///< tensor groups: X, G and the states (Adam: V and H; else one)
  float norm = 0, decay = 0, epsilon = 0, alpha = 0, beta = 0, norm_post = 0;
  bool nesterov = false;
};
/// Fails naming the node for a Momentum mode other than 'standard' or 'nesterov'.
PreviewAttrs read_preview_attrs(const KernelInfo& info, PreviewAlgorithm algo);
/// Checks (R, T, X1..n, G1..n, states) -> X1..n', states': the input and output counts, R a float
/// and T an int64 of one element, every X float32 or float64 (else NotImplemented), gradients and
/// states of their X's type and shape. Returns n. Outputs may be left unnamed.
size_t check_preview_inputs(const PrepareContext& ctx, const PreviewAttrs& at);

// onnxruntime's com.microsoft operators of its training artifacts (the second operator table).
// They update their inputs in place, as onnxruntime's do: the accumulation buffer, the weights and
// the momentums fed to them change.

/// InPlaceAccumulatorV2(buffer, value[, overwrite_flag]): buffer and value tensors of one type
/// (float32 or float64, else NotImplemented) and shape, overwrite_flag a bool of one element.
void check_inplace_accumulator(const PrepareContext& ctx);

/// AdamWOptimizer's attributes (onnxruntime's schema defaults: alpha 0.9, beta 0.999, epsilon
/// 1e-8, weight_decay 0.01, adam_mode 0, correct_bias 1).
struct AdamWAttrs {
  float alpha = 0.9f, beta = 0.999f, epsilon = 1e-8f, weight_decay = 1e-2f;
  int64_t adam_mode = 0;  ///< 0: PyTorch's AdamW, 1: Hugging Face's
  bool correct_bias = true;
};
/// Fails naming the node for adam_mode other than 0 or 1, correct_bias other than 0 or 1, or
/// adam_mode 0 without correct_bias (PyTorch's AdamW always corrects).
AdamWAttrs read_adamw_attrs(const KernelInfo& info);
/// The scalars of AdamWOptimizer / SGDOptimizerV2: lr a float32 of one element; step (AdamW, input
/// `step`, or none when `step` is -1) an int64 of one element; the sequence inputs [first, last)
/// sequences; update_signal (input `signal`, optional) a bool of one element.
void check_sequence_optimizer_inputs(const PrepareContext& ctx, int step, size_t first, size_t last, size_t signal);
/// At run time: the sequences [first, last) hold as many tensors as the first (at least one),
/// float32, the tensors at one index of one shape. Returns the count.
size_t check_sequence_optimizer_tensors(const RunContext& ctx, size_t first, size_t last);
/// InplaceClipGradNorm's attributes: max_norm (default 1) and norm_type, which must be "fro" (the only
/// norm onnxruntime implements; others fail naming it). Returns max_norm.
float read_clip_grad_norm_attrs(const KernelInfo& info);

}  // namespace onnxtrain::kernels::shape
