// Fuzz target: .npz (zip archive read by libzip) -> named tensors.
#include "fuzz_common.h"
#include "onnxtrain/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::temp_file(data, size, ".npz");
  fuzz::guarded([&] { onnxtrain::read_npz(path); });
  return 0;
}
