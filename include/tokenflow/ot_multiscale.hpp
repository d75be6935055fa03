#pragma once
// Multiscale Sinkhorn between point clouds in k <= 3 dimensions (squared Euclidean cost, balanced):
// the epsilon-scaling schedule run on coarse clouds, the given clouds only at the final epsilon.
//
// Why: with the grid operator (GridSoftMin) every iteration costs O(n + m) at every epsilon, also
// in the early stages whose plans are blurred over many times the points' spacing. A stage at
// epsilon_k sees the clouds only at the scale sqrt(epsilon_k): replacing the points of each cell of
// side h <= cell_factor sqrt(epsilon_k) by their weighted centroid (carrying the cell's weight)
// changes each cost by at most about 2 h |x - y| + h^2 (Schmitzer 2019, "Stabilized sparse scaling
// algorithms for entropy regularized transport problems", Sec. 4; the multiscale schedule of
// GeomLoss, Feydy 2020, thesis Sec. 3.3). So each stage runs on the coarsest such cloud; then, at
// the final epsilon, on finer and finer clouds (each cell side halved) up to the given points.
// Between clouds the potentials move by one soft-min each (f on the new x from g on the old y, and
// g from f): the extrapolation f(x) = -eps log sum_j b_j exp((g_j - |x - y_j|^2) / eps), exact for
// the old cloud's plan.
// Nothing is approximated in the result: the coarse clouds only give the start of the final solve
// on the given points, sinkhorn(op, a, b) at epsilon from that start, which measures and certifies
// its plan exactly as without them (its marginal error, tol, status). They decide how many
// iterations it needs over the n + m points.
#include <Eigen/Core>
#include <optional>
#include <vector>

#include "tokenflow/ot.hpp"

namespace tokenflow {

using CloudPoints = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Points (n x k) and their weights (n).
struct WeightedCloud {
  CloudPoints points;
  Eigen::VectorXd weights;
};

// One coarse solve of a multiscale schedule.
struct MultiscaleLevel {
  double cell = 0.0;              // the side of its cells
  Eigen::Index n = 0, m = 0;      // its clouds' sizes
  double epsilon_first = 0.0, epsilon_last = 0.0;  // the stages it ran
  int iterations = 0;
  double marginal_error = 0.0;    // of its own (coarse) plan
  double seconds = 0.0;           // its solve and the extrapolation into it
};

struct MultiscaleOptions {
  // Cells of side at most cell_factor sqrt(epsilon) for a stage at epsilon.
  double cell_factor = 0.2;
  // Finer clouds at the final epsilon while they have at most this share of the given points.
  double finest_share = 0.5;
  // Below this many points on either side the schedule runs on the given clouds.
  Eigen::Index min_points = 1 << 15;
  // Each coarse solve's iteration budget (a coarse solve that stops there is still a start).
  int level_max_iter = 1000;
  // The finer clouds at the final epsilon are solved to max(tol, finest_tol) in at most
  // finest_max_iter iterations each (measured: 3 to 24 at tol 1e-6 on 10^6 and 10^7 points): below
  // 1e-6 their plans are closer to their own fixed point than to the given points' (cells of
  // side down to about the points' spacing), and at a tol near the rounding floor they would run
  // to their budget.
  double finest_tol = 1e-6;
  int finest_max_iter = 100;
};

// The weighted centroids of the points in each cell of the grid of side `cell` anchored at
// `origin` (k entries), cells with zero weight dropped; cells in lexicographic order. The
// centroids keep the total weight and the weighted mean (up to rounding).
WeightedCloud cell_centroids(const CloudPoints& points, const Eigen::VectorXd& weights, double cell,
                             const Eigen::RowVectorXd& origin);

// The multiscale schedule's coarse solves and the final one on the given points (x, y with weights
// a, b summing to 1; `fine` the operator over them, a GridSoftMin or any other). options as for
// sinkhorn(): its epsilon-scaling schedule (epsilon_start > epsilon), tol and max_iter (the final
// solve's). Stages whose cells would keep more than finest_share of the points (clouds sparse at
// that epsilon's scale) run on the given points, as sinkhorn() would, from the last coarse
// solve. Returns nullopt when the schedule does not apply: no epsilon-scaling, fewer than
// min_points points, a warm start given, unbalanced, points of dimension above 3, or no stage's
// cells shrink the clouds.
// `levels` receives the coarse solves in order.
std::optional<SinkhornResult> sinkhorn_multiscale(const SoftMin& fine, const CloudPoints& x, const CloudPoints& y,
                                                  const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                                                  const SinkhornOptions& options,
                                                  const MultiscaleOptions& multiscale,
                                                  std::vector<MultiscaleLevel>* levels);

}  // namespace tokenflow
