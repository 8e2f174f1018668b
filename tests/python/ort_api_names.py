"""Every public Python name of onnxruntime 1.13-1.20 (CPU package and onnxruntime-training), written
from onnxruntime's own sources, and a checker that looks each one up under the ``onnxruntime`` alias.

The reference is REFERENCE: ``(owner, entries)`` pairs. ``owner`` is a dotted path under
``onnxruntime`` (a module, or a class reached from one); an entry ``name()`` must be callable (a
function, method or class), a bare ``name`` must exist (a property, field, enum value, constant or
submodule). The comment above each group names the onnxruntime source file it was written from and
the versions; ``# 1.xx+`` marks names that appeared within 1.13-1.20, ``# <=1.xx`` names that left.
Sources read (microsoft/onnxruntime): onnxruntime/__init__.py (1.21 copy, minus its 1.21 names),
onnxruntime/python/onnxruntime_inference_collection.py (a 1.21 copy, minus webgpu / get_ort_device),
onnxruntime/python/onnxruntime_pybind_state.cc (the 1.16 copy: global methods, object methods),
onnxruntime_pybind_ortvalue.cc / _sparse_tensor.cc / _iobinding.cc / _schema.cc / _exceptions.cc /
_quant.cc / _lora.cc as a generated stub of the module shows them (names newer than 1.20 dropped:
the EP-device, model-compiler, sync-stream and provider-policy APIs, OrtMemoryInfo's properties,
OrtDevice.mem_type/vendor_id/gpu/webgpu, SessionOptions.use_per_session_threads /
set_load_cancellation_flag / add_provider*, set_global_thread_pool_sizes, copy_tensors),
orttraining/orttraining/python/orttraining_pybind_state.cc (1.17-1.20 copy),
orttraining/orttraining/python/training/__init__.py, training/api/module.py (a 1.13 copy) and
checkpoint_state.py (a 1.16 copy) with the 1.17-1.20 members as onnxruntime's on-device training API
documents them, training/onnxblock/** (1.15+ copies, and the 1.13-1.14 model.py / model_accessor.py),
onnxruntime/python/backend/backend.py.

``GPU_BUILD_ONLY`` lists names that onnxruntime's CPU packages do not define at all (CUDA / ROCm /
TensorRT / OpenVINO / MPI / ATen / Triton builds): they are not missing from a CPU runtime; the
checker only requires that, where onnxtrain has one, it is callable.

Run as a script (``python3 -m onnxtrain.ort_alias tests/python/ort_api_names.py``) it prints one
JSON object: ``{"present": [...], "missing": {display: [ancestor displays]}, "wrong_kind": [...],
"gpu_present": [...], "gpu_wrong_kind": [...]}`` (see ``display``).
"""
import importlib
import json
import sys

# --- onnxruntime/__init__.py (what ``import onnxruntime`` exports), 1.13-1.20 ----------------------
TOP = """
ExecutionMode() ExecutionOrder() GraphOptimizationLevel() ModelMetadata NodeArg OrtAllocatorType()
OrtArenaCfg() OrtMemoryInfo() OrtMemType() OrtSparseFormat() RunOptions() SessionIOBinding()
SessionOptions() create_and_register_allocator() disable_telemetry_events() enable_telemetry_events()
get_all_providers() get_available_providers() get_build_info() get_device() get_version_string()
set_default_logger_severity() set_default_logger_verbosity() set_seed()
InferenceSession() IOBinding() OrtDevice() OrtValue() SparseTensor()
__version__ __author__ version package_name cuda_version
create_and_register_allocator_v2()
has_collective_ops()
AdapterFormat() LoraAdapter()
"""
# (create_and_register_allocator_v2: 1.16+; has_collective_ops: 1.17+; AdapterFormat, LoraAdapter: 1.20)

# --- onnxruntime/python/onnxruntime_pybind_state.cc & co: the native module's own names (CPU) ------
PYBIND = """
get_default_session_options() get_session_initializer() SessionObjectInitializer
get_all_operator_schema() get_all_opkernel_def() schemadef opkernel
OrtValue() OrtValueVector() OrtDevice() InferenceSession() SparseTensor() SparseCooView SparseCsrView
SparseBlockSparseView ArenaExtendStrategy() kNextPowerOfTwo kSameAsRequested
Fail() InvalidArgument() NoSuchFile() NoModel() EngineError() RuntimeException() InvalidProtobuf()
ModelLoaded() NotImplemented() InvalidGraph() EPFail()
quantize_matmul_4bits() quantize_matmul_bnb4() quantize_qdq_matmul_4bits()
AdapterFormat() LoraAdapter()
"""
# (quantize_*: onnxruntime_pybind_quant.cc, 1.17+ (qdq 1.19+), the helpers of
#  onnxruntime.quantization's MatMul4BitsQuantizer; AdapterFormat / LoraAdapter: _lora.cc, 1.20)

C = "capi._pybind_state"
REFERENCE = [
    ("", TOP),
    (C, PYBIND + " ".join(TOP.split()[:24])),
    # onnxruntime_pybind_state.cc, addObjectMethods
    (C + ".SessionOptions", """
     enable_cpu_mem_arena enable_profiling profile_file_prefix optimized_model_filepath
     enable_mem_pattern enable_mem_reuse logid log_severity_level log_verbosity_level
     intra_op_num_threads inter_op_num_threads execution_mode execution_order graph_optimization_level
     use_deterministic_compute add_free_dimension_override_by_denotation()
     add_free_dimension_override_by_name() add_session_config_entry() get_session_config_entry()
     register_custom_ops_library() add_initializer() add_external_initializers()
     add_external_initializers_from_files_in_memory()"""),  # the last: 1.20
    (C + ".RunOptions", """
     log_severity_level log_verbosity_level logid terminate only_execute_path_to_fetches
     add_run_config_entry() get_run_config_entry() training_mode add_active_adapter()"""),
    # (training_mode: onnxruntime-training builds; add_active_adapter: 1.20)
    (C + ".ModelMetadata", """producer_name graph_name domain description graph_description version
     custom_metadata_map"""),
    (C + ".NodeArg", "name type shape __str__()"),
    (C + ".OrtArenaCfg", """max_mem arena_extend_strategy initial_chunk_size_bytes max_dead_bytes_per_chunk
     initial_growth_chunk_size_bytes max_power_of_two_extend_bytes"""),
    (C + ".OrtDevice", "device_id() device_type() cpu() cuda() cann() fpga() npu() dml() default_memory()"),
    (C + ".GraphOptimizationLevel", "ORT_DISABLE_ALL ORT_ENABLE_BASIC ORT_ENABLE_EXTENDED ORT_ENABLE_ALL"),
    (C + ".ExecutionMode", "ORT_SEQUENTIAL ORT_PARALLEL"),
    (C + ".ExecutionOrder", "DEFAULT PRIORITY_BASED MEMORY_EFFICIENT"),  # MEMORY_EFFICIENT: 1.17+
    (C + ".OrtAllocatorType", "INVALID ORT_DEVICE_ALLOCATOR ORT_ARENA_ALLOCATOR"),
    (C + ".OrtMemType", "CPU_INPUT CPU_OUTPUT CPU DEFAULT"),
    (C + ".OrtSparseFormat", "ORT_SPARSE_UNDEFINED ORT_SPARSE_COO ORT_SPARSE_CSRC ORT_SPARSE_BLOCK_SPARSE"),
    (C + ".ArenaExtendStrategy", "kNextPowerOfTwo kSameAsRequested"),
    (C + ".InferenceSession", """
     initialize_session() run() run_async() run_with_ort_values() run_with_ortvaluevector()
     end_profiling() get_profiling_start_time_ns get_providers() get_provider_options() session_options
     inputs_meta outputs_meta overridable_initializers model_meta run_with_iobinding()
     get_tuning_results() set_tuning_results()"""),  # run_async: 1.16+; *_tuning_results: 1.14+
    # onnxruntime_pybind_ortvalue.cc
    (C + ".OrtValue", """
     ortvalue_from_numpy() ortvalue_from_numpy_with_onnx_type() ortvalue_from_shape_and_type()
     ortvalue_from_shape_and_onnx_type() ort_value_from_sparse_tensor() as_sparse_tensor() data_ptr()
     data_type() device_name() element_type() has_value() is_sparse_tensor() is_tensor()
     is_tensor_sequence() numpy() shape() update_inplace() to_dlpack() from_dlpack() __dlpack__()
     __dlpack_device__()"""),
    # (update_inplace 1.16+; element_type, *_onnx_type 1.17+; the dlpack ones: training builds, all builds 1.17+)
    (C + ".OrtValueVector", """push_back() reserve() shrink_to_fit() __len__() __iter__() __getitem__()
     bool_tensor_indices() dlpack_at() element_type_at() to_dlpacks() push_back_batch()"""),
    # onnxruntime_pybind_sparse_tensor.cc
    (C + ".SparseTensor", """sparse_coo_from_numpy() sparse_csr_from_numpy() blocksparse_from_numpy() values()
     get_coo_data() get_csrc_data() get_blocksparse_data() to_cuda() format dense_shape() data_type()
     device_name()"""),
    (C + ".SparseCooView", "indices()"),
    (C + ".SparseCsrView", "inner() outer()"),
    (C + ".SparseBlockSparseView", "indices()"),
    # onnxruntime_pybind_iobinding.cc
    (C + ".SessionIOBinding", """bind_input() bind_ortvalue_input() bind_output() bind_ortvalue_output()
     synchronize_inputs() synchronize_outputs() get_outputs() copy_outputs_to_cpu() clear_binding_inputs()
     clear_binding_outputs()"""),
    # onnxruntime_pybind_lora.cc (1.20)
    (C + ".AdapterFormat", """read_adapter() export_adapter() adapter_version format_version model_version
     parameters"""),
    (C + ".LoraAdapter", "Load()"),
    # onnxruntime/python/onnxruntime_validation.py
    ("capi.onnxruntime_validation", "check_distro_info() validate_build_package_info() version package_name cuda_version"),
    # --- onnxruntime/python/onnxruntime_inference_collection.py ---------------------------------------
    ("capi.onnxruntime_inference_collection", """get_ort_device_type() check_and_normalize_provider_args()
     Session() InferenceSession() IOBinding() OrtValue() OrtDevice() SparseTensor() AdapterFormat()"""),
    ("InferenceSession", """
     get_session_options() get_inputs() get_outputs() get_overridable_initializers() get_modelmeta()
     get_providers() get_provider_options() set_providers() disable_fallback() enable_fallback() run()
     run_async() run_with_ort_values() end_profiling() get_profiling_start_time_ns() io_binding()
     run_with_iobinding() get_tuning_results() set_tuning_results() run_with_ortvaluevector()"""),
    ("IOBinding", """bind_cpu_input() bind_input() bind_ortvalue_input() synchronize_inputs() bind_output()
     bind_ortvalue_output() synchronize_outputs() get_outputs() get_outputs_as_ortvaluevector()
     copy_outputs_to_cpu() clear_binding_inputs() clear_binding_outputs()"""),
    ("OrtValue", """ortvalue_from_numpy() ortvalue_from_numpy_with_onnx_type() ortvalue_from_shape_and_type()
     ort_value_from_sparse_tensor() as_sparse_tensor() data_ptr() device_name() shape() data_type()
     element_type() has_value() is_tensor() is_sparse_tensor() is_tensor_sequence() numpy()
     update_inplace()"""),
    ("OrtDevice", "make() device_id() device_type()"),
    ("SparseTensor", """sparse_coo_from_numpy() sparse_csr_from_numpy() values() as_coo_view() as_csrc_view()
     as_blocksparse_view() to_cuda() format() dense_shape() data_type() device_name()"""),
    ("AdapterFormat", """read_adapter() export_adapter() get_format_version() set_adapter_version()
     get_adapter_version() set_model_version() get_model_version() set_parameters() get_parameters()"""),
    # --- orttraining/orttraining/python/orttraining_pybind_state.cc (onnxruntime-training) -------------
    (C, """
     TrainingParameters() TrainingSession() TrainingConfigurationResult() OrtValueCache()
     PartialGraphExecutionState() TrainingAgent() PropagateCastOpsStrategy() PropagateCastOpsConfiguration()
     GraphTransformerConfiguration() TrainingGraphTransformerConfiguration()
     OrtModuleGraphBuilderConfiguration() Severity() GraphInfo() OrtModuleGraphBuilder()
     GradientGraphBuilder() GradientNodeAttributeDefinition() GradientNodeDefinition()
     register_gradient_definition() register_custom_stop_gradient_edges()
     register_forward_runner() register_backward_runner() register_torch_autograd_function()
     register_shape_inference_function() get_shape_inference_function() register_input_alias_function()
     register_miscellaneous_const_input() unregister_python_functions() is_torch_interop_default_on()
     is_triton_enabled() Module() CheckpointState() Optimizer() LinearLRScheduler() Parameter()
     save_checkpoint() load_checkpoint() get_model_after_loading_checkpoint() get_optimized_model()"""),
    (C + ".TrainingParameters", """
     loss_output_name immutable_weights weights_not_to_train weights_to_train sliced_tensor_names
     training_optimizer_name lr_params_feed_name optimizer_attributes_map optimizer_int_attributes_map
     sliced_schema sliced_axes use_fp16_moments use_mixed_precision allreduce_post_accumulation loss_scale
     world_rank world_size data_parallel_size horizontal_parallel_size pipeline_parallel_size
     pipeline_cut_info_string num_pipeline_micro_batches gradient_accumulation_steps deepspeed_zero_stage
     enable_grad_norm_clip set_gradients_as_graph_outputs use_memory_efficient_gradient
     attn_dropout_recompute gelu_recompute transformer_layer_recompute number_recompute_layers
     set_optimizer_initial_state() model_after_graph_transforms_path model_with_gradient_graph_path
     model_with_training_graph_path enable_adasum propagate_cast_ops_level propagate_cast_ops_allow"""),
    (C + ".TrainingConfigurationResult", "loss_scale_input_name"),
    (C + ".OrtValueCache", "insert() keys() clear() count() remove()"),
    (C + ".TrainingAgent", "run_forward() run_backward()"),
    (C + ".PropagateCastOpsStrategy", "NONE INSERT_AND_REDUCE FLOOD_FILL"),
    (C + ".PropagateCastOpsConfiguration", "strategy level allow"),
    (C + ".GraphTransformerConfiguration", "propagate_cast_ops_config"),
    (C + ".TrainingGraphTransformerConfiguration", """enable_gelu_approximation attn_dropout_recompute
     gelu_recompute transformer_layer_recompute number_recompute_layers enable_compute_optimizer
     sparse_embedding_input_names sparse_label_input_names optimized_pre_grad_filepath
     propagate_cast_ops_config"""),
    (C + ".OrtModuleGraphBuilderConfiguration", """initializer_names initializer_names_to_train
     input_names_require_grad use_memory_efficient_gradient build_gradient_graph enable_caching loglevel"""),
    (C + ".Severity", "VERBOSE INFO WARNING ERROR FATAL"),
    (C + ".GraphInfo", """user_input_names user_input_grad_names initializer_names initializer_names_to_train
     initializer_grad_names_to_train user_output_names output_grad_indices_non_differentiable
     output_grad_indices_require_full_shape module_output_indices_requires_save_for_backward
     frontier_node_arg_map cached_node_arg_names module_output_gradient_name"""),
    (C + ".OrtModuleGraphBuilder", "initialize() build() get_gradient_model() get_forward_model() get_graph_info()"),
    (C + ".GradientGraphBuilder", "build() save() get_model()"),
    (C + ".GradientNodeAttributeDefinition", "name value_json dtype is_tensor"),
    (C + ".GradientNodeDefinition", "op_type domain inputs outputs attributes"),
    # --- orttraining/orttraining/python/training/__init__.py and its modules (1.13-1.20) --------------
    ("training", """TrainingParameters() TrainingSession() PropagateCastOpsStrategy() ORTTrainer()
     ORTTrainerOptions() TrainStepInfo() amp artifacts api onnxblock optim checkpoint model_desc_validation
     orttrainer orttrainer_options experimental ortmodule"""),  # ORTTrainer & co: <=1.15
    ("capi.training.training_session", "TrainingSession()"),
    ("TrainingSession", """get_state() get_model_state() get_optimizer_state() get_partition_info_map()
     load_state() is_output_fp32_node() run() get_inputs() get_outputs()"""),
    ("training.optim", """AdamConfig() LambConfig() SGDConfig() ConstantWarmupLRScheduler()
     CosineWarmupLRScheduler() LinearWarmupLRScheduler() PolyWarmupLRScheduler() FusedAdam() AdamWMode()
     FP16_Optimizer()"""),
    ("training.amp", "LossScaler() DynamicLossScaler()"),
    ("training.checkpoint", """experimental_state_dict() experimental_load_state_dict()
     experimental_save_checkpoint() experimental_load_checkpoint() aggregate_checkpoints()"""),
    ("training.experimental", "export_gradient_graph()"),
    ("training.ortmodule", "ORTModule() DebugOptions() LogLevel()"),
    ("training.ortmodule.DebugOptions", "save_onnx onnx_prefix logging save_onnx_models"),
    ("training.ortmodule.LogLevel", "VERBOSE INFO WARNING ERROR FATAL"),
    # onnxruntime/python/ort_trainer.py (the legacy trainer, 1.13)
    ("capi.ort_trainer", """ORTTrainer() IODescription() ModelDescription() LossScaler() generate_sample()
     save_checkpoint() load_checkpoint()"""),
    # --- training/api/*.py (on-device training) -------------------------------------------------------
    ("training.api", "CheckpointState() Module() Optimizer() LinearLRScheduler()"),
    ("training.api.CheckpointState", """load_checkpoint() save_checkpoint() __getitem__() __setitem__()
     __contains__() parameters properties"""),  # parameters / properties: 1.17+
    ("training.api.checkpoint_state", "Parameter() Parameters() Properties()"),  # 1.17+
    ("training.api.checkpoint_state.Parameter", "name data grad requires_grad"),
    ("training.api.Module", """__call__() train() eval() lazy_reset_grad() get_contiguous_parameters()
     get_parameters_size() copy_buffer_to_parameters() export_model_for_inferencing() input_names()
     output_names() reset_grad() save_checkpoint()"""),  # reset_grad / save_checkpoint: 1.13 only
    ("training.api.Optimizer", "step() set_learning_rate() get_learning_rate()"),
    ("training.api.LinearLRScheduler", "step()"),
    # --- training/artifacts.py --------------------------------------------------------------------------
    ("training.artifacts", "generate_artifacts() LossType() OptimType()"),
    ("training.artifacts.LossType", "MSELoss CrossEntropyLoss BCEWithLogitsLoss L1Loss"),
    ("training.artifacts.OptimType", "AdamW SGD"),
    # --- training/onnxblock/** ----------------------------------------------------------------------------
    ("training.onnxblock", """blocks loss optim Block() ForwardBlock() TrainingBlock() base() empty_base()
     custom_op_library() load_checkpoint_to_model() save_checkpoint()
     Model() TrainingModel() building_blocks onnx_model()"""),
    # (the last four: the first onnxblock API, <=1.14: onnxblock/model.py, building_blocks.py,
    #  model_accessor.onnx_model, with the native get_inference_graph_outputs_metadata_string)
    (C, "get_inference_graph_outputs_metadata_string()"),
    ("training.onnxblock.blocks", """Block() Add() Sub() Mul() Div() Pow() ReduceMean() ReduceSum() Sigmoid()
     Log() Neg() Abs() Relu() Identity() Cast() Constant() SequenceConstruct() Clip() Gemm() Linear()
     PassThrough() InputLike() LabelEncoder()"""),
    ("training.onnxblock.loss", "MSELoss() CrossEntropyLoss() BCEWithLogitsLoss() L1Loss()"),
    ("training.onnxblock.optim", "AdamW() SGD() ClipGradNorm()"),
    # --- Python modules users import beside the runtime ---------------------------------------------------
    # onnxruntime/python/backend/{__init__,backend,backend_rep}.py
    ("backend", "is_compatible() prepare() run() supports_device()"),
    ("backend.backend", "OnnxRuntimeBackend()"),
    ("backend.backend.OnnxRuntimeBackend", """is_compatible() is_opset_supported() supports_device() prepare()
     run_model() run_node()"""),
    ("backend.backend_rep", "OnnxRuntimeBackendRep()"),
    ("backend.backend_rep.OnnxRuntimeBackendRep", "run()"),
    # onnxruntime/python/datasets/__init__.py
    ("datasets", "get_example()"),
    ("tools", """symbolic_shape_infer convert_onnx_models_to_ort onnx_model_utils optimize_onnx_model
     make_dynamic_shape_fixed check_onnx_model_mobile_usability"""),
    ("", "quantization transformers"),
]

# Names onnxruntime's CPU packages do not have (GPU / MPI / ATen / Triton builds only).
GPU_BUILD_ONLY = [
    (C, """set_cuda_device_id() set_cudnn_conv_algo_search() set_do_copy_in_default_stream()
     set_gpu_mem_limit() set_arena_extend_strategy() get_available_openvino_device_ids()
     set_openvino_device() get_openvino_device() register_tensorrt_plugins_as_custom_ops()
     register_aten_op_executor() register_triton_op_executor()
     get_mpi_context_local_rank() get_mpi_context_local_size() get_mpi_context_world_rank()
     get_mpi_context_world_size()"""),
    # (get_mpi_context_*: onnxruntime-training's MPI builds; onnxtrain defines them where it is built
    #  with MPI, test_api_names.py checks them there)
]


# Native classes that onnxruntime_inference_collection wraps in a Python class of the same name.
WRAPPED = ("InferenceSession", "OrtValue", "OrtDevice", "SparseTensor", "AdapterFormat")


def entries(groups=REFERENCE):
    """Yield ``(owner, name, must_be_callable)`` for every entry of ``groups``."""
    for owner, names in groups:
        for token in names.split():
            yield owner, token.rstrip("()"), token.endswith("()")


def display(owner, name):
    """How docs/python-api.md names an entry: ``Class.name`` for a class's; ``name`` for the names of
    ``onnxruntime`` and of its native module; ``module.name`` for another module's (relative to
    ``onnxruntime``)."""
    last = owner.rsplit(".", 1)[-1]
    if last[:1].isupper():
        # the native classes behind onnxruntime_inference_collection's are told apart by "C."
        return f"C.{last}.{name}" if owner == f"{C}.{last}" and last in WRAPPED else f"{last}.{name}"
    return name if owner in ("", C) else f"{owner}.{name}"


def ancestors(owner):
    """The display names of the objects that hold ``owner``'s entries, nearest first: listing one of
    them in the docs covers everything below it."""
    out = []
    while owner:
        parent, _, last = owner.rpartition(".")
        out.append(display(parent, last))
        owner = parent
    return out


def _resolve(path):
    """The object at dotted ``path`` under ``onnxruntime`` (modules imported as needed)."""
    obj = importlib.import_module("onnxruntime")
    done = "onnxruntime"
    for part in [p for p in path.split(".") if p]:
        done += "." + part
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if not isinstance(obj, type):
                obj = importlib.import_module(done)
                continue
            # a field that a configuration class sets per instance (its constructor takes no argument)
            try:
                instance = obj()
            except Exception:
                raise AttributeError(done) from None
            obj = getattr(instance, part)
    return obj


def check(groups=REFERENCE):
    """``{display: "present" | "missing" | "wrong_kind"}`` for every entry of ``groups``."""
    result = {}
    for owner, name, must_call in entries(groups):
        key = display(owner, name)
        try:
            obj = _resolve(f"{owner}.{name}" if owner else name)
        except (ImportError, AttributeError):
            result.setdefault(key, "missing")
            continue
        status = "present" if (callable(obj) or not must_call) else "wrong_kind"
        # one display name may stand for several owners (C.InferenceSession.run and
        # InferenceSession.run): missing anywhere counts as missing
        if result.get(key, "present") == "present":
            result[key] = status
    return result


def main():
    status = check()
    gpu = check(GPU_BUILD_ONLY)
    out = {kind: sorted(k for k, v in status.items() if v == kind) for kind in ("present", "wrong_kind")}
    out["missing"] = {display(o, n): ancestors(o) for o, n, _ in entries() if status[display(o, n)] == "missing"}
    out["gpu_present"] = sorted(k for k, v in gpu.items() if v != "missing")
    out["gpu_wrong_kind"] = sorted(k for k, v in gpu.items() if v == "wrong_kind")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
