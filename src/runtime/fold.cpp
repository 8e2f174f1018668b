#include "runtime/fold.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/infer.h"
#include "ir/splice.h"
#include "runtime/executor.h"

namespace onnxtrain::runtime {

size_t fold_constant_nodes(ir::Model& model, const ExecOptions& options) {
  ir::Graph& g = *model.graph;
  // Looked up per node input below: maps rather than the graph's linear scans.
  std::unordered_set<std::string> graph_inputs;
  for (const auto& vi : g.inputs) graph_inputs.insert(vi.name);
  std::unordered_map<std::string, const Tensor*> init_of;
  std::unordered_set<std::string> constant;
  for (const auto& [name, t] : g.initializers) {
    init_of.emplace(name, &t);
    if (!graph_inputs.count(name)) constant.insert(name);
  }
  // Candidates in topological order: every input constant, no subgraph.
  std::vector<size_t> order = ir::topological_order(g);
  std::vector<size_t> candidates;
  for (size_t idx : order) {
    const ir::Node& n = g.nodes[idx];
    if (!n.subgraphs().empty()) continue;
    bool all_const = true;
    for (const auto& in : n.inputs) all_const = all_const && (in.empty() || constant.count(in));
    if (!all_const) continue;
    candidates.push_back(idx);
    for (const auto& o : n.outputs)
      if (!o.empty()) constant.insert(o);
  }
  if (candidates.empty()) return 0;

  // Evaluate them in a graph of their own; the plan tells which it folded (deterministic ones).
  auto sub = std::make_shared<ir::Graph>();
  sub->name = g.name + "_constants";
  std::unordered_set<std::string> used_inits;
  for (size_t idx : candidates) {
    const ir::Node& n = g.nodes[idx];
    sub->nodes.push_back(n);
    for (const auto& in : n.inputs)
      if (auto it = init_of.find(in); it != init_of.end() && used_inits.insert(in).second)
        sub->initializers.emplace_back(in, *it->second);
    for (const auto& o : n.outputs)
      if (!o.empty()) sub->outputs.push_back(ir::ValueInfo{o, {}, {}});
  }
  std::vector<Value> values;
  std::unordered_set<const ir::Node*> stepped;
  try {
    ExecOptions eo = options;
    eo.fold_constants = true;
    eo.subgraphs = executor_subgraphs();
    GraphExecutor ex(sub, model.opsets, eo);
    values = ex.run({}, {});
    for (const ir::Node* n : ex.last_step_nodes()) stepped.insert(n);
  } catch (const std::exception&) {
    return 0;
  }
  std::unordered_map<std::string, size_t> value_of;
  for (size_t i = 0; i < sub->outputs.size(); ++i) value_of[sub->outputs[i].name] = i;
  std::unordered_set<std::string> graph_outputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);

  std::vector<bool> remove(g.nodes.size(), false);
  for (size_t k = 0; k < candidates.size(); ++k) {
    const ir::Node& n = g.nodes[candidates[k]];
    if (stepped.count(&sub->nodes[k])) continue;
    bool ok = true;
    for (const auto& o : n.outputs)
      if (!o.empty()) ok = ok && !graph_outputs.count(o) && values[value_of.at(o)].kind == Value::Kind::kTensor;
    remove[candidates[k]] = ok;
  }
  // Values still read: by the nodes that stay (their subgraphs included) and as graph outputs.
  std::unordered_set<std::string> read(graph_outputs);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (remove[i]) continue;
    for (const auto& in : g.nodes[i].inputs) read.insert(in);
    for (const auto& in : ir::implicit_inputs(g.nodes[i])) read.insert(in);
  }
  size_t removed = 0;
  for (bool r : remove) removed += r;
  if (removed == 0) return 0;
  std::vector<std::pair<std::string, Tensor>> added;
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!remove[i]) {
      kept.push_back(std::move(g.nodes[i]));
      continue;
    }
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty() && read.count(o)) added.emplace_back(o, values[value_of.at(o)].tensor);
  }
  g.nodes = std::move(kept);
  std::vector<std::pair<std::string, Tensor>> inits;
  for (auto& [name, t] : g.initializers)
    if (read.count(name) || graph_inputs.count(name)) inits.emplace_back(name, std::move(t));
  for (auto& a : added) inits.push_back(std::move(a));
  g.initializers = std::move(inits);
  return removed;
}

size_t fold_static_shapes(ir::Model& model) {
  ir::Graph& g = *model.graph;
  if (ir::has_yield(g)) return 0;
  bool any = false;
  for (const ir::Node& n : g.nodes) any = any || (n.domain.empty() && n.op_type == "Shape");
  if (!any) return 0;
  // Types from the graph's inputs and initializers only.
  ir::Model typed = model;
  typed.graph = std::make_shared<ir::Graph>(g);
  typed.graph->value_info.clear();
  for (auto& o : typed.graph->outputs) o.type = ir::TypeInfo{};
  ir::infer_types(typed);
  std::unordered_map<std::string, const ir::TypeInfo*> type_of;
  for (const auto* list : {&typed.graph->inputs, &typed.graph->value_info, &typed.graph->outputs})
    for (const auto& vi : *list) type_of.emplace(vi.name, &vi.type);
  std::unordered_set<std::string> graph_outputs, graph_inputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  for (const auto& i : g.inputs) graph_inputs.insert(i.name);
  std::vector<ir::Node> kept;
  size_t folded = 0;
  for (ir::Node& n : g.nodes) {
    std::optional<std::vector<int64_t>> dims;
    if (n.domain.empty() && n.op_type == "Shape" && n.inputs.size() == 1 && n.outputs.size() == 1 &&
        !n.outputs[0].empty() && !graph_outputs.count(n.outputs[0]) && !graph_inputs.count(n.outputs[0])) {
      auto it = type_of.find(n.inputs[0]);
      const ir::TypeInfo* t = it == type_of.end() ? nullptr : it->second;
      if (t && t->kind == ir::TypeInfo::Kind::kTensor && t->has_shape) {
        dims.emplace();
        for (const ir::Dim& d : t->dims) {
          if (!d.fixed()) {
            dims.reset();
            break;
          }
          dims->push_back(d.value);
        }
      }
    }
    if (!dims) {
      kept.push_back(std::move(n));
      continue;
    }
    // Shape-15's start / end: negative counts from the back, both clamped to [0, rank].
    const int64_t rank = int64_t(dims->size());
    auto bound = [&](const char* name, int64_t dflt) {
      const ir::Attribute* a = n.attr(name);
      int64_t v = a ? a->i : dflt;
      if (v < 0) v += rank;
      return std::clamp<int64_t>(v, 0, rank);
    };
    const int64_t b = bound("start", 0), e = std::max(b, bound("end", rank));
    Tensor shape = Tensor::empty(DType::kInt64, {e - b});
    std::copy(dims->begin() + b, dims->begin() + e, shape.data<int64_t>());
    g.initializers.emplace_back(n.outputs[0], std::move(shape));
    ++folded;
  }
  g.nodes = std::move(kept);
  return folded;
}

}  // namespace onnxtrain::runtime
