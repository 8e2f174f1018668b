// One registration function per operator family; KernelRegistry::global() calls them all.
// Adding an operator touches its family file only.
#pragma once

#include "kernels/kernel.h"

namespace onnxtrain::kernels::cpu {

void register_elementwise(KernelRegistry& r);   // cpu/elementwise.cpp: math, activations, logic, Cast
void register_linalg(KernelRegistry& r);        // cpu/linalg.cpp: MatMul, Gemm, Einsum
void register_reduce(KernelRegistry& r);        // cpu/reduce.cpp: Reduce*, Arg*, CumSum, Softmax family, TopK
void register_shape(KernelRegistry& r);         // cpu/shape.cpp: Reshape family, Shape, Size, Constant*, Range, Expand
void register_movement(KernelRegistry& r);      // cpu/movement.cpp: Transpose, Concat, Split, Slice, Tile, Pad, ...
void register_index(KernelRegistry& r);         // cpu/index.cpp: Gather*, Scatter*, OneHot
void register_image(KernelRegistry& r);         // cpu/image.cpp: Resize, DepthToSpace, SpaceToDepth
void register_conv(KernelRegistry& r);          // cpu/conv.cpp: Conv, ConvTranspose
void register_nchwc_channels(KernelRegistry& r);  // cpu/nchwc_channels.cpp: NchwcChannels (blocked channel gather)
void register_pool(KernelRegistry& r);          // cpu/pool.cpp: MaxPool, AveragePool, Global*Pool, LpPool
void register_norm(KernelRegistry& r);          // cpu/norm.cpp: BatchNormalization, InstanceNorm, LayerNorm, LRN, Dropout
void register_loss(KernelRegistry& r);          // cpu/loss.cpp: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss
void register_rnn(KernelRegistry& r);           // cpu/rnn.cpp: LSTM, GRU, RNN
void register_control_flow(KernelRegistry& r);  // cpu/control_flow.cpp: If, Loop, SequenceMap
void register_sequence(KernelRegistry& r);      // cpu/sequence.cpp: Sequence*, SplitToSequence, ConcatFromSequence, Optional*
void register_training(KernelRegistry& r);      // cpu/optimizer_ops.cpp: optimizers, AccumulateGradients, GlobalNormClip, preview-training Adagrad/Momentum/Adam
void register_ml(KernelRegistry& r);            // cpu/ml.cpp: ai.onnx.ml inference (linear models, SVMs, encoders, scalers)
void register_collectives(KernelRegistry& r);   // cpu/collective_ops.cpp: GradientReduceStart/Wait (data parallel)
void register_ml_map(KernelRegistry& r);        // cpu/ml_map.cpp: ai.onnx.ml ZipMap, DictVectorizer, CastMap (map values)
void register_ml_tree(KernelRegistry& r);       // cpu/ml_tree.cpp: ai.onnx.ml TreeEnsembleRegressor, TreeEnsembleClassifier
/// Reductions a GradientReduceStart issued that no GradientReduceWait has taken yet (tests: it
/// stays bounded by the Start nodes alive, whatever runs fail or skip their Wait).
size_t reductions_in_flight();

}  // namespace onnxtrain::kernels::cpu
