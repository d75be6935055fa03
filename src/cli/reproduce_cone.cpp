// reproduce cone: 2 x 2 covariance trajectories of the Gaussian closure in the cone of positive
// semidefinite matrices, for softmax, l2, multi-head softmax and Sinkhorn attention, each in three
// regimes (contracting, rank-one contracting, expanding) from a grid of initial covariances.
//
// What the theory predicts (docs/design.md section 1, include/tokenflow/gaussian.hpp), V = W = I:
//  - softmax, dS/dt = S (A + A^T) S: A + A^T negative definite -> S -> 0 like 1/t (the apex);
//    -B^T B of rank one -> S -> S0 - S0 B^T (B S0 B^T)^+ B S0, rank one (the cone's surface);
//    any positive eigenvalue -> blow-up at t* = 1 / lambda_max(S0^1/2 (A + A^T) S0^1/2);
//  - l2: the same contractions, but no finite-time blow-up (E[y|x] is a contraction of x for large
//    S: the growth is at most exponential);
//  - multi-head, heads acting on e1 and e2 (C_h = e_h e_h^T): each direction follows its head;
//    a contracting head beside an expanding one gives a blow-up at 1 / (2 S22(0));
//  - Sinkhorn: contracting for A = -I / sqrt(2), nearly a line for A = diag(-1, 0.001) / sqrt(2),
//    growing (exponentially, without blow-up) for A = I / sqrt(2).
// Every run is a `tokenflow gaussian` directory <kind>/<k>/ (config.toml, times.npy, means.npy,
// covs.npy, summary.json); cone.csv lists each run with its regime, its start and its outcome.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <numbers>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_gaussian.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow::cli {

namespace {

struct Regime {
  const char* kind;       // directory: softmax | l2 | multihead | sinkhorn
  const char* name;       // what the parameters do
  const char* attention;  // the [attention] table's body
  double T;
  // A closed-form blow-up time where the library has none (multi-head), else nullptr.
  double (*blowup_time)(const Eigen::Matrix2d& S0) = nullptr;
};

// Heads on e1 (contracting) and e2 (expanding), C_h = e_h e_h^T, scale 1 (k = 1): the field's
// slope is M = diag(-S11, S22), so dS22/dt = 2 S22^2 and S22(t) = S22(0) / (1 - 2 S22(0) t).
double two_heads_blowup_time(const Eigen::Matrix2d& S0) {
  return 1.0 / (2.0 * S0(1, 1));
}

// The contracting regimes run to T = 200, where the vanishing eigenvalues (~ 1/t) are a few
// thousandths of the initial ones; the growth regimes stop at T = 4: l2 and Sinkhorn grow like
// e^{2t}, and trace S must stay below run.blowup = 1e8 (a threshold crossing would be reported as
// a blow-up). Frames: every accepted dopri5 step (save_every = 1), dense where S moves fast.
const Regime kRegimes[] = {
    {"softmax", "contracting: K = -Q = -I",
     "kind = \"softmax\"\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[-1.0, 0.0], [0.0, -1.0]]\n", 200.0},
    {"softmax", "rank-one contracting: K = -Q, Q of rank one",
     "kind = \"softmax\"\nQ = [[1.0, 0.5], [0.0, 0.0]]\nK = [[-1.0, -0.5], [0.0, 0.0]]\n", 200.0},
    {"softmax", "expanding: K = Q = I",
     "kind = \"softmax\"\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[1.0, 0.0], [0.0, 1.0]]\n", 4.0},
    {"l2", "contracting: K = -Q = -I",
     "kind = \"l2\"\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[-1.0, 0.0], [0.0, -1.0]]\n", 200.0},
    {"l2", "rank-one contracting: K = -Q, Q of rank one",
     "kind = \"l2\"\nQ = [[1.0, 0.5], [0.0, 0.0]]\nK = [[-1.0, -0.5], [0.0, 0.0]]\n", 200.0},
    {"l2", "expanding: K = Q = I",
     "kind = \"l2\"\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[1.0, 0.0], [0.0, 1.0]]\n", 4.0},
    {"multihead", "two contracting heads (on e1, on e2)",
     "kind = \"softmax\"\nheads = 2\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[-1.0, 0.0], [0.0, "
     "-1.0]]\n",
     200.0},
    {"multihead", "one contracting head (on e1), one idle",
     "kind = \"softmax\"\nheads = 2\nQ = [[1.0, 0.0], [0.0, 0.0]]\nK = [[-1.0, 0.0], [0.0, 0.0]]\n",
     200.0},
    {"multihead", "one contracting head (on e1), one expanding (on e2)",
     "kind = \"softmax\"\nheads = 2\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[-1.0, 0.0], [0.0, 1.0]]\n",
     4.0, two_heads_blowup_time},
    {"sinkhorn", "contracting: K = -Q = -I",
     "kind = \"sinkhorn\"\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[-1.0, 0.0], [0.0, -1.0]]\n", 200.0},
    {"sinkhorn", "contracting on e1, nearly idle on e2: K = diag(-1, 0.001)",
     "kind = \"sinkhorn\"\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[-1.0, 0.0], [0.0, 0.001]]\n", 200.0},
    {"sinkhorn", "expanding: K = Q = I",
     "kind = \"sinkhorn\"\nQ = [[1.0, 0.0], [0.0, 1.0]]\nK = [[1.0, 0.0], [0.0, 1.0]]\n", 4.0},
};

// The outcome of a run, read off its last state (thresholds relative to the start), in this
// order: "blow-up" (status), "to 0" (largest eigenvalue below 5% of the initial largest), "grows"
// (trace more than doubled), "to a line" (smallest eigenvalue below 5% of the largest), "stays".
std::string outcome(const GaussianResult& r, const Eigen::Matrix2d& S0) {
  if (r.status == "blowup") return "blow-up";
  const Eigen::Vector2d initial = linalg::symmetric_eigenvalues(S0);
  const Eigen::Vector2d final =
      linalg::symmetric_eigenvalues(r.final.cov);
  if (final[1] <= 0.05 * initial[1]) return "to 0";
  if (final.sum() > 2.0 * initial.sum()) return "grows";
  if (final[0] <= 0.05 * final[1]) return "to a line";
  return "stays";
}

}  // namespace

nlohmann::json reproduce_cone(const ReproductionContext& ctx) {
  // The grid of starts: S0 = R(theta) diag(l1, l2) R(theta)^T.
  const std::vector<double> thetas =
      ctx.quick ? std::vector<double>{0.0, std::numbers::pi / 3}
                : std::vector<double>{0.0, std::numbers::pi / 3, 2 * std::numbers::pi / 3};
  const std::vector<std::pair<double, double>> spectra{{1.0, 0.25}, {0.6, 0.45}};
  std::vector<Eigen::Matrix2d> starts;
  for (double theta : thetas)
    for (const auto& [l1, l2] : spectra) {
      Eigen::Matrix2d R;
      R << std::cos(theta), -std::sin(theta), std::sin(theta), std::cos(theta);
      starts.push_back(R * Eigen::Vector2d(l1, l2).asDiagonal() * R.transpose());
    }

  const std::size_t total = std::size(kRegimes) * starts.size();
  ProgressBar bar(ctx.label);
  std::string csv =
      "kind,run,regime,s11,s12,s22,T,status,outcome,t_final,blowup_time,predicted_blowup_time,"
      "trace_initial,trace_final\n";
  std::map<std::string, int> next_index;
  nlohmann::json outcomes = nlohmann::json::object();
  double worst_blowup_gap = 0.0;  // |t_blowup - t*| / t* where t* is known
  std::size_t done = 0;
  for (const Regime& regime : kRegimes) {
    for (const Eigen::Matrix2d& S0 : starts) {
      const int k = next_index[regime.kind]++;
      const std::string toml = fmt::format(
          "# reproduce cone: {} ({})\n[init]\nmean = [0.0, 0.0]\ncov = [[{:.17g}, {:.17g}], "
          "[{:.17g}, {:.17g}]]\n"
          "[attention]\n{}[run]\nT = {}\nsave_every = 1\n",
          regime.kind, regime.name, S0(0, 0), S0(0, 1), S0(1, 0), S0(1, 1), regime.attention,
          regime.T);
      const GaussianRun run = run_gaussian_config(
          toml, ctx.dir / regime.kind / std::to_string(k), [&](const Progress& p) {
            bar.update((static_cast<double>(done) + (p.T > 0 ? p.t / p.T : 1.0)) /
                           static_cast<double>(total),
                       fmt::format("{} run {}", regime.kind, k));
            return true;
          });
      const auto s = nlohmann::json::parse(run.summary);
      const std::string result = outcome(run.result, S0);
      const double predicted = s.contains("predicted_blowup_time")
                                   ? s["predicted_blowup_time"].get<double>()
                               : regime.blowup_time ? regime.blowup_time(S0)
                                                    : NAN;
      if (run.result.blowup_time && std::isfinite(predicted))
        worst_blowup_gap =
            std::max(worst_blowup_gap, std::abs(*run.result.blowup_time - predicted) / predicted);
      csv += fmt::format(
          "{},{},\"{}\",{:.17g},{:.17g},{:.17g},{},{},{},{:.17g},{},{},{:.17g},{:.17g}\n",
          regime.kind, k, regime.name, S0(0, 0), S0(0, 1), S0(1, 1), regime.T, run.result.status,
          result, run.result.t_final,
          run.result.blowup_time ? fmt::format("{:.17g}", *run.result.blowup_time) : "",
          std::isfinite(predicted) ? fmt::format("{:.17g}", predicted) : "", S0.trace(),
          run.result.final.cov.trace());
      auto& count = outcomes[regime.kind][result];
      count = count.is_null() ? 1 : count.get<int>() + 1;
      ++done;
    }
  }
  bar.finish();
  write_text(ctx.dir / "cone.csv", csv);
  return {{"runs", total},
          {"starts", starts.size()},
          {"outcomes", outcomes},
          {"blowup_time_max_relative_gap", worst_blowup_gap}};
}

}  // namespace tokenflow::cli
