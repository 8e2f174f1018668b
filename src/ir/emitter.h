// The one graph emitter: appends ONNX nodes with fresh unique names and records the type of every
// value it emits, derived from the operator's schema (never guessed): ONNX's schema registry for
// the default and ai.onnx.preview.training domains (plus ONNX's ai.onnx.ml), one table for
// com.onnxtrain. It holds the one set of small, opset-aware graph idioms (constants, ReduceSum,
// Squeeze/Unsqueeze, Split, Cast, Shape, ...). Users: the gradient builder (through RuleContext),
// the loss builder, and passes appending nodes to a training graph.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/ir.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::ir {

/// onnxtrain's operator domain (the operator table's, src/ops/onnxtrain_ops.h).
inline constexpr const char* kOnnxtrainDomain = ops::kDomain;
/// onnxruntime's contrib domain; onnxtrain knows its YieldOp (the forward/backward cut of a
/// training graph built by OrtModuleGraphBuilder).
inline constexpr const char* kMicrosoftDomain = ops::kMicrosoftDomain;
inline constexpr const char* kPreviewTrainingDomain = "ai.onnx.preview.training";

/// Type of a value by name (null when unknown).
using TypeLookup = std::function<const TypeInfo*(const std::string&)>;

/// Types of n's outputs (one per entry of n.outputs, unnamed ones included), from the operator's
/// schema at the version `opsets` imports for its domain and the types of its inputs:
///  - an output whose type parameter allows one type has it (Shape: int64, Greater: bool);
///  - otherwise it has the type of the inputs bound to the same parameter (Where: inputs 1, 2);
///    when those inputs' types are unknown, so is the output's (kUnknown, not an error);
///  - attribute-typed outputs (Cast.to, ConstantOfShape.value, *Like/Random* dtype, ...), control
///    flow (If, Loop, Scan: the body's outputs), sequences and optionals are handled explicitly;
///  - com.onnxtrain operators: the rule of their row in the operator table (src/ops/onnxtrain_ops.h).
/// Shapes only where trivially known (constants, Shape, Size, Cast, Identity).
/// Throws NotImplemented naming the node when the operator is unknown or an output type is not
/// determined; InvalidGraph when inputs bound to one type parameter have different element types.
std::vector<TypeInfo> output_types(const Node& n, const std::map<std::string, int64_t>& opsets,
                                   const TypeLookup& type_of);

/// Types of the outputs of a node that ONNX's schema registry does not know, by onnxtrain's own rule
/// (the one used by output_types and by infer_types): com.onnxtrain operators by their row of the
/// operator table (src/ops/onnxtrain_ops.h), com.microsoft's YieldOp, ai.onnx 18's forms kept in
/// graphs lowered to 17 (ir/opset_lower.h: input 0's element type; BitwiseNot and the scatters its
/// whole type). The table's elementwise
/// operators (same_shape: Gelu, ReluGrad, ...) give their outputs the source input's whole type,
/// the others its element type; an output whose source's type is unknown is kUnknown. Throws NotImplemented naming
/// the node for an operator onnxtrain has no rule for, or when a source input is absent.
std::vector<TypeInfo> custom_output_types(const Node& n, const TypeLookup& type_of);

/// The shape of `t` when every dimension is a number (null or no shape: nullopt).
std::optional<Shape> static_shape(const TypeInfo* t);

/// A scalar or filled tensor of float type `dt` (float, double, float16, bfloat16) holding `value`.
/// Throws NotImplemented for other element types.
Tensor float_tensor(DType dt, double value, const Shape& shape = {});

class Emitter {
 public:
  /// Emits into graph `g` of model `m` (typically *m.graph): nodes and initializers are appended to
  /// g, fresh names avoid every name of m's graph and g (subgraphs included), the types of g's inputs,
  /// initializers, value_info and outputs are known (run infer_types first for intermediate
  /// values), and imports of domains used (com.onnxtrain, ai.onnx.preview.training) go to m.opsets.
  Emitter(Model& m, Graph& g);
  /// Emits into `target` (nodes, initializers) with the operator versions of `opsets`, which
  /// receives the imports of domains used. Nothing is known: call reserve_names_of / note_types.
  Emitter(std::map<std::string, int64_t>& opsets, Graph& target);
  /// A nested scope (a subgraph under construction): nodes go to `target`, initializers to the
  /// root's target (visible in every subgraph), names are unique across the root, and the types
  /// known in enclosing scopes are visible. Hint, node prefix and origin start as the parent's.
  Emitter(Emitter& parent, Graph& target);
  Emitter(const Emitter&) = delete;
  Emitter& operator=(const Emitter&) = delete;

  // ---- names
  /// A name not used anywhere (`base` itself when free, else base_N); reserves it.
  std::string fresh(const std::string& base);
  /// Reserves `name`; false when it is already used.
  bool reserve(const std::string& name);
  /// Reserves every name of `g` (inputs, initializers, node outputs and names; subgraphs included).
  void reserve_names_of(const Graph& g);
  /// Base of the names of emitted values ("<hint>_<op>"; empty: "<op>") and nodes ("<prefix><op>").
  void set_hint(const std::string& hint) { hint_ = hint; }
  void set_node_prefix(const std::string& prefix) { node_prefix_ = prefix; }
  /// Prefix of error messages (who emits: "gradient of Relu node 'r'").
  void set_origin(const std::string& origin) { origin_ = origin; }

  // ---- types
  /// Records the known types of g's inputs, initializers, value_info and outputs (this scope).
  void note_types(const Graph& g);
  const TypeInfo* type(const std::string& v) const;
  DType dtype(const std::string& v) const;
  /// Records v's type in this scope (overrides what was known).
  void set_type(const std::string& v, const TypeInfo& t);
  /// Adds what `t` knows and v's recorded type does not (the element type, the shape); throws
  /// InvalidGraph naming v when both element types are known and differ.
  void refine_type(const std::string& v, const TypeInfo& t);
  /// Version of `domain` ("" = ai.onnx) the emitted nodes follow; 0 when not imported.
  int64_t opset(const std::string& domain = "") const;
  const std::map<std::string, int64_t>& opsets() const { return *opsets_; }
  /// Imports `domain` when missing (version 1: com.onnxtrain, ai.onnx.preview.training); append()
  /// does it for the nodes it emits.
  void import_domain(const std::string& domain);

  // ---- nodes
  /// Appends `n` (op_type, domain, inputs, attributes and outputs given; "" marks an unnamed
  /// output), naming the node when unnamed; records the types of its outputs and the import of
  /// its domain. Returns the appended node.
  const Node& append(Node n);
  /// Appends `op` with `n` fresh outputs; returns their names.
  std::vector<std::string> add_n(const std::string& op, std::vector<std::string> inputs, size_t n,
                                 std::vector<Attribute> attrs = {}, const std::string& domain = "",
                                 const std::string& hint = "");
  /// One output: its name. `hint` (optional) is the base of the output's name.
  std::string add(const std::string& op, std::vector<std::string> inputs, std::vector<Attribute> attrs = {},
                  const std::string& hint = "");
  /// Names only the outputs flagged in `wanted` (a kernel skips unnamed outputs); the returned names
  /// of the others are "".
  std::vector<std::string> add_some(const std::string& op, std::vector<std::string> inputs,
                                    const std::vector<bool>& wanted, std::vector<Attribute> attrs = {},
                                    const std::string& domain = "", const std::string& hint = "");
  /// Appends a graph input of the target graph (the name must be free).
  void add_input(const ValueInfo& v);

  // ---- constants
  /// Initializer holding `t`.
  std::string constant(const Tensor& t, const std::string& hint = "const");
  /// Scalar of float type `dt` (float, double, float16, bfloat16).
  std::string scalar(DType dt, double value, const std::string& hint = "const");
  /// Scalar of v's (float) element type; fails naming v when it is unknown or not a float type.
  std::string scalar_like(double value, const std::string& v);
  /// 1-D int64 constant.
  std::string ints(const std::vector<int64_t>& values, const std::string& hint = "ints");

  // ---- idioms (opset-aware where ONNX changed the operator; axes attributes before opset 11 get
  //      negative axes counted from the rank, as ONNX allows negative axes only from 11 on)
  std::string reduce_sum(const std::string& v, const std::vector<int64_t>& axes, bool keepdims);
  /// `op` (ReduceSum, ReduceMean, ...) over every axis, keepdims 0.
  std::string reduce_all(const std::string& op, const std::string& v);
  std::string unsqueeze(const std::string& v, const std::vector<int64_t>& axes);
  std::string squeeze(const std::string& v, const std::vector<int64_t>& axes);
  /// Split along `axis` into parts of `sizes`.
  std::vector<std::string> split(const std::string& v, int64_t axis, const std::vector<int64_t>& sizes);
  /// v[starts:ends:steps] along `axes` (Slice-1..9: attributes, unit steps only).
  std::string slice(const std::string& v, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& axes, const std::vector<int64_t>& steps = {});
  /// Zero padding, `pads` = [begins..., ends...]; negative pads crop (Pad-1: `paddings`, 2..10:
  /// `pads` attributes, 11+: input).
  std::string pad(const std::string& v, const std::vector<int64_t>& pads);
  std::string transpose(const std::string& v, const std::vector<int64_t>& perm);
  /// Reshape with a shape input (opset >= 5).
  std::string reshape(const std::string& v, const std::string& shape);
  std::string expand(const std::string& v, const std::string& shape);
  std::string cast(const std::string& v, DType to);
  /// Cast to like's element type (which must be known).
  std::string cast_like(const std::string& v, const std::string& like);
  /// Shape(v), emitted once per value and scope.
  std::string shape_of(const std::string& v);
  /// Zeros / ones shaped like v, of v's float type (a small constant when v's shape is static).
  std::string zeros_like(const std::string& v);
  std::string ones_like(const std::string& v);

  // ---- attribute factories
  static Attribute int_attr(const std::string& name, int64_t v);
  static Attribute float_attr(const std::string& name, float v);
  static Attribute ints_attr(const std::string& name, std::vector<int64_t> v);
  static Attribute floats_attr(const std::string& name, std::vector<float> v);
  static Attribute string_attr(const std::string& name, const std::string& v);
  static Attribute tensor_attr(const std::string& name, const Tensor& v);
  static Attribute graph_attr(const std::string& name, std::shared_ptr<Graph> g);

 private:
  Emitter& root() { return parent_ ? parent_->root() : *this; }
  // `axes` of `op` on v (rank + `added` axes) as an attribute: before opset 11, negative axes
  // are counted from the rank (which must be known).
  std::vector<int64_t> attribute_axes(const std::string& op, const std::string& v, std::vector<int64_t> axes,
                                      size_t added);
  template <class E, class... Args>
  [[noreturn]] void fail(Args&&... args) const;

  Emitter* parent_ = nullptr;
  std::map<std::string, int64_t>* opsets_;
  Graph& target_;
  std::unordered_set<std::string> names_;  // root only
  uint64_t counter_ = 0;                   // root only
  std::unordered_map<std::string, TypeInfo> types_;
  std::unordered_map<std::string, std::string> shape_cache_;
  std::string hint_, node_prefix_, origin_;
};

}  // namespace onnxtrain::ir
