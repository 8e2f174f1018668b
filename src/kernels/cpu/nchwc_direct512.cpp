// The direct NCHWc convolution's row kernel on AVX-512. CMakeLists.txt compiles this file alone with
// -mavx512f; it uses intrinsics and its own internal functions only (no inline function or template
// from a shared header is instantiated here, so no AVX-512 code can stand in for one elsewhere).
#include "kernels/cpu/nchwc_direct512.h"

#if defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>

#include <utility>

namespace onnxtrain::kernels::cpu::nchwc512 {

namespace {

// Pixels per tile with nb output blocks: at most 24 accumulators, so that with the nb weight
// vectors and the broadcast input value every operand stays in the 32 registers.
constexpr int pixels(int nb) { return nb == 4 ? 6 : nb == 3 ? 8 : 12; }

inline __m512 activate(Act act, float alpha, float beta, __m512 v) {
  const __m512 zero = _mm512_setzero_ps();
  switch (act) {
    case Act::kNone: return v;
    case Act::kRelu: return _mm512_max_ps(zero, v);  // NaN stays NaN (max returns its second operand)
    case Act::kLeakyRelu:
      return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, _mm512_set1_ps(alpha));
    case Act::kClip: return _mm512_min_ps(_mm512_set1_ps(beta), _mm512_max_ps(_mm512_set1_ps(alpha), v));
    case Act::kHardSwish: {
      const __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
      return _mm512_mul_ps(v, _mm512_max_ps(zero, _mm512_min_ps(_mm512_set1_ps(1.0f), t)));
    }
    case Act::kSiLU: return v;  // the caller's (see Act)
  }
  return v;
}

// Zeros that a bounded tile reads for window positions in the pads.
alignas(64) const float kZeros[16] = {};

// The window rows inside the input, kh in [*kh0, *kh1): 0 <= ih0 + kh * dh < IH. The pixels of a
// row's tiles share them, so the rows in the pads are skipped with their weights rather than
// multiplied as zeros (a 7x1 window over 17 rows with 3 rows of pads: 10 % of the products).
inline void rows_inside(int64_t ih0, int64_t dh, int64_t KH, int64_t IH, int64_t* kh0, int64_t* kh1) {
  *kh0 = 0, *kh1 = KH;
  while (*kh0 < *kh1 && ih0 + *kh0 * dh < 0) ++*kh0;
  while (*kh1 > *kh0 && ih0 + (*kh1 - 1) * dh >= IH) --*kh1;
}

// NP pixels (SW apart in the input) x NB output blocks: the accumulators stay in registers over
// the KH x KW x L input channels of each block (L = 16 blocked, 1 plain); each input value is
// broadcast once into NB fused multiply-adds, over the window rows [kh0, kh1) (rows_inside).
// `col0`: the first pixel's window column. Unbounded (B false): every window column of the tile
// lies inside the input. Bounded: each pixel's input for (kh, kw) is found again and is kZeros
// where its column is outside (the same products as a padded copy).
template <int NB, int NP, int SW, int L, bool B>
inline __attribute__((always_inline)) void tile(const RowArgs& a, int64_t kh0, int64_t kh1, int64_t col0, float* y,
                                                bool prefetch) {
  __m512 acc[NP][NB];
  if (a.first) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) {
      const __m512 b = a.bias ? _mm512_loadu_ps(a.bias + 16 * j) : _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p)
        acc[p][j] = a.sum ? _mm512_add_ps(b, _mm512_loadu_ps(y + j * a.y_block + p * 16)) : b;
    }
  } else {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j)
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p) acc[p][j] = _mm512_loadu_ps(y + j * a.y_block + p * 16);
  }
  const int64_t w_row = a.KW * 16 * L * NB;  // the weights of one window row
  for (int64_t ib = 0; ib < a.icc; ++ib)
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* row = a.in + ib * a.in_block + (a.ih0 + kh * a.dh) * a.in_row;
    const float* w = a.w + (ib * a.KH + kh) * w_row;
    for (int64_t kw = 0; kw < a.KW; ++kw, w += 16 * L * NB) {
      const int64_t c = col0 + kw * a.dw;
      const float* px[NP];  // pixel p's L input channels
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p) {
        const int64_t cp = c + p * SW;
        px[p] = !B || (cp >= 0 && cp < a.IW) ? row + cp * L : kZeros;
      }
#pragma GCC unroll 16
      for (int ic = 0; ic < L; ++ic) {
        __m512 wv[NB];
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j) {
          wv[j] = _mm512_load_ps(w + ic * 16 * NB + 16 * j);
          if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(w + a.prefetch + ic * 16 * NB + 16 * j), _MM_HINT_T1);
        }
#pragma GCC unroll 16
        for (int p = 0; p < NP; ++p) {
          const __m512 b = _mm512_set1_ps(px[p][ic]);
#pragma GCC unroll 4
          for (int j = 0; j < NB; ++j) acc[p][j] = _mm512_fmadd_ps(b, wv[j], acc[p][j]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NB; ++j)
#pragma GCC unroll 16
    for (int p = 0; p < NP; ++p)
      _mm512_storeu_ps(y + j * a.y_block + p * 16, a.last ? activate(a.act, a.alpha, a.beta, acc[p][j]) : acc[p][j]);
}

// A tile of np = 1 + one of I pixels.
template <int NB, int SW, int L, bool B, int... I>
void tail(const RowArgs& a, int64_t kh0, int64_t kh1, int64_t col0, float* y, bool prefetch, int np,
          std::integer_sequence<int, I...>) {
  ((np == I + 1 ? tile<NB, I + 1, SW, L, B>(a, kh0, kh1, col0, y, prefetch) : void()), ...);
}

template <int NB, int SW, int L, bool B>
void any_tile(const RowArgs& a, int64_t kh0, int64_t kh1, int64_t col0, float* y, bool prefetch, int np) {
  constexpr int kP = pixels(NB);
  if (np == kP) tile<NB, kP, SW, L, B>(a, kh0, kh1, col0, y, prefetch);
  else tail<NB, SW, L, B>(a, kh0, kh1, col0, y, prefetch, np, std::make_integer_sequence<int, kP - 1>());
}

// The row in as few tiles as kP allows, of widths that differ by one at most: a 7-pixel row as 4 + 3
// rather than 6 + 1 (a one-pixel tile has too few accumulators to hide the FMA latency). Tiles
// whose windows reach into the pads run bounded (the rows in the vertical pads skipped for all).
template <int NB, int SW, int L>
void row(const RowArgs& a) {
  constexpr int kP = pixels(NB);
  const int64_t tiles = (a.OW + kP - 1) / kP, q = a.OW / tiles, wider = a.OW % tiles;
  int64_t kh0, kh1;
  rows_inside(a.ih0, a.dh, a.KH, a.IH, &kh0, &kh1);
  const bool rows_in = kh0 == 0 && kh1 == a.KH;
  const int64_t reach = (a.KW - 1) * a.dw;  // a window's columns past its first
  bool prefetch = a.prefetch > 0;
  for (int64_t i = 0, ow = 0; i < tiles; ++i, prefetch = false) {
    const int np = int(q + (i < wider));
    const int64_t col0 = ow * SW - a.pw;
    float* y = a.y + ow * 16;
    if (rows_in && col0 >= 0 && col0 + (np - 1) * SW + reach < a.IW)
      any_tile<NB, SW, L, false>(a, kh0, kh1, col0, y, prefetch, np);
    else any_tile<NB, SW, L, true>(a, kh0, kh1, col0, y, prefetch, np);
    ow += np;
  }
}

// Depthwise: NP pixels (SW apart in the input) of one 16-channel block, one accumulator each, over
// the window rows [kh0, kh1) (those inside the input). Unbounded (B false): every column of the
// tile's windows lies inside the input; bounded: the columns outside add nothing.
template <int NP, int SW, bool B>
inline __attribute__((always_inline)) void dw_tile(const DwRowArgs& a, int64_t kh0, int64_t kh1, int64_t col0,
                                                   float* y) {
  __m512 acc[NP];
  const __m512 b = a.bias ? _mm512_loadu_ps(a.bias) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int p = 0; p < NP; ++p) acc[p] = b;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* row = a.in + (a.ih0 + kh * a.dh) * a.IW * 16;
    const float* w = a.w + kh * a.KW * 16;
    for (int64_t kw = 0; kw < a.KW; ++kw) {
      const __m512 wv = _mm512_loadu_ps(w + kw * 16);
      const int64_t c = col0 + kw * a.dw;
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p) {
        const int64_t cp = c + p * SW;
        if (!B || (cp >= 0 && cp < a.IW)) acc[p] = _mm512_fmadd_ps(_mm512_loadu_ps(row + cp * 16), wv, acc[p]);
      }
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < NP; ++p) _mm512_storeu_ps(y + p * 16, activate(a.act, a.alpha, a.beta, acc[p]));
}

template <int SW, bool B, int... I>
void dw_tail(const DwRowArgs& a, int64_t kh0, int64_t kh1, int64_t col0, float* y, int np,
             std::integer_sequence<int, I...>) {
  ((np == I + 1 ? dw_tile<I + 1, SW, B>(a, kh0, kh1, col0, y) : void()), ...);
}

// Pixels per depthwise tile: enough independent accumulators to hide the fused multiply-add's
// latency on two pipes, few enough for every operand to stay in registers.
constexpr int kDwPixels = 12;

template <int SW>
void dw_row_t(const DwRowArgs& a) {
  int64_t kh0, kh1;
  rows_inside(a.ih0, a.dh, a.KH, a.IH, &kh0, &kh1);
  const int64_t tiles = (a.OW + kDwPixels - 1) / kDwPixels, q = a.OW / tiles, wider = a.OW % tiles;
  const int64_t reach = (a.KW - 1) * a.dw;
  for (int64_t i = 0, ow = 0; i < tiles; ++i) {
    const int np = int(q + (i < wider));
    const int64_t col0 = ow * SW - a.pw;
    float* y = a.y + ow * 16;
    if (col0 >= 0 && col0 + (np - 1) * SW + reach < a.IW) {
      if (np == kDwPixels) dw_tile<kDwPixels, SW, false>(a, kh0, kh1, col0, y);
      else dw_tail<SW, false>(a, kh0, kh1, col0, y, np, std::make_integer_sequence<int, kDwPixels - 1>());
    } else {
      if (np == kDwPixels) dw_tile<kDwPixels, SW, true>(a, kh0, kh1, col0, y);
      else dw_tail<SW, true>(a, kh0, kh1, col0, y, np, std::make_integer_sequence<int, kDwPixels - 1>());
    }
    ow += np;
  }
}

}  // namespace

void dw_row(const DwRowArgs& a) {
  if (!available()) return;
  return a.sw == 2 ? dw_row_t<2>(a) : dw_row_t<1>(a);
}

bool available() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

template <int L>
void rows(const RowArgs& a) {
  const bool s2 = a.sw == 2;
  switch (a.nb) {
    case 1: return s2 ? row<1, 2, L>(a) : row<1, 1, L>(a);
    case 2: return s2 ? row<2, 2, L>(a) : row<2, 1, L>(a);
    case 3: return s2 ? row<3, 2, L>(a) : row<3, 1, L>(a);
    case 4: return s2 ? row<4, 2, L>(a) : row<4, 1, L>(a);
    default: return;
  }
}

void conv_row(const RowArgs& a) {
  if (!available()) return;
  return a.plain ? rows<1>(a) : rows<16>(a);
}

}  // namespace onnxtrain::kernels::cpu::nchwc512

#else

namespace onnxtrain::kernels::cpu::nchwc512 {
bool available() { return false; }
void conv_row(const RowArgs&) {}
void dw_row(const DwRowArgs&) {}
}  // namespace onnxtrain::kernels::cpu::nchwc512

#endif
