"""onnxruntime's on-device training API (``onnxtrain.training.api``: Module, Optimizer,
LinearLRScheduler over CheckpointState) against independent references: a float64 numpy
computation of the model, its gradients and onnxruntime's AdamW (mode 1), the semantics
onnxruntime documents and tests (gradient accumulation, buffer order, nominal states), and
onnxruntime-web 1.19.2 itself (onnxruntime's training runtime compiled to WebAssembly, under Node
20) on the same artifacts and checkpoints. The artifacts are written here in onnxruntime's layout
(training model with InPlaceAccumulatorV2, eval model, AdamWOptimizer model over sequences)."""
import json
import os
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain
from onnxtrain import _C
from onnxtrain.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer
from test_ort_checkpoint import ROOT, adamw_hf, ort_web, write_checkpoint
from alias_run import run_alias

F32 = TensorProto.FLOAT
MS = "com.microsoft"
# Parameter names whose sorted order (the checkpoint's) differs from the training model's input order.
WEIGHT, BIAS, SCALE = "fc.weight", "fc.bias", "fc.scale"


def write_artifacts(folder, frozen=True, adam_mode=1, weight_decay=0.01):
    """y = (input W + b) * scale, loss = sum((y - labels)^2): the training model (forward,
    hand-written backward, InPlaceAccumulatorV2 into the gradient buffers), the eval model (loss
    and y) and an AdamWOptimizer model, in onnxruntime's artifact layout. ``frozen``: scale is a
    frozen parameter (a model input, as generate_artifacts makes frozen parameters), else a
    constant of the graphs."""
    fwd = [helper.make_node("MatMul", ["input", WEIGHT], ["xw"]),
           helper.make_node("Add", ["xw", BIAS], ["z"]),
           helper.make_node("Mul", ["z", SCALE], ["output"]),
           helper.make_node("Sub", ["output", "labels"], ["d"]),
           helper.make_node("Mul", ["d", "d"], ["dd"]),
           helper.make_node("ReduceSum", ["dd"], ["loss"], keepdims=0)]
    bwd = [helper.make_node("Add", ["d", "d"], ["dy"]),
           helper.make_node("Mul", ["dy", SCALE], ["dz"]),
           helper.make_node("Transpose", ["input"], ["xt"]),
           helper.make_node("MatMul", ["xt", "dz"], [WEIGHT + "_grad"]),
           helper.make_node("ReduceSum", ["dz", "axis0"], [BIAS + "_grad"], keepdims=0)]
    acc = [helper.make_node("InPlaceAccumulatorV2", [f"{p}_grad.accumulation.buffer", f"{p}_grad", "lazy_reset_grad"],
                            [f"{p}_grad.accumulation.out"], domain=MS) for p in (WEIGHT, BIAS)]
    user = [helper.make_tensor_value_info("input", F32, ["N", 3]), helper.make_tensor_value_info("labels", F32, ["N", 2])]
    params = [helper.make_tensor_value_info(WEIGHT, F32, [3, 2]), helper.make_tensor_value_info(BIAS, F32, [2])]
    params += [helper.make_tensor_value_info(SCALE, F32, [1])] if frozen else []
    constants = [] if frozen else [helper.make_tensor(SCALE, F32, [1], [1.5])]
    grads = [helper.make_tensor_value_info(f"{WEIGHT}_grad.accumulation.buffer", F32, [3, 2]),
             helper.make_tensor_value_info(f"{BIAS}_grad.accumulation.buffer", F32, [2])]
    axis0 = helper.make_tensor("axis0", TensorProto.INT64, [1], [0])
    train = helper.make_graph(fwd + bwd + acc, "train",
                              user + params + grads + [helper.make_tensor_value_info("lazy_reset_grad", TensorProto.BOOL, [1])],
                              [helper.make_tensor_value_info("loss", F32, [])] +
                              [helper.make_tensor_value_info(f"{p}_grad.accumulation.out", TensorProto.BOOL, [1])
                               for p in (WEIGHT, BIAS)], [axis0] + constants)
    evaluation = helper.make_graph(fwd, "eval", user + params, [helper.make_tensor_value_info("loss", F32, []),
                                                               helper.make_tensor_value_info("output", F32, ["N", 2])],
                                   constants)
    seq = lambda n: helper.make_tensor_sequence_value_info(n, F32, None)  # noqa: E731
    opt = helper.make_graph(
        [helper.make_node("AdamWOptimizer", ["learning_rate", "step", "params", "gradients", "first_order_moments",
                                             "second_order_moments"], ["updated_flag"], domain=MS, alpha=0.9,
                          beta=0.999, epsilon=1e-6, weight_decay=weight_decay, correct_bias=1, adam_mode=adam_mode)],
        "adamw", [helper.make_tensor_value_info("learning_rate", F32, [1]),
                  helper.make_tensor_value_info("step", TensorProto.INT64, [1]),
                  seq("params"), seq("gradients"), seq("first_order_moments"), seq("second_order_moments")],
        [helper.make_tensor_value_info("updated_flag", TensorProto.BOOL, [1])])
    for name, graph in (("training_model.onnx", train), ("eval_model.onnx", evaluation), ("optimizer_model.onnx", opt)):
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(MS, 1)])
        m.ir_version = 7
        with open(os.path.join(folder, name), "wb") as f:
            f.write(m.SerializeToString())


def make_run(tmp_path, seed=0, frozen=True):
    """Artifacts, a checkpoint written by the test's own FlatBuffers writer (no optimizer state),
    and data; returns (weight, bias, scale, x, t)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    b = rng.standard_normal(2).astype(np.float32)
    scale = np.array([1.5], np.float32)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = rng.standard_normal((4, 2)).astype(np.float32)
    write_artifacts(str(tmp_path), frozen)
    write_checkpoint(str(tmp_path / "checkpoint"), {WEIGHT: w, BIAS: b}, {SCALE: scale} if frozen else {}, step=0, initial_lr=0.0,
                     momentums={}, ints={}, floats={}, strings={})
    np.savez(str(tmp_path / "data.npz"), x=x, t=t)
    return w, b, scale, x, t


def reference(w, b, scale, x, t, steps, lr=0.001):
    """Losses and parameters of ``steps`` AdamW (mode 1, wd 0.01) steps in float64."""
    w, b, s, x, t = (a.astype(np.float64) for a in (w, b, scale, x, t))
    mw, vw, mb, vb = np.zeros_like(w), np.zeros_like(w), np.zeros_like(b), np.zeros_like(b)
    losses = []
    for k in range(1, steps + 1):
        d = (x @ w + b) * s - t
        losses.append(float((d * d).sum()))
        dz = 2 * d * s
        w, mw, vw = adamw_hf(w, x.T @ dz, mw, vw, lr, k)
        b, mb, vb = adamw_hf(b, dz.sum(axis=0), mb, vb, lr, k)
    return losses, w, b


def open_module(tmp_path, checkpoint="checkpoint"):
    state = CheckpointState.load_checkpoint(str(tmp_path / checkpoint))
    module = Module(str(tmp_path / "training_model.onnx"), state, str(tmp_path / "eval_model.onnx"))
    return state, module, Optimizer(str(tmp_path / "optimizer_model.onnx"), module)


def train(module, optimizer, x, t, steps):
    losses = []
    for _ in range(steps):
        losses.append(float(module(x, t)))
        optimizer.step()
        module.lazy_reset_grad()
    return losses


SCRIPT = r'''
import json, sys
import numpy as np
import onnxruntime
import onnxruntime.training.api as orttraining

folder = sys.argv[1]
state = orttraining.CheckpointState.load_checkpoint(f"{folder}/checkpoint")
model = orttraining.Module(f"{folder}/training_model.onnx", state, f"{folder}/eval_model.onnx")
optimizer = orttraining.Optimizer(f"{folder}/optimizer_model.onnx", model)
data = np.load(f"{folder}/data.npz")
x, t = data["x"], data["t"]
model.train()
losses = []
for _ in range(10):
    loss = model(x, t)
    optimizer.step()
    model.lazy_reset_grad()
    losses.append(float(loss))
model.eval()
eval_loss, output = model(x, t)
scheduler = orttraining.LinearLRScheduler(optimizer, 12, 20, 0.01)
lrs = [optimizer.get_learning_rate()]
model.train()
for _ in range(3):
    model(x, t)
    optimizer.step()
    model.lazy_reset_grad()
    scheduler.step()
    lrs.append(optimizer.get_learning_rate())
state.properties["epoch"] = 3
orttraining.CheckpointState.save_checkpoint(state, f"{folder}/trained", include_optimizer_state=True)
params = model.get_contiguous_parameters().numpy()
model.export_model_for_inferencing(f"{folder}/inference.onnx", ["output"])
session = onnxruntime.InferenceSession(f"{folder}/inference.onnx", providers=["CPUExecutionProvider"])
y = session.run(None, {"input": x})[0]
reloaded = orttraining.CheckpointState.load_checkpoint(f"{folder}/trained")
json.dump({"losses": losses, "eval_loss": float(eval_loss), "output": output.tolist(), "lrs": lrs,
           "params": params.tolist(), "inference": y.tolist(),
           "inference_inputs": [i.name for i in session.get_inputs()],
           "reloaded": {n: p.data.tolist() for n, p in reloaded.parameters},
           "epoch": reloaded.properties["epoch"], "input_names": model.input_names(),
           "output_names": model.output_names()}, open(f"{folder}/result.json", "w"))
'''


def run_script(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    run = run_alias(tmp_path / "script.py", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads((tmp_path / "result.json").read_text())


def test_onnxruntime_script_runs_under_the_alias(tmp_path):
    w, b, scale, x, t = make_run(tmp_path)
    out = run_script(tmp_path)
    losses, w10, b10 = reference(w, b, scale, x, t, 10)
    np.testing.assert_allclose(out["losses"], losses, rtol=1e-5)
    assert out["losses"][-1] < out["losses"][0]
    # Eval on the trained parameters: the loss and y.
    y10 = (x.astype(np.float64) @ w10 + b10) * 1.5
    np.testing.assert_allclose(out["output"], y10, rtol=1e-4, atol=1e-6)
    assert out["eval_loss"] == pytest.approx(float(((y10 - t) ** 2).sum()), rel=1e-4)
    # LinearLRScheduler(opt, warmup 12, total 20, 0.01) from step 10: 10/12, then 11/12, 12/12 -> 1, 7/8.
    np.testing.assert_allclose(out["lrs"], np.float32(0.01) * np.array([10 / 12, 11 / 12, 1.0, 7 / 8], np.float32),
                               rtol=1e-6)
    # The buffer follows the training model's input order (weight, bias, scale), not the names' sort.
    p = out["reloaded"]
    np.testing.assert_array_equal(out["params"], np.concatenate([np.ravel(p[WEIGHT]), p[BIAS], p[SCALE]]))
    assert p[SCALE] == [1.5]
    assert out["epoch"] == 3
    # The exported model: parameters as initializers, "input" its only input, y its output.
    assert out["inference_inputs"] == ["input"]
    y = (x.astype(np.float64) @ np.array(p[WEIGHT]) + np.array(p[BIAS])) * 1.5
    np.testing.assert_allclose(out["inference"], y, rtol=1e-5, atol=1e-6)
    assert out["input_names"] == ["input", "labels"] and out["output_names"] == ["loss"]


def test_gradients_accumulate_until_lazy_reset(tmp_path):
    """onnxruntime's ModuleTrainStep: the k-th step without a reset leaves k times the gradient."""
    w, b, scale, x, t = make_run(tmp_path)
    state, module, _ = open_module(tmp_path)
    d = (x.astype(np.float64) @ w + b) * 1.5 - t
    gw = x.T.astype(np.float64) @ (3 * d)
    module(x, t)
    np.testing.assert_allclose(state.parameters[WEIGHT].grad, gw, rtol=1e-5)
    module(x, t)
    np.testing.assert_allclose(state.parameters[WEIGHT].grad, 2 * gw, rtol=1e-5)
    module.lazy_reset_grad()
    module(x, t)
    np.testing.assert_allclose(state.parameters[WEIGHT].grad, gw, rtol=1e-5)
    assert state.parameters[SCALE].grad is None  # frozen: no buffer
    assert module.get_parameters_size() == 8 and module.get_parameters_size(False) == 9
    module.eval()
    assert module.input_names() == ["input", "labels"] and module.output_names() == ["loss", "output"]
    # OrtValue inputs give OrtValues.
    loss, _ = module(onnxtrain.OrtValue.ortvalue_from_numpy(x), onnxtrain.OrtValue.ortvalue_from_numpy(t))
    assert isinstance(loss, onnxtrain.OrtValue)
    assert float(loss.numpy()) == pytest.approx(float((d * d).sum()), rel=1e-5)


def test_resume_from_a_saved_state_is_exact(tmp_path):
    w, b, scale, x, t = make_run(tmp_path)
    state, module, optimizer = open_module(tmp_path)
    straight = train(module, optimizer, x, t, 10)
    final = module.get_contiguous_parameters().numpy()
    s2, m2, o2 = open_module(tmp_path)
    first = train(m2, o2, x, t, 5)
    CheckpointState.save_checkpoint(s2, str(tmp_path / "half"), include_optimizer_state=True)
    s3, m3, o3 = open_module(tmp_path, "half")
    assert s3._state.optimizer_group("group0")["step"] == 5
    assert o3.get_learning_rate() == pytest.approx(0.001)  # not stored: onnxruntime's default
    second = train(m3, o3, x, t, 5)
    assert first + second == straight
    np.testing.assert_array_equal(m3.get_contiguous_parameters().numpy(), final)


def test_nominal_state_is_completed_by_a_buffer(tmp_path):
    w, b, scale, x, t = make_run(tmp_path)
    s = _C.CheckpointState()
    s.add_parameter(WEIGHT, np.zeros((3, 2), np.float32))
    s.add_parameter(BIAS, np.zeros(2, np.float32))
    s.add_parameter(SCALE, np.zeros(1, np.float32), False)
    s.nominal = True
    s.save(str(tmp_path / "nominal"))
    state = CheckpointState.load_checkpoint(str(tmp_path / "nominal"))
    module = Module(str(tmp_path / "training_model.onnx"), state, str(tmp_path / "eval_model.onnx"))
    assert module.get_parameters_size(False) == 9
    with pytest.raises(Exception, match="Please load the model parameters first"):
        module(x, t)
    with pytest.raises(Exception, match="Please load the model parameters first"):
        Optimizer(str(tmp_path / "optimizer_model.onnx"), module)
    buffer = np.concatenate([w.ravel(), b, scale])
    module.copy_buffer_to_parameters(buffer, trainable_only=False)
    np.testing.assert_array_equal(state.parameters[BIAS].data, b)
    optimizer = Optimizer(str(tmp_path / "optimizer_model.onnx"), module)
    losses, _, _ = reference(w, b, scale, x, t, 3)
    np.testing.assert_allclose(train(module, optimizer, x, t, 3), losses, rtol=1e-5)


def test_bad_use_is_refused_by_name(tmp_path):
    w, b, scale, x, t = make_run(tmp_path)
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    with pytest.raises(ValueError, match="device 'cuda'"):
        Module(str(tmp_path / "training_model.onnx"), state, device="cuda")
    module = Module(str(tmp_path / "training_model.onnx"), state)
    with pytest.raises(Exception, match="no eval model"):
        module.eval()(x, t)
    module.train()
    with pytest.raises(Exception, match=r"expects 2 user inputs \(input, labels\), got 1"):
        module(x)
    with pytest.raises(Exception, match="optimizer model's inputs"):
        Optimizer(str(tmp_path / "eval_model.onnx"), module)
    with pytest.raises(Exception, match="expected 8 float32 elements"):
        module.copy_buffer_to_parameters(np.zeros(3, np.float32))
    with pytest.raises(Exception, match="not a value of the eval model"):
        Module(str(tmp_path / "training_model.onnx"), state,
               str(tmp_path / "eval_model.onnx")).export_model_for_inferencing(str(tmp_path / "m.onnx"), ["nope"])
    with pytest.raises(Exception, match="must not be negative"):
        LinearLRScheduler(Optimizer(str(tmp_path / "optimizer_model.onnx"), module), -1, 5, 0.1)


# ---------------------------------------------------------------- onnxruntime-web as the reference
def run_ort_web(folder, tmp_path, checkpoint, x, t, steps, parameters_buffer=None):
    feeds = {"input": {"dims": list(x.shape), "data": x.ravel().tolist()},
             "labels": {"dims": list(t.shape), "data": t.ravel().tolist()}}
    job = {"checkpoint": str(checkpoint), "train_model": str(tmp_path / "training_model.onnx"),
           "optimizer_model": str(tmp_path / "optimizer_model.onnx"),
           "steps": [{"feeds": feeds, "optimizer": True} for _ in range(steps)]}
    if parameters_buffer is not None:
        job["parameters_buffer"] = [float(v) for v in parameters_buffer]
    (tmp_path / "job.json").write_text(json.dumps(job))
    run = subprocess.run(["node", os.path.join(ROOT, "tests", "python", "ort_web_runner.js"), str(tmp_path / "job.json")],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "ONNXTRAIN_ORT_WEB": folder})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_script_losses_equal_onnxruntime_web(tmp_path):
    """The alias script's 10 AdamW steps and onnxruntime-web's on the same artifacts and checkpoint.
    (Without a frozen parameter: onnxruntime-web 1.19.2 fails a training step, "table index is out
    of bounds", when the training model takes a frozen parameter as an input.)"""
    folder, reason = ort_web()
    if folder is None:
        pytest.skip(reason)
    w, b, scale, x, t = make_run(tmp_path, frozen=False)
    out = run_script(tmp_path)
    ref = run_ort_web(folder, tmp_path, tmp_path / "checkpoint", x, t, 10)
    np.testing.assert_allclose(out["losses"], ref["losses"], rtol=1e-5)
    assert ref["training_inputs"] == ["input", "labels"] and ref["training_outputs"] == ["loss"]


def test_onnxtrain_checkpoints_train_alike_in_onnxruntime_web(tmp_path):
    """Checkpoints onnxtrain writes — after training, with and without optimizer state, and nominal
    — load in onnxruntime-web with the same parameter values and train there to the same losses."""
    folder, reason = ort_web()
    if folder is None:
        pytest.skip(reason)
    w, b, scale, x, t = make_run(tmp_path, frozen=False)
    state, module, optimizer = open_module(tmp_path)
    train(module, optimizer, x, t, 4)
    for include in (True, False):
        path = tmp_path / f"trained_{include}"
        CheckpointState.save_checkpoint(state, str(path), include_optimizer_state=include)
        s2, m2, o2 = open_module(tmp_path, path.name)
        ours = train(m2, o2, x, t, 3)
        ref = run_ort_web(folder, tmp_path, path, x, t, 3)
        np.testing.assert_array_equal(ref["parameters_before"], module.get_contiguous_parameters().numpy())
        np.testing.assert_allclose(ours, ref["losses"], rtol=1e-5)
        np.testing.assert_allclose(m2.get_contiguous_parameters().numpy(), ref["parameters_after"], rtol=1e-5, atol=1e-7)
    # Nominal: names and types only; both complete it from the same buffer.
    nominal = tmp_path / "nominal"
    state._state.nominal = True
    state._state.save(str(nominal))
    state._state.nominal = False
    buffer = module.get_contiguous_parameters().numpy()
    s3 = CheckpointState.load_checkpoint(str(nominal))
    m3 = Module(str(tmp_path / "training_model.onnx"), s3)
    m3.copy_buffer_to_parameters(buffer, trainable_only=False)
    ours = train(m3, Optimizer(str(tmp_path / "optimizer_model.onnx"), m3), x, t, 3)
    ref = run_ort_web(folder, tmp_path, nominal, x, t, 3, parameters_buffer=buffer)
    np.testing.assert_array_equal(ref["parameters_before"], buffer)
    np.testing.assert_allclose(ours, ref["losses"], rtol=1e-5)


def test_microsoft_loss_and_relu_gradient_operators_match_torch():
    """The com.microsoft operators onnxruntime's gradient builders put into training models:
    SoftmaxCrossEntropyLossInternal (ignore_index as an input) and its Grad,
    SoftmaxCrossEntropyLossGrad, ReluGrad — against PyTorch's cross_entropy and autograd."""
    import torch
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((6, 5)).astype(np.float32)
    labels = np.array([0, 2, 4, 2, 1, 3], np.int64)
    weights = rng.random(5).astype(np.float32) + 0.5
    x = rng.standard_normal((3, 4)).astype(np.float32)
    dy = rng.standard_normal((3, 4)).astype(np.float32)
    I64 = TensorProto.INT64
    nodes = [
        helper.make_node("SoftmaxCrossEntropyLossInternal", ["scores", "labels", "weights", "ignore"], ["loss", "log_prob"],
                         domain=MS, reduction="mean"),
        helper.make_node("SoftmaxCrossEntropyLossInternalGrad", ["dloss", "log_prob", "labels", "weights", "ignore"],
                         ["dscores"], domain=MS, reduction="mean"),
        helper.make_node("SoftmaxCrossEntropyLossGrad", ["dloss", "log_prob", "labels"], ["dscores_sum"], domain=MS,
                         reduction="sum", ignore_index=4),
        helper.make_node("ReluGrad", ["dy", "x"], ["dx"], domain=MS),
    ]
    graph = helper.make_graph(nodes, "ops", [
        helper.make_tensor_value_info("scores", F32, [6, 5]), helper.make_tensor_value_info("labels", I64, [6]),
        helper.make_tensor_value_info("weights", F32, [5]), helper.make_tensor_value_info("ignore", I64, []),
        helper.make_tensor_value_info("dloss", F32, []), helper.make_tensor_value_info("dy", F32, [3, 4]),
        helper.make_tensor_value_info("x", F32, [3, 4])],
        [helper.make_tensor_value_info(n, F32, None) for n in ("loss", "log_prob", "dscores", "dscores_sum", "dx")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(MS, 1)])
    model.ir_version = 7
    sess = onnxtrain.InferenceSession(model.SerializeToString())
    loss, log_prob, dscores, dscores_sum, dx = sess.run(None, {
        "scores": scores, "labels": labels, "weights": weights, "ignore": np.array(2, np.int64),
        "dloss": np.array(1.5, np.float32), "dy": dy, "x": x})
    s = torch.tensor(scores.astype(np.float64), requires_grad=True)
    ref = torch.nn.functional.cross_entropy(s, torch.tensor(labels), weight=torch.tensor(weights.astype(np.float64)),
                                            ignore_index=2, reduction="mean")
    (ref * 1.5).backward()
    assert float(loss) == pytest.approx(ref.item(), rel=1e-5)
    np.testing.assert_allclose(log_prob, torch.log_softmax(s, 1).detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dscores, s.grad.numpy(), rtol=1e-5, atol=1e-6)
    s2 = torch.tensor(scores.astype(np.float64), requires_grad=True)
    (torch.nn.functional.cross_entropy(s2, torch.tensor(labels), ignore_index=4, reduction="sum") * 1.5).backward()
    np.testing.assert_allclose(dscores_sum, s2.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(dx, np.where(x > 0, dy, 0))


def run_microsoft_node(op, inputs, outputs, **attrs):
    """Runs one com.microsoft node on numpy inputs (a name -> array dict) in onnxtrain."""
    dtypes = {np.dtype(np.float32): F32, np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}
    graph = helper.make_graph([helper.make_node(op, list(inputs), outputs, domain=MS, **attrs)], op,
                              [helper.make_tensor_value_info(n, dtypes[a.dtype], a.shape) for n, a in inputs.items()],
                              [helper.make_tensor_value_info(n, F32, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return onnxtrain.InferenceSession(model.SerializeToString()).run(None, inputs)


def test_gradient_builder_operators_of_onnxruntime_match_torch():
    """The *Grad operators onnxruntime's gradient builders emit (com.microsoft), against PyTorch's
    autograd on the forward operator (or numpy for scatter-adds and masks)."""
    import torch
    rng = np.random.default_rng(8)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731

    def grad_of(fn, x, dy):
        t = torch.tensor(x.astype(np.float64), requires_grad=True)
        fn(t).backward(torch.tensor(dy.astype(np.float64)))
        return t.grad.numpy()

    # SoftmaxGrad_13 / LogSoftmaxGrad_13: one axis (default -1); SoftmaxGrad / LogSoftmaxGrad: from axis on (default 1).
    x, dy = f(2, 3, 4), f(2, 3, 4)
    for op, fn in (("SoftmaxGrad_13", torch.softmax), ("LogSoftmaxGrad_13", torch.log_softmax)):
        y = fn(torch.tensor(x.astype(np.float64)), -1).numpy().astype(np.float32)
        (dx,) = run_microsoft_node(op, {"dY": dy, "Y": y}, ["dX"])
        np.testing.assert_allclose(dx, grad_of(lambda t: fn(t, -1), x, dy), rtol=1e-4, atol=1e-5)
    flat = lambda t: torch.log_softmax(t.reshape(2, 12), 1).reshape(2, 3, 4)  # noqa: E731
    y = flat(torch.tensor(x.astype(np.float64))).numpy().astype(np.float32)
    (dx,) = run_microsoft_node("LogSoftmaxGrad", {"dY": dy, "Y": y}, ["dX"])
    np.testing.assert_allclose(dx, grad_of(flat, x, dy), rtol=1e-4, atol=1e-5)
    # GeluGrad(dY, X).
    (dx,) = run_microsoft_node("GeluGrad", {"dY": dy, "X": x}, ["dX"])
    np.testing.assert_allclose(dx, grad_of(torch.nn.functional.gelu, x, dy), rtol=1e-4, atol=1e-5)
    # LayerNormalizationGrad(dY, X, scale, mean, inv_std_dev) -> dX, dscale, dbias (axis -1).
    x, dy, scale = f(4, 6), f(4, 6), f(6)
    mean = x.mean(axis=-1, keepdims=True)
    inv_std = (1 / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)).astype(np.float32)
    dx, dscale, dbias = run_microsoft_node("LayerNormalizationGrad",
                                           {"dY": dy, "X": x, "scale": scale, "mean": mean, "inv_std_dev": inv_std},
                                           ["dX", "dscale", "dbias"], axis=-1, epsilon=1e-5)
    t, s = torch.tensor(x.astype(np.float64), requires_grad=True), torch.tensor(scale.astype(np.float64), requires_grad=True)
    torch.nn.functional.layer_norm(t, (6,), s, None, 1e-5).backward(torch.tensor(dy.astype(np.float64)))
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dscale, s.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dbias, dy.sum(axis=0), rtol=1e-5, atol=1e-6)
    # ConvGrad(dY, X, W) -> dX, dW, dB with the Conv's attributes.
    x, w, dy = f(1, 2, 5, 5), f(3, 2, 3, 3), f(1, 3, 3, 3)
    dx, dw, db = run_microsoft_node("ConvGrad", {"dY": dy, "X": x, "W": w}, ["dX", "dW", "dB"],
                                    kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    tx, tw = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (x, w))
    torch.nn.functional.conv2d(tx, tw, stride=2, padding=1).backward(torch.tensor(dy.astype(np.float64)))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    # GatherGrad(shape, indices, dY): rows added where gathered, repeats accumulate.
    dy, idx = f(3, 4), np.array([2, 0, 2], np.int64)
    (dx,) = run_microsoft_node("GatherGrad", {"shape": np.array([5, 4], np.int64), "indices": idx, "dY": dy}, ["dX"],
                               axis=0)
    ref = np.zeros((5, 4), np.float64)
    np.add.at(ref, idx, dy)
    np.testing.assert_allclose(dx, ref, rtol=1e-6, atol=1e-6)
    # DropoutGrad(dY, mask, ratio) = dY mask / (1 - ratio); FusedMatMul(A, B, transA, alpha) = alpha A^T B; ReluGrad.
    mask = rng.random((3, 4)) > 0.3
    (dx,) = run_microsoft_node("DropoutGrad", {"dY": dy, "mask": mask, "ratio": np.array(0.25, np.float32)}, ["dX"])
    np.testing.assert_allclose(dx, dy * mask / 0.75, rtol=1e-6)
    a, b = f(3, 2), f(3, 5)
    (y,) = run_microsoft_node("FusedMatMul", {"A": a, "B": b}, ["Y"], transA=1)
    np.testing.assert_allclose(y, a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)
    (y,) = run_microsoft_node("FusedMatMul", {"A": a, "B": b}, ["Y"], transA=1, alpha=-0.3)  # onnxruntime's alpha
    np.testing.assert_allclose(y, -0.3 * (a.T.astype(np.float64) @ b), rtol=1e-5, atol=1e-6)


def write_mlp_artifacts(folder):
    """A 4-5-3 MLP classifier in the layout onnxruntime's generate_artifacts writes for PyTorch's
    MNIST example: Gemm / Relu / SoftmaxCrossEntropyLoss forward, the backward with
    SoftmaxCrossEntropyLossGrad and ReluGrad (com.microsoft) and Gemm / ReduceSum, gradients into
    InPlaceAccumulatorV2 buffers, int32 labels; the eval model; an AdamWOptimizer model importing
    ai.onnx opset 19 at IR 9, as onnxruntime 1.19 writes it."""
    names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    shapes = [[5, 4], [5], [3, 5], [3]]
    fwd = [helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], transB=1),
           helper.make_node("Relu", ["h"], ["r"]),
           helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
           helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss", "log_prob"], reduction="mean")]
    bwd = [helper.make_node("SoftmaxCrossEntropyLossGrad", ["loss_grad", "log_prob", "labels"], ["logits_grad"],
                            domain=MS, reduction="mean"),
           helper.make_node("Gemm", ["logits_grad", "r"], ["fc2.weight_grad"], transA=1),
           helper.make_node("ReduceSum", ["logits_grad", "axes0"], ["fc2.bias_grad"], keepdims=0),
           helper.make_node("Gemm", ["logits_grad", "fc2.weight"], ["r_grad"]),
           helper.make_node("ReluGrad", ["r_grad", "r"], ["h_grad"], domain=MS),
           helper.make_node("Gemm", ["h_grad", "input"], ["fc1.weight_grad"], transA=1),
           helper.make_node("ReduceSum", ["h_grad", "axes0"], ["fc1.bias_grad"], keepdims=0)]
    acc = [helper.make_node("InPlaceAccumulatorV2", [f"{p}_grad.accumulation.buffer", f"{p}_grad", "lazy_reset_grad"],
                            [f"{p}_grad.accumulation.out"], domain=MS) for p in names]
    user = [helper.make_tensor_value_info("input", F32, ["N", 4]), helper.make_tensor_value_info("labels", TensorProto.INT32, ["N"])]
    params = [helper.make_tensor_value_info(n, F32, s) for n, s in zip(names, shapes)]
    consts = [helper.make_tensor("loss_grad", F32, [], [1.0]), helper.make_tensor("axes0", TensorProto.INT64, [1], [0])]
    train = helper.make_graph(
        fwd + bwd + acc, "train",
        user + params + [helper.make_tensor_value_info(f"{n}_grad.accumulation.buffer", F32, s) for n, s in zip(names, shapes)]
        + [helper.make_tensor_value_info("lazy_reset_grad", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info("loss", F32, [])] +
        [helper.make_tensor_value_info(f"{n}_grad.accumulation.out", TensorProto.BOOL, [1]) for n in names], consts)
    evaluation = helper.make_graph(fwd, "eval", user + params, [helper.make_tensor_value_info("loss", F32, [])])
    seq = lambda n: helper.make_tensor_sequence_value_info(n, F32, None)  # noqa: E731
    opt = helper.make_graph(
        [helper.make_node("AdamWOptimizer", ["learning_rate", "step", "params", "gradients", "first_order_moments",
                                             "second_order_moments"], ["updated_flag"], domain=MS, alpha=0.9,
                          beta=0.999, epsilon=1e-6, weight_decay=0.0, correct_bias=1, adam_mode=1)],
        "adamw", [helper.make_tensor_value_info("learning_rate", F32, [1]),
                  helper.make_tensor_value_info("step", TensorProto.INT64, [1]),
                  seq("params"), seq("gradients"), seq("first_order_moments"), seq("second_order_moments")],
        [helper.make_tensor_value_info("updated_flag", TensorProto.BOOL, [1])])
    for name, graph, opset, ir in (("training_model.onnx", train, 14, 7), ("eval_model.onnx", evaluation, 14, 7),
                                   ("optimizer_model.onnx", opt, 19, 9)):
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
        m.ir_version = ir
        with open(os.path.join(folder, name), "wb") as f:
            f.write(m.SerializeToString())
    return names


def train_mlp_artifacts(tmp_path):
    """Writes the MLP artifacts and a checkpoint, trains ten AdamW steps with onnxtrain's Module;
    returns (names, init, x, labels, losses, module)."""
    rng = np.random.default_rng(11)
    names = write_mlp_artifacts(str(tmp_path))
    init = {"fc1.weight": rng.standard_normal((5, 4)) * 0.5, "fc1.bias": rng.standard_normal(5) * 0.1,
            "fc2.weight": rng.standard_normal((3, 5)) * 0.5, "fc2.bias": rng.standard_normal(3) * 0.1}
    init = {k: v.astype(np.float32) for k, v in init.items()}
    write_checkpoint(str(tmp_path / "checkpoint"), init, {}, step=0, initial_lr=0.0, momentums={}, ints={}, floats={},
                     strings={})
    x = rng.standard_normal((8, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 8).astype(np.int32)
    state, module, optimizer = open_module(tmp_path)
    return names, init, x, labels, train(module, optimizer, x, labels, 10), module


def test_mlp_artifacts_train_as_torch(tmp_path):
    """An MLP classifier in onnxruntime's artifact layout: ten AdamW steps of onnxtrain's Module
    against PyTorch's autograd for the gradients and onnxruntime's AdamW (mode 1) in float64."""
    import torch
    names, init, x, labels, losses, module = train_mlp_artifacts(tmp_path)
    w = {k: v.astype(np.float64) for k, v in init.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v2 = {k: np.zeros_like(v) for k, v in w.items()}
    ref = []
    for k in range(1, 11):
        t = {n: torch.tensor(w[n], requires_grad=True) for n in names}
        h = torch.relu(torch.tensor(x.astype(np.float64)) @ t["fc1.weight"].T + t["fc1.bias"])
        loss = torch.nn.functional.cross_entropy(h @ t["fc2.weight"].T + t["fc2.bias"], torch.tensor(labels.astype(np.int64)))
        loss.backward()
        ref.append(loss.item())
        for n in names:
            w[n], m[n], v2[n] = adamw_hf(w[n], t[n].grad.numpy(), m[n], v2[n], 0.001, k, wd=0.0)
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    np.testing.assert_allclose(module.get_contiguous_parameters().numpy(),
                               np.concatenate([w[n].ravel() for n in names]), rtol=1e-4, atol=1e-6)


def test_mlp_artifacts_train_as_onnxruntime_web(tmp_path):
    """The same MLP artifacts and checkpoint in onnxruntime-web: every loss and the final
    parameters within 1e-5."""
    folder, reason = ort_web()
    if folder is None:
        pytest.skip(reason)
    names, init, x, labels, losses, module = train_mlp_artifacts(tmp_path)
    feeds = {"input": {"dims": [8, 4], "data": x.ravel().tolist()},
             "labels": {"dims": [8], "data": labels.tolist(), "type": "int32"}}
    job = {"checkpoint": str(tmp_path / "checkpoint"), "train_model": str(tmp_path / "training_model.onnx"),
           "optimizer_model": str(tmp_path / "optimizer_model.onnx"),
           "steps": [{"feeds": feeds, "optimizer": True} for _ in range(10)]}
    (tmp_path / "job.json").write_text(json.dumps(job))
    run = subprocess.run(["node", os.path.join(ROOT, "tests", "python", "ort_web_runner.js"), str(tmp_path / "job.json")],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "ONNXTRAIN_ORT_WEB": folder})
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    np.testing.assert_allclose(losses, out["losses"], rtol=1e-5)
    np.testing.assert_allclose(module.get_contiguous_parameters().numpy(), out["parameters_after"], rtol=1e-5, atol=1e-7)
