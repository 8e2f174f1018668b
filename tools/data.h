// Data for the commands: .npz / .npy / .csv files turned into named arrays that match a model's
// declared inputs (checked up front: names, element types, shapes), plus batching helpers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "onnxtrain/session.h"
#include "onnxtrain/tensor.h"

namespace cli {

using onnxtrain::NodeArg;
using onnxtrain::Tensor;

/// Where the data comes from.
struct DataSource {
  std::string path;         ///< .npz, .npy or .csv
  std::string labels_path;  ///< .npy of labels (with a .npy `path`)
  std::string label_column; ///< CSV: label column (name or 0-based index); default label_name, else the last
  std::vector<std::pair<std::string, std::string>> npy_inputs;  ///< NAME=FILE.npy
};

/// --data, --labels, --label-column (and --input NAME=FILE.npy when `with_inputs`).
std::vector<Option> data_options(bool with_inputs);
/// The source named by those options (`prefix` "--validation-" reads --validation-data/-labels).
DataSource data_source(const Args& a, const std::string& prefix = "--");

/// Named arrays sharing their first dimension (the samples).
struct Dataset {
  std::vector<std::pair<std::string, Tensor>> arrays;
  int64_t rows = 0;
  std::string name;  ///< for messages: the file name
};

/// Loads the arrays feeding `features` (the model inputs) and, when `label` is given, the label
/// input named label->name (in an .npz: the array named `label_array`). Checks names, element
/// types and fixed dimensions against the declarations. `optional_label_array`: an .npz array of
/// that name that feeds nothing is skipped (running a model on its training data).
Dataset load_dataset(const DataSource& src, const std::vector<NodeArg>& features, const NodeArg* label,
                     const std::string& label_array, const std::string& optional_label_array = "");

/// Rows idx[begin, end) of every array.
Dataset take_rows(const Dataset& d, const std::vector<int64_t>& idx, size_t begin, size_t end);
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& idx, size_t begin, size_t end);

/// The array named `name` (throws when absent).
const Tensor& array(const Dataset& d, const std::string& name);

/// Values of a numeric tensor as doubles.
std::vector<double> to_doubles(const Tensor& t);

/// "float[N, 64]"
std::string describe_arg(const NodeArg& a);

}  // namespace cli
