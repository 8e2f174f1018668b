// Provider-neutral shape logic (src/kernels/shape/: any provider's kernels use it, none copies it).
// Axes, values of host inputs, dimension products, strides, numpy broadcasting and the size checks
// every kernel applies to the shapes it computes before anything is allocated.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel.h"

namespace onnxtrain::kernels::shape {

/// Maps axis in [-rank, rank) to [0, rank); fails naming the node otherwise.
template <class Ctx>
int64_t normalize_axis(const Ctx& ctx, int64_t axis, int64_t rank, const char* what = "axis") {
  if (axis < -rank || axis >= rank)
    ctx.fail(what, " ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

/// Reads a 1-D (or scalar) int32/int64 tensor as int64 values (a host input: shape, axes, pads).
std::vector<int64_t> read_int_list(const Tensor& t);
/// Reads a scalar of any numeric type as double.
double read_scalar_as_double(const Tensor& t);

/// Reads optional input i, a 1-D int32/int64 tensor in host memory (starts, axes, pads, repeats),
/// into `out`; `present` (when given) says whether the node has it. False when it exists but its
/// value is unknown now (prepare runs again at run time with every value known).
bool read_list_input(const PrepareContext& ctx, size_t i, const char* what, std::vector<int64_t>* out,
                     bool* present = nullptr);

/// Reads input i, the 1-D int64 shape of the tensor a backward kernel produces (shape(X)), and
/// checks that a tensor of that shape and `dt` can exist; false when its value is unknown now. A
/// missing shape input is an error, not a value to wait for: a node whose inputs are all constant
/// runs right after prepare (folding), its output never allocated.
bool read_shape_value(const PrepareContext& ctx, size_t i, DType dt, Shape* out);

/// Marks every output dynamic with input 0's element type (shapes known only at run time).
void all_dynamic(PrepareContext& ctx);

/// Fails with NotImplemented naming the node unless `supported` (the error a CPU dtype dispatch
/// throws): `require_element_type(ctx, dt, dtype_is_float(dt))`.
void require_element_type(const PrepareContext& ctx, DType dt, bool supported);
/// require_element_type for the float types (float, double, float16, bfloat16).
inline void require_float(const PrepareContext& ctx, DType dt) { require_element_type(ctx, dt, dtype_is_float(dt)); }

/// The inputs of an elementwise operator or gradient kernel (dY, X, ...): inputs 0..n_required-1
/// present, input `ref` of a float type, every present input of its element type and shape.
/// Returns that element type.
DType check_elementwise_float_inputs(const PrepareContext& ctx, size_t n_required, size_t ref);

/// Inputs first..last-1 (those present) have input 0's element type; fails naming the node.
void check_same_dtype(const PrepareContext& ctx, size_t first, size_t last);

/// Product of shape[begin:end].
inline int64_t dim_product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

/// Row-major strides of a shape.
std::vector<int64_t> contiguous_strides(const Shape& s);

/// Numpy broadcast of shapes; returns false when incompatible.
bool broadcast_shapes(const std::vector<Shape>& shapes, Shape* out);

/// Fails naming the node when a tensor of `shape` and `dt` cannot exist (negative dimension,
/// element count overflowing int64) or would exceed the allocation limit in force (the session's
/// memory limit): shapes computed from data or attributes, checked before anything is allocated.
template <class Ctx>
void check_output_size(const Ctx& ctx, const Shape& shape, DType dt) {
  int64_t n;
  uint64_t bytes;
  if (!checked_numel(shape, &n) || __builtin_mul_overflow(uint64_t(n), uint64_t(dtype_size(dt)), &bytes))
    ctx.fail("output shape ", shape_to_string(shape), " is invalid or too large (negative dimension or element count "
             "overflowing int64)");
  if (bytes > allocation_limit())
    ctx.fail("output shape ", shape_to_string(shape), " is too large: ", bytes, " bytes of ", dtype_name(dt), ", over ",
             allocation_limit_text());
}

/// Tables a kernel builds on the host (count entries of entry_bytes each, `what` names them) are
/// refused past the allocation limit, before anything is allocated.
template <class Ctx>
void check_table_size(const Ctx& ctx, int64_t count, size_t entry_bytes, const char* what) {
  uint64_t bytes;
  if (count < 0 || __builtin_mul_overflow(uint64_t(count), uint64_t(entry_bytes), &bytes) || bytes > allocation_limit())
    ctx.fail(what, " of ", count, " entries is too large (", entry_bytes, " bytes each), over ", allocation_limit_text());
}

}  // namespace onnxtrain::kernels::shape
