// Feeding a graph: checking a value against an input's declared type (InferenceSession,
// TrainingSession and TrainingAgent use it).
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"
#include "onnxtrain/value.h"

namespace onnxtrain::runtime {

/// Checks a feed against its declared type; throws InvalidArgument naming the input.
void check_feed(const ir::ValueInfo& decl, const Value& v);
/// "a, b, c": the valid names an unknown-name error lists.
std::string join_names(const std::vector<std::string>& names);

}  // namespace onnxtrain::runtime
