// Commands about models rather than data: export, grad, inspect.
#include <cstdio>
#include <filesystem>
#include <set>

#include "commands.h"
#include "data.h"
#include "json.h"
#include "loss.h"
#include "onnxtrain/checkpoint.h"
#include "onnxtrain/error.h"
#include "onnxtrain/gradient.h"
#include "onnxtrain/inspect.h"
#include "onnxtrain/io.h"
#include "onnxtrain/training.h"
#include "train_setup.h"

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

const Command& export_command() {
  static const Command c = [] {
    Command c;
    c.name = "export";
    c.synopsis = "MODEL [--checkpoint CKPT] [--out FILE] [options]";
    c.summary = "inference model from a training model (one that outputs its loss) or from a train checkpoint";
    c.description =
        "Writes the inference model: the loss, the label input and anything only the loss needs removed,\n"
        "training-only behaviour (Dropout, BatchNormalization statistics updates) switched off. With --checkpoint\n"
        "the weights come from a checkpoint: one written by `onnxtrain train` (MODEL is the model given to train;\n"
        "the loss and optimizer options are read from the checkpoint), or by TrainingSession.save_checkpoint\n"
        "with default trained weights (MODEL outputs its loss).";
    c.positional = {"MODEL"};
    c.options = {
        {"--checkpoint", "CKPT", "checkpoint file, or a --checkpoint-dir (its last.ckpt)"},
        {"--out", "FILE", "inference model (default: MODEL's name with .inference.onnx, here)"},
        {"--loss-output", "NAME", "output holding the loss (default: loss)"},
        {"--outputs", "NAMES", "outputs to keep (default: every output but the loss)", false, true},
    };
    c.epilog =
        "examples:\n  onnxtrain export model_with_loss.onnx --out inference.onnx\n"
        "  onnxtrain export mlp.onnx --checkpoint runs/ck --out mlp.step500.onnx";
    return c;
  }();
  return c;
}

int cmd_export(const Args& a) {
  const std::string model_path = a.positional(0);
  const std::string out = a.str("--out", model_stem(model_path) + ".inference.onnx");
  const std::string model_bytes = read_file(model_path, "model file");
  std::string ckpt = a.str("--checkpoint");
  if (!ckpt.empty() && std::filesystem::is_directory(ckpt)) ckpt = (std::filesystem::path(ckpt) / "last.ckpt").string();
  std::vector<std::string> outputs = a.list("--outputs");
  CheckpointInfo info;
  if (!ckpt.empty()) info = read_checkpoint_info(ckpt);
  std::unique_ptr<TrainingSession> sess;
  if (info.metadata.count("trainer.options")) {
    // Written by `onnxtrain train`: rebuild its configuration from the recorded options.
    a.forbid("--loss-output", "the checkpoint records its loss");
    std::vector<std::string> argv{model_path};
    for (const auto& s : options_argv(train_command(), info.metadata.at("trainer.options"))) argv.push_back(s);
    const Args ta(train_command(), argv);
    const LossModel lm = build_loss_model(model_bytes, loss_config(ta), dir_of(model_path));
    const int64_t total = std::stoll(info.metadata.count("trainer.total_steps") ? info.metadata.at("trainer.total_steps") : "1");
    const TrainSetup setup = make_train_setup(ta, model_bytes, lm, total);
    sess = std::make_unique<TrainingSession>(lm.bytes.data(), lm.bytes.size(), setup.params, SessionOptions{},
                                             dir_of(model_path));
  } else {
    TrainingParameters p;
    p.loss_output_name = a.str("--loss-output", "loss");
    const LossConfig lc{"", p.loss_output_name};
    build_loss_model(model_bytes, lc, dir_of(model_path));  // names a missing loss output
    if (!info.optimizer.empty()) p.training_optimizer_name = info.optimizer;
    sess = std::make_unique<TrainingSession>(model_bytes.data(), model_bytes.size(), p, SessionOptions{}, dir_of(model_path));
  }
  if (!ckpt.empty()) sess->load_checkpoint(ckpt);
  make_dirs_for(out);
  sess->export_model_to(out, outputs);
  std::printf("wrote %s (inference model%s)\n", out.c_str(),
              ckpt.empty() ? "" : (", weights of step " + std::to_string(sess->step()) + " from " + ckpt).c_str());
  return kExitOk;
}

const Command& grad_command() {
  static const Command c = [] {
    Command c;
    c.name = "grad";
    c.synopsis = "MODEL [--loss KIND] [--out FILE] [options]";
    c.summary = "save the gradient graph of a model's loss (an ONNX model with <weight>_grad outputs)";
    c.description =
        "Builds the gradient of the loss (in the model, or added with --loss) with respect to the trainable\n"
        "weights (or --wrt) and writes it as an ONNX model whose outputs are the model's outputs followed by\n"
        "<name>_grad for each differentiated value. Fails naming the node when an operator has no gradient rule.";
    c.positional = {"MODEL"};
    c.options = loss_options();
    for (Option o : std::vector<Option>{
             {"--out", "FILE", "gradient model (default: MODEL's name with .grad.onnx, here)"},
             {"--wrt", "NAMES", "initializers or inputs to differentiate (default: every trainable weight)", false, true},
             {"--freeze", "NAMES", "weights left out of the default --wrt", false, true},
             {"--portable", "", "standard ONNX operators only wherever possible (runs in any ONNX runtime)"},
             {"--external-data", "auto|always|never",
              "weights in a data file beside --out (FILE.data): auto (default) when the model would pass protobuf's "
              "2 GiB limit, always (initializers of 1 KiB or more), never"},
         })
      c.options.push_back(o);
    c.epilog = "example:\n  onnxtrain grad mlp.onnx --loss cross_entropy --out mlp.grad.onnx";
    return c;
  }();
  return c;
}

int cmd_grad(const Args& a) {
  const std::string model_path = a.positional(0);
  const std::string out = a.str("--out", model_stem(model_path) + ".grad.onnx");
  if (a.has("--wrt") && a.has("--freeze")) throw UsageError("give --wrt or --freeze, not both");
  ModelSaveOptions save;
  save.external_data = parse_external_data(a.choice("--external-data", "auto", {"auto", "always", "never"}));
  const LossModel lm = build_loss_model(read_file(model_path, "model file"), loss_config(a), dir_of(model_path));
  const ModelSummary s = summarize_model_bytes(lm.bytes, dir_of(model_path));
  std::set<std::string> xs, known;
  for (const auto& i : s.initializers) known.insert(i.name);
  for (const auto& i : s.inputs) known.insert(i.name);
  if (a.has("--wrt")) {
    for (const auto& w : a.list("--wrt")) {
      if (!known.count(w))
        throw_error<InvalidArgument>("--wrt: '", w, "' is neither an initializer nor an input of the model");
      xs.insert(w);
    }
  } else {
    const auto frozen = a.list("--freeze");
    for (const auto& f : frozen)
      if (!known.count(f)) throw_error<InvalidArgument>("--freeze: '", f, "' is not an initializer of the model");
    for (const auto& w : get_train_initializer(lm.bytes))
      if (std::find(frozen.begin(), frozen.end(), w) == frozen.end()) xs.insert(w);
  }
  if (xs.empty()) throw_error<InvalidArgument>("nothing to differentiate: the model has no trainable weight (use --wrt)");
  std::set<std::string> ys;
  for (const auto& o : s.outputs) ys.insert(o.name);
  GradientGraphBuilder b(lm.bytes, ys, xs, lm.cfg.loss_output, a.flag("--portable"), lm.base_dir);
  b.build();
  make_dirs_for(out);
  b.save(out, save);
  std::vector<std::string> grads;
  for (const auto& x : xs) grads.push_back(x + "_grad");
  std::printf("wrote %s: gradient of '%s' with respect to %zu values (outputs %s)\n", out.c_str(),
              lm.cfg.loss_output.c_str(), xs.size(), join(grads).c_str());
  return kExitOk;
}

const Command& inspect_command() {
  static const Command c = [] {
    Command c;
    c.name = "inspect";
    c.synopsis = "MODEL [--json]";
    c.summary = "inputs, outputs, initializers, operator histogram, missing gradient rules, opsets";
    c.description = "Describes MODEL: what to feed it, what it returns, its weights and operators, and whether\n"
                    "onnxtrain can differentiate every operator (training needs it).";
    c.positional = {"MODEL"};
    c.options = {{"--json", "", "print one JSON object"}};
    return c;
  }();
  return c;
}

int cmd_inspect(const Args& a) {
  const std::string path = a.positional(0);
  const ModelSummary s = summarize_model(path);
  int64_t total_values = 0, trainable = 0;
  size_t total_bytes = 0;
  for (const auto& i : s.initializers) {
    total_values += i.numel;
    total_bytes += i.bytes;
    trainable += i.trainable;
  }
  if (a.flag("--json")) {
    auto args = [](const std::vector<NodeArg>& v) {
      std::vector<std::string> r;
      for (const auto& x : v) {
        std::vector<std::string> dims;
        for (const auto& d : x.shape) dims.push_back(d.value >= 0 ? std::to_string(d.value) : json_string(d.symbol));
        r.push_back(JsonObject()
                        .add("name", x.name)
                        .add("type", x.elem == DType::kUndefined ? x.type : std::string(dtype_name(x.elem)))
                        .raw("shape", x.has_shape ? json_array(dims) : "null")
                        .str());
      }
      return json_array(r);
    };
    std::vector<std::string> inits, ops, missing, opsets;
    for (const auto& i : s.initializers) {
      std::vector<std::string> dims;
      for (auto d : i.shape) dims.push_back(std::to_string(d));
      inits.push_back(JsonObject()
                          .add("name", i.name)
                          .add("type", dtype_name(i.dtype))
                          .raw("shape", json_array(dims))
                          .add("size", double(i.numel))
                          .add("bytes", double(i.bytes))
                          .add("trainable", i.trainable)
                          .str());
    }
    for (const auto& o : s.operators)
      ops.push_back(JsonObject()
                        .add("op", o.domain.empty() ? o.op_type : o.domain + "." + o.op_type)
                        .add("count", double(o.count))
                        .add("gradient", o.has_gradient_rule)
                        .str());
    for (const auto& m : s.missing_gradient_rules) missing.push_back(json_string(m));
    for (const auto& [d, v] : s.opsets)
      opsets.push_back(JsonObject().add("domain", d.empty() ? "ai.onnx" : d).add("version", double(v)).str());
    std::printf("%s\n", JsonObject()
                            .add("ir_version", double(s.ir_version))
                            .add("producer", s.producer_name)
                            .raw("opsets", json_array(opsets))
                            .raw("inputs", args(s.inputs))
                            .raw("outputs", args(s.outputs))
                            .raw("initializers", json_array(inits))
                            .raw("operators", json_array(ops))
                            .raw("missing_gradient_rules", json_array(missing))
                            .add("nodes", double(s.node_count))
                            .str()
                            .c_str());
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

}  // namespace cli
