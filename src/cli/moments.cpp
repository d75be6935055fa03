// tokenflow moments: the weighted mean and covariance of a point cloud (its Gaussian fit, the
// [init] of `tokenflow gaussian`), with the covariance's eigenvalues.
#include <memory>

#include "../config/json_values.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "point_cloud_args.hpp"
#include "tokenflow/error.hpp"
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
  // Finite points and weights (zero weights allowed), each error naming its file and flag.
  const Measure<double> mu = read_point_cloud(o.points, "--points", o.weights, "--weights", "", "");
  const Eigen::VectorXd mean = weighted_mean(mu);
  const Eigen::MatrixXd cov = weighted_covariance(mu);
  // Finite points can still overflow in the squares (coordinates near 1e154 and beyond).
  if (!mean.allFinite() || !cov.allFinite())
    throw InputError(o.points, "--points", "its covariance overflows double precision: rescale the points");
  OutputDir out(o.out, {"moments", {"summary.json"}, {}});  // after every check of the inputs
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
}

}  // namespace

void add_moments_command(CLI::App& app) {
  auto o = std::make_shared<MomentsOptions>();
  CLI::App* cmd = app.add_subcommand("moments", "The weighted mean and covariance of a point cloud (its Gaussian fit)");
  cmd->add_option("--points", o->points, "The points, an n x d .npy")->required();
  cmd->add_option("--weights", o->weights, "Their weights, a .npy of n non-negative numbers (default uniform)");
  cmd->add_option("--out", o->out, kOutHelp)->required();
  cmd->footer("Outputs: summary.json (n, d, mean, cov, cov_eigenvalues: ascending).");
  cmd->callback([o] { run_moments(*o); });
}

}  // namespace tokenflow::cli
