// The planner's passes (see plan.h for their order and contracts).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <queue>

#include "core/parallel.h"
#include "runtime/plan.h"
#include "runtime/shared_arena.h"
#include "runtime/run_util.h"

namespace onnxtrain::runtime {

GraphIndex::GraphIndex(const ir::Graph& g, std::vector<std::string> outer_names,
                       std::unordered_set<std::string> mutable_initializers)
    : graph(&g), mutable_inits(std::move(mutable_initializers)) {
  for (const auto& v : g.inputs) input_names.push_back(v.name);
  for (auto& n : outer_names) input_names.push_back(std::move(n));
  for (const auto& v : g.outputs) output_names.push_back(v.name);
  std::unordered_set<std::string> outer(input_names.begin() + long(g.inputs.size()), input_names.end());
  order = ir::topological_order(g, outer);
  implicit.resize(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    implicit[i] = ir::implicit_inputs(n);
    for (const auto& o : n.outputs)
      if (!o.empty()) producer[o] = i;
  }
}

Plan::Plan() = default;
Plan::~Plan() = default;

ProviderSet::ProviderSet(const ExecOptions& options) {
  for (ExecutionProvider* p : options.providers)
    if (p && p != &cpu_provider() && std::find(providers.begin(), providers.end(), p) == providers.end())
      providers.push_back(p);
  providers.push_back(&cpu_provider());
  for (ExecutionProvider* p : providers) contexts.push_back(p->make_context(options));
}

size_t ProviderSet::of_device(const Device& d) const {
  for (size_t i = 0; i < providers.size(); ++i)
    if (providers[i]->device() == d) return i;
  if (d.is_host()) return cpu();
  throw_error<InvalidArgument>("no execution provider of this session owns device ", d.name());
}

namespace {

// A copy between devices, inserted by the planner (insert_copies): runs on the provider that owns
// the device that is not the host.
class CopyKernel final : public Kernel {
 public:
  explicit CopyKernel(ExecutionProvider& provider) : provider_(provider) {}
  void prepare(PrepareContext& ctx) override {
    if (ctx.input_kind(0) != Value::Kind::kTensor) ctx.fail("only tensors move between devices");
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  }
  void run(RunContext& ctx) override { provider_.copy(ctx.input(0), ctx.output(0), *ctx.device()); }

 private:
  ExecutionProvider& provider_;
};

}  // namespace

namespace planner {

namespace {

bool is_arena(const Slot& s) {
  return s.state == Slot::State::kStatic && s.alias_root < 0 && !s.const_view && !s.per_run && !s.in_state;
}

}  // namespace

std::vector<bool> needed_nodes(const GraphIndex& gi, const std::vector<std::string>& roots) {
  const ir::Graph& g = *gi.graph;
  std::vector<bool> needed(g.nodes.size(), false);
  std::vector<std::string> stack(roots.begin(), roots.end());
  std::unordered_set<std::string> visited;
  while (!stack.empty()) {
    std::string name = std::move(stack.back());
    stack.pop_back();
    if (!visited.insert(name).second) continue;
    auto it = gi.producer.find(name);
    if (it == gi.producer.end() || needed[it->second]) continue;
    needed[it->second] = true;
    for (const auto& i : g.nodes[it->second].inputs)
      if (!i.empty()) stack.push_back(i);
    for (const auto& i : gi.implicit[it->second]) stack.push_back(i);
  }
  return needed;
}

std::vector<int> node_phases(const GraphIndex& gi, const std::vector<bool>& needed, const PlanRequest& req) {
  const ir::Graph& g = *gi.graph;
  std::vector<int> phase(g.nodes.size(), 0);
  if (!req.partial()) return phase;
  // Values that depend on a backward input.
  std::unordered_set<std::string> late;
  for (const auto& [in, like] : req.backward_inputs) late.insert(in);
  std::vector<bool> depends(g.nodes.size(), false);
  for (size_t idx : gi.order) {
    const ir::Node& n = g.nodes[idx];
    bool d = false;
    for (const auto& i : n.inputs) d = d || (!i.empty() && late.count(i));
    for (const auto& i : gi.implicit[idx]) d = d || late.count(i);
    if (!d) continue;
    depends[idx] = true;
    for (const auto& o : n.outputs)
      if (!o.empty()) late.insert(o);
  }
  for (const auto& o : req.outputs)
    if (late.count(o))
      throw_error<InvalidArgument>("forward output '", o, "' depends on a backward input: it cannot be computed by the forward part");
  const std::vector<bool> fwd = needed_nodes(gi, req.outputs);
  for (size_t i = 0; i < phase.size(); ++i) phase[i] = (needed[i] && fwd[i] && !depends[i]) ? 0 : 1;
  return phase;
}

std::vector<int> assign_providers(const GraphIndex& gi, const std::vector<bool>& needed, const OpsetMap& opsets,
                                  const ProviderSet& ps) {
  const ir::Graph& g = *gi.graph;
  std::vector<int> r(g.nodes.size(), int(ps.cpu()));
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!needed[i]) continue;
    const ir::Node& n = g.nodes[i];
    auto it = opsets.find(n.domain);
    const int64_t v = it == opsets.end() ? 0 : it->second;
    int chosen = -1;
    for (size_t p = 0; p < ps.providers.size() && chosen < 0; ++p)
      if (ps.providers[p]->registry().find(n.domain, n.op_type, v)) chosen = int(p);
    if (chosen < 0) create_kernel(n, opsets, ExecOptions{});  // throws NotImplemented naming the node
    r[i] = chosen;
  }
  return r;
}

void make_slots(Plan& plan, const GraphIndex& gi, const std::vector<bool>& needed, const PlanRequest& req) {
  const ir::Graph& g = *gi.graph;
  auto& ids = plan.ids;
  std::vector<std::string> names;
  auto slot_id = [&](const std::string& n) {
    auto [it, fresh] = ids.emplace(n, int(names.size()));
    if (fresh) names.push_back(n);
    return it->second;
  };
  for (const auto& n : gi.input_names) slot_id(n);
  for (const auto& [n, t] : g.initializers) slot_id(n);
  for (size_t idx : gi.order)
    if (needed[idx])
      for (const auto& o : g.nodes[idx].outputs)
        if (!o.empty()) slot_id(o);
  plan.slots.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i) plan.slots[i].name = names[i];
  auto known = [&](const std::string& n, const char* what) {
    auto it = ids.find(n);
    if (it == ids.end()) throw_error<InvalidArgument>(what, " '", n, "' is not a value of the graph");
    return it->second;
  };
  for (const auto& o : req.outputs) plan.slots[size_t(known(o, "output"))].graph_output = true;
  for (const auto& o : req.backward_outputs) plan.slots[size_t(known(o, "backward output"))].graph_output = true;
  for (const auto& [v, s] : req.updates) {
    const int vs = known(v, "state update"), ss = known(s, "state");
    if (!gi.mutable_inits.count(s) || !g.initializer(s))
      throw_error<InvalidArgument>("state '", s, "' is not a mutable initializer");
    if (gi.producer.find(v) == gi.producer.end())
      throw_error<InvalidArgument>("state update '", v, "' is not computed by a node");
    Slot& sv = plan.slots[size_t(vs)];
    if (sv.state_target >= 0) throw_error<InvalidArgument>("'", v, "' updates two states");
    sv.state_target = ss;
  }
  std::unordered_set<int> targets;
  for (const auto& s : plan.slots)
    if (s.state_target >= 0 && !targets.insert(s.state_target).second)
      throw_error<InvalidArgument>("state '", plan.slots[size_t(s.state_target)].name, "' is updated twice");
  for (const auto& [in, like] : req.backward_inputs) {
    plan.slots[size_t(known(in, "backward input"))].backward_input = true;
    known(like, "forward output");
  }
}

void bind_inputs(Plan& plan, const GraphIndex& gi, const std::vector<const Value*>& inputs, const PlanRequest& req) {
  const ir::Graph& g = *gi.graph;
  auto& slots = plan.slots;
  plan.input_slots.resize(gi.input_names.size());
  for (size_t i = 0; i < gi.input_names.size(); ++i) {
    const int sid = plan.id(gi.input_names[i]);
    plan.input_slots[i] = sid;
    Slot& s = slots[size_t(sid)];
    const Value* v = inputs[i];
    if (s.backward_input) {
      // Fed to the backward part; typed like its forward output once that is prepared.
      s.state = Slot::State::kInput;
    } else if (v) {
      s.state = Slot::State::kInput;
      s.shape_known = true;
      s.value.kind = v->kind;
      s.value.elem = v->elem;
      s.value.key = v->key;
      if (v->kind == Value::Kind::kTensor) {
        s.device = v->tensor.device();
        s.value.tensor = Tensor::wrap(v->tensor.dtype(), v->tensor.shape(), nullptr, nullptr, s.device);
      }
    } else if (const Tensor* init = g.initializer(gi.input_names[i])) {
      s.state = gi.mutable_inits.count(gi.input_names[i]) ? Slot::State::kInput : Slot::State::kConstant;
      s.bound = true;
      s.shape_known = true;
      s.value = Value::of(*init);
      plan.input_slots[i] = -1;  // nothing to bind per run
    } else {
      // Not fed: an error only if a needed node (or a requested output) reads it.
      plan.input_slots[i] = -1;
      plan.missing.insert(gi.input_names[i]);
    }
  }
  for (const auto& o : req.outputs)
    if (plan.missing.count(o)) throw_error<InvalidArgument>("missing input '", o, "'");
  for (const auto& o : req.backward_outputs)
    if (plan.missing.count(o)) throw_error<InvalidArgument>("missing input '", o, "'");
  for (const auto& [n, t] : g.initializers) {
    Slot& s = slots[size_t(plan.id(n))];
    if (s.state != Slot::State::kUnset) continue;  // also a (fed or defaulted) graph input
    s.state = gi.mutable_inits.count(n) ? Slot::State::kInput : Slot::State::kConstant;
    s.bound = true;
    s.shape_known = true;
    s.value = Value::of(t);
  }
  for (const auto& [v, st] : req.updates)
    if (slots[size_t(plan.id(st))].state != Slot::State::kInput || !slots[size_t(plan.id(st))].bound)
      throw_error<InvalidArgument>("state '", st, "' is fed as an input: it cannot be updated in place");
}

void place_state(Plan& plan, const GraphIndex& gi, const std::vector<bool>& needed, const ProviderSet& ps,
                 const StateMirror& mirror, bool fold_shapes) {
  if (!mirror || ps.providers.size() < 2) return;
  const ir::Graph& g = *gi.graph;
  // Per bound mutable initializer: the one device its readers run on; the host where they differ.
  std::unordered_map<int, std::optional<Device>> device_of;
  auto read_on = [&](const std::string& name, const Device& d) {
    auto it = plan.ids.find(name);
    if (it == plan.ids.end()) return;
    const Slot& s = plan.slots[size_t(it->second)];
    if (s.state != Slot::State::kInput || !s.bound || !gi.mutable_inits.count(name)) return;
    auto [e, fresh] = device_of.emplace(it->second, d);
    if (!fresh && e->second && !(*e->second == d)) e->second = Device::cpu();
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!needed[i]) continue;
    const ir::Node& node = g.nodes[i];
    // Shape and Size of a state read its shape alone, fixed for the plan: folded now, no data read.
    if (fold_shapes && node.domain.empty() && (node.op_type == "Shape" || node.op_type == "Size")) continue;
    const Device d = ps.providers[size_t(plan.node_provider[i])]->device();
    for (const auto& n : node.inputs)
      if (!n.empty()) read_on(n, d);
    for (const auto& n : gi.implicit[i]) read_on(n, Device::cpu());  // subgraphs read the host's
  }
  for (const auto& [sid, d] : device_of) {
    if (!d || d->is_host()) continue;
    Slot& s = plan.slots[size_t(sid)];
    if (s.value.kind != Value::Kind::kTensor) continue;
    if (const Tensor* t = mirror(s.name, *d)) {
      s.value = Value::of(*t);
      s.device = *d;
    }
  }
}

namespace {

PrepareContext::In in_info(const Slot* s) {
  PrepareContext::In in;
  if (!s) return in;
  in.kind = s->value.kind;
  if (s->value.kind == Value::Kind::kTensor) {
    in.dtype = s->value.tensor.dtype();
    in.shape = s->value.tensor.shape();
  } else {
    in.dtype = s->value.elem;
    in.key = s->value.key;
  }
  if (s->state == Slot::State::kConstant) in.value = &s->value;
  return in;
}

// Evaluates a prepared node now (its inputs are constants, or it reads only shapes); its outputs
// become constants.
void fold(Plan& plan, Step& st, Kernel& kernel, const PrepareContext& ctx, const ExecOptions& options,
          DeviceContext* cpu) {
  auto& slots = plan.slots;
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
      shape_views.push_back(v.kind == Value::Kind::kTensor ? Value::of(Tensor::wrap(v.tensor.dtype(), v.tensor.shape(), nullptr))
                                                           : v);
      in_p.push_back(&shape_views.back());
    }
  }
  for (size_t k = 0; k < st.out.size(); ++k) {
    const auto& o = ctx.outputs()[k];
    if (st.out[k] >= 0 && !o.dynamic && o.kind == Value::Kind::kTensor) {
      if (o.inplace_of >= 0 && in_p[size_t(o.inplace_of)]) {
        // In place: the output starts as a copy of the input, which the kernel reads through it.
        outs[k] = Value::of(in_p[size_t(o.inplace_of)]->tensor.clone());
        in_p[size_t(o.inplace_of)] = &outs[k];
      } else {
        outs[k] = Value::of(Tensor::empty(o.dtype, o.shape));
      }
    }
    out_p.push_back(st.out[k] < 0 ? nullptr : &outs[k]);
  }
  std::vector<char> ws(ctx.workspace() + kArenaAlign);
  void* wsp = reinterpret_cast<void*>(arena_align(reinterpret_cast<uintptr_t>(ws.data())));
  RunContext rc(*st.node, in_p.data(), in_p.size(), out_p.data(), out_p.size(), nullptr, 0, wsp, ctx.workspace(),
                options, current_threads(), cpu);
  kernel.run(rc);
  for (size_t k = 0; k < st.out.size(); ++k) {
    if (st.out[k] < 0) continue;
    Slot& s = slots[size_t(st.out[k])];
    if (outs[k].kind == Value::Kind::kNone)
      throw_error<RuntimeError>("internal error: the kernel produced no value for output ", k);
    s.state = Slot::State::kConstant;
    s.shape_known = true;
    s.value = std::move(outs[k]);
    if (s.value.kind == Value::Kind::kTensor) plan.stats.constant_bytes += s.value.tensor.nbytes();
  }
  ++plan.stats.folded_nodes;
}

// Records the prepared outputs of a step that runs every time (static or dynamic).
void record_outputs(Plan& plan, Step& st, const PrepareContext& ctx, Device device) {
  auto& slots = plan.slots;
  for (size_t k = 0; k < st.out.size(); ++k) {
    if (st.out[k] < 0) continue;
    Slot& s = slots[size_t(st.out[k])];
    const auto& o = ctx.outputs()[k];
    s.device = device;
    if (o.inplace_of >= 0) st.inplace.emplace_back(int(k), o.inplace_of);
    if (st.dynamic) {
      s.state = Slot::State::kDynamic;
      continue;
    }
    s.shape_known = true;
    s.value = Value::of(Tensor::wrap(o.dtype, o.shape, nullptr, nullptr, device));
    if (s.graph_output && device.is_host()) {  // elsewhere: a device value, copied to the host after
      s.state = Slot::State::kOutput;
      continue;
    }
    s.state = Slot::State::kStatic;
    if (o.alias_of < 0) continue;
    const int src = st.in[size_t(o.alias_of)];
    const Slot& in = slots[size_t(src)];
    if (in.device != device) continue;  // its own buffer: the kernel copies (output_aliases_input is false)
    if (in.state == Slot::State::kConstant || (in.state == Slot::State::kStatic && in.const_view) || in.bound) {
      // A constant, or a mutable initializer: memory fixed for the plan's lifetime.
      s.value.tensor = in.value.tensor.reshaped(o.shape);
      s.const_view = true;
    } else if (in.state == Slot::State::kStatic && !in.per_run) {
      s.alias_root = in.alias_root >= 0 ? in.alias_root : src;
    } else {  // graph input, graph output or a view of one: memory changes every run
      st.rebind.emplace_back(st.out[k], src);
      s.per_run = true;
    }
  }
}

}  // namespace

void prepare_and_fold(Plan& plan, const GraphIndex& gi, const std::vector<bool>& needed,
                      const std::vector<int>& phases, const OpsetMap& opsets, const ExecOptions& options,
                      const PlanRequest& req, const ProviderSet& ps) {
  const ir::Graph& g = *gi.graph;
  auto& slots = plan.slots;
  DeviceContext* cpu_ctx = ps.contexts[ps.cpu()].get();
  auto prepare_node = [&](size_t idx, int phase) {
    const ir::Node& node = g.nodes[idx];
    Step st;
    st.node = &node;
    st.node_index = idx;
    st.phase = phase;
    st.provider = size_t(plan.node_provider[idx]);
    with_node_context(node, [&] {
      auto oit = opsets.find(node.domain);
      st.opset = oit == opsets.end() ? 0 : oit->second;
      // Nodes evaluated now (no subgraph, constant inputs) always run on the CPU provider. The kernel
      // is created before the inputs are checked: its attribute errors come first.
      bool all_const = node.subgraphs().empty();
      for (const auto& n : node.inputs)
        all_const = all_const && (n.empty() || slots[size_t(plan.id(n))].state == Slot::State::kConstant);
      if (all_const) st.provider = ps.cpu();
      // A provider's kernel may decline the node when it is made (NotImplemented: an attribute it
      // does not handle) as well as at prepare (below): the next provider with a kernel takes it.
      // The provider after st.provider with a kernel for the node; rethrows the CPU provider's refusal.
      auto decline = [&] {
        size_t next = st.provider + 1;
        while (next < ps.providers.size() && !ps.providers[next]->registry().find(node.domain, node.op_type, st.opset))
          ++next;
        if (st.provider == ps.cpu() || next >= ps.providers.size()) throw;
        st.provider = next;
      };
      std::unique_ptr<Kernel> kernel;
      for (;;) {
        try {
          kernel = create_kernel(node, opsets, options, ps.providers[st.provider]->registry());
          break;
        } catch (const NotImplemented&) {
          decline();
        }
      }
      const KernelRegistry& reg = ps.providers[st.provider]->registry();
      if (const auto* e = reg.find(node.domain, node.op_type, st.opset)) st.host_inputs = e->host_inputs;
      bool known = true;
      for (const auto& n : node.inputs) {
        const int sid = n.empty() ? -1 : plan.id(n);
        st.in.push_back(sid);
        if (sid < 0) continue;
        const Slot& s = slots[size_t(sid)];
        if (plan.missing.count(n)) throw_error<InvalidArgument>("missing input '", n, "'");
        if (s.state == Slot::State::kUnset) throw_error<InvalidGraph>("input '", n, "' is read before it is produced");
        known = known && s.shape_known;
      }
      for (const auto& n : gi.implicit[idx]) {
        auto it = plan.ids.find(n);
        if (it == plan.ids.end()) throw_error<InvalidGraph>("subgraph reads '", n, "', which is not defined");
        if (plan.missing.count(n)) throw_error<InvalidArgument>("missing input '", n, "'");
        st.imp.push_back(it->second);
        known = known && slots[size_t(it->second)].shape_known;
      }
      for (const auto& n : node.outputs) st.out.push_back(n.empty() ? -1 : plan.id(n));

      if (!known) {
        st.dynamic = true;
        for (int sid : st.out)
          if (sid >= 0) {
            slots[size_t(sid)].state = Slot::State::kDynamic;
            slots[size_t(sid)].device = ps.providers[st.provider]->device();
          }
        plan.kernels.push_back(std::move(kernel));
        st.kernel = plan.kernels.back().get();
        return;
      }
      std::vector<PrepareContext::In> ins, imps;
      for (int sid : st.in) ins.push_back(in_info(sid < 0 ? nullptr : &slots[size_t(sid)]));
      for (int sid : st.imp) imps.push_back(in_info(&slots[size_t(sid)]));
      std::optional<PrepareContext> pc;
      for (;;) {
        pc.emplace(node, st.opset, options, ins, node.outputs.size(), imps);
        try {
          kernel->prepare(*pc);
          break;
        } catch (const NotImplemented&) {
          // A provider may decline a node it cannot run (an element type, an attribute): the next
          // provider with a kernel for it takes the node; the CPU provider's refusal stands.
          decline();
          const KernelRegistry& reg2 = ps.providers[st.provider]->registry();
          kernel = create_kernel(node, opsets, options, reg2);
          st.host_inputs = reg2.find(node.domain, node.op_type, st.opset)->host_inputs;
        }
      }
      PrepareContext& ctx = *pc;
      bool any_dynamic = false;
      for (size_t k = 0; k < st.out.size(); ++k) {
        if (st.out[k] < 0) continue;
        const auto& o = ctx.outputs()[k];
        if (!o.set) throw_error<RuntimeError>("internal error: the kernel did not prepare output ", k);
        if (o.dynamic || o.kind != Value::Kind::kTensor || o.dtype == DType::kString) any_dynamic = true;
      }
      const bool shapes_only = ctx.reads_shapes_only() && gi.implicit[idx].empty();
      bool updates_state = false;
      for (int sid : st.out) updates_state = updates_state || (sid >= 0 && slots[size_t(sid)].state_target >= 0);
      if ((all_const || shapes_only) && ctx.deterministic() && !updates_state && options.fold_constants) {
        if (st.provider != ps.cpu()) {  // fold with the CPU provider's kernel
          st.provider = ps.cpu();
          kernel = create_kernel(node, opsets, options);
          kernel->prepare(ctx);
        }
        fold(plan, st, *kernel, ctx, options, cpu_ctx);
        return;
      }
      st.dynamic = any_dynamic;
      record_outputs(plan, st, ctx, ps.providers[st.provider]->device());
      st.ws_bytes = ctx.workspace();
      plan.kernels.push_back(std::move(kernel));
      st.kernel = plan.kernels.back().get();
    });
    if (!st.kernel) return;
    if (st.provider != 0 && ps.providers.size() > 1) ++plan.stats.fallback_steps;  // not the first choice
    plan.steps.push_back(std::move(st));
  };
  for (size_t idx : gi.order)
    if (needed[idx] && phases[idx] == 0) prepare_node(idx, 0);
  if (!req.partial()) return;
  // Backward inputs take the type and shape of their forward outputs.
  for (const auto& [in, like] : req.backward_inputs) {
    Slot& b = slots[size_t(plan.id(in))];
    const Slot& f = slots[size_t(plan.id(like))];
    if (!f.shape_known || f.value.kind != Value::Kind::kTensor)
      throw_error<InvalidArgument>("backward input '", in, "': forward output '", like,
                                   "' has no shape known when planning (a data-dependent shape)");
    b.shape_known = true;
    b.value = Value::of(Tensor::wrap(f.value.tensor.dtype(), f.value.tensor.shape(), nullptr));
    plan.backward_input_slots.push_back(plan.id(in));
  }
  for (size_t idx : gi.order)
    if (needed[idx] && phases[idx] == 1) prepare_node(idx, 1);
}

void insert_copies(Plan& plan, const ProviderSet& ps) {
  auto& slots = plan.slots;
  // A value whose kind is only known while running (the output of a step with run-time shapes) is
  // copied as a tensor: a sequence there fails the copy step with its error.
  auto may_be_tensor = [](const Slot& s) {
    return s.value.kind == Value::Kind::kTensor || (s.value.kind == Value::Kind::kNone && s.state == Slot::State::kDynamic);
  };
  std::map<std::pair<int, Device>, int> copies;  // (value slot, device) -> slot of its copy there
  std::vector<int> producer(slots.size(), -1);
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (int sid : plan.steps[s].out)
      if (sid >= 0) producer[size_t(sid)] = int(s);
  auto copy_of = [&](int sid, Device to) {
    auto key = std::make_pair(sid, to);
    if (auto it = copies.find(key); it != copies.end()) return it->second;
    const Slot src = slots[size_t(sid)];
    Slot c;
    c.name = src.name + "@" + to.name();
    c.device = to;
    c.shape_known = src.shape_known;
    c.state = src.state == Slot::State::kDynamic || !src.shape_known ? Slot::State::kDynamic : Slot::State::kStatic;
    if (src.value.kind == Value::Kind::kTensor)
      c.value = Value::of(Tensor::wrap(src.value.tensor.dtype(), src.value.tensor.shape(), nullptr, nullptr, to));
    const int cid = int(slots.size());
    if (src.state == Slot::State::kConstant && src.value.kind == Value::Kind::kTensor && !to.is_host() &&
        src.value.tensor.dtype() != DType::kString) {
      // A constant moves once, now: its copy on the device is a constant too (no step per run).
      c.state = Slot::State::kConstant;
      c.value = Value::of(copy_to_device(ps, src.value.tensor, to));
      slots.push_back(std::move(c));
      plan.ids[slots.back().name] = cid;
      plan.stats.constant_bytes += slots.back().value.tensor.nbytes();
      copies[key] = cid;
      return cid;
    }
    slots.push_back(std::move(c));
    plan.ids[slots.back().name] = cid;
    ir::Node n;
    n.op_type = to.is_host() ? "MemcpyToHost" : "MemcpyFromHost";
    n.domain = "onnxtrain.runtime";
    n.name = "copy of '" + src.name + "' to " + to.name();
    n.inputs = {src.name};
    n.outputs = {slots.back().name};
    plan.synthetic.push_back(std::move(n));
    Step st;
    st.node = &plan.synthetic.back();
    st.provider = ps.of_device(to.is_host() ? src.device : to);
    const int p = producer[size_t(sid)];
    st.phase = src.backward_input ? 1 : p >= 0 ? plan.steps[size_t(p)].phase : 0;
    st.in = {sid};
    st.out = {cid};
    st.dynamic = slots[size_t(cid)].state == Slot::State::kDynamic;
    st.copy = true;
    plan.kernels.push_back(std::make_unique<CopyKernel>(*ps.providers[st.provider]));
    st.kernel = plan.kernels.back().get();
    plan.steps.push_back(std::move(st));
    ++plan.stats.device_copies;
    copies[key] = cid;
    return cid;
  };
  const size_t n = plan.steps.size();
  for (size_t s = 0; s < n; ++s) {
    Device dev = ps.providers[plan.steps[s].provider]->device();
    for (size_t j = 0; j < plan.steps[s].in.size(); ++j) {
      const int sid = plan.steps[s].in[j];
      if (sid < 0) continue;
      const bool host = std::find(plan.steps[s].host_inputs.begin(), plan.steps[s].host_inputs.end(), j) !=
                        plan.steps[s].host_inputs.end();
      const Device need = host ? Device::cpu() : dev;
      if (slots[size_t(sid)].device != need && may_be_tensor(slots[size_t(sid)])) plan.steps[s].in[j] = copy_of(sid, need);
    }
    for (auto& sid : plan.steps[s].imp)  // subgraphs read outer values in host memory
      if (!slots[size_t(sid)].device.is_host() && may_be_tensor(slots[size_t(sid)])) sid = copy_of(sid, Device::cpu());
  }
  // Results come back to the host.
  for (size_t i = 0, m = slots.size(); i < m; ++i)
    if (slots[i].graph_output && !slots[i].device.is_host()) {
      const int cid = copy_of(int(i), Device::cpu());
      slots[i].graph_output = false;
      slots[size_t(cid)].graph_output = true;
      if (slots[size_t(cid)].state == Slot::State::kStatic) slots[size_t(cid)].state = Slot::State::kOutput;
      plan.result_alias[int(i)] = cid;
    }
}

void schedule_steps(Plan& plan) {
  auto& steps = plan.steps;
  const size_t n = steps.size();
  std::vector<int> producer(plan.slots.size(), -1);
  for (size_t s = 0; s < n; ++s)
    for (int sid : steps[s].out)
      if (sid >= 0) producer[size_t(sid)] = int(s);
  std::vector<std::vector<int>> succ(n);
  auto add_edge = [&](int a, int b) { succ[size_t(a)].push_back(b); };
  auto reads = [&](const Step& st, auto&& f) {
    for (int sid : st.in)
      if (sid >= 0) f(sid);
    for (int sid : st.imp) f(sid);
  };
  for (size_t s = 0; s < n; ++s)
    reads(steps[s], [&](int sid) {
      if (producer[size_t(sid)] >= 0 && producer[size_t(sid)] != int(s)) add_edge(producer[size_t(sid)], int(s));
    });
  // In-place writers after every other reader of what they overwrite (and of its static views),
  // when that reader does not itself depend on the writer.
  bool any_inplace = false;
  for (const auto& st : steps) any_inplace = any_inplace || !st.inplace.empty();
  if (any_inplace) {
    std::vector<std::vector<int>> readers(plan.slots.size());
    for (size_t s = 0; s < n; ++s) reads(steps[s], [&](int sid) { readers[size_t(sid)].push_back(int(s)); });
    auto root_of = [&](int sid) {
      const Slot& sl = plan.slots[size_t(sid)];
      return sl.alias_root >= 0 ? sl.alias_root : sid;
    };
    std::vector<std::vector<int>> views(plan.slots.size());
    for (size_t i = 0; i < plan.slots.size(); ++i)
      if (plan.slots[i].alias_root >= 0) views[size_t(plan.slots[i].alias_root)].push_back(int(i));
    std::vector<char> mark(n);
    for (size_t w = 0; w < n; ++w) {
      for (const auto& [k, j] : steps[w].inplace) {
        const int in = steps[w].in[size_t(j)];
        if (in < 0) continue;
        const int root = root_of(in);
        std::vector<int> others;
        for (int sid : views[size_t(root)])
          for (int r : readers[size_t(sid)]) others.push_back(r);
        for (int r : readers[size_t(root)]) others.push_back(r);
        // Steps reachable from w (with the edges so far).
        std::fill(mark.begin(), mark.end(), 0);
        std::vector<int> stack{int(w)};
        while (!stack.empty()) {
          const int x = stack.back();
          stack.pop_back();
          for (int y : succ[size_t(x)])
            if (!mark[size_t(y)]) mark[size_t(y)] = 1, stack.push_back(y);
        }
        for (int r : others)
          if (r != int(w) && !mark[size_t(r)] && steps[size_t(r)].phase <= steps[w].phase) add_edge(r, int(w));
      }
    }
  }
  // Kahn's algorithm; among ready steps the forward part first, then the earlier one.
  std::vector<int> pending(n, 0);
  for (size_t s = 0; s < n; ++s)
    for (int t : succ[s]) ++pending[size_t(t)];
  using Key = std::pair<int, int>;  // (phase, original index)
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
  for (size_t s = 0; s < n; ++s)
    if (pending[s] == 0) ready.emplace(steps[s].phase, int(s));
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int s = ready.top().second;
    ready.pop();
    order.push_back(s);
    for (int t : succ[size_t(s)])
      if (--pending[size_t(t)] == 0) ready.emplace(steps[size_t(t)].phase, t);
  }
  if (order.size() != n) throw_error<RuntimeError>("internal error: the step graph has a cycle");
  std::vector<Step> sorted;
  sorted.reserve(n);
  for (int s : order) sorted.push_back(std::move(steps[size_t(s)]));
  steps = std::move(sorted);
  plan.cut = 0;
  while (plan.cut < n && steps[plan.cut].phase == 0) ++plan.cut;
  for (size_t s = plan.cut; s < n; ++s)
    if (steps[s].phase == 0) throw_error<RuntimeError>("internal error: a forward step after the cut");
}

void compute_liveness(Plan& plan) {
  auto& slots = plan.slots;
  const int nsteps = int(plan.steps.size());
  for (auto& s : slots) s.producer = s.last_use = -1;
  for (int s = 0; s < nsteps; ++s) {
    const Step& st = plan.steps[size_t(s)];
    for (int sid : st.out)
      if (sid >= 0) slots[size_t(sid)].producer = s;
    for (int sid : st.in)
      if (sid >= 0) slots[size_t(sid)].last_use = s;
    for (int sid : st.imp)
      if (sid >= 0) slots[size_t(sid)].last_use = s;
  }
  for (auto& s : slots) {
    // Results stay to the end of their phase (the forward part's results: to the end of the run,
    // as the backward part may read them); state updates until they are copied at the end.
    if (s.graph_output || s.state_target >= 0) s.last_use = nsteps;
    if (s.last_use < s.producer) s.last_use = s.producer;
  }
  // Run-time views keep what they view alive: an output of a dynamic step may view its inputs
  // (aliasing kernels such as Reshape, or ReduceSum with no axes; graph outputs never do), and a
  // rebound slot views its source. A view comes after what it views, so one pass from the last
  // step back settles chains.
  for (int si = nsteps - 1; si >= 0; --si) {
    const Step& st = plan.steps[size_t(si)];
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
}

void assign_inplace(Plan& plan, bool alias_inputs) {
  auto& slots = plan.slots;
  for (size_t p = 0; p < plan.steps.size(); ++p) {
    Step& st = plan.steps[p];
    if (st.dynamic) continue;  // handled while running: the output starts as a copy of the input
    for (const auto& [k, j] : st.inplace) {
      const int out = st.out[size_t(k)], in = st.in[size_t(j)];
      if (out < 0 || in < 0) continue;
      Slot& o = slots[size_t(out)];
      int uses = 0;
      for (int sid : st.in) uses += sid == in;
      for (int sid : st.imp) uses += sid == in;
      const Slot& i = slots[size_t(in)];
      bool aliased = false;
      if (o.state == Slot::State::kStatic && o.alias_root < 0 && !o.const_view && !o.per_run && uses == 1) {
        if (o.state_target == in && i.bound && i.last_use <= int(p)) {
          // The state's own update: write straight into its storage.
          o.in_state = true;
          o.value.tensor = i.value.tensor;
          ++plan.stats.state_in_place;
          aliased = true;
        } else if (o.state_target < 0 && alias_inputs) {
          const int root = i.alias_root >= 0 ? i.alias_root : in;
          Slot& r = slots[size_t(root)];
          if (is_arena(r) && !r.graph_output && r.state_target < 0 && r.last_use <= int(p)) {
            o.alias_root = root;
            r.last_use = std::max(r.last_use, o.last_use);
            aliased = true;
          }
        }
      }
      if (aliased) {
        ++plan.stats.inplace_aliased;
      } else {
        st.pre_copy.emplace_back(k, j);
        ++plan.stats.inplace_copied;
      }
    }
  }
}

size_t place_blocks(std::vector<Block>& blocks) {
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  size_t total = 0;
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;
  for (size_t bi : order) {
    Block& b = blocks[bi];
    busy.clear();
    for (size_t pi : placed) {
      const Block& q = blocks[pi];
      if (q.begin <= b.end && b.begin <= q.end) busy.emplace_back(size_t(q.offset), size_t(q.offset) + q.bytes);
    }
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap that holds the block, else after the last busy range.
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, off = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo >= off && lo - off >= b.bytes && lo - off < best_gap) {
        best = off;
        best_gap = lo - off;
      }
      off = std::max(off, hi);
    }
    b.offset = int64_t(best != SIZE_MAX ? best : off);
    total = std::max(total, size_t(b.offset) + b.bytes);
    placed.push_back(bi);
  }
  return total;
}

void layout_arena(Plan& plan, const ProviderSet& ps, bool reuse) {
  auto& slots = plan.slots;
  std::map<Device, std::vector<Block>> by_device;
  for (size_t i = 0; i < slots.size(); ++i)
    if (is_arena(slots[i]))
      by_device[slots[i].device].push_back(Block{arena_align(std::max<size_t>(slots[i].value.tensor.nbytes(), 1)),
                                                 slots[i].producer, slots[i].last_use, int(i)});
  for (size_t si = 0; si < plan.steps.size(); ++si) {
    const Step& st = plan.steps[si];
    if (st.ws_bytes > 0 && !st.dynamic)
      by_device[ps.providers[st.provider]->device()].push_back(Block{arena_align(st.ws_bytes), int(si), int(si), -1 - int(si)});
  }
  plan.arena_bytes = 0;
  plan.stats.peak_live_bytes = 0;
  size_t naive = 0;
  const int last = int(plan.steps.size());
  for (auto& [dev, blocks] : by_device) {
    for (auto& b : blocks) {
      naive += b.bytes;
      if (!reuse) b.begin = 0, b.end = last;  // every block lives the whole run: nothing shares memory
    }
    // The most bytes live at once (the arena's lower bound; what the layout adds is fragmentation).
    std::vector<std::pair<int, int64_t>> events;
    for (const auto& b : blocks) events.emplace_back(b.begin, int64_t(b.bytes)), events.emplace_back(b.end + 1, -int64_t(b.bytes));
    std::sort(events.begin(), events.end());
    int64_t live = 0, peak = 0;
    for (const auto& [t, d] : events) peak = std::max(peak, live += d);
    plan.stats.peak_live_bytes += size_t(peak);
    const size_t bytes = place_blocks(blocks);
    plan.arenas[dev] = bytes;
    plan.arena_bytes += bytes;
    if (bytes > allocation_limit()) {  // name the largest block: the likely culprit
      const Block& big = *std::max_element(blocks.begin(), blocks.end(),
                                           [](const Block& a, const Block& b) { return a.bytes < b.bytes; });
      const int step = big.owner >= 0 ? slots[size_t(big.owner)].producer : -1 - big.owner;
      const ir::Node* node = step >= 0 ? plan.steps[size_t(step)].node : nullptr;
      std::string what = big.owner >= 0 ? "value '" + slots[size_t(big.owner)].name + "'" : std::string("the workspace");
      if (node) what += (big.owner >= 0 ? " computed by " : " of ") + node->describe();
      throw_error<RuntimeError>("the execution plan needs ", bytes, " bytes of memory on ", dev.name(), ", over ",
                                allocation_limit_text(), "; its largest block is ", what, " (", big.bytes, " bytes)");
    }
    for (const Block& b : blocks) {
      if (b.owner >= 0) slots[size_t(b.owner)].offset = b.offset;
      else plan.steps[size_t(-1 - b.owner)].ws_offset = b.offset;
    }
  }
  plan.stats.arena_bytes = plan.arena_bytes;
  plan.stats.naive_bytes = naive;
}

void wire(Plan& plan, const PlanRequest& req) {
  auto& slots = plan.slots;
  const int nsteps = int(plan.steps.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = slots[i];
    if (s.state == Slot::State::kOutput) {
      const int phase = s.producer >= 0 && size_t(s.producer) >= plan.cut ? 1 : 0;
      plan.output_alloc[phase].push_back(int(i));
    }
    if (s.state == Slot::State::kDynamic && !s.graph_output && s.state_target < 0 && s.producer >= 0 &&
        s.last_use < nsteps)
      plan.steps[size_t(s.last_use)].release.push_back(int(i));
    if (s.state_target >= 0 && !s.in_state) {
      plan.state_copies.emplace_back(int(i), s.state_target);
      ++plan.stats.state_copies;
    }
  }
  auto result = [&](const std::string& name) {
    const int sid = plan.id(name);
    auto it = plan.result_alias.find(sid);
    return it == plan.result_alias.end() ? sid : it->second;
  };
  for (const auto& o : req.outputs) plan.result_slots[0].push_back(result(o));
  for (const auto& o : req.backward_outputs) plan.result_slots[1].push_back(result(o));
  size_t off = 0;
  for (auto& st : plan.steps) {
    st.ptr_offset = off;
    off += st.in.size() + st.out.size() + st.imp.size();
  }
  plan.num_ptrs = off;
  plan.stats.steps = size_t(nsteps);
  for (const auto& st : plan.steps) plan.stats.dynamic_steps += st.dynamic ? 1 : 0;
}

}  // namespace planner

Tensor copy_to_device(const ProviderSet& ps, const Tensor& host, const Device& dev) {
  const size_t p = ps.of_device(dev);
  Tensor t = Tensor::empty(host.dtype(), host.shape(), ps.providers[p]->allocator());
  ps.providers[p]->copy(host, t, *ps.contexts[p]);
  ps.providers[p]->synchronize(*ps.contexts[p]);
  return t;
}

std::shared_ptr<void> allocate_arena(const ProviderSet& ps, const Device& dev, size_t bytes) {
  Allocator& a = ps.providers[ps.of_device(dev)]->allocator();
  const int64_t n = int64_t(arena_align(bytes));
  void* p = a.allocate(size_t(n), kArenaAlign);
  count_arena_bytes(n);
  return std::shared_ptr<void>(p, [&a, n](void* q) {
    a.deallocate(q);
    count_arena_bytes(-n);
  });
}

std::unique_ptr<Frame> make_frame(const Plan& plan, const ProviderSet& ps, const ArenaSet* shared) {
  auto f = std::make_unique<Frame>();
  const auto& slots = plan.slots;
  f->values.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) f->values[i] = slots[i].value;
  for (const auto& [dev, bytes] : plan.arenas) {
    if (bytes == 0) continue;
    if (shared) {
      auto it = shared->find(dev);
      if (it == shared->end() || it->second.bytes < arena_align(bytes))
        throw_error<RuntimeError>("internal error: the shared arena of ", dev.name(), " is smaller than the plan's");
      f->arenas[dev] = it->second.memory;
    } else {
      f->arenas[dev] = allocate_arena(ps, dev, bytes);
    }
  }
  auto base = [&](const Device& d) { return static_cast<char*>(f->arenas.count(d) ? f->arenas.at(d).get() : nullptr); };
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].offset >= 0)
      f->values[i].tensor = Tensor::wrap(slots[i].value.tensor.dtype(), slots[i].value.tensor.shape(),
                                         base(slots[i].device) + slots[i].offset, nullptr, slots[i].device);
  // Views of arena memory (chains end at an arena slot or at a state's storage).
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].alias_root < 0) continue;
    int root = slots[i].alias_root;
    while (slots[size_t(root)].alias_root >= 0) root = slots[size_t(root)].alias_root;
    f->values[i].tensor = Tensor::wrap(slots[i].value.tensor.dtype(), slots[i].value.tensor.shape(),
                                       f->values[size_t(root)].tensor.raw_data(), nullptr, slots[size_t(root)].device);
  }
  f->ptrs.assign(plan.num_ptrs, nullptr);
  for (const auto& st : plan.steps) {
    Value** p = f->ptrs.data() + st.ptr_offset;
    for (size_t k = 0; k < st.in.size(); ++k) p[k] = st.in[k] < 0 ? nullptr : &f->values[size_t(st.in[k])];
    for (const auto& [k, j] : st.pre_copy) p[j] = &f->values[size_t(st.out[size_t(k)])];
    p += st.in.size();
    for (size_t k = 0; k < st.out.size(); ++k) p[k] = st.out[k] < 0 ? nullptr : &f->values[size_t(st.out[k])];
    p += st.out.size();
    for (size_t k = 0; k < st.imp.size(); ++k) p[k] = &f->values[size_t(st.imp[k])];
  }
  return f;
}

std::shared_ptr<Plan> build_plan(const GraphIndex& gi, const OpsetMap& opsets, const ExecOptions& options,
                                 const std::vector<const Value*>& inputs, const PlanRequest& req,
                                 const ProviderSet& providers, const planner::StateMirror& mirror) {
  auto plan = std::make_shared<Plan>();
  std::vector<std::string> roots = req.outputs;
  for (const auto& [v, s] : req.updates) roots.push_back(v);
  roots.insert(roots.end(), req.backward_outputs.begin(), req.backward_outputs.end());
  const std::vector<bool> needed = planner::needed_nodes(gi, roots);
  const std::vector<int> phases = planner::node_phases(gi, needed, req);
  plan->node_provider = planner::assign_providers(gi, needed, opsets, providers);
  planner::make_slots(*plan, gi, needed, req);
  planner::bind_inputs(*plan, gi, inputs, req);
  planner::place_state(*plan, gi, needed, providers, mirror, options.fold_constants);
  planner::prepare_and_fold(*plan, gi, needed, phases, opsets, options, req, providers);
  planner::insert_copies(*plan, providers);
  planner::schedule_steps(*plan);
  planner::compute_liveness(*plan);
  planner::assign_inplace(*plan, options.inplace_aliasing);
  planner::layout_arena(*plan, providers, options.reuse_memory);
  planner::wire(*plan, req);
  // No frame yet: the executor makes one per run in flight (a plain run's over the arenas it
  // shares between its plans), and static workspaces' pointers resolve against that frame's arena.
  return plan;
}

}  // namespace onnxtrain::runtime
