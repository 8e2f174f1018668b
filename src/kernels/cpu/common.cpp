#include "kernels/cpu/common.h"

namespace onnxtrain::kernels::cpu {

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

bool BroadcastPlan::init(const std::vector<Shape>& inputs) {
  if (inputs.size() > kMaxInputs) return false;
  if (!broadcast_shapes(inputs, &out_shape)) return false;
  const size_t rank = out_shape.size();
  const size_t nin = inputs.size();
  out_numel = shape_numel(out_shape);
  // Per input, per output axis: does the input vary along it (dim == out dim and > 1)?
  std::vector<std::vector<int64_t>> full_strides(nin, std::vector<int64_t>(rank, 0));
  for (size_t i = 0; i < nin; ++i) {
    const Shape& s = inputs[i];
    const size_t off = rank - s.size();
    int64_t acc = 1;
    for (size_t a = s.size(); a-- > 0;) {
      full_strides[i][off + a] = (s[a] == 1 && out_shape[off + a] != 1) ? 0 : acc;
      acc *= s[a];
    }
  }
  // Collapse adjacent output axes when every input's strides are compatible.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(nin);
  for (size_t a = 0; a < rank; ++a) {
    if (out_shape[a] == 1) continue;
    if (!dims.empty()) {
      bool merge = true;
      for (size_t i = 0; i < nin; ++i)
        if (strides[i].back() != full_strides[i][a] * out_shape[a]) merge = false;
      if (merge) {
        dims.back() *= out_shape[a];
        for (size_t i = 0; i < nin; ++i) strides[i].back() = full_strides[i][a];
        continue;
      }
    }
    dims.push_back(out_shape[a]);
    for (size_t i = 0; i < nin; ++i) strides[i].push_back(full_strides[i][a]);
  }
  inner_step.assign(nin, 0);
  if (dims.empty()) {  // scalar-like output (numel 0 or 1)
    inner = out_numel;
    runs = out_numel > 0 ? 1 : 0;
    outer_dims.clear();
    outer_strides.assign(nin, {});
    for (size_t i = 0; i < nin; ++i) inner_step[i] = 0;
    return true;
  }
  // The innermost collapsed axis becomes the run when every input steps by 0 or 1 along it.
  bool unit = true;
  for (size_t i = 0; i < nin; ++i)
    if (strides[i].back() != 0 && strides[i].back() != 1) unit = false;
  if (unit) {
    inner = dims.back();
    for (size_t i = 0; i < nin; ++i) {
      inner_step[i] = strides[i].back();
      strides[i].pop_back();
    }
    dims.pop_back();
  } else {
    inner = 1;
  }
  if (dims.size() > kMaxDims) return false;
  outer_dims = dims;
  outer_strides = strides;
  runs = 1;
  for (int64_t d : dims) runs *= d;
  if (out_numel == 0) runs = 0;
  return true;
}

}  // namespace onnxtrain::kernels::cpu
