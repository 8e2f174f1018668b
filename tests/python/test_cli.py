"""The command line, driven as a subprocess."""
import os
import shutil
import subprocess

import numpy as np
import pytest

CLI = os.environ.get("ONNXTRAIN_CLI") or shutil.which("onnxtrain")


def run_cli(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def model_file(tmp_path, mlp_model):
    data, w, b = mlp_model
    p = tmp_path / "m.onnx"
    p.write_bytes(data)
    return p, w, b


def test_help():
    r = run_cli("--help")
    assert r.returncode == 0 and "run MODEL" in r.stdout
    r = run_cli("run", "--help")
    assert r.returncode == 0 and "--data" in r.stdout


def test_run_writes_outputs(tmp_path, model_file):
    p, w, b = model_file
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    r = run_cli("run", p, "--data", tmp_path / "in.npz", "--out", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    assert "y: float[3, 3]" in r.stdout
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(out["z"], x @ w + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["y"], np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5)


def test_run_reads_compressed_npz(tmp_path, model_file):
    p, w, b = model_file
    x = np.ones((2, 4), np.float32)
    np.savez_compressed(tmp_path / "in.npz", x=x)
    r = run_cli("run", p, "--data", tmp_path / "in.npz", "--out", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["z"], x @ w + b, rtol=1e-5)


@pytest.mark.parametrize("case", ["missing_model", "missing_data", "wrong_input", "bad_option", "unknown_cmd"])
def test_errors_are_one_clear_line(tmp_path, model_file, case):
    p, _, _ = model_file
    np.savez(tmp_path / "bad.npz", nope=np.ones((1, 4), np.float32))
    args = {
        "missing_model": ["run", tmp_path / "missing.onnx", "--data", tmp_path / "bad.npz"],
        "missing_data": ["run", p, "--data", tmp_path / "missing.npz"],
        "wrong_input": ["run", p, "--data", tmp_path / "bad.npz"],
        "bad_option": ["run", p, "--frobnicate"],
        "unknown_cmd": ["frobnicate"],
    }[case]
    r = run_cli(*args)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    expected = {"missing_model": "missing.onnx", "missing_data": "missing.npz", "wrong_input": "unknown input 'nope'",
                "bad_option": "--frobnicate", "unknown_cmd": "frobnicate"}[case]
    assert expected in lines[0]
