"""bf16 mixed precision against fp32 after many steps: the side-by-side benchmark's MLP, CNN and
BERT-tiny workloads (bench/side_by_side.py: same models, weights, batches and optimizers), trained by
onnxtrain in fp32 and with TrainingParameters.mixed_precision = "bf16" for --steps steps (default 200)
cycling over the workload's 10 batches. Reports, per workload, the loss after the run (the mean over
the last cycle of 10 batches, so that every batch counts once) in each precision and their relative
difference, against the performance issue's goal (within 2 %), and the same for PyTorch's autocast
bf16 with --torch. Where the loss is still falling steeply at the end (BERT-tiny memorising its 10
batches of random labels goes from 2.2 to 0.04 in 600 steps), a small lag between two trajectories
is a large relative difference: the table also gives the step at which each bf16 run's 10-step mean
first reaches its fp32 run's final loss (the lag in steps). Never pass/fail; a markdown table on
stdout.

    PYTHONPATH=build/python /usr/bin/python3 bench/bf16_convergence.py [--steps 200] [--workloads mlp,cnn,bert]
        [--threads 1] [--torch]

About 1 minute on 2 cores (BERT-tiny's 2 x 200 steps are most of it); --torch adds about as much.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import side_by_side as sbs  # noqa: E402

GOAL = 0.02  # the bound on |loss_bf16 - loss_fp32| / loss_fp32 after the run


def child(spec):
    """Trains one (framework, workload, precision) for spec['steps'] steps; prints its losses."""
    if spec["framework"] == "onnxtrain":
        step, loss_of = sbs.onnxtrain_step(spec)
        losses = [loss_of(step(i % sbs.N_BATCHES)) for i in range(spec["steps"])]
    else:
        losses = torch_losses(spec)
    print("RESULT " + json.dumps({"losses": losses}))


def torch_losses(spec):
    """PyTorch's run of the same workload: fp32, or the AMP recipe for bf16 (forward and loss under
    torch.autocast('cpu', bfloat16), backward and step outside), as bench/side_by_side.py does."""
    import torch
    w, work = spec["workload"], spec["work"]
    cfg = sbs.WORKLOADS[w]
    torch.set_num_threads(spec["threads"])
    module = sbs.torch_models()[w]()
    module.load_state_dict(torch.load(os.path.join(work, f"{w}.pt")))
    module.train()
    if cfg["optimizer"] == "momentum":
        opt = torch.optim.SGD(module.parameters(), lr=cfg["lr"], momentum=sbs.MOMENTUM)
    elif cfg["optimizer"] == "adam":
        opt = torch.optim.Adam(module.parameters(), lr=cfg["lr"], betas=(sbs.ADAM["beta1"], sbs.ADAM["beta2"]),
                               eps=sbs.ADAM["eps"])
    else:
        opt = torch.optim.SGD(module.parameters(), lr=cfg["lr"])
    data = np.load(os.path.join(work, f"{w}.data.npz"))
    xs = [torch.from_numpy(x) for x in data["x"]]
    ys = [torch.from_numpy(y) for y in data["y"]]
    losses = []
    for i in range(spec["steps"]):
        k = i % sbs.N_BATCHES
        opt.zero_grad()
        if spec["mode"] == "train-bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = module(xs[k], ys[k])
        else:
            loss = module(xs[k], ys[k])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().float()))
    return losses


def run(spec, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)], env=env,
                          capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        sys.exit(f"{spec['framework']} {spec['workload']} {spec['mode']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])["losses"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workloads", default=",".join(sbs.BF16_WORKLOADS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--torch", action="store_true", help="also PyTorch fp32 against torch.autocast bf16")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(json.loads(a.child))
    workloads = [w for w in a.workloads.split(",") if w]
    bad = [w for w in workloads if w not in sbs.BF16_WORKLOADS]
    if bad:
        ap.error(f"not a bf16 workload: {bad} (choose from {', '.join(sbs.BF16_WORKLOADS)})")
    if a.steps < sbs.N_BATCHES:
        ap.error(f"--steps: at least {sbs.N_BATCHES} (one cycle over the batches)")
    work = tempfile.mkdtemp(prefix="bf16_convergence.")
    try:
        # The models are exported by side_by_side's own child (torch stays out of this process).
        proc = subprocess.run([sys.executable, os.path.join(HERE, "side_by_side.py"), "--child",
                               json.dumps({"kind": "prepare", "workloads": workloads, "work": work})],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"exporting the models failed:\n{proc.stderr[-3000:]}")
        frameworks = ["onnxtrain"] + (["torch"] if a.torch else [])
        print(f"{a.steps} steps cycling over {sbs.N_BATCHES} batches, {a.threads} thread(s); loss = mean of the "
              f"last {sbs.N_BATCHES} steps; goal: bf16 within {GOAL:.0%} of fp32\n")
        print("| workload | framework | first loss | fp32 loss after | bf16 loss after | relative difference "
              "| within goal | bf16 reaches the fp32 loss at step |")
        print("|---|---|---|---|---|---|---|---|")
        for w in workloads:
            for fw in frameworks:
                out = {}
                for mode in ("train", "train-bf16"):
                    spec = {"framework": fw, "workload": w, "work": work, "mode": mode, "threads": a.threads,
                            "steps": a.steps}
                    out[mode] = np.array(run(spec, a.threads))
                fp32 = float(np.mean(out["train"][-sbs.N_BATCHES:]))
                bf16 = float(np.mean(out["train-bf16"][-sbs.N_BATCHES:]))
                rel = abs(bf16 - fp32) / abs(fp32)
                means = np.convolve(out["train-bf16"], np.ones(sbs.N_BATCHES) / sbs.N_BATCHES, mode="valid")
                reached = np.nonzero(means <= fp32)[0]
                at = str(int(reached[0]) + sbs.N_BATCHES) if reached.size else f"not within {a.steps}"
                label = fw if fw == "onnxtrain" else "PyTorch (autocast)"
                print(f"| {w} | {label} | {out['train'][0]:.4f} | {fp32:.4f} | {bf16:.4f} | {rel:.2%} "
                      f"| {'yes' if rel <= GOAL else 'no'} | {at} |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
