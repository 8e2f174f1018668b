// Proto-level helpers (include only where ONNX's protobuf headers are wanted).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "ir/external_data.h"
#include "ir/ir.h"

namespace onnxtrain::core {
class AtomicFile;
}

namespace onnxtrain::ir {

struct LoadOptions;

/// Decodes a TensorProto with full validation. `what` names the tensor in errors. External data is
/// read from `in_memory` when it holds the location, else from base_dir.
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what, const std::string& base_dir,
                         const ExternalFiles* in_memory = nullptr);
/// The dense tensor a SparseTensorProto stands for (zeros but at its indices), validated: dense dims
/// non-negative, values 1-D, indices int64/int32 of shape [NNZ] (linear) or [NNZ, rank], in range.
/// Throws InvalidModel naming `what` (default: the values' name) otherwise.
Tensor sparse_tensor_to_dense(const onnx::SparseTensorProto& p, const std::string& what, const std::string& base_dir,
                              const ExternalFiles* in_memory = nullptr);
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);
TypeInfo type_from_proto(const onnx::TypeProto& p);
void type_to_proto(const TypeInfo& t, onnx::TypeProto* p);
Model model_from_proto(const onnx::ModelProto& p, const std::string& base_dir, const LoadOptions* options = nullptr);
void model_to_proto(const Model& m, onnx::ModelProto* p);
/// One node (its attributes' tensors and subgraphs inline).
void node_to_proto(const Node& n, onnx::NodeProto* p);
/// Serializes `msg` straight into `f` (no copy of it in memory); failures are f's IOError.
void write_message(core::AtomicFile& f, const google::protobuf::MessageLite& msg);

}  // namespace onnxtrain::ir
