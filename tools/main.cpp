// onnxtrain command line. Thin: parses arguments and calls the public API (include/onnxtrain/).
// Exit status: 0 success, 1 error (bad model, data or file), 2 bad command line, 130 interrupted
// (Ctrl-C during train, after saving a checkpoint).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "onnxtrain/error.h"

namespace {

const std::vector<cli::Command>& commands() {
  static const std::vector<cli::Command> c = {cli::train_command(), cli::eval_command(),   cli::run_command(),
                                              cli::export_command(), cli::grad_command(), cli::inspect_command(),
                                              cli::artifacts_command()};
  return c;
}

std::string usage() {
  std::string s = "usage: onnxtrain <command> [options]\n\ncommands:\n";
  for (const auto& c : commands())
    s += "  " + c.info().name + " " + c.info().synopsis + "\n      " + c.info().summary + "\n";
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

// The help of one command, as `onnxtrain <command> --help` prints it.
std::string command_help(const cli::Command& c) {
  CLI::App app;
  cli::configure_app(app, c.info());
  c.define(app);
  return app.help();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    if (argc >= 3 && !std::strcmp(argv[1], "help"))
      for (const auto& c : commands())
        if (c.info().name == argv[2]) {
          std::cout << command_help(c);
          return 0;
        }
    (argc < 2 ? std::cerr : std::cout) << usage();
    return argc < 2 ? cli::kExitUsage : cli::kExitOk;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "onnxtrain 0.1.0\n";
    return 0;
  }
  const std::string name = argv[1];
  const cli::Command* cmd = nullptr;
  std::vector<std::string> names;
  for (const auto& c : commands()) {
    names.push_back(c.info().name);
    if (c.info().name == name) cmd = &c;
  }
  if (!cmd) {
    std::cerr << "onnxtrain: error: unknown command '" << name << "' (commands: " << cli::join(names)
              << "; see onnxtrain --help)\n";
    return cli::kExitUsage;
  }
  CLI::App app;
  auto error = [&](std::string what, int status) {
    // The commands read MODEL's bytes and parse them: a parse error names the file, not "model bytes".
    const CLI::Option* model = app.get_option_no_throw("MODEL");
    if (model && !model->empty() && what.rfind("model bytes ", 0) == 0)
      what = "model file '" + model->as<std::string>() + "'" + what.substr(11);
    std::cerr << "onnxtrain " << name << ": error: " << one_line(cli::cli_wording(what)) << "\n";
    return status;
  };
  cli::configure_app(app, cmd->info());
  try {
    const std::function<int()> run = cmd->define(app);
    try {
      cli::parse_args(app, std::vector<std::string>(argv + 2, argv + argc));
    } catch (const CLI::CallForHelp&) {
      std::cout << app.help();
      return cli::kExitOk;
    } catch (const CLI::ParseError& e) {
      return error(e.what(), cli::kExitUsage);
    }
    cli::check_extras(app, cmd->info());
    return run();
  } catch (const cli::UsageError& e) {
    return error(e.what(), cli::kExitUsage);
  } catch (const std::bad_alloc&) {
    return error("out of memory", cli::kExitError);
  } catch (const std::exception& e) {
    return error(e.what(), cli::kExitError);
  }
}
