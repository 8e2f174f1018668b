// Heap allocations of a steady-state training step, counted by interposing the C allocator
// (malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign: operator new, oneDNN and the
// OpenMP runtime all come through them) on every thread. A separate executable: the hook must not
// be in the main test binary.
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>

#include <oneapi/dnnl/dnnl.hpp>

#include "ir/ir.h"
#include "ir/onnx_io.h"
#include "runtime/executor.h"
#include "onnxtrain/training.h"
#include "test_util.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};      // made by onnxtrain (any frame outside oneDNN)
std::atomic<long> g_bytes{0};
std::atomic<long> g_dnnl_allocs{0};  // made inside oneDNN's primitive execution
std::atomic<long> g_dnnl_max{0};     // largest of those
const bool g_trace = std::getenv("ONNXTRAIN_ALLOC_TRACE") != nullptr;
thread_local bool t_in_hook = false;

// True when a frame of the calling stack lies in libdnnl: oneDNN 2.6 builds a small argument map
// on every primitive execution (dnnl_primitive_execute), which its API cannot avoid.
bool from_dnnl(void* const* frames, int k) {
  for (int i = 1; i < k; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname && std::strstr(info.dli_fname, "libdnnl")) return true;
  }
  return false;
}

void note(size_t n) {
  if (!g_counting.load(std::memory_order_relaxed) || t_in_hook) return;
  t_in_hook = true;
  void* frames[16];
  const int k = backtrace(frames, 16);
  if (from_dnnl(frames, k)) {
    g_dnnl_allocs.fetch_add(1, std::memory_order_relaxed);
    long prev = g_dnnl_max.load();
    while (long(n) > prev && !g_dnnl_max.compare_exchange_weak(prev, long(n))) {
    }
  } else {
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    g_bytes.fetch_add(long(n), std::memory_order_relaxed);
    if (g_trace) {  // ONNXTRAIN_ALLOC_TRACE=1: where each counted allocation comes from
      dprintf(2, "--- allocation of %zu bytes\n", n);
      backtrace_symbols_fd(frames, k, 2);
    }
  }
  t_in_hook = false;
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  note(n);
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  note(a * b);
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  note(n);
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t align, size_t n) {
  note(n);
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) {
  note(n);
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  note(n);
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}

using namespace onnxtrain;

namespace {

using ot_test::attr_int;
using ot_test::attr_ints;

// A model under construction: random weights, nodes named after their first output.
struct Builder {
  ir::Model m;
  std::mt19937 rng;
  explicit Builder(uint32_t seed) : rng(seed) {
    m.opsets = {{"", 15}};
    m.graph = std::make_shared<ir::Graph>();
  }
  void weight(const std::string& n, Shape s) {
    m.graph->initializers.emplace_back(n, ot_test::random_tensor(DType::kFloat32, s, rng, -0.2, 0.2));
  }
  void node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
            std::vector<ir::Attribute> attrs = {}) {
    m.graph->nodes.push_back(ot_test::make_node(op, std::move(in), std::move(out), std::move(attrs)));
  }
};

// x[B, 1, 12, 12] -> Conv 8x3x3 -> Relu -> MaxPool 2x2 -> Flatten -> Gemm (transB) -> logits;
// cross-entropy with 'label'.
std::string cnn() {
  Builder b(3);
  b.weight("cw", {8, 1, 3, 3});
  b.weight("cb", {8});
  b.weight("fw", {10, 8 * 5 * 5});
  b.weight("fb", {10});
  b.m.graph->inputs = {ot_test::value_info("x", DType::kFloat32, {16, 1, 12, 12}),
                       ot_test::value_info("label", DType::kInt64, {16})};
  b.node("Conv", {"x", "cw", "cb"}, {"c"}, {attr_ints("kernel_shape", {3, 3})});
  b.node("Relu", {"c"}, {"r"});
  b.node("MaxPool", {"r"}, {"p"}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  b.node("Flatten", {"p"}, {"f"});
  b.node("Gemm", {"f", "fw", "fb"}, {"logits"}, {attr_int("transB", 1)});
  b.node("SoftmaxCrossEntropyLoss", {"logits", "label"}, {"loss"});
  b.m.graph->outputs = {ot_test::value_info("loss")};
  return ir::serialize_model(b.m);
}

// x[N, 64] -> MatMul 64x128 -> Add -> Relu -> MatMul 128x10 -> Add -> logits; cross-entropy with
// 'label'; optionally a BatchNormalization in training mode after the first layer. N is symbolic.
std::string mlp(bool batchnorm) {
  Builder b(1);
  b.weight("W1", {64, 128});
  b.weight("b1", {128});
  b.weight("W2", {128, 10});
  b.weight("b2", {10});
  auto batch_typed = [](DType dt, std::vector<int64_t> rest) {
    ir::TypeInfo t = ir::TypeInfo::tensor(dt);
    t.has_shape = true;
    t.dims.push_back(ir::Dim{-1, "N"});
    for (int64_t d : rest) t.dims.push_back(ir::Dim{d, ""});
    return t;
  };
  b.m.graph->inputs = {ir::ValueInfo{"x", batch_typed(DType::kFloat32, {64}), ""},
                       ir::ValueInfo{"label", batch_typed(DType::kInt64, {}), ""}};
  b.node("MatMul", {"x", "W1"}, {"h1"});
  b.node("Add", {"h1", "b1"}, {"a1"});
  std::string act_in = "a1";
  if (batchnorm) {
    auto& inits = b.m.graph->initializers;
    inits.emplace_back("gamma", Tensor::from_vector<float>({128}, std::vector<float>(128, 1.f)));
    inits.emplace_back("beta", Tensor::zeros(DType::kFloat32, {128}));
    inits.emplace_back("mean", Tensor::zeros(DType::kFloat32, {128}));
    inits.emplace_back("var", Tensor::from_vector<float>({128}, std::vector<float>(128, 1.f)));
    b.node("BatchNormalization", {"a1", "gamma", "beta", "mean", "var"}, {"bn", "mean_out", "var_out"},
           {attr_int("training_mode", 1)});
    act_in = "bn";
  }
  b.node("Relu", {act_in}, {"r1"});
  b.node("MatMul", {"r1", "W2"}, {"h2"});
  b.node("Add", {"h2", "b2"}, {"logits"});
  b.node("SoftmaxCrossEntropyLoss", {"logits", "label"}, {"loss"});
  b.m.graph->outputs = {ot_test::value_info("loss"), ot_test::value_info("logits")};
  return ir::serialize_model(b.m);
}

struct Counted {
  long allocs, bytes;      // per step, by onnxtrain
  long dnnl_allocs, dnnl_max;  // per step inside oneDNN's primitive execution; largest one
};

// Allocations per step over `steps` steps after `warmup` steps, for the bound-output run().
Counted count_steps(const std::string& optimizer, int64_t accumulation, bool clip, bool batchnorm, bool bound,
                    int threads, bool conv = false) {
  const std::string bytes = conv ? cnn() : mlp(batchnorm);
  TrainingParameters p;
  p.loss_output_name = "loss";
  p.training_optimizer_name = optimizer;
  p.gradient_accumulation_steps = accumulation;
  p.enable_grad_norm_clip = clip;
  SessionOptions so;
  so.intra_op_num_threads = threads;
  TrainingSession sess(bytes.data(), bytes.size(), p, so);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  const int64_t batch = conv ? 16 : 32;
  Tensor x = Tensor::empty(DType::kFloat32, conv ? Shape{batch, 1, 12, 12} : Shape{batch, 64});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = ud(rng);
  Tensor label = Tensor::empty(DType::kInt64, {batch});
  for (int64_t i = 0; i < batch; ++i) label.data<int64_t>()[i] = int64_t(rng() % 10);
  const std::vector<std::pair<std::string, Value>> feeds = {
      {"x", Value::of(x)}, {"label", Value::of(label)}, {"Learning_Rate", Value::of(Tensor::from_vector<float>({1}, {0.01f}))}};
  const std::vector<std::string> names = {"loss"};
  std::vector<Value> out;
  for (int i = 0; i < 6; ++i) sess.run(names, feeds, out);
  const int steps = 12;
  {
    void* prime[4];
    backtrace(prime, 4);  // loads the unwinder before counting
  }
  g_allocs = 0;
  g_bytes = 0;
  g_dnnl_allocs = 0;
  g_dnnl_max = 0;
  g_counting = true;
  for (int i = 0; i < steps; ++i) {
    if (bound) {
      sess.run(names, feeds, out);
    } else {
      auto r = sess.run(names, feeds);
      (void)r;
    }
  }
  g_counting = false;
  EXPECT_TRUE(std::isfinite(out[0].tensor.data<float>()[0]));
  return {g_allocs.load() / steps, g_bytes.load() / steps, g_dnnl_allocs.load() / steps, g_dnnl_max.load()};
}

}  // namespace

namespace {

// oneDNN 2.6's float32 matmul on this CPU: brgemm-based from AVX-512 on (its buffers in the
// scratchpad the plan provides), "gemm:jit" below (it allocates its packing buffers on every call).
std::string dnnl_matmul_impl() {
  using dnnl::memory;
  const memory::desc a({32, 64}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc b({64, 128}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc c({32, 128}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, dnnl::engine(dnnl::engine::kind::cpu, 0));
  return pd.impl_info_str();
}

}  // namespace

TEST(StepAllocations, SteadyStateTrainingStepAllocatesNothing) {
  for (int threads : {1, 2})
    for (const char* opt : {"SGDOptimizer", "MomentumOptimizer", "AdamOptimizer", "AdamWOptimizer", "LambOptimizer",
                            "AdagradOptimizer"}) {
      const Counted c = count_steps(opt, 1, false, false, true, threads);
      EXPECT_EQ(c.allocs, 0) << opt << ", " << threads << " threads: " << c.bytes << " bytes per step";
      std::printf("%s, %d threads: onnxtrain %ld allocations per step; oneDNN %ld (largest %ld bytes)\n", opt,
                  threads, c.allocs, c.dnnl_allocs, c.dnnl_max);
    }
}

TEST(StepAllocations, OneDnnMakesOnlySmallBookkeepingAllocations) {
  const std::string impl = dnnl_matmul_impl();
  if (impl.rfind("gemm", 0) == 0)
    GTEST_SKIP() << "oneDNN's float32 matmul on this CPU is '" << impl << "', which allocates its packing buffers "
                 << "on every call (oneDNN 2.6 has brgemm matmuls from AVX-512 on only)";
  for (int threads : {1, 2}) {
    const Counted c = count_steps("AdamOptimizer", 1, false, false, true, threads);
    // oneDNN's own per-call bookkeeping (its argument map): small and fixed, whatever the model's size.
    EXPECT_LE(c.dnnl_max, 256) << threads << " threads, matmul '" << impl << "'";
  }
}

TEST(StepAllocations, AccumulationClippingAndBatchNormAllocateNothing) {
  const Counted c = count_steps("AdamOptimizer", 3, true, true, true, 2);
  EXPECT_EQ(c.allocs, 0) << c.bytes << " bytes per step";
}

TEST(StepAllocations, ConvolutionAndPoolingAllocateNothing) {
  for (int threads : {1, 2}) {
    const Counted c = count_steps("MomentumOptimizer", 1, false, false, true, threads, true);
    EXPECT_EQ(c.allocs, 0) << threads << " threads: " << c.bytes << " bytes per step";
    std::printf("CNN, %d threads: onnxtrain %ld allocations per step; oneDNN %ld (largest %ld bytes)\n", threads,
                c.allocs, c.dnnl_allocs, c.dnnl_max);
  }
}

TEST(StepAllocations, ConvenienceRunAllocatesOnlyItsResults) {
  // run() returning a fresh vector: the vector and the loss tensor (its buffer and its shared
  // control block), nothing of the size of the model.
  const Counted c = count_steps("AdamOptimizer", 1, false, false, false, 2);
  EXPECT_LE(c.allocs, 4);
  EXPECT_LT(c.bytes, 1024);
}

namespace {

// x -> Relu -> Relu -> ... (n times) -> y, run by a GraphExecutor: allocations of one run after the
// plan is built.
long executor_run_allocations(int n) {
  auto g = std::make_shared<ir::Graph>();
  g->inputs.push_back(ot_test::value_info("x"));
  std::string prev = "x";
  for (int i = 0; i < n; ++i) {
    const std::string cur = i + 1 == n ? "y" : ot_test::numbered("h", size_t(i));
    g->nodes.push_back(ot_test::make_node("Relu", {prev}, {cur}));
    prev = cur;
  }
  g->outputs.push_back(ot_test::value_info("y"));
  runtime::GraphExecutor ex(g, OpsetMap{{"", 17}}, ExecOptions{});
  Value x = Value::of(Tensor::zeros(DType::kFloat32, {256}));
  std::vector<const Value*> ptrs{&x};
  ex.run(ptrs);  // builds the plan
  g_allocs = 0;
  g_counting = true;
  auto out = ex.run(ptrs);
  g_counting = false;
  return g_allocs.load();
}

}  // namespace

TEST(StepAllocations, ExecutorRunDoesNotAllocatePerNode) {
  const long small = executor_run_allocations(2), large = executor_run_allocations(60);
  // Only the returned output and its bookkeeping allocate; nothing scales with the node count.
  EXPECT_EQ(small, large);
  EXPECT_GE(large, 1);  // the counter is live: the returned output itself is allocated
  EXPECT_LE(large, 8);
}
