// Tensors between devices outside a session's plan (onnxtrain/tensor.h's copy_tensor and
// to_device, onnxtrain/device.h's device_available and device_allocator): what OrtValues on a
// device and device feeds and outputs of a session move through. Each provider gets one context
// for these copies, used under a lock; a copy returns once its provider has finished it, so that a
// session's own stream may read what it wrote.
#include <map>
#include <memory>
#include <mutex>

#include "kernels/kernel.h"
#include "onnxtrain/error.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain {

namespace {

ExecutionProvider& provider_for(const Device& d) {
  std::string why;
  ExecutionProvider* p = provider_of_device(d, &why);
  if (!p) throw_error<InvalidArgument>(why);
  return *p;
}

// One device's copy: `src` and `dst` on the host or on p's device.
void provider_copy(ExecutionProvider& p, const Tensor& src, Tensor& dst) {
  static std::mutex mu;
  static std::map<ExecutionProvider*, std::unique_ptr<DeviceContext>> contexts;
  std::lock_guard<std::mutex> lock(mu);
  auto& ctx = contexts[&p];
  if (!ctx) ctx = p.make_context(ExecOptions{});
  p.copy(src, dst, *ctx);
  p.synchronize(*ctx);
}

}  // namespace

bool device_available(const Device& device, std::string* why) { return provider_of_device(device, why) != nullptr; }

Allocator& device_allocator(const Device& device) {
  if (device.is_host()) return cpu_allocator();
  return provider_for(device).allocator();
}

void copy_tensor(const Tensor& src, Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel())
    throw_error<InvalidArgument>("copy_tensor: ", src.describe(), " on ", src.device().name(), " into ", dst.describe(),
                                 " on ", dst.device().name(), ": the element types and counts must match");
  const bool host_both = src.device().host_accessible() && dst.device().host_accessible();
  if ((src.device().is_host() && dst.device().is_host()) || (host_both && src.dtype() == DType::kString)) {
    dst.copy_from(src);
    return;
  }
  if (src.dtype() == DType::kString)
    throw_error<InvalidArgument>("copy_tensor: string tensors live in host memory only (", src.device().name(), " to ",
                                 dst.device().name(), ")");
  if (src.numel() == 0) return;
  // The device side's provider copies (a host-accessible device of its own, too).
  const bool src_dev = !src.device().is_host(), dst_dev = !dst.device().is_host();
  if (src_dev && dst_dev && src.device() != dst.device()) {  // two devices: through the host
    Tensor staged = Tensor::empty(src.dtype(), src.shape());
    provider_copy(provider_for(src.device()), src, staged);
    provider_copy(provider_for(dst.device()), staged, dst);
    return;
  }
  provider_copy(provider_for(src_dev ? src.device() : dst.device()), src, dst);
}

Tensor to_device(const Tensor& t, const Device& device) {
  if (!t.defined()) throw_error<InvalidArgument>("to_device: the tensor is undefined");
  if (t.dtype() == DType::kString && !device.is_host())
    throw_error<InvalidArgument>("to_device: string tensors live in host memory only (asked for ", device.name(), ")");
  Tensor out = Tensor::empty(t.dtype(), t.shape(), device_allocator(device));
  copy_tensor(t, out);
  return out;
}

}  // namespace onnxtrain
