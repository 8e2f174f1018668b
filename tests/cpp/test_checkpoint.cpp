// Checkpoint format: files over 2 GiB (64-bit offsets), every tensor verified on load.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "test_util.h"
#include "onnxtrain/checkpoint.h"
#include "onnxtrain/error.h"
#include "train/checkpoint.h"

using namespace onnxtrain;

TEST(Checkpoint, FilesOver2GiBRoundTrip) {
  char tmpl[] = "/tmp/onnxtrain_ckpt_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/big.ckpt";
  train::Checkpoint c;
  c.fingerprint = "fp";
  c.counters["step"] = 7;
  // 2.25 GiB tensor followed by a small one: the second's offset only fits in 64 bits.
  const int64_t n = (int64_t(9) << 28) / 4;
  Tensor big = Tensor::empty(DType::kFloat32, {n});
  float* p = big.data<float>();
  for (int64_t i = 0; i < n; i += 4096) p[i] = float(i % 1000);
  for (int64_t i = 0; i < n; ++i)
    if (i % 4096) p[i] = 0.f;
  p[n - 1] = 42.f;
  c.tensors.emplace_back("big", big);
  c.tensors.emplace_back("small", Tensor::from_vector<int64_t>({3}, {1, 2, 3}));
  train::write_checkpoint(path, c);
  train::Checkpoint r = train::read_checkpoint(path);
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
  ASSERT_EQ(r.tensors.size(), 2u);
  EXPECT_EQ(r.counters["step"], 7);
  EXPECT_EQ(r.tensors[0].second.numel(), n);
  EXPECT_EQ(std::memcmp(r.tensors[0].second.raw_data(), big.raw_data(), big.nbytes()), 0);
  EXPECT_EQ(r.tensors[1].second.data<int64_t>()[2], 3);
}

// CheckpointFile: what a trainer outside a session stores in the container comes back as given.
TEST(Checkpoint, FileOfAnotherWriterRoundTripsAndChecksNames) {
  char tmpl[] = "/tmp/onnxtrain_ckpt_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/f.ckpt";
  CheckpointFile f;
  f.kind = "some.trainer";
  f.counters["n"] = -5;
  f.text["index"] = "{\"a\": 1}";
  f.tensors.emplace_back("z/first", Tensor::from_vector<int64_t>({2}, {7, -8}));
  f.tensors.emplace_back("a/second", Tensor::scalar<double>(2.5));
  f.tensors.emplace_back("empty", Tensor::zeros(DType::kFloat32, {0, 3}));
  write_checkpoint_file(path, f);
  const CheckpointFile r = read_checkpoint_file(path);
  EXPECT_EQ(r.kind, "some.trainer");
  EXPECT_EQ(r.counters, f.counters);
  EXPECT_EQ(r.text, f.text);  // "kind" is not text
  ASSERT_EQ(r.tensors.size(), 3u);
  EXPECT_EQ(r.tensors[0].first, "z/first");  // in the order written
  EXPECT_EQ(r.tensors[0].second.data<int64_t>()[1], -8);
  EXPECT_EQ(r.tensors[1].second.shape(), Shape{});
  EXPECT_EQ(r.tensors[1].second.data<double>()[0], 2.5);
  EXPECT_EQ(r.tensors[2].second.shape(), (Shape{0, 3}));
  CheckpointFile bad = f;
  bad.tensors.emplace_back("z/first", Tensor::scalar<double>(1));
  EXPECT_THROW(write_checkpoint_file(dir + "/dup", bad), InvalidArgument);
  bad = f;
  bad.tensors.emplace_back("", Tensor::scalar<double>(1));
  EXPECT_THROW(write_checkpoint_file(dir + "/empty", bad), InvalidArgument);
  bad = f;
  bad.text["kind"] = "x";
  EXPECT_THROW(write_checkpoint_file(dir + "/kind", bad), InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir + "/dup") || std::filesystem::exists(dir + "/empty") ||
               std::filesystem::exists(dir + "/kind"));
  std::filesystem::remove_all(dir);
}
