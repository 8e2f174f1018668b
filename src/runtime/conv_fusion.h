// Inference-time fusions (GraphOptimizationLevel >= extended, inference sessions only: training
// graphs and exported models keep the plain nodes): convolutions with what follows them, linear
// layers with their bias (the exact GELU is train/fusion.h's fuse_gelu, which sessions apply too).
#pragma once

#include <cstddef>

#include "ir/ir.h"

namespace onnxtrain::runtime {

/// Folds a constant zero Pad into the AveragePool or Conv that alone reads it, in the main graph
/// (onnxruntime's pad fusion): Pad (mode constant, value 0 or absent, pads a constant int64
/// initializer or the attribute, no axes input, zero on the batch and channel axes, none negative)
/// -> AveragePool (ceil_mode 0, no auto_pad; count_include_pad 1 or no pads of its own, which
/// becomes count_include_pad 1: the padded zeros count in the average as the Pad's elements did)
/// or Conv (no auto_pad): the pads are added to the consumer's and the Pad goes (torch.onnx
/// exports avg_pool2d(padding=1) as Pad + AveragePool: Inception-v3's nine, DenseNet's all-zero
/// three). A Pad read by anything else, or that is a graph output, stays; so do MaxPool's (zero is
/// not its padding). Graphs with a YieldOp are left alone. Returns the number of Pads folded.
size_t fold_pads(ir::Model& model);

/// Replaces, in the main graph, Conv -> Relu / Clip and Conv -> Add(., Z) -> Relu / Clip by one
/// com.microsoft FusedConv node (onnxruntime's contrib operator: Y = activation(Conv(X, W, B) + Z),
/// the Add as a sum into the output, the activation as a post-op of the convolution). A pattern
/// is fused only when every value it hides is read once, by the next node of the pattern, and is
/// no graph output; Z must have the Conv output's inferred type and shape; Clip's bounds must be
/// attributes or constant (non-overridable) float32 scalars. Graphs with a com.microsoft YieldOp
/// (a TrainingAgent's forward/backward cut) are left alone. Returns the number of nodes fused.
size_t fuse_conv_activations(ir::Model& model);

/// Folds BatchNormalization (inference mode) into the Conv before it, in the main graph: with
/// s = scale / sqrt(var + epsilon), W' = W s and B' = (B - mean) s + bias, computed in double and
/// rounded once, as new initializers. Only where the Conv's output is read by the
/// BatchNormalization alone and is no graph output, and W, B and the four statistics are float32
/// initializers no feed can override ([M] each). Run before fuse_conv_activations, so that
/// Conv + BatchNormalization + Relu becomes one FusedConv. Graphs with a YieldOp are left alone.
/// Returns the number of folds.
size_t fold_conv_batchnorm(ir::Model& model);

/// Keeps convolutional activations in oneDNN's blocked layout nChw16c across chains of Conv /
/// FusedConv, MaxPool, AveragePool, GlobalAveragePool, inference BatchNormalization with constant
/// statistics (as the depthwise 1x1 convolution it is), Relu / LeakyRelu / Clip (bounds around 0) /
/// HardSwish, Add / Sum (same shapes), Sigmoid / HardSigmoid / Tanh and Mul (same shapes or a
/// [N, C, 1, 1] operand: SiLU, squeeze-and-excitation) and Concat over channels (inputs of
/// 16-channel multiples; a convolution read only by a HardSwish, or by s = Sigmoid(c) and Mul(c, s),
/// takes it as its activation "HardSwish" / "SiLU", a BatchNormalization read only by a Relu its
/// Relu), as
/// onnxruntime's NCHWc transformer does (GraphOptimizationLevel all, inference sessions only;
/// run after fuse_conv_activations). A blocked value [N, C, H, W] is the float32 tensor
/// [N, ceil(C/16), H, W, 16] holding channel c at [., c / 16, ., ., c % 16], the padded channels
/// zero (every blocked node keeps them zero, except that a Sigmoid's or HardSigmoid's output,
/// whose padding is finite but not zero, is read blocked only by a Mul, whose product's padding is
/// zero again when the other operand's is). The rewritten nodes are com.onnxtrain NchwcConv,
/// NchwcMaxPool, NchwcAveragePool, NchwcGlobalAveragePool and the unchanged elementwise ones and
/// Concat (axis 1 of the 5-D tensors); ReorderToNchwc / ReorderFromNchwc are the chains'
/// boundaries, the latter giving back the original value (same name) wherever a plain node, a
/// subgraph or a graph output reads it. Convolutions qualify when 2-D, float32, with constant
/// weights, a known channel count and at least 8 output channels; ungrouped, depthwise, or grouped
/// in 16-channel multiples;
/// one with fewer than 16 input channels reads its plain input directly. The operators are
/// session-internal: optimized_model_filepath is written before this pass. Graphs with a YieldOp
/// are left alone. Returns the number of nodes rewritten.
size_t block_conv_layouts(ir::Model& model);

/// Replaces, in the main graph, MatMul(X, W) -> Add(., B) by one Gemm(X, W, B) (onnxruntime's
/// MatMulAddFusion): W a float32 initializer no feed can override, 2-D [K, N], B one [N] or [1, N],
/// the MatMul's output read by the Add alone and no graph output, X float32 with a known shape
/// [..., K] of rank 2 or more (opset 7 or newer). X of rank above 2 is read as [rows, K] and the
/// product given back in X's leading shape by two Reshape nodes (views; at most one of X's leading
/// dims may be unknown). The Gemm adds B in its product's last step, as the Add did. Graphs with a
/// YieldOp are left alone. Returns the number of fusions.
size_t fuse_matmul_bias(ir::Model& model);

}  // namespace onnxtrain::runtime
