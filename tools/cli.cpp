#include "cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
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

namespace {

// `onnxtrain <command> --help`: usage line, description, options with their help wrapped beside
// them, examples.
class Help : public CLI::FormatterBase {
 public:
  explicit Help(const CommandInfo& info) : info_(info) {}
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::string s = "usage: onnxtrain " + info_.name + " " + info_.synopsis + "\n\n" + info_.description + "\n";
    s += "\noptions:\n";
    std::vector<const CLI::Option*> opts = app->get_options([](const CLI::Option* o) { return o->nonpositional(); });
    std::stable_partition(opts.begin(), opts.end(), [&](const CLI::Option* o) { return o != app->get_help_ptr(); });
    for (const CLI::Option* o : opts) {
      const bool flag = o->get_type_size() == 0;
      const bool multi = !flag && o->get_allow_extra_args() && o->get_items_expected_max() > 1;
      std::string head = "  " + o->get_name() + (flag ? "" : " " + o->get_type_name()) + (multi ? "..." : "");
      if (head.size() < 28) head += std::string(28 - head.size(), ' ');
      else head += "\n" + std::string(28, ' ');
      std::string line, out;
      for (const auto& word : split(o->get_description(), ' ')) {
        if (!line.empty() && line.size() + word.size() + 1 > 72) {
          out += line + "\n" + std::string(28, ' ');
          line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
      }
      s += head + out + line + "\n";
    }
    if (!info_.epilog.empty()) s += "\n" + info_.epilog + "\n";
    return s;
  }

 private:
  const CommandInfo& info_;
};

}  // namespace

void configure_app(CLI::App& app, const CommandInfo& info) {
  app.name("onnxtrain " + info.name);
  app.formatter(std::make_shared<Help>(info));
  app.set_help_flag("-h,--help", "show this help");
  app.allow_extras();  // reported by check_extras, in the CLI's words
}

void check_extras(const CLI::App& app, const CommandInfo& info) {
  const std::vector<std::string> rest = app.remaining();
  if (rest.empty()) return;
  const std::string& a = rest[0];
  if (a.size() > 1 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1])) && a[1] != '.') {
    const std::string bare = a.substr(0, a.find('=')), stem = bare.substr(bare.find_first_not_of('-'));
    std::vector<std::string> near;
    for (const CLI::Option* o : app.get_options([](const CLI::Option* o) { return o->nonpositional(); }))
      if (!stem.empty() && o->get_name().find(stem) != std::string::npos) near.push_back(o->get_name());
    throw UsageError("unknown option '" + bare + "'" + (near.empty() ? "" : " (did you mean " + join(near, " or ") + "?)") +
                     " (see onnxtrain " + info.name + " --help)");
  }
  throw UsageError("unexpected argument '" + a + "' (usage: onnxtrain " + info.name + " " + info.synopsis + ")");
}

CLI::Validator number(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double d = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d)) return "'" + v + "' is not a number";
        if (d < lo || d > hi) {
          std::ostringstream os;
          os << v << " is out of range [" << lo << ", " << hi << "]";
          return os.str();
        }
        return "";
      },
      "");
}

CLI::Validator integer(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long d = std::strtoll(v.c_str(), &end, 10);
        if (end == v.c_str() || *end != '\0' || errno == ERANGE) return "'" + v + "' is not an integer";
        if (d < lo || d > hi)
          return v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return "";
      },
      "");
}

CLI::Validator choice(const std::vector<std::string>& allowed) {
  return CLI::Validator(
      [allowed](std::string& v) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return "";
        return "unknown value '" + v + "' (choose from " + join(allowed) + ")";
      },
      "");
}

void parse_args(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
}

bool given(const CLI::App& app, const std::string& name) { return app.count(name) > 0; }

void forbid(const CLI::App& app, const std::string& name, const std::string& why) {
  if (given(app, name)) throw UsageError("option " + name + " does not apply here: " + why);
}

std::map<std::string, std::vector<std::string>> given_options(const CLI::App& app) {
  std::map<std::string, std::vector<std::string>> r;
  for (const CLI::Option* o : app.get_options([](const CLI::Option* o) { return o->nonpositional(); }))
    if (o->count()) r[o->get_name()] = o->results();
  return r;
}

std::string cli_wording(std::string message) {
  // Library fields whose option is not the field's name with dashes.
  static const std::vector<std::pair<std::string, std::string>> renamed = {
      {"TrainerOptions.learning_rate", "--lr"},
      {"TrainerOptions.checkpoint_path", "--checkpoint-dir"},
      {"TrainerOptions.shuffle", "--no-shuffle"},
      {"TrainerOptions.objective.score_output", "--score-output"},
      {"TrainerOptions.objective.label_name", "--label-name"},
      {"TrainingParameters.gradient_accumulation_steps", "--grad-accum"},
  };
  for (const auto& [field, option] : renamed)
    for (size_t p; (p = message.find(field)) != std::string::npos;) message.replace(p, field.size(), option);
  static const std::regex field(R"(TrainerOptions\.([a-z_]+))");
  std::string out;
  auto it = std::sregex_iterator(message.begin(), message.end(), field);
  size_t last = 0;
  for (; it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1].str();
    std::replace(name.begin(), name.end(), '_', '-');
    out += message.substr(last, size_t(it->position()) - last) + "--" + name;
    last = size_t(it->position() + it->length());
  }
  return out + message.substr(last);
}

}  // namespace cli
