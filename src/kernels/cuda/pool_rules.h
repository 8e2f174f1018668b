// The window arithmetic of the CUDA pooling kernels (cuda/pool.cu), __host__ __device__ so that
// tests run it on the host against the CPU provider's pooling kernels (tests/cpp/test_cuda_rules.cpp).
// Up to 3 spatial dims, padded to 3 with leading dims of size 1. For output o of one (n, c) plane:
//   window(o)   the valid input positions, kernel positions in row-major order (the CPU's order:
//               MaxPool keeps the first maximum, sums add in this order)
//   count(o)    AveragePool's divisor: the valid positions, or (count_include_pad) the positions
//               inside the padded input [-pad_begin, in + pad_end)
//   covering(q) the outputs whose window holds input q, in increasing order: the gradients gather
//               dX[q] as the CPU's scatter adds into it (same terms, same order, same bits)
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/shape/window.h"

namespace onnxtrain::kernels::cuda {

struct PoolGeo {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
  int64_t pin = 1, pout = 1;  ///< input and output positions of a plane
};

/// The geometry of g (g.nd <= 3), dims right-aligned.
inline PoolGeo pool_geo(const shape::WindowGeom& g) {
  PoolGeo p;
  const size_t lead = 3 - g.nd;
  for (size_t i = 0; i < 3; ++i) {
    const bool real = i >= lead;
    const size_t j = i - lead;
    p.in[i] = real ? g.in[j] : 1, p.out[i] = real ? g.out[j] : 1, p.k[i] = real ? g.kernel[j] : 1;
    p.s[i] = real ? g.stride[j] : 1, p.d[i] = real ? g.dilation[j] : 1;
    p.pb[i] = real ? g.pad_b[j] : 0, p.pe[i] = real ? g.pad_e[j] : 0;
    p.pin *= p.in[i], p.pout *= p.out[i];
  }
  return p;
}

/// f(q) for every valid input position q (plane offset) of output o's window, in row-major kernel order.
template <class F>
__host__ __device__ inline void for_window(const PoolGeo& g, int64_t o, F&& f) {
  const int64_t o2 = o % g.out[2], o1 = (o / g.out[2]) % g.out[1], o0 = o / (g.out[2] * g.out[1]);
  const int64_t s0 = o0 * g.s[0] - g.pb[0], s1 = o1 * g.s[1] - g.pb[1], s2 = o2 * g.s[2] - g.pb[2];
  for (int64_t a = 0; a < g.k[0]; ++a) {
    const int64_t p0 = s0 + a * g.d[0];
    if (p0 < 0 || p0 >= g.in[0]) continue;
    for (int64_t b = 0; b < g.k[1]; ++b) {
      const int64_t p1 = s1 + b * g.d[1];
      if (p1 < 0 || p1 >= g.in[1]) continue;
      for (int64_t c = 0; c < g.k[2]; ++c) {
        const int64_t p2 = s2 + c * g.d[2];
        if (p2 < 0 || p2 >= g.in[2]) continue;
        f((p0 * g.in[1] + p1) * g.in[2] + p2);
      }
    }
  }
}

/// AveragePool's divisor of output o.
__host__ __device__ inline int64_t window_count(const PoolGeo& g, int64_t o, bool include_pad) {
  int64_t oc[3];
  oc[2] = o % g.out[2], oc[1] = (o / g.out[2]) % g.out[1], oc[0] = o / (g.out[2] * g.out[1]);
  int64_t n = 1;
  for (int i = 0; i < 3; ++i) {
    const int64_t st = oc[i] * g.s[i] - g.pb[i];
    const int64_t lo = include_pad ? -g.pb[i] : 0, hi = include_pad ? g.in[i] + g.pe[i] : g.in[i];
    int64_t m = 0;
    for (int64_t k = 0; k < g.k[i]; ++k) {
      const int64_t p = st + k * g.d[i];
      m += p >= lo && p < hi;
    }
    n *= m;
  }
  return n;
}

/// The first position of output o's window holding its maximum (strictly greater replaces: ties
/// and NaN keep the earlier; a window of only the lowest value or NaN gives its first position),
/// -1 for an empty window. V: the compute type; load(q) reads X[q] of the plane as V.
template <class V, class Load>
__host__ __device__ inline int64_t window_argmax(const PoolGeo& g, int64_t o, V lowest, Load&& load, V* max) {
  V acc = lowest;
  int64_t best = -1, first = -1;
  for_window(g, o, [&](int64_t q) {
    const V v = load(q);
    if (first < 0) first = q;
    if (v > acc) acc = v, best = q;
  });
  *max = acc;
  return best >= 0 ? best : first;
}

/// f(o) for every output o whose window holds input position q, in increasing order.
template <class F>
__host__ __device__ inline void for_covering(const PoolGeo& g, int64_t q, F&& f) {
  const int64_t x2 = q % g.in[2], x1 = (q / g.in[2]) % g.in[1], x0 = q / (g.in[2] * g.in[1]);
  const int64_t xs[3] = {x0, x1, x2};
  int64_t lo[3], hi[3];  // o in [lo, hi] with o*s <= x + pb <= o*s + (k-1)*d
  for (int i = 0; i < 3; ++i) {
    const int64_t t = xs[i] + g.pb[i], span = (g.k[i] - 1) * g.d[i];
    hi[i] = t / g.s[i];  // t >= 0
    const int64_t u = t - span;
    lo[i] = u <= 0 ? 0 : (u + g.s[i] - 1) / g.s[i];
    if (hi[i] >= g.out[i]) hi[i] = g.out[i] - 1;
  }
  for (int64_t a = lo[0]; a <= hi[0]; ++a) {
    const int64_t r0 = xs[0] + g.pb[0] - a * g.s[0];
    if (r0 % g.d[0] != 0) continue;
    for (int64_t b = lo[1]; b <= hi[1]; ++b) {
      const int64_t r1 = xs[1] + g.pb[1] - b * g.s[1];
      if (r1 % g.d[1] != 0) continue;
      for (int64_t c = lo[2]; c <= hi[2]; ++c) {
        const int64_t r2 = xs[2] + g.pb[2] - c * g.s[2];
        if (r2 % g.d[2] != 0) continue;
        f((a * g.out[1] + b) * g.out[2] + c);
      }
    }
  }
}

// ---------------------------------------------------------------- per-element bodies
// What each thread of the pooling kernels computes, for flat index i (plane * pout + o for an
// output, plane * pin + q for an input). V: the compute type (float for float16/bfloat16);
// ld(p, j): element j of p as V.

/// MaxPool: output i's maximum (*max) and its argmax, a plane offset (-1: an empty window).
template <class V, class T, class Ld>
__host__ __device__ inline int64_t max_pool_at(const PoolGeo& g, const T* x, int64_t i, Ld ld, V* max) {
  const int64_t plane = i / g.pout, o = i - plane * g.pout;
  const T* xp = x + plane * g.pin;
  return window_argmax(g, o, V(-INFINITY), [&](int64_t q) { return ld(xp, q); }, max);
}

/// AveragePool: output i, the window's sum in double divided by its count.
template <class V, class T, class Ld>
__host__ __device__ inline V avg_pool_at(const PoolGeo& g, const T* x, int64_t i, bool include_pad, Ld ld) {
  const int64_t plane = i / g.pout, o = i - plane * g.pout;
  const T* xp = x + plane * g.pin;
  double acc = 0;
  for_window(g, o, [&](int64_t q) { acc += double(ld(xp, q)); });
  const int64_t n = window_count(g, o, include_pad);
  return V(n > 0 ? acc / double(n) : 0.0);
}

/// MaxPoolGrad: dX at input i from the outputs' argmaxes `arg` (max_pool_at's, per output).
template <class V, class T, class Ld>
__host__ __device__ inline V max_pool_grad_at(const PoolGeo& g, const T* x, const T* dy, const int64_t* arg, int64_t i,
                                              bool relu_mask, Ld ld) {
  const int64_t plane = i / g.pin, q = i - plane * g.pin;
  V acc = V(0);
  if (relu_mask && !(ld(x, i) > V(0))) return acc;
  const int64_t* ap = arg + plane * g.pout;
  const T* dyp = dy + plane * g.pout;
  for_covering(g, q, [&](int64_t o) {
    if (ap[o] == q) acc += ld(dyp, o);
  });
  return acc;
}

/// AveragePoolGrad: dX at input i, the sum of dY[o] / count(o) over the windows holding it.
template <class V, class T, class Ld>
__host__ __device__ inline V avg_pool_grad_at(const PoolGeo& g, const T* dy, int64_t i, bool include_pad, Ld ld) {
  const int64_t plane = i / g.pin, q = i - plane * g.pin;
  const T* dyp = dy + plane * g.pout;
  V acc = V(0);
  for_covering(g, q, [&](int64_t o) {
    const int64_t n = window_count(g, o, include_pad);
    acc += n > 0 ? V(double(ld(dyp, o)) / double(n)) : V(0);
  });
  return acc;
}

/// MaxPool's Indices output for storage_order 1: plane position q's column-major flat index.
__host__ __device__ inline int64_t col_major_index(const PoolGeo& g, int64_t q) {
  int64_t flat = 0, rest = q, mul = g.pin;
  for (int i = 2; i >= 0; --i) {
    mul /= g.in[i];
    flat += (rest % g.in[i]) * mul;
    rest /= g.in[i];
  }
  return flat;
}

}  // namespace onnxtrain::kernels::cuda
