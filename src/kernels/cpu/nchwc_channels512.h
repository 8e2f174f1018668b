// NchwcChannels' AVX-512 inner loop (nchwc_channels512.cpp, compiled alone with -mavx512f).
#pragma once

#include <cstdint>

namespace onnxtrain::kernels::cpu::nchwc512 {

/// 16 lanes of one input block permuted into an output block: output lane l takes lane idx[l] of
/// src's pixel where bit l of mask is set.
struct GatherPiece {
  const float* src;     ///< the input block's first pixel (16 floats a pixel)
  const int32_t* idx;   ///< 16 lane indices
  uint16_t mask;
};

/// Whether gather_block runs here (the CPU has AVX-512F and the file was built for it).
bool gather_available();

/// out[p * 16 + l] for p < pixels: the pieces merged (lanes no piece sets are zero).
void gather_block(const GatherPiece* pieces, int count, float* out, int64_t pixels);

}  // namespace onnxtrain::kernels::cpu::nchwc512
