#include "kernels/cpu/nchwc_direct.h"

#include <algorithm>

#include "core/parallel.h"

namespace onnxtrain::kernels::cpu {

namespace {

constexpr int64_t kB = 16;           // channels per block
constexpr int64_t kGroupBlocks = 4;  // output blocks per group (nchwc512::conv_row's nb)
// Bytes of output one band of rows may span: its rows are revisited once per input block, in the
// second-level cache; the input block's weights stay in the first.
constexpr int64_t kBandBytes = 128 * 1024;
// Weights this small stay in the second-level cache when every band reads them all.
constexpr int64_t kSmallWeights = 256 * 1024;

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
                                 bool sum, int threads)
    : g_(g), act_(act), alpha_(alpha), beta_(beta), sum_(sum) {
  slices_ = threads > 0 ? threads : hardware_threads();
  L_ = g.plain ? 1 : kB;
  icb_ = g.plain ? g.C : blocks16(g.C);
  ocb_ = blocks16(g.M);
  groups_ = ceil_div(ocb_, kGroupBlocks);
  // Input blocks per call: their weights (taps x L x 64 floats each) within 40 KiB.
  icc_ = std::max<int64_t>(1, 10240 / (g.KH * g.KW * L_ * kGroupBlocks * kB));
  // The most output rows of a band (run() may take fewer).
  max_rows_ = std::clamp<int64_t>(kBandBytes / (g.OW * kGroupBlocks * kB * int64_t(sizeof(float))), 1, g.N * g.OH);
  const int64_t taps = g.KH * g.KW;
  w_ = Tensor::empty(DType::kFloat32, {ocb_ * icb_ * taps * L_ * kB});
  float* out = w_.data<float>();
  for (int64_t gi = 0; gi < groups_; ++gi) {
    const int64_t b0 = group_start(gi), nb = group_start(gi + 1) - b0, width = nb * kB;
    for (int64_t ib = 0; ib < icb_; ++ib)
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t ic = 0; ic < L_; ++ic) {
          const int64_t c = ib * L_ + ic;
          for (int64_t o = 0; o < width; ++o) {
            const int64_t m = b0 * kB + o;
            *out++ = m < g.M && c < g.C ? w[(m * g.C + c) * taps + t] : 0.f;
          }
        }
  }
}

int64_t NchwcDirectConv::group_start(int64_t gi) const {
  const int64_t base = ocb_ / groups_, extra = ocb_ % groups_;
  return gi * base + std::min(gi, extra);
}

size_t NchwcDirectConv::workspace_bytes() const { return align64(size_t(ocb_ * kB) * sizeof(float)); }

void NchwcDirectConv::run(const float* x, const float* bias, float* y, char* ws) const {
  const Geometry& g = g_;
  float* b = reinterpret_cast<float*>(ws);  // the bias over whole blocks
  std::fill(b, b + ocb_ * kB, 0.f);
  if (bias) std::copy(bias, bias + g.M, b);

  const int64_t in_row = g.IW * L_, in_plane = g.IH * g.IW * L_, y_block = g.OH * g.OW * kB;
  const int64_t taps = g.KH * g.KW;

  // Bands of output rows, the images' rows one after the other (the weights read once per band
  // serve every image in it): at most kBandBytes of a group's output, and at least four tasks a
  // thread where the groups alone give fewer (one a thread where a group's weights come from
  // memory for every band); the rows split evenly between the bands.
  const int64_t R = g.N * g.OH, T = std::min<int64_t>(current_threads(), slices_);
  const int64_t w_bytes = int64_t(w_.nbytes()), want = w_bytes / groups_ > kSmallWeights ? T : 4 * T;
  int64_t rows = max_rows_;
  if (groups_ * ceil_div(R, rows) < want) rows = std::max<int64_t>(1, ceil_div(R, ceil_div(want, groups_)));
  int64_t bands = ceil_div(R, rows);
  while ((groups_ * bands) % T != 0 && bands < R) ++bands;  // as many tasks per thread where the rows allow
  // Tasks band by band (every group's weights read once per band, the band's input once from
  // memory) where the weights are small or re-reading them costs less than re-reading the input;
  // else group by group (each group's weights read once, the input once per group).
  const int64_t in_bytes = g.N * icb_ * in_plane * int64_t(sizeof(float));
  const bool band_major = w_bytes <= kSmallWeights || w_bytes * (bands - 1) < in_bytes * (groups_ - 1);
  const int64_t tasks = groups_ * bands, total = ocb_ * R;  // a task's cost: its output blocks x rows

  // Each thread takes the tasks in order whose cost midpoints fall in its share of the total.
  parallel_for(T, 1, [&](int64_t th0, int64_t th1) {
    nchwc512::RowArgs a;
    a.OW = g.OW, a.KH = g.KH, a.KW = g.KW, a.sw = g.sw, a.dh = g.dh, a.dw = g.dw;
    a.IH = g.IH, a.IW = g.IW, a.pw = g.pw;
    a.in_row = in_row, a.in_block = in_plane;
    a.y_block = y_block;
    a.sum = sum_;
    a.plain = L_ == 1;
    a.act = act_, a.alpha = alpha_, a.beta = beta_;
    int64_t done = 0;  // cost of the tasks before t
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t gi = band_major ? t % groups_ : t / bands, band = band_major ? t / groups_ : t % bands;
      const int64_t b0 = group_start(gi), nb = group_start(gi + 1) - b0;
      const int64_t r0 = R * band / bands, r1 = R * (band + 1) / bands;
      const int64_t mid = 2 * done + nb * (r1 - r0);
      done += nb * (r1 - r0);
      if (mid < 2 * total * th0 / T || mid >= 2 * total * th1 / T) continue;
      const float* wg = w_.data<float>() + b0 * icb_ * taps * L_ * kB;
      a.nb = int(nb);
      a.bias = b + b0 * kB;
      for (int64_t ib = 0; ib < icb_; ib += icc_) {
        a.icc = std::min(icc_, icb_ - ib);
        a.first = ib == 0;
        a.last = ib + a.icc == icb_;
        a.w = wg + ib * taps * L_ * nb * kB;
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t n = r / g.OH, oh = r % g.OH;
          a.prefetch = r == r0 ? a.icc * taps * L_ * nb * kB : 0;  // the next blocks' (or group's) weights
          a.in = x + (n * icb_ + ib) * in_plane;
          a.ih0 = oh * g.sh - g.ph;
          a.y = y + ((n * ocb_ + b0) * g.OH + oh) * g.OW * kB;
          nchwc512::conv_row(a);
        }
      }
    }
  });
}

}  // namespace onnxtrain::kernels::cpu
