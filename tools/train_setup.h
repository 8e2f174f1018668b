// From train's command line to a TrainingSession configuration: the loss model, the optimizer
// and its hyper-parameters, the schedule, frozen weights. `export --checkpoint` rebuilds the same
// configuration from the options a checkpoint recorded.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "args.h"
#include "loss.h"
#include "onnxtrain/training.h"

namespace cli {

/// Optimizer, schedule and update options (--optimizer ... --grad-accum).
std::vector<Option> optimizer_options();

struct TrainSetup {
  LossModel lm;
  onnxtrain::TrainingParameters params;
  std::string optimizer;  ///< command-line name (sgd, adam, ...)
  double lr = 0;          ///< base learning rate
  std::string schedule;   ///< "" = constant
};

/// `lm`: the model with its loss (build_loss_model); `total_steps`: optimizer steps of the whole
/// run (decaying schedules need it).
TrainSetup make_train_setup(const Args& a, const std::string& model_bytes, const LossModel& lm, int64_t total_steps);

/// The options a checkpoint records (everything that shapes the result), as text, and back
/// into an argument list for `train_command()`.
std::string recorded_options(const Args& a);
std::vector<std::string> options_argv(const Command& cmd, const std::string& recorded);
/// Throws UsageError naming the first option that differs between this run and a checkpoint's.
void check_same_options(const Args& a, const std::string& recorded);

}  // namespace cli
