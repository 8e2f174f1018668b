// Saving models with external data: where every byte lands (read back with protobuf and plain
// file reads, not with our loader), bit-identical loads, ONNX's checker, auto mode, and failures
// that leave no half-written file behind.
// ONNX's parser.h (through checker.h) names an enum value MAP_TYPE, a macro of <sys/mman.h>:
// it comes first.
#include <onnx/checker.h>

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "ir/onnx_io.h"
#include "ir/proto.h"
#include "test_util.h"

using namespace onnxtrain;
using ot_test::list_dir;
using ot_test::slurp;
using ot_test::TempDir;
using ot_test::write_text;

namespace {

// Bytes [offset, offset + length) of a file.
std::string file_range(const std::string& path, uint64_t offset, uint64_t length) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(std::streamoff(offset));
  std::string s(length, '\0');
  f.read(s.data(), std::streamsize(length));
  return f.gcount() == std::streamsize(length) ? s : std::string();
}

// A tensor whose bytes come from a seeded generator (strings: fixed words).
Tensor pattern(DType dt, const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(dt, shape);
  if (dt == DType::kString) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<std::string>()[i] = "word" + std::to_string(i + seed);
    return t;
  }
  std::mt19937 rng(seed);
  auto* b = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) b[i] = static_cast<unsigned char>(rng());
  if (dt == DType::kBool)
    for (size_t i = 0; i < t.nbytes(); ++i) b[i] &= 1;
  return t;
}

std::string bytes_of(const Tensor& t) {
  if (t.dtype() != DType::kString) return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
  std::string s;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.data<std::string>()[i] + '\0';
  return s;
}

// Every initializer is returned through an Identity node (so that ONNX's checker sees them used);
// an If node holds two more initializers in its branches.
ir::Model model_with(const std::vector<std::pair<std::string, Tensor>>& inits,
                     const std::vector<std::pair<std::string, Tensor>>& branch_inits = {}) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = 17;
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.name = "g";
  for (const auto& [name, t] : inits) {
    g.initializers.emplace_back(name, t);
    ir::Node n;
    n.op_type = "Identity";
    n.name = "id_" + name;
    n.inputs = {name};
    n.outputs = {name + "_out"};
    g.nodes.push_back(n);
    g.outputs.push_back({name + "_out", ir::TypeInfo::tensor(t.dtype(), t.shape()), ""});
  }
  if (!branch_inits.empty()) {
    g.inputs.push_back({"cond", ir::TypeInfo::tensor(DType::kBool, {}), ""});
    ir::Node n;
    n.op_type = "If";
    n.name = "if0";
    n.inputs = {"cond"};
    n.outputs = {"branch_out"};
    for (size_t b = 0; b < 2; ++b) {
      const auto& [name, t] = branch_inits[b];
      auto sg = std::make_shared<ir::Graph>();
      sg->name = b == 0 ? "then" : "else";
      sg->initializers.emplace_back(name, t);
      ir::Node id;
      id.op_type = "Identity";
      id.inputs = {name};
      id.outputs = {sg->name + "_out"};
      sg->nodes.push_back(id);
      sg->outputs.push_back({sg->name + "_out", ir::TypeInfo::tensor(t.dtype(), t.shape()), ""});
      n.attrs.push_back(ot_test::attr_graph(b == 0 ? "then_branch" : "else_branch", sg));
    }
    g.nodes.push_back(n);
    const Tensor& t0 = branch_inits[0].second;
    g.outputs.push_back({"branch_out", ir::TypeInfo::tensor(t0.dtype(), t0.shape()), ""});
  }
  return m;
}

// The initializers of a graph and its subgraphs, by name.
void collect(const ir::Graph& g, std::map<std::string, const Tensor*>& out) {
  for (const auto& [n, t] : g.initializers) out[n] = &t;
  for (const auto& n : g.nodes)
    for (const ir::Graph* sg : n.subgraphs()) collect(*sg, out);
}

void collect(const onnx::GraphProto& g, std::map<std::string, const onnx::TensorProto*>& out) {
  for (const auto& t : g.initializer()) out[t.name()] = &t;
  for (const auto& n : g.node())
    for (const auto& a : n.attribute())
      if (a.has_g()) collect(a.g(), out);
}

onnx::ModelProto parse_file(const std::string& path) {
  onnx::ModelProto p;
  const std::string bytes = slurp(path);
  EXPECT_TRUE(p.ParseFromString(bytes)) << path;
  return p;
}

std::map<std::string, std::string> external_entries(const onnx::TensorProto& t) {
  std::map<std::string, std::string> kv;
  for (const auto& e : t.external_data()) kv[e.key()] = e.value();
  return kv;
}

}  // namespace

TEST(ExternalData, ForcedRoundTripPutsEveryByteAtItsOffset) {
  TempDir d;
  const std::vector<std::pair<std::string, Tensor>> inits = {
      {"f32", pattern(DType::kFloat32, {3, 5}, 1)},     // 60 bytes
      {"big", pattern(DType::kFloat32, {1250}, 2)},     // 5000 bytes: page-aligned
      {"f64", pattern(DType::kFloat64, {7}, 3)},        // 56
      {"i64", pattern(DType::kInt64, {4}, 4)},          // 32
      {"f16", pattern(DType::kFloat16, {5}, 5)},        // 10: under the threshold, inline
      {"bf16", pattern(DType::kBFloat16, {9}, 6)},      // 18
      {"flags", pattern(DType::kBool, {20}, 7)},        // 20
      {"u8", pattern(DType::kUInt8, {3}, 8)},           // 3: inline
      {"words", pattern(DType::kString, {2}, 9)},       // strings: always inline
      {"nothing", pattern(DType::kFloat32, {0, 3}, 10)} // empty: inline
  };
  const std::vector<std::pair<std::string, Tensor>> branch = {{"then_w", pattern(DType::kFloat32, {300}, 11)},
                                                             {"else_w", pattern(DType::kFloat32, {300}, 12)}};
  const ir::Model m = model_with(inits, branch);
  const std::string path = d.path + "/m.onnx";
  ModelSaveOptions o;
  o.external_data = ExternalData::kAlways;
  o.threshold = 16;
  ir::save_model(m, path, o);
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx", "m.onnx.data"}));

  // Where the bytes are, read with protobuf and plain file reads.
  std::map<std::string, Tensor> expected(inits.begin(), inits.end());
  for (const auto& [n, t] : branch) expected[n] = t;
  const onnx::ModelProto p = parse_file(path);
  std::map<std::string, const onnx::TensorProto*> protos;
  collect(p.graph(), protos);
  ASSERT_EQ(protos.size(), expected.size());
  const std::string data = d.path + "/m.onnx.data";
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, t] : expected) {
    const onnx::TensorProto& tp = *protos.at(name);
    const bool external = t.dtype() != DType::kString && t.nbytes() >= 16;
    ASSERT_EQ(tp.data_location() == onnx::TensorProto::EXTERNAL, external) << name;
    if (!external) {
      EXPECT_EQ(tp.external_data_size(), 0) << name;
      continue;
    }
    EXPECT_FALSE(tp.has_raw_data()) << name;
    auto kv = external_entries(tp);
    EXPECT_EQ(kv["location"], "m.onnx.data") << name;
    const uint64_t offset = std::stoull(kv["offset"]), length = std::stoull(kv["length"]);
    EXPECT_EQ(length, t.nbytes()) << name;
    EXPECT_EQ(offset % (t.nbytes() >= 4096 ? 4096 : 64), 0u) << name << " at offset " << offset;
    EXPECT_EQ(file_range(data, offset, length), bytes_of(t)) << name << ": bytes at the recorded offset";
    ranges.emplace_back(offset, offset + length);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "ranges overlap";
  struct stat st;
  ASSERT_EQ(stat(data.c_str(), &st), 0);
  EXPECT_EQ(uint64_t(st.st_size), ranges.back().second) << "the data file ends with the last tensor";

  // Our loader gives the same tensors, bit for bit.
  const ir::Model back = ir::load_model_file(path);
  std::map<std::string, const Tensor*> loaded;
  collect(*back.graph, loaded);
  ASSERT_EQ(loaded.size(), expected.size());
  for (const auto& [name, t] : expected) {
    ASSERT_TRUE(loaded.count(name)) << name;
    EXPECT_EQ(loaded[name]->dtype(), t.dtype()) << name;
    EXPECT_EQ(loaded[name]->shape(), t.shape()) << name;
    EXPECT_EQ(bytes_of(*loaded[name]), bytes_of(t)) << name;
  }

  // ONNX's checker, given the path (it then checks the external data files too).
  EXPECT_NO_THROW(onnx::checker::check_model(path));
}

TEST(ExternalData, LocationOptionNamesTheDataFile) {
  TempDir d;
  const Tensor w = pattern(DType::kFloat32, {600}, 3);
  ModelSaveOptions o;
  o.external_data = ExternalData::kAlways;
  o.location = "weights.bin";
  ir::save_model(model_with({{"w", w}}), d.path + "/m.onnx", o);
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx", "weights.bin"}));
  const onnx::ModelProto p = parse_file(d.path + "/m.onnx");
  auto kv = external_entries(p.graph().initializer(0));
  EXPECT_EQ(kv["location"], "weights.bin");
  EXPECT_EQ(kv["offset"], "0");
  EXPECT_EQ(slurp(d.path + "/weights.bin"), bytes_of(w));
  EXPECT_EQ(bytes_of(*ir::load_model_file(d.path + "/m.onnx").graph->initializer("w")), bytes_of(w));
  // Saving again over both files replaces them.
  const Tensor w2 = pattern(DType::kFloat32, {600}, 4);
  ir::save_model(model_with({{"w", w2}}), d.path + "/m.onnx", o);
  EXPECT_EQ(slurp(d.path + "/weights.bin"), bytes_of(w2));
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx", "weights.bin"}));
}

TEST(ExternalData, AutoAndNeverKeepSmallModelsInline) {
  TempDir d;
  const Tensor w = pattern(DType::kFloat32, {100000}, 5);  // 400 KB, far under 2 GiB
  const ir::Model m = model_with({{"w", w}});
  for (ExternalData mode : {ExternalData::kAuto, ExternalData::kNever}) {
    ModelSaveOptions o;
    o.external_data = mode;
    ir::save_model(m, d.path + "/m.onnx", o);
    EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx"}));
    const onnx::ModelProto p = parse_file(d.path + "/m.onnx");
    EXPECT_NE(p.graph().initializer(0).data_location(), onnx::TensorProto::EXTERNAL);
    EXPECT_EQ(p.graph().initializer(0).raw_data(), bytes_of(w));
    EXPECT_EQ(slurp(d.path + "/m.onnx"), ir::serialize_model(m)) << "the file is the serialized model";
  }
  // Always with nothing over the threshold: inline too, and no data file.
  ModelSaveOptions o;
  o.external_data = ExternalData::kAlways;
  o.threshold = 1 << 20;
  ir::save_model(m, d.path + "/m.onnx", o);
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx"}));
}

TEST(ExternalData, BadLocationsAreRefusedBeforeWriting) {
  TempDir d;
  const ir::Model m = model_with({{"w", pattern(DType::kFloat32, {600}, 6)}});
  for (const std::string loc : {"../w.bin", "sub/w.bin", "/tmp/w.bin", "..", "m.onnx"}) {
    ModelSaveOptions o;
    o.external_data = ExternalData::kAlways;
    o.location = loc;
    try {
      ir::save_model(m, d.path + "/m.onnx", o);
      ADD_FAILURE() << "location '" << loc << "' was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + loc + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(ir::save_model(m, d.path + "/", {ExternalData::kAlways, 16, ""}), InvalidArgument);
  EXPECT_TRUE(list_dir(d.path).empty());
}

TEST(ExternalData, FailuresLeaveNothingHalfWritten) {
  TempDir d;
  const ir::Model m = model_with({{"w", pattern(DType::kFloat32, {600}, 7)}});
  ModelSaveOptions o;
  o.external_data = ExternalData::kAlways;

  // Missing folder: nothing is created anywhere.
  try {
    ir::save_model(m, d.path + "/missing/m.onnx", o);
    ADD_FAILURE() << "saved into a missing folder";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("missing/m.onnx.data"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(list_dir(d.path).empty());

  // The data file's place is taken by a folder: the previous model is kept, no temporary remains.
  write_text(d.path + "/m.onnx", "previous model");
  ASSERT_EQ(mkdir((d.path + "/m.onnx.data").c_str(), 0755), 0);
  EXPECT_THROW(ir::save_model(m, d.path + "/m.onnx", o), IOError);
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx", "m.onnx.data"}));
  EXPECT_EQ(slurp(d.path + "/m.onnx"), "previous model");
  rmdir((d.path + "/m.onnx.data").c_str());
  unlink((d.path + "/m.onnx").c_str());

  // The model's place is taken by a folder: the data file went in first and is rolled back, to
  // the previous data file when there was one, to nothing when there was none.
  ASSERT_EQ(mkdir((d.path + "/m.onnx").c_str(), 0755), 0);
  write_text(d.path + "/m.onnx.data", "previous data");
  EXPECT_THROW(ir::save_model(m, d.path + "/m.onnx", o), IOError);
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx", "m.onnx.data"}));
  EXPECT_EQ(slurp(d.path + "/m.onnx.data"), "previous data");
  unlink((d.path + "/m.onnx.data").c_str());
  EXPECT_THROW(ir::save_model(m, d.path + "/m.onnx", o), IOError);
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx"}));
}

TEST(ExternalData, FullDiskMidWriteLeavesPreviousFiles) {
  // A file size limit makes write() fail part way through the data file, as a full disk would
  // (in a forked child: the limit must not reach the rest of the suite).
  TempDir d;
  write_text(d.path + "/m.onnx", "previous model");
  write_text(d.path + "/m.onnx.data", "previous data");
  const ir::Model m = model_with({{"w", pattern(DType::kFloat32, {100000}, 8)}});  // 400 KB
  auto child = [&] {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 << 10, 64 << 10};
    setrlimit(RLIMIT_FSIZE, &lim);
    int code = 0;
    try {
      ir::save_model(m, d.path + "/m.onnx", {ExternalData::kAlways, 1024, ""});
      code = 2;
    } catch (const IOError& e) {
      if (std::string(e.what()).find("m.onnx.data") == std::string::npos) code = 3;
    }
    if (list_dir(d.path) != std::set<std::string>{"m.onnx", "m.onnx.data"}) code = 4;
    if (slurp(d.path + "/m.onnx") != "previous model" || slurp(d.path + "/m.onnx.data") != "previous data") code = 5;
    _exit(code);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(ExternalData, Over2GiBGoesExternalInAutoModeAndSerializeRefuses) {
  // 2.1 GiB of weights as a view of untouched anonymous memory: reading it yields zeros without
  // making it resident, so only the data file costs (disk) space.
  const uint64_t n = (uint64_t(2) << 30) / 4 + (uint64_t(100) << 20) / 4;
  struct statvfs fs;
  if (statvfs("/tmp", &fs) != 0 || uint64_t(fs.f_bavail) * fs.f_frsize < n * 4 + (uint64_t(2) << 30))
    GTEST_SKIP() << "needs 4.2 GB free in /tmp";
  void* mem = mmap(nullptr, n * 4, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  std::shared_ptr<void> unmap(mem, [=](void* p) { munmap(p, n * 4); });
  const Tensor big = Tensor::wrap(DType::kFloat32, {int64_t(n)}, mem, unmap);
  const Tensor small = pattern(DType::kFloat32, {100}, 9);  // under the default threshold: stays inline
  const ir::Model m = model_with({{"big", big}, {"small", small}});

  try {
    ir::serialize_model(m);
    ADD_FAILURE() << "a model over 2 GiB was serialized";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("2 GiB"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("external data"), std::string::npos) << e.what();
  }

  TempDir d;
  ir::save_model(m, d.path + "/m.onnx");  // auto
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"m.onnx", "m.onnx.data"}));
  const onnx::ModelProto p = parse_file(d.path + "/m.onnx");
  ASSERT_EQ(p.graph().initializer_size(), 2);
  EXPECT_EQ(p.graph().initializer(0).data_location(), onnx::TensorProto::EXTERNAL);
  auto kv = external_entries(p.graph().initializer(0));
  EXPECT_EQ(kv["location"], "m.onnx.data");
  EXPECT_EQ(kv["length"], std::to_string(n * 4));
  EXPECT_EQ(p.graph().initializer(1).raw_data(), bytes_of(small));
  struct stat st;
  ASSERT_EQ(stat((d.path + "/m.onnx.data").c_str(), &st), 0);
  EXPECT_EQ(uint64_t(st.st_size), n * 4);
  EXPECT_EQ(file_range(d.path + "/m.onnx.data", n * 4 - 8, 8), std::string(8, '\0'));
  EXPECT_LT(slurp(d.path + "/m.onnx").size(), 4096u);
}
