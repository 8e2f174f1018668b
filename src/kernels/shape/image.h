// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Image operators: attributes, validation, per-axis taps and output shapes of Resize (and
// ResizeGrad), DepthToSpace and SpaceToDepth.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// Most axes a Resize input may have.
constexpr size_t kResizeMaxRank = 64;

enum class ResizeMode { kNearest, kLinear, kCubic };
enum class ResizeCoord {
  kHalfPixel,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNN,
  kTfCropAndResize
};
enum class ResizeRounding { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kOpset10 };

struct ResizeAttrs {
  ResizeMode mode = ResizeMode::kNearest;
  ResizeCoord coord = ResizeCoord::kHalfPixel;
  ResizeRounding rounding = ResizeRounding::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
};
/// Resize's attributes at `opset` (10: mode nearest or linear, asymmetric coordinates, opset 10's
/// rounding); fails naming the node on an unknown value, NotImplemented on opset 18's antialias,
/// axes and keep_aspect_ratio_policy.
ResizeAttrs read_resize_attrs(const KernelInfo& info, int64_t opset);

/// One axis of a resize: for each output coordinate, K taps (input coordinate, weight) and
/// whether the coordinate falls outside the crop (tf_crop_and_resize).
struct ResizeAxis {
  int64_t in = 0, out = 0;
  int K = 1;
  std::vector<int64_t> idx;      ///< [out * K], clamped to [0, in)
  std::vector<double> w;         ///< [out * K]
  std::vector<uint8_t> outside;  ///< [out]
  bool any_outside = false;

  /// Every output coordinate reads the input coordinate of the same index, nothing outside.
  bool identity() const;
  /// Drops taps of weight 0 when every output coordinate has exactly one tap of weight 1.
  void compress();
};

/// Output shape and per-axis taps of Resize(X of shape xs), reading roi, scales and sizes at the
/// forward's input positions (opset 10: scales = 1; 11+: roi = 1, scales = 2, sizes = 3). Checks
/// the rank, that exactly one of scales and sizes is given and their values, roi (finite, one
/// start and end per axis, tf_crop_and_resize only) and the size of each axis's table. False
/// when a value that decides them is unknown now (prepare runs again at run time).
bool resize_tables(const PrepareContext& ctx, int64_t opset, const ResizeAttrs& a, const Shape& xs, Shape* out,
                   std::vector<ResizeAxis>* tables);

/// DepthToSpace (to_space; mode DCR or CRD) and SpaceToDepth: blocksize must be positive.
struct SpaceDepthAttrs {
  bool to_space = false;
  int64_t blocksize = 1;
  bool crd = false;
};
SpaceDepthAttrs read_space_depth_attrs(const KernelInfo& info, bool to_space);

/// Y = a transpose of a 6-d view of X: Y (as 6-d, row-major) walks X with `strides`.
struct SpaceDepthGeom {
  Shape output;
  std::array<int64_t, 6> dims{}, strides{};
};
/// X must be 4-D [N, C, H, W] with C divisible by blocksize^2 (DepthToSpace) or H and W by
/// blocksize (SpaceToDepth); every product must fit int64 and the output the allocation limit.
SpaceDepthGeom space_depth_geometry(const PrepareContext& ctx, const SpaceDepthAttrs& a);

}  // namespace onnxtrain::kernels::shape
