// Helpers shared by CPU kernels: dtype dispatch, axis handling, numpy broadcasting.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels::cpu {

// ---------------------------------------------------------------- dtype dispatch
template <class... Ts>
struct TypeList {};

template <class... A, class... B>
constexpr TypeList<A..., B...> operator+(TypeList<A...>, TypeList<B...>) {
  return {};
}

using FloatTypes = TypeList<float, double, float16, bfloat16>;
using SignedIntTypes = TypeList<int8_t, int16_t, int32_t, int64_t>;
using UnsignedIntTypes = TypeList<uint8_t, uint16_t, uint32_t, uint64_t>;
using IntTypes = decltype(SignedIntTypes{} + UnsignedIntTypes{});
using NumericTypes = decltype(FloatTypes{} + IntTypes{});
using PodTypes = decltype(NumericTypes{} + TypeList<bool>{});
using AllTypes = decltype(PodTypes{} + TypeList<std::string>{});
using IndexTypes = TypeList<int32_t, int64_t>;

namespace detail {
template <class F, class... Ts>
bool dispatch_list(DType dt, F& f, TypeList<Ts...>) {
  return ((dt == dtype_v<Ts> ? (f.template operator()<Ts>(), true) : false) || ...);
}
}  // namespace detail

/// Calls f.template operator()<T>() for the C++ type T of `dt` among `List`; otherwise throws
/// NotImplemented naming the node:
///   dispatch<FloatTypes>(x.dtype(), ctx.node(), [&]<class T>() { ... });
template <class List, class F>
void dispatch(DType dt, const ir::Node& node, F&& f) {
  if (!detail::dispatch_list(dt, f, List{}))
    throw_error<NotImplemented>(node.describe(), ": element type ", dtype_name(dt), " is not supported");
}

/// Bytes-level dispatch for pure data movement: calls f.template operator()<T>() with an unsigned
/// integer type of the element size (or std::string for strings).
template <class F>
void dispatch_by_size(DType dt, const ir::Node& node, F&& f) {
  switch (dt == DType::kString ? 0 : dtype_size(dt)) {
    case 0:
      if (dt == DType::kString) {
        f.template operator()<std::string>();
        return;
      }
      break;
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    case 8: f.template operator()<uint64_t>(); return;
    default: break;
  }
  throw_error<NotImplemented>(node.describe(), ": element type ", dtype_name(dt), " is not supported");
}

/// Float32 working type for reduced-precision floats, else T itself.
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<float16> {
  using type = float;
};
template <>
struct compute_type<bfloat16> {
  using type = float;
};
template <class T>
using compute_t = typename compute_type<T>::type;

// ---------------------------------------------------------------- wrapping integer arithmetic
// Integer kernels wrap around on overflow (as numpy and onnxruntime do) instead of overflowing
// signed arithmetic (undefined behaviour); for floating point these are the plain operations.
// Small types are promoted first, so the unsigned product never overflows int.
template <class V>
using wrap_unsigned_t = std::make_unsigned_t<decltype(V() + 0)>;
template <class V>
V wrap_add(V a, V b) {
  if constexpr (std::is_integral_v<V>) return V(wrap_unsigned_t<V>(a) + wrap_unsigned_t<V>(b));
  else return a + b;
}
template <class V>
V wrap_mul(V a, V b) {
  if constexpr (std::is_integral_v<V>) return V(wrap_unsigned_t<V>(a) * wrap_unsigned_t<V>(b));
  else return a * b;
}
template <class V>
V wrap_neg(V a) {
  if constexpr (std::is_integral_v<V>) return V(wrap_unsigned_t<V>(0) - wrap_unsigned_t<V>(a));
  else return -a;
}

// ---------------------------------------------------------------- axes
/// Maps axis in [-rank, rank) to [0, rank); fails naming the node otherwise.
template <class Ctx>
int64_t normalize_axis(const Ctx& ctx, int64_t axis, int64_t rank, const char* what = "axis") {
  if (axis < -rank || axis >= rank)
    ctx.fail(what, " ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

/// Reads a 1-D (or scalar) int32/int64 tensor as int64 values.
std::vector<int64_t> read_int_list(const Tensor& t);
/// Reads a scalar of any numeric type as double.
double read_scalar_as_double(const Tensor& t);

/// Product of shape[begin:end].
inline int64_t dim_product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

/// Row-major strides of a shape.
std::vector<int64_t> contiguous_strides(const Shape& s);

// ---------------------------------------------------------------- broadcasting
/// Numpy broadcast of shapes; returns false when incompatible.
bool broadcast_shapes(const std::vector<Shape>& shapes, Shape* out);

/// Iteration plan for an n-ary elementwise op with numpy broadcasting. Built in prepare(), used
/// in run(): the output is walked in contiguous runs of `inner` elements; in each run every input
/// advances by 0 or 1 per element (inner_step).
struct BroadcastPlan {
  Shape out_shape;
  int64_t out_numel = 0;
  int64_t inner = 1;                             // elements per run
  int64_t runs = 0;                              // number of runs
  std::vector<int64_t> outer_dims;               // collapsed outer dims (runs = product)
  std::vector<std::vector<int64_t>> outer_strides;  // per input, per outer dim
  std::vector<int64_t> inner_step;               // per input: 0 (broadcast) or 1

  static constexpr size_t kMaxInputs = 16, kMaxDims = 16;
  /// False when the shapes do not broadcast (or more than kMaxInputs inputs / kMaxDims collapsed
  /// dims: combine variadic inputs pairwise).
  bool init(const std::vector<Shape>& inputs);

  /// Calls f(out_offset, in_offsets, n) for runs [r0, r1): out elements out_offset..+n map to
  /// input i elements in_offsets[i] + k * inner_step[i].
  template <class F>
  void for_runs(int64_t r0, int64_t r1, F&& f) const {
    if (r0 >= r1) return;  // nothing to walk (and an empty shape's zero dims must not divide r0)
    const size_t nin = inner_step.size();
    const size_t nd = outer_dims.size();
    int64_t idx[16] = {0};
    int64_t offs[16] = {0};
    // decompose r0
    int64_t rem = r0;
    for (size_t d = nd; d-- > 0;) {
      idx[d] = rem % outer_dims[d];
      rem /= outer_dims[d];
    }
    for (size_t i = 0; i < nin; ++i) {
      int64_t o = 0;
      for (size_t d = 0; d < nd; ++d) o += idx[d] * outer_strides[i][d];
      offs[i] = o;
    }
    for (int64_t r = r0; r < r1; ++r) {
      f(r * inner, static_cast<const int64_t*>(offs), inner);
      for (size_t d = nd; d-- > 0;) {
        ++idx[d];
        for (size_t i = 0; i < nin; ++i) offs[i] += outer_strides[i][d];
        if (idx[d] < outer_dims[d]) break;
        for (size_t i = 0; i < nin; ++i) offs[i] -= outer_strides[i][d] * outer_dims[d];
        idx[d] = 0;
      }
    }
  }
};

/// Grain (runs per chunk) so that one chunk holds roughly `target` elements.
inline int64_t grain_for(int64_t inner, int64_t target = 32768) {
  return std::max<int64_t>(1, target / std::max<int64_t>(inner, 1));
}

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

}  // namespace onnxtrain::kernels::cpu
