"""TrainingParameters, TrainingSession and the loss builder, with onnxruntime-training's and
onnxcustom's call shapes."""
import collections
import copy
import os

import numpy as np

from .. import _C
from ..capi.onnxruntime_inference_collection import check_and_normalize_provider_args
from ..capi.onnxruntime_pybind11_state import get_available_providers

# onnxruntime fields for features onnxtrain does not have: accepted at their default value only
# (TrainingSession refuses another value, naming the field).
_UNSUPPORTED = {
    "num_pipeline_micro_batches": 1, "pipeline_cut_info_string": "",
    "sliced_schema": {}, "sliced_axes": {}, "sliced_tensor_names": [],
    "use_fp16_moments": False,
    "propagate_cast_ops_level": -1, "propagate_cast_ops_allow": [],
    "model_after_graph_transforms_path": "",
}


class TrainingParameters(_C.TrainingParameters):
    """Configuration of a TrainingSession (onnxruntime's TrainingParameters).

    The fields onnxtrain implements are the C++ struct's, bound one by one: assigning a wrong type
    or value (an unknown optimizer, accumulation steps < 1, ...) raises ValueError naming the
    field; sets and dicts read back as frozenset / read-only mappings (assign a new value to
    change them). Fields of onnxruntime features onnxtrain does not implement (float16 moments,
    pipeline parallelism) exist, and a TrainingSession refuses non-default values
    for them. Unknown fields raise AttributeError.
    """

    __slots__ = ("_unsupported",)

    def __init__(self):
        super().__init__()
        self._unsupported = {}

    def __setattr__(self, name, value):
        if not hasattr(type(self), name):
            raise AttributeError(f"TrainingParameters has no field {name!r}")
        super().__setattr__(name, value)

    def __copy__(self):
        c = TrainingParameters.__new__(TrainingParameters)
        _C.TrainingParameters.__init__(c, self)
        c._unsupported = copy.deepcopy(self._unsupported)
        return c

    def __deepcopy__(self, memo):
        return self.__copy__()

    def set_optimizer_initial_state(self, state):
        """onnxruntime's initial optimizer state; not supported (use load_checkpoint)."""
        raise NotImplementedError("TrainingParameters.set_optimizer_initial_state is not supported by onnxtrain; "
                                  "restore optimizer state with TrainingSession.load_checkpoint")

    def _check_supported(self):
        for name, value in self._unsupported.items():
            if value != _UNSUPPORTED[name]:
                raise ValueError(f"TrainingParameters.{name}={value!r} is not supported by onnxtrain "
                                 f"(only the default {_UNSUPPORTED[name]!r})")


def _unsupported_field(name, default):
    def get(self):
        return self._unsupported.get(name, copy.copy(default))

    def set_(self, value):
        self._unsupported[name] = value

    return property(get, set_, doc=f"onnxruntime field; onnxtrain accepts only {default!r}.")


for _name, _default in _UNSUPPORTED.items():
    setattr(TrainingParameters, _name, _unsupported_field(_name, _default))



def _is_ort_count(name):
    """Whether ``name`` is one of onnxruntime's optimizer step counters (``Step``, ``Update_Count_<w>``)."""
    return name == "Step" or name.startswith("Update_Count_")


def _step_from_ort_count(value):
    """onnxtrain's optimizer step (int64 scalar, from 0) from onnxruntime's counter (int64 [1], from 1)."""
    return np.array(max(int(np.asarray(value).reshape(-1)[0]) - 1, 0), dtype=np.int64)

class TrainingSession:
    """Trains a model that contains its loss (onnxruntime-training's TrainingSession).

    ``run(output_names, input_feed)`` performs one training step: the feed holds the model's
    inputs and the learning rate (float32 array of shape [1]) under
    ``parameters.lr_params_feed_name``.
    """

    def __init__(self, path_or_bytes, parameters, sess_options=None, providers=None, provider_options=None):
        if isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        if hasattr(path_or_bytes, "SerializeToString"):
            path_or_bytes = path_or_bytes.SerializeToString()
        if not isinstance(path_or_bytes, (str, bytes)):
            raise TypeError("path_or_bytes must be a file path or the serialized model bytes")
        if not isinstance(parameters, _C.TrainingParameters):
            raise TypeError("parameters must be an onnxtrain.TrainingParameters")
        if isinstance(parameters, TrainingParameters):
            parameters._check_supported()
        names, _ = check_and_normalize_provider_args(providers, provider_options, get_available_providers())
        self._providers = names or get_available_providers()
        self.parameters = parameters
        self._sess = _C.TrainingSession(path_or_bytes, parameters, sess_options, self._providers)

    def run(self, output_names, input_feed, run_options=None):
        """One training step; returns the requested outputs (loss, gradients when enabled)."""
        if not isinstance(input_feed, dict):
            raise TypeError("input_feed must be a dict mapping input names to numpy arrays")
        if isinstance(output_names, str):
            output_names = [output_names]
        return self._sess.run(output_names, input_feed)

    def eval(self, output_names, input_feed):
        """Forward pass only: weights, optimizer state and running statistics are untouched.
        The learning rate may be omitted."""
        if isinstance(output_names, str):
            output_names = [output_names]
        if output_names is None:
            output_names = [o.name for o in self._sess.get_outputs() if not o.name.endswith("_grad")]
        return self._sess.eval(output_names, input_feed)

    eval_step = eval

    def get_inputs(self):
        return self._sess.get_inputs()

    @property
    def loss_scale_input_name(self):
        """Float16 mixed precision: name of the float32 [1] loss-scale input (onnxruntime's
        ``loss_scale_input_name``); '' otherwise."""
        return self._sess.loss_scale_input_name

    @property
    def all_finite_output_name(self):
        """Float16 mixed precision: name of the bool [1] output telling whether every gradient of the
        update was finite (the update is skipped otherwise); '' otherwise."""
        return self._sess.all_finite_output_name

    @property
    def loss_scale(self):
        """Float16 mixed precision: the loss scale the session feeds when ``run`` is given none (its
        dynamic scaler's current value, or ``parameters.loss_scale``); 0 otherwise."""
        return self._sess.loss_scale

    @property
    def loss_scaler(self):
        """Float16 mixed precision: the session's loss scaler itself (``_C.LossScaleState``, shared:
        ORTTrainer's DynamicLossScaler attaches to it)."""
        return self._sess.loss_scaler

    @property
    def skipped_updates(self):
        """Float16 mixed precision: updates skipped because a gradient held an infinity or a NaN."""
        return self._sess.skipped_updates

    def is_output_fp32_node(self, output_name):
        """onnxruntime's check that an output stays float32 under mixed precision. onnxtrain keeps
        every model output in its own type (the products alone run in low precision): True for a
        float32 output."""
        for o in self._sess.get_outputs():
            if o.name == output_name:
                return o.type == "tensor(float)"
        raise ValueError(f"{output_name!r} is not an output of the training session")

    def get_outputs(self):
        return self._sess.get_outputs()

    def get_providers(self):
        return list(self._providers)

    def get_state(self):
        """onnxruntime's state tensors (``GetStateTensors``): the trained weights and the optimizer
        state under onnxruntime's names — ``Moment_1_<w>``, ``Moment_2_<w>`` (Adam, Lamb),
        ``Update_Count_<w>`` (Adam) or ``Step`` (Lamb), int64 [1] counting from 1 as onnxruntime's
        did. Constants of the model (a Reshape's shape, frozen weights, running statistics) are not
        in it: ``_initializers()`` has them all."""
        state = self._sess.get_model_state()
        state.update(self._ort_optimizer_state())
        return state

    def _initializers(self):
        """Every initializer of the model by name (numpy copies)."""
        return self._sess.get_state()

    def _ort_count_names(self, internal_names):
        """onnxruntime's names for the optimizer's step counter: ``Update_Count_<w>`` per trained
        weight (Adam, AdamW), ``Step`` (Lamb); none when the optimizer has no state (SGD)."""
        if not set(internal_names) - {"step"}:
            return []
        if self.parameters.training_optimizer_name.startswith("Adam"):  # AdamOptimizer, AdamWOptimizer
            return [f"Update_Count_{w}" for w in self._sess.trained_weights()]
        return ["Step"]

    def _ort_optimizer_state(self):
        """The optimizer state under onnxruntime's names (see get_state)."""
        flat = dict(self._sess.get_optimizer_state())
        count = np.array([int(np.asarray(flat.pop("step"))) + 1], dtype=np.int64)
        flat.update({n: count.copy() for n in self._ort_count_names(list(flat) + ["step"])})
        return flat

    def _ort_optimizer_state_names(self):
        """The keys of _ort_optimizer_state() without copying the state."""
        names = self._sess.optimizer_state_names()
        return {n for n in names if n != "step"} | set(self._ort_count_names(names))

    def get_model_state(self, include_mixed_precision_weights=False):
        """``{'full_precision': {weight: array}}`` for the trained weights."""
        if include_mixed_precision_weights:
            raise ValueError("get_model_state: onnxtrain keeps no mixed-precision weights")
        return {"full_precision": self._sess.get_model_state()}

    def get_optimizer_state(self):
        """``{weight: {state: array}, 'shared_optimizer_state': {'Step': array}}``."""
        flat = self._sess.get_optimizer_state()
        out = {"shared_optimizer_state": {"Step": flat.pop("step")}}
        weights = sorted(self._sess.trained_weights(), key=len, reverse=True)
        for key, value in flat.items():
            for w in weights:
                if key.endswith("_" + w):
                    out.setdefault(w, {})[key[: -len(w) - 1]] = value
                    break
        return out

    def load_state(self, state, strict=False):
        """Overwrites state from ``{name: array}`` (onnxruntime's load_state): initializers by name
        and the optimizer state under get_state()'s names. A name that is neither raises
        ValueError; with ``strict``, every trained weight must be given."""
        if "full_precision" in state and isinstance(state["full_precision"], dict):
            state = state["full_precision"]
        weights, optimizer = {}, {}
        known = set(self._sess.optimizer_state_names())
        for name, value in state.items():
            if _is_ort_count(name):
                if not known - {"step"}:
                    raise ValueError(f"load_state: {name!r} is optimizer state, and this session's optimizer "
                                     f"({self.parameters.training_optimizer_name}) has none")
                optimizer["step"] = _step_from_ort_count(value)
            elif name in known:
                optimizer[name] = np.asarray(value)
            else:
                weights[name] = np.asarray(value)
        self._sess.load_state(weights, bool(strict))
        if optimizer:
            self._sess.load_optimizer_state(optimizer, False)

    def io_binding(self):
        """An IOBinding for run_with_iobinding (its ``_iobinding`` is the C SessionIOBinding that
        ``_sess.run_with_iobinding`` takes, as onnxcustom's training loop uses it)."""
        from ..capi.onnxruntime_inference_collection import IOBinding
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        """One training step with the inputs bound to ``iobinding`` (learning rate included); the
        outputs are the binding's (``copy_outputs_to_cpu``, ``get_outputs``)."""
        from ..capi.onnxruntime_inference_collection import _c_run_options
        self._sess.run_with_iobinding(iobinding._iobinding, _c_run_options(run_options))

    @property
    def step(self):
        """Optimizer updates done so far."""
        return self._sess.step()

    def trained_weights(self):
        return self._sess.trained_weights()

    def last_run_stats(self):
        """Figures of the last training run's plan (onnxtrain extension): ``arena_bytes`` (the
        activations and temporaries of a step, which recompute lowers), ``naive_bytes``, ``steps``."""
        return self._sess.last_run_stats()

    @property
    def world_rank(self):
        """Rank of the session's data-parallel job (0 without one)."""
        return self._sess.world_rank()

    @property
    def world_size(self):
        """Ranks of the session's data-parallel job (1 without one)."""
        return self._sess.world_size()

    def set_local_batch_share(self, share):
        """Data parallelism: this rank's rows over the global batch's rows. The combined gradient is
        the sum over ranks of share x local gradient; the default 1 / world_size is
        onnxruntime-training's convention (every rank feeds a batch of the same size)."""
        self._sess.set_local_batch_share(float(share))

    def export_model(self, path=None, outputs=None):
        """Inference model with the trained weights: loss, gradients and optimizer removed.
        Returns the serialized model, or writes it to ``path``."""
        outputs = list(outputs or [])
        if path is not None:
            self._sess.export_model_to(os.fspath(path), outputs)
            return None
        return self._sess.export_model(outputs)

    def save_checkpoint(self, path, metadata=None):
        """Writes weights, optimizer state, counters and RNG position atomically, with optional
        ``metadata`` (a dict of strings)."""
        self._sess.save_checkpoint(os.fspath(path), {str(k): str(v) for k, v in (metadata or {}).items()})

    def load_checkpoint(self, path):
        """Restores a checkpoint written by save_checkpoint (resuming is exact); returns its
        metadata dict."""
        return self._sess.load_checkpoint(os.fspath(path))

    def start_profiling(self, trace=False):
        """Starts (or restarts) profiling. ``SessionOptions.enable_profiling`` starts it at
        construction with a trace; ``trace=False`` keeps only the totals of profile_summary()."""
        self._sess.start_profiling(bool(trace))

    def profile_summary(self):
        """Per-node time since profiling started: a list of dicts (node, op_type, phase — forward,
        backward, optimizer or eval —, calls, seconds) in the order the nodes first ran."""
        return self._sess.profile_summary()

    def end_profiling(self):
        """Stops profiling; writes onnxruntime's Chrome-trace JSON when tracing and returns its
        file name, else ''."""
        return self._sess.end_profiling()

    @staticmethod
    def format_profile(summary, steps, top_nodes=12):
        """The text table of ``onnxtrain train --profile`` for a profile_summary() over ``steps``
        training runs: time per phase, per operator type (split by phase), slowest nodes."""
        return _C.TrainingSession.format_profile(list(summary), int(steps), int(top_nodes))


def _model_bytes(onx):
    if isinstance(onx, bytes):
        return onx, False
    if hasattr(onx, "SerializeToString"):
        return onx.SerializeToString(), True
    if isinstance(onx, (str, os.PathLike)):
        with open(onx, "rb") as f:
            return f.read(), False
    raise TypeError("expected an onnx.ModelProto, serialized bytes or a path")


def add_loss_output(onx, score_name="squared_error", loss_name="loss", label_name="label", weight_name=None,
                    penalty=None, output_index=None, **kwargs):
    """Adds a loss to a model (onnxcustom's add_loss_output).

    ``score_name``: squared_error/l2, absolute_error/l1, elastic (l1_weight, l2_weight), huber
    (delta), log (binary log loss; from_logits), cross_entropy (class_weights, ignore_index,
    label_smoothing), nll, bce_with_logits (pos_weight). kwargs ``reduction`` is 'mean' or 'sum'.
    ``penalty``: ``{name: {'l1': a, 'l2': b}}`` or ``{name: b}`` (L2). ``output_index``: index
    or name of the scored output. Returns the model in the type it was given (ModelProto or
    bytes); the loss is its first output.
    """
    data, proto = _model_bytes(onx)
    pen = {}
    for name, v in (penalty or {}).items():
        if isinstance(v, dict):
            pen[name] = {str(k): float(x) for k, x in v.items()}
        else:
            pen[name] = {"l2": float(v)}
    kw = {}
    for k, v in kwargs.items():
        if k == "class_weights":
            v = ",".join(str(float(x)) for x in np.asarray(v).ravel())
        elif isinstance(v, bool):
            v = int(v)
        kw[k] = str(v)
    out = _C.add_loss_output(data, score_name, loss_name, label_name, weight_name or "", pen,
                             "" if output_index is None else str(output_index), kw)
    if proto:
        import onnx
        return onnx.load_from_string(out)
    return out


def get_train_initializer(onx):
    """Trainable float initializers: ``OrderedDict(name -> (numpy value, TensorProto))`` for a
    ModelProto (onnxcustom's shape), ``OrderedDict(name -> numpy value)`` for bytes."""
    data, proto = _model_bytes(onx)
    names = _C.get_train_initializer(data)
    res = collections.OrderedDict()
    if proto:
        from onnx import numpy_helper
        inits = {i.name: i for i in onx.graph.initializer}
        for n in names:
            res[n] = (numpy_helper.to_array(inits[n]), inits[n])
        return res
    import onnx
    from onnx import numpy_helper
    m = onnx.load_from_string(data)
    inits = {i.name: i for i in m.graph.initializer}
    for n in names:
        res[n] = numpy_helper.to_array(inits[n])
    return res
