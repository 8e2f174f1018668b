"""onnxruntime's onnxblock (``onnxtrain.training.onnxblock``): losses and building blocks against
PyTorch's functional losses, a custom loss built from blocks that differentiates and trains
(against PyTorch in float64 with onnxruntime's AdamW, and against onnxruntime-web 1.19.2 on the same
files), TrainingBlock / ForwardBlock / optimizer blocks used directly as onnxruntime's examples
use them, and the refusals."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from onnxtrain import InferenceSession  # noqa: E402
from onnxtrain.training import artifacts, onnxblock  # noqa: E402
from onnxtrain.training.api import CheckpointState, Module, Optimizer  # noqa: E402
from onnxtrain.training.onnxblock import blocks, loss  # noqa: E402
from test_artifacts import LR, MLP, STEPS, case, export, mlp_model, onnxtrain_losses, run_ort_web  # noqa: E402
from test_ort_checkpoint import adamw_hf  # noqa: E402

F = torch.nn.functional


class Scores(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def scores_model():
    torch.manual_seed(1)
    net = Scores()
    return export(net, torch.randn(2, 4)), net


class WeightedLoss(onnxblock.Block):
    """A custom loss from blocks: mean((x - t)^2) + 0.5 * mean(|x - t|)."""

    def __init__(self):
        super().__init__()
        self.mse, self.l1 = loss.MSELoss(), loss.L1Loss()
        self.add, self.mul = blocks.Add(), blocks.Mul()

    def build(self, output_name):
        return self.add(self.mse(output_name, "target"), self.mul(blocks.Constant(0.5)(), self.l1(output_name, "target")))


def data():
    rng = np.random.default_rng(9)
    return rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)


def test_custom_loss_block_trains_as_pytorch_and_onnxruntime_web(tmp_path):
    """(An MLP: onnxruntime-web 1.19.2 fails a training step of single-layer artifacts, "table index
    is out of bounds" while handing out the outputs, although its InferenceSession runs the same
    training graph; docs/on-device.md.)"""
    torch.manual_seed(0)
    net = MLP()
    model = export(net, torch.randn(2, 4))
    names = [i.name for i in model.graph.initializer]
    folder = str(tmp_path / "art")
    artifacts.generate_artifacts(model, requires_grad=names, loss=WeightedLoss(), optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=folder)
    x, t = data()
    losses, state, module = onnxtrain_losses(folder, x, t)
    assert module.input_names() == ["input", "target"]
    # PyTorch in float64, onnxruntime's AdamW (mode 1).
    net = net.double()
    params = dict(net.named_parameters())
    m = {k: np.zeros(p.shape) for k, p in params.items()}
    v = {k: np.zeros(p.shape) for k, p in params.items()}
    ref = []
    for step in range(1, STEPS + 1):
        net.zero_grad()
        out = net(torch.tensor(x, dtype=torch.float64))
        value = F.mse_loss(out, torch.tensor(t, dtype=torch.float64)) + 0.5 * F.l1_loss(out, torch.tensor(t, dtype=torch.float64))
        value.backward()
        ref.append(value.item())
        with torch.no_grad():
            for k, p in params.items():
                w, m[k], v[k] = adamw_hf(p.numpy(), p.grad.numpy(), m[k], v[k], LR, step, wd=0.0)
                p.copy_(torch.from_numpy(w))
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    web = run_ort_web(folder, tmp_path, x, t, "target")
    np.testing.assert_allclose(losses, web["losses"], rtol=1e-5)
    np.testing.assert_allclose(module.get_contiguous_parameters().numpy(), web["parameters_after"], rtol=1e-5,
                               atol=1e-7)


@pytest.mark.parametrize("name", ["cnn", "encoder"])
def test_custom_loss_block_artifacts_of_a_cnn_and_an_encoder_train_in_onnxruntime_web(tmp_path, name):
    """The custom loss on the CNN with BatchNorm (statistics trained) and the transformer encoder
    layer: onnxruntime-web's losses and final parameters equal onnxtrain's."""
    model, net, requires, frozen, _, _, x, _ = case(name)
    with torch.no_grad():
        shape = net(torch.tensor(x)).shape
    t = np.random.default_rng(8).standard_normal(tuple(shape)).astype(np.float32)
    folder = str(tmp_path / "art")
    artifacts.generate_artifacts(model, requires_grad=requires, frozen_params=frozen, loss=WeightedLoss(),
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=folder)
    losses, state, module = onnxtrain_losses(folder, x, t)
    web = run_ort_web(folder, tmp_path, x, t, "target")
    np.testing.assert_allclose(losses, web["losses"], rtol=1e-5)
    np.testing.assert_allclose(module.get_contiguous_parameters().numpy(), web["parameters_after"], rtol=1e-4,
                               atol=1e-6)
    assert losses[-1] < losses[0]


def run_block(build, feeds):
    """Builds ``build()`` (returning output names) on a model with float inputs ``feeds`` inside
    ``empty_base`` and runs it in onnxtrain's InferenceSession."""
    with onnxblock.empty_base(opset_version=14) as acc:
        for name, value in feeds.items():
            acc.model.graph.input.append(onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype) if hasattr(onnx.helper, "np_dtype_to_tensor_dtype")
                else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[value.dtype], list(value.shape)))
        outputs = build()
        outputs = [outputs] if isinstance(outputs, str) else list(outputs)
        acc.model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(o) for o in outputs)
        model = acc.model
    return InferenceSession(model.SerializeToString()).run(outputs, feeds)


def test_losses_match_pytorch():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    t = rng.standard_normal((5, 3)).astype(np.float32)
    p = rng.random((5, 3)).astype(np.float32)
    labels = rng.integers(0, 3, 5).astype(np.int64)
    labels[2] = 1
    X, T, P, L = (torch.tensor(a, dtype=torch.float64 if a.dtype == np.float32 else torch.int64) for a in (x, t, p, labels))
    weight, pos = [0.5, 2.0, 1.0], [1.5, 0.5, 3.0]
    cases = [
        (lambda: loss.MSELoss()("x", "t"), {"x": x, "t": t}, F.mse_loss(X, T)),
        (lambda: loss.MSELoss("sum")("x", "t"), {"x": x, "t": t}, F.mse_loss(X, T, reduction="sum")),
        (lambda: loss.L1Loss()("x", "t"), {"x": x, "t": t}, F.l1_loss(X, T)),
        (lambda: loss.L1Loss("none")("x", "t"), {"x": x, "t": t}, F.l1_loss(X, T, reduction="none")),
        (lambda: loss.BCEWithLogitsLoss(weight=weight, pos_weight=pos)("x", "t"), {"x": x, "t": p},
         F.binary_cross_entropy_with_logits(X, P, weight=torch.tensor(weight, dtype=torch.float64),
                                            pos_weight=torch.tensor(pos, dtype=torch.float64))),
        (lambda: loss.CrossEntropyLoss(weight=weight, ignore_index=1)("x", "l"), {"x": x, "l": labels},
         F.cross_entropy(X, L, weight=torch.tensor(weight, dtype=torch.float64), ignore_index=1)),
        (lambda: loss.CrossEntropyLoss(reduction="sum")("x", "l"), {"x": x, "l": labels}, F.cross_entropy(X, L, reduction="sum")),
    ]
    for build, feeds, expected in cases:
        got = run_block(build, feeds)[0]
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_building_blocks_compute_what_they_name():
    rng = np.random.default_rng(2)
    a = rng.random((2, 3)).astype(np.float32) + 0.5
    b = rng.standard_normal((2, 3)).astype(np.float32)
    got = run_block(lambda: (blocks.Add()("a", "b"), blocks.Sub()("a", "b"), blocks.Mul()("a", "b"),
                             blocks.Div()("a", "b"), blocks.Pow(3.0)("a"), blocks.Log()("a"), blocks.Neg()("b"),
                             blocks.Abs()("b"), blocks.Sigmoid()("b"), blocks.Relu()("b"),
                             blocks.ReduceMean()("b"), blocks.ReduceSum(keepdims=True)("b"),
                             blocks.Clip(clip_min=-0.2, clip_max=0.3)("b"), blocks.Cast(onnx.TensorProto.INT64)("a"),
                             blocks.Gemm(alpha=2.0, transB=1)("a", "b")), {"a": a, "b": b})
    expected = [a + b, a - b, a * b, a / b, a ** 3, np.log(a), -b, np.abs(b), 1 / (1 + np.exp(-b)), np.maximum(b, 0),
                b.mean(), b.sum(keepdims=True), np.clip(b, -0.2, 0.3), a.astype(np.int64), 2 * a @ b.T]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


class MLPTrainingBlock(onnxblock.TrainingBlock):
    def __init__(self):
        super().__init__()
        self.loss = loss.CrossEntropyLoss()

    def build(self, output_name):
        return self.loss(output_name)


def test_training_block_used_as_onnxruntimes_examples_use_it(tmp_path):
    """TrainingBlock, save_checkpoint and an optimizer block built in empty_base, as onnxruntime's
    documentation shows them; the result trains as generate_artifacts' with the same arguments
    (losses equal) and gradient clipping clips."""
    model = mlp_model()
    block = MLPTrainingBlock()
    for p in model.graph.initializer:
        block.requires_grad(p.name)
    block.requires_grad("fc2.bias", False)
    with pytest.raises(RuntimeError, match="build the training model first"):
        block.parameters()
    with onnxblock.base(model):
        loss_name = block(model.graph.output[0].name)
    training, evaluation = block.to_model_proto()
    assert [i.name for i in training.graph.input][-1] == "lazy_reset_grad" and training.graph.output[0].name == loss_name
    trainable, frozen = block.parameters()
    assert [p.name for p in trainable] == ["fc1.weight", "fc1.bias", "fc2.weight"] and [p.name for p in frozen] == ["fc2.bias"]
    onnx.save(training, str(tmp_path / "training_model.onnx"))
    onnx.save(evaluation, str(tmp_path / "eval_model.onnx"))
    onnxblock.save_checkpoint(block.parameters(), str(tmp_path / "checkpoint"))
    with onnxblock.empty_base() as acc:
        onnxblock.optim.AdamW()(block.parameters())
        onnx.save(acc.model, str(tmp_path / "optimizer_model.onnx"))
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((8, 4)).astype(np.float32), rng.integers(0, 3, 8)
    losses, state, module = onnxtrain_losses(str(tmp_path), x, y)
    artifacts.generate_artifacts(model, requires_grad=["fc1.weight", "fc1.bias", "fc2.weight"], frozen_params=["fc2.bias"],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=tmp_path / "gen")
    np.testing.assert_allclose(losses, onnxtrain_losses(str(tmp_path / "gen"), x, y)[0], rtol=1e-6)
    # ClipGradNorm: one step with the gradients clipped to norm 0.01 (numpy: g * 0.01 / (|g| + 1e-6)).
    with onnxblock.empty_base() as acc:
        onnxblock.optim.AdamW(clip_grad=onnxblock.optim.ClipGradNorm(0.01))(block.parameters())
        onnx.save(acc.model, str(tmp_path / "clipped.onnx"))
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    module = Module(str(tmp_path / "training_model.onnx"), state)
    optimizer = Optimizer(str(tmp_path / "clipped.onnx"), module)
    module(x, y)
    names = ["fc1.weight", "fc1.bias", "fc2.weight"]
    w = {n: state.parameters[n].data.astype(np.float64) for n in names}
    g = {n: state.parameters[n].grad.astype(np.float64) for n in names}
    norm = np.sqrt(sum((v ** 2).sum() for v in g.values()))
    optimizer.step()
    for n in names:
        expected, _, _ = adamw_hf(w[n], g[n] * min(1.0, 0.01 / (norm + 1e-6)), 0, 0, LR, 1, wd=0.0)
        np.testing.assert_allclose(state.parameters[n].data, expected, rtol=1e-5, atol=1e-7, err_msg=n)


def test_forward_block_and_checkpoint_to_model(tmp_path):
    class WithLoss(onnxblock.ForwardBlock):
        def __init__(self):
            super().__init__()
            self.loss = loss.MSELoss()

        def build(self, output_name):
            return self.loss(output_name)

    model, net = scores_model()
    block = WithLoss()
    with onnxblock.base(model):
        out = block(model.graph.output[0].name)
    forward = block.to_model_proto()
    assert [o.name for o in forward.graph.output] == [out]
    x, t = data()
    with torch.no_grad():
        expected = F.mse_loss(net(torch.tensor(x)), torch.tensor(t)).item()
    np.testing.assert_allclose(InferenceSession(forward.SerializeToString()).run(None, {"input": x, "target": t})[0],
                               expected, rtol=1e-5)
    # load_checkpoint_to_model: a checkpoint's values into a model's initializers.
    trained = {p.name: onnx.numpy_helper.to_array(p) + 1 for p in model.graph.initializer}
    onnxblock.save_checkpoint(([onnx.numpy_helper.from_array(v, k) for k, v in trained.items()], []),
                              str(tmp_path / "ck"))
    onnxblock.load_checkpoint_to_model(str(tmp_path / "ck"), model)
    for p in model.graph.initializer:
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(p), trained[p.name])
    onnxblock.save_checkpoint((list(model.graph.initializer), []), str(tmp_path / "nominal"), nominal_checkpoint=True)
    nominal = CheckpointState.load_checkpoint(str(tmp_path / "nominal"))
    with pytest.raises(Exception, match="load"):
        nominal.parameters["fc.weight"].data


def test_refusals():
    with pytest.raises(RuntimeError, match="inside `with onnxblock.base"):
        blocks.Add()("a", "b")
    with pytest.raises(NotImplementedError, match="custom operator"):
        with onnxblock.custom_op_library("lib.so"):
            pass
    with pytest.raises(RuntimeError, match="Reduction max not supported"):
        loss.MSELoss("max")
    model = mlp_model()
    block = MLPTrainingBlock()
    block.requires_grad("nope")
    with pytest.raises(RuntimeError, match=r"\['nope'\] are not initializers"):
        with onnxblock.base(model):
            block("out")
    with pytest.raises(LookupError, match="Could not find input or output with name inner"):
        with onnxblock.base(model):
            blocks.InputLike("inner")("t")
