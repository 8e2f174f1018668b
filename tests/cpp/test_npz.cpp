// .npz archives through the public API (include/onnxtrain/io.h): libzip reads them; round trips
// and hostile archives (garbage, truncation, a corrupted body, a size that would be a decompression
// bomb, an unsupported compression method) give errors naming the file, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "onnxtrain/error.h"
#include "onnxtrain/io.h"
#include "test_grad_util.h"

using namespace onnxtrain;
namespace fs = std::filesystem;

namespace {

fs::path temp(const std::string& name) { return fs::temp_directory_path() / ("onnxtrain_npz_" + name); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

void put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + size_t(i)] = char((v >> (8 * i)) & 0xff);
}
void put16(std::string& s, size_t at, uint16_t v) {
  s[at] = char(v & 0xff);
  s[at + 1] = char(v >> 8);
}

// f must throw InvalidArgument containing `needle`.
void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  const std::string m = ot_test::thrown_by(f);
  EXPECT_EQ(m.rfind("InvalidArgument: ", 0), 0u) << m;
  EXPECT_NE(m.find(needle), std::string::npos) << "expected '" << needle << "' in: '" << m << "'";
}

// An archive of one float32 [2, 3] array 'a' and one int64 [4] array 'b'; returns its bytes.
std::string base_archive(const fs::path& p) {
  Tensor a = Tensor::zeros(DType::kFloat32, {2, 3}), b = Tensor::zeros(DType::kInt64, {4});
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = float(i) * 0.5f;
  for (int i = 0; i < 4; ++i) b.data<int64_t>()[i] = int64_t(i) - 2;
  write_npz(p.string(), {{"a", a}, {"b", b}});
  return slurp(p);
}

}  // namespace

TEST(Npz, RoundTrip) {
  const fs::path p = temp("round.npz");
  base_archive(p);
  auto arrays = read_npz(p.string());
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].first, "a");
  EXPECT_EQ(arrays[0].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(arrays[0].second.data<float>()[5], 2.5f);
  EXPECT_EQ(arrays[1].first, "b");
  EXPECT_EQ(arrays[1].second.data<int64_t>()[0], -2);
  write_npz(p.string(), {});
  EXPECT_TRUE(read_npz(p.string()).empty());
  fs::remove(p);
}

TEST(Npz, HostileArchives) {
  const fs::path p = temp("hostile.npz");
  const std::string good = base_archive(p);
  const size_t cd = good.rfind(std::string("PK\x01\x02", 4), good.size() - 1);
  const size_t cd_first = good.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(cd, std::string::npos);

  spit(p, "this is not a zip archive at all, just words");
  expect_invalid([&] { read_npz(p.string()); }, "is not a valid .npz (zip) archive");

  spit(p, good.substr(0, good.size() - 10));  // truncated end of central directory
  expect_invalid([&] { read_npz(p.string()); }, "is not a valid .npz (zip) archive");

  std::string bad = good;
  bad[60] = char(bad[60] ^ 0x5a);  // inside the first array's body: the CRC no longer matches
  spit(p, bad);
  expect_invalid([&] { read_npz(p.string()); }, "[a]: corrupt zip data");

  bad = good;  // the first entry claims 1 TiB once inflated: refused before anything is allocated
  put16(bad, 8, 8);
  put16(bad, cd_first + 10, 8);
  put32(bad, 22, 0xfffffff0u);
  put32(bad, cd_first + 24, 0xfffffff0u);
  spit(p, bad);
  expect_invalid([&] { read_npz(p.string()); }, "too large for an archive of");

  bad = good;  // bzip2: not what numpy writes
  put16(bad, 8, 12);
  put16(bad, cd_first + 10, 12);
  spit(p, bad);
  expect_invalid([&] { read_npz(p.string()); }, "unsupported zip compression method 12");

  bad = good;  // the second array's directory entry points past the end of the file
  put32(bad, cd + 42, uint32_t(good.size() + 100));
  spit(p, bad);
  expect_invalid([&] { read_npz(p.string()); }, "npz");

  fs::remove(p);
  try {
    read_npz(p.string());
    FAIL() << "a missing archive must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("onnxtrain_npz_hostile.npz"), std::string::npos) << e.what();
  }
}
