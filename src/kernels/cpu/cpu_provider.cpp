#include "kernels/cpu/cpu_provider.h"

#include "core/parallel.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/registry.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain {

namespace kernels::cpu {

CpuContext::CpuContext(int threads)
    : threads_(thread_budget(threads)), stream_(dnnl_util::cpu_engine()) {}

CpuContext& CpuContext::of(const RunContext& ctx) {
  if (auto* c = dynamic_cast<CpuContext*>(ctx.device())) return *c;
  thread_local CpuContext fallback(0);  // a RunContext made without a device context (tests)
  return fallback;
}

namespace {

class CpuProvider final : public ExecutionProvider {
 public:
  CpuProvider() {
    register_elementwise(registry_);
    register_linalg(registry_);
    register_reduce(registry_);
    register_shape(registry_);
    register_movement(registry_);
    register_index(registry_);
    register_image(registry_);
    register_conv(registry_);
    register_nchwc_channels(registry_);
    register_pool(registry_);
    register_norm(registry_);
    register_loss(registry_);
    register_rnn(registry_);
    register_control_flow(registry_);
    register_sequence(registry_);
    register_training(registry_);
    register_collectives(registry_);
    register_ml(registry_);
    register_ml_map(registry_);
    register_ml_tree(registry_);
    for (const std::string& op : ops::shared_with_microsoft()) registry_.alias(ops::kMicrosoftDomain, ops::kDomain, op);
  }
  const std::string& name() const override { return name_; }
  Device device() const override { return Device::cpu(); }
  Allocator& allocator() override { return cpu_allocator(); }
  const KernelRegistry& registry() const override { return registry_; }
  std::unique_ptr<DeviceContext> make_context(const ExecOptions& options) override {
    return std::make_unique<CpuContext>(options.num_threads);
  }
  void copy(const Tensor& src, Tensor& dst, DeviceContext&) override { dst.copy_from(src); }

 private:
  std::string name_ = "CPUExecutionProvider";
  KernelRegistry registry_;
};

}  // namespace
}  // namespace kernels::cpu

ExecutionProvider& cpu_provider() {
  static kernels::cpu::CpuProvider p;
  return p;
}

}  // namespace onnxtrain
