"""TrainingParameters bound field by field from C++: every field round-trips, invalid values raise
ValueError naming the field (the previous value stays), unknown fields raise AttributeError, the
onnxruntime fields onnxtrain lacks are refused at session creation; optimizer_names(),
loss_names(), lr_schedule_names() and optimizer_hyperparameters() list what a TrainingSession
accepts (each name trains a step)."""
import copy

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot
from onnxtrain import _C
from onnxtrain.training._session import _UNSUPPORTED

# One non-default value per field the C++ struct has.
VALUES = {
    "loss_output_name": "loss2",
    "weights_to_train": {"W"},
    "weights_not_to_train": {"B"},
    "immutable_weights": {"C", "D"},
    "training_optimizer_name": "AdamOptimizer",
    "lr_params_feed_name": "LR",
    "optimizer_attributes": {"alpha": 0.5, "beta": 0.25},
    "optimizer_int_attributes": {"nesterov": 1},
    "optimizer_attributes_map": {"W": {"alpha": 0.25}},
    "optimizer_int_attributes_map": {"W": {"do_bias_correction": 0}},
    "gradient_accumulation_steps": 3,
    "enable_grad_norm_clip": True,
    "max_grad_norm": 0.5,
    "set_gradients_as_graph_outputs": True,
    "model_with_gradient_graph_path": "g.onnx",
    "model_with_training_graph_path": "t.onnx",
    "deterministic_compute": True,
    "portable_training_graph": True,
    "mixed_precision": "bf16",
    "use_mixed_precision": True,
    "loss_scale": 128.0,
    "lr_schedule": "cosine",
    "lr_schedule_params": {"eta0": 0.1, "total": 10.0},
    "world_rank": 1,
    "world_size": 2,
    "local_rank": 1,
    "data_parallel_size": 2,
    "horizontal_parallel_size": 2,
    "pipeline_parallel_size": 2,
    "allreduce_post_accumulation": True,
    "deepspeed_zero_stage": 1,
    "enable_adasum": True,
    "attn_dropout_recompute": True,
    "gelu_recompute": True,
    "transformer_layer_recompute": True,
    "number_recompute_layers": 2,
    "recompute_values": ("a", "b"),
    "recompute_budget_bytes": 1 << 20,
    "use_memory_efficient_gradient": True,
}


def test_the_table_covers_every_bound_field():
    bound = {k for k, v in vars(_C.TrainingParameters).items() if isinstance(v, property)}
    assert bound == set(VALUES)
    assert not bound & set(_UNSUPPORTED)


@pytest.mark.parametrize("field", sorted(VALUES))
def test_each_field_round_trips(field):
    p = ot.TrainingParameters()
    default = getattr(p, field)
    setattr(p, field, VALUES[field])
    assert getattr(p, field) == VALUES[field]
    assert getattr(p, field) != default
    q = copy.deepcopy(p)
    assert getattr(q, field) == VALUES[field]
    setattr(q, field, default)
    assert getattr(p, field) == VALUES[field], "the copy is independent"


def test_float32_values_read_back_as_written():
    p = ot.TrainingParameters()
    p.max_grad_norm = 0.9
    p.optimizer_attributes = {"alpha": 0.9}
    assert p.max_grad_norm == 0.9 and p.optimizer_attributes["alpha"] == 0.9
    p.gradient_accumulation_steps = np.int64(2)
    p.enable_grad_norm_clip = np.bool_(True)
    assert p.gradient_accumulation_steps == 2 and p.enable_grad_norm_clip is True


@pytest.mark.parametrize("field,value", [
    ("loss_output_name", 3),
    ("weights_to_train", "W0"),
    ("weights_not_to_train", ["W", 1]),
    ("immutable_weights", 5),
    ("training_optimizer_name", "RMSPropOptimizer"),
    ("lr_params_feed_name", ""),
    ("optimizer_attributes", {"alpha": "x"}),
    ("optimizer_attributes", 3),
    ("optimizer_int_attributes", {"nesterov": 0.5}),
    ("optimizer_attributes_map", {"W": 1}),
    ("optimizer_int_attributes_map", {"W": {"do_bias_correction": "no"}}),
    ("gradient_accumulation_steps", 0),
    ("gradient_accumulation_steps", 1.5),
    ("gradient_accumulation_steps", True),
    ("enable_grad_norm_clip", "yes"),
    ("enable_grad_norm_clip", 1),
    ("max_grad_norm", -1.0),
    ("max_grad_norm", "1"),
    ("set_gradients_as_graph_outputs", None),
    ("model_with_training_graph_path", None),
    ("lr_schedule", "bogus"),
    ("lr_schedule_params", {"nope": 1.0}),
    ("number_recompute_layers", -1),
    ("recompute_values", "a"),
    ("recompute_values", ["a", 1]),
    ("recompute_budget_bytes", -5),
])
def test_invalid_values_name_the_field_and_change_nothing(field, value):
    p = ot.TrainingParameters()
    before = getattr(p, field)
    with pytest.raises(ValueError, match=f"TrainingParameters.{field}"):
        setattr(p, field, value)
    assert getattr(p, field) == before


def test_unknown_fields_raise_attribute_error():
    p = ot.TrainingParameters()
    with pytest.raises(AttributeError, match="optimiser_name"):
        p.optimiser_name = "AdamOptimizer"
    with pytest.raises(AttributeError):
        p.nothing  # noqa: B018


def test_containers_are_read_only_views():
    p = ot.TrainingParameters()
    p.weights_to_train = {"W"}
    p.optimizer_attributes = {"alpha": 0.5}
    p.optimizer_attributes_map = {"W": {"alpha": 0.5}}
    with pytest.raises(AttributeError):
        p.weights_to_train.add("B")
    with pytest.raises(TypeError):
        p.optimizer_attributes["beta"] = 0.5
    with pytest.raises(TypeError):
        p.optimizer_attributes_map["W"]["beta"] = 0.5
    p.weights_to_train = p.weights_to_train | {"B"}  # the way to change one
    assert p.weights_to_train == {"W", "B"}


def linear_model(n_out=2):
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["y"])], "lin",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n_out])],
        [numpy_helper.from_array((0.3 * rng.standard_normal((3, n_out))).astype(np.float32), "W"),
         numpy_helper.from_array(np.zeros(n_out, np.float32), "B")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("field", sorted(_UNSUPPORTED))
def test_unsupported_onnxruntime_fields_are_refused_naming_them(field):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    model = ot.add_loss_output(linear_model())
    default = getattr(p, field)
    setattr(p, field, default)
    ot.TrainingSession(model, p)  # the default is accepted
    other = {bool: True, int: 7, float: 2.0, str: "x", dict: {"a": 1}, list: ["a"]}[type(default)]
    setattr(p, field, other)
    with pytest.raises(ValueError, match=field):
        ot.TrainingSession(model, p)


def one_step(model, params, feed):
    s = ot.TrainingSession(model, params)
    before = s.get_state()
    loss, = s.run(["loss"], {**feed, "Learning_Rate": np.array([0.1], np.float32)})
    assert np.isfinite(loss)
    assert s.step == 1
    after = s.get_state()
    assert any(before[k].tobytes() != after[k].tobytes() for k in before), "the step moved the weights"
    return s


REG_FEED = {"X": np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32),
            "label": np.random.default_rng(2).standard_normal((5, 2)).astype(np.float32)}


@pytest.mark.parametrize("name", ot.optimizer_names())
def test_each_optimizer_name_trains_a_step(name):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = name
    # Every hyper-parameter it lists is accepted, at its default.
    hyper = ot.optimizer_hyperparameters(name)
    p.optimizer_attributes = {k: v for k, v in hyper.items() if isinstance(v, float)}
    p.optimizer_int_attributes = {k: v for k, v in hyper.items() if isinstance(v, int)}
    one_step(ot.add_loss_output(linear_model()), p, REG_FEED)


def test_optimizer_names_are_the_ones_accepted():
    names = ot.optimizer_names()
    assert len(names) == len(set(names)) >= 6
    p = ot.TrainingParameters()
    with pytest.raises(ValueError) as e:
        p.training_optimizer_name = "NoSuchOptimizer"
    for n in names:
        assert n in str(e.value)
    with pytest.raises(ValueError, match="NoSuchOptimizer"):
        ot.optimizer_hyperparameters("NoSuchOptimizer")


def loss_feed(name):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 3)).astype(np.float32)
    if name in ("cross_entropy", "nll", "log"):
        return {"X": X, "label": np.array([0, 1, 1, 0, 1, 0], np.int64)}
    if name == "bce_with_logits":
        return {"X": X, "label": (rng.random((6, 2)) > 0.5).astype(np.float32)}
    return {"X": X, "label": rng.standard_normal((6, 2)).astype(np.float32)}


@pytest.mark.parametrize("name", ot.loss_names())
def test_each_loss_name_trains_a_step(name):
    model = ot.add_loss_output(linear_model(), name)
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    one_step(model, p, loss_feed(name))


def test_loss_names_are_the_ones_accepted():
    with pytest.raises(ValueError) as e:
        ot.add_loss_output(linear_model(), "hinge_of_doom")
    for n in ot.loss_names():
        assert n in str(e.value)


@pytest.mark.parametrize("name", ot.lr_schedule_names())
def test_each_schedule_name_trains_without_a_learning_rate_feed(name):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.lr_schedule = name
    p.lr_schedule_params = {"eta0": 0.1, "total": 10.0}
    s = ot.TrainingSession(ot.add_loss_output(linear_model()), p)
    s.run(["loss"], REG_FEED)
    assert s.step == 1


def test_schedule_parameters_without_a_schedule_are_refused():
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.lr_schedule_params = {"eta0": 0.1}
    with pytest.raises(ValueError, match="lr_schedule"):
        ot.TrainingSession(ot.add_loss_output(linear_model()), p)
