#include "kernels/shape/reshape.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <type_traits>

namespace onnxtrain::kernels::shape {

namespace {

// Axes from the attribute (older opsets) or from input `index` (newer ones); false when the input
// exists but its value is unknown. `present` tells whether axes were given at all.
bool read_axes(const PrepareContext& ctx, const AxesAttrs& at, size_t index, std::vector<int64_t>* axes,
               bool* present) {
  if (!at.from_input) {
    *axes = at.axes;
    *present = at.has_attr;
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
Shape reshape_target(const PrepareContext& ctx, const Shape& in, const std::vector<int64_t>& spec, bool allowzero) {
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
      if (i >= in.size())
        ctx.fail("shape ", shape_to_string(spec), " copies dimension ", i, " of a rank-", in.size(), " input");
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

// Range's count for start s, limit l, delta d of type T.
template <class T>
int64_t range_count_of(const PrepareContext& ctx, const Tensor& ts, const Tensor& tl, const Tensor& td) {
  const T s = *ts.data<T>(), l = *tl.data<T>(), d = *td.data<T>();
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
  return int64_t(count);
}

}  // namespace

ReshapeAttrs read_reshape_attrs(const KernelInfo& info) {
  ReshapeAttrs at;
  at.allowzero = info.attr_int("allowzero", 0) != 0;
  at.from_input = info.opset() >= 5;
  if (!at.from_input) at.shape = info.attr_ints("shape");
  return at;
}

bool reshape_shape(const PrepareContext& ctx, const ReshapeAttrs& at, Shape* out) {
  std::vector<int64_t> spec = at.shape;
  if (at.from_input) {
    const Tensor* t = ctx.input_value(1);
    if (!t) return false;
    if (t->rank() != 1) ctx.fail("shape input must be 1-D, got ", t->describe());
    if (t->dtype() != DType::kInt64) ctx.fail("shape input must be int64, got ", t->describe());
    spec = read_int_list(*t);
  }
  *out = reshape_target(ctx, ctx.input_shape(0), spec, at.allowzero);
  return true;
}

Shape flatten_shape(const PrepareContext& ctx, int64_t axis, bool negative_ok) {
  const Shape& in = ctx.input_shape(0);
  const int64_t r = int64_t(in.size());
  int64_t a = axis;
  if (a < (negative_ok ? -r : 0) || a > r) ctx.fail("axis ", axis, " is out of range for rank ", r);
  if (a < 0) a += r;
  return {dim_product(in, 0, size_t(a)), dim_product(in, size_t(a), in.size())};
}

AxesAttrs read_squeeze_attrs(const KernelInfo& info) {
  return {info.opset() >= 13, info.has_attr("axes"), info.attr_ints("axes", {})};
}

AxesAttrs read_unsqueeze_attrs(const KernelInfo& info) {
  AxesAttrs at{info.opset() >= 13, true, {}};
  if (!at.from_input) at.axes = info.attr_ints("axes");
  return at;
}

bool squeeze_shape(const PrepareContext& ctx, const AxesAttrs& at, Shape* out) {
  std::vector<int64_t> axes;
  bool present;
  if (!read_axes(ctx, at, 1, &axes, &present)) return false;
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

bool unsqueeze_shape(const PrepareContext& ctx, const AxesAttrs& at, Shape* out) {
  std::vector<int64_t> axes;
  bool present;
  if (!read_axes(ctx, at, 1, &axes, &present)) return false;
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

std::pair<int64_t, int64_t> shape_span(int64_t rank, int64_t start, int64_t end) {
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t(0), rank); };
  const int64_t b = clamp(start);
  return {b, std::max(b, clamp(end))};
}

Tensor read_constant_value(const KernelInfo& info) {
  const ir::Node& n = info.node();
  if (n.attrs.size() != 1) info.fail("expects exactly one value attribute, got ", n.attrs.size());
  const ir::Attribute& a = n.attrs[0];
  if (a.name == "value") return info.attr_tensor("value")->clone();
  if (a.name == "value_float") return Tensor::scalar<float>(info.attr_float("value_float"));
  if (a.name == "value_floats") {
    auto v = info.attr_floats("value_floats", {});
    return Tensor::from_vector<float>({int64_t(v.size())}, v);
  }
  if (a.name == "value_int") return Tensor::scalar<int64_t>(info.attr_int("value_int"));
  if (a.name == "value_ints") {
    auto v = info.attr_ints("value_ints");
    return Tensor::from_vector<int64_t>({int64_t(v.size())}, v);
  }
  if (a.name == "value_string") return Tensor::scalar<std::string>(info.attr_string("value_string"));
  if (a.name == "value_strings") {
    auto v = info.attr_strings("value_strings", {});
    return Tensor::from_vector<std::string>({int64_t(v.size())}, v);
  }
  if (a.name == "sparse_value") throw_error<NotImplemented>(n.describe(), ": sparse_value is not supported");
  info.fail("unknown attribute '", a.name, "'");
}

Tensor read_constant_of_shape_value(const KernelInfo& info) {
  const Tensor* v = info.attr_tensor("value");
  if (!v) return Tensor::scalar<float>(0.0f);
  if (v->numel() != 1) info.fail("value must hold exactly one element, got ", v->describe());
  return v->clone().reshaped({});
}

bool constant_of_shape_shape(const PrepareContext& ctx, DType dt, Shape* out) {
  const Tensor* s = ctx.input_value(0);
  if (!s) return false;
  if (s->rank() != 1 || s->dtype() != DType::kInt64) ctx.fail("shape input must be 1-D int64, got ", s->describe());
  *out = read_int_list(*s);
  check_output_size(ctx, *out, dt);
  return true;
}

bool range_count(const PrepareContext& ctx, int64_t* n) {
  const DType dt = ctx.input_dtype(0);
  for (size_t i = 0; i < 3; ++i) {
    if (ctx.input_dtype(i) != dt)
      ctx.fail("start, limit and delta must have one type, got ", dtype_name(dt), " and ",
               dtype_name(ctx.input_dtype(i)));
    if (shape_numel(ctx.input_shape(i)) != 1 || ctx.input_rank(i) > 1)
      ctx.fail("input ", i, " must be a scalar, got shape ", shape_to_string(ctx.input_shape(i)));
  }
  const Tensor *ts = ctx.input_value(0), *tl = ctx.input_value(1), *td = ctx.input_value(2);
  if (!ts || !tl || !td) return false;
  switch (dt) {
    case DType::kFloat32: *n = range_count_of<float>(ctx, *ts, *tl, *td); break;
    case DType::kFloat64: *n = range_count_of<double>(ctx, *ts, *tl, *td); break;
    case DType::kInt16: *n = range_count_of<int16_t>(ctx, *ts, *tl, *td); break;
    case DType::kInt32: *n = range_count_of<int32_t>(ctx, *ts, *tl, *td); break;
    case DType::kInt64: *n = range_count_of<int64_t>(ctx, *ts, *tl, *td); break;
    default: require_element_type(ctx, dt, false);
  }
  return true;
}

bool expand_shape(const PrepareContext& ctx, Shape* out) {
  const Tensor* st = ctx.input_value(1);
  if (!st) return false;
  if (st->rank() != 1 || st->dtype() != DType::kInt64) ctx.fail("shape input must be 1-D int64, got ", st->describe());
  const Shape spec = read_int_list(*st);
  for (int64_t d : spec)
    if (d < 0) ctx.fail("shape ", shape_to_string(spec), " has a negative dimension");
  const Shape& in = ctx.input_shape(0);
  if (!broadcast_shapes({in, spec}, out))
    ctx.fail("input shape ", shape_to_string(in), " cannot be expanded to ", shape_to_string(spec));
  check_output_size(ctx, *out, ctx.input_dtype(0));
  return true;
}

bool sum_to_shape_target(const PrepareContext& ctx, Shape* target) {
  if (!ctx.has_input(1)) ctx.fail("the target shape (input 1) is missing");  // not a value to wait for
  const Tensor* st = ctx.input_value(1);
  const DType dt = ctx.input_dtype(0);
  require_float(ctx, dt);
  if (!st) return false;
  if (st->rank() != 1) ctx.fail("shape input must be 1-D, got ", st->describe());
  *target = read_int_list(*st);
  const Shape& g = ctx.input_shape(0);
  Shape b;
  if (target->size() > g.size() || !broadcast_shapes({*target, g}, &b) || b != g)
    ctx.fail("shape ", shape_to_string(*target), " does not broadcast to the gradient's shape ", shape_to_string(g));
  return true;
}

}  // namespace onnxtrain::kernels::shape
