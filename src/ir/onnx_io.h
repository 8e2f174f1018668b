// ONNX file <-> IR conversion. Everything read from a file is validated here; failures throw
// InvalidModel / InvalidGraph / NotImplemented / IOError naming the tensor, node or value.
// Tensors in external data files: ir/external_data.h; typing the IR: ir/infer.h.
#pragma once

#include <map>
#include <string>

#include "ir/external_data.h"
#include "ir/ir.h"
#include "onnxtrain/io.h"

namespace onnxtrain::ir {

inline constexpr int64_t kMinIrVersion = 3;
/// IR 9 and 10 add element types (float8, int4: refused, naming them, as unsupported), function
/// overloads, nodes naming an overload and default attribute values of functions (refused by
/// name); their other content reads as IR 8.
inline constexpr int64_t kMaxIrVersion = 10;
inline constexpr int64_t kMaxOpset = 17;  ///< newest default-domain opset onnxtrain implements
/// Newest default-domain opset a model may import: imports of 18 to 21 load with their nodes
/// rewritten into the opset-17 form (ir/opset_lower.h), or refused naming operator and version.
inline constexpr int64_t kMaxImportedOpset = 21;

/// What a session's options change while its model loads.
struct LoadOptions {
  /// Initializers of the main graph the caller replaces (onnxruntime's add_initializer /
  /// add_external_initializers): their data in the model is not read — an external file that only
  /// they use may be absent — and the caller's tensor must have the model's element type and dims.
  std::map<std::string, Tensor> initializers;
  /// Contents of external data files by location (add_external_initializers_from_files_in_memory),
  /// read instead of the files beside the model; also for a model loaded from bytes.
  ExternalFiles external_files;
};

/// Loads and validates a model file; external data is resolved beside it.
Model load_model_file(const std::string& path, const LoadOptions* options = nullptr);
/// Loads and validates serialized ModelProto bytes. External data (if any) is resolved in
/// `base_dir`; with an empty base_dir a model that references external data is refused (unless
/// `options` holds the files in memory).
Model load_model_bytes(const void* data, size_t size, const std::string& base_dir = "",
                       const LoadOptions* options = nullptr);

/// Serializes to ModelProto bytes (tensor data inline). A model over protobuf's 2 GiB limit is
/// refused with InvalidArgument before anything is copied: save it to a file (save_model), where
/// its tensors go to external data.
std::string serialize_model(const Model& m);

/// Writes `m` to `path` atomically. With external data the tensors are streamed from memory to
/// the data file (offsets of tensors of 4 KiB or more aligned to 4 KiB, others to 64 bytes) and
/// the model records them with a relative `location`. Both files follow the one writer's rule
/// (core/atomic_file.h): written as temporaries, fsynced, then renamed (a device or FIFO written
/// through, a symbolic link followed), except that a symbolic link at the data file's path is
/// refused (the loader reads external data only from a file in the model's folder); on failure
/// neither is left half-written and previous files at both paths are kept. Throws IOError naming
/// the file, InvalidArgument for a bad location or a model too large for its mode.
void save_model(const Model& m, const std::string& path, const ModelSaveOptions& options = {});

/// Decodes a serialized TensorProto (such as the conformance suite's input_0.pb).
Tensor load_tensor_bytes(const void* data, size_t size, const std::string& what,
                         const std::string& base_dir = "");
/// Serializes a tensor as a TensorProto.
std::string serialize_tensor(const Tensor& t, const std::string& name);

/// Reads a whole regular file, refusing empty or oversized files. Throws IOError / InvalidModel.
std::string read_file(const std::string& path, const char* what, uint64_t max_bytes);
/// Writes `bytes` to `path` by the one writer's rule (core/atomic_file.h): atomically for a regular
/// file, written through for a device or FIFO, through symbolic links; IOError otherwise.
void write_file_atomic(const std::string& path, const std::string& bytes);

/// Names of the ONNX operators known to the ONNX schema registry for (domain, opset).
bool onnx_schema_exists(const std::string& domain, const std::string& op, int64_t opset);

}  // namespace onnxtrain::ir
