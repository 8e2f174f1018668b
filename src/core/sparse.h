// Sparse (COO) data made dense: shared by the loader (sparse initializers, Constant's sparse_value)
// and the Python SparseTensor (densified where a session takes it in).
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "onnxtrain/error.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain {

/// The linear positions in a tensor of `dims` of COO indices `idx` (int64 or int32) for `nnz`
/// values: `idx` of shape [nnz] (linear indices) or [nnz, rank] (coordinates). Throws E naming
/// `what` when the shape is neither or an index is out of range.
template <class E>
std::vector<int64_t> coo_linear_indices(const Tensor& idx, int64_t nnz, const Shape& dims, const std::string& what) {
  std::vector<int64_t> linear(static_cast<size_t>(nnz));
  if (nnz == 0) return linear;
  if (idx.dtype() != DType::kInt64 && idx.dtype() != DType::kInt32)
    throw_error<E>(what, ": indices must be int64 (or int32), got ", dtype_name(idx.dtype()));
  auto at = [&](int64_t i) {
    return idx.dtype() == DType::kInt64 ? idx.data<int64_t>()[i] : int64_t(idx.data<int32_t>()[i]);
  };
  int64_t numel = 1;
  for (int64_t d : dims) numel *= d;
  const int64_t rank = int64_t(dims.size());
  if (idx.rank() == 1 && idx.shape()[0] == nnz) {
    for (int64_t i = 0; i < nnz; ++i) {
      const int64_t k = at(i);
      if (k < 0 || k >= numel)
        throw_error<E>(what, ": linear index ", k, " (entry ", i, ") is out of range [0, ", numel, ")");
      linear[size_t(i)] = k;
    }
    return linear;
  }
  if (idx.rank() != 2 || idx.shape()[0] != nnz || idx.shape()[1] != rank)
    throw_error<E>(what, ": indices have shape ", shape_to_string(idx.shape()), ", expected [", nnz, "] (linear) or [",
                   nnz, ", ", rank, "] (coordinates) for ", nnz, " values");
  for (int64_t i = 0; i < nnz; ++i) {
    int64_t k = 0;
    for (int64_t a = 0; a < rank; ++a) {
      const int64_t c = at(i * rank + a);
      if (c < 0 || c >= dims[size_t(a)])
        throw_error<E>(what, ": index ", c, " of entry ", i, " at axis ", a, " is out of range [0, ", dims[size_t(a)], ")");
      k = k * dims[size_t(a)] + c;
    }
    linear[size_t(i)] = k;
  }
  return linear;
}

/// A zero tensor of `dims` with values[i] at linear position linear[i] (positions already checked).
inline Tensor scatter_dense(const Tensor& values, const Shape& dims, const std::vector<int64_t>& linear) {
  Tensor dense = Tensor::zeros(values.dtype(), dims);
  if (values.dtype() == DType::kString) {
    for (size_t i = 0; i < linear.size(); ++i) dense.data<std::string>()[linear[i]] = values.data<std::string>()[i];
    return dense;
  }
  const size_t es = dtype_size(values.dtype());
  auto* dst = static_cast<char*>(dense.raw_data());
  const auto* src = static_cast<const char*>(values.raw_data());
  for (size_t i = 0; i < linear.size(); ++i) std::memcpy(dst + size_t(linear[i]) * es, src + i * es, es);
  return dense;
}

}  // namespace onnxtrain
