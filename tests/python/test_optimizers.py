"""Optimizers against torch.optim on the same tensors: loss = sum(W * G) so dL/dW = G exactly,
with G fed each step; 20 steps, weights compared at 1e-6 relative."""
import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot


def grad_feed_model(shapes):
    """loss = sum_i sum(W_i * G_i) for weights W_i (initializers) and inputs G_i."""
    rng = np.random.default_rng(0)
    nodes, inputs, inits, terms = [], [], [], []
    for i, shape in enumerate(shapes):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), f"W{i}"))
        inputs.append(helper.make_tensor_value_info(f"G{i}", TensorProto.FLOAT, list(shape)))
        nodes.append(helper.make_node("Mul", [f"W{i}", f"G{i}"], [f"p{i}"]))
        nodes.append(helper.make_node("ReduceSum", [f"p{i}"], [f"t{i}"], keepdims=0))
        terms.append(f"t{i}")
    nodes.append(helper.make_node("Sum", terms, ["loss"]))
    g = helper.make_graph(nodes, "gradfeed", inputs, [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return m.SerializeToString(), [numpy_helper.to_array(t) for t in inits]


SHAPES = [(7, 5), (13,)]
LR = 0.01


def run_both(opt_name, attrs, int_attrs, torch_factory, steps=20, per_weight=None, lrs=None):
    data, w0 = grad_feed_model(SHAPES)
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = opt_name
    p.optimizer_attributes = attrs
    p.optimizer_int_attributes = int_attrs
    if per_weight:
        p.optimizer_attributes_map = per_weight
    sess = ot.TrainingSession(data, p)
    params = [torch.nn.Parameter(torch.tensor(w.copy())) for w in w0]
    opt = torch_factory(params)
    rng = np.random.default_rng(1)
    for step in range(steps):
        lr = LR if lrs is None else lrs[step]
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        feed = {f"G{i}": g for i, g in enumerate(grads)}
        feed["Learning_Rate"] = np.array([lr], np.float32)
        sess.run(["loss"], feed)
        for prm, g in zip(params, grads):
            prm.grad = torch.tensor(g)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    state = sess.get_model_state()["full_precision"]
    for i, prm in enumerate(params):
        np.testing.assert_allclose(state[f"W{i}"], prm.detach().numpy(), rtol=1e-6, atol=1e-7,
                                   err_msg=f"{opt_name} weight W{i}")
    return sess


def test_sgd():
    run_both("SGDOptimizer", {}, {}, lambda ps: torch.optim.SGD(ps, lr=LR))


@pytest.mark.parametrize("nesterov", [0, 1])
def test_momentum(nesterov):
    run_both("MomentumOptimizer", {"momentum": 0.8}, {"nesterov": nesterov},
             lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.8, dampening=0, nesterov=bool(nesterov)))


def test_momentum_default_is_0_9():
    run_both("MomentumOptimizer", {}, {}, lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.9))


def test_adam():
    run_both("AdamOptimizer", {"alpha": 0.85, "beta": 0.99, "epsilon": 1e-7}, {},
             lambda ps: torch.optim.Adam(ps, lr=LR, betas=(0.85, 0.99), eps=1e-7))


def test_adam_weight_decay_is_l2():
    run_both("AdamOptimizer", {"lambda": 0.1}, {}, lambda ps: torch.optim.Adam(ps, lr=LR, weight_decay=0.1))


def test_adamw():
    run_both("AdamWOptimizer", {"lambda": 0.05}, {}, lambda ps: torch.optim.AdamW(ps, lr=LR, weight_decay=0.05))


def test_adagrad():
    run_both("AdagradOptimizer", {"lr_decay": 0.01}, {},
             lambda ps: torch.optim.Adagrad(ps, lr=LR, lr_decay=0.01))


def test_varying_learning_rate():
    lrs = [LR * (1 + 0.1 * i) for i in range(20)]
    run_both("AdamOptimizer", {}, {}, lambda ps: torch.optim.Adam(ps, lr=LR), lrs=lrs)


def test_per_weight_attributes():
    """optimizer_attributes_map overrides per weight (torch: parameter groups)."""
    run_both("MomentumOptimizer", {"momentum": 0.5}, {},
             lambda ps: torch.optim.SGD([{"params": [ps[0]], "momentum": 0.95}, {"params": [ps[1]]}], lr=LR,
                                        momentum=0.5),
             per_weight={"W0": {"momentum": 0.95}})


def lamb_reference(w, grads, lr, b1=0.9, b2=0.999, eps=1e-6, wd=0.0):
    """LAMB in float64 (You et al., without bias correction: onnxruntime's default)."""
    w = w.astype(np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for g in grads:
        g = g.astype(np.float64)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        r = m / (np.sqrt(v) + eps) + wd * w
        wn, rn = np.linalg.norm(w), np.linalg.norm(r)
        ratio = wn / rn if wn > 0 and rn > 0 else 1.0
        w = w - lr * ratio * r
    return w


def test_lamb_against_formula():
    data, w0 = grad_feed_model(SHAPES)
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "LambOptimizer"
    p.optimizer_attributes = {"lambda": 0.01}
    sess = ot.TrainingSession(data, p)
    rng = np.random.default_rng(1)
    history = [[], []]
    for _ in range(20):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        feed = {f"G{i}": g for i, g in enumerate(grads)}
        feed["Learning_Rate"] = np.array([LR], np.float32)
        sess.run(["loss"], feed)
        for i, g in enumerate(grads):
            history[i].append(g)
    state = sess.get_model_state()["full_precision"]
    for i in range(2):
        np.testing.assert_allclose(state[f"W{i}"], lamb_reference(w0[i], history[i], LR, wd=0.01), rtol=1e-5, atol=1e-6)


def test_grad_norm_clipping_matches_torch():
    data, w0 = grad_feed_model(SHAPES)
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.enable_grad_norm_clip = True
    p.max_grad_norm = 0.5
    sess = ot.TrainingSession(data, p)
    params = [torch.nn.Parameter(torch.tensor(w.copy())) for w in w0]
    opt = torch.optim.SGD(params, lr=LR)
    rng = np.random.default_rng(3)
    for _ in range(5):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        feed = {f"G{i}": g for i, g in enumerate(grads)}
        feed["Learning_Rate"] = np.array([LR], np.float32)
        sess.run(["loss"], feed)
        for prm, g in zip(params, grads):
            prm.grad = torch.tensor(g)
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
    state = sess.get_model_state()["full_precision"]
    for i, prm in enumerate(params):
        np.testing.assert_allclose(state[f"W{i}"], prm.detach().numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("field,value,message", [
    ("training_optimizer_name", "RMSPropOptimizer", "training_optimizer_name"),
    ("gradient_accumulation_steps", 0, "gradient_accumulation_steps"),
    ("max_grad_norm", -1.0, "max_grad_norm"),
    ("weights_to_train", "W0", "weights_to_train"),
    ("enable_grad_norm_clip", "yes", "enable_grad_norm_clip"),
])
def test_invalid_parameters_name_the_field(field, value, message):
    p = ot.TrainingParameters()
    with pytest.raises(ValueError, match=message):
        setattr(p, field, value)


def test_unknown_optimizer_attribute_names_it():
    data, _ = grad_feed_model(SHAPES)
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = "AdamOptimizer"
    p.optimizer_attributes = {"momentum": 0.9}
    with pytest.raises(ValueError, match="momentum"):
        ot.TrainingSession(data, p)
    p.optimizer_attributes = {}
    p.optimizer_attributes_map = {"nope": {"alpha": 0.9}}
    with pytest.raises(ValueError, match="nope"):
        ot.TrainingSession(data, p)


def test_unsupported_onnxruntime_fields_are_refused():
    data, _ = grad_feed_model(SHAPES)
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.use_fp16_moments = True
    with pytest.raises(ValueError, match="use_fp16_moments"):
        ot.TrainingSession(data, p)
