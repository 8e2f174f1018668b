// Adasum over MPI by recursive vector halving and distance doubling (see adasum.h).
//
// At level d (1, 2, 4, ... < size) the ranks [k * 2d, (k + 1) * 2d) merge two subtrees: the left
// one (ranks whose bit d is 0) holds its combined vector A spread over its d ranks, one segment
// each, the right one holds B the same way, and the partners r and r ^ d own the same segment.
// The left partner keeps the first half of that segment, the right one the second half; each
// receives the other's values for its half, so the 2d ranks together hold A and B once, split into
// disjoint halves. Partial A.B, |A|^2 and |B|^2 per tensor summed over the 2d ranks give every
// rank the coefficients; each combines its half. After the last level a rank owns 1/size of the
// result, and the same exchanges in reverse order (distance halving) hand every rank the whole.
#include "distributed/adasum.h"

#include <algorithm>

#include "distributed/comm.h"
#include "onnxtrain/error.h"

namespace onnxtrain::distributed {

namespace {

struct Segment {
  int64_t lo = 0, hi = 0;
};

/// Adds, per tensor overlapping [lo, hi), the partial a.b, |a|^2 and |b|^2 of that range to
/// dots[3 t .. 3 t + 2]. `a` and `b` point at element lo of the left and right subtree's values.
template <class T>
void partial_dots(const T* a, const T* b, int64_t lo, int64_t hi, const std::vector<int64_t>& offsets,
                  std::vector<double>& dots) {
  const size_t nt = offsets.size() - 1;
  size_t t = size_t(std::upper_bound(offsets.begin(), offsets.end(), lo) - offsets.begin()) - 1;
  for (; t < nt && offsets[t] < hi; ++t) {
    const int64_t s = std::max(lo, offsets[t]), e = std::min(hi, offsets[t + 1]);
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = s - lo; i < e - lo; ++i) {
      const double x = double(a[i]), y = double(b[i]);
      ab += x * y;
      aa += x * x;
      bb += y * y;
    }
    dots[3 * t] += ab;
    dots[3 * t + 1] += aa;
    dots[3 * t + 2] += bb;
  }
}

/// out[i] = ca a[i] + cb b[i] over [lo, hi) with each tensor's coefficients from its summed dots;
/// `out` may alias `a` or `b`.
template <class T>
void combine(const T* a, const T* b, T* out, int64_t lo, int64_t hi, const std::vector<int64_t>& offsets,
             const std::vector<double>& dots) {
  const size_t nt = offsets.size() - 1;
  size_t t = size_t(std::upper_bound(offsets.begin(), offsets.end(), lo) - offsets.begin()) - 1;
  for (; t < nt && offsets[t] < hi; ++t) {
    const int64_t s = std::max(lo, offsets[t]), e = std::min(hi, offsets[t + 1]);
    const double ab = dots[3 * t], aa = dots[3 * t + 1], bb = dots[3 * t + 2];
    // A zero vector contributes nothing whatever its coefficient; 1 keeps adasum(0, b) = b.
    const double ca = aa > 0 ? 1.0 - ab / (2.0 * aa) : 1.0;
    const double cb = bb > 0 ? 1.0 - ab / (2.0 * bb) : 1.0;
    for (int64_t i = s - lo; i < e - lo; ++i) out[i] = T(ca * double(a[i]) + cb * double(b[i]));
  }
}

template <class T>
void adasum_impl(T* data, DType dt, const std::vector<int64_t>& sizes, int rank, int size, const char* what) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  for (size_t t = 0; t < sizes.size(); ++t) {
    OT_CHECK(sizes[t] >= 0, InvalidArgument, what, ": Adasum got a negative tensor size ", sizes[t]);
    offsets[t + 1] = offsets[t] + sizes[t];
  }
  const int64_t total = offsets.back();
  if (total == 0) return;  // the same on every rank: nothing to exchange

  std::vector<T> recv(size_t(total - total / 2));  // the largest half ever received
  std::vector<double> dots(3 * sizes.size());
  std::vector<Segment> kept;  // the segment this rank kept at each level, for the reverse pass
  Segment seg{0, total};
  for (int d = 1; d < size; d <<= 1) {
    const int peer = rank ^ d;
    const bool left = (rank & d) == 0;
    const int64_t mid = seg.lo + (seg.hi - seg.lo) / 2;
    const Segment keep = left ? Segment{seg.lo, mid} : Segment{mid, seg.hi};
    const Segment give = left ? Segment{mid, seg.hi} : Segment{seg.lo, mid};
    raw::sendrecv(data + give.lo, give.hi - give.lo, recv.data(), keep.hi - keep.lo, dt, peer, what);

    // The left subtree's values are "a" on both partners, so the pair computes one formula.
    T* mine = data + keep.lo;
    const T* a = left ? mine : recv.data();
    const T* b = left ? recv.data() : mine;
    std::fill(dots.begin(), dots.end(), 0.0);
    partial_dots(a, b, keep.lo, keep.hi, offsets, dots);
    raw::group_allreduce_sum(dots.data(), int64_t(dots.size()), DType::kFloat64, 2 * d, what);
    combine(a, b, mine, keep.lo, keep.hi, offsets, dots);

    kept.push_back(keep);
    seg = keep;
  }

  // Reverse: at level d the partners own the two halves of their parent segment; swapping them
  // rebuilds it on both. Elements are only copied, so every rank ends with the same bits.
  for (int l = int(kept.size()) - 1; l >= 0; --l) {
    const int d = 1 << l;
    const Segment mine = kept[size_t(l)];
    const Segment parent = l > 0 ? kept[size_t(l - 1)] : Segment{0, total};
    const Segment other = (rank & d) == 0 ? Segment{mine.hi, parent.hi} : Segment{parent.lo, mine.lo};
    raw::sendrecv(data + mine.lo, mine.hi - mine.lo, data + other.lo, other.hi - other.lo, dt, rank ^ d, what);
  }
}

}  // namespace

void adasum_allreduce(void* data, DType dt, const std::vector<int64_t>& sizes, int rank, int size, const char* what) {
  if (dt != DType::kFloat32 && dt != DType::kFloat64)
    throw_error<NotImplemented>(what, ": Adasum supports float and double gradients, got ", dtype_name(dt));
  if (size < 1 || (size & (size - 1)) != 0)
    throw_error<NotImplemented>(what, ": Adasum needs a power-of-two number of ranks, got ", size);
  OT_CHECK(rank >= 0 && rank < size, InvalidArgument, what, ": rank ", rank, " outside a world of ", size);
  if (size == 1) return;
  if (dt == DType::kFloat32)
    adasum_impl(static_cast<float*>(data), dt, sizes, rank, size, what);
  else
    adasum_impl(static_cast<double*>(data), dt, sizes, rank, size, what);
}

}  // namespace onnxtrain::distributed
