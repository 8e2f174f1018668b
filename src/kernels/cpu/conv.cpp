// Convolutions: forward kernels and their gradient kernels.
//   Conv           X[N, C, D...] * W[M, C/G, k...] (+ B[M]) -> Y[N, M, O...]
//                  Y[n, m, o] = B[m] + sum_{c in group(m), k} X[n, c, o*s - pb + k*d] * W[m, c, k]
//   ConvTranspose  X[N, C, D...], W[C, M/G, k...] (+ B[M]) -> Y[N, M, O...]
//                  Y[n, m, i*s - pb + k*d] += X[n, c, i] * W[c, m, k]   (the adjoint of Conv), + B[m]
//   com.onnxtrain.ConvGrad(dY, X, W) -> dX, dW, dB            (attributes of the Conv)
//                  dX = ConvTranspose(dY, W);  dW[m, c, k] = sum_{n,o} dY[n, m, o] X[n, c, o*s - pb + k*d]
//   com.onnxtrain.ConvTransposeGrad(dY, X, W) -> dX, dW, dB   (attributes of the ConvTranspose)
//                  dX = Conv(dY, W);           dW[c, m, k] = sum_{n,i} X[n, c, i] dY[n, m, i*s - pb + k*d]
//                  dB[m] = sum_{n,o} dY[n, m, o]; only the outputs the node names are computed.
// Both operators are one "direct" convolution seen from either side (ConvView): Conv runs it
// forward, ConvTranspose runs its data gradient, and the gradient kernels run the other two of
// {forward, backward data, backward weights}.
//   com.microsoft FusedConv(X, W[, B, Z]) -> Y = activation(Conv(X, W, B) + Z)   (onnxruntime's
//                  contrib operator; the inference sessions' rewrite of Conv [+ Add] + Relu / Clip)
//   Col2Im (ai.onnx 18) X[N, C K, L], image_shape, block_shape -> Y[N, C, image...]: ConvView's
//                  col2im with one group (float32, float64)
//   com.onnxtrain NchwcConv(X, W[, B, Z]) -> Y: FusedConv over oneDNN's blocked activation layout
//                  (nChw16c seen as the 5-D tensor [N, ceil(C/16), H, W, 16], padded channels zero):
//                  X blocked, or plain [N, C, H, W] (few input channels); Z and Y blocked. Placed by
//                  the inference pass runtime::block_conv_layouts; no reorders around the primitive.
//                  With one group and constant weights on AVX-512 CPUs it runs nchwc_direct.h's own
//                  kernels instead of oneDNN's (Relu, LeakyRelu, Clip and HardSwish applied there).
//   com.onnxtrain ReorderToNchwc(X[N, C, H, W]) -> [N, ceil(C/16), H, W, 16] (padded channels zero),
//                  ReorderFromNchwc(X5; channels = C) -> [N, C, H, W]: the chains' boundaries.
// float32 runs oneDNN (de)convolution primitives (forward, backward_data, backward_weights) created
// in prepare() for the concrete shapes (layouts chosen by oneDNN, reorders from and to the plain
// tensors inside the workspace; constant weights reordered once, in prepare(); FusedConv's Z and
// Relu / LeakyRelu / Clip as the primitive's sum and eltwise post-ops). float64, float16, bfloat16 and geometries oneDNN rejects run
// im2col / col2im + gemm.
#include <cmath>
#include <cstring>
#include <tuple>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_provider.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/nchwc_direct.h"
#include "kernels/shape/reduce.h"
#include "kernels/shape/window.h"
#include "kernels/registry.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

using shape::WindowGeom;

namespace {

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// 8 floats; aligned(4) makes dereferences unaligned loads and stores.
typedef float v8f __attribute__((vector_size(32), aligned(4)));

// For the kernel offset k (one index per spatial dim), calls f(p, q) for every position p (flat,
// row-major) of `from`, where q is the flat position in `to` at coordinates p*s - pb + k*d, or -1
// when that falls outside `to`. im2col walks output -> input, col2im input -> output.
template <class F>
void window_walk(const Shape& from, const Shape& to, const int64_t* k, const WindowGeom& g, F&& f) {
  const size_t nd = from.size();
  if (nd == 0) {
    f(int64_t(0), int64_t(0));
    return;
  }
  const size_t L = nd - 1;
  const int64_t inner = from[L], outer = dim_product(from, 0, L);
  const int64_t sL = g.stride[L], baseL = k[L] * g.dilation[L] - g.pad_b[L], toL = to[L];
  int64_t idx[16] = {0};
  for (int64_t o = 0; o < outer; ++o) {
    int64_t qo = 0;
    bool valid = true;
    for (size_t d = 0; d < L; ++d) {
      const int64_t q = idx[d] * g.stride[d] + k[d] * g.dilation[d] - g.pad_b[d];
      valid = valid && q >= 0 && q < to[d];
      qo = qo * to[d] + q;
    }
    const int64_t p0 = o * inner;
    if (!valid) {
      for (int64_t i = 0; i < inner; ++i) f(p0 + i, int64_t(-1));
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t q = i * sL + baseL;
        f(p0 + i, q >= 0 && q < toL ? qo * toL + q : int64_t(-1));
      }
    }
    for (size_t d = L; d-- > 0;) {
      if (++idx[d] < from[d]) break;
      idx[d] = 0;
    }
  }
}

// Per-dim kernel offsets of the flat kernel index r.
void kernel_index(int64_t r, const Shape& kernel, int64_t* k) {
  for (size_t d = kernel.size(); d-- > 0;) {
    k[d] = r % kernel[d];
    r /= kernel[d];
  }
}

// ------------------------------------------------------------ the direct-convolution view
// X[N, Cin, in...] * W[Cout, Cin/G, k...] -> Y[N, Cout, out...]. Conv is this view; ConvTranspose
// is its adjoint (its input is the view's Y, its output the view's X). The im2col / col2im + gemm
// routines below work on one image; Cm is float or double.
struct ConvView {
  int64_t Cin = 0, Cout = 0, G = 1, kk = 1, pin = 1, pout = 1;
  WindowGeom g;  // in / out: spatial dims of the view's X / Y

  int64_t rows() const { return Cin / G * kk; }  // column matrix [(c, k), o] of one group
  size_t col_elems() const { return size_t(rows() * pout); }

  // col[(c, k), o] = x[c, o*s - pb + k*d] (0 outside) over the channels of one group.
  template <class Cm>
  void im2col(const Cm* xg, Cm* col) const {
    parallel_for(rows(), std::max<int64_t>(1, 8192 / std::max<int64_t>(pout, 1)), [&](int64_t r0, int64_t r1) {
      int64_t k[16];
      for (int64_t r = r0; r < r1; ++r) {
        kernel_index(r % kk, g.kernel, k);
        const Cm* xc = xg + (r / kk) * pin;
        Cm* cr = col + r * pout;
        window_walk(g.out, g.in, k, g, [&](int64_t p, int64_t q) { cr[p] = q < 0 ? Cm(0) : xc[q]; });
      }
    });
  }
  // xg[c, o*s - pb + k*d] = sum of col[(c, k), o] (the adjoint of im2col).
  template <class Cm>
  void col2im(const Cm* col, Cm* xg) const {
    parallel_for(Cin / G, 1, [&](int64_t c0, int64_t c1) {
      int64_t k[16];
      for (int64_t c = c0; c < c1; ++c) {
        Cm* xc = xg + c * pin;
        std::fill(xc, xc + pin, Cm(0));
        for (int64_t kr = 0; kr < kk; ++kr) {
          kernel_index(kr, g.kernel, k);
          const Cm* cr = col + (c * kk + kr) * pout;
          window_walk(g.out, g.in, k, g, [&](int64_t p, int64_t q) {
            if (q >= 0) xc[q] += cr[p];
          });
        }
      }
    });
  }
  // y = conv(x, w) for one image:  Y_g[Coutg, P] = W_g[Coutg, rows] @ col
  template <class Cm>
  void forward(const Cm* x, const Cm* w, Cm* y, Cm* col) const {
    const int64_t R = rows(), Coutg = Cout / G;
    for (int64_t grp = 0; grp < G; ++grp) {
      im2col(x + grp * (Cin / G) * pin, col);
      gemm(false, false, Coutg, pout, R, Cm(1), w + grp * Coutg * R, R, col, pout, Cm(0), y + grp * Coutg * pout, pout);
    }
  }
  // dx = conv^T(dy, w) for one image:  col = W_g^T @ dY_g, then col2im
  template <class Cm>
  void backward_data(const Cm* dy, const Cm* w, Cm* dx, Cm* col) const {
    const int64_t R = rows(), Coutg = Cout / G;
    for (int64_t grp = 0; grp < G; ++grp) {
      gemm(true, false, R, pout, Coutg, Cm(1), w + grp * Coutg * R, R, dy + grp * Coutg * pout, pout, Cm(0), col, pout);
      col2im(col, dx + grp * (Cin / G) * pin);
    }
  }
  // dw (+)= dY_g @ col^T for one image (accumulate: add to dw, else overwrite).
  template <class Cm>
  void backward_weights(const Cm* x, const Cm* dy, Cm* dw, Cm* col, bool accumulate) const {
    const int64_t R = rows(), Coutg = Cout / G;
    for (int64_t grp = 0; grp < G; ++grp) {
      im2col(x + grp * (Cin / G) * pin, col);
      gemm(false, true, Coutg, R, pout, Cm(1), dy + grp * Coutg * pout, pout, col, pout, Cm(accumulate ? 1 : 0),
           dw + grp * Coutg * R, R);
    }
  }
};

// ------------------------------------------------------------ shapes of one node
// Attributes and resolved shapes of a Conv / ConvTranspose node (shape::ConvShape, shared by the
// forward and the gradient kernels) and the direct convolution's view of them.
struct ConvParams : shape::ConvShape {
  ConvView view;  // the direct convolution

  // shape::ConvShape::resolve, then the direct convolution's work buffers (im2col columns,
  // float32 staging: with N = 0 they are not bounded by X) must fit int64, and its view.
  void resolve(const PrepareContext& ctx, const Shape& x, const Shape& w) {
    shape::ConvShape::resolve(ctx, x, w);
    int64_t unused;
    for (const Shape& sizes : {Shape{C / group, kk, pout}, Shape{M / group, kk, pin}, Shape{C, pin}, Shape{M, pout},
                               Shape{C, M / group, kk}})
      if (!checked_numel(sizes, &unused))
        ctx.fail("work buffer sizes overflow int64: X ", shape_to_string(x), ", W ", shape_to_string(w));
    view.G = group;
    view.kk = kk;
    view.g = g;
    view.Cin = transposed ? M : C;
    view.Cout = transposed ? C : M;
    view.pin = transposed ? pout : pin;
    view.pout = transposed ? pin : pout;
    if (transposed) std::swap(view.g.in, view.g.out);
  }
};

// ------------------------------------------------------------ oneDNN descriptors
// kPlainToBlocked16: X (and dX) plain, Y (and dY) nC..16c (few input channels, as a stem's).
enum class Layout { kPlain, kBlocked16, kAny, kPlainToBlocked16 };

// Memory descriptors and geometry of one (de)convolution over the plain ONNX tensors, and the
// activation layouts worth trying (best first).
struct DnnlConv {
  using md = dnnl::memory::desc;
  md x, w, y, b;  // plain: X, W (the ONNX layout seen as [G,] O, I, k), Y, B
  Shape xs, ys, wd;
  dnnl::memory::dims strides, dil, pl, pr;
  std::vector<Layout> candidates;
  dnnl::memory::format_tag blocked16 = dnnl::memory::format_tag::undef;
  dnnl::memory::data_type dt = dnnl::memory::data_type::f32;  // of every argument (f32 or bf16)
  bool winograd = false;  // oneDNN's Winograd algorithm instead of the direct one
  bool may_decline = false;  // Winograd that may yield to the direct kernel (wino_2x3_verdict; "auto")

  md any(const Shape& s) const { return md(dnnl_util::dims(s), dt, dnnl::memory::format_tag::any); }
  md act(Layout l, const Shape& s, const md& plain) const {
    return l == Layout::kPlain ? plain : l == Layout::kBlocked16 ? md(dnnl_util::dims(s), dt, blocked16) : any(s);
  }
  md ax(Layout l) const { return act(l == Layout::kPlainToBlocked16 ? Layout::kPlain : l, xs, x); }
  md ay(Layout l) const { return act(l == Layout::kPlainToBlocked16 ? Layout::kBlocked16 : l, ys, y); }
  md aw() const { return any(wd); }
  dnnl::algorithm alg(bool transposed) const {
    if (transposed) return dnnl::algorithm::deconvolution_direct;
    return winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
  }
};

// False when oneDNN cannot express the geometry (negative effective pads) or runs no convolution
// of element type `dt` (dnnl_util::float_type: float32, bfloat16; where oneDNN has only reference
// kernels the generic path runs instead).
bool dnnl_conv(const ConvParams& p, const Shape& x, DType dt, DnnlConv* d) {
  using dnnl::memory;
  const auto type = dnnl_util::float_type(dt);
  if (!type) return false;
  d->dt = *type;
  const WindowGeom& g = p.g;
  const size_t nd = g.nd;
  for (size_t i = 0; i < nd; ++i)
    if (g.pad_b[i] < 0 || g.pad_e[i] - g.out_pad[i] < 0) return false;  // generic path handles these
  const int64_t Cg = p.C / p.group, Mg = p.M / p.group;
  // Weights as oneDNN wants them ([G,] O, I, k...) over the ONNX layout.
  Shape wd = {Mg, Cg};
  wd.insert(wd.end(), g.kernel.begin(), g.kernel.end());
  std::vector<int64_t> ws(wd.size());
  ws.back() = 1;
  for (size_t i = wd.size() - 1; i-- > 2;) ws[i] = ws[i + 1] * wd[i + 1];
  // Conv W is [M, C/G, k] = [G, Mg, Cg, k]; ConvTranspose W is [C, M/G, k] = [G, Cg, Mg, k].
  ws[0] = p.transposed ? p.kk : Cg * p.kk;
  ws[1] = p.transposed ? Mg * p.kk : p.kk;
  if (p.group > 1) {
    wd.insert(wd.begin(), p.group);
    ws.insert(ws.begin(), Cg * Mg * p.kk);
  }
  d->wd = wd;
  d->w = memory::desc(dnnl_util::dims(wd), d->dt, dnnl_util::dims(ws));
  d->xs = x;
  d->ys = p.y;
  d->x = dnnl_util::plain_md(x, d->dt);
  d->y = dnnl_util::plain_md(p.y, d->dt);
  d->b = dnnl_util::plain_md({p.M}, d->dt);
  // Activations: oneDNN's blocked layouts (reordered in and out) pay off when there is enough
  // arithmetic per activation byte; below that (1x1 and few-channel convolutions) the plain
  // layout's gemm-based kernel is faster. The threshold comes from bench/bench_kernels.py and
  // the layout comparison recorded there.
  const double flops = 2.0 * double(Mg) * double(p.C) * double(p.kk) * double(p.transposed ? p.pin : p.pout);
  const double bytes = 4.0 * (double(p.C) * double(p.pin) + double(p.M) * double(p.pout));
  const bool plain = flops / bytes < 40.0;
  // Among blocked layouts, nC..16c (jit direct kernels) measured up to 1.4x faster than what
  // `any` picks (nhwc brgemm) when both channel counts fill 16-wide blocks.
  // Depthwise: the jit_dw kernels want channel blocks; on the plain layout oneDNN falls back to a
  // gemm-based kernel 5x slower (backward, bench/bench_grad.py).
  if (Cg == 1 && Mg == 1 && p.group > 1) d->candidates = {Layout::kBlocked16, Layout::kAny};
  else if (plain) d->candidates = {Layout::kPlain, Layout::kAny};
  else if (Cg % 16 == 0 && Mg % 16 == 0) d->candidates = {Layout::kBlocked16, Layout::kAny};
  // Few input channels (ResNet-18's 3-channel 7x7 stem): what `any` picks (nhwc brgconv) needs X
  // and Y transposed, and the nhwc -> nchw reorder of Y ran 2.5-5x longer than nC..16c -> nchw;
  // oneDNN's jit kernels read the plain X directly (batch 16, 224x224, fastest of 24 runs: the
  // convolution 45 -> 49 ms, the reorders 28 -> 5 ms).
  else if (p.group == 1 && Cg < 16 && Mg % 16 == 0 && !p.transposed)
    d->candidates = {Layout::kPlainToBlocked16, Layout::kAny};
  else d->candidates = {Layout::kAny};
  d->blocked16 = nd == 1   ? memory::format_tag::nCw16c
                 : nd == 2 ? memory::format_tag::nChw16c
                           : memory::format_tag::nCdhw16c;
  d->strides = dnnl_util::dims(g.stride);
  d->pl = dnnl_util::dims(g.pad_b);
  d->dil.resize(nd);
  d->pr.resize(nd);
  for (size_t i = 0; i < nd; ++i) {
    d->dil[i] = g.dilation[i] - 1;
    d->pr[i] = g.pad_e[i] - g.out_pad[i];
  }
  return true;
}

// Tries the candidate layouts in order: create(layout) builds the primitive into `op` and returns
// false when oneDNN only has its (slow) reference kernel for it.
template <class F>
bool first_layout(const DnnlConv& d, dnnl_util::DnnlOp& op, F&& create) {
  for (Layout layout : d.candidates) {
    try {
      if (create(layout)) return true;
    } catch (const dnnl::error&) {
    }
    op = dnnl_util::DnnlOp();
  }
  return false;  // unsupported, or only oneDNN's slow reference kernels: im2col + gemm is faster
}

// Whether oneDNN's Winograd kernels are expected to beat the direct NCHWc kernel (nchwc_direct.h)
// at `threads` threads. The transforms' work and memory per 6x6 tile grow as C + M and the
// products saved as C * M: with few channels (h = C*M / (C + M) under 20: 32 -> 32, 16 -> 64) and
// an image too large for the transformed tiles to stay in cache (more than 8K output pixels) the
// direct kernel wins at any thread count (Inception-v3's 32 -> 32 stem layer at 147x147, 21.6K
// pixels: 1.34-1.37x the direct kernel's time, 1.56-1.66x at batch 8; SqueezeNet's 16 -> 64 at
// 55x55 is 0.69-0.82x at batch 1, 3K pixels, and 0.90-1.08x at batch 8); with h under 24 (32 -> 64)
// from 64K output pixels, where oneDNN transforms the whole batch through memory before the
// products (a scratchpad of 158 MB at batch 8 of 147x147), too (1.12-1.23x; 0.60x at batch 1).
// One thread otherwise: everywhere (1.2-2.2x on the bench's networks, a few small exceptions).
// Several: oneDNN's Winograd splits its tiles over the threads, and with few output pixels a thread
// and input channels not equal to the output's it scaled badly (two threads, batch 1, GoogLeNet's
// 3x3 convolutions at 14x14 and 7x7: 1.1-2.2x the direct kernel's time; at batch 8 the same layers
// 0.6-0.9x). Measured on AMD Zen 5 and Intel Sapphire Rapids (bench/vs_onnxruntime.py's models,
// per-node profiles in the networks, docs/kernels.md); the direct kernel is AVX-512's, so elsewhere
// this keeps Winograd.
bool winograd_pays(const ConvParams& p, int threads) {
  if (!nchwc512::available()) return true;
  const double h = double(p.C) * double(p.M) / double(p.C + p.M);
  const double out_pixels = double(p.N) * double(p.pout);
  if ((h < 20 && out_pixels > 8192) || (h < 24 && out_pixels > 65536)) return false;
  if (threads <= 1 || p.C == p.M) return true;
  const double pixels = out_pixels / threads;  // output pixels a thread
  return pixels >= 1000 || (pixels >= 350 && p.C >= 24) || (pixels >= 196 && p.C >= 96);
}

// The geometry oneDNN's Winograd F(4x4, 3x3) and F(2x2, 3x3) kernels take: one group, a 2-D 3x3
// window, stride 1, no dilation.
bool winograd_geometry(const ConvParams& p) {
  const WindowGeom& g = p.g;
  if (p.group != 1 || g.nd != 2) return false;
  for (size_t i = 0; i < 2; ++i)
    if (g.kernel[i] != 3 || g.stride[i] != 1 || g.dilation[i] != 1) return false;
  return true;
}

// Whether NchwcConv (float32 2-D, blocked_input) tries oneDNN's Winograd kernels for this
// convolution: X blocked, constant weights, one group, 3x3, stride 1, no dilation, at least 16
// input and output channels, ExecOptions::winograd on. F(2x2, 3x3) or F(4x4, 3x3), oneDNN's
// choice, 1.6-2.8x the direct kernels' speed, the sums in another order (a few 1e-6 relative
// apart). Training graphs' convolutions (plain tensors, weights that change) have their own gate,
// train_winograd_fits.
bool winograd_fits(const ConvParams& p, bool x_blocked, const Tensor* w_const, const ExecOptions& o) {
  if (o.winograd == ExecOptions::Winograd::kNever || !x_blocked || !w_const || !winograd_geometry(p) || p.C < 16 ||
      p.M < 16)
    return false;
  return o.winograd == ExecOptions::Winograd::kAlways || winograd_pays(p, thread_budget(o.num_threads));
}

// Whether a float32 convolution whose weights change between runs (training: Conv and ConvGrad
// over plain tensors) runs oneDNN's Winograd F(4x4, 3x3) kernels for its forward, backward-data
// and backward-weights passes, the activations reordered to nChw16c and back as the direct
// kernels' are. One group, 3x3, stride 1, no dilation, both channel counts multiples of 16 and at
// least 32, and (auto) at least 24 output tiles of 4x4 a thread: below that the weights' transform
// (C x M x 36 a pass) outweighs the products saved. Measured with oneDNN 2.6 on AMD Zen 5, the three
// passes together against the direct kernels' (fastest of 5): ResNet-18's 3x3 layers at batch 16
// 1.5-2.2x at one thread and 1.4-1.9x at two; 512 channels at 7x7 batch 4 (16 tiles) 1.25x slower,
// batch 8 1.1x faster; 128 channels at 14x14 batch 1 (16 tiles) 1.2x slower at one thread and 1.65x
// at two, batch 2 (32 tiles) 1.1x faster at one thread and 1.25x slower at two; 16 -> 32 channels
// (bench/side_by_side.py's CNN) 1.1-1.2x slower at any size. "1" (kAlways) drops the tile and
// channel-count thresholds, "0" keeps the direct kernels.
bool train_winograd_fits(const ConvParams& p, DType dt, const ExecOptions& o) {
  if (o.winograd == ExecOptions::Winograd::kNever || dt != DType::kFloat32 || p.transposed || !winograd_geometry(p) ||
      p.C % 16 != 0 || p.M % 16 != 0)
    return false;
  const WindowGeom& g = p.g;
  if (o.winograd == ExecOptions::Winograd::kAlways) return true;
  const int threads = thread_budget(o.num_threads);
  const double tiles = double(p.N) * double((g.out[0] + 3) / 4) * double((g.out[1] + 3) / 4);
  return p.C >= 32 && p.M >= 32 && tiles >= 24.0 * threads;
}

// oneDNN's F(2x2, 3x3) Winograd kernel where it blocks badly (dnnl_util::wino_2x3_verdict): its
// own scratchpad says how it blocked this convolution.
bool is_wino_2x3(const dnnl::primitive_desc_base& pd) {
  const char* impl = pd.impl_info_str();
  return impl && std::string(impl).find("wino_2x3") != std::string::npos;
}
dnnl_util::Wino2x3 wino_2x3_verdict(const dnnl::primitive_desc_base& pd, const ConvParams& p) {
  if (!is_wino_2x3(pd)) return dnnl_util::Wino2x3::kKeep;
  return dnnl_util::wino_2x3_verdict(double(pd.scratchpad_desc().get_size()), dnnl_util::max_threads(), p.C, p.M,
                                     double(dnnl_util::l2_cache_bytes()));
}

// d with the Winograd algorithm on the activation layout `l`: kPlain, the tensors' own (NchwcConv's
// blocked ones), or kBlocked16 (plain tensors reordered in and out, training).
DnnlConv winograd(DnnlConv d, Layout l = Layout::kPlain) {
  d.winograd = true;
  d.candidates = {l};
  return d;
}

// Workspace carving for the generic paths, which compute in Cm (float for float16 / bfloat16):
// as_compute gives a Cm view of an input (a converted copy only when T is not Cm), out_buffer a Cm
// buffer for an output (the output itself when T is Cm; copy back with from_compute).
template <class Cm>
Cm* carve(size_t n, char*& ws) {
  Cm* p = reinterpret_cast<Cm*>(ws);
  ws += align64(n * sizeof(Cm));
  return p;
}
template <class Cm, class T>
const Cm* as_compute(const T* src, int64_t n, char*& ws) {
  if constexpr (std::is_same_v<T, Cm>) {
    return src;
  } else {
    Cm* dst = carve<Cm>(size_t(n), ws);
    for (int64_t i = 0; i < n; ++i) dst[i] = Cm(src[i]);
    return dst;
  }
}
template <class Cm, class T>
Cm* out_buffer(T* dst, int64_t n, char*& ws) {
  if constexpr (std::is_same_v<T, Cm>) return dst;
  else return carve<Cm>(size_t(n), ws);
}
template <class Cm, class T>
void from_compute(const Cm* src, int64_t n, T* dst) {
  if constexpr (!std::is_same_v<T, Cm>)
    for (int64_t i = 0; i < n; ++i) dst[i] = T(src[i]);
}

// dB[m] = sum_{n,p} dY[n, m, p], accumulated in double.
template <class T>
void bias_grad(const T* dy, int64_t N, int64_t M, int64_t P, T* db) {
  parallel_for(M, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* row = dy + (n * M + m) * P;
        for (int64_t p = 0; p < P; ++p) acc += double(compute_t<T>(row[p]));
      }
      db[m] = T(compute_t<T>(acc));
    }
  });
}

// float16 through oneDNN's float32 kernels: each argument gets a float32 copy in the workspace
// (inputs widened exactly before the primitive runs, outputs rounded back after it).
struct Fp16Stage {
  std::vector<int64_t> numel;  // per argument, in carving order
  size_t bytes() const {
    size_t b = 0;
    for (int64_t n : numel) b += align64(size_t(n) * 4);
    return b;
  }
  /// The float32 buffers of the arguments, carved from `ws`, which then points past them.
  std::vector<float*> carve(char*& ws) const {
    std::vector<float*> r;
    for (int64_t n : numel) {
      r.push_back(reinterpret_cast<float*>(ws));
      ws += align64(size_t(n) * 4);
    }
    return r;
  }
};

// com.microsoft FusedConv's activation (onnxruntime's contrib operator, what the inference
// rewrite of src/runtime/conv_fusion.cpp writes): Y = act(Conv(X, W, B) + Z).
struct FusedActivation : shape::ConvActivation {
  /// The activation as a oneDNN eltwise post-op where it is the same arithmetic as onnxtrain's own
  /// kernel (Relu, LeakyRelu, Clip), and SiLU and HardSwish; false for the others (applied after
  /// the primitive).
  bool post_op(dnnl::post_ops& po) const {
    switch (kind) {
      case Kind::kRelu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f); return true;
      case Kind::kLeakyRelu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, alpha, 0.f); return true;
      case Kind::kClip: po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, alpha, beta); return true;
      // oneDNN's x * sigmoid(x): not onnxtrain's Sigmoid and Mul bit for bit (within float32
      // rounding of exp), but the unfused pair costs two passes over the output (EfficientNet).
      case Kind::kSiLU: po.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f); return true;
      // oneDNN's x * min(max(x + 3, 0), 6) / 6: ONNX's HardSwish within float32 rounding.
      case Kind::kHardSwish: po.append_eltwise(1.f, dnnl::algorithm::eltwise_hardswish, 0.f, 0.f); return true;
      default: return kind == Kind::kNone;
    }
  }
  /// y[i] = act(y[i] + z[i]) (z null: act(y[i])), computed in compute_t<T>.
  template <class T>
  void run(T* y, const T* z, int64_t n) const {
    using Cm = compute_t<T>;
    const Cm a = Cm(alpha), b = Cm(beta);
    switch (kind) {  // one loop per activation, each simple enough to vectorize
      case Kind::kNone: return z ? apply(y, z, n, [](Cm v) { return v; }) : void();
      case Kind::kRelu: return apply(y, z, n, [](Cm v) { return v < Cm(0) ? Cm(0) : v; });
      case Kind::kLeakyRelu: return apply(y, z, n, [a](Cm v) { return v < Cm(0) ? a * v : v; });
      case Kind::kClip: return apply(y, z, n, [a, b](Cm v) { return v < a ? a : v > b ? b : v; });
      case Kind::kSigmoid: return apply(y, z, n, [](Cm v) { return Cm(1) / (Cm(1) + std::exp(-v)); });
      case Kind::kTanh: return apply(y, z, n, [](Cm v) { return std::tanh(v); });
      case Kind::kHardSigmoid:
        return apply(y, z, n, [a, b](Cm v) { return std::max(Cm(0), std::min(Cm(1), a * v + b)); });
      case Kind::kSiLU: return apply(y, z, n, [](Cm v) { return v * (Cm(1) / (Cm(1) + std::exp(-v))); });
      case Kind::kHardSwish:
        return apply(y, z, n, [](Cm v) { return v * std::max(Cm(0), std::min(Cm(1), v * Cm(1.0 / 6.0) + Cm(0.5))); });
    }
  }
  template <class T, class F>
  static void apply(T* y, const T* z, int64_t n, F f) {
    using Cm = compute_t<T>;
    parallel_for(n, 16384, [&](int64_t b, int64_t e) {
      if (z) {
        for (int64_t i = b; i < e; ++i) y[i] = T(f(Cm(y[i]) + Cm(z[i])));
      } else {
        for (int64_t i = b; i < e; ++i) y[i] = T(f(Cm(y[i])));
      }
    });
  }
};

// Conv, ConvTranspose and com.microsoft FusedConv (fused: Conv, then + Z (input 3), then the
// activation; Y overwrites Z in place).
class ConvKernel final : public Kernel {
 public:
  ConvKernel(const KernelInfo& info, bool transposed, bool fused, bool blocked = false)
      : fused_(fused), blocked_(blocked) {
    p_.read(info, transposed);
    if (fused) act_.read(info, blocked);
  }

  void prepare(PrepareContext& ctx) override {
    dt_ = shape::float_inputs(ctx);
    Shape x = ctx.input_shape(0);
    x_blocked_ = false;
    if (blocked_) x = blocked_input(ctx, x);
    p_.resolve(ctx, x, ctx.input_shape(1));
    shape::check_conv_bias(ctx, p_);
    has_bias_ = ctx.has_input(2);
    has_z_ = fused_ && ctx.has_input(3);
    const Shape y = blocked_ ? nchwc::blocked_shape(p_.y) : p_.y;  // the output tensor's shape
    if (has_z_) {
      if (ctx.input_dtype(3) != dt_ || ctx.input_shape(3) != y)
        ctx.fail("Z must be ", dtype_name(dt_), " ", shape_to_string(y), " (the convolution's output), got ",
                 dtype_name(ctx.input_dtype(3)), " ", shape_to_string(ctx.input_shape(3)));
      ctx.set_output_inplace(0, 3);
    } else {
      ctx.set_output(0, dt_, y);
    }
    post_pass_ = fused_;  // until a primitive takes the sum and the activation as post-ops
    // Where the post pass adds Z, a copy of it leads the workspace (the output overwrites Z).
    auto z_bytes = [&] { return z_bytes_ = has_z_ && post_pass_ ? align64(size_t(shape_numel(p_.y)) * dtype_size(dt_)) : 0; };

    op_ = dnnl_util::DnnlOp();
    direct_.reset();
    direct_dw_.reset();
    pointwise_.reset();
    const bool empty = shape_numel(p_.y) == 0 || p_.C == 0 || p_.kk == 0;
    depthwise_ = !blocked_ && dt_ == DType::kFloat32 && !p_.transposed && p_.group > 1 && p_.group == p_.C && p_.g.nd <= 2 &&
                 !empty && p_.kk <= 64;
    if (depthwise_) {
      ctx.request_workspace(z_bytes() + dw_workspace(ctx.options()));
      return;
    }
    DnnlConv d;
    stage_.numel.clear();
    const DType compute = dt_ == DType::kFloat16 ? DType::kFloat32 : dt_;  // float16 staged through float32
    // Constant weights (initializers of an inference plan) are reordered into the primitive's
    // layout once, here, instead of in every run.
    const Tensor* w_const = dt_ == DType::kFloat16 ? nullptr : ctx.constant_weights(1);
    if (blocked_) {
      // The tensors' own layouts are the primitive's: X blocked (or plain), Y blocked. Where oneDNN
      // has no kernel for them (kAny), it reorders from and to them in the workspace.
      if (empty) {
        if (shape_numel(p_.y) != 0) ctx.fail("NchwcConv needs input channels and a non-empty kernel");
        return ctx.request_workspace(z_bytes());
      }
      if (!dnnl_conv(p_, x, compute, &d)) ctx.fail("oneDNN cannot express this convolution in the blocked layout");
      const auto tag = dnnl::memory::format_tag::nChw16c;
      if (x_blocked_) d.x = dnnl::memory::desc(dnnl_util::dims(x), d.dt, tag);
      d.y = dnnl::memory::desc(dnnl_util::dims(p_.y), d.dt, tag);
      if (make_pointwise(w_const, ctx.options().num_threads)) return ctx.request_workspace(0);
      DnnlConv wd = winograd(d);
      wd.may_decline = ctx.options().winograd != ExecOptions::Winograd::kAlways;
      if (winograd_fits(p_, x_blocked_, w_const, ctx.options()) && make_dnnl(wd, w_const))
        return ctx.request_workspace(z_bytes() + op_.workspace_bytes());
      if (make_direct(x, w_const, ctx.options().num_threads)) return ctx.request_workspace(direct_workspace());
      d.candidates = {Layout::kPlain, Layout::kAny};
      if (!make_dnnl(d, w_const)) ctx.fail("oneDNN has no convolution kernel for the blocked layout");
      return ctx.request_workspace(z_bytes() + op_.workspace_bytes());
    }
    const bool dnnl = !empty && dnnl_conv(p_, x, compute, &d);
    const bool wino = dnnl && !w_const && train_winograd_fits(p_, dt_, ctx.options());
    if (dnnl && ((wino && make_dnnl(winograd(d, Layout::kBlocked16), w_const)) || make_dnnl(d, w_const))) {
      if (dt_ == DType::kFloat16)
        stage_.numel = {shape_numel(x), shape_numel(ctx.input_shape(1)), has_bias_ ? p_.M : 0, shape_numel(p_.y)};
      ctx.request_workspace(z_bytes() + stage_.bytes() + op_.workspace_bytes());
      return;
    }
    ctx.request_workspace(z_bytes() + generic_workspace());
  }

  void run(RunContext& ctx) override {
    if (ctx.output(0).numel() == 0) return;
    const void* bias = has_bias_ ? ctx.input(2).raw_data() : nullptr;
    // Paths without the post-ops: Z saved first (the output overwrites it), added after.
    char* ws = static_cast<char*>(ctx.workspace());
    const void* z = nullptr;
    if (has_z_ && post_pass_) {
      std::memcpy(ws, ctx.input(3).raw_data(), ctx.input(3).nbytes());
      z = ws;
      ws += z_bytes_;
    } else if (has_z_ && !ctx.output_aliases_input(0, 3)) {  // the sum post-op reads Z from the output
      std::memcpy(ctx.output(0).raw_data(), ctx.input(3).raw_data(), ctx.input(3).nbytes());
    }
    if (depthwise_) {
      run_depthwise(ctx.input(0).data<float>(), ctx.input(1).data<float>(), static_cast<const float*>(bias),
                    ctx.output(0).data<float>(), ws, ctx.options());
    } else {
      run_conv(ctx, bias, ws);
    }
    if (post_pass_)
      dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {
        act_.run(ctx.output(0).data<T>(), static_cast<const T*>(z), ctx.output(0).numel());
      });
  }

 private:
  // NchwcConv's X: 2-D, float32, [N, ceil(C/16), H, W, 16] (or plain [N, C, H, W]) with C from W;
  // returns the plain shape it stands for.
  Shape blocked_input(const PrepareContext& ctx, const Shape& x) {
    const Shape& w = ctx.input_shape(1);
    if (dt_ != DType::kFloat32 || p_.transposed || w.size() != 4)
      ctx.fail("NchwcConv runs float32 2-D convolutions (W [M, C/group, kH, kW]), got ", dtype_name(dt_), " W ",
               shape_to_string(w));
    if (x.size() == 4) return x;
    const int64_t C = w[1] * p_.group;
    if (x.size() != 5 || x[1] != nchwc::blocks(C) || x[4] != nchwc::kBlock)
      ctx.fail("X must be [N, ", nchwc::blocks(C), ", H, W, ", nchwc::kBlock, "] (", C, " channels blocked), got ",
               shape_to_string(x));
    x_blocked_ = true;
    return {x[0], C, x[2], x[3]};
  }

  // The fused activation as the kernels' own (nchwc512::Act, also amx::Pointwise's); false where
  // they have no such kind.
  bool kernel_act(nchwc512::Act& act) const {
    using nchwc512::Act;
    switch (act_.kind) {
      case FusedActivation::Kind::kNone: act = Act::kNone; return true;
      case FusedActivation::Kind::kRelu: act = Act::kRelu; return true;
      case FusedActivation::Kind::kLeakyRelu: act = Act::kLeakyRelu; return true;
      case FusedActivation::Kind::kClip: act = Act::kClip; return true;
      case FusedActivation::Kind::kHardSwish: act = Act::kHardSwish; return true;
      case FusedActivation::Kind::kSiLU: act = Act::kSiLU; return true;
      default: return false;
    }
  }

  // NchwcConv on nchwc_direct.h's kernels (X blocked or plain): one group, constant weights, an
  // activation they apply (the others stay oneDNN post-ops); false where they do not run it.
  // Depthwise ones (group = C = M, X blocked, no Z) on its depthwise kernels.
  bool make_direct(const Shape& x, const Tensor* w, int threads) {
    const bool depthwise = p_.group > 1 && p_.group == p_.C && p_.M == p_.C && x_blocked_ && !has_z_;
    // 1x1 convolutions stay oneDNN's: its kernels ran MobileNet-v2's, SqueezeNet's and DenseNet's
    // 1x1 layers as fast or faster (memory-bound ones above all); not with SiLU, where oneDNN's
    // swish post-op made EfficientNet-B0's 1x1 expansions 7 % slower than these kernels (batch 8).
    const bool pointwise = p_.g.nd == 2 && p_.g.kernel[0] * p_.g.kernel[1] == 1;
    if (!w || (p_.group != 1 && !depthwise) || p_.g.nd != 2 || (pointwise && act_.kind != FusedActivation::Kind::kSiLU))
      return false;
    nchwc512::Act act;
    if (!kernel_act(act)) return false;
    const WindowGeom& g = p_.g;
    NchwcDirectConv::Geometry dg;
    dg.N = p_.N, dg.C = p_.C, dg.M = p_.M;
    dg.IH = g.in[0], dg.IW = g.in[1], dg.OH = g.out[0], dg.OW = g.out[1], dg.KH = g.kernel[0], dg.KW = g.kernel[1];
    dg.sh = g.stride[0], dg.sw = g.stride[1], dg.dh = g.dilation[0], dg.dw = g.dilation[1];
    dg.ph = g.pad_b[0], dg.pw = g.pad_b[1];
    dg.plain = !x_blocked_;
    if (depthwise) {
      if (!NchwcDepthwiseConv::supports(dg, act, act_.alpha, act_.beta)) return false;
      direct_dw_ = std::make_unique<NchwcDepthwiseConv>(dg, w->data<float>(), act, act_.alpha, act_.beta, threads);
    } else {
      if (!NchwcDirectConv::supports(dg, act, act_.alpha, act_.beta)) return false;
      direct_ = std::make_unique<NchwcDirectConv>(dg, w->data<float>(), act, act_.alpha, act_.beta, has_z_, threads);
    }
    post_pass_ = false;
    return true;
  }
  // NchwcConv's 1x1 convolutions (no pads, one group, constant float32 weights, X blocked; any
  // stride) on the AMX tiles (amx::Pointwise) where that pays; false otherwise.
  bool make_pointwise(const Tensor* w, int threads) {
    const WindowGeom& g = p_.g;
    if (!w || dt_ != DType::kFloat32 || !x_blocked_ || p_.transposed || p_.group != 1 || g.nd != 2) return false;
    for (size_t i = 0; i < 2; ++i)
      if (g.kernel[i] != 1 || g.pad_b[i] != 0 || g.pad_e[i] != 0) return false;
    nchwc512::Act act;
    if (!kernel_act(act)) return false;  // Pointwise::make refuses HardSwish and SiLU
    const int64_t pixels = g.out[0] * g.out[1];
    if (!amx::Pointwise::pays(pixels, p_.C, p_.M, thread_budget(threads))) return false;
    pointwise_ = amx::Pointwise::make(p_.C, p_.M, w->data<float>(), act, act_.alpha, act_.beta, has_z_);
    if (!pointwise_) return false;
    post_pass_ = false;
    return true;
  }

  size_t direct_workspace() const { return direct_ ? direct_->workspace_bytes() : direct_dw_->workspace_bytes(); }

  void run_conv(RunContext& ctx, const void* bias, char* ws) {
    if (pointwise_) {
      const amx::Pointwise::Geometry g{p_.g.in[0], p_.g.in[1], p_.g.out[0], p_.g.out[1], p_.g.stride[0], p_.g.stride[1]};
      pointwise_->run(ctx.input(0).data<float>(), p_.N, g, static_cast<const float*>(bias), ctx.output(0).data<float>());
      return;
    }
    if (direct_ || direct_dw_) {
      const float* x = ctx.input(0).data<float>();
      float* y = ctx.output(0).data<float>();
      if (direct_) direct_->run(x, static_cast<const float*>(bias), y, ws);
      else direct_dw_->run(x, static_cast<const float*>(bias), y, ws);
      return;
    }
    if (op_.valid()) {
      const void *x = ctx.input(0).raw_data(), *w = ctx.input(1).raw_data();
      void* y = ctx.output(0).raw_data();
      std::vector<float*> f32;
      if (!stage_.numel.empty()) {  // float16: widened copies, a float32 output
        f32 = stage_.carve(ws);
        if (has_z_ && !post_pass_) ew::widen_all(ctx.input(3).data<float16>(), f32[3], stage_.numel[3]);
        ew::widen_all(static_cast<const float16*>(x), f32[0], stage_.numel[0]);
        ew::widen_all(static_cast<const float16*>(w), f32[1], stage_.numel[1]);
        if (bias) ew::widen_all(static_cast<const float16*>(bias), f32[2], stage_.numel[2]);
        x = f32[0], w = f32[1], bias = bias ? f32[2] : nullptr, y = f32[3];
      }
      op_.bind(DNNL_ARG_SRC, x);
      op_.bind(DNNL_ARG_WEIGHTS, w);
      if (bias) op_.bind(DNNL_ARG_BIAS, bias);
      op_.bind(DNNL_ARG_DST, y);
      op_.execute(ws, CpuContext::of(ctx).stream());
      if (!f32.empty()) ew::narrow_all(f32[3], ctx.output(0).data<float16>(), stage_.numel[3]);
      return;
    }
    dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {
      run_generic<T>(ctx.input(0).data<T>(), ctx.input(1).data<T>(), static_cast<const T*>(bias), ctx.output(0).data<T>(),
                     ws);
    });
  }

  // ------------------------------------------------------------ oneDNN (float32)
  // `w_const`: the weights when known now (reordered once), else null.
  // FusedConv: + Z as a sum post-op (the output holds Z when the primitive starts), then the
  // activation as an eltwise post-op when it is one; else, or where oneDNN picks its gemm-based
  // kernel (whose post-ops ran 4x slower than the convolution itself: SqueezeNet's plain-layout
  // 1x1 convolutions), the post pass applies them.
  bool make_dnnl(const DnnlConv& d, const Tensor* w_const) {
    dnnl::post_ops po;
    if (has_z_) po.append_sum(1.f);
    bool gemm = false;
    if (fused_ && act_.post_op(po) && make_dnnl(d, w_const, &po, &gemm)) {
      post_pass_ = false;
      return true;
    }
    return make_dnnl(d, w_const, nullptr, nullptr);
  }
  // With post-ops `po` (null: none); refused, with *gemm set, where the kernel would be gemm-based.
  bool make_dnnl(const DnnlConv& d, const Tensor* w_const, const dnnl::post_ops* po, bool* gemm) {
    auto attr = dnnl_util::default_attr();
    if (po) attr.set_post_ops(*po);
    auto& eng = dnnl_util::cpu_engine();
    const dnnl::memory::desc bias = has_bias_ ? d.b : dnnl::memory::desc();
    return first_layout(d, op_, [&](Layout l) {
      if (gemm && *gemm) return false;  // not another layout: the one oneDNN picked, without post-ops
      auto create = [&]<class P>() {
        // Winograd over weights that change between runs: forward_training, whose kernel transforms
        // the weights itself (forward_inference wants them pre-transformed, a reorder every run).
        const auto prop = d.winograd && !w_const ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
        typename P::desc desc(prop, d.alg(p_.transposed), d.ax(l), d.aw(), bias, d.ay(l), d.strides, d.dil, d.pl, d.pr);
        typename P::primitive_desc pd(desc, attr, eng);
        if (d.winograd) switch (wino_2x3_verdict(pd, p_)) {
            case dnnl_util::Wino2x3::kKeep:
              break;
            case dnnl_util::Wino2x3::kDirect:
              if (d.may_decline) return false;
              break;
            case dnnl_util::Wino2x3::kNextImpl:
              while (is_wino_2x3(pd))
                if (!pd.next_impl()) return false;
              break;
          }
        if (dnnl_util::is_reference(pd)) return false;
        if (po && std::string(pd.impl_info_str()).find("gemm") != std::string::npos) return !(*gemm = true);
        op_.init(P(pd), pd.scratchpad_desc());
        op_.add_arg(DNNL_ARG_SRC, d.x, pd.src_desc(), false);
        if (w_const) op_.add_const_arg(DNNL_ARG_WEIGHTS, d.w, pd.weights_desc(), w_const->raw_data());
        else op_.add_arg(DNNL_ARG_WEIGHTS, d.w, pd.weights_desc(), false);
        if (has_bias_) op_.add_arg(DNNL_ARG_BIAS, d.b, d.b, false);
        op_.add_arg(DNNL_ARG_DST, d.y, pd.dst_desc(), true, has_z_ && po);
        return true;
      };
      return p_.transposed ? create.template operator()<dnnl::deconvolution_forward>()
                           : create.template operator()<dnnl::convolution_forward>();
    });
  }

  // ------------------------------------------------------------ depthwise (float32, 1-D/2-D)
  // One input channel per group: each output plane is a small stencil over one input plane. The
  // plane is copied once into a zero-padded buffer (per thread, in the workspace) so that the
  // stencil runs without bounds checks, 16 outputs at a time held in registers.
  static constexpr int64_t kDwBlock = 16;
  struct DwGeom {
    int64_t IH, IW, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw, PH, PW;  // PH x PW: padded plane
  };
  DwGeom dw_geom() const {
    const bool two = p_.g.nd == 2;
    DwGeom d{};
    d.IH = two ? p_.g.in[0] : 1, d.IW = p_.g.in.back(), d.OH = two ? p_.g.out[0] : 1, d.OW = p_.g.out.back();
    d.KH = two ? p_.g.kernel[0] : 1, d.KW = p_.g.kernel.back();
    d.sh = two ? p_.g.stride[0] : 1, d.sw = p_.g.stride.back(), d.dh = two ? p_.g.dilation[0] : 1, d.dw = p_.g.dilation.back();
    d.ph = two ? p_.g.pad_b[0] : 0, d.pw = p_.g.pad_b.back();
    d.PH = (d.OH - 1) * d.sh + (d.KH - 1) * d.dh + 1;
    // Row width covering whole blocks of outputs.
    const int64_t ow_blocks = (d.OW + kDwBlock - 1) / kDwBlock * kDwBlock;
    d.PW = (ow_blocks - 1) * d.sw + (d.KW - 1) * d.dw + 1;
    return d;
  }
  static int dw_slots(const ExecOptions& o) { return std::max(hardware_threads(), o.num_threads); }
  size_t dw_workspace(const ExecOptions& o) const {
    const DwGeom d = dw_geom();
    return size_t(dw_slots(o)) * align64(size_t(d.PH * d.PW) * sizeof(float));
  }

  void run_depthwise(const float* X, const float* W, const float* B, float* Y, char* ws, const ExecOptions& o) const {
    const DwGeom d = dw_geom();
    const int64_t mult = p_.M / p_.group, taps = d.KH * d.KW;
    const size_t slot_bytes = align64(size_t(d.PH * d.PW) * sizeof(float));
    const int slots = dw_slots(o);
    parallel_for(p_.N * p_.C, 1, [&](int64_t p0, int64_t p1) {
      const int t = omp_get_thread_num();
      std::vector<float> own;  // only when run with more threads than prepared for
      if (t >= slots) own.resize(size_t(d.PH * d.PW));
      float* pad = t < slots ? reinterpret_cast<float*>(ws + size_t(t) * slot_bytes) : own.data();
      int64_t off[64];
      for (int64_t kh = 0, i = 0; kh < d.KH; ++kh)
        for (int64_t kw = 0; kw < d.KW; ++kw, ++i) off[i] = kh * d.dh * d.PW + kw * d.dw;
      for (int64_t p = p0; p < p1; ++p) {
        // Zero-padded copy of input plane p: padded (r, c) holds X(r - ph, c - pw).
        const float* x = X + p * d.IH * d.IW;
        std::fill(pad, pad + d.PH * d.PW, 0.f);
        for (int64_t r = 0; r < d.PH; ++r) {
          const int64_t ih = r - d.ph;
          if (ih < 0 || ih >= d.IH) continue;
          const int64_t c0 = std::max<int64_t>(0, d.pw), c1 = std::min(d.PW, d.IW + d.pw);
          if (c1 > c0) std::copy(x + ih * d.IW + (c0 - d.pw), x + ih * d.IW + (c1 - d.pw), pad + r * d.PW + c0);
        }
        const int64_t n = p / p_.C, c = p % p_.C;
        for (int64_t j = 0; j < mult; ++j) {
          const int64_t m = c * mult + j;
          const float* w = W + m * taps;
          const float b = B ? B[m] : 0.f;
          float* y = Y + (n * p_.M + m) * d.OH * d.OW;
          for (int64_t oh = 0; oh < d.OH; ++oh) {
            const float* row = pad + oh * d.sh * d.PW;
            for (int64_t ow = 0; ow < d.OW; ow += kDwBlock) {
              alignas(32) float acc[kDwBlock];
              const float* base = row + ow * d.sw;
              if (d.sw == 1) {
                v8f a0 = v8f{} + b, a1 = v8f{} + b;
                for (int64_t tp = 0; tp < taps; ++tp) {
                  const float* r = base + off[tp];
                  a0 += w[tp] * *reinterpret_cast<const v8f*>(r);
                  a1 += w[tp] * *reinterpret_cast<const v8f*>(r + 8);
                }
                if (ow + kDwBlock <= d.OW) {
                  *reinterpret_cast<v8f*>(y + oh * d.OW + ow) = a0;
                  *reinterpret_cast<v8f*>(y + oh * d.OW + ow + 8) = a1;
                  continue;
                }
                *reinterpret_cast<v8f*>(acc) = a0;
                *reinterpret_cast<v8f*>(acc + 8) = a1;
              } else {
                for (int64_t l = 0; l < kDwBlock; ++l) acc[l] = b;
                for (int64_t tp = 0; tp < taps; ++tp) {
                  const float* r = base + off[tp];
                  for (int64_t l = 0; l < kDwBlock; ++l) acc[l] += w[tp] * r[l * d.sw];
                }
              }
              const int64_t n_out = std::min(kDwBlock, d.OW - ow);
              for (int64_t l = 0; l < n_out; ++l) y[oh * d.OW + ow + l] = acc[l];
            }
          }
        }
      }
    });
  }


  // ------------------------------------------------------------ im2col / col2im + gemm
  // Workspace: the column matrix of one (image, group), plus compute-type copies of W and of one
  // image of X and Y for float16/bfloat16 (computing in float32).
  size_t generic_workspace() const {
    const size_t cs = dt_ == DType::kFloat64 ? 8 : 4;
    size_t bytes = align64(p_.view.col_elems() * cs);
    if (dt_ == DType::kFloat16 || dt_ == DType::kBFloat16)
      bytes += align64(size_t(p_.C * p_.pin) * cs) + align64(size_t(p_.C * (p_.M / p_.group) * p_.kk) * cs) +
               align64(size_t(p_.M * p_.pout) * cs);
    return bytes;
  }

  template <class T>
  void run_generic(const T* X, const T* W, const T* B, T* Y, char* ws) {
    using Cm = compute_t<T>;  // float or double
    constexpr bool convert = !std::is_same_v<T, Cm>;
    const int64_t xn = p_.C * p_.pin, yn = p_.M * p_.pout;
    Cm* col = carve<Cm>(p_.view.col_elems(), ws);
    const Cm* Wm = as_compute<Cm>(W, p_.C * (p_.M / p_.group) * p_.kk, ws);
    for (int64_t n = 0; n < p_.N; ++n) {
      char* img = ws;
      const Cm* x = as_compute<Cm>(X + n * xn, xn, img);
      Cm* y = out_buffer<Cm>(Y + n * yn, yn, img);
      if (p_.transposed) p_.view.backward_data(x, Wm, y, col);
      else p_.view.forward(x, Wm, y, col);
      T* yt = Y + n * yn;
      parallel_for(p_.M, std::max<int64_t>(1, 16384 / std::max<int64_t>(p_.pout, 1)), [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) {
          const Cm b = B ? Cm(B[m]) : Cm(0);
          if constexpr (convert) {
            for (int64_t p = 0; p < p_.pout; ++p) yt[m * p_.pout + p] = T(y[m * p_.pout + p] + b);
          } else if (B) {
            for (int64_t p = 0; p < p_.pout; ++p) yt[m * p_.pout + p] += b;
          }
        }
      });
    }
  }

  ConvParams p_;
  DType dt_ = DType::kFloat32;
  bool has_bias_ = false, depthwise_ = false;
  bool fused_ = false, has_z_ = false;  // FusedConv; with Z (input 3)
  bool blocked_ = false, x_blocked_ = false;  // NchwcConv; its X blocked (else plain)
  bool post_pass_ = false;              // FusedConv's sum and activation run after the convolution
  size_t z_bytes_ = 0;                  // workspace for a copy of Z (paths without post-ops)
  FusedActivation act_;
  dnnl_util::DnnlOp op_;
  std::unique_ptr<amx::Pointwise> pointwise_;   // NchwcConv's 1x1 convolutions on the AMX tiles
  std::unique_ptr<NchwcDirectConv> direct_;       // NchwcConv on the direct AVX-512 kernels
  std::unique_ptr<NchwcDepthwiseConv> direct_dw_;  // depthwise NchwcConv on them
  Fp16Stage stage_;  // float16 run through the float32 primitive (empty otherwise)
};

// ------------------------------------------------------------ gradients
// com.onnxtrain.ConvGrad / ConvTransposeGrad (dY, X, W) -> dX, dW, dB (see the top of the file).
// float32: oneDNN backward_data and backward_weights primitives (the latter also produces dB),
// created in prepare() with a forward_training hint; they run one after the other in one workspace.
// Otherwise the direct view's im2col / col2im routines: Conv's dX is the view's backward data and
// dW its backward weights; ConvTranspose's dX is the view's forward (of dY) and dW the view's
// backward weights with X and dY swapping roles.
class ConvGradKernel final : public Kernel {
 public:
  ConvGradKernel(const KernelInfo& info, bool transposed) { p_.read(info, transposed); }

  void prepare(PrepareContext& ctx) override {
    dt_ = shape::prepare_conv_grad(ctx, p_, want_);  // ConvParams::resolve
    const Shape& x = ctx.input_shape(1);
    data_op_ = dnnl_util::DnnlOp();
    weights_op_ = dnnl_util::DnnlOp();
    empty_ = shape_numel(p_.y) == 0 || shape_numel(x) == 0 || p_.kk == 0;
    DnnlConv d;
    const DType compute = dt_ == DType::kFloat16 ? DType::kFloat32 : dt_;  // float16 staged through float32
    if (!empty_ && dnnl_conv(p_, x, compute, &d)) {
      // Winograd (train_winograd_fits) for both passes or for neither. The forward Conv makes the
      // same choice where its weights are not constants (trained ones); a frozen, constant W keeps
      // the forward's direct kernel over its prepacked weights while dX here may take Winograd.
      if (train_winograd_fits(p_, dt_, ctx.options())) {
        const DnnlConv wd = winograd(d, Layout::kBlocked16);
        if ((!want_[0] || make_data(wd)) && (!want_[1] || make_weights(wd, want_[2]))) d = wd;
        else data_op_ = dnnl_util::DnnlOp(), weights_op_ = dnnl_util::DnnlOp();
      }
      if (want_[0] && !data_op_.valid()) make_data(d);
      if (want_[1] && !weights_op_.valid()) make_weights(d, want_[2]);
    }
    share_dy(d);
    const bool all_dnnl = (!want_[0] || data_op_.valid()) && (!want_[1] || weights_op_.valid());
    stage_.numel.clear();
    if (dt_ == DType::kFloat16 && all_dnnl && !empty_)  // dY, X, W, dX, dW, dB
      stage_.numel = {shape_numel(p_.y), shape_numel(x), shape_numel(ctx.input_shape(2)), want_[0] ? shape_numel(x) : 0,
                      want_[1] ? shape_numel(ctx.input_shape(2)) : 0, want_[2] ? p_.M : 0};
    if (dt_ == DType::kFloat16 && !all_dnnl) data_op_ = dnnl_util::DnnlOp(), weights_op_ = dnnl_util::DnnlOp();
    if (!data_op_.valid() || !weights_op_.valid()) dy_reorder_ = dnnl_util::DnnlOp(), dy_bytes_ = 0;
    size_t ws = std::max(data_op_.workspace_bytes(), weights_op_.workspace_bytes()) + stage_.bytes() + dy_bytes_;
    if ((want_[0] && !data_op_.valid()) || (want_[1] && !weights_op_.valid())) ws = std::max(ws, generic_workspace());
    ctx.request_workspace(ws);
  }

  void run(RunContext& ctx) override {
    const Tensor &dY = ctx.input(0), &X = ctx.input(1), &W = ctx.input(2);
    Tensor* out[3];
    for (size_t i = 0; i < 3; ++i) out[i] = want_[i] ? &ctx.output(i) : nullptr;
    if (empty_) {
      for (Tensor* t : out)
        if (t) std::memset(t->raw_data(), 0, t->nbytes());
      return;
    }
    // Arguments as the primitives see them: the tensors, or (float16) their float32 stage.
    const void *dy = dY.raw_data(), *x = X.raw_data(), *w = W.raw_data();
    void* o[3] = {out[0] ? out[0]->raw_data() : nullptr, out[1] ? out[1]->raw_data() : nullptr,
                  out[2] ? out[2]->raw_data() : nullptr};
    char* ws = static_cast<char*>(ctx.workspace());
    std::vector<float*> f32;
    if (!stage_.numel.empty()) {
      f32 = stage_.carve(ws);
      ew::widen_all(dY.data<float16>(), f32[0], stage_.numel[0]);
      if (out[1]) ew::widen_all(X.data<float16>(), f32[1], stage_.numel[1]);
      if (out[0]) ew::widen_all(W.data<float16>(), f32[2], stage_.numel[2]);
      dy = f32[0], x = f32[1], w = f32[2];
      for (size_t i = 0; i < 3; ++i)
        if (o[i]) o[i] = f32[3 + i];
    }
    if (dy_reorder_.valid()) {  // dY in the primitives' layout once, for both
      char* blocked = ws;
      ws += dy_bytes_;
      dy_reorder_.bind(DNNL_ARG_FROM, dy);
      dy_reorder_.bind(DNNL_ARG_TO, blocked);
      dy_reorder_.execute(ws, CpuContext::of(ctx).stream());
      data_op_.bind_prim(DNNL_ARG_DIFF_DST, blocked);
      weights_op_.bind_prim(DNNL_ARG_DIFF_DST, blocked);
    }
    if (out[0] && data_op_.valid()) {
      data_op_.bind(DNNL_ARG_DIFF_DST, dy);
      data_op_.bind(DNNL_ARG_WEIGHTS, w);
      data_op_.bind(DNNL_ARG_DIFF_SRC, o[0]);
      data_op_.execute(ws, CpuContext::of(ctx).stream());
    }
    if (out[1] && weights_op_.valid()) {
      weights_op_.bind(DNNL_ARG_SRC, x);
      weights_op_.bind(DNNL_ARG_DIFF_DST, dy);
      weights_op_.bind(DNNL_ARG_DIFF_WEIGHTS, o[1]);
      if (out[2]) weights_op_.bind(DNNL_ARG_DIFF_BIAS, o[2]);
      weights_op_.execute(ws, CpuContext::of(ctx).stream());
    }
    for (size_t i = 0; i < 3 && !f32.empty(); ++i)
      if (out[i]) ew::narrow_all(f32[3 + i], out[i]->data<float16>(), stage_.numel[3 + i]);
    if (out[0] && data_op_.valid()) out[0] = nullptr;
    if (out[1] && weights_op_.valid()) out[1] = out[2] = nullptr;
    if (!out[0] && !out[1] && !out[2]) return;
    dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {
      auto ptr = [](Tensor* t) { return t ? t->data<T>() : nullptr; };
      run_generic<T>(dY.data<T>(), X.data<T>(), W.data<T>(), ptr(out[0]), ptr(out[1]), ptr(out[2]),
                     static_cast<char*>(ctx.workspace()));
    });
  }

 private:
  // The forward_training primitive descriptor that hints the backward ones.
  template <class F>
  typename F::primitive_desc hint(const DnnlConv& d, Layout l, bool bias) const {
    typename F::desc fd(dnnl::prop_kind::forward_training, d.alg(p_.transposed), d.ax(l), d.aw(),
                        bias ? d.b : dnnl::memory::desc(), d.ay(l), d.strides, d.dil, d.pl, d.pr);
    return typename F::primitive_desc(fd, dnnl_util::cpu_engine());
  }

  // Where both primitives read dY in the same non-plain layout, one reorder (into the workspace,
  // before the primitives' own parts) serves both: ResNet-18's blocked 3x3 gradients reordered
  // each dY twice.
  void share_dy(const DnnlConv& d) {
    dy_reorder_ = dnnl_util::DnnlOp();
    dy_bytes_ = 0;
    if (!data_op_.valid() || !weights_op_.valid()) return;
    const dnnl::memory::desc md = data_op_.prim_desc(DNNL_ARG_DIFF_DST);
    if (md == d.y || md != weights_op_.prim_desc(DNNL_ARG_DIFF_DST)) return;
    auto& eng = dnnl_util::cpu_engine();
    dy_reorder_.init(dnnl::reorder(dnnl::memory(d.y, eng, DNNL_MEMORY_NONE), dnnl::memory(md, eng, DNNL_MEMORY_NONE)),
                     dnnl::memory::desc());
    dy_reorder_.add_arg(DNNL_ARG_FROM, d.y, d.y, false);
    dy_reorder_.add_arg(DNNL_ARG_TO, md, md, true);
    dy_bytes_ = align64(md.get_size());
  }

  bool make_data(const DnnlConv& d) {
    return first_layout(d, data_op_, [&](Layout l) {
      auto create = [&]<class F, class B>() {
        typename B::desc bd(d.alg(p_.transposed), d.ax(l), d.aw(), d.ay(l), d.strides, d.dil, d.pl, d.pr);
        typename B::primitive_desc pd(bd, dnnl_util::default_attr(), dnnl_util::cpu_engine(), hint<F>(d, l, false));
        if (dnnl_util::is_reference(pd)) return false;
        data_op_.init(B(pd), pd.scratchpad_desc());
        data_op_.add_arg(DNNL_ARG_DIFF_DST, d.y, pd.diff_dst_desc(), false);
        data_op_.add_arg(DNNL_ARG_WEIGHTS, d.w, pd.weights_desc(), false);
        data_op_.add_arg(DNNL_ARG_DIFF_SRC, d.x, pd.diff_src_desc(), true);
        return true;
      };
      return p_.transposed
                 ? create.template operator()<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data>()
                 : create.template operator()<dnnl::convolution_forward, dnnl::convolution_backward_data>();
    });
  }

  bool make_weights(const DnnlConv& d, bool bias) {
    return first_layout(d, weights_op_, [&](Layout l) {
      auto create = [&]<class F, class B>() {
        typename B::desc bd(d.alg(p_.transposed), d.ax(l), d.aw(), bias ? d.b : dnnl::memory::desc(), d.ay(l),
                            d.strides, d.dil, d.pl, d.pr);
        typename B::primitive_desc pd(bd, dnnl_util::default_attr(), dnnl_util::cpu_engine(), hint<F>(d, l, bias));
        if (dnnl_util::is_reference(pd)) return false;
        weights_op_.init(B(pd), pd.scratchpad_desc());
        // One input channel per group: oneDNN's weight gradient ran 3x slower on 2 threads than on
        // one ([64, 1, 28, 28] with 16 3x3 filters: 4.0 ms against 1.35 ms), so it keeps to one.
        weights_op_.set_single_threaded(p_.C / p_.group == 1);
        weights_op_.add_arg(DNNL_ARG_SRC, d.x, pd.src_desc(), false);
        weights_op_.add_arg(DNNL_ARG_DIFF_DST, d.y, pd.diff_dst_desc(), false);
        weights_op_.add_arg(DNNL_ARG_DIFF_WEIGHTS, d.w, pd.diff_weights_desc(), true);
        if (bias) weights_op_.add_arg(DNNL_ARG_DIFF_BIAS, d.b, pd.diff_bias_desc(), true);
        return true;
      };
      return p_.transposed
                 ? create.template operator()<dnnl::deconvolution_forward, dnnl::deconvolution_backward_weights>()
                 : create.template operator()<dnnl::convolution_forward, dnnl::convolution_backward_weights>();
    });
  }

  // Workspace: the column matrix, plus compute-type copies of dY, X, W, dX and dW (float16/bfloat16).
  size_t generic_workspace() const {
    const size_t cs = dt_ == DType::kFloat64 ? 8 : 4;
    size_t bytes = align64(p_.view.col_elems() * cs);
    if (dt_ == DType::kFloat16 || dt_ == DType::kBFloat16) {
      const size_t xn = size_t(p_.N * p_.C * p_.pin), yn = size_t(p_.N * p_.M * p_.pout),
                   wn = size_t(p_.C * (p_.M / p_.group) * p_.kk);
      bytes += align64(yn * cs) + 2 * align64(xn * cs) + 2 * align64(wn * cs);
    }
    return bytes;
  }

  // Null outputs are not computed.
  template <class T>
  void run_generic(const T* dY, const T* X, const T* W, T* dX, T* dW, T* dB, char* ws) {
    using Cm = compute_t<T>;
    const ConvView& v = p_.view;
    const int64_t xn = p_.C * p_.pin, yn = p_.M * p_.pout, wn = p_.C * (p_.M / p_.group) * p_.kk, N = p_.N;
    Cm* col = carve<Cm>(v.col_elems(), ws);
    const Cm* dy = as_compute<Cm>(dY, N * yn, ws);
    const Cm* x = dW ? as_compute<Cm>(X, N * xn, ws) : nullptr;
    const Cm* w = dX ? as_compute<Cm>(W, wn, ws) : nullptr;
    Cm* dx = dX ? out_buffer<Cm>(dX, N * xn, ws) : nullptr;
    Cm* dw = dW ? out_buffer<Cm>(dW, wn, ws) : nullptr;
    for (int64_t n = 0; n < N; ++n) {
      const Cm* dyn = dy + n * yn;
      if (dx) {
        if (p_.transposed) v.forward(dyn, w, dx + n * xn, col);
        else v.backward_data(dyn, w, dx + n * xn, col);
      }
      if (dw) {
        if (p_.transposed) v.backward_weights(dyn, x + n * xn, dw, col, n > 0);
        else v.backward_weights(x + n * xn, dyn, dw, col, n > 0);
      }
    }
    if (dx) from_compute(dx, N * xn, dX);
    if (dw) from_compute(dw, wn, dW);
    if (dB) bias_grad(dY, N, p_.M, p_.pout, dB);
  }

  ConvParams p_;
  DType dt_ = DType::kFloat32;
  bool want_[3] = {false, false, false};
  bool empty_ = false;
  dnnl_util::DnnlOp data_op_, weights_op_;
  dnnl_util::DnnlOp dy_reorder_;  // share_dy's reorder of dY (invalid: each primitive reorders its own)
  size_t dy_bytes_ = 0;           // its workspace buffer
  Fp16Stage stage_;  // float16 run through the float32 primitives: dY, X, W, dX, dW, dB (empty otherwise)
};

// ------------------------------------------------------------ blocked layout boundaries
// com.onnxtrain ReorderToNchwc / ReorderFromNchwc (see the top of the file), float32.
class NchwcReorderKernel final : public Kernel {
 public:
  NchwcReorderKernel(const KernelInfo& info, bool to_blocked) : to_(to_blocked) {
    if (!to_) {
      channels_ = info.attr_int("channels", -1);
      if (channels_ < 0) info.fail("ReorderFromNchwc needs attribute channels >= 0");
    }
  }
  void prepare(PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    if (ctx.input_dtype(0) != DType::kFloat32) ctx.fail("float32 only, got ", dtype_name(ctx.input_dtype(0)));
    if (to_) {
      if (x.size() != 4) ctx.fail("X must be [N, C, H, W], got ", shape_to_string(x));
      plain_ = x;
      return ctx.set_output(0, DType::kFloat32, nchwc::blocked_shape(x));
    }
    if (x.size() != 5 || x[1] != nchwc::blocks(channels_) || x[4] != nchwc::kBlock)
      ctx.fail("X must be [N, ", nchwc::blocks(channels_), ", H, W, ", nchwc::kBlock, "] for ", channels_,
               " channels, got ", shape_to_string(x));
    plain_ = {x[0], channels_, x[2], x[3]};
    ctx.set_output(0, DType::kFloat32, plain_);
  }
  void run(RunContext& ctx) override {
    const int64_t N = plain_[0], C = plain_[1], HW = plain_[2] * plain_[3];
    if (to_) nchwc::to_blocked(ctx.input(0).data<float>(), ctx.output(0).data<float>(), N, C, HW);
    else nchwc::from_blocked(ctx.input(0).data<float>(), ctx.output(0).data<float>(), N, C, HW);
  }

 private:
  bool to_;
  int64_t channels_ = 0;
  Shape plain_;
};

// ------------------------------------------------------------ Col2Im (ai.onnx 18)
// X[N, C * prod(block), L] -> Y[N, C, image...]: each column l of block position k adds to the image
// at its window position (torch.nn.functional.fold), as ConvView's col2im with one group. image_shape
// (input 1) and block_shape (input 2) are read when known (constants; else at run time).
class Col2ImKernel final : public Kernel {
 public:
  explicit Col2ImKernel(const KernelInfo& info) {
    attrs_.read(info);
    if (!attrs_.kernel.empty() || info.node().attr("auto_pad") || info.node().attr("ceil_mode"))
      info.fail("Col2Im has no attribute kernel_shape, auto_pad or ceil_mode (block_shape is input 2)");
  }
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    dispatch<TypeList<float, double>>(dt, ctx.node(), [&]<class T>() {});
    const Tensor* image = ctx.input_value(1);
    const Tensor* block = ctx.input_value(2);
    if (!image || !block) return ctx.set_output_dynamic(0, dt);
    const Shape img = shape::read_ints(ctx, *image, "image_shape"), blk = shape::read_ints(ctx, *block, "block_shape");
    if (img.empty() || img.size() != blk.size() || img.size() > 8)
      ctx.fail("image_shape and block_shape must give one size per spatial dim (1 to 8), not ", img.size(), " and ",
               blk.size());
    for (const Shape* v : {&img, &blk})
      for (int64_t d : *v)
        if (d <= 0) ctx.fail(v == &img ? "image_shape " : "block_shape ", shape_to_string(*v), " must be positive");
    const Shape& x = ctx.input_shape(0);
    if (x.size() != 3) ctx.fail("input must be [N, C * prod(block_shape), L], got ", shape_to_string(x));
    view_.g = shape::forward_geometry(ctx, attrs_, img, blk);  // checks blk > 0, attribute lengths, overflow
    int64_t kk = 0, L = 0, pin = 0;
    if (!checked_numel(blk, &kk) || !checked_numel(view_.g.out, &L) || !checked_numel(img, &pin))
      ctx.fail("block or image sizes overflow int64");
    if (x[1] % kk != 0) ctx.fail("input dim 1 (", x[1], ") is not a multiple of prod(block_shape) = ", kk);
    if (x[2] != L)
      ctx.fail("input dim 2 (", x[2], ") differs from the number of blocks ", L, " that image_shape ",
               shape_to_string(img), ", block_shape ", shape_to_string(blk), " and the attributes give");
    view_.Cin = view_.Cout = x[1] / kk;
    view_.kk = kk;
    view_.pin = pin;
    view_.pout = L;
    Shape out{x[0], view_.Cin};
    out.insert(out.end(), img.begin(), img.end());
    int64_t numel = 0;
    if (!checked_numel(out, &numel)) ctx.fail("output shape ", shape_to_string(out), " overflows int64");
    ctx.set_output(0, dt, out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    dispatch<TypeList<float, double>>(x.dtype(), ctx.node(), [&]<class T>() {
      const int64_t N = x.shape()[0], xn = x.shape()[1] * view_.pout, yn = view_.Cin * view_.pin;
      T* y = ctx.output(0).data<T>();
      for (int64_t n = 0; n < N; ++n) view_.col2im(x.data<T>() + n * xn, y + n * yn);
    });
  }

 private:
  shape::WindowAttrs attrs_;
  ConvView view_;
};

KernelFactory conv_factory(bool grad, bool transposed, bool fused = false) {
  return [grad, transposed, fused](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    if (grad) return std::make_unique<ConvGradKernel>(i, transposed);
    return std::make_unique<ConvKernel>(i, transposed, fused);
  };
}

}  // namespace

void register_conv(KernelRegistry& r) {
  r.add("Conv", 1, kMaxOpsetAll, conv_factory(false, false));
  r.add("ConvTranspose", 1, kMaxOpsetAll, conv_factory(false, true));
  r.add(ops::kDomain, "ConvGrad", 1, kMaxOpsetAll, conv_factory(true, false));
  r.add(ops::kDomain, "ConvTransposeGrad", 1, kMaxOpsetAll, conv_factory(true, true));
  r.add(ops::kMicrosoftDomain, "FusedConv", 1, kMaxOpsetAll, conv_factory(false, false, true));
  r.add(ops::kDomain, "NchwcConv", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(i, false, true, true); });
  r.add(ops::kDomain, "ReorderToNchwc", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<NchwcReorderKernel>(i, true); });
  r.add(ops::kDomain, "ReorderFromNchwc", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<NchwcReorderKernel>(i, false); });
  // ai.onnx opset 18, kept as it is in a graph lowered to 17 (ir/opset_lower.h).
  r.add<Col2ImKernel>("Col2Im", 17, kMaxOpsetAll);
}

}  // namespace onnxtrain::kernels::cpu
