// Helpers shared by the gradient rules (rules.cpp) and their portable-mode expansions
// (portable.cpp): attribute factories, static dims and shapes, constants of a float type.
#pragma once

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/rule_context.h"
#include "ir/emitter.h"

namespace onnxtrain::autodiff::detail {

using Ctx = RuleContext;

// Attribute factories: the emitter's.
inline constexpr auto iattr = &ir::Emitter::int_attr;
inline constexpr auto fattr = &ir::Emitter::float_attr;
inline constexpr auto intsattr = &ir::Emitter::ints_attr;
inline constexpr auto sattr = &ir::Emitter::string_attr;
inline constexpr auto graph_attr = &ir::Emitter::graph_attr;

// The forward node's attributes without `drop`, plus `add`.
inline std::vector<ir::Attribute> attrs_but(Ctx& c, const std::vector<std::string>& drop, std::vector<ir::Attribute> add = {}) {
  for (const auto& a : c.attrs())
    if (!std::count(drop.begin(), drop.end(), a.name)) add.push_back(a);
  return add;
}

// Dimension `axis` of v when inference knows it, else -1.
inline int64_t static_dim(Ctx& c, const std::string& v, int64_t axis) {
  const ir::TypeInfo* t = c.type(v);
  if (!t || !t->has_shape || axis < 0 || axis >= int64_t(t->dims.size()) || !t->dims[size_t(axis)].fixed()) return -1;
  return t->dims[size_t(axis)].value;
}

// Tensor of v's float type holding `value` everywhere, or (eye) on the diagonal of a square matrix.
inline Tensor filled(Ctx& c, const std::string& v, const Shape& shape, double value, bool eye = false) {
  const DType dt = c.dtype(v);
  Tensor t = Tensor::zeros(dt, shape);
  const int64_t step = eye ? shape[0] + 1 : 1;
  for (int64_t i = 0; i < t.numel(); i += step) {
    if (dt == DType::kFloat64) t.data<double>()[i] = value;
    else if (dt == DType::kFloat32) t.data<float>()[i] = float(value);
    else if (dt == DType::kFloat16) t.data<float16>()[i] = float16(float(value));
    else if (dt == DType::kBFloat16) t.data<bfloat16>()[i] = bfloat16(float(value));
    else c.fail("'", v, "' has non-float element type ", dtype_name(dt));
  }
  return t;
}

// Shape tensor [head..., dims from.. of v]: a constant when v's shape is static.
inline std::string shape_with_tail(Ctx& c, std::vector<int64_t> head, const std::string& v, int64_t from) {
  if (auto s = c.static_shape(v)) {
    head.insert(head.end(), s->begin() + from, s->end());
    return c.ints(head);
  }
  const std::string tail = c.slice(c.shape_of(v), {from}, {std::numeric_limits<int64_t>::max()}, {0});
  return c.op("Concat", {c.ints(head), tail}, {iattr("axis", 0)});
}

// LpPool's p: a float attribute at opset 1, an int after.
inline double lp_norm(Ctx& c) { return c.opset() < 2 ? c.attr_float("p", 2.f) : double(c.attr_int("p", 2)); }

inline int64_t known_rank(Ctx& c, const std::string& v) {
  const int64_t r = c.rank(v);
  if (r < 0) c.fail("the rank of '", v, "' is unknown (ONNX type inference failed)");
  return r;
}

inline int64_t norm_axis(Ctx& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) c.fail("axis ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// Dimension `axis` of v as a 1-D int64 [1] (a constant when static).
inline std::string dim_of(Ctx& c, const std::string& v, int64_t axis) {
  const int64_t d = static_dim(c, v, axis);
  return d >= 0 ? c.ints({d}) : c.op("Gather", {c.shape_of(v), c.ints({axis})});
}

// An integer list given as an input (or attribute): its name ("" when absent) and its value when
// it is a constant.
struct IntList {
  std::string name;
  std::optional<std::vector<int64_t>> value;
};

// Two-element tensor {a, b} of a float type.
inline Tensor float_pair(Ctx& c, DType dt, double a, double b) {
  switch (dt) {
    case DType::kFloat32: return Tensor::from_vector<float>({2}, {float(a), float(b)});
    case DType::kFloat64: return Tensor::from_vector<double>({2}, {a, b});
    case DType::kFloat16: return Tensor::from_vector<float16>({2}, {float16(float(a)), float16(float(b))});
    case DType::kBFloat16: return Tensor::from_vector<bfloat16>({2}, {bfloat16(float(a)), bfloat16(float(b))});
    default: c.fail("element type ", dtype_name(dt), " is not a float type");
  }
}

}  // namespace onnxtrain::autodiff::detail
