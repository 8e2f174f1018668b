#include "train/recompute.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "ir/emitter.h"
#include "ir/infer.h"
#include "onnxtrain/error.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::train {
namespace {

bool is_gelu(const ir::Node& n) { return n.op_type == "Gelu" || n.op_type == "FastGelu" || n.op_type == "BiasGelu"; }
bool is_layer_norm(const ir::Node& n) {
  return n.op_type == "LayerNormalization" || n.op_type == "SkipLayerNormalization";
}
bool in_default_domain(const ir::Node& n) { return n.domain.empty(); }

// Nodes whose outputs differ between two runs on the same inputs (their outputs are kept).
bool is_random(const ir::Node& n) {
  static const std::set<std::string> ops{"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                         "Bernoulli", "Multinomial"};
  return in_default_domain(n) && ops.count(n.op_type) > 0;
}

// A forward graph's nodes with their producers and consumers, in topological positions.
struct Index {
  const ir::Graph& g;
  std::vector<size_t> order;                                   // topological order of node indices
  std::vector<size_t> pos;                                     // node index -> position in order
  std::unordered_map<std::string, size_t> producer;            // value -> node index
  std::unordered_map<std::string, std::vector<size_t>> readers;  // value -> node indices

  explicit Index(const ir::Graph& graph) : g(graph), order(ir::topological_order(graph)), pos(graph.nodes.size()) {
    for (size_t p = 0; p < order.size(); ++p) pos[order[p]] = p;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer.emplace(o, i);
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) readers[in].push_back(i);
      for (const auto& in : ir::implicit_inputs(g.nodes[i])) readers[in].push_back(i);
    }
  }
  // Nodes reachable from `from` (included) through outputs (forward) or inputs (backward).
  std::set<size_t> reach(std::vector<size_t> from, bool forward) const {
    std::set<size_t> seen(from.begin(), from.end());
    std::deque<size_t> q(from.begin(), from.end());
    while (!q.empty()) {
      const size_t i = q.front();
      q.pop_front();
      auto visit = [&](size_t j) {
        if (seen.insert(j).second) q.push_back(j);
      };
      if (forward) {
        for (const auto& o : g.nodes[i].outputs)
          if (auto it = readers.find(o); !o.empty() && it != readers.end())
            for (size_t j : it->second) visit(j);
      } else {
        for (const auto& in : g.nodes[i].inputs)
          if (auto it = producer.find(in); !in.empty() && it != producer.end()) visit(it->second);
      }
    }
    return seen;
  }
  std::vector<size_t> readers_of(const std::string& v) const {
    auto it = readers.find(v);
    return it == readers.end() ? std::vector<size_t>{} : it->second;
  }
};

// Dropout: how its output can be computed again.
enum class DropoutRecompute { kNo, kClone, kFromMask };

DropoutRecompute dropout_recompute(const ir::Graph& g, const ir::Node& n, int64_t opset, bool portable) {
  // Inference (Dropout is the identity, a plain clone reproduces it): opset < 7 with is_test,
  // opset >= 12 without a training_mode input or with a constant false one.
  if (opset < 7) {
    const ir::Attribute* t = n.attr("is_test");
    if (t && t->i) return DropoutRecompute::kClone;
  }
  if (opset >= 12) {
    if (n.inputs.size() < 3 || n.inputs[2].empty()) return DropoutRecompute::kClone;
    const Tensor* tm = g.initializer(n.inputs[2]);
    if (tm && tm->numel() == 1 && tm->dtype() == DType::kBool && !tm->data<bool>()[0]) return DropoutRecompute::kClone;
  }
  // Training: the output again from the input and the saved mask (DropoutGrad's arithmetic is
  // Dropout's: x * (1 / (1 - ratio)) where the mask keeps x). Without a saved mask, or in a
  // standard-ONNX graph, the output is kept.
  if (portable || n.outputs.size() < 2 || n.outputs[1].empty()) return DropoutRecompute::kNo;
  return DropoutRecompute::kFromMask;
}

// A BatchNormalization (opset >= 14) in training mode whose scale, bias and running statistics are
// initializers of one element type: its output does not depend on the running statistics.
bool batch_norm_training(const ir::Graph& g, const ir::Node& n, int64_t opset) {
  if (!in_default_domain(n) || n.op_type != "BatchNormalization" || opset < 14 || n.inputs.size() != 5) return false;
  const ir::Attribute* t = n.attr("training_mode");
  if (!t || t->i != 1) return false;
  const Tensor* ts[4];
  for (size_t k = 0; k < 4; ++k)
    if (!(ts[k] = g.initializer(n.inputs[k + 1]))) return false;
  return ts[0]->dtype() == ts[2]->dtype() && ts[1]->dtype() == ts[3]->dtype() && ts[0]->shape() == ts[2]->shape();
}

}  // namespace

std::vector<TransformerLayer> find_transformer_layers(const ir::Graph& forward) {
  const Index ix(forward);
  const auto& nodes = forward.nodes;
  // Cut values (a single value carries the forward pass on): the boundaries used where no
  // LayerNormalization marks one (an exported LayerNorm decomposed below opset 17).
  const auto cuts = forward_cuts(forward, ix.order);
  // Ends: the first LayerNormalization (topological order) after each Gelu (or the Erf of an
  // unfused one), else the first cut after it.
  std::vector<std::string> ends;
  for (size_t i : ix.order) {
    if (!is_gelu(nodes[i]) && !(in_default_domain(nodes[i]) && nodes[i].op_type == "Erf")) continue;
    const auto after = ix.reach({i}, true);
    size_t best = nodes.size();
    for (size_t j : after)
      if (is_layer_norm(nodes[j]) && (best == nodes.size() || ix.pos[j] < ix.pos[best])) best = j;
    std::string end;
    if (best != nodes.size() && !nodes[best].outputs.empty()) {
      end = nodes[best].outputs[0];
    } else {
      auto c = std::find_if(cuts.begin(), cuts.end(), [&](const auto& cut) { return cut.second > ix.pos[i]; });
      if (c != cuts.end()) end = c->first;
    }
    if (!end.empty() && (ends.empty() || ends.back() != end)) ends.push_back(end);
  }
  std::vector<TransformerLayer> layers;
  if (ends.empty()) return layers;
  // The first layer's start: the last LayerNormalization or Dropout (else the last cut) before the
  // first Softmax that the first end depends on.
  std::string start;
  {
    const auto before = ix.reach({ix.producer.at(ends[0])}, false);
    size_t softmax = nodes.size();
    for (size_t j : before)
      if (nodes[j].op_type == "Softmax" && (softmax == nodes.size() || ix.pos[j] < ix.pos[softmax])) softmax = j;
    if (softmax != nodes.size()) {
      size_t best = nodes.size();
      for (size_t j : before)
        if ((is_layer_norm(nodes[j]) || nodes[j].op_type == "Dropout") && ix.pos[j] < ix.pos[softmax] &&
            (best == nodes.size() || ix.pos[j] > ix.pos[best]))
          best = j;
      if (best != nodes.size()) {
        start = nodes[best].outputs[0];
      } else {
        for (const auto& [v, pos] : cuts)
          if (pos < ix.pos[softmax]) start = v;
      }
    }
  }
  for (const auto& end : ends) {
    if (!start.empty()) {
      // Nodes on a path from the start to the end: reachable from the start's readers and
      // reaching the end's producer.
      const auto from = ix.reach(ix.readers_of(start), true);
      const auto to = ix.reach({ix.producer.at(end)}, false);
      TransformerLayer l{start, end, {}};
      std::set_intersection(from.begin(), from.end(), to.begin(), to.end(), std::back_inserter(l.nodes));
      std::sort(l.nodes.begin(), l.nodes.end(), [&](size_t a, size_t b) { return ix.pos[a] < ix.pos[b]; });
      if (!l.nodes.empty()) layers.push_back(std::move(l));
    }
    start = end;
  }
  return layers;
}

std::vector<std::pair<std::string, size_t>> forward_cuts(const ir::Graph& f, const std::vector<size_t>& order) {
  // Values that depend on an initializer (what the gradient flows through).
  std::unordered_set<std::string> dep, inits;
  for (const auto& [n, t] : f.initializers) {
    inits.insert(n);
    if (dtype_is_float(t.dtype())) dep.insert(n);
  }
  auto reads = [](const ir::Node& n) {
    std::vector<std::string> r;
    for (const auto& in : n.inputs)
      if (!in.empty()) r.push_back(in);
    for (const auto& in : ir::implicit_inputs(n)) r.push_back(in);
    return r;
  };
  for (size_t i : order) {
    const auto in = reads(f.nodes[i]);
    if (std::any_of(in.begin(), in.end(), [&](const std::string& v) { return dep.count(v) > 0; }))
      for (const auto& o : f.nodes[i].outputs)
        if (!o.empty()) dep.insert(o);
  }
  std::unordered_map<std::string, int64_t> remaining;  // forward reads not done yet
  for (size_t i : order)
    for (const auto& v : reads(f.nodes[i]))
      if (dep.count(v) && !inits.count(v)) ++remaining[v];
  std::unordered_set<std::string> live;
  std::vector<std::pair<std::string, size_t>> cuts;
  for (size_t p = 0; p < order.size(); ++p) {
    const ir::Node& n = f.nodes[order[p]];
    for (const auto& v : reads(n))
      if (auto it = remaining.find(v); it != remaining.end() && --it->second == 0) live.erase(v);
    for (const auto& o : n.outputs)
      if (!o.empty() && remaining.count(o) && remaining[o] > 0) live.insert(o);
    if (live.size() == 1 && std::count(n.outputs.begin(), n.outputs.end(), *live.begin())) cuts.emplace_back(*live.begin(), p);
  }
  return cuts;
}

namespace {

// Budgeted recompute: chooses segments ending at forward_cuts values and assigns their dropped
// values to groups (one per segment). Returns the estimates (without, with recompute).
std::pair<int64_t, int64_t> choose_budget_segments(const ir::Model& m, const ir::Graph& forward,
                                                   const std::unordered_set<std::string>& saved_names,
                                                   int64_t budget, const std::function<bool(const std::string&)>& recomputable,
                                                   std::unordered_map<std::string, int64_t>& group, int64_t& next_group,
                                                   size_t& segments) {
  ir::Model fm;
  fm.opsets = m.opsets;
  fm.graph = std::make_shared<ir::Graph>(forward);
  ir::infer_types(fm);
  std::unordered_map<std::string, const ir::TypeInfo*> types;
  for (const auto* list : {&fm.graph->inputs, &fm.graph->value_info, &fm.graph->outputs})
    for (const auto& vi : *list) types.emplace(vi.name, &vi.type);
  // Sizes: from the types where ONNX's inference gives a static shape, else (a shape computed at
  // run time, e.g. a Slice whose bounds come from Shape arithmetic) the size of the node's largest
  // input, as an estimate. Graph inputs must have static shapes.
  const Index ix(forward);
  std::unordered_map<std::string, int64_t> memo;
  std::function<int64_t(const std::string&)> bytes = [&](const std::string& v) -> int64_t {
    if (auto it = memo.find(v); it != memo.end()) return it->second;
    int64_t b = 0;
    auto it = types.find(v);
    const auto shape = it == types.end() ? std::nullopt : ir::static_shape(it->second);
    if (const Tensor* t = forward.initializer(v)) {
      b = int64_t(t->nbytes());
    } else if (shape && it->second->elem != DType::kUndefined) {
      b = shape_numel(*shape) * int64_t(dtype_size(it->second->elem));
    } else if (auto p = ix.producer.find(v); p != ix.producer.end()) {
      for (const auto& in : forward.nodes[p->second].inputs)
        if (!in.empty()) b = std::max(b, bytes(in));
    } else {
      throw_error<InvalidArgument>("recompute budget: input '", v,
                                   "' has no static shape (the budget needs the sizes of the activations)");
    }
    memo[v] = b;
    return b;
  };
  const std::vector<size_t>& order = ix.order;
  std::vector<int64_t> saved(order.size(), 0);  // per topological position: bytes the backward reads
  for (size_t p = 0; p < order.size(); ++p)
    for (const auto& o : forward.nodes[order[p]].outputs)
      if (!o.empty() && saved_names.count(o)) saved[p] += bytes(o);
  int64_t total = 0;
  for (int64_t b : saved) total += b;
  if (total <= budget) return {total, total};
  const auto cuts = forward_cuts(forward, order);
  std::vector<int64_t> prefix(order.size() + 1, 0);
  for (size_t p = 0; p < order.size(); ++p) prefix[p + 1] = prefix[p] + saved[p];
  auto in_range = [&](int64_t lo, size_t hi) { return prefix[hi + 1] - prefix[size_t(lo + 1)]; };  // (lo, hi]
  // Checkpoints for threshold t (greedy: a segment ends at the first cut where it holds >= t), and
  // the estimate: what stays saved after the last checkpoint, the checkpoints themselves, and the
  // largest segment (live again while the backward pass goes through it).
  auto choose = [&](int64_t t, int64_t* est) {
    std::vector<size_t> chosen;
    int64_t last = -1, ckpt = 0, largest = 0;
    for (size_t k = 0; k < cuts.size(); ++k) {
      const int64_t seg = in_range(last, cuts[k].second);
      if (seg < t) continue;
      const int64_t b = bytes(cuts[k].first);
      chosen.push_back(k);
      ckpt += b;
      largest = std::max(largest, seg - (saved_names.count(cuts[k].first) ? b : 0));
      last = int64_t(cuts[k].second);
    }
    *est = in_range(last, order.size() - 1) + ckpt + largest;
    return chosen;
  };
  // The largest threshold (fewest, longest segments) whose estimate fits; else the least estimate.
  int64_t best_est = total;
  std::vector<size_t> best;
  bool found = false;
  for (int j = 0; j <= 96 && !found; ++j) {
    const int64_t t = std::max<int64_t>(1, int64_t(double(total) * std::pow(0.5, j / 4.0)));
    int64_t est = 0;
    auto c = choose(t, &est);
    found = est <= budget;
    if (found || est < best_est) {
      best_est = est;
      best = std::move(c);
    }
  }
  if (!found)
    throw_error<InvalidArgument>("recompute budget of ", budget, " bytes is below what recompute reaches for this model: ",
                                 best_est, " bytes of saved activations at best (", total, " without recompute)");
  int64_t last = -1;
  for (size_t k : best) {
    const int64_t id = next_group++;
    for (size_t p = size_t(last + 1); p <= cuts[k].second; ++p)
      for (const auto& o : forward.nodes[order[p]].outputs)
        if (!o.empty() && o != cuts[k].first && recomputable(o)) group[o] = id;
    last = int64_t(cuts[k].second);
  }
  segments = best.size();
  return {total, best_est};
}

}  // namespace

RecomputeStats apply_recompute(ir::Model& m, const ir::Graph& forward, const RecomputeConfig& cfg) {
  RecomputeStats stats;
  if (!cfg.any()) return stats;
  ir::Graph& g = *m.graph;
  const int64_t opset = m.opset("");
  // Forward values (what the forward graph's nodes define) and the gradient model's nodes that
  // produce them.
  std::unordered_set<std::string> fwd_values;
  for (const auto& n : forward.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) fwd_values.insert(o);
  std::unordered_map<std::string, size_t> producer;  // forward value -> node index in g
  std::vector<bool> is_forward(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty() && fwd_values.count(o)) {
        producer.emplace(o, i);
        is_forward[i] = true;
      }
  // Never dropped: results (of the forward graph and of the gradient model) and values the
  // backward part reads inside subgraphs.
  std::unordered_set<std::string> kept;
  for (const auto& o : forward.outputs) kept.insert(o.name);
  for (const auto& o : g.outputs) kept.insert(o.name);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!is_forward[i])
      for (const auto& v : ir::implicit_inputs(g.nodes[i])) kept.insert(v);
  auto recomputable = [&](const std::string& v) -> bool {
    auto it = producer.find(v);
    if (it == producer.end() || kept.count(v)) return false;
    const ir::Node& n = g.nodes[it->second];
    if (!n.subgraphs().empty() || is_random(n)) return false;
    if (in_default_domain(n) && n.op_type == "Dropout") {
      const auto how = dropout_recompute(g, n, opset, cfg.portable);
      return how == DropoutRecompute::kClone || (how == DropoutRecompute::kFromMask && v == n.outputs[0]);
    }
    return true;
  };

  // Dropped value -> its group: a recomputed node reads the recomputed copy of an input of its own
  // group and the kept original of any other.
  std::unordered_map<std::string, int64_t> group;
  int64_t next_group = 0;
  auto drop_single = [&](const std::string& v) {
    if (recomputable(v)) group[v] = next_group++;
  };
  // The listed values form one group: each is recomputed from what is not listed.
  const int64_t listed = next_group++;
  for (const auto& v : cfg.values) {
    if (!fwd_values.count(v))
      throw_error<InvalidArgument>("recompute: '", v, "' is not a value computed by the forward graph");
    if (!recomputable(v))
      throw_error<InvalidArgument>("recompute: '", v,
                                   "' cannot be recomputed (a result, an output of a random or control-flow node, a "
                                   "Dropout mask, or read by a subgraph of the backward part)");
    group[v] = listed;
  }
  if (cfg.gelu) {
    bool fused = false, erf = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const ir::Node& n = g.nodes[i];
      if (!is_forward[i]) continue;
      fused = fused || is_gelu(n);
      erf = erf || (in_default_domain(n) && n.op_type == "Erf");
      if (is_gelu(n) && !n.outputs.empty()) drop_single(n.outputs[0]);
    }
    if (!fused && erf)
      throw_error<NotImplemented>("gelu_recompute: this graph's GELU is not fused (Div, Erf, Add, Mul nodes) and "
                                  "onnxtrain recomputes fused Gelu nodes only; use transformer_layer_recompute or "
                                  "recompute_values");
  }
  if (cfg.attn_dropout)
    for (const auto& n : g.nodes) {
      if (!in_default_domain(n) || n.op_type != "Dropout" || n.outputs.empty() || !fwd_values.count(n.outputs[0]))
        continue;
      auto p = producer.find(n.inputs[0]);
      if (p != producer.end() && g.nodes[p->second].op_type == "Softmax") drop_single(n.outputs[0]);
    }
  if (cfg.transformer_layer) {
    const auto layers = find_transformer_layers(forward);
    if (layers.empty())
      throw_error<InvalidArgument>("transformer_layer_recompute: no transformer layer found (a layer ends at the first "
                                   "LayerNormalization after a Gelu or an Erf)");
    const size_t count = layers.size() - 1;
    const size_t n = cfg.number_layers > 0 ? std::min(count, size_t(cfg.number_layers)) : count;
    for (size_t l = 0; l < n; ++l) {
      const int64_t id = next_group++;
      for (size_t idx : layers[l].nodes)
        for (const auto& o : forward.nodes[idx].outputs)
          if (!o.empty() && o != layers[l].end && recomputable(o)) group[o] = id;
    }
    stats.layers = n;
  }
  if (cfg.budget_bytes > 0) {
    std::unordered_set<std::string> saved_names;  // forward values the backward part reads
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (!is_forward[i])
        for (const auto& in : g.nodes[i].inputs)
          if (!in.empty() && producer.count(in) && !kept.count(in)) saved_names.insert(in);
    std::tie(stats.saved_bytes, stats.saved_bytes_recompute) = choose_budget_segments(
        m, forward, saved_names, cfg.budget_bytes, recomputable, group, next_group, stats.layers);
  }

  // Rebuild the node list: forward nodes as they are; before each backward node, the clones that
  // compute what it reads of the dropped values (depth first, so in topological order).
  ir::Graph scratch;
  ir::Emitter em(m, scratch);
  std::unordered_map<std::string, std::string> copy;  // dropped value -> its recomputed copy
  std::vector<ir::Node> out;
  out.reserve(g.nodes.size() * 2);
  std::function<std::string(const std::string&)> ensure = [&](const std::string& v) -> std::string {
    if (auto it = copy.find(v); it != copy.end()) return it->second;
    const ir::Node& src = g.nodes[producer.at(v)];
    const int64_t grp = group.at(v);
    ir::Node c;
    c.domain = src.domain;
    c.doc = "recompute of " + src.describe();
    std::vector<std::string> ins = src.inputs;
    for (auto& in : ins)
      if (auto it = group.find(in); !in.empty() && it != group.end() && it->second == grp) in = ensure(in);
    if (in_default_domain(src) && src.op_type == "Dropout" &&
        dropout_recompute(g, src, opset, cfg.portable) == DropoutRecompute::kFromMask) {
      // DropoutGrad(x, mask, ratio?, training_mode?) with the attributes the gradient rule gives it.
      c.op_type = "DropoutGrad";
      c.domain = ops::kDomain;
      const std::string ratio = opset >= 12 && src.inputs.size() > 1 ? src.inputs[1] : "";
      std::string mode;
      if (opset >= 12 && !g.initializer(src.inputs[2])) mode = src.inputs[2];
      c.inputs = {ins[0], src.outputs[1], ratio, mode};
      while (!c.inputs.empty() && c.inputs.back().empty()) c.inputs.pop_back();
      float r = 0.5f;
      if (opset < 12)
        if (const ir::Attribute* a = src.attr("ratio")) r = a->f;
      c.attrs = {ir::Emitter::float_attr("ratio", r), ir::Emitter::int_attr("session_training", opset < 12)};
      c.outputs = {em.fresh(src.outputs[0] + "_recompute")};
      copy[src.outputs[0]] = c.outputs[0];
      m.opsets.emplace(ops::kDomain, ops::kOpset);
    } else {
      c.op_type = src.op_type;
      c.attrs = src.attrs;
      c.inputs = std::move(ins);
      const bool bn = batch_norm_training(g, src, opset);
      if (bn) {
        // The forward node overwrites its running statistics in place, so a clone reading them
        // would have to run before it, in the forward pass. In training mode Y does not depend
        // on them: the clone reads the scale and bias in their place and leaves the running
        // statistics unnamed.
        c.inputs[3] = c.inputs[1];
        c.inputs[4] = c.inputs[2];
      }
      for (size_t k = 0; k < src.outputs.size(); ++k) {
        const std::string& o = src.outputs[k];
        const bool skip = o.empty() || (bn && (k == 1 || k == 2));
        c.outputs.push_back(skip ? std::string() : em.fresh(o + "_recompute"));
        if (!skip) copy[o] = c.outputs.back();
      }
    }
    c.name = em.fresh((src.name.empty() ? src.op_type : src.name) + "_recompute");
    out.push_back(std::move(c));
    ++stats.cloned;
    return copy.at(v);
  };
  std::unordered_set<std::string> dropped;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    ir::Node n = g.nodes[i];
    if (!is_forward[i])
      for (auto& in : n.inputs)
        if (!in.empty() && group.count(in)) {
          dropped.insert(in);
          in = ensure(in);
        }
    out.push_back(std::move(n));
  }
  for (auto& init : scratch.initializers) g.initializers.push_back(std::move(init));
  g.nodes = std::move(out);
  stats.dropped = dropped.size();
  ir::validate_graph(g);
  return stats;
}

}  // namespace onnxtrain::train
