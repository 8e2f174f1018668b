// Commands about models rather than data: export, grad, inspect.
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "onnxtrain/checkpoint.h"
#include "onnxtrain/error.h"
#include "onnxtrain/gradient.h"
#include "onnxtrain/inspect.h"
#include "onnxtrain/io.h"
#include "onnxtrain/training.h"

namespace cli {

using namespace onnxtrain;

namespace {

std::string human_bytes(double b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%.0f B", b);
  else if (b < 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else if (b < 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1024 / 1024);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1024 / 1024 / 1024);
  return buf;
}

std::string model_stem(const std::string& path) {
  return strip_suffix(std::filesystem::path(path).filename().string(), ".onnx");
}

}  // namespace

struct ExportArgs {
  std::string model, checkpoint, out, loss_output = "loss";
  std::vector<std::string> outputs;
};

const CommandInfo& export_info() {
  static const CommandInfo c{
      "export", "MODEL [--checkpoint CKPT] [--out FILE] [options]",
      "inference model from a training model (one that outputs its loss) or from a train checkpoint",
      "Writes the inference model: the loss, the label input and anything only the loss needs removed,\n"
      "training-only behaviour (Dropout, BatchNormalization statistics updates) switched off. With --checkpoint\n"
      "the weights come from a checkpoint: one written by `onnxtrain train` (MODEL is the model given to train;\n"
      "the loss and optimizer options are read from the checkpoint), or by TrainingSession.save_checkpoint\n"
      "with default trained weights (MODEL outputs its loss).",
      "examples:\n  onnxtrain export model_with_loss.onnx --out inference.onnx\n"
      "  onnxtrain export mlp.onnx --checkpoint runs/ck --out mlp.step500.onnx"};
  return c;
}

int run_export(const ExportArgs& a, const CLI::App& app) {
  const std::string& model_path = a.model;
  const std::string out = given(app, "--out") ? a.out : model_stem(model_path) + ".inference.onnx";
  const std::string model_bytes = read_file(model_path, "model file");
  std::string ckpt = a.checkpoint;
  if (!ckpt.empty() && std::filesystem::is_directory(ckpt)) ckpt = (std::filesystem::path(ckpt) / "last.ckpt").string();
  CheckpointInfo info;
  if (!ckpt.empty()) info = read_checkpoint_info(ckpt);
  std::unique_ptr<TrainingSession> sess;
  // "trainer.options": the same record, from onnxtrain versions before the library trainer.
  const char* key = info.metadata.count("cli.options") ? "cli.options" : "trainer.options";
  if (info.metadata.count(key)) {
    // Written by `onnxtrain train`: rebuild its configuration from the recorded options.
    forbid(app, "--loss-output", "the checkpoint records its loss");
    CLI::App train_app;
    TrainArgs ta;
    configure_app(train_app, train_info());
    define_train_options(train_app, ta);
    std::vector<std::string> argv{model_path};
    for (const auto& s : options_argv(train_app, info.metadata.at(key))) argv.push_back(s);
    parse_args(train_app, argv);
    const LossModel lm = build_loss_model(model_bytes, ta.loss, dir_of(model_path));
    const int64_t total = info.metadata.count("trainer.total_steps") ? std::stoll(info.metadata.at("trainer.total_steps")) : 1;
    const TrainSetup setup = make_train_setup(ta.opt, train_app, model_bytes, lm, std::max<int64_t>(total, 1));
    sess = std::make_unique<TrainingSession>(lm.bytes.data(), lm.bytes.size(), setup.params, SessionOptions{},
                                             dir_of(model_path));
  } else {
    TrainingParameters p;
    p.loss_output_name = a.loss_output;
    LossArgs la;
    la.loss_output = p.loss_output_name;
    build_loss_model(model_bytes, la, dir_of(model_path));  // names a missing loss output
    if (!info.optimizer.empty()) p.training_optimizer_name = info.optimizer;
    sess = std::make_unique<TrainingSession>(model_bytes.data(), model_bytes.size(), p, SessionOptions{}, dir_of(model_path));
  }
  if (!ckpt.empty()) sess->load_checkpoint(ckpt);
  make_dirs_for(out);
  sess->export_model_to(out, a.outputs);
  std::printf("wrote %s (inference model%s)\n", out.c_str(),
              ckpt.empty() ? "" : (", weights of step " + std::to_string(sess->step()) + " from " + ckpt).c_str());
  return kExitOk;
}

struct GradArgs {
  std::string model, out, external_data = "auto";
  LossArgs loss;
  std::vector<std::string> wrt, freeze;
  bool portable = false;
};

const CommandInfo& grad_info() {
  static const CommandInfo c{
      "grad", "MODEL [--loss KIND] [--out FILE] [options]",
      "save the gradient graph of a model's loss (an ONNX model with <weight>_grad outputs)",
      "Builds the gradient of the loss (in the model, or added with --loss) with respect to the trainable\n"
      "weights (or --wrt) and writes it as an ONNX model whose outputs are the model's outputs followed by\n"
      "<name>_grad for each differentiated value. Fails naming the node when an operator has no gradient rule.",
      "example:\n  onnxtrain grad mlp.onnx --loss cross_entropy --out mlp.grad.onnx"};
  return c;
}

int run_grad(const GradArgs& a, const CLI::App& app) {
  const std::string& model_path = a.model;
  const std::string out = given(app, "--out") ? a.out : model_stem(model_path) + ".grad.onnx";
  ModelSaveOptions save;
  save.external_data = parse_external_data(a.external_data);
  const LossModel lm = build_loss_model(read_file(model_path, "model file"), a.loss, dir_of(model_path));
  const ModelSummary s = summarize_model_bytes(lm.bytes, dir_of(model_path));
  std::set<std::string> xs, known;
  for (const auto& i : s.initializers) known.insert(i.name);
  for (const auto& i : s.inputs) known.insert(i.name);
  if (!a.wrt.empty()) {
    for (const auto& w : a.wrt) {
      if (!known.count(w))
        throw_error<InvalidArgument>("--wrt: '", w, "' is neither an initializer nor an input of the model");
      xs.insert(w);
    }
  } else {
    const auto& frozen = a.freeze;
    for (const auto& f : frozen)
      if (!known.count(f)) throw_error<InvalidArgument>("--freeze: '", f, "' is not an initializer of the model");
    for (const auto& w : get_train_initializer(lm.bytes))
      if (std::find(frozen.begin(), frozen.end(), w) == frozen.end()) xs.insert(w);
  }
  if (xs.empty()) throw_error<InvalidArgument>("nothing to differentiate: the model has no trainable weight (use --wrt)");
  std::set<std::string> ys;
  for (const auto& o : s.outputs) ys.insert(o.name);
  GradientGraphBuilder b(lm.bytes, ys, xs, a.loss.loss_output, a.portable, lm.base_dir);
  b.build();
  make_dirs_for(out);
  b.save(out, save);
  std::vector<std::string> grads;
  for (const auto& x : xs) grads.push_back(x + "_grad");
  std::printf("wrote %s: gradient of '%s' with respect to %zu values (outputs %s)\n", out.c_str(),
              a.loss.loss_output.c_str(), xs.size(), join(grads).c_str());
  return kExitOk;
}

const CommandInfo& inspect_info() {
  static const CommandInfo c{"inspect", "MODEL [--json]",
                             "inputs, outputs, initializers, operator histogram, missing gradient rules, opsets",
                             "Describes MODEL: what to feed it, what it returns, its weights and operators, and whether\n"
                             "onnxtrain can differentiate every operator (training needs it).",
                             ""};
  return c;
}

int run_inspect(const std::string& path, bool json) {
  const ModelSummary s = summarize_model(path);
  int64_t total_values = 0, trainable = 0;
  size_t total_bytes = 0;
  for (const auto& i : s.initializers) {
    total_values += i.numel;
    total_bytes += i.bytes;
    trainable += i.trainable;
  }
  if (json) {
    using Json = nlohmann::ordered_json;
    auto args = [](const std::vector<NodeArg>& v) {
      Json r = Json::array();
      for (const auto& x : v) {
        Json dims = Json::array();
        for (const auto& d : x.shape) dims.push_back(d.value >= 0 ? Json(d.value) : Json(d.symbol));
        r.push_back({{"name", x.name},
                     {"type", x.elem == DType::kUndefined ? x.type : std::string(dtype_name(x.elem))},
                     {"shape", x.has_shape ? dims : Json(nullptr)}});
      }
      return r;
    };
    Json inits = Json::array(), ops = Json::array(), opsets = Json::array();
    for (const auto& i : s.initializers)
      inits.push_back({{"name", i.name},   {"type", dtype_name(i.dtype)}, {"shape", i.shape},
                       {"size", i.numel},  {"bytes", i.bytes},            {"trainable", i.trainable}});
    for (const auto& o : s.operators)
      ops.push_back({{"op", o.domain.empty() ? o.op_type : o.domain + "." + o.op_type},
                     {"count", o.count},
                     {"gradient", o.has_gradient_rule}});
    for (const auto& [d, v] : s.opsets) opsets.push_back({{"domain", d.empty() ? "ai.onnx" : d}, {"version", v}});
    Json j = {{"ir_version", s.ir_version},
              {"producer", s.producer_name},
              {"opsets", opsets},
              {"inputs", args(s.inputs)},
              {"outputs", args(s.outputs)},
              {"initializers", inits},
              {"operators", ops},
              {"missing_gradient_rules", s.missing_gradient_rules},
              {"nodes", s.node_count}};
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("model         %s (IR %lld%s)\n", path.c_str(), (long long)s.ir_version,
              s.producer_name.empty() ? "" : (", producer " + s.producer_name + " " + s.producer_version).c_str());
  std::string ops;
  for (const auto& [d, v] : s.opsets) ops += (ops.empty() ? "" : ", ") + (d.empty() ? "ai.onnx" : d) + " " + std::to_string(v);
  std::printf("opsets        %s\n", ops.c_str());
  auto print_args = [](const char* title, const std::vector<NodeArg>& v) {
    std::printf("%-13s ", title);
    if (v.empty()) std::printf("(none)\n");
    for (size_t i = 0; i < v.size(); ++i)
      std::printf("%s%-20s %s\n", i ? "              " : "", v[i].name.c_str(), describe_arg(v[i]).c_str());
  };
  print_args("inputs", s.inputs);
  print_args("outputs", s.outputs);
  std::printf("initializers  %zu (%lld values, %s; %lld trainable)\n", s.initializers.size(), (long long)total_values,
              human_bytes(double(total_bytes)).c_str(), (long long)trainable);
  for (const auto& i : s.initializers)
    std::printf("              %-20s %-18s %10lld  %10s%s\n", i.name.c_str(),
                (std::string(dtype_name(i.dtype)) + shape_to_string(i.shape)).c_str(), (long long)i.numel,
                human_bytes(double(i.bytes)).c_str(), i.trainable ? "  trainable" : "");
  std::printf("operators     %lld nodes\n", (long long)s.node_count);
  for (const auto& o : s.operators)
    std::printf("              %-28s %6lld%s\n", (o.domain.empty() ? o.op_type : o.domain + "." + o.op_type).c_str(),
                (long long)o.count, o.has_gradient_rule ? "" : "  (no gradient rule)");
  if (s.missing_gradient_rules.empty())
    std::printf("gradients     every operator has a gradient rule\n");
  else
    std::printf("gradients     no rule for %s: training through them fails\n", join(s.missing_gradient_rules).c_str());
  return kExitOk;
}

Command export_command() {
  return {export_info, [](CLI::App& app) -> std::function<int()> {
            auto a = std::make_shared<ExportArgs>();
            app.add_option("MODEL", a->model, "training model, or the model given to train")->required();
            app.add_option("--checkpoint", a->checkpoint, "checkpoint file, or a --checkpoint-dir (its last.ckpt)")
                ->type_name("CKPT");
            app.add_option("--out", a->out, "inference model (default: MODEL's name with .inference.onnx, here)")
                ->type_name("FILE");
            app.add_option("--loss-output", a->loss_output, "output holding the loss (default: loss)")->type_name("NAME");
            app.add_option("--outputs", a->outputs, "outputs to keep (default: every output but the loss)")
                ->type_name("NAMES")
                ->delimiter(',');
            return [a, &app] { return run_export(*a, app); };
          }};
}

Command grad_command() {
  return {grad_info, [](CLI::App& app) -> std::function<int()> {
            auto a = std::make_shared<GradArgs>();
            app.add_option("MODEL", a->model, "model to differentiate")->required();
            add_loss_options(app, a->loss);
            app.add_option("--out", a->out, "gradient model (default: MODEL's name with .grad.onnx, here)")->type_name("FILE");
            auto* wrt = app.add_option("--wrt", a->wrt,
                                       "initializers or inputs to differentiate (default: every trainable weight)")
                            ->type_name("NAMES")
                            ->delimiter(',');
            app.add_option("--freeze", a->freeze, "weights left out of the default --wrt")
                ->type_name("NAMES")
                ->delimiter(',')
                ->excludes(wrt);
            app.add_flag("--portable", a->portable,
                         "standard ONNX operators only wherever possible (runs in any ONNX runtime)");
            app.add_option("--external-data", a->external_data,
                           "weights in a data file beside --out (FILE.data): auto (default) when the model would pass "
                           "protobuf's 2 GiB limit, always (initializers of 1 KiB or more), never")
                ->type_name("auto|always|never")
                ->check(choice({"auto", "always", "never"}));
            return [a, &app] { return run_grad(*a, app); };
          }};
}

Command inspect_command() {
  return {inspect_info, [](CLI::App& app) -> std::function<int()> {
            auto path = std::make_shared<std::string>();
            auto json = std::make_shared<bool>(false);
            app.add_option("MODEL", *path, "model to describe")->required();
            app.add_flag("--json", *json, "print one JSON object");
            return [path, json] { return run_inspect(*path, *json); };
          }};
}

}  // namespace cli
