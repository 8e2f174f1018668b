// onnxtrain eval (loss and accuracy or R² over a data set) and onnxtrain run (inference).
#include <cctype>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "onnxtrain/error.h"
#include "onnxtrain/io.h"
#include "onnxtrain/session.h"
#include "onnxtrain/trainer.h"
#include "report.h"

namespace cli {

using namespace onnxtrain;

namespace {

std::string format_values(const Tensor& t, int64_t max_values) {
  const int64_t n = std::min<int64_t>(t.numel(), max_values);
  const bool text = t.dtype() == DType::kString, big_int = t.dtype() == DType::kInt64;
  const std::vector<double> v = text || big_int ? std::vector<double>() : tensor_to_doubles(t);
  std::string s = "[";
  char buf[64];
  for (int64_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    if (text) {
      s += "'" + t.data<std::string>()[i] + "'";
      continue;
    }
    if (big_int) std::snprintf(buf, sizeof buf, "%lld", (long long)t.data<int64_t>()[i]);
    else if (t.dtype() == DType::kBool) std::snprintf(buf, sizeof buf, "%s", v[size_t(i)] != 0 ? "true" : "false");
    else if (dtype_is_integer(t.dtype())) std::snprintf(buf, sizeof buf, "%.0f", v[size_t(i)]);
    else std::snprintf(buf, sizeof buf, "%.6g", v[size_t(i)]);
    s += buf;
  }
  if (t.numel() > n) s += ", ...";
  return s + "]";
}


struct EvalArgs {
  std::string model;
  DataArgs data;
  LossArgs loss;
  int64_t batch_size = 1024, threads = 0;
  std::string memory_limit;
  std::vector<std::string> providers;
  bool json = false;
};

int run_eval(const EvalArgs& a, const CLI::App& app) {
  if (!given(app, "--data")) throw UsageError("missing --data FILE (see onnxtrain eval --help)");
  const LossModel lm = build_loss_model(read_file(a.model, "model file"), a.loss, dir_of(a.model));
  InferenceSession sess(lm.bytes.data(), lm.bytes.size(), session_options(a.threads, a.memory_limit, a.providers), dir_of(a.model));
  std::vector<NodeArg> features;
  const NodeArg* label = nullptr;
  const auto inputs = sess.get_inputs();
  for (const auto& i : inputs) {
    if (i.name == a.loss.label_name) label = &i;
    else features.push_back(i);
  }
  const DataSource src = data_source(a.data);
  const Dataset d = load_dataset(src, features, label, a.loss.label_name);
  const EvalResult r = evaluate(sess, d, lm.objective, a.batch_size);
  const std::string metric = metric_label(lm.objective.metric);
  const bool has_metric = !std::isnan(r.metric);
  if (a.json) {
    nlohmann::ordered_json o;
    o["samples"] = r.samples;
    o["loss"] = r.loss;
    if (has_metric) {
      o[metric] = r.metric;
      if (metric == "accuracy") o["correct"] = r.correct;
    }
    std::printf("%s\n", o.dump().c_str());
    return kExitOk;
  }
  std::printf("%s on %s: %lld samples\n", a.model.c_str(), source_name(src).c_str(), (long long)r.samples);
  std::printf("loss      %.6g (%s)\n", r.loss,
              a.loss.kind.empty() ? ("output '" + a.loss.loss_output + "', averaged over batches").c_str()
                                  : (a.loss.kind + ", " + a.loss.reduction).c_str());
  if (has_metric && metric == "accuracy")
    std::printf("accuracy  %.4f (%lld of %lld correct)\n", r.metric, (long long)r.correct, (long long)r.counted);
  else if (has_metric)
    std::printf("r2        %.6g\n", r.metric);
  return kExitOk;
}

struct RunArgs {
  std::string model;
  DataArgs data;
  std::string label_name = "label", out;
  int64_t threads = 0, print = 8;
  std::string memory_limit;
  std::vector<std::string> providers;
  bool stats = false;
};

int run_run(const RunArgs& a, const CLI::App& app) {
  if (!given(app, "--data") && !given(app, "--input")) throw UsageError("missing --data FILE (see onnxtrain run --help)");
  InferenceSession sess(a.model, session_options(a.threads, a.memory_limit, a.providers));
  const Dataset d = load_dataset(data_source(a.data), sess.get_inputs(), nullptr, "", a.label_name);
  auto outs = sess.run({}, d.arrays());
  auto decl = sess.get_outputs();
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t i = 0; i < outs.size(); ++i) {
    std::cout << decl[i].name << ": " << outs[i].describe() << " " << format_values(outs[i], a.print) << "\n";
    named.emplace_back(decl[i].name, outs[i]);
  }
  if (a.stats) {
    RunStats st = sess.last_run_stats();
    std::cout << "plan: " << st.steps << " kernel steps (" << st.dynamic_steps << " prepared at run time), "
              << st.folded_nodes << " nodes folded at plan time; arena " << st.arena_bytes << " bytes (without reuse "
              << st.naive_bytes << "), folded constants " << st.constant_bytes << " bytes\n";
  }
  if (given(app, "--out")) {
    write_npz(a.out, named);
    std::cout << "wrote " << a.out << "\n";
  }
  return kExitOk;
}

const CommandInfo& eval_info() {
  static const CommandInfo c{
      "eval", "MODEL --data FILE [--loss KIND] [options]",
      "loss and accuracy (classification losses) or R² (regression losses) of a model on data",
      "Evaluates MODEL on FILE batch by batch: the mean (or summed, --reduction sum) loss over all samples, and\n"
      "accuracy for cross_entropy/nll/log/bce_with_logits or R² (scikit-learn's r2_score) for the regression\n"
      "losses. Without --loss the model must output its loss (--loss-output).",
      "example:\n  onnxtrain eval trained.onnx --data test.npz --loss cross_entropy --score-output logits"};
  return c;
}

const CommandInfo& run_info() {
  static const CommandInfo c{
      "run", "MODEL --data FILE [--out OUT.npz] [options]",
      "run a model (inference) on .npz/.npy/.csv inputs; outputs printed and written to an .npz",
      "Runs MODEL on FILE (or --input NAME=FILE.npy, repeatable) and prints every output (the first N values\n"
      "of each). An .npz array named --label-name (default: label) that feeds no input is skipped, so training\n"
      "data can be run as is. --out writes the outputs to an .npz (atomically).",
      "example:\n  onnxtrain run trained.onnx --data test.npz --out predictions.npz"};
  return c;
}

}  // namespace

void add_threads_option(CLI::App& app, int64_t& threads, std::string& memory_limit, std::vector<std::string>& providers) {
  app.add_option("--threads", threads, "threads inside kernels (default: all cores)")->type_name("N")->check(integer(1, 4096));
  app.add_option("--provider", providers,
                 "execution provider, repeatable in preference order: cuda (CUDAExecutionProvider) or cpu "
                 "(default: cpu only; nodes a provider lacks run on the CPU)")
      ->type_name("NAME");
  app.add_option("--memory-limit", memory_limit,
                 "refuse execution plans needing more memory than this (e.g. 512M, 4G; default: physical memory)")
      ->type_name("BYTES");
}

SessionOptions session_options(int64_t threads, const std::string& memory_limit, const std::vector<std::string>& providers) {
  SessionOptions so;
  so.intra_op_num_threads = int(threads);
  for (const std::string& p : providers)
    so.providers.push_back(p == "cuda" ? "CUDAExecutionProvider" : p == "cpu" ? "CPUExecutionProvider" : p);
  if (memory_limit.empty()) return so;
  static const std::string units = "KMGT";
  std::string digits = memory_limit;
  uint64_t scale = 1;
  if (const size_t u = units.find(char(std::toupper(static_cast<unsigned char>(digits.back())))); u != std::string::npos) {
    scale = uint64_t(1) << (10 * (u + 1));
    digits.pop_back();
  }
  uint64_t v = 0;
  bool ok = !digits.empty() && digits.size() <= 15;
  for (char c : digits) ok = ok && c >= '0' && c <= '9';
  if (ok) v = std::stoull(digits) * scale;
  if (!ok || v == 0)
    throw UsageError("--memory-limit: expected a positive number of bytes with an optional K, M, G or T suffix, got '" +
                     memory_limit + "'");
  so.config_entries.emplace_back("session.memory_limit_bytes", std::to_string(v));
  return so;
}

Command eval_command() {
  return {eval_info, [](CLI::App& app) -> std::function<int()> {
            auto a = std::make_shared<EvalArgs>();
            app.add_option("MODEL", a->model, "model to evaluate")->required();
            add_data_options(app, a->data, false);
            add_loss_options(app, a->loss);
            app.add_option("--batch-size", a->batch_size, "samples per batch (default 1024)")
                ->type_name("N")
                ->check(integer(1, int64_t(1) << 40));
            add_threads_option(app, a->threads, a->memory_limit, a->providers);
            app.add_flag("--json", a->json, "print one JSON object instead of text");
            return [a, &app] { return run_eval(*a, app); };
          }};
}

Command run_command() {
  return {run_info, [](CLI::App& app) -> std::function<int()> {
            auto a = std::make_shared<RunArgs>();
            app.add_option("MODEL", a->model, "model to run")->required();
            add_data_options(app, a->data, true);
            app.add_option("--label-name", a->label_name, "array to skip when it feeds no input (default: label)")
                ->type_name("NAME");
            app.add_option("--out", a->out, "write the outputs there")->type_name("OUT.npz");
            add_threads_option(app, a->threads, a->memory_limit, a->providers);
            app.add_option("--print", a->print, "values printed per output (default 8)")
                ->type_name("N")
                ->check(integer(0, int64_t(1) << 40));
            app.add_flag("--stats", a->stats, "print the execution plan's figures (steps, folded nodes, arena size)");
            return [a, &app] {
              forbid(app, "--labels", "run feeds no labels");
              return run_run(*a, app);
            };
          }};
}

}  // namespace cli
