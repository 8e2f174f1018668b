// The planner's passes one by one (src/runtime/plan.h), on small graphs and hand-made plans whose
// right answer is evident, then partial execution (forward now, backward later) against a naive
// double-precision reference.
#include <cmath>

#include "autodiff/builder.h"
#include "runtime/executor.h"
#include "runtime/plan.h"
#include "test_util.h"

using namespace onnxtrain;
using namespace onnxtrain::runtime;
using ot_test::make_node;
using ot_test::value_info;

namespace {

const OpsetMap kOpsets{{"", 17}};

// a = Relu(x); b = Neg(a); c = Exp(x) (unrelated to b); y = Add(b, w) with initializer w.
std::shared_ptr<ir::Graph> small_graph() {
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(value_info("x"));
  g->initializers.emplace_back("w", Tensor::from_vector<float>({2}, {1.f, 2.f}));
  g->initializers.emplace_back("k", Tensor::from_vector<float>({2}, {3.f, 4.f}));
  g->nodes.push_back(make_node("Relu", {"x"}, {"a"}));
  g->nodes.push_back(make_node("Neg", {"a"}, {"b"}));
  g->nodes.push_back(make_node("Exp", {"x"}, {"c"}));
  g->nodes.push_back(make_node("Add", {"b", "w"}, {"y"}));
  g->nodes.push_back(make_node("Mul", {"k", "k"}, {"kk"}));  // constant: folded
  g->nodes.push_back(make_node("Add", {"y", "kk"}, {"z"}));
  g->outputs = {value_info("y"), value_info("c"), value_info("z")};
  return g;
}

Slot arena_slot(const std::string& name, int64_t n) {
  Slot s;
  s.name = name;
  s.state = Slot::State::kStatic;
  s.shape_known = true;
  s.value = Value::of(Tensor::wrap(DType::kFloat32, {n}, nullptr));
  return s;
}

Step step(std::vector<int> in, std::vector<int> out, int phase = 0) {
  Step s;
  s.in = std::move(in);
  s.out = std::move(out);
  s.phase = phase;
  return s;
}

std::vector<int> order_of(const Plan& p) {
  std::vector<int> r;
  for (const auto& s : p.steps) r.push_back(s.out.empty() ? -1 : s.out[0]);
  return r;
}

}  // namespace

TEST(Planner, NeededNodesFollowOnlyWhatTheRootsRead) {
  auto g = small_graph();
  GraphIndex gi(*g, {}, {});
  auto needed = planner::needed_nodes(gi, {"y"});
  EXPECT_EQ(needed, (std::vector<bool>{true, true, false, true, false, false}));
  needed = planner::needed_nodes(gi, {"c", "z"});
  EXPECT_EQ(needed, (std::vector<bool>{true, true, true, true, true, true}));
  EXPECT_EQ(planner::needed_nodes(gi, {"x"}), std::vector<bool>(6, false));  // an input: no node
}

TEST(Planner, SlotsMarkResultsAndStateUpdates) {
  auto g = small_graph();
  GraphIndex gi(*g, {}, {"w"});
  Plan p;
  PlanRequest req;
  req.outputs = {"c"};
  req.updates = {{"y", "w"}};
  planner::make_slots(p, gi, planner::needed_nodes(gi, {"c", "y"}), req);
  EXPECT_TRUE(p.slots[size_t(p.id("c"))].graph_output);
  EXPECT_FALSE(p.slots[size_t(p.id("y"))].graph_output);
  EXPECT_EQ(p.slots[size_t(p.id("y"))].state_target, p.id("w"));
  EXPECT_EQ(p.ids.count("kk"), 0u);  // not needed: no slot
  // A state must be a mutable initializer, updated once.
  Plan q;
  req.updates = {{"y", "k"}};
  EXPECT_THROW(planner::make_slots(q, gi, planner::needed_nodes(gi, {"y"}), req), InvalidArgument);
  Plan r;
  req.updates = {{"y", "w"}, {"b", "w"}};
  EXPECT_THROW(planner::make_slots(r, gi, planner::needed_nodes(gi, {"y", "b"}), req), InvalidArgument);
  Plan u;
  req.updates = {};
  req.outputs = {"nope"};
  EXPECT_THROW(planner::make_slots(u, gi, planner::needed_nodes(gi, {}), req), InvalidArgument);
}

TEST(Planner, InputsAreFedBoundOrConstant) {
  auto g = small_graph();
  g->inputs.push_back(value_info("unfed"));
  GraphIndex gi(*g, {}, {"w"});
  Plan p;
  PlanRequest req;
  req.outputs = {"z"};
  planner::make_slots(p, gi, planner::needed_nodes(gi, req.outputs), req);
  Value x = Value::of(Tensor::zeros(DType::kFloat32, {2}));
  planner::bind_inputs(p, gi, {&x, nullptr}, req);
  const Slot& sx = p.slots[size_t(p.id("x"))];
  EXPECT_EQ(sx.state, Slot::State::kInput);
  EXPECT_FALSE(sx.bound);
  EXPECT_EQ(sx.value.tensor.shape(), (Shape{2}));
  EXPECT_EQ(p.input_slots[0], p.id("x"));
  const Slot& sw = p.slots[size_t(p.id("w"))];
  EXPECT_EQ(sw.state, Slot::State::kInput);  // mutable: bound once, never folded
  EXPECT_TRUE(sw.bound);
  EXPECT_EQ(p.slots[size_t(p.id("k"))].state, Slot::State::kConstant);
  EXPECT_EQ(p.input_slots[1], -1);
  EXPECT_EQ(p.missing.count("unfed"), 1u);
}

TEST(Planner, PrepareFoldsConstantNodes) {
  auto g = small_graph();
  GraphIndex gi(*g, {}, {});
  Plan p;
  PlanRequest req;
  req.outputs = {"z"};
  auto needed = planner::needed_nodes(gi, req.outputs);
  planner::make_slots(p, gi, needed, req);
  Value x = Value::of(Tensor::zeros(DType::kFloat32, {2}));
  planner::bind_inputs(p, gi, {&x}, req);
  const ProviderSet ps{ExecOptions{}};
  p.node_provider = planner::assign_providers(gi, needed, kOpsets, ps);
  planner::prepare_and_fold(p, gi, needed, planner::node_phases(gi, needed, req), kOpsets, ExecOptions{}, req, ps);
  // Relu, Neg, Add, Add run; Mul(k, k) was evaluated now.
  EXPECT_EQ(p.steps.size(), 4u);
  EXPECT_EQ(p.stats.folded_nodes, 1u);
  const Slot& kk = p.slots[size_t(p.id("kk"))];
  ASSERT_EQ(kk.state, Slot::State::kConstant);
  EXPECT_EQ(kk.value.tensor.data<float>()[1], 16.f);
  EXPECT_EQ(p.slots[size_t(p.id("z"))].state, Slot::State::kOutput);
  EXPECT_EQ(p.slots[size_t(p.id("a"))].state, Slot::State::kStatic);
}

TEST(Planner, ScheduleRunsReadersBeforeTheInPlaceWriter) {
  // Slots: 0 x (input), 1 a, 2 b, 3 c. Step order given: A: a=f(x); W: b overwrites a in place;
  // R: c=g(a) — R reads a, so it must run before W.
  Plan p;
  p.slots = {arena_slot("x", 4), arena_slot("a", 4), arena_slot("b", 4), arena_slot("c", 4)};
  p.steps.push_back(step({0}, {1}));
  p.steps.push_back(step({1}, {2}));
  p.steps.back().inplace = {{0, 0}};
  p.steps.push_back(step({1}, {3}));
  planner::schedule_steps(p);
  EXPECT_EQ(order_of(p), (std::vector<int>{1, 3, 2}));
  // Without the declaration, file order stands.
  Plan q;
  q.slots = p.slots;
  q.steps.push_back(step({0}, {1}));
  q.steps.push_back(step({1}, {2}));
  q.steps.push_back(step({1}, {3}));
  planner::schedule_steps(q);
  EXPECT_EQ(order_of(q), (std::vector<int>{1, 2, 3}));
  // A reader that depends on the writer cannot move before it.
  Plan r;
  r.slots = p.slots;
  r.steps.push_back(step({0}, {1}));
  r.steps.push_back(step({1}, {2}));
  r.steps.back().inplace = {{0, 0}};
  r.steps.push_back(step({1, 2}, {3}));
  planner::schedule_steps(r);
  EXPECT_EQ(order_of(r), (std::vector<int>{1, 2, 3}));
}

TEST(Planner, ScheduleKeepsTheForwardPartFirst) {
  Plan p;
  p.slots = {arena_slot("x", 1), arena_slot("a", 1), arena_slot("b", 1), arena_slot("c", 1)};
  p.steps.push_back(step({0}, {1}, 1));  // backward, listed first
  p.steps.push_back(step({0}, {2}, 0));
  p.steps.push_back(step({2}, {3}, 0));
  planner::schedule_steps(p);
  EXPECT_EQ(order_of(p), (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(p.cut, 2u);
}

TEST(Planner, LivenessSpansProducerToLastReader) {
  Plan p;
  p.slots = {arena_slot("x", 1), arena_slot("a", 1), arena_slot("b", 1), arena_slot("c", 1)};
  p.slots[0].state = Slot::State::kInput;
  p.slots[3].graph_output = true;
  p.steps.push_back(step({0}, {1}));
  p.steps.push_back(step({1}, {2}));
  p.steps.push_back(step({1, 2}, {3}));
  planner::compute_liveness(p);
  EXPECT_EQ(p.slots[1].producer, 0);
  EXPECT_EQ(p.slots[1].last_use, 2);
  EXPECT_EQ(p.slots[2].producer, 1);
  EXPECT_EQ(p.slots[2].last_use, 2);
  EXPECT_EQ(p.slots[3].last_use, 3);  // a result lives to the end of the run
  // A view keeps what it views alive.
  p.slots.push_back(arena_slot("v", 1));
  p.slots[4].alias_root = 2;
  p.steps.push_back(step({4}, {}));
  planner::compute_liveness(p);
  EXPECT_EQ(p.slots[2].last_use, 3);
}

TEST(Planner, InPlaceAliasesADeadInputAndCopiesALiveOne) {
  // 0 x; 1 a = f(x); 2 b = a updated in place (a dead afterwards): alias.
  // 3 c = b updated in place, but b is read later by step 3: copy.
  Plan p;
  p.slots = {arena_slot("x", 8), arena_slot("a", 8), arena_slot("b", 8), arena_slot("c", 8), arena_slot("d", 8)};
  p.slots[0].state = Slot::State::kInput;
  p.slots[4].graph_output = true;
  p.steps.push_back(step({0}, {1}));
  p.steps.push_back(step({1}, {2}));
  p.steps.back().inplace = {{0, 0}};
  p.steps.push_back(step({2}, {3}));
  p.steps.back().inplace = {{0, 0}};
  p.steps.push_back(step({2, 3}, {4}));
  planner::compute_liveness(p);
  planner::assign_inplace(p);
  EXPECT_EQ(p.slots[2].alias_root, 1);
  EXPECT_GE(p.slots[1].last_use, 3);  // a's memory now carries b to its last reader
  EXPECT_TRUE(p.steps[1].pre_copy.empty());
  EXPECT_EQ(p.slots[3].alias_root, -1);
  EXPECT_EQ(p.steps[2].pre_copy, (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_EQ(p.stats.inplace_aliased, 1u);
  EXPECT_EQ(p.stats.inplace_copied, 1u);
}

TEST(Planner, StateUpdateWritesIntoTheStateWhenNothingReadsItLater) {
  Tensor w = Tensor::zeros(DType::kFloat32, {8});
  Plan p;
  p.slots = {arena_slot("w", 8), arena_slot("g", 8), arena_slot("w_new", 8), arena_slot("r", 8)};
  p.slots[0].state = Slot::State::kInput;
  p.slots[0].bound = true;
  p.slots[0].value = Value::of(w);
  p.slots[2].state_target = 0;
  p.steps.push_back(step({0}, {1}));      // g = f(w)
  p.steps.push_back(step({0, 1}, {2}));   // w_new = opt(w, g), in place over w
  p.steps.back().inplace = {{0, 0}};
  planner::compute_liveness(p);
  planner::assign_inplace(p);
  EXPECT_TRUE(p.slots[2].in_state);
  EXPECT_EQ(p.slots[2].value.tensor.raw_data(), w.raw_data());
  EXPECT_EQ(p.stats.state_in_place, 1u);
  // With a reader of w after the update, the update goes to its own buffer and is copied at the end.
  Plan q;
  q.slots = {arena_slot("w", 8), arena_slot("g", 8), arena_slot("w_new", 8), arena_slot("r", 8)};
  q.slots[0] = p.slots[0];
  q.slots[2].state_target = 0;
  q.steps = {step({0}, {1}), step({0, 1}, {2}), step({0}, {3})};
  q.steps[1].inplace = {{0, 0}};
  planner::compute_liveness(q);
  planner::assign_inplace(q);
  EXPECT_FALSE(q.slots[2].in_state);
  EXPECT_EQ(q.steps[1].pre_copy.size(), 1u);
  planner::wire(q, PlanRequest{});
  EXPECT_EQ(q.state_copies, (std::vector<std::pair<int, int>>{{2, 0}}));
}

TEST(Planner, BlocksAliveTogetherNeverOverlap) {
  std::vector<planner::Block> b = {{128, 0, 1, 0}, {64, 1, 2, 1}, {128, 2, 3, 2}, {64, 3, 3, 3}};
  const size_t total = planner::place_blocks(b);
  for (size_t i = 0; i < b.size(); ++i)
    for (size_t j = i + 1; j < b.size(); ++j) {
      const bool together = b[i].begin <= b[j].end && b[j].begin <= b[i].end;
      const bool overlap = b[i].offset < b[j].offset + int64_t(b[j].bytes) && b[j].offset < b[i].offset + int64_t(b[i].bytes);
      EXPECT_FALSE(together && overlap) << i << " " << j;
    }
  // The two 128-byte blocks are never alive together: they share memory; peak = 128 + 64.
  EXPECT_EQ(b[0].offset, b[2].offset);
  EXPECT_EQ(total, 192u);
  // Best fit: largest first puts t1 at 0 and p1, p2, t2, p3 after it; e (alive from step 1, when
  // t1 and t2 are dead) then has gaps [0, 128) and [256, 320): the smallest that holds it wins.
  std::vector<planner::Block> c = {{128, 0, 0, 0}, {64, 0, 9, 1}, {64, 0, 9, 2},
                                   {64, 0, 0, 3},  {64, 0, 9, 4}, {64, 1, 9, 5}};
  planner::place_blocks(c);
  EXPECT_EQ(c[0].offset, 0);
  EXPECT_EQ(c[3].offset, 256);
  EXPECT_EQ(c[5].offset, 256);
}

TEST(Planner, LayoutAndWireGiveEachStepItsMemory) {
  auto g = small_graph();
  GraphExecutor ex(g, kOpsets, ExecOptions{});
  Value x = Value::of(Tensor::from_vector<float>({2}, {-1.f, 2.f}));
  auto out = ex.run({&x});
  ASSERT_EQ(out.size(), 3u);
  // y = -relu(x) + w, c = exp(x), z = y + k*k
  EXPECT_EQ(out[0].tensor.data<float>()[0], 1.f);
  EXPECT_EQ(out[0].tensor.data<float>()[1], 0.f);
  EXPECT_FLOAT_EQ(out[1].tensor.data<float>()[1], std::exp(2.f));
  EXPECT_EQ(out[2].tensor.data<float>()[1], 16.f);
  const PlanStats s = ex.last_stats();
  EXPECT_EQ(s.steps, 5u);
  EXPECT_EQ(s.folded_nodes, 1u);
  EXPECT_GT(s.arena_bytes, 0u);  // a and b (y, c, z are results)
  EXPECT_LE(s.arena_bytes, s.naive_bytes);
}

// ---------------------------------------------------------------- partial execution
namespace {

// Forward: Y = MatMul(X, W) [2x3 · 3x4]; L = ReduceSum(Y * dY) with dY a graph input, so that
// dL/dW = X^T dY: the vector-Jacobian product an agent computes from an output gradient.
ir::Model vjp_model() {
  ir::Model m;
  m.opsets = {{"", 17}};
  m.graph = std::make_shared<ir::Graph>();
  auto& g = *m.graph;
  g.inputs = {value_info("X", DType::kFloat32, {2, 3}), value_info("dY", DType::kFloat32, {2, 4})};
  std::mt19937 rng(3);
  g.initializers.emplace_back("W", ot_test::random_tensor(DType::kFloat32, {3, 4}, rng));
  g.nodes.push_back(make_node("MatMul", {"X", "W"}, {"Y"}));
  g.nodes.push_back(make_node("Mul", {"Y", "dY"}, {"P"}));
  g.nodes.push_back(make_node("ReduceSum", {"P"}, {"L"}, {ot_test::attr_int("keepdims", 0)}));
  g.outputs = {value_info("Y", DType::kFloat32, {2, 4}), value_info("L", DType::kFloat32, {})};
  return autodiff::build_gradient_model(m, {"Y", "L"}, {"W"}, "L");
}

std::vector<double> x_t_dy(const Tensor& x, const Tensor& dy) {
  auto X = ot_test::to_double(x), D = ot_test::to_double(dy);
  std::vector<double> r(12, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int n = 0; n < 2; ++n) r[size_t(i * 4 + j)] += X[size_t(n * 3 + i)] * D[size_t(n * 4 + j)];
  return r;
}

struct Agent {
  ir::Model m = vjp_model();
  GraphExecutor ex{m.graph, m.opsets, ExecOptions{}};
  size_t req = 0;
  Agent() {
    PlanRequest r;
    r.outputs = {"Y"};
    r.backward_inputs = {{"dY", "Y"}};
    r.backward_outputs = {"W_grad"};
    req = ex.add_request(r);
  }
  std::vector<const Value*> feeds(const Value& x) {
    std::vector<const Value*> f(ex.input_names().size(), nullptr);
    f[0] = &x;
    return f;
  }
};

}  // namespace

TEST(PartialExecution, TwoForwardsInFlightEachGetTheirOwnBackward) {
  Agent a;
  std::mt19937 rng(5);
  Value x1 = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 3}, rng));
  Value x2 = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 3}, rng));
  Value d1 = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 4}, rng));
  Value d2 = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 4}, rng));
  PartialRun s1, s2;
  std::vector<Value> y1, y2, g1, g2;
  a.ex.run_forward(a.feeds(x1), a.req, s1, y1);
  a.ex.run_forward(a.feeds(x2), a.req, s2, y2);
  EXPECT_TRUE(s1.pending());
  EXPECT_TRUE(s2.pending());
  // Y = X W, checked against a naive product.
  const auto W = ot_test::to_double(*a.m.graph->initializer("W"));
  for (const auto& [x, y] : {std::pair{&x1, &y1}, std::pair{&x2, &y2}}) {
    const auto X = ot_test::to_double(x->tensor);
    std::vector<double> ref(8, 0.0);
    for (int n = 0; n < 2; ++n)
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 3; ++i) ref[size_t(n * 4 + j)] += X[size_t(n * 3 + i)] * W[size_t(i * 4 + j)];
    EXPECT_TRUE(ot_test::all_close((*y)[0].tensor, {2, 4}, ref));
  }
  // Backwards in the other order.
  a.ex.run_backward(s2, {&d2}, g2);
  a.ex.run_backward(s1, {&d1}, g1);
  EXPECT_FALSE(s1.pending());
  EXPECT_TRUE(ot_test::all_close(g1[0].tensor, {3, 4}, x_t_dy(x1.tensor, d1.tensor)));
  EXPECT_TRUE(ot_test::all_close(g2[0].tensor, {3, 4}, x_t_dy(x2.tensor, d2.tensor)));
  // States are reusable once finished; their frames are recycled.
  PartialRun s3;
  std::vector<Value> y3, g3;
  a.ex.run_forward(a.feeds(x2), a.req, s3, y3);
  a.ex.run_backward(s3, {&d1}, g3);
  EXPECT_TRUE(ot_test::all_close(g3[0].tensor, {3, 4}, x_t_dy(x2.tensor, d1.tensor)));
}

TEST(PartialExecution, MisusedStatesAreClearErrors) {
  Agent a;
  std::mt19937 rng(6);
  Value x = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 3}, rng));
  Value d = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 4}, rng));
  Value bad = Value::of(ot_test::random_tensor(DType::kFloat32, {4, 2}, rng));
  std::vector<Value> r;
  auto expect_error = [](auto&& f, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning: " << words;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  PartialRun never;
  expect_error([&] { a.ex.run_backward(never, {&d}, r); }, "has not run a forward pass");
  PartialRun s;
  a.ex.run_forward(a.feeds(x), a.req, s, r);
  expect_error([&] { a.ex.run_forward(a.feeds(x), a.req, s, r); }, "has not run yet");
  expect_error([&] { a.ex.run_backward(s, {&bad}, r); }, "backward input 'dY' must be float[2, 4]");
  a.ex.run_backward(s, {&d}, r);
  expect_error([&] { a.ex.run_backward(s, {&d}, r); }, "already ran");
  // Feeding the backward input to the forward part, or a forward output that needs it.
  auto f = a.feeds(x);
  f[1] = &d;
  PartialRun t;
  expect_error([&] { a.ex.run_forward(f, a.req, t, r); }, "is a backward input");
  PlanRequest wrong;
  wrong.outputs = {"L"};
  wrong.backward_inputs = {{"dY", "L"}};
  wrong.backward_outputs = {"W_grad"};
  expect_error([&] { a.ex.add_request(wrong); }, "depends on a backward input");
  // A state of another executor.
  Agent b;
  PartialRun other;
  b.ex.run_forward(b.feeds(x), b.req, other, r);
  expect_error([&] { a.ex.run_backward(other, {&d}, r); }, "another executor");
}

TEST(PartialExecution, AbandonedForwardReleasesItsMemory) {
  Agent a;
  std::mt19937 rng(7);
  Value x = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 3}, rng));
  Value d = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 4}, rng));
  std::vector<Value> r;
  {
    PartialRun s;
    a.ex.run_forward(a.feeds(x), a.req, s, r);
  }  // never finished: its frame returns to the pool
  PartialRun s;
  a.ex.run_forward(a.feeds(x), a.req, s, r);
  a.ex.run_backward(s, {&d}, r);
  EXPECT_TRUE(ot_test::all_close(r[0].tensor, {3, 4}, x_t_dy(x.tensor, d.tensor)));
}

TEST(PartialExecution, ManyForwardsInFlightPoolAtMostAFewFrames) {
  // 300 forward parts in flight need 300 frames; once their backward parts ran, the plan keeps at
  // most Plan::kMaxPooledFrames of them for later runs (the rest is freed), every result exact.
  Agent a;
  std::mt19937 rng(8);
  std::vector<Value> xs, ds;
  for (int i = 0; i < 300; ++i) {
    xs.push_back(Value::of(ot_test::random_tensor(DType::kFloat32, {2, 3}, rng)));
    ds.push_back(Value::of(ot_test::random_tensor(DType::kFloat32, {2, 4}, rng)));
  }
  std::vector<PartialRun> states(300);
  std::vector<Value> r;
  for (size_t i = 0; i < states.size(); ++i) a.ex.run_forward(a.feeds(xs[i]), a.req, states[i], r);
  EXPECT_EQ(a.ex.pooled_frames(), 0u);
  for (size_t i = 0; i < states.size(); ++i) {
    a.ex.run_backward(states[i], {&ds[i]}, r);
    ASSERT_TRUE(ot_test::all_close(r[0].tensor, {3, 4}, x_t_dy(xs[i].tensor, ds[i].tensor))) << i;
  }
  EXPECT_EQ(a.ex.pooled_frames(), Plan::kMaxPooledFrames);
}

TEST(PartialExecution, StateOfADestroyedExecutorIsRefusedByItsSuccessor) {
  // Executors are told apart by an id that is never reused, not by an address a later executor
  // may get: a state whose executor is gone is refused, not run against freed plans.
  std::mt19937 rng(9);
  Value x = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 3}, rng));
  Value d = Value::of(ot_test::random_tensor(DType::kFloat32, {2, 4}, rng));
  std::vector<Value> r;
  PartialRun s;
  uint64_t first = 0;
  {
    auto a = std::make_unique<Agent>();
    first = a->ex.id();
    a->ex.run_forward(a->feeds(x), a->req, s, r);
  }
  for (int i = 0; i < 4; ++i) {  // new executors, some likely at the freed one's address
    auto b = std::make_unique<Agent>();
    EXPECT_NE(b->ex.id(), first);
    try {
      b->ex.run_backward(s, {&d}, r);
      ADD_FAILURE() << "a state of a destroyed executor was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("another executor"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(s.pending());  // still holds its forward run, freed with it
}
