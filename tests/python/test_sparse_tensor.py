"""onnxruntime's SparseTensor API (SparseTensor, OrtSparseFormat, sparse OrtValues), sparse
initializers and sparse_tensor graph inputs/outputs with com.microsoft SparseToDenseMatMul. The
expectations are onnxruntime's (onnxruntime_test_python.py's test_sparse_tensor_* and
onnxruntime_test_python_sparse_matmul.py); the numbers are checked against numpy dense products."""
import gc
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as onnxrt
from onnxtrain.capi.onnxruntime_pybind11_state import OrtValueVector, RunOptions
from alias_run import run_alias

CPU = onnxrt.OrtDevice.make("cpu", 0)


def _dense(shape, values, indices):
    """numpy's dense tensor of COO data (linear or [NNZ, rank] indices)."""
    d = np.zeros(shape, values.dtype)
    idx = np.asarray(indices)
    if idx.ndim == 1:
        d.reshape(-1)[idx] = values
    else:
        d[tuple(idx.T)] = values
    return d


def _sparse_matmul_model(trans_a=0, trans_b=0, alpha=1.0, shape_a=(9, 9), shape_b=(9, 9)):
    node = helper.make_node("SparseToDenseMatMul", ["sparse_A", "dense_B"], ["dense_Y"], domain="com.microsoft",
                            transA=trans_a, transB=trans_b, alpha=alpha)
    graph = helper.make_graph(
        [node], "sparse_mm",
        [helper.make_sparse_tensor_value_info("sparse_A", TensorProto.FLOAT, list(shape_a)),
         helper.make_tensor_value_info("dense_B", TensorProto.FLOAT, list(shape_b))],
        [helper.make_tensor_value_info("dense_Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _sparse_initializer_as_output_model():
    # onnxruntime's sparse_initializer_as_output.onnx: no inputs, one sparse_tensor output that is a
    # sparse initializer.
    values = numpy_helper.from_array(np.array([1.764052391052246, 0.40015721321105957, 0.978738009929657],
                                              np.float32), "values")
    indices = numpy_helper.from_array(np.array([2, 3, 5], np.int64), "values_indices")
    sparse = helper.make_sparse_tensor(values, indices, [3, 3])
    graph = helper.make_graph([], "sparse_out", [],
                              [helper.make_sparse_tensor_value_info("values", TensorProto.FLOAT, [3, 3])],
                              sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_sparse_tensor_coo_format():
    shape = [9, 9]
    values = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    indices = np.array([3, 5, 15], dtype=np.int64)
    st = onnxrt.SparseTensor.sparse_coo_from_numpy(shape, values, indices, CPU)
    assert st.format() == onnxrt.OrtSparseFormat.ORT_SPARSE_COO
    assert st.dense_shape() == shape
    assert st.data_type() == "sparse_tensor(float)"
    assert st.device_name() == "cpu"
    values_ret = st.values()
    assert not values_ret.flags.writeable
    indices_ret = st.as_coo_view().indices()
    assert not indices_ret.flags.writeable
    gc.collect()
    np.testing.assert_array_equal(values_ret, values)
    np.testing.assert_array_equal(indices_ret, indices)
    # Numeric arrays are the tensor's memory, as in onnxruntime (referenced, not copied).
    assert np.shares_memory(values_ret, values) and np.shares_memory(indices_ret, indices)
    del values, indices
    gc.collect()
    np.testing.assert_array_equal(st.values(), [1.0, 2.0, 3.0])

    ort_value = onnxrt.OrtValue.ort_value_from_sparse_tensor(st)
    assert ort_value.is_sparse_tensor() and not ort_value.is_tensor() and ort_value.has_value()
    assert ort_value.data_type() == "sparse_tensor(float)"
    back = ort_value.as_sparse_tensor()
    assert isinstance(back, onnxrt.SparseTensor)
    assert not back.values().flags.writeable
    np.testing.assert_array_equal(back.as_coo_view().indices(), [3, 5, 15])
    with pytest.raises(RuntimeError):
        back.as_csrc_view()
    with pytest.raises(RuntimeError):
        back.as_blocksparse_view()
    with pytest.raises(RuntimeError):  # onnxruntime: not a tensor, so no numpy()
        ort_value.numpy()

    str_values = np.array(["xyz", "yxz", "zyx"], dtype=str)
    str_st = onnxrt.SparseTensor.sparse_coo_from_numpy(shape, str_values, np.array([3, 5, 15], np.int64), CPU)
    assert str_st.format() == onnxrt.OrtSparseFormat.ORT_SPARSE_COO
    assert str_st.data_type() == "sparse_tensor(string)"
    assert str_st.device_name() == "cpu"
    np.testing.assert_array_equal(str_st.values(), str_values)
    assert not str_st.as_coo_view().indices().flags.writeable

    # No CUDA device in this build: refused, as onnxruntime's CPU build refuses.
    with pytest.raises(RuntimeError, match="Cuda is not available"):
        st.to_cuda(onnxrt.OrtDevice.make("cuda", 0))


def test_sparse_tensor_coo_2d_indices_and_csr_format():
    values = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    coords = np.array([[0, 3], [0, 5], [1, 6]], dtype=np.int64)
    st = onnxrt.SparseTensor.sparse_coo_from_numpy([9, 9], values, coords, CPU)
    np.testing.assert_array_equal(st.as_coo_view().indices(), coords)

    inner = np.array([1, 1, 1], dtype=np.int64)
    outer = np.array([0, 1, 2, 3, 3, 3, 3, 3, 3, 3], dtype=np.int64)
    csr = onnxrt.SparseTensor.sparse_csr_from_numpy([9, 9], values, inner, outer, CPU)
    assert csr.format() == onnxrt.OrtSparseFormat.ORT_SPARSE_CSRC
    assert csr.dense_shape() == [9, 9] and csr.data_type() == "sparse_tensor(float)"
    inner_ret, outer_ret = csr.as_csrc_view().inner(), csr.as_csrc_view().outer()
    assert not inner_ret.flags.writeable and not outer_ret.flags.writeable
    gc.collect()
    np.testing.assert_array_equal(inner_ret, inner)
    np.testing.assert_array_equal(outer_ret, outer)
    with pytest.raises(RuntimeError):
        csr.as_coo_view()
    str_csr = onnxrt.SparseTensor.sparse_csr_from_numpy([9, 9], np.array(["xyz", "yxz", "zyx"]), inner, outer, CPU)
    assert str_csr.data_type() == "sparse_tensor(string)"
    assert str_csr.format() == onnxrt.OrtSparseFormat.ORT_SPARSE_CSRC

    c = csr._get_c_tensor()
    assert c.format == onnxrt.OrtSparseFormat.ORT_SPARSE_CSRC
    with pytest.raises(RuntimeError, match="readonly"):
        c.format = onnxrt.OrtSparseFormat.ORT_SPARSE_COO
    assert [int(f) for f in (onnxrt.OrtSparseFormat.ORT_SPARSE_UNDEFINED, onnxrt.OrtSparseFormat.ORT_SPARSE_COO,
                             onnxrt.OrtSparseFormat.ORT_SPARSE_CSRC,
                             onnxrt.OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE)] == [0, 1, 2, 4]


def test_blocksparse_made_and_read_back():
    C = onnxrt.capi._pybind_state
    values = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    idx = np.array([[0, 1], [1, 0]], dtype=np.int32)
    st = C.SparseTensor.blocksparse_from_numpy([4, 4], values, idx, CPU._get_c_device())
    assert st.format == onnxrt.OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE
    np.testing.assert_array_equal(st.get_blocksparse_data().indices(), idx)
    np.testing.assert_array_equal(st.values(), values)


def test_bad_sparse_tensor_arguments_are_refused():
    v = np.array([1.0, 2.0], np.float32)
    with pytest.raises(RuntimeError, match="1-D"):
        onnxrt.SparseTensor.sparse_coo_from_numpy([4], v.reshape(2, 1), np.array([0, 1]), CPU)
    with pytest.raises(RuntimeError, match="contiguous"):
        onnxrt.SparseTensor.sparse_coo_from_numpy([4], np.arange(4, dtype=np.float32)[::2], np.array([0, 1]), CPU)
    with pytest.raises(ValueError, match="COO indices"):
        onnxrt.SparseTensor.sparse_coo_from_numpy([4], v, np.array([0, 1, 2]), CPU)
    with pytest.raises(ValueError, match="negative"):
        onnxrt.SparseTensor.sparse_coo_from_numpy([-4], v, np.array([0, 1]), CPU)
    with pytest.raises(ValueError, match="inner indices"):
        onnxrt.SparseTensor.sparse_csr_from_numpy([2, 2], v, np.array([0]), np.array([0, 1, 2]), CPU)
    with pytest.raises(ValueError, match="outer indices"):
        onnxrt.SparseTensor.sparse_csr_from_numpy([2, 2], v, np.array([0, 1]), np.array([0, 2]), CPU)
    with pytest.raises(RuntimeError, match="Unsupported values data type"):
        onnxrt.SparseTensor.sparse_coo_from_numpy([4], np.array([None, None]), np.array([0, 1]), CPU)
    with pytest.raises(ValueError):  # memory on a device this build cannot reach
        onnxrt.SparseTensor.sparse_coo_from_numpy([4], v, np.array([0, 1]), onnxrt.OrtDevice.make("cuda", 0))
    with pytest.raises(RuntimeError, match="does not contain a SparseTensor"):
        onnxrt.OrtValue.ortvalue_from_numpy(v).as_sparse_tensor()


def test_run_sparse_output_only():
    sess = onnxrt.InferenceSession(_sparse_initializer_as_output_model(), providers=onnxrt.get_available_providers())
    assert sess.get_outputs()[0].type == "sparse_tensor(float)"
    res = sess._sess.run_with_ort_values({}, ["values"], RunOptions())
    assert isinstance(res, OrtValueVector)
    res = sess.run_with_ort_values(["values"], {})
    assert len(res) == 1 and isinstance(res[0], onnxrt.OrtValue)
    sparse_output = res[0].as_sparse_tensor()
    assert isinstance(sparse_output, onnxrt.SparseTensor)
    assert sparse_output.dense_shape() == [3, 3]
    np.testing.assert_array_equal(sparse_output.values(),
                                  np.array([1.764052391052246, 0.40015721321105957, 0.978738009929657], np.float32))
    np.testing.assert_array_equal(sparse_output.as_coo_view().indices(), [2, 3, 5])
    # run() and IOBinding hand it back sparse too (onnxruntime's AddNonTensor<SparseTensor>).
    (c_sparse,) = sess.run(None, {})
    assert isinstance(c_sparse, onnxrt.capi._pybind_state.SparseTensor)
    np.testing.assert_array_equal(c_sparse.get_coo_data().indices(), [2, 3, 5])
    binding = sess.io_binding()
    binding.bind_output("values")
    sess.run_with_iobinding(binding)
    (bound,) = binding.get_outputs()
    assert bound.is_sparse_tensor() and bound.data_type() == "sparse_tensor(float)" and bound.shape() == [3, 3]
    np.testing.assert_array_equal(bound.as_sparse_tensor().values(), sparse_output.values())
    assert isinstance(binding.copy_outputs_to_cpu()[0], onnxrt.capi._pybind_state.SparseTensor)


def _contrib_case():
    # onnxruntime's testRunContribSparseMatMul data: A in COO with [NNZ, 2] indices.
    a_values = np.arange(1, 54, dtype=np.float32)
    rows = [0] * 5 + [1] * 6 + [2] * 6 + [3] * 6 + [4] * 6 + [5] * 6 + [6] * 6 + [7] * 6 + [8] * 6
    cols = ([1, 2, 6, 7, 8] + [0, 1, 2, 6, 7, 8] * 2 + [3, 4, 5, 6, 7, 8] * 3 + [0, 1, 2, 3, 4, 5] * 3)
    a_indices = np.array(list(zip(rows, cols)), np.int64)
    b = np.array([0, 1, 2, 0, 0, 0, 3, 4, 5, 6, 7, 8, 0, 0, 0, 9, 10, 11, 12, 13, 14, 0, 0, 0, 15, 16, 17,
                  0, 0, 0, 18, 19, 20, 21, 22, 23, 0, 0, 0, 24, 25, 26, 27, 28, 29, 0, 0, 0, 30, 31, 32, 33, 34, 35,
                  36, 37, 38, 39, 40, 41, 0, 0, 0, 42, 43, 44, 45, 46, 47, 0, 0, 0, 48, 49, 50, 51, 52, 53, 0, 0, 0],
                 np.float32).reshape(9, 9)
    return a_values, a_indices, b


def test_run_contrib_sparse_matmul():
    a_values, a_indices, b = _contrib_case()
    a = onnxrt.OrtValue.ort_value_from_sparse_tensor(
        onnxrt.SparseTensor.sparse_coo_from_numpy([9, 9], a_values, a_indices, CPU))
    sess = onnxrt.InferenceSession(_sparse_matmul_model(), providers=onnxrt.get_available_providers())
    assert sess.get_inputs()[0].type == "sparse_tensor(float)"
    res = sess.run_with_ort_values(["dense_Y"], {"sparse_A": a, "dense_B": onnxrt.OrtValue.ortvalue_from_numpy(b)})
    y = res[0]
    assert y.is_tensor() and y.data_type() == "tensor(float)" and y.shape() == [9, 9]
    # onnxruntime's expected first row, and numpy's dense product for all of it.
    np.testing.assert_array_equal(y.numpy()[0], [546, 561, 576, 552, 564, 576, 39, 42, 45])
    np.testing.assert_array_equal(y.numpy(), _dense((9, 9), a_values, a_indices) @ b)


@pytest.mark.parametrize("trans_a,trans_b,alpha", [(0, 0, 1.0), (1, 0, 0.5), (0, 1, 2.0), (1, 1, -1.5)])
def test_sparse_matmul_csr_linear_and_attributes(trans_a, trans_b, alpha):
    rng = np.random.default_rng(3)
    dense_a = rng.standard_normal((5, 5)).astype(np.float32) * (rng.random((5, 5)) < 0.4)
    if trans_a:
        dense_a = dense_a[:4, :]  # A [4, 5], op(A) [5, 4]
    else:
        dense_a = dense_a[:, :4].copy()  # A [5, 4]
    b = rng.standard_normal((3, 4) if trans_b else (4, 3)).astype(np.float32)
    expected = alpha * ((dense_a.T if trans_a else dense_a) @ (b.T if trans_b else b))
    model = _sparse_matmul_model(trans_a, trans_b, alpha, dense_a.shape, b.shape)
    sess = onnxrt.InferenceSession(model)
    nz = np.flatnonzero(dense_a)
    feeds = {
        "coo_linear": onnxrt.SparseTensor.sparse_coo_from_numpy(list(dense_a.shape), dense_a.reshape(-1)[nz].copy(),
                                                                nz.astype(np.int64), CPU),
    }
    rows, cols = np.nonzero(dense_a)
    outer = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=dense_a.shape[0]))]).astype(np.int64)
    feeds["csr"] = onnxrt.SparseTensor.sparse_csr_from_numpy(list(dense_a.shape), dense_a[rows, cols].copy(),
                                                             cols.astype(np.int64), outer, CPU)
    for st in feeds.values():
        y = sess.run_with_ort_values(None, {"sparse_A": onnxrt.OrtValue.ort_value_from_sparse_tensor(st),
                                            "dense_B": onnxrt.OrtValue.ortvalue_from_numpy(b)})[0].numpy()
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_sparse_feeds_through_iobinding_and_ortvaluevector():
    a_values, a_indices, b = _contrib_case()
    a = onnxrt.OrtValue.ort_value_from_sparse_tensor(
        onnxrt.SparseTensor.sparse_coo_from_numpy([9, 9], a_values, a_indices, CPU))
    expected = _dense((9, 9), a_values, a_indices) @ b
    sess = onnxrt.InferenceSession(_sparse_matmul_model())
    binding = sess.io_binding()
    binding.bind_ortvalue_input("sparse_A", a)
    binding.bind_cpu_input("dense_B", b)
    binding.bind_output("dense_Y")
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], expected)

    feeds = OrtValueVector()
    feeds.push_back(a._get_c_value())
    feeds.push_back(onnxrt.OrtValue.ortvalue_from_numpy(b)._get_c_value())
    fetches = OrtValueVector()
    sess._sess.run_with_ortvaluevector(RunOptions(), ["sparse_A", "dense_B"], feeds, ["dense_Y"], fetches, None)
    np.testing.assert_array_equal(fetches[0].numpy(), expected)


def test_sparse_feed_errors():
    sess = onnxrt.InferenceSession(_sparse_matmul_model())
    b = onnxrt.OrtValue.ortvalue_from_numpy(np.ones((9, 9), np.float32))
    # A sparse value for a dense input: onnxruntime's type error.
    st = onnxrt.SparseTensor.sparse_coo_from_numpy([9, 9], np.ones(1, np.float32), np.array([0], np.int64), CPU)
    with pytest.raises(ValueError, match=r"Unexpected input data type.*sparse_tensor\(float\)"):
        sess.run_with_ort_values(None, {"sparse_A": onnxrt.OrtValue.ort_value_from_sparse_tensor(st),
                                        "dense_B": onnxrt.OrtValue.ort_value_from_sparse_tensor(st)})
    # A dense value for the sparse input: refused too, as onnxruntime refuses it, on every path.
    dense = onnxrt.OrtValue.ortvalue_from_numpy(np.ones((9, 9), np.float32))
    with pytest.raises(ValueError, match=r"Actual: \(tensor\(float\)\) , expected: \(sparse_tensor\(float\)\)"):
        sess.run_with_ort_values(None, {"sparse_A": dense, "dense_B": b})
    with pytest.raises(ValueError, match="Unexpected input data type"):
        sess.run(None, {"sparse_A": np.ones((9, 9), np.float32), "dense_B": np.ones((9, 9), np.float32)})
    binding = sess.io_binding()
    binding.bind_ortvalue_input("sparse_A", dense)
    binding.bind_ortvalue_input("dense_B", b)
    binding.bind_output("dense_Y")
    with pytest.raises(ValueError, match="Unexpected input data type"):
        sess.run_with_iobinding(binding)
    # An index past the dense shape: refused when densified, naming the input.
    bad = onnxrt.SparseTensor.sparse_coo_from_numpy([9, 9], np.ones(1, np.float32), np.array([81], np.int64), CPU)
    with pytest.raises(ValueError, match="sparse_A.*out of range"):
        sess.run_with_ort_values(None, {"sparse_A": onnxrt.OrtValue.ort_value_from_sparse_tensor(bad), "dense_B": b})
    bad_csr = onnxrt.SparseTensor.sparse_csr_from_numpy([9, 9], np.ones(1, np.float32), np.array([9], np.int64),
                                                        np.array([0] + [1] * 9, np.int64), CPU)
    with pytest.raises(ValueError, match="out of range"):
        sess.run_with_ort_values(None, {"sparse_A": onnxrt.OrtValue.ort_value_from_sparse_tensor(bad_csr),
                                        "dense_B": b})


def test_sparse_initializer_and_constant_sparse_value_run_dense():
    # y = x @ W, W a sparse initializer; z = x + C, C a Constant with a sparse_value.
    w_dense = np.zeros((3, 2), np.float32)
    w_dense[0, 1], w_dense[2, 0] = 4.0, -1.5
    w = helper.make_sparse_tensor(numpy_helper.from_array(np.array([4.0, -1.5], np.float32), "W"),
                                  numpy_helper.from_array(np.array([1, 4], np.int64), "W_idx"), [3, 2])
    c = helper.make_sparse_tensor(numpy_helper.from_array(np.array([7.0], np.float32), "C_values"),
                                  numpy_helper.from_array(np.array([[1]], np.int64), "C_idx"), [3])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"]),
         helper.make_node("Constant", [], ["C"], sparse_value=c),
         helper.make_node("Add", ["x", "C"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])], sparse_initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, z = onnxrt.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(y, x @ w_dense)
    np.testing.assert_array_equal(z, x + np.array([0, 7, 0], np.float32))


def test_alias_exposes_the_names(tmp_path):
    script = tmp_path / "names.py"
    script.write_text(
        "import onnxruntime\n"
        "from onnxruntime import SparseTensor, OrtSparseFormat, OrtArenaCfg, create_and_register_allocator\n"
        "from onnxruntime import create_and_register_allocator_v2\n"
        "from onnxruntime.capi._pybind_state import SparseTensor as CS, OrtSparseFormat as F, OrtArenaCfg as A\n"
        "from onnxruntime.capi.onnxruntime_pybind11_state import create_and_register_allocator as R\n"
        "from onnxruntime.capi.onnxruntime_inference_collection import SparseTensor as PS\n"
        "assert PS is SparseTensor and CS is not SparseTensor and F is OrtSparseFormat and A is OrtArenaCfg\n"
        "assert R is create_and_register_allocator\n"
        "print('NAMES OK')\n")
    r = run_alias(script, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "NAMES OK" in r.stdout


ORT_NODE = os.environ.get("ONNXTRAIN_ORT_NODE") or os.path.join(
    os.path.dirname(__file__), "..", "..", ".npm", "node_modules", "onnxruntime-node")
if not os.path.isdir(ORT_NODE):
    ORT_NODE = "/work/main/.npm/node_modules/onnxruntime-node"


@pytest.mark.skipif(not os.path.isdir(ORT_NODE) or shutil.which("node") is None,
                    reason="onnxruntime-node (scripts/install_onnxruntime_node.sh) or node is absent")
def test_sparse_initializers_match_onnxruntime(tmp_path):
    # A model whose weights are sparse initializers (2-D coordinates and linear indices) and a
    # Constant sparse_value, run by onnxruntime-node and by onnxtrain on the same input.
    rng = np.random.default_rng(7)
    w_idx = np.array([[0, 1], [2, 3], [4, 0], [5, 2]], np.int64)
    w = helper.make_sparse_tensor(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "W"),
                                  numpy_helper.from_array(w_idx, "W_idx"), [6, 4])
    b = helper.make_sparse_tensor(numpy_helper.from_array(np.array([0.5, -2.0], np.float32), "B"),
                                  numpy_helper.from_array(np.array([1, 3], np.int64), "B_idx"), [4])
    c = helper.make_sparse_tensor(numpy_helper.from_array(np.array([3.0], np.float32), "C_values"),
                                  numpy_helper.from_array(np.array([2], np.int64), "C_idx"), [4])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["s"]),
         helper.make_node("Constant", [], ["C"], sparse_value=c), helper.make_node("Mul", ["s", "C"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], sparse_initializer=[w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "sparse.onnx"
    path.write_bytes(model.SerializeToString())
    x = rng.standard_normal((3, 6)).astype(np.float32)
    js = tmp_path / "run.js"
    js.write_text(
        f"const ort = require({json.dumps(ORT_NODE)});\n"
        "(async () => {\n"
        f"  const s = await ort.InferenceSession.create({json.dumps(str(path))});\n"
        f"  const x = new ort.Tensor('float32', Float32Array.from({json.dumps(x.reshape(-1).tolist())}), [3, 6]);\n"
        "  const r = await s.run({x});\n"
        "  console.log(JSON.stringify(Array.from(r.y.data)));\n"
        "})().catch(e => { console.error(e); process.exit(1); });\n")
    r = subprocess.run(["node", str(js)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    expected = np.array(json.loads(r.stdout.strip().splitlines()[-1]), np.float32).reshape(3, 4)
    got = onnxrt.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
