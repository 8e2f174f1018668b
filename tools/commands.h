// The subcommands of `onnxtrain`. Each declares its options on a CLI::App and returns the
// process exit status; errors are thrown (onnxtrain::Error for bad data or models,
// cli::UsageError for bad command lines).
#pragma once

#include <string>
#include <vector>

#include "cli.h"
#include "data.h"
#include "loss.h"
#include "train_setup.h"

namespace cli {

Command train_command();
Command eval_command();
Command run_command();
Command export_command();
Command grad_command();
Command inspect_command();

/// train's arguments; export rebuilds them from the options a checkpoint recorded.
struct TrainArgs {
  std::string model;
  DataArgs data;
  std::string validation_data, validation_labels;
  double validation_split = 0;
  LossArgs loss;
  OptimizerArgs opt;
  int64_t batch_size = 32, epochs = 1, steps = 0, seed = 0, threads = 0, eval_batch_size = 1024;
  int64_t log_every = 0, checkpoint_every = 0;
  bool drop_last = false, no_shuffle = false, resume = false;
  std::string out, metrics, curve, checkpoint_dir, progress = "auto";
};
const CommandInfo& train_info();
void define_train_options(CLI::App& app, TrainArgs& a);

}  // namespace cli
