// The direct NCHWc convolution and its depthwise form (src/kernels/cpu/nchwc_direct.h, AVX-512)
// against a naive double-precision convolution: strides, dilations, leading and trailing pads,
// kernels from 1x1 to 5x5 and 1x7 / 7x1, channel counts that are and are not multiples of 16, tails
// of every width, bias, the sum input and each activation (SiLU too), at 1 and 2 threads.
#include <cmath>
#include <random>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/nchwc_direct.h"
#include "test_util.h"

using onnxtrain::DType;
using onnxtrain::Tensor;
using onnxtrain::kernels::cpu::NchwcDepthwiseConv;
using onnxtrain::kernels::cpu::NchwcDirectConv;
namespace nchwc = onnxtrain::kernels::cpu::nchwc;
namespace nchwc512 = onnxtrain::kernels::cpu::nchwc512;

namespace {

struct Case {
  int64_t N, C, M, IH, IW, KH, KW, sh, sw, dh, dw, ph, pw, pe_h, pe_w;  // pe: trailing pads
  nchwc512::Act act = nchwc512::Act::kNone;
  float alpha = 0, beta = 0;
  bool sum = false, bias = true;
  bool plain = false;  // X plain [N, C, H, W]
  bool depthwise = false;  // depthwise (C = M, W [M, 1, KH, KW]; NchwcDepthwiseConv)
};

double activate(const Case& c, double v) {
  switch (c.act) {
    case nchwc512::Act::kNone: return v;
    case nchwc512::Act::kRelu: return v < 0 ? 0 : v;
    case nchwc512::Act::kLeakyRelu: return v < 0 ? c.alpha * v : v;
    case nchwc512::Act::kClip: return v < c.alpha ? c.alpha : v > c.beta ? c.beta : v;
    case nchwc512::Act::kHardSwish: return v * std::max(0.0, std::min(1.0, v / 6 + 0.5));
    case nchwc512::Act::kSiLU: return v / (1 + std::exp(-v));
  }
  return v;
}

// Runs case `c` at `threads` threads (the kernel built for `built_for`, 0: as many); max |error|
// relative to the reference's magnitude.
void check(const Case& c, int threads, int built_for = 0) {
  SCOPED_TRACE(::testing::Message() << "N" << c.N << " C" << c.C << " M" << c.M << " " << c.IH << "x" << c.IW << " k"
                                    << c.KH << "x" << c.KW << " s" << c.sh << "," << c.sw << " d" << c.dh << ","
                                    << c.dw << " p" << c.ph << "," << c.pw << "/" << c.pe_h << "," << c.pe_w << " act"
                                    << int(c.act) << " sum" << c.sum << " plain" << c.plain << " depthwise" << c.depthwise << " threads " << threads);
  NchwcDirectConv::Geometry g;
  g.N = c.N, g.C = c.C, g.M = c.M, g.IH = c.IH, g.IW = c.IW, g.KH = c.KH, g.KW = c.KW;
  g.sh = c.sh, g.sw = c.sw, g.dh = c.dh, g.dw = c.dw, g.ph = c.ph, g.pw = c.pw;
  g.plain = c.plain;
  g.OH = (c.IH + c.ph + c.pe_h - ((c.KH - 1) * c.dh + 1)) / c.sh + 1;
  g.OW = (c.IW + c.pw + c.pe_w - ((c.KW - 1) * c.dw + 1)) / c.sw + 1;
  if (c.depthwise) ASSERT_TRUE(NchwcDepthwiseConv::supports(g, c.act, c.alpha, c.beta));
  else ASSERT_TRUE(NchwcDirectConv::supports(g, c.act, c.alpha, c.beta));
  std::mt19937 rng(uint32_t(c.C * 131 + c.M * 7 + c.KH * 3 + c.IW));
  const Tensor x = ot_test::random_tensor(DType::kFloat32, {c.N, c.C, c.IH, c.IW}, rng);
  const int64_t wc = c.depthwise ? 1 : c.C;  // W's input channels per output channel
  const Tensor w = ot_test::random_tensor(DType::kFloat32, {c.M, wc, c.KH, c.KW}, rng);
  const Tensor b = ot_test::random_tensor(DType::kFloat32, {c.M}, rng);
  const Tensor z = ot_test::random_tensor(DType::kFloat32, {c.N, c.M, g.OH, g.OW}, rng);
  const int64_t ocb = nchwc::blocks(c.M), icb = nchwc::blocks(c.C), ohw = g.OH * g.OW;
  Tensor xb = Tensor::empty(DType::kFloat32, {c.N, icb, c.IH, c.IW, 16});
  nchwc::to_blocked(x.data<float>(), xb.data<float>(), c.N, c.C, c.IH * c.IW);
  Tensor y = Tensor::empty(DType::kFloat32, {c.N, ocb, g.OH, g.OW, 16});
  if (c.sum) nchwc::to_blocked(z.data<float>(), y.data<float>(), c.N, c.M, ohw);

  const int built = built_for ? built_for : threads;
  const float* xin = c.plain ? x.data<float>() : xb.data<float>();
  const float* bias = c.bias ? b.data<float>() : nullptr;
  if (c.depthwise) {
    NchwcDepthwiseConv conv(g, w.data<float>(), c.act, c.alpha, c.beta, built);
    std::vector<char> ws_buf(conv.workspace_bytes() + 64, char(0xff));  // NaNs: nothing may rely on zeros there
    char* ws = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws_buf.data()) + 63) / 64 * 64);
    onnxtrain::ThreadScope scope(threads);
    conv.run(xin, bias, y.data<float>(), ws);
  } else {
    NchwcDirectConv conv(g, w.data<float>(), c.act, c.alpha, c.beta, c.sum, built);
    std::vector<char> ws_buf(conv.workspace_bytes() + 64, char(0xff));
    char* ws = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws_buf.data()) + 63) / 64 * 64);
    onnxtrain::ThreadScope scope(threads);
    conv.run(xin, bias, y.data<float>(), ws);
  }

  const float *X = x.data<float>(), *W = w.data<float>(), *B = b.data<float>(), *Z = z.data<float>();
  const float* Y = y.data<float>();
  double worst = 0;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t m = 0; m < ocb * 16; ++m)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const float got = Y[(((n * ocb + m / 16) * g.OH + oh) * g.OW + ow) * 16 + m % 16];
          if (m >= c.M) {  // the layout's padded channels stay zero
            ASSERT_EQ(got, 0.f) << "padded channel " << m;
            continue;
          }
          double acc = c.bias ? B[m] : 0, mag = std::fabs(acc);
          for (int64_t ci = c.depthwise ? m : 0; ci < (c.depthwise ? m + 1 : c.C); ++ci)
            for (int64_t kh = 0; kh < c.KH; ++kh)
              for (int64_t kw = 0; kw < c.KW; ++kw) {
                const int64_t ih = oh * c.sh + kh * c.dh - c.ph, iw = ow * c.sw + kw * c.dw - c.pw;
                if (ih < 0 || ih >= c.IH || iw < 0 || iw >= c.IW) continue;
                const double t = double(X[((n * c.C + ci) * c.IH + ih) * c.IW + iw]) *
                                 W[((m * wc + (c.depthwise ? 0 : ci)) * c.KH + kh) * c.KW + kw];
                acc += t, mag += std::fabs(t);
              }
          if (c.sum) acc += Z[((n * c.M + m) * g.OH + oh) * g.OW + ow], mag += 1;
          const double want = activate(c, acc);
          worst = std::max(worst, std::fabs(got - want) / (mag + 1e-3));
          ASSERT_NEAR(got, want, 1e-5 * (mag + 1)) << "n " << n << " m " << m << " at " << oh << "," << ow;
        }
  EXPECT_LT(worst, 1e-5);
}

}  // namespace

TEST(NchwcDirect, MatchesDoubleReference) {
  if (!nchwc512::available()) GTEST_SKIP() << "this CPU has no AVX-512F (NchwcConv runs oneDNN here)";
  using A = nchwc512::Act;
  const std::vector<Case> cases = {
      // N, C, M, IH, IW, KH, KW, sh, sw, dh, dw, ph, pw, pe_h, pe_w
      {1, 32, 64, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kRelu},             // one group, two input blocks
      {2, 16, 80, 9, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, A::kNone},            // five output blocks: groups 3 + 2
      {1, 16, 112, 6, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kRelu},           // seven: 4 + 3
      {2, 32, 150, 5, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, A::kNone, 0, 0, true},  // ten, the last padded: 4 + 3 + 3
      {1, 160, 32, 7, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, A::kNone, 0, 0, true},  // 1x1: input blocks 8 + 2
      {3, 48, 48, 10, 9, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, A::kRelu},            // 1x1 stride 2 (downsample)
      {1, 20, 24, 13, 9, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, A::kRelu},            // padded input and output channels
      {1, 32, 48, 17, 17, 1, 7, 1, 1, 1, 1, 0, 3, 0, 3, A::kNone, 0, 0, true},
      {1, 32, 48, 17, 17, 7, 1, 1, 1, 1, 1, 3, 0, 3, 0, A::kLeakyRelu, 0.1f},
      {1, 16, 32, 12, 15, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, A::kClip, -0.5f, 0.7f},  // dilation 2
      {1, 16, 20, 12, 15, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kClip, 0.f, 6.f},     // Clip(0, 6), padded outputs
      {2, 32, 64, 14, 14, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, A::kHardSwish, 0, 0, true},  // no padding: X read in place
      {1, 16, 16, 11, 10, 3, 3, 3, 1, 1, 1, 1, 0, 0, 2, A::kNone},           // sh 3, uneven pads
      {1, 16, 32, 2, 6, 3, 3, 1, 1, 1, 1, 3, 1, 3, 1, A::kRelu},             // rows whose windows lie in the pads
      {1, 16, 32, 9, 8, 5, 1, 1, 1, 2, 1, 4, 0, 4, 0, A::kNone},             // 5x1 dilated 2: pad rows skipped
      {1, 3, 64, 23, 23, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, A::kRelu},            // a stem from 3 channels
      {1, 64, 64, 4, 30, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kNone, 0, 0, false, false},  // no bias
      // Plain X: stems (7x7 stride 2 from 3 channels; 3x3 stride 2 to 32), one with 20 channels.
      {2, 3, 64, 23, 23, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, A::kRelu, 0, 0, false, true, true},
      {1, 3, 32, 17, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, A::kHardSwish, 0, 0, false, true, true},
      {1, 20, 40, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kNone, 0, 0, true, true, true},
      // SiLU (applied to each finished row): EfficientNet's stem, blocked X with two input blocks.
      {2, 3, 32, 17, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, A::kSiLU, 0, 0, false, true, true},
      {1, 32, 40, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kSiLU, 0, 0, true},
      {2, 24, 144, 7, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, A::kSiLU},  // a 1x1 expansion: nine output blocks
  };
  for (const Case& c : cases)
    for (int threads : {1, 2}) check(c, threads);
  // Group by group: two groups whose weights (288 KiB) exceed what bands read again from the cache.
  const Case group_major{1, 64, 128, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kRelu};
  // Bands that span images, padded: 3 images of 5 rows split in 2-4 bands.
  const Case across_images{3, 16, 32, 5, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kNone, 0, 0, true};
  for (int threads : {1, 2, 3}) check(group_major, threads), check(across_images, threads);
  // More threads than the kernel was built for: it runs on as many as it was built for.
  check(cases[0], 3, 1);
  check(cases[2], 2, 1);
  check(across_images, 3, 2);
  // Every tile width (1 to 12 pixels and the tails after them) and group width (1 to 4 output blocks).
  for (int64_t iw = 1; iw <= 16; ++iw)
    for (int64_t m : {16, 32, 48, 64}) check({1, 16, m, 3, iw, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kRelu}, 1);
}

TEST(NchwcDirect, DepthwiseMatchesDoubleReference) {
  if (!nchwc512::available()) GTEST_SKIP() << "this CPU has no AVX-512F (NchwcConv runs oneDNN here)";
  using A = nchwc512::Act;
  auto dw = [](Case c) { return c.depthwise = true, c.M = c.C, c; };
  const std::vector<Case> cases = {
      // N, C, M, IH, IW, KH, KW, sh, sw, dh, dw, ph, pw, pe_h, pe_w: EfficientNet's and MobileNet's
      // (3x3 and 5x5, stride 1 and 2, SiLU, Relu6, HardSwish), padded channels, dilation, uneven pads.
      dw({2, 32, 0, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kSiLU}),
      dw({1, 96, 0, 15, 15, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, A::kSiLU}),
      dw({3, 40, 0, 13, 17, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, A::kClip, 0.f, 6.f}),
      dw({1, 24, 0, 11, 12, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, A::kHardSwish, 0, 0, false, false}),
      dw({1, 16, 0, 12, 15, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, A::kRelu}),
      dw({1, 20, 0, 11, 10, 3, 3, 3, 1, 1, 1, 1, 0, 0, 2, A::kNone}),
      dw({2, 48, 0, 7, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, A::kLeakyRelu, 0.1f}),  // no pads: all tiles unbounded
  };
  for (const Case& c : cases)
    for (int threads : {1, 2, 3}) check(c, threads);
  // Every tile width (1 to 12 pixels and the tails after them), with and without pads.
  for (int64_t iw = 1; iw <= 26; ++iw) {
    check(dw({1, 16, 0, 3, iw, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, A::kSiLU}), 1);
    check(dw({1, 16, 0, 3, iw + 2, 3, 3, 1, 2, 1, 1, 0, 0, 0, 0, A::kNone}), 1);
  }
}

TEST(NchwcDirect, RefusesWhatItDoesNotRun) {
  NchwcDirectConv::Geometry g;
  g.N = 1, g.C = 16, g.M = 20, g.IH = g.IW = 8, g.OH = g.OW = 8, g.KH = g.KW = 3, g.ph = g.pw = 1;
  if (!nchwc512::available()) {
    EXPECT_FALSE(NchwcDirectConv::supports(g, nchwc512::Act::kNone, 0, 0));
    return;
  }
  EXPECT_TRUE(NchwcDirectConv::supports(g, nchwc512::Act::kNone, 0, 0));
  // Clip(0.5, 6) of the padded output channels' zeros would not be zero.
  EXPECT_FALSE(NchwcDirectConv::supports(g, nchwc512::Act::kClip, 0.5f, 6.f));
  g.M = 32;
  EXPECT_TRUE(NchwcDirectConv::supports(g, nchwc512::Act::kClip, 0.5f, 6.f));
  g.sw = 3;
  EXPECT_FALSE(NchwcDirectConv::supports(g, nchwc512::Act::kNone, 0, 0));
  // Depthwise: C = M, X blocked, stride 1 or 2 across.
  g.sw = 1, g.C = g.M = 20;
  EXPECT_TRUE(NchwcDepthwiseConv::supports(g, nchwc512::Act::kSiLU, 0, 0));
  EXPECT_FALSE(NchwcDepthwiseConv::supports(g, nchwc512::Act::kClip, 0.5f, 6.f));
  g.plain = true;
  EXPECT_FALSE(NchwcDepthwiseConv::supports(g, nchwc512::Act::kNone, 0, 0));
  g.plain = false, g.M = 40;
  EXPECT_FALSE(NchwcDepthwiseConv::supports(g, nchwc512::Act::kNone, 0, 0));
}
