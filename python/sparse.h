// onnxruntime's SparseTensor (onnxruntime_pybind11_state.SparseTensor, its COO / CSR(C) /
// BlockSparse views, OrtSparseFormat), shared by bind_sparse.cpp (which defines them) and the
// OrtValue and session bindings (a sparse OrtValue, densified where a session takes it in).
#pragma once

#include <memory>
#include <vector>

#include "convert.h"

namespace onnxtrain::python {

/// onnxruntime's OrtSparseFormat values.
enum class SparseFormat : int { kUndefined = 0, kCoo = 1, kCsrc = 2, kBlockSparse = 4 };

/// A sparse tensor on the CPU: the values and the format's index tensors (COO: {indices} of shape
/// [NNZ] (linear) or [NNZ, 2] ([NNZ, rank] in general); CSR(C): {inner, outer}; BlockSparse:
/// {indices} int32). Numeric values and indices view the numpy arrays they were made from (each
/// tensor keeps its array alive); strings are copies.
struct SparseTensorObj {
  SparseFormat format = SparseFormat::kUndefined;
  Shape dense_shape;
  Tensor values;
  std::vector<Tensor> indices;
};
using SparseTensorPtr = std::shared_ptr<SparseTensorObj>;

/// The dense tensor `s` stands for (zeros but at its indices). Throws InvalidArgument naming `what`
/// when an index is out of range or the format cannot be densified (BlockSparse).
Tensor sparse_to_dense(const SparseTensorObj& s, const std::string& what);
/// The COO sparse tensor of a dense one: its nonzero elements, in row-major order, with linear
/// indices (what onnxruntime hands back for a sparse output made from dense data).
SparseTensorPtr sparse_coo_of_dense(const Tensor& t);
/// "sparse_tensor(float)".
std::string sparse_type_string(const SparseTensorObj& s);

/// Registers OrtSparseFormat, SparseCooView, SparseCsrView, SparseBlockSparseView, SparseTensor.
void bind_sparse(py::module_& m);

}  // namespace onnxtrain::python
