// Direct convolution over the blocked activation layout (nchwc:: in dnnl_util.h) on AVX-512: what
// NchwcConv runs for float32 2-D convolutions with one group, constant weights and horizontal
// stride 1 or 2 (oneDNN 2.6's kernels, its 3x3 ones on 7x7 to 28x28 feature maps above all, were
// slower than onnxruntime's). X is blocked, or plain for a stem's few channels. The weights are
// packed once; each run splits (group of up to four output blocks, band of output rows across the
// images) over the threads; the pads are read as zeros by the row kernel's bounded tiles (no
// padded copy of the input).
// In a band, a few input blocks at a time, every output row accumulates in place
// (nchwc512::conv_row) while those blocks' weights stay in the first-level cache and the next
// blocks' are prefetched into the second (a network's weights come from memory on every run).
#pragma once

#include <cstdint>

#include "kernels/cpu/nchwc_direct512.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::kernels::cpu {

class NchwcDirectConv {
 public:
  /// The convolution (plain sizes; stride, dilation and the leading pads per spatial axis).
  struct Geometry {
    int64_t N = 0, C = 0, M = 0;  ///< images, input and output channels
    int64_t IH = 0, IW = 0, OH = 0, OW = 0, KH = 0, KW = 0;
    int64_t sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
    bool plain = false;  ///< X plain [N, C, IH, IW] (a stem's few channels), else blocked
  };

  /// Whether these kernels run `g` with activation `act` (false: the caller uses oneDNN). Needs
  /// nchwc512::available(), sw 1 or 2, non-negative pads, and where the output has padded channels
  /// an activation that keeps zero at zero. SiLU is applied to each finished row (nchwc512::Act).
  static bool supports(const Geometry& g, nchwc512::Act act, float alpha, float beta);

  /// Packs weights w[M, C, KH, KW] (plain ONNX layout); `act` with its alpha/beta, `sum`: the output
  /// holds Z when a run starts and Z is added before the activation. `threads`: the most a run uses
  /// (0: every core).
  NchwcDirectConv(const Geometry& g, const float* w, nchwc512::Act act, float alpha, float beta, bool sum,
                  int threads = 0);

  /// Bytes of workspace run() needs (the bias padded to whole blocks).
  size_t workspace_bytes() const;

  /// y[N, ceil(M/16), OH, OW, 16] = act(conv(x[N, ceil(C/16), IH, IW, 16] or plain x[N, C, IH, IW])
  /// + bias (+ Z)); bias [M] or null; `ws` of workspace_bytes(), 64-byte aligned.
  void run(const float* x, const float* bias, float* y, char* ws) const;

 private:
  Geometry g_;
  int64_t L_ = 16;                            // input channels per input block: 16, or 1 (plain X)
  int64_t icb_ = 0, ocb_ = 0, groups_ = 0;  // input blocks, output blocks of 16, groups of <= 4 output blocks
  int64_t icc_ = 1;                           // input blocks per conv_row call
  int64_t max_rows_ = 1;                      // the most output rows of a band
  int slices_ = 1;                            // the most threads a run uses
  nchwc512::Act act_ = nchwc512::Act::kNone;
  float alpha_ = 0, beta_ = 0;
  bool sum_ = false;
  Tensor w_;  // float32; per group of nb output blocks: [icb][KH][KW][L][nb * 16]

  // The first output block of group gi (groups_ at gi = groups_): the blocks split as evenly as
  // groups of at most four allow (6 blocks: 3 + 3, not 4 + 2), for the tiles and the threads.
  int64_t group_start(int64_t gi) const;
};

/// Depthwise convolution (one 3-D filter per channel: group = C = M) over the blocked layout on
/// AVX-512: what NchwcConv runs for float32 2-D depthwise convolutions with constant weights, blocked
/// X, horizontal stride 1 or 2 and no Z. Each output row of a 16-channel block is one
/// nchwc512::dw_row call; the activation (SiLU too) is applied to the row while it is in the first-
/// level cache, where oneDNN 2.6's swish post-op doubled the time of EfficientNet's depthwise layers.
/// The rows of all images and blocks split evenly over the threads.
class NchwcDepthwiseConv {
 public:
  using Geometry = NchwcDirectConv::Geometry;

  /// Whether these kernels run `g` with activation `act` (false: the caller uses oneDNN): needs
  /// nchwc512::available(), C = M, X blocked, sw 1 or 2, non-negative pads, and where the output
  /// has padded channels an activation that keeps zero at zero.
  static bool supports(const Geometry& g, nchwc512::Act act, float alpha, float beta);

  /// Packs weights w[C, 1, KH, KW]; `threads`: the most a run uses (0: every core).
  NchwcDepthwiseConv(const Geometry& g, const float* w, nchwc512::Act act, float alpha, float beta, int threads = 0);

  /// Bytes of workspace run() needs (the bias padded to whole blocks).
  size_t workspace_bytes() const;

  /// y[N, ceil(C/16), OH, OW, 16] = act(depthwise conv(x[N, ceil(C/16), IH, IW, 16]) + bias); bias
  /// [C] or null; `ws` of workspace_bytes(), 64-byte aligned.
  void run(const float* x, const float* bias, float* y, char* ws) const;

 private:
  Geometry g_;
  int64_t cb_ = 0;  // 16-channel blocks
  int slices_ = 1;
  nchwc512::Act act_ = nchwc512::Act::kNone;
  float alpha_ = 0, beta_ = 0;
  Tensor w_;  // float32 [cb][KH][KW][16], padded channels zero
};

}  // namespace onnxtrain::kernels::cpu
