"""Inference sessions fuse Conv [+ Add] + Relu / Clip into com.microsoft FusedConv
(src/runtime/conv_fusion.cpp) from graph_optimization_level ORT_ENABLE_EXTENDED on: a small
residual network exported by torch.onnx gives PyTorch's outputs (float64 forward of the same
module) with and without the fusion, the optimized model shows the fused nodes, and the lower
levels leave the exported nodes as they are."""
import copy
import io
from collections import Counter

import numpy as np
import onnx
import pytest
import torch

import onnxtrain as ot


class Block(torch.nn.Module):
    """Conv-BN-ReLU, Conv-BN + skip, ReLU, a 1x1 Conv clamped to [0, 6] (Clip), a grouped Conv."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(16)
        self.c3 = torch.nn.Conv2d(16, 32, 1)
        self.c4 = torch.nn.Conv2d(32, 8, 3, stride=2, groups=8)  # grouped, no activation: stays a Conv

    def forward(self, x):
        h = torch.relu(self.b1(self.c1(x)))
        h = torch.relu(self.b2(self.c2(h)) + x)
        return self.c4(torch.clamp(self.c3(h), 0.0, 6.0))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Block().eval()
    for bn in (m.b1, m.b2):  # running statistics away from the identity
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 16, 12, 12)
    f = io.BytesIO()
    torch.onnx.export(copy.deepcopy(m), x, f, input_names=["x"], output_names=["y"], opset_version=13)
    with torch.no_grad():
        expected = copy.deepcopy(m).double()(x.double()).numpy()
    return f.getvalue(), x.numpy(), expected


def session(data, level, threads, optimized=None):
    so = ot.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = threads
    if optimized:
        so.optimized_model_filepath = optimized
    return ot.InferenceSession(data, so)


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_session_gives_torch_outputs(model, tmp_path, threads):
    data, x, expected = model
    path = str(tmp_path / "optimized.onnx")
    fused = session(data, ot.GraphOptimizationLevel.ORT_ENABLE_ALL, threads, path)
    plain = session(data, ot.GraphOptimizationLevel.ORT_ENABLE_BASIC, threads)
    y_fused = fused.run(None, {"x": x})[0]
    y_plain = plain.run(None, {"x": x})[0]
    np.testing.assert_allclose(y_fused, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y_fused, y_plain, rtol=1e-5, atol=1e-6)
    opt = onnx.load(path)
    ops = Counter((n.domain, n.op_type) for n in opt.graph.node)
    assert ops[("com.microsoft", "FusedConv")] == 3, ops
    assert ops[("", "Conv")] == 1 and ops[("", "Relu")] == 0 and ops[("", "Add")] == 0 and ops[("", "Clip")] == 0, ops
    acts = sorted(next(a.s.decode() for a in n.attribute if a.name == "activation")
                  for n in opt.graph.node if n.op_type == "FusedConv")
    assert acts == ["Clip", "Relu", "Relu"]
    assert any(o.domain == "com.microsoft" for o in opt.opset_import)


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC"])
def test_lower_levels_keep_the_exported_nodes(model, tmp_path, level):
    data, x, expected = model
    path = str(tmp_path / "optimized.onnx")
    s = session(data, getattr(ot.GraphOptimizationLevel, level), 1, path)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-5)
    ops = Counter(n.op_type for n in onnx.load(path).graph.node)
    assert "FusedConv" not in ops and ops["Conv"] == 4 and ops["Relu"] == 2, ops
