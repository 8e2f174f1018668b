"""Every CLI subcommand's bad input, table-driven: model paths that do not exist, are folders, empty,
truncated or not ONNX; data of the wrong element type (float64, int32, object, string), rank,
names, sample counts, or empty; numeric options out of range; outputs asking for terabytes. Each
fails with exit status 1 (bad input) or 2 (bad usage) and one stderr line naming what is wrong;
layouts numpy can store (Fortran order) and NaN data run as they should."""
import os
import shutil
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot
from test_training import mlp

CLI = os.environ.get("ONNXTRAIN_CLI") or shutil.which("onnxtrain")
RNG = np.random.default_rng(0)
X = RNG.standard_normal((16, 6)).astype(np.float32)
Y = RNG.standard_normal((16, 3)).astype(np.float32)


def cli(*args, cwd):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_bad")
    m = mlp().SerializeToString()
    (d / "m.onnx").write_bytes(m)
    (d / "lm.onnx").write_bytes(ot.add_loss_output(mlp()).SerializeToString())
    (d / "trunc.onnx").write_bytes(m[: len(m) // 2])
    (d / "empty.onnx").write_bytes(b"")
    (d / "text.onnx").write_text("not a model\n" * 50)
    (d / "folder.onnx").mkdir()
    tile = helper.make_graph([helper.make_node("Tile", ["X", "r"], ["T"])], "tile",
                             [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 6])],
                             [helper.make_tensor_value_info("T", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(np.array([1 << 18, 1 << 18], np.int64), "r")])
    tm = helper.make_model(tile, opset_imports=[helper.make_opsetid("", 17)])
    tm.ir_version = 8
    (d / "tile.onnx").write_bytes(tm.SerializeToString())
    np.savez(d / "d.npz", X=X, label=Y)
    np.savez(d / "f64.npz", X=X.astype(np.float64), label=Y)
    np.savez(d / "i32.npz", X=X.astype(np.int32), label=Y)
    np.savez(d / "obj.npz", X=X.astype(object), label=Y)
    np.savez(d / "str.npz", X=np.array([["a"] * 6] * 16), label=Y)
    np.savez(d / "zero.npz", X=X[:0], label=Y[:0])
    np.savez(d / "rank.npz", X=X[0], label=Y)
    np.savez(d / "extra.npz", X=X, label=Y, Q=X)
    np.savez(d / "short.npz", X=X, label=Y[:5])
    np.savez(d / "nolabel.npz", X=X)
    np.savez(d / "fortran.npz", X=np.asfortranarray(X), label=Y)
    xn = X.copy()
    xn[0, 0] = np.nan
    np.savez(d / "nan.npz", X=xn, label=Y)
    (d / "trunc.npz").write_bytes((d / "d.npz").read_bytes()[:300])
    (d / "empty.npz").write_bytes(b"")
    return d


# (id, args, exit status, fragments of the one stderr line)
CASES = [
    # model files, every subcommand
    *[(f"{cmd} missing model", [cmd, "nope.onnx", *more], 1, ["nope.onnx", "No such file"])
      for cmd, more in [("run", ["--data", "d.npz"]), ("train", ["--data", "d.npz", "--loss", "l2"]),
                        ("eval", ["--data", "d.npz", "--loss", "l2"]), ("export", []), ("grad", ["--loss", "l2"]),
                        ("inspect", [])]],
    *[(f"{cmd} {what} model", [cmd, f, *more], 1, [f, text])
      for cmd, more in [("run", ["--data", "d.npz"]), ("train", ["--data", "d.npz", "--loss", "l2"]),
                        ("eval", ["--data", "d.npz", "--loss", "l2"]), ("export", []), ("grad", ["--loss", "l2"]),
                        ("inspect", [])]
      for what, f, text in [("folder", "folder.onnx", "not a regular file"), ("empty", "empty.onnx", "empty (0 bytes)"),
                            ("truncated", "trunc.onnx", "not a valid ONNX ModelProto"),
                            ("non-ONNX", "text.onnx", "not a valid ONNX ModelProto")]],
    # data files
    ("run float64 data", ["run", "m.onnx", "--data", "f64.npz"], 1, ["'X'", "double", "expects float"]),
    ("run int32 data", ["run", "m.onnx", "--data", "i32.npz"], 1, ["'X'", "int32", "expects float"]),
    ("run object data", ["run", "m.onnx", "--data", "obj.npz"], 1, ["obj.npz", "[X]", "unsupported .npy dtype '|O'"]),
    ("run string data", ["run", "m.onnx", "--data", "str.npz"], 1, ["str.npz", "[X]", "unsupported .npy dtype"]),
    ("run no samples", ["run", "m.onnx", "--data", "zero.npz"], 1, ["zero.npz", "no samples"]),
    ("run wrong rank", ["run", "m.onnx", "--data", "rank.npz"], 1, ["'X'", "shape [6]", "rank 2"]),
    ("run extra array", ["run", "m.onnx", "--data", "extra.npz"], 1, ["unknown input 'Q'", "inputs are: X"]),
    ("run truncated npz", ["run", "m.onnx", "--data", "trunc.npz"], 1, ["trunc.npz", "not a valid .npz"]),
    ("run empty npz", ["run", "m.onnx", "--data", "empty.npz"], 1, ["empty.npz", "empty (0 bytes)"]),
    ("run missing data", ["run", "m.onnx", "--data", "nope.npz"], 1, ["nope.npz"]),
    ("run folder as data", ["run", "m.onnx", "--data", "."], 1, ["'.'", "unknown format"]),
    ("run output of terabytes", ["run", "tile.onnx", "--data", "d.npz"], 1,
     ["Tile node", "too large", "allocation limit"]),
    ("run output over --memory-limit", ["run", "tile.onnx", "--data", "d.npz", "--memory-limit", "1M"], 1,
     ["Tile node", "memory limit", "1048576 bytes"]),
    ("train float64 data", ["train", "m.onnx", "--data", "f64.npz", "--loss", "l2"], 1, ["'X'", "double"]),
    ("train no samples", ["train", "m.onnx", "--data", "zero.npz", "--loss", "l2"], 1, ["no samples"]),
    ("train label count", ["train", "m.onnx", "--data", "short.npz", "--loss", "l2"], 1,
     ["'label' has 5 samples", "'X' has 16"]),
    ("train no label", ["train", "m.onnx", "--data", "nolabel.npz", "--loss", "l2"], 1, ["no label array 'label'"]),
    ("train NaN data", ["train", "m.onnx", "--data", "nan.npz", "--loss", "l2"], 1, ["loss became nan at step 1"]),
    ("eval float64 data", ["eval", "m.onnx", "--data", "f64.npz", "--loss", "l2"], 1, ["'X'", "double"]),
    ("eval no samples", ["eval", "m.onnx", "--data", "zero.npz", "--loss", "l2"], 1, ["no samples"]),
    # options
    ("train batch size 0", ["train", "m.onnx", "--data", "d.npz", "--loss", "l2", "--batch-size", "0"], 2,
     ["--batch-size", "out of range"]),
    ("train batch size -1", ["train", "m.onnx", "--data", "d.npz", "--loss", "l2", "--batch-size", "-1"], 2,
     ["--batch-size", "out of range"]),
    ("train batch size 10^20", ["train", "m.onnx", "--data", "d.npz", "--loss", "l2", "--batch-size", "1" + "0" * 20],
     2, ["--batch-size", "not an integer"]),
    ("train epochs -1", ["train", "m.onnx", "--data", "d.npz", "--loss", "l2", "--epochs", "-1"], 2,
     ["--epochs", "out of range"]),
    ("train lr nan", ["train", "m.onnx", "--data", "d.npz", "--loss", "l2", "--lr", "nan"], 2, ["--lr", "'nan'"]),
    ("train unknown loss", ["train", "m.onnx", "--data", "d.npz", "--loss", "nope"], 2, ["--loss", "'nope'", "l2"]),
    ("train memory limit garbage", ["train", "m.onnx", "--data", "d.npz", "--loss", "l2", "--memory-limit", "lots"], 2,
     ["--memory-limit", "'lots'"]),
    ("train unknown score output", ["train", "m.onnx", "--data", "d.npz", "--loss", "l2", "--score-output", "nope"], 1,
     ["no output 'nope'", "outputs: Y"]),
    ("train resume without checkpoint", ["train", "m.onnx", "--data", "d.npz", "--loss", "l2", "--resume"], 1,
     ["--resume", "no checkpoint"]),
    ("eval without loss", ["eval", "m.onnx", "--data", "d.npz"], 1, ["no output 'loss'", "--loss KIND"]),
    ("export missing checkpoint", ["export", "lm.onnx", "--checkpoint", "nope.ckpt"], 1, ["nope.ckpt", "No such file"]),
    ("export npz as checkpoint", ["export", "lm.onnx", "--checkpoint", "d.npz"], 1, ["d.npz", "not an onnxtrain checkpoint"]),
    ("grad unknown loss", ["grad", "m.onnx", "--loss", "nope"], 2, ["--loss", "'nope'"]),
]


@pytest.mark.parametrize("args, status, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cli_bad_input(files, args, status, fragments):
    r = cli(*args, cwd=files)
    assert r.returncode == status, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"onnxtrain {args[0]}: error: "), r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_cli_writes_nothing_on_bad_input(files, tmp_path):
    """A failed run leaves no output file, no temporary file."""
    for args in (["run", files / "m.onnx", "--data", files / "f64.npz", "--out", tmp_path / "o.npz"],
                 ["train", files / "m.onnx", "--data", files / "nan.npz", "--loss", "l2", "--out", tmp_path / "t.onnx",
                  "--checkpoint-dir", tmp_path / "ck"],
                 ["grad", files / "trunc.onnx", "--loss", "l2", "--out", tmp_path / "g.onnx"]):
        assert cli(*args, cwd=tmp_path).returncode == 1
    leftovers = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs]
    assert not [f for f in leftovers if ".tmp" in f or f.endswith((".onnx", ".npz"))], leftovers


@pytest.mark.parametrize("data", ["fortran.npz", "nan.npz"])
def test_cli_run_layouts_and_nan_like_numpy(files, tmp_path, data):
    r = cli("run", "m.onnx", "--data", data, "--out", tmp_path / "o.npz", cwd=files)
    assert r.returncode == 0, r.stderr
    x = np.load(files / data)["X"]
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in mlp().graph.initializer}
    want = np.tanh(x @ w["W1"] + w["B1"]) @ w["W2"] + w["B2"]  # numpy, NaN propagating
    got = np.load(tmp_path / "o.npz")["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.isnan(got[0]).all() == np.isnan(x[0]).any()  # the NaN row is NaN, the others are not
    assert not np.isnan(got[1:]).any()
