// The CPU execution provider: every built-in kernel, host memory, and the device context CPU
// kernels read their thread budget and oneDNN stream from.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/kernel.h"

namespace onnxtrain::kernels::cpu {

/// What a CPU kernel needs of its run besides its tensors.
class CpuContext final : public DeviceContext {
 public:
  explicit CpuContext(int threads);
  int threads() const { return threads_; }
  /// The oneDNN stream of this context (one per executor: runs of different executors may overlap).
  dnnl::stream& stream() { return stream_; }
  /// The context of a run (the CPU provider's, or a fresh one for hand-made RunContexts).
  static CpuContext& of(const RunContext& ctx);

 private:
  int threads_;
  dnnl::stream stream_;
};

}  // namespace onnxtrain::kernels::cpu
