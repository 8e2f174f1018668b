"""ORTTrainer's contract as onnxruntime-training 1.13 keeps it (issue 33, round 2): checkpoints
written and read through ``_checkpoint_storage`` (the calls onnxruntime's own tests mock),
aggregation of partitioned rank files against numpy, model_desc typed once the model is known,
``save_as_onnx`` writing the trained model's graph unchanged (checked in onnxtrain, onnxruntime-node
and PyTorch in eval mode)."""
import os
import sys

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import pytest

torch = pytest.importorskip("torch")

import onnxtrain as ot  # noqa: E402
from onnxtrain.training import ORTTrainer, ORTTrainerOptions, _checkpoint_storage, optim  # noqa: E402
from onnxtrain.training import checkpoint as ck  # noqa: E402
from onnxtrain.training._utils import mute_dropouts  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ort_node  # noqa: E402


class DropNet(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.drop = torch.nn.Dropout(p)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


DESC = {"inputs": [("x", ["batch", 6]), ("label", ["batch"])],
        "outputs": [("loss", [], True), ("preds", ["batch", 3])]}


def ce(preds, label):
    return torch.nn.functional.cross_entropy(preds, label)


def batches(n=3):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(n)]


def trained(p=0.0, steps=2, seed=3):
    torch.manual_seed(seed)
    t = ORTTrainer(DropNet(p), DESC, optim.AdamConfig(lr=0.05), loss_fn=ce)
    for x, y in batches(steps):
        t.train_step(x, y)
    return t


# --------------------------------------------------------------------------------- checkpoints
def test_save_checkpoint_calls_checkpoint_storage_save_with_the_state_and_hex_user_dict(tmp_path, monkeypatch):
    t = trained()
    user = {"epoch": 3, "seen": np.arange(4), "scale": torch.tensor([1.5, 2.0])}
    calls = []
    real = _checkpoint_storage.save
    monkeypatch.setattr(_checkpoint_storage, "save", lambda obj, path: (calls.append((obj, path)), real(obj, path)))
    path = str(tmp_path / "ck")
    t.save_checkpoint(path, user_dict=user)
    (obj, where), = calls
    assert where == path
    assert obj["user_dict"] == _checkpoint_storage.to_serialized_hex(user)  # onnxruntime's contract
    assert set(obj) == {"model", "optimizer", "trainer_options", "train_step_info", "user_dict"}
    # the file is _checkpoint_storage's: load gives numpy values, the weights the trainer's
    loaded = _checkpoint_storage.load(path)
    for w, v in t.state_dict()["model"]["full_precision"].items():
        np.testing.assert_array_equal(loaded["model"]["full_precision"][w], v)
    back = _checkpoint_storage.from_serialized_hex(loaded["user_dict"])
    assert back["epoch"] == 3 and np.array_equal(back["seen"], np.arange(4))
    assert torch.equal(back["scale"], torch.tensor([1.5, 2.0]))
    t.save_checkpoint(str(tmp_path / "noopt"), include_optimizer_states=False)
    assert "optimizer" not in calls[-1][0] and "user_dict" not in calls[-1][0]


def test_load_checkpoint_reads_trainer_options_then_the_state(tmp_path, monkeypatch):
    t = trained()
    path = str(tmp_path / "ck")
    t.save_checkpoint(path, user_dict={"epoch": 7})
    calls = []
    real = _checkpoint_storage.load
    monkeypatch.setattr(_checkpoint_storage, "load", lambda p, **kw: (calls.append((p, kw)), real(p, **kw))[1])
    other = trained(seed=9)
    assert other.load_checkpoint(path) == {"epoch": 7}
    assert calls == [(path, {"key": "trainer_options"}), (path, {})]
    for w, v in t.state_dict()["model"]["full_precision"].items():
        np.testing.assert_array_equal(other.state_dict()["model"]["full_precision"][w], v)
    # the loaded trainer continues as the saved one does (Adam moments and step restored)
    x, y = batches(3)[2]
    assert float(other.train_step(x, y)[0]) == float(t.train_step(x, y)[0])


def rank_state(rank, world, dp, hp, zero, model, optimizer, info, mixed=False):
    opts = {"mixed_precision": mixed, "world_rank": rank, "world_size": world, "data_parallel_size": dp,
            "horizontal_parallel_size": hp, "zero_stage": zero, "optimizer_name": "AdamOptimizer"}
    return {"model": {"full_precision": model}, "optimizer": optimizer, "trainer_options": opts,
            "partition_info": info}


def test_aggregate_megatron_shards_concatenate_on_the_partition_axis(tmp_path):
    rng = np.random.default_rng(0)
    col = rng.standard_normal((2, 4)).astype(np.float32)   # megatron_row_partition 0: split on the last axis
    row = rng.standard_normal((4, 2)).astype(np.float32)   # megatron_row_partition 1: split on the first axis
    bias = rng.standard_normal(3).astype(np.float32)       # not partitioned: the same on both ranks
    m1 = {"col": rng.standard_normal((2, 4)), "row": rng.standard_normal((4, 2))}
    paths = []
    for r in (1, 0):  # written out of rank order
        info = {"col": {"original_dim": np.array([2, 4]), "megatron_row_partition": 0},
                "row": {"original_dim": np.array([4, 2]), "megatron_row_partition": 1}}
        model = {"col": col[:, 2 * r:2 * r + 2], "row": row[2 * r:2 * r + 2], "bias": bias}
        opt = {"col": {"Moment_1": m1["col"][:, 2 * r:2 * r + 2]}, "row": {"Moment_1": m1["row"][2 * r:2 * r + 2]},
               "bias": {"Moment_1": np.ones(3)}}
        path = str(tmp_path / f"r{r}")
        _checkpoint_storage.save(rank_state(r, 2, 1, 2, 0, model, opt, info), path)
        paths.append(path)
    merged = ck.aggregate_checkpoints(paths, pytorch_format=False)
    np.testing.assert_array_equal(merged["model"]["full_precision"]["col"], col)
    np.testing.assert_array_equal(merged["model"]["full_precision"]["row"], row)
    np.testing.assert_array_equal(merged["model"]["full_precision"]["bias"], bias)
    np.testing.assert_array_equal(merged["optimizer"]["col"]["Moment_1"], m1["col"])
    np.testing.assert_array_equal(merged["optimizer"]["row"]["Moment_1"], m1["row"])
    assert merged["trainer_options"]["horizontal_parallel_size"] == 1 and merged["trainer_options"]["world_size"] == 1
    pt = ck.aggregate_checkpoints(paths)
    assert set(pt) == {"col", "row", "bias"} and torch.equal(pt["col"], torch.from_numpy(col))


def test_aggregate_zero_mixed_precision_shards_reshape_to_original_dim(tmp_path):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    m2 = np.arange(12, 24, dtype=np.float32).reshape(3, 4)
    paths = []
    for r, part in ((0, slice(0, 5)), (1, slice(5, 12))):  # uneven blocks, as a flattened buffer cuts them
        info = {"w": {"original_dim": np.array([3, 4])}}
        path = str(tmp_path / f"z{r}")
        _checkpoint_storage.save(rank_state(r, 2, 2, 1, 1, {"w": w.ravel()[part]},
                                            {"w": {"Moment_2": m2.ravel()[part], "Step": np.array([4])}}, info,
                                            mixed=True), path)
        paths.append(path)
    merged = ck.aggregate_checkpoints(paths, pytorch_format=False)
    np.testing.assert_array_equal(merged["model"]["full_precision"]["w"], w)
    np.testing.assert_array_equal(merged["optimizer"]["w"]["Moment_2"], m2)
    np.testing.assert_array_equal(merged["optimizer"]["w"]["Step"], [4])
    # an unsharded state that differs between ranks is refused with onnxruntime's text
    bad = str(tmp_path / "bad1")
    _checkpoint_storage.save(rank_state(1, 2, 2, 1, 1, {"w": w.ravel()[5:]},
                                        {"w": {"Moment_2": m2.ravel()[5:], "Step": np.array([5])}},
                                        {"w": {"original_dim": np.array([3, 4])}}, mixed=True), bad)
    with pytest.raises(ValueError, match="Value mismatch for model state w and optimizer state Step"):
        ck.aggregate_checkpoints([paths[0], bad], pytorch_format=False)


# --------------------------------------------------------------------------------- model_desc types
def test_model_desc_is_typed_once_the_model_is_known():
    torch.manual_seed(0)
    t = ORTTrainer(DropNet(0.0), DESC, optim.SGDConfig(lr=0.1), loss_fn=ce)
    assert not hasattr(t.model_desc.inputs[0], "dtype")  # a torch model: known at the first step
    x, y = batches(1)[0]
    t.train_step(x, y)
    assert [d.dtype for d in t.model_desc.inputs] == [torch.float32, torch.int64]
    assert [d.dtype for d in t.model_desc.outputs] == [torch.float32, torch.float32]
    assert t.model_desc.outputs[0].is_loss and t.model_desc.outputs[1].dtype_amp is None
    # an ONNX model: typed by the constructor, from the graph's element types
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Cast", ["x"], ["xf"], to=onnx.TensorProto.FLOAT),
         onnx.helper.make_node("MatMul", ["xf", "W"], ["y"]),
         onnx.helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
        "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, ["b", 2])],
        [onnx.helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, [])],
        [onnx.numpy_helper.from_array(np.ones((2, 1), np.float32), "W")]), opset_imports=[onnx.helper.make_opsetid("", 14)])
    o = ORTTrainer(model, {"inputs": [("x", ["b", 2])], "outputs": [("loss", [], True)]}, optim.SGDConfig(lr=0.1))
    assert o.model_desc.inputs[0].dtype == torch.float64 and o.model_desc.outputs[0].dtype == torch.float32


# --------------------------------------------------------------------------------- save_as_onnx
def test_save_as_onnx_keeps_the_graph_and_writes_the_trained_weights(tmp_path):
    t = trained(p=0.3, steps=3)
    path = str(tmp_path / "trained.onnx")
    t.save_as_onnx(path)
    saved = onnx.load(path)
    onnx.checker.check_model(saved)
    # onnxruntime writes _onnx_model itself: the graph as exported (Dropout keeps its training_mode input)
    assert saved == t._onnx_model
    drops = [n for n in saved.graph.node if n.op_type == "Dropout"]
    assert len(drops) == 1 and len(drops[0].input) == 3 and drops[0].input[2]
    weights = t.state_dict()["model"]["full_precision"]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in saved.graph.initializer}
    for w, v in weights.items():
        np.testing.assert_array_equal(inits[w], v)
    # In eval mode (Dropout muted) the saved model computes PyTorch's eval outputs with the trained weights,
    # in onnxtrain and in onnxruntime-node.
    ref = DropNet(0.3).eval()
    ref.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
    x, y = batches(1)[0]
    with torch.no_grad():
        preds = ref(x)
        loss = ce(preds, y)
    feed = {"x": x.numpy(), "label": y.numpy()}
    eval_model = mute_dropouts(saved).SerializeToString()  # eval mode, as check_model_export runs it
    got = dict(zip(["loss", "preds"], ot.InferenceSession(eval_model).run(["loss", "preds"], feed)))
    np.testing.assert_allclose(got["preds"], preds.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["loss"], loss.numpy(), rtol=1e-5)
    reason = ort_node.unavailable_reason()
    if reason:
        pytest.skip(f"onnxruntime-node: {reason}")
    node_out, err = ort_node.run(eval_model, feed)
    assert err is None, err
    np.testing.assert_allclose(node_out["preds"], got["preds"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(node_out["loss"], got["loss"], rtol=1e-5)


# --------------------------------------------------------------------------------- check_model_export
def test_check_model_export_with_dropout_compares_eval_mode():
    # onnxruntime compares the torch model in eval mode with the export, its Dropouts muted: a model
    # with Dropout passes, and trains as without the check (same seed, same losses).
    losses = []
    for check in (True, False):
        torch.manual_seed(4)
        ot.set_seed(4)
        t = ORTTrainer(DropNet(0.5), DESC, optim.SGDConfig(lr=0.1), loss_fn=ce,
                       options=ORTTrainerOptions({"debug": {"check_model_export": check}}))
        losses.append([float(t.train_step(x, y)[0]) for x, y in batches()])
        assert t._torch_model.training  # the check leaves the module in training mode
    assert losses[0] == losses[1]


# --------------------------------------------------------------------------------- no weights
def test_model_without_weights_computes_the_loss_and_updates_nothing():
    class NoWeights(torch.nn.Module):
        def forward(self, x, y):
            return torch.mean(x)

    t = ORTTrainer(NoWeights(), {"inputs": [("x", [3]), ("y", [1])], "outputs": [("loss", [], True)]},
                   optim.LambConfig(lr=0.001))
    for x in ([1.0, 2.0, 4.0], [1.0, 2.0, 6.5]):
        loss = t.train_step(torch.tensor(x), torch.tensor([1.0]))  # y is not used by the model
        assert float(loss) == pytest.approx(np.mean(x), rel=1e-6)
    assert float(t.eval_step(torch.tensor([3.0, 3.0, 9.0]), torch.tensor([1.0]))) == pytest.approx(5.0)
    state = t.state_dict()
    assert state["model"]["full_precision"] == {}
    assert state["train_step_info"] == {"optimization_step": 2, "step": 2}


# --------------------------------------------------------------------------------- symbolic shapes
class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.out(self.layer(x))


def attention_trainer(dims, symbolic_infer, seed=2):
    torch.manual_seed(seed)
    desc = {"inputs": [("x", dims + [8]), ("label", [dims[0] * dims[1] if isinstance(dims[0], int) else "n"])],
            "outputs": [("loss", [], True), ("preds", dims + [3])]}
    return ORTTrainer(Attention(), desc, optim.AdamConfig(lr=0.01),
                      loss_fn=lambda p, y: torch.nn.functional.cross_entropy(p.reshape(-1, 3), y),
                      options=ORTTrainerOptions({"utils": {"run_symbolic_shape_infer": symbolic_infer}}))


def matmul_shapes(model):
    vi = {v.name: v for v in model.graph.value_info}
    return [[d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi[n.output[0]].type.tensor_type.shape.dim]
            if n.output[0] in vi else None for n in model.graph.node if n.op_type == "MatMul"]


def test_run_symbolic_shape_infer_gives_exported_attention_its_ranks():
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(5, 2, 8, generator=g), torch.randint(0, 3, (10,), generator=g)) for _ in range(3)]
    # the reference: ONNX's own inference (data propagation) of the same module exported with fixed sizes
    fixed = attention_trainer([5, 2], False)
    fixed.eval_step(*data[0])
    expected = matmul_shapes(onnx.shape_inference.infer_shapes(fixed._onnx_model, data_prop=True))
    assert expected and all(s is not None for s in expected)
    runs = {}
    for symbolic_infer in (False, True):
        t = attention_trainer(["seq", "batch"], symbolic_infer)
        runs[symbolic_infer] = [float(t.train_step(x, y)[0]) for x, y in data]
    got = matmul_shapes(t._onnx_model)  # onnxruntime replaces _onnx_model by the inferred one
    assert [len(s) for s in got] == [len(s) for s in expected]
    for g_shape, e_shape in zip(got, expected):
        assert all(gd == ed for gd, ed in zip(g_shape, e_shape) if isinstance(gd, int) and gd > 0), (g_shape, e_shape)
    assert runs[True] == runs[False]  # the value_info changes nothing of the training


# --------------------------------------------------------------------------------- graph_save_paths
def test_graph_save_paths_write_valid_models_of_each_stage(tmp_path):
    names = {"model_after_graph_transforms_path": "transformed.onnx",
             "model_with_gradient_graph_path": "grad.onnx",
             "model_with_training_graph_path": "training.onnx",
             "model_with_training_graph_after_optimization_path": "optimized.onnx"}
    paths = {k: str(tmp_path / v) for k, v in names.items()}
    torch.manual_seed(0)
    t = ORTTrainer(DropNet(0.0), DESC, optim.AdamConfig(lr=0.01), loss_fn=ce,
                   options=ORTTrainerOptions({"debug": {"graph_save_paths": paths}}))
    assert not any(os.path.exists(p) for p in paths.values())  # a torch model: written at the first step
    t.train_step(*batches(1)[0])
    models = {k: onnx.load(p) for k, p in paths.items()}
    for k, m in models.items():
        onnx.checker.check_model(m)
    assert models["model_after_graph_transforms_path"].graph == t._onnx_model.graph
    grad_ops = [n.op_type for n in models["model_with_gradient_graph_path"].graph.node]
    assert "ReluGrad" in grad_ops and not any("Optimizer" in op for op in grad_ops)
    train_ops = [n.op_type for n in models["model_with_training_graph_path"].graph.node]
    assert sum("AdamWOptimizer" == op for op in train_ops) >= 1
    assert models["model_with_training_graph_after_optimization_path"] == models["model_with_training_graph_path"]
