// Model summary: what `onnxtrain inspect` prints — inputs, outputs, initializers with shapes and
// sizes, an operator histogram, operators without gradient rules, opsets.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/session.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain {

/// One initializer (weight or constant) of the main graph.
struct InitializerInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  int64_t numel = 0;
  size_t bytes = 0;        ///< numel * element size (strings: their character count)
  bool trainable = false;  ///< a float weight get_train_initializer would train
};

/// How often one operator occurs (subgraphs of If/Loop/Scan included).
struct OperatorCount {
  std::string domain;  ///< "" for the default ONNX domain
  std::string op_type;
  int64_t count = 0;
  bool has_gradient_rule = false;  ///< onnxtrain can differentiate it at the model's opset
};

struct ModelSummary {
  int64_t ir_version = 0;
  std::string producer_name, producer_version, graph_name;
  std::vector<std::pair<std::string, int64_t>> opsets;  ///< domain ("" = ai.onnx) -> version
  std::vector<NodeArg> inputs;    ///< graph inputs that are not initializers
  std::vector<NodeArg> outputs;
  std::vector<InitializerInfo> initializers;  ///< in file order
  std::vector<OperatorCount> operators;       ///< most frequent first, then by name
  /// Operators without a gradient rule, "Op" or "domain.Op" (training through them fails).
  std::vector<std::string> missing_gradient_rules;
  int64_t node_count = 0;  ///< nodes, subgraphs included
};

/// Loads and validates the model (throws like InferenceSession) and summarizes it.
ModelSummary summarize_model(const std::string& path);
ModelSummary summarize_model_bytes(const std::string& model_bytes, const std::string& base_dir = "");

/// The model (serialized ModelProto bytes, loaded and validated like InferenceSession's) with the
/// types onnxtrain's own type and shape inference gives its values in the main graph's value_info:
/// ONNX's inference of each node with data propagation along Shape -> Gather -> Concat -> Reshape
/// chains, unknown dimensions as symbols (unk__N). What ORTTrainer's run_symbolic_shape_infer adds.
std::string infer_model_types(const std::string& model_bytes);

}  // namespace onnxtrain
