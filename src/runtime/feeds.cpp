#include "runtime/feeds.h"

namespace onnxtrain::runtime {

namespace {

// What a fed value is, for errors.
std::string describe_kind(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kSequence: return "a sequence of tensors (a list or tuple)";
    case Value::Kind::kMap: return "a map (a dict)";
    case Value::Kind::kMapSequence: return "a sequence of maps (a list or tuple of dicts)";
    case Value::Kind::kTensor: return "a tensor";
    default: return "nothing (None)";
  }
}

// A map or sequence-of-maps input: the kind, the key type and the value type must be the declared
// ones (onnxruntime refuses any other map type at Run).
void check_map_feed(const ir::ValueInfo& decl, const Value& v) {
  const auto& t = decl.type;
  const bool seq = t.kind == ir::TypeInfo::Kind::kSequence;
  const ir::TypeInfo& m = seq ? *t.inner : t;
  const DType want_value = m.inner && m.inner->kind == ir::TypeInfo::Kind::kTensor ? m.inner->elem : DType::kUndefined;
  const std::string want = map_type_string(m.elem, want_value);
  const std::string want_full = seq ? "seq(" + want + ")" : want;
  if (v.kind != (seq ? Value::Kind::kMapSequence : Value::Kind::kMap))
    throw_error<InvalidArgument>("input '", decl.name, "' must be ", seq ? "a sequence of maps " : "a map ", want_full,
                                 ", got ", describe_kind(v));
  if (v.key != m.elem || (want_value != DType::kUndefined && v.elem != want_value)) {
    const std::string got = map_type_string(v.key, v.elem);
    throw_error<InvalidArgument>("input '", decl.name, "' has type ", seq ? "seq(" + got + ")" : got,
                                 ", the model expects ", want_full,
                                 " (a Python dict becomes map(int64 or string, float), as in onnxruntime)");
  }
}

}  // namespace

void check_feed(const ir::ValueInfo& decl, const Value& v, bool check_shape) {
  const auto& t = decl.type;
  if (t.kind == ir::TypeInfo::Kind::kTensor) {
    if (v.kind != Value::Kind::kTensor)
      throw_error<InvalidArgument>("input '", decl.name, "' must be a tensor, got ", describe_kind(v));
    const Tensor& x = v.tensor;
    if (t.elem != DType::kUndefined && x.dtype() != t.elem)
      throw_error<InvalidArgument>("input '", decl.name, "' has element type ", dtype_name(x.dtype()),
                                   ", the model expects ", dtype_name(t.elem));
    if (x.dtype() == DType::kBool && x.device().host_accessible()) {
      // Kernels read bools as C++ bool: a byte other than 0 or 1 (a uint8 buffer viewed as bool)
      // would be undefined behaviour, so it is refused here.
      const auto* b = static_cast<const uint8_t*>(x.raw_data());
      for (int64_t i = 0; i < x.numel(); ++i)
        if (b[i] > 1)
          throw_error<InvalidArgument>("input '", decl.name, "' is a bool tensor holding the byte ", int(b[i]),
                                       " at flat position ", i, "; bools must be 0 or 1");
    }
    if (check_shape && t.has_shape) {
      if (x.rank() != t.dims.size())
        throw_error<InvalidArgument>("input '", decl.name, "' has rank ", x.rank(), " (shape ",
                                     shape_to_string(x.shape()), "), the model expects rank ", t.dims.size(), " (",
                                     t.to_string(), ")");
      for (size_t i = 0; i < t.dims.size(); ++i)
        if (t.dims[i].fixed() && t.dims[i].value != x.dim(i))
          throw_error<InvalidArgument>("input '", decl.name, "' has dimension ", x.dim(i), " at axis ", i,
                                       ", the model expects ", t.dims[i].value, " (", t.to_string(), ")");
    }
  } else if (t.kind == ir::TypeInfo::Kind::kMap ||
             (t.kind == ir::TypeInfo::Kind::kSequence && t.inner && t.inner->kind == ir::TypeInfo::Kind::kMap)) {
    check_map_feed(decl, v);
  } else if (t.kind == ir::TypeInfo::Kind::kSequence) {
    if (v.kind != Value::Kind::kSequence)
      throw_error<InvalidArgument>("input '", decl.name, "' must be a sequence of tensors (", t.to_string(), "), got ",
                                   v.kind == Value::Kind::kTensor ? "a tensor" : "nothing (None)");
    // One element type, the declared one: the sequence kernels read it from the first tensor.
    const DType want = t.inner && t.inner->kind == ir::TypeInfo::Kind::kTensor ? t.inner->elem : DType::kUndefined;
    for (size_t i = 0; i < v.sequence.size(); ++i) {
      const DType dt = v.sequence[i].dtype(), first = v.sequence[0].dtype();
      if (want != DType::kUndefined && dt != want)
        throw_error<InvalidArgument>("input '", decl.name, "' holds a tensor of element type ", dtype_name(dt),
                                     " at position ", i, ", the model expects ", t.to_string());
      if (dt != first)
        throw_error<InvalidArgument>("input '", decl.name, "' holds tensors of element types ", dtype_name(first),
                                     " (position 0) and ", dtype_name(dt), " (position ", i,
                                     "): a sequence's tensors share one element type");
    }
  }
}

bool off_host(const Value& v) {
  auto off = [](const Tensor& t) { return t.defined() && !t.device().is_host(); };
  if (v.kind == Value::Kind::kTensor) return off(v.tensor);
  for (const Tensor& t : v.sequence)
    if (off(t)) return true;
  return false;
}

Value on_host(const Value& v) {
  Value r = v;
  auto host = [](Tensor& t) {
    if (t.defined() && !t.device().is_host()) t = to_device(t, Device::cpu());
  };
  if (r.kind == Value::Kind::kTensor) host(r.tensor);
  for (Tensor& t : r.sequence) host(t);
  return r;
}

const Feeds& host_feeds(const Feeds& feeds, Feeds& copies) {
  bool any = false;
  for (const auto& f : feeds) any = any || off_host(f.second);
  if (!any) return feeds;
  for (const auto& [n, v] : feeds) copies.emplace_back(n, off_host(v) ? on_host(v) : v);
  return copies;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string r;
  for (const auto& n : names) r += (r.empty() ? "" : ", ") + n;
  return r;
}

}  // namespace onnxtrain::runtime
