"""ORTTrainerOptions: every option key accepts a good value (read back as an attribute), rejects a
bad type and a bad range with its key path in the ValueError; defaults are the ones onnxruntime-
training's documentation gives; partial groups merge with defaults; unknown keys are refused at
every level; check_supported raises NotImplementedError for each option onnxtrain does not
implement, warns for those without effect and is silent for the implemented ones."""
import re
import sys
import types
import warnings

import numpy as np
import pytest

import onnxtrain
from onnxtrain.training import orttrainer_options as oto
from onnxtrain.training.orttrainer_options import (ORTTrainerOptions, PropagateCastOpsStrategy, check_supported,
                                                   ignored_options, unsupported_enabled)

# The defaults, transcribed from the seed's schema (onnxruntime-training's ORTTrainer documentation):
# the last schema's onnx_opset_version (min 12, max 14, default 14); propagate_cast_ops_config under
# the names its code and its keyword list use (strategy: FLOOD_FILL, level: 1, allow: []).
SEED_DEFAULTS = {
    "batch": {"gradient_accumulation_steps": 1},
    "device": {"id": "cuda", "mem_limit": 0},
    "distributed": {
        "world_rank": 0, "world_size": 1, "local_rank": 0, "data_parallel_size": 1, "horizontal_parallel_size": 1,
        "pipeline_parallel": {"pipeline_parallel_size": 1, "num_pipeline_micro_batches": 1,
                              "pipeline_cut_info_string": "", "sliced_schema": {}, "sliced_axes": {},
                              "sliced_tensor_names": []},
        "allreduce_post_accumulation": False,
        "deepspeed_zero_optimization": {"stage": 0},
        "enable_adasum": False,
    },
    "lr_scheduler": None,
    "mixed_precision": {"enabled": False, "loss_scaler": None},
    "graph_transformer": {
        "attn_dropout_recompute": False, "gelu_recompute": False, "transformer_layer_recompute": False,
        "number_recompute_layers": 0,
        "propagate_cast_ops_config": {"strategy": PropagateCastOpsStrategy.FLOOD_FILL, "level": 1, "allow": []},
    },
    "utils": {"frozen_weights": [], "grad_norm_clip": True, "memory_efficient_gradient": False,
              "run_symbolic_shape_infer": False},
    "debug": {
        "deterministic_compute": False, "check_model_export": False,
        "graph_save_paths": {"model_after_graph_transforms_path": "", "model_with_gradient_graph_path": "",
                             "model_with_training_graph_path": "",
                             "model_with_training_graph_after_optimization_path": ""},
    },
    "_internal_use": {"enable_internal_postprocess": True, "extra_postprocess": None, "onnx_opset_version": 14,
                      "enable_onnx_contrib_ops": True},
    "provider_options": {},
    "session_options": None,
}

# Options whose value is a dict of user keys (leaves, not groups).
MAP_KEYS = {"distributed.pipeline_parallel.sliced_schema", "distributed.pipeline_parallel.sliced_axes",
            "provider_options"}
GROUPS = ["batch", "device", "distributed", "distributed.pipeline_parallel", "distributed.deepspeed_zero_optimization",
          "mixed_precision", "graph_transformer", "graph_transformer.propagate_cast_ops_config", "utils", "debug",
          "debug.graph_save_paths", "_internal_use"]


def _flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        path = prefix + k
        if isinstance(v, dict) and path not in MAP_KEYS:
            out.update(_flatten(v, path + "."))
        else:
            out[path] = v
    return out


def _nest(path, value):
    for name in reversed(path.split(".")):
        value = {name: value}
    return value


def _attr(opts, path):
    for name in path.split("."):
        opts = getattr(opts, name)
    return opts._as_dict() if isinstance(opts, ORTTrainerOptions) else opts


# --- instances for the typed options -----------------------------------------------------------

def _real_or_stand_in(module, class_name, method):
    """A subclass of onnxtrain's class where its module exists, else of a stand-in of that name."""
    try:
        base = getattr(__import__(module, fromlist=[class_name]), class_name)
    except (ImportError, AttributeError):
        base = type(class_name, (), {method: lambda self, *a: None})
    return type("Custom" + class_name.strip("_"), (base,), {"__init__": lambda self: None,
                                                             method: lambda self, *a: None})


LRScheduler = _real_or_stand_in("onnxtrain.training.optim.lr_scheduler", "_LRScheduler", "get_lr")
LossScaler = _real_or_stand_in("onnxtrain.training.amp.loss_scaler", "LossScaler", "update")


def _postprocess(model):
    return model


# path -> (good non-default value, bad type, bad range or None)
CASES = {
    "batch.gradient_accumulation_steps": (4, "4", 0),
    "device.id": ("cpu", 0, None),
    "device.mem_limit": (2 * 1024 ** 3, 1.5, -1),
    "distributed.world_rank": (1, "1", -1),
    "distributed.world_size": (2, "2", 0),
    "distributed.local_rank": (1, 1.0, -1),
    "distributed.data_parallel_size": (2, "2", 0),
    "distributed.horizontal_parallel_size": (2, "2", 0),
    "distributed.pipeline_parallel.pipeline_parallel_size": (2, "2", 0),
    "distributed.pipeline_parallel.num_pipeline_micro_batches": (4, "4", 0),
    "distributed.pipeline_parallel.pipeline_cut_info_string": ("1264,1312", 1264, None),
    "distributed.pipeline_parallel.sliced_schema": ({"input_ids": [2, 64]}, ["input_ids"], {"input_ids": ["2"]}),
    "distributed.pipeline_parallel.sliced_axes": ({"input_ids": 0}, 0, {"input_ids": "0"}),
    "distributed.pipeline_parallel.sliced_tensor_names": (["input_ids"], "input_ids", [1]),
    "distributed.allreduce_post_accumulation": (True, 1, None),
    "distributed.deepspeed_zero_optimization.stage": (1, "1", 2),
    "distributed.enable_adasum": (True, "yes", None),
    "lr_scheduler": (LRScheduler(), object(), None),
    "mixed_precision.enabled": (True, 1, None),
    "mixed_precision.loss_scaler": (LossScaler(), 65536.0, None),
    "graph_transformer.attn_dropout_recompute": (True, 1, None),
    "graph_transformer.gelu_recompute": (True, 1, None),
    "graph_transformer.transformer_layer_recompute": (True, 1, None),
    "graph_transformer.number_recompute_layers": (3, "3", -1),
    "graph_transformer.propagate_cast_ops_config.strategy": (PropagateCastOpsStrategy.INSERT_AND_REDUCE, 1, None),
    "graph_transformer.propagate_cast_ops_config.level": (2, "2", -2),
    "graph_transformer.propagate_cast_ops_config.allow": (["Add", "MatMul"], "Add", [1]),
    "utils.frozen_weights": (["fc1.weight"], "fc1.weight", None),
    "utils.grad_norm_clip": (False, 0, None),
    "utils.memory_efficient_gradient": (True, 1, None),
    "utils.run_symbolic_shape_infer": (True, 1, None),
    "debug.deterministic_compute": (True, 1, None),
    "debug.check_model_export": (True, 1, None),
    "debug.graph_save_paths.model_after_graph_transforms_path": ("a.onnx", 1, None),
    "debug.graph_save_paths.model_with_gradient_graph_path": ("b.onnx", 1, None),
    "debug.graph_save_paths.model_with_training_graph_path": ("c.onnx", 1, None),
    "debug.graph_save_paths.model_with_training_graph_after_optimization_path": ("d.onnx", 1, None),
    "_internal_use.enable_internal_postprocess": (False, 0, None),
    "_internal_use.extra_postprocess": (_postprocess, 3, None),
    "_internal_use.onnx_opset_version": (13, "13", 15),
    "_internal_use.enable_onnx_contrib_ops": (False, 0, None),
    "provider_options": ({"CPUExecutionProvider": {"arena_extend_strategy": "kSameAsRequested"}},
                         ["CPUExecutionProvider"], {"CPUExecutionProvider": "kSameAsRequested"}),
    "session_options": (onnxtrain.SessionOptions(), {}, None),
}
RANGED = {p: c[2] for p, c in CASES.items() if c[2] is not None}
NULLABLE = {"lr_scheduler", "mixed_precision.loss_scaler", "graph_transformer.propagate_cast_ops_config.strategy",
            "_internal_use.extra_postprocess", "session_options"}
NOT_IMPLEMENTED = [
    "distributed.horizontal_parallel_size", "distributed.pipeline_parallel.pipeline_parallel_size",
    "distributed.pipeline_parallel.num_pipeline_micro_batches",
    "distributed.pipeline_parallel.pipeline_cut_info_string",
    "distributed.pipeline_parallel.sliced_schema", "distributed.pipeline_parallel.sliced_axes",
    "distributed.pipeline_parallel.sliced_tensor_names"]
NO_EFFECT = [
    "device.mem_limit",
    "graph_transformer.propagate_cast_ops_config.strategy", "graph_transformer.propagate_cast_ops_config.level",
    "graph_transformer.propagate_cast_ops_config.allow",
    "_internal_use.enable_onnx_contrib_ops"]
IMPLEMENTED = sorted(set(CASES) - set(NOT_IMPLEMENTED) - set(NO_EFFECT) - {"device.id"})


def _value_error(options, path, reason=None):
    with pytest.raises(ValueError) as e:
        ORTTrainerOptions(options)
    message = str(e.value)
    assert message.startswith("Invalid options: ")
    # onnxruntime's nesting: "a.b[2]" is reported as {'a': [{'b': [{2: [...]}]}]}
    parts = [int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\[\d+\]|[^.\[]+", path)]
    assert all(f"{part!r}: [" in message for part in parts), message
    if reason:
        assert reason in message, message
    return message


# --- the schema ---------------------------------------------------------------------------------

def test_every_option_key_has_cases_and_a_classification():
    keys = set(_flatten(SEED_DEFAULTS))
    assert len(keys) == 43  # onnxruntime 1.13's schema
    assert set(CASES) == keys
    assert set(oto.OPTION_SUPPORT) == keys
    assert set(IMPLEMENTED) | set(NOT_IMPLEMENTED) | set(NO_EFFECT) | {"device.id"} == keys


@pytest.mark.parametrize("given", [{}, None, {g: {} for g in SEED_DEFAULTS if isinstance(SEED_DEFAULTS[g], dict)
                                              and g != "provider_options"}])
def test_defaults_match_the_seed(given):
    opts = ORTTrainerOptions(given)
    assert opts._validated_opts == SEED_DEFAULTS
    for path, default in _flatten(SEED_DEFAULTS).items():
        assert _attr(opts, path) == default, path
    assert opts.mixed_precision.enabled is False
    assert opts.graph_transformer.propagate_cast_ops_config.strategy is PropagateCastOpsStrategy.FLOOD_FILL


def test_defaults_are_fresh_containers():
    a, b = ORTTrainerOptions(), ORTTrainerOptions()
    a.utils.frozen_weights.append("w")
    a._validated_opts["distributed"]["pipeline_parallel"]["sliced_axes"]["x"] = 1
    assert b.utils.frozen_weights == [] and ORTTrainerOptions().utils.frozen_weights == []
    assert b._validated_opts["distributed"]["pipeline_parallel"]["sliced_axes"] == {}


@pytest.mark.parametrize("path", sorted(CASES))
def test_good_value_accepted_and_read_back(path):
    good = CASES[path][0]
    opts = ORTTrainerOptions(_nest(path, good))
    assert _attr(opts, path) == good
    if not isinstance(good, (bool, int, str, list, dict)):
        assert _attr(opts, path) is good
    # The rest of the options keep their defaults.
    for other, default in _flatten(SEED_DEFAULTS).items():
        if other != path:
            assert _attr(opts, other) == default, other


@pytest.mark.parametrize("path", sorted(CASES))
def test_bad_type_rejected_naming_the_key(path):
    bad = CASES[path][1]
    reason = "must be callable or None" if path == "_internal_use.extra_postprocess" else "must be of"
    _value_error(_nest(path, bad), path, reason)


@pytest.mark.parametrize("path", sorted(RANGED))
def test_bad_range_rejected_naming_the_key(path):
    message = _value_error(_nest(path, RANGED[path]), path)
    assert re.search(r"(min|max) value is -?\d+|must be of", message)


@pytest.mark.parametrize("path,value,where,reason", [
    ("batch.gradient_accumulation_steps", 0, "batch.gradient_accumulation_steps", "min value is 1"),
    ("device.mem_limit", -1, "device.mem_limit", "min value is 0"),
    ("distributed.world_size", 0, "distributed.world_size", "min value is 1"),
    ("distributed.deepspeed_zero_optimization.stage", 2, "distributed.deepspeed_zero_optimization.stage",
     "max value is 1"),
    ("distributed.deepspeed_zero_optimization.stage", -1, "distributed.deepspeed_zero_optimization.stage",
     "min value is 0"),
    ("graph_transformer.propagate_cast_ops_config.level", -2, "graph_transformer.propagate_cast_ops_config.level",
     "min value is -1"),
    ("_internal_use.onnx_opset_version", 11, "_internal_use.onnx_opset_version", "min value is 12"),
    ("_internal_use.onnx_opset_version", 15, "_internal_use.onnx_opset_version", "max value is 14"),
    ("distributed.pipeline_parallel.sliced_schema", {"x": [1, "2"]},
     "distributed.pipeline_parallel.sliced_schema.x[1]", "must be of integer type"),
    ("distributed.pipeline_parallel.sliced_axes", {"x": 1.0}, "distributed.pipeline_parallel.sliced_axes.x",
     "must be of integer type"),
    ("distributed.pipeline_parallel.sliced_tensor_names", ["a", 2],
     "distributed.pipeline_parallel.sliced_tensor_names[1]", "must be of string type"),
    ("provider_options", {"CPUExecutionProvider": 1}, "provider_options.CPUExecutionProvider",
     "must be of dict type"),
    ("distributed.pipeline_parallel.sliced_axes", {1: 0}, "distributed.pipeline_parallel.sliced_axes",
     "must be of string type"),
])
def test_range_and_item_messages(path, value, where, reason):
    _value_error(_nest(path, value), where, reason)


@pytest.mark.parametrize("path", sorted(CASES))
def test_none(path):
    if path in NULLABLE:
        assert _attr(ORTTrainerOptions(_nest(path, None)), path) is None
    else:
        _value_error(_nest(path, None), path, "null value not allowed")


def test_integer_and_boolean_are_distinct():
    _value_error({"batch": {"gradient_accumulation_steps": True}}, "batch.gradient_accumulation_steps",
                 "must be of integer type")
    _value_error({"mixed_precision": {"enabled": 1}}, "mixed_precision.enabled", "must be of boolean type")
    opts = ORTTrainerOptions({"batch": {"gradient_accumulation_steps": np.int64(3)}})
    assert opts.batch.gradient_accumulation_steps == 3 and type(opts.batch.gradient_accumulation_steps) is int


def test_all_errors_reported_together():
    message = _value_error({"batch": {"gradient_accumulation_steps": 0}, "mixed_precision": {"enabled": "no"}},
                           "batch.gradient_accumulation_steps")
    assert message == ("Invalid options: {'batch': [{'gradient_accumulation_steps': ['min value is 1']}], "
                       "'mixed_precision': [{'enabled': ['must be of boolean type']}]}")


@pytest.mark.parametrize("group", GROUPS)
def test_group_must_be_a_dict(group):
    _value_error(_nest(group, 3), group, "must be of dict type")


@pytest.mark.parametrize("group", [""] + GROUPS)
def test_unknown_key_rejected_at_every_level(group):
    path = f"{group}.bogus" if group else "bogus"
    _value_error(_nest(path, 1), path, "unknown field")


@pytest.mark.parametrize("path", ["utils.invertible_layer_norm_gradient", "distributed.pipeline_parallel_size",
                                  "graph_transformer.gelu_approximation", "debug.graph_save_paths."
                                  "model_with_loss_function_path", "device.cuda_mem_limit"])
def test_keys_not_in_the_last_schema_are_unknown(path):
    _value_error(_nest(path, True), path, "unknown field")


def test_partial_groups_merge_with_defaults():
    opts = ORTTrainerOptions({
        "distributed": {"pipeline_parallel": {"pipeline_cut_info_string": "1,2"},
                        "deepspeed_zero_optimization": {}},
        "debug": {"graph_save_paths": {"model_with_gradient_graph_path": "g.onnx"}},
        "graph_transformer": {"propagate_cast_ops_config": {"level": 2}},
    })
    expected = _flatten(SEED_DEFAULTS)
    expected["distributed.pipeline_parallel.pipeline_cut_info_string"] = "1,2"
    expected["debug.graph_save_paths.model_with_gradient_graph_path"] = "g.onnx"
    expected["graph_transformer.propagate_cast_ops_config.level"] = 2
    assert {p: _attr(opts, p) for p in expected} == expected


def test_propagate_cast_ops_long_names_from_the_documented_schema():
    opts = ORTTrainerOptions({"graph_transformer": {"propagate_cast_ops_config": {
        "propagate_cast_ops_strategy": PropagateCastOpsStrategy.NONE, "propagate_cast_ops_level": -1,
        "propagate_cast_ops_allow": ["Add"]}}})
    config = opts.graph_transformer.propagate_cast_ops_config
    assert (config.strategy, config.level, config.allow) == (PropagateCastOpsStrategy.NONE, -1, ["Add"])
    _value_error({"graph_transformer": {"propagate_cast_ops_config": {"propagate_cast_ops_level": "x"}}},
                 "graph_transformer.propagate_cast_ops_config.level", "must be of integer type")
    _value_error({"graph_transformer": {"propagate_cast_ops_config": {"level": 1, "propagate_cast_ops_level": 2}}},
                 "graph_transformer.propagate_cast_ops_config.propagate_cast_ops_level", "given twice")


def test_strategy_flags_combine():
    both = PropagateCastOpsStrategy.INSERT_AND_REDUCE | PropagateCastOpsStrategy.FLOOD_FILL
    opts = ORTTrainerOptions({"graph_transformer": {"propagate_cast_ops_config": {"strategy": both}}})
    assert opts.graph_transformer.propagate_cast_ops_config.strategy & PropagateCastOpsStrategy.FLOOD_FILL
    assert {n: int(s) for n, s in PropagateCastOpsStrategy.__members__.items()} == {
        "NONE": 0, "INSERT_AND_REDUCE": 1, "FLOOD_FILL": 2, "REMOVE_INPUT_OUTPUT_UP_DOWN_CASTS": 4}


# --- typed options --------------------------------------------------------------------------------

def test_torch_lr_scheduler_rejected():
    torch = pytest.importorskip("torch")
    sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    _value_error({"lr_scheduler": torch.optim.lr_scheduler.StepLR(sgd, 1)}, "lr_scheduler",
                 "must be of optim.lr_scheduler._LRScheduler type")


@pytest.mark.parametrize("path,module,class_name,method", [
    ("lr_scheduler", "onnxtrain.training.optim.lr_scheduler", "_LRScheduler", "get_lr"),
    ("mixed_precision.loss_scaler", "onnxtrain.training.amp.loss_scaler", "LossScaler", "update"),
])
def test_instance_checks_use_onnxtrain_classes_when_present(monkeypatch, path, module, class_name, method):
    base = type(class_name, (), {method: lambda self, *a: None})
    fake = types.ModuleType(module)
    setattr(fake, class_name, base)
    monkeypatch.setitem(sys.modules, module, fake)
    subclass = type("Sub", (base,), {})
    assert _attr(ORTTrainerOptions(_nest(path, subclass())), path).__class__ is subclass
    # A look-alike of the same name that is not onnxtrain's class is refused once that class exists.
    lookalike = type(class_name, (), {method: lambda self, *a: None})
    _value_error(_nest(path, lookalike()), path, "type")


@pytest.mark.parametrize("path,module,class_name,method", [
    ("lr_scheduler", "onnxtrain.training.optim.lr_scheduler", "_LRScheduler", "get_lr"),
    ("mixed_precision.loss_scaler", "onnxtrain.training.amp.loss_scaler", "LossScaler", "update"),
])
def test_instance_checks_duck_type_without_the_module(monkeypatch, path, module, class_name, method):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    base = type(class_name, (), {method: lambda self, *a: None})
    assert isinstance(_attr(ORTTrainerOptions(_nest(path, type("Sub", (base,), {})())), path), base)
    _value_error(_nest(path, type(class_name, (), {})()), path, "type")       # no method
    _value_error(_nest(path, type("Other", (), {method: None})()), path, "type")  # not that class


def test_session_options_and_callable():
    so = onnxtrain.SessionOptions()
    so.intra_op_num_threads = 2
    opts = ORTTrainerOptions({"session_options": so, "_internal_use": {"extra_postprocess": _postprocess}})
    assert opts.session_options is so and opts._internal_use.extra_postprocess is _postprocess


# --- the object -----------------------------------------------------------------------------------

def test_original_and_validated_opts_and_repr():
    given = {"batch": {"gradient_accumulation_steps": 2}}
    opts = ORTTrainerOptions(given)
    assert opts._original_opts == given and opts._original_opts is not given
    assert opts._validated_opts["batch"] == {"gradient_accumulation_steps": 2}
    assert opts.batch._validated_opts == {"gradient_accumulation_steps": 2}
    text = repr(opts)
    assert text.startswith("{'batch': {'gradient_accumulation_steps': 2}, 'device': {'id': 'cuda', 'mem_limit': 0}")
    assert "_original_opts" not in text and "_validated_opts" not in text and "_main_class_name" not in text
    assert isinstance(opts.batch, ORTTrainerOptions) and opts.batch._main_class_name == "ORTTrainerOptions"


def test_validate_false_skips_validation_and_defaults():
    opts = ORTTrainerOptions({"anything": {"x": 1}}, _validate=False)
    assert opts.anything.x == 1 and "batch" not in opts
    assert unsupported_enabled(opts) == []  # absent options read as their defaults


def test_key_access():
    opts = ORTTrainerOptions({"provider_options": {"CPUExecutionProvider": {"k": "v"}},
                              "distributed": {"pipeline_parallel": {"sliced_axes": {"bert.input-ids": 1}}}})
    assert opts["batch"]["gradient_accumulation_steps"] == 1
    assert opts.provider_options["CPUExecutionProvider"]["k"] == "v"
    assert opts.distributed.pipeline_parallel.sliced_axes["bert.input-ids"] == 1
    assert list(opts) == list(SEED_DEFAULTS) == opts.keys()
    assert "batch" in opts and "_validated_opts" not in opts and "nope" not in opts
    assert opts.get("nope", 7) == 7
    with pytest.raises(KeyError):
        opts["_original_opts"]


def test_user_containers_are_copied():
    frozen = ["w1"]
    opts = ORTTrainerOptions({"utils": {"frozen_weights": frozen}})
    frozen.append("w2")
    assert opts.utils.frozen_weights == ["w1"]


def test_options_from_options_revalidates_current_attributes():
    opts = ORTTrainerOptions({"batch": {"gradient_accumulation_steps": 2}})
    opts.batch.gradient_accumulation_steps = 3
    copy = ORTTrainerOptions(opts)
    assert copy.batch.gradient_accumulation_steps == 3 and copy._original_opts == opts._original_opts
    opts.batch.gradient_accumulation_steps = 0
    _value_error(opts, "batch.gradient_accumulation_steps", "min value is 1")


def test_options_must_be_a_dict():
    with pytest.raises(TypeError):
        ORTTrainerOptions([("batch", {})])


# --- what onnxtrain implements ----------------------------------------------------------------------

def _check_quietly(options):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return check_supported(options)


@pytest.mark.parametrize("path", NOT_IMPLEMENTED)
def test_not_implemented_option_raises_naming_it(path):
    options = _nest(path, CASES[path][0])
    assert unsupported_enabled(options) == [path]
    with pytest.raises(NotImplementedError, match=re.escape(path)) as e:
        check_supported(ORTTrainerOptions(options))
    assert isinstance(e.value, onnxtrain.NotImplemented)
    assert oto.OPTION_SUPPORT[path][0] == "not implemented"


def test_not_implemented_options_named_together():
    options = {"distributed": {"horizontal_parallel_size": 4, "pipeline_parallel": {"pipeline_parallel_size": 2}}}
    with pytest.raises(NotImplementedError) as e:
        check_supported(options)
    message = str(e.value)
    for item in ("distributed.horizontal_parallel_size=4", "distributed.pipeline_parallel.pipeline_parallel_size=2"):
        assert item in message


@pytest.mark.parametrize("path", IMPLEMENTED)
def test_implemented_option_passes_silently(path):
    options = ORTTrainerOptions(_nest(path, CASES[path][0]))
    assert unsupported_enabled(options) == [] and ignored_options(options) == []
    assert _check_quietly(options) == []
    assert oto.OPTION_SUPPORT[path][0] == "implemented"


@pytest.mark.parametrize("path", NO_EFFECT)
def test_no_effect_option_warns_naming_it(path):
    options = ORTTrainerOptions(_nest(path, CASES[path][0]))
    assert unsupported_enabled(options) == []
    with pytest.warns(UserWarning, match=re.escape(path)):
        assert check_supported(options) == [path]
    assert oto.OPTION_SUPPORT[path][0] == "no effect"
    # At its default it says nothing.
    assert _check_quietly(ORTTrainerOptions(_nest(path, _flatten(SEED_DEFAULTS)[path]))) == []


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "CPU"])
def test_cpu_device(device):
    assert _check_quietly({"device": {"id": device}}) == []


def test_default_cuda_device_is_taken_silently():
    assert _check_quietly({}) == [] and _check_quietly({"device": {"mem_limit": 0}}) == []


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_named_cuda_device_runs_on_cpu_with_a_warning(device):
    with pytest.warns(UserWarning, match="device.id='cuda.*training runs on CPU"):
        assert check_supported({"device": {"id": device}}) == ["device.id"]


def test_cuda_device_set_after_construction_warns():
    opts = ORTTrainerOptions()
    opts.device.id = "cuda:1"
    with pytest.warns(UserWarning, match="device.id"):
        check_supported(opts)


@pytest.mark.parametrize("device", ["mps", "xpu:0", "rocm", "cuda0", ""])
def test_other_devices_not_implemented(device):
    assert unsupported_enabled({"device": {"id": device}}) == ["device.id"]
    with pytest.raises(NotImplementedError, match="device.id"):
        check_supported({"device": {"id": device}})


def test_check_supported_reads_attributes_set_after_construction():
    opts = ORTTrainerOptions()
    opts.distributed.horizontal_parallel_size = 2
    with pytest.raises(NotImplementedError, match="distributed.horizontal_parallel_size"):
        check_supported(opts)


def test_check_supported_validates_a_dict():
    with pytest.raises(ValueError, match="'batch': \\[\\{'gradient_accumulation_steps'"):
        check_supported({"batch": {"gradient_accumulation_steps": 0}})


def test_module_docstring_table_matches_the_classification():
    doc = oto.__doc__
    row_re = r"^([\w.]+(?:\.\*)?)(?:\s+\([^)]*\))?\s{2,}(implemented|no effect|not implemented|see note)\b"
    rows = dict(re.findall(row_re, doc, re.M))
    words = {"implemented": "implemented", "no effect": "no effect", "not implemented": "not implemented",
             "device": "see note"}
    for path, (status, _) in oto.OPTION_SUPPORT.items():
        row = path if path in rows else next(
            (r for r in rows if r.endswith(".*") and path.startswith(r[:-1])), None)
        assert row is not None, f"{path} missing from the module docstring table"
        assert rows[row] == words[status], path
