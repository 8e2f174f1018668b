// The C API of include/onnxtrain/training_c_api.h over CheckpointState and on_device::Module,
// Optimizer, LinearLRScheduler. Every entry point catches everything (no C++ exception crosses
// the boundary) and turns it into an OrtStatus with onnxruntime's error code.
#include "onnxtrain/training_c_api.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/error.h"
#include "onnxtrain/on_device.h"
#include "onnxtrain/session.h"
#include "onnxtrain/state.h"

using namespace onnxtrain;

struct OrtStatus {
  OrtErrorCode code;
  std::string message;
};
struct OrtEnv {
  int unused = 0;
};
struct OrtSessionOptions {
  SessionOptions options;
};
struct OrtRunOptions {
  int unused = 0;
};
struct OrtMemoryInfo {
  int unused = 0;
};
struct OrtValue {
  Value value;
};
struct OrtTensorTypeAndShapeInfo {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
};
struct OrtCheckpointState {
  CheckpointState state;
};
struct OrtTrainingSession {
  std::unique_ptr<on_device::Module> module;
  std::unique_ptr<on_device::Optimizer> optimizer;
  std::unique_ptr<on_device::LinearLRScheduler> scheduler;
};

namespace {

OrtStatus* status(OrtErrorCode code, std::string message) {
  return new (std::nothrow) OrtStatus{code, std::move(message)};
}

// Runs `f` (returning void), turning any exception into a status.
template <class F>
OrtStatus* guarded(F&& f) {
  try {
    f();
    return nullptr;
  } catch (const InvalidArgument& e) {
    return status(ORT_INVALID_ARGUMENT, e.what());
  } catch (const NotImplemented& e) {
    return status(ORT_NOT_IMPLEMENTED, e.what());
  } catch (const NoSuchFile& e) {
    return status(ORT_NO_SUCHFILE, e.what());
  } catch (const InvalidGraph& e) {
    return status(ORT_INVALID_GRAPH, e.what());
  } catch (const InvalidModel& e) {
    return status(ORT_INVALID_PROTOBUF, e.what());
  } catch (const Error& e) {
    return status(ORT_FAIL, e.what());
  } catch (const std::bad_alloc&) {
    return status(ORT_FAIL, "out of memory");
  } catch (const std::exception& e) {
    return status(ORT_RUNTIME_EXCEPTION, e.what());
  } catch (...) {
    return status(ORT_RUNTIME_EXCEPTION, "unknown error");
  }
}

// Throws InvalidArgument naming `what` when `p` is null.
template <class T>
T* need(T* p, const char* what) {
  if (!p) throw_error<InvalidArgument>(what, " is NULL");
  return p;
}

on_device::Module& module_of(const OrtTrainingSession* s) { return *need(s, "the training session")->module; }

on_device::Optimizer& optimizer_of(const OrtTrainingSession* s) {
  if (!need(s, "the training session")->optimizer)
    throw_error<InvalidArgument>("the training session has no optimizer model");
  return *s->optimizer;
}

// Stores a new T{args...} in *out. `out` is checked first: in `*need(out) = new T`, the new would
// run first (the right operand of = is sequenced before the left) and leak when out is NULL.
template <class T, class... A>
void give(T** out, A&&... args) {
  need(out, "out");
  *out = new T{std::forward<A>(args)...};
}

const Tensor& tensor_of(const OrtValue* v, const char* what) {
  if (!need(v, what)->value.is_tensor()) throw_error<InvalidArgument>(what, " is not a tensor");
  return v->value.tensor;
}

char* copy_string(OrtAllocator* allocator, const std::string& s) {
  need(allocator, "the allocator");
  auto* out = static_cast<char*>(allocator->Alloc(allocator, s.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

const std::string& name_at(const std::vector<std::string>& names, size_t index, const char* what) {
  if (index >= names.size())
    throw_error<InvalidArgument>(what, " index ", index, " is out of range (", names.size(), " names)");
  return names[index];
}

std::vector<Value> values_of(size_t n, const OrtValue* const* inputs, const std::vector<std::string>& names) {
  if (n != names.size())
    throw_error<InvalidArgument>("the model takes ", names.size(), " user inputs, ", n, " were given");
  if (n) need(inputs, "inputs");
  std::vector<Value> r;
  for (size_t i = 0; i < n; ++i) r.push_back(need(inputs[i], ("input " + std::to_string(i)).c_str())->value);
  return r;
}

// Hands the step's results to the caller: new values for NULL slots, filled tensors otherwise.
void deliver(std::vector<Value> results, size_t n, OrtValue** outputs) {
  if (n != results.size())
    throw_error<InvalidArgument>("the model has ", results.size(), " user outputs, outputs_len is ", n);
  if (n) need(outputs, "outputs");
  for (size_t i = 0; i < n; ++i) {
    if (outputs[i]) {
      Tensor& dst = outputs[i]->value.tensor;
      const Tensor& src = results[i].tensor;
      if (!outputs[i]->value.is_tensor() || !results[i].is_tensor() || dst.dtype() != src.dtype() ||
          dst.shape() != src.shape())
        throw_error<InvalidArgument>("output ", i, " was given as a value that does not fit the result (",
                                     src.describe(), ")");
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (outputs[i]) outputs[i]->value.tensor.copy_from(results[i].tensor);
    else outputs[i] = new OrtValue{std::move(results[i])};
  }
}

on_device::ModelSource source_file(const char* path) {
  return path ? on_device::ModelSource::file(path) : on_device::ModelSource{};
}

on_device::ModelSource source_buffer(const void* data, size_t n, const char* what) {
  if (!data) {
    if (n) throw_error<InvalidArgument>(what, " is NULL with a length of ", n);
    return {};
  }
  return on_device::ModelSource::buffer(std::string(static_cast<const char*>(data), n));
}

void make_session(OrtCheckpointState* state, const OrtSessionOptions* options, on_device::ModelSource train,
                  on_device::ModelSource eval, on_device::ModelSource optim, OrtTrainingSession** out) {
  need(out, "out");
  need(state, "the checkpoint state");
  const SessionOptions so = options ? options->options : SessionOptions{};
  auto s = std::make_unique<OrtTrainingSession>();
  s->module = std::make_unique<on_device::Module>(train, state->state, eval, so);
  if (!optim.empty())
    s->optimizer = std::make_unique<on_device::Optimizer>(optim, *s->module, so);
  *out = s.release();
}

// ---- OrtApi
OrtStatus* CreateStatus(OrtErrorCode code, const char* msg) { return status(code, msg ? msg : ""); }
OrtErrorCode GetErrorCode(const OrtStatus* s) { return s ? s->code : ORT_OK; }
const char* GetErrorMessage(const OrtStatus* s) { return s ? s->message.c_str() : ""; }

OrtStatus* CreateEnv(OrtLoggingLevel, const char*, OrtEnv** out) {
  return guarded([&] { give(out); });
}
OrtStatus* CreateSessionOptions(OrtSessionOptions** out) {
  return guarded([&] { give(out); });
}
OrtStatus* SetIntraOpNumThreads(OrtSessionOptions* o, int n) {
  return guarded([&] {
    if (n < 0) throw_error<InvalidArgument>("intra_op_num_threads ", n, " must not be negative");
    need(o, "the session options")->options.intra_op_num_threads = n;
  });
}
OrtStatus* CreateRunOptions(OrtRunOptions** out) {
  return guarded([&] { give(out); });
}
OrtStatus* CreateCpuMemoryInfo(OrtAllocatorType, OrtMemType, OrtMemoryInfo** out) {
  return guarded([&] { give(out); });
}

DType element_type(ONNXTensorElementDataType t) {
  const DType d = DType(int(t));
  if (t <= ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED || t > ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 ||
      t == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING || !dtype_supported(d))
    throw_error<InvalidArgument>("element type ", int(t), " is not supported for tensors made from buffers");
  return d;
}

Shape shape_of(const int64_t* shape, size_t n) {
  if (n) need(shape, "shape");
  Shape s(shape, shape + n);
  for (int64_t d : s)
    if (d < 0) throw_error<InvalidArgument>("shape dimension ", d, " is negative");
  return s;
}

OrtStatus* CreateTensorWithDataAsOrtValue(const OrtMemoryInfo*, void* data, size_t len, const int64_t* shape,
                                          size_t shape_len, ONNXTensorElementDataType type, OrtValue** out) {
  return guarded([&] {
    need(out, "out");
    const DType dt = element_type(type);
    const Shape s = shape_of(shape, shape_len);
    Tensor view = Tensor::wrap(dt, s, data);
    if (view.nbytes() != len)
      throw_error<InvalidArgument>("the buffer holds ", len, " bytes; a ", view.describe(), " needs ", view.nbytes());
    if (view.nbytes()) need(data, "p_data");
    *out = new OrtValue{Value::of(std::move(view))};
  });
}

OrtStatus* CreateTensorAsOrtValue(OrtAllocator*, const int64_t* shape, size_t shape_len, ONNXTensorElementDataType type,
                                  OrtValue** out) {
  return guarded([&] {
    need(out, "out");
    *out = new OrtValue{Value::of(Tensor::zeros(element_type(type), shape_of(shape, shape_len)))};
  });
}

OrtStatus* IsTensor(const OrtValue* v, int* out) {
  return guarded([&] { *need(out, "out") = need(v, "the value")->value.is_tensor() ? 1 : 0; });
}
OrtStatus* GetTensorMutableData(OrtValue* v, void** out) {
  return guarded([&] { *need(out, "out") = const_cast<Tensor&>(tensor_of(v, "the value")).raw_data(); });
}
OrtStatus* GetTensorTypeAndShape(const OrtValue* v, OrtTensorTypeAndShapeInfo** out) {
  return guarded([&] {
    const Tensor& t = tensor_of(v, "the value");
    give(out, t.dtype(), t.shape());
  });
}
OrtStatus* GetTensorElementType(const OrtTensorTypeAndShapeInfo* i, ONNXTensorElementDataType* out) {
  return guarded([&] { *need(out, "out") = ONNXTensorElementDataType(int(need(i, "the type info")->dtype)); });
}
OrtStatus* GetDimensionsCount(const OrtTensorTypeAndShapeInfo* i, size_t* out) {
  return guarded([&] { *need(out, "out") = need(i, "the type info")->dims.size(); });
}
OrtStatus* GetDimensions(const OrtTensorTypeAndShapeInfo* i, int64_t* dims, size_t n) {
  return guarded([&] {
    const auto& d = need(i, "the type info")->dims;
    if (n < d.size()) throw_error<InvalidArgument>("dim_values_length ", n, " is less than the rank ", d.size());
    if (!d.empty()) std::memcpy(need(dims, "dim_values"), d.data(), d.size() * sizeof(int64_t));
  });
}
OrtStatus* GetTensorShapeElementCount(const OrtTensorTypeAndShapeInfo* i, size_t* out) {
  return guarded([&] {
    size_t n = 1;
    for (int64_t d : need(i, "the type info")->dims) n *= size_t(d);
    *need(out, "out") = n;
  });
}

void* default_alloc(OrtAllocator*, size_t n) { return std::malloc(n ? n : 1); }
void default_free(OrtAllocator*, void* p) { std::free(p); }
OrtMemoryInfo g_cpu_info;
const OrtMemoryInfo* default_info(const OrtAllocator*) { return &g_cpu_info; }
OrtAllocator g_allocator{ORT_API_VERSION, default_alloc, default_free, default_info};

OrtStatus* GetAllocatorWithDefaultOptions(OrtAllocator** out) {
  return guarded([&] { *need(out, "out") = &g_allocator; });
}
OrtStatus* AllocatorFree(OrtAllocator* a, void* p) {
  return guarded([&] { need(a, "the allocator")->Free(a, p); });
}

void ReleaseStatus(OrtStatus* p) { delete p; }
void ReleaseEnv(OrtEnv* p) { delete p; }
void ReleaseSessionOptions(OrtSessionOptions* p) { delete p; }
void ReleaseRunOptions(OrtRunOptions* p) { delete p; }
void ReleaseMemoryInfo(OrtMemoryInfo* p) { delete p; }
void ReleaseValue(OrtValue* p) { delete p; }
void ReleaseTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo* p) { delete p; }

// ---- OrtTrainingApi
OrtStatus* LoadCheckpoint(const ORTCHAR_T* path, OrtCheckpointState** out) {
  return guarded([&] {
    need(out, "checkpoint_state");
    *out = new OrtCheckpointState{CheckpointState::load(need(path, "checkpoint_path"))};
  });
}
OrtStatus* LoadCheckpointFromBuffer(const void* data, const size_t n, OrtCheckpointState** out) {
  return guarded([&] {
    need(out, "checkpoint_state");
    *out = new OrtCheckpointState{CheckpointState::load_from_buffer(need(data, "checkpoint_buffer"), n)};
  });
}
OrtStatus* SaveCheckpoint(OrtCheckpointState* s, const ORTCHAR_T* path, const bool include_optimizer_state) {
  return guarded([&] {
    need(s, "checkpoint_state")->state.save(need(path, "checkpoint_path"), {include_optimizer_state});
  });
}
OrtStatus* CreateTrainingSession(const OrtEnv*, const OrtSessionOptions* options, OrtCheckpointState* state,
                                 const ORTCHAR_T* train, const ORTCHAR_T* eval, const ORTCHAR_T* optim,
                                 OrtTrainingSession** out) {
  return guarded([&] {
    make_session(state, options, on_device::ModelSource::file(need(train, "train_model_path")), source_file(eval),
                 source_file(optim), out);
  });
}
OrtStatus* CreateTrainingSessionFromBuffer(const OrtEnv*, const OrtSessionOptions* options, OrtCheckpointState* state,
                                           const void* train, size_t train_n, const void* eval, size_t eval_n,
                                           const void* optim, size_t optim_n, OrtTrainingSession** out) {
  return guarded([&] {
    need(train, "train_model_data");
    make_session(state, options, source_buffer(train, train_n, "train_model_data"),
                 source_buffer(eval, eval_n, "eval_model_data"), source_buffer(optim, optim_n, "optim_model_data"), out);
  });
}

template <class Names>
OrtStatus* count_of(const OrtTrainingSession* s, size_t* out, Names names) {
  return guarded([&] { *need(out, "out") = names(module_of(s)).size(); });
}
template <class Names>
OrtStatus* name_of(const OrtTrainingSession* s, size_t index, OrtAllocator* a, char** out, Names names, const char* what) {
  return guarded([&] {
    need(out, "output");
    *out = copy_string(a, name_at(names(module_of(s)), index, what));
  });
}
const std::vector<std::string>& train_outputs(const on_device::Module& m) { return m.train_output_names(); }
const std::vector<std::string>& eval_outputs(const on_device::Module& m) { return m.eval_output_names(); }
const std::vector<std::string>& train_inputs(const on_device::Module& m) { return m.train_input_names(); }
const std::vector<std::string>& eval_inputs(const on_device::Module& m) { return m.eval_input_names(); }

OrtStatus* TrainingModelOutputCount(const OrtTrainingSession* s, size_t* out) { return count_of(s, out, train_outputs); }
OrtStatus* EvalModelOutputCount(const OrtTrainingSession* s, size_t* out) { return count_of(s, out, eval_outputs); }
OrtStatus* TrainingModelInputCount(const OrtTrainingSession* s, size_t* out) { return count_of(s, out, train_inputs); }
OrtStatus* EvalModelInputCount(const OrtTrainingSession* s, size_t* out) { return count_of(s, out, eval_inputs); }
OrtStatus* TrainingModelOutputName(const OrtTrainingSession* s, size_t i, OrtAllocator* a, char** out) {
  return name_of(s, i, a, out, train_outputs, "training model output");
}
OrtStatus* EvalModelOutputName(const OrtTrainingSession* s, size_t i, OrtAllocator* a, char** out) {
  return name_of(s, i, a, out, eval_outputs, "eval model output");
}
OrtStatus* TrainingModelInputName(const OrtTrainingSession* s, size_t i, OrtAllocator* a, char** out) {
  return name_of(s, i, a, out, train_inputs, "training model input");
}
OrtStatus* EvalModelInputName(const OrtTrainingSession* s, size_t i, OrtAllocator* a, char** out) {
  return name_of(s, i, a, out, eval_inputs, "eval model input");
}

OrtStatus* LazyResetGrad(OrtTrainingSession* s) {
  return guarded([&] { module_of(s).lazy_reset_grad(); });
}
OrtStatus* TrainStep(OrtTrainingSession* s, const OrtRunOptions*, size_t n_in, const OrtValue* const* inputs,
                     size_t n_out, OrtValue** outputs) {
  return guarded([&] {
    on_device::Module& m = module_of(s);
    if (n_out != m.train_output_names().size())
      throw_error<InvalidArgument>("the training model has ", m.train_output_names().size(),
                                   " user outputs, outputs_len is ", n_out);
    deliver(m.train_step(values_of(n_in, inputs, m.train_input_names())), n_out, outputs);
  });
}
OrtStatus* EvalStep(const OrtTrainingSession* s, const OrtRunOptions*, size_t n_in, const OrtValue* const* inputs,
                    size_t n_out, OrtValue** outputs) {
  return guarded([&] {
    on_device::Module& m = module_of(s);
    if (!m.has_eval_model()) throw_error<InvalidArgument>("the training session has no eval model");
    if (n_out != m.eval_output_names().size())
      throw_error<InvalidArgument>("the eval model has ", m.eval_output_names().size(), " user outputs, outputs_len is ",
                                   n_out);
    deliver(m.eval_step(values_of(n_in, inputs, m.eval_input_names())), n_out, outputs);
  });
}
OrtStatus* SetLearningRate(OrtTrainingSession* s, float lr) {
  return guarded([&] { optimizer_of(s).set_learning_rate(lr); });
}
OrtStatus* GetLearningRate(OrtTrainingSession* s, float* lr) {
  return guarded([&] { *need(lr, "learning_rate") = optimizer_of(s).learning_rate(); });
}
OrtStatus* OptimizerStep(OrtTrainingSession* s, const OrtRunOptions*) {
  return guarded([&] { optimizer_of(s).step(); });
}
OrtStatus* RegisterLinearLRScheduler(OrtTrainingSession* s, const int64_t warmup, const int64_t total,
                                     const float initial_lr) {
  return guarded([&] {
    on_device::Optimizer& o = optimizer_of(s);
    s->scheduler = std::make_unique<on_device::LinearLRScheduler>(o, warmup, total, initial_lr);
  });
}
OrtStatus* SchedulerStep(OrtTrainingSession* s) {
  return guarded([&] {
    if (!need(s, "the training session")->scheduler)
      throw_error<InvalidArgument>("no learning rate scheduler is registered (RegisterLinearLRScheduler)");
    s->scheduler->step();
  });
}
OrtStatus* GetParametersSize(OrtTrainingSession* s, size_t* out, bool trainable_only) {
  return guarded([&] { *need(out, "out") = size_t(module_of(s).parameters_size(trainable_only)); });
}
OrtStatus* CopyParametersToBuffer(OrtTrainingSession* s, OrtValue* buffer, bool trainable_only) {
  return guarded([&] {
    Tensor& dst = const_cast<Tensor&>(tensor_of(buffer, "parameters_buffer"));
    const Tensor src = module_of(s).copy_parameters_to_buffer(trainable_only);
    if (dst.dtype() != src.dtype() || dst.numel() != src.numel())
      throw_error<InvalidArgument>("parameters_buffer is ", dst.describe(), "; the parameters need float[", src.numel(),
                                   "]");
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
  });
}
OrtStatus* CopyBufferToParameters(OrtTrainingSession* s, OrtValue* buffer, bool trainable_only) {
  return guarded([&] { module_of(s).copy_buffer_to_parameters(tensor_of(buffer, "parameters_buffer"), trainable_only); });
}
void ReleaseTrainingSession(OrtTrainingSession* p) { delete p; }
void ReleaseCheckpointState(OrtCheckpointState* p) { delete p; }
OrtStatus* ExportModelForInferencing(OrtTrainingSession* s, const ORTCHAR_T* path, size_t n, const char* const* names) {
  return guarded([&] {
    need(path, "inference_model_path");
    if (n) need(names, "graph_output_names");
    std::vector<std::string> outputs;
    for (size_t i = 0; i < n; ++i) outputs.emplace_back(need(names[i], "a graph output name"));
    module_of(s).export_model_for_inferencing(path, outputs);
  });
}
OrtStatus* SetSeed(const int64_t seed) {
  return guarded([&] { set_default_seed(uint64_t(seed)); });
}
OrtStatus* AddProperty(OrtCheckpointState* s, const char* name, enum OrtPropertyType type, void* value) {
  return guarded([&] {
    need(s, "checkpoint_state");
    need(name, "property_name");
    need(value, "property_value");
    Property p;
    switch (type) {
      case OrtIntProperty: p = *static_cast<const int64_t*>(value); break;
      case OrtFloatProperty: p = *static_cast<const float*>(value); break;
      case OrtStringProperty: p = std::string(static_cast<const char*>(value)); break;
      default: throw_error<InvalidArgument>("property type ", int(type), " is not OrtIntProperty, OrtFloatProperty or "
                                           "OrtStringProperty");
    }
    s->state.properties[name] = std::move(p);
  });
}
OrtStatus* GetProperty(const OrtCheckpointState* s, const char* name, OrtAllocator* a, enum OrtPropertyType* type,
                       void** value) {
  return guarded([&] {
    need(s, "checkpoint_state");
    need(type, "property_type");
    need(value, "property_value");
    auto it = s->state.properties.find(need(name, "property_name"));
    if (it == s->state.properties.end()) throw_error<InvalidArgument>("the checkpoint state has no property '", name, "'");
    need(a, "the allocator");
    if (const auto* i = std::get_if<int64_t>(&it->second)) {
      auto* p = static_cast<int64_t*>(a->Alloc(a, sizeof(int64_t)));
      if (!p) throw std::bad_alloc();
      *p = *i;
      *type = OrtIntProperty;
      *value = p;
    } else if (const auto* f = std::get_if<float>(&it->second)) {
      auto* p = static_cast<float*>(a->Alloc(a, sizeof(float)));
      if (!p) throw std::bad_alloc();
      *p = *f;
      *type = OrtFloatProperty;
      *value = p;
    } else {
      *value = copy_string(a, std::get<std::string>(it->second));
      *type = OrtStringProperty;
    }
  });
}
OrtStatus* GetParameterTypeAndShape(const OrtCheckpointState* s, const char* name, OrtTensorTypeAndShapeInfo** out) {
  return guarded([&] {
    need(out, "parameter_type_and_shape");
    const Parameter& p = need(s, "checkpoint_state")->state.parameter(need(name, "parameter_name"));
    *out = new OrtTensorTypeAndShapeInfo{p.dtype, p.shape()};
  });
}
OrtStatus* UpdateParameter(OrtCheckpointState* s, const char* name, OrtValue* value) {
  return guarded([&] {
    Parameter& p = need(s, "checkpoint_state")->state.parameter(need(name, "parameter_name"));
    const Tensor& src = tensor_of(value, "parameter");
    if (!p.data.defined())
      throw_error<InvalidArgument>("parameter '", name, "' has no value: Please load the parameter states first");
    if (src.dtype() != p.data.dtype() || src.shape() != p.data.shape())
      throw_error<InvalidArgument>("cannot assign ", src.describe(), " to parameter '", name, "', which is ",
                                   p.data.describe());
    p.data.copy_from(src);
  });
}
OrtStatus* GetParameter(const OrtCheckpointState* s, const char* name, OrtAllocator*, OrtValue** out) {
  return guarded([&] {
    need(out, "parameter");
    const Parameter& p = need(s, "checkpoint_state")->state.parameter(need(name, "parameter_name"));
    if (!p.data.defined())
      throw_error<InvalidArgument>("parameter '", name, "' has no value: Please load the parameter states first");
    *out = new OrtValue{Value::of(p.data.clone())};
  });
}

const OrtTrainingApi g_training_api = {
    LoadCheckpoint,
    SaveCheckpoint,
    CreateTrainingSession,
    CreateTrainingSessionFromBuffer,
    TrainingModelOutputCount,
    EvalModelOutputCount,
    TrainingModelOutputName,
    EvalModelOutputName,
    LazyResetGrad,
    TrainStep,
    EvalStep,
    SetLearningRate,
    GetLearningRate,
    OptimizerStep,
    RegisterLinearLRScheduler,
    SchedulerStep,
    GetParametersSize,
    CopyParametersToBuffer,
    CopyBufferToParameters,
    ReleaseTrainingSession,
    ReleaseCheckpointState,
    ExportModelForInferencing,
    SetSeed,
    TrainingModelInputCount,
    EvalModelInputCount,
    TrainingModelInputName,
    EvalModelInputName,
    AddProperty,
    GetProperty,
    LoadCheckpointFromBuffer,
    GetParameterTypeAndShape,
    UpdateParameter,
    GetParameter,
};

const OrtTrainingApi* GetTrainingApi(uint32_t version) {
  return version >= 1 && version <= ORT_API_VERSION ? &g_training_api : nullptr;
}

const OrtApi g_api = {
    CreateStatus,
    GetErrorCode,
    GetErrorMessage,
    CreateEnv,
    CreateSessionOptions,
    SetIntraOpNumThreads,
    CreateRunOptions,
    CreateCpuMemoryInfo,
    CreateTensorWithDataAsOrtValue,
    CreateTensorAsOrtValue,
    IsTensor,
    GetTensorMutableData,
    GetTensorTypeAndShape,
    GetTensorElementType,
    GetDimensionsCount,
    GetDimensions,
    GetTensorShapeElementCount,
    GetAllocatorWithDefaultOptions,
    AllocatorFree,
    ReleaseStatus,
    ReleaseEnv,
    ReleaseSessionOptions,
    ReleaseRunOptions,
    ReleaseMemoryInfo,
    ReleaseValue,
    ReleaseTensorTypeAndShapeInfo,
    GetTrainingApi,
};

const OrtApi* GetApi(uint32_t version) { return version >= 1 && version <= ORT_API_VERSION ? &g_api : nullptr; }
const char* GetVersionString() { return "onnxtrain 0.1.0 (onnxruntime 1.19 training API)"; }

const OrtApiBase g_api_base = {GetApi, GetVersionString};

}  // namespace

extern "C" const OrtApiBase* OrtGetApiBase(void) { return &g_api_base; }
