// The loss a command trains or evaluates with (the loss builder's names, onnxtrain::loss_names())
// and the Objective that goes with it: accuracy for classification losses, R² for regression ones.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli.h"
#include "onnxtrain/trainer.h"

namespace cli {

/// --loss, --loss-output, --score-output, --label-name, --reduction, --loss-arg.
struct LossArgs {
  std::string kind;                  ///< "" = the model already outputs its loss
  std::string loss_output = "loss";
  std::string score_output;          ///< "" = the model's first output
  std::string label_name = "label";
  std::string reduction = "mean";
  std::vector<std::string> loss_args;  ///< KEY=VALUE
};
/// Declares them on `app` (shared by train, eval, grad).
void add_loss_options(CLI::App& app, LossArgs& a);

/// A model with its loss: the loss builder's output (or the model itself when it has a loss).
struct LossModel {
  std::string bytes;
  LossArgs args;
  std::map<std::string, std::string> loss_kwargs;  ///< add_loss_output's kwargs (reduction included)
  onnxtrain::Objective objective;  ///< what eval and train report (no metric for a model's own loss)
  std::string base_dir;            ///< folder of the model's external data ("" = none)
};
/// Throws InvalidArgument naming a missing loss output, an unknown score output or loss argument.
/// `base_dir`: the model file's folder, where its external data (if any) lies.
LossModel build_loss_model(const std::string& model_bytes, const LossArgs& a, const std::string& base_dir);

}  // namespace cli
