#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/atomic_file.h"
#include "onnxtrain/error.h"

namespace onnxtrain::train {

namespace {

constexpr char kMagic[16] = {'O', 'N', 'N', 'X', 'T', 'R', 'A', 'I', 'N', '-', 'C', 'K', 'P', 'T', 0, 0};
constexpr char kEndMagic[16] = {'O', 'N', 'N', 'X', 'T', 'R', 'A', 'I', 'N', '-', 'E', 'N', 'D', 0, 0, 0};

// CRC-32 of `n` more bytes after `c` (crc32(0, Z_NULL, 0) to start).
uLong crc_update(uLong c, const void* data, uint64_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt chunk = uInt(std::min<uint64_t>(n, 1u << 30));
    c = crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return c;
}

uint32_t crc_of(const void* data, uint64_t n) { return uint32_t(crc_update(crc32(0L, Z_NULL, 0), data, n)); }

struct Writer {
  std::string buf;
  void u32(uint32_t v) { buf.append(reinterpret_cast<const char*>(&v), 4); }
  void i32(int32_t v) { buf.append(reinterpret_cast<const char*>(&v), 4); }
  void u64(uint64_t v) { buf.append(reinterpret_cast<const char*>(&v), 8); }
  void i64(int64_t v) { buf.append(reinterpret_cast<const char*>(&v), 8); }
  void str(const std::string& s) {
    u32(uint32_t(s.size()));
    buf += s;
  }
};

struct Reader {
  const char* p;
  size_t n, pos = 0;
  std::string path;
  void need(size_t k) {
    if (k > n - pos) throw_error<InvalidArgument>("checkpoint '", path, "' has a corrupted header (runs past its end)");
  }
  template <class T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  uint32_t u32() { return pod<uint32_t>(); }
  int32_t i32() { return pod<int32_t>(); }
  uint64_t u64() { return pod<uint64_t>(); }
  int64_t i64() { return pod<int64_t>(); }
  std::string str() {
    const uint32_t k = u32();
    need(k);
    std::string s(p + pos, k);
    pos += k;
    return s;
  }
};

void read_all(int fd, void* data, uint64_t n, uint64_t off, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, size_t(std::min<uint64_t>(n, 1u << 30)), off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw_error<InvalidArgument>("checkpoint '", path, "' is truncated");
    p += r;
    n -= uint64_t(r);
    off += uint64_t(r);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  // Header with the tensor table; data offsets are relative to the start of the data section.
  Writer h;
  h.str(c.fingerprint);
  h.u32(uint32_t(c.counters.size()));
  for (const auto& [k, v] : c.counters) {
    h.str(k);
    h.i64(v);
  }
  h.u32(uint32_t(c.text.size()));
  for (const auto& [k, v] : c.text) {
    h.str(k);
    h.str(v);
  }
  h.u32(uint32_t(c.tensors.size()));
  uint64_t off = 0;
  for (const auto& [name, t] : c.tensors) {
    if (t.dtype() == DType::kString) throw_error<InvalidArgument>("checkpoint: tensor '", name, "' is a string tensor");
    h.str(name);
    h.i32(int32_t(t.dtype()));
    h.u32(uint32_t(t.rank()));
    for (int64_t d : t.shape()) h.i64(d);
    h.u64(off);
    h.u64(t.nbytes());
    h.u32(crc_of(t.raw_data(), t.nbytes()));
    off += t.nbytes();
  }
  Writer pre;
  pre.buf.append(kMagic, 16);
  pre.u32(kCheckpointVersion);
  pre.u32(crc_of(h.buf.data(), h.buf.size()));
  pre.u64(h.buf.size());
  const uint64_t head = pre.buf.size() + h.buf.size();
  const uint64_t data_start = head;  // no padding: every byte is checked
  const uint64_t total = data_start + off + 16 + 8;

  core::AtomicFile f(path, "checkpoint");
  f.write(pre.buf.data(), pre.buf.size());
  f.write(h.buf.data(), h.buf.size());
  for (const auto& [name, t] : c.tensors) f.write(t.raw_data(), t.nbytes());
  Writer tail;
  tail.buf.append(kEndMagic, 16);
  tail.u64(total);
  f.write(tail.buf.data(), tail.buf.size());
  f.commit();
}

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    if (errno == ENOENT) throw_error<NoSuchFile>("cannot open checkpoint '", path, "': ", std::strerror(errno));
    throw_error<IOError>("cannot open checkpoint '", path, "': ", std::strerror(errno));
  }
  Fd owner{fd_};  // closes the file if the constructor throws
  struct stat st;
  if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) throw_error<IOError>("checkpoint '", path, "' is not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  if (size < 32 + 24) throw_error<InvalidArgument>("checkpoint '", path, "' is truncated (", size, " bytes)");
  char pre[32];
  read_all(fd_, pre, 32, 0, path);
  if (std::memcmp(pre, kMagic, 16) != 0) throw_error<InvalidArgument>("'", path, "' is not an onnxtrain checkpoint");
  uint32_t version, hcrc;
  uint64_t hlen;
  std::memcpy(&version, pre + 16, 4);
  std::memcpy(&hcrc, pre + 20, 4);
  std::memcpy(&hlen, pre + 24, 8);
  if (version > kCheckpointVersion)
    throw_error<InvalidArgument>("checkpoint '", path, "' has format version ", version,
                                 ", newer than this onnxtrain supports (", kCheckpointVersion, ")");
  if (version == 0) throw_error<InvalidArgument>("checkpoint '", path, "' has invalid format version 0");
  if (hlen > size - 32) throw_error<InvalidArgument>("checkpoint '", path, "' is truncated (header)");
  // The trailer records the total size: a shorter file was cut.
  char tail[24];
  read_all(fd_, tail, 24, size - 24, path);
  uint64_t total = 0;
  std::memcpy(&total, tail + 16, 8);
  if (std::memcmp(tail, kEndMagic, 16) != 0 || total != size)
    throw_error<InvalidArgument>("checkpoint '", path, "' is truncated or damaged (end marker missing)");
  std::string header(size_t(hlen), '\0');
  read_all(fd_, header.data(), hlen, 32, path);
  if (crc_of(header.data(), header.size()) != hcrc)
    throw_error<InvalidArgument>("checkpoint '", path, "' has a corrupted header (checksum mismatch)");
  Reader r{header.data(), header.size(), 0, path};
  Checkpoint& c = meta_;
  c.version = version;
  c.fingerprint = r.str();
  for (uint32_t i = 0, n = r.u32(); i < n; ++i) {
    std::string k = r.str();
    c.counters[k] = r.i64();
  }
  for (uint32_t i = 0, n = r.u32(); i < n; ++i) {
    std::string k = r.str();
    c.text[k] = r.str();
  }
  const uint64_t data_start = 32 + hlen;
  const uint64_t data_end = size - 24;
  for (uint32_t i = 0, n = r.u32(); i < n; ++i) {
    CheckpointEntry e;
    e.name = r.str();
    const int32_t dt = r.i32();
    const uint32_t rank = r.u32();
    if (rank > 64) throw_error<InvalidArgument>("checkpoint '", path, "': tensor '", e.name, "' has rank ", rank);
    for (uint32_t k = 0; k < rank; ++k) e.shape.push_back(r.i64());
    const uint64_t off = r.u64();
    e.nbytes = r.u64();
    e.crc = r.u32();
    e.dtype = static_cast<DType>(dt);
    int64_t numel;
    if (dt <= 0 || dt > 16 || !dtype_supported(e.dtype) || e.dtype == DType::kString ||
        !checked_numel(e.shape, &numel) || uint64_t(numel) * dtype_size(e.dtype) != e.nbytes)
      throw_error<InvalidArgument>("checkpoint '", path, "': tensor '", e.name, "' has an invalid type or shape");
    if (off > data_end - data_start || e.nbytes > data_end - data_start - off)
      throw_error<InvalidArgument>("checkpoint '", path, "': tensor '", e.name, "' runs past the end of the file");
    e.offset = data_start + off;
    entries_.push_back(std::move(e));
  }
  owner.fd = -1;
}

CheckpointReader::~CheckpointReader() {
  if (fd_ >= 0) ::close(fd_);
}

void CheckpointReader::read_into(const CheckpointEntry& e, void* dst) const {
  read_all(fd_, dst, e.nbytes, e.offset, path_);
  if (crc_of(dst, e.nbytes) != e.crc)
    throw_error<InvalidArgument>("checkpoint '", path_, "': tensor '", e.name, "' is corrupted (checksum mismatch)");
}

Tensor CheckpointReader::read(const CheckpointEntry& e) const {
  Tensor t = Tensor::empty(e.dtype, e.shape);
  read_into(e, t.raw_data());
  return t;
}

void CheckpointReader::verify_all() const {
  constexpr uint64_t kChunk = uint64_t(8) << 20;
  std::vector<char> buf;
  for (const CheckpointEntry& e : entries_) {
    buf.resize(size_t(std::min(e.nbytes, kChunk)));
    uLong c = crc32(0L, Z_NULL, 0);
    for (uint64_t done = 0; done < e.nbytes;) {
      const uint64_t k = std::min(e.nbytes - done, kChunk);
      read_all(fd_, buf.data(), k, e.offset + done, path_);
      c = crc_update(c, buf.data(), k);
      done += k;
    }
    if (uint32_t(c) != e.crc)
      throw_error<InvalidArgument>("checkpoint '", path_, "': tensor '", e.name, "' is corrupted (checksum mismatch)");
  }
}

Checkpoint read_checkpoint(const std::string& path) {
  CheckpointReader r(path);
  Checkpoint c = r.meta();
  for (const CheckpointEntry& e : r.entries()) c.tensors.emplace_back(e.name, r.read(e));
  return c;
}

std::string model_fingerprint(const ir::Model& m, const std::vector<std::string>& trained) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char ch : s) {
      h ^= ch;
      h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
  };
  for (const auto& [n, t] : m.graph->initializers)
    if (dtype_is_float(t.dtype())) mix(n + ":" + t.describe());
  for (const auto& n : trained) mix("trained:" + n);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace onnxtrain::train
