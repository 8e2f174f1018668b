// ONNX protobuf <-> IR. The only place that reads model bytes; every field is validated before
// it sizes an allocation.
#include "ir/onnx_io.h"

#include <fcntl.h>
#include <onnx/defs/schema.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/shape_inference/implementation.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>
#include <optional>

#include "core/atomic_file.h"
#include "ir/emitter.h"
#include "ir/proto.h"

namespace onnxtrain::ir {

namespace {

constexpr uint64_t kProtobufLimit = uint64_t(INT_MAX);  // protobuf refuses messages >= 2 GiB

std::string errno_text() { return std::strerror(errno); }

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(v, uint64_t(10), &v) || __builtin_add_overflow(v, uint64_t(c - '0'), &v))
      return false;
  }
  *out = v;
  return true;
}

std::vector<std::string> split_path(const std::string& p) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : p) {
    if (c == '/') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  return parts;
}

// An opened, validated byte range of an external data file.
struct ExternalFile {
  int fd = -1;
  uint64_t offset = 0, length = 0;
  std::string location;
  ExternalFile() = default;
  ExternalFile(const ExternalFile&) = delete;
  ExternalFile& operator=(const ExternalFile&) = delete;
  ExternalFile(ExternalFile&& o) noexcept
      : fd(o.fd), offset(o.offset), length(o.length), location(std::move(o.location)), opened(o.opened) {
    o.fd = -1;
  }
  ~ExternalFile() {
    if (fd >= 0) ::close(fd);
  }
  void read_into(void* dst, const std::string& what) {
    char* out = static_cast<char*>(dst);
    uint64_t done = 0;
    while (done < length) {
      ssize_t r = ::pread(fd, out + done, size_t(std::min<uint64_t>(length - done, 1u << 30)), off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw_error<InvalidModel>("tensor '", what, "': short read from external data '", location, "'");
      done += uint64_t(r);
    }
    // A file written while it is read can yield bytes of neither version (a truncate and rewrite
    // racing the read gave zeros): the same size and times before and after, or an error.
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != opened.st_size || st.st_mtim.tv_sec != opened.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != opened.st_mtim.tv_nsec || st.st_ctim.tv_sec != opened.st_ctim.tv_sec ||
        st.st_ctim.tv_nsec != opened.st_ctim.tv_nsec)
      throw_error<InvalidModel>("tensor '", what, "': external data '", location, "' changed while it was read");
  }
  struct stat opened {};  ///< fstat at open
};

// Opens the external data of `p` after checking that the location is relative, free of "..",
// free of symlinks, and that the range lies inside the file and holds exactly expected_bytes.
ExternalFile open_external(const onnx::TensorProto& p, const std::string& what, const std::string& base_dir,
                           uint64_t expected_bytes) {
  std::string location;
  uint64_t offset = 0, length = 0;
  bool has_length = false;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset") {
      if (!parse_u64(kv.value(), &offset))
        throw_error<InvalidModel>("tensor '", what, "': external data offset '", kv.value(),
                                  "' is not a non-negative integer");
    } else if (kv.key() == "length") {
      if (!parse_u64(kv.value(), &length))
        throw_error<InvalidModel>("tensor '", what, "': external data length '", kv.value(),
                                  "' is not a non-negative integer");
      has_length = true;
    }
  }
  if (location.empty()) throw_error<InvalidModel>("tensor '", what, "': external data has no location");
  if (base_dir.empty())
    throw_error<InvalidModel>("tensor '", what, "' uses external data ('", location,
                              "') but the model was loaded from bytes without a base directory");
  if (location[0] == '/')
    throw_error<InvalidModel>("tensor '", what, "': external data location '", location, "' is absolute");
  if (location.find('\0') != std::string::npos)
    throw_error<InvalidModel>("tensor '", what, "': external data location contains a NUL byte");
  auto parts = split_path(location);
  if (parts.empty()) throw_error<InvalidModel>("tensor '", what, "': external data location is empty");
  for (const auto& c : parts)
    if (c == "..")
      throw_error<InvalidModel>("tensor '", what, "': external data location '", location,
                                "' contains '..' (it must stay inside the model's folder)");
  std::string path = base_dir;
  for (size_t i = 0; i < parts.size(); ++i) {
    path += "/" + parts[i];
    struct stat st;
    if (lstat(path.c_str(), &st) != 0)
      throw_error<InvalidModel>("tensor '", what, "': external data file '", location, "' cannot be read: ",
                                errno_text());
    if (S_ISLNK(st.st_mode))
      throw_error<InvalidModel>("tensor '", what, "': external data location '", location,
                                "' goes through a symbolic link ('", parts[i], "')");
    if (i + 1 == parts.size() && !S_ISREG(st.st_mode))
      throw_error<InvalidModel>("tensor '", what, "': external data location '", location,
                                "' is not a regular file");
  }
  ExternalFile f;
  f.location = location;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (f.fd < 0)
    throw_error<InvalidModel>("tensor '", what, "': cannot open external data '", location, "': ", errno_text());
  struct stat st;
  if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw_error<InvalidModel>("tensor '", what, "': external data '", location, "' is not a regular file");
  f.opened = st;
  const uint64_t size = uint64_t(st.st_size);
  if (!has_length) {
    if (offset > size)
      throw_error<InvalidModel>("tensor '", what, "': external data offset ", offset, " is past the end of '",
                                location, "' (", size, " bytes)");
    length = size - offset;
  }
  if (length > size || offset > size - length)
    throw_error<InvalidModel>("tensor '", what, "': external data range offset ", offset, " length ", length,
                              " runs past the end of '", location, "' (", size, " bytes)");
  if (length != expected_bytes)
    throw_error<InvalidModel>("tensor '", what, "': external data length ", length, " does not match its ",
                              expected_bytes, " bytes (element count x element size)");
  f.offset = offset;
  f.length = length;
  return f;
}

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

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what_in, const std::string& base_dir) {
  const std::string what = what_in.empty() ? (p.name().empty() ? std::string("<unnamed>") : p.name()) : what_in;
  const int dt_raw = p.data_type();
  const DType dt = static_cast<DType>(dt_raw);
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
    // The file range is validated (and must hold exactly nbytes) before the tensor is allocated.
    ExternalFile f = open_external(p, what, base_dir, nbytes);
    Tensor t = Tensor::empty(dt, shape);
    f.read_into(t.raw_data(), what);
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
    case onnx::TypeProto::kMapType: t.kind = TypeInfo::Kind::kMap; break;
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
    default: break;
  }
}

namespace {

struct Reader {
  std::string base_dir;

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
    if (g.sparse_initializer_size() > 0)
      throw_error<NotImplemented>("graph '", g.name(), "': sparse initializer '",
                                  g.sparse_initializer(0).values().name(), "' is not supported");
    out->initializers.reserve(size_t(g.initializer_size()));
    for (const auto& t : g.initializer()) {
      if (t.name().empty()) throw_error<InvalidGraph>("graph '", g.name(), "' has an initializer without a name");
      out->initializers.emplace_back(t.name(), tensor_from_proto(t, t.name(), base_dir));
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
      case AttrType::kTensor: r.t = tensor_from_proto(a.t(), what, base_dir); break;
      case AttrType::kGraph: r.g = graph(a.g(), depth + 1); break;
      case AttrType::kFloats: r.floats.assign(a.floats().begin(), a.floats().end()); break;
      case AttrType::kInts: r.ints.assign(a.ints().begin(), a.ints().end()); break;
      case AttrType::kStrings: r.strings.assign(a.strings().begin(), a.strings().end()); break;
      case AttrType::kTensors:
        for (const auto& x : a.tensors()) r.tensors.push_back(tensor_from_proto(x, what, base_dir));
        break;
      case AttrType::kGraphs:
        for (const auto& x : a.graphs()) r.graphs.push_back(graph(x, depth + 1));
        break;
      case AttrType::kSparseTensor:
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

// Operators only a session places in a graph it builds itself: the data-parallel collectives
// (src/train/attach_optimizer.cpp), whose kernels exchange buffers with the other ranks' plans
// through the session's communicator. A model read from a file or from bytes never holds them:
// refused here, naming the node, before any kernel sees it.
void refuse_session_internal_ops(const Graph& g) {
  static const char* const kInternal[] = {"GradientReduceStart", "GradientReduceWait", "ZeroAllGather"};
  for (const auto& n : g.nodes) {
    if (n.domain == kOnnxtrainDomain)
      for (const char* op : kInternal)
        if (n.op_type == op)
          throw_error<InvalidGraph>(n.describe(), ": ", kOnnxtrainDomain, ".", op,
                                    " is internal to data-parallel training: only a TrainingSession places it in "
                                    "the graph it builds, a model may not contain it");
    for (const Graph* sg : n.subgraphs()) refuse_session_internal_ops(*sg);
  }
}

}  // namespace

Model model_from_proto(const onnx::ModelProto& p, const std::string& base_dir) {
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
    if (d.empty() && o.version() > kMaxOpset)
      throw_error<NotImplemented>("model imports ai.onnx opset ", o.version(), ", newer than supported (max ",
                                  kMaxOpset, ")");
    m.opsets[d] = o.version();
  }
  m.producer_name = p.producer_name();
  m.producer_version = p.producer_version();
  m.domain = p.domain();
  m.model_version = p.model_version();
  m.doc = p.doc_string();
  for (const auto& kv : p.metadata_props()) m.metadata.emplace_back(kv.key(), kv.value());
  Reader r{base_dir};
  for (const auto& f : p.functions()) {
    Function fn;
    fn.name = f.name();
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
  check_domains(m, *m.graph);
  int counter = 0;
  inline_functions(m, *m.graph, 0, counter);
  refuse_session_internal_ops(*m.graph);
  validate_graph(*m.graph);
  return m;
}

namespace {

// Tensors headed for the external data file while a model is converted to its proto: initializers
// of at least `threshold` bytes (strings and empty tensors stay inline), laid out in order.
struct ExternalPlan {
  std::string location;
  uint64_t threshold = 1;
  std::vector<std::pair<const Tensor*, uint64_t>> tensors;  // tensor, offset in the data file
  uint64_t end = 0;                                         // size of the data file
  int64_t inline_growth = 0;  // how much larger the proto is with these tensors inline (see add)

  bool takes(const Tensor& t) const {
    return t.dtype() != DType::kString && t.nbytes() > 0 && t.nbytes() >= threshold;
  }
  // Writes `t` as a reference into the data file.
  void add(const Tensor& t, const std::string& name, onnx::TensorProto* p);
};

size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void ExternalPlan::add(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  p->set_name(name);
  p->set_data_type(static_cast<int>(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  const uint64_t head = p->ByteSizeLong(), n = t.nbytes();
  // Page-aligned for tensors of a page or more (mappable), 64-byte aligned (SIMD) below.
  const uint64_t align = n >= 4096 ? 4096 : 64;
  const uint64_t offset = (end + align - 1) / align * align;
  p->set_data_location(onnx::TensorProto::EXTERNAL);
  auto entry = [&](const char* key, const std::string& value) {
    auto* e = p->add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  entry("location", location);
  entry("offset", std::to_string(offset));
  entry("length", std::to_string(n));
  tensors.emplace_back(&t, offset);
  end = offset + n;
  // The same tensor inline: its header plus a raw_data field, each length-prefixed in its parent
  // (the parents' own prefixes may grow a few bytes more: this is a lower bound).
  const uint64_t external = p->ByteSizeLong(), inlined = head + 1 + varint_size(n) + n;
  inline_growth += int64_t(inlined + varint_size(inlined)) - int64_t(external + varint_size(external));
}

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

void model_to_proto(const Model& m, onnx::ModelProto* p, ExternalPlan* ext) {
  p->Clear();
  p->set_ir_version(m.ir_version);
  for (const auto& [d, v] : m.opsets) {
    auto* o = p->add_opset_import();
    o->set_domain(d);
    o->set_version(v);
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
}

}  // namespace

void model_to_proto(const Model& m, onnx::ModelProto* p) { model_to_proto(m, p, nullptr); }

std::string read_file(const std::string& path, const char* what, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw_error<NoSuchFile>("cannot open ", what, " '", path, "': ", errno_text());
    throw_error<IOError>("cannot open ", what, " '", path, "': ", errno_text());
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    throw_error<IOError>("cannot stat ", what, " '", path, "': ", errno_text());
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error<IOError>(what, " '", path, "' is not a regular file");
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw_error<InvalidModel>(what, " '", path, "' is empty (0 bytes)");
  }
  if (size > max_bytes) {
    ::close(fd);
    throw_error<InvalidModel>(what, " '", path, "' is ", size, " bytes, over the limit of ", max_bytes,
                              " (protobuf messages must stay under 2 GiB; keep large weights in external data)");
  }
  std::string buf;
  buf.resize(size_t(size));
  uint64_t done = 0;
  while (done < size) {
    ssize_t r = ::read(fd, buf.data() + done, size_t(size - done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += uint64_t(r);
  }
  ::close(fd);
  if (done != size) throw_error<IOError>("short read from ", what, " '", path, "'");
  return buf;
}

namespace {
std::string dirname_of(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

Model parse_model(const void* data, size_t size, const std::string& base_dir, const std::string& origin) {
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
  return model_from_proto(p, base_dir);
}
}  // namespace

Model load_model_file(const std::string& path) {
  std::string bytes = read_file(path, "model file", kProtobufLimit - 1);
  return parse_model(bytes.data(), bytes.size(), dirname_of(path), "model file '" + path + "'");
}

Model load_model_bytes(const void* data, size_t size, const std::string& base_dir) {
  return parse_model(data, size, base_dir, "model bytes");
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

std::string temp_name(const std::string& path, const char* kind) {
  static std::atomic<uint64_t> seq{0};
  return path + "." + kind + "." + std::to_string(::getpid()) + "." + std::to_string(seq++);
}

// A file written by the one writer (core/atomic_file.h): a temporary file beside the target that
// commit() renames over it, or a device / FIFO written through. Until then (and when anything
// fails) the temporary file is removed, the target untouched.
class TempFile : public core::AtomicFile {
 public:
  TempFile(const std::string& target, const char* what) : AtomicFile(target, what) {}
  // Serializes `msg` straight into the file (no copy of it in memory).
  void write_message(const google::protobuf::MessageLite& msg) {
    google::protobuf::io::FileOutputStream out(fd());
    if (!msg.SerializeToZeroCopyStream(&out) || !out.Flush())
      fail(out.GetErrno() ? std::strerror(out.GetErrno()) : "serialization failed");
  }
};

// Keeps the file at `path` (if any) under a temporary hard link while a new one replaces it, so
// that a failure later in the same save can put the previous one back; forgotten on success.
class Keeper {
 public:
  explicit Keeper(const std::string& path) : path_(path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return;
    existed_ = true;
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) return;  // a folder: replacing it fails anyway
    kept_ = temp_name(path, "keep");
    if (::link(path.c_str(), kept_.c_str()) != 0 && ::rename(path.c_str(), kept_.c_str()) != 0) kept_.clear();
  }
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;
  ~Keeper() {
    if (!kept_.empty()) ::unlink(kept_.c_str());
  }
  // Puts the previous file back (or removes the new one where there was none).
  void restore() {
    if (!kept_.empty()) {
      if (::rename(kept_.c_str(), path_.c_str()) == 0) kept_.clear();
    } else if (!existed_) {
      ::unlink(path_.c_str());
    }
  }

 private:
  std::string path_, kept_;
  bool existed_ = false;
};

std::string basename_of(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

}  // namespace

namespace {

// The model's proto with every tensor inline; refused before anything is copied when it would
// pass protobuf's limit.
void inline_proto(const Model& m, onnx::ModelProto* p) {
  if (const uint64_t estimate = inline_size_estimate(m); estimate >= kProtobufLimit) throw_over_limit(estimate);
  model_to_proto(m, p);
  if (p->ByteSizeLong() >= kProtobufLimit) throw_over_limit(p->ByteSizeLong());
}

void write_proto_atomic(const std::string& path, const onnx::ModelProto& p) {
  TempFile f(path, "model file");
  f.write_message(p);
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
  const std::string dir = dirname_of(path);
  const std::string data_path = dir + "/" + location;
  // The loader refuses external data through a symbolic link (it must stay in the model's folder):
  // a link there is refused rather than followed to a model that would not load.
  if (struct stat st; ::lstat(data_path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    throw_error<IOError>("cannot write external data file '", data_path, "': it is a symbolic link, and external data "
                         "is read only from a file in the model's folder (remove the link or give another location)");
  TempFile data(data_path, "external data file");
  uint64_t pos = 0;
  for (const auto& [t, offset] : plan.tensors) {
    data.write_zeros(offset - pos);
    data.write(t->raw_data(), t->nbytes());
    pos = offset + t->nbytes();
  }
  data.finish();
  TempFile model(path, "model file");
  model.write_message(p);
  model.finish();
  // The data file goes in place first, the model (which points to it) last; a failure in between
  // puts the previous data file back (a data file written through to a device or FIFO is gone).
  std::optional<Keeper> previous;
  if (!data.streams()) previous.emplace(data.target());
  try {
    data.commit();
    model.commit();
  } catch (...) {
    if (previous) previous->restore();
    throw;
  }
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

namespace {

// ONNX 1.12 types the outputs of Slice and Reshape without a shape when the starts, ends or target
// shape are computed at run time (exported attention slices a fused projection at a computed
// offset, then reshapes to a Concat of Shape gathers), and with them everything downstream. Their
// ranks are known all the same: Slice keeps its data's rank, Reshape takes the length of its shape
// input. Records those ranks (dimensions unknown) so that a next round of inference carries on
// from there; returns whether it recorded any.
bool add_missing_ranks(onnx::ModelProto& p) {
  onnx::GraphProto& g = *p.mutable_graph();
  struct Known {
    int32_t elem = 0;
    int rank = -1;        // -1: no shape
    int64_t length = -1;  // rank 1: the dimension when known
  };
  std::unordered_map<std::string, Known> known;
  auto note = [&](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type()) return;
    const auto& t = v.type().tensor_type();
    Known k{t.elem_type(), t.has_shape() ? t.shape().dim_size() : -1, -1};
    if (k.rank == 1 && t.shape().dim(0).has_dim_value()) k.length = t.shape().dim(0).dim_value();
    known[v.name()] = k;
  };
  for (const auto& v : g.input()) note(v);
  for (const auto& v : g.value_info()) note(v);
  for (const auto& t : g.initializer())
    known[t.name()] = Known{t.data_type(), t.dims_size(), t.dims_size() == 1 ? t.dims(0) : -1};
  std::unordered_map<std::string, int> slot;  // value_info index by name
  for (int i = 0; i < g.value_info_size(); ++i) slot[g.value_info(i).name()] = i;
  for (const auto& v : g.output()) slot[v.name()] = -1;  // typed where declared: left alone
  bool added = false;
  for (const auto& n : g.node()) {
    if ((!n.domain().empty() && n.domain() != "ai.onnx") || n.output_size() < 1 || n.output(0).empty()) continue;
    const bool slice = n.op_type() == "Slice", reshape = n.op_type() == "Reshape";
    if (!(slice || (reshape && n.input_size() >= 2))) continue;
    auto in = known.find(n.input(0));
    if (in == known.end() || in->second.elem == 0) continue;
    if (auto out = known.find(n.output(0)); out != known.end() && out->second.rank >= 0) continue;
    int64_t rank = -1;
    if (slice) rank = in->second.rank;
    else if (auto s = known.find(n.input(1)); s != known.end()) rank = s->second.length;
    if (rank < 0) continue;
    onnx::ValueInfoProto* v;
    if (auto s = slot.find(n.output(0)); s != slot.end()) {
      if (s->second < 0) continue;
      v = g.mutable_value_info(s->second);
    } else {
      v = g.add_value_info();
      v->set_name(n.output(0));
      slot[n.output(0)] = g.value_info_size() - 1;
    }
    auto* t = v->mutable_type()->mutable_tensor_type();
    if (t->elem_type() == 0) t->set_elem_type(in->second.elem);
    auto* shape = t->mutable_shape();
    shape->clear_dim();
    for (int64_t d = 0; d < rank; ++d) shape->add_dim();
    known[n.output(0)] = Known{t->elem_type(), int(rank), -1};
    added = true;
  }
  return added;
}

// ONNX's inference does not know the com.onnxtrain operators. Those that keep their input's type and
// shape (the fused GELU and the elementwise gradient kernels: a training graph's forward can hold
// them, and a saved training graph their gradients) get their outputs typed here from that input,
// so that a next round carries on downstream; returns whether any was typed.
bool add_custom_types(onnx::ModelProto& p) {
  static const std::unordered_map<std::string, int> same_as = {
      {"Gelu", 0}, {"GeluGrad", 1}, {"ReluGrad", 0}, {"SoftmaxGrad", 0}, {"LogSoftmaxGrad", 0}};
  onnx::GraphProto& g = *p.mutable_graph();
  std::unordered_map<std::string, onnx::TypeProto> types;
  std::unordered_set<std::string> typed;
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()})
    for (const auto& v : *list)
      if (v.has_type() && v.type().has_tensor_type() && v.type().tensor_type().elem_type() != 0) {
        types[v.name()] = v.type();
        typed.insert(v.name());
      }
  for (const auto& t : g.initializer()) {
    onnx::TypeProto tp;
    tp.mutable_tensor_type()->set_elem_type(t.data_type());
    for (int64_t d : t.dims()) tp.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    types[t.name()] = tp;
  }
  bool added = false;
  for (const auto& n : g.node()) {
    if (n.domain() != "com.onnxtrain") continue;
    auto rule = same_as.find(n.op_type());
    if (rule == same_as.end() || n.input_size() <= rule->second) continue;
    auto src = types.find(n.input(rule->second));
    if (src == types.end()) continue;
    for (const auto& o : n.output()) {
      if (o.empty() || typed.count(o)) continue;
      auto* v = g.add_value_info();
      v->set_name(o);
      *v->mutable_type() = src->second;
      types[o] = src->second;
      typed.insert(o);
      added = true;
    }
  }
  return added;
}

// ONNX 1.12's LayerNormalization inference, when the node asks for Mean and InvStdDev, copies the
// dimensions before a negative axis without checking the axis against the rank: axis < -rank reads
// out of bounds (SEGV inside libonnx, found by the gradient fuzz target; no other operator of
// opsets <= 17 does so with out-of-range axis, axes, perm or split attributes). Such nodes go to
// ONNX with their first output only; add_layernorm_stats types the statistics of the main graph's
// ones afterwards when X's rank is known and the axis lies within it (a bad axis is the kernel's
// error to name).
struct HiddenStats {
  std::string x;
  int64_t axis = -1;
  int32_t stash = onnx::TensorProto::FLOAT;
  std::vector<std::string> outputs;  // Mean, InvStdDev
};

// ONNX 1.12's MaxUnpool inference dereferences the type of its indices input without checking it
// exists (SEGV inside libonnx when that input is untyped: gradient fuzz finding). MaxUnpool nodes go
// to ONNX under a domain it does not know (skipped); add_unpool_types gives the main graph's ones
// X's element type and rank afterwards (the kernel computes the dims).
struct HiddenUnpool {
  std::string x, y;
};

// Hides from ONNX's inference, in the graph and its subgraphs, what crashes it: LayerNormalization
// statistics with a negative axis and MaxUnpool nodes. The main graph's ones are recorded (hidden
// is null in subgraphs, left untyped) for add_layernorm_stats and add_unpool_types.
struct Hidden {
  std::vector<HiddenStats> stats;
  std::vector<HiddenUnpool> unpools;
};

void hide_from_onnx_inference(onnx::GraphProto& g, Hidden* hidden, int depth = 0) {
  if (depth > 64) return;
  for (auto& n : *g.mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) hide_from_onnx_inference(*a.mutable_g(), nullptr, depth + 1);
      for (auto& sg : *a.mutable_graphs()) hide_from_onnx_inference(sg, nullptr, depth + 1);
    }
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    if (n.op_type() == "MaxUnpool") {
      n.set_domain("onnxtrain.uninferred");
      if (hidden && n.input_size() >= 1 && n.output_size() >= 1) hidden->unpools.push_back({n.input(0), n.output(0)});
      continue;
    }
    if (n.op_type() != "LayerNormalization" || n.output_size() < 2 || n.input_size() < 1) continue;
    HiddenStats h;
    h.x = n.input(0);
    for (const auto& a : n.attribute()) {
      if (a.name() == "axis") h.axis = a.i();
      if (a.name() == "stash_type") h.stash = int32_t(a.i());
    }
    if (h.axis >= 0) continue;
    h.outputs.assign(n.output().begin() + 1, n.output().end());
    n.mutable_output()->DeleteSubrange(1, n.output_size() - 1);
    if (hidden) hidden->stats.push_back(std::move(h));
  }
}

bool add_unpool_types(onnx::ModelProto& p, const std::vector<HiddenUnpool>& hidden) {
  if (hidden.empty()) return false;
  onnx::GraphProto& g = *p.mutable_graph();
  std::unordered_map<std::string, const onnx::TypeProto*> types;
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()})
    for (const auto& v : *list)
      if (v.type().has_tensor_type() && v.type().tensor_type().elem_type() != 0) types[v.name()] = &v.type();
  std::vector<std::pair<std::string, onnx::TypeProto>> add;
  for (const auto& h : hidden) {
    if (types.count(h.y)) continue;
    onnx::TypeProto t;
    auto* tt = t.mutable_tensor_type();
    if (auto x = types.find(h.x); x != types.end()) {
      tt->set_elem_type(x->second->tensor_type().elem_type());
      if (x->second->tensor_type().has_shape())
        for (int i = 0; i < x->second->tensor_type().shape().dim_size(); ++i) tt->mutable_shape()->add_dim();
    } else {
      bool found = false;
      for (const auto& init : g.initializer())
        if (init.name() == h.x) {
          tt->set_elem_type(init.data_type());
          for (int i = 0; i < init.dims_size(); ++i) tt->mutable_shape()->add_dim();
          found = true;
          break;
        }
      if (!found) continue;
    }
    add.emplace_back(h.y, std::move(t));
  }
  for (auto& [name, t] : add) {
    auto* v = g.add_value_info();
    v->set_name(name);
    *v->mutable_type() = std::move(t);
  }
  return !add.empty();
}

bool add_layernorm_stats(onnx::ModelProto& p, const std::vector<HiddenStats>& hidden) {
  if (hidden.empty()) return false;
  onnx::GraphProto& g = *p.mutable_graph();
  std::unordered_map<std::string, std::vector<int64_t>> shapes;  // -1: unknown dimension
  std::unordered_set<std::string> typed;
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()})
    for (const auto& v : *list) {
      if (!v.type().has_tensor_type()) continue;
      if (v.type().tensor_type().elem_type() != 0) typed.insert(v.name());
      if (!v.type().tensor_type().has_shape()) continue;
      auto& dims = shapes[v.name()];
      for (const auto& d : v.type().tensor_type().shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
  for (const auto& t : g.initializer()) shapes[t.name()].assign(t.dims().begin(), t.dims().end());
  bool added = false;
  for (const auto& h : hidden) {
    auto x = shapes.find(h.x);
    if (x == shapes.end()) continue;
    const int64_t rank = int64_t(x->second.size());
    if (h.axis < -rank) continue;
    const int64_t axis = h.axis + rank;
    for (const auto& o : h.outputs) {
      if (o.empty() || typed.count(o)) continue;
      auto* v = g.add_value_info();
      v->set_name(o);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(h.stash);
      auto* shape = t->mutable_shape();
      for (int64_t d = 0; d < rank; ++d) {
        auto* dim = shape->add_dim();
        if (d >= axis) dim->set_dim_value(1);
        else if (x->second[size_t(d)] >= 0) dim->set_dim_value(x->second[size_t(d)]);
      }
      typed.insert(o);
      added = true;
    }
  }
  return added;
}

// Whether every node of `g` (subgraphs included) that has an ONNX schema satisfies it (required
// attributes present and typed, input and output counts) and has positive strides: ONNX's
// inference functions assume it and some dereference a missing required attribute (Scan-8
// without num_scan_inputs crashed inside libonnx, found by the gradient fuzz target).
bool nodes_match_schemas(const onnx::GraphProto& g, const std::unordered_map<std::string, int>& opsets, int depth = 0) {
  if (depth > 64) return false;
  for (const auto& n : g.node()) {
    const std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
    auto it = opsets.find(domain);
    if (it != opsets.end())
      if (const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), it->second, domain)) {
        try {
          schema->Verify(n);
        } catch (const std::exception&) {
          return false;
        }
      }
    // ONNX 1.12's convPoolShapeInference divides by every stride: a zero one is a SIGFPE inside
    // libonnx (gradient fuzz finding; probed: Conv, ConvInteger, QLinearConv, AveragePool,
    // MaxPool, LpPool). Such a node breaks its operator's contract as surely as a schema violation.
    if (domain.empty())
      for (const auto& a : n.attribute())
        if (a.name() == "strides")
          for (int64_t v : a.ints())
            if (v <= 0) return false;
    for (const auto& a : n.attribute()) {
      if (a.has_g() && !nodes_match_schemas(a.g(), opsets, depth + 1)) return false;
      for (const auto& sg : a.graphs())
        if (!nodes_match_schemas(sg, opsets, depth + 1)) return false;
    }
  }
  return true;
}

}  // namespace

void infer_types(Model& m) {
  // Large initializers only contribute their type and shape: pass them as typed graph inputs so
  // the proto copy stays small (small ones keep their values for ONNX's data propagation).
  Model lite = m;
  lite.graph = std::make_shared<Graph>(*m.graph);
  lite.graph->initializers.clear();
  for (const auto& [name, t] : m.graph->initializers) {
    if (t.nbytes() <= 4096) {
      lite.graph->initializers.emplace_back(name, t);
    } else if (!m.graph->is_input(name)) {
      lite.graph->inputs.push_back(ValueInfo{name, TypeInfo::tensor(t.dtype(), t.shape()), ""});
    }
  }
  onnx::ModelProto p;
  model_to_proto(lite, &p);
  std::unordered_map<std::string, int> opsets;
  for (const auto& o : p.opset_import()) opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = int(o.version());
  // A node that breaks its schema: no inference (best effort); the kernel or rule names the problem.
  if (!nodes_match_schemas(p.graph(), opsets)) return;
  Hidden hidden;
  hide_from_onnx_inference(*p.mutable_graph(), &hidden);
  auto* hidden_domain = p.add_opset_import();  // declared, so that ONNX skips its nodes rather than failing
  hidden_domain->set_domain("onnxtrain.uninferred");
  hidden_domain->set_version(1);
  try {
    // Data propagation follows Shape -> Gather -> Concat -> Reshape chains (exported attention).
    onnx::ShapeInferenceOptions options(/*check_type=*/false, /*error_mode=*/0, /*data_prop=*/true);
    onnx::shape_inference::InferShapes(p, onnx::OpSchemaRegistry::Instance(), options);
    for (int round = 0; round < 8; ++round) {
      const bool ranks = add_missing_ranks(p), custom = add_custom_types(p), stats = add_layernorm_stats(p, hidden.stats),
                 unpool = add_unpool_types(p, hidden.unpools);
      if (!ranks && !custom && !stats && !unpool) break;
      onnx::shape_inference::InferShapes(p, onnx::OpSchemaRegistry::Instance(), options);
    }
  } catch (const std::exception&) {
    return;
  }
  std::unordered_set<std::string> known;
  for (const auto& v : m.graph->value_info) known.insert(v.name);
  // Graph outputs declared without a type take the inferred one.
  for (auto& o : m.graph->outputs)
    if (o.type.kind == TypeInfo::Kind::kUnknown)
      for (const auto& v : p.graph().output())
        if (v.name() == o.name && v.has_type()) o.type = type_from_proto(v.type());
  for (const auto& v : p.graph().value_info()) {
    if (known.count(v.name())) continue;
    ValueInfo vi;
    vi.name = v.name();
    vi.type = type_from_proto(v.type());
    m.graph->value_info.push_back(std::move(vi));
  }
}

bool onnx_schema_exists(const std::string& domain, const std::string& op, int64_t opset) {
  return onnx::OpSchemaRegistry::Schema(op, int(opset), domain) != nullptr;
}

}  // namespace onnxtrain::ir
