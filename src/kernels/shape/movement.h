// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Data movement: Transpose's permutation and output shape, Concat's axis, inputs and output shape.
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

}  // namespace onnxtrain::kernels::shape
