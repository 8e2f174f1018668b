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

// Pooling loop for every type and geometry. Output rows (all dims but the last) are split across
// threads; per row, the input offsets of the window's valid outer positions are listed once, and
// per output column the valid range of the last kernel dim comes from a table, so the inner loops
// run without bounds checks or divisions.
//   x: [planes, in...], y: [planes, out...], ind: flat indices (MaxPool) or null.
template <PoolKind K, class T>
void pool_loop(const T* x, T* y, int64_t* ind, int64_t planes, const WindowGeom& g, bool include_pad, double p,
               bool col_major) {
  // Sums accumulate in double; the max is exact in the element's own compute type.
  using Acc = std::conditional_t<K != PoolKind::kMax && std::is_floating_point_v<compute_t<T>>, double, compute_t<T>>;
  const size_t nd = g.nd, L = nd - 1;
  const int64_t pin = shape_numel(g.in), OW = g.out[L], rows = shape_numel(g.out) / std::max<int64_t>(OW, 1);
  const std::vector<int64_t> istride = contiguous_strides(g.in);
  // Valid kernel range [lo, hi) of the last dim per output column, and its count inside the pads.
  auto range = [&](size_t d, int64_t o, int64_t* lo, int64_t* hi, int64_t* in_pad) {
    const int64_t st = o * g.stride[d] - g.pad_b[d], dl = g.dilation[d];
    *lo = st < 0 ? (-st + dl - 1) / dl : 0;
    *hi = std::max(*lo, std::min(g.kernel[d], (g.in[d] - st + dl - 1) / dl));
    *in_pad = std::min(g.kernel[d], (g.in[d] + g.pad_e[d] - st + dl - 1) / dl);
  };
  const size_t ow_n = static_cast<size_t>(OW);
  std::vector<int64_t> lo(ow_n), hi(ow_n), pad_n(ow_n), col0(ow_n);
  for (int64_t o = 0; o < OW; ++o) {
    range(L, o, &lo[size_t(o)], &hi[size_t(o)], &pad_n[size_t(o)]);
    col0[size_t(o)] = o * g.stride[L] - g.pad_b[L];
  }
  const int64_t dl = g.dilation[L], KL = g.kernel[L];
  constexpr int kLanes = 8;
  int64_t full_begin = 0, full_end = 0;  // columns whose last-dim window is whole
  while (full_begin < OW && (lo[size_t(full_begin)] != 0 || hi[size_t(full_begin)] != KL)) ++full_begin;
  for (full_end = full_begin; full_end < OW && lo[size_t(full_end)] == 0 && hi[size_t(full_end)] == KL;) ++full_end;
  const int64_t outer_window = dim_product(g.kernel, 0, L);
  parallel_for(planes * rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(OW * shape_numel(g.kernel), 1)),
               [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> offs(static_cast<size_t>(outer_window));  // input offsets of the valid outer window rows
    int64_t o[16], klo[16], khi[16], k[16];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t plane = r / rows;
      const T* xp = x + plane * pin;
      int64_t rem = r % rows, count_pad = 1;
      for (size_t d = L; d-- > 0;) {
        o[d] = rem % g.out[d];
        rem /= g.out[d];
      }
      size_t n_offs = 0;
      bool empty = false;
      for (size_t d = 0; d < L; ++d) {
        int64_t in_pad;
        range(d, o[d], &klo[d], &khi[d], &in_pad);
        count_pad *= in_pad;
        empty = empty || khi[d] <= klo[d];
        k[d] = klo[d];
      }
      while (!empty) {  // odometer over the valid outer window positions
        int64_t off = 0;
        for (size_t d = 0; d < L; ++d) off += (o[d] * g.stride[d] - g.pad_b[d] + k[d] * g.dilation[d]) * istride[d];
        offs[n_offs++] = off;
        size_t d = L;
        while (d-- > 0) {
          if (++k[d] < khi[d]) break;
          k[d] = klo[d];
        }
        if (d == size_t(-1)) break;
      }
      T* yr = y + r * OW;
      int64_t* ir = ind ? ind + r * OW : nullptr;
      auto update = [&](Acc& acc, int64_t& best, int64_t q) {
        const Acc v = Acc(compute_t<T>(xp[q]));
        if constexpr (K == PoolKind::kMax) {  // branch-free: the comparison is unpredictable
          const bool gt = v > acc;
          acc = gt ? v : acc;
          best = gt ? q : best;
        } else if constexpr (K == PoolKind::kAvg) {
          acc += v;
        } else {
          acc += p == 2.0 ? v * v : p == 1.0 ? std::abs(v) : std::pow(std::abs(v), p);
        }
      };
      auto finish = [&](int64_t c, Acc acc, int64_t best) {
        const int64_t l0 = lo[size_t(c)], l1 = hi[size_t(c)];
        if constexpr (K == PoolKind::kMax) {
          // All values were the lowest: the first valid one is the max.
          if (best < 0 && n_offs > 0 && l1 > l0) best = offs[0] + col0[size_t(c)] + l0 * dl;
          yr[c] = T(compute_t<T>(acc));
          if (ir) {
            int64_t flat = best;
            if (col_major && best >= 0) {  // spatial part column-major
              flat = 0;
              for (size_t d = nd, rest = size_t(best), mul = size_t(pin); d-- > 0;) {
                mul /= size_t(g.in[d]);
                flat += int64_t(rest % size_t(g.in[d])) * int64_t(mul);
                rest /= size_t(g.in[d]);
              }
            }
            ir[c] = best < 0 ? -1 : plane * pin + flat;
          }
        } else if constexpr (K == PoolKind::kAvg) {
          const int64_t n = include_pad ? count_pad * pad_n[size_t(c)] : int64_t(n_offs) * (l1 - l0);
          yr[c] = T(compute_t<T>(n > 0 ? acc / Acc(n) : Acc(0)));
        } else {
          yr[c] = T(compute_t<T>(p == 2.0 ? std::sqrt(acc) : p == 1.0 ? acc : std::pow(acc, 1.0 / p)));
        }
      };
      const Acc init = K == PoolKind::kMax ? Acc(compute_t<T>(lowest<T>())) : Acc(0);
      auto one = [&](int64_t c) {  // any column
        Acc acc = init;
        int64_t best = -1;
        const int64_t base = col0[size_t(c)];
        for (size_t j = 0; j < n_offs; ++j)
          for (int64_t kl = lo[size_t(c)]; kl < hi[size_t(c)]; ++kl) update(acc, best, offs[j] + base + kl * dl);
        finish(c, acc, best);
      };
      // Interior columns (whole last-dim window inside the input) go kLanes at a time: independent
      // accumulator chains instead of one long dependent chain.
      int64_t c = 0;
      for (; c < full_begin; ++c) one(c);
      for (; c + kLanes <= full_end; c += kLanes) {
        Acc acc[kLanes];
        int64_t best[kLanes];
        for (int v = 0; v < kLanes; ++v) acc[v] = init, best[v] = -1;
        for (size_t j = 0; j < n_offs; ++j)
          for (int64_t kl = 0; kl < KL; ++kl) {
            const int64_t q0 = offs[j] + kl * dl;
            for (int v = 0; v < kLanes; ++v) update(acc[v], best[v], q0 + col0[size_t(c + v)]);
          }
        for (int v = 0; v < kLanes; ++v) finish(c + v, acc[v], best[v]);
      }
      for (; c < OW; ++c) one(c);
    }
  });
}

// Global pools: one contiguous plane per output, reduced in 8 independent lanes (vectorized) in
// the compute type, the lanes and the tail summed in double.
template <PoolKind K, class T>
void global_pool(const T* x, T* y, int64_t planes, int64_t n, double p) {
  using C = compute_t<T>;
  constexpr int64_t kL = 8;
  auto add = [p](auto acc, auto v) {
    if constexpr (K == PoolKind::kMax) return std::max(acc, v);
    else if constexpr (K == PoolKind::kAvg) return acc + v;
    else return acc + (p == 2.0 ? v * v : decltype(v)(std::pow(std::abs(double(v)), p)));
  };
  parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * n;
      C lanes[kL];
      for (int64_t l = 0; l < kL; ++l) lanes[l] = K == PoolKind::kMax ? C(lowest<T>()) : C(0);
      int64_t i = 0;
      for (; i + kL <= n; i += kL)
        for (int64_t l = 0; l < kL; ++l) lanes[l] = add(lanes[l], C(xp[i + l]));
      double acc = K == PoolKind::kMax ? double(lanes[0]) : 0.0;
      for (int64_t l = 0; l < kL; ++l) acc = K == PoolKind::kMax ? std::max(acc, double(lanes[l])) : acc + double(lanes[l]);
      for (; i < n; ++i) acc = add(acc, double(C(xp[i])));
      const double r = K == PoolKind::kMax ? acc : K == PoolKind::kAvg ? acc / double(n)
                       : p == 2.0                     ? std::sqrt(acc)
                                                      : std::pow(acc, 1.0 / p);
      y[pl] = T(C(r));
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
    if (!global_ && dt_ == DType::kFloat32 && kind_ != PoolKind::kLp && !want_indices_ && shape_numel(y) > 0 && nd <= 3 &&
        make_dnnl(x, y))
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
      if constexpr (std::is_floating_point_v<compute_t<T>>) {
        if (global_) {
          const int64_t n = shape_numel(g_.in);
          if (kind_ == PoolKind::kMax) global_pool<PoolKind::kMax>(x, y, planes_, n, p_);
          else if (kind_ == PoolKind::kAvg) global_pool<PoolKind::kAvg>(x, y, planes_, n, p_);
          else global_pool<PoolKind::kLp>(x, y, planes_, n, p_);
          return;
        }
      }
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
      if (dnnl_util::is_reference(pd)) return false;  // the loop below is faster
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
