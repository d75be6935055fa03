// tokenflow/dynamics.hpp: particles moving by dx_i/dt = Gamma_mu(x_i), docs/design.md section 1.
//
// One explicit Euler step of size dt is one residual attention layer, x + dt Gamma(x). rk4 is the
// classical fourth-order method; dopri5 is Dormand-Prince 5(4) with step-size control (relative
// tolerance `tol`). Parameters may change with time ([[layers]], piecewise constant): a step that
// crosses a layer boundary is split there, so every stage of a (sub)step uses the layer whose
// interval contains that (sub)step, and the integrator follows the piecewise flow to its order.
// Under normalize = sphere, points are renormalized to |x| = 1 after every step.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/measure.hpp"

namespace tokenflow {

enum class Integrator { euler, rk4, dopri5 };
const char* to_string(Integrator integrator);

struct RunSpec {
  double T = 1.0;
  double dt = 0.01;  // step (euler, rk4) or first trial step (dopri5)
  Integrator integrator = Integrator::rk4;
  int save_every = 0;       // a frame every k steps (0: initial and final only)
  double blowup = 1e8;      // stop with status "blowup" when max_i |x_i| exceeds it
  double tol = 1e-10;       // dopri5 relative tolerance
  double rank_tol = 1e-3;   // rank: eigenvalues above rank_tol * largest
  int checkpoint_every = 0;
  double cluster_tol = 1e-2;  // two points are in one cluster when a chain of points closer
                              // than cluster_tol joins them
};

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

// ---- what a run's time stepping can carry (checked before the first step) -----------------------
// A fixed step below T 2^-40 means more than 2^40 (1.1e12) steps: no run finishes that many, and
// past 2^52 steps t + dt no longer advances t at all (dt below the spacing of doubles near T).
constexpr double kMinStepFraction = 0x1p-40;
// dopri5's relative tolerance must exceed 10 machine epsilons (the bound of Hairer's DOPRI5 code,
// "tolerances are too small"): below it the error estimate is rounding, not truncation.
constexpr double kMinDopriTol = 10.0 * 2.220446049250313e-16;
// Throws InputError naming run.T (finite, >= 0), run.dt (positive, finite; for euler and rk4 at
// least T kMinStepFraction), run.tol (dopri5: above kMinDopriTol), run.blowup (positive),
// run.save_every (>= 0).
void check_run_spec(const RunSpec& run);
// The number of fixed steps of euler and rk4: step k starts at k dt and the last one ends at T
// (at least one step when T > 0; a last step shorter than dt by less than 1e-9 dt is not taken).
long fixed_step_count(const RunSpec& run);
// dopri5's smallest step at time t: 2^-46 max(|t|, h0) = 64 machine epsilons of t, h0 = min(dt, T)
// the first trial step (the scale of the run's time near t = 0). Below it t + h resolves the step
// to worse than 1/64 of itself (Hairer's DOPRI5 stops at 10 epsilons: "step size too small"), so
// the step sequence is rounding, not control. A step rejected at the floor ends the run as
// "stalled", or as "blowup" when the solution grows so fast that a singularity lies within
// kSingularReach floors of t (dopri5's steps near a singularity at t* are about tol^(1/5) (t* - t)
// >= 1.2e-3 (t* - t) for tol >= kMinDopriTol, so at the floor t* - t <= ~1e3 floors, and the
// growth time |x| / (d|x|/dt) estimates (t* - t) / p for |x| ~ (t* - t)^-p, p >= 1/2).
// A stable but stiff field whose steps stay above the floor is not a stall: such a run takes
// T / h steps (the progress bar shows them; Ctrl-C stops it).
constexpr double kDopriFloorFraction = 0x1p-46;
double dopri5_step_floor(double t, const RunSpec& run);
constexpr double kSingularReach = 1e4;
// Sinkhorn attention solves entropic OT for the cost -s_ij = -scale <Q_h x_i, K_h x_j> at
// attention.epsilon: throws InputError unless max|s| / epsilon <= kMaxCostOverEpsilon
// (ot_solve.hpp; key attention.epsilon) and the logits are finite (key attention.Q), with max|s|
// <= |scale| max_i |Q_h x_i| max_j |K_h x_j| at the points of mu, for every layer and head. Other
// kinds: nothing to check.
template <class T>
void check_sinkhorn_attention_range(const AttentionParams& attention, const Measure<T>& mu);

// Diagnostics of the points x with weights a at time t; the energy is computed when `field` is
// given and its kind is softmax (NaN otherwise).
template <class T>
FrameDiagnostics measure_frame(double t, const Points<T>& x, const Vec<T>& weights,
                               const RunSpec& run, const AttentionField<T>* field);
// max_i |x_i|, NaN when a row is NaN (positions that overflowed in a blown-up run), never a
// maximum over the finite rows only.
template <class T>
double max_row_norm(const Points<T>& x);
// Connected components of the graph "|x_i - x_j| <= tol". Exact for every d: points sharing a
// grid cell of side tol / sqrt(d) are joined outright, and cells are compared point by point only
// when their cells on the first three coordinates are neighbours, so a clustered cloud costs O(n).
template <class T>
long count_clusters(const Points<T>& x, double tol);

struct Progress {
  double t = 0.0, T = 0.0;
  long steps = 0;
};
// Returns false to stop the run: it stops after the current step, writes that step through the
// checkpoint callback when it has one (a resume continues bit for bit), then throws Cancelled.
using ProgressCallback = std::function<bool(const Progress&)>;

template <class T>
struct SimulationResult {
  // "finished" | "blowup" | "stalled" (dopri5's step fell below dopri5_step_floor: t_final < T,
  // `reason` says where and why) | "failed" (the run did not reach T for another reason)
  std::string status;
  std::string reason;
  double t_final = 0.0;
  long steps = 0;
  long rejected_steps = 0;  // dopri5
  Points<T> positions;      // final, n x d
  std::vector<Points<T>> frames;  // when save_every > 0: initial, every k-th step, final
  std::vector<double> times;
  std::vector<FrameDiagnostics> diagnostics;  // initial, every saved frame, final
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
// count per rank, with the exception stated in attention.hpp). The callbacks run on every rank;
// the caller decides which rank reports and writes.
template <class T>
SimulationResult<T> simulate(const AttentionParams& attention, const RunSpec& run,
                             const Measure<T>& initial, const ProgressCallback& progress = {},
                             const CheckpointCallback<T>& checkpoint = {},
                             const SimulationState<T>* resume_from = nullptr,
                             const Communicator* comm = nullptr);

}  // namespace tokenflow
