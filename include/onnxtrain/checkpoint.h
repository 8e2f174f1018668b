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

/// Reads the header of a checkpoint written by TrainingSession::save_checkpoint: its framing and
/// header checksum are verified, tensor data is not read (TrainingSession::load_checkpoint verifies
/// every tensor's checksum). Throws InvalidArgument (truncated, corrupted header, not a checkpoint,
/// too new) or IOError.
CheckpointInfo read_checkpoint_info(const std::string& path);

/// The whole content of a file in onnxtrain's checkpoint format (the one TrainingSession writes:
/// CRC per tensor and header, 64-bit offsets, written atomically). Trainers whose state is not a
/// session's alone — ORTTrainer's state dict and user_dict — keep it in this one format rather
/// than in one of their own. Names are free text; `kind` tells such files apart from a session's.
struct CheckpointFile {
  std::string kind;                            ///< what wrote it ("" for TrainingSession)
  std::map<std::string, int64_t> counters;     ///< integers by name
  std::map<std::string, std::string> text;     ///< strings by name
  std::vector<std::pair<std::string, Tensor>> tensors;  ///< in order; names unique
};

/// Writes `c` atomically (the previous file at `path`, if any, stays whole on failure). Throws
/// InvalidArgument for a repeated or empty tensor name, IOError when it cannot write.
void write_checkpoint_file(const std::string& path, const CheckpointFile& c);
/// Reads and verifies any checkpoint file (a session's too: kind ""). Throws InvalidArgument
/// naming what is wrong (truncated, corrupted, not a checkpoint, too new) or IOError.
CheckpointFile read_checkpoint_file(const std::string& path);

}  // namespace onnxtrain
