// The subcommands of `onnxtrain`. Each returns the process exit status; errors are thrown
// (onnxtrain::Error for bad data or models, cli::UsageError for bad command lines).
#pragma once

#include <string>
#include <vector>

#include "args.h"

namespace cli {

/// Exit statuses.
inline constexpr int kExitOk = 0, kExitError = 1, kExitUsage = 2, kExitInterrupted = 130;

const Command& train_command();
const Command& eval_command();
const Command& run_command();
const Command& export_command();
const Command& grad_command();
const Command& inspect_command();

int cmd_train(const Args& a);
int cmd_eval(const Args& a);
int cmd_run(const Args& a);
int cmd_export(const Args& a);
int cmd_grad(const Args& a);
int cmd_inspect(const Args& a);

}  // namespace cli
