#include "distributed/rank_agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "distributed/comm.h"

namespace onnxtrain::distributed {

namespace {

// Length-prefixed strings: any byte may appear in a fact.
void put(std::string& text, const std::string& x) {
  const uint32_t n = uint32_t(x.size());
  text.append(reinterpret_cast<const char*>(&n), 4);
  text += x;
}

std::vector<RankFact> parse(const std::string& t) {
  std::vector<RankFact> facts;
  size_t pos = 0;
  auto get = [&](std::string& x) {
    uint32_t n = 0;
    if (t.size() - pos < 4) return false;
    std::memcpy(&n, t.data() + pos, 4);
    if (t.size() - pos - 4 < n) return false;
    x = t.substr(pos + 4, n);
    pos += 4 + size_t(n);
    return true;
  };
  RankFact f;
  while (get(f.what) && get(f.value)) facts.push_back(f);
  return facts;
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

}  // namespace

std::optional<RankDisagreement> first_disagreement(Comm& comm, const std::vector<RankFact>& mine,
                                                   const char* collective) {
  std::string text;
  for (const auto& f : mine) put(text, f.what), put(text, f.value);
  const std::vector<std::string> all = comm.allgather_bytes(text, collective);
  std::vector<std::vector<RankFact>> facts(all.size());
  for (size_t r = 0; r < all.size(); ++r) facts[r] = parse(all[r]);
  size_t most = 0;
  for (const auto& f : facts) most = std::max(most, f.size());
  for (size_t i = 0; i < most; ++i) {
    RankDisagreement d;
    d.index = i;
    for (const auto& f : facts) d.facts.push_back(i < f.size() ? std::optional<RankFact>(f[i]) : std::nullopt);
    for (size_t r = 1; r < facts.size(); ++r)
      if (d.facts[r] != d.facts[0]) d.ranks.push_back(r);
    if (!d.ranks.empty()) return d;
  }
  return std::nullopt;
}

std::string digest(const void* data, size_t n) { return hex64(fnv1a(data, n)); }

std::string digest(const Tensor& t) {
  std::string shape = dtype_name(t.dtype());
  for (int64_t d : t.shape()) {
    shape += ',';
    shape += std::to_string(d);
  }
  return hex64(fnv1a(t.raw_data(), t.nbytes(), fnv1a(shape.data(), shape.size())));
}

}  // namespace onnxtrain::distributed
