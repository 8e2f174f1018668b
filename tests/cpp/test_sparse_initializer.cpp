// Sparse tensors in models (a graph's sparse_initializer, Constant's sparse_value) load as the dense
// tensors they stand for; malformed ones are refused, naming the tensor.
#include "ir/onnx_io.h"
#include "ir/proto.h"
#include "onnxtrain/session.h"
#include "test_util.h"

using namespace onnxtrain;

namespace {

// An empty model (graph "g") importing `opsets` (domain, version).
onnx::ModelProto model_importing(const std::vector<std::pair<std::string, int>>& opsets) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  for (const auto& [domain, version] : opsets) {
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  m.mutable_graph()->set_name("g");
  return m;
}

// y = x + w, x and y float [2, 3]; w a sparse initializer of dense shape `dims` with `values` at
// `indices` (of shape `index_dims`).
onnx::ModelProto sparse_add_model(const std::vector<int64_t>& dims, const std::vector<float>& values,
                                  const std::vector<int64_t>& indices, const std::vector<int64_t>& index_dims) {
  onnx::ModelProto m = model_importing({{"", 17}});
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type("Add");
  for (const std::string name : {"x", "w"}) *n->add_input() = name;
  *n->add_output() = std::string("y");
  auto declare = [](onnx::ValueInfoProto* vi, const std::string& name) {
    vi->set_name(name);
    auto* t = vi->mutable_type()->mutable_tensor_type();
    t->set_elem_type(1);
    t->mutable_shape()->add_dim()->set_dim_value(2);
    t->mutable_shape()->add_dim()->set_dim_value(3);
  };
  declare(g->add_input(), "x");
  declare(g->add_output(), "y");
  auto* sp = g->add_sparse_initializer();
  for (int64_t d : dims) sp->add_dims(d);
  auto* v = sp->mutable_values();
  v->set_name("w");
  v->set_data_type(1);
  v->add_dims(int64_t(values.size()));
  for (float f : values) v->add_float_data(f);
  auto* ix = sp->mutable_indices();
  ix->set_data_type(7);
  for (int64_t d : index_dims) ix->add_dims(d);
  for (int64_t i : indices) ix->add_int64_data(i);
  return m;
}

std::vector<float> run_add(const onnx::ModelProto& m) {
  const std::string b = m.SerializeAsString();
  InferenceSession s(b.data(), b.size());
  auto y = s.run({}, {{"x", Tensor::from_vector<float>({2, 3}, {1, 1, 1, 1, 1, 1})}});
  const float* p = y[0].data<float>();
  return std::vector<float>(p, p + y[0].numel());
}

void expect_refused(const onnx::ModelProto& m, const std::string& needle) {
  const std::string b = m.SerializeAsString();
  try {
    ir::load_model_bytes(b.data(), b.size());
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const InvalidModel& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("'w'"), std::string::npos) << "the error names the initializer: " << what;
  }
}

}  // namespace

TEST(SparseInitializer, LinearIndicesLoadDense) {
  // w = [[0, 5, 0], [0, 0, -2]]: linear indices 1 and 5.
  EXPECT_EQ(run_add(sparse_add_model({2, 3}, {5, -2}, {1, 5}, {2})), (std::vector<float>{1, 6, 1, 1, 1, -1}));
}

TEST(SparseInitializer, CoordinateIndicesLoadDense) {
  // The same w with [NNZ, rank] coordinates (0, 1) and (1, 2).
  EXPECT_EQ(run_add(sparse_add_model({2, 3}, {5, -2}, {0, 1, 1, 2}, {2, 2})), (std::vector<float>{1, 6, 1, 1, 1, -1}));
}

TEST(SparseInitializer, NoValuesIsAllZeros) {
  EXPECT_EQ(run_add(sparse_add_model({2, 3}, {}, {}, {0})), (std::vector<float>(6, 1.f)));
}

TEST(SparseInitializer, MalformedAreRefusedNamingTheInitializer) {
  expect_refused(sparse_add_model({2, 3}, {5, -2}, {1, 6}, {2}), "out of range");         // linear index past 6
  expect_refused(sparse_add_model({2, 3}, {5, -2}, {1, -1}, {2}), "out of range");        // negative index
  expect_refused(sparse_add_model({2, 3}, {5, -2}, {0, 1, 2, 0}, {2, 2}), "out of range"); // row 2 of 2 rows
  expect_refused(sparse_add_model({2, 3}, {5, -2}, {0, 3, 1, 2}, {2, 2}), "out of range"); // column 3 of 3
  expect_refused(sparse_add_model({2, 3}, {5, -2}, {1}, {1}), "indices have shape");       // one index for two values
  expect_refused(sparse_add_model({2, 3}, {5, -2}, {0, 1, 1, 2, 0, 0}, {2, 3}), "indices have shape");  // rank 3 tuples
  expect_refused(sparse_add_model({2, -3}, {5, -2}, {1, 5}, {2}), "negative dimension");
  expect_refused(sparse_add_model({1, 1}, {5, -2}, {0, 0}, {2}), "2 values for a dense shape");
  auto m = sparse_add_model({2, 3}, {5, -2}, {1, 5}, {2});
  m.mutable_graph()->mutable_sparse_initializer(0)->mutable_values()->set_dims(0, 1);
  m.mutable_graph()->mutable_sparse_initializer(0)->mutable_values()->add_dims(2);
  expect_refused(m, "values must be 1-D");
  m = sparse_add_model({2, 3}, {5, -2}, {1, 5}, {2});
  auto* ix = m.mutable_graph()->mutable_sparse_initializer(0)->mutable_indices();
  ix->clear_int64_data();
  ix->set_data_type(1);
  ix->add_float_data(1), ix->add_float_data(5);
  expect_refused(m, "indices must be int64");
  // A dense and a sparse initializer of one name.
  m = sparse_add_model({2, 3}, {5, -2}, {1, 5}, {2});
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  for (int i = 0; i < 2; ++i) w->add_dims(i == 0 ? 2 : 3);
  for (int i = 0; i < 6; ++i) w->add_float_data(0);
  expect_refused(m, "given twice");
}

TEST(SparseInitializer, ConstantSparseValueIsItsDenseTensor) {
  onnx::ModelProto m = sparse_add_model({2, 3}, {5, -2}, {1, 5}, {2});
  auto* g = m.mutable_graph();
  onnx::SparseTensorProto sp = g->sparse_initializer(0);
  g->clear_sparse_initializer();
  auto* c = g->add_node();
  c->set_op_type("Constant");
  *c->add_output() = std::string("w");
  auto* a = c->add_attribute();
  a->set_name("sparse_value");
  a->set_type(onnx::AttributeProto::SPARSE_TENSOR);
  *a->mutable_sparse_tensor() = sp;
  g->mutable_node()->SwapElements(0, 1);  // the Constant first
  EXPECT_EQ(run_add(m), (std::vector<float>{1, 6, 1, 1, 1, -1}));
  // Malformed there too: refused naming the node's attribute.
  a = g->mutable_node(0)->mutable_attribute(0);
  a->mutable_sparse_tensor()->mutable_indices()->set_int64_data(1, 9);
  const std::string b = m.SerializeAsString();
  try {
    ir::load_model_bytes(b.data(), b.size());
    ADD_FAILURE() << "expected an out-of-range error";
  } catch (const InvalidModel& e) {
    EXPECT_NE(std::string(e.what()).find("sparse_value"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

// com.microsoft SparseToDenseMatMul with its A declared sparse_tensor: the session computes on the
// dense A (the Python layer densifies a sparse feed), Y = alpha op(A) op(B); metadata keeps the
// declared type.
TEST(SparseInitializer, SparseToDenseMatMulRunsOnTheDenseA) {
  onnx::ModelProto m = model_importing({{"", 17}, {"com.microsoft", 1}});
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type("SparseToDenseMatMul");
  n->set_domain("com.microsoft");
  for (const std::string name : {"A", "B"}) *n->add_input() = name;
  *n->add_output() = std::string("Y");
  auto* alpha = n->add_attribute();
  alpha->set_name("alpha");
  alpha->set_type(onnx::AttributeProto::FLOAT);
  alpha->set_f(2.f);
  auto* ta = n->add_attribute();
  ta->set_name("transA");
  ta->set_type(onnx::AttributeProto::INT);
  ta->set_i(1);
  auto* a = g->add_input();
  a->set_name("A");
  a->mutable_type()->mutable_sparse_tensor_type()->set_elem_type(1);
  auto* b = g->add_input();
  b->set_name("B");
  b->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  auto* y = g->add_output();
  y->set_name("Y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  const std::string bytes = m.SerializeAsString();
  InferenceSession s(bytes.data(), bytes.size());
  EXPECT_EQ(s.get_inputs()[0].type, "sparse_tensor(float)");
  EXPECT_EQ(s.get_inputs()[1].type, "tensor(float)");
  // A = [[1, 0], [0, 3], [2, 0]] (3x2), A^T = [[1, 0, 2], [0, 3, 0]]; B = [[1, 2], [3, 4], [5, 6]].
  // 2 A^T B = 2 [[11, 14], [9, 12]].
  auto out = s.run({}, {{"A", Tensor::from_vector<float>({3, 2}, {1, 0, 0, 3, 2, 0})},
                        {"B", Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6})}});
  EXPECT_TRUE(ot_test::all_close(out[0], {2, 2}, {22, 28, 18, 24}));
}
