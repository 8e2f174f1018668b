// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Linear algebra beyond the matrix products of shape/matmul.h: Einsum's equation, operand checks,
// label sizes and output shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// An equation parsed for given operand ranks: the label of each operand dim and of each output
/// dim. Letters map to labels 0..51 (A-Z, then a-z), ellipsis dims to 52.. (right-aligned across
/// operands, at most 64 of them).
struct EinsumSpec {
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
};
/// Parses `equation` for operands of `ranks` (spaces ignored; implicit output: the ellipsis dims,
/// then the labels seen once in ASCII order). Fails naming the node for a term count other than
/// the inputs', malformed ellipses, invalid characters, terms not matching their operand's rank,
/// an ellipsis over 64 dims, output labels absent from the inputs or repeated.
EinsumSpec parse_einsum(const PrepareContext& ctx, const std::string& equation, const std::vector<size_t>& ranks);

/// Einsum over the node's inputs.
struct EinsumGeom {
  EinsumSpec spec;
  std::vector<int64_t> size;  ///< each label's size, 52 + 64 entries (-1: unused)
  Shape output;
};
/// Checks that there is at least one input, all of one numeric element type, parses the equation
/// and sizes its labels: dims of a label repeated within an operand agree; across operands they
/// agree or are 1 (broadcast).
EinsumGeom einsum_geometry(const PrepareContext& ctx, const std::string& equation);

}  // namespace onnxtrain::kernels::shape
