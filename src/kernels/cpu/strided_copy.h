// Data movement shared by the shape and movement kernels: one strided copy engine.
//   dst[sum_k i_k * dst_strides[k]] = src[sum_k i_k * src_strides[k]]   for every index i of dims
// Strides are in elements; source strides may be 0 (broadcast: Expand, Tile) or negative (Slice
// with negative steps). Transpose, Slice, Concat, Split, Tile and Expand are all instances: the
// kernel builds a StridedCopy in prepare() and calls run() in run().
#pragma once

#include <immintrin.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/common.h"

namespace onnxtrain::kernels::cpu {

class StridedCopy {
 public:
  /// Drops size-1 dimensions and merges dimensions that are contiguous in both source and
  /// destination, so that most copies become a few long memcpy runs. False when more than
  /// kMaxDims dimensions remain.
  bool init(const Shape& dims, const std::vector<int64_t>& src_strides, const std::vector<int64_t>& dst_strides);
  int64_t numel() const { return n_; }
  /// True when the copy is one contiguous run (the output could be a view of the source).
  bool is_identity() const { return n_ == 0 || (dims_.size() == 1 && ss_[0] == 1 && ds_[0] == 1); }

  /// Copies with the current thread budget. T is the element type (or an unsigned integer of the
  /// element's size for pure byte movement; std::string for strings).
  template <class T>
  void run(T* dst, const T* src) const {
    if (n_ == 0) return;
    if (tk_ >= 0) {
      transpose(dst, src);
      return;
    }
    const size_t nd = dims_.size();
    const int64_t inner = dims_[nd - 1], si = ss_[nd - 1], di = ds_[nd - 1];
    parallel_for(n_, kGrain, [&](int64_t b, int64_t e) {
      // Position of element b: row index over dims_[0..nd-1), column within the row.
      int64_t idx[kMaxDims] = {0};
      int64_t row = b / inner, col = b % inner;
      int64_t so = 0, dof = 0;
      for (size_t d = nd - 1; d-- > 0;) {
        idx[d] = row % dims_[d];
        row /= dims_[d];
        so += idx[d] * ss_[d];
        dof += idx[d] * ds_[d];
      }
      for (int64_t pos = b; pos < e;) {
        const int64_t len = std::min(inner - col, e - pos);
        copy_row(dst + dof + col * di, src + so + col * si, len, si, di);
        pos += len;
        col = 0;
        for (size_t d = nd - 1; d-- > 0;) {  // next row
          so += ss_[d];
          dof += ds_[d];
          if (++idx[d] < dims_[d]) break;
          so -= ss_[d] * dims_[d];
          dof -= ds_[d] * dims_[d];
          idx[d] = 0;
        }
      }
    });
  }

  /// Copies `n` contiguous elements (memcpy for trivially copyable types).
  template <class T>
  static void copy_n(T* dst, const T* src, int64_t n) {
    if constexpr (std::is_trivially_copyable_v<T>) {
      if (n > 0) std::memcpy(dst, src, size_t(n) * sizeof(T));
    } else {
      std::copy(src, src + n, dst);
    }
  }

  static constexpr size_t kMaxDims = 32;

 private:
  static constexpr int64_t kGrain = kCopyGrain;  // elements per parallel chunk

  template <class T>
  static void copy_row(T* dst, const T* src, int64_t n, int64_t si, int64_t di) {
    if (si == 1 && di == 1) {
      copy_n(dst, src, n);
    } else if (si == 0) {
      const T v = src[0];
      if (di == 1) {
        std::fill(dst, dst + n, v);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i * di] = v;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i * di] = src[i * si];
    }
  }

  // Batched 2-D transpose in tiles: dimension tk_ is contiguous in the source, the innermost
  // dimension is contiguous in the destination.
  template <class T>
  void transpose(T* dst, const T* src) const {
    const size_t nd = dims_.size();
    const size_t k = size_t(tk_);
    const int64_t A = dims_[k], B = dims_[nd - 1];
    const int64_t dA = ds_[k], sB = ss_[nd - 1];
    constexpr int64_t TA = 32, TB = 32;
    const int64_t tiles_a = (A + TA - 1) / TA;
    int64_t batch = 1;
    for (size_t d = 0; d + 1 < nd; ++d)
      if (d != k) batch *= dims_[d];
    const int64_t work = batch * tiles_a;
    parallel_for(work, std::max<int64_t>(1, kGrain / (TA * B)), [&](int64_t w0, int64_t w1) {
      for (int64_t w = w0; w < w1; ++w) {
        int64_t bi = w / tiles_a;
        const int64_t a0 = (w % tiles_a) * TA, a1 = std::min(A, a0 + TA);
        int64_t so = 0, dof = 0;
        for (size_t d = nd - 1; d-- > 0;) {
          if (d == k) continue;
          const int64_t i = bi % dims_[d];
          bi /= dims_[d];
          so += i * ss_[d];
          dof += i * ds_[d];
        }
        const T* s = src + so;
        T* o = dst + dof;
        for (int64_t b0 = 0; b0 < B; b0 += TB) {
          const int64_t b1 = std::min(B, b0 + TB);
          int64_t a8 = a0, b8 = b0;  // [a0, a8) x [b0, b8) done in register blocks
          if constexpr (std::is_trivially_copyable_v<T>) {
            constexpr int64_t K = sizeof(T) == 8 ? 4 : 8;
            a8 = a0 + (a1 - a0) / K * K;
            b8 = b0 + (b1 - b0) / K * K;
            for (int64_t a = a0; a < a8; a += K)
              for (int64_t bb = b0; bb < b8; bb += K) block<sizeof(T)>(o + a * dA + bb, dA, s + a + bb * sB, sB);
          }
          for (int64_t a = a0; a < a1; ++a)
            for (int64_t bb = (a < a8 ? b8 : b0); bb < b1; ++bb) o[a * dA + bb] = s[a + bb * sB];
        }
      }
    });
  }

 public:
  /// One register block: o[a * dA + b] = s[a + b * sB] for a, b < 8 (4 for 8-byte elements).
  /// Strides are in elements of `Size` bytes (AVX2; also nchwc's layout reorders).
  template <size_t Size>
  static void block(void* out, int64_t dA, const void* in, int64_t sB) {
    const char* s = static_cast<const char*>(in);
    char* o = static_cast<char*>(out);
    const int64_t sb = sB * int64_t(Size), da = dA * int64_t(Size);
    if constexpr (Size == 4) {
      __m256 r0 = _mm256_loadu_ps(reinterpret_cast<const float*>(s)),
             r1 = _mm256_loadu_ps(reinterpret_cast<const float*>(s + sb)),
             r2 = _mm256_loadu_ps(reinterpret_cast<const float*>(s + 2 * sb)),
             r3 = _mm256_loadu_ps(reinterpret_cast<const float*>(s + 3 * sb)),
             r4 = _mm256_loadu_ps(reinterpret_cast<const float*>(s + 4 * sb)),
             r5 = _mm256_loadu_ps(reinterpret_cast<const float*>(s + 5 * sb)),
             r6 = _mm256_loadu_ps(reinterpret_cast<const float*>(s + 6 * sb)),
             r7 = _mm256_loadu_ps(reinterpret_cast<const float*>(s + 7 * sb));
      const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      const __m256 rows[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                              _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                              _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                              _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(reinterpret_cast<float*>(o + i * da), rows[i]);
    } else if constexpr (Size == 8) {  // 4x4
      const __m256d r0 = _mm256_loadu_pd(reinterpret_cast<const double*>(s)),
                    r1 = _mm256_loadu_pd(reinterpret_cast<const double*>(s + sb)),
                    r2 = _mm256_loadu_pd(reinterpret_cast<const double*>(s + 2 * sb)),
                    r3 = _mm256_loadu_pd(reinterpret_cast<const double*>(s + 3 * sb));
      const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
      const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
      _mm256_storeu_pd(reinterpret_cast<double*>(o), _mm256_permute2f128_pd(t0, t2, 0x20));
      _mm256_storeu_pd(reinterpret_cast<double*>(o + da), _mm256_permute2f128_pd(t1, t3, 0x20));
      _mm256_storeu_pd(reinterpret_cast<double*>(o + 2 * da), _mm256_permute2f128_pd(t0, t2, 0x31));
      _mm256_storeu_pd(reinterpret_cast<double*>(o + 3 * da), _mm256_permute2f128_pd(t1, t3, 0x31));
    } else if constexpr (Size == 2) {
      __m128i r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * sb));
      __m128i t[8], u[8];
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);  // columns 0-3 of rows 2i, 2i+1
        t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);  // columns 4-7
      }
      for (int h = 0; h < 2; ++h)    // row quads 0-3, 4-7
        for (int c = 0; c < 2; ++c)  // column halves
          for (int q = 0; q < 2; ++q)
            u[4 * h + 2 * c + q] = q ? _mm_unpackhi_epi32(t[4 * h + c], t[4 * h + 2 + c]) : _mm_unpacklo_epi32(t[4 * h + c], t[4 * h + 2 + c]);
      // u[4h + 2c + q] holds columns 4c + 2q, 4c + 2q + 1 of rows 4h..4h+3.
      for (int col = 0; col < 8; ++col) {
        const int c = col / 4, q = (col % 4) / 2, hi = col % 2;
        const __m128i lo4 = u[2 * c + q], hi4 = u[4 + 2 * c + q];
        const __m128i row = hi ? _mm_unpackhi_epi64(lo4, hi4) : _mm_unpacklo_epi64(lo4, hi4);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + col * da), row);
      }
    } else {  // 1 byte
      __m128i r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + i * sb));
      const __m128i t0 = _mm_unpacklo_epi8(r[0], r[1]), t1 = _mm_unpacklo_epi8(r[2], r[3]);
      const __m128i t2 = _mm_unpacklo_epi8(r[4], r[5]), t3 = _mm_unpacklo_epi8(r[6], r[7]);
      const __m128i u0 = _mm_unpacklo_epi16(t0, t1), u1 = _mm_unpackhi_epi16(t0, t1);
      const __m128i u2 = _mm_unpacklo_epi16(t2, t3), u3 = _mm_unpackhi_epi16(t2, t3);
      const __m128i v[4] = {_mm_unpacklo_epi32(u0, u2), _mm_unpackhi_epi32(u0, u2), _mm_unpacklo_epi32(u1, u3),
                            _mm_unpackhi_epi32(u1, u3)};  // v[k]: columns 2k, 2k+1
      for (int k = 0; k < 4; ++k) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(o + 2 * k * da), v[k]);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(o + (2 * k + 1) * da), _mm_unpackhi_epi64(v[k], v[k]));
      }
    }
  }

 private:
  std::vector<int64_t> dims_, ss_, ds_;
  int64_t n_ = 0;
  int tk_ = -1;  // transpose fast path: index of the source-contiguous dimension, or -1
};

/// Runs `c` from input `in` (offset by src_offset elements) into output `out` (offset by
/// dst_offset), moving elements by size; nothing when the output already is a view of the input.
inline void run_copy(RunContext& ctx, const StridedCopy& c, size_t in = 0, size_t out = 0, int64_t src_offset = 0,
                     int64_t dst_offset = 0) {
  if (ctx.output_aliases_input(out, in)) return;
  Tensor& y = ctx.output(out);
  dispatch_by_size(y.dtype(), ctx.node(), [&]<class T>() {
    c.run(static_cast<T*>(y.raw_data()) + dst_offset, static_cast<const T*>(ctx.input(in).raw_data()) + src_offset);
  });
}


}  // namespace onnxtrain::kernels::cpu
