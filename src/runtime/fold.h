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

/// Replaces each main-graph Shape node whose input has a fully known shape by an int64
/// initializer holding that shape (its start/end attributes applied), as onnxruntime's constant
/// folding does. Shapes come from type inference over the graph's inputs and initializers alone
/// (the file's value_info and declared output shapes are not trusted); a feed's dimensions are
/// checked against the declared fixed ones before each run. Then the nodes computing from those
/// shapes (ShuffleNet's channel split: Shape -> Gather -> Div -> Mul -> Slice) fold as constants,
/// and the values they shape get known dimensions. Graphs cut by a YieldOp are left alone.
/// Returns the number of Shape nodes replaced.
size_t fold_static_shapes(ir::Model& model);

}  // namespace onnxtrain::runtime
