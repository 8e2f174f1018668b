// Executor: plan caching, arena reuse by liveness, constant folding, views, data-dependent shapes
// (allocations per run: tests/alloc/test_step_allocations.cpp).
#include <cstdio>
#include <fstream>

#include "core/parallel.h"
#include "runtime/executor.h"
#include "test_util.h"

using namespace onnxtrain;

namespace {

using ot_test::make_node;
ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
              std::vector<ir::Attribute> attrs = {}) {
  return make_node(op, std::move(in), std::move(out), std::move(attrs));
}
ir::ValueInfo vi(const std::string& name, DType dt = DType::kFloat32) { return ot_test::value_info(name, dt); }

// x -> Relu -> Relu -> ... (n times) -> y
std::shared_ptr<ir::Graph> relu_chain(int n) {
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(vi("x"));
  std::string prev = "x";
  for (int i = 0; i < n; ++i) {
    std::string cur = i + 1 == n ? "y" : ot_test::numbered("h", i);
    g->nodes.push_back(node("Relu", {prev}, {cur}));
    prev = cur;
  }
  g->outputs.push_back(vi("y"));
  return g;
}

using ot_test::run;

const OpsetMap kOpsets{{"", 17}};

}  // namespace

TEST(Executor, ArenaReusesBuffersByLiveness) {
  runtime::GraphExecutor ex(relu_chain(20), kOpsets, ExecOptions{});
  Tensor x = Tensor::from_vector<float>({1024}, std::vector<float>(1024, -1.f));
  auto y = run(ex, {x});
  ASSERT_TRUE(ot_test::all_close(y[0].tensor, {1024}, std::vector<double>(1024, 0.0)));
  auto st = ex.last_stats();
  EXPECT_EQ(st.steps, 20u);
  EXPECT_EQ(st.naive_bytes, 19u * 4096u);  // 19 intermediates of 4 KiB
  EXPECT_EQ(st.arena_bytes, 2u * 4096u);   // a chain needs two alternating buffers
}

TEST(Executor, PlansAreCachedPerShapeSignature) {
  runtime::GraphExecutor ex(relu_chain(3), kOpsets, ExecOptions{});
  run(ex, {Tensor::zeros(DType::kFloat32, {4})});
  run(ex, {Tensor::zeros(DType::kFloat32, {4})});
  EXPECT_EQ(ex.num_plans(), 1u);
  run(ex, {Tensor::zeros(DType::kFloat32, {5})});
  EXPECT_EQ(ex.num_plans(), 2u);
}

TEST(Executor, ConstantSubgraphsAreFolded) {
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(vi("x"));
  g->initializers.emplace_back("a", Tensor::from_vector<float>({2}, {1, 2}));
  g->initializers.emplace_back("b", Tensor::from_vector<float>({2}, {10, 20}));
  g->nodes.push_back(node("Add", {"a", "b"}, {"c"}));  // constant: folded
  g->nodes.push_back(node("Mul", {"x", "c"}, {"y"}));
  g->outputs.push_back(vi("y"));
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{});
  auto y = run(ex, {Tensor::from_vector<float>({2}, {2, 3})});
  EXPECT_TRUE(ot_test::all_close(y[0].tensor, {2}, {22, 66}));
  EXPECT_EQ(ex.last_stats().folded_nodes, 1u);
  EXPECT_EQ(ex.last_stats().steps, 1u);
}

TEST(Executor, MutableInitializersAreNotFolded) {
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(vi("x"));
  g->initializers.emplace_back("w", Tensor::from_vector<float>({2}, {1, 2}));
  g->nodes.push_back(node("Relu", {"w"}, {"rw"}));
  g->nodes.push_back(node("Mul", {"x", "rw"}, {"y"}));
  g->outputs.push_back(vi("y"));
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{}, {}, {"w"});
  run(ex, {Tensor::from_vector<float>({2}, {1, 1})});
  EXPECT_EQ(ex.last_stats().folded_nodes, 0u);
  // An in-place update of the weight is seen by the next run.
  g->initializers[0].second.data<float>()[0] = 5.f;
  auto y = run(ex, {Tensor::from_vector<float>({2}, {1, 1})});
  EXPECT_TRUE(ot_test::all_close(y[0].tensor, {2}, {5, 2}));
}

TEST(Executor, ReshapeIsAViewOfTheArena) {
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(vi("x"));
  g->initializers.emplace_back("s", Tensor::from_vector<int64_t>({2}, {2, 8}));
  g->nodes.push_back(node("Relu", {"x"}, {"a"}));
  g->nodes.push_back(node("Reshape", {"a", "s"}, {"b"}));
  g->nodes.push_back(node("Relu", {"b"}, {"y"}));
  g->outputs.push_back(vi("y"));
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{});
  std::vector<float> xs(16);
  for (int i = 0; i < 16; ++i) xs[size_t(i)] = float(i - 8);
  auto y = run(ex, {Tensor::from_vector<float>({16}, xs)});
  std::vector<double> e;
  for (float v : xs) e.push_back(v > 0 ? v : 0);
  EXPECT_TRUE(ot_test::all_close(y[0].tensor, {2, 8}, e));
  EXPECT_EQ(ex.last_stats().arena_bytes, 64u);  // 'a' only; 'b' views it
}

TEST(Executor, ViewOfGraphInputAndOutputs) {
  // Reshape of a graph input is a view rebound every run; a graph output that is a graph input
  // is returned as a copy.
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(vi("x"));
  g->initializers.emplace_back("s", Tensor::from_vector<int64_t>({1}, {-1}));
  g->nodes.push_back(node("Reshape", {"x", "s"}, {"flat"}));
  g->nodes.push_back(node("Relu", {"flat"}, {"y"}));
  g->outputs.push_back(vi("y"));
  g->outputs.push_back(vi("x"));
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{});
  for (float base : {-1.f, 3.f}) {
    Tensor x = Tensor::from_vector<float>({2, 2}, {base, base + 1, base + 2, base + 3});
    auto y = run(ex, {x});
    std::vector<double> e;
    for (int i = 0; i < 4; ++i) e.push_back(std::max(0.f, base + float(i)));
    EXPECT_TRUE(ot_test::all_close(y[0].tensor, {4}, e));
    EXPECT_TRUE(ot_test::all_close(y[1].tensor, {2, 2}, {base, base + 1, base + 2, base + 3}));
    EXPECT_NE(y[1].tensor.raw_data(), x.raw_data());
  }
}

TEST(Executor, DataDependentShapeIsPreparedAtRunTime) {
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(vi("x"));
  g->inputs.push_back(vi("shape", DType::kInt64));
  g->nodes.push_back(node("Reshape", {"x", "shape"}, {"r"}));
  g->nodes.push_back(node("Relu", {"r"}, {"y"}));
  g->outputs.push_back(vi("y"));
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{});
  Tensor x = Tensor::from_vector<float>({6}, {-1, 2, -3, 4, -5, 6});
  auto y1 = run(ex, {x, Tensor::from_vector<int64_t>({2}, {2, 3})});
  EXPECT_TRUE(ot_test::all_close(y1[0].tensor, {2, 3}, {0, 2, 0, 4, 0, 6}));
  auto y2 = run(ex, {x, Tensor::from_vector<int64_t>({2}, {3, 2})});
  EXPECT_TRUE(ot_test::all_close(y2[0].tensor, {3, 2}, {0, 2, 0, 4, 0, 6}));
  EXPECT_EQ(ex.last_stats().dynamic_steps, 2u);
}

TEST(Executor, OnlyNodesNeededForRequestedOutputsRun) {
  auto g = relu_chain(4);
  g->nodes.push_back(node("Relu", {"x"}, {"side"}));
  g->outputs.push_back(vi("side"));
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{});
  Value x = Value::of(Tensor::zeros(DType::kFloat32, {3}));
  auto out = ex.run({&x}, {1});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(ex.last_stats().steps, 1u);
}

TEST(Executor, KernelErrorsNameTheNode) {
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(vi("a"));
  g->inputs.push_back(vi("b"));
  g->nodes.push_back(node("Add", {"a", "b"}, {"y"}));
  g->outputs.push_back(vi("y"));
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{});
  try {
    run(ex, {Tensor::zeros(DType::kFloat32, {2}), Tensor::zeros(DType::kFloat32, {3})});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Add_y"), std::string::npos) << e.what();
  }
  // The executor stays usable after an error.
  auto y = run(ex, {Tensor::zeros(DType::kFloat32, {2}), Tensor::zeros(DType::kFloat32, {2})});
  EXPECT_EQ(y[0].tensor.numel(), 2);
}

TEST(Executor, ThreadCountsGiveSameResults) {
  std::mt19937 rng(7);
  Tensor a = ot_test::random_tensor(DType::kFloat32, {64, 257}, rng), b = ot_test::random_tensor(DType::kFloat32, {257}, rng);
  ot_test::RunOptions one, two;
  two.threads = 2;
  auto y1 = ot_test::run_node("Add", {a, b}, {}, one);
  auto y2 = ot_test::run_node("Add", {a, b}, {}, two);
  EXPECT_TRUE(ot_test::all_close(y2[0], y1[0].shape(), ot_test::to_double(y1[0]), 0, 0));
}

// intra_op_num_threads = 0's budget from OMP_NUM_THREADS (what the OpenMP runtime would take):
// a positive integer or a list's first entry, at most the cores; anything else, the cores.
TEST(Executor, DefaultThreadBudgetReadsOmpNumThreads) {
  using onnxtrain::threads_from_env;
  EXPECT_EQ(threads_from_env("1", 8), 1);
  EXPECT_EQ(threads_from_env("3", 8), 3);
  EXPECT_EQ(threads_from_env("4,2", 8), 4);
  EXPECT_EQ(threads_from_env("64", 8), 8);  // buffers per thread are sized for the cores
  for (const char* v : {"", "0", "-2", "abc", "2x", "99999999999999999999"}) EXPECT_EQ(threads_from_env(v, 8), 8) << v;
  EXPECT_EQ(threads_from_env(nullptr, 6), 6);
  EXPECT_GE(onnxtrain::default_threads(), 1);
  EXPECT_LE(onnxtrain::default_threads(), onnxtrain::hardware_threads());
}

TEST(Executor, ViewsOfDynamicAliasesKeepTheirMemoryAlive) {
  // d = ReduceSum(m, axes from NonZero: empty, noop) is a run-time view of m; r = Reshape(d) a view
  // of d. m's arena block must outlive r's last use, though m's last direct reader is the
  // ReduceSum (n, computed later, would otherwise take m's place).
  auto g = std::make_shared<ir::Graph>();
  g->inputs = {vi("x"), vi("big", DType::kInt64)};  // an input: nothing below folds at plan time
  auto i64 = [](std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); };
  g->initializers = {{"flat", i64({-1})}, {"shape", i64({64})}};
  g->nodes = {node("Mul", {"x", "x"}, {"m"}),
              node("Shape", {"x"}, {"sx"}),
              node("Equal", {"sx", "big"}, {"eq"}),
              node("NonZero", {"eq"}, {"nz"}),
              node("Reshape", {"nz", "flat"}, {"axes"}),
              node("ReduceSum", {"m", "axes"}, {"d"}, {ot_test::attr_int("noop_with_empty_axes", 1)}),
              node("Reshape", {"d", "shape"}, {"r"}),
              node("Add", {"x", "x"}, {"n"}),
              node("Add", {"r", "n"}, {"y"})};
  g->outputs = {vi("y")};
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{});
  std::vector<float> xv(64);
  std::vector<double> want(64);
  for (size_t i = 0; i < 64; ++i) {
    xv[i] = float(i) * 0.5f;
    want[i] = double(xv[i]) * xv[i] + 2.0 * xv[i];
  }
  auto y = run(ex, {Tensor::from_vector<float>({64}, xv), i64({1000})});
  EXPECT_TRUE(ot_test::all_close(y[0].tensor, {64}, want));
}

TEST(Executor, PlansOfManyShapesShareOneArena) {
  // 21 batch sizes: one plan each, but the arena plain runs use is the largest plan's (grown when a
  // larger one comes), not the sum of the plans' arenas; every result stays exact.
  runtime::GraphExecutor ex(relu_chain(4), kOpsets, ExecOptions{});
  size_t largest = 0, sum = 0;
  std::mt19937 rng(12);
  for (int n : {3, 1, 7, 21, 2, 9, 14, 5, 11, 18, 6, 4, 20, 8, 13, 10, 17, 12, 15, 19, 16}) {
    const Tensor x = ot_test::random_tensor(DType::kFloat32, {n, 1024}, rng);
    const auto y = run(ex, {x});
    std::vector<double> want = ot_test::to_double(x);
    for (double& v : want) v = v > 0 ? v : 0;
    ASSERT_TRUE(ot_test::all_close(y[0].tensor, {n, 1024}, want)) << n;
    const size_t a = ex.last_stats().arena_bytes;
    EXPECT_EQ(a, size_t(2 * n * 4096));  // two alternating buffers of the chain
    largest = std::max(largest, a);
    sum += a;
  }
  EXPECT_EQ(ex.num_plans(), 21u);
  EXPECT_EQ(ex.shared_arena_bytes(), runtime::arena_align(largest));
  EXPECT_LT(ex.shared_arena_bytes() * 10, sum);
  // Plans made before the arena grew still run right over the grown one.
  const Tensor x = ot_test::random_tensor(DType::kFloat32, {3, 1024}, rng);
  std::vector<double> want = ot_test::to_double(x);
  for (double& v : want) v = v > 0 ? v : 0;
  EXPECT_TRUE(ot_test::all_close(run(ex, {x})[0].tensor, {3, 1024}, want));
}

TEST(Executor, WithoutMemoryPatternNothingIsKeptBetweenRuns) {
  ExecOptions o;
  o.keep_memory = false;
  runtime::GraphExecutor ex(relu_chain(4), kOpsets, o);
  run(ex, {Tensor::zeros(DType::kFloat32, {8, 1024})});
  EXPECT_EQ(ex.shared_arena_bytes(), 0u);
}

// run_into writes into the caller's tensors although the caller still holds them (IOBinding's
// preallocated outputs); a tensor of another shape, or an output the graph does not compute (its
// input given back), gets a new value and the caller's tensor is left as it was.
TEST(Executor, RunIntoWritesTheCallersBuffers) {
  auto g = relu_chain(2);
  g->outputs.push_back(vi("x"));
  runtime::GraphExecutor ex(g, kOpsets, ExecOptions{});
  const Tensor x = Tensor::from_vector<float>({4}, {-1, 2, -3, 4});
  Tensor y = Tensor::from_vector<float>({4}, {7, 7, 7, 7}), xb = Tensor::from_vector<float>({4}, {7, 7, 7, 7});
  Tensor held = y;  // the caller's reference: the plain run() would not reuse it
  Value xv = Value::of(x);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<Value> results{Value::of(y), Value::of(xb)};
    ex.run_into({&xv}, {}, results);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0].tensor.raw_data(), held.raw_data()) << pass;
    EXPECT_TRUE(ot_test::all_close(held, {4}, {0, 2, 0, 4})) << pass;
    EXPECT_NE(results[1].tensor.raw_data(), xb.raw_data()) << pass;  // the input given back: a copy
    EXPECT_TRUE(ot_test::all_close(results[1].tensor, {4}, {-1, 2, -3, 4})) << pass;
    EXPECT_TRUE(ot_test::all_close(xb, {4}, {7, 7, 7, 7})) << pass;
  }
  std::vector<Value> wrong{Value::of(Tensor::zeros(DType::kFloat32, {5}))};
  ex.run_into({&xv}, {0}, wrong);
  EXPECT_TRUE(ot_test::all_close(wrong[0].tensor, {4}, {0, 2, 0, 4}));
}

namespace {
// The kernel's own verdict on the mapping that holds p: its THPeligible line in /proc/self/smaps
// (-1: no such line, i.e. a kernel that does not report it).
int thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2)  // a mapping's first line (no field parses so)
      inside = a >= lo && a < hi;
    else if (inside && line.rfind("THPeligible:", 0) == 0)
      return std::atoi(line.c_str() + 12);
  }
  return -1;
}
}  // namespace

// Blocks of 2 MiB and more (tensors, arenas) start on a 2 MiB boundary and are advised onto
// transparent huge pages: Debian's kernels default to "madvise", where nothing else puts them there.
TEST(HostMemory, LargeBlocksAreOfferedHugePages) {
  std::ifstream setting("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(setting, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off on this kernel ('" << mode << "')";
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  Tensor t = Tensor::empty(DType::kFloat32, {3, 1 << 20});  // 12 MiB
  void* block = cpu_allocator().allocate(5 << 20, 64);
  for (const void* p : {static_cast<const void*>(t.data<float>()), static_cast<const void*>(block)}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHuge, 0u);
    const int eligible = thp_eligible(p);
    if (eligible < 0) {
      cpu_allocator().deallocate(block);
      GTEST_SKIP() << "/proc/self/smaps has no THPeligible line on this kernel";
    }
    EXPECT_EQ(eligible, 1) << "the kernel does not consider the block for huge pages";
  }
  cpu_allocator().deallocate(block);
  // Small blocks keep the ordinary alignment (no 2 MiB padding for them).
  Tensor small = Tensor::empty(DType::kFloat32, {16});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data<float>()) % 64, 0u);
}
