"""onnxruntime-training's legacy trainer ``onnxruntime.capi.ort_trainer`` (its last form, 1.10 - 1.13):
``ORTTrainer``, ``IODescription``, ``ModelDescription``, ``LossScaler``, ``generate_sample``,
``convert_model_loss_fn_to_onnx``, ``dtype_torch_to_numpy``, ``save_checkpoint`` and ``load_checkpoint``.

The trainer is a thin layer over onnxtrain's ``TrainingSession``, as onnxruntime's was over its own:

* ``model`` is a ``torch.nn.Module`` (combined with ``loss_fn``: inputs = the model's inputs + the
  label, outputs = (loss, predictions); exported with ``torch.onnx.export`` at the first step, the
  wrapper's ``model_.`` prefix removed from the weight names, torch buffers frozen) or an
  ``onnx.ModelProto`` whose first output is the loss (a float scalar).
* ``model_desc`` is a ``ModelDescription`` of ``IODescription``; its first output is the loss.
* The learning rate is an input of the step: the value after the model inputs (positional, or by
  ``learning_rate_description.name_`` as a keyword), or ``get_lr_this_step(global_step)`` when that
  callable is given.
* ``training_optimizer_name`` 'SGDOptimizer', 'AdamOptimizer' or 'LambOptimizer';
  ``map_optimizer_attributes(weight_name) -> {attribute: float or int}`` sets each weight's
  hyper-parameters with onnxruntime's names (Adam: alpha, beta, lambda, epsilon, do_bias_correction,
  weight_decay_mode, max_norm_clip; Lamb: alpha, beta, lambda, epsilon, ratio_min, ratio_max,
  do_bias_correction, max_norm_clip; SGD: none). They map onto onnxtrain's optimizers exactly as
  ``onnxruntime.training.optim``'s configs do (``AdamOptimizer`` decays decoupled, as onnxtrain's
  ``AdamWOptimizer``; ``max_norm_clip`` is the global gradient-norm clip, applied to Adam and Lamb
  when ``enable_grad_norm_clip``); one onnxtrain cannot honour raises NotImplementedError naming it.
* ``train_step`` / ``eval_step`` / ``__call__`` return torch tensors: the model_desc outputs, or
  those named by the ``fetches`` keyword; one output alone.
* ``state_dict()`` is flat, as onnxruntime's session state was: ``{initializer: tensor}`` plus the
  optimizer state, ``Moment_1_<w>`` / ``Moment_2_<w>`` (Adam, Lamb), ``Update_Count_<w>`` (Adam) or
  ``Step`` (Lamb) as int64 [1] counting from 1 at the first update, as onnxruntime did.

* ``use_mixed_precision=True`` trains in float16 mixed precision with loss scaling: the loss scale
  is an input of the step after the learning rate (``loss_scaler.loss_scale_`` when a legacy
  ``LossScaler`` is given, which is then updated from every update step's all-finite flag); an
  update whose gradients hold an infinity or a NaN is skipped and does not advance
  ``global_step``. Without a loss scaler, an update step's results end with that flag
  (``all_finite``), as in onnxruntime.

What onnxtrain does not implement raises ``onnxtrain.NotImplemented`` (a NotImplementedError)
naming the argument: a device other than CPU or CUDA. ``world_rank``, ``world_size``,
``allreduce_post_accumulation``, ``enable_adasum`` and ``deepspeed_zero_stage`` (0 or 1) train
data-parallel over MPI (launch with mpirun; each rank feeds its own batch, gradients averaged, as
in onnxruntime-training). As with ``ORTTrainerOptions``, a CUDA ``device``
is accepted and training runs on CPU (UserWarning). ``use_memory_efficient_gradient`` updates each
weight as soon as its gradient is complete (docs/memory.md); with gradient clipping (the default
``enable_grad_norm_clip=True``), accumulation, mixed precision or several ranks it has no effect and
a UserWarning says why.
"""
import copy
import io
import os
import warnings

import numpy as np

from .._errors import NotImplemented as _NotImplemented
from ..training._utils import forward_names, strip_export_scope
from ..training._session import TrainingParameters, TrainingSession, _is_ort_count, _step_from_ort_count
from ..training.amp.loss_scaler import new_scale_state, share_scale_state
from ..training.optim.config import AdamConfig, LambConfig, SGDConfig
from ..training.orttrainer import ORTTrainer as _NewTrainer
from ..training.orttrainer import bind_inputs
from ..training.orttrainer_options import _device_kind

DEFAULT_OPSET_VERSION = 14

# onnxruntime's per-weight optimizer attributes (its optimizer ops' attributes)
_ATTRIBUTES = {
    "SGDOptimizer": (),
    "AdamOptimizer": ("alpha", "beta", "lambda", "epsilon", "do_bias_correction", "weight_decay_mode",
                      "max_norm_clip"),
    "LambOptimizer": ("alpha", "beta", "lambda", "epsilon", "ratio_min", "ratio_max", "do_bias_correction",
                      "max_norm_clip"),
}
_FLOAT_TYPES = {1, 10, 11, 16}  # float, float16, double, bfloat16
_to_numpy = _NewTrainer._to_numpy


def _torch():
    import torch
    return torch


class IODescription:
    """One input or output: ``name_``, ``shape_`` (ints, strings for symbolic dimensions),
    ``dtype_`` (a torch dtype), ``num_classes_`` (label range, for generate_sample)."""

    def __init__(self, name, shape, dtype=None, num_classes=None):
        self.name_ = name
        self.shape_ = shape
        self.dtype_ = dtype
        self.num_classes_ = num_classes

    def __repr__(self):
        return f"IODescription({self.name_!r}, {self.shape_!r}, {self.dtype_!r}, {self.num_classes_!r})"


class ModelDescription:
    """``inputs_`` and ``outputs_``: lists of IODescription; the first output is the loss."""

    def __init__(self, inputs, outputs):
        self.inputs_ = inputs
        self.outputs_ = outputs


class LossScaler:
    """onnxruntime's legacy loss scaler (``use_mixed_precision=True``): the trainer feeds
    ``loss_scale_`` and calls ``update_loss_scale(all_finite)`` after every update step, which
    doubles it after ``up_scale_window`` finite steps and halves it on a non-finite one, within
    [min_loss_scale, max_loss_scale], when ``is_dynamic_scale``."""

    def __init__(self, loss_scale_input_name, is_dynamic_scale, loss_scale=float(1 << 16), up_scale_window=2000,
                 min_loss_scale=1.0, max_loss_scale=float(1 << 24)):
        self.loss_scale_input_name_ = loss_scale_input_name
        self.is_dynamic_scale_ = is_dynamic_scale
        # The rule and its state: onnxtrain's one implementation (C++ LossScaleState).
        self._state = new_scale_state(loss_scale, up_scale_window, min_loss_scale, max_loss_scale)

    initial_loss_scale_ = property(lambda self: self._state.initial_scale)
    up_scale_window_ = property(lambda self: self._state.up_scale_window)
    min_loss_scale_ = property(lambda self: self._state.min_scale)
    max_loss_scale_ = property(lambda self: self._state.max_scale)
    stable_steps_ = property(lambda self: self._state.stable_steps)

    @property
    def loss_scale_(self):
        return self._state.scale

    @loss_scale_.setter
    def loss_scale_(self, value):
        self._state.scale = float(value)

    def update_loss_scale(self, is_all_finite):
        if self.is_dynamic_scale_:
            self._state.update(bool(is_all_finite))

    def _attach(self, state):
        """Makes ``state`` (the TrainingSession's loss scaler) this scaler's state (share_scale_state):
        the session then applies the rule at each update step."""
        self._state = share_scale_state(self._state, state)

    def reset(self):
        self._state.reset()


def generate_sample(desc, device=None):
    """A random tensor for ``desc`` (symbolic dimensions set to 1): integers in
    [0, num_classes_) when ``num_classes_`` is set, else normal values."""
    torch = _torch()
    size = [s if isinstance(s, int) else 1 for s in desc.shape_]
    if desc.num_classes_:
        return torch.randint(0, desc.num_classes_, size, dtype=desc.dtype_).to(device)
    return torch.randn(size, dtype=desc.dtype_).to(device)


def dtype_torch_to_numpy(torch_dtype):
    """The numpy type of a torch dtype."""
    torch = _torch()
    table = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
             torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.bool: np.bool_}
    if torch_dtype not in table:
        raise TypeError(f"Torch type to numpy type mapping unavailable for: {torch_dtype}")
    return table[torch_dtype]


def convert_model_loss_fn_to_onnx(model, loss_fn, model_desc, device, inputs, opset_version=DEFAULT_OPSET_VERSION):
    """Exports ``model`` (combined with ``loss_fn``: outputs (loss, predictions), the label the last
    input) to an onnx.ModelProto in training mode, traced with ``inputs``; symbolic dimensions of
    model_desc become dynamic axes; weight names are the torch module's."""
    torch = _torch()
    import onnx
    input_names = [d.name_ for d in model_desc.inputs_]
    output_names = [d.name_ for d in model_desc.outputs_]
    dynamic = {}
    for d in list(model_desc.inputs_) + list(model_desc.outputs_):
        axes = {i: a for i, a in enumerate(d.shape_) if isinstance(a, str)}
        if axes:
            dynamic[d.name_] = axes
    if isinstance(inputs, dict):
        inputs = [inputs[n] for n in input_names]
    elif not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    sample = tuple(torch.as_tensor(_to_numpy(v)).to(device) for v in list(inputs)[:len(input_names)])
    by_name = forward_names(model, loss_fn, input_names)
    wrapped = model
    if loss_fn is not None or by_name is not None:
        wrapped = _wrap_module(model, loss_fn, by_name)
    f = io.BytesIO()
    wrapped.train()
    torch.onnx.export(wrapped, sample, f, input_names=input_names, output_names=output_names,
                      opset_version=opset_version, dynamic_axes=dynamic or None, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING, export_params=True, keep_initializers_as_inputs=False)
    onx = onnx.load_model_from_string(f.getvalue())
    if wrapped is not model:
        strip_export_scope(onx, "model_")
    return onx


_WRAPPED = []


def _wrap_module(model, loss_fn, by_name):
    """The export wrapper (its class is defined at first use: torch is imported lazily)."""
    if not _WRAPPED:
        torch = _torch()

        class Wrapped(torch.nn.Module):
            """model (+ loss_fn): forward(*inputs[, label]) -> predictions or (loss, predictions)."""

            def __init__(self, model, loss_fn, by_name):
                super().__init__()
                self.model_ = model
                self.loss_fn_ = loss_fn
                self.by_name_ = by_name

            def forward(self, *inputs):
                args = inputs[:-1] if self.loss_fn_ is not None else inputs
                preds = self.model_(**dict(zip(self.by_name_, args))) if self.by_name_ else self.model_(*args)
                if self.loss_fn_ is None:
                    return preds
                return self.loss_fn_(preds, inputs[-1]), preds

        _WRAPPED.append(Wrapped)
    return _WRAPPED[0](model, loss_fn, by_name)


class ORTTrainer:
    """onnxruntime-training's legacy ORTTrainer over onnxtrain's TrainingSession (see the module
    docstring for the arguments; ``_opset_version`` is the export opset, ``_extra_postprocess(onnx_model)``
    edits the ONNX model in place (or returns a new one), ``_enable_internal_postprocess`` has no
    effect (onnxruntime's graph rewrites for its kernels), ``_use_deterministic_compute`` and
    ``run_symbolic_shape_infer`` (onnxtrain's shape inference into the model's value_info) are honoured, ``optimized_model_filepath``
    receives the training graph)."""

    def __init__(self, model, loss_fn, model_desc, training_optimizer_name, map_optimizer_attributes,
                 learning_rate_description, device, gradient_accumulation_steps=1, world_rank=0, world_size=1,
                 use_mixed_precision=False, allreduce_post_accumulation=False, global_step=0, get_lr_this_step=None,
                 loss_scaler=None, deepspeed_zero_stage=0, enable_grad_norm_clip=True,
                 frozen_weights=[], _opset_version=DEFAULT_OPSET_VERSION,  # noqa: B006 (onnxruntime's signature)
                 _enable_internal_postprocess=True, _extra_postprocess=None, _use_deterministic_compute=False,
                 use_memory_efficient_gradient=False, run_symbolic_shape_infer=False, enable_adasum=False,
                 optimized_model_filepath=""):
        _check_supported(device=device, world_rank=world_rank, world_size=world_size,
                         use_mixed_precision=use_mixed_precision, deepspeed_zero_stage=deepspeed_zero_stage,
                         enable_adasum=enable_adasum, allreduce_post_accumulation=allreduce_post_accumulation,
                         use_memory_efficient_gradient=use_memory_efficient_gradient and bool(
                             enable_grad_norm_clip or gradient_accumulation_steps > 1 or use_mixed_precision
                             or world_size > 1))
        if training_optimizer_name not in _ATTRIBUTES:
            raise ValueError(f"training_optimizer_name must be one of {sorted(_ATTRIBUTES)}, got "
                             f"{training_optimizer_name!r}")
        if not isinstance(gradient_accumulation_steps, int) or gradient_accumulation_steps < 1:
            raise ValueError(f"gradient_accumulation_steps must be an int >= 1, got {gradient_accumulation_steps!r}")
        if not isinstance(learning_rate_description, IODescription):
            raise TypeError("learning_rate_description must be an IODescription, e.g. "
                            "IODescription('Learning_Rate', [1], torch.float32)")
        if learning_rate_description.name_ in [d.name_ for d in model_desc.inputs_]:
            raise ValueError(f"learning_rate_description: '{learning_rate_description.name_}' is also a model input")
        self.is_train = True
        self.model_desc_ = model_desc
        self.learning_rate_description_ = learning_rate_description
        self.input_desc_with_lr = [*model_desc.inputs_, learning_rate_description]
        self.training_optimizer_name_ = training_optimizer_name
        self.map_optimizer_attributes_ = map_optimizer_attributes
        self.device_ = device
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.world_rank, self.world_size = world_rank, world_size
        self.use_mixed_precision = use_mixed_precision
        self.allreduce_post_accumulation_ = allreduce_post_accumulation
        self.deepspeed_zero_stage_ = deepspeed_zero_stage
        self.enable_grad_norm_clip_ = enable_grad_norm_clip
        self.frozen_weights_ = list(frozen_weights)
        self.opset_version_ = _opset_version
        self._enable_internal_postprocess = _enable_internal_postprocess
        self._extra_postprocess = _extra_postprocess
        self._use_deterministic_compute = _use_deterministic_compute
        self.use_memory_efficient_gradient = use_memory_efficient_gradient
        self.run_symbolic_shape_infer = run_symbolic_shape_infer
        self.enable_adasum = enable_adasum
        self.optimized_model_filepath = optimized_model_filepath
        # The step counters are the session's (current_step, global_step_ below): only the
        # argument's starting point of get_lr_this_step is kept here.
        self._global_step_base = int(global_step)
        self._runs_before_session = 0
        self.get_lr_this_step_ = get_lr_this_step
        self.loss_scaler_ = loss_scaler
        # Mixed precision: the loss scale comes after the learning rate (named as onnxruntime's
        # loss scaler names it, for keyword arguments).
        self.loss_scale_input_name = getattr(loss_scaler, "loss_scale_input_name_", None) or "loss_scale"
        self.input_desc_with_lr_and_loss_scale = [*self.input_desc_with_lr,
                                                  IODescription(self.loss_scale_input_name, [], None)]
        self.session = None
        self._session_scales = False  # the session's loss scaler is loss_scaler_'s state
        self.state_dict_ = None
        self.strict_ = False
        self.torch_model_ = self.onnx_model_ = self.loss_fn_ = None
        self._torch_state_dict_keys = []
        torch_module = None
        try:
            torch_module = _torch().nn.Module
        except ImportError:  # pragma: no cover - torch is optional for ONNX models
            pass
        if torch_module is not None and isinstance(model, torch_module):
            self.torch_model_ = model
            self.loss_fn_ = loss_fn
            self._torch_state_dict_keys = list(model.state_dict().keys())
        else:
            if loss_fn is not None:
                warnings.warn("loss_fn is not used when creating ORTTrainer because an ONNX model is provided.")
            self.onnx_model_ = self._postprocess(_NewTrainer._load_onnx(model))
            self._init_session()

    # ------------------------------------------------------------------ model and session
    def _postprocess(self, onx):
        if self._extra_postprocess is not None:
            out = self._extra_postprocess(onx)
            if out is not None and hasattr(out, "graph"):
                onx = out
        return onx

    def _init_onnx_model(self, inputs):
        torch_model = self.torch_model_.cpu()
        buffers = [n for n, _ in torch_model.named_buffers()]
        self.onnx_model_ = self._postprocess(convert_model_loss_fn_to_onnx(
            torch_model, self.loss_fn_, self.model_desc_, "cpu", inputs, opset_version=self.opset_version_))
        names = {i.name for i in self.onnx_model_.graph.initializer}
        # torch buffers are not trained (onnxruntime froze them too)
        self.frozen_weights_ += [b for b in buffers if b in names and b not in self.frozen_weights_]
        self._init_session()

    def _check_model(self, onx):
        inits = {i.name for i in onx.graph.initializer}
        graph_inputs = [i.name for i in onx.graph.input if i.name not in inits]
        missing = [d.name_ for d in self.model_desc_.inputs_ if d.name_ not in graph_inputs]
        if missing:
            raise ValueError(f"model_desc inputs {missing} are not inputs of the model {graph_inputs}")
        outputs = [o.name for o in onx.graph.output]
        missing = [d.name_ for d in self.model_desc_.outputs_ if d.name_ not in outputs]
        if missing:
            raise ValueError(f"model_desc outputs {missing} are not outputs of the model {outputs}")
        if not outputs:
            raise RuntimeError("the model has no output; its first output must be the loss")
        loss = onx.graph.output[0].type.tensor_type
        if loss.elem_type not in _FLOAT_TYPES:
            raise RuntimeError("the first output of a model to run with fully optimized ORT backend must be float "
                               "types.")
        if loss.HasField("shape") and len(loss.shape.dim) != 0:
            raise RuntimeError("the first output of a model to run with fully optimized ORT backend assumed to be loss "
                               "and must be a scalar.")

    def _init_session(self):
        self._check_model(self.onnx_model_)
        if self.run_symbolic_shape_infer:  # onnxruntime replaces onnx_model_ by the inferred model
            from ..training._utils import infer_symbolic_shapes
            self.onnx_model_ = infer_symbolic_shapes(self.onnx_model_)
        onx = self.onnx_model_
        inits = list(onx.graph.initializer)
        unused = [n for n in self.frozen_weights_ if n not in {i.name for i in inits}]
        if unused:
            raise RuntimeError(f"{unused} in frozen_weights not found in model weights.")
        frozen = set(self.frozen_weights_)
        trainable = [i.name for i in inits if i.data_type in _FLOAT_TYPES and i.name not in frozen]
        p = TrainingParameters()
        p.loss_output_name = onx.graph.output[0].name
        p.lr_params_feed_name = self.learning_rate_description_.name_
        p.weights_to_train = set(trainable)
        if frozen:
            p.weights_not_to_train = frozen
        p.gradient_accumulation_steps = self.gradient_accumulation_steps
        p.deterministic_compute = bool(self._use_deterministic_compute)
        p.world_rank, p.world_size = int(self.world_rank), int(self.world_size)
        p.allreduce_post_accumulation = bool(self.allreduce_post_accumulation_)
        p.enable_adasum = bool(self.enable_adasum)
        p.deepspeed_zero_stage = int(self.deepspeed_zero_stage_)
        p.use_mixed_precision = bool(self.use_mixed_precision)
        p.use_memory_efficient_gradient = bool(
            self.use_memory_efficient_gradient and not self.enable_grad_norm_clip_ and self.gradient_accumulation_steps == 1
            and not self.use_mixed_precision and int(self.world_size) == 1)
        if self.optimized_model_filepath:
            p.model_with_training_graph_path = os.fspath(self.optimized_model_filepath)
        config = _optimizer_config(self.training_optimizer_name_, self.map_optimizer_attributes_, trainable)
        config.apply_to_training_parameters(p, trainable, frozen_weights=sorted(frozen),
                                            grad_norm_clip=bool(self.enable_grad_norm_clip_))
        self.session = TrainingSession(onx.SerializeToString(), p)
        if self._runs_before_session:
            self.session._sess.set_progress(self._runs_before_session, 0)
        # A dynamic LossScaler of this module is the session's own scaler (one rule, one state):
        # the session applies it at each update step; the scale fed is the same value.
        self._session_scales = (type(self.loss_scaler_) is LossScaler and self.loss_scaler_.is_dynamic_scale_
                                and bool(self.session.loss_scale_input_name))
        if self._session_scales:
            self.loss_scaler_._attach(self.session.loss_scaler)
        self._trained = list(self.session.trained_weights())
        if self.state_dict_ is not None:
            state, strict = self.state_dict_, self.strict_
            self.state_dict_ = None
            self.load_state_dict(state, strict)

    # ------------------------------------------------------------------ steps
    def train(self):
        self.is_train = True

    def eval(self):
        self.is_train = False

    def __call__(self, *args, **kwargs):
        return self.train_step(*args, **kwargs) if self.is_train else self.eval_step(*args, **kwargs)

    @staticmethod
    def _bind(descs, args, kwargs):
        """{name: value} from positional values (in ``descs`` order, or one list) and keywords."""
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        return bind_inputs([d.name_ for d in descs], args, kwargs)

    def _fetch_names(self, fetches):
        if fetches is None:
            return [d.name_ for d in self.model_desc_.outputs_]
        if isinstance(fetches, str):
            fetches = [fetches]
        known = [o.name for o in self.session.get_outputs()]
        unknown = [f for f in fetches if f not in known]
        if unknown:
            raise ValueError(f"fetches {unknown} are not outputs of the model {known}")
        return list(fetches)

    @staticmethod
    def _results(results):
        torch = _torch()
        out = [torch.from_numpy(np.array(r)) for r in results]
        return out[0] if len(out) == 1 else out

    def _ensure_session(self, values):
        if self.session is not None:
            return
        if self.torch_model_ is None:
            raise RuntimeError("Model is unintialized. Please ensure a valid ONNX model or PyTorch model is provided "
                               "to this Trainer.")
        missing = [d.name_ for d in self.model_desc_.inputs_ if d.name_ not in values]
        if missing:
            raise ValueError(f"the first step exports the model and needs every model_desc input; missing {missing}")
        self._init_onnx_model([values[d.name_] for d in self.model_desc_.inputs_])

    def train_step(self, *args, **kwargs):
        """One training step. Inputs: the model inputs (labels included) and the learning rate (unless
        ``get_lr_this_step`` is given); ``fetches``: names of the outputs to return. Returns the
        model_desc outputs (or the fetches) as torch tensors, one alone."""
        fetches = kwargs.pop("fetches", None)
        mixed = bool(self.use_mixed_precision)
        descs = self.input_desc_with_lr_and_loss_scale if mixed else self.input_desc_with_lr
        lr_name = self.learning_rate_description_.name_
        ls_name = self.loss_scale_input_name
        if self.get_lr_this_step_ is not None and lr_name not in kwargs:
            # the learning rate is computed: positional values are the model inputs (then the loss scale)
            descs = [d for d in descs if d.name_ != lr_name]
        if mixed and self.loss_scaler_ is not None and ls_name not in kwargs:
            descs = [d for d in descs if d.name_ != ls_name]
        values = self._bind(descs, args, kwargs)
        if self.get_lr_this_step_ is not None:
            if lr_name in values:
                raise ValueError(f"the learning rate '{lr_name}' is given while get_lr_this_step computes it")
            values[lr_name] = self.get_lr_this_step_(self.global_step_)
        if mixed and self.loss_scaler_ is not None:
            if ls_name in values:
                raise ValueError(f"the loss scale '{ls_name}' is given while loss_scaler provides it")
            values[ls_name] = self.loss_scaler_.loss_scale_
        want = self.input_desc_with_lr_and_loss_scale if mixed else self.input_desc_with_lr
        missing = [d.name_ for d in want if d.name_ not in values]
        if missing:
            raise ValueError(f"train_step: missing inputs {missing} (the learning rate comes after the model inputs"
                             f"{', then the loss scale' if mixed else ''})")
        self._ensure_session(values)
        lr = np.asarray(_to_numpy(values[lr_name]), dtype=np.float32).reshape(-1)
        if lr.size != 1:
            raise ValueError(f"the learning rate '{lr_name}' must hold one value, got shape {lr.shape}")
        feed = {d.name_: _to_numpy(values[d.name_]) for d in self.model_desc_.inputs_}
        feed[lr_name] = lr
        names = self._fetch_names(fetches)
        finite = None
        if mixed:
            scale = np.asarray(_to_numpy(values[ls_name]), dtype=np.float32).reshape(-1)
            if scale.size != 1:
                raise ValueError(f"the loss scale '{ls_name}' must hold one value, got shape {scale.shape}")
            feed[self.session.loss_scale_input_name] = scale
            if self.session._sess.update_due:
                finite = self.session.all_finite_output_name
                if finite not in names:
                    names = [*names, finite]
        # The session counts the run and, once applied (an update skipped for inf/NaN gradients is
        # not an optimization step), the update: current_step and global_step_ read them.
        results = self.session.run(names, feed)
        if finite is not None:
            all_finite = bool(np.asarray(results[names.index(finite)]).reshape(-1)[0])
            if self.loss_scaler_ is not None and not self._session_scales:
                self.loss_scaler_.update_loss_scale(all_finite)
            if fetches is None and self.loss_scaler_ is not None:
                results = results[:-1]  # the flag is for the scaler; without one the caller gets it
        return self._results(results)

    @property
    def current_step(self):
        """train_step calls so far: the session's run count."""
        return self.session._sess.run_count() if self.session is not None else self._runs_before_session

    @current_step.setter
    def current_step(self, value):
        if self.session is None:
            self._runs_before_session = int(value)
        else:
            self.session._sess.set_progress(int(value), self.session._sess.step())

    @property
    def global_step_(self):
        """The argument of get_lr_this_step: the constructor's ``global_step`` plus the optimizer
        updates the session applied since."""
        return self._global_step_base + (self.session._sess.step() if self.session is not None else 0)

    @global_step_.setter
    def global_step_(self, value):
        self._global_step_base = int(value) - (self.session._sess.step() if self.session is not None else 0)

    def eval_step(self, *args, **kwargs):
        """Forward pass (weights and optimizer state untouched) on the model inputs given (the
        first ones, or by name); returns the model_desc outputs (or the ``fetches``), one alone."""
        fetches = kwargs.pop("fetches", None)
        values = self._bind(self.model_desc_.inputs_, args, kwargs)
        self._ensure_session(values)
        feed = {d.name_: _to_numpy(values[d.name_]) for d in self.model_desc_.inputs_ if d.name_ in values}
        return self._results(self.session.eval(self._fetch_names(fetches), feed))

    # ------------------------------------------------------------------ state
    def _optimizer_state(self):
        return self.session._ort_optimizer_state()

    def state_dict(self, include_optimizer_state=True):
        """``{name: torch tensor}``: every initializer of the model (trained, frozen, buffers) and,
        with ``include_optimizer_state``, the optimizer state (``Moment_1_<w>``, ``Moment_2_<w>``,
        ``Update_Count_<w>`` / ``Step``); without it, a torch model's own state_dict keys only.
        Empty (with a warning) before the first step of a torch model."""
        if self.session is None:
            warnings.warn("ONNXRuntime training session is not initialized yet. Please run train_step or eval_step "
                          "at least once before calling state_dict().")
            return {}
        torch = _torch()
        state = dict(self.session._initializers())
        if include_optimizer_state:
            state.update(self._optimizer_state())
        elif self._torch_state_dict_keys:
            state = {k: state[k] for k in self._torch_state_dict_keys if k in state}
        return {k: torch.from_numpy(np.array(v)) for k, v in state.items()}

    def load_state_dict(self, state_dict, strict=False):
        """Loads a state_dict() (tensors or arrays). Initializers are overwritten, optimizer state
        restored where given; with ``strict`` a name that is neither raises RuntimeError. Before a
        torch model's first step, it is kept and applied when the model is exported."""
        if self.session is None:
            self.state_dict_, self.strict_ = state_dict, strict
            return
        current = self.session._initializers()
        opt_names = self.session._ort_optimizer_state_names() if self.training_optimizer_name_ != "SGDOptimizer" \
            else set()
        weights, opt = {}, {}
        for name, value in state_dict.items():
            if name in current:
                weights[name] = np.asarray(_to_numpy(value), dtype=current[name].dtype).reshape(current[name].shape)
            elif name in opt_names:
                if _is_ort_count(name):
                    opt["step"] = _step_from_ort_count(_to_numpy(value))
                else:
                    opt[name] = np.asarray(_to_numpy(value), dtype=np.float32)
            elif strict:
                raise RuntimeError(f"Checkpoint tensor: {name} is not present in the model.")
        global_step = self.global_step_  # onnxruntime's load_state_dict leaves it as it is
        self.session._sess.load_state(weights, False)
        if opt:
            self.session._sess.load_optimizer_state(opt, False)
        self.global_step_ = global_step

    def save_as_onnx(self, path):
        """Writes the ONNX model (loss included, as trained) with the current weights to ``path``;
        warns and writes nothing before the first step of a torch model."""
        if self.session is None:
            warnings.warn("ONNXRuntime training session is not initialized yet. Please run train_step or eval_step "
                          "at least once before calling save_as_onnx().")
            return
        from onnx import numpy_helper
        state = self.session._initializers()
        onx = copy.deepcopy(self.onnx_model_)
        for i, init in enumerate(onx.graph.initializer):
            if init.name in state:
                onx.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.asarray(state[init.name]), init.name))
        from .._files import write_bytes
        write_bytes(path, onx.SerializeToString(), "model file")
        self.onnx_model_ = onx


def _check_supported(device, world_rank, world_size, use_mixed_precision, deepspeed_zero_stage, enable_adasum,
                     allreduce_post_accumulation, use_memory_efficient_gradient):
    """Raises onnxtrain.NotImplemented naming what onnxtrain does not implement; warns for what it
    accepts without effect (as check_supported does for ORTTrainerOptions)."""
    unsupported = []
    if deepspeed_zero_stage not in (0, 1):
        raise ValueError(f"deepspeed_zero_stage must be 0 or 1 (ZeRO stage 1), got {deepspeed_zero_stage!r}")
    kind = _device_kind(str(device))
    if kind == "other":
        unsupported.append(f"device={str(device)!r} (CPU, or CUDA run on CPU)")
    if unsupported:
        raise _NotImplemented("onnxtrain does not implement these ORTTrainer arguments: " + ", ".join(unsupported))
    ignored = []
    if kind == "cuda":
        ignored.append(f"device={str(device)!r} (training runs on CPU)")
    if use_memory_efficient_gradient:  # asked for with clipping, accumulation, fp16 or several ranks
        ignored.append("use_memory_efficient_gradient=True (the update needs every gradient first with gradient "
                       "clipping, accumulation, mixed precision or several ranks)")
    if ignored:
        warnings.warn("ORTTrainer arguments accepted without effect in onnxtrain: " + "; ".join(ignored), UserWarning,
                      stacklevel=3)


def _optimizer_config(name, map_optimizer_attributes, weights):
    """The onnxruntime.training.optim config equal to ``name`` with per-weight attributes (one
    parameter group per weight that has some), so the mapping onto onnxtrain is the configs'."""
    groups = []
    for w in weights:
        attrs = map_optimizer_attributes(w) if map_optimizer_attributes is not None else {}
        if not attrs:
            continue
        if not isinstance(attrs, dict):
            raise TypeError(f"map_optimizer_attributes('{w}') must return a dict, got {type(attrs).__name__}")
        unknown = sorted(k for k in attrs if k not in _ATTRIBUTES[name])
        if unknown:
            raise _NotImplemented(f"map_optimizer_attributes('{w}'): {name} has no attribute(s) {unknown} that "
                                  f"onnxtrain can honour (known: {list(_ATTRIBUTES[name])})")
        group = {"params": [w]}
        for k, v in attrs.items():
            if isinstance(v, np.generic):
                v = v.item()
            if not isinstance(v, (int, float)):
                raise ValueError(f"Optimizer attributes must be either float or int: '{w}'.{k} = {v!r}")
            if k == "do_bias_correction":
                v = bool(v)
            elif k == "weight_decay_mode":
                if int(v) not in (0, 1):
                    raise _NotImplemented(f"map_optimizer_attributes('{w}'): weight_decay_mode={v!r}; onnxruntime "
                                          "and onnxtrain know modes 0 and 1")
                v = AdamConfig.DecayMode(int(v))
            else:
                v = float(v)
            group[k] = v
        groups.append(group)
    if name == "SGDOptimizer":
        return SGDConfig(lr=0.0)
    return (AdamConfig if name == "AdamOptimizer" else LambConfig)(param_groups=groups, lr=0.0)


# ------------------------------------------------------------------ checkpoints
def _checkpoint_name(prefix):
    return f"{prefix}.ort.pt"


def save_checkpoint(model, checkpoint_dir, checkpoint_prefix="ORT_checkpoint", checkpoint_state_dict=None,
                    include_optimizer_state=True):
    """``torch.save`` of ``{'model': model.state_dict(include_optimizer_state), **checkpoint_state_dict}``
    to ``<checkpoint_dir>/<checkpoint_prefix>.ort.pt`` (a warning when it is overwritten). The prefix
    must be a plain name and the state plain data (what ``load_checkpoint`` reads back): else
    ``InvalidArgument`` before anything is written."""
    torch = _torch()
    from .. import _plain_torch
    _plain_torch.check_prefix(checkpoint_prefix)
    state = {} if checkpoint_state_dict is None else checkpoint_state_dict
    state.update({"model": model.state_dict(include_optimizer_state)})
    if not os.path.isdir(checkpoint_dir):
        raise AssertionError(f"ERROR: Checkpoint directory doesn't exist: {checkpoint_dir}")
    path = os.path.join(checkpoint_dir, _checkpoint_name(checkpoint_prefix))
    _plain_torch.check(state, path)
    if os.path.exists(path):
        warnings.warn(f"{path} already exists, overwriting.")
    from .._files import atomic_open
    with atomic_open(path, "checkpoint") as f:
        torch.save(state, f)


def load_checkpoint(model, checkpoint_dir, checkpoint_prefix="ORT_checkpoint", strict=False):
    """Loads ``<checkpoint_dir>/<checkpoint_prefix>.ort.pt`` into ``model`` (load_state_dict of its
    'model' entry); returns the other entries. ZeRO-partitioned checkpoints (several files) raise
    NotImplementedError. Only tensors and plain containers are read (nothing in the file is run):
    anything else, or a damaged file, raises ``InvalidArgument`` naming the file."""
    from .. import _plain_torch
    _plain_torch.check_prefix(checkpoint_prefix)
    files = sorted(f for f in os.listdir(checkpoint_dir) if f.startswith(checkpoint_prefix) and f.endswith(".ort.pt"))
    if not files:
        raise AssertionError(f"No checkpoint files found with prefix \"{checkpoint_prefix}\" in directory "
                             f"{checkpoint_dir}.")
    if files != [_checkpoint_name(checkpoint_prefix)]:
        raise _NotImplemented(f"load_checkpoint: {files} look like a ZeRO-partitioned checkpoint, which onnxtrain does "
                              "not implement (one file, <prefix>.ort.pt, only)")
    path = os.path.join(checkpoint_dir, files[0])
    state = _plain_torch.load_checkpoint(path, "save_checkpoint")
    model.load_state_dict(state.pop("model"), strict=strict)
    return state
