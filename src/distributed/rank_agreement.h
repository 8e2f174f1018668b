// Rank agreement: what every rank of a data-parallel job must share (its model, its options, its
// data) is compared over the ranks in one collective, so that a difference stops every rank with
// the same error at once instead of a hang or a silent divergence. The TrainingSession compares
// its model and TrainingParameters at start-up (and, as a debug check, its weights every N
// updates); the Trainer compares its data and options when fit starts.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::distributed {

class Comm;

/// One compared fact: what it is ("initializer 'W1'", "the training data") and this rank's value.
struct RankFact {
  std::string what, value;
  bool operator==(const RankFact& o) const { return what == o.what && value == o.value; }
};

/// The first fact (in list order) on which some rank differs from rank 0.
struct RankDisagreement {
  size_t index = 0;                            ///< its position in the lists
  std::vector<std::optional<RankFact>> facts;  ///< every rank's fact there (nullopt: that rank's list is shorter)
  std::vector<size_t> ranks;                   ///< the ranks differing from rank 0 there, ascending
};

/// Gathers every rank's facts (one allgather, `collective` names it in a timeout) and returns the
/// first disagreement, nullopt when every rank's list equals rank 0's. Every rank gets the same
/// answer, so every rank can throw the same error.
std::optional<RankDisagreement> first_disagreement(Comm& comm, const std::vector<RankFact>& mine,
                                                   const char* collective);

/// A compared digest (FNV-1a, 16 hex digits) of bytes, and of a tensor's element type, shape and
/// contents.
std::string digest(const void* data, size_t n);
std::string digest(const Tensor& t);

}  // namespace onnxtrain::distributed
