#include "kernels/shape/movement.h"

#include <algorithm>
#include <string>

namespace onnxtrain::kernels::shape {

std::vector<int64_t> transpose_perm(const PrepareContext& ctx, const std::vector<int64_t>& perm_attr, bool has_perm,
                                    size_t r) {
  std::vector<int64_t> perm = perm_attr;
  if (!has_perm)
    for (size_t i = 0; i < r; ++i) perm.push_back(int64_t(r - 1 - i));
  if (perm.size() != r) ctx.fail("perm ", shape_to_string(perm), " does not match rank ", r);
  std::vector<bool> seen(r, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(r) || seen[size_t(p)]) ctx.fail("perm ", shape_to_string(perm), " is not a permutation");
    seen[size_t(p)] = true;
  }
  return perm;
}

Shape permuted(const Shape& in, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = in[size_t(perm[i])];
  return out;
}

namespace {

// Legacy models concatenate 1-D empty tensors with tensors of another rank.
bool is_empty_1d(const PrepareContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input_rank(i) == 1 && ctx.input_shape(i)[0] == 0;
}

}  // namespace

ConcatGeom concat_geometry(const PrepareContext& ctx, int64_t axis_attr) {
  const size_t n = ctx.num_inputs();
  if (n == 0) ctx.fail("needs at least one input");
  check_same_dtype(ctx, 0, n);
  size_t ref = 0;
  for (size_t i = 0; i < n; ++i)
    if (!is_empty_1d(ctx, i)) {
      ref = i;
      break;
    }
  const Shape& s0 = ctx.input_shape(ref);
  const int64_t r = int64_t(s0.size());
  if (r == 0) ctx.fail("cannot concatenate scalars");
  ConcatGeom g;
  g.axis = normalize_axis(ctx, axis_attr, r);
  const size_t axis = size_t(g.axis);
  g.output = s0;
  g.output[axis] = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!ctx.has_input(i)) ctx.fail("input ", i, " is missing");
    const Shape& s = ctx.input_shape(i);
    if (s.size() != s0.size()) {
      if (is_empty_1d(ctx, i)) continue;
      ctx.fail("input ", i, " has rank ", s.size(), ", expected ", r);
    }
    for (size_t d = 0; d < s.size(); ++d)
      if (d != axis && s[d] != s0[d])
        ctx.fail("input ", i, " has shape ", shape_to_string(s), ", incompatible with ", shape_to_string(s0),
                 " outside axis ", g.axis);
    if (__builtin_add_overflow(g.output[axis], s[axis], &g.output[axis])) ctx.fail("output too large");
    g.used.push_back(i);
  }
  check_output_size(ctx, g.output, ctx.input_dtype(0));
  return g;
}

SplitAttrs read_split_attrs(const KernelInfo& info) {
  SplitAttrs at;
  at.axis = info.attr_int("axis", 0);
  at.from_input = info.opset() >= 13 || (info.opset() == 1 && !info.has_attr("split"));
  at.has_attr = info.has_attr("split");
  at.split = info.attr_ints("split", {});
  at.num_outputs = info.opset() >= 18 ? info.attr_int("num_outputs", 0) : 0;
  if (info.opset() >= 18 && info.has_attr("num_outputs") && at.num_outputs != int64_t(info.node().outputs.size()))
    info.fail("num_outputs ", at.num_outputs, " differs from the ", info.node().outputs.size(), " outputs");
  return at;
}

bool prepare_split(PrepareContext& ctx, const SplitAttrs& at, SplitRows* rows) {
  const Shape& in = ctx.input_shape(0);
  int64_t axis;
  std::vector<int64_t> sizes;
  if (!split_sizes(ctx, at, &axis, &sizes)) {
    all_dynamic(ctx);
    return false;
  }
  const size_t n = sizes.size();
  const int64_t inner = dim_product(in, size_t(axis) + 1, in.size());
  rows->outer = dim_product(in, 0, size_t(axis));
  rows->row = in[size_t(axis)] * inner;
  rows->widths.clear();
  for (size_t i = 0; i < n; ++i) {
    Shape s = in;
    s[size_t(axis)] = sizes[i];
    rows->widths.push_back(sizes[i] * inner);
    if (n == 1) ctx.set_output_alias(0, 0, s);
    else ctx.set_output(i, ctx.input_dtype(0), s);
  }
  return true;
}

bool split_sizes(const PrepareContext& ctx, const SplitAttrs& at, int64_t* axis_out, std::vector<int64_t>* sizes_out) {
  const Shape& in = ctx.input_shape(0);
  const int64_t axis = normalize_axis(ctx, at.axis, int64_t(in.size()));
  const int64_t d = in[size_t(axis)];
  const int64_t n = int64_t(ctx.num_outputs());
  std::vector<int64_t> sizes = at.split;
  bool given = at.has_attr;
  if (at.from_input && !read_list_input(ctx, 1, "split", &sizes, &given)) return false;
  if (given) {
    if (int64_t(sizes.size()) != n) ctx.fail("split ", shape_to_string(sizes), " has ", sizes.size(), " sizes for ", n, " outputs");
    int64_t sum = 0;
    bool overflow = false;
    for (int64_t s : sizes) {
      if (s < 0) ctx.fail("split ", shape_to_string(sizes), " has a negative size");
      overflow |= __builtin_add_overflow(sum, s, &sum);
    }
    if (overflow || sum != d) ctx.fail("split ", shape_to_string(sizes), " does not sum to dimension ", d, " of axis ", axis);
  } else if (at.num_outputs > 0) {
    const int64_t chunk = (d + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) sizes.push_back(std::clamp<int64_t>(d - i * chunk, 0, chunk));
  } else {
    if (d % n != 0) ctx.fail("dimension ", d, " of axis ", axis, " cannot be split into ", n, " equal parts");
    sizes.assign(size_t(n), d / n);
  }
  *axis_out = axis;
  *sizes_out = std::move(sizes);
  return true;
}

SliceAttrs read_slice_attrs(const KernelInfo& info, bool grad) {
  SliceAttrs at;
  at.from_input = grad || info.opset() >= 10;
  if (!at.from_input) {
    at.starts = info.attr_ints("starts");
    at.ends = info.attr_ints("ends");
    at.has_axes = info.has_attr("axes");
    at.axes = info.attr_ints("axes", {});
  }
  return at;
}

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


bool tile_geometry(const PrepareContext& ctx, Shape* out, std::vector<int64_t>* repeats) {
  std::vector<int64_t>& reps = *repeats;
  if (!read_list_input(ctx, 1, "repeats", &reps)) return false;
  const Shape& in = ctx.input_shape(0);
  const size_t r = in.size();
  if (reps.size() != r) ctx.fail("repeats ", shape_to_string(reps), " does not match rank ", r);
  out->assign(r, 0);
  for (size_t i = 0; i < r; ++i) {
    if (reps[i] < 0) ctx.fail("repeats ", shape_to_string(reps), " has a negative value");
    if (__builtin_mul_overflow(in[i], reps[i], &(*out)[i])) ctx.fail("repeats ", shape_to_string(reps), " overflow");
  }
  check_output_size(ctx, *out, ctx.input_dtype(0));
  return true;
}

PadMode read_pad_mode(const KernelInfo& info, int64_t opset) {
  const std::string mode = info.attr_string("mode", "constant");
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "edge") return PadMode::kEdge;
  if (mode == "wrap" && opset >= 19) return PadMode::kWrap;
  info.fail("unsupported mode '", mode, "'");
}

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


bool pad_inputs(const PrepareContext& ctx, int64_t opset, const std::vector<int64_t>& pads_attr,
                std::vector<int64_t>* pads, std::vector<int64_t>* axes, bool* has_axes) {
  *pads = pads_attr;
  *has_axes = false;
  if (opset < 11) return true;
  const DType dt = ctx.input_dtype(0);
  if (!ctx.has_input(1)) ctx.fail("pads input is required");
  if (!read_list_input(ctx, 1, "pads", pads) || (opset >= 18 && !read_list_input(ctx, 3, "axes", axes, has_axes)))
    return false;
  if (ctx.has_input(2)) {
    if (ctx.input_dtype(2) != dt) ctx.fail("constant_value has type ", dtype_name(ctx.input_dtype(2)), ", expected ", dtype_name(dt));
    if (shape_numel(ctx.input_shape(2)) != 1) ctx.fail("constant_value must be a scalar, got ", shape_to_string(ctx.input_shape(2)));
  }
  return true;
}

void check_trilu(const PrepareContext& ctx) {
  if (ctx.input_rank(0) < 2) ctx.fail("input must have rank >= 2, got ", shape_to_string(ctx.input_shape(0)));
  if (ctx.has_input(1) && shape_numel(ctx.input_shape(1)) != 1)
    ctx.fail("k must be a scalar, got shape ", shape_to_string(ctx.input_shape(1)));
}

}  // namespace onnxtrain::kernels::shape
