// Header-only C++ wrapper of the training C API (training_c_api.h) in onnxruntime's shape:
// Ort::Env, Ort::SessionOptions, Ort::Value, Ort::CheckpointState, Ort::TrainingSession,
// Ort::SetSeed. Objects own their C handles (move-only); a failing call throws Ort::Exception
// with onnxruntime's error code and message.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "onnxtrain/training_c_api.h"

namespace Ort {

/// A failed call: what() is the message, GetOrtErrorCode() onnxruntime's code.
class Exception : public std::runtime_error {
 public:
  Exception(std::string message, OrtErrorCode code) : std::runtime_error(std::move(message)), code_(code) {}
  OrtErrorCode GetOrtErrorCode() const { return code_; }

 private:
  OrtErrorCode code_;
};

/// The C API tables.
inline const OrtApi& GetApi() { return *OrtGetApiBase()->GetApi(ORT_API_VERSION); }
inline const OrtTrainingApi& GetTrainingApi() { return *GetApi().GetTrainingApi(ORT_API_VERSION); }

/// Throws the status as an Exception (releasing it); nothing for NULL.
inline void ThrowOnError(OrtStatus* status) {
  if (!status) return;
  std::string message = GetApi().GetErrorMessage(status);
  const OrtErrorCode code = GetApi().GetErrorCode(status);
  GetApi().ReleaseStatus(status);
  throw Exception(std::move(message), code);
}

namespace detail {
// Owns a C handle released by `release` (move-only).
template <class T, void (*Release)(T*)>
class Owner {
 public:
  Owner() = default;
  explicit Owner(T* p) : p_(p) {}
  Owner(Owner&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Owner& operator=(Owner&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  ~Owner() { reset(); }
  operator T*() const { return p_; }  // NOLINT: onnxruntime's wrappers convert implicitly too
  T* release() {
    T* p = p_;
    p_ = nullptr;
    return p;
  }

 protected:
  void reset() {
    if (p_) Release(p_);
    p_ = nullptr;
  }
  T* p_ = nullptr;
};
inline void release_env(OrtEnv* p) { GetApi().ReleaseEnv(p); }
inline void release_options(OrtSessionOptions* p) { GetApi().ReleaseSessionOptions(p); }
inline void release_memory_info(OrtMemoryInfo* p) { GetApi().ReleaseMemoryInfo(p); }
inline void release_value(OrtValue* p) { GetApi().ReleaseValue(p); }
inline void release_info(OrtTensorTypeAndShapeInfo* p) { GetApi().ReleaseTensorTypeAndShapeInfo(p); }
inline void release_state(OrtCheckpointState* p) { GetTrainingApi().ReleaseCheckpointState(p); }
inline void release_session(OrtTrainingSession* p) { GetTrainingApi().ReleaseTrainingSession(p); }

template <class T>
constexpr ONNXTensorElementDataType element_type();
template <> constexpr ONNXTensorElementDataType element_type<float>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
template <> constexpr ONNXTensorElementDataType element_type<double>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE; }
template <> constexpr ONNXTensorElementDataType element_type<int64_t>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64; }
template <> constexpr ONNXTensorElementDataType element_type<int32_t>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32; }
template <> constexpr ONNXTensorElementDataType element_type<uint8_t>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8; }
template <> constexpr ONNXTensorElementDataType element_type<int8_t>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8; }
template <> constexpr ONNXTensorElementDataType element_type<bool>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL; }
}  // namespace detail

struct Env : detail::Owner<OrtEnv, detail::release_env> {
  explicit Env(OrtLoggingLevel level = ORT_LOGGING_LEVEL_WARNING, const char* logid = "") {
    ThrowOnError(GetApi().CreateEnv(level, logid, &p_));
  }
};

struct SessionOptions : detail::Owner<OrtSessionOptions, detail::release_options> {
  SessionOptions() { ThrowOnError(GetApi().CreateSessionOptions(&p_)); }
  SessionOptions& SetIntraOpNumThreads(int n) {
    ThrowOnError(GetApi().SetIntraOpNumThreads(p_, n));
    return *this;
  }
};

struct MemoryInfo : detail::Owner<OrtMemoryInfo, detail::release_memory_info> {
  explicit MemoryInfo(OrtMemoryInfo* p) : Owner(p) {}
  static MemoryInfo CreateCpu(OrtAllocatorType type, OrtMemType mem_type) {
    OrtMemoryInfo* p = nullptr;
    ThrowOnError(GetApi().CreateCpuMemoryInfo(type, mem_type, &p));
    return MemoryInfo(p);
  }
};

/// The default allocator (names and property values are freed with it).
struct AllocatorWithDefaultOptions {
  AllocatorWithDefaultOptions() { ThrowOnError(GetApi().GetAllocatorWithDefaultOptions(&p_)); }
  operator OrtAllocator*() const { return p_; }  // NOLINT
  void Free(void* p) const { ThrowOnError(GetApi().AllocatorFree(p_, p)); }

 private:
  OrtAllocator* p_ = nullptr;
};

/// Element type and shape of a tensor.
struct TensorTypeAndShapeInfo : detail::Owner<OrtTensorTypeAndShapeInfo, detail::release_info> {
  explicit TensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo* p) : Owner(p) {}
  ONNXTensorElementDataType GetElementType() const {
    ONNXTensorElementDataType t;
    ThrowOnError(GetApi().GetTensorElementType(p_, &t));
    return t;
  }
  std::vector<int64_t> GetShape() const {
    size_t n = 0;
    ThrowOnError(GetApi().GetDimensionsCount(p_, &n));
    std::vector<int64_t> dims(n);
    ThrowOnError(GetApi().GetDimensions(p_, dims.data(), n));
    return dims;
  }
  size_t GetElementCount() const {
    size_t n = 0;
    ThrowOnError(GetApi().GetTensorShapeElementCount(p_, &n));
    return n;
  }
};

/// A value (a tensor): over the caller's buffer (CreateTensor with data) or owning zeros.
struct Value : detail::Owner<OrtValue, detail::release_value> {
  Value() = default;
  explicit Value(OrtValue* p) : Owner(p) {}
  template <class T>
  static Value CreateTensor(const OrtMemoryInfo* info, T* data, size_t count, const int64_t* shape, size_t shape_len) {
    OrtValue* p = nullptr;
    ThrowOnError(GetApi().CreateTensorWithDataAsOrtValue(info, data, count * sizeof(T), shape, shape_len,
                                                         detail::element_type<T>(), &p));
    return Value(p);
  }
  template <class T>
  static Value CreateTensor(OrtAllocator* allocator, const int64_t* shape, size_t shape_len) {
    OrtValue* p = nullptr;
    ThrowOnError(GetApi().CreateTensorAsOrtValue(allocator, shape, shape_len, detail::element_type<T>(), &p));
    return Value(p);
  }
  bool IsTensor() const {
    int r = 0;
    ThrowOnError(GetApi().IsTensor(p_, &r));
    return r != 0;
  }
  template <class T>
  T* GetTensorMutableData() {
    void* d = nullptr;
    ThrowOnError(GetApi().GetTensorMutableData(p_, &d));
    return static_cast<T*>(d);
  }
  TensorTypeAndShapeInfo GetTensorTypeAndShapeInfo() const {
    OrtTensorTypeAndShapeInfo* i = nullptr;
    ThrowOnError(GetApi().GetTensorTypeAndShape(p_, &i));
    return TensorTypeAndShapeInfo(i);
  }
};

/// A checkpoint property: int64, float or string.
using Property = std::variant<int64_t, float, std::string>;

/// onnxruntime's Ort::CheckpointState.
struct CheckpointState : detail::Owner<OrtCheckpointState, detail::release_state> {
  explicit CheckpointState(OrtCheckpointState* p) : Owner(p) {}
  static CheckpointState LoadCheckpoint(const std::string& path) {
    OrtCheckpointState* p = nullptr;
    ThrowOnError(GetTrainingApi().LoadCheckpoint(path.c_str(), &p));
    return CheckpointState(p);
  }
  static CheckpointState LoadCheckpointFromBuffer(const std::vector<uint8_t>& buffer) {
    OrtCheckpointState* p = nullptr;
    ThrowOnError(GetTrainingApi().LoadCheckpointFromBuffer(buffer.data(), buffer.size(), &p));
    return CheckpointState(p);
  }
  static void SaveCheckpoint(const CheckpointState& state, const std::string& path, bool include_optimizer_state = false) {
    ThrowOnError(GetTrainingApi().SaveCheckpoint(state, path.c_str(), include_optimizer_state));
  }
  void AddProperty(const std::string& name, const Property& value) {
    if (const auto* i = std::get_if<int64_t>(&value)) {
      int64_t v = *i;
      ThrowOnError(GetTrainingApi().AddProperty(p_, name.c_str(), OrtIntProperty, &v));
    } else if (const auto* f = std::get_if<float>(&value)) {
      float v = *f;
      ThrowOnError(GetTrainingApi().AddProperty(p_, name.c_str(), OrtFloatProperty, &v));
    } else {
      std::string v = std::get<std::string>(value);
      ThrowOnError(GetTrainingApi().AddProperty(p_, name.c_str(), OrtStringProperty, v.data()));
    }
  }
  Property GetProperty(const std::string& name) const {
    AllocatorWithDefaultOptions allocator;
    OrtPropertyType type;
    void* value = nullptr;
    ThrowOnError(GetTrainingApi().GetProperty(p_, name.c_str(), allocator, &type, &value));
    Property r;
    if (type == OrtIntProperty) r = *static_cast<int64_t*>(value);
    else if (type == OrtFloatProperty) r = *static_cast<float*>(value);
    else r = std::string(static_cast<char*>(value));
    allocator.Free(value);
    return r;
  }
  void UpdateParameter(const std::string& name, const Value& value) {
    ThrowOnError(GetTrainingApi().UpdateParameter(p_, name.c_str(), value));
  }
  Value GetParameter(const std::string& name) const {
    AllocatorWithDefaultOptions allocator;
    OrtValue* p = nullptr;
    ThrowOnError(GetTrainingApi().GetParameter(p_, name.c_str(), allocator, &p));
    return Value(p);
  }
};

/// onnxruntime's Ort::TrainingSession over a CheckpointState (which must outlive it).
struct TrainingSession : detail::Owner<OrtTrainingSession, detail::release_session> {
  TrainingSession(const Env& env, const SessionOptions& options, CheckpointState& state, const std::string& train_model,
                  const std::optional<std::string>& eval_model = std::nullopt,
                  const std::optional<std::string>& optimizer_model = std::nullopt) {
    ThrowOnError(GetTrainingApi().CreateTrainingSession(env, options, state, train_model.c_str(),
                                                        eval_model ? eval_model->c_str() : nullptr,
                                                        optimizer_model ? optimizer_model->c_str() : nullptr, &p_));
  }
  std::vector<Value> TrainStep(const std::vector<Value>& inputs) { return step(true, inputs); }
  std::vector<Value> EvalStep(const std::vector<Value>& inputs) { return step(false, inputs); }
  void LazyResetGrad() { ThrowOnError(GetTrainingApi().LazyResetGrad(p_)); }
  void SetLearningRate(float lr) { ThrowOnError(GetTrainingApi().SetLearningRate(p_, lr)); }
  float GetLearningRate() const {
    float lr = 0;
    ThrowOnError(GetTrainingApi().GetLearningRate(p_, &lr));
    return lr;
  }
  void RegisterLinearLRScheduler(int64_t warmup_step_count, int64_t total_step_count, float initial_lr) {
    ThrowOnError(GetTrainingApi().RegisterLinearLRScheduler(p_, warmup_step_count, total_step_count, initial_lr));
  }
  void SchedulerStep() { ThrowOnError(GetTrainingApi().SchedulerStep(p_)); }
  void OptimizerStep() { ThrowOnError(GetTrainingApi().OptimizerStep(p_, nullptr)); }
  std::vector<std::string> InputNames(bool training) const {
    return names(training ? GetTrainingApi().TrainingSessionGetTrainingModelInputCount
                          : GetTrainingApi().TrainingSessionGetEvalModelInputCount,
                 training ? GetTrainingApi().TrainingSessionGetTrainingModelInputName
                          : GetTrainingApi().TrainingSessionGetEvalModelInputName);
  }
  std::vector<std::string> OutputNames(bool training) const {
    return names(training ? GetTrainingApi().TrainingSessionGetTrainingModelOutputCount
                          : GetTrainingApi().TrainingSessionGetEvalModelOutputCount,
                 training ? GetTrainingApi().TrainingSessionGetTrainingModelOutputName
                          : GetTrainingApi().TrainingSessionGetEvalModelOutputName);
  }
  /// The parameters as one float tensor (training-model input order).
  Value ToBuffer(bool only_trainable) {
    size_t n = 0;
    ThrowOnError(GetTrainingApi().GetParametersSize(p_, &n, only_trainable));
    AllocatorWithDefaultOptions allocator;
    const int64_t shape[] = {int64_t(n)};
    Value buffer = Value::CreateTensor<float>(allocator, shape, 1);
    ThrowOnError(GetTrainingApi().CopyParametersToBuffer(p_, buffer, only_trainable));
    return buffer;
  }
  /// Loads the parameters from a buffer of ToBuffer's layout (all of them, or the trainable ones by its size).
  void FromBuffer(Value& buffer) {
    size_t all = 0;
    ThrowOnError(GetTrainingApi().GetParametersSize(p_, &all, false));
    const bool only_trainable = buffer.GetTensorTypeAndShapeInfo().GetElementCount() != all;
    ThrowOnError(GetTrainingApi().CopyBufferToParameters(p_, buffer, only_trainable));
  }
  void ExportModelForInferencing(const std::string& path, const std::vector<std::string>& graph_output_names) {
    std::vector<const char*> names;
    for (const auto& n : graph_output_names) names.push_back(n.c_str());
    ThrowOnError(GetTrainingApi().ExportModelForInferencing(p_, path.c_str(), names.size(), names.data()));
  }

 private:
  std::vector<Value> step(bool training, const std::vector<Value>& inputs) {
    size_t n = 0;
    ThrowOnError(training ? GetTrainingApi().TrainingSessionGetTrainingModelOutputCount(p_, &n)
                          : GetTrainingApi().TrainingSessionGetEvalModelOutputCount(p_, &n));
    std::vector<const OrtValue*> in;
    for (const auto& v : inputs) in.push_back(v);
    std::vector<OrtValue*> out(n, nullptr);
    ThrowOnError(training ? GetTrainingApi().TrainStep(p_, nullptr, in.size(), in.data(), n, out.data())
                          : GetTrainingApi().EvalStep(p_, nullptr, in.size(), in.data(), n, out.data()));
    std::vector<Value> r;
    for (OrtValue* p : out) r.emplace_back(p);
    return r;
  }
  template <class Count, class Name>
  std::vector<std::string> names(Count count, Name name) const {
    size_t n = 0;
    ThrowOnError(count(p_, &n));
    AllocatorWithDefaultOptions allocator;
    std::vector<std::string> r;
    for (size_t i = 0; i < n; ++i) {
      char* s = nullptr;
      ThrowOnError(name(p_, i, allocator, &s));
      r.emplace_back(s);
      allocator.Free(s);
    }
    return r;
  }
};

/// The seed of random operators in sessions created afterwards.
inline void SetSeed(int64_t seed) { ThrowOnError(GetTrainingApi().SetSeed(seed)); }

}  // namespace Ort
