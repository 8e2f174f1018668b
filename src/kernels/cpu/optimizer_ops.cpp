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
// com.microsoft (onnxruntime's training artifacts; they update their inputs in place, as
// onnxruntime's kernels do, and output a bool [1] flag):
//   InPlaceAccumulatorV2(A, G[, overwrite]) -> flag[, A']: A = overwrite ? G : A + G
//   AdamWOptimizer(lr, t, W, G, M1, M2 sequences[, update_signal]) -> flag[, W', M1', M2'], in float
//     as onnxruntime computes: m = alpha m + (1-alpha) g; v = beta v + (1-beta) g g; with
//     correct_bias ca = 1 - alpha^t, cb = 1 - beta^t (float), else 1;
//     mode 0 (PyTorch): w -= lr wd w, then w -= lr m / (ca (sqrt(v / cb) + eps));
//     mode 1 (Hugging Face): w -= (lr sqrt(cb) / ca) m / (sqrt(v) + eps), then w -= lr wd w
//   SGDOptimizerV2(lr, W, G sequences[, update_signal]) -> flag[, W']: w -= lr g
//   InplaceClipGradNorm(G sequence) -> G': norm = sqrt(sum of g^2 over every tensor) (double, fixed
//     blocks), g *= min(max_norm / (norm + 1e-6), 1) in float, in place; G' is the same sequence
//   update_signal false: nothing changes, flag false.
//
// Work split: the n tensors are one concatenation; one parallel region splits its total element
// count and maps chunks to (tensor, range). Sums (norms) use fixed blocks of kNormBlock elements
// added in block order, so every result is independent of the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/cpu/common.h"
#include "kernels/registry.h"
#include "kernels/shape/optimizer.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

using ops::find_optimizer_spec;
using ops::kAccumulateGradients;
using ops::kGlobalNormClip;
using ops::kLossScaleCheck;
using ops::kOptimizerGradScaleInput;
using ops::kOptimizerLrInput;
using ops::kOptimizerStepInput;
using ops::kOptimizerUpdateSignalInput;
using ops::OptimizerSpec;
using ops::optimizer_specs;
using shape::PreviewAlgorithm;

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
  // The three switches as template arguments: with them as run-time branches GCC saw control flow
  // in update_range's loop and left it scalar (vsqrtss, two vdivss per element: BERT-base's 7M
  // parameters took ~20 ms a step); update_range calls the variant of this run's switches.
  static constexpr int kVariants = 8;
  int variant() const { return (use_l2 ? 1 : 0) | (use_pre ? 2 : 0) | (use_post ? 4 : 0); }
  template <int V>
  Updated<T> apply(T w, T g, T s0, T s1) const {
    if constexpr ((V & 2) != 0) w = w * pre;
    if constexpr ((V & 1) != 0) g = std::fma(l2, w, g);
    const T m = std::fma(s0, b1, one_b1 * g);
    const T v = std::fma(s1, b2, one_b2 * g * g);
    const T denom = std::sqrt(v) / bc2_sqrt + eps;
    w = w + step * m / denom;
    if constexpr ((V & 4) != 0) w = w * post;
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
template <class T, class Rule, class Apply>
void update_loop(const Apply& rule, const Slot& p, T scale, int64_t lo, int64_t hi) {
  constexpr int S = Rule::kStates;
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

// Rules with kVariants: the loop of this run's variant (rule.template apply<V>, switches folded).
template <class Rule>
concept HasVariants = requires(const Rule& r) { Rule::kVariants; r.variant(); };

template <class T, class Rule>
void update_range(const Rule& rule_ref, const Slot& p, T scale, int64_t lo, int64_t hi) {
  const Rule rule = rule_ref;  // a local: stores through the outputs cannot change it
  if constexpr (HasVariants<Rule>) {
    [&]<int... V>(std::integer_sequence<int, V...>) {
      const int v = rule.variant();
      ((v == V ? update_loop<T, Rule>([&rule](T w, T g, T s0, T s1) { return rule.template apply<V>(w, g, s0, s1); },
                                      p, scale, lo, hi)
               : void()),
       ...);
    }(std::make_integer_sequence<int, Rule::kVariants>{});
  } else {
    update_loop<T, Rule>(rule, p, scale, lo, hi);
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

// ---------------------------------------------------------------- com.onnxtrain optimizers
using Algo = ops::OptimizerAlgorithm;

class OptimizerKernel final : public Kernel {
 public:
  OptimizerKernel(const KernelInfo& info, const OptimizerSpec& spec)
      : algo_(spec.algorithm), at_(shape::read_optimizer_attrs(info, spec)) {}

  void prepare(PrepareContext& ctx) override {
    n_ = shape::check_optimizer_inputs(ctx, at_);
    const size_t S = at_.spec->states.size(), first = at_.first;
    set_.clear();
    for (size_t i = 0; i < n_; ++i) {
      for (size_t g = 0; g <= S; ++g) ctx.set_output_inplace(g * n_ + i, shape::updated_input(first, n_, g * n_ + i));
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
    const int64_t t = *ctx.input(kOptimizerStepInput).data<int64_t>();
    shape::check_optimizer_step(ctx, lr, t);
    const double scale =
        ctx.has_input(kOptimizerGradScaleInput) ? *ctx.input(kOptimizerGradScaleInput).data<double>() : 1.0;
    const size_t first = at_.first, S = at_.spec->states.size();
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
    if (at_.gated() && !*ctx.input(kOptimizerUpdateSignalInput).data<bool>()) {
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
          return SgdRule<T>{.wd = T(at_.lambda), .a = T(nlr), .decay = T(at_.lambda) != T(0)};
        });
        break;
      case Algo::kMomentum:
        update_all<MomentumRule>(set_, slots_, scale, [&]<class T>() {
          return MomentumRule<T>{.m = T(at_.momentum), .c = T(1), .wd = T(at_.lambda), .a = T(nlr),
                                 .decay = T(at_.lambda) != T(0), .first = t == 1, .nesterov = at_.nesterov};
        });
        break;
      case Algo::kAdam:
      case Algo::kAdamW: {
        const bool decoupled = algo_ == Algo::kAdamW;
        const double b1 = at_.alpha, b2 = at_.beta, wd = at_.lambda;
        const double bc1 = bias_correction(at_.bias_correction, at_.alpha, t);
        const double bc2 = bias_correction(at_.bias_correction, at_.beta, t);
        update_all<AdamRule>(set_, slots_, scale, [&]<class T>() {
          return AdamRule<T>{.b1 = T(b1), .b2 = T(b2), .one_b1 = T(1.0 - b1), .one_b2 = T(1.0 - b2),
                             .eps = T(double(at_.epsilon)), .l2 = T(wd), .pre = T(1.0 - double(lr) * wd), .post = T(1),
                             .step = T(-(double(lr) / bc1)), .bc2_sqrt = T(std::sqrt(bc2)),
                             .use_l2 = !decoupled && wd != 0.0, .use_pre = decoupled && wd != 0.0, .use_post = false};
        });
        break;
      }
      case Algo::kAdagrad: {
        const double clr = adagrad_lr(lr, double(t - 1), at_.lr_decay);
        update_all<AdagradRule>(set_, slots_, scale, [&]<class T>() {
          return AdagradRule<T>{.wd = T(at_.lambda), .a = T(-clr), .eps = T(at_.epsilon),
                                .decay = T(at_.lambda) != T(0)};
        });
        break;
      }
      case Algo::kLamb: run_lamb(ctx, lr, t, scale); break;
    }
  }

 private:
  void run_lamb(RunContext& ctx, float lr, int64_t t, double scale) {
    const LambHyper h{at_.alpha, at_.beta, bias_correction(at_.bias_correction, at_.alpha, t),
                      bias_correction(at_.bias_correction, at_.beta, t), at_.epsilon, at_.lambda};
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
      ratio = std::min<double>(std::max<double>(ratio, at_.ratio_min), at_.ratio_max);
      coef[k] = -double(lr) * ratio;
    }
    each_block([&](int64_t, size_t k, int64_t lo, int64_t hi) {
      float_or_double(set_.dtype[k], [&]<class T>() { lamb_apply<T>(h, slots_[k], coef[k], lo, hi); });
    });
  }

  Algo algo_;
  shape::OptimizerAttrs at_;
  size_t n_ = 0;
  TensorSet set_;
  BlockSet blocks_;
  std::vector<Slot> slots_;  // filled per run
};

// ---------------------------------------------------------------- AccumulateGradients
// out[lo, hi) = reset ? G : A + G (out may be A).
template <class T>
void accumulate_range(const T* A, const T* G, T* out, bool reset, int64_t lo, int64_t hi) {
  if (reset) {
    std::memmove(out + lo, G + lo, size_t(hi - lo) * sizeof(T));
  } else {
#pragma omp simd
    for (int64_t j = lo; j < hi; ++j) out[j] = A[j] + G[j];
  }
}

class AccumulateGradientsKernel final : public Kernel {
 public:
  explicit AccumulateGradientsKernel(const KernelInfo& info) { shape::check_accumulate_gradients_attrs(info); }
  void prepare(PrepareContext& ctx) override {
    n_ = shape::check_accumulate_gradients(ctx);
    set_.clear();
    for (size_t i = 0; i < n_; ++i) {
      ctx.set_output_inplace(i, shape::updated_input(1, n_, i));
      set_.add(ctx.input_dtype(1 + i), shape_numel(ctx.input_shape(1 + i)));
    }
    ctx.set_nondeterministic();  // updates state: never folded
  }
  void run(RunContext& ctx) override {
    const bool reset = *ctx.input(0).data<bool>();
    set_.parallel([&](size_t k, int64_t lo, int64_t hi) {
      float_or_double(set_.dtype[k], [&]<class T>() {
        accumulate_range(ctx.input(1 + k).data<T>(), ctx.input(1 + n_ + k).data<T>(), ctx.output(k).data<T>(), reset, lo,
                         hi);
      });
    });
  }

 private:
  size_t n_ = 0;
  TensorSet set_;
};

// ---------------------------------------------------------------- com.microsoft InPlaceAccumulatorV2
class InPlaceAccumulatorKernel final : public Kernel {
 public:
  explicit InPlaceAccumulatorKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_inplace_accumulator(ctx);
    ctx.set_output(0, DType::kBool, {1});
    // Output 1 is a copy: declared in place, the planner would hand the kernel a copy of a fed
    // buffer as input 0, and the buffer itself would not change.
    if (ctx.has_output(1)) ctx.set_output(1, ctx.input_dtype(0), ctx.input_shape(0));
    ctx.set_nondeterministic();  // updates its input: never folded
  }
  void run(RunContext& ctx) override {
    const bool overwrite = ctx.has_input(2) && *ctx.input(2).data<bool>();
    const Tensor& a = ctx.input(0);
    // The buffer itself changes (onnxruntime's semantics); output 1, when named, is a copy of it.
    void* dst = const_cast<void*>(a.raw_data());
    float_or_double(a.dtype(), [&]<class T>() {
      const T* G = ctx.input(1).data<T>();
      parallel_for(a.numel(), kGrain, [&](int64_t lo, int64_t hi) {
        accumulate_range(a.data<T>(), G, static_cast<T*>(dst), overwrite, lo, hi);
      });
    });
    if (ctx.has_output(1)) std::memcpy(ctx.output(1).raw_data(), dst, a.nbytes());
    *ctx.output(0).data<bool>() = true;
  }
};

// ---------------------------------------------------------------- sums of squares (norms)
// Sum of the squares of the tensors of `set` (tensor(k): tensor k), in double, over fixed blocks
// of the concatenation, each summed sequentially from 0 (one block of up to kNormBlock elements is
// exactly the sequential sum over the tensors in order), added in block order: the same bits for
// any thread count. `partial` holds `blocks` partial sums. Not finite when an element is not
// (float32 squares cannot overflow a double sum).
template <class TensorAt>
double sum_of_squares(const TensorSet& set, int64_t blocks, double* partial, TensorAt&& tensor) {
  parallel_for(blocks, std::max<int64_t>(1, kGrain / kNormBlock), [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      double s = 0;
      set.pieces(j * kNormBlock, std::min(set.total(), (j + 1) * kNormBlock), [&](size_t k, int64_t lo, int64_t hi) {
        float_or_double(set.dtype[k], [&]<class T>() {
          const T* p = tensor(k).template data<T>();
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

// The sum of squares of inputs first.. (the tensors of `set`), partial sums in the workspace.
double sum_of_squares(RunContext& ctx, const TensorSet& set, size_t first, int64_t blocks) {
  return sum_of_squares(set, blocks, static_cast<double*>(ctx.workspace()),
                        [&](size_t k) -> const Tensor& { return ctx.input(first + k); });
}

// ---------------------------------------------------------------- com.microsoft InplaceClipGradNorm
class InplaceClipGradNormKernel final : public Kernel {
 public:
  explicit InplaceClipGradNormKernel(const KernelInfo& info) : max_norm_(shape::read_clip_grad_norm_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    if (ctx.input_kind(0) != Value::Kind::kSequence) ctx.fail("gradients (input 0) must be a sequence of tensors");
    ctx.set_output_sequence(0, DType::kFloat32);
    ctx.set_nondeterministic();  // updates its input: never folded
  }
  void run(RunContext& ctx) override {
    const std::vector<Tensor>& grads = ctx.input_value(0).sequence;
    set_.clear();
    for (size_t k = 0; k < grads.size(); ++k) {
      if (grads[k].dtype() != DType::kFloat32)
        throw_error<NotImplemented>(ctx.node().describe(), ": gradient ", k, " is ", dtype_name(grads[k].dtype()),
                                    ": only float32 is supported");
      set_.add(DType::kFloat32, grads[k].numel());
    }
    // The sequence's sizes are known only now: the partial sums live in a member, not the workspace.
    const int64_t blocks = (set_.total() + kNormBlock - 1) / kNormBlock;
    partial_.resize(size_t(blocks));
    const double sum = sum_of_squares(set_, blocks, partial_.data(), [&](size_t k) -> const Tensor& { return grads[k]; });
    const float norm = float(std::sqrt(sum));
    const float coef = std::min(max_norm_ / (norm + 1e-6f), 1.0f);
    set_.parallel([&](size_t k, int64_t lo, int64_t hi) {
      float* g = const_cast<float*>(grads[k].data<float>());
      for (int64_t j = lo; j < hi; ++j) g[j] *= coef;
    });
    ctx.output_value(0) = ctx.input_value(0);
  }

 private:
  float max_norm_;
  TensorSet set_;
  std::vector<double> partial_;
};

// ---------------------------------------------------------------- com.microsoft AdamWOptimizer, SGDOptimizerV2
// Inputs `first`.. are sequences; every tensor is updated in place; the named sequence outputs
// hand the same tensors on.
class SequenceOptimizerKernel final : public Kernel {
 public:
  SequenceOptimizerKernel(const KernelInfo& info, bool adamw)
      : adamw_(adamw),
        // Output k >= 1 hands on the input its table row types it like (the weights, the moments).
        passed_(ops::find_op(ops::kMicrosoftDomain, adamw ? "AdamWOptimizer" : "SGDOptimizerV2")->like) {
    if (adamw) at_ = shape::read_adamw_attrs(info);
  }
  void prepare(PrepareContext& ctx) override {
    shape::check_sequence_optimizer_inputs(ctx, adamw_ ? 1 : -1, first(), last(), signal());
    ctx.set_output(0, DType::kBool, {1});
    for (size_t k = 1; k < ctx.num_outputs(); ++k)
      if (ctx.has_output(k)) ctx.set_output_sequence(k, DType::kFloat32);
    ctx.set_nondeterministic();  // updates its inputs: never folded
  }
  void run(RunContext& ctx) override {
    const size_t n = shape::check_sequence_optimizer_tensors(ctx, first(), last());
    const bool update = !ctx.has_input(signal()) || *ctx.input(signal()).data<bool>();
    if (update) {
      const float lr = *ctx.input(0).data<float>();
      for (size_t k = 0; k < n; ++k) {
        auto at = [&](size_t i) { return const_cast<float*>(ctx.input_value(i).sequence[k].data<float>()); };
        const int64_t count = ctx.input_value(first()).sequence[k].numel();
        if (adamw_) adamw(ctx, lr, at(2), at(3), at(4), at(5), count);
        else sgd(lr, at(1), at(2), count);
      }
    }
    *ctx.output(0).data<bool>() = update;
    for (size_t k = 1; k < ctx.num_outputs(); ++k)
      if (ctx.has_output(k)) ctx.output_value(k) = ctx.input_value(passed_[std::min(k - 1, passed_.size() - 1)]);
  }

 private:
  size_t first() const { return adamw_ ? 2 : 1; }
  size_t last() const { return adamw_ ? 6 : 3; }
  size_t signal() const { return adamw_ ? 6 : 3; }

  static void sgd(float lr, float* w, const float* g, int64_t count) {
    parallel_for(count, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) w[j] = w[j] - lr * g[j];
    });
  }

  void adamw(const RunContext& ctx, float lr, float* w, const float* g, float* m, float* v, int64_t count) const {
    const int64_t t = *ctx.input(1).data<int64_t>();
    float ca = 1.f, cb = 1.f, lr_c = lr;
    if (at_.correct_bias) {
      ca = 1.f - static_cast<float>(std::pow(at_.alpha, t));
      cb = 1.f - static_cast<float>(std::pow(at_.beta, t));
      lr_c *= std::sqrt(cb) / ca;
    }
    const float a = at_.alpha, b = at_.beta, eps = at_.epsilon, wd = at_.weight_decay;
    const bool torch_mode = at_.adam_mode == 0;
    parallel_for(count, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        float wj = w[j];
        if (torch_mode) wj = wj - wj * lr * wd;
        const float mj = a * m[j] + (1.f - a) * g[j];
        const float vj = b * v[j] + (1.f - b) * g[j] * g[j];
        m[j] = mj;
        v[j] = vj;
        if (torch_mode) {
          wj = wj - (lr * mj) / (ca * (std::sqrt(vj / cb) + eps));
        } else {
          wj = wj - lr_c * mj / (std::sqrt(vj) + eps);
          wj = wj - lr * wd * wj;
        }
        w[j] = wj;
      }
    });
  }

  bool adamw_;
  std::vector<size_t> passed_;  // output k >= 1 is input passed_[k - 1]
  shape::AdamWAttrs at_;
};

// ---------------------------------------------------------------- GlobalNormClip
class GlobalNormClipKernel final : public Kernel {
 public:
  explicit GlobalNormClipKernel(const KernelInfo& info) : max_norm_(shape::read_global_norm_clip_max_norm(info)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_global_norm_clip(ctx);
    set_.clear();
    for (size_t i = 0; i < ctx.num_inputs(); ++i) set_.add(ctx.input_dtype(i), shape_numel(ctx.input_shape(i)));
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
  explicit LossScaleCheckKernel(const KernelInfo& info) : max_norm_(shape::read_loss_scale_max_norm(info)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_loss_scale_check(ctx);
    set_.clear();
    for (size_t i = 1; i < ctx.num_inputs(); ++i) set_.add(ctx.input_dtype(i), shape_numel(ctx.input_shape(i)));
    ctx.set_output(0, DType::kFloat64, {1});
    ctx.set_output(1, DType::kBool, {1});
    blocks_ = (set_.total() + kNormBlock - 1) / kNormBlock;
    ctx.request_workspace(size_t(std::max<int64_t>(blocks_, 1)) * sizeof(double));
    ctx.set_nondeterministic();  // depends on the step's gradients: never folded
  }
  void run(RunContext& ctx) override {
    const double ls = double(*ctx.input(0).data<float>());
    shape::check_loss_scale(ctx, ls);
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
class PreviewOptimizerKernel final : public Kernel {
 public:
  PreviewOptimizerKernel(const KernelInfo& info, PreviewAlgorithm algo) : at_(shape::read_preview_attrs(info, algo)) {}
  void prepare(PrepareContext& ctx) override {
    n_ = shape::check_preview_inputs(ctx, at_);
    const size_t groups = at_.groups;
    set_.clear();
    scratch_.assign(n_ * (groups - 1), -1);
    size_t ws = 0;
    for (size_t i = 0; i < n_; ++i) {
      const DType dt = ctx.input_dtype(2 + i);
      const int64_t numel = shape_numel(ctx.input_shape(2 + i));
      set_.add(dt, numel);
      // Outputs overwrite X and the states; outputs the node does not name go to workspace.
      for (size_t o = 0; o < groups - 1; ++o) {
        const size_t k = o * n_ + i;
        if (ctx.has_output(k)) {
          ctx.set_output_inplace(k, shape::updated_input(2, n_, k));
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
      for (size_t s = 0; s + 2 < at_.groups; ++s) {
        p.s[s] = ctx.input(2 + (2 + s) * n_ + i).raw_data();
        p.so[s] = out((1 + s) * n_ + i);
      }
    }
    const bool reg = at_.norm != 0.f;
    if (at_.algo == PreviewAlgorithm::kAdagrad) {
      const double r = adagrad_lr(R, double(T), at_.decay);
      update_all<AdagradRule>(set_, slots_, 1.0, [&]<class V>() {
        return AdagradRule<V>{.wd = V(at_.norm), .a = V(-r), .eps = V(at_.epsilon), .decay = reg};
      });
    } else if (at_.algo == PreviewAlgorithm::kMomentum) {
      const double c = T > 0 ? double(at_.beta) : 1.0;  // the first update takes g whole
      update_all<MomentumRule>(set_, slots_, 1.0, [&]<class V>() {
        return MomentumRule<V>{.m = V(at_.alpha), .c = V(c), .wd = V(at_.norm), .a = V(-R),
                               .decay = reg, .first = false, .nesterov = at_.nesterov};
      });
    } else {
      // Bias corrections folded into the rate, epsilon added to sqrt(H') itself, decay after.
      const double a = at_.alpha, b = at_.beta;
      const double r = T > 0 ? R * std::sqrt(1.0 - std::pow(b, double(T))) / (1.0 - std::pow(a, double(T))) : R;
      update_all<AdamRule>(set_, slots_, 1.0, [&]<class V>() {
        return AdamRule<V>{.b1 = V(a), .b2 = V(b), .one_b1 = V(1.0 - a), .one_b2 = V(1.0 - b), .eps = V(at_.epsilon),
                           .l2 = V(at_.norm), .pre = V(1), .post = V(1.0 - double(at_.norm_post)), .step = V(-r),
                           .bc2_sqrt = V(1), .use_l2 = reg, .use_pre = false, .use_post = at_.norm_post != 0.f};
      });
    }
  }

 private:
  shape::PreviewAttrs at_;
  size_t n_ = 0;
  TensorSet set_;
  std::vector<int64_t> scratch_;  // workspace offset per output the node does not name, else -1
  std::vector<Slot> slots_;
};

}  // namespace

void register_training(KernelRegistry& r) {
  const char* d = "ai.onnx.preview.training";
  auto preview = [&](const char* op, PreviewAlgorithm a) {
    r.add(d, op, 1, kMaxOpsetAll,
          [a](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<PreviewOptimizerKernel>(i, a); });
  };
  preview("Adagrad", PreviewAlgorithm::kAdagrad);
  preview("Momentum", PreviewAlgorithm::kMomentum);
  preview("Adam", PreviewAlgorithm::kAdam);

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
  // onnxruntime's training artifacts (com.microsoft, opset 1).
  r.add(ops::kMicrosoftDomain, "InPlaceAccumulatorV2", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<InPlaceAccumulatorKernel>(i); });
  r.add(ops::kMicrosoftDomain, "InplaceClipGradNorm", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<InplaceClipGradNormKernel>(i); });
  for (bool adamw : {true, false})
    r.add(ops::kMicrosoftDomain, adamw ? "AdamWOptimizer" : "SGDOptimizerV2", 1, kMaxOpsetAll,
          [adamw](const KernelInfo& i) -> std::unique_ptr<Kernel> {
            return std::make_unique<SequenceOptimizerKernel>(i, adamw);
          });
}

}  // namespace onnxtrain::kernels::cpu
