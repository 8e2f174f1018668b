// The update step of training as operators: optimizers, gradient accumulation, global-norm
// clipping (domain com.onnxtrain, rows of src/ops/optimizers.h), and the ONNX
// ai.onnx.preview.training optimizers. One node updates n tensors; every update output
// overwrites its input in place (set_output_inplace) and is correct whether or not the planner
// makes them the same memory: per element, all inputs are read before any output is written.
//
// com.onnxtrain optimizers (lr, step t >= 1, grad_scale?, W1..n, G1..n, states) -> W1..n', states'.
// g = G * grad_scale first, in the weight's type; float arithmetic in the weight's type, scalars
// in double then rounded (torch.optim's order of operations):
//   SGDOptimizer       d = g + lambda w; w += -lr d
//   MomentumOptimizer  d = g + lambda w; b = t == 1 ? d : momentum b + d;
//                      w += -lr (nesterov ? d + momentum b : b)
//   AdamOptimizer      g += lambda w; m = alpha m + (1-alpha) g; v = beta v + (1-beta) g g;
//                      w += -(lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), bc = 1 - beta^t (or 1)
//   AdamWOptimizer     w *= 1 - lr lambda, then Adam without the L2 term
//   LambOptimizer      m, v as Adam (of g); r = (m/bc1) / (sqrt(v/bc2) + eps) + lambda w (double);
//                      w += -lr clamp(|w|/|r|, ratio_min, ratio_max) r   (norms per tensor)
//   AdagradOptimizer   g += lambda w; s += g g; w += -(lr / (1 + (t-1) lr_decay)) g / (sqrt(s) + eps)
// AccumulateGradients(reset, A1..n, G1..n) -> A1..n': A' = reset ? G : A + G
// GlobalNormClip(G1..n) -> scale[1], norm[1] (float64): norm = sqrt(sum g^2) (double, tensors in
//   order), coef = max_norm / (norm + 1e-6), scale = coef < 1 ? coef : 1 (torch's clip_grad_norm_)
// LossScaleCheck(loss_scale, G1..n) -> scale[1], all_finite[1]: the same over gradients of a loss
//   multiplied by loss_scale, unscaled (scale includes 1 / loss_scale), all_finite = no inf/NaN
// With attribute update_signal = 1 an optimizer takes input 3, update_signal (bool [1]), before
//   the weights: false leaves every weight and state as it was (the step is skipped).
//
// ai.onnx.preview.training (R, T, X1..n, G1..n, states) -> X1..n', states', on the same updates:
//   Adagrad   g = norm_coefficient X + G; H' = H + g^2; X' = X - R / (1 + T decay_factor) g / (sqrt(H') + eps)
//   Momentum  g as Adagrad; V' = alpha V + (T > 0 ? beta : 1) g;
//             X' = X - R V' (standard) | X - R (g + alpha V') (nesterov)
//   Adam      g as Adagrad; V' = alpha V + (1-alpha) g; H' = beta H + (1-beta) g^2;
//             r = T > 0 ? R sqrt(1 - beta^T) / (1 - alpha^T) : R;
//             X' = (1 - norm_coefficient_post) (X - r V' / (sqrt(H') + epsilon))
//
// Work split: the n tensors are one concatenation; one parallel region splits its total element
// count and maps chunks to (tensor, range). Sums (norms) use fixed blocks of kNormBlock elements
// added in block order, so every result is independent of the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/common.h"
#include "ops/onnxtrain_ops.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels::cpu {

using ops::find_optimizer_spec;
using ops::kAccumulateGradients;
using ops::kGlobalNormClip;
using ops::kLossScaleCheck;
using ops::kOptimizerFirstWeightInput;
using ops::kOptimizerGradScaleInput;
using ops::kOptimizerLrInput;
using ops::kOptimizerStepInput;
using ops::kOptimizerUpdateSignalAttr;
using ops::kOptimizerUpdateSignalInput;
using ops::OptimizerSpec;
using ops::optimizer_specs;

namespace {

constexpr int64_t kGrain = 16384;     // elements per thread chunk, at least
constexpr int64_t kNormBlock = 8192;  // elements per partial sum of a norm

// ---------------------------------------------------------------- tensor sets
// n tensors of one node seen as one concatenation of their elements.
struct TensorSet {
  std::vector<DType> dtype;
  std::vector<int64_t> offset{0};  // n + 1 prefix sums of the element counts

  void clear() {
    dtype.clear();
    offset.assign(1, 0);
  }
  void add(DType dt, int64_t numel) {
    dtype.push_back(dt);
    offset.push_back(offset.back() + numel);
  }
  size_t size() const { return dtype.size(); }
  int64_t numel(size_t k) const { return offset[k + 1] - offset[k]; }
  int64_t total() const { return offset.back(); }

  /// Calls f(k, lo, hi) for the pieces of the concatenation's [b, e), in order (lo, hi: indices
  /// into tensor k).
  template <class F>
  void pieces(int64_t b, int64_t e, F&& f) const {
    size_t k = size_t(std::upper_bound(offset.begin(), offset.end(), b) - offset.begin()) - 1;
    for (; b < e; ++k) {
      const int64_t hi = std::min(e, offset[k + 1]);
      if (hi > b) f(k, b - offset[k], hi - offset[k]);
      b = std::max(b, hi);
    }
  }
  /// One parallel region over every element of every tensor.
  template <class F>
  void parallel(F&& f) const {
    parallel_for(total(), kGrain, [&](int64_t b, int64_t e) { pieces(b, e, f); });
  }
};

/// Calls f.template operator()<T>() for a float32 or float64 tensor (validated in prepare).
template <class F>
void float_or_double(DType dt, F&& f) {
  if (dt == DType::kFloat32) f.template operator()<float>();
  else f.template operator()<double>();
}

// Pointers of one tensor of an update: tensor (in, out), gradient, states (in, out).
struct Slot {
  const void* w = nullptr;
  void* wo = nullptr;
  const void* g = nullptr;
  const void* s[2] = {nullptr, nullptr};
  void* so[2] = {nullptr, nullptr};
};

// ---------------------------------------------------------------- the update rules
// One element: rule(w, g, s0, s1) returns the new weight and states from the weight, the
// (scaled) gradient and the states, all by value. Constructed once per run with the step's
// scalars rounded to T. This file is compiled without floating-point contraction
// (-ffp-contract=off): every fused multiply-add is an explicit std::fma, placed where GCC's
// default contraction fused the host optimizers these replace, so the rounding no longer
// depends on the compiler.
template <class T>
struct Updated {
  T w, s0, s1;
};

template <class T>
struct SgdRule {
  static constexpr int kStates = 0;
  T wd, a;  // a = -lr
  bool decay;
  Updated<T> operator()(T w, T g, T, T) const {
    const T d = decay ? std::fma(wd, w, g) : g;
    return {std::fma(a, d, w), T(0), T(0)};
  }
};

template <class T>
struct MomentumRule {
  static constexpr int kStates = 1;
  T m, c, wd, a;  // c: coefficient of d in the momentum (torch: 1; ONNX: beta after the first step)
  bool decay, first, nesterov;  // first: the momentum starts at d (torch's first step)
  Updated<T> operator()(T w, T g, T s0, T) const {
    const T d = decay ? std::fma(wd, w, g) : g;
    const T b = first ? d : std::fma(s0, m, c * d);
    const T u = nesterov ? std::fma(m, b, d) : b;
    return {std::fma(a, u, w), b, T(0)};
  }
};

template <class T>
struct AdamRule {
  static constexpr int kStates = 2;
  T b1, b2, one_b1, one_b2, eps, l2, pre, post, step, bc2_sqrt;
  bool use_l2, use_pre, use_post;  // L2 term in g; decoupled decay before (AdamW) / after (ONNX)
  Updated<T> operator()(T w, T g, T s0, T s1) const {
    if (use_pre) w = w * pre;
    if (use_l2) g = std::fma(l2, w, g);
    const T m = std::fma(s0, b1, one_b1 * g);
    const T v = std::fma(s1, b2, one_b2 * g * g);
    const T denom = std::sqrt(v) / bc2_sqrt + eps;
    w = w + step * m / denom;
    if (use_post) w = w * post;
    return {w, m, v};
  }
};

template <class T>
struct AdagradRule {
  static constexpr int kStates = 1;
  T wd, a, eps;  // a = -(decayed lr)
  bool decay;
  Updated<T> operator()(T w, T g, T s0, T) const {
    if (decay) g = std::fma(wd, w, g);
    const T h = std::fma(g, g, s0);
    const T std_ = std::sqrt(h) + eps;
    return {w + a * g / std_, h, T(0)};
  }
};

// Applies `rule` to elements [lo, hi) of one tensor. Correct when outputs alias their inputs
// (same index read, then written), so the loop vectorizes whatever the aliasing.
template <class T, class Rule>
void update_range(const Rule& rule_ref, const Slot& p, T scale, int64_t lo, int64_t hi) {
  constexpr int S = Rule::kStates;
  const Rule rule = rule_ref;  // a local: stores through the outputs cannot change it
  const T* W = static_cast<const T*>(p.w);
  const T* G = static_cast<const T*>(p.g);
  T* Wo = static_cast<T*>(p.wo);
  const T* S0 = static_cast<const T*>(p.s[0]);
  const T* S1 = static_cast<const T*>(p.s[1]);
  T* S0o = static_cast<T*>(p.so[0]);
  T* S1o = static_cast<T*>(p.so[1]);
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    T s0 = T(0), s1 = T(0);
    if constexpr (S > 0) s0 = S0[i];
    if constexpr (S > 1) s1 = S1[i];
    const Updated<T> u = rule(W[i], G[i] * scale, s0, s1);
    Wo[i] = u.w;
    if constexpr (S > 0) S0o[i] = u.s0;
    if constexpr (S > 1) S1o[i] = u.s1;
  }
}

// Runs a rule over every tensor in one parallel region. make.template operator()<T>() builds the
// rule for element type T (float32 and float64 tensors may share a node).
template <template <class> class Rule, class Make>
void update_all(const TensorSet& set, const std::vector<Slot>& slots, double grad_scale, Make&& make) {
  const Rule<float> rf = make.template operator()<float>();
  const Rule<double> rd = make.template operator()<double>();
  const float sf = float(grad_scale);
  set.parallel([&](size_t k, int64_t lo, int64_t hi) {
    if (set.dtype[k] == DType::kFloat32) update_range<float>(rf, slots[k], sf, lo, hi);
    else update_range<double>(rd, slots[k], grad_scale, lo, hi);
  });
}

// Step scalars shared by the torch-style optimizers and the ONNX operators.
double adagrad_lr(double lr, double decays, float lr_decay) { return lr / (1.0 + decays * double(lr_decay)); }
double bias_correction(bool on, float beta, int64_t t) { return on ? 1.0 - std::pow(double(beta), double(t)) : 1.0; }

// ---------------------------------------------------------------- LAMB
// Two passes, no storage of the update direction r: pass 1 updates the moments and sums |w|^2
// and |r|^2 per fixed block; pass 2 recomputes r from the stored moments (same bits) and
// updates w with the tensor's trust ratio.
struct LambHyper {
  double b1, b2, bc1, bc2, eps, wd;

  template <class T>
  T direction(T m, T v, T w) const {
    return T(std::fma(wd, double(w), (double(m) / bc1) / (std::sqrt(double(v) / bc2) + eps)));
  }
};

// Fixed blocks of at most kNormBlock elements that never straddle tensors.
struct BlockSet {
  std::vector<int64_t> first{0};  // n + 1 prefix sums of the blocks per tensor

  void init(const TensorSet& set) {
    first.assign(1, 0);
    for (size_t k = 0; k < set.size(); ++k) first.push_back(first.back() + (set.numel(k) + kNormBlock - 1) / kNormBlock);
  }
  int64_t count() const { return first.back(); }
  /// Calls f(k, lo, hi) for block j.
  template <class F>
  void block(const TensorSet& set, int64_t j, F&& f) const {
    const size_t k = size_t(std::upper_bound(first.begin(), first.end(), j) - first.begin()) - 1;
    const int64_t lo = (j - first[k]) * kNormBlock;
    f(k, lo, std::min(lo + kNormBlock, set.numel(k)));
  }
};

template <class T>
void lamb_moments(const LambHyper& h, const Slot& p, T scale, int64_t lo, int64_t hi, double* sums) {
  const T* W = static_cast<const T*>(p.w);
  const T* G = static_cast<const T*>(p.g);
  const T* M = static_cast<const T*>(p.s[0]);
  const T* V = static_cast<const T*>(p.s[1]);
  T* Mo = static_cast<T*>(p.so[0]);
  T* Vo = static_cast<T*>(p.so[1]);
  const T b1 = T(h.b1), b2 = T(h.b2), one_b1 = T(1.0 - h.b1), one_b2 = T(1.0 - h.b2);
  double wn = 0, rn = 0;
  for (int64_t i = lo; i < hi; ++i) {
    const T w = W[i], g = G[i] * scale;
    const T m = std::fma(M[i], b1, one_b1 * g);
    const T v = std::fma(V[i], b2, one_b2 * g * g);
    Mo[i] = m;
    Vo[i] = v;
    const T r = h.direction(m, v, w);
    wn = std::fma(double(w), double(w), wn);
    rn = std::fma(double(r), double(r), rn);
  }
  sums[0] = wn;
  sums[1] = rn;
}

template <class T>
void lamb_apply(const LambHyper& h, const Slot& p, double a, int64_t lo, int64_t hi) {
  const T* W = static_cast<const T*>(p.w);
  const T* M = static_cast<const T*>(p.so[0]);  // this step's moments
  const T* V = static_cast<const T*>(p.so[1]);
  T* Wo = static_cast<T*>(p.wo);
  const T ta = T(a);
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const T w = W[i];
    Wo[i] = std::fma(ta, h.direction(M[i], V[i], w), w);
  }
}

// ---------------------------------------------------------------- validation helpers
bool one_element(const Shape& s) { return s.empty() || (s.size() == 1 && s[0] == 1); }

void check_scalar(PrepareContext& ctx, size_t i, const char* what, DType dt) {
  if (!ctx.has_input(i)) ctx.fail(what, " (input ", i, ") is required");
  if (ctx.input_dtype(i) != dt || !one_element(ctx.input_shape(i)))
    ctx.fail(what, " (input ", i, ") must be ", dtype_name(dt), " of shape [] or [1], got ", dtype_name(ctx.input_dtype(i)),
             shape_to_string(ctx.input_shape(i)));
}

void check_float_tensor(PrepareContext& ctx, size_t i, const std::string& what) {
  if (!ctx.has_input(i)) ctx.fail(what, " (input ", i, ") is missing");
  const DType dt = ctx.input_dtype(i);
  if (dt != DType::kFloat32 && dt != DType::kFloat64)
    ctx.fail(what, " (input ", i, ") must be float or double, got ", dtype_name(dt));
}

void check_like(PrepareContext& ctx, size_t i, const std::string& what, size_t ref, const std::string& ref_what) {
  if (!ctx.has_input(i)) ctx.fail(what, " (input ", i, ") is missing");
  if (ctx.input_dtype(i) != ctx.input_dtype(ref) || ctx.input_shape(i) != ctx.input_shape(ref))
    ctx.fail(what, " (input ", i, ") is ", dtype_name(ctx.input_dtype(i)), shape_to_string(ctx.input_shape(i)), ", ",
             ref_what, " is ", dtype_name(ctx.input_dtype(ref)), shape_to_string(ctx.input_shape(ref)));
}

void require_named_outputs(PrepareContext& ctx, size_t expected) {
  if (ctx.num_outputs() != expected) ctx.fail("expects ", expected, " outputs, got ", ctx.num_outputs());
  for (size_t k = 0; k < expected; ++k)
    if (!ctx.has_output(k)) ctx.fail("output ", k, " must be named (every output overwrites its input in place)");
}

// ---------------------------------------------------------------- com.onnxtrain optimizers
using Algo = ops::OptimizerAlgorithm;

class OptimizerKernel final : public Kernel {
 public:
  OptimizerKernel(const KernelInfo& info, const OptimizerSpec& spec) : algo_(spec.algorithm), spec_(&spec) {
    for (const auto& a : info.node().attrs)
      if (!spec_->has_float(a.name) && !spec_->has_int(a.name) && a.name != kOptimizerUpdateSignalAttr)
        info.fail(spec_->name, " has no attribute '", a.name, "' (it has: ", spec_->attr_list(), ", ",
                  kOptimizerUpdateSignalAttr, ")");
    const int64_t gated = info.attr_int(kOptimizerUpdateSignalAttr, 0);
    if (gated != 0 && gated != 1) info.fail("attribute '", kOptimizerUpdateSignalAttr, "' must be 0 or 1, got ", gated);
    first_ = kOptimizerFirstWeightInput + size_t(gated);
    auto f = [&](const char* n) { return spec_->has_float(n) ? info.attr_float(n, spec_->float_default(n)) : 0.f; };
    auto flag = [&](const char* n) {
      if (!spec_->has_int(n)) return false;
      const int64_t v = info.attr_int(n, spec_->int_default(n));
      if (v != 0 && v != 1) info.fail("attribute '", n, "' must be 0 or 1, got ", v);
      return v != 0;
    };
    lambda_ = f("lambda");
    momentum_ = f("momentum");
    alpha_ = f("alpha");
    beta_ = f("beta");
    eps_ = f("epsilon");
    lr_decay_ = f("lr_decay");
    ratio_min_ = f("ratio_min");
    ratio_max_ = f("ratio_max");
    nesterov_ = flag("nesterov");
    bias_ = flag("do_bias_correction");
  }

  void prepare(PrepareContext& ctx) override {
    const size_t S = spec_->states.size(), groups = 2 + S, first = first_;
    const size_t nin = ctx.num_inputs();
    if (nin < first + groups || (nin - first) % groups != 0)
      ctx.fail("expects lr, step, grad_scale (may be empty)", gated() ? ", update_signal" : "", " and ", groups,
               " groups of n tensors (weights, gradients", S ? ", " : "", state_list(), "), got ", nin, " inputs");
    n_ = (nin - first) / groups;
    check_scalar(ctx, kOptimizerLrInput, "lr", DType::kFloat32);
    check_scalar(ctx, kOptimizerStepInput, "step", DType::kInt64);
    if (ctx.has_input(kOptimizerGradScaleInput)) check_scalar(ctx, kOptimizerGradScaleInput, "grad_scale", DType::kFloat64);
    if (gated()) check_scalar(ctx, kOptimizerUpdateSignalInput, "update_signal", DType::kBool);
    require_named_outputs(ctx, n_ * (1 + S));
    set_.clear();
    for (size_t i = 0; i < n_; ++i) {
      const std::string wi = "weight " + std::to_string(i + 1);
      check_float_tensor(ctx, first + i, wi);
      check_like(ctx, first + n_ + i, "gradient " + std::to_string(i + 1), first + i, wi);
      for (size_t s = 0; s < S; ++s)
        check_like(ctx, first + (2 + s) * n_ + i, spec_->states[s] + " " + std::to_string(i + 1), first + i, wi);
      ctx.set_output_inplace(i, first + i);
      for (size_t s = 0; s < S; ++s) ctx.set_output_inplace((1 + s) * n_ + i, first + (2 + s) * n_ + i);
      set_.add(ctx.input_dtype(first + i), shape_numel(ctx.input_shape(first + i)));
    }
    slots_.assign(n_, Slot{});
    if (algo_ == Algo::kLamb) {
      blocks_.init(set_);
      ctx.request_workspace(size_t(2 * blocks_.count() + int64_t(n_)) * sizeof(double));
    }
    ctx.set_nondeterministic();  // updates state: never folded
  }

  void run(RunContext& ctx) override {
    const float lr = *ctx.input(kOptimizerLrInput).data<float>();
    if (!std::isfinite(lr)) ctx.fail("learning rate ", lr, " is not finite");
    const int64_t t = *ctx.input(kOptimizerStepInput).data<int64_t>();
    if (t < 1) ctx.fail("step must be >= 1 (the 1-based index of this update), got ", t);
    const double scale =
        ctx.has_input(kOptimizerGradScaleInput) ? *ctx.input(kOptimizerGradScaleInput).data<double>() : 1.0;
    const size_t first = first_, S = spec_->states.size();
    for (size_t i = 0; i < n_; ++i) {
      Slot& p = slots_[i];
      p.w = ctx.input(first + i).raw_data();
      p.wo = ctx.output(i).raw_data();
      p.g = ctx.input(first + n_ + i).raw_data();
      for (size_t s = 0; s < S; ++s) {
        p.s[s] = ctx.input(first + (2 + s) * n_ + i).raw_data();
        p.so[s] = ctx.output((1 + s) * n_ + i).raw_data();
      }
    }
    if (gated() && !*ctx.input(kOptimizerUpdateSignalInput).data<bool>()) {
      // Skipped update (a non-finite gradient under loss scaling): every output keeps its input.
      for (size_t i = 0; i < n_; ++i) {
        const size_t bytes = size_t(set_.numel(i)) * dtype_size(set_.dtype[i]);
        if (slots_[i].wo != slots_[i].w) std::memcpy(slots_[i].wo, slots_[i].w, bytes);
        for (size_t s = 0; s < S; ++s)
          if (slots_[i].so[s] != slots_[i].s[s]) std::memcpy(slots_[i].so[s], slots_[i].s[s], bytes);
      }
      return;
    }
    const double nlr = -double(lr);
    switch (algo_) {
      case Algo::kSgd:
        update_all<SgdRule>(set_, slots_, scale, [&]<class T>() {
          return SgdRule<T>{.wd = T(lambda_), .a = T(nlr), .decay = T(lambda_) != T(0)};
        });
        break;
      case Algo::kMomentum:
        update_all<MomentumRule>(set_, slots_, scale, [&]<class T>() {
          return MomentumRule<T>{.m = T(momentum_), .c = T(1), .wd = T(lambda_), .a = T(nlr),
                                 .decay = T(lambda_) != T(0), .first = t == 1, .nesterov = nesterov_};
        });
        break;
      case Algo::kAdam:
      case Algo::kAdamW: {
        const bool decoupled = algo_ == Algo::kAdamW;
        const double b1 = alpha_, b2 = beta_, wd = lambda_;
        const double bc1 = bias_correction(bias_, alpha_, t), bc2 = bias_correction(bias_, beta_, t);
        update_all<AdamRule>(set_, slots_, scale, [&]<class T>() {
          return AdamRule<T>{.b1 = T(b1), .b2 = T(b2), .one_b1 = T(1.0 - b1), .one_b2 = T(1.0 - b2),
                             .eps = T(double(eps_)), .l2 = T(wd), .pre = T(1.0 - double(lr) * wd), .post = T(1),
                             .step = T(-(double(lr) / bc1)), .bc2_sqrt = T(std::sqrt(bc2)),
                             .use_l2 = !decoupled && wd != 0.0, .use_pre = decoupled && wd != 0.0, .use_post = false};
        });
        break;
      }
      case Algo::kAdagrad: {
        const double clr = adagrad_lr(lr, double(t - 1), lr_decay_);
        update_all<AdagradRule>(set_, slots_, scale, [&]<class T>() {
          return AdagradRule<T>{.wd = T(lambda_), .a = T(-clr), .eps = T(eps_), .decay = T(lambda_) != T(0)};
        });
        break;
      }
      case Algo::kLamb: run_lamb(ctx, lr, t, scale); break;
    }
  }

 private:
  bool gated() const { return first_ != kOptimizerFirstWeightInput; }
  std::string state_list() const {
    std::string r;
    for (const auto& s : spec_->states) r += (r.empty() ? "" : ", ") + s;
    return r;
  }

  void run_lamb(RunContext& ctx, float lr, int64_t t, double scale) {
    const LambHyper h{alpha_, beta_, bias_correction(bias_, alpha_, t), bias_correction(bias_, beta_, t), eps_, lambda_};
    double* sums = static_cast<double*>(ctx.workspace());  // |w|^2, |r|^2 per block
    double* coef = sums + 2 * blocks_.count();              // -lr * ratio per tensor
    auto each_block = [&](auto&& f) {
      parallel_for(blocks_.count(), std::max<int64_t>(1, kGrain / kNormBlock), [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) blocks_.block(set_, j, [&](size_t k, int64_t lo, int64_t hi) { f(j, k, lo, hi); });
      });
    };
    each_block([&](int64_t j, size_t k, int64_t lo, int64_t hi) {
      float_or_double(set_.dtype[k], [&]<class T>() {
        lamb_moments<T>(h, slots_[k], T(scale), lo, hi, sums + 2 * j);
      });
    });
    for (size_t k = 0; k < n_; ++k) {
      double wn = 0, rn = 0;
      for (int64_t j = blocks_.first[k]; j < blocks_.first[k + 1]; ++j) {
        wn += sums[2 * j];
        rn += sums[2 * j + 1];
      }
      wn = std::sqrt(wn);
      rn = std::sqrt(rn);
      double ratio = (wn > 0 && rn > 0) ? wn / rn : 1.0;
      ratio = std::min<double>(std::max<double>(ratio, ratio_min_), ratio_max_);
      coef[k] = -double(lr) * ratio;
    }
    each_block([&](int64_t, size_t k, int64_t lo, int64_t hi) {
      float_or_double(set_.dtype[k], [&]<class T>() { lamb_apply<T>(h, slots_[k], coef[k], lo, hi); });
    });
  }

  Algo algo_;
  const OptimizerSpec* spec_ = nullptr;
  float lambda_ = 0, momentum_ = 0, alpha_ = 0, beta_ = 0, eps_ = 0, lr_decay_ = 0, ratio_min_ = 0, ratio_max_ = 0;
  bool nesterov_ = false, bias_ = false;
  size_t first_ = kOptimizerFirstWeightInput;  // first weight input (after update_signal when gated)
  size_t n_ = 0;
  TensorSet set_;
  BlockSet blocks_;
  std::vector<Slot> slots_;  // filled per run
};

// ---------------------------------------------------------------- AccumulateGradients
class AccumulateGradientsKernel final : public Kernel {
 public:
  explicit AccumulateGradientsKernel(const KernelInfo& info) {
    if (!info.node().attrs.empty()) info.fail("AccumulateGradients has no attributes, got '", info.node().attrs[0].name, "'");
  }
  void prepare(PrepareContext& ctx) override {
    const size_t nin = ctx.num_inputs();
    if (nin < 3 || (nin - 1) % 2 != 0)
      ctx.fail("expects reset and 2 groups of n tensors (accumulators, gradients), got ", nin, " inputs");
    n_ = (nin - 1) / 2;
    check_scalar(ctx, 0, "reset", DType::kBool);
    require_named_outputs(ctx, n_);
    set_.clear();
    for (size_t i = 0; i < n_; ++i) {
      const std::string ai = "accumulator " + std::to_string(i + 1);
      check_float_tensor(ctx, 1 + i, ai);
      check_like(ctx, 1 + n_ + i, "gradient " + std::to_string(i + 1), 1 + i, ai);
      ctx.set_output_inplace(i, 1 + i);
      set_.add(ctx.input_dtype(1 + i), shape_numel(ctx.input_shape(1 + i)));
    }
    ctx.set_nondeterministic();  // updates state: never folded
  }
  void run(RunContext& ctx) override {
    const bool reset = *ctx.input(0).data<bool>();
    set_.parallel([&](size_t k, int64_t lo, int64_t hi) {
      float_or_double(set_.dtype[k], [&]<class T>() {
        const T* A = ctx.input(1 + k).data<T>();
        const T* G = ctx.input(1 + n_ + k).data<T>();
        T* Ao = ctx.output(k).data<T>();
        if (reset) {
          std::memmove(Ao + lo, G + lo, size_t(hi - lo) * sizeof(T));
        } else {
#pragma omp simd
          for (int64_t j = lo; j < hi; ++j) Ao[j] = A[j] + G[j];
        }
      });
    });
  }

 private:
  size_t n_ = 0;
  TensorSet set_;
};

// ---------------------------------------------------------------- GlobalNormClip
// Sum of the squares of inputs first.. (the tensors of `set`), in double, over fixed blocks of
// the concatenation, each summed sequentially from 0 (one block of up to kNormBlock elements is
// exactly the sequential sum over the tensors in order), added in block order: the same bits for
// any thread count. The workspace holds `blocks` partial sums. Not finite when an element is not
// (float32 squares cannot overflow a double sum).
double sum_of_squares(RunContext& ctx, const TensorSet& set, size_t first, int64_t blocks) {
  double* partial = static_cast<double*>(ctx.workspace());
  parallel_for(blocks, std::max<int64_t>(1, kGrain / kNormBlock), [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      double s = 0;
      set.pieces(j * kNormBlock, std::min(set.total(), (j + 1) * kNormBlock), [&](size_t k, int64_t lo, int64_t hi) {
        float_or_double(set.dtype[k], [&]<class T>() {
          const T* p = ctx.input(first + k).data<T>();
          for (int64_t i = lo; i < hi; ++i) s = std::fma(double(p[i]), double(p[i]), s);
        });
      });
      partial[j] = s;
    }
  });
  double total = 0;
  for (int64_t j = 0; j < blocks; ++j) total += partial[j];
  return total;
}

class GlobalNormClipKernel final : public Kernel {
 public:
  explicit GlobalNormClipKernel(const KernelInfo& info) {
    for (const auto& a : info.node().attrs)
      if (a.name != "max_norm") info.fail("GlobalNormClip has no attribute '", a.name, "' (it has: max_norm)");
    max_norm_ = info.attr_float("max_norm");
    if (!(max_norm_ > 0.f) || !std::isfinite(max_norm_)) info.fail("max_norm must be finite and > 0, got ", max_norm_);
  }
  void prepare(PrepareContext& ctx) override {
    if (ctx.num_inputs() < 1) ctx.fail("expects at least one gradient");
    if (ctx.num_outputs() < 1 || ctx.num_outputs() > 2) ctx.fail("expects outputs scale and optional norm, got ", ctx.num_outputs());
    if (!ctx.has_output(0)) ctx.fail("output 0 (scale) must be named");
    set_.clear();
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      check_float_tensor(ctx, i, "gradient " + std::to_string(i + 1));
      set_.add(ctx.input_dtype(i), shape_numel(ctx.input_shape(i)));
    }
    ctx.set_output(0, DType::kFloat64, {1});
    if (ctx.has_output(1)) ctx.set_output(1, DType::kFloat64, {1});
    blocks_ = (set_.total() + kNormBlock - 1) / kNormBlock;
    ctx.request_workspace(size_t(std::max<int64_t>(blocks_, 1)) * sizeof(double));
  }
  void run(RunContext& ctx) override {
    const double norm = std::sqrt(sum_of_squares(ctx, set_, 0, blocks_));
    const double coef = double(max_norm_) / (norm + 1e-6);
    *ctx.output(0).data<double>() = coef < 1.0 ? coef : 1.0;
    if (ctx.has_output(1)) *ctx.output(1).data<double>() = norm;
  }

 private:
  float max_norm_ = 0;
  int64_t blocks_ = 0;
  TensorSet set_;
};

// ---------------------------------------------------------------- LossScaleCheck
// LossScaleCheck(loss_scale: float32 [1], G1..Gn) -> grad_scale: float64 [1], all_finite: bool [1]
// The gradients of a loss multiplied by loss_scale: all_finite = every element is finite;
// grad_scale = 1 / loss_scale, times the clipping coefficient min(max_norm / (norm + 1e-6), 1)
// of the unscaled norm norm = sqrt(sum g^2) / loss_scale when attribute max_norm > 0 (0: no
// clipping). One pass over the gradients. A non-finite step gives grad_scale 0.
class LossScaleCheckKernel final : public Kernel {
 public:
  explicit LossScaleCheckKernel(const KernelInfo& info) {
    for (const auto& a : info.node().attrs)
      if (a.name != "max_norm") info.fail("LossScaleCheck has no attribute '", a.name, "' (it has: max_norm)");
    max_norm_ = info.attr_float("max_norm", 0.f);
    if (!(max_norm_ >= 0.f) || !std::isfinite(max_norm_)) info.fail("max_norm must be finite and >= 0, got ", max_norm_);
  }
  void prepare(PrepareContext& ctx) override {
    if (ctx.num_inputs() < 2) ctx.fail("expects the loss scale and at least one gradient");
    check_scalar(ctx, 0, "loss_scale", DType::kFloat32);
    if (ctx.num_outputs() != 2 || !ctx.has_output(0) || !ctx.has_output(1))
      ctx.fail("expects two named outputs (grad_scale, all_finite), got ", ctx.num_outputs());
    set_.clear();
    for (size_t i = 1; i < ctx.num_inputs(); ++i) {
      check_float_tensor(ctx, i, "gradient " + std::to_string(i));
      set_.add(ctx.input_dtype(i), shape_numel(ctx.input_shape(i)));
    }
    ctx.set_output(0, DType::kFloat64, {1});
    ctx.set_output(1, DType::kBool, {1});
    blocks_ = (set_.total() + kNormBlock - 1) / kNormBlock;
    ctx.request_workspace(size_t(std::max<int64_t>(blocks_, 1)) * sizeof(double));
    ctx.set_nondeterministic();  // depends on the step's gradients: never folded
  }
  void run(RunContext& ctx) override {
    const double ls = double(*ctx.input(0).data<float>());
    if (!(ls > 0) || !std::isfinite(ls)) ctx.fail("loss_scale ", ls, " must be finite and > 0");
    const double total = sum_of_squares(ctx, set_, 1, blocks_);
    const bool finite = std::isfinite(total);
    double scale = 1.0 / ls;
    if (finite && max_norm_ > 0) {
      const double coef = double(max_norm_) / (std::sqrt(total) / ls + 1e-6);
      if (coef < 1.0) scale *= coef;
    }
    *ctx.output(0).data<double>() = finite ? scale : 0.0;
    *ctx.output(1).data<bool>() = finite;
  }

 private:
  float max_norm_ = 0;
  int64_t blocks_ = 0;
  TensorSet set_;
};

// ---------------------------------------------------------------- ai.onnx.preview.training
enum class Preview { kAdagrad, kMomentum, kAdam };

class PreviewOptimizerKernel final : public Kernel {
 public:
  PreviewOptimizerKernel(const KernelInfo& info, Preview algo) : algo_(algo) {
    norm_ = info.attr_float("norm_coefficient", 0.f);
    if (algo == Preview::kAdagrad) {
      decay_ = info.attr_float("decay_factor", 0.f);
      eps_ = info.attr_float("epsilon", 0.f);
      groups_ = 3;
    } else if (algo == Preview::kMomentum) {
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
    if (ctx.num_inputs() < 2 + groups_ || (ctx.num_inputs() - 2) % groups_ != 0)
      ctx.fail("expects R, T and ", groups_, " groups of n tensors, got ", ctx.num_inputs(), " inputs");
    n_ = (ctx.num_inputs() - 2) / groups_;
    if (ctx.num_outputs() != n_ * (groups_ - 1)) ctx.fail("expects ", n_ * (groups_ - 1), " outputs, got ", ctx.num_outputs());
    if (shape_numel(ctx.input_shape(0)) != 1 || !dtype_is_float(ctx.input_dtype(0))) ctx.fail("R must be a float scalar");
    if (shape_numel(ctx.input_shape(1)) != 1 || ctx.input_dtype(1) != DType::kInt64) ctx.fail("T must be an int64 scalar");
    set_.clear();
    scratch_.assign(n_ * (groups_ - 1), -1);
    size_t ws = 0;
    for (size_t i = 0; i < n_; ++i) {
      const DType dt = ctx.input_dtype(2 + i);
      dispatch<TypeList<float, double>>(dt, ctx.node(), [&]<class T>() {});
      const std::string group_names = algo_ == Preview::kAdam ? "XGVH" : algo_ == Preview::kMomentum ? "XGV" : "XGH";
      for (size_t gi = 1; gi < groups_; ++gi)
        check_like(ctx, 2 + gi * n_ + i, group_names.substr(gi, 1).append(std::to_string(i + 1)), 2 + i,
                   std::string("X").append(std::to_string(i + 1)));
      const int64_t numel = shape_numel(ctx.input_shape(2 + i));
      set_.add(dt, numel);
      // Outputs overwrite X and the states; outputs the node does not name go to workspace.
      for (size_t o = 0; o < groups_ - 1; ++o) {
        const size_t k = o * n_ + i, in = 2 + (o == 0 ? 0 : o + 1) * n_ + i;
        if (ctx.has_output(k)) {
          ctx.set_output_inplace(k, in);
        } else {
          scratch_[k] = int64_t(ws);
          ws += (size_t(numel) * dtype_size(dt) + 63) / 64 * 64;
        }
      }
    }
    slots_.assign(n_, Slot{});
    ctx.request_workspace(ws);
  }
  void run(RunContext& ctx) override {
    const double R = read_scalar_as_double(ctx.input(0));
    const int64_t T = *ctx.input(1).data<int64_t>();
    char* ws = static_cast<char*>(ctx.workspace());
    auto out = [&](size_t k) -> void* { return scratch_[k] >= 0 ? ws + scratch_[k] : ctx.output(k).raw_data(); };
    for (size_t i = 0; i < n_; ++i) {
      Slot& p = slots_[i];
      p.w = ctx.input(2 + i).raw_data();
      p.g = ctx.input(2 + n_ + i).raw_data();
      p.wo = out(i);
      for (size_t s = 0; s + 2 < groups_; ++s) {
        p.s[s] = ctx.input(2 + (2 + s) * n_ + i).raw_data();
        p.so[s] = out((1 + s) * n_ + i);
      }
    }
    const bool reg = norm_ != 0.f;
    if (algo_ == Preview::kAdagrad) {
      const double r = adagrad_lr(R, double(T), decay_);
      update_all<AdagradRule>(set_, slots_, 1.0, [&]<class V>() {
        return AdagradRule<V>{.wd = V(norm_), .a = V(-r), .eps = V(eps_), .decay = reg};
      });
    } else if (algo_ == Preview::kMomentum) {
      const double c = T > 0 ? double(beta_) : 1.0;  // the first update takes g whole
      update_all<MomentumRule>(set_, slots_, 1.0, [&]<class V>() {
        return MomentumRule<V>{.m = V(alpha_), .c = V(c), .wd = V(norm_), .a = V(-R),
                               .decay = reg, .first = false, .nesterov = nesterov_};
      });
    } else {
      // Bias corrections folded into the rate, epsilon added to sqrt(H') itself, decay after.
      const double a = alpha_, b = beta_;
      const double r = T > 0 ? R * std::sqrt(1.0 - std::pow(b, double(T))) / (1.0 - std::pow(a, double(T))) : R;
      update_all<AdamRule>(set_, slots_, 1.0, [&]<class V>() {
        return AdamRule<V>{.b1 = V(a), .b2 = V(b), .one_b1 = V(1.0 - a), .one_b2 = V(1.0 - b), .eps = V(eps_),
                           .l2 = V(norm_), .pre = V(1), .post = V(1.0 - double(norm_post_)), .step = V(-r),
                           .bc2_sqrt = V(1), .use_l2 = reg, .use_pre = false, .use_post = norm_post_ != 0.f};
      });
    }
  }

 private:
  Preview algo_;
  size_t groups_ = 3, n_ = 0;
  float norm_ = 0, decay_ = 0, eps_ = 0, alpha_ = 0, beta_ = 0, norm_post_ = 0;
  bool nesterov_ = false;
  TensorSet set_;
  std::vector<int64_t> scratch_;  // workspace offset per output the node does not name, else -1
  std::vector<Slot> slots_;
};

}  // namespace

void register_training(KernelRegistry& r) {
  const char* d = "ai.onnx.preview.training";
  auto preview = [&](const char* op, Preview a) {
    r.add(d, op, 1, kMaxOpsetAll,
          [a](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<PreviewOptimizerKernel>(i, a); });
  };
  preview("Adagrad", Preview::kAdagrad);
  preview("Momentum", Preview::kMomentum);
  preview("Adam", Preview::kAdam);

  for (const OptimizerSpec& spec : optimizer_specs()) {
    r.add(ops::kDomain, spec.name, ops::kOpset, kMaxOpsetAll,
          [&spec](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<OptimizerKernel>(i, spec); });
  }
  r.add(ops::kDomain, kAccumulateGradients, ops::kOpset, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<AccumulateGradientsKernel>(i); });
  r.add(ops::kDomain, kLossScaleCheck, ops::kOpset, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossScaleCheckKernel>(i); });
  r.add(ops::kDomain, kGlobalNormClip, ops::kOpset, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GlobalNormClipKernel>(i); });
}

}  // namespace onnxtrain::kernels::cpu
