// Gradients through If and Loop, by finite differences on hand-built float64 graphs: both branches
// taken, branches that ignore an outer value or return it directly, loop-carried values, scan
// outputs, outer reads, condition-driven trip counts, zero iterations, If nested in Loop, Loop in
// Loop, an LSTM inside a Loop body; and the refusals.
#include <cmath>
#include <sstream>

#include "autodiff/builder.h"
#include "ir/onnx_io.h"
#include "onnxtrain/error.h"
#include "runtime/executor.h"
#include "grad_check.h"
#include "test_util.h"

using namespace ot_test;
using onnxtrain::Value;

namespace {

ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
              std::vector<ir::Attribute> attrs = {}, const std::string& name = "") {
  ir::Node n;
  n.op_type = op;
  n.name = name.empty() ? op + "_" + out[0] : name;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

ir::TypeInfo f64(Shape s) { return ir::TypeInfo::tensor(DType::kFloat64, s); }

// Outputs typed `out_type` when given (If branches need declared output types for ONNX's type
// inference when a branch returns an outer value).
std::shared_ptr<ir::Graph> graph(const std::string& name, std::vector<ir::Node> nodes,
                                 std::vector<ir::ValueInfo> inputs, std::vector<std::string> outputs,
                                 const ir::TypeInfo& out_type = {}) {
  auto g = std::make_shared<ir::Graph>();
  g->name = name;
  g->nodes = std::move(nodes);
  g->inputs = std::move(inputs);
  for (auto& o : outputs) g->outputs.push_back(ir::ValueInfo{o, out_type, ""});
  return g;
}

ir::ValueInfo vi(const std::string& n, ir::TypeInfo t) { return ir::ValueInfo{n, std::move(t), ""}; }
ir::TypeInfo i64_scalar() { return ir::TypeInfo::tensor(DType::kInt64, Shape{}); }
ir::TypeInfo bool_scalar() { return ir::TypeInfo::tensor(DType::kBool, Shape{}); }

// A model: `nodes` over float64 graph inputs `xs` (with their test values) and constant
// initializers; `outs` enter loss = sum_k sum(outs[k] * r_k), r_k random.
struct Case {
  std::vector<ir::Node> nodes;
  std::vector<std::pair<std::string, Tensor>> xs, consts;
  std::vector<std::string> outs;
  int64_t opset = 16;
  uint32_t seed = 0;
  bool portable = false;  // BuildOptions::portable (If/Loop gradients are standard ONNX either way)
};

ir::Model model(const Case& c, const std::vector<Tensor>& weights) {
  ir::Model m;
  m.opsets = {{"", c.opset}};
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.name = "cf";
  g.nodes = c.nodes;
  for (const auto& [n, t] : c.xs) g.inputs.push_back(vi(n, ir::TypeInfo::tensor(t.dtype(), t.shape())));
  for (const auto& [n, t] : c.consts) g.initializers.emplace_back(n, t);
  std::vector<std::string> terms;
  for (size_t k = 0; k < c.outs.size(); ++k) {
    const std::string r = "loss_r" + std::to_string(k), p = "loss_p" + std::to_string(k),
                      t = "loss_t" + std::to_string(k);
    g.initializers.emplace_back(r, weights[k]);
    g.nodes.push_back(node("Mul", {c.outs[k], r}, {p}));
    g.nodes.push_back(node("ReduceSum", {p}, {t}, {attr_int("keepdims", 0)}));
    terms.push_back(t);
  }
  g.nodes.push_back(node("Sum", terms, {"loss"}));
  g.outputs.push_back(vi("loss", {}));
  return m;
}

std::vector<Value> run(const ir::Model& m, const std::vector<Tensor>& feeds) {
  onnxtrain::ExecOptions eo;
  eo.num_threads = 1;
  onnxtrain::runtime::GraphExecutor ex(m.graph, m.opsets, eo);
  std::vector<Value> vals;
  for (const auto& t : feeds) vals.push_back(Value::of(t));
  std::vector<const Value*> ptrs;
  for (auto& v : vals) ptrs.push_back(&v);
  return ex.run(ptrs);
}

// Central differences against the built gradient, all xs together and each alone.
::testing::AssertionResult check(const Case& c, double rtol = 1e-6, double atol = 1e-8) {
  std::vector<Tensor> feeds;
  for (const auto& x : c.xs) feeds.push_back(x.second);
  // Output shapes: a model returning the outputs.
  ir::Model probe;
  probe.opsets = {{"", c.opset}};
  probe.graph = std::make_shared<ir::Graph>();
  probe.graph->nodes = c.nodes;
  for (const auto& [n, t] : c.xs) probe.graph->inputs.push_back(vi(n, ir::TypeInfo::tensor(t.dtype(), t.shape())));
  for (const auto& [n, t] : c.consts) probe.graph->initializers.emplace_back(n, t);
  for (const auto& o : c.outs) probe.graph->outputs.push_back(vi(o, {}));
  std::mt19937 rng(c.seed * 7919u + 17u);
  std::vector<Tensor> weights;
  try {
    for (const auto& y : run(probe, feeds)) weights.push_back(random_tensor(y.tensor.dtype(), y.tensor.shape(), rng, -1, 1));
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "forward failed: " << e.what();
  }
  const ir::Model fwd = model(c, weights);
  std::vector<std::vector<size_t>> groups(1);
  for (size_t i = 0; i < c.xs.size(); ++i) groups[0].push_back(i);
  if (c.xs.size() > 1)
    for (size_t i = 0; i < c.xs.size(); ++i) groups.push_back({i});
  for (const auto& group : groups) {
    std::vector<std::string> xs;
    for (size_t i : group) xs.push_back(c.xs[i].first);
    ir::Model gm;
    try {
      onnxtrain::autodiff::BuildOptions bo;
      bo.portable = c.portable;
      gm = onnxtrain::autodiff::build_gradient_model(fwd, {"loss"}, xs, "loss", bo);
      const std::string bytes = ir::serialize_model(gm);
      gm = ir::load_model_bytes(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << "building the gradient failed: " << e.what();
    }
    std::vector<Value> grads;
    try {
      grads = run(gm, feeds);
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << "running the gradient failed: " << e.what();
    }
    for (size_t w = 0; w < group.size(); ++w) {
      const size_t i = group[w];
      const Tensor& x = feeds[i];
      const Tensor& a = grads[1 + w].tensor;
      if (a.shape() != x.shape())
        return ::testing::AssertionFailure() << "gradient of " << c.xs[i].first << " has shape "
                                             << onnxtrain::shape_to_string(a.shape());
      const auto av = to_double(a);
      const auto base = to_double(x);
      for (int64_t j = 0; j < x.numel(); ++j) {
        auto loss_at = [&](double delta) {
          std::vector<double> v = base;
          v[size_t(j)] += delta;
          std::vector<Tensor> f = feeds;
          f[i] = from_double(x.dtype(), x.shape(), v);
          return to_double(run(fwd, f)[0].tensor)[0];
        };
        const double eps = 1e-6;
        const double fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
        if (!(std::fabs(av[size_t(j)] - fd) <= atol + rtol * std::max(std::fabs(fd), std::fabs(av[size_t(j)]))))
          return ::testing::AssertionFailure() << "d loss / d " << c.xs[i].first << "[" << j << "] = " << av[size_t(j)]
                                               << ", finite difference " << fd << " (seed " << c.seed << ", "
                                               << group.size() << " x(s))";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

Tensor rnd(Shape s, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  return random_tensor(DType::kFloat64, s, rng, lo, hi);
}
ir::Attribute g_attr(const char* name, std::shared_ptr<ir::Graph> g) { return attr_graph(name, std::move(g)); }

// If(c): then a * b + sin(a) (reads a, b); else b - c3 (reads b, c3) and a second output a.
Case if_case(bool cond, uint32_t seed) {
  Case c;
  c.seed = seed;
  auto then_b = graph("then", {node("Mul", {"a", "b"}, {"ab"}), node("Sin", {"a"}, {"sa"}), node("Add", {"ab", "sa"}, {"t0"}),
                               node("Mul", {"b", "b"}, {"t1"})},
                      {}, {"t0", "t1"}, f64({2, 3}));
  auto else_b = graph("else", {node("Sub", {"b", "c3"}, {"e0"})}, {}, {"e0", "a"}, f64({2, 3}));
  c.nodes = {node("If", {"cond"}, {"o0", "o1"}, {g_attr("then_branch", then_b), g_attr("else_branch", else_b)})};
  c.xs = {{"a", rnd({2, 3}, seed)}, {"b", rnd({2, 3}, seed + 1)}, {"c3", rnd({3}, seed + 2)}};
  c.consts = {{"cond", Tensor::scalar<bool>(cond)}};
  c.outs = {"o0", "o1"};
  return c;
}

// Loop body (i, cond, v [3], n int64) -> (cond', v' = v * a + sin(float(i)) * b, n + 1,
// scan s = v' * v'); reads a [3] and b [] from the outer scope.
std::shared_ptr<ir::Graph> loop_body(bool cond_from_counter) {
  std::vector<ir::Node> nodes = {
      node("Mul", {"v", "a"}, {"va"}),
      node("Cast", {"i"}, {"fi"}, {attr_int("to", int64_t(DType::kFloat64))}),
      node("Sin", {"fi"}, {"si"}),
      node("Mul", {"si", "b"}, {"sib"}),
      node("Add", {"va", "sib"}, {"v2"}),
      node("Add", {"n", "one"}, {"n2"}),
      node("Mul", {"v2", "v2"}, {"s"}),
  };
  if (cond_from_counter) nodes.push_back(node("Less", {"n2", "limit"}, {"cond_out"}));
  else nodes.push_back(node("Identity", {"cond_in"}, {"cond_out"}));
  return graph("body", nodes,
               {vi("i", i64_scalar()), vi("cond_in", bool_scalar()), vi("v", f64({3})),
                vi("n", ir::TypeInfo::tensor(DType::kInt64, Shape{}))},
               {"cond_out", "v2", "n2", "s"});
}

Case loop_case(uint32_t seed, int64_t trips, bool cond_from_counter) {
  Case c;
  c.seed = seed;
  std::vector<std::string> in = {cond_from_counter ? "" : "M", cond_from_counter ? "" : "", "v0", "n0"};
  c.nodes = {node("Loop", in, {"vf", "nf", "scan"}, {g_attr("body", loop_body(cond_from_counter))})};
  c.xs = {{"v0", rnd({3}, seed)}, {"a", rnd({3}, seed + 1, 0.5, 1.2)}, {"b", rnd({}, seed + 2)}};
  c.consts = {{"M", Tensor::scalar<int64_t>(trips)},
              {"n0", Tensor::scalar<int64_t>(0)},
              {"one", Tensor::scalar<int64_t>(1)},
              {"limit", Tensor::scalar<int64_t>(trips)}};
  c.outs = {"vf", "scan"};
  return c;
}

}  // namespace

// ---------------------------------------------------------------- If
GRAD_COVERS(GradControlFlow, IfThenBranch, "If");
TEST(GradControlFlow, IfThenBranch) {
  Case c = if_case(true, 1);
  EXPECT_TRUE(check(c));
  c.portable = true;
  EXPECT_TRUE(check(c));
}

TEST(GradControlFlow, IfElseBranchReturnsOuterValueAndIgnoresOne) {
  EXPECT_TRUE(check(if_case(false, 2)));  // o1 = a directly; c3 unused by then, a by else's o0
}

TEST(GradControlFlow, IfOnlyOneOutputInLoss) {
  for (bool cond : {true, false}) {
    Case c = if_case(cond, 3);
    c.outs = {"o1"};
    EXPECT_TRUE(check(c));
  }
}

TEST(GradControlFlow, IfConditionComputedFromData) {
  // cond = ReduceSum(a) > 0, then both branches are reachable depending on a.
  for (uint32_t seed : {4u, 5u, 6u}) {
    Case c = if_case(true, seed);
    c.consts.clear();
    c.nodes.insert(c.nodes.begin(), {node("ReduceSum", {"a"}, {"sa_all"}, {attr_int("keepdims", 0)}),
                                     node("Greater", {"sa_all", "zero"}, {"cond"})});
    c.consts = {{"zero", Tensor::scalar<double>(0.0)}};
    EXPECT_TRUE(check(c));
  }
}

// ---------------------------------------------------------------- Loop
GRAD_COVERS(GradControlFlow, LoopCarriedScanAndOuterReads, "Loop");
TEST(GradControlFlow, LoopCarriedScanAndOuterReads) {
  for (int64_t trips : {1, 3, 5}) {
    Case c = loop_case(10 + uint32_t(trips), trips, false);
    EXPECT_TRUE(check(c)) << trips;
    c.portable = true;
    EXPECT_TRUE(check(c)) << trips << " portable";
  }
}

TEST(GradControlFlow, LoopTripCountFromCondition) {
  Case c = loop_case(20, 4, true);  // no M: the body's condition stops after 4
  EXPECT_TRUE(check(c));
  c.portable = true;
  EXPECT_TRUE(check(c));
}

TEST(GradControlFlow, LoopZeroIterations) {
  Case c = loop_case(21, 0, false);
  c.outs = {"vf"};  // v_final = v0; a and b get zero
  EXPECT_TRUE(check(c));
}

TEST(GradControlFlow, LoopOnlyScanOrOnlyFinal) {
  Case c = loop_case(22, 3, false);
  c.outs = {"scan"};
  EXPECT_TRUE(check(c));
  c.outs = {"vf"};
  EXPECT_TRUE(check(c));
}

TEST(GradControlFlow, IfNestedInLoop) {
  // Body: odd iterations v' = v * a, even ones v' = v + b * v; both read outer values.
  auto then_b = graph("even", {node("Mul", {"b", "v"}, {"bv"}), node("Add", {"v", "bv"}, {"te"})}, {}, {"te"});
  auto else_b = graph("odd", {node("Mul", {"v", "a"}, {"to"})}, {}, {"to"});
  auto body = graph("body",
                    {node("Mod", {"i", "two"}, {"im"}), node("Equal", {"im", "zero"}, {"even"}),
                     node("If", {"even"}, {"v2"}, {g_attr("then_branch", then_b), g_attr("else_branch", else_b)}),
                     node("Identity", {"cond_in"}, {"cond_out"}), node("Tanh", {"v2"}, {"s"})},
                    {vi("i", i64_scalar()), vi("cond_in", bool_scalar()), vi("v", f64({2, 2}))},
                    {"cond_out", "v2", "s"});
  Case c;
  c.seed = 30;
  c.nodes = {node("Loop", {"M", "", "v0"}, {"vf", "scan"}, {g_attr("body", body)})};
  c.xs = {{"v0", rnd({2, 2}, 30)}, {"a", rnd({2, 2}, 31)}, {"b", rnd({2}, 32)}};
  c.consts = {{"M", Tensor::scalar<int64_t>(4)}, {"two", Tensor::scalar<int64_t>(2)}, {"zero", Tensor::scalar<int64_t>(0)}};
  c.outs = {"vf", "scan"};
  EXPECT_TRUE(check(c));
}

TEST(GradControlFlow, LoopNestedInLoop) {
  // Inner: w' = w * a three times; outer: v' = inner(v) + b, twice.
  auto inner = graph("inner", {node("Mul", {"w", "a"}, {"w2"}), node("Identity", {"ci"}, {"co"})},
                     {vi("j", i64_scalar()), vi("ci", bool_scalar()), vi("w", f64({3}))}, {"co", "w2"});
  auto outer = graph("outer",
                     {node("Loop", {"M3", "", "v"}, {"vi"}, {g_attr("body", inner)}), node("Add", {"vi", "b"}, {"v2"}),
                      node("Identity", {"cond_in"}, {"cond_out"})},
                     {vi("i", i64_scalar()), vi("cond_in", bool_scalar()), vi("v", f64({3}))}, {"cond_out", "v2"});
  Case c;
  c.seed = 40;
  c.nodes = {node("Loop", {"M2", "", "v0"}, {"vf"}, {g_attr("body", outer)})};
  c.xs = {{"v0", rnd({3}, 40)}, {"a", rnd({3}, 41, 0.5, 1.5)}, {"b", rnd({3}, 42)}};
  c.consts = {{"M2", Tensor::scalar<int64_t>(2)}, {"M3", Tensor::scalar<int64_t>(3)}};
  c.outs = {"vf"};
  EXPECT_TRUE(check(c));
}

TEST(GradControlFlow, LstmInsideLoopAndIf) {
  // The body runs an LSTM step over a carried state (its rule replaces the body's LSTM by the
  // training variant inside the reverse loop's recomputation).
  const int64_t N = 2, I = 3, H = 4;
  auto body = graph("body",
                    {node("Unsqueeze", {"h", "ax0"}, {"h3"}), node("Unsqueeze", {"x", "ax0"}, {"x3"}),
                     node("LSTM", {"x3", "W", "R", "", "", "h3"}, {"", "yh"}, {attr_int("hidden_size", H)}),
                     node("Squeeze", {"yh", "ax0"}, {"h2"}), node("Identity", {"cond_in"}, {"cond_out"})},
                    {vi("i", i64_scalar()), vi("cond_in", bool_scalar()), vi("h", f64({N, H}))}, {"cond_out", "h2", "h2"},
                    f64({N, H}));
  body->outputs[0].type = bool_scalar();
  // x: [1, N, I] per step, read from the outer scope.
  Case c;
  c.seed = 50;
  c.nodes = {node("Loop", {"M", "", "h0"}, {"hf", "hs"}, {g_attr("body", body)})};
  c.xs = {{"h0", rnd({N, H}, 50)}, {"W", rnd({1, 4 * H, I}, 51)}, {"R", rnd({1, 4 * H, H}, 52)}, {"x", rnd({N, I}, 53)}};
  c.consts = {{"M", Tensor::scalar<int64_t>(3)}, {"ax0", Tensor::from_vector<int64_t>({1}, {0})}};
  c.outs = {"hf", "hs"};
  EXPECT_TRUE(check(c));
  // The same LSTM in an If branch.
  auto then_b = graph("then", {node("LSTM", {"x3", "W", "R"}, {"y"}, {attr_int("hidden_size", H)})}, {}, {"y"},
                      f64({1, 1, N, H}));
  auto else_b = graph("else", {node("Mul", {"alt", "alt"}, {"e"})}, {}, {"e"}, f64({1, 1, N, H}));
  Case d;
  d.seed = 54;
  d.nodes = {node("Unsqueeze", {"x", "ax0"}, {"x3"}),
             node("If", {"cond"}, {"o"}, {g_attr("then_branch", then_b), g_attr("else_branch", else_b)})};
  d.xs = {{"W", rnd({1, 4 * H, I}, 55)}, {"R", rnd({1, 4 * H, H}, 56)}, {"x", rnd({N, I}, 57)},
          {"alt", rnd({1, 1, N, H}, 58)}};
  d.outs = {"o"};
  for (bool cond : {true, false}) {
    d.consts = {{"cond", Tensor::scalar<bool>(cond)}, {"ax0", Tensor::from_vector<int64_t>({1}, {0})}};
    EXPECT_TRUE(check(d)) << cond;
  }
}

TEST(GradControlFlow, Refusals) {
  auto expect_not_implemented = [](const Case& c, const std::vector<Tensor>& weights, const std::string& what) {
    ir::Model m = model(c, weights);
    m.opsets["com.example"] = 1;
    try {
      onnxtrain::autodiff::build_gradient_model(m, {"loss"}, {"v0"}, "loss");
      ADD_FAILURE() << "no error for " << what;
    } catch (const onnxtrain::NotImplemented& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // A body operator without a gradient rule: named.
  ir::Node mystery = node("Mystery", {"v"}, {"v2"});
  mystery.domain = "com.example";
  auto body = graph("body", {mystery, node("Identity", {"cond_in"}, {"cond_out"})},
                    {vi("i", i64_scalar()), vi("cond_in", bool_scalar()), vi("v", f64({3}))}, {"cond_out", "v2"});
  body->outputs[1].type = f64({3});
  Case c;
  c.nodes = {node("Loop", {"M", "", "v0"}, {"vf"}, {g_attr("body", body)})};
  c.xs = {{"v0", rnd({3}, 60)}};
  c.consts = {{"M", Tensor::scalar<int64_t>(2)}};
  c.outs = {"vf"};
  expect_not_implemented(c, {rnd({3}, 61)}, "Mystery");
  // A sequence-typed loop-carried value cannot be recorded per iteration.
  auto seq_body = graph("body",
                        {node("Mul", {"v", "v"}, {"v2"}), node("SequenceInsert", {"sq", "v"}, {"sq2"}),
                         node("Identity", {"cond_in"}, {"cond_out"})},
                        {vi("i", i64_scalar()), vi("cond_in", bool_scalar()), vi("v", f64({3})), vi("sq", {})},
                        {"cond_out", "v2", "sq2"});
  Case s;
  s.nodes = {node("SequenceEmpty", {}, {"sq0"}, {attr_int("dtype", int64_t(DType::kFloat64))}),
             node("Loop", {"M", "", "v0", "sq0"}, {"vf", "sqf"}, {g_attr("body", seq_body)})};
  s.xs = c.xs;
  s.consts = c.consts;
  s.outs = {"vf"};
  expect_not_implemented(s, {rnd({3}, 62)}, "only tensors are supported");
}

TEST(GradControlFlow, LoopCarriedShapeChangeFailsAtRunTime) {
  // v changes shape ([2], then [2, 2] by broadcasting): the per-iteration record cannot be stacked;
  // the Loop kernel says so,
  // naming the node (a known limitation: only shape-preserving loop-carried values).
  auto body = graph("body", {node("Add", {"v", "w"}, {"v2"}), node("Identity", {"cond_in"}, {"cond_out"})},
                    {vi("i", i64_scalar()), vi("cond_in", bool_scalar()), vi("v", ir::TypeInfo::tensor(DType::kFloat64))},
                    {"cond_out", "v2"});
  Case c;
  c.nodes = {node("Loop", {"M", "", "v0"}, {"vf"}, {g_attr("body", body)}, "growing")};
  c.xs = {{"v0", rnd({2}, 70)}, {"w", rnd({2, 1}, 71)}};
  c.consts = {{"M", Tensor::scalar<int64_t>(2)}};
  c.outs = {"vf"};
  ir::Model m = model(c, {rnd({2, 2}, 72)});
  ir::Model gm = onnxtrain::autodiff::build_gradient_model(m, {"loss"}, {"v0", "w"}, "loss");
  try {
    run(gm, {c.xs[0].second, c.xs[1].second});
    ADD_FAILURE() << "no error";
  } catch (const onnxtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("growing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in iteration 1"), std::string::npos) << e.what();
  }
}
