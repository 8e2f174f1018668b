// Models importing ai.onnx opsets 18 to 21: at load their default-domain nodes are rewritten into
// the opset-17 form onnxtrain implements (ir/opset_lower.cpp), so that kernels, type inference,
// gradient rules and exports all see opset 17. Operators whose new version has no opset-17 form
// here are refused naming the operator and the version.
#pragma once

#include <cstdint>

#include "ir/ir.h"

namespace onnxtrain::ir {

/// Rewrites `m` (main graph, its subgraphs and model-local functions) whose default domain is
/// imported at an opset in 18..21 into its opset-17 equivalent and sets those imports to 17.
/// Throws NotImplemented naming the node, operator and version for what has no opset-17 form here
/// (Bitwise*, Col2Im, DFT-20, ...; run-time axes of ReduceMax/Min/Prod/LogSumExp; attributes such
/// as Resize's antialias), and InvalidGraph naming node and attribute for malformed new attributes
/// (num_outputs <= 0, unknown modes). Does nothing for imports <= 17.
void lower_new_opsets(Model& m);

/// Name of ONNX element types onnxtrain has no DType for (float8 variants 17-20, uint4 21, int4 22,
/// float4e2m1 23), or nullptr for other codes.
const char* unsupported_onnx_type_name(int64_t onnx_type);

}  // namespace onnxtrain::ir
