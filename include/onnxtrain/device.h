// Devices and allocators: where a tensor's memory lives and who hands it out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace onnxtrain {

/// A memory domain: the host (kCPU, index 0) or an accelerator. Execution providers may define
/// further host-addressable domains (kCPU with index > 0) whose memory is still readable from the
/// host but planned and copied as a separate device.
struct Device {
  enum class Type : uint8_t { kCPU = 0, kCUDA = 1 };
  Type type = Type::kCPU;
  int index = 0;

  static Device cpu() { return {}; }
  /// Memory the host may read and write directly.
  bool host_accessible() const { return type == Type::kCPU; }
  /// The host's own memory (where inputs, outputs, initializers and constants live).
  bool is_host() const { return type == Type::kCPU && index == 0; }
  /// "cpu", "cpu:1", "cuda:0"
  std::string name() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// Total order (for maps keyed by device).
  bool operator<(const Device& o) const { return type != o.type ? type < o.type : index < o.index; }
};

/// Hands out the memory of one device. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  /// `bytes` (> 0) aligned to `alignment` (a power of two); throws RuntimeError when out of memory.
  virtual void* allocate(size_t bytes, size_t alignment) = 0;
  virtual void deallocate(void* p) = 0;
};

/// The host allocator (64-byte aligned by default).
Allocator& cpu_allocator();

/// Whether this build can place memory on `device` now (the host always; cuda:0 where the build
/// has the CUDA provider and a device answers); otherwise false with the reason in `why`.
bool device_available(const Device& device, std::string* why = nullptr);
/// The allocator of `device`; throws InvalidArgument with the reason where !device_available.
Allocator& device_allocator(const Device& device);

}  // namespace onnxtrain
