// Fuzz target: checkpoint bytes -> verified checkpoint (magic, version, header CRC, header records,
// tensor records and CRCs, trailer), through the internal reader and read_checkpoint_info.
// Seeds: with ONNXTRAIN_FUZZ_WRITE_SEEDS=DIR the binary writes checkpoints of its own writer there
// and exits.

#include "fuzz_common.h"
#include "onnxtrain/checkpoint.h"
#include "train/checkpoint.h"

namespace {

void write_seeds(const std::string& dir) {
  using onnxtrain::Tensor;
  namespace train = onnxtrain::train;
  train::Checkpoint c;
  c.fingerprint = "fuzz-seed";
  c.counters = {{"step", 7}, {"micro_step", 1}};
  c.text = {{"optimizer", "AdamW"}};
  c.tensors = {{"w", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6})},
               {"b", Tensor::from_vector<double>({2}, {0.5, -0.5})},
               {"step_count", Tensor::scalar<int64_t>(7)},
               {"empty", Tensor::zeros(onnxtrain::DType::kFloat32, {0, 4})}};
  train::write_checkpoint(dir + "/full.ckpt", c);
  train::Checkpoint bare;
  train::write_checkpoint(dir + "/bare.ckpt", bare);
  train::Checkpoint one;
  one.tensors = {{"x", Tensor::from_vector<int32_t>({3}, {1, -2, 3})}};
  train::write_checkpoint(dir + "/one.ckpt", one);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::temp_file(data, size, ".ckpt");
  fuzz::guarded([&] { onnxtrain::train::read_checkpoint(path); });
  fuzz::guarded([&] { onnxtrain::read_checkpoint_info(path); });
  return 0;
}
