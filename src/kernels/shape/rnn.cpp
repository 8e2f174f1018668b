#include "kernels/shape/rnn.h"

#include <cctype>
#include <string>
#include <utility>

namespace onnxtrain::kernels::shape {

namespace {

// Parses `activations` (count per direction, or per direction times dirs), consuming
// activation_alpha/activation_beta in order for the functions that take them; missing values use
// the defaults of the matching ONNX operators.
std::vector<RnnActivation> parse_activations(const KernelInfo& info, const std::vector<std::string>& defaults,
                                             int64_t dirs) {
  std::vector<std::string> names = info.attr_strings("activations", {});
  const size_t per_dir = defaults.size();
  if (names.empty()) {
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  } else if (names.size() == per_dir && dirs == 2) {
    const auto one = names;
    names.insert(names.end(), one.begin(), one.end());
  } else if (names.size() != per_dir * size_t(dirs)) {
    info.fail("'activations' lists ", names.size(), " functions; expected ", per_dir * size_t(dirs));
  }
  const std::vector<float> alphas = info.attr_floats("activation_alpha", {});
  const std::vector<float> betas = info.attr_floats("activation_beta", {});
  size_t ai = 0, bi = 0;
  std::vector<RnnActivation> acts;
  using K = RnnActivation::Kind;
  struct Def {
    const char* name;
    K kind;
    bool uses_alpha, uses_beta;
    float alpha, beta;
  };
  static const Def kDefs[] = {
      {"sigmoid", K::kSigmoid, false, false, 0, 0},       {"tanh", K::kTanh, false, false, 0, 0},
      {"relu", K::kRelu, false, false, 0, 0},             {"affine", K::kAffine, true, true, 1.f, 0.f},
      {"leakyrelu", K::kLeakyRelu, true, false, 0.01f, 0}, {"thresholdedrelu", K::kThresholdedRelu, true, false, 1.f, 0},
      {"scaledtanh", K::kScaledTanh, true, true, 1.f, 1.f}, {"hardsigmoid", K::kHardSigmoid, true, true, 0.2f, 0.5f},
      {"elu", K::kElu, true, false, 1.f, 0},              {"softsign", K::kSoftsign, false, false, 0, 0},
      {"softplus", K::kSoftplus, false, false, 0, 0}};
  for (const auto& name : names) {
    std::string lower = name;
    for (auto& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    const Def* def = nullptr;
    for (const auto& d : kDefs)
      if (lower == d.name) def = &d;
    if (!def) info.fail("unsupported activation function '", name, "'");
    RnnActivation a;
    a.kind = def->kind;
    a.alpha = def->alpha;
    a.beta = def->beta;
    if (def->uses_alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (def->uses_beta && bi < betas.size()) a.beta = betas[bi++];
    acts.push_back(a);
  }
  return acts;
}

// Input i, when present, has shape `want`.
void expect(const PrepareContext& ctx, int i, const char* name, const Shape& want) {
  if (ctx.has_input(size_t(i)) && ctx.input_shape(size_t(i)) != want)
    ctx.fail(name, " has shape ", shape_to_string(ctx.input_shape(size_t(i))), ", expected ", shape_to_string(want));
}

// Output i, when the node names it, has shape s.
void set_named_output(PrepareContext& ctx, int i, DType dt, Shape s) {
  if (size_t(i) < ctx.num_outputs() && ctx.has_output(size_t(i))) ctx.set_output(size_t(i), dt, std::move(s));
}

}  // namespace

RnnConfig::RnnConfig(const KernelInfo& info, RnnCell cell, bool custom) : cell_(cell) {
  const std::string dir = info.attr_string("direction", "forward");
  if (dir == "forward" || dir == "reverse") {
    dirs_ = 1;
    reverse_only_ = dir == "reverse";
  } else if (dir == "bidirectional") {
    dirs_ = 2;
  } else {
    info.fail("unknown direction '", dir, "'");
  }
  hidden_ = info.attr_int("hidden_size", -1);
  if (info.has_attr("hidden_size") && hidden_ <= 0) info.fail("hidden_size must be positive, got ", hidden_);
  if (info.has_attr("clip")) {
    clip_ = info.attr_float("clip");
    if (!(clip_ > 0.f)) info.fail("clip must be positive, got ", clip_);
  }
  layout_ = custom || info.opset() >= 14 ? info.attr_int("layout", 0) : 0;
  if (layout_ != 0 && layout_ != 1) info.fail("layout must be 0 or 1, got ", layout_);
  if (cell == RnnCell::kLstm) {
    input_forget_ = info.attr_int("input_forget", 0) != 0;
    activations_ = parse_activations(info, {"Sigmoid", "Tanh", "Tanh"}, dirs_);
  } else if (cell == RnnCell::kGru) {
    linear_before_reset_ = info.attr_int("linear_before_reset", 0) != 0;
    activations_ = parse_activations(info, {"Sigmoid", "Tanh"}, dirs_);
  } else {
    activations_ = parse_activations(info, {"Tanh"}, dirs_);
  }
}

DType RnnConfig::read_shapes(const PrepareContext& ctx) {
  for (int i : {kX, kW, kR})
    if (!ctx.has_input(size_t(i))) ctx.fail("input ", i, " (X, W and R are required) is missing");
  const DType dt = ctx.input_dtype(kX);
  require_element_type(ctx, dt, dt == DType::kFloat32 || dt == DType::kFloat64);
  const bool lstm = cell_ == RnnCell::kLstm;
  for (int i : {kW, kR, kB, kInitH, kInitC, kP})
    if ((lstm || i < kInitC) && ctx.has_input(size_t(i)) && ctx.input_dtype(size_t(i)) != dt)
      ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(size_t(i))), ", X has ", dtype_name(dt));
  const Shape& x = ctx.input_shape(kX);
  const Shape& r = ctx.input_shape(kR);
  if (x.size() != 3) ctx.fail("X must have rank 3, got ", shape_to_string(x));
  seq_ = layout_ ? x[1] : x[0];
  batch_ = layout_ ? x[0] : x[1];
  input_ = x[2];
  if (r.size() != 3) ctx.fail("R must have rank 3, got ", shape_to_string(r));
  H_ = r[2];
  if (hidden_ >= 0 && hidden_ != H_) ctx.fail("hidden_size is ", hidden_, " but R has shape ", shape_to_string(r));
  const int64_t gh = gates() * H_;
  expect(ctx, kW, "W", {dirs_, gh, input_});
  expect(ctx, kR, "R", {dirs_, gh, H_});
  expect(ctx, kB, "B", {dirs_, 2 * gh});
  expect(ctx, kInitH, "initial_h", state_shape());
  if (lstm) {
    expect(ctx, kInitC, "initial_c", state_shape());
    expect(ctx, kP, "P", {dirs_, 3 * H_});
  }
  if (ctx.has_input(kSeqLens)) {
    const DType lt = ctx.input_dtype(kSeqLens);
    if (lt != DType::kInt32 && lt != DType::kInt64)
      ctx.fail("sequence_lens must be int32, got ", dtype_name(lt));
    expect(ctx, kSeqLens, "sequence_lens", {batch_});
  }
  // Every buffer holds at most seq * batch rows of (gates + 2) * H values per direction (the
  // projected gates, the training reserve, the gate gradients). X bounds seq * batch only when
  // input_size > 0: with X [2^52, 1, 0] these sizes overflowed int64 (a workspace sized by the
  // wrapped product, then a heap overflow). Within 2^52 elements no product below overflows.
  int64_t bound;
  if (!checked_numel(Shape{dirs_, seq_, batch_, (gates() + 2) * H_}, &bound))
    ctx.fail("X ", shape_to_string(x), " and hidden size ", H_, " need buffers of more than 2^52 elements");
  return dt;
}

void RnnConfig::set_forward_outputs(PrepareContext& ctx, DType dt, bool train) const {
  const size_t reserve_out = rnn_reserve_output(cell_);
  if (cell_ != RnnCell::kLstm && (ctx.has_input(kInitC) || ctx.has_input(kP)))
    ctx.fail("has more inputs than the operator takes");
  set_named_output(ctx, kY, dt, y_shape());
  set_named_output(ctx, kYh, dt, state_shape());
  if (cell_ == RnnCell::kLstm) set_named_output(ctx, kYc, dt, state_shape());
  if (train) set_named_output(ctx, int(reserve_out), dt, {dirs_ * reserve_per_dir()});
  else if (ctx.num_outputs() > reserve_out) ctx.fail("has more outputs than the operator produces");
}

void RnnConfig::set_grad_outputs(PrepareContext& ctx, DType dt) const {
  const RnnGradInputs in = rnn_grad_inputs(cell_);
  if (!ctx.has_input(in.reserve)) ctx.fail("the training reserve (input ", in.reserve, ") is missing");
  for (size_t i = in.reserve; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input_dtype(i) != dt)
      ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(i)), ", X has ", dtype_name(dt));
  expect(ctx, int(in.reserve), "the training reserve", {dirs_ * reserve_per_dir()});
  expect(ctx, int(in.dy), "dY", y_shape());
  expect(ctx, int(in.dyh), "dY_h", state_shape());
  if (cell_ == RnnCell::kLstm) expect(ctx, int(in.dyc), "dY_c", state_shape());
  const int64_t gh = gates() * H_;
  set_named_output(ctx, kDX, dt, ctx.input_shape(kX));
  set_named_output(ctx, kDW, dt, ctx.input_shape(kW));
  set_named_output(ctx, kDR, dt, ctx.input_shape(kR));
  set_named_output(ctx, kDB, dt, {dirs_, 2 * gh});
  set_named_output(ctx, kDH0, dt, state_shape());
  if (cell_ == RnnCell::kLstm) {
    set_named_output(ctx, kDC0, dt, state_shape());
    set_named_output(ctx, kDP, dt, {dirs_, 3 * H_});
  }
}

}  // namespace onnxtrain::kernels::shape
