// Vectorized float32 math for the hot elementwise kernels (AVX2 + FMA, 8 lanes): exp, log, tanh,
// sigmoid, erf. Every function handles the whole float range (NaN, +-inf, subnormal inputs and
// results) and is branch-free, so a tail padded into one vector gives the same bits as the body.
//
// Max error against the correctly rounded result (float64 reference rounded to float32), measured
// exhaustively over all 2^32 float32 inputs (NaN/inf handling included); the VectorMathUlpBounds
// test re-checks a sweep of ~2M inputs on every run:
//   exp      1 ulp   Cody-Waite reduction by ln2, cephes degree-6 polynomial, 2^n applied in two
//                    steps so subnormal results are rounded once
//   log      1 ulp   cephes logf: mantissa in [sqrt(1/2), sqrt(2)), degree-8 polynomial
//   tanh     1 ulp   |x| < 0.625: cephes odd polynomial; else 1 - 2 / (exp(2|x|) + 1)
//   sigmoid  3 ulp   e = exp(-|x|); (x >= 0 ? 1 : e) / (1 + e): no overflow, exact tails
//   expm1    2 ulp   |x| < ln 2: degree-10 Taylor polynomial; else exp(x) - 1 (Elu, Selu, Celu)
//   softplus 3 ulp   max(x, 0) + log1p(exp(-|x|)), log1p(u) = log(1 + u) * u / ((1 + u) - 1)
//   erf      1 ulp   |x| < 1: x + x * P6(x^2) (fitted minimax); else 1 - t * exp(Q6(t) - x^2),
//                    t = 1 / (1 + |x| / 2) (Numerical Recipes' erfc form, refitted on [0.9, 4])
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#define OT_EW_SIMD 1
#include <immintrin.h>
#else
#define OT_EW_SIMD 0
#endif

#include <algorithm>
#include <cstdint>

namespace onnxtrain::kernels::cpu::vmath {

// The exact GELU's constants (every path: scalar, 8 and 16 lanes).
inline constexpr float kSqrt2f = 1.41421356237309515f;      // float(sqrt(2)): the exported constant
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)

#if OT_EW_SIMD
/// The operations exp and erf are written in, on AVX2's 8 float lanes. vmath512.cpp has the same
/// members on AVX-512's 16 lanes: one source gives both, with the same bits lane by lane (the same
/// IEEE operations in the same order; comparisons give masks there, lanes here).
struct Avx2Ops {
  using V = __m256;
  using M = __m256;  // a comparison's result
  static constexpr int kLanes = 8;
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_aligned(const float* p) { return _mm256_load_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_aligned(float* p, V v) { _mm256_store_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  /// 1 / x to about 12 bits (rcp_ps); recip_t refines it.
  static V rcp(V x) { return _mm256_rcp_ps(x); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V floor(V x) { return _mm256_floor_ps(x); }
  /// 2^n for integral-valued float n in [-126, 127].
  static V pow2i(V n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  /// p * 2^n for integral-valued float n where 2^n and the product are normal.
  static V scale2i(V p, V n) { return _mm256_mul_ps(p, pow2i(n)); }
  static V abs(V x) { return _mm256_andnot_ps(set1(-0.0f), x); }
  /// |x| with the sign of s.
  static V copysign(V x, V s) { return _mm256_or_ps(abs(x), _mm256_and_ps(s, set1(-0.0f))); }
  static M lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M ge(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static M gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M eq(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static M is_nan(V x) { return _mm256_cmp_ps(x, x, _CMP_UNORD_Q); }
  /// True when every lane is in [lo, hi] (NaN is not).
  static bool all_within(V x, float lo, float hi) {
    const V in = _mm256_and_ps(_mm256_cmp_ps(x, set1(lo), _CMP_GE_OQ), _mm256_cmp_ps(x, set1(hi), _CMP_LE_OQ));
    return _mm256_movemask_ps(in) == 0xFF;
  }
  static V select(M m, V yes, V no) { return _mm256_blendv_ps(no, yes, m); }
};

using V = __m256;
using O8 = Avx2Ops;

inline V set1(float v) { return O8::set1(v); }
inline V fma(V a, V b, V c) { return O8::fma(a, b, c); }
inline V abs(V x) { return O8::abs(x); }
inline V copysign(V x, V s) { return O8::copysign(x, s); }
inline V select(V mask, V yes, V no) { return O8::select(mask, yes, no); }
inline V lt(V a, V b) { return O8::lt(a, b); }
inline V ge(V a, V b) { return O8::ge(a, b); }
inline V is_nan(V x) { return O8::is_nan(x); }
inline V pow2i(V n) { return O8::pow2i(n); }

/// Horner evaluation of c[0] * x^(N-1) + ... + c[N-1].
template <class O, int N>
inline typename O::V poly_t(typename O::V x, const float (&c)[N]) {
  typename O::V p = O::set1(c[0]);
  for (int i = 1; i < N; ++i) p = O::fma(p, x, O::set1(c[i]));
  return p;
}
template <int N>
inline V poly(V x, const float (&c)[N]) {
  return poly_t<O8>(x, c);
}

/// exp(x) = p * 2^n: n = round(x / ln 2), p = exp(x - n ln 2) by Cody-Waite reduction and the
/// cephes polynomial (x finite; exp_t and silu_t scale p by 2^n as their ranges need).
template <class O>
struct ExpParts {
  typename O::V p, n;
};
template <class O>
inline ExpParts<O> exp_parts_t(typename O::V x) {
  using W = typename O::V;
  const W n = O::round(O::mul(x, O::set1(1.44269504088896341f)));
  W r = O::fnmadd(n, O::set1(0.693359375f), x);  // ln2 = 0.693359375 - 2.12194440e-4 (hi part exact)
  r = O::fnmadd(n, O::set1(-2.12194440e-4f), r);
  static constexpr float c[] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                                4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};
  const W r2 = O::mul(r, r);
  return {O::fma(poly_t<O>(r, c), r2, O::add(r, O::set1(1.0f))), n};
}

/// exp(x) for x in [-87, 88], where 2^n is one normal scaling (no clamp, no special case): exp_t's
/// bits there. A NaN x gives an unspecified value (callers blend NaN in themselves).
template <class O>
inline typename O::V exp_normal_t(typename O::V x) {
  const auto [p, n] = exp_parts_t<O>(x);
  return O::scale2i(p, n);
}

/// exp with results below FLT_MIN flushed to 0 (exp8 of vec_math.h, the reductions' and losses'
/// exp, on any lanes): x clamped to [-87.34, 88.37] (NaN kept), then one scaling; x < -87.34 gives
/// 0, x > 88.72 gives +inf.
template <class O>
inline typename O::V exp_flush_t(typename O::V in) {
  using W = typename O::V;
  if (O::all_within(in, -87.33654f, 88.37f)) return exp_normal_t<O>(in);  // the same bits there
  const W lo = O::set1(-87.33654f);
  const W x = O::max(lo, O::min(O::set1(88.37f), in));  // operand order keeps NaN
  const W y = O::select(O::lt(in, lo), O::zero(), exp_normal_t<O>(x));
  return O::select(O::gt(in, O::set1(88.72283f)), O::set1(__builtin_inff()), y);
}

/// y[j] = exp_flush(x[j] - shift) for the full 16-float blocks of n (y may be x, or null), summed
/// into acc: lanes 0-7 take the first 8 floats of every block, lanes 8-15 the second 8 (the
/// 8-lane loop's two accumulators, in its order). Returns the floats done.
template <class O>
inline int64_t exp_shift_acc_t(const float* x, float* y, int64_t n, float shift, typename O::V& acc) {
  static_assert(O::kLanes == 16, "two 8-lane accumulators per vector");
  const typename O::V s = O::set1(shift);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const typename O::V e = exp_flush_t<O>(O::sub(O::load(x + j), s));
    if (y) O::store(y + j, e);
    acc = O::add(acc, e);
  }
  return j;
}

/// exp over the whole float range: clamps, 2^n in two scalings (subnormal results rounded once),
/// +inf, 0 and NaN handled.
template <class O>
inline typename O::V exp_any_t(typename O::V x) {
  using W = typename O::V;
  const W hi = O::set1(88.72283935546875f);       // exp(x) rounds to +inf from here on
  const W lo = O::set1(-103.97208404541015625f);  // exp(x) < 2^-150: rounds to 0
  const W xc = O::min(O::max(x, lo), hi);
  const auto [p, n] = exp_parts_t<O>(xc);
  // n in [-150, 128]: scale by 2^(n/2) twice so neither factor leaves the normal range and a
  // subnormal result is rounded once.
  const W n1 = O::floor(O::mul(n, O::set1(0.5f)));
  W y = O::mul(O::mul(p, O::pow2i(n1)), O::pow2i(O::sub(n, n1)));
  y = O::select(O::ge(x, hi), O::set1(__builtin_inff()), y);
  y = O::select(O::lt(x, lo), O::zero(), y);
  return O::select(O::is_nan(x), x, y);
}
/// exp: exp_normal_t where every lane is in [-87, 88] (its bits there), else exp_any_t.
template <class O>
inline typename O::V exp_t(typename O::V x) {
  return O::all_within(x, -87.0f, 88.0f) ? exp_normal_t<O>(x) : exp_any_t<O>(x);
}
inline V exp(V x) { return exp_t<O8>(x); }

inline V log(V x) {
  // Subnormal inputs: scale by 2^23 first.
  const V sub = lt(x, set1(1.17549435e-38f));
  const V xs = select(sub, _mm256_mul_ps(x, set1(8388608.0f)), x);
  const __m256i bits = _mm256_castps_si256(xs);
  V e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126)));
  e = _mm256_sub_ps(e, _mm256_and_ps(sub, set1(23.0f)));
  // m in [0.5, 1)
  V m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                                            _mm256_set1_epi32(0x3f000000)));
  const V small = lt(m, set1(0.707106781186547524f));
  e = _mm256_sub_ps(e, _mm256_and_ps(small, set1(1.0f)));
  m = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(small, m)), set1(1.0f));  // m - 1 or 2m - 1
  static constexpr float c[] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                                -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                                2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
  const V z = _mm256_mul_ps(m, m);
  V y = _mm256_mul_ps(_mm256_mul_ps(poly(m, c), m), z);
  y = fma(e, set1(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(z, set1(0.5f), y);
  y = _mm256_add_ps(_mm256_add_ps(m, y), _mm256_mul_ps(e, set1(0.693359375f)));
  y = select(_mm256_cmp_ps(x, set1(__builtin_inff()), _CMP_EQ_OQ), x, y);
  y = select(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ), set1(-__builtin_inff()), y);
  return select(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NGE_UQ), set1(__builtin_nanf("")), y);  // x < 0 or NaN
}

inline V tanh(V x) {
  const V ax = abs(x);
  static constexpr float c[] = {-5.70498872745E-3f, 2.06390887954E-2f, -5.37397155531E-2f,
                                1.33314422036E-1f, -3.33332819422E-1f};
  const V z = _mm256_mul_ps(x, x);
  const V small = fma(_mm256_mul_ps(poly(z, c), z), x, x);
  const V e = exp(_mm256_add_ps(ax, ax));
  const V large = _mm256_sub_ps(set1(1.0f), _mm256_div_ps(set1(2.0f), _mm256_add_ps(e, set1(1.0f))));
  return select(lt(ax, set1(0.625f)), small, copysign(large, x));  // NaN flows through `large`
}

template <class O>
inline typename O::V sigmoid_t(typename O::V x) {
  const typename O::V e = exp_t<O>(O::sub(O::zero(), O::abs(x)));
  const typename O::V num = O::select(O::ge(x, O::zero()), O::set1(1.0f), e);
  return O::div(num, O::add(O::set1(1.0f), e));
}
inline V sigmoid(V x) { return sigmoid_t<O8>(x); }

/// y = x / (1 + exp(-x)) (SiLU, the activation of a fused convolution) on the full vectors of the
/// n floats at x; y may be x. Returns the floats done. Cheaper than Sigmoid then Mul (about a third
/// of the operations): exp's argument is clamped to [-87, 87], where 2^n needs one scaling and no
/// special case, and the quotient is x times 1 / d by the approximate reciprocal and one Newton
/// step (d = 1 + e is in [1, 6.1e37], so the reciprocal is a normal float). For x >= -87 the
/// result is within 4 ulp of x * sigmoid(x) (tests/cpp/test_elementwise_unary.cpp); below, where |x sigmoid(x)| < 1.5e-36, it is -0 (so
/// -inf gives -0, the limit, where Sigmoid then Mul gives NaN); +inf stays +inf, NaN stays NaN.
template <class O>
inline int64_t silu_t(const float* x, float* y, int64_t n) {
  using W = typename O::V;
  const int64_t full = n / O::kLanes * O::kLanes;
  const W one = O::set1(1.0f);
  for (int64_t i = 0; i < full; i += O::kLanes) {
    const W v = O::load(x + i);
    const W t = O::min(O::max(O::sub(O::zero(), v), O::set1(-87.0f)), O::set1(87.0f));
    const W d = O::add(one, exp_normal_t<O>(t));
    W r = O::rcp(d);
    r = O::fma(r, O::fnmadd(d, r, one), r);
    if constexpr (O::kLanes == 8) r = O::fma(r, O::fnmadd(d, r, one), r);  // AVX's 12-bit estimate needs a second step
    O::store(y + i, O::select(O::lt(v, O::set1(-87.0f)), O::set1(-0.0f), O::mul(v, r)));
  }
  return full;
}

/// 1 / d for d in [1, 3] (and NaN), with the bits of the division (checked for every float of the
/// range on 8 and 16 lanes by tests/cpp/test_elementwise_unary.cpp): the approximate reciprocal,
/// one Newton step, then Markstein's correcting step, which rounds correctly for every d whose
/// significand is not all ones; the one such d of [1, 3] below 3, 2 - 2^-23, is taken from a
/// constant. A division costs about 4x the throughput of these five operations.
template <class O>
inline typename O::V recip_1_3_t(typename O::V d) {
  using W = typename O::V;
  const W one = O::set1(1.0f);
  W y = O::rcp(d);
  y = O::fma(y, O::fnmadd(d, y, one), y);
  y = O::fma(y, O::fnmadd(d, y, one), y);
  constexpr float kAllOnes = 1.99999988079071044921875f;  // 2 - 2^-23
  return O::select(O::eq(d, O::set1(kAllOnes)), O::set1(1.0f / kAllOnes), y);
}

/// GELU's x / sqrt 2 (kSqrt2f) for erf: the bits of the division wherever they can change
/// 1 + erf(x / sqrt 2) (2^-60 < |x| < 1e30, checked for every float), by a product with the
/// rounded reciprocal and one correcting FMA; |x| is clamped to 1e30 first (erf is +-1 from
/// 4 sqrt 2 on) and NaN stays NaN. About 3x faster than the division.
template <class O>
inline typename O::V div_sqrt2_t(typename O::V x) {
  using W = typename O::V;
  constexpr float kInv = 0.707106769084930419921875f;  // float(1 / sqrt 2)
  const W v = O::min(O::set1(1e30f), O::max(O::set1(-1e30f), x));  // max, then min: NaN passes through
  const W q = O::mul(v, O::set1(kInv));
  return O::fma(O::fnmadd(q, O::set1(kSqrt2f), v), O::set1(kInv), q);
}

// erf in parts: erf(x) = erf_end(x, erf_begin(x), exp(parts.arg)). The one-vector erf is one long
// dependency chain (a division, two polynomials, exp, a blend) that the core overlaps across too
// few vectors; erf_map runs a block of vectors through each part before the next (the same bits).
template <class O>
struct ErfPartsT {
  typename O::V small, t, arg;  // |x| < 1: x + x P6(x^2); else t = 1 / (1 + |x| / 2) and exp's argument
};

template <class O>
inline ErfPartsT<O> erf_begin_t(typename O::V x) {
  using W = typename O::V;
  const W ax = O::abs(x);
  static constexpr float a[] = {7.816716970410198e-05f, -0.0007998295477591455f, 0.005186871159821749f,
                                -0.026852965354919434f, 0.11283561587333679f,    -0.376126229763031f,
                                0.12837916709551257f};  // 2/sqrt(pi) - 1: x * (1 + p) keeps the leading term exact
  ErfPartsT<O> p;
  p.small = O::fma(x, poly_t<O>(O::mul(x, x), a), x);
  static constexpr float q[] = {0.08488334715366364f, 0.012807464227080345f, -0.5072454810142517f,
                                0.39532071352005005f, 0.26166296005249023f,  1.0208369493484497f,
                                -1.2670670747756958f};
  const W xc = O::min(O::set1(4.0f), ax);  // NaN stays NaN (min returns the second operand)
  p.t = recip_1_3_t<O>(O::fma(xc, O::set1(0.5f), O::set1(1.0f)));
  p.arg = O::fnmadd(xc, xc, poly_t<O>(p.t, q));
  return p;
}

/// e = exp(p.arg): arg is in [-17.5, 0.5] (or NaN, where t is NaN too), so exp_normal_t serves.
template <class O>
inline typename O::V erf_end_t(typename O::V x, typename O::V small, typename O::V t, typename O::V e) {
  const typename O::V erfc = O::mul(t, e);
  const typename O::V large = O::copysign(O::sub(O::set1(1.0f), erfc), x);
  return O::select(O::lt(O::abs(x), O::set1(1.0f)), small, large);
}

using ErfParts = ErfPartsT<O8>;
inline ErfParts erf_begin(V x) { return erf_begin_t<O8>(x); }
inline V erf_end(V x, V small, V t, V e) { return erf_end_t<O8>(x, small, t, e); }
inline V erf(V x) {
  const ErfParts p = erf_begin(x);
  return erf_end(x, p.small, p.t, exp_normal_t<O8>(p.arg));
}

/// For each full vector of the n floats at x (offset i, a multiple of O::kLanes, below
/// n - n % kLanes): post(i, v, erf(pre(v))), with the bits of erf(pre(v)) but computed part by
/// part over blocks of 32 vectors (about 1.5x faster than vector by vector on Zen 5). Returns the
/// floats done.
template <class O, class Pre, class Post>
inline int64_t erf_map_t(const float* x, int64_t n, Pre&& pre, Post&& post) {
  using W = typename O::V;
  constexpr int kBlock = 32, L = O::kLanes;
  alignas(64) float u[kBlock * L], sm[kBlock * L], tt[kBlock * L], ar[kBlock * L];
  const int64_t full = n / L * L;
  for (int64_t i0 = 0; i0 < full; i0 += kBlock * L) {
    const int nv = int(std::min<int64_t>(kBlock, (full - i0) / L));
    for (int b = 0; b < nv; ++b) {
      const W v = pre(O::load(x + i0 + L * b));
      const ErfPartsT<O> p = erf_begin_t<O>(v);
      O::store_aligned(u + L * b, v);
      O::store_aligned(sm + L * b, p.small);
      O::store_aligned(tt + L * b, p.t);
      O::store_aligned(ar + L * b, p.arg);
    }
    for (int b = 0; b < nv; ++b) O::store_aligned(ar + L * b, exp_normal_t<O>(O::load_aligned(ar + L * b)));
    for (int b = 0; b < nv; ++b) {
      const W e = erf_end_t<O>(O::load_aligned(u + L * b), O::load_aligned(sm + L * b),
                               O::load_aligned(tt + L * b), O::load_aligned(ar + L * b));
      post(i0 + L * b, O::load(x + i0 + L * b), e);
    }
  }
  return full;
}
template <class Pre, class Post>
inline int64_t erf_map(const float* x, int64_t n, Pre&& pre, Post&& post) {
  return erf_map_t<O8>(x, n, pre, post);
}

// The exact GELU of com.onnxtrain.Gelu / GeluGrad (elementwise_unary.cpp) on full vectors, staged:
// A = 1 + erf(x / sqrt 2), Y = (x A) 0.5, dX = dY (A / 2 + x phi(x)). Each returns the floats done.

template <class O>
inline int64_t gelu_t(const float* x, float* y, float* a, int64_t n) {
  using W = typename O::V;
  return erf_map_t<O>(
      x, n, [](W v) { return div_sqrt2_t<O>(v); },
      [&](int64_t k, W v, W er) {
        const W av = O::add(er, O::set1(1.0f));
        if (y) O::store(y + k, O::mul(O::mul(v, av), O::set1(0.5f)));
        if (a) O::store(a + k, av);
      });
}

/// phi's exp for the gradient (the same bits wherever A comes from).
template <class O>
inline typename O::V gelu_grad_one(typename O::V dy, typename O::V v, typename O::V av) {
  using W = typename O::V;
  const W phi = O::mul(exp_t<O>(O::mul(O::mul(v, v), O::set1(-0.5f))), O::set1(float(kInvSqrt2Pi)));
  const W d = O::fma(v, phi, O::mul(O::set1(0.5f), av));
  return O::mul(dy, d);
}

/// A recomputed as gelu_t does.
template <class O>
inline int64_t gelu_grad_t(const float* dy, const float* x, float* dx, int64_t n) {
  using W = typename O::V;
  return erf_map_t<O>(
      x, n, [](W v) { return div_sqrt2_t<O>(v); },
      [&](int64_t k, W v, W er) {
        O::store(dx + k, gelu_grad_one<O>(O::load(dy + k), v, O::add(er, O::set1(1.0f))));
      });
}

/// e^x - 1 without cancellation near 0: |x| < ln 2: degree-10 Taylor polynomial (error < 1e-9
/// relative); else exp(x) - 1.
inline V expm1(V x) {
  static constexpr float c[] = {1.0f / 39916800, 1.0f / 3628800, 1.0f / 362880, 1.0f / 40320, 1.0f / 5040,
                                1.0f / 720,      1.0f / 120,     1.0f / 24,     1.0f / 6,     0.5f};
  const V small = fma(_mm256_mul_ps(poly(x, c), x), x, x);  // x + x^2 * P(x)
  const V large = _mm256_sub_ps(exp(x), set1(1.0f));
  return select(lt(abs(x), set1(0.693147182f)), small, large);
}

/// log(1 + u) for u >= 0 (Softplus): log(w) * u / (w - 1) with w = 1 + u corrects w's rounding.
inline V log1p_pos(V u) {
  const V w = _mm256_add_ps(set1(1.0f), u);
  const V d = _mm256_sub_ps(w, set1(1.0f));
  const V r = _mm256_mul_ps(log(w), _mm256_div_ps(u, d));
  return select(_mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_EQ_OQ), u, r);  // u below half an ulp of 1
}

/// y[i] = f(x[i]) over n floats, 8 at a time; the tail goes through one padded vector.
template <class F>
inline void apply(const float* x, float* y, int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t k = i; k < n; ++k) buf[k - i] = x[k];
    _mm256_store_ps(buf, f(_mm256_load_ps(buf)));
    for (int64_t k = i; k < n; ++k) y[k] = buf[k - i];
  }
}
#endif

}  // namespace onnxtrain::kernels::cpu::vmath
