#include "runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/parallel.h"
#include "runtime/run_hooks.h"
#include "runtime/run_util.h"
#include "runtime/shared_arena.h"

namespace onnxtrain::runtime {

void rethrow_with(const Error& e, const std::string& prefix) {
  std::string msg = prefix + e.what();
  switch (e.code()) {
    case ErrorCode::kInvalidArgument: throw InvalidArgument(msg);
    case ErrorCode::kInvalidModel: throw InvalidModel(msg);
    case ErrorCode::kInvalidGraph: throw InvalidGraph(msg);
    case ErrorCode::kNotImplemented: throw NotImplemented(msg);
    case ErrorCode::kIOError: throw IOError(msg);
    case ErrorCode::kNoSuchFile: throw NoSuchFile(msg);
    case ErrorCode::kTerminated: throw Terminated(msg);
    default: throw RuntimeError(msg);
  }
}

namespace {

// Drops every per-run reference of a frame (fed inputs, result buffers, dynamic values, views of
// per-run memory) so that nothing outlives its run and the frame can serve the next one.
void reset_frame(const Plan& plan, Frame& f) {
  auto& vals = f.values;
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    const Slot& s = plan.slots[i];
    Value& v = vals[i];
    switch (s.state) {
      case Slot::State::kInput:
        if (s.bound) break;
        if (v.kind == Value::Kind::kTensor) v.tensor.unbind();
        else v.sequence.clear();
        break;
      case Slot::State::kOutput:
        if (v.kind == Value::Kind::kTensor) v.tensor.unbind();
        else v = s.value;
        break;
      case Slot::State::kDynamic: v = Value(); break;
      default: break;
    }
  }
  for (const Step& st : plan.steps)
    for (const auto& [o, i] : st.rebind) vals[size_t(o)].tensor.unbind();
}

// Hands the profiler the event of a step that just ran.
void record_node(RunHooks& hooks, const Step& st, const std::vector<Value>& vals, const std::string& provider,
                 int64_t t0) {
  NodeEvent ev;
  ev.end_ns = now_ns();
  ev.start_ns = t0;
  ev.node = st.node;
  ev.provider = provider;
  auto describe = [&](const std::vector<int>& ids, std::vector<std::pair<DType, Shape>>& out) {
    for (int sid : ids) {
      const Value* v = sid < 0 ? nullptr : &vals[size_t(sid)];
      if (v && v->kind == Value::Kind::kTensor) out.emplace_back(v->tensor.dtype(), v->tensor.shape());
      else out.emplace_back(DType::kUndefined, Shape{});
    }
  };
  describe(st.in, ev.inputs);
  describe(st.out, ev.outputs);
  hooks.on_node(std::move(ev));
}

// Binds fed inputs into the frame (tensors without copying).
void bind_values(const std::vector<int>& slots, const std::vector<const Value*>& values, Frame& f) {
  for (size_t i = 0; i < values.size(); ++i) {
    const int sid = slots[i];
    if (sid < 0 || !values[i]) continue;
    Value& v = f.values[size_t(sid)];
    if (values[i]->kind == Value::Kind::kTensor && v.kind == Value::Kind::kTensor) v.tensor.rebind(values[i]->tensor);
    else v = *values[i];
  }
}

PrepareContext::In value_info(const Value* v) {
  PrepareContext::In in;
  if (!v) return in;
  in.kind = v->kind;
  if (v->kind == Value::Kind::kTensor) {
    in.dtype = v->tensor.dtype();
    in.shape = v->tensor.shape();
  } else {
    in.dtype = v->elem;
    in.key = v->key;
  }
  in.value = v;
  return in;
}

// Every tensor a step reads is where its kernel reads it: its provider's device, or the host for the
// inputs the kernel declares host inputs (copy steps excepted: they move between devices). A
// mismatch is a planner bug that would otherwise make a device kernel read host memory (or the
// reverse); the check costs a few comparisons per step.
void check_input_devices(const Step& st, Value* const* in, const Device& dev) {
  if (st.copy) return;
  for (size_t j = 0; j < st.in.size(); ++j) {
    const Value* v = in[j];
    if (!v || v->kind != Value::Kind::kTensor || v->tensor.numel() == 0) continue;
    const bool host = std::find(st.host_inputs.begin(), st.host_inputs.end(), j) != st.host_inputs.end();
    if (v->tensor.device() != (host ? Device::cpu() : dev))
      throw_error<RuntimeError>("internal error: ", st.node->describe(), " reads input ", j, " on ",
                                v->tensor.device().name(), ", expected on ", host ? "cpu" : dev.name());
  }
}

// A step whose shapes are known only now: prepared, given fresh outputs and scratch, run.
void run_dynamic(const Plan& plan, const Step& st, Frame& f, const ExecOptions& options, int threads,
                 const ProviderSet& ps) {
  ExecutionProvider& provider = *ps.providers[st.provider];
  Value* const* p = f.ptrs.data() + st.ptr_offset;
  std::vector<Value*> in_p(p, p + st.in.size());
  Value* const* out_p = p + st.in.size();
  Value* const* imp_p = out_p + st.out.size();
  std::vector<PrepareContext::In> ins, imps;
  for (const Value* v : in_p) ins.push_back(value_info(v));
  for (size_t k = 0; k < st.imp.size(); ++k) imps.push_back(value_info(imp_p[k]));
  PrepareContext ctx(*st.node, st.opset, options, std::move(ins), st.out.size(), std::move(imps));
  st.kernel->prepare(ctx);
  for (size_t k = 0; k < st.out.size(); ++k) {
    if (st.out[k] < 0) continue;
    Value& v = *out_p[k];
    v = Value();
    const auto& o = ctx.outputs()[k];
    if (!o.set) throw_error<RuntimeError>("internal error: the kernel did not prepare output ", k);
    if (o.kind != Value::Kind::kTensor || o.dynamic) continue;
    if (o.inplace_of >= 0) {
      // In place: the output starts as a copy of the input, which the kernel reads through it.
      const Tensor& src = in_p[size_t(o.inplace_of)]->tensor;
      if (src.device().host_accessible()) {
        v = Value::of(src.clone());
      } else {
        v = Value::of(Tensor::empty(src.dtype(), src.shape(), provider.allocator()));
        provider.copy(src, v.tensor, *ps.contexts[st.provider]);
      }
      in_p[size_t(o.inplace_of)] = &v;
    } else if (o.alias_of >= 0 && !plan.slots[size_t(st.out[k])].graph_output &&
               in_p[size_t(o.alias_of)]->tensor.device() == provider.device()) {
      v = Value::of(in_p[size_t(o.alias_of)]->tensor.reshaped(o.shape));
    } else {
      // On the device the plan gave the value: the provider's, or the host for a copy to the host
      // (MemcpyToHost runs on the device's provider) and for a host-accessible device's results.
      const Device& dev = plan.slots[size_t(st.out[k])].device;
      if (dev.is_host() || (plan.slots[size_t(st.out[k])].graph_output && dev.host_accessible()))
        v = Value::of(Tensor::empty(o.dtype, o.shape));
      else
        v = Value::of(Tensor::empty(o.dtype, o.shape, ps.providers[ps.of_device(dev)]->allocator()));
    }
  }
  void* ws = nullptr;
  Tensor device_ws;  // a device provider's scratch: its own memory, for this run of the step
  if (ctx.workspace() > 0 && !provider.device().host_accessible()) {
    device_ws = Tensor::empty(DType::kUInt8, {int64_t(ctx.workspace())}, provider.allocator());
    ws = device_ws.raw_data();
  } else if (ctx.workspace() > 0) {
    if (f.scratch.size() < ctx.workspace() + kArenaAlign) f.scratch.resize(ctx.workspace() + kArenaAlign);
    ws = reinterpret_cast<void*>(arena_align(reinterpret_cast<uintptr_t>(f.scratch.data())));
  }
  check_input_devices(st, in_p.data(), provider.device());
  RunContext rc(*st.node, in_p.data(), in_p.size(), out_p, st.out.size(), imp_p, st.imp.size(), ws, ctx.workspace(),
                options, threads, ps.contexts[st.provider].get());
  rc.set_run_index(f.run_index);
  st.kernel->run(rc);
  for (size_t k = 0; k < st.out.size(); ++k)
    if (st.out[k] >= 0 && out_p[k]->kind == Value::Kind::kNone && !ctx.outputs()[k].dynamic)
      throw_error<RuntimeError>("internal error: no value produced for output ", k);
}

// Control-flow kernels run their subgraphs in nested executors unless told otherwise.
ExecOptions with_subgraphs(ExecOptions o) {
  if (!o.subgraphs) o.subgraphs = executor_subgraphs();
  return o;
}

// Returns a frame to its plan's pool, or frees it when the pool is full (a burst of partial runs
// in flight does not pin its memory for the plan's life).
void recycle(Plan& plan, std::unique_ptr<Frame> f) {
  reset_frame(plan, *f);
  std::lock_guard<std::mutex> lock(plan.pool_mu);
  if (plan.pool.size() < Plan::kMaxPooledFrames) plan.pool.push_back(std::move(f));
}

std::atomic<uint64_t> g_next_executor_id{1};

}  // namespace

// ------------------------------------------------------------------ PartialRun
PartialRun::PartialRun() = default;
PartialRun::~PartialRun() { release(); }
PartialRun::PartialRun(PartialRun&& o) noexcept { *this = std::move(o); }
PartialRun& PartialRun::operator=(PartialRun&& o) noexcept {
  if (this != &o) {
    release();
    owner_ = o.owner_;
    request_ = o.request_;
    plan_ = std::move(o.plan_);
    frame_ = std::move(o.frame_);
    phase_ = o.phase_;
    o.phase_ = Phase::kFresh;
    o.owner_ = 0;
  }
  return *this;
}
void PartialRun::release() {
  if (plan_ && frame_) recycle(*plan_, std::move(frame_));
  frame_.reset();
  plan_.reset();
}

// ------------------------------------------------------------------ GraphExecutor
size_t GraphExecutor::KeyHash::operator()(const std::vector<int64_t>& k) const noexcept {
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : k) {
    h ^= uint64_t(v);
    h *= 1099511628211ull;
  }
  return size_t(h);
}

GraphExecutor::GraphExecutor(std::shared_ptr<const ir::Graph> graph, OpsetMap opsets, ExecOptions options,
                             std::vector<std::string> outer_names,
                             std::unordered_set<std::string> mutable_initializers)
    : graph_(std::move(graph)),
      opsets_(std::move(opsets)),
      options_(with_subgraphs(std::move(options))),
      index_(*graph_, std::move(outer_names), std::move(mutable_initializers)),
      providers_(options_),
      id_(g_next_executor_id.fetch_add(1)) {
  for (size_t i = 0; i < index_.input_names.size(); ++i)
    input_default_.push_back(i < graph_->inputs.size() && graph_->initializer(index_.input_names[i]) != nullptr);
}

GraphExecutor::~GraphExecutor() = default;

size_t GraphExecutor::shared_arena_bytes() const {
  size_t n = 0;
  for (const auto& [dev, block] : arenas_) n += block.bytes;
  return n;
}

size_t GraphExecutor::pooled_frames() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& [key, plan] : plans_) {
    std::lock_guard<std::mutex> pl(plan->pool_mu);
    n += plan->pool.size();
  }
  return n;
}

void GraphExecutor::drop_main_frames() {
  for (auto& [key, plan] : plans_) plan->main.reset();
  if (last_plan_) last_plan_->main.reset();
}

Frame& GraphExecutor::main_frame(Plan& plan, ArenaSet& arenas, const SharedArena* shared) {
  const size_t max_mem = shared ? shared->max_mem : 0;
  bool fits = true;
  size_t grown = 0;  // the arenas' bytes once grown for this plan (at least)
  for (const auto& [dev, bytes] : plan.arenas) {
    auto it = arenas.find(dev);
    if (bytes > 0 && (it == arenas.end() || it->second.bytes < arena_align(bytes))) fits = false;
    grown += std::max(arena_align(bytes), it == arenas.end() ? size_t(0) : it->second.bytes);
  }
  for (const auto& [dev, block] : arenas)
    if (!plan.arenas.count(dev)) grown += block.bytes;
  if (!fits && max_mem > 0 && grown > max_mem)
    throw_error<RuntimeError>("the shared allocator's max_mem of ", max_mem, " bytes (OrtArenaCfg) is too small: this "
                              "run needs its arena to grow to ", grown, " bytes");
  if (!fits) {
    // Every main frame views the arenas about to grow: they go first, then the old blocks, so the
    // old and the new block are never held together.
    drop_main_frames();
    for (const auto& [dev, bytes] : plan.arenas) {
      ArenaBlock& block = arenas[dev];
      const size_t need = arena_align(bytes);
      if (block.bytes >= need) continue;
      // The shared block grows as onnxruntime's arena is configured (extend strategy, initial chunk).
      const size_t size = shared ? shared_arena_growth(*shared, need, block.bytes) : bytes;
      block = ArenaBlock{};
      block.memory = allocate_arena(providers_, dev, size);
      block.bytes = arena_align(size);
    }
  }
  if (!plan.main) plan.main = make_frame(plan, providers_, &arenas);
  return *plan.main;
}

PlanStats GraphExecutor::last_stats() const { return last_plan_ ? last_plan_->stats : PlanStats{}; }

std::vector<std::string> GraphExecutor::last_assignment() const {
  std::vector<std::string> r;
  for (const auto& [node, provider] : last_step_providers()) r.push_back(node->describe() + " on " + provider);
  return r;
}

std::vector<std::pair<const ir::Node*, std::string>> GraphExecutor::last_step_providers() const {
  std::vector<std::pair<const ir::Node*, std::string>> r;
  if (last_plan_)
    for (const Step& st : last_plan_->steps) r.emplace_back(st.node, providers_.providers[st.provider]->name());
  return r;
}

std::vector<std::pair<const ir::Node*, std::string>> GraphExecutor::node_providers() const {
  const ir::Graph& g = *index_.graph;
  const std::vector<int> where = planner::assign_providers(index_, std::vector<bool>(g.nodes.size(), true), opsets_, providers_);
  std::vector<std::pair<const ir::Node*, std::string>> r;
  for (size_t i = 0; i < g.nodes.size(); ++i) r.emplace_back(&g.nodes[i], providers_.providers[size_t(where[i])]->name());
  return r;
}

std::vector<const ir::Node*> GraphExecutor::last_step_nodes() const {
  std::vector<const ir::Node*> r;
  if (last_plan_)
    for (const Step& st : last_plan_->steps) r.push_back(st.node);
  return r;
}

namespace {
class ExecutorSubgraph final : public SubgraphRunner {
 public:
  ExecutorSubgraph(std::shared_ptr<const ir::Graph> g, const OpsetMap& opsets, const ExecOptions& options,
                   std::vector<std::string> outer)
      : ex_(std::move(g), opsets, options, std::move(outer)) {}
  std::vector<Value> run(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs) override {
    return ex_.run(inputs, outputs);
  }

 private:
  GraphExecutor ex_;
};
}  // namespace

SubgraphFactory executor_subgraphs() {
  return [](std::shared_ptr<const ir::Graph> g, const OpsetMap& opsets, const ExecOptions& options,
            std::vector<std::string> outer) -> std::unique_ptr<SubgraphRunner> {
    return std::make_unique<ExecutorSubgraph>(std::move(g), opsets, options, std::move(outer));
  };
}

size_t GraphExecutor::add_request(PlanRequest request) {
  auto check = [&](const std::string& n, const char* what) {
    if (!graph_->is_input(n) && !graph_->initializer(n) && !index_.producer.count(n))
      throw_error<InvalidArgument>(what, " '", n, "' is not a value of the graph");
  };
  for (const auto& o : request.outputs) check(o, "output");
  for (const auto& o : request.backward_outputs) check(o, "backward output");
  for (const auto& [v, s] : request.updates) {
    check(v, "state update");
    if (!graph_->initializer(s) || !index_.mutable_inits.count(s))
      throw_error<InvalidArgument>("state '", s, "' is not a mutable initializer");
  }
  for (const auto& [in, like] : request.backward_inputs) {
    if (!graph_->is_input(in)) throw_error<InvalidArgument>("backward input '", in, "' is not a graph input");
    if (std::find(request.outputs.begin(), request.outputs.end(), like) == request.outputs.end())
      throw_error<InvalidArgument>("backward input '", in, "': '", like, "' is not a forward output of the request");
  }
  if (request.partial()) {  // a forward output that depends on a backward input fails now, not at the first run
    std::vector<std::string> roots = request.outputs;
    roots.insert(roots.end(), request.backward_outputs.begin(), request.backward_outputs.end());
    planner::node_phases(index_, planner::needed_nodes(index_, roots), request);
  }
  std::lock_guard<std::mutex> lock(mu_);
  requests_.push_back(std::move(request));
  return requests_.size() - 1;
}

void GraphExecutor::check_inputs(const std::vector<const Value*>& inputs) const {
  if (inputs.size() != index_.input_names.size())
    throw_error<InvalidArgument>("expected ", index_.input_names.size(), " inputs, got ", inputs.size());
}

const Tensor* GraphExecutor::state_mirror(const std::string& name, const Device& device) {
  if (auto it = mirrors_.find(name); it != mirrors_.end())
    return it->second.device() == device ? &it->second : nullptr;
  const Tensor* host = graph_->initializer(name);
  if (!host || host->dtype() == DType::kString) return nullptr;
  return &mirrors_.emplace(name, copy_to_device(providers_, *host, device)).first->second;
}

void GraphExecutor::copy_state(bool to_host) {
  std::vector<size_t> used;
  for (auto& [name, dev] : mirrors_) {
    Tensor host = *graph_->initializer(name);  // shares the initializer's storage
    const size_t p = providers_.of_device(dev.device());
    if (to_host)
      providers_.providers[p]->copy(dev, host, *providers_.contexts[p]);
    else
      providers_.providers[p]->copy(host, dev, *providers_.contexts[p]);
    if (std::find(used.begin(), used.end(), p) == used.end()) used.push_back(p);
  }
  for (size_t p : used) providers_.providers[p]->synchronize(*providers_.contexts[p]);
}

void GraphExecutor::sync_state_to_host() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!device_newer_) return;
  copy_state(true);
  device_newer_ = false;
}

void GraphExecutor::state_changed_on_host() {
  std::lock_guard<std::mutex> lock(mu_);
  if (device_newer_)
    throw_error<RuntimeError>("the host's state was written while the device's held newer values (sync_state_to_host first)");
  host_newer_ = !mirrors_.empty();
}

std::shared_ptr<Plan> GraphExecutor::find_plan(const std::vector<const Value*>& inputs, int64_t request_tag,
                                               const std::vector<size_t>& outputs) {
  if (host_newer_) {  // the host's state was written since the device copies were made
    copy_state(false);
    host_newer_ = false;
  }
  key_.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* v = inputs[i];
    if (!v) {  // unfed: allowed when no requested output needs it (checked when planning)
      key_.push_back(-1);
      continue;
    }
    key_.push_back(int64_t(v->kind));
    if (v->kind == Value::Kind::kTensor) {
      key_.push_back(int64_t(v->tensor.dtype()));
      key_.push_back(int64_t(v->tensor.device().type) * 1024 + v->tensor.device().index);
      key_.push_back(int64_t(v->tensor.rank()));
      for (int64_t d : v->tensor.shape()) key_.push_back(d);
    } else {
      key_.push_back(int64_t(v->elem));
    }
  }
  key_.push_back(-2);
  key_.push_back(request_tag);
  if (request_tag < 0)
    for (size_t o : outputs) key_.push_back(int64_t(o));
  auto it = plans_.find(key_);
  if (it != plans_.end()) return it->second;
  if (plans_.size() >= 64) {  // bound the cache: shapes that keep changing rebuild
    drop_main_frames();
    plans_.clear();
  }
  PlanRequest built;
  const PlanRequest* req = &built;
  if (request_tag >= 0) {
    req = &requests_[size_t(request_tag)];
  } else if (outputs.empty()) {
    built.outputs = index_.output_names;
  } else {
    for (size_t o : outputs) built.outputs.push_back(index_.output_names[o]);
  }
  planner::StateMirror mirror;
  if (device_state_)
    mirror = [this](const std::string& name, const Device& d) { return state_mirror(name, d); };
  auto plan = build_plan(index_, opsets_, options_, inputs, *req, providers_, mirror);
  plans_.emplace(key_, plan);
  return plan;
}

void GraphExecutor::execute(Plan& plan, Frame& f, int phase, bool bind, bool finish,
                            const std::vector<const Value*>& inputs, std::vector<Value>& results, bool lent) {
  auto& vals = f.values;
  if (bind) bind_values(plan.input_slots, inputs, f);
  const auto& rs = plan.result_slots[phase];
  if (results.size() != rs.size()) results.resize(rs.size());
  // Result buffers: reuse the caller's when they fit and nobody else holds them (or the caller
  // lends them).
  for (int sid : plan.output_alloc[phase]) {
    const Tensor& tmpl = plan.slots[size_t(sid)].value.tensor;
    Value& v = vals[size_t(sid)];
    bool reused = false;
    for (size_t r = 0; r < rs.size(); ++r) {
      if (rs[r] != sid) continue;
      const Value& c = results[r];
      if (c.kind == Value::Kind::kTensor && c.tensor.dtype() == tmpl.dtype() && c.tensor.shape() == tmpl.shape() &&
          c.tensor.device() == tmpl.device() &&
          (lent ? c.tensor.raw_data() != nullptr || c.tensor.numel() == 0
                : c.tensor.storage() && c.tensor.storage().use_count() == 1)) {
        v.tensor.rebind(c.tensor);
        reused = true;
      }
      break;
    }
    if (!reused) v = Value::of(Tensor::empty(tmpl.dtype(), tmpl.shape()));
  }
  const int threads = current_threads();
  auto base = [&](const Device& d) -> char* {
    auto it = f.arenas.find(d);
    return it == f.arenas.end() ? nullptr : static_cast<char*>(it->second.get());
  };
  const size_t begin = phase == 0 ? 0 : plan.cut, end = phase == 0 ? plan.cut : plan.steps.size();
  RunHooks* const hooks = current_run_hooks();
  for (size_t si = begin; si < end; ++si) {
    const Step& st = plan.steps[si];
    int64_t t0 = 0;
    if (hooks) {
      if (hooks->terminate && hooks->terminate->load(std::memory_order_relaxed))
        throw Terminated("the run was stopped by RunOptions.terminate before node '" + st.node->name + "' (" +
                         st.node->op_type + ")");
      if (hooks->on_node) t0 = now_ns();
    }
    with_node_context(*st.node, [&] {
      if (st.dynamic) {
        run_dynamic(plan, st, f, options_, threads, providers_);
        return;
      }
      for (const auto& [o, i] : st.rebind) vals[size_t(o)].tensor.rebind(vals[size_t(i)].tensor);
      for (const auto& [k, j] : st.pre_copy) {
        Tensor& dst = vals[size_t(st.out[size_t(k)])].tensor;
        const Tensor& src = vals[size_t(st.in[size_t(j)])].tensor;
        if (dst.device().host_accessible() && src.device().host_accessible())
          dst.copy_from(src);
        else  // device memory moves through its provider
          providers_.providers[st.provider]->copy(src, dst, *providers_.contexts[st.provider]);
      }
      Value* const* p = f.ptrs.data() + st.ptr_offset;
      check_input_devices(st, p, providers_.providers[st.provider]->device());
      RunContext rc(*st.node, p, st.in.size(), p + st.in.size(), st.out.size(), p + st.in.size() + st.out.size(),
                    st.imp.size(), st.ws_offset >= 0 ? base(providers_.providers[st.provider]->device()) + st.ws_offset : nullptr, st.ws_bytes,
                    options_, threads, providers_.contexts[st.provider].get());
      rc.set_run_index(f.run_index);
      st.kernel->run(rc);
    });
    if (hooks && hooks->on_node) {
      providers_.providers[st.provider]->synchronize(*providers_.contexts[st.provider]);
      record_node(*hooks, st, vals, providers_.providers[st.provider]->name(), t0);
    }
    for (int sid : st.release) vals[size_t(sid)] = Value();
  }
  if (finish)
    for (const auto& [v, s] : plan.state_copies) {
      const Tensor& src = vals[size_t(v)].tensor;
      if (src.device().host_accessible()) {
        vals[size_t(s)].tensor.copy_from(src);
      } else {
        const size_t p = providers_.of_device(src.device());
        providers_.providers[p]->copy(src, vals[size_t(s)].tensor, *providers_.contexts[p]);
      }
    }
  // Results: buffers produced for this run are handed over; anything else is copied.
  for (size_t r = 0; r < rs.size(); ++r) {
    const int sid = rs[r];
    const Slot& s = plan.slots[size_t(sid)];
    Value& v = vals[size_t(sid)];
    bool later_dup = false;
    for (size_t q = r + 1; q < rs.size(); ++q) later_dup |= rs[q] == sid;
    if ((s.state == Slot::State::kOutput || s.state == Slot::State::kDynamic) && !later_dup) {
      Value& out = results[r];
      const bool same = out.kind == Value::Kind::kTensor && v.kind == Value::Kind::kTensor &&
                        out.tensor.storage() == v.tensor.storage() && out.tensor.raw_data() == v.tensor.raw_data();
      if (!same) out = v;
    } else {
      Value c = v;
      if (c.kind == Value::Kind::kTensor) c.tensor = c.tensor.clone();
      for (auto& t : c.sequence) t = t.clone();
      for (auto& m : c.maps) m = MapData{m.keys.clone(), m.values.clone()};
      results[r] = std::move(c);
    }
  }
}

std::vector<Value> GraphExecutor::run(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs) {
  std::vector<Value> results;
  run_outputs(inputs, outputs, results, false);
  return results;
}

void GraphExecutor::run_into(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs,
                             std::vector<Value>& results) {
  run_outputs(inputs, outputs, results, true);
}

void GraphExecutor::run_outputs(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs,
                                std::vector<Value>& results, bool lent) {
  check_inputs(inputs);
  for (size_t o : outputs)
    if (o >= index_.output_names.size()) throw_error<InvalidArgument>("output index ", o, " out of range");
  run_whole(inputs, -1, outputs, results, lent);
}

void GraphExecutor::run(const std::vector<const Value*>& inputs, size_t request, std::vector<Value>& results) {
  check_inputs(inputs);
  if (request >= requests_.size()) throw_error<InvalidArgument>("unknown request ", request);
  if (requests_[request].partial())
    throw_error<InvalidArgument>("request ", request, " is partial: run it with run_forward and run_backward");
  run_whole(inputs, int64_t(request), {}, results);
}

void GraphExecutor::run_whole(const std::vector<const Value*>& inputs, int64_t request_tag,
                              const std::vector<size_t>& outputs, std::vector<Value>& results, bool lent) {
  std::lock_guard<std::mutex> lock(mu_);
  ThreadScope threads(options_.num_threads);
  ScopedAllocationLimit memory(options_.memory_limit);
  last_plan_ = find_plan(inputs, request_tag, outputs);
  device_newer_ = device_newer_ || !mirrors_.empty();  // the run about to start may update the device's state
  Plan& plan = *last_plan_;
  // A session on the process's shared arena borrows it for this run (held under its lock, so runs
  // of the sessions sharing it are serialized) and gives it back at the end: its frame goes, the
  // blocks stay with the arena. A run nested in one that holds it (a subgraph) uses its own.
  static thread_local int t_borrowing = 0;
  SharedArena* shared = t_borrowing == 0 ? shared_arena_.get() : nullptr;
  std::unique_lock<std::mutex> shared_lock;
  if (shared) shared_lock = std::unique_lock<std::mutex>(shared->mu);
  struct Borrow {
    bool on;
    explicit Borrow(bool b) : on(b) { t_borrowing += on; }
    ~Borrow() { t_borrowing -= on; }
  } borrow(shared != nullptr);
  if (shared && plan.main) plan.main.reset();  // never kept across runs (defensive)
  Frame& f = shared ? main_frame(plan, shared->arenas, shared) : main_frame(plan, arenas_);
  f.run_index = run_counter_;
  f.scratch.swap(scratch_);  // dynamic steps' workspaces: the executor's, shared like the arenas
  auto finish = [&] {
    reset_frame(plan, f);  // leave the plan reusable
    f.scratch.swap(scratch_);
    if (shared) {  // the blocks go back to the shared arena
      plan.main.reset();
      ++shared->runs;
    } else if (!options_.keep_memory) {  // the run's memory goes back now
      plan.main.reset();
      arenas_.clear();
      std::vector<char>().swap(scratch_);
    }
  };
  try {
    execute(plan, f, 0, true, true, inputs, results, lent);
  } catch (...) {
    finish();
    throw;
  }
  finish();
  ++run_counter_;
}

void GraphExecutor::run_forward(const std::vector<const Value*>& inputs, size_t request, PartialRun& state,
                                std::vector<Value>& results) {
  check_inputs(inputs);
  if (request >= requests_.size()) throw_error<InvalidArgument>("unknown request ", request);
  const PlanRequest& req = requests_[request];
  if (!req.partial()) throw_error<InvalidArgument>("request ", request, " has no backward part: run it with run()");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i])
      for (const auto& [in, like] : req.backward_inputs)
        if (in == index_.input_names[i])
          throw_error<InvalidArgument>("input '", in, "' is a backward input: feed it to run_backward");
  std::lock_guard<std::mutex> lock(mu_);  // a state used by two threads at once is checked by one at a time
  if (device_state_) throw_error<NotImplemented>("partial runs of an executor that keeps its state on a device");
  if (state.pending())
    throw_error<InvalidArgument>("this PartialRun holds a forward pass whose backward part has not run yet");
  ThreadScope threads(options_.num_threads);
  ScopedAllocationLimit memory(options_.memory_limit);
  std::shared_ptr<Plan> plan = find_plan(inputs, int64_t(request), {});
  last_plan_ = plan;
  std::unique_ptr<Frame> f;
  {
    std::lock_guard<std::mutex> pl(plan->pool_mu);
    if (!plan->pool.empty()) {
      f = std::move(plan->pool.back());
      plan->pool.pop_back();
    }
  }
  if (!f) f = make_frame(*plan, providers_);
  f->run_index = run_counter_;
  try {
    execute(*plan, *f, 0, true, false, inputs, results);
  } catch (...) {
    recycle(*plan, std::move(f));
    throw;
  }
  ++run_counter_;
  state.release();
  state.owner_ = id_;
  state.request_ = request;
  state.plan_ = std::move(plan);
  state.frame_ = std::move(f);
  state.phase_ = PartialRun::Phase::kForwardDone;
}

namespace {

// Whether `from` broadcasts to `to` in numpy's way, `to` unchanged (unidirectional).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    const int64_t d = from[from.size() - 1 - i];
    if (d != 1 && d != to[to.size() - 1 - i]) return false;
  }
  return true;
}

// A new tensor of shape `to` holding `src` broadcast to it (broadcasts_to(src.shape(), to)).
Tensor broadcast_copy(const Tensor& src, const Shape& to) {
  Tensor out = Tensor::empty(src.dtype(), to);
  const size_t esize = dtype_size(src.dtype());
  const size_t rank = to.size(), lead = rank - src.shape().size();
  std::vector<int64_t> sstride(rank, 0);  // source stride of each output dimension (0: broadcast)
  for (int64_t i = int64_t(rank) - 1, st = 1; i >= int64_t(lead); --i) {
    const int64_t d = src.shape()[size_t(i) - lead];
    sstride[size_t(i)] = d == 1 ? 0 : st;
    st *= d;
  }
  std::vector<int64_t> idx(rank, 0);
  const auto* in = static_cast<const uint8_t*>(src.raw_data());
  auto* o = static_cast<uint8_t*>(out.raw_data());
  for (int64_t n = 0, off = 0; n < out.numel(); ++n) {
    std::memcpy(o + size_t(n) * esize, in + size_t(off) * esize, esize);
    for (size_t i = rank; i-- > 0;) {  // next index, odometer order
      off += sstride[i];
      if (++idx[i] < to[i]) break;
      off -= sstride[i] * to[i];
      idx[i] = 0;
    }
  }
  return out;
}

}  // namespace

void GraphExecutor::run_backward(PartialRun& state, const std::vector<const Value*>& grads,
                                 std::vector<Value>& results) {
  std::lock_guard<std::mutex> lock(mu_);  // a state used by two threads at once is checked by one at a time
  if (state.phase_ == PartialRun::Phase::kFinished)
    throw_error<InvalidArgument>("the backward part of this PartialRun already ran: each forward pass is used once");
  if (state.phase_ == PartialRun::Phase::kFresh || !state.frame_)
    throw_error<InvalidArgument>("this PartialRun has not run a forward pass: call run_forward first");
  if (state.owner_ != id_) throw_error<InvalidArgument>("this PartialRun ran its forward pass on another executor");
  Plan& plan = *state.plan_;
  const PlanRequest& req = requests_[state.request_];
  if (grads.size() != req.backward_inputs.size())
    throw_error<InvalidArgument>("expected ", req.backward_inputs.size(), " backward inputs, got ", grads.size());
  std::vector<const Value*> fed(grads);
  std::vector<Value> expanded;  // gradients broadcast to their output's shape (kept for the run)
  expanded.reserve(grads.size());
  for (size_t k = 0; k < grads.size(); ++k) {
    const Tensor& want = plan.slots[size_t(plan.backward_input_slots[k])].value.tensor;
    const Value* g = grads[k];
    const bool broadcastable = k < req.backward_broadcastable.size() && req.backward_broadcastable[k];
    if (g && g->kind == Value::Kind::kTensor && g->tensor.dtype() == want.dtype() && g->tensor.shape() != want.shape() &&
        broadcastable && broadcasts_to(g->tensor.shape(), want.shape())) {
      expanded.push_back(Value::of(broadcast_copy(g->tensor, want.shape())));
      fed[k] = &expanded.back();
      continue;
    }
    if (!g || g->kind != Value::Kind::kTensor || g->tensor.dtype() != want.dtype() || g->tensor.shape() != want.shape())
      throw_error<InvalidArgument>("backward input '", req.backward_inputs[k].first, "' must be ", want.describe(),
                                   broadcastable ? " or broadcastable to it" : "", " (like forward output '",
                                   req.backward_inputs[k].second, "'), got ",
                                   !g ? std::string("nothing")
                                      : g->kind == Value::Kind::kTensor ? g->tensor.describe() : "a non-tensor value");
  }
  ThreadScope threads(options_.num_threads);
  ScopedAllocationLimit memory(options_.memory_limit);
  Frame& f = *state.frame_;
  bind_values(plan.backward_input_slots, fed, f);
  state.phase_ = PartialRun::Phase::kFinished;
  try {
    execute(plan, f, 1, false, true, {}, results);
  } catch (...) {
    state.release();
    throw;
  }
  state.release();
}

}  // namespace onnxtrain::runtime
