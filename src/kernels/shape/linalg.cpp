#include "kernels/shape/linalg.h"

#include <algorithm>
#include <utility>

namespace onnxtrain::kernels::shape {

namespace {

int label_of(char c) { return c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= 'A' && c <= 'Z' ? c - 'A' : -1; }

}  // namespace

EinsumSpec parse_einsum(const PrepareContext& ctx, const std::string& equation, const std::vector<size_t>& ranks) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const bool explicit_out = arrow != std::string::npos;
  const std::string lhs = explicit_out ? eq.substr(0, arrow) : eq;
  std::vector<std::string> terms;
  for (size_t p = 0;;) {
    const size_t q = lhs.find(',', p);
    terms.push_back(lhs.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  if (terms.size() != ranks.size())
    ctx.fail("equation '", equation, "' has ", terms.size(), " operand terms for ", ranks.size(), " inputs");

  // Letters and ellipsis of one term; ell = index of the ellipsis among the letters or -1.
  auto split = [&](const std::string& t, std::vector<int>* letters, int* ell) {
    *ell = -1;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] == '.') {
        if (*ell >= 0 || t.compare(i, 3, "...") != 0) ctx.fail("malformed ellipsis in equation '", equation, "'");
        *ell = int(letters->size());
        i += 2;
        continue;
      }
      const int l = label_of(t[i]);
      if (l < 0) ctx.fail("invalid character '", t[i], "' in equation '", equation, "'");
      letters->push_back(l);
    }
  };
  EinsumSpec s;
  size_t ell_rank = 0;
  std::vector<std::pair<std::vector<int>, int>> parsed;
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<int> letters;
    int ell;
    split(terms[i], &letters, &ell);
    if (ell < 0 ? letters.size() != ranks[i] : letters.size() > ranks[i])
      ctx.fail("term '", terms[i], "' does not match input ", i, " of rank ", ranks[i]);
    if (ell >= 0) ell_rank = std::max(ell_rank, ranks[i] - letters.size());
    parsed.emplace_back(letters, ell);
  }
  if (ell_rank > 64) ctx.fail("the ellipsis spans ", ell_rank, " dims (at most 64)");
  // Letters with the ellipsis replaced by its `e` (right-aligned) dims.
  auto expand = [&](const std::vector<int>& letters, int ell, size_t e) {
    if (ell < 0) return letters;
    std::vector<int> r(letters.begin(), letters.begin() + ell);
    for (size_t k = ell_rank - e; k < ell_rank; ++k) r.push_back(52 + int(k));
    r.insert(r.end(), letters.begin() + ell, letters.end());
    return r;
  };
  for (size_t i = 0; i < terms.size(); ++i) {
    const auto& [letters, ell] = parsed[i];
    s.inputs.push_back(expand(letters, ell, ell < 0 ? 0 : ranks[i] - letters.size()));
  }
  int count[52] = {0};
  for (const auto& [letters, ell] : parsed)
    for (int l : letters) ++count[l];
  if (explicit_out) {
    std::vector<int> letters;
    int ell;
    split(eq.substr(arrow + 2), &letters, &ell);
    for (size_t i = 0; i < letters.size(); ++i) {
      if (count[letters[i]] == 0) ctx.fail("output label '", eq[arrow + 2 + i], "' is not an input label");
      if (std::count(letters.begin(), letters.end(), letters[i]) > 1)
        ctx.fail("output label repeated in equation '", equation, "'");
    }
    s.output = expand(letters, ell, ell_rank);
  } else {  // ellipsis dims, then labels seen once in alphabetical (ASCII) order
    for (size_t k = 0; k < ell_rank; ++k) s.output.push_back(52 + int(k));
    for (int l = 0; l < 52; ++l)
      if (count[l] == 1) s.output.push_back(l);
  }
  return s;
}

EinsumGeom einsum_geometry(const PrepareContext& ctx, const std::string& equation) {
  const size_t n = ctx.num_inputs();
  if (n == 0) ctx.fail("Einsum needs at least one input");
  const DType dt = ctx.input_dtype(0);
  require_element_type(ctx, dt, dtype_is_float(dt) || dtype_is_integer(dt));
  std::vector<size_t> ranks;
  for (size_t i = 0; i < n; ++i) {
    if (ctx.input_dtype(i) != dt)
      ctx.fail("input ", i, " has element type ", dtype_name(ctx.input_dtype(i)), ", expected ", dtype_name(dt));
    ranks.push_back(ctx.input_rank(i));
  }
  EinsumGeom g;
  g.spec = parse_einsum(ctx, equation, ranks);
  // Label sizes (1 broadcasts).
  g.size.assign(52 + 64, -1);
  for (size_t i = 0; i < n; ++i) {
    const Shape& s = ctx.input_shape(i);
    for (size_t d = 0; d < s.size(); ++d) {
      for (size_t e = 0; e < d; ++e)
        if (g.spec.inputs[i][e] == g.spec.inputs[i][d] && s[e] != s[d])
          ctx.fail("repeated label of input ", i, " spans dims of different sizes ", shape_to_string(s));
      int64_t& z = g.size[size_t(g.spec.inputs[i][d])];
      if (z == -1 || z == 1) z = s[d];
      else if (s[d] != z && s[d] != 1)
        ctx.fail("label sizes disagree in '", equation, "': ", z, " vs ", s[d], " (input ", i, " ", shape_to_string(s),
                 ")");
    }
  }
  for (int l : g.spec.output) g.output.push_back(g.size[size_t(l)]);
  return g;
}

}  // namespace onnxtrain::kernels::shape
