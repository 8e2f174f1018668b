"""onnxruntime's checkpoint format ("ODTC", FlatBuffers, version 2) against references independent of
onnxtrain's code: a reader and a writer written here from the format's published layout (field
slots in onnxruntime's order, with the ``flatbuffers`` package's low-level table API), and
onnxruntime-web 1.19.2 itself (onnxruntime's on-device training compiled to WebAssembly, run under
Node 20), which loads a checkpoint written by onnxtrain, trains on it and applies AdamW with the
optimizer state the checkpoint carries."""
import json
import os
import shutil
import subprocess

import flatbuffers
import numpy as np
import pytest
from flatbuffers import number_types as nt
from onnx import TensorProto, helper, numpy_helper

from onnxtrain import _C
from onnxtrain.training.api import CheckpointState

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Field slots (declaration order) of the tables, as onnxruntime's schema orders them.
CHECKPOINT = dict(version=0, module_state=1, optimizer_groups=2, property_bag=3)
MODULE = dict(requires_grad_params=0, frozen_params=1, is_nominal_state=2, has_external_data=3)
GROUP = dict(group_name=0, step=1, initial_learning_rate=2, optimizer_states=3)
PARAM_STATE = dict(param_name=0, momentums=1)
BAG = dict(ints=0, floats=1, strings=2)
TENSOR = dict(name=0, doc_string=1, dims=2, data_type=3, raw_data=4, string_data=5, external_data_offset=6)


class Table:
    """Reads one FlatBuffers table by field slot."""

    def __init__(self, buf, pos):
        self.t = flatbuffers.table.Table(buf, pos)

    def _o(self, slot):
        return self.t.Offset(4 + 2 * slot)

    def scalar(self, slot, flags, default=0):
        o = self._o(slot)
        return self.t.Get(flags, o + self.t.Pos) if o else default

    def string(self, slot):
        o = self._o(slot)
        return self.t.String(o + self.t.Pos).decode() if o else None

    def table(self, slot):
        o = self._o(slot)
        return Table(self.t.Bytes, self.t.Indirect(o + self.t.Pos)) if o else None

    def tables(self, slot):
        o = self._o(slot)
        if not o:
            return []
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        return [Table(self.t.Bytes, self.t.Indirect(start + 4 * i)) for i in range(n)]

    def numbers(self, slot, flags):
        o = self._o(slot)
        return list(self.t.GetVectorAsNumpy(flags, o)) if o else []

    def bytes(self, slot):
        o = self._o(slot)
        if not o:
            return b""
        start = self.t.Vector(o)
        return bytes(self.t.Bytes[start:start + self.t.VectorLen(o)])


def read_tensor(t, sidecar=None):
    name = t.string(TENSOR["name"])
    dtype = t.scalar(TENSOR["data_type"], nt.Int32Flags)
    dims = [int(d) for d in t.numbers(TENSOR["dims"], nt.Int64Flags)]
    np_type = {1: np.float32, 7: np.int64, 11: np.float64}[dtype]
    offset = t.scalar(TENSOR["external_data_offset"], nt.Int64Flags, -1)
    if offset >= 0:
        n = int(np.prod(dims)) * np.dtype(np_type).itemsize
        raw = sidecar[offset:offset + n]
    else:
        raw = t.bytes(TENSOR["raw_data"])
    return name, np.frombuffer(raw, dtype=np_type).reshape(dims), offset


def read_checkpoint(path):
    """The checkpoint's content, read by slot (no onnxtrain code)."""
    buf = open(path, "rb").read()
    assert buf[4:8] == b"ODTC"
    root = Table(buf, flatbuffers.encode.Get(nt.UOffsetTFlags.packer_type, buf, 0))
    sidecar = open(path + ".data", "rb").read() if os.path.exists(path + ".data") else None
    m = root.table(CHECKPOINT["module_state"])
    out = {"version": root.scalar(CHECKPOINT["version"], nt.Int32Flags),
           "nominal": bool(m.scalar(MODULE["is_nominal_state"], nt.BoolFlags)),
           "external": bool(m.scalar(MODULE["has_external_data"], nt.BoolFlags)),
           "trainable": [read_tensor(t, sidecar) for t in m.tables(MODULE["requires_grad_params"])],
           "frozen": [read_tensor(t, sidecar) for t in m.tables(MODULE["frozen_params"])], "groups": {}}
    for g in root.tables(CHECKPOINT["optimizer_groups"]):
        states = {}
        for ps in g.tables(GROUP["optimizer_states"]):
            states[ps.string(PARAM_STATE["param_name"])] = {
                n: a for n, a, _ in (read_tensor(t, sidecar) for t in ps.tables(PARAM_STATE["momentums"]))}
        out["groups"][g.string(GROUP["group_name"])] = (
            g.scalar(GROUP["step"], nt.Int64Flags), g.scalar(GROUP["initial_learning_rate"], nt.Float32Flags), states)
    bag = root.table(CHECKPOINT["property_bag"])
    out["ints"] = {p.string(0): p.scalar(1, nt.Int64Flags) for p in bag.tables(BAG["ints"])}
    out["floats"] = {p.string(0): p.scalar(1, nt.Float32Flags) for p in bag.tables(BAG["floats"])}
    out["strings"] = {p.string(0): p.string(1) for p in bag.tables(BAG["strings"])}
    return out


def write_checkpoint(path, trainable, frozen, step, initial_lr, momentums, ints, floats, strings, version=2):
    """An ODTC file built slot by slot (no onnxtrain code)."""
    b = flatbuffers.Builder(1024)

    def vector(offsets):
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    def tensor(name, arr):
        n = b.CreateString(name)
        dims = b.CreateNumpyVector(np.array(arr.shape, dtype=np.int64))
        raw = b.CreateByteVector(np.ascontiguousarray(arr).tobytes())
        b.StartObject(7)
        b.PrependUOffsetTRelativeSlot(TENSOR["name"], n, 0)
        b.PrependUOffsetTRelativeSlot(TENSOR["dims"], dims, 0)
        b.PrependInt32Slot(TENSOR["data_type"], {np.float32: 1, np.float64: 11}[arr.dtype.type], 0)
        b.PrependUOffsetTRelativeSlot(TENSOR["raw_data"], raw, 0)
        return b.EndObject()

    def named(make, items):
        return vector([make(k, v) for k, v in sorted(items.items())])

    t_vec, f_vec = named(tensor, trainable), named(tensor, frozen)
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(MODULE["requires_grad_params"], t_vec, 0)
    b.PrependUOffsetTRelativeSlot(MODULE["frozen_params"], f_vec, 0)
    module = b.EndObject()
    states = []
    for pname, named_states in sorted(momentums.items()):
        pn, mv = b.CreateString(pname), named(tensor, named_states)
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(PARAM_STATE["param_name"], pn, 0)
        b.PrependUOffsetTRelativeSlot(PARAM_STATE["momentums"], mv, 0)
        states.append(b.EndObject())
    sv, gn = vector(states), b.CreateString("group0")
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(GROUP["group_name"], gn, 0)
    b.PrependInt64Slot(GROUP["step"], step, 0)
    b.PrependFloat32Slot(GROUP["initial_learning_rate"], initial_lr, 0.0)
    b.PrependUOffsetTRelativeSlot(GROUP["optimizer_states"], sv, 0)
    groups = vector([b.EndObject()])

    def prop(kind):
        def make(name, value):
            n = b.CreateString(name)
            v = b.CreateString(value) if kind == "s" else None
            b.StartObject(2)
            b.PrependUOffsetTRelativeSlot(0, n, 0)
            if kind == "i":
                b.PrependInt64Slot(1, value, 0)
            elif kind == "f":
                b.PrependFloat32Slot(1, value, 0.0)
            else:
                b.PrependUOffsetTRelativeSlot(1, v, 0)
            return b.EndObject()
        return make

    iv, fv, sv2 = named(prop("i"), ints), named(prop("f"), floats), named(prop("s"), strings)
    b.StartObject(3)
    b.PrependUOffsetTRelativeSlot(BAG["ints"], iv, 0)
    b.PrependUOffsetTRelativeSlot(BAG["floats"], fv, 0)
    b.PrependUOffsetTRelativeSlot(BAG["strings"], sv2, 0)
    bag = b.EndObject()
    b.StartObject(4)
    b.PrependInt32Slot(CHECKPOINT["version"], version, 0)
    b.PrependUOffsetTRelativeSlot(CHECKPOINT["module_state"], module, 0)
    b.PrependUOffsetTRelativeSlot(CHECKPOINT["optimizer_groups"], groups, 0)
    b.PrependUOffsetTRelativeSlot(CHECKPOINT["property_bag"], bag, 0)
    b.Finish(b.EndObject(), file_identifier=b"ODTC")
    with open(path, "wb") as f:
        f.write(b.Output())


def linear_state(rng, step=0):
    """W[3,2], b[2] trainable, a frozen float64 statistic, AdamW moments, properties."""
    s = _C.CheckpointState()
    w = rng.standard_normal((3, 2)).astype(np.float32)
    bias = rng.standard_normal(2).astype(np.float32)
    s.add_parameter("W", w)
    s.add_parameter("b", bias)
    s.add_parameter("stat", np.array([0.5, 1.5]), False)
    s.add_property("epoch", 4)
    s.add_property("best", 0.25)
    s.add_property("tag", "run-7")
    return s, w, bias


def test_reader_written_here_reads_onnxtrain_files(tmp_path):
    s, w, bias = linear_state(np.random.default_rng(0))
    path = str(tmp_path / "ckpt")
    s.save(path)
    c = read_checkpoint(path)
    assert c["version"] == 2 and not c["nominal"] and not c["external"]
    assert [n for n, _, _ in c["trainable"]] == ["W", "b"]  # sorted by name
    np.testing.assert_array_equal(c["trainable"][0][1], w)
    np.testing.assert_array_equal(c["trainable"][1][1], bias)
    assert c["frozen"][0][0] == "stat" and c["frozen"][0][1].dtype == np.float64
    assert c["groups"] == {}
    assert c["ints"] == {"epoch": 4} and c["floats"] == {"best": 0.25} and c["strings"] == {"tag": "run-7"}


def test_reader_written_here_reads_external_data_and_nominal_states(tmp_path):
    s, w, bias = linear_state(np.random.default_rng(1))
    path = str(tmp_path / "ckpt")
    s.save(path, False, 1)  # every tensor's bytes to ckpt.data
    c = read_checkpoint(path)
    assert c["external"]
    offsets = [o for _, _, o in c["trainable"] + c["frozen"]]
    assert all(o >= 0 for o in offsets)
    assert c["frozen"][0][2] % 8 == 0, "8-byte elements sit at multiples of 8"
    np.testing.assert_array_equal(c["trainable"][0][1], w)
    np.testing.assert_array_equal(c["frozen"][0][1], [0.5, 1.5])
    s.nominal = True
    s.save(str(tmp_path / "nominal"))
    buf = open(str(tmp_path / "nominal"), "rb").read()
    root = Table(buf, flatbuffers.encode.Get(nt.UOffsetTFlags.packer_type, buf, 0))
    m = root.table(CHECKPOINT["module_state"])
    assert m.scalar(MODULE["is_nominal_state"], nt.BoolFlags)
    tensors = m.tables(MODULE["requires_grad_params"]) + m.tables(MODULE["frozen_params"])
    assert [t.string(TENSOR["name"]) for t in tensors] == ["W", "b", "stat"]
    assert [t.scalar(TENSOR["data_type"], nt.Int32Flags) for t in tensors] == [1, 1, 11]
    # Shapes without data, as onnxruntime writes nominal states (it refuses a tensor without dims).
    assert [t.numbers(TENSOR["dims"], nt.Int64Flags) for t in tensors] == [[3, 2], [2], [2]]
    assert all(t.bytes(TENSOR["raw_data"]) == b"" for t in tensors)


def test_onnxtrain_reads_a_file_written_here(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((2, 2)).astype(np.float32)
    m0, m1 = np.full((2, 2), 0.1, np.float32), np.full((2, 2), 0.2, np.float32)
    path = str(tmp_path / "external.ckpt")
    write_checkpoint(path, {"w": w}, {"f": np.array([3.0, 4.0])}, step=7, initial_lr=0.05,
                     momentums={"w": {"momentum0": m0, "momentum1": m1}},
                     ints={"epoch": 9}, floats={"score": 1.5}, strings={"who": "test"})
    state = CheckpointState.load_checkpoint(path)
    np.testing.assert_array_equal(state.parameters["w"].data, w)
    assert state.parameters["w"].requires_grad and not state.parameters["f"].requires_grad
    np.testing.assert_array_equal(state.parameters["f"].data, [3.0, 4.0])
    assert dict(state.properties) == {"epoch": 9, "score": 1.5, "who": "test"}
    group = state._state.optimizer_group("group0")
    assert group["step"] == 7 and group["initial_learning_rate"] == pytest.approx(0.05)
    np.testing.assert_array_equal(group["states"]["w"]["momentum1"], m1)
    # Saved again with its optimizer state, it reads back the same here.
    CheckpointState.save_checkpoint(state, str(tmp_path / "again"), include_optimizer_state=True)
    again = read_checkpoint(str(tmp_path / "again"))
    assert again["groups"]["group0"][0] == 7
    np.testing.assert_array_equal(again["groups"]["group0"][2]["w"]["momentum0"], m0)
    # onnxruntime 1.16's version 1 (the same tables) loads too; version 3 does not.
    write_checkpoint(str(tmp_path / "v1"), {"w": w}, {}, 1, 0.0, {}, {}, {}, {}, version=1)
    np.testing.assert_array_equal(CheckpointState.load_checkpoint(str(tmp_path / "v1")).parameters["w"].data, w)
    write_checkpoint(str(tmp_path / "v3"), {"w": w}, {}, 1, 0.0, {}, {}, {}, {}, version=3)
    with pytest.raises(Exception, match="format version 3 is not supported"):
        CheckpointState.load_checkpoint(str(tmp_path / "v3"))


def test_python_surface_follows_onnxruntime(tmp_path):
    s, w, _ = linear_state(np.random.default_rng(3))
    s.save(str(tmp_path / "c"))
    state = CheckpointState.load_checkpoint(tmp_path / "c")  # os.PathLike
    assert len(state.parameters) == 3 and "W" in state.parameters and "nope" not in state.parameters
    assert [name for name, _ in state.parameters] == ["W", "b", "stat"]
    assert repr(state.parameters["W"]) == "Parameter(name=W, requires_grad=True)"
    assert state.parameters["W"].grad is None
    state.parameters["W"] = np.zeros((3, 2), np.float32)
    with pytest.raises(Exception, match="cannot assign"):
        state.parameters["W"] = np.zeros((2, 3), np.float32)
    with pytest.raises(KeyError):
        state.parameters["nope"]
    state.properties["lr"] = 0.125
    del state.properties["tag"]
    assert dict(state.properties) == {"best": 0.25, "epoch": 4, "lr": 0.125}
    with pytest.raises(Exception, match="must be an int, a float or a str"):
        state.properties["bad"] = [1]
    # onnxruntime 1.16's indexing: parameters first, then properties.
    assert state["epoch"] == 4 and state["W"].name == "W"
    state["new"] = "x"
    assert state.properties["new"] == "x"
    CheckpointState.save_checkpoint(state, str(tmp_path / "d"))
    back = CheckpointState.load_checkpoint(str(tmp_path / "d"))
    np.testing.assert_array_equal(back.parameters["W"].data, np.zeros((3, 2), np.float32))
    assert back.properties["new"] == "x"
    nominal = _C.CheckpointState.load(str(tmp_path / "d"))
    nominal.nominal = True
    nominal.save(str(tmp_path / "n"))
    n = CheckpointState.load_checkpoint(str(tmp_path / "n"))
    with pytest.raises(Exception, match="Please load the parameter states first"):
        n.parameters["W"].data
    with pytest.raises(Exception, match="Please load all the parameter states first"):
        n.parameters["W"] = np.zeros((3, 2), np.float32)
    with pytest.raises(Exception, match="not an onnxruntime checkpoint"):
        (tmp_path / "junk").write_bytes(b"\x00" * 64)
        CheckpointState.load_checkpoint(str(tmp_path / "junk"))


# ---------------------------------------------------------------- onnxruntime-web as the reference
def ort_web():
    """onnxruntime-web's folder, or a reason to skip."""
    folder = os.environ.get("ONNXTRAIN_ORT_WEB", os.path.join(ROOT, ".npm", "node_modules", "onnxruntime-web"))
    if not shutil.which("node"):
        return None, "node is not installed (Debian: nodejs)"
    if not os.path.exists(os.path.join(folder, "dist", "ort.training.wasm.js")):
        return None, f"onnxruntime-web 1.19.2 is not installed at {folder} (scripts/install_onnxruntime_web.sh)"
    return folder, None


def linear_artifacts(tmp_path, optimizer_outputs=False):
    """onnxruntime's artifact layout, written by hand: y = x W + b, loss = sum((y - t)^2), the
    gradients accumulated by InPlaceAccumulatorV2, and an AdamW optimizer model (HF mode). With
    ``optimizer_outputs`` the optimizer model also outputs the updated weights and moments (the
    schema's optional outputs), for a caller that feeds numpy lists, which are copied into
    sequences as onnxruntime copies them."""
    f32 = TensorProto.FLOAT
    ms = "com.microsoft"
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["y"]),
        helper.make_node("Sub", ["y", "t"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["dd"]),
        helper.make_node("ReduceSum", ["dd"], ["loss"], keepdims=0),
        helper.make_node("Add", ["d", "d"], ["dy"]),
        helper.make_node("Transpose", ["x"], ["xt"]),
        helper.make_node("MatMul", ["xt", "dy"], ["W_grad"]),
        helper.make_node("ReduceSum", ["dy", "axis0"], ["b_grad"], keepdims=0),
        helper.make_node("InPlaceAccumulatorV2", ["W_grad.accumulation.buffer", "W_grad", "lazy_reset_grad"],
                         ["W_grad.accumulation.out"], domain=ms),
        helper.make_node("InPlaceAccumulatorV2", ["b_grad.accumulation.buffer", "b_grad", "lazy_reset_grad"],
                         ["b_grad.accumulation.out"], domain=ms),
    ]
    graph = helper.make_graph(
        nodes, "train",
        [helper.make_tensor_value_info("x", f32, ["N", 3]), helper.make_tensor_value_info("t", f32, ["N", 2]),
         helper.make_tensor_value_info("W", f32, [3, 2]), helper.make_tensor_value_info("b", f32, [2]),
         helper.make_tensor_value_info("W_grad.accumulation.buffer", f32, [3, 2]),
         helper.make_tensor_value_info("b_grad.accumulation.buffer", f32, [2]),
         helper.make_tensor_value_info("lazy_reset_grad", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info("loss", f32, []),
         helper.make_tensor_value_info("W_grad.accumulation.out", TensorProto.BOOL, [1]),
         helper.make_tensor_value_info("b_grad.accumulation.out", TensorProto.BOOL, [1])],
        [numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    train = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(ms, 1)])
    train.ir_version = 7
    seq = lambda n: helper.make_tensor_sequence_value_info(n, f32, None)  # noqa: E731
    extra = ["params_out", "m1_out", "m2_out"] if optimizer_outputs else []
    opt_graph = helper.make_graph(
        [helper.make_node("AdamWOptimizer", ["learning_rate", "step", "params", "gradients",
                                             "first_order_moments", "second_order_moments"], ["updated_flag"] + extra,
                          domain=ms, alpha=0.9, beta=0.999, epsilon=1e-6, weight_decay=0.01, correct_bias=1,
                          adam_mode=1)],
        "adamw",
        [helper.make_tensor_value_info("learning_rate", f32, [1]),
         helper.make_tensor_value_info("step", TensorProto.INT64, [1]),
         seq("params"), seq("gradients"), seq("first_order_moments"), seq("second_order_moments")],
        [helper.make_tensor_value_info("updated_flag", TensorProto.BOOL, [1])] + [seq(n) for n in extra])
    opt = helper.make_model(opt_graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(ms, 1)])
    opt.ir_version = 7
    paths = str(tmp_path / "training_model.onnx"), str(tmp_path / ("optimizer_outputs.onnx" if extra else "optimizer_model.onnx"))
    for p, m in zip(paths, (train, opt)):
        with open(p, "wb") as f:
            f.write(m.SerializeToString())
    return paths


def run_ort_web(folder, tmp_path, checkpoint, train_model, optimizer_model, x, t, optimizer_steps):
    """onnxruntime-web's TrainingSession on the linear artifacts: a training step on (x, t) per
    entry of ``optimizer_steps``, each followed by an optimizer step and lazy_reset_grad when true.
    Returns the runner's results (tests/python/ort_web_runner.js)."""
    feeds = {"x": {"dims": list(x.shape), "data": x.ravel().tolist()},
             "t": {"dims": list(t.shape), "data": t.ravel().tolist()}}
    job = {"checkpoint": checkpoint, "train_model": train_model, "optimizer_model": optimizer_model,
           "steps": [{"feeds": feeds, "optimizer": o} for o in optimizer_steps]}
    (tmp_path / "job.json").write_text(json.dumps(job))
    run = subprocess.run(["node", os.path.join(ROOT, "tests", "python", "ort_web_runner.js"),
                          str(tmp_path / "job.json")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "ONNXTRAIN_ORT_WEB": folder})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def adamw_hf(w, g, m, v, lr, t, alpha=0.9, beta=0.999, eps=1e-6, wd=0.01):
    """onnxruntime's AdamW in mode 1 (Hugging Face's), in float64."""
    m = alpha * m + (1 - alpha) * g
    v = beta * v + (1 - beta) * g * g
    lr_c = lr * np.sqrt(1 - beta ** t) / (1 - alpha ** t)
    w = w - lr_c * m / (np.sqrt(v) + eps)
    return w - lr * wd * w, m, v


def test_onnxruntime_web_trains_from_an_onnxtrain_checkpoint(tmp_path):
    folder, reason = ort_web()
    if folder is None:
        pytest.skip(reason)
    rng = np.random.default_rng(4)
    s, w, bias = linear_state(rng)
    # Optimizer state as onnxruntime keeps it: group0, step, AdamW's two moments per parameter.
    m = {"W": rng.standard_normal((3, 2)) * 0.1, "b": rng.standard_normal(2) * 0.1}
    v = {"W": rng.random((3, 2)) * 0.01, "b": rng.random(2) * 0.01}
    path = str(tmp_path / "checkpoint")
    write_checkpoint(path, {"W": w, "b": bias}, {}, step=3, initial_lr=0.01,
                     momentums={p: {"momentum0": m[p].astype(np.float32), "momentum1": v[p].astype(np.float32)}
                                for p in m}, ints={}, floats={}, strings={})
    # Through onnxtrain: load the state built here, save it again with its optimizer state.
    state = CheckpointState.load_checkpoint(path)
    state.properties["epoch"] = 1
    ours = str(tmp_path / "onnxtrain_checkpoint")
    CheckpointState.save_checkpoint(state, ours, include_optimizer_state=True)
    train_model, optimizer_model = linear_artifacts(tmp_path)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = rng.standard_normal((4, 2)).astype(np.float32)
    out = run_ort_web(folder, tmp_path, ours, train_model, optimizer_model, x, t, [True, False])
    # Parameters in the training model's input order: W then b.
    np.testing.assert_array_equal(out["parameters_before"], np.concatenate([w.ravel(), bias]))
    assert out["parameters_size"] == 8
    # Step 1's loss from the checkpoint's values, then AdamW from the checkpoint's moments and step.
    wd, bd = w.astype(np.float64), bias.astype(np.float64)
    d = x @ wd + bd - t
    assert out["losses"][0] == pytest.approx(float((d * d).sum()), rel=1e-5)
    gw, gb = x.T.astype(np.float64) @ (2 * d), (2 * d).sum(axis=0)
    w1, _, _ = adamw_hf(wd, gw, m["W"].astype(np.float32).astype(np.float64),
                        v["W"].astype(np.float32).astype(np.float64), 0.001, 4)
    b1, _, _ = adamw_hf(bd, gb, m["b"].astype(np.float32).astype(np.float64),
                        v["b"].astype(np.float32).astype(np.float64), 0.001, 4)
    np.testing.assert_allclose(out["parameters_after"], np.concatenate([w1.ravel(), b1]), rtol=1e-5, atol=1e-6)
    d1 = x @ w1 + b1 - t
    assert out["losses"][1] == pytest.approx(float((d1 * d1).sum()), rel=1e-5)


def test_artifacts_train_here_as_in_onnxruntime_web(tmp_path):
    """onnxruntime's artifacts (InPlaceAccumulatorV2 in the training model, AdamWOptimizer over
    sequences in the optimizer model) run by onnxtrain's InferenceSession as onnxruntime's Module and
    Optimizer drive them: the fed gradient buffers change in place; the optimizer's updated weights
    and moments come back as its optional outputs. Ten AdamW steps from the same checkpoint: every
    loss and the final parameters equal onnxruntime-web's within 1e-5."""
    import onnxtrain
    folder, reason = ort_web()
    if folder is None:
        pytest.skip(reason)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    bias = rng.standard_normal(2).astype(np.float32)
    m = {"W": (rng.standard_normal((3, 2)) * 0.1).astype(np.float32), "b": (rng.standard_normal(2) * 0.1).astype(np.float32)}
    v = {"W": (rng.random((3, 2)) * 0.01).astype(np.float32), "b": (rng.random(2) * 0.01).astype(np.float32)}
    path = str(tmp_path / "checkpoint")
    write_checkpoint(path, {"W": w, "b": bias}, {}, step=3, initial_lr=0.01,
                     momentums={p: {"momentum0": m[p], "momentum1": v[p]} for p in m}, ints={}, floats={}, strings={})
    train_model, optimizer_model = linear_artifacts(tmp_path)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = rng.standard_normal((4, 2)).astype(np.float32)
    steps = 10
    reference = run_ort_web(folder, tmp_path, path, train_model, optimizer_model, x, t, [True] * steps)

    state = CheckpointState.load_checkpoint(path)
    group = state._state.optimizer_group("group0")
    params = [state.parameters["W"].data, state.parameters["b"].data]
    grads = [np.zeros_like(p) for p in params]
    m1 = [group["states"][n]["momentum0"] for n in ("W", "b")]
    m2 = [group["states"][n]["momentum1"] for n in ("W", "b")]
    train = onnxtrain.InferenceSession(train_model)
    optimizer = onnxtrain.InferenceSession(linear_artifacts(tmp_path, optimizer_outputs=True)[1])
    losses = []
    for k in range(steps):
        # Every output, as onnxruntime's Module fetches them: the accumulators' flags keep their
        # nodes in the plan.
        loss = train.run(None, {"x": x, "t": t, "W": params[0], "b": params[1],
                                    "W_grad.accumulation.buffer": grads[0], "b_grad.accumulation.buffer": grads[1],
                                    "lazy_reset_grad": np.array([True])})[0]
        losses.append(float(loss))
        flag, params, m1, m2 = optimizer.run(None, {
            "learning_rate": np.array([0.001], np.float32), "step": np.array([group["step"] + k + 1], np.int64),
            "params": params, "gradients": grads, "first_order_moments": m1, "second_order_moments": m2})
        assert flag.tolist() == [True]
    np.testing.assert_allclose(losses, reference["losses"], rtol=1e-5)
    np.testing.assert_allclose(np.concatenate([p.ravel() for p in params]), reference["parameters_after"],
                               rtol=1e-5, atol=1e-7)
    assert losses[-1] < losses[0]
