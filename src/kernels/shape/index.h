// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Indexing: attributes, validation, addressing and output shapes of Gather, GatherElements,
// GatherND, ScatterND, ScatterElements, OneHot and the gather gradients (GatherGrad,
// GatherElementsGrad, GatherNDGrad); the index check every kernel applies at run time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

[[noreturn]] __attribute__((noinline, cold)) void index_error(const RunContext& ctx, int64_t v, int64_t axis,
                                                               int64_t dim);

/// Maps an index in [-dim, dim) to [0, dim); anything else fails naming the node and the index.
inline int64_t wrap_index(const RunContext& ctx, int64_t v, int64_t axis, int64_t dim) {
  const int64_t w = v < 0 ? v + dim : v;
  if (static_cast<uint64_t>(w) >= static_cast<uint64_t>(dim)) index_error(ctx, v, axis, dim);
  return w;
}

/// Input `input` holds indices: int32 or int64.
void check_index_dtype(const PrepareContext& ctx, size_t input);

/// Gather along `axis` of X (rank >= 1) with indices I: X viewed as [outer, n, inner],
/// Y: X[:axis] + I + X[axis+1:].
struct GatherGeom {
  int64_t axis = 0, outer = 0, n = 0, inner = 0;
  Shape output;
};
GatherGeom gather_geometry(const PrepareContext& ctx, const Shape& xs, const Shape& is, int64_t axis_attr);

/// GatherElements / ScatterElements addressing: indices (input 1) have the data's rank and fit
/// in its dims off `axis`; data element of index position p = offset(p without axis) + idx * astride.
struct ElementsAxis {
  int64_t axis = 0, n = 0, astride = 0;
  std::vector<int64_t> strides;  ///< of the data

  void init(const PrepareContext& ctx, const Shape& xs, int64_t attr_axis);
};

/// GatherND / ScatterND addressing: index tuples of length k address slices of X, viewed as
/// [batch, d_b..d_{b+k-1}, slice].
struct NdAddressing {
  int64_t batch = 1;         ///< product of the batch dims
  int64_t per_batch = 1;     ///< index tuples per batch
  int64_t tuples = 0;        ///< total index tuples
  int64_t k = 0;             ///< tuple length
  int64_t slice = 1;         ///< elements per addressed slice
  int64_t batch_stride = 0;  ///< elements of X per batch
  Shape dims;                ///< the k addressed dims of X
  std::vector<int64_t> strides;  ///< their strides in X
  Shape output;              ///< I[:-1] + X[b+k:]: GatherND's output, ScatterND's updates

  void init(const PrepareContext& ctx, const Shape& xs, const Shape& is, int64_t batch_dims);

  /// Element offset in X of tuple t (validated).
  template <class I>
  int64_t offset(const RunContext& ctx, const I* idx, int64_t t, int64_t first_axis) const {
    const I* tup = idx + t * k;
    int64_t off = (t / std::max<int64_t>(per_batch, 1)) * batch_stride;
    for (int64_t q = 0; q < k; ++q)
      off += wrap_index(ctx, int64_t(tup[q]), first_axis + q, dims[size_t(q)]) * strides[size_t(q)];
    return off;
  }
};

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };
/// The scatters' `reduction`: none (opset 11-15); add, mul (16-17); max, min (18+).
Reduction read_reduction(const KernelInfo& info);

/// Shape of a scatter's base (input 0, whose type the updates, input 2, must have; as a *Grad
/// kernel, zeros of the shape input 0 holds, of a float type); false when that shape is not known
/// yet.
bool scatter_base_shape(const PrepareContext& ctx, bool grad, Shape* xs);
/// ScatterND's updates (input 2) have shape a.output.
void check_scatter_nd_updates(const PrepareContext& ctx, const Shape& xs, const NdAddressing& a);

/// OneHot(indices, depth, values): `axis` normalized for the output rank, Y = I with depth
/// inserted at axis, viewed as [outer, depth, inner].
struct OneHotGeom {
  int64_t axis = 0, depth = 0, outer = 0, inner = 0;
  Shape output;
};
/// False when depth (input 1) is not known now.
bool onehot_geometry(const PrepareContext& ctx, int64_t axis_attr, OneHotGeom* g);

}  // namespace onnxtrain::kernels::shape
