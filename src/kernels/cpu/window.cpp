#include "kernels/cpu/window.h"

#include <algorithm>

namespace onnxtrain::kernels::cpu {

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

// Fills nd, in, kernel, stride, dilation and the explicit pads of g (checking attribute lengths).
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
  for (size_t i = 0; i < nd; ++i)
    if (kernel[i] <= 0) ctx.fail("kernel size must be positive, got ", shape_to_string(kernel));
}

}  // namespace

WindowGeom forward_geometry(const PrepareContext& ctx, const WindowAttrs& a, const Shape& in, const Shape& kernel) {
  WindowGeom g;
  common(ctx, a, in, kernel, &g);
  g.out.resize(g.nd);
  for (size_t i = 0; i < g.nd; ++i) {
    const int64_t dk = g.extent(i), s = g.stride[i];
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      g.out[i] = (in[i] + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * s + dk - in[i]);
      const int64_t small = total / 2;
      g.pad_b[i] = a.auto_pad == "SAME_UPPER" ? small : total - small;
      g.pad_e[i] = total - g.pad_b[i];
      continue;
    }
    const int64_t span = in[i] + g.pad_b[i] + g.pad_e[i] - dk;
    if (span < 0)
      ctx.fail("window of extent ", dk, " is larger than the padded input (", in[i] + g.pad_b[i] + g.pad_e[i],
               ") along spatial dim ", i, ": the output would be empty");
    g.out[i] = (a.ceil_mode ? (span + s - 1) / s : span / s) + 1;
    // ceil_mode: a last window that starts inside the end padding is dropped (as in PyTorch).
    if (a.ceil_mode && (g.out[i] - 1) * s >= in[i] + g.pad_b[i]) --g.out[i];
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
    const int64_t full = g.stride[i] * (in[i] - 1) + g.out_pad[i] + g.extent(i);
    if (!output_shape.empty() || same) {
      const int64_t want = !output_shape.empty() ? output_shape[i] : in[i] * g.stride[i];
      // A negative total extends the output past the full result (zeros there); halves round down
      // as in the ONNX reference, so the extra unit lands at the end.
      const int64_t total = full - want;
      const int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
      g.pad_b[i] = a.auto_pad == "SAME_UPPER" ? half : total - half;
      g.pad_e[i] = total - g.pad_b[i];
    }
    g.out[i] = full - g.pad_b[i] - g.pad_e[i];
    if (g.out[i] <= 0) ctx.fail("pads leave an empty output along spatial dim ", i);
  }
  return g;
}

}  // namespace onnxtrain::kernels::cpu
