// InferenceSession: load an ONNX model and run it on CPU, with onnxruntime's call shapes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/tensor.h"
#include "onnxtrain/value.h"

namespace onnxtrain {

/// onnxruntime's GraphOptimizationLevel: which of onnxtrain's graph and plan passes run.
///  - kDisableAll: none (every node runs every time; in-place outputs are copies of their input);
///  - kEnableBasic: constant folding (nodes whose inputs are all constant run once, at load time
///    into initializers and at plan time for the rest);
///  - kEnableExtended and kEnableAll: also in-place outputs sharing their input's memory (there are
///    no layout passes beyond that, so the two levels plan alike).
enum class GraphOptimizationLevel { kDisableAll = 0, kEnableBasic = 1, kEnableExtended = 2, kEnableAll = 99 };

/// onnxruntime's ExecutionMode. Nodes always run one after another (each kernel uses the intra-op
/// threads); kParallel is accepted and runs sequentially.
enum class ExecutionMode { kSequential = 0, kParallel = 1 };

/// Session settings: onnxruntime's SessionOptions.
struct SessionOptions {
  int intra_op_num_threads = 0;  ///< threads used inside kernels; 0 = OMP_NUM_THREADS if set, else all cores
  int inter_op_num_threads = 0;  ///< threads across nodes: nodes run one after another, so unused
  bool deterministic = false;    ///< bitwise-reproducible kernels where a choice exists (use_deterministic_compute)
  uint64_t seed = 0;             ///< seed of random operators without a seed attribute (0: the process default)
  std::string optimized_model_filepath;  ///< when set, the model after the load-time passes is written there (ONNX)
  GraphOptimizationLevel graph_optimization_level = GraphOptimizationLevel::kEnableAll;
  ExecutionMode execution_mode = ExecutionMode::kSequential;
  bool enable_profiling = false;                       ///< record one event per node run (see end_profiling)
  std::string profile_file_prefix = "onnxruntime_profile_";  ///< profile file: <prefix>_<date_time>.json
  /// Values whose lifetimes do not overlap share arena memory; false gives every value its own block.
  bool enable_mem_reuse = true;
  /// The run's memory (the arena laid out by the plan) is kept between runs of the same shapes;
  /// false allocates it at the start of each run and frees it at the end (lower idle memory). Both
  /// enable_mem_pattern and enable_cpu_mem_arena control it: memory is kept when both are true.
  bool enable_mem_pattern = true;
  bool enable_cpu_mem_arena = true;
  int log_severity_level = -1;  ///< 0 verbose, 1 info, 2 warning, 3 error, 4 fatal; -1: the process default
  int log_verbosity_level = 0;  ///< detail of verbose messages
  std::string logid;            ///< prefix of this session's log lines
  /// add_session_config_entry: every key is kept; the keys onnxtrain interprets are listed in
  /// docs/python-api.md ("session.load_model_format", "session.save_model_format",
  /// "session.disable_cpu_ep_fallback").
  std::vector<std::pair<std::string, std::string>> config_entries;
  /// Symbolic input dimensions fixed by name (dim_param) or by denotation (e.g. "DATA_BATCH").
  std::vector<std::pair<std::string, int64_t>> free_dimension_overrides_by_name;
  std::vector<std::pair<std::string, int64_t>> free_dimension_overrides_by_denotation;
  /// Initializers that replace the model's of the same name (or give a graph input a constant
  /// value). Tensors are shared, not copied, across sessions made with these options. The model's
  /// own data for these names is never read (an external data file only they use may be absent).
  std::vector<std::pair<std::string, Tensor>> initializers;
  /// Contents of external data files by their location in the model (uint8 tensors of the files'
  /// bytes): read from memory instead of the model's folder (onnxruntime's
  /// add_external_initializers_from_files_in_memory). Shared, not copied, across sessions.
  std::vector<std::pair<std::string, Tensor>> external_initializer_files;
  /// Execution providers by onnxruntime's names in preference order, e.g.
  /// {"CUDAExecutionProvider", "CPUExecutionProvider"}; each node runs on the first that has a
  /// kernel for it, the CPU provider last. Empty: the CPU provider only. A provider this build
  /// lacks, or whose device does not answer, fails the session with the reason.
  std::vector<std::string> providers;

  /// Value of a config entry; `dflt` when absent.
  std::string config(const std::string& key, const std::string& dflt = "") const;
};

/// Execution providers this build can run now, in preference order, the CPU provider last
/// (onnxruntime's get_available_providers): "CUDAExecutionProvider" where the build has it and a
/// device answers.
std::vector<std::string> get_available_providers();

/// onnxruntime's RunOptions. Copies share the terminate flag, so a flag set from another thread
/// reaches a run that was given any copy.
struct RunOptions {
  RunOptions();
  int log_severity_level = -1;  ///< as SessionOptions::log_severity_level
  int log_verbosity_level = 0;
  std::string logid;
  std::string run_tag;  ///< named in the profile's model_run event
  /// onnxtrain always runs only the nodes the fetches need (outputs are the same either way).
  bool only_execute_path_to_fetches = false;
  /// Run with training-mode operator defaults: Dropout without a training_mode input drops,
  /// BatchNormalization (opset >= 14) uses batch statistics; subgraphs included. Before opset 14,
  /// BatchNormalization keeps the model's own mode.
  bool training_mode = false;
  std::vector<std::pair<std::string, std::string>> config_entries;
  /// Set to stop runs in progress (they fail with Terminated before their next node) and the next
  /// ones, until cleared.
  std::shared_ptr<std::atomic<bool>> terminate;
};

/// Seed of random operators in sessions whose SessionOptions.seed is 0 (onnxruntime's set_seed).
void set_default_seed(uint64_t seed);
uint64_t default_seed();

/// The model's metadata (onnxruntime's ModelMetadata).
struct ModelMetadata {
  std::string producer_name, graph_name, domain, description, graph_description;
  int64_t version = 0;
  std::vector<std::pair<std::string, std::string>> custom_metadata_map;
};

/// One dimension of a declared input/output shape: a number, a symbol, or unknown.
struct DimInfo {
  int64_t value = -1;  ///< >= 0 when fixed
  std::string symbol;  ///< symbolic name, empty when unknown
};

/// Declared input or output (onnxruntime's NodeArg).
struct NodeArg {
  std::string name;
  std::string type;  ///< "tensor(float)", "seq(tensor(float))", ...
  DType elem = DType::kUndefined;
  bool has_shape = false;
  std::vector<DimInfo> shape;
};

/// A node of a session's graph and the execution provider it runs on
/// (onnxruntime's OrtEpAssignedNode, grouped by provider in get_provider_graph_assignment_info).
struct AssignedNode {
  std::string name;
  std::string op_type;
  std::string domain;
  std::string provider;  ///< "CPUExecutionProvider", ...
};

/// Plan figures of the last run (see runtime::PlanStats).
struct RunStats {
  size_t arena_bytes = 0, naive_bytes = 0, constant_bytes = 0, steps = 0, dynamic_steps = 0, folded_nodes = 0;
  size_t peak_live_bytes = 0;  ///< the most arena bytes live at one step (arena_bytes' lower bound)
};

/// Loads a model and runs it. Thread-safe: concurrent run() calls are serialized.
/// A model whose metadata carries onnxruntime's "ort_config" entry (JSON
/// {"session_options": {...}}) has those options applied over the given ones.
class InferenceSession {
 public:
  /// Loads from a file (external data resolved beside it).
  explicit InferenceSession(const std::string& path, const SessionOptions& options = {});
  /// Loads from serialized bytes; external data (if any) is resolved in base_dir.
  InferenceSession(const void* data, size_t size, const SessionOptions& options = {},
                   const std::string& base_dir = "");
  ~InferenceSession();
  InferenceSession(InferenceSession&&) noexcept;
  InferenceSession& operator=(InferenceSession&&) noexcept;

  /// Inputs the caller must (or may) feed: graph inputs that are not initializers.
  std::vector<NodeArg> get_inputs() const;
  std::vector<NodeArg> get_outputs() const;
  /// Initializers that are also graph inputs (may be overridden by feeding them).
  std::vector<NodeArg> get_overridable_initializers() const;

  /// Runs the model. `output_names` empty means all outputs. Throws InvalidArgument naming any
  /// unknown, missing or mistyped input. A feed on a device is copied to the host first (the
  /// plan reads feeds there); outputs are host tensors.
  std::vector<Tensor> run(const std::vector<std::string>& output_names,
                          const std::vector<std::pair<std::string, Tensor>>& feeds);
  /// Same, for models with sequence or optional inputs/outputs.
  std::vector<Value> run_values(const std::vector<std::string>& output_names,
                                const std::vector<std::pair<std::string, Value>>& feeds);
  /// Same, with run options; feeds are borrowed (the caller keeps them alive during the run).
  std::vector<Value> run_values(const std::vector<std::string>& output_names,
                                const std::vector<std::pair<std::string, const Value*>>& feeds,
                                const RunOptions& run_options);
  /// Same, into the caller's buffers (onnxruntime's IOBinding with preallocated outputs): where
  /// buffers[i] is a tensor with output i's type and shape, the run writes output i into its
  /// memory (a buffer on a device by a copy of the host result) and returns that tensor;
  /// otherwise (no buffer, another type or shape, memory shared with a feed or another buffer, or
  /// an output the graph does not compute, such as an input passed through) a new value is
  /// returned and the buffer is left as it was.
  std::vector<Value> run_into(const std::vector<std::string>& output_names,
                              const std::vector<std::pair<std::string, const Value*>>& feeds,
                              const RunOptions& run_options, std::vector<Value> buffers);

  /// The options the session runs with (after the model's own "ort_config" entries were applied).
  const SessionOptions& options() const;
  ModelMetadata metadata() const;
  /// Stops profiling and writes onnxruntime's Chrome-trace JSON (one event per node run);
  /// returns the file name, or "" when profiling was not enabled.
  std::string end_profiling();
  /// When profiling started (steady clock, ns; kept after end_profiling); 0 when it never started.
  uint64_t profiling_start_time_ns() const;

  RunStats last_run_stats() const;
  /// Every node of the graph the session runs (after load-time optimizations), in graph order, with
  /// the execution provider it is assigned to.
  std::vector<AssignedNode> node_assignment() const;
  /// Model metadata.
  std::string producer_name() const;
  int64_t opset() const;

  struct Impl;
 private:
  friend class TrainingAgent;  // runs the session's training graph in two parts (agent.h)
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnxtrain
