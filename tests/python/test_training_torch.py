"""Training trajectories against PyTorch: the same model exported with its loss, the same initial
weights and batches; per-step losses for 50 momentum steps and 50 Adam steps must track torch's
within 1e-4 relative; BatchNormalization running statistics must match torch's at the end."""
import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import onnxtrain as ot
import torch_models as tm

STEPS = 50
CONFIGS = {
    "momentum": ("MomentumOptimizer", {"momentum": 0.9}, 0.01, lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9)),
    "adam": ("AdamOptimizer", {}, 2e-3, lambda ps: torch.optim.Adam(ps, lr=2e-3)),
}


def batches(name, n_batches=5, seed=10):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        if name == "mlp":
            out.append((torch.randn(8, 10, generator=g), torch.randint(0, 4, (8,), generator=g)))
        else:
            out.append((torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)))
    return out


def trajectories(name, config):
    opt_name, attrs, lr, torch_opt = CONFIGS[config]
    module, args, names = tm.make(name)
    data = tm.export(copy.deepcopy(module), args, names)
    model = onnx.load_from_string(data)
    # Start torch from exactly the exported initializers (BatchNorm running statistics included).
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    with torch.no_grad():
        for n, t in list(module.named_parameters()) + list(module.named_buffers()):
            if n in inits:
                t.copy_(torch.tensor(inits[n]))
    params = [n for n, _ in module.named_parameters()]
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.weights_to_train = set(params)
    p.training_optimizer_name = opt_name
    p.optimizer_attributes = attrs
    sess = ot.TrainingSession(data, p)
    opt = torch_opt(module.parameters())
    module.train()
    ours, theirs = [], []
    bs = batches(name)
    for step in range(STEPS):
        x, y = bs[step % len(bs)]
        (loss,) = sess.run(["loss"], {names[0]: x.numpy(), names[1]: y.numpy(),
                                      "Learning_Rate": np.array([lr], np.float32)})
        ours.append(float(loss))
        opt.zero_grad()
        l = module(x, y)
        l.backward()
        opt.step()
        theirs.append(float(l))
    return np.array(ours), np.array(theirs), sess, module


@pytest.mark.parametrize("config", ["momentum", "adam"])
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_loss_trajectory_tracks_torch(name, config):
    ours, theirs, sess, module = trajectories(name, config)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=0)
    assert ours[-1] < ours[0]  # it learns
    print(f"{name}/{config}: final loss onnxtrain {ours[-1]:.8f}, torch {theirs[-1]:.8f}")
    if name == "cnn":
        state = sess._initializers()  # running statistics: not state tensors in onnxruntime's sense
        for n, buf in module.named_buffers():
            if n.endswith("running_mean") or n.endswith("running_var"):
                np.testing.assert_allclose(state[n], buf.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)
