// Helpers shared by CPU kernels: dtype dispatch, small tensor values, numpy broadcast iteration
// (shape logic any provider uses is in kernels/shape/common.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel.h"
#include "kernels/shape/common.h"

namespace onnxtrain::kernels::cpu {

// The provider-neutral shape helpers (kernels/shape/common.h), under the names CPU kernels use.
using shape::broadcast_shapes;
using shape::check_output_size;
using shape::check_table_size;
using shape::contiguous_strides;
using shape::dim_product;
using shape::normalize_axis;
using shape::read_int_list;
using shape::read_scalar_as_double;
using shape::read_list_input;
using shape::read_shape_value;
using shape::all_dynamic;
using shape::check_same_dtype;

/// Identity's prepare and run (cpu/elementwise.cpp), shared by the operators that pass a value
/// through (Optional, OptionalGetElement): Y = X, a tensor (a view where the executor allows it),
/// a sequence (the same tensors, handed on as Identity hands them) or nothing.
void identity_prepare(PrepareContext& ctx);
void identity_run(RunContext& ctx);

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

// ---------------------------------------------------------------- broadcasting
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

}  // namespace onnxtrain::kernels::cpu
