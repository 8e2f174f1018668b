"""onnxruntime's ``onnxruntime.capi.onnxruntime_inference_collection``: the Python classes
``Session``, ``InferenceSession``, ``IOBinding``, ``OrtValue``, ``OrtDevice``, ``SparseTensor`` over the native objects
of ``onnxruntime_pybind11_state``, with onnxruntime's call shapes."""
import collections
import collections.abc
import os
import threading
import warnings

from . import _pybind_state as C
from ._values import OrtDevice, OrtValue, SparseTensor, get_ort_device_type  # noqa: F401
from .. import _logging

def check_and_normalize_provider_args(providers, provider_options, available_provider_names):
    """Validates ``providers`` / ``provider_options`` as onnxruntime does and returns
    ``(names, options)``. A provider that is not available is left out with a warning (as
    onnxruntime does); malformed arguments raise ValueError."""
    if providers is None:
        return [], []
    chosen = collections.OrderedDict()

    def add(name, options):
        if name not in available_provider_names:
            warnings.warn(f"Specified provider '{name}' is not in available provider names."
                          f"Available providers: '{', '.join(available_provider_names)}'")
            return
        if name in chosen:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.")
            return
        chosen[name] = {str(k): str(v) for k, v in options.items()}

    if not isinstance(providers, collections.abc.Sequence) or isinstance(providers, str):
        raise ValueError("'providers' should be a sequence.")
    if provider_options is not None:
        if not isinstance(provider_options, collections.abc.Sequence):
            raise ValueError("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
        if not all(isinstance(p, str) for p in providers):
            raise ValueError("Only string values for 'providers' are supported if 'provider_options' is given.")
        if not all(isinstance(o, dict) for o in provider_options):
            raise ValueError("'provider_options' values must be dicts.")
        for name, options in zip(providers, provider_options):
            add(name, options)
    else:
        for p in providers:
            if isinstance(p, str):
                add(p, {})
            elif isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], dict):
                add(p[0], p[1])
            else:
                raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
    return list(chosen.keys()), list(chosen.values())


def _c_run_options(run_options):
    if run_options is None or isinstance(run_options, C.RunOptions):
        return run_options
    raise TypeError(f"run_options must be an onnxruntime RunOptions, got {type(run_options).__name__}")


_RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


def _cpu_memory_info():
    return C.OrtMemoryInfo("Cpu", C.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, C.OrtMemType.DEFAULT)


class UnknownProviderError(RuntimeError):
    """A provider name onnxruntime does not define (its message: "Unknown Provider Type: NAME")."""


class Session:
    """Base of InferenceSession: metadata accessors and the run methods over ``self._sess`` (the
    native session)."""

    def __init__(self):
        self._sess = None
        self._enable_fallback = True

    def get_session_options(self):
        """The session options (those of the model's ``ort_config`` metadata applied)."""
        return self._sess_options

    def get_inputs(self):
        """The inputs to feed, as a list of ``NodeArg``."""
        return self._inputs_meta

    def get_outputs(self):
        """The outputs, as a list of ``NodeArg``."""
        return self._outputs_meta

    def get_overridable_initializers(self):
        """Initializers that are also graph inputs (may be fed), as a list of ``NodeArg``."""
        return self._overridable_initializers

    def get_modelmeta(self):
        """The model's metadata (``ModelMetadata``)."""
        return self._model_meta

    def get_providers(self):
        """The execution providers the session uses."""
        return self._providers

    def get_provider_options(self):
        """Options of each provider (``{name: {key: value}}``)."""
        return self._provider_options

    def get_provider_graph_assignment_info(self):
        """The nodes of the session's graph (after load-time optimizations) grouped by the execution
        provider each runs on: a list of ``OrtEpAssignedSubgraph`` (``ep_name``, ``get_nodes()`` with
        ``name``, ``op_type``, ``domain``). As onnxruntime, the session must be created with the
        config entry ``session.record_ep_graph_assignment_info`` set to "1"."""
        from .onnxruntime_pybind11_state import OrtEpAssignedNode, OrtEpAssignedSubgraph
        if self._sess_options.get_session_config_entry(_RECORD_ASSIGNMENT) != "1":
            raise C.InvalidArgument(f"get_provider_graph_assignment_info: create the session with the session config "
                                  f"entry '{_RECORD_ASSIGNMENT}' set to '1' to record the assignment")
        groups = {}
        for name, op_type, domain, provider in self._sess.node_assignment():
            groups.setdefault(provider, []).append(OrtEpAssignedNode(name, op_type, domain))
        return [OrtEpAssignedSubgraph(p, nodes) for p, nodes in groups.items()]

    def get_input_memory_infos(self):
        """Where the session reads each input (``get_inputs()`` order), as ``OrtMemoryInfo``: CPU
        memory, as onnxtrain computes on the CPU."""
        return [_cpu_memory_info() for _ in self._inputs_meta]

    def get_output_memory_infos(self):
        """Where the session writes each output (``get_outputs()`` order), as ``OrtMemoryInfo``."""
        return [_cpu_memory_info() for _ in self._outputs_meta]

    def set_providers(self, providers=None, provider_options=None):
        """Recreates the session with these providers. A name onnxruntime does not define raises
        RuntimeError "Unknown Provider Type: NAME" (as onnxruntime does); one it defines that this
        build lacks (e.g. CUDAExecutionProvider) is left out with a warning."""
        self._reset_session(providers, provider_options)

    def disable_fallback(self):
        """Disables the provider fallback (onnxtrain has only the CPU provider: nothing falls back)."""
        self._enable_fallback = False

    def enable_fallback(self):
        """Enables the provider fallback (onnxtrain has only the CPU provider: nothing falls back)."""
        self._enable_fallback = True

    def _validate_input(self, input_feed):
        # onnxruntime's check and message (since 1.14; 1.13 said "Model requires N inputs. Input
        # Feed contains M"): every input without an optional type must be fed. The required names
        # are listed once per session: this runs before every run.
        missing = [n for n in self._required_inputs if n not in input_feed]
        if not missing:
            return
        feed_input_names = list(input_feed.keys())
        # onnxruntime raises ValueError here; InvalidArgument is one. Names the feed has that the
        # model lacks follow (a misspelt name is the usual cause).
        message = f"Required inputs ({missing}) are missing from input feed ({feed_input_names})."
        known = {i.name for i in self._inputs_meta} | {i.name for i in self._overridable_initializers}
        unknown = [n for n in feed_input_names if n not in known]
        if unknown:
            message += (f" Feed has unknown input {', '.join(repr(n) for n in unknown)}; the model's inputs are: "
                        f"{', '.join(i.name for i in self._inputs_meta)}")
        raise C.InvalidArgument(message)

    def _checked_run_args(self, output_names, input_feed, run_options):
        # What run and run_async check before running: the feed, the output names (None or empty:
        # all outputs), the run options; returns the output names and the C run options.
        if not isinstance(input_feed, dict):
            raise TypeError("input_feed must be a dict mapping input names to values")
        self._validate_input(input_feed)
        if isinstance(output_names, str):
            output_names = [output_names]
        if not output_names:
            output_names = [o.name for o in self._outputs_meta]
        return output_names, _c_run_options(run_options)

    def run(self, output_names, input_feed, run_options=None):
        """Computes the outputs ``output_names`` (None: all) from ``input_feed``
        (``{name: numpy array | list of arrays | OrtValue}``); returns numpy arrays."""
        output_names, c_run_options = self._checked_run_args(output_names, input_feed, run_options)
        # The run's own log_severity_level (when set, >= 0) replaces the session's for its messages.
        severity = self._sess_options.log_severity_level
        if run_options is not None and run_options.log_severity_level >= 0:
            severity = run_options.log_severity_level
        if _logging.enabled(0, severity):  # formatting the message costs more than a small run
            _logging.log(0, self._log_prefix(run_options), f"run: {len(input_feed)} inputs -> {list(output_names)}",
                         severity)
        return self._sess.run(output_names, input_feed, c_run_options)

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """Runs like ``run`` on another thread and returns at once; when the run ends,
        ``callback(outputs, user_data, error)`` is called on that thread: the numpy outputs and ""
        on success, an empty list and the error's message otherwise (onnxruntime's run_async). A
        feed that names no required input raises here, before anything runs."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        names, c_run_options = self._checked_run_args(output_names, input_feed, run_options)
        sess, names, feed = self._sess, list(names), dict(input_feed)

        def work():
            try:
                outputs, error = sess.run(names, feed, c_run_options), ""
            except Exception as e:  # noqa: BLE001 (handed to the callback, as onnxruntime does)
                outputs, error = [], str(e)
            callback(outputs, user_data, error)

        threading.Thread(target=work, name="onnxtrain-run-async").start()

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """Like run, with OrtValue feeds; returns a list of OrtValue."""
        if not isinstance(input_dict_ort_values, dict):
            raise TypeError("input_dict_ort_values must be a dict mapping input names to OrtValue")
        self._validate_input(input_dict_ort_values)
        feeds = {}
        for name, v in input_dict_ort_values.items():
            if isinstance(v, OrtValue):
                feeds[name] = v._get_c_value()
            elif isinstance(v, C.OrtValue):
                feeds[name] = v
            else:
                raise TypeError(f"input '{name}' must be an OrtValue, got {type(v).__name__}")
        if not output_names:
            output_names = [o.name for o in self._outputs_meta]
        result = self._sess.run_with_ort_values(feeds, list(output_names), _c_run_options(run_options))
        return [OrtValue(v) for v in result]

    def run_with_ortvaluevector(self, run_options, feed_names, feeds, fetch_names, fetches, fetch_devices):
        """Runs with ``feeds`` (an OrtValueVector) and fills ``fetches`` (an OrtValueVector) with
        the outputs ``fetch_names``: the least conversion work between Python and the engine."""
        self._sess.run_with_ortvaluevector(_c_run_options(run_options), list(feed_names), feeds, list(fetch_names),
                                           fetches, fetch_devices)

    def end_profiling(self):
        """Stops profiling and writes the Chrome-trace JSON; returns its file name ("" when
        profiling was not enabled)."""
        return self._sess.end_profiling()

    def get_profiling_start_time_ns(self):
        """When profiling started (``time.monotonic_ns()`` clock); 0 when profiling is off."""
        return self._sess.get_profiling_start_time_ns

    def get_tuning_results(self):
        """onnxruntime's TunableOp results per execution provider: ``[]`` (onnxtrain's CPU kernels
        choose their algorithms without a tuning pass, so there is nothing to save)."""
        return []

    def set_tuning_results(self, results, error_on_invalid=False):
        """Loads TunableOp results: an empty list is accepted; results for any provider raise
        NotImplemented (onnxtrain has no tunable operators to apply them to)."""
        if results:
            eps = sorted({str(r.get("ep", "?")) if isinstance(r, dict) else "?" for r in results})
            raise C.NotImplemented(f"set_tuning_results: tuning results for {', '.join(eps)}: onnxtrain has no "
                                   f"tunable operators")

    def io_binding(self):
        """A new ``IOBinding`` for this session."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        """Runs with the inputs and outputs bound in ``iobinding``."""
        self._sess.run_with_iobinding(iobinding._iobinding, _c_run_options(run_options))

    def last_run_stats(self):
        """onnxtrain's figures of the last run's plan (arena size, steps, folded nodes)."""
        return self._sess.last_run_stats()

    def _log_prefix(self, run_options=None):
        parts = [p for p in (self._sess_options.logid, run_options.logid if run_options else "") if p]
        return ":".join(parts)


class InferenceSession(Session):
    """Loads an ONNX model (a path or the serialized bytes) and runs it, as
    ``onnxruntime.InferenceSession`` does."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        Session.__init__(self)
        if isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        if isinstance(path_or_bytes, str):
            self._model_path, self._model_bytes = path_or_bytes, None
        elif isinstance(path_or_bytes, (bytes, bytearray)):
            self._model_path, self._model_bytes = None, bytes(path_or_bytes)
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")
        if sess_options is not None and not isinstance(sess_options, C.SessionOptions):
            raise TypeError("sess_options must be an onnxruntime SessionOptions")
        unknown = set(kwargs) - {"disabled_optimizers"}
        if unknown:
            raise TypeError(f"InferenceSession got unexpected keyword arguments {sorted(unknown)}")
        self._sess_options = sess_options
        self._sess_options_initial = sess_options
        self._read_config_from_model = os.environ.get("ORT_LOAD_CONFIG_FROM_MODEL") == "1"
        try:
            self._create_inference_session(providers, provider_options, kwargs.get("disabled_optimizers"))
        except UnknownProviderError as e:
            # onnxruntime (1.14 and later) retries once with its fallback providers.
            if not self._enable_fallback:
                raise
            warnings.warn(f"EP Error {e} when using {providers}; falling back to {self._fallback_providers} and "
                          "retrying.")
            self._create_inference_session(self._fallback_providers, None, kwargs.get("disabled_optimizers"))
            self.disable_fallback()

    def _create_inference_session(self, providers, provider_options, disabled_optimizers=None):
        self._fallback_providers = ["CPUExecutionProvider"]
        names, options = check_and_normalize_provider_args(providers, provider_options, C.get_available_providers())
        known = C.get_all_providers()
        for p in providers or []:
            name = p if isinstance(p, str) else p[0]
            if name not in known:
                raise UnknownProviderError(f"Unknown Provider Type: {name}")
        if providers is not None and not names:
            names, options = ["CPUExecutionProvider"], [{}]
        session_options = self._sess_options if self._sess_options is not None else C.SessionOptions()
        if self._model_path is not None:
            sess = C.InferenceSession(session_options, self._model_path, True, self._read_config_from_model)
        else:
            sess = C.InferenceSession(session_options, self._model_bytes, False, self._read_config_from_model)
        if disabled_optimizers is not None and not isinstance(disabled_optimizers, set):
            disabled_optimizers = set(disabled_optimizers)
        sess.initialize_session(names, options, disabled_optimizers)
        self._sess = sess
        self._sess_options = sess.session_options
        self._inputs_meta = sess.inputs_meta
        self._required_inputs = [i.name for i in self._inputs_meta if not i.type.startswith("optional")]
        self._outputs_meta = sess.outputs_meta
        self._overridable_initializers = sess.overridable_initializers
        self._model_meta = sess.model_meta
        self._providers = sess.get_providers()
        self._provider_options = sess.get_provider_options()
        self._profiling_start_time_ns = sess.get_profiling_start_time_ns
        _logging.log(0, self._log_prefix(), f"session created: {len(self._inputs_meta)} inputs, "
                     f"{len(self._outputs_meta)} outputs, providers {self._providers}",
                     self._sess_options.log_severity_level)

    def _reset_session(self, providers, provider_options):
        self._sess = None
        self._sess_options = self._sess_options_initial
        self._create_inference_session(providers, provider_options)


class IOBinding:
    """Inputs and outputs bound to a session ahead of ``run_with_iobinding`` (onnxruntime's
    IOBinding). CPU memory only: binding to another device raises InvalidArgument naming it."""

    def __init__(self, session):
        self._iobinding = C.SessionIOBinding(session._sess)
        self._numpy_obj_references = {}

    def bind_cpu_input(self, name, arr_on_cpu):
        """Binds input ``name`` to a numpy array (viewed, not copied, when its layout allows)."""
        self._numpy_obj_references[name] = arr_on_cpu
        self._iobinding.bind_input(name, arr_on_cpu)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        """Binds input ``name`` to ``buffer_ptr`` on ``device_type``/``device_id`` holding
        ``element_type`` (a numpy type) values of ``shape``; the caller keeps the memory alive."""
        self._iobinding.bind_input(name, C.OrtDevice(get_ort_device_type(device_type, device_id),
                                                     C.OrtDevice.default_memory(), device_id),
                                   element_type, list(shape), buffer_ptr)

    def bind_ortvalue_input(self, name, ortvalue):
        """Binds input ``name`` to an OrtValue."""
        self._iobinding.bind_ortvalue_input(name, ortvalue._ortvalue)

    def synchronize_inputs(self):
        """Waits for the inputs' copies (CPU memory: nothing to wait for)."""
        self._iobinding.synchronize_inputs()

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None):
        """Binds output ``name`` to a device (the run allocates it) or, with ``element_type``,
        ``shape`` and ``buffer_ptr``, to memory the run writes into."""
        device = C.OrtDevice(get_ort_device_type(device_type, device_id), C.OrtDevice.default_memory(), device_id)
        if buffer_ptr is None:
            self._iobinding.bind_output(name, device)
            return
        if element_type is None or shape is None:
            raise ValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
        self._iobinding.bind_output(name, device, element_type, list(shape), buffer_ptr)

    def bind_ortvalue_output(self, name, ortvalue):
        """Binds output ``name`` to an OrtValue the run writes into (type and shape must match)."""
        self._iobinding.bind_ortvalue_output(name, ortvalue._ortvalue)

    def synchronize_outputs(self):
        """Waits for the outputs (CPU memory: nothing to wait for)."""
        self._iobinding.synchronize_outputs()

    def get_outputs(self):
        """The last run's outputs as a list of OrtValue."""
        return [OrtValue(v) for v in self._iobinding.get_outputs()]

    def get_outputs_as_ortvaluevector(self):
        """The last run's outputs as the C ``OrtValueVector`` (no Python wrapper per value)."""
        return self._iobinding.get_outputs()

    def copy_outputs_to_cpu(self):
        """Copies of the last run's outputs as numpy arrays."""
        return self._iobinding.copy_outputs_to_cpu()

    def clear_binding_inputs(self):
        """Forgets the bound inputs."""
        self._iobinding.clear_binding_inputs()
        self._numpy_obj_references.clear()

    def clear_binding_outputs(self):
        """Forgets the bound outputs (and the last run's)."""
        self._iobinding.clear_binding_outputs()
