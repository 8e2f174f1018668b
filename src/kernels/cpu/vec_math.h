// Vectorized math shared by the reduction, normalization and loss kernels (and their backward
// kernels): exp of 8 floats (AVX2 + FMA) and accumulator lanes for multi-term sums.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <limits>

namespace onnxtrain::kernels::cpu {

// exp of 8 floats: Cody-Waite range reduction and Cephes' degree-5 polynomial (about 2 ulp).
// NaN propagates; results below FLT_MIN flush to 0, above FLT_MAX give +inf.
inline __m256 exp8(__m256 in) {
  const __m256 hi = _mm256_set1_ps(88.37f), lo = _mm256_set1_ps(-87.33654f);
  __m256 x = _mm256_min_ps(hi, in);  // operand order keeps NaN
  x = _mm256_max_ps(lo, x);
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  y = _mm256_andnot_ps(_mm256_cmp_ps(in, lo, _CMP_LT_OQ), y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                          _mm256_cmp_ps(in, _mm256_set1_ps(88.72283f), _CMP_GT_OQ));
}

inline __m256i tail_mask(int64_t m) {
  alignas(32) static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + 8 - m));
}

/// Independent accumulator lanes for sums of several terms: a `#pragma omp simd` loop over the W
/// lanes vectorizes (GCC 12 leaves an `omp simd reduction` of several variables scalar).
///   Lanes<float, 2> l;
///   for (; j + l.W <= n; j += l.W)
///   #pragma omp simd
///     for (int64_t k = 0; k < l.W; ++k) l.a[0][k] += ..., l.a[1][k] += ...;
template <class A, size_t K>
struct Lanes {
  static constexpr int64_t W = 64 / int64_t(sizeof(A));  // two AVX2 vectors per term
  A a[K][W] = {};
  A sum(size_t q) const {
    A s = 0;
    for (int64_t k = 0; k < W; ++k) s += a[q][k];
    return s;
  }
};

}  // namespace onnxtrain::kernels::cpu
