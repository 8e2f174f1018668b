"""Training-step time, peak memory and heap allocations per step of two onnxtrain builds side by side
(a baseline, e.g. the previous commit's build, and a candidate), on an MLP and a CNN. Never
pass/fail. `--torch` adds PyTorch's step time on the same workload, in this script's environment
(the allocator interposer included, which slows PyTorch's large allocations): context only — the
fair comparison against PyTorch is bench_train_mlp.py's.

Each (build, workload, threads) runs in its own subprocess (two builds cannot share a process);
the builds alternate, `--rounds` times, and the table gives each one's median step time. Heap
allocations are counted by a small allocator interposer (LD_PRELOAD, compiled here with gcc) around
`TrainingSession.run` calls: all of them and those of 64 KiB or more, per step — the Python binding's
own small allocations (the returned numpy array, the feed dict) included.

Usage:
  /usr/bin/python3 bench/bench_train_step.py --baseline /path/to/old/build/python [--candidate build/python]
      [--threads 1,2] [--rounds 3] [--torch]
Build the baseline from the previous commit, e.g.
  git worktree add /tmp/base HEAD~1 && cmake -S /tmp/base -B /tmp/base/build && cmake --build /tmp/base/build --target _C
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))

COUNTER_C = r"""
#include <errno.h>
#include <stddef.h>
void* __libc_malloc(size_t); void* __libc_calloc(size_t, size_t); void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t); void __libc_free(void*);
static volatile int on; static long n_all, n_big;
static void note(size_t n) { if (on) { __sync_fetch_and_add(&n_all, 1); if (n >= 65536) __sync_fetch_and_add(&n_big, 1); } }
void* malloc(size_t n) { note(n); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { note(a * b); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { note(n); return __libc_realloc(p, n); }
void free(void* p) { __libc_free(p); }
void* memalign(size_t a, size_t n) { note(n); return __libc_memalign(a, n); }
void* aligned_alloc(size_t a, size_t n) { note(n); return __libc_memalign(a, n); }
int posix_memalign(void** o, size_t a, size_t n) { note(n); void* p = __libc_memalign(a, n); if (!p) return ENOMEM; *o = p; return 0; }
void otb_count(int enable) { if (enable) { n_all = 0; n_big = 0; } on = enable; }
long otb_all(void) { return n_all; }
long otb_big(void) { return n_big; }
"""

# Runs in the subprocess: one build, one workload, one thread count; prints a JSON line.
WORKER = textwrap.dedent(r"""
    import ctypes, io, json, os, resource, sys, time
    import numpy as np
    import onnxtrain as ot
    import torch
    import torch.nn.functional as F
    workload, threads, steps, with_torch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in [(784, 512), (512, 256), (256, 10)])
        def forward(self, x, y):
            for i, l in enumerate(self.l):
                x = l(x)
                if i < 2:
                    x = torch.relu(x)
            return F.cross_entropy(x, y)

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(1, 16, 3)
            self.c2 = torch.nn.Conv2d(16, 32, 3)
            self.f1 = torch.nn.Linear(32 * 5 * 5, 128)
            self.f2 = torch.nn.Linear(128, 10)
        def forward(self, x, y):
            x = F.max_pool2d(torch.relu(self.c1(x)), 2)
            x = F.max_pool2d(torch.relu(self.c2(x)), 2)
            x = torch.relu(self.f1(x.flatten(1)))
            return F.cross_entropy(self.f2(x), y)

    class Small(torch.nn.Module):  # bench_train_mlp.py's digits MLP
        def __init__(self, sizes):
            super().__init__()
            self.l = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        def forward(self, x, y):
            for i, l in enumerate(self.l):
                x = l(x)
                if i + 1 < len(self.l):
                    x = torch.relu(x)
            return F.cross_entropy(x, y)

    if workload == "mlp":
        module, batch, shape, opt_name, attrs = MLP(), 128, (784,), "MomentumOptimizer", {"momentum": 0.9}
    elif workload == "digits":
        module, batch, shape, opt_name, attrs = Small([64, 128, 10]), 32, (64,), "AdamOptimizer", {}
    elif workload == "wide":
        module, batch, shape, opt_name, attrs = Small([784, 512, 512, 10]), 64, (784,), "AdamOptimizer", {}
    else:
        module, batch, shape, opt_name, attrs = CNN(), 64, (1, 28, 28), "AdamOptimizer", {}
    x = torch.randn(batch, *shape)
    y = torch.randint(0, 10, (batch,))
    f = io.BytesIO()
    torch.onnx.export(module, (x, y), f, input_names=["x", "y"], output_names=["loss"], opset_version=15,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.weights_to_train = {n for n, _ in module.named_parameters()}
    p.training_optimizer_name = opt_name
    p.optimizer_attributes = attrs
    so = ot.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ot.TrainingSession(f.getvalue(), p, so)
    feed = {"x": x.numpy(), "y": y.numpy(), "Learning_Rate": np.array([1e-3], np.float32)}

    def median(fn, n, repeats=5):
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            ts.append((time.perf_counter() - t0) / n)
        return float(np.median(ts))

    ours = lambda: sess.run(["loss"], feed)
    for _ in range(10):
        ours()
    lib = ctypes.CDLL(None)
    counted = hasattr(lib, "otb_count")
    if counted:
        lib.otb_count(1)
        for _ in range(10):
            ours()
        lib.otb_count(0)
        allocs, big = lib.otb_all() / 10, lib.otb_big() / 10
    else:
        allocs = big = float("nan")
    t_ours = median(ours, steps)
    r = {"step_s": t_ours, "allocs": allocs, "big_allocs": big,
         "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if with_torch:
        opt = (torch.optim.SGD(module.parameters(), lr=1e-3, momentum=0.9) if opt_name == "MomentumOptimizer"
               else torch.optim.Adam(module.parameters(), lr=1e-3))
        def torch_step():
            opt.zero_grad(set_to_none=True)
            module(x, y).backward()
            opt.step()
        for _ in range(10):
            torch_step()
        r["torch_step_s"] = median(torch_step, steps)
    print(json.dumps(r))
""")


def build_counter(tmp):
    src = os.path.join(tmp, "count.c")
    lib = os.path.join(tmp, "libcount.so")
    with open(src, "w") as f:
        f.write(COUNTER_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", src, "-o", lib], check=True)
    return lib


def run_one(pythonpath, workload, threads, steps, with_torch, counter, worker):
    env = dict(os.environ, PYTHONPATH=pythonpath, LD_PRELOAD=counter)
    out = subprocess.run([sys.executable, worker, workload, str(threads), str(steps), "1" if with_torch else "0"],
                         env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="PYTHONPATH of the baseline build")
    ap.add_argument("--candidate", default=os.path.join(HERE, "..", "build", "python"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--torch", action="store_true")
    a = ap.parse_args()
    if os.path.basename(sys.executable) != "python3" or not sys.executable.startswith("/usr/bin"):
        print(f"note: running {sys.executable}; Debian's /usr/bin/python3 is the one with numpy/torch/onnx")
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    with tempfile.TemporaryDirectory() as tmp:
        counter = build_counter(tmp)
        worker = os.path.join(tmp, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER)
        rows = []
        for workload, steps in (("digits", 200), ("wide", 40), ("mlp", 30), ("cnn", 20)):
            for threads in [int(t) for t in a.threads.split(",")]:
                res = {"baseline": [], "candidate": []}
                torch_t = []
                for _ in range(a.rounds):
                    for name in ("baseline", "candidate"):
                        r = run_one(getattr(a, name), workload, threads, steps, a.torch and name == "candidate",
                                    counter, worker)
                        res[name].append(r)
                        if "torch_step_s" in r:
                            torch_t.append(r["torch_step_s"])
                med = {k: sorted(x["step_s"] for x in v)[len(v) // 2] for k, v in res.items()}
                rows.append((workload, threads, med["baseline"], med["candidate"],
                             res["baseline"][-1], res["candidate"][-1],
                             sorted(torch_t)[len(torch_t) // 2] if torch_t else float("nan")))
    print()
    print("| workload | threads | baseline ms/step | candidate ms/step | candidate / baseline | torch ms/step "
          "| allocs/step (≥64 KiB) baseline | candidate | peak MB baseline | candidate |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for w, t, b, c, rb, rc, tt in rows:
        print(f"| {w} | {t} | {b * 1e3:.3f} | {c * 1e3:.3f} | {c / b:.2f} | {tt * 1e3:.3f} "
              f"| {rb['allocs']:.0f} ({rb['big_allocs']:.0f}) | {rc['allocs']:.0f} ({rc['big_allocs']:.0f}) "
              f"| {rb['peak_mb']:.0f} | {rc['peak_mb']:.0f} |")
    print("\ndigits: 64-128-10, batch 32, Adam; wide: 784-512-512-10, batch 64, Adam (bench_train_mlp.py's); "
          "mlp: 784-512-256-10, batch 128, SGD momentum 0.9; cnn: 2x(conv3x3+relu+maxpool), fc 800-128-10, "
          "batch 64, Adam; all cross-entropy.")


if __name__ == "__main__":
    main()
