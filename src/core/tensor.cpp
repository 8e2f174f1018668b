#include "onnxtrain/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace onnxtrain {

namespace {
uint64_t physical_memory() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return uint64_t(1) << 40;
  return uint64_t(pages) * uint64_t(page);
}
std::atomic<uint64_t> g_alloc_limit{0};

// Host memory for tensors and arenas: blocks of 2 MiB and more start on a 2 MiB boundary and their
// whole 2 MiB pages are offered to transparent huge pages (Debian's kernels default to "madvise":
// without the advice every block is 4 KiB pages, and the streaming kernels of a step walk the page
// tables every 4 KiB; measured: ResNet-18 and BERT-base training steps 5-7 % faster). The partial
// page at the end stays on 4 KiB pages, so the resident size does not grow. `bytes` is rounded up
// to a whole number of `alignment` units (at least one), so vector loops may read the last unit.
void* host_allocate(size_t bytes, size_t alignment) {
  constexpr size_t kHuge = size_t(2) << 20;
  bytes = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  if (bytes >= kHuge) alignment = std::max(alignment, kHuge);
  void* p = nullptr;
  if (posix_memalign(&p, alignment, bytes) != 0) return nullptr;
  if (bytes >= kHuge) madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // advice: ignored where refused
  return p;
}
thread_local uint64_t t_scoped_limit = 0;
}  // namespace

void set_allocation_limit(uint64_t bytes) { g_alloc_limit = bytes; }
uint64_t allocation_limit() {
  uint64_t v = g_alloc_limit.load();
  if (v == 0) {
    v = physical_memory();
    g_alloc_limit = v;
  }
  return t_scoped_limit ? std::min(v, t_scoped_limit) : v;
}

ScopedAllocationLimit::ScopedAllocationLimit(uint64_t bytes) : prev_(t_scoped_limit) {
  if (bytes && (!t_scoped_limit || bytes < t_scoped_limit)) t_scoped_limit = bytes;
}
ScopedAllocationLimit::~ScopedAllocationLimit() { t_scoped_limit = prev_; }
uint64_t scoped_allocation_limit() { return t_scoped_limit; }
std::string allocation_limit_text() {
  const uint64_t v = allocation_limit();
  return (t_scoped_limit && t_scoped_limit == v ? "the session's memory limit (session.memory_limit_bytes) of "
                                                  : "the allocation limit of ") +
         std::to_string(v) + " bytes";
}

bool checked_numel(const Shape& shape, int64_t* out) {
  int64_t extent = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(extent, d, &extent) || extent > kMaxShapeExtent) return false;
  }
  *out = empty ? 0 : extent;
  return true;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 0;
  if (checked_numel(shape, &n)) return n;
  if (std::none_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; }))
    throw_error<InvalidArgument>("shape ", shape_to_string(shape), " has dims multiplying past 2^52 (zero dims aside)");
  // A negative dim (an unknown extent of a declared shape): the plain product, the caller's to judge.
  n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) {
      if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
      throw_error<InvalidArgument>("shape ", shape_to_string(shape), " has more elements than int64 holds");
    }
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  if (!dtype_supported(dtype))
    throw_error<NotImplemented>("tensors of element type ", dtype_name(dtype), " are not supported");
  int64_t n;
  if (!checked_numel(shape, &n))
    throw_error<InvalidArgument>("invalid tensor shape ", shape_to_string(shape),
                                 " (a negative dim, or dims other than zeros multiplying past 2^52)");
  const uint64_t esize = dtype_size(dtype);
  uint64_t bytes;
  if (__builtin_mul_overflow(uint64_t(n), esize, &bytes) || bytes > allocation_limit())
    throw_error<RuntimeError>("cannot allocate a ", dtype_name(dtype), " tensor of shape ",
                              shape_to_string(shape), ": ", n, " elements exceed ", allocation_limit_text());
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = n;
  if (dtype == DType::kString) {
    auto* s = new std::string[size_t(n > 0 ? n : 1)];
    t.storage_ = std::shared_ptr<void>(s, [](void* p) { delete[] static_cast<std::string*>(p); });
    t.data_ = s;
  } else {
    void* p = host_allocate(size_t(bytes), 64);
    if (!p)
      throw_error<RuntimeError>("out of memory allocating ", bytes, " bytes for a ", dtype_name(dtype),
                                " tensor of shape ", shape_to_string(t.shape_));
    t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    t.data_ = p;
  }
  return t;
}

Tensor Tensor::empty(DType dtype, Shape shape, Allocator& allocator) {
  if (allocator.device().is_host()) return empty(dtype, std::move(shape));
  if (dtype == DType::kString)
    throw_error<NotImplemented>("string tensors live in host memory, not on ", allocator.device().name());
  if (!dtype_supported(dtype))
    throw_error<NotImplemented>("tensors of element type ", dtype_name(dtype), " are not supported");
  int64_t n;
  uint64_t bytes;
  if (!checked_numel(shape, &n) || __builtin_mul_overflow(uint64_t(n), uint64_t(dtype_size(dtype)), &bytes))
    throw_error<InvalidArgument>("invalid tensor shape ", shape_to_string(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = n;
  t.device_ = allocator.device();
  void* p = allocator.allocate(std::max<uint64_t>(bytes, 1), 64);
  Allocator* a = &allocator;
  t.storage_ = std::shared_ptr<void>(p, [a](void* q) { a->deallocate(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (dtype != DType::kString) std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> keepalive, Device device) {
  int64_t n;
  if (!checked_numel(shape, &n))
    throw_error<InvalidArgument>("invalid tensor shape ", shape_to_string(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = n;
  t.data_ = data;
  t.storage_ = std::move(keepalive);
  t.device_ = device;
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  int64_t n;
  if (!checked_numel(shape, &n) || n != numel_)
    throw_error<InvalidArgument>("cannot reshape ", describe(), " to ", shape_to_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  if (!device_.host_accessible())
    throw_error<InvalidArgument>("clone of a tensor on ", device_.name(), ": copy it through its execution provider");
  Tensor t = empty(dtype_, shape_);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.dtype_ != dtype_ || src.numel_ != numel_)
    throw_error<InvalidArgument>("copy_from: ", src.describe(), " into ", describe());
  if (!src.device_.host_accessible() || !device_.host_accessible())
    throw_error<InvalidArgument>("copy_from: ", src.device_.name(), " to ", device_.name(),
                                 " is a device copy: it goes through an execution provider");
  if (dtype_ == DType::kString) {
    auto* d = static_cast<std::string*>(data_);
    auto* s = static_cast<const std::string*>(src.data_);
    for (int64_t i = 0; i < numel_; ++i) d[i] = s[i];
  } else if (numel_ > 0 && data_ != src.data_) {
    std::memmove(data_, src.data_, nbytes());
  }
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_to_string(shape_) + (device_.is_host() ? "" : " on " + device_.name());
}

std::string Device::name() const {
  std::string base = type == Type::kCPU ? "cpu" : "cuda";
  return type == Type::kCPU && index == 0 ? base : base + ":" + std::to_string(index);
}

namespace {
class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  void* allocate(size_t bytes, size_t alignment) override {
    if (bytes > allocation_limit())
      throw_error<RuntimeError>("cannot allocate ", bytes, " bytes: over ", allocation_limit_text());
    alignment = std::max<size_t>(alignment, 64);
    void* p = host_allocate(bytes, alignment);
    if (!p) throw_error<RuntimeError>("out of memory allocating ", bytes, " bytes");
    return p;
  }
  void deallocate(void* p) override { std::free(p); }
};
}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

void Tensor::check_type(DType t) const {
  if (!device_.host_accessible())
    throw_error<InvalidArgument>("tensor on ", device_.name(), " read from the host: copy it to host memory first");
  if (t != dtype_)
    throw_error<InvalidArgument>("tensor of type ", dtype_name(dtype_), " accessed as ", dtype_name(t));
}

}  // namespace onnxtrain
