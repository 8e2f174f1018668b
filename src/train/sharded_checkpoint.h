// Checkpoints of a data-parallel job. When the ranks' states are identical (no ZeRO, no
// accumulation in progress that only one rank holds), rank 0 writes one ordinary checkpoint,
// which resumes on any number of ranks. Otherwise every rank writes its shard beside the
// checkpoint's path, named after the save's generation (chosen by rank 0 for every save), and
// once every shard is durable rank 0 writes a manifest at the path naming them: a save never
// overwrites the shards the previous manifest names, so until the new manifest replaces it the
// previous checkpoint stays whole. A sharded checkpoint resumes on the same number of ranks shard
// by shard, or on another number merged (weights from shard 0, optimizer state concatenated in
// rank order and re-cut for the new layout).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "onnxtrain/tensor.h"
#include "train/checkpoint.h"

namespace onnxtrain::distributed {
class Comm;
}

namespace onnxtrain::train {

/// Writes a job's checkpoint at `path`; every rank calls it. `state` (called on the ranks that
/// write) gives this rank's checkpoint. Without `manifest`, rank 0 writes its state at `path`.
/// With it, every rank writes its state as a shard, then rank 0 writes `manifest` at `path`,
/// completed with the world size and the shards' names (its fingerprint and its counters
/// "optimizer_step" and "micro_step" are the caller's, those of every shard); shards of earlier
/// saves of `path` are removed. A rank whose write fails rethrows its error; the others throw
/// IOError naming it.
void write_job_checkpoint(distributed::Comm& comm, const std::string& path,
                          const std::function<Checkpoint()>& state, const Checkpoint* manifest);

/// True when `c` is the manifest of a sharded checkpoint.
bool is_sharded_manifest(const Checkpoint& c);

/// A sharded checkpoint (manifest `m`, read from `path`) as rank `rank` of `world` needs it: its
/// own shard when the layout is the same (as many ranks, and ZeRO (`zero`) or an accumulation in
/// progress), else the shards merged. InvalidArgument names a damaged manifest, a shard of another
/// checkpoint, or an accumulation in progress saved on another number of ranks.
Checkpoint read_sharded_checkpoint(const std::string& path, const Checkpoint& m, int rank, int world, bool zero);

/// Optimizer state of a weight of `weight_numel` elements, saved as `src` (whole, or merged flat
/// from ZeRO parts), laid out as a state tensor like `dst` holding the part [part.first,
/// part.second) of the flattened weight; nullopt when the element types or sizes do not fit.
std::optional<Tensor> relayout_state(const Tensor& src, const Tensor& dst, int64_t weight_numel,
                                     std::pair<int64_t, int64_t> part);

}  // namespace onnxtrain::train
