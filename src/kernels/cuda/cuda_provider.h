// The CUDA execution provider ("CUDAExecutionProvider"): device memory from a caching allocator, a
// stream per session, copies between host and device, and the CUDA kernels of each operator
// family (cuda/*.cu). Nodes without a CUDA kernel (or whose kernel declines their types at
// prepare) run on the CPU provider, with the copies the planner inserts.
#pragma once

#include <string>

#include "kernels/kernel.h"

namespace onnxtrain::kernels::cuda {

/// True when a CUDA device answers; otherwise false and `why` (when given) says why (no driver,
/// no device, a driver older than the runtime, ...).
bool device_available(std::string* why = nullptr);
/// The provider of CUDA device 0 (made on first use); throws RuntimeError naming why when no
/// device answers.
ExecutionProvider& provider();
/// The most bytes the allocator has held from the device at once.
size_t allocator_peak_bytes();
/// Kernels (and cuBLASLt products) the provider has launched in this process (gpu_check reports how
/// much of a test suite ran on the device).
long launches();

/// The provider's kernels (made without touching a device: tests measure their coverage anywhere).
const KernelRegistry& kernel_registry();

// One registration function per operator family (the CPU provider's families, cuda/*.cu).
void register_elementwise(KernelRegistry& r);  // cuda/elementwise.cu: arithmetic, activations, logic, Cast, Where
void register_linalg(KernelRegistry& r);       // cuda/linalg.cu: MatMul, Gemm (cuBLASLt)
void register_reduce(KernelRegistry& r);       // cuda/reduce.cu: Reduce*, Softmax, LogSoftmax and their gradients
void register_norm(KernelRegistry& r);         // cuda/norm.cu: LayerNormalization and its gradient
void register_loss(KernelRegistry& r);         // cuda/loss.cu: SoftmaxCrossEntropyLoss and its gradient
void register_movement(KernelRegistry& r);     // cuda/movement.cu: views, Transpose, Concat, Split, Slice, Gather, Expand
void register_training(KernelRegistry& r);     // cuda/optimizer.cu: optimizers, AccumulateGradients, GlobalNormClip
void register_conv(KernelRegistry& r);         // cuda/conv.cu: Conv and ConvGrad (cuDNN, loaded at run time)
void register_batch_norm(KernelRegistry& r);   // cuda/batch_norm.cu: BatchNormalization and its gradient
void register_pool(KernelRegistry& r);         // cuda/pool.cu: Max/Average/Global pooling and their gradients

}  // namespace onnxtrain::kernels::cuda
