// onnxtrain command line. Thin: parses arguments and calls the public API (include/onnxtrain/).
// Exit status: 0 success, 1 error (bad model, data or file), 2 bad command line, 130 interrupted
// (Ctrl-C during train, after saving a checkpoint).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "onnxtrain/error.h"

namespace {

struct Entry {
  const cli::Command& (*command)();
  int (*run)(const cli::Args&);
};

const std::vector<Entry>& commands() {
  static const std::vector<Entry> c = {
      {cli::train_command, cli::cmd_train},   {cli::eval_command, cli::cmd_eval},
      {cli::run_command, cli::cmd_run},       {cli::export_command, cli::cmd_export},
      {cli::grad_command, cli::cmd_grad},     {cli::inspect_command, cli::cmd_inspect},
  };
  return c;
}

std::string usage() {
  std::string s = "usage: onnxtrain <command> [options]\n\ncommands:\n";
  for (const auto& e : commands()) {
    const auto& c = e.command();
    std::string head = "  " + c.name + " " + c.synopsis;
    s += head + "\n      " + c.summary + "\n";
  }
  s += "\nonnxtrain <command> --help describes a command; onnxtrain --version prints the version.\n";
  return s;
}

// One line: messages from parsers may hold newlines.
std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// libgomp's default makes idle OpenMP threads spin. When the cores are shared with other
// processes, spinning threads take the time slices the threads with work need: the digits demo
// with 2 threads on 2 cores, one of them busy elsewhere, ran 60x slower (883 vs 55,000 samples/s)
// than with sleeping waits. libgomp reads its settings when it is loaded, before main, so unless
// the user chose a policy the CLI re-runs itself once with OMP_WAIT_POLICY=PASSIVE.
void prefer_passive_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then go on with the default
}

}  // namespace

int main(int argc, char** argv) {
  prefer_passive_openmp_waits(argv);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    if (argc >= 3 && !std::strcmp(argv[1], "help"))
      for (const auto& e : commands())
        if (e.command().name == argv[2]) {
          std::cout << e.command().help_text();
          return 0;
        }
    (argc < 2 ? std::cerr : std::cout) << usage();
    return argc < 2 ? cli::kExitUsage : cli::kExitOk;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "onnxtrain 0.1.0\n";
    return 0;
  }
  const std::string cmd = argv[1];
  const Entry* entry = nullptr;
  for (const auto& e : commands())
    if (e.command().name == cmd) entry = &e;
  if (!entry) {
    std::cerr << "onnxtrain: error: unknown command '" << cmd << "' (commands: train, eval, run, export, grad, inspect; "
              << "see onnxtrain --help)\n";
    return cli::kExitUsage;
  }
  try {
    const cli::Args args(entry->command(), std::vector<std::string>(argv + 2, argv + argc));
    if (args.help()) {
      std::cout << entry->command().help_text();
      return cli::kExitOk;
    }
    return entry->run(args);
  } catch (const cli::UsageError& e) {
    std::cerr << "onnxtrain " << cmd << ": error: " << one_line(e.what()) << "\n";
    return cli::kExitUsage;
  } catch (const std::bad_alloc&) {
    std::cerr << "onnxtrain " << cmd << ": error: out of memory\n";
    return cli::kExitError;
  } catch (const std::exception& e) {
    std::cerr << "onnxtrain " << cmd << ": error: " << one_line(e.what()) << "\n";
    return cli::kExitError;
  }
}
