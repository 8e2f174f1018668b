// Indexing operators: gathers and scatters driven by an index tensor, and OneHot.
//   Gather(axis):         Y[o, j..., i] = X[o, idx[j...], i]         Y: X[:axis] + I + X[axis+1:]
//   GatherElements(axis): Y[p] = X[p with p[axis] = idx[p]]           Y: shape(I)
//   GatherND(b):          Y[j..., s...] = X[batch(j), idx[j,:]..., s...]  Y: I[:-1] + X[b+k:]
//   ScatterND(red):       Y = X; Y[idx[j,:]..., s...] (=|+=|*=) U[j..., s...]
//   ScatterElements(axis, red): Y = X; Y[p with p[axis] = idx[p]] (=|+=|*=) U[p]
//   OneHot(axis):         Y[o, d, i] = d == idx[o, i] ? on : off     Y: I with depth inserted at axis
// Indices are int32/int64 (OneHot: any numeric); negative indices count from the end; an index
// outside the axis raises InvalidArgument naming the node and the index (OneHot: all off).
// Backward kernels (com.onnxtrain, inputs shape(X), indices, dY; duplicates accumulate):
//   GatherGrad(axis):              dX = zeros; dX[o, idx[j...], i] += dY[o, j..., i]
//   GatherElementsGrad(axis):      ScatterElements(zeros, idx, dY, reduction add)
//   GatherNDGrad(batch_dims):      ScatterND(zeros, idx, dY, reduction add), with batch dims
// Pure data movement dispatches by element size, so every element type (strings too) works.
#include <cstring>

#include "kernels/cpu/backward.h"
#include "kernels/cpu/common.h"
#include "kernels/registry.h"
#include "kernels/shape/index.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

using shape::check_index_dtype;
using shape::ElementsAxis;
using shape::NdAddressing;
using shape::Reduction;
using shape::wrap_index;

/// Calls f.template operator()<I>() with the C++ type of the index tensor (int32 or int64).
template <class F>
void with_index_type(const Tensor& t, const ir::Node& node, F&& f) {
  dispatch<IndexTypes>(t.dtype(), node, std::forward<F>(f));
}

/// Typed element pointer for data movement (T from dispatch_by_size has the element's size).
template <class T>
const T* elems(const Tensor& t) {
  return static_cast<const T*>(t.raw_data());
}
template <class T>
T* elems(Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

/// Copies n elements (memcpy for plain bytes, assignment for strings).
template <class T>
inline void copy_elems(T* dst, const T* src, int64_t n) {
  if constexpr (std::is_trivially_copyable_v<T>) {
    std::memcpy(dst, src, size_t(n) * sizeof(T));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

/// Copies input 0 to output 0 (the starting point of the scatters).
void copy_input_to_output(RunContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
    const T* src = elems<T>(x);
    T* dst = elems<T>(y);
    parallel_for(x.numel(), kCopyGrain, [&](int64_t b, int64_t e) { copy_elems(dst + b, src + b, e - b); });
  });
}

/// Walks the flat positions [begin, end) of `shape` (row-major) and calls f(flat, offset, k) where
/// offset = sum_d idx[d] * strides[d] over every dim but `skip`, and k = idx[skip].
template <class F>
void for_each_offset(const Shape& shape, const std::vector<int64_t>& strides, size_t skip, int64_t begin,
                     int64_t end, F&& f) {
  const size_t r = shape.size();
  std::vector<int64_t> idx(r, 0);
  int64_t rem = begin, off = 0;
  for (size_t d = r; d-- > 0;) {
    idx[d] = rem % shape[d];
    rem /= shape[d];
    if (d != skip) off += idx[d] * strides[d];
  }
  for (int64_t p = begin; p < end; ++p) {
    f(p, off, idx[skip]);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < shape[d]) {
        if (d != skip) off += strides[d];
        break;
      }
      if (d != skip) off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

/// Applies `red` to n elements: dst[i] (op)= src[i]. Reductions other than none need numbers.
template <class T>
inline void reduce_into(Reduction red, T* dst, const T* src, int64_t n) {
  if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool>) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    using C = compute_t<T>;
    switch (red) {
      case Reduction::kNone: copy_elems(dst, src, n); break;
      case Reduction::kAdd:
        for (int64_t i = 0; i < n; ++i) dst[i] = T(C(dst[i]) + C(src[i]));
        break;
      case Reduction::kMul:
        for (int64_t i = 0; i < n; ++i) dst[i] = T(C(dst[i]) * C(src[i]));
        break;
      case Reduction::kMax:
        for (int64_t i = 0; i < n; ++i) dst[i] = C(src[i]) > C(dst[i]) ? src[i] : dst[i];
        break;
      case Reduction::kMin:
        for (int64_t i = 0; i < n; ++i) dst[i] = C(src[i]) < C(dst[i]) ? src[i] : dst[i];
        break;
    }
  }
}

/// Scatter body shared by ScatterND and ScatterElements: plain assignment moves bytes (any
/// type); reductions dispatch on the numeric type.
template <class F>
void dispatch_scatter(Reduction red, DType dt, const ir::Node& node, F&& f) {
  if (red == Reduction::kNone) dispatch_by_size(dt, node, std::forward<F>(f));
  else dispatch<NumericTypes>(dt, node, std::forward<F>(f));
}

// ---------------------------------------------------------------- Gather
// X: [outer, n, inner] around `axis`; Y: [outer, idx..., inner].
class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(const KernelInfo& info) : axis_(info.attr_int("axis", 0)) {}
  void prepare(PrepareContext& ctx) override {
    check_index_dtype(ctx, 1);
    g_ = shape::gather_geometry(ctx, ctx.input_shape(0), ctx.input_shape(1), axis_);
    ctx.set_output(0, ctx.input_dtype(0), g_.output);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    Tensor& y = ctx.output(0);
    const int64_t nidx = ind.numel(), rows = g_.outer * nidx;
    if (y.numel() == 0) {  // still validate the indices
      with_index_type(ind, ctx.node(), [&]<class I>() {
        for (int64_t j = 0; j < nidx; ++j) wrap_index(ctx, int64_t(ind.data<I>()[j]), g_.axis, g_.n);
      });
      return;
    }
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      with_index_type(ind, ctx.node(), [&]<class I>() {
        const T* src = elems<T>(x);
        T* dst = elems<T>(y);
        const I* idx = ind.data<I>();
        const int64_t inner = g_.inner, n = g_.n, axis = g_.axis;
        parallel_for(rows, grain_for(inner), [&](int64_t r0, int64_t r1) {
          if (inner == 1) {  // scalar rows: a plain gather
            for (int64_t r = r0; r < r1; ++r) {
              const int64_t o = r / nidx, j = r - o * nidx;
              dst[r] = src[o * n + wrap_index(ctx, int64_t(idx[j]), axis, n)];
            }
            return;
          }
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t o = r / nidx, j = r - o * nidx;
            const int64_t k = wrap_index(ctx, int64_t(idx[j]), axis, n);
            copy_elems(dst + r * inner, src + (o * n + k) * inner, inner);
          }
        });
      });
    });
  }

 private:
  int64_t axis_;
  shape::GatherGeom g_;
};

// ---------------------------------------------------------------- GatherElements
// Y[p] = X[p with p[axis] replaced by idx[p]]; I and X have one rank, I's dims fit in X's.
class GatherElementsKernel final : public Kernel {
 public:
  explicit GatherElementsKernel(const KernelInfo& info) : axis_(info.attr_int("axis", 0)) {}
  void prepare(PrepareContext& ctx) override {
    e_.init(ctx, ctx.input_shape(0), axis_);
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(1));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    Tensor& y = ctx.output(0);
    const size_t axis = size_t(e_.axis);
    const int64_t n = e_.n, astride = e_.astride;
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      with_index_type(ind, ctx.node(), [&]<class I>() {
        const T* src = elems<T>(x);
        T* dst = elems<T>(y);
        const I* idx = ind.data<I>();
        parallel_for(ind.numel(), 16384, [&](int64_t b, int64_t e) {
          for_each_offset(ind.shape(), e_.strides, axis, b, e, [&](int64_t p, int64_t off, int64_t) {
            dst[p] = src[off + wrap_index(ctx, int64_t(idx[p]), int64_t(axis), n) * astride];
          });
        });
      });
    });
  }

 private:
  int64_t axis_;
  ElementsAxis e_;
};

// ---------------------------------------------------------------- GatherND / ScatterND helpers
class GatherNDKernel final : public Kernel {
 public:
  explicit GatherNDKernel(const KernelInfo& info) : batch_dims_(info.attr_int("batch_dims", 0)) {
    if (info.opset() < 12 && info.has_attr("batch_dims")) info.fail("batch_dims needs opset 12");
  }
  void prepare(PrepareContext& ctx) override {
    check_index_dtype(ctx, 1);
    const Shape& xs = ctx.input_shape(0);
    const Shape& is = ctx.input_shape(1);
    a_.init(ctx, xs, is, batch_dims_);
    ctx.set_output(0, ctx.input_dtype(0), a_.output);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    Tensor& y = ctx.output(0);
    const int64_t slice = a_.slice;
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      with_index_type(ind, ctx.node(), [&]<class I>() {
        const T* src = elems<T>(x);
        T* dst = elems<T>(y);
        const I* idx = ind.data<I>();
        parallel_for(a_.tuples, grain_for(slice), [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t)
            copy_elems(dst + t * slice, src + a_.offset(ctx, idx, t, batch_dims_), slice);
        });
      });
    });
  }

 private:
  int64_t batch_dims_;
  NdAddressing a_;
};

// ---------------------------------------------------------------- ScatterND
// U: I[:-1] + X[k:]. Updates apply in index order (duplicates with a reduction accumulate).
// As GatherNDGrad (grad = true): input 0 is shape(X), the base is zeros, the reduction add, and
// batch_dims leading dims of X and I are batch dims (as in GatherND).
class ScatterNDKernel final : public Kernel {
 public:
  ScatterNDKernel(const KernelInfo& info, bool grad)
      : grad_(grad), red_(grad ? Reduction::kAdd : shape::read_reduction(info)),
        batch_dims_(grad ? info.attr_int("batch_dims", 0) : 0) {}
  void prepare(PrepareContext& ctx) override {
    check_index_dtype(ctx, 1);
    Shape xs;
    if (!shape::scatter_base_shape(ctx, grad_, &xs)) return ctx.set_output_dynamic(0, ctx.input_dtype(2));
    if (xs.empty()) ctx.fail("data must have rank >= 1");
    a_.init(ctx, xs, ctx.input_shape(1), batch_dims_);
    shape::check_scatter_nd_updates(ctx, xs, a_);
    ctx.request_workspace(size_t(a_.tuples) * sizeof(int64_t));
    ctx.set_output(0, ctx.input_dtype(2), xs);
  }
  void run(RunContext& ctx) override {
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    Tensor& y = ctx.output(0);
    // Validate every index before touching the output.
    int64_t* offs = static_cast<int64_t*>(ctx.workspace());
    with_index_type(ind, ctx.node(), [&]<class I>() {
      const I* idx = ind.data<I>();
      for (int64_t t = 0; t < a_.tuples; ++t) offs[t] = a_.offset(ctx, idx, t, batch_dims_);
    });
    if (grad_) zero_fill(y);
    else copy_input_to_output(ctx);
    const int64_t slice = a_.slice, tuples = a_.tuples;
    dispatch_scatter(red_, y.dtype(), ctx.node(), [&]<class T>() {
      const T* u = elems<T>(upd);
      T* dst = elems<T>(y);
      // Split the slice, not the tuples: every chunk sees the updates in index order.
      parallel_for(slice, std::max<int64_t>(1, 32768 / std::max<int64_t>(tuples, 1)), [&](int64_t s0, int64_t s1) {
        for (int64_t t = 0; t < tuples; ++t) reduce_into(red_, dst + offs[t] + s0, u + t * slice + s0, s1 - s0);
      });
    });
  }

 private:
  bool grad_;
  Reduction red_;
  int64_t batch_dims_;
  NdAddressing a_;
};

// ---------------------------------------------------------------- ScatterElements
// Y = X; Y[p with p[axis] = idx[p]] (op)= U[p] for p over I's shape (= U's shape).
// As GatherElementsGrad (grad = true): input 0 is shape(X), the base is zeros, the reduction add.
class ScatterElementsKernel final : public Kernel {
 public:
  ScatterElementsKernel(const KernelInfo& info, bool grad)
      : grad_(grad), axis_(info.attr_int("axis", 0)), red_(grad ? Reduction::kAdd : shape::read_reduction(info)) {}
  void prepare(PrepareContext& ctx) override {
    Shape xs;
    if (!shape::scatter_base_shape(ctx, grad_, &xs)) return ctx.set_output_dynamic(0, ctx.input_dtype(2));
    e_.init(ctx, xs, axis_);
    if (ctx.input_shape(2) != ctx.input_shape(1))
      ctx.fail("updates shape ", shape_to_string(ctx.input_shape(2)), " differs from indices shape ",
               shape_to_string(ctx.input_shape(1)));
    ctx.set_output(0, ctx.input_dtype(2), xs);
  }
  void run(RunContext& ctx) override {
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    Tensor& y = ctx.output(0);
    const size_t axis = size_t(e_.axis);
    const int64_t n = e_.n, astride = e_.astride;
    with_index_type(ind, ctx.node(), [&]<class I>() {  // validate first: no partial writes
      const I* idx = ind.data<I>();
      for (int64_t p = 0; p < ind.numel(); ++p) wrap_index(ctx, int64_t(idx[p]), int64_t(axis), n);
    });
    if (grad_) zero_fill(y);
    else copy_input_to_output(ctx);
    if (ind.numel() == 0) return;
    // Positions that differ before `axis` never write the same element: split those.
    const int64_t outer = dim_product(ind.shape(), 0, axis);
    const int64_t per_outer = outer > 0 ? ind.numel() / outer : 0;
    dispatch_scatter(red_, y.dtype(), ctx.node(), [&]<class T>() {
      with_index_type(ind, ctx.node(), [&]<class I>() {
        const I* idx = ind.data<I>();
        const T* u = elems<T>(upd);
        T* dst = elems<T>(y);
        parallel_for(outer, grain_for(per_outer, 16384), [&](int64_t o0, int64_t o1) {
          for_each_offset(ind.shape(), e_.strides, axis, o0 * per_outer, o1 * per_outer,
                          [&](int64_t p, int64_t off, int64_t) {
                            const int64_t v = int64_t(idx[p]);
                            reduce_into(red_, dst + off + (v < 0 ? v + n : v) * astride, u + p, 1);
                          });
        });
      });
    });
  }

 private:
  bool grad_;
  int64_t axis_;
  Reduction red_;
  ElementsAxis e_;
};

// ---------------------------------------------------------------- GatherGrad
// dX [outer, n, inner]: dX[o, k, :] = sum over j with idx[j] = k (in index order) of dY[o, j, :].
// The indices are bucketed by row (a counting sort), then every dX row is written once, in
// memory order: zeros for rows no index hits, the sum of its gradient rows otherwise. Threads own
// disjoint row ranges: no atomics, and the result does not depend on the thread count.
class GatherGradKernel final : public Kernel {
 public:
  explicit GatherGradKernel(const KernelInfo& info) : axis_(info.attr_int("axis", 0)) {}
  void prepare(PrepareContext& ctx) override {
    check_index_dtype(ctx, 1);
    const DType dt = ctx.input_dtype(2);
    dispatch<FloatTypes>(dt, ctx.node(), [&]<class T>() {});
    Shape xs;
    if (!read_shape_value(ctx, 0, dt, &xs)) return ctx.set_output_dynamic(0, dt);
    const Shape& is = ctx.input_shape(1);
    g_ = shape::gather_geometry(ctx, xs, is, axis_);
    if (ctx.input_shape(2) != g_.output)
      ctx.fail("gradient shape ", shape_to_string(ctx.input_shape(2)), " must be ", shape_to_string(g_.output));
    // rows [nidx], order [nidx], bucket starts [n + 1], cursors [n]
    ctx.request_workspace(size_t(2 * shape_numel(is) + 2 * g_.n + 1) * sizeof(int64_t));
    ctx.set_output(0, dt, xs);
  }
  void run(RunContext& ctx) override {
    const Tensor& ind = ctx.input(1);
    const Tensor& g = ctx.input(2);
    Tensor& y = ctx.output(0);
    const int64_t nidx = ind.numel(), n = g_.n, inner = g_.inner;
    int64_t* rows = static_cast<int64_t*>(ctx.workspace());
    int64_t* order = rows + nidx;
    int64_t* start = order + nidx;
    int64_t* cursor = start + n + 1;
    with_index_type(ind, ctx.node(), [&]<class I>() {
      const I* idx = ind.data<I>();
      for (int64_t j = 0; j < nidx; ++j) rows[j] = wrap_index(ctx, int64_t(idx[j]), g_.axis, n);
    });
    std::fill(start, start + n + 1, int64_t(0));
    for (int64_t j = 0; j < nidx; ++j) ++start[rows[j] + 1];
    for (int64_t k = 0; k < n; ++k) start[k + 1] += start[k];
    std::copy(start, start + n, cursor);
    for (int64_t j = 0; j < nidx; ++j) order[cursor[rows[j]]++] = j;
    dispatch<FloatTypes>(g.dtype(), ctx.node(), [&]<class T>() {
      using C = compute_t<T>;
      const T* G = g.data<T>();
      T* D = y.data<T>();
      parallel_for(g_.outer * n, grain_for(inner), [&](int64_t q0, int64_t q1) {
        thread_local std::vector<C> acc;
        for (int64_t q = q0; q < q1;) {  // q = o * n + k: dX row q
          const int64_t k = q % n;
          if (start[k] == start[k + 1]) {  // a run of rows no index hits
            int64_t e = q + 1;
            while (e < q1 && start[e % n] == start[e % n + 1]) ++e;
            std::memset(static_cast<void*>(D + q * inner), 0, size_t((e - q) * inner) * sizeof(T));
            q = e;
            continue;
          }
          const T* src = G + (q / n) * nidx * inner;
          T* dst = D + q * inner;
          const int64_t* js = order + start[k];
          const int64_t cnt = start[k + 1] - start[k];
          if constexpr (std::is_same_v<T, C>) {
            std::memcpy(dst, src + js[0] * inner, size_t(inner) * sizeof(T));
            for (int64_t c = 1; c < cnt; ++c) {
              const T* s = src + js[c] * inner;
              for (int64_t i = 0; i < inner; ++i) dst[i] += s[i];
            }
          } else {
            acc.assign(size_t(inner), C(0));
            for (int64_t c = 0; c < cnt; ++c) {
              const T* s = src + js[c] * inner;
              for (int64_t i = 0; i < inner; ++i) acc[size_t(i)] += C(s[i]);
            }
            for (int64_t i = 0; i < inner; ++i) dst[i] = T(acc[size_t(i)]);
          }
          ++q;
        }
      });
    });
  }

 private:
  int64_t axis_;
  shape::GatherGeom g_;
};

// ---------------------------------------------------------------- OneHot
/// Position of the "on" value for index v (floats truncate), or -1 when v is outside
/// [-depth, depth) ([0, depth) without wrapping).
template <class I>
int64_t onehot_position(I raw, int64_t depth, bool wraps) {
  using C = compute_t<I>;
  const C v = C(raw);
  if constexpr (std::is_floating_point_v<C>) {
    if (!(v > -double(depth) - 1 && v < double(depth))) return -1;  // NaN too
  } else if constexpr (std::is_unsigned_v<C>) {
    if (v >= uint64_t(depth)) return -1;
  }
  int64_t k = int64_t(v);
  if (k < 0 && wraps) k += depth;
  return k >= 0 && k < depth ? k : -1;
}

// Y: [outer, depth, inner] with outer = prod(I[:axis]), inner = prod(I[axis:]).
class OneHotKernel final : public Kernel {
 public:
  OneHotKernel(const KernelInfo& info, bool negative_wraps)
      : axis_(info.attr_int("axis", -1)), wraps_(negative_wraps) {}
  void prepare(PrepareContext& ctx) override {
    dispatch<NumericTypes>(ctx.input_dtype(0), ctx.node(), [&]<class T>() {});
    if (!shape::onehot_geometry(ctx, axis_, &g_)) return ctx.set_output_dynamic(0, ctx.input_dtype(2));
    ctx.set_output(0, ctx.input_dtype(2), g_.output);
  }
  void run(RunContext& ctx) override {
    const Tensor& ind = ctx.input(0);
    const Tensor& vals = ctx.input(2);
    Tensor& y = ctx.output(0);
    const int64_t depth = g_.depth, inner = g_.inner;
    dispatch_by_size(vals.dtype(), ctx.node(), [&]<class T>() {
      dispatch<NumericTypes>(ind.dtype(), ctx.node(), [&]<class I>() {
        const T off = elems<T>(vals)[0], on = elems<T>(vals)[1];
        const I* idx = ind.data<I>();
        T* dst = elems<T>(y);
        parallel_for(g_.outer, grain_for(depth * inner), [&](int64_t o0, int64_t o1) {
          std::fill(dst + o0 * depth * inner, dst + o1 * depth * inner, off);
          for (int64_t o = o0; o < o1; ++o)
            for (int64_t i = 0; i < inner; ++i) {
              const int64_t v = onehot_position(idx[o * inner + i], depth, wraps_);
              if (v >= 0) dst[(o * depth + v) * inner + i] = on;
            }
        });
      });
    });
  }

 private:
  int64_t axis_;
  bool wraps_;
  shape::OneHotGeom g_;
};

}  // namespace

void register_index(KernelRegistry& r) {
  // Gather: 1 (no negative indices, wrapped anyway), 11 (negative indices), 13 (bfloat16).
  r.add<GatherKernel>("Gather", 1, kMaxOpsetAll);
  r.add<GatherElementsKernel>("GatherElements", 11, kMaxOpsetAll);
  r.add<GatherNDKernel>("GatherND", 11, kMaxOpsetAll);  // batch_dims from 12
  // Scatter reductions: none (11-15); add, mul (16-17); max, min (18+). See shape::read_reduction.
  auto scatter = [](bool nd, bool grad) {
    return [nd, grad](const KernelInfo& i) -> std::unique_ptr<Kernel> {
      if (nd) return std::make_unique<ScatterNDKernel>(i, grad);
      return std::make_unique<ScatterElementsKernel>(i, grad);
    };
  };
  r.add("ScatterND", 11, kMaxOpsetAll, scatter(true, false));
  r.add("ScatterElements", 11, kMaxOpsetAll, scatter(false, false));
  // OneHot: 9 (indices outside [0, depth) give all-off rows), 11 (negative indices wrap).
  r.add("OneHot", 9, 10, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<OneHotKernel>(i, false);
  });
  r.add("OneHot", 11, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<OneHotKernel>(i, true);
  });
  // Backward kernels of the gradient rules (src/autodiff/rules.cpp): inputs shape(X), indices, dY.
  r.add(ops::kDomain, "GatherGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GatherGradKernel>(i); });
  r.add(ops::kDomain, "GatherElementsGrad", 1, kMaxOpsetAll, scatter(false, true));
  r.add(ops::kDomain, "GatherNDGrad", 1, kMaxOpsetAll, scatter(true, true));
}

}  // namespace onnxtrain::kernels::cpu
