"""Time to build the gradient graph of a BERT-base-sized encoder (12 layers, d=768, 12 heads,
FFN 3072, vocabulary 30522), exported by torch.onnx.export with the loss inside the graph.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/bench_autodiff_build.py [--layers 12] [--d 768]
"""
import argparse
import io
import time

import onnx
import torch
import torch.nn.functional as F

import onnxtrain as ot


class Encoder(torch.nn.Module):
    def __init__(self, vocab, d, heads, ff, layers):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(512, d)
        self.norm = torch.nn.LayerNorm(d)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation="gelu", batch_first=True)
            for _ in range(layers))
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens, labels):
        pos = torch.arange(tokens.shape[1]).unsqueeze(0)
        h = self.norm(self.emb(tokens) + self.pos(pos))
        for layer in self.layers:
            h = layer(h)
        logits = self.head(h)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    heads = max(1, a.d // 64)
    model = Encoder(30522, a.d, heads, 4 * a.d, a.layers).train()
    tokens = torch.randint(0, 30522, (2, 16))
    labels = torch.randint(0, 30522, (2, 16))
    f = io.BytesIO()
    torch.onnx.export(model, (tokens, labels), f, opset_version=17, do_constant_folding=False,
                      input_names=["tokens", "labels"], output_names=["loss"],
                      dynamic_axes={"tokens": {0: "batch", 1: "seq"}, "labels": {0: "batch", 1: "seq"}},
                      training=torch.onnx.TrainingMode.TRAINING)
    data = f.getvalue()
    m = onnx.load_from_string(data)
    params = [n for n, _ in model.named_parameters()]
    print(f"model: {len(m.graph.node)} nodes, {len(params)} parameters, {len(data) / 1e6:.0f} MB")
    times = []
    for _ in range(a.repeat):
        b = ot.GradientGraphBuilder(data, {"loss"}, set(params), "loss")
        t0 = time.perf_counter()
        b.build()
        times.append(time.perf_counter() - t0)
    g = onnx.load_from_string(b.get_model())
    times.sort()
    print(f"gradient graph: {len(g.graph.node)} nodes; build() median {times[len(times) // 2]:.3f} s "
          f"(min {times[0]:.3f} s over {a.repeat} runs)")


if __name__ == "__main__":
    main()
