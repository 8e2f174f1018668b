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


@pytest.mark.parametrize("functional", [False, True], ids=["nn.GELU", "F.gelu"])
def test_fused_gelu_trains_like_torch(tmp_path, functional):
    torch.manual_seed(0)
    module = GeluMLP(functional)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 12, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(4)]
    data = export(module, *batches[0])
    assert sum(n.op_type == "Erf" for n in onnx.load_from_string(data).graph.node) == 2
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    p.weights_to_train = {n for n, _ in module.named_parameters()}
    p.model_with_training_graph_path = str(tmp_path / "training.onnx")
    sess = ot.TrainingSession(data, p)
    ops = [(n.domain, n.op_type) for n in onnx.load(str(tmp_path / "training.onnx")).graph.node]
    assert ops.count(("com.onnxtrain", "Gelu")) == 2 and ops.count(("com.onnxtrain", "GeluGrad")) == 2, ops
    assert ("", "Erf") not in ops
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    worst = 0.0
    for step in range(30):
        x, y = batches[step % len(batches)]
        (loss,) = sess.run(["loss"], {"x": x.numpy(), "label": y.numpy(), "Learning_Rate": np.array([1e-2], np.float32)})
        opt.zero_grad()
        tl = module(x, y)
        tl.backward()
        opt.step()
        worst = max(worst, abs(float(loss) - float(tl)) / abs(float(tl)))
    assert worst < 1e-5, worst
    state = sess.get_state()
    for n, t in module.named_parameters():
        err = np.abs(state[n] - t.detach().numpy()).max() / np.abs(t.detach().numpy()).max()
        assert err < 1e-5, (n, err)
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


@pytest.mark.parametrize("extra_reader", [False, True], ids=["fused", "erf_read_elsewhere"])
def test_gelu_gradient_fused_or_not(tmp_path, extra_reader):
    """The weight's gradient through the GELU against float64 numpy; an Erf output the model also
    returns keeps the pattern unfused."""
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.weights_to_train = {"W"}
    p.set_gradients_as_graph_outputs = True
    p.model_with_training_graph_path = str(tmp_path / "t.onnx")
    sess = ot.TrainingSession(gelu_graph(extra_reader), p)
    x = np.linspace(-3, 3, 20, dtype=np.float32).reshape(4, 5)
    (gw,) = sess.run(["W_grad"], {"x": x, "Learning_Rate": np.array([0.0], np.float32)})
    from math import erf
    xd = x.astype(np.float64)
    ref = 0.5 * xd * (1 + np.vectorize(erf)(xd / np.sqrt(2)))
    np.testing.assert_allclose(gw, ref, rtol=1e-6, atol=1e-6)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "t.onnx")).graph.node]
    assert ("Gelu" in ops) != extra_reader and ("Erf" in ops) == extra_reader, ops
