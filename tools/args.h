// Command-line parsing for the onnxtrain subcommands: each command declares its options once;
// the declaration drives parsing, value checks and `--help`.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace cli {

/// A mistake on the command line (exit status 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Option {
  std::string name;     ///< "--lr"
  std::string metavar;  ///< "RATE"; empty for a flag
  std::string help;
  bool repeat = false;  ///< may be given several times; values accumulate
  bool multi = false;   ///< takes one or more values: the following arguments not starting with '-'
};

struct Command {
  std::string name;      ///< "train"
  std::string synopsis;  ///< "MODEL --data FILE [options]"
  std::string summary;   ///< one line for `onnxtrain --help`
  std::string description;
  std::vector<Option> options;
  std::vector<std::string> positional;  ///< names of required positional arguments ("MODEL")
  std::string epilog;                   ///< examples
  std::string help_text() const;
};

/// Parsed arguments of one command.
class Args {
 public:
  /// Parses argv (after the command name). Throws UsageError naming an unknown option, a missing
  /// value or a missing/extra positional argument (unless --help was given).
  Args(const Command& cmd, const std::vector<std::string>& argv);

  bool help() const { return help_; }
  const std::string& positional(size_t i) const { return positional_.at(i); }
  bool has(const std::string& name) const;
  bool flag(const std::string& name) const { return has(name); }
  /// Last value given, or `dflt`.
  std::string str(const std::string& name, const std::string& dflt = "") const;
  /// Every value given (repeatable and multi-valued options; comma-separated lists are split).
  std::vector<std::string> list(const std::string& name) const;
  /// The value as a number in [lo, hi]; UsageError naming the option otherwise.
  double number(const std::string& name, double dflt, double lo, double hi) const;
  int64_t integer(const std::string& name, int64_t dflt, int64_t lo, int64_t hi) const;
  /// The value, which must be one of `allowed`.
  std::string choice(const std::string& name, const std::string& dflt, const std::vector<std::string>& allowed) const;
  /// Throws UsageError when `name` is given (it does not apply; `why` says when it does).
  void forbid(const std::string& name, const std::string& why) const;
  /// The options actually given, with their values (for checkpoint metadata).
  const std::map<std::string, std::vector<std::string>>& given() const { return values_; }
  const Command& command() const { return cmd_; }

 private:
  const Command& cmd_;
  bool help_ = false;
  std::vector<std::string> positional_;
  std::map<std::string, std::vector<std::string>> values_;
};

/// "a, b, c"
std::string join(const std::vector<std::string>& v, const std::string& sep = ", ");
/// Splits on `sep`, dropping empty pieces.
std::vector<std::string> split(const std::string& s, char sep);
/// `s` without `suffix` (unchanged when it does not end so).
std::string strip_suffix(const std::string& s, const std::string& suffix);
/// Folder part of a path ("" for a bare file name).
std::string dir_of(const std::string& path);
/// Creates the folder a file will be written in (IOError on failure).
void make_dirs_for(const std::string& file);

}  // namespace cli
