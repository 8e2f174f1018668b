// Control flow: If, Loop and SequenceMap. Their bodies run in SubgraphRunners the runtime hands over
// (ExecOptions::subgraphs: nested executors, each caching a plan per shape signature), created once
// per kernel instance. A subgraph's free variables (outer-scope
// values) are fed after its declared inputs, taken from the node's implicit inputs
// (ir::implicit_inputs order). Outputs are dynamic: branches and iterations may change shapes.
//   If   (cond: bool[1])                          -> outputs of then_branch or else_branch
//   Loop (M: int64 scalar?, cond: bool?, v[N])    -> v_final[N], scan[K] (per-iteration values
//        stacked on a new first axis); body(i, cond, v[N]) -> (cond, v[N], scan[K]).
//        Iterates while i < M (when given) and cond (the input, then each body output).
//   SequenceMap (S, X_1..)                       -> sequences Y_k[j] = body(S[j], X_1[j] or X_1, ..)_k
//        for j < len(S); other sequence inputs must have S's length, tensor inputs go to every call.
#include <cstring>
#include <limits>
#include <unordered_map>

#include "kernels/cpu/common.h"
#include "kernels/registry.h"
#include "kernels/shape/control_flow.h"

namespace onnxtrain::kernels::cpu {

namespace {

// A subgraph with its runner and where each of its free variables sits among the node's
// implicit inputs.
struct Subgraph {
  std::shared_ptr<const ir::Graph> graph;
  std::unique_ptr<SubgraphRunner> exec;
  std::vector<size_t> outer;  // free variable k -> index into RunContext::implicit
  std::vector<const Value*> feeds;

  Subgraph(const KernelInfo& info, const char* attr) : graph(info.attr_graph(attr)) {
    if (!graph) info.fail("missing subgraph attribute '", attr, "'");
    const auto implicit = ir::implicit_inputs(info.node());
    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < implicit.size(); ++i) index.emplace(implicit[i], i);
    std::vector<std::string> free = graph->free_variables();
    for (const auto& f : free) outer.push_back(index.at(f));
    if (!info.options().subgraphs) info.fail("no subgraph runner: control flow runs inside an executor");
    exec = info.options().subgraphs(graph, info.opsets(), info.options(), std::move(free));
  }

  /// Runs with `inputs` for the declared inputs; outer-scope values come from ctx.
  std::vector<Value> run(const RunContext& ctx, const std::vector<const Value*>& inputs,
                         const std::vector<size_t>& outputs) {
    feeds.assign(inputs.begin(), inputs.end());
    for (size_t k : outer) feeds.push_back(&ctx.implicit(k));
    return exec->run(feeds, outputs);
  }
};

// Reads a one-element bool tensor (If's cond, Loop's cond input and body output).
bool read_cond(const RunContext& ctx, const Value& v, const char* what) {
  if (v.kind != Value::Kind::kTensor || v.tensor.dtype() != DType::kBool || v.tensor.numel() != 1)
    ctx.fail(what, " must be a single bool, got ",
             v.kind == Value::Kind::kTensor ? v.tensor.describe() : std::string("a non-tensor value"));
  return *v.tensor.data<bool>();
}

// Indices of the node outputs it names (what a subgraph run must produce), offset by `first`.
std::vector<size_t> requested_outputs(const RunContext& ctx, size_t first) {
  std::vector<size_t> r;
  for (size_t i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.has_output(i)) r.push_back(first + i);
  return r;
}

// ---------------------------------------------------------------- If
class IfKernel final : public Kernel {
 public:
  explicit IfKernel(const KernelInfo& info) : then_(info, "then_branch"), else_(info, "else_branch") {
    shape::check_if_branches(info, *then_.graph, *else_.graph);
  }
  void prepare(PrepareContext& ctx) override {
    shape::check_if_cond(ctx);
    shape::subgraph_outputs_dynamic(ctx, *then_.graph, 0);
  }
  void run(RunContext& ctx) override {
    Subgraph& branch = read_cond(ctx, ctx.input_value(0), "cond") ? then_ : else_;
    const auto wanted = requested_outputs(ctx, 0);
    if (wanted.empty()) return;
    std::vector<Value> results = branch.run(ctx, {}, wanted);
    for (size_t k = 0; k < wanted.size(); ++k) ctx.output_value(wanted[k]) = std::move(results[k]);
  }

 private:
  Subgraph then_, else_;
};

// ---------------------------------------------------------------- Loop
class LoopKernel final : public Kernel {
 public:
  explicit LoopKernel(const KernelInfo& info) : body_(info, "body") {
    const shape::LoopCounts c = shape::loop_counts(info, *body_.graph);
    carried_ = c.carried;
    scans_ = c.scans;
  }

  void prepare(PrepareContext& ctx) override {
    shape::check_loop_inputs(ctx);
    shape::subgraph_outputs_dynamic(ctx, *body_.graph, 1);
  }

  void run(RunContext& ctx) override {
    int64_t max_trip = std::numeric_limits<int64_t>::max();
    if (ctx.has_input(0)) max_trip = read_int_list(ctx.input(0))[0];
    bool cond = ctx.has_input(1) ? read_cond(ctx, ctx.input_value(1), "cond") : true;

    // Body outputs to compute: cond, every loop-carried value, the scan outputs the node names.
    std::vector<size_t> wanted;
    for (size_t i = 0; i <= carried_; ++i) wanted.push_back(i);
    std::vector<size_t> scan_out;  // node output index of each wanted scan output
    for (size_t k = 0; k < scans_; ++k)
      if (ctx.has_output(carried_ + k)) {
        wanted.push_back(1 + carried_ + k);
        scan_out.push_back(carried_ + k);
      }
    // Scan outputs accumulate in one growing buffer each (no tensor per iteration: a loop of
    // millions of small iterations would otherwise leave millions of allocations to free).
    struct Scan {
      DType dt = DType::kUndefined;
      Shape shape;
      int64_t count = 0;
      std::vector<char> bytes;       // numeric types
      std::vector<Tensor> strings;   // string tensors, one per iteration
    };
    std::vector<Scan> scans(scan_out.size());

    Value iter = Value::of(Tensor::scalar<int64_t>(0));
    Value cond_v = Value::of(Tensor::scalar<bool>(true));
    std::vector<Value> state;  // loop-carried values after the latest iteration
    std::vector<const Value*> inputs(2 + carried_);
    inputs[0] = &iter;
    inputs[1] = &cond_v;
    for (size_t i = 0; i < carried_; ++i) inputs[2 + i] = &ctx.input_value(2 + i);

    uint64_t scan_bytes = 0;  // a runaway loop with scan outputs fails here, not in the allocator
    int64_t trips = 0;
    for (; trips < max_trip && cond; ++trips) {
      *iter.tensor.data<int64_t>() = trips;
      *cond_v.tensor.data<bool>() = cond;
      std::vector<Value> out = body_.run(ctx, inputs, wanted);
      cond = read_cond(ctx, out[0], "the body's cond output");
      state.assign(std::make_move_iterator(out.begin() + 1), std::make_move_iterator(out.begin() + 1 + long(carried_)));
      for (size_t i = 0; i < carried_; ++i) inputs[2 + i] = &state[i];
      for (size_t k = 0; k < scan_out.size(); ++k) {
        Value& v = out[1 + carried_ + k];
        Scan& sc = scans[k];
        if (v.kind != Value::Kind::kTensor)
          ctx.fail("scan output ", scan_out[k] - carried_, " must be a tensor in every iteration");
        if (sc.count == 0) sc.dt = v.tensor.dtype(), sc.shape = v.tensor.shape();
        if (v.tensor.shape() != sc.shape || v.tensor.dtype() != sc.dt)
          ctx.fail("scan output ", scan_out[k] - carried_, " is ", v.tensor.describe(), " in iteration ", trips, " but ",
                   dtype_name(sc.dt), shape_to_string(sc.shape), " in iteration 0");
        const bool text = sc.dt == DType::kString;
        scan_bytes += text ? uint64_t(v.tensor.numel()) * 32 + 64 : v.tensor.nbytes();
        if (scan_bytes > allocation_limit())
          ctx.fail("scan outputs after ", trips + 1, " iterations need ", scan_bytes, " bytes, over ",
                   allocation_limit_text());
        if (text) {
          sc.strings.push_back(std::move(v.tensor));
        } else {
          const char* b = static_cast<const char*>(v.tensor.raw_data());
          sc.bytes.insert(sc.bytes.end(), b, b + v.tensor.nbytes());
        }
        ++sc.count;
      }
    }

    for (size_t i = 0; i < carried_; ++i) {
      if (!ctx.has_output(i)) continue;
      if (trips > 0) {
        ctx.output_value(i) = std::move(state[i]);
      } else {  // no iteration: the initial values, copied out of the caller's memory
        Value v = ctx.input_value(2 + i);
        if (v.kind == Value::Kind::kTensor) v.tensor = v.tensor.clone();
        for (auto& t : v.sequence) t = t.clone();
        ctx.output_value(i) = std::move(v);
      }
    }
    for (size_t k = 0; k < scan_out.size(); ++k) {
      const size_t o = scan_out[k];
      const Scan& sc = scans[k];
      if (sc.count == 0) {  // zero iterations: [0, declared dims...] when the body declares them
        const auto& type = body_.graph->outputs[1 + o].type;
        Shape shape{0};
        bool known = type.has_shape;
        for (const auto& dim : type.dims) {
          known = known && dim.fixed();
          shape.push_back(dim.value);
        }
        if (!known) shape = {0};
        ctx.allocate_output(o, type.elem == DType::kUndefined ? DType::kFloat32 : type.elem, shape);
        continue;
      }
      Shape shape = sc.shape;
      shape.insert(shape.begin(), sc.count);
      Tensor& y = ctx.allocate_output(o, sc.dt, shape);
      if (sc.dt != DType::kString) {
        if (!sc.bytes.empty()) std::memcpy(y.raw_data(), sc.bytes.data(), sc.bytes.size());
        continue;
      }
      const int64_t per = shape_numel(sc.shape);
      for (size_t i = 0; i < sc.strings.size(); ++i) {
        Tensor dst = Tensor::wrap(y.dtype(), sc.shape,
                                  static_cast<char*>(y.raw_data()) + size_t(i) * size_t(per) * dtype_size(y.dtype()));
        dst.copy_from(sc.strings[i]);
      }
    }
  }

 private:
  Subgraph body_;
  size_t carried_ = 0, scans_ = 0;
};

// ---------------------------------------------------------------- SequenceMap
class SequenceMapKernel final : public Kernel {
 public:
  explicit SequenceMapKernel(const KernelInfo& info) : body_(info, "body") {
    shape::check_sequence_map(info, *body_.graph);
  }

  void prepare(PrepareContext& ctx) override {
    shape::check_sequence_map_inputs(ctx);
    for (size_t k = 0; k < ctx.num_outputs(); ++k)
      if (ctx.has_output(k)) ctx.set_output_sequence(k, declared_elem(k));
  }

  void run(RunContext& ctx) override {
    const size_t n_in = ctx.num_inputs(), len = ctx.input_value(0).sequence.size();
    for (size_t i = 1; i < n_in; ++i) {
      const Value& v = ctx.input_value(i);
      if (v.kind == Value::Kind::kSequence && v.sequence.size() != len)
        ctx.fail("input ", i, " is a sequence of length ", v.sequence.size(), ", input 0 one of length ", len);
    }
    const auto wanted = requested_outputs(ctx, 0);
    std::vector<Value> outs(wanted.size());
    for (size_t k = 0; k < wanted.size(); ++k) {
      outs[k].kind = Value::Kind::kSequence;
      outs[k].elem = declared_elem(wanted[k]);
    }
    std::vector<Value> elems(n_in);
    std::vector<const Value*> feeds(n_in);
    uint64_t bytes = 0;  // a map producing more than memory allows fails here, not in the allocator
    for (size_t j = 0; j < len && !wanted.empty(); ++j) {
      for (size_t i = 0; i < n_in; ++i) {
        const Value& v = ctx.input_value(i);
        if (v.kind != Value::Kind::kSequence) {
          feeds[i] = &v;
          continue;
        }
        elems[i] = Value::of(v.sequence[j]);  // read only: the body never writes its inputs
        feeds[i] = &elems[i];
      }
      std::vector<Value> results = body_.run(ctx, feeds, wanted);
      for (size_t k = 0; k < wanted.size(); ++k) {
        Value& r = results[k];
        if (r.kind != Value::Kind::kTensor) ctx.fail("body output ", wanted[k], " must be a tensor, got none or a sequence");
        if (outs[k].elem == DType::kUndefined) outs[k].elem = r.tensor.dtype();
        if (r.tensor.dtype() != outs[k].elem)
          ctx.fail("body output ", wanted[k], " is ", dtype_name(r.tensor.dtype()), " for element ", j, " but ",
                   dtype_name(outs[k].elem), " before");
        bytes += r.tensor.nbytes();
        if (bytes > allocation_limit())
          ctx.fail("the output sequences after ", j + 1, " elements need ", bytes, " bytes, over ", allocation_limit_text());
        outs[k].sequence.push_back(std::move(r.tensor));
      }
    }
    for (size_t k = 0; k < wanted.size(); ++k) ctx.output_value(wanted[k]) = std::move(outs[k]);
  }

 private:
  // The element type the body declares for output k (undefined when it declares none).
  DType declared_elem(size_t k) const {
    const auto& t = body_.graph->outputs[k].type;
    return t.kind == ir::TypeInfo::Kind::kTensor ? t.elem : DType::kUndefined;
  }
  Subgraph body_;
};

}  // namespace

void register_control_flow(KernelRegistry& r) {
  // If: 1 (branches of one shape), 11 (shapes may differ), 13, 16 (sequence/optional types): one
  // kernel, outputs are dynamic. Loop: 1, 11 (loop-carried shapes may change), 13, 16: likewise.
  r.add<IfKernel>("If", 1, kMaxOpsetAll);
  r.add<LoopKernel>("Loop", 1, kMaxOpsetAll);
  r.add<SequenceMapKernel>("SequenceMap", 17, kMaxOpsetAll);  // ONNX 1.12 defines opset 17's only
}

}  // namespace onnxtrain::kernels::cpu
