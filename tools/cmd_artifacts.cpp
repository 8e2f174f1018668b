// `onnxtrain artifacts`: onnxruntime's generate_artifacts without Python (include/onnxtrain/artifacts.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <random>

#include "commands.h"
#include "onnxtrain/artifacts.h"
#include "onnxtrain/error.h"
#include "onnxtrain/io.h"
#include "onnxtrain/on_device.h"
#include "onnxtrain/session.h"
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

// `onnxtrain train ARTIFACTS_DIR --data ...`: onnxruntime's on-device loop (train_step, optimizer
// step, lazy_reset_grad per batch) over the artifacts' checkpoint; the trained state is written
// to --out in onnxruntime's checkpoint format, with the optimizer state.
int run_train_artifacts(const TrainArgs& a, const CLI::App& app) {
  const std::string why = "it does not apply to training artifacts (their models fix the loss and the optimizer)";
  for (const char* o : {"--loss", "--loss-output", "--score-output", "--label-name", "--reduction", "--loss-arg",
                        "--optimizer", "--momentum", "--weight-decay", "--betas", "--eps", "--lr-schedule", "--warmup",
                        "--end-lr", "--lr-power", "--grad-accum", "--precision", "--clip-norm", "--freeze",
                        "--zero-stage", "--validation-split", "--validation-data", "--validation-labels", "--resume",
                        "--checkpoint-dir", "--checkpoint-every", "--metrics", "--curve", "--profile", "--steps",
                        "--eval-batch-size", "--memory-limit", "--recompute", "--recompute-layers", "--recompute-budget",
                        "--memory-efficient-gradient"})
    forbid(app, o, why);
  forbid(app, "--provider", "training artifacts run on the CPU provider (the on-device Module has no provider choice yet)");
  if (!given(app, "--data")) throw UsageError("missing --data FILE (see onnxtrain train --help)");
  const std::filesystem::path dir(a.model);
  auto file = [&](const char* name) { return (dir / name).string(); };
  for (const char* need : {"training_model.onnx", "checkpoint", "optimizer_model.onnx"})
    if (!std::filesystem::exists(file(need)))
      throw_error<InvalidArgument>("'", a.model, "' is a folder but not training artifacts: it has no '", need, "'");
  const std::string out = given(app, "--out") ? a.out : file("trained_checkpoint");
  SessionOptions so = session_options(a.threads, "");  // on-device artifacts run on the CPU provider
  CheckpointState state = CheckpointState::load(file("checkpoint"));
  const bool has_eval = std::filesystem::exists(file("eval_model.onnx"));
  on_device::Module module(on_device::ModelSource::file(file("training_model.onnx")), state,
                           has_eval ? on_device::ModelSource::file(file("eval_model.onnx")) : on_device::ModelSource{},
                           so);
  on_device::Optimizer optimizer(on_device::ModelSource::file(file("optimizer_model.onnx")), module, so);
  if (given(app, "--lr")) optimizer.set_learning_rate(float(a.opt.lr));

  // The data: one array per user input of the training model, by name.
  std::vector<NodeArg> features;
  const InferenceSession train(file("training_model.onnx"), so);
  for (const NodeArg& in : train.get_inputs())
    if (std::find(module.train_input_names().begin(), module.train_input_names().end(), in.name) !=
        module.train_input_names().end())
      features.push_back(in);
  const Dataset data = load_dataset(data_source(a.data), features, nullptr, "");
  const int64_t n = data.size();
  if (a.batch_size < 1) throw UsageError("--batch-size must be at least 1");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::mt19937_64 rng(uint64_t(a.seed));
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    if (!a.no_shuffle) std::shuffle(order.begin(), order.end(), rng);
    double total = 0;
    int64_t seen = 0;
    for (int64_t begin = 0; begin < n; begin += a.batch_size) {
      const int64_t end = std::min(n, begin + a.batch_size);
      if (a.drop_last && end - begin < a.batch_size) break;
      const Dataset batch = data.take(order, size_t(begin), size_t(end));
      std::vector<Value> inputs;
      for (const auto& name : module.train_input_names()) inputs.push_back(Value::of(batch.at(name)));
      const std::vector<Value> outs = module.train_step(inputs);
      optimizer.step();
      module.lazy_reset_grad();
      const Tensor& loss = outs.at(0).tensor;
      const double value = loss.dtype() == DType::kFloat64 ? loss.data<double>()[0] : double(loss.data<float>()[0]);
      total += value * double(end - begin);
      seen += end - begin;
      if (a.log_every > 0 && ++step % a.log_every == 0) std::printf("step %lld loss %.6g\n", (long long)step, value);
    }
    std::printf("epoch %lld loss %.6g\n", (long long)epoch + 1, seen ? total / double(seen) : 0.0);
  }
  state.save(out, {true});
  std::printf("wrote the trained checkpoint '%s' (optimizer step %lld)\n", out.c_str(), (long long)optimizer.step_count());
  return kExitOk;
}

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
