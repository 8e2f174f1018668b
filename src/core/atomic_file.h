// The one file writer: every file onnxtrain writes (models and their external data, checkpoints,
// .npy/.npz outputs, metrics, curves, profiles; from C++, the CLI and, through onnxtrain._C, the
// Python writers) goes through AtomicFile. What it does depends on what the path names:
//
//  * nothing, or a regular file: the bytes go to a temporary file in the same folder
//    ("<file>.tmp.<pid>.<n>"), which is fsynced and renamed over the file, then the folder is
//    fsynced. A reader sees the previous file or the new one, never a part of it. The new file
//    keeps the read/write/execute bits of the file it replaces (not its owner, not set-user-ID;
//    other hard links to the old file keep the old contents); a new file gets 0644 less the umask.
//  * one of this process's descriptors (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N,
//    directly or through links): written through that descriptor, at its offset and with its
//    flags (a shell's `>> log` appends), whatever it is but a directory or block device.
//  * a character device or a FIFO (/dev/null, a terminal, a pipe, `mkfifo`): written through,
//    opened without O_CREAT or O_TRUNC, never renamed over, never replaced. Opening a FIFO waits
//    for its reader, as any writer's open does. A failure part way may leave part of the bytes
//    with the reader (a stream cannot be taken back); a reader that went away is an IOError
//    (EPIPE), not a SIGPIPE.
//  * a symbolic link (or a chain of them): followed; the link stays a link and what it ends at
//    obeys the rules above: a regular file there is replaced atomically in its own folder, a
//    device or FIFO is written through, a dangling link gets the file it names created. (Like
//    `sed -i --follow-symlinks` and editors; a link the kernel refuses to follow, such as another
//    user's link in /tmp under fs.protected_symlinks, is refused with the kernel's error.)
//  * a directory, a socket or a block device: refused, IOError "cannot write <what> '<path>': it
//    is a directory" (socket, block device), before anything is written.
//  (save_model refuses a symbolic link as a model's external data file: the loader reads external
//  data only from a file in the model's folder, never through a link.)
//
// Every failure throws IOError naming the path and the cause (a missing folder included), removes
// the temporary file, and leaves the file at the path as it was.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace onnxtrain::core {

/// A file being written by the rule above. Write the bytes, then commit(); destroyed without a
/// commit (a failure, an exception), it removes its temporary file and the target is untouched.
class AtomicFile {
 public:
  /// Classifies `path` and opens the temporary file (or the device / FIFO). `what` names the
  /// file in messages ("file", "checkpoint", "model file", ...). Throws IOError.
  explicit AtomicFile(const std::string& path, std::string what = "file");
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `n` bytes (all of them, or throws IOError).
  void write(const void* data, uint64_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  /// Appends `n` zero bytes.
  void write_zeros(uint64_t n);
  /// The open descriptor, for writers that stream into it themselves (protobuf). Report their
  /// failures with fail().
  int fd() const { return fd_; }
  /// Throws IOError "cannot write <what> '<path>': <cause>".
  [[noreturn]] void fail(const std::string& cause) const;

  /// Flushes to disk (fsync) and closes; a temporary file is then complete but not yet in place.
  /// Called by commit() when not called before.
  void finish();
  /// Puts the file in place: renames the temporary file over the target and fsyncs the folder
  /// (nothing to do for a device or FIFO).
  void commit();

  /// Whether the bytes go straight to a character device or FIFO (no temporary file).
  bool streams() const { return streams_; }
  /// The path as given.
  const std::string& path() const { return path_; }
  /// The file replaced or written: the path with its symbolic links followed.
  const std::string& target() const { return target_; }

 private:
  std::string path_, what_, target_, tmp_;
  int fd_ = -1;
  bool streams_ = false, committed_ = false;
  bool sigpipe_blocked_ = false, sigpipe_was_pending_ = false;
  unsigned long sigpipe_thread_ = 0;  // the thread whose SIGPIPE is blocked (pthread_t)
  void close_fd();
  void restore_sigpipe();
};

/// Writes `n` bytes to `path` by the rule above (one call: open, write, commit).
void write_file_atomic(const std::string& path, const void* data, uint64_t n, const std::string& what = "file");
inline void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what = "file") {
  write_file_atomic(path, bytes.data(), bytes.size(), what);
}

/// Reads a whole regular file: NoSuchFile when absent, IOError when unreadable or not a regular
/// file. `check_size(size)` runs before anything is allocated and throws the caller's error for a
/// size it refuses (empty, over its format's limit).
std::string read_regular_file(const std::string& path, const std::string& what,
                              const std::function<void(uint64_t)>& check_size);

/// The folder part of `path` ("." for a bare name, "/" for a file at the root).
std::string dirname_of(const std::string& path);

}  // namespace onnxtrain::core
