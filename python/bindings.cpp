// pybind11 module onnxtrain._C: thin bindings over the public C++ API (conversions in convert.h,
// the training classes in bind_training.cpp).
#include "convert.h"
#include "onnxtrain/error.h"
#include "onnxtrain/gradient.h"
#include "onnxtrain/session.h"
#include "ortvalue.h"

namespace py = pybind11;
using namespace onnxtrain;
using namespace onnxtrain::python;

namespace {

void translate(const Error& e) {
  py::module_ errors = py::module_::import("onnxtrain._errors");
  // onnxruntime's exception classes (onnxruntime_pybind11_state), defined in _errors.py.
  const char* cls = "Fail";
  switch (e.code()) {
    case ErrorCode::kInvalidArgument: cls = "InvalidArgument"; break;
    case ErrorCode::kInvalidModel: cls = "InvalidProtobuf"; break;
    case ErrorCode::kInvalidGraph: cls = "InvalidGraph"; break;
    case ErrorCode::kNotImplemented: cls = "NotImplemented"; break;
    case ErrorCode::kIOError: cls = "ModelFileError"; break;
    case ErrorCode::kNoSuchFile: cls = "NoSuchFile"; break;
    case ErrorCode::kFail:
    case ErrorCode::kTerminated: cls = "Fail"; break;
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

  bind_ortvalue(m);
  bind_training(m);

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
