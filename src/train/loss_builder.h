// Loss builder (onnxcustom's add_loss_output): appends a loss to a model. The losses, their
// arguments and reductions are listed at the top of loss_builder.cpp; the public entry points
// (add_loss_output, loss_names, loss_objective) are in src/api/losses.cpp.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "onnxtrain/trainer.h"

namespace onnxtrain::train {

/// Appends loss `kind` computed from output `output` (an index or a name; "" when the model has
/// one output) and a new `label_name` input (and `weight_name`, per-sample weights, when not
/// empty) to `m`, as output `loss_name` ahead of the model's outputs, plus the `penalty` terms
/// ({weight: {"l1": a, "l2": b}}) and the loss arguments `kwargs`. InvalidArgument names an
/// unknown loss, argument or output, a name already taken, or non-float scores.
void add_loss(ir::Model& m, const std::string& kind, const std::string& loss_name, const std::string& label_name,
              const std::string& weight_name, const std::map<std::string, std::map<std::string, float>>& penalty,
              const std::string& output, const std::map<std::string, std::string>& kwargs);

/// Loss names add_loss accepts (aliases included: l2, l1).
std::vector<std::string> loss_names();

/// The Objective of loss `kind` (with `kwargs`) added on output `score` (see onnxtrain::loss_objective).
Objective loss_objective(const std::string& kind, const std::map<std::string, std::string>& kwargs,
                         const NodeArg& score, const std::string& loss_output, const std::string& label_name);

}  // namespace onnxtrain::train
