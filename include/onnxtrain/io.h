// Files around a model: numpy arrays (.npy, .npz), numeric CSV tables, and atomic writes.
// Every reader validates what it reads and throws InvalidArgument (malformed content) or IOError
// (missing or unreadable file) naming the file; nothing is checked by an assert alone.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain {

/// Reads a .npy array (little-endian numeric or bool; C or Fortran order).
Tensor read_npy(const std::string& path);
/// Writes a .npy array (version 1.0, C order) atomically.
void write_npy(const std::string& path, const Tensor& t);

/// Arrays of an .npz archive (stored or deflated, zip64 included), in archive order, named
/// without the ".npy" suffix.
std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path);
/// Writes an uncompressed .npz atomically (np.load reads it).
void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays);

/// A numeric table read from CSV.
struct CsvTable {
  std::vector<std::string> columns;  ///< header names; "0", "1", ... when the file has no header
  bool has_header = false;
  Tensor values;                     ///< float64 [rows, columns]
};

/// Reads a comma-separated table of numbers. The first line is a header when any of its fields
/// is not a number. Blank lines are skipped; fields may be quoted; "nan"/"inf" are numbers.
/// Throws InvalidArgument naming the line and column of a ragged row or a non-numeric field.
CsvTable read_csv(const std::string& path);

/// Where a model written to a file keeps its tensors.
enum class ExternalData {
  kAuto,    ///< inline while the model fits protobuf's 2 GiB limit, in external data beyond it
  kAlways,  ///< initializers of at least `threshold` bytes go to the data file
  kNever,   ///< everything inline: a model over 2 GiB is refused
};

/// How a model is written to a file (GradientGraphBuilder::save, the CLI's --external-data).
struct ModelSaveOptions {
  ExternalData external_data = ExternalData::kAuto;
  /// Smallest initializer, in bytes, written to the data file (string and empty tensors stay inline).
  uint64_t threshold = 1024;
  /// Data file name, in the model's folder (no '/'); empty: "<model file name>.data".
  std::string location;
};

/// "auto", "always" or "never" (InvalidArgument naming the choices otherwise).
ExternalData parse_external_data(const std::string& name);

/// Elements of a numeric or bool tensor as doubles, in row-major order (printing, metrics);
/// NotImplemented for strings.
std::vector<double> tensor_to_doubles(const Tensor& t);

/// Reads a whole regular file (IOError when missing, not a regular file or unreadable; `what`
/// names it in messages, e.g. "model file").
std::string read_file(const std::string& path, const std::string& what = "file");
/// Writes `bytes` to `path` by onnxtrain's one file-writing rule (every model, checkpoint and
/// output file follows it): a regular file (or nothing) is replaced atomically (temporary file
/// beside it, fsync, rename, fsync of the folder; its permission bits kept); a character device or
/// FIFO (/dev/null, a pipe) and this process's descriptors (/dev/stdout, /dev/fd/N) are written
/// through, never replaced; a symbolic link is followed and stays a link (what it names obeys the
/// same rule); a directory, socket or block device is refused. Throws IOError naming `path`; a
/// failure leaves no temporary file and any previous file at `path` untouched.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace onnxtrain
