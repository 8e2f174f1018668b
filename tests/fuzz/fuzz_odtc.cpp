// Fuzz target: bytes -> CheckpointState in onnxruntime's checkpoint format (ODTC FlatBuffers:
// identifier, verifier, version, every tensor's type, dims and bytes, names, optimizer states,
// properties), from memory and from a file (with a "<file>.data" sidecar made of the same bytes,
// so that external offsets are exercised). Seeds: with ONNXTRAIN_FUZZ_WRITE_SEEDS=DIR the binary
// writes checkpoints of its own writer there (inline, nominal, with optimizer state) and exits.
#include <fstream>

#include "fuzz_common.h"
#include "onnxtrain/state.h"

namespace {

void write_seeds(const std::string& dir) {
  using namespace onnxtrain;
  CheckpointState s;
  s.parameters["w"] = {DType::kFloat32, Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}), true, {}, {}};
  s.parameters["b"] = {DType::kFloat64, Tensor::from_vector<double>({2}, {0.5, -0.5}), false, {}, {}};
  s.optimizer_groups["group0"].step = 3;
  s.optimizer_groups["group0"].states["w"]["momentum0"] = Tensor::zeros(DType::kFloat32, {2, 3});
  s.properties["epoch"] = int64_t(2);
  s.properties["lr"] = 0.5f;
  s.properties["tag"] = std::string("seed");
  s.save(dir + "/full.ckpt", {.include_optimizer_state = true});
  s.save(dir + "/params.ckpt");
  s.nominal = true;
  s.save(dir + "/nominal.ckpt", {.include_optimizer_state = true});
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::guarded([&] { onnxtrain::CheckpointState::load_from_buffer(data, size); });
  const std::string path = fuzz::temp_file(data, size, ".ckpt");
  std::ofstream(path + ".data", std::ios::binary).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  fuzz::guarded([&] { onnxtrain::CheckpointState::load(path); });
  return 0;
}
