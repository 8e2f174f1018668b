"""BaseEstimator of the two optimizers (onnxcustom's ``_base_estimator``): parameters, learning
rate selection, data checks, weight initialisation, the trained ONNX model, progress display."""
import copy

import numpy as np
import onnx
from onnx import numpy_helper

from ._base import ParamsMixin, ProgressBar, check_device
from .excs import ConvergenceError
from .sgd_learning_rate import BaseLearningRate


def check_int(owner, name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")


class BaseEstimator(ParamsMixin):
    """Common part of OrtGradientOptimizer and OrtGradientForwardBackwardOptimizer. Follows
    scikit-learn's conventions: constructor arguments are stored as given (``learning_rate``
    resolved into a BaseLearningRate instance, as onnxcustom does), fitted attributes end with
    ``_``, ``get_params``/``set_params``, ``sklearn.base.clone`` and pickling work."""

    def __init__(self, learning_rate, device):
        self.learning_rate = BaseLearningRate.select(learning_rate)
        self.device = device
        check_device(device)

    def _normalize_param(self, name, value):
        if name == "learning_rate":
            return BaseLearningRate.select(value)
        return value

    def _check_common(self):
        owner = type(self).__name__
        if not isinstance(self.model_onnx, onnx.ModelProto):
            raise TypeError(f"{owner}: model_onnx must be an onnx.ModelProto, got {type(self.model_onnx).__name__}")
        check_int(owner, "max_iter", self.max_iter, 1)
        check_int(owner, "batch_size", self.batch_size, 1)
        check_int(owner, "verbose", self.verbose, 0)
        v = self.validation_every
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not v > 0:
            raise ValueError(f"{owner}: validation_every must be a number > 0, got {v!r}")
        if self.training_optimizer_name != "SGDOptimizer":
            raise NotImplementedError(f"{owner}: training_optimizer_name={self.training_optimizer_name!r} is not "
                                      "implemented, only 'SGDOptimizer'")
        check_device(self.device)
        names = [i.name for i in self.model_onnx.graph.initializer]
        if self.weights_to_train is not None:
            if isinstance(self.weights_to_train, str) or not all(isinstance(w, str) for w in self.weights_to_train):
                raise TypeError(f"{owner}: weights_to_train must be a list of initializer names, "
                                f"got {self.weights_to_train!r}")
            missing = [w for w in self.weights_to_train if w not in names]
            if missing:
                raise ValueError(f"{owner}: weights_to_train names {missing} that are not initializers of the model")
            if len(self.weights_to_train) == 0:
                raise ValueError(f"{owner}: weights_to_train is empty")

    def _validation_period(self):
        """Iterations between two validations (validation_every < 1: a fraction of max_iter)."""
        if self.validation_every < 1:
            return max(1, int(self.max_iter * self.validation_every))
        return int(self.validation_every)

    @staticmethod
    def _check_data(owner, X, y, sample_weight=None, what="X"):
        X, y = np.asarray(X), np.asarray(y)
        if X.ndim < 1 or y.ndim < 1 or X.shape[0] != y.shape[0]:
            raise ValueError(f"{owner}: {what} and y must have the same number of rows, got {what}.shape={X.shape}, "
                             f"y.shape={y.shape}")
        if X.shape[0] == 0:
            raise ValueError(f"{owner}: {what} is empty")
        if sample_weight is not None:
            w = np.asarray(sample_weight)
            if w.ndim != 1 or w.shape[0] != X.shape[0]:
                raise ValueError(f"{owner}: sample_weight must have shape ({X.shape[0]},), got {w.shape}")
        return X, y

    @staticmethod
    def _input_arrays(model, X, y):
        """X and y converted to the element types and ranks of the model's first two inputs."""
        out = []
        for inp, a in zip(model.graph.input[:2], (X, y)):
            elem = inp.type.tensor_type.elem_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(elem) if hasattr(onnx.helper, "tensor_dtype_to_np_dtype") \
                else onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[elem]
            a = np.asarray(a, dtype=dtype)
            rank = len(inp.type.tensor_type.shape.dim) if inp.type.tensor_type.HasField("shape") else a.ndim
            if a.ndim == 1 and rank == 2:
                a = a.reshape((-1, 1))
            elif a.ndim == 2 and rank == 1 and a.shape[1] == 1:
                a = a.reshape((-1,))
            out.append(np.ascontiguousarray(a))
        return out

    def _rng(self):
        rs = getattr(self, "random_state", None)
        if isinstance(rs, np.random.RandomState):
            return np.random.default_rng(rs.randint(0, 2**31 - 1))
        return np.random.default_rng(rs)

    @staticmethod
    def _random_weights(state, names, rng):
        """Glorot-uniform values (scikit-learn's MLP initialisation) for the weights ``names``:
        a matrix [fan_in, fan_out] draws from U(-b, b), b = sqrt(6 / (fan_in + fan_out)); a bias
        uses the bound of the matrix it follows (same last dimension), else sqrt(3 / size)."""
        bounds = {}
        out = {}
        for name in names:
            v = np.asarray(state[name])
            if v.ndim >= 2:
                fan_in, fan_out = int(np.prod(v.shape[:-1])), v.shape[-1]
                b = np.sqrt(6.0 / (fan_in + fan_out))
                bounds[fan_out] = b
            else:
                size = max(int(v.size), 1)
                b = bounds.get(size, np.sqrt(3.0 / size))
            out[name] = rng.uniform(-b, b, size=v.shape).astype(v.dtype)
        for name in names:  # biases listed before their matrix
            v = np.asarray(state[name])
            if v.ndim < 2 and max(int(v.size), 1) in bounds:
                b = bounds[max(int(v.size), 1)]
                out[name] = rng.uniform(-b, b, size=v.shape).astype(v.dtype)
        return out

    def get_trained_onnx(self, model=None):
        """``model`` (default: model_onnx) with its initializers replaced by the trained weights
        of the same name."""
        state = self._trained_weights()
        onx = copy.deepcopy(self.model_onnx if model is None else model)
        for init in onx.graph.initializer:
            if init.name in state:
                value = np.asarray(state[init.name]).astype(numpy_helper.to_array(init).dtype)
                init.CopyFrom(numpy_helper.from_array(value, init.name))
        return onx

    def _progress(self):
        return ProgressBar(self.max_iter, prefix=f"{type(self).__name__} ") if self.verbose > 0 else None

    def _after_iteration(self, bar, it, loss):
        if bar is not None:
            text = f"loss={loss:1.3g} lr={self.learning_rate.value:1.3g}" if self.verbose > 1 else ""
            bar.update(it + 1, text)

    def _iterate(self, epoch, validate, finish):
        """The iteration loop of both optimizers: ``epoch(it, past_losses)`` trains one pass and
        returns its loss (None: stop there), the learning-rate schedule moves once per iteration,
        ``validate()`` (None: no validation data) runs every validation period, the progress bar
        follows. train_losses_, validation_losses_ and n_iter_ are set, and ``finish()`` runs, even
        when the loop is interrupted (ConvergenceError, KeyboardInterrupt)."""
        period = self._validation_period()
        self.learning_rate.init_learning_rate()
        bar = self._progress()
        train_losses, val_losses = [], []
        try:
            for it in range(self.max_iter):
                loss = epoch(it, train_losses)
                if loss is None:
                    break
                train_losses.append(loss)
                self.learning_rate.update_learning_rate(it)
                if validate is not None and (it + 1) % period == 0:
                    val_losses.append(validate())
                self._after_iteration(bar, it, loss)
        finally:
            if bar is not None:
                bar.close()
            self.train_losses_ = train_losses
            self.validation_losses_ = None if validate is None else val_losses
            self.n_iter_ = len(train_losses)
            finish()

    @staticmethod
    def _raise_convergence(owner, it, loss, lr, batch=None, past=()):
        where = f"iteration {it}" + ("" if batch is None else f", batch {batch}")
        raise ConvergenceError(f"{owner}: loss is {loss} at {where} (learning rate {lr!r}): the gradient descent "
                               f"has failed (past losses={[float(v) for v in list(past)[-5:]]})")
