// Inference-time fusion of convolutions with what follows them (GraphOptimizationLevel >=
// extended, inference sessions only: training graphs and exported models keep the plain nodes).
#pragma once

#include <cstddef>

#include "ir/ir.h"

namespace onnxtrain::runtime {

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

}  // namespace onnxtrain::runtime
