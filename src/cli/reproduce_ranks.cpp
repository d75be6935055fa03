// reproduce ranks: the rank of the limiting covariance of the Gaussian closure under softmax
// attention with K = -Q, Q random of rank d // 2, for d = 3, 4, 5 (100 draws each; 12 with
// --quick), with V = I and with V random positive semidefinite (W = I in both).
//
// With V = W = I, A = scale K^T Q = -scale Q^T Q = -B^T B / 2 is negative semidefinite of rank
// r = d // 2, and S(t) = (S0^{-1} + t B^T B)^{-1} converges to S0 - S0 B^T (B S0 B^T)^+ B S0,
// whose rank is d - r = (d + 1) // 2 (include/tokenflow/gaussian.hpp): every V = I run must end
// there. With V random PSD the slope of the field is M = V S A, the closed form is gone, and the
// histogram shows what the moment ODE does.
//
// Each draw: Q = G1 G2^T / sqrt(r) (G1, G2 d x r standard normal), S0 = H H^T / d + I / 10 (H
// d x d), V = F F^T / d (F d x d); a Random seeded 1000 d + trial. The moment ODE runs (dopri5) to
// convergence (|dS/dt| <= 1e-12 (1 + |S|), so that the vanishing eigenvalues, ~ 1/t, are far
// below rank_tol = 1e-3 of the largest) or to T = 1e9. Outputs: ranks.csv (one row per draw and
// V), d<d>/{Q,S0,V}.npy (trials x d x d) and d<d>/final_identity.npy, final_psd.npy (the last
// covariances), and example.toml (the config of d = 3, trial 0, V = I; every run is that config
// with its own matrices: `tokenflow gaussian --config` redoes it).
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "common.hpp"
#include "reproductions.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::cli {

namespace {

std::string run_config(const Eigen::MatrixXd& S0, const Eigen::MatrixXd& Q,
                       const Eigen::MatrixXd& V) {
  return fmt::format(
      "# reproduce ranks: softmax attention, K = -Q with Q of rank d // 2\n"
      "[init]\nmean = {}\ncov = {}\n[attention]\nkind = \"softmax\"\nQ = {}\nK = {}\nV = {}\n"
      "[run]\nT = 1e9\nconverge_tol = 1e-12\nrank_tol = 1e-3\n",
      toml_vector(Eigen::VectorXd::Zero(S0.rows())), toml_matrix(S0), toml_matrix(Q),
      toml_matrix(-Q), toml_matrix(V));
}

void write_stack(const std::filesystem::path& path, const std::vector<Eigen::MatrixXd>& mats) {
  std::vector<double> data;
  for (const auto& m : mats)
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) data.push_back(m(i, j));
  const auto d = static_cast<std::size_t>(mats.empty() ? 0 : mats[0].rows());
  write_npy(path, data.data(), {mats.size(), d, d});
}

}  // namespace

nlohmann::json reproduce_ranks(const ReproductionContext& ctx) {
  const int trials = ctx.quick ? 12 : 100;
  const std::vector<int> dims{3, 4, 5};
  ProgressBar bar(ctx.label);
  std::string csv = "d,trial,identity,status,rank,predicted_rank,t_final\n";
  nlohmann::json per_d = nlohmann::json::object();
  int total = 0, matching = 0;
  std::size_t done = 0;
  for (int d : dims) {
    const int r = d / 2;
    std::vector<Eigen::MatrixXd> Qs, S0s, Vs, final_identity, final_psd;
    std::map<std::string, int> statuses_psd;
    std::map<int, int> histogram_identity, histogram_psd;
    int match = 0, match_closed_form = 0;
    for (int trial = 0; trial < trials; ++trial) {
      Random rng(static_cast<std::uint64_t>(1000 * d + trial));
      const Eigen::MatrixXd Q =
          normal_matrix(rng, d, r) * normal_matrix(rng, d, r).transpose() / std::sqrt(r);
      const Eigen::MatrixXd H = normal_matrix(rng, d, d);
      const Eigen::MatrixXd S0 = H * H.transpose() / d + 0.1 * Eigen::MatrixXd::Identity(d, d);
      const Eigen::MatrixXd F = normal_matrix(rng, d, d);
      const Eigen::MatrixXd V = F * F.transpose() / d;
      Qs.push_back(Q);
      S0s.push_back(S0);
      Vs.push_back(V);
      for (const bool identity : {true, false}) {
        const std::string toml = run_config(S0, Q, identity ? Eigen::MatrixXd::Identity(d, d) : V);
        if (d == 3 && trial == 0 && identity) write_text(ctx.dir / "example.toml", toml);
        const Config source =
            Config::from_text(toml, fmt::format("ranks d = {} trial {}", d, trial));
        const GaussianSetup setup = read_gaussian_setup(source);
        const GaussianResult result =
            solve_moments(setup.attention, setup.spec, setup.initial,
                          [&](const Progress&) { return !interrupted(); });
        const int rank = result.final.cov.allFinite()
                             ? covariance_rank(result.final.cov, setup.spec.run.rank_tol)
                             : -1;
        const auto limit =
            predicted_clustering_limit(setup.attention, setup.initial.cov, setup.spec.run.rank_tol);
        csv += fmt::format("{},{},{},{},{},{},{:.17g}\n", d, trial, identity ? 1 : 0, result.status,
                           rank, limit ? std::to_string(limit->rank) : "", result.t_final);
        if (identity) {
          final_identity.push_back(result.final.cov);
          ++histogram_identity[rank];
          match += rank == (d + 1) / 2;
          match_closed_form += limit && rank == limit->rank;
        } else {
          final_psd.push_back(result.final.cov);
          ++histogram_psd[rank];
          ++statuses_psd[result.status];
        }
        ++done;
        bar.update(static_cast<double>(done) / static_cast<double>(2 * trials * dims.size()),
                   fmt::format("d = {} trial {}", d, trial));
      }
    }
    const auto sub = ctx.dir / fmt::format("d{}", d);
    std::filesystem::create_directories(sub);
    write_stack(sub / "Q.npy", Qs);
    write_stack(sub / "S0.npy", S0s);
    write_stack(sub / "V.npy", Vs);
    write_stack(sub / "final_identity.npy", final_identity);
    write_stack(sub / "final_psd.npy", final_psd);
    nlohmann::json hist_identity = nlohmann::json::object(), hist_psd = nlohmann::json::object();
    for (const auto& [rank, count] : histogram_identity)
      hist_identity[std::to_string(rank)] = count;
    for (const auto& [rank, count] : histogram_psd) hist_psd[std::to_string(rank)] = count;
    per_d[std::to_string(d)] = {{"predicted_rank", (d + 1) / 2},
                                {"identity_matching", match},
                                {"identity_matching_closed_form", match_closed_form},
                                {"identity_ranks", hist_identity},
                                {"psd_ranks", hist_psd},
                                {"psd_statuses", statuses_psd}};
    total += trials;
    matching += match;
  }
  bar.finish();
  write_text(ctx.dir / "ranks.csv", csv);
  return {{"trials_per_d", trials},
          {"dims", dims},
          {"identity_runs", total},
          {"identity_runs_matching", matching},
          {"per_d", per_d}};
}

}  // namespace tokenflow::cli
