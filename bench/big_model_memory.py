"""Training memory and export of a model over 2 GiB. Never pass/fail.

The model: nine 8192x8192 float32 MatMuls in a chain (2.25 GiB of weights, written as external
data straight from numpy, one row block at a time), input X [B, 8192], label [B, 8192], loss the
mean of squared differences. For each build and optimizer a fresh subprocess (so that each peak is
its own) creates a TrainingSession from the model's path, runs a few steps, exports the trained
model with export_model(path) and records its peak resident memory (VmHWM, reset between phases
through /proc/self/clear_refs) per phase: session creation, first step, later steps, export, then
save_checkpoint, one more step and load_checkpoint (which streams the file into the session's
storage: its peak should stay near the training peak; the check weight must come back bit for bit).
Last, the same weights as an onnxruntime on-device checkpoint (ODTC, written by CheckpointState in a
subprocess): all of them (past onnxruntime's 1.8 GB threshold: tensors in the <path>.data sidecar)
and the first five (tensors inside the FlatBuffer), each loaded by CheckpointState.load_checkpoint
in a fresh process: its peak against the state's size, the check weight against the generator.
Another subprocess then checks the export: onnx.checker on the path, one weight read from the data
file at its recorded offset against the session's weight (bit for bit), and the model loaded back
with onnxtrain.InferenceSession against the session's own forward pass. A last run per build sets
model_with_training_graph_path and checks the saved training model the same way (its weights are
the untrained ones, compared with the generated file), and another saves the gradient model built
by GradientGraphBuilder from the model's path (GradientGraphBuilder.save).

Usage (one build: the onnxtrain on PYTHONPATH; several: NAME=PYTHONPATH each):
  PYTHONPATH=build/python /usr/bin/python3 bench/big_model_memory.py
  /usr/bin/python3 bench/big_model_memory.py --build before=/work/base/python --build after=build/python
Options: --dir DIR (model and outputs; default a folder under /tmp, removed unless --keep),
--optimizer sgd --optimizer adam, --steps 3, --batch 4, --dim 8192 --layers 9 (smaller for a quick
run), --threads 2, --no-training-graph, --no-gradient, --odtc-layers N (repeatable), --no-odtc, --no-train. Needs about 5x the weights in free memory per run with
Adam on a build that keeps gradients beside the weights; runs one measurement at a time.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

SCRIPT = os.path.abspath(__file__)
OPTIMIZERS = {"sgd": "SGDOptimizer", "adam": "AdamOptimizer"}
LEARNING_RATES = {"sgd": 1e-3, "adam": 1e-6}  # the loss goes down for a few steps with either


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak():
    """Makes VmHWM start again from the current resident size (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def weight_name(k):
    return f"W{k + 1}"


def weight_rows(k, dim, block):
    """Weight k, a block of rows at a time (deterministic: regenerated for checks)."""
    rng = np.random.default_rng(1000 + k)
    scale = np.float32(1.0 / np.sqrt(dim))
    for start in range(0, dim, block):
        rows = min(block, dim - start)
        yield start, rng.standard_normal((rows, dim), dtype=np.float32) * scale


def generate(folder, dim, layers, batch):
    """Writes model.onnx and weights.bin (external data, one 4 KiB-aligned tensor after another)."""
    import onnx
    from onnx import TensorProto, helper

    data_name = "weights.bin"
    nbytes = dim * dim * 4
    inits = []
    with open(os.path.join(folder, data_name), "wb") as f:
        for k in range(layers):
            offset = f.tell()
            for _, rows in weight_rows(k, dim, 512):
                rows.tofile(f)
            t = TensorProto()
            t.name = weight_name(k)
            t.data_type = TensorProto.FLOAT
            t.dims.extend([dim, dim])
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(nbytes))):
                e = t.external_data.add()
                e.key, e.value = key, value
            inits.append(t)
    nodes, prev = [], "X"
    for k in range(layers):
        out = "Y" if k == layers - 1 else f"H{k + 1}"
        nodes.append(helper.make_node("MatMul", [prev, weight_name(k)], [out]))
        prev = out
    nodes += [helper.make_node("Sub", ["Y", "label"], ["D"]), helper.make_node("Mul", ["D", "D"], ["D2"]),
              helper.make_node("ReduceMean", ["D2"], ["loss"], keepdims=0)]
    g = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, dim]),
         helper.make_tensor_value_info("label", TensorProto.FLOAT, [batch, dim])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("Y", TensorProto.FLOAT, [batch, dim])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    rng = np.random.default_rng(7)
    np.save(os.path.join(folder, "X.npy"), rng.standard_normal((batch, dim), dtype=np.float32))
    np.save(os.path.join(folder, "label.npy"), rng.standard_normal((batch, dim), dtype=np.float32) * 0.1)
    return layers * nbytes


# ---------------------------------------------------------------------------------------------
# Subprocesses: one measurement each. Peaks per phase: VmHWM reset before the phase.

class Phases:
    def __init__(self):
        self.out = {"phases": {"import": {"rss": status_kib("VmRSS") * 1024}}}

    def run(self, name, fn):
        reset_peak()
        t = time.perf_counter()
        try:
            r, err = fn(), None
        except Exception as e:  # noqa: BLE001 - the error is the measurement
            r, err = None, f"{type(e).__name__}: {e}"
        self.out["phases"][name] = {"peak": status_kib("VmHWM") * 1024, "rss": status_kib("VmRSS") * 1024,
                                    "seconds": time.perf_counter() - t, "error": err}
        return r, err

    def done(self, **fields):
        self.out.update(fields)
        print(json.dumps(self.out))


def child_train(args):
    """TrainingSession from the path, steps, export_model(path); or, with --training-graph, only
    the session with model_with_training_graph_path set."""
    import onnxtrain as ot
    ph = Phases()
    opt = args.optimizer[-1]
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = OPTIMIZERS[opt]
    if args.training_graph:
        p.model_with_training_graph_path = os.path.join(args.out, "written.onnx")
    so = ot.SessionOptions()
    so.intra_op_num_threads = args.threads
    sess, err = ph.run("create", lambda: ot.TrainingSession(os.path.join(args.dir, "model.onnx"), p, so))
    if err or args.training_graph:
        return ph.done(error=err, write_error=err)
    X = np.load(os.path.join(args.dir, "X.npy"))
    label = np.load(os.path.join(args.dir, "label.npy"))
    feed = {"X": X, "label": label, "Learning_Rate": np.array([LEARNING_RATES[opt]], np.float32)}
    losses, times = [], []

    def steps(n):
        for _ in range(n):
            t = time.perf_counter()
            losses.append(float(sess.run(["loss"], feed)[0]))
            times.append(time.perf_counter() - t)

    ph.run("step1", lambda: steps(1))
    if args.steps > 1:
        ph.run("steps", lambda: steps(args.steps - 1))
    _, err = ph.run("write", lambda: sess.export_model(os.path.join(args.out, "written.onnx")))
    # For the check, after every measurement: one trained weight and the session's forward pass.
    restored = None
    if not err:
        name = weight_name(args.check_layer)
        state = sess.get_state()
        np.save(os.path.join(args.out, "weight.npy"), state[name])
        del state
        np.save(os.path.join(args.out, "Y.npy"), sess.eval(["Y"], {"X": X})[0])
        # Checkpoint round trip in the trained session (weights, gradients and optimizer state
        # allocated): save, one more step (the weights move), load: the saved weights are back.
        ckpt = os.path.join(args.out, "state.ckpt")
        _, cerr = ph.run("save_ckpt", lambda: sess.save_checkpoint(ckpt))
        if not cerr:
            steps(1)
            _, cerr = ph.run("load_ckpt", lambda: sess.load_checkpoint(ckpt))
        if not cerr:
            w = sess.get_state()[name]
            restored = "bit-identical" if w.tobytes() == np.load(os.path.join(args.out, "weight.npy")).tobytes() \
                else "DIFFERS"
            del w
        else:
            restored = cerr
        if os.path.exists(ckpt):
            os.remove(ckpt)
    ph.done(losses=losses, step_times=times, write_error=err, restored=restored)


def child_grad(args):
    """GradientGraphBuilder from the path (weights in external data), build, save(path)."""
    import onnxtrain as ot
    ph = Phases()
    names = {weight_name(k) for k in range(args.layers)}
    b, err = ph.run("create", lambda: ot.GradientGraphBuilder(os.path.join(args.dir, "model.onnx"), {"loss"}, names,
                                                              "loss"))
    if not err:
        _, err = ph.run("build", b.build)
    if err:
        return ph.done(error=err)
    _, err = ph.run("write", lambda: b.save(os.path.join(args.out, "written.onnx")))
    ph.done(write_error=err)


def child_odtc_write(args):
    """Writes the model's first --odtc-layers weights as an onnxruntime checkpoint (ODTC; in its
    <path>.data sidecar past onnxruntime's 1.8 GB threshold)."""
    from onnxtrain import _C
    st = _C.CheckpointState()
    for k in range(args.odtc_layers[-1]):
        w = np.concatenate([rows for _, rows in weight_rows(k, args.dim, 512)])
        st.add_parameter(weight_name(k), w, True)
        del w
    st.save(args.model)
    print(json.dumps({"ok": True}))


def child_odtc_load(args):
    """CheckpointState.load_checkpoint(path): its peak, and the check weight against the generator."""
    from onnxtrain.training.api import CheckpointState
    ph = Phases()
    state, err = ph.run("load", lambda: CheckpointState.load_checkpoint(args.model))
    res = "-"
    if not err:
        k = min(args.check_layer, args.odtc_layers[-1] - 1)
        w = state.parameters[weight_name(k)].data
        ref = np.concatenate([rows for _, rows in weight_rows(k, args.dim, 512)])
        res = "bit-identical" if w.tobytes() == ref.tobytes() else "DIFFERS"
    ph.done(error=err, weight=res)


# ---------------------------------------------------------------------------------------------
# Subprocess: checks a written model (path form of onnx.checker, a weight at its recorded offset,
# onnxtrain's loader).

def read_weight(model_path, name):
    """The weight as stored: read from the data file at its recorded offset (or inline)."""
    import onnx
    m = onnx.load(model_path, load_external_data=False)
    for t in m.graph.initializer:
        if t.name != name:
            continue
        if t.data_location != onnx.TensorProto.EXTERNAL:
            from onnx import numpy_helper
            return numpy_helper.to_array(t), "inline"
        kv = {e.key: e.value for e in t.external_data}
        path = os.path.join(os.path.dirname(model_path), kv["location"])
        offset, length = int(kv.get("offset", 0)), int(kv["length"])
        arr = np.fromfile(path, dtype=np.float32, count=length // 4, offset=offset).reshape(tuple(t.dims))
        return arr, kv["location"]
    return None, "missing"


def child_check(args):
    import onnx
    res = {}
    try:
        onnx.checker.check_model(args.model)
        res["checker"] = "ok"
    except Exception as e:  # noqa: BLE001
        res["checker"] = f"{type(e).__name__}: {e}"[:200]
    name = weight_name(args.check_layer)
    arr, where = read_weight(args.model, name)
    if arr is None:
        res["weight"] = f"{name} {where}"
    else:
        if args.expect == "generated":  # untrained: the generator's own rows
            ref = np.concatenate([rows for _, rows in weight_rows(args.check_layer, arr.shape[0], 512)])
        else:
            ref = np.load(args.expect)
        res["weight"] = ("bit-identical" if arr.tobytes() == ref.tobytes() else "DIFFERS") + f" ({where})"
        del arr, ref
    import onnxtrain as ot
    reset_peak()
    try:
        sess = ot.InferenceSession(args.model)
        res["load"] = "ok"
        if args.run:
            y = sess.run(["Y"], {"X": np.load(os.path.join(args.dir, "X.npy"))})[0]
            ref = np.load(args.run)
            err = float(np.max(np.abs(y - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
            res["load"] = "ok, runs as trained" if err <= 1e-5 else f"outputs differ (max rel {err:.2g})"
    except Exception as e:  # noqa: BLE001
        res["load"] = f"{type(e).__name__}: {e}"[:200]
    res["load_peak"] = status_kib("VmHWM") * 1024
    print(json.dumps(res))


# ---------------------------------------------------------------------------------------------
# Parent: generates the model, runs the subprocesses one after the other, prints the table.

def run_child(pythonpath, argv, timeout=3600):
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    r = subprocess.run([sys.executable, SCRIPT] + argv, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return {"crash": f"exit {r.returncode}: {' | '.join(tail)}"[:300]}
    return json.loads(lines[-1])


def gib(x):
    return f"{x / 2**30:.2f}" if x >= 2**28 else f"{x / 2**30:.4f}"


def short(err, n=70):
    return err if len(err) <= n else err[: n - 3] + "..."


def table_row(row, wbytes):
    """build, run, create, step 1, later steps, train peak, step s, write, write peak, checkpoint load,
    check."""
    r, c = row["r"], row.get("check")
    if "crash" in r:
        return [row["build"], row["run"], short(r["crash"], 90)] + [""] * 8
    ph = r["phases"]

    def peak(name):
        return f"{gib(ph[name]['peak'])} ({ph[name]['peak'] / wbytes:.2f}x)" if name in ph else "-"

    times = r.get("step_times") or []
    step = f"{float(np.median(times[1:] or times)):.2f}" if times else "-"
    train = [ph[n]["peak"] for n in ("create", "build", "step1", "steps") if n in ph]
    if r.get("write_error") or r.get("error"):
        write = short(r.get("write_error") or r["error"])
    else:
        write = "ok" if "write" in ph or row["run"].startswith("training graph") else "-"
    check = "-"
    if c:
        check = "; ".join(f"{k} {v}" for k, v in c.items() if k in ("checker", "weight", "load")) if "crash" not in c \
            else short(c["crash"], 90)
    create = peak("create") if "build" not in ph else f"{peak('create')} / build {peak('build')}"
    load = "-"
    if "load_ckpt" in ph:
        load = f"{peak('load_ckpt')}, {ph['load_ckpt']['seconds']:.1f} s, {r.get('restored')}"
    elif r.get("restored"):
        load = short(r["restored"])
    return [row["build"], row["run"], create, peak("step1"), peak("steps"), f"{max(train) / wbytes:.2f}x", step,
            write, peak("write"), load, check]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", choices=["train", "grad", "check", "odtc_write", "odtc_load"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--expect", help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--training-graph", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir")
    ap.add_argument("--keep", action="store_true", help="keep the folder with the model and outputs")
    ap.add_argument("--build", action="append", default=[], help="NAME=PYTHONPATH (repeatable)")
    ap.add_argument("--optimizer", action="append", choices=sorted(OPTIMIZERS))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dim", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check-layer", type=int, default=4, help="index of the weight compared after export")
    ap.add_argument("--no-training-graph", action="store_true", help="skip the model_with_training_graph_path run")
    ap.add_argument("--no-gradient", action="store_true", help="skip the GradientGraphBuilder save run")
    ap.add_argument("--odtc-layers", type=int, action="append",
                    help="weights in the onnxruntime-checkpoint load run (repeatable; default: all the layers, "
                         "which pass the 1.8 GB sidecar threshold at the default size, and 5: in the FlatBuffer)")
    ap.add_argument("--no-odtc", action="store_true", help="skip the onnxruntime-checkpoint load runs")
    ap.add_argument("--no-train", action="store_true", help="skip the TrainingSession runs")
    args = ap.parse_args()
    if args.child:
        return {"train": child_train, "grad": child_grad, "check": child_check, "odtc_write": child_odtc_write,
                "odtc_load": child_odtc_load}[args.child](args)

    builds = []
    for b in args.build:
        name, sep, path = b.partition("=")
        if not sep:
            ap.error(f"--build expects NAME=PYTHONPATH, got '{b}'")
        builds.append((name, os.path.abspath(path)))
    if not builds:
        builds = [("PYTHONPATH", None)]
    optimizers = args.optimizer or ["sgd", "adam"]
    args.check_layer = min(args.check_layer, args.layers - 1)
    folder = args.dir or tempfile.mkdtemp(prefix="big_model_")
    os.makedirs(folder, exist_ok=True)
    t = time.perf_counter()
    wbytes = generate(folder, args.dim, args.layers, args.batch)
    print(f"model: {args.layers} x MatMul {args.dim}x{args.dim} float32, weights {gib(wbytes)} GiB in external "
          f"data ({time.perf_counter() - t:.0f} s to write), X [{args.batch}, {args.dim}], {args.steps} steps, "
          f"{args.threads} threads; folder {folder}", flush=True)

    common = ["--dir", folder, "--steps", str(args.steps), "--threads", str(args.threads),
              "--check-layer", str(args.check_layer), "--layers", str(args.layers)]
    # (label, child arguments, check: "trained" | "generated")
    runs = [] if args.no_train else [(opt, ["--child", "train", "--optimizer", opt], "trained") for opt in optimizers]
    if not args.no_training_graph:
        runs.append(("training graph (sgd)", ["--child", "train", "--optimizer", "sgd", "--training-graph"],
                     "generated"))
    if not args.no_gradient:
        runs.append(("gradient model", ["--child", "grad"], "generated"))
    rows = []
    for bname, pypath in builds:
        for label, argv, expect in runs:
            out = os.path.join(folder, f"{bname}-{label.split()[0]}")
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            if mem_available() < 5 * wbytes:
                print(f"warning: {gib(mem_available())} GiB available, the run may need up to {gib(5 * wbytes)}",
                      flush=True)
            r = run_child(pypath, argv + ["--out", out] + common)
            row = {"build": bname, "run": label, "r": r}
            written = os.path.join(out, "written.onnx")
            if "crash" not in r and not r.get("write_error") and os.path.exists(written):
                check = ["--child", "check", "--model", written] + common
                if expect == "trained":
                    check += ["--expect", os.path.join(out, "weight.npy"), "--run", os.path.join(out, "Y.npy")]
                else:
                    check += ["--expect", "generated"]
                row["check"] = run_child(pypath, check)
            rows.append(row)
            print(f"  done: {bname} {label}", flush=True)
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)

    odtc = []
    if not args.no_odtc:
        for layers in sorted(set(args.odtc_layers or [args.layers, min(5, args.layers)]), reverse=True):
            path = os.path.join(folder, f"state{layers}.ckpt")
            argv = common + ["--dim", str(args.dim)]
            argv[argv.index("--layers") + 1] = str(layers)
            w = run_child(None, ["--child", "odtc_write", "--model", path, "--odtc-layers", str(layers)] + argv)
            for bname, pypath in builds:
                r = w if "crash" in w else run_child(pypath, ["--child", "odtc_load", "--model", path,
                                                               "--odtc-layers", str(layers)] + argv)
                odtc.append((bname, layers, os.path.exists(path + ".data"), r))
            for f in (path, path + ".data"):
                if os.path.exists(f):
                    os.remove(f)
            print(f"  done: onnxruntime checkpoint, {layers} weights", flush=True)

    if rows:
        print()
        print(f"weights W = {gib(wbytes)} GiB. Peaks: VmHWM of the phase in GiB (x W); create = session or builder "
              "creation (load included); write = export_model(path), or the save (training graph: during create); "
              "step = median seconds of the steps after the first; load_checkpoint = the trained session's "
              "save_checkpoint, one more step, load_checkpoint (its peak, its time, the check weight against the saved "
              "one)")
        hdr = ["build", "run", "create", "step 1", "later steps", "peak", "step s", "write", "write peak",
               "load_checkpoint peak, time, weights", "check"]
        table = [hdr] + [table_row(row, wbytes) for row in rows]
        widths = [max(len(str(t[i])) for t in table) for i in range(len(hdr))]
        for i, t in enumerate(table):
            print(" | ".join(str(v).ljust(w) for v, w in zip(t, widths)).rstrip())
            if i == 0:
                print("-+-".join("-" * w for w in widths))
        print()
        for row in rows:
            r = row["r"]
            if "phases" in r:
                rss = ", ".join(f"{k} {gib(v['rss'])}" for k, v in r["phases"].items())
                print(f"{row['build']} {row['run']}: resident after each phase (GiB): {rss}"
                      + (f"; losses {', '.join(f'{x:.4g}' for x in r['losses'])}" if r.get("losses") else ""))
    if odtc:
        print()
        print("onnxruntime checkpoint (ODTC) loads, CheckpointState.load_checkpoint in a fresh process: peak (VmHWM of "
              "the load) against the state's size S")
        for bname, layers, sidecar, r in odtc:
            size = layers * args.dim * args.dim * 4
            where = "tensors in <path>.data" if sidecar else "tensors in the FlatBuffer"
            if "crash" in r or r.get("error"):
                print(f"  {bname}: {layers} weights ({gib(size)} GiB, {where}): {short(r.get('crash') or r['error'], 90)}")
                continue
            ph = r["phases"]["load"]
            grow = ph["peak"] - r["phases"]["import"]["rss"]
            print(f"  {bname}: {layers} weights ({gib(size)} GiB, {where}): peak {gib(ph['peak'])} GiB, "
                  f"{grow / size:.2f}x S above the import; {ph['seconds']:.1f} s; check weight {r['weight']}")
    if not args.keep and not args.dir:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
