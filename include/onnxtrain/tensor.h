// Tensor: a dense, row-major, typed n-d array with shared storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "onnxtrain/device.h"
#include "onnxtrain/dtype.h"
#include "onnxtrain/error.h"

namespace onnxtrain {

using Shape = std::vector<int64_t>;

/// Largest product of a shape's dims, zero dims left out (2^52: past any memory, with headroom for
/// kernels' index arithmetic). A zero dim makes a tensor empty, but the other dims still size strides,
/// loop bounds and index tables: [0, 2^62, 4] is refused rather than overflowing int64 in them.
inline constexpr int64_t kMaxShapeExtent = int64_t(1) << 52;
/// Product of dims; false when a dim is negative or the dims other than zeros multiply past
/// kMaxShapeExtent.
bool checked_numel(const Shape& shape, int64_t* out);
/// Product of dims; throws InvalidArgument past kMaxShapeExtent (with a negative dim, an unknown
/// extent: the plain product, throwing only when it overflows int64).
int64_t shape_numel(const Shape& shape);
/// "[2, 3, 4]"
std::string shape_to_string(const Shape& shape);

/// Largest single allocation Tensor::empty performs (default: physical memory). Guards against
/// shapes computed from bad data.
void set_allocation_limit(uint64_t bytes);
uint64_t allocation_limit();
/// Lowers allocation_limit() on the current thread while alive (a session's memory limit, set by
/// the executor around planning and runs); 0 changes nothing. Nested scopes keep the lowest.
class ScopedAllocationLimit {
 public:
  explicit ScopedAllocationLimit(uint64_t bytes);
  ~ScopedAllocationLimit();
  ScopedAllocationLimit(const ScopedAllocationLimit&) = delete;
  ScopedAllocationLimit& operator=(const ScopedAllocationLimit&) = delete;

 private:
  uint64_t prev_;
};
/// The limit a ScopedAllocationLimit installed on this thread (0: none).
uint64_t scoped_allocation_limit();
/// "the session's memory limit (session.memory_limit_bytes) of N bytes" or "the allocation limit of
/// N bytes": the limit allocation_limit() enforces on this thread, for error messages.
std::string allocation_limit_text();

/// Dense row-major tensor on a device. Copies share storage (like torch.Tensor); use clone() for a
/// deep copy. String tensors hold std::string elements (host only); every other dtype is plain
/// bytes, 64-byte aligned when onnxtrain allocates them. Element access (data<T>(), clone,
/// copy_from) needs host-accessible memory; other devices' tensors move through their provider.
class Tensor {
 public:
  Tensor() = default;

  /// Uninitialized host tensor (strings are empty). Throws RuntimeError past the allocation limit.
  static Tensor empty(DType dtype, Shape shape);
  /// Uninitialized tensor on `allocator`'s device (not for strings).
  static Tensor empty(DType dtype, Shape shape, Allocator& allocator);
  /// Zero-filled tensor.
  static Tensor zeros(DType dtype, Shape shape);
  /// View of memory owned elsewhere (on `device`); `keepalive` (may be null) is held while the view
  /// lives.
  static Tensor wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> keepalive = nullptr,
                     Device device = Device::cpu());
  /// Tensor holding a copy of `values`; numel(shape) must equal values.size().
  template <class T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values);
  /// Rank-0 tensor.
  template <class T>
  static Tensor scalar(T value) {
    return from_vector<T>({}, std::vector<T>{value});
  }

  bool defined() const { return dtype_ != DType::kUndefined; }
  const Device& device() const { return device_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.size(); }
  int64_t dim(size_t i) const { return shape_[i]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <class T>
  T* data() {
    check_type(dtype_v<T>);
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    check_type(dtype_v<T>);
    return static_cast<const T*>(data_);
  }

  /// Same storage, new shape with the same element count.
  Tensor reshaped(Shape shape) const;
  /// Deep copy.
  Tensor clone() const;
  /// Copies elements from `src` (same dtype and element count).
  void copy_from(const Tensor& src);
  /// Storage holder (shared); null for views without keepalive.
  const std::shared_ptr<void>& storage() const { return storage_; }
  /// "float[2, 3]"
  std::string describe() const;
  /// Points this tensor (keeping its dtype and shape) at `src`'s memory; used by the executor to
  /// rebind views without allocating. `src` must hold at least as many bytes.
  void rebind(const Tensor& src) {
    data_ = src.data_;
    storage_ = src.storage_;
    device_ = src.device_;
  }
  /// Drops the memory reference (keeps dtype and shape).
  void unbind() {
    data_ = nullptr;
    storage_.reset();
  }

 private:
  void check_type(DType t) const;
  DType dtype_ = DType::kUndefined;
  Device device_;
  Shape shape_;
  int64_t numel_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<void> storage_;
};

template <class T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  Tensor t = empty(dtype_v<T>, std::move(shape));
  if (size_t(t.numel()) != values.size())
    throw_error<InvalidArgument>("Tensor::from_vector: ", values.size(), " values for shape ",
                                 shape_to_string(t.shape()));
  T* p = static_cast<T*>(t.raw_data());
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
// std::vector<bool> has no contiguous storage; the generic loop above handles it element-wise.

/// Copies `src`'s elements into `dst` (same dtype and element count) whatever devices they live on
/// (the host or a device this build serves: device memory moves through its provider), and
/// returns once the copy is done. Throws InvalidArgument for mismatched tensors, string tensors
/// off the host, or a device that is not available.
void copy_tensor(const Tensor& src, Tensor& dst);
/// A copy of `t` on `device` (a new tensor, even where `t` is already there).
Tensor to_device(const Tensor& t, const Device& device);

}  // namespace onnxtrain
