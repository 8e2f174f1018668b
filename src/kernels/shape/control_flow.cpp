#include "kernels/shape/control_flow.h"

namespace onnxtrain::kernels::shape {

void check_if_branches(const KernelInfo& info, const ir::Graph& then_branch, const ir::Graph& else_branch) {
  const size_t n = info.node().outputs.size();
  for (const ir::Graph* b : {&then_branch, &else_branch})
    if (b->outputs.size() != n)
      info.fail(b == &then_branch ? "then_branch" : "else_branch", " has ", b->outputs.size(),
                " outputs, the node has ", n);
  for (const ir::Graph* b : {&then_branch, &else_branch})
    if (b->inputs.size() != 0) info.fail("a branch of If takes no inputs, got ", b->inputs.size());
}

void check_if_cond(const PrepareContext& ctx) {
  if (!ctx.has_input(0)) ctx.fail("cond is missing");
  if (ctx.input_kind(0) != Value::Kind::kTensor || ctx.input_dtype(0) != DType::kBool)
    ctx.fail("cond must be a bool tensor, got ", dtype_name(ctx.input_dtype(0)));
  if (shape_numel(ctx.input_shape(0)) != 1)
    ctx.fail("cond must hold one element, got shape ", shape_to_string(ctx.input_shape(0)));
}

LoopCounts loop_counts(const KernelInfo& info, const ir::Graph& body) {
  const auto& n = info.node();
  if (n.inputs.size() < 2) info.fail("Loop takes M and cond (possibly empty) first, got ", n.inputs.size(), " inputs");
  LoopCounts c;
  c.carried = n.inputs.size() - 2;
  for (size_t i = 2; i < n.inputs.size(); ++i)
    if (n.inputs[i].empty()) info.fail("loop-carried input ", i - 2, " has no name");
  if (body.inputs.size() != c.carried + 2)
    info.fail("body has ", body.inputs.size(), " inputs; expected 2 + ", c.carried, " loop-carried values");
  if (body.outputs.size() < c.carried + 1)
    info.fail("body has ", body.outputs.size(), " outputs; expected at least 1 + ", c.carried);
  c.scans = body.outputs.size() - 1 - c.carried;
  if (n.outputs.size() != c.carried + c.scans)
    info.fail("the node has ", n.outputs.size(), " outputs; its body yields ", c.carried, " loop-carried and ", c.scans,
              " scan outputs");
  return c;
}

void check_loop_inputs(const PrepareContext& ctx) {
  if (ctx.has_input(0)) {
    const DType dt = ctx.input_dtype(0);
    if (ctx.input_kind(0) != Value::Kind::kTensor || (dt != DType::kInt64 && dt != DType::kInt32) ||
        shape_numel(ctx.input_shape(0)) != 1)
      ctx.fail("M must be a single int64, got ", dtype_name(dt), shape_to_string(ctx.input_shape(0)));
  }
  if (ctx.has_input(1) && (ctx.input_kind(1) != Value::Kind::kTensor || ctx.input_dtype(1) != DType::kBool ||
                           shape_numel(ctx.input_shape(1)) != 1))
    ctx.fail("cond must be a single bool, got ", dtype_name(ctx.input_dtype(1)), shape_to_string(ctx.input_shape(1)));
}

void check_sequence_map(const KernelInfo& info, const ir::Graph& body) {
  const auto& n = info.node();
  if (n.inputs.empty()) info.fail("takes at least one input (a sequence)");
  if (body.inputs.size() != n.inputs.size())
    info.fail("the body has ", body.inputs.size(), " inputs, the node ", n.inputs.size());
  if (body.outputs.size() != n.outputs.size())
    info.fail("the body has ", body.outputs.size(), " outputs, the node ", n.outputs.size());
}

void check_sequence_map_inputs(const PrepareContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i)) ctx.fail("input ", i, " is missing (or an empty optional)");
  if (ctx.input_kind(0) != Value::Kind::kSequence) ctx.fail("input 0 must be a sequence of tensors, got a tensor");
}

void subgraph_outputs_dynamic(PrepareContext& ctx, const ir::Graph& g, size_t first_graph_output) {
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (!ctx.has_output(i)) continue;
    const size_t go = first_graph_output + i;
    const DType dt = go < g.outputs.size() && g.outputs[go].type.kind == ir::TypeInfo::Kind::kTensor
                         ? g.outputs[go].type.elem
                         : DType::kUndefined;
    ctx.set_output_dynamic(i, dt);
  }
}

}  // namespace onnxtrain::kernels::shape
