#include "api/profiler.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "ir/ir.h"
#include "core/atomic_file.h"
#include "onnxtrain/error.h"

namespace onnxtrain::api {

namespace {

nlohmann::json type_shapes(const std::vector<std::pair<DType, Shape>>& vs) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [t, s] : vs) {
    if (t == DType::kUndefined) continue;
    nlohmann::json o;
    o[dtype_name(t)] = s;
    a.push_back(std::move(o));
  }
  return a;
}

int64_t bytes_of(const std::vector<std::pair<DType, Shape>>& vs) {
  int64_t b = 0;
  for (const auto& [t, s] : vs)
    if (t != DType::kUndefined && t != DType::kString) b += shape_numel(s) * int64_t(dtype_size(t));
  return b;
}

}  // namespace

void Profiler::start(std::string prefix, bool trace) {
  prefix_ = std::move(prefix);
  trace_ = trace;
  start_ns_ = runtime::now_ns();
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
    index_.clear();
    totals_.clear();
  }
  active_ = true;
}

void Profiler::add(std::string event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() < kMaxEvents) events_.push_back(std::move(event));
}

std::vector<NodeTotal> Profiler::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

void Profiler::session_event(const std::string& name, int64_t begin_ns, const std::string& args_json) {
  if (!active_ || !trace_) return;
  const int64_t end = runtime::now_ns();
  nlohmann::json e;
  e["cat"] = "Session";
  e["pid"] = int64_t(getpid());
  e["tid"] = int64_t(syscall(SYS_gettid));
  e["dur"] = (end - begin_ns) / 1000;
  e["ts"] = (std::max(begin_ns, start_ns_) - start_ns_) / 1000;
  e["ph"] = "X";
  e["name"] = name;
  e["args"] = nlohmann::json::parse(args_json);
  add(e.dump());
}

void Profiler::node_event(const runtime::NodeEvent& ev, int tag) {
  if (!active_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = index_.emplace(ev.node, totals_.size());
    if (fresh) {
      NodeTotal t;
      t.name = ev.node->name.empty() ? ev.node->op_type + "_" + std::to_string(totals_.size()) : ev.node->name;
      t.op_type = ev.node->op_type;
      t.tag = tag;
      totals_.push_back(std::move(t));
    }
    NodeTotal& t = totals_[it->second];
    ++t.calls;
    t.ns += ev.end_ns - ev.start_ns;
    if (!trace_ || events_.size() >= kMaxEvents) return;
  }
  nlohmann::json e;
  const std::string node_name = ev.node->name.empty() ? ev.node->op_type : ev.node->name;
  e["cat"] = "Node";
  e["pid"] = int64_t(getpid());
  e["tid"] = int64_t(syscall(SYS_gettid));
  e["dur"] = (ev.end_ns - ev.start_ns) / 1000;
  e["ts"] = (std::max(ev.start_ns, start_ns_) - start_ns_) / 1000;
  e["ph"] = "X";
  e["name"] = node_name + "_kernel_time";
  nlohmann::json args;
  args["op_name"] = ev.node->op_type;
  args["provider"] = ev.provider;
  args["input_type_shape"] = type_shapes(ev.inputs);
  args["output_type_shape"] = type_shapes(ev.outputs);
  args["activation_size"] = std::to_string(bytes_of(ev.inputs));
  args["output_size"] = std::to_string(bytes_of(ev.outputs));
  args["dur_ns"] = ev.end_ns - ev.start_ns;
  e["args"] = std::move(args);
  add(e.dump());
}

std::string Profiler::end() {
  if (!active_.exchange(false) || !trace_) return "";
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d_%H-%M-%S", &tm);
  const std::string path = prefix_ + "_" + stamp + ".json";
  std::vector<std::string> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events.swap(events_);
  }
  core::AtomicFile f(path, "profile");
  std::string buf = "[\n";
  for (size_t i = 0; i < events.size(); ++i) {
    buf += events[i];
    buf += i + 1 < events.size() ? ",\n" : "\n";
    if (buf.size() >= (1u << 20)) f.write(buf), buf.clear();
  }
  buf += "]\n";
  f.write(buf);
  f.commit();
  return path;
}

}  // namespace onnxtrain::api
