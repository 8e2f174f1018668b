"""The training step as one graph: the saved training model runs by itself, the portable training
graph (standard ONNX + preview-training ops) trains like the fused one, and checkpoints of format
version 1 (written before the optimizer moved into the graph) still load, checked against
torch.optim."""
import struct
import zlib

import numpy as np
import onnx
import pytest
import torch

import onnxtrain as ot
from test_training import data, mlp

OPTIMIZERS = ["SGDOptimizer", "MomentumOptimizer", "AdamOptimizer", "AdamWOptimizer", "LambOptimizer",
              "AdagradOptimizer"]


def model_with_loss():
    return ot.add_loss_output(mlp(), "squared_error", output_index="Y")


def params(optimizer, **fields):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = optimizer
    for k, v in fields.items():
        setattr(p, k, v)
    return p


def feed(X, Y, lr=0.01):
    return {"X": X, "label": Y, "Learning_Rate": np.array([lr], np.float32)}


@pytest.mark.parametrize("portable", [False, True])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_saved_training_model_runs_by_itself(tmp_path, optimizer, portable):
    path = str(tmp_path / "training.onnx")
    sess = ot.TrainingSession(model_with_loss().SerializeToString(),
                              params(optimizer, model_with_training_graph_path=path, portable_training_graph=portable))
    X, Y = data()
    loss, = sess.run(["loss"], feed(X, Y))
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    # every input and output of every node is named (graph-drawing tools break on empty names)
    assert not [(n.op_type, list(n.input)) for n in m.graph.node if "" in n.input or "" in n.output]
    domains = {n.domain for n in m.graph.node}
    if portable:
        assert domains <= {"", "ai.onnx.preview.training"}, domains
    # One step of the saved model in an InferenceSession: the same loss, and the updated weights and
    # optimizer state come out as outputs.
    inf = ot.InferenceSession(path)
    names = [o.name for o in inf.get_outputs()]
    out = dict(zip(names, inf.run(None, {**feed(X, Y), "Step": np.array([1], np.int64)})))
    np.testing.assert_allclose(out["loss"], loss, rtol=1e-6)
    weights = sess.get_model_state()["full_precision"]
    for w, value in weights.items():
        np.testing.assert_allclose(out[w + "_updated"], value, rtol=1e-6, atol=1e-7)
    for w, states in sess.get_optimizer_state().items():
        if w == "shared_optimizer_state":
            continue
        for s, value in states.items():
            np.testing.assert_allclose(out[f"{s}_{w}_updated"], value, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("accumulate,clip", [(1, False), (2, True)])
def test_portable_graph_trains_like_the_fused_one(optimizer, accumulate, clip):
    fields = dict(gradient_accumulation_steps=accumulate, enable_grad_norm_clip=clip, max_grad_norm=0.5,
                  optimizer_attributes={"lambda": 0.01} if optimizer != "SGDOptimizer" else {})
    fused = ot.TrainingSession(model_with_loss().SerializeToString(), params(optimizer, **fields))
    portable = ot.TrainingSession(model_with_loss().SerializeToString(),
                                  params(optimizer, portable_training_graph=True, **fields))
    X, Y = data(n=64)
    for step in range(12):
        sl = slice((step % 4) * 16, (step % 4 + 1) * 16)
        a, = fused.run(["loss"], feed(X[sl], Y[sl]))
        b, = portable.run(["loss"], feed(X[sl], Y[sl]))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=f"step {step}")
    assert fused.step == portable.step == 12 // accumulate
    wa, wb = fused.get_model_state()["full_precision"], portable.get_model_state()["full_precision"]
    for w in wa:
        np.testing.assert_allclose(wa[w], wb[w], rtol=1e-5, atol=1e-6, err_msg=w)


# ---------------------------------------------------------------- checkpoint format 1
def _fingerprint(model, trained):
    """model_fingerprint of src/train/checkpoint.cpp: FNV-1a over the float initializers' names,
    types and shapes, then the trained weights."""
    h = 1469598103934665603

    def mix(s):
        nonlocal h
        for ch in s.encode():
            h = ((h ^ ch) * 1099511628211) & (2 ** 64 - 1)
        h = ((h ^ 0xFF) * 1099511628211) & (2 ** 64 - 1)
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            mix(f"{init.name}:float[{', '.join(str(d) for d in init.dims)}]")
    for n in trained:
        mix("trained:" + n)
    return f"{h:016x}"


def _write_v1(path, fingerprint, counters, text, tensors):
    """The checkpoint file format of version 1 (src/train/checkpoint.h), float32 tensors."""
    def s(x):
        return struct.pack("<I", len(x.encode())) + x.encode()
    h = s(fingerprint)
    h += struct.pack("<I", len(counters)) + b"".join(s(k) + struct.pack("<q", v) for k, v in sorted(counters.items()))
    h += struct.pack("<I", len(text)) + b"".join(s(k) + s(v) for k, v in sorted(text.items()))
    h += struct.pack("<I", len(tensors))
    data, off = b"", 0
    for name, a in tensors:
        b = np.ascontiguousarray(a, np.float32).tobytes()
        h += s(name) + struct.pack("<iI", 1, a.ndim) + b"".join(struct.pack("<q", d) for d in a.shape)
        h += struct.pack("<QQI", off, len(b), zlib.crc32(b))
        data += b
        off += len(b)
    pre = b"ONNXTRAIN-CKPT\0\0" + struct.pack("<IIQ", 1, zlib.crc32(h), len(h))
    total = len(pre) + len(h) + len(data) + 24
    with open(path, "wb") as f:
        f.write(pre + h + data + b"ONNXTRAIN-END\0\0\0" + struct.pack("<Q", total))


def _torch_mlp(model):
    w = {i.name: torch.tensor(onnx.numpy_helper.to_array(i)) for i in model.graph.initializer if i.name[0] in "WB"}
    return {k: torch.nn.Parameter(v.clone()) for k, v in w.items()}


def _torch_loss(p, X, Y):
    h = torch.tanh(torch.from_numpy(X) @ p["W1"] + p["B1"])
    return ((h @ p["W2"] + p["B2"] - torch.from_numpy(Y)) ** 2).sum()  # add_loss_output: sum


@pytest.mark.parametrize("optimizer", ["AdamOptimizer", "AdagradOptimizer"])
def test_checkpoint_of_format_1_still_loads(tmp_path, optimizer):
    model = model_with_loss()
    sess = ot.TrainingSession(model.SerializeToString(),
                              params(optimizer, optimizer_attributes={"initial_accumulator_value": 0.1}
                                     if optimizer == "AdagradOptimizer" else {}))
    trained = sess.trained_weights()
    X, Y = data(n=64)
    batches = [(X[i * 16:(i + 1) * 16], Y[i * 16:(i + 1) * 16]) for i in range(4)]
    p = _torch_mlp(mlp())
    opt = (torch.optim.Adam(p.values(), lr=0.01) if optimizer == "AdamOptimizer"
           else torch.optim.Adagrad(p.values(), lr=0.01, initial_accumulator_value=0.1))
    # Adam: torch trains 2 steps, the state goes into a format-1 file, onnxtrain continues.
    # Adagrad: the file is written before any step (format 1 held its Sum at zero then).
    done = 2 if optimizer == "AdamOptimizer" else 0
    for X_b, Y_b in batches[:done]:
        opt.zero_grad()
        _torch_loss(p, X_b, Y_b).backward()
        opt.step()
    tensors = [("model/" + k, v.detach().numpy()) for k, v in p.items()]
    for k in trained:
        st = opt.state[p[k]]
        if optimizer == "AdamOptimizer":
            tensors += [(f"optimizer/Moment_1_{k}", st["exp_avg"].numpy()),
                        (f"optimizer/Moment_2_{k}", st["exp_avg_sq"].numpy())]
        else:
            tensors.append((f"optimizer/Sum_{k}", np.zeros_like(p[k].detach().numpy())))
    path = str(tmp_path / "v1.ckpt")
    _write_v1(path, _fingerprint(model, trained),
              {"optimizer_step": done, "micro_step": 0, "train_runs": done}, {"optimizer": optimizer}, tensors)
    sess.load_checkpoint(path)
    assert sess.step == done
    for X_b, Y_b in batches[done:]:
        sess.run(["loss"], feed(X_b, Y_b))
        opt.zero_grad()
        _torch_loss(p, X_b, Y_b).backward()
        opt.step()
    ours = sess.get_model_state()["full_precision"]
    for k in trained:
        np.testing.assert_allclose(ours[k], p[k].detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    # What it writes now is format 2.
    sess.save_checkpoint(str(tmp_path / "v2.ckpt"))
    with open(tmp_path / "v2.ckpt", "rb") as f:
        assert struct.unpack("<I", f.read(20)[16:20])[0] == 2
