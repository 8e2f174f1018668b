"""onnxtrain.torch.ORTModule against PyTorch itself: outputs, gradients, training trajectories,
BatchNorm running statistics, re-export, kwargs, frozen parameters, several forwards in flight,
zero-copy exchange and the errors."""
import copy

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

from onnxtrain.capi import _pybind_state as C
from onnxtrain.torch import ORTModule, ORTModuleExportError
from onnxtrain.torch._ortmodule import _push, _to_torch
from alias_run import run_alias

GRAD_RTOL = 1e-5


def rel(a, b):
    """Norm-based relative error of a float32 result against the reference, in float64."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


class MLP(torch.nn.Module):
    def __init__(self, sizes=(20, 32, 16, 4)):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x) if i % 2 == 0 else torch.tanh(x)
        return x


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8, momentum=0.3)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = F.max_pool2d(torch.relu(self.bn2(self.conv2(h))), 2)
        return self.fc(torch.flatten(h, 1))


def make(name, seed=0):
    """(module, input tensor, number of classes)."""
    torch.manual_seed(seed)
    if name == "mlp":
        return MLP(), torch.randn(8, 20), 4
    if name == "cnn":
        return CNN(), torch.randn(4, 3, 8, 8), 5
    if name == "transformer":
        layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        return layer, torch.randn(3, 5, 16), None
    raise KeyError(name)


def loss_of(out, target):
    """Cross-entropy, or a weighted sum for the transformer (whose LayerNorm output makes sum() or
    mean(out**2) constant: a zero gradient that only round-off would test)."""
    if isinstance(target, torch.Tensor) and target.dtype == torch.int64:
        return F.cross_entropy(out, target)
    return (out * target).sum()


def compare_gradients(name):
    module, x, classes = make(name)
    module.train()
    ref = copy.deepcopy(module)
    ort = ORTModule(module)
    target = torch.randint(0, classes, (x.shape[0],)) if classes else torch.randn(x.shape)
    results = {}
    for m in (ort, ref):
        xi = x.clone().requires_grad_(True)
        out = m(xi)
        loss_of(out, target).backward()
        results[m is ort] = (out, xi.grad, {n: p.grad for n, p in (module if m is ort else ref).named_parameters()})
    (out_o, gx_o, gp_o), (out_r, gx_r, gp_r) = results[True], results[False]
    errors = {"output": rel(out_o, out_r), "input": rel(gx_o, gx_r)}
    for n in gp_r:
        errors[n] = rel(gp_o[n], gp_r[n])
    return errors, module, ref


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_gradients_match_torch(name):
    errors, module, ref = compare_gradients(name)
    worst = max(errors, key=errors.get)
    print(f"{name}: max relative error {errors[worst]:.2e} ({worst})")
    assert errors[worst] < GRAD_RTOL, errors
    if name == "cnn":  # training mode: running statistics updated as PyTorch does
        for bn in ("bn1", "bn2"):
            a, b = getattr(module, bn), getattr(ref, bn)
            assert rel(a.running_mean, b.running_mean) < 1e-5
            assert rel(a.running_var, b.running_var) < 1e-5
            assert int(a.num_batches_tracked) == int(b.num_batches_tracked) == 1


def train_curves(name, steps, batch=16):
    module, x, classes = make(name)
    ref = copy.deepcopy(module)
    ort = ORTModule(module)
    g = torch.Generator().manual_seed(5)
    data = [(torch.randn((batch,) + tuple(x.shape[1:]), generator=g), torch.randint(0, classes, (batch,), generator=g))
            for _ in range(8)]
    curves = []
    for m, params in ((ort, module.parameters()), (ref, ref.parameters())):
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
        losses = []
        for step in range(steps):
            xb, yb = data[step % len(data)]
            opt.zero_grad()
            loss = F.cross_entropy(m(xb), yb)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        curves.append(losses)
    return curves, module, ref


@pytest.mark.parametrize("name,steps", [("mlp", 100), ("cnn", 40)])
def test_adamw_training_tracks_torch(name, steps):
    (ours, theirs), module, ref = train_curves(name, steps)
    dev = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))
    print(f"{name}: {steps} AdamW steps, max relative loss deviation {dev:.2e}")
    assert dev < 1e-4
    assert theirs[-1] < theirs[0] * 0.9  # it did train
    for (n, p), (_, q) in zip(module.named_parameters(), ref.named_parameters()):
        assert rel(p, q) < 1e-4, n
    for (n, b), (_, c) in zip(module.named_buffers(), ref.named_buffers()):
        assert rel(b.double(), c.double()) < 1e-4, n


def test_reexport_on_shape_dtype_and_mode_change():
    module, x, _ = make("cnn")
    ref = copy.deepcopy(module)
    ort = ORTModule(module)
    for xi, train in ((x, True), (x[:3], True), (x, False), (x.double(), False)):
        if xi.dtype == torch.float64:
            module.double()
            ref.double()
        ort.train(train)
        ref.train(train)
        xa, xb = xi.clone().requires_grad_(True), xi.clone().requires_grad_(True)
        a, b = ort(xa), ref(xb)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert rel(a, b) < 1e-5
        a.sum().backward()
        b.sum().backward()
        assert rel(xa.grad, xb.grad) < 1e-5
    # Another batch size (x[:3]) is served by the first graph (dynamic batch axis): 3 exports.
    assert len(ort._graphs) == 3 and ort._exports == 3
    # Same signature again: no new export.
    ort(x.double())
    assert len(ort._graphs) == 3 and ort._exports == 3


def test_eval_no_grad_runs_forward_only():
    module, x, _ = make("cnn")
    ort = ORTModule(module)
    ort.eval()
    ref = copy.deepcopy(module).eval()
    with torch.no_grad():
        out = ort(x)
    assert out.grad_fn is None and not out.requires_grad
    (graphs,) = ort._graphs.values()
    assert graphs.infer_session is not None and not graphs.runners
    assert rel(out, ref(x)) < 1e-6
    # Eval mode does not touch the running statistics.
    assert torch.equal(module.bn1.running_mean, ref.bn1.running_mean)


def test_train_mode_no_grad_updates_running_stats():
    module, x, _ = make("cnn")
    ort, ref = ORTModule(module), copy.deepcopy(module)
    with torch.no_grad():
        for _ in range(3):
            assert rel(ort(x), ref(x)) < 1e-5
    assert rel(module.bn2.running_var, ref.bn2.running_var) < 1e-6
    assert int(module.bn2.num_batches_tracked) == 3


class Dropper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 10)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


def test_dropout_follows_mode():
    torch.manual_seed(0)
    module = Dropper()
    ort = ORTModule(module)
    x = torch.randn(50, 10)
    out = ort(x)
    zeros = float((out == 0).double().mean())
    assert 0.3 < zeros < 0.7  # training mode drops
    ort.eval()
    assert rel(ort(x), module.fc(x)) < 1e-6  # eval mode does not


class KwModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x, bias=None, *, scale=1.0, activation="relu"):
        h = self.fc(x) * scale
        if bias is not None:
            h = h + bias
        return torch.relu(h) if activation == "relu" else torch.tanh(h)


def test_kwargs_and_constants():
    torch.manual_seed(1)
    module = KwModule()
    ref = copy.deepcopy(module)
    ort = ORTModule(module)
    x, bias = torch.randn(4, 6), torch.randn(3)
    calls = [((x,), {}), ((x,), {"bias": bias}), ((x, bias), {"scale": 2.0}), ((x,), {"activation": "tanh"}),
             ((x,), {"bias": bias, "scale": 2.0})]
    for args, kwargs in calls:
        xa = x.clone().requires_grad_(True)
        xb = x.clone().requires_grad_(True)
        ba = bias.clone().requires_grad_(True)
        bb = bias.clone().requires_grad_(True)
        a_args = (xa,) + tuple(ba for _ in args[1:])
        b_args = (xb,) + tuple(bb for _ in args[1:])
        a_kw = {k: (ba if k == "bias" else v) for k, v in kwargs.items()}
        b_kw = {k: (bb if k == "bias" else v) for k, v in kwargs.items()}
        a, b = ort(*a_args, **a_kw), ref(*b_args, **b_kw)
        assert rel(a, b) < 1e-6, (args, kwargs)
        (a * a).sum().backward()
        (b * b).sum().backward()
        assert rel(xa.grad, xb.grad) < 1e-5
        if bb.grad is not None:
            assert rel(ba.grad, bb.grad) < 1e-5
        else:
            assert ba.grad is None
    # ((x,), {}) and ((x,), {"bias": ...}) differ; ((x, bias), {scale}) and ((x,), {bias, scale}) are
    # the same signature (bias bound by name either way).
    assert len(ort._graphs) == 4
    assert rel(module.fc.weight.grad, ref.fc.weight.grad) < 1e-5


def test_frozen_parameters_get_no_grad_but_current_values():
    module, x, _ = make("mlp")
    ref = copy.deepcopy(module)
    ort = ORTModule(module)
    for m in (module, ref):
        m.layers[0].weight.requires_grad_(False)
    for _ in range(2):
        a, b = ort(x), ref(x)
        assert rel(a, b) < 1e-6
        a.sum().backward()
        b.sum().backward()
        assert module.layers[0].weight.grad is None
        assert rel(module.layers[0].bias.grad, ref.layers[0].bias.grad) < 1e-5
        assert rel(module.layers[2].weight.grad, ref.layers[2].weight.grad) < 1e-5
        with torch.no_grad():  # the frozen weight changes: the next call must see it
            module.layers[0].weight.mul_(0.5)
            ref.layers[0].weight.mul_(0.5)
    # Unfreezing differentiates it again (another gradient graph for the same export).
    module.layers[0].weight.requires_grad_(True)
    ref.layers[0].weight.requires_grad_(True)
    ort(x).sum().backward()
    ref(x).sum().backward()
    assert rel(module.layers[0].weight.grad, ref.layers[0].weight.grad) < 1e-5
    (graphs,) = ort._graphs.values()
    assert len(graphs.runners) == 2


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 4)
        self.register_buffer("offset", torch.linspace(-1, 1, 4))

    def forward(self, x, y, index):
        h = self.fc(x) + self.offset
        s = torch.sigmoid(h * y)
        return {"sum": s.sum(dim=1), "pair": (h, s.argmax(dim=1)), "picked": torch.gather(h, 1, index)}


def test_multiple_inputs_outputs_without_grad():
    torch.manual_seed(2)
    module = TwoInputs()
    ref = copy.deepcopy(module)
    ort = ORTModule(module)
    x, y = torch.randn(6, 5), torch.randn(6, 4)
    index = torch.randint(0, 4, (6, 2))
    results = []
    for m in (ort, ref):
        xa, ya = x.clone(), y.clone().requires_grad_(True)  # x takes no gradient
        out = m(xa, ya, index)
        assert set(out) == {"sum", "pair", "picked"}
        assert out["pair"][1].dtype == torch.int64 and not out["pair"][1].requires_grad
        (out["sum"].sum() + (out["pair"][0] ** 2).mean() + out["picked"].sum()).backward()
        results.append((out, xa.grad, ya.grad))
    (o, gx, gy), (r, _, ry) = results
    assert gx is None
    assert rel(o["sum"], r["sum"]) < 1e-6 and torch.equal(o["pair"][1], r["pair"][1])
    assert rel(gy, ry) < 1e-5
    assert rel(module.fc.weight.grad, ref.fc.weight.grad) < 1e-5
    # An output the loss does not use gets zero gradient.
    module.zero_grad()
    ref.zero_grad()
    ort(x, y, index)["sum"].sum().backward()
    ref(x, y, index)["sum"].sum().backward()
    assert rel(module.fc.bias.grad, ref.fc.bias.grad) < 1e-5


def test_several_forwards_in_flight():
    module, x, _ = make("cnn")
    ref = copy.deepcopy(module)
    ort = ORTModule(module)
    x2 = torch.randn_like(x)
    losses = []
    for m in (ort, ref):
        a = m(x)
        b = m(x2)
        c = m(x * 0.5)
        loss = (a ** 2).mean() + (b * c).mean()
        loss.backward()
        losses.append(loss)
    assert rel(losses[0], losses[1]) < 1e-6
    for (n, p), (_, q) in zip(module.named_parameters(), ref.named_parameters()):
        assert rel(p.grad, q.grad) < 1e-5, n
    assert rel(module.bn1.running_mean, ref.bn1.running_mean) < 1e-5
    assert int(module.bn1.num_batches_tracked) == 3


def test_zero_copy_dlpack():
    t = torch.randn(3, 4)
    v = C.OrtValueVector()
    _push(v, t)
    _push(v, torch.tensor([True, False]))
    assert v[0].data_ptr() == t.data_ptr()
    back = _to_torch(v)
    assert back[0].data_ptr() == t.data_ptr()
    assert back[1].dtype == torch.bool and back[1].tolist() == [True, False]
    # Through the module: outputs are the engine's buffers, handed over without a copy, and a later
    # call does not overwrite an earlier output.
    module, x, _ = make("mlp")
    ort = ORTModule(module)
    first = ort(x)
    kept = first.detach().clone()
    ort(x * 2)
    assert torch.equal(first.detach(), kept)


class Returns(torch.nn.Module):
    def __init__(self, value):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)
        self.value = value

    def forward(self, x):
        return self.fc(x), self.value


class Unexportable(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


def test_errors():
    module, x, _ = make("mlp")
    ort = ORTModule(module)
    with pytest.raises(TypeError, match="ORTModule wraps a torch.nn.Module"):
        ORTModule(lambda x: x)
    with pytest.raises(TypeError, match=r"input 'x' is a builtins.list"):
        ort([x])
    with pytest.raises(TypeError, match="input 'x' has dtype torch.complex64"):
        ort(torch.zeros(2, 20, dtype=torch.complex64))
    with pytest.raises(TypeError, match="input 'x' is on device 'meta'"):
        ort(torch.empty(2, 20, device="meta"))
    with pytest.raises(TypeError, match="do not match the wrapped module's forward"):
        ort(x, x)
    with pytest.raises(ORTModuleExportError, match=r"output\[1\] of the wrapped module is a int"):
        ORTModule(Returns(3))(torch.randn(1, 2))
    with pytest.raises(ORTModuleExportError, match="torch.onnx.export failed on Unexportable"):
        ORTModule(Unexportable())(torch.randn(2, 8, requires_grad=True))
    out = ort(x)
    loss = out.sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward through the same forward twice"):
        loss.backward()


def test_parameters_and_state_dict_are_the_modules():
    module, x, _ = make("cnn")
    ort = ORTModule(module)
    assert [n for n, _ in ort.named_parameters()] == [n for n, _ in module.named_parameters()]
    assert all(a is b for a, b in zip(ort.parameters(), module.parameters()))
    assert list(ort.state_dict()) == list(module.state_dict())
    ort.train(False)
    assert not module.training


def _bn_model(stat_through_op):
    """x -> BatchNormalization (training) -> y, its running mean as an output (directly, or through
    an Add)."""
    inits = [numpy_helper.from_array(np.full(3, v, np.float32), n)
             for n, v in (("scale", 1.5), ("bias", 0.1), ("mean", 0.0), ("var", 1.0))]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y", "rm", "rv"],
                              training_mode=1, momentum=0.0)]
    out = "rm"
    if stat_through_op:
        nodes.append(helper.make_node("Add", ["rm", "rm"], ["rm2"]))
        out = "rm2"
    g = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3, 5]),
                           helper.make_tensor_value_info(out, TensorProto.FLOAT, [3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)]).SerializeToString()


def test_builder_batchnorm_statistics_outputs_take_no_gradient():
    """What ORTModule relies on: a BatchNormalization statistics output among the module's outputs
    is non-differentiable (PyTorch's buffers take no gradient: none is fed for it); one reaching
    another output through other nodes is still refused."""
    cfg = C.OrtModuleGraphBuilderConfiguration()
    cfg.initializer_names = ["scale", "bias", "mean", "var"]
    cfg.initializer_names_to_train = ["scale", "bias"]
    cfg.input_names_require_grad = ["x"]
    b = C.OrtModuleGraphBuilder()
    b.initialize(_bn_model(False), cfg)
    b.build()
    assert b.get_graph_info().user_output_names == ["y", "rm"]
    assert b.get_graph_info().output_grad_indices_non_differentiable == [1]
    b = C.OrtModuleGraphBuilder()
    b.initialize(_bn_model(True), cfg)
    with pytest.raises(NotImplementedError, match="running or saved statistics"):
        b.build()


# ------------------------------------------------------------------------------ memory optimizer
def _two_layer_encoder():
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, activation="gelu",
                                             batch_first=True)
    return torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)


def _grads(module, x, target, **ortmodule_args):
    ort = ORTModule(module, **ortmodule_args)
    xi = x.clone().requires_grad_(True)
    loss = (ort(xi) * target).sum()
    loss.backward()
    return float(loss), xi.grad, {n: p.grad.clone() for n, p in module.named_parameters()}


def test_memory_opt_level_1_recomputes_transformer_layers(monkeypatch, tmp_path):
    """ORTMODULE_MEMORY_OPT_LEVEL=1 (onnxruntime's transformer layer-wise recompute): the training
    graph holds recompute clones; outputs and gradients are bitwise those without it."""
    x, target = torch.randn(2, 6, 16), torch.randn(2, 6, 16)
    base = _grads(_two_layer_encoder(), x, target)
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_LEVEL", "1")
    from onnxtrain.torch import DebugOptions
    prefix = str(tmp_path / "m")
    got = _grads(_two_layer_encoder(), x, target, debug_options=DebugOptions(save_onnx=True, onnx_prefix=prefix))
    assert got[0] == base[0]
    assert torch.equal(got[1], base[1])
    for n in base[2]:
        assert torch.equal(got[2][n], base[2][n]), n
    training = onnx.load(prefix + "_0_training.onnx")
    assert any(n.name.endswith("_recompute") for n in training.graph.node)


def test_memory_opt_settings_not_implemented_or_without_layers(monkeypatch):
    x = torch.randn(4, 20)
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_LEVEL", "2")
    with pytest.raises(NotImplementedError, match="ORTMODULE_MEMORY_OPT_LEVEL=2"):
        ORTModule(MLP())(x.requires_grad_(True)).sum().backward()
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_LEVEL", "0")
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_CONFIG", "Gelu+:1:-1")
    with pytest.raises(NotImplementedError, match="ORTMODULE_MEMORY_OPT_CONFIG"):
        ORTModule(MLP())(x).sum().backward()
    monkeypatch.delenv("ORTMODULE_MEMORY_OPT_CONFIG")
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_LEVEL", "1")
    torch.manual_seed(0)
    module = MLP()
    ref = copy.deepcopy(module)
    with pytest.warns(UserWarning, match="no transformer layer to recompute"):
        ORTModule(module)(x).sum().backward()
    ref(x).sum().backward()
    for (n, p), q in zip(module.named_parameters(), ref.parameters()):
        assert rel(p.grad, q.grad) < GRAD_RTOL, n


def test_debug_options_as_onnxruntime(monkeypatch, tmp_path):
    """onnxruntime's DebugOptions(log_level, save_onnx, onnx_prefix): LogLevel checked, a prefix
    required to save, files written under ORTMODULE_SAVE_ONNX_PATH (else the working directory)."""
    from onnxtrain.torch import DebugOptions, LogLevel
    d = DebugOptions()
    assert d.logging.log_level is LogLevel.WARNING and not d.save_onnx_models.save
    assert [int(v) for v in (LogLevel.VERBOSE, LogLevel.INFO, LogLevel.WARNING, LogLevel.ERROR, LogLevel.FATAL)] == \
        [0, 1, 2, 3, 4]
    with pytest.raises(TypeError, match="Expected log_level of type LogLevel"):
        DebugOptions(log_level=2)
    with pytest.raises(NameError, match="onnx_prefix must be provided when save_onnx is set"):
        DebugOptions(save_onnx=True)
    monkeypatch.setenv("ORTMODULE_SAVE_ONNX_PATH", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        DebugOptions(LogLevel.INFO, True, "m")
    monkeypatch.setenv("ORTMODULE_SAVE_ONNX_PATH", str(tmp_path))
    d = DebugOptions(LogLevel.ERROR, True, "m")
    assert (d.save_onnx_models.path, d.save_onnx_models.name_prefix) == (str(tmp_path), "m")
    module = torch.nn.Linear(3, 2)
    ort = ORTModule(module, d)
    assert ort._session_options().log_severity_level == 3
    ort(torch.randn(4, 3, requires_grad=True)).sum().backward()
    assert {p.name for p in tmp_path.iterdir()} >= {"m_0_exported.onnx", "m_0_training.onnx"}


def test_onnxruntime_training_ortmodule_module(tmp_path):
    """``onnxruntime.training.ortmodule`` (onnxtrain.training.ortmodule) serves onnxtrain.torch's
    ORTModule, DebugOptions and LogLevel, also under the onnxruntime alias."""
    import onnxtrain.torch
    from onnxtrain.training import ortmodule
    assert (ortmodule.ORTModule, ortmodule.DebugOptions, ortmodule.LogLevel) == \
        (onnxtrain.torch.ORTModule, onnxtrain.torch.DebugOptions, onnxtrain.torch.LogLevel)
    script = tmp_path / "s.py"
    script.write_text(
        "import torch\n"
        "from onnxruntime.training.ortmodule import ORTModule, DebugOptions, LogLevel\n"
        "import onnxtrain.torch\n"
        "m = ORTModule(torch.nn.Linear(3, 2), DebugOptions(log_level=LogLevel.WARNING))\n"
        "x = torch.randn(5, 3)\n"
        "assert ORTModule is onnxtrain.torch.ORTModule\n"
        "assert torch.allclose(m(x), m.module(x), atol=1e-6)\n"
        "print('ok')\n")
    r = run_alias(script)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
