// The graph representation used from loading to export: a Model owns a Graph of Nodes that refer
// to values by name (SSA, as in ONNX). Subgraphs (If/Loop bodies) hang off node attributes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::ir {

struct Graph;

/// One dimension of a declared shape: a fixed value, a symbolic name, or unknown.
struct Dim {
  int64_t value = -1;  ///< >= 0 when fixed
  std::string param{};   ///< symbolic name when not fixed (may be empty: unknown)
  std::string denotation{};  ///< e.g. "DATA_BATCH" (may be empty)
  bool fixed() const { return value >= 0; }
};

/// Declared type of a value: tensor (element type, optional shape), sequence, optional or map.
struct TypeInfo {
  enum class Kind { kUnknown, kTensor, kSequence, kOptional, kMap, kSparseTensor };
  Kind kind = Kind::kUnknown;
  DType elem = DType::kUndefined;  ///< tensor element type (kTensor); key type (kMap)
  bool has_shape = false;
  std::vector<Dim> dims;
  std::shared_ptr<TypeInfo> inner;  ///< element type of sequences and optionals; value type of maps
  std::string to_string() const;    ///< "tensor(float)[N, 3]", "seq(tensor(float))"
  static TypeInfo tensor(DType elem, const std::vector<int64_t>& shape);
  static TypeInfo tensor(DType elem);  ///< tensor of unknown shape
};

struct ValueInfo {
  std::string name;
  TypeInfo type;
  std::string doc;
};

enum class AttrType {
  kUndefined = 0, kFloat = 1, kInt = 2, kString = 3, kTensor = 4, kGraph = 5, kFloats = 6,
  kInts = 7, kStrings = 8, kTensors = 9, kGraphs = 10, kSparseTensor = 11, kSparseTensors = 12,
  kTypeProto = 13, kTypeProtos = 14,
};
const char* attr_type_name(AttrType t);

struct Attribute {
  std::string name{};
  AttrType type = AttrType::kUndefined;
  float f = 0;
  int64_t i = 0;
  std::string s{};
  Tensor t{};
  std::shared_ptr<Graph> g{};
  std::vector<float> floats{};
  std::vector<int64_t> ints{};
  std::vector<std::string> strings{};
  std::vector<Tensor> tensors{};
  std::vector<std::shared_ptr<Graph>> graphs{};
  TypeInfo tp{};                  ///< kTypeProto
  std::vector<TypeInfo> tps{};    ///< kTypeProtos
  std::string ref_attr_name{};  ///< inside function bodies: refers to the caller's attribute
  std::string doc{};
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  ///< "" is the default ONNX domain ("ai.onnx" is normalized to "")
  std::vector<std::string> inputs;   ///< "" marks an omitted optional input
  std::vector<std::string> outputs;  ///< "" marks an omitted optional output
  std::vector<Attribute> attrs;
  std::string doc;

  const Attribute* attr(const std::string& name) const;
  Attribute* attr(const std::string& name);
  /// "Conv node 'conv1'" (or "Conv node #3" when unnamed): how errors name a node.
  std::string describe() const;
  /// Subgraphs held by this node's attributes.
  std::vector<const Graph*> subgraphs() const;
};

struct Graph {
  std::string name;
  std::string doc;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  std::vector<ValueInfo> value_info;
  /// Initializers in file order (names unique).
  std::vector<std::pair<std::string, Tensor>> initializers;

  const Tensor* initializer(const std::string& name) const;
  Tensor* initializer(const std::string& name);
  bool is_input(const std::string& name) const;
  /// Names of values this graph reads but does not define (outer-scope references), including those
  /// of nested subgraphs; in first-use order.
  std::vector<std::string> free_variables() const;
};

/// A model-local function (IR >= 8). Expanded at load time.
struct Function {
  std::string name, domain, doc;
  std::vector<std::string> inputs, outputs, attributes;
  std::vector<Node> nodes;
  std::map<std::string, int64_t> opsets;
};

struct Model {
  int64_t ir_version = 8;
  std::map<std::string, int64_t> opsets;  ///< domain ("" = ai.onnx) -> version
  std::string producer_name, producer_version, domain, doc;
  int64_t model_version = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<Function> functions;
  std::shared_ptr<Graph> graph;

  /// Opset version imported for `domain` (normalized); 0 when not imported.
  int64_t opset(const std::string& domain) const;
};

/// Outer-scope values a node's subgraphs read (union of their free variables, first-seen order).
/// The executor passes them to the node's kernel in this order (RunContext::implicit).
std::vector<std::string> implicit_inputs(const Node& n);

/// Normalizes "ai.onnx" to "".
std::string normalize_domain(const std::string& d);

/// Topological order of the graph's nodes (indices), stable with respect to file order. Throws
/// InvalidGraph naming a node on a cycle. `outer` lists names defined by enclosing scopes.
std::vector<size_t> topological_order(const Graph& g, const std::unordered_set<std::string>& outer = {});

/// Graph-level checks: every input defined (here or in `outer`), single definition per name, no
/// cycle, declared outputs produced; recurses into subgraphs. Throws InvalidGraph naming the value
/// or node. Reorders nothing.
void validate_graph(const Graph& g, const std::unordered_set<std::string>& outer = {});

}  // namespace onnxtrain::ir
