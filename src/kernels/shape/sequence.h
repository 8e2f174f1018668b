// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Sequences and optionals: the kinds and element types of the inputs of the sequence operators,
// positions in a sequence, SplitToSequence's pieces and ConcatFromSequence's output. The values a
// sequence holds are known only when the node runs (a sequence output is always dynamic), so the
// value checks take the node and fail naming it, from prepare() or run() alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/kernel.h"

namespace onnxtrain::kernels::shape {

/// Fails naming a node with the message PrepareContext::fail and RunContext::fail give (for checks
/// of values that either context may hold); usable as the Ctx of normalize_axis/check_output_size.
struct NodeFail {
  const ir::Node& node;
  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw_error<InvalidArgument>(node.describe(), ": ", std::forward<Args>(args)...);
  }
};

/// Input i is present and a sequence of tensors.
void check_sequence_input(const PrepareContext& ctx, size_t i);
/// Input i is present and a tensor (`what` names it in the error).
void check_tensor_input(const PrepareContext& ctx, size_t i, const char* what);
/// Input i (a position or a split), when present, is an int32/int64 tensor; `scalar`: of one element.
void check_index_input(const PrepareContext& ctx, size_t i, const char* what, bool scalar);
/// A tensor of element type `dt` may join a sequence of element type `elem` (undefined: any);
/// `what` names the tensor in the error.
void check_element_type(const ir::Node& node, DType elem, DType dt, const char* what);
/// The position `pos` (int32/int64, one element) in a sequence of `length` tensors, normalized:
/// [-length, length - 1] for SequenceAt/SequenceErase; [-length, length] for SequenceInsert
/// (`insert`: length itself appends). Out of range fails naming the position and the length. A
/// null `pos` is the operators' default: the end for SequenceInsert, the last tensor otherwise.
int64_t sequence_position(const ir::Node& node, const Tensor* pos, size_t length, bool insert);

/// The attributes of SplitToSequence (`split`: axis, default 0; keepdims 0 or 1, default 1) and of
/// ConcatFromSequence (axis, required; new_axis 0 or 1, default 0).
struct SequenceAxisAttrs {
  int64_t axis = 0;
  bool flag = false;  ///< keepdims (SplitToSequence), new_axis (ConcatFromSequence)
};
SequenceAxisAttrs read_sequence_axis_attrs(const KernelInfo& info, bool split);

/// SplitToSequence of a tensor of shape `x`: the normalized axis, the size of each piece along it
/// and whether the axis is removed (no `split`, keepdims 0). `split` (null when absent): a scalar
/// k > 0 (pieces of k, the last one smaller) or a 1-D list of sizes >= 0 summing to the dimension.
struct SplitToSequenceGeom {
  int64_t axis = 0;
  std::vector<int64_t> sizes;
  bool squeeze = false;
};
SplitToSequenceGeom split_to_sequence_geometry(const ir::Node& node, const SequenceAxisAttrs& at, const Shape& x,
                                               const Tensor* split);

/// ConcatFromSequence of `seq`: the normalized axis and the output shape. The sequence is not
/// empty, its tensors share the element type and rank, and their dims agree except along the axis
/// (every dim with new_axis, which stacks them on a new axis).
struct ConcatFromSequenceGeom {
  int64_t axis = 0;
  Shape output;
};
ConcatFromSequenceGeom concat_from_sequence_geometry(const ir::Node& node, const SequenceAxisAttrs& at,
                                                     const std::vector<Tensor>& seq);

}  // namespace onnxtrain::kernels::shape
