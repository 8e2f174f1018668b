#include "onnxtrain/checkpoint.h"

#include <filesystem>
#include <memory>
#include <set>

#include "onnxtrain/error.h"
#include "train/checkpoint.h"

namespace onnxtrain {

CheckpointInfo read_checkpoint_info(const std::string& path) {
  // The header only: tensor data is neither read nor verified here (loads verify it).
  auto r = std::make_unique<train::CheckpointReader>(path);
  const train::Checkpoint& c = r->meta();
  CheckpointInfo info;
  auto opt = c.text.find("optimizer");
  if (opt != c.text.end()) info.optimizer = opt->second;
  auto counter = [&](const char* k) { return c.counters.count(k) ? c.counters.at(k) : int64_t(0); };
  info.optimizer_step = counter("optimizer_step");
  info.micro_step = counter("micro_step");
  for (const auto& [k, v] : c.text)
    if (k.rfind("user/", 0) == 0) info.metadata[k.substr(5)] = v;
  // A partitioned checkpoint's manifest: the weights are in every shard (the same), read from the first.
  if (c.text.count("sharded") && c.text.count("shard/0") && c.text.at("shard/0").find('/') == std::string::npos)
    r = std::make_unique<train::CheckpointReader>(
        (std::filesystem::path(path).parent_path() / c.text.at("shard/0")).string());
  for (const auto& e : r->entries())
    if (e.name.rfind("model/", 0) == 0) info.weights.emplace_back(e.name.substr(6), e.shape);
  return info;
}

void write_checkpoint_file(const std::string& path, const CheckpointFile& f) {
  if (f.text.count("kind")) throw_error<InvalidArgument>("checkpoint '", path, "': 'kind' is a reserved text name");
  std::set<std::string> names;
  for (const auto& [n, t] : f.tensors) {
    if (n.empty()) throw_error<InvalidArgument>("checkpoint '", path, "': a tensor has an empty name");
    if (!names.insert(n).second) throw_error<InvalidArgument>("checkpoint '", path, "': tensor '", n, "' is repeated");
    if (!t.defined()) throw_error<InvalidArgument>("checkpoint '", path, "': tensor '", n, "' has no value");
  }
  train::Checkpoint c;
  c.counters = f.counters;
  c.text = f.text;
  if (!f.kind.empty()) c.text["kind"] = f.kind;
  c.tensors = f.tensors;
  train::write_checkpoint(path, c);
}

CheckpointFile read_checkpoint_file(const std::string& path) {
  train::Checkpoint c = train::read_checkpoint(path);
  CheckpointFile f;
  auto kind = c.text.find("kind");
  if (kind != c.text.end()) {
    f.kind = kind->second;
    c.text.erase(kind);
  }
  f.counters = std::move(c.counters);
  f.text = std::move(c.text);
  f.tensors = std::move(c.tensors);
  return f;
}

}  // namespace onnxtrain
