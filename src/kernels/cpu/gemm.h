// Dense matrix multiply used by every kernel that needs one (MatMul, Gemm, Einsum, RNNs, ...).
//   C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C    (row-major; op = transpose or not)
// float32 goes through oneDNN's sgemm (AVX-512 dispatch at run time, OpenMP threads), large products
// on cores with AMX through gemm_amx.h's exact bfloat16 split (float32's accuracy);
// float64 uses a cache-blocked loop (not a hot path).
#pragma once

#include <cstdint>

namespace onnxtrain::kernels::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
/// C[M, N] = alpha * A[M, K] @ op(B) + beta * C for float32 with N <= 4 (a regression or binary
/// classification head: 1000 x 10 @ 10 x 1 took oneDNN 6 us, here under 1), A's rows contiguous
/// (row stride lda); op(B) = B^T with trans_b (B [N, K], row stride ldb), else B [K, 1] with ldb == 1.
/// Returns false, doing nothing, for other shapes. beta == 0 ignores C's contents. With bias, C's
/// contents are not read either: C[m, n] = alpha * (A @ op(B))[m, n] + beta * bias[n * bias_stride]
/// (Gemm's C of one row, or one value with bias_stride 0, without a pass broadcasting it into C).
bool small_n_gemm(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr,
                  int64_t bias_stride = 0);
/// C[M, N] = alpha * A[M, K] @ op(B) + beta * C for float32 with M <= 4 and A's rows contiguous
/// (row stride lda): matrix-vector products that stream B once, in place of oneDNN, whose sgemm
/// packs B on every call (a classifier layer at batch 1 read its weights three times over).
/// Returns false, doing nothing, when M > 4. beta == 0 ignores C's contents.
bool small_m_gemm(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

}  // namespace onnxtrain::kernels::cpu
