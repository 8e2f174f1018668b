#include "kernels/shape/window.h"

#include <algorithm>

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

}  // namespace onnxtrain::kernels::shape
