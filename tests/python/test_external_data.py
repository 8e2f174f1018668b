"""Models whose weights live in external data: read from a path, written with external data by
GradientGraphBuilder.save and `onnxtrain grad --external-data`, checked with onnx's own loader and
checker and against numpy gradients."""
import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot

CLI = os.environ.get("ONNXTRAIN_CLI") or shutil.which("onnxtrain")


def linear_with_loss(rng):
    """loss = mean((x @ W + B - label)^2), W [5, 300] (6000 bytes), B [300]."""
    w = rng.standard_normal((5, 300)).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["y"]),
             helper.make_node("Sub", ["y", "label"], ["d"]), helper.make_node("Mul", ["d", "d"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["loss"], keepdims=0)]
    g = helper.make_graph(
        nodes, "lin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5]),
         helper.make_tensor_value_info("label", TensorProto.FLOAT, ["N", 300])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 300])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, w, b


@pytest.fixture
def external_model(tmp_path):
    """The model saved by onnx itself with every weight in 'weights.bin'."""
    rng = np.random.default_rng(3)
    m, w, b = linear_with_loss(rng)
    src = tmp_path / "src"
    src.mkdir()
    onnx.save_model(m, str(src / "lin.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert all(t.data_location == TensorProto.EXTERNAL for t in onnx.load(str(src / "lin.onnx"),
                                                                         load_external_data=False).graph.initializer)
    return src / "lin.onnx", w, b


def numpy_gradients(x, label, w, b):
    d = x @ w + b - label
    g = 2 * d / d.size
    return x.T @ g, g.sum(axis=0)


def check_gradient_model(path, w, b, expect_external):
    """onnx's checker (path form) and loader; then the gradients it computes, against numpy."""
    onnx.checker.check_model(str(path))
    skeleton = onnx.load(str(path), load_external_data=False)
    locations = {t.name: {e.key: e.value for e in t.external_data}.get("location")
                 for t in skeleton.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    if expect_external:
        assert locations == {"W": path.name + ".data", "B": path.name + ".data"}
        assert sorted(os.listdir(path.parent)) == sorted([path.name, path.name + ".data"])
    else:
        assert locations == {}
        assert os.listdir(path.parent) == [path.name]
    full = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in full.graph.initializer}
    assert inits["W"].tobytes() == w.tobytes() and inits["B"].tobytes() == b.tobytes()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    label = rng.standard_normal((6, 300)).astype(np.float32)
    sess = ot.InferenceSession(str(path))
    gw, gb = sess.run(["W_grad", "B_grad"], {"x": x, "label": label})
    rw, rb = numpy_gradients(x.astype(np.float64), label.astype(np.float64), w.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(gw, rw, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gb, rb, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ["always", "auto", "never"])
def test_gradient_builder_reads_and_writes_external_data(tmp_path, external_model, mode):
    src, w, b = external_model
    builder = ot.GradientGraphBuilder(str(src), {"loss"}, {"W", "B"}, "loss")
    builder.build()
    out = tmp_path / mode
    out.mkdir()
    builder.save(out / "grad.onnx", external_data=mode, size_threshold=1024)
    # The bias (1200 bytes) passes the 1024-byte threshold as well.
    check_gradient_model(out / "grad.onnx", w, b, expect_external=mode == "always")


def test_gradient_builder_save_options_are_checked(tmp_path, external_model):
    src, _, _ = external_model
    builder = ot.GradientGraphBuilder(src, {"loss"}, {"W"}, "loss")
    builder.build()
    with pytest.raises(ValueError, match="sometimes.*auto, always, never"):
        builder.save(tmp_path / "g.onnx", external_data="sometimes")
    with pytest.raises(ValueError, match="'../w.bin'"):
        builder.save(tmp_path / "g.onnx", external_data="always", location="../w.bin")
    assert os.listdir(tmp_path) == ["src"]


def test_gradient_builder_refuses_external_data_given_as_bytes(external_model):
    src, _, _ = external_model
    with pytest.raises(ValueError, match="external data"):
        ot.GradientGraphBuilder(src.read_bytes(), {"loss"}, {"W"}, "loss")


@pytest.mark.parametrize("mode", ["always", None])
def test_cli_grad_reads_and_writes_external_data(tmp_path, external_model, mode):
    src, w, b = external_model
    out = tmp_path / "out"
    out.mkdir()
    # --wrt: the default (every trainable weight) goes through get_train_initializer, which reads
    # the model from bytes only and so refuses external data.
    args = [CLI, "grad", str(src), "--out", str(out / "g.onnx"), "--wrt", "W,B"]
    args += ["--external-data", mode] if mode else []
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    check_gradient_model(out / "g.onnx", w, b, expect_external=mode == "always")


def test_cli_grad_names_a_bad_external_data_mode(tmp_path, external_model):
    src, _, _ = external_model
    r = subprocess.run([CLI, "grad", str(src), "--out", str(tmp_path / "g.onnx"), "--external-data", "maybe"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--external-data" in r.stderr and "maybe" in r.stderr
    assert not (tmp_path / "g.onnx").exists()


def _forward(x, w, b):
    return (x.astype(np.float64) @ w + b).astype(np.float32)


def test_overridden_external_initializer_is_not_read(tmp_path, external_model):
    path, w, b = external_model
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    w2 = np.full_like(w, 0.5)
    so = ot.SessionOptions()
    so.add_initializer("W", ot.OrtValue.ortvalue_from_numpy(w2))
    so.add_initializer("B", ot.OrtValue.ortvalue_from_numpy(b))
    os.remove(path.parent / "weights.bin")  # both weights are replaced: the data file is never opened
    (y,) = ot.InferenceSession(str(path), so).run(["y"], {"x": x, "label": np.zeros((len(x), 300), np.float32)})
    np.testing.assert_allclose(y, _forward(x, w2, b), rtol=1e-5, atol=1e-5)
    bad = ot.SessionOptions()
    bad.add_initializer("W", ot.OrtValue.ortvalue_from_numpy(w2[:2]))
    with pytest.raises(ot.InvalidArgument, match=r"add_initializer\('W'\).*\[2, 300\]"):
        ot.InferenceSession(str(path), bad)
    with pytest.raises(ot.OnnxTrainError, match="weights.bin"):  # without the override the file is needed
        ot.InferenceSession(str(path))


def test_external_files_given_in_memory(tmp_path, external_model):
    path, w, b = external_model
    data = (path.parent / "weights.bin").read_bytes()
    model_bytes = path.read_bytes()
    x = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    so = ot.SessionOptions()
    so.add_external_initializers_from_files_in_memory(["weights.bin"], [np.frombuffer(data, np.uint8)], [len(data)])
    os.remove(path.parent / "weights.bin")
    for source in (model_bytes, str(path)):  # bytes without a folder, and a path whose file is gone
        (y,) = ot.InferenceSession(source, so).run(["y"], {"x": x, "label": np.zeros((len(x), 300), np.float32)})
        np.testing.assert_allclose(y, _forward(x, w, b), rtol=1e-5, atol=1e-5)
    short = ot.SessionOptions()
    short.add_external_initializers_from_files_in_memory(["weights.bin"], [data[:100]], [100])
    with pytest.raises(ot.OnnxTrainError, match="runs past the end of 'weights.bin'"):
        ot.InferenceSession(model_bytes, short)
    with pytest.raises(ot.InvalidArgument, match="length 200 but the buffer holds 100 bytes"):
        ot.SessionOptions().add_external_initializers_from_files_in_memory(["w"], [data[:100]], [200])
    with pytest.raises(ot.InvalidArgument, match="one of each per file"):
        ot.SessionOptions().add_external_initializers_from_files_in_memory(["w", "v"], [data], [1])
    with pytest.raises(ot.OnnxTrainError, match="without a base directory"):
        ot.InferenceSession(model_bytes)


def test_optimized_model_external_initializers_as_configured(tmp_path, external_model):
    path, w, b = external_model
    so = ot.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "opt.bin")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "2000")
    ot.InferenceSession(str(path), so)
    m = onnx.load(str(tmp_path / "opt.onnx"), load_external_data=False)
    where = {t.name: t.data_location for t in m.graph.initializer}
    # W is 6000 bytes: in opt.bin; B is 1200 bytes, under the 2000-byte minimum: inline
    assert where == {"W": TensorProto.EXTERNAL, "B": TensorProto.DEFAULT}
    full = onnx.load(str(tmp_path / "opt.onnx"))  # onnx's own loader reads opt.bin back
    np.testing.assert_array_equal(numpy_helper.to_array([t for t in full.graph.initializer if t.name == "W"][0]), w)
    bad = ot.SessionOptions()
    bad.optimized_model_filepath = str(tmp_path / "bad.onnx")
    bad.add_session_config_entry("session.optimized_model_external_initializers_file_name", "bad.bin")
    bad.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "-1")
    with pytest.raises(ot.InvalidArgument, match="min_size_in_bytes': '-1' is not a non-negative integer"):
        ot.InferenceSession(str(path), bad)
