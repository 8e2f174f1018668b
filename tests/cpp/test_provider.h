// A second execution provider for tests, so that the provider seam is exercised without a GPU: its
// device is cpu:1 (host memory, but planned, allocated and copied as a device of its own), it
// registers a subset of the CPU kernels (others fall back to the CPU provider), declares Reshape's
// and Expand's shape inputs as host-memory inputs, and counts its allocations. Every kernel and
// gradient test runs once more with it first and must agree with the CPU provider bit for bit.
#pragma once

#include <atomic>
#include <vector>

#include "kernels/kernel.h"
#include "onnxtrain/value.h"

namespace ot_test {

class TestProvider final : public onnxtrain::ExecutionProvider {
 public:
  TestProvider();
  const std::string& name() const override { return name_; }
  onnxtrain::Device device() const override { return {onnxtrain::Device::Type::kCPU, 1}; }
  onnxtrain::Allocator& allocator() override;
  const onnxtrain::KernelRegistry& registry() const override { return registry_; }
  std::unique_ptr<onnxtrain::DeviceContext> make_context(const onnxtrain::ExecOptions& options) override;
  void copy(const onnxtrain::Tensor& src, onnxtrain::Tensor& dst, onnxtrain::DeviceContext&) override;
  /// Default-domain ops it has kernels for (a subset of the CPU provider's; also
  /// com.onnxtrain.AccumulateGradients, an in-place operator).
  static const std::vector<std::string>& ops();
  std::atomic<long> copies{0};

 private:
  std::string name_ = "TestExecutionProvider";
  onnxtrain::KernelRegistry registry_;
};

TestProvider& test_provider();
/// Bytes currently allocated on cpu:1 (its arenas and device tensors).
long test_provider_live_bytes();

/// True when this build has the CUDA provider and a device answers; else false with the reason.
bool cuda_axis_available(std::string* why);
/// The CUDA provider when cuda_axis_available, else null.
onnxtrain::ExecutionProvider* cuda_axis_provider();

/// Runs `graph` with the CUDA provider first where one is available (outputs close to `reference`
/// within the element type's tolerance), then with the test provider first and checks that its outputs equal `reference` (the
/// CPU provider's, from the same inputs) bit for bit; the planner's copies and fallbacks are
/// exercised on the way. Returns a description of the first difference, or "".
std::string check_providers_agree(std::shared_ptr<const onnxtrain::ir::Graph> graph, const onnxtrain::OpsetMap& opsets,
                                  onnxtrain::ExecOptions options, const std::vector<const onnxtrain::Value*>& inputs,
                                  const std::vector<onnxtrain::Value>& reference,
                                  const std::vector<size_t>& outputs = {});

}  // namespace ot_test
