"""onnxruntime-training's forward/backward objects of ``onnxruntime.capi._pybind_state``:
``OrtModuleGraphBuilderConfiguration``, ``GraphTransformerConfiguration`` /
``TrainingGraphTransformerConfiguration``, ``PropagateCastOpsConfiguration``, ``Severity`` and
``OrtModuleGraphBuilder`` (over the native
``ModuleGraphBuilder``). ``TrainingAgent``, ``PartialGraphExecutionState`` and ``OrtValueCache`` are
native (python/bind_agent.cpp)."""
import enum

from .. import _C
from ..gradient import _as_bytes


class PropagateCastOpsStrategy(enum.IntFlag):
    """onnxruntime-training's cast propagation strategies (bit flags, as its enum)."""
    NONE = 0
    INSERT_AND_REDUCE = 1
    FLOOD_FILL = 2
    REMOVE_INPUT_OUTPUT_UP_DOWN_CASTS = 4


class _Fields:
    """Attributes with defaults and types; assigning an unknown attribute or a wrong type raises."""
    _FIELDS = {}

    def __init__(self):
        for name, (default, _) in self._FIELDS.items():
            object.__setattr__(self, name, default() if callable(default) else default)

    def __setattr__(self, name, value):
        if name not in self._FIELDS:
            raise AttributeError(f"{type(self).__name__} has no attribute '{name}'")
        kind = self._FIELDS[name][1]
        if kind is list:
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{type(self).__name__}.{name} must be a list of strings")
            value = list(value)
        elif kind is not None and not isinstance(value, kind):
            raise TypeError(f"{type(self).__name__}.{name} must be {kind.__name__}, got {type(value).__name__}")
        object.__setattr__(self, name, value)

    def __repr__(self):
        body = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._FIELDS)
        return f"{type(self).__name__}({body})"


class PropagateCastOpsConfiguration(_Fields):
    """Cast propagation of a mixed-precision graph (``strategy``, ``level``, ``allow``); onnxtrain
    implements the default: ``level=-1`` (off)."""
    _FIELDS = {"strategy": (PropagateCastOpsStrategy.FLOOD_FILL, None), "level": (-1, int), "allow": (list, list)}


class Severity(enum.IntEnum):
    """onnxruntime's logging severities (``OrtModuleGraphBuilderConfiguration.loglevel``)."""
    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4


class GraphTransformerConfiguration(_Fields):
    """onnxruntime's base graph transformer configuration: ``propagate_cast_ops_config``."""
    _FIELDS = {"propagate_cast_ops_config": (PropagateCastOpsConfiguration, PropagateCastOpsConfiguration)}


class TrainingGraphTransformerConfiguration(GraphTransformerConfiguration):
    """Graph transformations applied while building the training graph: the recompute fields
    (``attn_dropout_recompute``, ``gelu_recompute``, ``transformer_layer_recompute``,
    ``number_recompute_layers``; docs/memory.md) are implemented; for the others onnxtrain
    implements the defaults (off, empty), and OrtModuleGraphBuilder.initialize raises
    NotImplementedError naming any other value (``sparse_embedding_input_names`` /
    ``sparse_label_input_names`` feed the compute optimizer, ``optimized_pre_grad_filepath`` asks
    for the model after the pre-gradient transformations: neither exists here)."""
    _FIELDS = {
        **GraphTransformerConfiguration._FIELDS,
        "enable_gelu_approximation": (False, bool),
        "attn_dropout_recompute": (False, bool),
        "gelu_recompute": (False, bool),
        "transformer_layer_recompute": (False, bool),
        "number_recompute_layers": (0, int),
        "enable_compute_optimizer": (False, bool),
        "sparse_embedding_input_names": (list, list),
        "sparse_label_input_names": (list, list),
        "optimized_pre_grad_filepath": ("", str),
    }

    def _recompute(self):
        return (self.attn_dropout_recompute, self.gelu_recompute, self.transformer_layer_recompute,
                self.number_recompute_layers)

    def _non_default(self):
        r = [n for n in ("enable_gelu_approximation", "enable_compute_optimizer", "sparse_embedding_input_names",
                         "sparse_label_input_names", "optimized_pre_grad_filepath") if getattr(self, n)]
        if self.propagate_cast_ops_config.level != -1:
            r.append("propagate_cast_ops_config.level")
        return r


class OrtModuleGraphBuilderConfiguration(_Fields):
    """What OrtModuleGraphBuilder builds: ``initializer_names`` (weights fed as inputs after the user
    inputs, in this order), ``initializer_names_to_train`` (those whose gradients are output),
    ``input_names_require_grad``, ``build_gradient_graph``, ``graph_transformer_config``,
    ``enable_caching`` and ``use_memory_efficient_gradient`` (True is not implemented),
    ``loglevel`` (a ``Severity``)."""
    _FIELDS = {
        "initializer_names": (list, list),
        "initializer_names_to_train": (list, list),
        "input_names_require_grad": (list, list),
        "build_gradient_graph": (True, bool),
        "graph_transformer_config": (TrainingGraphTransformerConfiguration, TrainingGraphTransformerConfiguration),
        "enable_caching": (False, bool),
        "loglevel": (Severity.WARNING, int),
        "use_memory_efficient_gradient": (False, bool),
    }


class OrtModuleGraphBuilder:
    """Builds the training graph of a forward model: ``initialize(model_bytes, config)``,
    ``build(input_shapes=None)``, then ``get_model()`` (the training graph: user inputs then weights
    as inputs, a ``com.microsoft`` ``YieldOp`` between forward and backward, the gradients as
    outputs; run it with ``TrainingAgent``), ``get_inference_optimized_model()`` (the forward model
    with the weights as inputs) and ``get_graph_info()``. ``get_gradient_model`` and
    ``get_forward_model`` are the same two models under onnxruntime 1.8's names."""

    def __init__(self):
        self._native = _C.ModuleGraphBuilder()

    def initialize(self, model_bytes, config):
        """Loads the forward model (bytes, a path or an onnx.ModelProto) with ``config``."""
        if not isinstance(config, OrtModuleGraphBuilderConfiguration):
            raise TypeError("config must be an OrtModuleGraphBuilderConfiguration")
        data, _ = _as_bytes(model_bytes)
        self._native.initialize(data, config.initializer_names, config.initializer_names_to_train,
                                config.input_names_require_grad, config.build_gradient_graph, config.enable_caching,
                                config.use_memory_efficient_gradient, config.graph_transformer_config._non_default(),
                                config.graph_transformer_config._recompute())

    def build(self, input_shapes=None):
        """Builds the graphs; ``input_shapes`` (one list of ints per user input) fixes their shapes."""
        shapes = [] if input_shapes is None else [[int(d) for d in s] for s in input_shapes]
        self._native.build(shapes)

    def get_model(self):
        """The training graph (bytes)."""
        return self._native.get_model()

    def get_inference_optimized_model(self):
        """The forward model with the weights as inputs (bytes)."""
        return self._native.get_inference_optimized_model()

    get_gradient_model = get_model
    get_forward_model = get_inference_optimized_model

    def get_graph_info(self):
        """A ``GraphInfo``: user_input_names, user_input_grad_names, initializer_names,
        initializer_names_to_train, initializer_grad_names_to_train, user_output_names,
        output_grad_indices_non_differentiable, output_grad_indices_require_full_shape, ..."""
        return self._native.get_graph_info()
