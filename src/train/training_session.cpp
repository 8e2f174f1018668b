// TrainingSession: gradient graph + fused optimizer + exact checkpoints.
//
// Weights live once, in the forward model's initializers; the gradient model and both executors
// share their storage and see every in-place update (the executors treat float initializers as
// mutable, never folding them).
#include "onnxtrain/training.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <filesystem>
#include <deque>
#include <cmath>
#include <mutex>
#include <optional>
#include <random>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <tuple>

#include "api/session_impl.h"
#include "distributed/comm.h"
#include "ir/onnx_io.h"
#include "runtime/executor.h"
#include "runtime/feeds.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/fusion.h"
#include "train/mixed_precision.h"
#include "train/attach_optimizer.h"
#include "train/training_graph.h"

namespace onnxtrain {

using runtime::check_feed;
using runtime::node_arg_of;

namespace {

// The precision a session trains in: mixed_precision, or "fp16" for onnxruntime's
// use_mixed_precision ("" = fp32).
std::string effective_precision(const TrainingParameters& p) {
  if (p.mixed_precision == "fp32") return "";
  if (p.mixed_precision.empty() && p.use_mixed_precision) return "fp16";
  return p.mixed_precision;
}

}  // namespace

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

// The fields with a constraint of their own, each with its check (the message names the field).
using FieldCheck = void (*)(const TrainingParameters&, const std::string& field);
const std::vector<std::pair<std::string, FieldCheck>>& field_checks() {
  static const std::vector<std::pair<std::string, FieldCheck>> checks = {
      {"training_optimizer_name", [](const TrainingParameters& p, const std::string&) {
         train::optimizer_spec(p.training_optimizer_name);  // names the known optimizers
       }},
      {"lr_params_feed_name", [](const TrainingParameters& p, const std::string& f) {
         if (p.lr_params_feed_name.empty()) throw_error<InvalidArgument>("TrainingParameters.", f, " is empty");
       }},
      {"gradient_accumulation_steps", [](const TrainingParameters& p, const std::string& f) {
         if (p.gradient_accumulation_steps < 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be an integer >= 1, got ",
                                        p.gradient_accumulation_steps);
       }},
      {"max_grad_norm", [](const TrainingParameters& p, const std::string& f) {
         if (!(p.max_grad_norm > 0) || !std::isfinite(p.max_grad_norm))
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be > 0, got ", p.max_grad_norm);
       }},
      {"lr_schedule", [](const TrainingParameters& p, const std::string& f) {
         if (p.lr_schedule.empty()) return;
         try {
           train::check_lr_schedule_kind(p.lr_schedule);
         } catch (const InvalidArgument& e) {
           throw_error<InvalidArgument>("TrainingParameters.", f, ": ", e.what());
         }
       }},
      {"mixed_precision", [](const TrainingParameters& p, const std::string& f) {
         if (!p.mixed_precision.empty() && p.mixed_precision != "fp32" && p.mixed_precision != "bf16" &&
             p.mixed_precision != "fp16")
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be '', 'fp32', 'bf16' or 'fp16', got '",
                                        p.mixed_precision, "'");
       }},
      {"loss_scale", [](const TrainingParameters& p, const std::string& f) {
         if (!(p.loss_scale >= 0) || !std::isfinite(p.loss_scale))
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be finite and >= 0 (0: dynamic), got ",
                                        p.loss_scale);
       }},
      {"lr_schedule_params", [](const TrainingParameters& p, const std::string&) {
         make_schedule(p);  // names an unknown key
       }},
      {"world_size", [](const TrainingParameters& p, const std::string& f) {
         if (p.world_size < 1) throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 1, got ", p.world_size);
       }},
      {"world_rank", [](const TrainingParameters& p, const std::string& f) {
         if (p.world_rank < 0) throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 0, got ", p.world_rank);
       }},
      {"local_rank", [](const TrainingParameters& p, const std::string& f) {
         if (p.local_rank < 0) throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 0, got ", p.local_rank);
       }},
      {"data_parallel_size", [](const TrainingParameters& p, const std::string& f) {
         if (p.data_parallel_size < 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 1, got ", p.data_parallel_size);
       }},
      {"horizontal_parallel_size", [](const TrainingParameters& p, const std::string& f) {
         if (p.horizontal_parallel_size < 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 1, got ", p.horizontal_parallel_size);
       }},
      {"pipeline_parallel_size", [](const TrainingParameters& p, const std::string& f) {
         if (p.pipeline_parallel_size < 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 1, got ", p.pipeline_parallel_size);
       }},
      {"deepspeed_zero_stage", [](const TrainingParameters& p, const std::string& f) {
         if (p.deepspeed_zero_stage < 0 || p.deepspeed_zero_stage > 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be 0 or 1, got ", p.deepspeed_zero_stage);
       }},
  };
  return checks;
}

}  // namespace

void TrainingParameters::validate_field(const std::string& field) const {
  for (const auto& [name, check] : field_checks())
    if (name == field) check(*this, name);
}

void TrainingParameters::validate() const {
  if (loss_output_name.empty()) throw_error<InvalidArgument>("TrainingParameters.loss_output_name is empty");
  for (const auto& [name, check] : field_checks()) check(*this, name);
  if (horizontal_parallel_size > 1)
    throw_error<NotImplemented>("TrainingParameters.horizontal_parallel_size = ", horizontal_parallel_size,
                                ": horizontal (tensor) parallelism is not implemented; data parallelism is");
  if (pipeline_parallel_size > 1)
    throw_error<NotImplemented>("TrainingParameters.pipeline_parallel_size = ", pipeline_parallel_size,
                                ": pipeline parallelism is not implemented; data parallelism is");
  if (use_mixed_precision && mixed_precision == "fp32")
    throw_error<InvalidArgument>("TrainingParameters.use_mixed_precision is true but mixed_precision is 'fp32'");
  if (loss_scale > 0 && effective_precision(*this) != "fp16")
    throw_error<InvalidArgument>("TrainingParameters.loss_scale applies to float16 mixed precision (mixed_precision "
                                 "'fp16' or use_mixed_precision); this session trains in ",
                                 effective_precision(*this).empty() ? "fp32" : effective_precision(*this));
  if (world_rank >= world_size && world_size > 1)
    throw_error<InvalidArgument>("TrainingParameters.world_rank ", world_rank, " is not below world_size ", world_size);
  if (data_parallel_size > 1 && world_size > 1 && data_parallel_size != world_size)
    throw_error<InvalidArgument>("TrainingParameters.data_parallel_size ", data_parallel_size, " differs from world_size ",
                                 world_size, " (without horizontal or pipeline parallelism they are equal)");
  if (lr_schedule.empty() && !lr_schedule_params.empty())
    throw_error<InvalidArgument>("TrainingParameters.lr_schedule_params is set but lr_schedule is empty");
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
  train::TrainingGraph tg;  // forward + backward + accumulation + clipping + optimizer
  TrainingParameters params;
  SessionOptions options;
  std::vector<std::string> trained;           // weights the optimizer updates
  std::vector<Tensor*> weights;               // into model.graph->initializers
  std::unique_ptr<runtime::GraphExecutor> train_exec, eval_exec;
  std::unordered_map<std::string, size_t> train_inputs, eval_inputs;  // name -> executor input
  std::unordered_map<std::string, size_t> eval_outputs;
  std::vector<std::string> user_outputs;      // names run() may return
  std::vector<std::string> model_outputs;     // what run() returns by default
  std::string optimizer_name;
  bool has_schedule = false;
  train::LrSchedule schedule;
  int64_t step = 0;                           // optimizer steps taken
  int64_t micro = 0;                          // run() calls since the last update
  // What a step feeds besides the data: owned here, updated in place every step.
  Value lr, step_count, reset, contribution, loss_scale_value;
  size_t lr_slot = 0, step_slot = 0, reset_slot = 0, contribution_slot = 0, loss_scale_slot = 0;
  // float16 mixed precision: the session's dynamic loss scaler (onnxruntime's DynamicLossScaler
  // rule), used when run() is not fed a loss scale.
  bool fp16 = false;
  double scale = 0;             // current loss scale
  int64_t stable_steps = 0;     // applied updates since the scale last changed
  int64_t skipped = 0;          // updates skipped for non-finite gradients
  static constexpr double kInitialScale = 65536.0, kMinScale = 1.0, kMaxScale = 16777216.0;
  static constexpr int64_t kScaleWindow = 2000;
  int rank = 0, world = 1;                    // data parallelism
  int64_t check_every = 0;                    // compare the ranks' weights every that many updates (0: never)
  std::vector<const Value*> ins;              // executor inputs, reused
  // Executor requests per list of requested outputs: (update step, accumulation-only step).
  struct Requests {
    std::vector<std::string> outputs;
    size_t update = 0, accumulate = 0;
    bool finite_appended = false;  // fp16: the update request returns all_finite last, unrequested
  };
  std::vector<Requests> requests;
  // Serializes the public calls: a step writes lr/step_count/reset and the counters above, and
  // checkpoints and state copies must not see a step half done.
  std::mutex mu;
  api::Profiler profiler;

  void init();
  /// Resolves rank and world size from the parameters and the launcher; starts MPI when > 1.
  void setup_data_parallel();
  /// Refuses to start when a rank's model, weights or parameters differ from rank 0's (naming it).
  void check_ranks_agree();
  /// Debug check (ONNXTRAIN_CHECK_WEIGHTS_EVERY / onnxtrain.check_weights_every): every rank's
  /// trained weights are bitwise those of rank 0.
  void check_weights_agree();
  /// This session's state as a checkpoint (this rank's part of it under ZeRO).
  train::Checkpoint checkpoint(const std::map<std::string, std::string>& metadata) const;
  /// A partitioned checkpoint (manifest `m` at `path`) as this session needs it: its own shard
  /// when the layout matches, else the shards merged (optimizer state concatenated in rank order).
  train::Checkpoint read_sharded(const std::string& path, const train::Checkpoint& m) const;
  /// ZeRO stage 1: the part [first, second) of weight `w`, flattened, that this rank updates.
  std::pair<int64_t, int64_t> zero_part(const std::string& w) const;
  /// Optimizer state `src` laid out as state initializer `state`: a whole tensor (or one merged
  /// flat from ZeRO parts) becomes this rank's ZeRO part or takes the weight's shape. nullopt when
  /// the sizes do not fit.
  std::optional<Tensor> relayout_state(const std::string& state, const Tensor& src) const;
  /// Runs `fn` with the profiler's node hook installed when profiling (nodes tagged by phase).
  template <class Fn>
  void profiled(bool eval, Fn&& fn);
  const Requests& requests_for(const std::vector<std::string>& outputs);
  void run_train(const std::vector<std::string>& outs, const std::vector<std::pair<std::string, Value>>& feeds,
                 std::vector<Value>& results);
  std::vector<Value> run_eval(const std::vector<std::string>& outs,
                              const std::vector<std::pair<std::string, Value>>& feeds);
  Tensor* initializer(const std::string& n) { return model.graph->initializer(n); }
  Tensor* state(const std::string& n) { return tg.model.graph->initializer(n); }
  /// Optimizer state by trained weight (in trained order), then by the optimizer's state order.
  std::vector<const train::StateUpdate*> optimizer_states() const {
    std::vector<const train::StateUpdate*> r;
    for (const auto& w : trained)
      for (const auto& u : tg.updates)
        if (u.kind == train::StateUpdate::Kind::kOptimizerState && u.weight == w) r.push_back(&u);
    return r;
  }
};

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
  profiler.session_event(eval ? "eval_run" : "train_run", start, "{\"step\": " + std::to_string(step) + "}");
}

namespace {

int64_t parse_config_int(const char* key, const std::string& v, int64_t min) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || x < min)
    throw_error<InvalidArgument>("config entry ", key, " must be an integer >= ", min, ", got '", v, "'");
  return x;
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
uint64_t hash_tensor(const Tensor& t) {
  std::string shape = dtype_name(t.dtype());
  for (int64_t d : t.shape()) shape += "," + std::to_string(d);
  return fnv1a(t.raw_data(), t.nbytes(), fnv1a(shape.data(), shape.size()));
}
std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

// Lines "what=digest" compared between ranks: rank r's first line that differs from rank 0's names
// the difference.
void compare_with_rank0(distributed::Comm& comm, const std::vector<std::pair<std::string, std::string>>& mine,
                        const char* collective, const char* context) {
  std::string text;
  for (const auto& [k, v] : mine) text += k + '\x1f' + v + '\n';
  const std::vector<std::string> all = comm.allgather_bytes(text, collective);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    auto split = [](const std::string& t) {
      std::vector<std::pair<std::string, std::string>> kv;
      size_t pos = 0;
      while (pos < t.size()) {
        const size_t nl = t.find('\n', pos), us = t.find('\x1f', pos);
        kv.emplace_back(t.substr(pos, us - pos), t.substr(us + 1, nl - us - 1));
        pos = nl + 1;
      }
      return kv;
    };
    const auto a = split(all[0]), b = split(all[r]);
    std::string diff = "their number of entries";
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      if (a[i] != b[i]) {
        diff = a[i].first == b[i].first ? a[i].first : a[i].first + " / " + b[i].first;
        break;
      }
    throw_error<InvalidArgument>(context, ": rank ", r, " differs from rank 0 in ", diff);
  }
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
  std::vector<std::pair<std::string, std::string>> d;
  {
    ir::Model structure = model;
    structure.graph = std::make_shared<ir::Graph>(*model.graph);
    structure.graph->initializers.clear();
    const std::string bytes = ir::serialize_model(structure);
    d.emplace_back("the model's graph", hex64(fnv1a(bytes.data(), bytes.size())));
  }
  for (const auto& [n, t] : model.graph->initializers) d.emplace_back("initializer '" + n + "'", hex64(hash_tensor(t)));
  const TrainingParameters& p = params;
  auto opt = [&](const std::string& field, const std::string& v) { d.emplace_back("TrainingParameters." + field, v); };
  auto set_text = [](const std::set<std::string>& s) {
    std::string r;
    for (const auto& x : s) r += x + ";";
    return r;
  };
  opt("loss_output_name", p.loss_output_name);
  opt("weights_to_train", set_text(p.weights_to_train));
  opt("weights_not_to_train", set_text(p.weights_not_to_train));
  opt("immutable_weights", set_text(p.immutable_weights));
  opt("training_optimizer_name", p.training_optimizer_name);
  opt("lr_params_feed_name", p.lr_params_feed_name);
  {
    std::ostringstream o;
    o.precision(17);
    for (const auto& [k, v] : p.optimizer_attributes) o << k << '=' << v << ';';
    for (const auto& [k, v] : p.optimizer_int_attributes) o << k << '=' << v << ';';
    for (const auto& [w, m] : p.optimizer_attributes_map)
      for (const auto& [k, v] : m) o << w << '.' << k << '=' << v << ';';
    for (const auto& [w, m] : p.optimizer_int_attributes_map)
      for (const auto& [k, v] : m) o << w << '.' << k << '=' << v << ';';
    opt("optimizer_attributes", o.str());
    std::ostringstream l;
    l.precision(17);
    for (const auto& [k, v] : p.lr_schedule_params) l << k << '=' << v << ';';
    opt("lr_schedule_params", l.str());
  }
  opt("gradient_accumulation_steps", std::to_string(p.gradient_accumulation_steps));
  opt("enable_grad_norm_clip", std::to_string(p.enable_grad_norm_clip));
  opt("max_grad_norm", std::to_string(p.max_grad_norm));
  opt("mixed_precision", effective_precision(p));
  opt("loss_scale", std::to_string(p.loss_scale));
  opt("lr_schedule", p.lr_schedule);
  opt("allreduce_post_accumulation", std::to_string(p.allreduce_post_accumulation));
  opt("deepspeed_zero_stage", std::to_string(p.deepspeed_zero_stage));
  opt("enable_adasum", std::to_string(p.enable_adasum));
  opt("portable_training_graph", std::to_string(p.portable_training_graph));
  compare_with_rank0(distributed::Comm::world(), d, "the start-up comparison of the ranks", "TrainingSession");
}

void TrainingSession::Impl::check_weights_agree() {
  std::vector<std::pair<std::string, std::string>> d;
  for (size_t i = 0; i < trained.size(); ++i) d.emplace_back("weight '" + trained[i] + "'", hex64(hash_tensor(*weights[i])));
  compare_with_rank0(distributed::Comm::world(), d, "the weight check",
                     ("after update " + std::to_string(step) + ", the weights diverged").c_str());
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
  if (trained.empty()) throw_error<InvalidArgument>("TrainingParameters: no weight to train");
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
  sc.clip_grad_norm = params.enable_grad_norm_clip;
  sc.max_grad_norm = params.max_grad_norm;
  sc.portable = params.portable_training_graph;
  sc.lr_input = params.lr_params_feed_name;
  ir::Model grad_model;
  // bf16: the training graph differentiates a copy whose products run in bfloat16; the session's
  // model (weights, export, eval) stays float32.
  // The forward graph differentiated: GELUs fused (default mode), products in low precision.
  ir::Model autocast = params.portable_training_graph ? model : train::fuse_gelu(model);
  const std::string precision = effective_precision(params);
  std::string loss_name = params.loss_output_name;
  if (precision == "bf16") autocast = train::autocast(autocast, DType::kBFloat16);
  if (precision == "fp16") {
    // fp16: the products in float16, and the loss multiplied by the loss scale before it is
    // differentiated (the gradients of the scaled loss are unscaled and checked before the update).
    fp16 = true;
    autocast = train::autocast(autocast, DType::kFloat16);
    std::tie(sc.loss_scale_input, loss_name) = train::add_loss_scale(autocast, params.loss_output_name, "loss_scale");
    scale = params.loss_scale > 0 ? double(params.loss_scale) : kInitialScale;
  }
  tg = train::build_training_graph(autocast, loss_name, trained, running,
                                   params.immutable_weights, sc,
                                   params.model_with_gradient_graph_path.empty() ? nullptr : &grad_model);
  optimizer_name = params.training_optimizer_name;
  // The training model shares the forward model's weight storage.
  for (auto& [n, t] : tg.model.graph->initializers)
    if (Tensor* w = initializer(n)) t = *w;
  if (!params.model_with_gradient_graph_path.empty()) ir::save_model(grad_model, params.model_with_gradient_graph_path);
  if (!params.model_with_training_graph_path.empty()) ir::save_model(tg.model, params.model_with_training_graph_path);

  ExecOptions eo = exec_options_of(options);
  eo.deterministic = options.deterministic || params.deterministic_compute;
  eo.training = true;
  eo.torch_running_var = true;
  std::unordered_set<std::string> mutable_inits;
  for (const auto& [n, t] : tg.model.graph->initializers)
    if (dtype_is_float(t.dtype())) mutable_inits.insert(n);
  train_exec = std::make_unique<runtime::GraphExecutor>(tg.model.graph, tg.model.opsets, eo,
                                                        std::vector<std::string>{}, mutable_inits);
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
  if (has_schedule) schedule = make_schedule(params);
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
    rate = float(schedule.value(step + 1));
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
  step_count.tensor.data<int64_t>()[0] = step + 1;
  reset.tensor.data<bool>()[0] = micro == 0;
  ins[lr_slot] = &lr;
  ins[step_slot] = &step_count;
  if (!tg.reset_input.empty()) ins[reset_slot] = &reset;
  if (!tg.contribution_input.empty()) ins[contribution_slot] = &contribution;
  if (fp16) {
    // The loss scale: fed, else the session's own (dynamic scaler or TrainingParameters.loss_scale).
    float ls = float(scale);
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
  const bool update = micro + 1 >= params.gradient_accumulation_steps;
  if (fp16 && !update && std::find(outs.begin(), outs.end(), tg.all_finite_output) != outs.end())
    throw_error<InvalidArgument>("output '", tg.all_finite_output, "' is computed by update steps only; this run (",
                                 micro + 1, " of ", params.gradient_accumulation_steps, ") accumulates gradients");
  profiled(false, [&] { train_exec->run(ins, update ? req.update : req.accumulate, results); });
  if (update) {
    micro = 0;
    bool applied = true;
    if (fp16) {
      const auto at = req.finite_appended ? results.size() - 1
                                          : size_t(std::find(outs.begin(), outs.end(), tg.all_finite_output) - outs.begin());
      applied = *results[at].tensor.data<bool>();
      if (req.finite_appended) results.pop_back();
      // onnxruntime's DynamicLossScaler rule, applied whether or not this step's scale was fed.
      if (!applied) {
        ++skipped;
        scale = params.loss_scale > 0 ? scale : std::max(kMinScale, scale / 2);
        stable_steps = 0;
      } else if (params.loss_scale == 0 && ++stable_steps >= kScaleWindow) {
        scale = std::min(kMaxScale, scale * 2);
        stable_steps = 0;
      }
    }
    if (applied) {  // a skipped update leaves the step count (Adam's bias correction, the schedule)
      ++step;
      if (check_every > 0 && step % check_every == 0) check_weights_agree();
    }
  } else {
    ++micro;
  }
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

std::vector<Value> TrainingSession::run(const std::vector<std::string>& output_names,
                                        const std::vector<std::pair<std::string, Value>>& feeds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<Value> results;
  impl_->run_train(output_names, feeds, results);
  return results;
}

void TrainingSession::run(const std::vector<std::string>& output_names,
                          const std::vector<std::pair<std::string, Value>>& feeds, std::vector<Value>& outputs) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->run_train(output_names, feeds, outputs);
}

std::vector<Value> TrainingSession::eval(const std::vector<std::string>& output_names,
                                         const std::vector<std::pair<std::string, Value>>& feeds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
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
  return impl_->fp16 ? impl_->scale : 0.0;
}
int64_t TrainingSession::skipped_updates() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->skipped;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::pair<std::string, Tensor>> r;
  for (const auto& [n, t] : impl_->model.graph->initializers) r.emplace_back(n, t.clone());
  return r;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_model_state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::pair<std::string, Tensor>> r;
  for (size_t i = 0; i < impl_->trained.size(); ++i) r.emplace_back(impl_->trained[i], impl_->weights[i]->clone());
  return r;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_optimizer_state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::pair<std::string, Tensor>> r;
  for (const auto& u : impl_->optimizer_states()) r.emplace_back(u->key, impl_->state(u->state)->clone());
  r.emplace_back("step", Tensor::scalar<int64_t>(impl_->step));
  return r;
}

void TrainingSession::load_state(const std::vector<std::pair<std::string, Tensor>>& state, bool strict) {
  std::lock_guard<std::mutex> lock(impl_->mu);
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

void TrainingSession::load_optimizer_state(const std::vector<std::pair<std::string, Tensor>>& state, bool strict) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::map<std::string, Tensor*> known;
  std::map<std::string, std::string> state_of;
  for (const auto* u : impl_->optimizer_states()) known[u->key] = impl_->state(u->state), state_of[u->key] = u->state;
  std::set<std::string> given;
  std::map<std::string, Tensor> relaid;  // whole tensors re-laid out (ZeRO parts, merged parts)
  const Tensor* step = nullptr;
  for (const auto& [n, t] : state) {
    if (n == "step") {
      if (t.dtype() != DType::kInt64 || t.numel() != 1 || t.data<int64_t>()[0] < 0)
        throw_error<InvalidArgument>("load_optimizer_state: 'step' must be one non-negative int64, got ", t.describe());
      step = &t;
    } else {
      auto it = known.find(n);
      if (it == known.end()) throw_error<InvalidArgument>("load_optimizer_state: '", n, "' is not optimizer state of this session");
      if (it->second->dtype() != t.dtype() || it->second->shape() != t.shape()) {
        std::optional<Tensor> r = impl_->relayout_state(state_of.at(n), t);
        if (!r)
          throw_error<InvalidArgument>("load_optimizer_state: '", n, "' is ", t.describe(), ", the session's is ",
                                       it->second->describe());
        relaid[n] = std::move(*r);
      }
    }
    given.insert(n);
  }
  if (strict) {
    for (const auto& [n, t] : known)
      if (!given.count(n)) throw_error<InvalidArgument>("load_optimizer_state(strict=True): '", n, "' is missing");
    if (!step) throw_error<InvalidArgument>("load_optimizer_state(strict=True): 'step' is missing");
  }
  for (const auto& [n, t] : state)
    if (n != "step") known.at(n)->copy_from(relaid.count(n) ? relaid.at(n) : t);
  if (step) impl_->step = step->data<int64_t>()[0];
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
  return impl_->step;
}

double TrainingSession::scheduled_learning_rate(int64_t step) const {
  if (!impl_->has_schedule)
    throw_error<InvalidArgument>("scheduled_learning_rate: TrainingParameters.lr_schedule is empty");
  return impl_->schedule.value(step);
}

const TrainingParameters& TrainingSession::parameters() const { return impl_->params; }

std::string TrainingSession::export_model(const std::vector<std::string>& outputs) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ir::Model m = train::inference_graph(impl_->model, outputs, true, impl_->params.loss_output_name);
  return ir::serialize_model(m);
}

void TrainingSession::export_model_to(const std::string& path, const std::vector<std::string>& outputs) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  // Written beside its weights (external data) when over protobuf's 2 GiB limit.
  ir::save_model(train::inference_graph(impl_->model, outputs, true, impl_->params.loss_output_name), path);
}

namespace {

// A partitioned checkpoint: each rank's shard beside the manifest at `path`, named after the
// save's generation `gen` (chosen by rank 0 for every save), so that a save never overwrites the
// shards the previous manifest names: until the new manifest replaces it, the previous checkpoint
// stays whole.
std::string shard_path(const std::string& path, const std::string& gen, int64_t rank, int64_t world) {
  return path + "." + gen + ".rank" + std::to_string(rank) + "-of-" + std::to_string(world);
}

// Removes the shards of earlier saves of `path` (files "<name>.<gen>.rank<r>-of-<n>" beside it)
// other than those in `keep`; errors are ignored (a stale shard is harmless, only disk space).
void remove_stale_shards(const std::string& path, const std::set<std::string>& keep) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".";
  std::error_code ec;
  fs::directory_iterator it(p.parent_path().empty() ? fs::path(".") : p.parent_path(), ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 || keep.count(name)) continue;
    const std::string rest = name.substr(prefix.size());  // "<gen>.rank<r>-of-<n>"
    const size_t dot = rest.find(".rank"), of = rest.rfind("-of-");
    if (dot == std::string::npos || dot == 0 || of == std::string::npos || of < dot) continue;
    auto digits = [](const std::string& x) {
      return !x.empty() && std::all_of(x.begin(), x.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!digits(rest.substr(dot + 5, of - dot - 5)) || !digits(rest.substr(of + 4))) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
  }
}

// Runs `write` on the ranks that write, then tells every rank whether all succeeded: a rank whose
// write failed rethrows its error, the others throw IOError naming it (nobody waits for a rank
// that gave up).
void collective_write(distributed::Comm& comm, bool writes, const std::function<void()>& write, const char* what) {
  std::exception_ptr err;
  if (writes) {
    try {
      write();
    } catch (...) {
      err = std::current_exception();
    }
  }
  std::vector<double> failed(size_t(comm.size()), 0.0);
  failed[size_t(comm.rank())] = err ? 1.0 : 0.0;
  comm.allreduce_sum(failed.data(), int64_t(failed.size()), DType::kFloat64, what);
  if (err) std::rethrow_exception(err);
  for (size_t r = 0; r < failed.size(); ++r)
    if (failed[r] > 0) throw_error<IOError>(what, ": rank ", r, " could not write its part (see its error)");
}

}  // namespace

void TrainingSession::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Impl& s = *impl_;
  if (s.world > 1) {
    // Identical states (stage 0, no accumulation in progress that only this rank holds): rank 0
    // writes one checkpoint, which resumes on any number of ranks. Otherwise every rank writes its
    // shard, and once every shard is durable rank 0 writes the manifest at `path`.
    distributed::Comm& comm = distributed::Comm::world();
    const bool sharded = s.params.deepspeed_zero_stage == 1 ||
                         (s.params.allreduce_post_accumulation && s.params.gradient_accumulation_steps > 1 && s.micro > 0);
    if (!sharded) {
      collective_write(comm, s.rank == 0, [&] { train::write_checkpoint(path, s.checkpoint(metadata)); },
                       "the checkpoint");
      if (s.rank == 0) remove_stale_shards(path, {});
      return;
    }
    // The generation: a random number from rank 0, the same on every rank.
    double nonce = 0;
    if (s.rank == 0) nonce = double(std::random_device{}() & 0x7fffffffu);
    comm.allreduce_sum(&nonce, 1, DType::kFloat64, "the checkpoint's generation");
    char gen[16];
    std::snprintf(gen, sizeof gen, "g%08x", unsigned(nonce));
    collective_write(comm, true,
                     [&] { train::write_checkpoint(shard_path(path, gen, s.rank, s.world), s.checkpoint(metadata)); },
                     "the checkpoint's shards");
    collective_write(comm, s.rank == 0, [&] {
      train::Checkpoint m;
      m.fingerprint = train::model_fingerprint(s.model, s.trained);
      m.counters["world_size"] = s.world;
      m.counters["zero_stage"] = s.params.deepspeed_zero_stage;
      m.counters["optimizer_step"] = s.step;
      m.counters["micro_step"] = s.micro;
      m.text["sharded"] = "1";
      for (const auto& [k, v] : metadata) m.text["user/" + k] = v;
      m.text["optimizer"] = s.optimizer_name;
      std::set<std::string> shards;
      for (int r = 0; r < s.world; ++r) {
        const std::string name = std::filesystem::path(shard_path(path, gen, r, s.world)).filename().string();
        m.text["shard/" + std::to_string(r)] = name;
        shards.insert(name);
      }
      train::write_checkpoint(path, m);
      // The new manifest is durable: the shards of earlier saves are no longer named by any.
      remove_stale_shards(path, shards);
    }, "the checkpoint's manifest");
    return;
  }
  train::write_checkpoint(path, s.checkpoint(metadata));
}

train::Checkpoint TrainingSession::Impl::checkpoint(const std::map<std::string, std::string>& metadata) const {
  const TrainingSession::Impl* impl_ = this;
  train::Checkpoint c;
  for (const auto& [k, v] : metadata) c.text["user/" + k] = v;
  c.fingerprint = train::model_fingerprint(impl_->model, impl_->trained);
  for (const auto& [n, t] : impl_->model.graph->initializers)
    if (dtype_is_float(t.dtype())) c.tensors.emplace_back("model/" + n, t);
  for (const auto* u : impl_->optimizer_states())
    c.tensors.emplace_back("optimizer/" + u->key, *impl_->tg.model.graph->initializer(u->state));
  for (const auto& u : impl_->tg.updates)
    if (u.kind == train::StateUpdate::Kind::kAccumulator)
      c.tensors.emplace_back("accumulator/" + u.weight, *impl_->tg.model.graph->initializer(u.state));
  c.counters["optimizer_step"] = impl_->step;
  c.counters["micro_step"] = impl_->micro;
  c.counters["train_runs"] = int64_t(impl_->train_exec->run_counter());
  c.text["optimizer"] = impl_->optimizer_name;
  if (impl_->fp16) {  // the dynamic loss scaler: a resumed run scales as the uninterrupted one
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", impl_->scale);
    c.text["amp/loss_scale"] = buf;
    c.counters["amp/stable_steps"] = impl_->stable_steps;
    c.counters["amp/skipped_updates"] = impl_->skipped;
  }
  return c;
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

std::optional<Tensor> TrainingSession::Impl::relayout_state(const std::string& state_name, const Tensor& src) const {
  const train::StateUpdate* u = nullptr;
  for (const auto& x : tg.updates)
    if (x.state == state_name && x.kind == train::StateUpdate::Kind::kOptimizerState) u = &x;
  const Tensor* dst = tg.model.graph->initializer(state_name);
  const Tensor* weight = u ? model.graph->initializer(u->weight) : nullptr;
  if (!weight || !dst || src.dtype() != dst->dtype() || src.numel() != weight->numel()) return std::nullopt;
  const auto [lo, hi] = world > 1 && params.deepspeed_zero_stage == 1 ? zero_part(u->weight)
                                                                        : std::pair<int64_t, int64_t>(0, weight->numel());
  if (hi - lo != dst->numel()) return std::nullopt;
  const size_t es = dtype_size(src.dtype());
  Tensor t = Tensor::zeros(dst->dtype(), dst->shape());
  std::memcpy(t.raw_data(), static_cast<const char*>(src.raw_data()) + size_t(lo) * es, size_t(hi - lo) * es);
  return t;
}

std::pair<int64_t, int64_t> TrainingSession::Impl::zero_part(const std::string& w) const {
  int64_t total = 0, offset = -1, numel = 0;
  for (size_t i = 0; i < trained.size(); ++i) {
    if (trained[i] == w) offset = total, numel = weights[i]->numel();
    total += weights[i]->numel();
  }
  const int64_t block = (total + world - 1) / world;
  const int64_t lo = std::min(total, block * rank), hi = std::min(total, block * (rank + 1));
  return {std::clamp(lo - offset, int64_t(0), numel), std::clamp(hi - offset, int64_t(0), numel)};
}

train::Checkpoint TrainingSession::Impl::read_sharded(const std::string& path, const train::Checkpoint& m) const {
  const int64_t n = m.counters.count("world_size") ? m.counters.at("world_size") : 0;
  if (n < 1 || n > 1 << 20) throw_error<InvalidArgument>("checkpoint '", path, "': damaged manifest (world_size ", n, ")");
  const auto dir = std::filesystem::path(path).parent_path();
  auto shard = [&](int64_t r) {
    auto it = m.text.find("shard/" + std::to_string(r));
    if (it == m.text.end() || it->second.find('/') != std::string::npos)
      throw_error<InvalidArgument>("checkpoint '", path, "': damaged manifest (shard ", r, ")");
    train::Checkpoint c = train::read_checkpoint((dir / it->second).string());
    if (c.fingerprint != m.fingerprint || c.counters["optimizer_step"] != m.counters.at("optimizer_step"))
      throw_error<InvalidArgument>("checkpoint '", path, "': shard ", r, " ('", it->second,
                                   "') belongs to another checkpoint");
    return c;
  };
  const bool zero = world > 1 && params.deepspeed_zero_stage == 1;
  if (n == world && (zero || m.counters.at("micro_step") > 0)) return shard(rank);  // the same layout
  // Merge: weights from shard 0, each optimizer state concatenated over the shards in rank order.
  train::Checkpoint merged = shard(0);
  std::map<std::string, std::vector<Tensor>> parts;
  std::vector<std::string> order;
  auto take = [&](const train::Checkpoint& c) {
    for (const auto& [k, t] : c.tensors) {
      if (k.rfind("accumulator/", 0) == 0)
        throw_error<InvalidArgument>("checkpoint '", path, "' was saved inside a gradient accumulation over ", n,
                                     " ranks (allreduce_post_accumulation): resume it on ", n, " ranks");
      if (k.rfind("optimizer/", 0) != 0) continue;
      if (!parts.count(k)) order.push_back(k);
      parts[k].push_back(t);
    }
  };
  take(merged);
  for (int64_t r = 1; r < n; ++r) take(shard(r));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [k, t] : merged.tensors)
    if (k.rfind("optimizer/", 0) != 0) tensors.emplace_back(k, t);
  for (const auto& k : order) {
    const auto& ps = parts[k];
    int64_t total = 0;
    for (const auto& p : ps) total += p.numel();
    Tensor all = Tensor::zeros(ps[0].dtype(), {total});
    size_t off = 0;
    for (const auto& p : ps) {
      if (p.dtype() != all.dtype()) throw_error<InvalidArgument>("checkpoint '", path, "': shards disagree on '", k, "'");
      std::memcpy(static_cast<char*>(all.raw_data()) + off, p.raw_data(), p.nbytes());
      off += p.nbytes();
    }
    tensors.emplace_back(k, all);
  }
  merged.tensors = std::move(tensors);
  return merged;
}

std::map<std::string, std::string> TrainingSession::load_checkpoint(const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  train::Checkpoint c = train::read_checkpoint(path);
  if (c.text.count("sharded")) c = s.read_sharded(path, c);
  const std::string fp = train::model_fingerprint(s.model, s.trained);
  if (c.fingerprint != fp)
    throw_error<InvalidArgument>("checkpoint '", path, "' was written for a different model or set of trained weights");
  auto opt = c.text.find("optimizer");
  if (opt == c.text.end() || opt->second != s.optimizer_name)
    throw_error<InvalidArgument>("checkpoint '", path, "' holds the state of optimizer '",
                                 opt == c.text.end() ? "?" : opt->second, "', this session uses '", s.optimizer_name,
                                 "'");
  const int64_t step = c.counters["optimizer_step"], micro = c.counters["micro_step"];
  // Everything is validated before anything is overwritten.
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  std::deque<Tensor> owned;  // re-laid-out optimizer state (stable addresses)
  std::map<std::string, const Tensor*> opt_state, accum;
  for (const auto& [n, t] : c.tensors) {
    if (n.rfind("model/", 0) == 0) {
      const std::string w = n.substr(6);
      Tensor* dst = s.initializer(w);
      if (!dst || dst->shape() != t.shape() || dst->dtype() != t.dtype())
        throw_error<InvalidArgument>("checkpoint '", path, "': tensor '", w, "' does not match the model");
      copies.emplace_back(dst, &t);
    } else if (n.rfind("optimizer/", 0) == 0) {
      opt_state[n.substr(10)] = &t;
    } else if (n.rfind("accumulator/", 0) == 0) {
      accum[n.substr(12)] = &t;
    }
  }
  auto restore = [&](const std::map<std::string, const Tensor*>& from, const std::string& key, const std::string& state,
                     const char* what) {
    auto it = from.find(key);
    Tensor* dst = s.state(state);
    if (it == from.end()) throw_error<InvalidArgument>(what, " '", key, "' is missing");
    const Tensor& src = *it->second;
    if (src.shape() == dst->shape() && src.dtype() == dst->dtype()) {
      copies.emplace_back(dst, &src);
      return;
    }
    if (std::optional<Tensor> t = s.relayout_state(state, src)) {
      owned.push_back(std::move(*t));
      copies.emplace_back(dst, &owned.back());
      return;
    }
    throw_error<InvalidArgument>(what, " '", key, "' is ", src.describe(), ", expected ", dst->describe());
  };
  // Format 1 kept optimizer state at zero before the first update (its optimizer applied Adagrad's
  // initial_accumulator_value then); the training graph's state starts from its initial value.
  if (c.version >= 2 || step > 0)
    for (const auto* u : s.optimizer_states()) restore(opt_state, u->key, u->state, "optimizer state");
  if (micro > 0)
    for (const auto& u : s.tg.updates)
      if (u.kind == train::StateUpdate::Kind::kAccumulator) restore(accum, u.weight, u.state, "accumulator");
  if (micro < 0 || micro >= s.params.gradient_accumulation_steps || step < 0)
    throw_error<InvalidArgument>("checkpoint '", path, "' holds step ", step, " and micro-step ", micro,
                                 ", impossible with gradient_accumulation_steps ", s.params.gradient_accumulation_steps);
  double scale = s.scale;
  if (s.fp16 && c.text.count("amp/loss_scale")) {
    char* end = nullptr;
    const std::string& v = c.text.at("amp/loss_scale");
    scale = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(scale > 0) || !std::isfinite(scale) || c.counters["amp/stable_steps"] < 0)
      throw_error<InvalidArgument>("checkpoint '", path, "': damaged loss scaler state (loss scale '", v, "')");
  }
  for (auto& [dst, src] : copies) dst->copy_from(*src);
  s.step = step;
  s.micro = micro;
  if (s.fp16 && c.text.count("amp/loss_scale")) {
    s.scale = scale;
    s.stable_steps = c.counters["amp/stable_steps"];
    s.skipped = c.counters["amp/skipped_updates"];
  }
  s.train_exec->set_run_counter(uint64_t(c.counters["train_runs"]));
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : c.text)
    if (k.rfind("user/", 0) == 0) meta[k.substr(5)] = v;
  return meta;
}

}  // namespace onnxtrain
