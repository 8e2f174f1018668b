// The data-parallel collective kernels (com.onnxtrain GradientReduceStart / GradientReduceWait,
// ZeroAllGather) over MPI, on graphs built here (a model file may not contain them: the loader
// refuses them). Checks, on every rank:
//   - a reduction gives sum over ranks of contribution * G (against the value computed here);
//   - a Start whose Wait never runs (a run asking for the token only) leaves at most one reduction
//     in flight and one unwaited communicator job, however many runs (nothing accumulates);
//   - a Wait given a token no Start issued fails at once naming it (no wait for the timeout, no
//     process exit), and one whose gradients hold another element count than its Start's fails
//     before copying anything;
//   - ZeroAllGather refuses parts that do not fill this rank's block before copying, and a
//     negative `pieces` attribute when the kernel is created.
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/collectives_mpi_test
// Prints one summary line on rank 0; exits non-zero on any failure.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "kernels/registry.h"
#include "onnxtrain/error.h"
#include "runtime/executor.h"

using namespace onnxtrain;

namespace {

int g_rank = 0, g_size = 1, g_failures = 0, g_checks = 0;

void check(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    std::fprintf(stderr, "collectives_mpi_test: rank %d of %d: FAIL %s\n", g_rank, g_size, what.c_str());
  }
}

ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
              std::vector<ir::Attribute> attrs = {}) {
  ir::Node n;
  n.op_type = op;
  n.domain = "com.onnxtrain";
  n.name = op + "_" + out[0];
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

ir::ValueInfo decl(const std::string& name, DType dt, const Shape& shape) {
  return ir::ValueInfo{name, ir::TypeInfo::tensor(dt, std::vector<int64_t>(shape.begin(), shape.end())), ""};
}

ir::Attribute pieces(int64_t v) {
  ir::Attribute a;
  a.name = "pieces";
  a.type = ir::AttrType::kInt;
  a.i = v;
  return a;
}

Tensor filled(DType dt, const Shape& shape, double v) {
  Tensor t = Tensor::empty(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::kFloat32) t.data<float>()[i] = float(v + double(i));
    else if (dt == DType::kFloat64) t.data<double>()[i] = v + double(i);
    else t.data<int64_t>()[i] = int64_t(v) + i;
  }
  return t;
}

struct Graph {
  std::shared_ptr<ir::Graph> g = std::make_shared<ir::Graph>();
  std::unique_ptr<runtime::GraphExecutor> ex;
  void finish() {
    ex = std::make_unique<runtime::GraphExecutor>(g, OpsetMap{{"", 17}, {"com.onnxtrain", 1}}, ExecOptions{});
  }
  std::vector<Value> run(const std::vector<Tensor>& feeds, const std::vector<size_t>& outputs = {}) {
    std::vector<Value> vals;
    for (const auto& t : feeds) vals.push_back(Value::of(t));
    std::vector<const Value*> ptrs;
    for (auto& v : vals) ptrs.push_back(&v);
    return ex->run(ptrs, outputs);
  }
};

// The error message of fn(), or "" when it succeeds.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Start(c, G) -> token; Wait(token, G) -> R: outputs token, R.
Graph reduction(DType dt, int64_t n) {
  Graph r;
  r.g->inputs = {decl("c", DType::kFloat64, {1}), decl("G", dt, {n})};
  r.g->nodes.push_back(node("GradientReduceStart", {"c", "G"}, {"token"}));
  r.g->nodes.push_back(node("GradientReduceWait", {"token", "G"}, {"R"}));
  r.g->outputs = {decl("token", DType::kInt64, {1}), decl("R", dt, {n})};
  r.finish();
  return r;
}

void reduces_over_ranks() {
  Graph r = reduction(DType::kFloat64, 5);
  for (int round = 0; round < 3; ++round) {
    const auto out = r.run({filled(DType::kFloat64, {1}, 0.5), filled(DType::kFloat64, {5}, g_rank + 1.0 + round)});
    const double* got = out[1].tensor.data<double>();
    for (int64_t i = 0; i < 5; ++i) {
      double want = 0;
      for (int k = 0; k < g_size; ++k) want += 0.5 * (k + 1.0 + round + double(i));
      check(got[i] == want, "reduction element " + std::to_string(i) + ": " + std::to_string(got[i]) + " != " +
                                std::to_string(want));
    }
  }
}

void start_without_wait_does_not_accumulate() {
  Graph r = reduction(DType::kFloat32, 7);
  for (int i = 0; i < 20; ++i) {
    r.run({filled(DType::kFloat64, {1}, 1.0), filled(DType::kFloat32, {7}, 1.0)}, {0});  // the token only
    check(kernels::cpu::reductions_in_flight() <= 1,
          "run " + std::to_string(i) + ": " + std::to_string(kernels::cpu::reductions_in_flight()) +
              " reductions in flight after Starts without a Wait");
    check(distributed::Comm::world().unwaited() <= 1,
          "run " + std::to_string(i) + ": " + std::to_string(distributed::Comm::world().unwaited()) +
              " communicator jobs never waited for");
  }
  // The whole graph still reduces right after those runs.
  const auto out = r.run({filled(DType::kFloat64, {1}, 1.0), filled(DType::kFloat32, {7}, 2.0)});
  check(out[1].tensor.data<float>()[3] == float(g_size * 5.0), "reduction after Starts without a Wait");
  r.ex.reset();  // the Start kernel settles what it issued last
  check(kernels::cpu::reductions_in_flight() == 0, "a reduction stays in flight after its plan is gone");
  check(distributed::Comm::world().unwaited() == 0, "a communicator job stays unwaited after its plan is gone");
}

void made_up_token_fails_at_once() {
  Graph w;
  w.g->inputs = {decl("token", DType::kInt64, {1}), decl("G", DType::kFloat32, {4})};
  w.g->nodes.push_back(node("GradientReduceWait", {"token", "G"}, {"R"}));
  w.g->outputs = {decl("R", DType::kFloat32, {4})};
  w.finish();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { w.run({filled(DType::kInt64, {1}, 987654321), filled(DType::kFloat32, {4}, 0)}); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(has(e, "no reduction in flight for token 987654321"), "made-up token: '" + e + "'");
  check(s < 5, "made-up token: failed after " + std::to_string(s) + " s");
}

void wait_with_other_sizes_fails() {
  Graph r;
  r.g->inputs = {decl("c", DType::kFloat64, {1}), decl("G", DType::kFloat32, {4}), decl("H", DType::kFloat32, {64})};
  r.g->nodes.push_back(node("GradientReduceStart", {"c", "G"}, {"token"}));
  r.g->nodes.push_back(node("GradientReduceWait", {"token", "H"}, {"R"}));
  r.g->outputs = {decl("R", DType::kFloat32, {64})};
  r.finish();
  const std::string e = error_of([&] {
    r.run({filled(DType::kFloat64, {1}, 1), filled(DType::kFloat32, {4}, 1), filled(DType::kFloat32, {64}, 1)});
  });
  check(has(e, "is a reduction of 4 float elements") && has(e, "hold 64 float elements"),
        "Wait with more elements than its Start: '" + e + "'");
  check(kernels::cpu::reductions_in_flight() == 0, "the refused reduction stays in flight");
}

void zero_allgather_checks_parts() {
  Graph z;
  // Weights of 6 elements: blocks of ceil(6 / size); this rank's parts hold 5 elements.
  z.g->inputs = {decl("P", DType::kFloat32, {5}), decl("W", DType::kFloat32, {6})};
  z.g->nodes.push_back(node("ZeroAllGather", {"P", "W"}, {"W2"}, {pieces(1)}));
  z.g->outputs = {decl("W2", DType::kFloat32, {6})};
  z.finish();
  const int64_t block = (6 + g_size - 1) / g_size;
  const int64_t mine = std::min<int64_t>(6, block * (g_rank + 1)) - std::min<int64_t>(6, block * g_rank);
  const std::string e = error_of([&] { z.run({filled(DType::kFloat32, {5}, 1), filled(DType::kFloat32, {6}, 0)}); });
  if (mine == 5) return;  // a world where 5 is this rank's share (none with 6 weights)
  check(has(e, "the parts hold 5 elements, this rank's block " + std::to_string(mine)), "ZeroAllGather parts: '" + e + "'");

  Graph neg;
  neg.g->inputs = {decl("W", DType::kFloat32, {6})};
  neg.g->nodes.push_back(node("ZeroAllGather", {"W"}, {"W2"}, {pieces(-1)}));
  neg.g->outputs = {decl("W2", DType::kFloat32, {6})};
  neg.finish();
  const std::string e2 = error_of([&] { neg.run({filled(DType::kFloat32, {6}, 0)}); });
  check(has(e2, "attribute pieces = -1"), "ZeroAllGather pieces -1: '" + e2 + "'");
}

}  // namespace

int main() {
  try {
    distributed::Comm& comm = distributed::Comm::world();
    g_rank = comm.rank();
    g_size = comm.size();
    reduces_over_ranks();
    start_without_wait_does_not_accumulate();
    made_up_token_fails_at_once();
    wait_with_other_sizes_fails();
    zero_allgather_checks_parts();
    comm.barrier("the end of collectives_mpi_test");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives_mpi_test: rank %d: unexpected error: %s\n", g_rank, e.what());
    return 1;
  }
  if (g_rank == 0)
    std::printf("collectives_mpi_test: %d ranks, %d checks, %d failures\n", g_size, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
