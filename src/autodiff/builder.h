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
};

/// Builds the gradient model. Throws NotImplemented naming the node when an operator on the
/// path from the loss to an x has no gradient rule; InvalidArgument for unknown names.
ir::Model build_gradient_model(const ir::Model& forward, const std::vector<std::string>& ys,
                               const std::vector<std::string>& xs, const std::string& loss,
                               const BuildOptions& options = {});

/// Operators of the model that lie on a path from the loss to an x but have no gradient rule
/// (for `onnxtrain inspect`).
std::vector<std::string> missing_rules(const ir::Model& m);

}  // namespace onnxtrain::autodiff
