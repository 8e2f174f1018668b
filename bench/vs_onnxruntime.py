"""onnxtrain's InferenceSession against onnxruntime (onnxruntime-node 1.30, onnxruntime's native CPU
library) on the same machine, the same ONNX files and the same inputs: inference time and agreement
of the outputs. Never pass/fail on speed: it prints both times and their ratio.

Models (random weights, torch.manual_seed(0) before each is built, eval mode), exported by
torch.onnx.export (opset 17, constant folding on, so BatchNorm is folded into the convolutions) with
static shapes, one file per batch size:
  torchvision 0.14 (weights=None, 3x224x224 inputs; inception_v3 3x299x299): resnet18, resnet50,
    mobilenet_v2, mobilenet_v3_large, squeezenet1_1, shufflenet_v2_x1_0, densenet121, googlenet,
    inception_v3, vgg16, efficientnet_b0
  bert  the BERT-tiny-like encoder of bench/side_by_side.py (2 layers, hidden 128, 2 heads, seq 128;
        int64 token ids in, per-token logits out), inference only
  mlp   side_by_side.py's MLP 784-512-256-10
each at batch 1 and 8. BatchNorm statistics are those of random inputs (two train-mode passes;
with the defaults, mean 0 and variance 1, random deep networks' outputs vanish or explode). The
exports are cached in bench/.models/ (or --cache), keyed by file name (EXPORT_VERSION in it). Inputs: standard normal float32 (token ids uniform in
the vocabulary), seed 0, written once as raw files that both sides read.

Method. The export runs in a subprocess (the only one that imports torch). Every (framework, model,
batch, threads) measurement runs in a fresh process: onnxtrain in a child of this script
(SessionOptions: intra_op_num_threads = threads, inter_op_num_threads 1, sequential, ORT_ENABLE_ALL),
onnxruntime in `node bench/ort_node_runner.js` (intraOpNumThreads = threads, interOpNumThreads 1,
executionMode 'sequential', graphOptimizationLevel 'all', CPU provider); both with OMP_NUM_THREADS
and OPENBLAS_NUM_THREADS = threads. Each process loads the model, runs it once (its first output,
raw float32, is saved), makes warm-up runs, then timed runs: at least a per-model minimum (3 to
10), stopping once the time budget is spent, or after 3 runs once 4x the budget is spent (a run
slowed tenfold by other work). Its result is the median run time. Rounds alternate which framework
runs first (odd rounds onnxtrain first); the reported time is the median over rounds of each
process's median. The output check compares the two first outputs of every
round (shape, then max |difference|): PASS when the largest difference is within 1e-4 of the
onnxruntime output's max |value|, else that relative figure (fp32 convnets with folded BatchNorm
agree to ~1e-5). A model onnxtrain (or onnxruntime) fails to load or run leaves the error's first
line in the table and the run goes on.

Run (bench/setup.sh installs torchvision and onnxruntime-node; or scripts/install_onnxruntime_node.sh
alone, which prints the folder to export as ONNXTRAIN_ORT_NODE, default .npm/ of the checkout):
    bash bench/setup.sh
    PYTHONPATH=build/python /usr/bin/python3 bench/vs_onnxruntime.py
Options: --models resnet18,bert,... (default all), --batches 1,8, --threads 1,2, --rounds 2
(default; --quick 1), --quick (one warm-up, two timed runs: for development), --budget SECONDS
(timed runs' budget per process, default 1.5), --cache DIR, --ort-node DIR, --json PATH (default
bench/vs_onnxruntime.json). The full run at threads 1,2 takes about 20 minutes on a 2-core machine.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import side_by_side as sbs  # noqa: E402  (numpy only: the timing processes never import torch)

OPSET = 17
EXPORT_VERSION = 2   # in the cached files' names: raise it when the export changes
RTOL = 1e-4          # output check: max |difference| within this fraction of max |onnxruntime output|
PROCESS_TIMEOUT_S = 600

# name -> input image side (torchvision) or None (side_by_side.py's models), and the model's rough
# GFLOPs per sample, which sets its iteration counts.
MODELS = {
    "resnet18": (224, 1.8), "resnet50": (224, 4.1), "mobilenet_v2": (224, 0.3),
    "mobilenet_v3_large": (224, 0.22), "squeezenet1_1": (224, 0.35), "shufflenet_v2_x1_0": (224, 0.15),
    "densenet121": (224, 2.9), "googlenet": (224, 1.5), "inception_v3": (299, 5.7), "vgg16": (224, 15.5),
    "efficientnet_b0": (224, 0.4), "bert": (None, 0.55), "mlp": (None, 0.001),
}


def iteration_plan(model, batch, quick, budget_s):
    """Warm-up runs (the saved first run included), minimum and maximum timed runs, time budget:
    fewer runs for the large models at batch 8, whose one run takes seconds at one thread."""
    if quick:
        return {"warmup": 1, "min_iters": 2, "max_iters": 2, "budget_s": 0.0, "cap_s": 0.0}
    gflop = MODELS[model][1] * batch
    # cap_s: past it, three timed runs are enough (runs slowed tenfold by other work on the machine).
    plan = {"budget_s": budget_s, "cap_s": 4 * budget_s}
    if gflop > 20:
        return dict(plan, warmup=1, min_iters=3, max_iters=50)
    if gflop > 5:
        return dict(plan, warmup=2, min_iters=5, max_iters=200)
    return dict(plan, warmup=3, min_iters=10, max_iters=2000)


def model_file(cache, model, batch):
    return os.path.join(cache, f"{model}.b{batch}.v{EXPORT_VERSION}.onnx")


def input_specs(cache, model, batch):
    """The model's inputs: [{name, dtype, shape, file}] (raw little-endian files in the cache)."""
    side = MODELS[model][0]
    if model == "bert":
        name, dtype, shape = "ids", "int64", [batch, sbs.BERT["seq"]]
    elif model == "mlp":
        name, dtype, shape = "x", "float32", [batch, 784]
    else:
        name, dtype, shape = "x", "float32", [batch, 3, side, side]
    return [{"name": name, "dtype": dtype, "shape": shape, "file": os.path.join(cache, f"{model}.b{batch}.{name}.bin")}]


def write_inputs(cache, model, batch):
    """Writes the model's inputs once (seed 0)."""
    for spec in input_specs(cache, model, batch):
        if os.path.exists(spec["file"]):
            continue
        rng = np.random.default_rng(0)
        if spec["dtype"] == "int64":
            data = rng.integers(0, sbs.BERT["vocab"], spec["shape"], dtype=np.int64)
        else:
            data = rng.standard_normal(spec["shape"], np.float32)
        data.tofile(spec["file"] + ".tmp")
        os.replace(spec["file"] + ".tmp", spec["file"])


def read_input(spec):
    return np.fromfile(spec["file"], dtype=spec["dtype"]).reshape(spec["shape"])


# ------------------------------------------------------------------------------ children


def calibrate_batchnorm(torch, net, model):
    """Sets every BatchNorm's running statistics to those of random inputs (two train-mode forward
    passes of 8 standard normal samples, cumulative averages; no weight changes): with the default
    statistics (mean 0, variance 1) the random networks' activations vanish or explode layer after
    layer (GoogLeNet's output was all zeros, EfficientNet-B0's ~1e-14, Inception-v3's ~1e12), which
    would leave the output check nothing to compare."""
    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    side = MODELS[model][0]
    gen = torch.Generator().manual_seed(1)
    net.train()
    with torch.no_grad():
        for _ in range(2):
            net(torch.randn(8, 3, side, side, generator=gen))


def export_models(spec):
    """The export child: builds each model and writes the missing (model, batch) files. Returns
    {"exported": [...], "errors": {model: first line}, "versions": {...}}."""
    import onnx
    import torch
    import torchvision
    out = {"exported": [], "errors": {}, "versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                                                      "onnx": onnx.__version__}}
    for model, batches in spec["todo"].items():
        try:
            torch.manual_seed(0)
            if model in ("bert", "mlp"):
                net = sbs.torch_models()[model]()
                net.forward = net.logits   # inference model: logits only
            else:
                kwargs = {"init_weights": True} if model in ("googlenet", "inception_v3") else {}
                net = getattr(torchvision.models, model)(weights=None, **kwargs)
            calibrate_batchnorm(torch, net, model)
            net.eval()
            for batch in batches:
                inputs = input_specs(spec["cache"], model, batch)
                x = torch.from_numpy(read_input(inputs[0]))
                path = model_file(spec["cache"], model, batch)
                # Not under no_grad: there, eval-mode nn.TransformerEncoderLayer takes its fused fast
                # path (aten::_transformer_encoder_layer_fwd), which does not export.
                torch.onnx.export(net, (x,), path + ".tmp", input_names=[inputs[0]["name"]], output_names=["y"],
                                  opset_version=OPSET, do_constant_folding=True)
                os.replace(path + ".tmp", path)
                out["exported"].append(os.path.basename(path))
        except Exception as e:  # noqa: BLE001  (one model's failure must not stop the others)
            out["errors"][model] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return out


def run_onnxtrain(job):
    """The onnxtrain child: the same protocol as bench/ort_node_runner.js."""
    import onnxtrain as ot
    t0 = time.perf_counter()
    so = ot.SessionOptions()
    so.intra_op_num_threads = job["threads"]
    so.inter_op_num_threads = 1
    so.execution_mode = ot.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ot.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ot.InferenceSession(job["model"], sess_options=so, providers=["CPUExecutionProvider"])
    load_s = time.perf_counter() - t0
    feed = {spec["name"]: read_input(spec) for spec in job["inputs"]}
    first = np.asarray(sess.run(None, feed)[0])
    if first.dtype != np.float32:
        raise TypeError(f"first output is {first.dtype}, not float32")
    first.tofile(job["output_file"])
    for _ in range(job["warmup"] - 1):
        sess.run(None, feed)
    times = []
    start = time.perf_counter()
    while len(times) < job["max_iters"]:
        t = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t)
        spent = time.perf_counter() - start
        if (len(times) >= job["min_iters"] and spent > job["budget_s"]) or (len(times) >= 3 and spent > job["cap_s"]):
            break
    so_file = ot._C.__file__
    return {"median_s": statistics.median(times), "iters": len(times), "load_s": load_s,
            "output_shape": list(first.shape), "torch_imported": "torch" in sys.modules,
            "versions": {"onnxtrain": getattr(ot, "__version__", "?"),
                         "onnxtrain_build": f"{so_file}, modified {time.ctime(os.path.getmtime(so_file))}"}}


def child_main(kind, job_file):
    """Runs a child and prints "RESULT {json}" or, on an exception, "ERROR {json}" (its first line)."""
    with open(job_file) as f:
        job = json.load(f)
    try:
        result = export_models(job) if kind == "export" else run_onnxtrain(job)
    except Exception as e:  # noqa: BLE001
        lines = str(e).strip().splitlines()
        print("ERROR " + json.dumps({"error": f"{type(e).__name__}: {lines[0] if lines else ''}",
                                     "traceback": traceback.format_exc()[-3000:]}), flush=True)
        sys.exit(1)
    print("RESULT " + json.dumps(result), flush=True)


# ------------------------------------------------------------------------------ the parent


def run_process(argv, job, work, env, timeout=PROCESS_TIMEOUT_S):
    """Runs one child process on a JSON job; returns its RESULT dict or {"error": first line}."""
    job_file = os.path.join(work, f"job.{os.getpid()}.{time.monotonic_ns()}.json")
    with open(job_file, "w") as f:
        json.dump(job, f)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv + [job_file], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    finally:
        os.remove(job_file)
    wall = time.perf_counter() - t0
    lines = proc.stdout.splitlines()
    for tag in ("RESULT ", "ERROR "):
        line = next((x for x in lines if x.startswith(tag)), None)
        if line:
            return dict(json.loads(line[len(tag):]), wall_s=wall)
    if proc.returncode < 0:
        err = f"crashed (signal {-proc.returncode})"
    else:
        tail = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        # node prints the stack: its first line is the message; Python's traceback ends with it.
        err = (tail[0] if argv[0] == "node" else tail[-1]) if tail else f"exit status {proc.returncode}"
    return {"error": err, "stderr_tail": proc.stderr[-3000:], "wall_s": wall}


def compare_outputs(ours_file, ours_shape, ref_file, ref_shape):
    """(max |difference|, that over max |onnxruntime output|, max |onnxruntime output|), or a string
    for a shape mismatch or non-finite values."""
    if list(ours_shape) != list(ref_shape):
        return f"shape {ours_shape} vs {ref_shape}"
    a = np.fromfile(ours_file, np.float32).astype(np.float64)
    b = np.fromfile(ref_file, np.float32).astype(np.float64)
    if a.size != b.size:
        return f"size {a.size} vs {b.size}"
    abs_diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    nonfinite = int(np.sum(~np.isfinite(a)) + np.sum(~np.isfinite(b)))
    if nonfinite:
        return f"{nonfinite} non-finite values"
    ref_max = float(np.max(np.abs(b))) if b.size else 0.0
    return abs_diff, abs_diff / max(ref_max, 1e-30), ref_max


def first_line(error, limit=None):
    """The error's first line (cut to limit characters)."""
    line = error.splitlines()[0] if error else ""
    return line if limit is None or len(line) <= limit else line[:limit - 1] + "…"


def summarize(results, checks, models, batches, threads_list, export_errors):
    """One row per (model, batch, threads): median times, ratio, output check."""
    rows = []
    for m in models:
        for b in batches:
            for t in threads_list:
                row = {"model": m, "batch": b, "threads": t}
                for fw in ("onnxtrain", "onnxruntime"):
                    runs = [r for r in results if (r["model"], r["batch"], r["threads"], r["framework"]) == (m, b, t, fw)]
                    ok = [r["median_s"] for r in runs if "median_s" in r]
                    row[f"{fw}_s"] = statistics.median(ok) if ok else None
                    row[f"{fw}_runs_s"] = ok
                    row[f"{fw}_errors"] = sorted({first_line(r["error"]) for r in runs if "error" in r})
                if m in export_errors:
                    row["onnxtrain_errors"] = row["onnxruntime_errors"] = [f"export failed: {export_errors[m]}"]
                row["ratio"] = row["onnxtrain_s"] / row["onnxruntime_s"] if row["onnxtrain_s"] and row["onnxruntime_s"] else None
                cs = [c for c in checks if (c["model"], c["batch"], c["threads"]) == (m, b, t)]
                bad = [c["result"] for c in cs if isinstance(c["result"], str)]
                nums = [c["result"] for c in cs if not isinstance(c["result"], str)]
                if bad:
                    row["check"] = bad[0]
                elif nums:
                    row["max_abs_diff"] = max(x[0] for x in nums)
                    row["max_rel_diff"] = max(x[1] for x in nums)
                    row["output_max_abs"] = max(x[2] for x in nums)
                    row["check"] = "PASS" if row["max_rel_diff"] <= RTOL else f"rel {row['max_rel_diff']:.1e}"
                    if row["output_max_abs"] == 0:
                        row["check"] += " (output all zero)"
                else:
                    row["check"] = "—"
                rows.append(row)
    return rows


def markdown(header, rows):
    def ms(s, errors):
        if s is not None:
            return f"{s * 1e3:.2f}"
        return f"failed: {first_line(errors[0], 90)}" if errors else "—"

    h = header
    lines = [f"onnxtrain vs onnxruntime-node {h['versions'].get('onnxruntime-node', '?')} (CPU) — {h['cpu']['model']}, "
             f"nproc {h['nproc']}, load average {h['loadavg']['start']:.2f} → {h['loadavg']['end']:.2f}; "
             f"{h['rounds']} round(s){', quick' if h['quick'] else ''}; times are medians in ms; "
             f"ratio = onnxtrain / onnxruntime (< 1: onnxtrain faster)"
             + sbs.foreign_build_warning([h["versions"].get("onnxtrain_build", "")] if h["versions"].get("onnxtrain_build") else []),
             "",
             "| model | batch | threads | onnxtrain ms | onnxruntime ms | ratio | output check |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "—"
        lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {ms(r['onnxtrain_s'], r['onnxtrain_errors'])} | "
                     f"{ms(r['onnxruntime_s'], r['onnxruntime_errors'])} | {ratio} | {r['check']} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=None, help="order-alternating rounds (default 2, --quick 1)")
    ap.add_argument("--quick", action="store_true", help="one warm-up and two timed runs (development)")
    ap.add_argument("--budget", type=float, default=1.5, help="seconds of timed runs per process, after the minimum")
    ap.add_argument("--cache", default=os.path.join(HERE, ".models"), help="exported models and inputs")
    ap.add_argument("--ort-node", default=os.environ.get("ONNXTRAIN_ORT_NODE",
                                                         os.path.join(ROOT, ".npm", "node_modules", "onnxruntime-node")),
                    help="onnxruntime-node's package folder (default $ONNXTRAIN_ORT_NODE, else .npm/ of the checkout)")
    ap.add_argument("--json", default=os.path.join(HERE, "vs_onnxruntime.json"))
    ap.add_argument("--child", nargs=2, metavar=("KIND", "JOB"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child_main(*a.child)

    models = [m for m in a.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    batches = [int(b) for b in a.batches.split(",")]
    threads_list = [int(t) for t in a.threads.split(",")]
    rounds = a.rounds or (1 if a.quick else 2)
    ort_node = os.path.abspath(a.ort_node)
    if not os.path.isfile(os.path.join(ort_node, "package.json")):
        sys.exit(f"onnxruntime-node not found at {ort_node}: run scripts/install_onnxruntime_node.sh "
                 "or set ONNXTRAIN_ORT_NODE / --ort-node")
    if shutil.which("node") is None:
        sys.exit("node is not on PATH (Debian: apt-get install nodejs)")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    started = time.perf_counter()
    load_start = sbs.loadavg()
    base_env = dict(os.environ, ONNXTRAIN_ORT_NODE=ort_node)
    os.makedirs(a.cache, exist_ok=True)
    work = tempfile.mkdtemp(prefix="vs_onnxruntime.")
    try:
        for m in models:
            for b in batches:
                write_inputs(a.cache, m, b)
        todo = {m: [b for b in batches if not os.path.exists(model_file(a.cache, m, b))] for m in models}
        todo = {m: bs for m, bs in todo.items() if bs}
        export = {"versions": {}, "errors": {}}
        if todo:
            log(f"[vs_onnxruntime] exporting {', '.join(todo)} to {a.cache}")
            export = run_process([sys.executable, os.path.abspath(__file__), "--child", "export"],
                                 {"todo": todo, "cache": a.cache}, work, base_env, timeout=3600)
            if "error" in export:
                sys.exit(f"the export failed: {export['error']}\n{export.get('stderr_tail', export.get('traceback', ''))}")
            for m, err in export["errors"].items():
                log(f"[vs_onnxruntime] export of {m} failed: {err}")
        export_errors = export.get("errors", {})
        versions_file = os.path.join(a.cache, f"export.v{EXPORT_VERSION}.json")   # the exporter's versions
        if export["versions"]:
            with open(versions_file, "w") as f:
                json.dump(export["versions"], f)
        elif os.path.exists(versions_file):
            with open(versions_file) as f:
                export["versions"] = json.load(f)

        commands = {"onnxtrain": [sys.executable, os.path.abspath(__file__), "--child", "onnxtrain"],
                    "onnxruntime": ["node", os.path.join(HERE, "ort_node_runner.js")]}
        results, checks = [], []
        for r in range(rounds):
            order = ["onnxtrain", "onnxruntime"] if r % 2 == 0 else ["onnxruntime", "onnxtrain"]
            for m in models:
                if m in export_errors:
                    continue
                for b in batches:
                    for t in threads_list:
                        env = dict(base_env, OMP_NUM_THREADS=str(t), OPENBLAS_NUM_THREADS=str(t))
                        got = {}
                        for fw in order:
                            out_file = os.path.join(work, f"{fw}.{m}.b{b}.t{t}.r{r}.out")
                            job = dict(iteration_plan(m, b, a.quick, a.budget), model=model_file(a.cache, m, b),
                                       inputs=input_specs(a.cache, m, b), threads=t, output_file=out_file)
                            res = run_process(commands[fw], job, work, env)
                            got[fw] = res
                            results.append(dict(res, framework=fw, model=m, batch=b, threads=t, round=r))
                            what = (f"{res['median_s'] * 1e3:.2f} ms ({res['iters']} runs)" if "median_s" in res
                                    else f"FAILED: {first_line(res['error'])}")
                            log(f"[vs_onnxruntime] round {r + 1} {m} b{b} {t}t {fw}: {what}")
                        if all("output_shape" in got[fw] for fw in order):
                            res = compare_outputs(os.path.join(work, f"onnxtrain.{m}.b{b}.t{t}.r{r}.out"),
                                                  got["onnxtrain"]["output_shape"],
                                                  os.path.join(work, f"onnxruntime.{m}.b{b}.t{t}.r{r}.out"),
                                                  got["onnxruntime"]["output_shape"])
                            checks.append({"model": m, "batch": b, "threads": t, "round": r, "result": res})
                        for fw in order:
                            path = os.path.join(work, f"{fw}.{m}.b{b}.t{t}.r{r}.out")
                            if os.path.exists(path):
                                os.remove(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = summarize(results, checks, models, batches, threads_list, export_errors)
    versions = dict(export.get("versions", {}), python=platform.python_version(), numpy=np.__version__)
    for res in results:
        versions.update(res.get("versions", {}))
    header = {"cpu": sbs.cpu_info(), "nproc": len(os.sched_getaffinity(0)), "loadavg": {"start": load_start,
              "end": sbs.loadavg()}, "versions": versions, "onnxtrain_revision": sbs.git_revision(),
              "ort_node": ort_node, "rounds": rounds, "quick": a.quick, "budget_s": a.budget, "opset": OPSET,
              "rtol": RTOL, "python": sys.executable,
              "environment": {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE")}, "elapsed_s": time.perf_counter() - started}
    report = {"header": header, "rows": rows, "checks": checks, "runs": results}
    report["markdown"] = markdown(header, rows)
    with open(a.json, "w") as f:
        json.dump(report, f, indent=1)
    print(report["markdown"])
    print(f"\nfull results: {a.json}; elapsed {header['elapsed_s'] / 60:.1f} min")


if __name__ == "__main__":
    main()
