// Helpers shared by test_grad_shape.cpp and test_grad_index.cpp: finite-difference checks in
// several builder modes, a check that portable gradients use standard operators only, and a naive
// reference for the backward kernels (the adjoint of a linear operator, column by column).
#pragma once

#include <string>
#include <vector>

#include "autodiff/builder.h"
#include "grad_check.h"
#include "movement_test_util.h"

namespace ot_test {

inline Tensor f64(const Shape& s, std::mt19937& rng) { return random_tensor(DType::kFloat64, s, rng, -1, 1); }
inline Tensor i64s(const Shape& s, const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(s, v); }

inline GradCheck spec(const std::string& op, std::vector<Tensor> inputs, std::vector<ir::Attribute> attrs, int64_t opset,
                      uint32_t seed, std::vector<size_t> wrt = {}) {
  GradCheck s;
  s.op = op;
  s.inputs = std::move(inputs);
  s.attrs = std::move(attrs);
  s.opset = opset;
  s.seed = seed;
  s.wrt = std::move(wrt);
  return s;
}

/// Operators of the com.onnxtrain domain in the gradient of `spec`'s node (loss = sum(y_0)) with
/// respect to its float inputs (the others are initializers).
inline std::vector<std::string> custom_ops(const GradCheck& spec) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = spec.opset;
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  ir::Node n;
  n.op_type = spec.op;
  n.name = "node";
  n.attrs = spec.attrs;
  std::vector<std::string> xs;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    if (!spec.inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    n.inputs.push_back(name);
    const bool wrt = spec.wrt.empty() ? onnxtrain::dtype_is_float(spec.inputs[i].dtype())
                                      : std::count(spec.wrt.begin(), spec.wrt.end(), i) > 0;
    if (wrt) {
      ir::TypeInfo t = ir::TypeInfo::tensor(spec.inputs[i].dtype(), spec.inputs[i].shape());
      if (spec.symbolic_shapes)
        for (size_t d = 0; d < t.dims.size(); ++d) t.dims[d] = ir::Dim{-1, name + "_d" + std::to_string(d)};
      g.inputs.push_back(ir::ValueInfo{name, t, ""});
      xs.push_back(name);
    } else {
      g.initializers.emplace_back(name, spec.inputs[i]);
    }
  }
  for (size_t k = 0; k < spec.num_outputs; ++k) n.outputs.push_back("y" + std::to_string(k));
  g.nodes.push_back(n);
  ir::Node red;
  red.op_type = "ReduceSum";
  red.name = "loss_sum";
  red.inputs = {"y0"};
  red.outputs = {"loss"};
  red.attrs = {attr_int("keepdims", 0)};
  g.nodes.push_back(red);
  g.outputs.push_back(ir::ValueInfo{"loss", {}, ""});
  onnxtrain::autodiff::BuildOptions bo;
  bo.portable = spec.portable;
  ir::Model gm = onnxtrain::autodiff::build_gradient_model(m, {"loss"}, xs, "loss", bo);
  std::vector<std::string> r;
  for (const auto& node : gm.graph->nodes)
    if (node.domain == "com.onnxtrain") r.push_back(node.op_type);
  return r;
}

/// Finite-difference check of `spec` as given, and with symbolic input shapes when asked.
inline void expect_gradient(const GradCheck& spec, bool symbolic = false) {
  EXPECT_TRUE(check_gradient(spec)) << (spec.portable ? "portable" : "default");
  if (symbolic) {
    GradCheck s = spec;
    s.symbolic_shapes = true;
    EXPECT_TRUE(check_gradient(s)) << "symbolic shapes" << (spec.portable ? ", portable" : "");
  }
}

/// Default mode, then portable mode, whose gradient must hold standard operators only. (The
/// harness's loss needs run-time unbroadcasting with symbolic shapes: portable from opset 13.)
inline void expect_gradient_both(const GradCheck& spec, bool symbolic = false, bool portable_symbolic = true) {
  expect_gradient(spec, symbolic);
  GradCheck p = spec;
  p.portable = true;
  symbolic = symbolic && portable_symbolic && spec.opset >= 13;
  expect_gradient(p, symbolic);
  for (bool sym : {false, symbolic}) {
    p.symbolic_shapes = sym;
    EXPECT_EQ(custom_ops(p), std::vector<std::string>{}) << spec.op << " portable, symbolic " << sym;
  }
}

inline RunOptions opset_options(int64_t opset) {
  RunOptions o;
  o.opset = opset;
  return o;
}

/// Naive adjoint of X -> op(X, rest...) (affine in X): dX[j] = <op(e_j, rest...) - op(0, rest...), dY>,
/// from the forward kernel run on every unit tensor e_j of X's shape (double precision).
inline std::vector<double> adjoint_reference(const std::string& op, const Shape& x_shape, std::vector<Tensor> inputs,
                                             const std::vector<ir::Attribute>& attrs, const Tensor& dy,
                                             int64_t opset = 17) {
  const int64_t n = onnxtrain::shape_numel(x_shape);
  const std::vector<double> g = to_double(dy);
  std::vector<double> dx(size_t(n), 0.0), e(size_t(n), 0.0);
  const RunOptions o = opset_options(opset);
  inputs[0] = from_double(DType::kFloat64, x_shape, e);
  const std::vector<double> y0 = to_double(run_node(op, inputs, attrs, o)[0]);
  for (int64_t j = 0; j < n; ++j) {
    e[size_t(j)] = 1.0;
    inputs[0] = from_double(DType::kFloat64, x_shape, e);
    e[size_t(j)] = 0.0;
    const std::vector<double> y = to_double(run_node(op, inputs, attrs, o)[0]);
    for (size_t i = 0; i < y.size(); ++i) dx[size_t(j)] += (y[i] - y0[i]) * g[i];
  }
  return dx;
}

/// Runs com.onnxtrain.<op> on `inputs`.
inline Tensor run_grad_kernel(const std::string& op, const std::vector<Tensor>& inputs,
                              const std::vector<ir::Attribute>& attrs = {}, int threads = 1) {
  RunOptions o;
  o.domain = "com.onnxtrain";
  o.threads = threads;
  return run_node(op, inputs, attrs, o)[0];
}

}  // namespace ot_test
