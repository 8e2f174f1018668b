// float32 matrix products on Intel's AMX tiles, to float32 accuracy (the "bf16x6" split).
//
// Each float32 operand is split exactly into three bfloat16 parts, x = hi + mid + lo (8 + 8 + 8
// significant bits, each rounded to nearest from the remainder of the one before), and
//   A @ B = sum over the six part products whose scales reach float32's: hi.hi, hi.mid, hi.lo,
//           mid.hi, mid.mid, lo.hi
// accumulated in float32 by TDPBF16PS (each bf16 x bf16 product is exact in float32; every
// accumulation rounds once, as a float32 fused multiply-add does). The three dropped products
// (mid.lo, lo.mid, lo.lo) are together below 2^-24 of |a||b| (|mid| <= 2^-8 |x|, |lo| <= 2^-17 |x|):
// float32's own rounding of each term.
// On a core with AMX the six products take fewer cycles than one float32 FMA product (AMX does
// 1024 bf16 flops a cycle, AVX-512 64 float32 ones), so large products run faster at float32's
// accuracy. Each element of C sums in the same order whatever the thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nchwc_direct512.h"

namespace onnxtrain::kernels::cpu::amx {

/// Whether this CPU has AMX-BF16 and AVX512-BF16 and the kernel granted this process the tile
/// state (Linux's arch_prctl permission), and ONNXTRAIN_AMX_FP32 is not "0". Checked once.
bool available();

/// Whether a float32 product of this size goes to the AMX kernel: available() and large enough
/// for the six products to beat float32 FMA on the same core (measured: docs/kernels.md).
bool pays(int64_t M, int64_t N, int64_t K);

/// Whether a batch of such products (attention's, one head each) goes to the AMX kernel one
/// product a thread: available() and every side at least 64 (measured: docs/kernels.md).
bool pays_batched(int64_t M, int64_t N, int64_t K);

/// C[M, N] = alpha * op(A) @ op(B) + beta * C (row-major, as kernels::cpu::gemm) on the AMX tiles.
/// Requires available(); alpha != 1 with beta != 0 is not supported (returns false, C untouched).
/// beta == 0 ignores C's contents. Uses the current thread budget. Infinities and NaNs give
/// float32's results: a thread's block that holds one is computed again by oneDNN's float32 sgemm
/// (beta == 0), or the call is declined (beta != 0, checked before C is written). Terms within
/// 2^-8 of float32's overflow threshold may overflow where float32 would not.
bool gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// Frees what aligned_bf16() allocated.
struct AlignedFree {
  void operator()(uint16_t* p) const;
};
/// bfloat16 values owned by a unique_ptr, 64-byte aligned.
using AlignedBf16 = std::unique_ptr<uint16_t, AlignedFree>;
/// `elements` bfloat16 values, 64-byte aligned (tile rows load fastest from aligned memory);
/// throws std::bad_alloc where the allocation fails.
AlignedBf16 aligned_bf16(int64_t elements);

/// A 1x1 convolution (no pads, one group; any stride) over the blocked activation layout
/// (x[N, ceil(C/16), IH, IW, 16], y[N, ceil(M/16), OH, OW, 16]: P = OH * OW output pixels an image,
/// output pixel (oh, ow) reading input pixel (oh * sh, ow * sw); nchwc:: in dnnl_util.h) on
/// the AMX tiles, with the same split: per image it is the product x^T (P x C) @ W^T (C x M), whose
/// A rows are pixels (two 16-channel blocks give a tile row's 32 values) and whose 16 x 16 output
/// tiles are the output's 16-pixel runs of a 16-channel block. W^T is split and packed once, here;
/// each run splits a block of pixels over all C at a time and multiplies it by every output panel
/// of its share, then adds the bias (and Z, which y holds when the run starts, with `sum`) and
/// applies the activation to each 16 x 16 result while it is in the first-level cache.
class Pointwise {
 public:
  /// The activation applied to the result: the direct kernels' kinds (alpha / beta: LeakyRelu's
  /// alpha; Clip's min, max); make() refuses kHardSwish and kSiLU.
  using Act = nchwc512::Act;

  /// Whether a convolution of this size runs faster here than on oneDNN's float32 1x1 kernel at
  /// `threads` threads: available() and large enough (measured: docs/kernels.md).
  static bool pays(int64_t pixels, int64_t C, int64_t M, int threads);

  /// Packs w [M, C] (ONNX's [M, C, 1, 1]). Null where !available(), where the activation is not
  /// None / Relu / LeakyRelu / Clip, where a weight is an infinity
  /// or NaN or too close to float32's overflow for the split, or where the output has padded
  /// channels (M % 16 != 0) and the activation does not keep zero at zero.
  static std::unique_ptr<Pointwise> make(int64_t C, int64_t M, const float* w, Act act, float alpha, float beta,
                                         bool sum);

  /// The spatial sizes and strides.
  struct Geometry {
    int64_t IH = 0, IW = 0, OH = 0, OW = 0, sh = 1, sw = 1;
  };

  /// y = act(conv(x) + bias (+ y's Z with sum)) for N images; bias [M] or null. Uses
  /// the current thread budget. A block of pixels holding an infinity or NaN (or a value the split
  /// does not take) is computed in float32 instead (the sums in another order, float32's results).
  void run(const float* x, int64_t N, const Geometry& g, const float* bias, float* y) const;

  ~Pointwise();

 private:
  Pointwise() = default;
  int64_t C_ = 0, M_ = 0, CB_ = 0, MB_ = 0, nkb_ = 0, panels_ = 0;
  Act act_ = Act::kNone;
  float alpha_ = 0, beta_ = 0;
  bool sum_ = false;
  AlignedBf16 b_;  // W^T's parts: panel q (32 output channels) at q * nkb_ * 6 tiles
  std::vector<float> wt_;              // W^T [C][MB_ * 16] in float32, for blocks the split does not take
};

}  // namespace onnxtrain::kernels::cpu::amx
