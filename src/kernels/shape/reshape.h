// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Shape manipulation: attributes, validation and output shapes of Reshape, Flatten, Squeeze,
// Unsqueeze, Expand and SumToShape, Shape's start/end, the values of Constant and ConstantOfShape
// and Range's element count.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// Reshape's target: the `shape` attribute (opset < 5) or input 1 (5+); allowzero from opset 14.
struct ReshapeAttrs {
  bool allowzero = false, from_input = true;
  std::vector<int64_t> shape;  ///< the attribute's value
};
ReshapeAttrs read_reshape_attrs(const KernelInfo& info);
/// Output shape of Reshape(X = input 0): input 1 is 1-D int64; in the target one -1 takes the
/// remaining elements and (unless allowzero) 0 copies X's dimension; X's element count is kept.
/// False when input 1 is not known now.
bool reshape_shape(const PrepareContext& ctx, const ReshapeAttrs& at, Shape* out);

/// Flatten(X = input 0): [prod(d[:axis]), prod(d[axis:])], axis in [0, r] or, with negative_ok
/// (opset 11+), [-r, r].
Shape flatten_shape(const PrepareContext& ctx, int64_t axis, bool negative_ok);

/// Squeeze/Unsqueeze's axes: the `axes` attribute (opset < 13) or input 1 (13+).
struct AxesAttrs {
  bool from_input = true, has_attr = false;
  std::vector<int64_t> axes;  ///< the attribute's value
};
/// Squeeze's optional axes.
AxesAttrs read_squeeze_attrs(const KernelInfo& info);
/// Unsqueeze's axes (required).
AxesAttrs read_unsqueeze_attrs(const KernelInfo& info);
/// Squeeze(X = input 0): X without the listed axes (each of size 1), or without every size-1 axis
/// when none are listed. False when the axes input is not known now.
bool squeeze_shape(const PrepareContext& ctx, const AxesAttrs& at, Shape* out);
/// Unsqueeze(X = input 0): X with size-1 axes at the listed positions of the output. False when the
/// axes input is not known now.
bool unsqueeze_shape(const PrepareContext& ctx, const AxesAttrs& at, Shape* out);

/// Shape's [begin, end) of a rank-`rank` input's dims for the start/end attributes (opset 15):
/// negatives count from the back, both are clamped to [0, rank], end is at least begin.
std::pair<int64_t, int64_t> shape_span(int64_t rank, int64_t start, int64_t end);

/// Constant's value from its one value attribute (value, value_float(s), value_int(s),
/// value_string(s)); sparse_value is not supported.
Tensor read_constant_value(const KernelInfo& info);
/// ConstantOfShape's `value` as a scalar (one element; default float32 0).
Tensor read_constant_of_shape_value(const KernelInfo& info);
/// ConstantOfShape's output shape: input 0 (1-D int64), a tensor of `dt` that can exist. False
/// when input 0 is not known now.
bool constant_of_shape_shape(const PrepareContext& ctx, DType dt, Shape* out);

/// Range(start, limit, delta): three scalars of one type (float, double, int16, int32, int64);
/// the output's element count n = max(ceil((limit - start) / delta), 0) (delta nonzero, n within
/// the allocation limit). False when a value is not known now.
bool range_count(const PrepareContext& ctx, int64_t* n);

/// Expand(X, shape): the numpy broadcast of X's shape and input 1 (1-D int64, no negative dims),
/// checked against the allocation limit. False when input 1 is not known now.
bool expand_shape(const PrepareContext& ctx, Shape* out);

/// com.onnxtrain.SumToShape(G, shape): G of a float type; the target (input 1, 1-D) broadcasts to
/// G's shape. False when the target is not known now.
bool sum_to_shape_target(const PrepareContext& ctx, Shape* target);

}  // namespace onnxtrain::kernels::shape
