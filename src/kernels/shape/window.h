// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Sliding-window geometry shared by Conv, ConvTranspose and the pooling operators: the
// attributes (auto_pad, kernel_shape, strides, pads, dilations, ceil_mode) and the output size;
// Conv / ConvTranspose's and the pools' node-level checks and shapes (and their gradients').
//   forward:    out = floor_or_ceil((in + pad_b + pad_e - dk) / stride) + 1,  dk = (k - 1) * dilation + 1
//   SAME_*:     out = ceil(in / stride), pad total = max(0, (out - 1) * stride + dk - in), the odd
//               unit at the end (SAME_UPPER) or at the start (SAME_LOWER)
//   transposed: out = stride * (in - 1) + output_padding + dk - pad_b - pad_e
#pragma once

#include <string>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

struct WindowAttrs {
  std::string auto_pad = "NOTSET";
  std::vector<int64_t> kernel, strides, pads, dilations;  // empty: not given
  bool ceil_mode = false;

  /// Reads and checks the attributes (values must be positive, pads non-negative).
  void read(const KernelInfo& info);
};

/// Resolved geometry of one node for concrete shapes (spatial dims only).
struct WindowGeom {
  size_t nd = 0;
  Shape in, kernel, stride, dilation, pad_b, pad_e, out;
  Shape out_pad;  ///< ConvTranspose output_padding (zeros elsewhere)
  int64_t extent(size_t i) const { return (kernel[i] - 1) * dilation[i] + 1; }
};

/// Forward geometry (Conv and pools). `kernel` is the spatial kernel (from kernel_shape or W);
/// fails naming the node when sizes are inconsistent or the output would be empty or negative.
WindowGeom forward_geometry(const PrepareContext& ctx, const WindowAttrs& a, const Shape& in, const Shape& kernel);

/// ConvTranspose geometry: output_padding and output_shape (spatial or full) as in the ONNX spec.
WindowGeom transposed_geometry(const PrepareContext& ctx, const WindowAttrs& a, const Shape& in, const Shape& kernel,
                               const std::vector<int64_t>& output_padding, std::vector<int64_t> output_shape);

/// Element type of input 0, a float type (NotImplemented otherwise) that every other present
/// input shares.
DType float_inputs(const PrepareContext& ctx);

/// Attributes and resolved shapes of a Conv / ConvTranspose node (forward and gradient kernels).
struct ConvShape {
  bool transposed = false;
  WindowAttrs attrs;
  int64_t group = 1;
  std::vector<int64_t> output_padding, output_shape;
  WindowGeom g;  ///< the node's geometry (ConvTranspose: in = its input's spatial dims)
  int64_t N = 0, C = 0, M = 0;  ///< batch, input and output channels
  int64_t kk = 1, pin = 1, pout = 1;  ///< kernel, input and output spatial sizes (products)
  Shape y;  ///< the node's output shape

  /// Reads and checks the attributes (group positive; ConvTranspose's output_padding/output_shape).
  void read(const KernelInfo& info, bool transposed);
  /// Checks X[N, C, D...] and W against the attributes (ranks, kernel_shape, groups, channels)
  /// and resolves the geometry and Y; every size's product must fit int64.
  void resolve(const PrepareContext& ctx, const Shape& x, const Shape& w);
};
/// com.microsoft FusedConv's activation (and NchwcConv's): Y = act(Conv(X, W, B) + Z).
struct ConvActivation {
  enum class Kind { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kTanh, kHardSigmoid, kSiLU, kHardSwish } kind = Kind::kNone;
  float alpha = 0, beta = 0;  ///< LeakyRelu: alpha; Clip: min, max; HardSigmoid: alpha, beta

  /// Reads `activation` and `activation_params` (their count checked against the activation;
  /// NotImplemented for an unknown activation). `blocked`: also "SiLU" (x * Sigmoid(x)) and
  /// "HardSwish" (x * HardSigmoid(x) with alpha 1/6, beta 1/2), NchwcConv's, which
  /// block_conv_layouts folds in; not com.microsoft.FusedConv's.
  void read(const KernelInfo& info, bool blocked = false);
};

/// Conv's optional bias (input 2) is [M].
void check_conv_bias(const PrepareContext& ctx, const ConvShape& p);
/// ConvGrad(dY, X, W): the three inputs present, float, one type; returns the element type.
DType conv_grad_inputs(const PrepareContext& ctx);
/// ConvGrad's dY (input 0) has the shape of the resolved node's output.
void check_conv_grad_dy(const PrepareContext& ctx, const ConvShape& p);
/// ConvGrad(dY, X, W) -> dX, dW, dB at prepare: checks the inputs (conv_grad_inputs,
/// check_conv_grad_dy), resolves `p` (a ConvShape, or a provider's type deriving from it, through
/// its own resolve) from X and W and sets the requested outputs (dX like X, dW like W, dB [M]);
/// `want[i]`: output i is requested. Returns the element type.
template <class P>
DType prepare_conv_grad(PrepareContext& ctx, P& p, bool want[3]) {
  const DType dt = conv_grad_inputs(ctx);
  const Shape& x = ctx.input_shape(1);
  p.resolve(ctx, x, ctx.input_shape(2));
  check_conv_grad_dy(ctx, p);
  for (size_t i = 0; i < 3; ++i) want[i] = ctx.has_output(i);
  if (want[0]) ctx.set_output(0, dt, x);
  if (want[1]) ctx.set_output(1, dt, ctx.input_shape(2));
  if (want[2]) ctx.set_output(2, dt, {p.M});
  return dt;
}

enum class PoolKind { kMax, kAvg, kLp };

/// Attributes and resolved shapes of a pooling node (MaxPool, AveragePool, LpPool, the Global
/// ones; forward and gradient kernels).
struct PoolShape {
  PoolKind kind = PoolKind::kMax;
  bool global = false;
  WindowAttrs attrs;
  bool include_pad = false, col_major = false;  ///< count_include_pad, storage_order
  double p = 2.0;                                ///< LpPool's p
  WindowGeom g;
  int64_t planes = 0;  ///< N * C
  Shape y;             ///< the node's output shape

  /// Reads and checks the attributes; grad: a gradient node (com.onnxtrain), whose p is always a
  /// float attribute.
  void read(const KernelInfo& info, PoolKind kind, bool global, bool grad);
  /// Checks X[N, C, D...] and resolves the geometry and the output shape.
  void resolve(const PrepareContext& ctx, const Shape& x);
};
/// A pool's Indices output (output 1, when requested) exists only for MaxPool from opset 8 on;
/// returns whether it is requested.
bool pool_wants_indices(const PrepareContext& ctx, const PoolShape& p);
/// PoolGrad(dY, X[, Y or Indices]) of element type `dt` (input 0's, already checked): X present
/// and of type dt; resolves `p` from X and checks dY against Y; the third input: LpPool's forward
/// output Y (required), MaxPool's row-major Indices (int64), none for AveragePool. Returns
/// whether the third input is present.
bool pool_grad_inputs(const PrepareContext& ctx, PoolShape& p, DType dt);

}  // namespace onnxtrain::kernels::shape
