// Image operators: Resize (nearest / n-linear / n-cubic), DepthToSpace, SpaceToDepth.
//   Resize:  Y[y] = sum over taps t of prod_d w_d(y_d, t_d) * X[idx_d(y_d, t_d)]   Y: sizes, or floor(X * scales)
//            per axis d, the output coordinate y_d maps to x = f(y_d) in X (coordinate_transformation_mode);
//            with i0 = ceil(x) - 1 and r = x - i0 in (0, 1] the taps are
//              nearest: one of {i0, i0 + 1} (nearest_mode), linear: {i0: 1 - r, i0 + 1: r},
//              cubic: i0 - 1 .. i0 + 2 with Keys' coefficients (cubic_coeff_a);
//            taps outside X take the edge value (or weight 0 with exclude_outside, renormalized);
//            tf_crop_and_resize: x outside [0, len - 1] on any axis gives extrapolation_value.
//            This is the ONNX reference (onnx/backend/test/case/node/resize.py) made separable.
//   DepthToSpace (DCR): Y[n, c, h*b + i, w*b + j] = X[n, (i*b + j)*C' + c, h, w]   Y: [N, C/b^2, H*b, W*b]
//                (CRD): Y[n, c, h*b + i, w*b + j] = X[n, c*b*b + i*b + j, h, w]
//   SpaceToDepth:       Y[n, (i*b + j)*C + c, h, w] = X[n, c, h*b + i, w*b + j]    Y: [N, C*b^2, H/b, W/b]
//   ResizeGrad (com.onnxtrain): dX[idx_d(y_d, t_d)...] += prod_d w_d(y_d, t_d) * dY[y], axis by axis
#include <array>
#include <cstring>
#include <limits>

#include "kernels/cpu/backward.h"
#include "kernels/cpu/common.h"
#include "kernels/registry.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

/// Converts an accumulated value to the element type (integers round and saturate).
template <class T, class A>
inline T to_elem(A v) {
  if constexpr (std::is_integral_v<T>) {
    v = std::nearbyint(v);
    if (!(v >= A(std::numeric_limits<T>::min()))) return std::numeric_limits<T>::min();  // NaN too
    if (v >= A(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

// Accumulation type: float for small types, double for double and wide integers.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double> || (std::is_integral_v<T> && sizeof(T) >= 4), double, float>;

// ================================================================ Resize
constexpr size_t kMaxRank = 64;
enum class Mode { kNearest, kLinear, kCubic };
enum class Coord { kHalfPixel, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfHalfPixelForNN, kTfCropAndResize };
enum class Rounding { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kOpset10 };

template <class E>
E parse_enum(const KernelInfo& info, const char* attr, const std::string& dflt,
             std::initializer_list<std::pair<const char*, E>> names) {
  const std::string v = info.attr_string(attr, dflt);
  for (const auto& [n, e] : names)
    if (v == n) return e;
  info.fail(attr, " '", v, "' is not supported");
}

/// One axis of a resize: for each output coordinate, K taps (input coordinate, weight) and
/// whether the coordinate falls outside the crop (tf_crop_and_resize).
struct AxisTable {
  int64_t in = 0, out = 0;
  int K = 1;
  std::vector<int64_t> idx;      // [out * K], clamped to [0, in)
  std::vector<double> w;         // [out * K]
  std::vector<uint8_t> outside;  // [out]
  bool any_outside = false;

  bool identity() const {
    if (K != 1 || in != out || any_outside) return false;
    for (int64_t y = 0; y < out; ++y)
      if (idx[size_t(y)] != y) return false;
    return true;
  }
  /// Drops taps of weight 0 when every output coordinate has exactly one tap of weight 1.
  void compress() {
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
};

struct ResizeAttrs {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kHalfPixel;
  Rounding rounding = Rounding::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
};

/// Builds the taps of one axis. `scale` maps output to input coordinates; `length` is the
/// resized length the formulas use (scale * in, as the ONNX reference does; the size when given);
/// roi_start/roi_end only for tf_crop_and_resize.
AxisTable build_axis(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double length, double roi_start,
                     double roi_end) {
  AxisTable t;
  t.in = in;
  t.out = out;
  t.K = a.mode == Mode::kNearest ? 1 : a.mode == Mode::kLinear ? 2 : 4;
  t.idx.resize(size_t(out * t.K));
  t.w.resize(size_t(out * t.K));
  t.outside.assign(size_t(out), 0);
  for (int64_t y = 0; y < out; ++y) {
    const double yd = double(y);
    double x = 0;
    switch (a.coord) {
      case Coord::kHalfPixel: x = (yd + 0.5) / scale - 0.5; break;
      case Coord::kPytorchHalfPixel: x = length > 1 ? (yd + 0.5) / scale - 0.5 : 0.0; break;
      case Coord::kAlignCorners: x = length == 1 ? 0.0 : yd * double(in - 1) / (length - 1); break;
      case Coord::kAsymmetric: x = yd / scale; break;
      case Coord::kTfHalfPixelForNN: x = (yd + 0.5) / scale; break;
      case Coord::kTfCropAndResize:
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
    if (a.mode == Mode::kNearest) {
      bool up = false;  // take i0 + 1
      switch (a.rounding) {
        case Rounding::kRoundPreferFloor: up = r > 0.5; break;
        case Rounding::kRoundPreferCeil: up = r >= 0.5; break;
        case Rounding::kFloor: up = r == 1.0; break;
        case Rounding::kCeil: up = true; break;
        case Rounding::kOpset10: up = scale < 1 || r == 1.0; break;  // ceil when downsampling, else floor
      }
      ix[0] = clamp(up ? i0 + 1 : i0);
      w[0] = 1;
      continue;
    }
    double c[4];
    int first;  // tap k addresses i0 + first + k
    if (a.mode == Mode::kLinear) {
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

/// Per-plan precomputation: the active block of axes [first, last], taps per axis as element
/// offsets into X, weights in the accumulation type.
struct ResizePlan {
  int64_t outer = 1, inner = 1;  // identity axes before / after the active block
  int64_t in_block = 0, out_block = 0;  // elements of X / Y per outer index
  std::vector<AxisTable> axes;   // active axes only
  std::vector<std::vector<int64_t>> off;  // per active axis: idx * stride in X, [out * K]
  std::vector<std::vector<float>> wf;
  std::vector<std::vector<double>> wd;
  int64_t rows = 0;     // outer * prod(out of active axes but the last)
  int64_t combos = 1;   // prod K of active axes but the last
  bool gather = true;   // every active axis has one tap: pure data movement
  bool any_outside = false;
  int64_t cache_slots = 0;   // inner == 1 interpolation: rows of the last axis cached per thread
  size_t cache_bytes = 0;    // scratch per thread
};

ResizeAttrs read_resize_attrs(const KernelInfo& info, int64_t opset) {
  ResizeAttrs a;
  if (opset < 11) {
    a.mode = parse_enum<Mode>(info, "mode", "nearest", {{"nearest", Mode::kNearest}, {"linear", Mode::kLinear}});
    a.coord = Coord::kAsymmetric;
    a.rounding = Rounding::kOpset10;
    return a;
  }
  a.mode = parse_enum<Mode>(info, "mode", "nearest",
                            {{"nearest", Mode::kNearest}, {"linear", Mode::kLinear}, {"cubic", Mode::kCubic}});
  a.coord = parse_enum<Coord>(info, "coordinate_transformation_mode", "half_pixel",
                              {{"half_pixel", Coord::kHalfPixel},
                               {"pytorch_half_pixel", Coord::kPytorchHalfPixel},
                               {"align_corners", Coord::kAlignCorners},
                               {"asymmetric", Coord::kAsymmetric},
                               {"tf_half_pixel_for_nn", Coord::kTfHalfPixelForNN},
                               {"tf_crop_and_resize", Coord::kTfCropAndResize}});
  a.rounding = parse_enum<Rounding>(info, "nearest_mode", "round_prefer_floor",
                                    {{"round_prefer_floor", Rounding::kRoundPreferFloor},
                                     {"round_prefer_ceil", Rounding::kRoundPreferCeil},
                                     {"floor", Rounding::kFloor},
                                     {"ceil", Rounding::kCeil}});
  a.cubic_a = info.attr_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = info.attr_int("exclude_outside", 0) != 0;
  a.extrapolation = info.attr_float("extrapolation_value", 0.0f);
  for (const char* later : {"antialias", "axes", "keep_aspect_ratio_policy"})
    if (info.has_attr(later))
      throw_error<NotImplemented>(info.node().describe(), ": Resize attribute '", later, "' (opset 18) is not supported");
  return a;
}

/// Output shape and per-axis taps of Resize(X of shape xs), reading roi, scales and sizes at the
/// forward's input positions (opset 10: scales = 1; 11+: roi = 1, scales = 2, sizes = 3). False
/// when a value that decides them is unknown now (prepare runs again at run time).
bool resize_tables(const PrepareContext& ctx, int64_t opset, const ResizeAttrs& a, const Shape& xs, Shape* out,
                   std::vector<AxisTable>* tables) {
  const size_t rank = xs.size();
  if (rank > kMaxRank) ctx.fail("rank ", rank, " exceeds ", kMaxRank);
  const size_t scales_in = opset < 11 ? 1 : 2;
  const bool crop = a.coord == Coord::kTfCropAndResize;
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
    dispatch<FloatTypes>(rt.dtype(), ctx.node(), [&]<class R>() {
      for (size_t i = 0; i < 2 * rank; ++i) roi[i] = double(rt.data<R>()[i]);
    });
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

class ResizeKernel final : public Kernel {
 public:
  static constexpr int64_t kMaxTapsPerValue = 4096;
  explicit ResizeKernel(const KernelInfo& info) : opset_(info.opset()), a_(read_resize_attrs(info, info.opset())) {}

  void prepare(PrepareContext& ctx) override {
    const Shape& xs = ctx.input_shape(0);
    const size_t rank = xs.size();
    const DType dt = ctx.input_dtype(0);
    if (a_.mode != Mode::kNearest) dispatch<NumericTypes>(dt, ctx.node(), [&]<class T>() {});
    Shape ys;
    std::vector<AxisTable> tables;
    if (!resize_tables(ctx, opset_, a_, xs, &ys, &tables)) {
      ctx.set_output_dynamic(0, dt);
      return;
    }
    check_output_size(ctx, ys, dt);

    // Identity axes at both ends fold into outer / inner.
    size_t first = 0, last = rank;
    while (first < rank && tables[first].identity()) ++first;
    while (last > first && tables[last - 1].identity()) --last;
    p_ = ResizePlan();
    p_.outer = dim_product(xs, 0, first);
    p_.inner = dim_product(xs, last, rank);
    p_.in_block = dim_product(xs, first, rank);
    p_.out_block = dim_product(ys, first, rank);
    int64_t stride = p_.inner;
    p_.rows = p_.outer;
    for (size_t d = last; d-- > first;) {
      const AxisTable& t = tables[d];
      std::vector<int64_t> off(t.idx.size());
      for (size_t i = 0; i < off.size(); ++i) off[i] = t.idx[i] * stride;
      stride *= t.in;
      p_.off.insert(p_.off.begin(), std::move(off));
      p_.wd.insert(p_.wd.begin(), t.w);
      p_.wf.insert(p_.wf.begin(), std::vector<float>(t.w.begin(), t.w.end()));
      if (d + 1 != last) {
        p_.rows *= t.out;
        p_.combos = std::min(p_.combos * t.K, kMaxTapsPerValue + 1);  // saturated: checked below
      }
      p_.gather = p_.gather && t.K == 1;
      p_.any_outside = p_.any_outside || t.any_outside;
    }
    // Each output value combines the taps of every interpolated axis: 4^r for cubic over r axes.
    // Past 4096 (6 cubic or 12 linear axes; onnxruntime interpolates 2 or 3) a small tensor of
    // high rank would cost 4^r operations per value and 4^(r-1) scratch entries per thread.
    const int64_t taps = p_.combos * (last > first ? tables[last - 1].K : 1);
    if (taps > kMaxTapsPerValue)
      ctx.fail("interpolating more than ", kMaxTapsPerValue, " input values per output value (the product ",
               "of the taps of the interpolated axes) is not supported: use mode 'nearest' or fewer interpolated axes");
    p_.axes.assign(tables.begin() + long(first), tables.begin() + long(last));
    if (p_.any_outside && dt == DType::kString) ctx.fail("extrapolation needs a numeric element type");
    if (!p_.gather && p_.inner == 1 && !p_.axes.empty()) {
      // Each input row is interpolated along the last axis once per thread (it serves several
      // output rows), then output rows combine cached rows: slots rows + 1 accumulator row.
      const int64_t nx = p_.axes.back().out;
      p_.cache_slots = std::clamp<int64_t>(2 * p_.combos, 2, 8);
      // slots + 1 rows (padded to 8 elements), then tags and stamps; see RowCache.
      p_.cache_bytes = (size_t(p_.cache_slots + 1) * size_t(nx + 8) * sizeof(double) + size_t(p_.cache_slots) * 16 + 63) / 64 * 64;
      const int threads = std::max(hardware_threads(), ctx.options().num_threads);
      ctx.request_workspace(p_.cache_bytes * size_t(threads));
    }
    ctx.set_output(0, dt, ys);
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (p_.axes.empty()) {  // every axis is the identity
      y.copy_from(x);
      return;
    }
    if (p_.gather) {
      dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
        T fill{};
        if (p_.any_outside)
          dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class E>() {
            if constexpr (sizeof(E) == sizeof(T)) {  // the bits of the value as its element type
              const E e = to_elem<E>(a_.extrapolation);
              std::memcpy(static_cast<void*>(&fill), &e, sizeof(E));
            }
          });
        gather_rows<T>(static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), fill);
      });
      return;
    }
    dispatch<NumericTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      using A = acc_t<T>;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      const bool cached = p_.cache_slots > 0;
      switch (p_.axes.back().K) {
        case 1: cached ? cached_rows<T, A, 1>(ctx, src, dst) : interp_rows<T, A, 1>(src, dst); break;
        case 2: cached ? cached_rows<T, A, 2>(ctx, src, dst) : interp_rows<T, A, 2>(src, dst); break;
        default: cached ? cached_rows<T, A, 4>(ctx, src, dst) : interp_rows<T, A, 4>(src, dst); break;
      }
    });
  }

 private:
  /// Output row r = (outer o, coordinates yc of the active axes but the last), `row_len`
  /// contiguous elements of Y. In parallel chunks: state = init() per chunk, then
  /// body(state, o, yc, out) for every row; rows and columns outside the crop get `fill`.
  template <class T, class Init, class Body>
  void for_each_row(T* dst, T fill, Init&& init, Body&& body) const {
    const size_t m = p_.axes.size();
    const AxisTable& lt = p_.axes.back();
    const int64_t inner = p_.inner, row_len = lt.out * inner;
    parallel_for(p_.rows, grain_for(row_len), [&](int64_t r0, int64_t r1) {
      auto state = init();
      int64_t yc[kMaxRank];
      for (int64_t r = r0; r < r1; ++r) {
        T* out = dst + r * row_len;
        int64_t rem = r;
        bool inside = true;
        for (size_t k = m - 1; k-- > 0;) {
          const int64_t n = p_.axes[k].out;
          yc[k] = rem % n;
          rem /= n;
          inside = inside && !p_.axes[k].outside[size_t(yc[k])];
        }
        if (!inside) {
          std::fill(out, out + row_len, fill);
          continue;
        }
        body(state, rem, static_cast<const int64_t*>(yc), out);
        if (lt.any_outside)
          for (int64_t xq = 0; xq < lt.out; ++xq)
            if (lt.outside[size_t(xq)]) std::fill(out + xq * inner, out + (xq + 1) * inner, fill);
      }
    });
  }

  template <class T>
  void gather_rows(const T* src, T* dst, T fill) const {
    const size_t m = p_.axes.size();
    const int64_t nx = p_.axes.back().out, inner = p_.inner;
    const int64_t* xo = p_.off.back().data();
    for_each_row(dst, fill, [] { return 0; }, [&](int, int64_t o, const int64_t* yc, T* out) {
      int64_t base = o * p_.in_block;
      for (size_t k = 0; k + 1 < m; ++k) base += p_.off[k][size_t(yc[k])];
      const T* in = src + base;
      if (inner == 1) {
        for (int64_t xq = 0; xq < nx; ++xq) out[xq] = in[xo[xq]];
      } else {
        for (int64_t xq = 0; xq < nx; ++xq) std::copy_n(in + xo[xq], inner, out + xq * inner);
      }
    });
  }

  template <class A>
  const A* weights(size_t k) const {
    if constexpr (std::is_same_v<A, float>) return p_.wf[k].data();
    else return p_.wd[k].data();
  }

  /// The input rows feeding output row (o, yc): every tap combination of the leading active
  /// axes, as offsets into X (coff) and weights (cw), both p_.combos long. Returns their number.
  template <class A>
  int64_t row_taps(int64_t o, const int64_t* yc, int64_t* coff, A* cw) const {
    int64_t nc = 1;
    coff[0] = o * p_.in_block;
    cw[0] = A(1);
    for (size_t k = 0; k + 1 < p_.axes.size(); ++k) {
      const int K = p_.axes[k].K;
      const int64_t* ok = &p_.off[k][size_t(yc[k] * K)];
      const A* wk = weights<A>(k) + yc[k] * K;
      for (int64_t c = nc; c-- > 0;)  // in place: entry c is read before any write reaches it
        for (int t = K; t-- > 0;) {
          coff[c * K + t] = coff[c] + ok[t];
          cw[c * K + t] = cw[c] * wk[t];
        }
      nc *= K;
    }
    return nc;
  }

  /// Scratch for row_taps: on the stack up to 64 combinations, else per thread on the heap.
  template <class A>
  struct TapScratch {
    int64_t stack_off[64];
    A stack_w[64];
    int64_t* off = stack_off;
    A* w = stack_w;
    TapScratch(const TapScratch&) = delete;  // points into itself: built in place only
    explicit TapScratch(int64_t combos) {
      if (combos <= 64) return;
      thread_local std::vector<int64_t> heap_off;
      thread_local std::vector<A> heap_w;
      heap_off.resize(size_t(combos));
      heap_w.resize(size_t(combos));
      off = heap_off.data();
      w = heap_w.data();
    }
  };

  /// Interpolation with inner blocks (identity axes after the active ones): every output element
  /// is a weighted sum of contiguous input blocks, accumulated in chunks of 256.
  template <class T, class A, int KX>
  void interp_rows(const T* src, T* dst) const {
    const int64_t nx = p_.axes.back().out, inner = p_.inner;
    const int64_t* xo = p_.off.back().data();
    const A* xw = weights<A>(p_.axes.size() - 1);
    auto init = [&] { return TapScratch<A>(p_.combos); };
    for_each_row(dst, to_elem<T>(A(a_.extrapolation)), init, [&](TapScratch<A>& ts, int64_t o, const int64_t* yc, T* out) {
      const int64_t nc = row_taps(o, yc, ts.off, ts.w);
      A acc[256];
      for (int64_t xq = 0; xq < nx; ++xq) {
        const int64_t* ox = xo + xq * KX;
        const A* wx = xw + xq * KX;
        for (int64_t i0 = 0; i0 < inner; i0 += 256) {
          const int64_t n = std::min<int64_t>(256, inner - i0);
          std::fill(acc, acc + n, A(0));
          for (int64_t c = 0; c < nc; ++c)
            for (int t = 0; t < KX; ++t) {
              const A wgt = ts.w[c] * wx[t];
              const T* in = src + ts.off[c] + ox[t] + i0;
              for (int64_t i = 0; i < n; ++i) acc[i] += wgt * A(in[i]);
            }
          T* ob = out + xq * inner + i0;
          for (int64_t i = 0; i < n; ++i) ob[i] = to_elem<T>(acc[i]);
        }
      }
    });
  }

  /// Per-thread cache of input rows interpolated along the last axis, least recently used out.
  template <class A>
  struct RowCache {
    int64_t slots = 0, nx = 0, clock = 0;
    int64_t* tag = nullptr;    // input row offset held by each slot (-1: empty)
    int64_t* stamp = nullptr;  // last use
    A* rows = nullptr;         // slots x nx
    A* acc = nullptr;          // nx
    std::vector<char> own;     // when the workspace does not cover this thread

    RowCache(const ResizePlan& p, char* ws, size_t ws_bytes) : slots(p.cache_slots), nx(p.axes.back().out) {
      const size_t tid = size_t(omp_get_thread_num());
      char* mem = ws && (tid + 1) * p.cache_bytes <= ws_bytes ? ws + tid * p.cache_bytes : nullptr;
      if (!mem) {
        own.resize(p.cache_bytes + 64);
        mem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(own.data()) + 63) / 64 * 64);
      }
      rows = reinterpret_cast<A*>(mem);
      acc = rows + slots * nx;
      tag = reinterpret_cast<int64_t*>(acc + nx + (8 - nx % 8) % 8);
      stamp = tag + slots;
      std::fill(tag, tag + slots, -1);
      std::fill(stamp, stamp + slots, 0);
    }
    /// Row at input offset `off`, computing it with fill(row) on a miss. The row returned last
    /// stays valid through the next call (it is the most recently used).
    template <class Fill>
    const A* get(int64_t off, Fill&& fill) {
      int64_t victim = 0;
      for (int64_t s = 0; s < slots; ++s) {
        if (tag[s] == off) {
          stamp[s] = ++clock;
          return rows + s * nx;
        }
        if (stamp[s] < stamp[victim]) victim = s;
      }
      tag[victim] = off;
      stamp[victim] = ++clock;
      fill(rows + victim * nx);
      return rows + victim * nx;
    }
  };

  /// Interpolation with inner == 1 (the last active axis is the last axis): rows along it are
  /// interpolated once into a RowCache, output rows are weighted sums of cached rows.
  template <class T, class A, int KX>
  void cached_rows(RunContext& ctx, const T* src, T* dst) const {
    const int64_t nx = p_.axes.back().out;
    const int64_t* xo = p_.off.back().data();
    const A* xw = weights<A>(p_.axes.size() - 1);
    char* ws = static_cast<char*>(ctx.workspace());
    const size_t ws_bytes = ctx.workspace_bytes();
    struct State {
      TapScratch<A> taps;
      RowCache<A> cache;
    };
    auto init = [&] { return State{TapScratch<A>(p_.combos), RowCache<A>(p_, ws, ws_bytes)}; };
    for_each_row(dst, to_elem<T>(A(a_.extrapolation)), init, [&](State& st, int64_t o, const int64_t* yc, T* out) {
      const int64_t nc = row_taps(o, yc, st.taps.off, st.taps.w);
      const A* cw = st.taps.w;
      auto row = [&](int64_t c) {
        const T* in = src + st.taps.off[c];
        return st.cache.get(st.taps.off[c], [&](A* h) {
          for (int64_t xq = 0; xq < nx; ++xq) {
            const int64_t* ox = xo + xq * KX;
            const A* wx = xw + xq * KX;
            A v = 0;
            for (int t = 0; t < KX; ++t) v += wx[t] * A(in[ox[t]]);
            h[xq] = v;
          }
        });
      };
      if (nc == 1) {
        const A* h = row(0);
        const A w0 = cw[0];
        for (int64_t xq = 0; xq < nx; ++xq) out[xq] = to_elem<T>(w0 * h[xq]);
      } else if (nc == 2) {
        const A* h0 = row(0);
        const A* h1 = row(1);  // h0 stays valid: it is the most recently used row
        const A w0 = cw[0], w1 = cw[1];
        for (int64_t xq = 0; xq < nx; ++xq) out[xq] = to_elem<T>(w0 * h0[xq] + w1 * h1[xq]);
      } else {
        A* acc = st.cache.acc;
        std::fill(acc, acc + nx, A(0));
        for (int64_t c = 0; c < nc; ++c) {
          const A* h = row(c);
          const A wc = cw[c];
          for (int64_t xq = 0; xq < nx; ++xq) acc[xq] += wc * h[xq];
        }
        for (int64_t xq = 0; xq < nx; ++xq) out[xq] = to_elem<T>(acc[xq]);
      }
    });
  }

  int64_t opset_;
  ResizeAttrs a_;
  ResizePlan p_;
};

// ResizeGrad (com.onnxtrain): inputs dY, then the forward's roi, scales, sizes (opset 10: scales)
// and shape(X); the forward's attributes and its opset (forward_opset). The same per-axis taps,
// transposed: dX = fold of dY along every resized axis (backward.h); outputs outside a
// tf_crop_and_resize crop took the extrapolation value and pass no gradient.
class ResizeGradKernel final : public FoldKernel {
 public:
  explicit ResizeGradKernel(const KernelInfo& info)
      : opset_(info.attr_int("forward_opset", 13)), a_(read_resize_attrs(info, opset_)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt, ctx.node(), [&]<class T>() {});
    const size_t shape_in = opset_ < 11 ? 2 : 4;
    if (ctx.num_inputs() != shape_in + 1) ctx.fail("expects ", shape_in + 1, " inputs for forward opset ", opset_);
    Shape xs, ys;
    std::vector<AxisTable> tables;
    if (!read_shape_value(ctx, shape_in, dt, &xs) || !resize_tables(ctx, opset_, a_, xs, &ys, &tables))
      return ctx.set_output_dynamic(0, dt);
    if (ys != ctx.input_shape(0))
      ctx.fail("gradient shape ", shape_to_string(ctx.input_shape(0)), " differs from the resized shape ", shape_to_string(ys));
    folds_.assign(tables.size(), {});
    for (size_t d = 0; d < tables.size(); ++d) {
      AxisTable& t = tables[d];
      AxisFold& f = folds_[d];
      f.n_in = t.in;
      f.n_out = t.out;
      f.K = t.K;
      f.idx = std::move(t.idx);
      f.w = std::move(t.w);
      for (int64_t y = 0; y < t.out; ++y)
        if (t.outside[size_t(y)]) std::fill(f.idx.begin() + y * t.K, f.idx.begin() + (y + 1) * t.K, -1);
    }
    plan(ctx, ys, xs);
  }

 private:
  int64_t opset_;
  ResizeAttrs a_;
};

// ================================================================ DepthToSpace / SpaceToDepth
// Both are a transpose of a 6-d view of X: Y (as 6-d, row-major) walks X with `strides`.
template <class T>
void strided_copy(const T* src, T* dst, const int64_t (&dims)[6], const int64_t (&strides)[6]) {
  const int64_t rows = dims[0] * dims[1] * dims[2] * dims[3] * dims[4], n = dims[5], s5 = strides[5];
  parallel_for(rows, grain_for(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, off = 0;
      for (int d = 4; d >= 0; --d) {
        off += (rem % dims[d]) * strides[d];
        rem /= dims[d];
      }
      const T* in = src + off;
      T* out = dst + r * n;
      if (s5 == 1) std::copy_n(in, n, out);
      else
        for (int64_t i = 0; i < n; ++i) out[i] = in[i * s5];
    }
  });
}

class SpaceDepthKernel final : public Kernel {
 public:
  SpaceDepthKernel(const KernelInfo& info, bool to_space) : to_space_(to_space), b_(info.attr_int("blocksize")) {
    if (b_ < 1) info.fail("blocksize ", b_, " must be positive");
    if (to_space_) {
      const std::string m = info.attr_string("mode", "DCR");
      if (m != "DCR" && m != "CRD") info.fail("mode '", m, "' must be DCR or CRD");
      crd_ = m == "CRD";
    }
  }
  void prepare(PrepareContext& ctx) override {
    const Shape& xs = ctx.input_shape(0);
    if (xs.size() != 4) ctx.fail("input must be 4-D [N, C, H, W], got ", shape_to_string(xs));
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], b = b_;
    // Products in checked int64: a blocksize of 2^32 or more overflows blocksize^2 and H * b.
    auto mul = [&](int64_t p, int64_t q) {
      int64_t r = 0;
      if (__builtin_mul_overflow(p, q, &r))
        ctx.fail("blocksize ", b, " with input ", shape_to_string(xs), " overflows int64 (", p, " * ", q, ")");
      return r;
    };
    const int64_t bb = mul(b, b), hw = mul(H, W);
    Shape ys;
    if (to_space_) {
      if (C % bb != 0) ctx.fail("channels ", C, " are not divisible by blocksize^2 = ", bb);
      const int64_t c = C / bb;
      ys = {N, c, mul(H, b), mul(W, b)};
      // Y viewed as [N, c, H, b(i), W, b(j)]; X as [N, C, H, W] with channel (i*b + j)*c + ch (DCR)
      // or ch*b*b + i*b + j (CRD).
      dims_ = {N, c, H, b, W, b};
      strides_ = {mul(C, hw), mul(crd_ ? bb : 1, hw), W, mul(crd_ ? b : mul(b, c), hw), 1, mul(crd_ ? 1 : c, hw)};
    } else {
      if (H % b != 0 || W % b != 0) ctx.fail("spatial size ", H, "x", W, " is not divisible by blocksize ", b);
      const int64_t h = H / b, w = W / b;
      ys = {N, mul(C, bb), h, w};
      // Y viewed as [N, b(i), b(j), C, h, w]; X[n, ch, y*b + i, x*b + j].
      dims_ = {N, b, b, C, h, w};
      strides_ = {mul(C, hw), W, 1, hw, mul(b, W), b};
    }
    check_output_size(ctx, ys, ctx.input_dtype(0));
    ctx.set_output(0, ctx.input_dtype(0), ys);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    int64_t dims[6], strides[6];
    std::copy(dims_.begin(), dims_.end(), dims);
    std::copy(strides_.begin(), strides_.end(), strides);
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      strided_copy(static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), dims, strides);
    });
  }

 private:
  bool to_space_;
  int64_t b_;
  bool crd_ = false;
  std::array<int64_t, 6> dims_{}, strides_{};
};

}  // namespace

void register_image(KernelRegistry& r) {
  // Resize 10: X, scales; nearest / linear with asymmetric coordinates (onnxruntime's Upsample).
  // Resize 11-17: X, roi, scales, sizes; every mode. (13 makes roi and scales optional.)
  r.add<ResizeKernel>("Resize", 10, kMaxOpsetAll);
  // DepthToSpace 1-10 has no mode (DCR, the default from 11).
  r.add("DepthToSpace", 1, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<SpaceDepthKernel>(i, true);
  });
  r.add("SpaceToDepth", 1, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<SpaceDepthKernel>(i, false);
  });
  // Backward kernel of the Resize gradient rule (src/autodiff/rules.cpp).
  r.add(ops::kDomain, "ResizeGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ResizeGradKernel>(i); });
}

}  // namespace onnxtrain::kernels::cpu
