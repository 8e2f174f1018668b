#include "kernels/shape/collective.h"

#include <string>

namespace onnxtrain::kernels::shape {

Bucket check_bucket(const PrepareContext& ctx, size_t first) {
  Bucket b;
  for (size_t i = first; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || ctx.input_kind(i) != Value::Kind::kTensor) ctx.fail("input ", i, " must be a tensor");
    const DType d = ctx.input_dtype(i);
    if (d != DType::kFloat32 && d != DType::kFloat64)
      ctx.fail("gradient ", i - first + 1, " is ", dtype_name(d), ", not float");
    if (i == first) b.dtype = d;
    if (d != b.dtype) ctx.fail("gradients of one bucket share their element type");
    b.sizes.push_back(shape_numel(ctx.input_shape(i)));
    b.count += b.sizes.back();
  }
  if (b.sizes.empty()) ctx.fail("a bucket holds at least one gradient");
  return b;
}

ReduceMode read_reduce_mode(const KernelInfo& info) {
  const std::string mode = info.attr_string("mode", "mean");
  if (mode != "mean" && mode != "adasum") info.fail("mode must be 'mean' or 'adasum', got '", mode, "'");
  return mode == "adasum" ? ReduceMode::kAdasum : ReduceMode::kMean;
}

Bucket check_gradient_reduce_start(const PrepareContext& ctx) {
  if (ctx.num_inputs() < 2) ctx.fail("expects the contribution and at least one gradient");
  if (ctx.input_dtype(0) != DType::kFloat64 || shape_numel(ctx.input_shape(0)) != 1)
    ctx.fail("input 0 (the contribution) must be float64 [1]");
  return check_bucket(ctx, 1);
}

Bucket check_gradient_reduce_wait(const PrepareContext& ctx) {
  if (ctx.num_inputs() < 2 || ctx.num_outputs() != ctx.num_inputs() - 1)
    ctx.fail("expects the token and n gradients, and n outputs");
  if (ctx.input_dtype(0) != DType::kInt64) ctx.fail("input 0 (the token) must be int64");
  return check_bucket(ctx, 1);
}

size_t read_zero_pieces(const KernelInfo& info) {
  const int64_t pieces = info.attr_int("pieces");
  if (pieces < 0 || pieces >= int64_t(info.node().inputs.size()))
    info.fail("attribute pieces = ", pieces, " must count the parts among the ", info.node().inputs.size(), " inputs");
  return size_t(pieces);
}

ZeroGeom check_zero_all_gather(const PrepareContext& ctx, size_t pieces) {
  if (ctx.num_inputs() < pieces + 1 || ctx.num_outputs() != ctx.num_inputs() - pieces)
    ctx.fail("expects ", pieces, " parts, then n weights and n outputs");
  for (size_t i = 0; i < pieces; ++i)
    if (!ctx.has_input(i) || ctx.input_kind(i) != Value::Kind::kTensor) ctx.fail("part ", i, " must be a tensor");
  ZeroGeom g;
  DType pdt = DType::kUndefined;
  for (size_t i = 0; i < pieces; ++i) {
    g.part_sizes.push_back(shape_numel(ctx.input_shape(i)));
    if (i == 0) pdt = ctx.input_dtype(0);
    if (ctx.input_dtype(i) != pdt) ctx.fail("the parts differ in element type");
  }
  g.weights = check_bucket(ctx, pieces);
  if (pieces > 0 && pdt != g.weights.dtype) ctx.fail("the parts and the weights differ in element type");
  return g;
}

}  // namespace onnxtrain::kernels::shape
