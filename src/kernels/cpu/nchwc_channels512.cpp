// NchwcChannels' inner loop on AVX-512 (see nchwc_channels512.h). CMakeLists.txt compiles this file
// alone with -mavx512f; it uses intrinsics and its own internal functions only.
#include "kernels/cpu/nchwc_channels512.h"

#if defined(__AVX512F__)
#include <immintrin.h>

namespace onnxtrain::kernels::cpu::nchwc512 {

namespace {

// P pieces, their indices and masks held in registers across the pixels.
template <int P>
void gather_n(const GatherPiece* pieces, float* out, int64_t pixels) {
  __m512i idx[P];
  __mmask16 mask[P];
  const float* src[P];
  for (int q = 0; q < P; ++q) {
    idx[q] = _mm512_loadu_si512(pieces[q].idx);
    mask[q] = pieces[q].mask;
    src[q] = pieces[q].src;
  }
  for (int64_t p = 0; p < pixels; ++p) {
    __m512 v = _mm512_setzero_ps();
    for (int q = 0; q < P; ++q) v = _mm512_mask_permutexvar_ps(v, mask[q], idx[q], _mm512_loadu_ps(src[q] + p * 16));
    _mm512_storeu_ps(out + p * 16, v);
  }
}

}  // namespace

bool gather_available() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

void gather_block(const GatherPiece* pieces, int count, float* out, int64_t pixels) {
  switch (count) {
    case 1: return gather_n<1>(pieces, out, pixels);
    case 2: return gather_n<2>(pieces, out, pixels);
    case 3: return gather_n<3>(pieces, out, pixels);
    case 4: return gather_n<4>(pieces, out, pixels);
    default:
      break;
  }
  for (int64_t p = 0; p < pixels; ++p) {
    __m512 v = _mm512_setzero_ps();
    for (int q = 0; q < count; ++q)
      v = _mm512_mask_permutexvar_ps(v, pieces[q].mask, _mm512_loadu_si512(pieces[q].idx),
                                     _mm512_loadu_ps(pieces[q].src + p * 16));
    _mm512_storeu_ps(out + p * 16, v);
  }
}

}  // namespace onnxtrain::kernels::cpu::nchwc512

#else

namespace onnxtrain::kernels::cpu::nchwc512 {
bool gather_available() { return false; }
void gather_block(const GatherPiece*, int, float*, int64_t) {}
}  // namespace onnxtrain::kernels::cpu::nchwc512

#endif
