"""Checkpoints under kill -9 (driven by scripts/checkpoint_faults.sh, and by
tests/python/test_checkpoint_faults.py with few trials).

Each trial starts a writer process that resumes from the checkpoint at PATH (when there is one),
then trains an MLP (about 4 MB of weights) step after step and saves a checkpoint after each step,
logging "begin N SUM" before and "done N SUM" after every save (N: the save's number, SUM: the
float64 sum of the weights, also stored in the checkpoint's metadata). After a random delay, uniform
over the writer's saving phase, the driver kills it with SIGKILL, notes whether a temporary file of
that writer was present (a kill in the middle of a write), and checks that:
  - the checkpoint at PATH loads (every tensor's CRC verified) into a fresh session;
  - it is the last completed save ("done") or the one in flight when killed ("begin" without
    "done": killed after the rename), and its weights sum to what the writer logged for it.
Temporary files left by killed writers stay in the folder for the next trial's writer (whose load
and saves must not mind them), then are removed. The temporary folder is removed unless a trial failed. Prints one summary line:
  checkpoint_faults: trials T, kills mid-write M (P%), failures F
and exits 1 when F > 0.
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

WRITER = r"""
import os, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import onnxtrain as ot

path, log_path, hidden = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(0)
inits = [numpy_helper.from_array((rng.standard_normal((64, hidden)) * 0.05).astype(np.float32), "W1"),
         numpy_helper.from_array(np.zeros(hidden, np.float32), "B1"),
         numpy_helper.from_array((rng.standard_normal((hidden, hidden)) * 0.05).astype(np.float32), "W2"),
         numpy_helper.from_array((rng.standard_normal((hidden, 4)) * 0.05).astype(np.float32), "W3")]
nodes = [helper.make_node("MatMul", ["X", "W1"], ["a"]), helper.make_node("Add", ["a", "B1"], ["b"]),
         helper.make_node("Tanh", ["b"], ["c"]), helper.make_node("MatMul", ["c", "W2"], ["d"]),
         helper.make_node("Tanh", ["d"], ["e"]), helper.make_node("MatMul", ["e", "W3"], ["Y"])]
g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 64])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])], inits)
m = ot.add_loss_output(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
p = ot.TrainingParameters()
p.loss_output_name = "loss"
so = ot.SessionOptions()
so.intra_op_num_threads = 1
s = ot.TrainingSession(m.SerializeToString(), p, so)
n = 0
if os.path.exists(path):
    n = int(s.load_checkpoint(path)["n"])
x = rng.standard_normal((8, 64)).astype(np.float32)
y = rng.standard_normal((8, 4)).astype(np.float32)
feed = {"X": x, "label": y, "Learning_Rate": np.array([1e-3], np.float32)}
log = open(log_path, "a", buffering=1)
print("ready", flush=True)
while True:
    n += 1
    s.run(["loss"], feed)
    total = repr(sum(float(v.sum(dtype=np.float64)) for v in s.get_model_state()["full_precision"].values()))
    log.write(f"begin {n} {total}\n")
    s.save_checkpoint(path, {"n": str(n), "sum": total})
    log.write(f"done {n} {total}\n")
"""

LOADER = WRITER.split("n = 0\n")[0]  # the same session, without the writing loop


def temp_files(folder, name, pid=None):
    pat = re.compile(re.escape(name) + r"\.tmp\.(\d+)\.\d+$")
    return [f for f in os.listdir(folder) if (mt := pat.match(f)) and (pid is None or int(mt.group(1)) == pid)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trials", type=int, nargs="?", default=1000)
    ap.add_argument("--hidden", type=int, default=1000, help="hidden width (weights: about 4 * hidden^2 bytes)")
    ap.add_argument("--max-delay", type=float, default=0.25, help="kill delay after the writer is ready (seconds)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dir", default=None, help="folder for the checkpoint (default: a new temporary one)")
    args = ap.parse_args(argv)
    rnd = random.Random(args.seed)
    folder = args.dir or tempfile.mkdtemp(prefix="ckpt_faults_")
    name = "model.ckpt"
    path = os.path.join(folder, name)
    log_path = os.path.join(folder, "writer.log")

    # The verifier: a session of the same model, in this process.
    env = {"__name__": "loader"}
    exec(LOADER.replace("sys.argv[1], sys.argv[2], int(sys.argv[3])", f"'', '', {args.hidden}"), env)
    import numpy as np
    sess = env["s"]

    mid_write = failures = renamed_unlogged = 0
    old_leftovers, last = [], None
    start = time.monotonic()
    for trial in range(args.trials):
        open(log_path, "w").close()
        w = subprocess.Popen([sys.executable, "-c", WRITER, path, log_path, str(args.hidden)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        line = w.stdout.readline()
        if line.strip() != "ready":
            w.kill()
            failures += 1
            print(f"trial {trial}: the writer did not start: {line!r} {w.stderr.read()[-2000:]}", file=sys.stderr)
            continue
        time.sleep(rnd.uniform(0, args.max_delay))
        w.kill()  # SIGKILL
        w.wait()
        if temp_files(folder, name, w.pid):
            mid_write += 1
        for f in old_leftovers:  # the previous trial's leftovers were there for this writer; now away
            os.unlink(os.path.join(folder, f))
        old_leftovers = temp_files(folder, name)
        with open(log_path) as fh:  # whole lines only (each is one write())
            events = [ln.split() for ln in fh.read().split("\n")[:-1]]
        done = [tuple(e[1:]) for e in events if e[0] == "done"]
        begun = [tuple(e[1:]) for e in events if e[0] == "begin"]
        pending = begun[-1] if begun and (not done or begun[-1] != done[-1]) else None
        # The checkpoint must be the last completed save (or, with none, the previous trial's) or
        # the one in flight (killed after its rename).
        allowed = [a for a in [done[-1] if done else last, pending] if a]
        try:
            if not os.path.exists(path):
                # Legitimate only while no save completed: a writer killed in its first save
                # (before the rename) leaves nothing, its save in flight included.
                if done or last:
                    raise AssertionError(f"no checkpoint at the path; expected one of {allowed}")
                continue
            meta = sess.load_checkpoint(path)
            total = repr(sum(float(v.sum(dtype=np.float64)) for v in sess.get_model_state()["full_precision"].values()))
            got = (meta["n"], meta["sum"])
            if got not in allowed or total != meta["sum"]:
                raise AssertionError(f"checkpoint n={got[0]} sum={got[1]} (weights sum {total}); expected one of {allowed}")
            if pending and got == pending:
                renamed_unlogged += 1
            last = got
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported
            failures += 1
            print(f"trial {trial}: {type(e).__name__}: {e}", file=sys.stderr)
    for f in old_leftovers:
        os.unlink(os.path.join(folder, f))
    elapsed = time.monotonic() - start
    share = 100.0 * mid_write / max(args.trials, 1)
    print(f"checkpoint_faults: trials {args.trials}, kills mid-write {mid_write} ({share:.0f}%), "
          f"failures {failures} (killed after the rename, before the log: {renamed_unlogged}; {elapsed:.0f} s; "
          f"folder {folder}{' kept' if failures else ''})")
    if not args.dir and not failures:
        shutil.rmtree(folder)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
