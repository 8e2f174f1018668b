// The command line on CLI11: each subcommand declares its options on a CLI::App (bound to the
// command's arguments struct); CLI11 parses, checks values and counts, and prints `--help` through
// the formatter here. Helpers shared by the commands.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace cli {

/// A mistake on the command line (exit status 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Exit statuses.
inline constexpr int kExitOk = 0, kExitError = 1, kExitUsage = 2, kExitInterrupted = 130;

/// What `onnxtrain --help` and `onnxtrain <command> --help` say about a command.
struct CommandInfo {
  std::string name;      ///< "train"
  std::string synopsis;  ///< "MODEL --data FILE [options]"
  std::string summary;   ///< one line for `onnxtrain --help`
  std::string description;
  std::string epilog;    ///< examples
};

/// A subcommand: `define` declares its options on an app and returns what runs it once parsed.
struct Command {
  const CommandInfo& (*info)();
  std::function<std::function<int()>(CLI::App&)> define;
};

/// A CLI::App set up for `info`: its help (usage line, description, options, examples) and
/// unknown arguments left for check_extras.
void configure_app(CLI::App& app, const CommandInfo& info);
/// Throws UsageError naming the first argument no option took (an unknown option, with the
/// options it may have meant, or an extra positional argument).
void check_extras(const CLI::App& app, const CommandInfo& info);

/// Parses `args` (no program name) into `app`; throws what CLI11 throws.
void parse_args(CLI::App& app, std::vector<std::string> args);

/// Value checks with the CLI's messages ("'fast' is not a number", "0 is out of range [1, 4096]").
CLI::Validator number(double lo, double hi);
CLI::Validator integer(int64_t lo, int64_t hi);
/// One of `allowed` ("unknown value 'x' (choose from a, b)").
CLI::Validator choice(const std::vector<std::string>& allowed);

/// Whether option `name` ("--lr") was given.
bool given(const CLI::App& app, const std::string& name);
/// Throws UsageError when option `name` is given (it does not apply; `why` says when it does).
void forbid(const CLI::App& app, const std::string& name, const std::string& why);
/// The options given, with their values as typed (for checkpoint metadata); positionals left out.
std::map<std::string, std::vector<std::string>> given_options(const CLI::App& app);

/// A library error message in the CLI's words: "TrainerOptions.batch_size" becomes
/// "--batch-size" (and the few fields whose option has another name, their option).
std::string cli_wording(std::string message);

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
