// A training run's state with one owner, in the shape of onnxruntime's on-device CheckpointState:
// the model's parameters (trainable and frozen, a running statistic is a frozen parameter that the
// training graph updates), the optimizer's groups (step counter, learning rates, per-parameter
// states such as Adam's moments) and user properties (int64, float, string). Saved and loaded in
// onnxruntime's checkpoint format ("ODTC", FlatBuffers, version 2: the files onnxruntime 1.17-1.19
// writes and reads), tensors over the threshold in the "<checkpoint>.data" sidecar; version 1 files
// (onnxruntime 1.16, which later onnxruntime versions refuse) load too.
//
// A vocabulary header (it includes only tensor.h): any layer may hold a CheckpointState.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

#include "onnxtrain/tensor.h"

namespace onnxtrain {

/// A user property: int64, float or string (onnxruntime's three kinds).
using Property = std::variant<int64_t, float, std::string>;

/// One model parameter.
struct Parameter {
  DType dtype = DType::kUndefined;  ///< known even in a nominal state
  Tensor data;                      ///< the value; undefined in a nominal state
  bool requires_grad = true;        ///< trainable (false: frozen, saved as a frozen parameter)
  Tensor grad;                      ///< gradient accumulation buffer of a training graph; never saved
  /// The shape of a parameter without a value (a nominal state's, read from and written to the
  /// file); with a value, data.shape() is the shape.
  Shape nominal_shape;

  /// The parameter's shape, with or without a value.
  const Shape& shape() const { return data.defined() ? data.shape() : nominal_shape; }
};

/// An optimizer parameter group (onnxruntime has one, "group0").
struct OptimizerGroup {
  int64_t step = 0;                    ///< optimizer updates applied
  float initial_learning_rate = 0.0f;  ///< where a learning-rate scheduler starts
  /// The current learning rate. onnxruntime's format does not store it: after a load it is
  /// onnxruntime's default 0.001 until set or scheduled.
  float learning_rate = 0.001f;
  /// Per parameter name, its states by name ("momentum0", "momentum1"), each of its shape.
  std::map<std::string, std::map<std::string, Tensor>> states;
};

/// Bytes of tensor data past which save() moves every tensor's bytes to "<path>.data" (onnxruntime's
/// threshold: a FlatBuffer cannot exceed 2 GiB).
inline constexpr uint64_t kCheckpointExternalDataThreshold = uint64_t(1800) << 20;

/// How CheckpointState::save writes.
struct CheckpointSaveOptions {
  bool include_optimizer_state = false;  ///< write the optimizer groups (onnxruntime's default: no)
  uint64_t external_data_threshold = kCheckpointExternalDataThreshold;  ///< see the constant
};

/// Every tensor and property of a training run, by name (maps keep names sorted, as the format does).
struct CheckpointState {
  std::map<std::string, Parameter> parameters;
  std::map<std::string, OptimizerGroup> optimizer_groups;
  std::map<std::string, Property> properties;
  /// Parameters are names and element types only (onnxruntime's nominal checkpoint): their values
  /// come later (Module.copy_buffer_to_parameters).
  bool nominal = false;

  /// Reads an ODTC file (and its "<path>.data" sidecar when it has one). Throws InvalidArgument
  /// naming what is wrong (not a checkpoint, an unsupported version, a corrupt table or tensor,
  /// data past the sidecar's end) or IOError. Tensors stored inside the FlatBuffer become views of
  /// the file's bytes, read once (no second copy of the state); sidecar tensors are read one by one.
  static CheckpointState load(const std::string& path);
  /// Reads an ODTC checkpoint from memory (one without external data).
  static CheckpointState load_from_buffer(const void* data, size_t size);
  /// Writes atomically (the sidecar first, then the checkpoint, each by the atomic file writer);
  /// throws IOError, or InvalidArgument for a state the format cannot hold (a parameter without a
  /// value outside a nominal state, an optimizer state of another shape than its parameter).
  void save(const std::string& path, const CheckpointSaveOptions& options = {}) const;
  /// The ODTC bytes of a state whose tensors fit in one FlatBuffer (no sidecar).
  std::string save_to_buffer(bool include_optimizer_state = false) const;

  /// The parameter `name`; throws InvalidArgument naming it when absent.
  Parameter& parameter(const std::string& name);
  const Parameter& parameter(const std::string& name) const;
};

}  // namespace onnxtrain
