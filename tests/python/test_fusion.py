"""The GELU fusion of the training graph (src/train/fusion.h): torch.onnx's exported exact GELU
(Div by sqrt(2), Erf, Add 1, Mul x, Mul 0.5) trains as one com.onnxtrain.Gelu node with one
GeluGrad in the backward pass; the trajectory still tracks PyTorch, eval (the user's unfused model)
gives the training forward's bits, and patterns whose intermediates are read elsewhere stay unfused."""
import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot


class GeluMLP(torch.nn.Module):
    def __init__(self, functional):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.fc3 = torch.nn.Linear(32, 3)
        self.act = torch.nn.GELU()
        self.functional = functional

    def forward(self, x, label):
        h = self.act(self.fc1(x))
        h = torch.nn.functional.gelu(self.fc2(h)) if self.functional else self.act(self.fc2(h))
        return torch.nn.functional.cross_entropy(self.fc3(h), label)


def export(module, x, y):
    import io
    f = io.BytesIO()
    torch.onnx.export(copy.deepcopy(module), (x, y), f, input_names=["x", "label"], output_names=["loss"],
                      opset_version=14, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    return f.getvalue()


def adam_params(module, graph_path):
    """Adam on every parameter of `module`, loss "loss", the training graph written to graph_path."""
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    p.weights_to_train = {n for n, _ in module.named_parameters()}
    p.model_with_training_graph_path = str(graph_path)
    return p


def train_like_torch(sess, module, batches, names, steps, lr=1e-2, unchecked=()):
    """`steps` Adam steps of the session and of the module on the same batches (cycled): every loss
    and, at the end, every weight (but those named in `unchecked`) within 1e-5 relative. Returns
    the session's state."""
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    worst = 0.0
    for step in range(steps):
        batch = batches[step % len(batches)]
        feeds = dict(zip(names, (b.numpy() for b in batch)), Learning_Rate=np.array([lr], np.float32))
        (loss,) = sess.run(["loss"], feeds)
        opt.zero_grad()
        tl = module(*batch)
        tl.backward()
        opt.step()
        worst = max(worst, abs(float(loss) - float(tl)) / abs(float(tl)))
    assert worst < 1e-5, worst
    state = sess.get_state()
    for n, t in module.named_parameters():
        if n in unchecked:
            continue
        err = np.abs(state[n] - t.detach().numpy()).max() / np.abs(t.detach().numpy()).max()
        assert err < 1e-5, (n, err)
    return state


def classifier_session(tmp_path, make_module, seed, nbatches, op, count, config=None):
    """A seeded classifier (inputs [16, 12], 3 classes), `nbatches` random batches, its export
    (checked to hold `count` nodes of type `op`), Adam parameters, the TrainingSession, and the
    training graph's (domain, op_type) list. `config`: SessionOptions config entries."""
    torch.manual_seed(seed)
    module = make_module()
    g = torch.Generator().manual_seed(seed + 1)
    batches = [(torch.randn(16, 12, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(nbatches)]
    data = export(module, *batches[0])
    assert sum(n.op_type == op for n in onnx.load_from_string(data).graph.node) == count
    p = adam_params(module, tmp_path / "training.onnx")
    so = ot.SessionOptions()
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    sess = ot.TrainingSession(data, p, so)
    ops = [(n.domain, n.op_type) for n in onnx.load(str(tmp_path / "training.onnx")).graph.node]
    return module, batches, data, p, sess, ops


@pytest.mark.parametrize("functional", [False, True], ids=["nn.GELU", "F.gelu"])
def test_fused_gelu_trains_like_torch(tmp_path, functional):
    module, batches, data, p, sess, ops = classifier_session(tmp_path, lambda: GeluMLP(functional), 0, 4, "Erf", 2)
    assert ops.count(("com.onnxtrain", "Gelu")) == 2 and ops.count(("com.onnxtrain", "GeluGrad")) == 2, ops
    assert ("", "Erf") not in ops
    state = train_like_torch(sess, module, batches, ("x", "label"), 30)
    # eval runs the user's (unfused) model: the same loss bits as the training forward before a step
    x, y = batches[0]
    (ev,) = sess.eval(["loss"], {"x": x.numpy(), "label": y.numpy()})
    p2 = ot.TrainingParameters()
    p2.loss_output_name, p2.weights_to_train = "loss", p.weights_to_train
    s2 = ot.TrainingSession(data, p2)
    s2.load_state({k: state[k] for k in p.weights_to_train})  # an SGD session: no Adam moments
    (tr,) = s2.run(["loss"], {"x": x.numpy(), "label": y.numpy(), "Learning_Rate": np.array([0.0], np.float32)})
    assert np.asarray(ev).tobytes() == np.asarray(tr).tobytes()


def gelu_graph(extra_reader):
    """y = gelu(x) as exported; with `extra_reader`, the Erf output is also an output of the model."""
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"]), helper.make_node("Mul", ["y", "W"], ["z"]),
             helper.make_node("ReduceSum", ["z"], ["loss"], keepdims=0)]
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    outs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    if extra_reader:
        outs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [4, 5]))
    W = numpy_helper.from_array(np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5), "W")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])], outs,
                          consts + [W])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def gradient_session(model, weights, graph_path):
    """A TrainingSession (SGD) of `model` returning the gradients of `weights` as graph outputs,
    its training graph written to `graph_path`."""
    p = ot.TrainingParameters()
    p.loss_output_name, p.weights_to_train, p.set_gradients_as_graph_outputs = "loss", set(weights), True
    p.model_with_training_graph_path = str(graph_path)
    return ot.TrainingSession(model, p)


@pytest.mark.parametrize("extra_reader", [False, True], ids=["fused", "erf_read_elsewhere"])
def test_gelu_gradient_fused_or_not(tmp_path, extra_reader):
    """The weight's gradient through the GELU against float64 numpy; an Erf output the model also
    returns keeps the pattern unfused."""
    sess = gradient_session(gelu_graph(extra_reader), {"W"}, tmp_path / "t.onnx")
    x = np.linspace(-3, 3, 20, dtype=np.float32).reshape(4, 5)
    (gw,) = sess.run(["W_grad"], {"x": x, "Learning_Rate": np.array([0.0], np.float32)})
    from math import erf
    xd = x.astype(np.float64)
    ref = 0.5 * xd * (1 + np.vectorize(erf)(xd / np.sqrt(2)))
    np.testing.assert_allclose(gw, ref, rtol=1e-6, atol=1e-6)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "t.onnx")).graph.node]
    assert ("Gelu" in ops) != extra_reader and ("Erf" in ops) == extra_reader, ops


class LinearOnSequences(torch.nn.Module):
    """nn.Linear on [batch, seq, features] (torch.onnx writes MatMul(x, Transpose(W)) + Add), a
    GELU between, and an embedding whose table is also the output projection (weight tying: the
    table is read by Gather and, transposed, by the last MatMul)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 8)

    def forward(self, ids, label):
        h = self.fc2(torch.nn.functional.gelu(self.fc1(self.emb(ids))))
        logits = h @ self.emb.weight.t()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 11), label.reshape(-1))


def test_transposed_weights_fused_into_their_products(tmp_path):
    """MatMul(X, Transpose(W)) trains as com.onnxtrain.FusedMatMul(X, W, transB=1): no Transpose of a
    weight or of its gradient left in the training graph, and the trajectory tracks PyTorch (Adam,
    20 steps, weights within 1e-5)."""
    torch.manual_seed(3)
    module = LinearOnSequences()
    g = torch.Generator().manual_seed(4)
    batches = [(torch.randint(0, 11, (4, 6), generator=g), torch.randint(0, 11, (4, 6), generator=g)) for _ in range(3)]
    import io
    f = io.BytesIO()
    torch.onnx.export(copy.deepcopy(module), batches[0], f, input_names=["ids", "label"], output_names=["loss"],
                      opset_version=14, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    data = f.getvalue()
    exported = onnx.load_from_string(data).graph.node
    weights = {n for n, _ in module.named_parameters()}
    transposed = [n.input[0] for n in exported if n.op_type == "Transpose"]
    assert sorted(transposed) == ["emb.weight", "fc1.weight", "fc2.weight"], transposed
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    p.weights_to_train = weights
    p.model_with_training_graph_path = str(tmp_path / "training.onnx")
    sess = ot.TrainingSession(data, p)
    nodes = onnx.load(str(tmp_path / "training.onnx")).graph.node
    fused = [n for n in nodes if (n.domain, n.op_type) == ("com.onnxtrain", "FusedMatMul") and n.input[1] in weights]
    assert sorted(n.input[1] for n in fused) == ["emb.weight", "fc1.weight", "fc2.weight"]
    assert all({a.name: a.i for a in n.attribute} == {"transA": 0, "transB": 1} for n in fused)
    assert [n for n in nodes if n.op_type == "Transpose" and n.input[0] in weights] == []
    train_like_torch(sess, module, batches, ("ids", "label"), 20)
    # bf16 mixed precision: the fused products are cast like MatMul (inputs in bfloat16).
    p.mixed_precision = "bf16"
    p.model_with_training_graph_path = str(tmp_path / "bf16.onnx")
    ot.TrainingSession(data, p)
    nodes = onnx.load(str(tmp_path / "bf16.onnx")).graph.node
    casts = {n.output[0] for n in nodes if n.op_type == "Cast"}
    fused = [n for n in nodes if (n.domain, n.op_type) == ("com.onnxtrain", "FusedMatMul") and n.input[1] in casts]
    assert len(fused) >= 3, [(n.op_type, list(n.input)) for n in nodes if n.op_type == "FusedMatMul"]


class SmallCNN(torch.nn.Module):
    """Conv + Relu twice (one with bias, one without), a Relu read twice (the second Conv's output
    also feeds the residual sum, which keeps that pair apart), and a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.conv3 = torch.nn.Conv2d(8, 8, 1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x, label):
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        h = torch.relu(self.conv2(h))
        c3 = self.conv3(h)
        h = torch.relu(c3) + c3
        return torch.nn.functional.cross_entropy(self.fc(h.flatten(1)), label)


def test_conv_relu_fused_into_one_node(tmp_path):
    """Conv followed by Relu trains as com.microsoft.FusedConv(activation='Relu') where the Conv's
    output has no other reader: ReluGrad then ConvGrad in the backward pass (the ReluGrad of a pooled
    activation folded into its MaxPoolGrad), the trajectory within 1e-5 of PyTorch's (Adam, 20
    steps); a Conv read elsewhere stays a Conv and a Relu; portable training graphs and bf16
    products keep standard nodes."""
    torch.manual_seed(5)
    module = SmallCNN()
    g = torch.Generator().manual_seed(6)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(3)]
    data = export(module, *batches[0])
    p = adam_params(module, tmp_path / "training.onnx")
    sess = ot.TrainingSession(data, p)
    nodes = onnx.load(str(tmp_path / "training.onnx")).graph.node
    fused = [n for n in nodes if (n.domain, n.op_type) == ("com.microsoft", "FusedConv")]
    assert sorted(n.input[1] for n in fused) == ["conv1.weight", "conv2.weight"], [list(n.input) for n in fused]
    assert all(helper.get_attribute_value(next(a for a in n.attribute if a.name == "activation")) == b"Relu"
               for n in fused)
    convs = [n.input[1] for n in nodes if (n.domain, n.op_type) == ("", "Conv")]
    assert convs == ["conv3.weight"], convs
    assert sum(n.op_type == "Relu" for n in nodes) == 1
    # conv1's ReluGrad folded into the MaxPoolGrad of its output (relu_mask); conv2's and conv3's stay
    assert sum(n.op_type == "ReluGrad" for n in nodes) == 2
    pool_grads = [n for n in nodes if n.op_type == "MaxPoolGrad"]
    assert len(pool_grads) == 1 and {a.name: a.i for a in pool_grads[0].attribute}.get("relu_mask") == 1
    assert pool_grads[0].input[1] == fused[0].output[0]
    train_like_torch(sess, module, batches, ("x", "label"), 20)
    for option, value in (("portable_training_graph", True), ("mixed_precision", "bf16")):
        q = ot.TrainingParameters()
        q.loss_output_name, q.weights_to_train = "loss", p.weights_to_train
        setattr(q, option, value)
        q.model_with_training_graph_path = str(tmp_path / f"{option}.onnx")
        ot.TrainingSession(data, q)
        ops = [n.op_type for n in onnx.load(str(tmp_path / f"{option}.onnx")).graph.node]
        assert "FusedConv" not in ops and ops.count("Conv") >= 3, (option, ops)


class ZeroDropoutMLP(torch.nn.Module):
    """nn.Dropout(0.0) after each hidden layer (as nn.TransformerEncoderLayer(dropout=0.0) has)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 32)
        self.fc2 = torch.nn.Linear(32, 3)
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x, label):
        h = self.drop(torch.relu(self.fc1(x)))
        return torch.nn.functional.cross_entropy(self.drop(self.fc2(h)), label)


def test_zero_ratio_dropout_dropped_from_the_training_graph(tmp_path):
    """Dropout of constant ratio 0 (torch.onnx exports nn.Dropout(0.0) in training mode) is left out
    of the training graph: no Dropout or DropoutGrad node, and Adam tracks PyTorch (20 steps, 1e-5)."""
    module, batches, data, p, sess, ops = classifier_session(tmp_path, ZeroDropoutMLP, 5, 3, "Dropout", 2)
    assert not any(op in ("Dropout", "DropoutGrad") for _, op in ops), ops
    train_like_torch(sess, module, batches, ("x", "label"), 20)


class SplitProjection(torch.nn.Module):
    """One projection cut into three slices along its last axis, as attention cuts Q, K and V."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(12, 24)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x, label):
        h = self.proj(x)
        q, k, v = h[:, :8], h[:, 8:16], h[:, 16:]
        return torch.nn.functional.cross_entropy(self.out(torch.tanh(q) * k + v), label)


def test_slice_gradients_summed_as_copies(tmp_path):
    """The gradient of the three slices of one tensor is one SliceGradSum (no SliceGrad, no Sum
    of them), and Adam tracks PyTorch (20 steps, 1e-5)."""
    module, batches, data, p, sess, ops = classifier_session(tmp_path, SplitProjection, 9, 3, "Slice", 3)
    assert ops.count(("com.onnxtrain", "SliceGradSum")) == 1, ops
    assert ("com.onnxtrain", "SliceGrad") not in ops, ops
    train_like_torch(sess, module, batches, ("x", "label"), 20)


class SequenceMLP(torch.nn.Module):
    """Linear layers over a [4, 4, 12] batch of sequences: torch.onnx exports them as MatMul + Add."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 32)
        self.fc2 = torch.nn.Linear(32, 3)

    def forward(self, x, label):
        h = torch.relu(self.fc1(x.reshape(4, 4, 12)))
        return torch.nn.functional.cross_entropy(self.fc2(h).reshape(16, 3), label)


def test_bias_added_by_the_product(tmp_path):
    """Add(FusedMatMul(X, W), bias) of a batched nn.Linear is one FusedMatMul(X, W, bias) in the
    training graph (no forward Add left), and Adam tracks PyTorch (20 steps, 1e-5)."""
    module, batches, data, p, sess, ops = classifier_session(tmp_path, SequenceMLP, 11, 3, "MatMul", 2)
    g = onnx.load(str(tmp_path / "training.onnx")).graph
    biased = [n for n in g.node if n.op_type == "FusedMatMul" and len(n.input) == 3]
    assert sorted(n.input[2] for n in biased) == ["fc1.bias", "fc2.bias"], [list(n.input) for n in biased]
    assert ("", "Add") not in ops, ops
    train_like_torch(sess, module, batches, ("x", "label"), 20)


class TinyEncoder(torch.nn.Module):
    """One batch-first transformer encoder layer over a [4, 4, 12] batch of sequences."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(12, 2, 24, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(12, 3)

    def forward(self, x, label):
        return torch.nn.functional.cross_entropy(self.head(self.layer(x.reshape(4, 4, 12))).reshape(16, 3), label)


def test_attention_transposes_read_through_the_products(tmp_path):
    """By default (config entry onnxtrain.absorb_transposes "1"), a batch-first attention's head
    transposes are read and written through FusedMatMul's transBatch strides: six products take
    them, 3 of the training graph's 13 Transpose nodes stay, and Adam tracks PyTorch (20 steps, 1e-5). The key's share of in_proj_bias has a gradient of 0
    in exact arithmetic (softmax ignores a shift of every score), rounding noise that Adam scales up
    to +-lr steps in both frameworks: that weight is left out of the final comparison."""
    module, batches, data, p, sess, ops = classifier_session(tmp_path, TinyEncoder, 13, 3, "Transpose", 10)
    g = onnx.load(str(tmp_path / "training.onnx")).graph
    strided = [n for n in g.node if n.op_type == "FusedMatMul" and
               any(a.name.startswith("transBatch") and a.i for a in n.attribute)]
    assert len(strided) == 6, [(n.name, [(a.name, a.i) for a in n.attribute]) for n in strided]
    assert ops.count(("", "Transpose")) == 3, ops.count(("", "Transpose"))
    train_like_torch(sess, module, batches, ("x", "label"), 20, unchecked=("layer.self_attn.in_proj_bias",))


def test_attention_transposes_kept_when_asked(tmp_path):
    """With onnxtrain.absorb_transposes = "0" the 13 Transposes stay (no transBatch product); a
    value other than "0" or "1" is refused, naming the entry."""
    _, _, data, p, _, ops = classifier_session(tmp_path, TinyEncoder, 13, 1, "Transpose", 10,
                                               {"onnxtrain.absorb_transposes": "0"})
    assert ops.count(("", "Transpose")) == 13, ops.count(("", "Transpose"))
    so = ot.SessionOptions()
    so.add_session_config_entry("onnxtrain.absorb_transposes", "yes")
    with pytest.raises(Exception, match="onnxtrain.absorb_transposes"):
        ot.TrainingSession(data, p, so)


class ProjectThenSwap(torch.nn.Module):
    """[4, 4, 12] @ W [12, 3], then the two leading axes swapped: a batched operand times a matrix."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(12, 3) * 0.3)

    def forward(self, x, label):
        return torch.nn.functional.cross_entropy((x.reshape(4, 4, 12) @ self.w).transpose(0, 1).reshape(16, 3), label)


def test_transpose_after_a_product_with_a_matrix_stays(tmp_path):
    """A product of a batched operand and a matrix runs as one product over the folded batch; its
    output Transpose stays a copy (written through transBatchY it would be a product per batch
    row: BERT-tiny's in_proj input gradient ran 2x slower that way at 2 threads). Adam tracks
    PyTorch."""
    module, batches, data, p, sess, ops = classifier_session(tmp_path, ProjectThenSwap, 5, 3, "Transpose", 1)
    g = onnx.load(str(tmp_path / "training.onnx")).graph
    assert not [n.name for n in g.node if any(a.name == "transBatchY" and a.i for a in n.attribute)]
    assert ops.count(("", "Transpose")) >= 1, ops
    train_like_torch(sess, module, batches, ("x", "label"), 20)


class PowerOfTwoHeads(torch.nn.Module):
    """A projection to 32 features, then one batch-first encoder layer of 2 heads of 16: the
    scores' scale 1 / sqrt(16) is a power of two."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(12, 32)
        self.layer = torch.nn.TransformerEncoderLayer(32, 2, 48, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(32, 3)

    def forward(self, x, label):
        return torch.nn.functional.cross_entropy(self.head(self.layer(self.proj(x).reshape(4, 4, 32))).reshape(16, 3),
                                                 label)


def test_power_of_two_scale_folded_into_the_products(tmp_path):
    """The attention's division by 4 becomes alpha 0.25 of the three products beside it (the
    scores, the key's gradient reading the scaled query, the query's gradient); the training
    forward keeps eval's bits (eval runs the user's model, the division unfused) and Adam tracks
    PyTorch (20 steps, 1e-5; in_proj_bias unchecked, see the test above)."""
    module, batches, data, p, sess, ops = classifier_session(tmp_path, PowerOfTwoHeads, 18, 3, "Div", 4)
    g = onnx.load(str(tmp_path / "training.onnx")).graph
    scaled = [n for n in g.node if n.op_type == "FusedMatMul" and any(a.name == "alpha" for a in n.attribute)]
    assert sorted(a.f for n in scaled for a in n.attribute if a.name == "alpha") == [0.25] * 3, scaled
    fours = {n.output[0] for n in g.node if n.op_type == "Constant" and
             numpy_helper.to_array(n.attribute[0].t).tolist() == 4.0}
    assert fours and not [n.name for n in g.node if n.op_type == "Div" and n.input[1] in fours]
    x, y = batches[0]
    (ev,) = sess.eval(["loss"], {"x": x.numpy(), "label": y.numpy()})
    (tr,) = sess.run(["loss"], {"x": x.numpy(), "label": y.numpy(), "Learning_Rate": np.array([0.0], np.float32)})
    assert np.asarray(ev).tobytes() == np.asarray(tr).tobytes()
    sess2 = ot.TrainingSession(data, p)
    train_like_torch(sess2, module, batches, ("x", "label"), 20, unchecked=("layer.self_attn.in_proj_bias",))


def test_scale_read_as_gemm_bias_stays(tmp_path):
    """d = tanh(x W) / 4 read by one Gemm as A and by another as its C: alpha cannot scale C, so
    the forward Div stays (both Gemms keep reading its result); W's gradient against float64 numpy."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("Div", ["t", "four"], ["d"]), helper.make_node("Gemm", ["d", "V"], ["a"]),
             helper.make_node("Gemm", ["x", "U", "d"], ["b"]), helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0)]
    rng = np.random.default_rng(3)
    W, V, U = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3))
    inits = [numpy_helper.from_array(np.array(4.0, np.float32), "four")] + [
        numpy_helper.from_array(t, n) for n, t in (("W", W), ("V", V), ("U", U))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sess = gradient_session(model, {"W"}, tmp_path / "t.onnx")
    x = rng.standard_normal((3, 4)).astype(np.float32)
    (gw,) = sess.run(["W_grad"], {"x": x, "Learning_Rate": np.array([0.0], np.float32)})
    # loss = sum(d V) + sum(x U + d): dL/dd = 1 V^T + 1, dL/dh = dL/dd / 4 (1 - tanh(h)^2), dL/dW = x^T dL/dh
    xd = x.astype(np.float64)
    th = np.tanh(xd @ W.astype(np.float64))
    ones = np.ones((3, 4))
    ref = xd.T @ ((ones @ V.astype(np.float64).T + ones) / 4 * (1 - th * th))
    np.testing.assert_allclose(gw, ref, rtol=1e-5, atol=1e-5)
    graph = onnx.load(str(tmp_path / "t.onnx")).graph
    assert [n.input for n in graph.node if n.op_type == "Div" and n.output[0] == "d"] == [["t", "four"]]


@pytest.mark.parametrize("opset", [11, 13])
def test_dropouts_that_stay(tmp_path, opset):
    """Kept: a ratio that is not 0, a ratio-0 Dropout whose mask is read, or whose output is a graph
    output; dropped: a ratio-0 one whose output only nodes read (attribute form before opset 12)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])
    w = numpy_helper.from_array(np.linspace(-1, 1, 36, dtype=np.float32).reshape(6, 6), "w")
    inits = [w]

    def dropout(name, src, ratio, mask=False):
        outs = [name] + ([name + "_mask"] if mask else [])
        if opset >= 12:
            inits.append(numpy_helper.from_array(np.array(ratio, np.float32), name + "_ratio"))
            return helper.make_node("Dropout", [src, name + "_ratio"], outs, name=name)
        return helper.make_node("Dropout", [src], outs, name=name, ratio=ratio)

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             dropout("zero", "h", 0.0),             # dropped
             dropout("half", "zero", 0.5),          # kept: ratio 0.5
             dropout("masked", "half", 0.0, True),  # kept: its mask is read
             helper.make_node("Cast", ["masked_mask"], ["mask_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["masked", "mask_f"], ["m"]),
             dropout("out", "m", 0.0),              # kept: a graph output
             helper.make_node("ReduceSum", ["out"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                                                helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.weights_to_train = {"w"}
    p.model_with_training_graph_path = str(tmp_path / "training.onnx")
    ot.TrainingSession(model.SerializeToString(), p)
    kept = [n.name for n in onnx.load(str(tmp_path / "training.onnx")).graph.node if n.op_type == "Dropout"]
    assert sorted(kept) == ["half", "masked", "out"], kept
