// Image operators: Resize (nearest / n-linear / n-cubic), DepthToSpace, SpaceToDepth.
//   Resize:  Y[y] = sum over taps t of prod_d w_d(y_d, t_d) * X[idx_d(y_d, t_d)]   Y: sizes, or floor(X * scales)
//            per axis d, the output coordinate y_d maps to x = f(y_d) in X (coordinate_transformation_mode);
//            with i0 = ceil(x) - 1 and r = x - i0 in (0, 1] the taps are
//              nearest: one of {i0, i0 + 1} (nearest_mode), linear: {i0: 1 - r, i0 + 1: r},
//              cubic: i0 - 1 .. i0 + 2 with Keys' coefficients (cubic_coeff_a);
//            taps outside X take the edge value (or weight 0 with exclude_outside, renormalized);
//            tf_crop_and_resize: x outside [0, len - 1] on any axis gives extrapolation_value.
//            This is the ONNX reference (onnx/backend/test/case/node/resize.py) made separable.
//   DepthToSpace (DCR): Y[n, c, h*b + i, w*b + j] = X[n, (i*b + j)*C' + c, h, w]   Y: [N, C/b^2, H*b, W*b]
//                (CRD): Y[n, c, h*b + i, w*b + j] = X[n, c*b*b + i*b + j, h, w]
//   SpaceToDepth:       Y[n, (i*b + j)*C + c, h, w] = X[n, c, h*b + i, w*b + j]    Y: [N, C*b^2, H/b, W/b]
//   ResizeGrad (com.onnxtrain): dX[idx_d(y_d, t_d)...] += prod_d w_d(y_d, t_d) * dY[y], axis by axis
#include <cstring>
#include <limits>

#include "kernels/cpu/backward.h"
#include "kernels/cpu/common.h"
#include "kernels/registry.h"
#include "kernels/shape/image.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

/// Converts an accumulated value to the element type (integers round and saturate).
template <class T, class A>
inline T to_elem(A v) {
  if constexpr (std::is_integral_v<T>) {
    v = std::nearbyint(v);
    if (!(v >= A(std::numeric_limits<T>::min()))) return std::numeric_limits<T>::min();  // NaN too
    if (v >= A(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

// Accumulation type: float for small types, double for double and wide integers.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double> || (std::is_integral_v<T> && sizeof(T) >= 4), double, float>;

// ================================================================ Resize
/// Per-plan precomputation: the active block of axes [first, last], taps per axis as element
/// offsets into X, weights in the accumulation type.
struct ResizePlan {
  int64_t outer = 1, inner = 1;  // identity axes before / after the active block
  int64_t in_block = 0, out_block = 0;  // elements of X / Y per outer index
  std::vector<shape::ResizeAxis> axes;  // active axes only
  std::vector<std::vector<int64_t>> off;  // per active axis: idx * stride in X, [out * K]
  std::vector<std::vector<float>> wf;
  std::vector<std::vector<double>> wd;
  int64_t rows = 0;     // outer * prod(out of active axes but the last)
  int64_t combos = 1;   // prod K of active axes but the last
  bool gather = true;   // every active axis has one tap: pure data movement
  bool any_outside = false;
  int64_t cache_slots = 0;   // inner == 1 interpolation: rows of the last axis cached per thread
  size_t cache_bytes = 0;    // scratch per thread
};

// Taps per axis and output shape: shape::resize_tables.
class ResizeKernel final : public Kernel {
 public:
  static constexpr int64_t kMaxTapsPerValue = 4096;
  explicit ResizeKernel(const KernelInfo& info)
      : opset_(info.opset()), a_(shape::read_resize_attrs(info, info.opset())) {}

  void prepare(PrepareContext& ctx) override {
    const Shape& xs = ctx.input_shape(0);
    const size_t rank = xs.size();
    const DType dt = ctx.input_dtype(0);
    if (a_.mode != shape::ResizeMode::kNearest) dispatch<NumericTypes>(dt, ctx.node(), [&]<class T>() {});
    Shape ys;
    std::vector<shape::ResizeAxis> tables;
    if (!shape::resize_tables(ctx, opset_, a_, xs, &ys, &tables)) {
      ctx.set_output_dynamic(0, dt);
      return;
    }
    check_output_size(ctx, ys, dt);

    // Identity axes at both ends fold into outer / inner.
    size_t first = 0, last = rank;
    while (first < rank && tables[first].identity()) ++first;
    while (last > first && tables[last - 1].identity()) --last;
    p_ = ResizePlan();
    p_.outer = dim_product(xs, 0, first);
    p_.inner = dim_product(xs, last, rank);
    p_.in_block = dim_product(xs, first, rank);
    p_.out_block = dim_product(ys, first, rank);
    int64_t stride = p_.inner;
    p_.rows = p_.outer;
    for (size_t d = last; d-- > first;) {
      const shape::ResizeAxis& t = tables[d];
      std::vector<int64_t> off(t.idx.size());
      for (size_t i = 0; i < off.size(); ++i) off[i] = t.idx[i] * stride;
      stride *= t.in;
      p_.off.insert(p_.off.begin(), std::move(off));
      p_.wd.insert(p_.wd.begin(), t.w);
      p_.wf.insert(p_.wf.begin(), std::vector<float>(t.w.begin(), t.w.end()));
      if (d + 1 != last) {
        p_.rows *= t.out;
        p_.combos = std::min(p_.combos * t.K, kMaxTapsPerValue + 1);  // saturated: checked below
      }
      p_.gather = p_.gather && t.K == 1;
      p_.any_outside = p_.any_outside || t.any_outside;
    }
    // Each output value combines the taps of every interpolated axis: 4^r for cubic over r axes.
    // Past 4096 (6 cubic or 12 linear axes; onnxruntime interpolates 2 or 3) a small tensor of
    // high rank would cost 4^r operations per value and 4^(r-1) scratch entries per thread.
    const int64_t taps = p_.combos * (last > first ? tables[last - 1].K : 1);
    if (taps > kMaxTapsPerValue)
      ctx.fail("interpolating more than ", kMaxTapsPerValue, " input values per output value (the product ",
               "of the taps of the interpolated axes) is not supported: use mode 'nearest' or fewer interpolated axes");
    p_.axes.assign(tables.begin() + long(first), tables.begin() + long(last));
    if (p_.any_outside && dt == DType::kString) ctx.fail("extrapolation needs a numeric element type");
    if (!p_.gather && p_.inner == 1 && !p_.axes.empty()) {
      // Each input row is interpolated along the last axis once per thread (it serves several
      // output rows), then output rows combine cached rows: slots rows + 1 accumulator row.
      const int64_t nx = p_.axes.back().out;
      p_.cache_slots = std::clamp<int64_t>(2 * p_.combos, 2, 8);
      // slots + 1 rows (padded to 8 elements), then tags and stamps; see RowCache.
      p_.cache_bytes = (size_t(p_.cache_slots + 1) * size_t(nx + 8) * sizeof(double) + size_t(p_.cache_slots) * 16 + 63) / 64 * 64;
      const int threads = std::max(hardware_threads(), ctx.options().num_threads);
      ctx.request_workspace(p_.cache_bytes * size_t(threads));
    }
    ctx.set_output(0, dt, ys);
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (p_.axes.empty()) {  // every axis is the identity
      y.copy_from(x);
      return;
    }
    if (p_.gather) {
      dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
        T fill{};
        if (p_.any_outside)
          dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class E>() {
            if constexpr (sizeof(E) == sizeof(T)) {  // the bits of the value as its element type
              const E e = to_elem<E>(a_.extrapolation);
              std::memcpy(static_cast<void*>(&fill), &e, sizeof(E));
            }
          });
        gather_rows<T>(static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), fill);
      });
      return;
    }
    dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using A = acc_t<T>;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      const bool cached = p_.cache_slots > 0;
      switch (p_.axes.back().K) {
        case 1: cached ? cached_rows<T, A, 1>(ctx, src, dst) : interp_rows<T, A, 1>(src, dst); break;
        case 2: cached ? cached_rows<T, A, 2>(ctx, src, dst) : interp_rows<T, A, 2>(src, dst); break;
        default: cached ? cached_rows<T, A, 4>(ctx, src, dst) : interp_rows<T, A, 4>(src, dst); break;
      }
    });
  }

 private:
  /// Output row r = (outer o, coordinates yc of the active axes but the last), `row_len`
  /// contiguous elements of Y. In parallel chunks: state = init() per chunk, then
  /// body(state, o, yc, out) for every row; rows and columns outside the crop get `fill`.
  template <class T, class Init, class Body>
  void for_each_row(T* dst, T fill, Init&& init, Body&& body) const {
    const size_t m = p_.axes.size();
    const shape::ResizeAxis& lt = p_.axes.back();
    const int64_t inner = p_.inner, row_len = lt.out * inner;
    parallel_for(p_.rows, grain_for(row_len), [&](int64_t r0, int64_t r1) {
      auto state = init();
      int64_t yc[shape::kResizeMaxRank];
      for (int64_t r = r0; r < r1; ++r) {
        T* out = dst + r * row_len;
        int64_t rem = r;
        bool inside = true;
        for (size_t k = m - 1; k-- > 0;) {
          const int64_t n = p_.axes[k].out;
          yc[k] = rem % n;
          rem /= n;
          inside = inside && !p_.axes[k].outside[size_t(yc[k])];
        }
        if (!inside) {
          std::fill(out, out + row_len, fill);
          continue;
        }
        body(state, rem, static_cast<const int64_t*>(yc), out);
        if (lt.any_outside)
          for (int64_t xq = 0; xq < lt.out; ++xq)
            if (lt.outside[size_t(xq)]) std::fill(out + xq * inner, out + (xq + 1) * inner, fill);
      }
    });
  }

  template <class T>
  void gather_rows(const T* src, T* dst, T fill) const {
    const size_t m = p_.axes.size();
    const int64_t nx = p_.axes.back().out, inner = p_.inner;
    const int64_t* xo = p_.off.back().data();
    for_each_row(dst, fill, [] { return 0; }, [&](int, int64_t o, const int64_t* yc, T* out) {
      int64_t base = o * p_.in_block;
      for (size_t k = 0; k + 1 < m; ++k) base += p_.off[k][size_t(yc[k])];
      const T* in = src + base;
      if (inner == 1) {
        for (int64_t xq = 0; xq < nx; ++xq) out[xq] = in[xo[xq]];
      } else {
        for (int64_t xq = 0; xq < nx; ++xq) std::copy_n(in + xo[xq], inner, out + xq * inner);
      }
    });
  }

  template <class A>
  const A* weights(size_t k) const {
    if constexpr (std::is_same_v<A, float>) return p_.wf[k].data();
    else return p_.wd[k].data();
  }

  /// The input rows feeding output row (o, yc): every tap combination of the leading active
  /// axes, as offsets into X (coff) and weights (cw), both p_.combos long. Returns their number.
  template <class A>
  int64_t row_taps(int64_t o, const int64_t* yc, int64_t* coff, A* cw) const {
    int64_t nc = 1;
    coff[0] = o * p_.in_block;
    cw[0] = A(1);
    for (size_t k = 0; k + 1 < p_.axes.size(); ++k) {
      const int K = p_.axes[k].K;
      const int64_t* ok = &p_.off[k][size_t(yc[k] * K)];
      const A* wk = weights<A>(k) + yc[k] * K;
      for (int64_t c = nc; c-- > 0;)  // in place: entry c is read before any write reaches it
        for (int t = K; t-- > 0;) {
          coff[c * K + t] = coff[c] + ok[t];
          cw[c * K + t] = cw[c] * wk[t];
        }
      nc *= K;
    }
    return nc;
  }

  /// Scratch for row_taps: on the stack up to 64 combinations, else per thread on the heap.
  template <class A>
  struct TapScratch {
    int64_t stack_off[64];
    A stack_w[64];
    int64_t* off = stack_off;
    A* w = stack_w;
    TapScratch(const TapScratch&) = delete;  // points into itself: built in place only
    explicit TapScratch(int64_t combos) {
      if (combos <= 64) return;
      thread_local std::vector<int64_t> heap_off;
      thread_local std::vector<A> heap_w;
      heap_off.resize(size_t(combos));
      heap_w.resize(size_t(combos));
      off = heap_off.data();
      w = heap_w.data();
    }
  };

  /// Interpolation with inner blocks (identity axes after the active ones): every output element
  /// is a weighted sum of contiguous input blocks, accumulated in chunks of 256.
  template <class T, class A, int KX>
  void interp_rows(const T* src, T* dst) const {
    const int64_t nx = p_.axes.back().out, inner = p_.inner;
    const int64_t* xo = p_.off.back().data();
    const A* xw = weights<A>(p_.axes.size() - 1);
    auto init = [&] { return TapScratch<A>(p_.combos); };
    for_each_row(dst, to_elem<T>(A(a_.extrapolation)), init, [&](TapScratch<A>& ts, int64_t o, const int64_t* yc, T* out) {
      const int64_t nc = row_taps(o, yc, ts.off, ts.w);
      A acc[256];
      for (int64_t xq = 0; xq < nx; ++xq) {
        const int64_t* ox = xo + xq * KX;
        const A* wx = xw + xq * KX;
        for (int64_t i0 = 0; i0 < inner; i0 += 256) {
          const int64_t n = std::min<int64_t>(256, inner - i0);
          std::fill(acc, acc + n, A(0));
          for (int64_t c = 0; c < nc; ++c)
            for (int t = 0; t < KX; ++t) {
              const A wgt = ts.w[c] * wx[t];
              const T* in = src + ts.off[c] + ox[t] + i0;
              for (int64_t i = 0; i < n; ++i) acc[i] += wgt * A(in[i]);
            }
          T* ob = out + xq * inner + i0;
          for (int64_t i = 0; i < n; ++i) ob[i] = to_elem<T>(acc[i]);
        }
      }
    });
  }

  /// Per-thread cache of input rows interpolated along the last axis, least recently used out.
  template <class A>
  struct RowCache {
    int64_t slots = 0, nx = 0, clock = 0;
    int64_t* tag = nullptr;    // input row offset held by each slot (-1: empty)
    int64_t* stamp = nullptr;  // last use
    A* rows = nullptr;         // slots x nx
    A* acc = nullptr;          // nx
    std::vector<char> own;     // when the workspace does not cover this thread

    RowCache(const ResizePlan& p, char* ws, size_t ws_bytes) : slots(p.cache_slots), nx(p.axes.back().out) {
      const size_t tid = size_t(omp_get_thread_num());
      char* mem = ws && (tid + 1) * p.cache_bytes <= ws_bytes ? ws + tid * p.cache_bytes : nullptr;
      if (!mem) {
        own.resize(p.cache_bytes + 64);
        mem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(own.data()) + 63) / 64 * 64);
      }
      rows = reinterpret_cast<A*>(mem);
      acc = rows + slots * nx;
      tag = reinterpret_cast<int64_t*>(acc + nx + (8 - nx % 8) % 8);
      stamp = tag + slots;
      std::fill(tag, tag + slots, -1);
      std::fill(stamp, stamp + slots, 0);
    }
    /// Row at input offset `off`, computing it with fill(row) on a miss. The row returned last
    /// stays valid through the next call (it is the most recently used).
    template <class Fill>
    const A* get(int64_t off, Fill&& fill) {
      int64_t victim = 0;
      for (int64_t s = 0; s < slots; ++s) {
        if (tag[s] == off) {
          stamp[s] = ++clock;
          return rows + s * nx;
        }
        if (stamp[s] < stamp[victim]) victim = s;
      }
      tag[victim] = off;
      stamp[victim] = ++clock;
      fill(rows + victim * nx);
      return rows + victim * nx;
    }
  };

  /// Interpolation with inner == 1 (the last active axis is the last axis): rows along it are
  /// interpolated once into a RowCache, output rows are weighted sums of cached rows.
  template <class T, class A, int KX>
  void cached_rows(RunContext& ctx, const T* src, T* dst) const {
    const int64_t nx = p_.axes.back().out;
    const int64_t* xo = p_.off.back().data();
    const A* xw = weights<A>(p_.axes.size() - 1);
    char* ws = static_cast<char*>(ctx.workspace());
    const size_t ws_bytes = ctx.workspace_bytes();
    struct State {
      TapScratch<A> taps;
      RowCache<A> cache;
    };
    auto init = [&] { return State{TapScratch<A>(p_.combos), RowCache<A>(p_, ws, ws_bytes)}; };
    for_each_row(dst, to_elem<T>(A(a_.extrapolation)), init, [&](State& st, int64_t o, const int64_t* yc, T* out) {
      const int64_t nc = row_taps(o, yc, st.taps.off, st.taps.w);
      const A* cw = st.taps.w;
      auto row = [&](int64_t c) {
        const T* in = src + st.taps.off[c];
        return st.cache.get(st.taps.off[c], [&](A* h) {
          for (int64_t xq = 0; xq < nx; ++xq) {
            const int64_t* ox = xo + xq * KX;
            const A* wx = xw + xq * KX;
            A v = 0;
            for (int t = 0; t < KX; ++t) v += wx[t] * A(in[ox[t]]);
            h[xq] = v;
          }
        });
      };
      if (nc == 1) {
        const A* h = row(0);
        const A w0 = cw[0];
        for (int64_t xq = 0; xq < nx; ++xq) out[xq] = to_elem<T>(w0 * h[xq]);
      } else if (nc == 2) {
        const A* h0 = row(0);
        const A* h1 = row(1);  // h0 stays valid: it is the most recently used row
        const A w0 = cw[0], w1 = cw[1];
        for (int64_t xq = 0; xq < nx; ++xq) out[xq] = to_elem<T>(w0 * h0[xq] + w1 * h1[xq]);
      } else {
        A* acc = st.cache.acc;
        std::fill(acc, acc + nx, A(0));
        for (int64_t c = 0; c < nc; ++c) {
          const A* h = row(c);
          const A wc = cw[c];
          for (int64_t xq = 0; xq < nx; ++xq) acc[xq] += wc * h[xq];
        }
        for (int64_t xq = 0; xq < nx; ++xq) out[xq] = to_elem<T>(acc[xq]);
      }
    });
  }

  int64_t opset_;
  shape::ResizeAttrs a_;
  ResizePlan p_;
};

// ResizeGrad (com.onnxtrain): inputs dY, then the forward's roi, scales, sizes (opset 10: scales)
// and shape(X); the forward's attributes and its opset (forward_opset). The same per-axis taps,
// transposed: dX = fold of dY along every resized axis (backward.h); outputs outside a
// tf_crop_and_resize crop took the extrapolation value and pass no gradient.
class ResizeGradKernel final : public FoldKernel {
 public:
  explicit ResizeGradKernel(const KernelInfo& info)
      : opset_(info.attr_int("forward_opset", 13)), a_(shape::read_resize_attrs(info, opset_)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt, ctx.node(), [&]<class T>() {});
    const size_t shape_in = opset_ < 11 ? 2 : 4;
    if (ctx.num_inputs() != shape_in + 1) ctx.fail("expects ", shape_in + 1, " inputs for forward opset ", opset_);
    Shape xs, ys;
    std::vector<shape::ResizeAxis> tables;
    if (!read_shape_value(ctx, shape_in, dt, &xs) || !shape::resize_tables(ctx, opset_, a_, xs, &ys, &tables))
      return ctx.set_output_dynamic(0, dt);
    if (ys != ctx.input_shape(0))
      ctx.fail("gradient shape ", shape_to_string(ctx.input_shape(0)), " differs from the resized shape ", shape_to_string(ys));
    folds_.assign(tables.size(), {});
    for (size_t d = 0; d < tables.size(); ++d) {
      shape::ResizeAxis& t = tables[d];
      AxisFold& f = folds_[d];
      f.n_in = t.in;
      f.n_out = t.out;
      f.K = t.K;
      f.idx = std::move(t.idx);
      f.w = std::move(t.w);
      for (int64_t y = 0; y < t.out; ++y)
        if (t.outside[size_t(y)]) std::fill(f.idx.begin() + y * t.K, f.idx.begin() + (y + 1) * t.K, -1);
    }
    plan(ctx, ys, xs);
  }

 private:
  int64_t opset_;
  shape::ResizeAttrs a_;
};

// ================================================================ DepthToSpace / SpaceToDepth
// Both are a transpose of a 6-d view of X: Y (as 6-d, row-major) walks X with `strides`.
template <class T>
void strided_copy(const T* src, T* dst, const int64_t (&dims)[6], const int64_t (&strides)[6]) {
  const int64_t rows = dims[0] * dims[1] * dims[2] * dims[3] * dims[4], n = dims[5], s5 = strides[5];
  parallel_for(rows, grain_for(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, off = 0;
      for (int d = 4; d >= 0; --d) {
        off += (rem % dims[d]) * strides[d];
        rem /= dims[d];
      }
      const T* in = src + off;
      T* out = dst + r * n;
      if (s5 == 1) std::copy_n(in, n, out);
      else
        for (int64_t i = 0; i < n; ++i) out[i] = in[i * s5];
    }
  });
}

// Geometry: shape::space_depth_geometry.
class SpaceDepthKernel final : public Kernel {
 public:
  SpaceDepthKernel(const KernelInfo& info, bool to_space) : at_(shape::read_space_depth_attrs(info, to_space)) {}
  void prepare(PrepareContext& ctx) override {
    g_ = shape::space_depth_geometry(ctx, at_);
    ctx.set_output(0, ctx.input_dtype(0), g_.output);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    int64_t dims[6], strides[6];
    std::copy(g_.dims.begin(), g_.dims.end(), dims);
    std::copy(g_.strides.begin(), g_.strides.end(), strides);
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      strided_copy(static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), dims, strides);
    });
  }

 private:
  shape::SpaceDepthAttrs at_;
  shape::SpaceDepthGeom g_;
};

}  // namespace

void register_image(KernelRegistry& r) {
  // Resize 10: X, scales; nearest / linear with asymmetric coordinates (onnxruntime's Upsample).
  // Resize 11-17: X, roi, scales, sizes; every mode. (13 makes roi and scales optional.)
  r.add<ResizeKernel>("Resize", 10, kMaxOpsetAll);
  // DepthToSpace 1-10 has no mode (DCR, the default from 11).
  r.add("DepthToSpace", 1, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<SpaceDepthKernel>(i, true);
  });
  r.add("SpaceToDepth", 1, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<SpaceDepthKernel>(i, false);
  });
  // Backward kernel of the Resize gradient rule (src/autodiff/rules.cpp).
  r.add(ops::kDomain, "ResizeGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ResizeGradKernel>(i); });
}

}  // namespace onnxtrain::kernels::cpu
