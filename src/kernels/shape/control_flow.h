// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Control flow: validation of If, Loop and SequenceMap (branch and body arity, the cond and
// trip-count inputs, SequenceMap's inputs) and their dynamic outputs; the subgraphs' execution is
// the provider's.
#pragma once

#include <cstddef>

#include "kernels/kernel.h"

namespace onnxtrain::kernels::shape {

/// If: each branch yields as many outputs as the node has and takes no inputs.
void check_if_branches(const KernelInfo& info, const ir::Graph& then_branch, const ir::Graph& else_branch);
/// If's cond (input 0): present, a bool tensor of one element.
void check_if_cond(const PrepareContext& ctx);

/// Loop's counts of loop-carried values and scan outputs.
struct LoopCounts {
  size_t carried = 0, scans = 0;
};
/// Checks the node (M and cond first, every loop-carried input named) against its body: 2 +
/// carried inputs, cond + carried + scans outputs, the node's outputs carried + scans.
LoopCounts loop_counts(const KernelInfo& info, const ir::Graph& body);
/// Loop's M (input 0, when given) is a single int64 (int32 accepted), cond (input 1) a single bool.
void check_loop_inputs(const PrepareContext& ctx);

/// SequenceMap: at least one input (the first a sequence); the body takes as many inputs and yields
/// as many outputs as the node has.
void check_sequence_map(const KernelInfo& info, const ir::Graph& body);
/// SequenceMap's inputs: every one present, the first a sequence.
void check_sequence_map_inputs(const PrepareContext& ctx);

/// Marks every named output dynamic, with the element type the subgraph declares for its output
/// first_graph_output + i (undefined when not a tensor or out of range).
void subgraph_outputs_dynamic(PrepareContext& ctx, const ir::Graph& g, size_t first_graph_output);

}  // namespace onnxtrain::kernels::shape
