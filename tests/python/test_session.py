"""InferenceSession: onnxruntime's call shapes, results against numpy, clear errors."""
import os
import re
import subprocess
import warnings

import numpy as np
import pytest

import onnxtrain as ot


def test_run_matches_numpy(mlp_model):
    data, w, b = mlp_model
    sess = ot.InferenceSession(data)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    y, z = sess.run(None, {"x": x})
    ref_z = x.astype(np.float64) @ w.astype(np.float64) + b
    np.testing.assert_allclose(z, ref_z, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, np.maximum(ref_z, 0), rtol=1e-5, atol=1e-5)
    assert y.dtype == np.float32 and y.shape == (5, 3)


def test_output_subset_and_order(mlp_model):
    data, _, _ = mlp_model
    sess = ot.InferenceSession(data)
    x = np.ones((2, 4), np.float32)
    z, y = sess.run(["z", "y"], {"x": x})
    np.testing.assert_array_equal(y, np.maximum(z, 0))
    (only,) = sess.run(["y"], {"x": x})
    np.testing.assert_array_equal(only, y)


def test_get_inputs_outputs(mlp_model):
    data, _, _ = mlp_model
    sess = ot.InferenceSession(data)
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.type, inp.shape) == ("x", "tensor(float)", ["N", 4])
    assert [o.name for o in sess.get_outputs()] == ["y", "z"]
    assert sess.get_outputs()[0].shape == ["N", 3]
    assert sess.get_overridable_initializers() == []


def test_load_from_path_and_pathlike(tmp_path, mlp_model):
    data, _, _ = mlp_model
    p = tmp_path / "m.onnx"
    p.write_bytes(data)
    x = np.ones((1, 4), np.float32)
    a = ot.InferenceSession(str(p)).run(None, {"x": x})
    b = ot.InferenceSession(p).run(None, {"x": x})
    np.testing.assert_array_equal(a[0], b[0])


def test_session_options_threads(mlp_model):
    data, _, _ = mlp_model
    so = ot.SessionOptions()
    so.intra_op_num_threads = 1
    x = np.random.default_rng(2).standard_normal((64, 4)).astype(np.float32)
    one = ot.InferenceSession(data, so).run(None, {"x": x})
    so.intra_op_num_threads = 2
    two = ot.InferenceSession(data, sess_options=so).run(None, {"x": x})
    np.testing.assert_array_equal(one[0], two[0])
    so.intra_op_num_threads = -1
    with pytest.raises(ValueError, match="intra_op_num_threads"):
        ot.InferenceSession(data, so)


_THREADS_SCRIPT = r"""
import os, sys
import numpy as np
import onnx
from onnx import helper, TensorProto
import onnxtrain as ot
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 512])
model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 13)])
before = len(os.listdir("/proc/self/task"))
sess = ot.InferenceSession(model.SerializeToString())  # intra_op_num_threads left at 0
sess.run(None, {"x": np.ones((512, 512), np.float32)})
print(len(os.listdir("/proc/self/task")) - before)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell one thread from several")
def test_default_thread_budget_follows_omp_num_threads():
    # intra_op_num_threads = 0 takes OMP_NUM_THREADS when set (as an OpenMP library's users expect
    # and docs/distributed.md says), else every core: the threads the run starts tell which.
    def started(env_value):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT")}
        env["OPENBLAS_NUM_THREADS"] = "1"
        if env_value is not None:
            env["OMP_NUM_THREADS"] = env_value
        out = subprocess.run(["/usr/bin/python3", "-c", _THREADS_SCRIPT], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.strip().splitlines()[-1])

    assert started("1") == 0
    assert started(None) >= 1
    assert started("abc") >= 1  # not a number: every core


def test_providers_like_onnxruntime(mlp_model):
    data, _, _ = mlp_model
    assert ot.get_available_providers() == ["CPUExecutionProvider"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = ot.InferenceSession(data, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert any("CUDAExecutionProvider" in str(w.message) for w in caught)
    assert sess.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.parametrize("feed,message", [
    ({"nope": np.ones((1, 4), np.float32)}, "unknown input 'nope'"),
    ({"x": np.ones((1, 4), np.float64)}, "input 'x' has element type double, the model expects float"),
    ({"x": np.ones((4,), np.float32)}, "input 'x' has rank 1"),
    ({"x": np.ones((1, 5), np.float32)}, "input 'x' has dimension 5 at axis 1, the model expects 4"),
    ({}, re.escape("Required inputs (['x']) are missing from input feed ([]).")),  # onnxruntime's message
])
def test_bad_feeds_name_the_input(mlp_model, feed, message):
    data, _, _ = mlp_model
    sess = ot.InferenceSession(data)
    with pytest.raises(ot.InvalidArgument, match=message):
        sess.run(None, feed)
    # ValueError is the Python family of the error
    with pytest.raises(ValueError):
        sess.run(None, feed)


def test_unknown_output_name(mlp_model):
    data, _, _ = mlp_model
    with pytest.raises(ot.InvalidArgument, match="unknown output 'w'"):
        ot.InferenceSession(data).run(["w"], {"x": np.ones((1, 4), np.float32)})


def test_non_contiguous_input(mlp_model):
    data, w, b = mlp_model
    x = np.asfortranarray(np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32))
    y, z = ot.InferenceSession(data).run(None, {"x": x})
    np.testing.assert_allclose(z, x @ w + b, rtol=1e-5, atol=1e-5)


def test_bad_model_bytes_and_files(tmp_path):
    with pytest.raises(ot.InvalidModel, match="not a valid ONNX ModelProto|IR version"):
        ot.InferenceSession(b"\x08\x07garbage-bytes\xff\xff")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ot.InvalidModel, match="empty"):
        ot.InferenceSession(str(empty))
    with pytest.raises(ot.ModelFileError, match="cannot open"):
        ot.InferenceSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(TypeError):
        ot.InferenceSession(12)


@pytest.mark.skipif(os.environ.get("ONNXTRAIN_INSTALLED") != "1", reason="set by scripts/test.sh after installing")
def test_installed_package_imports_from_any_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(["/usr/bin/python3", "-c", "import onnxtrain, sys; print(onnxtrain.__file__)"],
                         cwd="/", env=env, capture_output=True, text=True, check=True)
    assert "dist-packages" in out.stdout


def test_big_endian_strided_and_bytes_feeds_are_read_as_values(mlp_model):
    """Feeds that are not native, dense arrays are converted (never read as raw bytes), and bytes
    arrays are strings of those bytes (not their repr)."""
    from onnx import TensorProto, helper
    data, w, b = mlp_model
    sess = ot.InferenceSession(data)
    x = np.random.default_rng(7).standard_normal((3, 4)).astype(np.float32)
    expected = sess.run(["y"], {"x": x})[0]
    np.testing.assert_allclose(expected, np.maximum(x.astype(np.float64) @ w + b, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sess.run(["y"], {"x": x.astype(">f4")})[0], expected)
    wide = np.zeros((3, 8), np.float32)
    wide[:, ::2] = x
    np.testing.assert_array_equal(sess.run(["y"], {"x": wide[:, ::2]})[0], expected)
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "strings",
                              [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out = ot.InferenceSession(model.SerializeToString()).run(None, {"s": np.array([b"ab", b"c"])})[0]
    assert list(out) == ["ab", "c"]
