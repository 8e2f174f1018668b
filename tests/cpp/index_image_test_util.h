// Helpers shared by test_index.cpp and test_image.cpp (expect_error also by test_cuda.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "onnxtrain/error.h"
#include "test_util.h"

namespace ot_test {

/// Expects `f` to throw E (exactly that type or a subclass) whose message holds every needle.
template <class E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning " << needles[0];
  } catch (const E& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

}  // namespace ot_test
