// summary.json and tables of gaussian, meanfield, stability and train (summary.hpp), shared by the
// CLI and the Python module.
#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "json_values.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/summary.hpp"

#include "summary_documents.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/train.hpp"

namespace tokenflow {

namespace {

using namespace json_values;

}  // namespace

// ---- gaussian
// -------------------------------------------------------------------------------------

std::vector<std::string> gaussian_warnings(const GaussianResult& r) {
  std::vector<std::string> warnings;
  if (r.left_psd_cone)
    warnings.push_back(
        fmt::format("the covariance left the positive semidefinite cone at t = {:.6g} (lambda_min "
                    "/ (1 + lambda_max) "
                    "reached {:.3g}, allowance {:.3g}); the integration is not trustworthy there: "
                    "lower run.tol or run.dt",
                    r.left_psd_cone_time, r.psd_worst_relative_eigenvalue, r.psd_allowance));
  return warnings;
}

nlohmann::json gaussian_summary(const GaussianResult& r, const GaussianSetup& setup,
                                  double wall_seconds) {
  const Eigen::MatrixXd& S = r.final.cov;
  const auto d = setup.initial.mean.size();
  nlohmann::json s;
  s["command"] = "gaussian";
  s["status"] = r.status;
  if (!r.reason.empty()) s["reason"] = r.reason;
  s["blowup_time"] = r.blowup_time ? json_number(*r.blowup_time) : nlohmann::json(nullptr);
  s["t_final"] = r.t_final;
  s["steps"] = r.steps;
  if (setup.spec.run.integrator == Integrator::dopri5) s["rejected_steps"] = r.rejected_steps;
  s["d"] = d;
  s["kind"] = to_string(setup.attention.kind);
  s["heads"] = setup.attention.heads;
  s["integrator"] = to_string(setup.spec.run.integrator);
  s["frames"] = r.times.size();
  Eigen::VectorXd eigenvalues = Eigen::VectorXd::Constant(d, std::nan(""));
  int rank = -1;
  if (S.allFinite()) {
    eigenvalues =
        linalg::symmetric_eigenvalues(S);
    rank = covariance_rank(S, setup.spec.run.rank_tol);
  }
  s["final"] = {{"mean", json_vector(r.final.mean)},
                {"cov", json_matrix(S)},
                {"cov_eigenvalues", json_vector(eigenvalues)},
                {"rank", rank >= 0 ? nlohmann::json(rank) : nlohmann::json(nullptr)},
                {"trace", json_number(S.trace())}};
  s["psd"] = {{"worst_relative_eigenvalue", json_number(r.psd_worst_relative_eigenvalue)},
              {"allowance", json_number(r.psd_allowance)},
              {"left_cone", r.left_psd_cone}};
  if (r.left_psd_cone) s["psd"]["left_cone_time"] = r.left_psd_cone_time;
  s["warnings"] = gaussian_warnings(r);
  if (const auto tstar = predicted_blowup_time(setup.attention, setup.initial.cov))
    s["predicted_blowup_time"] = *tstar;
  if (const auto limit =
          predicted_clustering_limit(setup.attention, setup.initial.cov, setup.spec.run.rank_tol)) {
    s["predicted_limit"] = {{"cov", json_matrix(limit->cov)},
                            {"rank", limit->rank},
                            {"distance_frobenius", json_number((S - limit->cov).norm())}};
  }
  s["wall_seconds"] = wall_seconds;
  return s;
}

std::string gaussian_summary_json(const GaussianResult& r, const GaussianSetup& setup,
                                  double wall_seconds) {
  return gaussian_summary(r, setup, wall_seconds).dump(2);
}

// ---- meanfield
// ------------------------------------------------------------------------------------

std::string meanfield_csv(const MeanFieldResult& r) {
  std::string out =
      "n,sample,seed,status,mean_error,cov_error,bures_wasserstein,mean_error_from_sample,"
      "cov_error_from_sample,bures_wasserstein_from_sample,seconds\n";
  for (const auto& row : r.rows)
    out += fmt::format("{},{},{},{},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.6g}\n",
                       row.n, row.sample, row.seed, row.status, row.mean_error, row.cov_error,
                       row.bures_wasserstein, row.mean_error_from_sample, row.cov_error_from_sample,
                       row.bures_wasserstein_from_sample, row.seconds);
  return out;
}

nlohmann::json meanfield_summary(const MeanFieldResult& r, const MeanFieldSetup& setup,
                                   double wall_seconds) {
  nlohmann::json s;
  s["command"] = "meanfield";
  bool all_finished = true;
  for (const auto& row : r.rows) all_finished &= row.status == "finished";
  s["status"] = all_finished ? "finished" : "blowup";
  s["kind"] = to_string(setup.attention.kind);
  s["d"] = setup.initial.mean.size();
  s["T"] = setup.run.T;
  s["dt"] = setup.run.dt;
  s["integrator"] = to_string(setup.run.integrator);
  s["ns"] = setup.spec.ns;
  s["seeds"] = setup.spec.seeds;
  s["slope"] = json_number(r.slopes.bures_wasserstein);
  s["theory_slope"] = -0.5;
  s["slopes"] = {
      {"mean_error", json_number(r.slopes.mean_error)},
      {"cov_error", json_number(r.slopes.cov_error)},
      {"bures_wasserstein", json_number(r.slopes.bures_wasserstein)},
      {"mean_error_from_sample", json_number(r.slopes.mean_error_from_sample)},
      {"cov_error_from_sample", json_number(r.slopes.cov_error_from_sample)},
      {"bures_wasserstein_from_sample", json_number(r.slopes.bures_wasserstein_from_sample)}};
  s["ode_final"] = {{"mean", json_vector(r.ode_final.mean)}, {"cov", json_matrix(r.ode_final.cov)}};
  s["wall_seconds"] = wall_seconds;
  return s;
}

std::string meanfield_summary_json(const MeanFieldResult& r, const MeanFieldSetup& setup,
                                   double wall_seconds) {
  return meanfield_summary(r, setup, wall_seconds).dump(2);
}

// ---- stability
// ------------------------------------------------------------------------------------

std::string stability_csv(const StabilityResult& r, const StabilitySpec& spec) {
  std::string out = "t,w2,ratio,w2_over_delta\n";
  for (const auto& row : r.rows)
    out += fmt::format("{:.17g},{:.17g},{:.17g},{:.17g}\n", row.t, row.w2, row.ratio,
                       row.w2 / spec.delta);
  return out;
}

nlohmann::json stability_summary(const StabilityResult& r, const StabilitySetup& setup,
                                   double wall_seconds) {
  nlohmann::json s;
  s["command"] = "stability";
  s["status"] = r.status;
  if (!r.reason.empty()) s["reason"] = r.reason;
  s["method"] = r.method;
  s["n"] = setup.initial.n();
  s["d"] = setup.initial.d();
  s["kind"] = to_string(setup.attention.kind);
  s["integrator"] = to_string(setup.run.integrator);
  s["steps"] = r.steps;
  s["delta"] = setup.spec.delta;
  s["perturbation"] = setup.spec.perturbation;
  s["w2_initial"] = json_number(r.w2_initial);
  s["frames"] = r.rows.size();
  s["t_final"] = r.rows.empty() ? 0.0 : r.rows.back().t;
  s["growth_constant"] = json_number(r.growth_constant);
  s["growth_rate"] = json_number(r.growth_rate);
  s["wall_seconds"] = wall_seconds;
  return s;
}

std::string stability_summary_json(const StabilityResult& r, const StabilitySetup& setup,
                                   double wall_seconds) {
  return stability_summary(r, setup, wall_seconds).dump(2);
}

// ---- train
// ----------------------------------------------------------------------------------------

std::string metrics_csv(const std::vector<MetricsRow>& rows, bool alignment) {
  auto number = [](double v) { return std::isnan(v) ? std::string("") : fmt::format("{:.17g}", v); };
  std::string out = alignment ? "step,loss,test_w1,seconds,test_loss,test_accuracy,test_aer,test_precision,test_recall,"
                                "test_link_mass\n"
                              : "step,loss,test_w1,seconds,test_loss,test_accuracy\n";
  for (const MetricsRow& r : rows) {
    out += fmt::format("{},{:.17g},{:.17g},{:.6f},{:.17g},{}", r.step, r.loss, r.test_w1, r.seconds, r.test_loss,
                       number(r.test_accuracy));
    if (alignment)
      out += fmt::format(",{},{},{},{}", number(r.test_alignment.aer), number(r.test_alignment.precision),
                         number(r.test_alignment.recall), number(r.test_alignment.link_mass));
    out += "\n";
  }
  return out;
}

nlohmann::json train_summary(const TrainConfig& config, const TrainResult& r, long first_step,
                               double wall_seconds, const std::vector<std::string>& notes) {
  const long trained_steps = r.state.step - first_step;
  nlohmann::json s;
  s["command"] = "train";
  s["status"] = r.status;  // "finished", or "failed": a non-finite loss or gradient stopped the run
  if (!r.reason.empty()) s["reason"] = r.reason;
  s["steps"] = r.state.step;
  s["resumed_from_step"] = first_step;
  s["task"] = config.task.kind;
  s["training_distribution"] = describe_task(config.task);
  s["dtype"] = config.float32 ? "f32" : "f64";
  s["parameters"] = ParameterLayout(config.model).size();
  s["test_pairs"] = config.train.test_pairs;
  s["test_w1"] = json_number(r.final.w1);
  s["test_w1_untrained"] = json_number(r.state.untrained.w1);
  s["test_w1_independent"] = json_number(r.state.independent.w1);
  s["test_loss"] = json_number(r.final.loss);
  s["test_loss_untrained"] = json_number(r.state.untrained.loss);
  s["test_loss_independent"] = json_number(r.state.independent.loss);
  // The evaluation of lowest test loss (best_model.bin; step 0 is the untrained model).
  s["best_step"] = r.state.best_step;
  s["best_test_loss"] = json_number(r.state.best.loss);
  s["best_test_w1"] = json_number(r.state.best.w1);
  // A learned marginal penalty (model.learn_marginal_penalty): the model's, eps / lambda (null when
  // lambda reached 0, the balanced layer), and lambda itself.
  if (config.model.learn_marginal_penalty) {
    const ParameterLayout layout(r.model.config);
    s["marginal_penalty_learned"] = json_number(final_marginal_penalty(layout, r.model.params.data()));
    s["marginal_relaxation_learned"] = marginal_relaxation(layout, r.model.params.data());
  }
  // The plan of the model as trained (model.sinkhorn_grad) and the converged plan of its cost.
  s["sinkhorn_grad"] = config.model.sinkhorn_grad;
  s["test_marginal_error"] = json_number(r.final.marginal_error);
  s["test_w1_converged"] = json_number(r.final.w1_converged);
  s["test_converged_fraction"] = json_number(r.final.converged_fraction);
  // A dataset reports accuracy when its test pairs have links (the evaluation's accuracy is a number).
  if (task_has_assignment(config.task) || (task_reads_pairs(config.task) && !std::isnan(r.final.accuracy))) {
    s["test_accuracy"] = json_number(r.final.accuracy);
    s["test_accuracy_untrained"] = json_number(r.state.untrained.accuracy);
    s["test_accuracy_independent"] = json_number(r.state.independent.accuracy);
    s["test_accuracy_converged"] = json_number(r.final.accuracy_converged);
    s["best_test_accuracy"] = json_number(r.state.best.accuracy);
  }
  if (config.task.kind == "texts") {
    const std::pair<const char*, const Evaluation*> evaluations[] = {
        {"", &r.final}, {"_untrained", &r.state.untrained}, {"_independent", &r.state.independent}};
    for (const auto& [suffix, e] : evaluations) {
      s[std::string("test_aer") + suffix] = json_number(e->alignment.aer);
      s[std::string("test_precision") + suffix] = json_number(e->alignment.precision);
      s[std::string("test_recall") + suffix] = json_number(e->alignment.recall);
      s[std::string("test_link_mass") + suffix] = json_number(e->alignment.link_mass);
    }
  }
  if (!notes.empty()) s["notes"] = notes;
  if (!r.state.warnings.empty()) s["warnings"] = r.state.warnings;
  s["train_seconds"] = r.state.seconds;
  s["threads"] = omp_get_max_threads();
  s["pairs_per_second"] = trained_steps > 0 && !r.state.metrics.empty()
                              ? nlohmann::json(static_cast<double>(trained_steps) *
                                               config.train.batch / std::max(1e-9, wall_seconds))
                              : nlohmann::json(nullptr);
  s["wall_seconds"] = wall_seconds;
  return s;
}

std::string train_summary_json(const TrainConfig& config, const TrainResult& r, long first_step,
                               double wall_seconds, const std::vector<std::string>& notes) {
  return train_summary(config, r, first_step, wall_seconds, notes).dump(2);
}

}  // namespace tokenflow
