"""Recompute (activation checkpointing): onnxruntime-training's recompute options on a PyTorch
transformer encoder exported with its loss. Every recompute variant must reproduce the losses and
the trained weights of the run without recompute bit for bit (same masks: the Dropout random
stream depends on the session seed, the node and the run, not on the graph around it), and
recomputing whole layers must lower the step's arena (the planner's peak of activations and
temporaries)."""
import io
import re

import numpy as np
import onnx
import pytest
import torch

import onnxtrain as ot

LAYERS, D, HEADS, FFN, SEQ, BATCH, CLASSES = 3, 32, 4, 64, 24, 6, 5


class Encoder(torch.nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.emb = torch.nn.Embedding(40, D)
        self.norm = torch.nn.LayerNorm(D)
        layer = torch.nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=FFN, dropout=dropout, activation="gelu",
                                                 batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = torch.nn.Linear(D, CLASSES)

    def forward(self, tokens, y):
        return torch.nn.functional.cross_entropy(self.head(self.enc(self.norm(self.emb(tokens))).mean(dim=1)), y)


def export(dropout):
    torch.manual_seed(0)
    module = Encoder(dropout)
    g = torch.Generator().manual_seed(1)
    args = (torch.randint(0, 40, (BATCH, SEQ), generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g))
    f = io.BytesIO()
    module.train()
    torch.onnx.export(module, args, f, opset_version=17, do_constant_folding=False, input_names=["tokens", "y"],
                      output_names=["loss"], training=torch.onnx.TrainingMode.TRAINING, export_params=True)
    return f.getvalue(), [n for n, _ in module.named_parameters()]


@pytest.fixture(scope="module", params=[0.0, 0.1], ids=["no-dropout", "dropout"])
def model(request):
    return export(request.param)


def batches(n=3):
    rng = np.random.default_rng(7)
    return [(rng.integers(0, 40, (BATCH, SEQ)).astype(np.int64), rng.integers(0, CLASSES, BATCH).astype(np.int64))
            for _ in range(n)]


def _params(params, **options):
    """Adam over `params` with the loss output "loss" and the given TrainingParameters fields."""
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.weights_to_train = set(params)
    p.training_optimizer_name = "AdamOptimizer"
    for k, v in options.items():
        setattr(p, k, v)
    return p


def train(model, steps=3, grad_path=None, **recompute):
    data, params = model
    p = _params(params, **recompute)
    if grad_path:
        p.model_with_gradient_graph_path = str(grad_path)
    so = ot.SessionOptions()
    so.seed = 1234
    sess = ot.TrainingSession(data, p, so)
    losses = []
    for step in range(steps):
        x, y = batches()[step % 3]
        (loss,) = sess.run(["loss"], {"tokens": x, "y": y, "Learning_Rate": np.array([1e-3], np.float32)})
        losses.append(np.float32(loss))
    return np.array(losses), sess.get_state(), sess.last_run_stats()


@pytest.fixture(scope="module")
def baseline(model):
    return train(model)


VARIANTS = {
    "gelu": dict(gelu_recompute=True),
    "attn_dropout": dict(attn_dropout_recompute=True),
    "gelu+attn_dropout": dict(gelu_recompute=True, attn_dropout_recompute=True),
    "layers": dict(transformer_layer_recompute=True),
    "one_layer": dict(transformer_layer_recompute=True, number_recompute_layers=1),
    "all_layers_asked": dict(transformer_layer_recompute=True, number_recompute_layers=10),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_recompute_is_bitwise_the_plain_run(model, baseline, variant):
    losses, state, _ = train(model, **VARIANTS[variant])
    base_losses, base_state, _ = baseline
    np.testing.assert_array_equal(losses, base_losses)
    assert set(state) == set(base_state)
    for k in base_state:
        np.testing.assert_array_equal(state[k], base_state[k], err_msg=k)


def _readers(graph):
    r = {}
    for i, n in enumerate(graph.node):
        for v in n.input:
            r.setdefault(v, []).append(i)
    return r


def test_layer_recompute_graph_and_memory(model, baseline, tmp_path):
    path = tmp_path / "grad.onnx"
    _, _, stats = train(model, steps=1, grad_path=path, transformer_layer_recompute=True)
    g = onnx.load(str(path)).graph
    clones = [n for n in g.node if n.name.endswith("_recompute") or "_recompute_" in n.name]
    assert clones, "no recompute node"
    # Every clone comes after the first gradient node: recomputation happens in the backward pass.
    first_grad = min(i for i, n in enumerate(g.node) if n.name.startswith("grad"))
    assert all(i > first_grad for i, n in enumerate(g.node) if n in clones)
    # A Gelu of the first layer: its output is read by no gradient node any more, its copy is.
    gelus = [n for n in g.node if n.op_type == "Gelu" and not n.name.endswith("_recompute")]
    assert len(gelus) == LAYERS
    readers = _readers(g)
    first = gelus[0].output[0]
    assert all(i < first_grad for i in readers[first]), "a gradient node still reads the dropped Gelu output"
    # Layers 0 and 1 are recomputed, the last one is not (its backward follows its forward at once).
    for layer in range(LAYERS):
        found = any(f"/enc/layers.{layer}/" in n.name for n in clones)
        assert found == (layer < LAYERS - 1), layer
    # The step's arena is smaller.
    base = baseline[2]["arena_bytes"]
    assert stats["arena_bytes"] < 0.85 * base, (stats["arena_bytes"], base)


class GeluMLP(torch.nn.Module):
    """Linear -> GELU blocks read directly by the next Linear (BERT's feed-forward, no dropout)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(LAYERS)])
        self.head = torch.nn.Linear(16, CLASSES)

    def forward(self, x, y):
        for fc in self.fc:
            x = torch.nn.functional.gelu(fc(x))
        return torch.nn.functional.cross_entropy(self.head(x), y)


def test_gelu_recompute_drops_gelu_outputs(tmp_path):
    torch.manual_seed(0)
    module = GeluMLP()
    f = io.BytesIO()
    torch.onnx.export(module, (torch.randn(8, 16), torch.randint(0, CLASSES, (8,))), f, opset_version=17,
                      do_constant_folding=False, input_names=["x", "y"], output_names=["loss"],
                      training=torch.onnx.TrainingMode.TRAINING)
    data, params = f.getvalue(), [n for n, _ in module.named_parameters()]

    def run(path, **kw):
        p = _params(params, model_with_gradient_graph_path=str(path), **kw)
        sess = ot.TrainingSession(data, p)
        rng = np.random.default_rng(3)
        losses = [sess.run(["loss"], {"x": rng.standard_normal((8, 16)).astype(np.float32),
                                      "y": rng.integers(0, CLASSES, 8).astype(np.int64),
                                      "Learning_Rate": np.array([1e-2], np.float32)})[0] for _ in range(3)]
        return np.array(losses), sess.get_state()

    base_losses, base_state = run(tmp_path / "base.onnx")
    losses, state = run(tmp_path / "gelu.onnx", gelu_recompute=True)
    np.testing.assert_array_equal(losses, base_losses)
    for k in base_state:
        np.testing.assert_array_equal(state[k], base_state[k], err_msg=k)
    g = onnx.load(str(tmp_path / "gelu.onnx")).graph
    gelus = [n for n in g.node if n.op_type == "Gelu" and not n.name.endswith("_recompute")]
    copies = [n for n in g.node if n.op_type == "Gelu" and n.name.endswith("_recompute")]
    assert len(gelus) == len(copies) == LAYERS
    first_grad = min(i for i, n in enumerate(g.node) if n.name.startswith("grad"))
    readers = _readers(g)
    for n in gelus:
        assert all(i < first_grad for i in readers[n.output[0]]), n.name
    # Without recompute, the gradient of the next Linear reads each GELU output.
    b = onnx.load(str(tmp_path / "base.onnx")).graph
    first_grad = min(i for i, n in enumerate(b.node) if n.name.startswith("grad"))
    readers = _readers(b)
    for n in (n for n in b.node if n.op_type == "Gelu"):
        assert any(i > first_grad for i in readers[n.output[0]]), n.name


def test_recompute_values_by_name(model, baseline, tmp_path):
    path = tmp_path / "grad.onnx"
    train(model, steps=1, grad_path=path)
    g = onnx.load(str(path)).graph
    softmax = [n.output[0] for n in g.node if n.op_type == "Softmax"][:2]
    losses, state, _ = train(model, recompute_values=softmax)
    np.testing.assert_array_equal(losses, baseline[0])
    for k in baseline[1]:
        np.testing.assert_array_equal(state[k], baseline[1][k], err_msg=k)


def test_recompute_errors_name_the_problem(model):
    with pytest.raises(ValueError, match="'no_such_value' is not a value computed by the forward graph"):
        train(model, steps=1, recompute_values=["no_such_value"])
    with pytest.raises(ValueError, match="'loss' cannot be recomputed"):
        train(model, steps=1, recompute_values=["loss"])
    p = ot.TrainingParameters()
    with pytest.raises(ValueError, match="number_recompute_layers must be >= 0"):
        p.number_recompute_layers = -1
    with pytest.raises(ValueError, match="recompute_values must be a list of value names"):
        p.recompute_values = "x"


def test_layer_recompute_without_layers_is_an_error():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3))

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x, y):
            return ((self.m(x) - y) ** 2).mean()

    f = io.BytesIO()
    torch.onnx.export(Loss(), (torch.randn(2, 4), torch.randn(2, 3)), f, opset_version=17, input_names=["x", "y"],
                      output_names=["loss"], training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.transformer_layer_recompute = True
    with pytest.raises(ValueError, match="no transformer layer found"):
        ot.TrainingSession(f.getvalue(), p)


def test_budget_too_small_names_the_least_estimate(model):
    with pytest.raises(ValueError, match=r"recompute budget of 1 bytes is below what recompute reaches for this "
                                         r"model: (\d+) bytes of saved activations at best \((\d+) without"):
        train(model, steps=1, recompute_budget_bytes=1)


def test_budget_recomputes_segments_bitwise_with_less_memory(model, baseline):
    try:
        train(model, steps=1, recompute_budget_bytes=1)
    except ValueError as e:
        least, total = (int(v) for v in re.search(r"(\d+) bytes of saved activations at best \((\d+)", str(e)).groups())
    assert 0 < least < total
    # A budget halfway between the least estimate and no recompute.
    losses, state, stats = train(model, recompute_budget_bytes=(least + total) // 2)
    np.testing.assert_array_equal(losses, baseline[0])
    for k in baseline[1]:
        np.testing.assert_array_equal(state[k], baseline[1][k], err_msg=k)
    assert stats["arena_bytes"] < baseline[2]["arena_bytes"]
    # The least estimate itself is reachable, and a budget above what the run holds recomputes nothing.
    _, _, tight = train(model, steps=1, recompute_budget_bytes=least)
    assert tight["arena_bytes"] <= stats["arena_bytes"]
    _, _, loose = train(model, steps=1, recompute_budget_bytes=10 * total)
    assert loose["arena_bytes"] == baseline[2]["arena_bytes"]


class Logits(torch.nn.Module):
    """The encoder without its loss (what ORTModule exports: the forward model)."""

    def __init__(self, dropout):
        super().__init__()
        torch.manual_seed(0)
        self.m = Encoder(dropout)

    def forward(self, tokens):
        return self.m.head(self.m.enc(self.m.norm(self.m.emb(tokens))).mean(dim=1))


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_module_graph_builder_recompute_is_bitwise(dropout):
    """OrtModuleGraphBuilder's TrainingGraphTransformerConfiguration recompute fields, run through
    TrainingAgent (forward, then backward with a given output gradient): the same outputs and
    gradients bit for bit, and the layers' clones sit after the YieldOp (in the backward part)."""
    from onnxtrain.capi import _pybind_state as C
    from onnxtrain.capi.onnxruntime_inference_collection import InferenceSession
    module = Logits(dropout)
    module.train()
    f = io.BytesIO()
    tokens = torch.randint(0, 40, (BATCH, SEQ), generator=torch.Generator().manual_seed(2))
    torch.onnx.export(module, (tokens,), f, opset_version=17, do_constant_folding=False, input_names=["tokens"],
                      output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING, export_params=True)
    model = f.getvalue()
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load_from_string(model).graph.initializer
               if i.data_type == onnx.TensorProto.FLOAT}
    cpu = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
    dy = np.random.default_rng(4).standard_normal((BATCH, CLASSES)).astype(np.float32)

    def vector(arrays):
        v = C.OrtValueVector()
        for a in arrays:
            v.push_back(C.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a), cpu))
        return v

    def run(**recompute):
        c = C.OrtModuleGraphBuilderConfiguration()
        c.initializer_names = sorted(weights)
        c.initializer_names_to_train = sorted(weights)
        for k, v in recompute.items():
            setattr(c.graph_transformer_config, k, v)
        b = C.OrtModuleGraphBuilder()
        b.initialize(model, c)
        b.build()
        graph = onnx.load_from_string(b.get_model()).graph
        so = C.SessionOptions()
        so.seed = 99
        sess = InferenceSession(b.get_model(), so, providers=["CPUExecutionProvider"])
        fw = [i.name for i in sess.get_inputs()]
        bw = [o.name for o in sess.get_outputs()]
        agent = C.TrainingAgent(sess._sess, fw, [cpu] * len(fw), bw, [cpu] * len(bw))
        out, state = C.OrtValueVector(), C.PartialGraphExecutionState()
        agent.run_forward(vector([tokens.numpy()] + [weights[k] for k in sorted(weights)]), out, state, C.OrtValueCache())
        res = C.OrtValueVector()
        agent.run_backward(vector([dy]), res, state)
        return [o.numpy() for o in out], dict(zip(bw, (r.numpy() for r in res))), graph

    base_out, base_grads, _ = run()
    out, grads, graph = run(transformer_layer_recompute=True)
    np.testing.assert_array_equal(out[0], base_out[0])
    assert set(grads) == set(base_grads) and len(grads) == len(weights)
    for k in base_grads:
        np.testing.assert_array_equal(grads[k], base_grads[k], err_msg=k)
    names = [n.name for n in graph.node]
    yield_at = [n.op_type for n in graph.node].index("YieldOp")
    clones = [i for i, n in enumerate(names) if n.endswith("_recompute")]
    assert clones and min(clones) > yield_at
    with pytest.raises(ValueError, match="number_recompute_layers must be >= 0"):
        run(transformer_layer_recompute=True, number_recompute_layers=-1)
    # The exported GELU is not fused in these graphs: gelu_recompute says so instead of doing nothing.
    with pytest.raises(C.NotImplemented, match="gelu_recompute: this graph's GELU is not fused"):
        run(gelu_recompute=True)


def _wide_mlp(width=256, depth=4):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    net = torch.nn.Sequential(*layers, torch.nn.Linear(width, CLASSES))

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, y):
            return torch.nn.functional.cross_entropy(self.net(x), y)

    f = io.BytesIO()
    torch.onnx.export(Loss(), (torch.randn(2, width), torch.randint(0, CLASSES, (2,))), f, opset_version=17,
                      do_constant_folding=False, input_names=["x", "y"], output_names=["loss"],
                      training=torch.onnx.TrainingMode.TRAINING)
    return f.getvalue(), ["net." + n for n, _ in net.named_parameters()]


def test_memory_efficient_gradient_is_bitwise_with_less_memory(tmp_path):
    """use_memory_efficient_gradient: one update per weight as soon as its gradient is complete
    (each gradient freed at once): the same trajectory bit for bit, a smaller step arena on a model
    whose gradients outweigh its activations, and the updates placed among the gradient nodes."""
    data, params = _wide_mlp()

    def run(path=None, **kw):
        p = _params(params, **kw)
        if path:
            p.model_with_training_graph_path = str(path)
        sess = ot.TrainingSession(data, p)
        rng = np.random.default_rng(8)
        losses = [sess.run(["loss"], {"x": rng.standard_normal((2, 256)).astype(np.float32),
                                      "y": rng.integers(0, CLASSES, 2).astype(np.int64),
                                      "Learning_Rate": np.array([1e-3], np.float32)})[0] for _ in range(3)]
        return np.array(losses), sess.get_state(), sess.last_run_stats()

    base_losses, base_state, base = run()
    path = tmp_path / "train.onnx"
    losses, state, stats = run(path, use_memory_efficient_gradient=True)
    np.testing.assert_array_equal(losses, base_losses)
    for k in base_state:
        np.testing.assert_array_equal(state[k], base_state[k], err_msg=k)
    # Five 256x256 (and 256x5) gradients no longer live together: the arena holds about one.
    assert stats["arena_bytes"] < 0.6 * base["arena_bytes"], (stats, base)
    nodes = onnx.load(str(path)).graph.node
    updates = [i for i, n in enumerate(nodes) if n.op_type.startswith("Adam")]
    grads = [i for i, n in enumerate(nodes) if n.name.startswith("grad")]
    assert len(updates) == len(params)
    assert min(updates) < max(grads), "the first update runs before the backward pass ends"


@pytest.mark.parametrize("other, message", [
    (dict(gradient_accumulation_steps=2), "gradient_accumulation_steps > 1"),
    (dict(enable_grad_norm_clip=True), "gradient norm clipping"),
])
def test_memory_efficient_gradient_refuses_what_needs_every_gradient(model, other, message):
    with pytest.raises(ot.NotImplemented, match="use_memory_efficient_gradient with " + message):
        train(model, steps=1, use_memory_efficient_gradient=True, **other)


class ResNetish(torch.nn.Module):
    """Residual blocks of Conv -> BatchNorm (training mode) -> ReLU: budget segments end between
    blocks, and recomputed BatchNorms must not touch the running statistics."""

    def __init__(self, blocks=4, c=8):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c),
                                torch.nn.ReLU(), torch.nn.Conv2d(c, c, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(c)) for _ in range(blocks))
        self.fc = torch.nn.Linear(c, CLASSES)

    def forward(self, x, y):
        h = self.stem(x)
        for b in self.blocks:
            h = torch.relu(h + b(h))
        return torch.nn.functional.cross_entropy(self.fc(h.mean(dim=(2, 3))), y)


def test_budget_on_batchnorm_blocks_is_bitwise_with_running_stats(tmp_path):
    torch.manual_seed(0)
    module = ResNetish()
    f = io.BytesIO()
    module.train()
    torch.onnx.export(module, (torch.randn(4, 3, 16, 16), torch.randint(0, CLASSES, (4,))), f, opset_version=17,
                      do_constant_folding=False, input_names=["x", "y"], output_names=["loss"],
                      training=torch.onnx.TrainingMode.TRAINING)
    data, params = f.getvalue(), [n for n, _ in module.named_parameters()]

    def run(**kw):
        p = _params(params, **kw)
        sess = ot.TrainingSession(data, p)
        rng = np.random.default_rng(11)
        losses = [sess.run(["loss"], {"x": rng.standard_normal((4, 3, 16, 16)).astype(np.float32),
                                      "y": rng.integers(0, CLASSES, 4).astype(np.int64),
                                      "Learning_Rate": np.array([1e-3], np.float32)})[0] for _ in range(3)]
        return np.array(losses), sess._initializers(), sess.last_run_stats()

    base_losses, base_w, base = run()
    try:
        run(recompute_budget_bytes=1)
    except ValueError as e:
        least = int(re.search(r"(\d+) bytes of saved activations at best", str(e)).group(1))
    losses, w, stats = run(recompute_budget_bytes=least)
    np.testing.assert_array_equal(losses, base_losses)
    assert any("running_mean" in k for k in w)
    for k in base_w:  # weights and BatchNorm running statistics
        np.testing.assert_array_equal(w[k], base_w[k], err_msg=k)
    assert stats["peak_live_bytes"] < 0.7 * base["peak_live_bytes"], (stats, base)
