#include "kernels/shape/window.h"

#include <algorithm>
#include <tuple>

namespace onnxtrain::kernels::shape {

void WindowAttrs::read(const KernelInfo& info) {
  auto_pad = info.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID")
    info.fail("unknown auto_pad '", auto_pad, "'");
  kernel = info.attr_ints("kernel_shape", {});
  strides = info.attr_ints("strides", {});
  pads = info.attr_ints("pads", {});
  dilations = info.attr_ints("dilations", {});
  ceil_mode = info.attr_int("ceil_mode", 0) != 0;
  for (int64_t v : kernel)
    if (v <= 0) info.fail("kernel_shape values must be positive");
  for (int64_t v : strides)
    if (v <= 0) info.fail("strides must be positive");
  for (int64_t v : dilations)
    if (v <= 0) info.fail("dilations must be positive");
  for (int64_t v : pads)
    if (v < 0) info.fail("pads must be non-negative");
}

namespace {

// int64 arithmetic on attribute values and dims that fails naming the node instead of overflowing
// (a stride or pad of 2^63 - 1 is a valid attribute value).
int64_t add(const PrepareContext& ctx, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) ctx.fail("window geometry overflows int64 (", a, " + ", b, ")");
  return r;
}
int64_t sub(const PrepareContext& ctx, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) ctx.fail("window geometry overflows int64 (", a, " - ", b, ")");
  return r;
}
int64_t mul(const PrepareContext& ctx, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) ctx.fail("window geometry overflows int64 (", a, " * ", b, ")");
  return r;
}

// Fills nd, in, kernel, stride, dilation and the explicit pads of g (checking attribute lengths, and
// that the kernel's extent and the padded input fit int64, so that WindowGeom::extent and the
// kernels' index arithmetic within them cannot overflow).
void common(const PrepareContext& ctx, const WindowAttrs& a, const Shape& in, const Shape& kernel, WindowGeom* g) {
  const size_t nd = in.size();
  g->nd = nd;
  g->in = in;
  g->kernel = kernel;
  auto per_dim = [&](const std::vector<int64_t>& v, const char* name, Shape* out) {
    if (!v.empty() && v.size() != nd) ctx.fail(name, " has ", v.size(), " values for ", nd, " spatial dims");
    *out = v.empty() ? Shape(nd, 1) : v;
  };
  per_dim(a.strides, "strides", &g->stride);
  per_dim(a.dilations, "dilations", &g->dilation);
  if (!a.pads.empty() && a.pads.size() != 2 * nd)
    ctx.fail("pads has ", a.pads.size(), " values for ", nd, " spatial dims (expected ", 2 * nd, ")");
  g->pad_b.assign(nd, 0);
  g->pad_e.assign(nd, 0);
  if (a.auto_pad == "NOTSET" && !a.pads.empty())
    for (size_t i = 0; i < nd; ++i) g->pad_b[i] = a.pads[i], g->pad_e[i] = a.pads[nd + i];
  g->out_pad.assign(nd, 0);
  for (size_t i = 0; i < nd; ++i) {
    if (kernel[i] <= 0) ctx.fail("kernel size must be positive, got ", shape_to_string(kernel));
    add(ctx, mul(ctx, kernel[i] - 1, g->dilation[i]), 1);
    add(ctx, add(ctx, in[i], g->pad_b[i]), g->pad_e[i]);
  }
}

}  // namespace

WindowGeom forward_geometry(const PrepareContext& ctx, const WindowAttrs& a, const Shape& in, const Shape& kernel) {
  WindowGeom g;
  common(ctx, a, in, kernel, &g);
  g.out.resize(g.nd);
  for (size_t i = 0; i < g.nd; ++i) {
    const int64_t dk = g.extent(i), s = g.stride[i];
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      g.out[i] = in[i] / s + (in[i] % s != 0);  // ceil(in / s) without in + s - 1
      const int64_t total = std::max<int64_t>(0, sub(ctx, add(ctx, mul(ctx, g.out[i] - 1, s), dk), in[i]));
      const int64_t small = total / 2;
      g.pad_b[i] = a.auto_pad == "SAME_UPPER" ? small : total - small;
      g.pad_e[i] = total - g.pad_b[i];
      continue;
    }
    const int64_t span = in[i] + g.pad_b[i] + g.pad_e[i] - dk;
    if (span < 0)
      ctx.fail("window of extent ", dk, " is larger than the padded input (", in[i] + g.pad_b[i] + g.pad_e[i],
               ") along spatial dim ", i, ": the output would be empty");
    g.out[i] = span / s + (a.ceil_mode && span % s != 0) + 1;
    // ceil_mode: a last window that starts inside the end padding is dropped (as in PyTorch); a
    // start past int64 is past the input too.
    int64_t last_start;
    if (a.ceil_mode && (__builtin_mul_overflow(g.out[i] - 1, s, &last_start) || last_start >= in[i] + g.pad_b[i]))
      --g.out[i];
  }
  return g;
}

WindowGeom transposed_geometry(const PrepareContext& ctx, const WindowAttrs& a, const Shape& in, const Shape& kernel,
                               const std::vector<int64_t>& output_padding, std::vector<int64_t> output_shape) {
  WindowGeom g;
  common(ctx, a, in, kernel, &g);
  const size_t nd = g.nd;
  if (!output_padding.empty()) {
    if (output_padding.size() != nd)
      ctx.fail("output_padding has ", output_padding.size(), " values for ", nd, " spatial dims");
    g.out_pad = output_padding;
    for (size_t i = 0; i < nd; ++i)
      if (g.out_pad[i] < 0 || (g.out_pad[i] >= g.stride[i] && g.out_pad[i] >= g.dilation[i]))
        ctx.fail("output_padding ", g.out_pad[i], " must be smaller than the stride or the dilation");
  }
  if (output_shape.size() == nd + 2) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  if (!output_shape.empty() && output_shape.size() != nd)
    ctx.fail("output_shape has ", output_shape.size(), " values for ", nd, " spatial dims");
  const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  g.out.resize(nd);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t full = add(ctx, add(ctx, mul(ctx, g.stride[i], in[i] - 1), g.out_pad[i]), g.extent(i));
    if (!output_shape.empty() || same) {
      const int64_t want = !output_shape.empty() ? output_shape[i] : mul(ctx, in[i], g.stride[i]);
      if (want < 0) ctx.fail("output_shape ", want, " is negative along spatial dim ", i);
      // A negative total extends the output past the full result (zeros there); halves round down
      // as in the ONNX reference, so the extra unit lands at the end.
      const int64_t total = sub(ctx, full, want);
      const int64_t half = total >= 0 ? total / 2 : -(sub(ctx, 1, total) / 2);
      g.pad_b[i] = a.auto_pad == "SAME_UPPER" ? half : total - half;
      g.pad_e[i] = total - g.pad_b[i];
    }
    g.out[i] = sub(ctx, sub(ctx, full, g.pad_b[i]), g.pad_e[i]);
    if (g.out[i] <= 0) ctx.fail("pads leave an empty output along spatial dim ", i);
  }
  return g;
}

DType float_inputs(const PrepareContext& ctx) {
  const DType dt = ctx.input_dtype(0);
  require_float(ctx, dt);
  check_same_dtype(ctx, 1, ctx.num_inputs());
  return dt;
}

void ConvActivation::read(const KernelInfo& info, bool blocked) {
  const std::string name = info.attr_string("activation", "");
  const std::vector<float> params = info.attr_floats("activation_params", {});
  static const std::vector<std::tuple<const char*, Kind, size_t>> known = {
      {"", Kind::kNone, 0},         {"Relu", Kind::kRelu, 0}, {"LeakyRelu", Kind::kLeakyRelu, 1},
      {"Clip", Kind::kClip, 2},     {"Sigmoid", Kind::kSigmoid, 0}, {"Tanh", Kind::kTanh, 0},
      {"HardSigmoid", Kind::kHardSigmoid, 2}};
  if (blocked && (name == "SiLU" || name == "HardSwish")) {
    if (!params.empty()) info.fail("activation '", name, "' takes 0 activation_params, got ", params.size());
    kind = name == "SiLU" ? Kind::kSiLU : Kind::kHardSwish;
    return;
  }
  for (const auto& [n, k, count] : known) {
    if (name != n) continue;
    if (params.size() != count)
      info.fail("activation '", name, "' takes ", count, " activation_params, got ", params.size());
    kind = k;
    if (count > 0) alpha = params[0];
    if (count > 1) beta = params[1];
    if (k == Kind::kClip && !(alpha <= beta)) info.fail("Clip's activation_params min ", alpha, " > max ", beta);
    return;
  }
  throw_error<NotImplemented>(info.node().describe(), ": activation '", name,
                              "' is not implemented (Relu, LeakyRelu, Clip, Sigmoid, Tanh, HardSigmoid)");
}

void ConvShape::read(const KernelInfo& info, bool t) {
  transposed = t;
  attrs.read(info);
  group = info.attr_int("group", 1);
  if (group < 1) info.fail("group must be positive, got ", group);
  if (t) {
    output_padding = info.attr_ints("output_padding", {});
    output_shape = info.attr_ints("output_shape", {});
  }
}

void ConvShape::resolve(const PrepareContext& ctx, const Shape& x, const Shape& w) {
  if (x.size() < 3) ctx.fail("X must be [N, C, spatial...], got ", shape_to_string(x));
  if (w.size() != x.size()) ctx.fail("W ", shape_to_string(w), " and X ", shape_to_string(x), " differ in rank");
  const size_t nd = x.size() - 2;
  if (nd > 14) ctx.fail("too many spatial dims (", nd, ")");
  const Shape in(x.begin() + 2, x.end()), kernel(w.begin() + 2, w.end());
  if (!attrs.kernel.empty() && attrs.kernel != kernel)
    ctx.fail("kernel_shape ", shape_to_string(attrs.kernel), " does not match W ", shape_to_string(w));
  N = x[0], C = x[1];
  if (C % group != 0) ctx.fail("group ", group, " does not divide the ", C, " input channels");
  int64_t w1_groups;  // W's channels times group: C (forward) or M (transposed)
  if (__builtin_mul_overflow(w[1], group, &w1_groups))
    ctx.fail("W ", shape_to_string(w), " with group ", group, " overflows int64 channels");
  if (!transposed) {
    M = w[0];
    if (w1_groups != C)
      ctx.fail("W ", shape_to_string(w), " expects ", w1_groups, " input channels (group ", group, "), X has ", C);
    if (M % group != 0) ctx.fail("group ", group, " does not divide the ", M, " output channels");
    g = forward_geometry(ctx, attrs, in, kernel);
  } else {
    if (w[0] != C) ctx.fail("W ", shape_to_string(w), " expects ", w[0], " input channels, X has ", C);
    M = w1_groups;
    g = transposed_geometry(ctx, attrs, in, kernel, output_padding, output_shape);
  }
  y = {N, M};
  y.insert(y.end(), g.out.begin(), g.out.end());
  // Dims of 2^62 are legal beside a zero one (no elements), but their products must fit int64
  // (a UBSan report in the structured fuzz target).
  int64_t y_numel, w_numel;
  if (!checked_numel(kernel, &kk) || !checked_numel(g.in, &pin) || !checked_numel(g.out, &pout) ||
      !checked_numel(y, &y_numel) || !checked_numel(w, &w_numel))
    ctx.fail("sizes overflow int64: X ", shape_to_string(x), ", W ", shape_to_string(w), ", Y ", shape_to_string(y));
}

void check_conv_bias(const PrepareContext& ctx, const ConvShape& p) {
  if (ctx.has_input(2) && (ctx.input_rank(2) != 1 || ctx.input_shape(2)[0] != p.M))
    ctx.fail("B ", shape_to_string(ctx.input_shape(2)), " must be [", p.M, "]");
}

DType conv_grad_inputs(const PrepareContext& ctx) {
  if (ctx.num_inputs() != 3 || !ctx.has_input(1) || !ctx.has_input(2)) ctx.fail("expects the inputs (dY, X, W)");
  return float_inputs(ctx);
}

void check_conv_grad_dy(const PrepareContext& ctx, const ConvShape& p) {
  if (ctx.input_shape(0) != p.y)
    ctx.fail("dY ", shape_to_string(ctx.input_shape(0)), " does not match the output shape ", shape_to_string(p.y));
}

void PoolShape::read(const KernelInfo& info, PoolKind k, bool glob, bool grad) {
  kind = k, global = glob;
  if (!global) {
    attrs.read(info);
    if (attrs.kernel.empty()) info.fail("kernel_shape is required");
  }
  include_pad = info.attr_int("count_include_pad", 0) != 0;
  col_major = info.attr_int("storage_order", 0) != 0;
  if (kind == PoolKind::kLp)
    p = grad || info.opset() < 2 ? double(info.attr_float("p", 2.f)) : double(info.attr_int("p", 2));
  if (kind == PoolKind::kLp && !(p > 0)) info.fail("p must be positive, got ", p);
}

void PoolShape::resolve(const PrepareContext& ctx, const Shape& x) {
  if (x.size() < 3) ctx.fail("X must be [N, C, spatial...], got ", shape_to_string(x));
  const size_t nd = x.size() - 2;
  if (nd > 14) ctx.fail("too many spatial dims (", nd, ")");
  const Shape in(x.begin() + 2, x.end());
  if (global) {
    WindowAttrs whole;
    whole.kernel = in;
    for (int64_t d : in)
      if (d == 0) ctx.fail("global pooling over an empty spatial dim: ", shape_to_string(x));
    g = forward_geometry(ctx, whole, in, in);
  } else {
    if (attrs.kernel.size() != nd) ctx.fail("kernel_shape has ", attrs.kernel.size(), " values for ", nd, " spatial dims");
    g = forward_geometry(ctx, attrs, in, attrs.kernel);
  }
  planes = x[0] * x[1];
  y = {x[0], x[1]};
  y.insert(y.end(), g.out.begin(), g.out.end());
}

bool pool_wants_indices(const PrepareContext& ctx, const PoolShape& p) {
  const bool want = ctx.num_outputs() > 1 && ctx.has_output(1);
  if (want && (p.kind != PoolKind::kMax || ctx.opset() < 8)) ctx.fail("only MaxPool (opset 8+) has an Indices output");
  return want;
}

bool pool_grad_inputs(const PrepareContext& ctx, PoolShape& p, DType dt) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(1)) ctx.fail("expects the inputs (dY, X, ...)");
  if (ctx.input_dtype(1) != dt) ctx.fail("X has element type ", dtype_name(ctx.input_dtype(1)), ", dY ", dtype_name(dt));
  p.resolve(ctx, ctx.input_shape(1));
  if (ctx.input_shape(0) != p.y)
    ctx.fail("dY ", shape_to_string(ctx.input_shape(0)), " does not match the output shape ", shape_to_string(p.y));
  const bool third = ctx.has_input(2);
  if (p.kind == PoolKind::kLp && !third) ctx.fail("LpPoolGrad needs the forward output Y as input 2");
  if (third) {
    const DType want = p.kind == PoolKind::kMax ? DType::kInt64 : dt;
    if (p.kind == PoolKind::kAvg) ctx.fail("AveragePoolGrad takes 2 inputs");
    if (p.kind == PoolKind::kMax && p.col_major) ctx.fail("Indices must be row-major (storage_order 0)");
    if (ctx.input_dtype(2) != want || ctx.input_shape(2) != p.y)
      ctx.fail("input 2 must be ", dtype_name(want), " ", shape_to_string(p.y), ", got ", dtype_name(ctx.input_dtype(2)),
               " ", shape_to_string(ctx.input_shape(2)));
  }
  return third;
}

}  // namespace onnxtrain::kernels::shape
