#include "loss.h"

#include "onnxtrain/error.h"
#include "onnxtrain/inspect.h"
#include "onnxtrain/training.h"

namespace cli {

using namespace onnxtrain;

void add_loss_options(CLI::App& app, LossArgs& a) {
  CLI::Option* loss = app.add_option("--loss", a.kind,
                                     "loss added to the model: " + join(loss_names()) +
                                         ". Omit it when the model already outputs its loss")
                          ->type_name("KIND")
                          ->check(choice(loss_names()));
  app.add_option("--loss-output", a.loss_output, "output holding the loss (default: loss)")->type_name("NAME");
  app.add_option("--score-output", a.score_output, "model output the loss scores (default: the first output)")
      ->type_name("NAME");
  app.add_option("--label-name", a.label_name, "label input, and its array in an .npz (default: label)")->type_name("NAME");
  app.add_option("--reduction", a.reduction, "how --loss reduces over samples (default: mean, as in PyTorch)")
      ->type_name("mean|sum")
      ->check(choice({"mean", "sum"}))
      ->needs(loss);
  app.add_option("--loss-arg", a.loss_args,
                 "loss argument, repeatable: delta (huber), l1_weight/l2_weight (elastic), label_smoothing, "
                 "ignore_index, class_weights=w0,w1,... (cross_entropy/nll), pos_weight (bce_with_logits), "
                 "from_logits/eps (log)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->needs(loss);
}

LossModel build_loss_model(const std::string& model_bytes, const LossArgs& a, const std::string& base_dir) {
  LossModel lm;
  lm.args = a;
  lm.base_dir = base_dir;
  for (const auto& kv : a.loss_args) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
      throw UsageError("option --loss-arg expects KEY=VALUE, got '" + kv + "'");
    if (kv.substr(0, eq) == "reduction") throw UsageError("use --reduction, not --loss-arg reduction=...");
    lm.loss_kwargs[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const ModelSummary s = summarize_model_bytes(model_bytes, base_dir);
  std::vector<std::string> outs;
  for (const auto& o : s.outputs) outs.push_back(o.name);
  auto find_output = [&](const std::string& n) -> const NodeArg* {
    for (const auto& o : s.outputs)
      if (o.name == n) return &o;
    return nullptr;
  };
  if (!a.score_output.empty() && !find_output(a.score_output))
    throw_error<InvalidArgument>("the model has no output '", a.score_output, "' (--score-output; outputs: ", join(outs), ")");
  if (a.kind.empty()) {
    if (!find_output(a.loss_output))
      throw_error<InvalidArgument>("the model has no output '", a.loss_output, "' (its outputs: ", join(outs),
                                   "): add a loss with --loss KIND, or name the loss output with --loss-output");
    lm.bytes = model_bytes;
    lm.objective.loss_output = a.loss_output;  // the model's own loss: no metric
    return lm;
  }
  if (s.outputs.empty()) throw_error<InvalidArgument>("the model has no output to put a loss on");
  const NodeArg& score = a.score_output.empty() ? s.outputs[0] : *find_output(a.score_output);
  lm.loss_kwargs["reduction"] = a.reduction;
  lm.bytes = add_loss_output(model_bytes, a.kind, a.loss_output, a.label_name, "", {}, score.name, lm.loss_kwargs);
  lm.objective = loss_objective(a.kind, lm.loss_kwargs, score, a.loss_output, a.label_name);
  return lm;
}

}  // namespace cli
