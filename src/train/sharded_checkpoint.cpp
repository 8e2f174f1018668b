#include "train/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "distributed/comm.h"
#include "onnxtrain/error.h"

namespace onnxtrain::train {

namespace {

// Rank `rank`'s shard of the save of generation `gen` of the checkpoint at `path`.
std::string shard_path(const std::string& path, const std::string& gen, int64_t rank, int64_t world) {
  return path + "." + gen + ".rank" + std::to_string(rank) + "-of-" + std::to_string(world);
}

// Removes the shards of earlier saves of `path` (files "<name>.<gen>.rank<r>-of-<n>" beside it)
// other than those in `keep`; errors are ignored (a stale shard is harmless, only disk space).
void remove_stale_shards(const std::string& path, const std::set<std::string>& keep) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".";
  std::error_code ec;
  fs::directory_iterator it(p.parent_path().empty() ? fs::path(".") : p.parent_path(), ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 || keep.count(name)) continue;
    const std::string rest = name.substr(prefix.size());  // "<gen>.rank<r>-of-<n>"
    const size_t dot = rest.find(".rank"), of = rest.rfind("-of-");
    if (dot == std::string::npos || dot == 0 || of == std::string::npos || of < dot) continue;
    auto digits = [](const std::string& x) {
      return !x.empty() && std::all_of(x.begin(), x.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!digits(rest.substr(dot + 5, of - dot - 5)) || !digits(rest.substr(of + 4))) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
  }
}

// Runs `write` on the ranks that write, then tells every rank whether all succeeded: a rank whose
// write failed rethrows its error, the others throw IOError naming it (nobody waits for a rank
// that gave up).
void collective_write(distributed::Comm& comm, bool writes, const std::function<void()>& write, const char* what) {
  std::exception_ptr err;
  if (writes) {
    try {
      write();
    } catch (...) {
      err = std::current_exception();
    }
  }
  std::vector<double> failed(size_t(comm.size()), 0.0);
  failed[size_t(comm.rank())] = err ? 1.0 : 0.0;
  comm.allreduce_sum(failed.data(), int64_t(failed.size()), DType::kFloat64, what);
  if (err) std::rethrow_exception(err);
  for (size_t r = 0; r < failed.size(); ++r)
    if (failed[r] > 0) throw_error<IOError>(what, ": rank ", r, " could not write its part (see its error)");
}

}  // namespace

void write_job_checkpoint(distributed::Comm& comm, const std::string& path,
                          const std::function<Checkpoint()>& state, const Checkpoint* manifest) {
  const int rank = comm.rank(), world = comm.size();
  if (!manifest) {
    collective_write(comm, rank == 0, [&] { write_checkpoint(path, state()); }, "the checkpoint");
    if (rank == 0) remove_stale_shards(path, {});
    return;
  }
  // The generation: a random number from rank 0, the same on every rank.
  double nonce = 0;
  if (rank == 0) nonce = double(std::random_device{}() & 0x7fffffffu);
  comm.allreduce_sum(&nonce, 1, DType::kFloat64, "the checkpoint's generation");
  char gen[16];
  std::snprintf(gen, sizeof gen, "g%08x", unsigned(nonce));
  collective_write(comm, true, [&] { write_checkpoint(shard_path(path, gen, rank, world), state()); },
                   "the checkpoint's shards");
  collective_write(comm, rank == 0, [&] {
    Checkpoint m = *manifest;
    m.counters["world_size"] = world;
    m.text["sharded"] = "1";
    std::set<std::string> shards;
    for (int r = 0; r < world; ++r) {
      const std::string name = std::filesystem::path(shard_path(path, gen, r, world)).filename().string();
      m.text["shard/" + std::to_string(r)] = name;
      shards.insert(name);
    }
    write_checkpoint(path, m);
    // The new manifest is durable: the shards of earlier saves are no longer named by any.
    remove_stale_shards(path, shards);
  }, "the checkpoint's manifest");
}

bool is_sharded_manifest(const Checkpoint& c) { return c.text.count("sharded") > 0; }

Checkpoint read_sharded_checkpoint(const std::string& path, const Checkpoint& m, int rank, int world, bool zero) {
  const int64_t n = m.counters.count("world_size") ? m.counters.at("world_size") : 0;
  if (n < 1 || n > 1 << 20) throw_error<InvalidArgument>("checkpoint '", path, "': damaged manifest (world_size ", n, ")");
  const auto dir = std::filesystem::path(path).parent_path();
  auto shard = [&](int64_t r) {
    auto it = m.text.find("shard/" + std::to_string(r));
    if (it == m.text.end() || it->second.find('/') != std::string::npos)
      throw_error<InvalidArgument>("checkpoint '", path, "': damaged manifest (shard ", r, ")");
    Checkpoint c = read_checkpoint((dir / it->second).string());
    if (c.fingerprint != m.fingerprint || c.counters["optimizer_step"] != m.counters.at("optimizer_step"))
      throw_error<InvalidArgument>("checkpoint '", path, "': shard ", r, " ('", it->second,
                                   "') belongs to another checkpoint");
    return c;
  };
  if (n == world && (zero || m.counters.at("micro_step") > 0)) return shard(rank);  // the same layout
  // Merge: weights from shard 0, each optimizer state concatenated over the shards in rank order.
  Checkpoint merged = shard(0);
  std::map<std::string, std::vector<Tensor>> parts;
  std::vector<std::string> order;
  auto take = [&](const Checkpoint& c) {
    for (const auto& [k, t] : c.tensors) {
      if (k.rfind("accumulator/", 0) == 0)
        throw_error<InvalidArgument>("checkpoint '", path, "' was saved inside a gradient accumulation over ", n,
                                     " ranks (allreduce_post_accumulation): resume it on ", n, " ranks");
      if (k.rfind("optimizer/", 0) != 0) continue;
      if (!parts.count(k)) order.push_back(k);
      parts[k].push_back(t);
    }
  };
  take(merged);
  for (int64_t r = 1; r < n; ++r) take(shard(r));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [k, t] : merged.tensors)
    if (k.rfind("optimizer/", 0) != 0) tensors.emplace_back(k, t);
  for (const auto& k : order) {
    const auto& ps = parts[k];
    int64_t total = 0;
    for (const auto& p : ps) total += p.numel();
    Tensor all = Tensor::zeros(ps[0].dtype(), {total});
    size_t off = 0;
    for (const auto& p : ps) {
      if (p.dtype() != all.dtype()) throw_error<InvalidArgument>("checkpoint '", path, "': shards disagree on '", k, "'");
      std::memcpy(static_cast<char*>(all.raw_data()) + off, p.raw_data(), p.nbytes());
      off += p.nbytes();
    }
    tensors.emplace_back(k, all);
  }
  merged.tensors = std::move(tensors);
  return merged;
}

std::optional<Tensor> relayout_state(const Tensor& src, const Tensor& dst, int64_t weight_numel,
                                     std::pair<int64_t, int64_t> part) {
  const auto [lo, hi] = part;
  if (src.dtype() != dst.dtype() || src.numel() != weight_numel || hi - lo != dst.numel()) return std::nullopt;
  const size_t es = dtype_size(src.dtype());
  Tensor t = Tensor::zeros(dst.dtype(), dst.shape());
  std::memcpy(t.raw_data(), static_cast<const char*>(src.raw_data()) + size_t(lo) * es, size_t(hi - lo) * es);
  return t;
}

}  // namespace onnxtrain::train
