// Normalization operators and Dropout.
//   BatchNormalization(X[N,C,S..], scale[C], B[C], mean[C], var[C])
//       Y = (X - mu[c]) / sqrt(sigma2[c] + eps) * scale[c] + B[c]
//       inference: mu, sigma2 = mean, var; training: the batch's mean and population variance
//       over N and S, running_mean = mean * momentum + mu * (1 - momentum) (same for var);
//       in training the running mean/var outputs overwrite inputs mean/var in place
//   InstanceNormalization(X[N,C,S..], scale[C], B[C])
//       Y = (X - mu[n,c]) / sqrt(sigma2[n,c] + eps) * scale[c] + B[c], moments over S
//   LayerNormalization(X[R.., D..], Scale, B) (axis splits R from D)
//       Y = (X - mu[r]) * InvStdDev[r] * Scale + B, InvStdDev = 1 / sqrt(sigma2[r] + eps)
//       Mean, InvStdDev: [R.., 1..] in the stash type
//   LRN(X[N,C,S..]) Y = X / (bias + alpha / size * sum_{c' in window(c)} X[c']^2)^beta
//   Dropout(X, ratio, training_mode) Y = X * mask * (1 / (1 - ratio)), mask = U(0,1) >= ratio;
//       inference: Y = X (a view), mask all true
// Backward kernels (com.onnxtrain), each right after its forward kernel:
//   BatchNormalizationGrad(dY, X, scale, mean, var) -> dX, dscale[C], dB[C] (, dmean[C], dvar[C])
//   LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev) -> dX, dScale, dB (normalized shape)
//   LRNGrad(dY, X) -> dX;  DropoutGrad(dY, mask, ratio?, training_mode?) -> dX
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu/common.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/registry.h"
#include "kernels/shape/norm.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

// Sum of p[0..n) in A (several lanes, vectorized).
template <class A, class T>
A sum_of(const T* p, int64_t n) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += A(compute_t<T>(p[j]));
  return s;
}

// Sum of (p - mean)^2 over p[0..n) in A.
template <class A, class T>
A sq_dev(const T* p, int64_t n, A mean) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) {
    const A d = A(compute_t<T>(p[j])) - mean;
    s += d * d;
  }
  return s;
}

// Converts a float tensor of any float dtype to D values.
template <class D>
void load_as(const Tensor& t, D* dst, const ir::Node& node) {
  dispatch<FloatTypes>(t.dtype(), node, [&]<class T>() {
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = D(compute_t<T>(p[i]));
  });
}

template <class D>
void store_as(Tensor& t, const D* src, const ir::Node& node) {
  dispatch<FloatTypes>(t.dtype(), node, [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(compute_t<T>(src[i]));
  });
}

// y[s] = x[s] * a + b over n contiguous values.
template <class T>
void scale_shift(const T* x, T* y, int64_t n, double a, double b) {
  using C = compute_t<T>;
  const C ca = C(a), cb = C(b);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] = T(C(x[j]) * ca + cb);
}

// ---------------------------------------------------------------- BatchNormalization
// Mode and attributes: shape::BatchNormAttrs. Opset < 14: the outputs are running mean/var and
// the batch's saved mean/var; opset >= 14: running mean/var.
class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const KernelInfo& info) : at_(shape::read_batch_norm_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    g_ = shape::check_batch_norm(ctx, at_);
    training_ = shape::batch_norm_training(ctx, at_);
    // Training: the running statistics overwrite input_mean / input_var in place (run() reads
    // both into the workspace before writing either).
    shape::set_batch_norm_outputs(ctx, at_, training_);
    ctx.request_workspace(size_t(g_.c) * 6 * sizeof(double));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t N = g_.n, C = g_.c, S = g_.s;
    double* scale = static_cast<double*>(ctx.workspace());
    double* bias = scale + C;
    double* mean = bias + C;
    double* var = mean + C;
    double* mu = var + C;  // statistics used (batch's in training)
    double* sigma2 = mu + C;
    load_as(ctx.input(1), scale, ctx.node());
    load_as(ctx.input(2), bias, ctx.node());
    load_as(ctx.input(3), mean, ctx.node());
    load_as(ctx.input(4), var, ctx.node());
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      const T* X = x.data<T>();
      T* Y = ctx.output(0).data<T>();
      if (training_) {
        const double count = double(N * S);
        // One pass over X: the moments shifted by the channel's first element k (float64 sums,
        // as BatchNormalizationGrad's), mean = k + sum(x - k) / M, variance = sum((x - k)^2) / M
        // minus the shift's square. Two passes (the sum, then the squared deviations) read X
        // twice: 20 % of ResNet-18's BatchNormalization time.
        parallel_for(C, grain_for(N * S), [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) {
            if (count == 0) {
              mu[c] = sigma2[c] = 0.0;
              continue;
            }
            const double k = double(compute_t<T>(X[c * S]));
            double s1 = 0, s2 = 0;
            for (int64_t n = 0; n < N; ++n) {
              const T* p = X + (n * C + c) * S;
#pragma omp simd reduction(+ : s1, s2)
              for (int64_t j = 0; j < S; ++j) {
                const double d = double(compute_t<T>(p[j])) - k;
                s1 += d;
                s2 += d * d;
              }
            }
            const double m1 = s1 / count;
            mu[c] = k + m1;
            sigma2[c] = std::max(s2 / count - m1 * m1, 0.0);
          }
        });
      } else {
        std::memcpy(mu, mean, size_t(C) * sizeof(double));
        std::memcpy(sigma2, var, size_t(C) * sizeof(double));
      }
      parallel_for(N * C, grain_for(S), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t c = r % C;
          const double a = scale[c] / std::sqrt(sigma2[c] + double(at_.epsilon));
          scale_shift(X + r * S, Y + r * S, S, a, bias[c] - mu[c] * a);
        }
      });
    });
    // Optional outputs: running statistics, then (opset < 14) the batch's saved statistics.
    if (training_) {
      // PyTorch feeds the unbiased batch variance into the running variance.
      const double count = double(N * S);
      const double unbias = at_.torch_var && count > 1 ? count / (count - 1) : 1.0;
      for (int64_t c = 0; c < C; ++c) {
        mean[c] = mean[c] * at_.momentum + mu[c] * (1.0 - at_.momentum);
        var[c] = var[c] * at_.momentum + sigma2[c] * unbias * (1.0 - at_.momentum);
      }
    }
    const double* outs[] = {nullptr, mean, var, mu, sigma2};
    for (size_t k = 1; k < 5; ++k)
      if (ctx.has_output(k)) store_as(ctx.output(k), outs[k], ctx.node());
  }

 private:
  shape::BatchNormAttrs at_;
  bool training_ = false;
  shape::BatchNormGeom g_;
};

// ---------------------------------------------------------------- BatchNormalizationGrad
// BatchNormalizationGrad(dY, X, scale, mean, var) -> dX, dscale, dB (, dmean, dvar)
// attributes epsilon, training_mode, spatial (the forward node's mode). Per channel, sums over N, S:
//   training: mu, sigma2 = the batch's moments, inv = 1 / sqrt(sigma2 + eps), xhat = (x - mu) inv,
//     dscale = sum(dy xhat), dB = sum(dy), dx = scale inv (dy - dB / M - xhat dscale / M)
//   inference: mu, sigma2 = mean, var: dx = scale inv dy, dscale and dB as above,
//     dmean = -scale inv dB, dvar = -scale inv^2 / 2 dscale
// so dx = a dy + b x + d per channel: one pass gathers the sums (training moments shifted by the
// channel's first element, in float64), one writes dx. S = 1 ([N, C]) vectorizes over channels.
class BatchNormGradKernel final : public Kernel {
 public:
  explicit BatchNormGradKernel(const KernelInfo& info) : at_(shape::read_batch_norm_grad_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    g_ = shape::check_batch_norm_grad(ctx, at_);
    shape::set_batch_norm_grad_outputs(ctx);
    ctx.request_workspace(size_t(g_.c) * 10 * sizeof(double));
  }
  void run(RunContext& ctx) override {
    const int64_t N = g_.n, C = g_.c, S = g_.s;
    double* scale = static_cast<double*>(ctx.workspace());
    double *mean = scale + C, *var = mean + C, *a = var + C, *b = a + C, *d = b + C;
    double *sdy = d + C, *sdyxhat = sdy + C, *dmean = sdyxhat + C, *dvar = dmean + C;
    load_as(ctx.input(2), scale, ctx.node());
    if (!at_.training) {
      load_as(ctx.input(3), mean, ctx.node());
      load_as(ctx.input(4), var, ctx.node());
    }
    const double M = double(N * S), eps = at_.epsilon;
    // From the sums of channel c (shifted by k): sx = sum(x - k), sxx = sum((x - k)^2),
    // sg = sum(dy), sgx = sum(dy (x - k)).
    auto finish = [&](int64_t c, double k, double sx, double sxx, double sg, double sgx) {
      double mu = mean[c], v = var[c];
      if (at_.training) {
        const double m1 = M > 0 ? sx / M : 0.0;
        mu = k + m1;
        v = M > 0 ? std::max(sxx / M - m1 * m1, 0.0) : 0.0;
      }
      const double inv = 1.0 / std::sqrt(v + eps), sgxhat = inv * (sgx - (mu - k) * sg);
      a[c] = scale[c] * inv;
      b[c] = at_.training && M > 0 ? -a[c] * inv * sgxhat / M : 0.0;
      d[c] = at_.training && M > 0 ? -a[c] * sg / M - b[c] * mu : 0.0;
      sdy[c] = sg;
      sdyxhat[c] = sgxhat;
      dmean[c] = -a[c] * sg;
      dvar[c] = -0.5 * a[c] * inv * sgxhat;
    };
    const Tensor& x = ctx.input(1);
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using Cm = compute_t<T>;
      const T* X = x.data<T>();
      const T* dY = ctx.input(0).data<T>();
      T* dX = ctx.has_output(0) ? ctx.output(0).data<T>() : nullptr;  // unnamed: parameter gradients only
      if (N * S == 0) {
        for (int64_t c = 0; c < C; ++c) finish(c, 0, 0, 0, 0, 0);
        return;
      }
      if (S == 1) {  // rows of C channels: vectorized over channels, blocks of B channels per task
        constexpr int64_t B = 512;
        parallel_for((C + B - 1) / B, grain_for(B * N), [&](int64_t b0, int64_t b1) {
          double sx[B], sxx[B], sg[B], sgx[B], k[B];
          for (int64_t blk = b0; blk < b1; ++blk) {
            const int64_t c0 = blk * B, m = std::min(B, C - c0);
            for (int64_t j = 0; j < m; ++j) {
              k[j] = at_.training ? double(Cm(X[c0 + j])) : mean[c0 + j];
              sx[j] = sxx[j] = sg[j] = sgx[j] = 0;
            }
            for (int64_t n = 0; n < N; ++n) {
              const T *p = X + n * C + c0, *q = dY + n * C + c0;
#pragma omp simd
              for (int64_t j = 0; j < m; ++j) {
                const double xc = double(Cm(p[j])) - k[j], g = double(Cm(q[j]));
                sx[j] += xc;
                sxx[j] += xc * xc;
                sg[j] += g;
                sgx[j] += g * xc;
              }
            }
            for (int64_t j = 0; j < m; ++j) finish(c0 + j, k[j], sx[j], sxx[j], sg[j], sgx[j]);
            for (int64_t n = 0; dX && n < N; ++n) {
              const T *p = X + n * C + c0, *q = dY + n * C + c0;
              T* o = dX + n * C + c0;
#pragma omp simd
              for (int64_t j = 0; j < m; ++j) o[j] = T(Cm(a[c0 + j] * double(Cm(q[j])) + b[c0 + j] * double(Cm(p[j])) + d[c0 + j]));
            }
          }
        });
        return;
      }
      parallel_for(C, grain_for(2 * N * S), [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          const double k = at_.training ? double(Cm(X[c * S])) : mean[c];
          Lanes<double, 4> l;  // sum(x - k), sum((x - k)^2), sum(dy), sum(dy (x - k))
          auto add = [&](int64_t k2, const T* p, const T* q) {
            const double xc = double(Cm(*p)) - k, g = double(Cm(*q));
            l.a[0][k2] += xc;
            l.a[1][k2] += xc * xc;
            l.a[2][k2] += g;
            l.a[3][k2] += g * xc;
          };
          for (int64_t n = 0; n < N; ++n) {
            const T *p = X + (n * C + c) * S, *q = dY + (n * C + c) * S;
            int64_t j = 0;
            for (; j + l.W <= S; j += l.W)
#pragma omp simd
              for (int64_t k2 = 0; k2 < l.W; ++k2) add(k2, p + j + k2, q + j + k2);
            for (int64_t k2 = 0; j < S; ++j, ++k2) add(k2, p + j, q + j);
          }
          finish(c, k, l.sum(0), l.sum(1), l.sum(2), l.sum(3));
          const Cm ca = Cm(a[c]), cb = Cm(b[c]), cd = Cm(d[c]);
          for (int64_t n = 0; dX && n < N; ++n) {
            const T *p = X + (n * C + c) * S, *q = dY + (n * C + c) * S;
            T* o = dX + (n * C + c) * S;
#pragma omp simd
            for (int64_t j = 0; j < S; ++j) o[j] = T(ca * Cm(q[j]) + cb * Cm(p[j]) + cd);
          }
        }
      });
    });
    const double* outs[] = {nullptr, sdyxhat, sdy, dmean, dvar};
    for (size_t k = 1; k < std::min<size_t>(ctx.num_outputs(), 5); ++k)
      if (ctx.has_output(k) && (k <= 2 || !at_.training)) store_as(ctx.output(k), outs[k], ctx.node());
  }

 private:
  shape::BatchNormGradAttrs at_;
  shape::BatchNormGeom g_;
};

// ---------------------------------------------------------------- InstanceNormalization
class InstanceNormKernel final : public Kernel {
 public:
  explicit InstanceNormKernel(const KernelInfo& info) { eps_ = info.attr_float("epsilon", 1e-5f); }
  void prepare(PrepareContext& ctx) override {
    c_ = shape::check_instance_norm(ctx);
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    ctx.request_workspace(size_t(c_) * 2 * sizeof(double));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t C = c_, S = dim_product(x.shape(), 2, x.rank()), rows = x.numel() / std::max<int64_t>(S, 1);
    double* scale = static_cast<double*>(ctx.workspace());
    double* bias = scale + C;
    load_as(ctx.input(1), scale, ctx.node());
    load_as(ctx.input(2), bias, ctx.node());
    if (S == 0) return;
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      const T* X = x.data<T>();
      T* Y = ctx.output(0).data<T>();
      parallel_for(rows, grain_for(3 * S), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* p = X + r * S;
          const double m = sum_of<double>(p, S) / double(S);
          const double v = sq_dev<double>(p, S, m) / double(S);
          const double a = scale[r % C] / std::sqrt(v + double(eps_));
          scale_shift(p, Y + r * S, S, a, bias[r % C] - m * a);
        }
      });
    });
  }

 private:
  float eps_;
  int64_t c_ = 0;
};

// ---------------------------------------------------------------- LayerNormalization
// t (Scale or B) broadcast to the normalized shape `ns`, as A values.
template <class A>
void expand_to(const Tensor& t, const Shape& ns, A* dst, const ir::Node& node) {
  const int64_t cols = shape_numel(ns);
  dispatch<FloatTypes>(t.dtype(), node, [&]<class T>() {
    const T* p = t.data<T>();
    if (t.numel() == cols) {
      for (int64_t j = 0; j < cols; ++j) dst[j] = A(compute_t<T>(p[j]));
      return;
    }
    std::vector<int64_t> idx(ns.size(), 0);  // index of j in ns
    for (int64_t j = 0; j < cols; ++j) {
      int64_t off = 0, stride = 1;
      for (size_t d = t.rank(); d-- > 0;) {
        const size_t nd = ns.size() - t.rank() + d;
        off += (t.dim(d) == 1 ? 0 : idx[nd]) * stride;
        stride *= t.dim(d);
      }
      dst[j] = A(compute_t<T>(p[off]));
      for (size_t d = ns.size(); d-- > 0;) {
        if (++idx[d] < ns[d]) break;
        idx[d] = 0;
      }
    }
  });
}

// Rows of D = prod(dims[axis:]); moments in float32 for float16/bfloat16/float32 inputs (the
// stash type), float64 for float64. Scale and B broadcast to dims[axis:].
class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const KernelInfo& info) : at_(shape::read_layer_norm_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    g_ = shape::check_layer_norm(ctx, at_.axis);
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    for (size_t k = 1; k <= 2; ++k)
      if (ctx.has_output(k)) ctx.set_output(k, at_.stash, g_.stat_shape);
    ctx.request_workspace(size_t(g_.cols) * 2 * sizeof(double) + size_t(g_.rows) * 2 * sizeof(double));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    // Workspace: per-row (mean, inv std dev), then Scale and B expanded to the normalized shape.
    double* stats = static_cast<double*>(ctx.workspace());
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      A* w = reinterpret_cast<A*>(stats + 2 * g_.rows);
      A* b = w + g_.cols;
      expand_to(ctx.input(1), g_.norm_shape, w, ctx.node());
      if (ctx.has_input(2))
        expand_to(ctx.input(2), g_.norm_shape, b, ctx.node());
      else
        std::fill(b, b + g_.cols, A(0));
      const T* X = x.data<T>();
      T* Y = ctx.output(0).data<T>();
      const int64_t D = g_.cols;
      const A eps = A(at_.epsilon);
      parallel_for(g_.rows, grain_for(3 * D), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* p = X + r * D;
          T* q = Y + r * D;
          const A m = D ? sum_of<A>(p, D) / A(D) : A(0);
          const A inv = A(1) / std::sqrt((D ? sq_dev<A>(p, D, m) / A(D) : A(0)) + eps);
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) q[j] = T((A(compute_t<T>(p[j])) - m) * inv * w[j] + b[j]);
          stats[2 * r] = double(m);
          stats[2 * r + 1] = double(inv);
        }
      });
    });
    for (size_t k = 1; k <= 2; ++k) {
      if (!ctx.has_output(k)) continue;
      dispatch<FloatTypes>(ctx.output(k).dtype(), ctx.node(), [&]<class U>() {
        U* o = ctx.output(k).data<U>();
        for (int64_t r = 0; r < g_.rows; ++r) o[r] = U(compute_t<U>(stats[2 * r + (k - 1)]));
      });
    }
  }

 private:
  shape::LayerNormAttrs at_;
  shape::LayerNormGeom g_;
};

// ---------------------------------------------------------------- LayerNormalizationGrad
// LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev) -> dX, dScale, dB (attribute axis; dScale
// and dB in the normalized shape dims[axis:]: the rule sums them to the parameters' shapes).
// Per row: xhat = (x - mean) inv, g = dy Scale,
//   dx = inv (g - mean(g) - xhat mean(g xhat)); dScale = sum over rows of dy xhat, dB = sum of dy.
// Rows form at most kGroups fixed groups whose partial parameter sums are added in a fixed order
// (the same result for any thread count).
class LayerNormGradKernel final : public Kernel {
 public:
  static constexpr int64_t kGroups = 64;
  explicit LayerNormGradKernel(const KernelInfo& info) : axis_(info.attr_int("axis", -1)) {}
  void prepare(PrepareContext& ctx) override {
    g_ = shape::check_layer_norm_grad(ctx, axis_);
    const DType dt = ctx.input_dtype(1);
    if (ctx.has_output(0)) ctx.set_output(0, dt, ctx.input_shape(1));
    for (size_t k = 1; k <= 2; ++k)
      if (ctx.has_output(k)) ctx.set_output(k, dt, g_.norm_shape);
    groups_ = std::max<int64_t>(1, std::min(g_.rows, kGroups));
    ctx.request_workspace(size_t(g_.cols * (1 + 2 * groups_) + 2 * g_.rows) * sizeof(double));
  }
  void run(RunContext& ctx) override {
    dispatch<FloatTypes>(ctx.input(1).dtype(), ctx.node(), [&]<class T>() {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const int64_t R = g_.rows, D = g_.cols, G = groups_;
      A* w = static_cast<A*>(ctx.workspace());
      A* mu = w + D;
      A* iv = mu + R;
      A* part = iv + R;  // per group: dScale partials [D], dB partials [D]
      expand_to(ctx.input(2), g_.norm_shape, w, ctx.node());
      load_as(ctx.input(3), mu, ctx.node());
      load_as(ctx.input(4), iv, ctx.node());
      const T* X = ctx.input(1).data<T>();
      const T* dY = ctx.input(0).data<T>();
      T* dX = ctx.has_output(0) ? ctx.output(0).data<T>() : nullptr;  // unnamed: parameter gradients only
      const A invD = D ? A(1) / A(D) : A(0);
      parallel_for(G, 1, [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
          A* pw = part + g * 2 * D;
          A* pb = pw + D;
          std::fill(pw, pw + 2 * D, A(0));
          for (int64_t r = R * g / G; r < R * (g + 1) / G; ++r) {
            const T *x = X + r * D, *dy = dY + r * D;
            const A m = mu[r], inv = iv[r];
            if (!dX) {
#pragma omp simd
              for (int64_t j = 0; j < D; ++j) {
                const A dyj = A(compute_t<T>(dy[j]));
                pw[j] += dyj * (A(compute_t<T>(x[j])) - m) * inv;
                pb[j] += dyj;
              }
              continue;
            }
            T* dx = dX + r * D;
            Lanes<A, 2> l;  // sum(g), sum(g (x - m))
            int64_t j = 0;
            for (; j + l.W <= D; j += l.W)
#pragma omp simd
              for (int64_t k = 0; k < l.W; ++k) {
                const A gj = A(compute_t<T>(dy[j + k])) * w[j + k];
                l.a[0][k] += gj;
                l.a[1][k] += gj * (A(compute_t<T>(x[j + k])) - m);
              }
            for (int64_t k = 0; j < D; ++j, ++k) {
              const A gj = A(compute_t<T>(dy[j])) * w[j];
              l.a[0][k] += gj;
              l.a[1][k] += gj * (A(compute_t<T>(x[j])) - m);
            }
            const A s1 = l.sum(0), s2 = l.sum(1);
            const A mg = s1 * invD, mgx = s2 * invD * inv;  // mean(g), mean(g xhat)
#pragma omp simd
            for (int64_t j = 0; j < D; ++j) {
              const A xh = (A(compute_t<T>(x[j])) - m) * inv, dyj = A(compute_t<T>(dy[j]));
              dx[j] = T(inv * (dyj * w[j] - mg - xh * mgx));
              pw[j] += dyj * xh;
              pb[j] += dyj;
            }
          }
        }
      });
      for (size_t k = 1; k <= 2; ++k) {
        if (!ctx.has_output(k)) continue;
        T* o = ctx.output(k).data<T>();
        for (int64_t j = 0; j < D; ++j) {
          double t = 0;
          for (int64_t g = 0; g < G; ++g) t += double(part[g * 2 * D + (k - 1) * D + j]);
          o[j] = T(compute_t<T>(t));
        }
      }
    });
  }

 private:
  int64_t axis_;
  shape::LayerNormGeom g_;
  int64_t groups_ = 1;
};

// ---------------------------------------------------------------- LRN
// Attributes and channel windows of LRN (and LRNGrad): shape::LRNAttrs.
// acc[j] = sum of x^2 over c's window at column j < m; x0 points at channel 0, channels S apart.
template <class A, class T>
void window_square_sums(const shape::LRNAttrs& at, const T* x0, int64_t S, int64_t c, int64_t C, int64_t m, A* acc) {
  std::fill(acc, acc + m, A(0));
  const auto [lo, hi] = at.window(c, C);
  for (int64_t cc = lo; cc <= hi; ++cc) {
    const T* p = x0 + cc * S;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) acc[j] += A(p[j]) * A(p[j]);
  }
}

class LRNKernel final : public Kernel {
 public:
  explicit LRNKernel(const KernelInfo& info) : at_(shape::read_lrn_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    ctx.set_output(0, shape::check_nc_input(ctx, 0, "X"), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t C = x.dim(1), S = dim_product(x.shape(), 2, x.rank()), NC = x.numel() / std::max<int64_t>(S, 1);
    if (S == 0) return;
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using A = compute_t<T>;
      const T* X = x.data<T>();
      T* Y = ctx.output(0).data<T>();
      const A k = A(at_.alpha / double(at_.size)), bias = A(at_.bias), beta = A(at_.beta);
      parallel_for(NC, grain_for(S * std::min(at_.size, C)), [&](int64_t r0, int64_t r1) {
        constexpr int64_t B = 256;
        A acc[B];
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t c = r % C;
          for (int64_t j0 = 0; j0 < S; j0 += B) {
            const int64_t m = std::min(B, S - j0);
            window_square_sums(at_, X + (r - c) * S + j0, S, c, C, m, acc);
            const T* p = X + r * S + j0;
            for (int64_t j = 0; j < m; ++j) Y[r * S + j0 + j] = T(A(p[j]) / std::pow(bias + k * acc[j], beta));
          }
        }
      });
    });
  }

 private:
  shape::LRNAttrs at_;
};

// ---------------------------------------------------------------- LRNGrad
// LRNGrad(dY, X) -> dX (attributes of the LRN node). d_c = bias + alpha / size sum_{window(c)} x^2,
// window(c) = [c - (size-1)/2, c + size/2]:
//   dx_c = dy_c d_c^-beta - 2 alpha beta / size x_c sum_{c': c in window(c')} dy_c' x_c' d_c'^(-beta-1)
class LRNGradKernel final : public Kernel {
 public:
  explicit LRNGradKernel(const KernelInfo& info) : at_(shape::read_lrn_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    ctx.set_output(0, shape::check_nc_grad_inputs(ctx), ctx.input_shape(1));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(1);
    const int64_t N = x.dim(0), C = x.dim(1), S = dim_product(x.shape(), 2, x.rank());
    constexpr int64_t B = 64;
    const int64_t nb = (S + B - 1) / B;
    if (S == 0 || C == 0) return;
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using A = compute_t<T>;
      const T* X = x.data<T>();
      const T* dY = ctx.input(0).data<T>();
      T* dX = ctx.output(0).data<T>();
      const A k = A(at_.alpha / double(at_.size)), bias = A(at_.bias), beta = A(at_.beta);
      const A coef = A(2.0 * at_.alpha * at_.beta / at_.size);
      parallel_for(N * nb, grain_for(C * B * at_.size), [&](int64_t t0, int64_t t1) {
        std::vector<A> dpow(size_t(C * B)), tt(size_t(C * B));  // d^-beta, dy x d^(-beta-1)
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n = t / nb, j0 = (t % nb) * B, m = std::min(B, S - j0);
          const int64_t base = n * C * S + j0;
          for (int64_t c = 0; c < C; ++c) {
            A* dp = dpow.data() + c * B;
            window_square_sums(at_, X + base, S, c, C, m, dp);
            const T *p = X + base + c * S, *q = dY + base + c * S;
            for (int64_t j = 0; j < m; ++j) {
              const A dd = bias + k * dp[j];
              dp[j] = std::pow(dd, -beta);
              tt[size_t(c * B + j)] = A(q[j]) * A(p[j]) * dp[j] / dd;
            }
          }
          for (int64_t c = 0; c < C; ++c) {
            A back[B] = {};
            const auto [lo, hi] = at_.windows_holding(c, C);
            for (int64_t cc = lo; cc <= hi; ++cc)
#pragma omp simd
              for (int64_t j = 0; j < m; ++j) back[j] += tt[size_t(cc * B + j)];
            const T *p = X + base + c * S, *q = dY + base + c * S;
            T* o = dX + base + c * S;
            for (int64_t j = 0; j < m; ++j) o[j] = T(A(q[j]) * dpow[size_t(c * B + j)] - coef * A(p[j]) * back[j]);
          }
        }
      });
    });
  }

 private:
  shape::LRNAttrs at_;
};

// ---------------------------------------------------------------- Dropout
// Training mode (shape::dropout_mode): opset >= 12 the training_mode input (default false); opset
// 7-11 the session's ExecOptions::training; opset < 7 additionally is_test = 0.
// Random numbers: with a `seed` attribute, numpy's legacy generator (MT19937 seeded with
// init_genrand(seed), 53-bit doubles from two draws), seeded once per kernel and advancing across
// runs, so the first run reproduces np.random.seed(seed); np.random.uniform(0, 1, shape).
// Without one, a counter-based hash of (ExecOptions::seed, node name, run counter, element): the
// same in every thread split.
class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const KernelInfo& info) : at_(shape::read_dropout_attrs(info)) {
    if (info.has_attr("seed")) {
      seeded_ = true;
      mt_.seed(uint32_t(info.attr_int("seed")));
    }
    key_ = info.options().seed ^ (std::hash<std::string>{}(info.node().name) * 0x9e3779b97f4a7c15ull);
  }
  void prepare(PrepareContext& ctx) override {
    mode_ = shape::dropout_mode(ctx, at_, &keep_all_);
    const DType dt = ctx.input_dtype(0);
    const Shape& s = ctx.input_shape(0);
    // A constant ratio of 0 keeps every element in both modes: the output is the input.
    if (mode_ == Mode::kInfer || keep_all_)
      ctx.set_output_alias(0, 0, s);
    else
      ctx.set_output(0, dt, s);
    if (mode_ != Mode::kInfer) ctx.set_nondeterministic();
    if (ctx.has_output(1)) ctx.set_output(1, at_.opset >= 10 ? DType::kBool : dt, s);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    bool train = mode_ == Mode::kTrain;
    if (mode_ == Mode::kRuntime) train = *ctx.input(2).data<bool>();
    double ratio = at_.ratio;
    if (at_.opset >= 12) ratio = ctx.has_input(1) ? read_scalar_as_double(ctx.input(1)) : 0.5;
    if (train) shape::check_ratio(ctx, ratio);
    Tensor* mask = ctx.has_output(1) ? &ctx.output(1) : nullptr;
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      const T* X = x.data<T>();
      T* Y = y.data<T>();
      const int64_t n = x.numel();
      auto put_mask = [&](int64_t i, bool keep) {
        if (!mask) return;
        if (mask->dtype() == DType::kBool)
          mask->data<bool>()[i] = keep;
        else
          mask->data<T>()[i] = T(C(keep ? 1 : 0));
      };
      auto keep_everything = [&] {
        if (!ctx.output_aliases_input(0, 0)) y.copy_from(x);
        if (mask && mask->dtype() == DType::kBool) std::fill_n(mask->data<bool>(), n, true);
        else if (mask) std::fill_n(mask->data<T>(), n, T(C(1)));
      };
      if (!train || keep_all_) return keep_everything();
      // x * (1 / (1 - ratio)) in the compute type: DropoutGrad's arithmetic, so that DropoutGrad(x,
      // mask) recomputes this output bit for bit (the recompute pass relies on it).
      const C scale = C(1.0 / (1.0 - ratio));
      auto apply = [&](int64_t i, double u) {
        const bool keep = u >= ratio;
        Y[i] = keep ? T(C(X[i]) * scale) : T(C(0));
        put_mask(i, keep);
      };
      if (seeded_) {
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t a = uint32_t(mt_()) >> 5, b = uint32_t(mt_()) >> 6;
          apply(i, (double(a) * 67108864.0 + double(b)) / 9007199254740992.0);
        }
      } else {
        const uint64_t key = mix(key_ + 0x632be59bd9b4e019ull * ++runs_);
        if (ratio == 0) return keep_everything();  // u >= 0 always: no draws (the stream is counter-based)
        auto uniform = [key](int64_t i) { return double(mix(key ^ uint64_t(i)) >> 11) * 0x1.0p-53; };
        bool* mb = mask && mask->dtype() == DType::kBool ? mask->data<bool>() : nullptr;
        parallel_for(n, 16384, [&](int64_t i0, int64_t i1) {
          if (mb) {  // the common case without the per-element mask type test
            for (int64_t i = i0; i < i1; ++i) {
              const bool keep = uniform(i) >= ratio;
              Y[i] = keep ? T(C(X[i]) * scale) : T(C(0));
              mb[i] = keep;
            }
            return;
          }
          for (int64_t i = i0; i < i1; ++i) apply(i, uniform(i));
        });
      }
    });
  }

 private:
  using Mode = shape::DropoutMode;
  static uint64_t mix(uint64_t z) {  // splitmix64 finalizer
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  shape::DropoutAttrs at_;
  bool seeded_ = false, keep_all_ = false;
  Mode mode_ = Mode::kInfer;
  std::mt19937 mt_;
  uint64_t key_, runs_ = 0;
};


// ================================================================ backward kernels (com.onnxtrain)

// ---------------------------------------------------------------- DropoutGrad
// DropoutGrad(dY, mask, ratio?, training_mode?) -> dX = dY mask / (1 - ratio) in training mode,
// dY otherwise. Training: the training_mode input when given; else (session_training = 1, the
// forward opset < 12) the session's training flag; else true. ratio: the input, else the attribute.
// The mask is bool (opset >= 10) or of dY's type.
class DropoutGradKernel final : public Kernel {
 public:
  explicit DropoutGradKernel(const KernelInfo& info) : at_(shape::read_dropout_grad_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    // A constant ratio of 0: dX = dY in both modes, the gradient passed through without a copy.
    pass_ = shape::check_dropout_grad(ctx, at_);
    if (pass_)
      ctx.set_output_alias(0, 0, ctx.input_shape(0));
    else
      ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const bool train = ctx.has_input(3) ? *ctx.input(3).data<bool>() : at_.default_training;
    const double ratio = ctx.has_input(2) ? read_scalar_as_double(ctx.input(2)) : at_.ratio;
    const Tensor& dy = ctx.input(0);
    if (!train || pass_) {
      if (!ctx.output_aliases_input(0, 0)) ctx.output(0).copy_from(dy);
      return;
    }
    shape::check_ratio(ctx, ratio);
    const Tensor& mask = ctx.input(1);
    dispatch<FloatTypes>(dy.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      const T* g = dy.data<T>();
      T* o = ctx.output(0).data<T>();
      const C scale = C(1.0 / (1.0 - ratio));
      const bool* mb = mask.dtype() == DType::kBool ? mask.data<bool>() : nullptr;
      const T* mt = mb ? nullptr : mask.data<T>();
      parallel_for(dy.numel(), 32768, [&](int64_t i0, int64_t i1) {
        if (mb) {
#pragma omp simd
          for (int64_t i = i0; i < i1; ++i) o[i] = T(mb[i] ? C(g[i]) * scale : C(0));
        } else {
          for (int64_t i = i0; i < i1; ++i) o[i] = T(C(mt[i]) != C(0) ? C(g[i]) * scale : C(0));
        }
      });
    });
  }

 private:
  shape::DropoutGradAttrs at_;
  bool pass_ = false;
};
}  // namespace

void register_norm(KernelRegistry& r) {
  r.add<BatchNormKernel>("BatchNormalization", 1, kMaxOpsetAll);
  r.add<InstanceNormKernel>("InstanceNormalization", 1, kMaxOpsetAll);
  r.add<LayerNormKernel>("LayerNormalization", 17, kMaxOpsetAll);
  r.add<LRNKernel>("LRN", 1, kMaxOpsetAll);
  r.add<DropoutKernel>("Dropout", 1, kMaxOpsetAll);
  auto custom = [&r]<class K>(const char* op) {
    r.add(ops::kDomain, op, 1, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<K>(i); });
  };
  custom.operator()<BatchNormGradKernel>("BatchNormalizationGrad");
  custom.operator()<LayerNormGradKernel>("LayerNormalizationGrad");
  custom.operator()<LRNGradKernel>("LRNGrad");
  custom.operator()<DropoutGradKernel>("DropoutGrad");
}

}  // namespace onnxtrain::kernels::cpu
