// Broadcasting geometry of elementwise kernels (host side builds it in prepare, device side maps
// an output index to each operand's element): shapes right-aligned, size-1 dims dropped, adjacent
// dims merged where every operand keeps them contiguous, at most kMaxDims left.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::kernels::cuda {

inline constexpr int kMaxDims = 8;
inline constexpr int kMaxOperands = 3;

/// Element offset of output index i in an operand with `strides` over `dims` (row-major, `rank` dims).
/// `narrow`: every index and dim fits in 32 bits (the output has at most 2^32 - 1 elements), so the
/// divisions are 32-bit ones, several times cheaper on the device than 64-bit ones.
__host__ __device__ inline int64_t strided_offset(int64_t i, int rank, const int64_t* dims, const int64_t* strides,
                                                  bool narrow = false) {
  int64_t off = 0;
  if (narrow) {
    uint32_t u = uint32_t(i);
    for (int d = rank - 1; d >= 0; --d) {
      const uint32_t dd = uint32_t(dims[d]), q = u / dd;
      off += int64_t(u - q * dd) * strides[d];
      u = q;
    }
    return off;
  }
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t q = i / dims[d];
    off += (i - q * dims[d]) * strides[d];
    i = q;
  }
  return off;
}

struct Bcast {
  int rank = 0;
  bool narrow = false;  ///< the output has fewer than 2^32 elements (strided_offset)
  int64_t dims[kMaxDims] = {};
  /// Per operand: 0 its index is the output's (same shape), 1 a single element, 2 strided.
  int kind[kMaxOperands] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};

  __host__ __device__ int64_t offset(int k, int64_t i) const {
    if (kind[k] == 0) return i;
    if (kind[k] == 1) return 0;
    return strided_offset(i, rank, dims, strides[k], narrow);
  }
};

/// How an elementwise kernel that handles four consecutive outputs a thread reads operand k of
/// `g` (at `p`, elements of `elem` bytes): kQuadSame (its index is the output's: one access),
/// kQuadOne (one element), kQuadRow (strided, the four in its innermost dim: one access at the
/// first's offset), kQuadSpread (strided, its innermost dim broadcast: one element for the four);
/// kQuadNone: it cannot (a row length not a multiple of 4, or an access not aligned to the four).
enum QuadRead : int { kQuadNone = -1, kQuadSame = 0, kQuadOne = 1, kQuadRow = 2, kQuadSpread = 3 };
inline int quad_read(const Bcast& g, int k, const void* p, size_t elem) {
  const bool aligned = reinterpret_cast<uintptr_t>(p) % (elem * 4) == 0;
  if (g.kind[k] == 0) return aligned ? kQuadSame : kQuadNone;
  if (g.kind[k] == 1) return kQuadOne;
  if (g.rank == 0 || g.dims[g.rank - 1] % 4 != 0) return kQuadNone;
  const int64_t inner = g.strides[k][g.rank - 1];
  if (inner == 0) return kQuadSpread;
  if (inner != 1 || !aligned) return kQuadNone;
  for (int d = 0; d + 1 < g.rank; ++d)
    if (g.strides[k][d] % 4 != 0) return kQuadNone;
  return kQuadRow;
}

/// The geometry of `inputs` broadcast to `output` (each input's shape broadcasts to it); false
/// when more than kMaxDims dims remain after merging (the caller declines the node).
bool make_bcast(const Shape& output, const std::vector<Shape>& inputs, Bcast* b);

}  // namespace onnxtrain::kernels::cuda
