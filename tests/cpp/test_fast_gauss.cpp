// The fast Gaussian average (tokenflow/fast_gauss.hpp) against its float64 reference on fresh
// random inputs: the per-row contract |out_i - exact_i| <= tol sum_j P_ij |v_j| across clouds 0.1
// to 30 bandwidths wide, weights spanning e^10, the softmax form's weights exp(|k|^2 / 2), d = 1, 2,
// 3 and targets far outside the cloud; and the attention field with attention.summation = fast
// against the reference attention.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "test_util.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/fast_gauss.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;

// One row's exact softmax over the exponents e (n) with values v (n x c), in float64 with the
// max-shift: the average sum_j P_j v_j, the scale sum_j P_j |v_j| and the log-partition log sum_j
// exp(e_j).
struct ExactRow {
  Eigen::RowVectorXd average;
  double scale = 0.0, log_partition = 0.0;
};
ExactRow exact_row(const Eigen::VectorXd& e, const GaussMatrix& v) {
  const double top = e.maxCoeff();
  double D = 0.0, A = 0.0;
  Eigen::RowVectorXd N = Eigen::RowVectorXd::Zero(v.cols());
  for (Eigen::Index j = 0; j < e.size(); ++j) {
    const double w = std::exp(e[j] - top);
    D += w;
    A += w * v.row(j).norm();
    N += w * v.row(j);
  }
  return ExactRow{N / D, A / D, top + std::log(D)};
}

// sum_j P_ij |v_j| per row, in float64 with the log-sum-exp shift.
Eigen::VectorXd row_scale(const GaussMatrix& y, const GaussMatrix& x, const Eigen::VectorXd& l, const GaussMatrix& v,
                          double s) {
  Eigen::VectorXd out(y.rows());
  Eigen::VectorXd e(x.rows());
  for (Eigen::Index i = 0; i < y.rows(); ++i) {
    for (Eigen::Index j = 0; j < x.rows(); ++j) e[j] = l[j] - s * (y.row(i) - x.row(j)).squaredNorm();
    out[i] = exact_row(e, v).scale;
  }
  return out;
}

// A test case's name from its operator<< ('.' and '-' made '_').
template <class Case>
std::string case_name(const ::testing::TestParamInfo<Case>& param_info) {
  std::ostringstream name;
  name << param_info.param;
  std::string s = name.str();
  for (char& ch : s)
    if (ch == '.' || ch == '-') ch = '_';
  return s;
}

struct GaussCase {
  int k = 2;
  double spread = 1.0;  // standard deviation of the cloud in bandwidths 1/sqrt(s)
  bool softmax = false;  // the softmax form: s = 1/2, log-weights + |x|^2 / 2
  bool force_grid = true;
  double tol = 1e-6;
};

std::ostream& operator<<(std::ostream& os, const GaussCase& c) {
  return os << "k" << c.k << "_spread" << c.spread << (c.softmax ? "_softmax" : "_l2") << "_tol" << c.tol;
}

class FastGaussContract : public ::testing::TestWithParam<GaussCase> {};

TEST_P(FastGaussContract, EveryRowWithinTolOfItsWeightedValueScale) {
  const GaussCase c = GetParam();
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 10.0);  // log-weights: a range of e^10
  const Eigen::Index n = c.k == 3 ? 500 : 700, m = 300, outliers = 40;
  const double s = c.softmax ? 0.5 : 1.0 + 3.0 * std::abs(normal(rng));
  const double sd = c.spread / std::sqrt(s);
  GaussMatrix x(n, c.k), v(n, c.k + 1), y(m, c.k);
  Eigen::VectorXd l(n);
  for (Eigen::Index j = 0; j < n; ++j) {
    for (int e = 0; e < c.k; ++e) x(j, e) = sd * normal(rng);
    for (int e = 0; e <= c.k; ++e) v(j, e) = normal(rng);
    l[j] = uniform(rng) + (c.softmax ? 0.5 * x.row(j).squaredNorm() : 0.0);
  }
  if (n > 10) l[3] = -std::numeric_limits<double>::infinity();  // a zero weight
  for (Eigen::Index i = 0; i < m; ++i)
    for (int e = 0; e < c.k; ++e) y(i, e) = (i < m - outliers ? 1.0 : 4.0) * sd * normal(rng);
  GaussAverageOptions options;
  options.tol = c.tol;
  if (c.force_grid) options.max_cost_per_pair = std::numeric_limits<double>::infinity();
  GaussMatrix out;
  const GaussAverageStats stats = gauss_average(y, x, l, v, s, options, out);
  const GaussMatrix want = reference_gauss_average(y, x, l, v, s);
  const Eigen::VectorXd scale = row_scale(y, x, l, v, s);
  // The contract bounds the error against exact arithmetic; the reference and the exact rows are
  // sums of n terms, each within gamma_{n+4} of it (Higham 4.3): 4 (n + 4) u on both sides.
  const double rounding = 4.0 * (n + 4) * testing::kEps;
  for (Eigen::Index i = 0; i < m; ++i) {
    const double error = (out.row(i) - want.row(i)).norm();
    ASSERT_LE(error, (c.tol + rounding) * scale[i]) << "row " << i << (i >= m - outliers ? " (outlier)" : "");
  }
  EXPECT_EQ(stats.rows_expanded + stats.rows_exact, m);
  if (c.force_grid) {
    EXPECT_TRUE(stats.grid);
    // Where the envelope is a few times the sum it bounds (l2, any spread; the softmax form for a
    // cloud well within a bandwidth: at spread 1 with outliers at 4x it is the hard-max regime of
    // docs/fast-summation.md, where the grid certified only 94 of 260 rows for one seed), the grid
    // certifies most rows: the expansion is the fast path.
    if (!c.softmax || c.spread <= 0.1) {
      EXPECT_GE(stats.rows_expanded, (m - outliers) / 2) << "rho " << stats.plan.spacing << " p " << stats.plan.order;
    }
  }
}

std::vector<GaussCase> contract_cases() {
  std::vector<GaussCase> cases;
  for (int k : {1, 2, 3})
    for (double spread : {0.1, 1.0, 3.0, 10.0, 30.0})
      for (bool softmax : {false, true}) {
        GaussCase c;
        c.k = k;
        c.spread = spread;
        c.softmax = softmax;
        // Forced grids stay small enough for the fast tier (the grid grows as spread^k).
        c.force_grid = k == 1 || (k == 2 && spread <= 3.0) || (k == 3 && spread <= 0.1);
        cases.push_back(c);
      }
  GaussCase loose;
  loose.tol = 1e-3;
  cases.push_back(loose);
  loose.k = 3;
  loose.force_grid = false;
  cases.push_back(loose);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Clouds, FastGaussContract, ::testing::ValuesIn(contract_cases()),
                         case_name<GaussCase>);

TEST(FastGauss, RejectsBadShapesAndWeights) {
  GaussMatrix x = GaussMatrix::Zero(4, 2), v = GaussMatrix::Ones(4, 1), out;
  Eigen::VectorXd l = Eigen::VectorXd::Zero(4);
  GaussAverageOptions o;
  EXPECT_THROW(gauss_average(GaussMatrix::Zero(3, 4), GaussMatrix::Zero(4, 4), l, v, 1.0, o, out), std::invalid_argument);
  EXPECT_THROW(gauss_average(x, x, l, v, 0.0, o, out), std::invalid_argument);
  Eigen::VectorXd none = Eigen::VectorXd::Constant(4, -std::numeric_limits<double>::infinity());
  EXPECT_THROW(gauss_average(x, x, none, v, 1.0, o, out), std::invalid_argument);
  l[1] = std::nan("");
  EXPECT_THROW(gauss_average(x, x, l, v, 1.0, o, out), std::invalid_argument);
}

// The rows summed exactly (no grid: max_cost_per_pair = 0) for every count of value columns the
// exact path specializes (0 to 3) and one beyond (5), in k = 1, 2, 3, against the reference, with
// targets far outside the cloud (whose rows leave out the cells beyond e^-(40 + log n) of their
// largest term) and a zero weight; the same bits at 1 and 2 threads.
TEST(FastGauss, ExactRowsMatchTheReferenceForEveryValueCount) {
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 10.0);
  const Eigen::Index n = 3000, m = 120;
  for (int k : {1, 2, 3})
    for (int c : {0, 1, 2, 3, 5}) {
      const double s = 0.5 + std::abs(normal(rng));
      GaussMatrix x(n, k), v(n, c), y(m, k);
      Eigen::VectorXd l(n);
      for (Eigen::Index j = 0; j < n; ++j) {
        for (int e = 0; e < k; ++e) x(j, e) = 3.0 * (e + 1) * normal(rng);  // anisotropic, wide
        for (int e = 0; e < c; ++e) v(j, e) = normal(rng);
        l[j] = uniform(rng);
      }
      l[7] = -std::numeric_limits<double>::infinity();
      for (Eigen::Index i = 0; i < m; ++i)
        for (int e = 0; e < k; ++e) y(i, e) = (i % 4 == 0 ? 12.0 : 3.0) * (e + 1) * normal(rng);
      GaussAverageOptions options;
      options.max_cost_per_pair = 0.0;
      GaussMatrix out, out_one;
      Eigen::VectorXd L, L_one;
      const GaussAverageStats stats = gauss_average(y, x, l, v, s, options, out, &L);
      EXPECT_FALSE(stats.grid);
      EXPECT_EQ(stats.rows_exact, m);
      const GaussMatrix want = reference_gauss_average(y, x, l, v, s);
      const GaussMatrix norms = GaussMatrix::Ones(n, 1);
      const Eigen::VectorXd scale = row_scale(y, x, l, c > 0 ? v : norms, s);
      for (Eigen::Index i = 0; i < m; ++i) {
        // The exponents x_ij = l_j - s |y_i - x_j|^2: each within (k + 3) u (|l_j| + s r_ij^2) in
        // both codes, moving L_i and the averages by at most that much (relative) between them;
        // then sums of n terms (exp within 2 ulp) within gamma_{n+4} each (Higham 4.3).
        double largest = 0.0, top = -std::numeric_limits<double>::infinity();
        Eigen::VectorXd ex(n);
        for (Eigen::Index j = 0; j < n; ++j) {
          const double r2 = s * (y.row(i) - x.row(j)).squaredNorm();
          ex[j] = l[j] - r2;
          top = std::max(top, ex[j]);
          if (std::isfinite(l[j])) largest = std::max(largest, std::abs(l[j]) + r2);
        }
        const double sum = (ex.array() - top).exp().sum();
        const double rounding = 2.0 * ((k + 3) * largest + 4.0 * (n + 4)) * testing::kEps;
        EXPECT_NEAR(L[i], top + std::log(sum), rounding + std::abs(top) * testing::kEps) << "k " << k << " c " << c;
        if (c > 0) {
          EXPECT_LE((out.row(i) - want.row(i)).norm(), rounding * scale[i]) << "k " << k << " c " << c << " row " << i;
        }
      }
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      gauss_average(y, x, l, v, s, options, out_one, &L_one);
      omp_set_num_threads(threads);
      if (c > 0) {  // with no value columns out.data() is null, which memcmp may not be given
        EXPECT_EQ(std::memcmp(out.data(), out_one.data(), sizeof(double) * static_cast<std::size_t>(out.size())), 0);
      }
      EXPECT_EQ(std::memcmp(L.data(), L_one.data(), sizeof(double) * static_cast<std::size_t>(m)), 0);
    }
}

TEST(FastGauss, TruncationBoundFallsWithTheOrder) {
  // The bound is K (S^2 - S_p^2) summed over dimensions: decreasing in p down to the rounding
  // floor, increasing in rho and k.
  for (int k : {1, 2, 3}) {
    double previous = INFINITY;
    for (int p = 2; p <= 16; ++p) {
      const double b = gauss_expansion_bound(0.5, p, k, 20);
      EXPECT_LT(b, previous);
      previous = b;
    }
    EXPECT_LT(gauss_expansion_bound(0.5, 12, k, 20), gauss_expansion_bound(1.0, 12, k, 20));
  }
  EXPECT_LT(gauss_expansion_bound(0.5, 12, 1, 20), gauss_expansion_bound(0.5, 12, 3, 20));
}

// ---- softmax_average: random Q, K, V, not only the identity -------------------------------------

struct SoftmaxCase {
  int k = 2;
  double condition = 1.0;  // of Q^T K's factors: Q = U diag(1, .., 1/condition) W
  double spread = 1.0;     // multiplies Q: logits up to spread^2 times those of N(0, 1/k) entries
};

std::ostream& operator<<(std::ostream& os, const SoftmaxCase& c) {
  return os << "k" << c.k << "_cond" << c.condition << "_spread" << c.spread;
}

class FastSoftmaxContract : public ::testing::TestWithParam<SoftmaxCase> {};

// Queries Q x and keys K x of N(0, I) tokens with Q, K, V ~ N(0, 1/k) (the random weights,
// whose query and key clouds differ in extent), Q's singular values spread by `condition`: every row
// within tol sum_j P_ij |v_j| of the exact softmax average, the log-partition within tol, and (k <= 2)
// the grid, not the exact fallback, summing most rows where spread <= 1.5.
TEST_P(FastSoftmaxContract, EveryRowWithinTolAndMostRowsFromTheGrid) {
  const SoftmaxCase c = GetParam();
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<double> uniform(0.0, 2.0);
  const Eigen::Index n = c.k == 3 ? 1500 : 3000, m = 400;
  const double sd = 1.0 / std::sqrt(static_cast<double>(c.k));
  Eigen::MatrixXd Q = testing::random_matrix(rng, c.k, c.k, sd), K = testing::random_matrix(rng, c.k, c.k, sd);
  const Eigen::MatrixXd V = testing::random_matrix(rng, c.k + 1, c.k, sd);
  const linalg::Svd svd = linalg::svd(Q);
  Eigen::VectorXd sigma = Eigen::VectorXd::LinSpaced(c.k, 0.0, -std::log(c.condition)).array().exp();
  Q = c.spread * svd.U * sigma.asDiagonal() * svd.V.transpose() * svd.singular_values[0];
  const GaussMatrix x = testing::random_matrix(rng, n, c.k, 1.0);
  const GaussMatrix queries = x.topRows(m) * Q.transpose() / std::sqrt(std::sqrt(static_cast<double>(c.k)));
  const GaussMatrix keys = x * K.transpose() / std::sqrt(std::sqrt(static_cast<double>(c.k)));
  const GaussMatrix v = x * V.transpose();
  Eigen::VectorXd log_a(n);
  for (Eigen::Index j = 0; j < n; ++j) log_a[j] = std::log(uniform(rng) + 0.01);
  GaussAverageOptions options;
  // k <= 2: the grid, whatever n. k = 3 keeps the cost rule (p^3 terms a node: a forced grid and
  // its retries take a minute at this n), so its rows may be exact sums; the contract is the same.
  const bool force_grid = c.k <= 2;
  if (force_grid) options.max_cost_per_pair = std::numeric_limits<double>::infinity();
  GaussMatrix out;
  Eigen::VectorXd log_partition;
  const GaussAverageStats stats = softmax_average(queries, keys, log_a, v, options, out, &log_partition);
  const SoftmaxGaussForm form = softmax_gauss_form(queries, keys, log_a);
  const double largest_key = form.sources.rowwise().squaredNorm().maxCoeff();
  // The exact average in float64 with the max-shift, and sum_j P_ij |v_j|.
  const double rounding = 4.0 * (n + 4) * testing::kEps;  // both sides' sums of n terms (Higham 4.3)
  Eigen::VectorXd e(n);
  for (Eigen::Index i = 0; i < m; ++i) {
    for (Eigen::Index j = 0; j < n; ++j) e[j] = log_a[j] + queries.row(i).dot(keys.row(j));
    const ExactRow exact = exact_row(e, v);
    ASSERT_LE((out.row(i) - exact.average).norm(), (options.tol + rounding) * exact.scale) << "row " << i;
    // |log F - log D| <= -log(1 - tol) <= 1.01 tol, plus the rounding of the sums and of the
    // exponents: the Gauss form adds and subtracts |q~|^2 / 2 and |k~|^2 / 2 (stretched up to 8 on
    // the retries: |k~|^2 x 64), a few units of each.
    const double exponent_rounding =
        8.0 * testing::kEps * (form.targets.row(i).squaredNorm() + 64.0 * largest_key + std::abs(e.maxCoeff()));
    ASSERT_LE(std::abs(log_partition[i] - exact.log_partition), 1.01 * options.tol + rounding + exponent_rounding)
        << "row " << i;
  }
  EXPECT_EQ(stats.rows_expanded + stats.rows_exact, m);
  if (!force_grid) return;
  EXPECT_TRUE(stats.grid);
  // Most rows come from the grid at spread <= 1 (the rest are exact sums: the contract holds either
  // way). Measured: at least 399 of 400 rows over 14 seeds per case, and at k = 2, condition 1,
  // spread 1, 298 of 300 fresh draws (clang, ASan) at least 360 rows, the two others 307 and 312:
  // a draw whose keys spread wider rejects more rows. Two thirds leaves room for draws not seen.
  if (c.spread <= 1.5) {
    EXPECT_GE(stats.rows_expanded, 2 * m / 3) << "passes " << stats.passes << " p " << stats.plan.order;
  }
}

std::vector<SoftmaxCase> softmax_cases() {
  std::vector<SoftmaxCase> cases;
  for (int k : {1, 2, 3})
    for (double condition : {1.0, 10.0, 100.0})
      for (double spread : {0.3, 1.0, 3.0}) {
        if (k == 1 && condition > 1.0) continue;
        cases.push_back(SoftmaxCase{k, condition, spread});
      }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(RandomWeights, FastSoftmaxContract, ::testing::ValuesIn(softmax_cases()),
                         case_name<SoftmaxCase>);

TEST(FastSoftmax, GaussFormKeepsTheLogits) {
  // <q~_i, k~_j> + <q_i, mu> = <q_i, k_j>: the form changes the grid's clouds, never the logits.
  std::mt19937_64 rng(fresh_seed());
  for (int k : {1, 2, 3}) {
    const GaussMatrix q = testing::random_matrix(rng, 50, k, 2.0), keys = testing::random_matrix(rng, 60, k, 0.5);
    const Eigen::VectorXd log_a = Eigen::VectorXd::Zero(60);
    for (double stretch : {1.0, 4.0}) {
      const SoftmaxGaussForm form = softmax_gauss_form(q, keys, log_a, stretch);
      const Eigen::MatrixXd want = q * keys.transpose();
      const Eigen::MatrixXd mean_term = (q * keys.colwise().mean().transpose()).replicate(1, 60);
      const Eigen::MatrixXd got = form.targets * form.sources.transpose() + mean_term;
      // Entries of size |q| |k| ~ 10 (k = 3), each through a k x k product twice: 16 k u of that.
      EXPECT_LE((got - want).cwiseAbs().maxCoeff(), 16.0 * k * testing::kEps * want.cwiseAbs().maxCoeff()) << "k " << k;
      // The keys' form is white at stretch 1: covariance f^2 I.
      const Eigen::MatrixXd centred = form.sources.rowwise() - form.sources.colwise().mean();
      const Eigen::MatrixXd cov = centred.transpose() * centred / 60.0;
      EXPECT_LE((cov - stretch * stretch * Eigen::MatrixXd::Identity(k, k)).cwiseAbs().maxCoeff(), 1e-10 * stretch * stretch);
    }
  }
}

TEST(FastSoftmax, WeightedFormKeepsTheLogitsAndWhitensTheWeightedKeys) {
  // With the keys' moments weighted by a_j (log-weights over e^20, one zero weight), the logits are
  // kept (row_offset - |q~|^2 / 2 = <q, mu>, mu the weighted mean) and the keys' weighted
  // covariance in the form is f^2 I.
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<double> uniform(-10.0, 10.0);
  for (int k : {1, 2, 3}) {
    const Eigen::Index n = 80;
    const GaussMatrix q = testing::random_matrix(rng, 50, k, 2.0), keys = testing::random_matrix(rng, n, k, 0.5);
    Eigen::VectorXd log_a(n);
    for (Eigen::Index j = 0; j < n; ++j) log_a[j] = uniform(rng);
    log_a[5] = -std::numeric_limits<double>::infinity();
    for (double stretch : {1.0, 4.0}) {
      const SoftmaxGaussForm form = softmax_gauss_form(q, keys, log_a, stretch, nullptr, true);
      const Eigen::VectorXd mean_term = form.row_offset - 0.5 * form.targets.rowwise().squaredNorm();
      const Eigen::MatrixXd want = q * keys.transpose();
      const Eigen::MatrixXd got = form.targets * form.sources.transpose() + mean_term.replicate(1, n);
      // Entries of size |q| |k| ~ 10 (k = 3) through k x k products twice, and the offset's
      // |q~|^2 / 2 (up to |q|^2 |C| / f^2 ~ 40) added and taken away: 16 k u of both.
      EXPECT_LE((got - want).cwiseAbs().maxCoeff(),
                16.0 * k * testing::kEps * (want.cwiseAbs().maxCoeff() + form.targets.rowwise().squaredNorm().maxCoeff()))
          << "k " << k;
      Eigen::VectorXd share = (log_a.array() - log_a.maxCoeff()).exp();
      share /= share.sum();
      const Eigen::RowVectorXd mean = share.transpose() * form.sources;
      const Eigen::MatrixXd centred = form.sources.rowwise() - mean;
      const Eigen::MatrixXd cov = centred.transpose() * share.asDiagonal() * centred;
      EXPECT_LE(mean.cwiseAbs().maxCoeff(), 1e-10 * stretch) << "k " << k;
      EXPECT_LE((cov - stretch * stretch * Eigen::MatrixXd::Identity(k, k)).cwiseAbs().maxCoeff(), 1e-10 * stretch * stretch)
          << "k " << k;
    }
  }
}

TEST(FastSoftmax, CentredFormKeepsTheLogits) {
  // <q~_i, k~_j - c> + <q~_i, c> + <q_i, mu> = <q_i, k_j> for any centre c.
  std::mt19937_64 rng(fresh_seed());
  for (int k : {1, 2, 3}) {
    const GaussMatrix q = testing::random_matrix(rng, 50, k, 2.0),
                      keys = testing::random_matrix(rng, 60, k, 0.5);
    const Eigen::VectorXd log_a = Eigen::VectorXd::Zero(60);
    const Eigen::RowVectorXd centre = testing::random_matrix(rng, 1, k, 3.0);
    const SoftmaxGaussForm form = softmax_gauss_form(q, keys, log_a, 1.0, &centre);
    const Eigen::MatrixXd want = q * keys.transpose();
    const Eigen::VectorXd offset =
        q * keys.colwise().mean().transpose() + form.targets * centre.transpose();
    const Eigen::MatrixXd got = form.targets * form.sources.transpose() + offset.replicate(1, 60);
    // Entries of size |q| (|k| + |c|) ~ 30, each through k x k products and one sum of three: 32 k
    // u.
    EXPECT_LE((got - want).cwiseAbs().maxCoeff(),
              32.0 * k * testing::kEps * (want.cwiseAbs().maxCoeff() + 30.0))
        << "k " << k;
    // log_weights are those of the Gauss form of the shifted keys (the same squared norms, summed
    // in an order the compiler picks: k u of |k~ - c|^2).
    const Eigen::VectorXd norms = 0.5 * form.sources.rowwise().squaredNorm();
    EXPECT_LE((form.log_weights - (log_a + norms)).cwiseAbs().maxCoeff(),
              2.0 * k * testing::kEps * norms.maxCoeff());
  }
}

// Tokens on the circle gathered into two or three tight clusters with a few still between them
// (the frames of `reproduce clustering --random-weights` after t = 3), random Q, K ~ N(0, 1/2) and
// beta in [6, 12]: every row's heaviest keys are the stragglers at the clusters' ends, far from its
// target. With one bound for the pairs left out by all rows, the whitened and stretched forms
// certified no row there, and the centred passes had to; with the bound per row the stretched
// forms certify most rows, and the centred passes the rest where their grids pay.
TEST(FastSoftmax, GatheredKeysWithStragglersKeepTheContractOnTheGrid) {
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const Eigen::Index n = 20000, m = 2000;
  const int clusters = 2 + static_cast<int>(uniform(rng) * 2.0);
  std::vector<double> centre_angle(static_cast<std::size_t>(clusters));
  for (auto& a : centre_angle) a = 2.0 * M_PI * uniform(rng);
  GaussMatrix x(n, 2);
  for (Eigen::Index j = 0; j < n; ++j) {
    // 1% stragglers anywhere on the circle; the rest within ~1e-3 rad of a cluster's centre.
    const double angle =
        uniform(rng) < 0.01
            ? 2.0 * M_PI * uniform(rng)
            : centre_angle[static_cast<std::size_t>(j % clusters)] + 1e-3 * normal(rng);
    x(j, 0) = std::cos(angle);
    x(j, 1) = std::sin(angle);
  }
  const double beta = 6.0 + 6.0 * uniform(rng);
  const Eigen::MatrixXd Q = testing::random_matrix(rng, 2, 2, std::sqrt(0.5)),
                        K = testing::random_matrix(rng, 2, 2, std::sqrt(0.5));
  const GaussMatrix queries = beta * x.topRows(m) * Q.transpose(), keys = x * K.transpose();
  const Eigen::VectorXd log_a = Eigen::VectorXd::Constant(n, -std::log(static_cast<double>(n)));
  GaussAverageOptions options;
  // What this test exercises is the centred passes' certificate, so their grids must run: at the
  // default 8 multiply-adds a pair, the groups of these 2000 queries against 20000 keys often cost
  // more than their exact sums and go to them instead (correct, but not the grid).
  options.max_cost_per_pair = 16.0;
  GaussMatrix out;
  Eigen::VectorXd log_partition;
  const GaussAverageStats stats =
      softmax_average(queries, keys, log_a, x, options, out, &log_partition);
  const SoftmaxGaussForm whitened = softmax_gauss_form(queries, keys, log_a);
  const double widest_key = std::sqrt(whitened.sources.rowwise().squaredNorm().maxCoeff()),
               widest_target = std::sqrt(whitened.targets.rowwise().squaredNorm().maxCoeff());
  const double largest_source =
      std::max(64.0 * widest_key * widest_key, std::pow(2.0 * widest_key + 8.0 * widest_target, 2));
  const double rounding =
      4.0 * (n + 4) * testing::kEps;  // both sides' sums of n terms (Higham 4.3)
  Eigen::VectorXd e(n);
  for (Eigen::Index i = 0; i < m; ++i) {
    for (Eigen::Index j = 0; j < n; ++j) e[j] = log_a[j] + queries.row(i).dot(keys.row(j));
    const ExactRow exact = exact_row(e, x);
    ASSERT_LE((out.row(i) - exact.average).norm(), (options.tol + rounding) * exact.scale) << "row " << i;
    // The log-partition too (what the interaction energy uses): within 1.01 tol, plus the rounding
    // of the exponents the forms add and subtract. Their largest: the stretched retries (f = 8:
    // |k~|^2 x 64) and the centred passes at f = 1/8 (targets q~ x 8, keys f k~ - c with
    // c = f k~* - t / f: |s| <= 2 max |k~| + 8 max |q~|), a few units of each.
    const double exponent_rounding =
        8.0 * testing::kEps *
        (64.0 * whitened.targets.row(i).squaredNorm() + largest_source + std::abs(e.maxCoeff()));
    ASSERT_LE(std::abs(log_partition[i] - exact.log_partition),
              1.01 * options.tol + rounding + exponent_rounding)
        << "row " << i;
  }
  EXPECT_EQ(stats.rows_expanded + stats.rows_exact, m);
  // Rows are left to exact sums only where no grid pays for them: the grids certify most rows, and
  // the rows left cost little beside them. Most runs certify every row but a few; in some, the
  // stretched forms certify all rows of one cluster but one, whose rows (280 of 2000 once) the
  // centred passes then try within their budget (16 multiply-adds a pair of the rows left: a grid
  // over all 20000 keys costs more than those rows' exact sums) and leave exact. Their exact sums
  // (about 4 multiply-adds a pair, fast_gauss.cpp's kExactPairCost) are asserted to cost less than
  // the first pass's grid over all rows (its predicted work, stats.plan.cost; measured over 100
  // fresh runs: at most 0.71 of it, 178 to 440 rows exact in the runs that left more than a few),
  // and most rows come from the grid.
  EXPECT_GE(stats.rows_expanded, m / 2) << clusters << " clusters, beta " << beta << ", passes " << stats.passes;
  EXPECT_LE(4.0 * static_cast<double>(stats.rows_exact) * static_cast<double>(n), stats.plan.cost)
      << stats.rows_exact << " rows exact, " << clusters << " clusters, beta " << beta << ", passes " << stats.passes;
}

// ---- tokens gathered into clusters in d = 3 ------------------------------------------------------

// Three clusters about 4 apart (in d = 3 their centres span a plane, so the keys' covariance is
// nearly flat across it), 3% stragglers between two of them: `Tight` all of spread 0.05, `Widths`
// of spreads 0.02, 0.1 and 0.3, `Anisotropic` 0.4 along one axis (a different one per cluster) and
// 0.02 across.
enum class ClusterShape { Tight, Widths, Anisotropic };

std::ostream& operator<<(std::ostream& os, ClusterShape shape) {
  return os << (shape == ClusterShape::Tight ? "Tight" : shape == ClusterShape::Widths ? "Widths" : "Anisotropic");
}

GaussMatrix clustered_tokens(std::mt19937_64& rng, Eigen::Index n, ClusterShape shape) {
  const double centre[3][3] = {{0.0, 0.0, 0.0}, {4.0, 0.0, 0.0}, {1.5, 3.5, 0.5}};
  const double spread[3] = {shape == ClusterShape::Widths ? 0.02 : 0.05, shape == ClusterShape::Widths ? 0.1 : 0.05,
                            shape == ClusterShape::Widths ? 0.3 : 0.05};
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  GaussMatrix x(n, 3);
  for (Eigen::Index j = 0; j < n; ++j) {
    const int a = static_cast<int>(uniform(rng) * 3.0) % 3;
    if (uniform(rng) < 0.03) {  // a straggler on the way from cluster a to the next
      const int b = (a + 1) % 3;
      const double t = uniform(rng);
      for (int e = 0; e < 3; ++e) x(j, e) = (1.0 - t) * centre[a][e] + t * centre[b][e] + 0.3 * normal(rng);
      continue;
    }
    for (int e = 0; e < 3; ++e) {
      const double sd = shape == ClusterShape::Anisotropic ? (e == a ? 0.4 : 0.02) : spread[a];
      x(j, e) = centre[a][e] + sd * normal(rng);
    }
  }
  return x;
}

class FastSoftmaxClusters : public ::testing::TestWithParam<ClusterShape> {};

// Two heads (fresh Q, K, V ~ N(0, 1/3), scale 1/sqrt(3)) on tokens gathered into clusters in d = 3,
// as attention.summation = fast sums them (the cost rule on: at this n most rows are exact sums,
// and the forms' grids run where they pay): every row within tol sum_j P_ij |v_j| of the exact
// average, its log-partition within tol, the same bits at 1 and 2 threads.
TEST_P(FastSoftmaxClusters, EveryRowWithinTolAtOneAndTwoThreads) {
  const ClusterShape shape = GetParam();
  std::mt19937_64 rng(fresh_seed());
  const Eigen::Index n = 2000, m = 2000;
  const GaussMatrix x = clustered_tokens(rng, n, shape);
  const double root_scale = std::pow(3.0, -0.25);  // sqrt of the logits' scale 1/sqrt(3)
  for (int head = 0; head < 2; ++head) {
    const double sd = 1.0 / std::sqrt(3.0);
    const Eigen::MatrixXd Q = testing::random_matrix(rng, 3, 3, sd), K = testing::random_matrix(rng, 3, 3, sd),
                          V = testing::random_matrix(rng, 3, 3, sd);
    const GaussMatrix queries = root_scale * x * Q.transpose(), keys = root_scale * x * K.transpose();
    const GaussMatrix v = x * V.transpose();
    const Eigen::VectorXd log_a = Eigen::VectorXd::Zero(n);
    GaussAverageOptions options;
    GaussMatrix out, out_one;
    Eigen::VectorXd log_partition, log_partition_one;
    const GaussAverageStats stats = softmax_average(queries, keys, log_a, v, options, out, &log_partition);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    softmax_average(queries, keys, log_a, v, options, out_one, &log_partition_one);
    omp_set_num_threads(threads);
    EXPECT_EQ(std::memcmp(out.data(), out_one.data(), sizeof(double) * static_cast<std::size_t>(out.size())), 0);
    EXPECT_EQ(std::memcmp(log_partition.data(), log_partition_one.data(), sizeof(double) * static_cast<std::size_t>(m)),
              0);
    const SoftmaxGaussForm form = softmax_gauss_form(queries, keys, log_a);
    const double widest_key = std::sqrt(form.sources.rowwise().squaredNorm().maxCoeff()),
                 widest_target = std::sqrt(form.targets.rowwise().squaredNorm().maxCoeff());
    // As in GatheredKeysWithStragglersKeepTheContractOnTheGrid: the largest exponent any form adds
    // and subtracts (stretched retries |k~|^2 x 64, centred passes at f = 1/8: targets q~ x 8, keys
    // within 2 max |k~| + 8 max |q~|), whose rounding the log-partition carries.
    const double largest_source =
        std::max(64.0 * widest_key * widest_key, std::pow(2.0 * widest_key + 8.0 * widest_target, 2));
    const double rounding = 4.0 * (n + 4) * testing::kEps;  // both sides' sums of n terms (Higham 4.3)
    Eigen::VectorXd e(n);
    for (Eigen::Index i = 0; i < m; ++i) {
      for (Eigen::Index j = 0; j < n; ++j) e[j] = log_a[j] + queries.row(i).dot(keys.row(j));
      const ExactRow exact = exact_row(e, v);
      ASSERT_LE((out.row(i) - exact.average).norm(), (options.tol + rounding) * exact.scale)
          << shape << ", head " << head << ", row " << i;
      const double exponent_rounding =
          8.0 * testing::kEps * (64.0 * form.targets.row(i).squaredNorm() + largest_source + std::abs(e.maxCoeff()));
      ASSERT_LE(std::abs(log_partition[i] - exact.log_partition), 1.01 * options.tol + rounding + exponent_rounding)
          << shape << ", head " << head << ", row " << i;
    }
    EXPECT_EQ(stats.rows_expanded + stats.rows_exact, m);
  }
}

INSTANTIATE_TEST_SUITE_P(ThreeDimensions, FastSoftmaxClusters,
                         ::testing::Values(ClusterShape::Tight, ClusterShape::Widths, ClusterShape::Anisotropic),
                         case_name<ClusterShape>);

// One source e^100 heavier than all the others, 12 bandwidths from every target (its kernel there
// e^-144): each row's sum is then about e^-100 of the heaviest weight, as in the whitened form of
// tokens gathered into clusters in d = 3 (keys' weights exp(|k~|^2 / 2) spanning e^100 across the
// nearly flat direction). The grid's box leaves that source out and sums it exactly into every row;
// its pairs are below 1e-30 but far above the rows' sums, so a bound for the pairs left out taken
// from the sum of all weights (1e-30 of it) would reject every row. Bounded per row by the weights
// that row leaves out (none here), the certificate accepts them, and every row stays within tol.
TEST(FastGauss, AFarHeavySourceLeavesTheRowsToTheGrid) {
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int k : {1, 2, 3}) {
    // n + m above 10^4: the box's smallest trim (10^-4 of the points each side) then has a point
    // to cut, the heavy source (at fewer points the box is the bounding box, the source inside it
    // and beyond the band of every row: a pair the grid leaves out, bounded by 1e-30 times its
    // weight, so every row exact).
    const Eigen::Index n = 10000, m = 300;
    GaussMatrix x(n, k), y(m, k), v(n, 2);
    Eigen::VectorXd l = Eigen::VectorXd::Zero(n);
    for (Eigen::Index j = 0; j < n; ++j) {
      for (int e = 0; e < k; ++e) x(j, e) = 0.5 * normal(rng);
      for (int e = 0; e < 2; ++e) v(j, e) = normal(rng);
    }
    for (Eigen::Index i = 0; i < m; ++i)
      for (int e = 0; e < k; ++e) y(i, e) = 0.5 * normal(rng);
    x.row(0).setZero();
    x(0, 0) = 12.0 + 0.5 * 4.0;  // beyond every target (|y| < 4 sd but for 6e-5 of draws; then exact)
    l[0] = 100.0;
    GaussAverageOptions options;
    options.tol = k == 3 ? 1e-3 : 1e-6;  // k = 3: p^3 terms a node, a smaller p keeps the test short
    options.max_cost_per_pair = std::numeric_limits<double>::infinity();
    GaussMatrix out;
    const GaussAverageStats stats = gauss_average(y, x, l, v, 1.0, options, out);
    const GaussMatrix want = reference_gauss_average(y, x, l, v, 1.0);
    const Eigen::VectorXd scale = row_scale(y, x, l, v, 1.0);
    const double rounding = 4.0 * (n + 4) * testing::kEps;  // as in FastGaussContract
    for (Eigen::Index i = 0; i < m; ++i)
      ASSERT_LE((out.row(i) - want.row(i)).norm(), (options.tol + rounding) * scale[i]) << "k " << k << " row " << i;
    EXPECT_TRUE(stats.grid);
    // Measured over 3 runs: 300, 287 to 295 and 280 to 288 of the 300 rows at k = 1, 2, 3 (none
    // with the bound from the sum of all weights). Half leaves room for draws not seen.
    EXPECT_GE(stats.rows_expanded, m / 2) << "k " << k;
  }
}

// ---- gauss_average_retried: l2 attention's targets Q x beyond its sources K x -----------------

// Targets Q x_i and sources K x_j of N(0, I) tokens with Q, K, V ~ N(0, 1/k) and s = 1/sqrt(k) times
// a factor in [0.5, 2] (l2 attention with the random weights: the two clouds differ in
// extent and direction; Q's entries doubled, so that more targets lie beyond the sources' cloud,
// the rows gauss_average's certificate rejects): every row within tol sum_j P_ij |v_j| of the exact average, L_i within tol,
// and the rows gauss_average alone leaves to exact sums mostly certified by the softmax forms.
TEST(FastGauss, RetriedAverageKeepsTheContractBeyondTheSourcesCloud) {
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  long long rejected_alone = 0, exact_retried = 0;
  for (int k : {1, 2, 3}) {
    const Eigen::Index n = k == 3 ? 1500 : 3000, m = 400;
    const double sd = 1.0 / std::sqrt(static_cast<double>(k));
    const double s = (0.5 + 1.5 * uniform(rng)) / std::sqrt(static_cast<double>(k));
    const Eigen::MatrixXd Q = testing::random_matrix(rng, k, k, 2.0 * sd), K = testing::random_matrix(rng, k, k, sd),
                          V = testing::random_matrix(rng, k + 1, k, sd);
    const GaussMatrix x = testing::random_matrix(rng, n, k, 1.0);
    // k = 2: both clouds moved 300 bandwidths from the origin (the sums are the same).
    const Eigen::RowVectorXd offset = (k == 2 ? 300.0 / std::sqrt(s) : 0.0) * Eigen::RowVectorXd::Ones(k);
    const GaussMatrix targets = (x.topRows(m) * Q.transpose()).rowwise() + offset,
                      sources = (x * K.transpose()).rowwise() + offset, v = x * V.transpose();
    Eigen::VectorXd log_a(n);
    for (Eigen::Index j = 0; j < n; ++j) log_a[j] = std::log(2.0 * uniform(rng) + 0.01);
    GaussAverageOptions options;
    // k <= 2: the grid whatever its cost (so the retries run); k = 3 keeps the cost rule (p^3
    // terms a node), its rows may be exact sums, the contract is the same.
    if (k <= 2) options.max_cost_per_pair = std::numeric_limits<double>::infinity();
    GaussAverageOptions alone = options;
    alone.defer_rejected = true;
    GaussMatrix out;
    const GaussAverageStats first = gauss_average(targets, sources, log_a, v, s, alone, out);
    Eigen::VectorXd log_partition;
    const GaussAverageStats stats = gauss_average_retried(targets, sources, log_a, v, s, options, out, &log_partition);
    EXPECT_EQ(stats.rows_expanded + stats.rows_exact, m) << "k " << k;
    EXPECT_LE(stats.rows_exact, static_cast<Eigen::Index>(first.rejected.size())) << "k " << k;
    if (k <= 2) {
      rejected_alone += static_cast<long long>(first.rejected.size());
      exact_retried += stats.rows_exact;
    }
    // The retries' form, for the rounding of its exponents.
    const double root = std::sqrt(2.0 * s);
    const Eigen::RowVectorXd centre = sources.colwise().mean();
    const GaussMatrix moved_targets = targets.rowwise() - centre, moved_sources = sources.rowwise() - centre;
    const SoftmaxGaussForm form =
        softmax_gauss_form(root * moved_targets, root * moved_sources,
                           log_a - s * moved_sources.rowwise().squaredNorm(), 1.0, nullptr, true);
    const double largest_key = form.sources.rowwise().squaredNorm().maxCoeff();
    const double rounding = 4.0 * (n + 4) * testing::kEps;  // both sides' sums of n terms (Higham 4.3)
    Eigen::VectorXd e(n);
    for (Eigen::Index i = 0; i < m; ++i) {
      for (Eigen::Index j = 0; j < n; ++j) e[j] = log_a[j] - s * (targets.row(i) - sources.row(j)).squaredNorm();
      const ExactRow exact = exact_row(e, v);
      ASSERT_LE((out.row(i) - exact.average).norm(), (options.tol + rounding) * exact.scale) << "k " << k << " row " << i;
      // |log F - log D| <= 1.01 tol, plus the sums' rounding and the exponents' (the retries' form
      // adds and subtracts |q~|^2 / 2, |k~|^2 / 2 (x 64 at stretch 8) and s |y_i|^2: a few units
      // of each).
      const double exponent_rounding =
          8.0 * testing::kEps *
          (form.targets.row(i).squaredNorm() + 64.0 * largest_key + s * moved_targets.row(i).squaredNorm() +
           std::abs(e.maxCoeff()));
      ASSERT_LE(std::abs(log_partition[i] - exact.log_partition), 1.01 * options.tol + rounding + exponent_rounding)
          << "k " << k << " row " << i;
    }
  }
  // Measured over 92 fresh seeds (k = 1 and 2): where gauss_average alone rejected 50 rows or more,
  // the retries left at most a third of them (279 -> 93), mostly under a tenth.
  if (rejected_alone >= 50) {
    EXPECT_LE(2 * exact_retried, rejected_alone) << "rejected by gauss_average alone " << rejected_alone;
  }
}

// Clouds whose squared distances leave double's range have no softmax form: the rejected rows get
// gauss_average's own exact sums (the same bits), not an exception.
TEST(FastGauss, RetriedAverageBeyondDoubleRangeSumsLikeGaussAverage) {
  std::mt19937_64 rng(fresh_seed());
  const GaussMatrix x = 1e160 * testing::random_matrix(rng, 200, 2, 1.0), y = 1e160 * testing::random_matrix(rng, 50, 2, 1.0),
                    v = testing::random_matrix(rng, 200, 2, 1.0);
  const Eigen::VectorXd l = Eigen::VectorXd::Zero(200);
  GaussMatrix want, got;
  const GaussAverageStats plain = gauss_average(y, x, l, v, 1.0, GaussAverageOptions{}, want);
  const GaussAverageStats retried = gauss_average_retried(y, x, l, v, 1.0, GaussAverageOptions{}, got);
  EXPECT_EQ(retried.rows_exact, plain.rows_exact);
  EXPECT_GT(plain.rows_exact, 0);  // the retry's case: rejected rows
  ASSERT_EQ(got.rows(), want.rows());
  for (Eigen::Index i = 0; i < want.rows(); ++i)
    for (Eigen::Index e = 0; e < want.cols(); ++e)
      EXPECT_TRUE(got(i, e) == want(i, e) || (std::isnan(got(i, e)) && std::isnan(want(i, e)))) << i << " " << e;
}

// ---- attention.summation = fast against the reference attention ------------------------------

struct FieldCase {
  std::string name, kind = "softmax", normalize = "none";
  int d = 3, heads = 1, k = 2, kv = 2;
  bool layers = false;
  double matrix_sd = 0.35;
  Eigen::Index n = 3000;  // 2000 put one draw in a hundred above the grid's 8 multiply-adds a pair
  std::optional<double> scale;
};

template <class T>
void check_fast_field(const FieldCase& c) {
  std::mt19937_64 rng(fresh_seed());
  AttentionSpec s;
  s.kind = c.kind;
  s.heads = c.heads;
  s.normalize = c.normalize;
  s.summation = "fast";
  s.scale = c.scale;
  // Narrow projections (a cloud a few bandwidths wide) and n in the thousands: the grid is cheaper
  // than the exact sums, so it is what the test exercises (the report says how many rows it gave).
  const double sd = c.matrix_sd;
  s.Q = testing::random_matrix(rng, c.heads * c.k, c.d, sd);
  s.K = testing::random_matrix(rng, c.heads * c.k, c.d, sd);
  s.V = testing::random_matrix(rng, c.heads * c.kv, c.d, sd);
  s.W = testing::random_matrix(rng, c.d, c.heads * c.kv, sd);
  if (c.layers) {
    AttentionSpec::Layer l1;
    l1.until = 0.5;
    l1.K = testing::random_matrix(rng, c.heads * c.k, c.d, sd);
    s.layers = {l1};
  }
  const AttentionParams p = make_attention(s, c.d);
  Measure<double> mu = testing::random_measure(rng, c.n, c.d, true);
  if (c.normalize == "sphere") mu.points.rowwise().normalize();
  const Measure<T> mt{mu.points.cast<T>(), mu.weights.cast<T>(), mu.positions.cast<T>()};
  const Measure<double> exact_input{mt.points.template cast<double>(), mt.weights.template cast<double>(), mu.positions};
  AttentionField<T> field(p, mt);
  const std::vector<double> times = c.layers ? std::vector<double>{0.0, 0.7} : std::vector<double>{0.0};
  for (double t : times) {
    Points<T> out;
    field.velocity(t, mt.points, out);
    // The reference: Gamma_i = sum_h W_h V_h sum_j P_ij x_j with P from the reference attention
    // matrix (then the tangent projection on the sphere). Per head, |error of y_h| <= tol sum_j
    // P_ij |V_h x_j|; W_h maps it with its norm, the tangent projection is a contraction. Output in
    // T: one rounding of |Gamma| (u of T); the f32 inputs are exact in double.
    const Points<double>& X = exact_input.points;
    Points<double> want = Points<double>::Zero(X.rows(), X.cols());
    Eigen::VectorXd allowed = Eigen::VectorXd::Zero(mu.n());
    for (int h = 0; h < c.heads; ++h) {
      const HeadBlocks& b = p.layer_at(t).heads[static_cast<std::size_t>(h)];
      const Eigen::MatrixXd P = reference_attention_matrix(p, exact_input, t, h);
      want += (P * X) * (b.W * b.V).transpose();
      const Eigen::VectorXd vnorm = (X * b.V.transpose()).rowwise().norm();
      const double wnorm = linalg::spectral_norm(b.W);
      allowed += p.summation_tol * wnorm * (P * vnorm);
    }
    if (c.normalize == "sphere")
      for (Eigen::Index i = 0; i < X.rows(); ++i) want.row(i) -= want.row(i).dot(X.row(i)) * X.row(i);
    const double unit = std::is_same_v<T, float> ? testing::kUnit32 : testing::kUnit64;
    for (Eigen::Index i = 0; i < mu.n(); ++i) {
      const double error = (out.row(i).template cast<double>() - want.row(i)).norm();
      ASSERT_LE(error, allowed[i] + 4.0 * unit * want.row(i).norm() + 64 * testing::kUnit64 * allowed[i] / p.summation_tol)
          << c.name << " token " << i << " t " << t;
    }
  }
  const SummationReport& report = field.summation_report();
  EXPECT_EQ(report.dense_evaluations, 0);
  EXPECT_EQ(report.fast_evaluations, static_cast<long long>(times.size()) * c.heads);
  EXPECT_GT(report.rows_expanded, report.rows_exact) << c.name;
}

std::vector<FieldCase> field_cases() {
  std::vector<FieldCase> cases;
  FieldCase c;
  c.name = "softmax_d3_k2";
  cases.push_back(c);
  c.name = "l2_d3_k2";
  c.kind = "l2";
  cases.push_back(c);
  c.name = "l2_multihead_layers";
  c.heads = 3;
  c.layers = true;
  cases.push_back(c);
  c = FieldCase{};
  // k = 3: p^3 terms a node, so the grid pays only for a narrow cloud (at sd 0.2 and n = 6000 one
  // draw in ten cost more than gauss_average's 8 multiply-adds a pair, and went to exact sums).
  c.name = "l2_k3_narrow";
  c.kind = "l2";
  c.k = 3;
  c.matrix_sd = 0.15;
  c.n = 6000;
  cases.push_back(c);
  c = FieldCase{};
  c.name = "softmax_sphere_k1_heads2";
  c.normalize = "sphere";
  c.k = 1;
  c.heads = 2;
  cases.push_back(c);
  c = FieldCase{};
  c.name = "softmax_negative_scale";
  c.scale = -0.7;
  cases.push_back(c);
  return cases;
}

TEST(FastSummationField, MatchesReferenceWithinTheContractF64) {
  for (const FieldCase& c : field_cases()) check_fast_field<double>(c);
}

TEST(FastSummationField, MatchesReferenceWithinTheContractF32) {
  for (const FieldCase& c : field_cases()) check_fast_field<float>(c);
}

// Sinkhorn attention through the grid: its output against the dense sum of the plan its own
// potentials define, and those potentials against Sinkhorn's marginals. Random Q, K, V, W (entries
// N(0, 0.35^2)), two heads of which the second has Q_h = K_h (the symmetric solve), d = 3, k = 2;
// evaluated twice (the second warm-started, on moved points).
template <class T>
void check_fast_sinkhorn_field() {
  std::mt19937_64 rng(fresh_seed());
  const int d = 3, k = 2, heads = 2;
  const Eigen::Index n = 2000;
  AttentionSpec s;
  s.kind = "sinkhorn";
  s.heads = heads;
  s.summation = "fast";
  s.epsilon = 0.5;
  s.sinkhorn_tol = 1e-9;
  s.Q = testing::random_matrix(rng, heads * k, d, 0.35);
  s.K = testing::random_matrix(rng, heads * k, d, 0.35);
  s.K->bottomRows(k) = s.Q->bottomRows(k);
  s.V = testing::random_matrix(rng, heads * k, d, 0.35);
  s.W = testing::random_matrix(rng, d, heads * k, 0.35);
  const AttentionParams p = make_attention(s, d);
  const Measure<double> mu = testing::random_measure(rng, n, d, true);
  const Measure<T> mt{mu.points.cast<T>(), mu.weights.cast<T>(), mu.positions.cast<T>()};
  AttentionField<T> field(p, mt);
  Points<T> x = mt.points;
  for (int evaluation = 0; evaluation < 2; ++evaluation) {
    Points<T> out;
    field.velocity(0.0, x, out);
    std::vector<Eigen::VectorXd> f, g;
    field.sinkhorn_potentials(f, g);
    const Points<double> X = x.template cast<double>();
    const Eigen::VectorXd a = mt.weights.template cast<double>();
    Points<double> want = Points<double>::Zero(n, d);
    Eigen::VectorXd allowed = Eigen::VectorXd::Zero(n);
    for (int h = 0; h < heads; ++h) {
      const HeadBlocks& b = p.layer_at(0.0).heads[static_cast<std::size_t>(h)];
      const auto hs = static_cast<std::size_t>(h);
      // pi_ij / a_i = a_j exp((f_i + g_j + <scale Q x_i, K x_j>) / eps), in double.
      Eigen::MatrixXd P = (p.scale * (X * b.Q.transpose())) * (X * b.K.transpose()).transpose();
      for (Eigen::Index i = 0; i < n; ++i)
        for (Eigen::Index j = 0; j < n; ++j)
          P(i, j) = a[j] * std::exp((f[hs][i] + g[hs][j] + P(i, j)) / p.epsilon);
      // The potentials are Sinkhorn's: |pi 1 - a|_1 + |pi^T 1 - a|_1 < sinkhorn_tol, up to the
      // rounding of these n-term sums (n u relative, 64 n u allowed).
      const Eigen::VectorXd rows = P.rowwise().sum(), cols = P.transpose() * a;
      const double marginal =
          (a.cwiseProduct(rows) - a).cwiseAbs().sum() + (cols - a).cwiseAbs().sum();
      EXPECT_LT(marginal, p.sinkhorn_tol + 64.0 * static_cast<double>(n) * testing::kUnit64)
          << "head " << h;
      want += (P * X) * (b.W * b.V).transpose();
      allowed += p.summation_tol * linalg::spectral_norm(b.W) *
                 (P * (X * b.V.transpose()).rowwise().norm());
    }
    // The row bound of fast_sinkhorn_head (field.cpp) per head, mapped by |W_h|; output in T (one
    // rounding, 4 u allowed); the dense sums above round at n u of their size (64 n u allowed).
    const double unit = std::is_same_v<T, float> ? testing::kUnit32 : testing::kUnit64;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double error = (out.row(i).template cast<double>() - want.row(i)).norm();
      ASSERT_LE(error,
                allowed[i] + 4.0 * unit * want.row(i).norm() +
                    64.0 * static_cast<double>(n) * testing::kUnit64 * allowed[i] / p.summation_tol)
          << "token " << i << " evaluation " << evaluation;
    }
    x += (out * static_cast<T>(0.1)).eval();
  }
  const SummationReport& report = field.summation_report();
  EXPECT_EQ(report.dense_evaluations, 0);
  EXPECT_EQ(report.fast_evaluations, 2 * heads);
  // At n = 2000 the solve's soft-mins (relative tol sinkhorn_tol / 16) are cheaper as exact sums
  // than on a grid of that order (gauss_average's max_cost_per_pair); the output's transform, at
  // summation_tol / 3, is the grid's: at least its rows.
  EXPECT_GE(report.rows_expanded, 2 * heads * n * 9 / 10);
}

TEST(FastSummationField, SinkhornMatchesItsPotentialsWithinTheContractF64) {
  check_fast_sinkhorn_field<double>();
}

TEST(FastSummationField, SinkhornMatchesItsPotentialsWithinTheContractF32) {
  check_fast_sinkhorn_field<float>();
}

// summation = auto: Sinkhorn attention takes the grid from 4096 tokens in k <= 2 when
// sinkhorn_tol allows it, and the dense (online) solve otherwise.
TEST(FastSummationField, AutoTakesTheGridForSinkhornWhereItApplies) {
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = testing::random_measure(rng, 4096, 2, true);
  AttentionSpec s;
  s.kind = "sinkhorn";
  s.epsilon = 1.0;
  s.Q = testing::random_matrix(rng, 2, 2, 0.5);
  s.K = testing::random_matrix(rng, 2, 2, 0.5);
  Points<double> out;
  s.sinkhorn_tol = 1e-9;
  AttentionField<double> grid(make_attention(s, 2), mu);
  grid.velocity(0.0, mu.points, out);
  EXPECT_EQ(grid.summation_report().fast_evaluations, 1);
  EXPECT_TRUE(out.allFinite());
  s.sinkhorn_tol = 1e-12;  // below kGridSinkhornMinTol: dense
  AttentionField<double> dense(make_attention(s, 2), mu);
  dense.velocity(0.0, mu.points, out);
  EXPECT_EQ(dense.summation_report().fast_evaluations, 0);
  EXPECT_EQ(dense.summation_report().dense_evaluations, 1);
}

TEST(FastSummationField, FastIsRefusedWhereThereIsNoGaussForm) {
  auto params_with = [](const std::string& kind, const std::string& mask, int k, double scale) {
    AttentionSpec s;
    s.kind = kind;
    s.mask = mask;
    s.summation = "fast";
    s.scale = scale;
    s.Q = Eigen::MatrixXd::Identity(k, 4);
    s.K = Eigen::MatrixXd::Identity(k, 4);
    return make_attention(s, 4);
  };
  EXPECT_NO_THROW(params_with("softmax", "none", 3, 1.0));
  AttentionSpec sinkhorn;
  sinkhorn.kind = "sinkhorn";
  sinkhorn.summation = "fast";
  sinkhorn.sinkhorn_tol = kGridSinkhornMinTol;
  EXPECT_NO_THROW(make_attention(sinkhorn, 3));
  for (const auto& [kind, mask, k, scale] :
       std::vector<std::tuple<std::string, std::string, int, double>>{
           {"softmax", "causal", 2, 1.0},
           {"softmax", "none", 4, 1.0},
           {"sigmoid", "none", 2, 1.0},
           {"sinkhorn", "none", 2, 1.0},  // tol 1e-12
           {"sinkhorn", "none", 4, 1.0},
           {"l2", "none", 2, -1.0}}) {
    try {
      params_with(kind, mask, k, scale);
      ADD_FAILURE() << kind << " " << mask << " k " << k;
    } catch (const InputError& e) {
      EXPECT_EQ(e.key(), "attention.summation");
    }
  }
  AttentionSpec bad;
  bad.summation = "fastest";
  EXPECT_THROW(make_attention(bad, 2), InputError);
  bad.summation = "auto";
  bad.summation_tol = 1.0;
  EXPECT_THROW(make_attention(bad, 2), InputError);
}

TEST(FastSummationField, AutoIsDenseForFewTokensAndCausalMasks) {
  std::mt19937_64 rng(fresh_seed());
  AttentionSpec s;
  s.mask = "causal";
  const Measure<double> mu = testing::random_measure(rng, 5000, 2, true, true);
  AttentionField<double> causal(make_attention(s, 2), mu);
  Points<double> out;
  causal.velocity(0.0, mu.points, out);
  EXPECT_EQ(causal.summation_report().fast_evaluations, 0);
  s.mask = "none";
  const Measure<double> few = testing::random_measure(rng, 1000, 2, true);
  AttentionField<double> small(make_attention(s, 2), few);
  small.velocity(0.0, few.points, out);
  EXPECT_EQ(small.summation_report().fast_evaluations, 0);
  EXPECT_EQ(small.summation_report().dense_evaluations, 1);
}

}  // namespace
}  // namespace tokenflow
