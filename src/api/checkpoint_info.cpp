#include "onnxtrain/checkpoint.h"

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
  for (const auto& [n, t] : c.tensors)
    if (n.rfind("model/", 0) == 0) info.weights.emplace_back(n.substr(6), t.shape());
  return info;
}

}  // namespace onnxtrain
