// If and Loop on hand-built graphs: outer-scope reads, branch outputs of different shapes,
// loop-carried values, scan outputs, M/cond combinations, nested If inside Loop, plan reuse,
// and the error cases.
#include <map>

#include "onnxtrain/error.h"
#include "runtime/executor.h"
#include "test_util.h"

using namespace ot_test;
using onnxtrain::Value;

namespace {

ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
              std::vector<ir::Attribute> attrs = {}, std::string name = "") {
  ir::Node n;
  n.op_type = op;
  n.name = name.empty() ? op + "_" + out[0] : name;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

std::shared_ptr<ir::Graph> graph(const std::string& name, std::vector<ir::Node> nodes, std::vector<std::string> inputs,
                                 std::vector<std::string> outputs) {
  auto g = std::make_shared<ir::Graph>();
  g->name = name;
  g->nodes = std::move(nodes);
  for (auto& i : inputs) g->inputs.push_back(ir::ValueInfo{i, {}, ""});
  for (auto& o : outputs) g->outputs.push_back(ir::ValueInfo{o, {}, ""});
  return g;
}

ir::Node constant(const std::string& out, const Tensor& t) { return node("Constant", {}, {out}, {attr_tensor("value", t)}); }

Tensor fvec(Shape s, std::vector<float> v) { return Tensor::from_vector<float>(std::move(s), v); }
Tensor bscalar(bool b) { return Tensor::scalar<bool>(b); }
Tensor i64(int64_t v) { return Tensor::scalar<int64_t>(v); }

// Runs `g` (opset 16) on `feeds` (an undefined tensor: not fed), twice, checking both runs agree.
std::vector<Tensor> run_graph(std::shared_ptr<ir::Graph> g, const std::vector<Tensor>& feeds, int64_t opset = 16) {
  onnxtrain::runtime::GraphExecutor ex(g, {{"", opset}}, onnxtrain::ExecOptions{});
  std::vector<Value> vals;
  for (const auto& t : feeds) vals.push_back(t.defined() ? Value::of(t) : Value());
  std::vector<const Value*> ptrs;
  for (auto& v : vals) ptrs.push_back(v.kind == Value::Kind::kNone ? nullptr : &v);
  auto first = ex.run(ptrs);
  auto second = ex.run(ptrs);
  std::vector<Tensor> r;
  for (size_t i = 0; i < second.size(); ++i) {
    EXPECT_EQ(first[i].tensor.describe(), second[i].tensor.describe());
    EXPECT_EQ(to_double(first[i].tensor), to_double(second[i].tensor));
    r.push_back(second[i].tensor);
  }
  return r;
}

std::string error_of(std::shared_ptr<ir::Graph> g, const std::vector<Tensor>& feeds) {
  try {
    run_graph(std::move(g), feeds);
  } catch (const onnxtrain::Error& e) {
    return e.what();
  }
  return "no error";
}

// then: x + x (shape of x); else: y * y (shape of y). Both read outer-scope values.
std::shared_ptr<ir::Graph> if_graph() {
  auto then_b = graph("then", {node("Add", {"x", "x"}, {"t"})}, {}, {"t"});
  auto else_b = graph("else", {node("Mul", {"y", "y"}, {"e"})}, {}, {"e"});
  return graph("main",
               {node("If", {"c"}, {"out"}, {attr_graph("then_branch", then_b), attr_graph("else_branch", else_b)}, "the_if")},
               {"c", "x", "y"}, {"out"});
}

}  // namespace

TEST(ControlFlow, IfPicksBranchAndReadsOuterScope) {
  auto g = if_graph();
  Tensor x = fvec({3}, {1, 2, 3}), y = fvec({2, 2}, {1, -2, 3, -4});
  auto r = run_graph(g, {bscalar(true), x, y});
  EXPECT_TRUE(all_close(r[0], {3}, {2, 4, 6}));
  r = run_graph(g, {bscalar(false), x, y});
  EXPECT_TRUE(all_close(r[0], {2, 2}, {1, 4, 9, 16}));
  // One executor, both conditions: same input shapes, outputs of different shapes.
  onnxtrain::runtime::GraphExecutor ex(g, {{"", 16}}, onnxtrain::ExecOptions{});
  Value c1 = Value::of(bscalar(true)), c0 = Value::of(bscalar(false)), xv = Value::of(x), yv = Value::of(y);
  for (int rep = 0; rep < 3; ++rep) {
    auto a = ex.run({&c1, &xv, &yv});
    auto b = ex.run({&c0, &xv, &yv});
    EXPECT_TRUE(all_close(a[0].tensor, {3}, {2, 4, 6}));
    EXPECT_TRUE(all_close(b[0].tensor, {2, 2}, {1, 4, 9, 16}));
  }
  EXPECT_EQ(ex.num_plans(), 1u);
}

TEST(ControlFlow, IfBranchOutputsOuterValueAndConstant) {
  // then yields the outer value itself and a constant; else two constants.
  auto then_b = graph("then", {constant("k", fvec({1}, {7}))}, {}, {"x", "k"});
  auto else_b = graph("else", {constant("k2", fvec({2}, {8, 9})), constant("k3", fvec({1}, {5}))}, {}, {"k2", "k3"});
  auto g = graph("main", {node("If", {"c"}, {"o1", "o2"}, {attr_graph("then_branch", then_b), attr_graph("else_branch", else_b)})},
                 {"c", "x"}, {"o1", "o2"});
  auto r = run_graph(g, {bscalar(true), fvec({2}, {3, 4})});
  EXPECT_TRUE(all_close(r[0], {2}, {3, 4}));
  EXPECT_TRUE(all_close(r[1], {1}, {7}));
  r = run_graph(g, {bscalar(false), fvec({2}, {3, 4})});
  EXPECT_TRUE(all_close(r[0], {2}, {8, 9}));
  EXPECT_TRUE(all_close(r[1], {1}, {5}));
}

TEST(ControlFlow, IfConditionAsRank1Tensor) {
  auto g = if_graph();
  Tensor c = Tensor::from_vector<bool>({1}, std::vector<bool>{false});
  auto r = run_graph(g, {c, fvec({1}, {1}), fvec({1}, {3})});
  EXPECT_TRUE(all_close(r[0], {1}, {9}));
}

namespace {
// Loop: acc += x (outer) each iteration; scans: acc after the update, and the iteration number.
std::shared_ptr<ir::Graph> accumulate_loop() {
  auto body = graph("body",
                    {node("Identity", {"cond_in"}, {"cond_out"}), node("Add", {"acc_in", "x"}, {"acc_out"}),
                     node("Mul", {"acc_out", "acc_out"}, {"sq"}), node("Identity", {"i"}, {"i_out"})},
                    {"i", "cond_in", "acc_in"}, {"cond_out", "acc_out", "sq", "i_out"});
  return graph("main", {node("Loop", {"M", "cond", "acc0"}, {"acc", "squares", "iters"}, {attr_graph("body", body)}, "the_loop")},
               {"M", "cond", "acc0", "x"}, {"acc", "squares", "iters"});
}
}  // namespace

TEST(ControlFlow, LoopCarriedScanAndOuterScope) {
  auto g = accumulate_loop();
  Tensor acc0 = fvec({2}, {1, -1}), x = fvec({2}, {0.5f, 2});
  for (int64_t M : {0, 1, 4}) {
    auto r = run_graph(g, {i64(M), bscalar(true), acc0, x});
    std::vector<double> acc = {1, -1}, squares, iters;
    for (int64_t i = 0; i < M; ++i) {
      acc[0] += 0.5, acc[1] += 2;
      squares.insert(squares.end(), {acc[0] * acc[0], acc[1] * acc[1]});
      iters.push_back(double(i));
    }
    EXPECT_TRUE(all_close(r[0], {2}, acc)) << "M " << M;
    // With zero iterations the body declares no shape: the scan outputs are empty.
    EXPECT_TRUE(all_close(r[1], M ? Shape{M, 2} : Shape{0}, squares)) << "M " << M;
    EXPECT_TRUE(all_close(r[2], {M}, iters)) << "M " << M;
  }
  // cond false: no iteration even with M > 0.
  auto r = run_graph(g, {i64(5), bscalar(false), acc0, x});
  EXPECT_TRUE(all_close(r[0], {2}, {1, -1}));
  EXPECT_EQ(r[2].shape(), Shape{0});
}

TEST(ControlFlow, LoopZeroIterationsUsesDeclaredScanShape) {
  auto g = accumulate_loop();
  auto& body = *g->nodes[0].attr("body")->g;
  body.outputs[2].type = ir::TypeInfo::tensor(DType::kFloat32, {2});
  auto r = run_graph(g, {i64(0), bscalar(true), fvec({2}, {1, 1}), fvec({2}, {1, 1})});
  EXPECT_EQ(r[1].shape(), (Shape{0, 2}));
  EXPECT_EQ(r[1].dtype(), DType::kFloat32);
}

namespace {
// The body's cond comes from a chain of loop-carried bools (b1 <- b2 <- b3 <- b3): with
// (true, true, false) the body reports true, true, false: three iterations when M allows.
std::shared_ptr<ir::Graph> countdown_loop(bool with_m, bool with_cond) {
  auto body = graph("body",
                    {node("Identity", {"b1"}, {"c_out"}), node("Identity", {"b2"}, {"b1_out"}),
                     node("Identity", {"b3"}, {"b2_out"}), node("Identity", {"b3"}, {"b3_out"}),
                     node("Identity", {"i"}, {"i_out"})},
                    {"i", "c_in", "b1", "b2", "b3"}, {"c_out", "b1_out", "b2_out", "b3_out", "i_out"});
  return graph("main",
               {node("Loop", {with_m ? "M" : "", with_cond ? "cond" : "", "b1_0", "b2_0", "b3_0"},
                     {"b1_f", "b2_f", "b3_f", "iters"}, {attr_graph("body", body)})},
               {"M", "cond", "b1_0", "b2_0", "b3_0"}, {"iters"});
}
}  // namespace

TEST(ControlFlow, LoopTripCountAndConditionCombinations) {
  const Tensor t = bscalar(true), f = bscalar(false);
  auto iters = [&](bool with_m, bool with_cond, int64_t M) {
    return run_graph(countdown_loop(with_m, with_cond), {i64(M), t, t, t, f})[0].numel();
  };
  EXPECT_EQ(iters(true, true, 10), 3);   // ends by the body's cond
  EXPECT_EQ(iters(true, true, 2), 2);    // ends by M
  EXPECT_EQ(iters(false, true, 0), 3);   // while loop (M unset)
  EXPECT_EQ(iters(true, false, 10), 3);  // for loop; the body's cond still ends it (as onnxruntime)
  EXPECT_EQ(iters(true, false, 1), 1);
  EXPECT_EQ(iters(false, false, 0), 3);  // neither: only the body's cond ends it
  EXPECT_EQ(iters(true, true, -4), 0);   // negative M: no iteration
}

TEST(ControlFlow, NestedIfInsideLoop) {
  // Each iteration: acc = flag ? acc + x : acc - y (x from the top graph, flag and acc from the
  // body), flag toggles through a second If; the scan collects acc.
  auto add_b = graph("add", {node("Add", {"acc_in", "x"}, {"s"})}, {}, {"s"});
  auto sub_b = graph("sub", {node("Sub", {"acc_in", "y"}, {"d"})}, {}, {"d"});
  auto to_false = graph("to_false", {constant("nf", bscalar(false))}, {}, {"nf"});
  auto to_true = graph("to_true", {constant("nt", bscalar(true))}, {}, {"nt"});
  auto body = graph("body",
                    {node("If", {"flag_in"}, {"acc_out"}, {attr_graph("then_branch", add_b), attr_graph("else_branch", sub_b)}),
                     node("If", {"flag_in"}, {"flag_out"}, {attr_graph("then_branch", to_false), attr_graph("else_branch", to_true)}),
                     node("Identity", {"cond_in"}, {"cond_out"}), node("Identity", {"acc_out"}, {"acc_scan"})},
                    {"i", "cond_in", "flag_in", "acc_in"}, {"cond_out", "flag_out", "acc_out", "acc_scan"});
  auto g = graph("main", {node("Loop", {"M", "", "flag0", "acc0"}, {"flag", "acc", "accs"}, {attr_graph("body", body)})},
                 {"M", "flag0", "acc0", "x", "y"}, {"flag", "acc", "accs"});
  const int64_t M = 5;
  auto r = run_graph(g, {i64(M), bscalar(true), fvec({2}, {0, 1}), fvec({2}, {1, 2}), fvec({2}, {10, 20})});
  std::vector<double> acc = {0, 1}, accs;
  bool flag = true;
  for (int64_t i = 0; i < M; ++i) {
    for (size_t k = 0; k < 2; ++k) acc[k] = flag ? acc[k] + (k ? 2 : 1) : acc[k] - (k ? 20 : 10);
    flag = !flag;
    accs.insert(accs.end(), acc.begin(), acc.end());
  }
  EXPECT_TRUE(all_close(r[0], {}, {flag ? 1.0 : 0.0}));
  EXPECT_TRUE(all_close(r[1], {2}, acc));
  EXPECT_TRUE(all_close(r[2], {M, 2}, accs));
}

TEST(ControlFlow, LoopCarriedShapeMayChange) {
  // v switches between a [3] and a [2, 2] constant with the flag: the final shape depends on the
  // number of iterations.
  auto a = graph("a", {constant("ka", fvec({3}, {1, 2, 3}))}, {}, {"ka"});
  auto b = graph("b", {constant("kb", fvec({2, 2}, {4, 5, 6, 7}))}, {}, {"kb"});
  auto to_false = graph("to_false", {constant("nf", bscalar(false))}, {}, {"nf"});
  auto to_true = graph("to_true", {constant("nt", bscalar(true))}, {}, {"nt"});
  auto body = graph("body",
                    {node("If", {"flag_in"}, {"v_out"}, {attr_graph("then_branch", a), attr_graph("else_branch", b)}),
                     node("If", {"flag_in"}, {"flag_out"}, {attr_graph("then_branch", to_false), attr_graph("else_branch", to_true)}),
                     node("Identity", {"cond_in"}, {"cond_out"})},
                    {"i", "cond_in", "flag_in", "v_in"}, {"cond_out", "flag_out", "v_out"});
  auto g = graph("main", {node("Loop", {"M", "", "flag0", "v0"}, {"flag", "v"}, {attr_graph("body", body)})},
                 {"M", "flag0", "v0"}, {"v"});
  EXPECT_TRUE(all_close(run_graph(g, {i64(1), bscalar(true), fvec({1}, {0})})[0], {3}, {1, 2, 3}));
  EXPECT_TRUE(all_close(run_graph(g, {i64(2), bscalar(true), fvec({1}, {0})})[0], {2, 2}, {4, 5, 6, 7}));
  EXPECT_TRUE(all_close(run_graph(g, {i64(0), bscalar(true), fvec({1}, {9})})[0], {1}, {9}));

  // The same value as a scan output: shapes differ between iterations, which is an error.
  body->outputs.push_back(ir::ValueInfo{"v_out", {}, ""});
  g->nodes[0].outputs.push_back("vs");
  g->outputs.push_back(ir::ValueInfo{"vs", {}, ""});
  const std::string e = error_of(g, {i64(2), bscalar(true), fvec({1}, {0})});
  EXPECT_NE(e.find("Loop"), std::string::npos) << e;
  EXPECT_NE(e.find("scan output 0"), std::string::npos) << e;
}

TEST(ControlFlow, LstmInsideLoop) {
  // Each iteration runs an LSTM over the outer sequence x from the carried hidden state; its
  // Y_h is the next state. The body's plan (with the LSTM's kernel) is reused every iteration.
  std::mt19937 rng(5);
  const int64_t S = 3, N = 2, I = 4, H = 5, M = 3;
  Tensor x = random_tensor(DType::kFloat32, {S, N, I}, rng);
  Tensor w = random_tensor(DType::kFloat32, {1, 4 * H, I}, rng);
  Tensor r = random_tensor(DType::kFloat32, {1, 4 * H, H}, rng);
  Tensor h0 = random_tensor(DType::kFloat32, {1, N, H}, rng);
  auto body = graph("body",
                    {node("Identity", {"ci"}, {"co"}),
                     node("LSTM", {"x", "w", "r", "", "", "h_in"}, {"", "h_out"}, {attr_int("hidden_size", H)})},
                    {"i", "ci", "h_in"}, {"co", "h_out"});
  auto g = graph("main", {node("Loop", {"M", "", "h0"}, {"h"}, {attr_graph("body", body)})}, {"M", "h0", "x", "w", "r"},
                 {"h"});
  auto got = run_graph(g, {i64(M), h0, x, w, r}, 14);
  Tensor h = h0;
  RunOptions o;
  o.opset = 14;
  o.num_outputs = 2;
  for (int64_t k = 0; k < M; ++k) h = run_node("LSTM", {x, w, r, Tensor(), Tensor(), h}, {attr_int("hidden_size", H)}, o)[1];
  EXPECT_TRUE(all_close(got[0], {1, N, H}, to_double(h), 1e-6, 1e-7));

  // An LSTM fed by an If: its input shape is only known at run time, so it is prepared while
  // running (each run, with the sequence length the branch gives).
  auto then_b = graph("then", {node("Identity", {"x"}, {"xt"})}, {}, {"xt"});
  auto else_b = graph("else", {node("Identity", {"x2"}, {"xe"})}, {}, {"xe"});
  auto g2 = graph("main",
                  {node("If", {"c"}, {"xs"}, {attr_graph("then_branch", then_b), attr_graph("else_branch", else_b)}),
                   node("LSTM", {"xs", "w", "r"}, {"y", "yh"}, {attr_int("hidden_size", H)})},
                  {"c", "x", "x2", "w", "r"}, {"y", "yh"});
  Tensor x2 = random_tensor(DType::kFloat32, {S + 2, N, I}, rng);
  for (bool c : {true, false, true}) {
    auto r2 = run_graph(g2, {bscalar(c), x, x2, w, r}, 14);
    auto want = run_node("LSTM", {c ? x : x2, w, r}, {attr_int("hidden_size", H)}, o);
    EXPECT_TRUE(all_close(r2[0], want[0].shape(), to_double(want[0]), 1e-6, 1e-7));
    EXPECT_TRUE(all_close(r2[1], want[1].shape(), to_double(want[1]), 1e-6, 1e-7));
  }
}

TEST(ControlFlow, LoopInsideIf) {
  // If(c) then Loop(M) { acc += x } else x: control flow nested the other way round.
  auto loop_body = graph("body", {node("Identity", {"ci"}, {"co"}), node("Add", {"a_in", "x"}, {"a_out"})},
                         {"i", "ci", "a_in"}, {"co", "a_out"});
  auto then_b = graph("then", {node("Loop", {"M", "", "x"}, {"lo"}, {attr_graph("body", loop_body)})}, {}, {"lo"});
  auto else_b = graph("else", {node("Identity", {"x"}, {"xo"})}, {}, {"xo"});
  auto g = graph("main", {node("If", {"c"}, {"o"}, {attr_graph("then_branch", then_b), attr_graph("else_branch", else_b)})},
                 {"c", "M", "x"}, {"o"});
  EXPECT_TRUE(all_close(run_graph(g, {bscalar(true), i64(3), fvec({2}, {1, 2})})[0], {2}, {4, 8}));
  EXPECT_TRUE(all_close(run_graph(g, {bscalar(false), i64(3), fvec({2}, {1, 2})})[0], {2}, {1, 2}));
}

TEST(ControlFlow, Errors) {
  auto expect_error = [](const std::string& msg, const std::string& who, const std::string& part) {
    EXPECT_NE(msg.find(who), std::string::npos) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  // Missing else_branch.
  {
    auto then_b = graph("then", {node("Identity", {"x"}, {"t"})}, {}, {"t"});
    auto g = graph("main", {node("If", {"c"}, {"o"}, {attr_graph("then_branch", then_b)}, "if1")}, {"c", "x"}, {"o"});
    expect_error(error_of(g, {bscalar(true), fvec({1}, {1})}), "if1", "else_branch");
  }
  // Branch output count differs from the node's.
  {
    auto then_b = graph("then", {node("Identity", {"x"}, {"t"})}, {}, {"t", "x"});
    auto else_b = graph("else", {node("Identity", {"x"}, {"e"})}, {}, {"e"});
    auto g = graph("main", {node("If", {"c"}, {"o"}, {attr_graph("then_branch", then_b), attr_graph("else_branch", else_b)}, "if2")},
                   {"c", "x"}, {"o"});
    expect_error(error_of(g, {bscalar(true), fvec({1}, {1})}), "if2", "outputs");
  }
  // cond not bool, cond with several elements.
  {
    auto g = if_graph();
    expect_error(error_of(g, {fvec({1}, {1}), fvec({1}, {1}), fvec({1}, {1})}), "the_if", "bool");
    Tensor c2 = Tensor::from_vector<bool>({2}, std::vector<bool>{true, false});
    expect_error(error_of(g, {c2, fvec({1}, {1}), fvec({1}, {1})}), "the_if", "one element");
  }
  // Loop: body input count, missing body, M not an integer, body cond not bool.
  {
    auto g = accumulate_loop();
    g->nodes[0].attr("body")->g->inputs.pop_back();
    expect_error(error_of(g, {i64(1), bscalar(true), fvec({1}, {1}), fvec({1}, {1})}), "the_loop", "inputs");
    auto g2 = accumulate_loop();
    g2->nodes[0].attrs.clear();
    expect_error(error_of(g2, {i64(1), bscalar(true), fvec({1}, {1}), fvec({1}, {1})}), "the_loop", "body");
    auto g3 = accumulate_loop();
    expect_error(error_of(g3, {fvec({1}, {1}), bscalar(true), fvec({1}, {1}), fvec({1}, {1})}), "the_loop", "M");
    auto g4 = accumulate_loop();
    auto& body = *g4->nodes[0].attr("body")->g;
    body.nodes[0] = node("Identity", {"acc_in"}, {"cond_out"});  // a float where cond belongs
    expect_error(error_of(g4, {i64(2), bscalar(true), fvec({1}, {1}), fvec({1}, {1})}), "the_loop", "cond");
  }
  // An error inside a body names the inner node too.
  {
    auto g = accumulate_loop();
    expect_error(error_of(g, {i64(2), bscalar(true), fvec({2}, {1, 1}), fvec({3}, {1, 1, 1})}), "the_loop", "Add");
  }
}
