// Feeding a graph: checking a value against an input's declared type (InferenceSession,
// TrainingSession and TrainingAgent use it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/ir.h"
#include "onnxtrain/value.h"

namespace onnxtrain::runtime {

/// Checks a feed against its declared type; throws InvalidArgument naming the input. With
/// check_shape false a tensor's rank and dimensions are not compared with the declaration (a
/// TrainingAgent's partial run, as onnxruntime's, plans for the shapes it is given).
void check_feed(const ir::ValueInfo& decl, const Value& v, bool check_shape = true);
/// Whether `v` holds a tensor (or a sequence's tensor) outside the host's own memory (on a device).
bool off_host(const Value& v);
/// `v` with its tensors in host memory, copied there through their devices' providers: what a
/// session reads for a feed on a device (its plan takes every feed from the host).
Value on_host(const Value& v);
using Feeds = std::vector<std::pair<std::string, Value>>;
/// `feeds` with those on a device replaced by host copies (on_host) in `copies`, which it then
/// returns; `feeds` itself when none is on a device.
const Feeds& host_feeds(const Feeds& feeds, Feeds& copies);
/// "a, b, c": the valid names an unknown-name error lists.
std::string join_names(const std::vector<std::string>& names);

}  // namespace onnxtrain::runtime
