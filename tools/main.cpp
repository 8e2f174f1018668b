// onnxtrain command line. Thin: parses arguments and calls the public API.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "io/npy.h"
#include "onnxtrain/error.h"
#include "onnxtrain/session.h"

using namespace onnxtrain;

namespace {

const char* kUsage =
    "usage: onnxtrain <command> [options]\n"
    "\n"
    "commands:\n"
    "  run MODEL --data FILE.npz   run a model on the arrays of an .npz (named after the model inputs)\n"
    "\n"
    "onnxtrain <command> --help describes a command.\n";

const char* kRunUsage =
    "usage: onnxtrain run MODEL --data FILE.npz [--out OUT.npz] [--threads N] [--print N] [--stats]\n"
    "\n"
    "Runs MODEL on the arrays of FILE.npz (or --input NAME=FILE.npy, repeatable) and prints\n"
    "every output (the first N values of each, default 8). --out writes the outputs to an .npz.\n"
    "--stats prints the execution plan's figures (steps, folded nodes, arena size).\n";

std::string format_values(const Tensor& t, int64_t max_values) {
  std::string s = "[";
  const int64_t n = std::min<int64_t>(t.numel(), max_values);
  char buf[64];
  for (int64_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    switch (t.dtype()) {
      case DType::kFloat32: std::snprintf(buf, sizeof buf, "%.6g", double(t.data<float>()[i])); break;
      case DType::kFloat64: std::snprintf(buf, sizeof buf, "%.6g", t.data<double>()[i]); break;
      case DType::kFloat16: std::snprintf(buf, sizeof buf, "%.4g", double(float(t.data<float16>()[i]))); break;
      case DType::kInt64: std::snprintf(buf, sizeof buf, "%lld", (long long)t.data<int64_t>()[i]); break;
      case DType::kInt32: std::snprintf(buf, sizeof buf, "%d", t.data<int32_t>()[i]); break;
      case DType::kBool: std::snprintf(buf, sizeof buf, "%s", t.data<bool>()[i] ? "true" : "false"); break;
      case DType::kUInt8: std::snprintf(buf, sizeof buf, "%u", unsigned(t.data<uint8_t>()[i])); break;
      case DType::kInt8: std::snprintf(buf, sizeof buf, "%d", int(t.data<int8_t>()[i])); break;
      default: std::snprintf(buf, sizeof buf, "?");
    }
    s += buf;
  }
  if (t.numel() > n) s += ", ...";
  return s + "]";
}

int cmd_run(int argc, char** argv) {
  std::string model, data, out;
  std::vector<std::pair<std::string, std::string>> inputs;
  int threads = 0;
  int64_t print_n = 8;
  bool stats = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* opt) -> std::string {
      if (i + 1 >= argc) throw_error<InvalidArgument>("option ", opt, " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << kRunUsage;
      return 0;
    } else if (a == "--data") {
      data = value("--data");
    } else if (a == "--out") {
      out = value("--out");
    } else if (a == "--threads") {
      threads = std::stoi(value("--threads"));
    } else if (a == "--stats") {
      stats = true;
    } else if (a == "--print") {
      print_n = std::stoll(value("--print"));
    } else if (a == "--input") {
      std::string v = value("--input");
      auto eq = v.find('=');
      if (eq == std::string::npos) throw_error<InvalidArgument>("--input expects NAME=FILE.npy, got '", v, "'");
      inputs.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else if (!a.empty() && a[0] == '-') {
      throw_error<InvalidArgument>("unknown option '", a, "' for 'run' (see onnxtrain run --help)");
    } else if (model.empty()) {
      model = a;
    } else {
      throw_error<InvalidArgument>("unexpected argument '", a, "'");
    }
  }
  if (model.empty()) throw_error<InvalidArgument>("run: missing MODEL (see onnxtrain run --help)");
  if (data.empty() && inputs.empty()) throw_error<InvalidArgument>("run: missing --data FILE.npz");
  SessionOptions so;
  so.intra_op_num_threads = threads;
  InferenceSession sess(model, so);
  std::vector<std::pair<std::string, Tensor>> feeds;
  if (!data.empty()) feeds = io::read_npz(data);
  for (const auto& [n, f] : inputs) feeds.emplace_back(n, io::read_npy(f));
  auto outs = sess.run({}, feeds);
  auto decl = sess.get_outputs();
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t i = 0; i < outs.size(); ++i) {
    std::cout << decl[i].name << ": " << outs[i].describe() << " " << format_values(outs[i], print_n) << "\n";
    named.emplace_back(decl[i].name, outs[i]);
  }
  if (stats) {
    RunStats st = sess.last_run_stats();
    std::cout << "plan: " << st.steps << " kernel steps (" << st.dynamic_steps << " prepared at run time), "
              << st.folded_nodes << " nodes folded at plan time; arena " << st.arena_bytes << " bytes (without reuse "
              << st.naive_bytes << "), folded constants " << st.constant_bytes << " bytes\n";
  }
  if (!out.empty()) {
    io::write_npz(out, named);
    std::cout << "wrote " << out << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "onnxtrain 0.1.0\n";
    return 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "run") return cmd_run(argc - 2, argv + 2);
    std::cerr << "onnxtrain: unknown command '" << cmd << "' (see onnxtrain --help)\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << "onnxtrain " << cmd << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "onnxtrain " << cmd << ": error: " << e.what() << "\n";
    return 1;
  }
}
