#include "train_setup.h"

#include <algorithm>
#include <set>

#include "onnxtrain/error.h"
#include "onnxtrain/inspect.h"

namespace cli {

using namespace onnxtrain;

namespace {

// Options that do not change the trained weights: they may differ when resuming.
const std::set<std::string> kFreeOptions = {"--data",     "--labels",         "--label-column",    "--validation-data",
                                            "--validation-labels", "--epochs", "--steps", "--out", "--metrics",
                                            "--curve",    "--checkpoint-dir", "--checkpoint-every", "--resume",
                                            "--log-every", "--progress",      "--threads",         "--eval-batch-size"};

std::map<std::string, std::vector<std::string>> parse_recorded(const std::string& recorded) {
  std::map<std::string, std::vector<std::string>> m;
  for (const auto& line : split(recorded, '\n')) {
    auto parts = split(line, '\x1f');
    if (parts.empty()) continue;
    m[parts[0]].assign(parts.begin() + 1, parts.end());
  }
  return m;
}

}  // namespace

std::vector<Option> optimizer_options() {
  return {
      {"--optimizer", "NAME", "sgd, momentum, nesterov, adam, adamw, lamb or adagrad (default: sgd)"},
      {"--lr", "RATE", "learning rate (default: 0.01 for sgd/momentum/nesterov/adagrad, 0.001 for adam/adamw/lamb)"},
      {"--momentum", "M", "momentum of sgd (a value > 0 makes it momentum SGD), momentum and nesterov (default 0.9)"},
      {"--weight-decay", "W",
       "weight decay: L2 added to the gradient (sgd, momentum, nesterov, adam, adagrad), decoupled for adamw "
       "(default 0.01) and lamb"},
      {"--betas", "B1,B2", "adam/adamw/lamb moment decay rates (default 0.9,0.999)"},
      {"--eps", "E", "adam/adamw/lamb/adagrad denominator term (defaults: 1e-8, 1e-8, 1e-6, 1e-10)"},
      {"--lr-schedule", "KIND",
       "constant, linear, cosine, polynomial (decay to --end-lr over the run), invscaling (lr / t^power), "
       "optimal (default: constant)"},
      {"--warmup", "STEPS", "linear warm-up from 0 over the first STEPS optimizer steps"},
      {"--end-lr", "RATE", "final learning rate of linear/cosine/polynomial (default 0)"},
      {"--lr-power", "P", "exponent of polynomial (default 1) and invscaling (default 0.25)"},
      {"--grad-accum", "K", "sum the gradients of K batches per optimizer step (default 1)"},
      {"--clip-norm", "X", "clip the global gradient norm to X"},
      {"--freeze", "NAME", "weights that stay fixed (names or comma-separated lists)", false, true},
  };
}

TrainSetup make_train_setup(const Args& a, const std::string& model_bytes, const LossModel& lm, int64_t total_steps) {
  TrainSetup s;
  s.lm = lm;
  TrainingParameters& p = s.params;
  p.loss_output_name = s.lm.cfg.loss_output;
  p.deterministic_compute = true;
  s.optimizer = a.choice("--optimizer", "sgd", {"sgd", "momentum", "nesterov", "adam", "adamw", "lamb", "adagrad"});
  const std::string& o = s.optimizer;
  const bool adam_like = o == "adam" || o == "adamw" || o == "lamb";
  const bool momentum_like = o == "sgd" || o == "momentum" || o == "nesterov";
  s.lr = a.number("--lr", adam_like ? 1e-3 : 1e-2, 0, 1e6);
  if (!momentum_like) a.forbid("--momentum", "it goes with --optimizer sgd, momentum or nesterov");
  if (!adam_like) a.forbid("--betas", "it goes with --optimizer adam, adamw or lamb");
  if (momentum_like) a.forbid("--eps", "it goes with --optimizer adam, adamw, lamb or adagrad");
  auto& attrs = p.optimizer_attributes;
  if (momentum_like) {
    const double m = a.number("--momentum", o == "sgd" ? 0.0 : 0.9, 0, 1);
    if (o == "nesterov" && m == 0) throw UsageError("option --momentum: nesterov needs a momentum > 0");
    if (m > 0) {
      p.training_optimizer_name = "MomentumOptimizer";
      attrs["momentum"] = float(m);
      if (o == "nesterov") p.optimizer_int_attributes["nesterov"] = 1;
    } else {
      p.training_optimizer_name = "SGDOptimizer";
    }
  } else {
    p.training_optimizer_name = o == "adam" ? "AdamOptimizer" : o == "adamw" ? "AdamWOptimizer"
                               : o == "lamb" ? "LambOptimizer" : "AdagradOptimizer";
  }
  if (a.has("--weight-decay")) attrs["lambda"] = float(a.number("--weight-decay", 0, 0, 1e6));
  if (a.has("--eps")) attrs["epsilon"] = float(a.number("--eps", 0, 0, 1));
  if (a.has("--betas")) {
    const auto b = a.list("--betas");
    if (b.size() != 2) throw UsageError("option --betas expects two numbers B1,B2, got '" + a.str("--betas") + "'");
    for (size_t i = 0; i < 2; ++i) {
      char* end = nullptr;
      const double v = std::strtod(b[i].c_str(), &end);
      if (end == b[i].c_str() || *end || !(v >= 0 && v < 1))
        throw UsageError("option --betas: '" + b[i] + "' is not a number in [0, 1)");
      attrs[i ? "beta" : "alpha"] = float(v);
    }
  }
  s.schedule = a.choice("--lr-schedule", "constant",
                        {"constant", "linear", "cosine", "polynomial", "invscaling", "optimal"});
  const bool decays = s.schedule == "linear" || s.schedule == "cosine" || s.schedule == "polynomial";
  if (!decays) a.forbid("--end-lr", "it goes with --lr-schedule linear, cosine or polynomial");
  if (s.schedule != "polynomial" && s.schedule != "invscaling")
    a.forbid("--lr-power", "it goes with --lr-schedule polynomial or invscaling");
  if (s.schedule == "invscaling" || s.schedule == "optimal")
    a.forbid("--warmup", "it does not combine with --lr-schedule " + s.schedule);
  const int64_t warmup = a.integer("--warmup", 0, 0, int64_t(1) << 40);
  if (s.schedule != "constant" || warmup > 0) {
    p.lr_schedule = s.schedule;
    p.lr_schedule_params["eta0"] = s.lr;
    p.lr_schedule_params["warmup"] = double(warmup);
    p.lr_schedule_params["total"] = double(std::max(total_steps, warmup + 1));
    if (decays) p.lr_schedule_params["end_lr"] = a.number("--end-lr", 0, 0, 1e6);
    if (s.schedule == "polynomial") p.lr_schedule_params["power"] = a.number("--lr-power", 1, 1e-6, 1e3);
    if (s.schedule == "invscaling") p.lr_schedule_params["power_t"] = a.number("--lr-power", 0.25, 0, 1e3);
    if (decays && total_steps <= warmup)
      throw UsageError("option --warmup: " + std::to_string(warmup) + " warm-up steps leave nothing of a " +
                       std::to_string(total_steps) + "-step run to decay over");
  }
  p.gradient_accumulation_steps = a.integer("--grad-accum", 1, 1, 1 << 20);
  if (a.has("--clip-norm")) {
    p.enable_grad_norm_clip = true;
    p.max_grad_norm = float(a.number("--clip-norm", 1, 1e-12, 1e30));
  }
  if (a.has("--freeze")) {
    const ModelSummary sum = summarize_model_bytes(model_bytes, lm.base_dir);
    std::vector<std::string> names;
    for (const auto& i : sum.initializers) names.push_back(i.name);
    for (const auto& f : a.list("--freeze")) {
      if (std::find(names.begin(), names.end(), f) == names.end())
        throw_error<InvalidArgument>("--freeze: '", f, "' is not an initializer of the model (initializers: ",
                                     join(names), ")");
      p.weights_not_to_train.insert(f);
    }
  }
  p.validate();
  return s;
}

std::string recorded_options(const Args& a) {
  std::string r;
  for (const auto& [name, values] : a.given()) {
    if (kFreeOptions.count(name)) continue;
    r += name;
    for (const auto& v : values) r += "\x1f" + v;
    r += "\n";
  }
  return r;
}

std::vector<std::string> options_argv(const Command& cmd, const std::string& recorded) {
  std::vector<std::string> argv;
  for (const auto& [name, values] : parse_recorded(recorded)) {
    bool flag = false;
    for (const auto& o : cmd.options) flag |= o.name == name && o.metavar.empty();
    for (const auto& v : values) {
      argv.push_back(name);
      if (!flag) argv.push_back(v);
    }
  }
  return argv;
}

void check_same_options(const Args& a, const std::string& recorded) {
  const auto then = parse_recorded(recorded);
  const auto now = parse_recorded(recorded_options(a));
  std::set<std::string> names;
  for (const auto& [n, v] : then) names.insert(n);
  for (const auto& [n, v] : now) names.insert(n);
  for (const auto& n : names) {
    auto t = then.find(n), w = now.find(n);
    if (t != then.end() && w != now.end() && t->second == w->second) continue;
    auto show = [](const auto& it, const auto& m) { return it == m.end() ? std::string("not given") : join(it->second, " "); };
    throw UsageError("--resume: option " + n + " is '" + show(w, now) + "' here but was '" + show(t, then) +
                     "' when the checkpoint was written (resume with the same options)");
  }
}

}  // namespace cli
