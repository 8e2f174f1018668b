#include "kernels/shape/reduce.h"

namespace onnxtrain::kernels::shape {

Shape reduced_shape(const Shape& in, const std::vector<bool>& mask, bool keepdims) {
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!mask[i]) out.push_back(in[i]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

AxisSplit softmax_split(const PrepareContext& ctx, const Shape& s, int64_t axis, bool coerce) {
  const int64_t rank = int64_t(s.size());
  if (coerce) {
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a > rank) ctx.fail("axis ", axis, " is out of range for rank ", rank);
    AxisSplit r;
    r.outer = dim_product(s, 0, size_t(a));
    r.n = dim_product(s, size_t(a), s.size());
    return r;
  }
  if (rank == 0) ctx.fail("input must have rank >= 1");
  return AxisSplit(s, size_t(normalize_axis(ctx, axis, rank)));
}

}  // namespace onnxtrain::kernels::shape
