// The one file writer's rule (src/core/atomic_file.h), through the writers that use it
// (write_file_atomic, save_model with and without external data, write_checkpoint): character
// devices, FIFOs and this process's descriptors are written through and never replaced; symbolic
// links are followed and stay links; directories, sockets and block devices are refused; failures
// leave no temporary file. Device nodes are made with mknod in a private folder first (root): a
// writer that replaced one there stops the test before the real /dev/null is touched.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "ir/onnx_io.h"
#include "onnxtrain/io.h"
#include "test_util.h"
#include "train/checkpoint.h"

using namespace onnxtrain;
using ot_test::list_dir;
using ot_test::slurp;
using ot_test::TempDir;
using ot_test::write_text;

namespace {

std::string payload(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char('a' + (i * 7 + i / 251) % 26);
  return s;
}

ir::Model small_model(size_t floats = 600) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = 17;
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.name = "g";
  Tensor w = Tensor::zeros(DType::kFloat32, {int64_t(floats)});
  for (size_t i = 0; i < floats; ++i) w.data<float>()[i] = float(i) * 0.5f;
  g.initializers.emplace_back("w", w);
  ir::Node n;
  n.op_type = "Identity";
  n.name = "id";
  n.inputs = {"w"};
  n.outputs = {"y"};
  g.nodes.push_back(n);
  g.outputs.push_back({"y", ir::TypeInfo::tensor(DType::kFloat32, {int64_t(floats)}), ""});
  return m;
}

train::Checkpoint small_checkpoint() {
  train::Checkpoint c;
  c.fingerprint = "fp";
  c.counters["step"] = 3;
  c.tensors.emplace_back("w", Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  return c;
}

// A character device like /dev/null (1, 3) at `path`; false where mknod is not allowed.
std::string dirname_of(const std::string& path) { return path.substr(0, path.find_last_of('/')); }

bool make_null_device(const std::string& path) {
  return ::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
}

bool is_char_device(const std::string& path, dev_t rdev) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == rdev;
}

// Every writer once, to `path`.
void write_with_every_writer(const std::string& path) {
  write_file_atomic(path, "bytes");
  ir::save_model(small_model(), path);
  train::write_checkpoint(path, small_checkpoint());
}

// Reads a FIFO until its writer closes it (or `timeout_s` passes without one): opened without
// blocking so that a writer that never comes cannot hang the test.
std::string read_fifo(const std::string& path, double timeout_s) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "<open failed>";
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 50);
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r > 0) {
      got.append(buf, size_t(r));
    } else if (r == 0 && !got.empty()) {
      break;  // the writer closed it
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // no writer yet, or nothing to read
    }
  }
  ::close(fd);
  return got;
}

}  // namespace

TEST(AtomicFile, CharacterDevicesAreWrittenThroughNeverReplaced) {
  TempDir d;
  const std::string node = d.path + "/null";
  if (!make_null_device(node)) GTEST_SKIP() << "mknod is not allowed here";
  // A private device node first: a writer that replaces it must not get to /dev/null.
  for (auto* write : {+[](const std::string& p) { write_file_atomic(p, "bytes"); },
                      +[](const std::string& p) { ir::save_model(small_model(), p); },
                      +[](const std::string& p) { train::write_checkpoint(p, small_checkpoint()); },
                      +[](const std::string& p) {  // the device as a model's external data file
                        ir::save_model(small_model(), dirname_of(p) + "/m.onnx", {ExternalData::kAlways, 16, "null"});
                      }}) {
    write(node);
    ASSERT_TRUE(is_char_device(node, makedev(1, 3))) << "the device node was replaced";
  }
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"null", "m.onnx"}));  // no temporary file either

  struct stat before;
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  write_with_every_writer("/dev/null");
  EXPECT_TRUE(is_char_device("/dev/null", before.st_rdev));
  EXPECT_TRUE(list_dir("/dev").count("null"));
  for (const auto& f : list_dir("/dev")) EXPECT_EQ(f.find("null.tmp"), std::string::npos) << f;
}

TEST(AtomicFile, FifosAreWrittenThroughToTheirReader) {
  TempDir d;
  const std::string fifo = d.path + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string data = payload(300000);  // several times a pipe's buffer
  std::string got;
  std::thread reader([&] { got = read_fifo(fifo, 10); });
  try {
    write_file_atomic(fifo, data);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  reader.join();
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  EXPECT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"pipe"}));

  // A checkpoint streamed through the FIFO reads back as the checkpoint.
  std::thread reader2([&] { got = read_fifo(fifo, 10); });
  try {
    train::write_checkpoint(fifo, small_checkpoint());
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  reader2.join();
  write_text(d.path + "/copy.ckpt", got);
  EXPECT_EQ(train::read_checkpoint(d.path + "/copy.ckpt").counters.at("step"), 3);
}

TEST(AtomicFile, AFifoWhoseReaderLeftIsAnErrorNotASignal) {
  // In a child (SIGPIPE at its default action, which would end it): the reader opens the FIFO,
  // then closes it without reading; the write fails with EPIPE as an IOError.
  TempDir d;
  const std::string fifo = d.path + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto child = [&] {
    signal(SIGPIPE, SIG_DFL);
    alarm(20);  // a writer that never opens the FIFO must not hang the test
    std::thread reader([&] {
      const int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);  // waits for the writer
      if (fd >= 0) ::close(fd);
    });
    int code = 0;
    try {
      write_file_atomic(fifo, payload(4 << 20));
      code = 2;
    } catch (const IOError& e) {
      if (!std::strstr(e.what(), "pipe") || !std::strstr(e.what(), fifo.c_str())) code = 3;
    }
    reader.join();
    struct stat st;
    if (::lstat(fifo.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) code = 4;
    _exit(code);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(AtomicFile, SymbolicLinksAreFollowedAndStayLinks) {
  TempDir d;
  ASSERT_EQ(::mkdir((d.path + "/store").c_str(), 0755), 0);
  const std::string real = d.path + "/store/real.bin";
  write_text(real, "old");
  ASSERT_EQ(::chmod(real.c_str(), 0600), 0);
  ASSERT_EQ(::symlink("store/real.bin", (d.path + "/link").c_str()), 0);  // relative to the link's folder
  ASSERT_EQ(::symlink((d.path + "/link").c_str(), (d.path + "/chain").c_str()), 0);

  write_file_atomic(d.path + "/link", "new contents");
  char buf[256];
  ssize_t n = ::readlink((d.path + "/link").c_str(), buf, sizeof buf);
  ASSERT_GT(n, 0) << "the link was replaced";
  EXPECT_EQ(std::string(buf, size_t(n)), "store/real.bin");
  EXPECT_EQ(slurp(real), "new contents");
  struct stat st;
  ASSERT_EQ(::stat(real.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the replaced file's permissions are kept";

  write_file_atomic(d.path + "/chain", "through two links");
  EXPECT_EQ(slurp(real), "through two links");
  ASSERT_EQ(::lstat((d.path + "/chain").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));

  // A dangling link: the file it names is created, the link stays.
  ASSERT_EQ(::symlink("store/new.bin", (d.path + "/dangling").c_str()), 0);
  write_file_atomic(d.path + "/dangling", "created");
  EXPECT_EQ(slurp(d.path + "/store/new.bin"), "created");
  ASSERT_EQ(::lstat((d.path + "/dangling").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));

  // A checkpoint and a model through links.
  ASSERT_EQ(::symlink("store/m.ckpt", (d.path + "/ck").c_str()), 0);
  train::write_checkpoint(d.path + "/ck", small_checkpoint());
  EXPECT_EQ(train::read_checkpoint(d.path + "/store/m.ckpt").counters.at("step"), 3);
  ASSERT_EQ(::symlink("store/m.onnx", (d.path + "/m.onnx").c_str()), 0);
  ir::save_model(small_model(), d.path + "/m.onnx");
  EXPECT_EQ(ir::load_model_file(d.path + "/store/m.onnx").graph->initializers.size(), 1u);
  ASSERT_EQ(::lstat((d.path + "/m.onnx").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));

  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"store", "link", "chain", "dangling", "ck", "m.onnx"}));
  EXPECT_EQ(list_dir(d.path + "/store"), (std::set<std::string>{"real.bin", "new.bin", "m.ckpt", "m.onnx"}));

  // A link to a device is written through to it.
  if (make_null_device(d.path + "/null")) {
    ASSERT_EQ(::symlink("null", (d.path + "/to_null").c_str()), 0);
    write_with_every_writer(d.path + "/to_null");
    EXPECT_TRUE(is_char_device(d.path + "/null", makedev(1, 3)));
    ASSERT_EQ(::lstat((d.path + "/to_null").c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
  }
}

TEST(AtomicFile, ExternalDataFollowsTheSameRule) {
  // A symbolic link as the data file beside the model: refused (the loader reads external data
  // only from a file in the model's folder, never through a link), the link and the previous
  // model kept, nothing written.
  TempDir d;
  ASSERT_EQ(::mkdir((d.path + "/store").c_str(), 0755), 0);
  write_text(d.path + "/m.onnx", "previous model");
  ASSERT_EQ(::symlink("store/weights.bin", (d.path + "/m.onnx.data").c_str()), 0);
  try {
    ir::save_model(small_model(), d.path + "/m.onnx", {ExternalData::kAlways, 16, ""});
    ADD_FAILURE() << "saved through the link";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("m.onnx.data': it is a symbolic link"), std::string::npos) << e.what();
  }
  struct stat st;
  ASSERT_EQ(::lstat((d.path + "/m.onnx.data").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the data file's link was replaced";
  EXPECT_EQ(slurp(d.path + "/m.onnx"), "previous model");
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"store", "m.onnx", "m.onnx.data"}));
  EXPECT_TRUE(list_dir(d.path + "/store").empty());

  // The model itself through a link, its data file beside the link: both written, the link kept,
  // and the model loads through the link.
  ASSERT_EQ(::unlink((d.path + "/m.onnx.data").c_str()), 0);
  ASSERT_EQ(::unlink((d.path + "/m.onnx").c_str()), 0);
  ASSERT_EQ(::symlink("store/m.onnx", (d.path + "/m.onnx").c_str()), 0);
  ir::save_model(small_model(), d.path + "/m.onnx", {ExternalData::kAlways, 16, ""});
  ASSERT_EQ(::lstat((d.path + "/m.onnx").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  const ir::Model back = ir::load_model_file(d.path + "/m.onnx");
  EXPECT_EQ(back.graph->initializers.at(0).second.data<float>()[599], 299.5f);
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"store", "m.onnx", "m.onnx.data"}));
  EXPECT_EQ(list_dir(d.path + "/store"), (std::set<std::string>{"m.onnx"}));

  // A FIFO as the data file: streamed to its reader, not replaced.
  ASSERT_EQ(::mkfifo((d.path + "/f.onnx.data").c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_fifo(d.path + "/f.onnx.data", 10); });
  try {
    ir::save_model(small_model(), d.path + "/f.onnx", {ExternalData::kAlways, 16, ""});
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  reader.join();
  EXPECT_EQ(got.size(), 600u * 4);
  ASSERT_EQ(::lstat((d.path + "/f.onnx.data").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(AtomicFile, DescriptorsOfThisProcessAreWrittenThrough) {
  // /dev/fd/N names this process's descriptor N: written through it, at its offset and with its
  // flags (an O_APPEND file keeps what it held).
  TempDir d;
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  write_file_atomic("/dev/fd/" + std::to_string(p[1]), "through the pipe");
  ::close(p[1]);
  char buf[64];
  const ssize_t n = ::read(p[0], buf, sizeof buf);
  ::close(p[0]);
  EXPECT_EQ(std::string(buf, size_t(std::max<ssize_t>(n, 0))), "through the pipe");

  const std::string log = d.path + "/log";
  write_text(log, "earlier lines\n");
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  write_file_atomic("/proc/self/fd/" + std::to_string(fd), "appended\n");
  ::close(fd);
  EXPECT_EQ(slurp(log), "earlier lines\nappended\n");
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"log"}));
}

TEST(AtomicFile, DirectoriesSocketsAndBlockDevicesAreRefused) {
  TempDir d;
  auto refused = [&](const std::string& path, const std::string& kind) {
    try {
      write_file_atomic(path, "x");
      ADD_FAILURE() << path << " was written";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + path + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("it is " + kind), std::string::npos) << e.what();
    }
    EXPECT_THROW(train::write_checkpoint(path, small_checkpoint()), IOError);
    EXPECT_THROW(ir::save_model(small_model(), path), IOError);
  };
  ASSERT_EQ(::mkdir((d.path + "/dir").c_str(), 0755), 0);
  refused(d.path + "/dir", "a directory");
  ASSERT_EQ(::symlink("dir", (d.path + "/to_dir").c_str()), 0);
  refused(d.path + "/to_dir", "a symbolic link to a directory");

  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = d.path + "/sock";
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  refused(sock, "a socket");
  ::close(s);

  std::set<std::string> expect{"dir", "to_dir", "sock"};
  if (::mknod((d.path + "/blk").c_str(), S_IFBLK | 0600, makedev(7, 200)) == 0) {
    refused(d.path + "/blk", "a block device");
    expect.insert("blk");
  }
  struct stat st;
  ASSERT_EQ(::lstat(sock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(list_dir(d.path), expect);  // nothing replaced, no temporary file
  EXPECT_TRUE(list_dir(d.path + "/dir").empty());
}

TEST(AtomicFile, AFailingWriteLeavesThePreviousFileAndNoTemporary) {
  // A file size limit makes write() fail part way, as a full disk would (in a child: the limit
  // must not reach the rest of the suite).
  TempDir d;
  const std::string path = d.path + "/out.bin";
  write_text(path, "previous");
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  auto child = [&] {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 << 10, 64 << 10};
    setrlimit(RLIMIT_FSIZE, &lim);
    int code = 0;
    try {
      write_file_atomic(path, payload(1 << 20));
      code = 2;
    } catch (const IOError& e) {
      if (!std::strstr(e.what(), path.c_str()) || !std::strstr(e.what(), "File too large")) code = 3;
    }
    try {
      train::write_checkpoint(path, [] {
        train::Checkpoint c = small_checkpoint();
        c.tensors.emplace_back("big", Tensor::zeros(DType::kFloat32, {1 << 18}));
        return c;
      }());
      code = 4;
    } catch (const IOError&) {
    }
    if (list_dir(d.path) != std::set<std::string>{"out.bin"}) code = 5;
    if (slurp(path) != "previous") code = 6;
    _exit(code);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
  // A missing folder: IOError naming the path, nothing created.
  try {
    write_file_atomic(d.path + "/missing/out.bin", "x");
    ADD_FAILURE() << "written into a missing folder";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("missing/out.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(list_dir(d.path), (std::set<std::string>{"out.bin"}));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // Replaced for good: the new file keeps the permissions of the one it replaces.
  write_file_atomic(path, "new");
  EXPECT_EQ(slurp(path), "new");
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}
