// The C objects under onnxruntime's value and device classes (onnxruntime's
// onnxruntime_pybind11_state.OrtValue, OrtValueVector, OrtDevice, OrtMemoryInfo), shared by the
// pybind11 module's files: bind_ortvalue.cpp defines them, bindings.cpp (sessions, IOBinding) uses
// them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "convert.h"
#include "onnxtrain/device.h"
#include "onnxtrain/value.h"

namespace onnxtrain::python {

/// onnxruntime's OrtDevice: device type (0 CPU, 1 CUDA, 2 FPGA, 3 NPU), memory type (0 default,
/// 1 CUDA pinned, 2 HIP pinned...), device id.
struct OrtDeviceObj {
  int device_type = 0;
  int memory_type = 0;
  int device_id = 0;
  int vendor_id = 0;  // PCI vendor id (0: none, as onnxruntime's OrtDevice::VendorIds::NONE)
};

/// The device an OrtDevice names. Throws InvalidArgument naming a device that this build cannot
/// place memory on (every device but the host today).
Device device_of(const OrtDeviceObj& d);
/// device_of(d) for what lives on the host only: NotImplemented "<what> live on the CPU only (asked
/// for cuda:0)" for any other device this build has.
void check_host_device(const OrtDeviceObj& d, const char* what);

/// The C OrtValue: a tensor, a sequence of tensors or nothing (an empty optional). A CPU tensor
/// made from a numpy array views the array's memory: `owner` keeps the array alive while this
/// object lives (tensors handed to a run are views without keepalive; the caller's OrtValue keeps
/// them valid for the run's duration).
struct SparseTensorObj;  // sparse.h

struct OrtValueObj {
  Value value;
  py::object owner;  ///< the numpy array (or DLPack capsule owner) viewed; None (or null) when onnxtrain owns the memory
  /// A sparse tensor (onnxruntime's sparse OrtValue; `value` is then kNone): densified where a
  /// session takes it in (sparse_feed_value).
  std::shared_ptr<SparseTensorObj> sparse;
};
using OrtValuePtr = std::shared_ptr<OrtValueObj>;

/// onnxruntime's OrtValueVector.
struct OrtValueVectorObj {
  std::vector<OrtValuePtr> values;
};

/// onnxruntime's OrtAllocatorType and OrtMemType (the values of onnxruntime's C API).
enum class OrtAllocatorTypeE : int { kInvalid = -1, kDevice = 0, kArena = 1 };
enum class OrtMemTypeE : int { kCPUInput = -2, kCPUOutput = -1, kCPU = -1, kDefault = 0 };

/// onnxruntime's OrtMemoryInfo: a named memory ("Cpu", "Cuda", "CudaPinned"), its allocator type,
/// device id and memory type. A descriptor only: nothing is allocated through it.
struct OrtMemoryInfoObj {
  std::string name;
  OrtAllocatorTypeE alloc_type = OrtAllocatorTypeE::kDevice;
  OrtDeviceObj device;
  int id = 0;
  OrtMemTypeE mem_type = OrtMemTypeE::kDefault;
};

/// onnxruntime's device name of an OrtDevice: "Cpu", "Cuda", "FPGA", "NPU" (what the C
/// OrtValue.device_name() returns; the Python wrapper lowercases it).
std::string ort_device_name(const OrtDeviceObj& d);
/// The OrtDevice describing where `d`'s memory lives (the inverse of device_of).
OrtDeviceObj ortdevice_of(const Device& d);

/// A reference to `o` that may be dropped from any thread: the deleter takes the GIL. Used as a
/// Tensor keepalive so a Tensor viewing Python-owned memory is self-sufficient.
std::shared_ptr<void> python_keepalive(py::object o);

/// The C OrtValue of a numpy array on `device` (what OrtValue.ortvalue_from_numpy does): a
/// zero-copy view when the array is C-contiguous, aligned, native-endian and of a supported
/// dtype, otherwise a converted copy; strings are always copied. The tensor holds a reference to
/// the viewed array (value.tensor.storage()) and `owner` is that array. Throws InvalidArgument for
/// non-arrays, unsupported dtypes and devices other than the CPU.
OrtValuePtr ortvalue_from_array(py::handle array, const OrtDeviceObj& device);
/// True when `v` views memory Python says may not be written: a numpy array (or a view of an
/// immutable buffer such as `bytes`) whose writeable flag is off.
bool ortvalue_is_readonly(const OrtValueObj& v);
/// Wraps a Value (a run's result, a sequence, an empty optional) into a new C OrtValue (owner None).
OrtValuePtr ortvalue_from_value(Value v);
/// A run's results as new C OrtValues (what fills an OrtValueVector).
std::vector<OrtValuePtr> ortvalues_of(std::vector<Value> values);
/// OrtValue.numpy(): a tensor as a numpy array sharing the value's memory (read-only when the
/// OrtValue views a read-only array; bfloat16 as a float32 copy, strings as an object copy), a
/// sequence as a list of arrays, None for an empty optional.
py::object numpy_of(const OrtValueObj& v);
/// OrtValue.to_dlpack(): a "dltensor" capsule over the tensor's memory (bool as uint8, as
/// onnxruntime does). The capsule keeps the memory alive until its consumer's deleter runs.
py::object dlpack_of(const OrtValueObj& v);
/// OrtValue.from_dlpack(): takes ownership of a "dltensor" capsule (or of an object with
/// __dlpack__) and renames it "used_dltensor"; a uint8 tensor becomes bool when is_bool_tensor.
OrtValuePtr ortvalue_from_dlpack(py::handle capsule, bool is_bool_tensor);

/// The Value a session run reads for `v`: its own, or (a sparse OrtValue) its dense form made into
/// `owned` (one dense copy per run). `name` names the input in errors.
const Value& feed_value(const OrtValueObj& v, const std::string& name, std::vector<std::unique_ptr<Value>>& owned);
/// A run's results as C OrtValues, those of outputs declared sparse_tensor (`sparse[i]`) as COO
/// sparse OrtValues of their nonzero elements.
std::vector<OrtValuePtr> ortvalues_of(std::vector<Value> values, const std::vector<bool>& sparse);

/// Registers OrtArenaCfg, create_and_register_allocator(_v2), shared_allocator_stats (bind_allocator.cpp).
void bind_allocators(py::module_& m);

/// Registers OrtDevice, OrtMemoryInfo, OrtAllocatorType, OrtMemType, OrtValue, OrtValueVector on `m`
/// (holders: std::shared_ptr).
void bind_ortvalue(py::module_& m);

}  // namespace onnxtrain::python
