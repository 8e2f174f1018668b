#include "ir/emitter.h"

#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/schema.h>

#include <algorithm>
#include <optional>
#include <set>

#include "ir/opset_lower.h"
#include "ir/proto.h"
#include "onnxtrain/error.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::ir {

namespace {

TypeInfo without_shape(const TypeInfo& t) {
  TypeInfo r = t;
  r.has_shape = false;
  r.dims.clear();
  if (t.inner) r.inner = std::make_shared<TypeInfo>(without_shape(*t.inner));
  return r;
}

bool known(const TypeInfo* t) {
  return t && t->kind != TypeInfo::Kind::kUnknown &&
         !(t->kind == TypeInfo::Kind::kTensor && t->elem == DType::kUndefined);
}

TypeInfo wrap(TypeInfo::Kind kind, const TypeInfo& inner) {
  TypeInfo r;
  r.kind = kind;
  r.inner = std::make_shared<TypeInfo>(inner);
  return r;
}

// Derives the output types of one node; throws NotImplemented / InvalidGraph naming it.
// `elementwise_shapes`: the table's elementwise operators give their outputs the source's shape.
class OutputTyper {
 public:
  OutputTyper(const Node& n, const std::map<std::string, int64_t>& opsets, const TypeLookup& type_of,
              bool elementwise_shapes = false)
      : n_(n), opsets_(opsets), type_of_(type_of), r_(n.outputs.size()), elementwise_shapes_(elementwise_shapes) {}

  std::vector<TypeInfo> run() {
    if (onnxtrain_rule()) return r_;
    const std::string domain = normalize_domain(n_.domain);
    auto it = opsets_.find(domain);
    if (it == opsets_.end()) fail("domain '", domain, "' is not imported");
    schema_ = onnx::OpSchemaRegistry::Schema(n_.op_type, int(it->second), domain);
    if (!schema_) fail("no ONNX schema for ", n_.op_type, " at opset ", it->second);
    check_arity();
    if (domain.empty() && explicit_default()) return r_;
    if (domain == kPreviewTrainingDomain && explicit_training()) return r_;
    for (size_t k = 0; k < r_.size(); ++k) r_[k] = from_schema(k);
    if (domain.empty()) add_trivial_shapes();
    return r_;
  }

  // Only onnxtrain's own rule: nullopt for an operator it does not cover.
  std::optional<std::vector<TypeInfo>> run_onnxtrain_rule() {
    if (!onnxtrain_rule()) return std::nullopt;
    return std::move(r_);
  }

 private:
  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw_error<NotImplemented>("cannot type the outputs of ", n_.describe(), ": ", std::forward<Args>(args)...);
  }

  const TypeInfo* in(size_t i) const {
    return i < n_.inputs.size() && !n_.inputs[i].empty() ? type_of_(n_.inputs[i]) : nullptr;
  }
  TypeInfo in_or_unknown(size_t i) const {
    const TypeInfo* t = in(i);
    return t ? without_shape(*t) : TypeInfo();
  }
  DType dtype_attr(const char* name, DType dflt) const {
    const Attribute* a = n_.attr(name);
    return a && a->type == AttrType::kInt ? DType(a->i) : dflt;
  }
  const Graph* graph_attr(const char* name) const {
    const Attribute* a = n_.attr(name);
    if (!a || a->type != AttrType::kGraph || !a->g) fail("missing graph attribute '", name, "'");
    return a->g.get();
  }
  void all_outputs(const TypeInfo& t) {
    for (auto& o : r_) o = t;
  }

  // Operators outside ONNX's registry that onnxtrain types (com.onnxtrain, the com.microsoft
  // operators of the second table, com.microsoft's YieldOp); false for the others.
  bool onnxtrain_rule() {
    const std::string domain = normalize_domain(n_.domain);
    if (domain == kOnnxtrainDomain) {
      const ops::OpDef* d = ops::find_op(n_.op_type);
      if (!d) fail(ops::kDomain, " has no operator ", n_.op_type, " (src/ops/onnxtrain_ops.cpp)");
      custom(d);
      return true;
    }
    if (domain == kMicrosoftDomain && n_.op_type == "YieldOp") {  // output k: the gradient of input k
      for (size_t k = 0; k < r_.size(); ++k) r_[k] = k < n_.inputs.size() ? in_or_unknown(k) : TypeInfo();
      return true;
    }
    if (const ops::OpDef* d = domain == kMicrosoftDomain ? ops::find_op(domain, n_.op_type) : nullptr) {
      custom(d);
      return true;
    }
    if (domain.empty() && !opset18_form(n_).empty()) {  // ai.onnx 18's operators kept at 17 (ONNX 1.12 lacks them)
      if (n_.inputs.empty() || n_.inputs[0].empty()) fail("input 0 is absent");
      // Same shape as input 0: BitwiseNot, the scatters; the others its element type only.
      const bool same = n_.op_type == "BitwiseNot" || n_.op_type.rfind("Scatter", 0) == 0;
      const TypeInfo* x = in(0);
      all_outputs(same && x && elementwise_shapes_ ? *x : in_or_unknown(0));
      return true;
    }
    return false;
  }

  // The operator table's rule (src/ops/onnxtrain_ops.h).
  void custom(const ops::OpDef* d) {
    const size_t I = n_.inputs.size(), O = r_.size();
    auto like = [&](size_t from) {
      if (from >= I || n_.inputs[from].empty()) fail("output typed like input ", from, ", which is absent");
      const TypeInfo* t = elementwise_shapes_ && d->same_shape ? in(from) : nullptr;
      return t ? *t : in_or_unknown(from);
    };
    switch (d->rule) {
      case ops::TypeRule::kLikeInputs:
        for (size_t k = 0; k < O; ++k) r_[k] = like(d->like[std::min(k, d->like.size() - 1)]);
        break;
      case ops::TypeRule::kFixed:
        for (size_t k = 0; k < O; ++k) {
          const ops::FixedType& f = d->fixed[std::min(k, d->fixed.size() - 1)];
          r_[k] = TypeInfo::tensor(f.dtype, f.shape);
        }
        break;
      case ops::TypeRule::kLikeTrailing:
        if (I < O) fail(I, " inputs and ", O, " outputs: the outputs update the last ", O, " inputs");
        for (size_t k = 0; k < O; ++k) r_[k] = in_or_unknown(I - O + k);
        break;
      case ops::TypeRule::kGroups: {
        size_t lead = d->lead;
        const Attribute* gated = n_.attr(ops::kOptimizerUpdateSignalAttr);
        if (d->optimizer && gated && gated->type == AttrType::kInt && gated->i == 1) ++lead;
        if (I < lead + O || O == 0 || I - lead - O == 0) fail(I, " inputs and ", O, " outputs do not form groups of tensors");
        const size_t n = I - lead - O;
        for (size_t k = 0; k < O; ++k) {
          const size_t q = k / n, i = k % n;
          const size_t from = lead + (q == 0 ? i : (q + 1) * n + i);
          r_[k] = from < I ? in_or_unknown(from) : TypeInfo();
        }
        break;
      }
      case ops::TypeRule::kFlagThenLike:
        for (size_t k = 0; k < O; ++k)
          r_[k] = k == 0 ? TypeInfo::tensor(DType::kBool, {1}) : like(d->like[std::min(k - 1, d->like.size() - 1)]);
        break;
    }
  }

  // Operators whose output types come from attributes, subgraphs or container types.
  bool explicit_default() {
    const std::string& op = n_.op_type;
    if (op == "Cast") {
      const Attribute* to = n_.attr("to");
      if (!to || to->type != AttrType::kInt) fail("Cast needs the 'to' attribute");
      TypeInfo t = TypeInfo::tensor(DType(to->i));
      if (const TypeInfo* x = in(0); x && x->has_shape) t.has_shape = true, t.dims = x->dims;
      all_outputs(t);
    } else if (op == "Constant") {
      constant();
    } else if (op == "ConstantOfShape") {
      const Attribute* v = n_.attr("value");
      all_outputs(TypeInfo::tensor(v && v->type == AttrType::kTensor ? v->t.dtype() : DType::kFloat32));
    } else if (op == "EyeLike" || op == "RandomNormalLike" || op == "RandomUniformLike" || op == "Bernoulli") {
      const TypeInfo x = in_or_unknown(0);
      all_outputs(n_.attr("dtype") ? TypeInfo::tensor(dtype_attr("dtype", DType::kUndefined)) : x);
    } else if (op == "RandomNormal" || op == "RandomUniform") {
      const Attribute* s = n_.attr("shape");
      const DType dt = dtype_attr("dtype", DType::kFloat32);
      all_outputs(s && s->type == AttrType::kInts ? TypeInfo::tensor(dt, s->ints) : TypeInfo::tensor(dt));
    } else if (op == "Multinomial") {
      all_outputs(TypeInfo::tensor(dtype_attr("dtype", DType::kInt32)));
    } else if (op == "QuantizeLinear") {
      all_outputs(in(2) ? in_or_unknown(2) : TypeInfo::tensor(DType::kUInt8));
    } else if (op == "LayerNormalization") {  // Mean, InvStdDev in the stash type
      for (size_t k = 0; k < r_.size(); ++k)
        r_[k] = k == 0 ? in_or_unknown(0) : TypeInfo::tensor(dtype_attr("stash_type", DType::kFloat32));
    } else if (op == "If") {
      const Graph *a = graph_attr("then_branch"), *b = graph_attr("else_branch");
      if (a->outputs.size() < r_.size()) fail("then_branch has ", a->outputs.size(), " outputs");
      for (size_t k = 0; k < r_.size(); ++k) {
        const TypeInfo& t = a->outputs[k].type;
        const bool same = k < b->outputs.size() && b->outputs[k].type.to_string() == t.to_string();
        r_[k] = same ? t : without_shape(t);
      }
    } else if (op == "Loop" || op == "Scan") {
      // Loop body: (iteration, cond, carried..) -> (cond, carried.., scan..); Scan body:
      // (state.., scan elements..) -> (state.., scan elements..). Scan outputs gain an axis.
      const Graph* body = graph_attr("body");
      const size_t skip = op == "Loop" ? 1 : 0;
      if (body->outputs.size() < skip + r_.size()) fail("the body has ", body->outputs.size(), " outputs");
      for (size_t k = 0; k < r_.size(); ++k) r_[k] = without_shape(body->outputs[skip + k].type);
    } else if (op == "SequenceEmpty") {
      all_outputs(wrap(TypeInfo::Kind::kSequence, TypeInfo::tensor(dtype_attr("dtype", DType::kFloat32))));
    } else if (op == "SequenceConstruct" || op == "SplitToSequence") {
      all_outputs(known(in(0)) ? wrap(TypeInfo::Kind::kSequence, in_or_unknown(0)) : TypeInfo());
    } else if (op == "SequenceAt" || op == "ConcatFromSequence" || op == "OptionalGetElement") {
      // The element type of the container (OptionalGetElement of a tensor: the tensor's type).
      const TypeInfo* s = in(0);
      const bool container = s && (s->kind == TypeInfo::Kind::kSequence || s->kind == TypeInfo::Kind::kOptional);
      if (container && s->inner)
        all_outputs(without_shape(*s->inner));
      else if (op == "OptionalGetElement")
        all_outputs(in_or_unknown(0));
    } else if (op == "Optional") {
      const Attribute* tp = n_.attr("type");
      if (tp && tp->type == AttrType::kTypeProto)
        all_outputs(wrap(TypeInfo::Kind::kOptional, tp->tp));
      else
        all_outputs(known(in(0)) ? wrap(TypeInfo::Kind::kOptional, in_or_unknown(0)) : TypeInfo());
    } else if (op == "SequenceMap") {
      const Graph* body = graph_attr("body");
      if (body->outputs.size() < r_.size()) fail("the body has ", body->outputs.size(), " outputs");
      for (size_t k = 0; k < r_.size(); ++k)
        r_[k] = wrap(TypeInfo::Kind::kSequence, without_shape(body->outputs[k].type));
    } else {
      return false;
    }
    return true;
  }

  void constant() {
    TypeInfo t;
    for (const auto& a : n_.attrs) {
      if (a.name == "value" && a.type == AttrType::kTensor)
        t = TypeInfo::tensor(a.t.dtype(), a.t.shape());
      else if (a.name == "value_float")
        t = TypeInfo::tensor(DType::kFloat32, Shape{});
      else if (a.name == "value_floats")
        t = TypeInfo::tensor(DType::kFloat32, {int64_t(a.floats.size())});
      else if (a.name == "value_int")
        t = TypeInfo::tensor(DType::kInt64, Shape{});
      else if (a.name == "value_ints")
        t = TypeInfo::tensor(DType::kInt64, {int64_t(a.ints.size())});
      else if (a.name == "value_string")
        t = TypeInfo::tensor(DType::kString, Shape{});
      else if (a.name == "value_strings")
        t = TypeInfo::tensor(DType::kString, {int64_t(a.strings.size())});
    }
    if (t.kind == TypeInfo::Kind::kUnknown) fail("Constant without a value attribute onnxtrain reads");
    all_outputs(t);
  }

  // ai.onnx.preview.training.
  bool explicit_training() {
    const std::string& op = n_.op_type;
    if (op == "Gradient") {  // output k: d y / d xs[k]
      const Attribute* xs = n_.attr("xs");
      if (!xs || xs->type != AttrType::kStrings || xs->strings.size() < r_.size()) fail("needs one 'xs' per output");
      for (size_t k = 0; k < r_.size(); ++k)
        if (const TypeInfo* t = type_of_(xs->strings[k])) r_[k] = without_shape(*t);
      return true;
    }
    if (op == "Adagrad" || op == "Momentum" || op == "Adam") {
      // Inputs R, T, then groups of n: X, G, state..; outputs: groups X_new, state_new.. (G skipped).
      const size_t groups_out = op == "Adam" ? 3 : 2;
      if (n_.inputs.size() < 2 || (n_.inputs.size() - 2) % (groups_out + 1) != 0) fail("unexpected number of inputs");
      const size_t n = (n_.inputs.size() - 2) / (groups_out + 1);
      if (r_.size() > groups_out * n) fail("more outputs than optimized tensors");
      for (size_t k = 0; k < r_.size(); ++k) {
        const size_t g = k / n, idx = k % n;
        r_[k] = in_or_unknown(2 + (g == 0 ? 0 : g + 1) * n + idx);
      }
      return true;
    }
    return false;
  }

  // Inputs and outputs the schema declares: no more than it allows, required inputs present.
  void check_arity() const {
    size_t nin = n_.inputs.size();
    while (nin > 0 && n_.inputs[nin - 1].empty()) --nin;
    if (nin > size_t(schema_->max_input()))
      fail("it has ", nin, " inputs, opset ", schema_->since_version(), " allows ", schema_->max_input());
    if (n_.outputs.size() > size_t(schema_->max_output()))
      fail("it has ", n_.outputs.size(), " outputs, opset ", schema_->since_version(), " allows ",
           schema_->max_output());
    const auto& ins = schema_->inputs();
    for (size_t j = 0; j < ins.size(); ++j)
      if (ins[j].GetOption() == onnx::OpSchema::Single && (j >= n_.inputs.size() || n_.inputs[j].empty()))
        fail("required input ", j, " ('", ins[j].GetName(), "') is missing");
  }

  static const onnx::OpSchema::FormalParameter* formal(const std::vector<onnx::OpSchema::FormalParameter>& ps,
                                                       size_t j) {
    if (j < ps.size()) return &ps[j];
    if (!ps.empty() && ps.back().GetOption() == onnx::OpSchema::Variadic) return &ps.back();
    return nullptr;
  }

  TypeInfo from_schema(size_t k) {
    const auto* out = formal(schema_->outputs(), k);
    if (!out) fail("output ", k, ": the schema declares ", schema_->outputs().size(), " outputs");
    const auto& allowed = out->GetTypes();
    if (allowed.size() == 1) return type_from_proto(onnx::Utils::DataTypeUtils::ToTypeProto(*allowed.begin()));
    // Bound to the inputs that use the same type parameter.
    const std::string& param = out->GetTypeStr();
    const TypeInfo* bound = nullptr;
    size_t bound_at = 0;
    bool any = false;
    for (size_t j = 0; j < n_.inputs.size(); ++j) {
      if (n_.inputs[j].empty()) continue;
      const auto* f = formal(schema_->inputs(), j);
      if (!f) fail("input ", j, ": the schema declares ", schema_->inputs().size(), " inputs");
      if (f->GetTypeStr() != param) continue;
      if (f->GetOption() == onnx::OpSchema::Variadic && !f->GetIsHomogeneous())
        fail("output ", k, " is bound to a heterogeneous variadic input");
      any = true;
      const TypeInfo* t = type_of_(n_.inputs[j]);
      if (!known(t)) continue;
      if (!bound) {
        bound = t, bound_at = j;
      } else if (without_shape(*bound).to_string() != without_shape(*t).to_string()) {
        throw_error<InvalidGraph>(n_.describe(), ": inputs ", bound_at, " ('", n_.inputs[bound_at], "', ",
                                  bound->to_string(), ") and ", j, " ('", n_.inputs[j], "', ", t->to_string(),
                                  ") bind type parameter ", param, " to different types");
      }
    }
    if (!any)
      fail("output ", k, " ('", out->GetName(), "'): type parameter ", param,
           " allows several types and no input present binds it");
    return bound ? without_shape(*bound) : TypeInfo();
  }

  // Shapes known without inference.
  void add_trivial_shapes() {
    const std::string& op = n_.op_type;
    const TypeInfo* x = in(0);
    if (op == "Size" && !r_.empty()) {
      r_[0] = TypeInfo::tensor(DType::kInt64, Shape{});
    } else if (op == "Shape" && !r_.empty() && x && x->has_shape) {
      const int64_t rank = int64_t(x->dims.size());
      auto clamp = [&](const char* name, int64_t dflt) {
        const Attribute* a = n_.attr(name);
        int64_t v = a && a->type == AttrType::kInt ? a->i : dflt;
        if (v < 0) v += rank;
        return std::clamp<int64_t>(v, 0, rank);
      };
      r_[0] = TypeInfo::tensor(DType::kInt64, {std::max<int64_t>(0, clamp("end", rank) - clamp("start", 0))});
    } else if (op == "Identity" && !r_.empty() && x) {
      r_[0] = *x;
    }
  }

  const Node& n_;
  const std::map<std::string, int64_t>& opsets_;
  const TypeLookup& type_of_;
  std::vector<TypeInfo> r_;
  const bool elementwise_shapes_;
  const onnx::OpSchema* schema_ = nullptr;
};

template <class T>
void fill(Tensor& t, double value) {
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(value);
}

}  // namespace

std::vector<TypeInfo> output_types(const Node& n, const std::map<std::string, int64_t>& opsets,
                                   const TypeLookup& type_of) {
  return OutputTyper(n, opsets, type_of).run();
}

std::vector<TypeInfo> custom_output_types(const Node& n, const TypeLookup& type_of) {
  static const std::map<std::string, int64_t> kNoOpsets;
  auto r = OutputTyper(n, kNoOpsets, type_of, /*elementwise_shapes=*/true).run_onnxtrain_rule();
  if (!r)
    throw_error<NotImplemented>("cannot type the outputs of ", n.describe(), ": onnxtrain has no rule for domain '",
                                n.domain, "'");
  return std::move(*r);
}

std::optional<Shape> static_shape(const TypeInfo* t) {
  if (!t || !t->has_shape) return std::nullopt;
  Shape s;
  for (const auto& d : t->dims) {
    if (!d.fixed()) return std::nullopt;
    s.push_back(d.value);
  }
  return s;
}

Tensor float_tensor(DType dt, double value, const Shape& shape) {
  if (!dtype_is_float(dt)) throw_error<NotImplemented>("a float constant of element type ", dtype_name(dt));
  Tensor t = Tensor::empty(dt, shape);
  switch (dt) {
    case DType::kFloat32:
      fill<float>(t, value);
      break;
    case DType::kFloat64:
      fill<double>(t, value);
      break;
    case DType::kFloat16: {
      float16* p = t.data<float16>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = float16(float(value));
      break;
    }
    case DType::kBFloat16: {
      bfloat16* p = t.data<bfloat16>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = bfloat16(float(value));
      break;
    }
    default:
      break;
  }
  return t;
}

// ------------------------------------------------------------------ Emitter
Emitter::Emitter(Model& m, Graph& g) : opsets_(&m.opsets), target_(g) {
  if (m.graph && m.graph.get() != &g) reserve_names_of(*m.graph);
  reserve_names_of(g);
  note_types(g);
}

Emitter::Emitter(std::map<std::string, int64_t>& opsets, Graph& target) : opsets_(&opsets), target_(target) {}

Emitter::Emitter(Emitter& parent, Graph& target)
    : parent_(&parent),
      opsets_(parent.opsets_),
      target_(target),
      hint_(parent.hint_),
      node_prefix_(parent.node_prefix_),
      origin_(parent.origin_) {}

template <class E, class... Args>
void Emitter::fail(Args&&... args) const {
  if (origin_.empty()) throw_error<E>(std::forward<Args>(args)...);
  throw_error<E>(origin_, ": ", std::forward<Args>(args)...);
}

std::string Emitter::fresh(const std::string& base_in) {
  Emitter& r = root();
  const std::string base = base_in.empty() ? "v" : base_in;
  if (r.names_.insert(base).second) return base;
  for (;;) {
    std::string n = base + "_" + std::to_string(++r.counter_);
    if (r.names_.insert(n).second) return n;
  }
}

bool Emitter::reserve(const std::string& name) { return root().names_.insert(name).second; }

void Emitter::reserve_names_of(const Graph& g) {
  auto& names = root().names_;
  for (const auto& v : g.inputs) names.insert(v.name);
  for (const auto& [n, t] : g.initializers) names.insert(n);
  for (const auto& n : g.nodes) {
    for (const auto& o : n.outputs)
      if (!o.empty()) names.insert(o);
    if (!n.name.empty()) names.insert(n.name);
    for (const Graph* sg : n.subgraphs()) reserve_names_of(*sg);
  }
}

void Emitter::note_types(const Graph& g) {
  auto note = [&](const std::vector<ValueInfo>& vs) {
    for (const auto& v : vs)
      if (v.type.kind != TypeInfo::Kind::kUnknown) types_[v.name] = v.type;
  };
  note(g.value_info);
  note(g.inputs);
  note(g.outputs);
  for (const auto& [n, t] : g.initializers) types_[n] = TypeInfo::tensor(t.dtype(), t.shape());
}

const TypeInfo* Emitter::type(const std::string& v) const {
  auto it = types_.find(v);
  if (it != types_.end()) return &it->second;
  return parent_ ? parent_->type(v) : nullptr;
}

DType Emitter::dtype(const std::string& v) const {
  const TypeInfo* t = type(v);
  return t ? t->elem : DType::kUndefined;
}

void Emitter::set_type(const std::string& v, const TypeInfo& t) { types_[v] = t; }

void Emitter::refine_type(const std::string& v, const TypeInfo& t) {
  const TypeInfo* old = type(v);
  if (!old || old->kind == TypeInfo::Kind::kUnknown) {
    if (t.kind != TypeInfo::Kind::kUnknown) types_[v] = t;
    return;
  }
  if (old->kind != TypeInfo::Kind::kTensor || t.kind != TypeInfo::Kind::kTensor) return;
  if (old->elem != DType::kUndefined && t.elem != DType::kUndefined && old->elem != t.elem)
    fail<InvalidGraph>("'", v, "' has element type ", dtype_name(old->elem), ", expected ", dtype_name(t.elem));
  TypeInfo r = *old;
  if (r.elem == DType::kUndefined) r.elem = t.elem;
  if (t.has_shape && !r.has_shape) r.has_shape = true, r.dims = t.dims;
  types_[v] = std::move(r);
}

int64_t Emitter::opset(const std::string& domain) const {
  auto it = opsets_->find(normalize_domain(domain));
  return it == opsets_->end() ? 0 : it->second;
}

void Emitter::import_domain(const std::string& domain) {
  const std::string d = normalize_domain(domain);
  if ((d == kOnnxtrainDomain || d == kPreviewTrainingDomain) && !opsets_->count(d)) (*opsets_)[d] = 1;
}

const Node& Emitter::append(Node n) {
  n.domain = normalize_domain(n.domain);
  import_domain(n.domain);
  if (n.name.empty()) n.name = fresh(node_prefix_ + n.op_type);
  std::vector<TypeInfo> ts;
  try {
    ts = output_types(n, *opsets_, [this](const std::string& v) { return type(v); });
  } catch (const InvalidGraph& e) {
    fail<InvalidGraph>(e.what());
  } catch (const NotImplemented& e) {
    fail<NotImplemented>(e.what());
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (n.outputs[k].empty()) continue;
    reserve(n.outputs[k]);
    if (ts[k].kind != TypeInfo::Kind::kUnknown) types_[n.outputs[k]] = ts[k];
  }
  target_.nodes.push_back(std::move(n));
  return target_.nodes.back();
}

std::vector<std::string> Emitter::add_n(const std::string& op, std::vector<std::string> inputs, size_t n,
                                        std::vector<Attribute> attrs, const std::string& domain,
                                        const std::string& hint) {
  return add_some(op, std::move(inputs), std::vector<bool>(n, true), std::move(attrs), domain, hint);
}

std::string Emitter::add(const std::string& op, std::vector<std::string> inputs, std::vector<Attribute> attrs,
                         const std::string& hint) {
  return add_n(op, std::move(inputs), 1, std::move(attrs), "", hint)[0];
}

std::vector<std::string> Emitter::add_some(const std::string& op, std::vector<std::string> inputs,
                                           const std::vector<bool>& wanted, std::vector<Attribute> attrs,
                                           const std::string& domain, const std::string& hint) {
  Node node;
  node.op_type = op;
  node.domain = domain;
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  const std::string base = !hint.empty() ? hint : hint_.empty() ? op : hint_ + "_" + op;
  for (bool w : wanted) node.outputs.push_back(w ? fresh(base) : std::string());
  std::vector<std::string> outs = node.outputs;
  while (!node.outputs.empty() && node.outputs.back().empty()) node.outputs.pop_back();
  append(std::move(node));
  return outs;
}

void Emitter::add_input(const ValueInfo& v) {
  if (!reserve(v.name)) fail<InvalidGraph>("cannot add input '", v.name, "': the graph already has that name");
  target_.inputs.push_back(v);
  if (v.type.kind != TypeInfo::Kind::kUnknown) types_[v.name] = v.type;
}

std::string Emitter::constant(const Tensor& t, const std::string& hint) {
  std::string n = fresh(hint);
  root().target_.initializers.emplace_back(n, t);  // graph initializers are visible in every subgraph
  types_[n] = TypeInfo::tensor(t.dtype(), t.shape());
  return n;
}

std::string Emitter::scalar(DType dt, double value, const std::string& hint) {
  if (!dtype_is_float(dt)) fail<NotImplemented>("a float scalar of element type ", dtype_name(dt));
  return constant(float_tensor(dt, value), hint);
}

std::string Emitter::scalar_like(double value, const std::string& v) {
  const DType dt = dtype(v);
  if (dt == DType::kUndefined)
    fail<NotImplemented>("the element type of '", v, "' is unknown (ONNX type inference failed)");
  if (!dtype_is_float(dt)) fail<NotImplemented>("'", v, "' has non-float element type ", dtype_name(dt));
  return scalar(dt, value);
}

std::string Emitter::ints(const std::vector<int64_t>& values, const std::string& hint) {
  return constant(Tensor::from_vector<int64_t>({int64_t(values.size())}, values), hint);
}

std::vector<int64_t> Emitter::attribute_axes(const std::string& op, const std::string& v, std::vector<int64_t> axes,
                                             size_t added) {
  if (opset() >= 11 || std::all_of(axes.begin(), axes.end(), [](int64_t a) { return a >= 0; })) return axes;
  // Negative axes exist from opset 11 on: count them from the rank.
  const TypeInfo* t = type(v);
  if (!t || !t->has_shape)
    fail<NotImplemented>(op, " of '", v, "' with negative axes at opset ", opset(), " needs its rank (unknown)");
  const int64_t rank = int64_t(t->dims.size() + added);
  for (auto& a : axes)
    if (a < 0) a += rank;
  return axes;
}

std::string Emitter::reduce_sum(const std::string& v, const std::vector<int64_t>& axes, bool keepdims) {
  if (opset() >= 13) return add("ReduceSum", {v, ints(axes)}, {int_attr("keepdims", keepdims)});
  // No axes: reduce over all of them, which an absent attribute says (the checker refuses an empty one).
  if (axes.empty()) return add("ReduceSum", {v}, {int_attr("keepdims", keepdims)});
  return add("ReduceSum", {v},
             {ints_attr("axes", attribute_axes("ReduceSum", v, axes, 0)), int_attr("keepdims", keepdims)});
}

std::string Emitter::reduce_all(const std::string& op, const std::string& v) {
  return add(op, {v}, {int_attr("keepdims", 0)});
}

std::string Emitter::unsqueeze(const std::string& v, const std::vector<int64_t>& axes) {
  if (opset() >= 13) return add("Unsqueeze", {v, ints(axes)});
  return add("Unsqueeze", {v}, {ints_attr("axes", attribute_axes("Unsqueeze", v, axes, axes.size()))});
}

std::string Emitter::squeeze(const std::string& v, const std::vector<int64_t>& axes) {
  if (opset() >= 13) return add("Squeeze", {v, ints(axes)});
  return add("Squeeze", {v}, {ints_attr("axes", attribute_axes("Squeeze", v, axes, 0))});
}

std::vector<std::string> Emitter::split(const std::string& v, int64_t axis, const std::vector<int64_t>& sizes) {
  if (opset() >= 13) return add_n("Split", {v, ints(sizes)}, sizes.size(), {int_attr("axis", axis)});
  return add_n("Split", {v}, sizes.size(), {int_attr("axis", axis), ints_attr("split", sizes)});
}

std::string Emitter::slice(const std::string& v, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                           const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
  if (opset() >= 10) {
    std::vector<std::string> in{v, ints(starts), ints(ends), ints(axes)};
    if (!steps.empty()) in.push_back(ints(steps));
    return add("Slice", in);
  }
  for (int64_t s : steps)
    if (s != 1) fail<NotImplemented>("Slice-", opset(), " has no steps (opset >= 10 needed)");
  return add(
      "Slice", {v},
      {ints_attr("starts", starts), ints_attr("ends", ends), ints_attr("axes", attribute_axes("Slice", v, axes, 0))});
}

std::string Emitter::pad(const std::string& v, const std::vector<int64_t>& pads) {
  if (opset() >= 11) return add("Pad", {v, ints(pads)});
  return add("Pad", {v}, {ints_attr(opset() < 2 ? "paddings" : "pads", pads)});
}

std::string Emitter::transpose(const std::string& v, const std::vector<int64_t>& perm) {
  return add("Transpose", {v}, {ints_attr("perm", perm)});
}

std::string Emitter::reshape(const std::string& v, const std::string& shape) {
  if (opset() < 5)
    fail<NotImplemented>("Reshape-", opset(), " of '", v, "' takes its shape as an attribute (opset >= 5 needed)");
  return add("Reshape", {v, shape});
}

std::string Emitter::expand(const std::string& v, const std::string& shape) { return add("Expand", {v, shape}); }

std::string Emitter::cast(const std::string& v, DType to) { return add("Cast", {v}, {int_attr("to", int64_t(to))}); }

std::string Emitter::cast_like(const std::string& v, const std::string& like) {
  const DType dt = dtype(like);
  if (dt == DType::kUndefined) fail<NotImplemented>("the element type of '", like, "' is unknown");
  return cast(v, dt);
}

std::string Emitter::shape_of(const std::string& v) {
  auto it = shape_cache_.find(v);
  if (it != shape_cache_.end()) return it->second;
  const std::string s = add("Shape", {v});
  shape_cache_[v] = s;
  return s;
}

std::string Emitter::zeros_like(const std::string& v) {
  if (auto s = static_shape(type(v)); s && shape_numel(*s) <= 16 && dtype_is_float(dtype(v)))
    return constant(float_tensor(dtype(v), 0.0, *s));
  return expand(scalar_like(0.0, v), shape_of(v));
}

std::string Emitter::ones_like(const std::string& v) { return expand(scalar_like(1.0, v), shape_of(v)); }

namespace {
// An attribute `name` of `type` whose `field` holds v.
template <class T>
Attribute attribute(const std::string& name, AttrType type, T Attribute::*field, T v) {
  Attribute a;
  a.name = name;
  a.type = type;
  a.*field = std::move(v);
  return a;
}
}  // namespace

Attribute Emitter::int_attr(const std::string& name, int64_t v) {
  return attribute(name, AttrType::kInt, &Attribute::i, v);
}
Attribute Emitter::float_attr(const std::string& name, float v) {
  return attribute(name, AttrType::kFloat, &Attribute::f, v);
}
Attribute Emitter::ints_attr(const std::string& name, std::vector<int64_t> v) {
  return attribute(name, AttrType::kInts, &Attribute::ints, std::move(v));
}
Attribute Emitter::floats_attr(const std::string& name, std::vector<float> v) {
  return attribute(name, AttrType::kFloats, &Attribute::floats, std::move(v));
}
Attribute Emitter::string_attr(const std::string& name, const std::string& v) {
  return attribute(name, AttrType::kString, &Attribute::s, v);
}
Attribute Emitter::tensor_attr(const std::string& name, const Tensor& v) {
  return attribute(name, AttrType::kTensor, &Attribute::t, v);
}
Attribute Emitter::graph_attr(const std::string& name, std::shared_ptr<Graph> g) {
  return attribute(name, AttrType::kGraph, &Attribute::g, std::move(g));
}

}  // namespace onnxtrain::ir
