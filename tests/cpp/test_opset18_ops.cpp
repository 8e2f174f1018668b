// ai.onnx opset 18's operators that have no opset-17 form, kept as they are in a graph lowered to
// 17 (ir/opset_lower.h): Bitwise{And,Or,Xor,Not}, Col2Im, ScatterElements / ScatterND with
// reduction max and min, ReduceMax/Min/Prod/LogSumExp with axes as input 1. Kernels against naive
// references; malformed nodes; models importing 17 refuse them; exports are raised to opset 18.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ir/onnx_io.h"
#include "ir/opset_lower.h"
#include "onnxtrain/error.h"
#include "test_util.h"

using namespace ot_test;
using onnxtrain::Tensor;

namespace {

template <class E>
void expect_throw_with(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "other exception: " << e.what();
  }
}

Tensor i64s(const Shape& s, const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(s, v); }

// Naive Col2Im (ONNX's definition, torch's fold): Y[n, c, p] += X[n, c K + k, l] where p is block
// position k of block l, skipped when it falls in the padding.
std::vector<double> col2im_ref(const std::vector<double>& x, int64_t N, int64_t C, const Shape& img, const Shape& blk,
                               const Shape& dil, const Shape& pads, const Shape& str) {
  const size_t nd = img.size();
  Shape out(nd);
  int64_t K = 1, L = 1, P = 1;
  for (size_t i = 0; i < nd; ++i) {
    out[i] = (img[i] + pads[i] + pads[nd + i] - (dil[i] * (blk[i] - 1) + 1)) / str[i] + 1;
    K *= blk[i];
    L *= out[i];
    P *= img[i];
  }
  std::vector<double> y(size_t(N * C * P), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t l = 0; l < L; ++l) {
          const std::vector<int64_t> kk = unravel(k, blk), ll = unravel(l, out);
          std::vector<int64_t> p(nd);
          bool inside = true;
          for (size_t i = 0; i < nd; ++i) {
            p[i] = ll[i] * str[i] - pads[i] + kk[i] * dil[i];
            inside = inside && p[i] >= 0 && p[i] < img[i];
          }
          if (inside) y[size_t((n * C + c) * P + ravel(p, img))] += x[size_t(((n * C + c) * K + k) * L + l)];
        }
  return y;
}

}  // namespace

namespace {

// Bitwise* on T against the operators of C++ on each pair (b broadcast along the last axis).
template <class T>
void check_bitwise(std::mt19937& rng) {
  const double lo = std::numeric_limits<T>::is_signed ? -100 : 0;
  const Tensor a = random_tensor(onnxtrain::dtype_v<T>, {2, 3, 4}, rng, lo, 100);
  const Tensor b = random_tensor(onnxtrain::dtype_v<T>, {3, 1}, rng, lo, 100);
  const T* av = a.data<T>();
  const T* bv = b.data<T>();
  for (int which = 0; which < 4; ++which) {
    const char* op = which == 0 ? "BitwiseAnd" : which == 1 ? "BitwiseOr" : which == 2 ? "BitwiseXor" : "BitwiseNot";
    const Tensor got = which == 3 ? run_node(op, {a})[0] : run_node(op, {a, b})[0];
    ASSERT_EQ(got.shape(), (Shape{2, 3, 4})) << op;
    for (int64_t i = 0; i < 24; ++i) {
      const T x = av[i], y = bv[i / 4 % 3];
      const T r = which == 0 ? T(x & y) : which == 1 ? T(x | y) : which == 2 ? T(x ^ y) : T(~x);
      ASSERT_EQ(got.data<T>()[i], r) << op << " " << onnxtrain::dtype_name(onnxtrain::dtype_v<T>) << " at " << i;
    }
  }
}

}  // namespace

TEST(Opset18Ops, BitwiseKernelsMatchNaiveReference) {
  std::mt19937 rng(181);
  check_bitwise<int8_t>(rng);
  check_bitwise<uint8_t>(rng);
  check_bitwise<int16_t>(rng);
  check_bitwise<uint16_t>(rng);
  check_bitwise<int32_t>(rng);
  check_bitwise<uint32_t>(rng);
  check_bitwise<int64_t>(rng);
  check_bitwise<uint64_t>(rng);
}

TEST(Opset18Ops, BitwiseOnFloatsIsRefusedNamingNodeAndType) {
  const Tensor f = Tensor::from_vector<float>({2}, {1, 2});
  expect_throw_with<onnxtrain::InvalidArgument>(
      [&] {
        run_node("BitwiseAnd", {f, f});
      },
      {"BitwiseAnd", "input 0 has element type float", "integer types"});
  expect_throw_with<onnxtrain::InvalidArgument>([&] { run_node("BitwiseNot", {f}); }, {"BitwiseNot", "float"});
}

TEST(Opset18Ops, Col2ImMatchesNaiveReference) {
  std::mt19937 rng(182);
  struct Case {
    Shape img, blk, dil, pads, str;
  };
  for (const Case& k : {Case{{5}, {2}, {1}, {0, 0}, {1}}, Case{{4, 5}, {2, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}},
                        Case{{6, 5}, {2, 2}, {2, 1}, {1, 0, 2, 1}, {2, 3}},
                        Case{{3, 4, 3}, {2, 2, 1}, {1, 1, 1}, {0, 1, 0, 0, 0, 1}, {1, 2, 1}}}) {
    const size_t nd = k.img.size();
    int64_t K = 1, L = 1;
    for (size_t i = 0; i < nd; ++i) {
      K *= k.blk[i];
      L *= (k.img[i] + k.pads[i] + k.pads[nd + i] - (k.dil[i] * (k.blk[i] - 1) + 1)) / k.str[i] + 1;
    }
    const int64_t N = 2, C = 3;
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      const Tensor x = random_tensor(dt, {N, C * K, L}, rng);
      const std::vector<ir::Attribute> at{attr_ints("dilations", k.dil), attr_ints("pads", k.pads),
                                          attr_ints("strides", k.str)};
      const Tensor y = run_node("Col2Im", {x, i64s({int64_t(nd)}, k.img), i64s({int64_t(nd)}, k.blk)}, at)[0];
      Shape ys{N, C};
      ys.insert(ys.end(), k.img.begin(), k.img.end());
      EXPECT_TRUE(all_close(y, ys, col2im_ref(to_double(x), N, C, k.img, k.blk, k.dil, k.pads, k.str), 1e-5, 1e-6))
          << "nd " << nd;
      // image_shape and block_shape as constants (known when the kernel prepares) give the same.
      RunOptions consts;
      consts.inputs_as_constants = true;
      EXPECT_TRUE(
          same_bits(run_node("Col2Im", {x, i64s({int64_t(nd)}, k.img), i64s({int64_t(nd)}, k.blk)}, at, consts)[0], y));
    }
  }
}

TEST(Opset18Ops, Col2ImMalformedInputsAreRefused) {
  const Tensor x = Tensor::from_vector<float>({1, 4, 4}, std::vector<float>(16, 1.0f));
  auto col2im = [&](const Tensor& in, const Tensor& img, const Tensor& blk, std::vector<ir::Attribute> at = {}) {
    return [=] { run_node("Col2Im", {in, img, blk}, at); };
  };
  const Tensor img = i64s({2}, {3, 3}), blk = i64s({2}, {2, 2});
  expect_throw_with<onnxtrain::Error>(col2im(x, i64s({1}, {3}), blk), {"Col2Im", "image_shape and block_shape"});
  expect_throw_with<onnxtrain::Error>(col2im(x, img, i64s({2}, {2, 0})), {"Col2Im", "block_shape", "positive"});
  expect_throw_with<onnxtrain::Error>(col2im(x, i64s({2}, {3, -3}), blk), {"Col2Im", "image_shape", "positive"});
  expect_throw_with<onnxtrain::Error>(col2im(x, img, blk, {attr_ints("strides", {1, 0})}), {"Col2Im", "strides"});
  expect_throw_with<onnxtrain::Error>(col2im(x, img, blk, {attr_ints("dilations", {1})}), {"Col2Im", "dilations"});
  expect_throw_with<onnxtrain::Error>(col2im(x, img, blk, {attr_ints("pads", {1, 1})}), {"Col2Im", "pads"});
  // 4 blocks of 2x2 in a 3x3 image: x must be [N, C * 4, 4]; here dim 1 is 3.
  const Tensor bad = Tensor::from_vector<float>({1, 3, 4}, std::vector<float>(12, 1.0f));
  expect_throw_with<onnxtrain::Error>(col2im(bad, img, blk), {"Col2Im", "multiple of prod(block_shape)"});
  expect_throw_with<onnxtrain::Error>(
      col2im(Tensor::from_vector<float>({1, 4, 5}, std::vector<float>(20, 1.0f)), img, blk),
      {"Col2Im", "number of blocks 4"});
  // Sizes past int64 are refused, not allocated.
  const int64_t big = int64_t(1) << 40;
  expect_throw_with<onnxtrain::Error>(
      col2im(Tensor::from_vector<float>({1, 1, 1}, {1.0f}), i64s({2}, {big, big}), i64s({2}, {big, big})), {"Col2Im"});
  expect_throw_with<onnxtrain::Error>(col2im(x, img, blk, {attr_int("auto_pad", 1)}), {"Col2Im", "auto_pad"});
}

TEST(Opset18Ops, ScatterMaxMinMatchNaiveReference) {
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1, 5, 3, -2, 0, 4});
  const Tensor idx = i64s({2, 2}, {1, 0, 1, 0});  // along axis 0, duplicates
  const Tensor u = Tensor::from_vector<float>({2, 2}, {-1, 7, 2, -6});
  // max: column 0 rows 1 <- -1, 2 (max with -2: 2); column 1 row 0 <- 7, -6 (max with 5: 7)
  EXPECT_TRUE(
      all_close(run_node("ScatterElements", {x, idx, u}, {attr_int("axis", 0), attr_string("reduction", "max")})[0],
                {2, 3}, {1, 7, 3, 2, 0, 4}));
  EXPECT_TRUE(
      all_close(run_node("ScatterElements", {x, idx, u}, {attr_int("axis", 0), attr_string("reduction", "min")})[0],
                {2, 3}, {1, -6, 3, -2, 0, 4}));
  const Tensor nd_idx = i64s({3, 1}, {1, 0, 1});
  const Tensor nd_u = Tensor::from_vector<float>({3, 3}, {0, 9, 0, 2, 2, 2, -5, -5, 10});
  EXPECT_TRUE(all_close(run_node("ScatterND", {x, nd_idx, nd_u}, {attr_string("reduction", "max")})[0], {2, 3},
                        {2, 5, 3, 0, 9, 10}));
  EXPECT_TRUE(all_close(run_node("ScatterND", {x, nd_idx, nd_u}, {attr_string("reduction", "min")})[0], {2, 3},
                        {1, 2, 2, -5, -5, 0}));
}

TEST(Opset18Ops, ReduceWithAxesInputAtSeventeen) {
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1, -5, 3, 2, 0.5f, 4});
  const Tensor ax = i64s({1}, {-1});
  auto reduce = [&](const char* op) { return run_node(op, {x, ax}, {attr_int("keepdims", 0)})[0]; };
  EXPECT_TRUE(all_close(reduce("ReduceMax"), {2}, {3, 4}));
  EXPECT_TRUE(all_close(reduce("ReduceMin"), {2}, {-5, 0.5}));
  EXPECT_TRUE(all_close(reduce("ReduceProd"), {2}, {-15, 4}));
  EXPECT_TRUE(all_close(reduce("ReduceLogSumExp"), {2},
                        {std::log(std::exp(1.0) + std::exp(-5.0) + std::exp(3.0)),
                         std::log(std::exp(2.0) + std::exp(0.5) + std::exp(4.0))}));
}

namespace {

ir::Model model17(std::vector<ir::Node> nodes, std::vector<ir::ValueInfo> inputs, std::vector<ir::ValueInfo> outputs,
                  int64_t opset = 17) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = opset;
  m.graph = std::make_shared<ir::Graph>();
  m.graph->name = "g";
  m.graph->nodes = std::move(nodes);
  m.graph->inputs = std::move(inputs);
  m.graph->outputs = std::move(outputs);
  return m;
}

}  // namespace

TEST(Opset18Ops, ExportsAreRaisedToOpset18) {
  // A lowered graph (import 17) holding BitwiseAnd and a ReduceMax with its axes attribute.
  ir::Model m =
      model17({make_node("BitwiseAnd", {"a", "b"}, {"c"}), make_node("Cast", {"c"}, {"f"}, {attr_int("to", 1)}),
               make_node("ReduceMax", {"f"}, {"y"}, {attr_ints("axes", {1}), attr_int("keepdims", 0)})},
              {value_info("a", DType::kInt32, {2, 3}), value_info("b", DType::kInt32, {2, 3})},
              {value_info("y", DType::kFloat32)});
  const std::string bytes = ir::serialize_model(m);
  ir::Model back = ir::load_model_bytes(bytes.data(), bytes.size());
  EXPECT_EQ(back.opset(""), 17);  // lowered again at load
  const Tensor a = Tensor::from_vector<int32_t>({2, 3}, {12, 7, 5, 1, 2, 3});
  const Tensor b = Tensor::from_vector<int32_t>({2, 3}, {10, 3, 4, 1, 6, 3});
  EXPECT_TRUE(all_close(run_model(back, {a, b})[0], {2}, {8, 3}));
  // The serialized form: import 18, the ReduceMax's axes a Constant input.
  onnx::ModelProto p;
  ASSERT_TRUE(p.ParseFromString(bytes));
  for (const auto& o : p.opset_import()) {
    if (o.domain().empty()) {
      EXPECT_EQ(o.version(), 18);
    }
  }
  bool found = false;
  for (const auto& n : p.graph().node())
    if (n.op_type() == "ReduceMax") {
      found = true;
      EXPECT_EQ(n.input_size(), 2);
      for (const auto& at : n.attribute()) EXPECT_NE(at.name(), "axes");
    }
  EXPECT_TRUE(found);
  // Without an opset-18 form the export stays at 17 with the attribute.
  ir::Model plain = model17({make_node("ReduceMax", {"f"}, {"y"}, {attr_ints("axes", {1})})},
                            {value_info("f", DType::kFloat32, {2, 3})}, {value_info("y", DType::kFloat32)});
  ASSERT_TRUE(p.ParseFromString(ir::serialize_model(plain)));
  EXPECT_EQ(p.opset_import(0).version(), 17);
  EXPECT_EQ(p.graph().node(0).input_size(), 1);
}

TEST(Opset18Ops, ModelsImportingSeventeenRefuseOpset18Forms) {
  for (const ir::Node& n : {make_node("BitwiseAnd", {"a", "a"}, {"y"}),
                            make_node("ScatterElements", {"a", "i", "a"}, {"y"}, {attr_string("reduction", "max")}),
                            make_node("ReduceProd", {"a", "i"}, {"y"})}) {
    ir::Model m = model17({n}, {value_info("a", DType::kInt64, {2}), value_info("i", DType::kInt64, {1})},
                          {value_info("y", DType::kInt64)}, 16);
    const std::string bytes = ir::serialize_model(m);
    expect_throw_with<onnxtrain::InvalidGraph>([&] { ir::load_model_bytes(bytes.data(), bytes.size()); },
                                               {n.op_type, "needs ai.onnx opset 18; the model imports opset 16"});
  }
}
