"""Profiling a training session: per-node totals by phase (TrainingSession.profile_summary), the
Chrome trace of SessionOptions.enable_profiling, and `onnxtrain train --profile`."""
import json
import os
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot

CLI = os.environ.get("ONNXTRAIN_CLI", "onnxtrain")


def relu_mlp(n_in=6, hidden=16, n_out=3):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((n_in, hidden)) * 0.4).astype(np.float32), "W1"),
             numpy_helper.from_array(np.zeros(hidden, np.float32), "B1"),
             numpy_helper.from_array((rng.standard_normal((hidden, n_out)) * 0.4).astype(np.float32), "W2"),
             numpy_helper.from_array(np.zeros(n_out, np.float32), "B2")]
    nodes = [helper.make_node("MatMul", ["X", "W1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "B1"], ["h1"], name="fc1_bias"),
             helper.make_node("Relu", ["h1"], ["h2"], name="act"),
             helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="fc2"),
             helper.make_node("Add", ["h3", "B2"], ["Y"], name="fc2_bias")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", n_out])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def data(n=32):
    rng = np.random.default_rng(1)
    return rng.standard_normal((n, 6)).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32)


def make_session(tmp_path, trace, accumulation=1):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    p.gradient_accumulation_steps = accumulation
    p.model_with_training_graph_path = str(tmp_path / "training.onnx")
    so = ot.SessionOptions()
    so.enable_profiling = trace
    so.profile_file_prefix = str(tmp_path / "prof")
    return ot.TrainingSession(ot.add_loss_output(relu_mlp().SerializeToString()), p, so)


def test_summary_counts_every_node_of_every_run_by_phase(tmp_path):
    s = make_session(tmp_path, trace=False, accumulation=2)
    assert s.profile_summary() == [] and s.end_profiling() == ""
    X, Y = data()
    feed = {"X": X, "label": Y, "Learning_Rate": np.array([0.01], np.float32)}
    s.run(["loss"], feed)  # before profiling: not counted
    s.start_profiling()
    runs = 6
    for _ in range(runs):
        s.run(["loss"], feed)
    s.eval(["loss"], {"X": X, "label": Y})
    summary = s.profile_summary()
    assert summary and s.end_profiling() == ""  # totals only: nothing written
    assert not any(f.startswith("prof") for f in os.listdir(tmp_path))
    training = onnx.load(str(tmp_path / "training.onnx"))
    names = {n.name for n in training.graph.node}
    by_phase = {}
    for p in summary:
        by_phase.setdefault(p["phase"], []).append(p)
        assert p["seconds"] >= 0
        if p["phase"] == "eval":
            assert p["calls"] == 1
            continue
        # Every node of the training plan ran once per run, except the optimizer's update, which
        # runs on every second run (accumulation 2); the nodes are those of the training graph.
        assert p["node"] in names, p["node"]
        expected = runs // 2 if p["op_type"] == "AdamOptimizer" else runs
        assert p["calls"] == expected, p
        assert p["phase"] == ("backward" if p["node"].startswith("grad_") else
                              "optimizer" if p["node"].startswith("optimizer_") else "forward")
    assert set(by_phase) == {"forward", "backward", "optimizer", "eval"}
    assert {"fc1", "act", "fc2"} <= {p["node"] for p in by_phase["forward"]}
    assert {"AdamOptimizer", "AccumulateGradients"} <= {p["op_type"] for p in by_phase["optimizer"]}
    assert "Gemm" in {p["op_type"] for p in by_phase["backward"]}  # dW of the MatMul layers
    # The table: phase shares add to 100 % and every op type of the training runs has a row.
    table = ot.TrainingSession.format_profile(summary, runs, 5)
    assert table.startswith(f"profile of {runs} training runs")
    head = table.splitlines()[0]
    shares = [float(x.split("%")[0]) for x in head.split("(")[1].split(", ") for x in [x.split(" ")[-1]]]
    assert abs(sum(shares) - 100) < 0.2, head
    ops = {p["op_type"] for p in summary if p["phase"] != "eval"}
    rows = {line.split()[0] for line in table.split("\n\n")[1].splitlines()[1:]}
    assert ops == rows
    assert len(table.split("\n\n")[2].splitlines()) == 1 + 5


def test_enable_profiling_writes_a_trace_matching_the_summary(tmp_path):
    s = make_session(tmp_path, trace=True)
    X, Y = data()
    for _ in range(3):
        s.run(["loss"], {"X": X, "label": Y, "Learning_Rate": np.array([0.01], np.float32)})
    summary = s.profile_summary()
    path = s.end_profiling()
    assert path.startswith(str(tmp_path / "prof_")) and path.endswith(".json")
    events = json.load(open(path))
    assert events[0]["name"] == "session_initialization"
    assert sum(e["name"] == "train_run" for e in events) == 3
    nodes = [e for e in events if e.get("cat") == "Node"]
    assert len(nodes) == sum(p["calls"] for p in summary)
    total_ns = sum(e["args"]["dur_ns"] for e in nodes)
    assert abs(total_ns * 1e-9 - sum(p["seconds"] for p in summary)) < 1e-6
    # Profiling stopped: later runs add nothing, and the summary is kept.
    s.run(["loss"], {"X": X, "label": Y, "Learning_Rate": np.array([0.01], np.float32)})
    assert s.profile_summary() == summary and s.end_profiling() == ""


def test_cli_train_profile_prints_the_table(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(relu_mlp(), str(model))
    X, Y = data(64)
    np.savez(tmp_path / "d.npz", X=X, label=Y)
    r = subprocess.run([CLI, "train", str(model), "--data", str(tmp_path / "d.npz"), "--loss", "squared_error",
                        "--batch-size", "16", "--epochs", "2", "--lr", "0.01", "--progress", "none", "--profile",
                        "--out", str(tmp_path / "t.onnx")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split("== summary")[1]
    assert "profile of 8 training runs" in out  # 64 samples / 16 a batch x 2 epochs
    assert "slowest nodes" in out and "fc1 " in out and "Relu" in out
    # Without --profile: no table.
    r = subprocess.run([CLI, "train", str(model), "--data", str(tmp_path / "d.npz"), "--loss", "squared_error",
                        "--epochs", "1", "--lr", "0.01", "--progress", "none", "--out", str(tmp_path / "u.onnx")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "profile of" not in r.stdout
