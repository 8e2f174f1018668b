// The session profiler: onnxruntime's Chrome-trace JSON (an array of "X" events with ts and dur in
// microseconds from the profiling start) with session events (session_initialization, model_run)
// and one "Node" event per node run: name, op type, provider, input and output types and shapes.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/run_hooks.h"

namespace onnxtrain::api {

/// Time summed over the runs of one node since profiling started.
struct NodeTotal {
  std::string name;     ///< the node's name (op type and order of first run when unnamed)
  std::string op_type;
  int tag = 0;          ///< the caller's class of the node (phase), given with each event
  int64_t calls = 0;
  int64_t ns = 0;
};

class Profiler {
 public:
  /// Trace events kept at most (onnxruntime's default cap); later node events only add to totals.
  static constexpr size_t kMaxEvents = 1000000;

  /// Starts profiling now; end() writes `<prefix>_<YYYY-MM-DD_HH-MM-SS>.json`. With `trace` false
  /// only the per-node totals are kept (nothing is written).
  void start(std::string prefix, bool trace = true);
  bool active() const { return active_.load(std::memory_order_acquire); }
  int64_t start_ns() const { return start_ns_; }
  /// A session-level event that began at `begin_ns` and ends now.
  void session_event(const std::string& name, int64_t begin_ns, const std::string& args_json = "{}");
  /// A node event (thread-safe): added to the node's total (with `tag`) and to the trace.
  void node_event(const runtime::NodeEvent& ev, int tag = 0);
  /// Per-node totals since start(), in the order nodes first ran.
  std::vector<NodeTotal> totals() const;
  /// Writes the trace (atomically: a temporary file renamed into place), stops profiling and
  /// returns the file name; "" when profiling was not active.
  std::string end();

 private:
  void add(std::string event);
  std::atomic<bool> active_{false};
  bool trace_ = true;
  int64_t start_ns_ = 0;
  std::string prefix_;
  mutable std::mutex mu_;
  std::vector<std::string> events_;
  std::unordered_map<const ir::Node*, size_t> index_;  // node -> totals_
  std::vector<NodeTotal> totals_;
};

}  // namespace onnxtrain::api
