"""onnxruntime's native module ``onnxruntime.capi.onnxruntime_pybind11_state``: the C objects
(``OrtValue``, ``OrtValueVector``, ``OrtDevice``, ``SessionIOBinding``, ``InferenceSession``,
``SessionOptions``, ``RunOptions``, ...), the enums, the module functions and the exception classes,
as onnxtrain's native core provides them."""
import enum

from .. import _C
from .._errors import (EngineError, EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf,  # noqa: F401
                       ModelLoaded, NoModel, NoSuchFile, NotImplemented, RuntimeException)
from .._errors import ORT_EXCEPTIONS as _ORT_EXCEPTIONS
from .._logging import set_default_logger_severity, set_default_logger_verbosity  # noqa: F401

# Native objects under onnxruntime's names.
_NATIVE = ("OrtValue", "OrtValueVector", "OrtDevice", "OrtMemoryInfo", "OrtAllocatorType", "OrtMemType",
           "OrtDeviceMemoryType", "OrtMemoryInfoDeviceType",
           "is_dlpack_uint8_tensor", "InferenceSession", "SessionOptions", "RunOptions", "SessionIOBinding",
           "ModelMetadata", "NodeArg", "GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder", "set_seed",
           "TrainingAgent", "PartialGraphExecutionState", "OrtValueCache",
           "SparseTensor", "OrtSparseFormat", "SparseCooView", "SparseCsrView", "SparseBlockSparseView",
           "OrtArenaCfg", "create_and_register_allocator", "create_and_register_allocator_v2")
for _name in _NATIVE:
    if hasattr(_C, _name):
        globals()[_name] = getattr(_C, _name)

# onnxruntime-training's forward/backward objects and its GradientGraphBuilder.
from ._module_graph import (GraphTransformerConfiguration, OrtModuleGraphBuilder,  # noqa: E402,F401
                            OrtModuleGraphBuilderConfiguration, PropagateCastOpsConfiguration,
                            PropagateCastOpsStrategy, Severity, TrainingGraphTransformerConfiguration)
from ..gradient import GradientGraphBuilder  # noqa: E402,F401

GraphInfo = _C.GraphInfo  # what OrtModuleGraphBuilder.get_graph_info() returns

_TRAINING = ["OrtModuleGraphBuilder", "OrtModuleGraphBuilderConfiguration", "PropagateCastOpsConfiguration",
             "PropagateCastOpsStrategy", "GraphTransformerConfiguration", "TrainingGraphTransformerConfiguration",
             "Severity", "GraphInfo", "GradientGraphBuilder"]


def __getattr__(name):
    # onnxruntime-training's TrainingParameters lives in onnxtrain.training, which imports this
    # module: it is looked up on first use instead of at import.
    if name == "TrainingParameters":
        from ..training._session import TrainingParameters
        return TrainingParameters
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ArenaExtendStrategy(enum.IntEnum):
    """How an arena grows (``OrtArenaCfg.arena_extend_strategy`` takes these values, or -1 for the
    default): by the next power of two, or by the size requested."""
    kNextPowerOfTwo = 0
    kSameAsRequested = 1


kNextPowerOfTwo = ArenaExtendStrategy.kNextPowerOfTwo
kSameAsRequested = ArenaExtendStrategy.kSameAsRequested



class OrtEpAssignedNode:
    """A node of a session's graph as get_provider_graph_assignment_info reports it."""

    __slots__ = ("_name", "_op_type", "_domain")

    def __init__(self, name, op_type, domain):
        self._name, self._op_type, self._domain = name, op_type, domain

    @property
    def name(self):
        """The node's name ('' when the model gives none)."""
        return self._name

    @property
    def op_type(self):
        """The node's operator."""
        return self._op_type

    @property
    def domain(self):
        """The operator's domain ('' for ai.onnx)."""
        return self._domain

    def __repr__(self):
        return f"OrtEpAssignedNode(name={self._name!r}, op_type={self._op_type!r}, domain={self._domain!r})"


class OrtEpAssignedSubgraph:
    """The nodes a session assigned to one execution provider (``ep_name``, ``get_nodes()``)."""

    __slots__ = ("_ep_name", "_nodes")

    def __init__(self, ep_name, nodes):
        self._ep_name, self._nodes = ep_name, list(nodes)

    @property
    def ep_name(self):
        """The execution provider's name."""
        return self._ep_name

    def get_nodes(self):
        """The nodes assigned to it, as OrtEpAssignedNode, in graph order."""
        return list(self._nodes)

    def __repr__(self):
        return f"OrtEpAssignedSubgraph(ep_name={self._ep_name!r}, nodes={len(self._nodes)})"



# Every provider name onnxruntime defines (get_all_providers); onnxtrain runs CPUExecutionProvider.
_ALL_PROVIDERS = [
    "TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider", "ROCMExecutionProvider",
    "OpenVINOExecutionProvider", "DnnlExecutionProvider", "TvmExecutionProvider", "VitisAIExecutionProvider",
    "NnapiExecutionProvider", "CoreMLExecutionProvider", "ArmNNExecutionProvider", "ACLExecutionProvider",
    "DmlExecutionProvider", "RknpuExecutionProvider", "XnnpackExecutionProvider", "CANNExecutionProvider",
    "CPUExecutionProvider",
]


def get_available_providers():
    """Execution providers this build can run now: ``['CPUExecutionProvider']``, preceded by
    ``'CUDAExecutionProvider'`` where the build has the CUDA provider and a device answers."""
    return list(_C.get_available_providers())


def get_all_providers():
    """Every execution provider name onnxruntime defines (onnxtrain runs only the CPU one)."""
    return list(_ALL_PROVIDERS)


def get_device():
    """The device this build computes on: ``'CPU'``."""
    return "CPU"


def get_version_string():
    """The version of this build (onnxruntime returns its own version string here)."""
    from .. import __version__
    return __version__


def get_build_info():
    """A line describing this build."""
    from .. import __version__
    return f"onnxtrain {__version__}, CPUExecutionProvider (oneDNN kernels)"


def get_default_session_options():
    """A SessionOptions with every default."""
    return _C.SessionOptions()


def has_collective_ops():
    """False: onnxruntime's collective operators (``com.microsoft`` AllReduce, AllGather, AllToAll,
    which its NCCL/MPI builds register) are not implemented by onnxtrain; a model that uses them
    fails to load naming the operator. (onnxtrain's own data parallelism does not go through them:
    docs/distributed.md.)"""
    return False


_MPI = ["get_mpi_context_local_rank", "get_mpi_context_local_size", "get_mpi_context_world_rank",
        "get_mpi_context_world_size"] if _C._distributed_mpi_available() else []
if _MPI:  # as in onnxruntime-training, only builds with MPI define them
    def get_mpi_context_world_rank():
        """This process's rank in the MPI job (starts MPI; 0 outside a launcher)."""
        return _C._distributed_world_rank()

    def get_mpi_context_world_size():
        """Ranks in the MPI job (starts MPI; 1 outside a launcher)."""
        return _C._distributed_world_size()

    def get_mpi_context_local_rank():
        """This process's rank among the job's processes on this machine (0 outside a launcher)."""
        get_mpi_context_world_rank()  # MPI started, as onnxruntime's MPIContext does
        return _C._distributed_launch_info()["local_rank"]

    def get_mpi_context_local_size():
        """The job's processes on this machine (1 outside a launcher)."""
        get_mpi_context_world_rank()
        return _C._distributed_launch_info()["local_size"]


def is_torch_interop_default_on():
    """False: this build has no PyTorch interop (onnxruntime-training's PythonOp, custom autograd
    functions inside the ONNX graph), as onnxruntime-training builds without it answer."""
    return False


def is_triton_enabled():
    """False: this build has no Triton kernels, as onnxruntime-training builds without them answer."""
    return False


def enable_telemetry_events():
    """Accepted for compatibility: onnxtrain sends no telemetry, ever."""


def disable_telemetry_events():
    """Accepted for compatibility: onnxtrain sends no telemetry, ever."""


__all__ = ([n for n in _NATIVE if n in globals()] + list(_ORT_EXCEPTIONS) + _TRAINING +
           ["OrtEpAssignedNode", "OrtEpAssignedSubgraph", "get_available_providers", "get_all_providers", "get_device", "get_build_info", "get_version_string",
            "get_default_session_options", "enable_telemetry_events", "disable_telemetry_events",
            "has_collective_ops", "is_torch_interop_default_on", "is_triton_enabled", "ArenaExtendStrategy",
            "kNextPowerOfTwo", "kSameAsRequested"] + _MPI + [
            "set_default_logger_severity", "set_default_logger_verbosity"])
