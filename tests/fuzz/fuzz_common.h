// Shared pieces of the libFuzzer targets (scripts/fuzz.sh): running a model with feeds made from the
// fuzz input, temporary files for the path-based readers, and the rule that only onnxtrain's own
// typed errors count as a clean rejection — any other exception escaping is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/session.h"
#include "onnxtrain/tensor.h"
#include "onnxtrain/value.h"

namespace fuzz {

/// Runs `fn`; an onnxtrain::Error is a clean rejection (returns false). Any other exception aborts
/// the process with its message, so libFuzzer records the input as a crash.
bool guarded(const std::function<void()>& fn);

/// For a target that makes its own seeds: with ONNXTRAIN_FUZZ_WRITE_SEEDS=DIR set, calls
/// `write(DIR)` and exits (scripts/fuzz.sh seeds the corpus so); otherwise returns.
void write_seeds_if_asked(void (*write)(const std::string& dir));

/// Writes bytes to a per-process file under /dev/shm (or /tmp) ending in `suffix`; returns its path.
std::string temp_file(const uint8_t* data, size_t size, const std::string& suffix);

/// Cycles over a byte string to fill feeds; an empty source gives zeros.
class ByteSource {
 public:
  ByteSource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t next() { return size_ == 0 ? 0 : data_[pos_++ % size_]; }
  void fill(void* dst, size_t n);

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

/// Session options for fuzzing: one thread, a 16 MiB session memory limit.
onnxtrain::SessionOptions fuzz_session_options();

/// Feeds for every declared tensor input: fixed dims as declared (free dims 2, unknown rank 1-D),
/// contents from `bytes` (so index inputs take any value). Returns false when an input is not a
/// tensor or the feeds would exceed 2^20 elements.
bool make_feeds(const onnxtrain::InferenceSession& s, ByteSource& bytes,
                std::vector<std::pair<std::string, onnxtrain::Tensor>>* feeds);

/// Runs `s` on `feeds` (moved from) with a 2 s budget: past it, RunOptions.terminate is set.
void run_with_budget(onnxtrain::InferenceSession& s, std::vector<std::pair<std::string, onnxtrain::Tensor>>& feeds);

/// Loads a serialized model (a plan is built on the first run), runs it once with made-up feeds.
void load_and_run(const void* model, size_t size, ByteSource& feed_bytes);

}  // namespace fuzz
