"""LSTM training step (forward + backward): onnxtrain vs torch autograd, same weights, same process.

Run: OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python /usr/bin/python3 bench/lstm_train_vs_torch.py \
         [seq batch input hidden [threads]]
loss = sum(Y * r); gradients of W, R, B (X, h0, c0 need none, as in torch). Prints the best of three
medians of each, the ratio (onnxtrain / torch; below 1 is faster), and onnxtrain's forward alone
(plain LSTM and the LSTMTrain variant that also writes the training reserve): what recomputing the
forward inside the backward kernel would add to every step.
"""
import sys
import time

import numpy as np
import torch
from onnx import helper, numpy_helper, TensorProto

import onnxtrain
from rnn_vs_torch import median_ms  # same directory

THREADS = int(sys.argv[5]) if len(sys.argv) >= 6 else 2


def reorder(w):  # torch gate order i f g o -> ONNX i o f c (first axis)
    i, f, g, o = np.split(w, 4, axis=0)
    return np.concatenate([i, o, f, g], axis=0)


def unorder(w):  # ONNX i o f c -> torch i f g o
    i, o, f, c = np.split(w, 4, axis=0)
    return np.concatenate([i, f, c, o], axis=0)


def models(lstm, seq, batch, inp, hid, r):
    W = reorder(lstm.weight_ih_l0.detach().numpy())[None]
    R = reorder(lstm.weight_hh_l0.detach().numpy())[None]
    B = np.concatenate([reorder(lstm.bias_ih_l0.detach().numpy()), reorder(lstm.bias_hh_l0.detach().numpy())])[None]
    inits = [numpy_helper.from_array(W.astype(np.float32), "W"), numpy_helper.from_array(R.astype(np.float32), "R"),
             numpy_helper.from_array(B.astype(np.float32), "B")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
              for n, s in [("X", [seq, batch, inp]), ("h0", [1, batch, hid]), ("c0", [1, batch, hid])]]
    lstm_in = ["X", "W", "R", "B", "", "h0", "c0"]
    train = helper.make_graph(
        [helper.make_node("LSTM", lstm_in, ["Y", "Y_h", "Y_c"], hidden_size=hid),
         helper.make_node("Mul", ["Y", "r"], ["p"]),
         helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)],
        "lstm_train", inputs, [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        inits + [numpy_helper.from_array(r.astype(np.float32), "r")])
    opsets = [helper.make_opsetid("", 14)]
    fwd = helper.make_graph([helper.make_node("LSTM", lstm_in, ["Y"], hidden_size=hid)], "lstm", inputs,
                            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    fwd_train = helper.make_graph(
        [helper.make_node("LSTMTrain", lstm_in, ["Y", "", "", "reserve"], domain="com.onnxtrain", hidden_size=hid)],
        "lstm_train_fwd", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    return (helper.make_model(train, opset_imports=opsets).SerializeToString(),
            helper.make_model(fwd, opset_imports=opsets).SerializeToString(),
            helper.make_model(fwd_train, opset_imports=opsets + [helper.make_opsetid("com.onnxtrain", 1)])
            .SerializeToString())


def main():
    seq, batch, inp, hid = (int(a) for a in sys.argv[1:5]) if len(sys.argv) >= 5 else (128, 32, 256, 512)
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    lstm = torch.nn.LSTM(inp, hid)
    x = torch.randn(seq, batch, inp)
    h0 = torch.randn(1, batch, hid)
    c0 = torch.randn(1, batch, hid)
    r = torch.randn(seq, 1, batch, hid)

    train_bytes, fwd_bytes, fwd_train_bytes = models(lstm, seq, batch, inp, hid, r.numpy())
    b = onnxtrain.GradientGraphBuilder(train_bytes, {"loss"}, {"W", "R", "B"}, "loss")
    b.build()
    opts = onnxtrain.SessionOptions()
    opts.intra_op_num_threads = THREADS
    sess = onnxtrain.InferenceSession(b.get_model(), opts)
    fwd = onnxtrain.InferenceSession(fwd_bytes, opts)
    fwd_train = onnxtrain.InferenceSession(fwd_train_bytes, opts)
    feed = {"X": x.numpy(), "h0": h0.numpy(), "c0": c0.numpy()}
    names = ["loss", "W_grad", "R_grad", "B_grad"]

    def run_torch():
        lstm.zero_grad(set_to_none=True)
        y, _ = lstm(x, (h0, c0))
        loss = (y * r[:, 0]).sum()
        loss.backward()
        return loss

    ref_loss = run_torch()
    got = sess.run(names, feed)
    ref = [reorder(lstm.weight_ih_l0.grad.numpy()), reorder(lstm.weight_hh_l0.grad.numpy()),
           np.concatenate([reorder(lstm.bias_ih_l0.grad.numpy()), reorder(lstm.bias_hh_l0.grad.numpy())])]
    err = max(float(np.abs(g[0] - e).max() / (np.abs(e).max() + 1e-12)) for g, e in zip(got[1:], ref))

    reps = 5
    t_ours, t_torch, t_fwd, t_fwd_train = [], [], [], []
    for _ in range(3):  # interleaved to share the machine's noise
        t_torch.append(median_ms(run_torch, reps))
        t_ours.append(median_ms(lambda: sess.run(names, feed), reps))
        t_fwd.append(median_ms(lambda: fwd.run(None, feed), reps))
        t_fwd_train.append(median_ms(lambda: fwd_train.run(None, feed), reps))
    ours, ref_ms = min(t_ours), min(t_torch)
    print(f"LSTM train step seq {seq} batch {batch} input {inp} hidden {hid}, {THREADS} threads; "
          f"loss {float(got[0]):.4f} vs torch {float(ref_loss):.4f}, max gradient error / max |gradient| {err:.1e}")
    print(f"  forward+backward: onnxtrain {ours:8.1f} ms   torch {ref_ms:8.1f} ms   ratio {ours / ref_ms:.2f}")
    print(f"  onnxtrain forward alone: plain LSTM {min(t_fwd):.1f} ms, LSTMTrain (writes the reserve) "
          f"{min(t_fwd_train):.1f} ms")


if __name__ == "__main__":
    main()
