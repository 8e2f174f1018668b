"""Helpers shared by onnxtrain.training's onnxruntime-training submodules (optim, amp, the trainer):
``TrainStepInfo`` and the validation error type."""
import math
import numbers


class ConfigError(ValueError, AssertionError):
    """An invalid argument of an optim / amp / TrainStepInfo object, naming it.

    A ValueError; also an AssertionError, because onnxruntime-training validated these arguments
    with ``assert`` and code written for it may catch that.
    """


def check(condition, message):
    """Raises ConfigError(message) unless ``condition``."""
    if not condition:
        raise ConfigError(message)


def is_number(value):
    """A real number that is not a bool (bool is an int in Python)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_number(name, value, minimum=None, strict=False, finite=True):
    """Validates a real-number argument ``name`` (``>= minimum``, or ``> minimum`` when
    ``strict``; not NaN; finite unless ``finite`` is False); returns it as a float."""
    check(is_number(value), f"'{name}' must be a number, got {value!r}")
    value = float(value)
    check(not math.isnan(value), f"'{name}' must not be NaN")
    if finite:
        check(math.isfinite(value), f"'{name}' must be finite, got {value!r}")
    if minimum is not None:
        ok = value > minimum if strict else value >= minimum
        check(ok, f"'{name}' must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return value


def import_module_from_file(file_path, module_name=None):
    """Imports the Python file ``file_path`` as module ``module_name`` (default: the file's base
    name without extension), registers it in ``sys.modules`` and returns it (onnxruntime's
    ``onnxruntime.training._utils.import_module_from_file``). AssertionError naming the argument for
    a path that is not an existing file or an empty/non-str ``module_name``."""
    import importlib.util
    import os
    import sys

    if not isinstance(file_path, str) or not os.path.isfile(file_path):
        raise AssertionError(f"'file_path' must be a full path string with the python file to load. "
                             f"file_path={file_path!r}.")
    if module_name is not None and (not isinstance(module_name, str) or not module_name):
        raise AssertionError(f"'module_name' must be a string with the python module name to load. "
                             f"module_name={module_name!r}.")
    name = module_name or os.path.basename(file_path).split(".")[0]
    spec = importlib.util.spec_from_file_location(name, file_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ONNX TensorProto element types in enum order, and onnxruntime-training's torch type of each
# (torch had no uint16/32/64; onnxruntime 1.13 mapped every unsigned type onto the signed one).
_ONNX_TYPE_NAMES = ("UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL",
                    "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16")


def dtype_onnx_to_torch(onnx_type):
    """The torch dtype onnxruntime-training gives an ONNX element type (an int of
    ``onnx.TensorProto`` or its name): None for UNDEFINED, ``str`` for STRING, unsigned types as
    the signed type of the same width. AssertionError for an unknown type, ValueError for another
    argument type."""
    import torch

    if isinstance(onnx_type, bool) or not isinstance(onnx_type, (int, str)):
        raise ValueError("'onnx_type' must be an ONNX type represented by either a string or integer")
    if isinstance(onnx_type, str):
        if onnx_type.upper() not in _ONNX_TYPE_NAMES:
            raise AssertionError(f"Invalid onnx_type string {onnx_type!r}")
        onnx_type = _ONNX_TYPE_NAMES.index(onnx_type.upper())
    if not 0 <= onnx_type < len(_ONNX_TYPE_NAMES):
        raise AssertionError(f"Invalid onnx_type integer {onnx_type}")
    return {0: None, 1: torch.float32, 2: torch.int8, 3: torch.int8, 4: torch.int16, 5: torch.int16, 6: torch.int32,
            7: torch.int64, 8: str, 9: torch.bool, 10: torch.float16, 11: torch.float64, 12: torch.int32,
            13: torch.int64, 14: torch.complex64, 15: torch.complex128, 16: torch.bfloat16}[onnx_type]


def strip_export_scope(onnx_model, scope):
    """Undoes what exporting the user's module inside a trainer's wrapper (attribute ``scope``:
    model + loss_fn) adds to names, so the graph is named as exporting the module itself names it:
    initializers "<scope>.w" -> "w" (onnxruntime's names for the weights), nodes "/<scope>/rest" ->
    "/rest" unless that name is taken. Node names matter: random operators without a seed attribute
    (Dropout) draw from (session seed, node name, run), and the legacy and the new ORTTrainer wrap
    under different attribute names, so, seeded alike, they drew different dropout masks
    (onnxruntime's do not depend on node names)."""
    graph = onnx_model.graph
    init_prefix = scope + "."
    renamed = {i.name: i.name[len(init_prefix):] for i in graph.initializer if i.name.startswith(init_prefix)}
    for init in graph.initializer:
        init.name = renamed.get(init.name, init.name)
    for v in graph.input:
        v.name = renamed.get(v.name, v.name)
    node_prefix = f"/{scope}/"
    taken = {n.name for n in graph.node}
    for node in graph.node:
        for k, n in enumerate(node.input):
            if n in renamed:
                node.input[k] = renamed[n]
        if node.name.startswith(node_prefix):
            bare = "/" + node.name[len(node_prefix):]
            if bare not in taken:
                taken.discard(node.name)
                taken.add(bare)
                node.name = bare
    return onnx_model


def forward_names(model, loss_fn, input_names):
    """Names to call ``model.forward`` with by keyword (onnxruntime's wrappers bound model_desc's
    inputs to forward()'s parameters by name), or None (positional): when the described model
    inputs (``input_names`` less the label when ``loss_fn``) are fewer than forward()'s parameters,
    all among them, and not its leading ones in order."""
    import inspect
    params = list(inspect.signature(model.forward).parameters)
    names = input_names[:-1] if loss_fn is not None else input_names
    if len(names) < len(params) and all(n in params for n in names) and names != params[:len(names)]:
        return names
    return None


def infer_symbolic_shapes(model):
    """What onnxruntime's trainers get from ``SymbolicShapeInference.infer_shapes(model,
    auto_merge=True, guess_output_rank=True)`` (``run_symbolic_shape_infer``): a copy of the ONNX
    ``model`` whose graph value_info holds the type and shape onnxtrain's own inference gives each
    value the nodes produce (ONNX's inference with data propagation along Shape -> Gather -> Concat
    -> Reshape chains, so exported attention keeps its ranks; unknown dimensions as symbols unk__N).
    Values already declared keep their declarations."""
    import onnx

    from .. import _C
    inferred = onnx.load_model_from_string(_C.infer_model_types(model.SerializeToString()))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    declared = {v.name for v in list(g.input) + list(g.output) + list(g.value_info)}
    produced = {o for n in g.node for o in n.output if o}
    g.value_info.extend(v for v in inferred.graph.value_info if v.name in produced and v.name not in declared)
    return out


def mute_dropouts(model):
    """A copy of the ONNX ``model`` whose Dropout nodes run as in eval mode, as onnxruntime's
    ``check_model_export`` mutes them: their ratio becomes 0 and their training_mode False (the
    Constant nodes or initializers that feed them rewritten; an absent input stays absent)."""
    import numpy as np
    import onnx
    import onnx.helper
    import onnx.mapping
    import onnx.numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    producers = {o: n for n in g.node for o in n.output}
    inits = {i.name: i for i in g.initializer}
    values = {1: np.array(0.0, np.float32), 2: np.array(False)}
    for node in [n for n in g.node if n.op_type == "Dropout" and n.domain in ("", "ai.onnx")]:
        for idx, value in values.items():
            name = node.input[idx] if len(node.input) > idx else ""
            if not name:
                continue
            if name in producers and producers[name].op_type == "Constant":
                c = producers[name]
                del c.attribute[:]
                c.attribute.append(onnx.helper.make_attribute("value", onnx.numpy_helper.from_array(value)))
            elif name in inits:
                dtype = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[inits[name].data_type]
                inits[name].CopyFrom(onnx.numpy_helper.from_array(value.astype(dtype), name))
            else:
                raise NotImplementedError(f"check_model_export: Dropout '{node.name}' input {idx} ('{name}') is "
                                          "computed by the graph; onnxtrain mutes Constant or initializer inputs only")
    return out
