#include "onnxtrain/session.h"

#include <deque>
#include <optional>

#include "api/session_impl.h"
#include "ir/emitter.h"
#include "autodiff/builder.h"
#include "ir/onnx_io.h"
#include "runtime/feeds.h"
#include "runtime/conv_fusion.h"
#include "train/fusion.h"
#include "ir/splice.h"
#include "runtime/fold.h"
#include "runtime/run_hooks.h"
#include "runtime/shared_arena.h"

namespace onnxtrain {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The graph RunOptions.training_mode runs: where ONNX takes an operator's mode from the model and
// defaults it to inference, training mode is set — Dropout (opset >= 12) without a training_mode
// input reads `flag` (a constant true initializer of the main graph), BatchNormalization (opset >=
// 14) gets training_mode = 1 (batch statistics; running statistics only where the model asks for
// them). Subgraphs are copied and rewritten too. (Dropout before opset 12 follows ExecOptions::training.)
std::shared_ptr<ir::Graph> training_mode_graph(const ir::Graph& g, int64_t opset, const std::string& flag) {
  auto r = std::make_shared<ir::Graph>(g);
  for (auto& n : r->nodes) {
    if (n.domain.empty() && n.op_type == "Dropout" && opset >= 12) {
      if (n.inputs.size() < 3) n.inputs.resize(3);
      if (n.inputs[2].empty()) n.inputs[2] = flag;
    } else if (n.domain.empty() && n.op_type == "BatchNormalization" && opset >= 14) {
      if (ir::Attribute* a = n.attr("training_mode")) a->i = 1;
      else n.attrs.push_back(ir::Attribute{.name = "training_mode", .type = ir::AttrType::kInt, .i = 1});
    }
    for (auto& a : n.attrs) {
      if (a.g) a.g = training_mode_graph(*a.g, opset, flag);
      for (auto& sg : a.graphs) sg = training_mode_graph(*sg, opset, flag);
    }
  }
  return r;
}

}  // namespace

namespace {

// onnxruntime's type string, without shapes at any depth: tensor(float), seq(tensor(float)),
// optional(seq(tensor(float))).
std::string ort_type_string(const ir::TypeInfo& t) {
  const std::string inner = t.inner ? ort_type_string(*t.inner) : "?";
  switch (t.kind) {
    case ir::TypeInfo::Kind::kTensor: return dtype_tensor_string(t.elem);
    case ir::TypeInfo::Kind::kSequence: return "seq(" + inner + ")";
    case ir::TypeInfo::Kind::kOptional: return "optional(" + inner + ")";
    case ir::TypeInfo::Kind::kMap: {
      const std::string k = dtype_tensor_string(t.elem);  // "tensor(string)"
      return "map(" + k.substr(7, k.size() - 8) + "," + inner + ")";
    }
    default: return t.to_string();
  }
}

}  // namespace

NodeArg node_arg_of(const ir::ValueInfo& v) {
  NodeArg a;
  a.name = v.name;
  a.type = ort_type_string(v.type);
  if (v.type.kind == ir::TypeInfo::Kind::kTensor) {
    a.elem = v.type.elem;
    a.has_shape = v.type.has_shape;
    for (const auto& d : v.type.dims) a.shape.push_back(DimInfo{d.value, d.param});
  } else {
    // The element type of the tensors a sequence or an optional holds, at any depth.
    const ir::TypeInfo* t = &v.type;
    while (t->inner) t = t->inner.get();
    a.elem = t->kind == ir::TypeInfo::Kind::kTensor ? t->elem : DType::kUndefined;
  }
  return a;
}

namespace {

// onnxruntime's config entries for the optimized model's external initializers: with a file name,
// initializers of at least the minimum size (default 1024 bytes) go to that file beside the model.
ModelSaveOptions optimized_model_save_options(const SessionOptions& o) {
  ModelSaveOptions r;
  const std::string file = o.config("session.optimized_model_external_initializers_file_name");
  if (file.empty()) return r;
  r.external_data = ExternalData::kAlways;
  r.threshold = config_byte_count(o, "session.optimized_model_external_initializers_min_size_in_bytes", "1024");
  r.location = file;
  return r;
}

// The exact GELU that torch.onnx writes as arithmetic, one com.onnxtrain Gelu node (train/fusion.h:
// the same bits in float32), as training graphs have it. A TrainingAgent's graph (forward and
// backward cut by a YieldOp) keeps its nodes.
void fuse_gelu(ir::Model& model) {
  if (ir::has_yield(*model.graph)) return;
  int fused = 0;
  ir::Model r = train::fuse_gelu(model, &fused);
  if (fused > 0) model = std::move(r);
}

}  // namespace

NodeArg InferenceSession::Impl::node_arg(const ir::ValueInfo& v) const {
  NodeArg a = node_arg_of(v);
  if (sparse_io.count(v.name)) a.type = "sparse_" + a.type;
  return a;
}

void InferenceSession::Impl::init() {
  // sparse_tensor graph inputs and outputs run dense: the Python layer densifies a sparse feed and
  // turns a declared-sparse output back into a COO sparse tensor (docs/python-api.md).
  for (auto* list : {&model.graph->inputs, &model.graph->outputs})
    for (auto& v : *list)
      if (v.type.kind == ir::TypeInfo::Kind::kSparseTensor) {
        sparse_io.insert(v.name);
        v.type.kind = ir::TypeInfo::Kind::kTensor;
      }
  apply_model_session_options(model, options);
  if (options.config("session.load_model_format", "ONNX") != "ONNX")
    throw_error<NotImplemented>("session.load_model_format '", options.config("session.load_model_format"),
                                "': onnxtrain loads ONNX models only (ORT format is not supported)");
  const std::string save_format = options.config("session.save_model_format", "ONNX");
  if (!options.optimized_model_filepath.empty() && (save_format != "ONNX" || ends_with(options.optimized_model_filepath, ".ort")))
    throw_error<NotImplemented>("optimized_model_filepath '", options.optimized_model_filepath,
                                "': onnxtrain writes ONNX models only (ORT format is not supported)");
  exec_options = exec_options_of(options);
  apply_session_overrides(model, options);
  // The preview-training Gradient operator becomes explicit gradient nodes.
  for (const auto& n : model.graph->nodes)
    if (n.domain == "ai.onnx.preview.training" && n.op_type == "Gradient") {
      autodiff::lower_gradient_ops(model);
      break;
    }
  if (exec_options.fold_constants) {
    ScopedAllocationLimit memory(exec_options.memory_limit);
    runtime::fold_constant_nodes(model, exec_options);
    if (runtime::fold_static_shapes(model) > 0) runtime::fold_constant_nodes(model, exec_options);
  }
  // Inference-only rewrites (training sessions never come here).
  if (options.graph_optimization_level >= GraphOptimizationLevel::kEnableExtended) {
    runtime::fold_pads(model);
    runtime::fold_conv_batchnorm(model);
    runtime::fuse_conv_activations(model);
    fuse_gelu(model);
    runtime::fuse_matmul_bias(model);
  }
  // optimized_model_filepath gets the model as it is now: the blocked-layout operators below are
  // onnxtrain's session-internal ones, which no other runtime (nor onnxtrain's loader) takes. The
  // copy shares the initializers' storage.
  std::optional<ir::Model> unblocked;
  if (options.graph_optimization_level >= GraphOptimizationLevel::kEnableAll) {
    unblocked = model;
    unblocked->graph = std::make_shared<ir::Graph>(*model.graph);
    if (runtime::block_conv_layouts(model) == 0) unblocked.reset();
    else unblocked_graph = unblocked->graph;
  }
  exec = std::make_unique<runtime::GraphExecutor>(model.graph, model.opsets, exec_options);
  // onnxruntime's opt-in to the environment's registered allocator: plain runs borrow the shared
  // arena; without one registered the session keeps its own arenas, as onnxruntime does.
  if (options.config("session.use_env_allocators", "0") == "1") exec->set_shared_arena(registered_shared_arena());
  // Create every kernel once now so unsupported operators fail at load time, naming the node.
  // Control-flow kernels need the subgraph runner the executor hands them.
  ExecOptions check_options = exec_options;
  if (!check_options.subgraphs) check_options.subgraphs = runtime::executor_subgraphs();
  std::function<void(const ir::Graph&)> check = [&](const ir::Graph& g) {
    for (const auto& n : g.nodes) {
      if (n.domain == ir::kMicrosoftDomain && n.op_type == "YieldOp") continue;  // the TrainingAgent's cut
      create_kernel(n, model.opsets, check_options);
      for (const ir::Graph* sg : n.subgraphs()) check(*sg);
    }
  };
  check(*model.graph);
  for (size_t i = 0; i < exec->input_names().size(); ++i) input_index[exec->input_names()[i]] = i;
  for (size_t i = 0; i < exec->output_names().size(); ++i) output_index[exec->output_names()[i]] = i;
  if (!options.optimized_model_filepath.empty())
    ir::save_model(unblocked ? *unblocked : model, options.optimized_model_filepath, optimized_model_save_options(options));
  if (options.enable_profiling) {
    profiler.start(options.profile_file_prefix);
    profiler.session_event("session_initialization", load_start_ns);
  }
}

std::vector<Value> InferenceSession::Impl::run(const std::vector<std::string>& output_names,
                                               const std::vector<std::pair<std::string, const Value*>>& feeds,
                                               const RunOptions* run_options, std::vector<Value>* lent) {
  const int64_t run_start = profiler.active() ? runtime::now_ns() : 0;
  std::vector<const Value*> ins(exec->input_names().size(), nullptr);
  std::deque<Value> host_copies;  // feeds on a device, copied to the host the plan reads them from
  for (const auto& [name, fed] : feeds) {
    const Value* v = fed;
    if (runtime::off_host(*v)) v = &host_copies.emplace_back(runtime::on_host(*v));
    auto it = input_index.find(name);
    if (it == input_index.end()) {
      std::string names;
      for (const auto& vi : model.graph->inputs)
        if (!model.graph->initializer(vi.name)) names += (names.empty() ? "" : ", ") + vi.name;
      throw_error<InvalidArgument>("unknown input '", name, "' (the model's inputs are: ", names, ")");
    }
    if (ins[it->second]) throw_error<InvalidArgument>("input '", name, "' is fed twice");
    check_feed(model.graph->inputs[it->second], *v);
    ins[it->second] = v;
  }
  for (size_t i = 0; i < ins.size(); ++i)
    if (!ins[i] && !exec->input_has_default(i))
      throw_error<InvalidArgument>("missing input '", exec->input_names()[i], "'");
  std::vector<size_t> outs;
  for (const auto& n : output_names) {
    auto it = output_index.find(n);
    if (it == output_index.end())
      throw_error<InvalidArgument>("unknown output '", n, "' (the model's outputs are: ",
                                   runtime::join_names(exec->output_names()), ")");
    outs.push_back(it->second);
  }
  runtime::GraphExecutor* ex = exec.get();
  if (run_options && run_options->training_mode) {
    std::lock_guard<std::mutex> lock(training_mu);
    if (!exec_training) {
      ExecOptions eo = exec_options;
      eo.training = true;
      const std::string flag = "onnxtrain::training_mode";
      auto g = training_mode_graph(unblocked_graph ? *unblocked_graph : *model.graph, model.opset(""), flag);
      g->initializers.emplace_back(flag, Tensor::scalar(true));
      exec_training = std::make_unique<runtime::GraphExecutor>(g, model.opsets, eo);
    }
    ex = exec_training.get();
  }
  runtime::RunHooks hooks = terminate_hooks(run_options);
  if (profiler.active()) hooks.on_node = [this](runtime::NodeEvent&& ev) { profiler.node_event(ev); };
  std::vector<Value> result;
  {
    runtime::ScopedRunHooks scope(hooks.terminate || hooks.on_node ? &hooks : nullptr);
    if (lent) {
      // Buffers on a device: the run's host result is copied into them afterwards.
      std::vector<Value> on_device(lent->size());
      for (size_t i = 0; i < lent->size(); ++i)
        if ((*lent)[i].is_tensor() && runtime::off_host((*lent)[i])) std::swap(on_device[i], (*lent)[i]);
      result = std::move(*lent);
      ex->run_into(ins, outs, result);
      for (size_t i = 0; i < on_device.size() && i < result.size(); ++i) {
        const Value& b = on_device[i];
        if (!b.is_tensor() || !result[i].is_tensor() || result[i].tensor.dtype() != b.tensor.dtype() ||
            result[i].tensor.shape() != b.tensor.shape())
          continue;
        Tensor dst = b.tensor;
        copy_tensor(result[i].tensor, dst);
        result[i] = b;
      }
    } else {
      result = ex->run(ins, outs);
    }
  }
  if (run_start) {
    std::string tag = run_options ? run_options->run_tag : "";
    std::string escaped;
    for (char c : tag) {
      if (c == '"' || c == '\\') escaped += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
    }
    profiler.session_event("model_run", run_start, "{\"run_tag\": \"" + escaped + "\"}");
  }
  return result;
}

InferenceSession::InferenceSession(const std::string& path, const SessionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->load_start_ns = runtime::now_ns();
  const ir::LoadOptions load = load_options_of(options);
  impl_->model = ir::load_model_file(path, &load);
  impl_->options = options;
  impl_->init();
}

InferenceSession::InferenceSession(const void* data, size_t size, const SessionOptions& options,
                                   const std::string& base_dir)
    : impl_(std::make_unique<Impl>()) {
  impl_->load_start_ns = runtime::now_ns();
  const ir::LoadOptions load = load_options_of(options);
  impl_->model = ir::load_model_bytes(data, size, base_dir, &load);
  impl_->options = options;
  impl_->init();
}

InferenceSession::~InferenceSession() = default;
InferenceSession::InferenceSession(InferenceSession&&) noexcept = default;
InferenceSession& InferenceSession::operator=(InferenceSession&&) noexcept = default;

std::vector<NodeArg> InferenceSession::get_inputs() const {
  std::vector<NodeArg> r;
  for (const auto& v : impl_->model.graph->inputs)
    if (!impl_->model.graph->initializer(v.name)) r.push_back(impl_->node_arg(v));
  return r;
}

std::vector<NodeArg> InferenceSession::get_outputs() const {
  std::vector<NodeArg> r;
  for (const auto& v : impl_->model.graph->outputs) r.push_back(impl_->node_arg(v));
  return r;
}

std::vector<NodeArg> InferenceSession::get_overridable_initializers() const {
  std::vector<NodeArg> r;
  for (const auto& v : impl_->model.graph->inputs)
    if (impl_->model.graph->initializer(v.name)) r.push_back(impl_->node_arg(v));
  return r;
}

std::vector<Tensor> InferenceSession::run(const std::vector<std::string>& output_names,
                                          const std::vector<std::pair<std::string, Tensor>>& feeds) {
  std::vector<Value> holders(feeds.size());
  std::vector<std::pair<std::string, const Value*>> f;
  for (size_t i = 0; i < feeds.size(); ++i) {
    holders[i] = Value::of(feeds[i].second);
    f.emplace_back(feeds[i].first, &holders[i]);
  }
  auto vals = impl_->run(output_names, f);
  std::vector<Tensor> out;
  out.reserve(vals.size());
  for (size_t i = 0; i < vals.size(); ++i) {
    if (vals[i].kind != Value::Kind::kTensor)
      throw_error<InvalidArgument>("output ", i, " is not a tensor; use run_values()");
    out.push_back(std::move(vals[i].tensor));
  }
  return out;
}

std::vector<Value> InferenceSession::run_values(const std::vector<std::string>& output_names,
                                                const std::vector<std::pair<std::string, Value>>& feeds) {
  std::vector<std::pair<std::string, const Value*>> f;
  for (const auto& [n, v] : feeds) f.emplace_back(n, &v);
  return impl_->run(output_names, f);
}

std::vector<Value> InferenceSession::run_values(const std::vector<std::string>& output_names,
                                                const std::vector<std::pair<std::string, const Value*>>& feeds,
                                                const RunOptions& run_options) {
  return impl_->run(output_names, feeds, &run_options);
}

namespace {

// Whether tensors a and b share any byte.
bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0 || !a.raw_data() || !b.raw_data()) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.raw_data()), b0 = reinterpret_cast<uintptr_t>(b.raw_data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace

std::vector<Value> InferenceSession::run_into(const std::vector<std::string>& output_names,
                                              const std::vector<std::pair<std::string, const Value*>>& feeds,
                                              const RunOptions& run_options, std::vector<Value> buffers) {
  if (buffers.size() > output_names.size())
    throw_error<InvalidArgument>("run_into: ", buffers.size(), " buffers for ", output_names.size(), " outputs");
  // A buffer sharing memory with a feed or with another buffer is not written in place (the run
  // would overwrite what it reads, or one output another): such outputs get new values.
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].kind != Value::Kind::kTensor) continue;
    bool shared = false;
    for (const auto& [n, v] : feeds)
      shared = shared || (v && v->kind == Value::Kind::kTensor && overlaps(buffers[i].tensor, v->tensor));
    for (size_t j = 0; j < buffers.size(); ++j)
      shared = shared || (j != i && buffers[j].kind == Value::Kind::kTensor && overlaps(buffers[i].tensor, buffers[j].tensor));
    if (shared) buffers[i] = Value();
  }
  return impl_->run(output_names, feeds, &run_options, &buffers);
}

const SessionOptions& InferenceSession::options() const { return impl_->options; }

ModelMetadata InferenceSession::metadata() const {
  const ir::Model& m = impl_->model;
  ModelMetadata md;
  md.producer_name = m.producer_name;
  md.graph_name = m.graph->name;
  md.domain = m.domain;
  md.description = m.doc;
  md.graph_description = m.graph->doc;
  md.version = m.model_version;
  md.custom_metadata_map = m.metadata;
  return md;
}

std::string InferenceSession::end_profiling() { return impl_->profiler.end(); }

uint64_t InferenceSession::profiling_start_time_ns() const {
  return uint64_t(impl_->profiler.start_ns());  // kept after end_profiling, as onnxruntime does
}

RunStats InferenceSession::last_run_stats() const {
  return run_stats_of(*impl_->exec);
}

std::vector<AssignedNode> InferenceSession::node_assignment() const {
  return assigned_nodes(impl_->exec->node_providers());
}

std::string InferenceSession::producer_name() const { return impl_->model.producer_name; }
int64_t InferenceSession::opset() const { return impl_->model.opset(""); }

}  // namespace onnxtrain
