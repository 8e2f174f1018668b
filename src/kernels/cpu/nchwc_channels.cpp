// com.onnxtrain NchwcChannels(X_0, ..., X_k) -> Y: channels gathered across blocked tensors.
//   Each X_j is [N, ceil(C_j/16), H, W, 16] (oneDNN's nChw16c seen as 5-D, padded channels zero),
//   C_j = attribute input_channels[j]; Y is [N, ceil(M/16), H, W, 16] with M = len(channels) and
//   Y channel m = channel channels[m] of the inputs' channels laid end to end (X_0's first);
//   Y's padded channels are zero.
// It is the blocked form of a Concat along the channels (any channel counts, not only multiples of
// 16), of a Slice of channels, and of ShuffleNet's channel shuffle (Reshape [N, g, C/g, H, W] ->
// Transpose 0 2 1 3 4 -> Reshape [N, C, H, W]), which runtime::block_conv_layouts rewrites to it
// so that chains stay blocked across them.
// Each output block is built from "pieces": one input block's lanes permuted into the output block
// under a lane mask (AVX-512's masked vpermps; on AVX2 a half block from a half block, vpermps +
// blend), so a pixel's block costs a few register operations whatever the channel arithmetic.
#include "kernels/cpu/nchwc_channels.h"

#include <immintrin.h>

#include "core/parallel.h"
#include "kernels/cpu/common.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/nchwc_channels512.h"
#include "kernels/registry.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace nchwc {

ChannelGather::ChannelGather(std::vector<int64_t> input_channels, std::vector<int64_t> channels)
    : in_channels_(std::move(input_channels)), channels_(std::move(channels)) {
  if (in_channels_.empty()) throw_error<InvalidArgument>("NchwcChannels needs at least one input");
  int64_t total = 0;
  for (int64_t c : in_channels_) {
    if (c <= 0) throw_error<InvalidArgument>("input_channels must be positive, got ", c);
    total += c;
  }
  if (channels_.empty()) throw_error<InvalidArgument>("attribute channels must name at least one channel");
  // Which input lanes land in which output lanes, per output block.
  const int64_t M = int64_t(channels_.size());
  pieces_.assign(size_t(blocks(M)), {});
  wide_.assign(size_t(blocks(M)), {});
  for (int64_t m = 0; m < M; ++m) {
    int64_t src = channels_[size_t(m)];
    if (src < 0 || src >= total)
      throw_error<InvalidArgument>("channels[", m, "] = ", src, " is outside the inputs' ", total, " channels");
    int j = 0;
    while (src >= in_channels_[size_t(j)]) src -= in_channels_[size_t(j++)];
    const int64_t ob = m / kBlock, ol = m % kBlock, ib = src / kBlock, il = src % kBlock;
    auto& half = pieces_[size_t(ob)];
    auto p = std::find_if(half.begin(), half.end(), [&](const Piece& q) {
      return q.input == j && q.block == ib && q.in_half == il / 8 && q.out_half == ol / 8;
    });
    if (p == half.end()) p = half.insert(half.end(), Piece{j, ib, int(il / 8), int(ol / 8), {}, {}});
    p->idx[ol % 8] = int32_t(il % 8);
    p->mask[ol % 8] = -1;
    auto& whole = wide_[size_t(ob)];
    auto w = std::find_if(whole.begin(), whole.end(), [&](const Wide& q) { return q.input == j && q.block == ib; });
    if (w == whole.end()) w = whole.insert(whole.end(), Wide{j, ib, {}, 0});
    w->idx[ol] = int32_t(il);
    w->mask = uint16_t(w->mask | (1u << ol));
  }
}

void ChannelGather::run(const std::vector<const float*>& in, float* y, int64_t n_images, int64_t HW, bool wide) const {
  const int64_t OB = int64_t(pieces_.size());
  // The first pixel of input j's block b for image n.
  auto block_of = [&](int j, int64_t n, int64_t b) {
    return in[size_t(j)] + (n * blocks(in_channels_[size_t(j)]) + b) * HW * kBlock;
  };
  // One task per (image, output block); small tensors stay on one core (kCopyGrain).
  parallel_for(n_images * OB, std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(HW * kBlock, 1)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / OB, ob = t % OB;
      float* out = y + t * HW * kBlock;
      if (wide) {
        nchwc512::GatherPiece ps[kBlock];
        const std::vector<Wide>& list = wide_[size_t(ob)];
        for (size_t q = 0; q < list.size(); ++q) ps[q] = {block_of(list[q].input, n, list[q].block), list[q].idx, list[q].mask};
        nchwc512::gather_block(ps, int(list.size()), out, HW);
        continue;
      }
      const std::vector<Piece>& list = pieces_[size_t(ob)];
      const float* src[2 * kBlock];
      for (size_t q = 0; q < list.size(); ++q) src[q] = block_of(list[q].input, n, list[q].block) + 8 * list[q].in_half;
      for (int64_t px = 0; px < HW; ++px) {
        __m256 half[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t q = 0; q < list.size(); ++q) {
          const Piece& p = list[q];
          const __m256 v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(src[q] + px * kBlock),
                                                    _mm256_load_si256(reinterpret_cast<const __m256i*>(p.idx)));
          half[p.out_half] =
              _mm256_blendv_ps(half[p.out_half], v, _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.mask))));
        }
        _mm256_storeu_ps(out + px * kBlock, half[0]);
        _mm256_storeu_ps(out + px * kBlock + 8, half[1]);
      }
    }
  });
}

}  // namespace nchwc

namespace {

using nchwc::blocks;
using nchwc::kBlock;

class NchwcChannelsKernel final : public Kernel {
 public:
  explicit NchwcChannelsKernel(const KernelInfo& info) : gather_(make(info)) {}

  void prepare(PrepareContext& ctx) override {
    const auto& cs = gather_.input_channels();
    const Shape& x = ctx.input_shape(0);
    for (size_t j = 0; j < cs.size(); ++j) {
      if (ctx.input_dtype(j) != DType::kFloat32) ctx.fail("input ", j, ": float32 only, got ", dtype_name(ctx.input_dtype(j)));
      const Shape& s = ctx.input_shape(j);
      if (s.size() != 5 || s[1] != blocks(cs[j]) || s[4] != kBlock || x.size() != 5 || s[0] != x[0] || s[2] != x[2] ||
          s[3] != x[3])
        ctx.fail("input ", j, " must be [N, ", blocks(cs[j]), ", H, W, ", kBlock, "] for ", cs[j],
                 " channels (N, H, W as input 0's ", shape_to_string(x), "), got ", shape_to_string(s));
    }
    n_ = x[0], hw_ = x[2] * x[3];
    ctx.set_output(0, DType::kFloat32, {x[0], blocks(gather_.out_channels()), x[2], x[3], kBlock});
  }

  void run(RunContext& ctx) override {
    std::vector<const float*> in(gather_.input_channels().size());
    for (size_t j = 0; j < in.size(); ++j) in[j] = ctx.input(j).data<float>();
    gather_.run(in, ctx.output(0).data<float>(), n_, hw_, nchwc512::gather_available());
  }

 private:
  static nchwc::ChannelGather make(const KernelInfo& info) {
    std::vector<int64_t> cs = info.attr_ints("input_channels");
    if (cs.size() != info.node().inputs.size())
      info.fail("attribute input_channels needs one channel count per input (", info.node().inputs.size(), " inputs, ",
                cs.size(), " counts)");
    try {
      return nchwc::ChannelGather(std::move(cs), info.attr_ints("channels"));
    } catch (const InvalidArgument& e) {
      info.fail(e.what());
    }
  }

  nchwc::ChannelGather gather_;
  int64_t n_ = 0, hw_ = 0;
};

}  // namespace

void register_nchwc_channels(KernelRegistry& r) {
  r.add(ops::kDomain, "NchwcChannels", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<NchwcChannelsKernel>(i); });
}

}  // namespace onnxtrain::kernels::cpu
