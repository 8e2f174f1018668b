// GradientGraphBuilder: the gradient of an ONNX graph, as an ONNX graph (onnxruntime-training's
// call shapes). The result keeps the requested outputs and adds "<x>_grad" for every x.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "onnxtrain/io.h"

namespace onnxtrain {

class GradientGraphBuilder {
 public:
  /// model_bytes: serialized ModelProto. y_node_arg_names: outputs to keep. x_node_arg_names:
  /// initializers and/or graph inputs to differentiate. loss_node_arg_name: the scalar loss.
  /// `portable`: emit only standard ONNX operators wherever possible. `base_dir`: the folder
  /// external data of the model is read from (empty: a model with external data is refused).
  GradientGraphBuilder(const std::string& model_bytes, const std::set<std::string>& y_node_arg_names,
                       const std::set<std::string>& x_node_arg_names, const std::string& loss_node_arg_name,
                       bool portable = false, const std::string& base_dir = "");
  ~GradientGraphBuilder();
  GradientGraphBuilder(GradientGraphBuilder&&) noexcept;
  GradientGraphBuilder& operator=(GradientGraphBuilder&&) noexcept;

  /// Builds the gradient graph (throws NotImplemented naming a node without a gradient rule).
  void build();
  /// Serialized ModelProto of the built graph (build() first).
  std::string get_model() const;
  /// Writes the built model to `path` atomically; its weights go to external data beside it
  /// when it would exceed protobuf's 2 GiB limit, or as `options` ask.
  void save(const std::string& path, const ModelSaveOptions& options = {}) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnxtrain
