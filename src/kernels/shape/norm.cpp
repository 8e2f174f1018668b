#include "kernels/shape/norm.h"

namespace onnxtrain::kernels::shape {

namespace {

BatchNormGeom nc_view(const Shape& s, bool spatial) {
  BatchNormGeom g;
  g.n = s[0];
  g.c = spatial ? s[1] : dim_product(s, 1, s.size());
  g.s = spatial ? dim_product(s, 2, s.size()) : 1;
  return g;
}

LayerNormGeom layer_norm_view(const Shape& s, size_t axis) {
  LayerNormGeom g;
  g.axis = int64_t(axis);
  g.norm_shape = Shape(s.begin() + long(axis), s.end());
  g.rows = dim_product(s, 0, axis);
  g.cols = shape_numel(g.norm_shape);
  g.stat_shape = Shape(s.begin(), s.begin() + long(axis));
  g.stat_shape.resize(s.size(), 1);
  return g;
}

}  // namespace

void check_param(const PrepareContext& ctx, size_t i, const char* what, int64_t numel) {
  if (!ctx.has_input(i)) ctx.fail(what, " is required");
  if (!dtype_is_float(ctx.input_dtype(i)))
    ctx.fail(what, " must be a float tensor, got ", dtype_name(ctx.input_dtype(i)));
  if (shape_numel(ctx.input_shape(i)) != numel)
    ctx.fail(what, " has shape ", shape_to_string(ctx.input_shape(i)), ", expected ", numel, " elements");
}

DType check_nc_input(const PrepareContext& ctx, size_t i, const char* what) {
  const DType dt = ctx.input_dtype(i);
  require_float(ctx, dt);
  if (ctx.input_rank(i) < 2) ctx.fail(what, " must have rank >= 2, got shape ", shape_to_string(ctx.input_shape(i)));
  return dt;
}

DType check_nc_grad_inputs(const PrepareContext& ctx) {
  const DType dt = check_nc_input(ctx, 1, "X");
  if (ctx.input_shape(0) != ctx.input_shape(1) || ctx.input_dtype(0) != dt)
    ctx.fail("dY and X differ in shape or type");
  return dt;
}

BatchNormAttrs read_batch_norm_attrs(const KernelInfo& info) {
  BatchNormAttrs at;
  at.epsilon = info.attr_float("epsilon", 1e-5f);
  at.momentum = info.attr_float("momentum", 0.9f);
  at.spatial = info.opset() >= 9 || info.attr_int("spatial", 1) != 0;
  at.new_style = info.opset() >= 14;
  at.train_attr = at.new_style ? info.attr_int("training_mode", 0) != 0 : info.attr_int("is_test", 0) == 0;
  at.torch_var = info.options().torch_running_var;
  return at;
}

BatchNormGeom check_batch_norm(const PrepareContext& ctx, const BatchNormAttrs& at) {
  check_nc_input(ctx, 0, "X");
  const BatchNormGeom g = nc_view(ctx.input_shape(0), at.spatial);
  const char* names[] = {"", "scale", "B", "mean", "var"};
  for (size_t i = 1; i <= 4; ++i) check_param(ctx, i, names[i], g.c);
  return g;
}

bool batch_norm_training(const PrepareContext& ctx, const BatchNormAttrs& at) {
  bool extra = false;
  for (size_t k = 1; k < ctx.num_outputs(); ++k) extra |= ctx.has_output(k);
  return at.new_style ? at.train_attr : at.train_attr && extra;
}

void set_batch_norm_outputs(PrepareContext& ctx, const BatchNormAttrs& at, bool training) {
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  for (size_t k = 1; k < std::min<size_t>(ctx.num_outputs(), at.new_style ? 3 : 5); ++k) {
    const size_t src = k % 2 ? 3 : 4;  // mean-like outputs follow input_mean, var-like input_var
    if (!ctx.has_output(k)) continue;
    if (k <= 2 && training) ctx.set_output_inplace(k, src);
    else ctx.set_output(k, k <= 2 ? ctx.input_dtype(src) : ctx.input_dtype(0), ctx.input_shape(src));
  }
}

BatchNormGradAttrs read_batch_norm_grad_attrs(const KernelInfo& info) {
  BatchNormGradAttrs at;
  at.epsilon = info.attr_float("epsilon", 1e-5f);
  at.training = info.attr_int("training_mode", 0) != 0;
  at.spatial = info.attr_int("spatial", 1) != 0;
  return at;
}

void set_batch_norm_grad_outputs(PrepareContext& ctx) {
  if (ctx.has_output(0)) ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(1));
  for (size_t k = 1; k < ctx.num_outputs(); ++k) {
    const size_t src = k <= 2 ? 2 : k;  // dscale, dB like scale; dmean, dvar like mean, var
    if (ctx.has_output(k)) ctx.set_output(k, ctx.input_dtype(src), ctx.input_shape(src));
  }
}

BatchNormGeom check_batch_norm_grad(const PrepareContext& ctx, const BatchNormGradAttrs& at) {
  check_nc_grad_inputs(ctx);
  const BatchNormGeom g = nc_view(ctx.input_shape(1), at.spatial);
  check_param(ctx, 2, "scale", g.c);
  if (!at.training) {
    check_param(ctx, 3, "mean", g.c);
    check_param(ctx, 4, "var", g.c);
  }
  if (ctx.num_outputs() > 5)
    ctx.fail("has ", ctx.num_outputs(), " outputs, expected at most 5 (dX, dscale, dB, dmean, dvar)");
  if (at.training && (ctx.has_output(3) || ctx.has_output(4)))
    ctx.fail("dmean and dvar (outputs 3 and 4) exist only in inference mode (training_mode = 0)");
  return g;
}

int64_t check_instance_norm(const PrepareContext& ctx) {
  check_nc_input(ctx, 0, "input");
  const int64_t c = ctx.input_shape(0)[1];
  check_param(ctx, 1, "scale", c);
  check_param(ctx, 2, "B", c);
  return c;
}

LayerNormAttrs read_layer_norm_attrs(const KernelInfo& info) {
  LayerNormAttrs at;
  at.axis = info.attr_int("axis", -1);
  at.epsilon = info.attr_float("epsilon", 1e-5f);
  at.stash = DType(info.attr_int("stash_type", 1));
  if (at.stash != DType::kFloat32 && at.stash != DType::kFloat64 && at.stash != DType::kBFloat16 &&
      at.stash != DType::kFloat16)
    info.fail("stash_type ", int(at.stash), " is not a float type");
  return at;
}

LayerNormGeom check_layer_norm(const PrepareContext& ctx, int64_t axis) {
  const DType dt = ctx.input_dtype(0);
  require_float(ctx, dt);
  const Shape& s = ctx.input_shape(0);
  const size_t a = size_t(normalize_axis(ctx, axis, int64_t(s.size())));
  if (s.empty()) ctx.fail("X must have rank >= 1");
  const LayerNormGeom g = layer_norm_view(s, a);
  for (size_t i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) {
      if (i == 1) ctx.fail("Scale is required");
      continue;
    }
    const Shape& p = ctx.input_shape(i);
    Shape b;
    if (ctx.input_dtype(i) != dt)
      ctx.fail(i == 1 ? "Scale" : "B", " has type ", dtype_name(ctx.input_dtype(i)), ", X has ", dtype_name(dt));
    if (p.size() > g.norm_shape.size() || !broadcast_shapes({g.norm_shape, p}, &b) || b != g.norm_shape)
      ctx.fail(i == 1 ? "Scale" : "B", " shape ", shape_to_string(p), " does not broadcast to ",
               shape_to_string(g.norm_shape));
  }
  return g;
}

LayerNormGeom check_layer_norm_grad(const PrepareContext& ctx, int64_t axis) {
  const DType dt = ctx.input_dtype(1);
  require_float(ctx, dt);
  const Shape& s = ctx.input_shape(1);
  if (s.empty()) ctx.fail("X must have rank >= 1");
  if (ctx.input_shape(0) != s || ctx.input_dtype(0) != dt) ctx.fail("dY and X differ in shape or type");
  const LayerNormGeom g = layer_norm_view(s, size_t(normalize_axis(ctx, axis, int64_t(s.size()))));
  Shape b;
  if (!ctx.has_input(2) || ctx.input_dtype(2) != dt || !broadcast_shapes({g.norm_shape, ctx.input_shape(2)}, &b) ||
      b != g.norm_shape)
    ctx.fail("Scale must be a ", dtype_name(dt), " tensor broadcasting to ", shape_to_string(g.norm_shape));
  check_param(ctx, 3, "Mean", g.rows);
  check_param(ctx, 4, "InvStdDev", g.rows);
  return g;
}

LRNAttrs read_lrn_attrs(const KernelInfo& info) {
  LRNAttrs at;
  at.size = info.attr_int("size");
  at.alpha = info.attr_float("alpha", 1e-4f);
  at.beta = info.attr_float("beta", 0.75f);
  at.bias = info.attr_float("bias", 1.0f);
  if (at.size <= 0 || at.size > (int64_t(1) << 31)) info.fail("size must be in [1, 2^31], got ", at.size);
  return at;
}

void check_dropout_scalars(const PrepareContext& ctx, size_t ratio, size_t training_mode) {
  if (ctx.has_input(training_mode) &&
      (ctx.input_dtype(training_mode) != DType::kBool || shape_numel(ctx.input_shape(training_mode)) != 1))
    ctx.fail("training_mode must be a bool scalar, got ", dtype_name(ctx.input_dtype(training_mode)),
             shape_to_string(ctx.input_shape(training_mode)));
  if (ctx.has_input(ratio) && (!dtype_is_float(ctx.input_dtype(ratio)) || shape_numel(ctx.input_shape(ratio)) != 1))
    ctx.fail("ratio must be a float scalar, got ", dtype_name(ctx.input_dtype(ratio)),
             shape_to_string(ctx.input_shape(ratio)));
}

DropoutAttrs read_dropout_attrs(const KernelInfo& info) {
  DropoutAttrs at;
  at.opset = info.opset();
  if (at.opset < 12) {
    at.ratio = info.attr_float("ratio", 0.5f);
    at.train = info.options().training && (at.opset >= 7 || info.attr_int("is_test", 0) == 0);
  }
  return at;
}

DropoutMode dropout_mode(const PrepareContext& ctx, const DropoutAttrs& at, bool* keep_all) {
  require_float(ctx, ctx.input_dtype(0));
  DropoutMode mode = at.train ? DropoutMode::kTrain : DropoutMode::kInfer;
  if (at.opset >= 12) {
    mode = DropoutMode::kInfer;
    check_dropout_scalars(ctx, 1, 2);
    if (ctx.has_input(2)) {
      const Tensor* t = ctx.input_value(2);
      mode = !t ? DropoutMode::kRuntime : *t->data<bool>() ? DropoutMode::kTrain : DropoutMode::kInfer;
    }
    if (const Tensor* r = ctx.has_input(1) ? ctx.input_value(1) : nullptr; r && mode == DropoutMode::kTrain)
      check_ratio(ctx, read_scalar_as_double(*r));
  } else if (at.train) {
    check_ratio(ctx, at.ratio);
  }
  // A constant ratio of 0 keeps every element in both modes.
  if (at.opset >= 12) {
    const Tensor* r = ctx.has_input(1) ? ctx.input_value(1) : nullptr;
    *keep_all = r && read_scalar_as_double(*r) == 0;
  } else {
    *keep_all = at.ratio == 0;
  }
  return mode;
}

DropoutGradAttrs read_dropout_grad_attrs(const KernelInfo& info) {
  DropoutGradAttrs at;
  at.ratio = info.attr_float("ratio", 0.5f);
  at.default_training = info.attr_int("session_training", 0) == 0 || info.options().training;
  return at;
}

bool check_dropout_grad(const PrepareContext& ctx, const DropoutGradAttrs& at) {
  const DType dt = ctx.input_dtype(0);
  require_float(ctx, dt);
  if (ctx.input_shape(1) != ctx.input_shape(0) || (ctx.input_dtype(1) != DType::kBool && ctx.input_dtype(1) != dt))
    ctx.fail("mask must be a bool or ", dtype_name(dt), " tensor of shape ", shape_to_string(ctx.input_shape(0)));
  check_dropout_scalars(ctx, 2, 3);
  const Tensor* r = ctx.has_input(2) ? ctx.input_value(2) : nullptr;
  return ctx.has_input(2) ? r && read_scalar_as_double(*r) == 0 : at.ratio == 0;
}

}  // namespace onnxtrain::kernels::shape
