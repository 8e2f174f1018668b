// The internal operators (com.onnxtrain: gradient kernels, optimizers, accumulation, clipping,
// loss scaling; com.microsoft.YieldOp) as a hand-made user model reaches them through
// InferenceSession: any input count, element type, shape, attribute or index value, inputs that
// disagree with each other, outputs left unnamed. Each bad input is an error naming the node,
// raised before memory is touched; each well-formed call computes what a naive double-precision
// reference says.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "ir/onnx_io.h"
#include "onnxtrain/error.h"
#include "onnxtrain/session.h"
#include "test_util.h"

using namespace onnxtrain;

namespace {

constexpr const char* kNodeName = "hostile";
constexpr const char* kTraining = "com.onnxtrain";

// One input of the node: a graph input fed at run time, an initializer (constant), or omitted
// (an undefined tensor).
struct Arg {
  Tensor t;
  bool constant = false;
  std::vector<Tensor> sequence;  // with t undefined and `is_sequence`: a fed seq(tensor)
  bool is_sequence = false;
  bool present() const { return t.defined() || is_sequence; }
};
Arg fed(Tensor t) { return {std::move(t), false, {}, false}; }
Arg constant(Tensor t) { return {std::move(t), true, {}, false}; }
Arg omitted() { return {}; }
Arg fed_sequence(std::vector<Tensor> ts) { return {Tensor(), false, std::move(ts), true}; }

// A model of one node named kNodeName; outputs named "" are left unnamed (every named one is a
// graph output).
struct OneNode {
  std::string op, domain = kTraining;
  std::vector<Arg> inputs;
  std::vector<std::string> outputs = {"y0"};
  std::vector<ir::Attribute> attrs;
  int64_t opset = 17;

  std::string bytes() const {
    ir::Model m;
    m.opsets = {{"", opset}};
    if (!domain.empty()) m.opsets[domain] = 1;
    m.graph = std::make_shared<ir::Graph>();
    ir::Node n;
    n.op_type = op;
    n.domain = domain;
    n.name = kNodeName;
    n.attrs = attrs;
    n.outputs = outputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Arg& a = inputs[i];
      if (!a.present()) {
        n.inputs.push_back("");
        continue;
      }
      const std::string name = ot_test::numbered("x", i);
      n.inputs.push_back(name);
      if (a.is_sequence) {
        ir::TypeInfo seq;
        seq.kind = ir::TypeInfo::Kind::kSequence;
        seq.inner = std::make_shared<ir::TypeInfo>(ir::TypeInfo::tensor(a.sequence.at(0).dtype()));
        m.graph->inputs.push_back(ir::ValueInfo{name, seq, ""});
      } else if (a.constant) {
        m.graph->initializers.emplace_back(name, a.t);
      } else {
        m.graph->inputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(a.t.dtype(), a.t.shape()), ""});
      }
    }
    for (const auto& o : outputs)
      if (!o.empty()) m.graph->outputs.push_back(ir::ValueInfo{o, {}, ""});
    m.graph->nodes.push_back(n);
    return ir::serialize_model(m);
  }

  /// Loads and runs the model; returns the named outputs.
  std::vector<Tensor> run() const {
    const std::string b = bytes();
    InferenceSession s(b.data(), b.size());
    std::vector<std::pair<std::string, Value>> feeds;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Arg& a = inputs[i];
      if (a.is_sequence) {
        Value v;
        v.kind = Value::Kind::kSequence;
        v.sequence = a.sequence;
        v.elem = a.sequence.at(0).dtype();
        feeds.emplace_back(ot_test::numbered("x", i), std::move(v));
      } else if (a.t.defined() && !a.constant) {
        feeds.emplace_back(ot_test::numbered("x", i), Value::of(a.t));
      }
    }
    std::vector<Tensor> r;
    for (auto& v : s.run_values({}, feeds)) r.push_back(std::move(v.tensor));
    return r;
  }
};

// f throws an onnxtrain error of `code` naming the node, with every fragment in its message.
void expect_error(const std::function<void()>& f, ErrorCode code, const std::vector<std::string>& fragments) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(int(e.code()), int(code)) << m;
    EXPECT_NE(m.find(kNodeName), std::string::npos) << m;
    for (const auto& frag : fragments) EXPECT_NE(m.find(frag), std::string::npos) << "'" << frag << "' in: " << m;
    return;
  }
  ADD_FAILURE() << "no error (expected code " << int(code) << ")";
}

// Running `node` is refused (see expect_error).
void expect_refused(const OneNode& node, ErrorCode code, const std::vector<std::string>& fragments) {
  SCOPED_TRACE(node.op);
  expect_error([&] { node.run(); }, code, fragments);
}

Tensor f32(const Shape& s, std::mt19937& rng, double lo = -1, double hi = 1) {
  return ot_test::random_tensor(DType::kFloat32, s, rng, lo, hi);
}
Tensor i64(const Shape& s, const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(s, v); }
Tensor shape_tensor(const std::vector<int64_t>& v) { return i64({int64_t(v.size())}, v); }

}  // namespace

// ---------------------------------------------------------------- problems found (each crashed or
// misbehaved before its fix)

// With input_size 0, X [seq, batch, 0] holds no elements whatever seq and batch are (their product
// may reach 2^52): seq * batch * gates * H overflowed int64 in the workspace and training-reserve
// sizes, and the projection wrote far past the wrapped workspace (a segfault). For GRU with
// H = 1024, seq * batch * (3 + 1) * H = 2^64 wraps to 0: GRUGrad took an empty reserve as right.
TEST(InternalOpsBadInput, RecurrentBuffersPastInt64AreRefused) {
  std::mt19937 rng(1);
  const int64_t seq = int64_t(1) << 52;
  const Tensor x = Tensor::zeros(DType::kFloat32, {seq, 1, 0});
  {
    OneNode n;  // the backward with an empty reserve
    n.op = "GRUGrad";
    n.inputs = {fed(x), fed(Tensor::zeros(DType::kFloat32, {1, 3072, 0})), fed(f32({1, 3072, 1024}, rng, -0.01, 0.01)),
                omitted(), omitted(), omitted(), fed(Tensor::zeros(DType::kFloat32, {0}))};
    n.outputs = {"dx", "", "dr"};
    expect_refused(n, ErrorCode::kInvalidArgument, {"2^52"});
  }
  {
    OneNode n;  // the standard operator: Y_h alone is small
    n.op = "RNN";
    n.domain = "";
    n.inputs = {fed(x), fed(Tensor::zeros(DType::kFloat32, {1, 2048, 0})), fed(f32({1, 2048, 2048}, rng, -0.01, 0.01))};
    n.outputs = {"", "yh"};
    expect_refused(n, ErrorCode::kInvalidArgument, {"2^52"});
  }
  {
    OneNode n;  // the training forward: its reserve's size wrapped
    n.op = "RNNTrain";
    n.inputs = {fed(x), fed(Tensor::zeros(DType::kFloat32, {1, 2048, 0})), fed(f32({1, 2048, 2048}, rng, -0.01, 0.01))};
    n.outputs = {"", "", "reserve"};
    expect_refused(n, ErrorCode::kInvalidArgument, {"2^52"});
  }
}

// The same recurrence with input_size 0 and a sane length still computes: h_t = tanh(Wb + Rb +
// R h_{t-1}) against a double-precision reference.
TEST(InternalOpsBadInput, RecurrenceWithoutInputsStillComputes) {
  std::mt19937 rng(2);
  const int64_t seq = 4, batch = 2, H = 3;
  const Tensor r = f32({1, H, H}, rng), b = f32({1, 2 * H}, rng);
  OneNode n;
  n.op = "RNN";
  n.domain = "";
  n.inputs = {fed(Tensor::zeros(DType::kFloat32, {seq, batch, 0})), fed(Tensor::zeros(DType::kFloat32, {1, H, 0})), fed(r),
              fed(b)};
  n.outputs = {"y", "yh"};
  const auto out = n.run();
  const auto rv = ot_test::to_double(r), bv = ot_test::to_double(b);
  std::vector<double> h(size_t(batch * H), 0.0), y;
  for (int64_t t = 0; t < seq; ++t) {
    std::vector<double> next(h.size());
    for (int64_t k = 0; k < batch; ++k)
      for (int64_t u = 0; u < H; ++u) {
        double z = bv[size_t(u)] + bv[size_t(H + u)];
        for (int64_t v = 0; v < H; ++v) z += rv[size_t(u * H + v)] * h[size_t(k * H + v)];
        next[size_t(k * H + u)] = std::tanh(z);
      }
    h = next;
    y.insert(y.end(), h.begin(), h.end());
  }
  EXPECT_TRUE(ot_test::all_close(out[0], {seq, 1, batch, H}, y, 1e-5, 1e-6));
  EXPECT_TRUE(ot_test::all_close(out[1], {1, batch, H}, h, 1e-5, 1e-6));
}

// DropoutGrad read element 0 of its ratio and training_mode inputs whatever their shapes (an
// empty training_mode: a read past the buffer), and divided by 1 - ratio for any ratio (1: inf).
TEST(InternalOpsBadInput, DropoutGradScalarInputs) {
  std::mt19937 rng(3);
  const Tensor dy = f32({2, 3}, rng), mask = ot_test::random_tensor(DType::kBool, {2, 3}, rng);
  auto dropout_grad = [&](Arg ratio, Arg training) {
    OneNode n;
    n.op = "DropoutGrad";
    n.inputs = {fed(dy), fed(mask), std::move(ratio), std::move(training)};
    return n;
  };
  const Tensor yes = Tensor::scalar<bool>(true);
  expect_refused(dropout_grad(constant(Tensor::scalar<float>(0.5f)), fed(Tensor::zeros(DType::kBool, {0}))),
                 ErrorCode::kInvalidArgument, {"training_mode must be a bool scalar", "[0]"});
  expect_refused(dropout_grad(fed(Tensor::zeros(DType::kFloat32, {0})), fed(yes)), ErrorCode::kInvalidArgument,
                 {"ratio must be a float scalar"});
  expect_refused(dropout_grad(fed(Tensor::from_vector<float>({2}, {0.5f, 0.5f})), fed(yes)), ErrorCode::kInvalidArgument,
                 {"ratio must be a float scalar"});
  expect_refused(dropout_grad(fed(Tensor::scalar<float>(1.0f)), fed(yes)), ErrorCode::kInvalidArgument,
                 {"ratio must be in [0, 1)"});
  expect_refused(dropout_grad(constant(Tensor::scalar<float>(-0.5f)), fed(yes)), ErrorCode::kInvalidArgument,
                 {"ratio must be in [0, 1)"});
  OneNode attr = dropout_grad(omitted(), omitted());
  attr.inputs.resize(2);
  attr.attrs = {ot_test::attr_float("ratio", 1.5f)};
  expect_refused(attr, ErrorCode::kInvalidArgument, {"ratio must be in [0, 1)"});

  // Well-formed: dX = dY mask / (1 - ratio) in training, dY otherwise.
  const auto g = ot_test::to_double(dy), mk = ot_test::to_double(mask);
  for (bool training : {true, false}) {
    std::vector<double> want(g.size());
    for (size_t i = 0; i < g.size(); ++i) want[i] = training ? g[i] * mk[i] / (1 - 0.25) : g[i];
    const auto out = dropout_grad(fed(Tensor::scalar<float>(0.25f)), fed(Tensor::scalar<bool>(training))).run();
    EXPECT_TRUE(ot_test::all_close(out[0], {2, 3}, want)) << training;
  }
}

// A sequence reaching a kernel that reads tensors: its "shape" was empty and its dtype the
// element type, so a scalar weight accepted a sequence as its gradient and the update read the
// sequence's (absent) tensor data (a null pointer).
TEST(InternalOpsBadInput, SequencesAreNotTensors) {
  std::mt19937 rng(4);
  ir::Model m;
  m.opsets = {{"", 17}, {kTraining, 1}};
  m.graph = std::make_shared<ir::Graph>();
  ir::TypeInfo seq;
  seq.kind = ir::TypeInfo::Kind::kSequence;
  seq.inner = std::make_shared<ir::TypeInfo>(ir::TypeInfo::tensor(DType::kFloat32));
  m.graph->inputs = {ir::ValueInfo{"s", seq, ""}, ir::ValueInfo{"lr", ir::TypeInfo::tensor(DType::kFloat32, {1}), ""},
                     ir::ValueInfo{"t", ir::TypeInfo::tensor(DType::kInt64, {1}), ""},
                     ir::ValueInfo{"w", ir::TypeInfo::tensor(DType::kFloat32, {}), ""}};
  ir::Node sgd = ot_test::make_node("SGDOptimizer", {"lr", "t", "", "w", "s2"}, {"w2"}, {}, kTraining);
  sgd.name = kNodeName;
  m.graph->nodes = {ot_test::make_node("Identity", {"s"}, {"s2"}), sgd};
  m.graph->outputs = {ir::ValueInfo{"w2", {}, ""}};
  const std::string b = ir::serialize_model(m);
  InferenceSession s(b.data(), b.size());
  Value sv;
  sv.kind = Value::Kind::kSequence;
  sv.sequence = {f32({3}, rng)};
  sv.elem = DType::kFloat32;
  expect_error(
      [&] {
        s.run_values({}, {{"s", sv}, {"lr", Value::of(f32({1}, rng))}, {"t", Value::of(i64({1}, {1}))},
                          {"w", Value::of(Tensor::scalar<float>(1.f))}});
      },
      ErrorCode::kInvalidArgument, {"input 4 is a sequence, expected a tensor"});

  OneNode direct;  // a sequence fed straight to a gradient kernel
  direct.op = "GeluGrad";
  direct.inputs = {fed_sequence({f32({3}, rng)}), fed(f32({3}, rng))};
  expect_refused(direct, ErrorCode::kInvalidArgument, {"input 0 is a sequence, expected a tensor"});
}

// Kernels write the outputs the ONNX schema requires whatever the node names: an unnamed one had
// no buffer (a null pointer written through) when a later, optional output was asked for.
TEST(InternalOpsBadInput, RequiredOutputsMustBeNamed) {
  std::mt19937 rng(5);
  auto standard = [](const char* op, std::vector<Arg> inputs, std::vector<std::string> outputs,
                     std::vector<ir::Attribute> attrs = {}) {
    OneNode n;
    n.op = op;
    n.domain = "";
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    n.attrs = std::move(attrs);
    return n;
  };
  const Tensor x = f32({2, 3}, rng), c = f32({3}, rng);
  const std::vector<OneNode> nodes = {
      standard("LayerNormalization", {fed(x), fed(c)}, {"", "mean"}),
      standard("SoftmaxCrossEntropyLoss", {fed(x), fed(i64({2}, {0, 1}))}, {"", "log_prob"}),
      standard("TopK", {fed(x), fed(i64({1}, {2}))}, {"", "indices"}),
      standard("MaxPool", {fed(f32({1, 1, 4}, rng))}, {"", "indices"}, {ot_test::attr_ints("kernel_shape", {2})}),
      standard("Dropout", {fed(f32({4}, rng)), constant(Tensor::scalar<float>(0.5f)), constant(Tensor::scalar<bool>(true))},
               {"", "mask"}),
      standard("BatchNormalization", {fed(x), fed(c), fed(c), fed(c), fed(f32({3}, rng, 0.5, 1))}, {"", "mean", "var"},
               {ot_test::attr_int("training_mode", 1)}),
  };
  for (const OneNode& n : nodes) expect_refused(n, ErrorCode::kInvalidGraph, {"required output 0", "is unnamed"});
  // Optional outputs may stay unnamed (the kernels skip them).
  OneNode ln = nodes[0];
  ln.outputs = {"y", "", "inv_std"};
  const auto out = ln.run();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), Shape({2, 3}));
  EXPECT_EQ(out[1].shape(), Shape({2, 1}));
}

// BatchNormalizationGrad in training mode was asked for dmean and dvar (which exist only in
// inference mode), or for more outputs than it has: "internal error: the kernel did not prepare
// output 3" instead of an error saying what is wrong.
TEST(InternalOpsBadInput, BatchNormGradOutputsOfItsMode) {
  std::mt19937 rng(6);
  OneNode n;
  n.op = "BatchNormalizationGrad";
  n.attrs = {ot_test::attr_int("training_mode", 1)};
  n.inputs = {fed(f32({2, 3}, rng)), fed(f32({2, 3}, rng)), fed(f32({3}, rng))};
  n.outputs = {"dx", "dscale", "db", "dmean"};
  expect_refused(n, ErrorCode::kInvalidArgument, {"only in inference mode"});
  n.attrs = {};
  n.inputs.push_back(fed(f32({3}, rng)));
  n.inputs.push_back(fed(f32({3}, rng, 0.5, 1)));
  n.outputs = {"dx", "dscale", "db", "dmean", "dvar", "extra"};  // counts: the operator table's row
  expect_refused(n, ErrorCode::kInvalidGraph, {"6 outputs, BatchNormalizationGrad has 1 to 5"});
}

// PadGrad and ResizeGrad fold dY back one axis at a time; with a single folded axis they take no
// workspace, and the kernel formed `workspace + offset` from a null pointer (UBSan, structured
// fuzz target, on a training graph seed). Against naive sums: reflect padding sends each padded
// position to its mirror; nearest resizing by 2 sends positions 2i and 2i + 1 to i.
TEST(InternalOpsBadInput, FoldGradientsOfOneAxis) {
  std::mt19937 rng(8);
  const int64_t rows = 2, n = 4;
  const Tensor dy_pad = f32({rows, n + 2}, rng);
  OneNode pad;
  pad.op = "PadGrad";
  pad.attrs = {ot_test::attr_string("mode", "reflect")};
  pad.inputs = {fed(dy_pad), constant(shape_tensor({rows, n})), constant(i64({4}, {0, 1, 0, 1}))};
  const auto g = ot_test::to_double(dy_pad);
  std::vector<double> want(size_t(rows * n), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < n + 2; ++o) {
      int64_t i = o - 1;
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
      want[size_t(r * n + i)] += g[size_t(r * (n + 2) + o)];
    }
  EXPECT_TRUE(ot_test::all_close(pad.run()[0], {rows, n}, want));

  const Tensor dy_resize = f32({rows, 2 * n}, rng);
  OneNode resize;
  resize.op = "ResizeGrad";
  resize.inputs = {fed(dy_resize), omitted(), constant(Tensor::from_vector<float>({2}, {1.f, 2.f})), omitted(),
                   constant(shape_tensor({rows, n}))};
  const auto h = ot_test::to_double(dy_resize);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) want[size_t(r * n + i)] = h[size_t(r * 2 * n + 2 * i)] + h[size_t(r * 2 * n + 2 * i + 1)];
  EXPECT_TRUE(ot_test::all_close(resize.run()[0], {rows, n}, want));
}

// A backward kernel's shape(X) input left out was taken for a value not known yet: the output was
// declared dynamic, to be prepared again at run time. A node whose inputs are all constant runs
// right after prepare (constant folding), so the kernel ran with nothing prepared: GatherElementsGrad
// read its absent indices (a null pointer; structured fuzz target), the others wrote an output
// never allocated.
TEST(InternalOpsBadInput, MissingShapeInputsAreNotValuesToWaitFor) {
  std::mt19937 rng(10);
  const Tensor dy = f32({2, 3}, rng);
  auto grad = [&](const char* op, std::vector<Arg> inputs) {
    OneNode n;
    n.op = op;
    n.inputs = std::move(inputs);
    return n;
  };
  expect_refused(grad("GatherElementsGrad", {omitted(), omitted(), constant(dy)}), ErrorCode::kInvalidArgument,
                 {"the shape input (input 0) is missing"});
  expect_refused(grad("GatherGrad", {omitted(), constant(i64({2}, {0, 1})), constant(dy)}), ErrorCode::kInvalidArgument,
                 {"the shape input (input 0) is missing"});
  expect_refused(grad("SliceGrad", {constant(dy), omitted(), constant(i64({1}, {0})), constant(i64({1}, {2}))}),
                 ErrorCode::kInvalidArgument, {"the shape input (input 1) is missing"});
  expect_refused(grad("SumToShape", {constant(dy), omitted()}), ErrorCode::kInvalidArgument,
                 {"the target shape (input 1) is missing"});
  expect_refused(grad("SumToShape", {constant(dy)}), ErrorCode::kInvalidGraph, {"1 inputs, SumToShape takes 2"});
  expect_refused(grad("GatherGrad", {constant(i64({1, 2}, {4, 3})), constant(i64({2}, {0, 1})), constant(dy)}),
                 ErrorCode::kInvalidArgument, {"shape input must be 1-D int64", "[1, 2]"});
  // Well-formed and folded: dX[idx[j]] += dY[j] against naive sums (duplicates accumulate).
  const auto out = grad("GatherGrad", {constant(shape_tensor({4, 3})), constant(i64({2}, {3, 3})), constant(dy)}).run();
  const auto g = ot_test::to_double(dy);
  std::vector<double> want(12, 0.0);
  for (int64_t j = 0; j < 3; ++j) want[size_t(9 + j)] = g[size_t(j)] + g[size_t(3 + j)];
  EXPECT_TRUE(ot_test::all_close(out[0], {4, 3}, want));
}

// ---------------------------------------------------------------- what the kernels already refused
// Hostile inputs of every internal kernel family that were refused before this review too (kept
// so that they stay refused): inputs that disagree with each other, shape inputs that are
// negative, huge or too small, indices out of range, wrong element types and counts.
TEST(InternalOpsBadInput, HostileInputsStayRefused) {
  std::mt19937 rng(7);
  auto node = [](const char* op, std::vector<Arg> inputs, std::vector<std::string> outputs = {"y0"},
                 std::vector<ir::Attribute> attrs = {}, const char* domain = kTraining) {
    OneNode n;
    n.op = op;
    n.domain = domain;
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    n.attrs = std::move(attrs);
    return n;
  };
  const Arg lr = fed(Tensor::from_vector<float>({1}, {0.1f})), step = fed(i64({1}, {1}));
  const Tensor w = f32({3, 4}, rng), g = f32({3, 4}, rng), dy = f32({2, 3}, rng);
  struct Case {
    const char* name;
    OneNode node;
    ErrorCode code;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"optimizer gradient shape", node("SGDOptimizer", {lr, step, omitted(), fed(w), fed(f32({4, 3}, rng))}),
       ErrorCode::kInvalidArgument, {"gradient 1", "[4, 3]", "[3, 4]"}},
      {"optimizer moment shape",
       node("AdamOptimizer", {lr, step, omitted(), fed(w), fed(g), fed(w), fed(f32({3, 5}, rng))}, {"w", "m", "v"}),
       ErrorCode::kInvalidArgument, {"Moment_2 1"}},
      {"optimizer moment type",
       node("MomentumOptimizer", {lr, step, omitted(), fed(w), fed(g), fed(Tensor::zeros(DType::kFloat64, {3, 4}))},
            {"w", "m"}),
       ErrorCode::kInvalidArgument, {"double"}},
      {"optimizer int weights",
       node("SGDOptimizer", {lr, step, omitted(), fed(Tensor::zeros(DType::kInt32, {3})), fed(Tensor::zeros(DType::kInt32, {3}))}),
       ErrorCode::kInvalidArgument, {"must be float or double"}},
      {"optimizer empty step", node("SGDOptimizer", {lr, fed(Tensor::zeros(DType::kInt64, {0})), omitted(), fed(w), fed(g)}),
       ErrorCode::kInvalidArgument, {"step"}},
      {"optimizer unnamed output", node("SGDOptimizer", {lr, step, omitted(), fed(w), fed(w), fed(g), fed(g)}, {"w1", ""}),
       ErrorCode::kInvalidArgument, {"must be named"}},
      {"accumulate types",
       node("AccumulateGradients", {fed(Tensor::scalar<bool>(false)), fed(w), fed(Tensor::zeros(DType::kFloat64, {3, 4}))}),
       ErrorCode::kInvalidArgument, {"gradient 1"}},
      {"loss scale check int gradient",
       node("LossScaleCheck", {fed(Tensor::from_vector<float>({1}, {8.f})), fed(Tensor::zeros(DType::kInt64, {2}))},
            {"scale", "finite"}),
       ErrorCode::kInvalidArgument, {"must be float or double"}},
      {"global norm clip max_norm", node("GlobalNormClip", {fed(g)}, {"s"}, {ot_test::attr_float("max_norm", -1.f)}),
       ErrorCode::kInvalidModel, {"max_norm"}},
      {"GeluGrad dY and X differ", node("GeluGrad", {fed(f32({3, 3}, rng)), fed(f32({3, 4}, rng))}),
       ErrorCode::kInvalidArgument, {"input 0"}},
      {"RNN grad short reserve",
       node("RNNGrad", {fed(f32({2, 1, 3}, rng)), fed(f32({1, 4, 3}, rng)), fed(f32({1, 4, 4}, rng)), omitted(), omitted(),
                        omitted(), fed(f32({5}, rng))}),
       ErrorCode::kInvalidArgument, {"the training reserve"}},
      {"GatherGrad negative shape",
       node("GatherGrad", {constant(shape_tensor({-5, 3})), fed(i64({2}, {0, 1})), fed(dy)}), ErrorCode::kInvalidArgument,
       {"[-5, 3]"}},
      {"GatherGrad huge shape",
       node("GatherGrad", {constant(shape_tensor({int64_t(1) << 40, 3})), fed(i64({2}, {0, 1})), fed(dy)}),
       ErrorCode::kInvalidArgument, {"too large"}},
      {"GatherGrad index out of range",
       node("GatherGrad", {constant(shape_tensor({4, 3})), fed(i64({2}, {0, 4})), fed(dy)}), ErrorCode::kInvalidArgument,
       {"index 4 is out of range"}},
      {"GatherGrad float indices",
       node("GatherGrad", {constant(shape_tensor({4, 3})), fed(f32({2}, rng)), fed(dy)}), ErrorCode::kInvalidArgument,
       {"indices must be int32 or int64"}},
      {"GatherElementsGrad index out of range",
       node("GatherElementsGrad", {constant(shape_tensor({2, 3})), fed(i64({2, 3}, {0, 1, 2, 3, 0, 0})), fed(dy)}),
       ErrorCode::kInvalidArgument, {"index 2 is out of range for axis 0"}},
      {"GatherNDGrad tuple out of range",
       node("GatherNDGrad", {constant(shape_tensor({2, 3})), fed(i64({2, 1}, {0, -3})), fed(dy)}),
       ErrorCode::kInvalidArgument, {"index -3 is out of range"}},
      {"SliceGrad shape smaller than dY",
       node("SliceGrad", {fed(dy), constant(shape_tensor({1, 3})), constant(i64({1}, {0})), constant(i64({1}, {2}))}),
       ErrorCode::kInvalidArgument, {"differs from the slice's shape"}},
      {"SliceGrad zero step",
       node("SliceGrad", {fed(dy), constant(shape_tensor({4, 3})), constant(i64({1}, {0})), constant(i64({1}, {2})),
                          constant(i64({1}, {0})), constant(i64({1}, {0}))}),
       ErrorCode::kInvalidArgument, {"step of axis 0 is zero"}},
      {"PadGrad pads of the wrong length",
       node("PadGrad", {fed(dy), constant(shape_tensor({2, 1})), constant(i64({3}, {0, 1, 1}))}),
       ErrorCode::kInvalidArgument, {"2 values per axis"}},
      {"ResizeGrad scales of the wrong rank",
       node("ResizeGrad", {fed(dy), omitted(), constant(Tensor::from_vector<float>({1}, {2.f})), omitted(),
                           constant(shape_tensor({1, 3}))}),
       ErrorCode::kInvalidArgument, {"scales has 1 values"}},
      {"SoftmaxGrad dY and Y differ", node("SoftmaxGrad", {fed(dy), fed(f32({3, 2}, rng))}), ErrorCode::kInvalidArgument,
       {"differ"}},
      {"loss gradient label out of range",
       node("SoftmaxCrossEntropyLossGrad", {fed(Tensor::scalar<float>(1.f)), fed(dy), fed(i64({2}, {0, 3}))}),
       ErrorCode::kInvalidArgument, {"label 3"}},
      {"MaxPoolGrad index outside its plane",
       node("MaxPoolGrad", {fed(f32({1, 2, 2}, rng)), fed(f32({1, 2, 4}, rng)), fed(i64({1, 2, 2}, {0, 1, 2, 3}))}, {"y0"},
            {ot_test::attr_ints("kernel_shape", {2}), ot_test::attr_ints("strides", {2})}),
       ErrorCode::kInvalidArgument, {"lies outside its plane"}},
      {"ConvGrad dY of the wrong shape",
       node("ConvGrad", {fed(f32({1, 2, 3, 3}, rng)), fed(f32({1, 1, 3, 3}, rng)), fed(f32({2, 1, 2, 2}, rng))}),
       ErrorCode::kInvalidArgument, {"does not match the output shape"}},
      {"SumToShape not broadcastable", node("SumToShape", {fed(dy), constant(shape_tensor({4}))}),
       ErrorCode::kInvalidArgument, {"does not broadcast"}},
      {"LayerNormGrad statistics too short",
       node("LayerNormalizationGrad", {fed(dy), fed(dy), fed(f32({3}, rng)), fed(f32({1}, rng)), fed(f32({2}, rng))},
            {"dx"}),
       ErrorCode::kInvalidArgument, {"Mean"}},
      {"preview Adam float step",
       node("Adam", {fed(Tensor::scalar<float>(0.1f)), fed(Tensor::scalar<float>(1.f)), fed(w), fed(g), fed(w), fed(w)},
            {"x", "v", "h"}, {}, "ai.onnx.preview.training"),
       ErrorCode::kInvalidArgument, {"T must be an int64 scalar"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_refused(c.node, c.code, c.fragments);
  }
}

// com.microsoft.YieldOp, the cut of an OrtModuleGraphBuilder training graph: an InferenceSession
// loads the graph and runs its forward part; asking for a value behind the cut is an error naming
// the YieldOp node.
TEST(InternalOpsBadInput, YieldOpRunsOnlyTheForwardPart) {
  std::mt19937 rng(9);
  ir::Model m;
  m.opsets = {{"", 17}, {"com.microsoft", 1}};
  m.graph = std::make_shared<ir::Graph>();
  m.graph->inputs = {ir::ValueInfo{"a", ir::TypeInfo::tensor(DType::kFloat32, {3}), ""},
                     ir::ValueInfo{"b", ir::TypeInfo::tensor(DType::kFloat32, {3}), ""}};
  ir::Node yield = ot_test::make_node("YieldOp", {"c"}, {"dc"}, {ot_test::attr_ints("full_shape_outputs", {0})},
                                      "com.microsoft");
  yield.name = kNodeName;
  m.graph->nodes = {ot_test::make_node("Mul", {"a", "b"}, {"c"}), yield, ot_test::make_node("Neg", {"dc"}, {"e"})};
  m.graph->outputs = {ir::ValueInfo{"c", {}, ""}, ir::ValueInfo{"e", {}, ""}};
  const std::string bytes = ir::serialize_model(m);
  InferenceSession s(bytes.data(), bytes.size());
  const Tensor a = f32({3}, rng), b = f32({3}, rng);
  const auto out = s.run({"c"}, {{"a", a}, {"b", b}});
  const auto av = ot_test::to_double(a), bv = ot_test::to_double(b);
  EXPECT_TRUE(ot_test::all_close(out.at(0), {3}, {av[0] * bv[0], av[1] * bv[1], av[2] * bv[2]}));
  expect_error([&] { s.run({"e"}, {{"a", a}, {"b", b}}); }, ErrorCode::kInvalidArgument, {"YieldOp marks the cut"});
}
