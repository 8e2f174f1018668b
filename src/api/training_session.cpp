// TrainingSession: gradient graph + fused optimizer + exact checkpoints (include/onnxtrain/training.h).
// This file: set-up, training and evaluation runs, profiling and export; the state copies and the
// checkpoints are in training_session_state.cpp, the parameters' validation in
// training_parameters.cpp.
#include "onnxtrain/training.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <tuple>
#include <unordered_set>

#include "api/session_impl.h"
#include "api/training_parameters.h"
#include "api/training_session_impl.h"
#include "distributed/comm.h"
#include "distributed/rank_agreement.h"
#include "ir/onnx_io.h"
#include "runtime/feeds.h"
#include "runtime/run_hooks.h"
#include "train/fusion.h"
#include "train/mixed_precision.h"
#include "train/training_graph.h"

namespace onnxtrain {

using api::effective_precision;
using api::lr_schedule_of;

namespace {

enum Phase : int { kForward = 0, kBackward = 1, kOptimizer = 2, kEval = 3 };
const char* const kPhaseNames[] = {"forward", "backward", "optimizer", "eval"};

// The gradient builder names its nodes grad_*, attach_optimizer optimizer_* (accumulation, clipping
// and the update), the loss builder loss_*; the rest is the model's forward pass.
int phase_of(const ir::Node& n) {
  if (n.name.rfind("grad_", 0) == 0) return kBackward;
  if (n.name.rfind("optimizer_", 0) == 0) return kOptimizer;
  return kForward;
}

}  // namespace

template <class Fn>
void TrainingSession::Impl::profiled(bool eval, Fn&& fn) {
  if (!profiler.active()) {
    fn();
    return;
  }
  const int64_t start = runtime::now_ns();
  runtime::RunHooks hooks;
  if (const runtime::RunHooks* outer = runtime::current_run_hooks()) hooks.terminate = outer->terminate;
  hooks.on_node = [this, eval](runtime::NodeEvent&& ev) { profiler.node_event(ev, eval ? kEval : phase_of(*ev.node)); };
  {
    runtime::ScopedRunHooks scope(&hooks);
    fn();
  }
  profiler.session_event(eval ? "eval_run" : "train_run", start, "{\"step\": " + std::to_string(driver.step) + "}");
}

namespace {

int64_t parse_config_int(const char* key, const std::string& v, int64_t min) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || x < min)
    throw_error<InvalidArgument>("config entry ", key, " must be an integer >= ", min, ", got '", v, "'");
  return x;
}

// Throws the error every rank raises when the ranks' `mine` differ: "<context>: rank r differs from
// rank 0 in <what>" (the first fact in which some rank differs, the first rank that differs there).
void require_same_as_rank0(const std::vector<distributed::RankFact>& mine, const char* collective,
                           const std::string& context) {
  const auto d = distributed::first_disagreement(distributed::Comm::world(), mine, collective);
  if (!d) return;
  const size_t r = d->ranks[0];
  const auto &a = d->facts[0], &b = d->facts[r];
  const std::string what = !a || !b ? "their number of entries" : a->what == b->what ? a->what : a->what + " / " + b->what;
  throw_error<InvalidArgument>(context, ": rank ", r, " differs from rank 0 in ", what);
}

}  // namespace

void TrainingSession::Impl::setup_data_parallel() {
  const distributed::LaunchInfo li = distributed::launch_info();
  int64_t ws = params.world_size;
  if (params.data_parallel_size > 1 && ws == 1) ws = params.data_parallel_size;
  if (li.launched && li.size > 1 && ws == 1 && params.world_rank == 0) ws = li.size;  // from the launcher
  if (ws <= 1) return;
  if (!li.launched)
    throw_error<InvalidArgument>("TrainingParameters.world_size is ", ws, " but this process was not started by an MPI ",
                                 "launcher (run it with mpirun -np ", ws, ")");
  distributed::Comm& comm = distributed::Comm::world();
  if (comm.size() != ws)
    throw_error<InvalidArgument>("TrainingParameters.world_size is ", ws, " but the MPI job has ", comm.size(),
                                 " ranks (launch with mpirun -np ", ws, ")");
  if (params.world_rank != 0 && params.world_rank != comm.rank())
    throw_error<InvalidArgument>("TrainingParameters.world_rank is ", params.world_rank, " but this process is rank ",
                                 comm.rank(), " of the MPI job");
  if (params.enable_adasum && (ws & (ws - 1)) != 0)
    throw_error<NotImplemented>("TrainingParameters.enable_adasum with ", ws,
                                " ranks: Adasum needs a power-of-two number of ranks");
  rank = comm.rank();
  world = int(ws);
  std::string every = options.config("onnxtrain.check_weights_every", "");
  if (every.empty())
    if (const char* e = std::getenv("ONNXTRAIN_CHECK_WEIGHTS_EVERY")) every = e;
  if (!every.empty()) check_every = parse_config_int("onnxtrain.check_weights_every", every, 0);
}

void TrainingSession::Impl::check_ranks_agree() {
  std::vector<distributed::RankFact> d;
  {
    ir::Model structure = model;
    structure.graph = std::make_shared<ir::Graph>(*model.graph);
    structure.graph->initializers.clear();
    const std::string bytes = ir::serialize_model(structure);
    d.push_back({"the model's graph", distributed::digest(bytes.data(), bytes.size())});
  }
  for (const auto& [n, t] : model.graph->initializers) d.push_back({"initializer '" + n + "'", distributed::digest(t)});
  for (auto& f : api::parameter_facts(params)) d.push_back(std::move(f));
  require_same_as_rank0(d, "the start-up comparison of the ranks", "TrainingSession");
}

void TrainingSession::Impl::check_weights_agree() {
  state_to_host();
  std::vector<distributed::RankFact> d;
  for (size_t i = 0; i < trained.size(); ++i) d.push_back({"weight '" + trained[i] + "'", distributed::digest(*weights[i])});
  require_same_as_rank0(d, "the weight check", "after update " + std::to_string(driver.step) + ", the weights diverged");
}

void TrainingSession::Impl::init() {
  const int64_t init_start = runtime::now_ns();
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

  const std::vector<train::RunningStat> running = train::batchnorm_running_stats(model);
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
  // No weight to train (a model without parameters): the steps compute the loss and update nothing, as onnxruntime.
  for (const auto& n : trained) weights.push_back(initializer(n));

  setup_data_parallel();
  train::StepConfig sc;
  sc.data_parallel.world_size = world;
  sc.data_parallel.post_accumulation = params.allreduce_post_accumulation;
  sc.data_parallel.adasum = params.enable_adasum;
  sc.data_parallel.rank = rank;
  sc.data_parallel.zero_stage = int(params.deepspeed_zero_stage);
  if (const std::string b = options.config("onnxtrain.allreduce_bucket_bytes", ""); !b.empty())
    sc.data_parallel.bucket_bytes = parse_config_int("onnxtrain.allreduce_bucket_bytes", b, 1);
  if (world > 1) check_ranks_agree();
  sc.optimizer.name = params.training_optimizer_name;
  sc.optimizer.attrs = params.optimizer_attributes;
  sc.optimizer.int_attrs = params.optimizer_int_attributes;
  sc.optimizer.weight_attrs = params.optimizer_attributes_map;
  sc.optimizer.weight_int_attrs = params.optimizer_int_attributes_map;
  sc.accumulation_steps = params.gradient_accumulation_steps;
  driver.accumulation_steps = params.gradient_accumulation_steps;
  sc.clip_grad_norm = params.enable_grad_norm_clip;
  sc.max_grad_norm = params.max_grad_norm;
  sc.portable = params.portable_training_graph;
  sc.lr_input = params.lr_params_feed_name;
  sc.recompute.gelu = params.gelu_recompute;
  sc.recompute.attn_dropout = params.attn_dropout_recompute;
  sc.recompute.transformer_layer = params.transformer_layer_recompute;
  sc.recompute.number_layers = params.number_recompute_layers;
  sc.recompute.values = params.recompute_values;
  sc.recompute.budget_bytes = params.recompute_budget_bytes;
  sc.memory_efficient_gradient = params.use_memory_efficient_gradient;
  ExecOptions eo = exec_options_of(options);
  sc.host_kernels_only = std::all_of(eo.providers.begin(), eo.providers.end(),
                                     [](const ExecutionProvider* p) { return !p || p->device().is_host(); });
  if (const std::string a = options.config("onnxtrain.absorb_transposes", "1"); a == "0" || a == "1")
    sc.absorb_transposes = a == "1";
  else
    throw_error<InvalidArgument>("config entry onnxtrain.absorb_transposes must be \"0\" or \"1\", got '", a, "'");
  ir::Model grad_model;
  // bf16: the training graph differentiates a copy whose products run in bfloat16; the session's
  // model (weights, export, eval) stays float32.
  // The forward graph differentiated: GELUs and transposed weights fused into their products
  // (default mode), products in low precision.
  ir::Model autocast = params.portable_training_graph ? model : train::fuse_transposed_matmul(train::fuse_gelu(train::drop_zero_dropout(model)));
  const std::string precision = effective_precision(params);
  std::string loss_name = params.loss_output_name;
  if (precision == "bf16") autocast = train::autocast(autocast, DType::kBFloat16);
  if (precision == "fp16") {
    // fp16: the products in float16, and the loss multiplied by the loss scale before it is
    // differentiated (the gradients of the scaled loss are unscaled and checked before the update).
    fp16 = true;
    autocast = train::autocast(autocast, DType::kFloat16);
    std::tie(sc.loss_scale_input, loss_name) = train::add_loss_scale(autocast, params.loss_output_name, "loss_scale");
    if (params.loss_scale > 0) scaler.scale = scaler.initial_scale = double(params.loss_scale);
    scaler.dynamic = params.loss_scale == 0;
  }
  // Conv + Relu as one FusedConv (default mode; after the casts, which keep low-precision pairs apart).
  if (!params.portable_training_graph) autocast = train::fuse_conv_relu(autocast);
  tg = train::build_training_graph(autocast, loss_name, trained, running,
                                   params.immutable_weights, sc,
                                   params.model_with_gradient_graph_path.empty() ? nullptr : &grad_model);
  optimizer_name = params.training_optimizer_name;
  // The training model shares the forward model's weight storage.
  for (auto& [n, t] : tg.model.graph->initializers)
    if (Tensor* w = initializer(n)) t = *w;
  if (!params.model_with_gradient_graph_path.empty()) ir::save_model(grad_model, params.model_with_gradient_graph_path);
  if (!params.model_with_training_graph_path.empty()) ir::save_model(tg.model, params.model_with_training_graph_path);

  eo.deterministic = options.deterministic || params.deterministic_compute;
  eo.training = true;
  eo.torch_running_var = true;
  std::unordered_set<std::string> mutable_inits;
  for (const auto& [n, t] : tg.model.graph->initializers)
    if (dtype_is_float(t.dtype())) mutable_inits.insert(n);
  train_exec = std::make_unique<runtime::GraphExecutor>(tg.model.graph, tg.model.opsets, eo,
                                                        std::vector<std::string>{}, mutable_inits);
  // On a device provider the weights and optimizer state stay in its memory between steps;
  // the methods that read or write them on the host sync first (state_to_host, HostStateWrite).
  for (const ExecutionProvider* p : eo.providers)
    if (p && !p->device().is_host()) train_exec->keep_state_on_device(true);
  ExecOptions ev = eo;
  ev.training = false;
  eval_exec = std::make_unique<runtime::GraphExecutor>(train::inference_graph(model, {}, false).graph, model.opsets, ev,
                                                       std::vector<std::string>{}, mutable_inits);
  for (size_t i = 0; i < train_exec->input_names().size(); ++i) train_inputs[train_exec->input_names()[i]] = i;
  for (size_t i = 0; i < eval_exec->input_names().size(); ++i) eval_inputs[eval_exec->input_names()[i]] = i;
  for (size_t i = 0; i < eval_exec->output_names().size(); ++i) eval_outputs[eval_exec->output_names()[i]] = i;
  for (const auto& o : g.outputs) user_outputs.push_back(o.name);
  model_outputs = user_outputs;
  if (params.set_gradients_as_graph_outputs)
    for (const auto& gr : tg.gradients) user_outputs.push_back(gr);
  lr = Value::of(Tensor::zeros(DType::kFloat32, {1}));
  step_count = Value::of(Tensor::zeros(DType::kInt64, {1}));
  reset = Value::of(Tensor::zeros(DType::kBool, {1}));
  lr_slot = train_inputs.at(tg.lr_input);
  step_slot = train_inputs.at(tg.step_input);
  if (!tg.reset_input.empty()) reset_slot = train_inputs.at(tg.reset_input);
  contribution = Value::of(Tensor::zeros(DType::kFloat64, {1}));
  contribution.tensor.data<double>()[0] = 1.0 / double(world);
  if (!tg.contribution_input.empty()) contribution_slot = train_inputs.at(tg.contribution_input);
  loss_scale_value = Value::of(Tensor::zeros(DType::kFloat32, {1}));
  if (fp16) {
    loss_scale_slot = train_inputs.at(tg.loss_scale_input);
    user_outputs.push_back(tg.all_finite_output);
  }
  ins.assign(train_exec->input_names().size(), nullptr);
  has_schedule = !params.lr_schedule.empty();
  if (has_schedule) schedule = lr_schedule_of(params);
  if (options.enable_profiling) {
    profiler.start(options.profile_file_prefix, true);
    profiler.session_event("session_initialization", init_start);
  }
}

namespace {

// Feeds in executor order into `ins` (cleared first); validates names and types against the
// graph's declared inputs. Inputs named in `skip` are the session's own (the learning rate).
void order_feeds(const runtime::GraphExecutor& ex, const ir::Graph& g,
                 const std::unordered_map<std::string, size_t>& index,
                 const std::vector<std::pair<std::string, Value>>& feeds, const std::string& skip,
                 const std::string& skip2, std::vector<const Value*>& ins, bool require_all) {
  ins.assign(ex.input_names().size(), nullptr);
  for (const auto& [name, v] : feeds) {
    if (name == skip || (!skip2.empty() && name == skip2)) continue;
    auto it = index.find(name);
    const ir::ValueInfo* decl = nullptr;
    for (const auto& vi : g.inputs)
      if (vi.name == name) decl = &vi;
    if (it == index.end() || !decl) {
      std::string names;
      for (const auto& vi : g.inputs)
        if (!g.initializer(vi.name)) names += (names.empty() ? "" : ", ") + vi.name;
      throw_error<InvalidArgument>("unknown input '", name, "' (the model's inputs are: ", names,
                                   skip.empty() ? "" : ", and the learning rate '" + skip + "'",
                                   skip2.empty() ? "" : ", the loss scale '" + skip2 + "'", ")");
    }
    if (ins[it->second]) throw_error<InvalidArgument>("input '", name, "' is fed twice");
    check_feed(*decl, v);
    ins[it->second] = &v;
  }
  for (size_t i = 0; require_all && i < ins.size(); ++i)
    if (!ins[i] && !ex.input_has_default(i)) throw_error<InvalidArgument>("missing input '", ex.input_names()[i], "'");
}

}  // namespace

const TrainingSession::Impl::Requests& TrainingSession::Impl::requests_for(const std::vector<std::string>& outputs) {
  for (const auto& r : requests)
    if (r.outputs == outputs) return r;
  runtime::PlanRequest update, accumulate;
  update.outputs = accumulate.outputs = outputs;
  update.updates = tg.update_step();
  accumulate.updates = tg.accumulate_step();
  Requests r;
  r.outputs = outputs;
  // fp16: an update step always computes all_finite (the session reads it); when the caller did
  // not ask for it, it comes last and is dropped.
  if (fp16 && std::find(outputs.begin(), outputs.end(), tg.all_finite_output) == outputs.end()) {
    update.outputs.push_back(tg.all_finite_output);
    r.finite_appended = true;
  }
  // An accumulation-only step does not compute all_finite: asking for it there is an error.
  r.update = train_exec->add_request(std::move(update));
  r.accumulate = params.gradient_accumulation_steps > 1 ? train_exec->add_request(std::move(accumulate)) : r.update;
  requests.push_back(std::move(r));
  return requests.back();
}

void TrainingSession::Impl::run_train(const std::vector<std::string>& outs_in,
                                      const std::vector<std::pair<std::string, Value>>& feeds,
                                      std::vector<Value>& results) {
  // Learning rate.
  float rate = 0;
  bool lr_fed = false;
  for (const auto& [name, v] : feeds)
    if (name == params.lr_params_feed_name) {
      if (v.kind != Value::Kind::kTensor || v.tensor.dtype() != DType::kFloat32 || v.tensor.numel() != 1)
        throw_error<InvalidArgument>("input '", name, "' (the learning rate) must be a float32 array of shape [1]");
      rate = v.tensor.data<float>()[0];
      lr_fed = true;
    }
  if (!lr_fed) {
    if (!has_schedule)
      throw_error<InvalidArgument>("missing input '", params.lr_params_feed_name,
                                   "': feed the learning rate as a float32 array of shape [1]");
    rate = float(schedule.value(driver.step + 1));
  }
  if (!std::isfinite(rate) || rate < 0) throw_error<InvalidArgument>("learning rate ", rate, " must be finite and >= 0");

  const std::vector<std::string>& outs = outs_in.empty() ? model_outputs : outs_in;
  for (const auto& n : outs)
    if (std::find(user_outputs.begin(), user_outputs.end(), n) == user_outputs.end())
      throw_error<InvalidArgument>("unknown output '", n, "' (the outputs are: ", runtime::join_names(user_outputs), ")",
                                   n.size() > 5 && n.compare(n.size() - 5, 5, "_grad") == 0
                                       ? " (set TrainingParameters.set_gradients_as_graph_outputs to request gradients)"
                                       : "");
  order_feeds(*train_exec, *model.graph, train_inputs, feeds, params.lr_params_feed_name, tg.loss_scale_input, ins,
              false);
  lr.tensor.data<float>()[0] = rate;
  step_count.tensor.data<int64_t>()[0] = driver.step + 1;
  reset.tensor.data<bool>()[0] = driver.reset_due();
  ins[lr_slot] = &lr;
  ins[step_slot] = &step_count;
  if (!tg.reset_input.empty()) ins[reset_slot] = &reset;
  if (!tg.contribution_input.empty()) ins[contribution_slot] = &contribution;
  if (fp16) {
    // The loss scale: fed, else the session's own (dynamic scaler or TrainingParameters.loss_scale).
    float ls = float(scaler.scale);
    for (const auto& [name, v] : feeds)
      if (name == tg.loss_scale_input) {
        if (v.kind != Value::Kind::kTensor || v.tensor.dtype() != DType::kFloat32 || v.tensor.numel() != 1 ||
            v.tensor.rank() > 1)
          throw_error<InvalidArgument>("input '", name, "' (the loss scale) must be a float32 array of shape [1] or []");
        ls = v.tensor.data<float>()[0];
      }
    if (!(ls > 0) || !std::isfinite(ls)) throw_error<InvalidArgument>("loss scale ", ls, " must be finite and > 0");
    loss_scale_value.tensor.data<float>()[0] = ls;
    ins[loss_scale_slot] = &loss_scale_value;
  }
  for (size_t i = 0; i < ins.size(); ++i)
    if (!ins[i] && !train_exec->input_has_default(i))
      throw_error<InvalidArgument>("missing input '", train_exec->input_names()[i], "'");
  const Requests& req = requests_for(outs);
  const bool update = driver.update_due();
  if (fp16 && !update && std::find(outs.begin(), outs.end(), tg.all_finite_output) != outs.end())
    throw_error<InvalidArgument>("output '", tg.all_finite_output, "' is computed by update steps only; this run (",
                                 driver.micro + 1, " of ", params.gradient_accumulation_steps, ") accumulates gradients");
  profiled(false, [&] { train_exec->run(ins, update ? req.update : req.accumulate, results); });
  bool applied = true;
  if (update && fp16) {
    const auto at = req.finite_appended ? results.size() - 1
                                        : size_t(std::find(outs.begin(), outs.end(), tg.all_finite_output) - outs.begin());
    applied = *results[at].tensor.data<bool>();
    if (req.finite_appended) results.pop_back();
    scaler.update(applied);  // onnxruntime's DynamicLossScaler rule, whether or not this step's scale was fed
  }
  // A skipped update leaves the step count (Adam's bias correction, the schedule).
  driver.finish_run(applied);
  if (update && applied && check_every > 0 && driver.step % check_every == 0) check_weights_agree();
}
std::vector<Value> TrainingSession::Impl::run_eval(const std::vector<std::string>& outs,
                                                   const std::vector<std::pair<std::string, Value>>& feeds) {
  // Inputs the requested outputs do not need (labels for predictions) may be left out.
  std::vector<const Value*> eval_ins;
  order_feeds(*eval_exec, *model.graph, eval_inputs, feeds, params.lr_params_feed_name, tg.loss_scale_input, eval_ins,
              false);
  std::vector<size_t> idx;
  for (const auto& n : outs) {
    auto it = eval_outputs.find(n);
    if (it == eval_outputs.end()) throw_error<InvalidArgument>("unknown output '", n, "' (the outputs are: ", runtime::join_names(user_outputs), ")");
    idx.push_back(it->second);
  }
  // Evaluation must not advance the random streams of a later training step.
  const uint64_t rc = eval_exec->run_counter();
  std::vector<Value> r;
  profiled(true, [&] { r = eval_exec->run(eval_ins, idx); });
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

// Feeds on a device are copied to the host (runtime::host_feeds): the plans read every feed there,
// and the host reads the learning rate and the loss scale.
std::vector<Value> TrainingSession::run(const std::vector<std::string>& names, const runtime::Feeds& feeds) {
  std::vector<Value> results;
  run(names, feeds, results);
  return results;
}

void TrainingSession::run(const std::vector<std::string>& names, const runtime::Feeds& feeds, std::vector<Value>& out) {
  runtime::Feeds copies;
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->run_train(names, runtime::host_feeds(feeds, copies), out);
}

std::vector<Value> TrainingSession::eval(const std::vector<std::string>& names, const runtime::Feeds& feeds) {
  runtime::Feeds copies;
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->state_to_host();
  return impl_->run_eval(names, runtime::host_feeds(feeds, copies));
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
  if (impl_->fp16) {
    lr.name = impl_->tg.loss_scale_input;
    r.push_back(lr);
  }
  return r;
}

std::vector<NodeArg> TrainingSession::get_outputs() const {
  std::vector<NodeArg> r;
  for (const auto& n : impl_->user_outputs) {
    for (const auto& v : impl_->tg.model.graph->outputs)
      if (v.name == n) r.push_back(node_arg_of(v));
  }
  return r;
}

std::vector<std::string> TrainingSession::trained_weights() const { return impl_->trained; }

std::string TrainingSession::loss_scale_input_name() const { return impl_->tg.loss_scale_input; }
std::string TrainingSession::all_finite_output_name() const { return impl_->tg.all_finite_output; }
double TrainingSession::loss_scale() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->fp16 ? impl_->scaler.scale : 0.0;
}
LossScaleState& TrainingSession::loss_scaler() { return impl_->scaler; }

int64_t TrainingSession::skipped_updates() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->scaler.skipped;
}

void TrainingSession::set_local_batch_share(double share) {
  if (!(share >= 0 && share <= 1))
    throw_error<InvalidArgument>("TrainingSession::set_local_batch_share: ", share, " is not in [0, 1]");
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->contribution.tensor.data<double>()[0] = share;
}

int TrainingSession::world_rank() const { return impl_->rank; }
int TrainingSession::world_size() const { return impl_->world; }

int64_t TrainingSession::step() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->driver.step;
}

RunStats TrainingSession::last_run_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return run_stats_of(*impl_->train_exec);
}

std::vector<AssignedNode> TrainingSession::node_assignment() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return assigned_nodes(impl_->train_exec->last_step_providers());
}

int64_t TrainingSession::run_count() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return int64_t(impl_->train_exec->run_counter());
}

bool TrainingSession::update_due() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->driver.update_due();
}

void TrainingSession::set_progress(int64_t runs, int64_t step) {
  if (runs < 0 || step < 0)
    throw_error<InvalidArgument>("TrainingSession::set_progress: runs ", runs, " and step ", step,
                                 " must not be negative");
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->train_exec->set_run_counter(uint64_t(runs));
  impl_->driver.step = step;
}

double TrainingSession::scheduled_learning_rate(int64_t step) const {
  if (!impl_->has_schedule)
    throw_error<InvalidArgument>("scheduled_learning_rate: TrainingParameters.lr_schedule is empty");
  return impl_->schedule.value(step);
}

const TrainingParameters& TrainingSession::parameters() const { return impl_->params; }

std::string TrainingSession::export_model(const std::vector<std::string>& outputs) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->state_to_host();
  ir::Model m = train::inference_graph(impl_->model, outputs, true, impl_->params.loss_output_name);
  return ir::serialize_model(m);
}

void TrainingSession::export_model_to(const std::string& path, const std::vector<std::string>& outputs) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->state_to_host();
  // Written beside its weights (external data) when over protobuf's 2 GiB limit.
  ir::save_model(train::inference_graph(impl_->model, outputs, true, impl_->params.loss_output_name), path);
}

void TrainingSession::start_profiling(bool trace) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->profiler.start(impl_->options.profile_file_prefix, trace);
}

std::vector<NodeProfile> TrainingSession::profile_summary() const {
  std::vector<NodeProfile> r;
  for (const auto& t : impl_->profiler.totals()) {
    NodeProfile p;
    p.node = t.name;
    p.op_type = t.op_type;
    p.phase = kPhaseNames[t.tag];
    p.calls = t.calls;
    p.seconds = double(t.ns) * 1e-9;
    r.push_back(std::move(p));
  }
  return r;
}

std::string TrainingSession::end_profiling() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->profiler.end();
}

}  // namespace onnxtrain
