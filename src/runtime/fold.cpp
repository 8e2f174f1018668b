#include "runtime/fold.h"

#include <unordered_map>
#include <unordered_set>

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

}  // namespace onnxtrain::runtime
