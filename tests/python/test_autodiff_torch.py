"""Golden gradients against PyTorch autograd.

Each model is exported with torch.onnx.export (opset 17, no constant folding, loss inside the
graph, same initial weights; "transformer_dynamic" with symbolic batch and sequence axes);
onnxtrain builds the gradient graph and runs it; every parameter gradient must match torch's
within 1e-4 relative, 1e-5 absolute.
"""
import numpy as np
import onnx
import pytest
import torch

import onnxtrain as ot
import torch_models as tm

MODELS = ["mlp", "cnn", "transformer", "transformer_dynamic", "lstm"]


def torch_gradients(module, args):
    module.zero_grad()
    loss = module(*args)
    loss.backward()
    return float(loss), {n: p.grad.detach().numpy().copy() for n, p in module.named_parameters()}


def feeds_for(args, names):
    return {n: a.numpy() for n, a in zip(names, args)}


def build(name, portable=False):
    module, args, names = tm.make(name)
    data = tm.export(module, args, names, tm.dynamic_axes(name, names))
    params = [n for n, _ in module.named_parameters()]
    model = onnx.load_from_string(data)
    inits = {i.name for i in model.graph.initializer}
    missing = [p for p in params if p not in inits]
    assert not missing, f"exported model lacks initializers {missing}"
    builder = ot.GradientGraphBuilder(data, {"loss"}, set(params), "loss", portable=portable)
    builder.build()
    return module, args, names, params, builder.get_model()


@pytest.mark.parametrize("name", MODELS)
def test_parameter_gradients_match_torch(name):
    module, args, names, params, grad_model = build(name)
    sess = ot.InferenceSession(grad_model)
    out_names = [o.name for o in sess.get_outputs()]
    values = dict(zip(out_names, sess.run(None, feeds_for(args, names))))
    # torch after the export: same weights (export does not change them); BatchNorm running
    # statistics were updated by the export's forward pass but do not affect training-mode outputs.
    loss, grads = torch_gradients(module, args)
    np.testing.assert_allclose(values["loss"], loss, rtol=1e-5, atol=1e-6)
    for p in params:
        np.testing.assert_allclose(values[p + "_grad"], grads[p], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {p}")


@pytest.mark.parametrize("name", MODELS)
def test_portable_gradient_graph_passes_checker_and_matches(name):
    module, args, names, params, grad_model = build(name, portable=True)
    onnx.checker.check_model(onnx.load_from_string(grad_model))
    sess = ot.InferenceSession(grad_model)
    out_names = [o.name for o in sess.get_outputs()]
    values = dict(zip(out_names, sess.run(None, feeds_for(args, names))))
    _, grads = torch_gradients(module, args)
    for p in params:
        np.testing.assert_allclose(values[p + "_grad"], grads[p], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {p}")
