#include "onnxtrain/value.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "onnxtrain/error.h"

namespace onnxtrain {

MapData make_map(const Tensor& keys, const Tensor& values) {
  if (keys.rank() != 1 || values.rank() != 1 || keys.numel() != values.numel())
    throw_error<InvalidArgument>("a map needs 1-D keys and values of one length, got ", shape_to_string(keys.shape()),
                                 " and ", shape_to_string(values.shape()));
  if (keys.dtype() != DType::kInt64 && keys.dtype() != DType::kString)
    throw_error<InvalidArgument>("map keys must be int64 or string, got ", dtype_name(keys.dtype()));
  const size_t n = size_t(keys.numel());
  // Stable order by key: among equal keys the last stays (std::map assignment keeps the last).
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  auto less = [&](size_t a, size_t b) {
    return keys.dtype() == DType::kInt64 ? keys.data<int64_t>()[a] < keys.data<int64_t>()[b]
                                         : keys.data<std::string>()[a] < keys.data<std::string>()[b];
  };
  std::stable_sort(order.begin(), order.end(), less);
  std::vector<size_t> keep;
  for (size_t k = 0; k < n; ++k) {
    if (k + 1 < n && !less(order[k], order[k + 1])) continue;  // a later equal key follows
    keep.push_back(order[k]);
  }
  const int64_t m = int64_t(keep.size());
  MapData out{Tensor::empty(keys.dtype(), {m}), Tensor::empty(values.dtype(), {m})};
  for (int64_t k = 0; k < m; ++k) {
    const size_t from = keep[size_t(k)];
    if (keys.dtype() == DType::kInt64) out.keys.data<int64_t>()[k] = keys.data<int64_t>()[from];
    else out.keys.data<std::string>()[k] = keys.data<std::string>()[from];
    if (values.dtype() == DType::kString) {
      out.values.data<std::string>()[k] = values.data<std::string>()[from];
    } else {
      const size_t w = dtype_size(values.dtype());
      std::memcpy(static_cast<char*>(out.values.raw_data()) + size_t(k) * w,
                  static_cast<const char*>(values.raw_data()) + from * w, w);
    }
  }
  return out;
}

std::string map_type_string(DType key, DType value) {
  const std::string k = dtype_tensor_string(key);  // "tensor(string)"
  return "map(" + k.substr(7, k.size() - 8) + "," + dtype_tensor_string(value) + ")";
}

}  // namespace onnxtrain
