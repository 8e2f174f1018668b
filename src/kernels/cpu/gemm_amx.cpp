// float32 products on AMX tiles through the exact three-way bfloat16 split (gemm_amx.h).
// Compiled with the AMX and AVX512-BF16 flags (CMakeLists.txt); runs only where available() says.
#include "kernels/cpu/gemm_amx.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__linux__)
#define OT_AMX 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define OT_AMX 0
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include <oneapi/dnnl/dnnl.h>

#include "core/parallel.h"
#include "onnxtrain/device.h"

namespace onnxtrain::kernels::cpu::amx {

void AlignedFree::operator()(uint16_t* p) const { cpu_allocator().deallocate(p); }

// From the host allocator: 64-byte aligned, and a packed B block (4.7 MB) on huge pages.
AlignedBf16 aligned_bf16(int64_t elements) {
  return AlignedBf16(
      static_cast<uint16_t*>(cpu_allocator().allocate(size_t(std::max<int64_t>(elements, 1)) * sizeof(uint16_t), 64)));
}

#if OT_AMX
namespace {

constexpr int64_t kMR = 32;   // rows of C per micro-kernel call (two 16-row tiles)
constexpr int64_t kNR = 32;   // columns of C per call (two 16-column tiles)
constexpr int64_t kKB = 32;   // K per tile product (16 pairs)
constexpr int64_t kTile = 512;  // bf16 elements of a tile: 16 rows x 64 bytes
constexpr int64_t kBlock = 6 * kTile;  // one K step of a packed 32-row (or 32-column) panel: 3 parts x 2 tiles
// Block sizes (measured on BERT-base's products, one Sapphire Rapids core: K blocks of 256 with
// 256-row A blocks ran 237-259 GFLOP/s, of 512-768 with 128-row ones 257-312): C is read and
// written once per K block, so K blocks are long; K is cut into equal blocks of at most kKC.
constexpr int64_t kKC = 768;   // K per packed block, at most
constexpr int64_t kMC = 128;   // rows of A per packed block
constexpr int64_t kNC = 1024;  // columns of B per packed block (A is packed once per block)

// ---- the split --------------------------------------------------------------------------------

// x = hi + mid + lo exactly for normal x: hi is x rounded to 8 significant bits (to nearest,
// ties away from zero: add half of bf16's last place to the magnitude's bits, drop the low 16),
// mid the remainder rounded likewise, lo what is left (at most 8 significant bits: exact in bf16).
// Each part is a float whose low 16 bits are zero, i.e. a bfloat16 in its high half. Any rounding
// to nearest leaves |mid| <= 2^-8 |x| and |lo| <= 2^-17 |x|, which bounds the dropped products.
// Infinities, NaNs and values whose rounding overflows (|x| >= 0x7F7F8000) make lo NaN (hi is
// infinite or NaN, so x - hi and its remainder are NaN): `Tally` keeps lo * 0 summed, which is NaN
// from the first such value on and 0 otherwise, one fused multiply-add a vector (packing runs on
// the vector ports: docs/kernels.md). The other operand's zero parts would turn an infinity into
// NaN (0 * inf), so a block that holds one is computed again in float32 (region()).
struct Parts {
  __m512i p[3];
};

struct Tally {
  __m512 acc = _mm512_setzero_ps();
  void note(__m512 lo) { acc = _mm512_fmadd_ps(lo, _mm512_setzero_ps(), acc); }
  bool bad() const { return _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q) != 0; }
};

// Lanes the split may not take: infinities, NaNs and |x| >= 0x7F7F0000 (whose rounding to 8 bits
// could overflow). gemm()'s scan before beta != 0, which cannot recompute a block.
inline __mmask16 not_splittable(__m512i bits) {
  return _mm512_cmpge_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F7F0000));
}

inline __m512i round8(__m512i bits) {
  return _mm512_and_si512(_mm512_add_epi32(bits, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(int(0xFFFF0000u)));
}

inline Parts split16(__m512 x, Tally& tally) {
  Parts s;
  s.p[0] = round8(_mm512_castps_si512(x));
  const __m512 r = _mm512_sub_ps(x, _mm512_castsi512_ps(s.p[0]));
  s.p[1] = round8(_mm512_castps_si512(r));
  const __m512 lo = _mm512_sub_ps(r, _mm512_castsi512_ps(s.p[1]));
  tally.note(lo);
  s.p[2] = _mm512_castps_si512(lo);
  return s;
}

// Two rows' parts interleaved as bf16 pairs: dword j = (even[j], odd[j]).
inline __m512i pairs(__m512i even, __m512i odd) {
  return _mm512_mask_blend_epi16(__mmask32(0xAAAAAAAAu), _mm512_srli_epi32(even, 16), odd);
}

// 32 consecutive values' parts (lo: the first 16, hi: the next 16) as 32 bf16 (exact: each part is
// a bfloat16 already).
inline __m512i join(__m512i lo, __m512i hi) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo));
}

// r[i] dword j <-> r[j] dword i.
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[4g + q] lane L holds element 4L + q of rows 4g .. 4g + 3.
  for (int q = 0; q < 4; ++q) {
    const __m512i xl = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x44), xh = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xEE);
    const __m512i yl = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x44),
                  yh = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xEE);
    r[q] = _mm512_shuffle_i32x4(xl, yl, 0x88);
    r[4 + q] = _mm512_shuffle_i32x4(xl, yl, 0xDD);
    r[8 + q] = _mm512_shuffle_i32x4(xh, yh, 0x88);
    r[12 + q] = _mm512_shuffle_i32x4(xh, yh, 0xDD);
  }
}

inline __mmask16 first(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1); }

// ---- packing ----------------------------------------------------------------------------------
// A panel (32 rows): per K step of 32, tiles [part][row half], each 16 rows x 32 bf16 (K in a row).
// B panel (32 columns): per K step, tiles [part][column half], each 16 K-pairs x 16 columns x 2.
// Rows, columns and K beyond the block are zeros.

// A block of op(A) rows (is_a; A is [M, K] with row stride ld, or [K, M] when trans) or of op(B)
// columns (B is [K, N], or [N, K] when trans): [j0, j_end) in panels of 32, K [k0, k_end), into
// dst (panel q at dst + q * step, step = K steps x kBlock). A panel's tile (K step kb, part s, half
// h) is at kb * kBlock + (2 s + h) * kTile: 16 rows of 16 bf16 pairs, A's rows of K values, B's
// K-pairs. The source is read along its contiguous axis: 16 rows x 32 K at a time where it runs
// along K (each tile is then written row after row); A transposed as 32 K rows x 16 columns turned
// into rows of K by two 16 x 16 float32 register transposes (a third of the shuffles of
// transposing the three parts' pairs); B two K rows across 64 columns at a time. The lines two K
// steps ahead (or the next rows', where K ends first) are prefetched. The split and the stores run
// on the vector ports, so each full 16 x 32 step is straight-line code (no spills). `stage`
// (kStage elements) holds B's transposed rows awaiting their 16 x 16 transpose. Returns whether a
// value the split does not take was read.
constexpr int64_t kStage = 3 * kTile;
constexpr int64_t kAhead = 2 * kKB;  // prefetch distance along K

// Rows of K (A, or B transposed): 16 rows [jg, jg + rows) x K [k, k + 32) of the source, split into
// the part tiles d, d + ds, d + 2 ds (16 rows of 32 bf16). Full: 16 rows and 32 K values.
// pf: the same rows' (or the next 16 rows') lines two K steps on (pf_rows of them), prefetched.
template <bool Full>
inline void pack_rows(const float* X, int64_t ld, int64_t jg, int64_t rows, int64_t k, int64_t k_end, uint16_t* d,
                      int64_t ds, const float* pf, int64_t pf_rows, Tally& tally) {
  const __mmask16 m0 = first(k_end - k), m1 = first(k_end - k - 16);
  for (int64_t r = 0; r < 16; ++r) {
    const float* src = X + (jg + r) * ld + k;
    __m512 x0, x1;
    if (Full) {
      if (r < pf_rows) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + r * ld), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(pf + r * ld + 16), _MM_HINT_T0);
      }
      x0 = _mm512_loadu_ps(src);
      x1 = _mm512_loadu_ps(src + 16);
    } else if (r < rows) {
      x0 = _mm512_maskz_loadu_ps(m0, src);
      x1 = _mm512_maskz_loadu_ps(m1, src + 16);
    } else {
      x0 = x1 = _mm512_setzero_ps();
    }
    const Parts lo = split16(x0, tally), hi = split16(x1, tally);
    _mm512_storeu_si512(d + r * 32, join(lo.p[0], hi.p[0]));
    _mm512_storeu_si512(d + ds + r * 32, join(lo.p[1], hi.p[1]));
    _mm512_storeu_si512(d + 2 * ds + r * 32, join(lo.p[2], hi.p[2]));
  }
}

// Rows that are K (B): K rows ke, ke + 1 (p = (ke - k0) / 2 % 16, the tile row) x
// columns [j, j + 16) (mask mj), split and interleaved as K-pairs into d + p * 32, d + ds + p * 32,
// d + 2 ds + p * 32.
inline void pack_pair(const float* X, int64_t ld, int64_t ke, int64_t k_end, int64_t j, __mmask16 mj, uint16_t* d,
                      int64_t ds, Tally& tally) {
  const __m512 x0 = ke < k_end ? _mm512_maskz_loadu_ps(mj, X + ke * ld + j) : _mm512_setzero_ps();
  const __m512 x1 = ke + 1 < k_end ? _mm512_maskz_loadu_ps(mj, X + (ke + 1) * ld + j) : _mm512_setzero_ps();
  const Parts e = split16(x0, tally), o = split16(x1, tally);
  _mm512_storeu_si512(d, pairs(e.p[0], o.p[0]));
  _mm512_storeu_si512(d + ds, pairs(e.p[1], o.p[1]));
  _mm512_storeu_si512(d + 2 * ds, pairs(e.p[2], o.p[2]));
}

bool pack_block(bool is_a, bool trans, const float* X, int64_t ld, int64_t j0, int64_t j_end, int64_t k0, int64_t k_end,
                uint16_t* dst, uint16_t* stage) {
  Tally tally;
  const int64_t nkb = (k_end - k0 + kKB - 1) / kKB, step = nkb * kBlock;
  const int64_t groups = (j_end - j0 + kMR - 1) / kMR * 2;  // 16-wide halves, padded to whole panels
  auto tile = [&](int64_t g, int64_t kb, int s) { return dst + (g / 2) * step + kb * kBlock + (2 * s + g % 2) * kTile; };
  auto transpose_out = [](uint16_t* from, uint16_t* to) {
    __m512i v[16];
    for (int r = 0; r < 16; ++r) v[r] = _mm512_loadu_si512(from + r * 32);
    transpose16(v);
    for (int r = 0; r < 16; ++r) _mm512_storeu_si512(to + r * 32, v[r]);
  };
  if (is_a != trans) {  // source rows run along K (A, or B transposed)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t jg = j0 + g * 16, rows = std::clamp<int64_t>(j_end - jg, 0, 16);
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const int64_t k = k0 + kb * kKB;
        uint16_t* d = trans ? stage : tile(g, kb, 0);
        const int64_t ds = trans ? kTile : 2 * kTile;
        // Two K steps on, or into the next 16 rows where K ends first (a head's 64 values of each
        // of attention's rows, 8 KB apart: without it each row's lines were loaded on demand).
        const int64_t kb2 = kb + kAhead / kKB;
        const bool wrap = kb2 >= nkb;
        const int64_t pf_row = jg + (wrap ? 16 : 0), pf_k = k0 + (wrap ? kb2 - nkb : kb2) * kKB;
        const int64_t pf_rows = pf_k < k_end ? std::clamp<int64_t>(j_end - pf_row, 0, 16) : 0;
        if (rows == 16 && k + kKB <= k_end)
          pack_rows<true>(X, ld, jg, rows, k, k_end, d, ds, X + pf_row * ld + pf_k, pf_rows, tally);
        else
          pack_rows<false>(X, ld, jg, rows, k, k_end, d, ds, nullptr, 0, tally);
        if (trans)  // B: a row's K-pairs become a column of the tile
          for (int s = 0; s < 3; ++s) transpose_out(stage + s * kTile, tile(g, kb, s));
      }
    }
  } else if (trans) {  // A transposed ([K, M]): 32 K rows x 16 columns through two 16 x 16 float32
                       // register transposes into rows of K, then split as A's rows are
    alignas(64) float kmajor[16 * kKB];  // 16 rows (columns of the source) of 32 K values
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t k = k0 + kb * kKB;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t j = j0 + g * 16;
        const __mmask16 mj = first(j_end - j);
        for (int64_t half = 0; half < 2; ++half) {
          __m512i v[16];
          for (int64_t r = 0; r < 16; ++r) {
            const int64_t kr = k + half * 16 + r;
            if (kr + kAhead < k_end) _mm_prefetch(reinterpret_cast<const char*>(X + (kr + kAhead) * ld + j), _MM_HINT_T0);
            v[r] = kr < k_end ? _mm512_castps_si512(_mm512_maskz_loadu_ps(mj, X + kr * ld + j)) : _mm512_setzero_si512();
          }
          transpose16(v);
          for (int64_t m = 0; m < 16; ++m) _mm512_store_si512(kmajor + m * kKB + half * 16, v[m]);
        }
        pack_rows<true>(kmajor, kKB, 0, 16, 0, kKB, tile(g, kb, 0), 2 * kTile, nullptr, 0, tally);
      }
    }
  } else {  // B ([K, N]): two K rows at a time, 64 columns at a time
    constexpr int64_t kChunk = 4;  // 16-wide groups: their 12 tiles stay in the first-level cache
    // The first kAhead rows' first chunk (the loop prefetches from there on).
    for (int64_t k = k0; k < std::min(k_end, k0 + kAhead); ++k)
      for (int64_t c = 0; c < std::min<int64_t>(kChunk * 16, j_end - j0); c += 16)
        _mm_prefetch(reinterpret_cast<const char*>(X + k * ld + j0 + c), _MM_HINT_T0);
    for (int64_t kb = 0; kb < nkb; ++kb) {
      for (int64_t g0 = 0; g0 < groups; g0 += kChunk) {
        const int64_t g1 = std::min(groups, g0 + kChunk), jc = j0 + g0 * 16;
        const int64_t width = std::clamp<int64_t>(j_end - jc, 0, (g1 - g0) * 16);
        for (int64_t p = 0; p < 16; ++p) {
          const int64_t ke = k0 + kb * kKB + 2 * p;
          if (ke + 1 + kAhead < k_end)  // these columns of the rows kAhead ahead
            for (int64_t c = 0; c < width; c += 16) {
              _mm_prefetch(reinterpret_cast<const char*>(X + (ke + kAhead) * ld + jc + c), _MM_HINT_T0);
              _mm_prefetch(reinterpret_cast<const char*>(X + (ke + 1 + kAhead) * ld + jc + c), _MM_HINT_T0);
            }
          for (int64_t g = g0; g < g1; ++g) {
            const int64_t j = j0 + g * 16;
            pack_pair(X, ld, ke, k_end, j, first(j_end - j), tile(g, kb, 0) + p * 32, 2 * kTile, tally);
          }
        }
      }
    }
  }
  return tally.bad();
}

// ---- the micro-kernel -------------------------------------------------------------------------

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// This thread's eight tiles as the micro-kernel uses them: 16 rows of 64 bytes each.
void load_tile_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

// C[32, 32] (row stride ldc floats) += the six part products over nkb K steps; load: start from C
// (else from zero). Tiles 0-3 hold C, 4-5 A's two row halves, 6-7 B's two column halves.
void kernel(int64_t nkb, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, bool load) {
  const int64_t cs = ldc * int64_t(sizeof(float));
  if (load) {
    _tile_loadd(0, c, cs);
    _tile_loadd(1, c + 16, cs);
    _tile_loadd(2, c + 16 * ldc, cs);
    _tile_loadd(3, c + 16 * ldc + 16, cs);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  // (GCC's tile intrinsics are statements, with the tile numbers spelled as constants.)
#define OT_A(s)                                   \
  _tile_loadd(4, a + (2 * (s)) * kTile, 64);      \
  _tile_loadd(5, a + (2 * (s) + 1) * kTile, 64)
#define OT_B(s)                                   \
  _tile_loadd(6, b + (2 * (s)) * kTile, 64);      \
  _tile_loadd(7, b + (2 * (s) + 1) * kTile, 64)
#define OT_DP()            \
  _tile_dpbf16ps(0, 4, 6); \
  _tile_dpbf16ps(1, 4, 7); \
  _tile_dpbf16ps(2, 5, 6); \
  _tile_dpbf16ps(3, 5, 7)
  for (int64_t kb = 0; kb < nkb; ++kb, a += kBlock, b += kBlock) {
    // hi.hi, hi.mid, hi.lo, mid.mid, mid.hi, lo.hi: 16 tile loads for 24 products.
    OT_A(0);
    OT_B(0);
    OT_DP();
    OT_B(1);
    OT_DP();
    OT_B(2);
    OT_DP();
    OT_A(1);
    OT_B(1);
    OT_DP();
    OT_B(0);
    OT_DP();
    OT_A(2);
    OT_DP();
  }
#undef OT_A
#undef OT_B
#undef OT_DP
  _tile_stored(0, c, cs);
  _tile_stored(1, c + 16, cs);
  _tile_stored(2, c + 16 * ldc, cs);
  _tile_stored(3, c + 16 * ldc + 16, cs);
}

// ---- per-thread driver ------------------------------------------------------------------------

// A thread's packed blocks (5.4 MB), made at its first product and kept: 64-byte aligned (tile
// rows from unaligned memory ran the micro-kernel at 12 ns a product instead of 7).
struct Buffers {
  AlignedBf16 a = aligned_bf16(kMC / kMR * (kKC / kKB) * kBlock), b = aligned_bf16(kNC / kNR * (kKC / kKB) * kBlock),
              stage = aligned_bf16(kStage);
};

struct Problem {
  bool ta, tb;
  int64_t M, N, K;
  float alpha;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float beta;
  float* C;
  int64_t ldc;
};

// C rows [m0, m1) x columns [n0, n1) (m0, n0 multiples of 32).
void region(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m0 >= m1 || n0 >= n1) return;
  static thread_local Buffers buf;
  load_tile_config();
  if (p.beta != 0.f && p.beta != 1.f)
    for (int64_t i = m0; i < m1; ++i)
      for (int64_t j = n0; j < n1; ++j) p.C[i * p.ldc + j] *= p.beta;
  alignas(64) float edge[kMR * kNR];
  bool nonfinite = false;
  uint16_t* ap = buf.a.get();
  uint16_t* bp = buf.b.get();
  const int64_t blocks = (p.K + kKC - 1) / kKC;
  const int64_t kc = ((p.K + blocks - 1) / blocks + kKB - 1) / kKB * kKB;  // K per block, whole tiles
  // alpha scales each 32 x 32 block after its last K block, while it is in the first-level cache
  const __m512 alpha = _mm512_set1_ps(p.alpha);
  auto scaled = [&](float* c, int64_t ldc, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t q = 0; q < cols; q += 16) {
        const __mmask16 m = first(cols - q);
        _mm512_mask_storeu_ps(c + r * ldc + q, m, _mm512_mul_ps(alpha, _mm512_maskz_loadu_ps(m, c + r * ldc + q)));
      }
  };
  for (int64_t jc = n0; jc < n1; jc += kNC) {
    const int64_t jc_end = std::min(n1, jc + kNC);
    for (int64_t pc = 0; pc < p.K; pc += kc) {
      const int64_t pc_end = std::min(p.K, pc + kc);
      const int64_t step = (pc_end - pc + kKB - 1) / kKB * kBlock;  // one packed panel
      nonfinite |= pack_block(false, p.tb, p.B, p.ldb, jc, jc_end, pc, pc_end, bp, buf.stage.get());
      const bool load = pc > 0 || p.beta != 0.f;
      const bool scale = pc_end == p.K && p.alpha != 1.f;
      for (int64_t ic = m0; ic < m1; ic += kMC) {
        const int64_t ic_end = std::min(m1, ic + kMC);
        nonfinite |= pack_block(true, p.ta, p.A, p.lda, ic, ic_end, pc, pc_end, ap, buf.stage.get());
        for (int64_t j = jc; j < jc_end; j += kNR) {
          const uint16_t* bpanel = bp + (j - jc) / kNR * step;
          for (int64_t i = ic; i < ic_end; i += kMR) {
            const uint16_t* apanel = ap + (i - ic) / kMR * step;
            const int64_t mr = std::min(kMR, ic_end - i), nr = std::min(kNR, jc_end - j);
            float* c = p.C + i * p.ldc + j;
            if (mr == kMR && nr == kNR) {
              kernel(step / kBlock, apanel, bpanel, c, p.ldc, load);
              if (scale) scaled(c, p.ldc, kMR, kNR);
              continue;
            }
            if (load)
              for (int64_t r = 0; r < kMR; ++r)
                for (int64_t q = 0; q < kNR; ++q) edge[r * kNR + q] = r < mr && q < nr ? c[r * p.ldc + q] : 0.f;
            kernel(step / kBlock, apanel, bpanel, edge, kNR, load);
            if (scale) scaled(edge, kNR, mr, nr);
            for (int64_t r = 0; r < mr; ++r) std::memcpy(c + r * p.ldc, edge + r * kNR, size_t(nr) * sizeof(float));
          }
        }
      }
    }
  }
  _tile_release();
  if (nonfinite) {  // beta == 0 here (gemm() scans for these first otherwise): float32 from scratch
    const float* a = p.A + (p.ta ? m0 : m0 * p.lda);
    const float* b = p.B + (p.tb ? n0 * p.ldb : n0);
    dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', m1 - m0, n1 - n0, p.K, p.alpha, a, p.lda, b, p.ldb, 0.f,
               p.C + m0 * p.ldc + n0, p.ldc);
  }
}

// Whether the split takes every value of op(X) [rows, cols] (not_splittable).
bool all_splittable(bool trans, const float* X, int64_t ld, int64_t rows, int64_t cols) {
  if (trans) std::swap(rows, cols);
  __mmask16 bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += 16)
      bad |= not_splittable(_mm512_castps_si512(_mm512_maskz_loadu_ps(first(cols - c), X + r * ld + c)));
  return bad == 0;
}

bool request_tiles() {
  constexpr long kReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
  constexpr long kXtileData = 18;         // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
}

}  // namespace

bool available() {
  static const bool ok = [] {
    const char* env = std::getenv("ONNXTRAIN_AMX_FP32");
    if (env && std::strcmp(env, "0") == 0) return false;
    return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
           __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && request_tiles();
  }();
  return ok;
}

bool pays(int64_t M, int64_t N, int64_t K) {
  // Each thread packs its own operands (6 bytes an element) and works on whole 32 x 32 blocks of C.
  // Measured against oneDNN's sgemm (time ratio, 1 / 2 threads): 512x512x512 0.75 / 0.79,
  // 512x784x128 0.68 / 1.04, 2048x512x128 0.86 / 0.97, BERT-base's 0.67-0.80 / 0.72-0.89; under
  // ~3e7 multiply-adds a thread it loses (256^3 at two threads 1.06).
  // 128 rows or columns pay where the other side or K is long, so that packing the short side's
  // partner is spread over enough products: against oneDNN 2.6's float32 matmul primitive (one
  // Sapphire Rapids core / two), BERT-tiny's 2048x128x128 0.79 / 0.79, 2048x512x128 0.83-0.94 /
  // 0.91, 2048x384x128 0.94 / 0.84, 128x2048x512 0.86 / 0.75, 384x2048x128 0.74 / 0.98; short
  // ones lose (128x784x512 with B transposed 1.16 / 1.11, 128x512x256 1.09).
  const int64_t small = std::min(M, N), large = std::max(M, N);
  return available() && small >= 128 && (small >= 256 || large >= 1024 || K >= 1024) && K >= 64 &&
         double(M) * N * K >= 3e7 * current_threads();
}

bool pays_batched(int64_t M, int64_t N, int64_t K) {
  // One product per thread against oneDNN 2.6's batched float32 matmul (gemm:jit) on the strided
  // [seq, batch x heads, 64] views of attention, one Sapphire Rapids core, time ratio over the six
  // products of a head's forward and backward pass: seq 128 0.75-0.90, 64 0.71-1.02, 256
  // 0.71-0.93, 512 0.59-0.95; heads of 32 lose (0.99-1.12).
  return available() && std::min({M, N, K}) >= 64;
}

bool gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (!available() || (alpha != 1.f && beta != 0.f) || M <= 0 || N <= 0 || K <= 0) return false;
  // A region holding a value the split does not take is computed again in float32, which needs
  // C's old contents when beta != 0: then such operands go to float32 from the start.
  if (beta != 0.f && !(all_splittable(trans_a, A, lda, M, K) && all_splittable(trans_b, B, ldb, K, N))) return false;
  const Problem p{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  const int64_t mb = (M + kMR - 1) / kMR, nb = (N + kNR - 1) / kNR;
  const int threads = int(std::min<int64_t>(current_threads(), mb * nb));
  // tm x tn regions: the grid that packs the least (A is packed once per column of regions, B
  // once per row of regions).
  int tm = 1, tn = threads;
  double best = -1;
  for (int a = 1; a <= threads; ++a) {
    if (threads % a) continue;
    const int b = threads / a;
    if (a > mb || b > nb) continue;
    const double cost = double(M) * K * b + double(N) * K * a;
    if (best < 0 || cost < best) best = cost, tm = a, tn = b;
  }
  parallel_for(tm * tn, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ti = t / tn, tj = t % tn;
      region(p, std::min(M, mb * ti / tm * kMR), std::min(M, mb * (ti + 1) / tm * kMR), std::min(N, nb * tj / tn * kNR),
             std::min(N, nb * (tj + 1) / tn * kNR));
    }
  });
  return true;
}

// ---- 1x1 convolutions over the blocked layout ---------------------------------------------------

namespace {

// Pixels a run packs at a time (A rows): 128, fewer where C is so large that the packed block
// (6 bytes a value) would outgrow ~1.5 MB of the second-level cache.
int64_t pixel_block(int64_t nkb) {
  const int64_t rows = int64_t(1.5e6) / (nkb * kKB * 6) / kMR * kMR;
  return std::clamp<int64_t>(rows, kMR, kMC);
}

// The input pixel (offset in floats within a 16-channel block of an image) of output pixel i: x's
// IH x IW plane read at stride (sh, sw) from (0, 0).
struct Sampling {
  int64_t OW, IW, sh, sw, plane;  // plane: IH * IW * 16 floats, one input block of an image
  bool dense;                     // stride 1 over the same size: pixel i is input pixel i
  int64_t at(int64_t i) const { return dense ? i * 16 : ((i / OW) * sh * IW + (i % OW) * sw) * 16; }
};

// 16 pixels' rows (input offsets off[0, rows)) of two channel blocks x0 and x1 (null: zeros, a
// missing odd block) into the part tiles t, t + 2 kTile, t + 4 kTile (16 rows of 32 bf16); rows
// past `rows` zeros. Full: 16 rows and both blocks. The loads alone branch, so the split and the
// stores stay straight-line (the parts under branches spilled to the stack).
template <bool Full>
inline void pixel_rows(const float* x0, const float* x1, const int64_t* off, int64_t rows, uint16_t* t, Tally& tally) {
  for (int64_t r = 0; r < 16; ++r) {
    __m512 v0, v1;
    if (Full) {
      v0 = _mm512_loadu_ps(x0 + off[r]);
      v1 = _mm512_loadu_ps(x1 + off[r]);
    } else {
      v0 = r < rows ? _mm512_loadu_ps(x0 + off[r]) : _mm512_setzero_ps();
      v1 = r < rows && x1 ? _mm512_loadu_ps(x1 + off[r]) : _mm512_setzero_ps();
    }
    const Parts lo = split16(v0, tally), hi = split16(v1, tally);
    _mm512_storeu_si512(t + r * 32, join(lo.p[0], hi.p[0]));
    _mm512_storeu_si512(t + 2 * kTile + r * 32, join(lo.p[1], hi.p[1]));
    _mm512_storeu_si512(t + 4 * kTile + r * 32, join(lo.p[2], hi.p[2]));
  }
}

// Output pixels [p0, p0 + rows) (rows <= kMC) of one image x ([CB][IH][IW][16]) into A panels of 32
// rows (panel i at a + i * nkb * kBlock; K step kb takes channel blocks 2 kb and 2 kb + 1; rows
// past `rows`, and a missing odd block, zeros). Returns whether a value the split does not take
// was read.
bool pack_pixels(const float* x, const Sampling& in, int64_t CB, int64_t p0, int64_t rows, int64_t nkb, uint16_t* a) {
  Tally tally;
  const int64_t step = nkb * kBlock, groups = (rows + kMR - 1) / kMR * 2;
  int64_t off[kMC];  // each pixel's input offset, once (the strided ones divide)
  for (int64_t i = 0; i < rows; ++i) off[i] = in.at(p0 + i);
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const float* x0 = x + 2 * kb * in.plane;
    const bool odd = 2 * kb + 1 < CB;
    for (int64_t g = 0; g < groups; ++g) {
      uint16_t* t = a + (g / 2) * step + kb * kBlock + (g % 2) * kTile;
      const int64_t n = std::clamp<int64_t>(rows - g * 16, 0, 16);
      if (n == 16 && odd)
        pixel_rows<true>(x0, x0 + in.plane, off + g * 16, 16, t, tally);
      else
        pixel_rows<false>(x0, odd ? x0 + in.plane : nullptr, off + g * 16, n, t, tally);
    }
  }
  return tally.bad();
}

// A thread's packed pixel block, grown to the largest asked for and kept.
uint16_t* pixel_buffer(int64_t elements) {
  static thread_local AlignedBf16 buf;
  static thread_local int64_t size = 0;
  if (elements > size) {
    buf = aligned_bf16(elements);
    size = elements;
  }
  return buf.get();
}

inline __m512 activate(__m512 v, Pointwise::Act act, float alpha, float beta) {
  switch (act) {
    case Pointwise::Act::kNone: return v;
    case Pointwise::Act::kRelu: return _mm512_max_ps(v, _mm512_setzero_ps());
    case Pointwise::Act::kLeakyRelu:
      return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, _mm512_set1_ps(alpha));
    case Pointwise::Act::kClip: return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(alpha)), _mm512_set1_ps(beta));
    default: return v;  // make() refuses the others
  }
}

}  // namespace

Pointwise::~Pointwise() = default;

bool Pointwise::pays(int64_t pixels, int64_t C, int64_t M, int threads) {
  if (!available() || C < 64 || M < 128 || pixels < 128) return false;
  const double rows = double((pixels + kMR - 1) / kMR * kMR);  // the tiles' rows: the last panel's padding is work
  return double(pixels) / rows >= 0.85 && double(pixels) * double(C) * double(M) >= 1e7 * std::max(threads, 1);
}

std::unique_ptr<Pointwise> Pointwise::make(int64_t C, int64_t M, const float* w, Act act, float alpha, float beta,
                                           bool sum) {
  if (!available() || C <= 0 || M <= 0) return nullptr;
  if (act == Act::kHardSwish || act == Act::kSiLU) return nullptr;
  if (M % 16 != 0 && act == Act::kClip && (alpha > 0.f || beta < 0.f)) return nullptr;
  std::unique_ptr<Pointwise> p(new Pointwise());
  p->C_ = C, p->M_ = M, p->CB_ = (C + 15) / 16, p->MB_ = (M + 15) / 16;
  p->nkb_ = (C + kKB - 1) / kKB, p->panels_ = (M + kNR - 1) / kNR;
  p->act_ = act, p->alpha_ = alpha, p->beta_ = beta, p->sum_ = sum;
  const int64_t mp = p->MB_ * 16;
  p->wt_.assign(size_t(C * mp), 0.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) p->wt_[size_t(c * mp + m)] = w[m * C + c];
  // B = W^T: tile (panel q, step kb, part s, half h) holds K pairs (2 r, 2 r + 1) x 16 columns.
  const int64_t step = p->nkb_ * kBlock;
  p->b_ = aligned_bf16(p->panels_ * step);
  uint16_t* b = p->b_.get();
  Tally tally;
  for (int64_t q = 0; q < p->panels_; ++q)
    for (int64_t kb = 0; kb < p->nkb_; ++kb)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t m0 = q * kNR + h * 16;
        for (int64_t r = 0; r < 16; ++r) {
          const int64_t k = kb * kKB + 2 * r;
          auto row = [&](int64_t kk) {
            if (kk >= C || m0 >= mp) return _mm512_setzero_ps();
            return _mm512_loadu_ps(p->wt_.data() + kk * mp + m0);
          };
          const Parts e = split16(row(k), tally), o = split16(row(k + 1), tally);
          for (int s = 0; s < 3; ++s)
            _mm512_storeu_si512(b + q * step + kb * kBlock + (2 * s + h) * kTile + r * 32, pairs(e.p[s], o.p[s]));
        }
      }
  if (tally.bad()) return nullptr;
  return p;
}

void Pointwise::run(const float* x, int64_t N, const Geometry& geo, const float* bias, float* y) const {
  const int64_t P = geo.OH * geo.OW;
  if (N <= 0 || P <= 0) return;
  const Sampling in{geo.OW, geo.IW, geo.sh, geo.sw, geo.IH * geo.IW * 16,
                    geo.sh == 1 && geo.sw == 1 && geo.IW == geo.OW && geo.IH == geo.OH};
  const int64_t rows = pixel_block(nkb_), blocks = (P + rows - 1) / rows, step = nkb_ * kBlock;
  // Tasks: (share of the output panels, image and pixel block). Where the pixel blocks are too few
  // to share evenly (batch 1's small feature maps: 196 pixels are blocks of 128 and 68), each
  // thread takes every block and its own share of the panels (packing each block once a thread).
  const int64_t threads = current_threads(), nblocks = N * blocks;
  const int64_t shares = threads > 1 && nblocks < 2 * threads ? std::min<int64_t>(threads, panels_) : 1;
  const int64_t mp = MB_ * 16;
  parallel_for(nblocks * shares, 1, [&](int64_t t0, int64_t t1) {
    // The epilogue's settings as locals: read through `this`, they were loaded again after each
    // store to y.
    const Act act = act_;
    const float alpha = alpha_, beta = beta_;
    const bool sum = sum_;
    load_tile_config();
    uint16_t* a = pixel_buffer(rows / kMR * step);
    alignas(64) float edge[kMR * kNR];
    int64_t packed = -1;  // the (image, block) in `a`
    bool bad = false;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t share = t / nblocks, nb = t % nblocks, n = nb / blocks, p0 = (nb % blocks) * rows;
      const int64_t mr_all = std::min(rows, P - p0);
      const float* xn = x + n * CB_ * in.plane;
      float* yn = y + n * MB_ * P * 16;
      if (packed != nb) {
        bad = pack_pixels(xn, in, CB_, p0, mr_all, nkb_, a);
        packed = nb;
      }
      const int64_t q0 = panels_ * share / shares, q1 = panels_ * (share + 1) / shares;
      for (int64_t q = q0; q < q1; ++q)
        for (int64_t i = 0; i < mr_all; i += kMR) {
          const int64_t mr = std::min(kMR, mr_all - i);
          if (!bad) {
            kernel(nkb_, a + (i / kMR) * step, b_.get() + q * step, edge, kNR, false);
          } else {  // float32 sums for this block
            for (int64_t r = 0; r < mr; ++r)
              for (int64_t h = 0; h < 2; ++h) {
                const int64_t m0 = q * kNR + h * 16;
                __m512 acc = _mm512_setzero_ps();
                if (m0 < mp)
                  for (int64_t c = 0; c < C_; ++c)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(xn[(c / 16) * in.plane + in.at(p0 + i + r) + c % 16]),
                                          _mm512_loadu_ps(wt_.data() + c * mp + m0), acc);
                _mm512_store_ps(edge + r * kNR + h * 16, acc);
              }
          }
          for (int64_t h = 0; h < 2; ++h) {
            const int64_t mb = q * 2 + h;
            if (mb >= MB_) continue;
            const __m512 bv = bias ? _mm512_maskz_loadu_ps(first(M_ - mb * 16), bias + mb * 16) : _mm512_setzero_ps();
            float* out = yn + (mb * P + p0 + i) * 16;
            for (int64_t r = 0; r < mr; ++r) {
              __m512 v = _mm512_add_ps(_mm512_load_ps(edge + r * kNR + h * 16), bv);
              if (sum) v = _mm512_add_ps(v, _mm512_loadu_ps(out + r * 16));
              _mm512_storeu_ps(out + r * 16, activate(v, act, alpha, beta));
            }
          }
        }
    }
    _tile_release();
  });
}

#else  // no AMX in this build

bool available() { return false; }
bool pays(int64_t, int64_t, int64_t) { return false; }
bool pays_batched(int64_t, int64_t, int64_t) { return false; }
bool gemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
          int64_t) {
  return false;
}

Pointwise::~Pointwise() = default;
bool Pointwise::pays(int64_t, int64_t, int64_t, int) { return false; }
std::unique_ptr<Pointwise> Pointwise::make(int64_t, int64_t, const float*, Act, float, float, bool) { return nullptr; }
void Pointwise::run(const float*, int64_t, const Geometry&, const float*, float*) const {}

#endif

}  // namespace onnxtrain::kernels::cpu::amx
