#include "fuzz_common.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <typeinfo>

#include "onnxtrain/error.h"

namespace fuzz {

bool guarded(const std::function<void()>& fn) {
  try {
    fn();
    return true;
  } catch (const onnxtrain::Error&) {
    return false;  // a typed, named error: the input was rejected cleanly
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: untyped exception %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "FINDING: non-std exception\n");
    std::abort();
  }
}

void write_seeds_if_asked(void (*write)(const std::string& dir)) {
  if (const char* dir = std::getenv("ONNXTRAIN_FUZZ_WRITE_SEEDS")) {
    write(dir);
    std::exit(0);
  }
}

std::string temp_file(const uint8_t* data, size_t size, const std::string& suffix) {
  static const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  const std::string path = dir + "/onnxtrain-fuzz-" + std::to_string(getpid()) + suffix;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

void ByteSource::fill(void* dst, size_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < n; ++i) p[i] = next();
}

onnxtrain::SessionOptions fuzz_session_options() {
  onnxtrain::SessionOptions o;
  o.intra_op_num_threads = 1;
  // 16 MiB: a value past it is refused (a clean rejection). Kernel time grows with output size and
  // a node is not interrupted by the run budget, so a larger limit lets one node compute for longer
  // than libFuzzer's timeout under ASan (a MaxPool with pads of 2^25 produced 100 MB in 20 s), and
  // mutants that stay just under it spend the campaign in plan-time constant folding (with 64 MiB
  // the gradient target ran ~240 inputs/s, two thirds of it folding Resize and reductions of
  // initializers); 4 M floats still take every kernel's multi-block paths.
  o.config_entries.push_back({"session.memory_limit_bytes", std::to_string(16ll << 20)});
  return o;
}

bool make_feeds(const onnxtrain::InferenceSession& s, ByteSource& bytes,
                std::vector<std::pair<std::string, onnxtrain::Tensor>>* feeds) {
  using onnxtrain::DType;
  int64_t total = 0;
  for (const auto& in : s.get_inputs()) {
    if (in.type.rfind("tensor(", 0) != 0 || in.elem == DType::kUndefined || in.elem == DType::kComplex64 ||
        in.elem == DType::kComplex128)
      return false;
    onnxtrain::Shape shape;
    if (!in.has_shape) shape = {2};
    for (const auto& d : in.shape) shape.push_back(d.value >= 0 ? d.value : 2);
    int64_t n = 1;
    for (int64_t d : shape) {
      if (d > (int64_t(1) << 20)) return false;
      n *= d;
      if (n > (int64_t(1) << 20)) return false;
    }
    total += n;
    if (total > (int64_t(1) << 20)) return false;
    onnxtrain::Tensor t = onnxtrain::Tensor::empty(in.elem, shape);
    if (in.elem == DType::kString) {
      auto* p = t.data<std::string>();
      for (int64_t i = 0; i < n; ++i) p[i] = std::string(1 + bytes.next() % 4, char('a' + bytes.next() % 26));
    } else if (in.elem == DType::kBool) {
      auto* p = static_cast<uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) p[i] = bytes.next() & 1;
    } else {
      bytes.fill(t.raw_data(), t.nbytes());
    }
    feeds->emplace_back(in.name, std::move(t));
  }
  return true;
}

namespace {

// Sets a run's RunOptions.terminate flag when the run takes longer than its budget, as a user
// stopping a long run would: a model that computes for long (a Loop of 10^9 iterations) is not a
// hang of the engine; a run that ignores the flag is (libFuzzer's -timeout reports it).
class Watchdog {
 public:
  Watchdog() : thread_([this] { loop(); }) { thread_.detach(); }
  void arm(std::shared_ptr<std::atomic<bool>> flag, std::chrono::milliseconds budget) {
    std::lock_guard<std::mutex> lock(m_);
    flag_ = std::move(flag);
    deadline_ = std::chrono::steady_clock::now() + budget;
    cv_.notify_one();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(m_);
    flag_.reset();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      if (!flag_) {
        cv_.wait(lock);
      } else if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && flag_ &&
                 std::chrono::steady_clock::now() >= deadline_) {
        flag_->store(true);
        flag_.reset();
      }
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::shared_ptr<std::atomic<bool>> flag_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

}  // namespace

void run_with_budget(onnxtrain::InferenceSession& s, std::vector<std::pair<std::string, onnxtrain::Tensor>>& feeds) {
  static Watchdog* watchdog = new Watchdog;  // lives for the process
  std::vector<std::pair<std::string, onnxtrain::Value>> values;
  for (auto& [name, t] : feeds) values.emplace_back(name, onnxtrain::Value::of(std::move(t)));
  std::vector<std::pair<std::string, const onnxtrain::Value*>> borrowed;
  for (auto& [name, v] : values) borrowed.emplace_back(name, &v);
  onnxtrain::RunOptions ro;
  ro.terminate = std::make_shared<std::atomic<bool>>(false);
  watchdog->arm(ro.terminate, std::chrono::milliseconds(2000));
  struct Disarm {
    ~Disarm() { watchdog->disarm(); }
  } disarm;
  s.run_values({}, borrowed, ro);
}

void load_and_run(const void* model, size_t size, ByteSource& feed_bytes) {
  guarded([&] {
    onnxtrain::InferenceSession s(model, size, fuzz_session_options());
    std::vector<std::pair<std::string, onnxtrain::Tensor>> feeds;
    if (!make_feeds(s, feed_bytes, &feeds)) return;
    run_with_budget(s, feeds);
  });
}

}  // namespace fuzz
