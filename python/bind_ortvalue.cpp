// onnxruntime's value and device objects (onnxruntime_pybind11_state.OrtValue, OrtValueVector,
// OrtDevice, OrtMemoryInfo, OrtAllocatorType, OrtMemType) over onnxtrain's Value and Tensor.
//
// Lifetimes: every Tensor these objects hold keeps its memory alive by itself. A CPU OrtValue made
// from a numpy array views the array and holds a reference to it through the tensor's storage
// (python_keepalive, which takes the GIL when dropped); numpy arrays and DLPack capsules handed out
// hold a copy of the Tensor, so either side may outlive the other.
#include <cstring>
#include <string>

#include "dlpack_abi.h"
#include "onnxtrain/error.h"
#include "ortvalue.h"
#include "sparse.h"

namespace onnxtrain::python {

namespace {

// onnxruntime's OrtDevice::DeviceType and OrtDevice::MemType values (CUDA_PINNED of its earlier
// versions, HOST_ACCESSIBLE of its later ones: both host memory a device reaches).
constexpr int kOrtCPU = 0, kOrtGPU = 1, kOrtFPGA = 2, kOrtNPU = 3;
constexpr int kOrtDefaultMemory = 0, kOrtCudaPinned = 1, kOrtHostAccessible = 5;

// onnxruntime's OrtDeviceMemoryType (C API): what OrtMemoryInfo.device_mem_type reports.
enum class OrtDeviceMemoryTypeE : int { kDefault = kOrtDefaultMemory, kHostAccessible = kOrtHostAccessible };
enum class OrtMemoryInfoDeviceTypeE : int { kCPU = kOrtCPU, kGPU = kOrtGPU, kFPGA = kOrtFPGA, kNPU = kOrtNPU };

OrtDeviceMemoryTypeE device_memory_type(int memory_type) {
  return memory_type == kOrtDefaultMemory ? OrtDeviceMemoryTypeE::kDefault : OrtDeviceMemoryTypeE::kHostAccessible;
}

OrtDeviceObj checked_device(int device_type, int memory_type, int vendor_id, int device_id) {
  if (device_type < 0 || device_type > 127 || memory_type < 0 || memory_type > 127 || device_id < 0 ||
      device_id > 32767 || vendor_id < 0)
    throw_error<InvalidArgument>("OrtDevice(", device_type, ", ", memory_type, ", ", vendor_id, ", ", device_id,
                                 "): device type and memory type must lie in [0, 127], the id in [0, 32767], the "
                                 "vendor id be >= 0");
  return OrtDeviceObj{device_type, memory_type, device_id, vendor_id};
}

std::string type_name_of(py::handle o) { return py::str(py::type::handle_of(o).attr("__name__")); }

// "cuda:0", "fpga:1": how error messages name a device.
std::string device_label(int device_type, int device_id) {
  const char* base = device_type == kOrtCPU ? "cpu" : device_type == kOrtGPU ? "cuda"
                     : device_type == kOrtFPGA ? "fpga" : device_type == kOrtNPU ? "npu" : nullptr;
  std::string b = base ? base : "device type " + std::to_string(device_type);
  return b + ":" + std::to_string(device_id);
}

[[noreturn]] void throw_unavailable(const std::string& label) {
  throw_error<InvalidArgument>("device '", label, "' is not available: onnxtrain places tensors on the CPU and, ",
                               "with its CUDA provider, on cuda:0");
}

// numpy flag bit (numpy's ndarraytypes.h).
constexpr int kWriteable = py::detail::npy_api::NPY_ARRAY_WRITEABLE_;

bool is_readonly_array(const py::object& o) {
  return py::isinstance<py::array>(o) && !(py::reinterpret_borrow<py::array>(o).flags() & kWriteable);
}

DType array_dtype(const py::array& arr, const char* what) {
  try {
    return dtype_from_numpy(arr.dtype());
  } catch (const Error& e) {
    throw_error<InvalidArgument>(what, ": ", e.what());
  }
}

// A tensor view of a numpy array (zero-copy where viewable() allows); `owner` receives the array
// viewed. Strings are copied and leave `owner` None.
Tensor tensor_view_of(const py::array& arr, DType dt, py::object& owner) {
  if (dt == DType::kString) return strings_from_array(arr);
  py::array view = viewable(arr);
  owner = view;
  return Tensor::wrap(dt, Shape(view.shape(), view.shape() + view.ndim()), const_cast<void*>(view.data()),
                      python_keepalive(view));
}

// A copy of `t` that keeps its memory alive by itself: a view without keepalive borrows the
// OrtValue's owner, or is cloned when nothing owns it.
Tensor anchored(const Tensor& t, const py::object& owner) {
  if (!t.defined() || t.storage() || t.numel() == 0) return t;
  if (owner && !owner.is_none())  // a default-constructed owner is null
    return Tensor::wrap(t.dtype(), t.shape(), const_cast<void*>(t.raw_data()), python_keepalive(owner), t.device());
  return t.clone();
}

DType seq_elem(const Value& v) {
  if (v.elem != DType::kUndefined || v.sequence.empty()) return v.elem;
  return v.sequence[0].dtype();
}

// onnxruntime's type string: "tensor(float)", "seq(tensor(int64))".
std::string type_string(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kTensor: return dtype_tensor_string(v.tensor.dtype());
    case Value::Kind::kSequence: return "seq(" + dtype_tensor_string(seq_elem(v)) + ")";
    case Value::Kind::kMap: return map_type_string(v.key, v.elem);
    case Value::Kind::kMapSequence: return "seq(" + map_type_string(v.key, v.elem) + ")";
    default: break;
  }
  throw_error<InvalidArgument>("this OrtValue holds no value (an empty optional): it has no data type");
}

std::string holds(const Value& v) {
  return v.kind == Value::Kind::kNone ? std::string("no value (an empty optional)") : type_string(v);
}

Tensor& tensor_of(OrtValueObj& v, const char* what) {
  if (!v.value.is_tensor())
    throw_error<InvalidArgument>(what, " needs a tensor; this OrtValue holds ",
                                 v.sparse ? "a sparse tensor" : holds(v.value));
  return v.value.tensor;
}

// onnxruntime's GetTensorProtoType: the element type of a tensor or of a sequence's tensors.
int element_type_of(const Value& v) {
  if (v.kind == Value::Kind::kTensor) return int(v.tensor.dtype());
  if (v.kind == Value::Kind::kSequence) return int(seq_elem(v));
  throw_error<InvalidArgument>("element_type needs a tensor or a sequence; this OrtValue holds ", holds(v));
}

Shape shape_from(py::handle obj, const char* what) {
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj))
    throw_error<InvalidArgument>(what, ": shape must be a sequence of integers, got ", type_name_of(obj));
  Shape shape;
  for (py::handle d : obj) {
    if (!PyIndex_Check(d.ptr()))
      throw_error<InvalidArgument>(what, ": shape dimensions must be integers, got ", type_name_of(d), " ",
                                   py::repr(d).cast<std::string>());
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(py::int_(py::reinterpret_borrow<py::object>(d)).ptr(), &overflow);
    if (overflow || v < 0)
      throw_error<InvalidArgument>(what, ": dimension ", py::repr(d).cast<std::string>(), " of shape ",
                                   py::repr(obj).cast<std::string>(), " is ", overflow > 0 ? "too large" : "negative");
    shape.push_back(int64_t(v));
  }
  int64_t n;
  if (!checked_numel(shape, &n))
    throw_error<InvalidArgument>(what, ": shape ", shape_to_string(shape), " has dims multiplying past 2^52 (zero dims aside)");
  return shape;
}

DType dtype_from_element_type(py::handle element_type, const char* what) {
  if (element_type.is_none()) throw_error<InvalidArgument>(what, ": element_type is required (a numpy type)");
  py::dtype dt;
  try {
    dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(element_type));
  } catch (py::error_already_set&) {
    throw_error<InvalidArgument>(what, ": element_type ", py::repr(element_type).cast<std::string>(),
                                 " is not a numpy type");
  }
  try {
    return dtype_from_numpy(dt);
  } catch (const Error& e) {
    throw_error<InvalidArgument>(what, ": ", e.what());
  }
}

DType dtype_from_onnx(int onnx_type, const char* what) {
  const DType t = DType(onnx_type);
  if (onnx_type < 0 || onnx_type > int(DType::kBFloat16) || !dtype_supported(t))
    throw_error<InvalidArgument>(what, ": ONNX element type ", onnx_type, " is not supported");
  return t;
}

// ortvalue_from_shape_and_type and ortvalue_from_shape_and_onnx_type (`what`): a new tensor.
OrtValuePtr from_shape(py::handle shape, DType dt, const OrtDeviceObj& device, const char* what) {
  Shape s = shape_from(shape, what);
  const Device d = device_of(device);
  if (dt == DType::kString && !d.is_host())
    throw_error<InvalidArgument>(what, ": string tensors live on the CPU only (asked for ", d.name(), ")");
  return ortvalue_from_value(Value::of(Tensor::empty(dt, std::move(s), device_allocator(d))));
}

constexpr const char* kFromShape = "ortvalue_from_shape_and_type";
constexpr const char* kFromShapeOnnx = "ortvalue_from_shape_and_onnx_type";

OrtValuePtr from_numpy_with_onnx_type(py::handle obj, int onnx_type) {
  const char* what = "ortvalue_from_numpy_with_onnx_type";
  const DType dt = dtype_from_onnx(onnx_type, what);
  if (!py::isinstance<py::array>(obj))
    throw_error<InvalidArgument>(what, " expects a numpy array, got ", type_name_of(obj));
  auto arr = py::reinterpret_borrow<py::array>(obj);
  if (array_dtype(arr, what) == DType::kString || dt == DType::kString)
    throw_error<InvalidArgument>(what, ": strings cannot be reinterpreted");
  if (size_t(arr.itemsize()) != dtype_size(dt))
    throw_error<InvalidArgument>(what, ": numpy items of ", arr.itemsize(), " bytes cannot be reinterpreted as ",
                                 dtype_name(dt), " (", dtype_size(dt), " bytes)");
  auto out = std::make_shared<OrtValueObj>();
  out->value = Value::of(tensor_view_of(arr, dt, out->owner));
  return out;
}

OrtValuePtr from_sequence(py::handle arrays, const OrtDeviceObj& device) {
  check_host_device(device, "ortvalue_from_sequence: sequences of tensors");
  if (!py::isinstance<py::list>(arrays) && !py::isinstance<py::tuple>(arrays))
    throw_error<InvalidArgument>("ortvalue_from_sequence expects a list of numpy arrays, got ", type_name_of(arrays));
  Value v;
  v.kind = Value::Kind::kSequence;
  for (py::handle a : arrays) {
    OrtValuePtr item = ortvalue_from_array(a, device);
    if (!v.sequence.empty() && item->value.tensor.dtype() != v.sequence[0].dtype())
      throw_error<InvalidArgument>("ortvalue_from_sequence: the tensors of a sequence share one element type (",
                                   dtype_name(v.sequence[0].dtype()), " and ", dtype_name(item->value.tensor.dtype()), ")");
    v.sequence.push_back(item->value.tensor.clone());
  }
  v.elem = v.sequence.empty() ? DType::kFloat32 : v.sequence[0].dtype();
  return ortvalue_from_value(std::move(v));
}

void update_host_tensor(Tensor& t, py::handle values);

void update_inplace(OrtValueObj& v, py::handle values) {
  const char* what = "update_inplace";
  Tensor& t = tensor_of(v, what);
  if (is_readonly_array(v.owner)) throw_error<InvalidArgument>(what, ": this OrtValue views a read-only numpy array");
  if (t.device().is_host()) return update_host_tensor(t, values);
  Tensor staged = Tensor::empty(t.dtype(), t.shape());  // a device's tensor: filled on the host, then copied there
  update_host_tensor(staged, values);
  copy_tensor(staged, t);
}

// update_inplace of a tensor in host memory.
void update_host_tensor(Tensor& t, py::handle values) {
  const char* what = "update_inplace";
  py::array src;
  if (py::isinstance<py::array>(values)) {
    src = py::reinterpret_borrow<py::array>(values);
  } else {  // a list or scalar: read as the value's own element type
    py::object dt = t.dtype() == DType::kString     ? py::object(py::dtype("O"))
                    : t.dtype() == DType::kBFloat16 ? py::object(py::dtype("float32"))
                                                    : py::object(numpy_dtype(t.dtype()));
    src = py::module_::import("numpy").attr("asarray")(values, py::arg("dtype") = dt);
  }
  if (src.size() != t.numel())
    throw_error<InvalidArgument>(what, ": the array has ", src.size(), " elements, the OrtValue ", t.numel(), " (",
                                 t.describe(), ")");
  const DType sdt = array_dtype(src, what);
  const bool bf16_from_float = t.dtype() == DType::kBFloat16 && sdt == DType::kFloat32;
  if (sdt != t.dtype() && !bf16_from_float)
    throw_error<InvalidArgument>(what, ": the array's element type is ", dtype_name(sdt), ", the OrtValue's ",
                                 dtype_name(t.dtype()));
  if (t.numel() == 0) return;
  if (sdt == DType::kString) {
    Tensor s = strings_from_array(src);
    std::string* d = t.data<std::string>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = std::move(s.data<std::string>()[i]);
    return;
  }
  py::array c = viewable(src);
  if (bf16_from_float) {
    const float* s = static_cast<const float*>(c.data());
    bfloat16* d = t.data<bfloat16>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = bfloat16(s[i]);
    return;
  }
  std::memmove(t.raw_data(), c.data(), t.nbytes());  // the source may be this value's own memory
}

// ---- DLPack ----------------------------------------------------------------------------------

// What a capsule handed out owns: the DLManagedTensor, a Tensor keeping the memory alive, and the
// shape and strides arrays the DLTensor points into.
struct DlpackExport {
  dlpack::DLManagedTensor managed{};
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

void delete_export(dlpack::DLManagedTensor* m) {
  // Dropping the tensor may release a Python reference; python_keepalive takes the GIL for it.
  delete static_cast<DlpackExport*>(m->manager_ctx);
}

// A capsule nobody consumed still owns its tensor. A consumer renames it "used_dltensor" and calls
// the deleter itself later, so then there is nothing to do.
void capsule_destructor(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, dlpack::kCapsuleName)) return;
  auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap, dlpack::kCapsuleName));
  if (m && m->deleter) m->deleter(m);
}

dlpack::DLDataType dl_type(DType t) {
  const uint8_t bits = uint8_t(dtype_size(t) * 8);
  switch (t) {
    case DType::kFloat16:
    case DType::kFloat32:
    case DType::kFloat64: return {dlpack::kFloat, bits, 1};
    case DType::kBFloat16: return {dlpack::kBfloat, bits, 1};
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64: return {dlpack::kInt, bits, 1};
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
    case DType::kBool: return {dlpack::kUInt, bits, 1};  // bool travels as uint8, as in onnxruntime
    default: break;
  }
  throw_error<InvalidArgument>("to_dlpack: ", dtype_name(t), " tensors cannot be exported through DLPack");
}

DType dtype_from_dl(const dlpack::DLDataType& d, bool is_bool_tensor) {
  DType t = DType::kUndefined;
  if (d.lanes == 1) {
    switch (d.code) {
      case dlpack::kFloat:
        t = d.bits == 16 ? DType::kFloat16 : d.bits == 32 ? DType::kFloat32 : d.bits == 64 ? DType::kFloat64 : t;
        break;
      case dlpack::kBfloat: t = d.bits == 16 ? DType::kBFloat16 : t; break;
      case dlpack::kInt:
        t = d.bits == 8 ? DType::kInt8 : d.bits == 16 ? DType::kInt16 : d.bits == 32 ? DType::kInt32
            : d.bits == 64 ? DType::kInt64 : t;
        break;
      case dlpack::kUInt:
        t = d.bits == 8 ? DType::kUInt8 : d.bits == 16 ? DType::kUInt16 : d.bits == 32 ? DType::kUInt32
            : d.bits == 64 ? DType::kUInt64 : t;
        break;
      case dlpack::kBool: t = d.bits == 8 ? DType::kBool : t; break;
      default: break;
    }
  }
  if (t == DType::kUndefined)
    throw_error<InvalidArgument>("from_dlpack: DLPack element type (code ", int(d.code), ", ", int(d.bits),
                                 " bits, ", d.lanes, " lanes) is not supported");
  if (is_bool_tensor && t == DType::kUInt8) return DType::kBool;
  if (is_bool_tensor && t != DType::kBool)
    throw_error<InvalidArgument>("from_dlpack: is_bool_tensor needs a uint8 or bool tensor, this one holds ",
                                 dtype_name(t));
  return t;
}

std::string dl_device_label(const dlpack::DLDevice& d) {
  const char* base = d.device_type == dlpack::kCUDA ? "cuda" : d.device_type == dlpack::kROCM ? "rocm" : nullptr;
  return (base ? std::string(base) : "DLPack device type " + std::to_string(d.device_type)) + ":" +
         std::to_string(d.device_id);
}

// Checks the tensor a capsule holds and returns the view of it; throws (leaving the capsule, and
// so the tensor, to its producer) when onnxtrain cannot use it.
Tensor check_dl_tensor(const dlpack::DLTensor& d, bool is_bool_tensor) {
  if (d.device.device_type == dlpack::kCUDA && d.device.device_id == 0 && device_available({Device::Type::kCUDA, 0}))
    throw_error<NotImplemented>("from_dlpack: tensors on cuda:0 are not taken through DLPack (an OrtValue made "
                                "by ortvalue_from_numpy(array, 'cuda', 0) copies one to the device)");
  if (d.device.device_type != dlpack::kCPU && d.device.device_type != dlpack::kCUDAHost)
    throw_unavailable(dl_device_label(d.device));
  const DType dt = dtype_from_dl(d.dtype, is_bool_tensor);
  if (d.ndim < 0 || (d.ndim > 0 && !d.shape))
    throw_error<InvalidArgument>("from_dlpack: malformed DLPack tensor (ndim ", d.ndim, ")");
  Shape shape(d.shape, d.shape + d.ndim);
  int64_t n;
  if (!checked_numel(shape, &n)) throw_error<InvalidArgument>("from_dlpack: invalid shape ", shape_to_string(shape));
  if (d.strides && n > 0) {  // strides of an empty tensor mean nothing
    int64_t expected = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && d.strides[i] != expected)
        throw_error<InvalidArgument>("from_dlpack: the tensor of shape ", shape_to_string(shape),
                                     " is not contiguous (stride ", d.strides[i], " on axis ", i, ", expected ",
                                     expected, "); make it contiguous first");
      expected *= shape[i];
    }
  }
  if (n > 0 && !d.data) throw_error<InvalidArgument>("from_dlpack: the DLPack tensor has no data pointer");
  return Tensor::wrap(dt, std::move(shape), static_cast<char*>(d.data) + d.byte_offset);
}

// Calls a DLPack producer's deleter once, with the GIL held (numpy's deleter drops a Python
// reference and, before numpy 2, did not take the GIL itself).
void release_managed(void* p) {
  auto* m = static_cast<dlpack::DLManagedTensor*>(p);
  if (!m->deleter || !Py_IsInitialized()) return;  // interpreter gone: leak rather than crash
  PyGILState_STATE s = PyGILState_Ensure();
  m->deleter(m);
  PyGILState_Release(s);
}

// ---- OrtValueVector ----------------------------------------------------------------------------

size_t vector_index(const OrtValueVectorObj& v, py::ssize_t i) {
  const auto n = py::ssize_t(v.values.size());
  const py::ssize_t j = i < 0 ? i + n : i;
  if (j < 0 || j >= n)
    throw py::index_error("OrtValueVector index " + std::to_string(i) + " is out of range (" + std::to_string(n) +
                          " values)");
  return size_t(j);
}

void push_back_batch(OrtValueVectorObj& v, const py::list& tensors, const py::list& data_ptrs,
                     const py::list& element_types, const py::list& shapes, const py::list& devices) {
  const char* what = "push_back_batch";
  const size_t n = tensors.size();
  if (data_ptrs.size() != n || element_types.size() != n || shapes.size() != n || devices.size() != n)
    throw_error<InvalidArgument>(what, ": the five lists must have one entry per tensor (", n, " tensors, ",
                                 data_ptrs.size(), " pointers, ", element_types.size(), " element types, ",
                                 shapes.size(), " shapes, ", devices.size(), " devices)");
  std::vector<OrtValuePtr> added;
  for (size_t i = 0; i < n; ++i) {
    device_of(devices[i].cast<OrtDeviceObj>());
    const DType dt = dtype_from_element_type(element_types[i], what);
    Shape shape = shape_from(shapes[i], what);
    const auto ptr = data_ptrs[i].cast<int64_t>();
    if (ptr == 0 && shape_numel(shape) > 0) throw_error<InvalidArgument>(what, ": tensor ", i, " has a null data pointer");
    if (dt == DType::kString) throw_error<InvalidArgument>(what, ": string tensors cannot be wrapped by address");
    py::object owner = tensors[i];
    auto out = std::make_shared<OrtValueObj>();
    out->value = Value::of(Tensor::wrap(dt, std::move(shape), reinterpret_cast<void*>(ptr), python_keepalive(owner)));
    out->owner = owner;
    added.push_back(std::move(out));
  }
  v.values.insert(v.values.end(), added.begin(), added.end());
}

std::string ortvalue_repr(const OrtValueObj& v) {
  if (v.sparse) return "OrtValue(data_type='" + sparse_type_string(*v.sparse) + "', dense_shape=" +
                       shape_to_string(v.sparse->dense_shape) + ")";
  if (v.value.kind == Value::Kind::kNone) return "OrtValue(None)";
  std::string s = "OrtValue(data_type='" + type_string(v.value) + "'";
  if (v.value.is_tensor()) s += ", shape=" + shape_to_string(v.value.tensor.shape());
  else s += ", length=" + std::to_string(v.value.sequence.size());
  return s + ")";
}

}  // namespace

// ---- shared helpers (ortvalue.h) ----------------------------------------------------------------

Device device_of(const OrtDeviceObj& d) {
  if (d.device_type == kOrtCPU) return Device::cpu();
  if (d.device_type == kOrtGPU) {  // the CUDA provider's device, where the build has it and it answers
    const Device dev{Device::Type::kCUDA, d.device_id};
    std::string why;
    if (!device_available(dev, &why)) throw_error<InvalidArgument>(why);
    return dev;
  }
  throw_unavailable(device_label(d.device_type, d.device_id));
}

void check_host_device(const OrtDeviceObj& d, const char* what) {
  const Device dev = device_of(d);
  if (!dev.is_host()) throw_error<NotImplemented>(what, " live on the CPU only (asked for ", dev.name(), ")");
}

std::string ort_device_name(const OrtDeviceObj& d) {
  switch (d.device_type) {
    case kOrtCPU: return "Cpu";
    case kOrtGPU: return "Cuda";
    case kOrtFPGA: return "FPGA";
    case kOrtNPU: return "NPU";
    default: return "Unknown";
  }
}

OrtDeviceObj ortdevice_of(const Device& d) {
  if (d.type == Device::Type::kCUDA) return {kOrtGPU, kOrtDefaultMemory, d.index};
  return {kOrtCPU, kOrtDefaultMemory, 0};
}

std::shared_ptr<void> python_keepalive(py::object o) {
  if (!o) return nullptr;
  return std::shared_ptr<void>(o.release().ptr(), [](void* p) {
    if (!Py_IsInitialized()) return;  // interpreter gone: leak the reference rather than crash
    PyGILState_STATE s = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(p));
    PyGILState_Release(s);
  });
}

OrtValuePtr ortvalue_from_array(py::handle obj, const OrtDeviceObj& device) {
  const char* what = "ortvalue_from_numpy";
  const Device d = device_of(device);
  if (!py::isinstance<py::array>(obj))
    throw_error<InvalidArgument>(what, " expects a numpy array, got ", type_name_of(obj));
  auto arr = py::reinterpret_borrow<py::array>(obj);
  const DType dt = array_dtype(arr, what);
  auto out = std::make_shared<OrtValueObj>();
  out->value = Value::of(tensor_view_of(arr, dt, out->owner));
  if (!d.is_host()) {  // a device's copy of the array (onnxruntime copies too); it owns its memory
    if (dt == DType::kString) throw_error<InvalidArgument>(what, ": string tensors live on the CPU only (asked for ", d.name(), ")");
    out->value.tensor = to_device(out->value.tensor, d);
    out->owner = py::none();
  }
  return out;
}

bool ortvalue_is_readonly(const OrtValueObj& v) { return is_readonly_array(v.owner); }

OrtValuePtr ortvalue_from_value(Value v) {
  auto out = std::make_shared<OrtValueObj>();
  out->value = std::move(v);
  return out;
}

std::vector<OrtValuePtr> ortvalues_of(std::vector<Value> values) {
  std::vector<OrtValuePtr> r;
  r.reserve(values.size());
  for (auto& v : values) r.push_back(ortvalue_from_value(std::move(v)));
  return r;
}

std::vector<OrtValuePtr> ortvalues_of(std::vector<Value> values, const std::vector<bool>& sparse) {
  std::vector<OrtValuePtr> r;
  r.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (i < sparse.size() && sparse[i] && values[i].is_tensor()) {
      auto o = std::make_shared<OrtValueObj>();
      o->sparse = sparse_coo_of_dense(values[i].tensor);
      r.push_back(std::move(o));
    } else {
      r.push_back(ortvalue_from_value(std::move(values[i])));
    }
  }
  return r;
}

const Value& feed_value(const OrtValueObj& v, const std::string& name, std::vector<std::unique_ptr<Value>>& owned) {
  if (!v.sparse) return v.value;
  owned.push_back(std::make_unique<Value>(Value::of(sparse_to_dense(*v.sparse, "sparse input '" + name + "'"))));
  return *owned.back();
}

py::object numpy_of(const OrtValueObj& v) {
  if (v.sparse)
    throw_error<InvalidArgument>("numpy: this OrtValue holds a sparse tensor (", sparse_type_string(*v.sparse),
                                 "); read it with as_sparse_tensor()");
  switch (v.value.kind) {
    case Value::Kind::kNone: return py::none();
    case Value::Kind::kSequence: {
      py::list l;
      for (const Tensor& t : v.value.sequence) l.append(array_from_tensor(anchored(t, v.owner)));
      return l;
    }
    case Value::Kind::kMap:
    case Value::Kind::kMapSequence:
      throw_error<InvalidArgument>("Only OrtValues that are Tensors are convertible to Numpy objects: this one holds ",
                                   type_string(v.value), " (InferenceSession.run returns maps as dicts)");
    case Value::Kind::kTensor: break;
  }
  const Tensor& t = v.value.tensor;
  if (!t.device().host_accessible()) return array_from_tensor(to_device(t, Device::cpu()));  // a copy, as onnxruntime's
  py::object a = array_from_tensor(anchored(t, v.owner));
  if (is_readonly_array(v.owner)) a.attr("setflags")(py::arg("write") = false);
  return a;
}

py::object dlpack_of(const OrtValueObj& v) {
  if (!v.value.is_tensor()) throw_error<InvalidArgument>("to_dlpack needs a tensor; this OrtValue holds ", holds(v.value));
  const Tensor& t = v.value.tensor;
  if (!t.device().host_accessible())
    throw_error<NotImplemented>("to_dlpack: tensors on ", t.device().name(),
                                " are not exported through DLPack (numpy() copies one to the CPU)");
  const dlpack::DLDataType type = dl_type(t.dtype());
  auto e = std::make_unique<DlpackExport>();
  e->tensor = anchored(t, v.owner);
  e->shape = t.shape();
  e->strides.resize(t.rank());
  int64_t stride = 1;
  for (size_t i = t.rank(); i-- > 0;) {
    e->strides[i] = stride;
    stride *= t.dim(i);
  }
  dlpack::DLTensor& d = e->managed.dl_tensor;
  d.data = e->tensor.raw_data();
  d.device = {dlpack::kCPU, 0};
  d.ndim = int32_t(t.rank());
  d.dtype = type;
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = delete_export;
  PyObject* cap = PyCapsule_New(&e->managed, dlpack::kCapsuleName, capsule_destructor);
  if (!cap) throw py::error_already_set();
  e.release();  // the capsule, then its consumer, owns it now
  return py::reinterpret_steal<py::object>(cap);
}

OrtValuePtr ortvalue_from_dlpack(py::handle obj, bool is_bool_tensor) {
  py::object cap = py::reinterpret_borrow<py::object>(obj);
  if (!PyCapsule_CheckExact(cap.ptr())) {
    if (!py::hasattr(obj, "__dlpack__"))
      throw_error<InvalidArgument>("from_dlpack expects a DLPack capsule or an object with __dlpack__, got ",
                                   type_name_of(obj));
    cap = obj.attr("__dlpack__")();
    if (!PyCapsule_CheckExact(cap.ptr()))
      throw_error<InvalidArgument>("from_dlpack: __dlpack__ of ", type_name_of(obj), " returned a ",
                                   type_name_of(cap), ", not a capsule");
  }
  if (PyCapsule_IsValid(cap.ptr(), dlpack::kUsedCapsuleName))
    throw_error<InvalidArgument>("from_dlpack: this DLPack capsule was already consumed ('used_dltensor')");
  if (!PyCapsule_IsValid(cap.ptr(), dlpack::kCapsuleName)) {
    const char* name = PyCapsule_GetName(cap.ptr());
    PyErr_Clear();
    throw_error<InvalidArgument>("from_dlpack: capsule '", name ? name : "(unnamed)",
                                 "' is not a DLPack tensor (expected 'dltensor')");
  }
  auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), dlpack::kCapsuleName));
  Tensor view = check_dl_tensor(m->dl_tensor, is_bool_tensor);
  // Taken over: rename first, so that whatever happens next the capsule never frees the tensor too.
  if (PyCapsule_SetName(cap.ptr(), dlpack::kUsedCapsuleName) != 0) throw py::error_already_set();
  std::shared_ptr<void> owner(m, release_managed);  // on bad_alloc, releases the tensor once
  auto out = std::make_shared<OrtValueObj>();
  out->value = Value::of(Tensor::wrap(view.dtype(), view.shape(), view.raw_data(), std::move(owner)));
  return out;
}

// ---- bindings ----------------------------------------------------------------------------------

void bind_ortvalue(py::module_& m) {
  py::enum_<OrtAllocatorTypeE>(m, "OrtAllocatorType", "onnxruntime's allocator kinds (values of its C API).")
      .value("INVALID", OrtAllocatorTypeE::kInvalid)
      .value("ORT_DEVICE_ALLOCATOR", OrtAllocatorTypeE::kDevice)
      .value("ORT_ARENA_ALLOCATOR", OrtAllocatorTypeE::kArena);

  py::enum_<OrtMemTypeE>(m, "OrtMemType", "onnxruntime's memory types (CPU is CPU_OUTPUT, as in its C API).")
      .value("CPU_INPUT", OrtMemTypeE::kCPUInput)
      .value("CPU_OUTPUT", OrtMemTypeE::kCPUOutput)
      .value("CPU", OrtMemTypeE::kCPU)
      .value("DEFAULT", OrtMemTypeE::kDefault);

  py::enum_<OrtDeviceMemoryTypeE>(m, "OrtDeviceMemoryType", "onnxruntime's device memory types (values of its C API).")
      .value("DEFAULT", OrtDeviceMemoryTypeE::kDefault)
      .value("HOST_ACCESSIBLE", OrtDeviceMemoryTypeE::kHostAccessible);
  // onnxruntime's OrtMemoryInfoDeviceType: the device kinds of create_v2 (OrtDevice's type values).
  py::enum_<OrtMemoryInfoDeviceTypeE>(m, "OrtMemoryInfoDeviceType", "onnxruntime's memory device types.")
      .value("CPU", OrtMemoryInfoDeviceTypeE::kCPU)
      .value("GPU", OrtMemoryInfoDeviceTypeE::kGPU)
      .value("FPGA", OrtMemoryInfoDeviceTypeE::kFPGA)
      .value("NPU", OrtMemoryInfoDeviceTypeE::kNPU);

  py::class_<OrtDeviceObj, std::shared_ptr<OrtDeviceObj>>(m, "OrtDevice",
                                                           "ONNXRuntime device information: type, memory type, id.")
      .def(py::init([](int device_type, int memory_type, int device_id) {
             return checked_device(device_type, memory_type, 0, device_id);
           }),
           py::arg("device_type"), py::arg("memory_type"), py::arg("device_id"),
           "A device descriptor, e.g. OrtDevice(OrtDevice.cpu(), OrtDevice.default_memory(), 0). Describing a "
           "device is always possible; placing a value on one this build lacks raises InvalidArgument.")
      .def(py::init(&checked_device), py::arg("device_type"), py::arg("memory_type"), py::arg("vendor_id"),
           py::arg("device_id"), "A device descriptor with its PCI vendor id (onnxruntime 1.22 and later).")
      .def("device_id", [](const OrtDeviceObj& d) { return d.device_id; }, "Device Id.")
      .def("device_type", [](const OrtDeviceObj& d) { return d.device_type; },
           "Device Type: OrtDevice.cpu(), cuda(), fpga() or npu().")
      .def("vendor_id", [](const OrtDeviceObj& d) { return d.vendor_id; }, "PCI vendor id (0: none).")
      .def("mem_type", [](const OrtDeviceObj& d) { return d.memory_type; },
           "Memory type: OrtDevice.default_memory() (0) or host memory the device reaches.")
      .def_static("cpu", [] { return kOrtCPU; }, "The CPU device type (0).")
      .def_static("cuda", [] { return kOrtGPU; }, "The CUDA (GPU) device type (1).")
      .def_static("cann", [] { return kOrtNPU; }, "The CANN device type (onnxruntime's NPU, 3).")
      .def_static("dml", [] { return kOrtGPU; }, "The DirectML device type (onnxruntime's GPU, 1).")
      .def_static("fpga", [] { return kOrtFPGA; }, "The FPGA device type (2).")
      .def_static("npu", [] { return kOrtNPU; }, "The NPU device type (3).")
      .def_static("default_memory", [] { return kOrtDefaultMemory; }, "The default memory type (0).")
      .def("__repr__", [](const OrtDeviceObj& d) {
        return "OrtDevice(device_type=" + std::to_string(d.device_type) + ", memory_type=" +
               std::to_string(d.memory_type) + ", device_id=" + std::to_string(d.device_id) + ")";
      }, "OrtDevice(device_type=0, memory_type=0, device_id=0).");

  py::class_<OrtMemoryInfoObj, std::shared_ptr<OrtMemoryInfoObj>>(m, "OrtMemoryInfo",
                                                                   "onnxruntime's description of a memory.")
      .def(py::init([](const std::string& name, OrtAllocatorTypeE alloc_type, int id, OrtMemTypeE mem_type) {
             OrtMemoryInfoObj info{name, alloc_type, {}, id, mem_type};
             if (name == "Cpu") info.device = {kOrtCPU, kOrtDefaultMemory, 0};
             else if (name == "Cuda") info.device = {kOrtGPU, kOrtDefaultMemory, id};
             else if (name == "CudaPinned") info.device = {kOrtCPU, kOrtCudaPinned, id};
             else
               throw_error<InvalidArgument>("OrtMemoryInfo: memory '", name,
                                            "' is not supported (onnxruntime's names: Cpu, Cuda, CudaPinned)");
             return info;
           }),
           py::arg("name"), py::arg("alloc_type"), py::arg("device_id"), py::arg("mem_type"),
           "OrtMemoryInfo(name, OrtAllocatorType, device id, OrtMemType); name is 'Cpu', 'Cuda' or 'CudaPinned'.")
      .def_static(
          "create_v2",
          [](const std::string& name, OrtMemoryInfoDeviceTypeE device_type, int vendor_id, int device_id,
             OrtDeviceMemoryTypeE mem_type,
             int64_t alignment, OrtAllocatorTypeE alloc_type) {
            if (alignment < 0) throw_error<InvalidArgument>("OrtMemoryInfo.create_v2: alignment ", alignment, " < 0");
            OrtMemoryInfoObj info{name, alloc_type, {}, device_id, OrtMemTypeE::kDefault};
            // OrtDeviceMemoryType's values are OrtDevice's memory types (0, 5).
            info.device = checked_device(int(device_type), int(mem_type), vendor_id, device_id);
            return info;
          },
          py::arg("name"), py::arg("device_type"), py::arg("vendor_id"), py::arg("device_id"), py::arg("mem_type"),
          py::arg("alignment"), py::arg("allocator_type"),
          "An OrtMemoryInfo of any name for a device (OrtMemoryInfoDeviceType), vendor id, device id and "
          "OrtDeviceMemoryType, as onnxruntime's CreateMemoryInfo_V2. A descriptor only.")
      .def_property_readonly("name", [](const OrtMemoryInfoObj& i) { return i.name; }, "The memory's name.")
      .def_property_readonly("device_id", [](const OrtMemoryInfoObj& i) { return i.id; }, "Device Id.")
      .def_property_readonly("mem_type", [](const OrtMemoryInfoObj& i) { return i.mem_type; },
                             "OrtMemoryInfo memory type (OrtMemType).")
      .def_property_readonly("allocator_type", [](const OrtMemoryInfoObj& i) { return i.alloc_type; },
                             "Allocator type (OrtAllocatorType).")
      .def_property_readonly("device_mem_type",
                             [](const OrtMemoryInfoObj& i) { return device_memory_type(i.device.memory_type); },
                             "Device memory type (OrtDeviceMemoryType: DEFAULT or HOST_ACCESSIBLE).")
      .def_property_readonly("device_vendor_id", [](const OrtMemoryInfoObj& i) { return i.device.vendor_id; },
                             "The device's PCI vendor id (0: none).")
      .def("__repr__", [](const OrtMemoryInfoObj& i) {
        return "OrtMemoryInfo(name='" + i.name + "', alloc_type=" + std::to_string(int(i.alloc_type)) +
               ", device_id=" + std::to_string(i.id) + ", mem_type=" + std::to_string(int(i.mem_type)) + ")";
      }, "OrtMemoryInfo(name='Cpu', alloc_type=0, device_id=0, mem_type=0).");

  py::class_<OrtValueObj, OrtValuePtr>(m, "OrtValue",
                                       "onnxruntime's C OrtValue: a tensor, a sequence of tensors or an empty "
                                       "optional.")
      .def_static("ortvalue_from_numpy", &ortvalue_from_array, py::arg("array"), py::arg("device"),
                  "An OrtValue on `device` over a numpy array: on the CPU it shares the array's memory when the "
                  "array is C-contiguous (otherwise it holds a converted copy); strings are copied.")
      .def_static("ortvalue_from_numpy_with_onnx_type", &from_numpy_with_onnx_type, py::arg("data"),
                  py::arg("onnx_element_type"),
                  "An OrtValue viewing a numpy array reinterpreted as an ONNX element type of the same item size "
                  "(e.g. uint16 bits as bfloat16).")
      .def_static(
          "ortvalue_from_shape_and_type",
          [](py::handle shape, py::handle element_type, const OrtDeviceObj& device) {
            return from_shape(shape, dtype_from_element_type(element_type, kFromShape), device, kFromShape);
          },
          py::arg("shape"), py::arg("element_type"), py::arg("device"),
          "A new OrtValue of that shape and numpy element type on `device`, owned by onnxtrain; its memory is "
          "left uninitialized.")
      .def_static(
          "ortvalue_from_shape_and_onnx_type",
          [](py::handle shape, int onnx_type, const OrtDeviceObj& device) {
            return from_shape(shape, dtype_from_onnx(onnx_type, kFromShapeOnnx), device, kFromShapeOnnx);
          },
          py::arg("shape"), py::arg("onnx_element_type"), py::arg("device"),
          "Like ortvalue_from_shape_and_type, the element type given as an ONNX TensorProto type (e.g. "
          "onnx.TensorProto.BFLOAT16).")
      .def_static("ortvalue_from_sequence", &from_sequence, py::arg("arrays"), py::arg("device"),
                  "onnxtrain extension: an OrtValue holding a sequence of tensors (copies of the arrays, which "
                  "share one element type).")
      .def_static("ortvalue_empty_optional", [] { return ortvalue_from_value(Value()); },
                  "onnxtrain extension: an OrtValue holding no value (an empty optional; has_value() is False).")
      .def("update_inplace", &update_inplace, py::arg("np_arr"),
           "Copies a numpy array (same element count and element type) into this tensor's memory, keeping its "
           "address.")
      .def(
          "data_ptr",
          [](OrtValueObj& v) -> int64_t {
            Tensor& t = tensor_of(v, "data_ptr");
            return t.numel() == 0 ? 0 : int64_t(reinterpret_cast<intptr_t>(t.raw_data()));
          },
          "The address of the tensor's first element (0 for an empty tensor).")
      .def(
          "tensor_size_in_bytes", [](OrtValueObj& v) { return tensor_of(v, "tensor_size_in_bytes").nbytes(); },
          "Element count times element size (a string element counts as its std::string object, as onnxruntime).")
      .def(
          "device_name",
          [](const OrtValueObj& v) {
            if (v.sparse) return ort_device_name(OrtDeviceObj{});
            if (v.value.kind == Value::Kind::kNone)
              throw_error<InvalidArgument>("device_name: this OrtValue holds no value (an empty optional)");
            const Device d = v.value.is_tensor() || v.value.sequence.empty() ? v.value.tensor.device()
                                                                                : v.value.sequence[0].device();  // maps: the CPU
            return ort_device_name(ortdevice_of(d));
          },
          "onnxruntime's name of the device holding the data: 'Cpu' (the Python OrtValue lowercases it).")
      .def(
          "shape",
          [](OrtValueObj& v) {
            if (v.sparse) return std::vector<int64_t>(v.sparse->dense_shape.begin(), v.sparse->dense_shape.end());
            const Tensor& t = tensor_of(v, "shape");
            return std::vector<int64_t>(t.shape().begin(), t.shape().end());
          },
          "The tensor's dimensions as a list of integers (a sparse tensor's dense shape).")
      .def("data_type",
           [](const OrtValueObj& v) { return v.sparse ? sparse_type_string(*v.sparse) : type_string(v.value); },
           "onnxruntime's type string: 'tensor(float)', 'seq(tensor(int64))', 'sparse_tensor(float)', ...")
      .def("element_type",
           [](const OrtValueObj& v) { return v.sparse ? int(v.sparse->values.dtype()) : element_type_of(v.value); },
           "The ONNX TensorProto element type (e.g. onnx.TensorProto.FLOAT = 1) of the tensor or of the sequence's "
           "tensors; raises for an empty optional.")
      .def("has_value", [](const OrtValueObj& v) { return v.sparse || v.value.kind != Value::Kind::kNone; },
           "False when the OrtValue is an empty optional.")
      .def("is_tensor", [](const OrtValueObj& v) { return v.value.is_tensor(); }, "True for a tensor.")
      .def("is_sparse_tensor", [](const OrtValueObj& v) { return v.sparse != nullptr; },
           "True for a sparse tensor.")
      .def("is_tensor_sequence", [](const OrtValueObj& v) { return v.value.kind == Value::Kind::kSequence; },
           "True for a sequence of tensors.")
      .def("as_sparse_tensor",
           [](const OrtValueObj& v) {
             if (!v.sparse) throw_error<RuntimeError>("This OrtValue does not contain a SparseTensor (it holds ",
                                                      v.value.kind == Value::Kind::kNone ? "nothing" : type_string(v.value), ")");
             return v.sparse;
           },
           "The SparseTensor this OrtValue holds (shared, not copied); raises for any other value.")
      .def_static(
          "ort_value_from_sparse_tensor",
          [](const std::shared_ptr<SparseTensorObj>& s) {
            auto o = std::make_shared<OrtValueObj>();
            o->sparse = s;
            return o;
          },
          py::arg("sparse_tensor"), "An OrtValue holding the SparseTensor (shared, not copied).")
      .def("numpy", &numpy_of,
           "The tensor as a numpy array sharing this value's memory (bfloat16 as a float32 copy, strings as an "
           "object copy); a sequence as a list of arrays; None for an empty optional.")
      .def("to_dlpack", &dlpack_of,
           "A DLPack capsule ('dltensor') sharing the tensor's memory, which it keeps alive until consumed and "
           "released. Bool tensors travel as uint8, as in onnxruntime.")
      .def_static("from_dlpack", &ortvalue_from_dlpack, py::arg("data"), py::arg("is_bool_tensor") = false,
                  "An OrtValue taking over a DLPack capsule (or an object with __dlpack__), sharing its memory; "
                  "the capsule is renamed 'used_dltensor'. is_bool_tensor reads a uint8 tensor as bool.")
      .def_static("ortvalue_from_dlpack", &ortvalue_from_dlpack, py::arg("data"), py::arg("is_bool_tensor") = false,
                  "Same as from_dlpack.")
      .def(
          "__dlpack__", [](const OrtValueObj& v, const py::object& /*stream*/) { return dlpack_of(v); },
          py::arg("stream") = py::none(), "DLPack protocol: same as to_dlpack (CPU memory needs no stream).")
      .def(
          "__dlpack_device__",
          [](const OrtValueObj& v) {
            if (!v.value.is_tensor())
              throw_error<InvalidArgument>("__dlpack_device__ needs a tensor; this OrtValue holds ", holds(v.value));
            const Device& d = v.value.tensor.device();
            if (d.type == Device::Type::kCUDA) return py::make_tuple(int(dlpack::kCUDA), d.index);
            return py::make_tuple(int(dlpack::kCPU), 0);
          },
          "DLPack protocol: (device type, device id): (1, 0) for the CPU, (2, id) for cuda:id.")
      .def("__repr__", &ortvalue_repr, "OrtValue(data_type='tensor(float)', shape=[2, 3]).");

  py::class_<OrtValueVectorObj, std::shared_ptr<OrtValueVectorObj>>(m, "OrtValueVector",
                                                                     "onnxruntime's list of C OrtValues.")
      .def(py::init<>(), "An empty vector.")
      .def("push_back", [](OrtValueVectorObj& v, const OrtValuePtr& o) { v.values.push_back(o); },
           py::arg("ortvalue"), "Appends an OrtValue (shared, not copied).")
      .def(
          "push_back",
          [](OrtValueVectorObj& v, py::handle dlpack_tensor, bool is_bool_tensor) {
            if (py::hasattr(dlpack_tensor, "_get_c_value"))  // the Python OrtValue: its C object, not a DLPack copy
              return v.values.push_back(dlpack_tensor.attr("_get_c_value")().cast<OrtValuePtr>());
            v.values.push_back(ortvalue_from_dlpack(dlpack_tensor, is_bool_tensor));
          },
          py::arg("dlpack_tensor"), py::arg("is_bool_tensor") = false,
          "Appends an OrtValue taking over a DLPack capsule (see OrtValue.from_dlpack); a Python OrtValue is "
          "appended as its C OrtValue.")
      .def("push_back_batch", &push_back_batch, py::arg("tensors"), py::arg("data_ptrs"), py::arg("element_types"),
           py::arg("shapes"), py::arg("devices"),
           "Appends OrtValues viewing contiguous CPU buffers given by address, numpy element type and shape; each "
           "keeps its entry of `tensors` (e.g. the torch tensor) alive.")
      .def("reserve", [](OrtValueVectorObj& v, size_t n) { v.values.reserve(n); }, py::arg("len"),
           "Reserves room for `len` values.")
      .def("shrink_to_fit", [](OrtValueVectorObj& v) { v.values.shrink_to_fit(); }, "Releases unused room.")
      .def("__len__", [](const OrtValueVectorObj& v) { return v.values.size(); }, "The number of values.")
      .def(
          "__iter__", [](const OrtValueVectorObj& v) { return py::make_iterator(v.values.begin(), v.values.end()); },
          py::keep_alive<0, 1>(), "Iterates over the OrtValues (the iterator keeps the vector alive).")
      .def("__getitem__", [](const OrtValueVectorObj& v, py::ssize_t i) { return v.values[vector_index(v, i)]; },
           py::arg("idx"), "The OrtValue at `idx` (negative counts from the end; IndexError past it).")
      .def(
          "bool_tensor_indices",
          [](const OrtValueVectorObj& v) {
            std::vector<int64_t> out;
            for (size_t i = 0; i < v.values.size(); ++i)
              if (v.values[i]->value.kind != Value::Kind::kNone && element_type_of(v.values[i]->value) == int(DType::kBool))
                out.push_back(int64_t(i));
            return out;
          },
          "Indices of the bool tensors, which to_dlpacks hands over as uint8 (apply .to(torch.bool)).")
      .def(
          "element_type_at",
          [](const OrtValueVectorObj& v, py::ssize_t i) { return element_type_of(v.values[vector_index(v, i)]->value); },
          py::arg("idx"), "The ONNX TensorProto element type of the value at `idx`.")
      .def(
          "dlpack_at", [](const OrtValueVectorObj& v, py::ssize_t i) { return dlpack_of(*v.values[vector_index(v, i)]); },
          py::arg("idx"), "A DLPack capsule of the value at `idx`.")
      .def(
          "to_dlpacks",
          [](const OrtValueVectorObj& v, const py::object& to_tensor) {
            py::list out;
            for (const auto& o : v.values) {
              py::object cap = dlpack_of(*o);
              out.append(to_tensor.is_none() ? cap : to_tensor(cap));
            }
            return out;
          },
          py::arg("to_tensor") = py::none(),
          "One DLPack capsule per value, each passed through `to_tensor` (e.g. torch.utils.dlpack.from_dlpack) "
          "when given; returns the list.");

  m.def(
      "is_dlpack_uint8_tensor",
      [](const py::capsule& cap) {
        if (!PyCapsule_IsValid(cap.ptr(), dlpack::kCapsuleName))
          throw_error<InvalidArgument>("is_dlpack_uint8_tensor expects an unconsumed 'dltensor' capsule");
        auto* t = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), dlpack::kCapsuleName));
        return t->dl_tensor.dtype.code == dlpack::kUInt && t->dl_tensor.dtype.bits == 8;
      },
      py::arg("capsule"), "True when a DLPack capsule holds a uint8 tensor (bool tensors travel as uint8).");
}

}  // namespace onnxtrain::python
