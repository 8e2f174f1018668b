// Model summary for `onnxtrain inspect`.
#include "onnxtrain/inspect.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "api/session_impl.h"
#include "autodiff/builder.h"
#include "ir/infer.h"
#include "ir/onnx_io.h"
#include "train/training_graph.h"

namespace onnxtrain {

namespace {

ModelSummary summarize(const ir::Model& m) {
  ModelSummary s;
  const ir::Graph& g = *m.graph;
  s.ir_version = m.ir_version;
  s.producer_name = m.producer_name;
  s.producer_version = m.producer_version;
  s.graph_name = g.name;
  for (const auto& [d, v] : m.opsets) s.opsets.emplace_back(d, v);
  for (const auto& v : g.inputs)
    if (!g.initializer(v.name)) s.inputs.push_back(node_arg_of(v));
  for (const auto& v : g.outputs) s.outputs.push_back(node_arg_of(v));
  const auto trainable = train::trainable_initializers(m);
  const std::set<std::string> train_set(trainable.begin(), trainable.end());
  for (const auto& [n, t] : g.initializers) {
    InitializerInfo i;
    i.name = n;
    i.dtype = t.dtype();
    i.shape = t.shape();
    i.numel = t.numel();
    if (t.dtype() == DType::kString) {
      for (int64_t k = 0; k < t.numel(); ++k) i.bytes += t.data<std::string>()[k].size();
    } else {
      i.bytes = t.nbytes();
    }
    i.trainable = train_set.count(n) > 0;
    s.initializers.push_back(i);
  }
  std::map<std::pair<std::string, std::string>, int64_t> hist;
  std::function<void(const ir::Graph&)> walk = [&](const ir::Graph& sg) {
    for (const auto& n : sg.nodes) {
      ++hist[{n.domain, n.op_type}];
      ++s.node_count;
      for (const ir::Graph* sub : n.subgraphs()) walk(*sub);
    }
  };
  walk(g);
  s.missing_gradient_rules = autodiff::missing_rules(m);
  const std::set<std::string> missing(s.missing_gradient_rules.begin(), s.missing_gradient_rules.end());
  for (const auto& [key, count] : hist) {
    OperatorCount oc;
    oc.domain = key.first;
    oc.op_type = key.second;
    oc.count = count;
    oc.has_gradient_rule = !missing.count(key.first.empty() ? key.second : key.first + "." + key.second);
    s.operators.push_back(oc);
  }
  std::stable_sort(s.operators.begin(), s.operators.end(),
                   [](const OperatorCount& a, const OperatorCount& b) { return a.count > b.count; });
  return s;
}

}  // namespace

ModelSummary summarize_model(const std::string& path) { return summarize(ir::load_model_file(path)); }

ModelSummary summarize_model_bytes(const std::string& model_bytes, const std::string& base_dir) {
  return summarize(ir::load_model_bytes(model_bytes.data(), model_bytes.size(), base_dir));
}

std::string infer_model_types(const std::string& model_bytes) {
  ir::Model m = ir::load_model_bytes(model_bytes.data(), model_bytes.size());
  ir::infer_types(m);
  return ir::serialize_model(m);
}

}  // namespace onnxtrain
