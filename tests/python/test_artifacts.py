"""onnxruntime's ``generate_artifacts`` (``onnxtrain.training.artifacts``) on models PyTorch exports:
an MLP, a CNN with BatchNorm (running statistics trained), a transformer encoder layer. Each set of
artifacts trains ten AdamW steps in onnxtrain's on-device API against two independent references:
PyTorch's autograd in float64 with onnxruntime's AdamW (mode 1) in numpy, and onnxruntime-web
1.19.2 (onnxruntime's training runtime compiled to WebAssembly, under Node 20) loading the same
files. Then the arguments: losses, optimizers, prefixes, nominal checkpoints, refusals."""
import io
import json
import os
import subprocess
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from onnxtrain import InvalidArgument  # noqa: E402
from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training.api import CheckpointState, Module, Optimizer  # noqa: E402
from test_ort_checkpoint import ROOT, adamw_hf, ort_web  # noqa: E402
from alias_run import run_alias

STEPS = 10
LR = 0.001


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 5)
        self.fc2 = torch.nn.Linear(5, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(h.flatten(1))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)


def export(net, sample, opset=14):
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, sample, f, input_names=["input"], output_names=["out"], opset_version=opset,
                          dynamic_axes={"input": {0: "N"}, "out": {0: "N"}}, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
    return onnx.load_from_string(f.getvalue())


def case(name):
    """(model, torch module, requires_grad, frozen, loss type, torch loss, input, target)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    if name == "mlp":
        net, x = MLP(), rng.standard_normal((8, 4)).astype(np.float32)
        y = rng.integers(0, 3, 8)
        loss, ref = artifacts.LossType.CrossEntropyLoss, torch.nn.functional.cross_entropy
    elif name == "cnn":
        net, x = CNN(), rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
        y = rng.integers(0, 3, 8)
        loss, ref = artifacts.LossType.CrossEntropyLoss, torch.nn.functional.cross_entropy
    else:
        net, x = Encoder(), rng.standard_normal((4, 5, 8)).astype(np.float32)
        y = rng.standard_normal((4, 5, 8)).astype(np.float32)
        loss, ref = artifacts.LossType.MSELoss, torch.nn.functional.mse_loss
    model = export(net, torch.tensor(x[:2]), 17 if name == "encoder" else 14)
    inits = [i.name for i in model.graph.initializer]
    frozen = [n for n in inits if ".running_" in n]
    requires = [n for n in inits if n not in frozen and "num_batches" not in n]
    return model, net, requires, frozen, loss, ref, x, y


def onnxtrain_losses(folder, x, y):
    state = CheckpointState.load_checkpoint(os.path.join(folder, "checkpoint"))
    module = Module(os.path.join(folder, "training_model.onnx"), state, os.path.join(folder, "eval_model.onnx"))
    optimizer = Optimizer(os.path.join(folder, "optimizer_model.onnx"), module)
    losses = []
    for _ in range(STEPS):
        losses.append(float(module(x, y)))
        optimizer.step()
        module.lazy_reset_grad()
    return losses, state, module


def torch_reference(net, state0, requires, ref_loss, x, y):
    """Losses of ten steps: PyTorch's float64 gradients, onnxruntime's AdamW (mode 1) in numpy, the
    module in training mode (BatchNorm statistics updated by PyTorch); the module starts from the
    checkpoint's values. Returns (losses, final state dict)."""
    net = net.double().train()
    with torch.no_grad():
        for k, v in net.state_dict().items():
            if k in state0:
                v.copy_(torch.from_numpy(state0[k].astype(np.float64)))
    params = dict(net.named_parameters())
    m = {k: np.zeros(params[k].shape) for k in requires}
    v = {k: np.zeros(params[k].shape) for k in requires}
    target = torch.tensor(y if y.dtype.kind == "i" else y.astype(np.float64))
    losses = []
    for t in range(1, STEPS + 1):
        net.zero_grad()
        loss = ref_loss(net(torch.tensor(x.astype(np.float64))), target)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            for k in requires:
                w, m[k], v[k] = adamw_hf(params[k].numpy(), params[k].grad.numpy(), m[k], v[k], LR, t, wd=0.0)
                params[k].copy_(torch.from_numpy(w))
    return losses, {k: t.numpy() for k, t in net.state_dict().items()}


def run_ort_web(folder, tmp_path, x, y, target_name):
    """onnxruntime-web's losses and final parameters (training-model input order) over the same files."""
    web, reason = ort_web()
    if web is None:
        pytest.skip(reason)
    label = {"dims": list(y.shape), "data": y.ravel().tolist()}
    if y.dtype.kind == "i":
        label["type"] = "int64"
    feeds = {"input": {"dims": list(x.shape), "data": x.ravel().tolist()}, target_name: label}
    job = {"checkpoint": os.path.join(folder, "checkpoint"),
           "train_model": os.path.join(folder, "training_model.onnx"),
           "optimizer_model": os.path.join(folder, "optimizer_model.onnx"),
           "steps": [{"feeds": feeds, "optimizer": True} for _ in range(STEPS)]}
    (tmp_path / "job.json").write_text(json.dumps(job))
    run = subprocess.run(["node", os.path.join(ROOT, "tests", "python", "ort_web_runner.js"), str(tmp_path / "job.json")],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "ONNXTRAIN_ORT_WEB": web})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.mark.parametrize("name", ["mlp", "cnn", "encoder"])
def test_artifacts_train_as_pytorch(tmp_path, name):
    model, net, requires, frozen, loss, ref_loss, x, y = case(name)
    folder = str(tmp_path / "art")
    artifacts.generate_artifacts(model, requires_grad=requires, frozen_params=frozen, loss=loss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=folder)
    assert sorted(os.listdir(folder)) == ["checkpoint", "eval_model.onnx", "optimizer_model.onnx", "training_model.onnx"]
    start = CheckpointState.load_checkpoint(os.path.join(folder, "checkpoint"))
    state0 = {k: start.parameters[k].data for k in requires + frozen}
    for k in requires + frozen:  # the checkpoint holds the model's initializers
        init = next(i for i in model.graph.initializer if i.name == k)
        np.testing.assert_array_equal(state0[k], onnx.numpy_helper.to_array(init))
        assert start.parameters[k].requires_grad == (k in requires)
    losses, state, module = onnxtrain_losses(folder, x, y)
    ref, ref_state = torch_reference(net, state0, requires, ref_loss, x, y)
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    for k in requires:
        np.testing.assert_allclose(state.parameters[k].data, ref_state[k], rtol=1e-4, atol=1e-6, err_msg=k)
    for k in [f for f in frozen if f.endswith("running_mean")]:  # BatchNorm statistics follow training
        np.testing.assert_allclose(state.parameters[k].data, ref_state[k], rtol=1e-4, atol=1e-6, err_msg=k)
        assert not np.allclose(state.parameters[k].data, state0[k])
    # The eval model: the loss in inference mode (BatchNorm with the running statistics).
    module.eval()
    net.eval()
    with torch.no_grad():
        for k, v in net.state_dict().items():
            if k in state.parameters:
                v.copy_(torch.from_numpy(state.parameters[k].data.astype(np.float64)))
        target = torch.tensor(y if y.dtype.kind == "i" else y.astype(np.float64))
        expected = ref_loss(net(torch.tensor(x.astype(np.float64))), target).item()
    np.testing.assert_allclose(float(module(x, y)), expected, rtol=1e-5)


@pytest.mark.parametrize("name", ["mlp", "cnn", "encoder"])
def test_artifacts_train_as_onnxruntime_web(tmp_path, name):
    """The same artifacts in onnxruntime-web 1.19.2: every loss and the final parameters (BatchNorm
    statistics included) within 1e-5 of onnxtrain's."""
    model, net, requires, frozen, loss, ref_loss, x, y = case(name)
    folder = str(tmp_path / "art")
    artifacts.generate_artifacts(model, requires_grad=requires, frozen_params=frozen, loss=loss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=folder)
    web = run_ort_web(folder, tmp_path, x, y, "labels" if name != "encoder" else "target")
    losses, state, module = onnxtrain_losses(folder, x, y)
    np.testing.assert_allclose(losses, web["losses"], rtol=1e-5)
    np.testing.assert_allclose(module.get_contiguous_parameters().numpy(), web["parameters_after"], rtol=1e-4,
                               atol=1e-6)
    assert web["training_outputs"] == ["loss"]


def mlp_model():
    torch.manual_seed(0)
    return export(MLP(), torch.randn(2, 4))


def test_losses_optimizers_and_files(tmp_path):
    model = mlp_model()
    names = [i.name for i in model.graph.initializer]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    t = rng.standard_normal((6, 3)).astype(np.float32)
    p = rng.random((6, 3)).astype(np.float32)
    for loss, target, expected in (
            (artifacts.LossType.MSELoss, t, lambda s: np.mean((s - t) ** 2)),
            (artifacts.LossType.L1Loss, t, lambda s: np.mean(np.abs(s - t))),
            (artifacts.LossType.BCEWithLogitsLoss, p,
             lambda s: np.mean(-(p * np.log(1 / (1 + np.exp(-s))) + (1 - p) * np.log(1 - 1 / (1 + np.exp(-s))))))):
        folder = tmp_path / loss.name
        artifacts.generate_artifacts(model, requires_grad=names, loss=loss, optimizer=artifacts.OptimType.SGD,
                                     artifact_directory=folder, prefix="m_", nominal_checkpoint=True,
                                     additional_output_names=["out"])
        assert sorted(os.listdir(folder)) == ["m_checkpoint", "m_eval_model.onnx", "m_nominal_checkpoint",
                                              "m_optimizer_model.onnx", "m_training_model.onnx"]
        state = CheckpointState.load_checkpoint(str(folder / "m_checkpoint"))
        module = Module(str(folder / "m_training_model.onnx"), state, str(folder / "m_eval_model.onnx"))
        assert module.input_names() == ["input", "target"] and module.output_names() == ["loss", "out"]
        w = {k: state.parameters[k].data.astype(np.float64) for k in names}
        scores = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0) @ w["fc2.weight"].T + w["fc2.bias"]
        got_loss, got_scores = module(x, target)
        np.testing.assert_allclose(got_loss, expected(scores), rtol=1e-5)
        np.testing.assert_allclose(got_scores, scores, rtol=1e-5, atol=1e-6)
        before = module.get_contiguous_parameters().numpy()
        grads = np.concatenate([state.parameters[k].grad.ravel() for k in names])
        optimizer = Optimizer(str(folder / "m_optimizer_model.onnx"), module)
        optimizer.step()  # SGD: w -= lr * g (onnxruntime-web 1.19.2 cannot create an SGD optimizer session)
        np.testing.assert_allclose(module.get_contiguous_parameters().numpy(), before - LR * grads, rtol=1e-6,
                                   atol=1e-8)
        nominal = CheckpointState.load_checkpoint(str(folder / "m_nominal_checkpoint"))
        assert sorted(name for name, _ in nominal.parameters) == sorted(names)
        with pytest.raises(Exception, match="load"):
            nominal.parameters["fc1.weight"].data


def test_loss_none_trains_the_models_own_loss(tmp_path):
    """loss=None: the model's first output is the loss (onnxruntime's PassThrough); without an
    optimizer no optimizer model is written."""
    model = mlp_model()
    graph = model.graph
    graph.node.append(onnx.helper.make_node("ReduceMean", ["out"], ["mean_out"], keepdims=0))
    graph.output.insert(0, onnx.helper.make_tensor_value_info("mean_out", onnx.TensorProto.FLOAT, []))
    artifacts.generate_artifacts(model, requires_grad=["fc2.bias"], frozen_params=["fc2.weight"],
                                 artifact_directory=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "eval_model.onnx", "training_model.onnx"]
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    module = Module(str(tmp_path / "training_model.onnx"), state)
    x = np.ones((2, 4), np.float32)
    module(x)
    np.testing.assert_allclose(state.parameters["fc2.bias"].grad, np.full(3, 1 / 3, np.float32), rtol=1e-6)
    assert not state.parameters["fc2.weight"].requires_grad


def test_batchnorm_statistics_can_stay_frozen_as_in_onnxruntime(tmp_path):
    model, net, requires, frozen, loss, ref_loss, x, y = case("cnn")
    artifacts.generate_artifacts(model, requires_grad=requires, frozen_params=frozen, loss=loss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path,
                                 update_batchnorm_statistics=False)
    before = {k: CheckpointState.load_checkpoint(str(tmp_path / "checkpoint")).parameters[k].data for k in frozen}
    losses, state, module = onnxtrain_losses(str(tmp_path), x, y)
    for k in frozen:
        np.testing.assert_array_equal(state.parameters[k].data, before[k])


def test_bad_arguments_are_refused_by_name(tmp_path):
    model = mlp_model()
    ok = {"requires_grad": ["fc1.weight"], "artifact_directory": tmp_path}
    cases = [
        (dict(ok, requires_grad=["nope"]), InvalidArgument, "'nope', which is not an initializer"),
        (dict(ok, frozen_params=["fc1.weight"]), InvalidArgument, "both requires_grad and frozen_params"),
        (dict(ok, requires_grad=[]), InvalidArgument, "requires_grad is empty"),
        (dict(ok, loss=artifacts.LossType.MSELoss, additional_output_names=["nothing"]), InvalidArgument,
         "'nothing', which is not a value"),
        (dict(ok, loss="MSELoss"), RuntimeError, "Unknown loss provided"),
        (dict(ok, optimizer="AdamW"), RuntimeError, "Unknown optimizer provided"),
        (dict(ok, additional_output_names="out"), RuntimeError, "Expected additional output names to be a list"),
        (dict(ok, ort_format=True), NotImplementedError, "ort_format"),
        (dict(ok, custom_op_library="lib.so"), NotImplementedError, "custom_op_library"),
        (dict(ok, loss=artifacts.LossType.MSELoss, loss_input_names=["out", "input"]), NotImplementedError,
         "loss_input_names holds 2 names"),
        (dict(ok, prefix="../x"), InvalidArgument, "plain file-name prefix"),
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            artifacts.generate_artifacts(model, **kwargs)
    assert os.listdir(tmp_path) == []
    two = mlp_model()
    two.graph.output.append(onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, None))
    with pytest.raises(InvalidArgument, match="Give loss_input_names"):
        artifacts.generate_artifacts(two, requires_grad=["fc1.weight"], loss=artifacts.LossType.MSELoss,
                                     artifact_directory=tmp_path)
    with pytest.raises(TypeError, match="ModelProto or a path"):
        artifacts.generate_artifacts(42, requires_grad=["fc1.weight"], artifact_directory=tmp_path)


def test_model_by_path_and_the_alias(tmp_path):
    """A model given by path; ``onnxruntime.training.artifacts`` under the alias is this module."""
    path = tmp_path / "m.onnx"
    onnx.save(mlp_model(), str(path))
    out = tmp_path / "new" / "folder"
    script = tmp_path / "s.py"
    script.write_text(
        "from onnxruntime.training import artifacts\n"
        "import onnxtrain.training.artifacts as mine\n"
        "assert artifacts.generate_artifacts is mine.generate_artifacts\n"
        "from onnxruntime.training import onnxblock\n"
        "import onnxtrain.training.onnxblock as my_block\n"
        "assert onnxblock.TrainingBlock is my_block.TrainingBlock and onnxblock.loss.MSELoss is my_block.loss.MSELoss\n"
        f"artifacts.generate_artifacts({str(path)!r}, requires_grad=['fc1.weight', 'fc1.bias'],\n"
        "    loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,\n"
        f"    artifact_directory={str(out)!r})\n")
    run = run_alias(script)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["checkpoint", "eval_model.onnx", "optimizer_model.onnx", "training_model.onnx"]


@pytest.mark.parametrize("name", ["mlp", "cnn", "encoder"])
def test_command_line_writes_the_same_artifacts_and_they_train_in_onnxruntime_web(tmp_path, name):
    """`onnxtrain artifacts` (no Python involved in making them): the files generate_artifacts
    writes for the same arguments, byte for byte; onnxruntime-web trains them to onnxtrain's
    losses, and so does `onnxtrain train DIR`."""
    cli = os.environ.get("ONNXTRAIN_CLI", os.path.join(ROOT, "build", "onnxtrain"))
    model, net, requires, frozen, loss, ref_loss, x, y = case(name)
    onnx.save(model, str(tmp_path / "cnn.onnx"))
    run = subprocess.run([cli, "artifacts", str(tmp_path / "cnn.onnx"), "--requires-grad", ",".join(requires),
                          *(["--frozen", ",".join(frozen)] if frozen else []), "--loss", loss.name, "--optimizer", "AdamW",
                          "--out", str(tmp_path / "cli"), "--nominal-checkpoint"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    artifacts.generate_artifacts(model, requires_grad=requires, frozen_params=frozen, loss=loss, nominal_checkpoint=True,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path / "py")
    names = sorted(os.listdir(tmp_path / "py"))
    assert sorted(os.listdir(tmp_path / "cli")) == names
    for n in names:
        assert (tmp_path / "cli" / n).read_bytes() == (tmp_path / "py" / n).read_bytes(), n
    folder = str(tmp_path / "cli")
    target = "labels" if loss == artifacts.LossType.CrossEntropyLoss else "target"
    web = run_ort_web(folder, tmp_path, x, y, target)
    losses, state, module = onnxtrain_losses(folder, x, y)
    np.testing.assert_allclose(losses, web["losses"], rtol=1e-5)
    # `onnxtrain train DIR`: the same ten steps (one batch each) from the command line.
    np.savez(tmp_path / "d.npz", **{"input": x, target: y})
    trained = subprocess.run([cli, "train", folder, "--data", str(tmp_path / "d.npz"), "--batch-size", str(len(x)),
                              "--epochs", str(STEPS), "--no-shuffle", "--out", str(tmp_path / "trained")],
                             capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr
    epochs = [float(line.split()[-1]) for line in trained.stdout.splitlines() if line.startswith("epoch ")]
    np.testing.assert_allclose(epochs, web["losses"], rtol=1e-5)
    after = CheckpointState.load_checkpoint(str(tmp_path / "trained"))
    order = [i.name for i in model.graph.initializer if i.name in requires + frozen]  # the training inputs' order
    np.testing.assert_allclose(np.concatenate([after.parameters[n].data.ravel() for n in order]),
                               web["parameters_after"], rtol=1e-4, atol=1e-6)
    refused = subprocess.run([cli, "train", folder, "--data", str(tmp_path / "d.npz"), "--loss", "mse"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--loss" in refused.stderr
    bad = subprocess.run([cli, "artifacts", str(tmp_path / "cnn.onnx"), "--requires-grad", "nope", "--out",
                          str(tmp_path / "bad")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "'nope', which is not an initializer" in bad.stderr
    assert not (tmp_path / "bad").exists()


class Unsupported(torch.nn.Module):
    """Operators whose gradients onnxruntime had no builder for (ConvTranspose #17710, Atan #22407,
    Resize #16866); ``resize`` adds a nearest Resize (up then down: the identity on the values)."""

    def __init__(self, resize):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1)
        self.fc = torch.nn.Linear(3 * 8 * 8, 4)
        self.resize = resize

    def forward(self, x):
        h = torch.atan(self.up(x))
        if self.resize:
            h = torch.nn.functional.interpolate(h, scale_factor=2, mode="nearest")[:, :, ::2, ::2]
        return self.fc(h.flatten(1))


@pytest.mark.parametrize("resize", [False, True])
def test_models_onnxruntime_could_not_differentiate_get_artifacts(tmp_path, resize):
    """ConvTranspose and Atan: standard ONNX gradients, trained as PyTorch and as onnxruntime-web.
    With Resize: onnxtrain's ResizeGrad, named by a warning; trained as PyTorch in onnxtrain."""
    torch.manual_seed(0)
    net = Unsupported(resize)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 2, 4, 4)).astype(np.float32)
    t = rng.standard_normal((4, 4)).astype(np.float32)
    model = export(net, torch.tensor(x[:2]))
    requires = [i.name for i in model.graph.initializer]
    folder = str(tmp_path / "art")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        artifacts.generate_artifacts(model, requires_grad=requires, loss=artifacts.LossType.MSELoss,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=folder)
    named = [str(w.message) for w in seen if "onnxtrain's operators" in str(w.message)]
    assert (named and "ResizeGrad" in named[0]) if resize else not named
    start = CheckpointState.load_checkpoint(os.path.join(folder, "checkpoint"))
    state0 = {k: start.parameters[k].data for k in requires}
    losses, state, module = onnxtrain_losses(folder, x, t)
    ref, _ = torch_reference(net, state0, requires, torch.nn.functional.mse_loss, x, t)
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    if not resize:
        web = run_ort_web(folder, tmp_path, x, t, "target")
        np.testing.assert_allclose(losses, web["losses"], rtol=1e-5)
