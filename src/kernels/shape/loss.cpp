#include "kernels/shape/loss.h"

#include <string>

namespace onnxtrain::kernels::shape {

LossSpec::LossSpec(const KernelInfo& info) {
  const std::string red = info.attr_string("reduction", "mean");
  if (red == "none")
    reduction = LossReduction::kNone;
  else if (red == "sum")
    reduction = LossReduction::kSum;
  else if (red == "mean")
    reduction = LossReduction::kMean;
  else
    info.fail("reduction must be none, sum or mean, got '", red, "'");
  has_ignore = info.has_attr("ignore_index");
  ignore = info.attr_int("ignore_index", 0);
}

Shape LossSpec::check(const PrepareContext& ctx, size_t x) {
  const DType dt = ctx.input_dtype(x);
  require_float(ctx, dt);
  const Shape& s = ctx.input_shape(x);
  const Shape& t = ctx.input_shape(x + 1);
  if (s.size() < 2) ctx.fail("scores must have shape [N, C, d1, ...], got ", shape_to_string(s));
  Shape expect = s;
  expect.erase(expect.begin() + 1);
  if (t != expect) ctx.fail("labels have shape ", shape_to_string(t), ", expected ", shape_to_string(expect));
  if (ctx.input_dtype(x + 1) != DType::kInt32 && ctx.input_dtype(x + 1) != DType::kInt64)
    ctx.fail("labels must be int32 or int64, got ", dtype_name(ctx.input_dtype(x + 1)));
  if (ctx.has_input(x + 2)) {
    if (ctx.input_dtype(x + 2) != dt)
      ctx.fail("weights have type ", dtype_name(ctx.input_dtype(x + 2)), ", expected ", dtype_name(dt));
    if (ctx.input_shape(x + 2) != Shape{s[1]})
      ctx.fail("weights have shape ", shape_to_string(ctx.input_shape(x + 2)), ", expected [", s[1], "]");
  }
  n = s[0];
  c = s[1];
  d = dim_product(s, 2, s.size());
  return t;
}

void LossSpec::check_grad(const PrepareContext& ctx) {
  const Shape t = check(ctx, 1);
  const DType dt = ctx.input_dtype(1);
  const Shape& g = ctx.input_shape(0);
  if (ctx.input_dtype(0) != dt || (reduction == LossReduction::kNone ? g != t : shape_numel(g) != 1))
    ctx.fail("dloss has type ", dtype_name(ctx.input_dtype(0)), " and shape ", shape_to_string(g), ", expected ",
             dtype_name(dt), " ", reduction == LossReduction::kNone ? shape_to_string(t) : "[]");
}

}  // namespace onnxtrain::kernels::shape
