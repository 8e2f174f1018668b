#include "ir/graph_writer.h"

#include <functional>

namespace onnxtrain::ir {

GraphWriter::GraphWriter(Model& m, Graph& g) : m_(m), g_(g), opset_(m.opset("")) {
  std::function<void(const Graph&)> walk = [&](const Graph& gr) {
    for (const auto& v : gr.inputs) names_.insert(v.name);
    for (const auto& [n, t] : gr.initializers) names_.insert(n);
    for (const auto& n : gr.nodes) {
      for (const auto& o : n.outputs) names_.insert(o);
      names_.insert(n.name);
      for (const Graph* sg : n.subgraphs()) walk(*sg);
    }
  };
  walk(g);
}

std::string GraphWriter::fresh(const std::string& base) {
  if (names_.insert(base).second) return base;
  for (;;) {
    std::string n = base + "_" + std::to_string(++counter_);
    if (names_.insert(n).second) return n;
  }
}

std::vector<std::string> GraphWriter::add_n(const std::string& op, std::vector<std::string> inputs, size_t n,
                                            std::vector<Attribute> attrs, const std::string& hint) {
  Node node;
  node.op_type = op;
  node.name = fresh((hint.empty() ? op : hint) + "_node");
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < n; ++i) node.outputs.push_back(fresh(hint.empty() ? op : hint));
  std::vector<std::string> outs = node.outputs;
  g_.nodes.push_back(std::move(node));
  return outs;
}

std::string GraphWriter::add(const std::string& op, std::vector<std::string> inputs, std::vector<Attribute> attrs,
                             const std::string& hint) {
  return add_n(op, std::move(inputs), 1, std::move(attrs), hint)[0];
}

std::string GraphWriter::constant(const Tensor& t, const std::string& hint) {
  std::string n = fresh(hint);
  g_.initializers.emplace_back(n, t);
  return n;
}

std::string GraphWriter::scalar(DType dt, double v, const std::string& hint) {
  switch (dt) {
    case DType::kFloat64: return constant(Tensor::scalar<double>(v), hint);
    case DType::kFloat16: return constant(Tensor::scalar<float16>(float16(float(v))), hint);
    case DType::kInt64: return constant(Tensor::scalar<int64_t>(int64_t(v)), hint);
    default: return constant(Tensor::scalar<float>(float(v)), hint);
  }
}

std::string GraphWriter::ints(const std::vector<int64_t>& v) {
  return constant(Tensor::from_vector<int64_t>({int64_t(v.size())}, v), "axes");
}

std::string GraphWriter::reduce_all(const std::string& op, const std::string& v) {
  return add(op, {v}, {int_attr("keepdims", 0)});
}

std::string GraphWriter::reduce_sum(const std::string& v, const std::vector<int64_t>& axes, bool keepdims) {
  if (opset_ >= 13) return add("ReduceSum", {v, ints(axes)}, {int_attr("keepdims", keepdims)});
  return add("ReduceSum", {v}, {ints_attr("axes", axes), int_attr("keepdims", keepdims)});
}

Attribute GraphWriter::int_attr(const std::string& name, int64_t v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::kInt;
  a.i = v;
  return a;
}
Attribute GraphWriter::float_attr(const std::string& name, float v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::kFloat;
  a.f = v;
  return a;
}
Attribute GraphWriter::ints_attr(const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute GraphWriter::string_attr(const std::string& name, const std::string& v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::kString;
  a.s = v;
  return a;
}

}  // namespace onnxtrain::ir
