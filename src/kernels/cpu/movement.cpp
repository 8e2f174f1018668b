// Data movement: every output element is a copy of one input element (or a pad constant).
//   Transpose: Y[i_0..i_r) = X[i at perm^-1]          Y: [d[perm[0]], ..., d[perm[r-1]]]
//   Concat:    Y = X_0 | X_1 | ... along axis        Split: the inverse
//   Slice:     Y[i] = X[start + i * step] per axis   Tile: Y[i] = X[i mod d]
//   Pad:       Y[i] = X[i - pad_begin] inside, constant / reflected / edge / wrapped outside
//   Trilu:     Y = X with elements below (upper) or above (lower) diagonal k zeroed
//   NonZero:   Y[:, j] = index of the j-th nonzero element of X   Y: [rank, count] int64
// Most are one StridedCopy (strided_copy.h) built in prepare().
#include <climits>
#include <set>

#include "kernels/cpu/backward.h"
#include "kernels/cpu/common.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/registry.h"
#include "kernels/shape/movement.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

bool StridedCopy::init(const Shape& dims, const std::vector<int64_t>& ss, const std::vector<int64_t>& ds) {
  dims_.clear();
  ss_.clear();
  ds_.clear();
  tk_ = -1;
  n_ = shape_numel(dims);
  if (n_ == 0) return true;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!dims_.empty() && ss_.back() == ss[i] * dims[i] && ds_.back() == ds[i] * dims[i]) {
      dims_.back() *= dims[i];
      ss_.back() = ss[i];
      ds_.back() = ds[i];
      continue;
    }
    dims_.push_back(dims[i]);
    ss_.push_back(ss[i]);
    ds_.push_back(ds[i]);
  }
  if (dims_.empty()) {  // one element
    dims_ = {1};
    ss_ = {1};
    ds_ = {1};
  }
  if (dims_.size() > kMaxDims) return false;
  // Transpose fast path: the destination's innermost dim is strided in the source and another dim
  // is contiguous in the source (tiles also beat row-by-row walks when either dim is small).
  const size_t nd = dims_.size();
  if (nd >= 2 && ds_[nd - 1] == 1 && ss_[nd - 1] != 1 && ss_[nd - 1] != 0) {
    for (size_t k = 0; k + 1 < nd; ++k)
      if (ss_[k] == 1) tk_ = int(k);
  }
  return true;
}

namespace {

// Reads an optional 1-D integer input; false when it exists but its value is unknown now.
bool read_list_input(const PrepareContext& ctx, size_t i, const char* what, std::vector<int64_t>* out,
                     bool* present = nullptr) {
  if (present) *present = ctx.has_input(i);
  if (!ctx.has_input(i)) return true;
  const Tensor* t = ctx.input_value(i);
  if (!t) return false;
  if (t->rank() > 1 || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32))
    ctx.fail(what, " must be a 1-D int64 tensor, got ", t->describe());
  *out = read_int_list(*t);
  return true;
}

// Marks every requested output dynamic (shapes depend on values known only at run time).
void all_dynamic(PrepareContext& ctx) {
  for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output_dynamic(i, ctx.input_dtype(0));
}

// ---------------------------------------------------------------- Transpose
class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(const KernelInfo& info) : has_perm_(info.has_attr("perm")), perm_(info.attr_ints("perm", {})) {}
  void prepare(PrepareContext& ctx) override {
    const Shape& in = ctx.input_shape(0);
    const size_t r = in.size();
    const std::vector<int64_t> perm = shape::transpose_perm(ctx, perm_, has_perm_, r);
    const Shape out = shape::permuted(in, perm);
    const std::vector<int64_t> ss = shape::permuted(contiguous_strides(in), perm);
    if (!copy_.init(out, ss, contiguous_strides(out))) ctx.fail("rank ", r, " is too large");
    if (copy_.is_identity()) ctx.set_output_alias(0, 0, out);
    else ctx.set_output(0, ctx.input_dtype(0), out);
  }
  void run(RunContext& ctx) override { run_copy(ctx, copy_); }

 private:
  bool has_perm_;
  std::vector<int64_t> perm_;
  StridedCopy copy_;
};

// Concat and Split: a [outer, row] matrix `big` whose columns [off_i, off_i + w_i) belong to
// part i, a contiguous [outer, w_i] tensor. Walks `big` in order (sequential writes for Concat,
// sequential reads for Split), split evenly across threads. Null parts are skipped.
template <bool kToBig, class T>
void copy_blocks(T* big, T* const* parts, const std::vector<int64_t>& w, int64_t outer, int64_t row) {
  if (row == 0) return;
  parallel_for(outer * row, 1 << 15, [&](int64_t b, int64_t e) {
    int64_t r = b / row, c = b % row, off = 0;
    size_t p = 0;
    for (int64_t pos = b; pos < e;) {
      if (c == row) {
        c = off = 0;
        p = 0;
        ++r;
      }
      while (c >= off + w[p]) off += w[p++];  // c < row: some later part covers it
      const int64_t len = std::min(off + w[p] - c, e - pos);
      if (parts[p]) {
        T* small = parts[p] + r * w[p] + (c - off);
        if constexpr (kToBig) StridedCopy::copy_n(big + pos, small, len);
        else StridedCopy::copy_n(small, big + pos, len);
      }
      pos += len;
      c += len;
    }
  });
}

// ---------------------------------------------------------------- Concat
// Each input is an [outer, d_i * inner] block copied to columns [off_i, off_i + d_i * inner) of
// the [outer, D * inner] output (copy_blocks).
class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(const KernelInfo& info) {
    if (info.opset() >= 4 && !info.has_attr("axis")) info.fail("attribute 'axis' is required");
    axis_ = info.attr_int("axis", 1);
  }
  void prepare(PrepareContext& ctx) override {
    shape::ConcatGeom g = shape::concat_geometry(ctx, axis_);
    const int64_t axis = g.axis;
    const Shape& out = g.output;
    const std::vector<size_t>& used = g.used;
    const int64_t outer = dim_product(out, 0, size_t(axis)), inner = dim_product(out, size_t(axis) + 1, out.size());
    outer_ = outer;
    row_ = out[size_t(axis)] * inner;
    used_ = used;
    widths_.clear();
    for (size_t i : used) widths_.push_back(ctx.input_shape(i)[size_t(axis)] * inner);
    ptrs_.resize(used.size());
    if (used.size() == 1) ctx.set_output_alias(0, used[0], out);
    else ctx.set_output(0, ctx.input_dtype(0), out);
  }
  void run(RunContext& ctx) override {
    if (used_.size() == 1 && ctx.output_aliases_input(0, used_[0])) return;
    for (size_t k = 0; k < used_.size(); ++k) ptrs_[k] = const_cast<void*>(ctx.input(used_[k]).raw_data());
    Tensor& y = ctx.output(0);
    dispatch_by_size(y.dtype(), ctx.node(), [&]<class T>() {
      copy_blocks<true>(static_cast<T*>(y.raw_data()), reinterpret_cast<T* const*>(ptrs_.data()), widths_, outer_, row_);
    });
  }

 private:
  int64_t axis_, outer_ = 0, row_ = 0;
  std::vector<size_t> used_;     // inputs taking part (legacy empty 1-D inputs left out)
  std::vector<int64_t> widths_;  // their columns per row
  std::vector<void*> ptrs_;      // their data, set per run
};

// ---------------------------------------------------------------- Split
// Sizes: `split` attribute (opset < 13) or input 1 (13+); else equal parts (opset 18:
// num_outputs parts of ceil(d / n), the last one smaller).
class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const KernelInfo& info)
      : axis_(info.attr_int("axis", 0)), from_input_(info.opset() >= 13 || (info.opset() == 1 && !info.has_attr("split"))),
        has_attr_(info.has_attr("split")), split_attr_(info.attr_ints("split", {})),
        num_outputs_(info.opset() >= 18 ? info.attr_int("num_outputs", 0) : 0) {
    if (info.opset() >= 18 && info.has_attr("num_outputs") && num_outputs_ != int64_t(info.node().outputs.size()))
      info.fail("num_outputs ", num_outputs_, " differs from the ", info.node().outputs.size(), " outputs");
  }
  void prepare(PrepareContext& ctx) override {
    const Shape& in = ctx.input_shape(0);
    const int64_t axis = normalize_axis(ctx, axis_, int64_t(in.size()));
    const int64_t d = in[size_t(axis)];
    const int64_t n = int64_t(ctx.num_outputs());
    std::vector<int64_t> sizes = split_attr_;
    bool given = has_attr_;
    if (from_input_ && !read_list_input(ctx, 1, "split", &sizes, &given)) return all_dynamic(ctx);
    if (given) {
      if (int64_t(sizes.size()) != n) ctx.fail("split ", shape_to_string(sizes), " has ", sizes.size(), " sizes for ", n, " outputs");
      int64_t sum = 0;
      bool overflow = false;
      for (int64_t s : sizes) {
        if (s < 0) ctx.fail("split ", shape_to_string(sizes), " has a negative size");
        overflow |= __builtin_add_overflow(sum, s, &sum);
      }
      if (overflow || sum != d) ctx.fail("split ", shape_to_string(sizes), " does not sum to dimension ", d, " of axis ", axis);
    } else if (num_outputs_ > 0) {
      const int64_t chunk = (d + n - 1) / n;
      for (int64_t i = 0; i < n; ++i) sizes.push_back(std::clamp<int64_t>(d - i * chunk, 0, chunk));
    } else {
      if (d % n != 0) ctx.fail("dimension ", d, " of axis ", axis, " cannot be split into ", n, " equal parts");
      sizes.assign(size_t(n), d / n);
    }
    outer_ = dim_product(in, 0, size_t(axis));
    const int64_t inner = dim_product(in, size_t(axis) + 1, in.size());
    row_ = d * inner;
    widths_.clear();
    for (int64_t i = 0; i < n; ++i) {
      Shape s = in;
      s[size_t(axis)] = sizes[size_t(i)];
      widths_.push_back(sizes[size_t(i)] * inner);
      if (n == 1) ctx.set_output_alias(0, 0, s);
      else ctx.set_output(size_t(i), ctx.input_dtype(0), s);
    }
    ptrs_.resize(size_t(n));
  }
  void run(RunContext& ctx) override {
    if (ptrs_.size() == 1 && ctx.output_aliases_input(0, 0)) return;
    for (size_t i = 0; i < ptrs_.size(); ++i) ptrs_[i] = ctx.has_output(i) ? ctx.output(i).raw_data() : nullptr;
    const Tensor& x = ctx.input(0);
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      copy_blocks<false>(const_cast<T*>(static_cast<const T*>(x.raw_data())), reinterpret_cast<T* const*>(ptrs_.data()),
                         widths_, outer_, row_);
    });
  }

 private:
  int64_t axis_;
  bool from_input_, has_attr_;
  std::vector<int64_t> split_attr_;
  int64_t num_outputs_, outer_ = 0, row_ = 0;
  std::vector<int64_t> widths_;  // columns per row of each output
  std::vector<void*> ptrs_;      // output data (null: not requested), set per run
};

// ---------------------------------------------------------------- Slice
// Opset 1-9: starts/ends/axes attributes; 10+: inputs starts, ends, axes, steps. Per axis:
// negatives count from the back, then start is clamped to [0, d] ([0, d-1] for negative steps)
// and end to [0, d] ([-1, d-1]); count = ceil((end - start) / step) when positive.
// SliceGrad (com.onnxtrain): inputs dY, shape(X), starts, ends[, axes, steps]: dX = zeros with
// the sliced positions set from dY (the same geometry, the copy reversed).
struct SliceAttrs {
  bool from_input = true, has_axes = false;
  std::vector<int64_t> starts, ends, axes;
};

// Geometry of Y = X[slice] for an X of shape `in`: Y's shape, X's strides per Y axis and the X
// offset of Y[0]. Inputs starts.. are read from `first` on; false when a value is unknown now.
bool slice_geometry(const PrepareContext& ctx, const SliceAttrs& at, size_t first, const Shape& in, Shape* out,
                    std::vector<int64_t>* strides, int64_t* offset) {
  std::vector<int64_t> starts = at.starts, ends = at.ends, axes = at.axes, steps;
  bool has_axes = at.has_axes, has_steps = false;
  if (at.from_input) {
    if (!read_list_input(ctx, first, "starts", &starts) || !read_list_input(ctx, first + 1, "ends", &ends) ||
        !read_list_input(ctx, first + 2, "axes", &axes, &has_axes) ||
        !read_list_input(ctx, first + 3, "steps", &steps, &has_steps))
      return false;
  }
  const size_t r = in.size();
  if (starts.size() != ends.size()) ctx.fail("starts ", shape_to_string(starts), " and ends ", shape_to_string(ends), " differ in length");
  if (!has_axes) {
    axes.clear();
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  }
  if (!has_steps) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    ctx.fail("starts, ends, axes and steps differ in length (", starts.size(), ", ", ends.size(), ", ", axes.size(), ", ",
             steps.size(), ")");
  *out = in;
  const auto st = contiguous_strides(in);
  *strides = st;
  int64_t base = 0;
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = normalize_axis(ctx, axes[i], int64_t(r));
    if (seen[size_t(a)]) ctx.fail("axis ", axes[i], " is repeated");
    seen[size_t(a)] = true;
    const int64_t d = in[size_t(a)], step = steps[i];
    if (step == 0) ctx.fail("step of axis ", a, " is zero");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += d;
    if (e < 0) e += d;
    __int128 count;
    if (d == 0) {
      count = 0;
    } else if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      count = e > s ? (__int128(e) - s - 1) / step + 1 : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      count = s > e ? (__int128(s) - e - 1) / -__int128(step) + 1 : 0;
    }
    (*out)[size_t(a)] = int64_t(count);
    if (count > 0) base += s * st[size_t(a)];
    (*strides)[size_t(a)] = count > 1 ? step * st[size_t(a)] : 0;
  }
  *offset = base;
  return true;
}

// Slice, or SliceGrad (grad: input 1 is shape(X); the copy runs backwards into zeros).
class SliceKernel final : public Kernel {
 public:
  SliceKernel(const KernelInfo& info, bool grad) : grad_(grad) {
    at_.from_input = grad || info.opset() >= 10;
    if (!at_.from_input) {
      at_.starts = info.attr_ints("starts");
      at_.ends = info.attr_ints("ends");
      at_.has_axes = info.has_attr("axes");
      at_.axes = info.attr_ints("axes", {});
    }
  }
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    Shape xs = ctx.input_shape(0), ys;
    std::vector<int64_t> ss;
    if (grad_) dispatch<NumericTypes>(dt, ctx.node(), [&]<class T>() {});
    if ((grad_ && !read_shape_value(ctx, 1, dt, &xs)) || !slice_geometry(ctx, at_, grad_ ? 2 : 1, xs, &ys, &ss, &offset_))
      return ctx.set_output_dynamic(0, dt);
    if (grad_) {
      if (ys != ctx.input_shape(0))
        ctx.fail("gradient shape ", shape_to_string(ctx.input_shape(0)), " differs from the slice's shape ", shape_to_string(ys));
      if (!copy_.init(ys, contiguous_strides(ys), ss)) ctx.fail("rank ", ys.size(), " is too large");
      return ctx.set_output(0, dt, xs);
    }
    if (!copy_.init(ys, ss, contiguous_strides(ys))) ctx.fail("rank ", ys.size(), " is too large");
    if (offset_ == 0 && copy_.is_identity()) ctx.set_output_alias(0, 0, ys);
    else ctx.set_output(0, dt, ys);
  }
  void run(RunContext& ctx) override {
    if (grad_) zero_fill(ctx.output(0));
    run_copy(ctx, copy_, 0, 0, grad_ ? 0 : offset_, grad_ ? offset_ : 0);
  }

 private:
  bool grad_;
  SliceAttrs at_;
  StridedCopy copy_;
  int64_t offset_ = 0;
};

// ---------------------------------------------------------------- Tile
// Y viewed as [rep_0, d_0, rep_1, d_1, ...] reads X with strides [0, s_0, 0, s_1, ...].
class TileKernel final : public Kernel {
 public:
  explicit TileKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    std::vector<int64_t> reps;
    if (!read_list_input(ctx, 1, "repeats", &reps)) return ctx.set_output_dynamic(0, ctx.input_dtype(0));
    const Shape& in = ctx.input_shape(0);
    const size_t r = in.size();
    if (reps.size() != r) ctx.fail("repeats ", shape_to_string(reps), " does not match rank ", r);
    Shape out(r), dims(2 * r);
    for (size_t i = 0; i < r; ++i) {
      if (reps[i] < 0) ctx.fail("repeats ", shape_to_string(reps), " has a negative value");
      if (__builtin_mul_overflow(in[i], reps[i], &out[i])) ctx.fail("repeats ", shape_to_string(reps), " overflow");
      dims[2 * i] = reps[i];
      dims[2 * i + 1] = in[i];
    }
    check_output_size(ctx, out, ctx.input_dtype(0));
    const auto ist = contiguous_strides(in), ost = contiguous_strides(out);
    std::vector<int64_t> ss(2 * r), ds(2 * r);
    for (size_t i = 0; i < r; ++i) {
      ss[2 * i] = 0;
      ss[2 * i + 1] = ist[i];
      ds[2 * i] = ost[i] * in[i];
      ds[2 * i + 1] = ost[i];
    }
    if (!copy_.init(dims, ss, ds)) ctx.fail("rank ", r, " is too large");
    if (copy_.is_identity() && shape_numel(out) == shape_numel(in)) ctx.set_output_alias(0, 0, out);
    else ctx.set_output(0, ctx.input_dtype(0), out);
  }
  void run(RunContext& ctx) override { run_copy(ctx, copy_); }

 private:
  StridedCopy copy_;
};

// ---------------------------------------------------------------- Pad
// Per axis, a map from output index to input index (-1: the constant). With begin pad b and a
// (possibly cropped, negative pads) input range [lo, lo + m), relative index i = o - max(b, 0):
//   inside: lo + i; edge: clamp; reflect: period 2(m-1) mirror; wrap: i mod m.
// Rows of the innermost axis are precomputed as segments (constant runs, contiguous copies).
// PadGrad (com.onnxtrain, attribute mode): inputs dY, shape(X), pads[, axes]: dX[map(o)] += dY[o]
// per axis (backward.h): the edge, mirrored and wrapped copies fold back onto their sources.
enum class PadMode { kConstant, kReflect, kEdge, kWrap };

PadMode read_pad_mode(const KernelInfo& info, int64_t opset) {
  const std::string mode = info.attr_string("mode", "constant");
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "edge") return PadMode::kEdge;
  if (mode == "wrap" && opset >= 19) return PadMode::kWrap;
  info.fail("unsupported mode '", mode, "'");
}

// Output shape and per-axis index maps of Pad(X of shape `in`, pads over `axes` or every axis).
// The padded shape must fit `dt` elements in memory.
void pad_maps(const PrepareContext& ctx, PadMode mode, const Shape& in, DType dt, const std::vector<int64_t>& pads,
              std::vector<int64_t> axes, bool has_axes, Shape* out, std::vector<std::vector<int64_t>>* maps) {
  const int64_t r = int64_t(in.size());
  if (!has_axes) {
    axes.clear();
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size())
    ctx.fail("pads ", shape_to_string(pads), " must hold 2 values per axis (", axes.size(), " axes)");
  std::vector<int64_t> begin(size_t(r), 0), end(size_t(r), 0);
  std::vector<bool> seen(size_t(r), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = normalize_axis(ctx, axes[i], r);
    if (seen[size_t(a)]) ctx.fail("axis ", axes[i], " is repeated");
    seen[size_t(a)] = true;
    begin[size_t(a)] = pads[i];
    end[size_t(a)] = pads[i + axes.size()];
  }
  out->assign(size_t(r), 0);
  for (size_t a = 0; a < size_t(r); ++a) {
    int64_t& o = (*out)[a];
    if (__builtin_add_overflow(in[a], begin[a], &o) || __builtin_add_overflow(o, end[a], &o) || o < 0)
      ctx.fail("pads ", shape_to_string(pads), " give a negative or overflowing size on axis ", a, " of ", shape_to_string(in));
    // A negative pad crops; one past the axis's extent (INT64_MIN beside INT64_MAX sums to a valid
    // size) would crop elements that are not there.
    if (begin[a] < -in[a] || end[a] < -in[a])
      ctx.fail("pads ", shape_to_string(pads), " crop more than the ", in[a], " elements of axis ", a, " of ", shape_to_string(in));
  }
  check_output_size(ctx, *out, dt);
  // One index per output position and axis: with a zero dim elsewhere, an axis of 2^40 passes the
  // output's size check but not this one (an out-of-memory in the structured fuzz target).
  int64_t entries = 0;
  for (int64_t d : *out)
    if (__builtin_add_overflow(entries, d, &entries)) {
      entries = -1;
      break;
    }
  check_table_size(ctx, entries, sizeof(int64_t), "the pad index maps");
  maps->assign(size_t(r), {});
  for (size_t a = 0; a < size_t(r); ++a) {
    const int64_t lo = std::max<int64_t>(-begin[a], 0);
    const int64_t m = in[a] - lo - std::max<int64_t>(-end[a], 0);  // kept input elements (>= 0 here)
    const int64_t first = std::max<int64_t>(begin[a], 0);
    auto& map = (*maps)[a];
    map.resize(size_t((*out)[a]));
    for (int64_t o = 0; o < (*out)[a]; ++o) {
      const int64_t i = o - first;
      int64_t src = -1;
      if (i >= 0 && i < m) src = lo + i;
      else if (mode != PadMode::kConstant) {
        if (m <= 0)
          ctx.fail("cannot pad an empty axis ", a, " in ", mode == PadMode::kEdge ? "edge" : mode == PadMode::kWrap ? "wrap" : "reflect", " mode");
        if (mode == PadMode::kEdge) src = lo + std::clamp<int64_t>(i, 0, m - 1);
        else if (mode == PadMode::kWrap) src = lo + ((i % m) + m) % m;
        else if (m == 1) src = lo;
        else {
          const int64_t p = 2 * (m - 1), t = ((i % p) + p) % p;
          src = lo + (t < m ? t : p - t);
        }
      }
      map[size_t(o)] = src;
    }
  }
}

class PadKernel final : public Kernel {
 public:
  explicit PadKernel(const KernelInfo& info) : opset_(info.opset()), mode_(read_pad_mode(info, info.opset())) {
    if (opset_ < 11) {
      pads_attr_ = info.attr_ints(opset_ < 2 ? "paddings" : "pads");
      value_attr_ = info.attr_float("value", 0.0f);
    }
  }

  void prepare(PrepareContext& ctx) override {
    const Shape& in = ctx.input_shape(0);
    const DType dt = ctx.input_dtype(0);
    const int64_t r = int64_t(in.size());
    std::vector<int64_t> pads = pads_attr_, axes;
    bool has_axes = false;
    if (opset_ >= 11) {
      if (!ctx.has_input(1)) ctx.fail("pads input is required");
      if (!read_list_input(ctx, 1, "pads", &pads) || (opset_ >= 18 && !read_list_input(ctx, 3, "axes", &axes, &has_axes)))
        return ctx.set_output_dynamic(0, dt);
      if (ctx.has_input(2)) {
        if (ctx.input_dtype(2) != dt) ctx.fail("constant_value has type ", dtype_name(ctx.input_dtype(2)), ", expected ", dtype_name(dt));
        if (shape_numel(ctx.input_shape(2)) != 1) ctx.fail("constant_value must be a scalar, got ", shape_to_string(ctx.input_shape(2)));
      }
    }
    Shape out;
    pad_maps(ctx, mode_, in, dt, pads, axes, has_axes, &out, &maps_);
    if (opset_ < 11)  // the float `value` attribute in the element type
      dispatch<NumericTypes>(dt, ctx.node(), [&]<class U>() { pad_value_ = Tensor::scalar<U>(static_cast<U>(value_attr_)); });
    in_strides_ = contiguous_strides(in);
    out_shape_ = out;
    segs_.clear();
    if (r > 0) {
      const auto& m = maps_.back();
      for (size_t j = 0; j < m.size();) {
        size_t k = j + 1;
        if (m[j] < 0)
          while (k < m.size() && m[k] < 0) ++k;
        else
          while (k < m.size() && m[k] == m[k - 1] + 1) ++k;
        segs_.push_back({int64_t(j), int64_t(k - j), m[j]});
        j = k;
      }
    }
    ctx.set_output(0, dt, out);
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (x.rank() == 0) {
      y.copy_from(x);
      return;
    }
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      T value{};
      if (opset_ >= 11 && ctx.has_input(2)) value = *static_cast<const T*>(ctx.input(2).raw_data());
      else if (pad_value_.defined()) value = *static_cast<const T*>(pad_value_.raw_data());
      const T* X = static_cast<const T*>(x.raw_data());
      T* Y = static_cast<T*>(y.raw_data());
      const size_t r = out_shape_.size();
      const int64_t inner = out_shape_[r - 1];
      const int64_t rows = y.numel() / inner;
      parallel_for(rows, grain_for(inner), [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          int64_t rem = row, src = 0;
          bool constant = false;
          for (size_t a = r - 1; a-- > 0;) {
            const int64_t m = maps_[a][size_t(rem % out_shape_[a])];
            rem /= out_shape_[a];
            if (m < 0) constant = true;
            src += m * in_strides_[a];
          }
          T* o = Y + row * inner;
          if (constant) {
            std::fill(o, o + inner, value);
            continue;
          }
          for (const Seg& s : segs_) {
            if (s.src < 0) std::fill(o + s.begin, o + s.begin + s.len, value);
            else StridedCopy::copy_n(o + s.begin, X + src + s.src, s.len);
          }
        }
      });
    });
  }

 private:
  struct Seg {
    int64_t begin, len, src;  // src < 0: the constant
  };
  int64_t opset_;
  PadMode mode_;
  std::vector<int64_t> pads_attr_;
  float value_attr_ = 0;
  Tensor pad_value_;
  std::vector<std::vector<int64_t>> maps_;
  std::vector<int64_t> in_strides_;
  Shape out_shape_;
  std::vector<Seg> segs_;
};

class PadGradKernel final : public FoldKernel {
 public:
  explicit PadGradKernel(const KernelInfo& info) : mode_(read_pad_mode(info, kMaxOpsetAll)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    dispatch<FloatTypes>(dt, ctx.node(), [&]<class T>() {});
    Shape xs, ys;
    std::vector<int64_t> pads, axes;
    bool has_axes = false;
    if (!read_shape_value(ctx, 1, dt, &xs) || !read_list_input(ctx, 2, "pads", &pads) ||
        !read_list_input(ctx, 3, "axes", &axes, &has_axes))
      return ctx.set_output_dynamic(0, dt);
    std::vector<std::vector<int64_t>> maps;
    pad_maps(ctx, mode_, xs, dt, pads, axes, has_axes, &ys, &maps);
    if (ys != ctx.input_shape(0))
      ctx.fail("gradient shape ", shape_to_string(ctx.input_shape(0)), " differs from the padded shape ", shape_to_string(ys));
    folds_.assign(maps.size(), {});
    for (size_t a = 0; a < maps.size(); ++a) {
      folds_[a].n_in = xs[a];
      folds_[a].n_out = ys[a];
      folds_[a].idx = std::move(maps[a]);
    }
    plan(ctx, ys, xs);
  }

 private:
  PadMode mode_;
};

// ---------------------------------------------------------------- Trilu
// Over the last two dims [N, M]: upper keeps j - i >= k, lower keeps j - i <= k.
class TriluKernel final : public Kernel {
 public:
  explicit TriluKernel(const KernelInfo& info) : upper_(info.attr_int("upper", 1) != 0) {}
  void prepare(PrepareContext& ctx) override {
    if (ctx.input_rank(0) < 2) ctx.fail("input must have rank >= 2, got ", shape_to_string(ctx.input_shape(0)));
    if (ctx.has_input(1) && shape_numel(ctx.input_shape(1)) != 1)
      ctx.fail("k must be a scalar, got shape ", shape_to_string(ctx.input_shape(1)));
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const int64_t N = x.shape()[x.rank() - 2], M = x.shape()[x.rank() - 1];
    int64_t k = 0;
    if (ctx.has_input(1)) {
      if (ctx.input(1).dtype() != DType::kInt64) ctx.fail("k must be int64, got ", ctx.input(1).describe());
      k = std::clamp<int64_t>(*ctx.input(1).data<int64_t>(), -N - 1, M + 1);
    }
    const int64_t rows = x.numel() / std::max<int64_t>(M, 1);
    if (M == 0) return;
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      const T* X = static_cast<const T*>(x.raw_data());
      T* Y = static_cast<T*>(y.raw_data());
      parallel_for(rows, grain_for(M), [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          const int64_t i = row % N;
          // Kept columns [c0, c1).
          const int64_t c0 = upper_ ? std::clamp<int64_t>(i + k, 0, M) : 0;
          const int64_t c1 = upper_ ? M : std::clamp<int64_t>(i + k + 1, 0, M);
          const T* xs = X + row * M;
          T* o = Y + row * M;
          std::fill(o, o + c0, T{});
          StridedCopy::copy_n(o + c0, xs + c0, std::max<int64_t>(c1 - c0, 0));
          std::fill(o + std::max(c0, c1), o + M, T{});
        }
      });
    });
  }

 private:
  bool upper_;
};

// ---------------------------------------------------------------- NonZero
// Y[:, j] = multi-index of the j-th nonzero element (row-major order). A scalar counts as [1].
class NonZeroKernel final : public Kernel {
 public:
  explicit NonZeroKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override { ctx.set_output_dynamic(0, DType::kInt64); }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> flat;
    dispatch<AllTypes>(x.dtype(), ctx.node(), [&]<class T>() {
      const T* p = x.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        bool nz;
        if constexpr (std::is_same_v<T, std::string>) nz = !p[i].empty();
        else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) nz = float(p[i]) != 0.0f;
        else nz = p[i] != T(0);
        if (nz) flat.push_back(i);
      }
    });
    const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
    const int64_t r = int64_t(shape.size()), n = int64_t(flat.size());
    Tensor& y = ctx.allocate_output(0, DType::kInt64, {r, n});
    int64_t* Y = y.data<int64_t>();
    for (int64_t j = 0; j < n; ++j) {
      int64_t f = flat[size_t(j)];
      for (int64_t a = r; a-- > 0;) {
        Y[a * n + j] = f % shape[size_t(a)];
        f /= shape[size_t(a)];
      }
    }
  }
};

}  // namespace

void register_movement(KernelRegistry& r) {
  // One entry per opset range whose semantics differ; the kernel reads info.opset() for them.
  r.add<TransposeKernel>("Transpose", 1, kMaxOpsetAll);
  r.add<ConcatKernel>("Concat", 1, 3);             // axis defaults to 1
  r.add<ConcatKernel>("Concat", 4, kMaxOpsetAll);  // axis required (11: negative)
  r.add<SplitKernel>("Split", 1, 1);               // split attribute or input
  r.add<SplitKernel>("Split", 2, 12);              // split attribute (11: negative axis)
  r.add<SplitKernel>("Split", 13, 17);             // split input
  r.add<SplitKernel>("Split", 18, kMaxOpsetAll);   // num_outputs
  auto slice = [](bool grad) {
    return [grad](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<SliceKernel>(i, grad); };
  };
  r.add("Slice", 1, 9, slice(false));             // starts/ends/axes attributes
  r.add("Slice", 10, kMaxOpsetAll, slice(false));  // inputs, steps
  r.add<TileKernel>("Tile", 6, kMaxOpsetAll);
  r.add<PadKernel>("Pad", 1, 10);                  // pads (1: paddings) and value attributes
  r.add<PadKernel>("Pad", 11, 17);                 // pads and constant_value inputs (13: bool)
  r.add<PadKernel>("Pad", 18, kMaxOpsetAll);       // axes input (19: wrap mode)
  r.add<TriluKernel>("Trilu", 14, kMaxOpsetAll);
  r.add<NonZeroKernel>("NonZero", 9, kMaxOpsetAll);
  // Backward kernels of the gradient rules (src/autodiff/rules.cpp).
  r.add(ops::kDomain, "SliceGrad", 1, kMaxOpsetAll, slice(true));
  r.add(ops::kDomain, "PadGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<PadGradKernel>(i); });
}

}  // namespace onnxtrain::kernels::cpu
