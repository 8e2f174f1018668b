"""Base class of the training building blocks (losses, penalties, learning rates): parameters
stored as given (scikit-learn's protocol), ONNX functions built by ``build_onnx_function`` and
dropped when pickled (rebuilt on demand)."""
from ._base import ParamsMixin


class BaseLearningOnnx(ParamsMixin):
    """A training block whose computations are small ONNX graphs run by InferenceSession.
    Attributes ending with ``_`` are built by ``build_onnx_function`` and are not pickled."""

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.endswith("_")}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def _check_built(self, attribute):
        if not hasattr(self, attribute):
            raise RuntimeError(f"{type(self).__name__}: build_onnx_function must be called first "
                               f"(attribute {attribute!r} is missing)")

    @classmethod
    def _select(cls, base, table, class_name, kwargs):
        """Instance for ``class_name``: an instance of ``base`` (returned as is), a class name or
        one of its aliases (``table``: class -> aliases)."""
        if isinstance(class_name, base):
            if kwargs:
                raise ValueError(f"{base.__name__}.select: keyword arguments {sorted(kwargs)} given with an instance")
            return class_name
        if isinstance(class_name, str) or class_name is None:
            for klass, aliases in table.items():
                if class_name == klass.__name__ or class_name in aliases:
                    return klass(**kwargs)
        names = {k.__name__: list(a) for k, a in table.items()}
        raise ValueError(f"Unexpected {base.__name__} {class_name!r}: expected an instance, a class name or "
                         f"an alias among {names}")
