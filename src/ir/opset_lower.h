// Models importing ai.onnx opsets 18 to 21: at load their default-domain nodes are rewritten into
// the opset-17 form onnxtrain implements (ir/opset_lower.cpp), so that kernels, type inference,
// gradient rules and exports all see opset 17. Operators with no opset-17 form that onnxtrain
// implements stay as they are at 18 (the "opset-18 forms": Bitwise*, Col2Im, ScatterElements /
// ScatterND with reduction max or min, ReduceMax/Min/Prod/LogSumExp with axes computed at run
// time) in the graph imported at 17; exports raise the import back to 18 when a graph holds one
// (onnx_io.cpp). Other operators whose new version has no opset-17 form are refused naming the
// operator and the version.
#pragma once

#include <cstdint>
#include <string>

#include "ir/ir.h"

namespace onnxtrain::ir {

/// Rewrites `m` (main graph, its subgraphs and model-local functions) whose default domain is
/// imported at an opset in 18..21 into its opset-17 equivalent and sets those imports to 17.
/// Throws NotImplemented naming the node, operator and version for what has no opset-17 form here
/// nor a kernel (DeformConv, DFT-20, ...; attributes such as Resize's antialias), and InvalidGraph
/// naming node and attribute for malformed new attributes (num_outputs <= 0, unknown modes or
/// reductions, Col2Im's block geometry). For imports <= 17, only checks that no node is an opset-18
/// form (InvalidGraph naming node, operator and the imported version).
void lower_new_opsets(Model& m);

/// What makes `n` an opset-18 form kept in a lowered graph ("BitwiseAnd", "ScatterND with reduction
/// 'max'", "ReduceMax with axes as input 1"), or "" for a node opset 17 holds.
std::string opset18_form(const Node& n);

/// The ai.onnx opset a lowered graph needs: 18 when a node of g or of its subgraphs is an opset-18
/// form, else 0.
int64_t required_opset(const Graph& g);

/// Reduce operators whose axes moved from the attribute to input 1 at ai.onnx opset 18 (exports
/// raised to 18 rewrite them).
bool axes_input_from_18(const std::string& op);

/// Name of ONNX element types onnxtrain has no DType for (float8 variants 17-20, uint4 21, int4 22,
/// float4e2m1 23), or nullptr for other codes.
const char* unsupported_onnx_type_name(int64_t onnx_type);

}  // namespace onnxtrain::ir
