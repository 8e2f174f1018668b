// Feeding a graph: checking a value against an input's declared type, and describing declared
// values as the public NodeArg (InferenceSession and TrainingSession both use them).
#pragma once

#include "ir/ir.h"
#include "onnxtrain/session.h"
#include "onnxtrain/value.h"

namespace onnxtrain::runtime {

/// The public description of a declared value (name, type string, element type, shape).
NodeArg node_arg_of(const ir::ValueInfo& v);
/// Checks a feed against its declared type; throws InvalidArgument naming the input.
void check_feed(const ir::ValueInfo& decl, const Value& v);
/// "a, b, c": the valid names an unknown-name error lists.
std::string join_names(const std::vector<std::string>& names);

}  // namespace onnxtrain::runtime
