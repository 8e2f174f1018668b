"""Data and helpers shared by the test_sklearn_*.py files."""
import warnings

import numpy as np
from sklearn.datasets import make_regression
from sklearn.model_selection import train_test_split

import onnxtrain
from onnxtrain.sklearn import LearningRateSGD

# make_regression(1000, 100), targets scaled to unit variance, split 750 / 250
X, Y = make_regression(1000, 100, random_state=0)
X = X.astype(np.float32)
Y = (Y / Y.std()).astype(np.float32)
XTR, XTE, YTR, YTE = train_test_split(X, Y, random_state=0)


def quiet(fn, *args):
    """fn(*args) without warnings (scikit-learn's ConvergenceWarning on short fits)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def predict(onx, X):
    """Outputs of an ONNX model with input 'X'."""
    return onnxtrain.InferenceSession(onx.SerializeToString()).run(None, {"X": X})


def sgd(eta0, **kw):
    """A constant learning rate."""
    return LearningRateSGD(eta0, learning_rate="constant", **kw)
