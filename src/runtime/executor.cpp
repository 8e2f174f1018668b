#include "runtime/executor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/parallel.h"

namespace onnxtrain::runtime {

namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Re-throws `e` with `prefix` prepended, keeping its type.
[[noreturn]] void rethrow_with(const Error& e, const std::string& prefix) {
  std::string msg = prefix + e.what();
  switch (e.code()) {
    case ErrorCode::kInvalidArgument: throw InvalidArgument(msg);
    case ErrorCode::kInvalidModel: throw InvalidModel(msg);
    case ErrorCode::kInvalidGraph: throw InvalidGraph(msg);
    case ErrorCode::kNotImplemented: throw NotImplemented(msg);
    case ErrorCode::kIOError: throw IOError(msg);
    default: throw RuntimeError(msg);
  }
}

// Calls f(), making sure any error names `node`.
template <class F>
void with_node_context(const ir::Node& node, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string d = node.describe();
    if (std::string(e.what()).find(d) != std::string::npos) throw;
    rethrow_with(e, d + ": ");
  } catch (const std::bad_alloc&) {
    throw_error<RuntimeError>(node.describe(), ": out of memory");
  }
}

}  // namespace

struct Slot {
  enum class State : uint8_t { kUnset, kInput, kConstant, kStatic, kOutput, kDynamic };
  State state = State::kUnset;
  std::string name;
  Value value;
  bool shape_known = false;
  bool graph_output = false;
  bool bound = false;       // kInput bound once at plan time (mutable initializer)
  int producer = -1;        // step index
  int last_use = -1;        // step index of the last reader
  int alias_root = -1;      // static alias: slot whose arena memory this views
  bool const_view = false;  // static alias of a constant (memory fixed at plan time)
  bool per_run = false;     // static alias of memory that changes every run (inputs, outputs)
  int64_t offset = -1;      // arena offset
};

struct Step {
  const ir::Node* node = nullptr;
  Kernel* kernel = nullptr;
  int64_t opset = 0;
  std::vector<int> in, out, imp;
  std::vector<Value*> in_p, out_p, imp_p;
  bool dynamic = false;
  int64_t ws_offset = -1;
  size_t ws_bytes = 0;
  void* ws = nullptr;
  std::vector<std::pair<int, int>> rebind;  // (output slot, input slot): views of per-run memory
  std::vector<int> release;                 // dynamic slots freed after this step
};

struct Plan {
  std::vector<Slot> slots;
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::vector<Step> steps;
  std::vector<int> input_slots;
  std::vector<int> result_slots;
  std::vector<int> output_alloc;
  std::shared_ptr<void> arena;
  PlanStats stats;
};

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
    : graph_(std::move(graph)), opsets_(std::move(opsets)), options_(options), mutable_(std::move(mutable_initializers)) {
  for (const auto& v : graph_->inputs) {
    input_names_.push_back(v.name);
    input_default_.push_back(graph_->initializer(v.name) != nullptr);
  }
  for (auto& n : outer_names) {
    input_names_.push_back(std::move(n));
    input_default_.push_back(false);
  }
  for (const auto& v : graph_->outputs) output_names_.push_back(v.name);
  std::unordered_set<std::string> outer(input_names_.begin() + graph_->inputs.size(), input_names_.end());
  order_ = ir::topological_order(*graph_, outer);
  implicit_.resize(graph_->nodes.size());
  for (size_t i = 0; i < graph_->nodes.size(); ++i) {
    const auto& n = graph_->nodes[i];
    implicit_[i] = ir::implicit_inputs(n);
    for (const auto& o : n.outputs)
      if (!o.empty()) producer_[o] = i;
  }
}

GraphExecutor::~GraphExecutor() = default;

PlanStats GraphExecutor::last_stats() const { return last_plan_ ? last_plan_->stats : PlanStats{}; }

std::unique_ptr<Plan> GraphExecutor::build_plan(const std::vector<const Value*>& inputs,
                                                const std::vector<size_t>& outputs_in) {
  auto plan = std::make_unique<Plan>();
  const ir::Graph& g = *graph_;
  std::vector<size_t> outputs = outputs_in;
  if (outputs.empty())
    for (size_t i = 0; i < output_names_.size(); ++i) outputs.push_back(i);

  // Nodes needed for the requested outputs.
  std::vector<bool> needed(g.nodes.size(), false);
  {
    std::vector<std::string> stack;
    for (size_t o : outputs) stack.push_back(output_names_[o]);
    std::unordered_set<std::string> visited;
    while (!stack.empty()) {
      std::string name = std::move(stack.back());
      stack.pop_back();
      if (!visited.insert(name).second) continue;
      auto it = producer_.find(name);
      if (it == producer_.end() || needed[it->second]) continue;
      needed[it->second] = true;
      for (const auto& i : g.nodes[it->second].inputs)
        if (!i.empty()) stack.push_back(i);
      for (const auto& i : implicit_[it->second]) stack.push_back(i);
    }
  }

  // Slots.
  std::unordered_map<std::string, int> ids;
  std::vector<std::string> names;
  auto slot_id = [&](const std::string& n) {
    auto [it, fresh] = ids.emplace(n, int(names.size()));
    if (fresh) names.push_back(n);
    return it->second;
  };
  for (const auto& n : input_names_) slot_id(n);
  for (const auto& [n, t] : g.initializers) slot_id(n);
  for (size_t idx : order_)
    if (needed[idx])
      for (const auto& o : g.nodes[idx].outputs)
        if (!o.empty()) slot_id(o);
  plan->slots.resize(names.size());
  auto& slots = plan->slots;
  for (size_t i = 0; i < names.size(); ++i) slots[i].name = names[i];
  for (size_t o : outputs) slots[size_t(ids.at(output_names_[o]))].graph_output = true;

  // Inputs and initializers.
  std::unordered_set<std::string> missing;
  plan->input_slots.resize(input_names_.size());
  for (size_t i = 0; i < input_names_.size(); ++i) {
    const int sid = ids.at(input_names_[i]);
    plan->input_slots[i] = sid;
    Slot& s = slots[size_t(sid)];
    const Value* v = inputs[i];
    if (v) {
      s.state = Slot::State::kInput;
      s.shape_known = true;
      s.value.kind = v->kind;
      s.value.elem = v->elem;
      if (v->kind == Value::Kind::kTensor) s.value.tensor = Tensor::wrap(v->tensor.dtype(), v->tensor.shape(), nullptr);
    } else if (const Tensor* init = g.initializer(input_names_[i])) {
      s.state = mutable_.count(input_names_[i]) ? Slot::State::kInput : Slot::State::kConstant;
      s.bound = true;
      s.shape_known = true;
      s.value = Value::of(*init);
      plan->input_slots[i] = -1;  // nothing to bind per run
    } else {
      // Not fed: an error only if a needed node (or a requested output) reads it.
      plan->input_slots[i] = -1;
      missing.insert(input_names_[i]);
    }
  }
  for (size_t o : outputs)
    if (missing.count(output_names_[o])) throw_error<InvalidArgument>("missing input '", output_names_[o], "'");
  for (const auto& [n, t] : g.initializers) {
    Slot& s = slots[size_t(ids.at(n))];
    if (s.state != Slot::State::kUnset) continue;  // also a (fed or defaulted) graph input
    s.state = mutable_.count(n) ? Slot::State::kInput : Slot::State::kConstant;
    s.bound = true;
    s.shape_known = true;
    s.value = Value::of(t);
  }

  auto in_info = [&](int sid) {
    PrepareContext::In in;
    if (sid < 0) return in;
    const Slot& s = slots[size_t(sid)];
    in.kind = s.value.kind;
    if (s.value.kind == Value::Kind::kTensor) {
      in.dtype = s.value.tensor.dtype();
      in.shape = s.value.tensor.shape();
    } else {
      in.dtype = s.value.elem;
    }
    if (s.state == Slot::State::kConstant) in.value = &s.value;
    return in;
  };

  // Kernels: prepare with concrete shapes, fold constants.
  for (size_t idx : order_) {
    if (!needed[idx]) continue;
    const ir::Node& node = g.nodes[idx];
    Step st;
    st.node = &node;
    with_node_context(node, [&] {
      auto kernel = create_kernel(node, opsets_, options_);
      auto oit = opsets_.find(node.domain);
      st.opset = oit == opsets_.end() ? 0 : oit->second;
      bool known = true, all_const = node.subgraphs().empty();
      for (const auto& n : node.inputs) {
        int sid = n.empty() ? -1 : ids.at(n);
        st.in.push_back(sid);
        if (sid < 0) continue;
        const Slot& s = slots[size_t(sid)];
        if (missing.count(n)) throw_error<InvalidArgument>("missing input '", n, "'");
        if (s.state == Slot::State::kUnset)
          throw_error<InvalidGraph>("input '", n, "' is read before it is produced");
        known = known && s.shape_known;
        all_const = all_const && s.state == Slot::State::kConstant;
      }
      for (const auto& n : implicit_[idx]) {
        auto it = ids.find(n);
        if (it == ids.end()) throw_error<InvalidGraph>("subgraph reads '", n, "', which is not defined");
        if (missing.count(n)) throw_error<InvalidArgument>("missing input '", n, "'");
        st.imp.push_back(it->second);
        known = known && slots[size_t(it->second)].shape_known;
        all_const = false;
      }
      for (const auto& n : node.outputs) st.out.push_back(n.empty() ? -1 : ids.at(n));

      if (!known) {
        st.dynamic = true;
        for (int sid : st.out)
          if (sid >= 0) slots[size_t(sid)].state = Slot::State::kDynamic;
        plan->kernels.push_back(std::move(kernel));
        st.kernel = plan->kernels.back().get();
        return;
      }
      std::vector<PrepareContext::In> ins, imps;
      for (int sid : st.in) ins.push_back(in_info(sid));
      for (int sid : st.imp) imps.push_back(in_info(sid));
      PrepareContext ctx(node, st.opset, options_, std::move(ins), node.outputs.size(), std::move(imps));
      kernel->prepare(ctx);
      bool any_dynamic = false;
      for (size_t k = 0; k < st.out.size(); ++k) {
        if (st.out[k] < 0) continue;
        const auto& o = ctx.outputs()[k];
        if (!o.set) throw_error<RuntimeError>("internal error: the kernel did not prepare output ", k);
        if (o.dynamic || o.kind != Value::Kind::kTensor || o.dtype == DType::kString) any_dynamic = true;
      }

      const bool shapes_only = ctx.reads_shapes_only() && implicit_[idx].empty();
      if ((all_const || shapes_only) && ctx.deterministic()) {  // fold: evaluate once now
        std::vector<Value> outs(st.out.size());
        std::vector<Value*> in_p, out_p;
        std::vector<Value> shape_views;  // data-less stand-ins for non-constant inputs
        shape_views.reserve(st.in.size());
        for (int sid : st.in) {
          if (sid < 0) {
            in_p.push_back(nullptr);
          } else if (slots[size_t(sid)].state == Slot::State::kConstant) {
            in_p.push_back(&slots[size_t(sid)].value);
          } else {
            const Value& v = slots[size_t(sid)].value;
            shape_views.push_back(v.kind == Value::Kind::kTensor
                                      ? Value::of(Tensor::wrap(v.tensor.dtype(), v.tensor.shape(), nullptr))
                                      : v);
            in_p.push_back(&shape_views.back());
          }
        }
        for (size_t k = 0; k < st.out.size(); ++k) {
          const auto& o = ctx.outputs()[k];
          if (st.out[k] >= 0 && !o.dynamic && o.kind == Value::Kind::kTensor)
            outs[k] = Value::of(Tensor::empty(o.dtype, o.shape));
          out_p.push_back(st.out[k] < 0 ? nullptr : &outs[k]);
        }
        std::vector<char> ws(ctx.workspace() + kAlign);
        void* wsp = reinterpret_cast<void*>(align_up(reinterpret_cast<uintptr_t>(ws.data())));
        RunContext rc(node, in_p.data(), in_p.size(), out_p.data(), out_p.size(), nullptr, 0, wsp, ctx.workspace(),
                      options_, current_threads());
        kernel->run(rc);
        for (size_t k = 0; k < st.out.size(); ++k) {
          if (st.out[k] < 0) continue;
          Slot& s = slots[size_t(st.out[k])];
          if (outs[k].kind == Value::Kind::kNone)
            throw_error<RuntimeError>("internal error: the kernel produced no value for output ", k);
          s.state = Slot::State::kConstant;
          s.shape_known = true;
          s.value = std::move(outs[k]);
          if (s.value.kind == Value::Kind::kTensor) plan->stats.constant_bytes += s.value.tensor.nbytes();
        }
        ++plan->stats.folded_nodes;
        return;
      }

      st.dynamic = any_dynamic;
      for (size_t k = 0; k < st.out.size(); ++k) {
        if (st.out[k] < 0) continue;
        Slot& s = slots[size_t(st.out[k])];
        const auto& o = ctx.outputs()[k];
        if (st.dynamic) {
          s.state = Slot::State::kDynamic;
          continue;
        }
        s.shape_known = true;
        s.value = Value::of(Tensor::wrap(o.dtype, o.shape, nullptr));
        if (s.graph_output) {
          s.state = Slot::State::kOutput;
          continue;
        }
        s.state = Slot::State::kStatic;
        if (o.alias_of >= 0) {
          const int src = st.in[size_t(o.alias_of)];
          const Slot& in = slots[size_t(src)];
          if (in.state == Slot::State::kConstant) {
            s.value.tensor = in.value.tensor.reshaped(o.shape);
            s.const_view = true;
          } else if (in.state == Slot::State::kStatic && in.const_view) {
            s.value.tensor = in.value.tensor.reshaped(o.shape);
            s.const_view = true;
          } else if (in.state == Slot::State::kStatic && !in.per_run) {
            s.alias_root = in.alias_root >= 0 ? in.alias_root : src;
          } else if (in.bound) {
            s.value.tensor = in.value.tensor.reshaped(o.shape);
            s.const_view = true;  // a mutable initializer: memory fixed for the plan's lifetime
          } else {  // graph input, graph output or a view of one: memory changes every run
            st.rebind.emplace_back(st.out[k], src);
            s.per_run = true;
          }
        }
      }
      st.ws_bytes = ctx.workspace();
      plan->kernels.push_back(std::move(kernel));
      st.kernel = plan->kernels.back().get();
    });
    if (st.kernel) {
      plan->steps.push_back(std::move(st));
      const int si = int(plan->steps.size()) - 1;
      for (int sid : plan->steps.back().out)
        if (sid >= 0) slots[size_t(sid)].producer = si;
    }
  }
  // Liveness.
  const int nsteps = int(plan->steps.size());
  for (int s = 0; s < nsteps; ++s) {
    for (int sid : plan->steps[size_t(s)].in)
      if (sid >= 0) slots[size_t(sid)].last_use = s;
    for (int sid : plan->steps[size_t(s)].imp)
      if (sid >= 0) slots[size_t(sid)].last_use = s;
  }
  for (auto& s : slots) {
    if (s.graph_output) s.last_use = nsteps;
    if (s.last_use < s.producer) s.last_use = s.producer;
  }
  // Run-time views keep what they view alive: an output of a dynamic step may view its inputs
  // (aliasing kernels such as Reshape, or ReduceSum with no axes; graph outputs never do), and a
  // rebound slot views its source. A view comes after what it views, so one pass from the last
  // step back settles chains.
  for (int si = nsteps - 1; si >= 0; --si) {
    const Step& st = plan->steps[size_t(si)];
    for (const auto& [o, i] : st.rebind)
      slots[size_t(i)].last_use = std::max(slots[size_t(i)].last_use, slots[size_t(o)].last_use);
    if (!st.dynamic) continue;
    int end = si;
    for (int sid : st.out)
      if (sid >= 0 && !slots[size_t(sid)].graph_output) end = std::max(end, slots[size_t(sid)].last_use);
    for (int sid : st.in)
      if (sid >= 0) slots[size_t(sid)].last_use = std::max(slots[size_t(sid)].last_use, end);
  }
  for (auto& s : slots)
    if (s.alias_root >= 0) {
      Slot& r = slots[size_t(s.alias_root)];
      r.last_use = std::max(r.last_use, s.last_use);
    }

  // Arena layout: greedy best offset, largest buffers first.
  struct Block {
    size_t bytes;
    int begin, end;
    int slot;  // -1 - step index for workspaces
    int64_t offset = -1;
  };
  std::vector<Block> blocks;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& s = slots[i];
    if (s.state != Slot::State::kStatic || s.alias_root >= 0 || s.const_view || s.per_run) continue;
    blocks.push_back(Block{align_up(std::max<size_t>(s.value.tensor.nbytes(), 1)), s.producer, s.last_use, int(i)});
  }
  for (int si = 0; si < nsteps; ++si)
    if (plan->steps[size_t(si)].ws_bytes > 0 && !plan->steps[size_t(si)].dynamic)
      blocks.push_back(Block{align_up(plan->steps[size_t(si)].ws_bytes), si, si, -1 - si});
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  size_t arena_bytes = 0, naive = 0;
  std::vector<size_t> placed;
  for (size_t bi : order) {
    Block& b = blocks[bi];
    naive += b.bytes;
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t pi : placed) {
      const Block& p = blocks[pi];
      if (p.begin <= b.end && b.begin <= p.end) busy.emplace_back(size_t(p.offset), size_t(p.offset) + p.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (const auto& [lo, hi] : busy) {
      if (off + b.bytes <= lo) break;
      off = std::max(off, hi);
    }
    b.offset = int64_t(off);
    arena_bytes = std::max(arena_bytes, off + b.bytes);
    placed.push_back(bi);
  }
  plan->stats.arena_bytes = arena_bytes;
  plan->stats.naive_bytes = naive;
  if (arena_bytes > 0) {
    if (arena_bytes > allocation_limit())
      throw_error<RuntimeError>("the execution plan needs an arena of ", arena_bytes,
                                " bytes, over the allocation limit of ", allocation_limit());
    void* p = std::aligned_alloc(kAlign, arena_bytes);
    if (!p) throw_error<RuntimeError>("out of memory allocating a ", arena_bytes, "-byte arena");
    plan->arena = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  char* base = static_cast<char*>(plan->arena.get());
  for (const Block& b : blocks) {
    if (b.slot >= 0) {
      Slot& s = slots[size_t(b.slot)];
      s.offset = b.offset;
      s.value.tensor = Tensor::wrap(s.value.tensor.dtype(), s.value.tensor.shape(), base + b.offset);
    } else {
      plan->steps[size_t(-1 - b.slot)].ws = base + b.offset;
    }
  }
  for (auto& s : slots)
    if (s.alias_root >= 0)
      s.value.tensor = Tensor::wrap(s.value.tensor.dtype(), s.value.tensor.shape(),
                                    slots[size_t(s.alias_root)].value.tensor.raw_data());

  // Pointers, per-run allocations, releases.
  for (int si = 0; si < nsteps; ++si) {
    Step& st = plan->steps[size_t(si)];
    for (int sid : st.in) st.in_p.push_back(sid < 0 ? nullptr : &slots[size_t(sid)].value);
    for (int sid : st.out) st.out_p.push_back(sid < 0 ? nullptr : &slots[size_t(sid)].value);
    for (int sid : st.imp) st.imp_p.push_back(&slots[size_t(sid)].value);
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = slots[i];
    if (s.state == Slot::State::kOutput) plan->output_alloc.push_back(int(i));
    if (s.state == Slot::State::kDynamic && !s.graph_output && s.producer >= 0)
      plan->steps[size_t(s.last_use)].release.push_back(int(i));
  }
  for (size_t o : outputs) plan->result_slots.push_back(ids.at(output_names_[o]));
  plan->stats.steps = size_t(nsteps);
  for (const auto& st : plan->steps) plan->stats.dynamic_steps += st.dynamic ? 1 : 0;
  return plan;
}

void GraphExecutor::execute(Plan& plan, const std::vector<const Value*>& inputs, std::vector<Value>& results) {
  auto& slots = plan.slots;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int sid = plan.input_slots[i];
    if (sid < 0 || !inputs[i]) continue;
    Slot& s = slots[size_t(sid)];
    if (inputs[i]->kind == Value::Kind::kTensor) s.value.tensor.rebind(inputs[i]->tensor);
    else s.value = *inputs[i];
  }
  for (int sid : plan.output_alloc) {
    Slot& s = slots[size_t(sid)];
    s.value.kind = Value::Kind::kTensor;
    s.value.tensor = Tensor::empty(s.value.tensor.dtype(), s.value.tensor.shape());
  }
  const int threads = current_threads();
  for (Step& st : plan.steps) {
    with_node_context(*st.node, [&] {
      if (!st.dynamic) {
        for (const auto& [o, i] : st.rebind) slots[size_t(o)].value.tensor.rebind(slots[size_t(i)].value.tensor);
        RunContext rc(*st.node, st.in_p.data(), st.in_p.size(), st.out_p.data(), st.out_p.size(), st.imp_p.data(),
                      st.imp_p.size(), st.ws, st.ws_bytes, options_, threads);
        rc.set_run_index(run_counter_);
        st.kernel->run(rc);
      } else {
        std::vector<PrepareContext::In> ins, imps;
        auto info = [&](const Value* v) {
          PrepareContext::In in;
          if (!v) return in;
          in.kind = v->kind;
          if (v->kind == Value::Kind::kTensor) {
            in.dtype = v->tensor.dtype();
            in.shape = v->tensor.shape();
          } else {
            in.dtype = v->elem;
          }
          in.value = v;
          return in;
        };
        for (const Value* v : st.in_p) ins.push_back(info(v));
        for (const Value* v : st.imp_p) imps.push_back(info(v));
        PrepareContext ctx(*st.node, st.opset, options_, std::move(ins), st.out.size(), std::move(imps));
        st.kernel->prepare(ctx);
        for (size_t k = 0; k < st.out.size(); ++k) {
          if (st.out[k] < 0) continue;
          Value& v = *st.out_p[k];
          v = Value();
          const auto& o = ctx.outputs()[k];
          if (!o.set) throw_error<RuntimeError>("internal error: the kernel did not prepare output ", k);
          if (o.kind != Value::Kind::kTensor || o.dynamic) continue;
          if (o.alias_of >= 0 && !slots[size_t(st.out[k])].graph_output)
            v = Value::of(st.in_p[size_t(o.alias_of)]->tensor.reshaped(o.shape));
          else
            v = Value::of(Tensor::empty(o.dtype, o.shape));
        }
        std::vector<char> ws(ctx.workspace() ? ctx.workspace() + kAlign : 0);
        void* wsp = ws.empty() ? nullptr : reinterpret_cast<void*>(align_up(reinterpret_cast<uintptr_t>(ws.data())));
        RunContext rc(*st.node, st.in_p.data(), st.in_p.size(), st.out_p.data(), st.out_p.size(), st.imp_p.data(),
                      st.imp_p.size(), wsp, ctx.workspace(), options_, threads);
        rc.set_run_index(run_counter_);
        st.kernel->run(rc);
        for (size_t k = 0; k < st.out.size(); ++k)
          if (st.out[k] >= 0 && st.out_p[k]->kind == Value::Kind::kNone && !ctx.outputs()[k].dynamic)
            throw_error<RuntimeError>("internal error: no value produced for output ", k);
      }
    });
    for (int sid : st.release) slots[size_t(sid)].value = Value();
  }
  results.clear();
  results.reserve(plan.result_slots.size());
  for (size_t r = 0; r < plan.result_slots.size(); ++r) {
    Slot& s = slots[size_t(plan.result_slots[r])];
    bool later_dup = false;
    for (size_t q = r + 1; q < plan.result_slots.size(); ++q) later_dup |= plan.result_slots[q] == plan.result_slots[r];
    if ((s.state == Slot::State::kOutput || s.state == Slot::State::kDynamic) && !later_dup) {
      results.push_back(std::move(s.value));
      s.value = Value();
      if (s.state == Slot::State::kOutput) {
        // keep dtype/shape for the next run's allocation
        const auto& prev = results.back().tensor;
        s.value.kind = Value::Kind::kTensor;
        s.value.tensor = Tensor::wrap(prev.dtype(), prev.shape(), nullptr);
      }
    } else {
      Value v = s.value;
      if (v.kind == Value::Kind::kTensor) v.tensor = v.tensor.clone();
      for (auto& t : v.sequence) t = t.clone();
      results.push_back(std::move(v));
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int sid = plan.input_slots[i];
    if (sid < 0 || !inputs[i]) continue;
    Slot& s = slots[size_t(sid)];
    if (s.value.kind == Value::Kind::kTensor) s.value.tensor.unbind();
    else s.value.sequence.clear();
  }
  for (const Step& st : plan.steps)
    for (const auto& [o, i] : st.rebind) slots[size_t(o)].value.tensor.unbind();
}

std::vector<Value> GraphExecutor::run(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs) {
  if (inputs.size() != input_names_.size())
    throw_error<InvalidArgument>("expected ", input_names_.size(), " inputs, got ", inputs.size());
  for (size_t o : outputs)
    if (o >= output_names_.size()) throw_error<InvalidArgument>("output index ", o, " out of range");
  std::lock_guard<std::mutex> lock(mu_);
  ThreadScope threads(options_.num_threads);
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
      key_.push_back(int64_t(v->tensor.rank()));
      for (int64_t d : v->tensor.shape()) key_.push_back(d);
    } else {
      key_.push_back(int64_t(v->elem));
    }
  }
  key_.push_back(-2);
  for (size_t o : outputs) key_.push_back(int64_t(o));
  auto it = plans_.find(key_);
  Plan* plan;
  if (it == plans_.end()) {
    if (plans_.size() >= 64) {  // bound the cache: shapes that keep changing rebuild
      plans_.clear();
      last_plan_ = nullptr;
    }
    auto p = build_plan(inputs, outputs);
    plan = p.get();
    plans_.emplace(key_, std::move(p));
  } else {
    plan = it->second.get();
  }
  last_plan_ = plan;
  std::vector<Value> results;
  try {
    execute(*plan, inputs, results);
    ++run_counter_;
  } catch (...) {
    // Leave the plan reusable: drop per-run references.
    for (auto& s : plan->slots) {
      if (s.state == Slot::State::kDynamic) s.value = Value();
      if (s.state == Slot::State::kInput && !s.bound && s.value.kind == Value::Kind::kTensor) s.value.tensor.unbind();
    }
    throw;
  }
  return results;
}

}  // namespace onnxtrain::runtime
