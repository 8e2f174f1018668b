// onnxtrain._C.CheckpointState: the training state with one owner (include/onnxtrain/state.h) for
// onnxtrain.training.api.CheckpointState, onnxruntime's on-device CheckpointState. Parameter
// values cross as numpy copies (a state outlives any array handed out); properties are int, float
// or str.
#include "convert.h"
#include "onnxtrain/state.h"

namespace onnxtrain::python {

namespace {

// onnxruntime's messages for a nominal state's parameters (its tests match them).
const Parameter& loaded_parameter(const CheckpointState& s, const std::string& name) {
  const Parameter& p = s.parameter(name);
  if (!p.data.defined())
    throw_error<InvalidArgument>("parameter '", name, "' has no value: Please load the parameter states first "
                                 "(a nominal checkpoint holds names and types only)");
  return p;
}

// The value of `obj` as a copy of `p`'s element type and shape (onnxruntime's Parameter.copy_from).
Tensor parameter_value(const std::string& name, const Parameter& p, py::handle obj) {
  std::vector<py::object> hold;
  const Tensor in = tensor_from_array(name, obj, hold);
  if (in.dtype() != p.data.dtype() || in.shape() != p.data.shape())
    throw_error<InvalidArgument>("cannot assign ", in.describe(), " to parameter '", name, "', which is ",
                                 p.data.describe());
  return in.clone();
}

Property property_from_python(const std::string& name, py::handle v) {
  if (py::isinstance<py::bool_>(v))
    throw_error<InvalidArgument>("property '", name, "': a bool is not a property type (int, float or str)");
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<float>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  throw_error<InvalidArgument>("property '", name, "' must be an int, a float or a str, got ",
                               std::string(py::str(py::type::of(v).attr("__name__"))));
}

template <class Map>
std::vector<std::string> names_of(const Map& m) {
  std::vector<std::string> r;
  for (const auto& kv : m) r.push_back(kv.first);
  return r;
}

py::object property_to_python(const Property& p) {
  return std::visit([](const auto& v) -> py::object { return py::cast(v); }, p);
}

}  // namespace

void bind_state(py::module_& m) {
  py::class_<CheckpointState>(m, "CheckpointState",
                              "Parameters, optimizer groups and properties of a training run, in onnxruntime's "
                              "checkpoint format (ODTC).")
      .def(py::init<>())
      .def_static(
          "load", [](const std::string& path) { return CheckpointState::load(path); }, py::arg("path"),
          py::call_guard<py::gil_scoped_release>())
      .def_static(
          "load_from_buffer",
          [](py::bytes data) {
            const std::string b(data);
            return CheckpointState::load_from_buffer(b.data(), b.size());
          },
          py::arg("data"))
      .def(
          "save",
          [](const CheckpointState& s, const std::string& path, bool include_optimizer_state, uint64_t threshold) {
            s.save(path, {include_optimizer_state, threshold});
          },
          py::arg("path"), py::arg("include_optimizer_state") = false,
          py::arg("external_data_threshold") = kCheckpointExternalDataThreshold, py::call_guard<py::gil_scoped_release>())
      .def(
          "save_to_buffer",
          [](const CheckpointState& s, bool include_optimizer_state) {
            return py::bytes(s.save_to_buffer(include_optimizer_state));
          },
          py::arg("include_optimizer_state") = false)
      .def_readwrite("nominal", &CheckpointState::nominal)
      .def("parameter_names", [](const CheckpointState& s) { return names_of(s.parameters); })
      .def("has_parameter", [](const CheckpointState& s, const std::string& n) { return s.parameters.count(n) > 0; })
      .def("parameter_data",
           [](const CheckpointState& s, const std::string& n) {
             return array_from_tensor(loaded_parameter(s, n).data.clone());
           })
      .def("set_parameter_data",
           [](CheckpointState& s, const std::string& n, py::handle v) {
             Parameter& p = s.parameter(n);
             if (!p.data.defined())
               throw_error<InvalidArgument>("parameter '", n, "' has no value: Please load all the parameter states "
                                            "first (Module.copy_buffer_to_parameters completes a nominal state)");
             p.data = parameter_value(n, p, v);
           })
      .def("parameter_grad",
           [](const CheckpointState& s, const std::string& n) -> py::object {
             const Parameter& p = s.parameter(n);
             return p.grad.defined() ? array_from_tensor(p.grad.clone()) : py::none();
           })
      .def("parameter_requires_grad",
           [](const CheckpointState& s, const std::string& n) { return s.parameter(n).requires_grad; })
      .def("add_parameter",
           [](CheckpointState& s, const std::string& n, py::handle v, bool requires_grad) {
             std::vector<py::object> hold;
             Tensor t = tensor_from_array(n, v, hold).clone();
             s.parameters[n] = Parameter{t.dtype(), t, requires_grad, {}, {}};
           },
           py::arg("name"), py::arg("value"), py::arg("requires_grad") = true)
      .def("property_names", [](const CheckpointState& s) { return names_of(s.properties); })
      .def("has_property", [](const CheckpointState& s, const std::string& n) { return s.properties.count(n) > 0; })
      .def("get_property",
           [](const CheckpointState& s, const std::string& n) {
             auto it = s.properties.find(n);
             if (it == s.properties.end()) throw py::key_error("the checkpoint state has no property '" + n + "'");
             return property_to_python(it->second);
           })
      .def("add_property",
           [](CheckpointState& s, const std::string& n, py::handle v) { s.properties[n] = property_from_python(n, v); })
      .def("remove_property",
           [](CheckpointState& s, const std::string& n) {
             if (!s.properties.erase(n)) throw py::key_error("the checkpoint state has no property '" + n + "'");
           })
      .def("optimizer_group",
           [](const CheckpointState& s, const std::string& g) {
             auto it = s.optimizer_groups.find(g);
             if (it == s.optimizer_groups.end()) throw py::key_error("the checkpoint state has no optimizer group '" + g + "'");
             py::dict states;
             for (const auto& [pname, named] : it->second.states) {
               py::dict d;
               for (const auto& [sname, t] : named) d[py::str(sname)] = array_from_tensor(t.clone());
               states[py::str(pname)] = d;
             }
             py::dict r;
             r["step"] = it->second.step;
             r["initial_learning_rate"] = it->second.initial_learning_rate;
             r["learning_rate"] = it->second.learning_rate;
             r["states"] = states;
             return r;
           })
      .def("optimizer_group_names", [](const CheckpointState& s) { return names_of(s.optimizer_groups); });
}

}  // namespace onnxtrain::python
