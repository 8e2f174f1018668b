// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Data movement: attributes, validation and output shapes of Transpose, Concat, Split, Slice (and
// SliceGrad), Tile, Pad (and PadGrad) and Trilu.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// Transpose's permutation of a rank-`rank` input: `perm` when the node has the attribute, else
/// the reversed axes; fails naming the node unless it is a permutation of [0, rank).
std::vector<int64_t> transpose_perm(const PrepareContext& ctx, const std::vector<int64_t>& perm, bool has_perm,
                                    size_t rank);
/// out[i] = in[perm[i]].
Shape permuted(const Shape& in, const std::vector<int64_t>& perm);

/// Concat of the node's inputs along attribute `axis`.
struct ConcatGeom {
  int64_t axis = 0;           ///< normalized
  Shape output;
  std::vector<size_t> used;   ///< inputs taking part (legacy 1-D empty inputs of another rank left out)
};
/// Checks element types, ranks and the dims outside the axis; the output's size against the limit.
ConcatGeom concat_geometry(const PrepareContext& ctx, int64_t axis);

/// Split's attributes: sizes from the `split` attribute (opset < 13) or input 1 (13+); else equal
/// parts (opset 18: num_outputs parts of ceil(d / n), the last one smaller).
struct SplitAttrs {
  int64_t axis = 0;
  bool from_input = true, has_attr = false;
  std::vector<int64_t> split;
  int64_t num_outputs = 0;  ///< opset 18's attribute; 0 when absent
};
SplitAttrs read_split_attrs(const KernelInfo& info);
/// Normalized axis and the size of each output along it; false when input 1 is not known now.
bool split_sizes(const PrepareContext& ctx, const SplitAttrs& at, int64_t* axis, std::vector<int64_t>* sizes);

/// A split as row copies: each of the `outer` rows of X (`row` elements) gives output i the next
/// widths[i] elements.
struct SplitRows {
  int64_t outer = 0, row = 0;
  std::vector<int64_t> widths;
};
/// Declares Split's outputs (one output: an alias of X) and returns its rows; false (outputs
/// dynamic) when input 1 is not known now.
bool prepare_split(PrepareContext& ctx, const SplitAttrs& at, SplitRows* rows);

/// Slice's starts/ends/axes attributes (opset 1-9); from opset 10 on (and for SliceGrad) they are
/// inputs, with steps.
struct SliceAttrs {
  bool from_input = true, has_axes = false;
  std::vector<int64_t> starts, ends, axes;
};
SliceAttrs read_slice_attrs(const KernelInfo& info, bool grad);
/// Geometry of Y = X[slice] for an X of shape `in`: Y's shape, X's strides per Y axis and the X
/// offset of Y[0]. Per axis: negatives count from the back, then start is clamped to [0, d]
/// ([0, d-1] for negative steps) and end to [0, d] ([-1, d-1]); count = ceil((end - start) / step)
/// when positive. Inputs starts.. are read from `first` on; false when a value is unknown now.
bool slice_geometry(const PrepareContext& ctx, const SliceAttrs& at, size_t first, const Shape& in, Shape* out,
                    std::vector<int64_t>* strides, int64_t* offset);

/// Tile's output shape and repeats (input 1); false when the repeats are not known now.
bool tile_geometry(const PrepareContext& ctx, Shape* out, std::vector<int64_t>* repeats);

enum class PadMode { kConstant, kReflect, kEdge, kWrap };
/// The `mode` attribute (wrap from opset 19 on).
PadMode read_pad_mode(const KernelInfo& info, int64_t opset);
/// Pad's pads (the `pads`/`paddings` attribute before opset 11, input 1 after) and axes (input 3,
/// opset 18+); checks constant_value (input 2). False when a value is unknown now.
bool pad_inputs(const PrepareContext& ctx, int64_t opset, const std::vector<int64_t>& pads_attr,
                std::vector<int64_t>* pads, std::vector<int64_t>* axes, bool* has_axes);
/// Output shape and per-axis index maps of Pad(X of shape `in`, pads over `axes` or every axis):
/// map[a][o] is the input index output position o reads along axis a, -1 for the constant. With
/// begin pad b and a (possibly cropped, negative pads) input range [lo, lo + m), relative index
/// i = o - max(b, 0): inside lo + i; edge: clamp; reflect: period 2(m-1) mirror; wrap: i mod m.
/// The padded shape must fit `dt` elements in memory.
void pad_maps(const PrepareContext& ctx, PadMode mode, const Shape& in, DType dt, const std::vector<int64_t>& pads,
              std::vector<int64_t> axes, bool has_axes, Shape* out, std::vector<std::vector<int64_t>>* maps);

/// Trilu: rank >= 2, k (input 1) a scalar; the output has the input's shape.
void check_trilu(const PrepareContext& ctx);

}  // namespace onnxtrain::kernels::shape
