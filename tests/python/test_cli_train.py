"""`onnxtrain train/eval/run/export/grad/inspect` driven as subprocesses. Numbers are checked
against independent references: numpy (float64) gradient descent for a linear model, numpy forward
passes, scikit-learn's r2_score, and an uninterrupted run for resume after SIGINT."""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

CLI = os.environ.get("ONNXTRAIN_CLI") or shutil.which("onnxtrain")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args, cwd=None):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


def ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def weights(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


# ---------------------------------------------------------------------------------------------
# A linear model y = X W + B: plain gradient descent has a float64 closed form to compare with.

N, D = 40, 3


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    d = tmp_path_factory.mktemp("linear")
    rng = np.random.default_rng(0)
    W = (0.1 * rng.standard_normal((D, 1))).astype(np.float32)
    B = np.zeros(1, np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["y"])], "linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(d / "lin.onnx"))
    X = rng.standard_normal((N, D)).astype(np.float32)
    t = (X @ np.array([[1.0], [-2.0], [0.5]]) + 0.3 + 0.01 * rng.standard_normal((N, 1))).astype(np.float32)
    np.savez(d / "d.npz", X=X, label=t)
    np.save(d / "X.npy", X)
    np.save(d / "t.npy", t)
    with open(d / "d.csv", "w") as f:
        f.write("x0,x1,x2,target\n")
        for i in range(N):
            f.write(",".join(repr(float(v)) for v in [*X[i], t[i, 0]]) + "\n")
    return d, W, B, X, t


def numpy_gd(W, B, X, t, lr, steps, momentum=0.0):
    """Full-batch gradient descent on mean squared error, float64 (torch.optim.SGD's momentum)."""
    W, B, X, t = W.astype(np.float64), B.astype(np.float64), X.astype(np.float64), t.astype(np.float64)
    vW, vB = np.zeros_like(W), np.zeros_like(B)
    for k in range(steps):
        r = X @ W + B - t
        gW, gB = 2 * X.T @ r / r.size, 2 * r.sum(0) / r.size
        if momentum:
            vW, vB = (gW, gB) if k == 0 else (momentum * vW + gW, momentum * vB + gB)
            gW, gB = vW, vB
        W, B = W - lr * gW, B - lr * gB
    return W, B


@pytest.mark.parametrize("fmt", ["npz", "npy", "csv"])
@pytest.mark.parametrize("opt", ["sgd", "momentum"])
def test_train_matches_numpy_gradient_descent(linear, tmp_path, fmt, opt):
    d, W, B, X, t = linear
    data = {"npz": ["--data", d / "d.npz"], "npy": ["--data", d / "X.npy", "--labels", d / "t.npy"],
            "csv": ["--data", d / "d.csv", "--label-column", "target"]}[fmt]
    out = tmp_path / "lin.trained.onnx"
    r = ok(cli("train", d / "lin.onnx", *data, "--loss", "squared_error", "--optimizer", opt, "--lr", 0.1,
               "--momentum", 0.9 if opt == "momentum" else 0, "--batch-size", N, "--steps", 20, "--no-shuffle",
               "--out", out, "--progress", "plain"))
    assert "== summary" in r.stdout and "20 optimizer steps" in r.stdout
    w = weights(out)
    refW, refB = numpy_gd(W, B, X, t, 0.1, 20, momentum=0.9 if opt == "momentum" else 0.0)
    np.testing.assert_allclose(w["W"], refW, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(w["B"], refB, rtol=1e-4, atol=1e-6)
    # Metrics: one JSON object per line with the documented keys; the curve is an SVG document.
    recs = [json.loads(l) for l in open(tmp_path / "lin.trained.metrics.jsonl")]
    assert recs and recs[-1]["step"] == 20
    for key in ("step", "epoch", "loss", "lr", "samples_per_s"):
        assert key in recs[-1]
    assert ET.parse(tmp_path / "lin.trained.metrics.svg").getroot().tag.endswith("svg")


def test_freeze_and_grad_accum(linear, tmp_path):
    d, W, B, X, t = linear
    # --freeze B: B stays bit-identical; W follows gradient descent with B fixed.
    ok(cli("train", d / "lin.onnx", "--data", d / "d.npz", "--loss", "squared_error", "--lr", 0.1, "--batch-size", N,
           "--steps", 10, "--no-shuffle", "--freeze", "B", "--out", tmp_path / "f.onnx", "--progress", "none"))
    w = weights(tmp_path / "f.onnx")
    np.testing.assert_array_equal(w["B"], B)
    Wd = W.astype(np.float64)
    for _ in range(10):
        r = X @ Wd + B - t
        Wd = Wd - 0.1 * 2 * X.T @ r / r.size
    np.testing.assert_allclose(w["W"], Wd, rtol=1e-4, atol=1e-6)
    # --grad-accum 2 over micro-batches of 20 with a summed loss == steps on the whole batch of 40.
    ok(cli("train", d / "lin.onnx", "--data", d / "d.npz", "--loss", "squared_error", "--reduction", "sum",
           "--lr", 0.002, "--batch-size", N // 2, "--grad-accum", 2, "--steps", 10, "--no-shuffle",
           "--out", tmp_path / "a.onnx", "--progress", "none"))
    w = weights(tmp_path / "a.onnx")
    Wd, Bd = W.astype(np.float64), B.astype(np.float64)
    for _ in range(10):
        r = X @ Wd + Bd - t
        Wd, Bd = Wd - 0.002 * 2 * X.T @ r, Bd - 0.002 * 2 * r.sum(0)
    np.testing.assert_allclose(w["W"], Wd, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(w["B"], Bd, rtol=1e-4, atol=1e-6)


def test_eval_reports_loss_and_r2(linear):
    from sklearn.metrics import r2_score
    d, W, B, X, t = linear
    r = ok(cli("eval", d / "lin.onnx", "--data", d / "d.npz", "--loss", "squared_error", "--json"))
    res = json.loads(r.stdout)
    pred = X.astype(np.float64) @ W + B
    assert res["samples"] == N
    np.testing.assert_allclose(res["loss"], np.mean((pred - t) ** 2), rtol=1e-5)
    np.testing.assert_allclose(res["r2"], r2_score(t, pred), rtol=1e-5)


def test_run_writes_outputs_of_training_data(linear, tmp_path):
    d, W, B, X, t = linear
    ok(cli("run", d / "lin.onnx", "--data", d / "d.npz", "--out", tmp_path / "o.npz"))  # 'label' is skipped
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["y"], X @ W + B, rtol=1e-5, atol=1e-6)


def test_grad_writes_the_gradient_graph(linear, tmp_path):
    d, W, B, X, t = linear
    ok(cli("grad", d / "lin.onnx", "--loss", "squared_error", "--out", tmp_path / "g.onnx"))
    g = onnx.load(str(tmp_path / "g.onnx"))
    onnx.checker.check_model(g)
    names = [o.name for o in g.graph.output]
    assert "W_grad" in names and "B_grad" in names
    sess = onnxtrain.InferenceSession(str(tmp_path / "g.onnx"))
    gW, gB = sess.run(["W_grad", "B_grad"], {"X": X, "label": t})
    r = X.astype(np.float64) @ W + B - t
    np.testing.assert_allclose(gW, 2 * X.T @ r / r.size, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gB, 2 * r.sum(0) / r.size, rtol=1e-4, atol=1e-6)


def test_inspect_lists_model(linear):
    d, *_ = linear
    r = ok(cli("inspect", d / "lin.onnx"))
    for s in ("X", "float[N, 3]", "W", "float[3, 1]", "MatMul", "Add", "ai.onnx 17", "every operator has a gradient rule"):
        assert s in r.stdout, s


def test_inspect_names_operators_without_gradient_rules(tmp_path):
    # An operator from an unknown domain certainly has no gradient rule; inspect describes the
    # model anyway (it does not need to run it) and names the operator.
    g = helper.make_graph([helper.make_node("Relu", ["X"], ["a"]),
                           helper.make_node("Mystery", ["a"], ["y"], domain="org.example")], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.example", 1)])
    onnx.save(m, str(tmp_path / "m.onnx"))
    r = ok(cli("inspect", tmp_path / "m.onnx"))
    assert "org.example 1" in r.stdout
    assert "no rule for org.example.Mystery" in r.stdout
    assert "Relu" in r.stdout and "no rule for Relu" not in r.stdout


def test_export_from_checkpoint_matches_trained_model(linear, tmp_path):
    d, *_ = linear
    out, ck = tmp_path / "t.onnx", tmp_path / "ck"
    ok(cli("train", d / "lin.onnx", "--data", d / "d.npz", "--loss", "squared_error", "--optimizer", "adam",
           "--lr", 0.05, "--batch-size", 8, "--epochs", 3, "--checkpoint-dir", ck, "--out", out, "--progress", "none"))
    ok(cli("export", d / "lin.onnx", "--checkpoint", ck, "--out", tmp_path / "e.onnx"))
    a, b = weights(out), weights(tmp_path / "e.onnx")
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    exported = onnx.load(str(tmp_path / "e.onnx"))
    onnx.checker.check_model(exported)
    assert [i.name for i in exported.graph.input] == ["X"] and [o.name for o in exported.graph.output] == ["y"]


@pytest.mark.parametrize("cmd", ["train", "eval", "run", "export", "grad", "inspect"])
def test_each_subcommand_documents_itself(cmd):
    r = ok(cli(cmd, "--help"))
    assert r.stdout.startswith(f"usage: onnxtrain {cmd}") and "--help" in r.stdout
    assert cmd in ok(cli("--help")).stdout


# ---------------------------------------------------------------------------------------------
# Errors: one clear line on stderr, non-zero exit, nothing written.

@pytest.mark.parametrize("case", ["missing_model", "missing_data", "no_such_input", "shape", "dtype",
                                  "unknown_optimizer", "bad_number", "missing_label", "unknown_loss"])
def test_train_errors_are_one_line_and_write_nothing(linear, tmp_path, case):
    d, W, B, X, t = linear
    np.savez(tmp_path / "noinput.npz", Z=X, label=t)
    np.savez(tmp_path / "shape.npz", X=X[:, :2], label=t)
    np.savez(tmp_path / "dtype.npz", X=X.astype(np.int32), label=t)
    np.savez(tmp_path / "nolabel.npz", X=X)
    model, data, extra = d / "lin.onnx", d / "d.npz", []
    expected = {
        "missing_model": "nothere.onnx", "missing_data": "nothere.npz", "no_such_input": "'Z'",
        "shape": "expects float[N, 3]", "dtype": "int32", "unknown_optimizer": "--optimizer",
        "bad_number": "--lr", "missing_label": "label", "unknown_loss": "--loss"}[case]
    if case == "missing_model":
        model = tmp_path / "nothere.onnx"
    elif case == "missing_data":
        data = tmp_path / "nothere.npz"
    elif case in ("no_such_input", "shape", "dtype"):
        data = tmp_path / {"no_such_input": "noinput", "shape": "shape", "dtype": "dtype"}[case]
        data = data.with_suffix(".npz")
    elif case == "missing_label":
        data = tmp_path / "nolabel.npz"
    out_dir = tmp_path / "out"
    loss = "hinge_of_doom" if case == "unknown_loss" else "squared_error"
    extra = {"unknown_optimizer": ["--optimizer", "rmsprop_of_doom"], "bad_number": ["--lr", "fast"]}.get(case, [])
    r = cli("train", model, "--data", data, "--loss", loss, *extra, "--out", out_dir / "m.onnx",
            "--checkpoint-dir", out_dir / "ck", "--steps", 2)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("onnxtrain train: error:") and expected in lines[0], lines[0]
    assert "Traceback" not in r.stderr and "terminate called" not in r.stderr
    assert not out_dir.exists() or not any(out_dir.rglob("*")), list(out_dir.rglob("*"))


# ---------------------------------------------------------------------------------------------
# The demo: digits, Ctrl-C and resume.

@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    d = tmp_path_factory.mktemp("digits")
    spec = importlib.util.spec_from_file_location("make_examples", os.path.join(REPO, "examples", "make_examples.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    onnx.save(mod.make_digits_mlp(np.random.default_rng(0)), str(d / "digits_mlp.onnx"))
    mod.write_digits(str(d))
    return d


def test_bundled_digits_are_scikit_learns_with_its_stratified_split(digits):
    # examples/data/digits.npz replaces scikit-learn in the main job: the same images and labels
    # as sklearn.datasets.load_digits and the split train_test_split(stratify=y, random_state=0) makes.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    ref = load_digits()
    X = (ref.data / 16.0).astype(np.float32)
    y = ref.target.astype(np.int64)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)
    for name, (ex, ey) in {"digits.npz": (X, y), "digits_train.npz": (Xtr, ytr), "digits_test.npz": (Xte, yte)}.items():
        got = np.load(digits / name)
        assert got["X"].dtype == np.float32 and got["label"].dtype == np.int64, name
        np.testing.assert_array_equal(got["X"], ex, err_msg=name)
        np.testing.assert_array_equal(got["label"], ey, err_msg=name)


DEMO = ["--loss", "cross_entropy", "--score-output", "logits", "--optimizer", "adam", "--lr", 0.01,
        "--batch-size", 32, "--seed", 0]


def test_demo_reaches_95_percent_held_out(digits, tmp_path):
    out = tmp_path / "digits.trained.onnx"
    t0 = time.time()
    r = ok(cli("train", digits / "digits_mlp.onnx", "--data", digits / "digits_train.npz", "--validation-data",
               digits / "digits_test.npz", *DEMO, "--epochs", 20, "--out", out, "--progress", "plain"))
    wall = time.time() - t0
    assert "held-out" in r.stdout and "accuracy" in r.stdout
    held = np.load(digits / "digits_test.npz")
    sess = onnxtrain.InferenceSession(str(out))
    (logits,) = sess.run(["logits"], {"X": held["X"]})
    acc = float((logits.argmax(1) == held["label"]).mean())
    print(f"digits demo: held-out accuracy {acc:.4f} in {wall:.1f} s")
    assert acc >= 0.95
    # The summary's held-out accuracy is the same number.
    line = next(l for l in r.stdout.splitlines() if l.startswith("held-out"))
    assert f"accuracy {100 * acc:.2f}%" in line, line
    # Accuracy with --validation-split: the trainer holds out 20% itself.
    r = ok(cli("train", digits / "digits_mlp.onnx", "--data", digits / "digits.npz", "--validation-split", 0.2,
               *DEMO, "--epochs", 20, "--out", tmp_path / "split.onnx", "--progress", "none"))
    line = next(l for l in r.stdout.splitlines() if l.startswith("held-out"))
    assert float(line.split("accuracy ")[1].split("%")[0]) >= 95.0, line


def test_sigint_saves_checkpoint_and_resume_is_exact(digits, tmp_path):
    args = [digits / "digits_mlp.onnx", "--data", digits / "digits_train.npz", "--loss", "cross_entropy",
            "--score-output", "logits", "--optimizer", "momentum", "--batch-size", 16, "--epochs", 300, "--seed", 3,
            "--lr", 0.01, "--progress", "plain"]
    # Uninterrupted reference.
    ok(cli("train", *args, "--out", tmp_path / "a.onnx", "--checkpoint-dir", tmp_path / "cka"))
    # Interrupted after the first epoch line, then resumed.
    cmd = [CLI, "train", *map(str, args), "--out", str(tmp_path / "b.onnx"), "--checkpoint-dir", str(tmp_path / "ckb")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stderr.readline()
    assert first.startswith("epoch 1/300"), first
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, (p.returncode, err)
    assert "interrupted at step" in err and "--resume" in err
    assert not (tmp_path / "b.onnx").exists()
    assert (tmp_path / "ckb" / "last.ckpt").exists()
    r = ok(cli("train", *args, "--out", tmp_path / "b.onnx", "--checkpoint-dir", tmp_path / "ckb", "--resume"))
    assert "resuming from" in r.stdout
    a, b = weights(tmp_path / "a.onnx"), weights(tmp_path / "b.onnx")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # Same options are required to resume.
    r = cli("train", *args[:-4], "--lr", 0.5, "--progress", "plain", "--out", tmp_path / "c.onnx",
            "--checkpoint-dir", tmp_path / "ckb", "--resume")
    assert r.returncode != 0 and "--lr" in r.stderr


def test_export_of_a_model_with_its_loss(tmp_path):
    # A model that outputs its own loss: export drops the loss and the label input.
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["y"]), helper.make_node("Sub", ["y", "label"], ["d"]),
         helper.make_node("Mul", ["d", "d"], ["sq"]), helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0)],
        "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2]),
              helper.make_tensor_value_info("label", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1]),
         helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array([[1.0], [2.0]], np.float32), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(tmp_path / "m.onnx"))
    ok(cli("export", tmp_path / "m.onnx", "--out", tmp_path / "i.onnx"))
    e = onnx.load(str(tmp_path / "i.onnx"))
    onnx.checker.check_model(e)
    assert [i.name for i in e.graph.input] == ["X"] and [o.name for o in e.graph.output] == ["y"]
    X = np.array([[1.0, 1.0], [2.0, -1.0]], np.float32)
    (y,) = onnxtrain.InferenceSession(str(tmp_path / "i.onnx")).run(None, {"X": X})
    np.testing.assert_allclose(y, X @ np.array([[1.0], [2.0]]), rtol=1e-6)


def test_memory_options_keep_the_trained_weights(digits, tmp_path):
    """--memory-efficient-gradient and --recompute change where values live, not one bit of the
    result; a budget needs static shapes and says so; the options are refused where they do not apply."""
    common = ["--data", digits / "digits_train.npz", "--loss", "cross_entropy", "--score-output", "logits",
              "--optimizer", "adam", "--lr", 0.01, "--batch-size", 32, "--steps", 6, "--no-shuffle",
              "--progress", "none"]
    ok(cli("train", digits / "digits_mlp.onnx", *common, "--out", tmp_path / "plain.onnx"))
    ok(cli("train", digits / "digits_mlp.onnx", *common, "--memory-efficient-gradient", "--recompute", "gelu",
           "--out", tmp_path / "mem.onnx"))
    a, b = weights(tmp_path / "plain.onnx"), weights(tmp_path / "mem.onnx")
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    r = cli("train", digits / "digits_mlp.onnx", *common, "--memory-efficient-gradient", "--clip-norm", 1.0,
            "--out", tmp_path / "x.onnx")
    assert r.returncode != 0 and "use_memory_efficient_gradient with gradient norm clipping" in r.stderr, r.stderr
    r = cli("train", digits / "digits_mlp.onnx", *common, "--recompute", "layers", "--out", tmp_path / "x.onnx")
    assert r.returncode != 0 and "no transformer layer found" in r.stderr, r.stderr
    r = cli("train", digits / "digits_mlp.onnx", *common, "--recompute-layers", 2, "--out", tmp_path / "x.onnx")
    assert r.returncode != 0 and "--recompute-layers goes with --recompute layers" in r.stderr, r.stderr
    r = cli("train", digits / "digits_mlp.onnx", *common, "--recompute-budget", "1MB", "--out", tmp_path / "x.onnx")
    assert r.returncode != 0 and "has no static shape" in r.stderr, r.stderr
    assert not (tmp_path / "x.onnx").exists()
