// The accelerated log-domain loop (Anderson, over-relaxation; src/ot/stages.cpp), the bounded
// budget of intermediate epsilon stages (src/ot/sinkhorn.cpp) and empty bins (zero weights) in
// Sinkhorn, exact OT and W_p.
//
// Bound used below (derived in test_ot.cpp's header): a returned plan with marginal error e has
// objective within e R / 2 of OT_eps(a, b), R = max C - min C. Two solves of the same problem
// with errors e1, e2 therefore have objectives within (e1 + e2) R / 2 of each other, plus the
// rounding of the objective's sum (n m terms of size <= max|C| + max|f + g|: a few n m u R).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "test_util.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/ot_solve.hpp"
#include "tokenflow/wasserstein.hpp"

namespace tokenflow {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// POT's test_sinkhorn_stabilization problem (its test suite, test/test_bregman.py): two 1-D
// Gaussian histograms on 100 bins (means 30 and 40, standard deviation 10, as POT's
// make_1D_gauss: exp(-(x - m)^2 / (2 s^2)) normalized) and the squared distance between bin
// indices, so R = 99^2 = 9801.
struct PotProblem {
  RowMatrix cost = RowMatrix(100, 100);
  Eigen::VectorXd a = Eigen::VectorXd(100), b = Eigen::VectorXd(100);
  PotProblem() {
    for (int i = 0; i < 100; ++i) {
      a[i] = std::exp(-(i - 30.0) * (i - 30.0) / 200.0);
      b[i] = std::exp(-(i - 40.0) * (i - 40.0) / 200.0);
      for (int j = 0; j < 100; ++j) cost(i, j) = double(i - j) * double(i - j);
    }
    a /= a.sum();
    b /= b.sum();
  }
};

// The default of tokenflow ot and Python (Anderson, epsilon_start = auto) and POT's sinkhorn_log
// iteration (plain, no scaling), on a budget.
SinkhornOptions default_options(const SoftMin& op, double eps, double tol, int budget) {
  SinkhornOptions o;
  o.epsilon = eps;
  o.tol = tol;
  o.max_iter = budget;
  o.epsilon_start = automatic_epsilon_start(op, eps);
  return o;
}
SinkhornOptions plain_options(double eps, double tol, int budget) {
  SinkhornOptions o;
  o.epsilon = eps;
  o.tol = tol;
  o.max_iter = budget;
  o.overrelaxation = 1.0;
  return o;
}

TEST(SinkhornAcceleration, PotStabilizationProblemConvergesAtSmallEpsilon) {
  // eps / R = 1e-5. Measured (docs/ot.md, "Acceleration"): the plain loop ends 20 000
  // iterations at marginal error 1.9e-4; the default converges to 1e-9 in about 3 000.
  const PotProblem p;
  const DenseSoftMin op(p.cost);
  const SinkhornResult r = sinkhorn(op, p.a, p.b, default_options(op, 0.1, 1e-9, 20000));
  EXPECT_TRUE(r.converged) << "marginal error " << r.marginal_error << " after " << r.iterations;
  EXPECT_LT(r.marginal_error, 1e-9);
  const SinkhornResult plain = sinkhorn(op, p.a, p.b, plain_options(0.1, 1e-9, 20000));
  EXPECT_FALSE(plain.converged);  // the problem is hard for the plain loop: the test tests something
}

TEST(SinkhornAcceleration, PotSmallestRegReachesItsFloor) {
  // POT's own reg = 1e-5 on this problem (eps / R = 1e-9), tol 1e-9 below the plan's rounding
  // floor (about 1.6e-8), the weights perturbed by a few units of their last digit (fresh draws:
  // rounding decides how the loop settles there, so no one input may stand for the claim). The
  // epsilon-scaling stages from eps = 0.15 down each need thousands of iterations (the plan is a
  // chain along which the loop moves mass by one link per iteration); a stalled stage hands the
  // final stage potentials whose plan is the exact plan on its support (sinkhorn.cpp,
  // potentials_on_the_plan), from which it stops at its floor. Measured (docs/ot.md, "Tol below
  // the floor"): 990 to 1660 iterations in all. Before, from the exact duals themselves, 4 of 12
  // such draws ended 20 000 iterations at 3 to 600 times the floor.
  std::mt19937_64 rng(testing::fresh_seed());
  std::uniform_real_distribution<double> wiggle(-4.0, 4.0);
  for (int draw = 0; draw < 3; ++draw) {
    PotProblem p;
    for (Eigen::Index i = 0; i < p.a.size(); ++i) {
      p.a[i] *= 1.0 + wiggle(rng) * testing::kEps;
      p.b[i] *= 1.0 + wiggle(rng) * testing::kEps;
    }
    p.a /= p.a.sum();
    p.b /= p.b.sum();
    const DenseSoftMin op(p.cost);
    const SinkhornResult r = sinkhorn(op, p.a, p.b, default_options(op, 1e-5, 1e-9, 20000));
    EXPECT_TRUE(r.below_floor) << "marginal error " << r.marginal_error << ", floor " << r.rounding_floor;
    EXPECT_EQ(r.epsilon_reached, 1e-5);
    EXPECT_LT(r.iterations, 20000);
    // The final stage stops once its error estimate is below a lower bound of the floor
    // (stages.cpp, stop_error); the measured error adds at most the floor's own rounding.
    EXPECT_LE(r.marginal_error, 2.0 * r.rounding_floor);
  }
}

// A 1-D problem like POT's: Gaussian histograms on n bins with the given means and standard
// deviations, the squared distance of bin indices.
PotProblem gaussians(int n, double mean_a, double sd_a, double mean_b, double sd_b) {
  PotProblem p;
  p.cost.resize(n, n);
  p.a.resize(n);
  p.b.resize(n);
  for (int i = 0; i < n; ++i) {
    p.a[i] = std::exp(-(i - mean_a) * (i - mean_a) / (2 * sd_a * sd_a));
    p.b[i] = std::exp(-(i - mean_b) * (i - mean_b) / (2 * sd_b * sd_b));
    for (int j = 0; j < n; ++j) p.cost(i, j) = double(i - j) * double(i - j);
  }
  p.a /= p.a.sum();
  p.b /= p.b.sum();
  return p;
}

TEST(SinkhornAcceleration, DefaultTakesNoMoreIterationsThanThePlainLoop) {
  // ot.hpp's claim (the plain loop runs beside the accelerated one), on a family: 1-D Gaussian
  // histograms at eps / R from 1e-1 to 1e-4 and clouds at eps from 1 to 0.01. Where the plain loop
  // ends (converged, or at its rounding floor) within the budget, so does the default, in at most
  // its iterations; the stalled schedules' exact start (sinkhorn.cpp) included.
  std::mt19937_64 rng(testing::fresh_seed());
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  int compared = 0;
  auto compare = [&](const RowMatrix& C, const Eigen::VectorXd& a, const Eigen::VectorXd& b, double eps,
                     const std::string& what) {
    const DenseSoftMin op(C);
    const SinkhornResult plain = sinkhorn(op, a, b, plain_options(eps, 1e-9, 20000));
    const SinkhornResult d = sinkhorn(op, a, b, default_options(op, eps, 1e-9, 20000));
    if (!(plain.converged || plain.below_floor)) return;
    ++compared;
    EXPECT_TRUE(d.converged || d.below_floor) << what << ": plain in " << plain.iterations;
    EXPECT_LE(d.iterations, plain.iterations) << what;
  };
  for (int instance = 0; instance < 2; ++instance) {
    const int n = 40 + static_cast<int>(40 * uni(rng));
    const PotProblem p = gaussians(n, n * (0.2 + 0.3 * uni(rng)), n * (0.05 + 0.1 * uni(rng)),
                                   n * (0.4 + 0.3 * uni(rng)), n * (0.05 + 0.1 * uni(rng)));
    const double R = p.cost.maxCoeff();
    for (double ratio : {1e-1, 1e-2, 1e-3, 1e-4})
      compare(p.cost, p.a, p.b, ratio * R, "gaussians n = " + std::to_string(n) + ", eps / R = " + std::to_string(ratio));
  }
  for (int instance = 0; instance < 2; ++instance) {
    const RowMatrix x = testing::random_matrix(rng, 50, 2, 1.0), y = testing::random_matrix(rng, 40, 2, 1.0);
    const RowMatrix C = testing::cost_matrix(CostKind::sqeuclidean, x, y);
    const Eigen::VectorXd a = testing::random_weights(rng, 50), b = testing::random_weights(rng, 40);
    for (double eps : {1.0, 0.1, 0.01}) compare(C, a, b, eps, "clouds, eps = " + std::to_string(eps));
  }
  EXPECT_GE(compared, 8);  // the plain loop ends on most of the family: the comparison happened
}

TEST(SinkhornAcceleration, DefaultNeverWorseThanThePlainLoopOnTheSameBudget) {
  // The claim of ot.hpp's options, on POT's problem at several budgets and epsilons and on fresh
  // random clouds (N(0, I) against N(1, I) in R^3, n = m = 60): the default's marginal error is at
  // most the plain loop's, or below tol. Measured margins (docs/ot.md): 1e4-fold and more where
  // the plain loop has not converged.
  const PotProblem p;
  const DenseSoftMin pot(p.cost);
  for (double eps : {0.1, 1.0, 10.0})
    for (int budget : {500, 2000, 20000}) {
      const SinkhornResult d = sinkhorn(pot, p.a, p.b, default_options(pot, eps, 1e-9, budget));
      const SinkhornResult plain = sinkhorn(pot, p.a, p.b, plain_options(eps, 1e-9, budget));
      EXPECT_TRUE(d.converged || d.marginal_error <= plain.marginal_error)
          << "POT problem, eps " << eps << ", budget " << budget << ": default " << d.marginal_error
          << ", plain " << plain.marginal_error;
    }
  std::mt19937_64 rng(testing::fresh_seed());
  for (int instance = 0; instance < 3; ++instance) {
    const RowMatrix x = testing::random_matrix(rng, 60, 3, 1.0);
    RowMatrix y = testing::random_matrix(rng, 60, 3, 1.0);
    y.array() += 1.0;
    const Eigen::VectorXd a = testing::random_weights(rng, 60), b = testing::random_weights(rng, 60);
    const OnlineSoftMin op(x, y, CostKind::sqeuclidean);
    for (double eps : {0.01, 0.1, 1.0}) {
      const SinkhornResult d = sinkhorn(op, a, b, default_options(op, eps, 1e-9, 1000));
      const SinkhornResult plain = sinkhorn(op, a, b, plain_options(eps, 1e-9, 1000));
      EXPECT_TRUE(d.converged || d.marginal_error <= plain.marginal_error)
          << "clouds, eps " << eps << ": default " << d.marginal_error << ", plain " << plain.marginal_error;
    }
  }
}

TEST(SinkhornAcceleration, SameSolutionAsThePlainReference) {
  // Anderson and a fixed over-relaxation change the iterates, not the fixed point: at tol 1e-12
  // the objective agrees with the plain reference loop within the bound of the header, and the
  // returned plan has exact columns and rows within tol.
  std::mt19937_64 rng(testing::fresh_seed());
  for (CostKind cost : {CostKind::sqeuclidean, CostKind::euclidean, CostKind::dot}) {
    const RowMatrix x = testing::random_matrix(rng, 50, 2, 1.0), y = testing::random_matrix(rng, 40, 2, 1.0);
    const Eigen::VectorXd a = testing::random_weights(rng, 50), b = testing::random_weights(rng, 40);
    const RowMatrix C = testing::cost_matrix(cost, x, y);
    const double R = C.maxCoeff() - C.minCoeff();
    const SinkhornResult ref = reference_sinkhorn(C, a, b, 0.1, 1e-12, 200000);
    ASSERT_TRUE(ref.converged);
    for (double omega : {0.0, 1.5}) {
      SinkhornOptions o = plain_options(0.1, 1e-12, 200000);
      o.overrelaxation = omega;
      o.want_plan = true;
      const SinkhornResult r = sinkhorn(DenseSoftMin(C), a, b, o);
      ASSERT_TRUE(r.converged) << "omega " << omega;
      const double bound = (r.marginal_error + ref.marginal_error) * R / 2 + 64.0 * 50 * 40 * testing::kUnit64 * R;
      EXPECT_NEAR(r.objective, ref.objective, bound) << "omega " << omega;
      EXPECT_LE((r.plan.colwise().sum().transpose() - b).cwiseAbs().sum(), 50 * 40 * 4 * testing::kUnit64);
      // The loop's own error (below tol) plus the rounding of these row sums (m terms each).
      EXPECT_LE((r.plan.rowwise().sum() - a).cwiseAbs().sum(), r.marginal_error + 4.0 * 50 * 40 * testing::kUnit64);
      if (omega == 0.0) {
        EXPECT_LT(r.iterations, ref.iterations) << "Anderson took more iterations than plain";
      }
    }
  }
}

// a with `zeros` entries set to 0 (at random places), renormalized; the support's indices.
Eigen::VectorXd with_empty_bins(std::mt19937_64& rng, Eigen::VectorXd w, int zeros, std::vector<int>& support) {
  std::vector<int> idx(static_cast<std::size_t>(w.size()));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
  std::shuffle(idx.begin(), idx.end(), rng);
  for (int k = 0; k < zeros; ++k) w[idx[static_cast<std::size_t>(k)]] = 0.0;
  support.clear();
  for (Eigen::Index i = 0; i < w.size(); ++i)
    if (w[i] > 0.0) support.push_back(static_cast<int>(i));
  return w / w.sum();
}

// Points x (n) and y (m) in R^2 with weights that have `zeros_a` and `zeros_b` empty bins, their
// sqeuclidean cost, and the same problem restricted to the support (xs, ys, Cs, as, bs; sa and sb
// the support's indices).
struct EmptyBinProblem {
  RowMatrix x, y, C, xs, ys, Cs;
  Eigen::VectorXd a, b, as, bs;
  std::vector<int> sa, sb;
};
EmptyBinProblem empty_bin_problem(std::mt19937_64& rng, int n, int m, int zeros_a, int zeros_b) {
  EmptyBinProblem p;
  p.x = testing::random_matrix(rng, n, 2, 1.0);
  p.y = testing::random_matrix(rng, m, 2, 1.0);
  p.a = with_empty_bins(rng, testing::random_weights(rng, n), zeros_a, p.sa);
  p.b = with_empty_bins(rng, testing::random_weights(rng, m), zeros_b, p.sb);
  p.C = testing::cost_matrix(CostKind::sqeuclidean, p.x, p.y);
  const auto ns = static_cast<Eigen::Index>(p.sa.size()), ms = static_cast<Eigen::Index>(p.sb.size());
  p.Cs.resize(ns, ms);
  p.xs.resize(ns, 2);
  p.ys.resize(ms, 2);
  p.as.resize(ns);
  p.bs.resize(ms);
  for (Eigen::Index i = 0; i < ns; ++i) {
    p.as[i] = p.a[p.sa[i]];
    p.xs.row(i) = p.x.row(p.sa[i]);
    for (Eigen::Index j = 0; j < ms; ++j) p.Cs(i, j) = p.C(p.sa[i], p.sb[j]);
  }
  for (Eigen::Index j = 0; j < ms; ++j) {
    p.bs[j] = p.b[p.sb[j]];
    p.ys.row(j) = p.y.row(p.sb[j]);
  }
  return p;
}

TEST(EmptyBins, SinkhornSolvesTheProblemOnTheSupport) {
  // With plain steps the loop on (a, b) with empty bins is the loop on the support: log a_i =
  // -inf adds exactly 0 to every log-sum-exp, so the iterates agree up to the order of summation
  // (tiles), n m u |C| / eps per step. At convergence (tol 1e-12) the plans agree within the
  // objective bound's reasoning applied entrywise: both are within 1e-12 of a coupling, and the
  // same fixed point; 1e-10 leaves room for the contraction's amplification of rounding.
  std::mt19937_64 rng(testing::fresh_seed());
  const EmptyBinProblem p = empty_bin_problem(rng, 40, 30, 7, 5);
  const auto& [x, y, C, xs, ys, Cs, a, b, as, bs, sa, sb] = p;
  for (double omega : {1.0, 0.0}) {
    for (bool kernel : {false, true}) {
      SinkhornOptions o = plain_options(0.2, 1e-12, 100000);
      o.overrelaxation = omega;
      o.kernel_mode = kernel;  // not used with empty bins (ot.hpp): the same log-domain loop
      o.want_plan = true;
      const SinkhornResult full = sinkhorn(DenseSoftMin(C), a, b, o);
      const SinkhornResult part = sinkhorn(DenseSoftMin(Cs), as, bs, o);
      ASSERT_TRUE(full.converged && part.converged);
      EXPECT_EQ(full.kernel_iterations, 0);
      for (Eigen::Index i = 0; i < 40; ++i)
        if (a[i] == 0.0) {
          EXPECT_EQ(full.plan.row(i).cwiseAbs().maxCoeff(), 0.0) << "row " << i;
        }
      for (Eigen::Index j = 0; j < 30; ++j)
        if (b[j] == 0.0) {
          EXPECT_EQ(full.plan.col(j).cwiseAbs().maxCoeff(), 0.0) << "column " << j;
        }
      double diff = 0.0;
      for (std::size_t i = 0; i < sa.size(); ++i)
        for (std::size_t j = 0; j < sb.size(); ++j) diff = std::max(diff, std::abs(full.plan(sa[i], sb[j]) - part.plan(i, j)));
      EXPECT_LE(diff, 1e-10) << "omega " << omega;
      EXPECT_TRUE(full.f.allFinite() && full.g.allFinite());  // empty bins get the soft-min extension
      EXPECT_NEAR(full.objective, part.objective, 1e-10);
    }
  }
}

TEST(EmptyBins, ExactOtAndWassersteinIgnoreEmptyBins) {
  // The network simplex runs on integer masses: an empty bin gets mass 0 exactly, so the optimal
  // cost is the support's, up to the rounding of <C, pi> (n m terms: n m u max C).
  std::mt19937_64 rng(testing::fresh_seed());
  const EmptyBinProblem p = empty_bin_problem(rng, 25, 20, 6, 4);
  const auto& [x, y, C, xs, ys, Cs, a, b, as, bs, sa, sb] = p;
  const ExactOTResult full = exact_ot(C, a, b), part = exact_ot(Cs, as, bs);
  const double tol = 25 * 20 * 4 * testing::kUnit64 * C.maxCoeff();
  EXPECT_NEAR(full.cost, part.cost, tol);
  for (Eigen::Index i = 0; i < 25; ++i)
    if (a[i] == 0.0) {
      EXPECT_EQ(full.plan.row(i).cwiseAbs().maxCoeff(), 0.0);
    }
  for (Eigen::Index j = 0; j < 20; ++j)
    if (b[j] == 0.0) {
      EXPECT_EQ(full.plan.col(j).cwiseAbs().maxCoeff(), 0.0);
    }
  // Dual feasibility holds on every pair, empty bins included.
  for (Eigen::Index i = 0; i < 25; ++i)
    for (Eigen::Index j = 0; j < 20; ++j) EXPECT_LE(full.f[i] + full.g[j], C(i, j) + tol);
  EXPECT_NEAR(wasserstein_exact(x, y, a, b, 2.0), wasserstein_exact(xs, ys, as, bs, 2.0), 1e-12);
  EXPECT_NEAR(wasserstein_1d(x.col(0), y.col(0), a, b, 1.0), wasserstein_1d(xs.col(0), ys.col(0), as, bs, 1.0),
              1e-12);
}

TEST(EmptyBins, AllZeroOrNegativeWeightsAreRefused) {
  const RowMatrix C = RowMatrix::Ones(3, 3);
  const Eigen::VectorXd ok = Eigen::VectorXd::Constant(3, 1.0 / 3);
  SinkhornOptions o;
  EXPECT_THROW(sinkhorn(DenseSoftMin(C), Eigen::VectorXd::Zero(3), ok, o), InputError);
  EXPECT_THROW(sinkhorn(DenseSoftMin(C), Eigen::Vector3d(0.5, -0.1, 0.6), ok, o), InputError);
  EXPECT_THROW(exact_ot(C, Eigen::VectorXd::Zero(3), ok), InputError);
  EXPECT_THROW(make_transport_measure(Points<double>::Zero(3, 1), Eigen::VectorXd::Zero(3)), InputError);
  EXPECT_THROW(make_transport_measure(Points<double>::Zero(3, 1), Eigen::Vector3d(1.0, NAN, 0.0)), InputError);
  const Measure<double> mu = make_transport_measure(Points<double>::Zero(3, 1), Eigen::Vector3d(2.0, 0.0, 2.0));
  EXPECT_EQ(mu.weights, Eigen::Vector3d(0.5, 0.0, 0.5));
}

TEST(SinkhornSchedule, IntermediateStagesLeaveHalfTheBudgetToTheFinalStage) {
  // POT's problem at eps = 0.1 with plain stages and a stage tolerance no stage reaches in the
  // budget: the intermediate stages together use at most half of max_iter (sinkhorn.cpp,
  // next_stage), so the final stage gets the rest.
  const PotProblem p;
  const DenseSoftMin op(p.cost);
  for (int budget : {10, 40, 401, 5000}) {
    SinkhornOptions o = default_options(op, 0.1, 1e-15, budget);
    o.overrelaxation = 1.0;
    o.epsilon_stage_tol = 1e-15;
    const SinkhornResult r = sinkhorn(op, p.a, p.b, o);
    EXPECT_EQ(r.iterations, budget);
    EXPECT_GE(r.final_stage_iterations, budget - budget / 2) << "budget " << budget;
  }
}

}  // namespace
}  // namespace tokenflow
