#include "train/attach_optimizer.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/builder.h"
#include "ir/emitter.h"
#include "ops/onnxtrain_ops.h"
#include "ops/optimizers.h"
#include "train/fusion.h"

namespace onnxtrain::train {

namespace {

using ir::Emitter;
using ops::OptimizerSpec;

// Effective hyper-parameters of one weight.
struct Hyper {
  std::map<std::string, float> f;
  std::map<std::string, int64_t> i;
  bool operator==(const Hyper& o) const { return f == o.f && i == o.i; }
};

}  // namespace

const OptimizerSpec& optimizer_spec(const std::string& name) {
  const OptimizerSpec* s = ops::find_optimizer_spec(name);
  if (!s) {
    std::string all;
    for (const auto& k : ops::optimizer_specs()) all += (all.empty() ? "" : ", ") + k.name;
    throw_error<InvalidArgument>("TrainingParameters.training_optimizer_name: unknown optimizer '", name,
                                 "' (known: ", all, ")");
  }
  return *s;
}

namespace {

bool is_state_init(const OptimizerSpec& s, const std::string& k) {
  return std::any_of(s.state_init_attrs.begin(), s.state_init_attrs.end(), [&](const auto& a) { return a.name == k; });
}

// Validates the attributes of `cfg` against the optimizer; returns each trained weight's values.
std::vector<Hyper> hyper_parameters(const OptimizerSpec& s, const OptimizerConfig& cfg,
                                    const std::vector<std::string>& trained) {
  auto check = [&](const std::string& key, bool is_int, const std::string& where) {
    const bool known = is_int ? s.has_int(key) : (s.has_float(key) || is_state_init(s, key));
    if (!known)
      throw_error<InvalidArgument>(where, ": ", s.name, " has no ", is_int ? "integer" : "float", " attribute '", key,
                                   "' (it has: ", s.attr_list(), ")");
  };
  for (const auto& [k, v] : cfg.attrs) check(k, false, "optimizer_attributes");
  for (const auto& [k, v] : cfg.int_attrs) check(k, true, "optimizer_int_attributes");
  const std::set<std::string> known(trained.begin(), trained.end());
  for (const auto& [w, m] : cfg.weight_attrs) {
    if (!known.count(w)) throw_error<InvalidArgument>("optimizer_attributes_map: '", w, "' is not a trained weight");
    for (const auto& [k, v] : m) check(k, false, "optimizer_attributes_map['" + w + "']");
  }
  for (const auto& [w, m] : cfg.weight_int_attrs) {
    if (!known.count(w)) throw_error<InvalidArgument>("optimizer_int_attributes_map: '", w, "' is not a trained weight");
    for (const auto& [k, v] : m) check(k, true, "optimizer_int_attributes_map['" + w + "']");
  }
  std::vector<Hyper> r;
  for (const auto& w : trained) {
    Hyper h;
    for (const auto& a : s.float_attrs) h.f[a.name] = a.dflt;
    for (const auto& a : s.state_init_attrs) h.f[a.name] = a.dflt;
    for (const auto& a : s.int_attrs) h.i[a.name] = a.dflt;
    for (const auto& [k, v] : cfg.attrs) h.f[k] = v;
    for (const auto& [k, v] : cfg.int_attrs) h.i[k] = v;
    if (auto it = cfg.weight_attrs.find(w); it != cfg.weight_attrs.end())
      for (const auto& [k, v] : it->second) h.f[k] = v;
    if (auto it = cfg.weight_int_attrs.find(w); it != cfg.weight_int_attrs.end())
      for (const auto& [k, v] : it->second) h.i[k] = v;
    r.push_back(std::move(h));
  }
  return r;
}

// Emits one group's update. Inputs: the weights W, their gradients G (already accumulated), the
// optimizer states S[k][i] (state k of weight i); returns the updated values in the same layout:
// out[0] = W', out[1 + k] = S[k]'.
class GroupEmitter {
 public:
  GroupEmitter(Emitter& e, const OptimizerSpec& spec, const Hyper& h, const TrainingGraph& tg, std::string scale,
               std::string update_signal)
      : e_(e), spec_(spec), h_(h), tg_(tg), scale_(std::move(scale)), update_signal_(std::move(update_signal)) {}

  std::vector<std::vector<std::string>> fused(const std::vector<std::string>& W, const std::vector<std::string>& G,
                                              const std::vector<std::vector<std::string>>& S) {
    // Without loss scaling or clipping the gradient scale is a constant 1 (G * 1 is exact), never an
    // empty input name: tools that draw or rewrite the saved training graph expect named inputs.
    const std::string scale = scale_.empty() ? e_.scalar(DType::kFloat64, 1.0, "grad_scale_one") : scale_;
    std::vector<std::string> ins = {tg_.lr_input, tg_.step_input, scale};
    if (!update_signal_.empty()) ins.push_back(update_signal_);
    ins.insert(ins.end(), W.begin(), W.end());
    ins.insert(ins.end(), G.begin(), G.end());
    for (const auto& s : S) ins.insert(ins.end(), s.begin(), s.end());
    std::vector<ir::Attribute> attrs;
    if (!update_signal_.empty()) attrs.push_back(Emitter::int_attr(ops::kOptimizerUpdateSignalAttr, 1));
    for (const auto& a : spec_.float_attrs) attrs.push_back(Emitter::float_attr(a.name, h_.f.at(a.name)));
    for (const auto& a : spec_.int_attrs) attrs.push_back(Emitter::int_attr(a.name, h_.i.at(a.name)));
    const size_t n = W.size();
    auto outs = e_.add_n(spec_.name, std::move(ins), n * (1 + S.size()), std::move(attrs), ops::kDomain,
                         "updated");
    std::vector<std::vector<std::string>> r(1 + S.size());
    for (size_t k = 0; k < r.size(); ++k) r[k].assign(outs.begin() + long(k * n), outs.begin() + long((k + 1) * n));
    return r;
  }

  // Standard ONNX (and preview-training Momentum / Adagrad): the arithmetic of the fused kernels.
  std::vector<std::vector<std::string>> portable(const std::vector<std::string>& W, const std::vector<std::string>& G_in,
                                                 const std::vector<std::vector<std::string>>& S) {
    std::vector<std::string> G;
    for (const auto& g : G_in) G.push_back(scale_.empty() ? g : mul(g, e_.cast_like(scale_, g)));
    using A = ops::OptimizerAlgorithm;
    const A algo = spec_.algorithm;
    if (algo == A::kMomentum || algo == A::kAdagrad) return preview(W, G, S);
    std::vector<std::vector<std::string>> r(1 + S.size());
    for (size_t i = 0; i < W.size(); ++i) {
      std::vector<std::string> st;
      for (const auto& s : S) st.push_back(s[i]);
      std::vector<std::string> o = algo == A::kSgd    ? sgd(W[i], G[i])
                                   : algo == A::kLamb ? lamb(W[i], G[i], st)
                                                      : adam(W[i], G[i], st, algo == A::kAdamW);
      for (size_t k = 0; k < o.size(); ++k) r[k].push_back(o[k]);
    }
    return r;
  }

 private:
  std::string mul(const std::string& a, const std::string& b) { return e_.add("Mul", {a, b}); }
  std::string add(const std::string& a, const std::string& b) { return e_.add("Add", {a, b}); }
  std::string sub(const std::string& a, const std::string& b) { return e_.add("Sub", {a, b}); }
  std::string div(const std::string& a, const std::string& b) { return e_.add("Div", {a, b}); }
  std::string c(DType dt, double v) { return e_.scalar(dt, v); }
  // Scalars computed in double, as the fused kernels do, then rounded to the weight's type.
  std::string lr_d() { return e_.cast(e_.reshape(tg_.lr_input, e_.ints({})), DType::kFloat64); }
  std::string step_d() { return e_.cast(e_.reshape(tg_.step_input, e_.ints({})), DType::kFloat64); }
  std::string to(const std::string& d, const std::string& like) { return e_.cast_like(d, like); }
  // 1 - b^t (1 without bias correction).
  std::string bias_correction(double b) {
    return sub(c(DType::kFloat64, 1.0), e_.add("Pow", {c(DType::kFloat64, b), step_d()}));
  }

  std::vector<std::string> sgd(const std::string& w, const std::string& g) {
    const DType dt = e_.dtype(w);
    std::string d = g;
    const float wd = h_.f.at("lambda");
    if (wd != 0.f) d = add(d, mul(c(dt, wd), w));
    return {add(w, mul(to(e_.add("Neg", {lr_d()}), w), d))};
  }

  std::vector<std::string> adam(const std::string& w_in, const std::string& g_in, const std::vector<std::string>& st,
                                bool decoupled) {
    const DType dt = e_.dtype(w_in);
    const double b1 = h_.f.at("alpha"), b2 = h_.f.at("beta"), wd = h_.f.at("lambda"), eps = h_.f.at("epsilon");
    const bool bias = h_.i.at("do_bias_correction") != 0;
    std::string w = w_in, g = g_in;
    if (decoupled && wd != 0.0) w = mul(w, to(sub(c(DType::kFloat64, 1.0), mul(lr_d(), c(DType::kFloat64, wd))), w));
    if (!decoupled && wd != 0.0) g = add(g, mul(c(dt, wd), w));
    const std::string m = add(mul(st[0], c(dt, b1)), mul(c(dt, 1.0 - b1), g));
    const std::string v = add(mul(st[1], c(dt, b2)), mul(mul(c(dt, 1.0 - b2), g), g));
    const std::string bc1 = bias ? bias_correction(b1) : c(DType::kFloat64, 1.0);
    const std::string bc2 = bias ? bias_correction(b2) : c(DType::kFloat64, 1.0);
    const std::string step_size = to(e_.add("Neg", {div(lr_d(), bc1)}), w);
    const std::string denom = add(div(e_.add("Sqrt", {v}), to(e_.add("Sqrt", {bc2}), w)), c(dt, eps));
    return {add(w, div(mul(step_size, m), denom)), m, v};
  }

  std::vector<std::string> lamb(const std::string& w, const std::string& g, const std::vector<std::string>& st) {
    const DType dt = e_.dtype(w);
    const double b1 = h_.f.at("alpha"), b2 = h_.f.at("beta"), wd = h_.f.at("lambda"), eps = h_.f.at("epsilon");
    const bool bias = h_.i.at("do_bias_correction") != 0;
    const std::string m = add(mul(st[0], c(dt, b1)), mul(c(dt, 1.0 - b1), g));
    const std::string v = add(mul(st[1], c(dt, b2)), mul(mul(c(dt, 1.0 - b2), g), g));
    // r = m^ / (sqrt(v^) + eps) + lambda w, in double as the fused kernel.
    const std::string md = e_.cast(m, DType::kFloat64), vd = e_.cast(v, DType::kFloat64), wdd = e_.cast(w, DType::kFloat64);
    const std::string bc1 = bias ? bias_correction(b1) : c(DType::kFloat64, 1.0);
    const std::string bc2 = bias ? bias_correction(b2) : c(DType::kFloat64, 1.0);
    const std::string rd = add(div(div(md, bc1), add(e_.add("Sqrt", {div(vd, bc2)}), c(DType::kFloat64, eps))),
                               mul(c(DType::kFloat64, wd), wdd));
    const std::string r = to(rd, w);
    const std::string rr = e_.cast(r, DType::kFloat64);
    const std::string wn = e_.add("Sqrt", {e_.reduce_all("ReduceSumSquare", wdd)});
    const std::string rn = e_.add("Sqrt", {e_.reduce_all("ReduceSumSquare", rr)});
    const std::string zero = c(DType::kFloat64, 0.0);
    const std::string both = e_.add("And", {e_.add("Greater", {wn, zero}), e_.add("Greater", {rn, zero})});
    std::string ratio = e_.add("Where", {both, div(wn, rn), c(DType::kFloat64, 1.0)});
    ratio = e_.add("Min", {e_.add("Max", {ratio, c(DType::kFloat64, h_.f.at("ratio_min"))}),
                           c(DType::kFloat64, h_.f.at("ratio_max"))});
    const std::string a = to(mul(e_.add("Neg", {lr_d()}), ratio), w);
    return {add(w, mul(a, r)), m, v};
  }

  // Momentum and Adagrad as the preview-training operators (one node for the group).
  std::vector<std::vector<std::string>> preview(const std::vector<std::string>& W, const std::vector<std::string>& G,
                                                const std::vector<std::vector<std::string>>& S) {
    const bool momentum = spec_.algorithm == ops::OptimizerAlgorithm::kMomentum;
    const std::string R = e_.reshape(tg_.lr_input, e_.ints({}));
    // Adagrad's T counts the updates before this one (r = R / (1 + T decay)); Momentum ignores it
    // here (beta = 1).
    std::string T = e_.reshape(tg_.step_input, e_.ints({}));
    if (!momentum) T = sub(T, e_.constant(Tensor::scalar<int64_t>(1), "one"));
    std::vector<std::string> ins = {R, T};
    ins.insert(ins.end(), W.begin(), W.end());
    ins.insert(ins.end(), G.begin(), G.end());
    ins.insert(ins.end(), S[0].begin(), S[0].end());
    std::vector<ir::Attribute> attrs;
    if (momentum) {
      attrs = {Emitter::float_attr("alpha", h_.f.at("momentum")), Emitter::float_attr("beta", 1.f),
               Emitter::string_attr("mode", h_.i.at("nesterov") ? "nesterov" : "standard"),
               Emitter::float_attr("norm_coefficient", h_.f.at("lambda"))};
    } else {
      attrs = {Emitter::float_attr("decay_factor", h_.f.at("lr_decay")),
               Emitter::float_attr("epsilon", h_.f.at("epsilon")),
               Emitter::float_attr("norm_coefficient", h_.f.at("lambda"))};
    }
    const size_t n = W.size();
    auto outs = e_.add_n(momentum ? "Momentum" : "Adagrad", std::move(ins), 2 * n, std::move(attrs),
                         ir::kPreviewTrainingDomain, "updated");
    return {std::vector<std::string>(outs.begin(), outs.begin() + long(n)),
            std::vector<std::string>(outs.begin() + long(n), outs.end())};
  }

  Emitter& e_;
  const OptimizerSpec& spec_;
  const Hyper& h_;
  const TrainingGraph& tg_;
  std::string scale_;
  std::string update_signal_;  // bool [1] (loss scaling): false skips the update
};

// Inserts the reduction of `grads` (gradients of tg.trained, same order) across the ranks:
// buckets of gradients in the order their producers appear in the graph (the order the backward
// pass computes them), each a GradientReduceStart placed right after the last producer of its
// gradients (the reduction overlaps the rest of the backward pass) and a GradientReduceWait at the
// end (the planner runs it when nothing else is ready). Returns the reduced gradients.
std::vector<std::string> reduce_gradients(Emitter& e, TrainingGraph& tg, const std::vector<std::string>& grads,
                                          const DataParallelConfig& dp) {
  ir::Graph& g = *tg.model.graph;
  const size_t before = g.nodes.size();
  std::unordered_map<std::string, long> producer;
  for (size_t i = 0; i < before; ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = long(i);
  // The gradient builder names each weight's gradient through an Identity appended after the
  // whole backward pass: read the value it copies, so that a bucket starts as soon as the
  // backward node that computes its last gradient has run, while the rest of the backward pass
  // goes on (the overlap of communication with compute).
  std::vector<std::string> source(grads);
  for (auto& s : source)
    for (auto it = producer.find(s); it != producer.end(); it = producer.find(s)) {
      const ir::Node& n = g.nodes[size_t(it->second)];
      if (n.op_type != "Identity" || !n.domain.empty() || n.inputs.size() != 1 || n.inputs[0].empty() ||
          !producer.count(n.inputs[0]))
        break;
      s = n.inputs[0];
    }
  auto prod = [&](size_t i) {
    auto it = producer.find(source[i]);
    return it == producer.end() ? -1L : it->second;
  };
  std::vector<size_t> order(grads.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prod(a) < prod(b); });
  std::vector<std::string> out(grads.size());
  std::vector<std::pair<long, ir::Node>> starts;  // (insert after node index, node)
  const ir::Attribute mode = Emitter::string_attr("mode", dp.adasum ? "adasum" : "mean");
  for (size_t b = 0; b < order.size();) {
    const DType dt = e.dtype(grads[order[b]]);
    std::vector<size_t> bucket;
    int64_t bytes = 0;
    long last = -1;
    for (; b < order.size(); ++b) {
      const size_t i = order[b];
      const Tensor& w = *g.initializer(tg.trained[i]);
      const int64_t nb = w.numel() * int64_t(dtype_size(w.dtype()));
      if (!bucket.empty() && (e.dtype(grads[i]) != dt || bytes + nb > dp.bucket_bytes)) break;
      bucket.push_back(i);
      bytes += nb;
      last = std::max(last, prod(i));
    }
    std::vector<std::string> ins = {tg.contribution_input};
    for (size_t i : bucket) ins.push_back(source[i]);
    const std::string token =
        e.add_n("GradientReduceStart", ins, 1, {mode}, ops::kDomain, "reduce_token")[0];
    starts.emplace_back(last, std::move(g.nodes.back()));
    g.nodes.pop_back();
    ins[0] = token;
    const auto reduced = e.add_n("GradientReduceWait", ins, bucket.size(), {}, ops::kDomain, "reduced");
    for (size_t k = 0; k < bucket.size(); ++k) out[bucket[k]] = reduced[k];
    ++tg.reduce_buckets;
  }
  // Each start right after the last producer of its bucket.
  std::vector<ir::Node> nodes;
  nodes.reserve(g.nodes.size() + starts.size());
  auto flush = [&](long idx) {
    for (auto& [after, n] : starts)
      if (after == idx) nodes.push_back(std::move(n));
  };
  flush(-1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    nodes.push_back(std::move(g.nodes[i]));
    if (i < before) flush(long(i));
  }
  g.nodes = std::move(nodes);
  return out;
}

std::string join_updates(const std::vector<StateUpdate>& u) {
  std::string s;
  for (const auto& x : u) s += (s.empty() ? "" : ",") + x.value + ":" + x.state;
  return s;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> TrainingGraph::update_step() const {
  std::vector<std::pair<std::string, std::string>> r;
  for (const auto& u : updates) r.emplace_back(u.value, u.state);
  return r;
}

std::vector<std::pair<std::string, std::string>> TrainingGraph::accumulate_step() const {
  std::vector<std::pair<std::string, std::string>> r;
  for (const auto& u : updates)
    if (u.kind == StateUpdate::Kind::kAccumulator || u.kind == StateUpdate::Kind::kRunningStat)
      r.emplace_back(u.value, u.state);
  return r;
}

namespace {

// Memory-efficient gradients: moves each node appended after `first` (the optimizer's), and the
// Identity nodes that name the gradients (`gradients`: the builder emits them last), to the
// earliest place where its inputs are computed and every other node reading an initializer it
// reads (the weight, its states) has run, so that its gradient dies there and the weight can be
// updated in place. The moved nodes keep their relative order.
void schedule_updates_early(ir::Graph& g, size_t first, const std::vector<std::string>& gradients) {
  const std::unordered_set<std::string> grads(gradients.begin(), gradients.end());
  auto movable = [&](size_t i) {
    const ir::Node& n = g.nodes[i];
    return i >= first || (n.op_type == "Identity" && n.domain.empty() && n.outputs.size() == 1 && grads.count(n.outputs[0]));
  };
  std::unordered_set<std::string> defined;
  for (const auto& v : g.inputs) defined.insert(v.name);
  for (const auto& [n, t] : g.initializers) defined.insert(n);
  std::unordered_map<std::string, size_t> readers_left;  // initializer -> fixed readers not placed
  std::vector<size_t> fixed, pending;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (movable(i)) {
      pending.push_back(i);
      continue;
    }
    fixed.push_back(i);
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && g.initializer(in)) ++readers_left[in];
  }
  auto ready = [&](const ir::Node& n) {
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      if (!defined.count(in)) return false;
      if (auto it = readers_left.find(in); it != readers_left.end() && it->second > 0) return false;
    }
    return true;
  };
  std::vector<ir::Node> out;
  out.reserve(g.nodes.size());
  auto place = [&](ir::Node&& n) {
    for (const auto& o : n.outputs)
      if (!o.empty()) defined.insert(o);
    out.push_back(std::move(n));
  };
  auto drain = [&] {
    for (bool moved = true; moved;) {
      moved = false;
      for (size_t k = 0; k < pending.size(); ++k)
        if (ready(g.nodes[pending[k]])) {
          place(std::move(g.nodes[pending[k]]));
          pending.erase(pending.begin() + long(k));
          moved = true;
          break;
        }
    }
  };
  drain();
  for (size_t i : fixed) {
    for (const auto& in : g.nodes[i].inputs)
      if (auto it = readers_left.find(in); !in.empty() && it != readers_left.end()) --it->second;
    place(std::move(g.nodes[i]));
    drain();
  }
  for (size_t j : pending) place(std::move(g.nodes[j]));
  g.nodes = std::move(out);
}

}  // namespace

void attach_optimizer(TrainingGraph& tg, const StepConfig& cfg) {
  const OptimizerSpec& spec = optimizer_spec(cfg.optimizer.name);
  if (cfg.accumulation_steps < 1)
    throw_error<InvalidArgument>("gradient_accumulation_steps must be >= 1, got ", cfg.accumulation_steps);
  if (tg.gradients.size() != tg.trained.size())
    throw_error<InvalidArgument>("attach_optimizer: ", tg.gradients.size(), " gradients for ", tg.trained.size(), " weights");
  const std::vector<Hyper> hyper = hyper_parameters(spec, cfg.optimizer, tg.trained);
  ir::Graph& g = *tg.model.graph;
  const size_t gradient_nodes = g.nodes.size();
  if (cfg.memory_efficient_gradient) {
    const char* conflict = cfg.accumulation_steps > 1          ? "gradient_accumulation_steps > 1"
                           : cfg.clip_grad_norm                 ? "gradient norm clipping"
                           : !cfg.loss_scale_input.empty()      ? "float16 loss scaling"
                           : cfg.data_parallel.world_size > 1   ? "data parallelism"
                                                                : nullptr;
    if (conflict)
      throw_error<NotImplemented>("use_memory_efficient_gradient with ", conflict,
                                  ": the update then needs every gradient first");
  }
  for (const auto& w : tg.trained) {
    const Tensor* t = g.initializer(w);
    if (!t) throw_error<InvalidArgument>("'", w, "' is not an initializer of the model");
    if (t->dtype() != DType::kFloat32 && t->dtype() != DType::kFloat64)
      throw_error<NotImplemented>("weight '", w, "' has element type ", dtype_name(t->dtype()),
                                  "; optimizers update float32 or float64 master weights");
  }
  Emitter e(tg.model, g);
  e.set_node_prefix("optimizer_");
  auto input = [&](const std::string& want, DType dt, bool exact) {
    const ir::TypeInfo type = ir::TypeInfo::tensor(dt, {1});
    if (exact) {
      if (!e.reserve(want))
        throw_error<InvalidArgument>("the model already has a value named '", want,
                                     "': choose another lr_params_feed_name");
    }
    const std::string n = exact ? want : e.fresh(want);  // reserved either way
    g.inputs.push_back(ir::ValueInfo{n, type, ""});
    e.set_type(n, type);
    return n;
  };
  tg.lr_input = input(cfg.lr_input, DType::kFloat32, true);
  tg.step_input = input("Step", DType::kInt64, false);
  auto state_of = [&](const std::string& w, const std::string& base, float init) {
    const Tensor& t = *g.initializer(w);
    Tensor s = Tensor::zeros(t.dtype(), t.shape());
    if (init != 0.f) {
      if (t.dtype() == DType::kFloat32) std::fill_n(s.data<float>(), s.numel(), init);
      else std::fill_n(s.data<double>(), s.numel(), double(init));
    }
    return e.constant(s, base);
  };

  const DataParallelConfig& dp = cfg.data_parallel;
  if (dp.world_size > 1) {
    if (cfg.portable)
      throw_error<NotImplemented>("portable_training_graph with data parallelism: the gradient reductions are ",
                                  ops::kDomain, " operators");
    tg.contribution_input = input("DataParallelContribution", DType::kFloat64, false);
  }
  const bool reduce_after = dp.post_accumulation && cfg.accumulation_steps > 1;

  // Accumulation: A' = reset ? G : A + G, in place over the accumulators.
  std::vector<std::string> grads = tg.gradients;
  if (dp.world_size > 1 && !reduce_after) grads = reduce_gradients(e, tg, grads, dp);
  if (cfg.accumulation_steps > 1) {
    tg.reset_input = input("AccumulationReset", DType::kBool, false);
    std::vector<std::string> acc;
    for (const auto& w : tg.trained) acc.push_back(state_of(w, w + "_grad_accumulation_buffer", 0.f));
    std::vector<std::string> upd;
    if (cfg.portable) {
      for (size_t i = 0; i < acc.size(); ++i)
        upd.push_back(e.add("Where", {tg.reset_input, grads[i], e.add("Add", {acc[i], grads[i]})}));
    } else {
      std::vector<std::string> ins = {tg.reset_input};
      ins.insert(ins.end(), acc.begin(), acc.end());
      ins.insert(ins.end(), grads.begin(), grads.end());
      upd = e.add_n(ops::kAccumulateGradients, std::move(ins), acc.size(), {}, ops::kDomain, "accumulated");
    }
    for (size_t i = 0; i < acc.size(); ++i)
      tg.updates.push_back({StateUpdate::Kind::kAccumulator, upd[i], acc[i], tg.trained[i], tg.trained[i]});
    grads = upd;
  }
  if (dp.world_size > 1 && reduce_after) grads = reduce_gradients(e, tg, grads, dp);

  // Global-norm clipping: a scale (float64 [1]) every gradient is multiplied by.
  std::string scale, update_signal;
  if (cfg.clip_grad_norm && (!(cfg.max_grad_norm > 0) || !std::isfinite(cfg.max_grad_norm)))
    throw_error<InvalidArgument>("max_grad_norm must be > 0, got ", cfg.max_grad_norm);
  if (!cfg.loss_scale_input.empty()) {
    // Loss scaling: one pass over the gradients checks them and gives the scale that unscales
    // (and clips) them; a non-finite gradient skips the update.
    if (cfg.portable)
      throw_error<NotImplemented>("portable_training_graph with float16 mixed precision: the loss-scale check and "
                                  "the skipped update are ", ops::kDomain, " operators");
    tg.loss_scale_input = cfg.loss_scale_input;
    ir::Node check;
    check.op_type = ops::kLossScaleCheck;
    check.domain = ops::kDomain;
    check.inputs = {cfg.loss_scale_input};
    check.inputs.insert(check.inputs.end(), grads.begin(), grads.end());
    check.outputs = {e.fresh("grad_scale"), e.fresh("all_gradients_finite")};
    check.attrs = {Emitter::float_attr("max_norm", cfg.clip_grad_norm ? cfg.max_grad_norm : 0.f)};
    e.append(std::move(check));
    scale = g.nodes.back().outputs[0];
    update_signal = g.nodes.back().outputs[1];
    tg.all_finite_output = update_signal;
    g.outputs.push_back(ir::ValueInfo{update_signal, ir::TypeInfo::tensor(DType::kBool, {1}), ""});
  } else if (cfg.clip_grad_norm) {
    if (cfg.portable) {
      // norm = sqrt(sum of squares in double); scale = min(max_norm / (norm + 1e-6), 1)
      std::vector<std::string> sq;
      for (const auto& gr : grads) sq.push_back(e.reduce_all("ReduceSumSquare", e.cast(gr, DType::kFloat64)));
      const std::string norm = e.add("Sqrt", {sq.size() == 1 ? sq[0] : e.add("Sum", sq)});
      const std::string coef = e.add("Div", {e.scalar(DType::kFloat64, cfg.max_grad_norm),
                                             e.add("Add", {norm, e.scalar(DType::kFloat64, 1e-6)})});
      scale = e.add("Min", {coef, e.scalar(DType::kFloat64, 1.0)});
    } else {
      scale = e.add_n(ops::kGlobalNormClip, grads, 1, {Emitter::float_attr("max_norm", cfg.max_grad_norm)},
                      ops::kDomain, "grad_scale")[0];
    }
  }

  // ZeRO stage 1: this rank's block of the flattened, concatenated weights.
  const bool zero = dp.world_size > 1 && dp.zero_stage == 1;
  std::vector<int64_t> numels;
  for (const auto& w : tg.trained) numels.push_back(g.initializer(w)->numel());
  std::vector<std::string> piece_out(tg.trained.size());  // updated piece of each weight (ZeRO)
  if (zero) {
    if (spec.algorithm == ops::OptimizerAlgorithm::kLamb)
      throw_error<NotImplemented>("deepspeed_zero_stage 1 with LambOptimizer: its trust ratio needs whole weights");
    for (const auto& w : tg.trained)
      if (g.initializer(w)->dtype() != g.initializer(tg.trained[0])->dtype())
        throw_error<NotImplemented>("deepspeed_zero_stage 1 with weights of several element types ('", tg.trained[0],
                                    "' and '", w, "')");
  }
  // Part [lo, hi) of weight i in this rank's block (empty: lo == hi).
  auto piece_of = [&](size_t i) { return zero_part(numels, i, dp.rank, dp.world_size); };
  auto slice_flat = [&](const std::string& v, int64_t lo, int64_t hi) {
    return e.add("Slice", {e.reshape(v, e.ints({-1})), e.ints({lo}), e.ints({hi})});
  };

  // One optimizer node per group of weights with the same hyper-parameters (file order kept).
  std::vector<bool> done(tg.trained.size(), false);
  for (size_t first = 0; first < tg.trained.size(); ++first) {
    if (done[first]) continue;
    std::vector<size_t> members;
    for (size_t i = first; i < tg.trained.size(); ++i)
      if (!done[i] && hyper[i] == hyper[first] && (members.empty() || !cfg.memory_efficient_gradient))
        members.push_back(i), done[i] = true;
    std::vector<std::string> W, G;
    std::vector<std::vector<std::string>> S(spec.states.size());
    float init = 0.f;
    for (const auto& a : spec.state_init_attrs) init = hyper[first].f.at(a.name);
    if (zero) {  // only the weights with a part in this rank's block, and only that part
      std::vector<size_t> kept;
      for (size_t i : members)
        if (auto [lo, hi] = piece_of(i); hi > lo) kept.push_back(i);
      members = kept;
      if (members.empty()) continue;
    }
    for (size_t i : members) {
      const std::string& w = tg.trained[i];
      if (zero) {
        const auto [lo, hi] = piece_of(i);
        W.push_back(slice_flat(w, lo, hi));
        G.push_back(slice_flat(grads[i], lo, hi));
        for (size_t k = 0; k < spec.states.size(); ++k) {
          Tensor st = Tensor::zeros(g.initializer(w)->dtype(), {hi - lo});
          if (init != 0.f) {
            if (st.dtype() == DType::kFloat32) std::fill_n(st.data<float>(), st.numel(), init);
            else std::fill_n(st.data<double>(), st.numel(), double(init));
          }
          S[k].push_back(e.constant(st, spec.states[k] + "_" + w));
        }
        continue;
      }
      W.push_back(w);
      G.push_back(grads[i]);
      for (size_t k = 0; k < spec.states.size(); ++k) S[k].push_back(state_of(w, spec.states[k] + "_" + w, init));
    }
    GroupEmitter ge(e, spec, hyper[first], tg, scale, update_signal);
    const auto out = cfg.portable ? ge.portable(W, G, S) : ge.fused(W, G, S);
    for (size_t m = 0; m < members.size(); ++m) {
      const std::string& w = tg.trained[members[m]];
      if (zero) piece_out[members[m]] = out[0][m];
      else tg.updates.push_back({StateUpdate::Kind::kWeight, out[0][m], w, w, w});
      for (size_t k = 0; k < spec.states.size(); ++k)
        tg.updates.push_back(
            {StateUpdate::Kind::kOptimizerState, out[1 + k][m], S[k][m], w, spec.states[k] + "_" + w});
    }
  }

  // ZeRO: the updated parts of every rank gathered into every weight.
  if (zero) {
    std::vector<std::string> ins;
    for (const auto& p : piece_out)
      if (!p.empty()) ins.push_back(p);
    const int64_t pieces = int64_t(ins.size());
    ins.insert(ins.end(), tg.trained.begin(), tg.trained.end());
    const auto full = e.add_n("ZeroAllGather", ins, tg.trained.size(), {Emitter::int_attr("pieces", pieces)},
                              ops::kDomain, "gathered");
    for (size_t i = 0; i < tg.trained.size(); ++i)
      tg.updates.push_back({StateUpdate::Kind::kWeight, full[i], tg.trained[i], tg.trained[i], tg.trained[i]});
  }

  // The updated states are graph outputs named after their state ("<state>_updated"): the saved
  // training model runs by itself.
  std::unordered_map<std::string, std::string> renamed;
  for (auto& u : tg.updates) {
    if (u.kind == StateUpdate::Kind::kRunningStat) continue;  // already outputs of the gradient model
    const std::string name = e.fresh(u.state + "_updated");
    renamed[u.value] = name;
    u.value = name;
    const Tensor& t = *g.initializer(u.state);
    g.outputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(t.dtype(), t.shape()), ""});
  }
  for (auto& n : g.nodes)
    for (auto* names : {&n.inputs, &n.outputs})
      for (auto& v : *names)
        if (auto it = renamed.find(v); it != renamed.end()) v = it->second;
  if (cfg.memory_efficient_gradient) schedule_updates_early(g, gradient_nodes, tg.gradients);
  tg.model.metadata.emplace_back("onnxtrain.state_updates", join_updates(tg.updates));
  tg.model.metadata.emplace_back("onnxtrain.training_inputs",
                                 "lr=" + tg.lr_input + ",step=" + tg.step_input +
                                     (tg.reset_input.empty() ? "" : ",reset=" + tg.reset_input) +
                                     (tg.contribution_input.empty() ? "" : ",contribution=" + tg.contribution_input) +
                                     (tg.loss_scale_input.empty() ? "" : ",loss_scale=" + tg.loss_scale_input));
  ir::validate_graph(g);
}

TrainingGraph build_training_graph(const ir::Model& forward, const std::string& loss,
                                   const std::vector<std::string>& trained, const std::vector<RunningStat>& running,
                                   const std::set<std::string>& frozen_stats, const StepConfig& cfg,
                                   ir::Model* gradient_model) {
  std::vector<std::string> ys;
  for (const auto& o : forward.graph->outputs) ys.push_back(o.name);
  for (const auto& r : running) ys.push_back(r.output);
  autodiff::BuildOptions bo;
  bo.portable = cfg.portable;
  TrainingGraph tg;
  tg.model = autodiff::build_gradient_model(forward, ys, trained, loss, bo);
  if (!cfg.portable) fuse_relu_grad(*tg.model.graph);  // ReluGrad folded into MaxPoolGrad
  if (!cfg.portable && cfg.host_kernels_only) {
    fuse_slice_grad_sum(*tg.model.graph);  // the slices' gradients as copies
    fuse_matmul_bias(*tg.model.graph);     // biases added by their products
    fold_scales_into_products(*tg.model.graph);  // power-of-two scalings as the products' alpha
    if (cfg.absorb_transposes) absorb_transposes(*tg.model.graph);  // head transposes read through strides
  }
  RecomputeConfig rc = cfg.recompute;
  rc.portable = cfg.portable;
  tg.recompute = apply_recompute(tg.model, *forward.graph, rc);
  tg.trained = trained;
  for (const auto& w : trained) tg.gradients.push_back(w + bo.grad_suffix);
  for (const auto& r : running)
    if (!frozen_stats.count(r.initializer))
      tg.updates.push_back({StateUpdate::Kind::kRunningStat, r.output, r.initializer, "", r.initializer});
  if (gradient_model) {  // before the optimizer is attached (its own graph: the pass appends to tg's)
    *gradient_model = tg.model;
    gradient_model->graph = std::make_shared<ir::Graph>(*tg.model.graph);
  }
  attach_optimizer(tg, cfg);
  return tg;
}

std::pair<int64_t, int64_t> zero_part(const std::vector<int64_t>& numels, size_t i, int rank, int world) {
  int64_t total = 0, offset = 0;
  for (size_t k = 0; k < numels.size(); ++k) {
    if (k == i) offset = total;
    total += numels[k];
  }
  const int64_t block = (total + world - 1) / world;
  const int64_t lo = std::min(total, block * rank), hi = std::min(total, block * (rank + 1));
  return {std::clamp(lo - offset, int64_t(0), numels[i]), std::clamp(hi - offset, int64_t(0), numels[i])};
}

}  // namespace onnxtrain::train
