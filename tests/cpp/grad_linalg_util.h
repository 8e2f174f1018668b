// Shared by the gradient tests of the linear algebra, convolution and pooling rules: the
// finite-difference check in default and portable mode, and a look at which operators the
// gradient graph uses.
#pragma once

#include <set>
#include <string>

#include "autodiff/builder.h"
#include "grad_check.h"
#include "window_test_util.h"

namespace ot_test {

/// check_gradient in default mode and in portable mode.
inline void expect_gradient(GradCheck spec, const std::string& what) {
  for (bool portable : {false, true}) {
    spec.portable = portable;
    EXPECT_TRUE(check_gradient(spec)) << what << (portable ? " (portable)" : " (default)");
  }
}

/// Float64 tensor of distinct values (no ties, gaps far above the finite-difference step).
inline Tensor distinct_tensor(const Shape& shape, std::mt19937& rng) {
  const int64_t n = onnxtrain::shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i) * 0.05 - double(n) * 0.025;
  std::shuffle(v.begin(), v.end(), rng);
  for (auto& e : v) e += std::uniform_real_distribution<double>(0, 0.01)(rng);
  return from_double(DType::kFloat64, shape, v);
}

/// Model of one node `op` on graph inputs x0, x1, ... (an unnamed input where `inputs[i].name` is
/// empty) with loss = sum(y0).
inline ir::Model one_node_model(const std::string& op, const std::vector<ir::ValueInfo>& inputs,
                                const std::vector<ir::Attribute>& attrs, size_t num_outputs, int64_t opset) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = opset;
  m.graph = std::make_shared<ir::Graph>();
  ir::Node n;
  n.op_type = op;
  n.name = "node_" + op;
  n.attrs = attrs;
  for (const auto& v : inputs) {
    n.inputs.push_back(v.name);
    if (!v.name.empty()) m.graph->inputs.push_back(v);
  }
  for (size_t k = 0; k < num_outputs; ++k) n.outputs.push_back("y" + std::to_string(k));
  m.graph->nodes.push_back(n);
  ir::Node red;
  red.op_type = "ReduceSum";
  red.name = "loss_sum";
  red.inputs = {"y0"};
  red.outputs = {"loss"};
  red.attrs = {attr_int("keepdims", 0)};
  m.graph->nodes.push_back(red);
  m.graph->outputs.push_back(ir::ValueInfo{"loss", {}, ""});
  return m;
}

/// "domain:op" of every node of the gradient graph of sum(op(inputs)) with respect to every input.
inline std::set<std::string> gradient_ops(const GradCheck& s, bool portable) {
  std::vector<ir::ValueInfo> ins;
  std::vector<std::string> xs;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const std::string name = s.inputs[i].defined() ? "x" + std::to_string(i) : "";
    ins.push_back(ir::ValueInfo{name, name.empty() ? ir::TypeInfo{} : ir::TypeInfo::tensor(s.inputs[i].dtype(), s.inputs[i].shape()), ""});
    if (!name.empty()) xs.push_back(name);
  }
  onnxtrain::autodiff::BuildOptions bo;
  bo.portable = portable;
  ir::Model gm = onnxtrain::autodiff::build_gradient_model(one_node_model(s.op, ins, s.attrs, s.num_outputs, s.opset),
                                                          {"loss"}, xs, "loss", bo);
  std::set<std::string> ops;
  for (const auto& node : gm.graph->nodes) ops.insert(node.domain + ":" + node.op_type);
  return ops;
}

/// True when the gradient graph uses some com.onnxtrain operator.
inline bool uses_custom(const std::set<std::string>& ops) {
  for (const auto& o : ops)
    if (o.rfind("com.onnxtrain:", 0) == 0) return true;
  return false;
}

}  // namespace ot_test
