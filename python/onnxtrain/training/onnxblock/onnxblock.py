"""ForwardBlock and TrainingBlock: blocks that turn what their ``build`` returns into models."""
import warnings
from abc import abstractmethod

import onnx

from ... import _C
from . import _graph_utils, blocks
from . import model_accessor as accessor


class ForwardBlock(blocks.Block):
    """A block whose ``build`` output(s) become the outputs of the model built so far
    (``to_model_proto()`` returns it)."""

    def __init__(self):
        super().__init__()
        self._model = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Stacks blocks on the inputs; returns the name(s) of the graph output(s)."""

    def to_model_proto(self):
        """The forward model; RuntimeError before the block was called."""
        if self._model is None:
            raise RuntimeError("Please build the forward models first before trying to retrieve it.")
        return self._model

    def __call__(self, *args, **kwargs):
        self.base = accessor.current().model
        output = self.build(*args, **kwargs)
        model = onnx.shape_inference.infer_shapes(self.base)
        _graph_utils.register_graph_outputs(model, output)
        self.base.CopyFrom(model)
        self._model = model
        return output


class TrainingBlock(blocks.Block):
    """A block whose ``build`` returns the loss (then any additional outputs): calling it inside
    ``base(model)`` differentiates the loss with respect to the parameters marked with
    ``requires_grad`` and lays out onnxruntime's training and eval models (``to_model_proto()``),
    with onnxtrain's gradient builder (include/onnxtrain/artifacts.h). Parameters marked
    ``requires_grad(name, False)`` are frozen: fed from the checkpoint, not trained. BatchNorm
    running statistics among them train with the model unless ``update_batchnorm_statistics`` is
    False (onnxruntime's behaviour)."""

    def __init__(self, update_batchnorm_statistics=True):
        super().__init__()
        self._requires_grad, self._frozen_params = set(), set()
        self._parameters = None
        self._training_model = self._eval_model = None
        self.update_batchnorm_statistics = update_batchnorm_statistics

    @abstractmethod
    def build(self, *args, **kwargs):
        """Stacks blocks (a loss) on the model's outputs; returns the loss name (or a tuple: the
        loss, then additional outputs)."""

    def requires_grad(self, argument_name, value=True):
        """Marks an initializer as trained (value True) or frozen (value False)."""
        if value:
            self._requires_grad.add(argument_name)
            self._frozen_params.discard(argument_name)
        else:
            self._requires_grad.discard(argument_name)
            self._frozen_params.add(argument_name)

    def parameters(self):
        """(trainable, frozen) lists of onnx.TensorProto, in the model's initializer order;
        RuntimeError before the block was called."""
        if self._parameters is None:
            raise RuntimeError("Please build the training model first before trying to retrieve the parameters.")
        return self._parameters

    def to_model_proto(self):
        """(training model, eval model) as onnx.ModelProto; RuntimeError before the block was called."""
        if self._training_model is None or self._eval_model is None:
            raise RuntimeError("Please build the training and eval models first before trying to retrieve them.")
        return self._training_model, self._eval_model

    def __call__(self, *args, **kwargs):
        self.base = accessor.current().model
        output = self.build(*args, **kwargs)
        outputs = [output] if isinstance(output, str) else list(output)
        model = self.base
        trainable = [p for p in model.graph.initializer if p.name in self._requires_grad]
        frozen = [p for p in model.graph.initializer if p.name in self._frozen_params]
        known = {p.name for p in model.graph.initializer}
        missing = sorted((self._requires_grad | self._frozen_params) - known)
        if missing:
            raise RuntimeError(f"TrainingBlock: {missing} are not initializers of the model")
        o = _C.ArtifactOptions()
        o.requires_grad = [p.name for p in trainable]
        o.frozen_params = [p.name for p in frozen]
        o.loss_input_names = [outputs[0]]
        o.additional_output_names = outputs[1:]
        o.update_batchnorm_statistics = bool(self.update_batchnorm_statistics)
        made = _C.make_artifacts(model.SerializeToString(), o)
        if made.onnxtrain_operators:
            warnings.warn(f"TrainingBlock: the training model uses onnxtrain's operators {made.onnxtrain_operators} "
                          "(com.onnxtrain): onnxtrain runs it, onnxruntime does not", RuntimeWarning, stacklevel=2)
        self._parameters = ([onnx.TensorProto.FromString(p.SerializeToString()) for p in trainable],
                            [onnx.TensorProto.FromString(p.SerializeToString()) for p in frozen])
        self._training_model = onnx.load_from_string(made.training_model)
        self._eval_model = onnx.load_from_string(made.eval_model)
        self.base.CopyFrom(self._training_model)
        return output
