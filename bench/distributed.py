"""Data-parallel training over MPI: throughput, communication and optimizer-state memory per rank
(never part of pass/fail; it prints measurements).

Workloads: the MLP and the BERT-tiny of bench/side_by_side.py (the same PyTorch modules exported to
ONNX with their loss by its prepare(), the same optimizers: MLP 784-512-256-10 with SGD momentum
0.9, global batch 128; BERT-tiny 2 layers, hidden 128, seq 128 with Adam, global batch 16). Each
configuration runs as its own job, `mpirun -np N python3 bench/distributed.py --worker SPEC`, with
one thread per rank (SessionOptions.intra_op_num_threads = 1, OMP_NUM_THREADS=1). Every step has
the same global batch: at 1 rank the rank feeds all its rows, at 2 ranks each rank feeds its half
(onnxruntime-training's convention; the gradients are averaged). torch.onnx.export fixes the batch
dimension, so the 2-rank model is the same module exported with half the batch (same weights).
Every rank writes a JSON result file; this parent aggregates them.

What it reports, per workload:
  * samples/s at 1 rank x 1 thread and 2 ranks x 1 thread: the global batch over the median step
    time (TrainingSession.run, each step timed alone) after the warm-up; at 2 ranks the slower
    rank's median. Scaling efficiency = samples/s(2 ranks) / (2 x samples/s(1 rank)).
  * the ceiling without communication: two independent 1-rank processes (no mpirun, no MPI) run
    at the same time, each on its half of the batch. Its efficiency is what sharing the machine
    (cores, caches, memory bandwidth) leaves; "exposed communication" = 2-rank step - this step.
  * communication per step and rank (onnxtrain.distributed.comm_stats, reset after the warm-up):
    collectives, payload bytes (what the rank contributes, not the wire traffic), the
    communication thread's time in them ("comm") and the time the step waited for them ("wait"),
    means over the ranks; the overlap share 1 - wait/comm as onnxtrain defines it. Bucket
    configurations (SessionOptions config entry onnxtrain.allreduce_bucket_bytes): "default"
    (4 MiB), "one" (2^40 bytes: one bucket for every gradient) and "256K" (both models hold about
    2 MB of weights, so the default is one bucket too; 256 KiB shows what several buckets do),
    plus deepspeed_zero_stage 1 with the default buckets. Read the overlap share with care: a
    step whose computing thread is descheduled while the communication thread runs (2 ranks on 2
    cores: no core is free for it) does not count that time as waiting.
  * optimizer-state bytes per rank (the nbytes of TrainingSession.get_optimizer_state()'s arrays)
    at world 1 and 2 with deepspeed_zero_stage 0 and 1; a configuration the build refuses with
    NotImplementedError is reported as "not available".
  * whether the ranks ended with bitwise identical weights (a digest of get_model_state()).

Run (OpenMPI from scripts/install_deps.sh --tests; onnxtrain from the build; Debian's python3 with torch
and onnx for the export):
    PYTHONPATH=build/python /usr/bin/python3 bench/distributed.py [--out results.json]
Options: --quick (10 timed steps, one round: a smoke test), --workloads mlp,bert, --steps N
(timed steps; default 300 for mlp, 60 for bert; at least 30 outside --quick), --rounds N (rounds
over every configuration, alternating their order; each row is the round with the median step
time; default 3), --buckets default,one,256K (or byte counts), --timeout S (per job, default 900),
--mpirun-args "..." (added to every mpirun command, e.g. "--bind-to none"), --out FILE (JSON).
The header counts the CPU other processes used during the jobs (a row is flagged as noisy above
0.15 cores: at 2 ranks on 2 cores any other work stalls both ranks) and flags a rebuild of
onnxtrain during the run. The full run takes about 2 minutes on a 2-core machine (3 rounds).
"""
import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import side_by_side as sbs  # noqa: E402  (numpy and the standard library only; no side effect at import)

WORKLOADS = ("mlp", "bert")
DEFAULT_STEPS = {"mlp": 300, "bert": 60}
QUICK_STEPS = 10
MIN_STEPS = 30
WARMUP, QUICK_WARMUP = 10, 2
BUCKETS = {"default": None, "one": 1 << 40, "256K": 256 << 10}
BUCKET_KEY = "onnxtrain.allreduce_bucket_bytes"
SHARDS = 2  # the data-parallel world measured against one rank
BUSY_CORES = 0.15  # other processes' CPU use (in cores) above which a row is flagged as noisy


# ------------------------------------------------------------------------------- models and ranks


def prepare(work, workloads):
    """bench/side_by_side.py's export of each workload under `work` (the global batch: data,
    weights, the 1-rank model), and under work/w2 the same module exported for the rows of one of
    2 ranks (the weights are the same: the module is built after torch.manual_seed(0) whatever
    the batch)."""
    for w in workloads:
        sbs.prepare(w, work)
        batch = sbs.WORKLOADS[w]["batch"]
        sub = os.path.join(work, f"w{SHARDS}")
        os.makedirs(sub, exist_ok=True)
        sbs.WORKLOADS[w]["batch"] = batch // SHARDS
        try:
            sbs.prepare(w, sub)
        finally:
            sbs.WORKLOADS[w]["batch"] = batch
        with open(os.path.join(work, f"{w}.weights.json")) as a, open(os.path.join(sub, f"{w}.weights.json")) as b:
            if json.load(a) != json.load(b):
                raise RuntimeError(f"{w}: the {SHARDS}-rank export trains other weights")


def build_id():
    """The onnxtrain extension this process loaded (size and modification time): a rebuild during
    the run would mix two builds."""
    import onnxtrain
    st = os.stat(onnxtrain._C.__file__)
    return f"{st.st_size}:{st.st_mtime_ns}"


def model_path(work, workload, shards):
    return os.path.join(work if shards == 1 else os.path.join(work, f"w{shards}"), f"{workload}.train.onnx")


def worker(spec):
    """One rank of one configuration: builds the session, warms up, times the steps, writes
    <out_dir>/<tag>.rank<r>.json. spec["shards"]: into how many parts the global batch is cut;
    spec["world"]: the session's expected world size (1 for the independent processes, whose part
    is spec["shard"])."""
    import onnxtrain as ot
    import onnxtrain.distributed as dist

    w, work, shards = spec["workload"], spec["work"], spec["shards"]
    cfg = sbs.WORKLOADS[w]
    launch = dist.launch_info()
    shard = spec["shard"] if spec.get("shard") is not None else launch["rank"]
    result = {"tag": spec["tag"], "shard": shard, "launch_size": launch["size"], "build": build_id()}
    path = os.path.join(spec["out_dir"], f"{spec['tag']}.rank{shard}.json")

    def write(res):
        with open(path + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(path + ".tmp", path)

    data = np.load(os.path.join(work, f"{w}.data.npz"))
    xs, ys = data["x"], data["y"]
    so = ot.SessionOptions()
    so.intra_op_num_threads = spec["threads"]
    if spec["bucket_bytes"] is not None:
        so.add_session_config_entry(BUCKET_KEY, str(spec["bucket_bytes"]))
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    with open(os.path.join(work, f"{w}.weights.json")) as f:
        p.weights_to_train = set(json.load(f))
    # The optimizers of bench/side_by_side.py (its child_onnxtrain).
    if cfg["optimizer"] == "momentum":
        p.training_optimizer_name = "MomentumOptimizer"
        p.optimizer_attributes = {"momentum": sbs.MOMENTUM, "lambda": 0.0}
        p.optimizer_int_attributes = {"nesterov": 0}
    elif cfg["optimizer"] == "adam":
        p.training_optimizer_name = "AdamOptimizer"
        p.optimizer_attributes = {"alpha": sbs.ADAM["beta1"], "beta": sbs.ADAM["beta2"], "epsilon": sbs.ADAM["eps"],
                                  "lambda": 0.0}
        p.optimizer_int_attributes = {"do_bias_correction": 1}
    else:
        p.training_optimizer_name = "SGDOptimizer"
    try:
        p.deepspeed_zero_stage = spec["zero_stage"]
        with open(model_path(work, w, shards), "rb") as f:
            sess = ot.TrainingSession(f.read(), p, so)
    except NotImplementedError as e:
        write(dict(result, status="not available", reason=str(e)))
        return
    world = sess.world_size
    if world != spec["world"]:
        raise RuntimeError(f"the session has world size {world}, expected {spec['world']}")
    if world > 1 and sess.world_rank != shard:
        raise RuntimeError(f"session rank {sess.world_rank} != launcher rank {shard}")
    batch = cfg["batch"]
    n = batch // shards
    rows = slice(shard * n, (shard + 1) * n)
    lr = np.array([cfg["lr"]], np.float32)
    feeds = [{"x": np.ascontiguousarray(xs[k, rows]), "y": np.ascontiguousarray(ys[k, rows]),
              p.lr_params_feed_name: lr} for k in range(len(xs))]

    for i in range(spec["warmup"]):
        sess.run(["loss"], feeds[i % len(feeds)])
    dist.barrier()  # no-op at world 1
    dist.reset_comm_stats()
    times = []
    t_all = time.perf_counter()
    for i in range(spec["steps"]):
        t0 = time.perf_counter()
        sess.run(["loss"], feeds[i % len(feeds)])
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - t_all
    stats = dist.comm_stats()
    dist.barrier()

    def nbytes(tree):
        if isinstance(tree, dict):
            return sum(nbytes(v) for v in tree.values())
        return int(np.asarray(tree).nbytes)

    opt_state = sess.get_optimizer_state()
    model_state = sess.get_model_state()["full_precision"]
    digest = hashlib.sha256()
    for k in sorted(model_state):
        digest.update(k.encode())
        digest.update(np.ascontiguousarray(model_state[k]).tobytes())
    write(dict(result, status="ok", world=world, rows=n, global_batch=batch, steps=len(times),
               step_s_median=statistics.median(times), step_s_mean=total / len(times), step_s_min=min(times),
               comm=stats, optimizer_state_bytes=nbytes(opt_state),
               optimizer_state_arrays=sum(len(v) if isinstance(v, dict) else 1 for v in opt_state.values()),
               model_bytes=nbytes(model_state), weights_sha256=digest.hexdigest()))


# ------------------------------------------------------------------------------------ the parent


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_busy_seconds():
    """CPU time spent by everything on the machine since boot (the busy fields of /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine_line():
    cpu = sbs.cpu_info()
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()
    return (f"machine: {cpu['model']}, {cpu['cores']} cores ({', '.join(cpu['isa'])}); load average "
            f"{loadavg():.2f}; {mpi[0] if mpi else 'mpirun'}")


def worker_command(spec):
    return [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]


def mpirun_command(n, spec, extra):
    cmd = [shutil.which("mpirun"), "--oversubscribe", "-np", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    for var in ("PYTHONPATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ONNXTRAIN_COMM_TIMEOUT"):
        if var in os.environ:
            cmd += ["-x", var]
    return cmd + extra + worker_command(spec)


def wait_bounded(procs, timeout):
    """Waits for every process (each leads its own process group); past `timeout` seconds, ends
    every group (SIGTERM, then SIGKILL). Returns [(returncode, stdout, stderr)] or None on timeout."""
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            outs.append((p.returncode, out, err))
        return outs
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
            end = time.monotonic() + 10
            while time.monotonic() < end and any(p.poll() is None for p in procs):
                time.sleep(0.1)
        for p in procs:
            p.communicate()
        return None


def run_job(commands, spec, timeout):
    """Starts `commands` (one mpirun, or one process per shard) at once; returns the shards'
    result dicts in order, or {'error': ...}."""
    t0 = time.perf_counter()
    load0 = loadavg()
    busy0, mine0 = cpu_busy_seconds(), children_cpu_seconds()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for c in commands]
    outs = wait_bounded(procs, timeout)
    if outs is None:
        return {"error": f"did not finish within {timeout:g} s (ended)", "output_tail": ""}
    wall = time.perf_counter() - t0
    # CPU the rest of the machine used meanwhile (in cores): other work skews the figures.
    other = max(0.0, (cpu_busy_seconds() - busy0) - (children_cpu_seconds() - mine0)) / wall
    text = "".join(o + e for _, o, e in outs)
    n = spec["world"] if spec["world"] > 1 else len(commands)
    shards = []
    for r in range(n):
        f = os.path.join(spec["out_dir"], f"{spec['tag']}.rank{r}.json")
        if os.path.exists(f):
            with open(f) as fh:
                shards.append(json.load(fh))
    bad = [rc for rc, _, _ in outs if rc != 0]
    if bad or len(shards) != n:
        lines = text.strip().splitlines() or ["(no output)"]
        return {"error": f"exit {bad[0] if bad else 0}: {lines[-1]}", "output_tail": text[-3000:]}
    return {"ranks": shards, "wall_s": wall, "loadavg": [load0, loadavg()], "other_cpu_cores": other}


def summarize_job(job):
    """The shards' results of one job folded into one row: throughput from the slowest shard's
    median step; communication per step as means over the ranks."""
    if "error" in job:
        return {"status": "error", "error": job["error"]}
    ranks = job["ranks"]
    if any(r["status"] != "ok" for r in ranks):
        reasons = {r.get("reason", r["status"]) for r in ranks if r["status"] != "ok"}
        return {"status": "not available", "reason": "; ".join(sorted(reasons))}
    step = max(r["step_s_median"] for r in ranks)
    steps = ranks[0]["steps"]
    row = {"status": "ok", "world": ranks[0]["world"], "shards": len(ranks), "global_batch": ranks[0]["global_batch"],
           "rows_per_shard": ranks[0]["rows"], "steps": steps, "step_s": step,
           "step_s_per_rank": [r["step_s_median"] for r in ranks], "samples_per_s": ranks[0]["global_batch"] / step,
           "optimizer_state_bytes_per_rank": [r["optimizer_state_bytes"] for r in ranks],
           "optimizer_state_arrays_per_rank": [r["optimizer_state_arrays"] for r in ranks],
           "ranks_identical": len({r["weights_sha256"] for r in ranks}) == 1,
           "wall_s": job["wall_s"], "loadavg": job["loadavg"], "other_cpu_cores": job["other_cpu_cores"],
           "builds": sorted({r["build"] for r in ranks})}
    if row["world"] > 1:
        c = [r["comm"] for r in ranks]
        comm = [x["comm_seconds"] / steps for x in c]
        wait = [x["wait_seconds"] / steps for x in c]
        row.update(collectives_per_step=c[0]["collectives"] / steps, bytes_per_step_per_rank=c[0]["bytes"] / steps,
                   comm_s_per_step=comm, wait_s_per_step=wait,
                   overlap_share=1 - sum(wait) / sum(comm) if sum(comm) > 0 else None,
                   overlap_share_per_rank=[1 - b / a if a > 0 else None for a, b in zip(comm, wait)])
    return row


def fmt(x, spec=".1f", none="—"):
    return none if x is None else format(x, spec)


def fmt_bytes(b):
    if b is None:
        return "—"
    if b >= 1 << 20:
        return f"{b / (1 << 20):.2f} MiB"
    if b >= 1 << 10:
        return f"{b / (1 << 10):.1f} KiB"
    return f"{b:.0f} B"


def ok(r):
    return r.get("status") == "ok"


def markdown(header, results, workloads, buckets, build):
    out = [header, ""]
    out += ["### Throughput (1 thread per rank, the same global batch every step)", "",
            "| workload | global batch | 1 rank: step | samples/s | 2 ranks: step | samples/s | scaling efficiency "
            "| 2 processes, no communication: step | samples/s | efficiency | ranks bitwise equal |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for w in workloads:
        one, two, ind = (results[w].get(k, {}) for k in ("w1.z0.default", "w2.z0.default", "indep"))

        def eff(r):
            return r["samples_per_s"] / (2 * one["samples_per_s"]) if ok(one) and ok(r) else None
        out.append(
            f"| {w} | {one.get('global_batch', '—')} ({two.get('rows_per_shard', '—')} per rank) "
            f"| {fmt(ok(one) and 1e3 * one['step_s'] or None, '.2f')} ms | {fmt(one.get('samples_per_s'), '.0f')} "
            f"| {fmt(ok(two) and 1e3 * two['step_s'] or None, '.2f')} ms | {fmt(two.get('samples_per_s'), '.0f')} "
            f"| {fmt(eff(two) and 100 * eff(two), '.0f')}% "
            f"| {fmt(ok(ind) and 1e3 * ind['step_s'] or None, '.2f')} ms | {fmt(ind.get('samples_per_s'), '.0f')} "
            f"| {fmt(eff(ind) and 100 * eff(ind), '.0f')}% "
            f"| {'—' if not ok(two) else 'yes' if two['ranks_identical'] else 'NO'} |")
    out += ["", "### Communication at 2 ranks, per step (means over the ranks; buckets: "
            "onnxtrain.allreduce_bucket_bytes)", "",
            "| workload | configuration | collectives | payload per rank | comm thread | waited | overlap share "
            "(1 - wait/comm) | step | exposed communication | samples/s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    labels = {"default": "default buckets (4 MiB)", "one": "one bucket (2^40 B)"}
    for w in workloads:
        ind = results[w].get("indep", {})
        for key in [f"w2.z0.{b}" for b in buckets] + ["w2.z1.default"]:
            r = results[w].get(key, {})
            b = key.split(".", 2)[2]
            label = labels.get(b, f"{b} buckets" if not b.isdigit() else f"{b}-byte buckets")
            if key.startswith("w2.z1"):
                label = "ZeRO stage 1, default buckets"
            if not ok(r):
                out.append(f"| {w} | {label} | {r.get('status', '—')} | | | | | | | |")
                continue
            exposed = 1e3 * (r["step_s"] - ind["step_s"]) if ok(ind) else None
            out.append(
                f"| {w} | {label} | {r['collectives_per_step']:.2f} | {fmt_bytes(r['bytes_per_step_per_rank'])} "
                f"| {1e3 * statistics.mean(r['comm_s_per_step']):.2f} ms "
                f"| {1e3 * statistics.mean(r['wait_s_per_step']):.2f} ms "
                f"| {fmt(r['overlap_share'] is not None and 100 * r['overlap_share'] or None, '.0f')}% "
                f"| {1e3 * r['step_s']:.2f} ms | {fmt(exposed, '.2f')} ms | {r['samples_per_s']:.0f} |")
    out += ["", "### Optimizer state per rank (nbytes of get_optimizer_state()), deepspeed_zero_stage 0 vs 1", "",
            "| workload | world 1, stage 0 | world 1, stage 1 | world 2, stage 0 | world 2, stage 1 |",
            "|---|---:|---:|---:|---:|"]
    for w in workloads:
        cells = []
        for key in ("w1.z0.default", "w1.z1.default", "w2.z0.default", "w2.z1.default"):
            r = results[w].get(key, {})
            if ok(r):
                per = r["optimizer_state_bytes_per_rank"]
                cells.append(fmt_bytes(per[0]) if len(set(per)) == 1 else " / ".join(fmt_bytes(x) for x in per))
            elif r.get("status") == "not available":
                cells.append("not available")
            else:
                cells.append(r.get("status", "—"))
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    notes = []
    for w in workloads:
        for key, r in results[w].items():
            if r.get("status") == "not available":
                notes.append(f"{w} {key}: not available: {r['reason']}")
            elif r.get("status") == "error":
                notes.append(f"{w} {key}: ERROR: {r['error']}")
            elif ok(r) and not r["ranks_identical"] and r["world"] > 1:
                notes.append(f"{w} {key}: the ranks' weights DIFFER")
            if ok(r) and r["builds"] != [build]:
                notes.append(f"{w} {key}: ran another onnxtrain build than the one loaded at the start (rebuilt "
                             "during the run)")
            if ok(r) and r["other_cpu_cores"] > BUSY_CORES:
                notes.append(f"{w} {key}: other processes used {r['other_cpu_cores']:.2f} cores meanwhile: noisy")
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} timed steps, {QUICK_WARMUP} warm-up (smoke test)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--steps", type=int, default=None, help="timed steps per configuration")
    ap.add_argument("--buckets", default=",".join(BUCKETS), help="bucket configurations at 2 ranks: "
                    + ", ".join(BUCKETS) + " or byte counts")
    ap.add_argument("--rounds", type=int, default=None, help="rounds over every configuration; each row is the "
                    "round with the median step time (default 3, --quick 1)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per job (default 900)")
    ap.add_argument("--mpirun-args", default="", help="extra mpirun arguments, e.g. '--bind-to none'")
    ap.add_argument("--out", help="write the results as JSON to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--prepare", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(json.loads(a.worker))
    if a.prepare:  # in a child: torch stays out of the parent and the ranks
        return prepare(a.prepare[0], a.prepare[1:])

    workloads = [w for w in a.workloads.split(",") if w]
    if not workloads or any(w not in WORKLOADS for w in workloads):
        ap.error(f"--workloads: choose among {', '.join(WORKLOADS)}")
    buckets = [b for b in a.buckets.split(",") if b]
    for b in buckets:
        if b not in BUCKETS and not b.isdigit():
            ap.error(f"--buckets: {b!r} is neither one of {', '.join(BUCKETS)} nor a byte count")
    if "default" not in buckets:
        buckets.insert(0, "default")
    rounds = a.rounds or (1 if a.quick else 3)
    if rounds < 1:
        ap.error("--rounds must be >= 1")
    if a.steps is not None and a.steps < 1:
        ap.error("--steps must be >= 1")
    if a.steps is not None and a.steps < MIN_STEPS and not a.quick:
        log(f"[distributed] note: --steps {a.steps} is below {MIN_STEPS}: the medians are rough")
    if not shutil.which("mpirun"):
        sys.exit("bench/distributed.py: mpirun is missing: install OpenMPI with scripts/install_deps.sh --tests "
                 "(openmpi-bin, libopenmpi-dev) and rebuild onnxtrain")
    try:
        import onnxtrain
        import onnxtrain.distributed
    except ImportError as e:
        sys.exit(f"bench/distributed.py: cannot import onnxtrain ({e}); run with PYTHONPATH=build/python")
    if not onnxtrain.distributed.mpi_available():
        sys.exit("bench/distributed.py: this onnxtrain was built without MPI: install libopenmpi-dev "
                 "(scripts/install_deps.sh --tests) and rebuild")
    so_path = onnxtrain._C.__file__
    build = build_id()
    build_line = f"onnxtrain: {so_path} (modified {time.ctime(os.path.getmtime(so_path))})"
    extra = shlex.split(a.mpirun_args)
    os.environ.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})

    header = machine_line()
    print(header, flush=True)
    log(f"[distributed] {build_line}")
    started = time.perf_counter()
    work = tempfile.mkdtemp(prefix="bench_distributed.")
    results = {w: {} for w in workloads}
    try:
        log(f"[distributed] exporting {', '.join(workloads)} to {work}")
        try:
            prep = subprocess.run([sys.executable, os.path.abspath(__file__), "--prepare", work, *workloads],
                                  capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            sys.exit("bench/distributed.py: exporting the models took over 900 s")
        if prep.returncode != 0:
            sys.exit(f"bench/distributed.py: exporting the models failed:\n{prep.stderr[-3000:]}")
        runs = {w: {} for w in workloads}  # tag -> the rows of every round
        for rnd in range(rounds):
            for w in workloads:
                steps = a.steps or (QUICK_STEPS if a.quick else DEFAULT_STEPS[w])
                warmup = QUICK_WARMUP if a.quick else WARMUP
                # (tag, world, shards, zero stage, buckets); "indep": 2 processes without MPI.
                configs = [("w1.z0.default", 1, 1, 0, "default"), ("w1.z1.default", 1, 1, 1, "default"),
                           ("indep", 1, SHARDS, 0, "default")]
                configs += [(f"w2.z0.{b}", SHARDS, SHARDS, 0, b) for b in buckets]
                configs += [("w2.z1.default", SHARDS, SHARDS, 1, "default")]
                if rnd % 2:  # alternate the order between rounds
                    configs.reverse()
                for tag, world, shards, zero, b in configs:
                    spec = {"workload": w, "work": work, "out_dir": work, "tag": f"{w}.{tag}.{rnd}", "world": world,
                            "shards": shards, "threads": 1, "warmup": warmup, "zero_stage": zero,
                            # world 1, stage 1 only measures the optimizer state
                            "steps": min(steps, 3) if tag == "w1.z1.default" else steps,
                            "bucket_bytes": BUCKETS[b] if b in BUCKETS else int(b)}
                    if tag == "indep":
                        commands = [worker_command(dict(spec, shard=s)) for s in range(shards)]
                    else:
                        commands = [mpirun_command(world, spec, extra)]
                    job = run_job(commands, spec, a.timeout)
                    if "error" in job:
                        log(f"[distributed] {w} {tag} failed; its output ends with:\n{job['output_tail']}")
                    row = summarize_job(job)
                    runs[w].setdefault(tag, []).append(row)
                    if ok(row):
                        msg = f"{1e3 * row['step_s']:.2f} ms/step, {row['samples_per_s']:.0f} samples/s"
                        if row.get("overlap_share") is not None:
                            msg += f", overlap share {100 * row['overlap_share']:.0f}%"
                        msg += f" (other processes: {row['other_cpu_cores']:.2f} cores)"
                    else:
                        msg = row["status"] + ": " + row.get("reason", row.get("error", ""))
                    log(f"[distributed] round {rnd + 1}/{rounds} {w} {tag}: {msg}")
        # Per configuration, the round with the median step time (its figures stay together).
        for w in workloads:
            for tag, rows in runs[w].items():
                good = sorted((r for r in rows if ok(r)), key=lambda r: r["step_s"])
                pick = dict(good[(len(good) - 1) // 2], rounds=len(good)) if good else rows[-1]
                pick["step_s_rounds"] = [r["step_s"] for r in rows if ok(r)]
                results[w][tag] = pick
    finally:
        shutil.rmtree(work, ignore_errors=True)
    others = [r["other_cpu_cores"] for w in workloads for r in results[w].values() if ok(r)]
    header += (f"\n{build_line}\n1 thread per rank; mpirun {' '.join(extra) or 'with its default binding'}; "
               f"{'--quick' if a.quick else 'full run'}, {rounds} round(s), each row the median round; other processes' CPU use during the jobs: "
               f"{fmt(others and statistics.mean(others) or 0.0, '.2f')} cores on average, "
               f"{fmt(others and max(others) or 0.0, '.2f')} at most")
    text = markdown(header, results, workloads, buckets, build)
    print(text.split("\n", 1)[1])  # the machine line is printed above
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"header": header, "results": results, "markdown": text,
                       "elapsed_s": time.perf_counter() - started}, f, indent=1)
        print(f"\nresults: {a.out}")
    print(f"elapsed {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
