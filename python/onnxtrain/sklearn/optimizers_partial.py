"""OrtGradientForwardBackwardOptimizer (onnxcustom's ``optimizers_partial``): forward and backward
of the model through TrainingAgent, the loss, the penalty and the weight update as small ONNX
graphs (the building blocks of this package)."""
import logging
import warnings

import numpy as np

from ..capi import _pybind_state as C
from ..capi.onnxruntime_inference_collection import InferenceSession
from ..training._session import get_train_initializer
from ._base import cpu_device, to_ortvalue
from ._base_estimator import BaseEstimator
from .data_loader import OrtDataLoader
from .excs import EvaluationError
from .sgd_learning_loss import BaseLearningLoss
from .sgd_learning_penalty import BaseLearningPenalty


class OrtGradientForwardBackwardOptimizer(BaseEstimator):
    """Stochastic gradient descent of ``model_onnx`` (a model without loss: its first input is
    the features, its first output the prediction) with forward and backward run by
    TrainingAgent. Every step: forward, ``learning_loss.loss_gradient`` (loss summed over the
    batch and its gradient with respect to the prediction), ``learning_penalty.penalty_loss``,
    backward, then ``learning_penalty.update_weights`` and ``learning_rate``'s update of every
    trained weight (``value / batch_size`` times the gradient; LearningRateSGDNesterov adds
    momentum). The learning rate schedule moves once per iteration (epoch).

    :param model_onnx: onnx.ModelProto
    :param weights_to_train: initializer names to train (None: every float initializer)
    :param loss_output_name: unused (onnxcustom's signature; the loss is ``learning_loss``)
    :param max_iter: iterations (epochs)
    :param training_optimizer_name: 'SGDOptimizer' only
    :param batch_size: observations per step
    :param learning_rate: 'SGD', 'SGDNesterov', a float (eta0) or a BaseLearningRate
    :param device: 'cpu'
    :param warm_start: start from the previous fit's weights (the model's at the first fit)
    :param verbose: 1: a progress bar on stderr, 2: with the loss and the learning rate
    :param validation_every: iterations between validation losses (< 1: fraction of max_iter)
    :param learning_loss: 'square_error', 'absolute_error', 'elastic_error', 'log' or a
        BaseLearningLoss
    :param enable_logging: debug messages on the logger 'onnxtrain.sklearn'
    :param weight_name: not None: fit takes ``sample_weight`` (the loss is weighted)
    :param learning_penalty: None, 'elastic' or a BaseLearningPenalty
    :param exc: True: a NaN or infinite loss raises ConvergenceError; False: training stops
        there with a warning, keeping the weights of the last finite step
    :param random_state: seed of the initial weights and of the data order (onnxtrain extension)

    Attributes after fit: ``train_losses_``, ``validation_losses_``, ``train_state_`` (the
    trained weights, in ``weights_to_train_`` order), ``n_iter_``, ``input_names_``,
    ``output_names_``.
    """

    def __init__(self, model_onnx, weights_to_train=None, loss_output_name="loss", max_iter=100,
                 training_optimizer_name="SGDOptimizer", batch_size=10, learning_rate="SGD", device="cpu",
                 warm_start=False, verbose=0, validation_every=0.1, learning_loss="square_error",
                 enable_logging=False, weight_name=None, learning_penalty=None, exc=True, random_state=None):
        BaseEstimator.__init__(self, learning_rate, device)
        self.model_onnx = model_onnx
        self.weights_to_train = weights_to_train
        self.loss_output_name = loss_output_name
        self.max_iter = max_iter
        self.training_optimizer_name = training_optimizer_name
        self.batch_size = batch_size
        self.warm_start = warm_start
        self.verbose = verbose
        self.validation_every = validation_every
        self.learning_loss = BaseLearningLoss.select(learning_loss)
        self.enable_logging = enable_logging
        self.weight_name = weight_name
        self.learning_penalty = BaseLearningPenalty.select(learning_penalty)
        self.exc = exc
        self.random_state = random_state

    def _normalize_param(self, name, value):
        if name == "learning_loss":
            return BaseLearningLoss.select(value)
        if name == "learning_penalty":
            return BaseLearningPenalty.select(value)
        return BaseEstimator._normalize_param(self, name, value)

    @property
    def needs_grad(self):
        """True when the weight update keeps a velocity per weight."""
        return self.learning_rate.needs_grad

    _TRANSIENT = ("train_session_", "train_agent_", "forward_sess_", "state_ort_", "velocity_ort_", "_infer_",
                  "_logger")

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in self._TRANSIENT}

    # ---- graphs

    def _weights(self):
        if self.weights_to_train is not None:
            return list(self.weights_to_train)
        return list(get_train_initializer(self.model_onnx))

    def build_onnx_function(self):
        """Builds the ONNX functions of the loss, the penalty and the weight update."""
        n = len(self.weights_to_train_)
        self.learning_loss.build_onnx_function(None, self.device, self.weight_name)
        self.learning_rate.build_onnx_function(None, self.device, n)
        self.learning_penalty.build_onnx_function(None, self.device, n)

    def _create_training_session(self):
        """Gradient graph, TrainingAgent over it and the forward (inference) model."""
        config = C.OrtModuleGraphBuilderConfiguration()
        config.initializer_names = list(self.weights_to_train_)
        config.initializer_names_to_train = list(self.weights_to_train_)
        config.input_names_require_grad = []
        builder = C.OrtModuleGraphBuilder()
        builder.initialize(self.model_onnx.SerializeToString(), config)
        builder.build()
        training_bytes = builder.get_gradient_model()
        forward_bytes = builder.get_forward_model()
        sess = InferenceSession(training_bytes)
        self.input_names_ = [i.name for i in sess.get_inputs()]
        self.output_names_ = [o.name for o in sess.get_outputs()]
        dev = cpu_device()
        info = builder.get_graph_info()
        n_outputs = len(info.user_output_names)
        self.train_session_ = sess
        self.train_agent_ = C.TrainingAgent(sess._sess, self.input_names_, [dev] * n_outputs, self.output_names_,
                                            [dev] * len(self.output_names_))
        self.forward_sess_ = InferenceSession(forward_bytes)._sess
        self._forward_inputs = [i.name for i in InferenceSession(forward_bytes).get_inputs()]
        self._n_user_inputs = len(info.user_input_names)
        if self._n_user_inputs != 1:
            raise ValueError(f"OrtGradientForwardBackwardOptimizer: the model must have one input (the features), "
                             f"it has {info.user_input_names}")
        self._prediction = info.user_output_names[0]

    # ---- state

    def _trained_weights(self):
        if not hasattr(self, "train_state_"):
            raise AttributeError("Method fit must be called before.")
        return dict(zip(self.weights_to_train_, self.train_state_))

    def get_state(self, kind="weight"):
        """The trained weights (``kind='weight'``, numpy arrays in ``weights_to_train_`` order) or
        the velocities (``kind='grad'``, with LearningRateSGDNesterov)."""
        if kind == "weight":
            if not hasattr(self, "train_state_"):
                raise AttributeError("Method fit must be called before.")
            return list(self.train_state_)
        if kind == "grad":
            if getattr(self, "train_grad_state_", None) is None:
                raise AttributeError("No velocity: fit was not called or the learning rate keeps none.")
            return list(self.train_grad_state_)
        raise ValueError(f"get_state: kind must be 'weight' or 'grad', got {kind!r}")

    def set_state(self, state, kind="weight"):
        """Sets the weights (``kind='weight'``) or velocities (``'grad'``): a list in
        ``weights_to_train_`` order or a dict name -> array."""
        if not hasattr(self, "weights_to_train_"):
            raise AttributeError("Method fit must be called before.")
        if kind not in ("weight", "grad"):
            raise ValueError(f"set_state: kind must be 'weight' or 'grad', got {kind!r}")
        if isinstance(state, dict):
            missing = [w for w in self.weights_to_train_ if w not in state]
            if missing:
                raise ValueError(f"set_state: missing weights {missing}")
            state = [state[w] for w in self.weights_to_train_]
        if len(state) != len(self.weights_to_train_):
            raise ValueError(f"set_state: {len(state)} arrays given for {len(self.weights_to_train_)} weights")
        arrays = [np.array(v.numpy() if hasattr(v, "numpy") else v, dtype=np.float32, copy=True) for v in state]
        if kind == "weight":
            self.train_state_ = arrays
            if getattr(self, "state_ort_", None) is not None:
                self.state_ort_ = [to_ortvalue(v) for v in arrays]
        else:
            self.train_grad_state_ = arrays
            if getattr(self, "velocity_ort_", None) is not None:
                self.velocity_ort_ = [to_ortvalue(v) for v in arrays]
        self._infer_ = None

    # ---- training

    def _log(self, msg, *args):
        if self._logger is not None:
            self._logger.debug("[OrtGradientForwardBackwardOptimizer] " + msg, *args)

    def fit(self, X, y, sample_weight=None, X_val=None, y_val=None, use_numpy=False):
        """Trains the model; returns self. ``sample_weight`` requires ``weight_name``.
        ``use_numpy`` is accepted for onnxcustom's signature (batches are OrtValues either way)."""
        owner = type(self).__name__
        self._check_common()
        if not isinstance(self.exc, (bool, np.bool_)):
            raise ValueError(f"{owner}: exc must be a bool, got {self.exc!r}")
        X, y = self._check_data(owner, X, y, sample_weight)
        if sample_weight is not None and self.weight_name is None:
            raise ValueError(f"{owner}: sample_weight is given but weight_name is None")
        if (X_val is None) != (y_val is None):
            raise ValueError(f"{owner}: X_val and y_val must be given together")
        if X_val is not None:
            X_val, y_val = self._check_data(owner, X_val, y_val, what="X_val")
        self._logger = logging.getLogger("onnxtrain.sklearn") if self.enable_logging else None

        previous = self._trained_weights() if (self.warm_start and hasattr(self, "train_state_")) else None
        self.weights_to_train_ = self._weights()
        if not self.weights_to_train_:
            raise ValueError(f"{owner}: the model has no float initializer to train")
        self.build_onnx_function()
        self._create_training_session()
        init = {i.name: i for i in self.model_onnx.graph.initializer}
        from onnx import numpy_helper
        initial = {w: numpy_helper.to_array(init[w]) for w in self.weights_to_train_}
        if previous is not None:
            initial = previous
        elif not self.warm_start:
            initial = self._random_weights(initial, self.weights_to_train_, self._rng())
        self.set_state([initial[w] for w in self.weights_to_train_])
        if self.needs_grad and (previous is None or getattr(self, "train_grad_state_", None) is None):
            self.set_state([np.zeros_like(v) for v in self.train_state_], kind="grad")
        elif not self.needs_grad:
            self.train_grad_state_ = None
        self.state_ort_ = [to_ortvalue(v) for v in self.train_state_]
        self.velocity_ort_ = None if not self.needs_grad else [to_ortvalue(v) for v in self.train_grad_state_]
        self._log("input_names=%r output_names=%r weights_to_train=%r", self.input_names_, self.output_names_,
                  self.weights_to_train_)

        x_dtype = np.float32
        X = np.ascontiguousarray(X, dtype=x_dtype)
        y = np.asarray(y)
        y = np.ascontiguousarray(y, dtype=np.int64 if np.issubdtype(y.dtype, np.integer) else np.float32)
        w = None if sample_weight is None else np.ascontiguousarray(sample_weight, dtype=np.float32)
        seed = int(self._rng().integers(0, 2**31 - 1))
        loader = OrtDataLoader(X, y, sample_weight=w, batch_size=self.batch_size, random_state=seed)
        self._iterate(lambda it, past: self._iteration(loader, it, past),
                      None if X_val is None else lambda: self._evaluation(X_val, y_val), self._save_state)
        self._log("end loss=%r", self.train_losses_[-1] if self.train_losses_ else None)
        return self

    def _save_state(self):
        self.train_state_ = [np.array(v.numpy(), copy=True) for v in self.state_ort_]
        if self.velocity_ort_ is not None:
            self.train_grad_state_ = [np.array(v.numpy(), copy=True) for v in self.velocity_ort_]

    def _iteration(self, loader, it, past):
        """One epoch; returns the mean loss per observation, or None when it diverged with
        exc=False."""
        agent, cache = self.train_agent_, C.OrtValueCache()
        lr, penalty, loss_fct = self.learning_rate, self.learning_penalty, self.learning_loss
        total, seen = 0.0, 0
        for ib, batch in enumerate(loader.iter_ortvalue(it)):
            ortx, orty = batch[0], batch[1]
            ortw = batch[2] if len(batch) > 2 else None
            bs = ortx.shape()[0]
            feeds = C.OrtValueVector()
            feeds.push_back(ortx)
            for s in self.state_ort_:
                feeds.push_back(s)
            outputs = C.OrtValueVector()
            state = C.PartialGraphExecutionState()
            agent.run_forward(feeds, outputs, state, cache)
            loss, loss_grad = loss_fct.loss_gradient(self.device, orty, outputs[0], weight=ortw)
            loss = penalty.penalty_loss(self.device, loss, *self.state_ort_)
            value = float(np.asarray(loss.numpy()).sum())
            if not np.isfinite(value):
                if self.exc:
                    self._raise_convergence(type(self).__name__, it, value, lr.value, ib, past)
                warnings.warn(f"OrtGradientForwardBackwardOptimizer: loss is {value} at iteration {it}, batch {ib}; "
                              "training stopped there (exc=False)", RuntimeWarning)
                return None
            grad_in = C.OrtValueVector()
            grad_in.push_back(loss_grad)
            grads = C.OrtValueVector()
            agent.run_backward(grad_in, grads, state)
            rate = lr.value / self.batch_size
            weights = [penalty.update_weights(self.device, s, rate) for s in self.state_ort_]
            self.state_ort_, velocities = lr.update_all_weights(
                self.device, weights, [grads[i] for i in range(len(grads))], self.batch_size, self.velocity_ort_)
            if velocities is not None:
                self.velocity_ort_ = velocities
            self._log("iteration %d batch %d loss=%g", it, ib, value)
            total += value
            seen += bs
        return total / seen

    # ---- inference

    def _predict(self, X):
        """The model's first output on X with the current weights (C OrtValue)."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        if getattr(self, "forward_sess_", None) is not None and getattr(self, "state_ort_", None) is not None:
            feeds = {self._forward_inputs[0]: to_ortvalue(X)}
            feeds.update(zip(self._forward_inputs[1:], self.state_ort_))
            return self.forward_sess_.run_with_ort_values(feeds, [self._prediction], None)[0]
        if getattr(self, "_infer_", None) is None:
            self._infer_ = InferenceSession(self.get_trained_onnx().SerializeToString())
        out = self._infer_._sess.run_with_ort_values({self._infer_.get_inputs()[0].name: to_ortvalue(X)},
                                                     [self._infer_.get_outputs()[0].name], None)
        return out[0]

    def _evaluation(self, X, y):
        scores = self.losses(X, y)
        loss = float(np.mean(scores))
        if not np.isfinite(loss):
            raise EvaluationError(f"{type(self).__name__}: the validation loss is {loss}")
        return loss

    def losses(self, X, y, sample_weight=None):
        """The loss of every observation (numpy array [N]) with the trained weights."""
        self._trained_weights()
        X, y = self._check_data(type(self).__name__, X, y, sample_weight)
        if sample_weight is not None and self.weight_name is None:
            raise ValueError(f"{type(self).__name__}: sample_weight is given but weight_name is None")
        if not hasattr(self.learning_loss, "loss_score_fct_"):
            self.build_onnx_function()
        y = np.ascontiguousarray(y, dtype=np.int64 if np.issubdtype(np.asarray(y).dtype, np.integer) else np.float32)
        w = None if sample_weight is None else to_ortvalue(np.asarray(sample_weight, dtype=np.float32))
        pred = self._predict(X)
        return np.asarray(self.learning_loss.loss_scores(self.device, to_ortvalue(y), pred, weight=w).numpy())

    def score(self, X, y, sample_weight=None):
        """Minus the mean loss per observation (weighted mean with ``sample_weight``): greater is
        better, scikit-learn's convention."""
        scores = self.losses(X, y, sample_weight)
        if sample_weight is None:
            return -float(np.mean(scores))
        return -float(np.sum(scores) / np.sum(sample_weight))
