"""Data-parallel training over MPI (loopback: `mpirun --oversubscribe -np N` on this machine).

Each test launches tests/python/mpi/mpi_cases.py (or the CLI) under mpirun and compares what the
ranks wrote with an independent reference: the same training on one process with the global
batch, numpy's Adasum formula over per-rank gradients, the ranks' weights with each other.
OpenMPI comes from scripts/install_deps.sh --tests (openmpi-bin, libopenmpi-dev): without mpirun these
tests fail, they are not skipped.
"""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "mpi", "mpi_cases.py")
CLI = os.environ.get("ONNXTRAIN_CLI") or shutil.which("onnxtrain")
sys.path.insert(0, os.path.join(HERE, "mpi"))
import mpi_cases  # noqa: E402


def mpirun(n, *args, timeout=240, env=None):
    exe = shutil.which("mpirun")
    assert exe, "mpirun is missing: run scripts/install_deps.sh --tests (openmpi-bin, libopenmpi-dev)"
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    return subprocess.run([exe, "--allow-run-as-root", "--oversubscribe", "-np", str(n), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=e)


def ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}"
    return r


def case(n, name, out, *args, **kw):
    return mpirun(n, sys.executable, CASES, name, out, *args, **kw)


def load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def assert_same_weights(a, b, rtol):
    assert a.keys() == b.keys()
    for k in a:
        scale = np.abs(a[k]).max()
        err = np.abs(a[k].astype(np.float64) - b[k]).max() / scale
        assert err <= rtol, f"{k}: relative difference {err:.3g} > {rtol}"


@pytest.mark.parametrize("options", [[], ["gradient_accumulation_steps=2"],
                                     ["gradient_accumulation_steps=2", "allreduce_post_accumulation=1"]],
                         ids=["plain", "accumulate", "post_accumulation"])
def test_two_ranks_match_one_rank_with_the_global_batch(tmp_path, options):
    """2 ranks x 8 rows = 1 rank x 16 rows after 20 Adam steps (1e-5 relative); ranks bitwise equal."""
    ok(case(1, "train", tmp_path, *options))
    ok(case(2, "train", tmp_path, *options))
    one = load(tmp_path / "weights_1_0.npz")
    r0, r1 = load(tmp_path / "weights_2_0.npz"), load(tmp_path / "weights_2_1.npz")
    assert_same_weights(one, r0, 1e-5)
    for k in r0:
        assert r0[k].tobytes() == r1[k].tobytes(), f"{k} differs between the ranks"
    moved = max(np.abs(one[k] - v).max() for k, v in load_initial().items())
    assert moved > 1e-3, "training moved the weights"
    # Communication: the start-up comparison (2 collectives), then one bucket (the model is small)
    # per run, or per update with allreduce_post_accumulation.
    collectives, nbytes = map(float, (tmp_path / "stats_2_0.txt").read_text().split()[:2])
    per_step = 2 if "allreduce_post_accumulation=1" not in options and "gradient_accumulation_steps=2" in options else 1
    assert collectives == 2 + 20 * per_step
    n_params = sum(v.size for v in one.values())
    assert nbytes >= 20 * per_step * 4 * n_params


@pytest.mark.parametrize("zero", [0, 1], ids=["stage0", "zero1"])
def test_fp16_loss_scaling_under_data_parallelism(tmp_path, zero):
    """fp16 with the session's dynamic loss scaler: every rank checks the same reduced gradients, so
    the ranks skip the same updates and stay bitwise equal; the result tracks one process with the
    global batch (within float16's rounding of the per-shard products)."""
    opts = ["mixed_precision=fp16", f"deepspeed_zero_stage={zero}"]
    ok(case(1, "train", tmp_path, "mixed_precision=fp16"))
    ok(case(2, "train", tmp_path, *opts))
    tag = "_zero" if zero else ""
    one = load(tmp_path / "weights_1_0.npz")
    r0, r1 = load(tmp_path / f"weights{tag}_2_0.npz"), load(tmp_path / f"weights{tag}_2_1.npz")
    for k in r0:
        assert r0[k].tobytes() == r1[k].tobytes(), f"{k} differs between the ranks"
    assert_same_weights(one, r0, 5e-3)
    moved = max(np.abs(one[k] - v).max() for k, v in load_initial().items())
    assert moved > 1e-3


def test_small_buckets_start_during_the_backward_pass(tmp_path):
    """64-byte buckets: one reduction per gradient, each started right after the backward node that
    computes it (before the rest of the backward pass), and the same weights as one process."""
    ok(case(1, "train", tmp_path))
    ok(case(2, "train", tmp_path, "bucket:64"))
    assert_same_weights(load(tmp_path / "weights_1_0.npz"), load(tmp_path / "weights_2_0.npz"), 1e-5)
    nodes = onnx.load(str(tmp_path / "training_graph.onnx")).graph.node
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    starts = [i for i, n in enumerate(nodes) if n.op_type == "GradientReduceStart"]
    backward = [i for i, n in enumerate(nodes) if n.name.startswith("grad_") and n.op_type != "Identity"]
    assert len(starts) == 4, [nodes[i].op_type for i in starts]
    assert starts[0] < backward[-1], "the first reduction waits for the whole backward pass"
    for i in starts:  # right after the producer of its gradient (the gradient's own backward node)
        assert producer[nodes[i].input[1]] == i - 1 and nodes[i - 1].name.startswith("grad_"), nodes[i - 1].name
    collectives = float((tmp_path / "stats_2_0.txt").read_text().split()[0])
    assert collectives == 2 + 20 * 4


@pytest.mark.parametrize("options", [[], ["enable_grad_norm_clip=1", "max_grad_norm=0.05"],
                                     ["gradient_accumulation_steps=2", "training_optimizer_name=MomentumOptimizer"]],
                         ids=["adam", "clipped", "momentum_accumulated"])
def test_zero_stage1_matches_stage0_with_half_the_optimizer_state(tmp_path, options):
    ok(case(2, "train", tmp_path, *options))
    ok(case(2, "train", tmp_path, "deepspeed_zero_stage=1", *options))
    for rank in (0, 1):
        zero, full = load(tmp_path / f"weights_zero_2_{rank}.npz"), load(tmp_path / f"weights_2_{rank}.npz")
        for k in full:
            assert zero[k].tobytes() == full[k].tobytes(), f"{k} (rank {rank}) differs from stage 0"
    full_bytes = int((tmp_path / "optstate_2_0.txt").read_text())
    parts = [int((tmp_path / f"optstate_zero_2_{r}.txt").read_text()) for r in (0, 1)]
    assert sum(parts) == full_bytes
    assert max(parts) <= full_bytes // 2 + 16, (parts, full_bytes)


@pytest.mark.parametrize("options, error", [
    (["deepspeed_zero_stage=1", "training_optimizer_name=LambOptimizer"],
     "NotImplementedError: deepspeed_zero_stage 1 with LambOptimizer"),
    (["world_size=3"], "ValueError: TrainingParameters.world_size is 3 but the MPI job has 2 ranks"),
    (["horizontal_parallel_size=2"], "NotImplementedError: TrainingParameters.horizontal_parallel_size = 2"),
])
def test_options_refused_under_mpirun(tmp_path, options, error):
    ok(case(2, "construct", tmp_path, *options))
    for rank in (0, 1):
        message = (tmp_path / f"construct_{rank}.txt").read_text()
        assert message.startswith(error), message


@pytest.mark.parametrize("zero", [0, 1], ids=["stage0", "zero1"])
def test_checkpoints_resume_on_the_same_or_another_number_of_ranks(tmp_path, zero):
    opts = [f"deepspeed_zero_stage={zero}"]
    ok(case(2, "ckpt", tmp_path, "save", *opts))
    files = ckpt_files(tmp_path)
    assert files == (["ckpt", *shard_names(files, 2)] if zero else ["ckpt"]), files
    uninterrupted = load(tmp_path / "save_2_0.npz")
    ok(case(2, "ckpt", tmp_path, "resume", *opts))  # same number of ranks: bitwise the same
    for k, v in load(tmp_path / "resume_2_1.npz").items():
        assert v.tobytes() == uninterrupted[k].tobytes(), k
    ok(case(1, "ckpt", tmp_path, "resume"))  # one rank (a ZeRO checkpoint's shards merged)
    assert_same_weights(uninterrupted, load(tmp_path / "resume_1_0.npz"), 1e-5)


def ckpt_files(d, prefix="ckpt"):
    return sorted(f.name for f in d.iterdir() if f.name.startswith(prefix))


def shard_names(files, world):
    """The shards among `files`, checked to be one generation's "<name>.g<8 hex>.rank<r>-of-<world>"."""
    import re
    shards = [f for f in files if re.fullmatch(r".+\.g[0-9a-f]{8}\.rank[0-9]+-of-[0-9]+", f)]
    gens = {f.split(".")[-2] for f in shards}
    assert len(shards) == world and len(gens) == 1, files
    assert sorted(f.rsplit(".", 1)[1] for f in shards) == [f"rank{r}-of-{world}" for r in range(world)], files
    return shards


def test_a_partitioned_checkpoint_missing_a_shard_is_refused(tmp_path):
    ok(case(2, "ckpt", tmp_path, "save", "deepspeed_zero_stage=1"))
    missing = shard_names(ckpt_files(tmp_path), 2)[1]
    os.remove(tmp_path / missing)
    r = case(1, "ckpt", tmp_path, "resume")
    assert r.returncode != 0 and missing in r.stderr, r.stderr[-2000:]


def test_a_save_cut_off_before_its_manifest_keeps_the_previous_checkpoint(tmp_path):
    """A second save writes new shards beside the old ones and replaces the manifest last, then removes
    the old shards. A save killed after its shards but before its manifest (rebuilt here: the first
    manifest and shards, plus the second save's shards) resumes the first checkpoint exactly."""
    opts = ["deepspeed_zero_stage=1"]
    ok(case(2, "ckpt", tmp_path, "save", *opts))
    first = {f: (tmp_path / f).read_bytes() for f in ckpt_files(tmp_path)}
    uninterrupted = load(tmp_path / "save_2_0.npz")
    ok(case(2, "ckpt", tmp_path, "save", *opts))  # the same checkpoint saved again: a new generation
    second = ckpt_files(tmp_path)
    assert len(second) == 3 and not set(shard_names(second, 2)) & set(first), (sorted(first), second)
    for f, data in first.items():  # the crash: the first manifest and shards, the second's shards
        (tmp_path / f).write_bytes(data)
    ok(case(2, "ckpt", tmp_path, "resume", *opts))
    for k, v in load(tmp_path / "resume_2_1.npz").items():
        assert v.tobytes() == uninterrupted[k].tobytes(), k


@pytest.mark.parametrize("how", ["launcher", "explicit"])
def test_orttrainer_under_mpirun_matches_one_process(tmp_path, how):
    ok(case(1, "orttrainer", tmp_path))
    ok(case(2, "orttrainer", tmp_path, how))
    one, r0, r1 = (load(tmp_path / f"orttrainer_{w}_{r}.npz") for w, r in ((1, 0), (2, 0), (2, 1)))
    assert_same_weights(one, r0, 1e-5)
    for k in r0:
        assert r0[k].tobytes() == r1[k].tobytes(), k


def test_zero_stage1_state_falls_as_one_over_the_ranks(tmp_path):
    ok(case(1, "train", tmp_path))
    ok(case(4, "train", tmp_path, "deepspeed_zero_stage=1"))
    full = int((tmp_path / "optstate_1_0.txt").read_text())
    parts = [int((tmp_path / f"optstate_zero_4_{r}.txt").read_text()) for r in range(4)]
    assert sum(parts) == full and max(parts) <= full / 4 + 16, (parts, full)
    assert_same_weights(load(tmp_path / "weights_1_0.npz"), load(tmp_path / "weights_zero_4_3.npz"), 1e-5)


def test_orttrainer_zero_checkpoints_of_every_rank_aggregate(tmp_path):
    """ORTTrainer with ZeRO stage 1 on 2 ranks; load_checkpoint(*paths) of both ranks' files in one
    process continues as the 2-rank run did."""
    ok(case(2, "ortckpt", tmp_path, "save"))
    ok(case(1, "ortckpt", tmp_path, "resume", 2))
    assert_same_weights(load(tmp_path / "ortckpt_save_2_0.npz"), load(tmp_path / "ortckpt_resume_1_0.npz"), 1e-5)


def test_the_debug_weight_check_names_a_diverged_weight(tmp_path):
    ok(case(2, "diverge", tmp_path, env={"ONNXTRAIN_CHECK_WEIGHTS_EVERY": "1"}))
    for rank in (0, 1):
        text = (tmp_path / f"diverge_{rank}.txt").read_text()
        assert text.startswith("step 3: ") and "rank 1 differs from rank 0 in weight 'B2'" in text, text
    r = ok(case(2, "train", tmp_path, env={"ONNXTRAIN_CHECK_WEIGHTS_EVERY": "1"}))  # in step: no error


def load_initial():
    m = onnx.load_from_string(mpi_cases.mlp_with_loss())
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


def local_gradients(world):
    """Each rank's gradient of its shard, computed here in one process."""
    p = mpi_cases.params_from(["training_optimizer_name=SGDOptimizer"])
    p.set_gradients_as_graph_outputs = True
    X, Y = mpi_cases.data(1, 16)
    shard = 16 // world
    names = ["W1", "B1", "W2", "B2"]
    grads = []
    for r in range(world):
        sess = onnxtrain.TrainingSession(mpi_cases.mlp_with_loss(), p)
        rows = slice(r * shard, (r + 1) * shard)
        out = sess.run([n + "_grad" for n in names],
                       {"X": X[0, rows], "label": Y[0, rows], "Learning_Rate": np.array([0.0], np.float32)})
        grads.append({n: np.asarray(g, np.float64) for n, g in zip(names, out)})
    return grads


def adasum_reference(vectors):
    """The paper's formula over a binary tree of the ranks, in float64."""
    def pair(a, b):
        dot, na, nb = float(a @ b), float(a @ a), float(b @ b)
        ca = 1 - dot / (2 * na) if na > 0 else 1.0
        cb = 1 - dot / (2 * nb) if nb > 0 else 1.0
        return ca * a + cb * b
    while len(vectors) > 1:
        vectors = [pair(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


@pytest.mark.parametrize("world", [2, 4])
def test_adasum_matches_its_formula(tmp_path, world):
    ok(case(world, "adasum", tmp_path))
    w0 = load_initial()
    grads = local_gradients(world)
    results = [load(tmp_path / f"adasum_{world}_{r}.npz") for r in range(world)]
    for k in w0:
        ref = adasum_reference([g[k].ravel() for g in grads]).reshape(w0[k].shape)
        step = w0[k].astype(np.float64) - results[0][k]  # SGD, learning rate 1
        np.testing.assert_allclose(step, ref, rtol=1e-4, atol=1e-6, err_msg=k)
        plain_mean = np.mean([g[k] for g in grads], axis=0)
        if world == 2 and k == "W1":
            assert np.abs(ref - plain_mean).max() > 1e-4, "the test tells Adasum from the mean"
        for r in range(1, world):
            assert results[r][k].tobytes() == results[0][k].tobytes()


def test_adasum_needs_a_power_of_two(tmp_path):
    r = case(3, "adasum", tmp_path)
    assert r.returncode != 0
    assert "Adasum needs a power-of-two number of ranks" in r.stdout + r.stderr


@pytest.mark.parametrize("what, named", [("weights", "initializer 'W1'"),
                                         ("options", "TrainingParameters.training_optimizer_name")])
def test_a_rank_with_another_model_or_options_is_refused(tmp_path, what, named):
    ok(case(2, "mismatch", tmp_path, what))
    for rank in (0, 1):
        message = (tmp_path / f"mismatch_{rank}.txt").read_text()
        assert f"rank 1 differs from rank 0 in {named}" in message, message


@pytest.mark.parametrize("fault", ["dead", "stalled"])
def test_a_dead_or_stalled_rank_stops_the_others(tmp_path, fault):
    t0 = time.monotonic()
    r = case(2, "fault", tmp_path, fault, timeout=120, env={"ONNXTRAIN_COMM_TIMEOUT": "10"})
    elapsed = time.monotonic() - t0
    assert r.returncode != 0
    assert elapsed < 60, f"the job took {elapsed:.0f} s to stop"
    text = r.stdout + r.stderr
    if fault == "stalled":
        assert "did not complete within 10 s" in text and "rank 0 of 2" in text, text[-3000:]
    else:
        assert "signal 9" in text or "did not complete within" in text, text[-3000:]


def test_parallel_options_not_implemented_are_refused():
    for field in ("horizontal_parallel_size", "pipeline_parallel_size"):
        p = mpi_cases.params_from([f"{field}=2"])
        with pytest.raises(NotImplementedError, match=f"TrainingParameters.{field} = 2"):
            onnxtrain.TrainingSession(mpi_cases.mlp_with_loss(), p)


def test_world_size_without_a_launcher_is_refused():
    p = mpi_cases.params_from(["world_size=2"])
    with pytest.raises(ValueError, match="not started by an MPI launcher"):
        onnxtrain.TrainingSession(mpi_cases.mlp_with_loss(), p)


def test_cli_under_mpirun_matches_one_process(tmp_path):
    """`mpirun -np 2 onnxtrain train` with --batch-size 8 = `onnxtrain train` with --batch-size 8."""
    rng = np.random.default_rng(0)
    W = (0.3 * rng.standard_normal((4, 2))).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])], "m",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])], [numpy_helper.from_array(W, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    X = rng.standard_normal((43, 4)).astype(np.float32)  # 5 full batches and one of 3 rows
    np.savez(tmp_path / "d.npz", X=X, label=np.tanh(X @ rng.standard_normal((4, 2))).astype(np.float32))
    args = ["train", tmp_path / "m.onnx", "--data", tmp_path / "d.npz", "--loss", "squared_error", "--optimizer",
            "adam", "--lr", 0.01, "--batch-size", 8, "--epochs", 3, "--seed", 3, "--progress", "none"]
    one = subprocess.run([CLI, *map(str, args), "--out", tmp_path / "one.onnx"], capture_output=True, text=True,
                         timeout=120)
    assert one.returncode == 0, one.stderr
    two = ok(mpirun(2, CLI, *args, "--out", tmp_path / "two.onnx"))
    assert "on 2 ranks" in two.stdout and two.stdout.count("== summary") == 1, two.stdout
    # ZeRO stage 1 from the command line, with its partitioned checkpoint.
    zero = ok(mpirun(2, CLI, *args, "--zero-stage", 1, "--out", tmp_path / "zero.onnx", "--checkpoint-dir",
                     tmp_path / "ck"))
    files = ckpt_files(tmp_path / "ck", "last.ckpt")
    assert files == ["last.ckpt", *shard_names(files, 2)], files
    a, b, z = ({i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / f)).graph.initializer}
               for f in ("one.onnx", "two.onnx", "zero.onnx"))
    assert_same_weights(a, b, 1e-5)
    assert b["W"].tobytes() == z["W"].tobytes()
    assert np.abs(a["W"] - W).max() > 1e-3


@pytest.mark.parametrize("what, message", [
    ("rows", "data-parallel ranks disagree on the training data: rank 0 has 96 samples, rank 1 has 64 samples"),
    ("shape", "data-parallel ranks disagree on training array 'X': rank 0 has float samples of shape [4, 3], "
              "rank 1 has float samples of shape [5, 3]"),
])
def test_ranks_given_different_data_all_fail_at_the_start_of_fit(tmp_path, what, message):
    """Rank 1 gets fewer rows, or rows of another shape: every rank's fit raises the same
    InvalidArgument naming the difference and each rank's value, at once (not after the 60 s
    communication timeout), and every rank exits non-zero; none reports success."""
    t0 = time.monotonic()
    r = case(2, "fitdata", tmp_path, what, timeout=180)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0, r.stdout[-2000:] + r.stderr[-2000:]
    for rank in (0, 1):
        text = (tmp_path / f"fitdata_{rank}.txt").read_text()
        assert message in text, f"rank {rank}: {text}"
    assert elapsed < 40, f"the job took {elapsed:.0f} s to stop"
    ok(case(2, "fitdata", tmp_path, "same"))  # the same data on both ranks: fit runs
    assert all((tmp_path / f"fitdata_{rank}.txt").read_text() == "no error" for rank in (0, 1))


def test_cli_ranks_given_different_data_fail_naming_it(tmp_path):
    """`mpirun -np 1 onnxtrain train --data a.npz : -np 1 onnxtrain train --data b.npz` with b.npz
    shorter: the job fails at once with the difference named (not rank 0 succeeding while rank 1
    times out blaming a dead rank)."""
    rng = np.random.default_rng(0)
    W = (0.3 * rng.standard_normal((4, 2))).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["y"])], "m",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])], [numpy_helper.from_array(W, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    for name, n in (("a", 96), ("b", 64)):
        X = rng.standard_normal((n, 4)).astype(np.float32)
        np.savez(tmp_path / f"{name}.npz", X=X, label=(X @ W).astype(np.float32))
    common = [tmp_path / "m.onnx", "--loss", "squared_error", "--optimizer", "sgd", "--lr", 0.01, "--batch-size", 16,
              "--epochs", 2, "--progress", "none", "--out", tmp_path / "out.onnx"]
    exe = shutil.which("mpirun")
    t0 = time.monotonic()
    r = subprocess.run([exe, "--allow-run-as-root", "--oversubscribe",
                        "-np", "1", CLI, "train", *map(str, common), "--data", str(tmp_path / "a.npz"), ":",
                        "-np", "1", CLI, "train", *map(str, common), "--data", str(tmp_path / "b.npz")],
                       capture_output=True, text=True, timeout=180)
    elapsed = time.monotonic() - t0
    text = r.stdout + r.stderr
    assert r.returncode != 0, text[-3000:]
    assert "rank 0 has 96 samples, rank 1 has 64 samples" in text, text[-3000:]
    assert "did not complete within" not in text, text[-3000:]
    assert elapsed < 40, f"the job took {elapsed:.0f} s to stop"
    assert not (tmp_path / "out.onnx").exists()
