"""Backward kernels of LayerNorm, Softmax, LogSoftmax, BatchNorm and softmax cross-entropy:
onnxtrain vs torch autograd, side by side in one process.

Usage: OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python /usr/bin/python3 bench/bench_grad_norm_loss.py \
           [--threads 2] [--repeat 20] [--skip-sce]

"backward": the com.onnxtrain.*Grad node alone (one ONNX node run through InferenceSession, output
allocation included) vs torch.autograd.grad on a graph built once (retain_graph), i.e. only the
backward of both. "fwd+bwd": the gradient model built by GradientGraphBuilder (default mode) vs
torch forward + backward. Prints the best milliseconds (the machine is shared), the ratio
onnxtrain / torch (< 1: onnxtrain faster) and the largest difference of the gradients.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import onnxtrain as ot
from bench_reduce import best_ms  # interleaved best-of timing

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


def grad_node_model(op, inputs, outputs, **attrs):
    """One com.onnxtrain node; inputs: [(name, array)] fed at run time."""
    node = helper.make_node(op, [n for n, _ in inputs], outputs, domain="com.onnxtrain", **attrs)
    ins = [vi(n, INT64 if a.dtype == np.int64 else FLOAT, a.shape) for n, a in inputs]
    g = helper.make_graph([node], op, ins, [vi(o, FLOAT, None) for o in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.onnxtrain", 1)])


def forward_model(op, x, r, params, **attrs):
    """loss = ReduceSum(op(x, *params) * r), x and r inputs, params initializers; bytes."""
    nodes = [helper.make_node(op, ["x"] + [n for n, _ in params], ["y"], **attrs),
             helper.make_node("Mul", ["y", "r"], ["p"]), helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
    inits = [helper.make_tensor(n, FLOAT, a.shape, a.flatten().tolist()) for n, a in params]
    g = helper.make_graph(nodes, op, [vi("x", FLOAT, x.shape), vi("r", FLOAT, r.shape)], [vi("loss", FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def report(name, ours, theirs, diff):
    print(f"{name:46s} {ours:10.2f} {theirs:9.2f} {ours / theirs:6.2f}  {diff:.1e}", flush=True)


def maxdiff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--skip-sce", action="store_true", help="skip the [8192, 30522] cross-entropy (3 GB)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    so = ot.SessionOptions()
    so.intra_op_num_threads = args.threads
    rng = np.random.default_rng(0)
    print(f"threads={args.threads}  best of {args.repeat} runs")
    print(f"{'case':46s} {'onnxtrain':>10s} {'torch':>9s} {'ratio':>6s}  max|diff|")

    # ---- LayerNorm [8192, 768], axis -1
    x = rng.standard_normal((8192, 768), dtype=np.float32)
    w = rng.standard_normal(768, dtype=np.float32)
    b = rng.standard_normal(768, dtype=np.float32)
    dy = rng.standard_normal(x.shape, dtype=np.float32)
    xt, wt, bt = (torch.from_numpy(a.copy()).requires_grad_() for a in (x, w, b))
    yt = F.layer_norm(xt, (768,), wt, bt, 1e-5)
    dyt = torch.from_numpy(dy)
    mean = x.mean(-1, keepdims=True)
    inv = (1.0 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)).astype(np.float32)
    m = grad_node_model("LayerNormalizationGrad", [("dy", dy), ("x", x), ("w", w), ("mean", mean), ("inv", inv)],
                        ["dx", "dw", "db"], axis=-1)
    sess = ot.InferenceSession(m.SerializeToString(), so)
    feed = {"dy": dy, "x": x, "w": w, "mean": mean, "inv": inv}
    tfn = lambda: torch.autograd.grad(yt, (xt, wt, bt), dyt, retain_graph=True)
    ours, theirs = best_ms([lambda: sess.run(None, feed), tfn], args.repeat)
    report("LayerNorm [8192,768] backward", ours, theirs, max(maxdiff(a, t) for a, t in zip(sess.run(None, feed), tfn())))
    fm = forward_model("LayerNormalization", x, dy, [("w", w), ("b", b)], axis=-1, epsilon=1e-5)
    builder = ot.GradientGraphBuilder(fm, [], ["x", "w", "b"], "loss")
    builder.build()
    gs = ot.InferenceSession(builder.get_model(), so)
    gfeed = {"x": x, "r": dy}
    gnames = ["x_grad", "w_grad", "b_grad"]

    def torch_fb():
        xx, ww, bb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
        return torch.autograd.grad((F.layer_norm(xx, (768,), ww, bb, 1e-5) * dyt).sum(), (xx, ww, bb))
    ours, theirs = best_ms([lambda: gs.run(gnames, gfeed), torch_fb], args.repeat)
    report("LayerNorm [8192,768] fwd+bwd (gradient model)", ours, theirs,
           max(maxdiff(a, t) for a, t in zip(gs.run(gnames, gfeed), torch_fb())))

    # ---- Softmax / LogSoftmax [64*12, 128, 128], axis -1
    x = rng.standard_normal((64 * 12, 128, 128), dtype=np.float32)
    dy = rng.standard_normal(x.shape, dtype=np.float32)
    dyt = torch.from_numpy(dy)
    for op, tf in (("Softmax", torch.softmax), ("LogSoftmax", torch.log_softmax)):
        xt = torch.from_numpy(x.copy()).requires_grad_()
        yt = tf(xt, -1)
        y = yt.detach().numpy()
        sess = ot.InferenceSession(grad_node_model(op + "Grad", [("dy", dy), ("y", y)], ["dx"], axis=-1).SerializeToString(), so)
        feed = {"dy": dy, "y": y}
        tfn = lambda: torch.autograd.grad(yt, xt, dyt, retain_graph=True)
        ours, theirs = best_ms([lambda: sess.run(None, feed), tfn], args.repeat)
        report(f"{op} [768,128,128] backward", ours, theirs, maxdiff(sess.run(None, feed)[0], tfn()[0]))
        del yt, xt, sess

    # ---- BatchNormalization training [32, 64, 56, 56]
    x = rng.standard_normal((32, 64, 56, 56), dtype=np.float32)
    dy = rng.standard_normal(x.shape, dtype=np.float32)
    s = rng.standard_normal(64, dtype=np.float32)
    zeros, ones = np.zeros(64, np.float32), np.ones(64, np.float32)
    xt, st = torch.from_numpy(x.copy()).requires_grad_(), torch.from_numpy(s.copy()).requires_grad_()
    bt = torch.zeros(64, requires_grad=True)
    yt = F.batch_norm(xt, torch.zeros(64), torch.ones(64), st, bt, training=True, eps=1e-5)
    dyt = torch.from_numpy(dy)
    sess = ot.InferenceSession(grad_node_model(
        "BatchNormalizationGrad", [("dy", dy), ("x", x), ("s", s), ("m", zeros), ("v", ones)], ["dx", "ds", "db"],
        epsilon=1e-5, training_mode=1).SerializeToString(), so)
    feed = {"dy": dy, "x": x, "s": s, "m": zeros, "v": ones}
    tfn = lambda: torch.autograd.grad(yt, (xt, st, bt), dyt, retain_graph=True)
    ours, theirs = best_ms([lambda: sess.run(None, feed), tfn], args.repeat)
    report("BatchNorm train [32,64,56,56] backward", ours, theirs,
           max(maxdiff(a, t) for a, t in zip(sess.run(None, feed), tfn())))
    del xt, yt, sess

    # ---- SoftmaxCrossEntropyLoss [8192, 30522], mean
    if not args.skip_sce:
        x = rng.standard_normal((8192, 30522), dtype=np.float32)
        labels = rng.integers(0, 30522, 8192).astype(np.int64)
        xt = torch.from_numpy(x).requires_grad_()
        loss = F.cross_entropy(xt, torch.from_numpy(labels))
        lp = torch.log_softmax(xt.detach(), 1).numpy()
        del x
        dl = np.array(1.0, np.float32)
        sess = ot.InferenceSession(grad_node_model(
            "SoftmaxCrossEntropyLossGrad", [("dl", dl), ("lp", lp), ("t", labels)], ["dx"],
            reduction="mean").SerializeToString(), so)
        feed = {"dl": dl, "lp": lp, "t": labels}
        tfn = lambda: torch.autograd.grad(loss, xt, retain_graph=True)
        ours, theirs = best_ms([lambda: sess.run(None, feed), tfn], max(3, args.repeat // 4))
        report("SoftmaxCrossEntropy [8192,30522] backward", ours, theirs, maxdiff(sess.run(None, feed)[0], tfn()[0]))


if __name__ == "__main__":
    main()
