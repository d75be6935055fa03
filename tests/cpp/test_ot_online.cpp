// The online soft-min (OnlineSoftMin, src/ot/softmin.cpp), which runs in the attention tile
// kernel for the sqeuclidean and dot costs, against plain double loops on fresh random inputs:
// isotropic, anisotropic and far-off clouds, eps from 10 down to 1e-3, sizes that fill no tile,
// empty bins; its determinism (threads, blocks of rows); Sinkhorn on it against the dense operator.
//
// The tolerance of one output (derived; u = 2^-53). The kernel forms the logit z_ij = h_j - H -
// C_ij / eps (H = max h) with an error e_ij, and out_i = -eps (H + log sum_j exp(z_ij)). To first
// order the log-sum-exp moves by sum_j w_ij e_ij, w_ij = exp(z_ij) / sum_j' exp(z_ij'), its
// softmax weights, so far terms count little. Per logit (gap_j = H - h_j):
//   sqeuclidean  the centred coordinates, scaled by 1/sqrt(eps), are rounded twice each: a
//                difference carries u s (|x_c - z_c| + |y_c - z_c|) twice and its own rounding,
//                its square 2 |x_c - y_c| times that; the p + 1 squares and their sum (p + 1)
//                roundings, the gap and its square root three:
//                e <= (p + 4) u (C_ij / eps + gap_j) + 3 u sum_c |x_c - y_c| (|x_c - z_c| + |y_c - z_c|) / eps
//                (z: the centre of the keys' bounding box, as the kernel takes it);
//   dot          x / eps rounded once, p + 1 fused products and sums, the gap once:
//                e <= (p + 3) u (sum_c |x_c y_c| / eps + gap_j);
// and 2 u |z_ij - max_i| for the subtraction of the running maximum (at most max_i, at least z_ij)
// and the rescalings as it grows (their arguments sum to at most |z_ij - max_i|). Then each term's
// exponential (kExpUlps ulps), the sums (at most m roundings in double, relative), the log and the
// rescalings' exponentials (u each): (kExpUlps + m + 4) u. Finally L_i = max_i + log(sum) and
// out_i = -eps (H + L_i) round three times: 2 u eps (|H| + |L_i|) + u |out_i|. The reference
// forms the same quantities with at most the same roundings (the cost in double, one maximum, one
// sum), so the bound is counted twice.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <random>

#include "../../src/ot/stages.hpp"
#include "../../src/simd/exp.hpp"
#include "test_util.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr double kU = testing::kUnit64;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Reference {
  double value = 0.0;      // -eps log sum_j exp(h_j - C_ij / eps)
  double tolerance = 0.0;  // the bound of the header comment
};

// One output of softmin_rows(eps, h) for the point q against the points k, in plain loops
// (two passes: the maximum, then the sum in long double), with its tolerance.
Reference reference_softmin(CostKind cost, const RowMatrix& k, const double* q, double eps, const Eigen::VectorXd& h) {
  const Eigen::Index m = k.rows(), p = k.cols();
  double top = -kInf;
  for (Eigen::Index j = 0; j < m; ++j) top = std::max(top, h[j]);
  if (top == -kInf) return {kInf, 0.0};
  Eigen::RowVectorXd center = Eigen::RowVectorXd::Zero(p);
  for (Eigen::Index c = 0; c < p; ++c) {
    double lo = kInf, hi = -kInf;
    for (Eigen::Index j = 0; j < m; ++j)
      if (h[j] > -kInf) {
        lo = std::min(lo, k(j, c));
        hi = std::max(hi, k(j, c));
      }
    center[c] = 0.5 * (lo + hi);
  }
  std::vector<double> z(static_cast<std::size_t>(m)), e(static_cast<std::size_t>(m));
  double zmax = -kInf;
  for (Eigen::Index j = 0; j < m; ++j) {
    const auto jj = static_cast<std::size_t>(j);
    if (h[j] == -kInf) {
      z[jj] = -kInf;
      continue;
    }
    const double c_ij = pair_cost(cost, q, &k(j, 0), p), gap = top - h[j];
    z[jj] = h[j] - top - c_ij / eps;
    double spread = 0.0;
    for (Eigen::Index c = 0; c < p; ++c)
      spread += cost == CostKind::dot ? std::abs(q[c] * k(j, c))
                                      : std::abs(q[c] - k(j, c)) * (std::abs(q[c] - center[c]) + std::abs(k(j, c) - center[c]));
    e[jj] = cost == CostKind::dot ? (p + 3) * kU * (spread / eps + gap)
                                  : (p + 4) * kU * (c_ij / eps + gap) + 3 * kU * spread / eps;
    zmax = std::max(zmax, z[jj]);
  }
  long double sum = 0.0L;
  for (Eigen::Index j = 0; j < m; ++j) sum += std::exp(static_cast<long double>(z[static_cast<std::size_t>(j)] - zmax));
  const double log_partition = zmax + static_cast<double>(std::log(sum));
  double weighted = 0.0;  // sum_j w_ij (e_ij + u |z_ij - zmax|)
  for (Eigen::Index j = 0; j < m; ++j) {
    const auto jj = static_cast<std::size_t>(j);
    if (z[jj] == -kInf) continue;
    weighted += std::exp(z[jj] - log_partition) * (e[jj] + 2.0 * kU * std::abs(z[jj] - zmax));
  }
  const double value = -eps * (top + log_partition);
  const double first_order = weighted * (1.0 + weighted);  // e^x - 1 <= x (1 + x) for the small x here
  const double sums = (simd::kExpUlps + static_cast<double>(m) + 4.0) * kU;
  const double kernel = eps * (first_order + sums) + 2.0 * kU * eps * (std::abs(top) + std::abs(log_partition)) +
                        kU * std::abs(value);
  return {value, 2.0 * kernel};  // the kernel's and the reference's
}

// Points with per-coordinate scales and an offset.
RowMatrix cloud(std::mt19937_64& rng, Eigen::Index n, Eigen::Index p, const std::vector<double>& scales, double offset) {
  RowMatrix x = testing::random_matrix(rng, n, p, 1.0);
  for (Eigen::Index c = 0; c < p; ++c) x.col(c) = x.col(c) * scales[static_cast<std::size_t>(c % scales.size())] + Eigen::VectorXd::Constant(n, offset);
  return x;
}

// h_j = log b_j + g_j / eps with g spread over the cost range, as the Sinkhorn loop passes it.
Eigen::VectorXd potentials(std::mt19937_64& rng, Eigen::Index m, double range, double eps) {
  const Eigen::VectorXd b = testing::random_weights(rng, m);
  std::uniform_real_distribution<double> g(0.0, range);
  Eigen::VectorXd h(m);
  for (Eigen::Index j = 0; j < m; ++j) h[j] = std::log(b[j]) + g(rng) / eps;
  return h;
}

// softmin_rows and softmin_cols of OnlineSoftMin(x, y, cost) against the reference, every output.
void expect_matches_reference(CostKind cost, const RowMatrix& x, const RowMatrix& y, double eps, const Eigen::VectorXd& hy,
                              const Eigen::VectorXd& hx, const std::string& what) {
  const OnlineSoftMin op(x, y, cost);
  Eigen::VectorXd rows, cols;
  op.softmin_rows(eps, hy, rows);
  op.softmin_cols(eps, hx, cols);
  ASSERT_EQ(rows.size(), x.rows());
  ASSERT_EQ(cols.size(), y.rows());
  double worst = 0.0;  // the largest error in units of its tolerance
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const Reference r = reference_softmin(cost, y, &x(i, 0), eps, hy);
    ASSERT_LE(std::abs(rows[i] - r.value), r.tolerance) << what << " row " << i << " got " << rows[i] << " want " << r.value;
    worst = std::max(worst, std::abs(rows[i] - r.value) / r.tolerance);
  }
  for (Eigen::Index j = 0; j < y.rows(); ++j) {
    const Reference r = reference_softmin(cost, x, &y(j, 0), eps, hx);
    ASSERT_LE(std::abs(cols[j] - r.value), r.tolerance) << what << " col " << j << " got " << cols[j] << " want " << r.value;
    worst = std::max(worst, std::abs(cols[j] - r.value) / r.tolerance);
  }
  ::testing::Test::RecordProperty(what, std::to_string(worst));
}

TEST(OnlineSoftMin, MatchesPlainLoopsOnIsotropicAnisotropicAndFarClouds) {
  std::mt19937_64 rng(testing::fresh_seed());
  struct Shape {
    const char* name;
    std::vector<double> scales;
    double offset;
  };
  const std::vector<Shape> shapes = {{"isotropic", {1.0}, 0.0}, {"anisotropic", {1e-2, 1.0, 30.0}, 0.0},
                                     {"far", {1.0}, 1e4}, {"wide", {100.0}, 0.0}};
  for (CostKind cost : {CostKind::sqeuclidean, CostKind::dot})
    for (const Shape& shape : shapes)
      for (const double eps : {10.0, 1.0, 0.1, 1e-2, 1e-3}) {
        if (cost == CostKind::dot && shape.offset != 0.0) continue;  // |x| |y| / eps ~ 1e11: nothing left to compare
        const Eigen::Index p = 1 + static_cast<Eigen::Index>(rng() % 5);
        const Eigen::Index n = 1 + static_cast<Eigen::Index>(rng() % 90), m = 1 + static_cast<Eigen::Index>(rng() % 300);
        const RowMatrix x = cloud(rng, n, p, shape.scales, shape.offset), y = cloud(rng, m, p, shape.scales, shape.offset);
        const double range = testing::cost_matrix(cost, x, y).maxCoeff() - testing::cost_matrix(cost, x, y).minCoeff();
        expect_matches_reference(cost, x, y, eps, potentials(rng, m, range, eps), potentials(rng, n, range, eps),
                                 std::string(to_string(cost)) + " " + shape.name + " eps " + std::to_string(eps));
      }
}

TEST(OnlineSoftMin, EmptyBinsAddNothing) {
  // h_j = -inf (a zero weight) drops key j, also when it fills whole key tiles; all -inf: +inf.
  std::mt19937_64 rng(testing::fresh_seed());
  const RowMatrix x = testing::random_matrix(rng, 40, 3, 1.0), y = testing::random_matrix(rng, 400, 3, 1.0);
  for (CostKind cost : {CostKind::sqeuclidean, CostKind::dot}) {
    Eigen::VectorXd hy = potentials(rng, 400, 10.0, 0.1), hx = potentials(rng, 40, 10.0, 0.1);
    hy.head(300).setConstant(-kInf);  // the first two key tiles and more
    hy[350] = -kInf;
    hx.tail(5).setConstant(-kInf);
    expect_matches_reference(cost, x, y, 0.1, hy, hx, std::string("empty bins ") + to_string(cost));
    Eigen::VectorXd out;
    OnlineSoftMin(x, y, cost).softmin_rows(0.1, Eigen::VectorXd::Constant(400, -kInf), out);
    EXPECT_TRUE((out.array() == kInf).all());
  }
}

TEST(OnlineSoftMin, SameBitsForAnyThreadCountAndForABlockOfRows) {
  // Above the size where the soft-min runs in parallel (2^15 pairs); a block of the rows alone
  // (DistributedSoftMin's share) gives the same bits as the whole.
  std::mt19937_64 rng(testing::fresh_seed());
  const RowMatrix x = testing::random_matrix(rng, 301, 3, 1.0), y = testing::random_matrix(rng, 257, 3, 1.0);
  const Eigen::VectorXd h = potentials(rng, 257, 20.0, 0.05);
  for (CostKind cost : {CostKind::sqeuclidean, CostKind::dot}) {
    Eigen::VectorXd one, two, block;
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    OnlineSoftMin(x, y, cost).softmin_rows(0.05, h, one);
    omp_set_num_threads(2);
    OnlineSoftMin(x, y, cost).softmin_rows(0.05, h, two);
    omp_set_num_threads(threads);
    OnlineSoftMin(x.middleRows(77, 100), y, cost).softmin_rows(0.05, h, block);
    EXPECT_EQ(one, two) << to_string(cost);
    EXPECT_EQ(block, one.segment(77, 100)) << to_string(cost);
  }
}

TEST(OnlineSoftMin, Float32SoftMinsStayWithinTheirStatedError) {
  // The coarse (float32) soft-mins the log-domain loop runs far from tol: each sum within relative
  // error coarse_error(L) for logits at most L = max|C| / eps + (max h - min h) in size (what
  // stages.cpp passes), so each output within eps coarse_error(L) / (1 - coarse_error(L)) of the
  // exact soft-min, plus the float64 reference's own tolerance. Fresh clouds, potentials and eps;
  // the euclidean cost has no float32 path (coarse_error 0).
  std::mt19937_64 rng(testing::fresh_seed());
  for (CostKind cost : {CostKind::sqeuclidean, CostKind::dot})
    for (const double eps : {1.0, 0.1, 0.02}) {
      const Eigen::Index p = 1 + static_cast<Eigen::Index>(rng() % 4);
      const Eigen::Index n = 1 + static_cast<Eigen::Index>(rng() % 200), m = 1 + static_cast<Eigen::Index>(rng() % 600);
      const RowMatrix x = cloud(rng, n, p, {0.3, 1.0, 2.0}, 0.0), y = cloud(rng, m, p, {1.0, 0.5}, 0.5);
      const RowMatrix C = testing::cost_matrix(cost, x, y);
      const Eigen::VectorXd hy = potentials(rng, m, C.maxCoeff() - C.minCoeff(), eps);
      const OnlineSoftMin op(x, y, cost);
      const double L = op.cost_magnitude() / eps + (hy.maxCoeff() - hy.minCoeff());
      const double relative = op.coarse_error(L);
      ASSERT_GT(relative, 0.0);
      Eigen::VectorXd coarse;
      op.softmin_rows_coarse(eps, hy, coarse);
      ASSERT_EQ(coarse.size(), n);
      for (Eigen::Index i = 0; i < n; ++i) {
        const Reference r = reference_softmin(cost, y, &x(i, 0), eps, hy);
        ASSERT_LE(std::abs(coarse[i] - r.value), eps * relative / (1.0 - relative) + r.tolerance)
            << to_string(cost) << " eps " << eps << " row " << i << " relative " << relative;
      }
    }
  EXPECT_EQ(OnlineSoftMin(RowMatrix::Zero(2, 2), RowMatrix::Ones(3, 2), CostKind::euclidean).coarse_error(1.0), 0.0);
}

TEST(OnlineSoftMin, SinkhornConvergesAsTheDenseOperatorDoes) {
  // Both runs stop with l1 marginal error e < tol on the returned plan (measured in double); by
  // the bound of test_ot.cpp's header their objectives are within (e_online + e_dense) R / 2 of
  // OT_eps(a, b), so of each other, R the cost range; each objective, a sum of n m terms, carries
  // n m u of its size in rounding.
  std::mt19937_64 rng(testing::fresh_seed());
  for (const double eps : {0.5, 0.05}) {
    const RowMatrix x = cloud(rng, 90, 3, {0.1, 1.0, 3.0}, 0.0), y = cloud(rng, 70, 3, {0.1, 1.0, 3.0}, 0.5);
    const Eigen::VectorXd a = testing::random_weights(rng, 90), b = testing::random_weights(rng, 70);
    SinkhornOptions opt;
    opt.epsilon = eps;
    opt.tol = 1e-9;
    const RowMatrix C = testing::cost_matrix(CostKind::sqeuclidean, x, y);
    const SinkhornResult online = sinkhorn(OnlineSoftMin(x, y, CostKind::sqeuclidean), a, b, opt);
    const SinkhornResult dense = sinkhorn(DenseSoftMin(C), a, b, opt);
    ASSERT_TRUE(online.converged && dense.converged) << eps;
    EXPECT_LT(online.marginal_error, opt.tol);
    const double R = C.maxCoeff() - C.minCoeff();
    const double rounding = 2.0 * 90 * 70 * kU * std::abs(dense.objective);
    EXPECT_NEAR(online.objective, dense.objective, (online.marginal_error + dense.marginal_error) * R / 2 + rounding)
        << eps;
  }
}

TEST(OnlineSoftMin, SinkhornWithItsFloat32PhaseConvergesAsTheDenseOperatorDoes) {
  // Above CoarsePhase::kCoarseMinPairs the online loop runs its first iterations in float32; what
  // it returns is measured in float64 all the same: marginal error below tol on the returned plan,
  // and the objective within the bound of the test above of the dense operator's.
  std::mt19937_64 rng(testing::fresh_seed());
  const Eigen::Index n = 1100, m = 1000;
  const RowMatrix x = cloud(rng, n, 3, {0.5, 1.0, 2.0}, 0.0), y = cloud(rng, m, 3, {1.0, 0.7}, 0.5);
  const Eigen::VectorXd a = testing::random_weights(rng, n), b = testing::random_weights(rng, m);
  SinkhornOptions opt;
  opt.epsilon = 0.1;
  opt.tol = 1e-9;
  const RowMatrix C = testing::cost_matrix(CostKind::sqeuclidean, x, y);
  ASSERT_GE(static_cast<double>(n * m), stages::CoarsePhase::kCoarseMinPairs);
  const SinkhornResult online = sinkhorn(OnlineSoftMin(x, y, CostKind::sqeuclidean), a, b, opt);
  const SinkhornResult dense = sinkhorn(DenseSoftMin(C), a, b, opt);
  ASSERT_TRUE(online.converged && dense.converged);
  EXPECT_LT(online.marginal_error, opt.tol);
  const double R = C.maxCoeff() - C.minCoeff();
  const double rounding = 2.0 * static_cast<double>(n * m) * kU * std::abs(dense.objective);
  EXPECT_NEAR(online.objective, dense.objective, (online.marginal_error + dense.marginal_error) * R / 2 + rounding);
}

}  // namespace
}  // namespace tokenflow
