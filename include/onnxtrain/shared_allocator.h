// The process's shared CPU arena: onnxruntime's environment allocator (create_and_register_allocator)
// that sessions opting in with the config entry session.use_env_allocators = "1" take their run
// memory from, instead of each holding an arena of its own.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onnxtrain {

/// Registers the process-wide CPU arena. `max_mem` bounds it in bytes (0: unbounded); a run that
/// would need more fails with RuntimeError naming both sizes. Throws InvalidArgument "An allocator
/// for this device has already been registered for sharing." when one is registered (onnxruntime's
/// refusal). Growth follows onnxruntime's arena settings (OrtArenaCfg): `extend_strategy` 0
/// (kNextPowerOfTwo, also for -1, the default) grows the arena to the next power of two of what a run
/// needs (at most `max_mem`), 1 (kSameAsRequested) to exactly that; the first block is at least
/// `initial_chunk_bytes`.
void register_shared_cpu_arena(size_t max_mem, int extend_strategy = -1, size_t initial_chunk_bytes = 0);

/// What the shared arena holds now.
struct SharedArenaStats {
  bool registered = false;  ///< register_shared_cpu_arena was called
  size_t arena_bytes = 0;   ///< bytes allocated (the largest arena a borrowing run has needed so far)
  size_t max_mem = 0;       ///< the bound (0: none)
  uint64_t runs = 0;        ///< runs that borrowed it
  /// Bytes of every run arena allocated in the process now: the sessions' own arenas and the
  /// shared one (what sharing saves shows here).
  size_t live_arena_bytes = 0;
};
SharedArenaStats shared_cpu_arena_stats();

}  // namespace onnxtrain
