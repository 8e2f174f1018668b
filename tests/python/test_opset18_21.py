"""Models importing ai.onnx opsets 18 to 21 (built with onnx.helper; onnx 1.12's checker does not know
those versions): the operators redefined there mean what their new version says, checked against
numpy / torch references and onnxruntime-node 1.30 (skipped, with the reason, when node or the
package is absent); gradients against torch autograd or finite differences; malformed new
attributes and what onnxtrain does not implement are refused naming node, attribute, operator and
version."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_NODE = os.environ.get("ONNXTRAIN_ORT_NODE") or "/work/main/.npm/node_modules/onnxruntime-node"
NP_TO_ORT = {np.float32: "float32", np.float64: "float64", np.int64: "int64", np.int32: "int32", np.bool_: "bool",
             np.int8: "int8", np.uint8: "uint8", np.int16: "int16", np.uint16: "uint16", np.uint32: "uint32",
             np.uint64: "uint64"}
ORT_TO_NP = {v: k for k, v in NP_TO_ORT.items()}


def model(nodes, inputs, outputs, opset, inits=(), ir=9):
    """Serialized model: inputs/outputs as (name, elem type, shape) triples."""
    vi = lambda spec: helper.make_tensor_value_info(*spec)  # noqa: E731
    g = helper.make_graph(nodes, "g", [vi(s) for s in inputs], [vi(s) for s in outputs],
                          [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m.SerializeToString()


def run(data, feeds):
    s = onnxtrain.InferenceSession(data)
    return s.run(None, feeds)


def ort_node_available():
    if shutil.which("node") is None:
        return "node (Node.js) is not installed"
    if not os.path.isdir(ORT_NODE):
        return f"onnxruntime-node is not installed at {ORT_NODE}"
    return None


def run_ort_node(tmp_path, data, feeds):
    """Outputs of onnxruntime-node on the serialized model `data` (skips when it is absent)."""
    why = ort_node_available()
    if why:
        pytest.skip(why)
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    specs = []
    for k, (name, v) in enumerate(feeds.items()):
        f = tmp_path / f"in{k}.bin"
        v = np.ascontiguousarray(v)
        f.write_bytes(v.tobytes())
        specs.append({"name": name, "file": str(f), "dtype": NP_TO_ORT[v.dtype.type], "shape": list(v.shape)})
    job = tmp_path / "job.json"
    out_dir = tmp_path / "out"
    out_dir.mkdir(exist_ok=True)
    job.write_text(json.dumps({"model": str(path), "inputs": specs, "out_dir": str(out_dir)}))
    p = subprocess.run(["node", os.path.join(HERE, "ort_node_run.js"), str(job)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "ONNXTRAIN_ORT_NODE": ORT_NODE})
    assert p.returncode == 0, p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][0]
    outs = []
    for o in json.loads(line[len("RESULT "):]):
        dt = ORT_TO_NP[o["dtype"]]
        outs.append(np.fromfile(o["file"], dtype=dt).reshape(o["shape"]))
    return outs


def gradient_model(data, wrt, outputs, portable=False):
    """The gradient model of `data` whose scalar output is 'loss' (exported, opset-17 ONNX; standard
    operators only with `portable`)."""
    b = onnxtrain.GradientGraphBuilder(data, set(outputs), set(wrt), "loss", portable=portable)
    b.build()
    return b.get_model()


F = TensorProto.FLOAT
I64 = TensorProto.INT64
rng = np.random.default_rng(0)


# ---------------------------------------------------------------- Reduce* with axes as input (18)
REDUCE_REF = {
    "ReduceMax": np.max, "ReduceMin": np.min, "ReduceMean": np.mean, "ReduceProd": np.prod,
    "ReduceL1": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
    "ReduceL2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
    "ReduceSumSquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
    "ReduceLogSum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
    "ReduceLogSumExp": lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims)),
}
RUNTIME_AXES = ["ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum"]


@pytest.mark.parametrize("op", sorted(REDUCE_REF))
@pytest.mark.parametrize("opset", [18, 20, 21])
def test_reduce_constant_axes(op, opset):
    x = rng.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    for axes, keep in [([1], 1), ([-1, 0], 0), (None, 1)]:
        ins = ["x"] + (["axes"] if axes is not None else [])
        inits = {"axes": np.array(axes, np.int64)} if axes is not None else {}
        data = model([helper.make_node(op, ins, ["y"], keepdims=keep)], [("x", F, [2, 3, 4])], [("y", F, None)],
                     opset, inits)
        y = run(data, {"x": x})[0]
        ref = REDUCE_REF[op](x.astype(np.float64), axis=tuple(axes) if axes else None, keepdims=bool(keep))
        np.testing.assert_allclose(y, ref, rtol=1e-5, err_msg=f"{op} axes={axes}")


@pytest.mark.parametrize("op", RUNTIME_AXES)
def test_reduce_axes_computed_at_run_time(op):
    x = rng.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    data = model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
                 [("x", F, [2, 3, 4]), ("axes", I64, [None])], [("y", F, None)], 18)
    for axes in ([2], [0, -1]):
        y = run(data, {"x": x, "axes": np.array(axes, np.int64)})[0]
        ref = REDUCE_REF[op](x.astype(np.float64), axis=tuple(axes), keepdims=False)
        np.testing.assert_allclose(y, ref, rtol=1e-5, err_msg=f"{op} axes={axes}")


def test_reduce_noop_with_empty_axes_and_ort_node(tmp_path):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("ReduceMax", ["x", "empty"], ["a"], noop_with_empty_axes=1),
             helper.make_node("ReduceMean", ["x", "empty"], ["b"]),
             helper.make_node("ReduceMin", ["x", "ax"], ["c"], keepdims=0)]
    data = model(nodes, [("x", F, [3, 4])], [("a", F, None), ("b", F, None), ("c", F, None)], 18,
                 {"empty": np.zeros(0, np.int64), "ax": np.array([-1], np.int64)})
    a, b, c = run(data, {"x": x})
    np.testing.assert_array_equal(a, x)
    np.testing.assert_allclose(b, x.mean(keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(c, x.min(axis=-1))
    for got, ref in zip((a, b, c), run_ort_node(tmp_path, data, {"x": x})):
        np.testing.assert_allclose(got, ref, rtol=1e-6)


RUNTIME_AXES_KEPT = {"ReduceMax": lambda t, d, k: torch.amax(t, dim=d, keepdim=k),
                     "ReduceMin": lambda t, d, k: torch.amin(t, dim=d, keepdim=k),
                     "ReduceProd": lambda t, d, k: torch.prod(t, dim=d[0], keepdim=k),
                     "ReduceLogSumExp": lambda t, d, k: torch.logsumexp(t, dim=d, keepdim=k)}


@pytest.mark.parametrize("op", sorted(RUNTIME_AXES_KEPT))
@pytest.mark.parametrize("keep", [0, 1])
def test_reduce_max_min_prod_logsumexp_with_run_time_axes(tmp_path, op, keep):
    """Kept as opset 18 defines them (axes read by the kernel at run time): values against numpy and
    onnxruntime-node; the gradient against torch, and the exported gradient model (raised to opset 18)
    gives the same in onnxruntime-node."""
    x = rng.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    nodes = [helper.make_node(op, ["x", "axes"], ["y"], keepdims=keep),
             helper.make_node("Mul", ["y", "w"], ["yw"]),
             helper.make_node("ReduceSum", ["yw"], ["loss"], keepdims=0)]
    data = model(nodes, [("x", F, [2, 3, 4]), ("axes", I64, [1])], [("y", F, None), ("loss", F, [])], 18,
                 {"w": np.float32(1.5)})
    for axes in ([2], [-2]):
        feeds = {"x": x, "axes": np.array(axes, np.int64)}
        y = run(data, feeds)[0]
        np.testing.assert_allclose(y, REDUCE_REF[op](x.astype(np.float64), axis=tuple(axes), keepdims=bool(keep)),
                                   rtol=1e-5)
        np.testing.assert_allclose(run_ort_node(tmp_path, data, feeds)[0], y, rtol=1e-5)
    feeds = {"x": x, "axes": np.array([1], np.int64)}
    g = gradient_model(data, ["x"], ["loss"], portable=True)
    s = onnxtrain.InferenceSession(g)
    names = [o.name for o in s.get_outputs()]
    got = dict(zip(names, s.run(None, feeds)))["x_grad"]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (RUNTIME_AXES_KEPT[op](xt, [1], bool(keep)) * 1.5).sum().backward()
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-4, atol=1e-6)
    ort = dict(zip(names, run_ort_node(tmp_path, g, feeds)))
    np.testing.assert_allclose(ort["x_grad"], got, rtol=1e-5, atol=1e-6)


def test_reduce_bad_attributes_are_refused():
    data = model([helper.make_node("ReduceMean", ["x"], ["y"], name="r", noop_with_empty_axes=3)],
                 [("x", F, [2, 3])], [("y", F, None)], 18)
    with pytest.raises(onnxtrain.InvalidGraph, match=r"'r'.*noop_with_empty_axes"):
        onnxtrain.InferenceSession(data)
    data = model([helper.make_node("ReduceMean", ["x"], ["y"], name="r", axes=[1])],
                 [("x", F, [2, 3])], [("y", F, None)], 18)
    with pytest.raises(onnxtrain.InvalidGraph, match=r"'r'.*attribute 'axes' does not exist in ReduceMean-18"):
        onnxtrain.InferenceSession(data)


def test_reduce_with_axes_input_trains(tmp_path):
    """ReduceMean/ReduceL2 with constant and run-time axes: gradients against torch, and the exported
    gradient model gives the same in onnxruntime-node."""
    x = rng.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    nodes = [helper.make_node("ReduceL2", ["x", "axes_c"], ["a"], keepdims=0),
             helper.make_node("ReduceMean", ["x", "axes"], ["b"], keepdims=0),
             helper.make_node("ReduceSum", ["a"], ["sa"], keepdims=0),
             helper.make_node("Mul", ["b", "b"], ["bb"]),
             helper.make_node("ReduceSum", ["bb"], ["sb"], keepdims=0),
             helper.make_node("Add", ["sa", "sb"], ["loss"])]
    data = model(nodes, [("x", F, [2, 3, 4]), ("axes", I64, [1])], [("loss", F, [])], 18,
                 {"axes_c": np.array([1], np.int64)})
    g = gradient_model(data, ["x"], ["loss"], portable=True)
    feeds = {"x": x, "axes": np.array([2], np.int64)}
    s = onnxtrain.InferenceSession(g)
    names = [o.name for o in s.get_outputs()]
    got = dict(zip(names, s.run(None, feeds)))["x_grad"]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (torch.linalg.vector_norm(xt, dim=1).sum() + (xt.mean(dim=2) ** 2).sum()).backward()
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-4, atol=1e-6)
    ort = dict(zip(names, run_ort_node(tmp_path, g, feeds)))
    np.testing.assert_allclose(ort["x_grad"], got, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- Split num_outputs (18)
@pytest.mark.parametrize("n,k", [(7, 3), (6, 3), (4, 3), (5, 1)])
def test_split_num_outputs(tmp_path, n, k):
    x = rng.standard_normal((2, n)).astype(np.float32)
    outs = [f"y{i}" for i in range(k)]
    data = model([helper.make_node("Split", ["x"], outs, axis=-1, num_outputs=k)], [("x", F, [2, n])],
                 [(o, F, None) for o in outs], 18)
    got = run(data, {"x": x})
    chunk = -(-n // k)
    ref = [x[:, i * chunk:min((i + 1) * chunk, n)] for i in range(k)]
    for gv, rv in zip(got, ref):
        np.testing.assert_array_equal(gv, rv)
    if k > 1 and n % k and n - chunk * (k - 1) > 0:  # (onnxruntime refuses an empty last chunk)
        for gv, ov in zip(got, run_ort_node(tmp_path, data, {"x": x})):
            np.testing.assert_array_equal(gv, ov)


def test_split_num_outputs_trains():
    x = rng.standard_normal((2, 7)).astype(np.float32)
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3),
             helper.make_node("Mul", ["a", "a"], ["aa"]),
             helper.make_node("Concat", ["aa", "c"], ["ac"], axis=1),
             helper.make_node("ReduceSum", ["ac"], ["loss"], keepdims=0)]
    data = model(nodes, [("x", F, [2, 7])], [("loss", F, [])], 18)
    s = onnxtrain.InferenceSession(gradient_model(data, ["x"], ["loss"]))
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, {"x": x})))["x_grad"]
    ref = np.zeros_like(x)
    ref[:, :3] = 2 * x[:, :3]
    ref[:, 6:] = 1
    np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("attrs,match", [
    (dict(num_outputs=0), "'num_outputs' must be a positive int"),
    (dict(num_outputs=3), "'num_outputs' is 3 but the node has 2 outputs"),
    (dict(), "needs input 'split' or attribute 'num_outputs'"),
])
def test_split_bad_num_outputs(attrs, match):
    data = model([helper.make_node("Split", ["x"], ["a", "b"], name="sp", **attrs)], [("x", F, [4])],
                 [("a", F, None), ("b", F, None)], 18)
    with pytest.raises(onnxtrain.InvalidGraph, match="'sp'.*" + match):
        onnxtrain.InferenceSession(data)


# ---------------------------------------------------------------- Pad with axes (18)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_axes(tmp_path, mode):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    nodes = [helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode=mode)]
    data = model(nodes, [("x", F, [2, 3, 4]), ("pads", I64, [4]), ("axes", I64, [2])], [("y", F, None)], 18)
    feeds = {"x": x, "pads": np.array([1, 2, 0, 1], np.int64), "axes": np.array([-1, 1], np.int64)}
    y = run(data, feeds)[0]
    ref = np.pad(x, [(0, 0), (2, 1), (1, 0)], mode=mode)
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(run_ort_node(tmp_path, data, feeds)[0], y)


@pytest.mark.parametrize("axis", [2, -3, 7])
def test_pad_axes_out_of_range_are_an_error(axis):
    data = model([helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], name="pd")],
                 [("x", F, [2, 3]), ("axes", I64, [1])], [("y", F, None)], 18, {"pads": np.array([1, 1], np.int64)})
    with pytest.raises(onnxtrain.OnnxTrainError, match=r"index|out of range|out of bounds"):
        run(data, {"x": np.zeros((2, 3), np.float32), "axes": np.array([axis], np.int64)})


def test_pad_axes_trains():
    x = rng.standard_normal((2, 3)).astype(np.float32)
    nodes = [helper.make_node("Pad", ["x", "pads", "cv", "axes"], ["p"]),
             helper.make_node("Mul", ["p", "w"], ["pw"]),
             helper.make_node("ReduceSum", ["pw"], ["loss"], keepdims=0)]
    w = rng.standard_normal((2, 6)).astype(np.float32)
    data = model(nodes, [("x", F, [2, 3])], [("loss", F, [])], 18,
                 {"pads": np.array([1, 2], np.int64), "axes": np.array([1], np.int64), "w": w,
                  "cv": np.array(0.5, np.float32)})
    s = onnxtrain.InferenceSession(gradient_model(data, ["x"], ["loss"]))
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, {"x": x})))["x_grad"]
    np.testing.assert_allclose(got, w[:, 1:4], rtol=1e-6)


def test_pad_wrap_is_refused_naming_it():
    data = model([helper.make_node("Pad", ["x", "pads"], ["y"], name="pw", mode="wrap")], [("x", F, [3])],
                 [("y", F, None)], 19, {"pads": np.array([1, 1], np.int64)})
    with pytest.raises(onnxtrain.NotImplemented, match=r"'pw'.*Pad-19.*wrap"):
        onnxtrain.InferenceSession(data)


# ---------------------------------------------------------------- Mish (18), Gelu (20)
@pytest.mark.parametrize("op,opset,attrs,fn", [
    ("Mish", 18, {}, lambda t: torch.nn.functional.mish(t)),
    ("Gelu", 20, {}, lambda t: torch.nn.functional.gelu(t)),
    ("Gelu", 20, {"approximate": "tanh"}, lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
])
def test_activations_and_gradients(tmp_path, op, opset, attrs, fn):
    x = rng.standard_normal((3, 5)).astype(np.float32) * 3
    nodes = [helper.make_node(op, ["x"], ["y"], **attrs), helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    data = model(nodes, [("x", F, [3, 5])], [("y", F, None), ("loss", F, [])], opset)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = fn(xt)
    yt.sum().backward()
    y = run(data, {"x": x})[0]
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_ort_node(tmp_path, data, {"x": x})[0], y, rtol=1e-5, atol=1e-6)
    s = onnxtrain.InferenceSession(gradient_model(data, ["x"], ["y", "loss"]))
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, {"x": x})))["x_grad"]
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_gelu_bad_approximate():
    data = model([helper.make_node("Gelu", ["x"], ["y"], name="ge", approximate="fast")], [("x", F, [3])],
                 [("y", F, None)], 20)
    with pytest.raises(onnxtrain.InvalidGraph, match=r"'ge'.*approximate"):
        onnxtrain.InferenceSession(data)


# ---------------------------------------------------------------- GroupNormalization (18, 21)
def group_norm_ref(x, g, scale, bias, eps, per_group):
    n, c = x.shape[:2]
    xg = x.reshape(n, g, -1).astype(np.float64)
    y = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + eps)
    if per_group:
        y = y * scale.reshape(1, g, 1) + bias.reshape(1, g, 1)
        return y.reshape(x.shape)
    y = y.reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(tmp_path, opset):
    x = rng.standard_normal((2, 6, 3, 2)).astype(np.float32)
    n_scale = 3 if opset == 18 else 6
    scale = rng.standard_normal(n_scale).astype(np.float32)
    bias = rng.standard_normal(n_scale).astype(np.float32)
    nodes = [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=3, epsilon=1e-3),
             helper.make_node("Mul", ["y", "w"], ["yw"]),
             helper.make_node("ReduceSum", ["yw"], ["loss"], keepdims=0)]
    w = rng.standard_normal(x.shape).astype(np.float32)
    data = model(nodes, [("x", F, list(x.shape))], [("y", F, None), ("loss", F, [])], opset,
                 {"scale": scale, "bias": bias, "w": w})
    y = run(data, {"x": x})[0]
    np.testing.assert_allclose(y, group_norm_ref(x, 3, scale, bias, 1e-3, opset == 18), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run_ort_node(tmp_path, data, {"x": x})[0], y, rtol=1e-4, atol=1e-5)
    # Gradients of x, scale and bias against torch (at 21 torch's group_norm has the same meaning).
    s = onnxtrain.InferenceSession(gradient_model(data, ["x", "scale", "bias"], ["loss"]))
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, {"x": x})))
    xt, st, bt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (x, scale, bias))
    if opset == 21:
        yt = torch.nn.functional.group_norm(xt, 3, st, bt, eps=1e-3)
    else:
        xg = xt.reshape(2, 3, -1)
        yt = ((xg - xg.mean(-1, keepdim=True)) / torch.sqrt(xg.var(-1, unbiased=False, keepdim=True) + 1e-3)
              * st.reshape(1, 3, 1) + bt.reshape(1, 3, 1)).reshape(x.shape)
    (yt * torch.tensor(w, dtype=torch.float64)).sum().backward()
    for name, t in (("x_grad", xt), ("scale_grad", st), ("bias_grad", bt)):
        np.testing.assert_allclose(got[name], t.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


def test_group_normalization_bad_num_groups():
    data = model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn", num_groups=0)],
                 [("x", F, [1, 2, 3]), ("s", F, [2]), ("b", F, [2])], [("y", F, None)], 21)
    with pytest.raises(onnxtrain.InvalidGraph, match=r"'gn'.*num_groups"):
        onnxtrain.InferenceSession(data)


# ---------------------------------------------------------------- CenterCropPad (18)
def center_crop_pad_ref(x, shape, axes):
    out = x
    for a, t in zip(axes, shape):
        n = out.shape[a]
        if t > n:
            widths = [(0, 0)] * out.ndim
            widths[a] = ((t - n) // 2, t - n - (t - n) // 2)
            out = np.pad(out, widths)
        elif t < n:
            s = (n - t) // 2
            out = np.take(out, range(s, s + t), axis=a)
    return out


@pytest.mark.parametrize("shape,axes", [([3, 8], None), ([6], [-1]), ([1, 2], [2, 0])])
def test_center_crop_pad(tmp_path, shape, axes):
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    if axes is None:
        shape = shape + [3]
    data = model([helper.make_node("CenterCropPad", ["x", "shape"], ["y"], **attrs)], [("x", F, [4, 5, 3])],
                 [("y", F, None)], 18, {"shape": np.array(shape, np.int64)})
    y = run(data, {"x": x})[0]
    np.testing.assert_array_equal(y, center_crop_pad_ref(x, shape, axes if axes is not None else [0, 1, 2]))
    np.testing.assert_array_equal(run_ort_node(tmp_path, data, {"x": x})[0], y)


def test_center_crop_pad_trains():
    x = rng.standard_normal((4, 2)).astype(np.float32)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    nodes = [helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[0]),
             helper.make_node("Mul", ["y", "w"], ["yw"]), helper.make_node("ReduceSum", ["yw"], ["loss"], keepdims=0)]
    data = model(nodes, [("x", F, [4, 2])], [("loss", F, [])], 18, {"shape": np.array([3], np.int64), "w": w})
    s = onnxtrain.InferenceSession(gradient_model(data, ["x"], ["loss"]))
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, {"x": x})))["x_grad"]
    ref = np.zeros_like(x)
    ref[0:3] = w  # start (4 - 3) // 2 = 0
    np.testing.assert_array_equal(got, ref)


# ---------------------------------------------------------------- other redefined operators
def test_resize18_default_attributes_and_refusals():
    x = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    scales = np.array([1, 1, 2, 2], np.float32)
    data = model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", antialias=0,
                                   keep_aspect_ratio_policy="stretch")],
                 [("x", F, [1, 1, 2, 2])], [("y", F, None)], 19, {"scales": scales})
    np.testing.assert_array_equal(run(data, {"x": x})[0], x.repeat(2, axis=2).repeat(2, axis=3))
    for attrs, match in [(dict(antialias=1), "Resize-19.*antialias 1"),
                         (dict(coordinate_transformation_mode="half_pixel_symmetric"), "half_pixel_symmetric")]:
        data = model([helper.make_node("Resize", ["x", "", "scales"], ["y"], name="rs", mode="linear", **attrs)],
                     [("x", F, [1, 1, 2, 2])], [("y", F, None)], 19, {"scales": scales})
        with pytest.raises(onnxtrain.NotImplemented, match="'rs'.*" + match):
            onnxtrain.InferenceSession(data)


@pytest.mark.parametrize("which", ["scales", "sizes"])
def test_resize18_axes(tmp_path, which):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    vals = np.array([2, 0.5], np.float32) if which == "scales" else np.array([6, 2], np.int64)
    ins = ["x", "", "v"] if which == "scales" else ["x", "", "", "v"]
    data = model([helper.make_node("Resize", ins, ["y"], mode="nearest", axes=[-2, 3])], [("x", F, [1, 2, 3, 4])],
                 [("y", F, None)], 18, {"v": vals})
    y = run(data, {"x": x})[0]
    assert y.shape == (1, 2, 6, 2)
    np.testing.assert_array_equal(y, x.repeat(2, axis=2)[..., ::2])  # nearest, half_pixel, round_prefer_floor
    np.testing.assert_array_equal(y, run_ort_node(tmp_path, data, {"x": x})[0])


def test_scatter_elements_reduction():
    data = model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="sc", reduction="add")],
                 [("x", F, [3])], [("y", F, None)], 18,
                 {"i": np.array([0, 0], np.int64), "u": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(run(data, {"x": np.zeros(3, np.float32)})[0], [3, 0, 0])
    data = model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="sc", reduction="avg")],
                 [("x", F, [3])], [("y", F, None)], 18,
                 {"i": np.array([0], np.int64), "u": np.array([1], np.float32)})
    with pytest.raises(onnxtrain.InvalidGraph, match=r"'sc'.*'reduction' is 'avg'"):
        onnxtrain.InferenceSession(data)


@pytest.mark.parametrize("op,opset,n_in", [("DeformConv", 19, 3), ("DFT", 20, 1), ("GridSample", 20, 2), ("QuantizeLinear", 19, 2),
                                           ("StringSplit", 20, 1), ("ImageDecoder", 20, 1)])
def test_not_implemented_operators_are_refused_naming_op_and_version(op, opset, n_in):
    ins = [f"i{k}" for k in range(n_in)]
    data = model([helper.make_node(op, ins, ["y"], name="nn")], [(i, F, [2]) for i in ins], [("y", F, None)], opset)
    with pytest.raises(onnxtrain.NotImplemented, match=rf"'nn'.*{op}-{opset} \(the model imports ai.onnx opset"):
        onnxtrain.InferenceSession(data)


def test_unsupported_element_types_are_refused_naming_them():
    data = model([helper.make_node("Cast", ["x"], ["y"], name="c8", to=17, saturate=1)], [("x", F, [2])],
                 [("y", 17, None)], 19)
    with pytest.raises(onnxtrain.NotImplemented, match=r"float8e4m3fn"):
        onnxtrain.InferenceSession(data)
    data = model([helper.make_node("Identity", ["x"], ["y"])], [("x", 22, [2])], [("y", 22, None)], 21, ir=10)
    with pytest.raises(onnxtrain.NotImplemented, match=r"value 'x' has element type int4"):
        onnxtrain.InferenceSession(data)


@pytest.mark.parametrize("opset,ir", [(18, 8), (19, 9), (20, 9), (21, 10)])
def test_type_extended_operators_run_at_every_opset(opset, ir):
    """Cast (saturate), Reshape, Shape, Squeeze, Transpose, Identity, Flatten, IsNaN: redefined only for new
    element types, they run for the types onnxtrain has."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["xd"], to=TensorProto.DOUBLE, saturate=1),
             helper.make_node("Shape", ["xd"], ["s"]),
             helper.make_node("Transpose", ["xd"], ["t"], perm=[1, 0]),
             helper.make_node("Reshape", ["t", "s"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"], axis=0),
             helper.make_node("Squeeze", ["f", "zero"], ["q"]),
             helper.make_node("Identity", ["q"], ["y"]),
             helper.make_node("IsNaN", ["y"], ["nan"])]
    data = model(nodes, [("x", F, [2, 3])], [("y", TensorProto.DOUBLE, None), ("nan", TensorProto.BOOL, None)],
                 opset, {"zero": np.array([0], np.int64)}, ir=ir)
    y, nan = run(data, {"x": x})
    np.testing.assert_array_equal(y, x.astype(np.float64).T.reshape(-1))
    assert not nan.any()


def test_opset_22_is_refused():
    data = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, None)], 22)
    with pytest.raises(onnxtrain.NotImplemented, match="opset 22, newer than supported"):
        onnxtrain.InferenceSession(data)


def test_function_overload_is_refused():
    """IR 10's function overloads are refused by name (onnx 1.12's protobuf keeps them as unknown fields);
    without one, the function's opset-21 body is rewritten and runs."""
    body = [helper.make_node("Constant", [], ["ax"], value_ints=[0]),
            helper.make_node("ReduceMax", ["a", "ax"], ["b"], keepdims=0)]  # (constant axes in a function body)
    f = helper.make_function("local", "f", ["a"], ["b"], body, [helper.make_opsetid("", 21)])
    # FunctionProto.overload is field 13 (a string): appended as raw bytes.
    raw = f.SerializeToString() + bytes([13 << 3 | 2, 2]) + b"v2"
    g = helper.make_graph([helper.make_node("f", ["x"], ["y"], domain="local")], "g",
                          [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)])
    m.ir_version = 10
    m.functions.add().ParseFromString(raw)
    with pytest.raises(onnxtrain.NotImplemented, match="function 'f' has an overload name"):
        onnxtrain.InferenceSession(m.SerializeToString())
    del m.functions[:]
    m.functions.add().ParseFromString(f.SerializeToString())
    x = np.array([-1, 2], np.float32)
    np.testing.assert_array_equal(run(m.SerializeToString(), {"x": x})[0], 2)


def test_optimized_model_of_an_opset21_model_loads_in_onnxruntime(tmp_path):
    """InferenceSession's optimized model of an opset-21 model (rewritten to opset 17) is a valid model:
    onnxruntime-node gives on it what it gives on the original, and what onnxtrain gives."""
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], ["g"], num_groups=2),
             helper.make_node("Gelu", ["g"], ["ge"], approximate="tanh"),
             helper.make_node("Pad", ["ge", "pads", "", "pad_axes"], ["p"], mode="edge"),
             helper.make_node("Split", ["p"], ["p0", "p1"], axis=2, num_outputs=2),
             helper.make_node("ReduceMean", ["p0", "axes"], ["m"], keepdims=1),
             helper.make_node("Add", ["p1", "m"], ["y"])]
    inits = {"s": rng.standard_normal(4).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
             "pads": np.array([2, 0], np.int64), "pad_axes": np.array([-1], np.int64),
             "axes": np.array([2], np.int64)}
    data = model(nodes, [("x", F, [2, 4, 5])], [("y", F, None)], 21, inits, ir=10)
    opt = tmp_path / "optimized.onnx"
    so = onnxtrain.SessionOptions()
    so.optimized_model_filepath = str(opt)
    y = onnxtrain.InferenceSession(data, so).run(None, {"x": x})[0]
    assert y.shape == (2, 4, 3)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    original = run_ort_node(tmp_path / "a", data, {"x": x})[0]
    saved = run_ort_node(tmp_path / "b", opt.read_bytes(), {"x": x})[0]
    np.testing.assert_allclose(y, original, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(saved, original, rtol=1e-4, atol=1e-5)


def test_subgraph_nodes_are_rewritten_with_outer_constants():
    """An If branch at opset 18: its ReduceMean reads axes from the outer graph's initializer, its
    Split has num_outputs."""
    then = helper.make_graph(
        [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=0),
         helper.make_node("Split", ["m"], ["a", "b"], num_outputs=2),
         helper.make_node("Sub", ["a", "b"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("ReduceMax", ["x", "axes"], ["t2"], keepdims=0),
                               helper.make_node("Slice", ["t2", "zero", "one"], ["t"])],
                              "else", [], [helper.make_tensor_value_info("t", F, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    data = model(nodes, [("c", TensorProto.BOOL, []), ("x", F, [3, 4])], [("y", F, None)], 18,
                 {"axes": np.array([0], np.int64), "zero": np.array([0], np.int64), "one": np.array([1], np.int64)})
    x = rng.standard_normal((3, 4)).astype(np.float32)
    m = x.mean(axis=0)
    np.testing.assert_allclose(run(data, {"c": np.array(True), "x": x})[0], m[:2] - m[2:], rtol=1e-6)
    np.testing.assert_array_equal(run(data, {"c": np.array(False), "x": x})[0], x.max(axis=0)[:1])


# ---------------------------------------------------------------- operators new at 18, kept at their version
BITWISE = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64, np.int8, np.uint64])
def test_bitwise_operators(tmp_path, dtype):
    """Bitwise{And,Or,Xor} (broadcast) and BitwiseNot against numpy and onnxruntime-node; the optimized
    model is written at opset 18 and gives the same in onnxruntime-node."""
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (2, 3, 4), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, (3, 1), dtype=dtype, endpoint=True)
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype)) if hasattr(helper, "np_dtype_to_tensor_dtype") else \
        {np.int32: TensorProto.INT32, np.uint8: TensorProto.UINT8, np.int64: I64, np.int8: TensorProto.INT8,
         np.uint64: TensorProto.UINT64}[dtype]
    nodes = [helper.make_node(op, ["a", "b"], [op]) for op in sorted(BITWISE)]
    nodes.append(helper.make_node("BitwiseNot", ["a"], ["BitwiseNot"]))
    outs = sorted(BITWISE) + ["BitwiseNot"]
    data = model(nodes, [("a", et, [2, 3, 4]), ("b", et, [3, 1])], [(o, et, None) for o in outs], 18)
    so = onnxtrain.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    got = onnxtrain.InferenceSession(data, so).run(None, {"a": a, "b": b})
    refs = [BITWISE[op](a, b) for op in sorted(BITWISE)] + [np.invert(a)]
    for g, r, name in zip(got, refs, outs):
        assert g.dtype == dtype, name
        np.testing.assert_array_equal(g, r, err_msg=name)
    saved = (tmp_path / "opt.onnx").read_bytes()
    import onnx
    assert [o.version for o in onnx.load_from_string(saved).opset_import if o.domain in ("", "ai.onnx")] == [18]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for outs_ort in (run_ort_node(tmp_path / "a", data, {"a": a, "b": b}),
                     run_ort_node(tmp_path / "b", saved, {"a": a, "b": b})):
        for g, o in zip(got, outs_ort):
            np.testing.assert_array_equal(g, o)


def test_bitwise_on_floats_and_bad_arity_are_refused():
    data = model([helper.make_node("BitwiseAnd", ["x", "x"], ["y"], name="band")], [("x", F, [2])],
                 [("y", F, None)], 18)
    with pytest.raises(onnxtrain.InvalidArgument, match=r"band.*input 0 has element type float; BitwiseAnd takes integer"):
        onnxtrain.InferenceSession(data).run(None, {"x": np.ones(2, np.float32)})
    data = model([helper.make_node("BitwiseNot", ["x", "x"], ["y"], name="bnot")], [("x", I64, [2])],
                 [("y", I64, None)], 18)
    with pytest.raises(onnxtrain.InvalidGraph, match=r"bnot.*BitwiseNot-18 takes 1 input"):
        onnxtrain.InferenceSession(data)


def test_opset18_operators_in_an_opset17_model_are_refused():
    data = model([helper.make_node("BitwiseXor", ["x", "x"], ["y"], name="bx")], [("x", I64, [2])],
                 [("y", I64, None)], 17)
    with pytest.raises(onnxtrain.InvalidGraph, match=r"bx.*BitwiseXor needs ai.onnx opset 18; the model imports opset 17"):
        onnxtrain.InferenceSession(data)


def col2im_model(image, block, attrs, opset=18, n_c_l=(2, 12, 6)):
    nodes = [helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="c2i", **attrs),
             helper.make_node("Mul", ["y", "w"], ["yw"]),
             helper.make_node("ReduceSum", ["yw"], ["loss"], keepdims=0)]
    w = rng.standard_normal([n_c_l[0], n_c_l[1] // int(np.prod(block))] + list(image)).astype(np.float32)
    return model(nodes, [("x", F, list(n_c_l))], [("y", F, None), ("loss", F, [])], opset,
                 {"image": np.array(image, np.int64), "block": np.array(block, np.int64), "w": w}), w


COL2IM_CASES = [  # image, block, dilations, pads (symmetric), strides, L
    ((4, 5), (2, 3), (1, 1), (0, 0), (1, 1), 3 * 3),
    ((6, 5), (2, 2), (2, 1), (1, 1), (2, 3), 3 * 2),
    ((5, 5), (3, 3), (1, 1), (1, 1), (2, 2), 3 * 3),
]


@pytest.mark.parametrize("image,block,dil,pad,stride,L", COL2IM_CASES)
def test_col2im_against_torch_fold_and_gradient(tmp_path, image, block, dil, pad, stride, L):
    """Col2Im-18 is torch.nn.functional.fold: values against torch and onnxruntime-node; the gradient
    (Im2Col, torch's unfold) against torch autograd; the exported gradient model in onnxruntime-node."""
    C = 2
    K = int(np.prod(block))
    attrs = {"dilations": list(dil), "pads": list(pad) * 2, "strides": list(stride)}
    data, w = col2im_model(image, block, attrs, n_c_l=(2, C * K, L))
    x = rng.standard_normal((2, C * K, L)).astype(np.float32)
    y, loss = run(data, {"x": x})
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = torch.nn.functional.fold(xt, image, block, dilation=dil, padding=pad, stride=stride)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run_ort_node(tmp_path, data, {"x": x})[0], y, rtol=1e-5, atol=1e-5)
    (yt * torch.tensor(w, dtype=torch.float64)).sum().backward()
    for portable in (False, True):
        g = gradient_model(data, ["x"], ["loss"], portable=portable)
        s = onnxtrain.InferenceSession(g)
        names = [o.name for o in s.get_outputs()]
        got = dict(zip(names, s.run(None, {"x": x})))["x_grad"]
        np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    ort = dict(zip(names, run_ort_node(tmp_path, g, {"x": x})))
    np.testing.assert_allclose(ort["x_grad"], got, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs,image,block,match", [
    ({"strides": [1, 0]}, (4, 5), (2, 3), r"'c2i'.*attribute 'strides' must hold positive values"),
    ({"dilations": [1]}, (4, 5), (2, 3), r"'c2i'.*attribute 'dilations' has 1 values for 2 spatial dims"),
    ({"pads": [0, 0]}, (4, 5), (2, 3), r"'c2i'.*attribute 'pads' has 2 values for 2 spatial dims \(expected 4\)"),
    ({"pads": [0, -1, 0, 0]}, (4, 5), (2, 3), r"'c2i'.*attribute 'pads' must hold non-negative"),
    ({}, (4, 0), (2, 3), r"'c2i'.*input 'image_shape' must hold one positive size"),
    ({}, (4, 5), (6,), r"'c2i'.*image_shape has 2 values and block_shape 1"),
])
def test_col2im_malformed_nodes_are_refused(attrs, image, block, match):
    data, _ = col2im_model(image, block, attrs)
    with pytest.raises(onnxtrain.InvalidGraph, match=match):
        onnxtrain.InferenceSession(data)


def scatter_ref(x, idx, u, axis, fn):
    y = x.copy()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[axis] = idx[pos]
        y[tuple(tgt)] = fn(y[tuple(tgt)], u[pos])
    return y


@pytest.mark.parametrize("red", ["max", "min"])
def test_scatter_max_min_values_and_gradients(tmp_path, red):
    """ScatterElements / ScatterND-18 with reduction max, min: values against numpy and onnxruntime-node;
    gradients (ties included) against torch's scatter_reduce amax / amin with include_self."""
    fn = np.maximum if red == "max" else np.minimum
    x = np.round(rng.standard_normal((3, 4)), 1).astype(np.float32)
    idx = np.array([[1, 0, 2, 1], [1, 2, 2, 0]], np.int64)
    u = np.round(rng.standard_normal((2, 4)), 1).astype(np.float32)
    u[1, 0] = u[0, 0] = max(u[0, 0], x[1, 0]) if red == "max" else min(u[0, 0], x[1, 0])  # a three-way tie
    nd_idx = np.array([[2], [0], [2]], np.int64)
    nd_u = np.round(rng.standard_normal((3, 4)), 1).astype(np.float32)
    nodes = [helper.make_node("ScatterElements", ["x", "i", "u"], ["a"], axis=0, reduction=red),
             helper.make_node("ScatterND", ["x", "ni", "nu"], ["b"], reduction=red),
             helper.make_node("Mul", ["a", "w"], ["aw"]), helper.make_node("Mul", ["b", "w"], ["bw"]),
             helper.make_node("Add", ["aw", "bw"], ["s"]),
             helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0)]
    w = rng.standard_normal((3, 4)).astype(np.float32)
    data = model(nodes, [("x", F, [3, 4]), ("u", F, [2, 4]), ("nu", F, [3, 4])],
                 [("a", F, None), ("b", F, None), ("loss", F, [])], 18,
                 {"i": idx, "ni": nd_idx, "w": w})
    feeds = {"x": x, "u": u, "nu": nd_u}
    a, b, _ = run(data, feeds)
    np.testing.assert_array_equal(a, scatter_ref(x, idx, u, 0, fn))
    ref_b = x.copy()
    for k in range(3):
        ref_b[nd_idx[k, 0]] = fn(ref_b[nd_idx[k, 0]], nd_u[k])
    np.testing.assert_array_equal(b, ref_b)
    for got, o in zip((a, b), run_ort_node(tmp_path, data, feeds)):
        np.testing.assert_array_equal(got, o)
    g = gradient_model(data, ["x", "u", "nu"], ["loss"], portable=True)
    s = onnxtrain.InferenceSession(g)
    names = [o.name for o in s.get_outputs()]
    got = dict(zip(names, s.run(None, feeds)))
    tt = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in feeds.items()}
    how = "amax" if red == "max" else "amin"
    ta = tt["x"].scatter_reduce(0, torch.tensor(idx), tt["u"], how, include_self=True)
    nd_full = torch.tensor(np.repeat(nd_idx, 4, axis=1))  # ScatterND of rows: a scatter_reduce along axis 0
    tb = tt["x"].scatter_reduce(0, nd_full, tt["nu"], how, include_self=True)
    ((ta + tb) * torch.tensor(w, dtype=torch.float64)).sum().backward()
    for k in ("x", "u", "nu"):
        np.testing.assert_allclose(got[k + "_grad"], tt[k].grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    ort = dict(zip(names, run_ort_node(tmp_path, g, feeds)))
    for k in ("x", "u", "nu"):
        np.testing.assert_allclose(ort[k + "_grad"], got[k + "_grad"], rtol=1e-5, atol=1e-6)


def test_exported_models_with_opset18_operators_load_in_onnxruntime(tmp_path):
    """A model mixing the kept opset-18 operators with lowered ones (ReduceMean's constant axes became an
    attribute at load): the optimized model is written at opset 18 (the axes an input again), and
    onnxruntime-node gives on it what onnxtrain and onnxruntime give on the original."""
    nodes = [helper.make_node("Col2Im", ["x", "image", "block"], ["c"]),
             helper.make_node("ReduceMean", ["c", "axes_c"], ["m"], keepdims=1),
             helper.make_node("ReduceMax", ["c", "axes"], ["mx"], keepdims=1),
             helper.make_node("ScatterElements", ["mx", "i", "upd"], ["s"], axis=0, reduction="max"),
             helper.make_node("Add", ["s", "m"], ["sm"]),
             helper.make_node("Cast", ["sm"], ["si"], to=TensorProto.INT32),
             helper.make_node("BitwiseOr", ["si", "one"], ["y"])]
    inits = {"image": np.array([3, 4], np.int64), "block": np.array([2, 2], np.int64),
             "axes_c": np.array([1], np.int64), "i": np.zeros((1, 1, 1, 4), np.int64),
             "upd": np.array([-5, 0, 5, 50], np.float32).reshape(1, 1, 1, 4),
             "one": np.array(1, np.int32)}
    data = model(nodes, [("x", F, [2, 8, 6]), ("axes", I64, [1])], [("y", TensorProto.INT32, None)], 18, inits)
    x = (rng.standard_normal((2, 8, 6)) * 10).astype(np.float32)
    feeds = {"x": x, "axes": np.array([2], np.int64)}
    so = onnxtrain.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    y = onnxtrain.InferenceSession(data, so).run(None, feeds)[0]
    import onnx
    saved = onnx.load(str(tmp_path / "opt.onnx"))
    assert [o.version for o in saved.opset_import if o.domain in ("", "ai.onnx")] == [18]
    assert all(a.name != "axes" for n in saved.graph.node if n.op_type.startswith("Reduce") for a in n.attribute)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    np.testing.assert_array_equal(run_ort_node(tmp_path / "a", data, feeds)[0], y)
    np.testing.assert_array_equal(run_ort_node(tmp_path / "b", saved.SerializeToString(), feeds)[0], y)
    # Reloaded by onnxtrain: the same again.
    np.testing.assert_array_equal(run(saved.SerializeToString(), feeds)[0], y)


def test_opset18_operators_in_subgraphs_export_at_18(tmp_path):
    """An If branch holding BitwiseAnd and a lowered ReduceMax (constant axes from the outer graph): the
    optimized model imports opset 18, the branch's ReduceMax takes its axes as input again, and
    onnxruntime-node gives what onnxtrain gives."""
    then = helper.make_graph([helper.make_node("BitwiseAnd", ["a", "mask"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", I64, None)])
    other = helper.make_graph([helper.make_node("ReduceMax", ["a", "axes"], ["r"], keepdims=1),
                               helper.make_node("Sub", ["a", "r"], ["t"])], "else", [],
                              [helper.make_tensor_value_info("t", I64, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    data = model(nodes, [("c", TensorProto.BOOL, []), ("a", I64, [2, 3])], [("y", I64, None)], 18,
                 {"mask": np.array(6, np.int64), "axes": np.array([1], np.int64)})
    a = np.array([[5, 7, 12], [-3, 2, 9]], np.int64)
    so = onnxtrain.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    s = onnxtrain.InferenceSession(data, so)
    import onnx
    saved = onnx.load(str(tmp_path / "opt.onnx"))
    assert [o.version for o in saved.opset_import if o.domain in ("", "ai.onnx")] == [18]
    for k, c in enumerate((True, False)):
        feeds = {"c": np.array(c), "a": a}
        y = s.run(None, feeds)[0]
        np.testing.assert_array_equal(y, a & 6 if c else a - a.max(axis=1, keepdims=True))
        (tmp_path / str(k)).mkdir()
        np.testing.assert_array_equal(run_ort_node(tmp_path / str(k), saved.SerializeToString(), feeds)[0], y)


def test_col2im_with_image_shape_computed_at_run_time(tmp_path):
    """image_shape and block_shape as graph inputs: the output shape is known only while running."""
    data = model([helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=[1, 2])],
                 [("x", F, [1, 8, 6]), ("image", I64, [2]), ("block", I64, [2])], [("y", F, None)], 18)
    x = rng.standard_normal((1, 8, 6)).astype(np.float32)
    feeds = {"x": x, "image": np.array([4, 5], np.int64), "block": np.array([2, 2], np.int64)}
    y = run(data, feeds)[0]
    ref = torch.nn.functional.fold(torch.tensor(x), (4, 5), (2, 2), stride=(1, 2)).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(run_ort_node(tmp_path, data, feeds)[0], y, rtol=1e-6, atol=1e-6)
    with pytest.raises(onnxtrain.InvalidArgument, match=r"number of blocks"):
        run(data, {**feeds, "image": np.array([5, 5], np.int64)})


# ---------------------------------------------------------------- AffineGrid (20), rewritten
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 1, 4), (1, 2, 1, 3)])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size_input", [False, True])
def test_affine_grid(tmp_path, size, align, size_input):
    """AffineGrid-20 (2-D, 3-D; size a constant or, with theta's shape declared, an input): values against
    torch.nn.functional.affine_grid and onnxruntime-node, theta's gradient against torch autograd."""
    nd = len(size) - 2
    theta = rng.standard_normal((size[0], nd, nd + 1)).astype(np.float32)
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align),
             helper.make_node("Mul", ["grid", "w"], ["gw"]),
             helper.make_node("ReduceSum", ["gw"], ["loss"], keepdims=0)]
    w = rng.standard_normal(list(size[:1]) + list(size[2:]) + [nd]).astype(np.float32)
    inputs = [("theta", F, list(theta.shape))] + ([("size", I64, [len(size)])] if size_input else [])
    inits = {"w": w} if size_input else {"w": w, "size": np.array(size, np.int64)}
    data = model(nodes, inputs, [("grid", F, None), ("loss", F, [])], 20, inits)
    feeds = {"theta": theta, **({"size": np.array(size, np.int64)} if size_input else {})}
    grid = run(data, feeds)[0]
    tt = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    ref = torch.nn.functional.affine_grid(tt, list(size), align_corners=bool(align))
    np.testing.assert_allclose(grid, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    if not (align and 1 in size[2:]):  # a single point with align_corners: torch's 0 here, onnxruntime differs
        np.testing.assert_allclose(run_ort_node(tmp_path, data, feeds)[0], grid, rtol=1e-5, atol=1e-6)
    (ref * torch.tensor(w, dtype=torch.float64)).sum().backward()
    g = gradient_model(data, ["theta"], ["loss"], portable=True)
    s = onnxtrain.InferenceSession(g)
    names = [o.name for o in s.get_outputs()]
    np.testing.assert_allclose(dict(zip(names, s.run(None, feeds)))["theta_grad"], tt.grad.numpy(), rtol=1e-4,
                               atol=1e-5)


def test_affine_grid_refusals():
    def data(attrs, size=None, theta_shape=(1, 2, 3)):
        inits = {"size": np.array(size, np.int64)} if size is not None else {}
        inputs = [("theta", F, list(theta_shape) if theta_shape else None)] + ([] if size is not None else [("size", I64, [4])])
        return model([helper.make_node("AffineGrid", ["theta", "size"], ["g"], name="ag", **attrs)], inputs,
                     [("g", F, None)], 20, inits)
    with pytest.raises(onnxtrain.InvalidGraph, match=r"'ag'.*'align_corners' must be 0 or 1"):
        onnxtrain.InferenceSession(data({"align_corners": 2}, (1, 1, 2, 2)))
    with pytest.raises(onnxtrain.InvalidGraph, match=r"'ag'.*'size' must be \[N, C, H, W\] or"):
        onnxtrain.InferenceSession(data({}, (1, 1, 2)))
    with pytest.raises(onnxtrain.NotImplemented, match=r"'ag'.*AffineGrid-20.*'size' computed at run time"):
        onnxtrain.InferenceSession(data({}, None, None))


def test_training_artifacts_of_a_model_with_opset18_operators(tmp_path):
    """generate_artifacts on an opset-18 model holding Col2Im and a ScatterElements max: the training and
    eval models are written at opset 18; onnxruntime-node runs the eval model as onnxtrain runs the
    original."""
    import onnx
    from onnxtrain.training import artifacts
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Col2Im", ["xw", "image", "block"], ["c"]),
             helper.make_node("ScatterElements", ["c", "i", "u"], ["y"], axis=3, reduction="max")]
    inits = {"w": rng.standard_normal((6, 6)).astype(np.float32), "image": np.array([3, 4], np.int64),
             "block": np.array([2, 2], np.int64), "i": np.zeros((1, 2, 2, 1), np.int64),
             "u": np.full((1, 2, 2, 1), 0.5, np.float32)}
    data = model(nodes, [("x", F, [1, 8, 6])], [("y", F, [1, 2, 3, 4])], 18, inits)
    artifacts.generate_artifacts(onnx.load_from_string(data), requires_grad=["w"], loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(tmp_path))
    for name in ("training_model.onnx", "eval_model.onnx"):
        m = onnx.load(str(tmp_path / name))
        assert [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] == [18], name
    x = rng.standard_normal((1, 8, 6)).astype(np.float32)
    target = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    y = run(data, {"x": x})[0]
    ev = onnx.load(str(tmp_path / "eval_model.onnx"))
    known = {"x": x, "target": target, "w": inits["w"]}
    feeds = {i.name: known[i.name] for i in ev.graph.input if i.name in known}
    names = [o.name for o in ev.graph.output]
    ort = dict(zip(names, run_ort_node(tmp_path, ev.SerializeToString(), feeds)))
    assert any(np.allclose(v, np.mean((y - target) ** 2), rtol=1e-5) for v in ort.values()), ort
