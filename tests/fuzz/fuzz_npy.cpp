// Fuzz target: .npy bytes -> tensor (header dictionary, dtype, shape, sizes).
#include "fuzz_common.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::guarded([&] { onnxtrain::io::parse_npy(data, size, "fuzz input"); });
  return 0;
}
