"""A BERT-base-like encoder training step on a GPU: onnxtrain's CUDA provider against PyTorch eager,
in the same call on the same device (scripts/gpu_check.sh runs it on the GPU machine).

Workload (bench/side_by_side.py's BERT builder at BERT-base sizes): token + position embeddings,
12 post-norm encoder layers (hidden 768, 12 heads, ffn 3072, GELU, no dropout), sequence 128, batch
32, token classification (8 classes) cross-entropy; Adam, lr 1e-4. Built once in PyTorch (seed 0)
and exported with torch.onnx.export (TorchScript exporter, training mode), so both start from the
same weights and see the same batch. Modes: fp32 (TF32 off in both), tf32 (both allow TF32), bf16
(PyTorch autocast to bfloat16; onnxtrain's mixed_precision "bf16").
Reports per mode: median step time, tokens/s, peak device memory (PyTorch: max_memory_reserved;
onnxtrain: its allocator's peak), first losses, and onnxtrain/PyTorch time ratios.

Usage: python3 bench/cuda_step.py --exe PATH/bench_cuda_step [--layers 12] [--batch 32] [--seq 128]
       [--steps 10] [--modes fp32,tf32,bf16] [--work DIR] [--json FILE]
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


def torch_run(model, x, y, mode, steps):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--modes", default="fp32,tf32,bf16")
    ap.add_argument("--work", default="/tmp/cuda_step")
    ap.add_argument("--json", default="")
    ap.add_argument("--profile", action="store_true", help="also profile 2 fp32 steps per node (synchronized)")
    a = ap.parse_args()
    import torch
    SIZES.update(layers=a.layers, seq=a.seq)
    sbs.BERT.update(SIZES)
    os.makedirs(a.work, exist_ok=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, SIZES["vocab"], (a.batch, a.seq), generator=g)
    y = torch.randint(0, SIZES["classes"], (a.batch, a.seq), generator=g)
    model = sbs.torch_models()["bert"]()
    path = os.path.join(a.work, "bert.train.onnx")
    kw = dict(input_names=["x", "y"], output_names=["loss"], opset_version=17, do_constant_folding=False,
              training=torch.onnx.TrainingMode.TRAINING)
    try:
        torch.onnx.export(model, (x, y), path, dynamo=False, **kw)
    except TypeError:  # a torch without the dynamo switch
        torch.onnx.export(model, (x, y), path, **kw)
    xb, yb = os.path.join(a.work, "x.bin"), os.path.join(a.work, "y.bin")
    x.numpy().astype("int64").tofile(xb)
    y.numpy().astype("int64").tofile(yb)
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    rows = []
    for mode in a.modes.split(","):
        m = sbs.torch_models()["bert"]()
        m.load_state_dict(model.state_dict())
        m.to(dev)
        t = torch_run(m, x.to(dev), y.to(dev), mode, a.steps)
        del m
        torch.cuda.empty_cache()
        env = dict(os.environ, ONNXTRAIN_CUDA_TF32="1" if mode == "tf32" else "0")
        cmd = [a.exe, path, str(a.batch), str(a.seq), str(SIZES["vocab"]), str(SIZES["classes"]), str(a.steps),
               "bf16" if mode == "bf16" else "fp32", xb, yb]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        o = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr.strip()[-400:]}
        rows.append(dict(mode=mode, torch=t, onnxtrain=o))
    profile = ""
    if a.profile:
        cmd = [a.exe, path, str(a.batch), str(a.seq), str(SIZES["vocab"]), str(SIZES["classes"]), "2", "fp32", xb, yb,
               "profile"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=a.work)
        try:
            profile = profile_summary(os.path.join(a.work, json.loads(p.stdout.strip().splitlines()[-1])["trace"]))
        except Exception as e:  # noqa: BLE001 (a report, never a failure)
            profile = f"profile failed: {e}: {p.stderr.strip()[-300:]}"
    tokens = a.batch * a.seq
    print(f"\nBERT-like training step, {SIZES['layers']} layers, hidden 768, batch {a.batch}, seq {a.seq}, Adam; {name}")
    print(f"{'mode':6} {'torch ms':>9} {'onnxtrain ms':>13} {'ratio':>6} {'torch tok/s':>12} {'onnxtrain tok/s':>16} "
          f"{'torch GiB':>10} {'onnxtrain GiB':>14} {'loss torch/onnxtrain':>22}")
    for r in rows:
        t, o = r["torch"], r["onnxtrain"]
        if "error" in o:
            print(f"{r['mode']:6} {t['median_ms']:9.2f}  onnxtrain failed: {o['error']}")
            continue
        print(f"{r['mode']:6} {t['median_ms']:9.2f} {o['median_ms']:13.2f} {o['median_ms'] / t['median_ms']:6.2f} "
              f"{tokens / t['median_ms'] * 1e3:12.0f} {tokens / o['median_ms'] * 1e3:16.0f} "
              f"{t['peak_bytes'] / 2**30:10.2f} {o['peak_reserved_bytes'] / 2**30:14.2f} "
              f"{t['first_loss']:10.5f}/{o['first_loss']:.5f}")
    if profile:
        print(profile)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=name, sizes=SIZES, batch=a.batch, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
