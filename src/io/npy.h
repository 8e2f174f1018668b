// numpy .npy / .npz reading and writing (little-endian numeric and bool arrays).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::io {

/// Parses .npy bytes. `what` names the array in errors (InvalidArgument).
Tensor parse_npy(const void* data, size_t size, const std::string& what);
/// Serializes a tensor as .npy bytes (version 1.0, C order).
std::string format_npy(const Tensor& t);

Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);

/// Arrays of an .npz archive (stored or deflated), in archive order, names without ".npy".
std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path);
/// Writes an uncompressed .npz atomically.
void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays);

}  // namespace onnxtrain::io
