// Session classes of onnxtrain._C with the call shapes of onnxruntime's native module
// (onnxruntime_pybind11_state): SessionOptions, RunOptions, ModelMetadata, GraphOptimizationLevel,
// ExecutionMode, ExecutionOrder, InferenceSession (created, then initialize_session) and
// SessionIOBinding, plus the module-level set_seed. The Python classes of
// onnxtrain/capi/onnxruntime_inference_collection.py sit over them as onnxruntime's do.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>

#include "convert.h"
#include "onnxtrain/error.h"
#include "onnxtrain/session.h"
#include "onnxtrain/training.h"
#include "ortvalue.h"
#include "pysession.h"
#include "sparse.h"

namespace onnxtrain::python {

namespace {

enum class ExecutionOrder { kDefault = 0, kPriorityBased = 1, kMemoryEfficient = 2 };


/// The C SessionIOBinding: inputs and outputs bound to a session (an InferenceSession, or a
/// TrainingSession as onnxruntime-training's binds them), the outputs of its last run.
struct IOBindingObj {
  py::object owner;              // the session's Python object: kept alive as long as the binding
  const void* session = nullptr;  // identity: run_with_iobinding refuses another session's binding
  /// Runs the session for `names` (empty: every output) on borrowed feeds, without the GIL; an
  /// InferenceSession writes into the preallocated buffers (one per name, empty where none) where it
  /// can (InferenceSession::run_into), a TrainingSession returns new values.
  std::function<std::vector<Value>(std::vector<std::string>, const std::vector<std::pair<std::string, const Value*>>&,
                                   const RunOptions*, std::vector<Value>)>
      run;
  std::vector<std::pair<std::string, OrtValuePtr>> inputs;
  /// A bound output: the preallocated buffer (on `device`), or null (the run allocates it on `device`).
  struct Output {
    OrtValuePtr buffer;
    Device device;
  };
  std::vector<std::pair<std::string, Output>> outputs;
  std::vector<OrtValuePtr> results;
  std::vector<std::string> sparse_outputs;  // outputs the session declares sparse_tensor (results: sparse OrtValues)
  std::vector<std::pair<std::string, std::string>> sparse_inputs;  // PySession::sparse_inputs
};

DType dtype_of_element_type(py::handle element_type) {
  py::dtype dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(element_type));
  return dtype_from_numpy(dt);
}

// Sets entry `k` of a list of named entries (config entries, bound inputs and outputs): replaced
// in place when present, appended otherwise.
template <class V>
void set_by_name(std::vector<std::pair<std::string, V>>& entries, const std::string& k, V v) {
  for (auto& e : entries)
    if (e.first == k) {
      e.second = std::move(v);
      return;
    }
  entries.emplace_back(k, std::move(v));
}

const std::string* find_entry(const std::vector<std::pair<std::string, std::string>>& entries, const std::string& k) {
  for (const auto& e : entries)
    if (e.first == k) return &e.second;
  return nullptr;
}

void check_severity(int level, const char* what) {
  if (level < -1 || level > 4)
    throw_error<InvalidArgument>(what, " must be 0 (verbose), 1 (info), 2 (warning), 3 (error), 4 (fatal) or -1 (the default logger's), got ", level);
}

// The C OrtValue of a C or Python (onnxruntime_inference_collection) OrtValue; null for anything else.
std::shared_ptr<OrtValueObj> maybe_c_ortvalue(py::handle v) {
  if (py::isinstance<OrtValueObj>(v)) return v.cast<std::shared_ptr<OrtValueObj>>();
  if (py::hasattr(v, "_ortvalue") && py::isinstance<OrtValueObj>(v.attr("_ortvalue")))
    return v.attr("_ortvalue").cast<std::shared_ptr<OrtValueObj>>();
  return nullptr;
}

std::shared_ptr<OrtValueObj> c_ortvalue(py::handle v, const std::string& what) {
  if (auto p = maybe_c_ortvalue(v)) return p;
  throw_error<InvalidArgument>(what, ": expected an OrtValue, got ", std::string(py::str(v.get_type().attr("__name__"))));
}

// A sparse OrtValue fed to `name`: the input must be declared sparse_tensor (onnxruntime's check
// and message).
void check_sparse_feed(InferenceSession& sess, const std::string& name, const OrtValueObj& v) {
  for (const NodeArg& a : sess.get_inputs())
    if (a.name == name && a.type.rfind("sparse_tensor(", 0) != 0)
      throw_error<InvalidArgument>("Unexpected input data type. Actual: (", sparse_type_string(*v.sparse),
                                   ") , expected: (", a.type, ") for input '", name, "'");
}

// The outputs the session declares sparse_tensor.
std::vector<std::string> sparse_output_names(InferenceSession& sess) {
  std::vector<std::string> r;
  for (const NodeArg& o : sess.get_outputs())
    if (o.type.rfind("sparse_tensor(", 0) == 0) r.push_back(o.name);
  return r;
}

// A feed for `name` that is not a sparse OrtValue (`v` null or dense) while the session declares
// `name` sparse_tensor: onnxruntime's type error.
void check_dense_feed(const std::vector<std::pair<std::string, std::string>>& sparse_inputs, const std::string& name,
                      const OrtValueObj* v, const Value& value) {
  if (v && v->sparse) return;
  for (const auto& [n, type] : sparse_inputs)
    if (n == name)
      throw_error<InvalidArgument>("Unexpected input data type. Actual: (",
                                   value.is_tensor() ? dtype_tensor_string(value.tensor.dtype()) : "not a tensor",
                                   ") , expected: (", type, ") for input '", name, "'");
}

// Per name of `names`: whether it is one of `sparse` (sparse_output_names).
std::vector<bool> sparse_flags(const std::vector<std::string>& sparse, const std::vector<std::string>& names) {
  std::vector<bool> r(names.size(), false);
  for (size_t i = 0; i < names.size(); ++i) r[i] = std::find(sparse.begin(), sparse.end(), names[i]) != sparse.end();
  return r;
}

std::vector<bool> sparse_outputs(InferenceSession& sess, const std::vector<std::string>& names) {
  return sparse_flags(sparse_output_names(sess), names);
}

// The Value a feed stands for: an OrtValue's own (its C object held in `hold` for the run: the
// run releases the GIL, and another thread may drop the feed dict's reference meanwhile), or one
// converted from numpy / lists into `owned`.
const Value& value_of_feed(InferenceSession& sess, const std::string& name, py::handle v, std::vector<py::object>& hold,
                           std::vector<std::unique_ptr<Value>>& owned) {
  if (!py::isinstance<py::array>(v))  // numpy arrays first: no OrtValue attribute lookups (~1 us a feed)
    if (auto p = maybe_c_ortvalue(v)) {
      hold.push_back(py::cast(p));
      if (p->sparse) check_sparse_feed(sess, name, *p);
      return feed_value(*p, name, owned);
    }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    // As onnxruntime: a list fed to a tensor input is that tensor, of the input's element type; an
    // empty list fed to a sequence input has the sequence's element type.
    for (const NodeArg& a : sess.get_inputs()) {
      if (a.name != name || a.elem == DType::kUndefined) continue;
      if (a.type.rfind("tensor(", 0) == 0) {
        py::object dt = a.elem == DType::kString ? py::object(py::dtype("O")) : py::object(numpy_dtype(a.elem));
        hold.push_back(py::module_::import("numpy").attr("asarray")(v, dt));
        owned.push_back(std::make_unique<Value>(Value::of(tensor_from_array(name, hold.back(), hold))));
        return *owned.back();
      }
      if (a.type.rfind("seq(", 0) == 0 && py::len(v) == 0) {
        owned.push_back(std::make_unique<Value>(value_from_python(name, v, hold)));
        owned.back()->elem = a.elem;
        return *owned.back();
      }
    }
  }
  owned.push_back(std::make_unique<Value>(value_from_python(name, v, hold)));
  return *owned.back();
}

// Runs `s` with borrowed feeds, into `buffers` where given (InferenceSession::run_into); the GIL is
// released while it runs.
std::vector<Value> run_session(PySession& s, const std::vector<std::string>& names,
                               const std::vector<std::pair<std::string, const Value*>>& feeds, const RunOptions* ro,
                               std::vector<Value>* buffers = nullptr) {
  InferenceSession& sess = s.get();
  RunOptions dflt;
  py::gil_scoped_release nogil;
  if (buffers) return sess.run_into(names, feeds, ro ? *ro : dflt, std::move(*buffers));
  return sess.run_values(names, feeds, ro ? *ro : dflt);
}

// `names`, or every output of the session when it is empty.
std::vector<std::string> names_or_all(PySession& s, std::vector<std::string> names) {
  if (names.empty())
    for (const auto& o : s.get().get_outputs()) names.push_back(o.name);
  return names;
}

// Runs `s` on a feed dict (numpy arrays, lists, None or OrtValues) for `output_names` (None or
// empty: all).
std::vector<Value> run_dict(PySession& s, const py::object& output_names, const py::dict& feed, const RunOptions* ro) {
  std::vector<py::object> hold;
  std::vector<std::unique_ptr<Value>> owned;
  std::vector<std::pair<std::string, const Value*>> feeds;
  for (auto [k, v] : feed) {
    std::string name = py::str(k);
    feeds.emplace_back(name, &value_of_feed(s.get(), name, v, hold, owned));
    if (!s.sparse_inputs.empty())
      check_dense_feed(s.sparse_inputs, name, py::isinstance<py::array>(v) ? nullptr : maybe_c_ortvalue(v).get(),
                       *feeds.back().second);
  }
  return run_session(s, names_or_all(s, names_from(output_names)), feeds, ro);
}

// The OrtValue viewing caller memory bound by pointer (bind_input / bind_output with a buffer).
OrtValuePtr pointer_value(const char* what, const std::string& name, const OrtDeviceObj& device,
                          py::handle element_type, const std::vector<int64_t>& shape, uintptr_t ptr) {
  Device d = device_of(device);
  DType dt = dtype_of_element_type(element_type);
  for (int64_t x : shape)
    if (x < 0) throw_error<InvalidArgument>(what, "('", name, "'): negative dimension in ", shape_to_string(shape));
  if (!ptr) throw_error<InvalidArgument>(what, "('", name, "'): the buffer pointer is null");
  if (dt == DType::kString) throw_error<InvalidArgument>(what, "('", name, "'): string tensors cannot be bound by pointer");
  return ortvalue_from_value(Value::of(Tensor::wrap(dt, shape, reinterpret_cast<void*>(ptr), nullptr, d)));
}

void bind_options(py::module_& m) {
  py::enum_<GraphOptimizationLevel>(m, "GraphOptimizationLevel",
                                    "Which graph and plan passes run (see SessionOptions.graph_optimization_level).")
      .value("ORT_DISABLE_ALL", GraphOptimizationLevel::kDisableAll)
      .value("ORT_ENABLE_BASIC", GraphOptimizationLevel::kEnableBasic)
      .value("ORT_ENABLE_EXTENDED", GraphOptimizationLevel::kEnableExtended)
      .value("ORT_ENABLE_ALL", GraphOptimizationLevel::kEnableAll);
  py::enum_<ExecutionMode>(m, "ExecutionMode",
                           "ORT_SEQUENTIAL or ORT_PARALLEL; onnxtrain runs nodes one after another in both modes.")
      .value("ORT_SEQUENTIAL", ExecutionMode::kSequential)
      .value("ORT_PARALLEL", ExecutionMode::kParallel);
  py::enum_<ExecutionOrder>(m, "ExecutionOrder",
                            "Node order: DEFAULT (topological, stable); PRIORITY_BASED and MEMORY_EFFICIENT are not "
                            "supported.")
      .value("DEFAULT", ExecutionOrder::kDefault)
      .value("PRIORITY_BASED", ExecutionOrder::kPriorityBased)
      .value("MEMORY_EFFICIENT", ExecutionOrder::kMemoryEfficient);

  py::class_<SessionOptions, std::shared_ptr<SessionOptions>>(m, "SessionOptions",
                                                                  "Settings of an InferenceSession (onnxruntime's SessionOptions).")
      .def(py::init<>())
      .def_readwrite("intra_op_num_threads", &SessionOptions::intra_op_num_threads,
                     "Threads used inside operators; 0 means all cores.")
      .def_readwrite("inter_op_num_threads", &SessionOptions::inter_op_num_threads,
                     "Threads across nodes; nodes run one after another, so this is not used.")
      .def_readwrite("execution_mode", &SessionOptions::execution_mode,
                     "ORT_SEQUENTIAL or ORT_PARALLEL; ORT_PARALLEL runs sequentially too (kernels use intra-op threads).")
      .def_property(
          "execution_order", [](const SessionOptions&) { return ExecutionOrder::kDefault; },
          [](SessionOptions&, ExecutionOrder e) {
            if (e != ExecutionOrder::kDefault)
              throw_error<NotImplemented>("SessionOptions.execution_order: ",
                                          e == ExecutionOrder::kPriorityBased ? "PRIORITY_BASED" : "MEMORY_EFFICIENT",
                                          " is not supported (DEFAULT only)");
          },
          "DEFAULT only: nodes run in a stable topological order.")
      .def_readwrite("graph_optimization_level", &SessionOptions::graph_optimization_level,
                     "ORT_DISABLE_ALL: no folding, in-place outputs copied; ORT_ENABLE_BASIC: constant folding; "
                     "ORT_ENABLE_EXTENDED / ORT_ENABLE_ALL: also in-place outputs sharing memory.")
      .def_readwrite("use_deterministic_compute", &SessionOptions::deterministic,
                     "Bitwise-reproducible kernels where a choice exists.")
      .def_readwrite("deterministic", &SessionOptions::deterministic, "Alias of use_deterministic_compute.")
      .def_readwrite("seed", &SessionOptions::seed, "Seed of random operators without a seed attribute (0: set_seed's).")
      .def_readwrite("optimized_model_filepath", &SessionOptions::optimized_model_filepath,
                     "When set, the model after the load-time passes (constant folding, overrides) is written there.")
      .def_readwrite("enable_profiling", &SessionOptions::enable_profiling,
                     "Record one trace event per node run; InferenceSession.end_profiling() writes the JSON file.")
      .def_readwrite("profile_file_prefix", &SessionOptions::profile_file_prefix,
                     "The profile is written to <prefix>_<date>_<time>.json.")
      .def_readwrite("enable_mem_reuse", &SessionOptions::enable_mem_reuse,
                     "Values whose lifetimes do not overlap share memory (False: every value its own block).")
      .def_readwrite("enable_mem_pattern", &SessionOptions::enable_mem_pattern,
                     "Keep each plan's laid-out run memory between runs (False: allocate it per run).")
      .def_readwrite("enable_cpu_mem_arena", &SessionOptions::enable_cpu_mem_arena,
                     "Keep run memory between runs (False: return it after every run).")
      .def_property(
          "log_severity_level", [](const SessionOptions& o) { return o.log_severity_level; },
          [](SessionOptions& o, int v) {
            check_severity(v, "SessionOptions.log_severity_level");
            o.log_severity_level = v;
          },
          "0 verbose, 1 info, 2 warning, 3 error, 4 fatal: this session's messages at or above it are printed; -1 (default): set_default_logger_severity's level.")
      .def_readwrite("log_verbosity_level", &SessionOptions::log_verbosity_level, "Detail of verbose messages.")
      .def_readwrite("logid", &SessionOptions::logid, "Prefix of this session's log lines.")
      .def(
          "add_session_config_entry",
          [](SessionOptions& o, const std::string& k, const std::string& v) {
            if (k.empty() || k.size() > 128) throw_error<InvalidArgument>("config key must have 1 to 128 characters");
            if (v.size() > 1024) throw_error<InvalidArgument>("config value of '", k, "' is longer than 1024 characters");
            set_by_name(o.config_entries, k, v);
          },
          py::arg("config_key"), py::arg("config_value"),
          "Sets a config entry. Every key is kept; onnxtrain interprets session.load_model_format and "
          "session.save_model_format (ONNX only).")
      .def(
          "get_session_config_entry",
          [](const SessionOptions& o, const std::string& k) {
            const std::string* v = find_entry(o.config_entries, k);
            if (!v) throw_error<InvalidArgument>("SessionOptions does not have configuration with key: ", k);
            return *v;
          },
          py::arg("config_key"), "Value of a config entry; InvalidArgument when absent.")
      .def(
          "add_free_dimension_override_by_name",
          [](SessionOptions& o, const std::string& name, int64_t v) {
            if (v < 0) throw_error<InvalidArgument>("free dimension override '", name, "': ", v, " is negative");
            o.free_dimension_overrides_by_name.emplace_back(name, v);
          },
          py::arg("dim_name"), py::arg("dim_value"), "Fixes the symbolic input dimension named dim_name.")
      .def(
          "add_free_dimension_override_by_denotation",
          [](SessionOptions& o, const std::string& name, int64_t v) {
            if (v < 0) throw_error<InvalidArgument>("free dimension override '", name, "': ", v, " is negative");
            o.free_dimension_overrides_by_denotation.emplace_back(name, v);
          },
          py::arg("dim_denotation"), py::arg("dim_value"),
          "Fixes the symbolic input dimensions with that denotation (e.g. DATA_BATCH).")
      .def(
          "add_initializer",
          [](SessionOptions& o, const std::string& name, py::handle ortvalue) {
            const OrtValueObj& v = *c_ortvalue(ortvalue, "add_initializer('" + name + "')");
            if (!v.value.is_tensor()) throw_error<InvalidArgument>("add_initializer('", name, "'): the OrtValue is not a tensor");
            if (!v.value.tensor.device().is_host())
              throw_error<InvalidArgument>("add_initializer('", name, "'): the OrtValue is on ", v.value.tensor.device().name());
            o.initializers.emplace_back(name, v.value.tensor.clone());
          },
          py::arg("name"), py::arg("ortvalue"),
          "Replaces the model's initializer `name` (or gives input `name` a constant value); the data is "
          "copied once here and shared by every session made with these options.")
      .def(
          "add_external_initializers",
          [](SessionOptions& o, const std::vector<std::string>& names, const std::vector<py::object>& objs) {
            std::vector<std::shared_ptr<OrtValueObj>> vs;
            for (size_t i = 0; i < objs.size(); ++i)
              vs.push_back(c_ortvalue(objs[i], "add_external_initializers(" + std::to_string(i) + ")"));
            if (names.size() != vs.size())
              throw_error<InvalidArgument>("add_external_initializers: ", names.size(), " names for ", vs.size(), " values");
            for (size_t i = 0; i < names.size(); ++i) {
              if (!vs[i] || !vs[i]->value.is_tensor())
                throw_error<InvalidArgument>("add_external_initializers('", names[i], "'): the OrtValue is not a tensor");
              o.initializers.emplace_back(names[i], vs[i]->value.tensor.clone());
            }
          },
          py::arg("names"), py::arg("ortvalues"), "add_initializer for several names at once.")
      .def(
          "add_external_initializers_from_files_in_memory",
          [](SessionOptions& o, const std::vector<std::string>& names, const std::vector<py::buffer>& buffers,
             const std::vector<int64_t>& lengths) {
            const char* what = "add_external_initializers_from_files_in_memory";
            if (names.size() != buffers.size() || names.size() != lengths.size())
              throw_error<InvalidArgument>(what, ": ", names.size(), " file names, ", buffers.size(), " buffers and ",
                                           lengths.size(), " lengths (one of each per file)");
            std::vector<std::pair<std::string, Tensor>> files;
            for (size_t i = 0; i < names.size(); ++i) {
              py::buffer_info info = buffers[i].request();
              const int64_t size = info.size * info.itemsize;
              if (lengths[i] < 0 || lengths[i] > size)
                throw_error<InvalidArgument>(what, "('", names[i], "'): length ", lengths[i], " but the buffer holds ",
                                             size, " bytes");
              bool contiguous = true;
              for (ssize_t d = ssize_t(info.ndim) - 1, step = info.itemsize; d >= 0; step *= info.shape[size_t(d)], --d)
                contiguous = contiguous && (info.shape[size_t(d)] <= 1 || info.strides[size_t(d)] == step);
              if (!contiguous) throw_error<InvalidArgument>(what, "('", names[i], "'): the buffer is not contiguous");
              Tensor bytes = Tensor::empty(DType::kUInt8, {lengths[i]});
              if (lengths[i]) std::memcpy(bytes.raw_data(), info.ptr, size_t(lengths[i]));
              files.emplace_back(names[i], std::move(bytes));
            }
            for (auto& f : files) o.external_initializer_files.push_back(std::move(f));
          },
          py::arg("names"), py::arg("buffers"), py::arg("lengths"),
          "Gives the contents of the model's external data files by file name (the `location` the model "
          "records): the session reads them from these buffers (copied once here) instead of the model's "
          "folder.")
      .def(
          "register_custom_ops_library",
          [](SessionOptions&, const std::string& path) {
            throw_error<NotImplemented>("register_custom_ops_library('", path,
                                        "'): custom operator libraries are not supported by onnxtrain");
          },
          py::arg("library_path"), "Not supported: raises NotImplemented.")
      .def(py::pickle(
          [](const SessionOptions& o) {
            return py::make_tuple(o.intra_op_num_threads, o.inter_op_num_threads, int(o.graph_optimization_level));
          },
          [](py::tuple t) {
            auto o = std::make_shared<SessionOptions>();
            o->intra_op_num_threads = t[0].cast<int>();
            o->inter_op_num_threads = t[1].cast<int>();
            o->graph_optimization_level = GraphOptimizationLevel(t[2].cast<int>());
            return o;
          }));

  py::class_<RunOptions, std::shared_ptr<RunOptions>>(m, "RunOptions", "Options of one run (onnxruntime's RunOptions).")
      .def(py::init<>())
      .def_property(
          "log_severity_level", [](const RunOptions& o) { return o.log_severity_level; },
          [](RunOptions& o, int v) {
            check_severity(v, "RunOptions.log_severity_level");
            o.log_severity_level = v;
          },
          "Severity threshold of this run's messages.")
      .def_readwrite("log_verbosity_level", &RunOptions::log_verbosity_level, "Detail of verbose messages.")
      .def_readwrite("logid", &RunOptions::logid, "Prefix of this run's log lines.")
      .def_readwrite("run_tag", &RunOptions::run_tag, "Tag of the run (named in the profile's model_run event).")
      .def_property(
          "terminate", [](const RunOptions& o) { return o.terminate->load(); },
          [](RunOptions& o, bool v) { o.terminate->store(v); },
          "Set to True (from any thread) to stop runs using these options: they raise Fail before their next node.")
      .def_readwrite("only_execute_path_to_fetches", &RunOptions::only_execute_path_to_fetches,
                     "onnxtrain always runs only the nodes the requested outputs need (same outputs either way).")
      .def_readwrite("training_mode", &RunOptions::training_mode,
                     "Run with training-mode operators (Dropout drops, BatchNormalization uses batch statistics).")
      .def(
          "add_run_config_entry",
          [](RunOptions& o, const std::string& k, const std::string& v) {
            if (k.empty()) throw_error<InvalidArgument>("run config key must not be empty");
            set_by_name(o.config_entries, k, v);
          },
          py::arg("config_key"), py::arg("config_value"), "Sets a run config entry (kept; none is interpreted).")
      .def(
          "get_run_config_entry",
          [](const RunOptions& o, const std::string& k) {
            const std::string* v = find_entry(o.config_entries, k);
            if (!v) throw_error<InvalidArgument>("RunOptions does not have configuration with key: ", k);
            return *v;
          },
          py::arg("config_key"), "Value of a run config entry; InvalidArgument when absent.");

  py::class_<ModelMetadata>(m, "ModelMetadata", "The model's metadata (onnxruntime's ModelMetadata).")
      .def_readonly("producer_name", &ModelMetadata::producer_name)
      .def_readonly("graph_name", &ModelMetadata::graph_name)
      .def_readonly("domain", &ModelMetadata::domain)
      .def_readonly("description", &ModelMetadata::description)
      .def_readonly("graph_description", &ModelMetadata::graph_description)
      .def_readonly("version", &ModelMetadata::version)
      .def_property_readonly("custom_metadata_map", [](const ModelMetadata& md) {
        py::dict d;
        for (const auto& [k, v] : md.custom_metadata_map) d[py::str(k)] = py::str(v);
        return d;
      });
}

// run_with_iobinding of either session: the bound inputs in, the outputs into their bound buffers
// or into new values (the binding's results).
void run_binding(IOBindingObj& b, const void* session, const RunOptions* ro) {
  if (b.session != session) throw_error<InvalidArgument>("run_with_iobinding: the binding belongs to another session");
  // The run releases the GIL, and another thread may rebind or clear the binding meanwhile:
  // the bound values are held here for the whole run (the run reads these, whatever the
  // binding holds by then).
  const auto inputs = b.inputs;
  const auto outputs = b.outputs;
  for (const auto& [n, o] : outputs)
    if (o.buffer && ortvalue_is_readonly(*o.buffer))
      throw_error<InvalidArgument>("run_with_iobinding: output '", n, "' is bound to read-only memory");
  std::vector<std::unique_ptr<Value>> owned;
  std::vector<std::pair<std::string, const Value*>> f;
  for (const auto& [n, v] : inputs) {
    check_dense_feed(b.sparse_inputs, n, v.get(), v->value);
    f.emplace_back(n, &feed_value(*v, n, owned));
  }
  std::vector<std::string> names;
  for (const auto& o : outputs) names.push_back(o.first);
  std::vector<Value> buffers;
  for (const auto& o : outputs) buffers.push_back(o.second.buffer ? o.second.buffer->value : Value());
  // Outputs the run wrote into their buffers come back as those tensors; the others are copied.
  auto out = b.run(names, f, ro, std::move(buffers));
  const std::vector<bool> sparse = sparse_flags(b.sparse_outputs, names);
  std::vector<OrtValuePtr> results;
  for (size_t i = 0; i < out.size(); ++i) {
    const OrtValuePtr pre = i < outputs.size() ? outputs[i].second.buffer : nullptr;
    if (!pre) {
      const bool sp = i < sparse.size() && sparse[i];
      // bind_output(name, device) on a device: the result moves there.
      const Device to = i < outputs.size() ? outputs[i].second.device : Device::cpu();
      if (!to.is_host() && out[i].is_tensor() && !sp) out[i].tensor = to_device(out[i].tensor, to);
      results.push_back(sp ? ortvalues_of({std::move(out[i])}, {true})[0] : ortvalue_from_value(std::move(out[i])));
      continue;
    }
    Tensor& dst = pre->value.tensor;
    if (!out[i].is_tensor() || out[i].tensor.dtype() != dst.dtype() || out[i].tensor.shape() != dst.shape())
      throw_error<InvalidArgument>("output '", names[i], "' is ",
                                   out[i].is_tensor() ? out[i].tensor.describe() : std::string("not a tensor"),
                                   " but the buffer bound to it is ", dst.describe());
    if (out[i].tensor.raw_data() != dst.raw_data()) copy_tensor(out[i].tensor, dst);  // not written in place
    results.push_back(pre);
  }
  b.results = std::move(results);
}

void bind_session(py::module_& m) {
  py::class_<PySession, std::shared_ptr<PySession>>(m, "InferenceSession",
                                                     "The native session: InferenceSession(sess_options, model, is_path, "
                                                     "load_config_from_model), then initialize_session(providers, ...).")
      .def(py::init([](const std::shared_ptr<SessionOptions>& opts, py::object model, bool is_path, bool load_config) {
             auto s = std::make_shared<PySession>();
             if (opts) s->options = *opts;
             if (is_path ? !py::isinstance<py::str>(model) : !py::isinstance<py::bytes>(model))
               throw_error<InvalidArgument>("InferenceSession: expected ", is_path ? "a file path" : "model bytes");
             s->model = model;
             s->is_path = is_path;
             return s;
           }),
           py::arg("sess_options"), py::arg("path_or_bytes"), py::arg("is_arg_file_name"),
           py::arg("load_config_from_model") = false)
      .def(
          "initialize_session",
          [](PySession& s, std::vector<std::string> providers, py::object provider_options, py::object disabled) {
            if (!disabled.is_none())
              for (auto d : disabled) {
                std::string name = py::str(d);
                if (name == "ConstantFolding") {
                  if (s.options.graph_optimization_level > GraphOptimizationLevel::kDisableAll)
                    s.options.graph_optimization_level = GraphOptimizationLevel::kDisableAll;
                } else {
                  throw_error<InvalidArgument>("disabled_optimizers: unknown optimizer '", name,
                                               "' (onnxtrain's: ConstantFolding)");
                }
              }
            SessionOptions o = s.options;
            // The providers the Python layer kept (available ones, in preference order).
            o.providers.clear();
            for (const auto& p : providers)
              if (p != "CPUExecutionProvider") o.providers.push_back(p);
            if (!o.providers.empty()) o.providers.push_back("CPUExecutionProvider");
            if (s.is_path) {
              std::string path = s.model.cast<std::string>();
              py::gil_scoped_release nogil;
              s.sess = std::make_unique<InferenceSession>(path, o);
            } else {
              std::string bytes = s.model.cast<std::string>();
              py::gil_scoped_release nogil;
              s.sess = std::make_unique<InferenceSession>(bytes.data(), bytes.size(), o);
            }
            s.options = s.sess->options();
            s.sparse_inputs.clear();
            for (const NodeArg& a : s.sess->get_inputs())
              if (a.type.rfind("sparse_tensor(", 0) == 0) s.sparse_inputs.emplace_back(a.name, a.type);
            s.providers = providers.empty() ? std::vector<std::string>{"CPUExecutionProvider"} : providers;
            s.provider_options = py::dict();
            for (const auto& p : s.providers) s.provider_options[py::str(p)] = py::dict();
            (void)provider_options;
          },
          py::arg("providers") = std::vector<std::string>{}, py::arg("provider_options") = py::none(),
          py::arg("disabled_optimizers") = py::none(), "Loads the model and prepares it.")
      .def_property_readonly("inputs_meta", [](PySession& s) { return s.get().get_inputs(); })
      .def_property_readonly("outputs_meta", [](PySession& s) { return s.get().get_outputs(); })
      .def_property_readonly("overridable_initializers", [](PySession& s) { return s.get().get_overridable_initializers(); })
      .def_property_readonly("model_meta", [](PySession& s) { return s.get().metadata(); })
      .def_property_readonly("session_options", [](PySession& s) { return std::make_shared<SessionOptions>(s.options); })
      .def_property_readonly("get_profiling_start_time_ns", [](PySession& s) { return s.get().profiling_start_time_ns(); })
      .def("get_providers", [](PySession& s) { return s.providers; })
      .def("get_provider_options", [](PySession& s) { return s.provider_options; })
      .def("end_profiling", [](PySession& s) { return s.get().end_profiling(); }, "Writes the profile; returns its file name.")
      .def(
          "run",
          [](PySession& s, py::object output_names, py::dict feed, std::shared_ptr<RunOptions> ro) {
            const std::vector<std::string> names = names_or_all(s, names_from(output_names));
            std::vector<Value> out = run_dict(s, py::cast(names), feed, ro.get());
            // Outputs declared sparse_tensor come back as SparseTensor objects, as onnxruntime's run
            // returns them (COO of the nonzero elements).
            const std::vector<bool> sparse = sparse_outputs(s.get(), names);
            std::vector<py::object> sparse_objects(out.size());
            for (size_t i = 0; i < out.size(); ++i)
              if (sparse[i] && out[i].is_tensor()) sparse_objects[i] = py::cast(sparse_coo_of_dense(out[i].tensor));
            py::list l = values_to_list(std::move(out));
            for (size_t i = 0; i < sparse_objects.size(); ++i)
              if (sparse_objects[i]) l[i] = sparse_objects[i];
            return l;
          },
          py::arg("output_names"), py::arg("input_feed"), py::arg("run_options") = nullptr,
          "Runs; returns the outputs as numpy arrays (sequences as lists, empty optionals as None, outputs declared "
          "sparse_tensor as SparseTensor).")
      .def(
          "run_with_ort_values",
          [](PySession& s, py::dict feed, py::object output_names, std::shared_ptr<RunOptions> ro) {
            auto out = std::make_shared<OrtValueVectorObj>();
            const std::vector<std::string> names = names_or_all(s, names_from(output_names));
            out->values = ortvalues_of(run_dict(s, py::cast(names), feed, ro.get()), sparse_outputs(s.get(), names));
            return out;
          },
          py::arg("input_dict_ort_values"), py::arg("output_names"), py::arg("run_options") = nullptr,
          "Runs with OrtValue feeds; returns an OrtValueVector.")
      .def(
          "run_with_ortvaluevector",
          [](PySession& s, std::shared_ptr<RunOptions> ro, const std::vector<std::string>& feed_names,
             const OrtValueVectorObj& feeds, const std::vector<std::string>& fetch_names, OrtValueVectorObj& fetches,
             py::object fetch_devices) {
            if (feed_names.size() != feeds.values.size())
              throw_error<InvalidArgument>("run_with_ortvaluevector: ", feed_names.size(), " feed names for ",
                                           feeds.values.size(), " values");
            std::vector<Device> to;  // onnxruntime's fetch devices: where each output goes
            if (!fetch_devices.is_none())
              for (auto d : fetch_devices) to.push_back(device_of(d.cast<OrtDeviceObj&>()));
            // The run releases the GIL: the values are held here, not read through `feeds` (which
            // another thread may change meanwhile).
            const std::vector<OrtValuePtr> held = feeds.values;
            std::vector<std::unique_ptr<Value>> owned;
            std::vector<std::pair<std::string, const Value*>> f;
            for (size_t i = 0; i < feed_names.size(); ++i) {
              if (held[i]->sparse) check_sparse_feed(s.get(), feed_names[i], *held[i]);
              check_dense_feed(s.sparse_inputs, feed_names[i], held[i].get(), held[i]->value);
              f.emplace_back(feed_names[i], &feed_value(*held[i], feed_names[i], owned));
            }
            const std::vector<std::string> names = names_or_all(s, fetch_names);
            std::vector<Value> out = run_session(s, names, f, ro.get());
            for (size_t i = 0; i < out.size() && i < to.size(); ++i)
              if (!to[i].is_host() && out[i].is_tensor()) out[i].tensor = to_device(out[i].tensor, to[i]);
            fetches.values = ortvalues_of(std::move(out), sparse_outputs(s.get(), names));
          },
          py::arg("run_options"), py::arg("feed_names"), py::arg("feeds"), py::arg("fetch_names"), py::arg("fetches"),
          py::arg("fetch_devices") = py::none(),
          "Runs with an OrtValueVector of feeds; fills `fetches` (an OrtValueVector) with the outputs.")
      .def(
          "run_with_iobinding",
          [](PySession& s, IOBindingObj& b, std::shared_ptr<RunOptions> ro) { run_binding(b, &s, ro.get()); },
          py::arg("iobinding"), py::arg("run_options") = nullptr,
          "Runs with the bound inputs; outputs go to the bound buffers or to new values (get_outputs).")
      .def(
          "node_assignment",
          [](PySession& s) {
            py::list l;
            for (const auto& a : s.get().node_assignment()) l.append(py::make_tuple(a.name, a.op_type, a.domain, a.provider));
            return l;
          },
          "Every node of the session's graph as (name, op_type, domain, provider), in graph order.")
      .def("last_run_stats", [](PySession& s) {
        RunStats r = s.get().last_run_stats();
        py::dict d;
        d["arena_bytes"] = r.arena_bytes;
        d["naive_bytes"] = r.naive_bytes;
        d["peak_live_bytes"] = r.peak_live_bytes;
        d["constant_bytes"] = r.constant_bytes;
        d["steps"] = r.steps;
        d["dynamic_steps"] = r.dynamic_steps;
        d["folded_nodes"] = r.folded_nodes;
        return d;
      });

  py::class_<IOBindingObj, std::shared_ptr<IOBindingObj>>(m, "SessionIOBinding",
                                                           "Inputs and outputs bound to a session (onnxruntime's SessionIOBinding).")
      .def(py::init([](py::object session) {
             auto b = std::make_shared<IOBindingObj>();
             b->owner = session;
             if (py::isinstance<TrainingSession>(session)) {
               auto* t = session.cast<TrainingSession*>();
               b->session = t;
               b->run = [t](std::vector<std::string> names, const auto& feeds, const RunOptions* ro,
                            std::vector<Value>) {  // the outputs are new values, copied into the buffers
                 std::vector<std::pair<std::string, Value>> f;
                 for (const auto& [n, v] : feeds) f.emplace_back(n, *v);
                 const bool stop = ro && ro->terminate && ro->terminate->load();
                 py::gil_scoped_release nogil;
                 if (stop) throw_error<Terminated>("run_with_iobinding: terminated by RunOptions.terminate");
                 return t->run(names, f);
               };
               return b;
             }
             if (!py::isinstance<PySession>(session))
               throw_error<InvalidArgument>("SessionIOBinding: expected an InferenceSession or a TrainingSession, got ",
                                            std::string(py::str(py::type::of(session).attr("__name__"))));
             auto s = session.cast<std::shared_ptr<PySession>>();
             s->get();
             b->session = s.get();
             b->sparse_outputs = sparse_output_names(s->get());
             b->sparse_inputs = s->sparse_inputs;
             b->run = [s](std::vector<std::string> names, const auto& feeds, const RunOptions* ro,
                          std::vector<Value> buffers) {
               return run_session(*s, names_or_all(*s, std::move(names)), feeds, ro, &buffers);
             };
             return b;
           }),
           py::arg("session"))
      .def(
          "bind_input",
          [](IOBindingObj& b, const std::string& name, py::object array) {
            set_by_name(b.inputs, name, ortvalue_from_array(array, OrtDeviceObj{}));
          },
          py::arg("name"), py::arg("array"), "Binds input `name` to a numpy array (viewed, not copied, when possible).")
      .def(
          "bind_input",
          [](IOBindingObj& b, const std::string& name, const OrtDeviceObj& device, py::object element_type,
             std::vector<int64_t> shape, uintptr_t ptr) {
            set_by_name(b.inputs, name, pointer_value("bind_input", name, device, element_type, shape, ptr));
          },
          py::arg("name"), py::arg("device"), py::arg("element_type"), py::arg("shape"), py::arg("buffer_ptr"),
          "Binds input `name` to memory at buffer_ptr (the caller keeps it alive and unchanged until the run).")
      .def(
          "bind_ortvalue_input",
          [](IOBindingObj& b, const std::string& name, std::shared_ptr<OrtValueObj> v) {
            set_by_name(b.inputs, name, std::move(v));
          },
          py::arg("name"), py::arg("ortvalue"), "Binds input `name` to an OrtValue.")
      .def(
          "bind_output",
          [](IOBindingObj& b, const std::string& name, const OrtDeviceObj& device) {
            set_by_name(b.outputs, name, IOBindingObj::Output{nullptr, device_of(device)});
          },
          py::arg("name"), py::arg("device"),
          "Binds output `name` to a device; the run allocates it (on a device: a copy of the host result).")
      .def(
          "bind_output",
          [](IOBindingObj& b, const std::string& name, const OrtDeviceObj& device, py::object element_type,
             std::vector<int64_t> shape, uintptr_t ptr) {
            OrtValuePtr buffer = pointer_value("bind_output", name, device, element_type, shape, ptr);
            const Device on = buffer->value.tensor.device();
            set_by_name(b.outputs, name, IOBindingObj::Output{std::move(buffer), on});
          },
          py::arg("name"), py::arg("device"), py::arg("element_type"), py::arg("shape"), py::arg("buffer_ptr"),
          "Binds output `name` to memory at buffer_ptr (its type and shape must be the output's).")
      .def(
          "bind_ortvalue_output",
          [](IOBindingObj& b, const std::string& name, std::shared_ptr<OrtValueObj> v) {
            if (!v->value.is_tensor()) throw_error<InvalidArgument>("bind_ortvalue_output('", name, "'): the OrtValue holds no tensor");
            if (ortvalue_is_readonly(*v))
              throw_error<InvalidArgument>("bind_ortvalue_output('", name, "'): the OrtValue views read-only memory "
                                           "(an immutable buffer or a numpy array with writeable=False); the run "
                                           "writes into a bound output");
            const Device on = v->value.tensor.device();
            set_by_name(b.outputs, name, IOBindingObj::Output{std::move(v), on});
          },
          py::arg("name"), py::arg("ortvalue"), "Binds output `name` to an OrtValue, written in place by the run.")
      .def(
          "get_outputs",
          [](IOBindingObj& b) {
            auto v = std::make_shared<OrtValueVectorObj>();
            v->values = b.results;
            return v;
          },
          "The outputs of the last run_with_iobinding, as an OrtValueVector.")
      .def(
          "copy_outputs_to_cpu",
          [](IOBindingObj& b) {
            py::list l;
            for (const auto& r : b.results) {
              if (r->sparse) {  // onnxruntime hands a sparse output back as its SparseTensor
                l.append(py::cast(r->sparse));
                continue;
              }
              Value c = r->value;
              if (c.is_tensor()) c.tensor = to_device(c.tensor, Device::cpu());
              for (auto& t : c.sequence) t = to_device(t, Device::cpu());
              l.append(value_to_python(std::move(c)));
            }
            return l;
          },
          "Copies of the last run's outputs as numpy arrays.")
      .def("clear_binding_inputs", [](IOBindingObj& b) { b.inputs.clear(); })
      .def("clear_binding_outputs", [](IOBindingObj& b) {
        b.outputs.clear();
        b.results.clear();
      })
      .def("synchronize_inputs", [](IOBindingObj&) {},
           "Nothing to wait for: copies to and from a device are finished when they return.")
      .def("synchronize_outputs", [](IOBindingObj&) {},
           "Nothing to wait for: a run's outputs, on the CPU or a device, are complete when it returns.");

  m.def("get_available_providers", &get_available_providers,
        "Execution providers this build can run now, in preference order (the CPU provider last).");
  m.def("set_seed", [](int64_t seed) { set_default_seed(uint64_t(seed)); }, py::arg("seed"),
        "Seed of random operators in sessions that set no seed of their own.");
}

}  // namespace

void run_training_iobinding(TrainingSession& s, py::handle binding, const RunOptions* ro) {
  if (!py::isinstance<IOBindingObj>(binding))
    throw_error<InvalidArgument>("run_with_iobinding: expected a SessionIOBinding (IOBinding._iobinding)");
  run_binding(binding.cast<IOBindingObj&>(), &s, ro);
}

void bind_sessions(py::module_& m) {
  bind_options(m);
  bind_session(m);
}

}  // namespace onnxtrain::python
