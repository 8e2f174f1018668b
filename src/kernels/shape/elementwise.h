// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Elementwise: attributes, validation and output shapes of the binary operators (numpy, legacy and
// PRelu's broadcasting), Pow, Min/Max/Sum/Mean, Where, Clip, BitShift, Celu and
// Cast/CastLike.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// Inputs i and j have one element type; fails naming the node and both types.
void check_same_type(const PrepareContext& ctx, size_t i, size_t j);

/// How a binary operator relates its operands' shapes.
enum class Bcast {
  kNumpy,           ///< multidirectional (opset >= 7)
  kLegacy,          ///< opset <= 6: B broadcast onto A when broadcast=1 (at `axis`), else same shapes
  kUnidirectional,  ///< B broadcasts to A; the output has A's shape (PRelu)
  kChannel,         ///< PRelu opset <= 6: unidirectional, but a 1-D B of A.shape[1] values is per channel
};

/// A binary operator's broadcasting: `mode` from opset 7 on; before, numpy is kLegacy and
/// unidirectional is kChannel, with the `broadcast` and `axis` attributes.
struct BinaryAttrs {
  Bcast mode = Bcast::kNumpy;
  bool legacy_broadcast = false;    ///< broadcast=1
  int64_t legacy_axis = INT64_MIN;  ///< `axis`; INT64_MIN when absent
};
BinaryAttrs read_binary_attrs(const KernelInfo& info, Bcast mode);

/// Operand shapes as broadcasting lines them up (legacy and per-channel B padded with trailing 1s)
/// and the output's.
struct BinaryGeom {
  Shape a, b, output;
};
/// A (input 0) and B (input 1) under at.mode: without broadcast=1 legacy shapes match; legacy B
/// fits A at `axis`; the shapes broadcast; a non-numpy output is A's shape. Fails naming the node.
BinaryGeom binary_geometry(const PrepareContext& ctx, const BinaryAttrs& at);

/// Pow: base (input 0) and exponent (input 1) of numeric types, not necessarily the same.
void check_pow_types(const PrepareContext& ctx);

/// BitShift's `direction`: true for LEFT, false for RIGHT; anything else fails.
bool read_bitshift_left(const KernelInfo& info);

/// Celu's `alpha` (default 1); 0 fails.
float read_celu_alpha(const KernelInfo& info);

/// Min/Max/Sum/Mean: every input's shape and their numpy broadcast (the output's shape).
struct VariadicGeom {
  std::vector<Shape> inputs;
  Shape output;
};
/// At least one input, none missing, all of input 0's element type.
void check_variadic_inputs(const PrepareContext& ctx);
/// Fails naming the node and the shapes when they do not broadcast.
VariadicGeom variadic_geometry(const PrepareContext& ctx);

/// Where(C, X, Z): C bool, X and Z of one supported element type; returns the broadcast of the
/// three shapes (the output's, of X's type).
Shape where_shape(const PrepareContext& ctx);

/// Clip's bounds: the min/max attributes before opset 11, optional inputs 1 and 2 after.
struct ClipAttrs {
  bool from_attrs = false;
  bool has_min = false, has_max = false;
  float min = 0, max = 0;
};
ClipAttrs read_clip_attrs(const KernelInfo& info);
/// Clip: X numeric; the bound inputs (when present) one-element tensors of X's type. The output
/// has X's type and shape.
void check_clip(const PrepareContext& ctx);

/// Cast's `to`: a type number, or a type name such as "FLOAT" (opset < 6); NotImplemented for a
/// type without support.
DType read_cast_to(const KernelInfo& info);
/// The type Cast converts to (CastLike: input 1's, else `to`); input 0's and that type supported.
/// The output has input 0's shape.
DType cast_target(const PrepareContext& ctx, bool like, DType to);

}  // namespace onnxtrain::kernels::shape
