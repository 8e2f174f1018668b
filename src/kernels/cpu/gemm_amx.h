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

namespace onnxtrain::kernels::cpu::amx {

/// Whether this CPU has AMX-BF16 and AVX512-BF16 and the kernel granted this process the tile
/// state (Linux's arch_prctl permission), and ONNXTRAIN_AMX_FP32 is not "0". Checked once.
bool available();

/// Whether a float32 product of this size goes to the AMX kernel: available() and large enough
/// for the six products to beat float32 FMA on the same core (measured: docs/kernels.md).
bool pays(int64_t M, int64_t N, int64_t K);

/// C[M, N] = alpha * op(A) @ op(B) + beta * C (row-major, as kernels::cpu::gemm) on the AMX tiles.
/// Requires available(); alpha != 1 with beta != 0 is not supported (returns false, C untouched).
/// beta == 0 ignores C's contents. Uses the current thread budget. Infinities and NaNs give
/// float32's results: a thread's block that holds one is computed again by oneDNN's float32 sgemm
/// (beta == 0), or the call is declined (beta != 0, checked before C is written). Terms within
/// 2^-8 of float32's overflow threshold may overflow where float32 would not.
bool gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace onnxtrain::kernels::cpu::amx
