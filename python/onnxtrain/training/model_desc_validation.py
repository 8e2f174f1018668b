"""onnxruntime-training's ``onnxruntime.training.model_desc_validation``: ORTTrainer's ``model_desc``
validated and normalized (``_ORTTrainerModelDesc``) and the names of the inputs/outputs the trainer
adds (the ``*_IO_DESCRIPTION_NAME`` constants).

``_ORTTrainerModelDesc({'inputs': [(name, shape)], 'outputs': [(name, shape[, is_loss])]})``:

* ``inputs`` is a list of ``InputDescription(name, shape)`` named tuples, ``outputs`` of
  ``OutputDescription(name, shape, is_loss)`` (is_loss False when not given); both index like the
  tuples given (``inputs[0][1]`` is the shape);
* ``add_type_to_input_description(i, dtype)`` / ``add_type_to_output_description(i, dtype,
  dtype_amp=None)`` replace entry i by ``InputDescriptionTyped(name, shape, dtype)`` /
  ``OutputDescriptionTyped(name, shape, is_loss, dtype, dtype_amp)`` (ORTTrainer does it once the
  model's types are known);
* ``learning_rate`` is ``InputDescriptionTyped(LEARNING_RATE_IO_DESCRIPTION_NAME, [1],
  torch.float32)``; assigning a name to ``all_finite`` / ``gradient_accumulation`` (bool [1]
  outputs) or ``loss_scale_input`` (a float32 scalar input) describes those.

An invalid ``model_desc`` raises ``ValueError("Invalid model_desc: {...}")`` with onnxruntime's
messages (its schema validator's: per field, a list of texts, or for a list entry ``{index:
[texts]}``; unknown and missing fields as ``'unknown field'`` / ``'required field'``).
"""
from collections import namedtuple

LEARNING_RATE_IO_DESCRIPTION_NAME = "__learning_rate"
ALL_FINITE_IO_DESCRIPTION_NAME = "__all_finite"
LOSS_SCALE_INPUT_IO_DESCRIPTION_NAME = "__loss_scale_input_name"
GRADIENT_ACCUMULATION_IO_DESCRIPTION_NAME = "__gradient_accumulation_name"

_InputDescription = namedtuple("InputDescription", ["name", "shape"])
_InputDescriptionTyped = namedtuple("InputDescriptionTyped", ["name", "shape", "dtype"])
_OutputDescription = namedtuple("OutputDescription", ["name", "shape", "is_loss"])
_OutputDescriptionTyped = namedtuple("OutputDescriptionTyped", ["name", "shape", "is_loss", "dtype", "dtype_amp"])


def _torch():
    import torch
    return torch


def _entry_errors(value, max_len, loss_seen):
    """onnxruntime's messages for one entry of model_desc['inputs'] (max_len 2) or ['outputs'] (3);
    ``loss_seen`` is a one-item list counting is_loss=True entries so far."""
    errors = []
    if not isinstance(value, tuple) or not 2 <= len(value) <= max_len:
        errors.append("must be a tuple with size 2" if max_len == 2 else "must be a tuple with size 2 or 3")
        if not isinstance(value, (tuple, list)) or len(value) < 2:
            return errors
    if max_len == 3 and len(value) == 3:
        if not isinstance(value[2], bool):
            errors.append("the third element of the tuple (aka is_loss) must be a boolean")
        else:
            loss_seen[0] += value[2]
            if loss_seen[0] > 1:
                errors.append("only one is_loss can bet set to True")
    if not isinstance(value[0], str):
        errors.append("the first element of the tuple (aka name) must be a string")
    if not isinstance(value[1], list):
        errors.append("the second element of the tuple (aka shape) must be a list")
    elif any(isinstance(d, bool) or not isinstance(d, (int, str)) for d in value[1]):
        errors.append("each shape must be either a string or integer")
    return errors


def _validation_errors(model_desc):
    """{field: [messages]} as onnxruntime's schema validator reports them; empty when valid."""
    if not isinstance(model_desc, dict):
        return {"model_desc": [f"must be of dict type, got {type(model_desc).__name__}"]}
    errors = {}
    for field, max_len in (("inputs", 2), ("outputs", 3)):
        if field not in model_desc:
            errors[field] = ["required field"]
            continue
        value = model_desc[field]
        if not isinstance(value, list):
            errors[field] = ["must be of list type"]
            continue
        if not value:
            errors[field] = ["min length is 1"]
            continue
        loss_seen = [0]
        per_entry = {i: e for i, e in ((i, _entry_errors(v, max_len, loss_seen)) for i, v in enumerate(value)) if e}
        if per_entry:
            errors[field] = [per_entry]
    for field in model_desc:
        if field not in ("inputs", "outputs"):
            errors[field] = ["unknown field"]
    return {k: errors[k] for k in sorted(errors, key=str)}


def _check(condition, message):
    if not condition:
        raise AssertionError(message)


def _check_shape(shape):
    _check(isinstance(shape, list) and all((isinstance(d, int) and not isinstance(d, bool)) or
                                           (isinstance(d, str) and d) for d in shape),
           "'shape' must be a list of int or str with length at least 1")


def _check_dtype(dtype, what="dtype"):
    _check(dtype is None or isinstance(dtype, _torch().dtype), f"'{what}' must be either None or a torch.dtype type")


def _extra_description(key, make, doc):
    """A property holding the description ``make(name)`` once a name is assigned (onnxruntime kept
    the first one)."""
    def get(self):
        return self._extra.get(key)

    def set_(self, name):
        _check(isinstance(name, str) and len(name) > 0, "'name' is an invalid input name")
        self._extra.setdefault(key, make(name))

    return property(get, set_, doc=doc)


class _ORTTrainerModelDesc:
    """ORTTrainer's model description, validated (see the module's doc)."""

    _InputDescription = _InputDescription
    _InputDescriptionTyped = _InputDescriptionTyped
    _OutputDescription = _OutputDescription
    _OutputDescriptionTyped = _OutputDescriptionTyped

    def __init__(self, model_desc):
        errors = _validation_errors(model_desc)
        if errors:
            raise ValueError(f"Invalid model_desc: {errors}")
        self._original = dict(model_desc)
        self._main_class_name = type(self).__name__
        self.inputs = [_InputDescription(name, list(shape)) for name, shape in model_desc["inputs"]]
        self.outputs = [_OutputDescription(o[0], list(o[1]), o[2] if len(o) == 3 else False)
                        for o in model_desc["outputs"]]
        self.learning_rate = _InputDescriptionTyped(LEARNING_RATE_IO_DESCRIPTION_NAME, [1], _torch().float32)
        self._extra = {}

    def __repr__(self):
        def fmt(d):
            text = f"(name={d.name}, shape={d.shape}"
            if isinstance(d, _InputDescriptionTyped):
                text += f", dtype={d.dtype}"
            elif isinstance(d, _OutputDescriptionTyped):
                text += f", dtype={d.dtype}, dtype_amp={d.dtype_amp}"
            return text + ")"

        lines = ["Model description:", "", "Inputs:"]
        lines += [f"\t{i}: {fmt(d)}" for i, d in enumerate(self.inputs)]
        lines.append("Outputs:")
        lines += [f"\t{i}: {fmt(d)}" for i, d in enumerate(self.outputs)]
        lines.append(f"Learning rate: {fmt(self.learning_rate)}")
        if self.all_finite or self.loss_scale_input:
            lines.append("Mixed Precision:")
            if self.all_finite:
                lines.append(f"\tis gradients finite: {fmt(self.all_finite)}")
            if self.loss_scale_input:
                lines.append(f"\tloss scale input name: {fmt(self.loss_scale_input)}")
        if self.gradient_accumulation:
            lines.append(f"Gradient Accumulation: {fmt(self.gradient_accumulation)}")
        return "\n".join(lines[:1]) + "\n" + "\n".join(lines[2:])

    def add_type_to_input_description(self, index, dtype):
        """Replaces input ``index`` by its typed description with ``dtype`` (a torch.dtype)."""
        _check(isinstance(index, int) and index >= 0, "input 'index' must be a positive int")
        _check(isinstance(dtype, _torch().dtype), "input 'dtype' must be a torch.dtype type")
        d = self.inputs[index]
        self.inputs[index] = _InputDescriptionTyped(d.name, d.shape, dtype)

    def add_type_to_output_description(self, index, dtype, dtype_amp=None):
        """Replaces output ``index`` by its typed description (``dtype``, and ``dtype_amp``: its
        type under mixed precision, or None)."""
        _check(isinstance(index, int) and index >= 0, "output 'index' must be a positive int")
        _check(isinstance(dtype, _torch().dtype), "output 'dtype' must be a torch.dtype type")
        _check(dtype_amp is None or isinstance(dtype_amp, _torch().dtype),
               "output 'dtype_amp' must be either None or torch.dtype type")
        d = self.outputs[index]
        self.outputs[index] = _OutputDescriptionTyped(d.name, d.shape, d.is_loss, dtype, dtype_amp)

    gradient_accumulation = _extra_description(
        GRADIENT_ACCUMULATION_IO_DESCRIPTION_NAME, lambda n: _OutputDescriptionTyped(n, [1], False, _torch().bool, None),
        "The bool [1] output that says a step accumulated gradients (None until a name is assigned).")
    all_finite = _extra_description(
        ALL_FINITE_IO_DESCRIPTION_NAME, lambda n: _OutputDescriptionTyped(n, [1], False, _torch().bool, None),
        "The bool [1] output that says all gradients were finite (None until a name is assigned).")
    loss_scale_input = _extra_description(
        LOSS_SCALE_INPUT_IO_DESCRIPTION_NAME, lambda n: _InputDescriptionTyped(n, [], _torch().float32),
        "The float32 scalar loss-scale input (None until a name is assigned).")

    @staticmethod
    def _exists(node, in_list, kind, name, attr_name, ignore_duplicate):
        """Whether the description is already there (True: skip it when ``ignore_duplicate``,
        AssertionError otherwise)."""
        exists = any(d.name == name for d in node) if in_list else hasattr(node, attr_name or "")
        if exists and not ignore_duplicate:
            _check(False, f"'name' {name} already exists in the {kind} description" if in_list
                   else f"'attr_name' {attr_name} already exists in the 'node'")
        return exists

    @staticmethod
    def _place(node, in_list, attr_name, desc):
        if in_list:
            node.append(desc)
        else:
            _check(isinstance(attr_name, str) and len(attr_name) > 0, "Invalid 'attr_name'")
            setattr(node, attr_name, desc)

    def _add_input_description(self, node, name, shape, dtype=None, attr_name=None, ignore_duplicate=False):
        """Appends an input description to ``self.inputs`` (``node`` is self.inputs) or sets it as
        attribute ``attr_name`` of ``node``; AssertionError for a duplicate unless ``ignore_duplicate``."""
        _check(isinstance(name, str) and len(name) > 0, "'name' is an invalid input name")
        in_list = node is self.inputs
        if self._exists(node, in_list, "inputs", name, attr_name, ignore_duplicate):
            return
        _check_shape(shape)
        _check_dtype(dtype)
        self._place(node, in_list, attr_name,
                    _InputDescriptionTyped(name, shape, dtype) if dtype else _InputDescription(name, shape))

    def _add_output_description(self, node, name, shape, is_loss, dtype=None, dtype_amp=None, attr_name=None,
                                ignore_duplicate=False):
        """Appends an output description to ``self.outputs`` (``node`` is self.outputs) or sets it as
        attribute ``attr_name`` of ``node``; one is_loss output at most."""
        _check(isinstance(name, str) and len(name) > 0, "'name' is an invalid output name")
        _check_shape(shape)
        _check(isinstance(is_loss, bool), "'is_loss' must be a bool")
        in_list = node is self.outputs
        if self._exists(node, in_list, "outputs", name, attr_name, ignore_duplicate):
            return
        if in_list and is_loss:
            _check(not any(d.is_loss for d in node), "Only one 'is_loss' is supported at outputs description")
        _check_dtype(dtype)
        _check_dtype(dtype_amp, "dtype_amp")
        self._place(node, in_list, attr_name, _OutputDescriptionTyped(name, shape, is_loss, dtype, dtype_amp) if dtype
                    else _OutputDescription(name, shape, is_loss))
