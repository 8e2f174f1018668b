#include "runtime/shared_arena.h"

#include <algorithm>
#include <atomic>

#include "onnxtrain/error.h"

namespace onnxtrain {

namespace {

std::atomic<int64_t> g_live_arena_bytes{0};
std::mutex g_mu;
// Never destroyed: its blocks go back to the CPU provider's allocator, a static of another file
// whose destruction at exit may come first.
std::shared_ptr<SharedArena>& g_arena = *new std::shared_ptr<SharedArena>();

}  // namespace

void register_shared_cpu_arena(size_t max_mem) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_arena) throw_error<InvalidArgument>("An allocator for this device has already been registered for sharing.");
  auto a = std::make_shared<SharedArena>();
  a->max_mem = max_mem;
  g_arena = std::move(a);
}

std::shared_ptr<SharedArena> registered_shared_arena() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_arena;
}

void count_arena_bytes(int64_t delta) { g_live_arena_bytes += delta; }

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
