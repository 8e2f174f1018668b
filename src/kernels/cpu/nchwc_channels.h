// Channel gathers across blocked tensors ([N, ceil(C/16), H, W, 16], oneDNN's nChw16c as 5-D):
// the work of com.onnxtrain NchwcChannels (see nchwc_channels.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onnxtrain::kernels::cpu::nchwc {

/// Y channel m = channel channels[m] of the inputs' channels laid end to end (input 0's first),
/// input j holding input_channels[j] channels; Y's padded channels are zero.
class ChannelGather {
 public:
  /// Throws InvalidArgument naming what is wrong (no inputs, a count <= 0, no channels, a channel
  /// outside the inputs').
  ChannelGather(std::vector<int64_t> input_channels, std::vector<int64_t> channels);
  int64_t out_channels() const { return int64_t(channels_.size()); }
  const std::vector<int64_t>& input_channels() const { return in_channels_; }
  /// in[j]: input j, [n, ceil(C_j/16), hw, 16]; y: [n, ceil(M/16), hw, 16]. wide: AVX-512's loop
  /// (only where nchwc512::gather_available()), else AVX2's; both give the same bits.
  void run(const std::vector<const float*>& in, float* y, int64_t n, int64_t hw, bool wide) const;

 private:
  // AVX2: 8 lanes of input `input`'s block `block`, half in_half, permuted (idx) into output half
  // out_half where mask is set.
  struct Piece {
    int input;
    int64_t block;
    int in_half, out_half;
    alignas(32) int32_t idx[8];
    alignas(32) int32_t mask[8];
  };
  // AVX-512: lanes of input `input`'s block `block` permuted (idx) into the lanes of mask.
  struct Wide {
    int input;
    int64_t block;
    alignas(64) int32_t idx[16];
    uint16_t mask;
  };
  std::vector<int64_t> in_channels_, channels_;
  std::vector<std::vector<Piece>> pieces_;  // per output block
  std::vector<std::vector<Wide>> wide_;     // per output block
};

}  // namespace onnxtrain::kernels::cpu::nchwc
