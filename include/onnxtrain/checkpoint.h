// Reading a checkpoint without a session: what a tool needs to rebuild the session that wrote it
// (its optimizer, counters and the trainer's metadata). Restoring the state itself is
// TrainingSession::load_checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain {

struct CheckpointInfo {
  std::string optimizer;            ///< TrainingParameters.training_optimizer_name of the writer
  int64_t optimizer_step = 0;       ///< optimizer updates done
  int64_t micro_step = 0;           ///< run() calls since the last update (gradient accumulation)
  std::map<std::string, std::string> metadata;  ///< as passed to TrainingSession::save_checkpoint
  std::vector<std::pair<std::string, Shape>> weights;  ///< model tensors stored (name, shape)
};

/// Reads and verifies a checkpoint written by TrainingSession::save_checkpoint. Throws
/// InvalidArgument (truncated, corrupted, not a checkpoint, too new) or IOError.
CheckpointInfo read_checkpoint_info(const std::string& path);

}  // namespace onnxtrain
