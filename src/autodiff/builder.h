// Gradient graph construction: given a model, the values to differentiate (xs), the outputs to
// keep (ys) and the scalar loss, produce an ONNX graph computing ys plus "<x>_grad" for each x.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace onnxtrain::autodiff {

struct BuildOptions {
  /// Emit only standard ONNX operators wherever possible (the graph runs in any ONNX runtime);
  /// otherwise heavy gradients use com.onnxtrain operators with fused kernels.
  bool portable = false;
  /// Suffix of gradient outputs: "<x>" + suffix.
  std::string grad_suffix = "_grad";
  /// Also output the gradient of these intermediate values (e.g. for the TrainingAgent API).
  std::vector<std::string> extra_grad_outputs;
  /// Explicit names of the gradient outputs, one per x (overrides grad_suffix).
  std::vector<std::string> grad_names;
  /// Accept intermediate values as xs (the preview-training Gradient operator allows them).
  bool allow_intermediate_xs = false;
  /// Instead of a loss (which must then be empty): the gradients flowing into these values come
  /// from outside (onnxruntime-training's OrtModuleGraphBuilder / TrainingAgent). A com.microsoft
  /// YieldOp node cuts the graph: its inputs are these values, its output k "<value>" + grad_suffix
  /// the gradient of input k (left unnamed for a value that takes no gradient: non-float, or a
  /// BatchNormalization statistics output). The
  /// values stay in the built graph even when no gradient depends on them.
  std::vector<std::string> yield_outputs;
};

/// Builds the gradient model (of `loss`, or of yield_outputs with gradients fed from outside). Throws NotImplemented naming the node when an operator on the
/// path from the loss to an x has no gradient rule; InvalidArgument for unknown names.
ir::Model build_gradient_model(const ir::Model& forward, const std::vector<std::string>& ys,
                               const std::vector<std::string>& xs, const std::string& loss,
                               const BuildOptions& options = {});

/// Replaces every ai.onnx.preview.training Gradient node by the nodes computing its gradients
/// (seeded with ones: the gradient of the sum of y's elements).
void lower_gradient_ops(ir::Model& m);

/// Operators of the model that lie on a path from the loss to an x but have no gradient rule
/// (for `onnxtrain inspect`).
std::vector<std::string> missing_rules(const ir::Model& m);

}  // namespace onnxtrain::autodiff
