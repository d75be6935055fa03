// reproduce nonconvexity: the energy of softmax attention with V = I, A = -I is not convex along
// Wasserstein geodesics.
//
// With A = -I (Q = I, K = -I, scale = 1) the logits are s(x, y) = -<x, y> and
//   E(mu) = 1/2 int int exp(-<x, y>) dmu(x) dmu(y).                                     Eq. (1)
// Its gradient is grad_{x_i} E = a_i Z_i A ybar_i = -a_i Z_i ybar_i (tokenflow/energy.hpp), so the
// flow dx_i/dt = V ybar_i = ybar_i is -grad_{x_i} E / (a_i Z_i): the gradient *descent* of E in the
// metric g_i = a_i Z_i (C = -A, c = -1). A convex energy along geodesics would give that descent
// its usual stability; this one is not convex.
//
// Geodesics. Empirical measures: McCann's interpolation through the exact OT plan pi (network
// simplex, cost |x - y|^2), mu_s = sum_ij pi_ij delta_{(1 - s) x_i + s y_j}.               Eq. (2)
// Gaussians: the Bures-Wasserstein geodesic N(m_s, S_s), m_s = (1 - s) m0 + s m1,
//   S_s = P_s S0 P_s,  P_s = (1 - s) I + s T,  T = S0^{-1/2} (S0^{1/2} S1 S0^{1/2})^{1/2} S0^{-1/2},  Eq. (3)
// on which Eq. (1) has the closed form (X, Y independent N(m, S); finite when |S|_2 < 1)
//   E(N(m, S)) = 1/2 det(I - S^2)^{-1/2} exp(-m^T (I + S)^{-1} m).                        Eq. (4)
// (Derivation: E_Y exp(-<X, Y>) = exp(-<X, m> + X^T S X / 2); with X = m + S^{1/2} z, z ~ N(0, I),
// the Gaussian integral of exp(b^T z + z^T M z / 2), M = S^2, b = S^{1/2} (S - I) m, is
// det(I - M)^{-1/2} exp(b^T (I - M)^{-1} b / 2); the exponents add up to -m^T (I + S)^{-1} m.)
//
// Each path is sampled at s_k = k / K (K = 64: every s_k and 1 - s_k is exact in binary), and its
// second differences D_k = E(s_{k-1}) - 2 E(s_k) + E(s_{k+1}) are recorded. A convex function has
// D_k >= 0 for every k, whatever K (no discretization allowance is needed: D_k = E''(xi) / K^2 for
// some xi in [s_{k-1}, s_{k+1}]); a computed D_k < -bound_k, with bound_k >= the rounding error of
// the computed D_k, is therefore a certified witness of non-convexity (see second_difference_bound).
//
// Pairs: "through the origin" (clouds around -(1, 0.5) and (1, 0.5): along the path, a tight cloud
// at m has E ~ exp(-|m|^2) / 2, concave where |m| < 1/sqrt(2) in the direction of travel) and
// "away from the origin" (around (1.5, 0) and (2.5, 0.5), where exp(-|m|^2) is convex along the
// path). Writes s.npy, and per pair and kind <pair>_<particles|gaussian>_energy.npy, the clouds
// <pair>_x.npy, <pair>_y.npy.
#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

#include "common.hpp"
#include "reproductions.hpp"
#include "tokenflow/energy.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/wasserstein.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow::cli {

namespace {

constexpr int kGrid = 64;
constexpr double kRoundoff = std::numeric_limits<double>::epsilon() / 2;  // unit roundoff u

AttentionParams negative_identity_attention() {
  AttentionSpec s;
  s.Q = Eigen::MatrixXd::Identity(2, 2);
  s.K = -Eigen::MatrixXd::Identity(2, 2);
  s.scale = 1.0;
  return make_attention(s, 2);
}

// Eq. (2): the support of the plan, moved to time s.
Measure<double> mccann(const Points<double>& x, const Points<double>& y, const ExactOTResult& ot, double s) {
  std::vector<std::pair<Eigen::Index, Eigen::Index>> support;
  for (Eigen::Index i = 0; i < ot.plan.rows(); ++i)
    for (Eigen::Index j = 0; j < ot.plan.cols(); ++j)
      if (ot.plan(i, j) > 0.0) support.emplace_back(i, j);
  Points<double> z(static_cast<Eigen::Index>(support.size()), x.cols());
  Eigen::VectorXd w(z.rows());
  for (Eigen::Index k = 0; k < z.rows(); ++k) {
    const auto [i, j] = support[static_cast<std::size_t>(k)];
    z.row(k) = (1.0 - s) * x.row(i) + s * y.row(j);
    w[k] = ot.plan(i, j);
  }
  Measure<double> mu;
  mu.points = z;
  mu.weights = w;
  return mu;
}

// Eq. (4).
double gaussian_energy(const Eigen::VectorXd& m, const Eigen::MatrixXd& S) {
  const Eigen::Index d = m.size();
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(d, d);
  const Eigen::VectorXd lambda = linalg::symmetric_eigenvalues(S);
  double log_det = 0.0;  // log det(I - S^2)
  for (Eigen::Index k = 0; k < d; ++k) log_det += std::log1p(-lambda[k] * lambda[k]);
  return 0.5 * std::exp(-0.5 * log_det - m.dot(linalg::ldlt_solve(I + S, m)));
}

// Eq. (3) at s.
GaussianMoments bures_geodesic(const GaussianMoments& g0, const GaussianMoments& g1, const Eigen::MatrixXd& T,
                               double s) {
  const Eigen::MatrixXd P = (1.0 - s) * Eigen::MatrixXd::Identity(T.rows(), T.cols()) + s * T;
  return {(1.0 - s) * g0.mean + s * g1.mean, P * g0.cov * P};
}

// Rounding bound of one computed E on the particle path, relative to E (first order in u).
// energy_rates forms s_ij = -<x_i, x_j> by dot products of length d (error <= d u R^2, R the largest
// |x_i| on the path), s_ij - shift (u |s_ij - shift| <= 2 u R^2), exp and the two weights (4 u),
// exp(shift) and the final products (3 u), and sums n_s^2 positive terms (<= n_s^2 u relative).
// The interpolated points carry (1 - s) x + s y's rounding, <= 3 u R per coordinate, which moves
// each logit by <= 2 * 3 u R * R sqrt(d). So |computed E - E| <= delta E with
//   delta = u (n_s^2 + (d + 2 + 6 sqrt(d)) R^2 + 7).
// The second difference adds 3 u (E_{k-1} + 2 E_k + E_{k+1}) (two subtractions, one doubling), so
//   bound_k = 2 (delta + 3 u) (E_{k-1} + 2 E_k + E_{k+1}),
// the factor 2 covering the terms of order u^2 (delta < 1e-9 here).
double particle_delta(Eigen::Index support, double radius, int d) {
  return kRoundoff * (double(support) * double(support) + (d + 2 + 6 * std::sqrt(double(d))) * radius * radius + 7.0);
}

// Rounding bound of Eq. (4) at a computed point of the path, relative to E: the computed S_s differs
// from Eq. (3)'s by at most 4 d u |P|_2^2 |S0|_2 (two products of d-term sums; T is taken as exact:
// its own rounding moves the path's end, not its geodesic property, by O(u)); the eigenvalues of
// a symmetric matrix move by at most that much plus the solver's 8 d u |S|_2; log det(I - S^2)
// then moves by 2 lambda / (1 - lambda^2) per eigenvalue, the quadratic form by
// |(I + S)^{-1} m|^2 times the same perturbation, plus 4 d u of its own. So
//   delta_G = u [ (4 d |P|^2 |S0| + 8 d |S|) (d |S| / (1 - |S|^2) + |(I + S)^{-1} m|^2) + 4 d + 8 ].
double gaussian_delta(const GaussianMoments& g, const Eigen::MatrixXd& P, const Eigen::MatrixXd& S0) {
  const double d = double(g.mean.size()), s = linalg::spectral_norm(g.cov), p = linalg::spectral_norm(P);
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(g.cov.rows(), g.cov.cols());
  const double q = linalg::ldlt_solve(I + g.cov, g.mean).squaredNorm();
  const double dS = 4 * d * p * p * linalg::spectral_norm(S0) + 8 * d * s;
  return kRoundoff * (dS * (d * s / (1 - s * s) + q) + 4 * d + 8);
}

struct PathEnergy {
  std::vector<double> energy, delta;
  double min_second_difference = 0.0;  // min_k D_k
  double bound_at_min = 0.0;           // bound_k at that k
  double certified_margin = 0.0;       // max_k (-D_k - bound_k): > 0 certifies non-convexity
};

PathEnergy second_differences(std::vector<double> energy, std::vector<double> delta) {
  PathEnergy p;
  p.min_second_difference = std::numeric_limits<double>::infinity();
  p.certified_margin = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 1; k + 1 < energy.size(); ++k) {
    const double D = energy[k - 1] - 2.0 * energy[k] + energy[k + 1];
    const double sum = energy[k - 1] + 2.0 * energy[k] + energy[k + 1];
    const double bound = 2.0 * (std::max({delta[k - 1], delta[k], delta[k + 1]}) + 3.0 * kRoundoff) * sum;
    if (D < p.min_second_difference) {
      p.min_second_difference = D;
      p.bound_at_min = bound;
    }
    p.certified_margin = std::max(p.certified_margin, -D - bound);
  }
  p.energy = std::move(energy);
  p.delta = std::move(delta);
  return p;
}

PathEnergy particle_path(const Points<double>& x, const Points<double>& y, const AttentionParams& attention) {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> cost(x.rows(), y.rows());
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < y.rows(); ++j) cost(i, j) = (x.row(i) - y.row(j)).squaredNorm();
  const Eigen::VectorXd a = Eigen::VectorXd::Constant(x.rows(), 1.0 / double(x.rows()));
  const Eigen::VectorXd b = Eigen::VectorXd::Constant(y.rows(), 1.0 / double(y.rows()));
  const ExactOTResult ot = exact_ot(cost, a, b);
  std::vector<double> energy, delta;
  for (int k = 0; k <= kGrid; ++k) {
    const Measure<double> mu = mccann(x, y, ot, double(k) / kGrid);
    energy.push_back(energy_rates(attention, mu).energy);
    delta.push_back(particle_delta(mu.n(), std::max(x.rowwise().norm().maxCoeff(), y.rowwise().norm().maxCoeff()),
                                   static_cast<int>(x.cols())));
  }
  return second_differences(std::move(energy), std::move(delta));
}

PathEnergy gaussian_path(const GaussianMoments& g0, const GaussianMoments& g1) {
  const Eigen::MatrixXd r0 = psd_sqrt(g0.cov), r0inv = linalg::inverse(r0);
  const Eigen::MatrixXd T = r0inv * psd_sqrt(r0 * g1.cov * r0) * r0inv;
  std::vector<double> energy, delta;
  for (int k = 0; k <= kGrid; ++k) {
    const double s = double(k) / kGrid;
    const GaussianMoments g = bures_geodesic(g0, g1, T, s);
    energy.push_back(gaussian_energy(g.mean, g.cov));
    delta.push_back(gaussian_delta(g, (1.0 - s) * Eigen::MatrixXd::Identity(2, 2) + s * T, g0.cov));
  }
  return second_differences(std::move(energy), std::move(delta));
}

nlohmann::json path_json(const PathEnergy& p) {
  return {{"min_second_difference", p.min_second_difference},
          {"second_difference_bound", p.bound_at_min},
          {"certified_margin", p.certified_margin},
          {"energy_start", p.energy.front()},
          {"energy_end", p.energy.back()}};
}

}  // namespace

nlohmann::json reproduce_nonconvexity(const ReproductionContext& ctx) {
  const long n = ctx.quick ? 24 : 64;
  const AttentionParams attention = negative_identity_attention();
  const Eigen::Matrix2d cloud = 0.01 * Eigen::Matrix2d::Identity();
  const Eigen::Matrix2d S0 = (Eigen::Matrix2d() << 0.1, 0.02, 0.02, 0.05).finished();
  const Eigen::Matrix2d S1 = (Eigen::Matrix2d() << 0.05, -0.01, -0.01, 0.12).finished();
  struct Pair {
    const char* name;
    Eigen::Vector2d m0, m1;
  };
  const Pair pairs[2] = {{"through_origin", {-1.0, -0.5}, {1.0, 0.5}}, {"away_from_origin", {1.5, 0.0}, {2.5, 0.5}}};
  std::vector<double> grid;
  for (int k = 0; k <= kGrid; ++k) grid.push_back(double(k) / kGrid);
  write_npy(ctx.dir / "s.npy", grid.data(), {grid.size()});
  nlohmann::json numbers = {{"n", n}, {"d", 2}, {"grid", kGrid}, {"A", "-I"}, {"V", "I"}, {"cloud_cov", 0.01},
                            {"gaussian_S0", "[[0.1, 0.02], [0.02, 0.05]]"}, {"gaussian_S1", "[[0.05, -0.01], [-0.01, 0.12]]"}};
  for (int p = 0; p < 2; ++p) {
    const Pair& pair = pairs[p];
    const Points<double> x = sample_gaussian(n, pair.m0, cloud, 11 + p);
    const Points<double> y = sample_gaussian(n, pair.m1, cloud, 21 + p);
    write_points(ctx.dir / fmt::format("{}_x.npy", pair.name), x);
    write_points(ctx.dir / fmt::format("{}_y.npy", pair.name), y);
    const PathEnergy particles = particle_path(x, y, attention);
    const PathEnergy gaussian = gaussian_path({pair.m0, S0}, {pair.m1, S1});
    for (const auto& [kind, path] : {std::pair<const char*, const PathEnergy*>{"particles", &particles}, {"gaussian", &gaussian}})
      write_npy(ctx.dir / fmt::format("{}_{}_energy.npy", pair.name, kind), path->energy.data(), {path->energy.size()});
    numbers[pair.name] = {{"m0", {pair.m0[0], pair.m0[1]}}, {"m1", {pair.m1[0], pair.m1[1]}},
                          {"particles", path_json(particles)}, {"gaussian", path_json(gaussian)}};
  }
  // The headline: the witness on the particle path through the origin (certified when
  // min_second_difference < -second_difference_bound), and the convex case beside it.
  const auto& witness = numbers["through_origin"]["particles"];
  numbers["min_second_difference"] = witness["min_second_difference"];
  numbers["second_difference_bound"] = witness["second_difference_bound"];
  numbers["certified"] = witness["certified_margin"].get<double>() > 0.0;
  numbers["convex_min_second_difference"] = numbers["away_from_origin"]["particles"]["min_second_difference"];
  numbers["convex_second_difference_bound"] = numbers["away_from_origin"]["particles"]["second_difference_bound"];
  return numbers;
}

}  // namespace tokenflow::cli
