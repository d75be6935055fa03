// exact_ot (the network simplex on the implicit complete bipartite graph, src/ot/transport_simplex.hpp)
// against the reference: LEMON's NetworkSimplex on an explicit graph (src/ot/exact_reference.hpp),
// on fresh random problems of every shape the solver meets: squared distances, costs with many ties
// (degenerate pivots), negative costs, empty bins, square assignment problems, n != m.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../../src/ot/exact_reference.hpp"
#include "test_util.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {
namespace {

using RowMajorMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The cost unit of exact_ot (src/ot/exact.cpp): 2^e / 2^k with max|C| < 2^e, k = 50 - ceil(log2(n + m + 1)).
double exact_unit(const RowMajorMatrix& C) {
  const double top = C.cwiseAbs().maxCoeff();
  if (top == 0.0) return 1.0;
  const int k = 50 - static_cast<int>(std::ceil(std::log2(static_cast<double>(C.rows() + C.cols()) + 1.0)));
  int e = 0;
  std::frexp(top, &e);
  return std::ldexp(1.0, e - k);
}

// The reference's unit: max|C| 2^-k with k = 60 - ceil(log2(n + m + 1)).
double reference_unit(const RowMajorMatrix& C) {
  const int k = 60 - static_cast<int>(std::ceil(std::log2(static_cast<double>(C.rows() + C.cols()) + 1.0)));
  return std::ldexp(C.cwiseAbs().maxCoeff(), -k);
}

enum class Kind { sqeuclidean, ties, negative, assignment };

struct TransportProblem {
  RowMajorMatrix C;
  Eigen::VectorXd a, b;
};

TransportProblem random_problem(std::mt19937_64& rng, Kind kind, Eigen::Index n, Eigen::Index m) {
  if (kind == Kind::assignment) m = n;
  std::uniform_int_distribution<int> dim(1, 3), tie(0, 3);
  const Eigen::Index d = dim(rng);
  const RowMajorMatrix x = testing::random_matrix(rng, n, d, 1.0), y = testing::random_matrix(rng, m, d, 1.0);
  TransportProblem p;
  p.C = cost_matrix(x, y, kind == Kind::negative ? CostKind::euclidean : CostKind::sqeuclidean);
  if (kind == Kind::negative) p.C.array() -= 1.0;
  if (kind == Kind::ties)
    for (Eigen::Index k = 0; k < p.C.size(); ++k) p.C.data()[k] = tie(rng);
  if (kind == Kind::assignment) {
    p.a = p.b = Eigen::VectorXd::Constant(n, 1.0 / static_cast<double>(n));
    return p;
  }
  p.a = testing::random_weights(rng, n);
  p.b = testing::random_weights(rng, m);
  // An empty bin on each side (when there are at least two bins).
  std::uniform_int_distribution<Eigen::Index> row(0, n - 1), col(0, m - 1);
  if (n > 1) p.a[row(rng)] = 0.0;
  if (m > 1) p.b[col(rng)] = 0.0;
  p.a /= p.a.sum();
  p.b /= p.b.sum();
  return p;
}

// Each solver's plan is optimal for its own rounded costs (each within half its unit of C), so its
// true cost is within its unit of the optimum; <C, pi> sums at most n + m - 1 products, each with
// rounding (n + m) u max|C| at most (u = 2^-53, mass 1).
void expect_agrees_with_reference(const TransportProblem& p) {
  const ExactOTResult r = exact_ot(p.C, p.a, p.b), ref = reference_exact_ot(p.C, p.a, p.b);
  const Eigen::Index n = p.C.rows(), m = p.C.cols();
  const double unit = exact_unit(p.C), top = p.C.cwiseAbs().maxCoeff();
  const double summation = 2.0 * static_cast<double>(n + m) * 0x1p-53 * top;
  EXPECT_LE(std::abs(r.cost - ref.cost), unit + reference_unit(p.C) + summation)
      << n << " x " << m << ", max|C| " << top;
  // Flows are integers in units of 2^-52: each plan entry and each row or column sum is exact, and
  // each mass was rounded once (at most one unit from a_i, plus a_i's own rounding).
  EXPECT_LE((r.plan.rowwise().sum() - p.a).cwiseAbs().maxCoeff(), 2 * 0x1p-52);
  EXPECT_LE((r.plan.colwise().sum().transpose() - p.b).cwiseAbs().maxCoeff(), 2 * 0x1p-52);
  EXPECT_GE(r.plan.minCoeff(), 0.0);
  EXPECT_LE((r.plan.array() > 0.0).count(), n + m - 1);  // a vertex of the transport polytope
  // The potentials are integers in units of `unit`, feasible and tight for the rounded costs
  // (each within unit / 2 of C_ij), and f_i + g_j is exact: no other tolerance.
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) {
      EXPECT_LE(r.f[i] + r.g[j] - p.C(i, j), unit / 2) << i << ", " << j;
      if (r.plan(i, j) > 0.0) {
        EXPECT_GE(r.f[i] + r.g[j] - p.C(i, j), -unit / 2) << i << ", " << j;
      }
    }
}

TEST(ExactOT, AgreesWithLemonReferenceOnSmallRandomProblems) {
  std::mt19937_64 rng(testing::fresh_seed());
  std::uniform_int_distribution<Eigen::Index> size(1, 40);
  for (int trial = 0; trial < 80; ++trial) {
    SCOPED_TRACE(trial);
    expect_agrees_with_reference(random_problem(rng, static_cast<Kind>(trial % 4), size(rng), size(rng)));
  }
}

TEST(ExactOT, AgreesWithLemonReferenceOnLargerProblems) {
  // Thousands of pivots: the block search wraps around the arcs many times, and the tree update
  // meets every case (stems of many nodes, the join at the root).
  std::mt19937_64 rng(testing::fresh_seed());
  for (const Kind kind : {Kind::sqeuclidean, Kind::ties, Kind::negative, Kind::assignment}) {
    SCOPED_TRACE(static_cast<int>(kind));
    expect_agrees_with_reference(random_problem(rng, kind, 180, 230));
  }
}

}  // namespace
}  // namespace tokenflow
