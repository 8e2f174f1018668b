#include "convert.h"

#include <algorithm>
#include <cmath>

#include "onnxtrain/error.h"

namespace onnxtrain::python {

DType dtype_from_numpy(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  switch (kind) {
    case 'f':
      if (size == 4) return DType::kFloat32;
      if (size == 8) return DType::kFloat64;
      if (size == 2) return DType::kFloat16;
      break;
    case 'i':
      if (size == 1) return DType::kInt8;
      if (size == 2) return DType::kInt16;
      if (size == 4) return DType::kInt32;
      if (size == 8) return DType::kInt64;
      break;
    case 'u':
      if (size == 1) return DType::kUInt8;
      if (size == 2) return DType::kUInt16;
      if (size == 4) return DType::kUInt32;
      if (size == 8) return DType::kUInt64;
      break;
    case 'b': return DType::kBool;
    case 'U':
    case 'S':
    case 'O': return DType::kString;
    case 'V':  // raw bytes (np.void, not a structured type): strings of itemsize bytes, as onnxruntime reads them
      if (dt.attr("names").is_none()) return DType::kString;
      break;
    default: break;
  }
  throw_error<InvalidArgument>("numpy dtype ", py::repr(dt).cast<std::string>(), " is not supported");
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return py::dtype("float32");
    case DType::kFloat64: return py::dtype("float64");
    case DType::kFloat16: return py::dtype("float16");
    case DType::kInt8: return py::dtype("int8");
    case DType::kInt16: return py::dtype("int16");
    case DType::kInt32: return py::dtype("int32");
    case DType::kInt64: return py::dtype("int64");
    case DType::kUInt8: return py::dtype("uint8");
    case DType::kUInt16: return py::dtype("uint16");
    case DType::kUInt32: return py::dtype("uint32");
    case DType::kUInt64: return py::dtype("uint64");
    case DType::kBool: return py::dtype("bool");
    default: break;
  }
  throw_error<NotImplemented>("element type ", dtype_name(t), " has no numpy equivalent");
}

namespace {
// numpy flag bit (numpy's ndarraytypes.h).
constexpr int kAligned = py::detail::npy_api::NPY_ARRAY_ALIGNED_;
}  // namespace

// `arr` itself when its memory can be viewed as a dense host tensor (C-contiguous, aligned, native
// byte order), otherwise a converted copy that can.
py::array viewable(const py::array& arr) {
  const bool native = arr.dtype().attr("isnative").cast<bool>();
  if ((arr.flags() & py::array::c_style) && (arr.flags() & kAligned) && native) return arr;
  py::module_ np = py::module_::import("numpy");
  return np.attr("array")(arr, py::arg("dtype") = arr.dtype().attr("newbyteorder")("="), py::arg("order") = "C",
                          py::arg("copy") = true);  // a fresh array is aligned
}

// Strings are not plain bytes: every element is copied (str as UTF-8, bytes and np.void as they are).
Tensor strings_from_array(const py::array& arr) {
  Tensor t = Tensor::empty(DType::kString, Shape(arr.shape(), arr.shape() + arr.ndim()));
  py::list items = arr.attr("ravel")().attr("tolist")();
  std::string* out = t.data<std::string>();
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle item = items[i];
    if (PyBytes_Check(item.ptr())) out[i] = item.cast<std::string>();
    else out[i] = py::str(item).cast<std::string>();
  }
  return t;
}

// A numpy array viewed as a Tensor. `hold` keeps the (possibly converted) array alive; the view
// itself must not outlive it (the executor drops input views at the end of a run).
Tensor tensor_from_array(const std::string& name, py::handle obj, std::vector<py::object>& hold) {
  py::array arr = py::array::ensure(obj);
  if (!arr) throw_error<InvalidArgument>("input '", name, "' must be a numpy array");
  DType dt;
  try {
    dt = dtype_from_numpy(arr.dtype());
  } catch (const Error& e) {
    throw_error<InvalidArgument>("input '", name, "': ", e.what());
  }
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  // A view (broadcast, zero strides) may claim far more elements than its memory holds; converting
  // it copies them all, so it is refused when the copy would pass the allocation limit.
  const uint64_t per = dt == DType::kString ? sizeof(std::string) : uint64_t(arr.itemsize());
  if (uint64_t(arr.size()) > allocation_limit() / std::max<uint64_t>(per, 1))
    throw_error<InvalidArgument>("input '", name, "' of shape ", shape_to_string(shape), " holds ", arr.size(),
                                 " elements: a tensor of them would pass ", allocation_limit_text());
  if (dt == DType::kString) return strings_from_array(arr);
  py::array c = viewable(arr);  // big-endian or strided arrays are converted, never misread
  hold.push_back(c);
  return Tensor::wrap(dt, shape, const_cast<void*>(c.data()));
}

py::object array_from_tensor(Tensor t) {
  if (!t.defined()) return py::none();
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  if (t.dtype() == DType::kString) {
    py::array out(py::dtype("O"), shape);
    py::object flat = out.attr("reshape")(-1);
    const std::string* s = t.data<std::string>();
    for (int64_t i = 0; i < t.numel(); ++i) flat.attr("__setitem__")(i, py::str(s[i]));
    return out;
  }
  if (t.dtype() == DType::kBFloat16) {  // numpy has no bfloat16: hand back float32
    py::array_t<float> out(shape);
    const bfloat16* s = t.data<bfloat16>();
    float* d = out.mutable_data();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = float(s[i]);
    return out;
  }
  auto* holder = new Tensor(std::move(t));
  py::capsule owner(holder, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(numpy_dtype(holder->dtype()), shape, holder->raw_data(), owner);
}

namespace {

std::string python_type_name(py::handle o) { return py::str(py::type::handle_of(o)).cast<std::string>(); }

// One dict as onnxruntime's Python binding reads it: the first key picks the key type (an int or
// a numpy integer: int64; a str: string, later keys then read through str()), the values are
// read as float; `key` is that of the earlier dicts of a sequence (kUndefined for the first).
MapData map_from_dict(const std::string& name, py::handle obj, DType& key) {
  py::dict d = py::reinterpret_borrow<py::dict>(obj);
  if (d.size() == 0) throw_error<InvalidArgument>("input '", name, "': Size of dictionary is empty, unable to run the prediction.");
  if (key == DType::kUndefined) {
    py::handle first = (*d.begin()).first;
    if (PyLong_Check(first.ptr()) || (PyNumber_Check(first.ptr()) && !PyUnicode_Check(first.ptr()))) key = DType::kInt64;
    else if (PyUnicode_Check(first.ptr())) key = DType::kString;
    else
      throw_error<InvalidArgument>("Key type must be int or string (not ", python_type_name(first), ") for input '", name, "'.");
  }
  const int64_t n = int64_t(d.size());
  Tensor keys = Tensor::empty(key, {n}), values = Tensor::empty(DType::kFloat32, {n});
  int64_t k = 0;
  for (auto [kk, vv] : d) {
    if (key == DType::kInt64) {
      const long long i = PyLong_AsLongLong(kk.ptr());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw_error<InvalidArgument>("Unexpected key type  ", python_type_name(kk), ", it cannot be linked to C type int64_t for input '",
                                     name, "'.");
      }
      keys.data<int64_t>()[k] = int64_t(i);
    } else {
      keys.data<std::string>()[k] = py::str(kk).cast<std::string>();
    }
    double f = 0;
    if (PyFloat_Check(vv.ptr()) || (PyNumber_Check(vv.ptr()) && !PyUnicode_Check(vv.ptr()))) {
      f = PyFloat_AsDouble(vv.ptr());
      if (PyErr_Occurred()) PyErr_Clear(), f = std::nan("");
    } else {
      throw_error<InvalidArgument>("Unexpected value type  ", python_type_name(vv), ", it cannot be linked to C type float for input '",
                                   name, "'.");
    }
    values.data<float>()[k++] = float(f);
  }
  return make_map(keys, values);
}

}  // namespace

Value value_from_python(const std::string& name, py::handle obj, std::vector<py::object>& hold) {
  if (py::isinstance<py::dict>(obj)) {  // map(int64 or string, float), as onnxruntime reads a dict
    Value v;
    v.kind = Value::Kind::kMap;
    v.elem = DType::kFloat32;
    v.maps.push_back(map_from_dict(name, obj, v.key));
    return v;
  }
  if ((py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) && py::len(obj) > 0 &&
      py::isinstance<py::dict>(obj[py::int_(0)])) {
    // A sequence of dicts: seq(map(K, float)), K from the first dict's first key.
    Value v;
    v.kind = Value::Kind::kMapSequence;
    v.elem = DType::kFloat32;
    for (auto item : obj) {
      if (!py::isinstance<py::dict>(item))
        throw_error<InvalidArgument>("input '", name, "' is a sequence of dicts holding a ", python_type_name(item),
                                     ": give dicts only");
      v.maps.push_back(map_from_dict(name, item, v.key));
    }
    return v;
  }
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    Value v;
    v.kind = Value::Kind::kSequence;
    for (auto item : obj) v.sequence.push_back(tensor_from_array(name, item, hold).clone());
    v.elem = v.sequence.empty() ? DType::kFloat32 : v.sequence[0].dtype();
    return v;
  }
  if (obj.is_none()) return Value();
  return Value::of(tensor_from_array(name, obj, hold));
}

py::dict dict_from_map(const MapData& m) {
  py::dict d;
  const int64_t n = m.keys.numel();
  for (int64_t k = 0; k < n; ++k) {
    py::object key = m.keys.dtype() == DType::kString ? py::object(py::str(m.keys.data<std::string>()[k]))
                                                      : py::object(py::int_(m.keys.data<int64_t>()[k]));
    py::object value;
    switch (m.values.dtype()) {
      case DType::kFloat32: value = py::float_(m.values.data<float>()[k]); break;
      case DType::kFloat64: value = py::float_(m.values.data<double>()[k]); break;
      case DType::kInt64: value = py::int_(m.values.data<int64_t>()[k]); break;
      case DType::kString: value = py::str(m.values.data<std::string>()[k]); break;
      default:
        throw_error<NotImplemented>("a map with ", dtype_name(m.values.dtype()),
                                    " values (maps hold float, double, int64 or string values)");
    }
    d[key] = value;
  }
  return d;
}

py::object value_to_python(Value v) {
  switch (v.kind) {
    case Value::Kind::kTensor: return array_from_tensor(std::move(v.tensor));
    case Value::Kind::kSequence: {
      py::list l;
      for (auto& t : v.sequence) l.append(array_from_tensor(std::move(t)));
      return l;
    }
    case Value::Kind::kMap: return dict_from_map(v.maps.at(0));
    case Value::Kind::kMapSequence: {  // onnxruntime: a list of dicts
      py::list l;
      for (const auto& m : v.maps) l.append(dict_from_map(m));
      return l;
    }
    default: return py::none();
  }
}

py::object shape_list(const NodeArg& a) {
  if (!a.has_shape) return py::none();
  py::list l;
  for (const auto& d : a.shape) {
    if (d.value >= 0) l.append(d.value);
    else if (!d.symbol.empty()) l.append(d.symbol);
    else l.append(py::none());
  }
  return l;
}

std::vector<std::pair<std::string, Value>> feeds_from_dict(py::dict feed, std::vector<py::object>& hold) {
  std::vector<std::pair<std::string, Value>> feeds;
  for (auto [k, v] : feed) {
    std::string name = py::str(k);
    feeds.emplace_back(name, value_from_python(name, v, hold));
  }
  return feeds;
}

std::vector<std::string> names_from(py::object output_names) {
  std::vector<std::string> names;
  if (!output_names.is_none())
    for (auto n : output_names) names.push_back(py::str(n));
  return names;
}

py::dict tensors_to_dict(std::vector<std::pair<std::string, Tensor>> ts) {
  py::dict d;
  for (auto& [n, t] : ts) d[py::str(n)] = array_from_tensor(std::move(t));
  return d;
}

std::vector<std::pair<std::string, Tensor>> dict_to_tensors(py::dict d) {
  std::vector<std::pair<std::string, Tensor>> r;
  std::vector<py::object> hold;
  for (auto [k, v] : d) {
    std::string name = py::str(k);
    r.emplace_back(name, tensor_from_array(name, v, hold).clone());
  }
  return r;
}

py::list values_to_list(std::vector<Value> out) {
  py::list result;
  for (auto& v : out) result.append(value_to_python(std::move(v)));
  return result;
}

}  // namespace onnxtrain::python
