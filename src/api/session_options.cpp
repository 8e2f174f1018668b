// SessionOptions / RunOptions: what they change in a model and in the executor.
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdlib>

#include "api/session_impl.h"

namespace onnxtrain {

std::string SessionOptions::config(const std::string& key, const std::string& dflt) const {
  for (auto it = config_entries.rbegin(); it != config_entries.rend(); ++it)
    if (it->first == key) return it->second;
  return dflt;
}

namespace {
std::atomic<uint64_t> g_default_seed{ExecOptions{}.seed};
}

void set_default_seed(uint64_t seed) { g_default_seed.store(seed); }
uint64_t default_seed() { return g_default_seed.load(); }

RunOptions::RunOptions() : terminate(std::make_shared<std::atomic<bool>>(false)) {}

runtime::RunHooks terminate_hooks(const RunOptions* o) {
  runtime::RunHooks hooks;
  if (!o || !o->terminate) return hooks;
  if (o->terminate->load()) throw Terminated("the run was not started: RunOptions.terminate is set");
  hooks.terminate = o->terminate.get();
  return hooks;
}

namespace {

int64_t json_int(const nlohmann::json& v, const std::string& key) {
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    try {
      size_t used = 0;
      int64_t r = std::stoll(v.get<std::string>(), &used);
      if (used == v.get<std::string>().size()) return r;
    } catch (const std::exception&) {
    }
  }
  throw_error<InvalidModel>("model metadata 'ort_config': session option '", key, "' must be an integer, got ",
                            v.dump());
}

GraphOptimizationLevel level_of(int64_t v, const std::string& where) {
  switch (v) {
    case 0: return GraphOptimizationLevel::kDisableAll;
    case 1: return GraphOptimizationLevel::kEnableBasic;
    case 2: return GraphOptimizationLevel::kEnableExtended;
    case 99: return GraphOptimizationLevel::kEnableAll;
    default: break;
  }
  throw_error<InvalidArgument>(where, ": graph optimization level must be 0, 1, 2 or 99, got ", v);
}

}  // namespace

void apply_model_session_options(const ir::Model& model, SessionOptions& o) {
  for (const auto& [key, text] : model.metadata) {
    if (key != "ort_config" && key != "onnxruntime.session_options") continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      throw_error<InvalidModel>("model metadata '", key, "' is not valid JSON: ", e.what());
    }
    if (key == "ort_config") {
      if (!j.is_object()) throw_error<InvalidModel>("model metadata 'ort_config' must be a JSON object");
      if (!j.contains("session_options")) continue;
      j = j["session_options"];
    }
    if (!j.is_object()) throw_error<InvalidModel>("model metadata '", key, "': session options must be a JSON object");
    for (const auto& [name, v] : j.items()) {
      if (name == "intra_op_num_threads") o.intra_op_num_threads = int(json_int(v, name));
      else if (name == "inter_op_num_threads") o.inter_op_num_threads = int(json_int(v, name));
      else if (name == "execution_mode") o.execution_mode = json_int(v, name) ? ExecutionMode::kParallel : ExecutionMode::kSequential;
      else if (name == "graph_optimization_level") {
        const int64_t level = json_int(v, name);
        if (level != 0 && level != 1 && level != 2 && level != 99)
          throw_error<InvalidModel>("model metadata '", key, "': session option 'graph_optimization_level' must be 0, 1, 2 or 99, got ", level);
        o.graph_optimization_level = level_of(level, "model metadata");
      }
      else if (name == "enable_profiling") o.enable_profiling = json_int(v, name) != 0;
      else if (name == "use_deterministic_compute") o.deterministic = json_int(v, name) != 0;
      else if (name == "enable_mem_pattern") o.enable_mem_pattern = json_int(v, name) != 0;
      else if (name == "enable_mem_reuse") o.enable_mem_reuse = json_int(v, name) != 0;
      else if (name == "enable_cpu_mem_arena") o.enable_cpu_mem_arena = json_int(v, name) != 0;
      else if (name == "log_severity_level") {
        const int64_t level = json_int(v, name);
        if (level < -1 || level > 4)
          throw_error<InvalidModel>("model metadata '", key, "': session option 'log_severity_level' must be -1 to 4, got ", level);
        o.log_severity_level = int(level);
      }
      else if (name == "log_verbosity_level") o.log_verbosity_level = int(json_int(v, name));
      else if (name == "profile_file_prefix" && v.is_string()) o.profile_file_prefix = v.get<std::string>();
      else if (name == "logid" && v.is_string()) o.logid = v.get<std::string>();
      else if (name == "session_config_entries" && v.is_object()) {
        for (const auto& [k, e] : v.items()) o.config_entries.emplace_back(k, e.is_string() ? e.get<std::string>() : e.dump());
      } else {
        throw_error<InvalidModel>("model metadata '", key, "': unknown or mistyped session option '", name, "' (",
                                  v.dump(), ")");
      }
    }
  }
}

ir::LoadOptions load_options_of(const SessionOptions& o) {
  ir::LoadOptions r;
  for (const auto& [name, t] : o.initializers)
    if (t.defined()) r.initializers[name] = t;
  for (const auto& [name, bytes] : o.external_initializer_files) {
    if (bytes.dtype() != DType::kUInt8 || bytes.shape().size() != 1)
      throw_error<InvalidArgument>("external initializer file '", name, "': expected the file's bytes (uint8 [n]), got ",
                                   bytes.describe());
    if (!r.external_files.emplace(name, bytes).second)
      throw_error<InvalidArgument>("external initializer file '", name, "' is given twice");
  }
  return r;
}

void apply_session_overrides(ir::Model& model, const SessionOptions& o) {
  ir::Graph& g = *model.graph;
  for (const auto& [name, value] : o.free_dimension_overrides_by_name)
    if (value < 0) throw_error<InvalidArgument>("free dimension override '", name, "': ", value, " is negative");
  for (const auto& [name, value] : o.free_dimension_overrides_by_denotation)
    if (value < 0) throw_error<InvalidArgument>("free dimension override '", name, "': ", value, " is negative");
  for (auto& in : g.inputs) {
    if (in.type.kind != ir::TypeInfo::Kind::kTensor) continue;
    for (auto& d : in.type.dims) {
      if (d.fixed()) continue;
      for (const auto& [den, value] : o.free_dimension_overrides_by_denotation)
        if (!d.denotation.empty() && d.denotation == den) d.value = value;
      for (const auto& [name, value] : o.free_dimension_overrides_by_name)
        if (!d.param.empty() && d.param == name) d.value = value;
    }
  }
  // The loader already replaced (and checked) the model's own initializers (load_options_of); what
  // is left: values for graph inputs without an initializer, and names the model lacks.
  for (const auto& [name, t] : o.initializers) {
    if (!t.defined()) throw_error<InvalidArgument>("add_initializer('", name, "'): the value holds no tensor");
    if (g.initializer(name)) continue;
    const ir::ValueInfo* input = nullptr;
    for (const auto& vi : g.inputs)
      if (vi.name == name) input = &vi;
    if (!input)
      throw_error<InvalidArgument>("add_initializer('", name, "'): the model has no initializer or input of that name");
    runtime::check_feed(*input, Value::of(t));
    g.initializers.emplace_back(name, t);
  }
}

ExecOptions exec_options_of(const SessionOptions& o) {
  if (o.intra_op_num_threads < 0)
    throw_error<InvalidArgument>("SessionOptions.intra_op_num_threads must be >= 0, got ", o.intra_op_num_threads);
  if (o.inter_op_num_threads < 0)
    throw_error<InvalidArgument>("SessionOptions.inter_op_num_threads must be >= 0, got ", o.inter_op_num_threads);
  level_of(int64_t(o.graph_optimization_level), "SessionOptions.graph_optimization_level");
  ExecOptions eo;
  eo.num_threads = o.intra_op_num_threads;
  eo.deterministic = o.deterministic;
  eo.seed = o.seed ? o.seed : default_seed();
  eo.fold_constants = o.graph_optimization_level >= GraphOptimizationLevel::kEnableBasic;
  eo.inplace_aliasing = o.graph_optimization_level >= GraphOptimizationLevel::kEnableExtended;
  eo.reuse_memory = o.enable_mem_reuse;
  eo.keep_memory = o.enable_mem_pattern && o.enable_cpu_mem_arena;
  eo.memory_limit = config_byte_count(o, "session.memory_limit_bytes", "0");  // 0: no session limit
  eo.prepack_weights = !config_flag(o, "session.disable_prepacking", false);
  const std::string wino = o.config("session.conv_winograd", "auto");
  if (wino != "auto" && wino != "0" && wino != "1")
    throw_error<InvalidArgument>("session config entry session.conv_winograd must be \"auto\", \"0\" or \"1\", got \"",
                                 wino, "\"");
  eo.winograd = wino == "auto" ? ExecOptions::Winograd::kAuto
                : wino == "1"  ? ExecOptions::Winograd::kAlways
                               : ExecOptions::Winograd::kNever;
  for (const std::string& name : o.providers) {
    std::string why;
    ExecutionProvider* p = find_execution_provider(name, &why);
    if (!p) throw_error<InvalidArgument>("SessionOptions.providers: ", why);
    eo.providers.push_back(p);
  }
  return eo;
}

std::vector<std::string> get_available_providers() { return available_execution_providers(); }

bool config_flag(const SessionOptions& o, const std::string& key, bool fallback) {
  const std::string v = o.config(key, fallback ? "1" : "0");
  if (v != "0" && v != "1")
    throw_error<InvalidArgument>("session config entry ", key, " must be \"0\" or \"1\", got \"", v, "\"");
  return v == "1";
}

uint64_t config_byte_count(const SessionOptions& o, const std::string& key, const std::string& fallback) {
  const std::string v = o.config(key, fallback);
  uint64_t n = 0;
  const char* end = v.data() + v.size();
  auto [ptr, ec] = std::from_chars(v.data(), end, n);
  if (v.empty() || ec != std::errc() || ptr != end)
    throw_error<InvalidArgument>("session config entry '", key, "': '", v, "' is not a non-negative integer (bytes)");
  return n;
}

}  // namespace onnxtrain
