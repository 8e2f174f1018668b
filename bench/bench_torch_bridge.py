"""Training-step time (forward + backward + AdamW step) of onnxtrain.torch.ORTModule against plain
PyTorch on the same module, as ratios measured in the same process. Never pass/fail.

Workloads: the MLP 784-512-256-10 (ReLU) at batch 128 and a CNN (two 3x3 convolutions with
BatchNorm, max-pooling, two linear layers) on 1x28x28 images at batch 64; cross-entropy loss
computed by PyTorch on the module's logits; 1 and 2 threads (torch.set_num_threads, which the
ORTModule's sessions follow). Each environment runs in its own subprocess:
  default    OPENBLAS_CORETYPE=Haswell (this machine's default setting)
  no-coretype  OPENBLAS_CORETYPE unset
  avx512     OPENBLAS_CORETYPE=Haswell and ATEN_CPU_CAPABILITY=avx512 (PyTorch's best kernels)
Within a process torch and ORTModule alternate in blocks of `--steps` steps, `--rounds` times;
the table gives each one's median step time and the ratio ORTModule / torch (< 1: ORTModule faster),
plus the time of ORTModule's step spent outside the engine's runs (PyTorch's loss and AdamW, and the
bridge's own work: signature lookup, DLPack exchange, autograd plumbing).

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/bench_torch_bridge.py [--threads 1,2] [--steps 20]
       [--rounds 5] [--envs default,no-coretype,avx512]
"""
import argparse
import json
import os
import subprocess
import sys

ENVS = {
    "default": {"OPENBLAS_CORETYPE": "Haswell"},
    "no-coretype": {"OPENBLAS_CORETYPE": None},
    "avx512": {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx512"},
}


def child(threads, steps, rounds):
    import copy
    import statistics
    import time

    import onnxtrain  # noqa: F401  first: its OpenMP setting (OMP_WAIT_POLICY=PASSIVE) then applies to torch too
    import torch
    import torch.nn.functional as F

    import onnxtrain.torch._ortmodule as om
    from onnxtrain.torch import ORTModule

    torch.set_num_threads(threads)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in [(784, 512), (512, 256), (256, 10)])

        def forward(self, x):
            for i, layer in enumerate(self.l):
                x = layer(x)
                if i < 2:
                    x = torch.relu(x)
            return x

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(1, 16, 3, bias=False)
            self.b1 = torch.nn.BatchNorm2d(16)
            self.c2 = torch.nn.Conv2d(16, 32, 3, bias=False)
            self.b2 = torch.nn.BatchNorm2d(32)
            self.f1 = torch.nn.Linear(32 * 5 * 5, 128)
            self.f2 = torch.nn.Linear(128, 10)

        def forward(self, x):
            x = F.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
            x = F.max_pool2d(torch.relu(self.b2(self.c2(x))), 2)
            return self.f2(torch.relu(self.f1(x.flatten(1))))

    # Time spent inside the engine's runs, to tell the bridge's own overhead apart.
    engine = [0.0]

    def timed(f):
        def g(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                engine[0] += time.perf_counter() - t0
        return g

    om._TrainingRunner.forward = timed(om._TrainingRunner.forward)
    om._TrainingRunner.backward = timed(om._TrainingRunner.backward)

    config = torch.__config__.show()
    capability = next((line.split(":")[1].strip() for line in config.splitlines() if "CPU capability usage" in line),
                      "?")
    out = {"torch_version": torch.__version__, "torch_capability": capability}
    for name, make, batch, shape in (("mlp", MLP, 128, (784,)), ("cnn", CNN, 64, (1, 28, 28))):
        torch.manual_seed(0)
        module = make()
        runs = {"torch": copy.deepcopy(module), "ortmodule": ORTModule(module)}
        opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in runs.items()}
        x = torch.randn(batch, *shape)
        y = torch.randint(0, 10, (batch,))

        def step(k):
            opts[k].zero_grad()
            loss = F.cross_entropy(runs[k](x), y)
            loss.backward()
            opts[k].step()

        for k in runs:  # warm-up (export and plans for ORTModule)
            for _ in range(5):
                step(k)
        times = {k: [] for k in runs}
        engine_share = []
        for _ in range(rounds):
            for k in runs:
                engine[0] = 0.0
                t0 = time.perf_counter()
                for _ in range(steps):
                    step(k)
                dt = (time.perf_counter() - t0) / steps
                times[k].append(dt)
                if k == "ortmodule":
                    engine_share.append(engine[0] / steps)
        med = {k: statistics.median(v) for k, v in times.items()}
        out[name] = {"torch_ms": med["torch"] * 1e3, "ortmodule_ms": med["ortmodule"] * 1e3,
                     "ratio": med["ortmodule"] / med["torch"],
                     "engine_ms": statistics.median(engine_share) * 1e3}
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--envs", default=",".join(ENVS))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(int(a.threads), a.steps, a.rounds)
    print(f"python {sys.executable}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}; "
          f"{os.cpu_count()} cores")
    print("| env | threads | model | torch ms/step | ORTModule ms/step | ratio ORTModule/torch | "
          "outside engine runs ms: loss, AdamW, bridge (share) |")
    print("|---|---|---|---|---|---|---|")
    for env_name in a.envs.split(","):
        env = dict(os.environ)
        for k, v in ENVS[env_name].items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        for threads in a.threads.split(","):
            r = subprocess.run([sys.executable, __file__, "--child", "--threads", threads, "--steps", str(a.steps),
                                "--rounds", str(a.rounds)], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"| {env_name} | {threads} | failed: {r.stderr.strip().splitlines()[-1:]} |")
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            for model in ("mlp", "cnn"):
                m = res[model]
                overhead = m["ortmodule_ms"] - m["engine_ms"]
                print(f"| {env_name} (torch {res['torch_capability']}) | {threads} | {model} | {m['torch_ms']:.2f} | "
                      f"{m['ortmodule_ms']:.2f} | {m['ratio']:.2f} | {overhead:.2f} "
                      f"({overhead / m['ortmodule_ms']:.0%}) |")


if __name__ == "__main__":
    main()
