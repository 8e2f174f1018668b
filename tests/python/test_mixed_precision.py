"""Mixed precision (TrainingParameters.mixed_precision, onnxtrain train --precision): the products in
bfloat16 or float16, the rest and the master weights in float32; the loss tracks the fp32 run.
float16 adds loss scaling: updates with non-finite gradients are skipped, the session's dynamic
scaler follows onnxruntime's DynamicLossScaler rule (checked against the rule written out here),
and the scaled gradients are unscaled exactly."""
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot

CLI = os.environ.get("ONNXTRAIN_CLI", "onnxtrain")


def mlp(n_in=20, hidden=64, n_out=5):
    """MatMul + Add, then Gemm: both product kinds the bf16 mode rewrites; LayerNormalization and
    the loss stay float32."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((n_in, hidden)) * 0.3).astype(np.float32), "W1"),
             numpy_helper.from_array(np.zeros(hidden, np.float32), "B1"),
             numpy_helper.from_array(np.ones(hidden, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(hidden, np.float32), "beta"),
             numpy_helper.from_array((rng.standard_normal((n_out, hidden)) * 0.3).astype(np.float32), "W2"),
             numpy_helper.from_array(np.zeros(n_out, np.float32), "B2")]
    nodes = [helper.make_node("MatMul", ["X", "W1"], ["h"]), helper.make_node("Add", ["h", "B1"], ["h1"]),
             helper.make_node("LayerNormalization", ["h1", "gamma", "beta"], ["h2"], axis=-1),
             helper.make_node("Relu", ["h2"], ["h3"]),
             helper.make_node("Gemm", ["h3", "W2", "B2"], ["Y"], transB=1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", n_out])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def data(n=64, n_in=20, n_out=5):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, n_in)).astype(np.float32)
    return X, np.tanh(X @ rng.standard_normal((n_in, n_out))).astype(np.float32)


def train(precision, steps, tmp_path=None, **fields):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    p.mixed_precision = precision
    for k, v in fields.items():
        setattr(p, k, v)
    if tmp_path is not None:
        p.model_with_training_graph_path = str(tmp_path / f"training_{precision or 'fp32'}.onnx")
    s = ot.TrainingSession(ot.add_loss_output(mlp()), p)
    X, Y = data()
    losses = [float(s.run(["loss"], {"X": X, "label": Y, "Learning_Rate": np.array([3e-3], np.float32)})[0])
              for _ in range(steps)]
    return s, np.array(losses)


def test_bf16_loss_tracks_fp32_within_2_percent(tmp_path):
    _, fp32 = train("", 200)
    s, bf16 = train("bf16", 200, tmp_path)
    assert fp32[-1] < 0.2 * fp32[0]  # it learns
    # Each product rounds its operands to 8 significant bits: the losses differ (the mode is on)...
    assert not np.array_equal(fp32[:5], bf16[:5])
    assert np.max(np.abs(fp32[:5] - bf16[:5]) / fp32[:5]) < 2e-2
    # ... and the run ends where the fp32 run does.
    assert abs(bf16[-1] - fp32[-1]) / fp32[-1] < 0.02, (bf16[-1], fp32[-1])
    # The training graph runs MatMul and Gemm (and their gradients) on bfloat16 casts; the master
    # weights, LayerNormalization and the loss stay float32; the exported model is float32.
    g = onnx.load(str(tmp_path / "training_bf16.onnx")).graph
    casts = {n.output[0]: n for n in g.node if n.op_type == "Cast"}
    for n in g.node:
        if n.op_type in ("MatMul", "Gemm") and not n.name.startswith("grad_"):
            for i in n.input:
                assert i in casts and casts[i].attribute[0].i == TensorProto.BFLOAT16, (n.name, i)
    assert all(t.data_type == TensorProto.FLOAT for t in g.initializer if t.name in ("W1", "W2", "gamma"))
    exported = onnx.load_from_string(s.export_model())
    assert not any(n.op_type == "Cast" for n in exported.graph.node)
    assert [t.data_type for t in exported.graph.initializer if t.name == "W1"] == [TensorProto.FLOAT]


def test_mixed_precision_values():
    p = ot.TrainingParameters()
    for ok in ("", "fp32", "bf16", "fp16"):
        p.mixed_precision = ok
    with pytest.raises(ValueError, match="mixed_precision"):
        p.mixed_precision = "int8"
    with pytest.raises(ValueError, match="loss_scale"):
        p.loss_scale = -1.0
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.loss_scale = 128.0
    with pytest.raises(ValueError, match="loss_scale applies to float16"):
        p.validate()
    p.use_mixed_precision = True  # onnxruntime's switch: fp16
    p.validate()
    p.mixed_precision = "fp32"
    with pytest.raises(ValueError, match="use_mixed_precision is true but mixed_precision is 'fp32'"):
        p.validate()


# ---------------------------------------------------------------------------------------------
# float16 with loss scaling


def test_fp16_loss_tracks_fp32_within_2_percent(tmp_path):
    _, fp32 = train("", 200)
    s, fp16 = train("fp16", 200, tmp_path, loss_scale=64.0)  # a fixed scale: no update skipped
    assert s.skipped_updates == 0 and s.loss_scale == 64.0
    assert not np.array_equal(fp32[:5], fp16[:5])  # the products round to 11 significant bits
    assert np.max(np.abs(fp32[:5] - fp16[:5]) / fp32[:5]) < 1e-2
    assert abs(fp16[-1] - fp32[-1]) / fp32[-1] < 0.02, (fp16[-1], fp32[-1])
    g = onnx.load(str(tmp_path / "training_fp16.onnx")).graph
    casts = {n.output[0]: n for n in g.node if n.op_type == "Cast"}
    for n in g.node:
        if n.op_type in ("MatMul", "Gemm") and not n.name.startswith("grad_"):
            for i in n.input:
                assert i in casts and casts[i].attribute[0].i == TensorProto.FLOAT16, (n.name, i)
    # the loss is multiplied by the loss-scale input before it is differentiated; one node checks
    # and unscales the gradients, and the optimizer takes its all-finite flag
    assert any(n.op_type == "Mul" and "loss" in n.input and "loss_scale" in str(list(n.input)) or
               n.op_type == "Mul" and "loss" in n.input for n in g.node)
    check = [n for n in g.node if n.op_type == "LossScaleCheck"]
    assert len(check) == 1 and check[0].input[0] == s.loss_scale_input_name == "loss_scale"
    assert check[0].output[1] == s.all_finite_output_name
    opt = [n for n in g.node if n.op_type == "AdamOptimizer"]
    assert opt and all(n.input[3] == s.all_finite_output_name for n in opt)
    assert [i.name for i in s.get_inputs()][-2:] == ["Learning_Rate", "loss_scale"]


def fp16_session(**fields):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    p.mixed_precision = "fp16"
    for k, v in fields.items():
        setattr(p, k, v)
    return ot.TrainingSession(ot.add_loss_output(mlp(), "squared_error", reduction="mean"), p)


def test_fp16_unscaling_matches_fp32_sgd():
    """SGD's update is lr times the gradient: with loss scales 2^6 and 2^12 fed, the float16 run's
    weight changes equal the float32 run's within float16's rounding (a gradient left scaled would
    move the weights 64 to 4096 times too far)."""
    X, Y = data()
    lr = np.array([0.05], np.float32)
    w0 = {i.name: numpy_helper.to_array(i) for i in mlp().graph.initializer}
    ref = fp16_session(training_optimizer_name="SGDOptimizer", mixed_precision="")
    for _ in range(5):
        ref.run(["loss"], {"X": X, "label": Y, "Learning_Rate": lr})
    moved = {k: v - w0[k] for k, v in ref.get_state().items()}
    for scale in (64.0, 4096.0):
        s = fp16_session(training_optimizer_name="SGDOptimizer")
        for _ in range(5):
            finite = s.run(["loss", s.all_finite_output_name],
                           {"X": X, "label": Y, "Learning_Rate": lr, "loss_scale": np.array([scale], np.float32)})[1]
            assert finite.dtype == np.bool_ and finite.shape == (1,) and finite[0]
        for k, v in s.get_state().items():
            err = np.abs((v - w0[k]) - moved[k]).max() / np.abs(moved[k]).max()
            assert err < 1e-2, (scale, k, err)


def test_fp16_skipped_update_changes_nothing():
    """A batch holding a NaN gives NaN gradients: the update is skipped — weights, Adam's moments
    and the step count (its bias correction) stay — so the run continues exactly as the run that
    never saw that batch (the same loss scale fed to both)."""
    X, Y = data()
    bad = X.copy()
    bad[3, 4] = np.nan
    lr = np.array([3e-3], np.float32)
    feed = lambda x: {"X": x, "label": Y, "Learning_Rate": lr, "loss_scale": np.array([1024.0], np.float32)}
    a, b = fp16_session(), fp16_session()
    for s, batches in ((a, [X, X, bad, X, X]), (b, [X, X, X, X])):
        for x in batches:
            s.run(["loss"], feed(x))
    before = None
    assert a.skipped_updates == 1 and b.skipped_updates == 0
    sa, sb = a.get_state(), b.get_state()
    for k in sa:
        assert sa[k].tobytes() == sb[k].tobytes(), k
    oa, ob = a._sess.get_optimizer_state(), b._sess.get_optimizer_state()
    for k in oa:
        assert np.asarray(oa[k]).tobytes() == np.asarray(ob[k]).tobytes(), k
    # the flag of the skipped step, returned when asked for
    c = fp16_session()
    assert not c.run([c.all_finite_output_name], feed(bad))[0][0]
    assert c.run(["loss", c.all_finite_output_name], feed(X))[1][0]
    del before


def reference_scales(flags, scale=65536.0, window=2000, lo=1.0, hi=float(1 << 24)):
    """onnxruntime's DynamicLossScaler rule, written out: the scale fed to each step."""
    fed, stable = [], 0
    for finite in flags:
        fed.append(scale)
        if not finite:
            scale, stable = max(lo, scale / 2), 0
        else:
            stable += 1
            if stable >= window:
                scale, stable = min(hi, scale * 2), 0
    return fed, scale


def test_fp16_session_scaler_follows_the_dynamic_rule(tmp_path):
    """Without a fed loss scale the session scales dynamically: halved after each skipped update,
    doubled after 2000 applied ones, and saved in checkpoints (a resumed run goes on exactly)."""
    X, Y = data(8)
    bad = X.copy()
    bad[0, 0] = np.inf
    lr = np.array([1e-4], np.float32)
    nan_steps = {2, 4, 5, 2010}
    s = fp16_session()
    assert s.loss_scale == 65536.0
    flags, scales = [], []
    for step in range(2030):
        scales.append(s.loss_scale)
        x = bad if step in nan_steps else X
        flags.append(bool(s.run([s.all_finite_output_name], {"X": x, "label": Y, "Learning_Rate": lr})[0][0]))
        if step == 2015:
            s._sess.save_checkpoint(str(tmp_path / "amp.ckpt"))
            saved = (s.loss_scale, s.skipped_updates)
    assert [i for i, f in enumerate(flags) if not f] == sorted(nan_steps)
    fed, final = reference_scales(flags)
    assert scales == fed and s.loss_scale == final
    # halved at steps 2, 4, 5; doubled after the 2000 applied updates 6..2005; halved at 2010
    assert (scales[6], scales[2005], scales[2006], scales[2011]) == (8192.0, 8192.0, 16384.0, 8192.0)
    assert s.skipped_updates == 4
    # resume from the checkpoint: the same scales and weights as the uninterrupted run
    r = fp16_session()
    r._sess.load_checkpoint(str(tmp_path / "amp.ckpt"))
    assert (r.loss_scale, r.skipped_updates) == saved
    for step in range(2016, 2030):
        assert r.loss_scale == scales[step]
        r.run(["loss"], {"X": X, "label": Y, "Learning_Rate": lr})
    for k, v in s.get_state().items():
        assert v.tobytes() == r.get_state()[k].tobytes(), k


def test_fp16_with_accumulation_clipping_and_errors():
    X, Y = data()
    lr = np.array([3e-3], np.float32)
    s = fp16_session(gradient_accumulation_steps=2, enable_grad_norm_clip=True, max_grad_norm=0.5)
    fp32 = ot.TrainingParameters()
    fp32.loss_output_name, fp32.training_optimizer_name = "loss", "AdamOptimizer"
    fp32.gradient_accumulation_steps, fp32.enable_grad_norm_clip, fp32.max_grad_norm = 2, True, 0.5
    ref = ot.TrainingSession(ot.add_loss_output(mlp(), "squared_error", reduction="mean"), fp32)
    for _ in range(20):
        la = s.run(["loss"], {"X": X, "label": Y, "Learning_Rate": lr, "loss_scale": np.array([256.0], np.float32)})[0]
        lb = ref.run(["loss"], {"X": X, "label": Y, "Learning_Rate": lr})[0]
    assert abs(float(la) - float(lb)) / float(lb) < 0.02, (la, lb)  # clipping on the unscaled norm
    with pytest.raises(ValueError, match="computed by update steps only"):
        s.run([s.all_finite_output_name], {"X": X, "label": Y, "Learning_Rate": lr})  # step 1 of 2
    with pytest.raises(ValueError, match="loss scale"):
        s.run(["loss"], {"X": X, "label": Y, "Learning_Rate": lr, "loss_scale": np.array([0.0], np.float32)})
    with pytest.raises(ValueError, match="loss scale"):
        s.run(["loss"], {"X": X, "label": Y, "Learning_Rate": lr, "loss_scale": np.array([1.0, 2.0], np.float32)})
    p = ot.TrainingParameters()
    p.loss_output_name, p.mixed_precision, p.portable_training_graph = "loss", "fp16", True
    with pytest.raises(NotImplementedError, match="portable_training_graph with float16"):
        ot.TrainingSession(ot.add_loss_output(mlp()), p)


def test_cli_precision_bf16(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(mlp(), str(model))
    X, Y = data(128)
    np.savez(tmp_path / "d.npz", X=X, label=Y)
    common = [CLI, "train", str(model), "--data", str(tmp_path / "d.npz"), "--loss", "squared_error", "--optimizer",
              "adam", "--lr", "0.003", "--batch-size", "32", "--epochs", "30", "--progress", "none", "--no-shuffle"]
    finals = {}
    for prec in ("fp32", "bf16"):
        r = subprocess.run(common + ["--precision", prec, "--out", str(tmp_path / f"{prec}.onnx")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        finals[prec] = float(next(l for l in r.stdout.splitlines() if l.startswith("final")).split()[3].rstrip(","))
    assert finals["bf16"] != finals["fp32"] and abs(finals["bf16"] - finals["fp32"]) / finals["fp32"] < 0.05, finals
    r = subprocess.run(common + ["--precision", "fp16", "--out", str(tmp_path / "fp16.onnx")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("fp16"))
    assert "loss scale" in line and "updates skipped" in line, line
    final = float(next(l for l in r.stdout.splitlines() if l.startswith("final")).split()[3].rstrip(","))
    assert abs(final - finals["fp32"]) / finals["fp32"] < 0.05, (final, finals)
