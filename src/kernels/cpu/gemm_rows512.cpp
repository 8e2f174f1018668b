// The few-rows product of gemm_rows512.h. CMakeLists.txt compiles this file alone with -mavx512f;
// it uses intrinsics and its own internal functions only (no inline function or template from a
// shared header is instantiated here, so no AVX-512 code can stand in for one elsewhere).
#include "kernels/cpu/gemm_rows512.h"

#if defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>

namespace onnxtrain::kernels::cpu::rows512 {

namespace {

// M rows x one panel (two 16-float vectors): 2M accumulators, the two weight vectors and the
// broadcast value in registers. The weights are read in order, 128 bytes a step, and fetched 8
// steps ahead into the second-level cache (they come from memory or the last-level cache: a
// model's weights are read once per run).
template <int M>
inline void panel(int64_t K, int64_t N, int64_t n0, const float* A, int64_t lda, const float* w, const float* bias,
                  float* C, int64_t ldc) {
  __m512 acc[M][2];
  for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* wk = w + k * kPanel;
    _mm_prefetch(reinterpret_cast<const char*>(wk + 8 * kPanel), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(wk + 8 * kPanel + 16), _MM_HINT_T1);
    const __m512 w0 = _mm512_load_ps(wk), w1 = _mm512_load_ps(wk + 16);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 a = _mm512_set1_ps(A[m * lda + k]);
      acc[m][0] = _mm512_fmadd_ps(a, w0, acc[m][0]);
      acc[m][1] = _mm512_fmadd_ps(a, w1, acc[m][1]);
    }
  }
  const int64_t w_cols = N - n0 < kPanel ? N - n0 : kPanel;
  const __mmask16 m0 = w_cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << w_cols) - 1);
  const __mmask16 m1 = w_cols >= 32 ? __mmask16(0xFFFF) : w_cols <= 16 ? __mmask16(0) : __mmask16((1u << (w_cols - 16)) - 1);
  __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
  if (bias) {
    b0 = _mm512_maskz_loadu_ps(m0, bias + n0);
    b1 = _mm512_maskz_loadu_ps(m1, bias + n0 + 16);
  }
  for (int m = 0; m < M; ++m) {
    float* c = C + m * ldc + n0;
    _mm512_mask_storeu_ps(c, m0, _mm512_add_ps(acc[m][0], b0));
    _mm512_mask_storeu_ps(c + 16, m1, _mm512_add_ps(acc[m][1], b1));
  }
}

template <int M>
void panels(int64_t K, int64_t N, const float* A, int64_t lda, const float* packed, const float* bias, float* C,
            int64_t ldc, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) panel<M>(K, N, p * kPanel, A, lda, packed + p * kPanel * K, bias, C, ldc);
}

}  // namespace

bool available() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

void product(int64_t M, int64_t K, int64_t N, const float* A, int64_t lda, const float* packed, const float* bias,
             float* C, int64_t ldc, int64_t p0, int64_t p1) {
  if (!available()) return;
  switch (M) {
    case 1: return panels<1>(K, N, A, lda, packed, bias, C, ldc, p0, p1);
    case 2: return panels<2>(K, N, A, lda, packed, bias, C, ldc, p0, p1);
    case 3: return panels<3>(K, N, A, lda, packed, bias, C, ldc, p0, p1);
    case 4: return panels<4>(K, N, A, lda, packed, bias, C, ldc, p0, p1);
    case 5: return panels<5>(K, N, A, lda, packed, bias, C, ldc, p0, p1);
    case 6: return panels<6>(K, N, A, lda, packed, bias, C, ldc, p0, p1);
    case 7: return panels<7>(K, N, A, lda, packed, bias, C, ldc, p0, p1);
    case 8: return panels<8>(K, N, A, lda, packed, bias, C, ldc, p0, p1);
    default: return;
  }
}

}  // namespace onnxtrain::kernels::cpu::rows512

#else

namespace onnxtrain::kernels::cpu::rows512 {
bool available() { return false; }
void product(int64_t, int64_t, int64_t, const float*, int64_t, const float*, const float*, float*, int64_t, int64_t,
             int64_t) {}
}  // namespace onnxtrain::kernels::cpu::rows512

#endif
