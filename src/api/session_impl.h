// Internals shared by the session classes.
#pragma once

#include <memory>
#include <unordered_set>

#include "api/profiler.h"
#include "ir/ir.h"
#include "ir/onnx_io.h"
#include "onnxtrain/session.h"
#include "runtime/executor.h"
#include "runtime/feeds.h"
#include "runtime/run_hooks.h"

namespace onnxtrain {

using runtime::check_feed;

/// The public description of a declared value (name, type string, element type, shape).
NodeArg node_arg_of(const ir::ValueInfo& v);

/// The terminate flag of `o` as run hooks (none when `o` or its flag is null); throws Terminated
/// when the flag is already set: the run is not started.
runtime::RunHooks terminate_hooks(const RunOptions* o);

struct InferenceSession::Impl {
  ir::Model model;
  std::unique_ptr<runtime::GraphExecutor> exec;
  std::unique_ptr<runtime::GraphExecutor> exec_training;  // RunOptions.training_mode, made on first use
  // The graph before runtime::block_conv_layouts when that pass changed it (null otherwise): what
  // RunOptions.training_mode runs (its BatchNormalization nodes switch to batch statistics, and
  // the pass turns some into convolutions).
  std::shared_ptr<ir::Graph> unblocked_graph;
  std::mutex training_mu;
  ExecOptions exec_options;
  SessionOptions options;
  std::unordered_map<std::string, size_t> input_index;   // executor input position
  std::unordered_map<std::string, size_t> output_index;  // executor output position
  api::Profiler profiler;
  int64_t load_start_ns = 0;
  /// Graph inputs and outputs declared sparse_tensor: the engine computes on their dense form (the
  /// graph's declarations become tensor); metadata still reports sparse_tensor(T).
  std::unordered_set<std::string> sparse_io;
  void init();
  /// The NodeArg of `v`, sparse_tensor(T) for a declared-sparse input or output.
  NodeArg node_arg(const ir::ValueInfo& v) const;
  /// `lent`: InferenceSession::run_into's buffers (moved into the result), else null.
  std::vector<Value> run(const std::vector<std::string>& output_names,
                         const std::vector<std::pair<std::string, const Value*>>& feeds,
                         const RunOptions* run_options = nullptr, std::vector<Value>* lent = nullptr);
};

/// Applies onnxruntime's "ort_config" model metadata (JSON {"session_options": {...}}) over
/// `options`; throws InvalidModel naming a malformed entry or an unknown option.
void apply_model_session_options(const ir::Model& model, SessionOptions& options);

/// What the loader takes from SessionOptions: the initializers it replaces (not read from the
/// model) and the external data files held in memory.
ir::LoadOptions load_options_of(const SessionOptions& options);

/// The load-time changes SessionOptions asks for: free dimension overrides and added initializers
/// for graph inputs (the model's own initializers were replaced by the loader, load_options_of).
void apply_session_overrides(ir::Model& model, const SessionOptions& options);

/// The session config entry `key` as a switch: "1" true, "0" false, `fallback` when unset,
/// anything else InvalidArgument naming the entry and the value.
bool config_flag(const SessionOptions& options, const std::string& key, bool fallback);

/// The session config entry `key` (`fallback` when unset) as a byte count: a non-negative
/// decimal integer, else InvalidArgument naming the entry and the value.
uint64_t config_byte_count(const SessionOptions& options, const std::string& key, const std::string& fallback);

/// The executor options of SessionOptions (threads, determinism, seed, the plan passes of the
/// optimization level, the memory options).
ExecOptions exec_options_of(const SessionOptions& options);

/// The public figures of an executor's last plan.
inline RunStats run_stats_of(const runtime::GraphExecutor& ex) {
  const auto s = ex.last_stats();
  return RunStats{s.arena_bytes, s.naive_bytes, s.constant_bytes, s.steps, s.dynamic_steps, s.folded_nodes,
                  s.peak_live_bytes};
}

/// Nodes with the provider each runs on, as the public AssignedNode rows.
inline std::vector<AssignedNode> assigned_nodes(const std::vector<std::pair<const ir::Node*, std::string>>& nodes) {
  std::vector<AssignedNode> r;
  for (const auto& [n, provider] : nodes) r.push_back(AssignedNode{n->name, n->op_type, n->domain, provider});
  return r;
}

}  // namespace onnxtrain
