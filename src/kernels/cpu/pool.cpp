// Pooling (forward). X[N, C, D...] -> Y[N, C, O...]; a window of kernel k, stride s, dilation d
// and pads pb/pe slides over each (n, c) plane: window(o) = { o*s - pb + k*d : 0 <= k < kernel }.
//   MaxPool      Y = max over the window's inputs; Indices (opset 8+) = flat index of the max in X,
//                spatial part row-major (storage_order 0) or column-major (1)
//   AveragePool  Y = sum / count; count = inputs inside X (count_include_pad 0) or positions inside
//                the padded input [-pb, in + pe) (count_include_pad 1)
//   LpPool       Y = (sum |x|^p)^(1/p) over the inputs inside X (pads contribute 0)
//   Global*Pool  the window is the whole plane: Y[N, C, 1...]
// float32 max/average pooling runs oneDNN (pooling_v2) when no Indices are asked for; everything
// else runs the loop below (every float type, int8/uint8 for MaxPool).
#include <cmath>
#include <limits>

#include "kernels/cpu/common.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/window.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels {

namespace {

enum class PoolKind { kMax, kAvg, kLp };

using MaxPoolTypes = decltype(FloatTypes{} + TypeList<int8_t, uint8_t>{});

template <class T>
T lowest() {
  if constexpr (std::is_floating_point_v<compute_t<T>>) return T(-std::numeric_limits<float>::infinity());
  else return std::numeric_limits<T>::lowest();
}

// Reference pooling loop over every output element.
//   x: [planes, in...], y: [planes, out...], ind: flat indices (MaxPool) or null.
template <PoolKind K, class T>
void pool_loop(const T* x, T* y, int64_t* ind, int64_t planes, const WindowGeom& g, bool include_pad, double p,
               bool col_major) {
  using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, compute_t<T>>;
  const size_t nd = g.nd;
  const int64_t pin = shape_numel(g.in), pout = shape_numel(g.out);
  std::vector<int64_t> istride = contiguous_strides(g.in), ostride(nd);  // ostride: Indices strides
  for (size_t d = 0, s = 1; d < nd; s *= size_t(g.in[d]), ++d) ostride[d] = col_major ? int64_t(s) : istride[d];
  const int64_t window = shape_numel(g.kernel);
  parallel_for(planes * pout, std::max<int64_t>(1, 32768 / std::max<int64_t>(window, 1)), [&](int64_t b, int64_t e) {
    int64_t o[16], klo[16], khi[16], k[16], start[16];
    int64_t rem = b % pout;
    for (size_t d = nd; d-- > 0;) {
      o[d] = rem % g.out[d];
      rem /= g.out[d];
    }
    for (int64_t i = b; i < e; ++i) {
      const int64_t plane = i / pout;
      const T* xp = x + plane * pin;
      bool empty = false;
      int64_t count_pad = 1;
      for (size_t d = 0; d < nd; ++d) {
        const int64_t st = o[d] * g.stride[d] - g.pad_b[d], dl = g.dilation[d];
        start[d] = st;
        klo[d] = st < 0 ? (-st + dl - 1) / dl : 0;
        khi[d] = std::min(g.kernel[d], (g.in[d] - st + dl - 1) / dl);
        empty = empty || khi[d] <= klo[d];
        if constexpr (K == PoolKind::kAvg)
          count_pad *= std::min(g.kernel[d], (g.in[d] + g.pad_e[d] - st + dl - 1) / dl);
      }
      Acc acc = K == PoolKind::kMax ? Acc(compute_t<T>(lowest<T>())) : Acc(0);
      int64_t best = -1, count = 0;
      if (!empty) {
        for (size_t d = 0; d < nd; ++d) k[d] = klo[d];
        const size_t L = nd - 1;
        for (;;) {
          int64_t off = 0;
          for (size_t d = 0; d < L; ++d) off += (start[d] + k[d] * g.dilation[d]) * istride[d];
          for (int64_t kl = klo[L]; kl < khi[L]; ++kl) {
            const int64_t q = off + start[L] + kl * g.dilation[L];
            const Acc v = Acc(compute_t<T>(xp[q]));
            if constexpr (K == PoolKind::kMax) {
              if (v > acc || best < 0) {
                acc = v;
                best = q;
              }
            } else if constexpr (K == PoolKind::kAvg) {
              acc += v;
            } else {
              acc += p == 2.0 ? v * v : p == 1.0 ? std::abs(v) : std::pow(std::abs(v), p);
            }
          }
          count += khi[L] - klo[L];
          size_t d = L;
          while (d-- > 0) {
            if (++k[d] < khi[d]) break;
            k[d] = klo[d];
          }
          if (d == size_t(-1)) break;
        }
      }
      if constexpr (K == PoolKind::kMax) {
        y[i] = T(compute_t<T>(acc));
        if (ind) {
          int64_t flat = plane * pin;
          for (size_t d = nd, r = size_t(best < 0 ? 0 : best); d-- > 0;) {
            flat += int64_t(r % size_t(g.in[d])) * ostride[d];
            r /= size_t(g.in[d]);
          }
          ind[i] = best < 0 ? -1 : flat;
        }
      } else if constexpr (K == PoolKind::kAvg) {
        const int64_t n = include_pad ? count_pad : count;
        y[i] = T(compute_t<T>(n > 0 ? acc / Acc(n) : Acc(0)));
      } else {
        y[i] = T(compute_t<T>(p == 2.0 ? std::sqrt(acc) : p == 1.0 ? acc : std::pow(acc, 1.0 / p)));
      }
      for (size_t d = nd; d-- > 0;) {
        if (++o[d] < g.out[d]) break;
        o[d] = 0;
      }
    }
  });
}

class PoolKernel final : public Kernel {
 public:
  PoolKernel(const KernelInfo& info, PoolKind kind, bool global) : kind_(kind), global_(global) {
    if (!global) {
      attrs_.read(info);
      if (attrs_.kernel.empty()) info.fail("kernel_shape is required");
    }
    include_pad_ = info.attr_int("count_include_pad", 0) != 0;
    col_major_ = info.attr_int("storage_order", 0) != 0;
    if (kind == PoolKind::kLp) p_ = info.opset() < 2 ? double(info.attr_float("p", 2.f)) : double(info.attr_int("p", 2));
    if (kind == PoolKind::kLp && !(p_ > 0)) info.fail("p must be positive, got ", p_);
    int_types_ = kind == PoolKind::kMax && !global && info.opset() >= 12;
  }

  void prepare(PrepareContext& ctx) override {
    dt_ = ctx.input_dtype(0);
    if (int_types_) dispatch<MaxPoolTypes>(dt_, ctx.node(), [&]<class T>() {});
    else dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {});
    const Shape& x = ctx.input_shape(0);
    if (x.size() < 3) ctx.fail("X must be [N, C, spatial...], got ", shape_to_string(x));
    const size_t nd = x.size() - 2;
    if (nd > 14) ctx.fail("too many spatial dims (", nd, ")");
    const Shape in(x.begin() + 2, x.end());
    if (global_) {
      WindowAttrs whole;
      whole.kernel = in;
      for (int64_t d : in)
        if (d == 0) ctx.fail("global pooling over an empty spatial dim: ", shape_to_string(x));
      g_ = forward_geometry(ctx, whole, in, in);
    } else {
      if (attrs_.kernel.size() != nd)
        ctx.fail("kernel_shape has ", attrs_.kernel.size(), " values for ", nd, " spatial dims");
      g_ = forward_geometry(ctx, attrs_, in, attrs_.kernel);
    }
    planes_ = x[0] * x[1];
    Shape y = {x[0], x[1]};
    y.insert(y.end(), g_.out.begin(), g_.out.end());
    ctx.set_output(0, dt_, y);
    want_indices_ = ctx.num_outputs() > 1 && ctx.has_output(1);
    if (want_indices_) {
      if (kind_ != PoolKind::kMax || ctx.opset() < 8) ctx.fail("only MaxPool (opset 8+) has an Indices output");
      ctx.set_output(1, DType::kInt64, y);
    }
    op_ = dnnl_util::DnnlOp();
    if (dt_ == DType::kFloat32 && kind_ != PoolKind::kLp && !want_indices_ && shape_numel(y) > 0 && nd <= 3 && make_dnnl(x, y))
      ctx.request_workspace(op_.workspace_bytes());
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    Tensor& Y = ctx.output(0);
    if (Y.numel() == 0) return;
    if (op_.valid()) {
      op_.bind(DNNL_ARG_SRC, X.raw_data());
      op_.bind(DNNL_ARG_DST, Y.raw_data());
      op_.execute(ctx.workspace());
      return;
    }
    int64_t* ind = want_indices_ ? ctx.output(1).data<int64_t>() : nullptr;
    dispatch<MaxPoolTypes>(dt_, ctx.node(), [&]<class T>() {
      const T* x = X.data<T>();
      T* y = Y.data<T>();
      switch (kind_) {
        case PoolKind::kMax: pool_loop<PoolKind::kMax>(x, y, ind, planes_, g_, include_pad_, p_, col_major_); break;
        case PoolKind::kAvg:
          if constexpr (std::is_floating_point_v<compute_t<T>>)
            pool_loop<PoolKind::kAvg>(x, y, ind, planes_, g_, include_pad_, p_, col_major_);
          break;
        case PoolKind::kLp:
          if constexpr (std::is_floating_point_v<compute_t<T>>)
            pool_loop<PoolKind::kLp>(x, y, ind, planes_, g_, include_pad_, p_, col_major_);
          break;
      }
    });
  }

 private:
  bool make_dnnl(const Shape& x, const Shape& y) {
    using dnnl::memory;
    const size_t nd = g_.nd;
    memory::dims kernel = dnnl_util::dims(g_.kernel), strides = dnnl_util::dims(g_.stride), dil(nd),
                 pl = dnnl_util::dims(g_.pad_b), pr(nd);
    for (size_t i = 0; i < nd; ++i) {
      dil[i] = g_.dilation[i] - 1;
      // Right padding that makes oneDNN's floor formula give our output size (ceil_mode included).
      pr[i] = std::max<int64_t>(0, (g_.out[i] - 1) * g_.stride[i] + g_.extent(i) - g_.in[i] - g_.pad_b[i]);
      // Padding past the declared pads would count in the divisor of count_include_pad.
      if (kind_ == PoolKind::kAvg && include_pad_ && pr[i] > g_.pad_e[i]) return false;
    }
    const auto alg = kind_ == PoolKind::kMax ? dnnl::algorithm::pooling_max
                     : include_pad_           ? dnnl::algorithm::pooling_avg_include_padding
                                              : dnnl::algorithm::pooling_avg_exclude_padding;
    const memory::desc xmd = dnnl_util::plain_md(x), ymd = dnnl_util::plain_md(y);
    try {
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, xmd, ymd, strides, kernel, dil, pl, pr);
      dnnl::pooling_v2_forward::primitive_desc pd(d, dnnl_util::default_attr(), dnnl_util::cpu_engine());
      op_.init(dnnl::pooling_v2_forward(pd), pd.scratchpad_desc());
      op_.add_arg(DNNL_ARG_SRC, xmd, pd.src_desc(), false);
      op_.add_arg(DNNL_ARG_DST, ymd, pd.dst_desc(), true);
      return true;
    } catch (const dnnl::error&) {
      op_ = dnnl_util::DnnlOp();
      return false;
    }
  }

  PoolKind kind_;
  bool global_;
  WindowAttrs attrs_;
  bool include_pad_ = false, col_major_ = false, int_types_ = false, want_indices_ = false;
  double p_ = 2.0;
  DType dt_ = DType::kFloat32;
  WindowGeom g_;
  int64_t planes_ = 0;
  dnnl_util::DnnlOp op_;
};

KernelFactory pool(PoolKind kind, bool global) {
  return [kind, global](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<PoolKernel>(i, kind, global);
  };
}

}  // namespace

void register_pool(KernelRegistry& r) {
  r.add("MaxPool", 1, kMaxOpsetAll, pool(PoolKind::kMax, false));
  r.add("AveragePool", 1, kMaxOpsetAll, pool(PoolKind::kAvg, false));
  r.add("LpPool", 1, kMaxOpsetAll, pool(PoolKind::kLp, false));
  r.add("GlobalMaxPool", 1, kMaxOpsetAll, pool(PoolKind::kMax, true));
  r.add("GlobalAveragePool", 1, kMaxOpsetAll, pool(PoolKind::kAvg, true));
  r.add("GlobalLpPool", 1, kMaxOpsetAll, pool(PoolKind::kLp, true));
}

}  // namespace onnxtrain::kernels
