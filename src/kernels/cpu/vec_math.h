// Vectorized math shared by the reduction, normalization and loss kernels (and their backward
// kernels): exp of 8 floats (AVX2 + FMA) and accumulator lanes for multi-term sums.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "kernels/cpu/elementwise_simd.h"

namespace onnxtrain::kernels::cpu {

// exp of 8 floats: Cody-Waite range reduction and Cephes' degree-5 polynomial (about 2 ulp).
// NaN propagates; results below FLT_MIN flush to 0, above FLT_MAX give +inf (vmath::exp_flush_t,
// whose 16-lane instance gives the same bits).
inline __m256 exp8(__m256 in) { return vmath::exp_flush_t<vmath::O8>(in); }

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
