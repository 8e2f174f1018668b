// The central chain-rule machinery: which values need gradients, the reverse walk, accumulation
// of fan-out, reduction of broadcast dimensions, pruning. Rules live in rules.cpp; every node they
// emit goes through ir::Emitter, which types it from its operator's schema.
#include "autodiff/builder.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/rule_context.h"
#include "ir/emitter.h"
#include "ir/infer.h"

namespace onnxtrain::autodiff {

using ir::kOnnxtrainDomain;

// Everything the walk accumulates; RuleContext forwards to it.
class GraphBuilderState {
 public:
  GraphBuilderState(const ir::Model& m, const BuildOptions& o)
      : fwd(m), opts(o), opsets(m.opsets), em(opsets, emitted) {
    opset = m.opset("");
    em.set_node_prefix("grad_");
    em.reserve_names_of(*m.graph);
    note_graph(*m.graph);
  }
  // A subgraph's state: its types come from inference of `g` in the parent's scope (declared
  // inputs typed by `input_types` where known); names and emitted constants are the root's.
  GraphBuilderState(GraphBuilderState& p, const ir::Graph& g, const std::vector<ir::TypeInfo>& input_types)
      : fwd(p.fwd), opts(p.opts), parent(&p), em(p.em, emitted) {
    opset = p.opset;
    ir::Model m;
    m.ir_version = std::max<int64_t>(fwd.ir_version, 7);
    m.opsets = fwd.opsets;
    m.graph = std::make_shared<ir::Graph>(g);
    for (size_t k = 0; k < input_types.size() && k < g.inputs.size(); ++k)
      if (input_types[k].kind != ir::TypeInfo::Kind::kUnknown) m.graph->inputs[k].type = input_types[k];
    for (const auto& f : g.free_variables())
      if (const ir::TypeInfo* t = p.type(f)) m.graph->inputs.push_back(ir::ValueInfo{f, *t, ""});
    ir::infer_types(m);
    note_graph(*m.graph);
  }

  void note_graph(const ir::Graph& g) {
    em.note_types(g);
    for (const auto& [n, t] : g.initializers)
      if (!g.is_input(n)) constants[n] = t;
    for (const auto& n : g.nodes)
      if (n.op_type == "Constant" && n.domain.empty() && n.outputs.size() == 1)
        if (const ir::Attribute* a = n.attr("value"); a && a->type == ir::AttrType::kTensor) constants[n.outputs[0]] = a->t;
  }
  GraphBuilderState& root() { return parent ? parent->root() : *this; }

  /// The emitter, naming values after `hint` and prefixing its errors with `origin`.
  ir::Emitter& emitter(const std::string& hint, const std::string& origin) {
    em.set_hint(hint);
    em.set_origin(origin);
    return em;
  }

  DType dtype(const std::string& v) const { return em.dtype(v); }
  // Types and constants of enclosing scopes are visible in subgraphs.
  const ir::TypeInfo* type(const std::string& v) const { return em.type(v); }
  const Tensor* constant_value(const std::string& v) const {
    auto it = constants.find(v);
    if (it != constants.end()) return &it->second;
    return parent ? parent->constant_value(v) : nullptr;
  }

  void contribute(const std::string& value, const std::string& g) { contrib[value].push_back(g); }

  // Sum of the gradient contributions to `value`, or "" when there are none.
  std::string accumulate(const std::string& value) {
    auto it = contrib.find(value);
    if (it == contrib.end() || it->second.empty()) return "";
    auto& list = it->second;
    if (list.size() > 1) {
      ir::Emitter& e = emitter("", "accumulating the gradient of '" + value + "'");
      const std::string s = e.add_n("Sum", list, 1, {}, "", value + "_grad_sum")[0];
      list.assign(1, s);
    }
    if (const ir::TypeInfo* t = type(value)) em.refine_type(list[0], *t);
    return list[0];
  }

  const ir::Model& fwd;
  BuildOptions opts;
  int64_t opset = 0;
  GraphBuilderState* parent = nullptr;
  std::map<std::string, int64_t> opsets;  // root: the built model's imports (the emitter adds com.onnxtrain)
  ir::Graph emitted;                      // emitted gradient nodes in order (and, at the root, constants)
  ir::Emitter em;
  std::unordered_map<std::string, std::vector<std::string>> contrib;
  std::unordered_set<std::string> requires_grad;
  std::unordered_map<std::string, Tensor> constants;  // forward constants by name
  // Forward nodes replaced in the built graph by a variant with extra outputs (replace_forward).
  std::unordered_map<const ir::Node*, ir::Node> replaced;
};

// ------------------------------------------------------------------ RuleContext
RuleContext::RuleContext(GraphBuilderState& st, const ir::Node& node, int64_t opset)
    : st_(st), node_(node), opset_(opset) {}

bool RuleContext::portable() const { return st_.opts.portable; }

ir::Emitter& RuleContext::emit() {
  return st_.emitter(node_.outputs.empty() ? "" : node_.outputs[0], "gradient of " + node_.describe());
}

const std::string& RuleContext::I(size_t i) const {
  static const std::string empty;
  return i < node_.inputs.size() ? node_.inputs[i] : empty;
}
const std::string& RuleContext::O(size_t i) const {
  static const std::string empty;
  return i < node_.outputs.size() ? node_.outputs[i] : empty;
}

std::string RuleContext::forward_output(size_t i) {
  if (i < node_.outputs.size() && !node_.outputs[i].empty()) return node_.outputs[i];
  // The built graph gets a variant of the forward node that names output i (replace_forward's
  // mechanism; the caller's model is untouched); its type comes from the operator's schema.
  auto it = st_.replaced.find(&node_);
  ir::Node& n = it != st_.replaced.end() ? it->second : st_.replaced.emplace(&node_, node_).first->second;
  if (n.outputs.size() <= i) n.outputs.resize(i + 1);
  if (n.outputs[i].empty()) {
    n.outputs[i] = st_.em.fresh((n.outputs[0].empty() ? n.op_type : n.outputs[0]) + "_saved" + std::to_string(i));
    record_forward_types(n, i, i + 1);
  }
  return n.outputs[i];
}

void RuleContext::record_forward_types(const ir::Node& n, size_t from, size_t to) {
  const auto types = ir::output_types(n, st_.em.opsets(), [this](const std::string& v) { return st_.type(v); });
  for (size_t k = from; k < to && k < n.outputs.size(); ++k)
    if (!n.outputs[k].empty() && types[k].kind != ir::TypeInfo::Kind::kUnknown) st_.em.set_type(n.outputs[k], types[k]);
}

std::string RuleContext::GO_or_zeros(size_t i) { return has_GO(i) ? GO(i) : zeros_like(O(i)); }

bool RuleContext::needs_GI(size_t i) const { return has_input(i) && st_.requires_grad.count(I(i)) > 0; }

void RuleContext::set_GI(size_t i, const std::string& g) {
  if (!needs_GI(i) || g.empty()) return;
  set_grad(I(i), g);
}

std::vector<std::string> RuleContext::implicit_inputs() const { return ir::implicit_inputs(node_); }

bool RuleContext::needs_grad(const std::string& v) const { return st_.requires_grad.count(v) > 0; }

void RuleContext::set_grad(const std::string& v, const std::string& g) {
  if (!needs_grad(v) || g.empty()) return;
  if (const ir::TypeInfo* t = st_.type(v)) emit().refine_type(g, *t);  // g has v's type and shape
  st_.contribute(v, g);
}

std::string RuleContext::fresh_name(const std::string& hint) { return st_.em.fresh(hint); }

void RuleContext::set_GI_unbroadcast(size_t i, const std::string& g, size_t out) {
  set_GI_unbroadcast_typed(i, g, st_.type(O(out)));
}

void RuleContext::set_GI_unbroadcast_typed(size_t i, const std::string& g, const ir::TypeInfo* to) {
  if (!needs_GI(i) || g.empty()) return;
  const ir::TypeInfo* ti = st_.type(I(i));
  if (to && ti && to->has_shape && ti->has_shape) {
    const auto& so = to->dims;
    const auto& si = ti->dims;
    if (si.size() > so.size()) fail("input ", i, " has a higher rank than the output");
    const size_t lead = so.size() - si.size();
    std::vector<int64_t> axes;
    bool dynamic = false;
    for (size_t a = 0; a < so.size(); ++a) {
      if (a < lead) {
        axes.push_back(int64_t(a));
        continue;
      }
      const ir::Dim& di = si[a - lead];
      const ir::Dim& d_o = so[a];
      if (di.fixed() && d_o.fixed()) {
        if (di.value == d_o.value) continue;
        if (di.value == 1) {
          axes.push_back(int64_t(a));
          continue;
        }
        fail("input ", i, " dimension ", di.value, " does not broadcast to ", d_o.value);
      }
      if (di.fixed() && di.value != 1) continue;  // the output dimension must equal it
      if (!di.fixed() && !di.param.empty() && di.param == d_o.param) continue;
      dynamic = true;
    }
    if (!dynamic) {
      std::string r = g;
      if (!axes.empty()) {
        r = reduce_sum(g, axes, true);
        if (lead > 0) {
          std::vector<int64_t> lead_axes;
          for (size_t a = 0; a < lead; ++a) lead_axes.push_back(int64_t(a));
          r = squeeze(r, lead_axes);
        }
      }
      emit().refine_type(r, *ti);
      st_.contribute(I(i), r);
      return;
    }
  }
  // Shapes only known at run time.
  std::string r;
  if (!portable()) {
    r = custom("SumToShape", {g, shape_of(I(i))}, 1)[0];
  } else {
    if (opset_ < 13) fail("portable gradients of dynamically broadcast operands need opset >= 13");
    using E = ir::Emitter;
    const std::string sg = shape_of(g), si = shape_of(I(i));
    const std::string diff = op("Sub", {op("Size", {sg}), op("Size", {si})});
    const std::string pad = op("ConstantOfShape", {reshape(diff, ints({1}))},
                               {E::tensor_attr("value", Tensor::from_vector<int64_t>({1}, {1}))});
    const std::string padded = op("Concat", {pad, si}, {E::int_attr("axis", 0)});
    const std::string one_c = ints({1});
    const std::string mask = op("And", {op("Equal", {padded, one_c}), op("Not", {op("Equal", {sg, one_c})})});
    const std::string axes = reshape(op("NonZero", {mask}), ints({-1}));
    const std::string red =
        op("ReduceSum", {g, axes}, {E::int_attr("keepdims", 1), E::int_attr("noop_with_empty_axes", 1)});
    r = reshape(red, si);
  }
  if (ti) emit().refine_type(r, *ti);
  st_.contribute(I(i), r);
}

DType RuleContext::dtype(const std::string& v) const { return st_.dtype(v); }

const ir::TypeInfo* RuleContext::type(const std::string& v) const { return st_.type(v); }

int64_t RuleContext::rank(const std::string& v) const {
  const ir::TypeInfo* t = st_.type(v);
  return t && t->has_shape ? int64_t(t->dims.size()) : -1;
}

std::optional<Shape> RuleContext::static_shape(const std::string& v) const { return ir::static_shape(st_.type(v)); }

const Tensor* RuleContext::constant_value(const std::string& v) const { return st_.constant_value(v); }

std::optional<std::vector<int64_t>> RuleContext::const_ints_input(size_t i) const {
  if (!has_input(i)) return std::nullopt;
  const Tensor* t = constant_value(I(i));
  if (!t) fail("input ", i, " ('", I(i), "') must be a constant for differentiation");
  std::vector<int64_t> r;
  for (int64_t k = 0; k < t->numel(); ++k) {
    if (t->dtype() == DType::kInt64) r.push_back(t->data<int64_t>()[k]);
    else if (t->dtype() == DType::kInt32) r.push_back(t->data<int32_t>()[k]);
    else fail("input ", i, " must hold integers");
  }
  return r;
}

int64_t RuleContext::attr_int(const std::string& name, int64_t dflt) const {
  const ir::Attribute* a = node_.attr(name);
  return a && a->type == ir::AttrType::kInt ? a->i : dflt;
}
float RuleContext::attr_float(const std::string& name, float dflt) const {
  const ir::Attribute* a = node_.attr(name);
  return a && a->type == ir::AttrType::kFloat ? a->f : dflt;
}
std::string RuleContext::attr_string(const std::string& name, const std::string& dflt) const {
  const ir::Attribute* a = node_.attr(name);
  return a && a->type == ir::AttrType::kString ? a->s : dflt;
}
std::vector<int64_t> RuleContext::attr_ints(const std::string& name, const std::vector<int64_t>& dflt) const {
  const ir::Attribute* a = node_.attr(name);
  return a && a->type == ir::AttrType::kInts ? a->ints : dflt;
}
std::vector<float> RuleContext::attr_floats(const std::string& name, const std::vector<float>& dflt) const {
  const ir::Attribute* a = node_.attr(name);
  return a && a->type == ir::AttrType::kFloats ? a->floats : dflt;
}

std::vector<std::string> RuleContext::custom(const std::string& type, std::vector<std::string> inputs, size_t n,
                                             std::vector<ir::Attribute> attrs) {
  return op_n(type, std::move(inputs), n, std::move(attrs), kOnnxtrainDomain);
}

std::vector<std::string> RuleContext::custom_some(const std::string& type, std::vector<std::string> inputs,
                                                  const std::vector<bool>& wanted, std::vector<ir::Attribute> attrs) {
  return emit().add_some(type, std::move(inputs), wanted, std::move(attrs), kOnnxtrainDomain);
}

std::string RuleContext::constant(const Tensor& t) { return emit().constant(t, "grad_const"); }

// ------------------------------------------------------------------ the walk
namespace {

bool is_float(DType t) { return t == DType::kUndefined || dtype_is_float(t); }

// Inputs of `n` through which gradients may flow.
std::vector<size_t> diff_inputs(const ir::Node& n, const GradRule* rule) {
  std::vector<size_t> r;
  if (rule && !rule->differentiable.empty()) {
    for (size_t i : rule->differentiable)
      if (i < n.inputs.size() && !n.inputs[i].empty()) r.push_back(i);
    return r;
  }
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (!n.inputs[i].empty()) r.push_back(i);
  return r;
}

// Differentiates `g` (nodes in topological `order`): `xs` require gradients, `seeds` (value,
// gradient) start the reverse walk. Every rule on the way emits into st; the gradient of x is then
// st.accumulate(x).
void differentiate(GraphBuilderState& st, const ir::Graph& g, const std::vector<size_t>& order,
                   const std::vector<std::string>& xs, const std::vector<std::pair<std::string, std::string>>& seeds) {
  const ir::Model& fwd = st.fwd;
  auto rule_of = [&](const ir::Node& n) {
    auto it = fwd.opsets.find(n.domain);
    return find_rule(n.domain, n.op_type, it == fwd.opsets.end() ? 0 : it->second);
  };

  // Forward: values that depend on an x through differentiable edges (or subgraph reads).
  auto& R = st.requires_grad;
  for (const auto& x : xs) R.insert(x);
  for (size_t idx : order) {
    const ir::Node& n = g.nodes[idx];
    const GradRule* rule = rule_of(n);
    if (rule && !rule->build) continue;  // zero-gradient operator
    bool any = false;
    for (size_t i : diff_inputs(n, rule)) any |= R.count(n.inputs[i]) > 0;
    for (const auto& f : ir::implicit_inputs(n)) any |= R.count(f) > 0;
    if (!any) continue;
    for (const auto& o : n.outputs)
      if (!o.empty() && is_float(st.dtype(o))) R.insert(o);
  }

  // Backward: values on a path to a seed.
  std::unordered_set<std::string> L;
  for (const auto& [v, gv] : seeds) L.insert(v);
  std::vector<size_t> active;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Node& n = g.nodes[*it];
    bool on_path = false;
    for (const auto& o : n.outputs) on_path |= !o.empty() && L.count(o) && R.count(o);
    if (!on_path) continue;
    const GradRule* rule = rule_of(n);
    if (!rule)
      throw_error<NotImplemented>("no gradient rule for ", n.op_type,
                                  n.domain.empty() ? "" : " (domain " + n.domain + ")", " (", n.describe(),
                                  ") on the path from the loss to the requested inputs");
    active.push_back(*it);
    for (size_t i : diff_inputs(n, rule))
      if (R.count(n.inputs[i])) L.insert(n.inputs[i]);
    for (const auto& f : ir::implicit_inputs(n))
      if (R.count(f)) L.insert(f);
  }

  for (const auto& [v, gv] : seeds) st.contribute(v, gv);

  // Reverse walk over the active nodes (already in reverse topological order).
  for (size_t idx : active) {
    const ir::Node& n = g.nodes[idx];
    const GradRule* rule = rule_of(n);
    auto it = fwd.opsets.find(n.domain);
    RuleContext c(st, n, it == fwd.opsets.end() ? 0 : it->second);
    bool any = false;
    c.go_.resize(n.outputs.size());
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty() || !R.count(n.outputs[k])) continue;
      c.go_[k] = st.accumulate(n.outputs[k]);
      any |= !c.go_[k].empty();
    }
    if (!any) continue;
    try {
      rule->build(c);
    } catch (const NotImplemented&) {
      throw;
    } catch (const Error& e) {
      if (std::string(e.what()).rfind("gradient of ", 0) == 0) throw;  // the emitter named the rule's node
      throw_error<NotImplemented>("gradient of ", n.describe(), ": ", e.what());
    }
  }
}

// The forward nodes of `g` in `order` (replaced ones swapped for their variants), then the emitted
// nodes, keeping only what produces a value in `needed` (which grows to every value read).
// Outputs of emitted com.onnxtrain nodes that nothing reads are left unnamed, so that their
// kernels skip them.
std::vector<ir::Node> assemble(const GraphBuilderState& st, const ir::Graph& g, const std::vector<size_t>& order,
                               std::unordered_set<std::string>& needed) {
  std::vector<const ir::Node*> all;
  for (size_t idx : order) {
    auto r = st.replaced.find(&g.nodes[idx]);
    all.push_back(r == st.replaced.end() ? &g.nodes[idx] : &r->second);
  }
  const size_t num_forward = all.size();
  for (const auto& n : st.emitted.nodes) all.push_back(&n);
  std::vector<ir::Node> kept;
  for (size_t i = all.size(); i-- > 0;) {
    const ir::Node& n = *all[i];
    bool k = false;
    for (const auto& o : n.outputs) k |= !o.empty() && needed.count(o);
    if (!k) continue;
    kept.push_back(n);
    if (i >= num_forward && n.domain == kOnnxtrainDomain)
      for (auto& o : kept.back().outputs)
        if (!needed.count(o)) o.clear();
    for (const auto& in : n.inputs)
      if (!in.empty()) needed.insert(in);
    for (const auto& f : ir::implicit_inputs(n)) needed.insert(f);
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

}  // namespace

std::vector<std::string> RuleContext::replace_forward(const std::string& domain, const std::string& op_type,
                                                      std::vector<ir::Attribute> attrs, size_t first_extra,
                                                      size_t extra) {
  if (st_.replaced.count(&node_)) fail("its forward node was already replaced");
  if (first_extra < node_.outputs.size()) fail("replace_forward: extra outputs would overwrite outputs");
  ir::Node n = node_;
  n.domain = domain;
  n.op_type = op_type;
  n.attrs = std::move(attrs);
  n.outputs.resize(first_extra);
  std::vector<std::string> names;
  for (size_t k = 0; k < extra; ++k)
    names.push_back(st_.em.fresh(node_.outputs.empty() ? "" : node_.outputs[0] + "_saved"));
  n.outputs.insert(n.outputs.end(), names.begin(), names.end());
  st_.em.import_domain(domain);
  record_forward_types(n, first_extra, first_extra + extra);
  st_.replaced.emplace(&node_, std::move(n));
  return names;
}

RuleContext::SubgraphGradient RuleContext::subgraph_gradient(const ir::Graph& body,
                                                             const std::vector<ir::TypeInfo>& input_types,
                                                             const std::vector<std::string>& seeds,
                                                             const std::vector<std::string>& wrt) {
  GraphBuilderState sub(st_, body, input_types);
  std::vector<std::pair<std::string, std::string>> seed_pairs;
  for (size_t k = 0; k < seeds.size() && k < body.outputs.size(); ++k)
    if (!seeds[k].empty()) seed_pairs.emplace_back(body.outputs[k].name, seeds[k]);
  const std::vector<size_t> order = ir::topological_order(body);
  differentiate(sub, body, order, wrt, seed_pairs);
  SubgraphGradient r;
  ir::Node owner;
  owner.op_type = "SubgraphGradient";
  owner.outputs = {node_.outputs.empty() ? std::string() : node_.outputs[0]};
  RuleContext c(sub, owner, opset_);
  std::unordered_set<std::string> needed;
  for (const auto& x : wrt) {
    std::string gx = sub.accumulate(x);
    if (gx.empty()) gx = c.zeros_like(x);
    r.grads.push_back(gx);
    needed.insert(gx);
  }
  r.nodes = assemble(sub, body, order, needed);
  return r;
}

ir::Model build_gradient_model(const ir::Model& forward_in, const std::vector<std::string>& ys,
                               const std::vector<std::string>& xs, const std::string& loss,
                               const BuildOptions& options) {
  ir::Model fwd = forward_in;  // shallow: graph shared; types are added to a copy below
  fwd.graph = std::make_shared<ir::Graph>(*forward_in.graph);
  ir::infer_types(fwd);
  const ir::Graph& g = *fwd.graph;
  GraphBuilderState st(fwd, options);

  std::unordered_set<std::string> defined;
  for (const auto& v : g.inputs) defined.insert(v.name);
  for (const auto& [n, t] : g.initializers) defined.insert(n);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) defined.insert(o);
  for (const auto& x : xs)
    if (!g.is_input(x) && !g.initializer(x) && !(options.allow_intermediate_xs && defined.count(x)))
      throw_error<InvalidArgument>("x_node_arg_names: '", x, "' is neither a graph input nor an initializer");
  for (const auto& y : ys)
    if (!defined.count(y)) throw_error<InvalidArgument>("y_node_arg_names: '", y, "' is not a value of the graph");
  const bool yield = !options.yield_outputs.empty();
  if (yield) {
    if (!loss.empty()) throw_error<InvalidArgument>("a graph cut by yield outputs takes no loss ('", loss, "' given)");
    for (const auto& y : options.yield_outputs)
      if (!defined.count(y)) throw_error<InvalidArgument>("output '", y, "' is not a value of the graph");
  } else {
    if (!defined.count(loss)) throw_error<InvalidArgument>("loss_node_arg_name: '", loss, "' is not a value of the graph");
    if (!is_float(st.dtype(loss)))
      throw_error<InvalidArgument>("loss '", loss, "' has non-float element type ", dtype_name(st.dtype(loss)));
  }

  // Gradient outputs: the gradients of `want`, named `names` (reserved before anything is emitted).
  std::vector<std::string> want = xs, names;
  for (const auto& e : options.extra_grad_outputs) want.push_back(e);
  for (size_t wi = 0; wi < want.size(); ++wi) {
    const std::string& x = want[wi];
    names.push_back(wi < options.grad_names.size() ? options.grad_names[wi] : x + options.grad_suffix);
    if (defined.count(names.back()) && !std::count(xs.begin(), xs.end(), names.back()))
      throw_error<InvalidArgument>("cannot name the gradient of '", x, "' '", names.back(),
                                   "': the graph already has that value");
    st.em.reserve(names.back());
  }

  // The cut: the gradients of the yield outputs, named "<y>_grad", typed like y.
  ir::Node cut;
  std::vector<std::pair<std::string, std::string>> yield_seeds;
  if (yield) {
    cut.domain = ir::kMicrosoftDomain;
    cut.op_type = "YieldOp";
    cut.name = st.em.fresh("YieldOp");
    cut.inputs = options.yield_outputs;
    // BatchNormalization's statistics outputs (running or saved mean and variance: buffers in
    // PyTorch, updated without autograd) take no gradient from outside, like non-float values.
    std::unordered_set<std::string> statistics;
    for (const auto& n : g.nodes)
      if (n.op_type == "BatchNormalization" && n.domain.empty())
        for (size_t k = 1; k < n.outputs.size(); ++k) statistics.insert(n.outputs[k]);
    std::vector<int64_t> non_differentiable;
    for (size_t k = 0; k < cut.inputs.size(); ++k) {
      const std::string& y = cut.inputs[k];
      if (!is_float(st.dtype(y)) || statistics.count(y)) {
        cut.outputs.emplace_back();
        non_differentiable.push_back(int64_t(k));
        continue;
      }
      const std::string name = y + options.grad_suffix;
      if (defined.count(name) || std::count(names.begin(), names.end(), name))
        throw_error<InvalidArgument>("cannot name the gradient of output '", y, "' '", name,
                                     "': the graph already has that value");
      st.em.reserve(name);
      if (const ir::TypeInfo* t = st.type(y)) st.em.set_type(name, *t);
      cut.outputs.push_back(name);
      yield_seeds.emplace_back(y, name);
    }
    cut.attrs.push_back(ir::Emitter::ints_attr("non_differentiable_outputs", non_differentiable));
  }

  const std::vector<size_t> order = ir::topological_order(g);
  const int64_t opset = fwd.opset("");
  if (yield) {
    differentiate(st, g, order, xs, yield_seeds);
    // onnxruntime's rule (OrtModuleGraphBuilder): the gradient of an output that the backward part
    // reads as it is must have the output's full shape; one summed with gradients from inside the
    // graph (the output also feeds other nodes) may be anything broadcastable to it (ORTModule
    // passes a scalar 0 for an output without a gradient).
    std::vector<int64_t> full_shape;
    for (size_t k = 0; k < cut.outputs.size(); ++k) {
      if (cut.outputs[k].empty()) continue;
      auto it = st.contrib.find(cut.inputs[k]);
      if (it == st.contrib.end() || (it->second.size() == 1 && it->second[0] == cut.outputs[k]))
        full_shape.push_back(int64_t(k));
    }
    cut.attrs.push_back(ir::Emitter::ints_attr("full_shape_outputs", full_shape));
  }
  // Seed dLoss/dLoss = 1.
  else {
    ir::Node seed_owner;
    seed_owner.op_type = "Loss";
    seed_owner.outputs = {loss};
    RuleContext c(st, seed_owner, opset);
    std::string one;
    if (auto s = c.static_shape(loss); s && shape_numel(*s) == 1)
      one = c.constant(ir::float_tensor(st.dtype(loss), 1.0, *s));
    else
      one = c.ones_like(loss);
    if (const ir::TypeInfo* t = st.type(loss)) st.em.refine_type(one, *t);
    differentiate(st, g, order, xs, {{loss, one}});
  }

  // Outputs "<x>_grad".
  ir::Model out;
  out.ir_version = std::max<int64_t>(fwd.ir_version, 7);
  out.producer_name = "onnxtrain";
  out.producer_version = "0.1.0";
  out.graph = std::make_shared<ir::Graph>();
  ir::Graph& og = *out.graph;
  og.name = g.name + "_grad";
  og.inputs = g.inputs;
  og.initializers = g.initializers;
  for (const auto& y : ys) {
    ir::ValueInfo vi;
    vi.name = y;
    if (const ir::TypeInfo* t = st.type(y)) vi.type = *t;
    og.outputs.push_back(vi);
  }
  std::vector<std::string> grad_outputs;
  {
    ir::Node owner;
    owner.op_type = "GradientOutputs";
    RuleContext c(st, owner, opset);
    for (size_t wi = 0; wi < want.size(); ++wi) {
      const std::string &x = want[wi], &name = names[wi];
      std::string gx = st.accumulate(x);
      if (gx.empty()) gx = c.zeros_like(x);
      ir::Node id;
      id.op_type = "Identity";
      id.name = st.em.fresh("grad_output_" + x);
      id.inputs = {gx};
      id.outputs = {name};
      st.emitter("", "").append(std::move(id));
      ir::ValueInfo vi;
      vi.name = name;
      if (const ir::TypeInfo* t = st.type(x)) vi.type = *t;
      og.outputs.push_back(vi);
      grad_outputs.push_back(name);
    }
  }

  // Assemble forward + gradient nodes and prune what no output needs.
  std::unordered_set<std::string> needed;
  for (const auto& o : og.outputs) needed.insert(o.name);
  for (const auto& y : options.yield_outputs) needed.insert(y);
  og.nodes = assemble(st, g, order, needed);
  if (yield) {  // before the first gradient node that reads a gradient it outputs
    std::unordered_set<std::string> seeds(cut.outputs.begin(), cut.outputs.end());
    auto at = std::find_if(og.nodes.begin(), og.nodes.end(), [&](const ir::Node& n) {
      return std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& i) { return seeds.count(i) > 0; });
    });
    og.nodes.insert(at, std::move(cut));
    out.opsets.emplace(ir::kMicrosoftDomain, 1);
  }
  for (const auto& [n, t] : st.emitted.initializers)
    if (needed.count(n)) og.initializers.emplace_back(n, t);
  out.opsets.insert(st.opsets.begin(), st.opsets.end());  // the forward's imports and the domains emitted
  // Keep the forward graph's known value types for inspection.
  for (const auto& v : g.value_info)
    if (needed.count(v.name)) og.value_info.push_back(v);
  ir::validate_graph(og);
  return out;
}

void lower_gradient_ops(ir::Model& m) {
  ir::Graph& g = *m.graph;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.domain != "ai.onnx.preview.training" || n.op_type != "Gradient") continue;
    const ir::Attribute* xs = n.attr("xs");
    const ir::Attribute* y = n.attr("y");
    if (!xs || xs->type != ir::AttrType::kStrings || !y || y->type != ir::AttrType::kString)
      throw_error<InvalidModel>(n.describe(), ": Gradient needs the 'xs' (strings) and 'y' (string) attributes");
    if (const ir::Attribute* zs = n.attr("zs"); zs && !zs->strings.empty())
      throw_error<NotImplemented>(n.describe(), ": the 'zs' attribute of Gradient is not supported");
    if (n.outputs.size() != xs->strings.size())
      throw_error<InvalidModel>(n.describe(), ": ", n.outputs.size(), " outputs for ", xs->strings.size(), " xs");
    // Differentiate the graph without this node.
    ir::Model sub = m;
    sub.graph = std::make_shared<ir::Graph>(g);
    sub.graph->nodes.erase(sub.graph->nodes.begin() + long(i));
    sub.graph->outputs.clear();
    BuildOptions o;
    o.grad_names = n.outputs;
    o.allow_intermediate_xs = true;
    ir::Model gm = build_gradient_model(sub, {}, xs->strings, y->s, o);
    std::unordered_set<std::string> existing;
    for (const auto& v : g.inputs) existing.insert(v.name);
    for (const auto& [k, t] : g.initializers) existing.insert(k);
    for (const auto& fn : g.nodes)
      for (const auto& out : fn.outputs) existing.insert(out);
    // Forward nodes the gradient replaced by variants with extra outputs (same outputs first).
    std::unordered_map<std::string, size_t> producer;
    for (size_t j = 0; j < g.nodes.size(); ++j)
      if (j != i)
        for (const auto& out : g.nodes[j].outputs)
          if (!out.empty()) producer.emplace(out, j);
    std::vector<ir::Node> added;
    for (const auto& gn : gm.graph->nodes) {
      const auto first = std::find_if(gn.outputs.begin(), gn.outputs.end(), [](const std::string& o) { return !o.empty(); });
      if (first != gn.outputs.end() && producer.count(*first)) {
        ir::Node& orig = g.nodes[producer[*first]];
        if (orig.op_type != gn.op_type || orig.domain != gn.domain || orig.outputs != gn.outputs) orig = gn;
        continue;
      }
      bool is_new = true;
      for (const auto& out : gn.outputs) is_new &= !existing.count(out) || std::count(n.outputs.begin(), n.outputs.end(), out);
      if (is_new) added.push_back(gn);
    }
    for (const auto& [k, t] : gm.graph->initializers)
      if (!existing.count(k)) g.initializers.emplace_back(k, t);
    for (const auto& [d, v] : gm.opsets) m.opsets.emplace(d, v);
    g.nodes.erase(g.nodes.begin() + long(i));
    g.nodes.insert(g.nodes.begin() + long(i), added.begin(), added.end());
    i += added.size() - 1;
  }
}

std::vector<std::string> missing_rules(const ir::Model& m) {
  std::set<std::string> r;
  std::function<void(const ir::Graph&)> walk = [&](const ir::Graph& g) {
    for (const auto& n : g.nodes) {
      const int64_t v = m.opset(n.domain);
      if (!find_rule(n.domain, n.op_type, v)) r.insert(n.domain.empty() ? n.op_type : n.domain + "." + n.op_type);
      for (const ir::Graph* sg : n.subgraphs()) walk(*sg);
    }
  };
  walk(*m.graph);
  return {r.begin(), r.end()};
}

}  // namespace onnxtrain::autodiff
