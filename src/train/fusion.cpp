#include "train/fusion.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "ir/emitter.h"
#include "ir/infer.h"
#include "ir/splice.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::train {

namespace {

// The value of a one-element float32 constant (initializer or Constant node output), else NaN.
class Constants {
 public:
  explicit Constants(const ir::Graph& g) : g_(g) {
    for (const auto& n : g.nodes)
      if (n.op_type == "Constant" && n.domain.empty() && n.outputs.size() == 1)
        if (const ir::Attribute* a = n.attr("value"); a && a->type == ir::AttrType::kTensor) const_[n.outputs[0]] = &a->t;
  }
  double scalar(const std::string& name) const {
    const Tensor* t = g_.initializer(name);
    if (!t) {
      auto it = const_.find(name);
      if (it == const_.end()) return NAN;
      t = it->second;
    }
    if (t->dtype() != DType::kFloat32 || t->numel() != 1 || t->rank() > 1) return NAN;
    return double(t->data<float>()[0]);
  }

 private:
  const ir::Graph& g_;
  std::unordered_map<std::string, const Tensor*> const_;
};

bool is(const ir::Node& n, const char* op) { return n.op_type == op && n.domain.empty() && n.outputs.size() == 1; }

// The nodes reading each value, and the values no fusion may rename or drop: those read by
// subgraphs or named as graph outputs.
struct Readers {
  std::unordered_map<std::string, std::vector<size_t>> of;
  std::set<std::string> blocked;
  explicit Readers(const ir::Graph& g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const auto& in : g.nodes[i].inputs) of[in].push_back(i);
      for (const auto& v : ir::implicit_inputs(g.nodes[i])) blocked.insert(v);
    }
    for (const auto& o : g.outputs) blocked.insert(o.name);
  }
};

// A fusion of a copy of a model (graph copied, types inferred first: ONNX's inference does not
// know the fused nodes, so what follows them keeps the shapes recorded now): the nodes to replace
// or drop, then finish() splices them and imports the fused nodes' domain.
struct Rewrite {
  ir::Model r;
  ir::Graph& g;
  std::vector<bool> drop;
  std::map<size_t, ir::Node> replace;
  explicit Rewrite(const ir::Model& m) : r(m), g(*(r.graph = std::make_shared<ir::Graph>(*m.graph))) {
    ir::infer_types(r);
    drop.assign(g.nodes.size(), false);
  }
  ir::Model finish(const char* domain, int64_t version) {
    if (replace.empty()) return std::move(r);
    ir::splice_nodes(g, std::move(replace), drop);
    if (!r.opsets.count(domain)) r.opsets[domain] = version;
    return std::move(r);
  }
};

}  // namespace

ir::Model fuse_gelu(const ir::Model& m, int* fused) {
  ir::Model r = m;
  r.graph = std::make_shared<ir::Graph>(*m.graph);
  // Types first: ONNX's inference does not know the fused node, so what follows it keeps its
  // shapes from the value_info recorded now.
  ir::infer_types(r);
  ir::Graph& g = *r.graph;
  if (fused) *fused = 0;
  const Constants k(g);
  std::unordered_map<std::string, size_t> producer;
  std::unordered_map<std::string, int> readers;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
    for (const auto& in : g.nodes[i].inputs) ++readers[in];
    for (const auto& s : ir::implicit_inputs(g.nodes[i])) ++readers[s];
  }
  std::set<std::string> graph_outputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  // `v`, read once, by no subgraph and not a graph output: the fusion may consume it.
  auto private_value = [&](const std::string& v) { return readers[v] == 1 && !graph_outputs.count(v); };
  auto node_of = [&](const std::string& v) -> ir::Node* {
    auto it = producer.find(v);
    return it == producer.end() ? nullptr : &g.nodes[it->second];
  };
  // The operand of a binary node other than the one whose value is `c` (a constant) — "" unless
  // exactly one operand is the constant `c`.
  auto other_than_constant = [&](const ir::Node& n, double c) -> std::string {
    if (n.inputs.size() != 2) return "";
    const bool a = k.scalar(n.inputs[0]) == c, b = k.scalar(n.inputs[1]) == c;
    if (a == b) return "";
    return a ? n.inputs[1] : n.inputs[0];
  };
  const double sqrt2 = double(float(std::sqrt(2.0)));
  std::vector<bool> drop(g.nodes.size(), false);
  std::map<size_t, ir::Node> replace;  // index of the pattern's last node -> the Gelu node
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& erf = g.nodes[i];
    if (!is(erf, "Erf") || erf.inputs.size() != 1) continue;
    ir::Node* div = node_of(erf.inputs[0]);
    if (!div || !is(*div, "Div") || div->inputs.size() != 2 || k.scalar(div->inputs[1]) != sqrt2 ||
        !private_value(erf.inputs[0]) || !private_value(erf.outputs[0]))
      continue;
    const std::string x = div->inputs[0];
    // Add(erf, 1)
    size_t add_i = SIZE_MAX;
    for (size_t j = i + 1; j < g.nodes.size() && add_i == SIZE_MAX; ++j)
      if (is(g.nodes[j], "Add") && other_than_constant(g.nodes[j], 1.0) == erf.outputs[0]) add_i = j;
    if (add_i == SIZE_MAX || !private_value(g.nodes[add_i].outputs[0])) continue;
    const std::string a = g.nodes[add_i].outputs[0];
    // Mul(x, a) then Mul(., 0.5), or Mul(x, 0.5) then Mul(., a); either operand order.
    auto consumer = [&](const std::string& v) -> size_t {
      for (size_t j = 0; j < g.nodes.size(); ++j)
        for (const auto& in : g.nodes[j].inputs)
          if (in == v) return j;
      return SIZE_MAX;
    };
    auto is_mul_of = [&](size_t j, const std::string& p, const std::string& q) {
      if (j == SIZE_MAX || !is(g.nodes[j], "Mul") || g.nodes[j].inputs.size() != 2) return false;
      const auto& in = g.nodes[j].inputs;
      return (in[0] == p && in[1] == q) || (in[0] == q && in[1] == p);
    };
    size_t m1 = consumer(a), m2 = SIZE_MAX;
    if (is_mul_of(m1, x, a)) {  // (x * a) * 0.5
      const std::string xa = g.nodes[m1].outputs[0];
      m2 = consumer(xa);
      if (!private_value(xa) || m2 == SIZE_MAX || !is(g.nodes[m2], "Mul") || other_than_constant(g.nodes[m2], 0.5) != xa)
        continue;
    } else {  // (x * 0.5) * a
      if (m1 == SIZE_MAX || !is(g.nodes[m1], "Mul")) continue;
      const auto& in = g.nodes[m1].inputs;
      const std::string half = in[0] == a ? in[1] : in[0];
      ir::Node* h = node_of(half);
      if (!h || !is(*h, "Mul") || other_than_constant(*h, 0.5) != x || !private_value(half)) continue;
      m2 = m1;
      m1 = producer[half];
    }
    ir::Node gelu;
    gelu.op_type = "Gelu";
    gelu.domain = ops::kDomain;
    gelu.name = erf.name.empty() ? "Gelu_" + std::to_string(i) : erf.name + "_gelu";
    gelu.inputs = {x};
    // Y only: GeluGrad recomputes 1 + erf(x / sqrt 2) from x (keeping it would hold an
    // activation-sized tensor per GELU until the backward pass).
    gelu.outputs = {g.nodes[m2].outputs[0]};
    const size_t last = std::max<size_t>({producer[erf.inputs[0]], i, add_i, m1, m2});
    for (size_t j : {producer[erf.inputs[0]], i, add_i, m1, m2}) drop[j] = true;
    replace[last] = std::move(gelu);
    if (fused) ++*fused;
  }
  if (replace.empty()) return r;
  ir::splice_nodes(g, std::move(replace), drop);
  if (!r.opsets.count(ops::kDomain)) r.opsets[ops::kDomain] = ops::kOpset;
  return r;
}

ir::Model fuse_transposed_matmul(const ir::Model& m, int* fused) {
  Rewrite rw(m);
  ir::Graph& g = rw.g;
  auto& drop = rw.drop;
  auto& replace = rw.replace;
  if (fused) *fused = 0;
  std::unordered_map<std::string, const ir::TypeInfo*> types;
  for (const auto* list : {&g.inputs, &g.value_info, &g.outputs})
    for (const auto& vi : *list) types.emplace(vi.name, &vi.type);
  auto rank_of = [&](const std::string& v) -> int64_t {
    if (const Tensor* t = g.initializer(v)) return int64_t(t->rank());
    auto it = types.find(v);
    return it != types.end() && it->second->kind == ir::TypeInfo::Kind::kTensor && it->second->has_shape
               ? int64_t(it->second->dims.size())
               : -1;
  };
  Readers rd_of(g);
  auto& readers = rd_of.of;
  const auto& blocked = rd_of.blocked;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& t = g.nodes[i];
    if (!is(t, "Transpose") || t.inputs.size() != 1 || blocked.count(t.outputs[0])) continue;
    if (const ir::Attribute* perm = t.attr("perm"); perm && perm->ints != std::vector<int64_t>{1, 0}) continue;
    const std::string &w = t.inputs[0], &wt = t.outputs[0];
    if (rank_of(w) != 2) continue;
    const auto& rd = readers[wt];
    const bool all_matmuls = !rd.empty() && std::all_of(rd.begin(), rd.end(), [&](size_t j) {
      const ir::Node& n = g.nodes[j];
      return is(n, "MatMul") && n.inputs.size() == 2 && n.inputs[1] == wt && n.inputs[0] != wt &&
             rank_of(n.inputs[0]) >= 2 && !replace.count(j);
    });
    if (!all_matmuls) continue;
    drop[i] = true;
    for (size_t j : rd) {
      ir::Node f;
      f.op_type = "FusedMatMul";
      f.domain = ops::kDomain;
      f.name = g.nodes[j].name.empty() ? "FusedMatMul_" + std::to_string(j) : g.nodes[j].name + "_fused";
      f.inputs = {g.nodes[j].inputs[0], w};
      f.outputs = g.nodes[j].outputs;
      f.attrs = {ir::Emitter::int_attr("transA", 0), ir::Emitter::int_attr("transB", 1)};
      drop[j] = true;
      replace[j] = std::move(f);
    }
    if (fused) ++*fused;
  }
  return rw.finish(ops::kDomain, ops::kOpset);
}

ir::Model drop_zero_dropout(const ir::Model& m, int* dropped) {
  if (dropped) *dropped = 0;
  ir::Model r = m;
  r.graph = std::make_shared<ir::Graph>(*m.graph);
  ir::Graph& g = *r.graph;
  const Constants consts(g);
  const Readers rd(g);
  auto op = m.opsets.find("");
  const int64_t opset = op == m.opsets.end() ? 0 : op->second;
  std::unordered_map<std::string, std::string> source;  // dropped output -> the value it equals
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.op_type != "Dropout" || !n.domain.empty() || n.inputs.empty() || n.outputs.empty()) continue;
    double ratio = 0.5;  // the default at every opset
    if (opset >= 12) {
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) ratio = consts.scalar(n.inputs[1]);
    } else if (const ir::Attribute* a = n.attr("ratio")) {
      ratio = a->f;
    }
    if (ratio != 0.0) continue;  // NaN too: not a constant
    const std::string& y = n.outputs[0];
    const bool mask_read = n.outputs.size() > 1 && !n.outputs[1].empty() &&
                           (rd.of.count(n.outputs[1]) || rd.blocked.count(n.outputs[1]));
    if (mask_read || y.empty() || rd.blocked.count(y)) continue;
    source[y] = n.inputs[0];
    drop[i] = true;
    if (dropped) ++*dropped;
  }
  if (source.empty()) return r;
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (drop[i]) continue;
    ir::Node n = std::move(g.nodes[i]);
    for (auto& in : n.inputs)
      for (auto it = source.find(in); it != source.end(); it = source.find(in)) in = it->second;  // chains too
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  return r;
}

ir::Model fuse_conv_relu(const ir::Model& m, int* fused) {
  Rewrite rw(m);
  const ir::Graph& g = rw.g;
  if (fused) *fused = 0;
  Readers rd_of(g);
  auto& readers = rd_of.of;
  const auto& blocked = rd_of.blocked;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& conv = g.nodes[i];
    if (!is(conv, "Conv") || conv.inputs.size() < 2 || conv.inputs.size() > 3 || blocked.count(conv.outputs[0]))
      continue;
    const auto& rd = readers[conv.outputs[0]];
    if (rd.size() != 1) continue;
    const ir::Node& relu = g.nodes[rd[0]];
    if (!is(relu, "Relu") || relu.inputs.size() != 1) continue;
    ir::Node f;
    f.op_type = "FusedConv";
    f.domain = ops::kMicrosoftDomain;
    f.name = conv.name.empty() ? "FusedConv_" + std::to_string(i) : conv.name + "_relu";
    f.inputs = conv.inputs;
    f.outputs = relu.outputs;
    f.attrs = conv.attrs;
    f.attrs.push_back(ir::Emitter::string_attr("activation", "Relu"));
    rw.drop[i] = rw.drop[rd[0]] = true;
    rw.replace[rd[0]] = std::move(f);  // in the Relu's place: every reader of its output comes later
    if (fused) ++*fused;
  }
  return rw.finish(ops::kMicrosoftDomain, 1);
}

int fuse_relu_grad(ir::Graph& g) {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  const Readers readers(g);
  auto read_once = [&](const std::string& v) {  // by one node input, no subgraph, not a graph output
    auto it = readers.of.find(v);
    return it != readers.of.end() && it->second.size() == 1 && !readers.blocked.count(v);
  };
  auto custom = [](const ir::Node& n, const char* op) {
    return n.op_type == op && n.domain == ops::kDomain && n.outputs.size() == 1;
  };
  std::vector<bool> drop(g.nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& r = g.nodes[i];
    if (!custom(r, "ReluGrad") || r.inputs.size() != 2 || !read_once(r.inputs[0])) continue;
    auto it = producer.find(r.inputs[0]);
    if (it == producer.end()) continue;
    ir::Node& p = g.nodes[it->second];
    const bool no_indices = p.inputs.size() == 2 || (p.inputs.size() == 3 && p.inputs[2].empty());
    if (!custom(p, "MaxPoolGrad") || !no_indices || p.inputs[1] != r.inputs[1] || p.attr("relu_mask")) continue;
    p.outputs[0] = r.outputs[0];
    p.attrs.push_back(ir::Emitter::int_attr("relu_mask", 1));
    drop[i] = true;
    ++fused;
  }
  if (fused) ir::splice_nodes(g, std::map<size_t, ir::Node>{}, drop);
  return fused;
}

int fuse_slice_grad_sum(ir::Graph& g) {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  const Readers readers(g);
  auto read_once = [&](const std::string& v) {
    auto it = readers.of.find(v);
    return it != readers.of.end() && it->second.size() == 1 && !readers.blocked.count(v);
  };
  std::map<size_t, ir::Node> replace;
  std::vector<bool> drop(g.nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& sum = g.nodes[i];
    if (sum.op_type != "Sum" || !sum.domain.empty() || sum.outputs.size() != 1 || sum.inputs.size() < 2 ||
        sum.inputs.size() > 4)
      continue;
    std::vector<size_t> grads;
    for (const auto& in : sum.inputs) {
      auto it = producer.find(in);
      if (in.empty() || !read_once(in) || it == producer.end()) break;
      const ir::Node& p = g.nodes[it->second];
      if (p.op_type != "SliceGrad" || p.domain != ops::kDomain || p.outputs.size() != 1 || p.inputs.size() < 4 ||
          p.inputs.size() > 6 || (!grads.empty() && p.inputs[1] != g.nodes[grads[0]].inputs[1]))
        break;
      grads.push_back(it->second);
    }
    if (grads.size() != sum.inputs.size()) continue;
    ir::Node f;
    f.op_type = "SliceGradSum";
    f.domain = ops::kDomain;
    f.name = sum.name.empty() ? "SliceGradSum_" + std::to_string(i) : sum.name + "_slices";
    f.inputs.push_back(g.nodes[grads[0]].inputs[1]);
    for (size_t k : grads) {
      std::vector<std::string> in = g.nodes[k].inputs;
      in.resize(6);
      f.inputs.push_back(in[0]);
      f.inputs.insert(f.inputs.end(), in.begin() + 2, in.end());
      drop[k] = true;
    }
    f.outputs = sum.outputs;
    replace.emplace(i, std::move(f));
    ++fused;
  }
  if (fused) ir::splice_nodes(g, std::move(replace), drop);
  return fused;
}

}  // namespace onnxtrain::train
