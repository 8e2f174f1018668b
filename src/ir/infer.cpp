// Per-node type and shape inference over ir::Graph (ir/infer.h). ONNX 1.12's whole-graph inference
// (onnx/shape_inference/implementation.cc: ShapeInferenceImplBase) is the model followed here: the
// same inference and data-propagation functions, the same merging of inferred and declared types,
// the same symbols (unk__N) for unknown dimensions, ONNX's GraphInferencer for subgraphs. What
// differs: the graph stays the IR (each node alone becomes a NodeProto, for its attributes), nodes
// are visited once in topological order, large initializers give ONNX their type only, and the
// operators ONNX does not know (com.onnxtrain, com.microsoft's YieldOp, ai.onnx 18's forms kept
// at 17) are typed on the way by onnxtrain's own rule, so that what follows them is typed in the
// same pass.
#include "ir/infer.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <exception>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/emitter.h"
#include "ir/opset_lower.h"
#include "ir/proto.h"

namespace onnxtrain::ir {

namespace {

namespace si = onnx::shape_inference;
using Opsets = std::unordered_map<std::string, int>;

// Initializers up to this size give ONNX their values (Reshape's shape, Slice's starts, ...);
// larger ones their type only.
constexpr uint64_t kDataBytes = 4096;
// MaxUnpool nodes of subgraphs move to this domain (imported), whose nodes ONNX skips: see hide().
constexpr const char* kUninferred = "onnxtrain.uninferred";
// Rank given to an output by rule (rank_by_rule) at most.
constexpr int64_t kMaxRuleRank = 64;

const si::ModelLocalFunctionsMap kNoFunctions;  // model-local functions are inlined at load

// Whether `t` holds a type: a tensor with its element type, or a value of another kind.
bool has_type(const onnx::TypeProto* t) {
  if (!t) return false;
  if (t->has_tensor_type()) return t->tensor_type().elem_type() != 0;
  return t->value_case() != onnx::TypeProto::VALUE_NOT_SET;
}

bool has_type(const TypeInfo& t) {
  return t.kind != TypeInfo::Kind::kUnknown && !(t.kind == TypeInfo::Kind::kTensor && t.elem == DType::kUndefined);
}

// ---- Guards: ONNX 1.12's inference functions crash on some nodes the fuzzers built.

// Whether ONNX's inference may run on `n` and on the graphs it holds: every node that has an ONNX
// schema satisfies it (required attributes present and typed, input and output counts: inference
// functions assume it, and Scan-8 without num_scan_inputs crashed inside libonnx), and strides are
// positive (convPoolShapeInference divides by each: a zero one was a SIGFPE for Conv, ConvInteger,
// QLinearConv, AveragePool, MaxPool and LpPool). Both found by the gradient fuzz target.
bool safe_for_onnx(const onnx::NodeProto& n, const Opsets& opsets, int depth = 0) {
  if (depth > 64) return false;
  const std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
  if (auto it = opsets.find(domain); it != opsets.end())
    if (const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), it->second, domain)) {
      try {
        schema->Verify(n);
      } catch (const std::exception&) {
        return false;
      }
    }
  auto graph_safe = [&](const onnx::GraphProto& g) {
    for (const auto& sn : g.node())
      if (!safe_for_onnx(sn, opsets, depth + 1)) return false;
    return true;
  };
  for (const auto& a : n.attribute()) {
    if (domain.empty() && a.name() == "strides")
      for (int64_t v : a.ints())
        if (v <= 0) return false;
    if (a.has_g() && !graph_safe(a.g())) return false;
    for (const auto& sg : a.graphs())
      if (!graph_safe(sg)) return false;
  }
  return true;
}

int64_t int_attr(const Node& n, const char* name, int64_t dflt) {
  const Attribute* a = n.attr(name);
  return a && a->type == AttrType::kInt ? a->i : dflt;
}

// Two more crashes inside libonnx (gradient fuzz findings), on nodes that satisfy their schemas:
//  - LayerNormalization, asked for Mean and InvStdDev, sets to 1 the dimensions of their shape
//    from the axis (an int) on without checking it against X's rank: axis < -rank, or an axis past
//    INT_MAX, writes out of bounds. No other operator of opsets <= 17 does so with out-of-range
//    axis, axes, perm or split attributes.
//  - MaxUnpool without output_shape reads dimension 1 of its indices' shape without checking that
//    their type, and a shape of rank 2 or more, is known.
// Whether ONNX may type the statistics: X's `rank` known (-1: not known beforehand, as in
// subgraphs; ONNX's function reads the axis only when X has a shape).
bool layernorm_axis_safe(int64_t axis, int64_t rank) {
  return axis <= INT32_MAX && axis >= (rank < 0 ? 0 : -rank);
}

// Hides the nodes above from ONNX in the graphs `n` holds (their types are not known
// beforehand): a LayerNormalization whose axis is not safe keeps its first output only, a
// MaxUnpool moves to a domain ONNX skips; their outputs stay untyped there.
void hide_in_subgraphs(onnx::NodeProto& n) {
  auto hide = [](onnx::NodeProto& sn) {
    hide_in_subgraphs(sn);
    if (!sn.domain().empty() && sn.domain() != "ai.onnx") return;
    if (sn.op_type() == "MaxUnpool") sn.set_domain(kUninferred);
    if (sn.op_type() != "LayerNormalization" || sn.output_size() < 2) return;
    int64_t axis = -1;
    for (const auto& a : sn.attribute())
      if (a.name() == "axis") axis = a.i();
    if (!layernorm_axis_safe(axis, -1)) sn.mutable_output()->DeleteSubrange(1, sn.output_size() - 1);
  };
  for (auto& a : *n.mutable_attribute()) {
    if (a.has_g())
      for (auto& sn : *a.mutable_g()->mutable_node()) hide(sn);
    for (auto& sg : *a.mutable_graphs())
      for (auto& sn : *sg.mutable_node()) hide(sn);
  }
}

// ---- ONNX's view of the graph.

// Symbols for unknown dimensions (unk__0, unk__1, ...), none equal to a dim_param the graphs
// declare: ONNX's SymbolTableImpl over the IR.
class Symbols final : public onnx::SymbolTable {
 public:
  // The symbols of g's declared types and of the graphs its nodes hold (as ONNX's
  // TraverseGraphsToAddExistingSymbols: graph attributes, not graph lists).
  void add(const Graph& g) {
    for (const auto* list : {&g.inputs, &g.outputs, &g.value_info})
      for (const auto& v : *list) add(v.type);
    for (const auto& n : g.nodes)
      for (const auto& a : n.attrs)
        if (a.g) add(*a.g);
  }
  void addFromGraph(const onnx::GraphProto& g) override {
    for (const auto* list : {&g.input(), &g.output(), &g.value_info()})
      for (const auto& v : *list) add(v.type());
  }
  std::string createNew(const std::string& prefix) override {
    std::string s;
    do s = prefix + std::to_string(next_++);
    while (!used_.insert(s).second);
    return s;
  }

 private:
  void add(const TypeInfo& t) {
    for (const auto& d : t.dims)
      if (!d.fixed() && !d.param.empty()) used_.insert(d.param);
    if (t.inner) add(*t.inner);
  }
  void add(const onnx::TypeProto& t) {
    auto dims = [&](const onnx::TensorShapeProto& s) {
      for (const auto& d : s.dim())
        if (d.has_dim_param()) used_.insert(d.dim_param());
    };
    switch (t.value_case()) {
      case onnx::TypeProto::kTensorType: dims(t.tensor_type().shape()); break;
      case onnx::TypeProto::kSparseTensorType: dims(t.sparse_tensor_type().shape()); break;
      case onnx::TypeProto::kSequenceType: add(t.sequence_type().elem_type()); break;
      case onnx::TypeProto::kOptionalType: add(t.optional_type().elem_type()); break;
      case onnx::TypeProto::kMapType: add(t.map_type().value_type()); break;
      default: break;
    }
  }

  std::unordered_set<std::string> used_;
  uint64_t next_ = 0;
};

class Typer;

// ONNX's InferenceContext for one node of the IR: input types, values and propagated shapes by
// the node's input names from the Typer, attributes from the node's proto, outputs collected here;
// graph attributes are typed by ONNX's GraphInferencer with the Typer's values as outer scope.
class NodeContext final : public onnx::InferenceContext {
 public:
  NodeContext(onnx::NodeProto& n, Typer& typer);
  const onnx::AttributeProto* getAttribute(const std::string& name) const override {
    auto it = attrs_.find(name);
    return it == attrs_.end() ? nullptr : it->second;
  }
  size_t getNumInputs() const override { return size_t(n_.input_size()); }
  const onnx::TypeProto* getInputType(size_t i) const override;
  const onnx::TensorProto* getInputData(size_t i) const override;
  const onnx::SparseTensorProto* getInputSparseData(size_t i) const override {
    input(i);
    return nullptr;  // the IR holds no sparse tensors
  }
  const onnx::TensorShapeProto* getSymbolicInput(size_t i) const override;
  size_t getNumOutputs() const override { return outputs_.size(); }
  onnx::TypeProto* getOutputType(size_t i) override {
    if (i >= outputs_.size()) throw std::out_of_range("output " + std::to_string(i) + " is out of bounds");
    return &outputs_[i];
  }
  onnx::GraphInferencer* getGraphAttributeInferencer(const std::string& name) override;

 private:
  const std::string& input(size_t i) const {
    if (i >= size_t(n_.input_size())) throw std::out_of_range("input " + std::to_string(i) + " is out of bounds");
    return n_.input(int(i));
  }

  onnx::NodeProto& n_;
  Typer& typer_;
  std::unordered_map<std::string, onnx::AttributeProto*> attrs_;
  std::vector<onnx::TypeProto> outputs_;
  std::unordered_map<std::string, std::unique_ptr<onnx::GraphInferencer>> inferencers_;
};

// Types one model's main graph. ONNX's view of its values: every typed value by name (declared
// ones first, then what nodes give), the values ONNX may read (small initializers, Constants, as
// TensorProtos made when first asked for), shapes computed by data propagation, the symbols.
class Typer {
 public:
  explicit Typer(Model& m)
      : g_(*m.graph),
        opsets_(onnx_opsets(m)),
        graph_context_(by_name_, opsets_, &symbols_, kNoFunctions, onnx::OpSchemaRegistry::Instance(), &shapes_,
                       int(m.ir_version)) {}

  void run() {
    declare_values();
    std::vector<size_t> order;
    try {
      order = topological_order(g_);
    } catch (const std::exception&) {  // a cycle: the file's order, as ONNX would take it
      order.resize(g_.nodes.size());
      std::iota(order.begin(), order.end(), size_t(0));
    }
    for (size_t i : order) infer(g_.nodes[i]);
    commit();
  }

  const onnx::TypeProto* type(const std::string& v) const {
    auto it = by_name_.find(v);
    return it == by_name_.end() ? nullptr : it->second;
  }
  const onnx::TensorProto* data(const std::string& v) {
    if (auto it = data_.find(v); it != data_.end()) return &it->second;
    auto src = data_sources_.find(v);
    if (src == data_sources_.end()) return nullptr;
    onnx::TensorProto& p = data_[v];
    tensor_to_proto(*src->second, v, &p);
    return &p;
  }
  // Shape data propagated to `v` (ONNX reads it only for inputs without a value).
  const onnx::TensorShapeProto* symbolic(const std::string& v) const {
    if (data_sources_.count(v)) return nullptr;
    auto it = shapes_.find(v);
    return it == shapes_.end() ? nullptr : &it->second;
  }
  si::GraphInferenceContext& graph_context() { return graph_context_; }

 private:
  static Opsets onnx_opsets(const Model& m) {
    Opsets r;
    for (const auto& [domain, version] : m.opsets) r[domain] = int(version);
    r[kUninferred] = 1;  // declared, so that ONNX skips its nodes rather than failing
    return r;
  }

  // ONNX's order: value_info, inputs, outputs (a later declaration of a name replaces an earlier
  // one), then initializers not declared otherwise. Large initializers that are no inputs are
  // declared with the inputs, by their type.
  void declare_values() {
    std::unordered_set<std::string> inputs;
    for (const auto& v : g_.inputs) inputs.insert(v.name);
    for (const auto& v : g_.value_info) declare(v.name, v.type);
    for (const auto& v : g_.inputs) declare(v.name, v.type);
    for (const auto& [name, t] : g_.initializers)
      if (t.nbytes() > kDataBytes && !inputs.count(name)) declare(name, TypeInfo::tensor(t.dtype(), t.shape()));
    for (const auto& v : g_.outputs) declare(v.name, v.type);
    for (const auto& [name, t] : g_.initializers) {
      if (t.nbytes() > kDataBytes) continue;
      data_sources_[name] = &t;
      if (!by_name_.count(name)) declare(name, TypeInfo::tensor(t.dtype(), t.shape()));
    }
    for (const auto& n : g_.nodes)
      if (n.op_type == "Constant" && n.domain.empty() && n.outputs.size() == 1)
        if (const Attribute* a = n.attr("value"); a && a->type == AttrType::kTensor) data_sources_[n.outputs[0]] = &a->t;
    symbols_.add(g_);
  }

  void declare(const std::string& v, const TypeInfo& t) {
    if (t.kind == TypeInfo::Kind::kUnknown) return;
    auto [it, added] = by_name_.try_emplace(v, nullptr);
    if (added) it->second = &store_.emplace_back();
    type_to_proto(t, it->second);
  }

  // v's entry, created empty (and listed as typed here) when v has none.
  onnx::TypeProto* slot(const std::string& v) {
    auto [it, added] = by_name_.try_emplace(v, nullptr);
    if (added) {
      it->second = &store_.emplace_back();
      fresh_.push_back(v);
    }
    return it->second;
  }

  void infer(const Node& n) {
    const onnx::OpSchema* schema = nullptr;
    if (auto it = opsets_.find(n.domain); it != opsets_.end())
      schema = onnx::OpSchemaRegistry::Schema(n.op_type, it->second, n.domain);
    const bool opset18 = !opset18_form(n).empty();  // ai.onnx 18's forms kept at 17 (ir/opset_lower.h)
    if (schema && !opset18) infer_onnx(n, *schema);
    else if (!n.domain.empty() || opset18) custom(n);
  }

  // As ONNX's ShapeInferenceImplBase::process(NodeProto&) with check_type off, error mode 0 and
  // data propagation on, plus the rules for what ONNX 1.12 leaves untyped or must not see.
  void infer_onnx(const Node& n, const onnx::OpSchema& schema) {
    onnx::NodeProto np;
    node_to_proto(n, &np);
    if (!safe_for_onnx(np, opsets_)) return;  // the kernel or gradient rule names the problem
    hide_in_subgraphs(np);
    if (n.domain.empty() && n.op_type == "MaxUnpool" && !unpool_safe(n)) return rank_by_rule(n);
    if (n.domain.empty() && n.op_type == "LayerNormalization" && np.output_size() > 1 && !layernorm_safe(n))
      np.mutable_output()->DeleteSubrange(1, np.output_size() - 1);  // the statistics stay untyped
    try {
      NodeContext ctx(np, *this);
      if (schema.has_type_and_shape_inference_function()) {
        schema.GetTypeAndShapeInferenceFunction()(ctx);
      } else if (schema.HasFunction()) {
        si::InferShapeForFunctionNode(*schema.GetFunction(), onnx::OpSchemaRegistry::Instance(), ctx,
                                      onnx::ShapeInferenceOptions(false, 0, true), kNoFunctions, &symbols_,
                                      &shapes_);
      } else {
        return;
      }
      for (int i = 0; i < np.output_size(); ++i)
        if (!np.output(i).empty()) record(np.output(i), ctx.getOutputType(size_t(i)));
      // ONNX's propagation functions read their inputs' types without checking them (Shape's
      // dereferenced a null type: a crash when the Cast before it carried an attribute its schema
      // lacks, and so stayed untyped): only for nodes whose inputs are all typed.
      const bool inputs_typed = std::all_of(np.input().begin(), np.input().end(),
                                            [&](const std::string& in) { return in.empty() || has_type(type(in)); });
      if (schema.has_data_propagation_function() && inputs_typed) {
        std::unordered_map<std::string, const onnx::TensorProto*> values;  // ONNX reads scalars, vectors
        for (const auto& in : np.input())
          if (auto src = data_sources_.find(in); src != data_sources_.end() && src->second->rank() <= 1)
            values[in] = data(in);
        si::DataPropagationContextImpl dp(np, by_name_, values, shapes_);
        schema.GetDataPropagationFunction()(dp);
      }
    } catch (const std::exception&) {
      // Best effort: an inference error, or an inferred type conflicting with a declared one,
      // leaves the rest of the node's outputs as they were.
    }
    if (n.domain.empty()) rank_by_rule(n);
  }

  // ONNX's updateType: unknown dimensions get symbols, then the inferred type is merged into what
  // is known of v (throws InferenceError when they conflict).
  void record(const std::string& v, onnx::TypeProto* inferred) {
    if (inferred->value_case() == onnx::TypeProto::VALUE_NOT_SET) return;
    si::MaterializeSymbolicShape(inferred, symbols_);
    si::mergeShapesAndTypes(*inferred, slot(v));
  }

  // A type given by rule, to a value without one.
  void give(const std::string& v, const onnx::TypeProto& t) {
    if (v.empty() || has_type(type(v))) return;
    *slot(v) = t;
  }

  // ONNX 1.12 types the outputs of Slice and Reshape without a shape when the starts, ends or
  // target shape are computed at run time (exported attention slices a fused projection at a
  // computed offset, then reshapes to a Concat of Shape gathers), and with them everything
  // downstream; MaxUnpool's with an output_shape input, or kept from ONNX; Split's with sizes computed at
  // run time. Their ranks are known all the same: Slice, MaxUnpool and Split keep their data's,
  // Reshape takes the length of its shape input.
  // Recorded (dimensions unknown) for what follows, with the data's element type when ONNX gave none.
  void rank_by_rule(const Node& n) {
    const bool reshape = n.op_type == "Reshape";
    if (n.op_type == "Split") {  // split sizes computed at run time (Split-18's num_outputs at load)
      for (const auto& y : n.outputs) rank_by_rule(n, y, false);
      return;
    }
    if (!reshape && n.op_type != "Slice" && n.op_type != "MaxUnpool") return;
    if (!n.outputs.empty()) rank_by_rule(n, n.outputs[0], reshape);
  }
  void rank_by_rule(const Node& n, const std::string& y, bool reshape) {
    if (y.empty() || n.inputs.size() < (reshape ? 2u : 1u)) return;
    const onnx::TypeProto* x = type(n.inputs[0]);
    if (!x || !x->has_tensor_type() || x->tensor_type().elem_type() == 0) return;
    if (const onnx::TypeProto* t = type(y); t && t->has_tensor_type() && t->tensor_type().has_shape()) return;
    int64_t rank = -1;
    if (!reshape) {
      if (x->tensor_type().has_shape()) rank = x->tensor_type().shape().dim_size();
    } else if (const onnx::TypeProto* s = type(n.inputs[1]); s && s->has_tensor_type()) {
      const auto& shape = s->tensor_type().shape();
      if (s->tensor_type().has_shape() && shape.dim_size() == 1 && shape.dim(0).has_dim_value())
        rank = shape.dim(0).dim_value();
    }
    if (rank > kMaxRuleRank) return;
    auto* t = slot(y)->mutable_tensor_type();
    if (t->elem_type() == 0) t->set_elem_type(x->tensor_type().elem_type());
    if (rank < 0) return;
    t->mutable_shape()->clear_dim();
    for (int64_t d = 0; d < rank; ++d) t->mutable_shape()->add_dim();
  }

  bool layernorm_safe(const Node& n) const {
    const onnx::TypeProto* x = n.inputs.empty() ? nullptr : type(n.inputs[0]);
    if (!x || !x->has_tensor_type() || !x->tensor_type().has_shape()) return true;
    return layernorm_axis_safe(int_attr(n, "axis", -1), x->tensor_type().shape().dim_size());
  }

  bool unpool_safe(const Node& n) const {
    if (n.inputs.size() == 3) return true;  // output_shape given: ONNX reads no more
    const onnx::TypeProto* indices = n.inputs.size() > 1 ? type(n.inputs[1]) : nullptr;
    return indices && indices->has_tensor_type() && indices->tensor_type().has_shape() &&
           indices->tensor_type().shape().dim_size() >= 2;
  }

  // Operators ONNX does not know: onnxtrain's rule (ir/emitter.h), where it has one.
  void custom(const Node& n) {
    std::unordered_map<std::string, TypeInfo> seen;
    const TypeLookup lookup = [&](const std::string& v) -> const TypeInfo* {
      const onnx::TypeProto* t = type(v);
      if (!t) return nullptr;
      auto [it, added] = seen.try_emplace(v);
      if (added) it->second = type_from_proto(*t);
      return &it->second;
    };
    std::vector<TypeInfo> types;
    try {
      types = custom_output_types(n, lookup);
    } catch (const std::exception&) {
      return;  // no rule, or a source input absent: untyped
    }
    for (size_t k = 0; k < types.size() && k < n.outputs.size(); ++k) {
      if (!has_type(types[k])) continue;
      onnx::TypeProto t;
      type_to_proto(types[k], &t);
      give(n.outputs[k], t);
    }
  }

  // Values typed here go to value_info (unless listed there already) and to graph outputs
  // declared without a type.
  void commit() {
    std::unordered_set<std::string> listed;
    for (const auto& v : g_.value_info) listed.insert(v.name);
    std::unordered_map<std::string, ValueInfo*> untyped;
    for (auto& o : g_.outputs)
      if (o.type.kind == TypeInfo::Kind::kUnknown) untyped.emplace(o.name, &o);
    for (const auto& v : fresh_) {
      const onnx::TypeProto& t = *by_name_.at(v);
      if (t.value_case() == onnx::TypeProto::VALUE_NOT_SET) continue;
      TypeInfo info = type_from_proto(t);
      if (auto o = untyped.find(v); o != untyped.end()) o->second->type = info;
      if (listed.insert(v).second) g_.value_info.push_back(ValueInfo{v, std::move(info), ""});
    }
  }

  Graph& g_;
  const Opsets opsets_;
  std::deque<onnx::TypeProto> store_;
  std::unordered_map<std::string, onnx::TypeProto*> by_name_;  // ONNX's view, and subgraphs' outer scope
  std::vector<std::string> fresh_;                             // values typed here, in order
  std::unordered_map<std::string, const Tensor*> data_sources_;
  std::unordered_map<std::string, onnx::TensorProto> data_;
  std::unordered_map<std::string, onnx::TensorShapeProto> shapes_;  // data propagation
  Symbols symbols_;
  si::GraphInferenceContext graph_context_;
};

NodeContext::NodeContext(onnx::NodeProto& n, Typer& typer) : n_(n), typer_(typer), outputs_(size_t(n.output_size())) {
  for (auto& a : *n.mutable_attribute()) attrs_[a.name()] = &a;
}

const onnx::TypeProto* NodeContext::getInputType(size_t i) const { return typer_.type(input(i)); }

const onnx::TensorProto* NodeContext::getInputData(size_t i) const { return typer_.data(input(i)); }

const onnx::TensorShapeProto* NodeContext::getSymbolicInput(size_t i) const { return typer_.symbolic(input(i)); }

onnx::GraphInferencer* NodeContext::getGraphAttributeInferencer(const std::string& name) {
  auto& inferencer = inferencers_[name];
  if (!inferencer) {
    auto it = attrs_.find(name);
    if (it == attrs_.end() || !it->second->has_g()) fail_type_inference("Attribute ", name, " does not contain a graph.");
    inferencer = std::make_unique<si::GraphInferencerImpl>(*it->second->mutable_g(), typer_.graph_context());
  }
  return inferencer.get();
}

}  // namespace

void infer_types(Model& m) {
  if (!m.graph) return;
  Typer(m).run();
}

}  // namespace onnxtrain::ir
