#include "kernels/cpu/nchwc_direct.h"

#include <algorithm>

#include "core/parallel.h"
#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/vmath512.h"

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

// y = x * sigmoid(x) over a finished row (n a multiple of 16, whole blocks): 16 lanes where the
// CPU has them, else 8.
void silu_row(float* y, int64_t n) {
  const int64_t i = vmath512::available() ? vmath512::silu(y, y, n) : 0;
  vmath::silu_t<vmath::O8>(y + i, y + i, n - i);
}

// The workspace of a run: the bias over `blocks` whole blocks.
size_t bias_bytes(int64_t blocks) { return align64(size_t(blocks * kB) * sizeof(float)); }
// The bias (null: zeros) of `channels` channels copied into `ws`, zeros up to whole blocks.
const float* padded_bias(char* ws, const float* bias, int64_t channels) {
  float* b = reinterpret_cast<float*>(ws);
  std::fill(b, b + blocks16(channels) * kB, 0.f);
  if (bias) std::copy(bias, bias + channels, b);
  return b;
}

// Whether act(0) = 0 holds where the output has padded channels (their zeros must stay zeros).
bool keeps_padding(int64_t channels, nchwc512::Act act, float alpha, float beta) {
  return channels % kB == 0 || act != nchwc512::Act::kClip || (alpha <= 0 && beta >= 0);
}

}  // namespace

bool NchwcDirectConv::supports(const Geometry& g, nchwc512::Act act, float alpha, float beta) {
  if (!nchwc512::available()) return false;
  if (g.N <= 0 || g.C <= 0 || g.M <= 0 || g.OH <= 0 || g.OW <= 0 || g.KH <= 0 || g.KW <= 0) return false;
  if ((g.sw != 1 && g.sw != 2) || g.sh <= 0 || g.dh <= 0 || g.dw <= 0) return false;
  if (g.ph < 0 || g.pw < 0) return false;
  // The layout's padded output channels hold zeros: act(0) must be 0 where there are any.
  return keeps_padding(g.M, act, alpha, beta);
}

NchwcDirectConv::NchwcDirectConv(const Geometry& g, const float* w, nchwc512::Act act, float alpha, float beta,
                                 bool sum, int threads)
    : g_(g), act_(act), alpha_(alpha), beta_(beta), sum_(sum) {
  slices_ = thread_budget(threads);
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

size_t NchwcDirectConv::workspace_bytes() const { return bias_bytes(ocb_); }

void NchwcDirectConv::run(const float* x, const float* bias, float* y, char* ws) const {
  const Geometry& g = g_;
  const float* b = padded_bias(ws, bias, g.M);

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
    const bool silu = act_ == nchwc512::Act::kSiLU;
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
          if (silu && a.last)
            for (int64_t j = 0; j < nb; ++j) silu_row(a.y + j * y_block, g.OW * kB);
        }
      }
    }
  });
}

bool NchwcDepthwiseConv::supports(const Geometry& g, nchwc512::Act act, float alpha, float beta) {
  if (!nchwc512::available() || g.plain || g.C != g.M) return false;
  if (g.N <= 0 || g.C <= 0 || g.OH <= 0 || g.OW <= 0 || g.KH <= 0 || g.KW <= 0) return false;
  if ((g.sw != 1 && g.sw != 2) || g.sh <= 0 || g.dh <= 0 || g.dw <= 0 || g.ph < 0 || g.pw < 0) return false;
  return keeps_padding(g.M, act, alpha, beta);
}

NchwcDepthwiseConv::NchwcDepthwiseConv(const Geometry& g, const float* w, nchwc512::Act act, float alpha,
                                       float beta, int threads)
    : g_(g), cb_(blocks16(g.C)), act_(act), alpha_(alpha), beta_(beta) {
  slices_ = thread_budget(threads);
  const int64_t taps = g.KH * g.KW;
  w_ = Tensor::empty(DType::kFloat32, {cb_ * taps * kB});
  float* out = w_.data<float>();
  for (int64_t b = 0; b < cb_; ++b)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t l = 0; l < kB; ++l) {
        const int64_t c = b * kB + l;
        *out++ = c < g.C ? w[c * taps + t] : 0.f;
      }
}

size_t NchwcDepthwiseConv::workspace_bytes() const { return bias_bytes(cb_); }

void NchwcDepthwiseConv::run(const float* x, const float* bias, float* y, char* ws) const {
  const Geometry& g = g_;
  const float* b = padded_bias(ws, bias, g.C);
  const int64_t taps = g.KH * g.KW, in_plane = g.IH * g.IW * kB, y_plane = g.OH * g.OW * kB;
  // Rows (image, block, output row) in order, an equal share per thread.
  const int64_t R = g.N * cb_ * g.OH, T = std::min<int64_t>({current_threads(), slices_, R});
  const bool silu = act_ == nchwc512::Act::kSiLU;
  parallel_for(T, 1, [&](int64_t th0, int64_t th1) {
    nchwc512::DwRowArgs a;
    a.IH = g.IH, a.IW = g.IW, a.pw = g.pw;
    a.OW = g.OW, a.KH = g.KH, a.KW = g.KW, a.sw = g.sw, a.dh = g.dh, a.dw = g.dw;
    a.act = act_, a.alpha = alpha_, a.beta = beta_;  // SiLU: the row kernel stores the sums
    for (int64_t r = R * th0 / T; r < R * th1 / T; ++r) {
      const int64_t plane = r / g.OH, oh = r % g.OH, blk = plane % cb_;  // plane: image * cb + block
      a.in = x + plane * in_plane;
      a.w = w_.data<float>() + blk * taps * kB;
      a.bias = b + blk * kB;
      a.ih0 = oh * g.sh - g.ph;
      a.y = y + plane * y_plane + oh * g.OW * kB;
      nchwc512::dw_row(a);
      if (silu) silu_row(a.y, g.OW * kB);
    }
  });
}

}  // namespace onnxtrain::kernels::cpu
