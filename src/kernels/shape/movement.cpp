#include "kernels/shape/movement.h"

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

}  // namespace onnxtrain::kernels::shape
