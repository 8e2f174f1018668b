// Pieces shared by the Conv and pooling tests: random geometry choices and the pads / auto_pad
// attributes.
#pragma once

#include "test_util.h"

namespace ot_test {

inline int64_t rand_int(std::mt19937& rng, int lo, int hi) {
  return int64_t(std::uniform_int_distribution<int>(lo, hi)(rng));
}

/// NOTSET 70% of the time, SAME_UPPER, SAME_LOWER and VALID 10% each.
inline std::string random_auto_pad(std::mt19937& rng) {
  const int64_t mode = rand_int(rng, 0, 9);
  return mode == 6 ? "SAME_UPPER" : mode == 7 ? "SAME_LOWER" : mode == 8 ? "VALID" : "NOTSET";
}

/// `pads` (begin values then end values) for NOTSET, else the auto_pad attribute.
inline ir::Attribute pad_attr(const std::string& auto_pad, const Shape& pad_b, const Shape& pad_e) {
  if (auto_pad != "NOTSET") return attr_string("auto_pad", auto_pad);
  Shape pads = pad_b;
  pads.insert(pads.end(), pad_e.begin(), pad_e.end());
  return attr_ints("pads", pads);
}

}  // namespace ot_test
