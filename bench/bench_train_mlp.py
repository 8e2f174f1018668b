"""Training-step time of an MLP (the digits demo's 64-128-10 and a wider 784-512-512-10) with
cross-entropy and Adam: onnxtrain.TrainingSession against torch.optim on the same machine, same
thread count. Prints the ratio onnxtrain / torch (lower is faster). Never pass/fail.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/bench_train_mlp.py [--threads N]
"""
import argparse
import io
import os
import time

import numpy as np

import onnxtrain as ot  # first: its OpenMP settings then apply to torch as well (same runtime)
import torch
import torch.nn.functional as F


class MLP(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x, y):
        for i, l in enumerate(self.layers):
            x = l(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return F.cross_entropy(x, y)


def median_time(fn, steps, repeats=5):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        times.append((time.perf_counter() - t0) / steps)
    return float(np.median(times))


def bench(sizes, batch, steps, threads):
    torch.manual_seed(0)
    module = MLP(sizes)
    x = torch.randn(batch, sizes[0])
    y = torch.randint(0, sizes[-1], (batch,))
    f = io.BytesIO()
    torch.onnx.export(module, (x, y), f, input_names=["x", "y"], output_names=["loss"], opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING,
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.weights_to_train = {n for n, _ in module.named_parameters()}
    p.training_optimizer_name = "AdamOptimizer"
    so = ot.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ot.TrainingSession(f.getvalue(), p, so)
    feed = {"x": x.numpy(), "y": y.numpy(), "Learning_Rate": np.array([1e-3], np.float32)}
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)

    def torch_step():
        opt.zero_grad(set_to_none=True)
        module(x, y).backward()
        opt.step()

    def ours_step():
        sess.run(["loss"], feed)

    for fn in (torch_step, ours_step):  # warm-up
        for _ in range(20):
            fn()
    t_torch = median_time(torch_step, steps)
    t_ours = median_time(ours_step, steps)
    print(f"MLP {'-'.join(map(str, sizes))}, batch {batch}: onnxtrain {t_ours * 1e6:8.1f} us/step, "
          f"torch {t_torch * 1e6:8.1f} us/step, ratio {t_ours / t_torch:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0, help="both frameworks (default: all cores)")
    a = ap.parse_args()
    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    print(f"threads: {threads} for both (torch.set_num_threads, SessionOptions.intra_op_num_threads)")
    bench([64, 128, 10], 32, 200, threads)
    bench([64, 128, 10], 256, 100, threads)
    bench([784, 512, 512, 10], 64, 50, threads)
    bench([784, 512, 512, 10], 256, 20, threads)


if __name__ == "__main__":
    main()
