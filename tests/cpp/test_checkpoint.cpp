// Checkpoint format: files over 2 GiB (64-bit offsets), every tensor verified on load.
#include <unistd.h>

#include <cstring>

#include "test_util.h"
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
