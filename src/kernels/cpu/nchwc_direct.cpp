#include "kernels/cpu/nchwc_direct.h"

#include <algorithm>
#include <cstring>

#include "core/parallel.h"

namespace onnxtrain::kernels::cpu {

namespace {

constexpr int64_t kB = 16;           // channels per block
constexpr int64_t kGroupBlocks = 4;  // output blocks per group (nchwc512::conv_row's nb)
// Bytes of output one band of rows may span: its rows are revisited once per input block, in the
// second-level cache; the input block's weights stay in the first.
constexpr int64_t kBandBytes = 128 * 1024;

int64_t blocks16(int64_t c) { return (c + kB - 1) / kB; }
size_t align64(size_t n) { return (n + 63) / 64 * 64; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool NchwcDirectConv::supports(const Geometry& g, nchwc512::Act act, float alpha, float beta) {
  if (!nchwc512::available()) return false;
  if (g.N <= 0 || g.C <= 0 || g.M <= 0 || g.OH <= 0 || g.OW <= 0 || g.KH <= 0 || g.KW <= 0) return false;
  if ((g.sw != 1 && g.sw != 2) || g.sh <= 0 || g.dh <= 0 || g.dw <= 0) return false;
  if (g.ph < 0 || g.pw < 0) return false;
  // The layout's padded output channels hold zeros: act(0) must be 0 where there are any.
  if (g.M % kB != 0 && act == nchwc512::Act::kClip && !(alpha <= 0 && beta >= 0)) return false;
  return true;
}

NchwcDirectConv::NchwcDirectConv(const Geometry& g, const float* w, nchwc512::Act act, float alpha, float beta,
                                 bool sum)
    : g_(g), act_(act), alpha_(alpha), beta_(beta), sum_(sum) {
  L_ = g.plain ? 1 : kB;
  icb_ = g.plain ? g.C : blocks16(g.C);
  ocb_ = blocks16(g.M);
  groups_ = ceil_div(ocb_, kGroupBlocks);
  // The input rows and columns the windows reach; beyond the input's own (or with leading pads),
  // a zero-padded copy.
  PH = (g.OH - 1) * g.sh + (g.KH - 1) * g.dh + 1;
  PW = (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1;
  padded_ = g.ph > 0 || g.pw > 0 || PH > g.IH || PW > g.IW;
  if (!padded_) PH = g.IH, PW = g.IW;
  const int64_t taps = g.KH * g.KW;
  w_ = Tensor::empty(DType::kFloat32, {ocb_ * icb_ * taps * L_ * kB});
  float* out = w_.data<float>();
  for (int64_t gi = 0; gi < groups_; ++gi) {
    const int64_t nb = std::min(kGroupBlocks, ocb_ - gi * kGroupBlocks), width = nb * kB;
    for (int64_t ib = 0; ib < icb_; ++ib)
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t ic = 0; ic < L_; ++ic) {
          const int64_t c = ib * L_ + ic;
          for (int64_t o = 0; o < width; ++o) {
            const int64_t m = gi * kGroupBlocks * kB + o;
            *out++ = m < g.M && c < g.C ? w[(m * g.C + c) * taps + t] : 0.f;
          }
        }
  }
}

size_t NchwcDirectConv::workspace_bytes() const {
  size_t bytes = align64(size_t(ocb_ * kB) * sizeof(float));
  if (padded_) bytes += align64(size_t(g_.N * icb_ * PH * PW * L_) * sizeof(float));
  return bytes;
}

void NchwcDirectConv::run(const float* x, const float* bias, float* y, char* ws) const {
  const Geometry& g = g_;
  float* b = reinterpret_cast<float*>(ws);  // the bias over whole blocks
  ws += align64(size_t(ocb_ * kB) * sizeof(float));
  std::fill(b, b + ocb_ * kB, 0.f);
  if (bias) std::copy(bias, bias + g.M, b);

  const float* in = x;
  if (padded_) {  // padded (r, c) = x(r - ph, c - pw), zero outside
    float* P = reinterpret_cast<float*>(ws);
    const int64_t c0 = std::min(g.pw, PW), c1 = std::max(c0, std::min(PW, g.IW + g.pw));
    const int64_t L = L_;
    parallel_for(g.N * icb_ * PH, std::max<int64_t>(1, 4096 / (PW * L)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t plane = r / PH, ih = r % PH - g.ph;
        float* dst = P + r * PW * L;
        if (ih < 0 || ih >= g.IH || c1 == c0) {
          std::memset(dst, 0, size_t(PW * L) * sizeof(float));
          continue;
        }
        std::memset(dst, 0, size_t(c0 * L) * sizeof(float));
        std::memcpy(dst + c0 * L, x + ((plane * g.IH + ih) * g.IW + (c0 - g.pw)) * L, size_t((c1 - c0) * L) * sizeof(float));
        std::memset(dst + c1 * L, 0, size_t((PW - c1) * L) * sizeof(float));
      }
    });
    in = P;
  }
  const int64_t in_row = PW * L_, in_plane = PH * PW * L_, y_block = g.OH * g.OW * kB;
  const int64_t taps = g.KH * g.KW;
  // Input blocks per call: their weights (taps x L x 64 floats each) within 40 KiB.
  const int64_t icc = std::max<int64_t>(1, 10240 / (taps * L_ * kGroupBlocks * kB));

  // Bands of output rows, the images' rows one after the other (the weights read once per band
  // serve every image in it): at most kBandBytes of a group's output, and at least four tasks a
  // thread where the groups alone give fewer.
  const int64_t R = g.N * g.OH;
  int64_t rows = std::clamp<int64_t>(kBandBytes / (g.OW * kGroupBlocks * kB * int64_t(sizeof(float))), 1, R);
  const int64_t want = 4 * int64_t(current_threads());
  if (groups_ * ceil_div(R, rows) < want) rows = std::max<int64_t>(1, ceil_div(R, ceil_div(want, groups_)));
  const int64_t bands = ceil_div(R, rows);

  parallel_for(groups_ * bands, 1, [&](int64_t t0, int64_t t1) {
    nchwc512::RowArgs a;
    a.in_row = in_row;
    a.in_block = in_plane;
    a.y_block = y_block;
    a.OW = g.OW, a.KH = g.KH, a.KW = g.KW, a.sw = g.sw, a.dh = g.dh, a.dw = g.dw;
    a.sum = sum_;
    a.plain = L_ == 1;
    a.act = act_, a.alpha = alpha_, a.beta = beta_;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t gi = t / bands, band = t % bands;
      const int64_t nb = std::min(kGroupBlocks, ocb_ - gi * kGroupBlocks);
      const int64_t r0 = band * rows, r1 = std::min(R, r0 + rows);
      const float* wg = w_.data<float>() + gi * kGroupBlocks * icb_ * taps * L_ * kB;
      a.nb = int(nb);
      a.bias = b + gi * kGroupBlocks * kB;
      for (int64_t ib = 0; ib < icb_; ib += icc) {
        a.icc = std::min(icc, icb_ - ib);
        a.first = ib == 0;
        a.last = ib + a.icc == icb_;
        a.w = wg + ib * taps * L_ * nb * kB;
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t n = r / g.OH, oh = r % g.OH;
          a.prefetch = r == r0 ? a.icc * taps * L_ * nb * kB : 0;  // the next blocks' (or group's) weights
          a.in = in + (n * icb_ + ib) * in_plane + oh * g.sh * in_row;
          a.y = y + ((n * ocb_ + gi * kGroupBlocks) * g.OH + oh) * g.OW * kB;
          nchwc512::conv_row(a);
        }
      }
    }
  });
}

}  // namespace onnxtrain::kernels::cpu
