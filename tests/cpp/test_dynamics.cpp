// Integrators against reference integration, blow-up, layers, the sphere, and the Gaussian check
// of softmax particles against the moment ODE of docs/design.md section 1.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"
#include "tokenflow/dynamics.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::random_matrix;
using testing::random_measure;

AttentionParams random_flow_params(std::mt19937_64& rng, const std::string& kind, int d, bool layers = false) {
  AttentionSpec s;
  s.kind = kind;
  s.Q = random_matrix(rng, d, d, 0.6);
  s.K = random_matrix(rng, d, d, 0.6);
  s.V = random_matrix(rng, d, d, 0.5);
  if (layers) {
    AttentionSpec::Layer l;
    l.until = 0.13;  // inside a step: the integrators cut the step there
    l.Q = random_matrix(rng, d, d, 0.6);
    l.V = random_matrix(rng, d, d, 0.5);
    s.layers = {l};
  }
  return make_attention(s, d);
}

// Classical RK4 written out over the reference velocity, for piecewise-constant parameters:
// each step is cut at the layer boundaries it crosses and each piece uses its own layer.
Points<double> reference_rk4(const AttentionParams& p, Measure<double> mu, double T, double dt) {
  const long steps = std::lround(T / dt);
  auto f = [&](double t, const Points<double>& x) {
    Measure<double> m = mu;
    m.points = x;
    return reference_velocity(p, m, t);
  };
  Points<double> x = mu.points;
  for (long k = 0; k < steps; ++k) {
    std::vector<double> cuts{k * dt};
    for (const auto& layer : p.layers)
      if (layer.until > k * dt && layer.until < (k + 1) * dt) cuts.push_back(layer.until);
    cuts.push_back((k + 1) * dt);
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
      const double h = cuts[c + 1] - cuts[c], t = 0.5 * (cuts[c] + cuts[c + 1]);
      const Points<double> k1 = f(t, x), k2 = f(t, x + h / 2 * k1), k3 = f(t, x + h / 2 * k2), k4 = f(t, x + h * k3);
      x += h / 6 * (k1 + 2 * k2 + 2 * k3 + k4);
    }
    if (p.normalize == Normalize::sphere) x.rowwise().normalize();
  }
  return x;
}

// Linear attention's field is cubic, |Gamma(x_i)| <= c |x_i| max_j |x_j|^2 with c = scale max over
// layers of sum_h |W_h V_h| |Q_h| |K_h| (weights sum to 1; Frobenius norms bound the operator
// norms), so M = max |x_i| obeys M' <= c M^3 and the flow exists while t < 1 / (2 c M0^2); some
// draws blow up before T (one did at t = 0.24 of T = 0.3). The points are scaled so that
// 1 / (2 c M0^2) >= 4 T: then M(t)^2 <= (4/3) M0^2 on [0, T], the field's Lipschitz constant L <=
// 3 c M^2 <= 1 / (2 T), and e^{L T} <= e^{1/2} < 2, the growth the comparison's bound allows.
void scale_inside_linear_existence(const AttentionParams& p, Measure<double>& mu, double T) {
  double c = 0.0;
  for (const auto& layer : p.layers) {
    double layer_c = 0.0;
    for (const auto& h : layer.heads) layer_c += (h.W * h.V).norm() * h.Q.norm() * h.K.norm();
    c = std::max(c, p.scale * layer_c);
  }
  const double M0 = mu.points.rowwise().norm().maxCoeff(), limit = 1.0 / std::sqrt(8.0 * c * T);
  if (M0 > limit) mu.points *= limit / M0;
}

TEST(Integrators, Rk4MatchesReferenceIntegration) {
  std::mt19937_64 rng(fresh_seed());
  for (std::string kind : {"softmax", "l2", "sigmoid", "linear", "sinkhorn"}) {
    for (bool layers : {false, true}) {
      const AttentionParams p = random_flow_params(rng, kind, 3, layers);
      Measure<double> mu = random_measure(rng, 40, 3, true);
      RunSpec run;
      run.T = 0.3;
      run.dt = 0.02;
      if (kind == "linear") scale_inside_linear_existence(p, mu, run.T);
      const auto r = simulate(p, run, mu);
      EXPECT_EQ(r.status, "finished");
      EXPECT_EQ(r.steps, 15);
      // 60 velocity evaluations, each accurate to ~ n u relative (see test_attention.cpp):
      // 1e-12 leaves a factor ~ 100 for growth of the perturbation along the flow. Sinkhorn's
      // two solvers each stop within an l1 marginal error sinkhorn_tol, so each row of weights
      // differs by up to 2 tol / a_min relative (test_attention.cpp), the velocity by that times
      // |W V|_inf max|x|, and the positions at T by T times it, times e^{L T} <= 2 for the growth
      // (measured 1.1e-12 in 1 of 120 runs, above the rounding term alone).
      double bound = 1e-12;
      if (kind == "sinkhorn") {
        double c_norm = 0.0;
        for (const auto& layer : p.layers)
          c_norm = std::max(c_norm, (layer.heads[0].W * layer.heads[0].V).cwiseAbs().rowwise().sum().maxCoeff());
        bound += 2.0 * run.T * 2.0 * p.sinkhorn_tol / attention_weights(mu, p.sink).minCoeff() * c_norm;
      }
      EXPECT_LE(testing::relative_error(r.positions, reference_rk4(p, mu, run.T, run.dt)), bound) << kind << layers;
    }
  }
}

TEST(Integrators, EulerStepIsResidualLayer) {
  std::mt19937_64 rng(fresh_seed());
  const AttentionParams p = random_flow_params(rng, "softmax", 4);
  const Measure<double> mu = random_measure(rng, 60, 4, true);
  RunSpec run;
  run.T = 0.1;
  run.dt = 0.1;
  run.integrator = Integrator::euler;
  const auto r = simulate(p, run, mu);
  const Points<double> want = mu.points + 0.1 * reference_velocity(p, mu, 0.0);
  EXPECT_LE(testing::relative_error(r.positions, want), 1e-14);
}

TEST(Integrators, Dopri5ConvergesToTheFlow) {
  // dopri5 at tol 1e-12 and rk4 at dt = 2^-10 (global error ~ dt^4 ~ 1e-12) agree to ~1e-9.
  // With layers, dopri5 stops at the boundary and rk4's steps end on it.
  std::mt19937_64 rng(fresh_seed());
  for (bool layers : {false, true}) {
    const AttentionParams p = random_flow_params(rng, "softmax", 2, layers);
    const Measure<double> mu = random_measure(rng, 30, 2, true);
    RunSpec fine;
    fine.T = 0.5;
    fine.dt = 1.0 / 1024;
    RunSpec adaptive = fine;
    adaptive.integrator = Integrator::dopri5;
    adaptive.dt = 0.1;
    adaptive.tol = 1e-12;
    const auto a = simulate(p, adaptive, mu);
    const auto b = simulate(p, fine, mu);
    EXPECT_EQ(a.t_final, 0.5);
    EXPECT_LT(a.steps, 500);
    EXPECT_LE(testing::relative_error(a.positions, b.positions), 1e-9) << layers;
  }
}

TEST(Integrators, Float32FollowsFloat64) {
  std::mt19937_64 rng(fresh_seed());
  const AttentionParams p = random_flow_params(rng, "softmax", 3);
  const Measure<double> mu = random_measure(rng, 100, 3, true);
  RunSpec run;
  run.T = 0.5;
  run.dt = 0.05;
  const auto r64 = simulate(p, run, mu);
  const Measure<float> mu32{mu.points.cast<float>(), mu.weights.cast<float>(), {}};
  const auto r32 = simulate(p, run, mu32);
  // Each of 40 evaluations adds ~ (k + d) u32 relative error; 1e-4 bounds their sum with margin.
  EXPECT_LE(testing::relative_error(r32.positions, r64.positions), 1e-4);
}

TEST(Integrators, BlowUpStopsTheRun) {
  // Linear attention with Q = K = I: dx/dt = (S + m m^T) x / sqrt(d), quadratic growth, so the
  // norms blow up in finite time; the run stops with status "blowup" before T.
  std::mt19937_64 rng(fresh_seed());
  AttentionSpec s;
  s.kind = "linear";
  const AttentionParams p = make_attention(s, 2);
  const Measure<double> mu = random_measure(rng, 50, 2, false);
  for (Integrator integ : {Integrator::euler, Integrator::rk4, Integrator::dopri5}) {
    RunSpec run;
    run.T = 100.0;
    run.dt = 0.01;
    run.blowup = 1e6;
    run.integrator = integ;
    const auto r = simulate(p, run, mu);
    EXPECT_EQ(r.status, "blowup") << to_string(integ);
    EXPECT_LT(r.t_final, 100.0);
    // Past the threshold, or (rk4: its stages compound the cubic growth within one step) the step
    // overflowed with the singularity inside it: rolled back to its finite start, said in `reason`.
    if (r.reason.empty())
      EXPECT_GT(r.diagnostics.back().max_norm, 1e6) << to_string(integ);
    else
      EXPECT_NE(r.reason.find("singularity within the step"), std::string::npos) << r.reason;
    EXPECT_TRUE(r.positions.allFinite()) << to_string(integ);
  }
}

TEST(Integrators, SphereKeepsUnitNorms) {
  std::mt19937_64 rng(fresh_seed());
  for (Integrator integ : {Integrator::euler, Integrator::rk4, Integrator::dopri5}) {
    AttentionSpec s;
    s.normalize = "sphere";
    const AttentionParams p = make_attention(s, 3);
    Measure<double> mu = make_measure<double>(sample_sphere(64, 3, rng()));
    RunSpec run;
    run.T = 2.0;
    run.dt = 0.1;
    run.save_every = 1;
    run.integrator = integ;
    const auto r = simulate(p, run, mu);
    for (const auto& frame : r.frames)
      EXPECT_LE((frame.rowwise().norm().array() - 1.0).abs().maxCoeff(), 4e-16 * 4) << to_string(integ);
  }
}

TEST(Integrators, FramesAndTimes) {
  std::mt19937_64 rng(fresh_seed());
  const AttentionParams p = random_flow_params(rng, "l2", 2);
  const Measure<double> mu = random_measure(rng, 20, 2, false);
  RunSpec run;
  run.T = 1.0;
  run.dt = 0.1;
  run.save_every = 3;
  const auto r = simulate(p, run, mu);
  // Frames at steps 0, 3, 6, 9 and the final step 10.
  ASSERT_EQ(r.times.size(), 5u);
  EXPECT_DOUBLE_EQ(r.times[1], 0.3);
  EXPECT_DOUBLE_EQ(r.times.back(), 1.0);
  EXPECT_EQ(r.diagnostics.size(), 5u);
  EXPECT_EQ(r.frames.front(), mu.points);
}

// Moment ODE of softmax attention (docs/design.md section 1), single head, C = W V, A = scale K^T Q:
// dm/dt = C (m + S A m), dS/dt = M S + S M^T with M = C S A; integrated by RK4 with a small step.
void softmax_moments(const AttentionParams& p, Eigen::VectorXd& m, Eigen::MatrixXd& S, double T) {
  const auto& B = p.layers.back().heads[0];
  const Eigen::MatrixXd A = p.scale * B.K.transpose() * B.Q, C = B.W * B.V;
  auto rhs = [&](const Eigen::VectorXd& mm, const Eigen::MatrixXd& SS, Eigen::VectorXd& dm, Eigen::MatrixXd& dS) {
    const Eigen::MatrixXd M = C * SS * A;
    dm = C * (mm + SS * A * mm);
    dS = M * SS + SS * M.transpose();
  };
  const int steps = 2000;
  const double h = T / steps;
  for (int k = 0; k < steps; ++k) {
    Eigen::VectorXd d1, d2, d3, d4;
    Eigen::MatrixXd e1, e2, e3, e4;
    rhs(m, S, d1, e1);
    rhs(m + h / 2 * d1, S + h / 2 * e1, d2, e2);
    rhs(m + h / 2 * d2, S + h / 2 * e2, d3, e3);
    rhs(m + h * d3, S + h * e3, d4, e4);
    m += h / 6 * (d1 + 2 * d2 + 2 * d3 + d4);
    S += h / 6 * (e1 + 2 * e2 + 2 * e3 + e4);
  }
}

TEST(GaussianCheck, SoftmaxParticlesFollowTheMomentOde) {
  // n = 20 000 particles from N(m0, S0). Both sides start from the sample's own moments, so what
  // remains is the mean-field error of the flow, O(n^{-1/2}): the attention average over n
  // samples has relative standard error ~ sqrt(d / n) ~ 0.01 here. We allow 6 standard errors of
  // the covariance scale, 6 sqrt(2 / n) |S_T| (the standard error of a sample covariance).
  std::mt19937_64 rng(fresh_seed());
  AttentionSpec s;
  s.Q = Eigen::MatrixXd{{0.8, 0.2}, {-0.1, 0.5}};
  s.K = Eigen::MatrixXd{{0.3, -0.4}, {0.6, 0.2}};
  s.V = Eigen::MatrixXd{{0.7, 0.1}, {0.0, 0.9}};
  const AttentionParams p = make_attention(s, 2);
  const long n = 20000;
  const Eigen::Vector2d m0(0.3, -0.2);
  const Eigen::Matrix2d S0{{0.6, 0.15}, {0.15, 0.4}};
  const Measure<double> mu = make_measure<double>(sample_gaussian(n, m0, S0, rng()));
  RunSpec run;
  run.T = 0.6;
  run.dt = 0.15;  // RK4 error ~ dt^4 |d^5 x| ~ 1e-4, below the Monte Carlo error
  const auto r = simulate(p, run, mu);
  Eigen::VectorXd m = weighted_mean(mu);
  Eigen::MatrixXd S = weighted_covariance(mu);
  softmax_moments(p, m, S, run.T);
  const Measure<double> out{r.positions, mu.weights, {}};
  const double tol = 6.0 * std::sqrt(2.0 / double(n)) * S.norm();
  EXPECT_LE((weighted_covariance(out) - S).norm(), tol);
  EXPECT_LE((weighted_mean(out) - m).norm(), 6.0 * std::sqrt(S.trace() / double(n)) + tol);
}

TEST(Diagnostics, ClusterCount) {
  std::mt19937_64 rng(fresh_seed());
  for (int d : {1, 2, 3, 7}) {
    // Three tight groups far apart, one lone point, and a chain of points 0.8 tol apart that must
    // count as one cluster though its ends are far apart.
    const double tol = 0.01;
    std::vector<Eigen::VectorXd> pts;
    std::normal_distribution<double> tiny(0.0, 1e-4);
    for (int g = 0; g < 3; ++g)
      for (int k = 0; k < 40; ++k) {
        Eigen::VectorXd x = Eigen::VectorXd::Constant(d, 10.0 * g);
        for (int c = 0; c < d; ++c) x[c] += tiny(rng);
        pts.push_back(x);
      }
    pts.push_back(Eigen::VectorXd::Constant(d, -7.0));
    for (int k = 0; k < 50; ++k) {
      Eigen::VectorXd x = Eigen::VectorXd::Constant(d, 5.0);
      x[0] += 0.8 * tol * k;
      pts.push_back(x);
    }
    Points<double> x(static_cast<Eigen::Index>(pts.size()), d);
    for (std::size_t i = 0; i < pts.size(); ++i) x.row(static_cast<Eigen::Index>(i)) = pts[i].transpose();
    EXPECT_EQ(count_clusters(x, tol), 5) << "d = " << d;
    EXPECT_EQ(count_clusters(x, 0.5 * tol), 3 + 1 + 50) << "d = " << d;
  }
}

// k groups of tight Gaussian blobs (spread 1e-5 of the centres' spread L) at centres drawn N(0, L^2 I)
// and kept at least L / 5 apart, n_g tokens each, uniform weights.
struct Blobs {
  Points<double> x;
  Vec<double> weights;
};
Blobs tight_blobs(std::mt19937_64& rng, int k, int d) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> size(20, 60);
  std::vector<Eigen::VectorXd> centres;
  while (static_cast<int>(centres.size()) < k) {
    Eigen::VectorXd c(d);
    for (int q = 0; q < d; ++q) c[q] = normal(rng);
    bool apart = true;
    for (const auto& o : centres) apart = apart && (o - c).norm() >= 0.2;
    if (apart) centres.push_back(c);
  }
  std::vector<Eigen::VectorXd> pts;
  for (const auto& c : centres)
    for (int i = size(rng); i > 0; --i) {
      Eigen::VectorXd p = c;
      for (int q = 0; q < d; ++q) p[q] += 1e-5 * normal(rng);
      pts.push_back(p);
    }
  Blobs b{Points<double>(static_cast<Eigen::Index>(pts.size()), d), Vec<double>()};
  for (std::size_t i = 0; i < pts.size(); ++i) b.x.row(static_cast<Eigen::Index>(i)) = pts[i].transpose();
  b.weights = Vec<double>::Constant(b.x.rows(), 1.0 / static_cast<double>(b.x.rows()));
  return b;
}

// The default count (run.cluster_scale = spread) is the number of tight groups at every scale of
// the cloud, from 1e-250 to 1e250 (the absolute rule at tol 1e-2 counts every token apart below
// scale ~1e-2 / (1e-5 n) and one cluster above ~1e2: the scales of the report, 512 clusters at
// scale 150). Blobs of spread 1 placed 600 apart (the report's 797 clusters) are two.
TEST(Diagnostics, ClusterCountIsTheSameAtEveryScale) {
  std::mt19937_64 rng(fresh_seed());
  RunSpec run;
  for (int d : {1, 2, 3, 5}) {
    const int k = std::uniform_int_distribution<int>(2, 6)(rng);
    const Blobs b = tight_blobs(rng, k, d);
    for (double scale : {1e-250, 1e-6, 1e-2, 1.0, 150.0, 1e6, 1e250}) {
      const Points<double> x = b.x * scale;
      EXPECT_EQ(count_frame_clusters(x, b.weights, run, 0.0), k) << "d = " << d << ", scale " << scale;
      // The same cloud reached from a start 10 times smaller (an expanding run): the same count.
      EXPECT_EQ(count_frame_clusters(x, b.weights, run, 0.1 * rms_radius(x, b.weights)), k) << "scale " << scale;
    }
  }
  std::normal_distribution<double> normal(0.0, 1.0);
  Points<double> two(800, 2);
  for (Eigen::Index i = 0; i < two.rows(); ++i) two.row(i) << normal(rng) + (i < 400 ? 0.0 : 600.0), normal(rng);
  const Vec<double> uniform = Vec<double>::Constant(800, 1.0 / 800.0);
  EXPECT_EQ(count_frame_clusters(two, uniform, run, 0.0), 2);
  RunSpec absolute = run;
  absolute.cluster_scale = ClusterScale::absolute;
  EXPECT_GT(count_frame_clusters(two, uniform, absolute, 0.0), 100);  // the old rule: most tokens alone
}

// A run that collapses to one tight group counts 1 against its initial radius, at every scale;
// a cloud of one repeated point is one cluster; the RMS radius is homogeneous up to double's ends.
TEST(Diagnostics, CollapsedCloudsAreOneClusterAndTheRadiusIsHomogeneous) {
  std::mt19937_64 rng(fresh_seed());
  RunSpec run;
  for (int d : {1, 3}) {
    const Blobs b = tight_blobs(rng, 1, d);
    const double spread = rms_radius(b.x, b.weights);
    // Direct: sqrt(sum_i w_i |x_i - mean|^2).
    const Eigen::RowVectorXd mean = b.weights.transpose() * b.x;
    const double direct = std::sqrt((b.weights.array() * (b.x.rowwise() - mean).rowwise().squaredNorm().array()).sum());
    // Each deviation x_i - mean cancels: its rounding is a few u max|x| per coordinate (the mean's
    // sum of n terms adds n u max|x|), 1e5 times R here; the sums of squares add (n + d) u R.
    const double largest = b.x.cwiseAbs().maxCoeff(), n = static_cast<double>(b.x.rows());
    const auto bound = [&](double s) {
      return (4.0 * (n + 4.0) * std::sqrt(static_cast<double>(d)) * largest + 4.0 * (n + d) * spread) * testing::kEps * s;
    };
    EXPECT_NEAR(spread, direct, 2.0 * bound(1.0));
    for (double scale : {0x1p-1000, 1e-6, 1.0, 1e6, 0x1p+1000}) {
      const Points<double> x = b.x * scale;
      // Scaling by a power of two is exact; the others add one rounding per coordinate (u max|x|).
      EXPECT_NEAR(rms_radius(x, b.weights), spread * scale, 2.0 * bound(scale));
      // Its initial cloud had radius 1000 times larger: one cluster.
      EXPECT_EQ(count_frame_clusters(x, b.weights, run, 1e3 * spread * scale), 1) << "scale " << scale;
    }
    // One repeated point: its radius is the mean's rounding (weights 1/n are not exact), and the
    // points, at distance 0, are one cluster.
    const Points<double> same = Points<double>::Constant(b.x.rows(), d, 3.5);
    EXPECT_LE(rms_radius(same, b.weights), 4.0 * (n + 4.0) * std::sqrt(static_cast<double>(d)) * 3.5 * testing::kEps);
    EXPECT_EQ(count_frame_clusters(same, b.weights, run, 0.0), 1);
  }
}

TEST(Diagnostics, RanksOfAFrame) {
  // Points on a line in R^3: covariance rank 1, effective rank 1.
  Points<double> x(30, 3);
  for (int i = 0; i < 30; ++i) x.row(i) << i, 2.0 * i, -i;
  const Vec<double> a = Vec<double>::Constant(30, 1.0 / 30);
  RunSpec run;
  const auto f = measure_frame<double>(0.0, x, a, run, nullptr);
  EXPECT_EQ(f.rank, 1);
  EXPECT_NEAR(f.effective_rank, 1.0, 1e-12);
  EXPECT_NEAR(f.max_norm, std::sqrt(6.0) * 29, 1e-12);
  EXPECT_TRUE(std::isnan(f.energy));
}

}  // namespace
}  // namespace tokenflow
