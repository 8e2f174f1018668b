// Structure-aware fuzz target: a model and its feeds, mutated as ONNX rather than as bytes.
//
// Input: "OTFZ" | u32 model bytes | ModelProto | (u32 bytes | TensorProto)* — the feeds, matched
// to the graph's inputs by position (inputs without one get feeds made from the input bytes).
// The custom mutator parses that, changes one thing the way a hostile or broken exporter would —
// an attribute value, a declared dim, an element type, a node's input, an index constant, a feed's
// shape, type or values — and serializes it again; kernels must then reject with a typed error
// naming the node (or compute), never read or write out of bounds.
// Internal operators (com.onnxtrain gradient kernels, optimizers, accumulation, clipping, loss
// scaling; com.microsoft.YieldOp; ai.onnx.preview.training) are reachable from any user model, so
// the mutator also leaves outputs unnamed, adds or drops outputs, changes a node's operator among
// the registered internal ones or its domain, and swaps a node's input for another value of the
// same element type.
// Seeds: the conformance cases (model.onnx + test_data_set_0/input_*.pb) and graphs of the internal
// operators (gradient graphs, training graphs, OrtModuleGraphBuilder graphs, single nodes), made by
// make_seeds.py.
#include <onnx/onnx_pb.h>

#include <cstring>
#include <map>
#include <random>

#include "fuzz_common.h"
#include "ir/onnx_io.h"
#include "kernels/kernel.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

struct Case {
  std::string model;
  std::vector<std::string> feeds;
};

bool read_u32(const uint8_t*& p, const uint8_t* end, uint32_t* v) {
  if (end - p < 4) return false;
  std::memcpy(v, p, 4);
  p += 4;
  return true;
}

bool parse_case(const uint8_t* data, size_t size, Case* c) {
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  if (size < 8 || std::memcmp(p, "OTFZ", 4) != 0) return false;
  p += 4;
  uint32_t n;
  if (!read_u32(p, end, &n) || uint64_t(end - p) < n) return false;
  c->model.assign(reinterpret_cast<const char*>(p), n);
  p += n;
  while (p < end) {
    if (!read_u32(p, end, &n) || uint64_t(end - p) < n) return false;
    c->feeds.emplace_back(reinterpret_cast<const char*>(p), n);
    p += n;
  }
  return true;
}

std::string format_case(const Case& c) {
  std::string out = "OTFZ";
  auto put = [&](const std::string& s) {
    const uint32_t n = uint32_t(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += s;
  };
  put(c.model);
  for (const auto& f : c.feeds) put(f);
  return out;
}

using Rng = std::mt19937_64;

int64_t pick(Rng& r, int64_t n) { return n <= 0 ? 0 : int64_t(r() % uint64_t(n)); }

/// An integer a hostile model would use: small, negative, off by one, or huge.
int64_t wild_int(Rng& r, int64_t near) {
  static const int64_t table[] = {-3, -2, -1, 0, 1, 2, 3, 4, 7, 8, 64, 1 << 20, int64_t(1) << 31,
                                  int64_t(1) << 40, INT64_MAX, INT64_MIN};
  switch (pick(r, 4)) {  // wrapping arithmetic: the mutator itself must not overflow
    case 0: return int64_t(uint64_t(near) + 1);
    case 1: return int64_t(uint64_t(near) - 1);
    case 2: return int64_t(0 - uint64_t(near));
    default: return table[pick(r, sizeof(table) / sizeof(table[0]))];
  }
}

const int kTypes[] = {1, 2, 3, 5, 6, 7, 9, 10, 11, 16};  // float, u8, i8, i16, i32, i64, bool, f16, f64, bf16

int64_t element_bytes(int t) {
  switch (t) {
    case 2: case 3: case 9: return 1;
    case 4: case 5: case 10: case 16: return 2;
    case 1: case 6: case 12: return 4;
    default: return 8;
  }
}

/// Every node of the graph and its subgraphs.
void collect_nodes(onnx::GraphProto* g, std::vector<onnx::NodeProto*>* out) {
  for (auto& n : *g->mutable_node()) {
    out->push_back(&n);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) collect_nodes(a.mutable_g(), out);
      for (auto& sg : *a.mutable_graphs()) collect_nodes(&sg, out);
    }
  }
}

bool mutate_attribute(onnx::NodeProto* n, Rng& r) {
  if (n->attribute_size() == 0) return false;
  const int index = int(pick(r, n->attribute_size()));
  onnx::AttributeProto* a = n->mutable_attribute(index);
  if (pick(r, 8) == 0) {  // drop it
    n->mutable_attribute()->DeleteSubrange(index, 1);
    return true;
  }
  switch (a->type()) {
    case onnx::AttributeProto::INT: a->set_i(wild_int(r, a->i())); return true;
    case onnx::AttributeProto::FLOAT: {
      const float v[] = {0.f, -1.f, 1e30f, -1e-30f, std::numeric_limits<float>::quiet_NaN(), a->f() * 2};
      a->set_f(v[pick(r, 6)]);
      return true;
    }
    case onnx::AttributeProto::INTS:
      if (a->ints_size() > 0 && pick(r, 3) != 0) {
        const int i = int(pick(r, a->ints_size()));
        a->set_ints(i, wild_int(r, a->ints(i)));
      } else if (a->ints_size() > 0 && pick(r, 2) == 0) {
        a->mutable_ints()->RemoveLast();
      } else {
        a->add_ints(wild_int(r, 1));
      }
      return true;
    case onnx::AttributeProto::FLOATS:
      if (a->floats_size() > 0) a->set_floats(int(pick(r, a->floats_size())), float(wild_int(r, 1)));
      else a->add_floats(0.5f);
      return true;
    case onnx::AttributeProto::STRING: {
      const char* v[] = {"", "NOTSET", "SAME_UPPER", "VALID", "linear", "nearest", "cubic", "constant", "reflect",
                         "edge", "DCR", "CRD", "mean", "sum", "none", "\xff"};
      a->set_s(v[pick(r, 16)]);
      return true;
    }
    case onnx::AttributeProto::TENSOR: {
      onnx::TensorProto* t = a->mutable_t();
      if (t->dims_size() > 0 && pick(r, 2) == 0) t->set_dims(int(pick(r, t->dims_size())), wild_int(r, 1));
      else t->set_data_type(kTypes[pick(r, 10)]);
      return true;
    }
    default: return false;
  }
}

bool mutate_type(onnx::TypeProto* type, Rng& r) {
  if (!type->has_tensor_type()) return false;
  onnx::TypeProto_Tensor* tt = type->mutable_tensor_type();
  const int64_t what = pick(r, 6);
  if (what == 0) {
    tt->set_elem_type(kTypes[pick(r, 10)]);
    return true;
  }
  onnx::TensorShapeProto* s = tt->mutable_shape();
  if (what == 1) {
    s->add_dim()->set_dim_value(pick(r, 4));
  } else if (what == 2 && s->dim_size() > 0) {
    s->mutable_dim()->RemoveLast();
  } else if (what == 3) {
    tt->clear_shape();
  } else if (s->dim_size() > 0) {
    onnx::TensorShapeProto_Dimension* d = s->mutable_dim(int(pick(r, s->dim_size())));
    if (pick(r, 4) == 0) d->set_dim_param("N");
    else d->set_dim_value(pick(r, 6));  // 0..5: zero-size and mismatched extents
  } else {
    return false;
  }
  return true;
}

/// Leaves an output unnamed, drops the last one or adds one (extra outputs of a node are refused,
/// unnamed ones have no buffer: kernels must not write them).
bool mutate_node_outputs(onnx::NodeProto* n, Rng& r) {
  const int64_t what = pick(r, 3);
  if (what == 0 && n->output_size() > 0) {
    n->set_output(int(pick(r, n->output_size())), "");
  } else if (what == 1 && n->output_size() > 1) {
    n->mutable_output()->RemoveLast();
  } else {
    n->add_output("fuzz_out_" + std::to_string(n->output_size()));
  }
  return true;
}

/// The domains whose operators are internal or training-only, and the operators registered there
/// (read from the kernel registry, so that new internal kernels are fuzzed without a list here).
const std::vector<std::pair<std::string, std::string>>& internal_ops() {
  static const auto ops = [] {
    std::vector<std::pair<std::string, std::string>> v;
    for (const auto& [domain, op] : onnxtrain::KernelRegistry::global().ops())
      if (domain == "com.onnxtrain" || domain == "ai.onnx.preview.training") v.emplace_back(domain, op);
    v.emplace_back("com.microsoft", "YieldOp");
    return v;
  }();
  return ops;
}

void import_domain(onnx::ModelProto* m, const std::string& domain) {
  for (const auto& o : m->opset_import())
    if (o.domain() == domain || (domain.empty() && o.domain() == "ai.onnx")) return;
  auto* o = m->add_opset_import();
  o->set_domain(domain);
  o->set_version(domain.empty() ? 17 : 1);
}

/// Turns a node into another internal operator (keeping its inputs, outputs and attributes), or
/// moves it to another domain.
bool mutate_op(onnx::ModelProto* m, onnx::NodeProto* n, Rng& r) {
  if (pick(r, 3) == 0) {
    static const char* domains[] = {"", "com.onnxtrain", "com.microsoft", "ai.onnx.preview.training"};
    n->set_domain(domains[pick(r, 4)]);
  } else {
    const auto& ops = internal_ops();
    const auto& [domain, op] = ops[size_t(pick(r, int64_t(ops.size())))];
    n->set_domain(domain);
    n->set_op_type(op);
  }
  import_domain(m, n->domain());
  return true;
}

/// Element type of every value the graph declares (inputs, initializers, value_info, outputs).
std::map<std::string, int> declared_types(const onnx::GraphProto& g) {
  std::map<std::string, int> types;
  auto add = [&](const onnx::ValueInfoProto& v) {
    if (v.type().has_tensor_type()) types[v.name()] = v.type().tensor_type().elem_type();
  };
  for (const auto& v : g.input()) add(v);
  for (const auto& v : g.value_info()) add(v);
  for (const auto& v : g.output()) add(v);
  for (const auto& t : g.initializer()) types[t.name()] = t.data_type();
  return types;
}

/// Replaces one input of a node by another value of the same element type (a gradient for a
/// moment, dY for X, a shape input for indices), or swaps two of its inputs.
bool swap_same_typed_input(onnx::GraphProto* g, onnx::NodeProto* n, Rng& r) {
  if (n->input_size() == 0) return false;
  const int i = int(pick(r, n->input_size()));
  const auto types = declared_types(*g);
  const auto it = types.find(n->input(i));
  std::vector<std::string> same;
  if (it != types.end())
    for (const auto& [name, t] : types)
      if (t == it->second && name != n->input(i)) same.push_back(name);
  if (!same.empty() && pick(r, 4) != 0) {
    n->set_input(i, same[size_t(pick(r, int64_t(same.size())))]);
  } else {
    if (n->input_size() < 2) return false;
    const int j = int(pick(r, n->input_size()));
    if (i == j) return false;
    const std::string t = n->input(i);
    n->set_input(i, n->input(j));
    n->set_input(j, t);
  }
  return true;
}

bool mutate_node_input(onnx::GraphProto* g, onnx::NodeProto* n, Rng& r) {
  std::vector<std::string> names;
  for (const auto& i : g->input()) names.push_back(i.name());
  for (const auto& i : g->initializer()) names.push_back(i.name());
  for (const auto& m : g->node())
    for (const auto& o : m.output()) names.push_back(o);
  if (names.empty()) return false;
  const int64_t what = pick(r, 4);
  if (what == 0 || n->input_size() == 0) {
    n->add_input(names[pick(r, int64_t(names.size()))]);
  } else if (what == 1) {
    n->mutable_input()->RemoveLast();
  } else if (what == 2) {
    n->set_input(int(pick(r, n->input_size())), "");
  } else {
    n->set_input(int(pick(r, n->input_size())), names[pick(r, int64_t(names.size()))]);
  }
  return true;
}

/// Changes an integer initializer's values (indices, shapes, axes, pads), or any initializer's dims.
bool mutate_initializer(onnx::GraphProto* g, Rng& r) {
  if (g->initializer_size() == 0) return false;
  onnx::TensorProto* t = g->mutable_initializer(int(pick(r, g->initializer_size())));
  if (t->data_type() == onnx::TensorProto::INT64 && t->int64_data_size() > 0) {
    const int i = int(pick(r, t->int64_data_size()));
    t->set_int64_data(i, wild_int(r, t->int64_data(i)));
    return true;
  }
  if (t->data_type() == onnx::TensorProto::INT64 && t->raw_data().size() >= 8) {
    std::string* raw = t->mutable_raw_data();
    const size_t i = size_t(pick(r, int64_t(raw->size() / 8)));
    int64_t v;
    std::memcpy(&v, raw->data() + 8 * i, 8);
    v = wild_int(r, v);
    std::memcpy(raw->data() + 8 * i, &v, 8);
    return true;
  }
  if (t->dims_size() > 0) {
    t->set_dims(int(pick(r, t->dims_size())), pick(r, 5));
    return true;
  }
  return false;
}

/// Reshapes a feed (keeping raw data consistent), changes its type, or writes index-like values.
bool mutate_feed(std::string* bytes, Rng& r) {
  onnx::TensorProto t;
  if (!t.ParseFromString(*bytes)) return false;
  if (t.data_type() == onnx::TensorProto::STRING) return false;
  // Normalize to raw_data so sizes are easy to keep right.
  if (t.raw_data().empty()) {
    std::string raw;
    for (float v : t.float_data()) raw.append(reinterpret_cast<const char*>(&v), 4);
    for (int32_t v : t.int32_data()) {
      const int64_t b = element_bytes(t.data_type());
      raw.append(reinterpret_cast<const char*>(&v), size_t(b > 4 ? 4 : b));
    }
    for (int64_t v : t.int64_data()) raw.append(reinterpret_cast<const char*>(&v), 8);
    for (double v : t.double_data()) raw.append(reinterpret_cast<const char*>(&v), 8);
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_int64_data();
    t.clear_double_data();
    t.set_raw_data(raw);
  }
  const int64_t what = pick(r, 4);
  if (what == 0) {
    t.set_data_type(kTypes[pick(r, 10)]);
  } else if (what == 1 || t.raw_data().empty()) {
    // New shape: change, add or drop one dim, then resize the data to match.
    if (t.dims_size() > 0 && pick(r, 3) != 0) t.set_dims(int(pick(r, t.dims_size())), pick(r, 6));
    else if (t.dims_size() > 0 && pick(r, 2) == 0) t.mutable_dims()->RemoveLast();
    else t.add_dims(1 + pick(r, 3));
    int64_t n = 1;
    for (int64_t d : t.dims()) {
      if (d < 0 || d > (1 << 16) || (n *= d) > (1 << 16)) return false;
    }
    std::string raw = t.raw_data();
    raw.resize(size_t(n * element_bytes(t.data_type())), '\x01');
    t.set_raw_data(raw);
  } else {
    std::string* raw = t.mutable_raw_data();
    const int64_t eb = element_bytes(t.data_type());
    const int64_t i = pick(r, int64_t(raw->size()) / eb);
    const int64_t v = wild_int(r, 0);
    std::memcpy(raw->data() + i * eb, &v, size_t(eb));  // little-endian: the low bytes of v
  }
  return t.SerializeToString(bytes);
}

bool mutate_case(Case* c, Rng& r) {
  onnx::ModelProto m;
  if (!m.ParseFromString(c->model) || !m.has_graph()) return false;
  onnx::GraphProto* g = m.mutable_graph();
  std::vector<onnx::NodeProto*> nodes;
  collect_nodes(g, &nodes);
  bool changed = false;
  onnx::NodeProto* node = nodes.empty() ? nullptr : nodes[size_t(pick(r, int64_t(nodes.size())))];
  onnx::NodeProto* top = g->node_size() > 0 ? g->mutable_node(int(pick(r, g->node_size()))) : nullptr;
  switch (pick(r, 10)) {
    case 0:
      if (node) changed = mutate_attribute(node, r);
      break;
    case 1: {
      const int64_t k = g->input_size() + g->output_size() + g->value_info_size();
      if (k == 0) break;
      int64_t i = pick(r, k);
      onnx::ValueInfoProto* v = i < g->input_size() ? g->mutable_input(int(i))
                                : (i -= g->input_size()) < g->output_size() ? g->mutable_output(int(i))
                                                                            : g->mutable_value_info(int(i - g->output_size()));
      changed = mutate_type(v->mutable_type(), r);
      break;
    }
    case 2:
      if (top) changed = mutate_node_input(g, top, r);
      break;
    case 3: changed = mutate_initializer(g, r); break;
    case 4:
      if (node) changed = mutate_node_outputs(node, r);
      break;
    case 5:
      if (node) changed = mutate_op(&m, node, r);
      break;
    case 6:
      if (top) changed = swap_same_typed_input(g, top, r);
      break;
    default:
      if (!c->feeds.empty()) changed = mutate_feed(&c->feeds[size_t(pick(r, int64_t(c->feeds.size())))], r);
      break;
  }
  if (changed) changed = m.SerializeToString(&c->model);
  return changed;
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Case c;
  Rng r(seed);
  if (parse_case(data, size, &c)) {
    for (int tries = 0; tries < 4; ++tries) {
      Case m = c;
      if (!mutate_case(&m, r)) continue;
      const std::string out = format_case(m);
      if (out.size() > max_size) continue;
      std::memcpy(data, out.data(), out.size());
      return out.size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Case c;
  if (!parse_case(data, size, &c)) return 0;
  fuzz::guarded([&] {
    onnxtrain::InferenceSession s(c.model.data(), c.model.size(), fuzz::fuzz_session_options());
    fuzz::ByteSource bytes(data, size);
    std::vector<std::pair<std::string, onnxtrain::Tensor>> feeds;
    if (!fuzz::make_feeds(s, bytes, &feeds)) return;
    for (size_t i = 0; i < c.feeds.size() && i < feeds.size(); ++i)
      feeds[i].second = onnxtrain::ir::load_tensor_bytes(c.feeds[i].data(), c.feeds[i].size(), "feed");
    fuzz::run_with_budget(s, feeds);
  });
  return 0;
}
