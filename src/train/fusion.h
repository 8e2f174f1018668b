// Forward-graph fusions the training graph applies before it is differentiated (default mode;
// portable training graphs keep standard ONNX operators). The user's model — what eval runs and
// export writes — is never changed.
#pragma once

#include "ir/ir.h"

namespace onnxtrain::train {

/// A copy of `m` (graph copied, initializer storage shared) where every exact GELU written as
/// ONNX arithmetic — y = (x * (1 + erf(x / sqrt(2)))) * 0.5, as torch.onnx exports nn.GELU() and
/// F.gelu (operands of Add and Mul in either order, the 0.5 applied first or last) — is one
/// com.onnxtrain.Gelu node with outputs (y, 1 + erf(x / sqrt(2))): the forward is one pass with
/// the same arithmetic (bitwise the same y), the gradient one GeluGrad pass instead of a chain of
/// seven elementwise nodes. Intermediate values read elsewhere, or named as graph outputs, keep
/// the pattern unfused. `fused` (optional) receives the number of GELUs fused.
ir::Model fuse_gelu(const ir::Model& m, int* fused = nullptr);

/// A copy of `m` where MatMul(X, Transpose(W)) — a 2-D W transposed (perm [1, 0], or none) by a
/// node whose output only MatMuls read, as their second operand, and X of rank 2 or more: how
/// torch.onnx exports nn.Linear on batched inputs — is com.onnxtrain.FusedMatMul(X, W, transB = 1):
/// the product reads W through its strides, and its gradient is dX = g W and dW = g^T X in W's
/// layout, so neither W nor dW is copied transposed each step. `fused` (optional) receives the
/// number of Transpose nodes removed.
ir::Model fuse_transposed_matmul(const ir::Model& m, int* fused = nullptr);

}  // namespace onnxtrain::train
