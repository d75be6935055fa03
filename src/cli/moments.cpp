// tokenflow moments: the weighted mean and covariance of a point cloud (its Gaussian fit, the
// [init] of `tokenflow gaussian`), with the covariance's eigenvalues.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "../config/json_values.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/measure.hpp"

namespace tokenflow::cli {

namespace {

struct MomentsOptions {
  std::string points, weights, out;
};

void run_moments(const MomentsOptions& o) {
  using json_values::json_matrix;
  using json_values::json_vector;
  Stopwatch clock;
  Points<double> x = read_points(o.points, "--points");
  Eigen::VectorXd w;
  if (!o.weights.empty()) w = read_vector(o.weights, "--weights", x.rows());
  const Measure<double> mu = make_measure<double>(std::move(x), std::move(w));
  const Eigen::VectorXd mean = weighted_mean(mu);
  const Eigen::MatrixXd cov = weighted_covariance(mu);
  OutputDir out(o.out, {"moments", {"summary.json"}, {}});
  nlohmann::json s;
  s["command"] = "moments";
  s["status"] = "finished";
  s["n"] = mu.points.rows();
  s["d"] = mu.points.cols();
  s["mean"] = json_vector(mean);
  s["cov"] = json_matrix(cov);
  s["cov_eigenvalues"] = json_vector(linalg::symmetric_eigenvalues(cov));
  s["wall_seconds"] = clock.seconds();
  write_summary(out, s);
  out.commit();
  std::cout << fmt::format("tokenflow moments: {} points in R^{} -> {}/summary.json\n", mu.points.rows(),
                           mu.points.cols(), o.out);
}

}  // namespace

void add_moments_command(CLI::App& app) {
  auto o = std::make_shared<MomentsOptions>();
  CLI::App* cmd = app.add_subcommand("moments", "The weighted mean and covariance of a point cloud (its Gaussian fit)");
  cmd->add_option("--points", o->points, "The points, an n x d .npy")->required();
  cmd->add_option("--weights", o->weights, "Their weights, a .npy of n positive numbers (default uniform)");
  cmd->add_option("--out", o->out, kOutHelp)->required();
  cmd->footer("Outputs: summary.json (n, d, mean, cov, cov_eigenvalues).");
  cmd->callback([o] { run_moments(*o); });
}

}  // namespace tokenflow::cli
