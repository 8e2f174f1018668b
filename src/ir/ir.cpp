#include "ir/ir.h"
#include "ir/splice.h"
#include <algorithm>
#include <queue>
#include <set>
#include <sstream>

#include "onnxtrain/error.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::ir {

std::string TypeInfo::to_string() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::kTensor:
    case Kind::kSparseTensor:
      os << (kind == Kind::kTensor ? "tensor(" : "sparse_tensor(") << dtype_name(elem) << ")";
      if (has_shape) {
        os << "[";
        for (size_t i = 0; i < dims.size(); ++i) {
          if (i) os << ", ";
          if (dims[i].fixed()) os << dims[i].value;
          else os << (dims[i].param.empty() ? "?" : dims[i].param);
        }
        os << "]";
      }
      break;
    case Kind::kSequence: os << "seq(" << (inner ? inner->to_string() : "?") << ")"; break;
    case Kind::kOptional: os << "optional(" << (inner ? inner->to_string() : "?") << ")"; break;
    case Kind::kMap: os << "map(" << dtype_name(elem) << ", " << (inner ? inner->to_string() : "?") << ")"; break;
    default: os << "unknown";
  }
  return os.str();
}

TypeInfo TypeInfo::tensor(DType elem, const std::vector<int64_t>& shape) {
  TypeInfo t;
  t.kind = Kind::kTensor;
  t.elem = elem;
  t.has_shape = true;
  for (int64_t d : shape) t.dims.push_back(Dim{d, ""});
  return t;
}

TypeInfo TypeInfo::tensor(DType elem) {
  TypeInfo t;
  t.kind = Kind::kTensor;
  t.elem = elem;
  return t;
}

const char* attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::kFloat: return "float";
    case AttrType::kInt: return "int";
    case AttrType::kString: return "string";
    case AttrType::kTensor: return "tensor";
    case AttrType::kGraph: return "graph";
    case AttrType::kFloats: return "floats";
    case AttrType::kInts: return "ints";
    case AttrType::kStrings: return "strings";
    case AttrType::kTensors: return "tensors";
    case AttrType::kGraphs: return "graphs";
    case AttrType::kSparseTensor: return "sparse_tensor";
    case AttrType::kSparseTensors: return "sparse_tensors";
    case AttrType::kTypeProto: return "type_proto";
    case AttrType::kTypeProtos: return "type_protos";
    default: return "undefined";
  }
}

const Attribute* Node::attr(const std::string& n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

Attribute* Node::attr(const std::string& n) {
  for (auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

std::string Node::describe() const {
  std::string d = domain.empty() ? op_type : domain + "." + op_type;
  if (!name.empty()) return d + " node '" + name + "'";
  if (!outputs.empty() && !outputs[0].empty()) return d + " node (output '" + outputs[0] + "')";
  return d + " node (unnamed)";
}

std::vector<const Graph*> Node::subgraphs() const {
  std::vector<const Graph*> r;
  for (const auto& a : attrs) {
    if (a.type == AttrType::kGraph && a.g) r.push_back(a.g.get());
    if (a.type == AttrType::kGraphs)
      for (const auto& g : a.graphs)
        if (g) r.push_back(g.get());
  }
  return r;
}

const Tensor* Graph::initializer(const std::string& n) const {
  for (const auto& [k, v] : initializers)
    if (k == n) return &v;
  return nullptr;
}

Tensor* Graph::initializer(const std::string& n) {
  for (auto& [k, v] : initializers)
    if (k == n) return &v;
  return nullptr;
}

bool Graph::is_input(const std::string& n) const {
  for (const auto& v : inputs)
    if (v.name == n) return true;
  return false;
}

std::vector<std::string> Graph::free_variables() const {
  std::unordered_set<std::string> defined;
  for (const auto& v : inputs) defined.insert(v.name);
  for (const auto& [k, v] : initializers) defined.insert(k);
  for (const auto& n : nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) defined.insert(o);
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  auto use = [&](const std::string& s) {
    if (!s.empty() && !defined.count(s) && seen.insert(s).second) out.push_back(s);
  };
  for (const auto& n : nodes) {
    for (const auto& i : n.inputs) use(i);
    for (const Graph* sg : n.subgraphs())
      for (const auto& f : sg->free_variables()) use(f);
  }
  for (const auto& o : outputs) use(o.name);
  return out;
}

int64_t Model::opset(const std::string& d) const {
  auto it = opsets.find(normalize_domain(d));
  return it == opsets.end() ? 0 : it->second;
}

bool has_yield(const Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(),
                     [](const Node& n) { return n.domain == ops::kMicrosoftDomain && n.op_type == "YieldOp"; });
}

void splice_nodes(Graph& g, std::map<size_t, std::vector<Node>> replace, const std::vector<bool>& drop) {
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto it = replace.find(i); it != replace.end())
      for (auto& n : it->second) nodes.push_back(std::move(n));
    else if (!drop[i])
      nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
  std::set<std::string> defined;
  for (const auto& n : g.nodes) defined.insert(n.outputs.begin(), n.outputs.end());
  std::erase_if(g.value_info, [&](const ValueInfo& v) { return !defined.count(v.name) && !g.is_input(v.name) && !g.initializer(v.name); });
}

void splice_nodes(Graph& g, std::map<size_t, Node> replace, const std::vector<bool>& drop) {
  std::map<size_t, std::vector<Node>> many;
  for (auto& [i, n] : replace) many[i].push_back(std::move(n));
  splice_nodes(g, std::move(many), drop);
}

std::vector<std::string> implicit_inputs(const Node& n) {
  std::vector<std::string> r;
  std::unordered_set<std::string> seen;
  for (const Graph* g : n.subgraphs())
    for (const auto& f : g->free_variables())
      if (seen.insert(f).second) r.push_back(f);
  return r;
}

std::string normalize_domain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }

namespace {
// Inputs a node reads, including outer-scope values its subgraphs read.
std::vector<std::string> node_reads(const Node& n) {
  std::vector<std::string> r;
  for (const auto& i : n.inputs)
    if (!i.empty()) r.push_back(i);
  for (const auto& f : implicit_inputs(n)) r.push_back(f);
  return r;
}
}  // namespace

std::vector<size_t> topological_order(const Graph& g, const std::unordered_set<std::string>& outer) {
  (void)outer;
  const size_t n = g.nodes.size();
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer.emplace(o, i);
  std::vector<std::vector<size_t>> consumers(n);
  std::vector<size_t> pending(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::unordered_set<size_t> deps;
    for (const auto& in : node_reads(g.nodes[i])) {
      auto it = producer.find(in);
      if (it != producer.end()) deps.insert(it->second);
    }
    for (size_t d : deps) {
      consumers[d].push_back(i);
      ++pending[i];
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<size_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t c : consumers[i])
      if (--pending[c] == 0) ready.push(c);
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (pending[i] != 0)
        throw_error<InvalidGraph>("graph '", g.name, "' has a cycle through ", g.nodes[i].describe());
  }
  return order;
}

void validate_graph(const Graph& g, const std::unordered_set<std::string>& outer) {
  std::unordered_set<std::string> defined;
  for (const auto& v : g.inputs) {
    if (v.name.empty()) throw_error<InvalidGraph>("graph '", g.name, "' has an input with an empty name");
    if (!defined.insert(v.name).second)
      throw_error<InvalidGraph>("graph '", g.name, "' declares input '", v.name, "' twice");
  }
  std::unordered_set<std::string> inits;
  for (const auto& [k, v] : g.initializers) {
    if (k.empty()) throw_error<InvalidGraph>("graph '", g.name, "' has an initializer with an empty name");
    if (!inits.insert(k).second)
      throw_error<InvalidGraph>("graph '", g.name, "' has two initializers named '", k, "'");
    defined.insert(k);  // an initializer may also be listed as an input (a default value)
  }
  for (const auto& n : g.nodes) {
    if (n.op_type.empty()) throw_error<InvalidGraph>("graph '", g.name, "' has a node without op_type");
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      if (!defined.insert(o).second)
        throw_error<InvalidGraph>("value '", o, "' is defined twice (again as an output of ", n.describe(),
                                  ")");
    }
  }
  std::unordered_set<std::string> visible = outer;
  visible.insert(defined.begin(), defined.end());
  for (const auto& n : g.nodes) {
    for (const auto& i : n.inputs)
      if (!i.empty() && !visible.count(i))
        throw_error<InvalidGraph>(n.describe(), " reads '", i, "', which no node, input or initializer defines");
    for (const Graph* sg : n.subgraphs()) {
      try {
        validate_graph(*sg, visible);
      } catch (const InvalidGraph& e) {
        throw_error<InvalidGraph>("in a subgraph of ", n.describe(), ": ", e.what());
      }
    }
  }
  std::unordered_set<std::string> outs;
  for (const auto& o : g.outputs) {
    if (o.name.empty()) throw_error<InvalidGraph>("graph '", g.name, "' declares an output with an empty name");
    if (!visible.count(o.name))
      throw_error<InvalidGraph>("graph '", g.name, "' declares output '", o.name, "', which is never produced");
  }
  topological_order(g, outer);
}

}  // namespace onnxtrain::ir
