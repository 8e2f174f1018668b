// TrainingSession: gradient graph + fused optimizer + exact checkpoints.
//
// Weights live once, in the forward model's initializers; the gradient model and both executors
// share their storage and see every in-place update (the executors treat float initializers as
// mutable, never folding them).
#include "onnxtrain/training.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "api/session_impl.h"
#include "autodiff/builder.h"
#include "ir/onnx_io.h"
#include "runtime/executor.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/training_graph.h"

namespace onnxtrain {

namespace {

train::LrSchedule make_schedule(const TrainingParameters& p) {
  train::LrSchedule s;
  s.kind = p.lr_schedule;
  for (const auto& [k, v] : p.lr_schedule_params) {
    if (k == "eta0") s.eta0 = v;
    else if (k == "power_t") s.power_t = v;
    else if (k == "alpha") s.alpha = v;
    else if (k == "warmup") s.warmup = int64_t(v);
    else if (k == "total") s.total = int64_t(v);
    else if (k == "end_lr") s.end_lr = v;
    else if (k == "power") s.power = v;
    else throw_error<InvalidArgument>("TrainingParameters.lr_schedule_params: unknown key '", k, "'");
  }
  return s;
}

}  // namespace

void TrainingParameters::validate() const {
  if (loss_output_name.empty()) throw_error<InvalidArgument>("TrainingParameters.loss_output_name is empty");
  const auto& names = train::optimizer_names();
  if (std::find(names.begin(), names.end(), training_optimizer_name) == names.end()) {
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    throw_error<InvalidArgument>("TrainingParameters.training_optimizer_name: unknown optimizer '",
                                 training_optimizer_name, "' (known: ", all, ")");
  }
  if (lr_params_feed_name.empty()) throw_error<InvalidArgument>("TrainingParameters.lr_params_feed_name is empty");
  if (gradient_accumulation_steps < 1)
    throw_error<InvalidArgument>("TrainingParameters.gradient_accumulation_steps must be >= 1, got ",
                                 gradient_accumulation_steps);
  if (!(max_grad_norm > 0) || !std::isfinite(max_grad_norm))
    throw_error<InvalidArgument>("TrainingParameters.max_grad_norm must be > 0, got ", max_grad_norm);
  for (const auto& w : weights_to_train)
    if (weights_not_to_train.count(w) || immutable_weights.count(w))
      throw_error<InvalidArgument>("TrainingParameters: '", w, "' is both in weights_to_train and ",
                                   weights_not_to_train.count(w) ? "weights_not_to_train" : "immutable_weights");
  if (!lr_schedule.empty()) {
    train::LrSchedule s = make_schedule(*this);
    try {
      s.validate();
    } catch (const InvalidArgument& e) {
      throw_error<InvalidArgument>("TrainingParameters.lr_schedule: ", e.what());
    }
  }
}

double scheduled_learning_rate(const TrainingParameters& params, int64_t step) {
  if (params.lr_schedule.empty())
    throw_error<InvalidArgument>("scheduled_learning_rate: TrainingParameters.lr_schedule is empty");
  params.validate();
  return make_schedule(params).value(step);
}

struct TrainingSession::Impl {
  ir::Model model;  // forward model (holds the weights)
  ir::Model grad_model;
  TrainingParameters params;
  SessionOptions options;
  std::vector<std::string> trained;           // weights the optimizer updates
  std::vector<Tensor*> weights;               // into model.graph->initializers
  std::vector<train::RunningStat> running;    // BatchNormalization running statistics to write back
  std::unique_ptr<runtime::GraphExecutor> train_exec, eval_exec;
  std::unordered_map<std::string, size_t> train_inputs, eval_inputs;  // name -> executor input
  std::unordered_map<std::string, size_t> train_outputs, eval_outputs;
  std::vector<size_t> grad_index;             // train executor output index of each trained weight's gradient
  std::vector<size_t> running_index;          // train executor output index of each running statistic
  std::unique_ptr<train::Optimizer> optimizer;
  bool has_schedule = false;
  train::LrSchedule schedule;
  std::vector<Tensor> accum;                  // summed gradients while accumulating
  int64_t micro = 0;                          // run() calls since the last update
  std::vector<std::string> user_outputs;      // names run() may return

  void init();
  std::vector<Value> run_train(const std::vector<std::string>& outs,
                               const std::vector<std::pair<std::string, Value>>& feeds);
  std::vector<Value> run_eval(const std::vector<std::string>& outs,
                              const std::vector<std::pair<std::string, Value>>& feeds);
  Tensor* initializer(const std::string& n) { return model.graph->initializer(n); }
};

void TrainingSession::Impl::init() {
  params.validate();
  ir::Graph& g = *model.graph;
  bool loss_found = false;
  for (const auto& o : g.outputs) loss_found |= o.name == params.loss_output_name;
  if (!loss_found)
    throw_error<InvalidArgument>("TrainingParameters.loss_output_name: '", params.loss_output_name,
                                 "' is not an output of the model");
  for (const auto* set : {&params.weights_to_train, &params.weights_not_to_train, &params.immutable_weights})
    for (const auto& w : *set)
      if (!g.initializer(w))
        throw_error<InvalidArgument>("TrainingParameters: '", w, "' is not an initializer of the model");

  running = train::batchnorm_running_stats(model);
  std::set<std::string> stats;
  for (const auto& r : running) stats.insert(r.initializer);
  if (params.weights_to_train.empty()) {
    for (const auto& n : train::trainable_initializers(model))
      if (!params.weights_not_to_train.count(n) && !params.immutable_weights.count(n) && !stats.count(n))
        trained.push_back(n);
  } else {
    for (const auto& [n, t] : g.initializers)
      if (params.weights_to_train.count(n)) {
        if (!dtype_is_float(t.dtype()))
          throw_error<InvalidArgument>("TrainingParameters.weights_to_train: '", n, "' has element type ",
                                       dtype_name(t.dtype()), ", not a float");
        trained.push_back(n);
      }
  }
  if (trained.empty()) throw_error<InvalidArgument>("TrainingParameters: no weight to train");
  for (const auto& n : trained) weights.push_back(initializer(n));

  std::vector<std::string> ys;
  for (const auto& o : g.outputs) ys.push_back(o.name);
  for (const auto& r : running) ys.push_back(r.output);
  grad_model = autodiff::build_gradient_model(model, ys, trained, params.loss_output_name);
  // The gradient model must share the forward model's weight storage.
  for (auto& [n, t] : grad_model.graph->initializers)
    if (Tensor* w = initializer(n)) t = *w;
  if (!params.model_with_gradient_graph_path.empty()) ir::save_model(grad_model, params.model_with_gradient_graph_path);
  if (!params.model_with_training_graph_path.empty()) ir::save_model(grad_model, params.model_with_training_graph_path);

  ExecOptions eo;
  eo.num_threads = options.intra_op_num_threads;
  eo.deterministic = options.deterministic || params.deterministic_compute;
  eo.training = true;
  eo.torch_running_var = true;
  if (options.seed) eo.seed = options.seed;
  std::unordered_set<std::string> mutable_inits;
  for (const auto& [n, t] : g.initializers)
    if (dtype_is_float(t.dtype())) mutable_inits.insert(n);
  train_exec = std::make_unique<runtime::GraphExecutor>(grad_model.graph, grad_model.opsets, eo,
                                                        std::vector<std::string>{}, mutable_inits);
  ExecOptions ev = eo;
  ev.training = false;
  eval_exec = std::make_unique<runtime::GraphExecutor>(train::inference_graph(model, {}, false).graph, model.opsets, ev,
                                                       std::vector<std::string>{}, mutable_inits);
  for (size_t i = 0; i < train_exec->input_names().size(); ++i) train_inputs[train_exec->input_names()[i]] = i;
  for (size_t i = 0; i < train_exec->output_names().size(); ++i) train_outputs[train_exec->output_names()[i]] = i;
  for (size_t i = 0; i < eval_exec->input_names().size(); ++i) eval_inputs[eval_exec->input_names()[i]] = i;
  for (size_t i = 0; i < eval_exec->output_names().size(); ++i) eval_outputs[eval_exec->output_names()[i]] = i;
  for (const auto& n : trained) grad_index.push_back(train_outputs.at(n + "_grad"));
  for (const auto& r : running) running_index.push_back(train_outputs.at(r.output));
  for (const auto& o : g.outputs) user_outputs.push_back(o.name);
  if (params.set_gradients_as_graph_outputs)
    for (const auto& n : trained) user_outputs.push_back(n + "_grad");

  train::OptimizerConfig oc;
  oc.name = params.training_optimizer_name;
  oc.attrs = params.optimizer_attributes;
  oc.int_attrs = params.optimizer_int_attributes;
  oc.weight_attrs = params.optimizer_attributes_map;
  oc.weight_int_attrs = params.optimizer_int_attributes_map;
  std::vector<const Tensor*> cw(weights.begin(), weights.end());
  optimizer = train::make_optimizer(oc, trained, cw);
  has_schedule = !params.lr_schedule.empty();
  if (has_schedule) schedule = make_schedule(params);
}

namespace {

// Feeds in executor order; validates names and types against the graph's declared inputs.
std::vector<const Value*> order_feeds(const runtime::GraphExecutor& ex, const ir::Graph& g,
                                      const std::unordered_map<std::string, size_t>& index,
                                      const std::vector<std::pair<std::string, Value>>& feeds, const std::string& skip,
                                      bool require_all = true) {
  std::vector<const Value*> ins(ex.input_names().size(), nullptr);
  for (const auto& [name, v] : feeds) {
    if (name == skip) continue;
    auto it = index.find(name);
    if (it == index.end()) {
      std::string names;
      for (const auto& vi : g.inputs)
        if (!g.initializer(vi.name)) names += (names.empty() ? "" : ", ") + vi.name;
      throw_error<InvalidArgument>("unknown input '", name, "' (the model's inputs are: ", names,
                                   skip.empty() ? "" : ", and the learning rate '" + skip + "'", ")");
    }
    if (ins[it->second]) throw_error<InvalidArgument>("input '", name, "' is fed twice");
    for (const auto& vi : g.inputs)
      if (vi.name == name) check_feed(vi, v);
    ins[it->second] = &v;
  }
  for (size_t i = 0; require_all && i < ins.size(); ++i)
    if (!ins[i] && !ex.input_has_default(i)) throw_error<InvalidArgument>("missing input '", ex.input_names()[i], "'");
  return ins;
}

}  // namespace

std::vector<Value> TrainingSession::Impl::run_train(const std::vector<std::string>& outs_in,
                                                    const std::vector<std::pair<std::string, Value>>& feeds) {
  // Learning rate.
  float lr = 0;
  bool lr_fed = false;
  for (const auto& [name, v] : feeds)
    if (name == params.lr_params_feed_name) {
      if (v.kind != Value::Kind::kTensor || v.tensor.dtype() != DType::kFloat32 || v.tensor.numel() != 1)
        throw_error<InvalidArgument>("input '", name, "' (the learning rate) must be a float32 array of shape [1]");
      lr = v.tensor.data<float>()[0];
      lr_fed = true;
    }
  if (!lr_fed) {
    if (!has_schedule)
      throw_error<InvalidArgument>("missing input '", params.lr_params_feed_name,
                                   "': feed the learning rate as a float32 array of shape [1]");
    lr = float(schedule.value(optimizer->step_count() + 1));
  }
  if (!std::isfinite(lr) || lr < 0) throw_error<InvalidArgument>("learning rate ", lr, " must be finite and >= 0");

  const std::vector<std::string> outs = outs_in.empty() ? std::vector<std::string>(model.graph->outputs.size()) : outs_in;
  std::vector<std::string> names = outs;
  if (outs_in.empty())
    for (size_t i = 0; i < names.size(); ++i) names[i] = model.graph->outputs[i].name;
  for (const auto& n : names)
    if (std::find(user_outputs.begin(), user_outputs.end(), n) == user_outputs.end())
      throw_error<InvalidArgument>("unknown output '", n, "'",
                                   n.size() > 5 && n.compare(n.size() - 5, 5, "_grad") == 0
                                       ? " (set TrainingParameters.set_gradients_as_graph_outputs to request gradients)"
                                       : "");
  auto ins = order_feeds(*train_exec, *grad_model.graph, train_inputs, feeds, params.lr_params_feed_name);
  std::vector<Value> all = train_exec->run(ins);

  // Running statistics of BatchNormalization, as PyTorch updates them.
  for (size_t k = 0; k < running.size(); ++k)
    if (!params.immutable_weights.count(running[k].initializer))
      initializer(running[k].initializer)->copy_from(all[running_index[k]].tensor);

  // Gradients: accumulate, clip, update.
  std::vector<Tensor*> grads;
  for (size_t i = 0; i < trained.size(); ++i) grads.push_back(&all[grad_index[i]].tensor);
  const int64_t k = params.gradient_accumulation_steps;
  if (k > 1) {
    if (accum.empty())
      for (Tensor* gt : grads) accum.push_back(Tensor::zeros(gt->dtype(), gt->shape()));
    for (size_t i = 0; i < grads.size(); ++i) {
      Tensor& a = accum[i];
      if (a.dtype() == DType::kFloat32) {
        float* pa = a.data<float>();
        const float* pg = grads[i]->data<float>();
        for (int64_t j = 0; j < a.numel(); ++j) pa[j] += pg[j];
      } else {
        double* pa = a.data<double>();
        const double* pg = grads[i]->data<double>();
        for (int64_t j = 0; j < a.numel(); ++j) pa[j] += pg[j];
      }
    }
  }
  if (++micro >= k) {
    std::vector<Tensor*> g = grads;
    if (k > 1)
      for (size_t i = 0; i < g.size(); ++i) g[i] = &accum[i];
    if (params.enable_grad_norm_clip) train::clip_grad_norm(g, params.max_grad_norm);
    std::vector<const Tensor*> cg(g.begin(), g.end());
    optimizer->step(lr, weights, cg);
    micro = 0;
    for (auto& a : accum) std::fill_n(static_cast<char*>(a.raw_data()), a.nbytes(), 0);
  }

  std::vector<Value> result;
  for (const auto& n : names) result.push_back(all[train_outputs.at(n)]);
  return result;
}

std::vector<Value> TrainingSession::Impl::run_eval(const std::vector<std::string>& outs,
                                                   const std::vector<std::pair<std::string, Value>>& feeds) {
  // Inputs the requested outputs do not need (labels for predictions) may be left out.
  auto ins = order_feeds(*eval_exec, *model.graph, eval_inputs, feeds, params.lr_params_feed_name, false);
  std::vector<size_t> idx;
  for (const auto& n : outs) {
    auto it = eval_outputs.find(n);
    if (it == eval_outputs.end()) throw_error<InvalidArgument>("unknown output '", n, "'");
    idx.push_back(it->second);
  }
  // Evaluation must not advance the random streams of a later training step.
  const uint64_t rc = eval_exec->run_counter();
  auto r = eval_exec->run(ins, idx);
  eval_exec->set_run_counter(rc);
  return r;
}

TrainingSession::TrainingSession(const std::string& path, const TrainingParameters& params, const SessionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->model = ir::load_model_file(path);
  impl_->params = params;
  impl_->options = options;
  impl_->init();
}

TrainingSession::TrainingSession(const void* data, size_t size, const TrainingParameters& params,
                                 const SessionOptions& options, const std::string& base_dir)
    : impl_(std::make_unique<Impl>()) {
  impl_->model = ir::load_model_bytes(data, size, base_dir);
  impl_->params = params;
  impl_->options = options;
  impl_->init();
}

TrainingSession::~TrainingSession() = default;
TrainingSession::TrainingSession(TrainingSession&&) noexcept = default;
TrainingSession& TrainingSession::operator=(TrainingSession&&) noexcept = default;

std::vector<Value> TrainingSession::run(const std::vector<std::string>& output_names,
                                        const std::vector<std::pair<std::string, Value>>& feeds) {
  return impl_->run_train(output_names, feeds);
}

std::vector<Value> TrainingSession::eval(const std::vector<std::string>& output_names,
                                         const std::vector<std::pair<std::string, Value>>& feeds) {
  return impl_->run_eval(output_names, feeds);
}

std::vector<NodeArg> TrainingSession::get_inputs() const {
  std::vector<NodeArg> r;
  for (const auto& v : impl_->model.graph->inputs)
    if (!impl_->model.graph->initializer(v.name)) r.push_back(node_arg_of(v));
  NodeArg lr;
  lr.name = impl_->params.lr_params_feed_name;
  lr.type = "tensor(float)";
  lr.elem = DType::kFloat32;
  lr.has_shape = true;
  lr.shape = {DimInfo{1, ""}};
  r.push_back(lr);
  return r;
}

std::vector<NodeArg> TrainingSession::get_outputs() const {
  std::vector<NodeArg> r;
  for (const auto& n : impl_->user_outputs) {
    for (const auto& v : impl_->grad_model.graph->outputs)
      if (v.name == n) r.push_back(node_arg_of(v));
  }
  return r;
}

std::vector<std::string> TrainingSession::trained_weights() const { return impl_->trained; }

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_state() const {
  std::vector<std::pair<std::string, Tensor>> r;
  for (const auto& [n, t] : impl_->model.graph->initializers) r.emplace_back(n, t.clone());
  return r;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_model_state() const {
  std::vector<std::pair<std::string, Tensor>> r;
  for (size_t i = 0; i < impl_->trained.size(); ++i) r.emplace_back(impl_->trained[i], impl_->weights[i]->clone());
  return r;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_optimizer_state() const {
  auto r = impl_->optimizer->state();
  for (auto& [n, t] : r) t = t.clone();
  r.emplace_back("step", Tensor::scalar<int64_t>(impl_->optimizer->step_count()));
  return r;
}

void TrainingSession::load_state(const std::vector<std::pair<std::string, Tensor>>& state, bool strict) {
  std::set<std::string> given;
  for (const auto& [n, t] : state) {
    Tensor* w = impl_->initializer(n);
    if (!w) throw_error<InvalidArgument>("load_state: '", n, "' is not an initializer of the model");
    if (impl_->params.immutable_weights.count(n))
      throw_error<InvalidArgument>("load_state: '", n, "' is an immutable weight");
    if (w->dtype() != t.dtype() || w->shape() != t.shape())
      throw_error<InvalidArgument>("load_state: '", n, "' is ", t.describe(), ", the model's is ", w->describe());
    given.insert(n);
  }
  if (strict)
    for (const auto& n : impl_->trained)
      if (!given.count(n)) throw_error<InvalidArgument>("load_state(strict=True): weight '", n, "' is missing");
  for (const auto& [n, t] : state) impl_->initializer(n)->copy_from(t);
}

int64_t TrainingSession::step() const { return impl_->optimizer->step_count(); }

std::string TrainingSession::export_model(const std::vector<std::string>& outputs) const {
  ir::Model m = train::inference_graph(impl_->model, outputs, true, impl_->params.loss_output_name);
  return ir::serialize_model(m);
}

void TrainingSession::export_model_to(const std::string& path, const std::vector<std::string>& outputs) const {
  ir::write_file_atomic(path, export_model(outputs));
}

void TrainingSession::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  train::Checkpoint c;
  for (const auto& [k, v] : metadata) c.text["user/" + k] = v;
  c.fingerprint = train::model_fingerprint(impl_->model, impl_->trained);
  for (const auto& [n, t] : impl_->model.graph->initializers)
    if (dtype_is_float(t.dtype())) c.tensors.emplace_back("model/" + n, t);
  for (const auto& [n, t] : impl_->optimizer->state()) c.tensors.emplace_back("optimizer/" + n, t);
  for (size_t i = 0; i < impl_->accum.size(); ++i) c.tensors.emplace_back("accumulator/" + impl_->trained[i], impl_->accum[i]);
  c.counters["optimizer_step"] = impl_->optimizer->step_count();
  c.counters["micro_step"] = impl_->micro;
  c.counters["train_runs"] = int64_t(impl_->train_exec->run_counter());
  c.text["optimizer"] = impl_->optimizer->name();
  train::write_checkpoint(path, c);
}

std::map<std::string, std::string> TrainingSession::load_checkpoint(const std::string& path) {
  train::Checkpoint c = train::read_checkpoint(path);
  const std::string fp = train::model_fingerprint(impl_->model, impl_->trained);
  if (c.fingerprint != fp)
    throw_error<InvalidArgument>("checkpoint '", path, "' was written for a different model or set of trained weights");
  auto opt = c.text.find("optimizer");
  if (opt == c.text.end() || opt->second != impl_->optimizer->name())
    throw_error<InvalidArgument>("checkpoint '", path, "' holds the state of optimizer '",
                                 opt == c.text.end() ? "?" : opt->second, "', this session uses '",
                                 impl_->optimizer->name(), "'");
  std::vector<std::pair<std::string, Tensor>> weights, opt_state;
  std::vector<Tensor> accum;
  for (auto& [n, t] : c.tensors) {
    if (n.rfind("model/", 0) == 0) {
      const std::string w = n.substr(6);
      Tensor* dst = impl_->initializer(w);
      if (!dst || dst->shape() != t.shape() || dst->dtype() != t.dtype())
        throw_error<InvalidArgument>("checkpoint '", path, "': tensor '", w, "' does not match the model");
      weights.emplace_back(w, t);
    } else if (n.rfind("optimizer/", 0) == 0) {
      opt_state.emplace_back(n.substr(10), t);
    } else if (n.rfind("accumulator/", 0) == 0) {
      accum.push_back(t);
    }
  }
  impl_->optimizer->load_state(opt_state);  // validates before anything is overwritten below
  for (const auto& [w, t] : weights) impl_->initializer(w)->copy_from(t);
  impl_->optimizer->set_step_count(c.counters["optimizer_step"]);
  impl_->micro = c.counters["micro_step"];
  impl_->accum = accum;
  impl_->train_exec->set_run_counter(uint64_t(c.counters["train_runs"]));
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : c.text)
    if (k.rfind("user/", 0) == 0) meta[k.substr(5)] = v;
  return meta;
}

}  // namespace onnxtrain
