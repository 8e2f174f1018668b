"""PyTorch models used as golden references: each returns (module, example args, input names).

The loss is computed inside the module so that torch.onnx.export puts it in the graph.
"""
import io

import torch
import torch.nn.functional as F


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 32)
        self.fc2 = torch.nn.Linear(32, 16)
        self.fc3 = torch.nn.Linear(16, 4)

    def forward(self, x, y):
        h = torch.relu(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return F.cross_entropy(self.fc3(h), y)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)  # BN follows: a bias would get only round-off gradient
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=4, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x, y):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = F.max_pool2d(torch.relu(self.bn2(self.conv2(h))), 2)
        return F.cross_entropy(self.fc(torch.flatten(h, 1)), y)


class Transformer(torch.nn.Module):
    def __init__(self, vocab=50, d=16, heads=2, classes=3):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.layer = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=32, dropout=0.0,
                                                      activation="gelu", batch_first=True)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, tokens, y):
        h = self.layer(self.emb(tokens))
        return F.cross_entropy(self.head(h.mean(dim=1)), y)


class LSTMModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 12, batch_first=True)
        self.fc = torch.nn.Linear(12, 3)

    def forward(self, x, y):
        out, _ = self.lstm(x)
        return ((self.fc(out[:, -1, :]) - y) ** 2).mean()


def make(name, seed=0):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    if name == "mlp":
        return MLP(), (torch.randn(8, 10, generator=g), torch.randint(0, 4, (8,), generator=g)), ["x", "y"]
    if name == "cnn":
        return CNN(), (torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)), ["x", "y"]
    if name in ("transformer", "transformer_dynamic"):
        return (Transformer(), (torch.randint(0, 50, (4, 7), generator=g), torch.randint(0, 3, (4,), generator=g)),
                ["tokens", "y"])
    if name == "lstm":
        return LSTMModel(), (torch.randn(4, 5, 6, generator=g), torch.randn(4, 3, generator=g)), ["x", "y"]
    raise KeyError(name)


def dynamic_axes(name, input_names):
    """Batch and sequence axes of the first input left symbolic for the "*_dynamic" variants (the
    exported attention then slices and reshapes by shapes computed at run time)."""
    return {input_names[0]: {0: "batch", 1: "seq"}} if name.endswith("_dynamic") else None


def export(module, args, input_names, dynamic_axes=None):
    """Exports with the loss inside the graph: opset 17, no constant folding, training mode."""
    f = io.BytesIO()
    module.train()
    torch.onnx.export(module, args, f, opset_version=17, do_constant_folding=False, input_names=input_names,
                      output_names=["loss"], training=torch.onnx.TrainingMode.TRAINING, export_params=True,
                      dynamic_axes=dynamic_axes)
    return f.getvalue()
