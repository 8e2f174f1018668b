"""onnxruntime-training's ``ORTTrainerOptions`` (``onnxruntime.training.ORTTrainerOptions`` under
the alias): the ORTTrainer's options, validated against onnxruntime-training's schema, defaults
filled in, read back as nested attributes (``opts.mixed_precision.enabled``).

The schema is onnxruntime-training's last one (1.10 - 1.13); where its documentation lists
``propagate_cast_ops_config`` keys as ``propagate_cast_ops_strategy`` / ``_level`` / ``_allow``,
the code read ``strategy`` / ``level`` / ``allow``: both spellings are accepted, stored under the
short names (``graph_transformer.allow_layer_norm_mod_precision``, gone from the schema since
onnxruntime 1.12, is an unknown field as in 1.13). A validation failure raises onnxruntime's
``ValueError("Invalid options: {...}")``: its schema validator's nested errors, e.g.
``{'mixed_precision': [{'enabled': ['must be of boolean type']}]}``.

What onnxtrain does with each option (``OPTION_SUPPORT`` holds the same table;
``check_supported`` applies it and the trainer calls it at construction):

==================================================  ===================  ===========================================
option                                              status               note
==================================================  ===================  ===========================================
batch.gradient_accumulation_steps                   implemented
device.id                                           see note             'cpu' / 'cpu:N': implemented. 'cuda' /
                                                                         'cuda:N': accepted, training runs on CPU
                                                                         (a UserWarning when the script names a
                                                                         CUDA device; the schema default 'cuda'
                                                                         is taken silently, so that scripts
                                                                         written for onnxruntime run unchanged).
                                                                         Anything else: not implemented.
device.mem_limit                                    no effect            caps onnxruntime's CUDA arena (ignored by
                                                                         onnxruntime on CPU too)
distributed.world_rank                              implemented          data parallelism over MPI (under mpirun
                                                                         the defaults take the launcher's values)
distributed.world_size                              implemented          ranks of the MPI job
distributed.local_rank                              implemented          rank on this machine
distributed.data_parallel_size                      implemented          1 or world_size
distributed.horizontal_parallel_size                not implemented      beyond 1 (NotImplementedError)
distributed.pipeline_parallel.*  (6 keys)           not implemented      any non-default value
distributed.allreduce_post_accumulation             implemented          reduce once per accumulated update
distributed.deepspeed_zero_optimization.stage       implemented          stage 1: optimizer state partitioned
distributed.enable_adasum                           implemented          Adasum (power-of-two world sizes)
lr_scheduler                                        implemented
mixed_precision.enabled                             implemented          float16 products, fp32 master weights,
                                                                         loss scaling, skipped inf/NaN updates
mixed_precision.loss_scaler                         implemented          as in onnxruntime (default
                                                                         DynamicLossScaler); ValueError without
                                                                         mixed precision
graph_transformer.attn_dropout_recompute            implemented          recomputed in the backward pass, same
graph_transformer.gelu_recompute                    implemented          gradients bit for bit (docs/memory.md)
graph_transformer.transformer_layer_recompute       implemented          idem
graph_transformer.number_recompute_layers           implemented          idem
graph_transformer.propagate_cast_ops_config.*       no effect            moves float16 Casts, which only mixed
  (strategy, level, allow)                                               precision inserts
utils.frozen_weights                                implemented
utils.grad_norm_clip                                implemented
utils.memory_efficient_gradient                     implemented          each weight updated as soon as its
                                                                         gradient is complete; with clipping,
                                                                         accumulation, fp16 or several ranks
                                                                         the trainer warns it has no effect
utils.run_symbolic_shape_infer                      implemented
debug.deterministic_compute                         implemented
debug.check_model_export                            implemented
debug.graph_save_paths.*  (4 paths)                 implemented
_internal_use.enable_internal_postprocess           implemented
_internal_use.extra_postprocess                     implemented
_internal_use.onnx_opset_version                    implemented
_internal_use.enable_onnx_contrib_ops               no effect            onnxtrain exports standard ONNX operators
                                                                         whatever its value
provider_options                                    implemented          per onnxruntime: an unavailable provider is
                                                                         dropped with a warning
session_options                                     implemented
==================================================  ===================  ===========================================

"not implemented" options raise ``onnxtrain.NotImplemented`` (a ``NotImplementedError``) naming
them when set to anything but their default; "no effect" options set to a non-default value give
one ``UserWarning`` naming them. Keys of older onnxruntime-training releases that its last schema
dropped (``utils.invertible_layer_norm_gradient``, ``distributed.pipeline_parallel_size``, ...) are
unknown keys, as they were there.
"""
import enum
import importlib
import numbers
import re
import warnings
from collections.abc import Mapping

from ..capi._module_graph import PropagateCastOpsStrategy
from ..capi._pybind_state import SessionOptions

__all__ = ["ORTTrainerOptions", "PropagateCastOpsStrategy", "OPTION_SUPPORT", "unsupported_enabled",
           "ignored_options", "check_supported"]


# ---------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------

class _Spec:
    """One schema entry: ``kind`` is group (nested options), map, list, integer, boolean, string,
    callable or instance."""

    def __init__(self, kind, default=None, *, min=None, max=None, nullable=False, fields=None,
                 aliases=None, item=None, value=None, check=None, type_name=None):
        self.kind = kind
        self.default = default
        self.min = min
        self.max = max
        self.nullable = nullable
        self.fields = fields or {}
        self.aliases = aliases or {}
        self.item = item      # list: spec of each item (None: anything)
        self.value = value    # map: spec of each value (None: anything); keys are strings
        self.check = check    # instance: predicate
        self.type_name = type_name or kind

    def default_value(self):
        """A fresh default (groups filled in, new containers each time)."""
        if self.kind == "group":
            return {name: spec.default_value() for name, spec in self.fields.items()}
        if self.kind == "map":
            return {}
        if self.kind == "list":
            return []
        return self.default


def _group(aliases=None, **fields):
    return _Spec("group", fields=fields, aliases=aliases)


def _int(default=None, min=None, max=None):
    return _Spec("integer", default, min=min, max=max)


def _bool(default):
    return _Spec("boolean", default)


def _str(default=None):
    return _Spec("string", default)


def _find_class(module, name):
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _instance_check(module, class_name, method):
    """isinstance of ``module.class_name`` when that module exists; otherwise duck typing: a class
    of that name (not torch's) in the value's MRO and a callable ``method``."""
    def check(value):
        cls = _find_class(module, class_name)
        if cls is not None:
            return isinstance(value, cls)
        return (callable(getattr(value, method, None))
                and any(k.__name__ == class_name and not k.__module__.startswith("torch")
                        for k in type(value).__mro__))
    return check


def _is_session_options(value):
    return isinstance(value, SessionOptions)


def _instance(check, type_name, default=None):
    return _Spec("instance", default, nullable=True, check=check, type_name=type_name)


_SCHEMA = _group(
    batch=_group(gradient_accumulation_steps=_int(1, min=1)),
    device=_group(id=_str("cuda"), mem_limit=_int(0, min=0)),
    distributed=_group(
        world_rank=_int(0, min=0),
        world_size=_int(1, min=1),
        local_rank=_int(0, min=0),
        data_parallel_size=_int(1, min=1),
        horizontal_parallel_size=_int(1, min=1),
        pipeline_parallel=_group(
            pipeline_parallel_size=_int(1, min=1),
            num_pipeline_micro_batches=_int(1, min=1),
            pipeline_cut_info_string=_str(""),
            sliced_schema=_Spec("map", value=_Spec("list", item=_int())),
            sliced_axes=_Spec("map", value=_int()),
            sliced_tensor_names=_Spec("list", item=_str()),
        ),
        allreduce_post_accumulation=_bool(False),
        deepspeed_zero_optimization=_group(stage=_int(0, min=0, max=1)),
        enable_adasum=_bool(False),
    ),
    lr_scheduler=_instance(_instance_check("onnxtrain.training.optim.lr_scheduler", "_LRScheduler", "get_lr"),
                           "optim.lr_scheduler._LRScheduler"),
    mixed_precision=_group(
        enabled=_bool(False),
        loss_scaler=_instance(_instance_check("onnxtrain.training.amp.loss_scaler", "LossScaler", "update"),
                              "amp.loss_scaler.LossScaler"),
    ),
    graph_transformer=_group(
        attn_dropout_recompute=_bool(False),
        gelu_recompute=_bool(False),
        transformer_layer_recompute=_bool(False),
        number_recompute_layers=_int(0, min=0),
        propagate_cast_ops_config=_group(
            aliases={"propagate_cast_ops_strategy": "strategy", "propagate_cast_ops_level": "level",
                     "propagate_cast_ops_allow": "allow"},
            strategy=_instance(lambda v: isinstance(v, PropagateCastOpsStrategy), "PropagateCastOpsStrategy",
                               PropagateCastOpsStrategy.FLOOD_FILL),
            level=_int(1, min=-1),
            allow=_Spec("list", item=_str()),
        ),
    ),
    utils=_group(
        frozen_weights=_Spec("list"),
        grad_norm_clip=_bool(True),
        memory_efficient_gradient=_bool(False),
        run_symbolic_shape_infer=_bool(False),
    ),
    debug=_group(
        deterministic_compute=_bool(False),
        check_model_export=_bool(False),
        graph_save_paths=_group(
            model_after_graph_transforms_path=_str(""),
            model_with_gradient_graph_path=_str(""),
            model_with_training_graph_path=_str(""),
            model_with_training_graph_after_optimization_path=_str(""),
        ),
    ),
    _internal_use=_group(
        enable_internal_postprocess=_bool(True),
        extra_postprocess=_Spec("callable", None, nullable=True),
        onnx_opset_version=_int(14, min=12, max=14),
        enable_onnx_contrib_ops=_bool(True),
    ),
    provider_options=_Spec("map", value=_Spec("map")),
    session_options=_instance(_is_session_options, "SessionOptions"),
)


def _type_ok(spec, value):
    kind = spec.kind
    if kind == "integer":
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, (list, tuple))
    if kind in ("group", "map"):
        return isinstance(value, Mapping)
    if kind == "callable":
        return callable(value)
    return spec.check(value)


_TYPE_WORDS = {"group": "dict", "map": "dict"}


def _nested_errors(errors):
    """'a.b[2].c: reason' entries as onnxruntime's schema validator nested them:
    {'a': [{'b': [{2: [{'c': ['reason']}]}]}]}."""
    root = {}
    for entry in errors:
        path, _, reason = entry.partition(": ")
        parts = [int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\[\d+\]|[^.\[]+", path)] or ["options"]
        node = root
        for part in parts[:-1]:
            lst = node.setdefault(part, [{}])
            if not isinstance(lst[-1], dict):
                lst.append({})
            node = lst[-1]
        node.setdefault(parts[-1], []).append(reason)
    return root


def _normalize(spec, value, path, errors):
    """Validated copy of ``value`` for ``spec``, defaults filled in; problems go to ``errors`` as
    'path: reason'."""
    def fail(reason):
        errors.append(f"{path or 'options'}: {reason}")
        return value

    if value is None:
        return None if spec.nullable else fail("null value not allowed")
    if not _type_ok(spec, value):
        if spec.kind == "callable":
            return fail("must be callable or None")
        return fail(f"must be of {_TYPE_WORDS.get(spec.kind, spec.type_name)} type")
    kind = spec.kind
    if kind == "integer":
        value = int(value)
        if spec.min is not None and value < spec.min:
            return fail(f"min value is {spec.min}")
        if spec.max is not None and value > spec.max:
            return fail(f"max value is {spec.max}")
        return value
    if kind == "list":
        if spec.item is None:
            return list(value) if isinstance(value, list) else value
        return type(value)(_normalize(spec.item, v, f"{path}[{i}]", errors) for i, v in enumerate(value))
    if kind == "map":
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} must be of string type")
                continue
            out[key] = v if spec.value is None else _normalize(spec.value, v, f"{path}.{key}", errors)
        return out
    if kind == "group":
        given = {}
        for key, v in value.items():
            name = spec.aliases.get(key, key)
            sub = f"{path}.{key}" if path else str(key)
            if name not in spec.fields:
                errors.append(f"{sub}: unknown field")
            elif name in given:
                errors.append(f"{sub}: given twice (also as {name!r})")
            else:
                given[name] = v
        out = {}
        for name, field in spec.fields.items():
            sub = f"{path}.{name}" if path else name
            out[name] = _normalize(field, given[name], sub, errors) if name in given else field.default_value()
        return out
    return value


def _leaves(spec=_SCHEMA, prefix=""):
    """(key path, spec) of every option, in schema order."""
    for name, field in spec.fields.items():
        path = prefix + name
        if field.kind == "group":
            yield from _leaves(field, path + ".")
        else:
            yield path, field


# ---------------------------------------------------------------------------------------------
# Options object
# ---------------------------------------------------------------------------------------------

_INTERNAL_ATTRS = ("_original_opts", "_validated_opts", "_main_class_name")


class ORTTrainerOptions:
    """Settings of the ORTTrainer, grouped by feature (batch, device, distributed, lr_scheduler,
    mixed_precision, graph_transformer, utils, debug, _internal_use, provider_options,
    session_options).

    ``options`` is validated at construction against onnxruntime-training's schema (see the module
    docstring); a bad key, type or value raises ``ValueError`` naming its key path. Omitted
    options take their defaults. Options read as nested attributes (``opts.batch.
    gradient_accumulation_steps``) or by key (``opts['batch']['gradient_accumulation_steps']``).
    ``_validate=False`` (internal) skips validation and defaults.

    onnxtrain trains on CPU: pass ``{'device': {'id': 'cpu'}}``, or keep 'cuda' (the default),
    which runs on CPU too. ``check_supported`` says what onnxtrain does not implement yet.
    """

    def __init__(self, options={}, _validate=True):  # noqa: B006 (onnxruntime's signature; never mutated)
        original = None
        if options is None:
            options = {}
        if isinstance(options, ORTTrainerOptions):  # a copy, revalidated as its attributes now read
            original, options = dict(options._original_opts), options._as_dict()
        if not isinstance(options, Mapping):
            raise TypeError(f"ORTTrainerOptions: options must be a dict, not {type(options).__name__}")
        self._original_opts = dict(options) if original is None else original
        self._main_class_name = self.__class__.__name__
        if _validate:
            errors = []
            validated = _normalize(_SCHEMA, options, "", errors)
            if errors:
                raise ValueError(f"Invalid options: {_nested_errors(errors)}")
        else:
            validated = dict(options)
        self._validated_opts = validated
        for k, v in validated.items():
            setattr(self, k, self._wrap(v))

    def __repr__(self):
        return "{%s}" % ", ".join(f"'{k}': {v!r}" for k, v in self._public_items())

    def _wrap(self, v):
        if isinstance(v, (tuple, list, set, frozenset)):
            return type(v)(self._wrap(i) for i in v)
        return _ORTTrainerOptionsInternal(self._main_class_name, v) if isinstance(v, dict) else v

    def _public_items(self):
        return [(k, v) for k, v in self.__dict__.items() if k not in _INTERNAL_ATTRS]

    def _as_dict(self):
        """The options as nested dicts, as the attributes now read."""
        def plain(v):
            if isinstance(v, ORTTrainerOptions):
                return v._as_dict()
            if isinstance(v, (list, tuple)):
                return type(v)(plain(i) for i in v)
            return v
        return {k: plain(v) for k, v in self._public_items()}

    # Key access (an onnxtrain addition): option names that are not identifiers (tensor names in
    # sliced_schema, provider names) read as opts.provider_options['CPUExecutionProvider'].
    def __getitem__(self, key):
        if isinstance(key, str) and key in self.__dict__ and key not in _INTERNAL_ATTRS:
            return self.__dict__[key]
        raise KeyError(key)

    def __contains__(self, key):
        return isinstance(key, str) and key in self.__dict__ and key not in _INTERNAL_ATTRS

    def __iter__(self):
        return iter(self.keys())

    def keys(self):
        """The option names at this level."""
        return [k for k, _ in self._public_items()]

    def get(self, key, default=None):
        """``self[key]``, or ``default`` when there is no such option."""
        return self[key] if key in self else default


class _ORTTrainerOptionsInternal(ORTTrainerOptions):
    """A nested group of an ORTTrainerOptions (already validated); not for users."""

    def __init__(self, main_class_name, options):  # pylint: disable=super-init-not-called
        self._main_class_name = main_class_name
        self._validated_opts = dict(options)
        for k, v in self._validated_opts.items():
            setattr(self, k, self._wrap(v))


# ---------------------------------------------------------------------------------------------
# What onnxtrain implements
# ---------------------------------------------------------------------------------------------

IMPLEMENTED, NO_EFFECT, NOT_IMPLEMENTED, DEVICE = "implemented", "no effect", "not implemented", "device"

_NOT_IMPLEMENTED_PREFIXES = ("distributed.horizontal_parallel_size", "distributed.pipeline_parallel.")
_NO_EFFECT_NOTES = {
    "device.mem_limit": "onnxruntime's CUDA arena limit",
    "graph_transformer.": "a permission to lower LayerNorm precision, or moves of float16 Casts",
    "_internal_use.enable_onnx_contrib_ops": "onnxtrain exports standard ONNX operators",
}


def _classify(path):
    if path == "device.id":
        return DEVICE, "'cpu' runs as asked; 'cuda' runs on CPU; other devices are not implemented"
    if path.startswith(_NOT_IMPLEMENTED_PREFIXES):
        return NOT_IMPLEMENTED, "not implemented beyond its default"
    if path.endswith("_recompute") or path.endswith("number_recompute_layers"):
        return IMPLEMENTED, ""
    for prefix, note in _NO_EFFECT_NOTES.items():
        if path.startswith(prefix):
            return NO_EFFECT, note
    return IMPLEMENTED, ""


#: key path -> (status, note) for every option: "implemented", "no effect", "not implemented" or
#: "device" (device.id, decided by value).
OPTION_SUPPORT = {path: _classify(path) for path, _ in _leaves()}
_SPECS = dict(_leaves())

_CPU_ID = re.compile(r"cpu(:\d+)?")
_CUDA_ID = re.compile(r"cuda(:\d+)?")


def _as_options(opts):
    return opts if isinstance(opts, ORTTrainerOptions) else ORTTrainerOptions(opts)


def _read(opts, path):
    """The value at ``path`` (its default where an unvalidated options object lacks it)."""
    node = opts
    for name in path.split("."):
        if isinstance(node, ORTTrainerOptions):
            if name not in node:
                return _SPECS[path].default_value()
            node = node[name]
        elif isinstance(node, Mapping):
            if name not in node:
                return _SPECS[path].default_value()
            node = node[name]
        else:
            return _SPECS[path].default_value()
    return node._as_dict() if isinstance(node, ORTTrainerOptions) else node


def _is_default(path, value):
    default = _SPECS[path].default_value()
    if isinstance(default, list):
        return isinstance(value, (list, tuple)) and list(value) == default
    return type(value) is type(default) and value == default


def _device_kind(device_id):
    device_id = device_id.lower() if isinstance(device_id, str) else ""
    if _CPU_ID.fullmatch(device_id):
        return "cpu"
    return "cuda" if _CUDA_ID.fullmatch(device_id) else "other"


def _set_options(opts, status, device_matches):
    """Key paths with ``status`` set to a non-default value, and device.id where
    ``device_matches(opts, value)``, in schema order."""
    opts = _as_options(opts)
    found = []
    for path, (path_status, _) in OPTION_SUPPORT.items():
        value = _read(opts, path)
        if path_status == DEVICE:
            if device_matches(opts, value):
                found.append(path)
        elif path_status == status and not _is_default(path, value):
            found.append(path)
    return found


def _named_cuda_device(opts, value):
    original = opts._original_opts.get("device")
    return _device_kind(value) == "cuda" and (
        not _is_default("device.id", value) or (isinstance(original, Mapping) and "id" in original))


def unsupported_enabled(opts):
    """Key paths of the options in ``opts`` (an ORTTrainerOptions or a dict) that onnxtrain does
    not implement yet and that are set to anything but their default, in schema order."""
    return _set_options(opts, NOT_IMPLEMENTED, lambda _, value: _device_kind(value) == "other")


def ignored_options(opts):
    """Key paths of the options in ``opts`` that onnxtrain accepts without effect and that the
    caller set: a non-default value, or a CUDA device.id the script named."""
    return _set_options(opts, NO_EFFECT, _named_cuda_device)


def check_supported(opts):
    """Raises ``onnxtrain.NotImplemented`` (a NotImplementedError) naming every option of ``opts``
    that onnxtrain does not implement yet; warns (UserWarning) once naming those accepted without
    effect (a CUDA device.id: training runs on CPU). Returns the latter's key paths."""
    from .._errors import NotImplemented as _NotImplemented
    opts = _as_options(opts)

    def named(paths):
        return ", ".join(f"{p}={_read(opts, p)!r}" for p in paths)

    missing = unsupported_enabled(opts)
    if missing:
        raise _NotImplemented("onnxtrain does not implement these ORTTrainerOptions yet: " + named(missing)
                              + " (it trains in float32, in one process, on CPU)")
    ignored = ignored_options(opts)
    if ignored:
        notes = "; ".join(f"{p}={_read(opts, p)!r} ("
                          + ("training runs on CPU" if p == "device.id" else OPTION_SUPPORT[p][1]) + ")"
                          for p in ignored)
        warnings.warn("ORTTrainerOptions accepted without effect in onnxtrain: " + notes, UserWarning, stacklevel=2)
    return ignored
