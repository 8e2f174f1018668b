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
  parallel_for(outer * row, kCopyGrain, [&](int64_t b, int64_t e) {
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
// Sizes and axis: shape::split_sizes.
class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const KernelInfo& info) : at_(shape::read_split_attrs(info)) {}
  void prepare(PrepareContext& ctx) override {
    if (shape::prepare_split(ctx, at_, &rows_)) ptrs_.resize(rows_.widths.size());
  }
  void run(RunContext& ctx) override {
    if (ptrs_.size() == 1 && ctx.output_aliases_input(0, 0)) return;
    for (size_t i = 0; i < ptrs_.size(); ++i) ptrs_[i] = ctx.has_output(i) ? ctx.output(i).raw_data() : nullptr;
    const Tensor& x = ctx.input(0);
    dispatch_by_size(x.dtype(), ctx.node(), [&]<class T>() {
      copy_blocks<false>(const_cast<T*>(static_cast<const T*>(x.raw_data())), reinterpret_cast<T* const*>(ptrs_.data()),
                         rows_.widths, rows_.outer, rows_.row);
    });
  }

 private:
  shape::SplitAttrs at_;
  shape::SplitRows rows_;
  std::vector<void*> ptrs_;  // output data (null: not requested), set per run
};

// ---------------------------------------------------------------- Slice
// Opset 1-9: starts/ends/axes attributes; 10+: inputs starts, ends, axes, steps (geometry:
// shape::slice_geometry).
// SliceGrad (com.onnxtrain): inputs dY, shape(X), starts, ends[, axes, steps]: dX = zeros with
// the sliced positions set from dY (the same geometry, the copy reversed).
// Slice, or SliceGrad (grad: input 1 is shape(X); the copy runs backwards into zeros).
class SliceKernel final : public Kernel {
 public:
  SliceKernel(const KernelInfo& info, bool grad) : grad_(grad), at_(shape::read_slice_attrs(info, grad)) {}
  void prepare(PrepareContext& ctx) override {
    const DType dt = ctx.input_dtype(0);
    Shape xs = ctx.input_shape(0), ys;
    std::vector<int64_t> ss;
    if (grad_) dispatch<NumericTypes>(dt, ctx.node(), [&]<class T>() {});
    if ((grad_ && !read_shape_value(ctx, 1, dt, &xs)) || !shape::slice_geometry(ctx, at_, grad_ ? 2 : 1, xs, &ys, &ss, &offset_))
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
  shape::SliceAttrs at_;
  StridedCopy copy_;
  int64_t offset_ = 0;
};

// ---------------------------------------------------------------- SliceGradSum
// SliceGradSum (com.onnxtrain): inputs shape(X), then per slice (dY, starts, ends, axes, steps),
// absent axes / steps unnamed: dX = the sum of the slices' SliceGrads. The slices of one tensor
// that a model reads apart (an attention's Q, K and V cut from one projection) usually tile it:
// then dX is their copies alone, with neither zeros nor a sum pass (train::fuse_slice_grad_sum).
// Disjoint slices that leave gaps: zeros, then the copies; overlapping ones: each slice's
// SliceGrad in the workspace, added into dX (the unfused arithmetic).
class SliceGradSumKernel final : public Kernel {
 public:
  explicit SliceGradSumKernel(const KernelInfo& info) {
    const size_t n = info.node().inputs.size();
    if (n < 6 || (n - 1) % 5 != 0)
      info.fail("expected shape(X), then five inputs per slice (dY, starts, ends, axes, steps; unnamed when absent), got ", n,
                " inputs");
  }
  void prepare(PrepareContext& ctx) override {
    const size_t n = (ctx.num_inputs() - 1) / 5;
    const DType dt = ctx.input_dtype(1);
    dispatch<NumericTypes>(dt, ctx.node(), [&]<class T>() {});
    Shape xs;
    if (!read_shape_value(ctx, 0, dt, &xs)) return ctx.set_output_dynamic(0, dt);
    const auto xst = contiguous_strides(xs);
    parts_.assign(n, {});
    int64_t covered = 0;
    for (size_t g = 0; g < n; ++g) {
      const size_t dy = 1 + 5 * g;
      if (ctx.input_dtype(dy) != dt)
        ctx.fail("input ", dy, " has element type ", dtype_name(ctx.input_dtype(dy)), ", expected ", dtype_name(dt));
      Shape ys;
      std::vector<int64_t> ss;
      Part& p = parts_[g];
      if (!shape::slice_geometry(ctx, attrs_, dy + 1, xs, &ys, &ss, &p.offset)) return ctx.set_output_dynamic(0, dt);
      if (ys != ctx.input_shape(dy))
        ctx.fail("gradient ", g, " has shape ", shape_to_string(ctx.input_shape(dy)), ", the slice's is ", shape_to_string(ys));
      if (!p.copy.init(ys, contiguous_strides(ys), ss)) ctx.fail("rank ", ys.size(), " is too large");
      // The index range each axis spans (first to last index).
      p.lo.resize(xs.size()), p.hi.resize(xs.size());
      p.empty = shape_numel(ys) == 0;
      for (size_t a = 0; a < xs.size(); ++a) {
        const int64_t start = xs[a] ? (p.offset / xst[a]) % xs[a] : 0, step = ss[a] / xst[a];
        const int64_t last = start + (ys[a] > 1 ? (ys[a] - 1) * step : 0);
        p.lo[a] = std::min(start, last), p.hi[a] = std::max(start, last);
      }
      covered += shape_numel(ys);
    }
    // Two slices are disjoint when some axis's ranges do not meet.
    bool disjoint = true;
    for (size_t i = 0; i < n && disjoint; ++i)
      for (size_t j = i + 1; j < n && disjoint; ++j) {
        if (parts_[i].empty || parts_[j].empty) continue;
        bool apart = false;
        for (size_t a = 0; a < xs.size() && !apart; ++a)
          apart = parts_[i].hi[a] < parts_[j].lo[a] || parts_[j].hi[a] < parts_[i].lo[a];
        disjoint = apart;
      }
    mode_ = !disjoint ? Mode::kAccumulate : covered == shape_numel(xs) ? Mode::kTile : Mode::kZeroThenCopy;
    ctx.set_output(0, dt, xs);
    if (mode_ == Mode::kAccumulate) ctx.request_workspace(size_t(shape_numel(xs)) * dtype_size(dt));
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (mode_ != Mode::kTile) zero_fill(y);
    if (mode_ != Mode::kAccumulate) {
      for (size_t g = 0; g < parts_.size(); ++g) run_copy(ctx, parts_[g].copy, 1 + 5 * g, 0, 0, parts_[g].offset);
      return;
    }
    dispatch<NumericTypes>(y.dtype(), ctx.node(), [&]<class T>() {
      T* out = y.data<T>();
      T* ws = static_cast<T*>(ctx.workspace());
      const int64_t m = y.numel();
      for (size_t g = 0; g < parts_.size(); ++g) {
        std::fill(ws, ws + m, T(0));
        parts_[g].copy.run(ws + parts_[g].offset, ctx.input(1 + 5 * g).data<T>());
        for (int64_t i = 0; i < m; ++i) out[i] = T(out[i] + ws[i]);
      }
    });
  }

 private:
  struct Part {
    StridedCopy copy;
    int64_t offset = 0;
    std::vector<int64_t> lo, hi;
    bool empty = false;
  };
  enum class Mode { kTile, kZeroThenCopy, kAccumulate };
  shape::SliceAttrs attrs_;  // from inputs
  std::vector<Part> parts_;
  Mode mode_ = Mode::kAccumulate;
};

// ---------------------------------------------------------------- Tile
// Y viewed as [rep_0, d_0, rep_1, d_1, ...] reads X with strides [0, s_0, 0, s_1, ...].
class TileKernel final : public Kernel {
 public:
  explicit TileKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    std::vector<int64_t> reps;
    Shape out;
    if (!shape::tile_geometry(ctx, &out, &reps)) return ctx.set_output_dynamic(0, ctx.input_dtype(0));
    const Shape& in = ctx.input_shape(0);
    const size_t r = in.size();
    Shape dims(2 * r);
    for (size_t i = 0; i < r; ++i) {
      dims[2 * i] = reps[i];
      dims[2 * i + 1] = in[i];
    }
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
// Per axis, a map from output index to input index (-1: the constant; shape::pad_maps).
// Rows of the innermost axis are precomputed as segments (constant runs, contiguous copies).
// PadGrad (com.onnxtrain, attribute mode): inputs dY, shape(X), pads[, axes]: dX[map(o)] += dY[o]
// per axis (backward.h): the edge, mirrored and wrapped copies fold back onto their sources.
class PadKernel final : public Kernel {
 public:
  explicit PadKernel(const KernelInfo& info) : opset_(info.opset()), mode_(shape::read_pad_mode(info, info.opset())) {
    if (opset_ < 11) {
      pads_attr_ = info.attr_ints(opset_ < 2 ? "paddings" : "pads");
      value_attr_ = info.attr_float("value", 0.0f);
    }
  }

  void prepare(PrepareContext& ctx) override {
    const Shape& in = ctx.input_shape(0);
    const DType dt = ctx.input_dtype(0);
    const int64_t r = int64_t(in.size());
    std::vector<int64_t> pads, axes;
    bool has_axes = false;
    if (!shape::pad_inputs(ctx, opset_, pads_attr_, &pads, &axes, &has_axes)) return ctx.set_output_dynamic(0, dt);
    Shape out;
    shape::pad_maps(ctx, mode_, in, dt, pads, axes, has_axes, &out, &maps_);
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
  shape::PadMode mode_;
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
  explicit PadGradKernel(const KernelInfo& info) : mode_(shape::read_pad_mode(info, kMaxOpsetAll)) {}
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
    shape::pad_maps(ctx, mode_, xs, dt, pads, axes, has_axes, &ys, &maps);
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
  shape::PadMode mode_;
};

// ---------------------------------------------------------------- Trilu
// Over the last two dims [N, M]: upper keeps j - i >= k, lower keeps j - i <= k.
class TriluKernel final : public Kernel {
 public:
  explicit TriluKernel(const KernelInfo& info) : upper_(info.attr_int("upper", 1) != 0) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_trilu(ctx);
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
  r.add(ops::kDomain, "SliceGradSum", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<SliceGradSumKernel>(i); });
  r.add(ops::kDomain, "PadGrad", 1, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<PadGradKernel>(i); });
}

}  // namespace onnxtrain::kernels::cpu
