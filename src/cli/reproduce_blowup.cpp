// reproduce blowup: finite-time blow-up of softmax attention against global existence for l2
// attention, from the same Gaussian start N(0, S0) with Q = K = I (d = 2).
//
// Softmax, V = W = I: dS/dt = S (A + A^T) S with A = K^T Q / sqrt(2) = I / sqrt(2), so
// S(t) = (S0^{-1} - sqrt(2) t I)^{-1} blows up at t* = 1 / (sqrt(2) lambda_max(S0)) (docs/design.md
// section 1). l2 with the same Q, K: E[y|x] = (I + 2 g S)^{-1} (m + 2 g S x) has slope
// M = (I + 2 g S)^{-1} 2 g S <= I, so |S| grows at most like e^{2t}: no blow-up.
//   softmax/, l2/    `tokenflow gaussian` directories (T = 2; softmax stops at its blow-up)
//   particles/softmax, particles/l2   `tokenflow simulate` directories with n Gaussian tokens
//                    (4096; 2048 in the demo's tour; 128 with --quick) beside the ODE: softmax to
//                    0.8 t*, l2 to T = 1.2; their covariance eigenvalues are in diagnostics.csv.
// The summary compares the ODE's blow-up time with t* and the particles' covariance eigenvalues
// with the ODE's (softmax: the closed form; l2: the ODE's frames, which fall on the same times).
#include <fmt/format.h>

#include <cmath>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_gaussian.hpp"
#include "run_simulation.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kStart = "[init]\nmean = [0.0, 0.0]\ncov = [[1.0, 0.3], [0.3, 0.6]]\n";
constexpr const char* kIdentity = "Q = [[1.0, 0.0], [0.0, 1.0]]\nK = [[1.0, 0.0], [0.0, 1.0]]\n";

Eigen::Vector2d eigenvalues(const Eigen::Matrix2d& S) {
  return linalg::symmetric_eigenvalues(S);
}

}  // namespace

nlohmann::json reproduce_blowup(const ReproductionContext& ctx) {
  const double T = 2.0;
  const auto softmax =
      run_gaussian_config(fmt::format("# reproduce blowup: softmax, Q = K = I\n{}[attention]\nkind "
                                      "= \"softmax\"\n{}[run]\nT = {}\n",
                                      kStart, kIdentity, T),
                          ctx.dir / "softmax");
  const auto l2 = run_gaussian_config(
      fmt::format(
          "# reproduce blowup: l2, Q = K = I\n{}[attention]\nkind = \"l2\"\n{}[run]\nT = {}\n",
          kStart, kIdentity, T),
      ctx.dir / "l2");
  const auto softmax_summary = nlohmann::json::parse(softmax.summary);
  const double tstar = softmax_summary.at("predicted_blowup_time").get<double>();

  // Particles beside the ODE: n Gaussian tokens, rk4, 60 steps, a frame every 5.
  const long n = ctx.quick ? 128 : ctx.tour ? 2048 : 4096;
  const double T_softmax = 0.8 * tstar, T_l2 = 1.2;
  nlohmann::json particles = nlohmann::json::object();
  for (const auto& [kind, T_particles] :
       {std::pair<std::string, double>{"softmax", T_softmax}, {"l2", T_l2}}) {
    const std::string toml = fmt::format(
        "# reproduce blowup: {} particles beside the moment ODE\nseed = 1\n{}n = "
        "{}\n[attention]\nkind = \"{}\"\n{}"
        "[run]\nT = {:.17g}\ndt = {:.17g}\nintegrator = \"rk4\"\nsave_every = 5\n",
        kind, kStart, n, kind, kIdentity, T_particles, T_particles / 60);
    const auto dir = ctx.dir / "particles" / kind;
    std::filesystem::create_directories(dir);
    write_text(dir / "config.toml", toml);
    const Config source = Config::from_text(toml, (dir / "config.toml").string());
    const std::string summary_text =
        run_simulation(prepare_simulation(source), dir, ctx.label + " " + kind + " particles");
    const auto s = nlohmann::json::parse(summary_text);
    particles[kind] = {{"n", n},
                       {"T", T_particles},
                       {"status", s["status"]},
                       {"final_cov_eigenvalues", s["final"]["cov_eigenvalues"]}};
  }

  // Particles against the ODE at the particles' final time.
  const Eigen::Matrix2d S0 = (Eigen::Matrix2d() << 1.0, 0.3, 0.3, 0.6).finished();
  const Eigen::MatrixXd A = Eigen::MatrixXd::Identity(2, 2) / std::sqrt(2.0);
  const Eigen::Vector2d closed = eigenvalues(closed_form_covariance(A, S0, T_softmax));
  const auto& fs = particles["softmax"]["final_cov_eigenvalues"];
  const double gap_softmax = std::max(std::abs(fs[0].get<double>() - closed[0]) / closed[0],
                                      std::abs(fs[1].get<double>() - closed[1]) / closed[1]);
  std::size_t at = 0;  // the ODE frame at T_l2 (dopri5 lands on the grid t_j = j T / 100)
  for (std::size_t f = 0; f < l2.result.times.size(); ++f)
    if (std::abs(l2.result.times[f] - T_l2) < std::abs(l2.result.times[at] - T_l2)) at = f;
  const Eigen::Vector2d ode_l2 = eigenvalues(Eigen::Matrix2d(l2.result.covs[at]));
  const auto& fl = particles["l2"]["final_cov_eigenvalues"];
  const double gap_l2 = std::max(std::abs(fl[0].get<double>() - ode_l2[0]) / ode_l2[0],
                                 std::abs(fl[1].get<double>() - ode_l2[1]) / ode_l2[1]);

  return {{"predicted_blowup_time", tstar},
          {"softmax_status", softmax.result.status},
          {"softmax_blowup_time", softmax.result.blowup_time
                                      ? nlohmann::json(*softmax.result.blowup_time)
                                      : nlohmann::json(nullptr)},
          {"blowup_time_relative_error",
           softmax.result.blowup_time
               ? nlohmann::json(std::abs(*softmax.result.blowup_time - tstar) / tstar)
               : nlohmann::json(nullptr)},
          {"l2_status", l2.result.status},
          {"l2_final_trace", l2.result.final.cov.trace()},
          {"l2_t_final", l2.result.t_final},
          {"particles", particles},
          {"particles_softmax_relative_gap_at_T", gap_softmax},
          {"particles_l2_relative_gap_at_T", gap_l2},
          {"particles_l2_ode_time", l2.result.times[at]}};
}

}  // namespace tokenflow::cli
