"""bf16 mixed precision (TrainingParameters.mixed_precision, onnxtrain train --precision): the
products in bfloat16, the rest and the master weights in float32; the loss tracks the fp32 run."""
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


def train(precision, steps, tmp_path=None):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    p.mixed_precision = precision
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
    for ok in ("", "fp32", "bf16"):
        p.mixed_precision = ok
    with pytest.raises(ot.NotImplemented, match="fp16"):
        p.mixed_precision = "fp16"
    with pytest.raises(ValueError, match="mixed_precision"):
        p.mixed_precision = "int8"


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
    r = subprocess.run(common + ["--precision", "fp16", "--out", str(tmp_path / "x.onnx")], capture_output=True, text=True)
    assert r.returncode != 0 and "fp16" in r.stderr and "not implemented" in r.stderr
