// tokenflow/fast_gauss.hpp: weighted Gaussian averages in k <= 3 dimensions in O(n) at a stated
// accuracy (the fast summation behind attention.summation = "fast", docs/fast-summation.md).
//
// For targets y_i (m x k), sources x_j (n x k) with log-weights l_j and values v_j (n x c):
//   P_ij  = exp(l_j - s |y_i - x_j|^2) / sum_j' exp(l_j' - s |y_i - x_j'|^2)
//   out_i = sum_j P_ij v_j                                                   (m x c)
// L2 attention is this with y = Q x, x = K x, l = log a, s = scale; softmax attention too, since
// exp(<q, k>) = exp(|q|^2 / 2) exp(|k|^2 / 2) exp(-|q - k|^2 / 2): y = q, x = k, s = 1/2 and
// l_j = log a_j + |k_j|^2 / 2 (the target's factor cancels in P).
//
// Guarantee, for every row i (the contract tests/cpp/test_fast_gauss.cpp checks):
//   |out_i - exact_i|_2 <= tol * sum_j P_ij |v_j|_2.
// How: in the scaled coordinates z = sqrt(s) x the kernel is exp(-|z - z'|^2). Sources and targets
// go to the nearest node of a grid of spacing rho; per dimension the kernel between a target at
// node offset u and a source at offset w of nodes D apart is the double Taylor series
//   exp(-(D + u - w)^2) = sum_{a,b} (-1)^a H_{a+b}(D) exp(-D^2) u^a w^b / (a! b!)
// (H the Hermite polynomials), truncated to a, b < p: sources give moments sum_j b_j v_j w_j^beta
// per node, a separable banded convolution over the grid turns them into Taylor coefficients at
// every node (one GEMM per node row and dimension), and each target evaluates its node's
// polynomial. Cramer's inequality |H_n(x)| exp(-x^2/2) <= 1.0865 2^(n/2) sqrt(n!) bounds every
// term, so a pair's kernel error is at most bound * exp(-|D|^2 / 2) (`expansion_bound` below), and
// the Gaussian envelope sum_j b_j |v_j| exp(-|D_ij|^2 / 2) is computed alongside on the grid. Each
// row's error is then bounded from computed quantities; a row whose bound does not meet tol (a
// target far from every source, weights spread over more than the grid resolves) is summed
// exactly, in the log domain (cells of sources whose terms are all below e^-(40 + log n) of a term
// already found are left out: together below e^-40 of the sum). So the guarantee holds on any input; speed depends on how few rows
// need the exact sum.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <vector>

namespace tokenflow {

using GaussMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct GaussAverageOptions {
  double tol = 1e-6;  // the per-row bound above; in (0, 1)
  // The grid's storage (two buffers of nodes x p^k x C doubles, C = c + 2 channels, 1 when c = 0)
  // may use at most this many bytes; beyond it every row is summed exactly (stats.grid = false).
  std::size_t max_grid_bytes = std::size_t{3} << 30;
  // When the certificate rejects more than this fraction of the rows (after the retry with a finer
  // grid), stop without summing them: stats.declined, `out` unset. attention.summation = "auto"
  // then evaluates densely. 1 (the default): never decline.
  double max_exact_fraction = 1.0;
  // The grid is built only when its predicted multiply-adds (GaussGridPlan::cost) are below this
  // times m n, the pairs of the exact sums that would replace it; +inf: always (tests). 8: about
  // where the two cost the same (measured on an AMD EPYC, Zen 5, 2 threads, d = 3: an exact pair
  // 0.8 ns, a grid multiply-add 0.08 to 0.14 ns). At 16, one softmax step of n = 2 10^4 random
  // tokens took 1.1 to 1.4 s on grids of 10 to 16 a pair where 8 took 0.7 to 1.0 s.
  double max_cost_per_pair = 8.0;
  // Rows the certificate rejects are not summed exactly but listed in stats.rejected (their `out`
  // rows and log_partition entries unset), for a caller with another way to sum them.
  bool defer_rejected = false;
};

// The grid for a tolerance: node spacing rho (in units of the bandwidth 1/sqrt(s)), p Taylor terms
// per dimension, the band (node offsets beyond it are not summed, their pairs' kernel is below
// exp(-(band rho)^2) = 1e-30) and the truncation bound: the kernel of a pair D nodes apart is
// computed within bound * exp(-|rho D|^2 / 2) (plus rounding, folded into `bound`).
struct GaussGridPlan {
  double spacing = 0.5;
  int order = 0;
  int band = 0;
  double bound = 0.0;
  double cost = 0.0;  // multiply-adds of spreading, the grid passes and the evaluation
};
// The cheapest (rho, p) for a cloud `extent` bandwidths wide per dimension (k entries), n points
// and c value columns whose truncation bound is below `target`, or order = 0 when no grid fits
// max_grid_bytes. gauss_average first asks for target = tol / (8 2^(k/2)) (2^(k/2): the usual
// ratio of the envelope to the sum it bounds) and, when rows are rejected, once more for the
// target that would have accepted 99% of them.
GaussGridPlan gauss_grid_plan(double target, const Eigen::VectorXd& extent, Eigen::Index n, int c,
                              std::size_t max_grid_bytes);
double gauss_first_target(double tol, int k);
// The truncation bound of (rho, p) in k dimensions, with the rounding of nodes_per_dim-long sums.
double gauss_expansion_bound(double spacing, int order, int k, int nodes_per_dim);

struct GaussAverageStats {
  bool grid = false;  // false: no grid (too large for max_grid_bytes), all rows exact
  bool declined = false;  // options.max_exact_fraction exceeded: `out` is not computed
  int passes = 0;         // grid passes run (1, or 2 with the finer retry)
  GaussGridPlan plan;     // of the last pass
  Eigen::Index nodes = 0;          // grid nodes
  Eigen::Index rows_expanded = 0;  // rows certified from the expansion
  Eigen::Index rows_exact = 0;     // rows summed exactly (or, with defer_rejected, left unset)
  std::vector<Eigen::Index> rejected;  // with options.defer_rejected: the rows left unset, ascending
};

// out (m x c) as above. targets m x k and sources n x k with k in 1..3, log_weights n (-inf: weight
// 0; at least one finite), values n x c, s > 0. Throws std::invalid_argument on other shapes.
// Thread-parallel (OpenMP); memory O(n + m) plus the grid (stats.nodes x p^k x C doubles, two
// buffers; C = c + 2, or 1 when c = 0).
// With `log_partition` (m), also L_i = log sum_j exp(l_j - s |y_i - x_j|^2), within tol of the
// exact value (the certificate also asks the sum's relative error to be below tol).
GaussAverageStats gauss_average(const GaussMatrix& targets, const GaussMatrix& sources,
                                const Eigen::VectorXd& log_weights, const GaussMatrix& values, double s,
                                const GaussAverageOptions& options, GaussMatrix& out,
                                Eigen::VectorXd* log_partition = nullptr);

// ---- softmax averages (src/fast_gauss/softmax_form.cpp) -----------------------------------------
// For queries q_i (m x k), keys k_j (n x k), log-weights log a_j (n) and values v_j (n x c):
//   P_ij = a_j exp(<q_i, k_j>) / sum_j' a_j' exp(<q_i, k_j'>),   out_i = sum_j P_ij v_j   (m x c)
// (the logits' scale folded into q and k), with gauss_average's guarantee for every row.
//
// The Gauss form is not unique. With mu the keys' mean, <q, k - mu> differs from <q, k> by a
// constant per row (it cancels in P), and for any invertible M, <q, k - mu> = <q~, k~> with
// q~ = M^-T q, k~ = M (k - mu), and exp(<q~, k~>) = exp(|q~|^2 / 2) exp(|k~|^2 / 2) exp(-|q~ - k~|^2 / 2):
// gauss_average with targets q~, sources k~, s = 1/2 and log-weights log a_j + |k~_j|^2 / 2.
// The form chosen here: M = f C^(-1/2), C the keys' covariance (eigenvalues floored at 1e-12 of the
// largest), f = `stretch`. For f = 1 and Gaussian keys, the mean of the keys weighted by
// exp(<q~, k~>) is q~ itself, so each row's heaviest keys lie near its target and the certificate's
// envelope is within a few times the sum. The plain form (M = I) puts them up to the clouds' width
// away once Q x and K x differ in extent, and its certificate rejects nearly every row.
struct SoftmaxGaussForm {
  GaussMatrix targets, sources;  // q~ (m x k), k~ (n x k)
  Eigen::VectorXd log_weights;   // log a_j + |k~_j|^2 / 2
  Eigen::VectorXd row_offset;    // per query: log sum_j a_j exp(<q_i, k_j>) = Gauss form's + this
};
// With `weighted_moments`, mu and C are the keys' mean and covariance weighted by a_j / sum a (the
// keys as the measure sum_j a_j delta_kj) instead of uniformly: the same form when the a_j are equal.
// With `centre` c (k entries, in the form's coordinates), the sources are k~ - c instead, using
// <q~, k~> = <q~, c> + <q~, k~ - c> (row_offset gains <q~, c>): the same sums, with every key
// moved by -c in the Gauss form.
SoftmaxGaussForm softmax_gauss_form(const GaussMatrix& queries, const GaussMatrix& keys,
                                    const Eigen::VectorXd& log_weights, double stretch = 1.0,
                                    const Eigen::RowVectorXd* centre = nullptr, bool weighted_moments = false);

// out (m x c) and, with `log_partition`, L_i = log sum_j a_j exp(<q_i, k_j>), as above. Queries
// beyond the keys' cloud have their heaviest keys on its edge, farther from q~ than its width: the
// rows the first form's certificate rejects are tried again with the stretch doubled (keys spread
// wider, queries drawn in), up to kSoftmaxRetries times. Keys that are not one cloud (tokens
// gathered into clusters, a few still between them) defeat every such form: a row's heaviest keys
// are the extreme ones in its query's direction, far from its target. So the rows still rejected
// are grouped by the cube of side kCentredCell their whitened target q~ falls in (at most
// kCentredGroups groups of kCentredMinRows rows or more, the largest first), and each group is
// summed by the whitened form at stretch f centred (above) at c = f k~* - t / f, t the group's mean
// target and k~* its heaviest key (the largest log a_j + <t, k~_j>): that key then sits on the
// group's mean target t / f. Keys beside the target whose logits are close to the largest need few
// bandwidths between them, so f runs through kCentredStretches (the cubes' side scaled by f), each
// on the rows still left, while the grids' predicted work stays below options.max_cost_per_pair
// per pair of the rows the centred passes start with; a group too small to pay for the cheapest
// grid of any extent is not tried. What is left is summed exactly. Stats sum
// the passes (plan and nodes: the first form's); options.max_exact_fraction applies to the rows
// left for exact sums at the end. Shapes and throws as gauss_average's. `first_form`, when given,
// is softmax_gauss_form(queries, keys, log_weights) already built by the caller (for its plan): the
// first pass uses it instead of forming it again. `weighted_moments`: every form's (above).
constexpr int kSoftmaxRetries = 3;
constexpr double kCentredCell = 1.5;
constexpr int kCentredGroups = 64;
constexpr Eigen::Index kCentredMinRows = 64;
constexpr double kCentredStretches[] = {1.0, 0.5, 0.25, 0.125};
GaussAverageStats softmax_average(const GaussMatrix& queries, const GaussMatrix& keys,
                                  const Eigen::VectorXd& log_weights, const GaussMatrix& values,
                                  const GaussAverageOptions& options, GaussMatrix& out,
                                  Eigen::VectorXd* log_partition = nullptr,
                                  const SoftmaxGaussForm* first_form = nullptr, bool weighted_moments = false);

// ---- Gauss averages with the softmax forms' retries (src/fast_gauss/softmax_form.cpp) ------------
// gauss_average's problem and contract (targets y_i, sources x_j, s > 0), for targets that need not
// lie in the sources' cloud (l2 attention's Q x and K x, of different extents and centres). The
// rows gauss_average's certificate rejects (a target beyond the cloud has its heaviest sources on
// the cloud's edge, many bandwidths from it) are summed again by softmax_average, since with c the
// sources' mean, y' = y - c and x' = x - c,
//   -s |y - x|^2 = -s |y'|^2 + <sqrt(2s) y', sqrt(2s) x'> - s |x'|^2:
// P_ij is the softmax average's with queries sqrt(2s) y'_i, keys sqrt(2s) x'_j and log-weights
// l_j - s |x'_j|^2, and the log-partitions differ by s |y'_i|^2; its forms take the keys' moments
// weighted by a_j exp(-s |x'_j|^2) (their Gaussian, (C^-1 + 2s I)^-1 for sources N(mu, C), is the
// one whose whitening puts a row's heaviest sources on its target). Where |x'|^2 leaves double's
// range, the rejected rows are summed exactly, as gauss_average does. gauss_average runs first
// because its form is the cheaper one where it certifies the rows: a cloud narrower than a
// bandwidth (whitening would spread it over several) or much wider (each row's sources are then
// local). options.max_exact_fraction counts the rows summed exactly out of all m;
// options.defer_rejected must be false.
GaussAverageStats gauss_average_retried(const GaussMatrix& targets, const GaussMatrix& sources,
                                        const Eigen::VectorXd& log_weights, const GaussMatrix& values, double s,
                                        const GaussAverageOptions& options, GaussMatrix& out,
                                        Eigen::VectorXd* log_partition = nullptr);

// ---- reference (src/fast_gauss/reference.cpp) ---------------------------------------------------
// Double loops in float64 with the log-sum-exp shift per row: the oracle of the tests.
GaussMatrix reference_gauss_average(const GaussMatrix& targets, const GaussMatrix& sources,
                                    const Eigen::VectorXd& log_weights, const GaussMatrix& values, double s);

}  // namespace tokenflow
