// The session profiler: onnxruntime's Chrome-trace JSON (an array of "X" events with ts and dur in
// microseconds from the profiling start) with session events (session_initialization, model_run)
// and one "Node" event per node run: name, op type, provider, input and output types and shapes.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/run_hooks.h"

namespace onnxtrain::api {

class Profiler {
 public:
  /// Starts profiling now; end() writes `<prefix>_<YYYY-MM-DD_HH-MM-SS>.json`.
  void start(std::string prefix);
  bool active() const { return active_.load(std::memory_order_acquire); }
  int64_t start_ns() const { return start_ns_; }
  /// A session-level event that began at `begin_ns` and ends now.
  void session_event(const std::string& name, int64_t begin_ns, const std::string& args_json = "{}");
  /// A node event (thread-safe).
  void node_event(const runtime::NodeEvent& ev);
  /// Writes the trace (atomically: a temporary file renamed into place), stops profiling and
  /// returns the file name; "" when profiling was not active.
  std::string end();

 private:
  void add(std::string event);
  std::atomic<bool> active_{false};
  int64_t start_ns_ = 0;
  std::string prefix_;
  std::mutex mu_;
  std::vector<std::string> events_;
};

}  // namespace onnxtrain::api
