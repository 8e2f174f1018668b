#include "kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "onnxtrain/error.h"

namespace onnxtrain::kernels::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success) throw_error<RuntimeError>("oneDNN sgemm failed with status ", int(st));
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  parallel_for(M, std::max<int64_t>(1, 4096 / std::max<int64_t>(N * std::max<int64_t>(K, 1), 1)), [&](int64_t m0, int64_t m1) {
    std::vector<double> row(static_cast<size_t>(N));
    constexpr int64_t kb = 256;
    for (int64_t i = m0; i < m1; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t k0 = 0; k0 < K; k0 += kb) {
        const int64_t k1 = std::min(K, k0 + kb);
        for (int64_t k = k0; k < k1; ++k) {
          const double a = trans_a ? A[k * lda + i] : A[i * lda + k];
          if (a == 0.0) continue;
          if (!trans_b) {
            const double* b = B + k * ldb;
            for (int64_t j = 0; j < N; ++j) row[size_t(j)] += a * b[j];
          } else {
            for (int64_t j = 0; j < N; ++j) row[size_t(j)] += a * B[j * ldb + k];
          }
        }
      }
      double* c = C + i * ldc;
      for (int64_t j = 0; j < N; ++j) c[j] = alpha * row[size_t(j)] + (beta == 0.0 ? 0.0 : beta * c[j]);
    }
  });
}

}  // namespace onnxtrain::kernels::cpu
