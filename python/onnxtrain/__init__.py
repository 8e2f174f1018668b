"""onnxtrain: train ONNX models on CPU.

onnxruntime's Python API under its own names — ``InferenceSession``, ``SessionOptions``,
``RunOptions``, ``OrtValue``, ``OrtDevice``, ``IOBinding``, the enums, the module functions and the
exception classes of ``onnxruntime.capi.onnxruntime_pybind11_state`` — and onnxruntime-training's
``TrainingSession`` / ``TrainingParameters``. ``Trainer`` runs the training loop (epochs, shuffled
batches, validation, exact checkpoints) over a TrainingSession. ``python3 -m onnxtrain.ort_alias
script.py`` runs an unchanged onnxruntime script on onnxtrain.
"""
# OpenMP waits: libgomp's default (idle threads spin briefly before they sleep). Sleeping waits
# (OMP_WAIT_POLICY=PASSIVE) made every parallel region pay a thread wake-up, ~40 us on these
# virtual machines: 2-thread steps 15-30 % slower (bench/side_by_side.py, Nov 2026), and no faster
# when another process holds a core. Set OMP_WAIT_POLICY before importing to choose otherwise.
__version__ = "0.1.0"
# The onnxruntime Python API level onnxtrain provides: what ``onnxruntime.__version__`` reads under
# the alias (onnxtrain.ort_alias), so that version checks in onnxruntime scripts pass.
__onnxruntime_version__ = "1.13.1"
__author__ = "onnxtrain developers"

from ._errors import (EngineError, EPFail, Fail, InvalidArgument, InvalidGraph, InvalidModel, InvalidProtobuf,
                      ModelFileError, ModelLoaded, NoModel, NoSuchFile, NotImplemented, OnnxTrainError,
                      RuntimeException, UnsupportedError)
from ._C import (EvalResult, FitResult, Objective, Trainer, TrainerOptions, TrainRecord, loss_names,
                 lr_schedule_names, optimizer_hyperparameters, optimizer_names, shared_allocator_stats)
from .capi._pybind_state import (ExecutionMode, ExecutionOrder, GraphOptimizationLevel, ModelMetadata, NodeArg,
                                 has_collective_ops,
                                 OrtAllocatorType, OrtDeviceMemoryType, OrtEpAssignedNode, OrtEpAssignedSubgraph,
                                 OrtArenaCfg, OrtMemoryInfo, OrtMemoryInfoDeviceType, OrtMemType, OrtSparseFormat,
                                 RunOptions, SessionIOBinding, SessionOptions, create_and_register_allocator,
                                 create_and_register_allocator_v2, disable_telemetry_events, enable_telemetry_events,
                                 get_all_providers, get_available_providers, get_build_info, get_device,
                                 get_version_string, set_default_logger_severity, set_default_logger_verbosity,
                                 set_seed)
from .capi.onnxruntime_inference_collection import InferenceSession, IOBinding, OrtDevice, OrtValue, SparseTensor
from .capi.onnxruntime_validation import cuda_version, package_name, version
from .gradient import GradientGraphBuilder
from .training import TrainingParameters, TrainingSession, add_loss_output, get_train_initializer

__all__ = [
    # onnxruntime
    "InferenceSession", "SessionOptions", "RunOptions", "IOBinding", "SessionIOBinding", "OrtValue", "OrtDevice",
    "OrtMemoryInfo", "OrtAllocatorType", "OrtMemType", "OrtDeviceMemoryType", "OrtMemoryInfoDeviceType",
    "OrtEpAssignedNode", "OrtEpAssignedSubgraph", "ModelMetadata", "NodeArg", "GraphOptimizationLevel",
    "ExecutionMode", "ExecutionOrder", "get_available_providers", "get_all_providers", "get_device",
    "get_build_info", "get_version_string", "set_seed", "set_default_logger_severity", "set_default_logger_verbosity",
    "enable_telemetry_events", "disable_telemetry_events", "SparseTensor", "OrtSparseFormat", "OrtArenaCfg",
    "create_and_register_allocator", "create_and_register_allocator_v2",
    "Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException", "InvalidProtobuf",
    "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail", "has_collective_ops", "version", "package_name",
    "cuda_version",
    # onnxruntime-training and onnxtrain
    "GradientGraphBuilder", "TrainingParameters", "TrainingSession", "add_loss_output", "get_train_initializer",
    "OnnxTrainError", "InvalidModel", "UnsupportedError", "ModelFileError", "Trainer", "TrainerOptions", "Objective",
    "EvalResult", "FitResult", "TrainRecord", "optimizer_names", "loss_names", "lr_schedule_names",
    "optimizer_hyperparameters", "shared_allocator_stats",
]
