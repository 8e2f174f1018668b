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
  /// Read by one node input, by no subgraph, and not a graph output.
  bool read_once(const std::string& v) const {
    auto it = of.find(v);
    return it != of.end() && it->second.size() == 1 && !blocked.count(v);
  }
};

// The node that writes each value.
std::unordered_map<std::string, size_t> producers(const ir::Graph& g) {
  std::unordered_map<std::string, size_t> p;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) p[o] = i;
  return p;
}

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
  const auto producer = producers(g);
  const Readers readers(g);
  auto read_once = [&](const std::string& v) { return readers.read_once(v); };
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
  const auto producer = producers(g);
  const Readers readers(g);
  auto read_once = [&](const std::string& v) { return readers.read_once(v); };
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

int fuse_matmul_bias(ir::Graph& g) {
  const auto producer = producers(g);
  const Readers readers(g);
  auto rank1 = [&](const std::string& v) -> const Tensor* {
    const Tensor* t = g.initializer(v);
    return t && t->rank() == 1 ? t : nullptr;
  };
  std::vector<bool> drop(g.nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& add = g.nodes[i];
    if (add.op_type != "Add" || !add.domain.empty() || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string &prod = add.inputs[size_t(side)], &bias = add.inputs[size_t(1 - side)];
      auto it = producer.find(prod);
      const Tensor* c = rank1(bias);
      if (it == producer.end() || !c || !readers.read_once(prod)) continue;
      ir::Node& mm = g.nodes[it->second];
      if (mm.op_type != "FusedMatMul" || mm.domain != ops::kDomain || mm.inputs.size() != 2 || mm.outputs.size() != 1 ||
          mm.attr("transBatchA") || mm.attr("transBatchB"))
        continue;
      const Tensor* w = g.initializer(mm.inputs[1]);
      const ir::Attribute* tb = mm.attr("transB");
      if (!w || w->rank() != 2 || c->dtype() != w->dtype() || c->dim(0) != w->dim(tb && tb->i ? 0 : 1)) continue;
      mm.inputs.push_back(bias);
      mm.outputs[0] = add.outputs[0];
      drop[i] = true;
      ++fused;
      break;
    }
  }
  if (fused) ir::splice_nodes(g, std::map<size_t, ir::Node>{}, drop);
  return fused;
}

namespace {

// ---- absorb_transposes' helpers
using Perm = std::vector<int64_t>;

int64_t int_attr_of(const ir::Node& n, const char* name, int64_t def = 0) {
  const ir::Attribute* a = n.attr(name);
  return a ? a->i : def;
}

void set_int_attr(ir::Node& n, const char* name, int64_t v) {
  if (ir::Attribute* a = n.attr(name)) a->i = v;
  else n.attrs.push_back(ir::Emitter::int_attr(name, v));
}

// MatMul as com.onnxtrain.FusedMatMul (same semantics for operands of rank >= 2).
void to_fused(ir::Node& m) {
  if (m.op_type == "MatMul") m.op_type = "FusedMatMul", m.domain = ops::kDomain;
}

bool is_product(const ir::Node& n) {
  return ((n.op_type == "MatMul" && n.domain.empty()) || (n.op_type == "FusedMatMul" && n.domain == ops::kDomain)) &&
         n.inputs.size() == 2 && n.outputs.size() == 1;
}

// A FusedMatMul operand's (transBatch, trans) flags as the permutation of its rank-3 storage they
// read, and back: none (0, 1, 2), trans (0, 2, 1), transBatch (1, 0, 2), both (1, 2, 0).
Perm perm_of_flags(bool tb, bool tr) {
  if (tb) return tr ? Perm{1, 2, 0} : Perm{1, 0, 2};
  return tr ? Perm{0, 2, 1} : Perm{0, 1, 2};
}
bool flags_of_perm(const Perm& c, bool* tb, bool* tr) {
  for (int f = 0; f < 4; ++f)
    if (perm_of_flags(f & 2, f & 1) == c) {
      *tb = f & 2, *tr = f & 1;
      return true;
    }
  return false;
}

// Transpose(Transpose(x, p), q) = Transpose(x, c), c[k] = p[q[k]].
Perm compose(const Perm& p, const Perm& q) {
  Perm c(q.size());
  for (size_t k = 0; k < q.size(); ++k) c[k] = p[size_t(q[k])];
  return c;
}

// The ranks the graph's values have where they can be told without shapes: inputs, value_info,
// initializers and Constants, then along the nodes (transposes, products, elementwise and
// normalizing operators, Reshape and the slices' gradients by the length of their shape input).
struct Ranks {
  std::unordered_map<std::string, int64_t> rank, length;  // length: of a 1-D shape value
  explicit Ranks(const ir::Graph& g) {
    auto from_type = [&](const ir::ValueInfo& v) {
      if (v.type.kind == ir::TypeInfo::Kind::kTensor && v.type.has_shape) rank[v.name] = int64_t(v.type.dims.size());
    };
    for (const auto& v : g.inputs) from_type(v);
    for (const auto& v : g.value_info) from_type(v);
    for (const auto& v : g.outputs) from_type(v);
    auto constant = [&](const std::string& name, const Tensor& t) {
      rank[name] = t.rank();
      if (t.rank() == 1) length[name] = t.dim(0);
    };
    for (const auto& [n, t] : g.initializers) constant(n, t);
    static const std::set<std::string> same = {"Div", "Mul", "Add", "Sub", "Sum", "Softmax", "SoftmaxGrad", "Relu",
                                               "ReluGrad", "Gelu", "GeluGrad", "Identity", "Cast", "Dropout",
                                               "DropoutGrad", "Erf", "Tanh", "Sigmoid", "LayerNormalization", "Neg"};
    for (const auto& n : g.nodes) {
      if (n.outputs.empty() || n.outputs[0].empty()) continue;
      const std::string& o = n.outputs[0];
      auto r = [&](size_t i) { return i < n.inputs.size() ? get(n.inputs[i]) : -1; };
      if (n.op_type == "Constant") {
        if (const ir::Attribute* v = n.attr("value"); v && v->t.defined()) constant(o, v->t);
      } else if (n.op_type == "Shape" && n.inputs.size() == 1 && !n.attr("start") && !n.attr("end")) {
        rank[o] = 1;
        if (r(0) >= 0) length[o] = r(0);
      } else if (n.op_type == "Transpose") {
        if (const ir::Attribute* p = n.attr("perm")) rank[o] = int64_t(p->ints.size());
        else if (r(0) >= 0) rank[o] = r(0);
      } else if (is_product(n) || n.op_type == "Gemm") {
        if (n.op_type == "Gemm") rank[o] = 2;
        else if (r(0) >= 2 && r(1) >= 2) rank[o] = std::max(r(0), r(1));
      } else if (n.op_type == "Reshape" || ((n.op_type == "SliceGrad") && n.inputs.size() > 1) ||
                 (n.op_type == "SliceGradSum" && !n.inputs.empty())) {
        const std::string& shape = n.op_type == "Reshape" ? n.inputs[1] : n.op_type == "SliceGrad" ? n.inputs[1] : n.inputs[0];
        if (auto it = length.find(shape); it != length.end()) rank[o] = it->second;
      } else if (same.count(n.op_type)) {
        int64_t m = -1;
        bool known = true;
        for (size_t k = 0; k < n.inputs.size(); ++k)
          if (!n.inputs[k].empty()) {
            const int64_t rk = r(k);
            known = known && rk >= 0;
            m = std::max(m, rk);
          }
        if (known && m >= 0) rank[o] = m;
      }
    }
  }
  int64_t get(const std::string& v) const {
    auto it = rank.find(v);
    return it == rank.end() ? -1 : it->second;
  }
};

// A scalar operand: an initializer or Constant of one element.
bool is_scalar(const ir::Graph& g, const std::unordered_map<std::string, size_t>& producer, const std::string& v) {
  if (const Tensor* t = g.initializer(v)) return t->numel() == 1 && t->rank() <= 1;
  auto it = producer.find(v);
  if (it == producer.end() || g.nodes[it->second].op_type != "Constant") return false;
  const ir::Attribute* a = g.nodes[it->second].attr("value");
  return a && a->t.defined() && a->t.numel() == 1 && a->t.rank() <= 1;
}

Perm perm_attr(const ir::Node& t) {
  const ir::Attribute* p = t.attr("perm");
  return p ? p->ints : Perm{};
}

}  // namespace

int absorb_transposes(ir::Graph& g) {
  int absorbed = 0;
  auto is_transpose3 = [](const ir::Node& n) {
    return n.op_type == "Transpose" && n.domain.empty() && n.inputs.size() == 1 && n.outputs.size() == 1 &&
           perm_attr(n).size() == 3;
  };
  // 1. Chains: Transpose(Transpose(x, p), q) reads x with the composed permutation.
  {
    const auto producer = producers(g);
    for (auto& n : g.nodes) {
      if (!is_transpose3(n)) continue;
      auto it = producer.find(n.inputs[0]);
      if (it == producer.end() || !is_transpose3(g.nodes[it->second])) continue;
      const ir::Node& inner = g.nodes[it->second];
      n.attr("perm")->ints = compose(perm_attr(inner), perm_attr(n));
      n.inputs[0] = inner.inputs[0];
    }
  }
  // 2. A division or product by a scalar trades places with a Transpose next to it, so that the
  // Transpose meets the product it feeds (the attention's scaled Q) or follows (its gradient). The
  // value between them keeps its name (only the two nodes read it): no forward value is renamed,
  // which apply_recompute, telling forward nodes by name, relies on.
  {
    const auto producer = producers(g);
    const Readers readers(g);
    std::map<size_t, std::vector<ir::Node>> replace;
    std::vector<bool> drop(g.nodes.size(), false);
    std::set<size_t> used;
    std::set<std::string> renamed;  // names reused for a value of another layout: their value_info goes
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const ir::Node& e = g.nodes[i];
      if ((e.op_type != "Div" && e.op_type != "Mul") || !e.domain.empty() || e.inputs.size() != 2 || e.outputs.size() != 1)
        continue;
      for (size_t pos = 0; pos < 2; ++pos) {
        if (e.op_type == "Div" && pos == 1) break;  // the divisor is the scalar
        if (!is_scalar(g, producer, e.inputs[1 - pos])) continue;
        // The adjacent nodes first -> second (the Transpose at ti, e at i, in either order) trade
        // places: second reads first's input, writes the middle value; first reads it, writes
        // second's output.
        auto swap_with = [&](size_t ti, bool transpose_first) {
          const size_t fi = transpose_first ? ti : i, si = transpose_first ? i : ti;
          const size_t fin = transpose_first ? 0 : pos, sin = transpose_first ? pos : 0;
          const ir::Node &first = g.nodes[fi], &second = g.nodes[si];
          ir::Node f2 = first, s2 = second;
          s2.inputs[sin] = first.inputs[fin];
          s2.outputs[0] = first.outputs[0];
          f2.inputs[fin] = first.outputs[0];
          f2.outputs[0] = second.outputs[0];
          renamed.insert(first.outputs[0]);
          replace[i] = {s2, f2};
          drop[ti] = true;
          used.insert(ti), used.insert(i);
          ++absorbed;
        };
        // Transpose, then the scalar: the scalar first (read before the Transpose).
        auto it = producer.find(e.inputs[pos]);
        if (it != producer.end() && is_transpose3(g.nodes[it->second]) && readers.read_once(e.inputs[pos]) &&
            !used.count(it->second)) {
          swap_with(it->second, true);
          break;
        }
        // The scalar, then a Transpose that alone reads it: the Transpose first.
        const auto rd = readers.of.find(e.outputs[0]);
        if (rd != readers.of.end() && readers.read_once(e.outputs[0]) && is_transpose3(g.nodes[rd->second[0]]) &&
            !used.count(rd->second[0])) {
          swap_with(rd->second[0], false);
          break;
        }
      }
    }
    if (!replace.empty()) ir::splice_nodes(g, std::move(replace), drop);
    std::erase_if(g.value_info, [&](const ir::ValueInfo& v) { return renamed.count(v.name) > 0; });
  }
  const Ranks ranks(g);
  auto operands_ok = [&](const ir::Node& m) {  // ranks 2 or 3, one at least 3: FusedMatMul's strided product
    const int64_t ra = ranks.get(m.inputs[0]), rb = ranks.get(m.inputs[1]);
    return ra >= 2 && ra <= 3 && rb >= 2 && rb <= 3 && std::max(ra, rb) == 3;
  };
  // 3. A product read only by a Transpose moving its row axis first (perm [1, 0, 2]; [2, 0, 1]
  // with the operands swapped: Y^T = op(B)^T op(A)^T) writes the transposed layout itself.
  {
    const auto producer = producers(g);
    const Readers readers(g);
    std::vector<bool> drop(g.nodes.size(), false);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const ir::Node& t = g.nodes[i];
      if (!is_transpose3(t)) continue;
      const Perm p = perm_attr(t);
      auto it = producer.find(t.inputs[0]);
      if (it == producer.end() || !readers.read_once(t.inputs[0])) continue;
      ir::Node& m = g.nodes[it->second];
      if (!is_product(m) || !operands_ok(m) || int_attr_of(m, "transBatchY")) continue;
      // A batched operand times a matrix runs as one product over the batch folded into its rows;
      // a permuted output would cut it into a product per batch row (BERT's in_proj input
      // gradient, [S, B, 3E] x [3E, E] written as [B, S, E]: 128 products of 16 rows, twice the
      // Transpose's cost at 2 threads). Such Transposes stay copies.
      if (ranks.get(m.inputs[0]) == 2 || ranks.get(m.inputs[1]) == 2) continue;
      if (p == Perm{2, 0, 1}) {
        const bool ta = int_attr_of(m, "transA"), tb = int_attr_of(m, "transB");
        const bool tba = int_attr_of(m, "transBatchA"), tbb = int_attr_of(m, "transBatchB");
        to_fused(m);
        std::swap(m.inputs[0], m.inputs[1]);
        set_int_attr(m, "transA", !tb), set_int_attr(m, "transB", !ta);
        set_int_attr(m, "transBatchA", tbb), set_int_attr(m, "transBatchB", tba);
      } else if (p != Perm{1, 0, 2}) {
        continue;
      }
      to_fused(m);
      set_int_attr(m, "transBatchY", 1);
      m.outputs[0] = t.outputs[0];
      drop[i] = true;
      ++absorbed;
    }
    ir::splice_nodes(g, std::map<size_t, ir::Node>{}, drop);
  }
  // 4. A Transpose whose every reader is a product reads through the products' strides.
  {
    const auto producer = producers(g);
    const Readers readers(g);
    std::vector<bool> drop(g.nodes.size(), false);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const ir::Node& t = g.nodes[i];
      if (!is_transpose3(t) || readers.blocked.count(t.outputs[0])) continue;
      auto rd = readers.of.find(t.outputs[0]);
      if (rd == readers.of.end()) continue;
      const Perm p = perm_attr(t);
      // Operand `pos` of product m reading t's input: its flags, when some read that layout.
      auto flags = [&](const ir::Node& m, size_t pos, bool* tb, bool* tr) {
        return flags_of_perm(compose(p, perm_of_flags(int_attr_of(m, pos ? "transBatchB" : "transBatchA"),
                                                      int_attr_of(m, pos ? "transB" : "transA"))),
                             tb, tr);
      };
      bool ok = true, tb, tr;
      for (size_t r : rd->second) {
        const ir::Node& m = g.nodes[r];
        ok = ok && is_product(m) && operands_ok(m);
        for (size_t pos = 0; ok && pos < 2; ++pos) ok = m.inputs[pos] != t.outputs[0] || flags(m, pos, &tb, &tr);
      }
      if (!ok) continue;
      for (size_t r : std::set<size_t>(rd->second.begin(), rd->second.end())) {
        ir::Node& m = g.nodes[r];
        to_fused(m);
        for (size_t pos = 0; pos < 2; ++pos) {
          if (m.inputs[pos] != t.outputs[0]) continue;
          flags(m, pos, &tb, &tr);
          set_int_attr(m, pos ? "transBatchB" : "transBatchA", tb), set_int_attr(m, pos ? "transB" : "transA", tr);
          m.inputs[pos] = t.inputs[0];
        }
      }
      drop[i] = true;
      ++absorbed;
    }
    ir::splice_nodes(g, std::map<size_t, ir::Node>{}, drop);
  }
  // Transposes of step 1 that nothing reads any more.
  {
    const Readers readers(g);
    std::vector<bool> drop(g.nodes.size(), false);
    bool any = false;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (is_transpose3(g.nodes[i]) && !readers.of.count(g.nodes[i].outputs[0]) && !readers.blocked.count(g.nodes[i].outputs[0]))
        drop[i] = any = true;
    if (any) ir::splice_nodes(g, std::map<size_t, ir::Node>{}, drop);
  }
  return absorbed;
}

namespace {

// 1 / c or c (a Div's or Mul's scalar) when it is a power of two whose scaling stays exact for
// products of normal magnitude (2^-32 ... 2^32); else 0.
double power_of_two_scale(double c, bool divide) {
  if (!std::isfinite(c) || c == 0) return 0;
  int e = 0;
  if (std::fabs(std::frexp(c, &e)) != 0.5 || e < -31 || e > 33) return 0;
  return divide ? 1.0 / c : c;
}

// A product whose result alpha may scale: MatMul with operands of rank >= 2 (it becomes
// FusedMatMul), FusedMatMul without the bias C, Gemm (without C when `output_side`: alpha does
// not scale C).
bool scalable_product(const ir::Node& n, const Ranks& ranks, bool output_side) {
  if (is_product(n)) return n.op_type == "FusedMatMul" || (ranks.get(n.inputs[0]) >= 2 && ranks.get(n.inputs[1]) >= 2);
  return n.op_type == "Gemm" && n.domain.empty() && n.outputs.size() == 1 && n.inputs.size() >= 2 &&
         (!output_side || n.inputs.size() == 2 || n.inputs[2].empty());
}

// alpha *= s on a scalable product (a MatMul becomes FusedMatMul).
void scale_product(ir::Node& n, double s) {
  to_fused(n);
  if (ir::Attribute* a = n.attr("alpha")) a->f = float(double(a->f) * s);
  else n.attrs.push_back(ir::Emitter::float_attr("alpha", float(s)));
}

}  // namespace

int fold_scales_into_products(ir::Graph& g) {
  const auto producer = producers(g);
  const Readers readers(g);
  const Constants constants(g);
  const Ranks ranks(g);
  std::vector<bool> drop(g.nodes.size(), false);
  std::set<size_t> touched;  // products already rescaled (each once: their readers / producers fixed)
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& e = g.nodes[i];
    const bool div = is(e, "Div");
    if ((!div && !is(e, "Mul")) || e.inputs.size() != 2) continue;
    for (size_t pos = 0; pos < (div ? 1u : 2u); ++pos) {
      const double s = power_of_two_scale(constants.scalar(e.inputs[1 - pos]), div);
      if (s == 0) continue;
      const std::string &v = e.inputs[pos], &y = e.outputs[0];
      // Its input a product's result read by it alone: the product scales and writes y.
      auto p = producer.find(v);
      if (p != producer.end() && readers.read_once(v) && !touched.count(p->second) &&
          scalable_product(g.nodes[p->second], ranks, true)) {
        ir::Node& prod = g.nodes[p->second];
        scale_product(prod, s);
        prod.outputs[0] = y;
        touched.insert(p->second);
        drop[i] = true;
        ++folded;
        break;
      }
      // Its result read by products alone, as their A or B (not by a subgraph, not a graph output,
      // not as Gemm's C): they read v.
      auto r = readers.of.find(y);
      if (r == readers.of.end() || readers.blocked.count(y)) continue;
      bool all = true;
      for (size_t k : r->second) {
        const ir::Node& prod = g.nodes[k];
        all = all && !touched.count(k) && scalable_product(prod, ranks, false) &&
              std::find(prod.inputs.begin() + 2, prod.inputs.end(), y) == prod.inputs.end();
      }
      if (!all) continue;
      for (size_t k : std::set<size_t>(r->second.begin(), r->second.end())) {
        ir::Node& prod = g.nodes[k];
        for (size_t in = 0; in < 2; ++in)
          if (prod.inputs[in] == y) {
            prod.inputs[in] = v;
            scale_product(prod, s);  // a product reading y twice: s^2, as (s a)(s b)
          }
        touched.insert(k);
      }
      drop[i] = true;
      ++folded;
      break;
    }
  }
  if (folded) ir::splice_nodes(g, std::map<size_t, ir::Node>{}, drop);
  return folded;
}

}  // namespace onnxtrain::train
