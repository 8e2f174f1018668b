#include "kernels/cuda/cuda_provider.h"

#include <cublasLt.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/cuda_common.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

void fail_cuda(const char* call, int code, const char* text) {
  throw_error<RuntimeError>("CUDA error ", code, " (", text ? text : "?", ") in ", call);
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_error<RuntimeError>("CUDA kernel ", kernel, " failed to launch: ", cudaGetErrorString(e));
  count_launch();
}

namespace {
std::atomic<long> g_launches{0};
}
bool tf32_allowed() {
  static const bool on = [] {
    const char* v = std::getenv("ONNXTRAIN_CUDA_TF32");
    return v && v[0] == '1';
  }();
  return on;
}
void count_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }
long launches() { return g_launches.load(); }

CudaContext::CudaContext(int device) : device_(device) {
  OT_CUDA(cudaSetDevice(device));
  OT_CUDA(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
  OT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaContext::~CudaContext() {
  // Errors are ignored here: at process exit the runtime may already be unloading.
  if (stream_) cudaStreamSynchronize(stream_);
  if (dnn_ && dnn_destroy) dnn_destroy(dnn_);
  if (lt_workspace_) cudaFree(lt_workspace_);
  if (lt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
  if (stream_) cudaStreamDestroy(stream_);
}

void* CudaContext::lt_handle() {
  if (!lt_) {
    cublasLtHandle_t h = nullptr;
    const cublasStatus_t s = cublasLtCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS) throw_error<RuntimeError>("cublasLtCreate failed with status ", int(s));
    lt_ = h;
    OT_CUDA(cudaMalloc(&lt_workspace_, kLtWorkspace));
  }
  return lt_;
}

CudaContext& CudaContext::of(const RunContext& ctx) {
  if (auto* c = dynamic_cast<CudaContext*>(ctx.device())) {
    return *c;
  }
  throw_error<RuntimeError>(ctx.node().describe(), ": a CUDA kernel ran without the CUDA provider's context");
}

namespace {

// Device memory in blocks cached by size: a freed block is kept for the next request of the same
// rounded size (a plan's arena and its per-run tensors come back every step), and the cache is
// emptied and the request retried once before out-of-memory is reported.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator() override = default;  // the driver reclaims the memory at exit
  Device device() const override { return {Device::Type::kCUDA, device_}; }

  void* allocate(size_t bytes, size_t alignment) override {
    if (alignment > 256) throw_error<InvalidArgument>("cuda: alignment ", alignment, " over 256 bytes");
    const size_t size = round(bytes);
    if (size > allocation_limit())
      throw_error<RuntimeError>("cuda:", device_, ": cannot allocate ", bytes, " bytes: over ", allocation_limit_text());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end()) {
      void* p = it->second;
      free_.erase(it);
      cached_ -= size;
      used_ += size;
      sizes_[p] = size;
      return p;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_locked();
      e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw_error<RuntimeError>("cuda:", device_, ": out of memory allocating ", bytes, " bytes (", free_b,
                                " of ", total_b, " bytes free; ", used_, " in use by onnxtrain): ",
                                cudaGetErrorString(e));
    }
    sizes_[p] = size;
    used_ += size;
    reserved_ += size;
    peak_ = std::max(peak_, reserved_);
    return p;
  }

  void deallocate(void* p) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    const size_t size = it->second;
    sizes_.erase(it);
    used_ -= size;
    // Work queued on a session's stream may still read the block: the next user of a cached block
    // is ordered after it only when both use the same stream, so the block is kept for reuse only
    // after the device has finished what was queued.
    cudaDeviceSynchronize();
    free_.emplace(size, p);
    cached_ += size;
  }

  size_t peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  static size_t round(size_t bytes) {
    if (bytes <= 512) return 512;
    if (bytes <= (size_t(1) << 20)) return (bytes + 511) / 512 * 512;
    return (bytes + (size_t(1) << 16) - 1) >> 16 << 16;  // 64 KiB granules above 1 MiB
  }
  void release_locked() {
    cudaDeviceSynchronize();
    for (auto& [size, p] : free_) {
      cudaFree(p);
      reserved_ -= size;
    }
    free_.clear();
    cached_ = 0;
  }

  int device_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> sizes_;
  size_t used_ = 0, cached_ = 0, reserved_ = 0, peak_ = 0;
};

class CudaProvider final : public ExecutionProvider {
 public:
  explicit CudaProvider(int device) : device_(device), allocator_(device) {}
  const std::string& name() const override { return name_; }
  Device device() const override { return {Device::Type::kCUDA, device_}; }
  Allocator& allocator() override { return allocator_; }
  CachingAllocator& caching() { return allocator_; }
  const KernelRegistry& registry() const override { return kernel_registry(); }
  std::unique_ptr<DeviceContext> make_context(const ExecOptions&) override {
    return std::make_unique<CudaContext>(device_);
  }
  void copy(const Tensor& src, Tensor& dst, DeviceContext& ctx) override {
    if (src.dtype() != dst.dtype() || src.numel() != dst.numel())
      throw_error<InvalidArgument>("CUDAExecutionProvider copy: ", src.describe(), " into ", dst.describe());
    if (src.dtype() == DType::kString) throw_error<NotImplemented>("string tensors cannot move to a CUDA device");
    if (src.nbytes() == 0) return;
    auto* c = dynamic_cast<CudaContext*>(&ctx);
    cudaStream_t s = c ? c->stream() : nullptr;
    OT_CUDA(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDefault, s));
    // The host reads what arrives in its memory right after the copy step.
    if (dst.device().host_accessible()) OT_CUDA(cudaStreamSynchronize(s));
  }
  void synchronize(DeviceContext& ctx) override {
    if (auto* c = dynamic_cast<CudaContext*>(&ctx)) OT_CUDA(cudaStreamSynchronize(c->stream()));
  }

 private:
  std::string name_ = "CUDAExecutionProvider";
  int device_;
  CachingAllocator allocator_;
};

CudaProvider* g_provider = nullptr;

CudaProvider& the_provider() {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    std::string why;
    if (!device_available(&why)) {
      failure = why;
      return;
    }
    g_provider = new CudaProvider(0);  // lives to the end of the process (kernels and memory outlive sessions)
  });
  if (!g_provider) throw_error<RuntimeError>("CUDAExecutionProvider is not available: ", failure);
  return *g_provider;
}

}  // namespace

const KernelRegistry& kernel_registry() {
  static const KernelRegistry r = [] {
    KernelRegistry k;
    register_elementwise(k);
    register_linalg(k);
    register_reduce(k);
    register_norm(k);
    register_loss(k);
    register_movement(k);
    register_training(k);
    register_conv(k);
    register_pool(k);
    register_batch_norm(k);
    for (const std::string& op : ops::shared_with_microsoft())
      if (k.knows(ops::kDomain, op)) k.alias(ops::kMicrosoftDomain, ops::kDomain, op);
    return k;
  }();
  return r;
}

bool device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

ExecutionProvider& provider() { return the_provider(); }
size_t allocator_peak_bytes() { return g_provider ? g_provider->caching().peak() : 0; }

}  // namespace onnxtrain::kernels::cuda
