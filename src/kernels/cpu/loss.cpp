// Classification losses over [N, C, d1, ...] scores and [N, d1, ...] integer labels.
//   NegativeLogLikelihoodLoss(input, target, weight?)
//       l[n,d] = -input[n, t, d] * w[t]        t = target[n,d], w = weight (or 1); 0 when t == ignore_index
//   SoftmaxCrossEntropyLoss(scores, labels, weights?) -> (output, log_prob?)
//       log_prob = log_softmax(scores, axis 1); l[n,d] = -log_prob[n, t, d] * w[t]
//   reduction: none -> l ([N, d1, ...]); sum -> sum l; mean -> sum l / sum of applied weights.
#include <cmath>
#include <limits>

#include "kernels/cpu/common.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels {

namespace {

// Shared by both losses: attributes, shape checks and the reduction of per-position losses.
class LossKernel : public Kernel {
 public:
  LossKernel(const KernelInfo& info, bool softmax) : softmax_(softmax) {
    const std::string red = info.attr_string("reduction", "mean");
    if (red == "none")
      reduction_ = Reduction::kNone;
    else if (red == "sum")
      reduction_ = Reduction::kSum;
    else if (red == "mean")
      reduction_ = Reduction::kMean;
    else
      info.fail("reduction must be none, sum or mean, got '", red, "'");
    has_ignore_ = info.has_attr("ignore_index");
    ignore_ = info.attr_int("ignore_index", 0);
  }

  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt, ctx.node(), [&]<class T>() {});
    const Shape& s = ctx.input_shape(0);
    const Shape& t = ctx.input_shape(1);
    if (s.size() < 2) ctx.fail("scores must have shape [N, C, d1, ...], got ", shape_to_string(s));
    Shape expect = s;
    expect.erase(expect.begin() + 1);
    if (t != expect) ctx.fail("labels have shape ", shape_to_string(t), ", expected ", shape_to_string(expect));
    if (ctx.input_dtype(1) != DType::kInt32 && ctx.input_dtype(1) != DType::kInt64)
      ctx.fail("labels must be int32 or int64, got ", dtype_name(ctx.input_dtype(1)));
    if (ctx.has_input(2)) {
      if (ctx.input_dtype(2) != dt) ctx.fail("weights have type ", dtype_name(ctx.input_dtype(2)), ", expected ", dtype_name(dt));
      if (ctx.input_shape(2) != Shape{s[1]})
        ctx.fail("weights have shape ", shape_to_string(ctx.input_shape(2)), ", expected [", s[1], "]");
    }
    n_ = s[0];
    c_ = s[1];
    d_ = dim_product(s, 2, s.size());
    ctx.set_output(0, dt, reduction_ == Reduction::kNone ? t : Shape{});
    if (softmax_ && ctx.has_output(1)) ctx.set_output(1, dt, s);
    ctx.request_workspace(size_t(n_ * d_) * 2 * sizeof(double));
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t N = n_, C = c_, D = d_, P = N * D;
    double* loss = static_cast<double*>(ctx.workspace());  // per position: loss, applied weight
    double* wsum = loss + P;
    dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using A = compute_t<T>;
      const T* X = x.data<T>();
      const T* W = ctx.has_input(2) ? ctx.input(2).data<T>() : nullptr;
      T* LP = softmax_ && ctx.has_output(1) ? ctx.output(1).data<T>() : nullptr;
      dispatch<IndexTypes>(ctx.input(1).dtype(), ctx.node(), [&]<class L>() {
        const L* labels = ctx.input(1).data<L>();
        for (int64_t p = 0; p < P; ++p) {
          const int64_t t = int64_t(labels[p]);
          if ((t < 0 || t >= C) && !(has_ignore_ && t == ignore_))
            ctx.fail("label ", t, " at position ", p, " is out of range [0, ", C, ")");
        }
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
            const bool ignored = has_ignore_ && t == ignore_;
            const double w = ignored ? 0.0 : W ? double(A(W[t])) : 1.0;
            loss[p] = ignored ? 0.0 : -(double(A(xs[t * D])) - lse) * w;
            wsum[p] = w;
          }
        });
      });
      T* out = ctx.output(0).data<T>();
      if (reduction_ == Reduction::kNone) {
        for (int64_t p = 0; p < P; ++p) out[p] = T(A(loss[p]));
        return;
      }
      double total = 0, weights = 0;
      for (int64_t p = 0; p < P; ++p) {
        total += loss[p];
        weights += wsum[p];
      }
      out[0] = T(A(reduction_ == Reduction::kSum ? total : total / weights));
    });
  }

 private:
  enum class Reduction { kNone, kSum, kMean };
  bool softmax_;
  Reduction reduction_ = Reduction::kMean;
  bool has_ignore_;
  int64_t ignore_;
  int64_t n_ = 0, c_ = 0, d_ = 1;
};

}  // namespace

void register_loss(KernelRegistry& r) {
  for (bool softmax : {false, true})
    r.add(softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", 12, kMaxOpsetAll,
          [softmax](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossKernel>(i, softmax); });
}

}  // namespace onnxtrain::kernels
