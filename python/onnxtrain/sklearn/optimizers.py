"""OrtGradientOptimizer (onnxcustom's ``optimizers``): stochastic gradient descent of a model that
contains its loss, with onnxtrain's TrainingSession; every epoch runs in C++ through the Trainer."""
import numpy as np

from .. import _C, _errors
from ..capi.onnxruntime_inference_collection import InferenceSession
from ..training._session import TrainingParameters, TrainingSession
from ._base_estimator import BaseEstimator
from .data_loader import OrtDataLoader
from .excs import EvaluationError


class OrtGradientOptimizer(BaseEstimator):
    """Stochastic gradient descent of ``model_onnx``, a model whose output ``loss_output_name``
    is the loss summed over the batch (``onnxtrain.add_loss_output``'s default for regression
    losses). Its first input is the features, its second the targets, its third (when
    ``sample_weight`` is given to fit) the weights, named ``sample_weight_name``.

    Every iteration (epoch) visits the data once by batches of ``batch_size``, in an order
    reshuffled every epoch; each step feeds the learning rate ``learning_rate.value /
    batch_size`` (the rate of a mean gradient). ``learning_rate`` is a name, a float or a
    LearningRateSGD (the schedule moves once per iteration); momentum is not available here.

    :param model_onnx: onnx.ModelProto with a loss output
    :param weights_to_train: initializer names to train
    :param loss_output_name: the loss output
    :param max_iter: iterations (epochs)
    :param training_optimizer_name: 'SGDOptimizer' only
    :param batch_size: observations per step
    :param learning_rate: 'SGD', a float (eta0) or a LearningRateSGD
    :param device: 'cpu'
    :param warm_start: start from the previous fit's weights (the model's initializers at the
        first fit) instead of random ones
    :param verbose: 1: a progress bar on stderr, 2: with the loss and the learning rate
    :param validation_every: iterations between validation losses (< 1: fraction of max_iter)
    :param saved_gradient: if not None, the gradient graph is saved to this file and the
        training graph to ``saved_gradient + '.training.onnx'``
    :param sample_weight_name: name of the weight input
    :param random_state: seed of the initial weights and of the data order (onnxtrain extension)

    Attributes after fit: ``train_session_``, ``train_losses_`` (mean loss per observation of
    every iteration), ``validation_losses_`` (None without validation data), ``trained_coef_``
    (every initializer), ``n_iter_``, ``input_names_``, ``output_names_``.
    """

    def __init__(self, model_onnx, weights_to_train, loss_output_name="loss", max_iter=100,
                 training_optimizer_name="SGDOptimizer", batch_size=10, learning_rate="SGD", device="cpu",
                 warm_start=False, verbose=0, validation_every=0.1, saved_gradient=None,
                 sample_weight_name="weight", random_state=None):
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
        self.saved_gradient = saved_gradient
        self.sample_weight_name = sample_weight_name
        self.random_state = random_state
        self._check_learning_rate()

    def _check_learning_rate(self):
        if self.learning_rate.needs_grad:
            raise NotImplementedError(f"OrtGradientOptimizer: weight updates using past gradients are not "
                                      f"implemented ({type(self.learning_rate).__name__}); use "
                                      "OrtGradientForwardBackwardOptimizer")

    # ---- pickling: the session is rebuilt from model_onnx and trained_coef_ when needed
    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("train_session_", "_infer_")}

    def _create_training_session(self):
        if self.weights_to_train is None:
            raise ValueError("OrtGradientOptimizer: weights_to_train must be a list of initializer names")
        outputs = [o.name for o in self.model_onnx.graph.output]
        if self.loss_output_name not in outputs:
            raise ValueError(f"OrtGradientOptimizer: loss_output_name={self.loss_output_name!r} is not an output of "
                             f"the model (outputs: {outputs})")
        p = TrainingParameters()
        p.loss_output_name = self.loss_output_name
        p.weights_to_train = set(self.weights_to_train)
        p.training_optimizer_name = self.training_optimizer_name
        if self.saved_gradient is not None:
            p.model_with_gradient_graph_path = str(self.saved_gradient)
            p.model_with_training_graph_path = str(self.saved_gradient) + ".training.onnx"
        return TrainingSession(self.model_onnx.SerializeToString(), p)

    def _feed_names(self, sample_weight):
        inputs = [i.name for i in self.model_onnx.graph.input]
        need = 3 if sample_weight is not None else 2
        if len(inputs) != need:
            raise ValueError(f"OrtGradientOptimizer: the model has {len(inputs)} inputs {inputs}; expected 2 "
                             "(features, targets) without sample_weight, 3 (features, targets, weights) with it")
        if sample_weight is not None and self.sample_weight_name not in inputs:
            raise ValueError(f"OrtGradientOptimizer: sample_weight_name={self.sample_weight_name!r} is not an input "
                             f"of the model (inputs: {inputs})")
        names = [n for n in inputs if n != self.sample_weight_name] if sample_weight is not None else inputs
        return names + ([self.sample_weight_name] if sample_weight is not None else [])

    def fit(self, X, y, sample_weight=None, X_val=None, y_val=None, use_numpy=False):
        """Trains the model; returns self.

        :param X: features
        :param y: targets
        :param sample_weight: weights of the observations (the model then has a weight input)
        :param X_val: validation features (loss every ``validation_every`` iterations)
        :param y_val: validation targets
        :param use_numpy: run the steps from Python (one TrainingSession.run per batch) instead of
            the C++ Trainer; both give the same weights
        """
        owner = type(self).__name__
        self._check_common()
        self._check_learning_rate()
        X, y = self._check_data(owner, X, y, sample_weight)
        if (X_val is None) != (y_val is None):
            raise ValueError(f"{owner}: X_val and y_val must be given together")
        if X_val is not None:
            X_val, y_val = self._check_data(owner, X_val, y_val, what="X_val")
        names = self._feed_names(sample_weight)
        X, y = self._input_arrays(self.model_onnx, X, y)
        weights = None if sample_weight is None else np.ascontiguousarray(sample_weight, dtype=np.float32)

        previous = getattr(self, "trained_coef_", None) if self.warm_start else None
        self.train_session_ = self._create_training_session()
        self._infer_ = None
        state = self.train_session_.get_state()
        if previous is not None:
            self.set_state({k: v for k, v in previous.items() if k in state})
        elif not self.warm_start:
            self.set_state(self._random_weights(state, self.weights_to_train, self._rng()))
        self.input_names_ = [i.name for i in self.train_session_.get_inputs()]
        self.output_names_ = [o.name for o in self.train_session_.get_outputs()]

        seed = int(self._rng().integers(0, 2**31 - 1))
        loader = OrtDataLoader(X, y, sample_weight=weights, batch_size=self.batch_size, random_state=seed)
        val = None if X_val is None else self._input_arrays(self.model_onnx, X_val, y_val)

        def epoch(it, past):
            arrays = loader.epoch_arrays(it)
            # The loader makes 1-D targets columns: back to the model's rank.
            arrays = (arrays[0], arrays[1].reshape(y.shape)) + tuple(arrays[2:])
            run = self._epoch_python if use_numpy else self._epoch_trainer
            return run(names, arrays, self.learning_rate.value, it, past)

        def finish():
            self.trained_coef_ = self.train_session_.get_state()

        self._iterate(epoch, None if val is None else lambda: self._evaluation(names, val), finish)
        return self

    def _epoch_python(self, names, arrays, lr, it, past):
        """One epoch, a TrainingSession.run per batch; returns the mean loss per observation."""
        sess = self.train_session_
        lr_name = sess.parameters.lr_params_feed_name
        feed_lr = np.array([lr / self.batch_size], dtype=np.float32)
        total, n = 0.0, arrays[0].shape[0]
        for ib, b in enumerate(range(0, n, self.batch_size)):
            feed = {name: a[b:b + self.batch_size] for name, a in zip(names, arrays)}
            feed[lr_name] = feed_lr
            loss = float(np.asarray(sess.run([self.loss_output_name], feed)[0]).sum())
            if not np.isfinite(loss):
                self._raise_convergence(type(self).__name__, it, loss, lr, ib, past)
            total += loss
        return total / n

    def _epoch_trainer(self, names, arrays, lr, it, past):
        """One epoch in C++ (onnxtrain.Trainer over the epoch's order, no shuffling of its own)."""
        n = arrays[0].shape[0]
        trainer = _C.Trainer(self.train_session_, batch_size=self.batch_size, epochs=1, shuffle=False,
                             learning_rate=float(lr / self.batch_size), log_every=1 << 40,
                             loss_output=self.loss_output_name, label_name=names[1], metric="none")
        info = []
        try:
            trainer.fit(dict(zip(names, arrays)), on_epoch_end=info.append)
        except _errors.Fail as e:
            # The Trainer stops on a non-finite loss: the same error as the Python loop's.
            if "the loss became" not in str(e):
                raise
            self._raise_convergence(type(self).__name__, it, str(e).split("the loss became ")[1].split(" ")[0],
                                    lr, None, past)
        loss = info[0].loss * (-(-n // self.batch_size)) / n if info else float("nan")
        if not np.isfinite(loss):
            self._raise_convergence(type(self).__name__, it, loss, lr, None, past)
        return loss

    def _loss_sum(self, names, arrays):
        """The model's loss over ``arrays`` (one batch), with the current weights."""
        feed = dict(zip(names, arrays))
        if getattr(self, "train_session_", None) is not None:
            out = self.train_session_.eval([self.loss_output_name], feed)
        else:
            if getattr(self, "_infer_", None) is None:
                self._infer_ = InferenceSession(self.get_trained_onnx().SerializeToString())
            out = self._infer_.run([self.loss_output_name], feed)
        return float(np.asarray(out[0]).sum())

    def _evaluation(self, names, arrays):
        loss = self._loss_sum(names, arrays) / arrays[0].shape[0]
        if not np.isfinite(loss):
            raise EvaluationError(f"{type(self).__name__}: the validation loss is {loss}")
        return loss

    def losses(self, X, y, sample_weight=None):
        """The loss per observation of (X, y), averaged (the model's loss is one number per
        batch)."""
        self._trained_weights()
        X, y = self._check_data(type(self).__name__, X, y, sample_weight)
        names = self._feed_names(sample_weight)
        arrays = self._input_arrays(self.model_onnx, X, y)
        if sample_weight is not None:
            arrays.append(np.ascontiguousarray(sample_weight, dtype=np.float32))
        return self._loss_sum(names, arrays) / X.shape[0]

    def score(self, X, y, sample_weight=None):
        """Minus the mean loss per observation (greater is better, scikit-learn's convention)."""
        return -self.losses(X, y, sample_weight)

    def _trained_weights(self):
        if getattr(self, "train_session_", None) is not None:
            return self.train_session_.get_state()
        if hasattr(self, "trained_coef_"):
            return self.trained_coef_
        raise AttributeError("Method fit must be called before.")

    def get_state(self):
        """The trained weights (and the optimizer state, onnxruntime's names) as ``{name: array}``:
        TrainingSession.get_state()."""
        return self._trained_weights()

    def set_state(self, state):
        """Overwrites initializers of the training session from ``{name: array}``."""
        if getattr(self, "train_session_", None) is None:
            raise AttributeError("Method fit must be called before.")
        if not isinstance(state, dict):
            raise TypeError(f"OrtGradientOptimizer.set_state: state must be a dict name -> array, got "
                            f"{type(state).__name__}")
        self.train_session_.load_state({k: np.asarray(v) for k, v in state.items()})
        self._infer_ = None
