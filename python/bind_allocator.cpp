// onnxruntime's shared allocators: OrtArenaCfg, create_and_register_allocator(_v2) and the
// statistics of the process's shared CPU arena (include/onnxtrain/shared_allocator.h), which
// sessions with the config entry session.use_env_allocators = "1" borrow for each run.
#include <limits>

#include "onnxtrain/error.h"
#include "onnxtrain/shared_allocator.h"
#include "ortvalue.h"

namespace onnxtrain::python {

namespace {

/// onnxruntime's OrtArenaCfg (-1: the default of a field).
struct ArenaCfgObj {
  size_t max_mem = 0;
  int arena_extend_strategy = -1;
  int initial_chunk_size_bytes = -1;
  int max_dead_bytes_per_chunk = -1;
  int initial_growth_chunk_size_bytes = -1;
  int64_t max_power_of_two_extend_bytes = -1;
};

// onnxruntime's checks of a configuration (OrtArenaCfg::IsValid): the strategy -1, 0 or 1, the
// sizes -1 (default) or more.
void check_cfg(const ArenaCfgObj& c) {
  auto bad = [](const char* field, int64_t v, const char* want) {
    throw_error<InvalidArgument>("Invalid configuration value was provided: OrtArenaCfg.", field, " is ", v, ", ",
                                 want);
  };
  if (c.arena_extend_strategy < -1 || c.arena_extend_strategy > 1)
    bad("arena_extend_strategy", c.arena_extend_strategy, "expected -1 (default), 0 (kNextPowerOfTwo) or 1 (kSameAsRequested)");
  if (c.initial_chunk_size_bytes < -1) bad("initial_chunk_size_bytes", c.initial_chunk_size_bytes, "expected -1 or more");
  if (c.max_dead_bytes_per_chunk < -1) bad("max_dead_bytes_per_chunk", c.max_dead_bytes_per_chunk, "expected -1 or more");
  if (c.initial_growth_chunk_size_bytes < -1)
    bad("initial_growth_chunk_size_bytes", c.initial_growth_chunk_size_bytes, "expected -1 or more");
  if (c.max_power_of_two_extend_bytes < -1)
    bad("max_power_of_two_extend_bytes", c.max_power_of_two_extend_bytes, "expected -1 or more");
}

ArenaCfgObj cfg_from_dict(const py::dict& d) {
  ArenaCfgObj c;
  for (auto [k, v] : d) {
    const std::string key = py::str(k);
    if (key == "max_mem") c.max_mem = v.cast<size_t>();
    else if (key == "arena_extend_strategy") c.arena_extend_strategy = v.cast<int>();
    else if (key == "initial_chunk_size_bytes") c.initial_chunk_size_bytes = v.cast<int>();
    else if (key == "max_dead_bytes_per_chunk") c.max_dead_bytes_per_chunk = v.cast<int>();
    else if (key == "initial_growth_chunk_size_bytes") c.initial_growth_chunk_size_bytes = v.cast<int>();
    else if (key == "max_power_of_two_extend_bytes") c.max_power_of_two_extend_bytes = v.cast<int64_t>();
    else throw_error<RuntimeError>("Invalid OrtArenaCfg option: ", key);
  }
  return c;
}

// onnxruntime's create_and_register_allocator: CPU memory only; failures as RuntimeError with its
// prefix.
void register_cpu(const OrtMemoryInfoObj& info, const ArenaCfgObj* cfg) {
  try {
    if (info.device.device_type != 0)
      throw_error<InvalidArgument>("Only CPU devices are supported. Please call CreateAndRegisterAllocatorV2() for "
                                   "other device.");
    if (cfg) check_cfg(*cfg);
    if (cfg) {  // onnxruntime's chunk-level settings: nothing to act on here, said rather than ignored
      std::string unused;
      if (cfg->max_dead_bytes_per_chunk != -1) unused += " max_dead_bytes_per_chunk";
      if (cfg->initial_growth_chunk_size_bytes != -1) unused += " initial_growth_chunk_size_bytes";
      if (cfg->max_power_of_two_extend_bytes != -1) unused += " max_power_of_two_extend_bytes";
      const std::string msg = "OrtArenaCfg:" + unused +
                              " have no effect in onnxtrain: a run borrows the shared arena's block whole (never a "
                              "split chunk), grown per arena_extend_strategy and initial_chunk_size_bytes";
      if (!unused.empty() && PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) < 0) throw py::error_already_set();
    }
    register_shared_cpu_arena(cfg ? cfg->max_mem : 0, cfg ? cfg->arena_extend_strategy : -1,
                              cfg && cfg->initial_chunk_size_bytes > 0 ? size_t(cfg->initial_chunk_size_bytes) : 0);
  } catch (const Error& e) {
    throw_error<RuntimeError>("Error when creating and registering allocator: ", e.what());
  }
}

}  // namespace

void bind_allocators(py::module_& m) {
  py::class_<ArenaCfgObj>(m, "OrtArenaCfg",
                          "onnxruntime's arena configuration, for create_and_register_allocator: max_mem bounds the "
                          "shared arena (0: no bound); the other fields are validated and kept (the shared arena "
                          "is one block lent whole to a run, so chunk and extension sizes have nothing to act on).")
      .def(py::init([](size_t max_mem, int strategy, int initial_chunk, int max_dead) {
             ArenaCfgObj c;
             c.max_mem = max_mem, c.arena_extend_strategy = strategy, c.initial_chunk_size_bytes = initial_chunk,
             c.max_dead_bytes_per_chunk = max_dead;
             return c;
           }),
           py::arg("max_mem"), py::arg("arena_extend_strategy"), py::arg("initial_chunk_size_bytes"),
           py::arg("max_dead_bytes_per_chunk"))
      .def(py::init(&cfg_from_dict), py::arg("config"),
           "From a dict of max_mem, arena_extend_strategy, initial_chunk_size_bytes, max_dead_bytes_per_chunk, "
           "initial_growth_chunk_size_bytes, max_power_of_two_extend_bytes; another key raises.")
      .def_readwrite("max_mem", &ArenaCfgObj::max_mem)
      .def_readwrite("arena_extend_strategy", &ArenaCfgObj::arena_extend_strategy)
      .def_readwrite("initial_chunk_size_bytes", &ArenaCfgObj::initial_chunk_size_bytes)
      .def_readwrite("max_dead_bytes_per_chunk", &ArenaCfgObj::max_dead_bytes_per_chunk)
      .def_readwrite("initial_growth_chunk_size_bytes", &ArenaCfgObj::initial_growth_chunk_size_bytes)
      .def_readwrite("max_power_of_two_extend_bytes", &ArenaCfgObj::max_power_of_two_extend_bytes);

  m.def(
      "create_and_register_allocator",
      [](const OrtMemoryInfoObj& info, const ArenaCfgObj* cfg) { register_cpu(info, cfg); }, py::arg("mem_info"),
      py::arg("arena_cfg") = nullptr,
      "Registers the process's shared CPU arena (once: a second call raises). Sessions created with the config "
      "entry session.use_env_allocators = '1' then borrow it for each run instead of holding their own.");
  m.def(
      "create_and_register_allocator_v2",
      [](const std::string& provider, const OrtMemoryInfoObj& info, const py::dict& /*provider_options*/,
         const ArenaCfgObj* cfg) {
        if (provider != "CPUExecutionProvider")
          throw_error<RuntimeError>("Error when creating and registering allocator in create_and_register_allocator_v2: ",
                                    provider, " is not available in this build (only CPUExecutionProvider)");
        register_cpu(info, cfg);
      },
      py::arg("provider_type"), py::arg("mem_info"), py::arg("provider_options"), py::arg("arena_cfg") = nullptr,
      "create_and_register_allocator for an execution provider: CPUExecutionProvider only in this build.");
  m.def(
      "shared_allocator_stats",
      [] {
        const SharedArenaStats s = shared_cpu_arena_stats();
        py::dict d;
        d["registered"] = s.registered;
        d["arena_bytes"] = s.arena_bytes;
        d["max_mem"] = s.max_mem;
        d["runs"] = s.runs;
        d["live_arena_bytes"] = s.live_arena_bytes;
        return d;
      },
      "onnxtrain's figures of the shared CPU arena: registered, arena_bytes (allocated: the largest arena a "
      "borrowing run needed), max_mem, runs (that borrowed it), live_arena_bytes (every run arena allocated in "
      "the process now: the sessions' own and the shared one).");
}

}  // namespace onnxtrain::python
