#include "grad_check.h"

#include "test_provider.h"

#include <cmath>
#include <random>
#include <sstream>

#include "autodiff/builder.h"
#include "autodiff/rule_context.h"
#include "ir/onnx_io.h"
#include "runtime/executor.h"

namespace ot_test {

using namespace onnxtrain;

ir::Model forward_model(const GradCheck& s, const std::vector<size_t>& wrt, const std::vector<Tensor>& weights) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = s.opset;
  if (!s.domain.empty()) m.opsets[s.domain] = 1;
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.name = "gradcheck_" + s.op;
  ir::Node n;
  n.op_type = s.op;
  n.domain = s.domain;
  n.name = "node_" + s.op;
  n.attrs = s.attrs;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    if (!s.inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    if (std::count(wrt.begin(), wrt.end(), i)) {
      ir::TypeInfo t = ir::TypeInfo::tensor(s.inputs[i].dtype(), s.inputs[i].shape());
      if (s.symbolic_shapes)
        for (size_t d = 0; d < t.dims.size(); ++d) t.dims[d] = ir::Dim{-1, name + "_d" + std::to_string(d)};
      g.inputs.push_back(ir::ValueInfo{name, t, ""});
    } else {
      g.initializers.emplace_back(name, s.inputs[i]);
    }
  }
  for (size_t k = 0; k < s.num_outputs; ++k) n.outputs.push_back("y" + std::to_string(k));
  g.nodes.push_back(n);
  std::vector<std::string> terms;
  for (size_t j = 0; j < s.outputs_in_loss.size(); ++j) {
    const std::string y = "y" + std::to_string(s.outputs_in_loss[j]);
    const std::string r = "r" + std::to_string(j);
    g.initializers.emplace_back(r, weights[j]);
    ir::Node mul;
    mul.op_type = "Mul";
    mul.name = "loss_mul" + std::to_string(j);
    mul.inputs = {y, r};
    mul.outputs = {"p" + std::to_string(j)};
    g.nodes.push_back(mul);
    ir::Node red;
    red.op_type = "ReduceSum";
    red.name = "loss_sum" + std::to_string(j);
    red.inputs = {"p" + std::to_string(j)};
    red.outputs = {"t" + std::to_string(j)};
    red.attrs = {attr_int("keepdims", 0)};
    g.nodes.push_back(red);
    terms.push_back("t" + std::to_string(j));
  }
  if (terms.size() == 1) {
    g.nodes.back().outputs = {"loss"};
  } else {
    ir::Node sum;
    sum.op_type = "Sum";
    sum.name = "loss_total";
    sum.inputs = terms;
    sum.outputs = {"loss"};
    g.nodes.push_back(sum);
  }
  g.outputs.push_back(ir::ValueInfo{"loss", {}, ""});
  return m;
}

namespace {

double run_loss(runtime::GraphExecutor& ex, const std::vector<Tensor>& feeds) {
  std::vector<Value> vals;
  for (const auto& t : feeds) vals.push_back(Value::of(t));
  std::vector<const Value*> ptrs;
  for (auto& v : vals) ptrs.push_back(&v);
  auto out = ex.run(ptrs);
  return to_double(out[0].tensor)[0];
}

}  // namespace

::testing::AssertionResult check_gradient(const GradCheck& spec) {
  std::vector<size_t> all = spec.wrt;
  if (all.empty())
    for (size_t i = 0; i < spec.inputs.size(); ++i)
      if (spec.inputs[i].defined() && dtype_is_float(spec.inputs[i].dtype())) all.push_back(i);
  // Output shapes: run the node once.
  RunOptions ro;
  ro.opset = spec.opset;
  ro.domain = spec.domain;
  ro.num_outputs = spec.num_outputs;
  std::vector<Tensor> ys;
  try {
    ys = run_node(spec.op, spec.inputs, spec.attrs, ro);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << spec.op << ": forward failed: " << e.what();
  }
  std::mt19937 rng(spec.seed * 7919u + 17u);
  std::vector<Tensor> weights;
  for (size_t k : spec.outputs_in_loss) weights.push_back(random_tensor(ys[k].dtype(), ys[k].shape(), rng, -1, 1));

  std::vector<std::vector<size_t>> groups{all};
  if (all.size() > 1)
    for (size_t i : all) groups.push_back({i});
  for (const auto& wrt : groups) {
    ir::Model fwd = forward_model(spec, wrt, weights);
    std::vector<std::string> xs;
    for (size_t i : wrt) xs.push_back("x" + std::to_string(i));
    ir::Model gm;
    try {
      autodiff::BuildOptions bo;
      bo.portable = spec.portable;
      gm = autodiff::build_gradient_model(fwd, {"loss"}, xs, "loss", bo);
      // The gradient model must survive serialization (it is ONNX).
      std::string bytes = ir::serialize_model(gm);
      gm = ir::load_model_bytes(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << spec.op << ": building the gradient failed: " << e.what();
    }
    std::vector<Tensor> feeds;
    for (size_t i : wrt) feeds.push_back(spec.inputs[i]);
    ExecOptions eo;
    eo.num_threads = 1;
    runtime::GraphExecutor gex(gm.graph, gm.opsets, eo);
    std::vector<Value> vals;
    for (const auto& t : feeds) vals.push_back(Value::of(t));
    std::vector<const Value*> ptrs;
    for (auto& v : vals) ptrs.push_back(&v);
    std::vector<Value> grads;
    try {
      grads = gex.run(ptrs);
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << spec.op << ": running the gradient graph failed: " << e.what();
    }
    if (const std::string d = check_providers_agree(gm.graph, gm.opsets, eo, ptrs, grads); !d.empty())
      return ::testing::AssertionFailure() << spec.op << ": gradient graph: " << d;
    runtime::GraphExecutor fex(fwd.graph, fwd.opsets, eo);
    for (size_t w = 0; w < wrt.size(); ++w) {
      const Tensor& analytic = grads[1 + w].tensor;
      const Tensor& x = feeds[w];
      if (analytic.shape() != x.shape())
        return ::testing::AssertionFailure() << spec.op << ": gradient of input " << wrt[w] << " has shape "
                                             << shape_to_string(analytic.shape()) << ", input "
                                             << shape_to_string(x.shape()) << " (seed " << spec.seed << ")";
      auto av = to_double(analytic);
      std::vector<double> base = to_double(x);
      for (int64_t j = 0; j < x.numel(); ++j) {
        auto perturbed = [&](double delta) {
          std::vector<double> v = base;
          v[size_t(j)] += delta;
          std::vector<Tensor> f = feeds;
          f[w] = from_double(x.dtype(), x.shape(), v);
          return run_loss(fex, f);
        };
        const double fd = (perturbed(spec.eps) - perturbed(-spec.eps)) / (2 * spec.eps);
        const double a = av[size_t(j)];
        if (!(std::fabs(a - fd) <= spec.atol + spec.rtol * std::max(std::fabs(a), std::fabs(fd)))) {
          std::ostringstream os;
          os << spec.op << " (opset " << spec.opset << "): d loss / d input " << wrt[w] << " [" << j << "] = " << a
             << ", finite difference " << fd << " (seed " << spec.seed << ", differentiating " << wrt.size()
             << " input(s), input shape " << shape_to_string(x.shape()) << ")";
          return ::testing::AssertionFailure() << os.str();
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult check_zero_gradient(const ZeroGradCheck& s) {
  auto fail = [&]() {
    return ::testing::AssertionFailure() << s.op << " (opset " << s.opset << ", seed " << s.seed << "): ";
  };
  const autodiff::GradRule* rule = autodiff::find_rule("", s.op, s.opset);
  if (!rule) return fail() << "no entry in the rule table";
  if (rule->build) return fail() << "has a gradient rule, not a zero-gradient declaration";

  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = s.opset;
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.name = "zerograd_" + s.op;
  g.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kFloat64, s.x_shape), ""});
  for (const auto& [name, t] : s.consts) g.initializers.emplace_back(name, t);
  for (const auto& n : s.pre) g.nodes.push_back(n);
  ir::Node n;
  n.op_type = s.op;
  n.name = "node_" + s.op;
  n.inputs = s.inputs;
  n.attrs = s.attrs;
  for (size_t k = 0; k < s.num_outputs; ++k) n.outputs.push_back("y" + std::to_string(k));
  g.nodes.push_back(n);
  g.nodes.push_back(make_node("Cast", {"y0"}, {"yd"}, {attr_int("to", int64_t(DType::kFloat64))}));
  g.nodes.push_back(make_node("ReduceSum", {"yd"}, {"sy"}, {attr_int("keepdims", 0)}));
  g.nodes.push_back(make_node("ReduceSum", {"x"}, {"sx"}, {attr_int("keepdims", 0)}));
  g.nodes.push_back(make_node("Add", {"sx", "sy"}, {"loss"}));
  g.outputs.push_back(ir::ValueInfo{"loss", {}, ""});

  if (auto missing = autodiff::missing_rules(m); !missing.empty()) return fail() << "missing_rules lists " << missing[0];
  std::mt19937 rng(s.seed);
  const Tensor x = random_tensor(DType::kFloat64, s.x_shape, rng, 0.1, 0.9);
  ir::Model gm;
  try {
    // Without a kernel the gradient graph must not need the forward node: ask for no forward output.
    gm = autodiff::build_gradient_model(m, s.has_kernel ? std::vector<std::string>{"loss"} : std::vector<std::string>{},
                                        {"x"}, "loss");
    std::string bytes = ir::serialize_model(gm);
    gm = ir::load_model_bytes(bytes.data(), bytes.size());
  } catch (const std::exception& e) {
    return fail() << "building the gradient failed: " << e.what();
  }
  for (const auto& node : gm.graph->nodes)
    if (!s.has_kernel && node.op_type == s.op) return fail() << "the gradient graph runs the forward node";
  std::vector<Tensor> out;
  try {
    out = run_model(gm, {x});
  } catch (const std::exception& e) {
    return fail() << "running the gradient graph failed: " << e.what();
  }
  const Tensor& gx = out.back();
  if (gx.shape() != x.shape()) return fail() << "gradient shape " << shape_to_string(gx.shape());
  const std::vector<double> v = to_double(gx);
  for (size_t j = 0; j < v.size(); ++j)
    if (v[j] != 1.0) return fail() << "d loss / dx [" << j << "] = " << v[j] << ", expected 1 (sum(x) alone)";
  return ::testing::AssertionSuccess();
}

namespace {
std::map<std::string, std::vector<std::string>>& coverage_table() {
  static std::map<std::string, std::vector<std::string>> m;
  return m;
}
}  // namespace

bool declare_coverage(const std::string& test, std::vector<std::string> ops) {
  auto& v = coverage_table()[test];
  v.insert(v.end(), ops.begin(), ops.end());
  return true;
}

const std::map<std::string, std::vector<std::string>>& declared_coverage() { return coverage_table(); }

}  // namespace ot_test
