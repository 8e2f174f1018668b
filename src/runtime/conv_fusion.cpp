#include "runtime/conv_fusion.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <unordered_map>

#include "ir/infer.h"
#include "ir/splice.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::runtime {

namespace {

bool is(const ir::Node& n, const char* op) { return n.domain.empty() && n.op_type == op && n.outputs.size() == 1; }

// The fused activation: its name and activation_params.
struct Activation {
  std::string name;
  std::vector<float> params;
};

// A float32 constant that no feed can override (an initializer that is no graph input), with
// `numel` elements (-1: any).
const Tensor* constant_tensor(const ir::Graph& g, const std::string& name, int64_t numel) {
  const Tensor* t = name.empty() ? nullptr : g.initializer(name);
  if (!t || g.is_input(name) || t->dtype() != DType::kFloat32 || (numel >= 0 && t->numel() != numel)) return nullptr;
  return t;
}

std::optional<float> constant_scalar(const ir::Graph& g, const std::string& name) {
  const Tensor* t = constant_tensor(g, name, 1);
  if (!t) return std::nullopt;
  return t->data<float>()[0];
}

// The integers of a 1-D int64 or int32 constant (an initializer that is no graph input).
std::optional<std::vector<int64_t>> constant_ints(const ir::Graph& g, const std::string& name) {
  const Tensor* t = name.empty() ? nullptr : g.initializer(name);
  if (!t || g.is_input(name) || t->rank() != 1) return std::nullopt;
  if (t->dtype() == DType::kInt64) return std::vector<int64_t>(t->data<int64_t>(), t->data<int64_t>() + t->numel());
  if (t->dtype() == DType::kInt32) return std::vector<int64_t>(t->data<int32_t>(), t->data<int32_t>() + t->numel());
  return std::nullopt;
}

// Who reads each value: node indices, SIZE_MAX for a graph output.
std::unordered_map<std::string, std::vector<size_t>> readers_of(const ir::Graph& g) {
  std::unordered_map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs) readers[in].push_back(i);
    for (const auto& in : ir::implicit_inputs(g.nodes[i])) readers[in].push_back(i);
  }
  for (const auto& o : g.outputs) readers[o.name].push_back(SIZE_MAX);
  return readers;
}

// Initializers no node, subgraph or graph output reads (and no graph input) go.
void drop_unread_initializers(ir::Graph& g) {
  std::set<std::string> read;
  for (const auto& n : g.nodes) read.insert(n.inputs.begin(), n.inputs.end());
  for (const auto& n : g.nodes)
    for (const auto& v : ir::implicit_inputs(n)) read.insert(v);
  for (const auto& o : g.outputs) read.insert(o.name);
  std::erase_if(g.initializers, [&](const auto& kv) { return !read.count(kv.first) && !g.is_input(kv.first); });
}

// Relu, or Clip with known bounds (attributes before opset 11, constant inputs from 11 on).
std::optional<Activation> activation_of(const ir::Graph& g, const ir::Node& n, int64_t opset) {
  if (is(n, "Relu") && n.inputs.size() == 1) return Activation{"Relu", {}};
  if (!is(n, "Clip") || n.inputs.empty()) return std::nullopt;
  float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
  if (opset < 11) {
    if (const ir::Attribute* a = n.attr("min")) lo = a->f;
    if (const ir::Attribute* a = n.attr("max")) hi = a->f;
  } else {
    for (size_t k = 1; k < n.inputs.size() && k < 3; ++k) {
      if (n.inputs[k].empty()) continue;
      const auto v = constant_scalar(g, n.inputs[k]);
      if (!v) return std::nullopt;
      (k == 1 ? lo : hi) = *v;
    }
  }
  if (!(lo <= hi)) return std::nullopt;  // Clip's own kernel reports it
  return Activation{"Clip", {lo, hi}};
}

// Same element type and the same known shape (equal fixed dims or the same named symbolic dims).
bool same_type(const ir::TypeInfo* a, const ir::TypeInfo* b) {
  if (!a || !b || a->kind != ir::TypeInfo::Kind::kTensor || b->kind != ir::TypeInfo::Kind::kTensor || a->elem != b->elem ||
      !a->has_shape || !b->has_shape || a->dims.size() != b->dims.size())
    return false;
  for (size_t i = 0; i < a->dims.size(); ++i) {
    const ir::Dim &x = a->dims[i], &y = b->dims[i];
    if (x.fixed() ? x.value != y.value : (x.param.empty() || x.param != y.param)) return false;
  }
  return true;
}

}  // namespace

size_t fold_pads(ir::Model& model) {
  ir::Graph& g = *model.graph;
  if (ir::has_yield(g)) return 0;
  const int64_t opset = model.opset("");
  const auto readers = readers_of(g);
  auto ints_of = [&](const std::string& name) { return constant_ints(g, name); };
  // The Pad's spatial pads [b..., e...] (axes 2..), or nullopt when it is not a zero constant pad.
  auto zero_pads = [&](const ir::Node& pad) -> std::optional<std::vector<int64_t>> {
    if (!is(pad, "Pad") || pad.inputs.empty()) return std::nullopt;
    const ir::Attribute* mode = pad.attr("mode");
    if (mode && mode->s != "constant") return std::nullopt;
    std::optional<std::vector<int64_t>> pads;
    if (opset < 11) {
      const ir::Attribute* value = pad.attr("value");
      const ir::Attribute* a = pad.attr("pads");
      if ((value && value->f != 0.f) || !a || pad.inputs.size() != 1) return std::nullopt;
      pads = a->ints;
    } else {
      if (pad.inputs.size() < 2 || pad.inputs.size() > 3) return std::nullopt;  // opset 18's axes: left alone
      if (pad.inputs.size() == 3 && !pad.inputs[2].empty()) {
        const Tensor* v = g.initializer(pad.inputs[2]);
        if (!v || g.is_input(pad.inputs[2]) || v->numel() != 1 || v->dtype() != DType::kFloat32 ||
            v->data<float>()[0] != 0.f)
          return std::nullopt;
      }
      pads = ints_of(pad.inputs[1]);
    }
    if (!pads || pads->size() < 6 || pads->size() % 2 != 0) return std::nullopt;
    const size_t r = pads->size() / 2;
    std::vector<int64_t> spatial;
    for (size_t half = 0; half < 2; ++half)
      for (size_t a = 0; a < r; ++a) {
        const int64_t v = (*pads)[half * r + a];
        if (v < 0 || (a < 2 && v != 0)) return std::nullopt;
        if (a >= 2) spatial.push_back(v);
      }
    return spatial;
  };
  std::vector<bool> drop(g.nodes.size(), false);
  size_t folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& pad = g.nodes[i];
    const auto p1 = zero_pads(pad);
    if (!p1) continue;
    auto it = readers.find(pad.outputs[0]);
    if (it == readers.end() || it->second.size() != 1 || it->second[0] == SIZE_MAX) continue;
    ir::Node& c = g.nodes[it->second[0]];
    const bool avg = is(c, "AveragePool"), conv = is(c, "Conv");
    if ((!avg && !conv) || c.inputs.empty() || c.inputs[0] != pad.outputs[0]) continue;
    const ir::Attribute* auto_pad = c.attr("auto_pad");
    if (auto_pad && !auto_pad->s.empty() && auto_pad->s != "NOTSET") continue;
    const size_t nd = p1->size() / 2;
    const ir::Attribute* own = c.attr("pads");
    std::vector<int64_t> p2 = own ? own->ints : std::vector<int64_t>(2 * nd, 0);
    if (p2.size() != 2 * nd) continue;
    const bool any_pad = std::any_of(p1->begin(), p1->end(), [](int64_t v) { return v != 0; });
    if (avg) {
      const ir::Attribute* ceil_mode = c.attr("ceil_mode");
      const ir::Attribute* kernel = c.attr("kernel_shape");
      const ir::Attribute* cip = c.attr("count_include_pad");
      const bool own_pads = std::any_of(p2.begin(), p2.end(), [](int64_t v) { return v != 0; });
      if ((ceil_mode && ceil_mode->i != 0) || !kernel || kernel->ints.size() != nd) continue;
      if (any_pad && own_pads && !(cip && cip->i != 0)) continue;
    }
    for (size_t k = 0; k < 2 * nd; ++k) p2[k] += (*p1)[k];
    if (avg) {  // pools take pads smaller than the window only
      const std::vector<int64_t>& kernel = c.attr("kernel_shape")->ints;
      bool fits = true;
      for (size_t k = 0; k < 2 * nd; ++k) fits = fits && p2[k] < kernel[k % nd];
      if (!fits) continue;
    }
    if (any_pad) {
      std::erase_if(c.attrs, [&](const ir::Attribute& a) {
        return a.name == "pads" || a.name == "auto_pad" || (avg && a.name == "count_include_pad");
      });
      ir::Attribute a;
      a.name = "pads", a.type = ir::AttrType::kInts, a.ints = p2;
      c.attrs.push_back(a);
      if (avg) {
        ir::Attribute cip;
        cip.name = "count_include_pad", cip.type = ir::AttrType::kInt, cip.i = 1;
        c.attrs.push_back(cip);
      }
    }
    c.inputs[0] = pad.inputs[0];
    drop[i] = true;
    ++folded;
  }
  if (folded == 0) return 0;
  std::vector<ir::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!drop[i]) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
  drop_unread_initializers(g);
  return folded;
}

size_t fold_conv_batchnorm(ir::Model& model) {
  ir::Graph& g = *model.graph;
  if (ir::has_yield(g)) return 0;
  auto readers = readers_of(g);
  auto constant = [&](const std::string& name, int64_t numel) { return constant_tensor(g, name, numel); };
  auto fresh = [&](const std::string& base) {
    std::string n = base;
    for (int k = 1; g.initializer(n) || readers.count(n); ++k) n = base + "_" + std::to_string(k);
    return n;
  };
  std::vector<bool> drop(g.nodes.size(), false);
  std::map<size_t, ir::Node> replace;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& conv = g.nodes[i];
    if (!is(conv, "Conv") || conv.inputs.size() < 2 || conv.inputs.size() > 3) continue;
    const auto& rd = readers[conv.outputs[0]];
    if (rd.size() != 1 || rd[0] == SIZE_MAX) continue;
    const ir::Node& bn = g.nodes[rd[0]];
    const ir::Attribute* training = bn.attr("training_mode");
    const ir::Attribute* spatial = bn.attr("spatial");
    if (!bn.domain.empty() || bn.op_type != "BatchNormalization" || bn.inputs.size() != 5 || bn.inputs[0] != conv.outputs[0] ||
        (training && training->i != 0) || (spatial && spatial->i != 1) || bn.outputs.empty() || bn.outputs[0].empty())
      continue;
    bool extra_outputs = false;
    for (size_t k = 1; k < bn.outputs.size(); ++k) extra_outputs = extra_outputs || !bn.outputs[k].empty();
    const Tensor* w = constant(conv.inputs[1], -1);
    if (extra_outputs || !w || w->rank() < 3) continue;
    const int64_t M = w->shape()[0];
    const Tensor* b = conv.inputs.size() == 3 && !conv.inputs[2].empty() ? constant(conv.inputs[2], M) : nullptr;
    if (conv.inputs.size() == 3 && !conv.inputs[2].empty() && !b) continue;
    const Tensor *scale = constant(bn.inputs[1], M), *bias = constant(bn.inputs[2], M), *mean = constant(bn.inputs[3], M),
                 *var = constant(bn.inputs[4], M);
    if (!scale || !bias || !mean || !var) continue;
    const ir::Attribute* eps_attr = bn.attr("epsilon");
    const double eps = eps_attr ? double(eps_attr->f) : 1e-5;
    Tensor w2 = Tensor::empty(DType::kFloat32, w->shape()), b2 = Tensor::empty(DType::kFloat32, {M});
    const int64_t per = w->numel() / std::max<int64_t>(M, 1);
    for (int64_t m = 0; m < M; ++m) {
      const double s = double(scale->data<float>()[m]) / std::sqrt(double(var->data<float>()[m]) + eps);
      for (int64_t k = 0; k < per; ++k) w2.data<float>()[m * per + k] = float(double(w->data<float>()[m * per + k]) * s);
      const double b0 = b ? double(b->data<float>()[m]) : 0.0;
      b2.data<float>()[m] = float((b0 - double(mean->data<float>()[m])) * s + double(bias->data<float>()[m]));
    }
    ir::Node folded = conv;
    const std::string wn = fresh(bn.outputs[0] + "_conv_w"), bname = fresh(bn.outputs[0] + "_conv_b");
    g.initializers.emplace_back(wn, std::move(w2));
    g.initializers.emplace_back(bname, std::move(b2));
    readers.try_emplace(wn);  // reserved: the next fresh() names differ
    readers.try_emplace(bname);
    folded.inputs = {conv.inputs[0], wn, bname};
    folded.outputs = {bn.outputs[0]};
    drop[i] = drop[rd[0]] = true;
    replace[rd[0]] = std::move(folded);
  }
  if (replace.empty()) return 0;
  const size_t folds = replace.size();
  ir::splice_nodes(g, std::move(replace), drop);
  drop_unread_initializers(g);  // the original weights and statistics
  return folds;
}

namespace {

// The inferred types of a model's values (of a copy: inference appends value_info, which the
// session's model need not carry); initializers that are no graph input included.
class ValueTypes {
 public:
  explicit ValueTypes(const ir::Model& model) : typed_(model) {
    typed_.graph = std::make_shared<ir::Graph>(*model.graph);
    // Graph outputs declared without a shape are left out, so that inference records theirs.
    std::erase_if(typed_.graph->outputs, [](const ir::ValueInfo& v) { return !v.type.has_shape; });
    ir::infer_types(typed_);
    for (const auto* list : {&typed_.graph->inputs, &typed_.graph->outputs, &typed_.graph->value_info})
      for (const auto& vi : *list) types_.emplace(vi.name, &vi.type);
    for (const auto& [name, t] : model.graph->initializers)
      if (!types_.count(name)) types_.emplace(name, &(init_types_[name] = ir::TypeInfo::tensor(t.dtype(), t.shape())));
  }
  const ir::TypeInfo* operator()(const std::string& v) const {
    auto it = types_.find(v);
    return it == types_.end() ? nullptr : it->second;
  }

 private:
  ir::Model typed_;
  std::unordered_map<std::string, const ir::TypeInfo*> types_;
  std::unordered_map<std::string, ir::TypeInfo> init_types_;
};

}  // namespace

size_t fuse_conv_activations(ir::Model& model) {
  ir::Graph& g = *model.graph;
  if (ir::has_yield(g)) return 0;
  const ValueTypes type_of(model);
  const auto readers = readers_of(g);
  // The one node reading `v`, if exactly one node reads it once and it is no graph output.
  auto sole_reader = [&](const std::string& v) -> std::optional<size_t> {
    auto it = readers.find(v);
    if (it == readers.end() || it->second.size() != 1 || it->second[0] == SIZE_MAX) return std::nullopt;
    return it->second[0];
  };
  const int64_t opset = model.opset("");
  std::vector<bool> drop(g.nodes.size(), false);
  std::map<size_t, ir::Node> replace;  // index of the activation node -> the fused node
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& conv = g.nodes[i];
    if (!is(conv, "Conv") || conv.inputs.size() < 2 || conv.inputs.size() > 3 || drop[i]) continue;
    const auto next = sole_reader(conv.outputs[0]);
    if (!next) continue;
    if (drop[*next]) continue;  // (an Add both of whose operands are convolutions is fused with the first)
    size_t act_i = *next;
    std::string z;
    const ir::Node& add = g.nodes[*next];
    std::optional<Activation> act;
    if (is(add, "Add") && add.inputs.size() == 2 && add.inputs[0] != add.inputs[1]) {
      z = add.inputs[0] == conv.outputs[0] ? add.inputs[1] : add.inputs[0];
      if (!same_type(type_of(z), type_of(conv.outputs[0])) || !same_type(type_of(add.outputs[0]), type_of(z))) continue;
      // Conv + Add, then the activation where the sum's one reader is one; else Conv + Add alone (a
      // residual without activation: MobileNet-v2's, EfficientNet's), as onnxruntime's
      // ConvAddActivationFusion does.
      const auto after = sole_reader(add.outputs[0]);
      if (after && !drop[*after]) act = activation_of(g, g.nodes[*after], opset);
      if (act && g.nodes[*after].inputs[0] == add.outputs[0]) act_i = *after;
      else act.reset();
    } else {
      act = activation_of(g, add, opset);
      if (!act || add.inputs[0] != conv.outputs[0]) continue;
    }
    ir::Node fused;
    fused.name = conv.name;
    fused.op_type = "FusedConv";
    fused.domain = ops::kMicrosoftDomain;
    fused.inputs = conv.inputs;
    if (!z.empty()) {
      fused.inputs.resize(3);
      fused.inputs.push_back(z);
    }
    fused.outputs = g.nodes[act_i].outputs;
    fused.attrs = conv.attrs;
    if (act) {  // none: no attribute (onnxruntime's FusedConv reads a missing one as the identity)
      ir::Attribute name;
      name.name = "activation";
      name.type = ir::AttrType::kString;
      name.s = act->name;
      fused.attrs.push_back(name);
    }
    if (act && !act->params.empty()) {
      ir::Attribute params;
      params.name = "activation_params";
      params.type = ir::AttrType::kFloats;
      params.floats = act->params;
      fused.attrs.push_back(params);
    }
    drop[i] = drop[*next] = drop[act_i] = true;
    replace[act_i] = std::move(fused);
  }
  if (replace.empty()) return 0;
  const size_t fused = replace.size();
  ir::splice_nodes(g, std::move(replace), drop);
  if (model.opset(ops::kMicrosoftDomain) == 0) model.opsets[ops::kMicrosoftDomain] = 1;
  return fused;
}


// ------------------------------------------------------------ blocked activation layout
// Which nodes run blocked, in graph (topological) order: a node is blocked when its kind allows it
// and the inputs it would read blocked are available blocked (convolutions start chains, reading a
// plain input through a reorder or, with few channels, directly). Then the graph is rebuilt: each
// blocked node reads and writes the blocked forms (named <value>_nchwc), ReorderToNchwc feeds a
// chain from plain values, and ReorderFromNchwc gives back, under its own name, every value that a
// plain node, a subgraph or the graph's outputs read.
size_t block_conv_layouts(ir::Model& model) {
  ir::Graph& g = *model.graph;
  if (ir::has_yield(g)) return 0;
  // Types as inferred with each FusedConv seen as its Conv (same output type; type inference
  // knows no FusedConv).
  ir::Model unfused = model;
  unfused.graph = std::make_shared<ir::Graph>(g);
  for (ir::Node& n : unfused.graph->nodes)
    if (n.domain == ops::kMicrosoftDomain && n.op_type == "FusedConv") {
      n.domain.clear();
      n.op_type = "Conv";
      if (n.inputs.size() > 3) n.inputs.resize(3);
      std::erase_if(n.attrs, [](const ir::Attribute& a) { return a.name == "activation" || a.name == "activation_params"; });
    }
  const ValueTypes type_of(unfused);
  const auto readers = readers_of(g);
  const int64_t opset = model.opset("");
  constexpr int64_t kBlock = 16;
  // C of a float32 [N, C, H, W] value whose C is known.
  auto channels = [&](const std::string& v) -> std::optional<int64_t> {
    const ir::TypeInfo* t = type_of(v);
    if (!t || t->kind != ir::TypeInfo::Kind::kTensor || t->elem != DType::kFloat32 || !t->has_shape ||
        t->dims.size() != 4 || !t->dims[1].fixed() || t->dims[1].value <= 0)
      return std::nullopt;
    return t->dims[1].value;
  };
  std::unordered_map<std::string, int64_t> blocked;  // value -> its channels, for the values chains produce
  // Blocked values whose padded channels may hold nonzero (finite) values: a Sigmoid's or
  // HardSigmoid's output. Only a Mul reads them blocked (a SiLU's x * sigmoid(x), a squeeze-and-
  // excitation scale); every other reader gets them through ReorderFromNchwc, which drops the
  // padding, so each blocked input of the other operators keeps its padded channels zero.
  std::unordered_set<std::string> dirty;
  auto any_blocked = [&](const std::string& v) { return blocked.count(v) > 0; };
  auto is_blocked = [&](const std::string& v) { return any_blocked(v) && !dirty.count(v); };
  // A float32 [N, C, 1, 1] value of the given N and C (broadcast over a blocked [N, C, H, W]).
  auto per_channel = [&](const std::string& v, const ir::TypeInfo* like) {
    const ir::TypeInfo* t = type_of(v);
    return t && like && t->kind == ir::TypeInfo::Kind::kTensor && t->elem == DType::kFloat32 && t->has_shape &&
           t->dims.size() == 4 && like->has_shape && like->dims.size() == 4 && t->dims[0].fixed() &&
           like->dims[0].fixed() && t->dims[0].value == like->dims[0].value && t->dims[1].fixed() &&
           like->dims[1].fixed() && t->dims[1].value == like->dims[1].value && t->dims[2].fixed() &&
           t->dims[2].value == 1 && t->dims[3].fixed() && t->dims[3].value == 1;
  };
  bool out_dirty = false;
  const size_t count = g.nodes.size();
  // Channel gathers (NchwcChannels): Concats of any channel counts, channel Slices, channel
  // shuffles. A gather reading another gather's output reads that one's inputs instead (the
  // shuffle of a Concat, the Slices of a shuffle: one pass over the data); a gather that only
  // such gathers read is not run.
  struct Gather {
    std::vector<std::string> inputs;
    std::vector<int64_t> input_channels;
    std::vector<int64_t> channels;  // into the inputs' channels end to end
    int64_t total() const {
      int64_t t = 0;
      for (int64_t c : input_channels) t += c;
      return t;
    }
  };
  std::map<size_t, Gather> gathers;
  std::unordered_map<std::string, size_t> gather_node;  // output -> the gather node making it
  std::unordered_map<std::string, size_t> composed;     // gather output -> readers that composed it
  std::vector<bool> dropped(count, false);              // a shuffle's Reshape and Transpose
  auto compose = [&](Gather gt) {
    Gather out;
    std::vector<int64_t> base;  // where each input of gt (or the inputs of the gather it goes through) starts
    std::vector<const Gather*> via(gt.inputs.size(), nullptr);  // the gather making input j, if any
    for (size_t j = 0; j < gt.inputs.size(); ++j) {
      auto it = gather_node.find(gt.inputs[j]);
      if (it != gather_node.end()) {
        via[j] = &gathers.at(it->second);
        ++composed[gt.inputs[j]];
      }
      base.push_back(out.total());
      const std::vector<std::string>& ins = via[j] ? via[j]->inputs : std::vector<std::string>{gt.inputs[j]};
      const std::vector<int64_t>& cs = via[j] ? via[j]->input_channels : std::vector<int64_t>{gt.input_channels[j]};
      out.inputs.insert(out.inputs.end(), ins.begin(), ins.end());
      out.input_channels.insert(out.input_channels.end(), cs.begin(), cs.end());
    }
    for (int64_t ch : gt.channels) {
      size_t j = 0;
      while (ch >= gt.input_channels[j]) ch -= gt.input_channels[j++];
      out.channels.push_back(base[j] + (via[j] ? via[j]->channels[size_t(ch)] : ch));
    }
    return out;
  };
  // Which node makes each value.
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < count; ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  auto only_reader = [&](const std::string& v, size_t r) {
    auto it = readers.find(v);
    return it != readers.end() && it->second.size() == 1 && it->second[0] == r;
  };
  // Reshape [N, C, H, W] -> [N, G, C/G, H, W], Transpose 0 2 1 3 4, Reshape -> [N, C, H, W] ending at
  // node i, the first Reshape reading a blocked value: the gather and the two nodes it replaces.
  auto channel_shuffle = [&](size_t i) -> std::optional<std::pair<Gather, std::vector<size_t>>> {
    const ir::Node& n = g.nodes[i];
    if (!is(n, "Reshape")) return std::nullopt;
    auto pt = producer.find(n.inputs[0]);
    if (pt == producer.end() || !only_reader(n.inputs[0], i)) return std::nullopt;
    const ir::Node& t = g.nodes[pt->second];
    const ir::Attribute* perm = t.attr("perm");
    if (!is(t, "Transpose") || !perm || perm->ints != std::vector<int64_t>{0, 2, 1, 3, 4}) return std::nullopt;
    auto pr = producer.find(t.inputs[0]);
    if (pr == producer.end() || !only_reader(t.inputs[0], pt->second)) return std::nullopt;
    const ir::Node& r = g.nodes[pr->second];
    if (!is(r, "Reshape") || !is_blocked(r.inputs[0])) return std::nullopt;
    const ir::TypeInfo *x = type_of(r.inputs[0]), *mid = type_of(r.outputs[0]), *y = type_of(n.outputs[0]);
    if (!same_type(x, y) || !mid || !mid->has_shape || mid->dims.size() != 5) return std::nullopt;
    for (const ir::Dim& d : mid->dims)
      if (!d.fixed()) return std::nullopt;
    const int64_t C = blocked[r.inputs[0]], G = mid->dims[1].value, CG = mid->dims[2].value;
    if (mid->dims[0].value != x->dims[0].value || G * CG != C || mid->dims[3].value != x->dims[2].value ||
        mid->dims[4].value != x->dims[3].value)
      return std::nullopt;
    Gather gather{{r.inputs[0]}, {C}, {}};
    for (int64_t k = 0; k < CG; ++k)  // channel k G + gi of Y is channel gi CG + k of X
      for (int64_t gi = 0; gi < G; ++gi) gather.channels.push_back(gi * CG + k);
    return std::make_pair(std::move(gather), std::vector<size_t>{pr->second, pt->second});
  };
  std::vector<bool> run_blocked(count, false);
  std::vector<std::vector<size_t>> slots(count);  // the inputs a blocked node reads blocked
  std::map<size_t, std::pair<Tensor, Tensor>> bn_weights;  // BatchNormalization as a convolution: W, B
  for (size_t i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.outputs.size() != 1 || n.outputs[0].empty() || n.inputs.empty() || !n.subgraphs().empty()) continue;
    const auto c_out = channels(n.outputs[0]);
    if (!c_out) continue;
    std::vector<size_t> reads;
    bool ok = false;
    out_dirty = false;
    const bool fused = n.domain == ops::kMicrosoftDomain && n.op_type == "FusedConv";
    if (is(n, "Conv") || fused) {
      // 2-D, constant weights, float32; grouped only where oneDNN's blocked kernels take the groups
      // (depthwise, or 16-channel multiples per group). The activation must keep 0 at 0 (the
      // padded channels stay zero).
      const auto c = channels(n.inputs[0]);
      const Tensor* w = n.inputs.size() >= 2 ? constant_tensor(g, n.inputs[1], -1) : nullptr;
      const ir::Attribute* group_attr = n.attr("group");
      const int64_t group = group_attr ? group_attr->i : 1;
      if (!c || !w || w->rank() != 4 || n.inputs.size() > (fused ? 4u : 3u) || group < 1) continue;
      if (dirty.count(n.inputs[0]) || (n.inputs.size() == 4 && dirty.count(n.inputs[3]))) continue;
      const int64_t M = w->shape()[0], Cg = w->shape()[1];
      if (M != *c_out || Cg * group != *c || M % group != 0) continue;
      const int64_t Mg = M / group;
      if (M < kBlock / 2) continue;  // a few output channels padded to 16: more bytes than work
      if (!(group == 1 || (Cg == 1 && Mg == 1) || (Cg % kBlock == 0 && Mg % kBlock == 0))) continue;
      if (fused) {
        const ir::Attribute* a = n.attr("activation");
        const ir::Attribute* params = n.attr("activation_params");
        const std::string act = a ? a->s : "";
        const bool zero_kept = act.empty() || act == "Relu" || act == "LeakyRelu" ||
                               (act == "Clip" && params && params->floats.size() == 2 && params->floats[0] <= 0.f &&
                                params->floats[1] >= 0.f);
        if (!zero_kept) continue;
        if (n.inputs.size() == 4 && !n.inputs[3].empty()) reads.push_back(3);
      }
      // Few input channels (the first convolution): oneDNN reads the plain layout directly.
      if (is_blocked(n.inputs[0]) || group != 1 || *c >= kBlock) reads.push_back(0);
      ok = true;
    } else if (is(n, "Relu") || is(n, "LeakyRelu") || is(n, "Clip") || is(n, "HardSwish")) {
      bool zero_kept = !is(n, "Clip");  // HardSwish(0) = 0
      if (!zero_kept) {
        const auto act = activation_of(g, n, opset);
        zero_kept = act && act->params[0] <= 0.f && act->params[1] >= 0.f;
      }
      ok = zero_kept && is_blocked(n.inputs[0]);
      reads = {0};
    } else if ((is(n, "Sigmoid") || is(n, "HardSigmoid") || is(n, "Tanh")) && n.inputs.size() == 1) {
      // Bounded, so finite in the padded channels; Sigmoid(0) and HardSigmoid(0) are not 0.
      ok = any_blocked(n.inputs[0]);
      out_dirty = !is(n, "Tanh") || dirty.count(n.inputs[0]) > 0;
      reads = {0};
    } else if (is(n, "Mul") && n.inputs.size() == 2) {
      // Same shapes, or one operand [N, C, 1, 1] ([N, C/16, 1, 1, 16] blocked broadcasts the same
      // way); the product's padding is zero where either operand's is.
      const ir::TypeInfo* out_t = type_of(n.outputs[0]);
      ok = true;
      out_dirty = true;
      for (size_t k = 0; k < 2; ++k) {
        const std::string& v = n.inputs[k];
        ok = ok && any_blocked(v) && blocked[v] == *c_out &&
             (same_type(type_of(v), out_t) || per_channel(v, out_t));
        out_dirty = out_dirty && dirty.count(v) > 0;
        reads.push_back(k);
      }
    } else if (is(n, "Add") || is(n, "Sum")) {
      ok = true;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        ok = ok && is_blocked(n.inputs[k]) && same_type(type_of(n.inputs[k]), type_of(n.outputs[0]));
        reads.push_back(k);
      }
    } else if (is(n, "Concat")) {
      // At least one input blocked; plain ones are reordered (DenseNet's block input, read by
      // every layer's Concat, once). Channel counts that are no multiple of 16 (ShuffleNet's 58 +
      // 58) make it a gather.
      const ir::Attribute* axis = n.attr("axis");
      ok = axis && (axis->i == 1 || axis->i == -3);
      bool any = false, aligned = true;
      Gather gather;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const auto c = is_blocked(n.inputs[k]) ? std::optional<int64_t>(blocked[n.inputs[k]]) : channels(n.inputs[k]);
        ok = ok && c && !dirty.count(n.inputs[k]);
        if (!ok) break;
        aligned = aligned && *c % kBlock == 0;
        any = any || is_blocked(n.inputs[k]);
        reads.push_back(k);
        const int64_t base = gather.total();
        for (int64_t j = 0; j < *c; ++j) gather.channels.push_back(base + j);
        gather.inputs.push_back(n.inputs[k]);
        gather.input_channels.push_back(*c);
      }
      ok = ok && any;
      if (ok && !aligned) gathers[i] = compose(std::move(gather));
    } else if (is(n, "Slice") && n.inputs.size() >= 3 && n.inputs.size() <= 5 && is_blocked(n.inputs[0])) {
      // A run of channels (step 1) of a blocked value: a gather.
      const int64_t C = blocked[n.inputs[0]];
      const auto starts = constant_ints(g, n.inputs[1]), ends = constant_ints(g, n.inputs[2]);
      const auto axes = n.inputs.size() > 3 && !n.inputs[3].empty() ? constant_ints(g, n.inputs[3])
                                                                     : std::optional<std::vector<int64_t>>(std::vector<int64_t>{0});
      const auto steps = n.inputs.size() > 4 && !n.inputs[4].empty() ? constant_ints(g, n.inputs[4])
                                                                      : std::optional<std::vector<int64_t>>(std::vector<int64_t>{1});
      if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1 || axes->size() != 1 ||
          steps->size() != 1 || ((*axes)[0] != 1 && (*axes)[0] != -3) || (*steps)[0] != 1)
        continue;
      auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + C : v, 0, C); };
      const int64_t b = clamp((*starts)[0]), e = clamp((*ends)[0]);
      if (e - b != *c_out || e <= b) continue;
      Gather gather{{n.inputs[0]}, {C}, {}};
      for (int64_t j = b; j < e; ++j) gather.channels.push_back(j);
      gathers[i] = compose(std::move(gather));
      ok = true;
      reads = {0};
    } else if (const auto shuffle = channel_shuffle(i)) {
      gathers[i] = compose(std::move(shuffle->first));
      for (size_t d : shuffle->second) dropped[d] = true;
      ok = true;
    } else if (is(n, "MaxPool") || is(n, "AveragePool") || is(n, "GlobalAveragePool")) {
      ok = n.inputs.size() == 1 && is_blocked(n.inputs[0]);
      reads = {0};
    } else if (is(n, "BatchNormalization") && n.inputs.size() == 5 && is_blocked(n.inputs[0])) {
      // Inference BatchNormalization after a blocked value (DenseNet's pre-activation layers): the
      // depthwise 1x1 convolution with W = scale / sqrt(var + epsilon), B = bias - mean W.
      const ir::Attribute* training = n.attr("training_mode");
      const ir::Attribute* spatial = n.attr("spatial");
      const int64_t C = blocked[n.inputs[0]];
      const Tensor *scale = constant_tensor(g, n.inputs[1], C), *bias = constant_tensor(g, n.inputs[2], C),
                   *mean = constant_tensor(g, n.inputs[3], C), *var = constant_tensor(g, n.inputs[4], C);
      if ((training && training->i != 0) || (spatial && spatial->i != 1) || !scale || !bias || !mean || !var) continue;
      const ir::Attribute* eps_attr = n.attr("epsilon");
      const double eps = eps_attr ? double(eps_attr->f) : 1e-5;
      Tensor w = Tensor::empty(DType::kFloat32, {C, 1, 1, 1}), b = Tensor::empty(DType::kFloat32, {C});
      for (int64_t c = 0; c < C; ++c) {
        const double s = double(scale->data<float>()[c]) / std::sqrt(double(var->data<float>()[c]) + eps);
        w.data<float>()[c] = float(s);
        b.data<float>()[c] = float(double(bias->data<float>()[c]) - double(mean->data<float>()[c]) * s);
      }
      bn_weights.emplace(i, std::make_pair(std::move(w), std::move(b)));
      ok = true;
      reads = {0};
    }
    if (!ok) continue;
    run_blocked[i] = true;
    slots[i] = std::move(reads);
    blocked[n.outputs[0]] = *c_out;
    if (gathers.count(i)) gather_node[n.outputs[0]] = i;
    if (out_dirty) dirty.insert(n.outputs[0]);
  }
  if (blocked.empty()) return 0;

  std::set<std::string> taken;
  for (const auto& [v, unused] : readers) taken.insert(v);
  for (const auto& n : g.nodes) taken.insert(n.outputs.begin(), n.outputs.end());
  for (const auto& [v, unused] : g.initializers) taken.insert(v);
  for (const auto& v : g.inputs) taken.insert(v.name);
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    for (int k = 1; taken.count(name); ++k) name = base + "_" + std::to_string(k);
    taken.insert(name);
    return name;
  };
  // Whether v, produced blocked, is also read plain.
  auto read_plain = [&](const std::string& v) {
    auto it = readers.find(v);
    if (it == readers.end()) return false;
    for (size_t r : it->second) {
      if (r != SIZE_MAX && dropped[r]) continue;
      if (r == SIZE_MAX || !run_blocked[r]) return true;
      const ir::Node& n = g.nodes[r];
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (n.inputs[k] == v && std::find(slots[r].begin(), slots[r].end(), k) == slots[r].end()) return true;
    }
    return false;
  };
  auto reorder = [](const std::string& op, const std::string& from, const std::string& to) {
    ir::Node r;
    r.name = to + "_reorder";
    r.op_type = op;
    r.domain = ops::kDomain;
    r.inputs = {from};
    r.outputs = {to};
    return r;
  };
  // A blocked convolution without activation whose output c is read only by s = Sigmoid(c) and
  // Mul(c, s) (s read by that Mul alone, neither a graph output), or only by one HardSwish: the
  // activation it becomes (oneDNN's swish / hardswish post-op) and the node whose output the
  // convolution then writes (the Mul, the HardSwish), the Sigmoid and the Mul, or the HardSwish,
  // dropped.
  struct Folded {
    const char* activation;
    size_t last;
  };
  auto fold_activation = [&](size_t i) -> std::optional<Folded> {
    const ir::Node& n = g.nodes[i];
    const ir::Attribute* act = n.attr("activation");
    const bool bn = is(n, "BatchNormalization");
    if ((act && !act->s.empty()) || !(is(n, "Conv") || n.op_type == "FusedConv" || bn)) return std::nullopt;
    auto it = readers.find(n.outputs[0]);
    if (it == readers.end()) return std::nullopt;
    for (size_t r : it->second)
      if (r == SIZE_MAX || !run_blocked[r]) return std::nullopt;
    if (it->second.size() == 1 && is(g.nodes[it->second[0]], "HardSwish")) return Folded{"HardSwish", it->second[0]};
    // DenseNet's pre-activation BatchNormalization -> Relu (Conv -> Relu is a FusedConv already).
    if (it->second.size() == 1 && is(g.nodes[it->second[0]], "Relu")) return Folded{"Relu", it->second[0]};
    if (bn) return std::nullopt;
    if (it->second.size() != 2) return std::nullopt;
    std::optional<size_t> sig, mul;
    for (size_t r : it->second) {
      if (is(g.nodes[r], "Sigmoid")) sig = r;
      else if (is(g.nodes[r], "Mul")) mul = r;
    }
    if (!sig || !mul) return std::nullopt;
    const std::string& s = g.nodes[*sig].outputs[0];
    auto sr = readers.find(s);
    if (sr == readers.end() || sr->second.size() != 1 || sr->second[0] != *mul) return std::nullopt;
    const auto& in = g.nodes[*mul].inputs;
    if (!((in[0] == n.outputs[0] && in[1] == s) || (in[1] == n.outputs[0] && in[0] == s))) return std::nullopt;
    return Folded{"SiLU", *mul};
  };
  std::vector<bool> folded(count, false);  // nodes now a convolution's activation
  std::unordered_map<std::string, std::string> blocked_name;  // value -> its blocked form
  std::vector<ir::Node> nodes;
  size_t rewritten = 0;
  // The blocked form of v; a plain value entering a chain gets its ReorderToNchwc.
  auto blocked_input = [&](const std::string& v) {
    auto it = blocked_name.find(v);
    if (it == blocked_name.end()) {
      it = blocked_name.emplace(v, fresh(v + "_nchwc")).first;
      nodes.push_back(reorder("ReorderToNchwc", v, it->second));
    }
    return it->second;
  };
  // Where plain nodes, subgraphs or graph outputs read out: its plain form, under its own name.
  auto give_back = [&](const std::string& out) {
    if (!read_plain(out)) return;
    ir::Node r = reorder("ReorderFromNchwc", blocked_name[out], out);
    ir::Attribute c;
    c.name = "channels";
    c.type = ir::AttrType::kInt;
    c.i = blocked[out];
    r.attrs.push_back(c);
    nodes.push_back(std::move(r));
  };
  auto ints_attr = [](const char* name, const std::vector<int64_t>& v) {
    ir::Attribute a;
    a.name = name, a.type = ir::AttrType::kInts, a.ints = v;
    return a;
  };
  for (size_t i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[i];
    if (folded[i] || dropped[i]) continue;
    if (!run_blocked[i]) {
      nodes.push_back(n);
      continue;
    }
    if (auto gt = gathers.find(i); gt != gathers.end()) {
      const std::string& out = n.outputs[0];
      if (composed[out] == readers.at(out).size()) continue;  // every reader gathers from its inputs
      ir::Node b;
      b.name = n.name;
      b.op_type = "NchwcChannels";
      b.domain = ops::kDomain;
      for (const std::string& v : gt->second.inputs) b.inputs.push_back(blocked_input(v));
      b.outputs = {blocked_name.emplace(out, fresh(out + "_nchwc")).first->second};
      b.attrs = {ints_attr("input_channels", gt->second.input_channels), ints_attr("channels", gt->second.channels)};
      nodes.push_back(std::move(b));
      ++rewritten;
      give_back(out);
      continue;
    }
    const std::optional<Folded> act = fold_activation(i);
    ir::Node b = n;
    for (size_t k : slots[i]) b.inputs[k] = blocked_input(n.inputs[k]);
    const std::string& out = act ? g.nodes[act->last].outputs[0] : n.outputs[0];
    b.outputs[0] = blocked_name.emplace(out, fresh(out + "_nchwc")).first->second;
    if (act) {
      for (size_t r : readers.at(n.outputs[0])) folded[r] = true;
      std::erase_if(b.attrs, [](const ir::Attribute& a) { return a.name == "activation" || a.name == "activation_params"; });
      ir::Attribute a;
      a.name = "activation", a.type = ir::AttrType::kString, a.s = act->activation;
      b.attrs.push_back(a);
    }
    if (b.op_type == "BatchNormalization") {
      auto& [w, bias] = bn_weights.at(i);
      const std::string wn = fresh(out + "_bn_w"), bn = fresh(out + "_bn_b");
      const int64_t C = w.shape()[0];
      g.initializers.emplace_back(wn, std::move(w));
      g.initializers.emplace_back(bn, std::move(bias));
      b.inputs = {b.inputs[0], wn, bn};
      ir::Attribute group, kernel;
      group.name = "group", group.type = ir::AttrType::kInt, group.i = C;
      kernel.name = "kernel_shape", kernel.type = ir::AttrType::kInts, kernel.ints = {1, 1};
      std::erase_if(b.attrs, [](const ir::Attribute& a) { return a.name != "activation"; });  // a folded Relu's
      b.attrs.push_back(group);
      b.attrs.push_back(kernel);
      b.op_type = "NchwcConv";
      b.domain = ops::kDomain;
    } else if (b.op_type == "Conv" || b.op_type == "FusedConv") {
      b.op_type = "NchwcConv";
      b.domain = ops::kDomain;
    } else if (b.op_type == "MaxPool" || b.op_type == "AveragePool" || b.op_type == "GlobalAveragePool") {
      b.op_type = "Nchwc" + b.op_type;
      b.domain = ops::kDomain;
    } else if (b.op_type == "Concat") {
      b.attr("axis")->i = 1;  // [N, C/16, H, W, 16]: whole blocks follow one another
    }
    nodes.push_back(std::move(b));
    ++rewritten;
    give_back(out);
  }
  g.nodes = std::move(nodes);
  if (!bn_weights.empty() || !gathers.empty()) drop_unread_initializers(g);
  if (model.opset(ops::kDomain) == 0) model.opsets[ops::kDomain] = ops::kOpset;
  return rewritten;
}

size_t fuse_matmul_bias(ir::Model& model) {
  ir::Graph& g = *model.graph;
  if (ir::has_yield(g) || model.opset("") < 7) return 0;
  const ValueTypes type_of(model);
  auto readers = readers_of(g);
  auto fresh = [&](const std::string& base) {
    std::string n = base;
    for (int k = 1; g.initializer(n) || readers.count(n); ++k) n = base + "_" + std::to_string(k);
    readers.try_emplace(n);  // reserved: the next fresh() names differ
    return n;
  };
  auto shape_constant = [&](const std::string& base, const std::vector<int64_t>& dims) {
    Tensor t = Tensor::empty(DType::kInt64, {int64_t(dims.size())});
    std::copy(dims.begin(), dims.end(), t.data<int64_t>());
    const std::string name = fresh(base);
    g.initializers.emplace_back(name, std::move(t));
    return name;
  };
  auto node = [](std::string name, const char* op, std::vector<std::string> in, std::string out) {
    ir::Node n;
    n.name = std::move(name);
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    return n;
  };
  std::vector<bool> drop(g.nodes.size(), false);
  std::map<size_t, std::vector<ir::Node>> replace;  // index of the Add -> the nodes in its place
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& mm = g.nodes[i];
    if (!is(mm, "MatMul") || mm.inputs.size() != 2) continue;
    const Tensor* w = constant_tensor(g, mm.inputs[1], -1);
    if (!w || w->rank() != 2) continue;
    const int64_t K = w->shape()[0], N = w->shape()[1];
    const auto& rd = readers[mm.outputs[0]];
    if (rd.size() != 1 || rd[0] == SIZE_MAX || drop[rd[0]]) continue;
    const ir::Node& add = g.nodes[rd[0]];
    if (!is(add, "Add") || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1]) continue;
    const std::string& b = add.inputs[0] == mm.outputs[0] ? add.inputs[1] : add.inputs[0];
    const Tensor* bias = constant_tensor(g, b, N);
    if (!bias || bias->rank() < 1 || bias->rank() > 2 || bias->shape().back() != N) continue;
    const ir::TypeInfo* xt = type_of(mm.inputs[0]);
    if (!xt || xt->kind != ir::TypeInfo::Kind::kTensor || xt->elem != DType::kFloat32 || !xt->has_shape ||
        xt->dims.size() < 2 || !xt->dims.back().fixed() || xt->dims.back().value != K)
      continue;
    std::vector<int64_t> lead;  // X's leading dims, -1 for the one unknown
    int unknown = 0;
    for (size_t d = 0; d + 1 < xt->dims.size(); ++d) {
      const ir::Dim& dim = xt->dims[d];
      if (!dim.fixed()) ++unknown;
      lead.push_back(dim.fixed() ? dim.value : -1);
    }
    if (unknown > 1 || std::count(lead.begin(), lead.end(), 0) > 0) continue;
    std::vector<ir::Node> nodes;
    const std::string& y = add.outputs[0];
    if (lead.size() == 1) {
      nodes.push_back(node(mm.name, "Gemm", {mm.inputs[0], mm.inputs[1], b}, y));
    } else {
      const std::string x2 = fresh(mm.outputs[0] + "_rows"), y2 = fresh(y + "_rows");
      nodes.push_back(node(mm.name + "_rows", "Reshape", {mm.inputs[0], shape_constant(mm.name + "_rows_shape", {-1, K})}, x2));
      nodes.push_back(node(mm.name, "Gemm", {x2, mm.inputs[1], b}, y2));
      lead.push_back(N);
      nodes.push_back(node(add.name + "_shape", "Reshape", {y2, shape_constant(add.name + "_out_shape", lead)}, y));
    }
    drop[i] = drop[rd[0]] = true;
    replace[rd[0]] = std::move(nodes);
  }
  if (replace.empty()) return 0;
  const size_t fused = replace.size();
  ir::splice_nodes(g, std::move(replace), drop);
  return fused;
}

}  // namespace onnxtrain::runtime
