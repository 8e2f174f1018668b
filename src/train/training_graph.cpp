#include "train/training_graph.h"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "onnxtrain/error.h"

namespace onnxtrain::train {

namespace {

bool bn_training(const ir::Node& n, int64_t opset) {
  if (n.op_type != "BatchNormalization" || !n.domain.empty()) return false;
  if (opset >= 14) {
    const ir::Attribute* a = n.attr("training_mode");
    return a && a->type == ir::AttrType::kInt && a->i != 0;
  }
  return false;
}

// Inputs of operators that are shapes, indices, axes or flags (never trained).
bool non_weight_input(const ir::Node& n, size_t i) {
  static const std::unordered_map<std::string, std::vector<size_t>> table = {
      {"Reshape", {1}}, {"Expand", {1}}, {"Tile", {1}}, {"Slice", {1, 2, 3, 4}}, {"Pad", {1, 3}},
      {"Squeeze", {1}}, {"Unsqueeze", {1}}, {"ReduceSum", {1}}, {"Split", {1}}, {"ConstantOfShape", {0}},
      {"Resize", {1, 2, 3}}, {"Gather", {1}}, {"GatherElements", {1}}, {"GatherND", {1}},
      {"ScatterElements", {1}}, {"ScatterND", {1}}, {"OneHot", {0, 1}}, {"TopK", {1}}, {"CumSum", {1}},
      {"Range", {0, 1, 2}}, {"Trilu", {1}}, {"Dropout", {1, 2}}, {"Clip", {1, 2}},
      {"BatchNormalization", {3, 4}}, {"SoftmaxCrossEntropyLoss", {1}}, {"NegativeLogLikelihoodLoss", {1}},
      {"Where", {0}}, {"LSTM", {4}}, {"GRU", {4}}, {"RNN", {4}}, {"Loop", {0, 1}}, {"If", {0}}};
  auto it = table.find(n.op_type);
  if (it == table.end()) return false;
  return std::find(it->second.begin(), it->second.end(), i) != it->second.end();
}

}  // namespace

std::vector<RunningStat> batchnorm_running_stats(ir::Model& m) {
  std::vector<RunningStat> r;
  const int64_t opset = m.opset("");
  std::set<std::string> used;
  for (auto& n : m.graph->nodes)
    for (auto& o : n.outputs) used.insert(o);
  int counter = 0;
  for (auto& n : m.graph->nodes) {
    if (!bn_training(n, opset)) continue;
    if (n.inputs.size() < 5) continue;
    n.outputs.resize(std::max<size_t>(n.outputs.size(), 3));
    for (size_t k = 1; k <= 2; ++k) {
      if (n.outputs[k].empty()) {
        std::string name;
        do {
          name = "__bn_running_" + std::to_string(counter++);
        } while (used.count(name));
        used.insert(name);
        n.outputs[k] = name;
      }
      if (m.graph->initializer(n.inputs[k + 2])) r.push_back({n.outputs[k], n.inputs[k + 2]});
    }
  }
  return r;
}

std::vector<std::string> trainable_initializers(const ir::Model& m) {
  std::unordered_set<std::string> non_weight, weight_use;
  std::function<void(const ir::Graph&)> walk = [&](const ir::Graph& g) {
    for (const auto& n : g.nodes) {
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i].empty()) continue;
        if (non_weight_input(n, i)) non_weight.insert(n.inputs[i]);
        else weight_use.insert(n.inputs[i]);
      }
      for (const ir::Graph* sg : n.subgraphs()) walk(*sg);
    }
  };
  walk(*m.graph);
  std::vector<std::string> r;
  for (const auto& [n, t] : m.graph->initializers) {
    if (!dtype_is_float(t.dtype())) continue;
    if (non_weight.count(n) && !weight_use.count(n)) continue;
    if (!weight_use.count(n)) continue;  // unused initializer
    r.push_back(n);
  }
  return r;
}

ir::Model inference_graph(const ir::Model& m, const std::vector<std::string>& outputs_in, bool drop_loss,
                          const std::string& loss) {
  ir::Model out = m;
  out.graph = std::make_shared<ir::Graph>(*m.graph);
  ir::Graph& g = *out.graph;
  const int64_t opset = m.opset("");
  // Inference behaviour.
  for (auto& n : g.nodes) {
    if (bn_training(n, opset)) {
      n.attr("training_mode")->i = 0;
      n.outputs.resize(1);
    }
    if (n.op_type == "Dropout" && n.domain.empty() && opset >= 12 && n.inputs.size() >= 3) n.inputs[2] = "";
  }
  // Outputs.
  std::vector<std::string> outputs = outputs_in;
  if (outputs.empty()) {
    std::unordered_set<std::string> loss_only_inputs;
    if (drop_loss && !loss.empty()) {
      // Inputs that only the loss needs (labels, sample weights): not needed for predictions.
      std::unordered_map<std::string, size_t> producer;
      for (size_t i = 0; i < g.nodes.size(); ++i)
        for (const auto& o : g.nodes[i].outputs) producer[o] = i;
      auto ancestors_inputs = [&](const std::string& v) {
        std::unordered_set<std::string> seen, ins;
        std::vector<std::string> st{v};
        while (!st.empty()) {
          std::string x = st.back();
          st.pop_back();
          if (!seen.insert(x).second) continue;
          if (g.is_input(x) && !g.initializer(x)) ins.insert(x);
          auto it = producer.find(x);
          if (it == producer.end()) continue;
          for (const auto& i : g.nodes[it->second].inputs)
            if (!i.empty()) st.push_back(i);
          for (const auto& f : ir::implicit_inputs(g.nodes[it->second])) st.push_back(f);
        }
        return ins;
      };
      std::unordered_set<std::string> needed_by_others;
      for (const auto& o : g.outputs)
        if (o.name != loss)
          for (const auto& i : ancestors_inputs(o.name)) needed_by_others.insert(i);
      for (const auto& i : ancestors_inputs(loss))
        if (!needed_by_others.count(i)) loss_only_inputs.insert(i);
      for (const auto& o : g.outputs) {
        if (o.name == loss) continue;
        bool uses_loss_input = false;
        for (const auto& i : ancestors_inputs(o.name)) uses_loss_input |= loss_only_inputs.count(i) > 0;
        if (!uses_loss_input) outputs.push_back(o.name);
      }
      if (outputs.empty())
        throw_error<InvalidArgument>("the model has no output besides the loss '", loss,
                                     "': name the outputs to export");
    } else {
      for (const auto& o : g.outputs) outputs.push_back(o.name);
    }
  }
  std::unordered_set<std::string> defined;
  for (const auto& v : g.inputs) defined.insert(v.name);
  for (const auto& [n, t] : g.initializers) defined.insert(n);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) defined.insert(o);
  std::vector<ir::ValueInfo> new_outputs;
  for (const auto& o : outputs) {
    if (!defined.count(o)) throw_error<InvalidArgument>("export: '", o, "' is not a value of the model");
    ir::ValueInfo vi;
    vi.name = o;
    for (const auto& v : g.outputs)
      if (v.name == o) vi = v;
    for (const auto& v : g.value_info)
      if (v.name == o && vi.type.kind == ir::TypeInfo::Kind::kUnknown) vi = v;
    new_outputs.push_back(vi);
  }
  g.outputs = new_outputs;
  // Prune.
  std::unordered_set<std::string> needed(outputs.begin(), outputs.end());
  std::vector<bool> keep(g.nodes.size(), false);
  const auto order = ir::topological_order(g);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Node& n = g.nodes[*it];
    bool k = false;
    for (const auto& o : n.outputs) k |= !o.empty() && needed.count(o);
    if (!k) continue;
    keep[*it] = true;
    for (const auto& i : n.inputs)
      if (!i.empty()) needed.insert(i);
    for (const auto& f : ir::implicit_inputs(n)) needed.insert(f);
  }
  std::vector<ir::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) nodes.push_back(g.nodes[i]);
  g.nodes = std::move(nodes);
  std::vector<ir::ValueInfo> inputs;
  for (const auto& v : g.inputs)
    if (needed.count(v.name)) inputs.push_back(v);
  g.inputs = inputs;
  std::vector<std::pair<std::string, Tensor>> inits;
  for (const auto& [n, t] : g.initializers)
    if (needed.count(n)) inits.emplace_back(n, t);
  g.initializers = inits;
  std::vector<ir::ValueInfo> vis;
  for (const auto& v : g.value_info)
    if (needed.count(v.name)) vis.push_back(v);
  g.value_info = vis;
  return out;
}

}  // namespace onnxtrain::train
