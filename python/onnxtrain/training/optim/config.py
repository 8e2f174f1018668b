"""Optimizer configurations of onnxruntime-training's ORTTrainer (``onnxruntime.training.optim``):
``SGDConfig``, ``AdamConfig``, ``LambConfig`` and their base ``_OptimizerConfig``.

A config is not an optimizer: it describes the optimizer the training session builds. Each one
maps onto an onnxtrain optimizer (``onnxtrain.optimizer_names()``) and its per-weight
hyper-parameters (``onnxtrain.optimizer_hyperparameters(name)``) through
``to_training_parameters_attributes`` / ``training_parameters_settings``; a value onnxtrain cannot
honour raises NotImplementedError naming it.

Mapping (onnxruntime kernel semantics -> onnxtrain):

* SGDConfig -> SGDOptimizer (lambda 0).
* AdamConfig -> AdamWOptimizer: onnxruntime's AdamOptimizer decays the weights decoupled from the
  moments (weight_decay_mode BEFORE_WEIGHT_UPDATE = torch's AdamW, ``lambda_coef`` = AdamW's
  lambda). AFTER_WEIGHT_UPDATE (Hugging Face's AdamW: bias correction folded into the step size,
  decay of the updated weights) is honoured only where it computes the same update
  (lambda_coef == 0 and do_bias_correction False); otherwise NotImplementedError.
* LambConfig -> LambOptimizer (same names).
* ``max_norm_clip`` is onnxtrain's session-wide ``max_grad_norm`` (global gradient-norm clipping
  for Adam / Lamb when the trainer's grad_norm_clip is on): it must be one value, > 0.
"""
import math
from enum import IntEnum, unique

from ..._C import optimizer_hyperparameters
from .._utils import ConfigError, check, check_number

_NAMES = ("AdamOptimizer", "LambOptimizer", "SGDOptimizer")


def _validate_float(name, minimum=None, finite=True):
    return lambda value: check_number(name, value, minimum=minimum, finite=finite)


def _validate_bool(name):
    def validate(value):
        check(isinstance(value, bool), f"'{name}' must be a bool, got {value!r}")
        return value
    return validate


def _validate_max_norm_clip(value):
    value = check_number("max_norm_clip", value)
    check(value != 0, "'max_norm_clip' must not be 0")
    return value


def _validate_decay_mode(value):
    check(isinstance(value, AdamConfig.DecayMode),
          f"'weight_decay_mode' must be an AdamConfig.DecayMode, got {value!r}")
    return value


def _validate_lr(value):
    return check_number("lr", value, minimum=0)


# validators of the hyper-parameters Adam and Lamb share
_ADAM_LAMB_VALIDATORS = {
    "lr": _validate_lr,
    "alpha": _validate_float("alpha", 0),
    "beta": _validate_float("beta", 0),
    "lambda": _validate_float("lambda_coef", 0),
    "epsilon": _validate_float("epsilon", 0),
    "max_norm_clip": _validate_max_norm_clip,
    "do_bias_correction": _validate_bool("do_bias_correction"),
}


def _group_key(key):
    """onnxruntime accepts 'lambda_coef' inside a parameter group for the 'lambda' hyper-parameter."""
    return "lambda" if key == "lambda_coef" else key


class _OptimizerConfig:
    """Base class of optimizer configurations (onnxruntime-training's ``optim._OptimizerConfig``).

    Args:
        name (str): 'SGDOptimizer', 'AdamOptimizer' or 'LambOptimizer'.
        params (list of dict): parameter groups ``{'params': [weight names], <hyper-parameter>:
            value, ...}`` overriding ``defaults`` for those weights ([]: every weight uses
            ``defaults``).
        defaults (dict): hyper-parameters of every weight; must hold 'lr' (a number >= 0).

    Attributes: ``name``, ``lr`` (float), ``defaults``, ``params`` (also ``param_groups``): the groups
    as copies completed with every default (a 'lambda_coef' key becomes 'lambda').

    Invalid arguments raise ValueError naming them (also an AssertionError, as onnxruntime's
    ``assert`` checks were).
    """

    # hyper-parameter -> validator returning the normalized value (set by subclasses)
    _validators = {"lr": _validate_lr}

    def __init__(self, name, params, defaults):
        check(isinstance(name, str), "'name' must be a string")
        check(name in _NAMES, f"'name' must be one of 'AdamOptimizer', 'LambOptimizer' or 'SGDOptimizer', got {name!r}")
        check(isinstance(defaults, dict), "'defaults' must be a dict")
        check("lr" in defaults, "'defaults' must contain a {'lr' : positive number} entry")
        defaults = {k: self._validate(k, v, "defaults") for k, v in defaults.items()}
        check(isinstance(params, list), f"'params' must be a list of dicts, got {type(params).__name__}")
        self.name = name
        self.lr = float(defaults["lr"])
        self.defaults = defaults
        self.params = []
        seen = {}
        for index, group in enumerate(params):
            self._add_param_group(group, index, seen)

    def _validate(self, key, value, where):
        validator = self._validators.get(key)
        if validator is None:
            return value
        try:
            return validator(value)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None

    def _add_param_group(self, group, index, seen):
        where = f"params[{index}]"
        check(isinstance(group, dict) and "params" in group and len(group) > 1,
              f"{where}: each dict inside 'params' must contain a {{'params' : [model parameter names]}} entry "
              "and additional entries for custom hyper parameter values")
        names = group["params"]
        check(isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names),
              f"{where}: 'params' must be a list of model parameter names (str), got {names!r}")
        for n in names:
            check(n not in seen, f"{where}: weight {n!r} already belongs to params[{seen.get(n)}]")
            seen[n] = index
        completed = {"params": list(names)}
        for key, value in group.items():
            if key == "params":
                continue
            hp = _group_key(key)
            check(hp in self.defaults, f"{where}: 'params' has {key!r} hyper parameter not present at 'defaults' "
                                       f"(known: {', '.join(sorted(self.defaults))})")
            check(hp != "lr", "'lr' is not supported inside params")  # onnxruntime's text
            check(hp not in completed, f"{where}: both 'lambda' and 'lambda_coef' given")
            completed[hp] = self._validate(hp, value, where)
        for key, value in self.defaults.items():
            completed.setdefault(key, value)
        self.params.append(completed)

    def _expose_defaults(self):
        """Each default hyper-parameter as an attribute ('lambda' as ``lambda_coef``), as onnxruntime's configs have."""
        for key, value in self.defaults.items():
            if key != "lr":
                setattr(self, "lambda_coef" if key == "lambda" else key, value)

    @property
    def param_groups(self):
        """The parameter groups (same list as ``params``)."""
        return self.params

    # -- mapping onto onnxtrain --------------------------------------------------------------

    def _onnxtrain_attributes(self, hp):
        """(onnxtrain optimizer name, {attribute: value}) of one weight's hyper-parameters."""
        return _MAPPERS[self.name](dict(hp))

    def _weight_hyperparameters(self, weight_names, frozen_weights=()):
        check(isinstance(weight_names, (list, tuple, set, frozenset)) and all(isinstance(w, str) for w in weight_names),
              "'weight_names' must be a list of weight names (str)")
        weights = list(weight_names)
        check(len(set(weights)) == len(weights), "'weight_names' has duplicates")
        known = set(weights) | set(frozen_weights)
        per_weight = {w: self.defaults for w in weights}
        for i, group in enumerate(self.params):
            for n in group["params"]:
                check(n in known, f"params[{i}]: {n!r} is not a weight of the model")
                if n in per_weight:
                    per_weight[n] = group
        return per_weight

    def to_training_parameters_attributes(self, weight_names, frozen_weights=()):
        """``(optimizer_name, {weight: {attribute: value}})`` for onnxtrain's TrainingParameters.

        ``weight_names``: the trained weights; ``frozen_weights``: weights a parameter group may name
        without them being trained. Attribute names and value types (float, or int for integer
        attributes) are those of ``onnxtrain.optimizer_hyperparameters(optimizer_name)``; every
        attribute is given explicitly. 'lr' (fed each step) and 'max_norm_clip' (see
        ``training_parameters_settings``) are not per-weight attributes. Raises
        NotImplementedError naming a value onnxtrain cannot honour.
        """
        name = None
        result = {}
        for w, hp in self._weight_hyperparameters(weight_names, frozen_weights).items():
            opt, attrs = self._onnxtrain_attributes(hp)
            name = opt if name is None else name
            result[w] = attrs
        if name is None:
            name, _ = self._onnxtrain_attributes(self.defaults)
        return name, result

    def training_parameters_settings(self, weight_names, frozen_weights=(), grad_norm_clip=True):
        """TrainingParameters fields for this config: ``{'training_optimizer_name',
        'optimizer_attributes_map', 'optimizer_int_attributes_map', 'enable_grad_norm_clip',
        'max_grad_norm'?}``.

        ``grad_norm_clip`` is ORTTrainerOptions' ``utils.grad_norm_clip``: onnxruntime clips the
        global gradient norm to ``max_norm_clip`` for Adam and Lamb only. ``max_grad_norm`` is
        present when clipping is on.
        """
        name, per_weight = self.to_training_parameters_attributes(weight_names, frozen_weights)
        table = optimizer_hyperparameters(name)
        floats, ints = {}, {}
        for w, attrs in per_weight.items():
            floats[w], ints[w] = {}, {}
            for k, v in attrs.items():
                if k not in table:
                    raise NotImplementedError(f"{self.name}: onnxtrain's {name} has no hyper-parameter {k!r}")
                (ints if isinstance(table[k], int) else floats)[w][k] = v
        settings = {"training_optimizer_name": name, "optimizer_attributes_map": floats,
                    "optimizer_int_attributes_map": ints}
        clip = bool(grad_norm_clip) and self.name in ("AdamOptimizer", "LambOptimizer")
        settings["enable_grad_norm_clip"] = clip
        if clip:
            groups = self._weight_hyperparameters(weight_names, frozen_weights).values()
            norms = {hp.get("max_norm_clip", 1.0) for hp in groups} or {self.defaults.get("max_norm_clip", 1.0)}
            if len(norms) > 1:
                raise NotImplementedError(f"max_norm_clip: onnxtrain clips the global gradient norm to one value; "
                                          f"parameter groups give {sorted(norms)}")
            norm = norms.pop()
            if not norm > 0:
                raise NotImplementedError(f"max_norm_clip={norm!r}: onnxtrain clips to a norm > 0 only")
            settings["max_grad_norm"] = float(norm)
        return settings

    def apply_to_training_parameters(self, parameters, weight_names, frozen_weights=(), grad_norm_clip=True):
        """Sets ``training_parameters_settings(...)`` on an onnxtrain TrainingParameters; returns it."""
        for k, v in self.training_parameters_settings(weight_names, frozen_weights, grad_norm_clip).items():
            setattr(parameters, k, v)
        return parameters

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r}, defaults={self.defaults!r}, params={self.params!r})"


def _merge_param_groups(params, param_groups):
    """``params`` is onnxruntime's argument name, ``param_groups`` the one its docs use."""
    if param_groups is not None:
        check(params is None, "give 'params' or 'param_groups', not both")
        return param_groups
    return [] if params is None else params


class SGDConfig(_OptimizerConfig):
    """SGD optimizer configuration (onnxruntime-training's ``optim.SGDConfig``).

    Args:
        params (list of dict, default []): must be empty (no parameter groups for SGD).
        lr (float, default 0.001): learning rate.

    Maps to onnxtrain's SGDOptimizer (no weight decay).
    """

    def __init__(self, params=None, lr=0.001, *, param_groups=None):
        params = _merge_param_groups(params, param_groups)
        check(isinstance(params, list) and len(params) == 0, "'params' must be an empty list for SGD optimizer")
        super().__init__(name="SGDOptimizer", params=params, defaults={"lr": lr})


class AdamConfig(_OptimizerConfig):
    """Adam optimizer configuration (onnxruntime-training's ``optim.AdamConfig``).

    Args:
        params (list of dict, default []): parameter groups (see ``_OptimizerConfig``); no 'lr'.
        lr (float, default 0.001): learning rate (>= 0).
        alpha (float, default 0.9): coefficient of the running average of the gradient (>= 0).
        beta (float, default 0.999): coefficient of the running average of its square (>= 0).
        lambda_coef (float, default 0.0): weight decay coefficient (>= 0); 'lambda' in ``defaults``.
        epsilon (float, default 1e-8): added to the denominator (>= 0).
        max_norm_clip (float, default 1.0): global gradient-norm clip (!= 0).
        do_bias_correction (bool, default True): bias-corrected moments.
        weight_decay_mode (AdamConfig.DecayMode, default BEFORE_WEIGHT_UPDATE): decay strategy.

    Maps to onnxtrain's AdamWOptimizer (see the module docstring).
    """

    @unique
    class DecayMode(IntEnum):
        """Weight decay strategy: 0 torch's AdamW, 1 Hugging Face's AdamW."""

        BEFORE_WEIGHT_UPDATE = 0
        AFTER_WEIGHT_UPDATE = 1

    _validators = dict(_ADAM_LAMB_VALIDATORS, weight_decay_mode=_validate_decay_mode)

    def __init__(self, params=None, lr=0.001, alpha=0.9, beta=0.999, lambda_coef=0.0, epsilon=1e-8,
                 max_norm_clip=1.0, do_bias_correction=True, weight_decay_mode=DecayMode.BEFORE_WEIGHT_UPDATE,
                 *, param_groups=None):
        params = _merge_param_groups(params, param_groups)
        defaults = {"lr": lr, "alpha": alpha, "beta": beta, "lambda": lambda_coef, "epsilon": epsilon,
                    "max_norm_clip": max_norm_clip, "do_bias_correction": do_bias_correction,
                    "weight_decay_mode": weight_decay_mode}
        super().__init__(name="AdamOptimizer", params=params, defaults=defaults)
        self._expose_defaults()


class LambConfig(_OptimizerConfig):
    """Lamb optimizer configuration (onnxruntime-training's ``optim.LambConfig``).

    Args: ``params``, ``lr`` (0.001), ``alpha`` (0.9), ``beta`` (0.999), ``lambda_coef`` (0.0) and
    ``max_norm_clip`` (1.0) as AdamConfig, and
        ratio_min (float, default -inf) / ratio_max (float, default inf): bounds of the trust ratio.
        epsilon (float, default 1e-6): added to the denominator (>= 0).
        do_bias_correction (bool, default False): bias-corrected moments.

    Maps to onnxtrain's LambOptimizer.
    """

    _validators = dict(_ADAM_LAMB_VALIDATORS, ratio_min=_validate_float("ratio_min", finite=False),
                       ratio_max=_validate_float("ratio_max", finite=False))

    def __init__(self, params=None, lr=0.001, alpha=0.9, beta=0.999, lambda_coef=0.0, ratio_min=float("-inf"),
                 ratio_max=float("inf"), epsilon=1e-6, max_norm_clip=1.0, do_bias_correction=False,
                 *, param_groups=None):
        params = _merge_param_groups(params, param_groups)
        defaults = {"lr": lr, "alpha": alpha, "beta": beta, "lambda": lambda_coef, "ratio_min": ratio_min,
                    "ratio_max": ratio_max, "epsilon": epsilon, "max_norm_clip": max_norm_clip,
                    "do_bias_correction": do_bias_correction}
        super().__init__(name="LambOptimizer", params=params, defaults=defaults)
        self._expose_defaults()


# -- per-weight hyper-parameters -> onnxtrain attributes ------------------------------------------


def _take(hp, config_name, keys_and_defaults):
    """Pops each hyper-parameter (its onnxruntime default when absent); what remains is unknown."""
    values = {k: hp.pop(k, d) for k, d in keys_and_defaults.items()}
    hp.pop("lr", None)  # fed at each step, not an attribute
    hp.pop("max_norm_clip", None)  # session-wide, see training_parameters_settings
    hp.pop("params", None)
    if hp:
        raise NotImplementedError(f"{config_name}: onnxtrain cannot honour the hyper-parameter(s) {sorted(hp)}")
    return values


def _map_sgd(hp):
    _take(hp, "SGDOptimizer", {})
    return "SGDOptimizer", {"lambda": 0.0}


def _map_adam(hp):
    v = _take(hp, "AdamOptimizer", {"alpha": 0.9, "beta": 0.999, "lambda": 0.0, "epsilon": 1e-8,
                                    "do_bias_correction": True,
                                    "weight_decay_mode": AdamConfig.DecayMode.BEFORE_WEIGHT_UPDATE})
    mode = int(v["weight_decay_mode"])
    if mode not in (0, 1):
        raise NotImplementedError(f"weight_decay_mode={mode}: onnxruntime and onnxtrain know modes 0 and 1")
    if mode == 1 and (v["lambda"] != 0 or v["do_bias_correction"]):
        raise NotImplementedError(
            "weight_decay_mode=AFTER_WEIGHT_UPDATE (Hugging Face's AdamW) is not implemented by onnxtrain "
            "unless lambda_coef == 0 and do_bias_correction is False (where it equals BEFORE_WEIGHT_UPDATE, "
            "torch's AdamW, onnxtrain's AdamWOptimizer)")
    return "AdamWOptimizer", {"alpha": float(v["alpha"]), "beta": float(v["beta"]), "lambda": float(v["lambda"]),
                              "epsilon": float(v["epsilon"]), "do_bias_correction": int(bool(v["do_bias_correction"]))}


def _map_lamb(hp):
    v = _take(hp, "LambOptimizer", {"alpha": 0.9, "beta": 0.999, "lambda": 0.0, "ratio_min": -math.inf,
                                    "ratio_max": math.inf, "epsilon": 1e-6, "do_bias_correction": False})
    if v["ratio_min"] > v["ratio_max"]:
        raise NotImplementedError(f"ratio_min={v['ratio_min']} > ratio_max={v['ratio_max']}: onnxtrain clamps the "
                                  "trust ratio to [ratio_min, ratio_max] and needs ratio_min <= ratio_max")
    attrs = {k: float(v[k]) for k in ("alpha", "beta", "lambda", "ratio_min", "ratio_max", "epsilon")}
    attrs["do_bias_correction"] = int(bool(v["do_bias_correction"]))
    return "LambOptimizer", attrs


_MAPPERS = {"SGDOptimizer": _map_sgd, "AdamOptimizer": _map_adam, "LambOptimizer": _map_lamb}
