// Load-time constant folding (GraphOptimizationLevel >= basic): nodes of the main graph whose
// inputs are all constant run once and become initializers, so that the model written to
// SessionOptions.optimized_model_filepath shows what the plan would fold anyway.
#pragma once

#include "ir/ir.h"
#include "kernels/kernel.h"

namespace onnxtrain::runtime {

/// Replaces the main graph's nodes whose inputs are all constant (non-overridable initializers or
/// outputs of such nodes) and whose kernels are deterministic by initializers holding their
/// outputs; drops initializers nothing reads any more. Nodes with subgraphs, nodes producing graph
/// outputs and nodes producing non-tensor values stay. Returns the number of nodes removed. Any
/// failure while evaluating leaves the model unchanged (the run then reports it).
size_t fold_constant_nodes(ir::Model& model, const ExecOptions& options);

}  // namespace onnxtrain::runtime
