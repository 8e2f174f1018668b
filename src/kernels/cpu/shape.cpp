// Shape manipulation: views (Reshape, Flatten, Squeeze, Unsqueeze), shape queries (Shape, Size)
// and tensors made from shapes or scalars (Constant, ConstantOfShape, Range, Expand).
//   Reshape:   Y = X viewed with shape from input 1 (0 copies the input dim unless allowzero, -1 infers)
//   Flatten:   Y = X viewed as [prod(d[:axis]), prod(d[axis:])]
//   Squeeze:   Y = X without the listed size-1 axes (all size-1 axes when none are listed)
//   Unsqueeze: Y = X with size-1 axes inserted at the listed output positions
//   Shape:     Y = shape(X)[start:end]      Size: Y = numel(X)
//   ConstantOfShape: Y[shape from input] = value    Range: Y[i] = start + i * delta
//   Expand:    Y = X broadcast (numpy rules, both ways) with the shape input
#include <cmath>
#include <set>

#include "kernels/cpu/common.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/registry.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

// ---------------------------------------------------------------- views
// The output is input 0 with another shape: a view when the executor allows it, else a copy.
// target() returns false when the shape needs input values not known yet (prepared again at run
// time with every value).
class ViewKernel : public Kernel {
 public:
  void prepare(PrepareContext& ctx) override {
    Shape s;
    if (!target(ctx, &s)) {
      ctx.set_output_dynamic(0, ctx.input_dtype(0));
      return;
    }
    ctx.set_output_alias(0, 0, std::move(s));
  }
  void run(RunContext& ctx) override {
    if (!ctx.output_aliases_input(0, 0)) ctx.output(0).copy_from(ctx.input(0));
  }

 protected:
  virtual bool target(const PrepareContext& ctx, Shape* out) = 0;
};

// Axes from the attribute (older opsets) or from input `index` (newer ones); false when the input
// exists but its value is unknown. `present` tells whether axes were given at all.
bool read_axes(const PrepareContext& ctx, bool from_input, const std::vector<int64_t>& attr, bool has_attr,
               size_t index, std::vector<int64_t>* axes, bool* present) {
  if (!from_input) {
    *axes = attr;
    *present = has_attr;
    return true;
  }
  *present = ctx.has_input(index);
  if (!*present) return true;
  const Tensor* t = ctx.input_value(index);
  if (!t) return false;
  if (t->rank() > 1) ctx.fail("axes must be a 1-D tensor, got ", t->describe());
  if (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32) ctx.fail("axes must be int64, got ", t->describe());
  *axes = read_int_list(*t);
  return true;
}

// Normalizes axes against `rank` and rejects duplicates.
std::vector<int64_t> normalize_axes(const PrepareContext& ctx, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> r;
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    const int64_t n = normalize_axis(ctx, a, rank);
    if (!seen.insert(n).second) ctx.fail("axis ", a, " is repeated in ", shape_to_string(axes));
    r.push_back(n);
  }
  return r;
}

// Output shape of Reshape: `spec` may hold one -1 and (unless allowzero) zeros that copy the
// input dimension.
template <class Ctx>
Shape reshape_target(const Ctx& ctx, const Shape& in, const std::vector<int64_t>& spec, bool allowzero) {
  Shape out(spec.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == -1) {
      if (infer >= 0) ctx.fail("shape ", shape_to_string(spec), " has more than one -1");
      infer = int(i);
      continue;
    }
    if (d == 0 && !allowzero) {
      if (i >= in.size()) ctx.fail("shape ", shape_to_string(spec), " copies dimension ", i, " of a rank-", in.size(), " input");
      d = in[i];
    }
    if (d < 0) ctx.fail("shape ", shape_to_string(spec), " has invalid dimension ", d);
    out[i] = d;
    if (__builtin_mul_overflow(known, d, &known)) ctx.fail("shape ", shape_to_string(spec), " overflows");
  }
  const int64_t total = shape_numel(in);
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      ctx.fail("cannot reshape ", shape_to_string(in), " to ", shape_to_string(spec));
    out[size_t(infer)] = total / known;
  } else if (known != total) {
    ctx.fail("cannot reshape ", shape_to_string(in), " (", total, " elements) to ", shape_to_string(out));
  }
  return out;
}

// Reshape-1..4 takes the shape as an attribute; 5+ as input 1; 14 adds allowzero.
class ReshapeKernel final : public ViewKernel {
 public:
  explicit ReshapeKernel(const KernelInfo& info)
      : allowzero_(info.attr_int("allowzero", 0) != 0), from_input_(info.opset() >= 5) {
    if (!from_input_) attr_ = info.attr_ints("shape");
  }

 private:
  bool target(const PrepareContext& ctx, Shape* out) override {
    std::vector<int64_t> spec = attr_;
    if (from_input_) {
      const Tensor* t = ctx.input_value(1);
      if (!t) return false;
      if (t->rank() != 1) ctx.fail("shape input must be 1-D, got ", t->describe());
      if (t->dtype() != DType::kInt64) ctx.fail("shape input must be int64, got ", t->describe());
      spec = read_int_list(*t);
    }
    *out = reshape_target(ctx, ctx.input_shape(0), spec, allowzero_);
    return true;
  }
  bool allowzero_, from_input_;
  std::vector<int64_t> attr_;
};

// Flatten: axis in [0, r] (opset < 11) or [-r, r].
class FlattenKernel final : public ViewKernel {
 public:
  explicit FlattenKernel(const KernelInfo& info) : axis_(info.attr_int("axis", 1)), negative_ok_(info.opset() >= 11) {}

 private:
  bool target(const PrepareContext& ctx, Shape* out) override {
    const Shape& in = ctx.input_shape(0);
    const int64_t r = int64_t(in.size());
    int64_t a = axis_;
    if (a < (negative_ok_ ? -r : 0) || a > r) ctx.fail("axis ", axis_, " is out of range for rank ", r);
    if (a < 0) a += r;
    *out = {dim_product(in, 0, size_t(a)), dim_product(in, size_t(a), in.size())};
    return true;
  }
  int64_t axis_;
  bool negative_ok_;
};

class SqueezeKernel final : public ViewKernel {
 public:
  explicit SqueezeKernel(const KernelInfo& info)
      : from_input_(info.opset() >= 13), has_attr_(info.has_attr("axes")), attr_(info.attr_ints("axes", {})) {}

 private:
  bool target(const PrepareContext& ctx, Shape* out) override {
    std::vector<int64_t> axes;
    bool present;
    if (!read_axes(ctx, from_input_, attr_, has_attr_, 1, &axes, &present)) return false;
    const Shape& in = ctx.input_shape(0);
    std::vector<bool> drop(in.size(), false);
    if (present) {
      for (int64_t a : normalize_axes(ctx, axes, int64_t(in.size()))) {
        if (in[size_t(a)] != 1)
          ctx.fail("cannot squeeze axis ", a, " of size ", in[size_t(a)], " (input ", shape_to_string(in), ")");
        drop[size_t(a)] = true;
      }
    } else {
      for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
    }
    out->clear();
    for (size_t i = 0; i < in.size(); ++i)
      if (!drop[i]) out->push_back(in[i]);
    return true;
  }
  bool from_input_, has_attr_;
  std::vector<int64_t> attr_;
};

class UnsqueezeKernel final : public ViewKernel {
 public:
  explicit UnsqueezeKernel(const KernelInfo& info) : from_input_(info.opset() >= 13) {
    if (!from_input_) attr_ = info.attr_ints("axes");
  }

 private:
  bool target(const PrepareContext& ctx, Shape* out) override {
    std::vector<int64_t> axes;
    bool present;
    if (!read_axes(ctx, from_input_, attr_, true, 1, &axes, &present)) return false;
    if (!present) ctx.fail("axes input is required");
    const Shape& in = ctx.input_shape(0);
    const int64_t r = int64_t(in.size() + axes.size());
    std::vector<bool> inserted(size_t(r), false);
    for (int64_t a : normalize_axes(ctx, axes, r)) inserted[size_t(a)] = true;
    out->assign(size_t(r), 1);
    size_t k = 0;
    for (size_t i = 0; i < size_t(r); ++i)
      if (!inserted[i]) (*out)[i] = in[k++];
    return true;
  }
  bool from_input_;
  std::vector<int64_t> attr_;
};

// ---------------------------------------------------------------- Shape, Size
// Shape-15 adds start/end (negative counts from the back, clamped to [0, rank]).
class ShapeKernel final : public Kernel {
 public:
  explicit ShapeKernel(const KernelInfo& info)
      : start_(info.attr_int("start", 0)), end_(info.attr_int("end", INT64_MAX)) {}
  void prepare(PrepareContext& ctx) override {
    const int64_t r = int64_t(ctx.input_rank(0));
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t(0), r); };
    b_ = clamp(start_);
    e_ = std::max(b_, clamp(end_));
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
  explicit ConstantKernel(const KernelInfo& info) {
    const ir::Node& n = info.node();
    if (n.attrs.size() != 1) info.fail("expects exactly one value attribute, got ", n.attrs.size());
    const ir::Attribute& a = n.attrs[0];
    if (a.name == "value") {
      value_ = info.attr_tensor("value")->clone();
    } else if (a.name == "value_float") {
      value_ = Tensor::scalar<float>(info.attr_float("value_float"));
    } else if (a.name == "value_floats") {
      auto v = info.attr_floats("value_floats", {});
      value_ = Tensor::from_vector<float>({int64_t(v.size())}, v);
    } else if (a.name == "value_int") {
      value_ = Tensor::scalar<int64_t>(info.attr_int("value_int"));
    } else if (a.name == "value_ints") {
      auto v = info.attr_ints("value_ints");
      value_ = Tensor::from_vector<int64_t>({int64_t(v.size())}, v);
    } else if (a.name == "value_string") {
      value_ = Tensor::scalar<std::string>(info.attr_string("value_string"));
    } else if (a.name == "value_strings") {
      auto v = info.attr_strings("value_strings", {});
      value_ = Tensor::from_vector<std::string>({int64_t(v.size())}, v);
    } else if (a.name == "sparse_value") {
      throw_error<NotImplemented>(n.describe(), ": sparse_value is not supported");
    } else {
      info.fail("unknown attribute '", a.name, "'");
    }
  }
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
  explicit ConstantOfShapeKernel(const KernelInfo& info) {
    const Tensor* v = info.attr_tensor("value");
    if (!v) {
      value_ = Tensor::scalar<float>(0.0f);
    } else {
      if (v->numel() != 1) info.fail("value must hold exactly one element, got ", v->describe());
      value_ = v->clone().reshaped({});
    }
  }
  void prepare(PrepareContext& ctx) override {
    const Tensor* s = ctx.input_value(0);
    if (!s) {
      ctx.set_output_dynamic(0, value_.dtype());
      return;
    }
    if (s->rank() != 1 || s->dtype() != DType::kInt64) ctx.fail("shape input must be 1-D int64, got ", s->describe());
    Shape shape = read_int_list(*s);
    check_output_size(ctx, shape, value_.dtype());
    ctx.set_output(0, value_.dtype(), std::move(shape));
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
    const DType dt = ctx.input_dtype(0);
    for (size_t i = 0; i < 3; ++i) {
      if (ctx.input_dtype(i) != dt)
        ctx.fail("start, limit and delta must have one type, got ", dtype_name(dt), " and ", dtype_name(ctx.input_dtype(i)));
      if (shape_numel(ctx.input_shape(i)) != 1 || ctx.input_rank(i) > 1)
        ctx.fail("input ", i, " must be a scalar, got shape ", shape_to_string(ctx.input_shape(i)));
    }
    const Tensor *ts = ctx.input_value(0), *tl = ctx.input_value(1), *td = ctx.input_value(2);
    if (!ts || !tl || !td) {
      ctx.set_output_dynamic(0, dt);
      return;
    }
    int64_t n = 0;
    dispatch<TypeList<float, double, int16_t, int32_t, int64_t>>(dt, ctx.node(), [&]<class T>() {
      const T s = *ts->data<T>(), l = *tl->data<T>(), d = *td->data<T>();
      if (d == T(0)) ctx.fail("delta must not be zero");
      double count;
      if constexpr (std::is_integral_v<T>) {
        const __int128 diff = __int128(l) - __int128(s), dd = d;
        __int128 q = diff / dd;
        if (q * dd != diff && ((diff > 0) == (dd > 0))) ++q;  // ceil
        count = q < 0 ? 0.0 : double(q);
      } else {
        count = std::ceil((double(l) - double(s)) / double(d));
        if (std::isnan(count)) ctx.fail("start, limit and delta (", s, ", ", l, ", ", d, ") give no element count");
        count = std::max(count, 0.0);
      }
      if (count > double(allocation_limit() / sizeof(T)))
        ctx.fail("range of ", count, " elements (start ", s, ", limit ", l, ", delta ", d, ") is too large");
      n = int64_t(count);
    });
    ctx.set_output(0, dt, {n});
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
    const Tensor* st = ctx.input_value(1);
    const DType dt = ctx.input_dtype(0);
    if (!st) {
      ctx.set_output_dynamic(0, dt);
      return;
    }
    if (st->rank() != 1 || st->dtype() != DType::kInt64) ctx.fail("shape input must be 1-D int64, got ", st->describe());
    const Shape spec = read_int_list(*st);
    for (int64_t d : spec)
      if (d < 0) ctx.fail("shape ", shape_to_string(spec), " has a negative dimension");
    const Shape& in = ctx.input_shape(0);
    Shape out;
    if (!broadcast_shapes({in, spec}, &out))
      ctx.fail("input shape ", shape_to_string(in), " cannot be expanded to ", shape_to_string(spec));
    check_output_size(ctx, out, dt);
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
    if (!ctx.has_input(1)) ctx.fail("the target shape (input 1) is missing");  // not a value to wait for
    const Tensor* st = ctx.input_value(1);
    const DType dt = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt, ctx.node(), [&]<class T>() {});
    if (!st) {
      ctx.set_output_dynamic(0, dt);
      return;
    }
    if (st->rank() != 1) ctx.fail("shape input must be 1-D, got ", st->describe());
    target_ = read_int_list(*st);
    const Shape& g = ctx.input_shape(0);
    Shape b;
    if (target_.size() > g.size() || !broadcast_shapes({target_, g}, &b) || b != g)
      ctx.fail("shape ", shape_to_string(target_), " does not broadcast to the gradient's shape ", shape_to_string(g));
    // Walk G in runs; Y advances by 0 or 1 per element (the BroadcastPlan of Y -> G, input 0 = Y).
    if (!plan_.init({target_, g})) ctx.fail("internal: broadcast plan failed");
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
  r.add<ReshapeKernel>("Reshape", 1, 4);              // shape attribute
  r.add<ReshapeKernel>("Reshape", 5, kMaxOpsetAll);   // shape input; 14: allowzero
  r.add<FlattenKernel>("Flatten", 1, 10);             // axis in [0, r]
  r.add<FlattenKernel>("Flatten", 11, kMaxOpsetAll);  // negative axis
  r.add<SqueezeKernel>("Squeeze", 1, 12);             // axes attribute (11: negative)
  r.add<SqueezeKernel>("Squeeze", 13, kMaxOpsetAll);  // axes input
  r.add<UnsqueezeKernel>("Unsqueeze", 1, 12);
  r.add<UnsqueezeKernel>("Unsqueeze", 13, kMaxOpsetAll);
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
