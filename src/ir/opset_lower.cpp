// ai.onnx opsets 18 to 21 (ONNX's docs/Changelog.md) in their opset-17 form (ir/opset_lower.h).
//
// Every default-domain node of a model importing opset V in 18..21 is taken at the version of its
// operator current at V. Operators unchanged since 17, and those whose later versions only add
// element types onnxtrain does not have (float8, int4, ...: refused where they appear), stay as they
// are. The others are rewritten:
//   Reduce*-18/20     axes input: constant -> the axes attribute (empty: all, or Identity with
//                     noop_with_empty_axes); computed at run time -> ReduceSum-13 compositions for
//                     Mean, L1, L2, LogSum, SumSquare (ONNX's function bodies)
//   Split-18          num_outputs -> a split input of ceil(d / n)-sized chunks, computed from Shape
//   Pad-18/19/21      axes input -> full pads scattered into zeros of length 2 * rank
//   Resize-18/19      antialias 0, keep_aspect_ratio_policy stretch -> Resize-13 (axes: scales or sizes
//                     scattered into full-rank ones)
//   LpPool-18         ceil_mode 0; AveragePool-19: dilations of 1; Cast/CastLike-19/21: saturate
//   Mish-18           X * Tanh(Softplus(X)); CenterCropPad-18: Pad then Slice (ONNX's function body)
//   Gelu-20           0.5 X (1 + Erf(X / sqrt 2)), or the tanh form for approximate = "tanh"
//   GroupNormalization-18 (per-group scale, bias) and -21 (per-channel scale, bias):
//                     InstanceNormalization of X viewed as [N, G, -1], then scale and bias
//   AffineGrid-20     base grid (Range coordinates, ones) @ theta^T (ONNX's function body), 2-D, 3-D
// Kept as they are (opset-18 forms, their attributes checked here): Bitwise{And,Or,Xor,Not}-18,
// Col2Im-18, ScatterElements/ScatterND-18 with reduction max or min, ReduceMax/Min/Prod/LogSumExp-18
// with axes computed at run time (opset18_form; kernels and type rules know them at 17).
// Constants the rewrites need are Constant nodes (never initializers: those could be trained).
#include "ir/opset_lower.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/emitter.h"
#include "ir/onnx_io.h"
#include "onnxtrain/error.h"

namespace onnxtrain::ir {

namespace {
namespace lower {  // (unity builds merge anonymous namespaces)

// Versions of each default-domain operator defined anew at opsets 18 to 21.
const std::map<std::string, std::vector<int64_t>>& changes() {
  static const std::map<std::string, std::vector<int64_t>> m = [] {
    std::map<std::string, std::vector<int64_t>> r;
    for (const char* op : {"BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "CenterCropPad", "Col2Im",
                           "GroupNormalization", "LpPool", "Mish", "OptionalGetElement", "OptionalHasElement", "Pad",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                           "ReduceMin", "ReduceProd", "ReduceSumSquare", "Resize", "ScatterElements", "ScatterND",
                           "Split"})
      r[op].push_back(18);
    for (const char* op : {"AveragePool", "Cast", "CastLike", "Constant", "DeformConv", "DequantizeLinear", "Equal",
                           "Identity", "If", "Loop", "Pad", "QuantizeLinear", "Reshape", "Resize", "Scan", "Shape",
                           "Size"})
      r[op].push_back(19);
    for (const char* op : {"AffineGrid", "ConstantOfShape", "DFT", "Gelu", "GridSample", "ImageDecoder", "IsInf",
                           "IsNaN", "ReduceMax", "ReduceMin", "RegexFullMatch", "StringConcat", "StringSplit"})
      r[op].push_back(20);
    for (const char* op : {"Cast", "CastLike", "Constant", "ConstantOfShape", "DequantizeLinear", "Flatten",
                           "GroupNormalization", "Identity", "If", "Loop", "Pad", "QLinearMatMul", "QuantizeLinear",
                           "Reshape", "Scan", "Shape", "Size", "Squeeze", "Transpose", "Unsqueeze"})
      r[op].push_back(21);
    return r;
  }();
  return m;
}

// Operators whose versions past 17 onnxtrain does not implement (no kernel, or no opset-17 form).
bool not_implemented(const std::string& op) {
  static const std::unordered_set<std::string> s{
      "DeformConv", "QuantizeLinear", "DequantizeLinear", "QLinearMatMul", "GridSample",
      "DFT",        "ImageDecoder",   "RegexFullMatch",   "StringConcat",  "StringSplit"};
  return s.count(op) != 0;
}

// The version of `op` current at `opset`, when it is past 17; 0 otherwise.
int64_t new_version(const std::string& op, int64_t opset) {
  auto it = changes().find(op);
  if (it == changes().end()) return 0;
  int64_t v = 0;
  for (int64_t since : it->second)
    if (since <= opset) v = since;
  return v;
}

// Where a node's values may come from: its graph's initializers (not those a graph input
// overrides) and Constant nodes, then the enclosing scopes.
struct Scope {
  const Graph* graph;  // nullptr for function bodies
  const std::vector<Node>* nodes;
  const Scope* parent;
};

// The Constant node or initializer that defines v, when v is a constant there.
struct ConstantSource {
  const Tensor* tensor = nullptr;
  const Attribute* ints = nullptr;  // Constant's value_ints or value_int
};

ConstantSource constant_value(const Scope* s, const std::string& v) {
  for (; s; s = s->parent) {
    if (s->graph) {
      if (s->graph->is_input(v)) return {};
      if (const Tensor* t = s->graph->initializer(v)) return {t, nullptr};
    }
    for (const Node& n : *s->nodes)
      for (const auto& o : n.outputs)
        if (o == v) {
          if (n.op_type != "Constant" || !n.domain.empty()) return {};
          if (const Attribute* a = n.attr("value"); a && a->type == AttrType::kTensor) return {&a->t, nullptr};
          for (const char* name : {"value_ints", "value_int"})
            if (const Attribute* a = n.attr(name); a && (a->type == AttrType::kInts || a->type == AttrType::kInt))
              return {nullptr, a};
          return {};
        }
  }
  return {};
}

void erase_attr(Node& n, const std::string& name) {
  std::erase_if(n.attrs, [&](const Attribute& a) { return a.name == name; });
}

// Attribute `name` of n (field `field`, which attributes of `type` hold), or dflt when absent;
// InvalidGraph naming node and attribute when it has another type.
template <class T>
T read_attr(const Node& n, const std::string& name, AttrType type, T Attribute::*field, T dflt) {
  const Attribute* a = n.attr(name);
  if (!a) return dflt;
  if (a->type != type)
    throw_error<InvalidGraph>(n.describe(), ": attribute '", name, "' must be of type ", attr_type_name(type), ", not ",
                              attr_type_name(a->type));
  return a->*field;
}

int64_t int_attr(const Node& n, const std::string& name, int64_t dflt) {
  return read_attr(n, name, AttrType::kInt, &Attribute::i, dflt);
}
std::string string_attr(const Node& n, const std::string& name, const std::string& dflt) {
  return read_attr(n, name, AttrType::kString, &Attribute::s, dflt);
}
float float_attr(const Node& n, const std::string& name, float dflt) {
  return read_attr(n, name, AttrType::kFloat, &Attribute::f, dflt);
}

bool has_input(const Node& n, size_t i) { return i < n.inputs.size() && !n.inputs[i].empty(); }

void trim_inputs(Node& n) {
  while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
}

// Element types of the value info's, tensors' and Cast targets that onnxtrain has no DType for.
void check_type(const TypeInfo& t, const std::string& what) {
  if (const char* name = unsupported_onnx_type_name(int64_t(t.elem)))
    throw_error<NotImplemented>(what, " has element type ", name, ", which onnxtrain does not support");
  if (t.inner) check_type(*t.inner, what);
}

void check_types(const Graph& g) {
  for (const auto* list : {&g.inputs, &g.outputs, &g.value_info})
    for (const auto& v : *list) check_type(v.type, "value '" + v.name + "'");
}

class Lowerer {
 public:
  Lowerer(int64_t opset, std::unordered_set<std::string>& names) : opset_(opset), names_(names) {}

  void graph(Graph& g, const Scope* parent) {
    check_types(g);
    nodes(g.nodes, &g, parent);
  }

  void nodes(std::vector<Node>& ns, const Graph* g, const Scope* parent) {
    const Scope scope{g, &ns, parent};
    std::vector<Node> out;
    out.reserve(ns.size());
    for (const Node& n : ns) {
      for (const Attribute& a : n.attrs) {
        if (a.g) graph(*a.g, &scope);
        for (const auto& sg : a.graphs) graph(*sg, &scope);
      }
      out_ = &out;
      if (n.domain.empty()) lower(n, scope);
      else out.push_back(n);
    }
    ns = std::move(out);
  }

 private:
  // ---- building blocks: nodes appended to out_, named after the node they replace.
  std::string fresh(const Node& at, const std::string& what) {
    const std::string base = (at.outputs.empty() ? at.op_type : at.outputs[0]) + "/opset" + std::to_string(opset_) +
                             "_" + what;
    std::string s = base;
    for (int k = 1; !names_.insert(s).second; ++k) s = base + "_" + std::to_string(k);
    return s;
  }
  std::string add(const Node& at, const std::string& op, std::vector<std::string> ins,
                  std::vector<Attribute> attrs = {}) {
    Node n;
    n.op_type = op;
    n.name = fresh(at, op + "_node");
    n.inputs = std::move(ins);
    n.outputs = {fresh(at, op)};
    n.attrs = std::move(attrs);
    out_->push_back(std::move(n));
    return out_->back().outputs[0];
  }
  std::string constant(const Node& at, Tensor t) {
    return add(at, "Constant", {}, {Emitter::tensor_attr("value", std::move(t))});
  }
  std::string ints(const Node& at, const std::vector<int64_t>& v) {
    return constant(at, Tensor::from_vector<int64_t>({int64_t(v.size())}, v));
  }
  std::string scalar_int(const Node& at, int64_t v) { return constant(at, Tensor::scalar<int64_t>(v)); }
  // A float constant in x's element type.
  std::string scalar_like(const Node& at, float v, const std::string& x) {
    return add(at, "CastLike", {constant(at, Tensor::scalar<float>(v)), x});
  }
  // The node `n`, rewritten to op with `ins`, producing n's outputs.
  void finish(const Node& n, const std::string& op, std::vector<std::string> ins, std::vector<Attribute> attrs = {}) {
    Node r;
    r.name = n.name;
    r.op_type = op;
    r.doc = n.doc;
    r.inputs = std::move(ins);
    r.outputs = n.outputs;
    r.attrs = std::move(attrs);
    out_->push_back(std::move(r));
  }

  std::optional<std::vector<int64_t>> constant_ints(const Scope& s, const Node& n, const std::string& v,
                                                    const char* what) {
    const ConstantSource c = constant_value(&s, v);
    if (c.ints) return c.ints->type == AttrType::kInts ? c.ints->ints : std::vector<int64_t>{c.ints->i};
    const Tensor* t = c.tensor;
    if (!t) return std::nullopt;
    if (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32)
      throw_error<InvalidGraph>(n.describe(), ": input '", what, "' must be int64 or int32, not ", dtype_name(t->dtype()));
    if (t->shape().size() > 1) throw_error<InvalidGraph>(n.describe(), ": input '", what, "' must be 1-D");
    std::vector<int64_t> r(size_t(t->numel()));
    for (int64_t i = 0; i < t->numel(); ++i)
      r[size_t(i)] = t->dtype() == DType::kInt64 ? t->data<int64_t>()[i] : t->data<int32_t>()[i];
    return r;
  }

  [[noreturn]] void refuse(const Node& n, int64_t version, const std::string& what) const {
    throw_error<NotImplemented>(n.describe(), ": ", n.op_type, "-", version, " (the model imports ai.onnx opset ",
                                opset_, ")", what, " is not implemented by onnxtrain");
  }

  // ---- the rewrites
  void lower(const Node& n, const Scope& s) {
    const int64_t v = new_version(n.op_type, opset_);
    if (n.op_type == "Cast" || n.op_type == "CastLike" || n.op_type == "Constant" || n.op_type == "ConstantOfShape")
      check_cast_target(n);
    if (v == 0) return out_->push_back(n);
    if (not_implemented(n.op_type)) refuse(n, v, "");
    const std::string& op = n.op_type;
    if (op.rfind("Reduce", 0) == 0) return reduce(n, s, v);
    if (op == "Split") return split(n);
    if (op == "Pad") return pad(n, v);
    if (op == "Resize") return resize(n, v);
    if (op == "CenterCropPad") return center_crop_pad(n);
    if (op == "Mish") return finish(n, "Mul", {n.inputs.at(0), add(n, "Tanh", {add(n, "Softplus", {n.inputs.at(0)})})});
    if (op == "Gelu") return gelu(n);
    if (op.rfind("Bitwise", 0) == 0) {
      const size_t arity = op == "BitwiseNot" ? 1 : 2;
      if (n.inputs.size() != arity || n.outputs.size() != 1)
        throw_error<InvalidGraph>(n.describe(), ": ", op, "-18 takes ", arity, " input(s) and 1 output, not ",
                                  n.inputs.size(), " and ", n.outputs.size());
      return out_->push_back(n);
    }
    if (op == "Col2Im") return col2im(n, s);
    if (op == "AffineGrid") return affine_grid(n, s, v);
    if (op == "GroupNormalization") return group_norm(n, v);
    Node r = n;
    if (op == "LpPool" && int_attr(n, "ceil_mode", 0) != 0) refuse(n, v, " with ceil_mode 1");
    if (op == "LpPool") erase_attr(r, "ceil_mode");
    if (op == "AveragePool") {
      if (const Attribute* d = n.attr("dilations"))
        for (int64_t x : d->ints)
          if (x != 1) refuse(n, v, " with dilations other than 1");
      erase_attr(r, "dilations");
    }
    if (op == "Cast" || op == "CastLike") {
      const int64_t sat = int_attr(n, "saturate", 1);
      if (sat != 0 && sat != 1)
        throw_error<InvalidGraph>(n.describe(), ": attribute 'saturate' must be 0 or 1, not ", sat);
      erase_attr(r, "saturate");  // it concerns float8 targets only
    }
    if (op == "ScatterElements" || op == "ScatterND") {
      const std::string red = string_attr(n, "reduction", "none");
      if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
        throw_error<InvalidGraph>(n.describe(), ": attribute 'reduction' is '", red,
                                  "'; ", op, "-18 knows none, add, mul, max, min");
    }
    out_->push_back(std::move(r));
  }

  void check_cast_target(const Node& n) {
    if (const Attribute* a = n.attr("to"); a && a->type == AttrType::kInt)
      if (const char* name = unsupported_onnx_type_name(a->i))
        throw_error<NotImplemented>(n.describe(), ": attribute 'to' is ", name, ", which onnxtrain does not support");
  }

  void reduce(const Node& n, const Scope& s, int64_t v) {
    if (n.inputs.empty() || n.inputs.size() > 2)
      throw_error<InvalidGraph>(n.describe(), ": ", n.op_type, "-", v, " takes 1 or 2 inputs, not ", n.inputs.size());
    if (n.attr("axes"))
      throw_error<InvalidGraph>(n.describe(), ": attribute 'axes' does not exist in ", n.op_type, "-", v,
                                " (axes are input 1)");
    const int64_t noop = int_attr(n, "noop_with_empty_axes", 0);
    if (noop != 0 && noop != 1)
      throw_error<InvalidGraph>(n.describe(), ": attribute 'noop_with_empty_axes' must be 0 or 1, not ", noop);
    const int64_t keep = int_attr(n, "keepdims", 1);
    if (keep != 0 && keep != 1) throw_error<InvalidGraph>(n.describe(), ": attribute 'keepdims' must be 0 or 1, not ", keep);
    const std::string& x = n.inputs[0];
    std::optional<std::vector<int64_t>> axes =
        has_input(n, 1) ? constant_ints(s, n, n.inputs[1], "axes") : std::vector<int64_t>{};
    if (axes) {
      if (axes->empty() && noop) return finish(n, "Identity", {x});
      std::vector<Attribute> at{Emitter::int_attr("keepdims", keep)};
      if (!axes->empty()) at.push_back(Emitter::ints_attr("axes", *axes));
      return finish(n, n.op_type, {x}, std::move(at));
    }
    // Axes computed at run time: ReduceSum-13 takes them as an input.
    const std::string& ax = n.inputs[1];
    auto sum = [&](const std::string& t) {
      return add(n, "ReduceSum", {t, ax},
                 {Emitter::int_attr("keepdims", keep), Emitter::int_attr("noop_with_empty_axes", noop)});
    };
    if (n.op_type == "ReduceSumSquare") return finish(n, "ReduceSum", {add(n, "Mul", {x, x}), ax}, sum_attrs(keep, noop));
    if (n.op_type == "ReduceL1") return finish(n, "ReduceSum", {add(n, "Abs", {x}), ax}, sum_attrs(keep, noop));
    if (n.op_type == "ReduceL2") return finish(n, "Sqrt", {sum(add(n, "Mul", {x, x}))});
    if (n.op_type == "ReduceLogSum") return finish(n, "Log", {sum(x)});
    if (n.op_type == "ReduceMean") {
      const std::string ones = add(n, "Expand", {scalar_like(n, 1.0f, x), add(n, "Shape", {x})});
      return finish(n, "Div", {sum(x), sum(ones)});
    }
    // ReduceMax/Min/Prod/LogSumExp: kept with their axes input (an opset-18 form).
    finish(n, n.op_type, {x, ax}, sum_attrs(keep, noop));
  }

  // The number of spatial dims of AffineGrid's output: from the length of a constant size, else from
  // theta's declared shape [N, nd, nd + 1] (a graph input or an initializer); 0 when neither says.
  static size_t affine_dims(const Scope& s, const std::optional<std::vector<int64_t>>& size, const std::string& theta) {
    if (size) return size->size() >= 2 ? size->size() - 2 : 0;
    for (const Scope* sc = &s; sc; sc = sc->parent) {
      if (!sc->graph) continue;
      if (const Tensor* t = sc->graph->initializer(theta)) return t->rank() == 3 ? size_t(t->shape()[1]) : 0;
      for (const auto* list : {&sc->graph->inputs, &sc->graph->value_info})
        for (const ValueInfo& vi : *list)
          if (vi.name == theta && vi.type.has_shape && vi.type.dims.size() == 3 && vi.type.dims[1].fixed())
            return size_t(vi.type.dims[1].value);
    }
    return 0;
  }

  // AffineGrid-20 as ONNX's function body: the base grid of normalized coordinates of size's spatial
  // dims [.., H, W] (x along the last), with a column of ones, times theta transposed:
  // grid[n, h, w] = theta[n] @ (x_w, y_h, 1). Coordinates of a dim of S points: (2 i + 1) / S - 1,
  // or with align_corners (2 i - (S - 1)) / max(S - 1, 1): 2 i / (S - 1) - 1, and 0 for a single
  // point (torch's affine_grid; ONNX leaves that case to division by zero).
  void affine_grid(const Node& n, const Scope& s, int64_t v) {
    if (n.inputs.size() != 2 || n.outputs.size() != 1)
      throw_error<InvalidGraph>(n.describe(), ": AffineGrid takes 2 inputs and 1 output, not ", n.inputs.size(),
                                " and ", n.outputs.size());
    const int64_t ac = int_attr(n, "align_corners", 0);
    if (ac != 0 && ac != 1)
      throw_error<InvalidGraph>(n.describe(), ": attribute 'align_corners' must be 0 or 1, not ", ac);
    const std::string &theta = n.inputs[0], &size_in = n.inputs[1];
    const auto size = constant_ints(s, n, size_in, "size");
    const size_t nd = affine_dims(s, size, theta);
    if (size && nd != 2 && nd != 3)
      throw_error<InvalidGraph>(n.describe(), ": input 'size' must be [N, C, H, W] or [N, C, D, H, W], not ",
                                size->size(), " values");
    if (nd != 2 && nd != 3) refuse(n, v, " with input 'size' computed at run time and theta's shape not declared");
    const std::string size64 = add(n, "Cast", {size_in}, {Emitter::int_attr("to", int64_t(DType::kInt64))});
    const std::string spatial = add(n, "Slice", {size64, ints(n, {2}), ints(n, {int64_t(2 + nd)})});
    const std::string one = scalar_like(n, 1.0f, theta), two = scalar_like(n, 2.0f, theta);
    const std::string full = add(n, "Concat", {spatial, ints(n, {1})}, {Emitter::int_attr("axis", 0)});
    std::vector<std::string> parts(nd + 1);  // x (last dim), y, [z], ones: each [spatial..., 1]
    for (size_t i = 0; i < nd; ++i) {
      const std::string count = add(n, "Gather", {size64, scalar_int(n, int64_t(2 + i))});
      const std::string r = add(n, "CastLike", {add(n, "Range", {scalar_int(n, 0), count, scalar_int(n, 1)}), theta});
      const std::string cnt = add(n, "CastLike", {count, theta});
      const std::string c =
          ac ? add(n, "Div", {add(n, "Sub", {add(n, "Mul", {r, two}), add(n, "Sub", {cnt, one})}),
                              add(n, "Max", {add(n, "Sub", {cnt, one}), one})})
             : add(n, "Sub", {add(n, "Div", {add(n, "Add", {add(n, "Mul", {r, two}), one}), cnt}), one});
      std::vector<int64_t> view(nd + 1, 1);
      view[i] = -1;
      parts[nd - 1 - i] = add(n, "Expand", {add(n, "Reshape", {c, ints(n, view)}), full});
    }
    parts[nd] = add(n, "Expand", {one, full});
    const std::string base =
        add(n, "Reshape", {add(n, "Concat", parts, {Emitter::int_attr("axis", -1)}), ints(n, {-1, int64_t(nd + 1)})});
    const std::string flat =
        add(n, "MatMul", {base, add(n, "Transpose", {theta}, {Emitter::ints_attr("perm", {0, 2, 1})})});
    const std::string shape =
        add(n, "Concat", {add(n, "Slice", {size64, ints(n, {0}), ints(n, {1})}), spatial, ints(n, {int64_t(nd)})},
            {Emitter::int_attr("axis", 0)});
    finish(n, "Reshape", {flat, shape});
  }

  // Col2Im-18 stays; its attributes, and image_shape / block_shape when constant, are checked here.
  void col2im(const Node& n, const Scope& s) {
    if (n.inputs.size() != 3 || n.outputs.size() != 1)
      throw_error<InvalidGraph>(n.describe(), ": Col2Im takes 3 inputs and 1 output, not ", n.inputs.size(), " and ",
                                n.outputs.size());
    const auto image = constant_ints(s, n, n.inputs[1], "image_shape");
    const auto block = constant_ints(s, n, n.inputs[2], "block_shape");
    for (const auto* v : {&image, &block})
      if (*v &&
          (v->value().empty() || std::any_of(v->value().begin(), v->value().end(), [](int64_t d) { return d <= 0; })))
        throw_error<InvalidGraph>(n.describe(), ": input '", v == &image ? "image_shape" : "block_shape",
                                  "' must hold one positive size per spatial dim");
    if (image && block && image->size() != block->size())
      throw_error<InvalidGraph>(n.describe(), ": image_shape has ", image->size(), " values and block_shape ",
                                block->size());
    const size_t nd = image ? image->size() : block ? block->size() : 0;
    for (const char* name : {"dilations", "pads", "strides"}) {
      const Attribute* a = n.attr(name);
      if (!a) continue;
      if (a->type != AttrType::kInts)
        throw_error<InvalidGraph>(n.describe(), ": attribute '", name, "' must be ints, not ", attr_type_name(a->type));
      const bool pads = name[0] == 'p';
      for (int64_t d : a->ints)
        if (pads ? d < 0 : d <= 0)
          throw_error<InvalidGraph>(n.describe(), ": attribute '", name, "' must hold ",
                                    pads ? "non-negative" : "positive", " values");
      if (nd && a->ints.size() != (pads ? 2 * nd : nd))
        throw_error<InvalidGraph>(n.describe(), ": attribute '", name, "' has ", a->ints.size(), " values for ", nd,
                                  " spatial dims (expected ", pads ? 2 * nd : nd, ")");
    }
    out_->push_back(n);
  }
  static std::vector<Attribute> sum_attrs(int64_t keep, int64_t noop) {
    return {Emitter::int_attr("keepdims", keep), Emitter::int_attr("noop_with_empty_axes", noop)};
  }

  void split(const Node& n) {
    if (n.inputs.empty()) throw_error<InvalidGraph>(n.describe(), ": Split-18 needs an input");
    const bool has_split = has_input(n, 1);
    const Attribute* no = n.attr("num_outputs");
    Node r = n;
    erase_attr(r, "num_outputs");
    if (!no) {
      if (!has_split)
        throw_error<InvalidGraph>(n.describe(), ": Split-18 needs input 'split' or attribute 'num_outputs'");
      return out_->push_back(std::move(r));
    }
    if (no->type != AttrType::kInt || no->i <= 0)
      throw_error<InvalidGraph>(n.describe(), ": attribute 'num_outputs' must be a positive int");
    if (has_split)
      throw_error<InvalidGraph>(n.describe(), ": Split-18 takes input 'split' or attribute 'num_outputs', not both");
    const int64_t k = no->i;
    if (k != int64_t(n.outputs.size()))
      throw_error<InvalidGraph>(n.describe(), ": attribute 'num_outputs' is ", k, " but the node has ", n.outputs.size(),
                                " outputs");
    // Chunks of ceil(d / k), the last one smaller (possibly empty): sizes computed from X's shape.
    const std::string& x = n.inputs[0];
    const std::string d = add(n, "Gather", {add(n, "Shape", {x}), scalar_int(n, int_attr(n, "axis", 0))});
    const std::string chunk = add(n, "Div", {add(n, "Add", {d, scalar_int(n, k - 1)}), scalar_int(n, k)});
    const std::string last = add(n, "Sub", {d, add(n, "Mul", {chunk, scalar_int(n, k - 1)})});
    std::string sizes = add(n, "Reshape", {last, ints(n, {1})});
    if (k > 1)
      sizes = add(n, "Concat", {add(n, "Expand", {chunk, ints(n, {k - 1})}), sizes}, {Emitter::int_attr("axis", 0)});
    r.inputs = {x, sizes};
    out_->push_back(std::move(r));
  }

  void pad(const Node& n, int64_t v) {
    const std::string mode = string_attr(n, "mode", "constant");
    if (mode == "wrap") refuse(n, v, " with mode 'wrap'");
    if (mode != "constant" && mode != "reflect" && mode != "edge")
      throw_error<InvalidGraph>(n.describe(), ": attribute 'mode' is '", mode, "'; Pad-", v,
                                " knows constant, reflect, edge, wrap");
    if (n.inputs.size() < 2 || n.inputs.size() > 4)
      throw_error<InvalidGraph>(n.describe(), ": Pad-", v, " takes 2 to 4 inputs, not ", n.inputs.size());
    Node r = n;
    if (has_input(n, 3)) r.inputs[1] = full_pads(n, n.inputs[0], n.inputs[1], n.inputs[3]);
    r.inputs.resize(std::min<size_t>(r.inputs.size(), 3));
    trim_inputs(r);
    out_->push_back(std::move(r));
  }

  // Axes (cast to int64) counted from `rank`; those outside [-rank, rank) become an index past any
  // length the rewrites scatter into (2 * rank at most), which ScatterElements refuses.
  std::string checked_axes(const Node& n, const std::string& axes_in, const std::string& rank) {
    const std::string axes64 = add(n, "Cast", {axes_in}, {Emitter::int_attr("to", int64_t(DType::kInt64))});
    const std::string wrapped =
        add(n, "Where", {add(n, "Less", {axes64, scalar_int(n, 0)}), add(n, "Add", {axes64, rank}), axes64});
    const std::string bad = add(n, "Or", {add(n, "Less", {wrapped, scalar_int(n, 0)}),
                                          add(n, "GreaterOrEqual", {wrapped, rank})});
    return add(n, "Where", {bad, scalar_int(n, int64_t(1) << 40), wrapped});
  }

  // Pads of Pad-11 (2 * rank values) from pads for `axes` only: scattered into zeros at axis and
  // rank + axis (negative axes counted from the rank).
  std::string full_pads(const Node& n, const std::string& x, const std::string& pads, const std::string& axes_in) {
    const std::string rank = add(n, "Size", {add(n, "Shape", {x})});
    const std::string axes = checked_axes(n, axes_in, rank);
    const std::string where = add(n, "Concat", {axes, add(n, "Add", {axes, rank})}, {Emitter::int_attr("axis", 0)});
    const std::string len = add(n, "Reshape", {add(n, "Mul", {rank, scalar_int(n, 2)}), ints(n, {1})});
    const std::string zeros =
        add(n, "ConstantOfShape", {len}, {Emitter::tensor_attr("value", Tensor::from_vector<int64_t>({1}, {0}))});
    return add(n, "ScatterElements",
               {zeros, where, add(n, "Cast", {pads}, {Emitter::int_attr("to", int64_t(DType::kInt64))})},
               {Emitter::int_attr("axis", 0)});
  }

  // CenterCropPad-18 as ONNX's function body: pad each listed axis evenly (the extra one at the
  // end) up to the target, then slice the centred window (the extra one dropped at the end).
  void center_crop_pad(const Node& n) {
    if (n.inputs.size() != 2 || n.outputs.size() != 1)
      throw_error<InvalidGraph>(n.describe(), ": CenterCropPad takes 2 inputs and 1 output");
    const std::string& x = n.inputs[0];
    const std::string target = add(n, "Cast", {n.inputs[1]}, {Emitter::int_attr("to", int64_t(DType::kInt64))});
    const Attribute* ax = n.attr("axes");
    if (ax && ax->type != AttrType::kInts)
      throw_error<InvalidGraph>(n.describe(), ": attribute 'axes' must be ints, not ", attr_type_name(ax->type));
    const std::string axes = ax ? ints(n, ax->ints) : "";
    auto sizes_of = [&](const std::string& t) {
      const std::string sh = add(n, "Shape", {t});
      return axes.empty() ? sh : add(n, "Gather", {sh, axes});
    };
    const std::string in = sizes_of(x);
    const std::string padded = add(n, "Max", {in, target});
    const std::string grow = add(n, "Sub", {padded, in});
    const std::string before = add(n, "Div", {grow, scalar_int(n, 2)});
    const std::string pads = add(n, "Concat", {before, add(n, "Sub", {grow, before})}, {Emitter::int_attr("axis", 0)});
    const std::string p = add(n, "Pad", {x, axes.empty() ? pads : full_pads(n, x, pads, axes)});
    const std::string start = add(n, "Div", {add(n, "Sub", {padded, target}), scalar_int(n, 2)});
    std::vector<std::string> ins{p, start, add(n, "Add", {start, target})};
    if (!axes.empty()) ins.push_back(axes);
    finish(n, "Slice", std::move(ins));
  }

  void resize(const Node& n, int64_t v) {
    Node r = n;
    if (int64_t aa = int_attr(n, "antialias", 0); aa != 0) {
      if (aa != 1) throw_error<InvalidGraph>(n.describe(), ": attribute 'antialias' must be 0 or 1, not ", aa);
      refuse(n, v, " with antialias 1");
    }
    if (const Attribute* ax = n.attr("axes")) {
      // scales / sizes for the listed axes only: scattered into 1s / X's shape.
      if (ax->type != AttrType::kInts)
        throw_error<InvalidGraph>(n.describe(), ": attribute 'axes' must be ints, not ", attr_type_name(ax->type));
      if (string_attr(n, "coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize")
        refuse(n, v, " with attribute 'axes' and tf_crop_and_resize");
      const std::string& x = n.inputs.at(0);
      const std::string shape = add(n, "Shape", {x});
      const std::string rank = add(n, "Size", {shape});
      const std::string axes = checked_axes(n, ints(n, ax->ints), rank);
      const Attribute axis0 = Emitter::int_attr("axis", 0);
      if (has_input(n, 2)) {
        const std::string ones = add(n, "Expand", {scalar_like(n, 1.0f, n.inputs[2]), add(n, "Reshape", {rank, ints(n, {1})})});
        r.inputs[2] = add(n, "ScatterElements", {ones, axes, n.inputs[2]}, {axis0});
      }
      if (has_input(n, 3))
        r.inputs[3] = add(
            n, "ScatterElements",
            {shape, axes, add(n, "Cast", {n.inputs[3]}, {Emitter::int_attr("to", int64_t(DType::kInt64))})}, {axis0});
    }
    const std::string policy = string_attr(n, "keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller")
        throw_error<InvalidGraph>(n.describe(), ": attribute 'keep_aspect_ratio_policy' is '", policy,
                                  "'; Resize-18 knows stretch, not_larger, not_smaller");
      refuse(n, v, " with keep_aspect_ratio_policy '" + policy + "'");
    }
    if (string_attr(n, "coordinate_transformation_mode", "half_pixel") == "half_pixel_symmetric")
      refuse(n, v, " with coordinate_transformation_mode 'half_pixel_symmetric'");
    for (const char* a : {"antialias", "axes", "keep_aspect_ratio_policy"}) erase_attr(r, a);
    out_->push_back(std::move(r));
  }

  void gelu(const Node& n) {
    const std::string approx = string_attr(n, "approximate", "none");
    const std::string& x = n.inputs.at(0);
    const std::string half_x = add(n, "Mul", {x, scalar_like(n, 0.5f, x)});
    std::string inner;
    if (approx == "none") {
      inner = add(n, "Erf", {add(n, "Mul", {x, scalar_like(n, float(M_SQRT1_2), x)})});
    } else if (approx == "tanh") {  // tanh(sqrt(2/pi) (x + 0.044715 x^3))
      const std::string cube = add(n, "Mul", {add(n, "Mul", {x, x}), x});
      const std::string s = add(n, "Add", {x, add(n, "Mul", {cube, scalar_like(n, 0.044715f, x)})});
      inner = add(n, "Tanh", {add(n, "Mul", {s, scalar_like(n, float(std::sqrt(2.0 / M_PI)), x)})});
    } else {
      throw_error<InvalidGraph>(n.describe(), ": attribute 'approximate' is '", approx, "'; Gelu-20 knows none, tanh");
    }
    finish(n, "Mul", {half_x, add(n, "Add", {inner, scalar_like(n, 1.0f, x)})});
  }

  // Y = InstanceNormalization(X as [N, G, -1]) back in X's shape; at 18 scale and bias are per
  // group (InstanceNormalization's per-"channel" ones), at 21 per channel, applied after.
  void group_norm(const Node& n, int64_t v) {
    if (n.inputs.size() != 3 || n.outputs.size() != 1)
      throw_error<InvalidGraph>(n.describe(), ": GroupNormalization takes 3 inputs and 1 output");
    const Attribute* g = n.attr("num_groups");
    if (!g || g->type != AttrType::kInt || g->i <= 0)
      throw_error<InvalidGraph>(n.describe(), ": attribute 'num_groups' must be a positive int");
    if (v >= 21) {
      const int64_t stash = int_attr(n, "stash_type", 1);
      if (stash != 1) refuse(n, v, " with stash_type " + std::to_string(stash) + " (statistics in float32 only)");
    }
    const std::string& x = n.inputs[0];
    const float eps = float_attr(n, "epsilon", 1e-5f);
    const std::string shape = add(n, "Shape", {x});
    const std::string grouped = add(n, "Reshape", {x, ints(n, {0, g->i, -1})});
    std::string scale = n.inputs[1], bias = n.inputs[2];
    if (v >= 21) {
      const std::string groups = ints(n, {g->i});
      scale = add(n, "Expand", {scalar_like(n, 1.0f, x), groups});
      bias = add(n, "Expand", {scalar_like(n, 0.0f, x), groups});
    }
    const std::string normed =
        add(n, "InstanceNormalization", {grouped, scale, bias}, {Emitter::float_attr("epsilon", eps)});
    if (v < 21) return finish(n, "Reshape", {normed, shape});
    // Per-channel scale and bias, viewed as [C, 1, ..., 1] (rank - 2 ones) against Y [N, C, ...].
    const std::string y = add(n, "Reshape", {normed, shape});
    const std::string rank = add(n, "Size", {shape});
    const std::string ones =
        add(n, "ConstantOfShape", {add(n, "Reshape", {add(n, "Sub", {rank, scalar_int(n, 2)}), ints(n, {1})})},
            {Emitter::tensor_attr("value", Tensor::from_vector<int64_t>({1}, {1}))});
    const std::string view = add(n, "Concat", {ints(n, {-1}), ones}, {Emitter::int_attr("axis", 0)});
    const std::string sc = add(n, "Reshape", {n.inputs[1], view});
    const std::string bi = add(n, "Reshape", {n.inputs[2], view});
    finish(n, "Add", {add(n, "Mul", {y, sc}), bi});
  }

  int64_t opset_;
  std::unordered_set<std::string>& names_;
  std::vector<Node>* out_ = nullptr;
};

void collect_names(const Graph& g, std::unordered_set<std::string>& names) {
  for (const auto* list : {&g.inputs, &g.outputs, &g.value_info})
    for (const auto& v : *list) names.insert(v.name);
  for (const auto& [name, t] : g.initializers) names.insert(name);
  for (const auto& n : g.nodes) {
    names.insert(n.name);
    for (const auto& o : n.outputs) names.insert(o);
    for (const auto& i : n.inputs) names.insert(i);
    for (const Graph* sg : n.subgraphs()) collect_names(*sg, names);
  }
}

// Refuses the opset-18 forms in nodes of a graph (and its subgraphs) importing ai.onnx `opset` <= 17.
void refuse_opset18_forms(const std::vector<Node>& nodes, int64_t opset);

void refuse_opset18_forms(const Graph& g, int64_t opset) { refuse_opset18_forms(g.nodes, opset); }

void refuse_opset18_forms(const std::vector<Node>& nodes, int64_t opset) {
  for (const Node& n : nodes) {
    if (const std::string what = opset18_form(n); !what.empty())
      throw_error<InvalidGraph>(n.describe(), ": ", what, " needs ai.onnx opset 18; the model imports opset ", opset);
    for (const Graph* sg : n.subgraphs()) refuse_opset18_forms(*sg, opset);
  }
}

}  // namespace lower
}  // namespace

using namespace lower;

bool axes_input_from_18(const std::string& op) {
  static const std::unordered_set<std::string> s{"ReduceL1",        "ReduceL2",   "ReduceLogSum",
                                                 "ReduceLogSumExp", "ReduceMax",  "ReduceMean",
                                                 "ReduceMin",       "ReduceProd", "ReduceSumSquare"};
  return s.count(op) != 0;
}

std::string opset18_form(const Node& n) {
  if (!n.domain.empty()) return "";
  const std::string& op = n.op_type;
  if (op == "BitwiseAnd" || op == "BitwiseOr" || op == "BitwiseXor" || op == "BitwiseNot" || op == "Col2Im") return op;
  if (op == "ScatterElements" || op == "ScatterND")
    if (const Attribute* a = n.attr("reduction"); a && a->type == AttrType::kString && (a->s == "max" || a->s == "min"))
      return op + " with reduction '" + a->s + "'";
  if (axes_input_from_18(op) && has_input(n, 1)) return op + " with axes as input 1";
  return "";
}

int64_t required_opset(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (!opset18_form(n).empty()) return 18;
    for (const Graph* sg : n.subgraphs())
      if (required_opset(*sg)) return 18;
  }
  return 0;
}

const char* unsupported_onnx_type_name(int64_t t) {
  switch (t) {
    case 17: return "float8e4m3fn";
    case 18: return "float8e4m3fnuz";
    case 19: return "float8e5m2";
    case 20: return "float8e5m2fnuz";
    case 21: return "uint4";
    case 22: return "int4";
    case 23: return "float4e2m1";
    default: return nullptr;
  }
}

void lower_new_opsets(Model& m) {
  std::unordered_set<std::string> names;
  if (m.graph) collect_names(*m.graph, names);
  for (const Function& f : m.functions)
    for (const auto& n : f.nodes) {
      names.insert(n.name);
      for (const auto& o : n.outputs) names.insert(o);
      for (const auto& i : n.inputs) names.insert(i);
    }
  for (Function& f : m.functions)
    if (auto it = f.opsets.find(""); it != f.opsets.end() && it->second > kMaxOpset) {
      if (it->second > kMaxImportedOpset)
        throw_error<NotImplemented>("function '", f.name, "' imports ai.onnx opset ", it->second,
                                    ", newer than supported (max ", kMaxImportedOpset, ")");
      Lowerer(it->second, names).nodes(f.nodes, nullptr, nullptr);
      it->second = kMaxOpset;
    } else if (it != f.opsets.end()) {
      refuse_opset18_forms(f.nodes, it->second);
    }
  if (auto it = m.opsets.find(""); it != m.opsets.end() && it->second > kMaxOpset && m.graph) {
    Lowerer(it->second, names).graph(*m.graph, nullptr);
    it->second = kMaxOpset;
  } else if (it != m.opsets.end() && m.graph) {
    refuse_opset18_forms(*m.graph, it->second);
  }
}

}  // namespace onnxtrain::ir
