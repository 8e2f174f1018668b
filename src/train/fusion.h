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

/// A copy of `m` without its Dropout nodes of constant ratio 0 (the identity in training too:
/// x * 1 / (1 - 0), no random draws), their readers reading the Dropout's input: no copy, mask or
/// DropoutGrad pass per step and no activation kept for them. torch.onnx exports nn.Dropout(0.0)
/// (nn.TransformerEncoderLayer(dropout=0.0)) so in training mode. A Dropout whose output is a
/// graph output or read by a subgraph, or whose mask is read, stays. `dropped` (optional) receives
/// the number removed.
ir::Model drop_zero_dropout(const ir::Model& m, int* dropped = nullptr);

/// A copy of `m` where Conv followed by Relu — the Conv's output read by that Relu alone, neither
/// a graph output nor read by a subgraph — is one com.microsoft.FusedConv(X, W[, B], activation =
/// "Relu") writing the Relu's output: the activation runs as the convolution's post-op instead of
/// a pass of its own over the activation, and the gradient is ReluGrad on that output, then
/// ConvGrad, as for the pair (the same bits both ways). Applied after mixed-precision casts, where
/// a low-precision Conv's Cast back to float32 stands between the two and keeps them apart.
/// `fused` (optional) receives the number of pairs fused.
ir::Model fuse_conv_relu(const ir::Model& m, int* fused = nullptr);

/// In a gradient graph: ReluGrad(MaxPoolGrad(dY, X), X) — both com.onnxtrain, the pool's gradient
/// read by that ReluGrad alone, no Indices input — becomes one MaxPoolGrad(dY, X) with relu_mask = 1
/// writing the ReluGrad's output: dX is nonzero only at each window's maximum, so masking it by
/// X > 0 there is the whole ReluGrad (the same bits), without its pass over the pooled activation.
/// Returns the number of ReluGrad nodes removed.
int fuse_relu_grad(ir::Graph& g);

/// In a gradient graph: Sum(SliceGrad(dY_1, shape(X), ...), ..., SliceGrad(dY_n, shape(X), ...))
/// for 2 to 4 slices of one X — each SliceGrad read by that Sum alone — becomes one
/// com.onnxtrain.SliceGradSum(shape(X), dY_1, starts_1, ends_1, axes_1, steps_1, ...): where the
/// slices tile X (an attention's Q, K and V cut from one projection) its kernel only copies each
/// dY into place, instead of n zero-filled tensors and a sum over them. CPU kernels only: sessions
/// with a device provider keep the pair. Returns the number of Sum nodes replaced.
int fuse_slice_grad_sum(ir::Graph& g);

/// In a training graph: Add(FusedMatMul(X, W), c) (operands in either order) — W a 2-D
/// initializer, c a 1-D initializer of its N values and the same type, the product read by that
/// Add alone — becomes FusedMatMul(X, W, c): the bias is oneDNN's bias argument of the product
/// (the same float32 sum, then + c) instead of a pass over the activation. The Add's gradient
/// nodes, already built, stay. CPU kernels only (CUDA's FusedMatMul has no bias input). Returns
/// the number of Add nodes removed.
int fuse_matmul_bias(ir::Graph& g);

/// In a training graph: a Div or Mul by a scalar constant power of two (the attention's 1 / sqrt
/// of a head size of 4^k) beside products becomes their alpha (oneDNN's output scale): where its
/// input is a product's result read by it alone, that product scales and writes its output; where
/// its result is read by products alone, they read its input and scale. MatMul (operands of rank
/// >= 2) becomes FusedMatMul; FusedMatMul with a bias input is left alone, so is Gemm with C on the
/// output side. The same bits: scaling by a power of two is exact wherever the values are normal.
/// CPU kernels only. Returns the number of Div / Mul nodes removed.
int fold_scales_into_products(ir::Graph& g);

/// In a training graph: the Transposes around batched products — a batch-first attention's
/// (1, 0, 2) and (1, 2, 0) head transposes and their gradients' — are read and written through
/// FusedMatMul's strides instead of copied: chains of Transposes are composed; a Div or Mul by a
/// scalar trades places with an adjacent Transpose; a product read only by a Transpose moving its
/// row axis first writes that layout (transBatchY; for [2, 0, 1] with its operands swapped); a
/// Transpose read only by products becomes their transBatchA / transBatchB / transA / transB.
/// Only products whose operands have rank 2 or 3 (one 3) are touched. CPU kernels only; applied
/// when StepConfig::absorb_transposes asks for it. Returns the number of Transpose nodes removed
/// or moved.
int absorb_transposes(ir::Graph& g);

}  // namespace onnxtrain::train
