// ONNX protobuf <-> IR. The only place that reads model bytes; every field is validated before
// it sizes an allocation.
#include "ir/onnx_io.h"

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/unknown_field_set.h>
#include <onnx/defs/schema.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <unordered_set>

#include "core/atomic_file.h"
#include "core/sparse.h"
#include "ir/external_data.h"
#include "ir/opset_lower.h"
#include "ir/proto.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::ir {

namespace {

constexpr uint64_t kProtobufLimit = uint64_t(INT_MAX);  // protobuf refuses messages >= 2 GiB

template <class Dst, class Src>
void copy_typed(const Src& src, Tensor& t) {
  Dst* d = static_cast<Dst*>(t.raw_data());
  for (int i = 0; i < src.size(); ++i) d[i] = static_cast<Dst>(src.Get(i));
}

}  // namespace

// Bytes of a bool tensor read as they are stored may hold any value; a bool is 0 or 1 (nonzero
// bytes are true, as numpy and onnxruntime read them).
static void normalize_bools(Tensor& t) {
  if (t.dtype() != DType::kBool) return;
  auto* b = static_cast<uint8_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) b[i] = b[i] != 0;
}

namespace {

// Whether the protobuf fields a message's parser did not know (ONNX 1.12's schema: fields of newer
// IR versions) include field number `field`.
bool has_unknown_field(const google::protobuf::UnknownFieldSet& unknown, int field) {
  for (int i = 0; i < unknown.field_count(); ++i)
    if (unknown.field(i).number() == field) return true;
  return false;
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what_in, const std::string& base_dir,
                         const ExternalFiles* in_memory) {
  const std::string what = what_in.empty() ? (p.name().empty() ? std::string("<unnamed>") : p.name()) : what_in;
  const int dt_raw = p.data_type();
  const DType dt = static_cast<DType>(dt_raw);
  if (const char* name = unsupported_onnx_type_name(dt_raw))
    throw_error<NotImplemented>("tensor '", what, "' has data type ", name, ", which onnxtrain does not support");
  if (dt_raw <= 0 || dt_raw > 16 || dtype_size(dt) == 0)
    throw_error<InvalidModel>("tensor '", what, "' has unknown data type ", dt_raw);
  if (dt == DType::kComplex64 || dt == DType::kComplex128)
    throw_error<NotImplemented>("tensor '", what, "' has unsupported data type ", dtype_name(dt));
  if (p.has_segment()) throw_error<NotImplemented>("tensor '", what, "' is segmented (not supported)");
  Shape shape;
  shape.reserve(size_t(p.dims_size()));
  for (int i = 0; i < p.dims_size(); ++i) {
    if (p.dims(i) < 0)
      throw_error<InvalidModel>("tensor '", what, "' has negative dimension ", p.dims(i), " at axis ", i);
    shape.push_back(p.dims(i));
  }
  int64_t n;
  if (!checked_numel(shape, &n))
    throw_error<InvalidModel>("tensor '", what, "' has dimensions ", shape_to_string(shape),
                              " multiplying past 2^52 (zero dims aside)");
  const uint64_t esize = dtype_size(dt);
  uint64_t nbytes;
  if (__builtin_mul_overflow(uint64_t(n), esize, &nbytes))
    throw_error<InvalidModel>("tensor '", what, "' byte size overflows (", n, " elements)");

  const bool external = p.data_location() == onnx::TensorProto::EXTERNAL;
  const bool has_raw = p.has_raw_data() && !p.raw_data().empty();
  int64_t typed = 0;
  typed += p.float_data_size() + p.int32_data_size() + p.string_data_size() + p.int64_data_size() +
           p.double_data_size() + p.uint64_data_size();
  int sources = int(external) + int(has_raw) + int(typed > 0);
  if (sources > 1)
    throw_error<InvalidModel>("tensor '", what, "' holds its data in more than one place (raw_data, typed "
                              "fields, external data)");
  if (dt == DType::kString && (has_raw || external))
    throw_error<InvalidModel>("string tensor '", what, "' must use string_data");

  if (external) {
    Tensor t = read_external_data(p, what, base_dir, dt, shape, nbytes, in_memory);
    normalize_bools(t);
    return t;
  }

  if (has_raw) {
    if (uint64_t(p.raw_data().size()) != nbytes)
      throw_error<InvalidModel>("tensor '", what, "' raw_data holds ", p.raw_data().size(), " bytes but its shape ",
                                shape_to_string(shape), " of ", dtype_name(dt), " needs ", nbytes);
    Tensor t = Tensor::empty(dt, shape);
    if (nbytes) std::memcpy(t.raw_data(), p.raw_data().data(), nbytes);
    normalize_bools(t);
    return t;
  }

  auto check_count = [&](int64_t count, const char* field) {
    if (count != n)
      throw_error<InvalidModel>("tensor '", what, "' has ", count, " values in ", field, " but its shape ",
                                shape_to_string(shape), " needs ", n);
  };
  if (n > 0 && typed == 0)
    throw_error<InvalidModel>("tensor '", what, "' has no data (its shape ", shape_to_string(shape), " needs ", n,
                              " elements)");
  // Check the element count against the populated field before allocating anything.
  switch (dt) {
    case DType::kFloat32: check_count(p.float_data_size(), "float_data"); break;
    case DType::kFloat64: check_count(p.double_data_size(), "double_data"); break;
    case DType::kInt64: check_count(p.int64_data_size(), "int64_data"); break;
    case DType::kUInt32:
    case DType::kUInt64: check_count(p.uint64_data_size(), "uint64_data"); break;
    case DType::kString: check_count(p.string_data_size(), "string_data"); break;
    default: check_count(p.int32_data_size(), "int32_data"); break;
  }
  Tensor t = Tensor::empty(dt, shape);
  switch (dt) {
    case DType::kFloat32:
      check_count(p.float_data_size(), "float_data");
      copy_typed<float>(p.float_data(), t);
      break;
    case DType::kFloat64:
      check_count(p.double_data_size(), "double_data");
      copy_typed<double>(p.double_data(), t);
      break;
    case DType::kInt64:
      check_count(p.int64_data_size(), "int64_data");
      copy_typed<int64_t>(p.int64_data(), t);
      break;
    case DType::kInt32:
      check_count(p.int32_data_size(), "int32_data");
      copy_typed<int32_t>(p.int32_data(), t);
      break;
    case DType::kInt16:
      check_count(p.int32_data_size(), "int32_data");
      copy_typed<int16_t>(p.int32_data(), t);
      break;
    case DType::kInt8:
      check_count(p.int32_data_size(), "int32_data");
      copy_typed<int8_t>(p.int32_data(), t);
      break;
    case DType::kUInt16:
    case DType::kFloat16:
    case DType::kBFloat16:
      check_count(p.int32_data_size(), "int32_data");
      copy_typed<uint16_t>(p.int32_data(), t);
      break;
    case DType::kUInt8:
      check_count(p.int32_data_size(), "int32_data");
      copy_typed<uint8_t>(p.int32_data(), t);
      break;
    case DType::kBool: {
      check_count(p.int32_data_size(), "int32_data");
      bool* d = t.data<bool>();
      for (int i = 0; i < p.int32_data_size(); ++i) d[i] = p.int32_data(i) != 0;
      break;
    }
    case DType::kUInt32:
      check_count(p.uint64_data_size(), "uint64_data");
      copy_typed<uint32_t>(p.uint64_data(), t);
      break;
    case DType::kUInt64:
      check_count(p.uint64_data_size(), "uint64_data");
      copy_typed<uint64_t>(p.uint64_data(), t);
      break;
    case DType::kString: {
      check_count(p.string_data_size(), "string_data");
      std::string* d = t.data<std::string>();
      for (int i = 0; i < p.string_data_size(); ++i) d[i] = p.string_data(i);
      break;
    }
    default: throw_error<NotImplemented>("tensor '", what, "' has unsupported data type ", dtype_name(dt));
  }
  return t;
}

// A sparse tensor of a model (a sparse initializer, a Constant's sparse_value) as the dense tensor
// it stands for, as onnxruntime loads it. Validated before anything is written: the dense dims
// non-negative and of a bounded size, the values 1-D, the indices int64 (or int32) of shape [NNZ]
// (linear) or [NNZ, rank] (coordinates), each in range.
Tensor sparse_tensor_to_dense(const onnx::SparseTensorProto& p, const std::string& what_in, const std::string& base_dir,
                              const ExternalFiles* in_memory) {
  const std::string what = "sparse tensor '" + (what_in.empty() ? p.values().name() : what_in) + "'";
  Shape dims;
  for (int i = 0; i < p.dims_size(); ++i) {
    if (p.dims(i) < 0) throw_error<InvalidModel>(what, " has negative dimension ", p.dims(i), " at axis ", i);
    dims.push_back(p.dims(i));
  }
  int64_t numel;
  if (!checked_numel(dims, &numel))
    throw_error<InvalidModel>(what, " has dense dimensions ", shape_to_string(dims), " whose size overflows");
  const Tensor values = tensor_from_proto(p.values(), what + " values", base_dir, in_memory);
  if (values.rank() != 1)
    throw_error<InvalidModel>(what, ": values must be 1-D [NNZ], got ", shape_to_string(values.shape()));
  const int64_t nnz = values.numel();
  if (nnz > numel)
    throw_error<InvalidModel>(what, " has ", nnz, " values for a dense shape ", shape_to_string(dims), " of ", numel,
                              " elements");
  Tensor indices;
  if (nnz > 0 || p.has_indices()) indices = tensor_from_proto(p.indices(), what + " indices", base_dir, in_memory);
  return scatter_dense(values, dims, coo_linear_indices<InvalidModel>(indices, nnz, dims, what));
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  if (!name.empty()) p->set_name(name);
  p->set_data_type(static_cast<int>(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  if (t.dtype() == DType::kString) {
    const std::string* s = t.data<std::string>();
    for (int64_t i = 0; i < t.numel(); ++i) p->add_string_data(s[i]);
  } else {
    p->set_raw_data(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
}

TypeInfo type_from_proto(const onnx::TypeProto& p) {
  TypeInfo t;
  auto read_shape = [&](const onnx::TensorShapeProto& s) {
    t.has_shape = true;
    for (const auto& d : s.dim()) {
      Dim dim;
      if (d.has_dim_value()) dim.value = d.dim_value() >= 0 ? d.dim_value() : -1;
      if (d.has_dim_param()) dim.param = d.dim_param();
      dim.denotation = d.denotation();
      t.dims.push_back(dim);
    }
  };
  switch (p.value_case()) {
    case onnx::TypeProto::kTensorType:
      t.kind = TypeInfo::Kind::kTensor;
      t.elem = static_cast<DType>(p.tensor_type().elem_type());
      if (p.tensor_type().has_shape()) read_shape(p.tensor_type().shape());
      break;
    case onnx::TypeProto::kSparseTensorType:
      t.kind = TypeInfo::Kind::kSparseTensor;
      t.elem = static_cast<DType>(p.sparse_tensor_type().elem_type());
      if (p.sparse_tensor_type().has_shape()) read_shape(p.sparse_tensor_type().shape());
      break;
    case onnx::TypeProto::kSequenceType:
      t.kind = TypeInfo::Kind::kSequence;
      t.inner = std::make_shared<TypeInfo>(type_from_proto(p.sequence_type().elem_type()));
      break;
    case onnx::TypeProto::kOptionalType:
      t.kind = TypeInfo::Kind::kOptional;
      t.inner = std::make_shared<TypeInfo>(type_from_proto(p.optional_type().elem_type()));
      break;
    case onnx::TypeProto::kMapType:
      t.kind = TypeInfo::Kind::kMap;
      t.elem = static_cast<DType>(p.map_type().key_type());
      t.inner = std::make_shared<TypeInfo>(type_from_proto(p.map_type().value_type()));
      break;
    default: break;
  }
  return t;
}

void type_to_proto(const TypeInfo& t, onnx::TypeProto* p) {
  p->Clear();
  auto write_shape = [&](onnx::TensorShapeProto* s) {
    for (const auto& d : t.dims) {
      auto* pd = s->add_dim();
      if (d.fixed()) pd->set_dim_value(d.value);
      else if (!d.param.empty()) pd->set_dim_param(d.param);
      if (!d.denotation.empty()) pd->set_denotation(d.denotation);
    }
  };
  switch (t.kind) {
    case TypeInfo::Kind::kTensor:
      p->mutable_tensor_type()->set_elem_type(static_cast<int>(t.elem));
      if (t.has_shape) write_shape(p->mutable_tensor_type()->mutable_shape());
      break;
    case TypeInfo::Kind::kSparseTensor:
      p->mutable_sparse_tensor_type()->set_elem_type(static_cast<int>(t.elem));
      if (t.has_shape) write_shape(p->mutable_sparse_tensor_type()->mutable_shape());
      break;
    case TypeInfo::Kind::kSequence:
      if (t.inner) type_to_proto(*t.inner, p->mutable_sequence_type()->mutable_elem_type());
      else p->mutable_sequence_type();
      break;
    case TypeInfo::Kind::kOptional:
      if (t.inner) type_to_proto(*t.inner, p->mutable_optional_type()->mutable_elem_type());
      else p->mutable_optional_type();
      break;
    case TypeInfo::Kind::kMap:
      p->mutable_map_type()->set_key_type(static_cast<int>(t.elem));
      if (t.inner) type_to_proto(*t.inner, p->mutable_map_type()->mutable_value_type());
      break;
    default: break;
  }
}

namespace {

struct Reader {
  std::string base_dir;
  const LoadOptions* options = nullptr;

  const ExternalFiles* in_memory() const { return options ? &options->external_files : nullptr; }

  // An initializer of the main graph: the caller's replacement when there is one (the model's data
  // is then not read), else decoded from the proto.
  Tensor initializer(const onnx::TensorProto& t, int depth) {
    if (depth == 0 && options) {
      auto it = options->initializers.find(t.name());
      if (it != options->initializers.end()) {
        const Tensor& v = it->second;
        Shape dims(t.dims().begin(), t.dims().end());
        if (int(v.dtype()) != t.data_type() || v.shape() != dims)
          throw_error<InvalidArgument>("add_initializer('", t.name(), "'): the value is ", v.describe(),
                                       " but the model's is ", dtype_name(static_cast<DType>(t.data_type())), " ",
                                       shape_to_string(dims));
        return v;
      }
    }
    return tensor_from_proto(t, t.name(), base_dir, in_memory());
  }

  ValueInfo value_info(const onnx::ValueInfoProto& v) {
    ValueInfo r;
    r.name = v.name();
    r.doc = v.doc_string();
    if (v.has_type()) r.type = type_from_proto(v.type());
    return r;
  }

  std::shared_ptr<Graph> graph(const onnx::GraphProto& g, int depth) {
    if (depth > 64) throw_error<InvalidModel>("subgraphs are nested more than 64 levels deep");
    auto out = std::make_shared<Graph>();
    out->name = g.name();
    out->doc = g.doc_string();
    for (const auto& v : g.input()) out->inputs.push_back(value_info(v));
    for (const auto& v : g.output()) out->outputs.push_back(value_info(v));
    for (const auto& v : g.value_info()) out->value_info.push_back(value_info(v));
    out->initializers.reserve(size_t(g.initializer_size() + g.sparse_initializer_size()));
    for (const auto& t : g.initializer()) {
      if (t.name().empty()) throw_error<InvalidGraph>("graph '", g.name(), "' has an initializer without a name");
      out->initializers.emplace_back(t.name(), initializer(t, depth));
    }
    // Sparse initializers load as the dense tensors they stand for (onnxruntime does the same).
    for (const auto& t : g.sparse_initializer()) {
      const std::string& name = t.values().name();
      if (name.empty()) throw_error<InvalidGraph>("graph '", g.name(), "' has a sparse initializer without a name");
      if (out->initializer(name))
        throw_error<InvalidGraph>("graph '", g.name(), "': initializer '", name, "' is given twice (dense and sparse)");
      out->initializers.emplace_back(name, sparse_tensor_to_dense(t, name, base_dir, in_memory()));
    }
    out->nodes.reserve(size_t(g.node_size()));
    for (const auto& n : g.node()) out->nodes.push_back(node(n, depth));
    return out;
  }

  Node node(const onnx::NodeProto& n, int depth) {
    Node r;
    r.name = n.name();
    r.op_type = n.op_type();
    r.domain = normalize_domain(n.domain());
    if (has_unknown_field(n.unknown_fields(), 8))  // NodeProto.overload (IR 10)
      throw_error<NotImplemented>(r.describe(), " calls a function overload (IR 10), which onnxtrain does not support");
    r.doc = n.doc_string();
    r.inputs.assign(n.input().begin(), n.input().end());
    r.outputs.assign(n.output().begin(), n.output().end());
    for (const auto& a : n.attribute()) {
      for (const auto& existing : r.attrs)
        if (existing.name == a.name())
          throw_error<InvalidGraph>(r.describe(), " has attribute '", a.name(), "' twice");
      r.attrs.push_back(attribute(a, r, depth));
    }
    return r;
  }

  Attribute attribute(const onnx::AttributeProto& a, const Node& owner, int depth) {
    Attribute r;
    r.name = a.name();
    r.doc = a.doc_string();
    r.ref_attr_name = a.ref_attr_name();
    AttrType t = static_cast<AttrType>(a.type());
    if (t == AttrType::kUndefined) {  // IR < 3 style: infer from the populated field
      if (a.has_f()) t = AttrType::kFloat;
      else if (a.has_i()) t = AttrType::kInt;
      else if (a.has_s()) t = AttrType::kString;
      else if (a.has_t()) t = AttrType::kTensor;
      else if (a.has_g()) t = AttrType::kGraph;
      else if (a.floats_size()) t = AttrType::kFloats;
      else if (a.ints_size()) t = AttrType::kInts;
      else if (a.strings_size()) t = AttrType::kStrings;
      else if (a.tensors_size()) t = AttrType::kTensors;
      else if (a.graphs_size()) t = AttrType::kGraphs;
    }
    r.type = t;
    const std::string what = owner.describe() + " attribute '" + a.name() + "'";
    switch (t) {
      case AttrType::kFloat: r.f = a.f(); break;
      case AttrType::kInt: r.i = a.i(); break;
      case AttrType::kString: r.s = a.s(); break;
      case AttrType::kTensor: r.t = tensor_from_proto(a.t(), what, base_dir, in_memory()); break;
      case AttrType::kGraph: r.g = graph(a.g(), depth + 1); break;
      case AttrType::kFloats: r.floats.assign(a.floats().begin(), a.floats().end()); break;
      case AttrType::kInts: r.ints.assign(a.ints().begin(), a.ints().end()); break;
      case AttrType::kStrings: r.strings.assign(a.strings().begin(), a.strings().end()); break;
      case AttrType::kTensors:
        for (const auto& x : a.tensors()) r.tensors.push_back(tensor_from_proto(x, what, base_dir, in_memory()));
        break;
      case AttrType::kGraphs:
        for (const auto& x : a.graphs()) r.graphs.push_back(graph(x, depth + 1));
        break;
      case AttrType::kSparseTensor:
        // Constant's sparse_value is the dense tensor it stands for: a Constant 'value'.
        if (owner.op_type == "Constant" && owner.domain.empty() && a.name() == "sparse_value") {
          r.name = "value";
          r.type = AttrType::kTensor;
          r.t = sparse_tensor_to_dense(a.sparse_tensor(), what, base_dir, in_memory());
          break;
        }
        [[fallthrough]];
      case AttrType::kSparseTensors:
        throw_error<NotImplemented>(what, ": sparse tensor attributes are not supported");
      case AttrType::kTypeProto: r.tp = type_from_proto(a.tp()); break;
      case AttrType::kTypeProtos:
        for (const auto& x : a.type_protos()) r.tps.push_back(type_from_proto(x));
        break;
      default:
        if (r.ref_attr_name.empty())
          throw_error<InvalidModel>(what, " has unknown attribute type ", int(a.type()));
    }
    return r;
  }
};

// Expands calls to model-local functions in place (recursively, depth-limited).
void inline_functions(Model& m, Graph& g, int depth, int& counter) {
  if (m.functions.empty()) return;
  if (depth > 32) throw_error<InvalidGraph>("model-local functions nest more than 32 levels deep");
  std::vector<Node> out;
  for (auto& n : g.nodes) {
    for (auto& a : n.attrs) {
      if (a.g) inline_functions(m, *a.g, depth, counter);
      for (auto& sg : a.graphs) inline_functions(m, *sg, depth, counter);
    }
    const Function* fn = nullptr;
    for (const auto& f : m.functions)
      if (f.name == n.op_type && normalize_domain(f.domain) == n.domain) fn = &f;
    if (!fn) {
      out.push_back(std::move(n));
      continue;
    }
    const std::string prefix = "__fn" + std::to_string(counter++) + "_" + fn->name + "_";
    std::unordered_map<std::string, std::string> rename;
    for (size_t i = 0; i < fn->inputs.size(); ++i) rename[fn->inputs[i]] = i < n.inputs.size() ? n.inputs[i] : "";
    for (size_t i = 0; i < fn->outputs.size(); ++i)
      rename[fn->outputs[i]] = i < n.outputs.size() ? n.outputs[i] : prefix + fn->outputs[i];
    Graph body;
    for (const auto& fnode : fn->nodes) {
      Node c = fnode;
      auto map_name = [&](std::string& s) {
        if (s.empty()) return;
        auto it = rename.find(s);
        if (it != rename.end()) s = it->second;
        else s = prefix + s;
      };
      for (auto& i : c.inputs) map_name(i);
      for (auto& o : c.outputs) map_name(o);
      if (!c.name.empty()) c.name = prefix + c.name;
      std::vector<Attribute> attrs;
      for (auto& a : c.attrs) {
        if (!a.ref_attr_name.empty()) {
          const Attribute* src = n.attr(a.ref_attr_name);
          if (!src) continue;  // caller omitted it: the operator's default applies
          Attribute copy = *src;
          copy.name = a.name;
          attrs.push_back(copy);
        } else {
          attrs.push_back(a);
        }
      }
      c.attrs = std::move(attrs);
      body.nodes.push_back(std::move(c));
    }
    inline_functions(m, body, depth + 1, counter);
    for (auto& bn : body.nodes) out.push_back(std::move(bn));
  }
  g.nodes = std::move(out);
}

void check_domains(const Model& m, const Graph& g) {
  for (const auto& n : g.nodes) {
    bool is_function = false;
    for (const auto& f : m.functions)
      if (f.name == n.op_type && normalize_domain(f.domain) == n.domain) is_function = true;
    if (!is_function && !m.opsets.count(n.domain))
      throw_error<InvalidGraph>(n.describe(), " uses domain '", n.domain.empty() ? "ai.onnx" : n.domain,
                                "', which the model does not import");
    for (const Graph* sg : n.subgraphs()) check_domains(m, *sg);
  }
}

// Operators only a session places in a graph it builds itself (session_internal in the operator
// table: the data-parallel collectives, whose kernels exchange buffers with the other ranks' plans
// through the session's communicator). A model read from a file or from bytes never holds them:
// refused here, naming the node, before any kernel sees it.
void refuse_session_internal_ops(const Graph& g) {
  for (const auto& n : g.nodes) {
    if (n.domain == ops::kDomain)
      if (const ops::OpDef* d = ops::find_op(n.op_type); d && d->session_internal)
        throw_error<InvalidGraph>(n.describe(), ": ", ops::kDomain, ".", n.op_type,
                                  " is internal to data-parallel training: only a TrainingSession places it in "
                                  "the graph it builds, a model may not contain it");
    for (const Graph* sg : n.subgraphs()) refuse_session_internal_ops(*sg);
  }
}

}  // namespace

Model model_from_proto(const onnx::ModelProto& p, const std::string& base_dir, const LoadOptions* options) {
  Model m;
  if (!p.has_ir_version() || p.ir_version() <= 0)
    throw_error<InvalidModel>("not an ONNX model: the IR version is missing");
  m.ir_version = p.ir_version();
  if (m.ir_version < kMinIrVersion || m.ir_version > kMaxIrVersion)
    throw_error<NotImplemented>("model IR version ", m.ir_version, " is ",
                                m.ir_version > kMaxIrVersion ? "newer than supported" : "older than supported",
                                " (onnxtrain reads IR versions ", kMinIrVersion, " to ", kMaxIrVersion, ")");
  if (!p.has_graph()) throw_error<InvalidModel>("not an ONNX model: it has no graph");
  for (const auto& o : p.opset_import()) {
    std::string d = normalize_domain(o.domain());
    if (o.version() <= 0)
      throw_error<InvalidModel>("opset import of domain '", o.domain(), "' has invalid version ", o.version());
    if (d.empty() && o.version() > kMaxImportedOpset)
      throw_error<NotImplemented>("model imports ai.onnx opset ", o.version(), ", newer than supported (max ",
                                  kMaxImportedOpset, ")");
    m.opsets[d] = o.version();
  }
  m.producer_name = p.producer_name();
  m.producer_version = p.producer_version();
  m.domain = p.domain();
  m.model_version = p.model_version();
  m.doc = p.doc_string();
  for (const auto& kv : p.metadata_props()) m.metadata.emplace_back(kv.key(), kv.value());
  Reader r{base_dir, options};
  for (const auto& f : p.functions()) {
    Function fn;
    fn.name = f.name();
    if (has_unknown_field(f.unknown_fields(), 13))  // FunctionProto.overload (IR 10)
      throw_error<NotImplemented>("function '", f.name(), "' has an overload name (IR 10), which onnxtrain does not support");
    if (has_unknown_field(f.unknown_fields(), 11))  // FunctionProto.attribute_proto (IR 9)
      throw_error<NotImplemented>("function '", f.name(),
                                  "' gives default attribute values (attribute_proto, IR 9), which onnxtrain does not support");
    fn.domain = f.domain();
    fn.doc = f.doc_string();
    fn.inputs.assign(f.input().begin(), f.input().end());
    fn.outputs.assign(f.output().begin(), f.output().end());
    fn.attributes.assign(f.attribute().begin(), f.attribute().end());
    for (const auto& o : f.opset_import()) fn.opsets[normalize_domain(o.domain())] = o.version();
    for (const auto& n : f.node()) fn.nodes.push_back(r.node(n, 0));
    for (const auto& [d, v] : fn.opsets)
      if (!m.opsets.count(d)) m.opsets[d] = v;
    m.functions.push_back(std::move(fn));
  }
  m.graph = r.graph(p.graph(), 0);
  // Imports of opsets 18-21: nodes rewritten into their opset-17 form, the opset the model then
  // runs at (ir/opset_lower.h).
  lower_new_opsets(m);
  check_domains(m, *m.graph);
  int counter = 0;
  inline_functions(m, *m.graph, 0, counter);
  refuse_session_internal_ops(*m.graph);
  validate_graph(*m.graph);
  return m;
}

namespace {

void graph_to_proto(const Graph& g, onnx::GraphProto* p, ExternalPlan* ext);

void attribute_to_proto(const Attribute& a, onnx::AttributeProto* p, ExternalPlan* ext) {
  p->set_name(a.name);
  if (!a.doc.empty()) p->set_doc_string(a.doc);
  if (!a.ref_attr_name.empty()) p->set_ref_attr_name(a.ref_attr_name);
  p->set_type(static_cast<onnx::AttributeProto::AttributeType>(a.type));
  switch (a.type) {
    case AttrType::kFloat: p->set_f(a.f); break;
    case AttrType::kInt: p->set_i(a.i); break;
    case AttrType::kString: p->set_s(a.s); break;
    case AttrType::kTensor: tensor_to_proto(a.t, "", p->mutable_t()); break;
    case AttrType::kGraph: graph_to_proto(*a.g, p->mutable_g(), ext); break;
    case AttrType::kFloats: for (float f : a.floats) p->add_floats(f); break;
    case AttrType::kInts: for (int64_t i : a.ints) p->add_ints(i); break;
    case AttrType::kStrings: for (const auto& s : a.strings) p->add_strings(s); break;
    case AttrType::kTensors: for (const auto& t : a.tensors) tensor_to_proto(t, "", p->add_tensors()); break;
    case AttrType::kGraphs: for (const auto& g : a.graphs) graph_to_proto(*g, p->add_graphs(), ext); break;
    case AttrType::kTypeProto: type_to_proto(a.tp, p->mutable_tp()); break;
    case AttrType::kTypeProtos: for (const auto& t : a.tps) type_to_proto(t, p->add_type_protos()); break;
    default: break;
  }
}

void value_info_to_proto(const ValueInfo& v, onnx::ValueInfoProto* p) {
  p->set_name(v.name);
  if (!v.doc.empty()) p->set_doc_string(v.doc);
  if (v.type.kind != TypeInfo::Kind::kUnknown) type_to_proto(v.type, p->mutable_type());
}

void node_to_proto(const Node& n, onnx::NodeProto* p, ExternalPlan* ext) {
  if (!n.name.empty()) p->set_name(n.name);
  p->set_op_type(n.op_type);
  if (!n.domain.empty()) p->set_domain(n.domain);
  if (!n.doc.empty()) p->set_doc_string(n.doc);
  for (const auto& i : n.inputs) p->add_input(i);
  for (const auto& o : n.outputs) p->add_output(o);
  for (const auto& a : n.attrs) attribute_to_proto(a, p->add_attribute(), ext);
}

// Initializers (of this graph and of subgraphs) that `ext` takes become references into its data
// file; attribute tensors stay inline, as onnx.save_model(save_as_external_data=True) leaves them.
void graph_to_proto(const Graph& g, onnx::GraphProto* p, ExternalPlan* ext) {
  p->set_name(g.name);
  if (!g.doc.empty()) p->set_doc_string(g.doc);
  for (const auto& n : g.nodes) node_to_proto(n, p->add_node(), ext);
  for (const auto& v : g.inputs) value_info_to_proto(v, p->add_input());
  for (const auto& v : g.outputs) value_info_to_proto(v, p->add_output());
  for (const auto& v : g.value_info) value_info_to_proto(v, p->add_value_info());
  for (const auto& [k, t] : g.initializers) {
    if (ext && ext->takes(t)) ext->add(t, k, p->add_initializer());
    else tensor_to_proto(t, k, p->add_initializer());
  }
}

// Every name of a serialized graph and of its subgraphs.
void proto_names(const onnx::GraphProto& g, std::unordered_set<std::string>& names) {
  for (const auto* list : {&g.input(), &g.output(), &g.value_info()})
    for (const auto& v : *list) names.insert(v.name());
  for (const auto& t : g.initializer()) names.insert(t.name());
  for (const auto& n : g.node()) {
    names.insert(n.name());
    names.insert(n.input().begin(), n.input().end());
    names.insert(n.output().begin(), n.output().end());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) proto_names(a.g(), names);
      for (const auto& sg : a.graphs()) proto_names(sg, names);
    }
  }
}

// A serialized graph lowered to opset 17 (and its subgraphs) in opset 18's form: the Reduce*
// nodes whose axes became input 1 at 18 take them from a Constant node placed before them. What
// else changed at 18 only added inputs, attributes, types or attribute values (ONNX's Changelog).
void raise_to_opset18(onnx::GraphProto* g, std::unordered_set<std::string>& names) {
  google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) raise_to_opset18(a.mutable_g(), names);
      for (auto& sg : *a.mutable_graphs()) raise_to_opset18(&sg, names);
    }
    auto& attrs = *n.mutable_attribute();
    auto axes =
        std::find_if(attrs.begin(), attrs.end(), [](const onnx::AttributeProto& a) { return a.name() == "axes"; });
    if ((n.domain().empty() || n.domain() == "ai.onnx") && axes_input_from_18(n.op_type()) && axes != attrs.end() &&
        n.input_size() == 1) {
      const std::string base = (n.output_size() ? n.output(0) : n.op_type()) + "/opset18_axes";
      std::string name = base;
      for (int k = 1; !names.insert(name).second; ++k) name = base + "_" + std::to_string(k);
      onnx::NodeProto* c = out.Add();
      c->set_op_type("Constant");
      c->set_name(name);
      c->add_output(name);
      onnx::AttributeProto* v = c->add_attribute();
      v->set_name("value");
      v->set_type(onnx::AttributeProto::TENSOR);
      tensor_to_proto(
          Tensor::from_vector<int64_t>({int64_t(axes->ints_size())}, {axes->ints().begin(), axes->ints().end()}), "",
          v->mutable_t());
      attrs.erase(axes);
      n.add_input(name);
    }
    *out.Add() = std::move(n);
  }
  g->mutable_node()->Swap(&out);
}

void model_to_proto(const Model& m, onnx::ModelProto* p, ExternalPlan* ext) {
  p->Clear();
  p->set_ir_version(m.ir_version);
  // A graph lowered to 17 that holds opset 18's forms (ir/opset_lower.h) is written at 18.
  const bool raise = m.graph && m.opset("") == kMaxOpset && required_opset(*m.graph) > kMaxOpset;
  for (const auto& [d, v] : m.opsets) {
    auto* o = p->add_opset_import();
    o->set_domain(d);
    o->set_version(d.empty() && raise ? required_opset(*m.graph) : v);
  }
  if (!m.producer_name.empty()) p->set_producer_name(m.producer_name);
  if (!m.producer_version.empty()) p->set_producer_version(m.producer_version);
  if (!m.domain.empty()) p->set_domain(m.domain);
  if (m.model_version) p->set_model_version(m.model_version);
  if (!m.doc.empty()) p->set_doc_string(m.doc);
  for (const auto& [k, v] : m.metadata) {
    auto* kv = p->add_metadata_props();
    kv->set_key(k);
    kv->set_value(v);
  }
  // Functions were inlined at load time, so none are written back.
  graph_to_proto(*m.graph, p->mutable_graph(), ext);
  if (raise) {
    std::unordered_set<std::string> names;
    proto_names(p->graph(), names);
    raise_to_opset18(p->mutable_graph(), names);
  }
}

}  // namespace

void model_to_proto(const Model& m, onnx::ModelProto* p) { model_to_proto(m, p, nullptr); }

void node_to_proto(const Node& n, onnx::NodeProto* p) { node_to_proto(n, p, nullptr); }

void write_message(core::AtomicFile& f, const google::protobuf::MessageLite& msg) {
  google::protobuf::io::FileOutputStream out(f.fd());
  if (!msg.SerializeToZeroCopyStream(&out) || !out.Flush())
    f.fail(out.GetErrno() ? std::strerror(out.GetErrno()) : "serialization failed");
}

std::string read_file(const std::string& path, const char* what, uint64_t max_bytes) {
  return core::read_regular_file(path, what, [&](uint64_t size) {
    if (size == 0) throw_error<InvalidModel>(what, " '", path, "' is empty (0 bytes)");
    if (size > max_bytes)
      throw_error<InvalidModel>(what, " '", path, "' is ", size, " bytes, over the limit of ", max_bytes,
                                " (protobuf messages must stay under 2 GiB; keep large weights in external data)");
  });
}

namespace {

Model parse_model(const void* data, size_t size, const std::string& base_dir, const std::string& origin,
                  const LoadOptions* options) {
  if (size == 0) throw_error<InvalidModel>(origin, " is empty (0 bytes)");
  if (size >= kProtobufLimit) throw_error<InvalidModel>(origin, " is over protobuf's 2 GiB limit");
  onnx::ModelProto p;
  if (!p.ParseFromArray(data, int(size)))
    throw_error<InvalidModel>(origin, " is not a valid ONNX ModelProto (protobuf parsing failed: truncated or "
                              "corrupt bytes)");
  // Bytes that happen to parse (protobuf skips unknown fields) but are no model: named here.
  if (!p.has_ir_version() || p.ir_version() <= 0)
    throw_error<InvalidModel>(origin, " is not an ONNX model: the IR version is missing");
  if (!p.has_graph()) throw_error<InvalidModel>(origin, " is not an ONNX model: it has no graph");
  return model_from_proto(p, base_dir, options);
}

}  // namespace

Model load_model_file(const std::string& path, const LoadOptions* options) {
  std::string bytes = read_file(path, "model file", kProtobufLimit - 1);
  return parse_model(bytes.data(), bytes.size(), core::dirname_of(path), "model file '" + path + "'", options);
}

Model load_model_bytes(const void* data, size_t size, const std::string& base_dir, const LoadOptions* options) {
  return parse_model(data, size, base_dir, "model bytes", options);
}

namespace {

// Size of `m` serialized with its tensors inline, without copying them: the proto with every
// initializer of 4 KiB or more as an external reference, plus what inlining them adds. A lower
// bound, short of the exact size by a few bytes per nested graph at most.
uint64_t inline_size_estimate(const Model& m) {
  ExternalPlan plan;
  plan.location = "estimate";
  plan.threshold = 4096;
  onnx::ModelProto p;
  model_to_proto(m, &p, &plan);
  return uint64_t(int64_t(p.ByteSizeLong()) + plan.inline_growth);
}

[[noreturn]] void throw_over_limit(uint64_t bytes) {
  throw_error<InvalidArgument>("model serializes to ", bytes, " bytes, over protobuf's 2 GiB limit: save it to a "
                               "file instead, where its weights go to external data beside it");
}

std::string basename_of(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

// The model's proto with every tensor inline; refused before anything is copied when it would
// pass protobuf's limit.
void inline_proto(const Model& m, onnx::ModelProto* p) {
  if (const uint64_t estimate = inline_size_estimate(m); estimate >= kProtobufLimit) throw_over_limit(estimate);
  model_to_proto(m, p);
  if (p->ByteSizeLong() >= kProtobufLimit) throw_over_limit(p->ByteSizeLong());
}

void write_proto_atomic(const std::string& path, const onnx::ModelProto& p) {
  core::AtomicFile f(path, "model file");
  write_message(f, p);
  f.commit();
}

}  // namespace

std::string serialize_model(const Model& m) {
  onnx::ModelProto p;
  inline_proto(m, &p);
  std::string out;
  if (!p.SerializeToString(&out)) throw_error<RuntimeError>("failed to serialize the model");
  return out;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  core::write_file_atomic(path, bytes.data(), bytes.size());
}

void save_model(const Model& m, const std::string& path, const ModelSaveOptions& options) {
  onnx::ModelProto p;
  if (options.external_data == ExternalData::kNever) {
    inline_proto(m, &p);
    return write_proto_atomic(path, p);
  }
  const std::string file = basename_of(path);
  if (file.empty() || file == "." || file == "..")
    throw_error<InvalidArgument>("save_model: '", path, "' does not name a file");
  const std::string location = options.location.empty() ? file + ".data" : options.location;
  if (location.find('/') != std::string::npos || location.find('\0') != std::string::npos || location == "." ||
      location == ".." || location == file)
    throw_error<InvalidArgument>("save_model: external data location '", location,
                                 "' must be a file name beside the model (no '/'), other than the model's own");
  ExternalPlan plan;
  plan.location = location;
  plan.threshold = std::max<uint64_t>(options.threshold, 1);
  model_to_proto(m, &p, &plan);
  const uint64_t skeleton = p.ByteSizeLong();
  // Auto: inline unless the inline model would come near the limit (the estimate is a lower
  // bound short by a few bytes per nested graph; the margin covers them).
  const uint64_t margin = uint64_t(1) << 20;
  if (plan.tensors.empty() ||
      (options.external_data == ExternalData::kAuto &&
       uint64_t(int64_t(skeleton) + plan.inline_growth) + margin < kProtobufLimit)) {
    inline_proto(m, &p);  // written straight to the file: one copy of the tensors, in the proto
    return write_proto_atomic(path, p);
  }
  if (skeleton >= kProtobufLimit)
    throw_error<InvalidArgument>("save_model: '", path, "' serializes to ", skeleton, " bytes even with its ",
                                 plan.tensors.size(), " initializers of ", plan.threshold,
                                 " bytes or more in external data, over protobuf's 2 GiB limit");
  write_with_external_data(p, plan, path, core::dirname_of(path) + "/" + location);
}

Tensor load_tensor_bytes(const void* data, size_t size, const std::string& what, const std::string& base_dir) {
  if (size >= kProtobufLimit) throw_error<InvalidModel>("tensor '", what, "' is over protobuf's 2 GiB limit");
  onnx::TensorProto p;
  if (!p.ParseFromArray(data, int(size)))
    throw_error<InvalidModel>("tensor '", what, "' is not a valid TensorProto");
  return tensor_from_proto(p, what, base_dir);
}

std::string serialize_tensor(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  tensor_to_proto(t, name, &p);
  return p.SerializeAsString();
}

bool onnx_schema_exists(const std::string& domain, const std::string& op, int64_t opset) {
  return onnx::OpSchemaRegistry::Schema(op, int(opset), domain) != nullptr;
}

}  // namespace onnxtrain::ir
