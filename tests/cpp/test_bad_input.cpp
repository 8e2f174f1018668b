// Every C++ surface's bad input, table-driven: InferenceSession, TrainingSession,
// GradientGraphBuilder and the io readers. Each case fails with the documented error code and a
// message naming what is wrong, or works as a naive double-precision computation says (batch 0,
// NaN/Inf); the caller's feeds are never written; sessions used from several threads give the
// single-threaded results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "ir/onnx_io.h"
#include "onnxtrain/error.h"
#include "onnxtrain/gradient.h"
#include "onnxtrain/io.h"
#include "onnxtrain/session.h"
#include "onnxtrain/training.h"
#include "test_grad_util.h"
#include "test_util.h"

using namespace onnxtrain;
using ot_test::make_node;
using ot_test::TempDir;

namespace {

constexpr int64_t kIn = 4, kOut = 3;

// y = relu(X W + b), z = X W + b; W, b from a fixed seed. Returns the bytes and the weights.
struct Mlp {
  std::string bytes;
  std::vector<float> w, b;
};
Mlp mlp() {
  Mlp r;
  std::mt19937 rng(3);
  Tensor W = ot_test::random_tensor(DType::kFloat32, {kIn, kOut}, rng, -1, 1);
  Tensor b = ot_test::random_tensor(DType::kFloat32, {kOut}, rng, -1, 1);
  r.w.assign(W.data<float>(), W.data<float>() + W.numel());
  r.b.assign(b.data<float>(), b.data<float>() + b.numel());
  ir::Model m;
  m.opsets = {{"", 17}};
  m.graph = std::make_shared<ir::Graph>();
  auto& g = *m.graph;
  g.inputs = {ir::ValueInfo{"X", ir::TypeInfo::tensor(DType::kFloat32, {-1, kIn}), ""}};
  g.initializers = {{"W", W}, {"b", b}};
  g.nodes = {make_node("MatMul", {"X", "W"}, {"xw"}), make_node("Add", {"xw", "b"}, {"z"}),
             make_node("Relu", {"z"}, {"y"})};
  g.outputs = {ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kFloat32, {-1, kOut}), ""},
               ir::ValueInfo{"z", ir::TypeInfo::tensor(DType::kFloat32, {-1, kOut}), ""}};
  r.bytes = ir::serialize_model(m);
  return r;
}

// z = X W + b in double precision (NaN and Inf propagate as in numpy).
std::vector<double> reference_z(const Mlp& m, const Tensor& x) {
  const int64_t n = x.shape()[0];
  std::vector<double> z(size_t(n * kOut));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kOut; ++j) {
      double s = m.b[size_t(j)];
      for (int64_t k = 0; k < kIn; ++k) s += double(x.data<float>()[i * kIn + k]) * m.w[size_t(k * kOut + j)];
      z[size_t(i * kOut + j)] = s;
    }
  return z;
}

void expect_like(const Tensor& got, const std::vector<double>& want, bool relu) {
  ASSERT_EQ(size_t(got.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = relu && want[i] < 0 ? 0.0 : want[i];
    const double g = got.data<float>()[i];
    if (std::isnan(w)) EXPECT_TRUE(std::isnan(g)) << i;
    else if (std::isinf(w)) EXPECT_EQ(g, w) << i;
    else EXPECT_NEAR(g, w, 1e-5 * (1 + std::fabs(w))) << i;
  }
}

Tensor random_x(int64_t n, uint32_t seed, int64_t cols = kIn) {
  std::mt19937 rng(seed);
  return ot_test::random_tensor(DType::kFloat32, {n, cols}, rng, -1, 1);
}

// The error code and message f throws; code 0 when it throws nothing.
struct Failure {
  int code = 0;
  std::string message;
};
Failure failure_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {int(e.code()), e.what()};
  }
  return {};
}

struct Case {
  std::string name;
  std::function<void()> call;
  ErrorCode code;
  std::vector<std::string> fragments;
};

void check_cases(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const Failure f = failure_of(c.call);
    EXPECT_EQ(f.code, int(c.code)) << f.message;
    for (const auto& frag : c.fragments) EXPECT_NE(f.message.find(frag), std::string::npos) << f.message;
  }
}

void write_bytes(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }

}  // namespace

TEST(BadInput, InferenceFeeds) {
  const Mlp m = mlp();
  InferenceSession s(m.bytes.data(), m.bytes.size());
  const Tensor x = random_x(5, 1);
  std::mt19937 rng(2);
  auto run = [&](std::vector<std::pair<std::string, Tensor>> feeds, std::vector<std::string> outs = {}) {
    return [&s, feeds, outs] { s.run(outs, feeds); };
  };
  Tensor strings = Tensor::empty(DType::kString, {5, kIn});
  check_cases({
      {"float64", run({{"X", ot_test::random_tensor(DType::kFloat64, {5, kIn}, rng)}}), ErrorCode::kInvalidArgument,
       {"'X'", "double", "float"}},
      {"int32", run({{"X", Tensor::zeros(DType::kInt32, {5, kIn})}}), ErrorCode::kInvalidArgument, {"'X'", "int32"}},
      {"string", run({{"X", strings}}), ErrorCode::kInvalidArgument, {"'X'", "string"}},
      {"rank 1", run({{"X", Tensor::zeros(DType::kFloat32, {kIn})}}), ErrorCode::kInvalidArgument, {"'X'", "rank 1"}},
      {"rank 3", run({{"X", Tensor::zeros(DType::kFloat32, {1, 5, kIn})}}), ErrorCode::kInvalidArgument,
       {"'X'", "rank 3"}},
      {"wrong dimension", run({{"X", random_x(5, 1, 5)}}), ErrorCode::kInvalidArgument, {"'X'", "dimension 5"}},
      {"undefined tensor", run({{"X", Tensor()}}), ErrorCode::kInvalidArgument, {"'X'"}},
      {"unknown input", run({{"Q", x}}), ErrorCode::kInvalidArgument, {"unknown input 'Q'", "inputs are: X"}},
      {"extra input", run({{"X", x}, {"Q", x}}), ErrorCode::kInvalidArgument, {"unknown input 'Q'"}},
      {"fed twice", run({{"X", x}, {"X", x}}), ErrorCode::kInvalidArgument, {"'X' is fed twice"}},
      {"missing input", run({}), ErrorCode::kInvalidArgument, {"missing input 'X'"}},
      {"unknown output", run({{"X", x}}, {"q"}), ErrorCode::kInvalidArgument,
       {"unknown output 'q'", "outputs are: y, z"}},
  });
  // Still usable, and equal to the double-precision reference.
  expect_like(s.run({"y"}, {{"X", x}})[0], reference_z(m, x), true);
}

TEST(BadInput, InferenceEdgeValuesAndCallerMemory) {
  const Mlp m = mlp();
  InferenceSession s(m.bytes.data(), m.bytes.size());
  // Batch 0: empty outputs of the right shape.
  auto empty = s.run({}, {{"X", Tensor::zeros(DType::kFloat32, {0, kIn})}});
  ASSERT_EQ(empty.size(), 2u);
  EXPECT_EQ(empty[0].shape(), (Shape{0, kOut}));
  EXPECT_EQ(empty[1].shape(), (Shape{0, kOut}));
  // NaN and Inf propagate as numpy's arithmetic (relu(NaN) = NaN, as ONNX's max(x, 0)).
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector<float>({3, kIn}, {nan, 1, 2, 3, inf, 0, 0, 0, -inf, 1, 1, 1});
  const std::string before(static_cast<const char*>(x.raw_data()), x.nbytes());
  auto out = s.run({"y", "z"}, {{"X", x}});
  expect_like(out[0], reference_z(m, x), true);
  expect_like(out[1], reference_z(m, x), false);
  // The caller's feed memory (wrapped, not copied) is not written.
  EXPECT_EQ(std::memcmp(before.data(), x.raw_data(), x.nbytes()), 0);
}

TEST(BadInput, HugeShapesAreRefusedBeforeAllocating) {
  // Shape inputs asking for 2^40 elements: a clear error, not an allocation.
  ir::Model m;
  m.opsets = {{"", 17}};
  m.graph = std::make_shared<ir::Graph>();
  m.graph->inputs = {ir::ValueInfo{"s", ir::TypeInfo::tensor(DType::kInt64, {2}), ""}};
  m.graph->nodes = {make_node("ConstantOfShape", {"s"}, {"y"})};
  m.graph->outputs = {ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kFloat32, {-1, -1}), ""}};
  const std::string bytes = ir::serialize_model(m);
  InferenceSession s(bytes.data(), bytes.size());
  const Failure f = failure_of([&] { s.run({}, {{"s", Tensor::from_vector<int64_t>({2}, {1 << 20, 1 << 20})}}); });
  EXPECT_NE(f.code, 0);
  EXPECT_NE(f.message.find("allocation limit"), std::string::npos) << f.message;
  EXPECT_EQ(s.run({}, {{"s", Tensor::from_vector<int64_t>({2}, {2, 3})}})[0].shape(), (Shape{2, 3}));
  // A tensor of 2^40 floats is refused by the allocator itself.
  EXPECT_EQ(failure_of([] { Tensor::empty(DType::kFloat32, {1 << 20, 1 << 20}); }).code, int(ErrorCode::kFail));
}

// A zero dim empties a tensor, but its other dims still size strides, loop bounds and tables:
// dims other than zeros multiplying past 2^52 are refused wherever a shape is made (found by the
// structured fuzzer and a review: [0, 2^62, 4] overflowed broadcast strides, reductions, Flatten,
// Concat, Gather, Softmax, LayerNorm's scratch size). Beside them, integer edges of single kernels.
TEST(BadInput, ShapeExtentsAndIntegerEdgesOfKernels) {
  const int64_t big = int64_t(1) << 62, k52 = int64_t(1) << 52;
  auto i64 = [](std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); };
  auto f32 = [](Shape s) { return Tensor::zeros(DType::kFloat32, std::move(s)); };
  check_cases({
      {"empty tensor with dims past 2^52", [&] { Tensor::empty(DType::kFloat32, {0, big, 4}); }, ErrorCode::kInvalidArgument,
       {"[0, 4611686018427387904, 4]", "2^52"}},
      {"shape_numel past 2^52", [&] { shape_numel({4, 0, k52}); }, ErrorCode::kInvalidArgument, {"2^52"}},
      {"Expand to [0, 2^62, 4]", [&] { ot_test::run_node("Expand", {f32({1}), i64({0, big, 4})}); },
       ErrorCode::kInvalidArgument, {"node_Expand"}},
      {"Reshape to [0, 2^62, 4]", [&] { ot_test::run_node("Reshape", {f32({0}), i64({0, big, 4})}, {ot_test::attr_int("allowzero", 1)}, {.opset = 14}); },
       ErrorCode::kInvalidArgument, {"node_Reshape"}},
      {"Pad cropping past the axis", [&] { ot_test::run_node("Pad", {f32({5}), i64({INT64_MIN, INT64_MAX})}); },
       ErrorCode::kInvalidArgument, {"node_Pad", "crop more than the 5 elements"}},
      {"ConvTranspose output_shape past int64", [&] {
         ot_test::run_node("ConvTranspose", {f32({1, 1, 0}), f32({1, 1, 1})},
                           {ot_test::attr_ints("strides", {big}), ot_test::attr_ints("output_shape", {INT64_MAX})});
       }, ErrorCode::kInvalidArgument, {"node_ConvTranspose"}},
      {"LayerNormalization scratch of 16 TiB", [&] { ot_test::run_node("LayerNormalization", {f32({0, int64_t(1) << 40}), f32({1})}); },
       ErrorCode::kInvalidArgument, {"node_LayerNormalization", "scratch memory"}},
  });
  // At the bound: an empty tensor of extent 2^52 is fine.
  EXPECT_EQ(Tensor::empty(DType::kFloat32, {0, k52}).numel(), 0);
  EXPECT_EQ(shape_numel({-1, 4}), -4);  // unknown extents of declared shapes keep the plain product
  // Integers wrap as numpy's (two's complement): PRelu's product, CumSum's running sum.
  const int32_t m30 = -(int32_t(1) << 30);
  auto p = ot_test::run_node("PRelu", {Tensor::from_vector<int32_t>({2}, {m30, int32_t(1) << 30}), Tensor::from_vector<int32_t>({1}, {4})});
  EXPECT_EQ(p[0].data<int32_t>()[0], 0);  // -2^30 * 4 = -2^32 = 0 mod 2^32
  EXPECT_EQ(p[0].data<int32_t>()[1], int32_t(1) << 30);
  auto c = ot_test::run_node("CumSum", {i64({INT64_MAX, 1}), Tensor::scalar<int64_t>(0)});
  EXPECT_EQ(c[0].data<int64_t>()[1], INT64_MIN);
}

TEST(BadInput, ModelFilesEveryLoader) {
  TempDir dir;
  const Mlp m = mlp();
  const std::string d = dir.path;
  write_bytes(d + "/empty.onnx", "");
  write_bytes(d + "/trunc.onnx", m.bytes.substr(0, m.bytes.size() / 2));
  write_bytes(d + "/text.onnx", std::string(500, 'x'));
  TrainingParameters p;
  p.loss_output_name = "loss";
  struct FileCase {
    std::string path;
    ErrorCode code;
    std::string fragment;
  };
  const std::vector<FileCase> files = {{d + "/nope.onnx", ErrorCode::kNoSuchFile, "nope.onnx"},
                                       {d, ErrorCode::kIOError, "not a regular file"},
                                       {d + "/empty.onnx", ErrorCode::kInvalidModel, "empty (0 bytes)"},
                                       {d + "/trunc.onnx", ErrorCode::kInvalidModel, "trunc.onnx"},
                                       {d + "/text.onnx", ErrorCode::kInvalidModel, "text.onnx' is not an ONNX model"}};
  std::vector<Case> cases;
  for (const auto& f : files) {
    cases.push_back({"InferenceSession " + f.path, [f] { InferenceSession s(f.path); }, f.code, {f.fragment}});
    cases.push_back({"TrainingSession " + f.path, [f, p] { TrainingSession s(f.path, p); }, f.code, {f.fragment}});
    if (f.code != ErrorCode::kInvalidModel || f.fragment == "empty (0 bytes)")  // read_file does not parse
      cases.push_back({"read_file " + f.path, [f] { read_file(f.path, "model file"); }, f.code, {f.fragment}});
  }
  for (const std::string& bytes : {std::string(), m.bytes.substr(0, 40), std::string(100, '\xff')}) {
    cases.push_back({"InferenceSession bytes", [bytes] { InferenceSession s(bytes.data(), bytes.size()); },
                     ErrorCode::kInvalidModel, {"model bytes"}});
    cases.push_back({"GradientGraphBuilder bytes", [bytes] { GradientGraphBuilder b(bytes, {"y"}, {"W"}, "y"); },
                     ErrorCode::kInvalidModel, {"model bytes"}});
  }
  check_cases(cases);
}

TEST(BadInput, TrainingSessionFeedsAndParameters) {
  const std::string model = add_loss_output(mlp().bytes, "squared_error", "loss", "label", "", {}, "z");
  TrainingParameters p;
  p.loss_output_name = "loss";
  p.training_optimizer_name = "AdamOptimizer";
  TrainingSession s(model.data(), model.size(), p);
  const Tensor x = random_x(6, 4), label = random_x(6, 5, kOut), lr = Tensor::from_vector<float>({1}, {0.01f});
  auto step = [&](std::vector<std::pair<std::string, Value>> feeds, std::vector<std::string> outs = {"loss"}) {
    return [&s, feeds, outs] { s.run(outs, feeds); };
  };
  s.run({"loss"}, {{"X", Value::of(x)}, {"label", Value::of(label)}, {"Learning_Rate", Value::of(lr)}});
  const auto state = s.get_state();
  const auto opt = s.get_optimizer_state();
  check_cases({
      {"float64 data", step({{"X", Value::of(Tensor::zeros(DType::kFloat64, {6, kIn}))}, {"label", Value::of(label)},
                             {"Learning_Rate", Value::of(lr)}}),
       ErrorCode::kInvalidArgument, {"'X'", "double"}},
      {"float64 learning rate", step({{"X", Value::of(x)}, {"label", Value::of(label)},
                                      {"Learning_Rate", Value::of(Tensor::from_vector<double>({1}, {0.1}))}}),
       ErrorCode::kInvalidArgument, {"Learning_Rate"}},
      {"NaN learning rate",
       step({{"X", Value::of(x)}, {"label", Value::of(label)},
             {"Learning_Rate", Value::of(Tensor::from_vector<float>({1}, {std::nanf("")}))}}),
       ErrorCode::kInvalidArgument, {"learning rate nan"}},
      {"missing label", step({{"X", Value::of(x)}, {"Learning_Rate", Value::of(lr)}}), ErrorCode::kInvalidArgument,
       {"missing input 'label'"}},
      {"unknown input", step({{"X", Value::of(x)}, {"lbl", Value::of(label)}, {"Learning_Rate", Value::of(lr)}}),
       ErrorCode::kInvalidArgument, {"unknown input 'lbl'"}},
      {"unknown output", step({{"X", Value::of(x)}, {"label", Value::of(label)}, {"Learning_Rate", Value::of(lr)}},
                              {"lss"}),
       ErrorCode::kInvalidArgument, {"unknown output 'lss'", "loss"}},
      {"wrong rank", step({{"X", Value::of(Tensor::zeros(DType::kFloat32, {kIn}))}, {"label", Value::of(label)},
                           {"Learning_Rate", Value::of(lr)}}),
       ErrorCode::kInvalidArgument, {"'X'", "rank 1"}},
  });
  // Failed steps changed nothing.
  const auto after = s.get_state();
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_EQ(std::memcmp(state[i].second.raw_data(), after[i].second.raw_data(), state[i].second.nbytes()), 0);
  EXPECT_EQ(s.step(), 1);
  // Parameters.
  auto with = [&](std::function<void(TrainingParameters&)> set) {
    return [model, set] {
      TrainingParameters q;
      q.loss_output_name = "loss";
      set(q);
      TrainingSession t(model.data(), model.size(), q);
    };
  };
  check_cases({
      {"optimizer", with([](auto& q) { q.training_optimizer_name = "Nope"; }), ErrorCode::kInvalidArgument,
       {"unknown optimizer 'Nope'"}},
      {"accumulation 0", with([](auto& q) { q.gradient_accumulation_steps = 0; }), ErrorCode::kInvalidArgument,
       {"gradient_accumulation_steps"}},
      {"unknown weight", with([](auto& q) { q.weights_to_train = {"nope"}; }), ErrorCode::kInvalidArgument,
       {"'nope'"}},
      {"no loss name", with([](auto& q) { q.loss_output_name = ""; }), ErrorCode::kInvalidArgument,
       {"loss_output_name"}},
  });
}

TEST(BadInput, TrainingOnNanDataGivesNanLossWithoutCrashing) {
  const std::string model = add_loss_output(mlp().bytes, "squared_error", "loss", "label", "", {}, "z");
  TrainingParameters p;
  p.loss_output_name = "loss";
  TrainingSession s(model.data(), model.size(), p);
  Tensor x = random_x(6, 4);
  x.data<float>()[0] = std::nanf("");
  const Tensor label = random_x(6, 5, kOut), lr = Tensor::from_vector<float>({1}, {0.01f});
  for (int i = 0; i < 2; ++i) {
    auto r = s.run({"loss"}, {{"X", Value::of(x)}, {"label", Value::of(label)}, {"Learning_Rate", Value::of(lr)}});
    EXPECT_TRUE(std::isnan(r[0].tensor.data<float>()[0]));
  }
}

TEST(BadInput, GradientGraphBuilderNames) {
  const std::string bytes = mlp().bytes;
  TempDir dir;
  check_cases({
      {"unknown y", [&] { GradientGraphBuilder(bytes, {"nope"}, {"W"}, "y").build(); }, ErrorCode::kInvalidArgument,
       {"'nope'"}},
      {"unknown x", [&] { GradientGraphBuilder(bytes, {"y"}, {"nope"}, "y").build(); }, ErrorCode::kInvalidArgument,
       {"'nope'"}},
      {"unknown loss", [&] { GradientGraphBuilder(bytes, {"y"}, {"W"}, "nope").build(); }, ErrorCode::kInvalidArgument,
       {"'nope'"}},
      {"save before build", [&] { GradientGraphBuilder(bytes, {"y"}, {"W"}, "y").save(dir.path + "/g.onnx"); },
       ErrorCode::kInvalidArgument, {"build()"}},
  });
}

TEST(BadInput, IoReaders) {
  TempDir dir;
  const std::string d = dir.path;
  write_bytes(d + "/empty.npy", "");
  write_bytes(d + "/junk.npy", "not numpy at all");
  // A valid .npy header claiming 10^12 float32 elements over 16 bytes of data.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }";
  header += std::string(118 - header.size(), ' ') + "\n";
  write_bytes(d + "/huge.npy", std::string("\x93NUMPY\x01\x00", 8) + char(header.size() & 0xff) + char(header.size() >> 8) +
                                   header + std::string(16, '\0'));
  write_npy(d + "/ok.npy", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  const std::string ok = [&] {
    std::ifstream f(d + "/ok.npy", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  write_bytes(d + "/trunc.npy", ok.substr(0, ok.size() - 5));
  write_bytes(d + "/ragged.csv", "a,b\n1,2\n3\n");
  write_bytes(d + "/text.csv", "a,b\n1,2\n3,x\n");
  write_bytes(d + "/junk.npz", "PK not really a zip");
  check_cases({
      {"npy missing", [&] { read_npy(d + "/nope.npy"); }, ErrorCode::kNoSuchFile, {"nope.npy"}},
      {"npy folder", [&] { read_npy(d); }, ErrorCode::kIOError, {"not a regular file"}},
      {"npy empty", [&] { read_npy(d + "/empty.npy"); }, ErrorCode::kInvalidModel, {"empty.npy"}},
      {"npy junk", [&] { read_npy(d + "/junk.npy"); }, ErrorCode::kInvalidArgument, {"junk.npy"}},
      {"npy truncated", [&] { read_npy(d + "/trunc.npy"); }, ErrorCode::kInvalidArgument, {"trunc.npy"}},
      {"npy huge header", [&] { read_npy(d + "/huge.npy"); }, ErrorCode::kInvalidArgument, {"huge.npy"}},
      {"npz junk", [&] { read_npz(d + "/junk.npz"); }, ErrorCode::kInvalidArgument, {"junk.npz"}},
      {"npz missing", [&] { read_npz(d + "/nope.npz"); }, ErrorCode::kNoSuchFile, {"nope.npz"}},
      {"csv ragged", [&] { read_csv(d + "/ragged.csv"); }, ErrorCode::kInvalidArgument, {"ragged.csv", "line 3"}},
      {"csv text", [&] { read_csv(d + "/text.csv"); }, ErrorCode::kInvalidArgument, {"text.csv", "line 3"}},
      {"write into a missing folder", [&] { write_npy(d + "/no/x.npy", Tensor::scalar(1.0f)); }, ErrorCode::kIOError,
       {"No such file or directory"}},
  });
  EXPECT_EQ(read_npy(d + "/ok.npy").shape(), (Shape{2, 3}));
}

TEST(BadInput, InferenceSessionRunFromFourThreads) {
  const Mlp m = mlp();
  InferenceSession s(m.bytes.data(), m.bytes.size());
  std::vector<Tensor> xs;
  std::vector<std::vector<Tensor>> ref;
  for (int k = 0; k < 4; ++k) {
    xs.push_back(random_x(k + 1, uint32_t(10 + k)));
    ref.push_back(s.run({}, {{"X", xs.back()}}));
  }
  std::vector<int> mismatches(4, 0), errors(4, 0);
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k)
    ts.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) {
        try {
          auto r = s.run({}, {{"X", xs[size_t(k)]}});
          for (size_t o = 0; o < r.size(); ++o)
            if (std::memcmp(r[o].raw_data(), ref[size_t(k)][o].raw_data(), r[o].nbytes()) != 0) ++mismatches[size_t(k)];
        } catch (...) {
          ++errors[size_t(k)];
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
  EXPECT_EQ(errors, std::vector<int>(4, 0));
}

TEST(BadInput, TrainingSessionStepsFromFourThreads) {
  // 4 threads x 10 Adam steps on one batch end bitwise where 40 steps in one thread end.
  const std::string model = add_loss_output(mlp().bytes, "squared_error", "loss", "label", "", {}, "z");
  TrainingParameters p;
  p.loss_output_name = "loss";
  p.training_optimizer_name = "AdamOptimizer";
  const Tensor x = random_x(6, 4), label = random_x(6, 5, kOut), lr = Tensor::from_vector<float>({1}, {0.01f});
  const std::vector<std::pair<std::string, Value>> feeds = {
      {"X", Value::of(x)}, {"label", Value::of(label)}, {"Learning_Rate", Value::of(lr)}};
  TrainingSession ref(model.data(), model.size(), p), s(model.data(), model.size(), p);
  for (int i = 0; i < 40; ++i) ref.run({"loss"}, feeds);
  std::vector<std::thread> ts;
  std::vector<int> errors(4, 0);
  for (int k = 0; k < 4; ++k)
    ts.emplace_back([&, k] {
      for (int i = 0; i < 10; ++i) {
        try {
          s.run({"loss"}, feeds);
        } catch (...) {
          ++errors[size_t(k)];
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors, std::vector<int>(4, 0));
  EXPECT_EQ(s.step(), 40);
  const auto want = ref.get_state(), got = s.get_state();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(std::memcmp(want[i].second.raw_data(), got[i].second.raw_data(), want[i].second.nbytes()), 0)
        << want[i].first;
}

// A bool feed whose bytes are not 0 or 1 (a uint8 buffer viewed as bool) is refused naming the
// input and the byte; bools read from a model's raw_data are normalized (nonzero is true), as
// numpy reads them.
TEST(BadInput, BoolBytesOtherThanZeroOrOne) {
  ir::Model m;
  m.opsets = {{"", 17}};
  m.graph = std::make_shared<ir::Graph>();
  auto& g = *m.graph;
  g.inputs = {ir::ValueInfo{"b", ir::TypeInfo::tensor(DType::kBool, {3}), ""}};
  g.nodes = {make_node("Not", {"b"}, {"y"})};
  g.outputs = {ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kBool, {3}), ""}};
  const std::string bytes = ir::serialize_model(m);
  InferenceSession s(bytes.data(), bytes.size());
  Tensor t = Tensor::empty(DType::kBool, {3});
  const uint8_t raw[3] = {0, 1, 255};
  std::memcpy(t.raw_data(), raw, 3);
  const Failure f = failure_of([&] { s.run({}, {{"b", t}}); });
  EXPECT_EQ(f.code, int(ErrorCode::kInvalidArgument));
  const std::string& msg = f.message;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("255"), std::string::npos) << msg;
  // The same bytes as a TensorProto's raw_data load as {false, true, true}.
  Tensor ok = Tensor::empty(DType::kBool, {3});
  const uint8_t norm[3] = {0, 1, 1};
  std::memcpy(ok.raw_data(), norm, 3);
  std::string proto = ir::serialize_tensor(ok, "b");
  const size_t at = proto.find(std::string("\x00\x01\x01", 3));
  ASSERT_NE(at, std::string::npos);
  proto[at + 2] = char(255);
  Tensor loaded = ir::load_tensor_bytes(proto.data(), proto.size(), "b");
  const auto* lb = static_cast<const uint8_t*>(loaded.raw_data());
  EXPECT_EQ(lb[0], 0);
  EXPECT_EQ(lb[1], 1);
  EXPECT_EQ(lb[2], 1);
  std::vector<Tensor> y = s.run({}, {{"b", loaded}});
  const auto* yb = static_cast<const uint8_t*>(y[0].raw_data());
  EXPECT_EQ(yb[0], 1);
  EXPECT_EQ(yb[1], 0);
  EXPECT_EQ(yb[2], 0);
}

namespace {

// One com.onnxtrain collective node between declared float inputs and outputs, serialized.
std::string collective_model(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                             std::vector<ir::Attribute> attrs, bool in_a_function) {
  ir::Model m;
  m.opsets = {{"", 17}, {"com.onnxtrain", 1}};
  m.graph = std::make_shared<ir::Graph>();
  for (const auto& i : ins) m.graph->inputs.push_back(ot_test::value_info(i, i == "token" ? DType::kInt64 : DType::kFloat32, {4}));
  ir::Node n = make_node(op, ins, outs, std::move(attrs), "com.onnxtrain");
  n.name = "hostile";
  if (in_a_function) {  // inside an If branch: subgraphs are checked too
    auto body = std::make_shared<ir::Graph>();
    body->nodes.push_back(n);
    for (const auto& o : outs) body->outputs.push_back(ot_test::value_info(o, DType::kFloat32, {4}));
    m.graph->inputs.push_back(ot_test::value_info("cond", DType::kBool, {}));
    ir::Node branch = make_node("If", {"cond"}, outs, {ot_test::attr_graph("then_branch", body), ot_test::attr_graph("else_branch", body)});
    m.graph->nodes.push_back(branch);
  } else {
    m.graph->nodes.push_back(n);
  }
  for (const auto& o : outs) m.graph->outputs.push_back(ot_test::value_info(o, DType::kFloat32, {4}));
  return ir::serialize_model(m);
}

}  // namespace

TEST(BadInput, DataParallelCollectivesInAModelAreRefusedAtLoad) {
  // GradientReduceStart/Wait and ZeroAllGather exchange buffers with other ranks' plans: only a
  // TrainingSession places them, in the graph it builds. From a file or bytes, every surface
  // refuses them at load, naming the node (before: they ran, trusted their inputs' sizes and
  // copied heap bytes into outputs, or waited for the communication timeout and ended the process).
  struct Case {
    std::string op;
    std::vector<std::string> ins, outs;
    std::vector<ir::Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {"GradientReduceStart", {"c", "G"}, {"token"}, {}},
      {"GradientReduceWait", {"token", "G"}, {"R"}, {}},
      {"ZeroAllGather", {"P", "W"}, {"W2"}, {ot_test::attr_int("pieces", 1)}},
  };
  TempDir dir;
  for (const auto& c : cases)
    for (bool nested : {false, true}) {
      const std::string bytes = collective_model(c.op, c.ins, c.outs, c.attrs, nested);
      const std::string want = "node 'hostile': com.onnxtrain." + c.op + " is internal to data-parallel training";
      const std::string e1 = ot_test::thrown_by([&] { InferenceSession s(bytes.data(), bytes.size()); });
      EXPECT_NE(e1.find(want), std::string::npos) << e1;
      const std::string path = dir.path + "/m.onnx";
      std::ofstream(path, std::ios::binary) << bytes;
      const std::string e2 = ot_test::thrown_by([&] { InferenceSession s(path); });
      EXPECT_NE(e2.find(want), std::string::npos) << e2;
      TrainingParameters p;
      p.loss_output_name = c.outs[0];
      const std::string e3 = ot_test::thrown_by([&] { TrainingSession s(bytes.data(), bytes.size(), p); });
      EXPECT_NE(e3.find(want), std::string::npos) << e3;
      const std::string e4 = ot_test::thrown_by([&] { GradientGraphBuilder(bytes, {}, {}, c.outs[0]); });
      EXPECT_NE(e4.find(want), std::string::npos) << e4;
    }
}

TEST(BadInput, GradientReduceWaitRefusesATokenNoStartIssued) {
  // The kernel itself (reachable only from graphs a session built): a token no Start of this run
  // issued fails at once, before any wait on the communicator.
  ot_test::RunOptions o;
  o.domain = "com.onnxtrain";
  o.opset = 1;
  const std::string e = ot_test::thrown_by([&] {
    ot_test::run_node("GradientReduceWait", {Tensor::from_vector<int64_t>({1}, {424242}), Tensor::zeros(DType::kFloat32, {4})}, {}, o);
  });
  EXPECT_NE(e.find("no reduction in flight for token 424242"), std::string::npos) << e;
}
