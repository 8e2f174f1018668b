// Checkpoint files: versioned, a CRC32 per tensor and for the header, 64-bit offsets (files over
// 2 GiB work), written by the one atomic writer (core/atomic_file.h: temporary file in the same
// folder, fsync, rename, fsync of the folder; devices and FIFOs written through, symbolic links
// followed) so a process killed mid-write leaves the previous checkpoint intact.
//
//   "ONNXTRAIN-CKPT\0\0" | u32 version | u32 header crc | u64 header bytes | header |
//   tensor data (back to back) | "ONNXTRAIN-END\0\0\0" | u64 total file size
// No padding: every byte is covered by the magic, the header CRC, a tensor CRC or the trailer.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/ir.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::train {

// Format versions: 1 — optimizer state as a host-side optimizer held it (Adagrad's initial
// accumulator value applied at the first update); 2 — optimizer state as the training graph holds it
// (initial values included from the start). Both are read.
inline constexpr uint32_t kCheckpointVersion = 2;

struct Checkpoint {
  uint32_t version = kCheckpointVersion;            ///< format version (set when read)
  std::string fingerprint;                          ///< model_fingerprint of the writer
  std::map<std::string, int64_t> counters;          ///< steps, run counters
  std::map<std::string, std::string> text;          ///< optimizer name, ...
  std::vector<std::pair<std::string, Tensor>> tensors;
};

/// Writes atomically; throws IOError (the previous file at `path`, if any, is untouched).
void write_checkpoint(const std::string& path, const Checkpoint& c);
/// Reads and verifies; throws InvalidArgument naming what is wrong (truncated, corrupted tensor,
/// too-new version, not a checkpoint) or IOError.
Checkpoint read_checkpoint(const std::string& path);

/// Where one tensor lies in a checkpoint file (type, shape and range already checked).
struct CheckpointEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t offset = 0;  ///< absolute offset in the file
  uint64_t nbytes = 0;
  uint32_t crc = 0;
};

/// An open checkpoint whose framing (magic, version, header checksum, end marker and size) and
/// tensor table are verified on construction; tensor data is read on demand, straight into the
/// caller's storage, each tensor's checksum verified as it is read. Loads stream through it: no
/// second copy of the state is held.
class CheckpointReader {
 public:
  /// Opens and verifies `path`; throws as read_checkpoint does.
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  /// Version, fingerprint, counters and text (its `tensors` is empty).
  const Checkpoint& meta() const { return meta_; }
  const std::vector<CheckpointEntry>& entries() const { return entries_; }
  const std::string& path() const { return path_; }
  /// Reads `e` into `dst` (e.nbytes bytes) and verifies its checksum; on a mismatch `dst` holds
  /// the damaged bytes and InvalidArgument names the tensor.
  void read_into(const CheckpointEntry& e, void* dst) const;
  /// `e` as a new tensor.
  Tensor read(const CheckpointEntry& e) const;
  /// Verifies every tensor's checksum through a bounded buffer (nothing is kept).
  void verify_all() const;

 private:
  std::string path_;
  int fd_ = -1;
  Checkpoint meta_;
  std::vector<CheckpointEntry> entries_;
};

/// Identifies a model's trainable structure: float initializers (names, types, shapes) and the
/// trained weights.
std::string model_fingerprint(const ir::Model& m, const std::vector<std::string>& trained);

}  // namespace onnxtrain::train
