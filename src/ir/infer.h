// Type and shape inference over the IR, node by node (as onnxruntime does): ONNX's inference
// function of each node's schema, called through an InferenceContext over ir::Graph, and
// onnxtrain's own rule for the operators ONNX does not know (ir/emitter.h, custom_output_types).
#pragma once

#include "ir/ir.h"

namespace onnxtrain::ir {

/// Types the values of m's main graph: every node, in topological order, is typed from the types
/// of its inputs (graph inputs, initializers, value_info, declared outputs and what earlier nodes
/// gave), the values of small initializers and Constants, and shapes computed along
/// Shape -> Gather -> Concat -> Reshape chains (ONNX's data propagation). Values typed afresh are
/// appended to the graph's value_info, and graph outputs declared without a type take theirs;
/// types already declared are kept. Subgraphs (If, Loop, Scan bodies) are typed by ONNX's
/// GraphInferencer for their node's outputs and left as they are in the IR.
/// Best effort: a node that cannot be typed (an inference error, a conflict with a declared type,
/// a node breaking its schema, which ONNX 1.12's inference functions may crash on) leaves its outputs
/// as they were; nothing throws.
void infer_types(Model& m);

}  // namespace onnxtrain::ir
