"""The session memory limit (SessionOptions config entry ``session.memory_limit_bytes``, the CLI's
``--memory-limit``): a plan that needs more is refused when it is built, with an error naming the
limit, the size and the node; hostile graphs whose outputs would take ~1 GiB (Tile, Resize, Pad,
OneHot, Concat of many, Expand, ConstantOfShape, Range, Loop with growing scan outputs) are refused
under a 64 MiB limit before anything that large is allocated, and run without it where they fit."""
import os
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

LIMIT = 64 << 20
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "hostile", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _session(model, limit=LIMIT):
    so = onnxtrain.SessionOptions()
    if limit is not None:
        so.add_session_config_entry("session.memory_limit_bytes", str(limit))
    return onnxtrain.InferenceSession(model, so)


def _vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _hostile():
    """(name, model bytes, feeds): each asks for about 1 GiB (2**28 float32 or more)."""
    x = np.ones((16, 16), np.float32)
    cases = [
        ("Tile", _model([helper.make_node("Tile", ["X", "r"], ["Y"])], [_vi("X"), _vi("r", TensorProto.INT64)],
                        [_vi("Y")]), {"X": x, "r": np.array([1024, 1024], np.int64)}),
        ("Resize", _model([helper.make_node("Resize", ["X", "", "s"], ["Y"], mode="nearest")],
                          [_vi("X"), _vi("s")], [_vi("Y")]), {"X": x, "s": np.array([1024, 1024], np.float32)}),
        ("Pad", _model([helper.make_node("Pad", ["X", "p"], ["Y"])], [_vi("X"), _vi("p", TensorProto.INT64)],
                       [_vi("Y")]), {"X": x, "p": np.array([0, 0, 16384, 16384], np.int64)}),
        ("OneHot", _model([helper.make_node("OneHot", ["i", "d", "v"], ["Y"])],
                          [_vi("i", TensorProto.INT64), _vi("d", TensorProto.INT64), _vi("v")], [_vi("Y")]),
         {"i": np.zeros((1 << 14,), np.int64), "d": np.array(1 << 14, np.int64), "v": np.array([0, 1], np.float32)}),
        ("Concat", _model([helper.make_node("Concat", ["X"] * 4096, ["Y"], axis=0)], [_vi("X")], [_vi("Y")]),
         {"X": np.ones((256, 256), np.float32)}),
        ("Expand", _model([helper.make_node("Expand", ["X", "s"], ["Y"])], [_vi("X"), _vi("s", TensorProto.INT64)],
                          [_vi("Y")]), {"X": x, "s": np.array([1 << 20, 16, 16], np.int64)}),
        ("ConstantOfShape", _model([helper.make_node("ConstantOfShape", ["s"], ["Y"])],
                                   [_vi("s", TensorProto.INT64)], [_vi("Y")]), {"s": np.array([1 << 14, 1 << 14], np.int64)}),
        ("Range", _model([helper.make_node("Range", ["a", "b", "c"], ["Y"])], [_vi("a"), _vi("b"), _vi("c")], [_vi("Y")]),
         {"a": np.array(0, np.float32), "b": np.array(2.0**28, np.float32), "c": np.array(1, np.float32)}),
    ]
    # Loop whose scan output grows by 1 MiB per iteration, 4096 iterations.
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["big"], ["s"])],
                             "body", [_vi("i", TensorProto.INT64, []), _vi("c", TensorProto.BOOL, [])],
                             [_vi("c_out", TensorProto.BOOL, []), _vi("s")])
    loop = _model([helper.make_node("Loop", ["n", ""], ["S"], body=body)], [_vi("n", TensorProto.INT64, []), _vi("big")],
                  [_vi("S")])
    cases.append(("Loop", loop, {"n": np.array(4096, np.int64), "big": np.ones((512, 512), np.float32)}))
    return cases


@pytest.mark.parametrize("name,model,feeds", _hostile(), ids=[c[0] for c in _hostile()])
def test_hostile_graphs_are_refused_under_the_limit(name, model, feeds):
    with pytest.raises(Exception) as e:
        _session(model).run(None, feeds)
    msg = str(e.value)
    assert msg.startswith(f"{name} node"), msg  # names the node
    assert "too large" in msg or f"session's memory limit (session.memory_limit_bytes) of {LIMIT}" in msg, msg


def test_plan_refused_naming_the_node_and_size():
    model = _model([helper.make_node("Tile", ["X", "r"], ["T"], name="big_tile"), helper.make_node("Relu", ["T"], ["Y"])],
                   [_vi("X", F, [256, 256])], [_vi("Y", F, [4096, 256])], [_i64("r", [16, 1])])
    x = np.ones((256, 256), np.float32)
    with pytest.raises(onnxtrain.capi._pybind_state.InvalidArgument) as e:
        _session(model, 1 << 20).run(None, {"X": x})
    msg = str(e.value)
    assert "Tile node 'big_tile'" in msg and "4194304 bytes" in msg, msg  # a [4096, 256] float32 value
    assert "session's memory limit (session.memory_limit_bytes) of 1048576 bytes" in msg, msg
    # Within the limit it runs, and computes the tiling.
    (y,) = _session(model, 64 << 20).run(None, {"X": x})
    np.testing.assert_array_equal(y, np.tile(x, (16, 1)))


def test_arena_over_the_limit_refused_naming_its_largest_block():
    """Eight 256 KiB values alive at once: each fits a 1.5 MiB limit, the plan (over 2 MiB) does not."""
    n = 8
    nodes = [helper.make_node("Relu", [f"X{i}"], [f"r{i}"], name=f"relu{i}") for i in range(n)]
    nodes.append(helper.make_node("Sum", [f"r{i}" for i in range(n)], ["Y"], name="sum"))
    model = _model(nodes, [_vi(f"X{i}", F, [256, 256]) for i in range(n)], [_vi("Y", F, [256, 256])])
    feeds = {f"X{i}": np.full((256, 256), i - 3.5, np.float32) for i in range(n)}
    with pytest.raises(onnxtrain.capi._pybind_state.Fail) as e:
        _session(model, 3 << 19).run(None, feeds)
    msg = str(e.value)
    assert "the execution plan needs" in msg and "session's memory limit (session.memory_limit_bytes) of 1572864" in msg
    assert "largest block is value 'r" in msg and "computed by Relu node 'relu" in msg and "(262144 bytes)" in msg, msg
    (y,) = _session(model, 8 << 20).run(None, feeds)
    np.testing.assert_array_equal(y, np.full((256, 256), sum(max(i - 3.5, 0) for i in range(n)), np.float32))


def test_limit_applies_to_training_sessions():
    w = np.ones((256, 256), np.float32)
    model = _model([helper.make_node("MatMul", ["X", "W"], ["Y"]), helper.make_node("ReduceSum", ["Y"], ["loss"], keepdims=0)],
                   [_vi("X", F, [4096, 256])], [_vi("loss", F, [])], [numpy_helper.from_array(w, "W")])
    p = onnxtrain.TrainingParameters()
    p.loss_output_name = "loss"
    p.weights_to_train = {"W"}
    so = onnxtrain.SessionOptions()
    so.add_session_config_entry("session.memory_limit_bytes", str(1 << 20))
    sess = onnxtrain.TrainingSession(model, p, so)
    with pytest.raises(Exception, match="session's memory limit"):
        sess.run(["loss"], {"X": np.ones((4096, 256), np.float32), "Learning_Rate": np.array([0.1], np.float32)})


@pytest.mark.parametrize("value", ["-1", "1e9", "12abc", ""])
def test_malformed_limit(value):
    model = _model([helper.make_node("Relu", ["X"], ["Y"])], [_vi("X")], [_vi("Y")])
    with pytest.raises(onnxtrain.capi._pybind_state.InvalidArgument, match="session.memory_limit_bytes"):
        _session(model, value)


def test_cli_memory_limit(tmp_path):
    cli = os.environ.get("ONNXTRAIN_CLI", "onnxtrain")
    model = _model([helper.make_node("Tile", ["X", "r"], ["Y"], name="big_tile")], [_vi("X", F, [256, 256])],
                   [_vi("Y", F, [4096, 256])], [_i64("r", [16, 1])])
    (tmp_path / "m.onnx").write_bytes(model)
    np.save(tmp_path / "x.npy", np.ones((256, 256), np.float32))
    run = lambda *a: subprocess.run([cli, "run", str(tmp_path / "m.onnx"), "--input", f"X={tmp_path / 'x.npy'}", *a],
                                    capture_output=True, text=True, timeout=120)
    r = run("--memory-limit", "1M")
    assert r.returncode != 0 and "session's memory limit" in r.stderr and "big_tile" in r.stderr, r.stderr
    assert run("--memory-limit", "64M").returncode == 0
    r = run("--memory-limit", "lots")
    assert r.returncode != 0 and "--memory-limit" in r.stderr, r.stderr


def test_npy_header_claiming_10_to_the_12_elements(tmp_path):
    """A 100-byte .npy whose header claims [10**6, 10**6] float32 is refused before allocating."""
    cli = os.environ.get("ONNXTRAIN_CLI", "onnxtrain")
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }"
    header += b" " * (64 - 10 - len(header) - 1) + b"\n"
    (tmp_path / "bomb.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(16))
    (tmp_path / "m.onnx").write_bytes(_model([helper.make_node("Relu", ["X"], ["Y"])], [_vi("X")], [_vi("Y")]))
    r = subprocess.run([cli, "run", str(tmp_path / "m.onnx"), "--input", f"X={tmp_path / 'bomb.npy'}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "holds 16 bytes, its shape [1000000, 1000000] needs 4000000000000" in r.stderr, r.stderr
