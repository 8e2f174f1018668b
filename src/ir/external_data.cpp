// External data (ir/external_data.h): reading a tensor's bytes from the file its proto names, with
// the location and range validated first; planning and writing the data file of a saved model.
#include "ir/external_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>

#include "core/atomic_file.h"
#include "ir/proto.h"
#include "onnxtrain/error.h"

namespace onnxtrain::ir {

namespace {

std::string errno_text() { return std::strerror(errno); }

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(v, uint64_t(10), &v) || __builtin_add_overflow(v, uint64_t(c - '0'), &v))
      return false;
  }
  *out = v;
  return true;
}

std::vector<std::string> split_path(const std::string& p) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : p) {
    if (c == '/') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  return parts;
}

// An opened, validated byte range of an external data file.
struct ExternalFile {
  int fd = -1;
  uint64_t offset = 0, length = 0;
  std::string location;
  ExternalFile() = default;
  ExternalFile(const ExternalFile&) = delete;
  ExternalFile& operator=(const ExternalFile&) = delete;
  ExternalFile(ExternalFile&& o) noexcept
      : fd(o.fd), offset(o.offset), length(o.length), location(std::move(o.location)), opened(o.opened) {
    o.fd = -1;
  }
  ~ExternalFile() {
    if (fd >= 0) ::close(fd);
  }
  void read_into(void* dst, const std::string& what) {
    char* out = static_cast<char*>(dst);
    uint64_t done = 0;
    while (done < length) {
      ssize_t r = ::pread(fd, out + done, size_t(std::min<uint64_t>(length - done, 1u << 30)), off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw_error<InvalidModel>("tensor '", what, "': short read from external data '", location, "'");
      done += uint64_t(r);
    }
    // A file written while it is read can yield bytes of neither version (a truncate and rewrite
    // racing the read gave zeros): the same size and times before and after, or an error.
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != opened.st_size || st.st_mtim.tv_sec != opened.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != opened.st_mtim.tv_nsec || st.st_ctim.tv_sec != opened.st_ctim.tv_sec ||
        st.st_ctim.tv_nsec != opened.st_ctim.tv_nsec)
      throw_error<InvalidModel>("tensor '", what, "': external data '", location, "' changed while it was read");
  }
  struct stat opened {};  ///< fstat at open
};

// The reference of `p` to its external data: location, offset, length (when given).
struct ExternalRef {
  std::string location;
  uint64_t offset = 0, length = 0;
  bool has_length = false;

  // Checks the range against a file of `size` bytes and that it holds exactly expected_bytes.
  void check_range(const std::string& what, uint64_t size, uint64_t expected_bytes) {
    if (!has_length) {
      if (offset > size)
        throw_error<InvalidModel>("tensor '", what, "': external data offset ", offset, " is past the end of '",
                                  location, "' (", size, " bytes)");
      length = size - offset;
    }
    if (length > size || offset > size - length)
      throw_error<InvalidModel>("tensor '", what, "': external data range offset ", offset, " length ", length,
                                " runs past the end of '", location, "' (", size, " bytes)");
    if (length != expected_bytes)
      throw_error<InvalidModel>("tensor '", what, "': external data length ", length, " does not match its ",
                                expected_bytes, " bytes (element count x element size)");
  }
};

ExternalRef external_ref(const onnx::TensorProto& p, const std::string& what) {
  ExternalRef r;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") {
      r.location = kv.value();
    } else if (kv.key() == "offset") {
      if (!parse_u64(kv.value(), &r.offset))
        throw_error<InvalidModel>("tensor '", what, "': external data offset '", kv.value(),
                                  "' is not a non-negative integer");
    } else if (kv.key() == "length") {
      if (!parse_u64(kv.value(), &r.length))
        throw_error<InvalidModel>("tensor '", what, "': external data length '", kv.value(),
                                  "' is not a non-negative integer");
      r.has_length = true;
    }
  }
  if (r.location.empty()) throw_error<InvalidModel>("tensor '", what, "': external data has no location");
  return r;
}

// Opens the external data of `p` after checking that the location is relative, free of "..",
// free of symlinks, and that the range lies inside the file and holds exactly expected_bytes.
ExternalFile open_external(const onnx::TensorProto& p, const std::string& what, const std::string& base_dir,
                           uint64_t expected_bytes) {
  ExternalRef ref = external_ref(p, what);
  const std::string& location = ref.location;
  if (base_dir.empty())
    throw_error<InvalidModel>("tensor '", what, "' uses external data ('", location,
                              "') but the model was loaded from bytes without a base directory");
  if (location[0] == '/')
    throw_error<InvalidModel>("tensor '", what, "': external data location '", location, "' is absolute");
  if (location.find('\0') != std::string::npos)
    throw_error<InvalidModel>("tensor '", what, "': external data location contains a NUL byte");
  auto parts = split_path(location);
  if (parts.empty()) throw_error<InvalidModel>("tensor '", what, "': external data location is empty");
  for (const auto& c : parts)
    if (c == "..")
      throw_error<InvalidModel>("tensor '", what, "': external data location '", location,
                                "' contains '..' (it must stay inside the model's folder)");
  std::string path = base_dir;
  for (size_t i = 0; i < parts.size(); ++i) {
    path += "/" + parts[i];
    struct stat st;
    if (lstat(path.c_str(), &st) != 0)
      throw_error<InvalidModel>("tensor '", what, "': external data file '", location, "' cannot be read: ",
                                errno_text());
    if (S_ISLNK(st.st_mode))
      throw_error<InvalidModel>("tensor '", what, "': external data location '", location,
                                "' goes through a symbolic link ('", parts[i], "')");
    if (i + 1 == parts.size() && !S_ISREG(st.st_mode))
      throw_error<InvalidModel>("tensor '", what, "': external data location '", location,
                                "' is not a regular file");
  }
  ExternalFile f;
  f.location = location;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (f.fd < 0)
    throw_error<InvalidModel>("tensor '", what, "': cannot open external data '", location, "': ", errno_text());
  struct stat st;
  if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw_error<InvalidModel>("tensor '", what, "': external data '", location, "' is not a regular file");
  f.opened = st;
  ref.check_range(what, uint64_t(st.st_size), expected_bytes);
  f.offset = ref.offset;
  f.length = ref.length;
  return f;
}

}  // namespace

Tensor read_external_data(const onnx::TensorProto& p, const std::string& what, const std::string& base_dir,
                          DType dtype, const Shape& shape, uint64_t nbytes, const ExternalFiles* in_memory) {
  if (in_memory) {
    ExternalRef ref = external_ref(p, what);
    auto it = in_memory->find(ref.location);
    if (it != in_memory->end()) {
      const Tensor& bytes = it->second;
      ref.check_range(what, uint64_t(bytes.nbytes()), nbytes);
      Tensor t = Tensor::empty(dtype, shape);
      if (nbytes) std::memcpy(t.raw_data(), static_cast<const char*>(bytes.raw_data()) + ref.offset, nbytes);
      return t;
    }
  }
  // The file range is validated (and must hold exactly nbytes) before the tensor is allocated.
  ExternalFile f = open_external(p, what, base_dir, nbytes);
  Tensor t = Tensor::empty(dtype, shape);
  f.read_into(t.raw_data(), what);
  return t;
}

namespace {

size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

}  // namespace

void ExternalPlan::add(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  p->set_name(name);
  p->set_data_type(static_cast<int>(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  const uint64_t head = p->ByteSizeLong(), n = t.nbytes();
  // Page-aligned for tensors of a page or more (mappable), 64-byte aligned (SIMD) below.
  const uint64_t align = n >= 4096 ? 4096 : 64;
  const uint64_t offset = (end + align - 1) / align * align;
  p->set_data_location(onnx::TensorProto::EXTERNAL);
  auto entry = [&](const char* key, const std::string& value) {
    auto* e = p->add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  entry("location", location);
  entry("offset", std::to_string(offset));
  entry("length", std::to_string(n));
  tensors.emplace_back(&t, offset);
  end = offset + n;
  // The same tensor inline: its header plus a raw_data field, each length-prefixed in its parent
  // (the parents' own prefixes may grow a few bytes more: this is a lower bound).
  const uint64_t external = p->ByteSizeLong(), inlined = head + 1 + varint_size(n) + n;
  inline_growth += int64_t(inlined + varint_size(inlined)) - int64_t(external + varint_size(external));
}

namespace {

std::string temp_name(const std::string& path, const char* kind) {
  static std::atomic<uint64_t> seq{0};
  return path + "." + kind + "." + std::to_string(::getpid()) + "." + std::to_string(seq++);
}

// Keeps the file at `path` (if any) under a temporary hard link while a new one replaces it, so
// that a failure later in the same save can put the previous one back; forgotten on success.
class Keeper {
 public:
  explicit Keeper(const std::string& path) : path_(path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return;
    existed_ = true;
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) return;  // a folder: replacing it fails anyway
    kept_ = temp_name(path, "keep");
    if (::link(path.c_str(), kept_.c_str()) != 0 && ::rename(path.c_str(), kept_.c_str()) != 0) kept_.clear();
  }
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;
  ~Keeper() {
    if (!kept_.empty()) ::unlink(kept_.c_str());
  }
  // Puts the previous file back (or removes the new one where there was none).
  void restore() {
    if (!kept_.empty()) {
      if (::rename(kept_.c_str(), path_.c_str()) == 0) kept_.clear();
    } else if (!existed_) {
      ::unlink(path_.c_str());
    }
  }

 private:
  std::string path_, kept_;
  bool existed_ = false;
};

}  // namespace

void write_with_external_data(const onnx::ModelProto& p, const ExternalPlan& plan, const std::string& path,
                              const std::string& data_path) {
  // The loader refuses external data through a symbolic link (it must stay in the model's folder):
  // a link there is refused rather than followed to a model that would not load.
  if (struct stat st; ::lstat(data_path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    throw_error<IOError>("cannot write external data file '", data_path, "': it is a symbolic link, and external data "
                         "is read only from a file in the model's folder (remove the link or give another location)");
  core::AtomicFile data(data_path, "external data file");
  uint64_t pos = 0;
  for (const auto& [t, offset] : plan.tensors) {
    data.write_zeros(offset - pos);
    data.write(t->raw_data(), t->nbytes());
    pos = offset + t->nbytes();
  }
  data.finish();
  core::AtomicFile model(path, "model file");
  write_message(model, p);
  model.finish();
  // The data file goes in place first, the model (which points to it) last; a failure in between
  // puts the previous data file back (a data file written through to a device or FIFO is gone).
  std::optional<Keeper> previous;
  if (!data.streams()) previous.emplace(data.target());
  try {
    data.commit();
    model.commit();
  } catch (...) {
    if (previous) previous->restore();
    throw;
  }
}

}  // namespace onnxtrain::ir
