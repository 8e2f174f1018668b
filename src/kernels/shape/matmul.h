// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Matrix products: MatMul (numpy semantics, 1-D operands), FusedMatMul (transposed operands) and
// Gemm (2-D, C broadcast to the product): operand checks and the output shape.
#pragma once

#include <cstdint>

#include "kernels/kernel.h"

namespace onnxtrain::kernels::shape {

/// op(A) [a_batch..., M, K] @ op(B) [b_batch..., K, N] -> [batch..., M, N], batch the numpy
/// broadcast of the batch dims.
struct MatMulGeom {
  Shape a_batch, b_batch;  ///< the operands' batch dims as given (not padded to one rank)
  Shape batch;             ///< their broadcast
  int64_t M = 0, K = 0, N = 0;
  Shape output;            ///< the product's shape (MatMul drops M / N for 1-D operands)
};

/// MatMul: A [..., M, K] @ B [..., K, N]; a 1-D A is [1, K] and M is dropped from the output, a 1-D
/// B is [K, 1] and N is dropped. Fails naming the node for rank 0, differing inner dims or batch
/// dims that do not broadcast.
MatMulGeom matmul_geometry(const PrepareContext& ctx, const Shape& a, const Shape& b);

/// FusedMatMul: operands of rank >= 2, op() transposing the last two dims when ta / tb.
MatMulGeom fused_matmul_geometry(const PrepareContext& ctx, const Shape& a, const Shape& b, bool ta, bool tb);

/// Gemm: A, B of rank 2 ([K, M] / [N, K] when transposed), C (when given, rank <= 2)
/// unidirectionally broadcastable to [M, N] (exactly [M, N] when `c_exact`, Gemm before opset 7
/// without broadcast). The output is [M, N]; batch dims are empty.
MatMulGeom gemm_geometry(const PrepareContext& ctx, const Shape& a, const Shape& b, const Shape* c, bool ta, bool tb,
                         bool c_exact);

}  // namespace onnxtrain::kernels::shape
