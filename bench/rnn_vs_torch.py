"""LSTM forward: onnxtrain vs torch.nn.LSTM, same weights, same process, 2 threads.

Run: PYTHONPATH=build/python /usr/bin/python3 bench/rnn_vs_torch.py [seq batch input hidden [threads]]
Prints the best of three medians of each and the ratio (onnxtrain / torch; below 1 is faster).
"""
import sys
import time

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper, TensorProto

import onnxtrain

THREADS = int(sys.argv[5]) if len(sys.argv) >= 6 else 2


def onnx_lstm(lstm, seq, batch, inp, hid):
    # torch gate order i f g o -> ONNX i o f c
    def reorder(w):
        i, f, g, o = np.split(w, 4, axis=0)
        return np.concatenate([i, o, f, g], axis=0)[None]
    W = reorder(lstm.weight_ih_l0.detach().numpy())
    R = reorder(lstm.weight_hh_l0.detach().numpy())
    B = np.concatenate([reorder(lstm.bias_ih_l0.detach().numpy()[:, None])[0, :, 0],
                        reorder(lstm.bias_hh_l0.detach().numpy()[:, None])[0, :, 0]])[None]
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "h0", "c0"], ["Y", "Y_h", "Y_c"], hidden_size=hid)
    g = helper.make_graph(
        [node], "lstm",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
         for n, s in [("X", [seq, batch, inp]), ("h0", [1, batch, hid]), ("c0", [1, batch, hid])]],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ["Y", "Y_h", "Y_c"]],
        [numpy_helper.from_array(W.astype(np.float32), "W"), numpy_helper.from_array(R.astype(np.float32), "R"),
         numpy_helper.from_array(B.astype(np.float32), "B")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]).SerializeToString()


def median_ms(f, reps):
    for _ in range(3):
        f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))


def main():
    seq, batch, inp, hid = (int(a) for a in sys.argv[1:5]) if len(sys.argv) >= 5 else (128, 32, 256, 512)
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    lstm = torch.nn.LSTM(inp, hid).eval()
    x = torch.randn(seq, batch, inp)
    h0 = torch.randn(1, batch, hid)
    c0 = torch.randn(1, batch, hid)

    opts = onnxtrain.SessionOptions()
    opts.intra_op_num_threads = THREADS
    sess = onnxtrain.InferenceSession(onnx_lstm(lstm, seq, batch, inp, hid), opts)
    feed = {"X": x.numpy(), "h0": h0.numpy(), "c0": c0.numpy()}

    with torch.no_grad():
        ref = lstm(x, (h0, c0))
    got = sess.run(None, feed)
    err = max(np.abs(got[0][:, 0] - ref[0].numpy()).max(), np.abs(got[1] - ref[1][0].numpy()).max(),
              np.abs(got[2] - ref[1][1].numpy()).max())

    def run_torch():
        with torch.no_grad():
            lstm(x, (h0, c0))

    reps = 10
    t_ours, t_torch = [], []
    for _ in range(3):  # interleave to share the machine's noise
        t_torch.append(median_ms(run_torch, reps))
        t_ours.append(median_ms(lambda: sess.run(None, feed), reps))
    ours, ref_ms = min(t_ours), min(t_torch)
    print(f"LSTM seq {seq} batch {batch} input {inp} hidden {hid}, {THREADS} threads, max |diff| {err:.2e}")
    print(f"  onnxtrain {ours:8.2f} ms   torch {ref_ms:8.2f} ms   ratio {ours / ref_ms:.2f}")


if __name__ == "__main__":
    main()
