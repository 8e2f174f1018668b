"""Cases run by tests/python/test_distributed.py under `mpirun -np N` (one process per rank).

    mpirun --allow-run-as-root --oversubscribe -np N /usr/bin/python3 mpi_cases.py CASE OUT_DIR [ARGS]

Each case writes what the test compares into OUT_DIR (rank-suffixed .npz files); failures raise
(non-zero exit, mpirun ends the job).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
import onnxtrain.distributed


def mlp_with_loss(seed=0, n_in=6, hidden=8, n_out=3):
    """A two-layer MLP with a mean squared-error loss (weights from `seed`)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((n_in, hidden)) * 0.4).astype(np.float32)
    b1 = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((hidden, n_out)) * 0.4).astype(np.float32)
    b2 = np.zeros(n_out, np.float32)
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "B1"], ["h1"]),
        helper.make_node("Tanh", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "W2"], ["y0"]),
        helper.make_node("Add", ["y0", "B2"], ["Y"]),
        helper.make_node("Sub", ["Y", "label"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["loss"], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in]),
         helper.make_tensor_value_info("label", TensorProto.FLOAT, ["N", n_out])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", n_out])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
         numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(b2, "B2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return m.SerializeToString()


def data(steps, batch, n_in=6, n_out=3, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
    Y = rng.standard_normal((steps, batch, n_out)).astype(np.float32)
    return X, Y


def params_from(argv):
    p = onnxtrain.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    for kv in argv:
        k, v = kv.split("=", 1)
        setattr(p, k, type(getattr(p, k))(int(v) if v.isdigit() else v) if not isinstance(getattr(p, k), bool)
                else v in ("1", "True", "true"))
    return p


def case_train(out, argv):
    """20 steps of a global batch of 16 rows: rank r feeds its rows; writes the final weights.
    "bucket:N" sets onnxtrain.allreduce_bucket_bytes to N and saves the training graph (rank 0)."""
    steps, global_batch = 20, 16
    opts = [a for a in argv if "=" in a]
    p = params_from(opts)
    so = onnxtrain.SessionOptions()
    for a in argv:
        if a.startswith("bucket:"):
            so.add_session_config_entry("onnxtrain.allreduce_bucket_bytes", a.split(":")[1])
            if onnxtrain.distributed.launch_info()["rank"] == 0:
                p.model_with_training_graph_path = os.path.join(out, "training_graph.onnx")
    sess = onnxtrain.TrainingSession(mlp_with_loss(), p, so)
    world, rank = sess.world_size, sess.world_rank
    X, Y = data(steps, global_batch)
    lr = np.array([0.01], np.float32)
    shard = global_batch // world
    accum = p.gradient_accumulation_steps
    losses = []
    for s in range(steps):
        rows = slice(rank * shard, (rank + 1) * shard)
        if accum > 1:  # the global batch split again into micro-batches
            micro = shard // accum
            for k in range(accum):
                part = slice(rank * shard + k * micro, rank * shard + (k + 1) * micro)
                sess.run(["loss"], {"X": X[s, part], "label": Y[s, part], "Learning_Rate": lr})
        else:
            losses.append(float(sess.run(["loss"], {"X": X[s, rows], "label": Y[s, rows], "Learning_Rate": lr})[0]))
    state = sess.get_model_state()
    state = state.get("full_precision", state)
    opt_bytes = sum(np.asarray(v).nbytes for k, v in sess._sess.get_optimizer_state().items() if k != "step")
    tag = "_zero" if p.deepspeed_zero_stage else ""
    np.savez(os.path.join(out, f"weights{tag}_{world}_{rank}.npz"), **state)
    with open(os.path.join(out, f"optstate{tag}_{world}_{rank}.txt"), "w") as f:
        f.write(f"{opt_bytes}\n")
    stats = onnxtrain.distributed.comm_stats()
    with open(os.path.join(out, f"stats_{world}_{rank}.txt"), "w") as f:
        f.write(f"{stats['collectives']} {stats['bytes']} {stats['comm_seconds']} {stats['wait_seconds']}\n")


def case_adasum(out, argv):
    """One SGD step with learning rate 1 and Adasum: the weights move by minus the combination."""
    global_batch = 16
    p = params_from(["training_optimizer_name=SGDOptimizer", "enable_adasum=1"])
    sess = onnxtrain.TrainingSession(mlp_with_loss(), p)
    world, rank = sess.world_size, sess.world_rank
    X, Y = data(1, global_batch)
    shard = global_batch // world
    rows = slice(rank * shard, (rank + 1) * shard)
    sess.run(["loss"], {"X": X[0, rows], "label": Y[0, rows], "Learning_Rate": np.array([1.0], np.float32)})
    state = sess.get_model_state()
    np.savez(os.path.join(out, f"adasum_{world}_{rank}.npz"), **state.get("full_precision", state))


def case_mismatch(out, argv):
    """Rank 1 gets other weights (argv[0] == "weights") or another optimizer ("options")."""
    rank = onnxtrain.distributed.world_rank()
    p = params_from([])
    seed = 0
    if rank == 1 and argv[0] == "weights":
        seed = 1
    if rank == 1 and argv[0] == "options":
        p.training_optimizer_name = "SGDOptimizer"
    try:
        onnxtrain.TrainingSession(mlp_with_loss(seed=seed), p)
        message = "no error"
    except ValueError as e:
        message = str(e)
    with open(os.path.join(out, f"mismatch_{rank}.txt"), "w") as f:
        f.write(message)


def case_fault(out, argv):
    """Rank 1 dies (argv[0] == "dead": SIGKILL) or stops answering ("stalled") at step 5; rank 0
    goes on training."""
    import signal
    import time
    p = params_from([])
    sess = onnxtrain.TrainingSession(mlp_with_loss(), p)
    rank = sess.world_rank
    X, Y = data(1, 8)
    lr = np.array([0.01], np.float32)
    for step in range(100000):
        if rank == 1 and step == 5:
            if argv[0] == "dead":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)
        sess.run(["loss"], {"X": X[0], "label": Y[0], "Learning_Rate": lr})


def case_construct(out, argv):
    """Creates a session with the options of argv; each rank writes the error message (or "no error")."""
    rank = onnxtrain.distributed.world_rank()
    try:
        onnxtrain.TrainingSession(mlp_with_loss(), params_from(argv))
        message = "no error"
    except (ValueError, NotImplementedError) as e:
        kind = "NotImplementedError" if isinstance(e, NotImplementedError) else "ValueError"
        message = f"{kind}: {e}"
    with open(os.path.join(out, f"construct_{rank}.txt"), "w") as f:
        f.write(message)


def case_ckpt(out, argv):
    """argv: "save" or "resume", then options. save: 10 steps, checkpoint out/ckpt, 10 more steps;
    resume: load out/ckpt, the last 10 steps. Both write the final weights."""
    phase, opts = argv[0], argv[1:]
    p = params_from(opts)
    sess = onnxtrain.TrainingSession(mlp_with_loss(), p)
    world, rank = sess.world_size, sess.world_rank
    X, Y = data(20, 16)
    shard = 16 // world
    ckpt = os.path.join(out, "ckpt")
    first = 0
    if phase == "resume":
        sess._sess.load_checkpoint(ckpt)
        first = 10
    for s in range(first, 20):
        rows = slice(rank * shard, (rank + 1) * shard)
        sess.run(["loss"], {"X": X[s, rows], "label": Y[s, rows], "Learning_Rate": np.array([0.01], np.float32)})
        if phase == "save" and s == 9:
            sess._sess.save_checkpoint(ckpt)
    state = sess.get_model_state()
    np.savez(os.path.join(out, f"{phase}_{world}_{rank}.npz"), **state.get("full_precision", state))


def case_orttrainer(out, argv):
    """onnxruntime-training's ORTTrainer, unchanged: the launcher's rank and size fill
    options.distributed; each rank feeds its half of every batch of 8 rows."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_orttrainer as t
    world, rank = onnxtrain.distributed.world_size(), onnxtrain.distributed.world_rank()
    opts = {"distributed": {"world_rank": rank, "world_size": world}} if argv and argv[0] == "explicit" else None
    trainer = t.make_mlp_trainer(opts)
    half = 8 // world
    for x, y in t.mlp_batches():
        trainer.train_step(x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half])
    state = trainer._session.get_model_state()
    state = state.get("full_precision", state)
    np.savez(os.path.join(out, f"orttrainer_{world}_{rank}.npz"), **{k: np.asarray(v) for k, v in state.items()})


def case_ortckpt(out, argv):
    """ORTTrainer with ZeRO stage 1 on the ranks ("save": 10 steps, every rank saves its file, 10
    more), or on one process ("resume": load_checkpoint of every rank's file, the last 10 steps)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_orttrainer as t
    world, rank = onnxtrain.distributed.world_size(), onnxtrain.distributed.world_rank()
    trainer = t.make_mlp_trainer({"distributed": {"deepspeed_zero_optimization": {"stage": 1}}})
    half = 8 // world
    batches = t.mlp_batches()
    first = 0
    if argv[0] == "resume":
        trainer.train_step(*batches[0])  # builds the session (exported at the first step), then replaced
        trainer.load_checkpoint(*[os.path.join(out, f"ort_rank{r}.npz") for r in range(int(argv[1]))])
        first = 10
    for i, (x, y) in enumerate(batches[first:], first):
        trainer.train_step(x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half])
        if argv[0] == "save" and i == 9:
            trainer.save_checkpoint(os.path.join(out, f"ort_rank{rank}.npz"))
    state = trainer._session.get_model_state()
    state = state.get("full_precision", state)
    np.savez(os.path.join(out, f"ortckpt_{argv[0]}_{world}_{rank}.npz"), **{k: np.asarray(v) for k, v in state.items()})


def case_diverge(out, argv):
    """With the debug weight check every step, rank 1 changes a weight by itself at step 3."""
    sess = onnxtrain.TrainingSession(mlp_with_loss(), params_from([]))
    X, Y = data(1, 8)
    for step in range(6):
        if step == 3 and sess.world_rank == 1:
            sess.load_state({"B2": np.full(3, 0.5, np.float32)})
        try:
            sess.run(["loss"], {"X": X[0], "label": Y[0], "Learning_Rate": np.array([0.01], np.float32)})
        except ValueError as e:
            with open(os.path.join(out, f"diverge_{sess.world_rank}.txt"), "w") as f:
                f.write(f"step {step}: {e}")
            return


def seq_with_loss():
    """Y = (mean over axis 1 of X [N, T, 3]) W, W [3, 2]; mean squared error against label [N, 2]:
    any T runs (the per-sample shape of X can differ between ranks without the model refusing it)."""
    w = np.array([[0.3, -0.2], [0.1, 0.4], [-0.5, 0.2]], np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["X"], ["m"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["m", "W"], ["Y"]),
        helper.make_node("Sub", ["Y", "label"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["loss"], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "seq",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", "T", 3]),
         helper.make_tensor_value_info("label", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def case_fitdata(out, argv):
    """Trainer.fit on data that differs on rank 1: fewer rows (argv[0] == "rows": 64 against 96) or
    another per-sample shape ("shape": X [N, 5, 3] against [N, 4, 3]); "same": no difference. Each
    rank writes fit's error ("no error") to fitdata_<rank>.txt; after a barrier (both have written)
    a rank whose fit failed exits with status 3."""
    rank = onnxtrain.distributed.world_rank()
    rows = 64 if rank == 1 and argv[0] == "rows" else 96
    steps = 5 if rank == 1 and argv[0] == "shape" else 4
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, steps, 3)).astype(np.float32)
    label = rng.standard_normal((rows, 2)).astype(np.float32)
    sess = onnxtrain.TrainingSession(seq_with_loss(), params_from([]))
    trainer = onnxtrain.Trainer(sess, batch_size=16, epochs=2, learning_rate=0.01)
    try:
        trainer.fit({"X": X, "label": label})
        message = "no error"
    except ValueError as e:
        message = str(e)
    with open(os.path.join(out, f"fitdata_{rank}.txt"), "w") as f:
        f.write(message)
    onnxtrain.distributed.barrier()
    sys.exit(0 if message == "no error" else 3)


CASES = {"fitdata": case_fitdata, "train": case_train, "ckpt": case_ckpt, "orttrainer": case_orttrainer, "ortckpt": case_ortckpt, "diverge": case_diverge, "construct": case_construct, "adasum": case_adasum, "mismatch": case_mismatch, "fault": case_fault}

if __name__ == "__main__":
    CASES[sys.argv[1]](sys.argv[2], sys.argv[3:])
