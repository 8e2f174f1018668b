"""onnxtrain.training.experimental.export_gradient_graph (onnxruntime-training's tool): the exported
graph's loss, outputs and gradients against torch autograd, run in onnxtrain; the graph is valid
ONNX of the default domain only (portable); argument errors."""
import sys
import textwrap

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

import onnxtrain  # noqa: E402
from onnxtrain.training.experimental import export_gradient_graph  # noqa: E402
from alias_run import alias_env, run_alias


class MLP(torch.nn.Module):
    """onnxruntime's test model: a frozen layer (no gradient output), then two trainable layers."""

    def __init__(self, n_in=10, emb=20, hidden=5, classes=3):
        super().__init__()
        self.frozen_layer = torch.nn.Linear(n_in, emb, bias=False)
        self.frozen_layer.requires_grad_(False)
        self.fc1 = torch.nn.Linear(emb, hidden)
        self.fc2 = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(self.frozen_layer(x))))


class ConvTwoInputs(torch.nn.Module):
    """Conv + max pool on an image, a linear layer on a second input, one regression head."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, kernel_size=3, padding=1)
        self.side = torch.nn.Linear(3, 4)
        self.head = torch.nn.Linear(4 * 3 * 3 + 4, 2)

    def forward(self, image, extra):
        h = torch.nn.functional.max_pool2d(torch.tanh(self.conv(image)), 2)
        return self.head(torch.cat([h.flatten(1), torch.sigmoid(self.side(extra))], dim=1))


def mse(output, labels):
    return ((output - labels) ** 2).mean()


def cross_entropy(output, labels):
    return torch.nn.functional.cross_entropy(output, labels)


def binary_cross_entropy_loss(inp, target):
    """onnxruntime's test loss, written with elementary ops."""
    return -torch.sum(target * torch.log2(inp[:, 0]) + (1 - target) * torch.log2(inp[:, 1]))


def run_and_compare(model, loss_fn, inputs, labels, path):
    """Runs the exported graph in onnxtrain on the example data and compares it with torch autograd."""
    graph = onnx.load(str(path))
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    in_names = ["input"] if len(inputs) == 1 else [f"input_{i}" for i in range(len(inputs))]
    params = list(model.named_parameters())
    assert [i.name for i in graph.graph.input] == in_names + ["labels"] + [n for n, _ in params]
    trainable = [n for n, p in params if p.requires_grad]
    assert [o.name for o in graph.graph.output] == ["output", "loss"] + [f"{n}_grad" for n in trainable]

    feed = {n: v.detach().numpy() for n, v in zip(in_names, inputs)}
    feed["labels"] = labels.numpy()
    feed.update({n: p.detach().numpy() for n, p in params})
    sess = onnxtrain.InferenceSession(str(path))
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))

    model.zero_grad()
    out = model(*inputs)
    loss = loss_fn(out, labels)
    loss.backward()
    np.testing.assert_allclose(got["output"], out.detach().numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["loss"], loss.detach().numpy(), rtol=1e-4, atol=1e-6)
    for n, p in params:
        if p.requires_grad:
            assert got[f"{n}_grad"].shape == tuple(p.shape)
            np.testing.assert_allclose(got[f"{n}_grad"], p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=n)
    return graph, feed, got


def check_portable(graph):
    onnx.checker.check_model(graph, full_check=True)
    assert {n.domain for n in graph.graph.node} <= {"", "ai.onnx"}
    assert {o.domain for o in graph.opset_import} <= {"", "ai.onnx"}


@pytest.fixture
def mlp_case():
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(6, 10)
    y = torch.tensor([0, 2, 1, 1, 0, 2])
    return model, cross_entropy, x, y


def test_mlp_cross_entropy_matches_autograd(tmp_path, mlp_case):
    model, loss_fn, x, y = mlp_case
    path = tmp_path / "grad.onnx"
    export_gradient_graph(model, loss_fn, x, y, path)
    graph, _, _ = run_and_compare(model, loss_fn, x, y, path)
    check_portable(graph)
    assert all(not o.name.startswith("frozen_layer") for o in graph.graph.output)


def test_batch_size_is_dynamic(tmp_path, mlp_case):
    model, loss_fn, x, y = mlp_case
    path = tmp_path / "grad.onnx"
    export_gradient_graph(model, loss_fn, x, y, str(path))
    torch.manual_seed(1)
    run_and_compare(model, loss_fn, torch.randn(3, 10), torch.tensor([2, 0, 1]), path)


def softmax_mlp():
    torch.manual_seed(2)
    return torch.nn.Sequential(MLP(classes=2), torch.nn.Softmax(dim=1)), torch.randn(1, 10), torch.tensor([1.0])


def test_onnxruntime_test_model_and_loss(tmp_path):
    """onnxruntime's own case: softmax probabilities, a custom binary cross-entropy, batch 1. Its
    column indexing (Gather) has a standard-ops gradient from opset 16 (ScatterElements with add)."""
    model, x, y = softmax_mlp()
    path = tmp_path / "gradient_graph_model.onnx"
    export_gradient_graph(model, binary_cross_entropy_loss, x, y, path, opset_version=16)
    graph, _, _ = run_and_compare(model, binary_cross_entropy_loss, x, y, path)
    check_portable(graph)
    assert len(graph.graph.output) == 2 + 4


def test_non_portable_gradient_warns_and_runs_in_onnxtrain(tmp_path):
    """Below opset 16 the Gather gradient needs onnxtrain's GatherGrad: a warning names it."""
    model, x, y = softmax_mlp()
    path = tmp_path / "g.onnx"
    with pytest.warns(RuntimeWarning, match="com.onnxtrain.GatherGrad"):
        export_gradient_graph(model, binary_cross_entropy_loss, x, y, path)
    graph, _, _ = run_and_compare(model, binary_cross_entropy_loss, x, y, path)
    onnx.checker.check_model(graph)


def test_conv_two_inputs_matches_autograd(tmp_path):
    torch.manual_seed(3)
    model = ConvTwoInputs()
    image, extra = torch.randn(4, 2, 6, 6), torch.randn(4, 3)
    labels = torch.randn(4, 2)
    path = tmp_path / "conv.onnx"
    export_gradient_graph(model, mse, (image, extra), labels, path, opset_version=13)
    graph, _, _ = run_and_compare(model, mse, (image, extra), labels, path)
    check_portable(graph)


@pytest.mark.parametrize("opset", [12, 15])
def test_batch_norm_training_and_buffers_untouched(tmp_path, opset):
    """Batch statistics in the graph (training mode); exporting leaves the running statistics as they were."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(5, 3), torch.randn(5, 1)
    export_gradient_graph(model, mse, x, y, tmp_path / "bn.onnx", opset_version=opset)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    graph, _, _ = run_and_compare(model, mse, x, y, tmp_path / "bn.onnx")
    check_portable(graph)


def test_onnx_reference_evaluator(tmp_path, mlp_case):
    reference = pytest.importorskip(
        "onnx.reference", reason=f"onnx {onnx.__version__} has no onnx.reference (ReferenceEvaluator came in 1.13)")
    model, loss_fn, x, y = mlp_case
    path = tmp_path / "grad.onnx"
    export_gradient_graph(model, loss_fn, x, y, path)
    _, feed, got = run_and_compare(model, loss_fn, x, y, path)
    ref = reference.ReferenceEvaluator(str(path))
    names = [o.name for o in onnx.load(str(path)).graph.output]
    for n, v in zip(names, ref.run(None, feed)):
        np.testing.assert_allclose(v, got[n], rtol=1e-4, atol=1e-6, err_msg=n)


def test_under_onnxruntime_alias(tmp_path):
    """onnxruntime's documented usage, run unchanged with ``python3 -m onnxtrain.ort_alias``."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        import torch
        import onnxruntime
        from onnxruntime.training.experimental import export_gradient_graph

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
        x, y = torch.randn(2, 4), torch.tensor([1, 0])
        loss_fn = torch.nn.CrossEntropyLoss()
        export_gradient_graph(model, loss_fn, x, y, sys.argv[1])
        sess = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
        feed = {"input": x.numpy(), "labels": y.numpy()}
        feed.update({n: p.detach().numpy() for n, p in model.named_parameters()})
        outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
        loss_fn(model(x), y).backward()
        for n, p in model.named_parameters():
            assert np.allclose(outs[n + "_grad"], p.grad.numpy(), rtol=1e-4, atol=1e-6), n
        print("ok", len(outs))
    """))
    r = run_alias(script, tmp_path / "g.onnx", env=alias_env(*(p for p in sys.path if p)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "ok 6"


@pytest.mark.parametrize("bad, error, match", [
    (dict(model="not a module"), TypeError, "torch.nn.Module"),
    (dict(model=lambda x: x), TypeError, "torch.nn.Module"),
    (dict(loss_fn=3), TypeError, "loss_fn must be callable"),
    (dict(example_input=np.zeros((2, 10), np.float32)), TypeError, "example_input"),
    (dict(example_labels=[0, 1]), TypeError, "example_labels"),
    (dict(gradient_graph_path="MISSING_DIR/g.onnx"), FileNotFoundError, "does not exist"),
    (dict(gradient_graph_path="."), IsADirectoryError, "is a directory"),
    (dict(gradient_graph_path=5), TypeError, "gradient_graph_path"),
    (dict(opset_version="12"), ValueError, "opset_version"),
])
def test_argument_errors(tmp_path, mlp_case, bad, error, match):
    model, loss_fn, x, y = mlp_case
    args = dict(model=model, loss_fn=loss_fn, example_input=x, example_labels=y,
                gradient_graph_path=tmp_path / "g.onnx")
    args.update(bad)
    if args["gradient_graph_path"] == "MISSING_DIR/g.onnx":
        args["gradient_graph_path"] = tmp_path / "missing" / "g.onnx"
    elif args["gradient_graph_path"] == ".":
        args["gradient_graph_path"] = tmp_path
    with pytest.raises(error, match=match):
        export_gradient_graph(**args)
    assert not (tmp_path / "g.onnx").exists()


def test_no_trainable_parameter(tmp_path):
    model = torch.nn.Linear(3, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="requires_grad"):
        export_gradient_graph(model, mse, torch.randn(2, 3), torch.randn(2, 2), tmp_path / "g.onnx")
