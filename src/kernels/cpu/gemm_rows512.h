// Products of a few rows (M <= 8: a classifier or MLP at a small batch) against constant weights,
// on AVX-512 (gemm_rows512.cpp, compiled with -mavx512f on its own; runs only where the CPU has it).
// The weights are packed once into panels of 32 columns, each its K rows of 32 floats one after
// the other, so a product streams them in order; the M rows of A (at most 8 x K floats) stay in the
// first-level cache and each weight vector feeds M fused multiply-adds.
#pragma once

#include <cstdint>

namespace onnxtrain::kernels::cpu::rows512 {

/// Columns per panel.
inline constexpr int64_t kPanel = 32;

/// True when this build has the kernel and the CPU runs AVX-512F (checked once).
bool available();

/// Floats of the packed form of a [K, N] operand: ceil(N / 32) panels of K x 32 (zero-padded).
inline int64_t packed_floats(int64_t K, int64_t N) { return (N + kPanel - 1) / kPanel * kPanel * K; }

/// Packs op(B) ([K, N]; B is [N, K] with trans_b, else [K, N]; row stride ldb) into `dst`
/// (packed_floats(K, N) floats, 64-byte aligned). Defined in gemm.cpp (compiled for every CPU).
void pack(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, float* dst);

/// C[m, n] = sum_k A[m, k] op(B)[k, n] (+ bias[n] when bias is not null) for m < M (1 to 8) and
/// the columns of panels [p0, p1); `packed` from pack(). Each sum runs over k in order in one
/// fused multiply-add chain. Does nothing when !available().
void product(int64_t M, int64_t K, int64_t N, const float* A, int64_t lda, const float* packed, const float* bias,
             float* C, int64_t ldc, int64_t p0, int64_t p1);

}  // namespace onnxtrain::kernels::cpu::rows512
