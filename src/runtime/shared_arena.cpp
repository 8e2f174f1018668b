#include "runtime/shared_arena.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "onnxtrain/error.h"

namespace onnxtrain {

namespace {

std::atomic<int64_t> g_live_arena_bytes{0};
std::mutex g_mu;
// Never destroyed: its blocks go back to the CPU provider's allocator, a static of another file
// whose destruction at exit may come first.
std::shared_ptr<SharedArena>& g_arena = *new std::shared_ptr<SharedArena>();

}  // namespace

void register_shared_cpu_arena(size_t max_mem, int extend_strategy, size_t initial_chunk_bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_arena) throw_error<InvalidArgument>("An allocator for this device has already been registered for sharing.");
  if (extend_strategy < -1 || extend_strategy > 1)
    throw_error<InvalidArgument>("arena_extend_strategy must be -1, 0 (kNextPowerOfTwo) or 1 (kSameAsRequested), got ",
                                 extend_strategy);
  auto a = std::make_shared<SharedArena>();
  a->max_mem = max_mem;
  a->extend_strategy = extend_strategy;
  a->initial_chunk_bytes = initial_chunk_bytes;
  g_arena = std::move(a);
}

std::shared_ptr<SharedArena> registered_shared_arena() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_arena;
}

void count_arena_bytes(int64_t delta) { g_live_arena_bytes += delta; }

size_t shared_arena_growth(const SharedArena& a, size_t need, size_t held) {
  size_t target = need;
  if (held == 0) target = std::max(target, a.initial_chunk_bytes);
  if (a.extend_strategy != 1) {  // kNextPowerOfTwo
    size_t p = 1;
    while (p < target && p <= (SIZE_MAX >> 1)) p <<= 1;
    target = std::max(target, p);
  }
  if (a.max_mem > 0 && target > a.max_mem)  // as far as max_mem allows (need itself fits it)
    return std::max(need, a.max_mem / runtime::kArenaAlign * runtime::kArenaAlign);
  return runtime::arena_align(target);
}

SharedArenaStats shared_cpu_arena_stats() {
  SharedArenaStats s;
  s.live_arena_bytes = size_t(std::max<int64_t>(g_live_arena_bytes.load(), 0));
  std::shared_ptr<SharedArena> a = registered_shared_arena();
  if (!a) return s;
  std::lock_guard<std::mutex> lock(a->mu);
  s.registered = true;
  s.max_mem = a->max_mem;
  s.runs = a->runs;
  for (const auto& [dev, block] : a->arenas) s.arena_bytes += block.bytes;
  return s;
}

}  // namespace onnxtrain
