// Forward/backward training objects of onnxtrain._C with onnxruntime-training's call shapes
// (onnxruntime_pybind11_state): TrainingAgent, PartialGraphExecutionState, OrtValueCache, and
// under OrtModuleGraphBuilder (capi/_module_graph.py) the native ModuleGraphBuilder and GraphInfo.
#include <map>
#include <memory>
#include <tuple>

#include "convert.h"
#include "onnxtrain/agent.h"
#include "ortvalue.h"
#include "pysession.h"

namespace onnxtrain::python {

namespace {

/// The C TrainingAgent: keeps the native session it runs alive.
struct AgentObj {
  std::shared_ptr<PySession> session;
  std::unique_ptr<TrainingAgent> agent;
};

/// onnxruntime's OrtValueCache: OrtValues by name.
struct OrtValueCacheObj {
  std::map<std::string, OrtValuePtr> values;
};

void check_devices(const std::vector<std::shared_ptr<OrtDeviceObj>>& devices) {
  for (const auto& d : devices)
    if (d) check_host_device(*d, "TrainingAgent: partial runs' outputs");
}

// The values of `v` for a run that releases the GIL: `held` keeps them alive for the run, whatever
// another thread does to `v` meanwhile; the pointers point into `held`.
std::vector<const Value*> values_of(const OrtValueVectorObj& v, const char* what, std::vector<OrtValuePtr>& held) {
  held = v.values;
  std::vector<const Value*> r;
  r.reserve(held.size());
  for (size_t k = 0; k < held.size(); ++k) {
    if (!held[k]) throw_error<InvalidArgument>(what, ": entry ", k, " is None");
    r.push_back(&held[k]->value);
  }
  return r;
}

}  // namespace

void bind_agent(py::module_& m) {
  py::class_<ModuleGraphInfo>(m, "GraphInfo", "How OrtModuleGraphBuilder's graphs relate to the module.")
      .def_readonly("user_input_names", &ModuleGraphInfo::user_input_names)
      .def_readonly("user_input_grad_names", &ModuleGraphInfo::user_input_grad_names)
      .def_readonly("initializer_names", &ModuleGraphInfo::initializer_names)
      .def_readonly("initializer_names_to_train", &ModuleGraphInfo::initializer_names_to_train)
      .def_readonly("initializer_grad_names_to_train", &ModuleGraphInfo::initializer_grad_names_to_train)
      .def_readonly("user_output_names", &ModuleGraphInfo::user_output_names)
      .def_readonly("output_grad_indices_non_differentiable", &ModuleGraphInfo::output_grad_indices_non_differentiable)
      .def_readonly("output_grad_indices_require_full_shape", &ModuleGraphInfo::output_grad_indices_require_full_shape)
      .def_readonly("module_output_indices_requires_save_for_backward",
                    &ModuleGraphInfo::module_output_indices_requires_save_for_backward)
      .def_property_readonly("frontier_node_arg_map", [](const ModuleGraphInfo&) { return py::dict(); })
      .def_readonly("cached_node_arg_names", &ModuleGraphInfo::cached_node_arg_names)
      .def_readonly("module_output_gradient_name", &ModuleGraphInfo::module_output_gradient_name);

  py::class_<ModuleGraphBuilder>(m, "ModuleGraphBuilder", "The native OrtModuleGraphBuilder (see agent.h).")
      .def(py::init<>())
      .def(
          "initialize",
          [](ModuleGraphBuilder& b, py::bytes model, std::vector<std::string> initializer_names,
             std::vector<std::string> to_train, std::vector<std::string> inputs_require_grad, bool build_gradient_graph,
             bool enable_caching, bool memory_efficient, std::vector<std::string> non_default_transformers,
             std::tuple<bool, bool, bool, int64_t> recompute) {
            ModuleGraphBuilderConfig c;
            c.initializer_names = std::move(initializer_names);
            c.initializer_names_to_train = std::move(to_train);
            c.input_names_require_grad = std::move(inputs_require_grad);
            c.build_gradient_graph = build_gradient_graph;
            c.enable_caching = enable_caching;
            c.use_memory_efficient_gradient = memory_efficient;
            c.non_default_transformers = std::move(non_default_transformers);
            std::tie(c.attn_dropout_recompute, c.gelu_recompute, c.transformer_layer_recompute,
                     c.number_recompute_layers) = recompute;
            std::string bytes(model);
            py::gil_scoped_release nogil;
            b.initialize(bytes, c);
          },
          py::arg("model_bytes"), py::arg("initializer_names"), py::arg("initializer_names_to_train"),
          py::arg("input_names_require_grad"), py::arg("build_gradient_graph"), py::arg("enable_caching"),
          py::arg("use_memory_efficient_gradient"), py::arg("non_default_transformers"),
          py::arg("recompute") = std::tuple<bool, bool, bool, int64_t>{false, false, false, 0},
          "Loads the model with the configuration; recompute = (attn_dropout, gelu, transformer_layer, "
          "number_recompute_layers).")
      .def("build", &ModuleGraphBuilder::build, py::arg("input_shapes") = std::vector<std::vector<int64_t>>{},
           py::call_guard<py::gil_scoped_release>())
      .def("get_model", [](const ModuleGraphBuilder& b) { return py::bytes(b.get_model()); })
      .def("get_inference_optimized_model",
           [](const ModuleGraphBuilder& b) { return py::bytes(b.get_inference_optimized_model()); })
      .def("get_graph_info", &ModuleGraphBuilder::graph_info, py::return_value_policy::copy);

  py::class_<PartialRunState, std::shared_ptr<PartialRunState>>(
      m, "PartialGraphExecutionState",
      "The state of one TrainingAgent run between run_forward and run_backward (one per forward in flight).")
      .def(py::init<>())
      .def_property_readonly("pending", &PartialRunState::pending,
                             "True between run_forward and run_backward.");

  py::class_<OrtValueCacheObj, std::shared_ptr<OrtValueCacheObj>>(
      m, "OrtValueCache", "OrtValues by name (onnxruntime's OrtValueCache, handed to TrainingAgent.run_forward).")
      .def(py::init<>())
      .def("insert", [](OrtValueCacheObj& c, const std::string& k, OrtValuePtr v) { c.values[k] = std::move(v); })
      .def("keys", [](const OrtValueCacheObj& c) {
        std::vector<std::string> r;
        for (const auto& [k, v] : c.values) r.push_back(k);
        return r;
      })
      .def("count", [](const OrtValueCacheObj& c, const std::string& k) { return c.values.count(k); })
      .def("remove", [](OrtValueCacheObj& c, const std::string& k) {
        if (!c.values.erase(k)) throw_error<InvalidArgument>("OrtValueCache: no value named '", k, "'");
      })
      .def("clear", [](OrtValueCacheObj& c) { c.values.clear(); }, "Removes every value.")
      .def("__len__", [](const OrtValueCacheObj& c) { return c.values.size(); })
      .def("__contains__", [](const OrtValueCacheObj& c, const std::string& k) { return c.values.count(k) > 0; })
      .def("__getitem__", [](const OrtValueCacheObj& c, const std::string& k) {
        auto it = c.values.find(k);
        if (it == c.values.end()) throw py::key_error(k);
        return it->second;
      });

  py::class_<AgentObj, std::shared_ptr<AgentObj>>(
      m, "TrainingAgent",
      "TrainingAgent(session, fw_feed_names, fw_outputs_device_info, bw_fetches_names, bw_outputs_device_info): "
      "runs a training graph built by OrtModuleGraphBuilder in two parts.")
      .def(py::init([](std::shared_ptr<PySession> session, std::vector<std::string> fw_feed_names,
                       std::vector<std::shared_ptr<OrtDeviceObj>> fw_devices, std::vector<std::string> bw_fetches_names,
                       std::vector<std::shared_ptr<OrtDeviceObj>> bw_devices) {
             if (!session) throw_error<InvalidArgument>("TrainingAgent: session is None");
             check_devices(fw_devices);
             check_devices(bw_devices);
             auto a = std::make_shared<AgentObj>();
             a->session = session;
             a->agent = std::make_unique<TrainingAgent>(session->get(), std::move(fw_feed_names),
                                                        std::move(bw_fetches_names));
             return a;
           }),
           py::arg("session"), py::arg("fw_feed_names"), py::arg("fw_outputs_device_info"),
           py::arg("bw_fetches_names"), py::arg("bw_outputs_device_info"))
      .def(
          "run_forward",
          [](AgentObj& a, const OrtValueVectorObj& feeds, OrtValueVectorObj& fetches, PartialRunState& state,
             py::object cache, std::shared_ptr<RunOptions> run_options) {
            if (!cache.is_none() && !py::isinstance<OrtValueCacheObj>(cache))
              throw_error<InvalidArgument>("TrainingAgent.run_forward: cache must be an OrtValueCache or None");
            std::vector<OrtValuePtr> held;
            const auto ins = values_of(feeds, "TrainingAgent.run_forward: feeds", held);
            std::vector<Value> out;
            {
              py::gil_scoped_release nogil;
              out = a.agent->run_forward(ins, state, run_options.get());
            }
            fetches.values = ortvalues_of(std::move(out));
          },
          py::arg("feeds"), py::arg("fetches"), py::arg("state"), py::arg("cache") = py::none(),
          py::arg("run_options") = nullptr,
          "Runs the forward part: `fetches` receives the module's outputs; `state` keeps the run for run_backward.")
      .def(
          "run_backward",
          [](AgentObj& a, const OrtValueVectorObj& feeds, OrtValueVectorObj& fetches, PartialRunState& state,
             std::shared_ptr<RunOptions> run_options) {
            std::vector<OrtValuePtr> held;
            const auto grads = values_of(feeds, "TrainingAgent.run_backward: feeds", held);
            std::vector<Value> out;
            {
              py::gil_scoped_release nogil;
              out = a.agent->run_backward(grads, state, run_options.get());
            }
            fetches.values = ortvalues_of(std::move(out));
          },
          py::arg("feeds"), py::arg("fetches"), py::arg("state"), py::arg("run_options") = nullptr,
          "Runs the backward part of `state` with the gradients of the differentiable outputs; `fetches` receives "
          "bw_fetches_names' values.")
      .def_property_readonly("forward_output_names", [](const AgentObj& a) { return a.agent->forward_output_names(); })
      .def_property_readonly("differentiable_outputs",
                             [](const AgentObj& a) { return a.agent->differentiable_outputs(); });
}

}  // namespace onnxtrain::python
