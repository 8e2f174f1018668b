// cuDNN for the CUDA provider, loaded at run time: libcudnn.so.9 is opened (dlopen) the first time a
// kernel asks for it, so the provider's build and its other kernels need no cuDNN where none is
// installed; where it cannot be opened, the kernels that use it decline their nodes at prepare (the
// CPU provider runs them) and `cudnn_api` says why. Only cuDNN 9's C API of descriptors is used
// (the convolution calls; every 9.x library exports them).
#pragma once

#include <cudnn.h>

#include <mutex>
#include <string>

#include "kernels/shape/window.h"

namespace onnxtrain::kernels::cuda {

class CudaContext;

// The cuDNN functions the kernels call, looked up once by name.
#define OT_CUDNN_FUNCTIONS(X)                                                                                       \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)                       \
  X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensorNdDescriptor)                    \
  X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnSetFilterNdDescriptor)                    \
  X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)     \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType) X(cudnnGetConvolutionNdForwardOutputDim)        \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                        \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnGetConvolutionForwardWorkspaceSize)                     \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnGetConvolutionBackwardFilterWorkspaceSize)               \
  X(cudnnConvolutionForward) X(cudnnConvolutionBackwardData) X(cudnnConvolutionBackwardFilter)

/// The loaded library's entry points (same names as cuDNN's).
struct CudnnApi {
#define OT_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  OT_CUDNN_FUNCTIONS(OT_CUDNN_MEMBER)
#undef OT_CUDNN_MEMBER
  size_t version = 0;  ///< cudnnGetVersion(): 9xxyy
};

/// cuDNN's entry points, or null when libcudnn.so.9 cannot be opened or lacks one of them; `why`
/// (when given) then says which. Loaded once per process.
const CudnnApi* cudnn_api(std::string* why = nullptr);

/// Throws RuntimeError "cuDNN: <what> failed: <status text>" unless s is CUDNN_STATUS_SUCCESS.
void check_cudnn(cudnnStatus_t s, const char* what);

/// A cuDNN handle for prepare-time queries (algorithms, workspace sizes) on device 0, made once
/// and shared (the queries do not run work on a stream); callers hold `cudnn_query_lock()`.
cudnnHandle_t cudnn_query_handle();
std::mutex& cudnn_query_lock();

/// The session's cuDNN handle, bound to its stream (made on first use, destroyed with the context).
cudnnHandle_t cudnn_handle(CudaContext& c);

/// The descriptors of one resolved convolution: X, W and Y as cuDNN tensors of rank >= 4 (a 1-D
/// convolution is a 2-D one of height 1) and the convolution (pads, strides, dilations, groups,
/// the compute type: float32 for float16/bfloat16, float64 for float64). Host objects only: made
/// and checked without a device.
class ConvDescs {
 public:
  ConvDescs() = default;
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;
  ~ConvDescs() { reset(); }

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool strict = false;  ///< float32 without TF32 (tf32_allowed): FMA kernels only

  void reset();
  /// Describes the convolution of `p` (resolved for X `x` and W `w`, element type dt) to cuDNN and
  /// checks that cuDNN's output shape is p.y; returns why cuDNN cannot take it (ConvTranspose,
  /// asymmetric pads, an empty batch, channel or kernel, a size over 32 bits, a rank outside 1-3
  /// spatial dims), empty when it can.
  std::string make(const CudnnApi& a, const shape::ConvShape& p, const Shape& x, const Shape& w, DType dt);
};

}  // namespace onnxtrain::kernels::cuda
