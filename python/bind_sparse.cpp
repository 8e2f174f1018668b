// onnxruntime's SparseTensor classes of onnxruntime_pybind11_state (see sparse.h). What they give
// back (values(), the views' index arrays) are read-only numpy arrays over the tensor's memory, as
// onnxruntime's are; string values come back as copies.
#include <cstring>

#include "core/sparse.h"
#include "onnxtrain/error.h"
#include "ortvalue.h"
#include "sparse.h"

namespace onnxtrain::python {

namespace {

// A read-only numpy array over `t`'s memory (strings: an object copy).
py::object readonly_array(const Tensor& t) {
  py::object a = array_from_tensor(t);
  a.attr("setflags")(py::arg("write") = false);
  return a;
}

bool c_contiguous(const py::array& a) { return (a.flags() & py::array::c_style) != 0; }

// The values of a from_numpy factory: numeric arrays viewed (C-contiguous required, as onnxruntime
// requires), str / bytes arrays copied; anything else refused.
Tensor values_of(const py::array& values) {
  const char kind = values.dtype().kind();
  if (kind == 'U' || kind == 'S') return strings_from_array(values);
  if (kind == 'O' || kind == 'V' || kind == 'c' || kind == 'M' || kind == 'm')
    throw_error<RuntimeError>("Unsupported values data type: ", std::string(py::str(values.dtype())));
  if (!c_contiguous(values)) throw_error<RuntimeError>("Require contiguous numpy array of values");
  const DType dt = dtype_from_numpy(values.dtype());
  return Tensor::wrap(dt, Shape(values.shape(), values.shape() + values.ndim()), const_cast<void*>(values.data()),
                      python_keepalive(values));
}

template <class T>
Tensor indices_of(const py::array_t<T>& idx) {
  if (!c_contiguous(idx)) throw_error<RuntimeError>("Require contiguous numpy array of indices");
  return Tensor::wrap(std::is_same_v<T, int64_t> ? DType::kInt64 : DType::kInt32,
                      Shape(idx.shape(), idx.shape() + idx.ndim()), const_cast<T*>(idx.data()), python_keepalive(idx));
}

// A from_numpy factory's device: the CPU only.
constexpr const char* kSparseOnHost = "SparseTensor: sparse tensors";

Shape dense_shape_of(const std::vector<int64_t>& dims) {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0) throw_error<InvalidArgument>("SparseTensor: dense_shape ", shape_to_string(dims), " has a negative dimension at axis ", i);
  int64_t n;
  if (!checked_numel(dims, &n)) throw_error<InvalidArgument>("SparseTensor: dense_shape ", shape_to_string(dims), " overflows");
  return Shape(dims.begin(), dims.end());
}

SparseTensorPtr coo_from_numpy(const std::vector<int64_t>& dense_shape, const py::array& values,
                               const py::array_t<int64_t>& indices, const OrtDeviceObj& device) {
  if (values.ndim() != 1)
    throw_error<RuntimeError>("Expecting values 1-D numpy values array for COO format. Got dims: ", values.ndim());
  check_host_device(device, kSparseOnHost);
  auto s = std::make_shared<SparseTensorObj>();
  s->format = SparseFormat::kCoo;
  s->dense_shape = dense_shape_of(dense_shape);
  s->values = values_of(values);
  Tensor idx = indices_of(indices);
  const int64_t nnz = s->values.numel(), rank = int64_t(s->dense_shape.size());
  // onnxruntime's rule: NNZ linear indices (1-D), or NNZ coordinate tuples ([NNZ, rank], 2-D).
  const bool linear = idx.rank() == 1 && idx.numel() == nnz;
  const bool coords = idx.rank() == 2 && idx.shape()[0] == nnz && idx.shape()[1] == rank;
  if (!linear && !coords && !(nnz == 0 && idx.numel() == 0))
    throw_error<InvalidArgument>("SparseTensor: COO indices of shape ", shape_to_string(idx.shape()), " for ", nnz,
                                 " values: expected [", nnz, "] (linear) or [", nnz, ", ", rank, "] (coordinates)");
  s->indices = {std::move(idx)};
  return s;
}

SparseTensorPtr csr_from_numpy(const std::vector<int64_t>& dense_shape, const py::array& values,
                               const py::array_t<int64_t>& inner, const py::array_t<int64_t>& outer,
                               const OrtDeviceObj& device) {
  if (values.ndim() != 1 || inner.ndim() != 1 || outer.ndim() != 1)
    throw_error<RuntimeError>("Expecting all data to be 1-D numpy arrays for CSR format.");
  check_host_device(device, kSparseOnHost);
  auto s = std::make_shared<SparseTensorObj>();
  s->format = SparseFormat::kCsrc;
  s->dense_shape = dense_shape_of(dense_shape);
  if (s->dense_shape.size() != 2)
    throw_error<InvalidArgument>("SparseTensor: CSR(C) needs a 2-D dense_shape, got ", shape_to_string(s->dense_shape));
  s->values = values_of(values);
  Tensor in = indices_of(inner), out = indices_of(outer);
  const int64_t nnz = s->values.numel();
  if (in.numel() != nnz)
    throw_error<InvalidArgument>("SparseTensor: CSR(C) has ", in.numel(), " inner indices for ", nnz, " values");
  if (nnz > 0 && out.numel() != s->dense_shape[0] + 1)
    throw_error<InvalidArgument>("SparseTensor: CSR(C) has ", out.numel(), " outer indices, expected rows + 1 = ",
                                 s->dense_shape[0] + 1);
  s->indices = {std::move(in), std::move(out)};
  return s;
}

SparseTensorPtr blocksparse_from_numpy(const std::vector<int64_t>& dense_shape, const py::array& values,
                                       const py::array_t<int32_t>& indices, const OrtDeviceObj& device) {
  check_host_device(device, kSparseOnHost);
  auto s = std::make_shared<SparseTensorObj>();
  s->format = SparseFormat::kBlockSparse;
  s->dense_shape = dense_shape_of(dense_shape);
  s->values = values_of(values);
  s->indices = {indices_of(indices)};
  return s;
}

const Tensor& index_tensor(const SparseTensorObj& s, SparseFormat f, size_t k, const char* format_name) {
  if (s.format != f) throw_error<RuntimeError>("This sparse tensor does not contain ", format_name, " format");
  return s.indices[k];
}

// A view of one format's indices; keeps the sparse tensor alive.
struct SparseView {
  SparseTensorPtr tensor;
};
struct CooView : SparseView {};
struct CsrView : SparseView {};
struct BlockSparseView : SparseView {};

}  // namespace

std::string sparse_type_string(const SparseTensorObj& s) { return "sparse_" + dtype_tensor_string(s.values.dtype()); }

Tensor sparse_to_dense(const SparseTensorObj& s, const std::string& what) {
  if (s.format == SparseFormat::kBlockSparse)
    throw_error<NotImplemented>(what, ": a BlockSparse tensor cannot be densified here (COO and CSR(C) can)");
  const Shape& dims = s.dense_shape;
  int64_t numel;
  checked_numel(dims, &numel);
  const int64_t nnz = s.values.numel();
  if (nnz > numel)
    throw_error<InvalidArgument>(what, ": ", nnz, " values for a dense shape ", shape_to_string(dims));
  if (s.format == SparseFormat::kCoo)
    return scatter_dense(s.values, dims, coo_linear_indices<InvalidArgument>(s.indices[0], nnz, dims, what));
  // CSR(C): row r holds the values outer[r] .. outer[r + 1] - 1, at columns inner[...].
  std::vector<int64_t> linear(static_cast<size_t>(nnz));
  if (nnz > 0) {
    const int64_t rows = dims[0], cols = dims[1];
    const int64_t* inner = s.indices[0].data<int64_t>();
    const int64_t* outer = s.indices[1].data<int64_t>();
    if (outer[0] != 0 || outer[rows] != nnz)
      throw_error<InvalidArgument>(what, ": CSR(C) outer indices must run from 0 to NNZ = ", nnz, ", got ", outer[0],
                                   " to ", outer[rows]);
    for (int64_t r = 0; r < rows; ++r) {
      if (outer[r + 1] < outer[r]) throw_error<InvalidArgument>(what, ": CSR(C) outer indices decrease at row ", r);
      for (int64_t i = outer[r]; i < outer[r + 1]; ++i) {
        if (inner[i] < 0 || inner[i] >= cols)
          throw_error<InvalidArgument>(what, ": index ", inner[i], " of entry ", i, " is out of range [0, ", cols, ")");
        linear[size_t(i)] = r * cols + inner[i];
      }
    }
  }
  return scatter_dense(s.values, dims, linear);
}

SparseTensorPtr sparse_coo_of_dense(const Tensor& t) {
  auto s = std::make_shared<SparseTensorObj>();
  s->format = SparseFormat::kCoo;
  s->dense_shape = t.shape();
  std::vector<int64_t> nz;
  const size_t es = dtype_size(t.dtype());
  const bool strings = t.dtype() == DType::kString;
  const auto* p = static_cast<const char*>(t.raw_data());
  static const char kZero[16] = {};
  for (int64_t i = 0; i < t.numel(); ++i) {
    const bool zero = strings ? t.data<std::string>()[i].empty() : std::memcmp(p + size_t(i) * es, kZero, es) == 0;
    if (!zero) nz.push_back(i);
  }
  const int64_t nnz = int64_t(nz.size());
  s->values = Tensor::empty(t.dtype(), {nnz});
  for (int64_t i = 0; i < nnz; ++i) {
    if (strings) s->values.data<std::string>()[i] = t.data<std::string>()[nz[size_t(i)]];
    else std::memcpy(static_cast<char*>(s->values.raw_data()) + size_t(i) * es, p + size_t(nz[size_t(i)]) * es, es);
  }
  s->indices = {Tensor::from_vector<int64_t>({nnz}, nz)};
  return s;
}

void bind_sparse(py::module_& m) {
  py::enum_<SparseFormat>(m, "OrtSparseFormat", "onnxruntime's sparse formats.")
      .value("ORT_SPARSE_UNDEFINED", SparseFormat::kUndefined)
      .value("ORT_SPARSE_COO", SparseFormat::kCoo)
      .value("ORT_SPARSE_CSRC", SparseFormat::kCsrc)
      .value("ORT_SPARSE_BLOCK_SPARSE", SparseFormat::kBlockSparse);

  py::class_<CooView>(m, "SparseCooView", "The COO indices of a SparseTensor.")
      .def("indices", [](const CooView& v) { return readonly_array(v.tensor->indices[0]); },
           "The COO indices (int64, [NNZ] linear or [NNZ, rank]) as a read-only array over the tensor's memory.");
  py::class_<CsrView>(m, "SparseCsrView", "The CSR(C) indices of a SparseTensor.")
      .def("inner", [](const CsrView& v) { return readonly_array(v.tensor->indices[0]); },
           "The inner (column) indices, int64, read-only.")
      .def("outer", [](const CsrView& v) { return readonly_array(v.tensor->indices[1]); },
           "The outer (row start) indices, int64, read-only.");
  py::class_<BlockSparseView>(m, "SparseBlockSparseView", "The BlockSparse indices of a SparseTensor.")
      .def("indices", [](const BlockSparseView& v) { return readonly_array(v.tensor->indices[0]); },
           "The block indices (int32), read-only.");

  py::class_<SparseTensorObj, SparseTensorPtr>(m, "SparseTensor",
                                               "A sparse tensor in CPU memory (COO, CSR(C) or BlockSparse).")
      .def_static("sparse_coo_from_numpy", &coo_from_numpy, py::arg("dense_shape"), py::arg("values"),
                  py::arg("coo_indices"), py::arg("ort_device"),
                  "A COO sparse tensor over numpy arrays: values 1-D, indices int64 [NNZ] (linear) or [NNZ, rank]. "
                  "Numeric arrays are used as they are (kept alive, not copied; C-contiguous required); str "
                  "values are copied.")
      .def_static("sparse_csr_from_numpy", &csr_from_numpy, py::arg("dense_shape"), py::arg("values"),
                  py::arg("inner_indices"), py::arg("outer_indices"), py::arg("ort_device"),
                  "A CSR(C) sparse tensor over numpy arrays (2-D dense shape; inner: NNZ column indices, outer: "
                  "rows + 1 row starts).")
      .def_static("blocksparse_from_numpy", &blocksparse_from_numpy, py::arg("dense_shape"), py::arg("values"),
                  py::arg("indices"), py::arg("ort_device"),
                  "A BlockSparse tensor over numpy arrays (values of blocks, int32 block indices); it can be made "
                  "and read back, not densified or run.")
      .def("values", [](const SparseTensorObj& s) { return readonly_array(s.values); },
           "The values as a read-only numpy array over the tensor's memory (strings: a copy).")
      .def("get_coo_data", [](const SparseTensorPtr& s) {
             index_tensor(*s, SparseFormat::kCoo, 0, "COO");
             return CooView{{s}};
           }, "The COO view; raises when the tensor is not COO.")
      .def("get_csrc_data", [](const SparseTensorPtr& s) {
             index_tensor(*s, SparseFormat::kCsrc, 0, "CSR(C)");
             return CsrView{{s}};
           }, "The CSR(C) view; raises when the tensor is not CSR(C).")
      .def("get_blocksparse_data", [](const SparseTensorPtr& s) {
             index_tensor(*s, SparseFormat::kBlockSparse, 0, "BlockSparse");
             return BlockSparseView{{s}};
           }, "The BlockSparse view; raises when the tensor is not BlockSparse.")
      .def("to_cuda", [](const SparseTensorObj&, const OrtDeviceObj&) -> py::object {
             throw_error<RuntimeError>("Cuda is not available in this build");
           }, py::arg("ort_device"), "Raises: this Python build has no CUDA device (as onnxruntime's CPU build).")
      .def("dense_shape", [](const SparseTensorObj& s) { return std::vector<int64_t>(s.dense_shape.begin(), s.dense_shape.end()); },
           "The dense shape as a list of ints.")
      .def("device_name", [](const SparseTensorObj&) { return ort_device_name(OrtDeviceObj{}); },
           "onnxruntime's name of the device holding the buffers: 'Cpu'.")
      .def("data_type", &sparse_type_string, "'sparse_tensor(float)', ...")
      .def_property(
          "format", [](const SparseTensorObj& s) { return s.format; },
          [](SparseTensorObj&, SparseFormat) { throw_error<RuntimeError>("This is a readonly property"); },
          "The OrtSparseFormat (read-only).");
}

}  // namespace onnxtrain::python
