// Gradients in portable mode (RuleContext::portable(): the gradient graph uses standard ONNX
// operators only, so that another runtime can run it) for the operators whose default gradient is
// one com.onnxtrain node. Each expands the gradient into standard operators when the model's
// opset and static shapes allow, and otherwise answers "" (false), the rule then emitting the
// com.onnxtrain node as in default mode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autodiff/rule_context.h"
#include "autodiff/rule_helpers.h"

namespace onnxtrain::autodiff::detail {

/// Conv / ConvTranspose (`transposed`): sets dX, dW, dB with ConvTranspose / Conv / ReduceSum;
/// false when the geometry needs static shapes the model does not give.
bool conv_portable(RuleContext& c, bool transposed);
/// MaxPool, AveragePool, LpPool and their Global forms: dX, or "".
std::string pool_portable(RuleContext& c);
/// Slice: dX as a zero Pad (unit steps, static shapes) or scatters (opset >= 11), or "".
std::string slice_grad_portable(RuleContext& c, const IntList& starts, const IntList& ends, const IntList& axes,
                                const IntList& steps);
/// Pad of mode edge / reflect / wrap with constant `pads`: dX folded back with Slice and Pad, or "".
std::string pad_grad_portable(RuleContext& c, const std::string& mode, const std::vector<int64_t>& pads);
/// Resize with static shapes and constant scales / sizes / roi: dX by one interpolation matrix per
/// resized axis, or "".
std::string resize_grad_portable(RuleContext& c);

}  // namespace onnxtrain::autodiff::detail
