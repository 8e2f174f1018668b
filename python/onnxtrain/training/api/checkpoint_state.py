"""``CheckpointState``: the parameters, optimizer state and user properties of a training run, with
onnxruntime 1.19's Python surface. Files are onnxruntime's checkpoint format ("ODTC" FlatBuffers,
version 2), read and written by onnxtrain's C++ core (``include/onnxtrain/state.h``)."""
from __future__ import annotations

import os

import numpy as np

from ... import _C


class Parameter:
    """One model parameter of a ``CheckpointState`` (returned by ``state.parameters[name]``)."""

    def __init__(self, state: _C.CheckpointState, name: str):
        self._state = state
        self._name = name

    @property
    def name(self) -> str:
        """The parameter's name."""
        return self._name

    @property
    def data(self) -> np.ndarray:
        """A copy of the parameter's value (fails for a nominal state)."""
        return self._state.parameter_data(self._name)

    @data.setter
    def data(self, value: np.ndarray) -> None:
        """Copies ``value`` (same dtype and shape) into the parameter."""
        self._state.set_parameter_data(self._name, np.asarray(value))

    @property
    def grad(self) -> np.ndarray | None:
        """The gradient accumulated by a ``Module``'s training steps, or None before any."""
        return self._state.parameter_grad(self._name)

    @property
    def requires_grad(self) -> bool:
        """Whether the parameter is trained (False: frozen)."""
        return self._state.parameter_requires_grad(self._name)

    def __repr__(self) -> str:
        return f"Parameter(name={self.name}, requires_grad={self.requires_grad})"


class Parameters:
    """The parameters of a state, by name: ``[name]`` gives a ``Parameter``, ``[name] = array``
    copies a value in, ``in``, ``len`` and iteration over ``(name, Parameter)`` pairs."""

    def __init__(self, state: _C.CheckpointState):
        self._state = state

    def __getitem__(self, name: str) -> Parameter:
        if not self._state.has_parameter(name):
            raise KeyError(f"Parameter {name} not found.")
        return Parameter(self._state, name)

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        if not self._state.has_parameter(name):
            raise KeyError(f"Parameter {name} not found.")
        self._state.set_parameter_data(name, np.asarray(value))

    def __contains__(self, name: str) -> bool:
        return self._state.has_parameter(name)

    def __iter__(self):
        for name in self._state.parameter_names():
            yield name, Parameter(self._state, name)

    def __len__(self) -> int:
        return len(self._state.parameter_names())

    def __repr__(self) -> str:
        return f"Parameters({dict(self)!r})"


class Properties:
    """User properties of a state (int, float or str), by name: ``[name]``, ``[name] = value`` (adds
    or replaces), ``del``, ``in``, ``len`` and iteration over ``(name, value)`` pairs."""

    def __init__(self, state: _C.CheckpointState):
        self._state = state

    def __getitem__(self, name: str) -> int | float | str:
        if not self._state.has_property(name):
            raise KeyError(f"Property {name} not found.")
        return self._state.get_property(name)

    def __setitem__(self, name: str, value: int | float | str) -> None:
        self._state.add_property(name, value)

    def __delitem__(self, name: str) -> None:
        self._state.remove_property(name)

    def __contains__(self, name: str) -> bool:
        return self._state.has_property(name)

    def __iter__(self):
        for name in self._state.property_names():
            yield name, self._state.get_property(name)

    def __len__(self) -> int:
        return len(self._state.property_names())

    def __repr__(self) -> str:
        return f"Properties({dict(self)!r})"


class CheckpointState:
    """The state of a training run: model parameters, optimizer state and user properties.

    Made by ``CheckpointState.load_checkpoint`` (a complete or a nominal checkpoint, written by
    onnxruntime 1.17-1.19 or by onnxtrain). ``state.parameters`` and ``state.properties`` give access
    by name; ``state[name]`` (onnxruntime 1.16's form) finds a parameter, else a property, and
    ``state[name] = value`` sets a parameter's value or adds a property.
    """

    def __init__(self, state: _C.CheckpointState):
        if not isinstance(state, _C.CheckpointState):
            raise TypeError(f"Invalid argument for CheckpointState received {type(state)}")
        self._state = state
        self._parameters = Parameters(state)
        self._properties = Properties(state)

    @classmethod
    def load_checkpoint(cls, checkpoint_uri: str | os.PathLike) -> CheckpointState:
        """Loads a checkpoint file (and its ``<file>.data`` external data when it has one)."""
        return cls(_C.CheckpointState.load(os.fspath(checkpoint_uri)))

    @classmethod
    def save_checkpoint(cls, state: CheckpointState, checkpoint_uri: str | os.PathLike,
                        include_optimizer_state: bool = False) -> None:
        """Saves ``state`` atomically; the optimizer's state only with ``include_optimizer_state``."""
        state._state.save(os.fspath(checkpoint_uri), include_optimizer_state)

    @property
    def parameters(self) -> Parameters:
        """The model parameters by name."""
        return self._parameters

    @property
    def properties(self) -> Properties:
        """The user properties by name."""
        return self._properties

    def __getitem__(self, name: str):
        if self._state.has_parameter(name):
            return Parameter(self._state, name)
        if self._state.has_property(name):
            return self._state.get_property(name)
        raise KeyError(f"Could not find {name} in the checkpoint state.")

    def __setitem__(self, name: str, value) -> None:
        if self._state.has_parameter(name):
            self._state.set_parameter_data(name, np.asarray(value))
        else:
            self._state.add_property(name, value)

    def __contains__(self, name: str) -> bool:
        return self._state.has_parameter(name) or self._state.has_property(name)
