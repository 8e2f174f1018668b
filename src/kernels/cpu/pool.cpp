// Pooling, forward and gradient kernels. X[N, C, D...] -> Y[N, C, O...]; a window of kernel k, stride s, dilation d
// and pads pb/pe slides over each (n, c) plane: window(o) = { o*s - pb + k*d : 0 <= k < kernel }.
//   MaxPool      Y = max over the window's inputs; Indices (opset 8+) = flat index of the max in X,
//                spatial part row-major (storage_order 0) or column-major (1)
//   AveragePool  Y = sum / count; count = inputs inside X (count_include_pad 0) or positions inside
//                the padded input [-pb, in + pe) (count_include_pad 1)
//   LpPool       Y = (sum |x|^p)^(1/p) over the inputs inside X (pads contribute 0)
//   Global*Pool  the window is the whole plane: Y[N, C, 1...]
// Gradients (com.onnxtrain.<Pool>Grad, see PoolGradKernel):
//   MaxPool      dX[first argmax of window o] += dY[o]   (ties: the first maximum, as PyTorch)
//   AveragePool  dX[q] += dY[o] / count(o) for every q of window o
//   LpPool       dX[q] += dY[o] sign(x_q) |x_q|^(p-1) / Y[o]^(p-1)
// com.onnxtrain NchwcMaxPool / NchwcAveragePool / NchwcGlobalAveragePool: the same over float32 2-D
// activations in oneDNN's blocked layout ([N, ceil(C/16), H, W, 16], padded channels zero, which
// pooling keeps zero: see runtime::block_conv_layouts), pooled as the C' = 16 ceil(C/16) channels they
// hold; oneDNN with nChw16c for MaxPool / AveragePool (else the loops over a plain copy), a loop for
// GlobalAveragePool.
// float32 max/average pooling runs oneDNN (pooling_v2) when no Indices are asked for, and so does
// the float32 average pooling gradient; everything else runs the loops below (every float type,
// int8/uint8 for MaxPool).
#include <cmath>
#include <cstring>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <limits>
#include <tuple>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_provider.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/shape/window.h"
#include "kernels/registry.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

using shape::WindowGeom;

namespace {

using shape::PoolKind;

using MaxPoolTypes = decltype(FloatTypes{} + TypeList<int8_t, uint8_t>{});

template <class T>
T lowest() {
  if constexpr (std::is_floating_point_v<compute_t<T>>) return T(-std::numeric_limits<float>::infinity());
  else return std::numeric_limits<T>::lowest();
}

// Tables of one windowed geometry, shared by the forward and backward loops: per output column
// (last spatial dim) the valid range [lo, hi) of the last kernel dim and its count inside the pads;
// per output row (all dims but the last) the input offsets of the window's valid outer positions,
// listed once, so the inner loops run without bounds checks or divisions.
struct PoolTables {
  const WindowGeom& g;
  size_t L;
  int64_t pin, OW, rows, dl, KL;
  // The most valid outer window positions of one row: along each dim at most min(kernel, input),
  // as valid positions land on distinct inputs. A kernel_shape of [2^25, 2^25, 1] thus sizes the
  // offsets table by the input, not by its 2^50 positions.
  int64_t max_offs;
  // The valid window elements of one output at most (a task's cost, for the parallel grain).
  int64_t max_window;
  // Bytes of a per-thread table of max_offs window offsets, rounded to 64 (what follows stays aligned).
  size_t offs_bytes() const { return (size_t(max_offs) * sizeof(int64_t) + 63) / 64 * 64; }
  int64_t full_begin = 0, full_end = 0;  // columns whose last-dim window is whole
  std::vector<int64_t> istride, lo, hi, pad_n, col0;

  explicit PoolTables(const WindowGeom& geom) : g(geom), L(geom.nd - 1) {
    pin = shape_numel(g.in), OW = g.out[L], rows = shape_numel(g.out) / std::max<int64_t>(OW, 1);
    dl = g.dilation[L], KL = g.kernel[L];
    max_offs = 1;
    for (size_t d = 0; d < L; ++d) max_offs *= std::min(g.kernel[d], g.in[d]);
    max_window = max_offs * std::min(KL, g.in[L]);  // <= the plane's size
    istride = contiguous_strides(g.in);
    const size_t ow_n = size_t(OW);
    lo.resize(ow_n), hi.resize(ow_n), pad_n.resize(ow_n), col0.resize(ow_n);
    for (int64_t o = 0; o < OW; ++o) {
      range(L, o, &lo[size_t(o)], &hi[size_t(o)], &pad_n[size_t(o)]);
      col0[size_t(o)] = o * g.stride[L] - g.pad_b[L];
    }
    while (full_begin < OW && (lo[size_t(full_begin)] != 0 || hi[size_t(full_begin)] != KL)) ++full_begin;
    for (full_end = full_begin; full_end < OW && lo[size_t(full_end)] == 0 && hi[size_t(full_end)] == KL;) ++full_end;
  }

  // Valid kernel range [lo, hi) along dim d for output o, and its count inside the pads.
  void range(size_t d, int64_t o, int64_t* l, int64_t* h, int64_t* in_pad) const {
    const int64_t st = o * g.stride[d] - g.pad_b[d], dd = g.dilation[d];
    *l = st < 0 ? (-st + dd - 1) / dd : 0;
    *h = std::max(*l, std::min(g.kernel[d], (g.in[d] - st + dd - 1) / dd));
    *in_pad = std::min(g.kernel[d], (g.in[d] + g.pad_e[d] - st + dd - 1) / dd);
  }

  // Plane offsets of the valid outer window rows of output row `row` (flat over all output dims
  // but the last) into offs; returns their count. *count_pad: the outer window positions inside
  // the pads.
  size_t row_offsets(int64_t row, int64_t* offs, int64_t* count_pad) const {
    int64_t o[16], klo[16], khi[16], k[16];
    int64_t rem = row;
    *count_pad = 1;
    for (size_t d = L; d-- > 0;) {
      o[d] = rem % g.out[d];
      rem /= g.out[d];
    }
    bool empty = false;
    for (size_t d = 0; d < L; ++d) {
      int64_t in_pad;
      range(d, o[d], &klo[d], &khi[d], &in_pad);
      *count_pad *= in_pad;
      empty = empty || khi[d] <= klo[d];
      k[d] = klo[d];
    }
    size_t n_offs = 0;
    while (!empty) {  // odometer over the valid outer window positions
      int64_t off = 0;
      for (size_t d = 0; d < L; ++d) off += (o[d] * g.stride[d] - g.pad_b[d] + k[d] * g.dilation[d]) * istride[d];
      offs[n_offs++] = off;
      size_t d = L;
      while (d-- > 0) {
        if (++k[d] < khi[d]) break;
        k[d] = klo[d];
      }
      if (d == size_t(-1)) break;
    }
    return n_offs;
  }

  // Divisor of AveragePool for column c.
  int64_t count(int64_t c, size_t n_offs, int64_t count_pad, bool include_pad) const {
    return include_pad ? count_pad * pad_n[size_t(c)] : int64_t(n_offs) * (hi[size_t(c)] - lo[size_t(c)]);
  }
  // f(q) for every valid input q (plane offset) in the window of column c.
  template <class F>
  void for_window(int64_t c, const int64_t* offs, size_t n_offs, F&& f) const {
    const int64_t base = col0[size_t(c)];
    for (size_t j = 0; j < n_offs; ++j)
      for (int64_t kl = lo[size_t(c)]; kl < hi[size_t(c)]; ++kl) f(offs[j] + base + kl * dl);
  }
};

typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4)));  // unaligned loads
typedef int32_t v8i __attribute__((vector_size(32)));

// p[0], p[s], ..., p[7s]; `wide`: p[15] may be read too (stride 2 loads two vectors).
inline v8f load_strided(const float* p, int64_t s, bool wide) {
  if (s == 1) return *reinterpret_cast<const v8f_u*>(p);
  if (s == 2 && wide) {
    const v8f a = *reinterpret_cast<const v8f_u*>(p), b = *reinterpret_cast<const v8f_u*>(p + 8);
    return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
  }
  return v8f{p[0], p[s], p[2 * s], p[3 * s], p[4 * s], p[5 * s], p[6 * s], p[7 * s]};
}

// Max and first argmax of the 8 interior columns c..c+7 of one row (float), in vector registers:
// the comparisons are data-dependent, so branch-free lanes beat scalar code by far (2.7x).
template <class Done>
void max8(const PoolTables& t, const float* xp, int64_t c, const int64_t* offs, size_t n_offs, Done&& done) {
  const int64_t sL = t.g.stride[t.L], c0 = t.col0[size_t(c)];
  const bool wide = t.col0[size_t(c + 7)] + (t.KL - 1) * t.dl + 1 < t.g.in[t.L];  // p[15] still in the row
  const v8i lane = v8i{0, 1, 2, 3, 4, 5, 6, 7} * int32_t(sL);
  v8f acc = v8f{} - std::numeric_limits<float>::infinity();
  v8i best = v8i{} - 1;
  for (size_t j = 0; j < n_offs; ++j)
    for (int64_t kl = 0; kl < t.KL; ++kl) {
      const int64_t q0 = offs[j] + kl * t.dl + c0;
      const v8f v = load_strided(xp + q0, sL, wide);
      const v8i gt = v > acc;
      acc = gt ? v : acc;
      best = gt ? lane + int32_t(q0) : best;
    }
  for (int v = 0; v < 8; ++v) done(c + v, acc[v], int64_t(best[v]));
}

// Reduces the windows of one output row of one plane (xp): finish(c, acc, best) for every output
// column c, with acc the max / sum / sum of |x|^p over the window and (max) best the plane offset
// of its first maximum, -1 for an empty window. Interior columns (whole last-dim window inside
// the input) go kLanes at a time: independent accumulator chains instead of one dependent chain.
template <PoolKind K, class T, class Acc, class Finish>
void reduce_row(const PoolTables& t, const T* xp, const int64_t* offs, size_t n_offs, double p, Finish&& finish) {
  constexpr int kLanes = 8;
  auto update = [&](Acc& acc, int64_t& best, int64_t q) {
    const Acc v = Acc(compute_t<T>(xp[q]));
    if constexpr (K == PoolKind::kMax) {  // branch-free: the comparison is unpredictable
      const bool gt = v > acc;
      acc = gt ? v : acc;
      best = gt ? q : best;
    } else if constexpr (K == PoolKind::kAvg) {
      acc += v;
    } else {
      acc += p == 2.0 ? v * v : p == 1.0 ? std::abs(v) : std::pow(std::abs(v), p);
    }
  };
  auto done = [&](int64_t c, Acc acc, int64_t best) {
    // All values were the lowest: the first valid one is the max.
    if (K == PoolKind::kMax && best < 0 && n_offs > 0 && t.hi[size_t(c)] > t.lo[size_t(c)])
      best = offs[0] + t.col0[size_t(c)] + t.lo[size_t(c)] * t.dl;
    finish(c, acc, best);
  };
  const Acc init = K == PoolKind::kMax ? Acc(compute_t<T>(lowest<T>())) : Acc(0);
  auto one = [&](int64_t c) {  // any column
    Acc acc = init;
    int64_t best = -1;
    t.for_window(c, offs, n_offs, [&](int64_t q) { update(acc, best, q); });
    done(c, acc, best);
  };
  int64_t c = 0;
  for (; c < t.full_begin; ++c) one(c);
  if constexpr (K == PoolKind::kMax && std::is_same_v<T, float>) {
    if (t.pin <= std::numeric_limits<int32_t>::max())
      for (; c + kLanes <= t.full_end; c += kLanes) max8(t, xp, c, offs, n_offs, done);
  }
  for (; c + kLanes <= t.full_end; c += kLanes) {
    Acc acc[kLanes];
    int64_t best[kLanes];
    for (int v = 0; v < kLanes; ++v) acc[v] = init, best[v] = -1;
    for (size_t j = 0; j < n_offs; ++j)
      for (int64_t kl = 0; kl < t.KL; ++kl) {
        const int64_t q0 = offs[j] + kl * t.dl;
        for (int v = 0; v < kLanes; ++v) update(acc[v], best[v], q0 + t.col0[size_t(c + v)]);
      }
    for (int v = 0; v < kLanes; ++v) done(c + v, acc[v], best[v]);
  }
  for (; c < t.OW; ++c) one(c);
}

// Sums accumulate in double; the max is exact in the element's own compute type.
template <PoolKind K, class T>
using PoolAcc = std::conditional_t<K != PoolKind::kMax && std::is_floating_point_v<compute_t<T>>, double, compute_t<T>>;

// Forward pooling loop for every type and geometry; output rows are split across threads.
//   x: [planes, in...], y: [planes, out...], ind: flat indices (MaxPool) or null.
template <PoolKind K, class T>
void pool_loop(const T* x, T* y, int64_t* ind, int64_t planes, const WindowGeom& g, bool include_pad, double p,
               bool col_major) {
  using Acc = PoolAcc<K, T>;
  const PoolTables t(g);
  const int64_t pin = t.pin, OW = t.OW, rows = t.rows;
  const double row_cost = std::max(1.0, double(OW) * double(t.max_window));  // double: no overflow
  parallel_for(planes * rows, std::max<int64_t>(1, int64_t(32768 / row_cost)),
               [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> offs(static_cast<size_t>(t.max_offs));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t plane = r / rows;
      int64_t count_pad;
      const size_t n_offs = t.row_offsets(r % rows, offs.data(), &count_pad);
      T* yr = y + r * OW;
      int64_t* ir = ind ? ind + r * OW : nullptr;
      reduce_row<K, T, Acc>(t, x + plane * pin, offs.data(), n_offs, p, [&](int64_t c, Acc acc, int64_t best) {
        if constexpr (K == PoolKind::kMax) {
          yr[c] = T(compute_t<T>(acc));
          if (ir) {
            int64_t flat = best;
            if (col_major && best >= 0) {  // spatial part column-major
              flat = 0;
              for (size_t d = g.nd, rest = size_t(best), mul = size_t(pin); d-- > 0;) {
                mul /= size_t(g.in[d]);
                flat += int64_t(rest % size_t(g.in[d])) * int64_t(mul);
                rest /= size_t(g.in[d]);
              }
            }
            ir[c] = best < 0 ? -1 : plane * pin + flat;
          }
        } else if constexpr (K == PoolKind::kAvg) {
          const int64_t n = t.count(c, n_offs, count_pad, include_pad);
          yr[c] = T(compute_t<T>(n > 0 ? acc / Acc(n) : Acc(0)));
        } else {
          yr[c] = T(compute_t<T>(p == 2.0 ? std::sqrt(acc) : p == 1.0 ? acc : std::pow(acc, 1.0 / p)));
        }
      });
    }
  });
}

// Backward pooling loop: dX of one plane per task (the windows of a plane overlap, planes do not),
// accumulated in the compute type.
//   Max  dX[first argmax of window o] += dY[o]        argmax recomputed from X (one pass over X)
//   Avg  dX[q] += dY[o] / count(o)                    every valid q of window o
//   Lp   dX[q] += dY[o] sign(x_q) |x_q|^(p-1) / Y[o]^(p-1)    (nothing where Y[o] = 0)
// With `ind` (MaxPool's row-major Indices output) the max gradient is a scatter through it.
// Per-thread scratch of pool_grad_loop: window offsets, then (for 16-bit types) a plane of sums.
inline size_t pool_grad_scratch(const PoolTables& t, DType dt) {
  const size_t sums = dt == DType::kFloat16 || dt == DType::kBFloat16 ? size_t(t.pin) * sizeof(float) : 0;
  // Rounded to 64 bytes: each thread's block (and the int64 offsets at its start) stays aligned.
  return (t.offs_bytes() + sums + 63) / 64 * 64;
}

// `scratch`: pool_grad_scratch bytes for each thread of the budget (the plan's workspace).
template <PoolKind K, class T>
void pool_grad_loop(const T* x, const T* y, const T* dy, const int64_t* ind, T* dx, int64_t planes,
                    const PoolTables& t, bool include_pad, double p, char* scratch, const RunContext* err,
                    bool relu_mask = false) {
  using C = compute_t<T>;
  using Acc = PoolAcc<K, T>;
  const int64_t pin = t.pin, OW = t.OW, rows = t.rows, pout = rows * OW;
  const size_t per_thread = pool_grad_scratch(t, dtype_v<T>);
  parallel_for(planes, 1, [&](int64_t p0, int64_t p1) {
    char* mine = scratch + size_t(omp_get_thread_num()) * per_thread;
    int64_t* offs = reinterpret_cast<int64_t*>(mine);
    C* buf = reinterpret_cast<C*>(mine + t.offs_bytes());
    for (int64_t plane = p0; plane < p1; ++plane) {
      const T* xp = x + plane * pin;
      C* gx = std::is_same_v<T, C> ? reinterpret_cast<C*>(dx + plane * pin) : buf;
      std::fill(gx, gx + pin, C(0));
      const T* dyp = dy + plane * pout;
      if (K == PoolKind::kMax && ind) {
        const int64_t* ip = ind + plane * pout;
        for (int64_t o = 0; o < pout; ++o) {
          const int64_t q = ip[o] - plane * pin;
          if (ip[o] < 0) continue;  // empty window
          if (q < 0 || q >= pin) err->fail("index ", ip[o], " of output ", plane * pout + o, " lies outside its plane");
          gx[q] += C(dyp[o]);
        }
      } else {
        for (int64_t row = 0; row < rows; ++row) {
          int64_t count_pad;
          const size_t n_offs = t.row_offsets(row, offs, &count_pad);
          const T* dyr = dyp + row * OW;
          if constexpr (K == PoolKind::kMax) {
            reduce_row<K, T, Acc>(t, xp, offs, n_offs, p, [&](int64_t c, Acc, int64_t best) {
              if (best >= 0 && (!relu_mask || C(xp[best]) > C(0))) gx[best] += C(dyr[c]);
            });
          } else if constexpr (K == PoolKind::kAvg) {
            for (int64_t c = 0; c < OW; ++c) {
              const int64_t n = t.count(c, n_offs, count_pad, include_pad);
              const C w = n > 0 ? C(double(C(dyr[c])) / double(n)) : C(0);
              t.for_window(c, offs, n_offs, [&](int64_t q) { gx[q] += w; });
            }
          } else {
            const T* yr = y + plane * pout + row * OW;
            for (int64_t c = 0; c < OW; ++c) {
              const double yv = double(C(yr[c]));
              if (yv == 0) continue;
              const double s = double(C(dyr[c])) / (p == 2.0 ? yv : p == 1.0 ? 1.0 : std::pow(yv, p - 1));
              t.for_window(c, offs, n_offs, [&](int64_t q) {
                const double v = double(C(xp[q]));
                const double d = p == 2.0 ? v : p == 1.0 ? double((v > 0) - (v < 0))
                                                        : std::copysign(std::pow(std::abs(v), p - 1), v);
                gx[q] += C(s * d);
              });
            }
          }
        }
      }
      if constexpr (!std::is_same_v<T, C>)
        for (int64_t i = 0; i < pin; ++i) dx[plane * pin + i] = T(gx[i]);
    }
  });
}

// Global pools: one contiguous plane per output, reduced in 8 independent lanes (vectorized) in
// the compute type, the lanes and the tail summed in double.
template <PoolKind K, class T>
void global_pool(const T* x, T* y, int64_t planes, int64_t n, double p) {
  using C = compute_t<T>;
  constexpr int64_t kL = 8;
  auto add = [=](auto acc, auto v) {  // p: the Lp pools only
    if constexpr (K == PoolKind::kMax) return std::max(acc, v);
    else if constexpr (K == PoolKind::kAvg) return acc + v;
    else return acc + (p == 2.0 ? v * v : decltype(v)(std::pow(std::abs(double(v)), p)));
  };
  parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * n;
      C lanes[kL];
      for (int64_t l = 0; l < kL; ++l) lanes[l] = K == PoolKind::kMax ? C(lowest<T>()) : C(0);
      int64_t i = 0;
      for (; i + kL <= n; i += kL)
        for (int64_t l = 0; l < kL; ++l) lanes[l] = add(lanes[l], C(xp[i + l]));
      double acc = K == PoolKind::kMax ? double(lanes[0]) : 0.0;
      for (int64_t l = 0; l < kL; ++l) acc = K == PoolKind::kMax ? std::max(acc, double(lanes[l])) : acc + double(lanes[l]);
      for (; i < n; ++i) acc = add(acc, double(C(xp[i])));
      const double r = K == PoolKind::kMax ? acc : K == PoolKind::kAvg ? acc / double(n)
                       : p == 2.0                     ? std::sqrt(acc)
                                                      : std::pow(acc, 1.0 / p);
      y[pl] = T(C(r));
    }
  });
}

// Attributes and geometry of one pooling node (shape::PoolShape, shared by the forward and
// gradient kernels) and its oneDNN primitives.
struct PoolParams : shape::PoolShape {
  // oneDNN pooling_v2 geometry for float32 max / average pooling over plain tensors; false when
  // oneDNN cannot express it.
  bool dnnl_geometry(dnnl::algorithm* alg, dnnl::memory::dims* kernel, dnnl::memory::dims* strides,
                     dnnl::memory::dims* dil, dnnl::memory::dims* pl, dnnl::memory::dims* pr) const {
    const size_t nd = g.nd;
    if (global || kind == PoolKind::kLp || nd > 3) return false;
    *kernel = dnnl_util::dims(g.kernel), *strides = dnnl_util::dims(g.stride), *pl = dnnl_util::dims(g.pad_b);
    dil->resize(nd), pr->resize(nd);
    for (size_t i = 0; i < nd; ++i) {
      (*dil)[i] = g.dilation[i] - 1;
      // Right padding that makes oneDNN's floor formula give our output size (ceil_mode included).
      (*pr)[i] = std::max<int64_t>(0, (g.out[i] - 1) * g.stride[i] + g.extent(i) - g.in[i] - g.pad_b[i]);
      // Padding past the declared pads would count in the divisor of count_include_pad.
      if (kind == PoolKind::kAvg && include_pad && (*pr)[i] > g.pad_e[i]) return false;
    }
    *alg = kind == PoolKind::kMax ? dnnl::algorithm::pooling_max
           : include_pad          ? dnnl::algorithm::pooling_avg_include_padding
                                  : dnnl::algorithm::pooling_avg_exclude_padding;
    return true;
  }

  // Creates into `op` the forward (inference) primitive, or with `backward` the backward one
  // (hinted by a forward_training descriptor); false when oneDNN has nothing but its reference
  // kernel (the loops here are faster) or rejects the geometry.
  bool make_dnnl(dnnl_util::DnnlOp& op, const Shape& x, bool backward,
                 dnnl::memory::format_tag tag = dnnl::memory::format_tag::undef) const {
    dnnl::algorithm alg;
    dnnl::memory::dims kernel, strides, dil, pl, pr;
    if (!dnnl_geometry(&alg, &kernel, &strides, &dil, &pl, &pr)) return false;
    // A window wider than the input (the rest is padding) goes to our loops, which visit only the
    // window's part inside the input: oneDNN walks the whole window, and a kernel of 2^26 over a
    // few pixels ran for minutes (fuzz finding).
    for (size_t i = 0; i < g.nd; ++i)
      if (g.extent(i) > g.in[i]) return false;
    const bool blocked = tag != dnnl::memory::format_tag::undef;
    const dnnl::memory::desc xmd = blocked ? dnnl::memory::desc(dnnl_util::dims(x), dnnl::memory::data_type::f32, tag)
                                           : dnnl_util::plain_md(x),
                             ymd = blocked ? dnnl::memory::desc(dnnl_util::dims(y), dnnl::memory::data_type::f32, tag)
                                           : dnnl_util::plain_md(y);
    auto& eng = dnnl_util::cpu_engine();
    try {
      dnnl::pooling_v2_forward::desc fd(backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
                                        alg, xmd, ymd, strides, kernel, dil, pl, pr);
      dnnl::pooling_v2_forward::primitive_desc fpd(fd, dnnl_util::default_attr(), eng);
      if (!backward) {
        if (dnnl_util::is_reference(fpd)) return false;
        op.init(dnnl::pooling_v2_forward(fpd), fpd.scratchpad_desc());
        op.add_arg(DNNL_ARG_SRC, xmd, fpd.src_desc(), false);
        op.add_arg(DNNL_ARG_DST, ymd, fpd.dst_desc(), true);
        return true;
      }
      dnnl::pooling_v2_backward::desc bd(alg, xmd, ymd, strides, kernel, dil, pl, pr);
      dnnl::pooling_v2_backward::primitive_desc bpd(bd, dnnl_util::default_attr(), eng, fpd);
      if (dnnl_util::is_reference(bpd)) return false;
      op.init(dnnl::pooling_v2_backward(bpd), bpd.scratchpad_desc());
      op.add_arg(DNNL_ARG_DIFF_DST, ymd, bpd.diff_dst_desc(), false);
      op.add_arg(DNNL_ARG_DIFF_SRC, xmd, bpd.diff_src_desc(), true);
      return true;
    } catch (const dnnl::error&) {
      op = dnnl_util::DnnlOp();
      return false;
    }
  }
};

// Max pooling of blocked float32 [blocks, H, W, 16] (2-D, no dilation; NchwcMaxPool): each output pixel's 16
// lanes the maximum over its window's positions inside the input, 8 lanes a vector, from the
// lowest float as oneDNN's pooling (which the plain float32 MaxPool runs): NaN is passed over
// (vmaxps returns its second operand, the running maximum, when the new value is NaN), so a window
// of nothing but -inf and NaN, or with no position inside the input, gives the lowest float.
// Padded channels stay 0.
void maxpool_blocked(const float* x, float* y, int64_t blocks, const WindowGeom& g) {
  constexpr int64_t B = nchwc::kBlock;
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.kernel[0], KW = g.kernel[1], sh = g.stride[0], sw = g.stride[1], ph = g.pad_b[0], pw = g.pad_b[1];
  const __m256 lowest = _mm256_set1_ps(std::numeric_limits<float>::lowest());
  // Rows of output pixels; small tensors stay on one core (kCopyGrain, as the layout reorders).
  parallel_for(blocks * OH, std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(OW * B, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / OH, oh = r % OH, ih = oh * sh - ph;
      const int64_t kh0 = std::max<int64_t>(0, -ih), kh1 = std::clamp<int64_t>(H - ih, kh0, KH);  // rows inside
      const float* xb = x + b * H * W * B;
      float* out = y + r * OW * B;
      for (int64_t ow = 0; ow < OW; ++ow, out += B) {
        const int64_t iw = ow * sw - pw;
        const int64_t kw0 = std::max<int64_t>(0, -iw), kw1 = std::clamp<int64_t>(W - iw, kw0, KW);
        __m256 lo = lowest, hi = lowest;
        if (KH == 3 && KW == 3 && kh0 == 0 && kh1 == 3 && kw0 == 0 && kw1 == 3) {  // whole 3x3 window: unrolled
          const float* v = xb + (ih * W + iw) * B;
          for (int64_t kh = 0; kh < 3; ++kh, v += W * B)
            for (int64_t kw = 0; kw < 3; ++kw) {
              lo = _mm256_max_ps(_mm256_loadu_ps(v + kw * B), lo);
              hi = _mm256_max_ps(_mm256_loadu_ps(v + kw * B + 8), hi);
            }
        } else {
          for (int64_t kh = kh0; kh < kh1; ++kh)
            for (int64_t kw = kw0; kw < kw1; ++kw) {
              const float* v = xb + ((ih + kh) * W + iw + kw) * B;
              lo = _mm256_max_ps(_mm256_loadu_ps(v), lo);
              hi = _mm256_max_ps(_mm256_loadu_ps(v + 8), hi);
            }
        }
        _mm256_storeu_ps(out, lo);
        _mm256_storeu_ps(out + 8, hi);
      }
    }
  });
}

class PoolKernel final : public Kernel {
 public:
  PoolKernel(const KernelInfo& info, PoolKind kind, bool global, bool blocked = false) : blocked_(blocked) {
    p_.read(info, kind, global, false);
    int_types_ = !blocked && kind == PoolKind::kMax && !global && info.opset() >= 12;
  }

  void prepare(PrepareContext& ctx) override {
    dt_ = ctx.input_dtype(0);
    if (int_types_) dispatch<MaxPoolTypes>(dt_, ctx.node(), [&]<class T>() {});
    else dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {});
    if (blocked_) return prepare_blocked(ctx);
    const Shape& x = ctx.input_shape(0);
    p_.resolve(ctx, x);
    ctx.set_output(0, dt_, p_.y);
    want_indices_ = shape::pool_wants_indices(ctx, p_);
    if (want_indices_) ctx.set_output(1, DType::kInt64, p_.y);
    op_ = dnnl_util::DnnlOp();
    if (dt_ == DType::kFloat32 && !want_indices_ && shape_numel(p_.y) > 0 && p_.make_dnnl(op_, x, false))
      ctx.request_workspace(op_.workspace_bytes());
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    Tensor& Y = ctx.output(0);
    if (Y.numel() == 0) return;
    if (blocked_) return run_blocked(ctx);
    if (op_.valid()) {
      op_.bind(DNNL_ARG_SRC, X.raw_data());
      op_.bind(DNNL_ARG_DST, Y.raw_data());
      op_.execute(ctx.workspace(), CpuContext::of(ctx).stream());
      return;
    }
    int64_t* ind = want_indices_ ? ctx.output(1).data<int64_t>() : nullptr;
    const WindowGeom& g = p_.g;
    const int64_t planes = p_.planes;
    const bool incl = p_.include_pad, cm = p_.col_major;
    const double p = p_.p;
    dispatch<MaxPoolTypes>(dt_, ctx.node(), [&]<class T>() {
      const T* x = X.data<T>();
      T* y = Y.data<T>();
      if constexpr (std::is_floating_point_v<compute_t<T>>) {
        if (p_.global) {
          const int64_t n = shape_numel(g.in);
          if (p_.kind == PoolKind::kMax) global_pool<PoolKind::kMax>(x, y, planes, n, p);
          else if (p_.kind == PoolKind::kAvg) global_pool<PoolKind::kAvg>(x, y, planes, n, p);
          else global_pool<PoolKind::kLp>(x, y, planes, n, p);
          return;
        }
      }
      switch (p_.kind) {
        case PoolKind::kMax: pool_loop<PoolKind::kMax>(x, y, ind, planes, g, incl, p, cm); break;
        case PoolKind::kAvg:
          if constexpr (std::is_floating_point_v<compute_t<T>>) pool_loop<PoolKind::kAvg>(x, y, ind, planes, g, incl, p, cm);
          break;
        case PoolKind::kLp:
          if constexpr (std::is_floating_point_v<compute_t<T>>) pool_loop<PoolKind::kLp>(x, y, ind, planes, g, incl, p, cm);
          break;
      }
    });
  }

 private:
  // The blocked forms: X [N, CB, H, W, 16] pooled as plain [N, 16 CB, H, W].
  void prepare_blocked(PrepareContext& ctx) {
    const Shape& xb = ctx.input_shape(0);
    if (dt_ != DType::kFloat32 || xb.size() != 5 || xb[4] != nchwc::kBlock)
      ctx.fail("X must be float32 [N, C/16, H, W, 16], got ", dtype_name(dt_), " ", shape_to_string(xb));
    x_ = {xb[0], xb[1] * nchwc::kBlock, xb[2], xb[3]};
    p_.resolve(ctx, x_);
    ctx.set_output(0, dt_, nchwc::blocked_shape(p_.y));
    op_ = dnnl_util::DnnlOp();
    // Dilated windows keep the path below (oneDNN, else the plain loops): the plain MaxPool runs its
    // loops there, whose max starts at -inf where maxpool_blocked's starts at the lowest float.
    blocked_max_ = p_.kind == PoolKind::kMax && !p_.global && p_.g.nd == 2 && p_.g.dilation == Shape{1, 1};
    if (shape_numel(p_.y) == 0 || p_.global || blocked_max_) return;
    if (p_.make_dnnl(op_, x_, false, dnnl::memory::format_tag::nChw16c))
      return ctx.request_workspace(op_.workspace_bytes());
    // Plain copies of X and Y for the loops.
    ctx.request_workspace((size_t(shape_numel(x_)) + size_t(shape_numel(p_.y))) * sizeof(float) + 64);
  }
  void run_blocked(RunContext& ctx) {
    const float* x = ctx.input(0).data<float>();
    float* y = ctx.output(0).data<float>();
    if (blocked_max_) return maxpool_blocked(x, y, x_[0] * (x_[1] / nchwc::kBlock), p_.g);
    if (op_.valid()) {
      op_.bind(DNNL_ARG_SRC, x);
      op_.bind(DNNL_ARG_DST, y);
      op_.execute(ctx.workspace(), CpuContext::of(ctx).stream());
      return;
    }
    const int64_t N = x_[0], C = x_[1], HW = x_[2] * x_[3];
    if (p_.global) {  // [N, CB, HW, 16] -> [N, CB, 16]: the mean of each lane, summed in double
      parallel_for(N * (C / nchwc::kBlock), std::max<int64_t>(1, 4096 / std::max<int64_t>(HW * nchwc::kBlock, 1)),
                   [&](int64_t b0, int64_t b1) {
                     for (int64_t b = b0; b < b1; ++b) {
                       double acc[nchwc::kBlock] = {};
                       const float* xb = x + b * HW * nchwc::kBlock;
                       for (int64_t p = 0; p < HW; ++p)
                         for (int64_t c = 0; c < nchwc::kBlock; ++c) acc[c] += double(xb[p * nchwc::kBlock + c]);
                       for (int64_t c = 0; c < nchwc::kBlock; ++c)
                         y[b * nchwc::kBlock + c] = HW ? float(acc[c] / double(HW)) : 0.f;
                     }
                   });
      return;
    }
    float* xp = static_cast<float*>(ctx.workspace());
    float* yp = xp + shape_numel(x_);
    const int64_t OHW = p_.y[2] * p_.y[3];
    nchwc::from_blocked(x, xp, N, C, HW);
    if (p_.kind == PoolKind::kMax)
      pool_loop<PoolKind::kMax>(xp, yp, static_cast<int64_t*>(nullptr), p_.planes, p_.g, p_.include_pad, p_.p, false);
    else
      pool_loop<PoolKind::kAvg>(xp, yp, static_cast<int64_t*>(nullptr), p_.planes, p_.g, p_.include_pad, p_.p, false);
    nchwc::to_blocked(yp, y, N, C, OHW);
  }

  PoolParams p_;
  bool blocked_ = false;
  bool blocked_max_ = false;  // NchwcMaxPool 2-D: maxpool_blocked
  Shape x_;  // the blocked forms' plain view of X
  bool int_types_ = false, want_indices_ = false;
  DType dt_ = DType::kFloat32;
  dnnl_util::DnnlOp op_;
};

// ------------------------------------------------------------ gradients
// com.onnxtrain.<Pool>Grad(dY, X [, third]) -> dX, attributes of the forward node:
//   MaxPoolGrad        third: MaxPool's Indices output (storage_order 0), optional: then a scatter.
//                      Attribute relu_mask = 1 (no third input): dX masked by X > 0, the
//                      ReluGrad(dX, X) that train/fusion.h's fuse_relu_grad folds in.
//                      Without it the first maximum of each window is found again in X (one pass
//                      over X, 8 columns per vector for float32), so that nothing stays alive
//                      between forward and backward and the forward keeps its fast oneDNN
//                      inference primitive. oneDNN's forward_training (argmax workspace) + backward
//                      measured the same CPU time (bench/bench_grad.py) in two passes, and its tie
//                      order is the implementation's; the loop guarantees the first maximum.
//   AveragePoolGrad    X is read for its shape only; float32 runs oneDNN pooling backward
//   LpPoolGrad         third: the forward output Y; p is a float attribute
//   Global{Max,Average,Lp}PoolGrad   the same over whole planes
// GlobalAveragePool's gradient: dX[plane, :] = dY[plane] / n.
template <class T>
void global_avg_grad(const T* dy, T* dx, int64_t planes, int64_t n) {
  parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl)
      std::fill(dx + pl * n, dx + (pl + 1) * n, T(compute_t<T>(double(compute_t<T>(dy[pl])) / double(n))));
  });
}

// MaxPool 2x2, stride 2, no padding or dilation, float32 (the common CNN case): each element of X
// lies in at most one window, so dX is written once (no zero fill, no scatter). The same first
// maximum as pool_grad_loop: strictly greater than the running maximum from the lowest value, the
// window's first element when none is (all NaN or lowest); rows and columns outside every window
// get 0.
// 8 windows: rows a (r0) and b (r1), 16 columns each as two vectors, their gradients gv ->
// d0[0..1], d1[0..1] (16 columns each).
// relu_mask: nothing routed where the window's maximum is not > 0 (ReluGrad of X fused).
inline void maxpool2x2_grad8(v8f a0, v8f a1, v8f b0, v8f b1, v8f gv, v8f* d0, v8f* d1, bool relu_mask) {
  const v8f ninf = v8f{} - std::numeric_limits<float>::infinity(), zero = v8f{};
  const v8f a = __builtin_shufflevector(a0, a1, 0, 2, 4, 6, 8, 10, 12, 14);
  const v8f b = __builtin_shufflevector(a0, a1, 1, 3, 5, 7, 9, 11, 13, 15);
  const v8f c = __builtin_shufflevector(b0, b1, 0, 2, 4, 6, 8, 10, 12, 14);
  const v8f d = __builtin_shufflevector(b0, b1, 1, 3, 5, 7, 9, 11, 13, 15);
  // Running maximum from -inf, strictly greater wins: NaN never does, a stays first otherwise.
  v8f m = a > ninf ? a : ninf;
  const v8i gb = b > m;
  m = gb ? b : m;
  const v8i gc = c > m;
  m = gc ? c : m;
  const v8i gd = d > m;
  // The routed element's value is the maximum, -inf where none won (a, then -inf or NaN).
  if (relu_mask) gv = (gd ? d : m) > zero ? gv : zero;
  const v8f wd = gd ? gv : zero;
  const v8f wc = (gc & ~gd) ? gv : zero;
  const v8f wb = (gb & ~gc & ~gd) ? gv : zero;
  const v8f wa = (gb | gc | gd) ? zero : gv;
  d0[0] = __builtin_shufflevector(wa, wb, 0, 8, 1, 9, 2, 10, 3, 11);
  d0[1] = __builtin_shufflevector(wa, wb, 4, 12, 5, 13, 6, 14, 7, 15);
  d1[0] = __builtin_shufflevector(wc, wd, 0, 8, 1, 9, 2, 10, 3, 11);
  d1[1] = __builtin_shufflevector(wc, wd, 4, 12, 5, 13, 6, 14, 7, 15);
}

// The last n < 8 windows of a row pair (2n columns of r0 and r1, n gradients). AVX2: masked
// loads and stores, nothing read or written past the 2n columns (the rows of a small plane, 11 or
// 26 columns, end in such a tail every time: copying it through padded buffers cost as much as
// the rest of the row); otherwise through zero-padded copies.
inline void maxpool2x2_grad_tail(const float* r0, const float* r1, const float* g, float* d0, float* d1, int n,
                                 bool relu_mask) {
  v8f o0[2], o1[2];
#ifdef __AVX2__
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n), lane);
  const __m256i hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n - 8), lane);
  const __m256i gm = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
  maxpool2x2_grad8(v8f(_mm256_maskload_ps(r0, lo)), v8f(_mm256_maskload_ps(r0 + 8, hi)),
                   v8f(_mm256_maskload_ps(r1, lo)), v8f(_mm256_maskload_ps(r1 + 8, hi)),
                   v8f(_mm256_maskload_ps(g, gm)), o0, o1, relu_mask);
  _mm256_maskstore_ps(d0, lo, __m256(o0[0]));
  _mm256_maskstore_ps(d0 + 8, hi, __m256(o0[1]));
  _mm256_maskstore_ps(d1, lo, __m256(o1[0]));
  _mm256_maskstore_ps(d1 + 8, hi, __m256(o1[1]));
#else
  alignas(32) float in0[16] = {}, in1[16] = {}, gin[8] = {}, out0[16], out1[16];
  std::copy_n(r0, 2 * n, in0), std::copy_n(r1, 2 * n, in1), std::copy_n(g, n, gin);
  const v8f* i0 = reinterpret_cast<const v8f*>(in0);
  const v8f* i1 = reinterpret_cast<const v8f*>(in1);
  maxpool2x2_grad8(i0[0], i0[1], i1[0], i1[1], *reinterpret_cast<const v8f*>(gin), o0, o1, relu_mask);
  std::memcpy(out0, o0, sizeof(out0)), std::memcpy(out1, o1, sizeof(out1));
  std::copy_n(out0, 2 * n, d0), std::copy_n(out1, 2 * n, d1);
#endif
}

void maxpool2x2_grad(const float* x, const float* dy, float* dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                     int64_t OW, bool relu_mask) {
  parallel_for(planes, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t plane = p0; plane < p1; ++plane) {
      const float* xp = x + plane * H * W;
      float* dxp = dx + plane * H * W;
      const float* dyp = dy + plane * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const float* r0 = xp + 2 * oh * W;
        const float* r1 = r0 + W;
        float* d0 = dxp + 2 * oh * W;
        float* d1 = d0 + W;
        const float* g = dyp + oh * OW;
        // 8 windows at a time in vector registers (even/odd columns split by shuffles), then the
        // last 1-7 windows of the row.
        for (int64_t ow = 0; ow < OW; ow += 8) {
          const int64_t n = std::min<int64_t>(8, OW - ow);
          if (n < 8) {
            maxpool2x2_grad_tail(r0 + 2 * ow, r1 + 2 * ow, g + ow, d0 + 2 * ow, d1 + 2 * ow, int(n), relu_mask);
            continue;
          }
          auto ld = [](const float* p) { return v8f(*reinterpret_cast<const v8f_u*>(p)); };
          v8f o0[2], o1[2];
          maxpool2x2_grad8(ld(r0 + 2 * ow), ld(r0 + 2 * ow + 8), ld(r1 + 2 * ow), ld(r1 + 2 * ow + 8), ld(g + ow), o0,
                           o1, relu_mask);
          for (int h = 0; h < 2; ++h) {
            *reinterpret_cast<v8f_u*>(d0 + 2 * ow + 8 * h) = o0[h];
            *reinterpret_cast<v8f_u*>(d1 + 2 * ow + 8 * h) = o1[h];
          }
        }
        for (int64_t w = 2 * OW; w < W; ++w) d0[w] = d1[w] = 0.f;
      }
      std::fill(dxp + 2 * OH * W, dxp + H * W, 0.f);
    }
  });
}

// MaxPool 3x3, stride 2, pads of 0 or 1, no dilation, float32 (ResNet's and DenseNet's stem pool,
// GoogLeNet's and Inception's reductions): windows overlap by one row and one column, so dX rows
// are zeroed just ahead of the output row that first reaches them and the up to four
// contributions of a shared element added there, while the rows are in the first-level cache —
// one pass writing dX instead of a zero fill of the plane and a scatter over it. Each window's
// first maximum (row-major, strictly greater from -inf; the first valid element where none is) is
// pool_grad_loop's, and every element sums its contributions in the same order: the same bits.
// Eight interior windows at a time in vector registers (a window row's three columns from two
// loads split into even and odd lanes); the edges window by window.
struct MaxPool3x3s2 {
  int64_t H, W, OH, OW, pt, pl;
  bool relu_mask;

  // Routes g to the first maximum among rows [r0, r1) and columns [c0, c1) of the window.
  void one(const float* xp, float* dxp, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float g) const {
    float acc = -std::numeric_limits<float>::infinity();
    int64_t best = -1;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const float v = xp[r * W + c];
        if (v > acc) acc = v, best = r * W + c;
      }
    if (best < 0) {
      if (r0 >= r1 || c0 >= c1) return;  // empty window
      best = r0 * W + c0, acc = xp[best];
    }
    if (!relu_mask || acc > 0.f) dxp[best] += g;
  }

  void plane(const float* xp, const float* dyp, float* dxp) const {
    const v8i lane2 = v8i{0, 2, 4, 6, 8, 10, 12, 14};
    int64_t zeroed = 0;  // dX rows [0, zeroed) are written or zero
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t rb = 2 * oh - pt, r0 = std::max<int64_t>(rb, 0), r1 = std::min(rb + 3, H);
      if (r1 > zeroed) {
        std::fill(dxp + zeroed * W, dxp + r1 * W, 0.f);
        zeroed = r1;
      }
      const float* g = dyp + oh * OW;
      int64_t ow = 0;
      auto edge = [&](int64_t o) {
        const int64_t cb = 2 * o - pl;
        one(xp, dxp, r0, r1, std::max<int64_t>(cb, 0), std::min(cb + 3, W), g[o]);
      };
      // Interior: columns cb - 1 .. cb + 16 inside the row for the eight windows' loads.
      for (; ow < OW && 2 * ow - pl < 1; ++ow) edge(ow);
      for (; ow + 8 <= OW && 2 * ow - pl + 16 < W; ow += 8) {
        const int64_t cb = 2 * ow - pl;
        v8f acc = v8f{} - std::numeric_limits<float>::infinity();
        v8i best = v8i{} - 1;
        for (int64_t r = r0; r < r1; ++r) {
          const float* row = xp + r * W + cb;
          const v8f a0 = *reinterpret_cast<const v8f_u*>(row - 1), a1 = *reinterpret_cast<const v8f_u*>(row + 7);
          const v8f b0 = *reinterpret_cast<const v8f_u*>(row + 1), b1 = *reinterpret_cast<const v8f_u*>(row + 9);
          const v8f col[3] = {__builtin_shufflevector(a0, a1, 1, 3, 5, 7, 9, 11, 13, 15),
                              __builtin_shufflevector(b0, b1, 0, 2, 4, 6, 8, 10, 12, 14),
                              __builtin_shufflevector(b0, b1, 1, 3, 5, 7, 9, 11, 13, 15)};
          const int32_t q = int32_t(r * W + cb);
          for (int k = 0; k < 3; ++k) {
            const v8i gt = col[k] > acc;
            acc = gt ? col[k] : acc;
            best = gt ? lane2 + (q + k) : best;
          }
        }
        for (int i = 0; i < 8; ++i) {
          int64_t b = best[i];
          float v = acc[i];
          if (b < 0) {  // no element above -inf (or all NaN): the window's first
            if (r0 >= r1) continue;
            b = r0 * W + cb + 2 * i, v = xp[b];
          }
          if (!relu_mask || v > 0.f) dxp[b] += g[ow + i];
        }
      }
      for (; ow < OW; ++ow) edge(ow);
    }
    if (zeroed < H) std::fill(dxp + zeroed * W, dxp + H * W, 0.f);
  }
};

class PoolGradKernel final : public Kernel {
 public:
  PoolGradKernel(const KernelInfo& info, PoolKind kind, bool global) {
    p_.read(info, kind, global, true);
    relu_mask_ = info.attr_int("relu_mask", 0) != 0;
    if (relu_mask_ && (kind != PoolKind::kMax || global))
      info.fail("attribute relu_mask applies to MaxPoolGrad only");
  }

  void prepare(PrepareContext& ctx) override {
    dt_ = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {});
    third_ = shape::pool_grad_inputs(ctx, p_, dt_);
    if (relu_mask_ && third_) ctx.fail("relu_mask is not implemented with MaxPool's Indices (input 2)");
    const Shape& x = ctx.input_shape(1);
    ctx.set_output(0, dt_, x);
    op_ = dnnl_util::DnnlOp();
    tables_.reset();
    const WindowGeom& g = p_.g;
    fast2x2_ = p_.kind == PoolKind::kMax && !p_.global && !third_ && dt_ == DType::kFloat32 && g.nd == 2 &&
               g.kernel == Shape{2, 2} && g.stride == Shape{2, 2} && g.dilation == Shape{1, 1} &&
               g.pad_b == Shape{0, 0} && g.pad_e == Shape{0, 0} && g.out[0] * 2 <= g.in[0] && g.out[1] * 2 <= g.in[1];
    fast3x3_ = p_.kind == PoolKind::kMax && !p_.global && !third_ && dt_ == DType::kFloat32 && g.nd == 2 &&
               g.kernel == Shape{3, 3} && g.stride == Shape{2, 2} && g.dilation == Shape{1, 1} &&
               g.pad_b[0] <= 1 && g.pad_b[1] <= 1 && g.pad_e[0] <= 1 && g.pad_e[1] <= 1 &&
               g.in[0] * g.in[1] <= std::numeric_limits<int32_t>::max();
    if (fast2x2_ || fast3x3_) return;
    if (dt_ == DType::kFloat32 && p_.kind == PoolKind::kAvg && shape_numel(p_.y) > 0 && p_.make_dnnl(op_, x, true)) {
      ctx.request_workspace(op_.workspace_bytes());
    } else if (!(p_.global && p_.kind == PoolKind::kAvg) && shape_numel(p_.y) > 0) {
      tables_ = std::make_unique<PoolTables>(p_.g);
      const int threads = thread_budget(ctx.options().num_threads);
      ctx.request_workspace(size_t(std::max(threads, 1)) * pool_grad_scratch(*tables_, dt_));
    }
  }

  void run(RunContext& ctx) override {
    Tensor& dX = ctx.output(0);
    if (dX.numel() == 0) return;
    const Tensor& dY = ctx.input(0);
    if (dY.numel() == 0) {
      std::memset(dX.raw_data(), 0, dX.nbytes());
      return;
    }
    if (op_.valid()) {
      op_.bind(DNNL_ARG_DIFF_DST, dY.raw_data());
      op_.bind(DNNL_ARG_DIFF_SRC, dX.raw_data());
      op_.execute(ctx.workspace(), CpuContext::of(ctx).stream());
      return;
    }
    if (fast2x2_)
      return maxpool2x2_grad(ctx.input(1).data<float>(), dY.data<float>(), dX.data<float>(), p_.planes, p_.g.in[0],
                             p_.g.in[1], p_.g.out[0], p_.g.out[1], relu_mask_);
    if (fast3x3_) {
      const WindowGeom& g = p_.g;
      const MaxPool3x3s2 k{g.in[0], g.in[1], g.out[0], g.out[1], g.pad_b[0], g.pad_b[1], relu_mask_};
      const float* x = ctx.input(1).data<float>();
      const float* dy = dY.data<float>();
      float* dx = dX.data<float>();
      const int64_t pin = g.in[0] * g.in[1], pout = g.out[0] * g.out[1];
      parallel_for(p_.planes, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t pl = p0; pl < p1; ++pl) k.plane(x + pl * pin, dy + pl * pout, dx + pl * pin);
      });
      return;
    }
    const int64_t* ind = third_ && p_.kind == PoolKind::kMax ? ctx.input(2).data<int64_t>() : nullptr;
    dispatch<FloatTypes>(dt_, ctx.node(), [&]<class T>() {
      const T* x = ctx.input(1).data<T>();
      const T* y = third_ && p_.kind == PoolKind::kLp ? ctx.input(2).data<T>() : nullptr;
      const T* dy = dY.data<T>();
      T* dx = dX.data<T>();
      if (p_.global && p_.kind == PoolKind::kAvg) return global_avg_grad(dy, dx, p_.planes, shape_numel(p_.g.in));
      if (ctx.num_threads() > 0 && size_t(ctx.num_threads()) * pool_grad_scratch(*tables_, dt_) > ctx.workspace_bytes())
        ctx.fail("internal: pool gradient scratch for ", ctx.num_threads(), " threads exceeds the workspace");
      char* ws = static_cast<char*>(ctx.workspace());
      switch (p_.kind) {
        case PoolKind::kMax:
          pool_grad_loop<PoolKind::kMax>(x, y, dy, ind, dx, p_.planes, *tables_, p_.include_pad, p_.p, ws, &ctx,
                                         relu_mask_);
          break;
        case PoolKind::kAvg:
          pool_grad_loop<PoolKind::kAvg>(x, y, dy, ind, dx, p_.planes, *tables_, p_.include_pad, p_.p, ws, &ctx);
          break;
        case PoolKind::kLp:
          pool_grad_loop<PoolKind::kLp>(x, y, dy, ind, dx, p_.planes, *tables_, p_.include_pad, p_.p, ws, &ctx);
          break;
      }
    });
  }

 private:
  PoolParams p_;
  bool third_ = false, fast2x2_ = false, fast3x3_ = false;
  bool relu_mask_ = false;  // dX masked by X > 0: ReluGrad(MaxPoolGrad(dY, X), X) in one pass
  DType dt_ = DType::kFloat32;
  dnnl_util::DnnlOp op_;
  std::unique_ptr<PoolTables> tables_;  // window tables, built for the prepared shapes
};

KernelFactory pool(PoolKind kind, bool global, bool grad = false) {
  return [kind, global, grad](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    if (grad) return std::make_unique<PoolGradKernel>(i, kind, global);
    return std::make_unique<PoolKernel>(i, kind, global);
  };
}

}  // namespace

void register_pool(KernelRegistry& r) {
  r.add("MaxPool", 1, kMaxOpsetAll, pool(PoolKind::kMax, false));
  r.add("AveragePool", 1, kMaxOpsetAll, pool(PoolKind::kAvg, false));
  r.add("LpPool", 1, kMaxOpsetAll, pool(PoolKind::kLp, false));
  r.add("GlobalMaxPool", 1, kMaxOpsetAll, pool(PoolKind::kMax, true));
  r.add("GlobalAveragePool", 1, kMaxOpsetAll, pool(PoolKind::kAvg, true));
  r.add("GlobalLpPool", 1, kMaxOpsetAll, pool(PoolKind::kLp, true));
  const char* d = ops::kDomain;
  for (auto [name, kind, global] : {std::tuple{"NchwcMaxPool", PoolKind::kMax, false},
                                    std::tuple{"NchwcAveragePool", PoolKind::kAvg, false},
                                    std::tuple{"NchwcGlobalAveragePool", PoolKind::kAvg, true}})
    r.add(d, name, 1, kMaxOpsetAll, [kind, global](const KernelInfo& i) -> std::unique_ptr<Kernel> {
      return std::make_unique<PoolKernel>(i, kind, global, true);
    });
  r.add(d, "MaxPoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kMax, false, true));
  r.add(d, "AveragePoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kAvg, false, true));
  r.add(d, "LpPoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kLp, false, true));
  r.add(d, "GlobalMaxPoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kMax, true, true));
  r.add(d, "GlobalAveragePoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kAvg, true, true));
  r.add(d, "GlobalLpPoolGrad", 1, kMaxOpsetAll, pool(PoolKind::kLp, true, true));
}

}  // namespace onnxtrain::kernels::cpu
