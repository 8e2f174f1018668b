// Convolutions (forward).
//   Conv           X[N, C, D...] * W[M, C/G, k...] (+ B[M]) -> Y[N, M, O...]
//                  Y[n, m, o] = B[m] + sum_{c in group(m), k} X[n, c, o*s - pb + k*d] * W[m, c, k]
//   ConvTranspose  X[N, C, D...], W[C, M/G, k...] (+ B[M]) -> Y[N, M, O...]
//                  Y[n, m, i*s - pb + k*d] += X[n, c, i] * W[c, m, k]   (the adjoint of Conv), + B[m]
// float32 runs oneDNN convolution / deconvolution primitives created in prepare() for the concrete
// shapes (layouts chosen by oneDNN, reorders from and to the plain tensors inside the workspace).
// float64, float16, bfloat16 and geometries oneDNN rejects run im2col / col2im + gemm.
#include <cstring>

#include "kernels/cpu/common.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/window.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels {

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

class ConvKernel final : public Kernel {
 public:
  ConvKernel(const KernelInfo& info, bool transposed) : transposed_(transposed) {
    attrs_.read(info);
    group_ = info.attr_int("group", 1);
    if (group_ < 1) info.fail("group must be positive, got ", group_);
    if (transposed) {
      output_padding_ = info.attr_ints("output_padding", {});
      output_shape_ = info.attr_ints("output_shape", {});
    }
  }

  void prepare(PrepareContext& ctx) override {
    dt_ = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {});
    for (size_t i = 1; i < 3; ++i)
      if (ctx.has_input(i) && ctx.input_dtype(i) != dt_)
        ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(i)), ", expected ", dtype_name(dt_));
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(1);
    if (x.size() < 3) ctx.fail("X must be [N, C, spatial...], got ", shape_to_string(x));
    if (w.size() != x.size()) ctx.fail("W ", shape_to_string(w), " and X ", shape_to_string(x), " differ in rank");
    const size_t nd = x.size() - 2;
    if (nd > 14) ctx.fail("too many spatial dims (", nd, ")");
    const Shape in(x.begin() + 2, x.end()), kernel(w.begin() + 2, w.end());
    if (!attrs_.kernel.empty() && attrs_.kernel != kernel)
      ctx.fail("kernel_shape ", shape_to_string(attrs_.kernel), " does not match W ", shape_to_string(w));
    N_ = x[0], C_ = x[1];
    if (C_ % group_ != 0) ctx.fail("group ", group_, " does not divide the ", C_, " input channels");
    if (!transposed_) {
      M_ = w[0];
      if (w[1] * group_ != C_)
        ctx.fail("W ", shape_to_string(w), " expects ", w[1] * group_, " input channels (group ", group_, "), X has ", C_);
      if (M_ % group_ != 0) ctx.fail("group ", group_, " does not divide the ", M_, " output channels");
      g_ = forward_geometry(ctx, attrs_, in, kernel);
    } else {
      if (w[0] != C_) ctx.fail("W ", shape_to_string(w), " expects ", w[0], " input channels, X has ", C_);
      M_ = w[1] * group_;
      g_ = transposed_geometry(ctx, attrs_, in, kernel, output_padding_, output_shape_);
    }
    has_bias_ = ctx.has_input(2);
    if (has_bias_ && (ctx.input_rank(2) != 1 || ctx.input_shape(2)[0] != M_))
      ctx.fail("B ", shape_to_string(ctx.input_shape(2)), " must be [", M_, "]");
    Shape y = {N_, M_};
    y.insert(y.end(), g_.out.begin(), g_.out.end());
    ctx.set_output(0, dt_, y);

    kk_ = shape_numel(kernel);
    pin_ = shape_numel(g_.in);
    pout_ = shape_numel(g_.out);
    op_ = dnnl_util::DnnlOp();
    const bool empty = shape_numel(y) == 0 || C_ == 0 || kk_ == 0;
    depthwise_ = dt_ == DType::kFloat32 && !transposed_ && group_ > 1 && group_ == C_ && nd <= 2 && !empty && kk_ <= 64;
    if (depthwise_) {
      ctx.request_workspace(dw_workspace(ctx.options()));
      return;
    }
    if (dt_ == DType::kFloat32 && !empty && make_dnnl(x, w, y)) {
      ctx.request_workspace(op_.workspace_bytes());
      return;
    }
    ctx.request_workspace(generic_workspace());
  }

  void run(RunContext& ctx) override {
    if (ctx.output(0).numel() == 0) return;
    const void* bias = has_bias_ ? ctx.input(2).raw_data() : nullptr;
    if (depthwise_) {
      run_depthwise(ctx.input(0).data<float>(), ctx.input(1).data<float>(), static_cast<const float*>(bias),
                    ctx.output(0).data<float>(), static_cast<char*>(ctx.workspace()), ctx.options());
      return;
    }
    if (op_.valid()) {
      op_.bind(DNNL_ARG_SRC, ctx.input(0).raw_data());
      op_.bind(DNNL_ARG_WEIGHTS, ctx.input(1).raw_data());
      if (bias) op_.bind(DNNL_ARG_BIAS, bias);
      op_.bind(DNNL_ARG_DST, ctx.output(0).raw_data());
      op_.execute(ctx.workspace());
      return;
    }
    dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {
      run_generic<T>(ctx.input(0).data<T>(), ctx.input(1).data<T>(), static_cast<const T*>(bias), ctx.output(0).data<T>(),
                     static_cast<char*>(ctx.workspace()));
    });
  }

 private:
  // ------------------------------------------------------------ oneDNN (float32)
  bool make_dnnl(const Shape& x, const Shape& w, const Shape& y) {
    using dnnl::memory;
    const size_t nd = g_.nd;
    for (size_t i = 0; i < nd; ++i)
      if (g_.pad_b[i] < 0 || g_.pad_e[i] - g_.out_pad[i] < 0) return false;  // generic path handles these
    const int64_t Cg = C_ / group_, Mg = M_ / group_;
    // Weights as oneDNN wants them ([G,] O, I, k...) over the ONNX layout.
    Shape wd = {Mg, Cg};
    wd.insert(wd.end(), g_.kernel.begin(), g_.kernel.end());
    std::vector<int64_t> ws(wd.size());
    ws.back() = 1;
    for (size_t i = wd.size() - 1; i-- > 2;) ws[i] = ws[i + 1] * wd[i + 1];
    // Conv W is [M, C/G, k] = [G, Mg, Cg, k]; ConvTranspose W is [C, M/G, k] = [G, Cg, Mg, k].
    ws[0] = transposed_ ? kk_ : Cg * kk_;
    ws[1] = transposed_ ? Mg * kk_ : kk_;
    if (group_ > 1) {
      wd.insert(wd.begin(), group_);
      ws.insert(ws.begin(), Cg * Mg * kk_);
    }
    const memory::desc wmd(dnnl_util::dims(wd), memory::data_type::f32, dnnl_util::dims(ws));
    const memory::desc xmd = dnnl_util::plain_md(x), ymd = dnnl_util::plain_md(y), bmd = dnnl_util::plain_md({M_});
    auto any = [](const Shape& s) { return memory::desc(dnnl_util::dims(s), memory::data_type::f32, memory::format_tag::any); };
    // Activations: oneDNN's blocked layouts (reordered in and out) pay off when there is enough
    // arithmetic per activation byte; below that (1x1 and few-channel convolutions) the plain
    // layout's gemm-based kernel is faster. The threshold comes from bench/bench_kernels.py and
    // the layout comparison recorded there.
    const double flops = 2.0 * double(M_ / group_) * double(C_) * double(kk_) * double(transposed_ ? pin_ : pout_);
    const double bytes = 4.0 * (double(C_) * double(pin_) + double(M_) * double(pout_));
    const bool plain = flops / bytes < 40.0;
    // Among blocked layouts, nC..16c (jit direct kernels) measured up to 1.4x faster than what
    // `any` picks (nhwc brgemm) when both channel counts fill 16-wide blocks.
    enum class Layout { kPlain, kBlocked16, kAny };
    std::vector<Layout> candidates;
    if (plain) candidates = {Layout::kPlain, Layout::kAny};
    else if (Cg % 16 == 0 && Mg % 16 == 0) candidates = {Layout::kBlocked16, Layout::kAny};
    else candidates = {Layout::kAny};
    const memory::format_tag blocked16 = nd == 1   ? memory::format_tag::nCw16c
                                         : nd == 2 ? memory::format_tag::nChw16c
                                                   : memory::format_tag::nCdhw16c;
    memory::dims strides = dnnl_util::dims(g_.stride), dil(nd), pl = dnnl_util::dims(g_.pad_b), pr(nd);
    for (size_t i = 0; i < nd; ++i) {
      dil[i] = g_.dilation[i] - 1;
      pr[i] = g_.pad_e[i] - g_.out_pad[i];
    }
    const memory::desc bias = has_bias_ ? bmd : memory::desc();
    const auto attr = dnnl_util::default_attr();
    auto& eng = dnnl_util::cpu_engine();
    for (Layout layout : candidates) {
      auto act = [&](const Shape& s, const memory::desc& p) {
        return layout == Layout::kPlain       ? p
               : layout == Layout::kBlocked16 ? memory::desc(dnnl_util::dims(s), memory::data_type::f32, blocked16)
                                              : any(s);
      };
      // Creates the (de)convolution P; false when oneDNN has only its reference kernel for it.
      auto create = [&]<class P>(dnnl::algorithm alg) {
        typename P::desc d(dnnl::prop_kind::forward_inference, alg, act(x, xmd), any(wd), bias, act(y, ymd), strides,
                           dil, pl, pr);
        typename P::primitive_desc pd(d, attr, eng);
        if (dnnl_util::is_reference(pd)) return false;
        op_.init(P(pd), pd.scratchpad_desc());
        op_.add_arg(DNNL_ARG_SRC, xmd, pd.src_desc(), false);
        op_.add_arg(DNNL_ARG_WEIGHTS, wmd, pd.weights_desc(), false);
        if (has_bias_) op_.add_arg(DNNL_ARG_BIAS, bmd, bmd, false);
        op_.add_arg(DNNL_ARG_DST, ymd, pd.dst_desc(), true);
        return true;
      };
      try {
        if (transposed_ ? create.template operator()<dnnl::deconvolution_forward>(dnnl::algorithm::deconvolution_direct)
                        : create.template operator()<dnnl::convolution_forward>(dnnl::algorithm::convolution_direct))
          return true;
      } catch (const dnnl::error&) {
        op_ = dnnl_util::DnnlOp();
      }
    }
    return false;  // unsupported, or only oneDNN's slow reference kernels: im2col + gemm is faster
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
    const bool two = g_.nd == 2;
    DwGeom d{};
    d.IH = two ? g_.in[0] : 1, d.IW = g_.in.back(), d.OH = two ? g_.out[0] : 1, d.OW = g_.out.back();
    d.KH = two ? g_.kernel[0] : 1, d.KW = g_.kernel.back();
    d.sh = two ? g_.stride[0] : 1, d.sw = g_.stride.back(), d.dh = two ? g_.dilation[0] : 1, d.dw = g_.dilation.back();
    d.ph = two ? g_.pad_b[0] : 0, d.pw = g_.pad_b.back();
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
    const int64_t mult = M_ / group_, taps = d.KH * d.KW;
    const size_t slot_bytes = align64(size_t(d.PH * d.PW) * sizeof(float));
    const int slots = dw_slots(o);
    parallel_for(N_ * C_, 1, [&](int64_t p0, int64_t p1) {
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
        const int64_t n = p / C_, c = p % C_;
        for (int64_t j = 0; j < mult; ++j) {
          const int64_t m = c * mult + j;
          const float* w = W + m * taps;
          const float b = B ? B[m] : 0.f;
          float* y = Y + (n * M_ + m) * d.OH * d.OW;
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
  // Workspace: the column matrix of one (image, group), plus float32 copies of X, W and Y for
  // float16/bfloat16 (computing in float32).
  size_t generic_workspace() const {
    const size_t cs = dt_ == DType::kFloat64 ? 8 : 4;
    const int64_t Cg = C_ / group_, Mg = M_ / group_;
    const int64_t col = transposed_ ? Mg * kk_ * pin_ : Cg * kk_ * pout_;
    size_t bytes = align64(size_t(col) * cs);
    if (dt_ == DType::kFloat16 || dt_ == DType::kBFloat16)
      bytes += align64(size_t(C_ * pin_) * cs) + align64(size_t(M_ * Cg * kk_) * cs) + align64(size_t(M_ * pout_) * cs);
    return bytes;
  }

  template <class T>
  void run_generic(const T* X, const T* W, const T* B, T* Y, char* ws) {
    using Cm = compute_t<T>;  // float or double
    constexpr bool convert = !std::is_same_v<T, Cm>;
    const int64_t Cg = C_ / group_, Mg = M_ / group_;
    const int64_t rows = transposed_ ? Mg * kk_ : Cg * kk_;  // column matrix rows
    const int64_t cols = transposed_ ? pin_ : pout_;
    Cm* col = reinterpret_cast<Cm*>(ws);
    ws += align64(size_t(rows * cols) * sizeof(Cm));
    Cm *xc = nullptr, *wc = nullptr, *yc = nullptr;
    if constexpr (convert) {
      xc = reinterpret_cast<Cm*>(ws);
      ws += align64(size_t(C_ * pin_) * sizeof(Cm));
      wc = reinterpret_cast<Cm*>(ws);
      ws += align64(size_t(M_ * Cg * kk_) * sizeof(Cm));
      yc = reinterpret_cast<Cm*>(ws);
      for (int64_t i = 0; i < M_ * Cg * kk_; ++i) wc[i] = Cm(W[i]);
    }
    const Cm* Wm = convert ? wc : reinterpret_cast<const Cm*>(W);
    for (int64_t n = 0; n < N_; ++n) {
      const Cm* x;
      if constexpr (convert) {
        const T* xs = X + n * C_ * pin_;
        for (int64_t i = 0; i < C_ * pin_; ++i) xc[i] = Cm(xs[i]);
        x = xc;
      } else {
        x = reinterpret_cast<const Cm*>(X) + n * C_ * pin_;
      }
      Cm* y = convert ? yc : reinterpret_cast<Cm*>(Y) + n * M_ * pout_;
      for (int64_t grp = 0; grp < group_; ++grp) {
        const Cm* xg = x + grp * Cg * pin_;
        Cm* yg = y + grp * Mg * pout_;
        if (!transposed_) {
          // col[(c, k), o] = X[c, o*s - pb + k*d];  Y_g[Mg, P] = W_g[Mg, Cg*kk] @ col
          parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
            int64_t k[16];
            for (int64_t r = r0; r < r1; ++r) {
              kernel_index(r % kk_, g_.kernel, k);
              const Cm* xc_ = xg + (r / kk_) * pin_;
              Cm* cr = col + r * cols;
              window_walk(g_.out, g_.in, k, g_, [&](int64_t p, int64_t q) { cr[p] = q < 0 ? Cm(0) : xc_[q]; });
            }
          });
          gemm(false, false, Mg, pout_, rows, Cm(1), Wm + grp * Mg * rows, rows, col, cols, Cm(0), yg, pout_);
        } else {
          // col[(m, k), i] = sum_c W[c, m, k] X[c, i];  Y[m, i*s - pb + k*d] += col[(m, k), i]
          gemm(true, false, rows, pin_, Cg, Cm(1), Wm + grp * Cg * rows, rows, xg, pin_, Cm(0), col, cols);
          parallel_for(Mg, 1, [&](int64_t m0, int64_t m1) {
            int64_t k[16];
            for (int64_t m = m0; m < m1; ++m) {
              Cm* ym = yg + m * pout_;
              std::fill(ym, ym + pout_, Cm(0));
              for (int64_t kr = 0; kr < kk_; ++kr) {
                kernel_index(kr, g_.kernel, k);
                const Cm* cr = col + (m * kk_ + kr) * cols;
                window_walk(g_.in, g_.out, k, g_, [&](int64_t p, int64_t q) {
                  if (q >= 0) ym[q] += cr[p];
                });
              }
            }
          });
        }
      }
      T* yt = Y + n * M_ * pout_;
      parallel_for(M_, std::max<int64_t>(1, 16384 / std::max<int64_t>(pout_, 1)), [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) {
          const Cm b = B ? Cm(B[m]) : Cm(0);
          if constexpr (convert) {
            for (int64_t p = 0; p < pout_; ++p) yt[m * pout_ + p] = T(y[m * pout_ + p] + b);
          } else if (B) {
            for (int64_t p = 0; p < pout_; ++p) yt[m * pout_ + p] += b;
          }
        }
      });
    }
  }

  bool transposed_;
  WindowAttrs attrs_;
  int64_t group_ = 1;
  std::vector<int64_t> output_padding_, output_shape_;
  DType dt_ = DType::kFloat32;
  WindowGeom g_;
  int64_t N_ = 0, C_ = 0, M_ = 0, kk_ = 1, pin_ = 1, pout_ = 1;
  bool has_bias_ = false, depthwise_ = false;
  dnnl_util::DnnlOp op_;
};

}  // namespace

void register_conv(KernelRegistry& r) {
  r.add("Conv", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(i, false); });
  r.add("ConvTranspose", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(i, true); });
}

}  // namespace onnxtrain::kernels
