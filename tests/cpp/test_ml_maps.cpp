// ai.onnx.ml map values through InferenceSession::run_values: ZipMap's seq(map) output, CastMap on
// map(int64, string) (which Python cannot feed: a dict's values are read as float) against a
// reference written here (strtof / strtoll / "%f"), DictVectorizer's value types, map feeds of the
// wrong type; malformed LabelEncoder-4, CastMap and TreeEnsemble-5 nodes refused naming the node and
// the attribute.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include "ir/onnx_io.h"
#include "onnxtrain/error.h"
#include "onnxtrain/session.h"
#include "ml_reference.h"
#include "test_util.h"

using namespace onnxtrain;
using namespace ot_test;

namespace ot_test {
std::string thrown_by(const std::function<void()>& f);  // test_reduce.cpp
}

namespace {

const char* kMl = "ai.onnx.ml";

ir::TypeInfo map_type(DType key, DType value) {
  ir::TypeInfo t;
  t.kind = ir::TypeInfo::Kind::kMap;
  t.elem = key;
  t.inner = std::make_shared<ir::TypeInfo>(ir::TypeInfo::tensor(value));
  return t;
}

// A one-node ai.onnx.ml model: input "x" of `in`, output "y" (untyped).
std::string one_node(const std::string& op, const ir::TypeInfo& in, std::vector<ir::Attribute> attrs,
                     int64_t ml_opset = 1) {
  ir::Model m;
  m.opsets = {{"", 17}, {kMl, ml_opset}};
  m.graph = std::make_shared<ir::Graph>();
  ir::Node n = make_node(op, {"x"}, {"y"}, std::move(attrs), kMl);
  n.name = "the_node";
  m.graph->nodes.push_back(n);
  m.graph->inputs.push_back(ir::ValueInfo{"x", in, ""});
  m.graph->outputs.push_back(ir::ValueInfo{"y", {}, ""});
  return ir::serialize_model(m);
}

Value map_value(const Tensor& keys, const Tensor& values) {
  Value v;
  v.kind = Value::Kind::kMap;
  v.key = keys.dtype();
  v.elem = values.dtype();
  v.maps.push_back(make_map(keys, values));
  return v;
}

Tensor strings(const std::vector<std::string>& s) {
  Tensor t = Tensor::empty(DType::kString, {int64_t(s.size())});
  for (size_t i = 0; i < s.size(); ++i) t.data<std::string>()[i] = s[i];
  return t;
}

Value run_one(const std::string& bytes, const Value& x) {
  InferenceSession s(bytes.data(), bytes.size());
  auto out = s.run_values({}, {{"x", x}});
  return out.at(0);
}

// The message starts with `kind` and names the node and every fragment.
void expect_refused(const std::function<void()>& f, const std::string& kind, const std::vector<std::string>& what) {
  const std::string m = thrown_by(f);
  EXPECT_EQ(m.rfind(kind + ": ", 0), 0u) << "expected " << kind << ", got '" << m << "'";
  EXPECT_NE(m.find("the_node"), std::string::npos) << m;
  for (const auto& w : what) EXPECT_NE(m.find(w), std::string::npos) << "'" << w << "' not in: " << m;
}

}  // namespace

TEST(MlMaps, MakeMapSortsAndKeepsTheLastOfRepeatedKeys) {
  const MapData m = make_map(Tensor::from_vector<int64_t>({4}, {5, 1, 5, -2}), Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  ASSERT_EQ(m.keys.numel(), 3);
  EXPECT_EQ(std::vector<int64_t>(m.keys.data<int64_t>(), m.keys.data<int64_t>() + 3), (std::vector<int64_t>{-2, 1, 5}));
  EXPECT_EQ(std::vector<float>(m.values.data<float>(), m.values.data<float>() + 3), (std::vector<float>{4, 2, 3}));
  EXPECT_EQ(map_type_string(DType::kString, DType::kFloat32), "map(string,tensor(float))");
}

TEST(MlMaps, ZipMapOutputsOneMapPerRow) {
  const std::string b = one_node("ZipMap", ir::TypeInfo::tensor(DType::kFloat32),
                                 {attr_strings("classlabels_strings", {"z", "a"})});
  const Value y = run_one(b, Value::of(Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4})));
  ASSERT_EQ(y.kind, Value::Kind::kMapSequence);
  ASSERT_EQ(y.maps.size(), 2u);
  EXPECT_EQ(y.key, DType::kString);
  EXPECT_EQ(y.maps[1].keys.data<std::string>()[0], "a");
  EXPECT_EQ(y.maps[1].values.data<float>()[0], 4.f);
  EXPECT_EQ(y.maps[1].values.data<float>()[1], 3.f);
}

TEST(MlMaps, CastMapOfStringValuesAgainstReference) {
  const Tensor keys = Tensor::from_vector<int64_t>({3}, {4, 0, 2});
  const Tensor vals = strings({" 2.5e1x", "-7", "13"});
  for (const char* to : {"TO_FLOAT", "TO_INT64", "TO_STRING"})
    for (const char* form : {"DENSE", "SPARSE"}) {
      const std::string b = one_node("CastMap", map_type(DType::kInt64, DType::kString),
                                     {attr_string("cast_to", to), attr_string("map_form", form), attr_int("max_map", 5)});
      const Value y = run_one(b, map_value(keys, vals));
      ASSERT_EQ(y.kind, Value::Kind::kTensor);
      // Reference: keys in order 0, 2, 4 -> "-7", "13", " 2.5e1x"; SPARSE pads positions 1 and 3.
      const bool sparse = std::string(form) == "SPARSE";
      const std::vector<std::string> dense = {"-7", "13", " 2.5e1x"};
      std::vector<std::string> cells = sparse ? std::vector<std::string>{"-7", "", "13", "", " 2.5e1x"} : dense;
      ASSERT_EQ(y.tensor.shape(), (Shape{1, int64_t(cells.size())}));
      for (size_t j = 0; j < cells.size(); ++j) {
        const bool pad = cells[j].empty();
        if (std::string(to) == "TO_FLOAT")
          EXPECT_EQ(y.tensor.data<float>()[j], pad ? 0.f : std::strtof(cells[j].c_str(), nullptr)) << j;
        else if (std::string(to) == "TO_INT64")
          EXPECT_EQ(y.tensor.data<int64_t>()[j], pad ? 0 : std::strtoll(cells[j].c_str(), nullptr, 10)) << j;
        else
          EXPECT_EQ(y.tensor.data<std::string>()[j], pad ? "0.f" : cells[j]) << j;
      }
    }
  // A value that is no number, cast to float.
  const std::string b = one_node("CastMap", map_type(DType::kInt64, DType::kString), {attr_string("cast_to", "TO_FLOAT")});
  expect_refused([&] { run_one(b, map_value(Tensor::from_vector<int64_t>({1}, {3}), strings({"abc"}))); },
                 "InvalidArgument", {"the value 'abc' of key 3 is not a float"});
  // map(string, float) is not CastMap's input.
  expect_refused([&] {
    const std::string b2 = one_node("CastMap", map_type(DType::kString, DType::kFloat32), {});
    run_one(b2, map_value(strings({"a"}), Tensor::from_vector<float>({1}, {1})));
  }, "InvalidArgument", {"input must be map(int64, string) or map(int64, float), got map(string,tensor(float))"});
}

TEST(MlMaps, DictVectorizerValueTypes) {
  const std::string b = one_node("DictVectorizer", map_type(DType::kInt64, DType::kString),
                                 {attr_ints("int64_vocabulary", {7, 3, 9})});
  const Value y = run_one(b, map_value(Tensor::from_vector<int64_t>({2}, {9, 3}), strings({"nine", "three"})));
  ASSERT_EQ(y.tensor.shape(), (Shape{1, 3}));
  EXPECT_EQ(y.tensor.data<std::string>()[0], "");
  EXPECT_EQ(y.tensor.data<std::string>()[1], "three");
  EXPECT_EQ(y.tensor.data<std::string>()[2], "nine");
  const std::string d = one_node("DictVectorizer", map_type(DType::kString, DType::kFloat64),
                                 {attr_strings("string_vocabulary", {"b", "a"})});
  const Value yd = run_one(d, map_value(strings({"a"}), Tensor::from_vector<double>({1}, {0.1})));
  EXPECT_EQ(yd.tensor.dtype(), DType::kFloat64);
  EXPECT_EQ(yd.tensor.data<double>()[1], 0.1);
  // onnxruntime has no DictVectorizer from map(string, string).
  expect_refused([&] {
    const std::string s = one_node("DictVectorizer", map_type(DType::kString, DType::kString),
                                   {attr_strings("string_vocabulary", {"a"})});
    run_one(s, map_value(strings({"a"}), strings({"x"})));
  }, "NotImplemented", {"map(string,tensor(string))"});
  // A map of the wrong value type for the declared input.
  const std::string i = one_node("DictVectorizer", map_type(DType::kString, DType::kFloat32),
                                 {attr_strings("string_vocabulary", {"a"})});
  const std::string m = thrown_by([&] { run_one(i, map_value(strings({"a"}), Tensor::from_vector<double>({1}, {1}))); });
  EXPECT_NE(m.find("input 'x' has type map(string,tensor(double)), the model expects map(string,tensor(float))"),
            std::string::npos) << m;
}

TEST(MlMaps, MalformedNodesAreRefusedNamingNodeAndAttribute) {
  const auto x = Value::of(strings({"a"}));
  // LabelEncoder-4: key and value columns of different lengths; a double-valued default for strings.
  expect_refused([&] {
    run_one(one_node("LabelEncoder", ir::TypeInfo::tensor(DType::kString),
                     {attr_strings("keys_strings", {"a", "b"}), attr_ints("values_int64s", {1})}, 4), x);
  }, "InvalidModel", {"keys and values attributes have 2 and 1 entries"});
  expect_refused([&] {
    run_one(one_node("LabelEncoder", ir::TypeInfo::tensor(DType::kString),
                     {attr_strings("keys_strings", {"a"}), attr_tensor("values_tensor", Tensor::from_vector<int16_t>({1}, {1})),
                      attr_tensor("default_tensor", Tensor::from_vector<double>({1}, {1}))}, 4), x);
  }, "InvalidModel", {"default_tensor must hold one int16"});
  // CastMap: an unknown map_form.
  expect_refused([&] {
    run_one(one_node("CastMap", map_type(DType::kInt64, DType::kFloat32), {attr_string("map_form", "COMPACT")}),
            map_value(Tensor::from_vector<int64_t>({1}, {1}), Tensor::from_vector<float>({1}, {1})));
  }, "InvalidModel", {"map_form 'COMPACT' is not one of DENSE, SPARSE"});
  // TreeEnsemble-5: an unknown post_transform, a child out of range, a cycle, a bad mode.
  auto tree = [](std::vector<ir::Attribute> extra) {
    std::vector<ir::Attribute> a = {
        attr_int("n_targets", 1),
        attr_ints("nodes_featureids", {0, 0}),
        attr_tensor("nodes_splits", Tensor::from_vector<float>({2}, {0.5f, 1.5f})),
        attr_tensor("nodes_modes", Tensor::from_vector<uint8_t>({2}, {0, 0})),
        attr_ints("nodes_truenodeids", {0, 1}),
        attr_ints("nodes_trueleafs", {1, 1}),
        attr_ints("nodes_falsenodeids", {1, 2}),
        attr_ints("nodes_falseleafs", {0, 1}),
        attr_ints("leaf_targetids", {0, 0, 0}),
        attr_tensor("leaf_weights", Tensor::from_vector<float>({3}, {1, 2, 3})),
        attr_ints("tree_roots", {0})};
    for (auto& e : extra)
      for (auto& b : a)
        if (b.name == e.name) b = e;
    for (auto& e : extra) {
      bool found = false;
      for (auto& b : a) found = found || b.name == e.name;
      if (!found) a.push_back(e);
    }
    return one_node("TreeEnsemble", ir::TypeInfo::tensor(DType::kFloat32), a, 5);
  };
  const auto xt = Value::of(Tensor::from_vector<float>({3, 1}, {0.f, 1.f, 2.f}));
  {  // the well-formed tree: x <= 0.5 -> 1; x <= 1.5 -> 2; else 3
    const Value y = run_one(tree({}), xt);
    EXPECT_EQ(std::vector<float>(y.tensor.data<float>(), y.tensor.data<float>() + 3), (std::vector<float>{1, 2, 3}));
  }
  expect_refused([&] { run_one(tree({attr_int("post_transform", 5)}), xt); }, "InvalidModel",
                 {"attribute post_transform is 5"});
  expect_refused([&] { run_one(tree({attr_ints("nodes_falsenodeids", {1, 3})}), xt); }, "InvalidModel",
                 {"nodes_falsenodeids: node 1 has false child 3, out of range [0, 3) of the leaves"});
  expect_refused([&] { run_one(tree({attr_ints("nodes_falsenodeids", {1, 0}), attr_ints("nodes_falseleafs", {0, 0})}), xt); },
                 "InvalidModel", {"tree 0 has a cycle through node 0"});
  expect_refused([&] { run_one(tree({attr_tensor("nodes_modes", Tensor::from_vector<uint8_t>({2}, {0, 9}))}), xt); },
                 "InvalidModel", {"nodes_modes: node 1 has mode 9"});
  expect_refused([&] { run_one(tree({attr_ints("leaf_targetids", {0, 0})}), xt); }, "InvalidModel",
                 {"leaf_weights has 3 entries, leaf_targetids 2"});
  expect_refused([&] { run_one(tree({attr_tensor("nodes_modes", Tensor::from_vector<uint8_t>({2}, {6, 0}))}), xt); },
                 "InvalidModel", {"BRANCH_MEMBER node 0 has no values"});
  expect_refused([&] { run_one(tree({attr_ints("nodes_featureids", {0, 4})}), xt); }, "InvalidArgument",
                 {"reads feature 4 but X has 1 features"});
}
