#include "train/mixed_precision.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "ir/emitter.h"
#include "ir/infer.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::train {

namespace {

// Element type of a value of the main graph, kUndefined when unknown.
DType elem_type(const ir::Graph& g, const std::string& name) {
  if (const Tensor* t = g.initializer(name)) return t->dtype();
  for (const auto* list : {&g.inputs, &g.value_info, &g.outputs})
    for (const auto& vi : *list)
      if (vi.name == name && vi.type.kind == ir::TypeInfo::Kind::kTensor) return vi.type.elem;
  return DType::kUndefined;
}

ir::Attribute to_attr(DType dt) { return ir::Emitter::int_attr("to", int64_t(dt)); }  // DType = ONNX's codes

}  // namespace

ir::Model autocast(const ir::Model& m, DType low) {
  if (low != DType::kBFloat16 && low != DType::kFloat16)
    throw_error<InvalidArgument>("autocast: ", dtype_name(low), " is not bfloat16 or float16");
  ir::Model r = m;
  r.graph = std::make_shared<ir::Graph>(*m.graph);
  ir::infer_types(r);
  ir::Graph& g = *r.graph;
  std::set<std::string> names;
  for (const auto& n : g.nodes) names.insert(n.name), names.insert(n.outputs.begin(), n.outputs.end());
  for (const auto& vi : g.inputs) names.insert(vi.name);
  for (const auto& [n, t] : g.initializers) names.insert(n);
  auto fresh = [&](const std::string& base) {
    std::string s = base;
    for (int k = 1; names.count(s); ++k) s = base + "_" + std::to_string(k);
    names.insert(s);
    return s;
  };
  const std::string suffix = low == DType::kBFloat16 ? "_bf16" : "_fp16";
  std::map<std::string, std::string> as_bf16;  // float32 value -> its low-precision cast (one per value)
  std::vector<ir::Node> out;
  for (ir::Node n : g.nodes) {
    const bool candidate =
        (n.domain.empty() && std::find(std::begin(kAutocastOps), std::end(kAutocastOps), n.op_type) != std::end(kAutocastOps)) ||
        (n.domain == ops::kDomain && n.op_type == "FusedMatMul");  // train/fusion.h's linear layers
    bool all_f32 = candidate && !n.outputs.empty() && !n.outputs[0].empty();
    // A Conv with one input channel per group (a first layer on one-channel images, depthwise)
    // stays float32: little arithmetic per byte, and oneDNN's bf16 weight gradient ran 2x slower
    // than float32 there ([64, 1, 28, 28] with 16 3x3 filters).
    if (all_f32 && low == DType::kBFloat16 && n.op_type == "Conv" && n.inputs.size() > 1)
      if (const Tensor* w = g.initializer(n.inputs[1]); w && w->rank() > 1 && w->shape()[1] == 1) all_f32 = false;
    for (const auto& in : n.inputs) all_f32 = all_f32 && (in.empty() || elem_type(g, in) == DType::kFloat32);
    if (!all_f32) {
      out.push_back(std::move(n));
      continue;
    }
    for (auto& in : n.inputs) {
      if (in.empty()) continue;
      auto it = as_bf16.find(in);
      if (it == as_bf16.end()) {
        ir::Node c;
        c.op_type = "Cast";
        c.name = fresh("autocast_" + in);
        c.inputs = {in};
        c.outputs = {fresh(in + suffix)};
        c.attrs = {to_attr(low)};
        it = as_bf16.emplace(in, c.outputs[0]).first;
        out.push_back(std::move(c));
      }
      in = it->second;
    }
    const std::string y = n.outputs[0];
    n.outputs[0] = fresh(y + suffix);
    ir::Node back;
    back.op_type = "Cast";
    back.name = fresh("autocast_" + y);
    back.inputs = {n.outputs[0]};
    back.outputs = {y};
    back.attrs = {to_attr(DType::kFloat32)};
    out.push_back(std::move(n));
    out.push_back(std::move(back));
  }
  g.nodes = std::move(out);
  ir::infer_types(r);
  return r;
}

std::pair<std::string, std::string> add_loss_scale(ir::Model& m, const std::string& loss, const std::string& input) {
  ir::Graph& g = *m.graph;
  ir::Emitter e(m, g);
  e.set_node_prefix("loss_scale_");
  if (elem_type(g, loss) == DType::kUndefined) ir::infer_types(m);
  const DType lt = elem_type(g, loss);
  if (lt != DType::kFloat32 && lt != DType::kFloat64 && lt != DType::kFloat16 && lt != DType::kBFloat16)
    throw_error<InvalidArgument>("loss scaling: the loss '", loss, "' is not a float tensor");
  const std::string name = e.reserve(input) ? input : e.fresh(input);
  const ir::TypeInfo type = ir::TypeInfo::tensor(DType::kFloat32, {1});
  g.inputs.push_back(ir::ValueInfo{name, type, ""});
  e.set_type(name, type);
  // [1] * loss (a scalar) would broadcast to [1]: reshape the scale to the loss's rank-0 shape.
  const std::string scale = e.reshape(name, e.ints({}));
  const std::string out = e.add("Mul", {loss, lt == DType::kFloat32 ? scale : e.cast(scale, lt)}, {}, loss + "_scaled");
  g.outputs.push_back(ir::ValueInfo{out, ir::TypeInfo::tensor(lt, {}), ""});
  return {name, out};
}

}  // namespace onnxtrain::train
