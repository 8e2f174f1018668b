// Public file helpers: thin wrappers over src/io (arrays) and src/ir (files), plus the CSV reader.
#include "onnxtrain/io.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "io/npy.h"
#include "ir/onnx_io.h"

namespace onnxtrain {

namespace {
constexpr uint64_t kMaxFile = uint64_t(1) << 40;

// Splits one CSV line into fields (RFC 4180 quoting, no embedded newlines).
std::vector<std::string> split_csv_line(const std::string& line, const std::string& where) {
  std::vector<std::string> fields;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"' && cur.find_first_not_of(" \t") == std::string::npos) {
      quoted = true;
      cur.clear();
    } else if (c == ',') {
      fields.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (quoted) throw_error<InvalidArgument>(where, ": unterminated quoted field");
  fields.push_back(cur);
  for (auto& f : fields) {
    const size_t b = f.find_first_not_of(" \t"), e = f.find_last_not_of(" \t");
    f = b == std::string::npos ? std::string() : f.substr(b, e - b + 1);
  }
  return fields;
}

bool parse_number(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}
}  // namespace

Tensor read_npy(const std::string& path) { return io::read_npy(path); }
void write_npy(const std::string& path, const Tensor& t) { io::write_npy(path, t); }
std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path) { return io::read_npz(path); }
void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays) {
  io::write_npz(path, arrays);
}

std::vector<double> tensor_to_doubles(const Tensor& t) {
  std::vector<double> r(size_t(t.numel()));
  auto fill = [&](const auto* p) {
    for (size_t i = 0; i < r.size(); ++i) r[i] = double(p[i]);
  };
  switch (t.dtype()) {
    case DType::kFloat32: fill(t.data<float>()); break;
    case DType::kFloat64: fill(t.data<double>()); break;
    case DType::kFloat16: for (size_t i = 0; i < r.size(); ++i) r[i] = float(t.data<float16>()[i]); break;
    case DType::kBFloat16: for (size_t i = 0; i < r.size(); ++i) r[i] = float(t.data<bfloat16>()[i]); break;
    case DType::kInt64: fill(t.data<int64_t>()); break;
    case DType::kInt32: fill(t.data<int32_t>()); break;
    case DType::kInt16: fill(t.data<int16_t>()); break;
    case DType::kInt8: fill(t.data<int8_t>()); break;
    case DType::kUInt64: fill(t.data<uint64_t>()); break;
    case DType::kUInt32: fill(t.data<uint32_t>()); break;
    case DType::kUInt16: fill(t.data<uint16_t>()); break;
    case DType::kUInt8: fill(t.data<uint8_t>()); break;
    case DType::kBool: fill(t.data<bool>()); break;
    default: throw_error<NotImplemented>("cannot read ", dtype_name(t.dtype()), " values as numbers");
  }
  return r;
}

std::string read_file(const std::string& path, const std::string& what) {
  return ir::read_file(path, what.c_str(), kMaxFile);
}

void write_file_atomic(const std::string& path, const std::string& bytes) { ir::write_file_atomic(path, bytes); }

ExternalData parse_external_data(const std::string& name) {
  if (name == "auto") return ExternalData::kAuto;
  if (name == "always") return ExternalData::kAlways;
  if (name == "never") return ExternalData::kNever;
  throw_error<InvalidArgument>("external data mode '", name, "' is not one of auto, always, never");
}

CsvTable read_csv(const std::string& path) {
  const std::string text = read_file(path, "CSV file");
  const std::string what = "'" + path + "'";
  CsvTable t;
  std::vector<double> values;
  size_t ncols = 0;
  int64_t rows = 0;
  size_t pos = 0, lineno = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;  // UTF-8 byte order mark
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = what + " line " + std::to_string(lineno);
    if (line.find('\0') != std::string::npos) throw_error<InvalidArgument>(where, ": not a text file (NUL byte)");
    std::vector<std::string> f = split_csv_line(line, where);
    if (ncols == 0) {
      ncols = f.size();
      bool numeric = true;
      double v;
      for (const auto& s : f) numeric &= parse_number(s, &v);
      if (!numeric) {
        t.has_header = true;
        t.columns = f;
        continue;
      }
      for (size_t c = 0; c < ncols; ++c) t.columns.push_back(std::to_string(c));
    }
    if (f.size() != ncols)
      throw_error<InvalidArgument>(where, " has ", f.size(), " fields, the ", t.has_header ? "header has " : "first row has ",
                                   ncols);
    for (size_t c = 0; c < ncols; ++c) {
      double v;
      if (!parse_number(f[c], &v))
        throw_error<InvalidArgument>(where, ", column '", t.columns[c], "': '", f[c].substr(0, 40), "' is not a number");
      values.push_back(v);
    }
    ++rows;
  }
  if (rows == 0) throw_error<InvalidArgument>(what, " holds no data rows");
  t.values = Tensor::from_vector<double>({rows, int64_t(ncols)}, values);
  return t;
}

}  // namespace onnxtrain
