#include "kernels/shape/reduce.h"

namespace onnxtrain::kernels::shape {

Shape reduced_shape(const Shape& in, const std::vector<bool>& mask, bool keepdims) {
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!mask[i]) out.push_back(in[i]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

ReduceGeometry reduce_geometry(const Shape& in, const std::vector<bool>& mask, bool keepdims) {
  ReduceGeometry r;
  r.out_shape = reduced_shape(in, mask, keepdims);
  r.out_numel = shape_numel(r.out_shape);
  r.red_numel = 1;
  for (size_t i = 0; i < in.size(); ++i)
    if (mask[i]) r.red_numel *= in[i];
  struct Group {
    ReduceGeometry::Run run;
    bool red;
  };
  std::vector<Group> g;  // innermost first
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    if (in[i] != 1) {
      if (!g.empty() && g.back().red == mask[i]) g.back().run.dim *= in[i];
      else g.push_back(Group{{in[i], stride}, bool(mask[i])});
    }
    stride *= in[i];
  }
  bool any_red = false;
  for (const Group& x : g) any_red |= x.red;
  if (!any_red) g.insert(g.begin(), Group{{1, 1}, true});
  r.row = g.front().red;
  r.inner = g.front().run.dim;
  for (size_t i = g.size(); i-- > 1;) (g[i].red ? r.red : r.kept).push_back(g[i].run);
  return r;
}

AxisSplit softmax_split(const PrepareContext& ctx, const Shape& s, int64_t axis, bool coerce) {
  const int64_t rank = int64_t(s.size());
  if (coerce) {
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a > rank) ctx.fail("axis ", axis, " is out of range for rank ", rank);
    AxisSplit r;
    r.outer = dim_product(s, 0, size_t(a));
    r.n = dim_product(s, size_t(a), s.size());
    return r;
  }
  if (rank == 0) ctx.fail("input must have rank >= 1");
  return AxisSplit(s, size_t(normalize_axis(ctx, axis, rank)));
}

AxisSplit arg_reduce_geometry(const PrepareContext& ctx, int64_t axis_attr, bool keepdims, const char* what,
                              Shape* out) {
  const Shape& in = ctx.input_shape(0);
  const size_t axis = size_t(normalize_axis(ctx, axis_attr, int64_t(in.size())));
  if (!in.empty() && in[axis] == 0) ctx.fail("cannot take ", what, " over an empty axis");
  out->clear();
  for (size_t i = 0; i < in.size(); ++i)
    if (i != axis) out->push_back(in[i]);
    else if (keepdims) out->push_back(1);
  return AxisSplit(in, axis);
}

void check_cumsum_inputs(const PrepareContext& ctx) {
  if (!ctx.has_input(1)) ctx.fail("the axis input is required");
  if (ctx.input_dtype(1) != DType::kInt32 && ctx.input_dtype(1) != DType::kInt64)
    ctx.fail("axis must be int32 or int64, got ", dtype_name(ctx.input_dtype(1)));
  if (shape_numel(ctx.input_shape(1)) != 1 || ctx.input_rank(1) > 1)
    ctx.fail("axis must be a scalar, got shape ", shape_to_string(ctx.input_shape(1)));
  if (ctx.input_rank(0) == 0) ctx.fail("input must have rank >= 1");
}

void check_softmax_grad_inputs(const PrepareContext& ctx, DType dt) {
  const Shape& s = ctx.input_shape(1);
  if (ctx.input_shape(0) != s || ctx.input_dtype(1) != dt)
    ctx.fail("dY ", dtype_name(dt), shape_to_string(ctx.input_shape(0)), " and Y ", dtype_name(ctx.input_dtype(1)),
             shape_to_string(s), " differ");
}

TopKAttrs read_topk_attrs(const KernelInfo& info) {
  TopKAttrs at;
  at.axis = info.attr_int("axis", -1);
  at.largest = info.attr_int("largest", 1) != 0;
  if (info.opset() < 10) {
    at.k = info.attr_int("k");
    if (at.k < 0) info.fail("k must be >= 0, got ", at.k);
  }
  return at;
}

bool topk_geometry(const PrepareContext& ctx, const TopKAttrs& at, int64_t* k_out, AxisSplit* split, Shape* out) {
  int64_t k = at.k;
  if (ctx.opset() >= 10) {
    if (!ctx.has_input(1)) ctx.fail("the K input is required");
    const Tensor* kt = ctx.input_value(1);
    if (!kt) return false;
    const auto kv = read_ints(ctx, *kt, "K");
    if (kv.size() != 1) ctx.fail("K must hold one value, got ", kv.size());
    k = kv[0];
  }
  const Shape& s = ctx.input_shape(0);
  if (s.empty()) ctx.fail("input must have rank >= 1");
  const size_t axis = size_t(normalize_axis(ctx, at.axis, int64_t(s.size())));
  if (k < 0 || k > s[axis]) ctx.fail("k = ", k, " is out of range for axis ", at.axis, " of size ", s[axis]);
  *split = AxisSplit(s, axis);
  *k_out = k;
  *out = s;
  (*out)[axis] = k;
  return true;
}

}  // namespace onnxtrain::kernels::shape
