// Classification losses over [N, C, d1, ...] scores and [N, d1, ...] integer labels.
//   NegativeLogLikelihoodLoss(input, target, weight?)
//       l[n,d] = -input[n, t, d] * w[t]        t = target[n,d], w = weight (or 1); 0 when t == ignore_index
//   SoftmaxCrossEntropyLoss(scores, labels, weights?) -> (output, log_prob?)
//       log_prob = log_softmax(scores, axis 1); l[n,d] = -log_prob[n, t, d] * w[t]
//   reduction: none -> l ([N, d1, ...]); sum -> sum l; mean -> sum l / sum of applied weights.
// Their gradients (com.onnxtrain.SoftmaxCrossEntropyLossGrad, NegativeLogLikelihoodLossGrad) follow.
// onnxruntime's artifacts use the same operators in com.microsoft: SoftmaxCrossEntropyLossGrad, and
// SoftmaxCrossEntropyLossInternal(scores, labels, weights?, ignore_index?) with its Grad(dloss,
// log_prob, labels, weights?, ignore_index?), which take ignore_index as an optional int64 input.
#include <cmath>
#include <limits>

#include "kernels/cpu/common.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/registry.h"
#include "kernels/shape/loss.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

using shape::LossReduction;

// An Internal loss's ignore_index input (position `i`, -1: none), read at each run.
void read_ignore_input(const RunContext& ctx, int i, shape::LossSpec& spec) {
  if (i < 0 || !ctx.has_input(size_t(i))) return;
  const Tensor& t = ctx.input(size_t(i));
  if (t.dtype() != DType::kInt64 || t.numel() != 1) ctx.fail("ignore_index must be one int64, got ", t.describe());
  spec.has_ignore = true;
  spec.ignore = t.data<int64_t>()[0];
}

// Shared by both losses: attributes and shape checks (shape::LossSpec), the reduction of
// per-position losses.
class LossKernel : public Kernel {
 public:
  LossKernel(const KernelInfo& info, bool softmax, int ignore_input = -1)
      : softmax_(softmax), ignore_input_(ignore_input), spec_(info) {}

  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    const Shape t = spec_.check(ctx, 0);
    ctx.set_output(0, dt, spec_.output_shape(t));
    if (softmax_ && ctx.has_output(1)) ctx.set_output(1, dt, ctx.input_shape(0));
    ctx.request_workspace(size_t(spec_.n * spec_.d) * 2 * sizeof(double));
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t N = spec_.n, C = spec_.c, D = spec_.d, P = N * D;
    double* loss = static_cast<double*>(ctx.workspace());  // per position: loss, applied weight
    double* wsum = loss + P;
    read_ignore_input(ctx, ignore_input_, spec_);
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using A = compute_t<T>;
      const T* X = x.data<T>();
      const T* W = ctx.has_input(2) ? ctx.input(2).data<T>() : nullptr;
      T* LP = softmax_ && ctx.has_output(1) ? ctx.output(1).data<T>() : nullptr;
      dispatch<IndexTypes>(ctx.input(1).dtype(), ctx.node(), [&]<class L>() {
        const L* labels = ctx.input(1).data<L>();
        spec_.check_labels(ctx, labels);
        parallel_for(P, grain_for(C), [&](int64_t p0, int64_t p1) {
          for (int64_t p = p0; p < p1; ++p) {
            const int64_t n = p / D, d = p % D, t = int64_t(labels[p]);
            const T* xs = X + n * C * D + d;  // xs[c * D]
            double lse = 0;  // log-softmax offset: log_prob[c] = x[c] - lse
            if (softmax_) {
              double m = -std::numeric_limits<double>::infinity(), sum = 0;
              for (int64_t c = 0; c < C; ++c) m = std::max(m, double(A(xs[c * D])));
              if (std::isinf(m)) m = 0;
              for (int64_t c = 0; c < C; ++c) sum += std::exp(double(A(xs[c * D])) - m);
              lse = m + std::log(sum);
              if (LP)
                for (int64_t c = 0; c < C; ++c) LP[n * C * D + c * D + d] = T(A(double(A(xs[c * D])) - lse));
            }
            const bool ignored = spec_.has_ignore && t == spec_.ignore;
            const double w = ignored ? 0.0 : W ? double(A(W[t])) : 1.0;
            loss[p] = ignored ? 0.0 : -(double(A(xs[t * D])) - lse) * w;
            wsum[p] = w;
          }
        });
      });
      T* out = ctx.output(0).data<T>();
      if (spec_.reduction == LossReduction::kNone) {
        for (int64_t p = 0; p < P; ++p) out[p] = T(A(loss[p]));
        return;
      }
      double total = 0, weights = 0;
      for (int64_t p = 0; p < P; ++p) {
        total += loss[p];
        weights += wsum[p];
      }
      out[0] = T(A(spec_.reduction == LossReduction::kSum ? total : total / weights));
    });
  }

 private:
  bool softmax_;
  int ignore_input_;
  shape::LossSpec spec_;
};

// ================================================================ backward kernels (com.onnxtrain)
// SoftmaxCrossEntropyLossGrad(dloss, log_prob, labels, weights?) -> dscores = (exp(log_prob) - onehot(t)) f
// NegativeLogLikelihoodLossGrad(dloss, input, labels, weights?)  -> dinput = -onehot(t) f (input: its shape)
//   f[n, d] = w[t] dloss[n, d] (none), w[t] dloss (sum), w[t] dloss / sum of applied weights (mean);
//   f = 0 where t is ignore_index. Attributes: the forward node's (reduction, ignore_index).

// y[j] = exp(x[j]) * s[j * s_step] for j < n (float: AVX2 exp).
template <class T>
void exp_times(const T* x, T* y, int64_t n, const compute_t<T>* s, int64_t s_step) {
  using C = compute_t<T>;
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; j + 8 <= n; j += 8) {
      const __m256 f = s_step ? _mm256_loadu_ps(s + j) : _mm256_set1_ps(*s);
      _mm256_storeu_ps(y + j, _mm256_mul_ps(exp8(_mm256_loadu_ps(x + j)), f));
    }
  }
  for (; j < n; ++j) y[j] = T(C(std::exp(C(x[j]))) * s[j * s_step]);
}

class LossGradKernel final : public Kernel {
 public:
  LossGradKernel(const KernelInfo& info, bool softmax, int ignore_input = -1)
      : softmax_(softmax), ignore_input_(ignore_input), spec_(info) {}

  void prepare(PrepareContext& ctx) override {
    spec_.check_grad(ctx);
    ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(1));
    ctx.request_workspace(size_t(spec_.n * spec_.d) * sizeof(double));
  }

  void run(RunContext& ctx) override {
    const int64_t N = spec_.n, C = spec_.c, D = spec_.d, P = N * D;
    read_ignore_input(ctx, ignore_input_, spec_);
    dispatch<FloatTypes>(ctx.input(1).dtype(), ctx.node(), [&]<class T>() {
      using A = compute_t<T>;
      A* f = static_cast<A*>(ctx.workspace());  // per position factor
      const T* G = ctx.input(0).data<T>();
      const T* W = ctx.has_input(3) ? ctx.input(3).data<T>() : nullptr;
      T* dX = ctx.output(0).data<T>();
      dispatch<IndexTypes>(ctx.input(2).dtype(), ctx.node(), [&]<class L>() {
        const L* labels = ctx.input(2).data<L>();
        spec_.check_labels(ctx, labels);
        auto weight = [&](int64_t p) {
          const int64_t t = int64_t(labels[p]);
          return spec_.has_ignore && t == spec_.ignore ? 0.0 : W ? double(A(W[t])) : 1.0;
        };
        double scale = spec_.reduction == LossReduction::kNone ? 1.0 : double(A(G[0]));
        if (spec_.reduction == LossReduction::kMean) {
          double total = 0;
          for (int64_t p = 0; p < P; ++p) total += weight(p);
          scale /= total;
        }
        for (int64_t p = 0; p < P; ++p)
          f[p] = A(weight(p) * (spec_.reduction == LossReduction::kNone ? double(A(G[p])) : scale));
        if (softmax_) {
          const T* LP = ctx.input(1).data<T>();
          if (D == 1)
            parallel_for(N, grain_for(C), [&](int64_t n0, int64_t n1) {
              for (int64_t n = n0; n < n1; ++n) exp_times(LP + n * C, dX + n * C, C, f + n, 0);
            });
          else
            parallel_for(N * C, grain_for(D), [&](int64_t r0, int64_t r1) {
              for (int64_t r = r0; r < r1; ++r) exp_times(LP + r * D, dX + r * D, D, f + r / C * D, 1);
            });
        } else {
          parallel_for(N * C * D, 1 << 16, [&](int64_t i0, int64_t i1) { std::fill(dX + i0, dX + i1, T(A(0))); });
        }
        for (int64_t p = 0; p < P; ++p) {  // the one-hot term at the labels
          const int64_t t = int64_t(labels[p]), n = p / D, d = p % D;
          if (spec_.has_ignore && t == spec_.ignore) continue;
          T& o = dX[(n * C + t) * D + d];
          o = T(A(o) - f[p]);
        }
      });
    });
  }

 private:
  bool softmax_;
  int ignore_input_;
  shape::LossSpec spec_;
};

}  // namespace

void register_loss(KernelRegistry& r) {
  for (bool softmax : {false, true})
    r.add(softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", 12, kMaxOpsetAll,
          [softmax](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossKernel>(i, softmax); });
  for (bool softmax : {false, true})
    r.add(ops::kDomain, softmax ? "SoftmaxCrossEntropyLossGrad" : "NegativeLogLikelihoodLossGrad", 1, kMaxOpsetAll,
          [softmax](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossGradKernel>(i, softmax); });
  // onnxruntime's com.microsoft Internal forms (its SoftmaxCrossEntropyLossGrad is the one above:
  // ops::shared_with_microsoft).
  r.add(ops::kMicrosoftDomain, "SoftmaxCrossEntropyLossInternal", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossKernel>(i, true, 3); });
  r.add(ops::kMicrosoftDomain, "SoftmaxCrossEntropyLossInternalGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossGradKernel>(i, true, 4); });
}

}  // namespace onnxtrain::kernels::cpu
