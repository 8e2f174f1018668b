// Classification losses over [N, C, d1, ...] scores and [N, d1, ...] int32/int64 labels on the device.
//   NegativeLogLikelihoodLoss(input, target, weight?): l[n,d] = -input[n, t, d] w[t]
//   SoftmaxCrossEntropyLoss(scores, labels, weights?) -> (output, log_prob?):
//       log_prob = log_softmax(scores, axis 1); l[n,d] = -log_prob[n, t, d] w[t]
//   reduction none: l; sum: sum l; mean: sum l / sum of applied weights; 0 (weight 0) at ignore_index.
//   com.onnxtrain SoftmaxCrossEntropyLossGrad(dloss, log_prob, labels, weights?) -> (exp(log_prob) - onehot(t)) f
//   com.onnxtrain NegativeLogLikelihoodLossGrad(dloss, input, labels, weights?) -> -onehot(t) f
//       f = w[t] dloss[n,d] (none), w[t] dloss (sum), w[t] dloss / sum of applied weights (mean)
//   com.microsoft SoftmaxCrossEntropyLossInternal(Grad): ignore_index an optional int64 host input.
// As the CPU kernels: per-position log-sum-exp, losses and weight sums in float64. A label out of
// [0, C) that is not ignore_index cannot fail the run from the device (no host sync): its loss and
// gradient positions become NaN instead of the CPU provider's InvalidArgument.
#include <cmath>
#include <limits>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/reduce_util.h"
#include "kernels/shape/loss.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

using namespace red;
using shape::LossReduction;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An Internal loss's ignore_index input (position `i`, -1: none; a host input), read at each run.
void read_ignore_input(const RunContext& ctx, int i, shape::LossSpec& spec) {
  if (i < 0 || !ctx.has_input(size_t(i))) return;
  const Tensor& t = ctx.input(size_t(i));
  if (t.dtype() != DType::kInt64 || t.numel() != 1) ctx.fail("ignore_index must be one int64, got ", t.describe());
  spec.has_ignore = true;
  spec.ignore = t.data<int64_t>()[0];
}

struct FmaxOp {  // as std::max over the CPU's running maximum: NaN never wins
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

struct Labels {
  int64_t c = 0, ignore = 0;
  bool has_ignore = false;
  __device__ bool ignored(int64_t t) const { return has_ignore && t == ignore; }
  __device__ bool bad(int64_t t) const { return (t < 0 || t >= c) && !ignored(t); }
};

// Per position p = (n, d): loss[p] and wsum[p] (float64); log_prob when LP. A group of G threads
// per position (G = 1: a thread per position, scores D apart; G = 32: a warp per row of C, D == 1).
template <bool Softmax, int G, class T, class L>
__global__ void loss_positions(const T* __restrict__ X, const L* __restrict__ labels, const T* __restrict__ W,
                               T* __restrict__ LP, double* __restrict__ loss, double* __restrict__ wsum, int64_t P,
                               int64_t C, int64_t D, Labels lb) {
  const int lane = G == 1 ? 0 : int(threadIdx.x % G);
  const int64_t per = blockDim.x / G, groups = int64_t(gridDim.x) * per;
  for (int64_t p = int64_t(blockIdx.x) * per + threadIdx.x / G; p < P; p += groups) {
    const int64_t n = p / D, d = p - n * D, t = int64_t(labels[p]);
    const T* xs = X + n * C * D + d;  // xs[c * D]
    double lse = 0;
    if constexpr (Softmax) {
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (int64_t c = lane; c < C; c += G) m = fmax(m, double(ld(xs, c * D)));
      if constexpr (G > 1) m = group_reduce<G>(m, FmaxOp{});
      if (isinf(m)) m = 0;
      for (int64_t c = lane; c < C; c += G) s += exp(double(ld(xs, c * D)) - m);
      if constexpr (G > 1) s = group_reduce<G>(s, SumOp{});
      lse = m + log(s);
      if (LP) {
        T* lp = LP + n * C * D + d;
        for (int64_t c = lane; c < C; c += G) lp[c * D] = st<T>(ct<T>(double(ld(xs, c * D)) - lse));
      }
    }
    if (lane == 0) {
      if (lb.bad(t)) {
        loss[p] = kNaN;
        wsum[p] = kNaN;
      } else {
        const bool ig = lb.ignored(t);
        const double w = ig ? 0.0 : W ? double(ld(W, t)) : 1.0;
        loss[p] = ig ? 0.0 : -(double(ld(xs, t * D)) - lse) * w;
        wsum[p] = w;
      }
    }
  }
}

// One block of 1024: out[0] = T(sum loss) (sum) or T(sum loss / sum wsum) (mean), float64.
template <class T>
__global__ void loss_total(const double* __restrict__ loss, const double* __restrict__ wsum, int64_t P, bool mean,
                           T* __restrict__ out) {
  double a = 0, b = 0;
  for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
    a += loss[p];
    b += wsum[p];
  }
  a = group_reduce<1024>(a, SumOp{});
  b = group_reduce<1024>(b, SumOp{});
  if (threadIdx.x == 0) out[0] = st<T>(ct<T>(mean ? a / b : a));
}

template <class T>
__global__ void loss_none(const double* __restrict__ loss, T* __restrict__ out, int64_t P) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < P; p += int64_t(gridDim.x) * blockDim.x)
    out[p] = st<T>(ct<T>(loss[p]));
}

class LossKernel final : public Kernel {
 public:
  LossKernel(const KernelInfo& info, bool softmax, int ignore_input = -1)
      : softmax_(softmax), ignore_input_(ignore_input), spec_(info) {}

  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    require_dtype(ctx, dt, false);
    const Shape t = spec_.check(ctx, 0);
    ctx.set_output(0, dt, spec_.output_shape(t));
    if (softmax_ && ctx.has_output(1)) ctx.set_output(1, dt, ctx.input_shape(0));
    ctx.request_workspace(size_t(spec_.n * spec_.d) * 2 * sizeof(double));
  }

  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    cudaStream_t s = c.stream();
    const int64_t C = spec_.c, D = spec_.d, P = spec_.n * D;
    double* loss = static_cast<double*>(ctx.workspace());
    double* wsum = loss + P;
    read_ignore_input(ctx, ignore_input_, spec_);
    const Labels lb{C, spec_.ignore, spec_.has_ignore};
    dispatch<false>(ctx.input(0).dtype(), [&]<class T>() {
      const T* X = static_cast<const T*>(ctx.input(0).raw_data());
      const T* W = ctx.has_input(2) ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
      T* LP = softmax_ && ctx.has_output(1) ? static_cast<T*>(ctx.output(1).raw_data()) : nullptr;
      T* out = static_cast<T*>(ctx.output(0).raw_data());
      if (P > 0) {
        auto positions = [&]<class L>() {
          const L* labels = static_cast<const L*>(ctx.input(1).raw_data());
          if (softmax_ && D == 1 && C > 32) {
            const unsigned blocks = unsigned(std::min<int64_t>((P + 7) / 8, int64_t(c.multiprocessors()) * 32));
            loss_positions<true, 32, T, L><<<blocks, 256, 0, s>>>(X, labels, W, LP, loss, wsum, P, C, D, lb);
          } else if (softmax_) {
            loss_positions<true, 1, T, L><<<grid_for(P, c), 256, 0, s>>>(X, labels, W, LP, loss, wsum, P, C, D, lb);
          } else {
            loss_positions<false, 1, T, L><<<grid_for(P, c), 256, 0, s>>>(X, labels, W, LP, loss, wsum, P, C, D, lb);
          }
          check_launch("loss_positions");
        };
        if (ctx.input(1).dtype() == DType::kInt32) positions.template operator()<int32_t>();
        else positions.template operator()<int64_t>();
      }
      if (spec_.reduction == LossReduction::kNone) {
        if (P > 0) {
          loss_none<T><<<grid_for(P, c), 256, 0, s>>>(loss, out, P);
          check_launch("loss_none");
        }
        return;
      }
      loss_total<T><<<1, 1024, 0, s>>>(loss, wsum, P, spec_.reduction == LossReduction::kMean, out);
      check_launch("loss_total");
    });
  }

 private:
  bool softmax_;
  int ignore_input_;
  shape::LossSpec spec_;
};

// ---------------------------------------------------------------- gradients
// One block of 1024: *total = sum over positions of the applied weight (float64).
template <class T, class L>
__global__ void loss_weight_total(const L* __restrict__ labels, const T* __restrict__ W, int64_t P, Labels lb,
                                  double* __restrict__ total) {
  double a = 0;
  for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
    const int64_t t = int64_t(labels[p]);
    a += lb.bad(t) ? kNaN : lb.ignored(t) ? 0.0 : W ? double(ld(W, t)) : 1.0;
  }
  a = group_reduce<1024>(a, SumOp{});
  if (threadIdx.x == 0) *total = a;
}

// dX[n, c, d] = T(exp(log_prob) f) then T(that - f) at c == t (softmax), or T(-f) at t and 0
// elsewhere; f = A(w[t] (none ? G[p] : G[0] / total?)).
template <bool Softmax, class T, class L>
__global__ void loss_grad(const T* __restrict__ G, const T* __restrict__ LP, const L* __restrict__ labels,
                          const T* __restrict__ W, const double* __restrict__ total, T* __restrict__ dX, int64_t N,
                          int64_t C, int64_t D, int red, Labels lb) {
  using A = ct<T>;
  const int64_t n_all = N * C * D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / (C * D), rem = i - n * C * D, c = rem / D, d = rem - c * D, p = n * D + d;
    const int64_t t = int64_t(labels[p]);
    A f;
    if (lb.bad(t)) {
      f = A(kNaN);
    } else {
      const double w = lb.ignored(t) ? 0.0 : W ? double(ld(W, t)) : 1.0;
      double scale = red == 0 ? double(ld(G, p)) : double(ld(G, 0));
      if (red == 2) scale /= *total;
      f = A(w * scale);
    }
    T o;
    if constexpr (Softmax) o = st<T>(A(dexp(ld(LP, i))) * f);
    else o = st<T>(A(0));
    if (c == t && !lb.ignored(t)) o = st<T>(A(ld(&o, 0)) - f);
    dX[i] = o;
  }
}

class LossGradKernel final : public Kernel {
 public:
  LossGradKernel(const KernelInfo& info, bool softmax, int ignore_input = -1)
      : softmax_(softmax), ignore_input_(ignore_input), spec_(info) {}

  void prepare(PrepareContext& ctx) override {
    require_dtype(ctx, ctx.input_dtype(1), false);
    spec_.check_grad(ctx);
    ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(1));
    ctx.request_workspace(sizeof(double));
  }

  void run(RunContext& ctx) override {
    const CudaContext& c = CudaContext::of(ctx);
    cudaStream_t s = c.stream();
    const int64_t N = spec_.n, C = spec_.c, D = spec_.d, P = N * D;
    read_ignore_input(ctx, ignore_input_, spec_);
    const Labels lb{C, spec_.ignore, spec_.has_ignore};
    if (N * C * D == 0) return;
    double* total = static_cast<double*>(ctx.workspace());
    const int red = spec_.reduction == LossReduction::kNone ? 0 : spec_.reduction == LossReduction::kSum ? 1 : 2;
    dispatch<false>(ctx.input(1).dtype(), [&]<class T>() {
      const T* G = static_cast<const T*>(ctx.input(0).raw_data());
      const T* LP = static_cast<const T*>(ctx.input(1).raw_data());
      const T* W = ctx.has_input(3) ? static_cast<const T*>(ctx.input(3).raw_data()) : nullptr;
      T* dX = static_cast<T*>(ctx.output(0).raw_data());
      auto go = [&]<class L>() {
        const L* labels = static_cast<const L*>(ctx.input(2).raw_data());
        if (red == 2) {
          loss_weight_total<T, L><<<1, 1024, 0, s>>>(labels, W, P, lb, total);
          check_launch("loss_weight_total");
        }
        if (softmax_)
          loss_grad<true, T, L><<<grid_for(N * C * D, c), 256, 0, s>>>(G, LP, labels, W, total, dX, N, C, D, red, lb);
        else
          loss_grad<false, T, L><<<grid_for(N * C * D, c), 256, 0, s>>>(G, LP, labels, W, total, dX, N, C, D, red, lb);
        check_launch("loss_grad");
      };
      if (ctx.input(2).dtype() == DType::kInt32) go.template operator()<int32_t>();
      else go.template operator()<int64_t>();
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
    r.add("", softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", 12, kMaxOpsetAll,
          [softmax](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossKernel>(i, softmax); });
  for (bool softmax : {false, true})
    r.add(ops::kDomain, softmax ? "SoftmaxCrossEntropyLossGrad" : "NegativeLogLikelihoodLossGrad", 1, kMaxOpsetAll,
          [softmax](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossGradKernel>(i, softmax); });
  // onnxruntime's com.microsoft Internal forms; ignore_index (input 3 / 4) is a host input by
  // their operator table rows.
  r.add(ops::kMicrosoftDomain, "SoftmaxCrossEntropyLossInternal", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossKernel>(i, true, 3); });
  r.add(ops::kMicrosoftDomain, "SoftmaxCrossEntropyLossInternalGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossGradKernel>(i, true, 4); });
}

}  // namespace onnxtrain::kernels::cuda
