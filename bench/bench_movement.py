"""Movement kernels vs PyTorch .contiguous() equivalents, side by side in one process.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_movement.py [--threads 2] [--reps 30] [--clock wall|cpu]

Prints per case the minimum and median time of onnxtrain (InferenceSession.run, one node,
zero-copy input and output) and of torch, calls alternating, and the ratios onnxtrain / torch
(below 1: onnxtrain is faster). On a loaded machine trust the minimum, or use --clock cpu.
Outputs over 32 MB are fresh mmap()s on every call for both libraries (glibc's threshold), so
the 50 MB Concat cases mostly time page faults; the 25 MB ones time the copy.
"""
import argparse
import statistics
import time

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

import onnxtrain


def model(op, inputs, out_shape, attrs=None, inits=None, opset=13):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in inputs]
    node = helper.make_node(op, [n for n, _ in inputs] + [n for n, _ in (inits or [])], ["y"], **(attrs or {}))
    init = [helper.make_tensor(n, TensorProto.INT64, [len(v)], v) for n, v in (inits or [])]
    g = helper.make_graph([node], "bench", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def paired_times(f, g, reps, clock):
    """Alternates f and g (both see the same machine load); returns their per-call times."""
    f()
    g()
    tf, tg = [], []
    for _ in range(reps):
        for fn, ts in ((f, tf), (g, tg)):
            t = clock()
            fn()
            ts.append(clock() - t)
    return tf, tg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: CPU time of the calling thread (needs --threads 1; robust on a loaded machine)")
    args = ap.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        ap.error("--clock cpu measures one thread: use --threads 1")
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    torch.set_num_threads(args.threads)
    so = onnxtrain.SessionOptions()
    so.intra_op_num_threads = args.threads
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 128, 768), dtype=np.float32)
    x2 = rng.standard_normal((64, 128, 768), dtype=np.float32)
    tx, tx2 = torch.from_numpy(x), torch.from_numpy(x2)
    h, h2 = x[:32].copy(), x2[:32].copy()  # outputs of 25 MB: below glibc's 32 MB mmap threshold
    th, th2 = torch.from_numpy(h), torch.from_numpy(h2)
    big = np.iinfo(np.int64).max
    cases = [
        ("Transpose [64,128,768] perm (0,2,1)", model("Transpose", [("x", x)], [64, 768, 128], {"perm": [0, 2, 1]}),
         {"x": x}, lambda: tx.permute(0, 2, 1).contiguous(), x.transpose(0, 2, 1)),
        ("Transpose [64,128,768] perm (1,0,2)", model("Transpose", [("x", x)], [128, 64, 768], {"perm": [1, 0, 2]}),
         {"x": x}, lambda: tx.permute(1, 0, 2).contiguous(), x.transpose(1, 0, 2)),
        ("Transpose [64,128,768] perm (2,1,0)", model("Transpose", [("x", x)], [768, 128, 64], {"perm": [2, 1, 0]}),
         {"x": x}, lambda: tx.permute(2, 1, 0).contiguous(), x.transpose(2, 1, 0)),
        ("Concat 2x[64,128,768] axis 1", model("Concat", [("a", x), ("b", x2)], [64, 256, 768], {"axis": 1}),
         {"a": x, "b": x2}, lambda: torch.cat([tx, tx2], 1), np.concatenate([x, x2], 1)),
        ("Concat 2x[64,128,768] axis 2", model("Concat", [("a", x), ("b", x2)], [64, 128, 1536], {"axis": 2}),
         {"a": x, "b": x2}, lambda: torch.cat([tx, tx2], 2), np.concatenate([x, x2], 2)),
        ("Concat 2x[32,128,768] axis 1", model("Concat", [("a", h), ("b", h2)], [32, 256, 768], {"axis": 1}),
         {"a": h, "b": h2}, lambda: torch.cat([th, th2], 1), np.concatenate([h, h2], 1)),
        ("Concat 2x[32,128,768] axis 2", model("Concat", [("a", h), ("b", h2)], [32, 128, 1536], {"axis": 2}),
         {"a": h, "b": h2}, lambda: torch.cat([th, th2], 2), np.concatenate([h, h2], 2)),
        ("Slice [:, 8:120, :]", model("Slice", [("x", x)], [64, 112, 768], inits=[("s", [8]), ("e", [120]), ("a", [1])]),
         {"x": x}, lambda: tx[:, 8:120, :].contiguous(), x[:, 8:120, :]),
        ("Slice [:, :, 1::2]", model("Slice", [("x", x)], [64, 128, 384], inits=[("s", [1]), ("e", [big]), ("a", [2]), ("p", [2])]),
         {"x": x}, lambda: tx[:, :, 1::2].contiguous(), x[:, :, 1::2]),
        ("Slice [:, :, :384]", model("Slice", [("x", x)], [64, 128, 384], inits=[("s", [0]), ("e", [384]), ("a", [2])]),
         {"x": x}, lambda: tx[:, :, :384].contiguous(), x[:, :, :384]),
    ]
    print(f"threads {args.threads}, {args.clock} clock, {args.reps} alternating calls each; times in ms (min / median)")
    print(f"{'case':40s} {'onnxtrain':>13s} {'torch':>13s} {'ratio min':>9s} {'ratio med':>9s}")
    for name, m, feed, ref, want in cases:
        sess = onnxtrain.InferenceSession(m, so)
        got = sess.run(None, feed)[0]
        assert np.array_equal(got, want), name
        ours, theirs = paired_times(lambda: sess.run(None, feed), ref, args.reps, clock)
        o1, o2, t1, t2 = min(ours), statistics.median(ours), min(theirs), statistics.median(theirs)
        print(f"{name:40s} {o1 * 1e3:6.2f}/{o2 * 1e3:6.2f} {t1 * 1e3:6.2f}/{t2 * 1e3:6.2f} {o1 / t1:9.2f} {o2 / t2:9.2f}")


if __name__ == "__main__":
    main()
