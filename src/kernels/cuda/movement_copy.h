// Geometry of the CUDA movement kernels (cuda/movement.cu): one strided copy
//   dst[sum_k i_k * ds[k]] = src[sum_k i_k * ss[k]]   for every index i of dims (row-major)
// built on the host in prepare() (size-1 dims dropped, dims contiguous in both merged, as the CPU
// StridedCopy does), passed by value to the kernel; and the widest unit a plain byte copy can use.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::kernels::cuda {

inline constexpr int kMoveMaxDims = 8;

struct StridedGeom {
  int nd = 0;
  int64_t n = 0;  // elements
  int64_t dims[kMoveMaxDims] = {};
  int64_t ss[kMoveMaxDims] = {};  // source strides (elements; 0: broadcast, negative: reversed)
  int64_t ds[kMoveMaxDims] = {};  // destination strides

  /// False when more than kMoveMaxDims dims remain after merging.
  bool init(const Shape& shape, const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
    nd = 0;
    n = 1;
    for (int64_t d : shape) n *= d;
    if (n == 0) return true;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 1) continue;
      if (nd > 0 && ss[nd - 1] == src[i] * shape[i] && ds[nd - 1] == dst[i] * shape[i]) {
        dims[nd - 1] *= shape[i];
        ss[nd - 1] = src[i];
        ds[nd - 1] = dst[i];
        continue;
      }
      if (nd == kMoveMaxDims) return false;
      dims[nd] = shape[i];
      ss[nd] = src[i];
      ds[nd] = dst[i];
      ++nd;
    }
    if (nd == 0) {  // one element
      nd = 1;
      dims[0] = ss[0] = ds[0] = 1;
    }
    return true;
  }
  /// One contiguous run (the output could be a view of the source).
  bool identity() const { return n == 0 || (nd == 1 && ss[0] == 1 && ds[0] == 1); }
  /// Swap of the last two dims of a contiguous [B, R, C] source into a contiguous [B, C, R]
  /// destination (dims here are the destination's: [B,] C, R). Sets b, r, c.
  bool last_two_swapped(int64_t* b, int64_t* r, int64_t* c) const {
    if (nd != 2 && nd != 3) return false;
    const int k = nd - 2;
    const int64_t C = dims[k], R = dims[k + 1];
    if (ss[k] != 1 || ss[k + 1] != C || ds[k] != R || ds[k + 1] != 1) return false;
    if (nd == 3 && (ss[0] != R * C || ds[0] != R * C)) return false;
    *b = nd == 3 ? dims[0] : 1;
    *r = R;
    *c = C;
    return true;
  }
};

/// Source and destination element offsets of the i-th element (row-major over dims).
template <class I>
__host__ __device__ inline void strided_offsets(const StridedGeom& g, I i, int64_t* so, int64_t* dof) {
  int64_t s = 0, d = 0;
  for (int k = g.nd - 1; k >= 0; --k) {
    const I dim = I(g.dims[k]);
    const I q = i / dim;
    const int64_t c = int64_t(i - q * dim);
    s += c * g.ss[k];
    d += c * g.ds[k];
    i = q;
  }
  *so = s;
  *dof = d;
}

/// The widest unit (16, 8, 4, 2 or 1 bytes) dividing every byte count and address given.
inline int copy_unit(std::initializer_list<uint64_t> values) {
  uint64_t acc = 0;
  for (uint64_t v : values) acc |= v;
  for (int u = 16; u > 1; u /= 2)
    if (acc % uint64_t(u) == 0) return u;
  return 1;
}

}  // namespace onnxtrain::kernels::cuda
