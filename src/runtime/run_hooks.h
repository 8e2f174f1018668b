// What a caller attaches to the runs made on its thread: a stop flag (RunOptions.terminate) and a
// per-node event sink (profiling). The session installs them around a run with ScopedRunHooks; the
// executor reads them once per run, and subgraph executors (If/Loop bodies, same thread) see them
// too. Runs without hooks pay one thread-local read.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::ir {
struct Node;
}

namespace onnxtrain::runtime {

/// One node run, as the profiler sees it.
struct NodeEvent {
  const ir::Node* node = nullptr;
  std::string provider;  ///< the provider's name
  int64_t start_ns = 0, end_ns = 0;  ///< steady clock
  std::vector<std::pair<DType, Shape>> inputs, outputs;  ///< element type and shape (kUndefined: absent / not a tensor)
};

struct RunHooks {
  const std::atomic<bool>* terminate = nullptr;  ///< checked before every node
  std::function<void(NodeEvent&&)> on_node;       ///< called after every node when set
};

/// The hooks installed on this thread (null when none).
RunHooks* current_run_hooks();

/// Installs hooks for the current thread for its lifetime (restores the previous ones after).
class ScopedRunHooks {
 public:
  explicit ScopedRunHooks(RunHooks* hooks);
  ~ScopedRunHooks();
  ScopedRunHooks(const ScopedRunHooks&) = delete;
  ScopedRunHooks& operator=(const ScopedRunHooks&) = delete;

 private:
  RunHooks* prev_;
};

/// Steady-clock nanoseconds.
int64_t now_ns();

}  // namespace onnxtrain::runtime
