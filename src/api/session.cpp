#include "onnxtrain/session.h"

#include "api/session_impl.h"
#include "autodiff/builder.h"
#include "ir/onnx_io.h"

namespace onnxtrain {

void InferenceSession::Impl::init() {
  ExecOptions eo;
  eo.num_threads = options.intra_op_num_threads;
  eo.deterministic = options.deterministic;
  if (options.seed) eo.seed = options.seed;
  if (options.intra_op_num_threads < 0)
    throw_error<InvalidArgument>("SessionOptions.intra_op_num_threads must be >= 0, got ",
                                 options.intra_op_num_threads);
  // The preview-training Gradient operator becomes explicit gradient nodes.
  for (const auto& n : model.graph->nodes)
    if (n.domain == "ai.onnx.preview.training" && n.op_type == "Gradient") {
      autodiff::lower_gradient_ops(model);
      break;
    }
  exec = std::make_unique<runtime::GraphExecutor>(model.graph, model.opsets, eo);
  // Create every kernel once now so unsupported operators fail at load time, naming the node.
  std::function<void(const ir::Graph&)> check = [&](const ir::Graph& g) {
    for (const auto& n : g.nodes) {
      create_kernel(n, model.opsets, eo);
      for (const ir::Graph* sg : n.subgraphs()) check(*sg);
    }
  };
  check(*model.graph);
  for (size_t i = 0; i < exec->input_names().size(); ++i) input_index[exec->input_names()[i]] = i;
  for (size_t i = 0; i < exec->output_names().size(); ++i) output_index[exec->output_names()[i]] = i;
  if (!options.optimized_model_filepath.empty()) ir::save_model(model, options.optimized_model_filepath);
}

std::vector<Value> InferenceSession::Impl::run(const std::vector<std::string>& output_names,
                                               const std::vector<std::pair<std::string, const Value*>>& feeds) {
  std::vector<const Value*> ins(exec->input_names().size(), nullptr);
  for (const auto& [name, v] : feeds) {
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
    if (it == output_index.end()) throw_error<InvalidArgument>("unknown output '", n, "'");
    outs.push_back(it->second);
  }
  return exec->run(ins, outs);
}

InferenceSession::InferenceSession(const std::string& path, const SessionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->model = ir::load_model_file(path);
  impl_->options = options;
  impl_->init();
}

InferenceSession::InferenceSession(const void* data, size_t size, const SessionOptions& options,
                                   const std::string& base_dir)
    : impl_(std::make_unique<Impl>()) {
  impl_->model = ir::load_model_bytes(data, size, base_dir);
  impl_->options = options;
  impl_->init();
}

InferenceSession::~InferenceSession() = default;
InferenceSession::InferenceSession(InferenceSession&&) noexcept = default;
InferenceSession& InferenceSession::operator=(InferenceSession&&) noexcept = default;

std::vector<NodeArg> InferenceSession::get_inputs() const {
  std::vector<NodeArg> r;
  for (const auto& v : impl_->model.graph->inputs)
    if (!impl_->model.graph->initializer(v.name)) r.push_back(node_arg_of(v));
  return r;
}

std::vector<NodeArg> InferenceSession::get_outputs() const {
  std::vector<NodeArg> r;
  for (const auto& v : impl_->model.graph->outputs) r.push_back(node_arg_of(v));
  return r;
}

std::vector<NodeArg> InferenceSession::get_overridable_initializers() const {
  std::vector<NodeArg> r;
  for (const auto& v : impl_->model.graph->inputs)
    if (impl_->model.graph->initializer(v.name)) r.push_back(node_arg_of(v));
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

RunStats InferenceSession::last_run_stats() const {
  auto s = impl_->exec->last_stats();
  return RunStats{s.arena_bytes, s.naive_bytes, s.constant_bytes, s.steps, s.dynamic_steps, s.folded_nodes};
}

std::string InferenceSession::producer_name() const { return impl_->model.producer_name; }
int64_t InferenceSession::opset() const { return impl_->model.opset(""); }

}  // namespace onnxtrain
