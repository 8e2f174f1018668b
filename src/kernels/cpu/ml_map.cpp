// ai.onnx.ml operators on map values (opset 1, unchanged through opset 5), with onnxruntime's
// semantics (its kernels are what users compare with):
//   ZipMap(X float [N, C] or [C]) -> seq(map(string|int64, float)): one map per row, keys the
//     class labels (a repeated label keeps its last column, as std::map assignment does);
//   DictVectorizer(map(K, V)) -> V [1, len(vocabulary)]: the map's value of each vocabulary entry,
//     0 (or "") for entries the map lacks; onnxruntime's key/value pairs only (string keys with
//     int64, float or double values; int64 keys with string, float or double values);
//   CastMap(map(int64, string|float)) -> [1, n] float, int64 or string: DENSE the values in key
//     order (n = the map's size); SPARSE position k holds key k's value, absent keys padded (0, or
//     the string "0.f" as onnxruntime pads), keys past max_map dropped, negative keys refused.
// Maps hold their keys sorted (include/onnxtrain/value.h), so key order is onnxruntime's std::map
// order.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/cpu/common.h"
#include "kernels/cpu/ml_common.h"
#include "kernels/registry.h"
#include "kernels/shape/ml.h"

namespace onnxtrain::kernels::cpu {

namespace {

using shape::kMlDomain;

// Input 0 must be a map (or a sequence of maps when `sequence`); names what it is otherwise.
void require_map_input(const PrepareContext& ctx, bool sequence) {
  const Value::Kind want = sequence ? Value::Kind::kMapSequence : Value::Kind::kMap;
  if (ctx.input_kind(0) != want)
    ctx.fail("input 0 must be ", sequence ? "a sequence of maps" : "a map", ", got ",
             ctx.input_kind(0) == Value::Kind::kTensor ? "a tensor" : "another kind of value");
}

// The position of `key` among a map's sorted keys, or -1.
template <class K>
int64_t find_key(const Tensor& keys, const K& key) {
  const K* b = keys.data<K>();
  const K* e = b + keys.numel();
  const K* it = std::lower_bound(b, e, key);
  return it != e && *it == key ? int64_t(it - b) : -1;
}

// ---------------------------------------------------------------- ZipMap
class ZipMapKernel final : public Kernel {
 public:
  explicit ZipMapKernel(const KernelInfo& info) {
    const auto ints = info.attr_ints("classlabels_int64s", {});
    const auto strings = info.attr_strings("classlabels_strings", {});
    if (ints.empty() == strings.empty())
      info.fail("exactly one of classlabels_strings and classlabels_int64s is required (non-empty)");
    const int64_t n = int64_t(strings.empty() ? ints.size() : strings.size());
    columns_ = n;
    key_ = strings.empty() ? DType::kInt64 : DType::kString;
    // The sorted, unique keys once, and the column each takes its value from (the last one).
    Tensor keys = Tensor::empty(key_, {n}), cols = Tensor::empty(DType::kFloat32, {n});
    for (int64_t k = 0; k < n; ++k) {
      if (strings.empty()) keys.data<int64_t>()[k] = ints[size_t(k)];
      else keys.data<std::string>()[k] = strings[size_t(k)];
      cols.data<float>()[k] = float(k);  // exact below 2^24 columns (checked in prepare)
    }
    MapData m = make_map(keys, cols);
    keys_ = m.keys;
    for (int64_t k = 0; k < m.values.numel(); ++k) source_.push_back(int64_t(m.values.data<float>()[k]));
  }
  void prepare(PrepareContext& ctx) override {
    if (ctx.input_kind(0) != Value::Kind::kTensor) ctx.fail("input X must be a tensor");
    if (ctx.input_dtype(0) != DType::kFloat32) ctx.fail("input X must be float, got ", dtype_name(ctx.input_dtype(0)));
    const Shape& s = ctx.input_shape(0);
    if (s.empty() || s.size() > 2) ctx.fail("input X must be [N, C] or [C] (1-D or 2-D), got ", shape_to_string(s));
    if (s.back() != columns_)
      ctx.fail("input X has ", s.back(), " columns but there are ", columns_, " class labels");
    if (columns_ >= (int64_t(1) << 24)) ctx.fail("too many class labels (", columns_, ")");
    rows_ = s.size() == 2 ? s[0] : 1;
    ctx.set_output_maps(0, key_, DType::kFloat32, true);
  }
  void run(RunContext& ctx) override {
    const float* x = ctx.input(0).data<float>();
    Value& out = ctx.output_value(0);
    out.kind = Value::Kind::kMapSequence;
    out.key = key_;
    out.elem = DType::kFloat32;
    out.maps.clear();
    out.maps.reserve(size_t(rows_));
    const int64_t m = int64_t(source_.size());
    for (int64_t r = 0; r < rows_; ++r) {
      Tensor v = Tensor::empty(DType::kFloat32, {m});
      float* d = v.data<float>();
      for (int64_t k = 0; k < m; ++k) d[k] = x[r * columns_ + source_[size_t(k)]];
      out.maps.push_back(MapData{keys_, std::move(v)});  // the keys are shared, never written
    }
  }

 private:
  int64_t columns_ = 0, rows_ = 0;
  DType key_ = DType::kUndefined;
  Tensor keys_;
  std::vector<int64_t> source_;
};

// ---------------------------------------------------------------- DictVectorizer
class DictVectorizerKernel final : public Kernel {
 public:
  explicit DictVectorizerKernel(const KernelInfo& info)
      : strings_(info.attr_strings("string_vocabulary", {})), ints_(info.attr_ints("int64_vocabulary", {})) {
    if (strings_.empty() == ints_.empty())
      info.fail("exactly one of string_vocabulary and int64_vocabulary is required (non-empty)");
    key_ = strings_.empty() ? DType::kInt64 : DType::kString;
  }
  void prepare(PrepareContext& ctx) override {
    require_map_input(ctx, false);
    const DType key = ctx.input_key_dtype(0), value = ctx.input_dtype(0);
    if (key != key_)
      ctx.fail("the input map has ", dtype_name(key), " keys but the vocabulary is ",
               key_ == DType::kString ? "string_vocabulary" : "int64_vocabulary");
    const bool supported = key == DType::kString
                               ? value == DType::kInt64 || value == DType::kFloat32 || value == DType::kFloat64
                               : value == DType::kString || value == DType::kFloat32 || value == DType::kFloat64;
    if (!supported)
      throw_error<NotImplemented>(ctx.node().describe(), ": DictVectorizer of a ", map_type_string(key, value),
                                  " (onnxruntime's kernels take map(string, int64|float|double) and "
                                  "map(int64, string|float|double))");
    const int64_t n = int64_t(key_ == DType::kString ? strings_.size() : ints_.size());
    shape::check_output_size(ctx, {1, n}, value);
    ctx.set_output(0, value, {1, n});
  }
  void run(RunContext& ctx) override {
    const MapData& m = ctx.input_value(0).maps.at(0);
    Tensor& y = ctx.output(0);
    const int64_t n = y.numel();
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = key_ == DType::kString ? find_key(m.keys, strings_[size_t(j)]) : find_key(m.keys, ints_[size_t(j)]);
      switch (y.dtype()) {
        case DType::kString: y.data<std::string>()[j] = at < 0 ? std::string() : m.values.data<std::string>()[at]; break;
        case DType::kInt64: y.data<int64_t>()[j] = at < 0 ? 0 : m.values.data<int64_t>()[at]; break;
        case DType::kFloat32: y.data<float>()[j] = at < 0 ? 0.f : m.values.data<float>()[at]; break;
        default: y.data<double>()[j] = at < 0 ? 0.0 : m.values.data<double>()[at]; break;
      }
    }
  }

 private:
  std::vector<std::string> strings_;
  std::vector<int64_t> ints_;
  DType key_;
};

// ---------------------------------------------------------------- CastMap
class CastMapKernel final : public Kernel {
 public:
  explicit CastMapKernel(const KernelInfo& info) {
    const std::string to = info.attr_string("cast_to", "TO_FLOAT");
    if (to == "TO_FLOAT") to_ = DType::kFloat32;
    else if (to == "TO_INT64") to_ = DType::kInt64;
    else if (to == "TO_STRING") to_ = DType::kString;
    else info.fail("attribute cast_to '", to, "' is not one of TO_FLOAT, TO_INT64, TO_STRING");
    const std::string form = info.attr_string("map_form", "DENSE");
    if (form != "DENSE" && form != "SPARSE") info.fail("attribute map_form '", form, "' is not one of DENSE, SPARSE");
    sparse_ = form == "SPARSE";
    max_map_ = info.attr_int("max_map", 1);
    if (sparse_ && max_map_ <= 0) info.fail("attribute max_map is ", max_map_, ": it must be > 0 when map_form is SPARSE");
  }
  void prepare(PrepareContext& ctx) override {
    require_map_input(ctx, false);
    const DType key = ctx.input_key_dtype(0), value = ctx.input_dtype(0);
    if (key != DType::kInt64 || (value != DType::kString && value != DType::kFloat32))
      ctx.fail("input must be map(int64, string) or map(int64, float), got ", map_type_string(key, value));
    if (sparse_) {
      shape::check_output_size(ctx, {1, max_map_}, to_);
      ctx.set_output(0, to_, {1, max_map_});
    } else {
      ctx.set_output_dynamic(0, to_);  // as many columns as the map has keys
    }
  }
  void run(RunContext& ctx) override {
    const MapData& m = ctx.input_value(0).maps.at(0);
    const int64_t n = m.keys.numel();
    const int64_t* keys = m.keys.data<int64_t>();
    Tensor& y = sparse_ ? ctx.output(0) : ctx.allocate_output(0, to_, {1, n});
    const int64_t width = y.numel();
    if (sparse_ && n > 0 && keys[0] < 0)
      ctx.fail("Negative index values are not permitted: the map's first key is ", keys[0], " (map_form SPARSE)");
    int64_t next = 0;  // the next map entry (SPARSE)
    for (int64_t j = 0; j < width; ++j) {
      int64_t at = j;  // DENSE: entry j
      if (sparse_) {
        at = next < n && keys[next] == j ? next++ : -1;
      }
      if (at < 0) pad(y, j);
      else cast(ctx, m, at, y, j);
    }
  }

 private:
  void pad(Tensor& y, int64_t j) const {
    if (to_ == DType::kString) y.data<std::string>()[j] = "0.f";  // onnxruntime's string pad
    else if (to_ == DType::kInt64) y.data<int64_t>()[j] = 0;
    else y.data<float>()[j] = 0.f;
  }
  // Value `at` of the map cast to the output type, as onnxruntime's std::stof / std::stoll /
  // std::to_string / static_cast do; what they would throw on (or what is undefined) fails here.
  void cast(const RunContext& ctx, const MapData& m, int64_t at, Tensor& y, int64_t j) const {
    const int64_t key = m.keys.data<int64_t>()[at];
    if (m.values.dtype() == DType::kFloat32) {
      const float f = m.values.data<float>()[at];
      if (to_ == DType::kFloat32) {
        y.data<float>()[j] = f;
      } else if (to_ == DType::kString) {
        y.data<std::string>()[j] = std::to_string(f);
      } else {
        if (!(f >= -9.2233720368547758e18f && f < 9.2233720368547758e18f))
          ctx.fail("the value ", f, " of key ", key, " does not fit int64 (cast_to TO_INT64)");
        y.data<int64_t>()[j] = int64_t(f);
      }
      return;
    }
    const std::string& s = m.values.data<std::string>()[at];
    if (to_ == DType::kString) {
      y.data<std::string>()[j] = s;
      return;
    }
    char* end = nullptr;
    errno = 0;
    if (to_ == DType::kFloat32) {
      const float f = std::strtof(s.c_str(), &end);
      if (end == s.c_str() || errno == ERANGE)
        ctx.fail("the value '", s, "' of key ", key, " is not a float (cast_to TO_FLOAT)");
      y.data<float>()[j] = f;
    } else {
      const long long i = std::strtoll(s.c_str(), &end, 10);
      if (end == s.c_str() || errno == ERANGE)
        ctx.fail("the value '", s, "' of key ", key, " is not an int64 (cast_to TO_INT64)");
      y.data<int64_t>()[j] = int64_t(i);
    }
  }

  DType to_ = DType::kFloat32;
  bool sparse_ = false;
  int64_t max_map_ = 1;
};

}  // namespace

void register_ml_map(KernelRegistry& r) {
  // Version 1 of ai.onnx.ml, unchanged through opset 5.
  constexpr int64_t kMlMax = 5;
  r.add(kMlDomain, "CastMap", 1, kMlMax, ml_factory<CastMapKernel>());
  r.add(kMlDomain, "DictVectorizer", 1, kMlMax, ml_factory<DictVectorizerKernel>());
  r.add(kMlDomain, "ZipMap", 1, kMlMax, ml_factory<ZipMapKernel>());
}

}  // namespace onnxtrain::kernels::cpu
