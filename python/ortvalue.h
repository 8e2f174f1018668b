// The C objects under onnxruntime's value and device classes (onnxruntime's
// onnxruntime_pybind11_state.OrtValue, OrtValueVector, OrtDevice, OrtMemoryInfo), shared by the
// pybind11 module's files: bind_ortvalue.cpp defines them, bindings.cpp (sessions, IOBinding) uses
// them.
#pragma once

#include <memory>
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
};

/// The device an OrtDevice names. Throws InvalidArgument naming a device that this build cannot
/// place memory on (every device but the host today).
Device device_of(const OrtDeviceObj& d);

/// The C OrtValue: a tensor, a sequence of tensors or nothing (an empty optional). A CPU tensor
/// made from a numpy array views the array's memory: `owner` keeps the array alive while this
/// object lives (tensors handed to a run are views without keepalive; the caller's OrtValue keeps
/// them valid for the run's duration).
struct OrtValueObj {
  Value value;
  py::object owner;  ///< the numpy array (or DLPack capsule owner) viewed; None when onnxtrain owns the memory
};
using OrtValuePtr = std::shared_ptr<OrtValueObj>;

/// onnxruntime's OrtValueVector.
struct OrtValueVectorObj {
  std::vector<OrtValuePtr> values;
};

/// Registers OrtDevice, OrtMemoryInfo, OrtAllocatorType, OrtMemType, OrtValue, OrtValueVector on `m`
/// (holders: std::shared_ptr).
void bind_ortvalue(py::module_& m);

}  // namespace onnxtrain::python
