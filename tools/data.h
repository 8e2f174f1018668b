// Data for the commands: .npz / .npy / .csv files turned into a Dataset whose arrays match a
// model's declared inputs (checked up front: names, element types, shapes).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"
#include "onnxtrain/session.h"
#include "onnxtrain/tensor.h"
#include "onnxtrain/trainer.h"

namespace cli {

using onnxtrain::Dataset;
using onnxtrain::NodeArg;
using onnxtrain::Tensor;

/// --data, --labels, --label-column (and --input NAME=FILE.npy).
struct DataArgs {
  std::string data, labels, label_column;
  std::vector<std::string> inputs;
};
/// Declares them on `app` (--input when `with_inputs`).
void add_data_options(CLI::App& app, DataArgs& a, bool with_inputs);

/// Where the data comes from.
struct DataSource {
  std::string path;         ///< .npz, .npy or .csv
  std::string labels_path;  ///< .npy of labels (with a .npy `path`)
  std::string label_column; ///< CSV: label column (name or 0-based index); default label_name, else the last
  std::vector<std::pair<std::string, std::string>> npy_inputs;  ///< NAME=FILE.npy
};

/// The source those options name.
DataSource data_source(const DataArgs& a);
/// How messages name the source: "'file.npz'" or "the --input arrays".
std::string source_name(const DataSource& src);

/// Loads the arrays feeding `features` (the model inputs) and, when `label` is given, the label
/// input named label->name (in an .npz: the array named `label_array`). Checks names, element
/// types and fixed dimensions against the declarations. `optional_label_array`: an .npz array of
/// that name that feeds nothing is skipped (running a model on its training data).
Dataset load_dataset(const DataSource& src, const std::vector<NodeArg>& features, const NodeArg* label,
                     const std::string& label_array, const std::string& optional_label_array = "");

/// "float[N, 64]"
std::string describe_arg(const NodeArg& a);

}  // namespace cli
