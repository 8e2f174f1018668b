// The direct NCHWc convolution's inner loop on AVX-512 (nchwc_direct512.cpp, compiled alone with
// -mavx512f; everything else targets x86-64-v3): one output row of up to four 16-channel output
// blocks, from a few 16-channel input blocks, held in registers 6 to 12 pixels at a time (24
// accumulators). The geometry, the packing of the weights and the threads are nchwc_direct.cpp's.
#pragma once

#include <cstdint>

namespace onnxtrain::kernels::cpu::nchwc512 {

/// True when this build has the AVX-512 code and the CPU runs AVX-512F (checked once).
bool available();

/// The activation applied with the last input block (FusedActivation's kinds the kernel has).
/// kSiLU (x * sigmoid(x)) is not the row kernels': they store the sums and the caller maps the row
/// through vmath512::silu while it is in the first-level cache.
enum class Act : int { kNone, kRelu, kLeakyRelu, kClip, kHardSwish, kSiLU };

/// One call: output row `y` (nb blocks of 16 channels, block j at y + j * y_block, pixel p at
/// + p * 16) += the convolution of `icc` input blocks from `in` (row 0, column 0 of the first block;
/// rows in_row floats apart, blocks in_block) with weights `w` ([icc][KH][KW][L input channels][nb *
/// 16]); output pixel ow's window starts at input row ih0 and column ow * sw - pw. Window positions
/// outside the IH x IW input (the pads) read zeros: the tiles that touch them take their inputs
/// pixel by pixel, from a zero vector where outside, so that the products are those of a
/// zero-padded copy. A block is 16 channels interleaved (L = 16), or one plain channel (L = 1).
struct RowArgs {
  const float* in = nullptr;
  const float* w = nullptr;
  const float* bias = nullptr;  ///< nb * 16 values (first only; null: zero)
  float* y = nullptr;
  int64_t in_row = 0, in_block = 0, y_block = 0;
  int64_t ih0 = 0, IH = 0, IW = 0, pw = 0;  ///< the window's first input row; the input's size; left pad
  int64_t icc = 1;
  int64_t OW = 0, KH = 0, KW = 0, sw = 1, dh = 1, dw = 1;
  /// > 0: the row's first tile prefetches (to the second-level cache) the weights this many floats
  /// past its own, which the next input block (or group) reads.
  int64_t prefetch = 0;
  int nb = 1;
  bool plain = false;  ///< the input is plain (one channel per block, L = 1)
  bool first = false;  ///< the row starts from the bias (plus y itself with sum), not from y
  bool sum = false;    ///< with first: y holds Z, added
  bool last = false;   ///< the activation follows
  Act act = Act::kNone;
  float alpha = 0, beta = 0;  ///< LeakyRelu: alpha; Clip: min, max
};

/// Runs one row (does nothing when !available(); sw must be 1 or 2, nb 1 to 4).
void conv_row(const RowArgs& a);

/// One output row of a depthwise convolution (one filter per channel) over one 16-channel block:
/// y[ow * 16 + c] = act(bias[c] + sum over (kh, kw) of in[ih][iw * 16 + c] * w[(kh * KW + kw) * 16
/// + c]) for the rows ih = ih0 + kh * dh inside [0, IH) and columns iw = ow * sw - pw + kw * dw
/// inside [0, IW) (the pads add nothing, as a zero-padded copy).
struct DwRowArgs {
  const float* in = nullptr;    ///< the block's plane: IH rows of IW * 16 floats
  const float* w = nullptr;     ///< KH * KW * 16 weights
  const float* bias = nullptr;  ///< 16 values (null: zero)
  float* y = nullptr;           ///< OW * 16 floats
  int64_t ih0 = 0, IH = 0, IW = 0, pw = 0;
  int64_t OW = 0, KH = 0, KW = 0, sw = 1, dh = 1, dw = 1;
  Act act = Act::kNone;
  float alpha = 0, beta = 0;
};

/// Runs one depthwise row (does nothing when !available(); sw must be 1 or 2).
void dw_row(const DwRowArgs& a);

}  // namespace onnxtrain::kernels::cpu::nchwc512
