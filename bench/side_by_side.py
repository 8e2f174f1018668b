"""onnxtrain against PyTorch (and scikit-learn) side by side: training-step and inference time, peak
memory, achieved GFLOP/s and loss agreement on four workloads. Never pass/fail: it prints the
measurements, their ratios and the project's performance goals beside them.

Workloads (built once in PyTorch, exported with torch.onnx.export, so both frameworks start from
the same weights and see the same batches; the optimizers do the same math, no weight decay):
  mlp         784-512-256-10 (ReLU), batch 128, cross-entropy, SGD momentum 0.9 (lr 0.01)
  cnn         2x (conv3x3 + ReLU + maxpool2) 1->16->32 channels, fc 800-128-10, on 1x28x28,
              batch 64, cross-entropy, SGD momentum 0.9 (lr 0.01)
  bert        BERT-tiny-like: token + position embeddings, 2 post-norm transformer encoder layers
              (hidden 128, 2 heads, ffn 512, GELU, no dropout), seq 128, batch 16, token
              classification (8 classes) cross-entropy, Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8)
  linreg      linear regression, 10 features, batch 1000, MSE, plain SGD (lr 0.01)
  resnet18    torchvision's ResNet-18 (random weights, BatchNorm in training mode), batch 16 of
              3x224x224, 1000 classes, cross-entropy, SGD momentum 0.9 (lr 0.01); training only
  bert-base   one BERT-base encoder layer (post-norm TransformerEncoderLayer: hidden 768, 12 heads,
              ffn 3072, GELU, no dropout) on float inputs [8, 128, 768] + a token classifier (8
              classes), cross-entropy, Adam (lr 1e-4); training only
  sklearn-mlp MLPRegressor(hidden_layer_sizes=(50, 10)) on make_regression(1000, 100), batch 15,
              100 epochs of plain SGD: time of the whole fit with scikit-learn's own fit, with
              onnxtrain.sklearn.OrtGradientOptimizer (its epochs run in C++) and with a PyTorch loop
Each of mlp, cnn, bert and linreg runs as training (onnxtrain TrainingSession.run vs torch
forward + backward + optimizer step) and as inference (forward only: onnxtrain InferenceSession vs
torch under no_grad in eval mode).

bf16 mixed precision (--precision bf16 or fp32,bf16): mlp, cnn and bert also train in mode
"train-bf16" (rows labelled so, with precision "bf16" in the JSON): onnxtrain with
TrainingParameters.mixed_precision = "bf16" (MatMul, Gemm, Conv and their gradients in bfloat16 with
fp32 accumulation; master weights, normalizations, softmax, losses and optimizer in fp32; a Conv with
one input channel per group, cnn's first, stays fp32) against PyTorch's AMP recipe for bf16: forward
and loss inside torch.autocast("cpu", dtype=torch.bfloat16), backward and optimizer step outside, no
GradScaler; PyTorch's bf16 reference is again the fastest of its three environments. linreg,
sklearn-mlp and all inference rows are fp32 only. The bf16 loss check compares each framework with
itself: onnxtrain-bf16's first 10 losses against onnxtrain-fp32's, PyTorch-autocast's against
PyTorch-fp32's (the same environment), each within 2e-2 relative (the two frameworks round different
tensors to bf16, so they cannot agree to 1e-4; the fp32 rows' 1e-4 check ties the two fp32
trajectories together); the row reports the larger of the two differences (both, and the
onnxtrain-bf16 / PyTorch-autocast difference, are in the JSON). The goals add, per bf16 workload and
thread count, onnxtrain bf16 / onnxtrain fp32 step time (target <= 1/1.5, i.e. >= 1.5x faster, for
bert and cnn) and onnxtrain bf16 / PyTorch-autocast best. The bf16 rows' GFLOP/s count the same
FLOPs but are not set against the GEMM peak (it is fp32's). --precision bf16 alone still runs fp32
training of mlp, cnn and bert (the loss check's and the speed-up's reference) and skips linreg,
sklearn-mlp and inference.

Method. Every (framework, environment, workload, mode, thread count) runs in its own subprocess;
the onnxtrain processes never import torch, and the models are exported by a subprocess too, so
that the parent stays small. Peak RSS is the child's VmHWM (/proc/self/status): getrusage's
ru_maxrss, also recorded, inherits the parent's peak across subprocess's vfork + exec. Thread
counts 1 and 2 (SessionOptions.intra_op_num_threads / torch.set_num_threads, plus OMP_NUM_THREADS
and OPENBLAS_NUM_THREADS for the BLAS; 1 for numpy's BLAS in onnxtrain processes, which only the
harness's setup calls). Rounds alternate the order (odd rounds onnxtrain first
and the thread counts ascending, even rounds PyTorch first and the thread counts descending); a
result is the median over rounds of each process's median step time.
Each training process first runs 10 steps on 10 different batches and records their losses
(compared between frameworks: PASS when they agree within 1e-4 relative; inference compares the
first batch's output), then warm-up steps, then the timed steps (each timed alone, cycling over the
same 10 batches; at least 30, then stopping once 6 s are spent). PyTorch runs in three environments:
  default    OPENBLAS_CORETYPE=Haswell (the setting of this project's machines)
  best       OPENBLAS_CORETYPE unset, ATEN_CPU_CAPABILITY=avx512 (avx2 without AVX-512), glibc's
             MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_THRESHOLD_ large so that freed memory is kept, and
             OMP_WAIT_POLICY=PASSIVE (spinning waits made PyTorch's 2-thread steps ~30x slower when
             another process held a core)
  best_spin  the same with libgomp's default spinning waits (faster on a quiet machine)
and the reference is the fastest of the three for each row ("PyTorch's best"); scikit-learn runs in
default and best as well. onnxtrain runs in the default environment. Achieved GFLOP/s count the model's FLOPs
analytically (2 per multiply-add of each matrix product and convolution; a training step adds the
weight gradient and, except for the first layer whose input is the data, the input gradient: x3
or x2) and are set against the fp32 GEMM peak measured in the same run (a 2048x2048 product, best
of 8, by torch.mm in both environments and by an onnxtrain MatMul; the best of them at each thread
count). Each ratio goal also says what 0.70x would ask: PyTorch's share of that peak / 0.70, the
share the whole step would have to reach (above 100 %: faster than the machine's measured fp32
products). The header names the CPU, its ISA extensions, the load average (other work on a 2-core
machine skews the 2-thread rows), the onnxtrain build that ran (a rebuild during the run is
flagged) and the BLAS/oneDNN libraries each framework's processes mapped (/proc/self/maps).
The sklearn-mlp processes time 3 whole fits each (the median). "2 threads never slower than 1"
reads each row's onnxtrain rounds: a median ratio above 1.00 counts as slower only when every
2-thread round is slower than every 1-thread round (rows with no parallel work, such as linreg's
7 µs step, run the same code at both counts and land on either side of 1.00 by noise).

Run (bench/setup.sh installs OpenBLAS: on Debian's reference BLAS PyTorch and scikit-learn run
several times slower and the comparison would flatter onnxtrain):
    bash bench/setup.sh
    PYTHONPATH=build/python /usr/bin/python3 bench/side_by_side.py
Options: --quick (few steps, one round: for development), --workloads
mlp,cnn,bert,linreg,sklearn-mlp,resnet18,bert-base (the default: all), --threads 1,2, --rounds 3,
--no-inference, --precision fp32 (default; bf16, or fp32,bf16 for both), --out
bench/side_by_side.json (default). resnet18 and bert-base time at least 5 and 8 steps (the others
30); resnet18's loss check compares its first 3 losses (from the 4th step on the trajectories part
as PyTorch's own environments' do, ~1e-3 apart at the 10th: BatchNorm over 16 samples). The full run (fp32) takes 10 to 15 minutes on a 2-core machine without resnet18 and bert-base,
which add about 25 (more when other work slows PyTorch's 2-thread runs); fp32,bf16 adds the bf16
training of mlp, cnn and bert (about 3 to 5 minutes more).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
N_BATCHES = 10          # distinct batches per workload: the loss check's steps, then cycled by the timing
LOSS_RTOL = 1e-4        # the loss check's relative tolerance
BF16_LOSS_RTOL = 2e-2   # the bf16 loss check's: each framework's bf16 losses against its own fp32 losses
BF16_WORKLOADS = ("mlp", "cnn", "bert")   # the workloads that also train in bf16 mixed precision
BF16_SPEEDUP_GOAL = {"bert": 1.5, "cnn": 1.5}   # onnxtrain bf16 step at least this much faster than fp32
GEMM_N = 2048           # the GEMM peak's square size
GEMM_REPEAT = 8         # the GEMM peak is the best of this many products

# Per workload: batch, optimizer (onnxtrain name, torch name, hyper-parameters), learning rate,
# timed steps (training, inference) of a full run and of --quick.
WORKLOADS = {
    "mlp": dict(batch=128, optimizer="momentum", lr=0.01, steps=(300, 1000), quick=(20, 40)),
    "cnn": dict(batch=64, optimizer="momentum", lr=0.01, steps=(200, 500), quick=(10, 30)),
    "bert": dict(batch=16, optimizer="adam", lr=1e-3, steps=(40, 100), quick=(3, 5)),
    "linreg": dict(batch=1000, optimizer="sgd", lr=0.01, steps=(5000, 10000), quick=(300, 500)),
    # The large training workloads: a step takes about a second, so fewer timed steps (min_steps).
    # loss_check: the losses compared (ResNet-18's trajectories part after a few steps: BatchNorm over
    # 16 samples amplifies rounding, PyTorch's own environments differ by ~1e-3 at the 10th step).
    "resnet18": dict(batch=16, optimizer="momentum", lr=0.01, steps=(10, 0), quick=(2, 0), min_steps=5,
                     inference=False, loss_check=3),
    "bert-base": dict(batch=8, optimizer="adam", lr=1e-4, steps=(20, 0), quick=(2, 0), min_steps=8,
                      inference=False),
}
SKLEARN_MLP_FITS = 3    # timed fits per sklearn-mlp process (the median is its time)
SKLEARN_MLP = dict(samples=1000, features=100, hidden=(50, 10), batch=15, epochs=100, quick_epochs=10, lr=1e-2)
BERT = dict(vocab=1000, seq=128, hidden=128, heads=2, ffn=512, layers=2, classes=8)
BERT_BASE = dict(seq=128, hidden=768, heads=12, ffn=3072, classes=8)
# ResNet-18's convolutions at 224x224: (input channels, output channels, kernel, output side, count)
RESNET18_CONVS = [(3, 64, 7, 112, 1),                                          # stem (its input is the data)
                  (64, 64, 3, 56, 4),                                          # layer1
                  (64, 128, 3, 28, 1), (64, 128, 1, 28, 1), (128, 128, 3, 28, 3),  # layer2 (+ downsample)
                  (128, 256, 3, 14, 1), (128, 256, 1, 14, 1), (256, 256, 3, 14, 3),
                  (256, 512, 3, 7, 1), (256, 512, 1, 7, 1), (512, 512, 3, 7, 3)]
ADAM = dict(beta1=0.9, beta2=0.999, eps=1e-8)
MOMENTUM = 0.9
WARMUP = 5              # untimed steps after the 10 loss steps
MIN_TIMED_STEPS = 30    # timed steps at least (full run) ...
TIME_BUDGET_S = 6.0     # ... then the timing stops once this is spent


def is_train(mode):
    """'train' (fp32) and 'train-bf16' (bf16 mixed precision) are training; 'infer' and 'fit' not."""
    return mode.startswith("train")


def precision_of(mode):
    return "bf16" if mode.endswith("-bf16") else "fp32"


def workload_modes(workload, precisions, inference):
    """The modes a workload runs in: fp32 training and inference as ever; 'train-bf16' beside fp32
    training (its reference) for the bf16 workloads when bf16 is asked for. With bf16 alone, only the
    bf16 workloads' fp32 and bf16 training."""
    if workload == "sklearn-mlp":
        return ["fit"] if "fp32" in precisions else []
    bf16 = "bf16" in precisions and workload in BF16_WORKLOADS
    if "fp32" not in precisions:
        return ["train", "train-bf16"] if bf16 else []
    inference = inference and WORKLOADS.get(workload, {}).get("inference", True)
    return ["train"] + (["train-bf16"] if bf16 else []) + (["infer"] if inference else [])


# ----------------------------------------------------------------------------------- environments


def cpu_info():
    """CPU model, the ISA extensions that matter for fp32/bf16 GEMM, and the core count."""
    model, flags = "?", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    isa = [x for x in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
                       "amx_int8") if x in flags]
    return {"model": model, "isa": isa, "cores": os.cpu_count()}


def environments(base, cpu):
    """The two PyTorch environments (and onnxtrain's, the default one) as full environ dicts."""
    default = dict(base, OPENBLAS_CORETYPE="Haswell")
    best = dict(base)
    best.pop("OPENBLAS_CORETYPE", None)
    best["ATEN_CPU_CAPABILITY"] = "avx512" if "avx512f" in cpu["isa"] else "avx2"
    # glibc keeps freed memory: no trimming of the heap top, no mmap for blocks under 32 MiB (the
    # largest threshold glibc accepts; a larger value is ignored).
    best["MALLOC_TRIM_THRESHOLD_"] = str(1 << 40)
    best["MALLOC_MMAP_THRESHOLD_"] = str(32 << 20)
    # OpenMP threads sleep rather than spin when waiting: with libgomp's spinning, PyTorch's 2-thread
    # step was ~30x slower whenever another process held one of the two cores (measured: MLP step
    # 108 ms instead of 4 ms). onnxtrain keeps libgomp's default.
    best["OMP_WAIT_POLICY"] = "PASSIVE"
    # The same with libgomp's default spinning waits, PyTorch's own setting: faster on a quiet
    # machine. PyTorch's best is the faster of the two.
    best_spin = dict(best)
    best_spin.pop("OMP_WAIT_POLICY")
    return {"default": default, "best": best, "best_spin": best_spin}


def mapped_libraries():
    """BLAS-like libraries this process mapped: OpenBLAS, reference BLAS, MKL, oneDNN, BLIS."""
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if re.search(r"openblas|libblas|libmkl|libdnnl|libmkldnn|libblis", os.path.basename(path)):
                found.add(os.path.realpath(path))
    # Name the directory for Debian's alternatives (openblas-pthread/libblas.so.3 vs blas/libblas.so.3).
    return sorted(os.path.join(os.path.basename(os.path.dirname(p)), os.path.basename(p)) for p in found)


def peak_rss_mb():
    """This process's peak resident memory in MB: VmHWM, the high-water mark of its own address
    space. (getrusage's ru_maxrss is also recorded, but Linux carries the parent's peak into it
    when the child is started by vfork + exec, as subprocess does.)"""
    import resource
    hwm = None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024.0
    return hwm, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ------------------------------------------------------------------------------- models and FLOPs


def torch_models():
    """The PyTorch modules (defined here so that onnxtrain's processes never import torch). Each
    has logits(x) (the inference model) and forward(x, y) -> loss (the training model)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.ModuleList(nn.Linear(a, b) for a, b in ((784, 512), (512, 256), (256, 10)))

        def logits(self, x):
            for i, layer in enumerate(self.fc):
                x = layer(x)
                if i + 1 < len(self.fc):
                    x = torch.relu(x)
            return x

        def forward(self, x, y):
            return F.cross_entropy(self.logits(x), y)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3)
            self.conv2 = nn.Conv2d(16, 32, 3)
            self.fc1 = nn.Linear(32 * 5 * 5, 128)
            self.fc2 = nn.Linear(128, 10)

        def logits(self, x):
            x = F.max_pool2d(torch.relu(self.conv1(x)), 2)  # 16x26x26 -> 16x13x13
            x = F.max_pool2d(torch.relu(self.conv2(x)), 2)  # 32x11x11 -> 32x5x5
            return self.fc2(torch.relu(self.fc1(x.flatten(1))))

        def forward(self, x, y):
            return F.cross_entropy(self.logits(x), y)

    class BertTiny(nn.Module):
        def __init__(self):
            super().__init__()
            b = BERT
            self.tok = nn.Embedding(b["vocab"], b["hidden"])
            self.pos = nn.Parameter(torch.randn(b["seq"], b["hidden"]) * 0.02)
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(b["hidden"], b["heads"], b["ffn"], dropout=0.0, activation="gelu",
                                           batch_first=True) for _ in range(b["layers"]))
            self.head = nn.Linear(b["hidden"], b["classes"])

        def logits(self, ids):
            h = self.tok(ids) + self.pos
            for layer in self.layers:
                h = layer(h)
            return self.head(h)

        def forward(self, ids, labels):
            return F.cross_entropy(self.logits(ids).reshape(-1, BERT["classes"]), labels.reshape(-1))

    class LinReg(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(10, 1)

        def logits(self, x):
            return self.lin(x)

        def forward(self, x, y):
            return ((self.lin(x) - y) ** 2).mean()  # F.mse_loss does not export (opset 17)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            import torchvision  # bench/setup.sh installs it (python3-torchvision)
            self.net = torchvision.models.resnet18(num_classes=1000)

        def logits(self, x):
            return self.net(x)

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    class BertBaseLayer(nn.Module):
        def __init__(self):
            super().__init__()
            b = BERT_BASE
            self.layer = nn.TransformerEncoderLayer(b["hidden"], b["heads"], b["ffn"], dropout=0.0,
                                                    activation="gelu", batch_first=True)
            self.head = nn.Linear(b["hidden"], b["classes"])

        def logits(self, x):
            return self.head(self.layer(x))

        def forward(self, x, labels):
            return F.cross_entropy(self.logits(x).reshape(-1, BERT_BASE["classes"]), labels.reshape(-1))

    return {"mlp": MLP, "cnn": CNN, "bert": BertTiny, "linreg": LinReg, "resnet18": ResNet18,
            "bert-base": BertBaseLayer}


def gemm_flops(workload):
    """The model's matrix products and convolutions on one batch: [(flops, input_needs_grad)] with
    2 FLOPs per multiply-add. input_needs_grad is False where the operand is the data (the first
    layer): its training step computes no input gradient. Element-wise work (activations, softmax,
    norms, pooling, the loss, the optimizer) is not counted."""
    n = WORKLOADS[workload]["batch"]
    if workload == "mlp":
        return [(2 * n * 784 * 512, False), (2 * n * 512 * 256, True), (2 * n * 256 * 10, True)]
    if workload == "cnn":
        return [(2 * n * 16 * 26 * 26 * (1 * 3 * 3), False),   # conv1: 16 maps of 26x26, 1x3x3 each
                (2 * n * 32 * 11 * 11 * (16 * 3 * 3), True),   # conv2: 32 maps of 11x11, 16x3x3 each
                (2 * n * 800 * 128, True), (2 * n * 128 * 10, True)]
    if workload == "bert":
        b = BERT
        tokens, h = n * b["seq"], b["hidden"]
        per_layer = [(2 * tokens * h * 3 * h, True),             # Q, K, V projections
                     (2 * n * b["seq"] * b["seq"] * h, True),    # Q K^T (all heads)
                     (2 * n * b["seq"] * b["seq"] * h, True),    # attention x V
                     (2 * tokens * h * h, True),                 # output projection
                     (2 * 2 * tokens * h * b["ffn"], True)]      # the two FFN matrices
        return per_layer * b["layers"] + [(2 * tokens * h * b["classes"], True)]
    if workload == "linreg":
        return [(2 * n * 10, False)]
    if workload == "resnet18":
        return [(2 * n * cout * side * side * cin * k * k, cin != 3) for cin, cout, k, side, count in RESNET18_CONVS
                for _ in range(count)] + [(2 * n * 512 * 1000, True)]
    if workload == "bert-base":
        b = BERT_BASE
        tokens, h = n * b["seq"], b["hidden"]
        # The first product's input is the data, but it needs no gradient only if nothing else reads
        # it: the residual reads it too; counted without the input gradient all the same.
        return [(2 * tokens * h * 3 * h, False), (2 * n * b["seq"] * b["seq"] * h, True),
                (2 * n * b["seq"] * b["seq"] * h, True), (2 * tokens * h * h, True),
                (2 * 2 * tokens * h * b["ffn"], True), (2 * tokens * h * b["classes"], True)]
    raise ValueError(workload)


def step_flops(workload, mode):
    """FLOPs of one step: the forward products; training adds a weight gradient of the same size
    for each, and an input gradient for those whose input is not the data."""
    ops = gemm_flops(workload)
    if not is_train(mode):
        return sum(f for f, _ in ops)
    return sum(f * (3 if input_grad else 2) for f, input_grad in ops)


def make_batches(workload, seed=0):
    """N_BATCHES batches (inputs, targets) stacked on axis 0, from a fixed seed."""
    rng = np.random.default_rng(seed)
    n = WORKLOADS[workload]["batch"]
    k = N_BATCHES
    if workload == "mlp":
        return rng.standard_normal((k, n, 784), np.float32), rng.integers(0, 10, (k, n))
    if workload == "cnn":
        return rng.standard_normal((k, n, 1, 28, 28), np.float32), rng.integers(0, 10, (k, n))
    if workload == "bert":
        return (rng.integers(0, BERT["vocab"], (k, n, BERT["seq"])),
                rng.integers(0, BERT["classes"], (k, n, BERT["seq"])))
    if workload == "linreg":
        x = rng.standard_normal((k, n, 10), np.float32)
        w = rng.standard_normal((10, 1)).astype(np.float32)
        y = x @ w + 0.1 * rng.standard_normal((k, n, 1)).astype(np.float32)
        return x, y.astype(np.float32)
    if workload == "resnet18":
        return rng.standard_normal((k, n, 3, 224, 224), np.float32), rng.integers(0, 1000, (k, n))
    if workload == "bert-base":
        b = BERT_BASE
        return (rng.standard_normal((k, n, b["seq"], b["hidden"]), np.float32),
                rng.integers(0, b["classes"], (k, n, b["seq"])))
    raise ValueError(workload)


def prepare(workload, work):
    """Builds the workload in PyTorch (seed 0) and writes, under ``work``: the initial weights
    (torch.save), the training model (loss output) and the inference model (logits) as ONNX, the
    names of the trained weights and the batches."""
    import torch
    torch.manual_seed(0)
    module = torch_models()[workload]()
    x, y = make_batches(workload)
    np.savez(os.path.join(work, f"{workload}.data.npz"), x=x, y=y)
    torch.save(module.state_dict(), os.path.join(work, f"{workload}.pt"))
    tx, ty = torch.from_numpy(x[0]), torch.from_numpy(y[0])
    path = os.path.join(work, f"{workload}.train.onnx")
    torch.onnx.export(module, (tx, ty), path, input_names=["x", "y"], output_names=["loss"], opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner.logits(x)

    # The inference model: eval mode, constants folded (torch.onnx.export's defaults).
    torch.onnx.export(Logits(module), (tx,), os.path.join(work, f"{workload}.infer.onnx"), input_names=["x"],
                      output_names=["logits"], opset_version=17)
    import onnx
    inits = {i.name for i in onnx.load(path).graph.initializer}
    params = [n for n, _ in module.named_parameters()]
    missing = [p for p in params if p not in inits]
    if missing:
        raise RuntimeError(f"{workload}: parameters not exported as initializers under their names: {missing}")
    with open(os.path.join(work, f"{workload}.weights.json"), "w") as f:
        json.dump(params, f)


def write_gemm_model(work):
    """gemm.onnx: C = MatMul(A, B) on GEMM_N x GEMM_N float inputs (onnxtrain's GEMM rate)."""
    import onnx
    from onnx import TensorProto, helper
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [GEMM_N, GEMM_N]) for n in "ABC"]
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["C"])], "gemm", io[:2], io[2:])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(work, "gemm.onnx"))


# ------------------------------------------------------------------------------------ child runs


def timed_steps(step, n, min_steps):
    """Runs step(i) up to n times (i cycles over the batches), stopping early once min_steps are
    done and TIME_BUDGET_S is spent (a loaded machine can slow a step tenfold); returns the median
    time of one step in seconds and the number of steps timed."""
    times = []
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        step(i % N_BATCHES)
        times.append(time.perf_counter() - t0)
        if len(times) >= min_steps and t0 - start > TIME_BUDGET_S:
            break
    return statistics.median(times), len(times)


def run_steps(step, loss_of, steps, min_steps, mode, save_output):
    """The common protocol of a child: loss steps (training) or a saved first output (inference),
    warm-up, timed steps."""
    result = {}
    if is_train(mode):
        result["losses"] = [loss_of(step(i)) for i in range(N_BATCHES)]
    else:
        save_output(step(0))
    for i in range(WARMUP):
        step(i % N_BATCHES)
    result["step_s"], result["steps"] = timed_steps(step, steps, min_steps)
    return result


def onnxtrain_step(spec):
    """The onnxtrain session of a child spec (workload, work, mode, threads): returns step(i), which
    runs batch i (a training step or an inference), and loss_of(outputs)."""
    import onnxtrain as ot
    w, work, mode = spec["workload"], spec["work"], spec["mode"]
    cfg = WORKLOADS[w]
    data = np.load(os.path.join(work, f"{w}.data.npz"))
    xs, ys = data["x"], data["y"]
    so = ot.SessionOptions()
    so.intra_op_num_threads = spec["threads"]
    if is_train(mode):
        p = ot.TrainingParameters()
        p.loss_output_name = "loss"
        if precision_of(mode) == "bf16":
            p.mixed_precision = "bf16"
        with open(os.path.join(work, f"{w}.weights.json")) as f:
            p.weights_to_train = set(json.load(f))
        if cfg["optimizer"] == "momentum":  # torch.optim.SGD(momentum=0.9): b = m b + g; w -= lr b
            p.training_optimizer_name = "MomentumOptimizer"
            p.optimizer_attributes = {"momentum": MOMENTUM, "lambda": 0.0}
            p.optimizer_int_attributes = {"nesterov": 0}
        elif cfg["optimizer"] == "adam":  # torch.optim.Adam: bias-corrected, eps added to sqrt(v_hat)
            p.training_optimizer_name = "AdamOptimizer"
            p.optimizer_attributes = {"alpha": ADAM["beta1"], "beta": ADAM["beta2"], "epsilon": ADAM["eps"],
                                      "lambda": 0.0}
            p.optimizer_int_attributes = {"do_bias_correction": 1}
        else:
            p.training_optimizer_name = "SGDOptimizer"
            p.optimizer_attributes = {"lambda": 0.0}
        with open(os.path.join(work, f"{w}.train.onnx"), "rb") as f:
            sess = ot.TrainingSession(f.read(), p, so)
        lr = np.array([cfg["lr"]], np.float32)
        feeds = [{"x": xs[k], "y": ys[k], p.lr_params_feed_name: lr} for k in range(N_BATCHES)]

        def step(i):
            return sess.run(["loss"], feeds[i])
    else:
        with open(os.path.join(work, f"{w}.infer.onnx"), "rb") as f:
            sess = ot.InferenceSession(f.read(), so)
        feeds = [{"x": xs[k]} for k in range(N_BATCHES)]

        def step(i):
            return sess.run(["logits"], feeds[i])

    return step, lambda out: float(np.asarray(out[0]))


def child_onnxtrain(spec):
    step, loss_of = onnxtrain_step(spec)
    return run_steps(step, loss_of, spec["steps"], spec["min_steps"], spec["mode"],
                     lambda out: np.save(spec["output_file"], np.asarray(out[0])))


def child_torch(spec):
    import torch
    torch.set_num_threads(spec["threads"])
    w, work, mode = spec["workload"], spec["work"], spec["mode"]
    cfg = WORKLOADS[w]
    module = torch_models()[w]()
    module.load_state_dict(torch.load(os.path.join(work, f"{w}.pt")))
    data = np.load(os.path.join(work, f"{w}.data.npz"))
    x, y = data["x"], data["y"]  # each access to an npz member reads it again: once
    xs = [torch.from_numpy(x[k]) for k in range(N_BATCHES)]
    ys = [torch.from_numpy(y[k]) for k in range(N_BATCHES)]
    if is_train(mode):
        params = module.parameters()
        if cfg["optimizer"] == "momentum":
            opt = torch.optim.SGD(params, lr=cfg["lr"], momentum=MOMENTUM)
        elif cfg["optimizer"] == "adam":
            opt = torch.optim.Adam(params, lr=cfg["lr"], betas=(ADAM["beta1"], ADAM["beta2"]), eps=ADAM["eps"])
        else:
            opt = torch.optim.SGD(params, lr=cfg["lr"])

        if precision_of(mode) == "bf16":
            # PyTorch's AMP recipe for bf16: forward and loss under autocast, backward and the
            # optimizer step outside; no GradScaler (bf16 has fp32's exponent range).
            def step(i):
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = module(xs[i], ys[i])
                loss.backward()
                opt.step()
                return loss
        else:
            def step(i):
                opt.zero_grad(set_to_none=True)
                loss = module(xs[i], ys[i])
                loss.backward()
                opt.step()
                return loss
        result = run_steps(step, lambda loss: float(loss.item()), spec["steps"], spec["min_steps"], mode, None)
    else:
        module.eval()  # PyTorch's fastest inference (the transformer layers' fused path)

        def step(i):
            with torch.no_grad():
                return module.logits(xs[i])
        result = run_steps(step, None, spec["steps"], spec["min_steps"], mode,
                           lambda out: np.save(spec["output_file"], out.numpy()))
    result["torch_version"] = torch.__version__
    result["torch_capability"] = next((line.split(":", 1)[1].strip() for line in torch.__config__.show().splitlines()
                                       if "CPU capability usage" in line), "?")
    return result


def sklearn_mlp_data():
    from sklearn.datasets import make_regression
    c = SKLEARN_MLP
    X, y = make_regression(c["samples"], c["features"], random_state=0)
    return X.astype(np.float32), (y / y.std()).astype(np.float32)


def timed_fits(fit, epochs):
    """Times SKLEARN_MLP_FITS fits of `epochs` (each from its fresh start: the same work); returns the
    median time and the last fit's result. One fit is ~0.1 s for onnxtrain: a single one per process
    was the noisiest number of the run."""
    times, out = [], None
    for _ in range(SKLEARN_MLP_FITS):
        t0 = time.perf_counter()
        out = fit(epochs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def child_sklearn_mlp(spec):
    """Fits of MLPRegressor(50, 10) by one framework; returns the median fit time and the training R^2
    (a sanity check: the three start from different random weights and data orders)."""
    c = SKLEARN_MLP
    epochs = spec["epochs"]
    X, y = sklearn_mlp_data()
    fw = spec["framework"]
    if fw == "sklearn":
        import warnings
        from sklearn.neural_network import MLPRegressor
        from threadpoolctl import threadpool_limits
        limits = threadpool_limits(spec["threads"])  # noqa: F841  (applies until restored)

        def fit(n_epochs):
            est = MLPRegressor(c["hidden"], solver="sgd", learning_rate_init=c["lr"], momentum=0.0, alpha=0.0,
                               batch_size=c["batch"], max_iter=n_epochs, n_iter_no_change=10**6, random_state=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ConvergenceWarning of the warm-up fit
                est.fit(X, y)
            return est
        fit(1)  # warm-up: libraries loaded, pages touched
        elapsed, est = timed_fits(fit, epochs)
        r2 = est.score(X, y)
    elif fw == "onnxtrain":
        import warnings
        import onnxtrain
        from sklearn.neural_network import MLPRegressor
        from onnxtrain.sklearn import LearningRateSGD, OrtGradientOptimizer, to_onnx
        # The ONNX model of the estimator (any fitted MLPRegressor of that shape: the optimizer
        # draws its own initial weights), with a squared-error loss summed over the batch.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shape = MLPRegressor(c["hidden"], max_iter=1, random_state=0).fit(X[:50], y[:50])
        with_loss = onnxtrain.add_loss_output(to_onnx(shape, X))
        weights = list(onnxtrain.get_train_initializer(with_loss))

        # The summed loss with rate lr / 2 per mean gradient is scikit-learn's update on its
        # loss 0.5 * mean squared error with rate lr.
        def fit(n_epochs):
            opt = OrtGradientOptimizer(with_loss, weights, learning_rate=LearningRateSGD(c["lr"] / 2,
                                       learning_rate="constant"), batch_size=c["batch"], max_iter=n_epochs,
                                       random_state=0)
            return opt.fit(X, y)
        fit(1)
        elapsed, opt = timed_fits(fit, epochs)
        r2 = 1.0 - opt.losses(X, y) / float(np.var(y))
    else:
        import torch
        torch.set_num_threads(spec["threads"])
        from torch import nn

        def fit(n_epochs):
            torch.manual_seed(0)
            sizes = (c["features"],) + c["hidden"] + (1,)
            layers = []
            for a, b in zip(sizes[:-1], sizes[1:]):
                layers += [nn.Linear(a, b), nn.ReLU()]
            model = nn.Sequential(*layers[:-1])
            opt = torch.optim.SGD(model.parameters(), lr=c["lr"])
            tx, ty = torch.from_numpy(X), torch.from_numpy(y).reshape(-1, 1)
            for _ in range(n_epochs):
                order = torch.randperm(len(tx))
                for b in range(0, len(tx), c["batch"]):
                    idx = order[b:b + c["batch"]]
                    opt.zero_grad(set_to_none=True)
                    loss = 0.5 * torch.nn.functional.mse_loss(model(tx[idx]), ty[idx])  # scikit-learn's loss
                    loss.backward()
                    opt.step()
            return model, tx, ty
        fit(1)
        elapsed, (model, tx, ty) = timed_fits(fit, epochs)
        with torch.no_grad():
            r2 = 1.0 - float(((model(tx) - ty) ** 2).mean()) / float(np.var(y))
    return {"step_s": elapsed, "epochs": epochs, "train_r2": float(r2)}


def child_gemm(spec):
    """fp32 GEMM rate of one library in this environment: a GEMM_N x GEMM_N matrix product, best of
    GEMM_REPEAT: torch.mm (OpenBLAS) or an onnxtrain InferenceSession of one MatMul node."""
    a = np.random.default_rng(0).standard_normal((2, GEMM_N, GEMM_N), np.float32)
    if spec["framework"] == "torch":
        import torch
        torch.set_num_threads(spec["threads"])
        ta, tb = torch.from_numpy(a[0]), torch.from_numpy(a[1])
        out = torch.empty(GEMM_N, GEMM_N)

        def mm():
            torch.mm(ta, tb, out=out)
    else:
        import onnxtrain as ot
        with open(os.path.join(spec["work"], "gemm.onnx"), "rb") as f:
            so = ot.SessionOptions()
            so.intra_op_num_threads = spec["threads"]
            sess = ot.InferenceSession(f.read(), so)
        feed = {"A": a[0], "B": a[1]}

        def mm():
            sess.run(["C"], feed)
    mm()
    best = min(_time_once(mm) for _ in range(GEMM_REPEAT))
    return {"gflops": 2 * GEMM_N ** 3 / best / 1e9}


def _time_once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def child_main(spec):
    kind = spec["kind"]
    if kind == "prepare":  # in a child, so that the parent stays small (no torch)
        for w in spec["workloads"]:
            prepare(w, spec["work"])
        write_gemm_model(spec["work"])
        result = {}
    elif kind == "gemm":
        result = child_gemm(spec)
    elif kind == "sklearn-mlp":
        result = child_sklearn_mlp(spec)
    elif spec["framework"] == "onnxtrain":
        result = child_onnxtrain(spec)
    else:
        result = child_torch(spec)
    result["peak_rss_mb"], result["ru_maxrss_mb"] = peak_rss_mb()
    if "onnxtrain" in sys.modules:  # which build ran: a rebuild during the run would mix two
        import onnxtrain
        so = onnxtrain._C.__file__
        result["onnxtrain_build"] = f"{so} {os.path.getsize(so)} bytes, modified {time.ctime(os.path.getmtime(so))}"
        ldd = subprocess.run(["ldd", so], capture_output=True, text=True).stdout
        result["onnxtrain_links"] = sorted({m.group(0) for m in re.finditer(r"lib(open)?blas\S*|libmkl\S*|libdnnl\S*",
                                                                             ldd)})
    result["libraries"] = mapped_libraries()
    print("RESULT " + json.dumps(result))


# ------------------------------------------------------------------------------------ the parent


def run_child(spec, env, threads, log):
    """Runs one child; returns its result dict, or {'error': ...}."""
    # numpy's OpenBLAS serves only this harness's setup in an onnxtrain child (data, the estimator
    # that gives the model its shape); onnxtrain never calls it. With OPENBLAS_NUM_THREADS=2 its
    # worker spins on sched_yield for tens of ms after the setup's last call, into the timed steps of
    # the 2-thread child alone: one thread there, from the start (no worker thread at all).
    blas = 1 if spec.get("framework") == "onnxtrain" else threads
    env = dict(env, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(blas))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        err = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        log(f"  FAILED {spec.get('framework', spec['kind'])} {spec.get('workload', '')} {spec.get('mode', '')}: {err}")
        return {"error": err, "stderr_tail": proc.stderr[-3000:]}
    result = json.loads(line[len("RESULT "):])
    result["wall_s"] = wall
    return result


def median_of(runs, key="step_s"):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else None


def max_rel_diff(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def fmt_time(s):
    if s is None:
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt(x, spec=".2f", suffix=""):
    return "—" if x is None else f"{x:{spec}}{suffix}"


def loadavg():
    """The 1-minute load average: other work on the machine (builds, fuzzers) skews the 2-thread rows."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def foreign_build_warning(builds):
    """A warning when a run imported an onnxtrain other than this checkout's build (an installed
    copy ahead of it on sys.path measures another revision than git_revision() names); else ""."""
    ours = os.path.join(os.path.dirname(HERE), "build", "python", "onnxtrain")
    if not os.path.isdir(ours):
        return ""
    foreign = sorted({b.split(",")[0].split(" ")[0] for b in builds
                      if not os.path.realpath(b.split(",")[0].split(" ")[0]).startswith(os.path.realpath(ours))})
    return (f" — WARNING: not this checkout's build ({', '.join(foreign)}); PYTHONPATH={os.path.dirname(ours)} "
            "runs it") if foreign else ""


def git_revision():
    try:
        out = subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"], capture_output=True, text=True)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few steps, one round (development)")
    ap.add_argument("--workloads", default="mlp,cnn,bert,linreg,sklearn-mlp,resnet18,bert-base")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=None, help="order-alternating rounds (default 3, --quick 1)")
    ap.add_argument("--no-inference", action="store_true", help="training only")
    ap.add_argument("--precision", default="fp32",
                    help="fp32 (default), bf16 or fp32,bf16: bf16 adds mixed-precision training of mlp, cnn, bert "
                         "(onnxtrain mixed_precision='bf16' vs torch.autocast bf16) beside their fp32 training")
    ap.add_argument("--out", default=os.path.join(HERE, "side_by_side.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child_main(json.loads(a.child))

    started = time.perf_counter()
    load_start = loadavg()
    base_env = dict(os.environ)  # before anything here could change it
    cpu = cpu_info()
    envs = environments(base_env, cpu)
    workloads = [w for w in a.workloads.split(",") if w]
    unknown = [w for w in workloads if w not in WORKLOADS and w != "sklearn-mlp"]
    if unknown:
        ap.error(f"unknown workloads {unknown}")
    threads_list = [int(t) for t in a.threads.split(",")]
    rounds = a.rounds or (1 if a.quick else 3)
    precisions = [p for p in a.precision.split(",") if p]
    if not precisions or any(p not in ("fp32", "bf16") for p in precisions):
        ap.error(f"--precision: fp32, bf16 or fp32,bf16, not {a.precision!r}")
    modes = {w: workload_modes(w, precisions, not a.no_inference) for w in workloads}
    skipped = [w for w in workloads if not modes[w]]
    workloads = [w for w in workloads if modes[w]]
    if not workloads:
        ap.error(f"nothing to run: no bf16 workload among {skipped} (bf16: {', '.join(BF16_WORKLOADS)})")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    work = tempfile.mkdtemp(prefix="side_by_side.")
    if skipped:
        log(f"[side_by_side] --precision {a.precision}: skipping {', '.join(skipped)} (fp32 only)")
    try:
        log(f"[side_by_side] exporting the models to {work}")
        prep = run_child({"kind": "prepare", "workloads": [w for w in workloads if w in WORKLOADS], "work": work},
                         envs["default"], 1, log)
        if "error" in prep:
            sys.exit(f"preparing the models failed:\n{prep['stderr_tail']}")
        results = []   # one dict per child run
        gemm = {}      # threads -> best GFLOP/s of any library, environment and round
        gemm_runs = []
        for r in range(rounds):
            for t in threads_list:
                for fw, env_name in (("torch", "default"), ("torch", "best"), ("torch", "best_spin"),
                                     ("onnxtrain", "default")):
                    res = run_child({"kind": "gemm", "framework": fw, "threads": t, "work": work}, envs[env_name], t,
                                    log)
                    gemm_runs.append(dict(res, framework=fw, env=env_name, threads=t, round=r))
                    if "gflops" in res:
                        gemm[t] = max(gemm.get(t, 0.0), res["gflops"])
            # Round 0: onnxtrain first; round 1: PyTorch first (and so on).
            frameworks = [("onnxtrain", "default"), ("torch", "default"), ("torch", "best"), ("torch", "best_spin")]
            if r % 2:
                frameworks.reverse()
            for w in workloads:
                # The thread counts alternate too: with 1 thread always first, a drift within a
                # round (another tenant, the clock) landed on the 2-thread rows alone.
                for t in (threads_list if r % 2 == 0 else threads_list[::-1]):
                    if w == "sklearn-mlp":
                        order = [("onnxtrain", "default"), ("sklearn", "default"), ("sklearn", "best"),
                                 ("torch", "default"), ("torch", "best"), ("torch", "best_spin")]
                        if r % 2:
                            order.reverse()
                        for fw, env_name in order:
                            spec = {"kind": "sklearn-mlp", "framework": fw, "threads": t,
                                    "epochs": SKLEARN_MLP["quick_epochs" if a.quick else "epochs"]}
                            res = run_child(spec, envs[env_name], t, log)
                            results.append(dict(res, workload=w, mode="fit", precision="fp32", framework=fw,
                                                env=env_name, threads=t, round=r))
                            log(f"[side_by_side] round {r + 1} {w} fit {fw}/{env_name} {t}t: "
                                f"{fmt_time(res.get('step_s'))}")
                        continue
                    for mode in modes[w]:
                        steps = WORKLOADS[w]["quick" if a.quick else "steps"][0 if is_train(mode) else 1]
                        for fw, env_name in frameworks:
                            out_file = os.path.join(work, f"{w}.{mode}.{fw}.{env_name}.{t}.{r}.npy")
                            spec = {"kind": "workload", "framework": fw, "workload": w, "mode": mode, "threads": t,
                                    "steps": steps,
                                    "min_steps": min(steps, WORKLOADS[w].get("min_steps", MIN_TIMED_STEPS)),
                                    "work": work,
                                    "output_file": out_file}
                            res = run_child(spec, envs[env_name], t, log)
                            if mode == "infer" and os.path.exists(out_file):
                                res["output_file"] = out_file
                            results.append(dict(res, workload=w, mode=mode, precision=precision_of(mode),
                                                framework=fw, env=env_name, threads=t, round=r))
                            log(f"[side_by_side] round {r + 1} {w} {mode} {fw}/{env_name} {t}t: "
                                f"{fmt_time(res.get('step_s'))}")
        report = summarize(results, gemm, cpu, workloads, threads_list, modes, rounds, a.quick,
                           SKLEARN_MLP["quick_epochs" if a.quick else "epochs"])
        report["header"]["precisions"] = precisions
        report["gemm_runs"] = gemm_runs
        report["header"]["loadavg"] = {"start": load_start, "end": loadavg()}
        report["markdown"] = markdown(report["header"], report["rows"], report["goals"])
        report["elapsed_s"] = time.perf_counter() - started
        for res in results:
            res.pop("output_file", None)
        report["runs"] = results
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(report["markdown"])
    print(f"\nfull results: {a.out}; elapsed {report['elapsed_s'] / 60:.1f} min")


def summarize(results, gemm, cpu, workloads, threads_list, modes, rounds, quick, epochs):
    """Per (workload, mode, threads): medians, ratios, RSS, GFLOP/s, checks; then the goals; and
    the markdown text. modes: workload -> its modes."""

    def runs(w, mode, fw, env, t):
        return [x for x in results if x["workload"] == w and x["mode"] == mode and x["framework"] == fw
                and x["env"] == env and x["threads"] == t and "error" not in x]

    def first(w, mode, fw, env, t):
        rs = runs(w, mode, fw, env, t)
        return rs[0] if rs else None

    rows = []
    for w in workloads:
        for mode in modes[w]:
            for t in threads_list:
                row = {"workload": w, "mode": mode, "precision": precision_of(mode), "threads": t}
                torch_t = {env: median_of(runs(w, mode, "torch", env, t)) for env in ("default", "best", "best_spin")}
                row["torch_best_passive_s"], row["torch_best_spin_s"] = torch_t["best"], torch_t["best_spin"]
                bests = [v for v in (torch_t["best"], torch_t["best_spin"]) if v is not None]
                row["torch_default_s"], row["torch_best_s"] = torch_t["default"], min(bests) if bests else None
                ref_env = min((e for e in torch_t if torch_t[e] is not None), key=lambda e: torch_t[e], default=None)
                row["torch_ref_env"] = ref_env
                row["torch_ref_s"] = torch_t.get(ref_env) if ref_env else None
                ours_runs = runs(w, mode, "onnxtrain", "default", t)
                row["onnxtrain_s"] = median_of(ours_runs)
                row["onnxtrain_rounds_s"] = [x["step_s"] for x in ours_runs if "step_s" in x]
                row["ratio"] = (row["onnxtrain_s"] / row["torch_ref_s"]
                                if row["onnxtrain_s"] and row["torch_ref_s"] else None)
                ours = first(w, mode, "onnxtrain", "default", t)
                ref = first(w, mode, "torch", ref_env, t) if ref_env else None
                row["onnxtrain_rss_mb"] = max((x["peak_rss_mb"] for x in runs(w, mode, "onnxtrain", "default", t)),
                                              default=None)
                row["torch_rss_mb"] = (max((x["peak_rss_mb"] for x in runs(w, mode, "torch", ref_env, t)), default=None)
                                       if ref_env else None)
                row["errors"] = sorted({x["error"] for x in results if x["workload"] == w and x["mode"] == mode
                                        and x["threads"] == t and "error" in x})
                if w == "sklearn-mlp":
                    sk = {env: median_of(runs(w, mode, "sklearn", env, t)) for env in ("default", "best")}
                    row["sklearn_default_s"], row["sklearn_best_s"] = sk["default"], sk["best"]
                    sk_vals = [v for v in sk.values() if v is not None]
                    row["sklearn_ref_s"] = min(sk_vals) if sk_vals else None
                    row["speedup_vs_sklearn"] = (row["sklearn_ref_s"] / row["onnxtrain_s"]
                                                 if row["sklearn_ref_s"] and row["onnxtrain_s"] else None)
                    row["train_r2"] = {fw: median_of(runs(w, mode, fw, env, t), "train_r2")
                                       for fw, env in (("onnxtrain", "default"), ("sklearn", "best"),
                                                       ("torch", "best"))}
                    rows.append(row)
                    continue
                flops = step_flops(w, mode)
                row["flops_per_step"] = flops
                peak = gemm.get(t)
                row["gemm_peak_gflops"] = peak
                for key in ("onnxtrain", "torch_ref"):
                    s = row[f"{key}_s"]
                    row[f"{key}_gflops"] = flops / s / 1e9 if s else None
                    # bf16 rows: no share of the peak, which is fp32's.
                    row[f"{key}_peak_frac"] = (flops / s / 1e9 / peak if s and peak and row["precision"] == "fp32"
                                               else None)
                if mode == "train-bf16":
                    # Each framework's bf16 losses against its own fp32 losses (PyTorch's from the
                    # same environment as its bf16 reference, else any).
                    ours32 = first(w, "train", "onnxtrain", "default", t)
                    ref32 = (first(w, "train", "torch", ref_env, t) if ref_env else None) or next(
                        (first(w, "train", "torch", e, t) for e in ("default", "best", "best_spin")
                         if first(w, "train", "torch", e, t)), None)
                    if ours and ours32:
                        row["max_rel_diff_onnxtrain_vs_fp32"] = max_rel_diff(ours["losses"], ours32["losses"])
                    if ref and ref32:
                        row["max_rel_diff_torch_vs_fp32"] = max_rel_diff(ref["losses"], ref32["losses"])
                    if ours and ref:
                        row["max_rel_diff_onnxtrain_vs_torch"] = max_rel_diff(ours["losses"], ref["losses"])
                        row["losses_onnxtrain"], row["losses_torch"] = ours["losses"], ref["losses"]
                    if "max_rel_diff_onnxtrain_vs_fp32" in row and "max_rel_diff_torch_vs_fp32" in row:
                        row["max_rel_diff"] = max(row["max_rel_diff_onnxtrain_vs_fp32"],
                                                  row["max_rel_diff_torch_vs_fp32"])
                        row["check"] = "PASS" if row["max_rel_diff"] <= BF16_LOSS_RTOL else "FAIL"
                # Agreement: the first 10 losses (training) or the first batch's output (inference).
                elif ours and ref:
                    if mode == "train":
                        k = WORKLOADS[w].get("loss_check", N_BATCHES)
                        row["max_rel_diff"] = max_rel_diff(ours["losses"][:k], ref["losses"][:k])
                        row["losses_onnxtrain"], row["losses_torch"] = ours["losses"], ref["losses"]
                    elif "output_file" in ours and "output_file" in ref:
                        row["max_rel_diff"] = max_rel_diff(np.load(ours["output_file"]), np.load(ref["output_file"]))
                    if "max_rel_diff" in row:
                        row["check"] = "PASS" if row["max_rel_diff"] <= LOSS_RTOL else "FAIL"
                rows.append(row)

    goals = compute_goals(rows, threads_list)
    libs = {}
    for fw in ("onnxtrain", "torch", "sklearn"):
        found = sorted({lib for x in results if x["framework"] == fw and "libraries" in x for lib in x["libraries"]})
        if found:
            libs[fw] = found
    builds = sorted({x["onnxtrain_build"] for x in results if "onnxtrain_build" in x})
    links = sorted({lib for x in results for lib in x.get("onnxtrain_links", [])})
    torch_run = next((x for x in results if x["framework"] == "torch" and "torch_version" in x), {})
    capabilities = sorted({f"{x['env']}: {x['torch_capability']}" for x in results
                           if x["framework"] == "torch" and "torch_capability" in x})
    header = {"cpu": cpu, "torch_version": torch_run.get("torch_version"), "torch_capability": capabilities,
              "libraries": libs, "gemm_peak_gflops": gemm, "onnxtrain_builds": builds,
              "onnxtrain_links": links, "onnxtrain_revision": git_revision(),
              "python": sys.executable, "rounds": rounds, "quick": quick, "sklearn_mlp_epochs": epochs}
    return {"header": header, "rows": rows, "goals": goals}


def compute_goals(rows, threads_list):
    """The performance issue's goals, as measured values beside their targets (never pass/fail)."""
    goals = []

    def add(name, target, value, met, unit=""):
        goals.append({"goal": name, "target": target, "measured": value, "met": met, "unit": unit})

    def get(w, mode, t):
        return next((r for r in rows if r["workload"] == w and r["mode"] == mode and r["threads"] == t), None)

    for r in rows:
        if r["mode"] in ("train", "infer") and r.get("ratio") is not None:
            what = "training step" if r["mode"] == "train" else "inference"
            # What the target asks of the analytic FLOPs: PyTorch's share of the GEMM peak / 0.70
            # (above 100 %: beyond this machine's measured fp32 product rate).
            frac = r.get("torch_ref_peak_frac")
            need = (f" (0.70x needs {frac / 0.70 * 100:.0f}% of the GEMM peak; PyTorch's step runs at "
                    f"{frac * 100:.0f}%)" if frac else "")
            add(f"{r['workload']} {what}, {r['threads']}t: onnxtrain / PyTorch best{need}", "<= 0.70", r["ratio"],
                r["ratio"] <= 0.70, "x")
    if len(threads_list) > 1:
        lo, hi = min(threads_list), max(threads_list)
        for r in rows:
            if r["threads"] != hi or r["onnxtrain_s"] is None:
                continue
            one = get(r["workload"], r["mode"], lo)
            if one and one["onnxtrain_s"]:
                v = r["onnxtrain_s"] / one["onnxtrain_s"]
                # Above 1.00, "slower" needs every round at hi threads slower than every round at lo
                # (rounds alternate, so by chance 1 in C(2n, n) for identical code: 1/20 at 3 rounds).
                # Rows whose onnxtrain step has no parallel work at either count (linreg's 7 µs step,
                # the sklearn fit's 15-sample batches) run the same code at both, and their median
                # ratio lands on either side of 1.00 by the machine's noise.
                slow_hi, slow_lo = r.get("onnxtrain_rounds_s", []), one.get("onnxtrain_rounds_s", [])
                separated = bool(slow_hi and slow_lo) and min(slow_hi) > max(slow_lo)
                span = (f"; rounds {hi}t {fmt_time(min(slow_hi))}-{fmt_time(max(slow_hi))}, "
                        f"{lo}t {fmt_time(min(slow_lo))}-{fmt_time(max(slow_lo))}" if slow_hi and slow_lo else "")
                verdict = "" if v <= 1.0 else (": slower in every round" if separated else ": within the rounds' spread")
                add(f"{r['workload']} {r['mode']}: onnxtrain {hi}t / {lo}t time{span}{verdict}",
                    "<= 1.00, or rounds overlapping", v, v <= 1.0 or not separated, "x")
    for r in rows:
        if r["workload"] == "linreg" and r["mode"] == "train" and r["onnxtrain_s"]:
            add(f"linreg training step, {r['threads']}t (PyTorch best {fmt_time(r['torch_ref_s'])})",
                "report (µs)", r["onnxtrain_s"] * 1e6, None, "µs")
        if r["workload"] == "mlp" and r["mode"] == "train" and r.get("onnxtrain_peak_frac") is not None:
            v = r["onnxtrain_peak_frac"]
            add(f"mlp training, {r['threads']}t: share of the GEMM peak", ">= 70%", v * 100, v >= 0.70, "%")
    # Peak RSS: the largest ratio of each workload over its modes and thread counts.
    for w in dict.fromkeys(r["workload"] for r in rows):
        ratios = [(r["onnxtrain_rss_mb"] / r["torch_rss_mb"], r) for r in rows
                  if r["workload"] == w and r["onnxtrain_rss_mb"] and r["torch_rss_mb"]]
        if ratios:
            v, r = max(ratios, key=lambda x: x[0])
            add(f"{w}: peak RSS onnxtrain / PyTorch, largest ({r['mode']}, {r['threads']}t: "
                f"{r['onnxtrain_rss_mb']:.0f} / {r['torch_rss_mb']:.0f} MB)", "<= 1.00", v, v <= 1.0, "x")
    for r in rows:
        if r["workload"] == "sklearn-mlp" and r.get("speedup_vs_sklearn"):
            v = r["speedup_vs_sklearn"]
            add(f"sklearn-mlp fit, {r['threads']}t: scikit-learn time / onnxtrain time", ">= 3.0", v, v >= 3.0, "x")
    # bf16 mixed precision: the speed-up over our own fp32 step, and the ratio to PyTorch's autocast.
    for r in rows:
        if r["mode"] != "train-bf16":
            continue
        fp32 = get(r["workload"], "train", r["threads"])
        if r["onnxtrain_s"] and fp32 and fp32["onnxtrain_s"]:
            v = r["onnxtrain_s"] / fp32["onnxtrain_s"]
            goal = BF16_SPEEDUP_GOAL.get(r["workload"])
            add(f"{r['workload']} training, {r['threads']}t: onnxtrain bf16 / onnxtrain fp32 step time "
                f"({fmt_time(r['onnxtrain_s'])} / {fmt_time(fp32['onnxtrain_s'])}: {1 / v:.2f}x faster)",
                f"<= 1/{goal:g} (>= {goal:g}x faster)" if goal else "report", v,
                v <= 1.0 / goal if goal else None, "x")
        if r.get("ratio") is not None:
            add(f"{r['workload']} training bf16, {r['threads']}t: onnxtrain bf16 / PyTorch autocast bf16 best",
                "report", r["ratio"], None, "x")
    return goals


def markdown(header, rows, goals):
    cpu = header["cpu"]
    load = header.get("loadavg")
    out = [f"**Machine**: {cpu['model']}, {cpu['cores']} cores, ISA: {' '.join(cpu['isa']) or '-'}; "
           f"torch {header['torch_version']} ({'; '.join(header['torch_capability'])}); "
           f"onnxtrain {header['onnxtrain_revision']}"
           + (f"; load average {load['start']:.2f} at the start, {load['end']:.2f} at the end" if load else ""),
           "",
           "**onnxtrain build**: " + ("; ".join(header["onnxtrain_builds"]) or "?")
           + (" — WARNING: the build changed during the run" if len(header["onnxtrain_builds"]) > 1 else "")
           + foreign_build_warning(header["onnxtrain_builds"]),
           "",
           "**Libraries mapped** (/proc/self/maps; numpy maps OpenBLAS in every process): "
           + "; ".join(f"{fw}: {', '.join(libs)}" for fw, libs in header["libraries"].items())
           + f"; onnxtrain's extension links {', '.join(header['onnxtrain_links']) or 'no BLAS'}",
           "",
           "**fp32 GEMM peak** (2048² product, best of torch.mm and onnxtrain MatMul over environments and rounds): "
           + ", ".join(f"{t}t {g:.1f} GFLOP/s" for t, g in sorted(header["gemm_peak_gflops"].items())),
           ""]

    def gflops(r, key):
        if r.get(key + "_peak_frac") is not None:
            return f"{r[key + '_gflops']:.1f} ({r[key + '_peak_frac'] * 100:.0f}%)"
        return fmt(r.get(key + "_gflops"), ".1f")

    step_rows = [r for r in rows if r["workload"] != "sklearn-mlp"]
    if step_rows:
        out += [f"Median step time over {header['rounds']} round(s){' (--quick)' if header['quick'] else ''}; "
                "ratio = onnxtrain / PyTorch's best environment (lower: onnxtrain faster); GFLOP/s: analytic FLOPs "
                "per step / step time (% of the GEMM peak at that thread count); check: first 10 losses (training) "
                f"or the first batch's output (inference) within {LOSS_RTOL:g} relative."
                + (" train-bf16 rows: onnxtrain mixed_precision='bf16' against PyTorch under "
                   "torch.autocast('cpu', bfloat16) (its best environment); GFLOP/s without the % (the peak is "
                   "fp32's); check: each framework's first 10 bf16 losses against its own fp32 losses within "
                   f"{BF16_LOSS_RTOL:g} relative, the larger of the two differences shown."
                   if any(r["mode"] == "train-bf16" for r in rows) else ""),
                "",
                "| workload | mode | thr | onnxtrain | PyTorch default | PyTorch best | ratio | GFLOP/s onnxtrain | "
                "GFLOP/s PyTorch | peak RSS MB onnxtrain / PyTorch | max rel diff | check |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in step_rows:
        note = f" ({'; '.join(r['errors'])})" if r["errors"] else ""
        out.append(f"| {r['workload']} | {r['mode']} | {r['threads']} | {fmt_time(r['onnxtrain_s'])}{note} | "
                   f"{fmt_time(r['torch_default_s'])} | {fmt_time(r['torch_best_s'])} | {fmt(r['ratio'])} | "
                   f"{gflops(r, 'onnxtrain')} | {gflops(r, 'torch_ref')} | {fmt(r['onnxtrain_rss_mb'], '.0f')} / "
                   f"{fmt(r['torch_rss_mb'], '.0f')} | {fmt(r.get('max_rel_diff'), '.1e')} | {r.get('check', '—')} |")
    sk_rows = [r for r in rows if r["workload"] == "sklearn-mlp"]
    if sk_rows:
        out += ["", "sklearn-mlp: MLPRegressor(50, 10), make_regression(1000, 100), batch 15, "
                f"{header['sklearn_mlp_epochs']} epochs plain SGD: time of the whole fit (train R² in brackets)", "",
                "| thr | onnxtrain | scikit-learn default | scikit-learn best | PyTorch default | PyTorch best | "
                "speed-up vs scikit-learn | peak RSS MB onnxtrain / PyTorch |",
                "|---|---|---|---|---|---|---|---|"]
        for r in sk_rows:
            r2 = r["train_r2"]
            note = f" ({'; '.join(r['errors'])})" if r["errors"] else ""
            out.append(f"| {r['threads']} | {fmt_time(r['onnxtrain_s'])} ({fmt(r2.get('onnxtrain'), '.3f')}){note} | "
                       f"{fmt_time(r['sklearn_default_s'])} | {fmt_time(r['sklearn_best_s'])} "
                       f"({fmt(r2.get('sklearn'), '.3f')}) | {fmt_time(r['torch_default_s'])} | "
                       f"{fmt_time(r['torch_best_s'])} ({fmt(r2.get('torch'), '.3f')}) | "
                       f"{fmt(r['speedup_vs_sklearn'], '.2f', 'x')} | {fmt(r['onnxtrain_rss_mb'], '.0f')} / "
                       f"{fmt(r['torch_rss_mb'], '.0f')} |")
    if goals:
        out += ["", "Goals (measurements beside their targets, never pass/fail):", "",
                "| goal | target | measured | within target |",
                "|---|---|---|---|"]
        for g in goals:
            met = "—" if g["met"] is None else ("yes" if g["met"] else "no")
            out.append(f"| {g['goal']} | {g['target']} | {g['measured']:.2f}{g['unit']} | {met} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
