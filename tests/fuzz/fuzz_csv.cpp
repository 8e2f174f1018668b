// Fuzz target: CSV text -> numeric table (quoting, header detection, number parsing).
#include "fuzz_common.h"
#include "onnxtrain/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::temp_file(data, size, ".csv");
  fuzz::guarded([&] { onnxtrain::read_csv(path); });
  return 0;
}
