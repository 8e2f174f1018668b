// onnxtrain eval (loss and accuracy or R² over a data set) and onnxtrain run (inference).
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "data.h"
#include "json.h"
#include "loss.h"
#include "onnxtrain/error.h"
#include "onnxtrain/io.h"
#include "onnxtrain/session.h"

namespace cli {

using namespace onnxtrain;

namespace {

std::string format_values(const Tensor& t, int64_t max_values) {
  const int64_t n = std::min<int64_t>(t.numel(), max_values);
  const bool text = t.dtype() == DType::kString, big_int = t.dtype() == DType::kInt64;
  const std::vector<double> v = text || big_int ? std::vector<double>() : to_doubles(t);
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

SessionOptions session_options(const Args& a) {
  SessionOptions so;
  so.intra_op_num_threads = int(a.integer("--threads", 0, 1, 4096));
  return so;
}

}  // namespace

const Command& eval_command() {
  static const Command c = [] {
    Command c;
    c.name = "eval";
    c.synopsis = "MODEL --data FILE [--loss KIND] [options]";
    c.summary = "loss and accuracy (classification losses) or R² (regression losses) of a model on data";
    c.description =
        "Evaluates MODEL on FILE batch by batch: the mean (or summed, --reduction sum) loss over all samples, and\n"
        "accuracy for cross_entropy/nll/log/bce_with_logits or R² (scikit-learn's r2_score) for the regression\n"
        "losses. Without --loss the model must output its loss (--loss-output).";
    c.positional = {"MODEL"};
    c.options = data_options(false);
    for (auto& o : loss_options()) c.options.push_back(o);
    c.options.push_back({"--batch-size", "N", "samples per batch (default 1024)"});
    c.options.push_back({"--threads", "N", "threads inside kernels (default: all cores)"});
    c.options.push_back({"--json", "", "print one JSON object instead of text"});
    c.epilog = "example:\n  onnxtrain eval trained.onnx --data test.npz --loss cross_entropy --score-output logits";
    return c;
  }();
  return c;
}

int cmd_eval(const Args& a) {
  const std::string model_path = a.positional(0);
  if (!a.has("--data")) throw UsageError("missing --data FILE (see onnxtrain eval --help)");
  const int64_t batch = a.integer("--batch-size", 1024, 1, int64_t(1) << 40);
  const bool json = a.flag("--json");
  const LossModel lm = build_loss_model(read_file(model_path, "model file"), loss_config(a), dir_of(model_path));
  InferenceSession sess(lm.bytes.data(), lm.bytes.size(), session_options(a), dir_of(model_path));
  std::vector<NodeArg> features;
  const NodeArg* label = nullptr;
  const auto inputs = sess.get_inputs();
  for (const auto& i : inputs) {
    if (i.name == lm.cfg.label_name) label = &i;
    else features.push_back(i);
  }
  const Dataset d = load_dataset(data_source(a), features, label, lm.cfg.label_name);
  std::vector<std::string> names{lm.cfg.loss_output};
  if (!lm.score_output.empty() && lm.scoring.kind != Scoring::kNone) names.push_back(lm.score_output);
  const EvalResult r = evaluate(d, batch, lm, [&](const Dataset& b) { return sess.run(names, b.arrays); });
  const std::string metric = lm.scoring.metric_name();
  if (json) {
    JsonObject o;
    o.add("samples", double(r.samples));
    o.add("loss", r.loss);
    if (r.has_metric) {
      o.add(metric, r.metric);
      if (metric == "accuracy") o.add("correct", double(r.correct));
    }
    std::printf("%s\n", o.str().c_str());
    return kExitOk;
  }
  std::printf("%s on %s: %lld samples\n", model_path.c_str(), d.name.c_str(), (long long)r.samples);
  std::printf("loss      %.6g (%s)\n", r.loss,
              lm.cfg.kind.empty() ? ("output '" + lm.cfg.loss_output + "', averaged over batches").c_str()
                                  : (lm.cfg.kind + ", " + lm.cfg.reduction).c_str());
  if (r.has_metric && metric == "accuracy")
    std::printf("accuracy  %.4f (%lld of %lld correct)\n", r.metric, (long long)r.correct, (long long)r.total);
  else if (r.has_metric)
    std::printf("r2        %.6g\n", r.metric);
  return kExitOk;
}

const Command& run_command() {
  static const Command c = [] {
    Command c;
    c.name = "run";
    c.synopsis = "MODEL --data FILE [--out OUT.npz] [options]";
    c.summary = "run a model (inference) on .npz/.npy/.csv inputs; outputs printed and written to an .npz";
    c.description =
        "Runs MODEL on FILE (or --input NAME=FILE.npy, repeatable) and prints every output (the first N values\n"
        "of each). An .npz array named --label-name (default: label) that feeds no input is skipped, so training\n"
        "data can be run as is. --out writes the outputs to an .npz (atomically).";
    c.positional = {"MODEL"};
    c.options = data_options(true);
    for (Option o : std::vector<Option>{
             {"--label-name", "NAME", "array to skip when it feeds no input (default: label)"},
             {"--out", "OUT.npz", "write the outputs there"},
             {"--threads", "N", "threads inside kernels (default: all cores)"},
             {"--print", "N", "values printed per output (default 8)"},
             {"--stats", "", "print the execution plan's figures (steps, folded nodes, arena size)"},
         })
      c.options.push_back(o);
    c.epilog = "example:\n  onnxtrain run trained.onnx --data test.npz --out predictions.npz";
    return c;
  }();
  return c;
}

int cmd_run(const Args& a) {
  const std::string model_path = a.positional(0);
  if (!a.has("--data") && !a.has("--input")) throw UsageError("missing --data FILE (see onnxtrain run --help)");
  const int64_t print_n = a.integer("--print", 8, 0, int64_t(1) << 40);
  a.forbid("--labels", "run feeds no labels");
  InferenceSession sess(model_path, session_options(a));
  const Dataset d = load_dataset(data_source(a), sess.get_inputs(), nullptr, "", a.str("--label-name", "label"));
  auto outs = sess.run({}, d.arrays);
  auto decl = sess.get_outputs();
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t i = 0; i < outs.size(); ++i) {
    std::cout << decl[i].name << ": " << outs[i].describe() << " " << format_values(outs[i], print_n) << "\n";
    named.emplace_back(decl[i].name, outs[i]);
  }
  if (a.flag("--stats")) {
    RunStats st = sess.last_run_stats();
    std::cout << "plan: " << st.steps << " kernel steps (" << st.dynamic_steps << " prepared at run time), "
              << st.folded_nodes << " nodes folded at plan time; arena " << st.arena_bytes << " bytes (without reuse "
              << st.naive_bytes << "), folded constants " << st.constant_bytes << " bytes\n";
  }
  if (a.has("--out")) {
    write_npz(a.str("--out"), named);
    std::cout << "wrote " << a.str("--out") << "\n";
  }
  return kExitOk;
}

}  // namespace cli
