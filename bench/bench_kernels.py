#!/usr/bin/python3
"""Linear algebra / convolution / pooling kernels: onnxtrain against PyTorch, same process, same
thread count, as throughput ratios (never part of pass/fail).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_kernels.py [--threads 2] [--filter conv]

Every operand is a graph input (as in training, where weights change every step), so nothing is
constant-folded and weights are re-laid-out on every run, as torch does too.
"""
import os

# Both libraries share one libgomp (and torch uses the same system oneDNN). On a machine shared
# with other work, spinning OpenMP workers wait a whole scheduler slice for a descheduled partner
# at every barrier (~20 ms per parallel region here), which swamps the kernels; passive waiting
# measures the kernels instead. Run with OMP_WAIT_POLICY=ACTIVE to see the other behaviour.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper
import torch
import torch.nn.functional as F

import onnxtrain


def model(op, inputs, out_shape, attrs, opset=17):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs.items()]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    g = helper.make_graph([node], "bench", ins, [out])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def timeit(fn, min_time=0.3):
    """(wall seconds, process CPU seconds) per call."""
    fn()  # warm up (plan, primitive creation)
    fn()
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        fn()
        n += 1
        t = time.perf_counter() - t0
        if t > min_time and n >= 3:
            return t / n, (time.process_time() - c0) / n


def bench(name, op, inputs, attrs, torch_fn, flops, threads, rounds=5):
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(s, dtype=np.float32) for k, s in inputs.items()}
    tin = {k: torch.from_numpy(v) for k, v in feeds.items()}
    with torch.no_grad():
        ref = torch_fn(**tin).numpy()
    so = onnxtrain.SessionOptions()
    so.intra_op_num_threads = threads
    sess = onnxtrain.InferenceSession(model(op, feeds, list(ref.shape), attrs), so)
    got = sess.run(None, feeds)[0]
    err = float(np.max(np.abs(got - ref)) / (np.max(np.abs(ref)) + 1e-30))
    ours, theirs = [], []
    with torch.no_grad():
        for _ in range(rounds):  # interleaved so that machine noise hits both alike
            ours.append(timeit(lambda: sess.run(None, feeds)))
            theirs.append(timeit(lambda: torch_fn(**tin)))
    to, tt = statistics.median(w for w, _ in ours), statistics.median(w for w, _ in theirs)
    co, ct = statistics.median(c for _, c in ours), statistics.median(c for _, c in theirs)
    print(f"{name:40s} onnxtrain {flops / to * 1e-9:7.1f} GFLOP/s {to * 1e3:8.2f} ms | torch {flops / tt * 1e-9:7.1f}"
          f" GFLOP/s {tt * 1e3:8.2f} ms | ratio wall {tt / to:5.2f} cpu {ct / co:5.2f} | rel err {err:.0e}", flush=True)
    return tt / to


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    t = args.threads
    torch.set_num_threads(t)
    print(f"threads {t}, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, torch {torch.__version__}; ratio = torch time / onnxtrain time (> 1: onnxtrain faster);"
          " GFLOP/s from wall time; 'cpu' compares process CPU time (less sensitive to a shared machine)")

    cases = []
    def add(*a):
        cases.append(a)

    M = K = N = 512
    add("MatMul 512x512x512", "MatMul", {"a": (M, K), "b": (K, N)}, {}, lambda a, b: a @ b, 2 * M * N * K)
    add("MatMul batched 16x128x64x128", "MatMul", {"a": (16, 128, 64), "b": (16, 64, 128)}, {},
        lambda a, b: a @ b, 2 * 16 * 128 * 128 * 64)
    add("MatMul [8,196,768]x[768,3072]", "MatMul", {"a": (8, 196, 768), "b": (768, 3072)}, {},
        lambda a, b: a @ b, 2 * 8 * 196 * 768 * 3072)
    add("Gemm 256x1024x1024 transB +bias", "Gemm", {"a": (256, 1024), "b": (1024, 1024), "c": (1024,)},
        {"transB": 1}, lambda a, b, c: F.linear(a, b, c), 2 * 256 * 1024 * 1024)
    n, c, h, m = 8, 64, 56, 64
    add("Conv 3x3 N=8 C=64 M=64 56x56 pad 1", "Conv", {"x": (n, c, h, h), "w": (m, c, 3, 3), "b": (m,)},
        {"pads": [1, 1, 1, 1]}, lambda x, w, b: F.conv2d(x, w, b, padding=1), 2 * n * m * c * 9 * h * h)
    add("Conv 1x1 N=8 C=256 M=64 56x56", "Conv", {"x": (n, 256, h, h), "w": (64, 256, 1, 1)}, {},
        lambda x, w: F.conv2d(x, w), 2 * n * 64 * 256 * h * h)
    add("Conv 7x7/2 N=8 C=3 M=64 224x224 pad 3", "Conv", {"x": (n, 3, 224, 224), "w": (64, 3, 7, 7)},
        {"pads": [3, 3, 3, 3], "strides": [2, 2]}, lambda x, w: F.conv2d(x, w, stride=2, padding=3),
        2 * n * 64 * 3 * 49 * 112 * 112)
    add("Conv depthwise 3x3 N=8 C=128 56x56", "Conv", {"x": (n, 128, h, h), "w": (128, 1, 3, 3)},
        {"pads": [1, 1, 1, 1], "group": 128}, lambda x, w: F.conv2d(x, w, padding=1, groups=128),
        2 * n * 128 * 9 * h * h)
    add("ConvTranspose 4x4/2 N=8 C=64 M=32 28x28", "ConvTranspose", {"x": (n, 64, 28, 28), "w": (64, 32, 4, 4)},
        {"pads": [1, 1, 1, 1], "strides": [2, 2]}, lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
        2 * n * 64 * 32 * 16 * 28 * 28)
    add("MaxPool 3x3/2 N=8 C=64 112x112 pad 1", "MaxPool", {"x": (n, 64, 112, 112)},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        lambda x: F.max_pool2d(x, 3, 2, 1), n * 64 * 56 * 56 * 9)
    add("AveragePool 2x2/2 N=8 C=256 56x56", "AveragePool", {"x": (n, 256, 56, 56)},
        {"kernel_shape": [2, 2], "strides": [2, 2]}, lambda x: F.avg_pool2d(x, 2, 2), n * 256 * 28 * 28 * 4)
    add("GlobalAveragePool N=8 C=512 7x7", "GlobalAveragePool", {"x": (n, 512, 7, 7)}, {},
        lambda x: F.adaptive_avg_pool2d(x, 1), n * 512 * 49)
    ratios = []
    for name, op, inputs, attrs, fn, flops in cases:
        if args.filter.lower() in name.lower():
            ratios.append(bench(name, op, inputs, attrs, fn, flops, t))
    if ratios:
        print(f"geometric mean ratio {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
