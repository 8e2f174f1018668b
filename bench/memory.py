"""Peak memory of training: onnxtrain against PyTorch on a BERT-base-like encoder and a ResNet-50.
Never pass/fail: it prints peak resident memory and step times side by side.

Workloads (built once in PyTorch with seed 0, exported with torch.onnx.export in training mode, so
that both frameworks start from the same weights and see the same batches; Adam, lr 1e-4):
  bert      BERT-base-like: token + position embeddings, 12 post-norm encoder layers (hidden 768,
            12 heads, ffn 3072, GELU, no dropout), sequence 512, batch 4, token classification
            (8 classes) cross-entropy (bench/side_by_side.py's BERT builder at BERT-base sizes)
  resnet50  torchvision's ResNet-50 (random weights, train-mode BatchNorm), batch 16, 224x224,
            1000-class cross-entropy
Runs, each in its own process (the onnxtrain processes never import torch):
  torch             plain eager training (forward, backward, Adam step)
  torch-checkpoint  torch.utils.checkpoint around each encoder layer (bert) or each bottleneck
                    block (resnet50): activations inside are recomputed in the backward pass
  onnxtrain         TrainingSession on the exported model, AdamOptimizer
  onnxtrain-recompute-layer   onnxruntime-training's transformer_layer_recompute (bert; resnet50
                    has no transformer layer: the row reports that error)
  onnxtrain-recompute-budget  onnxtrain's recompute_budget_bytes: the budget is set a quarter of the
                    way from the least estimate the pass can reach to the saved activations
                    without recompute (both read from the error a budget of 1 byte gives)
  onnxtrain-memgrad           use_memory_efficient_gradient: each weight updated as soon as its
                    gradient is complete (the gradient freed there)
  onnxtrain-recompute-layer+memgrad   both
Each process runs --steps steps (default 3; the first allocates) and reports its peak resident
memory (VmHWM) and the peak above its resident size after imports and data loading, before the model
is built (the model's own memory: PyTorch's import alone is ~0.3 GB more than onnxtrain's), plus the median time of the
steps after the first and the first loss (both frameworks' first losses should agree to ~1e-4).

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/memory.py [--workloads bert,resnet50]
       [--threads 2] [--steps 3] [--work DIR] [--json bench/memory.json]
       [--bert-layers N] [--seq N] [--batch N]   (smaller runs; the models are exported per size,
       so give a fresh --work folder). At full size a BERT-base step takes minutes on 2 cores.
Needs torchvision for resnet50 (bench/setup.sh installs it) and about 12 GB of free memory.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import side_by_side as sbs  # noqa: E402  (numpy only at import)

BERT_BASE = dict(vocab=30522, seq=512, hidden=768, heads=12, ffn=3072, layers=12, classes=8)
BATCH = {"bert": 4, "resnet50": 16}


def apply_sizes(sizes):
    """--bert-layers / --seq / --batch overrides (smaller runs for development), in every process."""
    if sizes.get("bert_layers"):
        BERT_BASE["layers"] = sizes["bert_layers"]
    if sizes.get("seq"):
        BERT_BASE["seq"] = sizes["seq"]
    for w in BATCH:
        if sizes.get("batch"):
            BATCH[w] = sizes["batch"]
LR = 1e-4
RUNS = ("torch", "torch-checkpoint", "onnxtrain", "onnxtrain-memgrad", "onnxtrain-recompute-layer",
        "onnxtrain-recompute-budget", "onnxtrain-recompute-layer+memgrad")


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def torch_module(workload, checkpointed):
    """The PyTorch module (forward(x, y) -> loss), with torch.utils.checkpoint per layer/block."""
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    if workload == "bert":
        sbs.BERT.update(BERT_BASE)
        base = sbs.torch_models()["bert"]

        class Bert(base):
            def logits(self, ids):
                if not checkpointed:
                    return super().logits(ids)
                h = self.tok(ids) + self.pos
                for layer in self.layers:
                    h = checkpoint(layer, h)
                return self.head(h)
        return Bert()
    import torchvision

    class ResNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torchvision.models.resnet50(weights=None)

        def forward(self, x, y):
            n = self.net
            h = n.maxpool(n.relu(n.bn1(n.conv1(x))))
            for stage in (n.layer1, n.layer2, n.layer3, n.layer4):
                for block in stage:
                    h = checkpoint(block, h) if checkpointed else block(h)
            return F.cross_entropy(n.fc(torch.flatten(n.avgpool(h), 1)), y)
    return ResNet()


def batches(workload, n=2):
    rng = np.random.default_rng(0)
    b = BATCH[workload]
    if workload == "bert":
        s = BERT_BASE["seq"]
        return rng.integers(0, BERT_BASE["vocab"], (n, b, s)), rng.integers(0, BERT_BASE["classes"], (n, b, s))
    return rng.standard_normal((n, b, 3, 224, 224), np.float32), rng.integers(0, 1000, (n, b))


def prepare(workload, work):
    """Weights (torch.save), the training model with its loss output, the trained names, the data."""
    import torch
    torch.manual_seed(0)
    module = torch_module(workload, False)
    x, y = batches(workload)
    np.savez(os.path.join(work, f"{workload}.data.npz"), x=x, y=y)
    torch.save(module.state_dict(), os.path.join(work, f"{workload}.pt"))
    path = os.path.join(work, f"{workload}.train.onnx")
    torch.onnx.export(module, (torch.from_numpy(x[0]), torch.from_numpy(y[0])), path, input_names=["x", "y"],
                      output_names=["loss"], opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    with open(os.path.join(work, f"{workload}.weights.json"), "w") as f:
        json.dump([n for n, _ in module.named_parameters()], f)


def child(spec):
    apply_sizes(spec["sizes"])
    w, work, run, steps = spec["workload"], spec["work"], spec["run"], spec["steps"]
    data = np.load(os.path.join(work, f"{w}.data.npz"))
    xs, ys = data["x"], data["y"]
    if run.startswith("torch"):
        import torch
        if w == "resnet50":
            import torchvision  # noqa: F401  (imported before the base is taken)
        torch.set_num_threads(spec["threads"])
        base = status_kib("VmRSS")
        module = torch_module(w, run == "torch-checkpoint")
        module.load_state_dict(torch.load(os.path.join(work, f"{w}.pt")))
        module.train()
        opt = torch.optim.Adam(module.parameters(), lr=LR)
        tx = [torch.from_numpy(xs[k]) for k in range(len(xs))]
        ty = [torch.from_numpy(ys[k]) for k in range(len(ys))]

        def step(i):
            opt.zero_grad(set_to_none=True)
            loss = module(tx[i % len(tx)], ty[i % len(ty)])
            loss.backward()
            opt.step()
            return float(loss.item())
    else:
        import onnxtrain as ot
        p = ot.TrainingParameters()
        p.loss_output_name = "loss"
        p.training_optimizer_name = "AdamOptimizer"
        p.optimizer_attributes = {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-8, "lambda": 0.0}
        p.optimizer_int_attributes = {"do_bias_correction": 1}
        with open(os.path.join(work, f"{w}.weights.json")) as f:
            p.weights_to_train = set(json.load(f))
        if run.startswith("onnxtrain-recompute-layer"):
            p.transformer_layer_recompute = True
        if run.endswith("memgrad"):
            p.use_memory_efficient_gradient = True
        so = ot.SessionOptions()
        so.intra_op_num_threads = spec["threads"]
        budget = None
        if run == "onnxtrain-recompute-budget":
            p.recompute_budget_bytes = 1
            try:
                ot.TrainingSession(os.path.join(work, f"{w}.train.onnx"), p, so)
                return {"error": "a budget of 1 byte was accepted"}
            except ValueError as e:
                m = re.search(r"(\d+) bytes of saved activations at best \((\d+) without", str(e))
                if not m:
                    return {"error": str(e)[:200]}
                least, total = int(m.group(1)), int(m.group(2))
            budget = least + (total - least) // 4
            p.recompute_budget_bytes = budget
        base = status_kib("VmRSS")
        try:
            sess = ot.TrainingSession(os.path.join(work, f"{w}.train.onnx"), p, so)
        except Exception as e:  # noqa: BLE001 - the error is the result
            return {"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"[:200]}
        lr = np.array([LR], np.float32)
        feeds = [{"x": xs[k], "y": ys[k], p.lr_params_feed_name: lr} for k in range(len(xs))]

        def step(i):
            return float(np.asarray(sess.run(["loss"], feeds[i % len(feeds)])[0]))
    losses, times = [], []
    for i in range(steps):
        t = time.perf_counter()
        losses.append(step(i))
        times.append(time.perf_counter() - t)
    peak = status_kib("VmHWM") * 1024
    r = {"peak": peak, "above_base": peak - base * 1024, "losses": losses,
         "step_s": statistics.median(times[1:] or times), "first_step_s": times[0]}
    if not run.startswith("torch"):
        st = sess.last_run_stats()
        r["arena"], r["peak_live"] = st["arena_bytes"], st["peak_live_bytes"]
        if budget:
            r["budget"] = budget
    return r


def run_child(spec):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)], env=env,
                       capture_output=True, text=True, timeout=3600)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr or r.stdout).strip().splitlines()[-2:]
        return {"error": f"exit {r.returncode}: {' | '.join(tail)}"[:300]}
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--prepare", help=argparse.SUPPRESS)
    ap.add_argument("--workloads", default="bert,resnet50")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--work", help="folder for the exported models (default: a temporary one)")
    ap.add_argument("--json", default=os.path.join(HERE, "memory.json"))
    ap.add_argument("--bert-layers", type=int, help="encoder layers (default 12; fewer for a quick run)")
    ap.add_argument("--seq", type=int, help="bert sequence length (default 512)")
    ap.add_argument("--batch", type=int, help="batch of both workloads (default bert 4, resnet50 16)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.prepare:
        w, work, sizes = json.loads(args.prepare)
        apply_sizes(sizes)
        prepare(w, work)
        return
    sizes = {"bert_layers": args.bert_layers, "seq": args.seq, "batch": args.batch}
    work = args.work or tempfile.mkdtemp(prefix="memory_bench_")
    os.makedirs(work, exist_ok=True)
    results = []
    for w in args.workloads.split(","):
        if not os.path.exists(os.path.join(work, f"{w}.train.onnx")):
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--prepare", json.dumps([w, work, sizes])],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{w}: export failed: {r.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
        for run in args.runs.split(","):
            spec = {"workload": w, "work": work, "run": run, "steps": args.steps, "threads": args.threads,
                    "sizes": sizes}
            res = run_child(spec)
            results.append({"workload": w, "run": run, **res})
            print(f"  done: {w} {run}", flush=True)
    with open(args.json, "w") as f:
        json.dump({"threads": args.threads, "steps": args.steps, "sizes": sizes, "loadavg": sbs.loadavg(), "cpu": sbs.cpu_info(),
                   "results": results}, f, indent=1)
    print(f"\n| workload | run | peak GB | above base GB | vs torch (above base) | step s | step vs own plain | "
          f"arena GB | first loss |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for w in args.workloads.split(","):
        ref = next((r for r in results if r["workload"] == w and r["run"] == "torch" and "peak" in r), None)
        own = {fw: next((r for r in results if r["workload"] == w and r["run"] == fw and "peak" in r), None)
               for fw in ("torch", "onnxtrain")}
        for r in (r for r in results if r["workload"] == w):
            if "error" in r:
                print(f"| {w} | {r['run']} | {r['error']} | | | | | | |")
                continue
            ratio = f"{r['above_base'] / ref['above_base']:.2f}" if ref else "-"
            plain = own["torch" if r["run"].startswith("torch") else "onnxtrain"]
            slow = f"{r['step_s'] / plain['step_s']:.2f}" if plain else "-"
            arena = f"{r['arena'] / 1e9:.2f}" if "arena" in r else ""
            name = r["run"] + (f" ({r['budget'] / 1e9:.2f} GB)" if r.get("budget") else "")
            print(f"| {w} | {name} | {r['peak'] / 1e9:.2f} | {r['above_base'] / 1e9:.2f} | {ratio} | "
                  f"{r['step_s']:.2f} | {slow} | {arena} | {r['losses'][0]:.5f} |")


if __name__ == "__main__":
    main()
