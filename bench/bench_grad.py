#!/usr/bin/python3
"""Backward kernels of convolution and pooling: onnxtrain's com.onnxtrain.<Op>Grad kernels against
PyTorch autograd, same process, same thread count, as throughput ratios (never part of pass/fail).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_grad.py [--threads 2] [--filter conv]

onnxtrain runs one gradient node (the node the autodiff rule emits), naming only the gradients
asked for; torch runs torch.autograd.grad on a retained graph with requires_grad set on the same
inputs, so both compute exactly the same gradients (torch's max pooling backward reuses the
indices its forward stored, ours finds the maxima again: the fwd+bwd rows compare the pair).
"""
import os

# See bench_kernels.py: passive OpenMP waiting measures the kernels on a shared machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import statistics

import numpy as np
from onnx import TensorProto, helper
import torch
import torch.nn.functional as F

import onnxtrain
from bench_kernels import timeit


def grad_model(nodes, inputs, outputs):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    g = helper.make_graph(nodes, "bench_grad", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.onnxtrain", 1)]).SerializeToString()


def bench(name, model, feeds, torch_fn, flops, threads, rounds=5):
    so = onnxtrain.SessionOptions()
    so.intra_op_num_threads = threads
    sess = onnxtrain.InferenceSession(model, so)
    got = sess.run(None, feeds)
    ref = [t.numpy() for t in torch_fn()]
    err = max(float(np.max(np.abs(g - r)) / (np.max(np.abs(r)) + 1e-30)) for g, r in zip(got, ref))
    ours, theirs = [], []
    for _ in range(rounds):  # interleaved so that machine noise hits both alike
        ours.append(timeit(lambda: sess.run(None, feeds)))
        theirs.append(timeit(torch_fn))
    to, tt = statistics.median(w for w, _ in ours), statistics.median(w for w, _ in theirs)
    co, ct = statistics.median(c for _, c in ours), statistics.median(c for _, c in theirs)
    rate = f"{flops / to * 1e-9:7.1f} GFLOP/s " if flops else ""
    trate = f"{flops / tt * 1e-9:7.1f} GFLOP/s " if flops else ""
    print(f"{name:44s} onnxtrain {rate}{to * 1e3:8.2f} ms | torch {trate}{tt * 1e3:8.2f} ms | ratio wall {tt / to:5.2f}"
          f" cpu {ct / co:5.2f} | rel err {err:.0e}", flush=True)
    return tt / to


def conv_cases(add):
    rng = np.random.default_rng(0)
    def conv(name, x, w, attrs, torch_conv, transposed=False):
        xs, ws = x, w
        xt = torch.from_numpy(rng.standard_normal(xs, dtype=np.float32))
        wt = torch.from_numpy(rng.standard_normal(ws, dtype=np.float32))
        yt = torch_conv(xt, wt)
        dy = torch.from_numpy(rng.standard_normal(tuple(yt.shape), dtype=np.float32))
        m = ws[1] * attrs.get("group", 1) if transposed else ws[0]
        macs = yt.numel() * (xs[1] // attrs.get("group", 1)) * int(np.prod(ws[2:])) if not transposed else \
            xt.numel() * (ws[1]) * int(np.prod(ws[2:]))
        op = "ConvTransposeGrad" if transposed else "ConvGrad"
        for want, label in (((1, 0, 0), "dX"), ((0, 1, 1), "dW+dB"), ((1, 1, 1), "dX+dW+dB")):
            outs = [o if k else "" for o, k in zip(("dx", "dw", "db"), want)]
            node = helper.make_node(op, ["dy", "x", "w"], outs, domain="com.onnxtrain", **attrs)
            model = grad_model([node], {"dy": tuple(yt.shape), "x": xs, "w": ws}, [o for o in outs if o])
            feeds = {"dy": dy.numpy(), "x": xt.numpy(), "w": wt.numpy()}
            x_ = xt.clone().requires_grad_(bool(want[0]))
            w_ = wt.clone().requires_grad_(bool(want[1]))
            b_ = torch.zeros(m).requires_grad_(bool(want[2]))
            y_ = torch_conv(x_, w_, b_)
            wrt = [t for t, k in zip((x_, w_, b_), want) if k]
            fn = lambda y_=y_, wrt=wrt: torch.autograd.grad(y_, wrt, dy, retain_graph=True)
            add(f"{name} {label}", model, feeds, fn, 2 * macs * (want[0] + want[1]))

    n = 8
    conv("Conv 3x3 N=8 C=64 M=64 56x56", (n, 64, 56, 56), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]},
         lambda x, w, b=None: F.conv2d(x, w, b, padding=1))
    conv("Conv 3x3/2 N=8 C=64 M=128 56x56", (n, 64, 56, 56), (128, 64, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]},
         lambda x, w, b=None: F.conv2d(x, w, b, stride=2, padding=1))
    conv("Conv 1x1 N=8 C=256 M=64 56x56", (n, 256, 56, 56), (64, 256, 1, 1), {},
         lambda x, w, b=None: F.conv2d(x, w, b))
    conv("Conv depthwise 3x3 N=8 C=128 56x56", (n, 128, 56, 56), (128, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 128},
         lambda x, w, b=None: F.conv2d(x, w, b, padding=1, groups=128))
    conv("ConvTranspose 4x4/2 N=8 C=64 M=32 28x28", (n, 64, 28, 28), (64, 32, 4, 4), {"pads": [1, 1, 1, 1], "strides": [2, 2]},
         lambda x, w, b=None: F.conv_transpose2d(x, w, b, stride=2, padding=1), transposed=True)


def pool_cases(add):
    rng = np.random.default_rng(1)
    def pool(name, op, xs, attrs, torch_pool):
        x = torch.from_numpy(rng.standard_normal(xs, dtype=np.float32))
        y = torch_pool(x)
        dy = torch.from_numpy(rng.standard_normal(tuple(y.shape), dtype=np.float32))
        feeds = {"dy": dy.numpy(), "x": x.numpy()}
        node = helper.make_node(op + "Grad", ["dy", "x"], ["dx"], domain="com.onnxtrain", **attrs)
        x_ = x.clone().requires_grad_(True)
        y_ = torch_pool(x_)
        add(f"{name} bwd", grad_model([node], {"dy": tuple(y.shape), "x": xs}, ["dx"]), feeds,
            lambda: torch.autograd.grad(y_, [x_], dy, retain_graph=True), 0)
        fwd = helper.make_node(op, ["x"], ["y"], **attrs)
        def fwd_bwd():
            xx = x.clone().requires_grad_(True)
            yy = torch_pool(xx)
            return [yy.detach()] + list(torch.autograd.grad(yy, [xx], dy))
        add(f"{name} fwd+bwd", grad_model([fwd, node], {"dy": tuple(y.shape), "x": xs}, ["y", "dx"]), feeds, fwd_bwd, 0)

    n = 8
    pool("MaxPool 3x3/2 N=8 C=64 112x112 pad 1", "MaxPool", (n, 64, 112, 112),
         {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, lambda x: F.max_pool2d(x, 3, 2, 1))
    pool("MaxPool 2x2/2 N=8 C=128 56x56", "MaxPool", (n, 128, 56, 56),
         {"kernel_shape": [2, 2], "strides": [2, 2]}, lambda x: F.max_pool2d(x, 2, 2))
    pool("AveragePool 2x2/2 N=8 C=256 56x56", "AveragePool", (n, 256, 56, 56),
         {"kernel_shape": [2, 2], "strides": [2, 2]}, lambda x: F.avg_pool2d(x, 2, 2))
    pool("AveragePool 3x3/1 N=8 C=64 56x56 pad 1", "AveragePool", (n, 64, 56, 56),
         {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1},
         lambda x: F.avg_pool2d(x, 3, 1, 1))
    pool("GlobalAveragePool N=8 C=512 7x7", "GlobalAveragePool", (n, 512, 7, 7), {}, lambda x: F.adaptive_avg_pool2d(x, 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    t = args.threads
    torch.set_num_threads(t)
    print(f"threads {t}, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, torch {torch.__version__}; ratio = torch time /"
          " onnxtrain time (> 1: onnxtrain faster); 'cpu' compares process CPU time")
    cases = []
    conv_cases(lambda *a: cases.append(a))
    pool_cases(lambda *a: cases.append(a))
    ratios = [bench(*c, threads=t) for c in cases if args.filter.lower() in c[0].lower()]
    if ratios:
        print(f"geometric mean ratio {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
