"""Every surface's bad input, table-driven: InferenceSession (onnxruntime's API), TrainingSession /
TrainingParameters, GradientGraphBuilder and OrtModuleGraphBuilder. Each case either works as
numpy says (non-contiguous, read-only, batch 0, NaN feeds) or raises a typed error whose message
names what is wrong. Also: one session used from several Python threads (results equal to a
single-threaded reference), and model / external-data files replaced or truncated between loads."""
import os
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot
import onnxtrain.capi._pybind_state as C
from test_training import data, feed, mlp, session

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)


def _model_proto():
    """y = relu(x @ W + b); outputs y and z = x @ W + b."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["z"]),
             helper.make_node("Relu", ["z"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


MODEL = _model_proto().SerializeToString()


def _reference(x):
    """numpy's y and z for a feed x (float64 arithmetic, compared with a float32 tolerance)."""
    z = x.astype(np.float64) @ W + B
    return np.maximum(z, 0), z


def _huge_view(cols, rows=1 << 38):
    """A float32 array claiming rows x cols elements (terabytes) over `cols` floats of memory."""
    return np.lib.stride_tricks.as_strided(np.zeros(cols, np.float32), shape=(rows, cols), strides=(0, 4))


X = RNG.standard_normal((6, 8)).astype(np.float32)

# ------------------------------------------------------------------------------ InferenceSession
# (name, feed builder, expected error class, message fragments); numpy-compatible cases below.
INFERENCE_ERRORS = [
    ("float64", lambda: {"x": X[:, :4].astype(np.float64)}, ot.InvalidArgument, ["'x'", "double", "float"]),
    ("int32", lambda: {"x": X[:, :4].astype(np.int32)}, ot.InvalidArgument, ["'x'", "int32", "float"]),
    ("object", lambda: {"x": X[:, :4].astype(object)}, ot.InvalidArgument, ["'x'", "string", "float"]),
    ("string", lambda: {"x": np.array([["a"] * 4])}, ot.InvalidArgument, ["'x'", "string", "float"]),
    ("rank 1", lambda: {"x": X[0, :4]}, ot.InvalidArgument, ["'x'", "rank 1", "rank 2"]),
    ("rank 3", lambda: {"x": X[None, :, :4]}, ot.InvalidArgument, ["'x'", "rank 3", "rank 2"]),
    ("wrong dim", lambda: {"x": X[:, :5]}, ot.InvalidArgument, ["'x'", "dimension 5", "axis 1"]),
    ("unknown name", lambda: {"xx": X[:, :4]}, ot.InvalidArgument, ["unknown input 'xx'", "inputs are: x"]),
    ("extra feed", lambda: {"x": X[:, :4], "q": X[:, :4]}, ot.InvalidArgument, ["unknown input 'q'", "inputs are: x"]),
    ("missing feed", lambda: {}, ot.InvalidArgument, ["Required inputs (['x']) are missing from input feed ([])."]),
    ("None", lambda: {"x": None}, ot.InvalidArgument, ["'x'", "must be a tensor, got nothing (None)"]),
    ("python int", lambda: {"x": 3}, ot.InvalidArgument, ["'x'", "int64"]),
    ("huge broadcast view", lambda: {"x": _huge_view(4)}, ot.InvalidArgument,
     ["'x'", "274877906944", "allocation limit"]),
]


@pytest.mark.parametrize("name, make_feed, error, fragments", INFERENCE_ERRORS, ids=[c[0] for c in INFERENCE_ERRORS])
def test_inference_bad_feed(name, make_feed, error, fragments):
    s = ot.InferenceSession(MODEL)
    with pytest.raises(error) as e:
        s.run(None, make_feed())
    for f in fragments:
        assert f in str(e.value)
    # The session is still usable after the error.
    np.testing.assert_allclose(s.run(["y"], {"x": X[:, :4]})[0], _reference(X[:, :4])[0], rtol=1e-5, atol=1e-5)


# (name, feed x): each runs and equals numpy's result on the same values.
INFERENCE_WORKS = [
    ("strided columns", lambda: X[:, ::2]),
    ("transposed", lambda: X[:4, :6].T),
    ("fortran order", lambda: np.asfortranarray(X[:, :4])),
    ("negative strides", lambda: X[::-1, :4]),
    ("big-endian", lambda: X[:, :4].astype(">f4")),
    ("batch 0", lambda: np.zeros((0, 4), np.float32)),
    ("nested list", lambda: X[:, :4].tolist()),
    ("NaN and Inf", lambda: np.array([[np.nan, 1, 2, 3], [np.inf, 0, 0, 0], [-np.inf, 1, 1, 1]], np.float32)),
]


@pytest.mark.parametrize("name, make_x", INFERENCE_WORKS, ids=[c[0] for c in INFERENCE_WORKS])
def test_inference_feed_works_like_numpy(name, make_x):
    s = ot.InferenceSession(MODEL)
    x = make_x()
    xa = np.asarray(x, np.float32)
    y, z = s.run(["y", "z"], {"x": x})
    assert y.shape == z.shape == (xa.shape[0], 3) and y.dtype == np.float32
    ry, rz = _reference(xa)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(z, rz, rtol=1e-5, atol=1e-5)  # NaN where numpy has NaN
        np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(y, s.run(["y"], {"x": np.ascontiguousarray(xa)})[0])


def test_inference_read_only_feed_is_never_written():
    s = ot.InferenceSession(MODEL)
    x = X[:, :4].copy()
    x.flags.writeable = False
    before = x.copy()
    for _ in range(3):
        y = s.run(None, {"x": x})[0]
        y += 1  # the outputs are the caller's to write
    np.testing.assert_array_equal(x, before)
    np.testing.assert_allclose(s.run(["y"], {"x": x})[0], _reference(x)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Relu", "Neg", "Sigmoid", "Identity", "Add"])
def test_inference_in_place_kernels_never_write_a_feed(op):
    """Kernels that may write their output over their input (in-place) leave a fed array alone,
    whether fed as numpy (viewed, not copied), as a read-only array or as an OrtValue over it."""
    g = helper.make_graph([helper.make_node(op, ["X", "X"] if op == "Add" else ["X"], ["Y"]),
                           helper.make_node("Neg", ["Y"], ["Z"])], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    s = ot.InferenceSession(m.SerializeToString())
    x = X[:, :4].copy()
    kept = x.copy()
    ro = x.copy()
    ro.flags.writeable = False
    want = {"Relu": -np.maximum(kept, 0), "Neg": kept, "Sigmoid": -1 / (1 + np.exp(-kept)), "Identity": -kept,
            "Add": -2 * kept}[op]
    np.testing.assert_allclose(s.run(None, {"X": x})[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s.run(None, {"X": ro})[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s.run_with_ort_values(["Z"], {"X": ot.OrtValue.ortvalue_from_numpy(x)})[0].numpy(),
                               want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(x, kept)
    np.testing.assert_array_equal(ro, kept)


@pytest.mark.parametrize("outputs, fragments", [
    (["yy"], ["unknown output 'yy'", "outputs are: y, z"]),
    (["y", "nope"], ["unknown output 'nope'"]),
])
def test_inference_bad_output_names(outputs, fragments):
    s = ot.InferenceSession(MODEL)
    with pytest.raises(ot.InvalidArgument) as e:
        s.run(outputs, {"x": X[:, :4]})
    for f in fragments:
        assert f in str(e.value)


@pytest.mark.parametrize("feeds", [None, [("x", X[:, :4])], "x"], ids=["None", "list of pairs", "str"])
def test_inference_feeds_not_a_dict(feeds):
    with pytest.raises(TypeError, match="input_feed must be a dict"):
        ot.InferenceSession(MODEL).run(None, feeds)


def _bad_model_files(tmp_path):
    """(name, path or object, expected error class, message fragment)."""
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(MODEL[: len(MODEL) // 2])
    text = tmp_path / "text.onnx"
    text.write_bytes(b"this is not an onnx model\n" * 20)
    parses = tmp_path / "parses.onnx"
    parses.write_bytes(b"x" * 500)  # valid protobuf (unknown fields), no model
    return [
        ("missing", str(tmp_path / "nope.onnx"), ot.NoSuchFile, "nope.onnx"),
        ("directory", str(tmp_path), ot.ModelFileError, "not a regular file"),
        ("empty file", str(empty), ot.InvalidProtobuf, "empty (0 bytes)"),
        ("truncated", str(trunc), ot.InvalidProtobuf, "not a valid ONNX ModelProto"),
        ("not ONNX", str(text), ot.InvalidProtobuf, "not a valid ONNX ModelProto"),
        ("protobuf, not ONNX", str(parses), ot.InvalidProtobuf, "parses.onnx' is not an ONNX model"),
        ("empty bytes", b"", ot.InvalidProtobuf, "empty (0 bytes)"),
        ("truncated bytes", MODEL[:40], ot.InvalidProtobuf, "not a valid ONNX ModelProto"),
    ]


BAD_FILE_IDS = ["missing", "directory", "empty file", "truncated", "not ONNX", "protobuf, not ONNX", "empty bytes",
                "truncated bytes"]


@pytest.mark.parametrize("case", range(len(BAD_FILE_IDS)), ids=BAD_FILE_IDS)
def test_bad_model_file_every_loader(tmp_path, case):
    name, model, error, fragment = _bad_model_files(tmp_path)[case]
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    loaders = [("InferenceSession", lambda: ot.InferenceSession(model)),
               ("TrainingSession", lambda: ot.TrainingSession(model, p))]
    if isinstance(model, bytes):  # the builders read paths with Python's open (OSError), bytes natively
        loaders.append(("GradientGraphBuilder", lambda: ot.GradientGraphBuilder(model, {"y"}, {"W"}, "y")))
        loaders.append(("OrtModuleGraphBuilder", lambda: C.OrtModuleGraphBuilder().initialize(model, _omb_config())))
    for what, load in loaders:
        with pytest.raises(error) as e:
            load()
        assert fragment in str(e.value), what


@pytest.mark.parametrize("model", [None, 3, 1.5, [1, 2]], ids=["None", "int", "float", "list"])
def test_model_of_wrong_type(model):
    with pytest.raises(TypeError):
        ot.InferenceSession(model)
    with pytest.raises(TypeError):
        ot.TrainingSession(model, ot.TrainingParameters())
    with pytest.raises(TypeError):
        ot.GradientGraphBuilder(model, {"y"}, {"W"}, "y")


def test_builders_read_missing_or_directory_paths_as_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        ot.GradientGraphBuilder(str(tmp_path / "nope.onnx"), {"y"}, {"W"}, "y")
    with pytest.raises(IsADirectoryError):
        ot.GradientGraphBuilder(str(tmp_path), {"y"}, {"W"}, "y")


# ------------------------------------------------------------------------------- TrainingSession
LOSS_MODEL = ot.add_loss_output(mlp())
XT, YT = data()
LR = np.array([0.01], np.float32)

TRAINING_ERRORS = [
    ("float64 data", lambda: feed(XT.astype(np.float64), YT), ["'X'", "double", "float"]),
    ("int32 label", lambda: feed(XT, YT.astype(np.int32)), ["'label'", "int32", "float"]),
    ("object data", lambda: feed(XT.astype(object), YT), ["'X'", "string"]),
    ("float64 learning rate", lambda: {"X": XT, "label": YT, "Learning_Rate": LR.astype(np.float64)},
     ["'Learning_Rate'", "float32 array of shape [1]"]),
    ("NaN learning rate", lambda: {"X": XT, "label": YT, "Learning_Rate": np.array([np.nan], np.float32)},
     ["learning rate nan", "finite"]),
    ("negative learning rate", lambda: {"X": XT, "label": YT, "Learning_Rate": np.array([-1], np.float32)},
     ["learning rate -1", ">= 0"]),
    ("rank 1", lambda: feed(XT[0], YT), ["'X'", "rank 1", "rank 2"]),
    ("unknown name", lambda: {"X": XT, "lbl": YT, "Learning_Rate": LR}, ["unknown input 'lbl'", "X, label"]),
    ("missing label", lambda: {"X": XT, "Learning_Rate": LR}, ["missing input 'label'"]),
    ("missing learning rate", lambda: {"X": XT, "label": YT}, ["missing input 'Learning_Rate'"]),
    ("None", lambda: feed(None, YT), ["'X'", "must be a tensor, got nothing (None)"]),
    ("list", lambda: feed(XT.tolist(), YT), ["'X'", "must be a tensor, got a sequence"]),
    ("huge broadcast view", lambda: feed(_huge_view(6), YT), ["'X'", "allocation limit"]),
]


@pytest.mark.parametrize("name, make_feed, fragments", TRAINING_ERRORS, ids=[c[0] for c in TRAINING_ERRORS])
def test_training_bad_feed_changes_nothing(name, make_feed, fragments):
    s = session(LOSS_MODEL, "AdamOptimizer")
    s.run(["loss"], feed(XT, YT))
    before, opt_before = s.get_state(), s.get_optimizer_state()
    with pytest.raises(ot.InvalidArgument) as e:
        s.run(["loss"], make_feed())
    for f in fragments:
        assert f in str(e.value)
    after, opt_after = s.get_state(), s.get_optimizer_state()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    for k in opt_before:  # {weight or "shared_optimizer_state": {state name: array}}
        for name in opt_before[k]:
            np.testing.assert_array_equal(opt_before[k][name], opt_after[k][name], err_msg=f"{k}/{name}")


@pytest.mark.parametrize("call", ["run", "eval"])
def test_training_unknown_output_lists_outputs(call):
    s = session(LOSS_MODEL)
    with pytest.raises(ot.InvalidArgument) as e:
        getattr(s, call)(["lss"], feed(XT, YT))
    assert "unknown output 'lss'" in str(e.value) and "loss" in str(e.value).split("lss", 1)[1]


def _numpy_sgd_step(x, y, lr):
    """One SGD step of the tanh MLP of test_training.mlp on the loss sum((Y - label)^2), in float64."""
    st = {k: v.astype(np.float64) for k, v in session(LOSS_MODEL).get_state().items()}
    h = np.tanh(x @ st["W1"] + st["B1"])
    d = 2 * (h @ st["W2"] + st["B2"] - y)
    dh = (d @ st["W2"].T) * (1 - h ** 2)
    return {"W1": st["W1"] - lr * x.T @ dh, "B1": st["B1"] - lr * dh.sum(0),
            "W2": st["W2"] - lr * h.T @ d, "B2": st["B2"] - lr * d.sum(0)}


@pytest.mark.parametrize("name, make_x", [("fortran order", np.asfortranarray), ("strided", lambda a: a[::2]),
                                          ("read-only", lambda a: _read_only(a)), ("batch 0", lambda a: a[:0])])
def test_training_feed_layouts_train_like_numpy(name, make_x):
    s = session(LOSS_MODEL)
    x = make_x(XT)
    y = YT[::2] if name == "strided" else YT[:0] if name == "batch 0" else YT
    kept = np.array(x, copy=True)
    loss = s.run(["loss"], feed(x, y))[0]
    np.testing.assert_array_equal(np.asarray(x), kept)
    want = _numpy_sgd_step(np.asarray(x, np.float64), y.astype(np.float64), 0.01)
    got = s.get_state()
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-5, err_msg=k)
    if name == "batch 0":
        assert float(loss) == 0.0  # an empty sum; weights unchanged (checked above)


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def test_training_nan_feed_gives_nan_loss_and_nan_weights_without_crashing():
    """Documented behaviour: NaN data is not filtered — the loss is NaN and the step writes NaN
    into the weights it touches; the session keeps working (load a checkpoint to recover)."""
    s = session(LOSS_MODEL)
    x = XT.copy()
    x[0, 0] = np.nan
    loss = s.run(["loss"], feed(x, YT))[0]
    assert np.isnan(loss)
    assert np.isnan(s.get_state()["W1"]).any()
    assert np.isnan(s.run(["loss"], feed(XT, YT))[0])  # NaN weights stay NaN, no crash
    assert np.isnan(s.eval(["loss"], {"X": XT, "label": YT})[0])


PARAMETER_ERRORS = [
    ("training_optimizer_name", "Nope", ot.InvalidArgument, "unknown optimizer 'Nope'"),
    ("gradient_accumulation_steps", 0, ot.InvalidArgument, "must be an integer >= 1, got 0"),
    ("gradient_accumulation_steps", "x", ot.InvalidArgument, "must be an integer, got 'x'"),
    ("weights_to_train", {"nope"}, ot.InvalidArgument, "'nope' is not an initializer"),
    ("loss_output_name", "nope", ot.OnnxTrainError, "nope"),
]


@pytest.mark.parametrize("field, value, error, fragment", PARAMETER_ERRORS,
                         ids=[f"{c[0]}={c[1]!r}" for c in PARAMETER_ERRORS])
def test_training_parameters_rejected(field, value, error, fragment):
    def make():
        p = ot.TrainingParameters()
        p.loss_output_name = "loss"
        setattr(p, field, value)
        return ot.TrainingSession(LOSS_MODEL.SerializeToString(), p)

    with pytest.raises(error) as e:
        make()
    assert fragment in str(e.value)


def test_training_parameters_of_wrong_type():
    with pytest.raises(TypeError, match="TrainingParameters"):
        ot.TrainingSession(LOSS_MODEL.SerializeToString(), {"loss_output_name": "loss"})


def test_checkpoint_paths(tmp_path):
    s = session(LOSS_MODEL)
    with pytest.raises(ot.NoSuchFile, match="nope.ckpt"):
        s.load_checkpoint(str(tmp_path / "nope.ckpt"))
    with pytest.raises(ot.ModelFileError, match="not a regular file"):
        s.load_checkpoint(str(tmp_path))
    with pytest.raises(ot.ModelFileError, match="No such file or directory"):
        s.save_checkpoint(str(tmp_path / "no" / "x.ckpt"))
    with pytest.raises(ot.ModelFileError, match="No such file or directory"):
        s.export_model(str(tmp_path / "no" / "x.onnx"))
    (tmp_path / "junk.ckpt").write_bytes(b"junk" * 100)
    with pytest.raises(ot.OnnxTrainError, match="junk.ckpt"):
        s.load_checkpoint(str(tmp_path / "junk.ckpt"))
    assert os.listdir(tmp_path) == ["junk.ckpt"]


# ------------------------------------------------------------------------------------- builders
def _omb_config(inits=("W",)):
    c = C.OrtModuleGraphBuilderConfiguration()
    c.initializer_names = list(inits)
    c.initializer_names_to_train = list(inits)
    c.input_names_require_grad = []
    return c


GGB_ERRORS = [
    ("unknown y", lambda: ot.GradientGraphBuilder(MODEL, {"nope"}, {"W"}, "y"), "y_node_arg_names: 'nope'"),
    ("unknown x", lambda: ot.GradientGraphBuilder(MODEL, {"y"}, {"nope"}, "y"), "x_node_arg_names: 'nope'"),
    ("unknown loss", lambda: ot.GradientGraphBuilder(MODEL, {"y"}, {"W"}, "nope"), "loss_node_arg_name: 'nope'"),
    ("save before build", lambda: ot.GradientGraphBuilder(MODEL, {"y"}, {"W"}, "y"), "call build() before save()"),
]


@pytest.mark.parametrize("name, make, fragment", GGB_ERRORS, ids=[c[0] for c in GGB_ERRORS])
def test_gradient_graph_builder_bad_input(tmp_path, name, make, fragment):
    with pytest.raises(ot.InvalidArgument) as e:
        b = make()
        if name == "save before build":
            b.save(str(tmp_path / "g.onnx"))
        b.build()
    assert fragment in str(e.value)
    assert not os.listdir(tmp_path)


OMB_ERRORS = [
    ("unknown initializer", _omb_config(["nope"]), None, "initializer_names: 'nope' is not an initializer"),
    ("shape of wrong rank", _omb_config(), [[3]], "input 'x' has rank 2, the shape given has 1"),
    ("negative dimension", _omb_config(), [[-5, 4]], "negative dimension -5"),
]


@pytest.mark.parametrize("name, config, shapes, fragment", OMB_ERRORS, ids=[c[0] for c in OMB_ERRORS])
def test_module_graph_builder_bad_input(name, config, shapes, fragment):
    with pytest.raises(ot.InvalidArgument) as e:
        b = C.OrtModuleGraphBuilder()
        b.initialize(MODEL, config)
        b.build(shapes)
    assert fragment in str(e.value)


# -------------------------------------------------------------------------------------- threads
def _in_threads(n, fn):
    """Runs fn(k) in n threads started together; re-raises the first error."""
    errors, barrier = [], threading.Barrier(n)

    def body(k):
        barrier.wait()
        try:
            fn(k)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def test_inference_session_run_from_four_threads():
    """onnxruntime documents InferenceSession.run as thread-safe: 4 threads x 50 runs on one session,
    each with its own batch size, equal the single-threaded results."""
    s = ot.InferenceSession(MODEL)
    xs = [RNG.standard_normal((k + 1, 4)).astype(np.float32) for k in range(4)]
    ref = [s.run(None, {"x": x}) for x in xs]
    got = [[] for _ in xs]

    def work(k):
        for _ in range(50):
            got[k].append(s.run(None, {"x": xs[k]}))

    _in_threads(4, work)
    for k in range(4):
        assert len(got[k]) == 50
        for r in got[k]:
            np.testing.assert_array_equal(r[0], ref[k][0])
            np.testing.assert_array_equal(r[1], ref[k][1])


def test_run_releases_the_gil():
    """While one thread is inside a long run (a 1200x1200 MatMul), another Python thread keeps
    running: it ticks in the middle half of the run, which it could not if the GIL were held."""
    g = helper.make_graph([helper.make_node("MatMul", ["A", "A"], ["Y"])], "mm",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["N", "N"])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", "N"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    s = ot.InferenceSession(m.SerializeToString())
    a = RNG.standard_normal((1200, 1200)).astype(np.float32)
    s.run(None, {"A": a})
    stop, ticks = threading.Event(), []

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    try:
        time.sleep(0.01)
        start = time.perf_counter()
        for _ in range(3):
            s.run(None, {"A": a})
        end = time.perf_counter()
    finally:
        stop.set()
        t.join()
    q = (end - start) / 4
    assert any(start + q < x < end - q for x in ticks)


def test_training_session_steps_from_four_threads():
    """Concurrent train steps on one TrainingSession are serialized: 4 threads x 10 Adam steps on the
    same batch end where 40 single-threaded steps end (Adam's bias correction reads the step count,
    so a lost or doubled step would show), while a fifth thread reads state and saves checkpoints."""
    f = feed(XT, YT)
    ref = session(LOSS_MODEL, "AdamOptimizer")
    ref_losses = sorted(float(ref.run(["loss"], f)[0]) for _ in range(40))
    s = session(LOSS_MODEL, "AdamOptimizer")
    losses, ckpt = [], os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bad_input_{os.getpid()}.ckpt")

    def work(k):
        if k == 4:
            for _ in range(10):
                s.get_state()
                s.save_checkpoint(ckpt)
                s.eval(["loss"], {"X": XT, "label": YT})
            return
        for _ in range(10):
            losses.append(float(s.run(["loss"], f)[0]))

    try:
        _in_threads(5, work)
        assert s._sess.step() == 40
        want, got = ref.get_state(), s.get_state()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        assert sorted(losses) == ref_losses
        other = session(LOSS_MODEL, "AdamOptimizer")
        other.load_checkpoint(ckpt)  # a checkpoint taken between steps loads
        assert 0 <= other._sess.step() <= 40
    finally:
        if os.path.exists(ckpt):
            os.unlink(ckpt)


# ------------------------------------------------------------------------ files replaced on disk
def _external_model(tmp_path, w):
    """A model file whose W is external data in w.bin beside it."""
    m = _model_proto()
    t = numpy_helper.from_array(w, "W")
    (tmp_path / "w.bin").write_bytes(t.raw_data)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", str(w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    m.graph.initializer[0].CopyFrom(t)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return str(path)


def test_model_and_external_data_replaced_between_loads(tmp_path):
    """Files are read with read()/pread() into memory (no mmap), so a file changed after a load
    cannot reach a loaded session; a file truncated before a load is a clear error."""
    x = X[:, :4]
    path = _external_model(tmp_path, W)
    s = ot.InferenceSession(path)
    y0 = s.run(["z"], {"x": x})[0]
    np.testing.assert_allclose(y0, _reference(x)[1], rtol=1e-5, atol=1e-5)
    # Replaced with other weights: the loaded session keeps its own; a new load sees the new ones.
    (tmp_path / "w.bin").write_bytes((2 * W).tobytes())
    np.testing.assert_array_equal(s.run(["z"], {"x": x})[0], y0)
    np.testing.assert_allclose(ot.InferenceSession(path).run(["z"], {"x": x})[0], x @ (2 * W) + B, rtol=1e-5,
                               atol=1e-5)
    # Truncated external data, then a truncated model file.
    with open(tmp_path / "w.bin", "r+b") as fh:
        fh.truncate(10)
    with pytest.raises(ot.InvalidProtobuf, match="w.bin"):
        ot.InferenceSession(path)
    np.testing.assert_array_equal(s.run(["z"], {"x": x})[0], y0)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(ot.InvalidProtobuf, match="w.bin"):
        ot.InferenceSession(path)
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)
    with pytest.raises(ot.InvalidProtobuf, match="m.onnx"):
        ot.InferenceSession(path)


def test_model_file_rewritten_while_loading(tmp_path):
    """A thread rewrites the model file (whole, truncated, other weights) while the main thread loads
    it again and again: every load either fails with a typed error or gives a model whose output is
    one of the two written models' — never a crash."""
    x = X[:, :4]
    path = _external_model(tmp_path, W)
    full = open(path, "rb").read()
    data_a, data_b = W.tobytes(), (2 * W).tobytes()
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            with open(path, "r+b") as fh:  # in place, not renamed: readers may see any state
                fh.truncate(len(full) // (1 + i % 3))
                fh.seek(0)
                fh.write(full)
            with open(tmp_path / "w.bin", "r+b") as fh:
                fh.truncate(i % 48)
                fh.seek(0)
                fh.write(data_a if i % 2 else data_b)

    ok, failed = 0, 0
    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(300):
            try:
                z = ot.InferenceSession(path).run(["z"], {"x": x})[0]
            except ot.OnnxTrainError:
                failed += 1
                continue
            ok += 1
            # Each weight read is one of the two written (a load racing an in-place write may mix
            # them element by element: consistent with the bytes on disk at that moment).
            w = np.linalg.lstsq(x.astype(np.float64), (z - B).astype(np.float64), rcond=None)[0]
            assert (np.isclose(w, W, rtol=1e-4, atol=1e-4) | np.isclose(w, 2 * W, rtol=1e-4, atol=1e-4)).all()
    finally:
        stop.set()
        t.join()
    assert ok + failed == 300


@pytest.mark.parametrize("value", ["abc", "3x", 1.5, "99999999999999999999999"])
def test_add_loss_output_ignore_index_must_be_an_integer(value):
    """ignore_index is read exactly: not truncated (1.5 -> 1, '3x' -> 3) nor a bare 'stoll' error."""
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="ignore_index=.* is not an integer"):
        ot.add_loss_output(m, "cross_entropy", ignore_index=value)
    assert ot.add_loss_output(m, "cross_entropy", ignore_index=-100) is not None
