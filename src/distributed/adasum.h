// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021): the
// gradients of the ranks combined pairwise so that parallel components add and orthogonal ones
// are not double counted,
//     adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b   (a term is dropped when its norm is 0),
// applied as a binary tree over the ranks (ranks 2i and 2i+1 first, then pairs of pairs, ...) and
// per tensor (each tensor of a bucket has its own dot products and norms).
#pragma once

#include <cstdint>
#include <vector>

#include "onnxtrain/dtype.h"

namespace onnxtrain::distributed {

/// Replaces `data` (float32 or float64; the tensors of `sizes` back to back) on every rank by the
/// Adasum combination of all ranks' data, with the recursive vector-halving, distance-doubling
/// algorithm of the paper: at level d = 1, 2, 4, ... a rank exchanges half of its current segment
/// with rank ^ d, the pair's groups sum their partial dot products and norms, each rank combines
/// its half; the same exchanges in reverse order (distance halving) then rebuild the whole vector.
/// Every element of the result is computed by one rank only, so all ranks end with the same bits.
/// Dot products and norms are summed in double, the combination computed in double and rounded.
/// `rank` and `size` are MPI_COMM_WORLD's. Runs on the communication thread (MPI calls through
/// raw::). Needs a power-of-two world size (NotImplemented otherwise, naming `what` and the size).
void adasum_allreduce(void* data, DType dt, const std::vector<int64_t>& sizes, int rank, int size, const char* what);

}  // namespace onnxtrain::distributed
