// pybind11 module onnxtrain._C: thin bindings over the public C++ API. numpy arrays cross the
// boundary without copies where the layout allows (inputs are viewed, outputs are handed over).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "onnxtrain/error.h"
#include "onnxtrain/gradient.h"
#include "onnxtrain/training.h"
#include "onnxtrain/session.h"

namespace py = pybind11;
using namespace onnxtrain;

namespace {

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
  if (dt == DType::kString) {
    Tensor t = Tensor::empty(dt, shape);
    py::array flat = py::array(py::module_::import("numpy").attr("ravel")(arr));
    std::string* out = t.data<std::string>();
    for (py::ssize_t i = 0; i < flat.size(); ++i) out[i] = py::str(flat.attr("__getitem__")(i));
    return t;
  }
  py::array c = py::array::ensure(arr, py::array::c_style | py::array::forcecast);
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

Value value_from_python(const std::string& name, py::handle obj, std::vector<py::object>& hold) {
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

py::object value_to_python(Value v) {
  switch (v.kind) {
    case Value::Kind::kTensor: return array_from_tensor(std::move(v.tensor));
    case Value::Kind::kSequence: {
      py::list l;
      for (auto& t : v.sequence) l.append(array_from_tensor(std::move(t)));
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

template <class T>
T get_or(py::dict d, const char* key, T dflt) {
  return d.contains(key) ? d[key].cast<T>() : dflt;
}

TrainingParameters params_from_dict(py::dict d) {
  TrainingParameters p;
  p.loss_output_name = get_or<std::string>(d, "loss_output_name", "");
  p.weights_to_train = get_or<std::set<std::string>>(d, "weights_to_train", {});
  p.weights_not_to_train = get_or<std::set<std::string>>(d, "weights_not_to_train", {});
  p.immutable_weights = get_or<std::set<std::string>>(d, "immutable_weights", {});
  p.training_optimizer_name = get_or<std::string>(d, "training_optimizer_name", p.training_optimizer_name);
  p.lr_params_feed_name = get_or<std::string>(d, "lr_params_feed_name", p.lr_params_feed_name);
  p.optimizer_attributes = get_or<std::map<std::string, float>>(d, "optimizer_attributes", {});
  p.optimizer_int_attributes = get_or<std::map<std::string, int64_t>>(d, "optimizer_int_attributes", {});
  p.optimizer_attributes_map =
      get_or<std::map<std::string, std::map<std::string, float>>>(d, "optimizer_attributes_map", {});
  p.optimizer_int_attributes_map =
      get_or<std::map<std::string, std::map<std::string, int64_t>>>(d, "optimizer_int_attributes_map", {});
  p.gradient_accumulation_steps = get_or<int64_t>(d, "gradient_accumulation_steps", 1);
  p.enable_grad_norm_clip = get_or<bool>(d, "enable_grad_norm_clip", false);
  p.max_grad_norm = get_or<float>(d, "max_grad_norm", 1.0f);
  p.set_gradients_as_graph_outputs = get_or<bool>(d, "set_gradients_as_graph_outputs", false);
  p.model_with_gradient_graph_path = get_or<std::string>(d, "model_with_gradient_graph_path", "");
  p.model_with_training_graph_path = get_or<std::string>(d, "model_with_training_graph_path", "");
  p.deterministic_compute = get_or<bool>(d, "deterministic_compute", false);
  p.portable_training_graph = get_or<bool>(d, "portable_training_graph", false);
  p.lr_schedule = get_or<std::string>(d, "lr_schedule", "");
  p.lr_schedule_params = get_or<std::map<std::string, double>>(d, "lr_schedule_params", {});
  return p;
}

py::list values_to_list(std::vector<Value> out) {
  py::list result;
  for (auto& v : out) result.append(value_to_python(std::move(v)));
  return result;
}

// Converts the output names (None: all) and the feed, runs `fn(names, feeds)` without the GIL and
// returns its outputs as numpy arrays.
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

void translate(const Error& e) {
  py::module_ errors = py::module_::import("onnxtrain._errors");
  const char* cls = "OnnxTrainError";
  switch (e.code()) {
    case ErrorCode::kInvalidArgument: cls = "InvalidArgument"; break;
    case ErrorCode::kInvalidModel: cls = "InvalidModel"; break;
    case ErrorCode::kInvalidGraph: cls = "InvalidGraph"; break;
    case ErrorCode::kNotImplemented: cls = "UnsupportedError"; break;
    case ErrorCode::kIOError: cls = "ModelFileError"; break;
    default: break;
  }
  PyErr_SetString(errors.attr(cls).ptr(), e.what());
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "onnxtrain native core";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      translate(e);
    }
  });

  py::class_<SessionOptions>(m, "SessionOptions", "Settings of an InferenceSession (onnxruntime-compatible subset).")
      .def(py::init<>())
      .def_readwrite("intra_op_num_threads", &SessionOptions::intra_op_num_threads,
                     "Threads used inside operators; 0 means all cores.")
      .def_readwrite("inter_op_num_threads", &SessionOptions::inter_op_num_threads,
                     "Accepted for compatibility; nodes run one after another.")
      .def_readwrite("deterministic", &SessionOptions::deterministic)
      .def_readwrite("seed", &SessionOptions::seed)
      .def_readwrite("optimized_model_filepath", &SessionOptions::optimized_model_filepath);

  py::class_<NodeArg>(m, "NodeArg", "A declared model input or output.")
      .def_readonly("name", &NodeArg::name)
      .def_readonly("type", &NodeArg::type)
      .def_property_readonly("shape", &shape_list)
      .def("__repr__", [](const NodeArg& a) {
        return "NodeArg(name='" + a.name + "', type='" + a.type + "', shape=" +
               std::string(py::repr(shape_list(a))) + ")";
      });

  py::class_<GradientGraphBuilder>(m, "GradientGraphBuilder")
      .def(py::init([](py::bytes model, const std::set<std::string>& ys, const std::set<std::string>& xs,
                       const std::string& loss, bool portable, const std::string& base_dir) {
             return new GradientGraphBuilder(std::string(model), ys, xs, loss, portable, base_dir);
           }),
           py::arg("model_bytes"), py::arg("y_node_arg_names"), py::arg("x_node_arg_names"),
           py::arg("loss_node_arg_name"), py::arg("portable") = false, py::arg("base_dir") = "")
      .def("build", &GradientGraphBuilder::build, py::call_guard<py::gil_scoped_release>())
      .def("get_model", [](const GradientGraphBuilder& b) { return py::bytes(b.get_model()); })
      .def(
          "save",
          [](const GradientGraphBuilder& b, const std::string& path, const std::string& external_data,
             uint64_t size_threshold, const std::string& location) {
            ModelSaveOptions o;
            o.external_data = parse_external_data(external_data);
            o.threshold = size_threshold;
            o.location = location;
            py::gil_scoped_release nogil;
            b.save(path, o);
          },
          py::arg("path"), py::arg("external_data") = "auto", py::arg("size_threshold") = 1024,
          py::arg("location") = "");

  py::class_<TrainingSession>(m, "TrainingSession")
      .def(py::init([](py::object path_or_bytes, py::dict params, const SessionOptions* opts) {
             SessionOptions o = opts ? *opts : SessionOptions{};
             TrainingParameters p = params_from_dict(params);
             if (py::isinstance<py::bytes>(path_or_bytes)) {
               std::string b = path_or_bytes.cast<std::string>();
               py::gil_scoped_release nogil;
               return new TrainingSession(b.data(), b.size(), p, o);
             }
             std::string path = py::str(path_or_bytes);
             py::gil_scoped_release nogil;
             return new TrainingSession(path, p, o);
           }),
           py::arg("path_or_bytes"), py::arg("parameters"), py::arg("sess_options") = nullptr)
      .def("run",
           [](TrainingSession& s, py::object output_names, py::dict feed) {
             return run_without_gil(output_names, feed, [&](const auto& n, const auto& f) { return s.run(n, f); });
           })
      .def("eval",
           [](TrainingSession& s, py::object output_names, py::dict feed) {
             return run_without_gil(output_names, feed, [&](const auto& n, const auto& f) { return s.eval(n, f); });
           })
      .def("get_inputs", &TrainingSession::get_inputs)
      .def("get_outputs", &TrainingSession::get_outputs)
      .def("trained_weights", &TrainingSession::trained_weights)
      .def("get_state", [](const TrainingSession& s) { return tensors_to_dict(s.get_state()); })
      .def("get_model_state", [](const TrainingSession& s) { return tensors_to_dict(s.get_model_state()); })
      .def("get_optimizer_state", [](const TrainingSession& s) { return tensors_to_dict(s.get_optimizer_state()); })
      .def("load_state", [](TrainingSession& s, py::dict d, bool strict) { s.load_state(dict_to_tensors(d), strict); },
           py::arg("state"), py::arg("strict") = false)
      .def("step", &TrainingSession::step)
      .def("export_model",
           [](const TrainingSession& s, std::vector<std::string> outputs) { return py::bytes(s.export_model(outputs)); },
           py::arg("outputs") = std::vector<std::string>{})
      .def("export_model_to", &TrainingSession::export_model_to, py::arg("path"),
           py::arg("outputs") = std::vector<std::string>{})
      .def("save_checkpoint", &TrainingSession::save_checkpoint, py::arg("path"),
           py::arg("metadata") = std::map<std::string, std::string>{}, py::call_guard<py::gil_scoped_release>())
      .def("load_checkpoint", &TrainingSession::load_checkpoint, py::call_guard<py::gil_scoped_release>());

  m.def("add_loss_output",
        [](py::bytes model, const std::string& score_name, const std::string& loss_name, const std::string& label_name,
           const std::string& weight_name, const std::map<std::string, std::map<std::string, float>>& penalty,
           const std::string& output, const std::map<std::string, std::string>& kwargs) {
          return py::bytes(add_loss_output(std::string(model), score_name, loss_name, label_name, weight_name, penalty,
                                           output, kwargs));
        });
  m.def("get_train_initializer", [](py::bytes model) { return get_train_initializer(std::string(model)); });

  py::class_<InferenceSession>(m, "InferenceSession")
      .def(py::init([](py::object path_or_bytes, const SessionOptions* opts) {
             SessionOptions o = opts ? *opts : SessionOptions{};
             if (py::isinstance<py::bytes>(path_or_bytes)) {
               std::string b = path_or_bytes.cast<std::string>();
               py::gil_scoped_release nogil;
               return new InferenceSession(b.data(), b.size(), o);
             }
             std::string path = py::str(path_or_bytes);
             py::gil_scoped_release nogil;
             return new InferenceSession(path, o);
           }),
           py::arg("path_or_bytes"), py::arg("sess_options") = nullptr)
      .def("get_inputs", &InferenceSession::get_inputs)
      .def("get_outputs", &InferenceSession::get_outputs)
      .def("get_overridable_initializers", &InferenceSession::get_overridable_initializers)
      .def("run",
           [](InferenceSession& s, py::object output_names, py::dict feed) {
             return run_without_gil(output_names, feed,
                                    [&](const auto& n, const auto& f) { return s.run_values(n, f); });
           },
           py::arg("output_names"), py::arg("input_feed"))
      .def("last_run_stats", [](const InferenceSession& s) {
        RunStats r = s.last_run_stats();
        py::dict d;
        d["arena_bytes"] = r.arena_bytes;
        d["naive_bytes"] = r.naive_bytes;
        d["constant_bytes"] = r.constant_bytes;
        d["steps"] = r.steps;
        d["dynamic_steps"] = r.dynamic_steps;
        d["folded_nodes"] = r.folded_nodes;
        return d;
      });
}
