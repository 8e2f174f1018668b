// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Sliding-window geometry shared by Conv, ConvTranspose and the pooling operators: the
// attributes (auto_pad, kernel_shape, strides, pads, dilations, ceil_mode) and the output size.
//   forward:    out = floor_or_ceil((in + pad_b + pad_e - dk) / stride) + 1,  dk = (k - 1) * dilation + 1
//   SAME_*:     out = ceil(in / stride), pad total = max(0, (out - 1) * stride + dk - in), the odd
//               unit at the end (SAME_UPPER) or at the start (SAME_LOWER)
//   transposed: out = stride * (in - 1) + output_padding + dk - pad_b - pad_e
#pragma once

#include <string>
#include <vector>

#include "kernels/kernel.h"

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

}  // namespace onnxtrain::kernels::shape
