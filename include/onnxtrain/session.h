// InferenceSession: load an ONNX model and run it on CPU, with onnxruntime's call shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/tensor.h"
#include "onnxtrain/value.h"

namespace onnxtrain {

/// Session settings (the subset of onnxruntime's SessionOptions that applies here).
struct SessionOptions {
  int intra_op_num_threads = 0;  ///< threads used inside kernels; 0 = all cores
  int inter_op_num_threads = 0;  ///< accepted for compatibility; nodes run one after another
  bool deterministic = false;    ///< bitwise-reproducible kernels where a choice exists
  uint64_t seed = 0;             ///< seed of random operators without a seed attribute (0: default)
  std::string optimized_model_filepath;  ///< when set, the loaded model is written there (ONNX)
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

/// Plan figures of the last run (see runtime::PlanStats).
struct RunStats {
  size_t arena_bytes = 0, naive_bytes = 0, constant_bytes = 0, steps = 0, dynamic_steps = 0, folded_nodes = 0;
};

/// Loads a model and runs it. Thread-safe: concurrent run() calls are serialized.
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
  /// unknown, missing or mistyped input.
  std::vector<Tensor> run(const std::vector<std::string>& output_names,
                          const std::vector<std::pair<std::string, Tensor>>& feeds);
  /// Same, for models with sequence or optional inputs/outputs.
  std::vector<Value> run_values(const std::vector<std::string>& output_names,
                                const std::vector<std::pair<std::string, Value>>& feeds);

  RunStats last_run_stats() const;
  /// Model metadata.
  std::string producer_name() const;
  int64_t opset() const;

  struct Impl;
 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnxtrain
