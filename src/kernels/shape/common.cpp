#include "kernels/shape/common.h"

#include <algorithm>

namespace onnxtrain::kernels::shape {

std::vector<int64_t> read_int_list(const Tensor& t) {
  std::vector<int64_t> r(size_t(t.numel()));
  if (t.dtype() == DType::kInt64) {
    const int64_t* p = t.data<int64_t>();
    for (int64_t i = 0; i < t.numel(); ++i) r[size_t(i)] = p[i];
  } else if (t.dtype() == DType::kInt32) {
    const int32_t* p = t.data<int32_t>();
    for (int64_t i = 0; i < t.numel(); ++i) r[size_t(i)] = p[i];
  } else {
    throw_error<InvalidArgument>("expected an int32 or int64 tensor, got ", t.describe());
  }
  return r;
}

double read_scalar_as_double(const Tensor& t) {
  if (t.numel() != 1) throw_error<InvalidArgument>("expected a single value, got ", t.describe());
  double v = 0;
  switch (t.dtype()) {
    case DType::kFloat32: v = *t.data<float>(); break;
    case DType::kFloat64: v = *t.data<double>(); break;
    case DType::kFloat16: v = float(*t.data<float16>()); break;
    case DType::kBFloat16: v = float(*t.data<bfloat16>()); break;
    case DType::kInt8: v = *t.data<int8_t>(); break;
    case DType::kInt16: v = *t.data<int16_t>(); break;
    case DType::kInt32: v = *t.data<int32_t>(); break;
    case DType::kInt64: v = double(*t.data<int64_t>()); break;
    case DType::kUInt8: v = *t.data<uint8_t>(); break;
    case DType::kUInt16: v = *t.data<uint16_t>(); break;
    case DType::kUInt32: v = *t.data<uint32_t>(); break;
    case DType::kUInt64: v = double(*t.data<uint64_t>()); break;
    case DType::kBool: v = *t.data<bool>() ? 1 : 0; break;
    default: throw_error<InvalidArgument>("expected a numeric scalar, got ", t.describe());
  }
  return v;
}

bool read_list_input(const PrepareContext& ctx, size_t i, const char* what, std::vector<int64_t>* out, bool* present) {
  if (present) *present = ctx.has_input(i);
  if (!ctx.has_input(i)) return true;
  const Tensor* t = ctx.input_value(i);
  if (!t) return false;
  if (t->rank() > 1 || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32))
    ctx.fail(what, " must be a 1-D int64 tensor, got ", t->describe());
  *out = read_int_list(*t);
  return true;
}

bool read_shape_value(const PrepareContext& ctx, size_t i, DType dt, Shape* out) {
  if (!ctx.has_input(i)) ctx.fail("the shape input (input ", i, ") is missing");
  if (ctx.input_rank(i) != 1 || ctx.input_dtype(i) != DType::kInt64)
    ctx.fail("shape input must be 1-D int64, got ", dtype_name(ctx.input_dtype(i)), shape_to_string(ctx.input_shape(i)));
  const Tensor* t = ctx.input_value(i);
  if (!t) return false;
  *out = read_int_list(*t);
  check_output_size(ctx, *out, dt);
  return true;
}

void all_dynamic(PrepareContext& ctx) {
  for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output_dynamic(i, ctx.input_dtype(0));
}

void require_element_type(const PrepareContext& ctx, DType dt, bool supported) {
  if (!supported)
    throw_error<NotImplemented>(ctx.node().describe(), ": element type ", dtype_name(dt), " is not supported");
}

DType check_elementwise_float_inputs(const PrepareContext& ctx, size_t n_required, size_t ref) {
  for (size_t i = 0; i < n_required; ++i)
    if (!ctx.has_input(i)) ctx.fail("input ", i, " is missing");
  const DType dt = ctx.input_dtype(ref);
  require_float(ctx, dt);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && (ctx.input_dtype(i) != dt || ctx.input_shape(i) != ctx.input_shape(ref)))
      ctx.fail("input ", i, " is ", dtype_name(ctx.input_dtype(i)), shape_to_string(ctx.input_shape(i)), ", input ", ref,
               " is ", dtype_name(dt), shape_to_string(ctx.input_shape(ref)));
  return dt;
}

void check_same_dtype(const PrepareContext& ctx, size_t first, size_t last) {
  for (size_t i = first; i < last; ++i)
    if (ctx.has_input(i) && ctx.input_dtype(i) != ctx.input_dtype(0))
      ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(i)), ", expected ",
               dtype_name(ctx.input_dtype(0)));
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

bool broadcast_shapes(const std::vector<Shape>& shapes, Shape* out) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape r(rank, 1);
  for (const auto& s : shapes) {
    const size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      const int64_t d = s[i];
      int64_t& o = r[off + i];
      if (d == o) continue;
      if (d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      return false;
    }
  }
  // A zero-sized dimension broadcast against 1 stays 0 (handled above since d==0 replaces o==1).
  *out = std::move(r);
  return true;
}

}  // namespace onnxtrain::kernels::shape
