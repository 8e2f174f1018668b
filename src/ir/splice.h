// Graph edits shared by the fusion passes (train/fusion.cpp, runtime/conv_fusion.cpp).
#pragma once

#include <map>
#include <vector>

#include "ir/ir.h"

namespace onnxtrain::ir {

/// A fusion's edit of g's nodes: node i becomes replace[i] where it has an entry, is removed where
/// drop[i] (and no entry), else stays; value_info of values no node defines any more is dropped.
void splice_nodes(Graph& g, std::map<size_t, Node> replace, const std::vector<bool>& drop);

}  // namespace onnxtrain::ir
