// What a gradient rule sees (onnxruntime's I(i), O(i), GO(i), GI(i) vocabulary). Rules emit ONNX
// nodes through this context; they never compute. The central builder owns the chain rule:
// accumulation of fan-out, reduction of broadcast dimensions (set_GI_unbroadcast), pruning of
// everything no requested gradient needs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/emitter.h"
#include "ir/ir.h"
#include "onnxtrain/error.h"

namespace onnxtrain::autodiff {

class GraphBuilderState;

class RuleContext {
 public:
  RuleContext(GraphBuilderState& st, const ir::Node& node, int64_t opset);

  const ir::Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  bool portable() const;

  // ---- forward values
  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return i < node_.inputs.size() && !node_.inputs[i].empty(); }
  const std::string& I(size_t i) const;
  const std::string& O(size_t i) const;
  /// Forward output i for the gradient to read (a dropout mask, saved statistics, log_prob).
  /// When the model leaves it unnamed, the built graph gets a variant of the forward node that
  /// names it (as replace_forward; the caller's model is untouched), typed from its schema.
  std::string forward_output(size_t i);

  // ---- gradients
  /// Gradient flowing into output i, or "" when none does (a zero gradient).
  const std::string& GO(size_t i) const { return go_[i]; }
  bool has_GO(size_t i) const { return i < go_.size() && !go_[i].empty(); }
  /// GO(i), or zeros shaped like O(i) when no gradient flows into it.
  std::string GO_or_zeros(size_t i);
  /// Does input i need a gradient? (Rules may skip work when not; pruning removes unused nodes.)
  bool needs_GI(size_t i) const;
  /// Gradient of input i; `g` has I(i)'s shape.
  void set_GI(size_t i, const std::string& g);
  /// Gradient of input i given in the shape of output `out` (numpy broadcasting): the builder
  /// sums the broadcast dimensions back to I(i)'s shape.
  void set_GI_unbroadcast(size_t i, const std::string& g, size_t out = 0);
  /// Same, with the (static) type of `g` given explicitly (null: unknown, reduced at run time).
  void set_GI_unbroadcast_typed(size_t i, const std::string& g, const ir::TypeInfo* g_type);

  // ---- outer-scope values read by this node's subgraphs (If, Loop)
  std::vector<std::string> implicit_inputs() const;
  /// Does value v (an input or an outer-scope value this node's subgraphs read) need a gradient?
  bool needs_grad(const std::string& v) const;
  /// Gradient contribution to value v (same shape as v).
  void set_grad(const std::string& v, const std::string& g);

  // ---- types known from inference
  DType dtype(const std::string& v) const;
  /// Inferred type (null when unknown).
  const ir::TypeInfo* type(const std::string& v) const;
  /// Rank, or -1 when unknown.
  int64_t rank(const std::string& v) const;
  /// Full static shape when every dimension is a number.
  std::optional<Shape> static_shape(const std::string& v) const;

  /// Value of `v` when it is a constant of the forward graph (initializer that is not a graph
  /// input, or a Constant node's output); null otherwise.
  const Tensor* constant_value(const std::string& v) const;
  /// Constant int list input (axes, pads, ...), or nullopt when absent; fails when not constant.
  std::optional<std::vector<int64_t>> const_ints_input(size_t i) const;

  // ---- attributes of the forward node
  int64_t attr_int(const std::string& name, int64_t dflt) const;
  float attr_float(const std::string& name, float dflt) const;
  std::string attr_string(const std::string& name, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& name, const std::vector<int64_t>& dflt) const;
  std::vector<float> attr_floats(const std::string& name, const std::vector<float>& dflt) const;
  bool has_attr(const std::string& name) const { return node_.attr(name) != nullptr; }
  /// Copies of the forward node's attributes (to re-emit the same operator).
  const std::vector<ir::Attribute>& attrs() const { return node_.attrs; }

  // ---- emitters; each returns the output name(s) of the emitted node
  /// The graph emitter (output types from the operators' schemas), naming values after this
  /// node's output and its errors after this node.
  ir::Emitter& emit();
  std::string op(const std::string& type, std::vector<std::string> inputs, std::vector<ir::Attribute> attrs = {}) {
    return emit().add(type, std::move(inputs), std::move(attrs));
  }
  std::vector<std::string> op_n(const std::string& type, std::vector<std::string> inputs, size_t num_outputs,
                                std::vector<ir::Attribute> attrs = {}, const std::string& domain = "") {
    return emit().add_n(type, std::move(inputs), num_outputs, std::move(attrs), domain);
  }
  /// Operator of the com.onnxtrain domain (the builder records the import).
  std::vector<std::string> custom(const std::string& type, std::vector<std::string> inputs, size_t num_outputs,
                                  std::vector<ir::Attribute> attrs = {});
  /// Same, naming only the outputs flagged in `wanted` (the others stay unnamed, so the kernel
  /// skips computing them); the returned names of unwanted outputs are "".
  std::vector<std::string> custom_some(const std::string& type, std::vector<std::string> inputs,
                                       const std::vector<bool>& wanted, std::vector<ir::Attribute> attrs = {});

  // ---- forward variants and subgraphs
  /// Replaces this forward node, in the built graph, by `op_type` of `domain` with `attrs`, the
  /// same inputs and outputs, and `extra` more outputs from index `first_extra` on (outputs
  /// between stay unnamed). Returns the names of the extra outputs. For gradients that need what
  /// the forward computes anyway (gate activations, per-iteration loop state).
  std::vector<std::string> replace_forward(const std::string& domain, const std::string& op_type,
                                           std::vector<ir::Attribute> attrs, size_t first_extra, size_t extra);
  struct SubgraphGradient {
    std::vector<ir::Node> nodes;     ///< the body's forward nodes (recomputed), then gradient nodes; pruned
    std::vector<std::string> grads;  ///< per wrt value: its gradient (zeros when none flows)
  };
  /// Differentiates `body`, a subgraph of this node whose declared inputs have `input_types`
  /// (unknown or missing: as declared). `seeds[k]`: gradient flowing into body output k ("" for
  /// none), a value visible where the nodes will run. `wrt`: body inputs and outer-scope values.
  /// The nodes read the body's input names: the caller defines them.
  SubgraphGradient subgraph_gradient(const ir::Graph& body, const std::vector<ir::TypeInfo>& input_types,
                                     const std::vector<std::string>& seeds, const std::vector<std::string>& wrt);

  /// A value or node name unused anywhere in the model (for nodes of subgraphs a rule builds).
  std::string fresh_name(const std::string& hint);

  // ---- small graph idioms: the emitter's (opset-aware where ONNX changed the operator)
  std::string constant(const Tensor& t);
  /// Scalar constant of v's (float) element type.
  std::string scalar_like(double value, const std::string& v) { return emit().scalar_like(value, v); }
  std::string ints(const std::vector<int64_t>& values) { return emit().ints(values); }  ///< 1-D int64 constant
  std::string shape_of(const std::string& v) { return emit().shape_of(v); }
  std::string zeros_like(const std::string& v) { return emit().zeros_like(v); }
  std::string ones_like(const std::string& v) { return emit().ones_like(v); }
  std::string add(const std::string& a, const std::string& b) { return op("Add", {a, b}); }
  std::string sub(const std::string& a, const std::string& b) { return op("Sub", {a, b}); }
  std::string mul(const std::string& a, const std::string& b) { return op("Mul", {a, b}); }
  std::string div(const std::string& a, const std::string& b) { return op("Div", {a, b}); }
  std::string neg(const std::string& a) { return op("Neg", {a}); }
  std::string cast(const std::string& v, DType to) { return emit().cast(v, to); }
  std::string cast_like(const std::string& v, const std::string& like) { return emit().cast_like(v, like); }
  std::string reduce_sum(const std::string& v, const std::vector<int64_t>& axes, bool keepdims) {
    return emit().reduce_sum(v, axes, keepdims);
  }
  std::string unsqueeze(const std::string& v, const std::vector<int64_t>& axes) { return emit().unsqueeze(v, axes); }
  std::string squeeze(const std::string& v, const std::vector<int64_t>& axes) { return emit().squeeze(v, axes); }
  std::vector<std::string> split(const std::string& v, int64_t axis, const std::vector<int64_t>& sizes) {
    return emit().split(v, axis, sizes);
  }
  std::string slice(const std::string& v, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& axes, const std::vector<int64_t>& steps = {}) {
    return emit().slice(v, starts, ends, axes, steps);
  }
  std::string pad(const std::string& v, const std::vector<int64_t>& pads) { return emit().pad(v, pads); }
  std::string transpose(const std::string& v, const std::vector<int64_t>& perm) { return emit().transpose(v, perm); }
  std::string reshape(const std::string& v, const std::string& shape) { return emit().reshape(v, shape); }
  std::string expand(const std::string& v, const std::string& shape) { return emit().expand(v, shape); }

  /// Throws NotImplemented naming the node.
  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw_error<NotImplemented>("gradient of ", node_.describe(), ": ", std::forward<Args>(args)...);
  }

  // builder side
  std::vector<std::string> go_;

 private:
  // Records the schema types of outputs [from, to) of `n`, a variant of the forward node.
  void record_forward_types(const ir::Node& n, size_t from, size_t to);

  GraphBuilderState& st_;
  const ir::Node& node_;
  int64_t opset_;
};

/// One entry of the rule table.
struct GradRule {
  /// Emits the gradient nodes. Null for operators declared zero-gradient.
  std::function<void(RuleContext&)> build;
  /// Inputs through which gradients flow (empty: every input). Others are indices, shapes,
  /// masks, flags: never differentiated.
  std::vector<size_t> differentiable;
};

/// Rule for (domain, op type, opset), or null.
const GradRule* find_rule(const std::string& domain, const std::string& op, int64_t opset);
/// Every (domain, op) with a rule.
std::vector<std::pair<std::string, std::string>> rule_ops();

}  // namespace onnxtrain::autodiff
