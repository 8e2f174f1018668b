// pybind11 module onnxtrain._C: thin bindings over the public C++ API (conversions in convert.h,
// the training classes in bind_training.cpp).
#include "convert.h"
#include "sparse.h"
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

  bind_sessions(m);

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

  bind_sparse(m);
  bind_ortvalue(m);
  bind_allocators(m);
  bind_training(m);
  bind_agent(m);
  bind_files(m);
  bind_state(m);
  bind_on_device(m);
}
