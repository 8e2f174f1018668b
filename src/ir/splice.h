// Graph edits shared by the fusion passes (train/fusion.cpp, runtime/conv_fusion.cpp).
#pragma once

#include <map>
#include <vector>

#include "ir/ir.h"

namespace onnxtrain::ir {

/// Whether g is a TrainingAgent's graph (forward and backward cut by a com.microsoft YieldOp), which
/// the fusion passes leave as it is.
bool has_yield(const Graph& g);

/// A fusion's edit of g's nodes: node i becomes replace[i] where it has an entry, is removed where
/// drop[i] (and no entry), else stays; value_info of values no node defines any more is dropped.
void splice_nodes(Graph& g, std::map<size_t, Node> replace, const std::vector<bool>& drop);

/// The same edit where node i becomes the nodes replace[i], in their order (none: removed).
void splice_nodes(Graph& g, std::map<size_t, std::vector<Node>> replace, const std::vector<bool>& drop);

}  // namespace onnxtrain::ir
