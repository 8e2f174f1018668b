"""OrtDataLoader: batches of a dataset as OrtValues (onnxcustom's ``data_loader``)."""
import numpy as np

from ._base import check_device, to_ortvalue


class OrtDataLoader:
    """Iterates over ``X``, ``y`` (and ``sample_weight``) by batches of ``batch_size``
    observations. With ``random_iter`` every pass (epoch) visits the observations in a new order,
    a permutation drawn from ``random_state`` and the epoch number (reproducible); otherwise in
    their order. Every observation is seen once per pass; the last batch may be smaller.
    A 1-D ``y`` becomes a column ``[N, 1]``.

    :param X: features, ``[N, ...]``
    :param y: targets, ``[N]`` or ``[N, ...]``
    :param sample_weight: None or ``[N]``
    :param batch_size: observations per batch (> 0)
    :param device: 'cpu'
    :param random_iter: shuffle every epoch
    :param random_state: seed (int) or None (drawn from numpy's global generator)
    """

    def __init__(self, X, y, sample_weight=None, batch_size=20, device="cpu", random_iter=True, random_state=None):
        X, y = np.asarray(X), np.asarray(y)
        if X.ndim == 0 or y.ndim == 0:
            raise ValueError(f"OrtDataLoader: X and y must have a first (sample) axis, got X.shape={X.shape}, "
                             f"y.shape={y.shape}")
        if y.ndim == 1:
            y = y.reshape((-1, 1))
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"OrtDataLoader: shape mismatch X.shape={X.shape}, y.shape={y.shape}")
        if X.shape[0] == 0:
            raise ValueError("OrtDataLoader: the dataset is empty")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"OrtDataLoader: batch_size must be a positive integer, got {batch_size!r}")
        self.device = check_device(device)
        self.batch_size = int(batch_size)
        self.random_iter = bool(random_iter)
        self.X_np = np.ascontiguousarray(X)
        self.y_np = np.ascontiguousarray(y)
        if sample_weight is None:
            self.w_np = None
        else:
            w = np.ascontiguousarray(sample_weight).reshape((-1,))
            if w.shape[0] != X.shape[0]:
                raise ValueError(f"OrtDataLoader: shape mismatch X.shape={X.shape}, "
                                 f"sample_weight.shape={np.shape(sample_weight)}")
            self.w_np = w
        if random_state is None:
            random_state = int(np.random.randint(0, 2**31 - 1))
        self.random_state = int(random_state)
        self.epoch = 0

    def __repr__(self):
        return (f"OrtDataLoader(..., ..., batch_size={self.batch_size}, device={self.device!r}, "
                f"random_iter={self.random_iter}, random_state={self.random_state})")

    def __len__(self):
        """Number of observations."""
        return self.X_np.shape[0]

    @property
    def n_batches(self):
        """Batches per epoch."""
        return -(-len(self) // self.batch_size)

    def order(self, epoch):
        """The observation order of pass ``epoch`` (0-based)."""
        if not self.random_iter:
            return np.arange(len(self))
        return np.random.default_rng([self.random_state, int(epoch)]).permutation(len(self))

    def epoch_arrays(self, epoch=None):
        """The dataset arrays in the order of pass ``epoch`` (default: the next one, which it
        then consumes): a tuple (X, y) or (X, y, weight)."""
        if epoch is None:
            epoch = self.epoch
            self.epoch += 1
        arrays = self.data_np
        if not self.random_iter:
            return arrays
        idx = self.order(epoch)
        return tuple(np.ascontiguousarray(a[idx]) for a in arrays)

    def iter_numpy(self, epoch=None):
        """Yields the batches of one pass as tuples of numpy arrays (copies)."""
        arrays = self.epoch_arrays(epoch)
        for b in range(0, len(self), self.batch_size):
            yield tuple(a[b:b + self.batch_size] for a in arrays)

    def iter_ortvalue(self, epoch=None):
        """Yields the batches of one pass as tuples of C OrtValues."""
        for batch in self.iter_numpy(epoch):
            yield tuple(to_ortvalue(a) for a in batch)

    @property
    def data_np(self):
        """(X, y) or (X, y, weight) as numpy arrays, in their order."""
        return (self.X_np, self.y_np) if self.w_np is None else (self.X_np, self.y_np, self.w_np)

    @property
    def data_ort(self):
        """(X, y) or (X, y, weight) as C OrtValues, in their order."""
        return tuple(to_ortvalue(a) for a in self.data_np)
