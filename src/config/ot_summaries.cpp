// summary.json of `tokenflow ot` and `tokenflow wasserstein` (summary.hpp), built from the typed
// results of src/ot (ot_solve.hpp) for the CLI and the Python module.
#include <cmath>
#include <nlohmann/json.hpp>

#include "json_values.hpp"
#include "summary_documents.hpp"
#include "tokenflow/ot_solve.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow {

namespace {

using json_values::json_number;

// The keys every summary.json built here has: the command and the sizes n, m (the keys of a
// summary are written sorted, so the order they are set in does not matter).
nlohmann::json summary_head(const char* command, Eigen::Index n, Eigen::Index m) {
  nlohmann::json s;
  s["command"] = command;
  s["n"] = n;
  s["m"] = m;
  return s;
}

}  // namespace

nlohmann::json ot_summary(const OTSolution& r, double wall_seconds) {
  nlohmann::json s = summary_head("ot", r.n, r.m);
  s["method"] = r.method;
  s["ground_cost"] = r.ground_cost;
  s["solve_seconds"] = r.solve_seconds;
  s["status"] = r.status;
  if (!r.reason.empty()) s["reason"] = r.reason;
  s["converged"] = r.converged;
  s["cost"] = json_number(r.cost);
  s["objective"] = json_number(r.objective);
  s["iterations"] = r.iterations ? nlohmann::json(*r.iterations) : nlohmann::json(nullptr);
  s["marginal_error"] = json_number(r.marginal_error);
  if (r.method == "exact") {
    s["dual_objective"] = json_number(r.dual_objective);
    s["pivots"] = r.pivots;
  } else {
    s["epsilon"] = r.epsilon;
    s["tol"] = r.tol;
    s["max_iter"] = r.max_iter;
    s["operator"] = r.op_used;
    s["rounding_floor"] = json_number(r.rounding_floor);
    s["epsilon_reached"] = json_number(r.epsilon_reached);
    s["overrelaxation_requested"] = r.overrelaxation_requested;  // 0: Anderson acceleration
    if (!std::isinf(r.marginal_penalty)) {  // unbalanced transport: rho and the masses it left
      s["marginal_penalty"] = r.marginal_penalty;
      s["plan_mass"] = json_number(r.plan_mass);
      s["mass_a"] = r.mass_a;
      s["mass_b"] = r.mass_b;
    }
    if (r.op_used == "kernel") {  // what the kernel-mode loop ran: w = 1 with Anderson's depth, or w
      s["kernel_iterations"] = r.kernel_iterations;
      s["kernel_absorptions"] = r.kernel_absorptions;
      s["overrelaxation"] = r.kernel_omega;
      s["anderson_depth"] = r.kernel_anderson_depth;  // 0: over-relaxation
    }
    if (r.op_used == "grid") {  // the grid's soft-mins: their certified relative error, and how
                                // many rows the certificate left to exact sums
      s["grid_relative_tol"] = r.grid_relative_tol;
      s["grid_rows_exact"] = r.grid_rows_exact;
      s["grid_rows_total"] = r.grid_rows_total;
      // The multiscale schedule's coarse solves (ot_multiscale.hpp); "iterations" counts the
      // solve on the given points only.
      nlohmann::json levels = nlohmann::json::array();
      for (const MultiscaleLevel& l : r.multiscale_levels)
        levels.push_back({{"cell", l.cell}, {"n", l.n}, {"m", l.m}, {"epsilon_first", l.epsilon_first},
                          {"epsilon_last", l.epsilon_last}, {"iterations", l.iterations},
                          {"marginal_error", json_number(l.marginal_error)}, {"seconds", l.seconds}});
      s["multiscale_levels"] = std::move(levels);
    }
    s["epsilon_start"] = json_number(r.epsilon_start);
    if (r.epsilon_decay != 0.0) s["epsilon_decay"] = r.epsilon_decay;  // set when scaling
  }
  if (r.divergence) {
    s["divergence"] = json_number(*r.divergence);
    s["divergence_pot"] = json_number(r.divergence_pot.value_or(std::nan("")));
    s["divergence_terms"] = {{"xy", json_number(r.objective)},
                             {"xx", json_number(r.xx.objective)},
                             {"yy", json_number(r.yy.objective)},
                             {"xy_cost", json_number(r.cost)},
                             {"xx_cost", json_number(r.xx.cost)},
                             {"yy_cost", json_number(r.yy.cost)},
                             {"xx_iterations", r.xx.iterations},
                             {"yy_iterations", r.yy.iterations},
                             {"xx_marginal_error", json_number(r.xx.marginal_error)},
                             {"yy_marginal_error", json_number(r.yy.marginal_error)},
                             {"converged", r.xx.converged && r.yy.converged}};
  }
  s["plan_written"] = r.plan_formed;
  s["wall_seconds"] = wall_seconds;
  return s;
}

std::string ot_summary_json(const OTSolution& r, double wall_seconds) {
  return ot_summary(r, wall_seconds).dump(2);
}

nlohmann::json wasserstein_summary(const WassersteinSolution& solution, double wall_seconds) {
  const WassersteinResult& r = solution.result;
  nlohmann::json s = summary_head("wasserstein", solution.n, solution.m);
  s["p"] = r.p;
  s["d"] = solution.d;
  s["method"] = solution.conditional ? "conditional" : to_string(r.method);
  s["value"] = json_number(r.value);
  if (!solution.reason.empty()) {
    s["status"] = "failed";
    s["reason"] = solution.reason;
    s["converged"] = false;
  } else if (!solution.conditional && r.method == WassersteinMethod::sinkhorn) {
    s["status"] = r.sinkhorn.converged ? "converged" : r.sinkhorn.below_floor ? "below_floor" : "max_iter";
    s["rounding_floor"] = json_number(r.sinkhorn.rounding_floor);
    s["converged"] = r.sinkhorn.converged;
    s["epsilon"] = r.epsilon;
    s["iterations"] = r.sinkhorn.iterations;
    s["marginal_error"] = json_number(r.sinkhorn.marginal_error);
    s["cost"] = json_number(r.sinkhorn.cost);
    s["entropic_bias_bound"] = json_number(r.entropic_bias_bound);
  } else {
    s["status"] = "optimal";
    if (!solution.conditional) s["converged"] = true;
  }
  s["wall_seconds"] = wall_seconds;
  return s;
}

std::string wasserstein_summary_json(const WassersteinSolution& solution, double wall_seconds) {
  return wasserstein_summary(solution, wall_seconds).dump(2);
}

}  // namespace tokenflow
