#include "kernels/cpu/gemm.h"

#include "kernels/cpu/gemm_amx.h"

#include <oneapi/dnnl/dnnl.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define OT_GEMV_SIMD 1
#else
#define OT_GEMV_SIMD 0
#endif

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
  if (amx::pays(M, N, K) && amx::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success) throw_error<RuntimeError>("oneDNN sgemm failed with status ", int(st));
}

namespace {

inline float finish(float acc, float alpha, float beta, float c) {
  return beta == 0.f ? alpha * acc : alpha * acc + beta * c;
}

#if OT_GEMV_SIMD
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// B is [N, K] (trans_b): C[m, n] for rows n0 .. n0 + NB of B, MB rows of A: MB x NB dot products
// over K, 8 lanes each, B's rows read once for every row of A.
template <int MB, int NB>
void dots(int64_t n0, int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
          float* C, int64_t ldc) {
  float out[MB][NB];
  int64_t k = 0;
#if OT_GEMV_SIMD
  __m256 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm256_setzero_ps();
  for (; k + 8 <= K; k += 8) {
    __m256 b[NB];
    for (int j = 0; j < NB; ++j) b[j] = _mm256_loadu_ps(B + (n0 + j) * ldb + k);
    for (int m = 0; m < MB; ++m) {
      const __m256 a = _mm256_loadu_ps(A + m * lda + k);
      for (int j = 0; j < NB; ++j) acc[m][j] = _mm256_fmadd_ps(a, b[j], acc[m][j]);
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NB; ++j) out[m][j] = hsum(acc[m][j]);
#else
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NB; ++j) out[m][j] = 0.f;
#endif
  for (; k < K; ++k)
    for (int m = 0; m < MB; ++m)
      for (int j = 0; j < NB; ++j) out[m][j] += A[m * lda + k] * B[(n0 + j) * ldb + k];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NB; ++j) {
      float& c = C[m * ldc + n0 + j];
      c = finish(out[m][j], alpha, beta, c);
    }
}

template <int MB, int NB>
void dot_rows(int64_t n0, int64_t n1, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
              int64_t ldb, float beta, float* C, int64_t ldc) {
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) dots<MB, NB>(n, K, alpha, A, lda, B, ldb, beta, C, ldc);
  for (; n < n1; ++n) dots<MB, 1>(n, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// B is [K, N]: C[m, j0 .. j1) (at most kCols columns) accumulated over B's rows, four at a time,
// each row's run of columns read contiguously; MB rows of A.
constexpr int64_t kCols = 1024;

template <int MB>
void axpy_cols(int64_t j0, int64_t j1, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
  alignas(64) float acc[MB][kCols];
  const int64_t w = j1 - j0;
  for (int m = 0; m < MB; ++m) std::fill(acc[m], acc[m] + w, 0.f);
  int64_t k = 0;
#if OT_GEMV_SIMD
  const int64_t wv = w / 8 * 8;
  for (; k + 4 <= K; k += 4) {
    const float* b0 = B + k * ldb + j0;
    const float* b1 = b0 + ldb;
    const float* b2 = b1 + ldb;
    const float* b3 = b2 + ldb;
    __m256 a[MB][4];
    for (int m = 0; m < MB; ++m)
      for (int u = 0; u < 4; ++u) a[m][u] = _mm256_set1_ps(A[m * lda + k + u]);
    for (int64_t j = 0; j < wv; j += 8) {
      const __m256 v0 = _mm256_loadu_ps(b0 + j), v1 = _mm256_loadu_ps(b1 + j), v2 = _mm256_loadu_ps(b2 + j),
                   v3 = _mm256_loadu_ps(b3 + j);
      for (int m = 0; m < MB; ++m) {
        __m256 c = _mm256_load_ps(acc[m] + j);
        c = _mm256_fmadd_ps(a[m][0], v0, c);
        c = _mm256_fmadd_ps(a[m][1], v1, c);
        c = _mm256_fmadd_ps(a[m][2], v2, c);
        c = _mm256_fmadd_ps(a[m][3], v3, c);
        _mm256_store_ps(acc[m] + j, c);
      }
    }
    for (int64_t j = wv; j < w; ++j)
      for (int m = 0; m < MB; ++m)
        for (int u = 0; u < 4; ++u) acc[m][j] += A[m * lda + k + u] * B[(k + u) * ldb + j0 + j];
  }
#endif
  for (; k < K; ++k)
    for (int m = 0; m < MB; ++m) {
      const float a = A[m * lda + k];
      const float* b = B + k * ldb + j0;
      for (int64_t j = 0; j < w; ++j) acc[m][j] += a * b[j];
    }
  for (int m = 0; m < MB; ++m)
    for (int64_t j = 0; j < w; ++j) {
      float& c = C[m * ldc + j0 + j];
      c = finish(acc[m][j], alpha, beta, c);
    }
}

template <int MB>
void small_m(bool trans_b, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
             int64_t ldb, float beta, float* C, int64_t ldc) {
  // Chunks of at least ~32K multiply-adds per thread.
  const int64_t grain = std::max<int64_t>(8, (int64_t(1) << 15) / std::max<int64_t>(K * MB, 1));
  if (trans_b) {
    constexpr int NB = MB <= 2 ? 4 : 2;  // MB x NB accumulators + NB loads in 16 registers
    parallel_for((N + NB - 1) / NB, (grain + NB - 1) / NB, [&](int64_t b, int64_t e) {
      dot_rows<MB, NB>(b * NB, std::min(N, e * NB), K, alpha, A, lda, B, ldb, beta, C, ldc);
    });
  } else {
    constexpr int64_t W = 64;  // threads split runs of whole cache lines
    parallel_for((N + W - 1) / W, (grain + W - 1) / W, [&](int64_t b, int64_t e) {
      for (int64_t j = b * W; j < std::min(N, e * W); j += kCols)
        axpy_cols<MB>(j, std::min({N, e * W, j + kCols}), K, alpha, A, lda, B, ldb, beta, C, ldc);
    });
  }
}

}  // namespace

bool small_m_gemm(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  switch (M) {
    case 1: small_m<1>(trans_b, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return true;
    case 2: small_m<2>(trans_b, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return true;
    case 3: small_m<3>(trans_b, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return true;
    case 4: small_m<4>(trans_b, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return true;
    default: return M <= 0;
  }
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
