// numpy <-> onnxtrain conversions shared by the pybind11 module's files. numpy arrays cross the
// boundary without copies where the layout allows (inputs are viewed, outputs are handed over).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/session.h"
#include "onnxtrain/tensor.h"
#include "onnxtrain/value.h"

namespace onnxtrain {
class TrainingSession;
}

namespace onnxtrain::python {

namespace py = pybind11;

/// The element type of a numpy dtype (by kind and item size; str, bytes and object arrays are
/// strings). Throws InvalidArgument for dtypes onnxtrain cannot hold (complex, datetime, records).
DType dtype_from_numpy(const py::dtype& dt);
/// The numpy dtype of an element type; throws NotImplemented for bfloat16 and strings.
py::dtype numpy_dtype(DType t);

/// `arr` itself when its memory can be viewed as a dense host tensor (C-contiguous, aligned, native
/// byte order), otherwise a converted copy that can.
py::array viewable(const py::array& arr);
/// A string tensor copied from a numpy str/bytes/object array (str as UTF-8, bytes as they are).
Tensor strings_from_array(const py::array& arr);
/// A numpy array viewed as a Tensor. `hold` keeps the (possibly converted) array alive; the view
/// must not outlive it. Strings are copied.
Tensor tensor_from_array(const std::string& name, py::handle obj, std::vector<py::object>& hold);
/// The tensor handed to numpy (no copy; bfloat16 becomes float32, strings objects).
py::object array_from_tensor(Tensor t);
/// A feed as a Value: a numpy array (tensor), a list or tuple of arrays (sequence), a dict
/// (map(int64 or string, float), as onnxruntime reads one), a list or tuple of dicts (sequence of
/// maps), None (nothing).
Value value_from_python(const std::string& name, py::handle obj, std::vector<py::object>& hold);
/// An output as Python: arrays, lists of arrays, dicts (maps) and lists of dicts (sequences of
/// maps) as onnxruntime returns them.
py::object value_to_python(Value v);
/// A map as a dict (int or str keys; float, int or str values).
py::dict dict_from_map(const MapData& m);
/// A NodeArg's shape: ints, symbols and None.
py::object shape_list(const NodeArg& a);
std::vector<std::pair<std::string, Value>> feeds_from_dict(py::dict feed, std::vector<py::object>& hold);
std::vector<std::string> names_from(py::object output_names);
py::dict tensors_to_dict(std::vector<std::pair<std::string, Tensor>> ts);
/// Copies of the arrays of a dict.
std::vector<std::pair<std::string, Tensor>> dict_to_tensors(py::dict d);
py::list values_to_list(std::vector<Value> out);

/// Converts the output names (None: all) and the feed, runs `fn(names, feeds)` without the GIL and
/// returns its outputs as numpy arrays.
template <class F>
py::list run_without_gil(const py::object& output_names, const py::dict& feed, F&& fn) {
  std::vector<py::object> hold;
  auto feeds = feeds_from_dict(feed, hold);
  auto names = names_from(output_names);
  std::vector<Value> out;
  {
    py::gil_scoped_release nogil;
    out = fn(names, feeds);
  }
  return values_to_list(std::move(out));
}

/// TrainingSession.run_with_iobinding: one training step with the inputs of `binding` (a
/// SessionIOBinding made for `s`), outputs as InferenceSession's run_with_iobinding leaves them.
void run_training_iobinding(TrainingSession& s, py::handle binding, const RunOptions* ro);

/// The training classes: TrainingParameters, TrainingSession, Trainer and its options and results,
/// optimizer_names, loss_names.
void bind_training(py::module_& m);
/// The session classes: SessionOptions, RunOptions, ModelMetadata, the enums, InferenceSession,
/// SessionIOBinding, set_seed.
void bind_sessions(py::module_& m);
/// TrainingAgent, PartialGraphExecutionState, OrtValueCache, ModuleGraphBuilder (bind_agent.cpp).
void bind_agent(py::module_& m);
/// The one file writer for the Python writers: AtomicFile, write_file_atomic (bind_files.cpp).
void bind_files(py::module_& m);
/// onnxtrain._C.CheckpointState (bind_state.cpp).
void bind_state(py::module_& m);
/// onnxtrain._C.Module, Optimizer, LinearLRScheduler (bind_on_device.cpp).
void bind_on_device(py::module_& m);

}  // namespace onnxtrain::python
