"""onnxtrain.training.checkpoint (onnxruntime.training.checkpoint): the experimental flat state and
torch.save checkpoints round-trip through an ORTTrainer (training resumes bitwise); aggregation of
rank files of ORTTrainer.save_checkpoint, weight averaging and conversion to a PyTorch state dict,
checked against numpy and torch.nn.Module.load_state_dict; ZeRO stage 1 shards are merged;
horizontally partitioned checkpoints raise
NotImplementedError."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from onnxtrain.training import ORTTrainer, ORTTrainerOptions, optim  # noqa: E402
from onnxtrain.training import checkpoint as ck  # noqa: E402
from onnxtrain.training.orttrainer import load_saved  # noqa: E402
from onnxtrain.training import _checkpoint_storage  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


DESC = {"inputs": [("x", ["batch", 6]), ("label", ["batch"])],
        "outputs": [("loss", [], True), ("probability", ["batch", 3])]}
WEIGHTS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def batches(n, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)) for _ in range(n)]


def trainer(seed=0, config=None, options=None):
    torch.manual_seed(seed)
    opts = {"device": {"id": "cpu"}}
    opts.update(options or {})
    return ORTTrainer(MLP(), DESC, config or optim.AdamConfig(lr=0.01), loss_fn=lambda p, y: F.cross_entropy(p, y),
                      options=ORTTrainerOptions(opts))


def trained(steps=3, seed=0, data_seed=7, **kw):
    t = trainer(seed, **kw)
    for x, y in batches(steps, data_seed):
        t.train_step(x, y)
    return t


def write_state(path, state, user=None):
    """A checkpoint file in ORTTrainer.save_checkpoint's format (onnxruntime 1.13's:
    _checkpoint_storage.save of the state, user_dict as to_serialized_hex), from a state dict."""
    state = dict(state, user_dict=_checkpoint_storage.to_serialized_hex(user)) if user else state
    _checkpoint_storage.save(state, str(path))
    return str(path)


def rank_files(tmp_path, state, world_size, tweak=None):
    paths = []
    for r in reversed(range(world_size)):  # written out of order on purpose
        s = {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()}
        s["trainer_options"] = dict(state["trainer_options"], world_rank=r, world_size=world_size,
                                    data_parallel_size=world_size)
        if tweak:
            tweak(r, s)
        paths.append(write_state(tmp_path / f"ck.rank{r}.npz", s))
    return paths


# ---------------------------------------------------------------------------- experimental API
@pytest.mark.parametrize("config, opt_keys", [
    (optim.AdamConfig(lr=0.01), {"Moment_1_", "Moment_2_", "Update_Count_"}),
    (optim.LambConfig(lr=0.01), {"Moment_1_", "Moment_2_"}),
    (optim.SGDConfig(lr=0.1), set()),
])
def test_experimental_state_dict_flat_names(config, opt_keys):
    t = trained(config=config, options={"utils": {"frozen_weights": ["fc1.bias"]}})
    flat = ck.experimental_state_dict(t)
    trainable = [w for w in WEIGHTS if w != "fc1.bias"]
    expected = set(WEIGHTS) | {p + w for p in opt_keys for w in trainable}
    if config.name != "AdamOptimizer":
        expected.add("Step")
    assert set(flat) == expected
    assert all(isinstance(v, torch.Tensor) for v in flat.values())
    state = t.state_dict()
    for w in trainable:
        np.testing.assert_array_equal(flat[w].numpy(), state["model"]["full_precision"][w])
        for p in opt_keys:
            np.testing.assert_array_equal(flat[p + w].numpy(), state["optimizer"][w][p[:-1]])
    assert set(ck.experimental_state_dict(t, include_optimizer_state=False)) == set(WEIGHTS)


def test_experimental_state_dict_before_first_step_warns():
    with pytest.warns(UserWarning, match="not initialized"):
        assert ck.experimental_state_dict(trainer()) == {}


def test_experimental_save_load_checkpoint_resumes_bitwise(tmp_path):
    data = batches(8)
    straight = trainer()
    losses = [float(straight.train_step(x, y)[0]) for x, y in data]
    first = trainer()
    for x, y in data[:4]:
        first.train_step(x, y)
    user = {"epoch": 2}
    ck.experimental_save_checkpoint(first, str(tmp_path), checkpoint_state_dict=user)
    assert user == {"epoch": 2}  # not modified
    path = tmp_path / "ORT_checkpoint.ort.pt"
    content = torch.load(path)  # onnxruntime's layout: {'model': {name: tensor}, **user}
    assert set(content) == {"model", "epoch"} and "Moment_1_fc2.weight" in content["model"]
    with pytest.warns(UserWarning, match="overwriting"):
        ck.experimental_save_checkpoint(first, str(tmp_path), checkpoint_state_dict=user)

    second = trainer(seed=42)
    assert ck.experimental_load_checkpoint(second, str(tmp_path)) == {"epoch": 2}  # before the first step
    resumed = [float(second.train_step(x, y)[0]) for x, y in data[4:]]
    assert resumed == losses[4:]

    third = trainer(seed=43)
    third.eval_step(*data[0])
    ck.experimental_load_checkpoint(third, str(tmp_path))  # after initialization
    assert [float(third.train_step(x, y)[0]) for x, y in data[4:]] == losses[4:]


def test_experimental_load_state_dict_strict(tmp_path):
    t = trained()
    flat = ck.experimental_state_dict(t)
    other = trained(seed=3)
    with pytest.raises(RuntimeError, match="Checkpoint tensor: extra.weight is not present"):
        ck.experimental_load_state_dict(other, dict(flat, **{"extra.weight": torch.zeros(2)}), strict=True)
    ck.experimental_load_state_dict(other, dict(flat, **{"extra.weight": torch.zeros(2)}))
    for w in WEIGHTS:
        np.testing.assert_array_equal(other.state_dict()["model"]["full_precision"][w], flat[w].numpy())
    with pytest.raises(NotImplementedError, match="mixed-precision weights .* without their float32 master"):
        ck.experimental_load_state_dict(other, {"fc1.weight_fp16": torch.zeros(2)})
    # an fp16 run's float16 copies beside their masters are derived data: ignored
    t2 = trained(seed=5)
    ck.experimental_load_state_dict(t2, dict(flat, **{f"{w}_fp16": flat[w].half() for w in WEIGHTS}), strict=True)
    for w in WEIGHTS:
        np.testing.assert_array_equal(t2.state_dict()["model"]["full_precision"][w], flat[w].numpy())


def test_experimental_checkpoint_errors(tmp_path):
    t = trained(1)
    with pytest.raises(FileNotFoundError, match="doesn't exist"):
        ck.experimental_save_checkpoint(t, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="No checkpoint found with prefix 'ORT_checkpoint'"):
        ck.experimental_load_checkpoint(t, str(tmp_path))
    for r in range(2):
        torch.save({"model": {}}, tmp_path / ck._get_checkpoint_name("ORT_checkpoint", True, r, 2))
    with pytest.raises(NotImplementedError, match="ZeRO.*partition"):
        ck.experimental_load_checkpoint(t, str(tmp_path))


def test_list_checkpoint_files_rank_order_and_names(tmp_path):
    assert ck._get_checkpoint_name("p", False) == "p.ort.pt"
    assert ck._get_checkpoint_name("p", True, 3, 12) == "p.ZeRO.3.11.ort.pt"
    for r in (10, 2, 0, 1):
        (tmp_path / ck._get_checkpoint_name("p", True, r, 12)).write_bytes(b"")
    (tmp_path / "p.other.txt").write_bytes(b"")
    (tmp_path / "q.ZeRO.0.11.ort.pt").write_bytes(b"")
    files = ck._list_checkpoint_files(str(tmp_path), "p")
    assert [os.path.basename(f) for f in files] == [f"p.ZeRO.{r}.11.ort.pt" for r in (0, 1, 2, 10)]
    assert ck._list_checkpoint_files(str(tmp_path), "p", extension=".txt") == [str(tmp_path / "p.other.txt")]


def test_split_state_dict():
    split = ck._split_state_dict({"Moment_1_w": 1, "Update_Count_w": 2, "Step": 3, "w_fp16": 4, "w": 5})
    assert split == {"optimizer": {"Moment_1_w": 1, "Update_Count_w": 2, "Step": 3}, "fp16_param": {"w_fp16": 4},
                     "fp32_param": {"w": 5}}


# ------------------------------------------------------------------------ aggregate_checkpoints
def test_aggregate_data_parallel_replicas(tmp_path):
    t = trained()
    state = t.state_dict()
    paths = rank_files(tmp_path, state, 3)
    pt = ck.aggregate_checkpoints(paths)
    assert set(pt) == set(WEIGHTS)
    for w in WEIGHTS:
        assert isinstance(pt[w], torch.Tensor)
        np.testing.assert_array_equal(pt[w].numpy(), state["model"]["full_precision"][w])
    merged = ck.aggregate_checkpoints(paths, pytorch_format=False)
    assert merged["trainer_options"]["world_size"] == 1 and merged["trainer_options"]["world_rank"] == 0
    assert merged["train_step_info"] == state["train_step_info"]
    for w in WEIGHTS:
        for k, v in state["optimizer"][w].items():
            np.testing.assert_array_equal(merged["optimizer"][w][k], v)
    fresh = trainer(seed=9)
    fresh.load_state_dict(merged, strict=True)
    fresh.eval_step(*batches(1)[0])
    for w in WEIGHTS:
        np.testing.assert_array_equal(fresh.state_dict()["model"]["full_precision"][w],
                                      state["model"]["full_precision"][w])


def test_aggregate_single_file_of_save_checkpoint(tmp_path):
    t = trained()
    t.save_checkpoint(str(tmp_path / "ck.npz"), user_dict={"epoch": 1})
    merged = ck.aggregate_checkpoints([tmp_path / "ck.npz"], pytorch_format=False)
    # as onnxruntime's aggregation: the first rank's user_dict as saved (to_serialized_hex)
    assert _checkpoint_storage.from_serialized_hex(merged["user_dict"]) == {"epoch": 1}
    for w in WEIGHTS:
        np.testing.assert_array_equal(merged["model"]["full_precision"][w],
                                      t.state_dict()["model"]["full_precision"][w])


def test_aggregate_errors(tmp_path):
    state = trained().state_dict()

    def differ(r, s):
        if r == 1:
            s["model"] = {"full_precision": dict(state["model"]["full_precision"])}
            s["model"]["full_precision"]["fc2.bias"] = np.zeros(3, np.float32)

    for d in "abc":
        (tmp_path / d).mkdir()
    with pytest.raises(ValueError, match="Value mismatch for model state fc2.bias"):
        ck.aggregate_checkpoints(rank_files(tmp_path / "a", state, 2, differ))
    paths = rank_files(tmp_path / "b", state, 3)
    with pytest.raises(ValueError, match=r"ranks 0..2 of one run, got ranks \[0, 2\]"):
        ck.aggregate_checkpoints([p for p in paths if "rank1" not in p])

    # ZeRO stage 1 (onnxruntime's layout): each rank holds its block of the Moment_1/Moment_2 of the
    # weights named in partition_info, flat; aggregation concatenates the blocks in rank order and
    # reshapes them to original_dim. Weights are whole (no mixed precision) and must agree.
    weights_ = state["model"]["full_precision"]
    sharded = ["fc1.weight", "fc2.bias"]

    def zero(r, s):
        s["trainer_options"]["zero_stage"] = 1
        s["partition_info"] = {w: {"original_dim": np.array(weights_[w].shape)} for w in sharded}
        s["optimizer"] = {w: dict(states) for w, states in state["optimizer"].items()}
        for w in sharded:
            for k in ("Moment_1", "Moment_2"):
                flat = np.asarray(state["optimizer"][w][k]).ravel()
                half = flat.size // 2
                s["optimizer"][w][k] = flat[:half] if r == 0 else flat[half:]

    merged = ck.aggregate_checkpoints(rank_files(tmp_path / "c", state, 2, zero), pytorch_format=False)
    assert set(merged["optimizer"]) == set(state["optimizer"])
    for w, states in state["optimizer"].items():
        for k, v in states.items():
            np.testing.assert_array_equal(np.asarray(merged["optimizer"][w][k]), np.asarray(v), err_msg=f"{w} {k}")
    assert merged["trainer_options"]["zero_stage"] == 0 and merged["trainer_options"]["world_size"] == 1
    with pytest.raises(ValueError, match="non-empty list"):
        ck.aggregate_checkpoints([])
    with pytest.raises(ValueError, match="non-empty list"):
        ck.aggregate_checkpoints(paths[0])
    with pytest.raises(FileNotFoundError):
        ck.aggregate_checkpoints([str(tmp_path / "nope.npz")])
    bad = tmp_path / "bad.npz"
    np.savez(bad, a=np.zeros(2))
    with pytest.raises(ValueError, match="not an ORTTrainer checkpoint"):
        ck.aggregate_checkpoints([str(bad)])


# --------------------------------------------------------------------- averaging and conversion
def test_average_checkpoints_against_numpy(tmp_path):
    paths, states = [], []
    for i in range(3):
        t = trained(steps=2 + i, seed=i, data_seed=i)
        paths.append(str(tmp_path / f"ck{i}.npz"))
        t.save_checkpoint(paths[-1])
        states.append(load_saved(paths[-1]))
    avg = ck.average_checkpoints(paths, pytorch_format=False)
    for w in WEIGHTS:
        expected = np.mean([s["model"]["full_precision"][w].astype(np.float64) for s in states], axis=0)
        assert avg["model"]["full_precision"][w].dtype == np.float32
        np.testing.assert_allclose(avg["model"]["full_precision"][w], expected, rtol=1e-6)
    # the averaged weights load into a trainer and into the torch module
    t = trained(seed=5)
    t.load_state_dict(avg, strict=False)
    module = MLP()
    module.load_state_dict(ck.average_checkpoints(paths))
    x, y = batches(1, seed=11)[0]
    loss, prob = t.eval_step(x, y)
    with torch.no_grad():
        out = module(x)
    np.testing.assert_allclose(prob.numpy(), out.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(loss), float(F.cross_entropy(out, y)), rtol=1e-5)
    # state dicts are accepted as well as paths
    same = ck.average_checkpoints(states)
    for w in WEIGHTS:
        np.testing.assert_array_equal(same[w].numpy(), avg["model"]["full_precision"][w])


def test_average_checkpoints_errors(tmp_path):
    a = trained().state_dict()
    b = {"model": {"full_precision": dict(a["model"]["full_precision"])}}
    del b["model"]["full_precision"]["fc1.bias"]
    with pytest.raises(ValueError, match=r"missing \['fc1.bias'\]"):
        ck.average_checkpoints([a, b])
    b["model"]["full_precision"]["fc1.bias"] = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="'fc1.bias' is float32\\[4\\]"):
        ck.average_checkpoints([a, b])
    with pytest.raises(ValueError, match="non-float"):
        ck.average_checkpoints([{"model": {"full_precision": {"n": np.arange(3)}}}] * 2)
    with pytest.raises(ValueError, match="no model.full_precision"):
        ck.average_checkpoints([a, {"weights": {}}])
    with pytest.raises(ValueError, match="non-empty list"):
        ck.average_checkpoints([])
    with pytest.raises(TypeError, match="path or a state dict"):
        ck.average_checkpoints([a, 3])


def test_to_pytorch_state_dict_loads_into_module(tmp_path):
    t = trained(steps=4)
    path = tmp_path / "ck.npz"
    t.save_checkpoint(str(path))
    sd = ck.to_pytorch_state_dict(path)
    assert set(sd) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    module = MLP()
    module.load_state_dict(sd)  # strict: every key matches
    x, y = batches(1, seed=12)[0]
    _, prob = t.eval_step(x, y)
    with torch.no_grad():
        np.testing.assert_allclose(module(x).numpy(), prob.numpy(), rtol=1e-5, atol=1e-6)
    # without stripping: the trainer's own names, as ORTTrainer.state_dict(pytorch_format=True)
    raw = ck.to_pytorch_state_dict(t.state_dict())
    expected = t.state_dict(pytorch_format=True)
    assert set(raw) == set(expected)
    assert all(torch.equal(raw[k], expected[k]) for k in raw)
    MLP().load_state_dict(raw)  # the trainer's names are the module's own (onnxruntime's)
