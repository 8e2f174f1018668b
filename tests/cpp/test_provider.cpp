#include "test_provider.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <cmath>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_provider.h"
#include "runtime/executor.h"
#ifdef ONNXTRAIN_WITH_CUDA
#include "kernels/cuda/cuda_provider.h"
#endif

namespace ot_test {

using namespace onnxtrain;

namespace {

class CountingAllocator final : public Allocator {
 public:
  Device device() const override { return {Device::Type::kCPU, 1}; }
  void* allocate(size_t bytes, size_t alignment) override {
    alignment = std::max<size_t>(alignment, 64);
    void* p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    if (!p) throw_error<RuntimeError>("cpu:1: out of memory");
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = long(bytes);
    live_ += long(bytes);
    return p;
  }
  void deallocate(void* p) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_ -= sizes_[p];
      sizes_.erase(p);
    }
    std::free(p);
  }
  long live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, long> sizes_;
  long live_ = 0;
};

CountingAllocator& counting() {
  static CountingAllocator a;
  return a;
}

// A CPU kernel that declines (NotImplemented at prepare) what a device provider would not run:
// string tensors.
class NoStrings final : public Kernel {
 public:
  explicit NoStrings(std::unique_ptr<Kernel> k) : k_(std::move(k)) {}
  void prepare(PrepareContext& ctx) override {
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      if (ctx.has_input(i) && ctx.input_dtype(i) == DType::kString) throw_error<NotImplemented>("strings on cpu:1");
    k_->prepare(ctx);
    for (const auto& o : ctx.outputs())
      if (o.set && o.dtype == DType::kString) throw_error<NotImplemented>("strings on cpu:1");
  }
  void run(RunContext& ctx) override { k_->run(ctx); }

 private:
  std::unique_ptr<Kernel> k_;
};

}  // namespace

const std::vector<std::string>& TestProvider::ops() {
  static const std::vector<std::string> o = {
      "Add", "Sub", "Mul", "Div", "Relu", "Neg", "Exp", "Log", "Tanh", "Sigmoid", "Sqrt", "Abs", "Where", "Greater",
      "MatMul", "Gemm", "Reshape", "Expand", "Transpose", "Identity", "Sum", "ReduceSum", "ReduceMean", "Softmax",
      "Concat", "Cast", "Conv", "MaxPool"};
  return o;
}

TestProvider::TestProvider() {
  const KernelRegistry& cpu = cpu_provider().registry();
  for (const auto& [domain, op] : cpu.ops()) {
    const bool listed = std::find(ops().begin(), ops().end(), op) != ops().end();
    if (!(domain.empty() && listed) && !(domain == "com.onnxtrain" && op == "AccumulateGradients")) continue;
    for (int64_t v = 1; v <= 18; ++v)  // each opset range once
      if (const auto* e = cpu.find(domain, op, v)) {
        KernelRegistry::Entry copy = *e;
        copy.make = [f = e->make](const KernelInfo& info) -> std::unique_ptr<Kernel> {
          return std::make_unique<NoStrings>(f(info));
        };
        if (op == "Reshape" || op == "Expand") copy.host_inputs = {1};  // the shape, as a GPU kernel would
        registry_.add(copy);
        v = e->until;  // next range
      }
  }
}

Allocator& TestProvider::allocator() { return counting(); }

std::unique_ptr<DeviceContext> TestProvider::make_context(const ExecOptions& options) {
  // Its kernels are the CPU's: they read a CpuContext.
  return std::make_unique<kernels::cpu::CpuContext>(options.num_threads);
}

void TestProvider::copy(const Tensor& src, Tensor& dst, DeviceContext&) {
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel())
    throw_error<InvalidArgument>("TestProvider::copy: ", src.describe(), " into ", dst.describe());
  ++copies;
  if (src.nbytes() > 0) std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
}

TestProvider& test_provider() {
  static TestProvider& p = []() -> TestProvider& {
    static TestProvider made;
    register_device_provider(made);  // cpu:1 for copy_tensor, to_device and device feeds
    return made;
  }();
  return p;
}

long test_provider_live_bytes() { return counting().live(); }

bool cuda_axis_available(std::string* why) {
#ifdef ONNXTRAIN_WITH_CUDA
  return kernels::cuda::device_available(why);
#else
  if (why) *why = "this build has no CUDA provider (configure with -DONNXTRAIN_CUDA=ON)";
  return false;
#endif
}

ExecutionProvider* cuda_axis_provider() {
#ifdef ONNXTRAIN_WITH_CUDA
  if (cuda_axis_available(nullptr)) return &kernels::cuda::provider();
#endif
  return nullptr;
}

namespace {

// Tolerance of the CUDA axis: device math (cuBLASLt, other summation orders, libdevice's
// transcendentals) is not bitwise the CPU's. Elements agree within rtol of their own size plus
// atol of the reference's largest magnitude; integers and booleans exactly; NaN only with NaN.
std::string compare_close(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return a.describe() + " vs " + b.describe();
  if (!a.device().is_host()) return "a result not in host memory";
  const DType dt = a.dtype();
  double rtol = 0;
  switch (dt) {
    case DType::kFloat32: rtol = 2e-4; break;
    case DType::kFloat64: rtol = 1e-9; break;
    case DType::kFloat16: rtol = 2e-3; break;
    case DType::kBFloat16: rtol = 1.6e-2; break;
    default: break;
  }
  if (rtol == 0) {
    if (dt == DType::kString) {
      for (int64_t k = 0; k < a.numel(); ++k)
        if (a.data<std::string>()[k] != b.data<std::string>()[k]) return "strings differ at " + std::to_string(k);
      return "";
    }
    return a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0 ? "" : "exact values differ";
  }
  auto at = [&](const Tensor& t, int64_t i) -> double {
    switch (dt) {
      case DType::kFloat32: return t.data<float>()[i];
      case DType::kFloat64: return t.data<double>()[i];
      case DType::kFloat16: return float(t.data<float16>()[i]);
      default: return float(t.data<bfloat16>()[i]);
    }
  };
  double scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i)
    if (std::isfinite(at(b, i))) scale = std::max(scale, std::fabs(at(b, i)));
  const double atol = rtol * scale * 0.1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = at(a, i), y = at(b, i);
    if (std::isnan(y) ? !std::isnan(x) : !(std::fabs(x - y) <= atol + rtol * std::fabs(y) || x == y))
      return "element " + std::to_string(i) + ": " + std::to_string(x) + " on CUDA, " + std::to_string(y) +
             " on the CPU (" + a.describe() + ")";
  }
  return "";
}

std::string check_cuda_agrees(std::shared_ptr<const ir::Graph> graph, const OpsetMap& opsets, ExecOptions options,
                              const std::vector<const Value*>& inputs, const std::vector<Value>& reference,
                              const std::vector<size_t>& outputs) {
  ExecutionProvider* cuda = cuda_axis_provider();
  if (!cuda) return "";
  options.providers = {cuda};
  std::vector<Value> got;
  try {
    runtime::GraphExecutor ex(std::move(graph), opsets, options);
    got = ex.run(inputs, outputs);
  } catch (const std::exception& e) {
    return std::string("with the CUDA provider: ") + e.what();
  }
  if (got.size() != reference.size()) return "with the CUDA provider: a different number of outputs";
  for (size_t i = 0; i < got.size(); ++i) {
    const Value& a = got[i];
    const Value& b = reference[i];
    if (a.kind != b.kind) return "CUDA output " + std::to_string(i) + ": a different kind of value";
    if (a.kind == Value::Kind::kTensor)
      if (std::string d = compare_close(a.tensor, b.tensor); !d.empty()) return "CUDA output " + std::to_string(i) + ": " + d;
    if (a.kind == Value::Kind::kSequence) {
      if (a.sequence.size() != b.sequence.size()) return "CUDA output " + std::to_string(i) + ": sequence lengths differ";
      for (size_t k = 0; k < a.sequence.size(); ++k)
        if (std::string d = compare_close(a.sequence[k], b.sequence[k]); !d.empty())
          return "CUDA output " + std::to_string(i) + " element " + std::to_string(k) + ": " + d;
    }
  }
  return "";
}

// Reports, at the end of a test run with a device, how many CUDA kernels the suite launched.
class CudaAxisReport final : public ::testing::Environment {
 public:
  void TearDown() override {
#ifdef ONNXTRAIN_WITH_CUDA
    if (cuda_axis_available(nullptr))
      std::printf("[cuda axis] %ld CUDA kernel launches in this run\n", kernels::cuda::launches());
#endif
  }
};
[[maybe_unused]] ::testing::Environment* const g_cuda_report = ::testing::AddGlobalTestEnvironment(new CudaAxisReport);

}  // namespace

std::string check_providers_agree(std::shared_ptr<const ir::Graph> graph, const OpsetMap& opsets, ExecOptions options,
                                  const std::vector<const Value*>& inputs, const std::vector<Value>& reference,
                                  const std::vector<size_t>& outputs) {
  // The CUDA provider, where built and a device answers: every kernel and gradient test reruns on it.
  if (std::string d = check_cuda_agrees(graph, opsets, options, inputs, reference, outputs); !d.empty()) return d;
  options.providers = {&test_provider()};
  std::vector<Value> got;
  try {
    runtime::GraphExecutor ex(std::move(graph), opsets, options);
    got = ex.run(inputs, outputs);
  } catch (const std::exception& e) {
    return std::string("with the test provider: ") + e.what();
  }
  if (got.size() != reference.size()) return "with the test provider: a different number of outputs";
  for (size_t i = 0; i < got.size(); ++i) {
    const Value& a = got[i];
    const Value& b = reference[i];
    if (a.kind != b.kind) return "output " + std::to_string(i) + ": a different kind of value";
    auto same = [](const Tensor& x, const Tensor& y) {
      if (x.dtype() != y.dtype() || x.shape() != y.shape() || !x.device().is_host()) return false;
      if (x.dtype() == DType::kString) {
        for (int64_t k = 0; k < x.numel(); ++k)
          if (x.data<std::string>()[k] != y.data<std::string>()[k]) return false;
        return true;
      }
      return x.nbytes() == 0 || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
    };
    if (a.kind == Value::Kind::kTensor && !same(a.tensor, b.tensor))
      return "output " + std::to_string(i) + " differs with the test provider: " + a.tensor.describe() + " vs " +
             b.tensor.describe();
    if (a.kind == Value::Kind::kSequence) {
      if (a.sequence.size() != b.sequence.size()) return "output " + std::to_string(i) + ": sequence lengths differ";
      for (size_t k = 0; k < a.sequence.size(); ++k)
        if (!same(a.sequence[k], b.sequence[k])) return "output " + std::to_string(i) + ": sequence element differs";
    }
  }
  return "";
}

}  // namespace ot_test
