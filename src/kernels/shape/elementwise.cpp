#include "kernels/shape/elementwise.h"

#include <map>
#include <string>

namespace onnxtrain::kernels::shape {

namespace {

bool is_numeric(DType dt) { return dtype_is_float(dt) || dtype_is_integer(dt); }

}  // namespace


void check_same_type(const PrepareContext& ctx, size_t i, size_t j) {
  if (ctx.input_dtype(j) != ctx.input_dtype(i))
    ctx.fail("inputs have different element types (", dtype_name(ctx.input_dtype(i)), " and ",
             dtype_name(ctx.input_dtype(j)), ")");
}

BinaryAttrs read_binary_attrs(const KernelInfo& info, Bcast mode) {
  BinaryAttrs at;
  at.mode = mode;
  if (mode == Bcast::kNumpy && info.opset() < 7) at.mode = Bcast::kLegacy;
  if (mode == Bcast::kUnidirectional && info.opset() < 7) at.mode = Bcast::kChannel;
  at.legacy_broadcast = info.attr_int("broadcast", 0) != 0;
  at.legacy_axis = info.attr_int("axis", INT64_MIN);
  return at;
}

BinaryGeom binary_geometry(const PrepareContext& ctx, const BinaryAttrs& at) {
  BinaryGeom g{ctx.input_shape(0), ctx.input_shape(1), {}};
  const Shape& sa = g.a;
  Shape& sb = g.b;
  if (at.mode == Bcast::kLegacy) {
    // Opset <= 6: without broadcast=1 the shapes must match; with it, B's dims line up with A's
    // from `axis` (default: trailing), i.e. B gets trailing 1s.
    if (!at.legacy_broadcast && sa != sb)
      ctx.fail("shapes ", shape_to_string(sa), " and ", shape_to_string(sb),
               " differ and the broadcast attribute is not set (opset < 7)");
    const int64_t ra = int64_t(sa.size()), rb = int64_t(sb.size());
    if (rb > ra) ctx.fail("B has rank ", rb, ", more than A's ", ra, " (legacy broadcasting)");
    const int64_t axis = at.legacy_axis == INT64_MIN ? ra - rb : normalize_axis(ctx, at.legacy_axis, ra);
    if (axis + rb > ra) ctx.fail("B of shape ", shape_to_string(sb), " does not fit A at axis ", axis);
    sb.resize(size_t(ra - axis), 1);
  }
  // PRelu-1/6: "if Slope is of size 1, the value is shared across channels", otherwise one value per
  // channel (axis 1), as PyTorch's PReLU(num_parameters=C) exported at those opsets.
  if (at.mode == Bcast::kChannel && sb.size() == 1 && sa.size() >= 2 && sb[0] == sa[1] && sb[0] != 1)
    sb.resize(sa.size() - 1, 1);
  if (!broadcast_shapes({sa, sb}, &g.output))
    ctx.fail("shapes ", shape_to_string(sa), " and ", shape_to_string(ctx.input_shape(1)), " cannot be broadcast");
  if (at.mode != Bcast::kNumpy && g.output != sa)
    ctx.fail("shape ", shape_to_string(ctx.input_shape(1)), " cannot be broadcast to ", shape_to_string(sa));
  return g;
}

void check_pow_types(const PrepareContext& ctx) {
  require_element_type(ctx, ctx.input_dtype(0), is_numeric(ctx.input_dtype(0)));
  require_element_type(ctx, ctx.input_dtype(1), is_numeric(ctx.input_dtype(1)));
}

bool read_bitshift_left(const KernelInfo& info) {
  const std::string dir = info.attr_string("direction");
  if (dir != "LEFT" && dir != "RIGHT") info.fail("direction must be LEFT or RIGHT, got '", dir, "'");
  return dir == "LEFT";
}

float read_celu_alpha(const KernelInfo& info) {
  const float alpha = info.attr_float("alpha", 1.0f);
  if (alpha == 0.0f) info.fail("alpha must not be 0");
  return alpha;
}

void check_variadic_inputs(const PrepareContext& ctx) {
  const size_t n = ctx.num_inputs();
  if (n == 0) ctx.fail("needs at least one input");
  for (size_t i = 0; i < n; ++i) {
    if (!ctx.has_input(i)) ctx.fail("input ", i, " is missing");
    check_same_type(ctx, 0, i);
  }
}

VariadicGeom variadic_geometry(const PrepareContext& ctx) {
  VariadicGeom g;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) g.inputs.push_back(ctx.input_shape(i));
  if (!broadcast_shapes(g.inputs, &g.output)) {
    std::string s;
    for (const auto& sh : g.inputs) s.append(s.empty() ? "" : " ").append(shape_to_string(sh));
    ctx.fail("shapes ", s, " cannot be broadcast");
  }
  return g;
}

Shape where_shape(const PrepareContext& ctx) {
  if (ctx.input_dtype(0) != DType::kBool) ctx.fail("condition must be bool, got ", dtype_name(ctx.input_dtype(0)));
  check_same_type(ctx, 1, 2);
  require_element_type(ctx, ctx.input_dtype(1), dtype_supported(ctx.input_dtype(1)));
  Shape out;
  if (!broadcast_shapes({ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)}, &out))
    ctx.fail("shapes ", shape_to_string(ctx.input_shape(0)), ", ", shape_to_string(ctx.input_shape(1)), " and ",
             shape_to_string(ctx.input_shape(2)), " cannot be broadcast");
  return out;
}

ClipAttrs read_clip_attrs(const KernelInfo& info) {
  ClipAttrs at;
  at.from_attrs = info.opset() < 11;
  if (at.from_attrs) {
    at.has_min = info.has_attr("min");
    at.has_max = info.has_attr("max");
    at.min = info.attr_float("min", 0.0f);
    at.max = info.attr_float("max", 0.0f);
  }
  return at;
}

void check_clip(const PrepareContext& ctx) {
  const DType dt = ctx.input_dtype(0);
  require_element_type(ctx, dt, is_numeric(dt));
  for (size_t i = 1; i < 3; ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.input_dtype(i) != dt)
      ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(i)), ", expected ", dtype_name(dt));
    if (shape_numel(ctx.input_shape(i)) != 1)
      ctx.fail("input ", i, " must be a scalar, got shape ", shape_to_string(ctx.input_shape(i)));
  }
}

namespace {

DType dtype_from_name(const KernelInfo& info, const std::string& name) {
  static const std::map<std::string, DType> names = {
      {"FLOAT", DType::kFloat32}, {"UINT8", DType::kUInt8},    {"INT8", DType::kInt8},
      {"UINT16", DType::kUInt16}, {"INT16", DType::kInt16},    {"INT32", DType::kInt32},
      {"INT64", DType::kInt64},   {"STRING", DType::kString},  {"BOOL", DType::kBool},
      {"FLOAT16", DType::kFloat16}, {"DOUBLE", DType::kFloat64}, {"UINT32", DType::kUInt32},
      {"UINT64", DType::kUInt64}, {"BFLOAT16", DType::kBFloat16}};
  auto it = names.find(name);
  if (it == names.end()) info.fail("unknown type name '", name, "' in attribute 'to'");
  return it->second;
}

}  // namespace

DType read_cast_to(const KernelInfo& info) {
  DType to;
  const ir::Attribute* a = info.node().attr("to");
  if (a && a->type == ir::AttrType::kString) to = dtype_from_name(info, a->s);
  else to = static_cast<DType>(info.attr_int("to"));
  if (!dtype_supported(to))
    throw_error<NotImplemented>(info.node().describe(), ": cast to element type ", dtype_name(to), " is not supported");
  return to;
}

DType cast_target(const PrepareContext& ctx, bool like, DType to) {
  if (like) to = ctx.input_dtype(1);
  require_element_type(ctx, ctx.input_dtype(0), dtype_supported(ctx.input_dtype(0)));
  require_element_type(ctx, to, dtype_supported(to));
  return to;
}

}  // namespace onnxtrain::kernels::shape
