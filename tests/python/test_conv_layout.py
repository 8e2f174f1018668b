"""Inference sessions at ORT_ENABLE_ALL keep convolutional activations in oneDNN's blocked layout
(nChw16c, as [N, ceil(C/16), H, W, 16]) across Conv / FusedConv / pooling / BatchNormalization /
Add / Relu / Concat chains (runtime::block_conv_layouts, src/runtime/conv_fusion.cpp). Each model here, exported by
torch.onnx, must give PyTorch's float64 outputs and the ORT_DISABLE_ALL session's; the profile
shows which blocked operators ran, and optimized_model_filepath still holds only standard and
com.microsoft operators."""
import copy
import io
import json
from collections import Counter

import numpy as np
import onnx
import pytest
import torch

import onnxtrain as ot

nn = torch.nn


class Residual(nn.Module):
    """ResNet's stem and one basic block (BatchNorm folded, Add + Relu fused), then a strided
    convolution, GlobalAveragePool and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.c1, self.b1 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        h = torch.relu(self.b1(self.c1(x)))
        h = torch.relu(self.b2(self.c2(h)) + x)
        h = torch.relu(self.down(h))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class Fire(nn.Module):
    """SqueezeNet's fire modules: a squeeze 1x1, then the Concat of a 1x1 and a 3x3 expansion; an
    average pool between them; the classifier convolution's 10 channels are no multiple of 16."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3, stride=2)
        self.s1, self.e11, self.e13 = nn.Conv2d(32, 16, 1), nn.Conv2d(16, 32, 1), nn.Conv2d(16, 32, 3, padding=1)
        self.s2, self.e21, self.e23 = nn.Conv2d(64, 16, 1), nn.Conv2d(16, 16, 1), nn.Conv2d(16, 48, 3, padding=1)
        self.cls = nn.Conv2d(64, 10, 1)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.conv(x)), 3, 2, ceil_mode=True)
        s = torch.relu(self.s1(x))
        x = torch.cat([torch.relu(self.e11(s)), torch.relu(self.e13(s))], 1)
        x = nn.functional.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False)
        s = torch.relu(self.s2(x))
        x = torch.cat([torch.relu(self.e21(s)), torch.relu(self.e23(s))], 1)
        return torch.flatten(nn.functional.adaptive_avg_pool2d(torch.relu(self.cls(x)), 1), 1)


class OddChannels(nn.Module):
    """24 and 40 channels (padded blocks), a Concat of 24 + 40 channels (not blocked: the chain
    ends there), a residual Add, Relu6 (Clip 0..6) and a max pool between convolutions."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 24, 3, padding=1)
        self.b = nn.Conv2d(24, 40, 3, stride=2, padding=2, dilation=2)
        self.c = nn.Conv2d(40, 40, 1)
        self.d = nn.Conv2d(40, 24, 3, padding=1)
        self.e = nn.Conv2d(64, 24, 1)

    def forward(self, x):
        x = torch.relu(self.a(x))
        y = torch.clamp(self.b(x), 0.0, 6.0)
        y = nn.functional.max_pool2d(torch.relu(self.c(y) + y), 2)
        z = self.d(y)
        return self.e(torch.cat([z, nn.functional.max_pool2d(torch.relu(self.c(y)), 1)], 1))


class SideReaders(nn.Module):
    """A chain's values read by plain operators (Transpose, Shape through view) and returned as
    graph outputs mid-chain."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(16, 32, 3, padding=1)
        self.b = nn.Conv2d(32, 32, 3, padding=1)
        self.c = nn.Conv2d(32, 16, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        k = torch.relu(self.b(h))
        out = self.c(k)
        return out, h, k.transpose(2, 3) * 2.0, out.view(out.shape[0], -1).sum(1)


class Grouped(nn.Module):
    """Depthwise, grouped with 16-channel groups (blocked), grouped with 8-channel groups (plain)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(16, 32, 3, padding=1)
        self.dw = nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32)
        self.g16 = nn.Conv2d(32, 32, 3, padding=1, groups=2)
        self.g8 = nn.Conv2d(32, 32, 3, padding=1, groups=4)
        self.dw2 = nn.Conv2d(32, 64, 5, padding=2, groups=32)  # depth multiplier 2: stays plain

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.relu(self.dw(h))
        h = torch.relu(self.g16(h) + h)
        h = torch.relu(self.g8(h))
        return self.dw2(h)


class Dense(nn.Module):
    """DenseNet's layers: BatchNormalization after a Concat (run as a blocked depthwise 1x1
    convolution, the Relu after it as its activation), the block's plain input concatenated with
    blocked features."""

    def __init__(self):
        super().__init__()
        self.n1, self.c1 = nn.BatchNorm2d(16), nn.Conv2d(16, 32, 1, bias=False)
        self.n2, self.c2 = nn.BatchNorm2d(32), nn.Conv2d(32, 16, 3, padding=1, bias=False)
        self.n3, self.c3 = nn.BatchNorm2d(32), nn.Conv2d(32, 16, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.c2(torch.relu(self.n2(self.c1(torch.relu(self.n1(x))))))
        z = self.c3(torch.relu(self.n3(torch.cat([x, y], 1))))
        return torch.cat([x, y, z], 1)


class InceptionPool(nn.Module):
    """Inception-v3's pool branch: avg_pool2d(3, 1, padding=1), which torch.onnx exports as Pad +
    AveragePool; fold_pads makes it one AveragePool (count_include_pad 1) in the blocked chain."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(3, 32, 3), nn.Conv2d(32, 16, 1), nn.Conv2d(32, 16, 3, padding=1)

    def forward(self, x):
        a = torch.relu(self.c1(x))
        p = torch.nn.functional.avg_pool2d(a, 3, stride=1, padding=1)
        return torch.cat([self.c2(p), torch.relu(self.c3(a))], 1)


def export(module, shape, seed=0, opset=13):
    torch.manual_seed(seed)
    m = module.eval()
    for bn in [x for x in m.modules() if isinstance(x, nn.BatchNorm2d)]:
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.2, 0.2)
    x = torch.randn(*shape)
    f = io.BytesIO()
    torch.onnx.export(copy.deepcopy(m), x, f, input_names=["x"], opset_version=opset)
    with torch.no_grad():
        expected = copy.deepcopy(m).double()(x.double())
    expected = [e.numpy() for e in (expected if isinstance(expected, tuple) else (expected,))]
    return f.getvalue(), x.numpy(), expected


def session(data, level, threads=1, optimized=None, profile=None):
    so = ot.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = threads
    if optimized:
        so.optimized_model_filepath = optimized
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ot.InferenceSession(data, so)


def run_ops(sess, x):
    """Outputs of one run and the op types the profile shows for it."""
    outs = sess.run(None, {"x": x})
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    return outs, Counter(e["args"]["op_name"] for e in events if e["cat"] == "Node")


CASES = {
    # model, input shape, blocked operators that must run (at least), plain ones that must not
    "residual": (Residual, (3, 3, 40, 40), {"NchwcConv": 4, "NchwcMaxPool": 1, "NchwcGlobalAveragePool": 1},
                 {"Conv", "FusedConv", "MaxPool", "GlobalAveragePool"}),
    "fire": (Fire, (2, 3, 33, 33), {"NchwcConv": 8, "NchwcMaxPool": 1, "NchwcAveragePool": 1, "Concat": 2,
                                    "NchwcGlobalAveragePool": 1}, {"Conv", "FusedConv", "MaxPool", "AveragePool"}),
    "odd": (OddChannels, (2, 3, 17, 17), {"NchwcConv": 6, "NchwcMaxPool": 2}, {"MaxPool"}),
    "side": (SideReaders, (1, 16, 9, 11), {"NchwcConv": 3}, {"Conv", "FusedConv"}),
    "dense": (Dense, (2, 16, 12, 12), {"NchwcConv": 4, "Concat": 2, "BatchNormalization": 1}, {"Conv", "FusedConv"}),
    "grouped": (Grouped, (2, 16, 14, 14), {"NchwcConv": 3}, set()),
    "pool_pad": (InceptionPool, (2, 3, 19, 19), {"NchwcConv": 3, "NchwcAveragePool": 1, "Concat": 1},
                 {"Pad", "AveragePool", "ReorderToNchwc"}),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_blocked_chains_give_torch_and_unoptimized_outputs(case, threads, tmp_path):
    module, shape, blocked, gone = CASES[case]
    data, x, expected = export(module(), shape)
    if case == "pool_pad":  # the pattern under test is in the export
        assert "Pad" in {n.op_type for n in onnx.load_from_string(data).graph.node}
    path = str(tmp_path / "optimized.onnx")
    fast = session(data, ot.GraphOptimizationLevel.ORT_ENABLE_ALL, threads, path, str(tmp_path / "all"))
    plain = session(data, ot.GraphOptimizationLevel.ORT_DISABLE_ALL, threads)
    outs, ops = run_ops(fast, x)
    ref = plain.run(None, {"x": x})
    assert len(outs) == len(expected)
    for y, r, e in zip(outs, ref, expected):
        assert y.shape == e.shape and y.dtype == np.float32
        np.testing.assert_allclose(y, e, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(y, r, rtol=1e-4, atol=1e-5)
    for op, n in blocked.items():
        assert ops[op] >= n, (op, ops)
    for op in gone:
        assert ops[op] == 0, (op, ops)
    assert ops["ReorderFromNchwc"] >= 1, ops
    if case == "dense":  # the Relus after the blocked BatchNormalizations are their activation now
        assert ops["Relu"] == 1, ops
    # The optimized model is written before the blocked-layout pass: onnxruntime's operators only.
    opt = onnx.load(path)
    assert {n.domain for n in opt.graph.node} <= {"", "ai.onnx", "com.microsoft"}
    assert not any(n.op_type.startswith(("Nchwc", "Reorder")) for n in opt.graph.node)
    assert not any(o.domain == "com.onnxtrain" for o in opt.opset_import)
    fresh = session(opt.SerializeToString(), ot.GraphOptimizationLevel.ORT_DISABLE_ALL)
    for y, r in zip(outs, fresh.run(None, {"x": x})):
        np.testing.assert_allclose(y, r, rtol=1e-4, atol=1e-5)


def test_odd_channel_chain_shapes_and_repeated_runs(tmp_path):
    """The same session run twice (arena reuse) and at another batch size."""
    data, x, expected = export(OddChannels(), (2, 3, 17, 17), seed=3)
    fast = session(data, ot.GraphOptimizationLevel.ORT_ENABLE_ALL)
    for _ in range(2):
        np.testing.assert_allclose(fast.run(None, {"x": x})[0], expected[0], rtol=1e-4, atol=1e-4)


def test_extended_level_keeps_plain_layout(tmp_path):
    data, x, expected = export(Residual(), (1, 3, 32, 32))
    s = session(data, ot.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, 1, None, str(tmp_path / "ext"))
    outs, ops = run_ops(s, x)
    np.testing.assert_allclose(outs[0], expected[0], rtol=1e-4, atol=1e-4)
    assert not any(op.startswith(("Nchwc", "Reorder")) for op in ops), ops
    assert ops["FusedConv"] >= 3, ops


@pytest.mark.parametrize("name", ["resnet18", "squeezenet1_0", "efficientnet_b0", "mobilenet_v3_small"])
def test_torchvision_models_match_torch(name):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)().eval()
    x = torch.randn(2, 3, 96, 96)
    f = io.BytesIO()
    torch.onnx.export(copy.deepcopy(m), x, f, input_names=["x"], opset_version=13)
    with torch.no_grad():
        expected = m.double()(x.double()).numpy()
    s = session(f.getvalue(), ot.GraphOptimizationLevel.ORT_ENABLE_ALL, 2)
    y = s.run(None, {"x": x.numpy()})[0]
    scale = np.abs(expected).max()
    np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-4 * scale)


def test_training_mode_runs_the_unblocked_graph():
    """RunOptions.training_mode switches BatchNormalization to batch statistics: the BatchNormalization
    the pass runs as a convolution must do so too (the training-mode plan is made from the graph before
    the pass; from opset 14, where BatchNormalization has training_mode)."""
    data, x, _ = export(Dense(), (2, 16, 12, 12), opset=15)
    ro = ot.RunOptions()
    ro.training_mode = True
    fast = session(data, ot.GraphOptimizationLevel.ORT_ENABLE_ALL)
    plain = session(data, ot.GraphOptimizationLevel.ORT_DISABLE_ALL)
    y_fast, y_plain = fast.run(None, {"x": x}, ro)[0], plain.run(None, {"x": x}, ro)[0]
    y_inf = plain.run(None, {"x": x})[0]
    assert np.abs(y_plain - y_inf).max() > 1e-2  # batch statistics differ from the running ones
    assert np.abs(y_fast - fast.run(None, {"x": x})[0]).max() > 1e-2
    # torch.onnx folded the BatchNormalization after c1 into it at export: compare the rest.
    np.testing.assert_allclose(y_fast, y_plain, rtol=1e-4, atol=1e-4)


def channel_shuffle(x, groups):
    """torchvision's ShuffleNet-v2 channel shuffle (Reshape -> Transpose -> Reshape in the export)."""
    n, c, h, w = x.size()
    return torch.transpose(x.view(n, groups, c // groups, h, w), 1, 2).contiguous().view(n, -1, h, w)


class Shuffle(nn.Module):
    """ShuffleNet-v2's two units at 58 channels a branch (no multiple of 16): the downsampling unit
    (two strided branches concatenated), then the unit that splits its input with chunk, which
    torch.onnx exports as Shape -> Gather -> Add -> Div -> Mul -> Slice."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 24, 3, stride=2, padding=1)
        self.b1 = nn.Sequential(nn.Conv2d(24, 24, 3, 2, 1, groups=24), nn.Conv2d(24, 58, 1), nn.ReLU())
        self.b2 = nn.Sequential(nn.Conv2d(24, 58, 1), nn.ReLU(), nn.Conv2d(58, 58, 3, 2, 1, groups=58),
                                nn.Conv2d(58, 58, 1), nn.ReLU())
        self.u = nn.Sequential(nn.Conv2d(58, 58, 1), nn.ReLU(), nn.Conv2d(58, 58, 3, 1, 1, groups=58),
                               nn.Conv2d(58, 58, 1), nn.ReLU())

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = channel_shuffle(torch.cat([self.b1(x), self.b2(x)], 1), 2)
        x1, x2 = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat([x1, self.u(x2)], 1), 2)


@pytest.mark.parametrize("threads", [1, 2])
def test_shufflenet_units_fold_their_shapes_and_run_blocked(threads, tmp_path):
    """With the input's shape fixed, the chunk's Shape folds (runtime::fold_static_shapes), the
    Slice gets constant bounds and known channels, and the whole graph runs blocked: the Concats,
    shuffles and Slices as NchwcChannels gathers."""
    data, x, expected = export(Shuffle(), (2, 3, 30, 30), opset=17)
    exported = Counter(n.op_type for n in onnx.load_from_string(data).graph.node)
    assert exported["Shape"] >= 1 and exported["Slice"] == 2, exported  # the pattern under test
    path = str(tmp_path / "optimized.onnx")
    fast = session(data, ot.GraphOptimizationLevel.ORT_ENABLE_ALL, threads, path, str(tmp_path / "all"))
    outs, ops = run_ops(fast, x)
    np.testing.assert_allclose(outs[0], expected[0], rtol=1e-4, atol=1e-4)
    plain = session(data, ot.GraphOptimizationLevel.ORT_DISABLE_ALL, threads)
    np.testing.assert_allclose(outs[0], plain.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert ops["NchwcConv"] == 9 and ops["Conv"] == ops["FusedConv"] == 0, ops
    # Concats of 58 + 58, the shuffles and the chunk's Slices are channel gathers on the blocked
    # layout, each reading through the gathers before it: the Slice the unit convolves (from both
    # branches of the first unit) and the output (the second Concat's shuffle, its first half the
    # other Slice's channels, again from the first unit's branches) are all that run.
    assert ops["NchwcChannels"] == 2, ops
    for op in ("Shape", "Gather", "Div", "Concat", "Transpose", "Reshape", "Slice", "ReorderToNchwc"):
        assert ops[op] == 0, (op, ops)
    assert ops["ReorderFromNchwc"] == 1, ops
    assert "Shape" not in {n.op_type for n in onnx.load(path).graph.node}
    # Fixed dimensions are checked on every feed, so the folded shape cannot go stale.
    with pytest.raises(Exception, match="dimension"):
        fast.run(None, {"x": np.zeros((1, 3, 30, 30), np.float32)})
