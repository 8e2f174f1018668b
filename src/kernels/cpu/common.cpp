#include "kernels/cpu/common.h"

namespace onnxtrain::kernels::cpu {

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
