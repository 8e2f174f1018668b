"""Training steps on a GPU: onnxtrain's CUDA provider against PyTorch eager, in the same call on the
same device (scripts/gpu_check.sh runs it on the GPU machine).

Workloads, each built once in PyTorch (seed 0) and exported with torch.onnx.export (TorchScript
exporter, training mode), so both start from the same weights and see the same batch:
  bert      bench/side_by_side.py's BERT builder at BERT-base sizes: token + position embeddings,
            12 post-norm encoder layers (hidden 768, 12 heads, ffn 3072, GELU, no dropout), sequence
            128, batch 32, token classification (8 classes) cross-entropy; Adam, lr 1e-4
  resnet50  torchvision's ResNet-50 (random weights, BatchNorm in training mode), batch 64 of
            3x224x224, 1000 classes, cross-entropy; SGD momentum 0.9, lr 0.01 (PyTorch with cuDNN's
            heuristics, benchmark off, as onnxtrain)
Modes: fp32 (TF32 off in both), tf32 (both allow TF32), bf16 (PyTorch autocast to bfloat16;
onnxtrain's mixed_precision "bf16"). Reports per mode: median step time, tokens or images per
second, peak device memory (PyTorch: max_memory_reserved; onnxtrain: its allocator's peak), first
losses, onnxtrain/PyTorch time ratios, and the op types of onnxtrain's steps that ran on the CPU.

Usage: python3 bench/cuda_step.py --exe PATH/bench_cuda_step [--workloads bert,resnet50] [--layers 12]
       [--batch 32] [--seq 128] [--image-batch 64] [--steps 10] [--modes fp32,tf32,bf16]
       [--image-modes fp32,tf32] [--work DIR] [--json FILE] [--profile]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import side_by_side as sbs  # noqa: E402

SIZES = dict(vocab=30522, seq=128, hidden=768, heads=12, ffn=3072, layers=12, classes=8)


def torch_run(model, x, y, mode, steps, opt):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for i in range(steps + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
            loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(float(loss))  # synchronizes
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1e3)
    return dict(median_ms=statistics.median(times), first_loss=losses[0], last_loss=losses[-1],
                peak_bytes=torch.cuda.max_memory_reserved())


def profile_summary(trace, top=18):
    """Time per (operator, provider) over a profiled run (each node synchronized), largest first."""
    with open(trace) as f:
        events = json.load(f)
    per, total = {}, 0.0
    for e in events:
        a = e.get("args", {})
        if e.get("cat") != "Node" or "op_name" not in a:
            continue
        k = (a["op_name"], a.get("provider", "?"))
        n, t = per.get(k, (0, 0.0))
        per[k] = (n + 1, t + e.get("dur", 0) / 1e3)
        total += e.get("dur", 0) / 1e3
    rows = sorted(per.items(), key=lambda kv: -kv[1][1])[:top]
    lines = [f"profile (every node synchronized): {total:.1f} ms in nodes over the profiled steps"]
    lines += [f"  {op:34} {prov:24} {n:6d} nodes {t:9.2f} ms" for (op, prov), (n, t) in rows]
    return "\n".join(lines)


def export(model, args, path):
    import warnings
    import torch
    warnings.filterwarnings("ignore", category=UserWarning)  # the exporter's notes on BatchNorm's counters
    kw = dict(input_names=["x", "y"], output_names=["loss"], opset_version=17, do_constant_folding=False,
              training=torch.onnx.TrainingMode.TRAINING)
    try:
        torch.onnx.export(model, args, path, dynamo=False, **kw)
    except TypeError:  # a torch without the dynamo switch
        torch.onnx.export(model, args, path, **kw)


def bert_workload(a):
    """BERT-like encoder: ids x [B, S], labels y [B, S]; Adam lr 1e-4."""
    import torch
    SIZES.update(layers=a.layers, seq=a.seq)
    sbs.BERT.update(SIZES)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, SIZES["vocab"], (a.batch, a.seq), generator=g)
    y = torch.randint(0, SIZES["classes"], (a.batch, a.seq), generator=g)
    make = sbs.torch_models()["bert"]
    return dict(name=f"BERT-like training step, {SIZES['layers']} layers, hidden 768, batch {a.batch}, seq {a.seq}, Adam",
                make=make, model=make(), x=x, y=y, optimizer="adam", lr=1e-4, items=a.batch * a.seq, unit="tok/s")


def resnet50_workload(a):
    """torchvision's ResNet-50 (random weights, BatchNorm training), images x [B, 3, 224, 224],
    classes y [B]; SGD momentum 0.9, lr 0.01."""
    import torch
    import torch.nn.functional as F
    import torchvision

    class ResNet50(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torchvision.models.resnet50(num_classes=1000)

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.image_batch, 3, 224, 224, generator=g)
    y = torch.randint(0, 1000, (a.image_batch,), generator=g)
    return dict(name=f"ResNet-50 training step, batch {a.image_batch} of 3x224x224, SGD momentum 0.9", make=ResNet50,
                model=ResNet50(), x=x, y=y, optimizer="momentum", lr=0.01, items=a.image_batch, unit="img/s")


def torch_optimizer(model, name, lr):
    import torch
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9 if name == "momentum" else 0.0)


def feed_args(w, work):
    """bench_cuda_step's INPUT arguments: the batch as raw files."""
    args = []
    for name in ("x", "y"):
        t = w[name].numpy()
        t = t.astype("int64") if t.dtype.kind in "iu" else t.astype("float32")
        path = os.path.join(work, f"{w['key']}.{name}.bin")
        t.tofile(path)
        dtype = "int64" if t.dtype.kind == "i" else "float32"
        args.append(f"{name}={dtype}:{','.join(str(d) for d in t.shape)}:{path}")
    return args


def run_workload(a, key, modes):
    import torch
    w = (bert_workload if key == "bert" else resnet50_workload)(a)
    w["key"] = key
    path = os.path.join(a.work, f"{key}.train.onnx")
    export(w["model"], (w["x"], w["y"]), path)
    feeds = feed_args(w, a.work)
    dev = torch.device("cuda")
    rows = []
    for mode in modes:
        m = w["make"]()
        m.load_state_dict(w["model"].state_dict())
        m.to(dev)
        t = torch_run(m, w["x"].to(dev), w["y"].to(dev), mode, a.steps, torch_optimizer(m, w["optimizer"], w["lr"]))
        del m
        torch.cuda.empty_cache()
        env = dict(os.environ, ONNXTRAIN_CUDA_TF32="1" if mode == "tf32" else "0")
        cmd = [a.exe, path, str(a.steps), "bf16" if mode == "bf16" else "fp32", w["optimizer"], str(w["lr"])] + feeds
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
            o = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr.strip()[-400:]}
        except subprocess.TimeoutExpired:
            o = {"error": f"no result within {a.timeout} s"}
        rows.append(dict(mode=mode, torch=t, onnxtrain=o))
    profile = ""
    if a.profile:
        cmd = [a.exe, path, "2", "fp32", w["optimizer"], str(w["lr"])] + feeds + ["profile"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, cwd=a.work)
            profile = profile_summary(os.path.join(a.work, json.loads(p.stdout.strip().splitlines()[-1])["trace"]))
        except Exception as e:  # noqa: BLE001 (a report, never a failure)
            profile = f"profile failed: {e}"
    report(w, rows, profile, torch.cuda.get_device_name(0))
    return dict(workload=key, device=torch.cuda.get_device_name(0), rows=rows)


def report(w, rows, profile, device):
    unit = w["unit"]
    print(f"\n{w['name']}; {device}")
    print(f"{'mode':6} {'torch ms':>9} {'onnxtrain ms':>13} {'ratio':>6} {'torch ' + unit:>12} {'onnxtrain ' + unit:>16} "
          f"{'torch GiB':>10} {'onnxtrain GiB':>14} {'loss torch/onnxtrain':>22}  on the CPU")
    for r in rows:
        t, o = r["torch"], r["onnxtrain"]
        if "error" in o:
            print(f"{r['mode']:6} {t['median_ms']:9.2f}  onnxtrain failed: {o['error']}")
            continue
        print(f"{r['mode']:6} {t['median_ms']:9.2f} {o['median_ms']:13.2f} {o['median_ms'] / t['median_ms']:6.2f} "
              f"{w['items'] / t['median_ms'] * 1e3:12.0f} {w['items'] / o['median_ms'] * 1e3:16.0f} "
              f"{t['peak_bytes'] / 2**30:10.2f} {o['peak_reserved_bytes'] / 2**30:14.2f} "
              f"{t['first_loss']:10.5f}/{o['first_loss']:.5f}  {o.get('on_cpu') or 'nothing'}")
    if profile:
        print(profile)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--workloads", default="bert,resnet50")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--image-batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--modes", default="fp32,tf32,bf16", help="BERT's modes")
    ap.add_argument("--image-modes", default="fp32,tf32", help="ResNet-50's modes (bf16 also runs)")
    ap.add_argument("--timeout", type=int, default=180, help="seconds for each onnxtrain run")
    ap.add_argument("--work", default="/tmp/cuda_step")
    ap.add_argument("--json", default="")
    ap.add_argument("--profile", action="store_true", help="also profile 2 fp32 steps per node (synchronized)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    results = []
    for key in a.workloads.split(","):
        if key not in ("bert", "resnet50"):
            raise SystemExit(f"unknown workload '{key}' (bert, resnet50)")
        results.append(run_workload(a, key, (a.modes if key == "bert" else a.image_modes).split(",")))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(sizes=SIZES, batch=a.batch, image_batch=a.image_batch, results=results), f, indent=1)


if __name__ == "__main__":
    main()
