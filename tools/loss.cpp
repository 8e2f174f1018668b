#include "loss.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "onnxtrain/error.h"
#include "onnxtrain/inspect.h"
#include "onnxtrain/training.h"
#include "report.h"

namespace cli {

using namespace onnxtrain;

namespace {
const std::vector<std::string> kLosses = {"squared_error", "l2",  "absolute_error", "l1",
                                          "elastic",       "huber", "log",          "cross_entropy",
                                          "nll",           "bce_with_logits"};
}

std::vector<Option> loss_options() {
  return {
      {"--loss", "KIND",
       "loss added to the model: squared_error (l2), absolute_error (l1), elastic, huber, log, cross_entropy, nll, "
       "bce_with_logits. Omit it when the model already outputs its loss"},
      {"--loss-output", "NAME", "output holding the loss (default: loss)"},
      {"--score-output", "NAME", "model output the loss scores (default: the first output)"},
      {"--label-name", "NAME", "label input, and its array in an .npz (default: label)"},
      {"--reduction", "mean|sum", "how --loss reduces over samples (default: mean, as in PyTorch)"},
      {"--loss-arg", "KEY=VALUE",
       "loss argument, repeatable: delta (huber), l1_weight/l2_weight (elastic), label_smoothing, ignore_index, "
       "class_weights=w0,w1,... (cross_entropy/nll), pos_weight (bce_with_logits), from_logits/eps (log)",
       true},
  };
}

LossConfig loss_config(const Args& a) {
  LossConfig c;
  c.kind = a.choice("--loss", "", kLosses);
  c.loss_output = a.str("--loss-output", "loss");
  c.score_output = a.str("--score-output");
  c.label_name = a.str("--label-name", "label");
  c.reduction = a.choice("--reduction", "mean", {"mean", "sum"});
  if (c.kind.empty()) {
    a.forbid("--reduction", "it goes with --loss");
    a.forbid("--loss-arg", "it goes with --loss");
  }
  auto it = a.given().find("--loss-arg");
  if (it != a.given().end())
    for (const auto& kv : it->second) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
        throw UsageError("option --loss-arg expects KEY=VALUE, got '" + kv + "'");
      if (kv.substr(0, eq) == "reduction") throw UsageError("use --reduction, not --loss-arg reduction=...");
      c.loss_args[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  return c;
}

LossModel build_loss_model(const std::string& model_bytes, const LossConfig& cfg, const std::string& base_dir) {
  const ModelSummary s = summarize_model_bytes(model_bytes, base_dir);
  std::vector<std::string> outs;
  for (const auto& o : s.outputs) outs.push_back(o.name);
  auto find_output = [&](const std::string& n) -> const NodeArg* {
    for (const auto& o : s.outputs)
      if (o.name == n) return &o;
    return nullptr;
  };
  LossModel lm;
  lm.cfg = cfg;
  lm.base_dir = base_dir;
  if (!cfg.score_output.empty() && !find_output(cfg.score_output))
    throw_error<InvalidArgument>("the model has no output '", cfg.score_output, "' (--score-output; outputs: ", join(outs), ")");
  if (cfg.kind.empty()) {
    if (!find_output(cfg.loss_output))
      throw_error<InvalidArgument>("the model has no output '", cfg.loss_output, "' (its outputs: ", join(outs),
                                   "): add a loss with --loss KIND, or name the loss output with --loss-output");
    lm.bytes = model_bytes;
    lm.score_output = cfg.score_output;
    return lm;
  }
  if (s.outputs.empty()) throw_error<InvalidArgument>("the model has no output to put a loss on");
  lm.score_output = cfg.score_output.empty() ? s.outputs[0].name : cfg.score_output;
  std::map<std::string, std::string> kw = cfg.loss_args;
  kw["reduction"] = cfg.reduction;
  lm.bytes = add_loss_output(model_bytes, cfg.kind, cfg.loss_output, cfg.label_name, "", {}, lm.score_output, kw);
  const NodeArg& score = *find_output(lm.score_output);
  const std::string& k = cfg.kind;
  if (k == "cross_entropy" || k == "nll") {
    lm.scoring.kind = Scoring::kArgmax;
    if (cfg.loss_args.count("ignore_index")) {
      lm.scoring.has_ignore = true;
      lm.scoring.ignore_index = std::stoll(cfg.loss_args.at("ignore_index"));
    }
  } else if (k == "log") {
    const bool two = score.has_shape && score.shape.size() == 2 && score.shape[1].value == 2;
    const bool logits = cfg.loss_args.count("from_logits") && std::atof(cfg.loss_args.at("from_logits").c_str()) != 0;
    lm.scoring.kind = two && !logits ? Scoring::kArgmax : Scoring::kThreshold;
    lm.scoring.threshold = logits ? 0.0 : 0.5;
  } else if (k == "bce_with_logits") {
    lm.scoring.kind = Scoring::kThreshold;
    lm.scoring.threshold = 0.0;
  } else {
    lm.scoring.kind = Scoring::kRegression;
  }
  return lm;
}

double scalar_value(const Tensor& t) {
  if (t.numel() != 1) throw_error<InvalidArgument>("the loss output is ", t.describe(), ", not a scalar");
  return to_doubles(t)[0];
}

void ScoreAccumulator::add(const Tensor& score, const Tensor& label) {
  if (s_.kind == Scoring::kNone) return;
  const std::vector<double> s = to_doubles(score), y = to_doubles(label);
  const int64_t n = score.rank() ? score.dim(0) : 1;
  if (s_.kind == Scoring::kArgmax) {
    const int64_t c = score.rank() >= 2 ? score.dim(1) : 1;
    const int64_t inner = n * c != 0 ? score.numel() / (n * c) : 0;
    if (int64_t(y.size()) != n * inner)
      throw_error<InvalidArgument>("labels ", label.describe(), " do not match the scores ", score.describe());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < inner; ++j) {
        const double yl = y[size_t(i * inner + j)];
        if (s_.has_ignore && int64_t(yl) == s_.ignore_index) continue;
        int64_t best = 0;
        for (int64_t k = 1; k < c; ++k)
          if (s[size_t((i * c + k) * inner + j)] > s[size_t((i * c + best) * inner + j)]) best = k;
        correct_ += double(best) == yl;
        ++total_;
      }
    return;
  }
  if (s.size() != y.size())
    throw_error<InvalidArgument>("labels ", label.describe(), " do not match the scores ", score.describe());
  if (s_.kind == Scoring::kThreshold) {
    for (size_t i = 0; i < s.size(); ++i) {
      correct_ += (s[i] > s_.threshold) == (y[i] != 0);
      ++total_;
    }
    return;
  }
  const size_t k = n ? s.size() / size_t(n) : 0;
  if (sum_y_.empty()) sum_y_.assign(k, 0), sum_y2_.assign(k, 0), ss_res_.assign(k, 0);
  if (sum_y_.size() != k) throw_error<InvalidArgument>("scores change their number of outputs between batches");
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t j = i % k;
    sum_y_[j] += y[i];
    sum_y2_[j] += y[i] * y[i];
    ss_res_[j] += (y[i] - s[i]) * (y[i] - s[i]);
  }
  total_ += n;
}

double ScoreAccumulator::value() const {
  if (s_.kind != Scoring::kRegression) return total_ ? double(correct_) / double(total_) : 0.0;
  // sklearn's r2_score: per output 1 - SS_res / SS_tot (1 when both are 0, 0 when only SS_tot is),
  // averaged over outputs.
  double r = 0;
  for (size_t j = 0; j < sum_y_.size(); ++j) {
    const double mean = sum_y_[j] / double(total_);
    const double ss_tot = std::max(0.0, sum_y2_[j] - double(total_) * mean * mean);
    r += ss_tot > 0 ? 1.0 - ss_res_[j] / ss_tot : ss_res_[j] == 0 ? 1.0 : 0.0;
  }
  return sum_y_.empty() ? 0.0 : r / double(sum_y_.size());
}

EvalResult evaluate(const Dataset& d, int64_t batch_size, const LossModel& lm,
                    const std::function<std::vector<Tensor>(const Dataset&)>& run) {
  // Class weights and ignored labels make a mean loss a ratio of sums: one batch keeps it exact.
  if (lm.cfg.loss_args.count("class_weights") || lm.cfg.loss_args.count("ignore_index")) batch_size = d.rows;
  std::vector<int64_t> idx(size_t(d.rows));
  std::iota(idx.begin(), idx.end(), 0);
  ScoreAccumulator acc(lm.scoring);
  EvalResult r;
  double total = 0;
  for (int64_t b = 0; b < d.rows; b += batch_size) {
    const int64_t e = std::min(d.rows, b + batch_size);
    Dataset batch = take_rows(d, idx, size_t(b), size_t(e));
    std::vector<Tensor> out = run(batch);
    const double l = scalar_value(out.at(0));
    total += lm.cfg.reduction == "sum" && !lm.cfg.kind.empty() ? l : l * double(e - b);
    if (out.size() > 1 && out[1].defined() && lm.scoring.kind != Scoring::kNone)
      acc.add(out[1], array(batch, lm.cfg.label_name));
  }
  r.samples = d.rows;
  r.loss = lm.cfg.reduction == "sum" && !lm.cfg.kind.empty() ? total : total / double(d.rows);
  r.has_metric = acc.defined();
  r.metric = acc.value();
  r.correct = acc.correct();
  r.total = acc.total();
  return r;
}

}  // namespace cli

namespace cli {

std::string ScoreAccumulator::to_text() const {
  std::string t = std::to_string(correct_) + " " + std::to_string(total_) + " " + std::to_string(sum_y_.size());
  for (const auto* v : {&sum_y_, &sum_y2_, &ss_res_})
    for (double x : *v) t += fmt(" %a", x);  // hexadecimal: exact
  return t;
}

void ScoreAccumulator::from_text(const std::string& t) {
  std::istringstream in(t);
  size_t k = 0;
  if (!(in >> correct_ >> total_ >> k) || k > (size_t(1) << 20))
    onnxtrain::throw_error<onnxtrain::InvalidArgument>("damaged score state in checkpoint metadata");
  for (auto* v : {&sum_y_, &sum_y2_, &ss_res_}) {
    v->assign(k, 0.0);
    for (auto& x : *v) {
      std::string w;
      if (!(in >> w)) onnxtrain::throw_error<onnxtrain::InvalidArgument>("damaged score state in checkpoint metadata");
      x = std::strtod(w.c_str(), nullptr);
    }
  }
}

}  // namespace cli
