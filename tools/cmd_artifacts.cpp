// `onnxtrain artifacts`: onnxruntime's generate_artifacts without Python (include/onnxtrain/artifacts.h).
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "onnxtrain/artifacts.h"
#include "onnxtrain/error.h"
#include "onnxtrain/io.h"
#include "onnxtrain/training.h"

namespace cli {

using namespace onnxtrain;

namespace {

struct ArtifactArgs {
  std::string model, loss, optimizer, out = ".", prefix, loss_input;
  std::vector<std::string> requires_grad, frozen, additional_outputs;
  bool nominal = false, frozen_statistics = false;
};

const CommandInfo& artifacts_info() {
  static const CommandInfo c{
      "artifacts", "MODEL [--requires-grad NAMES] [--frozen NAMES] [--loss KIND] [--optimizer KIND] [--out DIR]",
      "write on-device training artifacts (onnxruntime's generate_artifacts, no Python needed)",
      "Writes <prefix>training_model.onnx, eval_model.onnx, optimizer_model.onnx (with --optimizer) and\n"
      "checkpoint into --out, in the layout onnxruntime's on-device training API (and onnxtrain's) runs:\n"
      "gradients accumulated into <weight>_grad.accumulation.buffer inputs, an AdamWOptimizer or\n"
      "SGDOptimizerV2 model, the parameters in onnxruntime's checkpoint format. The gradients are onnxtrain's:\n"
      "operators onnxruntime cannot differentiate get artifacts too (a warning names any onnxtrain operator\n"
      "they then need). BatchNormalization running statistics listed in --frozen are updated by training steps\n"
      "(--frozen-batchnorm-statistics: never, as in onnxruntime).",
      "examples:\n"
      "  onnxtrain artifacts mlp.onnx --loss CrossEntropyLoss --optimizer AdamW --out artifacts/\n"
      "  onnxtrain artifacts cnn.onnx --requires-grad conv.weight,conv.bias,fc.weight,fc.bias \\\n"
      "      --frozen bn.running_mean,bn.running_var --loss CrossEntropyLoss --optimizer AdamW --out art/"};
  return c;
}

int run_artifacts(const ArtifactArgs& a, const CLI::App& app) {
  const std::string bytes = read_file(a.model, "model file");
  ArtifactOptions o;
  o.frozen_params = a.frozen;
  if (given(app, "--requires-grad")) {
    o.requires_grad = a.requires_grad;
  } else {
    for (const auto& w : get_train_initializer(bytes))
      if (std::find(a.frozen.begin(), a.frozen.end(), w) == a.frozen.end()) o.requires_grad.push_back(w);
    if (o.requires_grad.empty())
      throw_error<InvalidArgument>("the model has no trainable weight besides --frozen: name them with --requires-grad");
  }
  o.loss = a.loss;
  o.optimizer = a.optimizer;
  o.additional_output_names = a.additional_outputs;
  if (!a.loss_input.empty()) o.loss_input_names = {a.loss_input};
  o.update_batchnorm_statistics = !a.frozen_statistics;
  o.base_dir = dir_of(a.model);
  const Artifacts art = make_artifacts(bytes, o);
  std::filesystem::create_directories(a.out);
  save_artifacts(art, a.out, a.prefix, a.nominal);
  if (!art.onnxtrain_operators.empty())
    std::cerr << "onnxtrain: warning: the training model uses onnxtrain's operators " << join(art.onnxtrain_operators)
              << " (com.onnxtrain): onnxtrain runs these artifacts, onnxruntime does not\n";
  std::cout << "wrote " << (std::filesystem::path(a.out) / a.prefix).string() << "{training_model,eval_model"
            << (a.optimizer.empty() ? "" : ",optimizer_model") << "}.onnx and " << a.prefix << "checkpoint"
            << (a.nominal ? " (and " + a.prefix + "nominal_checkpoint)" : "") << " (" << o.requires_grad.size()
            << " trained, " << o.frozen_params.size() << " frozen parameters)\n";
  return kExitOk;
}

}  // namespace

Command artifacts_command() {
  return {artifacts_info, [](CLI::App& app) -> std::function<int()> {
            auto a = std::make_shared<ArtifactArgs>();
            app.add_option("MODEL", a->model, "ONNX model to make training artifacts of")->required();
            app.add_option("--requires-grad", a->requires_grad,
                           "initializers to train (default: every trainable weight not in --frozen)")
                ->type_name("NAMES")
                ->delimiter(',');
            app.add_option("--frozen", a->frozen,
                           "initializers the checkpoint holds but training leaves (BatchNorm running statistics)")
                ->type_name("NAMES")
                ->delimiter(',');
            app.add_option("--loss", a->loss,
                           "loss added on the output, reduction mean (default: the model's first output is the loss)")
                ->type_name("KIND")
                ->check(choice({"MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss"}));
            app.add_option("--optimizer", a->optimizer, "optimizer model to write (default: none)")
                ->type_name("KIND")
                ->check(choice({"AdamW", "SGD"}));
            app.add_option("--out", a->out, "folder of the artifacts (created; default: here)")->type_name("DIR");
            app.add_option("--prefix", a->prefix, "prefix of the file names");
            app.add_option("--additional-outputs", a->additional_outputs, "values returned after the loss")
                ->type_name("NAMES")
                ->delimiter(',');
            app.add_option("--loss-input", a->loss_input, "the output the loss scores (default: the only output)")
                ->type_name("NAME");
            app.add_flag("--nominal-checkpoint", a->nominal, "also write a nominal checkpoint (names and shapes only)");
            app.add_flag("--frozen-batchnorm-statistics", a->frozen_statistics,
                         "never update BatchNorm running statistics (onnxruntime's behaviour)");
            return [a, &app] { return run_artifacts(*a, app); };
          }};
}

}  // namespace cli
