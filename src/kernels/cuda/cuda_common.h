// What every CUDA kernel file shares: error checks that name the failing call, the per-run device
// context (the session's stream, the cuBLASLt handle and its workspace), launch geometry, and the
// element types a kernel may be instantiated for. Included by .cu files (nvcc) and by the
// provider's host code (g++).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/kernel.h"

namespace onnxtrain::kernels::cuda {

/// Throws RuntimeError "CUDA error <code> (<text>) in <call>": every CUDA runtime call is checked.
[[noreturn]] void fail_cuda(const char* call, int code, const char* text);
/// Checks the launch just made (cudaGetLastError), naming the kernel.
void check_launch(const char* kernel);

#define OT_CUDA(call)                                                                         \
  do {                                                                                        \
    const cudaError_t ot_e_ = (call);                                                         \
    if (ot_e_ != cudaSuccess) ::onnxtrain::kernels::cuda::fail_cuda(#call, int(ot_e_), cudaGetErrorString(ot_e_)); \
  } while (0)

/// The session's device state a CUDA kernel runs with. One per executor (a session); its stream
/// orders every kernel and copy of the session.
class CudaContext final : public DeviceContext {
 public:
  explicit CudaContext(int device);
  ~CudaContext() override;
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  /// cuBLASLt handle (created on first use) and a workspace for its algorithms.
  void* lt_handle();
  void* lt_workspace() { return lt_workspace_; }
  size_t lt_workspace_bytes() const { return kLtWorkspace; }
  /// The session's cuDNN handle (cudnn.h's cudnn_handle makes it; null until then) and how to
  /// destroy it with the context.
  void*& dnn_slot() { return dnn_; }
  void (*dnn_destroy)(void*) = nullptr;
  /// Multiprocessors of the device (launch geometry of grid-stride loops).
  int multiprocessors() const { return sms_; }
  /// The context of a CUDA kernel's run; throws RuntimeError when the run has none (a kernel of
  /// this provider called outside it).
  static CudaContext& of(const RunContext& ctx);

  static constexpr size_t kLtWorkspace = size_t(32) << 20;

 private:
  int device_;
  int sms_ = 1;
  cudaStream_t stream_ = nullptr;
  void* lt_ = nullptr;
  void* lt_workspace_ = nullptr;
  void* dnn_ = nullptr;
};

/// Blocks of `threads` for a grid-stride loop over n elements: enough to fill the device, never
/// more than the elements need.
inline unsigned grid_for(int64_t n, const CudaContext& c, int threads = 256) {
  const int64_t need = (n + threads - 1) / threads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(need, int64_t(c.multiprocessors()) * 16)));
}

/// ONNXTRAIN_CUDA_TF32=1: float32 products and convolutions may use TF32 (as PyTorch's
/// allow_tf32); otherwise they compute in float32.
bool tf32_allowed();

/// Counts a kernel launch (launches() in cuda_provider.h).
void count_launch();

}  // namespace onnxtrain::kernels::cuda
