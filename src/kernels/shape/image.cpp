#include "kernels/shape/image.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

namespace onnxtrain::kernels::shape {

namespace {

template <class E>
E parse_enum(const KernelInfo& info, const char* attr, const std::string& dflt,
             std::initializer_list<std::pair<const char*, E>> names) {
  const std::string v = info.attr_string(attr, dflt);
  for (const auto& [n, e] : names)
    if (v == n) return e;
  info.fail(attr, " '", v, "' is not supported");
}

/// Builds the taps of one axis. `scale` maps output to input coordinates; `length` is the
/// resized length the formulas use (scale * in, as the ONNX reference does; the size when given);
/// roi_start/roi_end only for tf_crop_and_resize.
ResizeAxis build_axis(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double length, double roi_start,
                      double roi_end) {
  ResizeAxis t;
  t.in = in;
  t.out = out;
  t.K = a.mode == ResizeMode::kNearest ? 1 : a.mode == ResizeMode::kLinear ? 2 : 4;
  t.idx.resize(size_t(out * t.K));
  t.w.resize(size_t(out * t.K));
  t.outside.assign(size_t(out), 0);
  for (int64_t y = 0; y < out; ++y) {
    const double yd = double(y);
    double x = 0;
    switch (a.coord) {
      case ResizeCoord::kHalfPixel: x = (yd + 0.5) / scale - 0.5; break;
      case ResizeCoord::kPytorchHalfPixel: x = length > 1 ? (yd + 0.5) / scale - 0.5 : 0.0; break;
      case ResizeCoord::kAlignCorners: x = length == 1 ? 0.0 : yd * double(in - 1) / (length - 1); break;
      case ResizeCoord::kAsymmetric: x = yd / scale; break;
      case ResizeCoord::kTfHalfPixelForNN: x = (yd + 0.5) / scale; break;
      case ResizeCoord::kTfCropAndResize:
        x = length == 1 ? (roi_end - roi_start) * double(in - 1) / 2
                        : yd * (roi_end - roi_start) * double(in - 1) / (length - 1);
        x += roi_start * double(in - 1);
        if (x < 0 || x > double(in - 1)) {
          t.outside[size_t(y)] = 1;
          t.any_outside = true;
        }
        break;
    }
    const double i0 = std::ceil(x) - 1;  // left neighbour; r in (0, 1]
    const double r = x - i0;
    int64_t* ix = &t.idx[size_t(y * t.K)];
    double* w = &t.w[size_t(y * t.K)];
    auto clamp = [&](double v) { return int64_t(std::min(std::max(v, 0.0), double(in - 1))); };
    if (a.mode == ResizeMode::kNearest) {
      bool up = false;  // take i0 + 1
      switch (a.rounding) {
        case ResizeRounding::kRoundPreferFloor: up = r > 0.5; break;
        case ResizeRounding::kRoundPreferCeil: up = r >= 0.5; break;
        case ResizeRounding::kFloor: up = r == 1.0; break;
        case ResizeRounding::kCeil: up = true; break;
        case ResizeRounding::kOpset10: up = scale < 1 || r == 1.0; break;  // ceil when downsampling, else floor
      }
      ix[0] = clamp(up ? i0 + 1 : i0);
      w[0] = 1;
      continue;
    }
    double c[4];
    int first;  // tap k addresses i0 + first + k
    if (a.mode == ResizeMode::kLinear) {
      c[0] = 1 - r;
      c[1] = r;
      first = 0;
    } else {
      const double A = a.cubic_a, s = r + 1, u = 1 - r, v = 2 - r;
      c[0] = ((A * s - 5 * A) * s + 8 * A) * s - 4 * A;
      c[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
      c[2] = ((A + 2) * u - (A + 3)) * u * u + 1;
      c[3] = ((A * v - 5 * A) * v + 8 * A) * v - 4 * A;
      first = -1;
    }
    if (a.exclude_outside) {
      double sum = 0;
      for (int k = 0; k < t.K; ++k) {
        const double p = i0 + first + k;
        if (p < 0 || p > double(in - 1)) c[k] = 0;
        sum += c[k];
      }
      if (sum != 0)
        for (int k = 0; k < t.K; ++k) c[k] /= sum;
    }
    for (int k = 0; k < t.K; ++k) {
      ix[k] = clamp(i0 + first + k);
      w[k] = c[k];
    }
  }
  t.compress();
  return t;
}

}  // namespace

bool ResizeAxis::identity() const {
  if (K != 1 || in != out || any_outside) return false;
  for (int64_t y = 0; y < out; ++y)
    if (idx[size_t(y)] != y) return false;
  return true;
}

void ResizeAxis::compress() {
  if (K == 1) return;
  std::vector<int64_t> one(static_cast<size_t>(out));
  for (int64_t y = 0; y < out; ++y) {
    int hit = -1;
    for (int k = 0; k < K; ++k) {
      const double wk = w[size_t(y * K + k)];
      if (wk == 1.0 && hit < 0) hit = k;
      else if (wk != 0.0) return;
    }
    if (hit < 0) return;
    one[size_t(y)] = idx[size_t(y * K + hit)];
  }
  K = 1;
  idx = std::move(one);
  w.assign(size_t(out), 1.0);
}

ResizeAttrs read_resize_attrs(const KernelInfo& info, int64_t opset) {
  ResizeAttrs a;
  if (opset < 11) {
    a.mode = parse_enum<ResizeMode>(info, "mode", "nearest",
                                    {{"nearest", ResizeMode::kNearest}, {"linear", ResizeMode::kLinear}});
    a.coord = ResizeCoord::kAsymmetric;
    a.rounding = ResizeRounding::kOpset10;
    return a;
  }
  a.mode = parse_enum<ResizeMode>(
      info, "mode", "nearest",
      {{"nearest", ResizeMode::kNearest}, {"linear", ResizeMode::kLinear}, {"cubic", ResizeMode::kCubic}});
  a.coord = parse_enum<ResizeCoord>(info, "coordinate_transformation_mode", "half_pixel",
                                    {{"half_pixel", ResizeCoord::kHalfPixel},
                                     {"pytorch_half_pixel", ResizeCoord::kPytorchHalfPixel},
                                     {"align_corners", ResizeCoord::kAlignCorners},
                                     {"asymmetric", ResizeCoord::kAsymmetric},
                                     {"tf_half_pixel_for_nn", ResizeCoord::kTfHalfPixelForNN},
                                     {"tf_crop_and_resize", ResizeCoord::kTfCropAndResize}});
  a.rounding = parse_enum<ResizeRounding>(info, "nearest_mode", "round_prefer_floor",
                                          {{"round_prefer_floor", ResizeRounding::kRoundPreferFloor},
                                           {"round_prefer_ceil", ResizeRounding::kRoundPreferCeil},
                                           {"floor", ResizeRounding::kFloor},
                                           {"ceil", ResizeRounding::kCeil}});
  a.cubic_a = info.attr_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = info.attr_int("exclude_outside", 0) != 0;
  a.extrapolation = info.attr_float("extrapolation_value", 0.0f);
  for (const char* later : {"antialias", "axes", "keep_aspect_ratio_policy"})
    if (info.has_attr(later))
      throw_error<NotImplemented>(info.node().describe(), ": Resize attribute '", later, "' (opset 18) is not supported");
  return a;
}

bool resize_tables(const PrepareContext& ctx, int64_t opset, const ResizeAttrs& a, const Shape& xs, Shape* out,
                   std::vector<ResizeAxis>* tables) {
  const size_t rank = xs.size();
  if (rank > kResizeMaxRank) ctx.fail("rank ", rank, " exceeds ", kResizeMaxRank);
  const size_t scales_in = opset < 11 ? 1 : 2;
  const bool crop = a.coord == ResizeCoord::kTfCropAndResize;
  for (size_t i : {scales_in, size_t(3), size_t(crop ? 1 : 0)})
    if (i != 0 && (opset >= 11 || i == scales_in) && ctx.has_input(i) && !ctx.input_value(i)) return false;
  auto nonempty = [&](size_t i) { return ctx.has_input(i) && ctx.input_value(i)->numel() > 0; };
  const bool use_sizes = opset >= 11 && nonempty(3);
  if (use_sizes && nonempty(scales_in)) ctx.fail("only one of 'scales' and 'sizes' may be given");
  if (!use_sizes && !nonempty(scales_in)) ctx.fail("one of 'scales' and 'sizes' must be given");

  std::vector<double> roi(2 * rank, 0.0);
  for (size_t d = 0; d < rank; ++d) roi[rank + d] = 1.0;
  if (crop) {
    if (!nonempty(1)) ctx.fail("tf_crop_and_resize needs 'roi'");
    const Tensor& rt = *ctx.input_value(1);
    if (rt.numel() != int64_t(2 * rank)) ctx.fail("roi has ", rt.numel(), " values, expected ", 2 * rank);
    auto read = [&]<class R>() {
      for (size_t i = 0; i < 2 * rank; ++i) roi[i] = double(rt.data<R>()[i]);
    };
    switch (rt.dtype()) {
      case DType::kFloat32: read.template operator()<float>(); break;
      case DType::kFloat64: read.template operator()<double>(); break;
      case DType::kFloat16: read.template operator()<float16>(); break;
      case DType::kBFloat16: read.template operator()<bfloat16>(); break;
      default:
        throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(rt.dtype()),
                                    " is not supported");
    }
    for (size_t i = 0; i < 2 * rank; ++i)
      if (!std::isfinite(roi[i]) || std::abs(roi[i]) > 1e6) ctx.fail("roi value ", roi[i], " at position ", i, " must be finite (|roi| <= 1e6)");
  }

  Shape& ys = *out;
  ys.assign(rank, 0);
  std::vector<double> scale(rank), length(rank);
  if (use_sizes) {
    const Tensor& st = *ctx.input_value(3);
    if (st.dtype() != DType::kInt64) ctx.fail("sizes must be int64, got ", st.describe());
    if (st.numel() != int64_t(rank)) ctx.fail("sizes has ", st.numel(), " values for a rank-", rank, " input");
    for (size_t d = 0; d < rank; ++d) {
      ys[d] = st.data<int64_t>()[d];
      if (ys[d] < 0) ctx.fail("sizes ", shape_to_string(read_int_list(st)), " has a negative size");
      scale[d] = xs[d] ? double(ys[d]) / double(xs[d]) : 1.0;
      length[d] = double(ys[d]);
    }
  } else {
    const Tensor& st = *ctx.input_value(scales_in);
    if (st.dtype() != DType::kFloat32) ctx.fail("scales must be float, got ", st.describe());
    if (st.numel() != int64_t(rank)) ctx.fail("scales has ", st.numel(), " values for a rank-", rank, " input");
    for (size_t d = 0; d < rank; ++d) {
      const double s = st.data<float>()[d];
      if (!(s > 0) || !std::isfinite(s)) ctx.fail("scale ", s, " on axis ", d, " must be positive");
      length[d] = double(xs[d]) * (crop ? roi[rank + d] - roi[d] : 1.0) * s;
      if (!(length[d] < 9.0e18) || length[d] < 0) ctx.fail("scale ", s, " on axis ", d, " is too large");
      ys[d] = int64_t(std::floor(length[d]));
      scale[d] = s;
    }
  }
  for (size_t d = 0; d < rank; ++d)
    if (xs[d] == 0 && ys[d] > 0) ctx.fail("cannot resize an empty axis ", d, " to ", ys[d]);
  for (size_t d = 0; d < rank; ++d) check_table_size(ctx, ys[d], 4 * 16 + 1, "the resize table of an axis");
  tables->assign(rank, {});
  for (size_t d = 0; d < rank; ++d) (*tables)[d] = build_axis(a, xs[d], ys[d], scale[d], length[d], roi[d], roi[rank + d]);
  return true;
}

SpaceDepthAttrs read_space_depth_attrs(const KernelInfo& info, bool to_space) {
  SpaceDepthAttrs a;
  a.to_space = to_space;
  a.blocksize = info.attr_int("blocksize");
  if (a.blocksize < 1) info.fail("blocksize ", a.blocksize, " must be positive");
  if (to_space) {
    const std::string m = info.attr_string("mode", "DCR");
    if (m != "DCR" && m != "CRD") info.fail("mode '", m, "' must be DCR or CRD");
    a.crd = m == "CRD";
  }
  return a;
}

SpaceDepthGeom space_depth_geometry(const PrepareContext& ctx, const SpaceDepthAttrs& a) {
  const Shape& xs = ctx.input_shape(0);
  if (xs.size() != 4) ctx.fail("input must be 4-D [N, C, H, W], got ", shape_to_string(xs));
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], b = a.blocksize;
  // Products in checked int64: a blocksize of 2^32 or more overflows blocksize^2 and H * b.
  auto mul = [&](int64_t p, int64_t q) {
    int64_t r = 0;
    if (__builtin_mul_overflow(p, q, &r))
      ctx.fail("blocksize ", b, " with input ", shape_to_string(xs), " overflows int64 (", p, " * ", q, ")");
    return r;
  };
  const int64_t bb = mul(b, b), hw = mul(H, W);
  SpaceDepthGeom g;
  if (a.to_space) {
    if (C % bb != 0) ctx.fail("channels ", C, " are not divisible by blocksize^2 = ", bb);
    const int64_t c = C / bb;
    g.output = {N, c, mul(H, b), mul(W, b)};
    // Y viewed as [N, c, H, b(i), W, b(j)]; X as [N, C, H, W] with channel (i*b + j)*c + ch (DCR)
    // or ch*b*b + i*b + j (CRD).
    g.dims = {N, c, H, b, W, b};
    g.strides = {mul(C, hw), mul(a.crd ? bb : 1, hw), W, mul(a.crd ? b : mul(b, c), hw), 1, mul(a.crd ? 1 : c, hw)};
  } else {
    if (H % b != 0 || W % b != 0) ctx.fail("spatial size ", H, "x", W, " is not divisible by blocksize ", b);
    const int64_t h = H / b, w = W / b;
    g.output = {N, mul(C, bb), h, w};
    // Y viewed as [N, b(i), b(j), C, h, w]; X[n, ch, y*b + i, x*b + j].
    g.dims = {N, b, b, C, h, w};
    g.strides = {mul(C, hw), W, 1, hw, mul(b, W), b};
  }
  check_output_size(ctx, g.output, ctx.input_dtype(0));
  return g;
}

}  // namespace onnxtrain::kernels::shape
