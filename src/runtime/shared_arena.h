// The process's shared CPU arena (include/onnxtrain/shared_allocator.h): what executors of sessions
// with session.use_env_allocators = "1" borrow for the length of each plain run.
#pragma once

#include <memory>
#include <mutex>

#include "onnxtrain/shared_allocator.h"
#include "runtime/plan.h"

namespace onnxtrain {

/// The registered arena. A run holds `mu` from the moment it takes the blocks until it has given
/// them back (its frame dropped), so runs of different sessions over it are serialized.
struct SharedArena {
  std::mutex mu;
  runtime::ArenaSet arenas;
  size_t max_mem = 0;  ///< 0: unbounded
  int extend_strategy = -1;        ///< OrtArenaCfg: -1/0 next power of two, 1 as requested
  size_t initial_chunk_bytes = 0;  ///< OrtArenaCfg: least size of the first block
  uint64_t runs = 0;
};

/// The registered arena, null when none is.
std::shared_ptr<SharedArena> registered_shared_arena();

/// Counts run arena bytes allocated in the process (allocate_arena: +bytes; its deleter: -bytes).
void count_arena_bytes(int64_t delta);

/// The size the shared arena's block grows to when a run needs `need` bytes (aligned) and it holds
/// `held`: onnxruntime's extend strategy and initial chunk, never above max_mem when `need` fits it.
size_t shared_arena_growth(const SharedArena& a, size_t need, size_t held);

}  // namespace onnxtrain
