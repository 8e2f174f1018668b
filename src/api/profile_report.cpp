// format_profile: the text table of a training session's per-node profile (onnxtrain train --profile).
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "onnxtrain/training.h"

namespace onnxtrain {

namespace {

const char* const kTrainPhases[] = {"forward", "backward", "optimizer"};

int train_phase(const std::string& p) {
  for (int i = 0; i < 3; ++i)
    if (p == kTrainPhases[i]) return i;
  return -1;  // eval
}

std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

std::string ms_or_dash(double ms) { return ms > 0 ? printf_string("%9.3f", ms) : printf_string("%9s", "-"); }

std::string clipped(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

}  // namespace

std::string format_profile(const std::vector<NodeProfile>& profile, int64_t steps, size_t top_nodes) {
  const double per = 1e3 / double(std::max<int64_t>(steps, 1));  // seconds in total -> ms per step
  double phase_s[3] = {0, 0, 0}, eval_s = 0;
  int64_t eval_calls = 0;
  struct OpRow {
    double s[3] = {0, 0, 0};
    int64_t calls = 0;
  };
  std::map<std::string, OpRow> ops;
  std::vector<const NodeProfile*> nodes;
  for (const auto& p : profile) {
    const int ph = train_phase(p.phase);
    if (ph < 0) {
      eval_s += p.seconds;
      eval_calls += p.calls;
      continue;
    }
    phase_s[ph] += p.seconds;
    OpRow& r = ops[p.op_type];
    r.s[ph] += p.seconds;
    r.calls += p.calls;
    nodes.push_back(&p);
  }
  const double total = phase_s[0] + phase_s[1] + phase_s[2];
  auto share = [&](double s) { return total > 0 ? 100.0 * s / total : 0.0; };
  std::string out;
  out += printf_string("profile of %lld training runs: %.3f ms per run inside kernels", (long long)steps, total * per);
  out += printf_string(" (forward %.1f%%, backward %.1f%%, optimizer %.1f%%)\n", share(phase_s[0]), share(phase_s[1]),
                       share(phase_s[2]));
  if (eval_calls) out += printf_string("eval runs: %.3f ms inside kernels in all (not in the tables)\n", eval_s * 1e3);
  if (nodes.empty()) return out;

  std::vector<std::pair<std::string, OpRow>> rows(ops.begin(), ops.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.s[0] + a.second.s[1] + a.second.s[2] > b.second.s[0] + b.second.s[1] + b.second.s[2];
  });
  out += printf_string("\n%-28s %10s %9s %7s %9s %9s %9s\n", "op type", "calls/run", "ms/run", "share", "forward",
                       "backward", "optimizer");
  for (const auto& [op, r] : rows) {
    const double s = r.s[0] + r.s[1] + r.s[2];
    out += printf_string("%-28s %10.1f %9.3f %6.1f%% %s %s %s\n", clipped(op, 28).c_str(),
                         double(r.calls) / double(std::max<int64_t>(steps, 1)), s * per, share(s),
                         ms_or_dash(r.s[0] * per).c_str(), ms_or_dash(r.s[1] * per).c_str(),
                         ms_or_dash(r.s[2] * per).c_str());
  }
  std::stable_sort(nodes.begin(), nodes.end(), [](const NodeProfile* a, const NodeProfile* b) { return a->seconds > b->seconds; });
  const size_t n = std::min(top_nodes, nodes.size());
  if (n) {
    out += printf_string("\n%-40s %-20s %-9s %9s %7s\n", "slowest nodes", "op type", "phase", "ms/run", "share");
    for (size_t i = 0; i < n; ++i)
      out += printf_string("%-40s %-20s %-9s %9.3f %6.1f%%\n", clipped(nodes[i]->node, 40).c_str(),
                           clipped(nodes[i]->op_type, 20).c_str(), nodes[i]->phase.c_str(), nodes[i]->seconds * per,
                           share(nodes[i]->seconds));
  }
  return out;
}

}  // namespace onnxtrain
