#include "runtime/conv_fusion.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <unordered_map>

#include "ir/infer.h"
#include "ir/splice.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::runtime {

namespace {

bool is(const ir::Node& n, const char* op) { return n.domain.empty() && n.op_type == op && n.outputs.size() == 1; }

// A TrainingAgent's graph (forward and backward cut by a YieldOp) keeps its nodes where they are.
bool has_yield(const ir::Graph& g) {
  for (const auto& n : g.nodes)
    if (n.domain == ops::kMicrosoftDomain && n.op_type == "YieldOp") return true;
  return false;
}

// The fused activation: its name and activation_params.
struct Activation {
  std::string name;
  std::vector<float> params;
};

// A float32 constant that no feed can override (an initializer that is no graph input), with
// `numel` elements (-1: any).
const Tensor* constant_tensor(const ir::Graph& g, const std::string& name, int64_t numel) {
  const Tensor* t = name.empty() ? nullptr : g.initializer(name);
  if (!t || g.is_input(name) || t->dtype() != DType::kFloat32 || (numel >= 0 && t->numel() != numel)) return nullptr;
  return t;
}

std::optional<float> constant_scalar(const ir::Graph& g, const std::string& name) {
  const Tensor* t = constant_tensor(g, name, 1);
  if (!t) return std::nullopt;
  return t->data<float>()[0];
}

// Who reads each value: node indices, SIZE_MAX for a graph output.
std::unordered_map<std::string, std::vector<size_t>> readers_of(const ir::Graph& g) {
  std::unordered_map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs) readers[in].push_back(i);
    for (const auto& in : ir::implicit_inputs(g.nodes[i])) readers[in].push_back(i);
  }
  for (const auto& o : g.outputs) readers[o.name].push_back(SIZE_MAX);
  return readers;
}

// Relu, or Clip with known bounds (attributes before opset 11, constant inputs from 11 on).
std::optional<Activation> activation_of(const ir::Graph& g, const ir::Node& n, int64_t opset) {
  if (is(n, "Relu") && n.inputs.size() == 1) return Activation{"Relu", {}};
  if (!is(n, "Clip") || n.inputs.empty()) return std::nullopt;
  float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
  if (opset < 11) {
    if (const ir::Attribute* a = n.attr("min")) lo = a->f;
    if (const ir::Attribute* a = n.attr("max")) hi = a->f;
  } else {
    for (size_t k = 1; k < n.inputs.size() && k < 3; ++k) {
      if (n.inputs[k].empty()) continue;
      const auto v = constant_scalar(g, n.inputs[k]);
      if (!v) return std::nullopt;
      (k == 1 ? lo : hi) = *v;
    }
  }
  if (!(lo <= hi)) return std::nullopt;  // Clip's own kernel reports it
  return Activation{"Clip", {lo, hi}};
}

// Same element type and the same known shape (equal fixed dims or the same named symbolic dims).
bool same_type(const ir::TypeInfo* a, const ir::TypeInfo* b) {
  if (!a || !b || a->kind != ir::TypeInfo::Kind::kTensor || b->kind != ir::TypeInfo::Kind::kTensor || a->elem != b->elem ||
      !a->has_shape || !b->has_shape || a->dims.size() != b->dims.size())
    return false;
  for (size_t i = 0; i < a->dims.size(); ++i) {
    const ir::Dim &x = a->dims[i], &y = b->dims[i];
    if (x.fixed() ? x.value != y.value : (x.param.empty() || x.param != y.param)) return false;
  }
  return true;
}

}  // namespace

size_t fold_conv_batchnorm(ir::Model& model) {
  ir::Graph& g = *model.graph;
  if (has_yield(g)) return 0;
  auto readers = readers_of(g);
  auto constant = [&](const std::string& name, int64_t numel) { return constant_tensor(g, name, numel); };
  auto fresh = [&](const std::string& base) {
    std::string n = base;
    for (int k = 1; g.initializer(n) || readers.count(n); ++k) n = base + "_" + std::to_string(k);
    return n;
  };
  std::vector<bool> drop(g.nodes.size(), false);
  std::map<size_t, ir::Node> replace;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& conv = g.nodes[i];
    if (!is(conv, "Conv") || conv.inputs.size() < 2 || conv.inputs.size() > 3) continue;
    const auto& rd = readers[conv.outputs[0]];
    if (rd.size() != 1 || rd[0] == SIZE_MAX) continue;
    const ir::Node& bn = g.nodes[rd[0]];
    const ir::Attribute* training = bn.attr("training_mode");
    const ir::Attribute* spatial = bn.attr("spatial");
    if (!bn.domain.empty() || bn.op_type != "BatchNormalization" || bn.inputs.size() != 5 || bn.inputs[0] != conv.outputs[0] ||
        (training && training->i != 0) || (spatial && spatial->i != 1) || bn.outputs.empty() || bn.outputs[0].empty())
      continue;
    bool extra_outputs = false;
    for (size_t k = 1; k < bn.outputs.size(); ++k) extra_outputs = extra_outputs || !bn.outputs[k].empty();
    const Tensor* w = constant(conv.inputs[1], -1);
    if (extra_outputs || !w || w->rank() < 3) continue;
    const int64_t M = w->shape()[0];
    const Tensor* b = conv.inputs.size() == 3 && !conv.inputs[2].empty() ? constant(conv.inputs[2], M) : nullptr;
    if (conv.inputs.size() == 3 && !conv.inputs[2].empty() && !b) continue;
    const Tensor *scale = constant(bn.inputs[1], M), *bias = constant(bn.inputs[2], M), *mean = constant(bn.inputs[3], M),
                 *var = constant(bn.inputs[4], M);
    if (!scale || !bias || !mean || !var) continue;
    const ir::Attribute* eps_attr = bn.attr("epsilon");
    const double eps = eps_attr ? double(eps_attr->f) : 1e-5;
    Tensor w2 = Tensor::empty(DType::kFloat32, w->shape()), b2 = Tensor::empty(DType::kFloat32, {M});
    const int64_t per = w->numel() / std::max<int64_t>(M, 1);
    for (int64_t m = 0; m < M; ++m) {
      const double s = double(scale->data<float>()[m]) / std::sqrt(double(var->data<float>()[m]) + eps);
      for (int64_t k = 0; k < per; ++k) w2.data<float>()[m * per + k] = float(double(w->data<float>()[m * per + k]) * s);
      const double b0 = b ? double(b->data<float>()[m]) : 0.0;
      b2.data<float>()[m] = float((b0 - double(mean->data<float>()[m])) * s + double(bias->data<float>()[m]));
    }
    ir::Node folded = conv;
    const std::string wn = fresh(bn.outputs[0] + "_conv_w"), bname = fresh(bn.outputs[0] + "_conv_b");
    g.initializers.emplace_back(wn, std::move(w2));
    g.initializers.emplace_back(bname, std::move(b2));
    readers.try_emplace(wn);  // reserved: the next fresh() names differ
    readers.try_emplace(bname);
    folded.inputs = {conv.inputs[0], wn, bname};
    folded.outputs = {bn.outputs[0]};
    drop[i] = drop[rd[0]] = true;
    replace[rd[0]] = std::move(folded);
  }
  if (replace.empty()) return 0;
  const size_t folds = replace.size();
  ir::splice_nodes(g, std::move(replace), drop);
  // Initializers only the folded nodes read (the original weights and statistics) go.
  std::set<std::string> read;
  for (const auto& n : g.nodes) read.insert(n.inputs.begin(), n.inputs.end());
  for (const auto& n : g.nodes)
    for (const auto& v : ir::implicit_inputs(n)) read.insert(v);
  for (const auto& o : g.outputs) read.insert(o.name);
  std::erase_if(g.initializers, [&](const auto& kv) { return !read.count(kv.first) && !g.is_input(kv.first); });
  return folds;
}

size_t fuse_conv_activations(ir::Model& model) {
  ir::Graph& g = *model.graph;
  if (has_yield(g)) return 0;
  // Types of a copy (inference appends value_info, which the session's model need not carry).
  ir::Model typed = model;
  typed.graph = std::make_shared<ir::Graph>(g);
  ir::infer_types(typed);
  std::unordered_map<std::string, const ir::TypeInfo*> types;
  for (const auto* list : {&typed.graph->inputs, &typed.graph->outputs, &typed.graph->value_info})
    for (const auto& vi : *list) types.emplace(vi.name, &vi.type);
  std::unordered_map<std::string, ir::TypeInfo> init_types;  // initializers that are no graph input
  for (const auto& [name, t] : g.initializers)
    if (!types.count(name)) types.emplace(name, &(init_types[name] = ir::TypeInfo::tensor(t.dtype(), t.shape())));
  auto type_of = [&](const std::string& v) -> const ir::TypeInfo* {
    auto it = types.find(v);
    return it == types.end() ? nullptr : it->second;
  };
  const auto readers = readers_of(g);
  // The one node reading `v`, if exactly one node reads it once and it is no graph output.
  auto sole_reader = [&](const std::string& v) -> std::optional<size_t> {
    auto it = readers.find(v);
    if (it == readers.end() || it->second.size() != 1 || it->second[0] == SIZE_MAX) return std::nullopt;
    return it->second[0];
  };
  const int64_t opset = model.opset("");
  std::vector<bool> drop(g.nodes.size(), false);
  std::map<size_t, ir::Node> replace;  // index of the activation node -> the fused node
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& conv = g.nodes[i];
    if (!is(conv, "Conv") || conv.inputs.size() < 2 || conv.inputs.size() > 3 || drop[i]) continue;
    const auto next = sole_reader(conv.outputs[0]);
    if (!next) continue;
    size_t act_i = *next;
    std::string z;
    const ir::Node& add = g.nodes[*next];
    if (is(add, "Add") && add.inputs.size() == 2) {
      z = add.inputs[0] == conv.outputs[0] ? add.inputs[1] : add.inputs[0];
      const auto after = sole_reader(add.outputs[0]);
      if (!after || !same_type(type_of(z), type_of(conv.outputs[0])) || !same_type(type_of(add.outputs[0]), type_of(z)))
        continue;
      act_i = *after;
    }
    const auto act = activation_of(g, g.nodes[act_i], opset);
    if (!act || g.nodes[act_i].inputs[0] != (z.empty() ? conv.outputs[0] : add.outputs[0]) || drop[*next] || drop[act_i])
      continue;  // (an Add both of whose operands are convolutions is fused with the first)
    ir::Node fused;
    fused.name = conv.name;
    fused.op_type = "FusedConv";
    fused.domain = ops::kMicrosoftDomain;
    fused.inputs = conv.inputs;
    if (!z.empty()) {
      fused.inputs.resize(3);
      fused.inputs.push_back(z);
    }
    fused.outputs = g.nodes[act_i].outputs;
    fused.attrs = conv.attrs;
    ir::Attribute name;
    name.name = "activation";
    name.type = ir::AttrType::kString;
    name.s = act->name;
    fused.attrs.push_back(name);
    if (!act->params.empty()) {
      ir::Attribute params;
      params.name = "activation_params";
      params.type = ir::AttrType::kFloats;
      params.floats = act->params;
      fused.attrs.push_back(params);
    }
    drop[i] = drop[*next] = drop[act_i] = true;
    replace[act_i] = std::move(fused);
  }
  if (replace.empty()) return 0;
  const size_t fused = replace.size();
  ir::splice_nodes(g, std::move(replace), drop);
  if (model.opset(ops::kMicrosoftDomain) == 0) model.opsets[ops::kMicrosoftDomain] = 1;
  return fused;
}

}  // namespace onnxtrain::runtime
