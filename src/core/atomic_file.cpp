// The one file writer (src/core/atomic_file.h): the rule by what the path names, the temporary
// file's life, and SIGPIPE kept from killing a process whose FIFO reader went away.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "onnxtrain/error.h"

namespace onnxtrain::core {

namespace {

std::string errno_text(int e = errno) { return std::strerror(e); }

const char* kind_name(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISREG(m)) return "a regular file";
  return "not a regular file";
}

// "<dir>/<name>.tmp.<pid>.<n>" beside `target` (the pattern scripts/checkpoint_faults.py looks
// for); a name too long for the file system is shortened.
std::string temp_name(const std::string& target) {
  static std::atomic<uint64_t> seq{0};
  const std::string suffix = ".tmp." + std::to_string(::getpid()) + "." + std::to_string(seq++);
  const size_t slash = target.find_last_of('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  std::string name = target.substr(base);
  if (name.size() + suffix.size() > NAME_MAX) name.resize(NAME_MAX - suffix.size());
  return target.substr(0, base) + name + suffix;
}

// This process's descriptor named by `p` (/dev/stdout, /dev/fd/3, /proc/self/fd/3), or -1.
int own_descriptor(const std::string& p) {
  if (p == "/dev/stdout") return 1;
  if (p == "/dev/stderr") return 2;
  if (p == "/dev/stdin") return 0;
  std::string rest;
  const std::string own = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (const std::string& prefix : {std::string("/dev/fd/"), std::string("/proc/self/fd/"),
                                    std::string("/proc/thread-self/fd/"), own})
    if (p.size() > prefix.size() && p.compare(0, prefix.size(), prefix) == 0) {
      rest = p.substr(prefix.size());
      break;
    }
  if (rest.empty() || rest.size() > 9 || !std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoi(rest);
}

void fsync_dir(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

std::string dirname_of(const std::string& path) {
  const auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

void AtomicFile::fail(const std::string& cause) const {
  throw_error<IOError>("cannot write ", what_, " '", path_, "': ", cause);
}

AtomicFile::AtomicFile(const std::string& path, std::string what) : path_(path), what_(std::move(what)) {
  if (path.empty()) throw_error<IOError>("cannot write ", what_, ": the path is empty");
  // Follows the symbolic links from `path` (each hop relative to the folder of the link) up to
  // what is not a link (or does not exist); a descriptor of this process met on the way
  // (/dev/stdout -> /proc/self/fd/1) stops there: fd_of gets its number.
  int fd_of = own_descriptor(path);
  std::string cur = path;
  bool through_link = false;
  for (int hops = 0; fd_of < 0; ++hops) {
    struct stat l;
    if (::lstat(cur.c_str(), &l) != 0 || !S_ISLNK(l.st_mode)) break;
    if (hops == 40) fail(errno_text(ELOOP));
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(cur.c_str(), buf, sizeof buf);
    if (n < 0) fail("cannot read the symbolic link '" + cur + "': " + errno_text());
    if (size_t(n) >= sizeof buf) fail("the symbolic link '" + cur + "' is too long");
    const std::string next(buf, size_t(n));
    cur = !next.empty() && next[0] == '/' ? next : dirname_of(cur) + "/" + next;
    through_link = true;
    fd_of = own_descriptor(cur);
  }
  const std::string via = through_link ? "a symbolic link to " : "";

  if (fd_of >= 0) {
    // One of this process's descriptors: written through (at its offset, with its flags: a shell's
    // `>>` appends), whatever it is but a directory or a block device.
    fd_ = ::fcntl(fd_of, F_DUPFD_CLOEXEC, 0);
    if (fd_ < 0) fail("descriptor " + std::to_string(fd_of) + ": " + errno_text());
    struct stat st;
    if (::fstat(fd_, &st) != 0) {
      const int e = errno;
      close_fd();
      fail(errno_text(e));
    }
    if (S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode)) {
      close_fd();
      fail("it is " + via + kind_name(st.st_mode));
    }
    streams_ = true;
    target_ = path;
  } else {
    struct stat st;
    mode_t keep_mode = 0;
    bool replaces = false;
    if (::stat(path.c_str(), &st) == 0) {
      if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
        // Written through: no O_CREAT, no O_TRUNC, so nothing is created or replaced.
        streams_ = true;
        target_ = path;
        do fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
        while (fd_ < 0 && errno == EINTR);
        if (fd_ < 0) fail(errno_text());
        struct stat now;
        if (::fstat(fd_, &now) != 0 || !(S_ISCHR(now.st_mode) || S_ISFIFO(now.st_mode))) {
          close_fd();  // replaced by something else in between: nothing was written to it
          fail("it changed while being opened");
        }
      } else if (!S_ISREG(st.st_mode)) {
        fail("it is " + via + kind_name(st.st_mode));
      } else {
        // The regular file the links end at is replaced in its own folder; the links stay.
        struct stat t;
        if (::lstat(cur.c_str(), &t) != 0 || !S_ISREG(t.st_mode) || t.st_dev != st.st_dev || t.st_ino != st.st_ino)
          fail("its symbolic link cannot be followed to the file it names");
        target_ = cur;
        keep_mode = st.st_mode & 0777;  // rwx bits: no set-user-ID on new contents
        replaces = true;
      }
    } else if (errno == ENOENT) {
      target_ = cur;  // nothing there (a dangling link: the file it names is created)
    } else {
      fail(errno_text());  // EACCES, ELOOP, ENOTDIR, ENAMETOOLONG, a link the kernel will not follow
    }
    if (!streams_) {
      tmp_ = temp_name(target_);
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd_ < 0) {
        const int e = errno;
        tmp_.clear();
        fail("cannot create a temporary file beside it: " + errno_text(e));
      }
      if (replaces) ::fchmod(fd_, keep_mode);  // best effort: the bytes matter more
    }
  }

  if (streams_) {
    // A reader that goes away must be an EPIPE error here, not a SIGPIPE ending the process: the
    // signal is blocked on this thread while the file is open, and one it raised is taken.
    sigset_t pipe, old, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    if (pthread_sigmask(SIG_BLOCK, &pipe, &old) == 0 && !sigismember(&old, SIGPIPE)) {
      sigpipe_blocked_ = true;
      sigpipe_thread_ = (unsigned long)pthread_self();
      sigpipe_was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    }
  }
}

AtomicFile::~AtomicFile() {
  close_fd();
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  restore_sigpipe();
}

void AtomicFile::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void AtomicFile::restore_sigpipe() {
  if (!sigpipe_blocked_ || sigpipe_thread_ != (unsigned long)pthread_self()) return;  // the mask is per thread
  sigpipe_blocked_ = false;
  sigset_t pipe, pending;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  if (!sigpipe_was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
    const timespec zero{0, 0};
    sigtimedwait(&pipe, nullptr, &zero);
  }
  pthread_sigmask(SIG_UNBLOCK, &pipe, nullptr);
}

void AtomicFile::write(const void* data, uint64_t n) {
  if (fd_ < 0) fail(committed_ ? "written after commit" : "the file is closed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, size_t(std::min<uint64_t>(n, uint64_t(1) << 30)));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(w < 0 ? errno_text() : "no space written");
    p += w;
    n -= uint64_t(w);
  }
}

void AtomicFile::write_zeros(uint64_t n) {
  static const char zeros[4096] = {};
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, sizeof zeros);
    write(zeros, k);
    n -= k;
  }
}

void AtomicFile::finish() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (!streams_ && ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot flush it to disk: " + errno_text(e));
  }
  if (::close(fd) != 0 && !streams_) fail("cannot flush it to disk: " + errno_text());
  restore_sigpipe();
}

void AtomicFile::commit() {
  if (committed_) return;
  finish();
  if (!streams_) {
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      fail("cannot rename '" + tmp_ + "' over '" + target_ + "': " + errno_text());
    tmp_.clear();
    fsync_dir(dirname_of(target_));
  }
  committed_ = true;
}

void write_file_atomic(const std::string& path, const void* data, uint64_t n, const std::string& what) {
  AtomicFile f(path, what);
  f.write(data, n);
  f.commit();
}

std::string read_regular_file(const std::string& path, const std::string& what,
                              const std::function<void(uint64_t)>& check_size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw_error<NoSuchFile>("cannot open ", what, " '", path, "': ", errno_text());
    throw_error<IOError>("cannot open ", what, " '", path, "': ", errno_text());
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) throw_error<IOError>("cannot stat ", what, " '", path, "': ", errno_text());
  if (!S_ISREG(st.st_mode)) throw_error<IOError>(what, " '", path, "' is not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  check_size(size);
  std::string buf;
  buf.resize(size_t(size));
  uint64_t done = 0;
  while (done < size) {
    ssize_t r = ::read(fd, buf.data() + done, size_t(size - done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += uint64_t(r);
  }
  if (done != size) throw_error<IOError>("short read from ", what, " '", path, "'");
  return buf;
}

}  // namespace onnxtrain::core
