#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_rows512.h"

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
  // A few columns or rows: dot products or B streamed once, without oneDNN sgemm's packing and
  // threading (1000 x 10 @ 10 x 1: 6 us there)
  if (!trans_a && small_n_gemm(trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  if (M <= 4 && (!trans_a || (M == 1 && lda == 1)) &&
      small_m_gemm(trans_b, M, N, K, alpha, A, trans_a ? K : lda, B, ldb, beta, C, ldc))
    return;
  if (amx::pays(M, N, K) && amx::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success) throw_error<RuntimeError>("oneDNN sgemm failed with status ", int(st));
}

namespace {

inline float finish(float acc, float alpha, float beta, float c) {
  return beta == 0.f ? alpha * acc : alpha * acc + beta * c;
}

#if OT_GEMV_SIMD
// Lanes [0, n) set (n in 1..8): _mm256_maskload_ps's mask for a run's last n < 8 elements.
inline __m256i tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

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

#if OT_GEMV_SIMD
// axpy_cols for one row of A and at most 16 columns (a regression head's weight gradient,
// dy^T [1, K] @ x [K, N]): the sums stay in registers, four chains a vector over B's rows
// (a load-and-store pass per row of B waits on the one before).
void axpy_narrow(int64_t j0, int64_t w, int64_t K, float alpha, const float* A, const float* B, int64_t ldb,
                 float beta, float* C) {
  const __m256i m0 = tail_mask(std::min<int64_t>(w, 8)), m1 = tail_mask(std::max<int64_t>(w - 8, 0));
  __m256 s[2][4];
  for (auto& v : s)
    for (auto& c : v) c = _mm256_setzero_ps();
  const float* b = B + j0;
  int64_t k = 0;
  for (; k + 4 <= K; k += 4)
    for (int u = 0; u < 4; ++u) {
      const __m256 a = _mm256_set1_ps(A[k + u]);
      const float* row = b + (k + u) * ldb;
      s[0][u] = _mm256_fmadd_ps(a, _mm256_maskload_ps(row, m0), s[0][u]);
      if (w > 8) s[1][u] = _mm256_fmadd_ps(a, _mm256_maskload_ps(row + 8, m1), s[1][u]);
    }
  for (; k < K; ++k) {
    const __m256 a = _mm256_set1_ps(A[k]);
    const float* row = b + k * ldb;
    s[0][0] = _mm256_fmadd_ps(a, _mm256_maskload_ps(row, m0), s[0][0]);
    if (w > 8) s[1][0] = _mm256_fmadd_ps(a, _mm256_maskload_ps(row + 8, m1), s[1][0]);
  }
  alignas(32) float out[16];
  for (int v = 0; v < 2; ++v)
    _mm256_store_ps(out + 8 * v, _mm256_add_ps(_mm256_add_ps(s[v][0], s[v][1]), _mm256_add_ps(s[v][2], s[v][3])));
  for (int64_t j = 0; j < w; ++j) C[j0 + j] = finish(out[j], alpha, beta, C[j0 + j]);
}
#endif

template <int MB>
void axpy_cols(int64_t j0, int64_t j1, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
  const int64_t w = j1 - j0;
#if OT_GEMV_SIMD
  if constexpr (MB == 1)
    if (w <= 16) return axpy_narrow(j0, w, K, alpha, A, B, ldb, beta, C);
#endif
  alignas(64) float acc[MB][kCols];
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
    // acc[m][j .. j + 8) += the four rows' vectors (v: B's rows at column j)
    auto update = [&](int64_t j, const __m256 (&v)[4]) {
      for (int m = 0; m < MB; ++m) {
        __m256 c = _mm256_load_ps(acc[m] + j);
        for (int u = 0; u < 4; ++u) c = _mm256_fmadd_ps(a[m][u], v[u], c);
        _mm256_store_ps(acc[m] + j, c);
      }
    };
    for (int64_t j = 0; j < wv; j += 8) {
      const __m256 v[4] = {_mm256_loadu_ps(b0 + j), _mm256_loadu_ps(b1 + j), _mm256_loadu_ps(b2 + j),
                           _mm256_loadu_ps(b3 + j)};
      update(j, v);
    }
    if (wv < w) {  // the last 1-7 columns: masked loads of B, acc has room for a whole vector
      const __m256i mask = tail_mask(w - wv);
      const __m256 v[4] = {_mm256_maskload_ps(b0 + wv, mask), _mm256_maskload_ps(b1 + wv, mask),
                           _mm256_maskload_ps(b2 + wv, mask), _mm256_maskload_ps(b3 + wv, mask)};
      update(wv, v);
    }
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

// B's rows are the N <= 4 columns of op(B) ([N, K], row stride ldb): C[m, n] = A[m, :] . B[n, :] for
// rows [m0, m1) of A. Four rows of A at a time, one column at a time: four 8-lane accumulators (a
// masked load for K's last 1-7 elements), reduced to the four rows' sums in one 4-lane vector.
// With bias, C's contents are not read: beta * bias[n * bias_stride] takes their place.
void narrow_rows(int64_t m0, int64_t m1, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias,
                 int64_t bias_stride) {
  int64_t m = m0;
#if OT_GEMV_SIMD
  const int64_t kv = K / 8 * 8;
  const __m256i mask = tail_mask(K - kv);
  const __m128 va = _mm_set1_ps(alpha), vb = _mm_set1_ps(beta);
  for (; m + 4 <= m1; m += 4) {
    const float* a0 = A + m * lda;
    const float* a1 = a0 + lda;
    const float* a2 = a1 + lda;
    const float* a3 = a2 + lda;
    for (int64_t n = 0; n < N; ++n) {
      const float* b = B + n * ldb;
      __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps(), c2 = _mm256_setzero_ps(), c3 = _mm256_setzero_ps();
      for (int64_t k = 0; k < kv; k += 8) {
        const __m256 bv = _mm256_loadu_ps(b + k);
        c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + k), bv, c0);
        c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + k), bv, c1);
        c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + k), bv, c2);
        c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + k), bv, c3);
      }
      if (kv < K) {
        const __m256 bv = _mm256_maskload_ps(b + kv, mask);
        c0 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + kv, mask), bv, c0);
        c1 = _mm256_fmadd_ps(_mm256_maskload_ps(a1 + kv, mask), bv, c1);
        c2 = _mm256_fmadd_ps(_mm256_maskload_ps(a2 + kv, mask), bv, c2);
        c3 = _mm256_fmadd_ps(_mm256_maskload_ps(a3 + kv, mask), bv, c3);
      }
      // [r0 r1 r2 r3 | r0 r1 r2 r3] partial sums of the two halves, added
      const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(c0, c1), _mm256_hadd_ps(c2, c3));
      __m128 y = _mm_mul_ps(va, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
      float* c = C + m * ldc + n;
      // beta times the bias, or C's four values where they are contiguous, added in the vector;
      // C's strided values added one by one.
      const bool c_added = beta == 0.f || bias;
      if (beta != 0.f && bias) y = _mm_fmadd_ps(vb, _mm_set1_ps(bias[n * bias_stride]), y);
      if (ldc == 1) {
        if (!c_added) y = _mm_fmadd_ps(vb, _mm_loadu_ps(c), y);
        _mm_storeu_ps(c, y);
      } else {
        alignas(16) float out[4];
        _mm_store_ps(out, y);
        for (int r = 0; r < 4; ++r) c[r * ldc] = c_added ? out[r] : out[r] + beta * c[r * ldc];
      }
    }
  }
#endif
  for (; m < m1; ++m) {
    if (bias)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = bias[n * bias_stride];
    dot_rows<1, 1>(0, N, K, alpha, A + m * lda, lda, B, ldb, beta, C + m * ldc, ldc);
  }
}

}  // namespace

bool small_n_gemm(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias,
                  int64_t bias_stride) {
  if (N < 1 || N > 4 || K < 1 || (!trans_b && N != 1)) return false;
  // op(B)'s columns as rows: B itself with trans_b, else B's one column (contiguous when ldb == 1)
  const float* rows = B;
  int64_t row_stride = ldb;
  if (!trans_b) {
    if (ldb != 1) return false;
    row_stride = K;
  }
  if (M <= 0) return true;
  // Chunks of at least ~32K multiply-adds per thread, whole eight-row blocks.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(8 * K * N, 1));
  parallel_for((M + 7) / 8, grain, [&](int64_t b, int64_t e) {
    narrow_rows(b * 8, std::min(M, e * 8), N, K, alpha, A, lda, rows, row_stride, beta, C, ldc, bias, bias_stride);
  });
  return true;
}

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

void rows512::pack(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, float* dst) {
  for (int64_t p = 0; p * kPanel < N; ++p) {
    const int64_t n0 = p * kPanel, w = std::min(kPanel, N - n0);
    float* panel = dst + p * kPanel * K;
    for (int64_t k = 0; k < K; ++k) {
      float* row = panel + k * kPanel;
      for (int64_t j = 0; j < w; ++j) row[j] = trans_b ? B[(n0 + j) * ldb + k] : B[k * ldb + n0 + j];
      std::fill(row + w, row + kPanel, 0.f);
    }
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
