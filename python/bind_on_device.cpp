// onnxtrain._C.Module, Optimizer and LinearLRScheduler: onnxruntime's on-device training classes
// (include/onnxtrain/on_device.h) for onnxtrain.training.api. Each keeps the objects it runs over
// alive (a Module its CheckpointState, an Optimizer its Module, a scheduler its Optimizer).
#include "convert.h"
#include "onnxtrain/artifacts.h"
#include "onnxtrain/on_device.h"

namespace onnxtrain::python {

namespace {

using on_device::LinearLRScheduler;
using on_device::ModelSource;
using on_device::Module;
using on_device::Optimizer;

// A model given as a path (str) or as serialized bytes; None: no model.
ModelSource model_source(py::handle obj) {
  if (obj.is_none()) return {};
  if (py::isinstance<py::bytes>(obj)) return ModelSource::buffer(obj.cast<std::string>());
  return ModelSource::file(py::str(obj).cast<std::string>());
}

// Runs one step on the user inputs (numpy arrays) without the GIL; returns numpy arrays.
template <class Step>
py::list run_step(const std::vector<std::string>& names, py::sequence inputs, Step&& step) {
  std::vector<py::object> hold;
  std::vector<Value> values;
  for (size_t i = 0; i < size_t(py::len(inputs)); ++i)
    values.push_back(value_from_python(i < names.size() ? names[i] : "input " + std::to_string(i), inputs[i], hold));
  std::vector<Value> out;
  {
    py::gil_scoped_release nogil;
    out = step(values);
  }
  return values_to_list(std::move(out));
}

SessionOptions options_or_default(const SessionOptions* o) { return o ? *o : SessionOptions{}; }

}  // namespace

void bind_on_device(py::module_& m) {
  py::class_<Module>(m, "Module", "onnxruntime's on-device Module over a CheckpointState (on_device.h).")
      .def(py::init([](py::object train, CheckpointState& state, py::object eval, const SessionOptions* options) {
             return Module(model_source(train), state, model_source(eval), options_or_default(options));
           }),
           py::arg("train_model"), py::arg("state"), py::arg("eval_model") = py::none(),
           py::arg("session_options") = nullptr, py::keep_alive<1, 3>())
      .def(
          "train_step",
          [](Module& mod, py::sequence inputs) {
            return run_step(mod.train_input_names(), inputs, [&](const std::vector<Value>& v) { return mod.train_step(v); });
          },
          py::arg("inputs"), "The user outputs of one training step (gradients accumulate into the state).")
      .def(
          "eval_step",
          [](Module& mod, py::sequence inputs) {
            return run_step(mod.eval_input_names(), inputs, [&](const std::vector<Value>& v) { return mod.eval_step(v); });
          },
          py::arg("inputs"), "The eval model's outputs.")
      .def("lazy_reset_grad", &Module::lazy_reset_grad)
      .def("get_parameters_size", &Module::parameters_size, py::arg("trainable_only") = true)
      .def(
          "copy_parameters_to_buffer",
          [](const Module& mod, bool trainable_only) { return array_from_tensor(mod.copy_parameters_to_buffer(trainable_only)); },
          py::arg("trainable_only") = true)
      .def(
          "copy_buffer_to_parameters",
          [](Module& mod, py::handle buffer, bool trainable_only) {
            std::vector<py::object> hold;
            mod.copy_buffer_to_parameters(tensor_from_array("buffer", buffer, hold), trainable_only);
          },
          py::arg("buffer"), py::arg("trainable_only") = true)
      .def("export_model_for_inferencing", &Module::export_model_for_inferencing, py::arg("path"),
           py::arg("graph_output_names"), py::call_guard<py::gil_scoped_release>())
      .def(
          "input_names",
          [](const Module& mod, bool training) { return training ? mod.train_input_names() : mod.eval_input_names(); },
          py::arg("training"))
      .def(
          "output_names",
          [](const Module& mod, bool training) { return training ? mod.train_output_names() : mod.eval_output_names(); },
          py::arg("training"))
      .def("has_eval_model", &Module::has_eval_model)
      .def("parameter_names", &Module::parameter_names);

  py::class_<Optimizer>(m, "Optimizer", "onnxruntime's on-device Optimizer over a Module's state (on_device.h).")
      .def(py::init([](py::object model, Module& module, const SessionOptions* options) {
             return Optimizer(model_source(model), module, options_or_default(options));
           }),
           py::arg("optimizer_model"), py::arg("module"), py::arg("session_options") = nullptr, py::keep_alive<1, 3>())
      .def("step", &Optimizer::step, py::call_guard<py::gil_scoped_release>())
      .def("set_learning_rate", &Optimizer::set_learning_rate, py::arg("learning_rate"))
      .def("get_learning_rate", &Optimizer::learning_rate)
      .def("set_initial_learning_rate", &Optimizer::set_initial_learning_rate, py::arg("learning_rate"))
      .def("get_initial_learning_rate", &Optimizer::initial_learning_rate)
      .def("get_step", &Optimizer::step_count);

  py::class_<LinearLRScheduler>(m, "LinearLRScheduler", "onnxruntime's linear warm-up and decay of the learning rate.")
      .def(py::init<Optimizer&, int64_t, int64_t, float>(), py::arg("optimizer"), py::arg("warmup_step_count"),
           py::arg("total_step_count"), py::arg("initial_lr"), py::keep_alive<1, 2>())
      .def("step", &LinearLRScheduler::step);

  py::class_<ArtifactOptions>(m, "ArtifactOptions", "make_artifacts' arguments (include/onnxtrain/artifacts.h).")
      .def(py::init<>())
      .def_readwrite("requires_grad", &ArtifactOptions::requires_grad)
      .def_readwrite("frozen_params", &ArtifactOptions::frozen_params)
      .def_readwrite("loss", &ArtifactOptions::loss)
      .def_readwrite("optimizer", &ArtifactOptions::optimizer)
      .def_readwrite("additional_output_names", &ArtifactOptions::additional_output_names)
      .def_readwrite("loss_input_names", &ArtifactOptions::loss_input_names)
      .def_readwrite("update_batchnorm_statistics", &ArtifactOptions::update_batchnorm_statistics)
      .def_readwrite("base_dir", &ArtifactOptions::base_dir);
  py::class_<Artifacts>(m, "Artifacts", "The artifacts of one model (make_artifacts).")
      .def_property_readonly("training_model", [](const Artifacts& a) { return py::bytes(a.training_model); })
      .def_property_readonly("eval_model", [](const Artifacts& a) { return py::bytes(a.eval_model); })
      .def_property_readonly("optimizer_model", [](const Artifacts& a) { return py::bytes(a.optimizer_model); })
      .def_readonly("onnxtrain_operators", &Artifacts::onnxtrain_operators)
      .def("save", &save_artifacts, py::arg("directory"), py::arg("prefix") = "", py::arg("nominal_checkpoint") = false,
           py::call_guard<py::gil_scoped_release>(), "Writes the files (save_artifacts).");
  m.def(
      "make_artifacts",
      [](py::bytes model, const ArtifactOptions& o) {
        std::string bytes = model;
        py::gil_scoped_release nogil;
        return make_artifacts(bytes, o);
      },
      py::arg("model"), py::arg("options"), "The on-device training artifacts of a serialized model (make_artifacts).");
}

}  // namespace onnxtrain::python
