/* Trains on-device training artifacts from C, with onnxruntime's training C API as onnxtrain
 * provides it (include/onnxtrain/training_c_api.h); no Python involved.
 *
 *   train_artifacts ARTIFACTS_DIR [STEPS]
 *
 * ARTIFACTS_DIR holds training_model.onnx, eval_model.onnx, optimizer_model.onnx and checkpoint
 * (onnxtrain artifacts / generate_artifacts) of a classifier with inputs "input" float [N, 4] and
 * "labels" int64 [N]. The batch is fixed: input[i][j] = sin(4 i + j + 1), labels[i] = i mod 3, for
 * 8 rows. Each step prints its loss; then the eval loss; the trained state goes to
 * ARTIFACTS_DIR/c_checkpoint. Exit status 0, or 1 with the error on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnxtrain/training_c_api.h"

static const OrtApi* ort;
static const OrtTrainingApi* api;

/* Prints the status's message and exits when it is an error. */
static void check(OrtStatus* status, const char* what) {
  if (status == NULL) return;
  fprintf(stderr, "%s failed: %s\n", what, ort->GetErrorMessage(status));
  ort->ReleaseStatus(status);
  exit(1);
}

static char* path_in(const char* dir, const char* name) {
  char* p = malloc(strlen(dir) + strlen(name) + 2);
  sprintf(p, "%s/%s", dir, name);
  return p;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s ARTIFACTS_DIR [STEPS]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 2 ? atoi(argv[2]) : 10;
  ort = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  api = ort->GetTrainingApi(ORT_API_VERSION);

  OrtEnv* env = NULL;
  check(ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "train_artifacts", &env), "CreateEnv");
  OrtSessionOptions* options = NULL;
  check(ort->CreateSessionOptions(&options), "CreateSessionOptions");
  char* checkpoint_path = path_in(argv[1], "checkpoint");
  char* train_path = path_in(argv[1], "training_model.onnx");
  char* eval_path = path_in(argv[1], "eval_model.onnx");
  char* optim_path = path_in(argv[1], "optimizer_model.onnx");
  OrtCheckpointState* state = NULL;
  check(api->LoadCheckpoint(checkpoint_path, &state), "LoadCheckpoint");
  OrtTrainingSession* session = NULL;
  check(api->CreateTrainingSession(env, options, state, train_path, eval_path, optim_path, &session),
        "CreateTrainingSession");

  float x[8 * 4];
  int64_t labels[8];
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) x[i * 4 + j] = (float)sin(4.0 * i + j + 1.0);
    labels[i] = i % 3;
  }
  OrtMemoryInfo* cpu = NULL;
  check(ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu), "CreateCpuMemoryInfo");
  const int64_t x_shape[] = {8, 4}, label_shape[] = {8};
  OrtValue* inputs[2] = {NULL, NULL};
  check(ort->CreateTensorWithDataAsOrtValue(cpu, x, sizeof x, x_shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
                                            &inputs[0]), "CreateTensorWithDataAsOrtValue");
  check(ort->CreateTensorWithDataAsOrtValue(cpu, labels, sizeof labels, label_shape, 1,
                                            ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &inputs[1]),
        "CreateTensorWithDataAsOrtValue");

  for (int step = 0; step < steps; ++step) {
    OrtValue* loss = NULL;
    check(api->TrainStep(session, NULL, 2, (const OrtValue* const*)inputs, 1, &loss), "TrainStep");
    float* value = NULL;
    check(ort->GetTensorMutableData(loss, (void**)&value), "GetTensorMutableData");
    printf("step %d loss %.9g\n", step + 1, *value);
    ort->ReleaseValue(loss);
    check(api->OptimizerStep(session, NULL), "OptimizerStep");
    check(api->LazyResetGrad(session), "LazyResetGrad");
  }
  OrtValue* eval_loss = NULL;
  check(api->EvalStep(session, NULL, 2, (const OrtValue* const*)inputs, 1, &eval_loss), "EvalStep");
  float* value = NULL;
  check(ort->GetTensorMutableData(eval_loss, (void**)&value), "GetTensorMutableData");
  printf("eval loss %.9g\n", *value);
  ort->ReleaseValue(eval_loss);

  char* out_path = path_in(argv[1], "c_checkpoint");
  check(api->SaveCheckpoint(state, out_path, true), "SaveCheckpoint");
  ort->ReleaseValue(inputs[0]);
  ort->ReleaseValue(inputs[1]);
  ort->ReleaseMemoryInfo(cpu);
  api->ReleaseTrainingSession(session);
  api->ReleaseCheckpointState(state);
  ort->ReleaseSessionOptions(options);
  ort->ReleaseEnv(env);
  free(checkpoint_path);
  free(train_path);
  free(eval_path);
  free(optim_path);
  free(out_path);
  return 0;
}
