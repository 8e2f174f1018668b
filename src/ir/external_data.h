// External data: a model's tensors kept in a file beside it (ONNX's external data), read with every
// field validated before it sizes an allocation, and written while a model is saved.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/ir.h"

namespace onnxtrain::ir {

/// Contents of external data files held in memory, by location (onnxruntime's
/// add_external_initializers_from_files_in_memory): uint8 tensors of the files' bytes.
using ExternalFiles = std::map<std::string, Tensor>;

/// Reads the external data of `p` into a new tensor of `dtype` and `shape` (`nbytes` bytes). The
/// location must be relative, free of ".." and of symbolic links, and name a regular file under
/// `base_dir` whose range (offset, length) lies inside it and holds exactly nbytes; a file that
/// changes while it is read is refused. A location found in `in_memory` is read from there instead
/// (same range checks). Throws InvalidModel naming the tensor `what`.
Tensor read_external_data(const onnx::TensorProto& p, const std::string& what, const std::string& base_dir,
                          DType dtype, const Shape& shape, uint64_t nbytes, const ExternalFiles* in_memory = nullptr);

/// Tensors headed for the external data file while a model is converted to its proto: initializers
/// of at least `threshold` bytes (strings and empty tensors stay inline), laid out in order, those
/// of 4 KiB or more at 4 KiB-aligned offsets (mappable), the others 64-byte aligned.
struct ExternalPlan {
  std::string location;  ///< the data file's name, relative to the model's folder
  uint64_t threshold = 1;
  std::vector<std::pair<const Tensor*, uint64_t>> tensors;  ///< tensor, offset in the data file
  uint64_t end = 0;                                         ///< size of the data file
  /// How much larger the proto is with these tensors inline (a lower bound: the parents' own
  /// length prefixes may grow a few bytes more).
  int64_t inline_growth = 0;

  bool takes(const Tensor& t) const {
    return t.dtype() != DType::kString && t.nbytes() > 0 && t.nbytes() >= threshold;
  }
  /// Writes `t` into `p` as a reference into the data file and plans its bytes there.
  void add(const Tensor& t, const std::string& name, onnx::TensorProto* p);
};

/// Writes `plan`'s data file at `data_path` and the model `p` that refers to it at `path`, both by
/// the one writer's rule (core/atomic_file.h): the data file goes in place first, the model last;
/// a failure in between puts the previous data file back. A symbolic link at data_path is refused
/// (the loader reads external data only from a file in the model's folder). Throws IOError.
void write_with_external_data(const onnx::ModelProto& p, const ExternalPlan& plan, const std::string& path,
                              const std::string& data_path);

}  // namespace onnxtrain::ir
