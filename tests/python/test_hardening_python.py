"""Hardening of the Python layer (issue 38, points 2, 4, 5 and 6), each against something independent
of onnxtrain (PyTorch itself, numpy, the file system):

- checkpoint loaders run nothing from the file: a pickle whose ``__reduce__`` would create a marker
  file is refused with an error naming the file, and the marker does not exist;
- ORTModule exports once for every batch size (torch.onnx.export counted), with gradients equal to
  PyTorch's at each; it falls back to one graph per shape where a dynamic graph disagrees with
  PyTorch, and keeps a bounded number of graphs;
- ORTModule's autograd contract: a data-dependent Python branch surfaces the tracer's warning; an
  in-place change of an output or an input before backward raises as PyTorch does; threads making
  first calls concurrently all get PyTorch's results;
- checkpoint prefixes cannot leave the checkpoint directory; ``user_dict`` round-trips exactly;
  damaged ORTTrainer checkpoint files all raise ``InvalidArgument`` naming the file.
"""
import copy
import io
import json
import os
import re
import threading
import warnings
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import onnxtrain  # noqa: E402
from onnxtrain import InvalidArgument  # noqa: E402
from onnxtrain.capi import ort_trainer as legacy  # noqa: E402
from onnxtrain.torch import ORTModule  # noqa: E402
from onnxtrain.training import ORTTrainer, ORTTrainerOptions, optim  # noqa: E402
from onnxtrain.training import checkpoint as ck  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
PACKAGE = os.path.dirname(os.path.abspath(onnxtrain.__file__))  # the package under test
CACHE_LIMIT = 8  # ORTModule.max_cached_graphs, as documented in docs/torch.md


def rel(a, b):
    """Norm-based relative error of a result against the reference, in float64."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


# ------------------------------------------------------------------------------------ trainers
class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


DESC = {"inputs": [("x", ["batch", 6]), ("label", ["batch"])],
        "outputs": [("loss", [], True), ("probability", ["batch", 3])]}


def trained_trainer(steps=2, seed=0):
    torch.manual_seed(seed)
    t = ORTTrainer(MLP(), DESC, optim.AdamConfig(lr=0.01), loss_fn=lambda p, y: F.cross_entropy(p, y),
                   options=ORTTrainerOptions({"device": {"id": "cpu"}}))
    g = torch.Generator().manual_seed(7)
    for _ in range(steps):
        t.train_step(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g))
    return t


class LegacyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 4)

    def forward(self, x):
        return self.fc(x)


def legacy_trainer(steps=1):
    torch.manual_seed(0)
    desc = legacy.ModelDescription([legacy.IODescription("x", ["batch", 10], torch.float32),
                                    legacy.IODescription("label", ["batch"], torch.int64, num_classes=4)],
                                   [legacy.IODescription("loss", [], torch.float32),
                                    legacy.IODescription("probability", ["batch", 4], torch.float32)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = legacy.ORTTrainer(LegacyMLP(), lambda p, y: F.cross_entropy(p, y), desc, "SGDOptimizer", None,
                              legacy.IODescription("Learning_Rate", [1], torch.float32), torch.device("cpu"))
    g = torch.Generator().manual_seed(3)
    for _ in range(steps):
        t.train_step(torch.randn(8, 10, generator=g), torch.randint(0, 4, (8,), generator=g), torch.tensor([0.1]))
    return t


# ====================================================================== 2. no code from data files
class CreatesFile:
    """Unpickling it would call open(path, 'w'): the file appearing proves the pickle ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def evil_ort_pt(folder, prefix, marker):
    path = os.path.join(folder, f"{prefix}.ort.pt")
    torch.save({"model": {"w": torch.zeros(2)}, "epoch": CreatesFile(marker)}, path)
    return path


def test_experimental_load_checkpoint_runs_nothing_from_the_file(tmp_path):
    marker = tmp_path / "marker"
    path = evil_ort_pt(str(tmp_path), "ORT_checkpoint", marker)
    with pytest.raises(InvalidArgument, match=re.escape(path) + ".* refers to '.*open'"):
        ck.experimental_load_checkpoint(trained_trainer(), str(tmp_path))
    assert not marker.exists()


def test_legacy_load_checkpoint_runs_nothing_from_the_file(tmp_path):
    marker = tmp_path / "marker"
    path = evil_ort_pt(str(tmp_path), "legacy", marker)
    with pytest.raises(InvalidArgument, match=re.escape(path)):
        legacy.load_checkpoint(legacy_trainer(), str(tmp_path), "legacy")
    assert not marker.exists()


def test_ort_pt_loaders_refuse_torchscript_numpy_and_damage(tmp_path):
    t = trained_trainer()
    path = str(tmp_path / "ORT_checkpoint.ort.pt")
    torch.jit.script(torch.nn.Linear(2, 2)).save(path)  # torch.load would hand it to torch.jit.load
    with pytest.raises(InvalidArgument, match="TorchScript"):
        ck.experimental_load_checkpoint(t, str(tmp_path))
    torch.save({"model": {"w": torch.zeros(2)}, "extra": np.zeros(3)}, path)  # numpy's reduce is a global too
    with pytest.raises(InvalidArgument, match="numpy"):
        ck.experimental_load_checkpoint(t, str(tmp_path))
    torch.save({"model": {"w": torch.zeros(2)}}, path)
    with open(path, "rb") as f:
        whole = f.read()
    for damaged in (whole[:len(whole) // 2], os.urandom(300), b"", b"\x80\x02}q\x00."):
        with open(path, "wb") as f:
            f.write(damaged)
        with pytest.raises(InvalidArgument, match=re.escape(path)):
            ck.experimental_load_checkpoint(t, str(tmp_path))
    nested = []
    for _ in range(200):
        nested = [nested]
    torch.save({"model": {}, "deep": nested}, path)
    with pytest.raises(InvalidArgument, match="nested deeper"):
        ck.experimental_load_checkpoint(t, str(tmp_path))


def test_ort_pt_save_writes_only_what_the_loader_reads(tmp_path):
    t = trained_trainer()
    extra = {"epoch": 3, "lr": 0.25, "name": "run", "history": [1.5, None, True], "pair": (1, 2),
             "tensor": torch.arange(3)}
    ck.experimental_save_checkpoint(t, str(tmp_path), checkpoint_state_dict=dict(extra))
    # onnxruntime-training's loader is plain torch.load: the file holds nothing but plain data.
    raw = torch.load(str(tmp_path / "ORT_checkpoint.ort.pt"))
    assert {"fc1.weight", "Moment_1_fc1.weight"} <= set(raw["model"]) and raw["lr"] == 0.25
    back = ck.experimental_load_checkpoint(trained_trainer(seed=1), str(tmp_path))
    assert set(back) == set(extra) and back["lr"] == 0.25 and back["history"] == [1.5, None, True]
    assert back["pair"] == (1, 2) and torch.equal(back["tensor"], extra["tensor"])
    # What the loader would refuse is refused when saving, before a file is written.
    with pytest.raises(InvalidArgument, match=r"numpy.ndarray.*\['extra'\]"):
        ck.experimental_save_checkpoint(t, str(tmp_path), "other", checkpoint_state_dict={"extra": np.zeros(2)})
    with pytest.raises(InvalidArgument, match="CreatesFile"):
        legacy.save_checkpoint(legacy_trainer(), str(tmp_path), "other",
                               checkpoint_state_dict={"x": CreatesFile(tmp_path / "m")})
    assert not any(n.startswith("other") for n in os.listdir(tmp_path))


def test_orttrainer_checkpoint_with_pickled_array_is_refused(tmp_path):
    # An earlier version's .npz file (tests/python/data) with a pickled object array in it.
    with np.load(NPZ_CHECKPOINT) as z:
        arrays = {k: z[k] for k in z.files}
    name = next(k for k in arrays if k.endswith("fc1.bias"))
    arrays[name] = np.array([CreatesFile(tmp_path / "marker")], dtype=object)  # np.savez pickles it
    bad = str(tmp_path / "bad.ckpt")
    with open(bad, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(InvalidArgument, match=re.escape(bad)):
        trained_trainer(seed=1).load_checkpoint(bad)
    assert not (tmp_path / "marker").exists()
    # This version's format: a member stored as .npy bytes that hold a pickle.
    good = str(tmp_path / "good")
    trained_trainer().save_checkpoint(good)
    buf = io.BytesIO()
    np.save(buf, np.array([CreatesFile(tmp_path / "marker")], dtype=object), allow_pickle=True)

    def pickled_member(m, t):
        name = next(k for k in t if k.endswith("fc1.bias"))
        t[name] = np.frombuffer(buf.getvalue(), dtype=np.uint8)
        m["npy"].append(name)

    bad = rewrite(good, str(tmp_path / "bad_npy"), pickled_member)
    with pytest.raises(InvalidArgument, match=re.escape(bad)):
        trained_trainer(seed=1).load_checkpoint(bad)
    assert not (tmp_path / "marker").exists()


def test_no_unpickling_loader_in_the_package():
    """Every loader in python/onnxtrain: no torch.load, pickle.load(s) or np.load allowing pickles
    outside the allow-listing reader (onnxtrain/_plain_torch.py)."""
    found = []
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py") or name == "_plain_torch.py":
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
            for i, line in enumerate(lines, 1):
                code = line.split("#")[0]
                if re.search(r"(?<![\w.])_?torch(\(\))?\.load\(|pickle\.loads?\(|allow_pickle\s*=\s*True|\bUnpickler\(",
                             code) or \
                        (re.search(r"\bnp\.load\(|numpy\.load\(", code) and "allow_pickle=False" not in code):
                    found.append(f"{os.path.relpath(path, PACKAGE)}:{i}: {line.strip()}")
    assert not found, found


# ================================================================= 4. one export for every batch size
class CountExports:
    """Counts torch.onnx.export calls (the export ORTModule pays per graph)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = torch.onnx.export

        def counted(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(torch.onnx, "export", counted)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1, bias=False)  # BatchNorm cancels a bias: gradient 0
        self.bn = torch.nn.BatchNorm2d(6, momentum=0.3)
        self.fc = torch.nn.Linear(6 * 4 * 4, 5)

    def forward(self, x):
        h = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(h, 1))


def step_both(ort, module, ref, x):
    """One forward and backward through ORTModule and through PyTorch; the relative errors of the
    outputs, the input's gradient and every parameter's gradient."""
    for m in (module, ref):
        m.zero_grad()
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    a, b = ort(xa), ref(xb)
    (a * torch.linspace(-1, 1, a.numel()).view(a.shape)).sum().backward()
    (b * torch.linspace(-1, 1, b.numel()).view(b.shape)).sum().backward()
    errors = {"output": rel(a, b), "input grad": rel(xa.grad, xb.grad)}
    for (n, p), (_, q) in zip(module.named_parameters(), ref.named_parameters()):
        errors[n] = rel(p.grad, q.grad)
    return errors


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_one_export_serves_every_batch_size(monkeypatch, name):
    exports = CountExports(monkeypatch)
    torch.manual_seed(0)
    module, shape = (MLP(), (6,)) if name == "mlp" else (CNN(), (3, 8, 8))
    ref = copy.deepcopy(module)
    ort = ORTModule(module)
    for batch in (8, 5, 3, 8, 1):
        x = torch.randn((batch,) + shape)
        errors = step_both(ort, module, ref, x)
        assert max(errors.values()) < 1e-5, (batch, errors)
    assert exports.n == 1
    if name == "cnn":  # BatchNorm's running statistics follow PyTorch's at every batch size
        assert rel(module.bn.running_mean, ref.bn.running_mean) < 1e-5
        assert rel(module.bn.running_var, ref.bn.running_var) < 1e-5
        assert int(module.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked) == 5
    with torch.no_grad():  # the forward-only path too
        x = torch.randn((7,) + shape)
        assert rel(ort(x), ref(x)) < 1e-5
    assert exports.n == 1


class Rescaled(torch.nn.Module):
    """Its output depends on a Python attribute that the export bakes in: when it changes, the graph
    no longer agrees with PyTorch at the next batch size."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.scale = 1.0

    def forward(self, x):
        return self.fc(x) * self.scale


class Unbound(torch.nn.Module):
    """The export splits the batch into as many pieces as the exporting call had rows (an ONNX Split
    with fixed sizes, no TracerWarning): the graph cannot run at another batch size."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.stack(list(reversed(x.unbind(0)))))


def test_graph_failing_at_another_batch_size_falls_back_to_per_shape_export(monkeypatch):
    exports = CountExports(monkeypatch)
    torch.manual_seed(0)
    module = Unbound()
    ort = ORTModule(module)
    for batch in (4, 6, 4, 3, 6):
        errors = step_both(ort, module, copy.deepcopy(module), torch.randn(batch, 4))
        assert max(errors.values()) < 1e-5, errors
    assert exports.n == 3  # one per shape
    (why,) = ort._static_only.values()
    assert "fails at batch size 6" in why


def test_graph_disagreeing_at_another_batch_size_falls_back_to_per_shape_export(monkeypatch):
    exports = CountExports(monkeypatch)
    torch.manual_seed(0)
    module = Rescaled()
    ort = ORTModule(module)
    x = torch.randn(6, 4)
    assert rel(ort(x), module(x)) < 1e-6
    module.scale = 3.0
    for batch in (4, 2):
        x = torch.randn(batch, 4)
        errors = step_both(ort, module, copy.deepcopy(module), x)
        assert max(errors.values()) < 1e-5, errors
    assert exports.n == 3  # the dynamic one, then one per new shape
    (why,) = ort._static_only.values()
    assert "differs from PyTorch's" in why


class SumOver(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(1, 3)

    def forward(self, x):
        return self.fc(x.sum(1, keepdim=True))


def test_graph_cache_is_bounded(monkeypatch):
    exports = CountExports(monkeypatch)
    torch.manual_seed(0)
    module = SumOver()
    ort = ORTModule(module)
    limit = CACHE_LIMIT
    lengths = list(range(1, limit + 5))  # each length is another signature
    for n in lengths:
        x = torch.randn(3, n)
        assert rel(ort(x), module(x)) < 1e-6
        assert len(ort._graphs) <= limit
    assert exports.n == len(lengths) and len(ort._graphs) == limit
    ort(torch.randn(2, lengths[-1]))  # recently used: still cached (and serves another batch size)
    assert exports.n == len(lengths)
    x = torch.randn(3, lengths[0])  # evicted: exported again, still right
    assert rel(ort(x), module(x)) < 1e-6
    assert exports.n == len(lengths) + 1
    assert ORTModule.max_cached_graphs == CACHE_LIMIT


# ======================================================================== 5. the autograd contract
class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        if x.sum() > 0:  # data-dependent: the trace keeps the branch of the first call
            return self.fc(x) * 2
        return self.fc(x) - 1


def test_data_dependent_branch_surfaces_the_tracer_warning():
    torch.manual_seed(0)
    module = Branchy()
    ort = ORTModule(module)
    x = torch.rand(2, 4)
    with pytest.warns(torch.jit.TracerWarning, match="ORTModule.*Converting a tensor to a Python boolean") as rec:
        out = ort(x)
    assert rel(out, module(x)) < 1e-6
    w = next(w for w in rec if "ORTModule" in str(w.message))
    assert os.path.abspath(w.filename) == os.path.abspath(__file__)  # points at the `if`


class TanhOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.fc(x))  # PyTorch's backward reads the output


def test_inplace_change_of_output_before_backward_raises_as_in_pytorch():
    torch.manual_seed(0)
    module = TanhOut()
    for m in (copy.deepcopy(module), ORTModule(module)):
        y = m(torch.randn(5, 4))
        y.mul_(3)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_inplace_change_of_input_before_backward_raises_as_in_pytorch():
    torch.manual_seed(0)
    module = TanhOut()
    for m in (copy.deepcopy(module), ORTModule(module)):
        x = torch.randn(5, 4)
        y = m(x)  # the weight's gradient needs x
        x.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_unchanged_tensors_still_give_pytorch_gradients_after_saving_them():
    torch.manual_seed(0)
    module = TanhOut()
    ref = copy.deepcopy(module)
    errors = step_both(ORTModule(module), module, ref, torch.randn(5, 4))
    assert max(errors.values()) < 1e-5, errors


def test_concurrent_first_calls_from_threads():
    torch.manual_seed(0)
    modules = [MLP(), CNN()]
    refs = [copy.deepcopy(m) for m in modules]
    wrapped = [ORTModule(m) for m in modules]
    shapes = [(6,), (3, 8, 8)]
    n_threads = 8
    barrier = threading.Barrier(n_threads)
    results, errors = [None] * n_threads, []

    def work(i):
        k = i % 2
        g = torch.Generator().manual_seed(i)
        x = torch.randn((2 + i,) + shapes[k], generator=g, requires_grad=True)
        try:
            barrier.wait()
            out = wrapped[k](x)
            (gx,) = torch.autograd.grad((out * out).sum(), x)
            results[i] = (k, x.detach(), out.detach(), gx)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for k, x, out, gx in results:
        # Training mode: BatchNorm normalizes with the batch's own statistics, so PyTorch's result
        # does not depend on the running buffers the threads updated.
        xr = x.clone().requires_grad_(True)
        ref_out = refs[k](xr)
        (ref_gx,) = torch.autograd.grad((ref_out * ref_out).sum(), xr)
        assert rel(out, ref_out) < 1e-5 and rel(gx, ref_gx) < 1e-5


# ======================================================================= 6. checkpoint files
BAD_PREFIXES = ["../escaped", "sub/name", "/abs/name", "", "..", "a\0b", "back\\slash"]


@pytest.mark.parametrize("prefix", BAD_PREFIXES)
def test_checkpoint_prefix_cannot_leave_the_directory(tmp_path, prefix):
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "sub").mkdir()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    t = trained_trainer()
    with pytest.raises(InvalidArgument, match="checkpoint_prefix"):
        ck.experimental_save_checkpoint(t, str(inner), checkpoint_prefix=prefix)
    with pytest.raises(InvalidArgument, match="checkpoint_prefix"):
        legacy.save_checkpoint(legacy_trainer(), str(inner), checkpoint_prefix=prefix)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert not os.path.exists("/abs/name.ort.pt")


def same(a, b):
    """Equal values of equal types, recursively (numpy arrays and tensors by dtype, shape, values)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(type(k) is type(kb) for k, kb in zip(a, b)) and \
            all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a == b
    return a == b


def test_user_dict_keys_holding_slashes_round_trip(tmp_path):
    user = {"a/b": 1, "a": {"b": 2}}  # both were saved under "user/a/b"
    t = trained_trainer()
    t.save_checkpoint(str(tmp_path / "ck"), user_dict=copy.deepcopy(user))
    assert t.load_checkpoint(str(tmp_path / "ck")) == user


def test_user_dict_round_trips_exactly(tmp_path):
    user = {"a/b": 1, "a": {"b": 2, "a%2Fb": 3}, "%": "percent", 7: "int key", 2.5: "float key", None: "none",
            True: [1, (2, 3), [4.5, None]], "arrays": {"f": np.arange(6, dtype=np.float32).reshape(2, 3),
                                                       "s": np.array(["x", "yz"]), "scalar": np.float16(1.5)},
            "tensors": [torch.arange(4), torch.ones(2, dtype=torch.bfloat16), torch.tensor([True, False])],
            "empty": {}, "nested": [{"x": [{"y": ()}]}]}
    t = trained_trainer()
    path = str(tmp_path / "ck")
    t.save_checkpoint(path, user_dict=copy.deepcopy(user))
    back = trained_trainer(seed=3).load_checkpoint(path)
    assert same(back, user), back
    # the state round-trips too: the loaded trainer holds the saved weights (numpy's view)
    other = trained_trainer(seed=3)
    other.load_checkpoint(path)
    for k, v in t.state_dict()["model"]["full_precision"].items():
        np.testing.assert_array_equal(other.state_dict()["model"]["full_precision"][k], v)


def test_checkpoint_of_an_earlier_version_loads(tmp_path):
    """tests/python/data/orttrainer_checkpoint_v2.npz, written by onnxtrain before checkpoints moved
    to the C++ container (commit b77af5c), loads: weights, optimizer state, counters and user_dict
    as numpy reads them from the archive; saved again, the new file holds the same."""
    with np.load(NPZ_CHECKPOINT) as z:
        arrays = {k: z[k] for k in z.files}
    t = trained_trainer(seed=3)
    user = t.load_checkpoint(NPZ_CHECKPOINT)
    expected_user = {"epoch": 3, "note": "written by onnxtrain b77af5c", "history": [0.5, 0.25],
                     "seen": np.arange(4, dtype=np.int64), "scale": torch.tensor([1.5, 2.0]), "pair": (1, None)}
    assert same(user, expected_user), user
    state = t.state_dict()
    assert state["train_step_info"] == {"optimization_step": 2, "step": 2}
    for w, v in state["model"]["full_precision"].items():
        # written before the weights lost the export wrapper's "model." prefix (onnxruntime's names)
        np.testing.assert_array_equal(v, arrays[f"state/model/full_precision/model.{w}"])
    for w, states in state["optimizer"].items():
        for k, v in states.items():
            src = w if w == "shared_optimizer_state" else f"model.{w}"
            np.testing.assert_array_equal(v, arrays[f"state/optimizer/{src}/{k}"])
    again = str(tmp_path / "again")
    t.save_checkpoint(again, user_dict=user)
    with open(again, "rb") as f:
        assert f.read(16) == b"ONNXTRAIN-CKPT\0\0"
    back = trained_trainer(seed=4)
    assert same(back.load_checkpoint(again), expected_user)
    for w, v in back.state_dict()["model"]["full_precision"].items():
        # written before the weights lost the export wrapper's "model." prefix (onnxruntime's names)
        np.testing.assert_array_equal(v, arrays[f"state/model/full_precision/model.{w}"])


def test_user_dict_that_cannot_round_trip_is_refused_at_save(tmp_path):
    t = trained_trainer()
    deep = {}
    for _ in range(100):
        deep = {"d": deep}
    loop = []
    loop.append(loop)
    for user, error, match in (({"obj": object()}, TypeError, r"user\['obj'\].*builtins.object"),
                               ({(1, 2): 3}, TypeError, "key of type tuple"),
                               ({"o": np.array([None, 1], dtype=object)}, TypeError, "Python objects"),
                               ({"s": {1, 2}}, TypeError, "builtins.set"),
                               (deep, InvalidArgument, "nested deeper"),
                               ({"loop": loop}, InvalidArgument, "nested deeper")):
        path = tmp_path / "refused"
        with pytest.raises(error, match=match):
            t.save_checkpoint(str(path), user_dict=user)
        assert not path.exists() and os.listdir(tmp_path) == []


NPZ_CHECKPOINT = os.path.join(os.path.dirname(__file__), "data", "orttrainer_checkpoint_v2.npz")


def rewrite(good, path, change, kind=None):
    """Writes to ``path`` the checkpoint ``good`` after ``change(index, tensors)`` (dicts, changed in
    place), as onnxtrain's checkpoint container, and returns ``path``."""
    k, counters, text, tensors = onnxtrain._C.read_checkpoint_file(good)
    index, tensors = json.loads(text["index"]), dict(tensors)
    change(index, tensors)
    onnxtrain._C.write_checkpoint_file(path, k if kind is None else kind, counters, {"index": json.dumps(index)},
                                       list(tensors.items()))
    return path


def damaged_ckpt_files(good, tmp_path):
    """(description, path) of damaged variants of ``good``, a file of this version's save_checkpoint."""
    with open(good, "rb") as f:
        data = f.read()

    def raw(name, content):
        path = str(tmp_path / name)
        with open(path, "wb") as f:
            f.write(content)
        return path

    def flipped(at):
        b = bytearray(data)
        b[at] ^= 0x40
        return bytes(b)

    def weight(t):
        return next(k for k in t if k.endswith("fc1.weight"))

    def index_text(name, text):
        k, counters, _, tensors = onnxtrain._C.read_checkpoint_file(good)
        path = str(tmp_path / name)
        onnxtrain._C.write_checkpoint_file(path, k, counters, {"index": text}, tensors)
        return path

    return [
        ("truncated", raw("c_truncated", data[:len(data) // 2])),
        ("truncated tail", raw("c_tail", data[:-10])),
        ("a byte of tensor data flipped", raw("c_data", flipped(len(data) - 100))),
        ("a byte of the header flipped", raw("c_header", flipped(40))),
        ("magic only", raw("c_magic", data[:16])),
        ("a weight tensor missing", rewrite(good, str(tmp_path / "c_missing"), lambda m, t: t.pop(weight(t)))),
        ("a weight of another kind", rewrite(good, str(tmp_path / "c_strings"),
                                             lambda m, t: (t.update({weight(t): np.zeros(3, np.uint8)}),
                                                           m["npy"].append(weight(t))))),
        ("another writer's checkpoint", rewrite(good, str(tmp_path / "c_kind"), lambda m, t: None, kind="")),
        ("the index not JSON", index_text("c_garbage", "{not json")),
        ("the index missing a format", index_text("c_noformat", json.dumps({"root": {"dict": []}}))),
        ("the index a JSON list", index_text("c_list", "[1, 2]")),
        ("index entries of the wrong type", rewrite(good, str(tmp_path / "c_bad_keys"),
                                                    lambda m, t: m.update(root={"dict": 5}))),
        ("npy members malformed", rewrite(good, str(tmp_path / "c_npy"), lambda m, t: m.update(npy=5))),
        ("JSON nested 100000 deep", index_text("c_deeper", '{"format": "onnxtrain.checkpoint_storage/1", '
                                               '"root": ' + "[" * 100000 + "]" * 100000 + "}")),
    ]


def damaged_files(good, tmp_path):
    """(description, path) of damaged variants of the checkpoint file ``good``."""
    with open(good, "rb") as f:
        data = f.read()
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes())
    weight = next(k for k in arrays if k.endswith("fc1.weight"))

    def npz(name, **changes):
        a = dict(arrays)
        for k, v in changes.items():
            k = {"META": "__meta__", "WEIGHT": weight}.get(k, k)
            if v is None:
                del a[k]
            else:
                a[k] = v
        path = str(tmp_path / name)
        with open(path, "wb") as f:
            np.savez(f, **a)
        return path

    def raw(name, content):
        path = str(tmp_path / name)
        with open(path, "wb") as f:
            f.write(content)
        return path

    def with_meta(name, m):
        return npz(name, META=np.frombuffer(json.dumps(m).encode(), dtype=np.uint8))

    text = json.dumps(meta)
    deep = {"dict": []}
    for _ in range(100):
        deep = {"dict": [["k", deep]]}
    bad_keys = copy.deepcopy(meta)
    bad_keys["state"] = {"dict": 5}
    member = io.BytesIO()
    with zipfile.ZipFile(member, "w") as z:  # a valid zip archive, no checkpoint entries
        z.writestr("readme.txt", "hello")
    return [
        ("truncated", raw("truncated", data[:len(data) // 2])),
        ("truncated tail", raw("tail", data[:-10])),
        ("random bytes", raw("random", os.urandom(2000))),
        ("random bytes after a zip signature", raw("random_pk", b"PK\x03\x04" + os.urandom(2000))),
        ("empty", raw("empty", b"")),
        ("a zip without entries of a checkpoint", raw("zip", member.getvalue())),
        ("a weight array missing", npz("missing", WEIGHT=None)),
        ("the index missing", npz("no_meta", META=None)),
        ("the index as float64", npz("meta_float", META=np.frombuffer(json.dumps(meta).encode(),
                                                                      dtype=np.uint8).astype(np.float64))),
        ("the index not JSON", npz("meta_garbage", META=np.frombuffer(b"\xff{not json", dtype=np.uint8))),
        ("the index a JSON list", with_meta("meta_list", [1, 2])),
        ("another format", with_meta("format", dict(meta, format="something/9"))),
        ("index entries of the wrong type", with_meta("bad_keys", bad_keys)),
        ("a weight of strings", npz("strings", WEIGHT=np.array(["a", "b"]))),
        ("structures nested 100 deep", with_meta("deep", dict(meta, user=deep))),
        ("JSON nested 100000 deep", npz("deeper", META=np.frombuffer(
            (b'{"format": "onnxtrain.ORTTrainer.checkpoint/2", "state": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
            dtype=np.uint8))),
    ] + ([("a step counter of strings", with_meta("tsi", json.loads(text.replace(
        '["optimization_step", {"value": 2}]', '["optimization_step", {"value": "2"}]'))))]
         if '["optimization_step", {"value": 2}]' in text else [])


def test_damaged_orttrainer_checkpoints_raise_one_error_naming_the_file(tmp_path):
    good = str(tmp_path / "good")
    trained_trainer().save_checkpoint(good)
    target = trained_trainer(seed=1)
    target.load_checkpoint(good)  # the originals load: this version's file and an earlier one's
    target.load_checkpoint(NPZ_CHECKPOINT)
    for what, path in damaged_ckpt_files(good, tmp_path) + damaged_files(NPZ_CHECKPOINT, tmp_path):
        for load in (target.load_checkpoint, lambda p: ck.to_pytorch_state_dict(p),
                     lambda p: ck.average_checkpoints([p, p])):
            with pytest.raises(InvalidArgument, match=re.escape(path)) as e:
                load(path)
            assert isinstance(e.value, ValueError), what  # InvalidArgument is also a ValueError
    # Well-formed, but not this model's: a weight of another shape and dtype.
    with np.load(NPZ_CHECKPOINT) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[next(k for k in arrays if k.endswith("fc1.weight"))] = np.zeros((2, 2))
    other = str(tmp_path / "other_model")
    with open(other, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(InvalidArgument, match=re.escape(other)):
        target.load_checkpoint(other)
    # Well-formed, a weight left out of its index: a strict load names the file too.
    meta = json.loads(arrays["__meta__"].tobytes())
    model = dict(meta["state"]["dict"])["model"]
    weights = dict(model["dict"])["full_precision"]["dict"]
    assert weights[0][0].endswith("weight") or weights[0][0].endswith("bias")
    del weights[0]
    with np.load(NPZ_CHECKPOINT) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    fewer = str(tmp_path / "fewer")
    with open(fewer, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(InvalidArgument, match=re.escape(fewer) + ".*missing"):
        target.load_checkpoint(fewer)
    # The same two in this version's format.
    def other_shape(m, t):
        t[next(k for k in t if k.endswith("fc1.weight"))] = np.zeros((2, 2))

    def drop_first_weight(m, t):
        del dict(dict(m["root"]["dict"])["model"]["dict"])["full_precision"]["dict"][0]

    other = rewrite(good, str(tmp_path / "c_other_model"), other_shape)
    with pytest.raises(InvalidArgument, match=re.escape(other)):
        target.load_checkpoint(other)
    fewer = rewrite(good, str(tmp_path / "c_fewer"), drop_first_weight)
    with pytest.raises(InvalidArgument, match=re.escape(fewer) + ".*missing"):
        target.load_checkpoint(fewer)
