"""Inference sessions fuse linear layers and the exact GELU (src/runtime/conv_fusion.cpp, from
graph_optimization_level ORT_ENABLE_EXTENDED on) and pack constant weights of Gemm and MatMul once
(src/kernels/cpu/linalg.cpp): a transformer-like feed-forward block exported by torch.onnx gives
PyTorch's float64 outputs with and without the fusions; the optimized model shows MatMul + Add as
Gemm (with Reshapes around 3-D inputs) and the GELU as com.onnxtrain Gelu; patterns whose
intermediate values are read elsewhere or whose weights a feed can override stay; Gemm and MatMul
with initializer weights match numpy's float64 products over transposes, alpha, beta and every
shape of C."""
import copy
import io
from collections import Counter

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot
from test_conv_fusion import session

ALL = ot.GraphOptimizationLevel.ORT_ENABLE_ALL
BASIC = ot.GraphOptimizationLevel.ORT_ENABLE_BASIC


class FeedForward(torch.nn.Module):
    """Linear -> exact GELU -> Linear on [seq, batch, hidden] (torch.onnx: MatMul + Add, and the
    GELU as Div, Erf, Add, Mul, Mul), then a residual Add."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(32, 64)
        self.l2 = torch.nn.Linear(64, 32)

    def forward(self, x):
        return x + self.l2(torch.nn.functional.gelu(self.l1(x)))


def op_counts(path):
    return Counter((n.domain, n.op_type) for n in onnx.load(path).graph.node)


@pytest.fixture(scope="module")
def feed_forward():
    torch.manual_seed(0)
    m = FeedForward().eval()
    x = torch.randn(6, 3, 32)
    f = io.BytesIO()
    torch.onnx.export(copy.deepcopy(m), x, f, input_names=["x"], output_names=["y"], opset_version=13)
    with torch.no_grad():
        expected = copy.deepcopy(m).double()(x.double()).numpy()
    return f.getvalue(), x.numpy(), expected


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_feed_forward_gives_torch_outputs(feed_forward, tmp_path, threads):
    data, x, expected = feed_forward
    exported = Counter((n.domain, n.op_type) for n in onnx.load_from_string(data).graph.node)
    assert exported[("", "MatMul")] == 2 and exported[("", "Erf")] == 1, exported
    path = str(tmp_path / "optimized.onnx")
    y = session(data, ALL, threads, path).run(None, {"x": x})[0]
    y_plain = session(data, BASIC, threads).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y, y_plain, rtol=1e-5, atol=1e-6)
    ops = op_counts(path)
    assert ops[("", "Gemm")] == 2 and ops[("", "MatMul")] == 0 and ops[("", "Reshape")] == 4, ops
    assert ops[("com.onnxtrain", "Gelu")] == 1 and ops[("", "Erf")] == 0 and ops[("", "Mul")] == 0, ops
    assert ops[("", "Add")] == 1, ops  # the residual
    # The optimized model is itself a model onnxtrain runs, with the same outputs.
    np.testing.assert_array_equal(session(path, BASIC, threads).run(None, {"x": x})[0], y)


def test_lower_levels_keep_the_exported_nodes(feed_forward, tmp_path):
    data, x, expected = feed_forward
    path = str(tmp_path / "basic.onnx")
    y = session(data, BASIC, 1, path).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    ops = op_counts(path)
    assert ops[("", "MatMul")] == 2 and ops[("", "Erf")] == 1 and ops[("", "Gemm")] == 0, ops


def matmul_add_model(x_shape, bias_first, bias_shape, w_is_input=False, extra_output=False):
    rng = np.random.default_rng(1)
    K, N = x_shape[-1], 24
    w = rng.standard_normal((K, N)).astype(np.float32)
    b = rng.standard_normal(bias_shape).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Add", ["b", "p"] if bias_first else ["p", "b"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    if w_is_input:  # an initializer that is also a graph input: a feed may override it
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [K, N]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal(x_shape).astype(np.float32)
    expected = x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64)
    return model.SerializeToString(), x, expected


@pytest.mark.parametrize("x_shape,bias_first,bias_shape", [
    ((9, 16), False, (24,)), ((9, 16), True, (1, 24)), ((2, 5, 16), True, (24,)), ((2, 3, 4, 16), False, (1, 24))])
def test_matmul_add_becomes_gemm(tmp_path, x_shape, bias_first, bias_shape):
    data, x, expected = matmul_add_model(x_shape, bias_first, bias_shape)
    path = str(tmp_path / "opt.onnx")
    y = session(data, ALL, 2, path).run(None, {"x": x})[0]
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    ops = op_counts(path)
    assert ops[("", "Gemm")] == 1 and ops[("", "MatMul")] == 0 and ops[("", "Add")] == 0, ops
    assert ops[("", "Reshape")] == (0 if len(x_shape) == 2 else 2), ops


@pytest.mark.parametrize("case", ["weights_overridable", "product_is_output", "bias_per_row"])
def test_matmul_add_left_alone(tmp_path, case):
    if case == "bias_per_row":  # B [M, N] is no bias: the Add stays
        data, x, expected = matmul_add_model((9, 16), False, (9, 24))
    else:
        data, x, expected = matmul_add_model((9, 16), False, (24,), w_is_input=case == "weights_overridable",
                                             extra_output=case == "product_is_output")
    path = str(tmp_path / "opt.onnx")
    y = session(data, ALL, 1, path).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    ops = op_counts(path)
    assert ops[("", "MatMul")] == 1 and ops[("", "Add")] == 1 and ops[("", "Gemm")] == 0, ops


def gemm_model(M, K, N, trans_a, trans_b, alpha, beta, c_shape, b_constant):
    rng = np.random.default_rng(M * 100 + N + int(trans_a) * 7 + int(trans_b) * 13)
    a = rng.standard_normal((K, M) if trans_a else (M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
    inputs = ["a", "b"] + (["c"] if c_shape is not None else [])
    attrs = dict(transA=int(trans_a), transB=int(trans_b), alpha=alpha, beta=beta)
    node = helper.make_node("Gemm", inputs, ["y"], **attrs)
    graph_inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))]
    inits = []
    if b_constant:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        graph_inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b.shape)))
    c = None
    if c_shape is not None:
        c = rng.standard_normal(c_shape).astype(np.float32)
        inits.append(numpy_helper.from_array(c, "c"))
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected = alpha * ((a64.T if trans_a else a64) @ (b64.T if trans_b else b64))
    if c is not None:
        expected = expected + beta * c.astype(np.float64)
    feeds = {"a": a} if b_constant else {"a": a, "b": b}
    return model.SerializeToString(), feeds, expected


@pytest.mark.parametrize("M", [1, 3, 8, 33])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("alpha,beta,c_shape", [
    (1.0, 1.0, "N"), (1.0, 1.0, "1N"), (1.0, 1.0, "MN"), (1.0, 1.0, "1"), (0.5, 2.0, "N"), (1.0, 0.0, "N"),
    (1.5, 1.0, None)])
def test_gemm_with_constant_weights(M, trans_a, trans_b, alpha, beta, c_shape):
    K, N = 40, 72
    shape = {"N": (N,), "1N": (1, N), "MN": (M, N), "1": (1,), None: None}[c_shape]
    for b_constant in (True, False):
        data, feeds, expected = gemm_model(M, K, N, trans_a, trans_b, alpha, beta, shape, b_constant)
        for threads in (1, 2):
            y = session(data, ALL, threads).run(None, feeds)[0]
            np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4,
                                       err_msg=f"B constant {b_constant}, {threads} thread(s)")


@pytest.mark.parametrize("a_shape", [(7, 48), (3, 5, 48), (1, 48), (2, 2, 3, 48)])
def test_matmul_with_constant_weights(a_shape):
    rng = np.random.default_rng(len(a_shape))
    w = rng.standard_normal((48, 40)).astype(np.float32)
    a = rng.standard_normal(a_shape).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    for threads in (1, 2):
        y = session(data, ALL, threads).run(None, {"a": a})[0]
        np.testing.assert_allclose(y, a.astype(np.float64) @ w.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_disable_prepacking(feed_forward):
    """onnxruntime's config entry session.disable_prepacking = "1": constant weights are read as
    they are in every run (Gemm, MatMul, Conv); the outputs stay PyTorch's. Other values are refused."""
    data, x, expected = feed_forward
    so = ot.SessionOptions()
    so.add_session_config_entry("session.disable_prepacking", "1")
    np.testing.assert_allclose(ot.InferenceSession(data, so).run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-5)
    gemm, feeds, gemm_expected = gemm_model(8, 40, 72, False, True, 1.0, 1.0, (72,), True)
    np.testing.assert_allclose(ot.InferenceSession(gemm, so).run(None, feeds)[0], gemm_expected, rtol=1e-5, atol=1e-4)
    so.add_session_config_entry("session.disable_prepacking", "yes")
    with pytest.raises(ot.InvalidArgument, match="session.disable_prepacking"):
        ot.InferenceSession(data, so)
