// Helpers of the backward kernels (com.onnxtrain.*Grad, the custom operators gradient rules emit):
// zero-filled outputs (shape inputs: kernels/shape/common.h), and the adjoint of a separable per-axis gather, the backward
// of Pad (edge, reflect, wrap) and Resize:
//   forward, per axis a:  Y[.., o, ..] = sum_k w_a[o, k] * X[.., idx_a[o, k], ..]   (idx < 0: no tap)
//   backward:             dX = fold_{r-1}(... fold_0(dY)), fold_a: Z[.., s, ..] += w_a[o, k] * dY[.., o, ..]
//                         for every tap (o, k) with idx_a[o, k] = s.
// Each fold walks [outer, n_out, inner] blocks into [outer, n_in, inner] blocks; work items are
// (outer row, column chunk) pairs, so no two threads write the same element and the result does
// not depend on the thread count. Intermediate folds accumulate in compute_t<T> (float for half
// types) in the workspace.
#pragma once

#include <cstring>
#include <vector>

#include "kernels/cpu/common.h"

namespace onnxtrain::kernels::cpu {

/// Fills y with zero bytes (0 of every numeric type), in parallel.
inline void zero_fill(Tensor& y) {
  char* p = static_cast<char*>(y.raw_data());
  const int64_t n = y.numel() * int64_t(dtype_size(y.dtype()));
  parallel_for(n, 1 << 20, [&](int64_t b, int64_t e) { std::memset(p + b, 0, size_t(e - b)); });
}

/// One axis of the forward gather: n_out output coordinates with K taps each.
struct AxisFold {
  int64_t n_in = 0, n_out = 0;
  int K = 1;
  std::vector<int64_t> idx;  ///< [n_out * K], in [0, n_in) or -1 (no contribution)
  std::vector<double> w;     ///< [n_out * K]; empty: every weight is 1

  bool identity() const {
    if (K != 1 || n_in != n_out) return false;
    for (int64_t o = 0; o < n_out; ++o)
      if (idx[size_t(o)] != o || (!w.empty() && w[size_t(o)] != 1.0)) return false;
    return true;
  }
};

class FoldPlan {
 public:
  /// `folds[a]` maps axis a of dY (length n_out) to axis a of dX (length n_in).
  void init(const Shape& dy_shape, const std::vector<AxisFold>& folds) {
    steps_.clear();
    mid_ = 0;
    Shape cur = dy_shape;
    for (size_t a = 0; a < folds.size(); ++a) {
      if (folds[a].identity()) continue;
      steps_.push_back({a, dim_product(cur, 0, a), dim_product(cur, a + 1, cur.size()), &folds[a]});
      cur[a] = folds[a].n_in;
      mid_ = std::max(mid_, shape_numel(cur));
    }
    numel_ = shape_numel(cur);
  }
  /// Scratch bytes run() needs for element type T.
  template <class T>
  size_t workspace_bytes() const {
    return steps_.size() < 2 ? 0 : size_t(steps_.size() > 2 ? 2 : 1) * size_t(mid_) * sizeof(compute_t<T>);
  }

  template <class T>
  void run(const T* dy, T* dx, void* ws) const {
    using C = compute_t<T>;
    if (steps_.empty()) {
      std::memcpy(static_cast<void*>(dx), dy, size_t(numel_) * sizeof(T));
      return;
    }
    // Intermediates alternate between two buffers (one with two steps, none with one: then the
    // workspace may be null, and no offset is formed from it).
    C* buf[2] = {static_cast<C*>(ws), steps_.size() > 2 ? static_cast<C*>(ws) + mid_ : nullptr};
    for (size_t s = 0; s < steps_.size(); ++s) {
      const bool first = s == 0, last = s + 1 == steps_.size();
      const C* prev = first ? nullptr : buf[(s - 1) % 2];
      if (first && last) fold<C>(dy, dx, steps_[s]);
      else if (first) fold<C>(dy, buf[0], steps_[s]);
      else if (last) fold<C>(prev, dx, steps_[s]);
      else fold<C>(prev, buf[s % 2], steps_[s]);
    }
  }

 private:
  struct Step {
    size_t axis;
    int64_t outer, inner;
    const AxisFold* f;
  };

  // Z[o, s, i] = sum over taps (p, k) with idx[p, k] = s of w[p, k] * Y[o, p, i].
  template <class C, class In, class Out>
  static void fold(const In* in, Out* out, const Step& st) {
    const AxisFold& f = *st.f;
    const int64_t nin = f.n_in, nout = f.n_out, K = f.K, inner = st.inner;
    const int64_t chunk = inner <= 1024 ? inner : 512;
    const int64_t nchunks = inner == 0 ? 0 : (inner + chunk - 1) / chunk;
    const int64_t* idx = f.idx.data();
    const double* wd = f.w.empty() ? nullptr : f.w.data();
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(chunk * (nout + nin), 1));
    parallel_for(st.outer * nchunks, grain, [&](int64_t w0, int64_t w1) {
      thread_local std::vector<C> scratch;
      for (int64_t w = w0; w < w1; ++w) {
        const int64_t o = w / nchunks, c0 = (w % nchunks) * chunk, len = std::min(chunk, inner - c0);
        const In* src = in + o * nout * inner + c0;
        Out* dst = out + o * nin * inner + c0;
        C* acc;  // [nin] rows of len, row stride `ld`
        int64_t ld;
        if constexpr (std::is_same_v<Out, C>) {
          acc = dst;
          ld = inner;
        } else {
          scratch.resize(size_t(nin * len));
          acc = scratch.data();
          ld = len;
        }
        for (int64_t s = 0; s < nin; ++s) std::fill(acc + s * ld, acc + s * ld + len, C(0));
        for (int64_t p = 0; p < nout; ++p) {
          const In* row = src + p * inner;
          for (int64_t k = 0; k < K; ++k) {
            const int64_t s = idx[p * K + k];
            if (s < 0) continue;
            C* a = acc + s * ld;
            if (!wd) {
              for (int64_t i = 0; i < len; ++i) a[i] += C(row[i]);
            } else {
              const C wt = C(wd[p * K + k]);
              for (int64_t i = 0; i < len; ++i) a[i] += wt * C(row[i]);
            }
          }
        }
        if constexpr (!std::is_same_v<Out, C>)
          for (int64_t s = 0; s < nin; ++s)
            for (int64_t i = 0; i < len; ++i) dst[s * inner + i] = Out(acc[s * ld + i]);
      }
    });
  }

  std::vector<Step> steps_;
  int64_t mid_ = 0, numel_ = 0;
};

/// A backward kernel whose dX (input 0: dY) is a FoldPlan over folds_: prepare() fills folds_
/// (one per axis of dY) and calls plan(); run() folds.
class FoldKernel : public Kernel {
 public:
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch<FloatTypes>(y.dtype(), ctx.node(), [&]<class T>() {
      plan_.run(ctx.input(0).data<T>(), y.data<T>(), ctx.workspace());
    });
  }

 protected:
  void plan(PrepareContext& ctx, const Shape& dy_shape, const Shape& dx_shape) {
    plan_.init(dy_shape, folds_);
    const DType dt = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt, ctx.node(), [&]<class T>() { ctx.request_workspace(plan_.workspace_bytes<T>()); });
    ctx.set_output(0, dt, dx_shape);
  }
  std::vector<AxisFold> folds_;

 private:
  FoldPlan plan_;
};

}  // namespace onnxtrain::kernels::cpu
