// The epsilon stages of the Sinkhorn solvers (src/ot/stages.cpp), behind one interface: a
// SinkhornStage says what to solve (epsilon, stopping tolerance, iteration budget, warm
// potentials), and each mode has one function that runs it and returns a StageResult
// (potentials, the marginal error reached, the iterations used, a StageStatus):
//   log_domain_stage   the alternating log-domain loop of ot.hpp (Eq. (23) of Feydy et al.)
//   kernel_mode_stage  the stabilized scaling iteration of ot_kernel.hpp, checked in float64 and
//                      finished by the log-domain loop
//   symmetric_stage    the averaged symmetric loop of sinkhorn_symmetric
// The epsilon-scaling driver (run_schedule in sinkhorn.cpp) chains the stages.
#pragma once

#include <Eigen/Core>
#include <optional>

#include "tokenflow/ot.hpp"
#include "tokenflow/ot_kernel.hpp"

namespace tokenflow::stages {

using PlanMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Which potential a stage starts from: from_g computes f from g first (f = softmin_rows(g));
// from_f starts with g from f (the first iteration's column step).
enum class WarmStart { from_g, from_f };

// One epsilon stage. f (n) and g (m) are the warm start (the symmetric loop reads f only).
struct SinkhornStage {
  double epsilon = 0.0;
  double tol = 0.0;      // the stage stops once its marginal error is below tol
  int budget = 0;        // iterations at most (>= 1)
  int done_before = 0;   // iterations of the earlier stages: progress sees done_before + k
  bool final = false;    // the last epsilon of the schedule
  WarmStart start = WarmStart::from_g;
  Eigen::VectorXd f, g;
};

// What the scaling iteration of kernel mode did in a stage (SinkhornResult's kernel_* fields).
struct KernelStats {
  int iterations = 0, absorptions = 0;
  double omega = 0.0;
  int anderson_depth = 0;
};

// The plan pi_ij = a_i b_j exp((f_i + g_j - C_ij) / eps) of potentials (f, g), measured in one
// pass over C (measure_plan): cost <C, pi>, objective sum_ij pi_ij (f_i + g_j) (ot.hpp), mass
// sum_ij pi_ij, row error sum_i |(pi 1)_i - a_i|, and the plan itself (n x m) when asked.
struct PlanMeasure {
  double cost = 0.0, objective = 0.0, mass = 0.0, row_error = 0.0;
  PlanMatrix plan;
};

// The end of a stage: potentials (f, g) with g exact for f (the plan's columns sum to b), the
// marginal error of their plan, the iterations used and how the stage ended.
struct StageResult {
  Eigen::VectorXd f, g;
  double marginal_error = 0.0;
  int iterations = 0;
  StageStatus status = StageStatus::out_of_iterations;
  std::optional<KernelStats> kernel;  // kernel mode: its scaling iteration ran
  std::optional<PlanMeasure> plan;    // the stage measured the plan of (f, g) (kernel mode's check)
};

// The problem the stages of one solve share: operator C (n x m), weights a (n) and b (m) with
// their logarithms, and the options (tolerances, progress, kernel mode's settings).
struct SinkhornProblem {
  const SoftMin& op;
  const Eigen::VectorXd& a;
  const Eigen::VectorXd& b;
  Eigen::VectorXd log_a, log_b;
  const SinkhornOptions& options;
};

// The stabilized kernels of kernel mode, kept from stage to stage (their memory is reused).
// float32 when tol leaves room for its rounding (16 * 2^-24, ot.hpp), else float64.
struct KernelStorage {
  bool use_float = true;
  ScalingKernel<float> single;
  ScalingKernel<double> full;
};

StageResult log_domain_stage(const SinkhornProblem& p, SinkhornStage s);
StageResult kernel_mode_stage(const SinkhornProblem& p, KernelStorage& kernels, SinkhornStage s);
// The symmetric loop on p.op (square) for p.a; StageResult::g is left empty.
StageResult symmetric_stage(const SinkhornProblem& p, SinkhornStage s);

PlanMeasure measure_plan(const SoftMin& op, const Eigen::VectorXd& log_a, const Eigen::VectorXd& log_b,
                         double eps, bool want_plan, const Eigen::VectorXd& f, const Eigen::VectorXd& g);

// Throws NumericalFailure when a potential has left the range of double.
void check_finite(const Eigen::VectorXd& v);

// Calls options.progress every progress_every iterations; throws Cancelled when it returns false.
void report_progress(const SinkhornOptions& options, int iteration, double error);

}  // namespace tokenflow::stages
