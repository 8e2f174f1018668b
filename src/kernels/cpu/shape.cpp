// Shape manipulation: views (Reshape, Flatten, Squeeze, Unsqueeze), shape queries (Shape, Size)
// and tensors made from shapes or scalars (Constant, ConstantOfShape, Range, Expand).
//   Reshape:   Y = X viewed with shape from input 1 (0 copies the input dim unless allowzero, -1 infers)
//   Flatten:   Y = X viewed as [prod(d[:axis]), prod(d[axis:])]
//   Squeeze:   Y = X without the listed size-1 axes (all size-1 axes when none are listed)
//   Unsqueeze: Y = X with size-1 axes inserted at the listed output positions
//   Shape:     Y = shape(X)[start:end]      Size: Y = numel(X)
//   ConstantOfShape: Y[shape from input] = value    Range: Y[i] = start + i * delta
//   Expand:    Y = X broadcast (numpy rules, both ways) with the shape input
#include <tuple>

#include "kernels/cpu/common.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/registry.h"
#include "kernels/shape/reshape.h"
#include "kernels/shape/views.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

// ---------------------------------------------------------------- views
// Reshape, Flatten, Squeeze, Unsqueeze: kernels/shape/views.h; a copy in host memory when the
// executor could not make the view.
struct HostViews {
  static void check(const PrepareContext&) {}
  static void copy(RunContext& ctx) { ctx.output(0).copy_from(ctx.input(0)); }
};

// ---------------------------------------------------------------- Shape, Size
// Shape-15 adds start/end (negative counts from the back, clamped to [0, rank]).
class ShapeKernel final : public Kernel {
 public:
  explicit ShapeKernel(const KernelInfo& info)
      : start_(info.attr_int("start", 0)), end_(info.attr_int("end", INT64_MAX)) {}
  void prepare(PrepareContext& ctx) override {
    std::tie(b_, e_) = shape::shape_span(int64_t(ctx.input_rank(0)), start_, end_);
    ctx.set_output(0, DType::kInt64, {e_ - b_});
    ctx.set_reads_shapes_only();
  }
  void run(RunContext& ctx) override {
    const Shape& s = ctx.input(0).shape();
    int64_t* y = ctx.output(0).data<int64_t>();
    for (int64_t i = b_; i < e_; ++i) y[i - b_] = s[size_t(i)];
  }

 private:
  int64_t start_, end_, b_ = 0, e_ = 0;
};

class SizeKernel final : public Kernel {
 public:
  explicit SizeKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    ctx.set_output(0, DType::kInt64, {});
    ctx.set_reads_shapes_only();
  }
  void run(RunContext& ctx) override { *ctx.output(0).data<int64_t>() = ctx.input(0).numel(); }
};

// ---------------------------------------------------------------- Constant
class ConstantKernel final : public Kernel {
 public:
  explicit ConstantKernel(const KernelInfo& info) : value_(shape::read_constant_value(info)) {}
  void prepare(PrepareContext& ctx) override { ctx.set_output(0, value_.dtype(), value_.shape()); }
  void run(RunContext& ctx) override { ctx.output(0).copy_from(value_); }

 private:
  Tensor value_;
};

// ---------------------------------------------------------------- ConstantOfShape
// Y has the shape given by input 0 (1-D int64; empty gives a scalar) and every element equal to
// the one-element `value` attribute (default float32 0).
class ConstantOfShapeKernel final : public Kernel {
 public:
  explicit ConstantOfShapeKernel(const KernelInfo& info) : value_(shape::read_constant_of_shape_value(info)) {}
  void prepare(PrepareContext& ctx) override {
    Shape out;
    if (!shape::constant_of_shape_shape(ctx, value_.dtype(), &out)) {
      ctx.set_output_dynamic(0, value_.dtype());
      return;
    }
    ctx.set_output(0, value_.dtype(), std::move(out));
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch_by_size(y.dtype(), ctx.node(), [&]<class T>() {
      const T v = *static_cast<const T*>(value_.raw_data());
      T* p = static_cast<T*>(y.raw_data());
      parallel_for(y.numel(), 1 << 16, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
    });
  }

 private:
  Tensor value_;
};

// ---------------------------------------------------------------- Range
// n = max(ceil((limit - start) / delta), 0); Y[i] = start + i * delta.
class RangeKernel final : public Kernel {
 public:
  explicit RangeKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    int64_t n = 0;
    if (!shape::range_count(ctx, &n)) return ctx.set_output_dynamic(0, ctx.input_dtype(0));
    ctx.set_output(0, ctx.input_dtype(0), {n});
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch<TypeList<float, double, int16_t, int32_t, int64_t>>(y.dtype(), ctx.node(), [&]<class T>() {
      const T s = *ctx.input(0).data<T>(), d = *ctx.input(2).data<T>();
      T* p = y.data<T>();
      for (int64_t i = 0; i < y.numel(); ++i) {
        // Every element lies between start and limit, but i * delta alone may not fit (start
        // INT64_MIN, delta 2^62): two's-complement wrapping arithmetic lands on the exact value.
        if constexpr (std::is_integral_v<T>) p[i] = T(int64_t(uint64_t(int64_t(s)) + uint64_t(i) * uint64_t(int64_t(d))));
        else p[i] = T(double(s) + double(i) * double(d));
      }
    });
  }
};

// ---------------------------------------------------------------- Expand
// Y = X broadcast with `shape` (input 1): numpy rules in both directions, so a 1 in `shape`
// keeps X's dimension.
class ExpandKernel final : public Kernel {
 public:
  explicit ExpandKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    Shape out;
    if (!shape::expand_shape(ctx, &out)) {
      ctx.set_output_dynamic(0, dt);
      return;
    }
    const Shape& in = ctx.input_shape(0);
    // Source strides: the input's own for matching dims, 0 for broadcast ones.
    const auto in_strides = contiguous_strides(in);
    const size_t off = out.size() - in.size();
    std::vector<int64_t> ss(out.size(), 0);
    for (size_t i = 0; i < in.size(); ++i) ss[off + i] = in[i] == out[off + i] ? in_strides[i] : 0;
    if (!copy_.init(out, ss, contiguous_strides(out))) ctx.fail("rank ", out.size(), " is too large");
    if (copy_.is_identity()) ctx.set_output_alias(0, 0, out);
    else ctx.set_output(0, dt, out);
  }
  void run(RunContext& ctx) override { run_copy(ctx, copy_); }

 private:
  StridedCopy copy_;
};

}  // namespace

// com.onnxtrain.SumToShape(G, shape) -> Y: the reverse of numpy broadcasting, used by gradients.
//   G: [g...] (the broadcast result), shape: 1-D int64 target t with t broadcastable to g.
//   Y[t] = sum of G over the elements that broadcasting maps from Y's element.
class SumToShapeKernel final : public Kernel {
 public:
  explicit SumToShapeKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    if (!shape::sum_to_shape_target(ctx, &target_)) {
      ctx.set_output_dynamic(0, dt);
      return;
    }
    // Walk G in runs; Y advances by 0 or 1 per element (the BroadcastPlan of Y -> G, input 0 = Y).
    if (!plan_.init({target_, ctx.input_shape(0)})) ctx.fail("internal: broadcast plan failed");
    ctx.set_output(0, dt, target_);
    ctx.request_workspace(size_t(shape_numel(target_)) * sizeof(double));  // the sums
  }
  void run(RunContext& ctx) override {
    const Tensor& g = ctx.input(0);
    Tensor& y = ctx.output(0);
    dispatch<FloatTypes>(g.dtype(), ctx.node(), [&]<class T>() {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T* G = g.data<T>();
      T* Y = y.data<T>();
      const int64_t n = y.numel();
      C* acc = static_cast<C*>(ctx.workspace());
      std::fill_n(acc, n, C(0));
      const int64_t step = plan_.inner_step[0];
      plan_.for_runs(0, plan_.runs, [&](int64_t o, const int64_t* off, int64_t len) {
        const T* src = G + o;
        C* dst = acc + off[0];
        if (step) {
          for (int64_t k = 0; k < len; ++k) dst[k] += C(src[k]);
        } else {
          C s = 0;
          for (int64_t k = 0; k < len; ++k) s += C(src[k]);
          dst[0] += s;
        }
      });
      for (int64_t i = 0; i < n; ++i) Y[i] = T(acc[i]);
    });
  }

 private:
  Shape target_;
  BroadcastPlan plan_;
};

void register_shape(KernelRegistry& r) {
  // One entry per opset range whose semantics differ; the kernel reads info.opset() for them.
  shape::register_views<HostViews>(r);  // Reshape, Flatten, Squeeze, Unsqueeze
  r.add<ShapeKernel>("Shape", 1, 14);
  r.add<ShapeKernel>("Shape", 15, kMaxOpsetAll);  // start, end
  r.add<SizeKernel>("Size", 1, kMaxOpsetAll);
  r.add<ConstantKernel>("Constant", 1, kMaxOpsetAll);
  r.add<ConstantOfShapeKernel>("ConstantOfShape", 9, kMaxOpsetAll);
  r.add<RangeKernel>("Range", 11, kMaxOpsetAll);
  r.add<ExpandKernel>("Expand", 8, kMaxOpsetAll);
  r.add(ops::kDomain, "SumToShape", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<SumToShapeKernel>(i); });
}

}  // namespace onnxtrain::kernels::cpu
