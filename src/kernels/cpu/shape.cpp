// Shape manipulation: views (Reshape, ...) and shape/constant producers.
//   Reshape: Y = X viewed with shape from input 1 (0 copies the input dim unless allowzero, -1 infers)
//   Constant: Y = the `value*` attribute
#include "kernels/cpu/common.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels {

namespace {

// Output shape of Reshape (opset 5+): `spec` may hold one -1 and (unless allowzero) zeros that
// copy the input dimension.
template <class Ctx>
Shape reshape_target(const Ctx& ctx, const Shape& in, const std::vector<int64_t>& spec, bool allowzero) {
  Shape out(spec.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == -1) {
      if (infer >= 0) ctx.fail("shape ", shape_to_string(spec), " has more than one -1");
      infer = int(i);
      continue;
    }
    if (d == 0 && !allowzero) {
      if (i >= in.size()) ctx.fail("shape ", shape_to_string(spec), " copies dimension ", i, " of a rank-", in.size(), " input");
      d = in[i];
    }
    if (d < 0) ctx.fail("shape ", shape_to_string(spec), " has invalid dimension ", d);
    out[i] = d;
    if (__builtin_mul_overflow(known, d, &known)) ctx.fail("shape ", shape_to_string(spec), " overflows");
  }
  const int64_t total = shape_numel(in);
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      ctx.fail("cannot reshape ", shape_to_string(in), " to ", shape_to_string(spec));
    out[size_t(infer)] = total / known;
  } else if (known != total) {
    ctx.fail("cannot reshape ", shape_to_string(in), " (", total, " elements) to ", shape_to_string(out));
  }
  return out;
}

class ReshapeKernel final : public Kernel {
 public:
  explicit ReshapeKernel(const KernelInfo& info) : allowzero_(info.attr_int("allowzero", 0) != 0) {}
  void prepare(PrepareContext& ctx) override {
    const Tensor* spec = ctx.input_value(1);
    if (!spec) {  // shape known only at run time
      ctx.set_output_dynamic(0, ctx.input_dtype(0));
      return;
    }
    if (spec->rank() != 1) ctx.fail("shape input must be 1-D, got ", spec->describe());
    ctx.set_output_alias(0, 0, reshape_target(ctx, ctx.input_shape(0), read_int_list(*spec), allowzero_));
  }
  void run(RunContext& ctx) override {
    if (!ctx.output_aliases_input(0, 0)) ctx.output(0).copy_from(ctx.input(0));
  }

 private:
  bool allowzero_;
};

class ConstantKernel final : public Kernel {
 public:
  explicit ConstantKernel(const KernelInfo& info) {
    const ir::Node& n = info.node();
    if (n.attrs.size() != 1) info.fail("expects exactly one value attribute, got ", n.attrs.size());
    const ir::Attribute& a = n.attrs[0];
    if (a.name == "value") {
      value_ = info.attr_tensor("value")->clone();
    } else if (a.name == "value_float") {
      value_ = Tensor::scalar<float>(info.attr_float("value_float"));
    } else if (a.name == "value_floats") {
      auto v = info.attr_floats("value_floats", {});
      value_ = Tensor::from_vector<float>({int64_t(v.size())}, v);
    } else if (a.name == "value_int") {
      value_ = Tensor::scalar<int64_t>(info.attr_int("value_int"));
    } else if (a.name == "value_ints") {
      auto v = info.attr_ints("value_ints");
      value_ = Tensor::from_vector<int64_t>({int64_t(v.size())}, v);
    } else if (a.name == "value_string") {
      value_ = Tensor::scalar<std::string>(info.attr_string("value_string"));
    } else if (a.name == "value_strings") {
      auto v = info.attr_strings("value_strings", {});
      value_ = Tensor::from_vector<std::string>({int64_t(v.size())}, v);
    } else if (a.name == "sparse_value") {
      throw_error<NotImplemented>(n.describe(), ": sparse_value is not supported");
    } else {
      info.fail("unknown attribute '", a.name, "'");
    }
  }
  void prepare(PrepareContext& ctx) override { ctx.set_output(0, value_.dtype(), value_.shape()); }
  void run(RunContext& ctx) override { ctx.output(0).copy_from(value_); }

 private:
  Tensor value_;
};

}  // namespace

void register_shape(KernelRegistry& r) {
  r.add<ReshapeKernel>("Reshape", 5, kMaxOpsetAll);
  r.add<ConstantKernel>("Constant", 1, kMaxOpsetAll);
}

}  // namespace onnxtrain::kernels
