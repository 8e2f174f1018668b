// TrainingAgent: a training graph's YieldOp becomes the cut of a partial plan. The agent runs its
// own executor over the session's graph without the YieldOp, whose outputs (the gradients of the
// user outputs) become graph inputs fed to the backward part (runtime::PlanRequest::backward_inputs).
#include "onnxtrain/agent.h"

#include <algorithm>
#include <unordered_map>

#include "api/session_impl.h"
#include "ir/emitter.h"
#include "ir/infer.h"
#include "runtime/run_hooks.h"

namespace onnxtrain {

struct PartialRunState::Impl {
  runtime::PartialRun run;  // knows the executor (by id, never by address) that ran its forward part
  std::vector<Shape> feed_shapes;  // of the forward feeds, for the check of their gradients' shapes
};

PartialRunState::PartialRunState() : impl_(std::make_unique<Impl>()) {}
PartialRunState::~PartialRunState() = default;
PartialRunState::PartialRunState(PartialRunState&&) noexcept = default;
PartialRunState& PartialRunState::operator=(PartialRunState&&) noexcept = default;
bool PartialRunState::pending() const { return impl_ && impl_->run.pending(); }

struct TrainingAgent::Impl {
  std::unique_ptr<runtime::GraphExecutor> exec;
  size_t request = 0;
  std::vector<ir::ValueInfo> feed_decls;  // declared type of each fw feed
  std::vector<size_t> feed_pos;           // executor input position of each fw feed
  std::vector<std::string> forward_outputs;
  std::vector<size_t> differentiable;
  // bw fetch k is the gradient of forward feed grad_of[k] (onnxruntime's '<input>_grad' name), or npos.
  std::vector<size_t> grad_of;
  std::vector<std::string> bw_fetches;
};

namespace {

// Installs RunOptions.terminate for the run (Terminated when already set).
struct TerminateScope {
  runtime::RunHooks hooks;
  runtime::ScopedRunHooks scope;
  explicit TerminateScope(const RunOptions* o)
      : hooks(terminate_hooks(o)), scope(hooks.terminate ? &hooks : nullptr) {}
};

}  // namespace

TrainingAgent::TrainingAgent(InferenceSession& session, std::vector<std::string> fw_feed_names,
                             std::vector<std::string> bw_fetches_names)
    : impl_(std::make_unique<Impl>()) {
  const InferenceSession::Impl& s = *session.impl_;
  ir::Model m = s.model;
  m.graph = std::make_shared<ir::Graph>(*s.model.graph);
  ir::infer_types(m);
  ir::Graph& g = *m.graph;
  size_t cut = g.nodes.size();
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].domain == ir::kMicrosoftDomain && g.nodes[i].op_type == "YieldOp") {
      if (cut != g.nodes.size())
        throw_error<InvalidArgument>("TrainingAgent: the model has more than one YieldOp (", g.nodes[cut].describe(),
                                     ", ", g.nodes[i].describe(), ")");
      cut = i;
    }
  if (cut == g.nodes.size())
    throw_error<InvalidArgument>("TrainingAgent: the model has no com.microsoft YieldOp node marking the cut between "
                                 "forward and backward (build it with OrtModuleGraphBuilder)");
  const ir::Node yield = g.nodes[cut];
  g.nodes.erase(g.nodes.begin() + long(cut));
  const size_t num_declared = g.inputs.size();
  runtime::PlanRequest r;
  r.outputs = yield.inputs;
  impl_->forward_outputs = yield.inputs;
  std::unordered_map<std::string, const ir::TypeInfo*> types;
  for (const auto& v : g.value_info) types[v.name] = &v.type;
  for (const auto& v : g.inputs) types[v.name] = &v.type;
  for (const auto& v : g.outputs) types.emplace(v.name, &v.type);
  // Gradients of the outputs outside full_shape_outputs may be anything broadcastable to the output
  // (onnxruntime's YieldOp checks the shape of the others only).
  const ir::Attribute* full = yield.attr("full_shape_outputs");
  for (size_t k = 0; k < yield.outputs.size(); ++k) {
    const std::string& gname = yield.outputs[k];
    if (gname.empty()) continue;
    r.backward_broadcastable.push_back(full && !std::count(full->ints.begin(), full->ints.end(), int64_t(k)));
    if (k >= yield.inputs.size() || yield.inputs[k].empty())
      throw_error<InvalidModel>(yield.describe(), ": output ", k, " has no matching input");
    auto it = types.find(yield.inputs[k]);
    g.inputs.push_back(ir::ValueInfo{gname, it == types.end() ? ir::TypeInfo() : *it->second, ""});
    r.backward_inputs.emplace_back(gname, yield.inputs[k]);
    impl_->differentiable.push_back(k);
  }
  r.backward_outputs = bw_fetches_names;
  if (bw_fetches_names.empty()) throw_error<InvalidArgument>("TrainingAgent: bw_fetches_names is empty");
  impl_->exec = std::make_unique<runtime::GraphExecutor>(m.graph, m.opsets, s.exec_options);
  impl_->request = impl_->exec->add_request(r);

  std::unordered_map<std::string, size_t> pos;
  for (size_t i = 0; i < num_declared; ++i) pos[g.inputs[i].name] = i;
  std::vector<bool> fed(num_declared, false);
  for (const auto& n : fw_feed_names) {
    auto it = pos.find(n);
    if (it == pos.end()) throw_error<InvalidArgument>("TrainingAgent: fw_feed_names: '", n, "' is not an input of the model");
    if (fed[it->second]) throw_error<InvalidArgument>("TrainingAgent: fw_feed_names: '", n, "' is listed twice");
    fed[it->second] = true;
    impl_->feed_pos.push_back(it->second);
    impl_->feed_decls.push_back(g.inputs[it->second]);
  }
  for (size_t i = 0; i < num_declared; ++i)
    if (!fed[i] && !impl_->exec->input_has_default(i))
      throw_error<InvalidArgument>("TrainingAgent: fw_feed_names misses the input '", g.inputs[i].name, "'");
  for (const auto& f : bw_fetches_names) {
    size_t of = std::string::npos;
    for (size_t k = 0; k < fw_feed_names.size(); ++k)
      if (f == fw_feed_names[k] + "_grad") of = k;
    impl_->grad_of.push_back(of);
  }
  impl_->bw_fetches = bw_fetches_names;
}

TrainingAgent::~TrainingAgent() = default;

const std::vector<std::string>& TrainingAgent::forward_output_names() const { return impl_->forward_outputs; }
const std::vector<size_t>& TrainingAgent::differentiable_outputs() const { return impl_->differentiable; }

std::vector<Value> TrainingAgent::run_forward(const std::vector<const Value*>& feeds, PartialRunState& state,
                                              const RunOptions* run_options) {
  Impl& a = *impl_;
  if (feeds.size() != a.feed_pos.size())
    throw_error<InvalidArgument>("TrainingAgent.run_forward: ", feeds.size(), " feeds for ", a.feed_pos.size(),
                                 " names in fw_feed_names");
  std::vector<const Value*> ins(a.exec->input_names().size(), nullptr);
  for (size_t k = 0; k < feeds.size(); ++k) {
    if (!feeds[k]) throw_error<InvalidArgument>("TrainingAgent.run_forward: feed '", a.feed_decls[k].name, "' is empty");
    // As onnxruntime's partial run, the dimensions are not compared with the declared ones (the step
    // is planned for the shapes given; kernels check what they need). The rank is: the gradient
    // graph was derived for it, and a feed of another rank would get gradients of other shapes.
    const ir::ValueInfo& decl = a.feed_decls[k];
    runtime::check_feed(decl, *feeds[k], /*check_shape=*/false);
    if (decl.type.kind == ir::TypeInfo::Kind::kTensor && decl.type.has_shape &&
        feeds[k]->kind == Value::Kind::kTensor && feeds[k]->tensor.rank() != decl.type.dims.size())
      throw_error<InvalidArgument>("TrainingAgent.run_forward: feed '", decl.name, "' has rank ",
                                   feeds[k]->tensor.rank(), " (shape ", shape_to_string(feeds[k]->tensor.shape()),
                                   "); the training graph was built for rank ", decl.type.dims.size(), " (",
                                   decl.type.to_string(), "): build it for this input's shape "
                                   "(OrtModuleGraphBuilder.build(input_shapes))");
    ins[a.feed_pos[k]] = feeds[k];
  }
  state.impl_->feed_shapes.clear();
  for (const Value* f : feeds) state.impl_->feed_shapes.push_back(f->kind == Value::Kind::kTensor ? f->tensor.shape() : Shape{});
  TerminateScope scope(run_options);
  std::vector<Value> results;
  a.exec->run_forward(ins, a.request, state.impl_->run, results);
  return results;
}

std::vector<Value> TrainingAgent::run_backward(const std::vector<const Value*>& grads, PartialRunState& state,
                                               const RunOptions* run_options) {
  if (!state.pending())
    throw_error<InvalidArgument>("TrainingAgent.run_backward: the PartialGraphExecutionState holds no forward run "
                                 "(run_forward first; each forward run takes one backward run)");
  // Each agent runs its own executor: the state's executor id (unique for the process's life, unlike
  // an address a later agent may reuse) says whose forward run it holds.
  if (runtime::GraphExecutor::owner_of(state.impl_->run) != impl_->exec->id())
    throw_error<InvalidArgument>("TrainingAgent.run_backward: the PartialGraphExecutionState belongs to another agent");
  for (size_t k = 0; k < grads.size(); ++k)
    if (!grads[k]) throw_error<InvalidArgument>("TrainingAgent.run_backward: gradient ", k, " is empty");
  TerminateScope scope(run_options);
  std::vector<Value> results;
  const std::vector<Shape> fed = std::move(state.impl_->feed_shapes);
  impl_->exec->run_backward(state.impl_->run, grads, results);
  // A gradient graph derived for the declared shapes may decide broadcasting reductions from them:
  // fed other dimensions, an input's gradient of another shape than the input says so.
  for (size_t k = 0; k < results.size() && k < impl_->grad_of.size(); ++k) {
    const size_t of = impl_->grad_of[k];
    if (of == std::string::npos || of >= fed.size() || results[k].kind != Value::Kind::kTensor) continue;
    if (results[k].tensor.shape() != fed[of])
      throw_error<InvalidArgument>("TrainingAgent.run_backward: the gradient '", impl_->bw_fetches[k],
                                   "' has shape ", shape_to_string(results[k].tensor.shape()), " but its input '",
                                   impl_->feed_decls[of].name, "' was fed with shape ", shape_to_string(fed[of]),
                                   ": the training graph was built for the declared shapes (",
                                   impl_->feed_decls[of].type.to_string(), "); build it for these shapes "
                                   "(OrtModuleGraphBuilder.build(input_shapes))");
  }
  return results;
}

}  // namespace onnxtrain
