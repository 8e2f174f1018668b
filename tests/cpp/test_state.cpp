// CheckpointState in onnxruntime's checkpoint format (ODTC): round trips of every kind of content
// (trainable and frozen parameters, optimizer groups, properties, nominal states, external data),
// and hostile files built field by field with the FlatBuffers builder: each refused with an error
// naming what is wrong. The layout itself is checked independently by
// tests/python/test_ort_checkpoint.py (a reader and a writer of its own) and onnxruntime-web.
#include <cstring>
#include <fstream>

#include "odtc_generated.h"
#include "onnxtrain/state.h"
#include "test_util.h"

using namespace onnxtrain;
using ot_test::TempDir;
namespace fb = onnxtrain::odtc;

namespace {

CheckpointState sample_state() {
  CheckpointState s;
  s.parameters["fc1.weight"] = {DType::kFloat32, Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}), true, {}, {}};
  s.parameters["fc1.bias"] = {DType::kFloat32, Tensor::from_vector<float>({2}, {-1, 0.5f}), true, {}, {}};
  s.parameters["bn.running_mean"] = {DType::kFloat64, Tensor::from_vector<double>({2}, {0.25, 7}), false, {}, {}};
  s.parameters["steps"] = {DType::kInt64, Tensor::from_vector<int64_t>({}, {42}), false, {}, {}};
  OptimizerGroup& g = s.optimizer_groups["group0"];
  g.step = 5;
  g.initial_learning_rate = 0.01f;
  g.learning_rate = 0.002f;
  g.states["fc1.weight"]["momentum0"] = Tensor::from_vector<float>({2, 3}, {.1f, .2f, .3f, .4f, .5f, .6f});
  g.states["fc1.weight"]["momentum1"] = Tensor::from_vector<float>({2, 3}, {1, 1, 2, 2, 3, 3});
  g.states["fc1.bias"]["momentum0"] = Tensor::from_vector<float>({2}, {9, 8});
  g.states["fc1.bias"]["momentum1"] = Tensor::from_vector<float>({2}, {7, 6});
  s.properties["epoch"] = int64_t(3);
  s.properties["best_score"] = 0.75f;
  s.properties["note"] = std::string("from a test");
  return s;
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  EXPECT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << what;
}

void expect_same_parameters(const CheckpointState& a, const CheckpointState& b) {
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (const auto& [name, p] : a.parameters) {
    const Parameter& q = b.parameter(name);
    EXPECT_EQ(p.requires_grad, q.requires_grad) << name;
    EXPECT_EQ(p.dtype, q.dtype) << name;
    expect_same_tensor(p.data, q.data, name);
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A checkpoint whose one trainable tensor is given field by field (the hostile files).
std::string one_tensor_checkpoint(int32_t version, const std::vector<int64_t>& dims, int32_t dtype,
                                  const std::vector<uint8_t>& raw, int64_t external_offset = -1,
                                  bool has_external = false) {
  flatbuffers::FlatBufferBuilder b;
  const auto t = fb::CreateTensorDirect(b, "w", nullptr, &dims, dtype, raw.empty() ? nullptr : &raw, nullptr,
                                        external_offset);
  std::vector<flatbuffers::Offset<fb::Tensor>> ts{t};
  const auto m = fb::CreateModuleStateDirect(b, &ts, nullptr, false, has_external);
  fb::FinishCheckpointBuffer(b, fb::CreateCheckpoint(b, version, m));
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

std::vector<uint8_t> float_bytes(std::vector<float> v) {
  std::vector<uint8_t> r(v.size() * 4);
  std::memcpy(r.data(), v.data(), r.size());
  return r;
}

}  // namespace

TEST(CheckpointState, RoundTripsParametersOptimizerStateAndProperties) {
  TempDir dir;
  const CheckpointState s = sample_state();
  s.save(dir.path + "/ckpt", {.include_optimizer_state = true});
  const CheckpointState r = CheckpointState::load(dir.path + "/ckpt");
  EXPECT_FALSE(r.nominal);
  expect_same_parameters(s, r);
  ASSERT_EQ(r.optimizer_groups.size(), 1u);
  const OptimizerGroup& g = r.optimizer_groups.at("group0");
  EXPECT_EQ(g.step, 5);
  EXPECT_EQ(g.initial_learning_rate, 0.01f);
  EXPECT_EQ(g.learning_rate, 0.001f) << "onnxruntime's format does not store the current learning rate";
  for (const auto& [pname, named] : s.optimizer_groups.at("group0").states)
    for (const auto& [sname, t] : named) expect_same_tensor(t, g.states.at(pname).at(sname), pname + "/" + sname);
  EXPECT_EQ(std::get<int64_t>(r.properties.at("epoch")), 3);
  EXPECT_EQ(std::get<float>(r.properties.at("best_score")), 0.75f);
  EXPECT_EQ(std::get<std::string>(r.properties.at("note")), "from a test");
}

TEST(CheckpointState, OptimizerStateIsLeftOutUnlessAsked) {
  TempDir dir;
  sample_state().save(dir.path + "/ckpt");
  const CheckpointState r = CheckpointState::load(dir.path + "/ckpt");
  EXPECT_TRUE(r.optimizer_groups.empty());
  EXPECT_EQ(r.parameters.size(), 4u);
  EXPECT_EQ(r.properties.size(), 3u);
}

TEST(CheckpointState, BufferRoundTripAndStrings) {
  CheckpointState s = sample_state();
  Tensor words = Tensor::empty(DType::kString, {2});
  words.data<std::string>()[0] = "alpha";
  words.data<std::string>()[1] = "";
  s.parameters["vocab"] = {DType::kString, words, false, {}, {}};
  const std::string bytes = s.save_to_buffer(true);
  EXPECT_EQ(bytes.substr(4, 4), "ODTC");
  const CheckpointState r = CheckpointState::load_from_buffer(bytes.data(), bytes.size());
  const Tensor& v = r.parameter("vocab").data;
  ASSERT_EQ(v.numel(), 2);
  EXPECT_EQ(v.data<std::string>()[0], "alpha");
  EXPECT_EQ(v.data<std::string>()[1], "");
  EXPECT_EQ(r.optimizer_groups.at("group0").states.size(), 2u);
}

TEST(CheckpointState, NominalStateKeepsNamesAndTypesOnly) {
  TempDir dir;
  CheckpointState s = sample_state();
  s.nominal = true;
  s.save(dir.path + "/nominal", {.include_optimizer_state = true});
  const CheckpointState r = CheckpointState::load(dir.path + "/nominal");
  EXPECT_TRUE(r.nominal);
  ASSERT_EQ(r.parameters.size(), 4u);
  EXPECT_EQ(r.parameter("bn.running_mean").dtype, DType::kFloat64);
  EXPECT_FALSE(r.parameter("fc1.weight").data.defined());
  EXPECT_EQ(r.parameter("fc1.weight").nominal_shape, (Shape{2, 3}));
  EXPECT_EQ(r.parameter("steps").nominal_shape, Shape{});
  EXPECT_TRUE(r.parameter("fc1.weight").requires_grad);
  EXPECT_FALSE(r.parameter("steps").requires_grad);
  // A nominal state is small whatever the parameters' sizes.
  EXPECT_LT(read_bytes(dir.path + "/nominal").size(), 2000u);
}

TEST(CheckpointState, ExternalDataGoesToTheSidecarAligned) {
  TempDir dir;
  const CheckpointState s = sample_state();
  s.save(dir.path + "/big", {.include_optimizer_state = true, .external_data_threshold = 1});
  const std::string sidecar = read_bytes(dir.path + "/big.data");
  // Sorted names: bn.running_mean (16 bytes, double) first, at 0; the float tensors follow.
  ASSERT_GE(sidecar.size(), 16u);
  double first;
  std::memcpy(&first, sidecar.data(), 8);
  EXPECT_EQ(first, 0.25);
  const CheckpointState r = CheckpointState::load(dir.path + "/big");
  expect_same_parameters(s, r);
  expect_same_tensor(s.optimizer_groups.at("group0").states.at("fc1.weight").at("momentum1"),
                     r.optimizer_groups.at("group0").states.at("fc1.weight").at("momentum1"), "momentum1");
  // The FlatBuffer itself then holds no tensor bytes.
  EXPECT_LT(read_bytes(dir.path + "/big").size(), read_bytes(dir.path + "/big.data").size() + 1500);
}

TEST(CheckpointState, HostileFilesAreRefusedNamingTheProblem) {
  auto refused = [](const std::string& bytes, const std::string& want) {
    try {
      CheckpointState::load_from_buffer(bytes.data(), bytes.size());
      ADD_FAILURE() << "accepted; expected an error containing: " << want;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused("", "no \"ODTC\" identifier");
  refused(std::string("\x08\0\0\0ORTM\0\0\0\0", 12), "no \"ODTC\" identifier");
  const std::string good = one_tensor_checkpoint(2, {2}, 1, float_bytes({1, 2}));
  EXPECT_EQ(CheckpointState::load_from_buffer(good.data(), good.size()).parameter("w").data.data<float>()[1], 2.f);
  refused(good.substr(0, good.size() / 2), "does not verify");
  refused(one_tensor_checkpoint(0, {2}, 1, float_bytes({1, 2})), "format version 0 is not supported");
  // Version 1 (onnxruntime 1.16: the same tables before the nominal flag) loads.
  const std::string v1 = one_tensor_checkpoint(1, {2}, 1, float_bytes({3, 4}));
  EXPECT_EQ(CheckpointState::load_from_buffer(v1.data(), v1.size()).parameter("w").data.data<float>()[0], 3.f);
  refused(one_tensor_checkpoint(3, {2}, 1, float_bytes({1, 2})), "format version 3 is not supported");
  refused(one_tensor_checkpoint(2, {3}, 1, float_bytes({1, 2})), "holds 8 bytes");
  refused(one_tensor_checkpoint(2, {-1}, 1, {}), "invalid dims");
  refused(one_tensor_checkpoint(2, {int64_t(1) << 40, int64_t(1) << 40}, 1, {}), "invalid dims");
  refused(one_tensor_checkpoint(2, {2}, 99, float_bytes({1, 2})), "element type 99");
  refused(one_tensor_checkpoint(2, {2}, 0, float_bytes({1, 2})), "element type 0");
  refused(one_tensor_checkpoint(2, {2}, 1, {}, 0, true), "external data, but the checkpoint was given as bytes");
  // Every single-byte corruption is either refused with InvalidArgument or loads (a value byte):
  // the verifier checks every offset before a field is read (the sanitizer build watches).
  int refusals = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = char(bad[i] ^ 0xff);
    try {
      CheckpointState::load_from_buffer(bad.data(), bad.size());
    } catch (const InvalidArgument&) {
      ++refusals;
    }
  }
  EXPECT_GT(refusals, int(good.size()) / 4);
}

TEST(CheckpointState, ExternalDataPastTheSidecarIsRefused) {
  TempDir dir;
  const std::string path = dir.path + "/ext";
  const std::string bytes = one_tensor_checkpoint(2, {4}, 1, {}, 8, true);
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  try {
    CheckpointState::load(path);
    ADD_FAILURE() << "loaded without its sidecar";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("ext.data"), std::string::npos) << e.what();
  }
  std::ofstream(path + ".data", std::ios::binary).write("0123456789abcdef", 16);  // 16 bytes: [8, 24) is past
  try {
    CheckpointState::load(path);
    ADD_FAILURE() << "read past the sidecar";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lies at bytes [8, 24)"), std::string::npos) << e.what();
  }
}

TEST(CheckpointState, InconsistentStatesAreRefusedOnSaveAndLoad) {
  TempDir dir;
  CheckpointState s = sample_state();
  s.optimizer_groups["group0"].states["fc1.bias"]["momentum0"] = Tensor::from_vector<float>({3}, {1, 2, 3});
  EXPECT_THROW(s.save(dir.path + "/x", {.include_optimizer_state = true}), InvalidArgument);
  s = sample_state();
  s.optimizer_groups["group0"].states["ghost"]["momentum0"] = Tensor::from_vector<float>({1}, {1});
  EXPECT_THROW(s.save(dir.path + "/x", {.include_optimizer_state = true}), InvalidArgument);
  s = sample_state();
  s.parameters["empty"] = {DType::kFloat32, Tensor(), true, {}, {}};
  EXPECT_THROW(s.save(dir.path + "/x"), InvalidArgument);
  EXPECT_THROW(s.parameter("missing"), InvalidArgument);
  EXPECT_THROW(CheckpointState::load(dir.path + "/none"), NoSuchFile);
  EXPECT_THROW(CheckpointState::load(dir.path), IOError);
  // A parameter written both as trainable and frozen.
  flatbuffers::FlatBufferBuilder b;
  const std::vector<int64_t> dims{1};
  const auto raw = float_bytes({1});
  std::vector<flatbuffers::Offset<fb::Tensor>> t1{fb::CreateTensorDirect(b, "w", nullptr, &dims, 1, &raw)};
  std::vector<flatbuffers::Offset<fb::Tensor>> t2{fb::CreateTensorDirect(b, "w", nullptr, &dims, 1, &raw)};
  fb::FinishCheckpointBuffer(b, fb::CreateCheckpoint(b, 2, fb::CreateModuleStateDirect(b, &t1, &t2)));
  try {
    CheckpointState::load_from_buffer(b.GetBufferPointer(), b.GetSize());
    ADD_FAILURE() << "accepted a duplicated parameter";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'w' appears twice"), std::string::npos) << e.what();
  }
}
