// Feeding a graph: checking a value against an input's declared type (InferenceSession,
// TrainingSession and TrainingAgent use it).
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"
#include "onnxtrain/value.h"

namespace onnxtrain::runtime {

/// Checks a feed against its declared type; throws InvalidArgument naming the input. With
/// check_shape false a tensor's rank and dimensions are not compared with the declaration (a
/// TrainingAgent's partial run, as onnxruntime's, plans for the shapes it is given).
void check_feed(const ir::ValueInfo& decl, const Value& v, bool check_shape = true);
/// "a, b, c": the valid names an unknown-name error lists.
std::string join_names(const std::vector<std::string>& names);

}  // namespace onnxtrain::runtime
