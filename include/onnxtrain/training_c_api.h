/* onnxruntime's on-device training C API (OrtTrainingApi, onnxruntime 1.19) over onnxtrain, with the
 * part of OrtApi it needs: statuses, environments, session and run options, CPU tensors made from
 * the caller's buffers (no copy), their type, shape and data, and the default allocator.
 *
 * Reached as in onnxruntime:
 *     const OrtApi* ort = OrtGetApiBase()->GetApi(ORT_API_VERSION);
 *     const OrtTrainingApi* train = ort->GetTrainingApi(ORT_API_VERSION);
 * Every function that can fail returns an OrtStatus* (NULL on success; release it with
 * ReleaseStatus), never throws, and checks its pointer arguments (a NULL where a value is needed is
 * ORT_INVALID_ARGUMENT naming it). Source-compatible with onnxruntime's headers for the functions
 * below (the tables hold only these, so code is recompiled, not relinked). Paths are char (UTF-8).
 * Function semantics: docs/on-device.md and onnxruntime's documentation of the same names. */
#ifndef ONNXTRAIN_TRAINING_C_API_H
#define ONNXTRAIN_TRAINING_C_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The onnxruntime API version whose functions this header mirrors. */
#define ORT_API_VERSION 19

#if defined(__GNUC__)
#define ONNXTRAIN_C_EXPORT __attribute__((visibility("default")))
#else
#define ONNXTRAIN_C_EXPORT
#endif

typedef char ORTCHAR_T;

typedef enum OrtErrorCode {
  ORT_OK = 0,
  ORT_FAIL = 1,
  ORT_INVALID_ARGUMENT = 2,
  ORT_NO_SUCHFILE = 3,
  ORT_NO_MODEL = 4,
  ORT_ENGINE_ERROR = 5,
  ORT_RUNTIME_EXCEPTION = 6,
  ORT_INVALID_PROTOBUF = 7,
  ORT_MODEL_LOADED = 8,
  ORT_NOT_IMPLEMENTED = 9,
  ORT_INVALID_GRAPH = 10,
  ORT_EP_FAIL = 11
} OrtErrorCode;

/** Element types, numbered as ONNX's TensorProto. */
typedef enum ONNXTensorElementDataType {
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 = 2,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 = 3,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16 = 4,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 = 5,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL = 9,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 = 12,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 = 13,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64 = 14,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128 = 15,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 = 16
} ONNXTensorElementDataType;

typedef enum OrtLoggingLevel {
  ORT_LOGGING_LEVEL_VERBOSE,
  ORT_LOGGING_LEVEL_INFO,
  ORT_LOGGING_LEVEL_WARNING,
  ORT_LOGGING_LEVEL_ERROR,
  ORT_LOGGING_LEVEL_FATAL
} OrtLoggingLevel;

typedef enum OrtAllocatorType { OrtInvalidAllocator = -1, OrtDeviceAllocator = 0, OrtArenaAllocator = 1 } OrtAllocatorType;
typedef enum OrtMemType { OrtMemTypeCPUInput = -2, OrtMemTypeCPUOutput = -1, OrtMemTypeDefault = 0 } OrtMemType;

/** Types of checkpoint properties (AddProperty, GetProperty). */
typedef enum OrtPropertyType { OrtIntProperty = 0, OrtFloatProperty = 1, OrtStringProperty = 2 } OrtPropertyType;

typedef struct OrtStatus OrtStatus;
typedef struct OrtEnv OrtEnv;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtValue OrtValue;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtCheckpointState OrtCheckpointState;
typedef struct OrtTrainingSession OrtTrainingSession;

/** An allocator (the default one: GetAllocatorWithDefaultOptions). Names and property values the
 *  API hands out are allocated with the allocator given, and freed with AllocatorFree. */
typedef struct OrtAllocator {
  uint32_t version;
  void* (*Alloc)(struct OrtAllocator* self, size_t size);
  void (*Free)(struct OrtAllocator* self, void* p);
  const struct OrtMemoryInfo* (*Info)(const struct OrtAllocator* self);
} OrtAllocator;

typedef struct OrtTrainingApi OrtTrainingApi;

/** The part of onnxruntime's OrtApi the training API needs. */
typedef struct OrtApi {
  OrtStatus* (*CreateStatus)(OrtErrorCode code, const char* msg);
  OrtErrorCode (*GetErrorCode)(const OrtStatus* status);
  const char* (*GetErrorMessage)(const OrtStatus* status);
  OrtStatus* (*CreateEnv)(OrtLoggingLevel log_severity_level, const char* logid, OrtEnv** out);
  OrtStatus* (*CreateSessionOptions)(OrtSessionOptions** options);
  OrtStatus* (*SetIntraOpNumThreads)(OrtSessionOptions* options, int intra_op_num_threads);
  OrtStatus* (*CreateRunOptions)(OrtRunOptions** out);
  OrtStatus* (*CreateCpuMemoryInfo)(OrtAllocatorType type, OrtMemType mem_type, OrtMemoryInfo** out);
  /** A tensor over the caller's buffer (`p_data`, `p_data_len` bytes, kept by the caller while the
   *  value lives): its bytes must match the shape and type. */
  OrtStatus* (*CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo* info, void* p_data, size_t p_data_len,
                                               const int64_t* shape, size_t shape_len,
                                               ONNXTensorElementDataType type, OrtValue** out);
  /** A zero-filled tensor the value owns. */
  OrtStatus* (*CreateTensorAsOrtValue)(OrtAllocator* allocator, const int64_t* shape, size_t shape_len,
                                       ONNXTensorElementDataType type, OrtValue** out);
  OrtStatus* (*IsTensor)(const OrtValue* value, int* out);
  OrtStatus* (*GetTensorMutableData)(OrtValue* value, void** out);
  OrtStatus* (*GetTensorTypeAndShape)(const OrtValue* value, OrtTensorTypeAndShapeInfo** out);
  OrtStatus* (*GetTensorElementType)(const OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType* out);
  OrtStatus* (*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
  OrtStatus* (*GetDimensions)(const OrtTensorTypeAndShapeInfo* info, int64_t* dim_values, size_t dim_values_length);
  OrtStatus* (*GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
  OrtStatus* (*GetAllocatorWithDefaultOptions)(OrtAllocator** out);
  OrtStatus* (*AllocatorFree)(OrtAllocator* allocator, void* p);
  void (*ReleaseStatus)(OrtStatus* input);
  void (*ReleaseEnv)(OrtEnv* input);
  void (*ReleaseSessionOptions)(OrtSessionOptions* input);
  void (*ReleaseRunOptions)(OrtRunOptions* input);
  void (*ReleaseMemoryInfo)(OrtMemoryInfo* input);
  void (*ReleaseValue)(OrtValue* input);
  void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo* input);
  /** The training API of `version` (<= ORT_API_VERSION), or NULL. */
  const OrtTrainingApi* (*GetTrainingApi)(uint32_t version);
} OrtApi;

/** onnxruntime's OrtTrainingApi: checkpoints, and a training session over a checkpoint's state
 *  (which must outlive it) with the training, eval and optimizer models of generate_artifacts. */
struct OrtTrainingApi {
  OrtStatus* (*LoadCheckpoint)(const ORTCHAR_T* checkpoint_path, OrtCheckpointState** checkpoint_state);
  OrtStatus* (*SaveCheckpoint)(OrtCheckpointState* checkpoint_state, const ORTCHAR_T* checkpoint_path,
                               const bool include_optimizer_state);
  /** eval_model_path and optimizer_model_path may be NULL. */
  OrtStatus* (*CreateTrainingSession)(const OrtEnv* env, const OrtSessionOptions* options,
                                      OrtCheckpointState* checkpoint_state, const ORTCHAR_T* train_model_path,
                                      const ORTCHAR_T* eval_model_path, const ORTCHAR_T* optimizer_model_path,
                                      OrtTrainingSession** out);
  /** eval and optimizer data may be NULL (length 0). */
  OrtStatus* (*CreateTrainingSessionFromBuffer)(const OrtEnv* env, const OrtSessionOptions* options,
                                                OrtCheckpointState* checkpoint_state, const void* train_model_data,
                                                size_t train_data_length, const void* eval_model_data,
                                                size_t eval_data_length, const void* optim_model_data,
                                                size_t optim_data_length, OrtTrainingSession** out);
  OrtStatus* (*TrainingSessionGetTrainingModelOutputCount)(const OrtTrainingSession* sess, size_t* out);
  OrtStatus* (*TrainingSessionGetEvalModelOutputCount)(const OrtTrainingSession* sess, size_t* out);
  OrtStatus* (*TrainingSessionGetTrainingModelOutputName)(const OrtTrainingSession* sess, size_t index,
                                                          OrtAllocator* allocator, char** output);
  OrtStatus* (*TrainingSessionGetEvalModelOutputName)(const OrtTrainingSession* sess, size_t index,
                                                      OrtAllocator* allocator, char** output);
  OrtStatus* (*LazyResetGrad)(OrtTrainingSession* session);
  /** outputs[i] NULL: a new value (release it with ReleaseValue); otherwise a tensor of the output's
   *  type and shape, filled in place. */
  OrtStatus* (*TrainStep)(OrtTrainingSession* sess, const OrtRunOptions* run_options, size_t inputs_len,
                          const OrtValue* const* inputs, size_t outputs_len, OrtValue** outputs);
  OrtStatus* (*EvalStep)(const OrtTrainingSession* sess, const OrtRunOptions* run_options, size_t inputs_len,
                         const OrtValue* const* inputs, size_t outputs_len, OrtValue** outputs);
  OrtStatus* (*SetLearningRate)(OrtTrainingSession* sess, float learning_rate);
  OrtStatus* (*GetLearningRate)(OrtTrainingSession* sess, float* learning_rate);
  OrtStatus* (*OptimizerStep)(OrtTrainingSession* sess, const OrtRunOptions* run_options);
  OrtStatus* (*RegisterLinearLRScheduler)(OrtTrainingSession* sess, const int64_t warmup_step_count,
                                          const int64_t total_step_count, const float initial_lr);
  OrtStatus* (*SchedulerStep)(OrtTrainingSession* sess);
  OrtStatus* (*GetParametersSize)(OrtTrainingSession* sess, size_t* out, bool trainable_only);
  /** parameters_buffer: a float tensor of GetParametersSize elements. */
  OrtStatus* (*CopyParametersToBuffer)(OrtTrainingSession* sess, OrtValue* parameters_buffer, bool trainable_only);
  OrtStatus* (*CopyBufferToParameters)(OrtTrainingSession* sess, OrtValue* parameters_buffer, bool trainable_only);
  void (*ReleaseTrainingSession)(OrtTrainingSession* input);
  void (*ReleaseCheckpointState)(OrtCheckpointState* input);
  OrtStatus* (*ExportModelForInferencing)(OrtTrainingSession* sess, const ORTCHAR_T* inference_model_path,
                                          size_t graph_outputs_len, const char* const* graph_output_names);
  /** The seed of random operators (Dropout) in sessions created afterwards. */
  OrtStatus* (*SetSeed)(const int64_t seed);
  OrtStatus* (*TrainingSessionGetTrainingModelInputCount)(const OrtTrainingSession* sess, size_t* out);
  OrtStatus* (*TrainingSessionGetEvalModelInputCount)(const OrtTrainingSession* sess, size_t* out);
  OrtStatus* (*TrainingSessionGetTrainingModelInputName)(const OrtTrainingSession* sess, size_t index,
                                                         OrtAllocator* allocator, char** output);
  OrtStatus* (*TrainingSessionGetEvalModelInputName)(const OrtTrainingSession* sess, size_t index,
                                                     OrtAllocator* allocator, char** output);
  /** value: int64_t* (OrtIntProperty), float* (OrtFloatProperty) or const char* (OrtStringProperty). */
  OrtStatus* (*AddProperty)(OrtCheckpointState* checkpoint_state, const char* property_name,
                            enum OrtPropertyType property_type, void* property_value);
  /** *property_value is allocated with `allocator` (int64_t, float or a NUL-terminated string). */
  OrtStatus* (*GetProperty)(const OrtCheckpointState* checkpoint_state, const char* property_name,
                            OrtAllocator* allocator, enum OrtPropertyType* property_type, void** property_value);
  OrtStatus* (*LoadCheckpointFromBuffer)(const void* checkpoint_buffer, const size_t num_bytes,
                                         OrtCheckpointState** checkpoint_state);
  OrtStatus* (*GetParameterTypeAndShape)(const OrtCheckpointState* checkpoint_state, const char* parameter_name,
                                         OrtTensorTypeAndShapeInfo** parameter_type_and_shape);
  /** Copies `parameter` (the parameter's type and shape) into the state. */
  OrtStatus* (*UpdateParameter)(OrtCheckpointState* checkpoint_state, const char* parameter_name,
                                OrtValue* parameter);
  /** A copy of the parameter's value, a new value. */
  OrtStatus* (*GetParameter)(const OrtCheckpointState* checkpoint_state, const char* parameter_name,
                             OrtAllocator* allocator, OrtValue** parameter);
};

typedef struct OrtApiBase {
  /** The API of `version` (<= ORT_API_VERSION), or NULL. */
  const OrtApi* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)(void);
} OrtApiBase;

/** The entry point (onnxruntime's name). */
ONNXTRAIN_C_EXPORT const OrtApiBase* OrtGetApiBase(void);

#ifdef __cplusplus
}
#endif

#endif /* ONNXTRAIN_TRAINING_C_API_H */
