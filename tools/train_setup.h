// From train's command line to a TrainingSession configuration: the optimizer and its
// hyper-parameters (names from onnxtrain::optimizer_names(), applicability from each optimizer's
// hyper-parameters), the schedule, frozen weights. `export --checkpoint` rebuilds the same
// configuration from the options a checkpoint recorded.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli.h"
#include "loss.h"
#include "onnxtrain/training.h"

namespace cli {

/// Optimizer, schedule and update options (--optimizer ... --freeze).
struct OptimizerArgs {
  std::string optimizer = "sgd";
  double lr = 0, momentum = 0, weight_decay = 0, eps = 0, end_lr = 0, lr_power = 0, clip_norm = 0;
  std::string betas;
  std::string lr_schedule = "constant";
  std::string precision = "fp32";
  int64_t warmup = 0, grad_accum = 1;
  std::vector<std::string> freeze;
  // Data parallelism under mpirun (docs/distributed.md).
  int64_t zero_stage = 0;
  bool adasum = false, allreduce_post_accumulation = false;
  // Memory (docs/memory.md): the results stay bitwise the same.
  std::vector<std::string> recompute;  ///< layers, gelu, attn-dropout
  int64_t recompute_layers = 0;
  uint64_t recompute_budget = 0;       ///< bytes
  bool memory_efficient_gradient = false;
};
/// Declares them on `app`.
void add_optimizer_options(CLI::App& app, OptimizerArgs& a);

struct TrainSetup {
  onnxtrain::TrainingParameters params;
  std::string optimizer;  ///< command-line name (sgd, adam, ...)
  double lr = 0;          ///< base learning rate
  std::string schedule;   ///< "constant" = none
};

/// `lm`: the model with its loss (build_loss_model); `total_steps`: optimizer steps of the whole
/// run (decaying schedules need it). `app`: the parsed command line (which options were given).
TrainSetup make_train_setup(const OptimizerArgs& a, const CLI::App& app, const std::string& model_bytes,
                            const LossModel& lm, int64_t total_steps);

/// The options a checkpoint records (everything that shapes the result), as text, and back
/// into an argument list for train's options.
std::string recorded_options(const CLI::App& app);
std::vector<std::string> options_argv(const CLI::App& train_app, const std::string& recorded);
/// Throws UsageError naming the first option that differs between this run and a checkpoint's.
void check_same_options(const CLI::App& app, const std::string& recorded);

}  // namespace cli
