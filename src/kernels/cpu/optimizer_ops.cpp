// The ONNX preview-training optimizer operators (domain ai.onnx.preview.training): one update of
// n tensors per call, computed in double and rounded to the tensors' type.
//   Adagrad(R, T, X1..n, G1..n, H1..n) -> X1..n', H1..n'
//     r = R / (1 + T decay_factor); g = norm_coefficient X + G; H' = H + g^2;
//     X' = X - r g / (sqrt(H') + epsilon)
//   Momentum(R, T, X1..n, G1..n, V1..n) -> X1..n', V1..n'
//     g = norm_coefficient X + G; V' = alpha V + (T > 0 ? beta : 1) g;
//     X' = X - R V' (standard) | X - R (g + alpha V') (nesterov)
//   Adam(R, T, X1..n, G1..n, V1..n, H1..n) -> X1..n', V1..n', H1..n'
//     g = norm_coefficient X + G; V' = alpha V + (1-alpha) g; H' = beta H + (1-beta) g^2;
//     r = T > 0 ? R sqrt(1 - beta^T) / (1 - alpha^T) : R;
//     X' = (1 - norm_coefficient_post) (X - r V' / (sqrt(H') + epsilon))
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels {

namespace {

enum class Algo { kAdagrad, kMomentum, kAdam };

class PreviewOptimizerKernel final : public Kernel {
 public:
  PreviewOptimizerKernel(const KernelInfo& info, Algo algo) : algo_(algo) {
    norm_ = info.attr_float("norm_coefficient", 0.f);
    if (algo == Algo::kAdagrad) {
      decay_ = info.attr_float("decay_factor", 0.f);
      eps_ = info.attr_float("epsilon", 0.f);
      groups_ = 3;
    } else if (algo == Algo::kMomentum) {
      alpha_ = info.attr_float("alpha");
      beta_ = info.attr_float("beta");
      const std::string mode = info.attr_string("mode");
      if (mode != "standard" && mode != "nesterov") info.fail("mode must be 'standard' or 'nesterov', got '", mode, "'");
      nesterov_ = mode == "nesterov";
      groups_ = 3;
    } else {
      alpha_ = info.attr_float("alpha", 0.9f);
      beta_ = info.attr_float("beta", 0.999f);
      eps_ = info.attr_float("epsilon", 0.f);
      norm_post_ = info.attr_float("norm_coefficient_post", 0.f);
      groups_ = 4;
    }
  }
  void prepare(PrepareContext& ctx) override {
    const size_t rest = ctx.num_inputs() - 2;
    if (ctx.num_inputs() < 2 + groups_ || rest % groups_ != 0)
      ctx.fail("expects R, T and ", groups_, " groups of n tensors, got ", ctx.num_inputs(), " inputs");
    n_ = rest / groups_;
    if (ctx.num_outputs() != n_ * (groups_ - 1))
      ctx.fail("expects ", n_ * (groups_ - 1), " outputs, got ", ctx.num_outputs());
    if (shape_numel(ctx.input_shape(0)) != 1 || !dtype_is_float(ctx.input_dtype(0)))
      ctx.fail("R must be a float scalar");
    if (shape_numel(ctx.input_shape(1)) != 1 || ctx.input_dtype(1) != DType::kInt64) ctx.fail("T must be an int64 scalar");
    for (size_t i = 0; i < n_; ++i) {
      const Shape& xs = ctx.input_shape(2 + i);
      const DType dt = ctx.input_dtype(2 + i);
      dispatch<TypeList<float, double>>(dt, ctx.node(), [&]<class T>() {});
      for (size_t gi = 1; gi < groups_; ++gi) {
        const size_t k = 2 + gi * n_ + i;
        if (ctx.input_shape(k) != xs || ctx.input_dtype(k) != dt)
          ctx.fail("input ", k, " must match X", i + 1, " (", dtype_name(dt), shape_to_string(xs), ")");
      }
      for (size_t o = 0; o < groups_ - 1; ++o)
        if (ctx.has_output(o * n_ + i)) ctx.set_output(o * n_ + i, dt, xs);
    }
  }
  void run(RunContext& ctx) override {
    const double R = read_scalar_as_double(ctx.input(0));
    const int64_t T = *ctx.input(1).data<int64_t>();
    for (size_t i = 0; i < n_; ++i) {
      dispatch<TypeList<float, double>>(ctx.input(2 + i).dtype(), ctx.node(), [&]<class V>() {
        const V* X = ctx.input(2 + i).data<V>();
        const V* G = ctx.input(2 + n_ + i).data<V>();
        const V* S1 = ctx.input(2 + 2 * n_ + i).data<V>();
        const V* S2 = groups_ == 4 ? ctx.input(2 + 3 * n_ + i).data<V>() : nullptr;
        // Outputs not requested still need a buffer to write to.
        std::vector<V> scratch;
        auto out = [&](size_t o) -> V* {
          if (ctx.has_output(o * n_ + i)) return ctx.output(o * n_ + i).template data<V>();
          scratch.resize(size_t(ctx.input(2 + i).numel()) * 3);
          return scratch.data() + o * size_t(ctx.input(2 + i).numel());
        };
        V* Xo = out(0);
        V* S1o = out(1);
        V* S2o = groups_ == 4 ? out(2) : nullptr;
        const int64_t n = ctx.input(2 + i).numel();
        double r = R;
        if (algo_ == Algo::kAdagrad) r = R / (1.0 + double(T) * decay_);
        if (algo_ == Algo::kAdam && T > 0)
          r = R * std::sqrt(1.0 - std::pow(double(beta_), double(T))) / (1.0 - std::pow(double(alpha_), double(T)));
        for (int64_t k = 0; k < n; ++k) {
          const double x = X[k], g = double(norm_) * x + double(G[k]);
          if (algo_ == Algo::kAdagrad) {
            const double h = double(S1[k]) + g * g;
            S1o[k] = V(h);
            Xo[k] = V(x - r * g / (std::sqrt(h) + eps_));
          } else if (algo_ == Algo::kMomentum) {
            const double v = double(alpha_) * double(S1[k]) + (T > 0 ? double(beta_) : 1.0) * g;
            S1o[k] = V(v);
            Xo[k] = V(nesterov_ ? x - R * (g + double(alpha_) * v) : x - R * v);
          } else {
            const double v = double(alpha_) * double(S1[k]) + (1.0 - double(alpha_)) * g;
            const double h = double(beta_) * double(S2[k]) + (1.0 - double(beta_)) * g * g;
            S1o[k] = V(v);
            S2o[k] = V(h);
            Xo[k] = V((1.0 - double(norm_post_)) * (x - r * (v / (std::sqrt(h) + double(eps_)))));
          }
        }
      });
    }
  }

 private:
  Algo algo_;
  size_t groups_ = 3, n_ = 0;
  float norm_ = 0, decay_ = 0, eps_ = 0, alpha_ = 0, beta_ = 0, norm_post_ = 0;
  bool nesterov_ = false;
};

KernelFactory make(Algo a) {
  return [a](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<PreviewOptimizerKernel>(i, a); };
}

}  // namespace

void register_training(KernelRegistry& r) {
  const char* d = "ai.onnx.preview.training";
  r.add(d, "Adagrad", 1, kMaxOpsetAll, make(Algo::kAdagrad));
  r.add(d, "Momentum", 1, kMaxOpsetAll, make(Algo::kMomentum));
  r.add(d, "Adam", 1, kMaxOpsetAll, make(Algo::kAdam));
}

}  // namespace onnxtrain::kernels
