#include "train_setup.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <sstream>

#include "onnxtrain/error.h"
#include "onnxtrain/inspect.h"

namespace cli {

using namespace onnxtrain;

namespace {

// Options that do not change the trained weights: they may differ when resuming.
const std::set<std::string> kFreeOptions = {"--data",     "--labels",         "--label-column",    "--validation-data",
                                            "--validation-labels", "--epochs", "--steps", "--out", "--metrics",
                                            "--curve",    "--checkpoint-dir", "--checkpoint-every", "--resume",
                                            "--log-every", "--progress",      "--threads",         "--eval-batch-size",
                                            "--memory-limit", "--provider", "--recompute", "--recompute-layers",
                                            "--recompute-budget", "--memory-efficient-gradient"};

// An optimizer as the command line names it: TrainingParameters' name lower-cased without
// "Optimizer" (AdamOptimizer: adam), plus nesterov for the optimizer with a nesterov switch.
struct CliOptimizer {
  std::string cli, name;
  bool nesterov = false;
};

std::vector<CliOptimizer> cli_optimizers() {
  std::vector<CliOptimizer> r;
  for (const auto& n : optimizer_names()) {
    std::string c = strip_suffix(n, "Optimizer");
    std::transform(c.begin(), c.end(), c.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    r.push_back({c, n});
    for (const auto& h : optimizer_hyperparameters(n))
      if (h.name == "nesterov") r.push_back({"nesterov", n, true});
  }
  return r;
}

const CliOptimizer& cli_optimizer(const std::string& cli) {
  static const std::vector<CliOptimizer> all = cli_optimizers();
  for (const auto& o : all)
    if (o.cli == cli) return o;
  throw UsageError("option --optimizer: unknown value '" + cli + "'");
}

const OptimizerHyperparameter* hyper(const std::string& optimizer, const std::string& attr) {
  static std::map<std::string, std::vector<OptimizerHyperparameter>> cache;
  auto it = cache.find(optimizer);
  if (it == cache.end()) it = cache.emplace(optimizer, optimizer_hyperparameters(optimizer)).first;
  for (const auto& h : it->second)
    if (h.name == attr) return &h;
  return nullptr;
}

// What each option applies to, from the optimizers' hyper-parameters. sgd takes --momentum as
// torch.optim.SGD does: a momentum > 0 trains with the momentum optimizer.
bool takes_momentum(const CliOptimizer& o) { return o.cli == "sgd" || hyper(o.name, "momentum"); }
bool takes_betas(const CliOptimizer& o) { return hyper(o.name, "alpha") && hyper(o.name, "beta"); }
bool takes_eps(const CliOptimizer& o) { return hyper(o.name, "epsilon"); }
double default_lr(const CliOptimizer& o) { return takes_betas(o) ? 1e-3 : 1e-2; }

// "a, b or c"
std::string join_or(std::vector<std::string> v) {
  if (v.size() < 2) return join(v);
  const std::string last = v.back();
  v.pop_back();
  return join(v) + " or " + last;
}

// "a, b or c" of the optimizers `pred` selects.
template <class P>
std::string optimizers_where(P pred) {
  std::vector<std::string> r;
  for (const auto& o : cli_optimizers())
    if (pred(o)) r.push_back(o.cli);
  return join_or(r);
}

// "1e-08 for adam or adamw, 1e-06 for lamb": the defaults of `attr`, grouped by value.
std::string defaults_of(const std::string& attr) {
  std::vector<std::pair<double, std::vector<std::string>>> groups;
  for (const auto& o : cli_optimizers()) {
    const auto* h = hyper(o.name, attr);
    if (!h || o.nesterov) continue;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == h->default_value; });
    if (g == groups.end()) g = groups.insert(groups.end(), {h->default_value, {}});
    g->second.push_back(o.cli);
  }
  std::vector<std::string> r;
  for (auto& [v, names] : groups) {
    std::ostringstream s;
    s << v << " for " << join_or(names);
    r.push_back(s.str());
  }
  return join(r);
}

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

void add_optimizer_options(CLI::App& app, OptimizerArgs& a) {
  std::vector<std::string> names;
  for (const auto& o : cli_optimizers()) names.push_back(o.cli);
  app.add_option("--optimizer", a.optimizer, optimizers_where([](auto&) { return true; }) + " (default: sgd)")
      ->type_name("NAME")
      ->check(choice(names));
  app.add_option("--lr", a.lr,
                 "learning rate (default: 0.01 for " + optimizers_where([](auto& o) { return default_lr(o) == 1e-2; }) +
                     ", 0.001 for " + optimizers_where([](auto& o) { return default_lr(o) == 1e-3; }) + ")")
      ->type_name("RATE")
      ->check(number(0, 1e6));
  app.add_option("--momentum", a.momentum,
                 "momentum of " + optimizers_where(takes_momentum) +
                     " (for sgd a value > 0 makes it momentum SGD; default: 0 for sgd, 0.9 otherwise)")
      ->type_name("M")
      ->check(number(0, 1));
  app.add_option("--weight-decay", a.weight_decay,
                 "weight decay, the optimizer's lambda: L2 added to the gradient, decoupled for adamw and lamb "
                 "(defaults: " + defaults_of("lambda") + ")")
      ->type_name("W")
      ->check(number(0, 1e6));
  app.add_option("--betas", a.betas, "moment decay rates of " + optimizers_where(takes_betas) + " (default 0.9,0.999)")
      ->type_name("B1,B2");
  app.add_option("--eps", a.eps, "denominator term of " + optimizers_where(takes_eps) + " (defaults: " +
                                     defaults_of("epsilon") + ")")
      ->type_name("E")
      ->check(number(0, 1));
  std::vector<std::string> schedules;
  for (const auto& k : lr_schedule_names())
    if (k != "constant_warmup") schedules.push_back(k);  // constant with --warmup
  app.add_option("--lr-schedule", a.lr_schedule,
                 join(schedules) + ": linear, cosine and polynomial decay to --end-lr over the run, invscaling is "
                 "lr / t^power, optimal is Bottou's 1 / (alpha (t0 + t)) (default: constant)")
      ->type_name("KIND")
      ->check(choice(schedules));
  app.add_option("--warmup", a.warmup, "linear warm-up from 0 over the first STEPS optimizer steps")
      ->type_name("STEPS")
      ->check(integer(0, int64_t(1) << 40));
  app.add_option("--end-lr", a.end_lr, "final learning rate of linear/cosine/polynomial (default 0)")
      ->type_name("RATE")
      ->check(number(0, 1e6));
  app.add_option("--lr-power", a.lr_power, "exponent of polynomial (default 1) and invscaling (default 0.25)")
      ->type_name("P")
      ->check(number(0, 1e3));
  app.add_option("--grad-accum", a.grad_accum, "sum the gradients of K batches per optimizer step (default 1)")
      ->type_name("K")
      ->check(integer(1, 1 << 20));
  app.add_option("--precision", a.precision,
                 "fp32 (default), bf16 (MatMul/Gemm/Conv and their gradients in bfloat16 with fp32 accumulation "
                 "and fp32 master weights) or fp16 (the same in float16 with dynamic loss scaling: updates with "
                 "inf/NaN gradients are skipped)")
      ->type_name("P")
      ->check(choice({"fp32", "bf16", "fp16"}));
  app.add_option("--clip-norm", a.clip_norm, "clip the global gradient norm to X")->type_name("X")->check(number(1e-12, 1e30));
  app.add_option("--freeze", a.freeze, "weights that stay fixed (names or comma-separated lists)")
      ->type_name("NAME")
      ->delimiter(',');
  app.add_option("--zero-stage", a.zero_stage,
                 "under mpirun: 1 partitions the optimizer state across the ranks (ZeRO stage 1; default 0)")
      ->type_name("S")
      ->check(integer(0, 1));
  app.add_flag("--adasum", a.adasum, "under mpirun: combine the ranks' gradients with Adasum (power-of-two ranks)");
  app.add_flag("--allreduce-post-accumulation", a.allreduce_post_accumulation,
               "under mpirun with --grad-accum: reduce the accumulated gradients once per step");
  app.add_option("--recompute", a.recompute,
                 "recompute activations in the backward pass instead of keeping them (same results, less memory): "
                 "layers (whole transformer layers), gelu, attn-dropout (names or comma-separated lists)")
      ->type_name("WHAT")
      ->delimiter(',')
      ->check(choice({"layers", "gelu", "attn-dropout"}));
  app.add_option("--recompute-layers", a.recompute_layers,
                 "with --recompute layers: the first N layers (default: every layer but the last)")
      ->type_name("N")
      ->check(integer(1, 1 << 20));
  app.add_option("--recompute-budget", a.recompute_budget,
                 "recompute the fewest graph segments that keep the activations saved for the backward pass within "
                 "SIZE (bytes, or with a unit: 512MB, 2GB)")
      ->type_name("SIZE")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--memory-efficient-gradient", a.memory_efficient_gradient,
               "update each weight as soon as its gradient is complete, freeing the gradient at once (not with "
               "--grad-accum, --clip-norm, --precision fp16 or mpirun)");
}

TrainSetup make_train_setup(const OptimizerArgs& a, const CLI::App& app, const std::string& model_bytes,
                            const LossModel& lm, int64_t total_steps) {
  TrainSetup s;
  TrainingParameters& p = s.params;
  p.loss_output_name = lm.args.loss_output;
  p.deterministic_compute = true;
  s.optimizer = a.optimizer;
  const CliOptimizer& o = cli_optimizer(a.optimizer);
  s.lr = given(app, "--lr") ? a.lr : default_lr(o);
  if (!takes_momentum(o)) forbid(app, "--momentum", "it goes with --optimizer " + optimizers_where(takes_momentum));
  if (!takes_betas(o)) forbid(app, "--betas", "it goes with --optimizer " + optimizers_where(takes_betas));
  if (!takes_eps(o)) forbid(app, "--eps", "it goes with --optimizer " + optimizers_where(takes_eps));
  auto& attrs = p.optimizer_attributes;
  p.training_optimizer_name = o.name;
  if (takes_momentum(o)) {
    // torch.optim.SGD's momentum: 0 is plain SGD, a value > 0 the momentum optimizer.
    const double m = given(app, "--momentum") ? a.momentum : o.cli == "sgd" ? 0.0 : 0.9;
    if (o.nesterov && m == 0) throw UsageError("option --momentum: nesterov needs a momentum > 0");
    p.training_optimizer_name = m > 0 ? "MomentumOptimizer" : "SGDOptimizer";
    if (m > 0) attrs["momentum"] = float(m);
    if (o.nesterov) p.optimizer_int_attributes["nesterov"] = 1;
  }
  if (given(app, "--weight-decay")) attrs["lambda"] = float(a.weight_decay);
  if (given(app, "--eps")) attrs["epsilon"] = float(a.eps);
  if (given(app, "--betas")) {
    const auto b = split(a.betas, ',');
    if (b.size() != 2) throw UsageError("option --betas expects two numbers B1,B2, got '" + a.betas + "'");
    for (size_t i = 0; i < 2; ++i) {
      char* end = nullptr;
      const double v = std::strtod(b[i].c_str(), &end);
      if (end == b[i].c_str() || *end || !(v >= 0 && v < 1))
        throw UsageError("option --betas: '" + b[i] + "' is not a number in [0, 1)");
      attrs[i ? "beta" : "alpha"] = float(v);
    }
  }
  s.schedule = a.lr_schedule;
  const bool decays = s.schedule == "linear" || s.schedule == "cosine" || s.schedule == "polynomial";
  if (!decays) forbid(app, "--end-lr", "it goes with --lr-schedule linear, cosine or polynomial");
  if (s.schedule != "polynomial" && s.schedule != "invscaling")
    forbid(app, "--lr-power", "it goes with --lr-schedule polynomial or invscaling");
  if (s.schedule == "invscaling" || s.schedule == "optimal")
    forbid(app, "--warmup", "it does not combine with --lr-schedule " + s.schedule);
  if (s.schedule != "constant" || a.warmup > 0) {
    p.lr_schedule = s.schedule;
    p.lr_schedule_params["eta0"] = s.lr;
    p.lr_schedule_params["warmup"] = double(a.warmup);
    p.lr_schedule_params["total"] = double(std::max(total_steps, a.warmup + 1));
    if (decays) p.lr_schedule_params["end_lr"] = a.end_lr;
    if (s.schedule == "polynomial") {
      if (given(app, "--lr-power") && a.lr_power < 1e-6) throw UsageError("option --lr-power: polynomial needs a power > 0");
      p.lr_schedule_params["power"] = given(app, "--lr-power") ? a.lr_power : 1.0;
    }
    if (s.schedule == "invscaling") p.lr_schedule_params["power_t"] = given(app, "--lr-power") ? a.lr_power : 0.25;
    if (decays && total_steps <= a.warmup)
      throw UsageError("option --warmup: " + std::to_string(a.warmup) + " warm-up steps leave nothing of a " +
                       std::to_string(total_steps) + "-step run to decay over");
  }
  p.gradient_accumulation_steps = a.grad_accum;
  p.deepspeed_zero_stage = a.zero_stage;
  p.enable_adasum = a.adasum;
  p.allreduce_post_accumulation = a.allreduce_post_accumulation;
  p.mixed_precision = a.precision == "fp32" ? "" : a.precision;
  for (const auto& r : a.recompute) {
    if (r == "layers") p.transformer_layer_recompute = true;
    if (r == "gelu") p.gelu_recompute = true;
    if (r == "attn-dropout") p.attn_dropout_recompute = true;
  }
  if (given(app, "--recompute-layers")) {
    if (!p.transformer_layer_recompute) throw UsageError("option --recompute-layers goes with --recompute layers");
    p.number_recompute_layers = a.recompute_layers;
  }
  if (given(app, "--recompute-budget")) {
    if (a.recompute_budget == 0 || a.recompute_budget > uint64_t(std::numeric_limits<int64_t>::max()))
      throw UsageError("option --recompute-budget: give a size > 0");
    p.recompute_budget_bytes = int64_t(a.recompute_budget);
  }
  p.use_memory_efficient_gradient = a.memory_efficient_gradient;
  if (given(app, "--clip-norm")) {
    p.enable_grad_norm_clip = true;
    p.max_grad_norm = float(a.clip_norm);
  }
  if (!a.freeze.empty()) {
    const ModelSummary sum = summarize_model_bytes(model_bytes, lm.base_dir);
    std::vector<std::string> names;
    for (const auto& i : sum.initializers) names.push_back(i.name);
    for (const auto& f : a.freeze) {
      if (std::find(names.begin(), names.end(), f) == names.end())
        throw_error<InvalidArgument>("--freeze: '", f, "' is not an initializer of the model (initializers: ",
                                     join(names), ")");
      p.weights_not_to_train.insert(f);
    }
  }
  p.validate();
  return s;
}

std::string recorded_options(const CLI::App& app) {
  std::string r;
  for (const auto& [name, values] : given_options(app)) {
    if (kFreeOptions.count(name)) continue;
    r += name;
    for (const auto& v : values) r += "\x1f" + v;
    r += "\n";
  }
  return r;
}

std::vector<std::string> options_argv(const CLI::App& train_app, const std::string& recorded) {
  std::vector<std::string> argv;
  for (const auto& [name, values] : parse_recorded(recorded)) {
    const CLI::Option* opt = train_app.get_option_no_throw(name);
    if (!opt) throw_error<InvalidArgument>("the checkpoint records option ", name, ", which onnxtrain train does not know");
    if (opt->get_type_size() == 0) {  // a flag
      argv.push_back(name);
      continue;
    }
    for (const auto& v : values) {
      argv.push_back(name);
      argv.push_back(v);
    }
  }
  return argv;
}

void check_same_options(const CLI::App& app, const std::string& recorded) {
  const auto then = parse_recorded(recorded);
  const auto now = parse_recorded(recorded_options(app));
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
