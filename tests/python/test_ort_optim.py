"""onnxruntime-training's ORTTrainer helpers: ``optim`` configs (defaults, validation, parameter
groups, mapping onto onnxtrain's optimizers, checked by training against numpy references of
onnxruntime's kernels), ``optim.lr_scheduler`` (against numpy references of onnxruntime's
formulas), ``amp`` loss scalers (hand-written sequences) and ``TrainStepInfo``."""
import json
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain
from onnxtrain.training import amp, optim
from onnxtrain.training import TrainStepInfo
from onnxtrain.training.optim import lr_scheduler
from alias_run import run_alias

INF = float("inf")

# ------------------------------------------------------------------------------------------------
# Optimizer configs: defaults (transcribed from onnxruntime-training's optim/config.py)

SGD_DEFAULTS = {"lr": 0.001}
ADAM_DEFAULTS = {"lr": 0.001, "alpha": 0.9, "beta": 0.999, "lambda": 0.0, "epsilon": 1e-8, "max_norm_clip": 1.0,
                 "do_bias_correction": True, "weight_decay_mode": 0}
LAMB_DEFAULTS = {"lr": 0.001, "alpha": 0.9, "beta": 0.999, "lambda": 0.0, "ratio_min": -INF, "ratio_max": INF,
                 "epsilon": 1e-6, "max_norm_clip": 1.0, "do_bias_correction": False}


@pytest.mark.parametrize("cls, name, defaults", [
    (optim.SGDConfig, "SGDOptimizer", SGD_DEFAULTS),
    (optim.AdamConfig, "AdamOptimizer", ADAM_DEFAULTS),
    (optim.LambConfig, "LambOptimizer", LAMB_DEFAULTS),
])
def test_config_defaults(cls, name, defaults):
    c = cls()
    assert isinstance(c, optim._OptimizerConfig)
    assert c.name == name
    assert c.lr == 0.001 and isinstance(c.lr, float)
    assert c.defaults == defaults
    assert c.params == [] and c.param_groups is c.params
    attrs = {"lambda": "lambda_coef"}
    for k, v in defaults.items():
        if k != "lr":
            assert getattr(c, attrs.get(k, k)) == v, k


def test_adam_decay_mode_enum():
    mode = optim.AdamConfig.DecayMode
    assert int(mode.BEFORE_WEIGHT_UPDATE) == 0 and int(mode.AFTER_WEIGHT_UPDATE) == 1
    assert optim.AdamConfig().weight_decay_mode is mode.BEFORE_WEIGHT_UPDATE
    c = optim.AdamConfig(weight_decay_mode=mode.AFTER_WEIGHT_UPDATE)
    assert c.weight_decay_mode is mode.AFTER_WEIGHT_UPDATE and c.defaults["weight_decay_mode"] == 1


def test_config_values_are_stored():
    c = optim.LambConfig(lr=0.5, alpha=0.8, beta=0.9, lambda_coef=0.01, ratio_min=0.1, ratio_max=10.0,
                         epsilon=1e-4, max_norm_clip=2.0, do_bias_correction=True)
    assert (c.lr, c.alpha, c.beta, c.lambda_coef, c.ratio_min, c.ratio_max, c.epsilon, c.max_norm_clip,
            c.do_bias_correction) == (0.5, 0.8, 0.9, 0.01, 0.1, 10.0, 1e-4, 2.0, True)
    assert c.defaults["lambda"] == 0.01
    c = optim.AdamConfig(lr=1, alpha=0)  # ints are numbers
    assert c.lr == 1.0 and isinstance(c.lr, float) and c.alpha == 0.0


# ------------------------------------------------------------------------------------------------
# Hyper-parameter validation: ValueError naming the argument (also an AssertionError, as
# onnxruntime's assert checks were)

NUMBER_BAD = ["x", None, True, [0.1], float("nan")]
NONNEG_BAD = NUMBER_BAD + [-1e-3, -1]
BAD_VALUES = {
    "lr": NONNEG_BAD + [INF],
    "alpha": NONNEG_BAD,
    "beta": NONNEG_BAD,
    "lambda_coef": NONNEG_BAD,
    "epsilon": NONNEG_BAD,
    "max_norm_clip": NUMBER_BAD + [0, 0.0],
    "do_bias_correction": [1, 0, "True", None],
    "weight_decay_mode": [0, 1, "BEFORE_WEIGHT_UPDATE", None],
    "ratio_min": NUMBER_BAD,
    "ratio_max": NUMBER_BAD,
}
CASES = [(optim.SGDConfig, "lr", v) for v in BAD_VALUES["lr"]]
CASES += [(optim.AdamConfig, k, v) for k in ("lr", "alpha", "beta", "lambda_coef", "epsilon", "max_norm_clip",
                                             "do_bias_correction", "weight_decay_mode") for v in BAD_VALUES[k]]
CASES += [(optim.LambConfig, k, v) for k in ("lr", "alpha", "beta", "lambda_coef", "ratio_min", "ratio_max",
                                             "epsilon", "max_norm_clip", "do_bias_correction") for v in BAD_VALUES[k]]


@pytest.mark.parametrize("cls, arg, value", CASES, ids=[f"{c.__name__}-{a}-{v!r}" for c, a, v in CASES])
def test_config_rejects_bad_hyperparameter(cls, arg, value):
    with pytest.raises(ValueError, match=arg) as e:
        cls(**{arg: value})
    assert isinstance(e.value, AssertionError)


def test_config_accepts_boundaries():
    optim.AdamConfig(lr=0.0, alpha=0.0, beta=0.0, lambda_coef=0.0, epsilon=0.0, max_norm_clip=-1.0)
    optim.LambConfig(ratio_min=-INF, ratio_max=INF, max_norm_clip=0.5)


def test_base_config_validation():
    base = optim._OptimizerConfig
    c = base("LambOptimizer", [], {"lr": 0.1, "alpha": 0.5})
    assert c.name == "LambOptimizer" and c.lr == 0.1 and c.defaults == {"lr": 0.1, "alpha": 0.5}
    with pytest.raises(ValueError, match="'name' must be one of"):
        base("AdagradOptimizer", [], {"lr": 0.1})
    with pytest.raises(ValueError, match="'name' must be a string"):
        base(1, [], {"lr": 0.1})
    with pytest.raises(ValueError, match="'defaults' must be a dict"):
        base("SGDOptimizer", [], [("lr", 0.1)])
    with pytest.raises(ValueError, match="'lr'"):
        base("SGDOptimizer", [], {"alpha": 0.1})
    with pytest.raises(ValueError, match="'lr'"):
        base("SGDOptimizer", [], {"lr": -0.1})
    with pytest.raises(ValueError, match="'params' must be a list"):
        base("SGDOptimizer", {"params": ["w"]}, {"lr": 0.1})


# ------------------------------------------------------------------------------------------------
# Parameter groups

def test_param_groups_seed_example():
    """The ORTTrainer documentation's example (param_groups= keyword)."""
    c = optim.LambConfig(param_groups=[{"params": ["model_param0"], "alpha": 0.8, "beta": 0.7},
                                       {"params": ["model_param1", "model_param_2"], "alpha": 0.0}],
                         alpha=0.9, beta=0.999)
    g0 = dict(LAMB_DEFAULTS, params=["model_param0"], alpha=0.8, beta=0.7)
    g1 = dict(LAMB_DEFAULTS, params=["model_param1", "model_param_2"], alpha=0.0)
    assert c.params == [g0, g1]
    assert c.param_groups is c.params


def test_param_groups_positional_params_and_copies():
    group = {"params": ["w"], "epsilon": 0.5}
    c = optim.AdamConfig([group])
    assert group == {"params": ["w"], "epsilon": 0.5}  # the caller's dict is not modified
    assert c.params[0]["epsilon"] == 0.5 and c.params[0]["alpha"] == 0.9
    group["params"].append("v")
    assert c.params[0]["params"] == ["w"]


def test_param_groups_lambda_coef_key():
    c = optim.AdamConfig([{"params": ["a"], "lambda_coef": 0.1}, {"params": ["b"], "lambda": 0.2}])
    assert c.params[0]["lambda"] == 0.1 and "lambda_coef" not in c.params[0]
    assert c.params[1]["lambda"] == 0.2
    with pytest.raises(ValueError, match="both 'lambda' and 'lambda_coef'"):
        optim.AdamConfig([{"params": ["a"], "lambda_coef": 0.1, "lambda": 0.2}])


@pytest.mark.parametrize("groups, message", [
    ([{"alpha": 0.5}], "must contain a {'params'"),
    ([{"params": ["w"]}], "additional entries"),
    (["w"], "must contain a {'params'"),
    ([{"params": "w", "alpha": 0.5}], "list of model parameter names"),
    ([{"params": ["w", 3], "alpha": 0.5}], "list of model parameter names"),
    ([{"params": ["w"], "gamma": 0.5}], "'gamma' hyper parameter not present"),
    ([{"params": ["w"], "ratio_min": 0.5}], "'ratio_min' hyper parameter not present"),
    ([{"params": ["w"], "lr": 0.5}], "'lr' is not supported inside params"),
    ([{"params": ["w", "w"], "alpha": 0.5}], "'w' already belongs to params\\[0\\]"),
    ([{"params": ["w"], "alpha": 0.5}, {"params": ["v", "w"], "beta": 0.5}], "params\\[1\\].*'w' already belongs"),
    ([{"params": ["w"], "alpha": -0.5}], "params\\[0\\].*'alpha'"),
    ([{"params": ["w"], "do_bias_correction": 1}], "params\\[0\\].*'do_bias_correction'"),
    ([{"params": ["w"], "weight_decay_mode": 1}], "'weight_decay_mode'"),
    ([{"params": ["w"], "max_norm_clip": 0.0}], "'max_norm_clip'"),
])
def test_param_groups_validation(groups, message):
    with pytest.raises(ValueError, match=message):
        optim.AdamConfig(groups)


def test_param_groups_lamb_and_sgd_validation():
    with pytest.raises(ValueError, match="'ratio_max'"):
        optim.LambConfig([{"params": ["w"], "ratio_max": "big"}])
    with pytest.raises(ValueError, match="'weight_decay_mode' hyper parameter not present"):
        optim.LambConfig([{"params": ["w"], "weight_decay_mode": optim.AdamConfig.DecayMode.AFTER_WEIGHT_UPDATE}])
    with pytest.raises(ValueError, match="empty list for SGD"):
        optim.SGDConfig([{"params": ["w"], "lr": 0.1}])
    with pytest.raises(ValueError, match="not both"):
        optim.AdamConfig(params=[], param_groups=[])
    with pytest.raises(ValueError, match="'params' must be a list"):
        optim.AdamConfig(params="w")


# ------------------------------------------------------------------------------------------------
# Mapping onto onnxtrain's optimizers


def _check_against_onnxtrain_table(name, per_weight):
    table = onnxtrain.optimizer_hyperparameters(name)
    assert name in onnxtrain.optimizer_names()
    for attrs in per_weight.values():
        assert set(attrs) == set(table), (set(attrs), set(table))  # every attribute explicit
        for k, v in attrs.items():
            assert type(v) is type(table[k]), (k, v, table[k])


def test_sgd_mapping():
    name, per_weight = optim.SGDConfig(lr=0.1).to_training_parameters_attributes(["W", "b"])
    assert name == "SGDOptimizer"
    assert per_weight == {"W": {"lambda": 0.0}, "b": {"lambda": 0.0}}
    _check_against_onnxtrain_table(name, per_weight)
    s = optim.SGDConfig().training_parameters_settings(["W"])
    assert s["enable_grad_norm_clip"] is False and "max_grad_norm" not in s  # onnxruntime clips Adam/Lamb only


def test_adam_mapping_with_groups():
    c = optim.AdamConfig([{"params": ["b"], "alpha": 0.5, "lambda_coef": 0.25, "do_bias_correction": False}],
                         alpha=0.85, beta=0.99, lambda_coef=0.01, epsilon=1e-6)
    name, per_weight = c.to_training_parameters_attributes(["W", "b"])
    assert name == "AdamWOptimizer"
    assert per_weight == {
        "W": {"alpha": 0.85, "beta": 0.99, "lambda": 0.01, "epsilon": 1e-6, "do_bias_correction": 1},
        "b": {"alpha": 0.5, "beta": 0.99, "lambda": 0.25, "epsilon": 1e-6, "do_bias_correction": 0},
    }
    _check_against_onnxtrain_table(name, per_weight)


def test_lamb_mapping_with_groups():
    c = optim.LambConfig([{"params": ["b"], "ratio_max": 5.0, "epsilon": 1e-3}], ratio_min=0.01)
    name, per_weight = c.to_training_parameters_attributes(["W", "b"])
    assert name == "LambOptimizer"
    assert per_weight["W"] == {"alpha": 0.9, "beta": 0.999, "lambda": 0.0, "ratio_min": 0.01, "ratio_max": INF,
                               "epsilon": 1e-6, "do_bias_correction": 0}
    assert per_weight["b"] == dict(per_weight["W"], ratio_max=5.0, epsilon=1e-3)
    _check_against_onnxtrain_table(name, per_weight)


def test_mapping_weight_names():
    c = optim.AdamConfig([{"params": ["frozen", "b"], "alpha": 0.5}])
    with pytest.raises(ValueError, match="'frozen' is not a weight"):
        c.to_training_parameters_attributes(["W", "b"])
    _, per_weight = c.to_training_parameters_attributes(["W", "b"], frozen_weights=["frozen"])
    assert set(per_weight) == {"W", "b"} and per_weight["b"]["alpha"] == 0.5
    with pytest.raises(ValueError, match="duplicates"):
        c.to_training_parameters_attributes(["W", "W"])
    with pytest.raises(ValueError, match="weight_names"):
        c.to_training_parameters_attributes("W")
    assert optim.LambConfig().to_training_parameters_attributes([]) == ("LambOptimizer", {})


def test_adam_after_weight_update_mode():
    after = optim.AdamConfig.DecayMode.AFTER_WEIGHT_UPDATE
    for kwargs in ({}, {"do_bias_correction": False, "lambda_coef": 0.1}, {"lambda_coef": 0.0}):
        with pytest.raises(NotImplementedError, match="weight_decay_mode"):
            optim.AdamConfig(weight_decay_mode=after, **kwargs).to_training_parameters_attributes(["W"])
    # Hugging Face's update equals torch's AdamW without decay and bias correction
    c = optim.AdamConfig(weight_decay_mode=after, do_bias_correction=False)
    assert c.to_training_parameters_attributes(["W"]) == optim.AdamConfig(
        do_bias_correction=False).to_training_parameters_attributes(["W"])
    c = optim.AdamConfig([{"params": ["b"], "weight_decay_mode": after}])
    with pytest.raises(NotImplementedError, match="weight_decay_mode"):
        c.to_training_parameters_attributes(["W", "b"])
    c.to_training_parameters_attributes(["W"], frozen_weights=["b"])  # the group's weight is not trained


def test_max_norm_clip_settings():
    s = optim.AdamConfig(max_norm_clip=2.5).training_parameters_settings(["W"])
    assert s["enable_grad_norm_clip"] is True and s["max_grad_norm"] == 2.5
    s = optim.LambConfig().training_parameters_settings(["W"], grad_norm_clip=False)
    assert s["enable_grad_norm_clip"] is False and "max_grad_norm" not in s
    c = optim.LambConfig([{"params": ["b"], "max_norm_clip": 3.0}])
    with pytest.raises(NotImplementedError, match="max_norm_clip"):
        c.training_parameters_settings(["W", "b"])
    assert c.training_parameters_settings(["W", "b"], grad_norm_clip=False)["enable_grad_norm_clip"] is False
    assert c.training_parameters_settings(["b"])["max_grad_norm"] == 3.0
    with pytest.raises(NotImplementedError, match="max_norm_clip=-1.0"):
        optim.AdamConfig(max_norm_clip=-1.0).training_parameters_settings(["W"])


def test_mapping_refuses_what_onnxtrain_cannot_honour():
    with pytest.raises(NotImplementedError, match="ratio_min"):
        optim.LambConfig(ratio_min=2.0, ratio_max=1.0).to_training_parameters_attributes(["W"])
    c = optim._OptimizerConfig("AdamOptimizer", [], {"lr": 0.1, "amsgrad": 1})
    with pytest.raises(NotImplementedError, match="amsgrad"):
        c.to_training_parameters_attributes(["W"])
    # a bare base config takes onnxruntime's defaults for what it does not give
    c = optim._OptimizerConfig("LambOptimizer", [], {"lr": 0.1, "alpha": 0.5})
    _, per_weight = c.to_training_parameters_attributes(["W"])
    assert per_weight["W"] == {"alpha": 0.5, "beta": 0.999, "lambda": 0.0, "ratio_min": -INF, "ratio_max": INF,
                               "epsilon": 1e-6, "do_bias_correction": 0}


def test_settings_apply_to_training_parameters():
    c = optim.AdamConfig([{"params": ["b"], "lambda_coef": 0.5}], alpha=0.8, max_norm_clip=4.0)
    p = onnxtrain.TrainingParameters()
    p.loss_output_name = "loss"
    assert c.apply_to_training_parameters(p, ["W", "b"]) is p
    p.validate()
    assert p.training_optimizer_name == "AdamWOptimizer"
    assert dict(p.optimizer_attributes_map["b"]) == {"alpha": 0.8, "beta": 0.999, "lambda": 0.5, "epsilon": 1e-8}
    assert dict(p.optimizer_int_attributes_map["W"]) == {"do_bias_correction": 1}
    assert p.enable_grad_norm_clip is True and p.max_grad_norm == 4.0


# Training through the mapping against numpy references of onnxruntime's CUDA kernels
# (adam_impl.cu mode 0, lamb_impl.cu): loss = sum(W_i * G_i), so dL/dW_i = G_i is fed.

SHAPES = [(6, 4), (5,)]


def _grad_feed_model():
    """loss = sum_i sum(W_i * G_i); returns the model bytes and the initial weights (float64)."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]
    idx = range(len(SHAPES))
    nodes = [helper.make_node("Mul", [f"W{i}", f"G{i}"], [f"p{i}"]) for i in idx]
    nodes += [helper.make_node("ReduceSum", [f"p{i}"], [f"t{i}"], keepdims=0) for i in idx]
    nodes.append(helper.make_node("Sum", [f"t{i}" for i in idx], ["loss"]))
    feeds = [helper.make_tensor_value_info(f"G{i}", TensorProto.FLOAT, list(SHAPES[i])) for i in idx]
    inits = [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)]
    loss = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
    m = helper.make_model(helper.make_graph(nodes, "gradfeed", feeds, [loss], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    return m.SerializeToString(), [w.astype(np.float64) for w in weights]


def _ort_adam_mode0(w, g, m, v, t, lr, alpha, beta, lam, eps, bias):
    m = alpha * m + (1 - alpha) * g
    v = beta * v + (1 - beta) * g * g
    ac = 1 - alpha ** t if bias else 1.0
    bc = 1 - beta ** t if bias else 1.0
    update = (m / ac) / (np.sqrt(v / bc) + eps) + lam * w
    return w - lr * update, m, v


def _ort_lamb(w, g, m, v, t, lr, alpha, beta, lam, eps, bias, ratio_min, ratio_max):
    m = alpha * m + (1 - alpha) * g
    v = beta * v + (1 - beta) * g * g
    ac = 1 - alpha ** t if bias else 1.0
    bc = 1 - beta ** t if bias else 1.0
    d = lam * w + (m / ac) / (np.sqrt(v / bc) + eps)
    wn, dn = np.sqrt(np.sum(w * w)), np.sqrt(np.sum(d * d))
    ratio = max(ratio_min, min(ratio_max, wn / dn)) if wn != 0 and dn != 0 else 1.0
    return w - lr * ratio * d, m, v


def _train_and_compare(config, hyper_of, reference, steps=12, lr=0.01):
    data, w_ref = _grad_feed_model()
    names = [f"W{i}" for i in range(len(SHAPES))]
    p = onnxtrain.TrainingParameters()
    p.loss_output_name = "loss"
    config.apply_to_training_parameters(p, names, grad_norm_clip=False)
    sess = onnxtrain.TrainingSession(data, p)
    m = [np.zeros(s) for s in SHAPES]
    v = [np.zeros(s) for s in SHAPES]
    rng = np.random.default_rng(1)
    for t in range(1, steps + 1):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        feed = {f"G{i}": g for i, g in enumerate(grads)}
        feed["Learning_Rate"] = np.array([lr], np.float32)
        sess.run(["loss"], feed)
        for i, name in enumerate(names):
            w_ref[i], m[i], v[i] = reference(w_ref[i], grads[i].astype(np.float64), m[i], v[i], t, lr,
                                             **hyper_of(name))
    state = sess.get_model_state()["full_precision"]
    for i, name in enumerate(names):
        np.testing.assert_allclose(state[name], w_ref[i], rtol=2e-5, atol=1e-6, err_msg=name)


def test_adam_config_trains_as_onnxruntime_adam():
    c = optim.AdamConfig([{"params": ["W1"], "alpha": 0.7, "lambda_coef": 0.3, "do_bias_correction": False}],
                         alpha=0.85, beta=0.99, lambda_coef=0.05, epsilon=1e-6)
    hyper = {"W0": dict(alpha=0.85, beta=0.99, lam=0.05, eps=1e-6, bias=True),
             "W1": dict(alpha=0.7, beta=0.99, lam=0.3, eps=1e-6, bias=False)}
    _train_and_compare(c, hyper.__getitem__, _ort_adam_mode0)


def test_lamb_config_trains_as_onnxruntime_lamb():
    c = optim.LambConfig([{"params": ["W1"], "ratio_max": 0.5, "do_bias_correction": True}],
                         lambda_coef=0.01, ratio_min=0.05)
    hyper = {"W0": dict(alpha=0.9, beta=0.999, lam=0.01, eps=1e-6, bias=False, ratio_min=0.05, ratio_max=INF),
             "W1": dict(alpha=0.9, beta=0.999, lam=0.01, eps=1e-6, bias=True, ratio_min=0.05, ratio_max=0.5)}
    _train_and_compare(c, hyper.__getitem__, _ort_lamb)


def test_sgd_config_trains_as_sgd():
    def sgd(w, g, m, v, t, lr):
        return w - lr * g, m, v
    _train_and_compare(optim.SGDConfig(), lambda name: {}, sgd)


# ------------------------------------------------------------------------------------------------
# Learning rate schedulers against numpy references of onnxruntime's formulas
# (lr_scheduler.py): nw = warmup * total_steps; warm-up while step < nw: step / max(1, nw).


def _ref_warmup(steps, nw):
    return steps / max(1.0, nw)


def ref_constant(steps, total, warmup, lr):
    nw = warmup * total
    return lr * np.where(steps < nw, _ref_warmup(steps, nw), 1.0)


def ref_cosine(steps, total, warmup, lr, cycles):
    nw = warmup * total
    progress = (steps - nw) / max(1.0, total - nw)
    decay = np.maximum(0.0, 0.5 * (1.0 + np.cos(np.pi * cycles * 2.0 * progress)))
    return lr * np.where(steps < nw, _ref_warmup(steps, nw), decay)


def ref_linear(steps, total, warmup, lr):
    nw = warmup * total
    decay = np.maximum(0.0, (total - steps) / max(1.0, total - nw))
    return lr * np.where(steps < nw, _ref_warmup(steps, nw), decay)


def ref_poly(steps, total, warmup, lr, lr_end, power):
    nw = warmup * total
    remaining = np.clip(1.0 - (steps - nw) / (total - nw), 0.0, None)  # clip: unused where step > total
    decayed = ((lr - lr_end) * remaining ** power + lr_end) / lr
    factor = np.where(steps < nw, _ref_warmup(steps, nw), np.where(steps > total, lr_end / lr, decayed))
    return lr * factor


def _schedule(scheduler, lr, total, extra=3):
    info = TrainStepInfo(optim.AdamConfig(lr=lr))
    out = []
    for step in range(total + 1 + extra):
        info.optimization_step = step
        res = scheduler._step(info)
        assert isinstance(res, list) and len(res) == 1
        assert scheduler.get_last_lr() == res
        assert scheduler.get_lr(info) == res
        out.append(res[0])
    return np.arange(total + 1 + extra, dtype=np.float64), np.array(out)


TOTALS_WARMUPS = [(10, 0.0), (10, 0.15), (100, 0.002), (100, 0.1), (1000, 0.05), (37, 0.5), (8, 0.99)]


@pytest.mark.parametrize("total, warmup", TOTALS_WARMUPS)
def test_constant_warmup_schedule(total, warmup):
    steps, got = _schedule(lr_scheduler.ConstantWarmupLRScheduler(total, warmup=warmup), 0.3, total)
    np.testing.assert_allclose(got, ref_constant(steps, total, warmup, 0.3), rtol=1e-12, atol=0)


@pytest.mark.parametrize("total, warmup", TOTALS_WARMUPS)
def test_linear_warmup_schedule(total, warmup):
    steps, got = _schedule(lr_scheduler.LinearWarmupLRScheduler(total, warmup=warmup), 0.3, total)
    np.testing.assert_allclose(got, ref_linear(steps, total, warmup, 0.3), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("cycles", [0.5, 1.0, 2.5])
@pytest.mark.parametrize("total, warmup", TOTALS_WARMUPS)
def test_cosine_warmup_schedule(total, warmup, cycles):
    steps, got = _schedule(lr_scheduler.CosineWarmupLRScheduler(total, cycles=cycles, warmup=warmup), 0.3, total)
    np.testing.assert_allclose(got, ref_cosine(steps, total, warmup, 0.3, cycles), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("power, lr_end", [(1.0, 1e-7), (2.0, 0.0), (0.5, 1e-3), (0.0, 1e-2), (3.0, 0.05)])
@pytest.mark.parametrize("total, warmup", TOTALS_WARMUPS)
def test_poly_warmup_schedule(total, warmup, power, lr_end):
    sched = lr_scheduler.PolyWarmupLRScheduler(total, lr_end=lr_end, power=power, warmup=warmup)
    steps, got = _schedule(sched, 0.3, total)
    np.testing.assert_allclose(got, ref_poly(steps, total, warmup, 0.3, lr_end, power), rtol=1e-12, atol=1e-15)


def test_schedules_by_hand():
    """A few values worked out by hand: lr 1, 100 steps, 10 of warm-up."""
    info = TrainStepInfo(optim.SGDConfig(lr=1.0))

    def at(s, step):
        info.optimization_step = step
        return s.get_lr(info)[0]

    lin = lr_scheduler.LinearWarmupLRScheduler(100, warmup=0.1)
    assert [at(lin, s) for s in (0, 5, 10, 55, 100, 120)] == pytest.approx([0, 0.5, 1, 0.5, 0, 0])
    cos = lr_scheduler.CosineWarmupLRScheduler(100, warmup=0.1)
    assert [at(cos, s) for s in (5, 10, 55, 100)] == pytest.approx([0.5, 1, 0.5, 0])
    cos2 = lr_scheduler.CosineWarmupLRScheduler(100, cycles=1.0, warmup=0.0)
    assert [at(cos2, s) for s in (0, 25, 50, 75, 100)] == pytest.approx([1, 0.5, 0, 0.5, 1])
    poly = lr_scheduler.PolyWarmupLRScheduler(100, lr_end=0.0, power=2.0, warmup=0.1)
    assert [at(poly, s) for s in (5, 10, 55, 100, 101)] == pytest.approx([0.5, 1, 0.25, 0, 0])
    const = lr_scheduler.ConstantWarmupLRScheduler(100, warmup=0.1)
    assert [at(const, s) for s in (0, 5, 10, 1000)] == pytest.approx([0, 0.5, 1, 1])
    # default warm-up: 0.002 * 100 = 0.2 steps -> step 0 is warm-up (0 / max(1, 0.2) = 0)
    assert at(lr_scheduler.LinearWarmupLRScheduler(100), 0) == 0.0


def test_scheduler_defaults_and_base():
    c = lr_scheduler.CosineWarmupLRScheduler(512)
    assert (c.total_steps, c.cycles, c.warmup) == (512, 0.5, 0.002)
    p = lr_scheduler.PolyWarmupLRScheduler(512)
    assert (p.total_steps, p.lr_end, p.power, p.warmup) == (512, 1e-7, 1.0, 0.002)
    assert lr_scheduler.LinearWarmupLRScheduler(512).warmup == 0.002
    assert lr_scheduler.ConstantWarmupLRScheduler(512).warmup == 0.002
    assert optim.LinearWarmupLRScheduler is lr_scheduler.LinearWarmupLRScheduler
    base = lr_scheduler._LRScheduler()
    assert base.get_last_lr() == []
    info = TrainStepInfo(optim.SGDConfig())
    with pytest.raises(NotImplementedError):
        base.get_lr(info)
    with pytest.raises(NotImplementedError):
        base._step(info)

    class Halving(lr_scheduler._LRScheduler):
        def get_lr(self, train_step_info):
            return [train_step_info.optimizer_config.lr * 0.5 ** train_step_info.optimization_step]

    h = Halving()
    info.optimization_step = 3
    assert h._step(info) == [0.001 / 8] and h.get_last_lr() == [0.001 / 8]


SCHED_BAD = [
    (lr_scheduler.LinearWarmupLRScheduler, {"total_steps": 0}, "total_steps"),
    (lr_scheduler.LinearWarmupLRScheduler, {"total_steps": -5}, "total_steps"),
    (lr_scheduler.LinearWarmupLRScheduler, {"total_steps": 10.0}, "total_steps"),
    (lr_scheduler.LinearWarmupLRScheduler, {"total_steps": True}, "total_steps"),
    (lr_scheduler.LinearWarmupLRScheduler, {"total_steps": "10"}, "total_steps"),
    (lr_scheduler.ConstantWarmupLRScheduler, {"total_steps": 10, "warmup": 1.0}, "warmup"),
    (lr_scheduler.ConstantWarmupLRScheduler, {"total_steps": 10, "warmup": -0.1}, "warmup"),
    (lr_scheduler.ConstantWarmupLRScheduler, {"total_steps": 10, "warmup": "0.1"}, "warmup"),
    (lr_scheduler.ConstantWarmupLRScheduler, {"total_steps": 10, "warmup": float("nan")}, "warmup"),
    (lr_scheduler.CosineWarmupLRScheduler, {"total_steps": 10, "cycles": 0.0}, "cycles"),
    (lr_scheduler.CosineWarmupLRScheduler, {"total_steps": 10, "cycles": -1.0}, "cycles"),
    (lr_scheduler.CosineWarmupLRScheduler, {"total_steps": 10, "cycles": None}, "cycles"),
    (lr_scheduler.CosineWarmupLRScheduler, {"total_steps": 10, "warmup": 2.0}, "warmup"),
    (lr_scheduler.PolyWarmupLRScheduler, {"total_steps": 10, "power": -1.0}, "power"),
    (lr_scheduler.PolyWarmupLRScheduler, {"total_steps": 10, "power": "2"}, "power"),
    (lr_scheduler.PolyWarmupLRScheduler, {"total_steps": 10, "lr_end": -1e-3}, "lr_end"),
    (lr_scheduler.PolyWarmupLRScheduler, {"total_steps": 10, "lr_end": INF}, "lr_end"),
    (lr_scheduler.PolyWarmupLRScheduler, {}, "total_steps"),
]


@pytest.mark.parametrize("cls, kwargs, name", SCHED_BAD)
def test_scheduler_argument_validation(cls, kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        cls(**kwargs)


def test_poly_lr_end_must_be_below_lr():
    sched = lr_scheduler.PolyWarmupLRScheduler(10, lr_end=0.01)
    with pytest.raises(ValueError, match="lr_end"):
        sched.get_lr(TrainStepInfo(optim.SGDConfig(lr=0.01)))


def test_scheduler_warmup_accepts_int_zero():
    s = lr_scheduler.LinearWarmupLRScheduler(10, warmup=0)
    assert s.warmup == 0.0
    assert s.get_lr(TrainStepInfo(optim.SGDConfig(lr=1.0)))[0] == 1.0


# ------------------------------------------------------------------------------------------------
# Loss scalers


def _info(all_finite):
    return TrainStepInfo(optim.SGDConfig(), all_finite=all_finite)


def test_dynamic_loss_scaler_defaults():
    s = amp.DynamicLossScaler()
    assert isinstance(s, amp.LossScaler)
    assert s.automatic_update is True
    assert s.loss_scale == 65536.0 and isinstance(s.loss_scale, float)
    assert s.up_scale_window == 2000
    assert s.min_loss_scale == 1.0 and s.max_loss_scale == 16777216.0
    assert s.input_name is None


def test_dynamic_loss_scaler_sequence():
    s = amp.DynamicLossScaler(loss_scale=8.0, up_scale_window=3, min_loss_scale=2.0, max_loss_scale=32.0)
    T, F = True, False
    sequence = [
        (F, 4.0),                          # overflow halves
        (T, 4.0), (T, 4.0), (T, 8.0),      # 3 finite steps double
        (T, 8.0), (T, 8.0), (F, 4.0),      # an overflow restarts the window
        (T, 4.0), (T, 4.0), (T, 8.0),
        (T, 8.0), (T, 8.0), (T, 16.0),
        (T, 16.0), (T, 16.0), (T, 32.0),
        (T, 32.0), (T, 32.0), (T, 32.0),   # clamped at max_loss_scale
        (F, 16.0), (F, 8.0), (F, 4.0), (F, 2.0), (F, 2.0),  # clamped at min_loss_scale
        (T, 2.0), (T, 2.0), (F, 2.0), (T, 2.0), (T, 2.0), (T, 4.0),
    ]
    for i, (finite, expected) in enumerate(sequence):
        assert s.update(_info(finite)) == expected, i
        assert s.loss_scale == expected, i


def test_dynamic_loss_scaler_window_of_one_and_reset():
    s = amp.DynamicLossScaler(loss_scale=1.0, up_scale_window=1)
    assert [s.update(_info(True)) for _ in range(3)] == [2.0, 4.0, 8.0]
    s.reset()
    assert s.loss_scale == 1.0
    s = amp.DynamicLossScaler(loss_scale=16.0, up_scale_window=3)
    s.update(_info(True))
    s.update(_info(True))
    s.update(_info(False))
    assert s.loss_scale == 8.0
    s.update(_info(True))
    s.update(_info(True))
    s.reset()  # back to 16 and the two stable steps forgotten
    assert s.loss_scale == 16.0
    assert [s.update(_info(True)) for _ in range(3)] == [16.0, 16.0, 32.0]


def test_dynamic_loss_scaler_manual_update():
    """automatic_update=False: the trainer leaves the scale alone; explicit update() still applies."""
    s = amp.DynamicLossScaler(automatic_update=False, loss_scale=1 << 8, up_scale_window=2)
    assert s.automatic_update is False and s.loss_scale == 256.0
    assert s.update(_info(True)) == 256.0
    assert s.update(_info(True)) == 512.0
    assert s.update(_info(False)) == 256.0


@pytest.mark.parametrize("kwargs, name", [
    ({"automatic_update": 1}, "automatic_update"),
    ({"loss_scale": 0.0}, "loss_scale"),
    ({"loss_scale": -2.0}, "loss_scale"),
    ({"loss_scale": INF}, "loss_scale"),
    ({"loss_scale": "1"}, "loss_scale"),
    ({"up_scale_window": 0}, "up_scale_window"),
    ({"up_scale_window": 2.0}, "up_scale_window"),
    ({"min_loss_scale": 0.0}, "min_loss_scale"),
    ({"max_loss_scale": None}, "max_loss_scale"),
    ({"min_loss_scale": 4.0, "max_loss_scale": 2.0}, "max_loss_scale"),
])
def test_dynamic_loss_scaler_validation(kwargs, name):
    with pytest.raises(ValueError, match=name):
        amp.DynamicLossScaler(**kwargs)


def test_loss_scaler_base():
    s = amp.LossScaler(loss_scale=float(1 << 16))
    assert s.loss_scale == 65536.0 and s.input_name is None
    with pytest.raises(NotImplementedError):
        s.reset()
    with pytest.raises(NotImplementedError):
        s.update(_info(True))
    s.loss_scale = 2.0
    assert s.loss_scale == 2.0
    for bad in (0.0, -1.0, INF, float("nan"), "2", None):
        with pytest.raises(ValueError, match="loss_scale"):
            s.loss_scale = bad
    assert s.loss_scale == 2.0
    s.input_name = "loss_scale_input"
    assert s.input_name == "loss_scale_input"
    for bad in ("", 3, None):
        with pytest.raises(ValueError, match="input_name"):
            s.input_name = bad
    with pytest.raises(ValueError, match="loss_scale"):
        amp.LossScaler(0)

    class Fixed(amp.LossScaler):
        def reset(self):
            self.loss_scale = 4.0

        def update(self, train_step_info):
            self.loss_scale = 4.0 if train_step_info.all_finite else 1.0
            return self.loss_scale

    f = Fixed(4.0)
    assert f.update(_info(False)) == 1.0
    f.reset()
    assert f.loss_scale == 4.0


# ------------------------------------------------------------------------------------------------
# TrainStepInfo


def test_train_step_info_defaults_and_assignment():
    cfg = optim.AdamConfig()
    info = TrainStepInfo(cfg)
    assert info.optimizer_config is cfg
    assert info.all_finite is True and info.fetches == [] and info.optimization_step == 0 and info.step == 0
    assert TrainStepInfo(cfg).fetches is not info.fetches  # no shared mutable default
    info = TrainStepInfo(optimizer_config=cfg, all_finite=False, fetches=["loss"], optimization_step=3, step=7)
    assert (info.all_finite, info.fetches, info.optimization_step, info.step) == (False, ["loss"], 3, 7)
    info.all_finite = True
    info.fetches = []
    info.optimization_step += 1
    info.step = 0
    assert (info.all_finite, info.fetches, info.optimization_step, info.step) == (True, [], 4, 0)
    assert "AdamOptimizer" in repr(info)


@pytest.mark.parametrize("field, bad", [
    ("optimizer_config", None), ("optimizer_config", {"lr": 0.1}),
    ("all_finite", 1), ("all_finite", None), ("all_finite", np.bool_(True)),
    ("fetches", "loss"), ("fetches", ["loss", 1]), ("fetches", ("loss",)),
    ("optimization_step", -1), ("optimization_step", 1.0), ("optimization_step", True),
    ("step", -1), ("step", "0"), ("step", False),
])
def test_train_step_info_validation(field, bad):
    kwargs = {"optimizer_config": optim.SGDConfig()}
    kwargs[field] = bad
    with pytest.raises(ValueError, match=field):
        TrainStepInfo(**kwargs)
    info = TrainStepInfo(optim.SGDConfig())
    before = getattr(info, field)
    with pytest.raises(ValueError, match=field):
        setattr(info, field, bad)
    assert getattr(info, field) is before


# ------------------------------------------------------------------------------------------------
# Under the onnxruntime alias


def test_onnxruntime_training_script_under_the_alias(tmp_path):
    script = tmp_path / "ort_optim.py"
    script.write_text(textwrap.dedent("""
        import json
        from onnxruntime.training import optim, amp
        from onnxruntime.training.optim.lr_scheduler import LinearWarmupLRScheduler
        from onnxruntime.training.amp.loss_scaler import DynamicLossScaler

        cfg = optim.AdamConfig(lr=0.01, weight_decay_mode=optim.AdamConfig.DecayMode.BEFORE_WEIGHT_UPDATE)
        sched = optim.lr_scheduler.PolyWarmupLRScheduler(total_steps=512, warmup=0.002, power=0.5)
        scaler = amp.DynamicLossScaler(loss_scale=float(1 << 16))
        print(json.dumps({"name": cfg.name, "scaler": scaler.loss_scale, "same": LinearWarmupLRScheduler is
                          optim.LinearWarmupLRScheduler and DynamicLossScaler is amp.DynamicLossScaler,
                          "power": sched.power}))
    """))
    proc = run_alias(script, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"name": "AdamOptimizer", "scaler": 65536.0,
                                                                "same": True, "power": 0.5}
