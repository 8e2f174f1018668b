#include "data.h"

#include <cmath>
#include <cstring>
#include <set>

#include "onnxtrain/error.h"
#include "onnxtrain/io.h"

namespace cli {

using namespace onnxtrain;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string numpy_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "np.float32";
    case DType::kFloat64: return "np.float64";
    case DType::kFloat16: return "np.float16";
    case DType::kInt64: return "np.int64";
    case DType::kInt32: return "np.int32";
    default: return std::string("np.") + dtype_name(t);
  }
}

// Checks `t` against the declared input; reshapes [N, k] <-> [N, a, b, ...] when the declared
// sample dimensions are all fixed and hold the same number of values ([N] -> [N, 1], images).
Tensor conform(Tensor t, const NodeArg& decl, const std::string& what) {
  const std::string who = decl.name == "" ? "the input" : "the model's input '" + decl.name + "'";
  if (decl.elem != DType::kUndefined && t.dtype() != decl.elem)
    throw_error<InvalidArgument>(what, " holds ", dtype_name(t.dtype()), " values, ", who, " expects ",
                                 dtype_name(decl.elem), " (convert it with .astype(", numpy_name(decl.elem), "))");
  if (t.rank() == 0) throw_error<InvalidArgument>(what, " is a scalar; it needs a first axis of samples");
  if (!decl.has_shape) return t;
  const auto& d = decl.shape;
  if (t.rank() != d.size() && d.size() >= 1) {
    bool sample_fixed = true;
    int64_t per = 1;
    for (size_t i = 1; i < d.size(); ++i) {
      sample_fixed &= d[i].value >= 0;
      per *= std::max<int64_t>(d[i].value, 0);
    }
    if (sample_fixed && t.dim(0) > 0 && t.numel() == t.dim(0) * per) {
      Shape s{t.dim(0)};
      for (size_t i = 1; i < d.size(); ++i) s.push_back(d[i].value);
      return t.reshaped(s);
    }
    throw_error<InvalidArgument>(what, " has shape ", shape_to_string(t.shape()), ", ", who, " expects ",
                                 describe_arg(decl), " (rank ", d.size(), ")");
  }
  for (size_t i = 1; i < d.size(); ++i)
    if (d[i].value >= 0 && d[i].value != t.dim(i))
      throw_error<InvalidArgument>(what, " has shape ", shape_to_string(t.shape()), ", ", who, " expects ",
                                   describe_arg(decl), " (axis ", i, ": ", t.dim(i), " instead of ", d[i].value, ")");
  return t;
}

template <class T>
Tensor cast_doubles(const std::vector<double>& v, Shape shape) {
  Tensor t = Tensor::empty(dtype_v<T>, std::move(shape));
  T* p = t.data<T>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(v[i]);
  return t;
}

// A column block of a CSV table as a tensor of `dt` (integers must be integral).
Tensor from_doubles(const std::vector<double>& v, Shape shape, DType dt, const std::string& what) {
  if (dtype_is_integer(dt) || dt == DType::kBool)
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]) || v[i] != std::floor(v[i]))
        throw_error<InvalidArgument>(what, ": value ", v[i], " (row ", i / std::max<int64_t>(1, shape_numel(shape) / std::max<int64_t>(1, shape[0])) + 1,
                                     ") is not an integer, the model expects ", dtype_name(dt));
  switch (dt) {
    case DType::kUndefined:
    case DType::kFloat32: return cast_doubles<float>(v, shape);
    case DType::kFloat64: return cast_doubles<double>(v, shape);
    case DType::kInt64: return cast_doubles<int64_t>(v, shape);
    case DType::kInt32: return cast_doubles<int32_t>(v, shape);
    case DType::kInt16: return cast_doubles<int16_t>(v, shape);
    case DType::kInt8: return cast_doubles<int8_t>(v, shape);
    case DType::kUInt8: return cast_doubles<uint8_t>(v, shape);
    case DType::kBool: return cast_doubles<bool>(v, shape);
    case DType::kFloat16: {
      Tensor t = Tensor::empty(DType::kFloat16, shape);
      for (size_t i = 0; i < v.size(); ++i) t.data<float16>()[i] = float16(float(v[i]));
      return t;
    }
    default: break;
  }
  throw_error<InvalidArgument>(what, ": a CSV file cannot feed ", dtype_name(dt), " values");
}

Dataset load_csv(const DataSource& src, const std::vector<NodeArg>& features, const NodeArg* label,
                 const std::string& label_array, const std::string& optional_label_array) {
  const std::string what = "'" + src.path + "'";
  if (features.size() != 1) {
    std::vector<std::string> names;
    for (const auto& f : features) names.push_back(f.name);
    throw_error<InvalidArgument>("a CSV file feeds a model with one input; this model has ", features.size(), " (",
                                 join(names), "): use an .npz with one array per input");
  }
  CsvTable t = read_csv(src.path);
  const int64_t rows = t.values.dim(0), cols = t.values.dim(1);
  int64_t lc = -1;
  const std::string wanted = !src.label_column.empty() ? src.label_column : label ? label_array : optional_label_array;
  if (!wanted.empty()) {
    for (int64_t c = 0; c < cols; ++c)
      if (t.columns[size_t(c)] == wanted) lc = c;
    if (lc < 0 && !src.label_column.empty()) {
      char* end = nullptr;
      const long long k = std::strtoll(wanted.c_str(), &end, 10);
      if (end == wanted.c_str() || *end != '\0' || k < -cols || k >= cols)
        throw_error<InvalidArgument>(what, " has no column '", wanted, "' (columns: ", join(t.columns), ")");
      lc = k < 0 ? cols + k : k;
    }
  }
  if (label && lc < 0) lc = cols - 1;  // no header naming it: the last column
  if (label && cols < 2) throw_error<InvalidArgument>(what, " has one column; it needs features and a label column");
  const double* v = t.values.data<double>();
  std::vector<double> x, y;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) (c == lc ? y : x).push_back(v[r * cols + c]);
  const int64_t nf = lc >= 0 ? cols - 1 : cols;
  std::vector<std::pair<std::string, Tensor>> arrays;
  const std::string fwhat = what + " (" + std::to_string(nf) + " feature columns)";
  arrays.emplace_back(features[0].name, conform(from_doubles(x, {rows, nf}, features[0].elem, fwhat), features[0], fwhat));
  if (label) {
    const std::string lwhat = what + " column '" + t.columns[size_t(lc)] + "'";
    arrays.emplace_back(label->name, conform(from_doubles(y, {rows}, label->elem, lwhat), *label, lwhat));
  }
  return Dataset(std::move(arrays));
}

}  // namespace

void add_data_options(CLI::App& app, DataArgs& a, bool with_inputs) {
  app.add_option("--data", a.data,
                 "data: .npz (one array per model input, named after it, plus the label array), .npy (features of a "
                 "one-input model; labels in --labels) or .csv (numbers; a header line is optional)")
      ->type_name("FILE");
  app.add_option("--labels", a.labels, "labels of .npy features")->type_name("FILE.npy");
  app.add_option("--label-column", a.label_column,
                 "CSV label column, a name or a 0-based index (default: the column named like --label-name, else the "
                 "last one)")
      ->type_name("COL");
  if (with_inputs)
    app.add_option("--input", a.inputs, "one model input from an .npy (repeatable)")
        ->type_name("NAME=FILE.npy")
        ->allow_extra_args(false);
}

DataSource data_source(const DataArgs& a) {
  DataSource s;
  s.path = a.data;
  s.labels_path = a.labels;
  s.label_column = a.label_column;
  for (const auto& v : a.inputs) {
    auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("option --input expects NAME=FILE.npy, got '" + v + "'");
    s.npy_inputs.emplace_back(v.substr(0, eq), v.substr(eq + 1));
  }
  return s;
}

std::string source_name(const DataSource& src) {
  return src.path.empty() ? "the --input arrays" : "'" + src.path + "'";
}

std::string describe_arg(const NodeArg& a) {
  std::string s = a.elem == DType::kUndefined ? a.type : dtype_name(a.elem);
  if (!a.has_shape) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < a.shape.size(); ++i) {
    if (i) s += ", ";
    s += a.shape[i].value >= 0 ? std::to_string(a.shape[i].value) : a.shape[i].symbol.empty() ? "?" : a.shape[i].symbol;
  }
  return s + "]";
}

Dataset load_dataset(const DataSource& src, const std::vector<NodeArg>& features, const NodeArg* label,
                     const std::string& label_array, const std::string& optional_label_array) {
  const std::string what = "'" + src.path + "'";
  std::vector<std::pair<std::string, Tensor>> raw;  // name in the file -> array
  const bool npy = ends_with(src.path, ".npy");
  if (ends_with(src.path, ".csv")) {
    if (!src.labels_path.empty()) throw_error<InvalidArgument>("--labels goes with .npy data; a CSV file holds its label column");
    if (!src.npy_inputs.empty()) throw_error<InvalidArgument>("--input does not combine with CSV data");
    return load_csv(src, features, label, label_array, optional_label_array);
  }
  if (ends_with(src.path, ".npz")) {
    if (!src.labels_path.empty()) throw_error<InvalidArgument>("--labels goes with .npy data; an .npz holds its label array");
    raw = read_npz(src.path);
  } else if (npy) {
    if (features.size() != 1)
      throw_error<InvalidArgument>("a single .npy file feeds a model with one input; this model has ", features.size(),
                                   ": use --input NAME=FILE.npy for each, or an .npz");
    raw.emplace_back(features[0].name, read_npy(src.path));
  } else if (!src.path.empty()) {
    throw_error<InvalidArgument>("data file ", what, ": unknown format (use .npz, .npy or .csv)");
  }
  for (const auto& [n, f] : src.npy_inputs) raw.emplace_back(n, read_npy(f));
  if (!src.labels_path.empty()) raw.emplace_back(label_array, read_npy(src.labels_path));
  if (label && (npy || src.path.empty()) && src.labels_path.empty())
    throw_error<InvalidArgument>(".npy features need their labels: add --labels LABELS.npy");
  const std::string where = source_name(src);
  std::vector<std::pair<std::string, Tensor>> arrays;
  // Match arrays to the declared inputs.
  std::vector<const NodeArg*> decls;
  for (const auto& f : features) decls.push_back(&f);
  std::set<std::string> used;
  std::vector<std::string> input_names;
  for (const auto& f : features) input_names.push_back(f.name);
  for (const auto& [name, t] : raw) {
    if (used.count(name)) throw_error<InvalidArgument>(where, " holds array '", name, "' twice");
    used.insert(name);
    const NodeArg* decl = nullptr;
    for (const auto* f : decls)
      if (f->name == name) decl = f;
    if (!decl && label && name == label_array) decl = label;
    if (!decl) {
      if (!label && name == optional_label_array) continue;
      throw_error<InvalidArgument>("unknown input '", name, "' in ", where, " (the model's inputs are: ", join(input_names),
                                   label ? "; labels: '" + label_array + "'" : std::string(), ")");
    }
    const std::string awhat = "array '" + name + "' in " + where;
    arrays.emplace_back(decl->name, conform(t, *decl, awhat));
  }
  for (const auto* f : decls)
    if (!used.count(f->name))
      throw_error<InvalidArgument>(where, " has no array for the model's input '", f->name, "' (", describe_arg(*f),
                                   "); its arrays: ", [&] {
                                     std::vector<std::string> n;
                                     for (const auto& r : raw) n.push_back(r.first);
                                     return join(n);
                                   }());
  if (label && !used.count(label_array))
    throw_error<InvalidArgument>(where, " has no label array '", label_array, "' (name it so, or pass --label-name)");
  Dataset d;
  try {
    d = Dataset(std::move(arrays));  // every array has the same number of samples
  } catch (const InvalidArgument& e) {
    throw_error<InvalidArgument>(where, ": ", e.what());
  }
  if (d.size() == 0) throw_error<InvalidArgument>(where, " holds no samples");
  return d;
}

}  // namespace cli
