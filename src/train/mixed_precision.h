// Mixed precision: the forward graph rewritten so that matrix products run in bfloat16.
#pragma once

#include "ir/ir.h"

namespace onnxtrain::train {

/// Operator types autocast_bf16 runs in bfloat16.
inline constexpr const char* kBf16Ops[] = {"MatMul", "Gemm", "Conv"};

/// A copy of `m` (its graph copied, the initializer storage shared) where every MatMul, Gemm and Conv of
/// the main graph whose float inputs are all float32 reads them through Cast(to=bfloat16) and
/// writes its output through Cast(to=float): products in bfloat16 with fp32 accumulation (oneDNN),
/// everything else — normalizations, softmax, losses, the optimizer and its fp32 master weights —
/// in float32. Differentiating the result gives bfloat16 gradients of the products, cast back to
/// float32 for the weights (Cast's gradient). A Conv whose weight has one input channel per group
/// stays float32.
ir::Model autocast_bf16(const ir::Model& m);

}  // namespace onnxtrain::train
