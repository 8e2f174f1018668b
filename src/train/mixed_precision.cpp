#include "train/mixed_precision.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "ir/emitter.h"
#include "ir/onnx_io.h"

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

ir::Model autocast_bf16(const ir::Model& m) {
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
  std::map<std::string, std::string> as_bf16;  // float32 value -> its bfloat16 cast (one per value)
  std::vector<ir::Node> out;
  for (ir::Node n : g.nodes) {
    const bool candidate = n.domain.empty() && std::find(std::begin(kBf16Ops), std::end(kBf16Ops), n.op_type) != std::end(kBf16Ops);
    bool all_f32 = candidate && !n.outputs.empty() && !n.outputs[0].empty();
    // A Conv with one input channel per group (a first layer on one-channel images, depthwise)
    // stays float32: little arithmetic per byte, and oneDNN's bf16 weight gradient ran 2x slower
    // than float32 there ([64, 1, 28, 28] with 16 3x3 filters).
    if (all_f32 && n.op_type == "Conv" && n.inputs.size() > 1)
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
        c.outputs = {fresh(in + "_bf16")};
        c.attrs = {to_attr(DType::kBFloat16)};
        it = as_bf16.emplace(in, c.outputs[0]).first;
        out.push_back(std::move(c));
      }
      in = it->second;
    }
    const std::string y = n.outputs[0];
    n.outputs[0] = fresh(y + "_bf16");
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

}  // namespace onnxtrain::train
