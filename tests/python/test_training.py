"""TrainingSession: steps, accumulation, frozen weights, eval, export, state, checkpoints."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot

HERE = os.path.dirname(__file__)


def mlp(seed=0, n_in=6, hidden=16, n_out=3):
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((n_in, hidden)) * 0.4).astype(np.float32), "W1"),
             numpy_helper.from_array(np.zeros(hidden, np.float32), "B1"),
             numpy_helper.from_array((rng.standard_normal((hidden, n_out)) * 0.4).astype(np.float32), "W2"),
             numpy_helper.from_array(np.zeros(n_out, np.float32), "B2")]
    nodes = [helper.make_node("MatMul", ["X", "W1"], ["h"]), helper.make_node("Add", ["h", "B1"], ["h1"]),
             helper.make_node("Tanh", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
             helper.make_node("Add", ["h3", "B2"], ["Y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", n_out])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def data(n=32, seed=1, n_in=6, n_out=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, n_in)).astype(np.float32)
    Y = np.tanh(X @ rng.standard_normal((n_in, n_out))).astype(np.float32)
    return X, Y


def session(model, optimizer="SGDOptimizer", **fields):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = optimizer
    for k, v in fields.items():
        setattr(p, k, v)
    return ot.TrainingSession(model.SerializeToString(), p)


def feed(X, Y, lr=0.01):
    return {"X": X, "label": Y, "Learning_Rate": np.array([lr], np.float32)}


def test_loss_decreases_and_export_predicts():
    m = ot.add_loss_output(mlp())
    s = session(m, "AdamOptimizer")
    X, Y = data()
    first = s.run(["loss"], feed(X, Y))[0]
    for _ in range(200):
        last = s.run(["loss"], feed(X, Y))[0]
    assert last < first * 0.2
    exported = s.export_model()
    onnx.checker.check_model(onnx.load_from_string(exported))
    inf = ot.InferenceSession(exported)
    assert [i.name for i in inf.get_inputs()] == ["X"]
    assert [o.name for o in inf.get_outputs()] == ["Y"]
    pred = inf.run(None, {"X": X})[0]
    # The exported model reproduces the session's own forward pass.
    (y_eval,) = s.eval(["Y"], {"X": X})
    np.testing.assert_allclose(pred, y_eval, rtol=1e-6, atol=1e-6)
    assert float(np.sum((pred - Y) ** 2)) == pytest.approx(float(s.eval(["loss"], feed(X, Y))[0]), rel=1e-4)


def test_eval_touches_nothing():
    m = ot.add_loss_output(mlp())
    s = session(m, "AdamOptimizer")
    X, Y = data()
    s.run(["loss"], feed(X, Y))
    before, opt_before = s.get_state(), s.get_optimizer_state()
    for _ in range(3):
        s.eval(["loss", "Y"], {"X": X, "label": Y})
    after, opt_after = s.get_state(), s.get_optimizer_state()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    np.testing.assert_array_equal(opt_before["W1"]["Moment_1"], opt_after["W1"]["Moment_1"])
    assert s.step == 1


def test_gradient_accumulation_equals_one_big_batch():
    """Sum-reduced loss: k micro-batches accumulated == one step on the k-fold batch."""
    X, Y = data(n=24)
    big = session(ot.add_loss_output(mlp()), "MomentumOptimizer")
    acc = session(ot.add_loss_output(mlp()), "MomentumOptimizer", gradient_accumulation_steps=3)
    for _ in range(4):
        big.run(["loss"], feed(X, Y))
        for k in range(3):
            acc.run(["loss"], feed(X[8 * k:8 * k + 8], Y[8 * k:8 * k + 8]))
    assert big.step == acc.step == 4
    sb, sa = big.get_state(), acc.get_state()
    for k in sb:
        np.testing.assert_allclose(sa[k], sb[k], rtol=2e-5, atol=1e-6, err_msg=k)


def test_frozen_and_immutable_weights_stay_bit_identical():
    m = ot.add_loss_output(mlp())
    w0 = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    s = session(m, "AdamOptimizer", weights_not_to_train={"W1"}, immutable_weights={"B1"})
    assert sorted(s.trained_weights()) == ["B2", "W2"]
    X, Y = data()
    for _ in range(10):
        s.run(["loss"], feed(X, Y))
    st = s._initializers()  # get_state() holds the trained weights only, as onnxruntime's
    assert st["W1"].tobytes() == w0["W1"].tobytes()
    assert st["B1"].tobytes() == w0["B1"].tobytes()
    assert st["W2"].tobytes() != w0["W2"].tobytes()
    with pytest.raises(ValueError, match="immutable"):
        s.load_state({"B1": np.ones(16, np.float32)})


def test_gradients_as_outputs_and_state_round_trip():
    m = ot.add_loss_output(mlp())
    s = session(m, set_gradients_as_graph_outputs=True)
    X, Y = data()
    loss, gw2 = s.run(["loss", "W2_grad"], feed(X, Y, lr=0.0))
    assert gw2.shape == (16, 3) and np.abs(gw2).sum() > 0
    with pytest.raises(ValueError, match="unknown output"):
        session(m).run(["W2_grad"], feed(X, Y))
    state = s.get_state()
    state["W2"] = np.zeros_like(state["W2"])
    s.load_state({"W2": state["W2"]})
    np.testing.assert_array_equal(s.get_state()["W2"], 0)
    with pytest.raises(ValueError, match="W9"):
        s.load_state({"W9": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="missing"):
        s.load_state({"W2": state["W2"]}, strict=True)


def test_learning_rate_feed_is_checked():
    s = session(ot.add_loss_output(mlp()))
    X, Y = data()
    with pytest.raises(ValueError, match="Learning_Rate"):
        s.run(["loss"], {"X": X, "label": Y})
    with pytest.raises(ValueError, match="float32 array of shape"):
        s.run(["loss"], {"X": X, "label": Y, "Learning_Rate": np.array([0.1, 0.2], np.float32)})


def test_lr_schedule_used_without_feed():
    s = session(ot.add_loss_output(mlp()), lr_schedule="invscaling", lr_schedule_params={"eta0": 0.01})
    X, Y = data()
    s.run(["loss"], {"X": X, "label": Y})
    assert s.step == 1
    with pytest.raises(ValueError, match="lr_schedule"):
        session(ot.add_loss_output(mlp()), lr_schedule="bogus")


def trained(steps, ckpt=None, resume=None, optimizer="AdamOptimizer"):
    s = session(ot.add_loss_output(mlp()), optimizer)
    if resume:
        s.load_checkpoint(resume)
    X, Y = data()
    for _ in range(steps):
        s.run(["loss"], feed(X, Y))
    if ckpt:
        s.save_checkpoint(ckpt)
    return s


def test_checkpoint_resume_is_exact(tmp_path):
    ref = trained(10)
    trained(5, ckpt=tmp_path / "c.ckpt")
    resumed = trained(5, resume=tmp_path / "c.ckpt")
    assert resumed.step == ref.step == 10
    a, b = ref.get_state(), resumed.get_state()
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k
    oa, ob = ref.get_optimizer_state(), resumed.get_optimizer_state()
    assert oa["W1"]["Moment_2"].tobytes() == ob["W1"]["Moment_2"].tobytes()


def test_checkpoint_resume_in_a_new_process(tmp_path):
    ref = trained(8)
    trained(4, ckpt=tmp_path / "c.ckpt")
    script = f"""
import sys, numpy as np
sys.path.insert(0, {HERE!r})
import test_training as t
s = t.trained(4, resume={str(tmp_path / 'c.ckpt')!r})
np.savez({str(tmp_path / 'out.npz')!r}, **s.get_state())
"""
    subprocess.run([sys.executable, "-c", script], check=True, env=os.environ.copy())
    out = np.load(tmp_path / "out.npz")
    for k, v in ref.get_state().items():
        assert out[k].tobytes() == v.tobytes(), k


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "header", "version", "wrong_model", "empty", "optimizer"])
def test_damaged_checkpoints_are_refused(tmp_path, damage):
    path = tmp_path / "c.ckpt"
    trained(2, ckpt=path)
    raw = bytearray(path.read_bytes())
    expected = {"truncate": "truncated", "bitflip": "corrupted", "header": "corrupted", "version": "newer",
                "wrong_model": "different model", "empty": "truncated", "optimizer": "optimizer"}[damage]
    if damage == "truncate":
        raw = raw[:len(raw) // 2]
    elif damage == "bitflip":
        raw[len(raw) - 100] ^= 0x10  # inside the last tensor's data
    elif damage == "header":
        raw[40] ^= 0x01
    elif damage == "version":
        raw[16] = 99
    elif damage == "empty":
        raw = bytearray()
    if damage not in ("wrong_model", "optimizer"):
        path.write_bytes(bytes(raw))
    if damage == "wrong_model":
        s = session(ot.add_loss_output(mlp(hidden=8)))
    elif damage == "optimizer":
        s = session(ot.add_loss_output(mlp()), "SGDOptimizer")
    else:
        s = session(ot.add_loss_output(mlp()), "AdamOptimizer")
    before = s.get_state()
    with pytest.raises(ValueError, match=expected):
        s.load_checkpoint(path)
    for k, v in s.get_state().items():  # nothing was half-loaded
        assert v.tobytes() == before[k].tobytes()


def test_kill_during_checkpoint_writes_never_loses_the_previous(tmp_path):
    """A writer saving checkpoints of a 40 MB model in a loop is killed with SIGKILL at random
    moments; the checkpoint on disk always loads and holds one of the saved versions."""
    path = tmp_path / "c.ckpt"
    writer = f"""
import sys, numpy as np
sys.path.insert(0, {HERE!r})
import test_training as t
s = t.session(t.ot.add_loss_output(t.mlp(n_in=2500, hidden=4000)), "SGDOptimizer")
s.save_checkpoint({str(path)!r})
print("ready", flush=True)
i = 0
while True:
    i += 1
    s.load_state({{"B2": np.full(3, i, np.float32)}})
    s.save_checkpoint({str(path)!r})
"""
    rng = np.random.default_rng(0)
    reader = session(ot.add_loss_output(mlp(n_in=2500, hidden=4000)), "SGDOptimizer")
    last = -1.0
    for trial in range(12):
        p = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, env=os.environ.copy())
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(float(rng.uniform(0.05, 0.8)))
        p.send_signal(signal.SIGKILL)
        p.wait()
        reader.load_checkpoint(path)  # must not raise
        b2 = reader.get_state()["B2"]
        assert np.all(b2 == b2[0])
        last = float(b2[0])
    leftovers = [f for f in os.listdir(tmp_path) if f != "c.ckpt"]
    # Killed writers may leave their own temporary files; never a damaged c.ckpt.
    assert all(".tmp." in f for f in leftovers)
    assert last >= 0
