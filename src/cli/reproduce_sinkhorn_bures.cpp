// reproduce sinkhorn-bures: the Gaussian closure of Sinkhorn attention is the Bures-Wasserstein
// gradient flow of the entropic self-transport cost.
//
// Sinkhorn attention with A = scale K^T Q symmetric and C = W V = c A (c > 0) moves tokens by
// Gamma(x) = C ybar(x), ybar(x) = int y dpi(x, y) / dmu(x), pi the entropic plan of (mu, mu) for the
// cost k(x, y) = -y^T A x at regularization epsilon. With f the (symmetric) Schrodinger potential,
// the first variation of mu -> OT_eps(mu, mu) is 2 f and grad f(x) = int grad_x k dpi / dmu = -A ybar(x),
// so Gamma = -grad (delta F / delta mu) for
//   F(mu) = c / 2 OT_eps(mu, mu):                                                        Eq. (1)
// the flow is the Wasserstein gradient flow of F. On Gaussians N(m, S) the optimal plan is Gaussian
// with cross-covariance S^{1/2} R S^{1/2}; minimizing -tr(B R) - eps/2 log det(I - R^2) with
// B = S^{1/2} A S^{1/2} gives R = r(B), r(b) = 2 b / (eps + sqrt(eps^2 + 4 b^2)), and
//   F(m, S) = c / 2 [ -m^T A m + sum_k phi(b_k) ],                                         Eq. (2)
//   phi(b) = -b r(b) - eps / 2 log(1 - r(b)^2),  1 - r^2 = 2 eps / (eps + sqrt(eps^2 + 4 b^2)),
// b_k the eigenvalues of B. The Bures-Wasserstein gradient flow of F(m, S) is
//   dm/dt = -grad_m F,   dS/dt = -2 (G S + S G),  G = grad_S F (Frobenius, symmetric),    Eq. (3)
// (tangent vectors X with dS = X S + S X, metric tr(X S X), so the gradient is X = 2 G; the mean
// moves in the Euclidean metric). Here grad_m F = -c A m and G = -c/2 r(A S) A, so Eq. (3) is
// dm/dt = c A m, dS/dt = M S + S M^T with M = c r(A S) A = c A S^{1/2} r(B) S^{-1/2}, which is the
// closure of docs/design.md section 1 (M_h = (A^T)^{-1} S^{-1} C_S with C_S = S^{1/2} B r(B) S^{-1/2}).
//
// The check is independent of that algebra: grad_m F and G come from finite differences of Eq. (2)
// (central differences at steps h, h/2, h/4 combined by Richardson extrapolation; the error of the
// value used, R(h/2, h/4), is estimated by |R(h, h/2) - R(h/2, h/4)| plus rounding), and Eq. (3)
// built from them is compared with MomentField::rates (the production closure) at random
// (A, c, m, S) across epsilon. Then one trajectory of the closure (`tokenflow gaussian`, dopri5)
// with F along it: a descent curve. Writes cases.csv (epsilon, d, c, gap, allowance), descent/
// (a `tokenflow gaussian` directory: config.toml, times.npy, means.npy, covs.npy) and
// descent/functional.npy.
#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_gaussian.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/wasserstein.hpp"

namespace tokenflow::cli {

namespace {

constexpr double kUnitRoundoff = std::numeric_limits<double>::epsilon() / 2;

struct SinkhornProblem {
  Eigen::MatrixXd A;  // symmetric, invertible
  double c = 1.0, epsilon = 1.0;
};

// r(b) and log(1 - r(b)^2) in the forms without cancellation.
double entropic_r(double b, double eps) { return 2.0 * b / (eps + std::sqrt(eps * eps + 4.0 * b * b)); }
double log_one_minus_r2(double b, double eps) { return std::log(2.0 * eps / (eps + std::sqrt(eps * eps + 4.0 * b * b))); }

Eigen::VectorXd bilinear_eigenvalues(const SinkhornProblem& p, const Eigen::MatrixXd& S) {
  const Eigen::MatrixXd r = psd_sqrt(S);
  const Eigen::MatrixXd B = r * p.A * r;
  return linalg::symmetric_eigenvalues(0.5 * (B + B.transpose()));
}

// Eq. (2).
double entropic_functional(const SinkhornProblem& p, const Eigen::VectorXd& m, const Eigen::MatrixXd& S) {
  double sum = -m.dot(p.A * m);
  for (double b : bilinear_eigenvalues(p, S)) sum += -b * entropic_r(b, p.epsilon) - 0.5 * p.epsilon * log_one_minus_r2(b, p.epsilon);
  return 0.5 * p.c * sum;
}

// Rounding of one evaluation of Eq. (2): 64 d u times the size of its terms (square root and
// eigenvalues of a d x d symmetric matrix, backward stable; each term's sensitivity to b is |r| <= 1).
double functional_rounding(const SinkhornProblem& p, const Eigen::VectorXd& m, const Eigen::MatrixXd& S) {
  double size = std::abs(m.dot(p.A * m));
  for (double b : bilinear_eigenvalues(p, S)) size += std::abs(b) + 0.5 * p.epsilon * std::abs(log_one_minus_r2(b, p.epsilon));
  return 64.0 * double(m.size()) * kUnitRoundoff * 0.5 * std::abs(p.c) * size;
}

struct Derivative {
  double value = 0.0, error = 0.0;
};

// d/dh g(h) at 0 by Richardson-extrapolated central differences (see the header comment).
template <class G>
Derivative richardson(const G& g, double h, double rounding) {
  const auto central = [&](double step) { return (g(step) - g(-step)) / (2.0 * step); };
  const double d1 = central(h), d2 = central(h / 2), d4 = central(h / 4);
  const double r12 = (4.0 * d2 - d1) / 3.0, r24 = (4.0 * d4 - d2) / 3.0;
  // Rounding of r24: (4 * 2 / (h/4) ... ) -> each central difference at step k has error <= rounding / k.
  return {r24, std::abs(r12 - r24) + (4.0 * 4.0 / h + 2.0 / h) / 3.0 * rounding};
}

struct GradientCheck {
  double gap = 0.0, allowance = 0.0;
};

// Eq. (3) from finite differences of Eq. (2), against the closure's rates.
GradientCheck check_case(const SinkhornProblem& p, const Eigen::VectorXd& m, const Eigen::MatrixXd& S) {
  const Eigen::Index d = m.size();
  AttentionSpec spec;
  spec.kind = "sinkhorn";
  spec.Q = Eigen::MatrixXd::Identity(d, d);
  spec.K = p.A;
  spec.V = p.c * p.A;
  spec.scale = 1.0;
  spec.epsilon = p.epsilon;
  const MomentField field(make_attention(spec, static_cast<int>(d)));
  Eigen::VectorXd dm;
  Eigen::MatrixXd dS;
  field.rates(0.0, m, S, dm, dS);

  const double rounding = functional_rounding(p, m, S);
  const double lambda_min = linalg::symmetric_eigenvalues(S)(0);
  Eigen::VectorXd grad_m(d), err_m(d);
  for (Eigen::Index k = 0; k < d; ++k) {
    const Derivative D = richardson(
        [&](double h) { return entropic_functional(p, m + h * Eigen::VectorXd::Unit(d, k), S); }, 0.02 * (1.0 + m.norm()),
        rounding);
    grad_m[k] = D.value;
    err_m[k] = D.error;
  }
  Eigen::MatrixXd G(d, d), err_G(d, d);
  for (Eigen::Index k = 0; k < d; ++k)
    for (Eigen::Index l = k; l < d; ++l) {
      Eigen::MatrixXd E = Eigen::MatrixXd::Zero(d, d);
      E(k, l) = E(l, k) = 1.0;  // tr(G E) = G_kk (k = l) or 2 G_kl
      const Derivative D = richardson([&](double h) { return entropic_functional(p, m, S + h * E); }, 0.05 * lambda_min, rounding);
      const double w = k == l ? 1.0 : 0.5;
      G(k, l) = G(l, k) = w * D.value;
      err_G(k, l) = err_G(l, k) = w * D.error;
    }
  const Eigen::VectorXd dm_pred = -grad_m;                // Eq. (3)
  const Eigen::MatrixXd dS_pred = -2.0 * (G * S + S * G);  // Eq. (3)
  const double size = std::sqrt(dm.squaredNorm() + dS.squaredNorm());
  GradientCheck r;
  r.gap = std::sqrt((dm - dm_pred).squaredNorm() + (dS - dS_pred).squaredNorm()) / size;
  // |dS_pred error|_F <= 2 (|err_G S|_F + |S err_G|_F) <= 4 |S|_2 |err_G|_F; the closure's own
  // rounding (square roots and inverses of d x d matrices) is 64 d u cond(S) relative.
  const double s_norm = linalg::symmetric_eigenvalues(S)(d - 1);
  r.allowance = (err_m.norm() + 4.0 * s_norm * err_G.norm()) / size + 64.0 * double(d) * kUnitRoundoff * s_norm / lambda_min;
  return r;
}

Eigen::MatrixXd random_symmetric_invertible(std::mt19937_64& rng, int d) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> magnitude(0.3, 1.2);
  Eigen::MatrixXd G(d, d);
  for (Eigen::Index k = 0; k < G.size(); ++k) G.data()[k] = normal(rng);
  const Eigen::MatrixXd U = linalg::householder_q(G);
  Eigen::VectorXd lambda(d);
  for (int k = 0; k < d; ++k) lambda[k] = (normal(rng) < 0 ? -1.0 : 1.0) * magnitude(rng);
  return U * lambda.asDiagonal() * U.transpose();
}

Eigen::MatrixXd random_covariance(std::mt19937_64& rng, int d) {
  std::normal_distribution<double> normal;
  Eigen::MatrixXd L(d, d);
  for (Eigen::Index k = 0; k < L.size(); ++k) L.data()[k] = 0.6 * normal(rng);
  return L * L.transpose() + 0.2 * Eigen::MatrixXd::Identity(d, d);
}

constexpr const char* kDescentConfig = R"(# reproduce sinkhorn-bures: Sinkhorn attention, A = K symmetric (Q = I), V = A (c = 1)
[init]
mean = [0.8, -0.4]
cov = [[0.6, 0.2], [0.2, 0.4]]
[attention]
kind = "sinkhorn"
epsilon = 0.5
scale = 1.0
Q = [[1.0, 0.0], [0.0, 1.0]]
K = [[-0.6, 0.2], [0.2, -0.4]]
V = [[-0.6, 0.2], [0.2, -0.4]]
[run]
T = 2.0
)";

}  // namespace

nlohmann::json reproduce_sinkhorn_bures(const ReproductionContext& ctx) {
  const std::vector<double> epsilons{0.1, 0.3, 1.0, 3.0, 10.0};
  const int per_epsilon = ctx.quick ? 4 : 20;
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> value_factor(0.5, 2.0);
  std::string table = "epsilon,d,c,gap,allowance\n";
  double max_gap = 0.0, max_gap_over_allowance = 0.0, max_allowance = 0.0;
  for (double eps : epsilons)
    for (int k = 0; k < per_epsilon; ++k) {
      const int d = 2 + k % 2;
      const SinkhornProblem p{random_symmetric_invertible(rng, d), value_factor(rng), eps};
      std::normal_distribution<double> normal;
      Eigen::VectorXd m(d);
      for (Eigen::Index i = 0; i < d; ++i) m[i] = normal(rng);
      const GradientCheck r = check_case(p, m, random_covariance(rng, d));
      table += fmt::format("{},{},{:.17g},{:.17g},{:.17g}\n", eps, d, p.c, r.gap, r.allowance);
      max_gap = std::max(max_gap, r.gap);
      max_allowance = std::max(max_allowance, r.allowance);
      max_gap_over_allowance = std::max(max_gap_over_allowance, r.gap / r.allowance);
    }
  write_text(ctx.dir / "cases.csv", table);

  // The descent curve: F(m(t), S(t)) along the closure.
  const auto run = run_gaussian_config(kDescentConfig, ctx.dir / "descent");
  const SinkhornProblem p{(Eigen::MatrixXd(2, 2) << -0.6, 0.2, 0.2, -0.4).finished(), 1.0, 0.5};
  std::vector<double> F;
  for (std::size_t f = 0; f < run.result.times.size(); ++f)
    F.push_back(entropic_functional(p, run.result.means[f], run.result.covs[f]));
  write_npy(ctx.dir / "descent" / "functional.npy", F.data(), {F.size()});
  double largest_increase = -std::numeric_limits<double>::infinity();
  for (std::size_t f = 0; f + 1 < F.size(); ++f) largest_increase = std::max(largest_increase, F[f + 1] - F[f]);
  return {{"epsilons", epsilons},
          {"cases", epsilons.size() * per_epsilon},
          {"max_relative_gap", max_gap},
          {"max_allowance", max_allowance},
          {"max_gap_over_allowance", max_gap_over_allowance},
          {"descent_status", run.result.status},
          {"descent_functional_start", F.front()},
          {"descent_functional_end", F.back()},
          {"descent_largest_increase", largest_increase}};
}

}  // namespace tokenflow::cli
