// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Reductions and the softmax family: axes lists (attribute or input), the reduced-axes mask, the
// output shape, and the [outer, n, inner] view around one axis; ArgMax/ArgMin, CumSum, TopK and
// the softmax gradients' checks and shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

/// [outer, n, inner] view of a tensor around one axis.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
  AxisSplit() = default;
  AxisSplit(const Shape& s, size_t axis)
      : outer(dim_product(s, 0, axis)), n(axis < s.size() ? s[axis] : 1), inner(dim_product(s, axis + 1, s.size())) {}
};

/// Reads a small int tensor (axes, k, axis inputs: int32 or int64, scalar or 1-D), naming the
/// node on a wrong type.
template <class Ctx>
std::vector<int64_t> read_ints(const Ctx& ctx, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32)
    ctx.fail(what, " must be int32 or int64, got ", dtype_name(t.dtype()));
  if (t.rank() > 1) ctx.fail(what, " must be a scalar or 1-D, got shape ", shape_to_string(t.shape()));
  return read_int_list(t);
}

/// Reduced-axes mask from an axes list (negative axes wrap; duplicates fail). Empty: all axes.
template <class Ctx>
std::vector<bool> axes_mask(const Ctx& ctx, const std::vector<int64_t>& axes, size_t rank) {
  std::vector<bool> m(rank, axes.empty());
  for (int64_t a : axes) {
    const int64_t k = normalize_axis(ctx, a, int64_t(rank), "axes value");
    if (m[size_t(k)]) ctx.fail("axis ", a, " appears twice in axes");
    m[size_t(k)] = true;
  }
  return m;
}

/// The output shape of a reduction over the axes `mask` marks: dropped, or kept as 1 (keepdims).
Shape reduced_shape(const Shape& in, const std::vector<bool>& mask, bool keepdims);

/// A reduction of a contiguous tensor, collapsed: size-1 dims dropped, adjacent dims that are all
/// reduced or all kept merged into one run. The innermost run (`inner` elements) is reduced (`row`:
/// contiguous row reductions) or kept (column reductions); `kept` and `red` hold the other runs as
/// (dim, stride) pairs, outermost first. Nothing reduced: rows of length 1.
struct ReduceGeometry {
  struct Run {
    int64_t dim, stride;
  };
  Shape out_shape;
  int64_t out_numel = 0, red_numel = 0;
  bool row = true;
  int64_t inner = 1;
  std::vector<Run> kept, red;
};
ReduceGeometry reduce_geometry(const Shape& in, const std::vector<bool>& mask, bool keepdims);

/// Registers a Reduce* operator whose `make(axes_input)` gives the kernel factory: axes from the
/// attribute before opset `axes_input_since`, from input 1 (a host input) from it on. An operator
/// whose axes moved to input 1 at 18 also reads input 1 at 17 where the node has one: a graph
/// lowered to 17 keeps opset 18's form when the axes are computed at run time (ir/opset_lower.h).
template <class Make>
void add_reduce_kernels(KernelRegistry& r, const std::string& op, int64_t axes_input_since, Make make) {
  if (axes_input_since != 18) {
    r.add("", op, 1, axes_input_since - 1, make(false));
  } else {
    r.add("", op, 1, 16, make(false));
    KernelFactory attr = make(false), input = make(true);
    r.add(
        "", op, 17, 17,
        [attr, input](const KernelInfo& i) {
          return i.node().inputs.size() > 1 && !i.node().inputs[1].empty() ? input(i) : attr(i);
        },
        {1});
  }
  r.add("", op, axes_input_since, kMaxOpsetAll, make(true), {1});
}

/// [outer, n, inner] view of a softmax-family input: coerced to 2-D at axis (opset < 13: inner is
/// 1) or along one axis.
AxisSplit softmax_split(const PrepareContext& ctx, const Shape& s, int64_t axis, bool coerce);

/// ArgMax / ArgMin over attribute `axis` (`what` names the operator): the axis must not be
/// empty; the [outer, n, inner] view and the int64 output's shape (the axis dropped or kept as 1).
AxisSplit arg_reduce_geometry(const PrepareContext& ctx, int64_t axis, bool keepdims, const char* what, Shape* out);

/// CumSum(X, axis): the axis input a required int32/int64 scalar, X of rank >= 1.
void check_cumsum_inputs(const PrepareContext& ctx);

/// SoftmaxGrad / LogSoftmaxGrad(dY, Y): dY (of element type `dt`) and Y agree in type and shape.
void check_softmax_grad_inputs(const PrepareContext& ctx, DType dt);

/// TopK's attributes: axis, largest, and k (an attribute before opset 10, input 1 after).
struct TopKAttrs {
  int64_t axis = -1, k = 0;
  bool largest = true;
};
TopKAttrs read_topk_attrs(const KernelInfo& info);
/// k (checked against the axis) and the output shape of Values and Indices; false when the K
/// input is not known now.
bool topk_geometry(const PrepareContext& ctx, const TopKAttrs& at, int64_t* k, AxisSplit* split, Shape* out);

}  // namespace onnxtrain::kernels::shape
