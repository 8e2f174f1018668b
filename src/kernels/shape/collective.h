// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Data-parallel collectives: attributes and input checks of GradientReduceStart,
// GradientReduceWait and ZeroAllGather (the reductions themselves run on the communicator).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// The tensors of one bucket (gradients, or weights): one float element type, their element counts.
struct Bucket {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> sizes;  ///< elements of each tensor
  int64_t count = 0;           ///< their sum
};
/// Inputs first.. : at least one, each a tensor, all float32 or all float64.
Bucket check_bucket(const PrepareContext& ctx, size_t first);

/// GradientReduceStart's attribute mode: "mean" (the default) or "adasum".
enum class ReduceMode { kMean, kAdasum };
ReduceMode read_reduce_mode(const KernelInfo& info);

/// GradientReduceStart(contribution, G1..n) -> token: the contribution a float64 [1] (one
/// element), then the bucket. The token is an int64 [1].
Bucket check_gradient_reduce_start(const PrepareContext& ctx);
/// GradientReduceWait(token, G1..n) -> R1..n: n outputs, the token int64, then the bucket; output
/// i has gradient i's shape.
Bucket check_gradient_reduce_wait(const PrepareContext& ctx);

/// ZeroAllGather's attribute pieces: the count of parts among the node's inputs, in [0, inputs).
size_t read_zero_pieces(const KernelInfo& info);
/// ZeroAllGather(P1..Pp, W1..n) -> W1..n': n outputs; the parts tensors of one element type, the
/// weights a bucket of that type (when there are parts).
struct ZeroGeom {
  std::vector<int64_t> part_sizes;  ///< elements of each part
  Bucket weights;
};
ZeroGeom check_zero_all_gather(const PrepareContext& ctx, size_t pieces);

}  // namespace onnxtrain::kernels::shape
