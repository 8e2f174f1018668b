// vmath's staged erf / GELU loops on 16 lanes. CMakeLists.txt compiles this file alone with
// -mavx512f -mavx512dq; only Avx512Ops instantiations of the header's templates are made here, so no
// AVX-512 code can stand in for an 8-lane inline function elsewhere.
#include "kernels/cpu/vmath512.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "kernels/cpu/elementwise_simd.h"

namespace onnxtrain::kernels::cpu::vmath512 {

namespace {

// Avx2Ops' members on __m512: the same IEEE operations; comparisons give masks.
struct Avx512Ops {
  using V = __m512;
  using M = __mmask16;
  static constexpr int kLanes = 16;
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_aligned(const float* p) { return _mm512_load_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_aligned(float* p, V v) { _mm512_store_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V rcp(V x) { return _mm512_rcp14_ps(x); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V round(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V floor(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static V pow2i(V n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  /// One vscalefps: p * 2^n exactly where the product is normal (Avx2Ops' product's bits there).
  static V scale2i(V p, V n) { return _mm512_scalef_ps(p, n); }
  static V abs(V x) { return _mm512_andnot_ps(set1(-0.0f), x); }
  static V copysign(V x, V s) { return _mm512_or_ps(abs(x), _mm512_and_ps(s, set1(-0.0f))); }
  static M lt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M ge(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static M gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M eq(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static M is_nan(V x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q); }
  static bool all_within(V x, float lo, float hi) {
    return _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(x, set1(lo), _CMP_GE_OQ), x, set1(hi), _CMP_LE_OQ) == 0xFFFF;
  }
  static V select(M m, V yes, V no) { return _mm512_mask_blend_ps(m, no, yes); }
};

}  // namespace

bool available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return ok;
}

int64_t gelu(const float* x, float* y, float* a, int64_t n) { return vmath::gelu_t<Avx512Ops>(x, y, a, n); }

int64_t gelu_grad(const float* dy, const float* x, float* dx, int64_t n) {
  return vmath::gelu_grad_t<Avx512Ops>(dy, x, dx, n);
}

int64_t erf(const float* x, float* y, int64_t n) {
  return vmath::erf_map_t<Avx512Ops>(x, n, [](__m512 v) { return v; },
                                     [&](int64_t k, __m512, __m512 e) { _mm512_storeu_ps(y + k, e); });
}

int64_t silu(const float* x, float* y, int64_t n) { return vmath::silu_t<Avx512Ops>(x, y, n); }
int64_t exp_shift_acc(const float* x, float* y, int64_t n, float shift, float* acc) {
  __m512 a = _mm512_loadu_ps(acc);
  const int64_t done = vmath::exp_shift_acc_t<Avx512Ops>(x, y, n, shift, a);
  _mm512_storeu_ps(acc, a);
  return done;
}

namespace {
template <class F>
int64_t map16(const float* x, float* y, int64_t n, F&& f) {
  const int64_t full = n / 16 * 16;
  for (int64_t i = 0; i < full; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  return full;
}
}  // namespace

int64_t recip_1_3(const float* d, float* y, int64_t n) {
  return map16(d, y, n, [](__m512 v) { return vmath::recip_1_3_t<Avx512Ops>(v); });
}
int64_t div_sqrt2(const float* x, float* y, int64_t n) {
  return map16(x, y, n, [](__m512 v) { return vmath::div_sqrt2_t<Avx512Ops>(v); });
}

}  // namespace onnxtrain::kernels::cpu::vmath512

#else  // a compiler or target without AVX-512: the 8-lane code does everything

namespace onnxtrain::kernels::cpu::vmath512 {
bool available() { return false; }
int64_t gelu(const float*, float*, float*, int64_t) { return 0; }
int64_t gelu_grad(const float*, const float*, float*, int64_t) { return 0; }
int64_t erf(const float*, float*, int64_t) { return 0; }
int64_t silu(const float*, float*, int64_t) { return 0; }
int64_t exp_shift_acc(const float*, float*, int64_t, float, float*) { return 0; }
int64_t recip_1_3(const float*, float*, int64_t) { return 0; }
int64_t div_sqrt2(const float*, float*, int64_t) { return 0; }
}  // namespace onnxtrain::kernels::cpu::vmath512

#endif
