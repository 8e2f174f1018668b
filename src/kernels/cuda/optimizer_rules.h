// The per-element update rules of the com.onnxtrain optimizers (cuda/optimizer.cu), the same
// arithmetic as the CPU rules (cpu/optimizer_ops.cpp: SgdRule, MomentumRule, AdamRule,
// AdagradRule), rounding for rounding: the CPU file is compiled without contraction and fuses
// exactly where it calls std::fma; here every other product, sum, quotient and square root is an
// explicitly rounded operation on the device (__fmul_rn, ...), which nvcc never contracts.
// Rules are built on the host (scalars rounded to T there, as the CPU does) and passed by value.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "kernels/shape/optimizer.h"

namespace onnxtrain::kernels::cuda {

// ---------------------------------------------------------------- rounded arithmetic
template <class T>
__host__ __device__ inline T op_fma(T a, T b, T c) {
  if constexpr (std::is_same_v<T, float>) return fmaf(a, b, c);
  else return fma(a, b, c);
}
template <class T>
__host__ __device__ inline T op_mul(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return __fmul_rn(a, b);
  else return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <class T>
__host__ __device__ inline T op_add(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return __fadd_rn(a, b);
  else return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
template <class T>
__host__ __device__ inline T op_div(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return __fdiv_rn(a, b);
  else return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
template <class T>
__host__ __device__ inline T op_sqrt(T a) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return __fsqrt_rn(a);
  else return __dsqrt_rn(a);
#else
  if constexpr (std::is_same_v<T, float>) return sqrtf(a);
  else return sqrt(a);
#endif
}

// ---------------------------------------------------------------- the rules
// rule(w, g, s0, s1) -> new weight and states from the weight, the scaled gradient and the states.
template <class T>
struct Updated {
  T w, s0, s1;
};

// d = g + lambda w; w += -lr d
template <class T>
struct SgdRule {
  static constexpr int kStates = 0;
  T wd, a;  // a = -lr
  bool decay;
  __host__ __device__ Updated<T> operator()(T w, T g, T, T) const {
    const T d = decay ? op_fma(wd, w, g) : g;
    return {op_fma(a, d, w), T(0), T(0)};
  }
};

// d = g + lambda w; b = first ? d : m b + c d; w += -lr (nesterov ? d + m b : b)
template <class T>
struct MomentumRule {
  static constexpr int kStates = 1;
  T m, c, wd, a;
  bool decay, first, nesterov;
  __host__ __device__ Updated<T> operator()(T w, T g, T s0, T) const {
    const T d = decay ? op_fma(wd, w, g) : g;
    const T b = first ? d : op_fma(s0, m, op_mul(c, d));
    const T u = nesterov ? op_fma(m, b, d) : b;
    return {op_fma(a, u, w), b, T(0)};
  }
};

// [w *= pre]; [g += l2 w]; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g;
// w += step m / (sqrt(v) / sqrt(bc2) + eps); [w *= post]
template <class T>
struct AdamRule {
  static constexpr int kStates = 2;
  T b1, b2, one_b1, one_b2, eps, l2, pre, post, step, bc2_sqrt;
  bool use_l2, use_pre, use_post;
  __host__ __device__ Updated<T> operator()(T w, T g, T s0, T s1) const {
    if (use_pre) w = op_mul(w, pre);
    if (use_l2) g = op_fma(l2, w, g);
    const T m = op_fma(s0, b1, op_mul(one_b1, g));
    const T v = op_fma(s1, b2, op_mul(op_mul(one_b2, g), g));
    const T denom = op_add(op_div(op_sqrt(v), bc2_sqrt), eps);
    w = op_add(w, op_div(op_mul(step, m), denom));
    if (use_post) w = op_mul(w, post);
    return {w, m, v};
  }
};

// [g += wd w]; h = s + g g; w += a g / (sqrt(h) + eps)
template <class T>
struct AdagradRule {
  static constexpr int kStates = 1;
  T wd, a, eps;
  bool decay;
  __host__ __device__ Updated<T> operator()(T w, T g, T s0, T) const {
    if (decay) g = op_fma(wd, w, g);
    const T h = op_fma(g, g, s0);
    const T std_ = op_add(op_sqrt(h), eps);
    return {op_add(w, op_div(op_mul(a, g), std_)), h, T(0)};
  }
};

// AccumulateGradients: A' = reset ? G : A + G (w: A, g: G).
template <class T>
struct AccumulateRule {
  static constexpr int kStates = 0;
  bool reset;
  __host__ __device__ Updated<T> operator()(T a, T g, T, T) const { return {reset ? g : op_add(a, g), T(0), T(0)}; }
};

// ---------------------------------------------------------------- the rules of a step
// Built on the host from the node's attributes, the step's learning rate lr and its number t (1 for
// the first), with the CPU kernel's roundings (cpu/optimizer_ops.cpp); tests/cpp/test_cuda_rules.cpp
// checks them on the host, bit for bit, against the CPU provider's optimizer kernels.
inline double bias_correction(bool on, float beta, int64_t t) { return on ? 1.0 - std::pow(double(beta), double(t)) : 1.0; }
inline double adagrad_lr(double lr, double decays, float lr_decay) { return lr / (1.0 + decays * double(lr_decay)); }

template <class T>
SgdRule<T> sgd_rule(const shape::OptimizerAttrs& at, float lr) {
  return SgdRule<T>{.wd = T(at.lambda), .a = T(-double(lr)), .decay = T(at.lambda) != T(0)};
}
template <class T>
MomentumRule<T> momentum_rule(const shape::OptimizerAttrs& at, float lr, int64_t t) {
  return MomentumRule<T>{.m = T(at.momentum), .c = T(1), .wd = T(at.lambda), .a = T(-double(lr)),
                         .decay = T(at.lambda) != T(0), .first = t == 1, .nesterov = at.nesterov};
}
/// Adam (decoupled = false) and AdamW (true).
template <class T>
AdamRule<T> adam_rule(const shape::OptimizerAttrs& at, float lr, int64_t t, bool decoupled) {
  const double b1 = at.alpha, b2 = at.beta, wd = at.lambda;
  const double bc1 = bias_correction(at.bias_correction, at.alpha, t);
  const double bc2 = bias_correction(at.bias_correction, at.beta, t);
  return AdamRule<T>{.b1 = T(b1), .b2 = T(b2), .one_b1 = T(1.0 - b1), .one_b2 = T(1.0 - b2),
                     .eps = T(double(at.epsilon)), .l2 = T(wd), .pre = T(1.0 - double(lr) * wd), .post = T(1),
                     .step = T(-(double(lr) / bc1)), .bc2_sqrt = T(std::sqrt(bc2)),
                     .use_l2 = !decoupled && wd != 0.0, .use_pre = decoupled && wd != 0.0, .use_post = false};
}
template <class T>
AdagradRule<T> adagrad_rule(const shape::OptimizerAttrs& at, float lr, int64_t t) {
  const double clr = adagrad_lr(lr, double(t - 1), at.lr_decay);
  return AdagradRule<T>{.wd = T(at.lambda), .a = T(-clr), .eps = T(at.epsilon), .decay = T(at.lambda) != T(0)};
}
// LAMB's two per-element halves (cpu/optimizer_ops.cpp's LambHyper, lamb_moments, lamb_apply):
//   moments:   m = b1 m + (1-b1) g, v = b2 v + (1-b2) g g (in T), r = direction(m, v, w)
//   direction: r = wd w + (m / bc1) / (sqrt(v / bc2) + eps), in double, rounded to T
//   apply:     w += coef r, coef = -lr * trust ratio (||w|| / ||r|| per tensor, clamped)
template <class T>
struct LambRule {
  T b1, b2, one_b1, one_b2;
  double bc1, bc2, eps, wd;
  __host__ __device__ T direction(T m, T v, T w) const {
    const double q = op_div(op_div(double(m), bc1), op_add(op_sqrt(op_div(double(v), bc2)), eps));
    return T(op_fma(wd, double(w), q));
  }
  /// The new moments of (w, g, m, v), and the direction r from them (*r).
  __host__ __device__ Updated<T> moments(T w, T g, T m, T v, T* r) const {
    const T m2 = op_fma(m, b1, op_mul(one_b1, g));
    const T v2 = op_fma(v, b2, op_mul(op_mul(one_b2, g), g));
    *r = direction(m2, v2, w);
    return {w, m2, v2};
  }
  __host__ __device__ T apply(T coef, T m, T v, T w) const { return op_fma(coef, direction(m, v, w), w); }
};
template <class T>
LambRule<T> lamb_rule(const shape::OptimizerAttrs& at, int64_t t) {
  const double b1 = at.alpha, b2 = at.beta;
  return LambRule<T>{.b1 = T(b1), .b2 = T(b2), .one_b1 = T(1.0 - b1), .one_b2 = T(1.0 - b2),
                     .bc1 = bias_correction(at.bias_correction, at.alpha, t),
                     .bc2 = bias_correction(at.bias_correction, at.beta, t), .eps = double(at.epsilon),
                     .wd = double(at.lambda)};
}
/// LAMB's coefficient of one tensor from its squared norms: -lr * clamp(||w|| / ||r||, min, max),
/// the ratio 1 where either norm is 0.
__host__ __device__ inline double lamb_coef(double w2, double r2, double lr, double ratio_min, double ratio_max) {
  const double wn = op_sqrt(w2), rn = op_sqrt(r2);
  double ratio = wn > 0 && rn > 0 ? op_div(wn, rn) : 1.0;
  ratio = ratio < ratio_min ? ratio_min : ratio > ratio_max ? ratio_max : ratio;
  return -lr * ratio;
}

/// One element as the update kernel applies a rule: the gradient scaled first, in T.
template <class T, class Rule>
__host__ __device__ inline Updated<T> apply_rule(const Rule& rule, T w, T g, T scale, T s0, T s1) {
  return rule(w, op_mul(g, scale), s0, s1);
}

}  // namespace onnxtrain::kernels::cuda
