// tokenflow/dynamics.hpp: particles moving by dx_i/dt = Gamma_mu(x_i), docs/design.md section 1.
//
// The run settings (RunSpec: T, dt, euler | rk4 | dopri5, tolerances), their checks and the
// progress callback are in run_spec.hpp, included here. Under normalize = sphere, points are
// renormalized to |x| = 1 after every step.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/run_spec.hpp"

namespace tokenflow {

// What is measured on every saved frame (diagnostics.csv).
struct FrameDiagnostics {
  double t = 0.0;
  Eigen::VectorXd mean;             // d
  Eigen::VectorXd cov_eigenvalues;  // d, ascending
  double effective_rank = 0.0;      // exp(entropy of eigenvalues / their sum)
  int rank = 0;                     // eigenvalues above rank_tol * largest
  long cluster_count = 0;
  double energy = 0.0;              // interaction energy (NaN when not defined for the kind)
  double max_norm = 0.0;
};

// Sinkhorn attention solves entropic OT for the cost -s_ij = -scale <Q_h x_i, K_h x_j> at
// attention.epsilon: throws InputError unless max|s| / epsilon <= kMaxCostOverEpsilon
// (ot_solve.hpp; key attention.epsilon) and the logits are finite (key attention.Q), with max|s|
// <= |scale| max_i |Q_h x_i| max_j |K_h x_j| at the points of mu, for every layer and head. Other
// kinds: nothing to check.
template <class T>
void check_sinkhorn_attention_range(const AttentionParams& attention, const Measure<T>& mu);

// Diagnostics of the points x with weights a at time t; the energy is computed when `field` is
// given and its kind is softmax (NaN otherwise). initial_radius: the run's RMS radius at t = 0
// (count_frame_clusters; 0: the frame's own).
template <class T>
FrameDiagnostics measure_frame(double t, const Points<T>& x, const Vec<T>& weights,
                               const RunSpec& run, const AttentionField<T>* field, double initial_radius = 0.0);
// max_i |x_i|, NaN when a row is NaN (positions that overflowed in a blown-up run), never a
// maximum over the finite rows only.
template <class T>
double max_row_norm(const Points<T>& x);
// Connected components of the graph "|x_i - x_j| <= tol". Exact for every d: points sharing a
// grid cell of side tol / sqrt(d) are joined outright, and cells are compared point by point only
// when their cells on the first three coordinates are neighbours, so a clustered cloud costs O(n).
template <class T>
long count_clusters(const Points<T>& x, double tol);
// The cloud's RMS radius about its weighted mean, sqrt(sum_i w_i |x_i - mean|^2) (weights summing
// to 1), computed on x / max_ij |x_ij| so that it is finite wherever x is.
template <class T>
double rms_radius(const Points<T>& x, const Vec<T>& weights);
// The frame's cluster count as run.cluster_scale says. spread: count_clusters at run.cluster_tol
// times max(R, R_0), R the frame's RMS radius and R_0 (initial_radius) the run's at t = 0: the same
// count for a run whose tokens are scaled by any factor; a cloud that expands counts its tight
// groups at its new scale, one that collapses to a point counts 1 (a cloud of one repeated point
// is one cluster). absolute: count_clusters at run.cluster_tol.
template <class T>
long count_frame_clusters(const Points<T>& x, const Vec<T>& weights, const RunSpec& run, double initial_radius);

template <class T>
struct SimulationResult {
  // "finished" | "blowup" (a finite state past run.blowup, or a step that overflowed with a
  // singularity inside it: rolled back to the step's start, `reason` says so) | "stalled" (dopri5's
  // step fell below dopri5_step_floor: t_final < T, `reason` says where and why) | "failed" (the
  // run did not reach T for another reason, an overflow to inf or NaN among them: `reason` names
  // the step and the first non-finite quantity; positions are the last finite state).
  // positions and frames are always finite.
  std::string status;
  std::string reason;
  double t_final = 0.0;
  long steps = 0;
  long rejected_steps = 0;  // dopri5
  Points<T> positions;      // final, n x d
  std::vector<Points<T>> frames;  // when save_every > 0: initial, every k-th step, final
  std::vector<double> times;
  std::vector<FrameDiagnostics> diagnostics;  // initial, every saved frame, final
  SummationReport summation;                   // how the field's sums were computed (this process)
};

// Everything a run needs to continue bit for bit after a crash (see checkpoint.hpp): the result
// so far, the integrator's state and the warm starts of Sinkhorn attention.
template <class T>
struct SimulationState {
  SimulationResult<T> partial;  // status, steps, frames, times, diagnostics; positions = current x
  double t = 0.0;
  double h = 0.0;               // dopri5: the next trial step
  bool saved_last = true;       // the current x is already the last saved frame
  bool have_first_stage = false;
  Points<T> first_stage;        // dopri5 FSAL: f(x) when have_first_stage
  std::vector<Eigen::VectorXd> sinkhorn_f, sinkhorn_g;  // per head (sinkhorn attention)
};
// Called after every run.checkpoint_every steps with the full state.
template <class T>
using CheckpointCallback = std::function<void(const SimulationState<T>&)>;

// Runs the particle flow from `initial` (weights and positions are kept fixed). With
// `resume_from`, continues that state instead of starting at t = 0: the result is the one an
// uninterrupted run gives, bit for bit, on the same machine and thread count.
// With `comm` (several MPI ranks, tokenflow/distributed.hpp), every rank calls simulate with the
// same arguments; each velocity evaluation is split over the ranks by blocks of query tokens and
// all-gathered (AttentionField::set_communicator), and every rank then runs the integrator, the
// blow-up test, dopri5's error norm and the diagnostics on the full arrays in the single-process
// order, so every rank returns the single-process result (bit for bit for the same OpenMP thread
// count per rank, with the two exceptions stated in attention.hpp: the symmetric kernel, and the
// fast summation that summation = "auto" takes from n = 4096 on). The callbacks run on every rank;
// the caller decides which rank reports and writes.
template <class T>
SimulationResult<T> simulate(const AttentionParams& attention, const RunSpec& run,
                             const Measure<T>& initial, const ProgressCallback& progress = {},
                             const CheckpointCallback<T>& checkpoint = {},
                             const SimulationState<T>* resume_from = nullptr,
                             const Communicator* comm = nullptr);

}  // namespace tokenflow
