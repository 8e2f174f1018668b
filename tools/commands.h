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
Command artifacts_command();

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
  std::string memory_limit;  ///< --memory-limit as given ("" : none)
  std::vector<std::string> providers;  ///< --provider, in preference order
  bool drop_last = false, no_shuffle = false, resume = false, profile = false;
  std::string out, metrics, curve, checkpoint_dir, progress = "auto";
};
const CommandInfo& train_info();
/// --threads N, --memory-limit BYTES[K|M|G|T] and --provider NAME of the commands that run a model.
void add_threads_option(CLI::App& app, int64_t& threads, std::string& memory_limit, std::vector<std::string>& providers);
/// SessionOptions with those: intra-op threads, the session.memory_limit_bytes entry (UsageError
/// for a malformed limit) and the execution providers ("cuda" / "cpu" or onnxruntime's names).
onnxtrain::SessionOptions session_options(int64_t threads, const std::string& memory_limit,
                                          const std::vector<std::string>& providers = {});
void define_train_options(CLI::App& app, TrainArgs& a);
/// `onnxtrain train DIR`: trains on-device training artifacts (cmd_artifacts.cpp).
int run_train_artifacts(const TrainArgs& a, const CLI::App& app);

}  // namespace cli
