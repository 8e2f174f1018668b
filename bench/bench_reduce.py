"""Reductions, Softmax and LayerNorm: onnxtrain vs torch, side by side in one process, 2 threads.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/bench_reduce.py [--threads 2] [--repeat 30]

Each case is one ONNX node run through InferenceSession (output allocation included, as in torch).
Prints the best milliseconds (the machine is shared) and the ratio onnxtrain / torch (< 1: onnxtrain faster) and checks
that both agree.
"""
import argparse
import time

import numpy as np
import torch
from onnx import TensorProto, helper

import onnxtrain as ot


def model(op, x_shape, extra_inputs=(), out_shape=None, opset=17, **attrs):
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    names = ["x"]
    inits = []
    for name, arr in extra_inputs:
        names.append(name)
        dt = TensorProto.INT64 if arr.dtype == np.int64 else TensorProto.FLOAT
        inits.append(helper.make_tensor(name, dt, arr.shape, arr.flatten().tolist()))
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph([node], op, ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def best_ms(fns, repeat):
    """Best time of each function, calls interleaved so that both see the same machine load."""
    for fn in fns:
        for _ in range(3):
            fn()
    t = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            t[i].append((time.perf_counter() - t0) * 1e3)
    return [float(np.min(x)) for x in t]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    so = ot.SessionOptions()
    so.intra_op_num_threads = args.threads
    rng = np.random.default_rng(0)

    x = rng.standard_normal((4096, 1024), dtype=np.float32)
    xt = torch.from_numpy(x)
    ln_x = rng.standard_normal((64 * 128, 768), dtype=np.float32)
    ln_w = rng.standard_normal(768, dtype=np.float32)
    ln_b = rng.standard_normal(768, dtype=np.float32)
    ln_xt, ln_wt, ln_bt = map(torch.from_numpy, (ln_x, ln_w, ln_b))
    ax = lambda a: np.array(a, np.int64)

    cases = [
        ("ReduceSum  [4096,1024] axis -1", model("ReduceSum", x.shape, [("axes", ax([-1]))], keepdims=0), x,
         lambda: torch.sum(xt, -1)),
        ("ReduceSum  [4096,1024] axis 0", model("ReduceSum", x.shape, [("axes", ax([0]))], keepdims=0), x,
         lambda: torch.sum(xt, 0)),
        ("ReduceMean [4096,1024] axis -1", model("ReduceMean", x.shape, axes=[-1], keepdims=0), x,
         lambda: torch.mean(xt, -1)),
        ("ReduceMean [4096,1024] axis 0", model("ReduceMean", x.shape, axes=[0], keepdims=0), x,
         lambda: torch.mean(xt, 0)),
        ("ReduceMax  [4096,1024] axis -1", model("ReduceMax", x.shape, axes=[-1], keepdims=0), x,
         lambda: torch.amax(xt, -1)),
        ("ReduceMax  [4096,1024] axis 0", model("ReduceMax", x.shape, axes=[0], keepdims=0), x,
         lambda: torch.amax(xt, 0)),
        ("Softmax    [4096,1024] axis -1", model("Softmax", x.shape, axis=-1), x,
         lambda: torch.softmax(xt, -1)),
        ("LogSoftmax [4096,1024] axis -1", model("LogSoftmax", x.shape, axis=-1), x,
         lambda: torch.log_softmax(xt, -1)),
        ("LayerNorm  [8192,768] axis -1", model("LayerNormalization", ln_x.shape, [("w", ln_w), ("b", ln_b)]), ln_x,
         lambda: torch.nn.functional.layer_norm(ln_xt, (768,), ln_wt, ln_bt)),
    ]
    print(f"threads={args.threads}  best of {args.repeat} runs")
    print(f"{'case':34s} {'onnxtrain ms':>12s} {'torch ms':>9s} {'ratio':>6s}  max|diff|")
    for name, m, inp, tfn in cases:
        sess = ot.InferenceSession(m, so)
        feed = {"x": inp}
        ours, theirs = best_ms([lambda: sess.run(None, feed), tfn], args.repeat)
        with torch.no_grad():
            diff = float(np.max(np.abs(sess.run(None, feed)[0] - tfn().numpy())))
        print(f"{name:34s} {ours:12.3f} {theirs:9.3f} {ours / theirs:6.2f}  {diff:.2e}")


if __name__ == "__main__":
    with torch.no_grad():
        main()
