// The tiled sweep (src/kernel/sweep.hpp) against its float64 definition (sweep_reference.hpp), on
// fresh random tokens: both logit forms, a normalized and an unnormalized evaluator, every value
// path (kv = 0, the fused kv <= 4 and the register blocks beyond), keys other than the queries,
// causal prefixes, a block of the queries, the symmetric kernel, float64 and float32; 1 and 2
// threads give the same bits. The parts above (attention, the OT soft-min) test their drivers
// against their own references.
#include <gtest/gtest.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../../src/kernel/sweep.hpp"
#include "../../src/kernel/sweep_reference.hpp"
#include "../../src/simd/exp.hpp"
#include "test_util.hpp"

namespace tokenflow {
namespace {

using detail::InnerProductLogits;
using detail::LogitForm;
using detail::ScaledDistanceLogits;
using detail::SweepShape;

// An unnormalized evaluator whose weight depends on i and j, as Sinkhorn attention's does:
// w = sigma(s + f_i - g_j), so a sweep that passed the wrong indices (the symmetric kernel's
// transposed half, a block of queries) fails. |dw/ds| = w (1 - w) <= w.
template <class T>
struct IndexedSigmoid {
  static constexpr bool normalized = false;
  static constexpr LogitForm form = LogitForm::inner_product;
  const T* f;
  const T* g;
  T logit(T raw) const { return raw; }
  T weight(T s, Eigen::Index i, Eigen::Index j) const {
    return T(1) / (T(1) + simd::exp_poly(-(s + f[i] - g[j])));
  }
};

struct SweepCase {
  Eigen::Index n, m;  // queries, keys (m = n for causal and symmetric cases)
  int k, kv;
  bool causal, symmetric, block;  // block: only the queries [query_begin, query_end)
};

// Random tokens rounded to T (so the reference sees the kernel's inputs exactly).
template <class T>
Eigen::MatrixXd rounded(const Eigen::MatrixXd& m) {
  return m.cast<T>().template cast<double>();
}

// The kernel's layout of q, keys, v and a (SweepTokens' comments), and the sweep's results.
template <class T>
struct Packed {
  std::vector<T> q, kt, v, vt, a;
  std::vector<Eigen::Index> visible_end;
  detail::SweepTokens<T> tok;

  Packed(const Eigen::MatrixXd& queries, const Eigen::MatrixXd& keys, const Eigen::MatrixXd& values,
         const Eigen::VectorXd& weights, const std::vector<Eigen::Index>& visible)
      : visible_end(visible) {
    const Eigen::Index n = queries.rows(), m = keys.rows(), ldk = detail::key_stride<T>(m);
    const int k = static_cast<int>(queries.cols()), kv = static_cast<int>(values.cols());
    const int vs = detail::value_stride<T>(kv);
    q.assign(static_cast<std::size_t>(detail::padded_queries<T>(n) * k), T(0));
    kt.assign(static_cast<std::size_t>(ldk * k), T(0));
    a.assign(static_cast<std::size_t>(ldk), T(0));
    for (Eigen::Index i = 0; i < n; ++i)
      for (int c = 0; c < k; ++c)
        q[static_cast<std::size_t>(i * k + c)] = static_cast<T>(queries(i, c));
    for (Eigen::Index j = 0; j < m; ++j) {
      a[static_cast<std::size_t>(j)] = static_cast<T>(weights[j]);
      for (int c = 0; c < k; ++c)
        kt[static_cast<std::size_t>(detail::packed_key<T>(k, j, c))] = static_cast<T>(keys(j, c));
    }
    if (kv > SweepShape<T>::kSmallValues) {
      v.assign(static_cast<std::size_t>(ldk * vs), T(0));
      for (Eigen::Index j = 0; j < m; ++j)
        for (int c = 0; c < kv; ++c)
          v[static_cast<std::size_t>(j * vs + c)] = static_cast<T>(values(j, c));
    } else if (kv > 0) {
      vt.assign(static_cast<std::size_t>(kv * ldk), T(0));
      for (Eigen::Index j = 0; j < m; ++j)
        for (int c = 0; c < kv; ++c)
          vt[static_cast<std::size_t>(c * ldk + j)] = static_cast<T>(values(j, c));
    }
    tok.n = n;
    tok.keys = m;
    tok.k = k;
    tok.kv = kv;
    tok.q = q.data();
    tok.kt = kt.data();
    tok.v = v.empty() ? nullptr : v.data();
    tok.vt = vt.empty() ? nullptr : vt.data();
    tok.a = a.data();
    tok.visible_end = visible_end.empty() ? nullptr : visible_end.data();
  }
};

struct SweepOutput {
  Eigen::MatrixXd y;
  Eigen::VectorXd log_partition;
  std::vector<bool> written;
};

template <class T, class Ev>
SweepOutput run_sweep(const Ev& ev, const detail::SweepTokens<T>& tok, int threads) {
  SweepOutput out{Eigen::MatrixXd::Zero(tok.n, tok.kv), Eigen::VectorXd::Zero(tok.n),
                  std::vector<bool>(static_cast<std::size_t>(tok.n), false)};
  std::vector<detail::SweepScratch<T>> scratch(static_cast<std::size_t>(threads),
                                               detail::SweepScratch<T>(tok.kv));
  detail::SweepRows rows = detail::SweepRows::make<T>(tok.n, tok.kv);
  detail::sweep(ev, tok, scratch, &rows,
                [&](Eigen::Index i0, int count, const double* y, int stride, const double* lp) {
                  for (int r = 0; r < count; ++r) {
                    for (int c = 0; c < tok.kv; ++c) out.y(i0 + r, c) = y[r * stride + c];
                    out.log_partition[i0 + r] = lp[r];
                    out.written[static_cast<std::size_t>(i0 + r)] = true;
                  }
                });
  return out;
}

// The bound of |y_sweep - y_reference| per entry and of the log-partitions, from the arithmetic.
// u is the unit roundoff of T; S_i bounds |scale| times the sum of the absolute values of the terms
// of query i's raw logits (a logit may cancel to ~0, its rounding does not), and F the size of the
// indexed evaluator's shifts (max |f| + max |g|; 0 for the others). Per weight:
//   - a logit carries (k + 3) u S_i (k products and k - 1 sums; the difference and the square of
//     the squared distance; the evaluator's scale);
//   - the subtraction of the running maximum (itself a logit, so exact in T), or the indexed
//     shifts, 2 u (S_i + F); exp_poly kExpUlps u; the product by a_j, and the sigmoid's sum and
//     division, 3 u: |dw/ds| <= |w| for all three evaluators, so these are relative to the weight;
//   - a tile adds at most kKeyTile terms in T before it goes to double: (kKeyTile + 1) u, relative
//     to the sum of the absolute terms; the tiles' sums and rescalings in double, (3 tiles + 2)
//     u64.
// The reference (plain double loops) carries the same logit and weight errors at u64, and its
// sums of up to m terms (m + 1) u64. With G the total, a normalized row divides two sums:
// |y' - y| <= 2 G / (1 - G) sum_j w_ij |v_j|; an unnormalized one is off by G sum_j a_j w_ij |v_j|;
// a log-partition by G / (1 - G) plus the roundings of its log and sum in double.
struct Bound {
  Eigen::MatrixXd y;
  Eigen::VectorXd log_partition;
};

template <class Ev>
Bound derived_bound(const Ev& ev, const Eigen::MatrixXd& q, const Eigen::MatrixXd& keys,
                    const Eigen::MatrixXd& v, const Eigen::VectorXd& a,
                    const std::vector<Eigen::Index>& visible, double unit, double scale,
                    double shifts) {
  const Eigen::Index n = q.rows(), m = keys.rows();
  const double k = static_cast<double>(q.cols()), u64 = testing::kUnit64;
  const Eigen::MatrixXd qa = q.cwiseAbs(), ka = keys.cwiseAbs();
  // sum_j w_ij |v_jc| (normalized) or sum_j a_j w_ij |v_jc|: the reference with |v| for the values.
  const detail::ReferenceSweep weighted =
      detail::reference_sweep(ev, q, keys, v.cwiseAbs(), a, visible);
  Bound b{Eigen::MatrixXd::Zero(n, v.cols()), Eigen::VectorXd::Zero(n)};
  const double tiles = std::ceil(static_cast<double>(m) / SweepShape<float>::kKeyTile);
  const double kernel_sums = (SweepShape<float>::kKeyTile + 1.0) * unit + (3.0 * tiles + 2.0) * u64;
  const double reference_sums = (static_cast<double>(m) + 1.0) * u64;
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::Index end = visible.empty() ? m : visible[static_cast<std::size_t>(i)];
    double s_abs = 0.0;
    for (Eigen::Index j = 0; j < end; ++j)
      s_abs = std::max(s_abs, Ev::form == LogitForm::inner_product
                                  ? qa.row(i).dot(ka.row(j))
                                  : (qa.row(i) + ka.row(j)).squaredNorm());
    s_abs *= scale;
    auto per_weight = [&](double w) {
      return (k + 3.0) * w * s_abs + 2.0 * w * (s_abs + shifts) + (simd::kExpUlps + 3.0) * w;
    };
    const double g = per_weight(unit) + kernel_sums + per_weight(u64) + reference_sums;
    for (Eigen::Index c = 0; c < v.cols(); ++c)  // not row(i): kv = 0 holds no data
      b.y(i, c) = (Ev::normalized ? 2.0 * g / (1.0 - g) : g) * weighted.y(i, c);
    if constexpr (Ev::normalized)
      b.log_partition[i] = g / (1.0 - g) + 4.0 * u64 * (1.0 + std::abs(weighted.log_partition[i]));
  }
  return b;
}

// One case in T: tokens, the sweep at 1 and 2 threads, the reference, the bound.
template <class T>
void check_case(const SweepCase& c, bool distance, bool indexed, std::mt19937_64& rng) {
  const double unit = std::is_same_v<T, float> ? testing::kUnit32 : testing::kUnit64;
  const Eigen::MatrixXd q = rounded<T>(testing::random_matrix(rng, c.n, c.k, 1.0));
  const Eigen::MatrixXd keys =
      c.symmetric ? q : rounded<T>(testing::random_matrix(rng, c.m, c.k, 1.0));
  const Eigen::MatrixXd v = rounded<T>(testing::random_matrix(rng, c.m, c.kv, 1.0));
  std::uniform_real_distribution<double> uniform(0.1, 1.0);
  Eigen::VectorXd a(c.m);
  for (Eigen::Index j = 0; j < c.m; ++j) a[j] = static_cast<double>(static_cast<T>(uniform(rng)));
  if (c.m > 2) a[c.m / 2] = 0.0;  // an empty bin adds nothing
  std::vector<Eigen::Index> visible;
  if (c.causal) {  // nondecreasing, each query sees at least one key
    std::uniform_int_distribution<Eigen::Index> pick(1, c.m);
    for (Eigen::Index i = 0; i < c.n; ++i) visible.push_back(pick(rng));
    std::sort(visible.begin(), visible.end());
  }
  Packed<T> packed(q, keys, v, a, visible);
  packed.tok.symmetric = c.symmetric;
  if (c.symmetric) packed.tok.keys = -1;
  Eigen::Index begin = 0, end = c.n;
  if (c.block) {
    std::uniform_int_distribution<Eigen::Index> tile(0, (c.n - 1) / SweepShape<T>::kQueryTile);
    begin = tile(rng) * SweepShape<T>::kQueryTile;
    end = std::uniform_int_distribution<Eigen::Index>(begin + 1, c.n)(rng);
    packed.tok.query_begin = begin;
    packed.tok.query_end = end;
  }
  // The scale is the distance evaluator's (the inner-product kinds fold theirs into the queries).
  const double scale = distance ? 0.7 : 1.0;
  std::vector<T> f(static_cast<std::size_t>(c.n)), g(static_cast<std::size_t>(c.m));
  std::vector<double> fd(f.size()), gd(g.size());
  std::normal_distribution<double> normal;
  for (std::size_t i = 0; i < f.size(); ++i) fd[i] = f[i] = static_cast<T>(normal(rng));
  for (std::size_t j = 0; j < g.size(); ++j) gd[j] = g[j] = static_cast<T>(normal(rng));
  const double shifts =
      std::abs(*std::max_element(fd.begin(), fd.end(),
                                 [](double x, double y) { return std::abs(x) < std::abs(y); })) +
      std::abs(*std::max_element(gd.begin(), gd.end(),
                                 [](double x, double y) { return std::abs(x) < std::abs(y); }));

  auto compare = [&](const auto& ev, const auto& ev64) {
    const SweepOutput one = run_sweep<T>(ev, packed.tok, 1), two = run_sweep<T>(ev, packed.tok, 2);
    const detail::ReferenceSweep ref = detail::reference_sweep(ev64, q, keys, v, a, visible);
    const Bound bound =
        derived_bound(ev64, q, keys, v, a, visible, unit, scale, indexed ? shifts : 0.0);
    // The block's tiles are whole query tiles: the rows of [begin, end) and the rest of the last
    // tile.
    const Eigen::Index last =
        c.block
            ? std::min<Eigen::Index>(c.n, (end + SweepShape<T>::kQueryTile - 1) /
                                              SweepShape<T>::kQueryTile * SweepShape<T>::kQueryTile)
            : c.n;
    for (Eigen::Index i = 0; i < c.n; ++i) {
      ASSERT_EQ(one.written[static_cast<std::size_t>(i)], i >= begin && i < last) << "row " << i;
      if (!one.written[static_cast<std::size_t>(i)]) continue;
      for (int col = 0; col < c.kv; ++col) {
        ASSERT_EQ(one.y(i, col), two.y(i, col)) << "threads change row " << i;
        ASSERT_LE(std::abs(one.y(i, col) - ref.y(i, col)), bound.y(i, col))
            << "row " << i << " value " << col << ": " << one.y(i, col) << " vs " << ref.y(i, col);
      }
      ASSERT_EQ(one.log_partition[i], two.log_partition[i]);
      ASSERT_LE(std::abs(one.log_partition[i] - ref.log_partition[i]), bound.log_partition[i])
          << "row " << i;
    }
  };
  if (indexed)
    compare(IndexedSigmoid<T>{f.data(), g.data()}, IndexedSigmoid<double>{fd.data(), gd.data()});
  else if (distance)
    compare(ScaledDistanceLogits<T>{static_cast<T>(scale)},
            ScaledDistanceLogits<double>{static_cast<double>(static_cast<T>(scale))});
  else
    compare(InnerProductLogits<T>{}, InnerProductLogits<double>{});
}

std::vector<SweepCase> random_cases(std::mt19937_64& rng) {
  std::vector<SweepCase> cases;
  std::uniform_int_distribution<Eigen::Index> size(1, 420);
  std::uniform_int_distribution<int> dim(1, 6);
  for (const int kv : {0, 1, 2, 3, 4, 5, 9}) {
    const Eigen::Index n = size(rng), m = size(rng);
    cases.push_back({n, m, dim(rng), kv, false, false, false});  // keys other than the queries
    cases.push_back({n, n, dim(rng), kv, true, false, false});   // causal prefixes
    cases.push_back({n, m, dim(rng), kv, false, false, true});   // a block of the queries
    // Symmetric: several blocks of kSymmetricBlock queries, an odd and an even count.
    cases.push_back({std::uniform_int_distribution<Eigen::Index>(200, 700)(rng), 0, dim(rng), kv,
                     false, true, false});
  }
  for (SweepCase& c : cases)
    if (c.symmetric) c.m = c.n;
  return cases;
}

template <class T>
void check_every_case() {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  for (const SweepCase& c : random_cases(rng))
    for (const int evaluator : {0, 1, 2}) {
      // Symmetric cases: the logits of q with q are symmetric for every evaluator; the indexed one
      // checks that the transposed half passes (j, i).
      SCOPED_TRACE(::testing::Message()
                   << "seed " << seed << " n " << c.n << " m " << c.m << " k " << c.k << " kv "
                   << c.kv << " causal " << c.causal << " symmetric " << c.symmetric << " block "
                   << c.block << " evaluator " << evaluator);
      check_case<T>(c, evaluator == 1, evaluator == 2, rng);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

TEST(TiledSweep, Float64MatchesTheReference) {
  check_every_case<double>();
}

TEST(TiledSweep, Float32MatchesTheReference) {
  check_every_case<float>();
}

}  // namespace
}  // namespace tokenflow
