#include "io/npy.h"

#include <zip.h>
#include <zlib.h>

#include <cstring>

#include "ir/onnx_io.h"

namespace onnxtrain::io {

namespace {

constexpr uint64_t kMaxFile = uint64_t(1) << 40;

struct Descr {
  DType dtype;
  bool ok;
};

Descr parse_descr(const std::string& d) {
  if (d.size() < 3) return {DType::kUndefined, false};
  const char order = d[0];
  if (order == '>') return {DType::kUndefined, false};
  const std::string t = d.substr(1);
  static const std::pair<const char*, DType> table[] = {
      {"f4", DType::kFloat32}, {"f8", DType::kFloat64}, {"f2", DType::kFloat16}, {"i1", DType::kInt8},
      {"i2", DType::kInt16},   {"i4", DType::kInt32},   {"i8", DType::kInt64},   {"u1", DType::kUInt8},
      {"u2", DType::kUInt16},  {"u4", DType::kUInt32},  {"u8", DType::kUInt64},  {"b1", DType::kBool},
  };
  for (const auto& [k, v] : table)
    if (t == k) return {v, true};
  return {DType::kUndefined, false};
}

std::string descr_of(DType t, const std::string& what) {
  switch (t) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kFloat16: return "<f2";
    case DType::kInt8: return "|i1";
    case DType::kInt16: return "<i2";
    case DType::kInt32: return "<i4";
    case DType::kInt64: return "<i8";
    case DType::kUInt8: return "|u1";
    case DType::kUInt16: return "<u2";
    case DType::kUInt32: return "<u4";
    case DType::kUInt64: return "<u8";
    case DType::kBool: return "|b1";
    default: break;
  }
  throw_error<InvalidArgument>(what, ": element type ", dtype_name(t), " cannot be written to .npy");
}

// Value of key `key` in a Python dict literal such as "{'descr': '<f4', 'shape': (3,), }".
std::string dict_value(const std::string& h, const std::string& key, const std::string& what) {
  const std::string k = "'" + key + "'";
  auto p = h.find(k);
  if (p == std::string::npos) throw_error<InvalidArgument>(what, ": .npy header lacks '", key, "'");
  p = h.find(':', p + k.size());
  if (p == std::string::npos) throw_error<InvalidArgument>(what, ": malformed .npy header");
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (p >= h.size()) throw_error<InvalidArgument>(what, ": malformed .npy header");
  if (h[p] == '\'') {
    auto e = h.find('\'', p + 1);
    if (e == std::string::npos) throw_error<InvalidArgument>(what, ": malformed .npy header");
    return h.substr(p + 1, e - p - 1);
  }
  if (h[p] == '(') {
    auto e = h.find(')', p);
    if (e == std::string::npos) throw_error<InvalidArgument>(what, ": malformed .npy header");
    return h.substr(p, e - p + 1);
  }
  auto e = h.find_first_of(",}", p);
  return h.substr(p, e == std::string::npos ? std::string::npos : e - p);
}

}  // namespace

Tensor parse_npy(const void* data, size_t size, const std::string& what) {
  const auto* b = static_cast<const unsigned char*>(data);
  if (size < 10 || std::memcmp(b, "\x93NUMPY", 6) != 0)
    throw_error<InvalidArgument>(what, ": not a .npy array (bad magic)");
  const int major = b[6];
  size_t hlen, off;
  if (major == 1) {
    hlen = size_t(b[8]) | (size_t(b[9]) << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw_error<InvalidArgument>(what, ": truncated .npy header");
    hlen = size_t(b[8]) | (size_t(b[9]) << 8) | (size_t(b[10]) << 16) | (size_t(b[11]) << 24);
    off = 12;
  } else {
    throw_error<InvalidArgument>(what, ": unsupported .npy version ", major);
  }
  if (hlen > size - off) throw_error<InvalidArgument>(what, ": truncated .npy header");
  const std::string h(reinterpret_cast<const char*>(b + off), hlen);
  const std::string descr = dict_value(h, "descr", what);
  const Descr d = parse_descr(descr);
  if (!d.ok) throw_error<InvalidArgument>(what, ": unsupported .npy dtype '", descr, "'");
  const bool fortran = dict_value(h, "fortran_order", what).find("True") != std::string::npos;
  const std::string sh = dict_value(h, "shape", what);
  Shape shape;
  {
    std::string num;
    for (char c : sh) {
      if (c >= '0' && c <= '9') {
        num += c;
        if (num.size() > 18) throw_error<InvalidArgument>(what, ": .npy dimension too large");
      } else if (c == ',' || c == ')') {
        if (!num.empty()) shape.push_back(std::stoll(num));
        num.clear();
      } else if (c != '(' && c != ' ' && c != 'L') {
        throw_error<InvalidArgument>(what, ": malformed .npy shape '", sh, "'");
      }
    }
  }
  int64_t n;
  if (!checked_numel(shape, &n)) throw_error<InvalidArgument>(what, ": .npy shape overflows");
  const size_t body = size - off - hlen;
  const uint64_t need = uint64_t(n) * dtype_size(d.dtype);
  if (need / dtype_size(d.dtype) != uint64_t(n) || need != body)
    throw_error<InvalidArgument>(what, ": .npy data holds ", body, " bytes, its shape ", shape_to_string(shape),
                                 " needs ", need);
  Tensor t = Tensor::empty(d.dtype, shape);
  const unsigned char* src = b + off + hlen;
  if (!fortran || shape.size() < 2) {
    if (need) std::memcpy(t.raw_data(), src, need);
    if (d.dtype == DType::kBool) {
      auto* p = static_cast<uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
    }
    return t;
  }
  // Fortran order: element (i0, i1, ...) sits at sum(i_k * prod(shape[:k])).
  const size_t es = dtype_size(d.dtype);
  const size_t r = shape.size();
  std::vector<int64_t> idx(r, 0);
  auto* dst = static_cast<unsigned char*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t fo = 0, stride = 1;
    for (size_t k = 0; k < r; ++k) {
      fo += idx[k] * stride;
      stride *= shape[k];
    }
    std::memcpy(dst + size_t(i) * es, src + size_t(fo) * es, es);
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return t;
}

std::string format_npy(const Tensor& t) {
  std::string shape = "(";
  for (size_t i = 0; i < t.rank(); ++i) shape += std::to_string(t.dim(i)) + (t.rank() == 1 || i + 1 < t.rank() ? "," : "");
  shape += ")";
  // numpy writes "(3,)" for 1-d and "(2, 3)" for 2-d; both parse the same.
  std::string h = "{'descr': '" + descr_of(t.dtype(), "array") + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  h += std::string(pad, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(h.size() & 0xff);
  out += char((h.size() >> 8) & 0xff);
  out += h;
  out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

Tensor read_npy(const std::string& path) {
  std::string bytes = ir::read_file(path, "array file", kMaxFile);
  return parse_npy(bytes.data(), bytes.size(), "'" + path + "'");
}

void write_npy(const std::string& path, const Tensor& t) { ir::write_file_atomic(path, format_npy(t)); }

namespace {

void wr16(std::string& s, uint16_t v) {
  s += char(v & 0xff);
  s += char(v >> 8);
}
void wr32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += char((v >> (8 * i)) & 0xff);
}

}  // namespace

namespace {

// libzip's archive and entry handles, closed on scope exit.
struct ZipArchive {
  zip_t* z = nullptr;
  ~ZipArchive() {
    if (z) zip_discard(z);
  }
};
struct ZipEntry {
  zip_file_t* f = nullptr;
  ~ZipEntry() {
    if (f) zip_fclose(f);
  }
};

std::string zip_message(zip_error_t* e) {
  std::string m = zip_error_strerror(e);
  zip_error_fini(e);
  return m;
}

}  // namespace

// The archive is parsed by libzip (Debian's libzip), never by our own code: the central
// directory, zip64 records, compression methods and CRCs are its business.
std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path) {
  const std::string bytes = ir::read_file(path, "npz archive", kMaxFile);
  const std::string what = "'" + path + "'";
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &err);
  if (!src) throw_error<RuntimeError>(what, ": ", zip_message(&err));
  ZipArchive za;
  za.z = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!za.z) {
    zip_source_free(src);
    throw_error<InvalidArgument>(what, " is not a valid .npz (zip) archive: ", zip_message(&err));
  }
  zip_error_fini(&err);
  const zip_int64_t n = zip_get_num_entries(za.z, 0);
  std::vector<std::pair<std::string, Tensor>> out;
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za.z, zip_uint64_t(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) || !(st.valid & ZIP_STAT_SIZE))
      throw_error<InvalidArgument>(what, ": corrupt zip entry ", i, ": ", zip_strerror(za.z));
    std::string name = st.name;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    const std::string ewhat = what + "[" + name + "]";
    // numpy writes stored (savez) and deflated (savez_compressed) entries; deflate expands at most
    // 1032:1, which bounds what a small hostile archive can make us allocate.
    if (!(st.valid & ZIP_STAT_COMP_METHOD) || (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE))
      throw_error<InvalidArgument>(ewhat, ": unsupported zip compression method ", st.comp_method,
                                   " (numpy's archives are stored or deflated)");
    if (st.size > uint64_t(allocation_limit()) || st.size > bytes.size() * uint64_t(1032) + 1024)
      throw_error<InvalidArgument>(ewhat, ": entry of ", st.size, " bytes is too large for an archive of ",
                                   bytes.size(), " bytes");
    ZipEntry f;
    f.f = zip_fopen_index(za.z, zip_uint64_t(i), 0);
    if (!f.f) throw_error<InvalidArgument>(ewhat, ": ", zip_strerror(za.z));
    std::string buf(size_t(st.size), '\0');
    const zip_int64_t got = st.size ? zip_fread(f.f, buf.data(), st.size) : 0;
    char extra;
    // Reading one byte past the declared size checks the size; libzip checks the CRC at the end.
    if (got < 0 || uint64_t(got) != st.size || zip_fread(f.f, &extra, 1) != 0)
      throw_error<InvalidArgument>(ewhat, ": corrupt zip data: ", zip_file_strerror(f.f));
    out.emplace_back(name, parse_npy(buf.data(), buf.size(), ewhat));
  }
  return out;
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays) {
  std::string out, cd;
  uint16_t count = 0;
  for (const auto& [name, t] : arrays) {
    const std::string fname = name + ".npy";
    const std::string body = format_npy(t);
    if (body.size() >= 0xffffffffu || out.size() >= 0xffffffffu)
      throw_error<InvalidArgument>("write_npz: array '", name, "' is too large for a non-zip64 archive");
    const uint32_t crc = uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size())));
    const uint32_t off = uint32_t(out.size());
    wr32(out, 0x04034b50); wr16(out, 20); wr16(out, 0); wr16(out, 0); wr16(out, 0); wr16(out, 0x21);
    wr32(out, crc); wr32(out, uint32_t(body.size())); wr32(out, uint32_t(body.size()));
    wr16(out, uint16_t(fname.size())); wr16(out, 0);
    out += fname;
    out += body;
    wr32(cd, 0x02014b50); wr16(cd, 20); wr16(cd, 20); wr16(cd, 0); wr16(cd, 0); wr16(cd, 0); wr16(cd, 0x21);
    wr32(cd, crc); wr32(cd, uint32_t(body.size())); wr32(cd, uint32_t(body.size()));
    wr16(cd, uint16_t(fname.size())); wr16(cd, 0); wr16(cd, 0); wr16(cd, 0); wr16(cd, 0); wr32(cd, 0);
    wr32(cd, off);
    cd += fname;
    ++count;
  }
  const uint32_t cd_off = uint32_t(out.size());
  out += cd;
  wr32(out, 0x06054b50); wr16(out, 0); wr16(out, 0); wr16(out, count); wr16(out, count);
  wr32(out, uint32_t(cd.size())); wr32(out, cd_off); wr16(out, 0);
  ir::write_file_atomic(path, out);
}

}  // namespace onnxtrain::io
