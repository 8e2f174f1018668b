// Mixed precision: the forward graph rewritten so that matrix products run in bfloat16 or float16,
// and (float16) the loss scaled before it is differentiated.
#pragma once

#include "ir/ir.h"

namespace onnxtrain::train {

/// Operator types autocast runs in the low-precision type.
inline constexpr const char* kAutocastOps[] = {"MatMul", "Gemm", "Conv"};

/// A copy of `m` (its graph copied, the initializer storage shared) where every MatMul, Gemm, Conv and
/// com.onnxtrain FusedMatMul of the main graph whose float inputs are all float32 reads them through
/// Cast(to=`low`) and
/// writes its output through Cast(to=float): products in bfloat16 or float16 with fp32
/// accumulation, everything else — normalizations, softmax, losses, the optimizer and its fp32
/// master weights — in float32. Differentiating the result gives low-precision gradients of the
/// products, cast back to float32 for the weights (Cast's gradient). bfloat16: a Conv whose
/// weight has one input channel per group stays float32 (measured faster).
ir::Model autocast(const ir::Model& m, DType low);

/// Loss scaling (float16 training): adds to `m`'s main graph a float32 [1] input named after
/// `input` (a fresh name if taken) and the output `loss` * scale (fresh name after
/// "<loss>_scaled"). Returns {input name, scaled loss name}. The gradients of the scaled loss are
/// scale times those of the loss: small float16 gradients stay above float16's underflow.
std::pair<std::string, std::string> add_loss_scale(ir::Model& m, const std::string& loss, const std::string& input);

}  // namespace onnxtrain::train
