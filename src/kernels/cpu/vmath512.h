// The staged erf / GELU loops of elementwise_simd.h on AVX-512's 16 lanes (vmath512.cpp, compiled
// with AVX-512F/DQ on its own; everything else targets x86-64-v3). The same source templates as the
// 8-lane code give the same bits lane by lane, so a result does not depend on which path ran.
#pragma once

#include <cstdint>

namespace onnxtrain::kernels::cpu::vmath512 {

/// True when this build has the 16-lane code and the CPU runs AVX-512F and DQ (checked once).
bool available();

// Each handles the full 16-float vectors of its n floats and returns how many floats it did (0
// when !available()); the caller finishes the rest with the 8-lane code.
/// vmath::gelu_t: y = (x A) / 2 and A = 1 + erf(x / sqrt 2) (y or a may be null).
int64_t gelu(const float* x, float* y, float* a, int64_t n);
/// vmath::gelu_grad_t: dx = dy (A / 2 + x phi(x)), A recomputed.
int64_t gelu_grad(const float* dy, const float* x, float* dx, int64_t n);
/// erf(x) (vmath::erf_map).
int64_t erf(const float* x, float* y, int64_t n);
/// x * sigmoid(x) (vmath::silu_t; y may be x).
int64_t silu(const float* x, float* y, int64_t n);
/// vmath::exp_shift_acc_t: y = exp_flush(x - shift) (y may be x or null) over the full 16-float
/// blocks, summed into acc[16] (acc[0..7]: the 8-lane loop's first accumulator, acc[8..15] its second).
int64_t exp_shift_acc(const float* x, float* y, int64_t n, float shift, float* acc);
/// vmath::recip_1_3_t (1 / d, d in [1, 3]) and vmath::div_sqrt2_t, for the tests of their bits.
int64_t recip_1_3(const float* d, float* y, int64_t n);
int64_t div_sqrt2(const float* x, float* y, int64_t n);

}  // namespace onnxtrain::kernels::cpu::vmath512
