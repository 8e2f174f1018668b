// The blocked channel gather behind com.onnxtrain NchwcChannels (src/kernels/cpu/nchwc_channels.h)
// against a naive per-element copy: Concats of channel counts that are and are not multiples of 16,
// channel Slices, ShuffleNet's shuffle, repeated and arbitrary channels, on the AVX2 loop and (where
// the CPU has AVX-512F) the AVX-512 one, bit for bit, padded output channels zero, at 1 and 2
// threads; the errors name the bad attribute.
#include <cmath>
#include <cstring>
#include <random>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/nchwc_channels.h"
#include "kernels/cpu/nchwc_channels512.h"
#include "test_util.h"

namespace nchwc = onnxtrain::kernels::cpu::nchwc;
namespace nchwc512 = onnxtrain::kernels::cpu::nchwc512;

namespace {

struct GatherCase {
  const char* name;
  std::vector<int64_t> input_channels, channels;
};

std::vector<int64_t> range(int64_t b, int64_t e) {
  std::vector<int64_t> v;
  for (int64_t i = b; i < e; ++i) v.push_back(i);
  return v;
}

std::vector<int64_t> shuffle(int64_t C, int64_t G) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < C / G; ++k)
    for (int64_t g = 0; g < G; ++g) v.push_back(g * (C / G) + k);
  return v;
}

std::vector<GatherCase> cases() {
  std::mt19937 rng(5);
  std::vector<int64_t> any;
  for (int i = 0; i < 70; ++i) any.push_back(int64_t(rng() % 83));  // repeats, any order
  std::vector<int64_t> shuffled_half = shuffle(116, 2);
  shuffled_half.resize(58);  // the first Slice of a shuffled 58 + 58 Concat
  return {
      {"concat_aligned", {32, 16}, range(0, 48)},
      {"concat_58_58", {58, 58}, range(0, 116)},
      {"concat_three_odd", {5, 33, 7}, range(0, 45)},
      {"slice_unaligned", {116}, range(29, 87)},
      {"slice_one_channel", {40}, {37}},
      {"shuffle_116", {116}, shuffle(116, 2)},
      {"shuffle_3_groups", {48}, shuffle(48, 3)},
      {"concat_shuffle_slice", {58, 58}, shuffled_half},
      {"arbitrary", {30, 53}, any},
  };
}

// Blocked [n, ceil(c/16), hw, 16] with the padded lanes NaN (a gather must never pick them).
std::vector<float> blocked_input(int64_t n, int64_t c, int64_t hw, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(n * nchwc::blocks(c) * hw * 16));
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t lane = int64_t(i % 16), block = int64_t(i / 16 / size_t(hw)) % nchwc::blocks(c);
    x[i] = block * 16 + lane < c ? nd(rng) : std::nanf("");
  }
  return x;
}

}  // namespace

TEST(NchwcChannels, GathersMatchNaiveCopyOnBothLoops) {
  const int64_t N = 2, HW = 13;  // 13 pixels: no multiple of any vector width
  for (const GatherCase& c : cases()) {
    SCOPED_TRACE(c.name);
    std::mt19937 rng(11);
    std::vector<std::vector<float>> xs;
    std::vector<const float*> in;
    for (int64_t ch : c.input_channels) xs.push_back(blocked_input(N, ch, HW, rng));
    for (const auto& x : xs) in.push_back(x.data());
    const nchwc::ChannelGather gather(c.input_channels, c.channels);
    const int64_t M = gather.out_channels(), OB = nchwc::blocks(M);
    ASSERT_EQ(M, int64_t(c.channels.size()));
    std::vector<float> want(size_t(N * OB * HW * 16), 0.f);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m) {
        int64_t src = c.channels[size_t(m)], j = 0;
        while (src >= c.input_channels[size_t(j)]) src -= c.input_channels[size_t(j++)];
        const int64_t CB = nchwc::blocks(c.input_channels[size_t(j)]);
        for (int64_t p = 0; p < HW; ++p)
          want[size_t(((n * OB + m / 16) * HW + p) * 16 + m % 16)] = xs[size_t(j)][size_t(((n * CB + src / 16) * HW + p) * 16 + src % 16)];
      }
    std::vector<bool> loops = {false};
    if (nchwc512::gather_available()) loops.push_back(true);
    for (bool wide : loops)
      for (int threads : {1, 2}) {
        SCOPED_TRACE(std::string(wide ? "AVX-512" : "AVX2") + " loop, " + std::to_string(threads) + " threads");
        onnxtrain::ThreadScope scope(threads);
        std::vector<float> y(want.size(), 7.f);
        gather.run(in, y.data(), N, HW, wide);
        ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0);
      }
  }
  if (!nchwc512::gather_available()) GTEST_SKIP() << "no AVX-512F here: only the AVX2 loop was checked";
}

TEST(NchwcChannels, BadAttributesAreNamed) {
  auto fails = [](std::vector<int64_t> in, std::vector<int64_t> ch, const std::string& what) {
    try {
      nchwc::ChannelGather g(std::move(in), std::move(ch));
      ADD_FAILURE() << "no error for " << what;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  fails({}, {0}, "at least one input");
  fails({16, 0}, {0}, "input_channels must be positive, got 0");
  fails({16}, {}, "at least one channel");
  fails({16, 4}, {3, 20}, "channels[1] = 20 is outside the inputs' 20 channels");
  fails({16}, {-1}, "channels[0] = -1");
}
