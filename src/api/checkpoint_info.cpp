#include "onnxtrain/checkpoint.h"

#include <filesystem>

#include "train/checkpoint.h"

namespace onnxtrain {

CheckpointInfo read_checkpoint_info(const std::string& path) {
  train::Checkpoint c = train::read_checkpoint(path);
  CheckpointInfo info;
  auto opt = c.text.find("optimizer");
  if (opt != c.text.end()) info.optimizer = opt->second;
  info.optimizer_step = c.counters["optimizer_step"];
  info.micro_step = c.counters["micro_step"];
  for (const auto& [k, v] : c.text)
    if (k.rfind("user/", 0) == 0) info.metadata[k.substr(5)] = v;
  // A partitioned checkpoint's manifest: the weights are in every shard (the same), read from the first.
  if (c.text.count("sharded") && c.text.count("shard/0") && c.text.at("shard/0").find('/') == std::string::npos)
    c = train::read_checkpoint((std::filesystem::path(path).parent_path() / c.text.at("shard/0")).string());
  for (const auto& [n, t] : c.tensors)
    if (n.rfind("model/", 0) == 0) info.weights.emplace_back(n.substr(6), t.shape());
  return info;
}

}  // namespace onnxtrain
