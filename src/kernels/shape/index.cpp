#include "kernels/shape/index.h"

#include <string>

namespace onnxtrain::kernels::shape {

void index_error(const RunContext& ctx, int64_t v, int64_t axis, int64_t dim) {
  ctx.fail("index ", v, " is out of range for axis ", axis, " of size ", dim, " (valid: [", -dim, ", ", dim - 1,
           "])");
}

void check_index_dtype(const PrepareContext& ctx, size_t input) {
  const DType dt = ctx.input_dtype(input);
  if (dt != DType::kInt32 && dt != DType::kInt64) ctx.fail("indices must be int32 or int64, got ", dtype_name(dt));
}

GatherGeom gather_geometry(const PrepareContext& ctx, const Shape& xs, const Shape& is, int64_t axis_attr) {
  if (xs.empty()) ctx.fail("data must have rank >= 1");
  GatherGeom g;
  g.axis = normalize_axis(ctx, axis_attr, int64_t(xs.size()));
  g.output.assign(xs.begin(), xs.begin() + g.axis);
  g.output.insert(g.output.end(), is.begin(), is.end());
  g.output.insert(g.output.end(), xs.begin() + g.axis + 1, xs.end());
  g.outer = dim_product(xs, 0, size_t(g.axis));
  g.n = xs[size_t(g.axis)];
  g.inner = dim_product(xs, size_t(g.axis) + 1, xs.size());
  return g;
}

void ElementsAxis::init(const PrepareContext& ctx, const Shape& xs, int64_t attr_axis) {
  check_index_dtype(ctx, 1);
  const Shape& is = ctx.input_shape(1);
  if (xs.empty()) ctx.fail("data must have rank >= 1");
  if (is.size() != xs.size()) ctx.fail("indices rank ", is.size(), " differs from data rank ", xs.size());
  axis = normalize_axis(ctx, attr_axis, int64_t(xs.size()));
  for (size_t d = 0; d < xs.size(); ++d)
    if (int64_t(d) != axis && is[d] > xs[d])
      ctx.fail("indices shape ", shape_to_string(is), " exceeds data shape ", shape_to_string(xs), " on axis ", d);
  strides = contiguous_strides(xs);
  n = xs[size_t(axis)];
  astride = strides[size_t(axis)];
}

void NdAddressing::init(const PrepareContext& ctx, const Shape& xs, const Shape& is, int64_t b) {
  if (is.empty()) ctx.fail("indices must have rank >= 1");
  if (b < 0 || size_t(b) >= is.size() || size_t(b) >= xs.size())
    ctx.fail("batch_dims ", b, " must be in [0, min(rank(data), rank(indices)))");
  for (size_t d = 0; d < size_t(b); ++d)
    if (xs[d] != is[d])
      ctx.fail("batch dimension ", d, " differs: data ", shape_to_string(xs), ", indices ", shape_to_string(is));
  k = is.back();
  if (k < 1 || k > int64_t(xs.size()) - b)
    ctx.fail("indices last dimension ", k, " must be in [1, ", int64_t(xs.size()) - b, "] for data ",
             shape_to_string(xs), " and batch_dims ", b);
  batch = dim_product(xs, 0, size_t(b));
  tuples = dim_product(is, 0, is.size() - 1);
  per_batch = dim_product(is, size_t(b), is.size() - 1);
  slice = dim_product(xs, size_t(b + k), xs.size());
  batch_stride = dim_product(xs, size_t(b), xs.size());
  dims.assign(xs.begin() + b, xs.begin() + b + k);
  const auto st = contiguous_strides(xs);
  strides.assign(st.begin() + b, st.begin() + b + k);
  output.assign(is.begin(), is.end() - 1);
  output.insert(output.end(), xs.begin() + b + k, xs.end());
}

Reduction read_reduction(const KernelInfo& info) {
  const std::string r = info.attr_string("reduction", "none");
  const int64_t v = info.opset();
  if (r == "none") return Reduction::kNone;
  if (v >= 16 && r == "add") return Reduction::kAdd;
  if (v >= 16 && r == "mul") return Reduction::kMul;
  // max, min: opset 18, kept as they are in a graph lowered to 17 (ir/opset_lower.h)
  if (v >= 17 && r == "max") return Reduction::kMax;
  if (v >= 17 && r == "min") return Reduction::kMin;
  info.fail("reduction '", r, "' is not valid at opset ", v);
}

bool scatter_base_shape(const PrepareContext& ctx, bool grad, Shape* xs) {
  if (!grad) {
    if (ctx.input_dtype(2) != ctx.input_dtype(0))
      ctx.fail("updates type ", dtype_name(ctx.input_dtype(2)), " differs from data type ", dtype_name(ctx.input_dtype(0)));
    *xs = ctx.input_shape(0);
    return true;
  }
  const DType dt = ctx.input_dtype(2);
  require_float(ctx, dt);
  return read_shape_value(ctx, 0, ctx.input_dtype(2), xs);
}

void check_scatter_nd_updates(const PrepareContext& ctx, const Shape& xs, const NdAddressing& a) {
  const Shape& us = ctx.input_shape(2);
  if (us != a.output)
    ctx.fail("updates shape ", shape_to_string(us), " must be ", shape_to_string(a.output), " for data ",
             shape_to_string(xs), " and indices ", shape_to_string(ctx.input_shape(1)));
}

bool onehot_geometry(const PrepareContext& ctx, int64_t axis_attr, OneHotGeom* g) {
  const Shape& values = ctx.input_shape(2);
  if (values.size() != 1 || values[0] != 2) ctx.fail("values must have shape [2], got ", shape_to_string(values));
  const Shape& is = ctx.input_shape(0);
  const int64_t r = int64_t(is.size());
  if (axis_attr < -r - 1 || axis_attr > r) ctx.fail("axis ", axis_attr, " is out of range for output rank ", r + 1);
  g->axis = axis_attr < 0 ? axis_attr + r + 1 : axis_attr;
  const Tensor* dt = ctx.input_value(1);
  if (!dt) return false;
  if (dt->numel() != 1) ctx.fail("depth must hold exactly one value, got ", dt->describe());
  const double d = read_scalar_as_double(*dt);
  if (!(d >= 1) || d > 9.0e15) ctx.fail("depth ", d, " must be a positive integer");
  g->depth = int64_t(d);
  g->output = is;
  g->output.insert(g->output.begin() + g->axis, g->depth);
  check_output_size(ctx, g->output, ctx.input_dtype(2));
  g->outer = dim_product(is, 0, size_t(g->axis));
  g->inner = dim_product(is, size_t(g->axis), is.size());
  return true;
}

}  // namespace onnxtrain::kernels::shape
