#include "args.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "onnxtrain/error.h"

namespace cli {

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? sep : "") + v[i];
  return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> r;
  std::string cur;
  std::stringstream ss(s);
  while (std::getline(ss, cur, sep))
    if (!cur.empty()) r.push_back(cur);
  return r;
}

std::string strip_suffix(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0
             ? s.substr(0, s.size() - suffix.size())
             : s;
}

std::string dir_of(const std::string& path) {
  const auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? "" : p.string();
}

void make_dirs_for(const std::string& file) {
  const std::string d = dir_of(file);
  if (d.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec) onnxtrain::throw_error<onnxtrain::IOError>("cannot create folder '", d, "': ", ec.message());
}

std::string Command::help_text() const {
  std::string s = "usage: onnxtrain " + name + " " + synopsis + "\n\n" + description + "\n";
  if (!options.empty()) {
    s += "\noptions:\n";
    for (const auto& o : options) {
      std::string head = "  " + o.name + (o.metavar.empty() ? "" : " " + o.metavar) + (o.multi ? "..." : "");
      if (head.size() < 28) head += std::string(28 - head.size(), ' ');
      else head += "\n" + std::string(28, ' ');
      // Wrap help at ~100 columns.
      std::string line, out;
      for (const auto& word : split(o.help, ' ')) {
        if (!line.empty() && line.size() + word.size() + 1 > 72) {
          out += line + "\n" + std::string(28, ' ');
          line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
      }
      s += head + out + line + "\n";
    }
    s += "  --help                    show this help\n";
  }
  if (!epilog.empty()) s += "\n" + epilog + "\n";
  return s;
}

Args::Args(const Command& cmd, const std::vector<std::string>& argv) : cmd_(cmd) {
  auto find = [&](const std::string& n) -> const Option* {
    for (const auto& o : cmd.options)
      if (o.name == n) return &o;
    return nullptr;
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      return;
    }
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'))) {
      std::string inline_value;
      bool has_inline = false;
      if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
        inline_value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
      const Option* o = find(a);
      if (!o) {
        std::vector<std::string> near;
        for (const auto& x : cmd.options)
          if (x.name.find(a.substr(a.find_first_not_of('-'))) != std::string::npos) near.push_back(x.name);
        throw UsageError("unknown option '" + a + "'" +
                         (near.empty() ? "" : " (did you mean " + join(near, " or ") + "?)") + " (see onnxtrain " +
                         cmd.name + " --help)");
      }
      if (o->metavar.empty()) {
        if (has_inline) throw UsageError("option " + a + " takes no value");
        values_[a].push_back("1");
        continue;
      }
      if (!o->repeat && !o->multi && values_.count(a)) throw UsageError("option " + a + " is given twice");
      std::vector<std::string> vals;
      if (has_inline) {
        vals.push_back(inline_value);
      } else {
        if (i + 1 >= argv.size()) throw UsageError("option " + a + " needs a value (" + o->metavar + ")");
        vals.push_back(argv[++i]);
        while (o->multi && i + 1 < argv.size() && !argv[i + 1].empty() && argv[i + 1][0] != '-' &&
               !(positional_.size() < cmd.positional.size() && argv[i + 1].size() > 5 &&
                 argv[i + 1].compare(argv[i + 1].size() - 5, 5, ".onnx") == 0))
          vals.push_back(argv[++i]);
      }
      for (auto& v : vals) {
        if (v.empty()) throw UsageError("option " + a + " has an empty value");
        values_[a].push_back(v);
      }
      continue;
    }
    positional_.push_back(a);
  }
  if (positional_.size() < cmd.positional.size())
    throw UsageError("missing " + cmd.positional[positional_.size()] + " (usage: onnxtrain " + cmd.name + " " +
                     cmd.synopsis + ")");
  if (positional_.size() > cmd.positional.size())
    throw UsageError("unexpected argument '" + positional_[cmd.positional.size()] + "' (usage: onnxtrain " + cmd.name +
                     " " + cmd.synopsis + ")");
}

bool Args::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Args::str(const std::string& name, const std::string& dflt) const {
  auto it = values_.find(name);
  return it == values_.end() ? dflt : it->second.back();
}

std::vector<std::string> Args::list(const std::string& name) const {
  std::vector<std::string> r;
  auto it = values_.find(name);
  if (it == values_.end()) return r;
  for (const auto& v : it->second)
    for (const auto& p : split(v, ',')) r.push_back(p);
  return r;
}

double Args::number(const std::string& name, double dflt, double lo, double hi) const {
  if (!has(name)) return dflt;
  const std::string v = str(name);
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d))
    throw UsageError("option " + name + ": '" + v + "' is not a number");
  if (d < lo || d > hi) {
    std::ostringstream os;
    os << "option " << name << ": " << v << " is out of range [" << lo << ", " << hi << "]";
    throw UsageError(os.str());
  }
  return d;
}

int64_t Args::integer(const std::string& name, int64_t dflt, int64_t lo, int64_t hi) const {
  if (!has(name)) return dflt;
  const std::string v = str(name);
  char* end = nullptr;
  errno = 0;
  const long long d = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || errno == ERANGE)
    throw UsageError("option " + name + ": '" + v + "' is not an integer");
  if (d < lo || d > hi)
    throw UsageError("option " + name + ": " + v + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return d;
}

std::string Args::choice(const std::string& name, const std::string& dflt, const std::vector<std::string>& allowed) const {
  if (!has(name)) return dflt;
  const std::string v = str(name);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    throw UsageError("option " + name + ": unknown value '" + v + "' (choose from " + join(allowed) + ")");
  return v;
}

void Args::forbid(const std::string& name, const std::string& why) const {
  if (has(name)) throw UsageError("option " + name + " does not apply here: " + why);
}

}  // namespace cli
