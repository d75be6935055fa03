// W_p: sorting in 1-D against the network simplex, Bures-Wasserstein against a second route and
// against exact OT on samples, conditional W_p, and the size-based choice of method.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/wasserstein.hpp"

namespace tokenflow {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

using testing::random_weights;

// A random SPD matrix with eigenvalues in [lo, hi].
Eigen::MatrixXd random_spd(std::mt19937_64& rng, Eigen::Index d, double lo, double hi) {
  const Eigen::MatrixXd g = testing::random_matrix(rng, d, d, 1.0);
  const Eigen::MatrixXd q = linalg::householder_q(g);
  std::uniform_real_distribution<double> uni(lo, hi);
  Eigen::VectorXd lambda(d);
  for (auto& v : lambda) v = uni(rng);
  return q * lambda.asDiagonal() * q.transpose();
}

Eigen::MatrixXd sym_sqrt(const Eigen::MatrixXd& S) {
  const linalg::SymmetricEigen e = linalg::symmetric_eigen(S);
  return e.vectors * e.values.cwiseSqrt().asDiagonal() * e.vectors.transpose();
}

TEST(Wasserstein, OneDimensionalSortingMatchesExactOT) {
  // Both are exact; the network simplex carries masses in units of 2^-52 (each rounded by at most
  // one unit, so the optimal value moves by at most (n + m) 2^-52 max C) and both sum n + m to
  // n m terms of size <= max C in double: 1e-12 max C covers both with a wide margin.
  std::mt19937_64 rng(testing::fresh_seed());
  for (double p : {1.0, 1.5, 2.0, 3.0}) {
    const Eigen::VectorXd x = testing::random_matrix(rng, 37, 1, 1.0),
                          y = testing::random_matrix(rng, 53, 1, 1.5);
    const Eigen::VectorXd a = random_weights(rng, 37), b = random_weights(rng, 53);
    const RowMatrix C = power_cost_matrix(x, y, p);
    const double sorted = std::pow(wasserstein_1d(x, y, a, b, p), p);
    const double exact = exact_ot(C, a, b).cost;
    EXPECT_NEAR(sorted, exact, 1e-12 * C.maxCoeff()) << "p = " << p;
  }
}

TEST(Wasserstein, InvariantsOfExactAndSorted) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Eigen::VectorXd x = testing::random_matrix(rng, 40, 1, 1.0);
  const Eigen::VectorXd a = random_weights(rng, 40);
  // W_p(mu, mu + t) = |t| in 1-D, for every p (the sorted coupling is the translation).
  for (double p : {1.0, 2.5}) {
    const Eigen::VectorXd y = x.array() + 0.3;
    EXPECT_NEAR(wasserstein_1d(x, y, a, a, p), 0.3, 1e-13);
    EXPECT_NEAR(wasserstein_1d(x, x, a, a, p), 0.0, 1e-15);
  }
  // W_p(mu, mu) = 0 exactly for the network simplex too (the identity plan costs 0).
  const RowMatrix x3 = testing::random_matrix(rng, 30, 3, 1.0);
  EXPECT_EQ(wasserstein_exact(x3, x3, {}, {}, 2.0), 0.0);
  // Uniform weights by default.
  const RowMatrix y3 = testing::random_matrix(rng, 30, 3, 1.0);
  const Eigen::VectorXd u = Eigen::VectorXd::Constant(30, 1.0 / 30);
  EXPECT_EQ(wasserstein_exact(x3, y3, {}, {}, 1.5), wasserstein_exact(x3, y3, u, u, 1.5));
}

TEST(BuresWasserstein, AgreesWithTheEigenvaluesOfS1S2AndClosedForms) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Eigen::Index d = 4;
  for (int trial = 0; trial < 5; ++trial) {
    const Eigen::MatrixXd S1 = random_spd(rng, d, 0.5, 2.0), S2 = random_spd(rng, d, 0.5, 2.0);
    const Eigen::VectorXd m1 = testing::random_matrix(rng, d, 1, 1.0),
                          m2 = testing::random_matrix(rng, d, 1, 1.0);
    // Reference: eigenvalues of the non-symmetric S1 S2 = S1^{1/2} M S1^{-1/2} (M = S1^{1/2} S2
    // S1^{1/2}); their perturbation is at most kappa(S1^{1/2}) u |S1 S2| d ~ 1.4 * 1e-16 * 4 * 4
    // ~ 1e-15, and sqrt(lambda) with lambda >= 0.25 magnifies it by at most 1. Summed over d and
    // compared on W_2^2 of size ~ tr S1 + tr S2 >= 4: 1e-12 relative is a wide margin.
    const double w = bures_wasserstein(m1, S1, m2, S2),
                 ref = reference_bures_wasserstein(m1, S1, m2, S2);
    EXPECT_NEAR(w * w, ref * ref, 1e-12 * (S1.trace() + S2.trace() + (m1 - m2).squaredNorm()));
    // Equal covariances: W_2 = |m1 - m2|. The trace terms cancel to ~1e-15, and sqrt(|dm|^2 +
    // 1e-15) - |dm| <= sqrt(1e-15) ~ 3e-8 whatever |dm| is.
    EXPECT_NEAR(bures_wasserstein(m1, S1, m2, S1), (m1 - m2).norm(), 1e-7);
  }
  // Commuting (diagonal) covariances: W_2^2 = |m1 - m2|^2 + sum_k (sqrt(s1_k) - sqrt(s2_k))^2.
  const Eigen::Vector3d s1(0.5, 1.0, 4.0), s2(2.0, 1.0, 0.25), m1(0.0, 1.0, 2.0), m2(1.0, 1.0, 0.0);
  const double want = (m1 - m2).squaredNorm() + (s1.cwiseSqrt() - s2.cwiseSqrt()).squaredNorm();
  const double got =
      bures_wasserstein(m1, s1.asDiagonal().toDenseMatrix(), m2, s2.asDiagonal().toDenseMatrix());
  EXPECT_NEAR(got * got, want, 1e-13 * want);
}

TEST(BuresWasserstein, BadCovariancesThrow) {
  const Eigen::Vector2d m = Eigen::Vector2d::Zero();
  Eigen::Matrix2d asym, indefinite, ok = Eigen::Matrix2d::Identity();
  asym << 1.0, 0.5, 0.0, 1.0;
  indefinite << 1.0, 2.0, 2.0, 1.0;
  EXPECT_THROW(bures_wasserstein(m, asym, m, ok), InputError);
  EXPECT_THROW(bures_wasserstein(m, ok, m, indefinite), InputError);
  EXPECT_THROW(bures_wasserstein(m, ok, Eigen::Vector3d::Zero(), ok), InputError);
}

TEST(BuresWasserstein, AgainstExactOTOnSamplesOfTheMongeMap) {
  // x_i ~ N(m1, S1) and y_i = m2 + T (x_i - m1) with T = S1^{-1/2} (S1^{1/2} S2 S1^{1/2})^{1/2}
  // S1^{-1/2} (symmetric positive definite, T S1 T = S2): y_i ~ N(m2, S2), and since x -> m2 +
  // T (x - m1) is the gradient of a convex function, the pairing i <-> i is an optimal coupling of
  // the two empirical measures (cyclical monotonicity). So
  //  (1) the network simplex must find W_2^2(samples) = mean_i |y_i - x_i|^2 (to rounding), and
  //  (2) with x_i - m1 = L z_i (L L^T = S1, z_i ~ N(0, I)), q_i = |v + B z_i|^2 (v = m2 - m1,
  //      B = (T - I) L) has mean E q = |v|^2 + tr(B B^T) = Bures^2 and variance 2 tr((B B^T)^2) +
  //      4 v^T B B^T v: the sample mean is within 7 standard errors of Bures^2 (a false failure
  //      has probability ~1e-11 under the normal approximation, which is good at n = 400).
  std::mt19937_64 rng(testing::fresh_seed());
  const Eigen::Index d = 3, n = 400;
  const Eigen::MatrixXd S1 = random_spd(rng, d, 0.3, 2.0), S2 = random_spd(rng, d, 0.3, 2.0);
  const Eigen::VectorXd m1 = testing::random_matrix(rng, d, 1, 0.5),
                        m2 = testing::random_matrix(rng, d, 1, 0.5);
  const Eigen::MatrixXd R = sym_sqrt(S1), Rinv = linalg::inverse(R);
  const Eigen::MatrixXd T = Rinv * sym_sqrt(R * S2 * R) * Rinv;
  const Eigen::MatrixXd L = linalg::cholesky_lower(S1);
  const Eigen::MatrixXd Z = testing::random_matrix(rng, n, d, 1.0);
  RowMatrix x(n, d), y(n, d);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::VectorXd xi = m1 + L * Z.row(i).transpose();
    x.row(i) = xi.transpose();
    y.row(i) = (m2 + T * (xi - m1)).transpose();
  }
  const double paired = (y - x).rowwise().squaredNorm().mean();
  const double w = wasserstein_exact(x, y, {}, {}, 2.0);
  // Masses 1/n rounded to units of 2^-52 and sums of n^2 costs: 1e-11 relative is ample.
  EXPECT_NEAR(w * w, paired, 1e-11 * paired);
  const double bures = bures_wasserstein(m1, S1, m2, S2);
  const Eigen::VectorXd v = m2 - m1;
  const Eigen::MatrixXd B = (T - Eigen::MatrixXd::Identity(d, d)) * L, M = B * B.transpose();
  ASSERT_NEAR(v.squaredNorm() + M.trace(), bures * bures, 1e-12 * (1 + bures * bures));
  const double sd =
      std::sqrt((2.0 * (M * M).trace() + 4.0 * v.dot(M * v)) / static_cast<double>(n));
  EXPECT_NEAR(w * w, bures * bures, 7.0 * sd);
}

Measure<double> with_positions(const RowMatrix& x, const Eigen::VectorXd& a,
                               const Eigen::VectorXd& pos) {
  return make_measure<double>(x, a, pos);
}

TEST(ConditionalWasserstein, ReducesToWpAndToPairs) {
  std::mt19937_64 rng(testing::fresh_seed());
  const RowMatrix x = testing::random_matrix(rng, 20, 2, 1.0),
                  y = testing::random_matrix(rng, 20, 2, 1.0);
  const Eigen::VectorXd a = random_weights(rng, 20), b = random_weights(rng, 20);
  // One position: CW_p = W_p.
  const Eigen::VectorXd zero = Eigen::VectorXd::Zero(20);
  EXPECT_NEAR(conditional_wasserstein(with_positions(x, a, zero), with_positions(y, b, zero), 2.0),
              wasserstein_exact(x, y, a, b, 2.0), 1e-13);
  // One token per position and the same weights: CW_p^p = sum_i a_i |x_i - y_i|^p.
  const Eigen::VectorXd pos = default_positions<double>(20);
  for (double p : {1.0, 2.0, 3.0}) {
    double want = 0.0;
    for (Eigen::Index i = 0; i < 20; ++i) want += a[i] * std::pow((x.row(i) - y.row(i)).norm(), p);
    EXPECT_NEAR(
        std::pow(conditional_wasserstein(with_positions(x, a, pos), with_positions(y, a, pos), p),
                 p),
        want, 1e-13 * want);
  }
}

TEST(ConditionalWasserstein, IsAtLeastWpAndChecksPositions) {
  // Couplings that keep positions are a subset of all couplings: CW_p >= W_p.
  std::mt19937_64 rng(testing::fresh_seed());
  const RowMatrix x = testing::random_matrix(rng, 30, 2, 1.0),
                  y = testing::random_matrix(rng, 24, 2, 1.0);
  Eigen::VectorXd a = random_weights(rng, 30), b = random_weights(rng, 24);
  Eigen::VectorXd px(30), py(24);
  for (Eigen::Index i = 0; i < 30; ++i) px[i] = static_cast<double>(i % 3) / 2.0;
  for (Eigen::Index j = 0; j < 24; ++j) py[j] = static_cast<double>(j % 3) / 2.0;
  // Rescale b so that each position has the same total weight in both (the positional marginal).
  for (int r = 0; r < 3; ++r) {
    double ta = 0.0, tb = 0.0;
    for (Eigen::Index i = 0; i < 30; ++i) ta += px[i] == r / 2.0 ? a[i] : 0.0;
    for (Eigen::Index j = 0; j < 24; ++j) tb += py[j] == r / 2.0 ? b[j] : 0.0;
    for (Eigen::Index j = 0; j < 24; ++j) b[j] *= py[j] == r / 2.0 ? ta / tb : 1.0;
  }
  const Measure<double> mu = with_positions(x, a, px), nu = with_positions(y, b, py);
  for (double p : {1.0, 2.0})
    EXPECT_GE(conditional_wasserstein(mu, nu, p), wasserstein_exact(x, y, a, b, p) - 1e-12);
  // A position present in one measure only, and positional marginals that differ.
  Eigen::VectorXd py_bad = py;
  py_bad[0] = 0.25;
  EXPECT_THROW(conditional_wasserstein(mu, with_positions(y, b, py_bad), 2.0), InputError);
  EXPECT_THROW(conditional_wasserstein(mu, with_positions(y, random_weights(rng, 24), py), 2.0),
               InputError);
  EXPECT_THROW(conditional_wasserstein(make_measure<double>(x), nu, 2.0), InputError);
}

TEST(Wasserstein, ChoosesTheMethodBySizeAndSinkhornStaysWithinItsBound) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Measure<double> line_x = make_measure<double>(testing::random_matrix(rng, 50, 1, 1.0));
  const Measure<double> line_y = make_measure<double>(testing::random_matrix(rng, 60, 1, 1.0));
  EXPECT_EQ(wasserstein(line_x, line_y, 2.0).method, WassersteinMethod::sorted);
  const RowMatrix x = testing::random_matrix(rng, 40, 2, 1.0),
                  y = testing::random_matrix(rng, 30, 2, 1.0);
  const Eigen::VectorXd a = random_weights(rng, 40), b = random_weights(rng, 30);
  const Measure<double> mu = make_measure<double>(x, a), nu = make_measure<double>(y, b);
  const WassersteinResult exact = wasserstein(mu, nu, 2.0);
  EXPECT_EQ(exact.method, WassersteinMethod::exact);
  EXPECT_EQ(exact.value, wasserstein_exact(x, y, mu.weights, nu.weights, 2.0));
  WassersteinOptions opt;
  opt.exact_max_pairs = 100;  // force Sinkhorn
  opt.sinkhorn.tol = 1e-8;
  // Slow instances need more than the default 10 000 iterations to reach 1e-8 (seed
  // 40587190139349); convergence is what this test assumes, not speed.
  opt.sinkhorn.max_iter = 400000;
  for (double p : {1.0, 2.0}) {
    for (long long dense_max : {1LL << 24, 1LL}) {  // dense and online
      opt.dense_max_pairs = dense_max;
      const WassersteinResult s = wasserstein(mu, nu, p, opt);
      ASSERT_EQ(s.method, WassersteinMethod::sinkhorn);
      ASSERT_TRUE(s.sinkhorn.converged);
      // W_p^p - e R / 2 <= value^p <= W_p^p + eps min(H(a), H(b)) + e R / 2 (see test_ot.cpp).
      const RowMatrix C = power_cost_matrix(x, y, p);
      const double w = std::pow(wasserstein_exact(x, y, a, b, p), p), v = std::pow(s.value, p);
      const double slack =
          0.5 * s.sinkhorn.marginal_error * (C.maxCoeff() - C.minCoeff()) + 1e-12 * w;
      EXPECT_GE(v, w - slack);
      EXPECT_LE(v, w + s.entropic_bias_bound + slack);
    }
  }
  EXPECT_THROW(wasserstein(mu, nu, 0.5), InputError);
  opt.method = WassersteinMethod::sorted;
  EXPECT_THROW(wasserstein(mu, nu, 2.0, opt), InputError);
}

}  // namespace
}  // namespace tokenflow
