// Fuzz target: bytes -> ONNX model (protobuf, checks, type inference, load-time passes) -> plan ->
// one run with feeds made from the same bytes. Seeds: the conformance models and examples/.
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ByteSource feed_bytes(data, size);
  fuzz::load_and_run(data, size, feed_bytes);
  return 0;
}
