"""PyTorch golden runs on a GPU (scripts/gpu_check.sh): the same models trained by PyTorch on CUDA
and by the onnxtrain command line with --provider cuda (and, as the second reference, on the CPU).

Models (built in PyTorch with seed 0, exported with torch.onnx.export in training mode so that all
runs start from the same weights): mlp (784-256-128-10, ReLU, cross-entropy), bert (two post-norm
encoder layers, hidden 128, 2 heads, GELU, token classification; bench/side_by_side.py's builder)
and cnn (3x3 convolutions with BatchNorm in training mode, ReLU, max and global average pooling,
a linear head: onnxtrain's Conv/FusedConv, ConvGrad, BatchNormalization, MaxPool and their gradients
on cuDNN and its own kernels).
Optimizers: SGD (lr 0.05) and Adam (lr 1e-3; not for cnn, see main). Full batch, no shuffle, 8 steps; PyTorch in float32
with TF32 off. Per step the losses must agree within 2e-4 relative; at the end every weight within
2e-3 (SGD) or 1e-2 (Adam) of its tensor's largest magnitude. Exit status 1 when any run disagrees.

Usage: python3 scripts/gpu_golden.py --exe PATH/onnxtrain [--work DIR] [--models mlp,bert,cnn]
       [--torch-device cuda] (cpu: a rehearsal without a GPU, onnxtrain on the CPU only)
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import side_by_side as sbs  # noqa: E402

STEPS = 8


def build(name):
    import torch
    from torch import nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    if name == "mlp":
        class MLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b, self.c = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

            def forward(self, x, y):  # (loss, logits): the logits are the trained model's output
                logits = self.c(torch.relu(self.b(torch.relu(self.a(x)))))
                return F.cross_entropy(logits, y), logits
        g = torch.Generator().manual_seed(1)
        return MLP(), torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g)
    if name == "cnn":
        class CNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
                self.c2, self.b2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32)
                self.c3 = nn.Conv2d(32, 32, 3, padding=1)
                self.fc = nn.Linear(32, 10)

            def forward(self, x, y):
                h = F.max_pool2d(torch.relu(self.b1(self.c1(x))), 3, stride=2, padding=1)
                h = torch.relu(self.c3(torch.relu(self.b2(self.c2(h)))))
                logits = self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))
                return F.cross_entropy(logits, y), logits
        g = torch.Generator().manual_seed(1)
        return CNN(), torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g)
    sbs.BERT.update(dict(vocab=1000, seq=32, hidden=128, heads=2, ffn=512, layers=2, classes=8))
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 1000, (16, 32), generator=g)
    y = torch.randint(0, 8, (16, 32), generator=g)
    class Bert(sbs.torch_models()["bert"]):
        def forward(self, ids, labels):
            logits = self.logits(ids)
            return F.cross_entropy(logits.reshape(-1, sbs.BERT["classes"]), labels.reshape(-1)), logits
    return Bert(), x, y


def torch_run(model, x, y, opt_name, device):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(device)
    model = model.to(dev)
    x, y = x.to(dev), y.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05) if opt_name == "sgd" else torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(x, y)[0]
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, {n: p.detach().cpu().numpy() for n, p in model.named_parameters()}


def ours(exe, model_path, data, batch, opt_name, provider, work):
    tag = f"{os.path.basename(model_path)}.{opt_name}.{provider}"
    metrics, out = os.path.join(work, tag + ".jsonl"), os.path.join(work, tag + ".trained.onnx")
    cmd = [exe, "train", model_path, "--data", data, "--optimizer", opt_name, "--lr", "0.05" if opt_name == "sgd" else "0.001",
           "--batch-size", str(batch), "--steps", str(STEPS), "--no-shuffle", "--log-every", "1", "--metrics", metrics,
           "--out", out, "--progress", "none"]
    if provider == "cuda":
        cmd += ["--provider", "cuda", "--provider", "cpu"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return None, None, (p.stderr or p.stdout).strip()[-600:]
    losses = [json.loads(line)["loss"] for line in open(metrics) if "loss" in json.loads(line)]
    import onnx
    from onnx import numpy_helper
    weights = {i.name: numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
    return losses, weights, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--work", default="/tmp/gpu_golden")
    ap.add_argument("--models", default="mlp,bert,cnn")
    ap.add_argument("--torch-device", default="cuda")
    a = ap.parse_args()
    import torch
    os.makedirs(a.work, exist_ok=True)
    ok = True
    on_gpu = a.torch_device == "cuda"
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0) if on_gpu else a.torch_device}")
    for name in a.models.split(","):
        model, x, y = build(name)
        path = os.path.join(a.work, f"{name}.train.onnx")
        kw = dict(input_names=["x", "y"], output_names=["loss", "logits"], opset_version=17, do_constant_folding=False,
                  training=torch.onnx.TrainingMode.TRAINING)
        try:
            torch.onnx.export(model, (x, y), path, dynamo=False, **kw)
        except TypeError:
            torch.onnx.export(model, (x, y), path, **kw)
        data = os.path.join(a.work, f"{name}.data.npz")
        np.savez(data, x=x.numpy(), y=y.numpy())
        state = {k: v.clone() for k, v in model.state_dict().items()}
        # cnn: SGD only. Adam's update is about lr per step wherever a gradient is near zero, whatever
        # its value: summation orders (cuDNN's, oneDNN's, PyTorch's) already move the BatchNorm
        # biases and some convolution weights by 5e-3 to 8e-3 of their largest magnitude in 8 steps
        # (PyTorch's CPU against onnxtrain's CPU), at the bound; the mlp and bert runs cover Adam.
        for opt_name in ("sgd",) if name == "cnn" else ("sgd", "adam"):
            model.load_state_dict(state)
            t_losses, t_weights = torch_run(model, x, y, opt_name, a.torch_device)
            model = model.cpu()
            for provider in ("cuda", "cpu") if on_gpu else ("cpu",):
                losses, weights, err = ours(a.exe, path, data, x.shape[0], opt_name, provider, a.work)
                if err:
                    print(f"{name:5} {opt_name:5} {provider:5} FAILED: {err}")
                    ok = False
                    continue
                rel = max(abs(u - v) / max(1e-6, abs(v)) for u, v in zip(losses, t_losses)) if len(losses) == STEPS else float("inf")
                werr, compared = 0.0, 0
                for n, w in t_weights.items():
                    if n in weights and weights[n].shape == w.shape:
                        werr = max(werr, float(np.abs(weights[n] - w).max() / max(1e-6, np.abs(w).max())))
                        compared += 1
                # Adam divides by sqrt(v) + eps: a weight whose gradients are all near zero moves by
                # about lr per step whatever their exact values (3.4e-3 of the largest weight is seen on
                # the CPU against PyTorch on the CPU for bert), so its bound is looser.
                good = rel < 2e-4 and werr < (2e-3 if opt_name == "sgd" else 1e-2) and compared > 0
                ok = ok and good
                print(f"{name:5} {opt_name:5} {provider:5} {'ok ' if good else 'BAD'} loss rel err {rel:.2e} "
                      f"(torch {t_losses[0]:.5f}->{t_losses[-1]:.5f}, ours {losses[0]:.5f}->{losses[-1]:.5f}), "
                      f"weights {compared}/{len(t_weights)} compared, max rel err {werr:.2e}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
