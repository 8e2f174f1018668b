// The training C API (include/onnxtrain/training_c_api.h): a training step against naive
// arithmetic on a linear model's artifacts, properties and parameters of a checkpoint, and every
// function's error path (NULL arguments, wrong names, wrong sizes) returning a status, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "ir/onnx_io.h"
#include "onnxtrain/artifacts.h"
#include "onnxtrain/training_c_api.h"
#include "onnxtrain/training_cxx_api.h"
#include "test_util.h"

using namespace onnxtrain;
using ot_test::make_node;

namespace {

const OrtApi* ort() { return OrtGetApiBase()->GetApi(ORT_API_VERSION); }
const OrtTrainingApi* api() { return ort()->GetTrainingApi(ORT_API_VERSION); }

// The code of `s` (ORT_OK for NULL), releasing it; `message` receives its text.
OrtErrorCode code_of(OrtStatus* s, std::string* message = nullptr) {
  if (!s) return ORT_OK;
  const OrtErrorCode c = ort()->GetErrorCode(s);
  if (message) *message = ort()->GetErrorMessage(s);
  ort()->ReleaseStatus(s);
  return c;
}

#define EXPECT_OK(call) EXPECT_EQ(code_of(call), ORT_OK)
#define EXPECT_REFUSED(call, code, text)                                              \
  do {                                                                                 \
    std::string message_;                                                              \
    EXPECT_EQ(code_of((call), &message_), code);                                       \
    EXPECT_NE(message_.find(text), std::string::npos) << "message: " << message_;      \
  } while (0)

// y = X W + b, MSE against "target"; W [2, 1] = (0.5, -0.25), b = 0.1; AdamW artifacts in `dir`.
std::string write_artifacts() {
  ArtifactOptions o;
  o.requires_grad = {"W", "b"};
  o.loss = "MSELoss";
  o.optimizer = "SGD";
  const std::string dir = (std::filesystem::temp_directory_path() / ("onnxtrain_capi_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  save_artifacts(make_artifacts(ot_test::linear_model_bytes(false), o), dir);
  return dir;
}

struct Fixture {
  std::string dir = write_artifacts();
  OrtEnv* env = nullptr;
  OrtCheckpointState* state = nullptr;
  OrtTrainingSession* session = nullptr;
  OrtMemoryInfo* cpu = nullptr;
  Fixture() {
    EXPECT_OK(ort()->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "test", &env));
    EXPECT_OK(ort()->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu));
    EXPECT_OK(api()->LoadCheckpoint((dir + "/checkpoint").c_str(), &state));
    EXPECT_OK(api()->CreateTrainingSession(env, nullptr, state, (dir + "/training_model.onnx").c_str(),
                                           (dir + "/eval_model.onnx").c_str(), (dir + "/optimizer_model.onnx").c_str(),
                                           &session));
  }
  ~Fixture() {
    api()->ReleaseTrainingSession(session);
    api()->ReleaseCheckpointState(state);
    ort()->ReleaseMemoryInfo(cpu);
    ort()->ReleaseEnv(env);
    std::filesystem::remove_all(dir);
  }
  OrtValue* tensor(float* data, size_t n, std::vector<int64_t> shape) {
    OrtValue* v = nullptr;
    EXPECT_OK(ort()->CreateTensorWithDataAsOrtValue(cpu, data, n * sizeof(float), shape.data(), shape.size(),
                                                    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &v));
    return v;
  }
};

}  // namespace

TEST(TrainingCApi, TrainStepAndSgdMatchNaiveArithmetic) {
  Fixture f;
  float x[6] = {1, 2, -1, 0.5f, 3, -2}, t[3] = {0.3f, -0.7f, 1.1f};
  OrtValue* inputs[2] = {f.tensor(x, 6, {3, 2}), f.tensor(t, 3, {3, 1})};
  OrtValue* loss = nullptr;
  EXPECT_OK(api()->SetLearningRate(f.session, 0.1f));
  EXPECT_OK(api()->TrainStep(f.session, nullptr, 2, inputs, 1, &loss));
  double expected = 0, gw[2] = {0, 0}, gb = 0;
  for (int i = 0; i < 3; ++i) {
    const double d = x[2 * i] * 0.5 - x[2 * i + 1] * 0.25 + 0.1 - t[i];
    expected += d * d / 3;
    for (int k = 0; k < 2; ++k) gw[k] += 2 * d * x[2 * i + k] / 3;
    gb += 2 * d / 3;
  }
  float* value = nullptr;
  EXPECT_OK(ort()->GetTensorMutableData(loss, reinterpret_cast<void**>(&value)));
  EXPECT_NEAR(*value, expected, 1e-6 * expected);
  EXPECT_OK(api()->OptimizerStep(f.session, nullptr));
  size_t n = 0;
  EXPECT_OK(api()->GetParametersSize(f.session, &n, true));
  ASSERT_EQ(n, 3u);
  float params[3];
  OrtValue* buffer = f.tensor(params, 3, {3});
  EXPECT_OK(api()->CopyParametersToBuffer(f.session, buffer, true));  // the training model's order: W, b
  EXPECT_NEAR(params[0], 0.5 - 0.1 * gw[0], 1e-6);
  EXPECT_NEAR(params[1], -0.25 - 0.1 * gw[1], 1e-6);
  EXPECT_NEAR(params[2], 0.1 - 0.1 * gb, 1e-6);
  // Names and counts of the user inputs and outputs.
  OrtAllocator* alloc = nullptr;
  EXPECT_OK(ort()->GetAllocatorWithDefaultOptions(&alloc));
  size_t count = 0;
  EXPECT_OK(api()->TrainingSessionGetTrainingModelInputCount(f.session, &count));
  EXPECT_EQ(count, 2u);
  char* name = nullptr;
  EXPECT_OK(api()->TrainingSessionGetTrainingModelInputName(f.session, 1, alloc, &name));
  EXPECT_STREQ(name, "target");
  EXPECT_OK(ort()->AllocatorFree(alloc, name));
  EXPECT_OK(api()->TrainingSessionGetEvalModelOutputName(f.session, 0, alloc, &name));
  EXPECT_STREQ(name, "loss");
  EXPECT_OK(ort()->AllocatorFree(alloc, name));
  for (OrtValue* v : {inputs[0], inputs[1], loss, buffer}) ort()->ReleaseValue(v);
}

TEST(TrainingCApi, PropertiesAndParametersOfACheckpoint) {
  Fixture f;
  int64_t epoch = 7;
  float rate = 0.25f;
  EXPECT_OK(api()->AddProperty(f.state, "epoch", OrtIntProperty, &epoch));
  EXPECT_OK(api()->AddProperty(f.state, "rate", OrtFloatProperty, &rate));
  EXPECT_OK(api()->AddProperty(f.state, "note", OrtStringProperty, const_cast<char*>("hello")));
  const std::string saved = f.dir + "/saved";
  EXPECT_OK(api()->SaveCheckpoint(f.state, saved.c_str(), false));
  OrtCheckpointState* back = nullptr;
  EXPECT_OK(api()->LoadCheckpoint(saved.c_str(), &back));
  OrtAllocator* alloc = nullptr;
  EXPECT_OK(ort()->GetAllocatorWithDefaultOptions(&alloc));
  OrtPropertyType type;
  void* value = nullptr;
  EXPECT_OK(api()->GetProperty(back, "epoch", alloc, &type, &value));
  EXPECT_EQ(type, OrtIntProperty);
  EXPECT_EQ(*static_cast<int64_t*>(value), 7);
  EXPECT_OK(ort()->AllocatorFree(alloc, value));
  EXPECT_OK(api()->GetProperty(back, "rate", alloc, &type, &value));
  EXPECT_EQ(type, OrtFloatProperty);
  EXPECT_EQ(*static_cast<float*>(value), 0.25f);
  EXPECT_OK(ort()->AllocatorFree(alloc, value));
  EXPECT_OK(api()->GetProperty(back, "note", alloc, &type, &value));
  EXPECT_EQ(type, OrtStringProperty);
  EXPECT_STREQ(static_cast<char*>(value), "hello");
  EXPECT_OK(ort()->AllocatorFree(alloc, value));
  OrtTensorTypeAndShapeInfo* info = nullptr;
  EXPECT_OK(api()->GetParameterTypeAndShape(back, "W", &info));
  ONNXTensorElementDataType et;
  size_t rank = 0;
  int64_t dims[2];
  EXPECT_OK(ort()->GetTensorElementType(info, &et));
  EXPECT_OK(ort()->GetDimensionsCount(info, &rank));
  EXPECT_OK(ort()->GetDimensions(info, dims, 2));
  EXPECT_EQ(et, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT);
  EXPECT_EQ(rank, 2u);
  EXPECT_EQ(dims[0], 2);
  EXPECT_EQ(dims[1], 1);
  ort()->ReleaseTensorTypeAndShapeInfo(info);
  float w[2] = {3, 4};
  OrtValue* v = f.tensor(w, 2, {2, 1});
  EXPECT_OK(api()->UpdateParameter(back, "W", v));
  OrtValue* got = nullptr;
  EXPECT_OK(api()->GetParameter(back, "W", alloc, &got));
  float* data = nullptr;
  EXPECT_OK(ort()->GetTensorMutableData(got, reinterpret_cast<void**>(&data)));
  EXPECT_EQ(data[0], 3.f);
  EXPECT_EQ(data[1], 4.f);
  ort()->ReleaseValue(v);
  ort()->ReleaseValue(got);
  api()->ReleaseCheckpointState(back);
}

TEST(TrainingCApi, EveryFunctionRefusesBadArgumentsWithAStatus) {
  Fixture f;
  OrtAllocator* alloc = nullptr;
  EXPECT_OK(ort()->GetAllocatorWithDefaultOptions(&alloc));
  float x[2] = {1, 2};
  OrtValue* small = f.tensor(x, 2, {1, 2});
  OrtValue* out = nullptr;
  OrtCheckpointState* st = nullptr;
  OrtTrainingSession* s = nullptr;
  char* name = nullptr;
  size_t n = 0;
  float lr = 0;
  const auto IA = ORT_INVALID_ARGUMENT;
  EXPECT_REFUSED(api()->LoadCheckpoint(nullptr, &st), IA, "checkpoint_path is NULL");
  EXPECT_REFUSED(api()->LoadCheckpoint((f.dir + "/checkpoint").c_str(), nullptr), IA, "checkpoint_state is NULL");
  EXPECT_NE(code_of(api()->LoadCheckpoint((f.dir + "/nope").c_str(), &st)), ORT_OK);
  EXPECT_REFUSED(api()->LoadCheckpointFromBuffer("garbage", 7, &st), IA, "");
  EXPECT_REFUSED(api()->SaveCheckpoint(nullptr, "x", false), IA, "checkpoint_state is NULL");
  EXPECT_REFUSED(api()->CreateTrainingSession(f.env, nullptr, nullptr, "a", nullptr, nullptr, &s), IA,
                 "the checkpoint state is NULL");
  EXPECT_REFUSED(api()->CreateTrainingSession(f.env, nullptr, f.state, nullptr, nullptr, nullptr, &s), IA,
                 "train_model_path is NULL");
  EXPECT_NE(code_of(api()->CreateTrainingSession(f.env, nullptr, f.state, (f.dir + "/none.onnx").c_str(), nullptr,
                                                 nullptr, &s)), ORT_OK);
  EXPECT_REFUSED(api()->CreateTrainingSessionFromBuffer(f.env, nullptr, f.state, nullptr, 3, nullptr, 0, nullptr, 0, &s),
                 IA, "train_model_data is NULL");
  EXPECT_REFUSED(api()->TrainStep(nullptr, nullptr, 0, nullptr, 0, nullptr), IA, "the training session is NULL");
  EXPECT_REFUSED(api()->TrainStep(f.session, nullptr, 1, &small, 1, &out), IA, "takes 2 user inputs, 1 were given");
  EXPECT_REFUSED(api()->TrainStep(f.session, nullptr, 2, nullptr, 1, &out), IA, "inputs is NULL");
  OrtValue* pair[2] = {small, nullptr};
  EXPECT_REFUSED(api()->TrainStep(f.session, nullptr, 2, pair, 1, &out), IA, "input 1 is NULL");
  OrtValue* two[2] = {small, small};
  EXPECT_REFUSED(api()->TrainStep(f.session, nullptr, 2, two, 3, &out), IA, "outputs_len is 3");
  EXPECT_NE(code_of(api()->TrainStep(f.session, nullptr, 2, two, 1, &out)), ORT_OK);  // target of the wrong shape
  EXPECT_REFUSED(api()->EvalStep(f.session, nullptr, 2, two, 0, &out), IA, "outputs_len is 0");
  EXPECT_REFUSED(api()->GetLearningRate(f.session, nullptr), IA, "learning_rate is NULL");
  EXPECT_REFUSED(api()->SchedulerStep(f.session), IA, "no learning rate scheduler");
  EXPECT_REFUSED(api()->GetParametersSize(f.session, nullptr, true), IA, "out is NULL");
  EXPECT_REFUSED(api()->CopyParametersToBuffer(f.session, small, true), IA, "the parameters need float[3]");
  EXPECT_REFUSED(api()->CopyBufferToParameters(f.session, nullptr, true), IA, "parameters_buffer is NULL");
  EXPECT_REFUSED(api()->TrainingSessionGetTrainingModelOutputName(f.session, 5, alloc, &name), IA,
                 "index 5 is out of range");
  EXPECT_REFUSED(api()->TrainingSessionGetEvalModelInputName(f.session, 0, nullptr, &name), IA, "the allocator is NULL");
  EXPECT_REFUSED(api()->TrainingSessionGetTrainingModelOutputCount(f.session, nullptr), IA, "out is NULL");
  EXPECT_REFUSED(api()->ExportModelForInferencing(f.session, nullptr, 0, nullptr), IA, "inference_model_path is NULL");
  EXPECT_REFUSED(api()->ExportModelForInferencing(f.session, "x.onnx", 1, nullptr), IA, "graph_output_names is NULL");
  // 3: within the enumeration's range (a C caller may pass any int), not a property type.
  EXPECT_REFUSED(api()->AddProperty(f.state, "p", OrtPropertyType(3), &n), IA, "property type 3");
  EXPECT_REFUSED(api()->AddProperty(f.state, nullptr, OrtIntProperty, &n), IA, "property_name is NULL");
  OrtPropertyType type;
  void* value = nullptr;
  EXPECT_REFUSED(api()->GetProperty(f.state, "absent", alloc, &type, &value), IA, "no property 'absent'");
  EXPECT_REFUSED(api()->GetParameterTypeAndShape(f.state, "absent", nullptr), IA, "parameter_type_and_shape is NULL");
  OrtTensorTypeAndShapeInfo* info = nullptr;
  EXPECT_REFUSED(api()->GetParameterTypeAndShape(f.state, "absent", &info), IA, "no parameter 'absent'");
  EXPECT_REFUSED(api()->UpdateParameter(f.state, "W", small), IA, "cannot assign float[1, 2]");
  EXPECT_REFUSED(api()->GetParameter(f.state, "absent", alloc, &out), IA, "no parameter 'absent'");
  // The value API.
  int64_t shape[] = {2, 2};
  EXPECT_REFUSED(ort()->CreateTensorWithDataAsOrtValue(f.cpu, x, sizeof x, shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
                                                       &out), IA, "holds 8 bytes");
  EXPECT_REFUSED(ort()->CreateTensorWithDataAsOrtValue(f.cpu, x, sizeof x, shape, 1,
                                                       ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, &out), IA, "element type 8");
  int64_t negative[] = {-1};
  EXPECT_REFUSED(ort()->CreateTensorAsOrtValue(alloc, negative, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &out), IA,
                 "negative");
  EXPECT_REFUSED(ort()->GetTensorMutableData(nullptr, &value), IA, "the value is NULL");
  EXPECT_REFUSED(ort()->GetDimensions(nullptr, shape, 2), IA, "the type info is NULL");
  EXPECT_REFUSED(ort()->SetIntraOpNumThreads(nullptr, 1), IA, "the session options is NULL");
  EXPECT_EQ(ort()->GetTrainingApi(ORT_API_VERSION + 1), nullptr);
  EXPECT_EQ(OrtGetApiBase()->GetApi(0), nullptr);
  // Every session function with a NULL session, every creator with a NULL out.
  const OrtTrainingApi* t = api();
  const char* no_session = "the training session is NULL";
  EXPECT_REFUSED(t->TrainingSessionGetTrainingModelOutputCount(nullptr, &n), IA, no_session);
  EXPECT_REFUSED(t->TrainingSessionGetEvalModelOutputCount(nullptr, &n), IA, no_session);
  EXPECT_REFUSED(t->TrainingSessionGetTrainingModelInputCount(nullptr, &n), IA, no_session);
  EXPECT_REFUSED(t->TrainingSessionGetEvalModelInputCount(nullptr, &n), IA, no_session);
  EXPECT_REFUSED(t->TrainingSessionGetTrainingModelOutputName(nullptr, 0, alloc, &name), IA, no_session);
  EXPECT_REFUSED(t->TrainingSessionGetEvalModelOutputName(nullptr, 0, alloc, &name), IA, no_session);
  EXPECT_REFUSED(t->TrainingSessionGetTrainingModelInputName(nullptr, 0, alloc, &name), IA, no_session);
  EXPECT_REFUSED(t->TrainingSessionGetEvalModelInputName(nullptr, 0, alloc, &name), IA, no_session);
  EXPECT_REFUSED(t->TrainingSessionGetTrainingModelInputName(f.session, 0, alloc, nullptr), IA, "output is NULL");
  EXPECT_REFUSED(t->LazyResetGrad(nullptr), IA, no_session);
  EXPECT_REFUSED(t->EvalStep(nullptr, nullptr, 0, nullptr, 0, nullptr), IA, no_session);
  EXPECT_REFUSED(t->SetLearningRate(nullptr, 0.1f), IA, no_session);
  EXPECT_REFUSED(t->GetLearningRate(nullptr, &lr), IA, no_session);
  EXPECT_REFUSED(t->OptimizerStep(nullptr, nullptr), IA, no_session);
  EXPECT_REFUSED(t->RegisterLinearLRScheduler(nullptr, 1, 2, 0.1f), IA, no_session);
  EXPECT_REFUSED(t->RegisterLinearLRScheduler(f.session, -1, 2, 0.1f), IA, "must not be negative");
  EXPECT_REFUSED(t->SchedulerStep(nullptr), IA, no_session);
  EXPECT_REFUSED(t->GetParametersSize(nullptr, &n, true), IA, no_session);
  EXPECT_REFUSED(t->CopyParametersToBuffer(nullptr, small, true), IA, no_session);
  EXPECT_REFUSED(t->CopyBufferToParameters(f.session, small, true), IA, "");
  EXPECT_REFUSED(t->ExportModelForInferencing(nullptr, "x.onnx", 0, nullptr), IA, no_session);
  EXPECT_REFUSED(t->ExportModelForInferencing(f.session, (f.dir + "/x.onnx").c_str(), 1,
                                              std::vector<const char*>{"nope"}.data()), IA, "nope");
  EXPECT_REFUSED(t->GetProperty(nullptr, "p", alloc, &type, &value), IA, "checkpoint_state is NULL");
  EXPECT_REFUSED(t->GetProperty(f.state, "p", alloc, nullptr, &value), IA, "property_type is NULL");
  EXPECT_REFUSED(t->UpdateParameter(f.state, nullptr, small), IA, "parameter_name is NULL");
  EXPECT_REFUSED(t->UpdateParameter(f.state, "W", nullptr), IA, "parameter is NULL");
  EXPECT_REFUSED(t->GetParameter(f.state, "W", alloc, nullptr), IA, "parameter is NULL");
  EXPECT_REFUSED(t->LoadCheckpointFromBuffer(nullptr, 4, &st), IA, "checkpoint_buffer is NULL");
  EXPECT_REFUSED(ort()->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "x", nullptr), IA, "out is NULL");
  EXPECT_REFUSED(ort()->CreateSessionOptions(nullptr), IA, "out is NULL");
  EXPECT_REFUSED(ort()->CreateRunOptions(nullptr), IA, "out is NULL");
  EXPECT_REFUSED(ort()->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, nullptr), IA, "out is NULL");
  EXPECT_REFUSED(ort()->GetAllocatorWithDefaultOptions(nullptr), IA, "out is NULL");
  EXPECT_REFUSED(ort()->AllocatorFree(nullptr, nullptr), IA, "the allocator is NULL");
  EXPECT_REFUSED(ort()->IsTensor(nullptr, nullptr), IA, "is NULL");
  EXPECT_REFUSED(ort()->GetTensorTypeAndShape(small, nullptr), IA, "out is NULL");
  EXPECT_REFUSED(ort()->GetTensorElementType(nullptr, nullptr), IA, "is NULL");
  EXPECT_REFUSED(ort()->GetDimensionsCount(nullptr, &n), IA, "the type info is NULL");
  EXPECT_REFUSED(ort()->GetTensorShapeElementCount(nullptr, &n), IA, "the type info is NULL");
  OrtTensorTypeAndShapeInfo* small_info = nullptr;
  EXPECT_OK(ort()->GetTensorTypeAndShape(small, &small_info));
  EXPECT_REFUSED(ort()->GetDimensions(small_info, shape, 1), IA, "less than the rank 2");
  ort()->ReleaseTensorTypeAndShapeInfo(small_info);
  EXPECT_REFUSED(ort()->CreateTensorWithDataAsOrtValue(f.cpu, nullptr, 8, shape, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
                                                       &out), IA, "p_data is NULL");
  EXPECT_EQ(ort()->GetErrorCode(nullptr), ORT_OK);
  OrtStatus* made = ort()->CreateStatus(ORT_FAIL, "made");
  EXPECT_REFUSED(made, ORT_FAIL, "made");
  // Releasing NULL does nothing, as in onnxruntime; a NULL status has no message.
  ort()->ReleaseStatus(nullptr);
  ort()->ReleaseEnv(nullptr);
  ort()->ReleaseSessionOptions(nullptr);
  ort()->ReleaseRunOptions(nullptr);
  ort()->ReleaseMemoryInfo(nullptr);
  ort()->ReleaseValue(nullptr);
  ort()->ReleaseTensorTypeAndShapeInfo(nullptr);
  api()->ReleaseTrainingSession(nullptr);
  api()->ReleaseCheckpointState(nullptr);
  EXPECT_STREQ(ort()->GetErrorMessage(nullptr), "");
  // The session keeps working after all of that.
  EXPECT_OK(api()->GetLearningRate(f.session, &lr));
  ort()->ReleaseValue(small);
}

// The header-only C++ wrapper in onnxruntime's Ort:: shape over the same artifacts.
TEST(TrainingCApi, CxxWrapperTrainsAndThrowsOrtExceptions) {
  Fixture f;  // for its artifacts folder
  Ort::Env env;
  Ort::SessionOptions options;
  options.SetIntraOpNumThreads(1);
  Ort::CheckpointState state = Ort::CheckpointState::LoadCheckpoint(f.dir + "/checkpoint");
  Ort::TrainingSession session(env, options, state, f.dir + "/training_model.onnx", f.dir + "/eval_model.onnx",
                               f.dir + "/optimizer_model.onnx");
  EXPECT_EQ(session.InputNames(true), (std::vector<std::string>{"X", "target"}));
  EXPECT_EQ(session.OutputNames(false), (std::vector<std::string>{"loss"}));
  Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  float x[2] = {2, 4}, t[1] = {1};
  const int64_t xs[] = {1, 2}, ts[] = {1, 1};
  std::vector<Ort::Value> inputs;
  inputs.push_back(Ort::Value::CreateTensor<float>(cpu, x, 2, xs, 2));
  inputs.push_back(Ort::Value::CreateTensor<float>(cpu, t, 1, ts, 2));
  session.SetLearningRate(0.5f);
  std::vector<Ort::Value> out = session.TrainStep(inputs);
  const double d = 2 * 0.5 - 4 * 0.25 + 0.1 - 1;  // y - t = -0.9
  EXPECT_NEAR(*out[0].GetTensorMutableData<float>(), d * d, 1e-6);
  session.OptimizerStep();
  Ort::Value buffer = session.ToBuffer(true);
  const float* p = buffer.GetTensorMutableData<float>();
  EXPECT_EQ(buffer.GetTensorTypeAndShapeInfo().GetShape(), (std::vector<int64_t>{3}));
  EXPECT_NEAR(p[0], 0.5 - 0.5 * 2 * d * 2, 1e-6);
  EXPECT_NEAR(p[1], -0.25 - 0.5 * 2 * d * 4, 1e-6);
  EXPECT_NEAR(p[2], 0.1 - 0.5 * 2 * d, 1e-6);
  state.AddProperty("name", std::string("run 1"));
  state.AddProperty("epoch", int64_t(3));
  EXPECT_EQ(std::get<std::string>(state.GetProperty("name")), "run 1");
  EXPECT_EQ(std::get<int64_t>(state.GetProperty("epoch")), 3);
  try {
    state.GetParameter("absent");
    ADD_FAILURE() << "no exception";
  } catch (const Ort::Exception& e) {
    EXPECT_EQ(e.GetOrtErrorCode(), ORT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos);
  }
  EXPECT_THROW(session.SchedulerStep(), Ort::Exception);
  session.RegisterLinearLRScheduler(0, 10, 0.5f);
  session.SchedulerStep();
  EXPECT_NEAR(session.GetLearningRate(), 0.5 * 9 / 10, 1e-7);  // from the optimizer step (1): lr * (10 - 1) / 10
}
