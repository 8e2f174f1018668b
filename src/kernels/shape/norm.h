// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Normalization and Dropout: attributes, validation and geometry of BatchNormalization,
// InstanceNormalization, LayerNormalization, LRN, Dropout and their gradients.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// Input i is present and a float tensor of `numel` elements (`what` names it).
void check_param(const PrepareContext& ctx, size_t i, const char* what, int64_t numel);
/// Input i, [N, C, S..] (`what` names it): a float tensor of rank >= 2; returns its element type.
DType check_nc_input(const PrepareContext& ctx, size_t i, const char* what);
/// dY (input 0) and X (input 1, checked by check_nc_input) have the same shape and type; returns it.
DType check_nc_grad_inputs(const PrepareContext& ctx);

/// BatchNormalization's attributes. Opset < 14: training when outputs beyond Y are requested (and,
/// opset < 7, is_test = 0); opset >= 14: training_mode. spatial = 0 (opset < 9): statistics per
/// element of dims[1:].
struct BatchNormAttrs {
  float epsilon = 1e-5f, momentum = 0.9f;
  bool spatial = true, new_style = true;  ///< new_style: opset >= 14
  bool train_attr = false;                ///< training_mode, or (opset < 14) is_test = 0
  bool torch_var = false;                 ///< ExecOptions::torch_running_var
};
BatchNormAttrs read_batch_norm_attrs(const KernelInfo& info);
/// X viewed as [N, C, S]: spatial, C = dims[1] and S = prod(dims[2:]); else C = prod(dims[1:]), S = 1.
struct BatchNormGeom {
  int64_t n = 0, c = 0, s = 1;
};
/// BatchNormalization: X (input 0) by check_nc_input, scale, B, mean and var float tensors of C
/// elements; returns X's view.
BatchNormGeom check_batch_norm(const PrepareContext& ctx, const BatchNormAttrs& at);
/// Whether the node trains: training_mode (opset >= 14), else is_test = 0 and an output past Y requested.
bool batch_norm_training(const PrepareContext& ctx, const BatchNormAttrs& at);

/// BatchNormalization's outputs at prepare: Y like X; the running statistics (1, 2) like input_mean /
/// input_var, in training written in place over them (a kernel reads both before writing either);
/// opset < 14 also the batch's saved statistics (3, 4) in X's type.
void set_batch_norm_outputs(PrepareContext& ctx, const BatchNormAttrs& at, bool training);

/// BatchNormalizationGrad's attributes (the forward node's mode).
struct BatchNormGradAttrs {
  float epsilon = 1e-5f;
  bool training = false, spatial = true;
};
BatchNormGradAttrs read_batch_norm_grad_attrs(const KernelInfo& info);
/// BatchNormalizationGrad(dY, X, scale, mean, var) -> dX, dscale, dB (, dmean, dvar): dY and X by
/// check_nc_grad_inputs, scale (and, in inference mode, mean and var) of C elements, at most 5
/// outputs, dmean and dvar only in inference mode; returns X's view.
BatchNormGeom check_batch_norm_grad(const PrepareContext& ctx, const BatchNormGradAttrs& at);
/// BatchNormalizationGrad's outputs at prepare: dX like X, dscale and dB like scale, dmean and dvar
/// like mean and var.
void set_batch_norm_grad_outputs(PrepareContext& ctx);

/// InstanceNormalization: input (input 0) by check_nc_input, scale and B of C elements; returns C.
int64_t check_instance_norm(const PrepareContext& ctx);

/// LayerNormalization's attributes; stash_type must be a float type.
struct LayerNormAttrs {
  int64_t axis = -1;
  float epsilon = 1e-5f;
  DType stash = DType::kFloat32;
};
LayerNormAttrs read_layer_norm_attrs(const KernelInfo& info);
/// X viewed as [rows, cols] at the (normalized) axis.
struct LayerNormGeom {
  int64_t axis = 0, rows = 0, cols = 0;  ///< rows = prod(dims[:axis]), cols = prod(dims[axis:])
  Shape norm_shape;                      ///< dims[axis:]
  Shape stat_shape;                      ///< Mean and InvStdDev: dims[:axis] then ones up to X's rank
};
/// LayerNormalization: X (input 0) a float tensor of rank >= 1, Scale (required) and B (optional)
/// of X's type broadcasting to dims[axis:]; returns X's view.
LayerNormGeom check_layer_norm(const PrepareContext& ctx, int64_t axis);
/// LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev): X (input 1) a float tensor of rank >= 1,
/// dY of its shape and type, Scale broadcasting to dims[axis:], Mean and InvStdDev float tensors
/// of `rows` elements; returns X's view.
LayerNormGeom check_layer_norm_grad(const PrepareContext& ctx, int64_t axis);

/// LRN's (and LRNGrad's) attributes; size must be in [1, 2^31].
struct LRNAttrs {
  int64_t size = 1;
  float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;

  /// Channels of c's window, [c - (size-1)/2, c + size/2] clipped to [0, C): first and last.
  std::pair<int64_t, int64_t> window(int64_t c, int64_t C) const {
    return {std::max<int64_t>(0, c - (size - 1) / 2), std::min(C - 1, c + size / 2)};
  }
  /// Channels whose window holds c (the transposed window), clipped to [0, C): first and last.
  std::pair<int64_t, int64_t> windows_holding(int64_t c, int64_t C) const {
    return {std::max<int64_t>(0, c - size / 2), std::min(C - 1, c + (size - 1) / 2)};
  }
};
LRNAttrs read_lrn_attrs(const KernelInfo& info);

/// Dropout's optional inputs ratio (a float scalar) and training_mode (a bool scalar), at input
/// positions `ratio` and `training_mode` (DropoutGrad's follow dY and the mask).
void check_dropout_scalars(const PrepareContext& ctx, size_t ratio, size_t training_mode);

/// A training ratio: kept values are divided by 1 - ratio, so it must be in [0, 1).
template <class Ctx>
void check_ratio(const Ctx& ctx, double r) {
  if (!(r >= 0.0 && r < 1.0)) ctx.fail("ratio must be in [0, 1), got ", r);
}

/// Dropout's attributes. Opset < 12: the ratio attribute, and training when the session trains
/// (ExecOptions::training) and, opset < 7, is_test = 0; opset >= 12: the inputs ratio and
/// training_mode (default false).
struct DropoutAttrs {
  int64_t opset = 0;
  double ratio = 0.5;  ///< opset < 12
  bool train = false;  ///< opset < 12
};
DropoutAttrs read_dropout_attrs(const KernelInfo& info);
/// Inference, training, or known only at run time (a training_mode input whose value is not known now).
enum class DropoutMode { kInfer, kTrain, kRuntime };
/// Dropout: X a float tensor, ratio and training_mode scalars, a ratio known now in [0, 1) when
/// training; returns the mode, `keep_all` when a constant ratio of 0 keeps every element.
DropoutMode dropout_mode(const PrepareContext& ctx, const DropoutAttrs& at, bool* keep_all);

/// DropoutGrad's attributes: ratio (when there is no ratio input), and the training default
/// without a training_mode input: the session's training flag when session_training = 1 (the
/// forward opset < 12), else true.
struct DropoutGradAttrs {
  double ratio = 0.5;
  bool default_training = true;
};
DropoutGradAttrs read_dropout_grad_attrs(const KernelInfo& info);
/// DropoutGrad(dY, mask, ratio?, training_mode?): dY a float tensor, the mask bool or of dY's type
/// and shape, ratio and training_mode scalars; returns whether a constant ratio of 0 passes dY
/// through (dX = dY in both modes).
bool check_dropout_grad(const PrepareContext& ctx, const DropoutGradAttrs& at);

}  // namespace onnxtrain::kernels::shape
