// The epsilon stages of the Sinkhorn solvers (stages.hpp): the log-domain stage, the kernel-mode
// stage (scaling iteration, float64 check, log-domain finish) and the symmetric stage, with the
// passes over C they share (the plan's measure, the exact columns of a potential).
#include "stages.hpp"

#include <algorithm>
#include <utility>
#include <cmath>
#include <limits>
#include <vector>

#include "../simd/exp.hpp"
#include "anderson.hpp"
#include "parallel_pairs.hpp"
#include "../simd/sum.hpp"
#include "tokenflow/error.hpp"

namespace tokenflow::stages {

void check_finite(const Eigen::VectorXd& v) {
  if (!v.allFinite())
    throw NumericalFailure("the Sinkhorn potentials left the range of double (cost or weights out of range)");
}

namespace {

bool progress_allows(const SinkhornOptions& options, int iteration, double error) {
  if (!options.progress || iteration % std::max(1, options.progress_every) != 0) return true;
  return options.progress(iteration, error);
}

// Row marginal error of the plan (f, g) whose columns are exact: with f_new = softmin_rows(g),
// (pi 1)_i = a_i exp((f_i - f_new_i) / eps), so the error costs no extra pass over C. Far from
// convergence the exponential may overflow to +inf, which is a (huge) error, not a failure.
double balanced_row_error(const Eigen::VectorXd& a, const Eigen::VectorXd& f, const Eigen::VectorXd& f_new, double eps) {
  double err = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i) err += a[i] * std::abs(std::expm1((f[i] - f_new[i]) / eps));
  return err;
}

// a_i exp(-v_i / rho), 0 where a_i = 0 (an empty bin's target, whatever its potential).
Eigen::VectorXd penalized_target(const Eigen::VectorXd& a, const Eigen::VectorXd& v, double rho) {
  Eigen::VectorXd t(a.size());
  for (Eigen::Index i = 0; i < a.size(); ++i) t[i] = a[i] == 0.0 ? 0.0 : a[i] * std::exp(-v[i] / rho);
  return t;
}

// (1 + d) log(1 + d) - d, the generalized KL's a phi(r / a - 1) per unit of a: by its series
// sum_{k >= 2} (-d)^k / (k (k - 1)) for |d| < 1/8 (where the closed form loses the digits of its
// d^2 / 2 to the cancellation of d; 24 terms leave 8^-24 / 552 relative), else the closed form.
double kl_unit(double d) {
  if (d == -1.0) return 1.0;  // r_i = 0 (a row sum that underflows): the limit of (1 + d) log(1 + d) is 0
  if (std::abs(d) >= 0.125) return (1.0 + d) * std::log1p(d) - d;
  double term = -d, total = 0.0;  // (-d)^k
  for (int k = 2; k <= 25; ++k) {
    term *= -d;
    total += term / (static_cast<double>(k) * (k - 1));
  }
  return total;
}

// KL(r | a) = sum_i r_i log(r_i / a_i) - r_i + a_i (ot.hpp): a_i (kl_unit(r_i / a_i - 1)); an empty
// bin (a_i = 0) adds 0 when r_i = 0 and +inf otherwise.
double generalized_kl(const Eigen::VectorXd& r, const Eigen::VectorXd& a) {
  double total = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    if (a[i] == 0.0) {
      total += r[i] == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
      continue;
    }
    total += a[i] * kl_unit(r[i] / a[i] - 1.0);
  }
  return total;
}

// (4 u / eps) (sum_i (pi 1)_i |f_i + c| + sum_j b_j |g_j - c|) for the plan of (f, g) with exact
// columns, (pi 1)_i = a_i exp((f_i - f_new_i) / eps): the part of its rounding floor (PlanMeasure)
// that the potentials alone give (below).
double potential_floor(const SinkhornProblem& p, double eps, const Eigen::VectorXd& f, const Eigen::VectorXd& f_new,
                       const Eigen::VectorXd& g, double c) {
  double rows = 0.0, columns = 0.0;
  for (Eigen::Index i = 0; i < f.size(); ++i) rows += p.a[i] * std::exp((f[i] - f_new[i]) / eps) * std::abs(f[i] + c);
  for (Eigen::Index j = 0; j < g.size(); ++j) columns += p.b[j] * std::abs(g[j] - c);
  return 4.0 * 0x1p-53 / eps * (rows + columns);
}

// The error below which a loop measures its plan: tol, or, when tol lies below the plan's rounding
// floor, a lower bound of that floor, so that the loop stops where its arithmetic stops improving
// the plan rather than iterating on towards a tol no plan of doubles can honour. The floor is at
// least 2 sum_ij pi_ij 2 u (|f_i| + |g_j|) / eps (two of the terms of its delta_ij) for the
// potentials as they are measured, centered (center_potentials: f + c, g - c with c =
// centering_shift), which is potential_floor at that c. The uncentered sums bound it from above
// (the centering makes them smallest), so the sort of centering_shift runs only for an error
// below them. Measured on POT's 1-D stabilization problem (two Gaussians on 100 bins, squared
// index distances, eps = 1e-5, tol 1e-9, rounding floor 1.6e-8): its final stage's error estimate
// reached 1e-9 only now and then, after 19 000 iterations, at a plan whose measured error (1.8e-8)
// was at its floor thousands of iterations earlier.
// Balanced problems only: the unbalanced potentials have no gauge to centre.
double stop_error(const SinkhornProblem& p, double eps, double tol, double error, const Eigen::VectorXd& f,
                  const Eigen::VectorXd& f_new, const Eigen::VectorXd& g) {
  if (!balanced(p)) return tol;
  const double upper = potential_floor(p, eps, f, f_new, g, 0.0);
  if (!(upper > tol) || !(error < upper)) return tol;
  return std::max(tol, potential_floor(p, eps, f, f_new, g, centering_shift(p.a, p.b, f, g)));
}

// The next iterate of the log-domain loop from f (whose plan has row error `error`) and f_new =
// softmin_rows(softmin_cols(f)), the plain Sinkhorn step, chosen by the options as in kernel mode
// (ot.hpp): overrelaxation 0 with anderson_depth > 0: Anderson acceleration of x = f / eps
// (anderson.hpp); overrelaxation w in (1, 2): f + w (f_new - f); otherwise (w = 1, or depth 0)
// the plain step f_new.
// Safeguards, since both accelerations are only locally convergent: the Anderson history is
// dropped (the next step is the plain one) when the error grows above twice the best seen since
// the last restart, or when `depth` iterations in a row found no new best (a stalled
// extrapolation); each restart starts its own best. The extrapolation is regularized
// (anderson.hpp). Measured (docs/ot.md, "Acceleration"): on POT's 1-D stabilization problem at
// eps / range = 1e-5 without scaling, the unguarded history ended 20 000 iterations at error 0.34,
// the plain loop at 1.9e-4. With a best kept across restarts, one lucky low error disabled the
// acceleration for good (every later error was above twice it): on a trained model's
// near-permutation cost, cost perturbations of 1e-13 then decided between convergence and a
// stall at 1e-6; with per-restart bests all seven perturbations converged, in 323 to 4126
// iterations (tokenflow.sinkhorn on the saved cost).
class LogDomainStep {
 public:
  LogDomainStep(const SinkhornProblem& p, double eps)
      : eps_(eps),
        omega_(p.options.overrelaxation),
        depth_(p.options.overrelaxation == 0.0 ? std::max(0, p.options.anderson_depth) : 0),
        history_(std::max(1, depth_), p.a, kRegularization) {}

  // f <- the next iterate (f_new may be swapped into it).
  void next(double error, Eigen::VectorXd& f_new, Eigen::VectorXd& f) {
    if (depth_ > 0) {
      if (error < best_) {
        best_ = error;
        since_best_ = 0;
      } else {
        ++since_best_;
      }
      if (error > 2.0 * best_ || since_best_ >= depth_) {
        history_.clear();
        since_best_ = 0;
        best_ = error;  // the next comparison is with this restart's own errors
      }
      G_ = f_new / eps_;
      R_ = G_ - f / eps_;
      history_.step(G_, R_, x_);
      f = eps_ * x_;
      return;
    }
    if (omega_ > 1.0) {
      f += omega_ * (f_new - f);
      return;
    }
    f.swap(f_new);
  }

 private:
  static constexpr double kRegularization = 1e-6;  // anderson.hpp: regularized extrapolation
  double eps_, omega_;
  int depth_;
  AndersonHistory history_;
  Eigen::VectorXd G_, R_, x_;
  double best_ = std::numeric_limits<double>::infinity();
  int since_best_ = 0;
};

}  // namespace

double row_error(const SinkhornProblem& p, const Eigen::VectorXd& f, const Eigen::VectorXd& f_new, double eps) {
  if (balanced(p)) return balanced_row_error(p.a, f, f_new, eps);
  const double rho = p.options.marginal_penalty, damped = eps * damping(p, eps);
  double err = 0.0;
  for (Eigen::Index i = 0; i < p.a.size(); ++i)
    if (p.a[i] != 0.0) err += p.a[i] * std::exp(-f[i] / rho) * std::abs(std::expm1((f[i] - f_new[i]) / damped));
  return err;
}

void report_progress(const SinkhornOptions& options, int iteration, double error) {
  if (!progress_allows(options, iteration, error)) throw Cancelled();
}

namespace {

// Rows per block in the column passes below: each block of rows keeps its own column vector and
// the blocks are combined in block order, so the result does not depend on the thread count.
constexpr Eigen::Index kColumnBlock = 128;

// Column j of the (blocks x m) partial results combined in block order: combine(acc, next).
template <class Combine>
void combine_blocks(const std::vector<double>& blocks, Eigen::Index m, Eigen::VectorXd& out, Combine combine) {
  const Eigen::Index count = static_cast<Eigen::Index>(blocks.size()) / std::max<Eigen::Index>(m, 1);
  out.resize(m);
  for (Eigen::Index j = 0; j < m; ++j) out[j] = blocks[static_cast<std::size_t>(j)];
  for (Eigen::Index k = 1; k < count; ++k)
    for (Eigen::Index j = 0; j < m; ++j) out[j] = combine(out[j], blocks[static_cast<std::size_t>(k * m + j)]);
}

// a + b = s + e exactly (Knuth's TwoSum).
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

// sum += v with Neumaier's compensation (the running error in comp).
inline void add_compensated(double v, double& sum, double& comp) {
  const double t = sum + v;
  comp += std::abs(sum) >= std::abs(v) ? (sum - t) + v : (v - t) + sum;
  sum = t;
}

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The constant of PlanMeasure's form_ij (stages.hpp), in units of u: 2 for the roundings of x
// beyond its 3 |x| + |log a_i| + |log b_j|, and simd::exp_poly's kExpUlps ulp (2 kExpUlps u).
constexpr double kFormConstant = 2.0 + 2.0 * simd::kExpUlps;

// sum_j v_j with Neumaier's compensation in simd::kSumLanes fixed lanes (lane l takes j = l mod
// kSumLanes), the lanes' sums and errors combined in lane order: vectorizes, and the order does not
// depend on the address or the ISA.
double compensated_row_sum(const double* __restrict v, Eigen::Index m) {
  constexpr int L = simd::kSumLanes;
  double sum[L] = {0, 0, 0, 0, 0, 0, 0, 0}, comp[L] = {0, 0, 0, 0, 0, 0, 0, 0};
  Eigen::Index j0 = 0;
  for (; j0 + L <= m; j0 += L)
#pragma omp simd
    for (int l = 0; l < L; ++l) add_compensated(v[j0 + l], sum[l], comp[l]);
  for (int l = 0; j0 + l < m; ++l) add_compensated(v[j0 + l], sum[l], comp[l]);
  double total = 0.0, total_comp = 0.0;
  for (int l = 0; l < L; ++l) {
    add_compensated(sum[l], total, total_comp);
    total_comp += comp[l];
  }
  return total + total_comp;
}

}  // namespace

double centering_shift(const Eigen::VectorXd& a, const Eigen::VectorXd& b, const Eigen::VectorXd& f,
                       const Eigen::VectorXd& g) {
  std::vector<std::pair<double, double>> points;  // (value, weight)
  points.reserve(static_cast<std::size_t>(f.size() + g.size()));
  for (Eigen::Index i = 0; i < f.size(); ++i) points.emplace_back(-f[i], a[i]);
  for (Eigen::Index j = 0; j < g.size(); ++j) points.emplace_back(g[j], b[j]);
  std::sort(points.begin(), points.end());
  const double half = 0.5 * (a.sum() + b.sum());
  double cumulative = 0.0;
  for (const auto& [value, weight] : points) {
    cumulative += weight;
    if (cumulative >= half) return value;
  }
  return 0.0;
}

namespace {

// An unbalanced plan's errors, objective and the targets' rounding (stages.hpp, PlanMeasure) from its
// row sums r (n), column sums c (m) and pairs_objective = sum_ij pi_ij (f_i + g_j); out.mass is set.
// inflate: the operator's relative error per sum (measure_plan_by_softmin), added as there.
void measure_unbalanced(const SinkhornProblem& p, double eps, const Eigen::VectorXd& f, const Eigen::VectorXd& g,
                        const Eigen::VectorXd& r, const Eigen::VectorXd& c, double pairs_objective, double inflate,
                        PlanMeasure& out) {
  constexpr double u = 0x1p-53;
  const double rho = p.options.marginal_penalty;
  const Eigen::VectorXd t = penalized_target(p.a, f, rho), s = penalized_target(p.b, g, rho);
  out.row_error = (r - t).cwiseAbs().sum() + inflate * r.sum();
  out.column_error = (c - s).cwiseAbs().sum() + inflate * c.sum();
  out.marginal_error = out.row_error + out.column_error;
  out.objective = pairs_objective - eps * (out.mass - p.a.sum() * p.b.sum()) +
                  rho * (generalized_kl(r, p.a) + generalized_kl(c, p.b));
  out.rounding_floor += 2.0 * u * ((t.array() * (f.array().abs() / rho + 2.0)).sum() +
                                   (s.array() * (g.array().abs() / rho + 2.0)).sum());
}

// The plan of (f, g) measured from four soft-mins, for operators that do not visit pairs
// (SoftMin::visits_pairs): its row sums (pi 1)_i = a_i exp((f_i - f'_i) / eps) with f' =
// softmin_rows(g), its column sums b_j exp((g_j - g'_j) / eps) with g' = softmin_cols(f), its cost
// sum_i (pi 1)_i E_i[C] (SoftMin::row_mean_cost) and objective sum_i (pi 1)_i f_i + sum_j (pi^T
// 1)_j g_j. An operator whose sums carry a relative error up to e (softmin_relative_error) measures
// each row sum as r_i (1 + e_i), |e_i| <= e, so |r_i - a_i| <= |measured - a_i| + measured e / (1 -
// e): the marginal error reported adds e / (1 - e) times both measured masses, an upper bound of
// the plan's error, never an estimate below it. The rounding floor is bounded from the largest
// potentials, costs and log-weights (the per-entry terms of PlanMeasure's floor at their maxima),
// plus 2 e / (1 - e), under which the operator cannot certify a marginal error.
PlanMeasure measure_plan_by_softmin(const SinkhornProblem& p, double eps, const Eigen::VectorXd& f,
                                    const Eigen::VectorXd& g) {
  const SoftMin& op = p.op;
  constexpr double u = 0x1p-53;
  const double inv = 1.0 / eps, e = op.softmin_relative_error(), inflate = e / (1.0 - e);
  const Eigen::VectorXd h_cols = p.log_b + g * inv, h_rows = p.log_a + f * inv;
  Eigen::VectorXd f_new, g_new, mean_cost;
  op.softmin_rows(eps, h_cols, f_new);
  op.softmin_cols(eps, h_rows, g_new);
  op.row_mean_cost(eps, h_cols, mean_cost);
  const Eigen::VectorXd row_sum = p.a.array() * ((f - f_new).array() * inv).exp();
  const Eigen::VectorXd column_sum = p.b.array() * ((g - g_new).array() * inv).exp();
  PlanMeasure out;
  out.mass = row_sum.sum();
  const double column_mass = column_sum.sum();
  out.cost = row_sum.dot(mean_cost);
  out.objective = row_sum.dot(f) + column_sum.dot(g);
  out.row_error = (row_sum - p.a).cwiseAbs().sum() + inflate * out.mass;
  out.column_error = (column_sum - p.b).cwiseAbs().sum() + inflate * column_mass;
  out.marginal_error = out.row_error + out.column_error;
  const auto finite_max = [](const Eigen::VectorXd& v) {
    double top = 0.0;
    for (double x : v)
      if (std::isfinite(x)) top = std::max(top, std::abs(x));
    return top;
  };
  const double fg = f.cwiseAbs().maxCoeff() + g.cwiseAbs().maxCoeff(),
               fgc = fg + op.cost_magnitude();
  const double logs = finite_max(p.log_a) + finite_max(p.log_b);
  double entry =
      u * (3.0 * (logs + fgc * inv) + logs + 4.0) + 2.0 * u * u * fgc * inv + u * (fg + fgc) * inv;
  // An approximating operator (the grid) also rounds its own terms: GridSoftMin forms each
  // soft-min from three terms below 16 S, S <= max|C| + eps max|h| <= max|C| + |g| + eps |log b|
  // (grid_softmin.cpp, kTermBound), a few roundings each: 256 u S in the soft-min, so 256 u S / eps
  // in the exponent of a row or column sum.
  if (e > 0.0) entry += 256.0 * u * (fgc + eps * logs) * inv;
  out.rounding_floor =
      2.0 * out.mass * entry + 4.0 * u * out.mass + 2.0 * inflate * std::max(out.mass, column_mass);
  if (!balanced(p)) measure_unbalanced(p, eps, f, g, row_sum, column_sum, out.objective, inflate, out);
  return out;
}

}  // namespace

// One pass over C by blocks of rows (stages.hpp, PlanMeasure): each row's sums in a fixed order
// inside one thread, each block's column sums in its own vector, combined in block order, so the
// result does not depend on the thread count. Operators that do not visit pairs measure it from
// soft-mins instead (measure_plan_by_softmin) unless the plan itself is asked for.
PlanMeasure measure_plan(const SinkhornProblem& p, double eps, bool want_plan, const Eigen::VectorXd& f_in,
                         const Eigen::VectorXd& g_in) {
  const SoftMin& op = p.op;
  if (!want_plan && !op.visits_pairs()) return measure_plan_by_softmin(p, eps, f_in, g_in);
  const Eigen::Index n = op.rows(), m = op.cols(), blocks = (n + kColumnBlock - 1) / kColumnBlock;
  constexpr double u = 0x1p-53;
  PlanMeasure out;
  if (want_plan) out.plan.resize(n, m);
  Eigen::VectorXd row_cost(n), row_objective(n), row_sum(n), row_floor(n);
  std::vector<double> column_sum(static_cast<std::size_t>(blocks * m)), column_comp(column_sum.size());
  const double inv = 1.0 / eps;
  const double* const g = g_in.data();
  const double* const log_b = p.log_b.data();
#pragma omp parallel if (parallel_pairs(static_cast<double>(n * m)))
  {
    std::vector<double> buffer(static_cast<std::size_t>(m)), entries(want_plan ? 0 : static_cast<std::size_t>(m)),
        exponents(static_cast<std::size_t>(m));
#pragma omp for schedule(dynamic, pair_chunk(static_cast<double>(kColumnBlock * m)))
    for (Eigen::Index k = 0; k < blocks; ++k) {
      double* __restrict w = column_sum.data() + k * m;
      double* __restrict wc = column_comp.data() + k * m;
      std::fill(w, w + m, 0.0);
      std::fill(wc, wc + m, 0.0);
      for (Eigen::Index i = k * kColumnBlock; i < std::min(n, (k + 1) * kColumnBlock); ++i) {
        const double* __restrict c = op.cost_row(i, buffer.data());
        const double fi = f_in[i], la = p.log_a[i];
        double* __restrict pi = want_plan ? out.plan.data() + i * m : entries.data();
        double* __restrict x = exponents.data();
        // The entries, vectorized: simd::exp_poly where std::exp is a call per pair (half of a
        // short solve's time went here). Entries below 2^-1021 come out 0 (exp_poly flushes them),
        // and so do forbidden pairs (C_ij = +inf, ot.hpp), whose TwoSum would be NaN.
#pragma omp simd
        for (Eigen::Index j = 0; j < m; ++j) {
          double s1, e1, s2, e2;
          two_sum(fi, g[j], s1, e1);
          two_sum(s1, -c[j], s2, e2);
          x[j] = c[j] < kInfinity ? (la + log_b[j]) + (s2 + (e1 + e2)) * inv : -kInfinity;
          pi[j] = simd::exp_poly(x[j]);
        }
        // Column sums: each column's own compensated sum, independent across j.
#pragma omp simd
        for (Eigen::Index j = 0; j < m; ++j) add_compensated(pi[j], w[j], wc[j]);
        // Row sums in simd::ordered_sum's fixed lanes (the same bits at any address and thread
        // count); a zero entry adds nothing (its cost or exponent may be infinite).
        double cost = 0.0, objective = 0.0, floor = 0.0;
        simd::ordered_sum3(
            m,
            [&](Eigen::Index j, double& cs, double& os, double& fs) {
              const bool live = pi[j] != 0.0;
              const double fg = std::abs(fi) + std::abs(g[j]), fgc = fg + std::abs(c[j]);
              const double form =
                  u * (3.0 * std::abs(x[j]) + std::abs(la) + std::abs(log_b[j]) + kFormConstant) + 2.0 * u * u * fgc * inv;
              cs += live ? pi[j] * c[j] : 0.0;
              os += live ? pi[j] * (fi + g[j]) : 0.0;
              fs += live ? pi[j] * (form + u * (fg + fgc) * inv) : 0.0;
            },
            cost, objective, floor);
        row_cost[i] = cost;
        row_objective[i] = objective;
        row_sum[i] = compensated_row_sum(pi, m);
        row_floor[i] = floor;
      }
    }
  }
  Eigen::VectorXd column_total = Eigen::VectorXd::Zero(m), column_total_comp = Eigen::VectorXd::Zero(m);
  for (Eigen::Index k = 0; k < blocks; ++k)
    for (Eigen::Index j = 0; j < m; ++j) {
      add_compensated(column_sum[static_cast<std::size_t>(k * m + j)], column_total[j], column_total_comp[j]);
      add_compensated(column_comp[static_cast<std::size_t>(k * m + j)], column_total[j], column_total_comp[j]);
    }
  column_total += column_total_comp;
  out.cost = row_cost.sum();
  out.objective = row_objective.sum();
  out.mass = row_sum.sum();
  out.row_error = (row_sum - p.a).cwiseAbs().sum();
  out.column_error = (column_total - p.b).cwiseAbs().sum();
  out.marginal_error = out.row_error + out.column_error;
  out.rounding_floor = 2.0 * row_floor.sum() + 4.0 * u * out.mass;
  if (!balanced(p)) measure_unbalanced(p, eps, f_in, g_in, row_sum, column_total, out.objective, 0.0, out);
  return out;
}

namespace {

// g_j = min_i (C_ij - f_i), the c-transform of f (the eps -> 0 limit of the column soft-min),
// without exponentials: afterwards f_i + g_j - C_ij <= 0 for every pair, with equality somewhere
// in every column, so exact_columns_near (below) may start from it: its sums S_j lie in
// [min_i a_i, 1].
void column_c_transform(const SoftMin& op, const Eigen::VectorXd& f, Eigen::VectorXd& g) {
  const Eigen::Index n = op.rows(), m = op.cols(), blocks = (n + kColumnBlock - 1) / kColumnBlock;
  std::vector<double> block_min(static_cast<std::size_t>(blocks * m));
#pragma omp parallel if (parallel_pairs(static_cast<double>(n * m)))
  {
    std::vector<double> buffer(static_cast<std::size_t>(m));
#pragma omp for schedule(dynamic, pair_chunk(static_cast<double>(kColumnBlock * m)))
    for (Eigen::Index k = 0; k < blocks; ++k) {
      double* __restrict w = block_min.data() + k * m;
      std::fill(w, w + m, std::numeric_limits<double>::infinity());
      for (Eigen::Index i = k * kColumnBlock; i < std::min(n, (k + 1) * kColumnBlock); ++i) {
        const double* __restrict c = op.cost_row(i, buffer.data());
        const double fi = f[i];
#pragma omp simd
        for (Eigen::Index j = 0; j < m; ++j) w[j] = std::min(w[j], c[j] - fi);
      }
    }
  }
  combine_blocks(block_min, m, g, [](double x, double y) { return std::min(x, y); });
}

// The exact g of f (g_j = -eps log sum_i exp(log a_i + (f_i - C_ij) / eps), what softmin_cols
// computes) in one pass over C by rows, shifted by the current g, which must be close to it (the
// kernel's): S_j = sum_i exp(log a_i + (f_i + g_j - C_ij) / eps) is then near 1, and g_j -= eps
// log S_j. Each term and its rounding are those of the streaming log-sum-exp (a shift that is
// not the maximum only changes which terms are near 1). Returns false, g unchanged, when some
// S_j leaves [2^-900, 2^900] (the shift was not close): then the caller uses softmin_cols.
bool exact_columns_near(const SoftMin& op, const Eigen::VectorXd& log_a, double eps,
                        const Eigen::VectorXd& f, Eigen::VectorXd& g) {
  const Eigen::Index n = op.rows(), m = op.cols(), blocks = (n + kColumnBlock - 1) / kColumnBlock;
  const double inv = 1.0 / eps;
  const Eigen::VectorXd hf = log_a + f * inv, hg = g * inv;
  std::vector<double> block_sum(static_cast<std::size_t>(blocks * m));
  const double* hgd = hg.data();
#pragma omp parallel if (parallel_pairs(static_cast<double>(n * m)))
  {
    std::vector<double> buffer(static_cast<std::size_t>(m));
#pragma omp for schedule(dynamic, pair_chunk(static_cast<double>(kColumnBlock * m)))
    for (Eigen::Index k = 0; k < blocks; ++k) {
      double* __restrict w = block_sum.data() + k * m;
      std::fill(w, w + m, 0.0);
      for (Eigen::Index i = k * kColumnBlock; i < std::min(n, (k + 1) * kColumnBlock); ++i) {
        const double* __restrict c = op.cost_row(i, buffer.data());
        const double* __restrict hgj = hgd;
        const double h = hf[i], scale = inv;
#pragma omp simd
        for (Eigen::Index j = 0; j < m; ++j) w[j] += simd::exp_poly(h + hgj[j] - c[j] * scale);
      }
    }
  }
  Eigen::VectorXd total;
  combine_blocks(block_sum, m, total, [](double x, double y) { return x + y; });
  for (double t : total)
    if (!(t >= 0x1p-900 && t <= 0x1p900)) return false;
  for (Eigen::Index j = 0; j < m; ++j) g[j] -= eps * std::log(total[j]);
  return true;
}

// g exact for f: exact_columns_near from the given g, else (out of range, or an operator that does
// not visit pairs) the column soft-min.
void exact_columns(const SinkhornProblem& p, double eps, const Eigen::VectorXd& f, Eigen::VectorXd& g) {
  if (p.op.visits_pairs() && exact_columns_near(p.op, p.log_a, eps, f, g)) return;
  const Eigen::VectorXd h_rows = p.log_a + f / eps;
  p.op.softmin_cols(eps, h_rows, g);
}

}  // namespace

double center_potentials(const SinkhornProblem& p, double eps, Eigen::VectorXd& f, Eigen::VectorXd& g) {
  if (!balanced(p)) return 0.0;  // no gauge (stages.hpp)
  const double c = centering_shift(p.a, p.b, f, g);
  if (c == 0.0) return c;
  f.array() += c;
  g.array() -= c;
  exact_columns(p, eps, f, g);
  check_finite(g);
  return c;
}

bool CoarsePhase::use(const Eigen::VectorXd& h) {
  if (!armed_) return false;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (Eigen::Index j = 0; j < h.size(); ++j)
    if (h[j] > -std::numeric_limits<double>::infinity()) {
      lo = std::min(lo, h[j]);
      hi = std::max(hi, h[j]);
    }
  delta_ = std::max(delta_, op_.coarse_error(cost_size_ + (hi > lo ? hi - lo : 0.0)));
  if (!(delta_ <= kCoarseLimit)) armed_ = false;
  return armed_ && on_;
}

void CoarsePhase::measured(double error, double tol, bool coarse) {
  if (!armed_) return;
  if (!(error >= kCoarseMargin * std::max(delta_, tol))) {
    armed_ = false;  // near tol (or NaN): float64 from here
  } else if (!coarse) {
    on_ = true;  // a float64 iterate far from tol
  } else if (!std::isfinite(error)) {
    // a cold start's overflow (row_error's +inf): no progress to judge yet
  } else if (error < best_) {
    best_ = error;
    stall_ = 0;
  } else if (++stall_ >= kCoarseStall) {
    armed_ = false;
  }
}

bool CoarsePhase::softmin(SoftMinPart fine, SoftMinPart coarse, double eps, const Eigen::VectorXd& h,
                          Eigen::VectorXd& out) {
  const bool on = use(h);
  (op_.*(on ? coarse : fine))(eps, h, out);
  return on;
}

bool CoarsePhase::softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) {
  return softmin(&SoftMin::softmin_cols, &SoftMin::softmin_cols_coarse, eps, h, out);
}

bool CoarsePhase::softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) {
  return softmin(&SoftMin::softmin_rows, &SoftMin::softmin_rows_coarse, eps, h, out);
}

// From s.g (WarmStart::from_g: f = softmin_rows(g) first) or s.f. Each iteration makes the
// columns exact (g = softmin_cols(f), Eq. (23) of Feydy et al.), then computes f_new =
// softmin_rows(g) and from it the row error of (f, g); below s.tol the stage stops (converged),
// else f moves to the next iterate (LogDomainStep: f_new itself, Anderson's extrapolation or the
// over-relaxed f + w (f_new - f)). Out of iterations it returns the iterate with the smallest
// error seen (g exact for it), so every accelerated iterate is reported with the error of its own
// plan and a late excursion of the extrapolation is not what is returned. With p.beside, each
// iteration advances the plain loop too, and the stage stops (out_of_iterations) once it is done.
// Throws NumericalFailure, or Cancelled (progress).
StageResult log_domain_stage(const SinkhornProblem& p, SinkhornStage s) {
  const Eigen::Index n = p.op.rows(), m = p.op.cols();
  const double eps = s.epsilon;
  Eigen::VectorXd h_rows(n), h_cols(m), f_new(n), best_f, best_g;
  double best_error = std::numeric_limits<double>::infinity();
  StageResult r;
  r.f = std::move(s.f);
  r.g = std::move(s.g);
  const double tau = damping(p, eps);  // 1 when balanced: the soft-mins are not touched
  if (s.start == WarmStart::from_g) {
    h_cols = p.log_b + r.g / eps;
    p.op.softmin_rows(eps, h_cols, r.f);
    if (tau != 1.0) r.f *= tau;
  }
  LogDomainStep step(p, eps);
  CoarsePhase coarse(p, eps);
  while (r.iterations < s.budget) {
    if (r.iterations + 1 == s.budget) coarse.stop();  // the stage's last iterate is measured in float64
    h_rows = p.log_a + r.f / eps;
    const bool coarse_cols = coarse.softmin_cols(eps, h_rows, r.g);
    if (tau != 1.0) r.g *= tau;  // Eq. (U1)
    h_cols = p.log_b + r.g / eps;
    const bool coarse_rows = coarse.softmin_rows(eps, h_cols, f_new);
    if (tau != 1.0) f_new *= tau;
    check_finite(f_new);
    ++r.iterations;
    r.marginal_error = row_error(p, r.f, f_new, eps);
    report_progress(p.options, s.done_before + r.iterations, r.marginal_error);
    const bool beside_done = p.beside && p.beside->step();  // one iteration of each, every round
    coarse.measured(r.marginal_error, s.tol, coarse_cols || coarse_rows);
    if (coarse_cols || coarse_rows) {  // float32: steers the loop, decides nothing
      if (beside_done) break;
      if (r.iterations < s.budget) step.next(r.marginal_error, f_new, r.f);
      continue;
    }
    if (r.marginal_error < stop_error(p, eps, s.tol, r.marginal_error, r.f, f_new, r.g)) {
      r.status = StageStatus::converged;
      return r;
    }
    if (r.marginal_error < best_error) {
      best_error = r.marginal_error;
      best_f = r.f;
      best_g = r.g;
    }
    if (beside_done) break;
    if (r.iterations < s.budget) step.next(r.marginal_error, f_new, r.f);
  }
  if (best_f.size() == n) {
    r.f.swap(best_f);
    r.g.swap(best_g);
    r.marginal_error = best_error;
  }
  return r;
}

PlainLoop::PlainLoop(const SinkhornProblem& p, Eigen::VectorXd g_start, bool report_progress)
    : p_(p), report_(report_progress), target_(p.options.tol), g_(std::move(g_start)),
      best_error_(std::numeric_limits<double>::infinity()), coarse_(p, p.options.epsilon) {
  const double eps = p.options.epsilon;
  h_cols_ = p.log_b + g_ / eps;
  p.op.softmin_rows(eps, h_cols_, f_);
  f_ *= damping(p, eps);
}

bool PlainLoop::step() {
  if (done_) return true;
  const double eps = p_.options.epsilon;
  if (iterations_ + 1 >= p_.options.max_iter) coarse_.stop();  // the last iterate in float64
  const double tau = damping(p_, eps);
  h_rows_ = p_.log_a + f_ / eps;
  const bool coarse_cols = coarse_.softmin_cols(eps, h_rows_, g_);
  if (tau != 1.0) g_ *= tau;  // Eq. (U1)
  h_cols_ = p_.log_b + g_ / eps;
  const bool coarse_rows = coarse_.softmin_rows(eps, h_cols_, f_new_);
  if (tau != 1.0) f_new_ *= tau;
  check_finite(f_new_);
  ++iterations_;
  error_ = row_error(p_, f_, f_new_, eps);
  if (report_) report_progress(p_.options, iterations_, error_);
  coarse_.measured(error_, target_, coarse_cols || coarse_rows);
  if (coarse_cols || coarse_rows) {  // float32: steers the loop, decides nothing
    f_.swap(f_new_);
    return false;
  }
  if (error_ < best_error_) {
    best_error_ = error_;
    best_f_ = f_;
    best_g_ = g_;
  }
  if (error_ < stop_error(p_, eps, target_, error_, f_, f_new_, g_)) {
    f_new_.array() += center_potentials(p_, eps, f_, g_);  // softmin_rows(g - c) = f_new + c
    measured_ = measure_plan(p_, eps, p_.options.want_plan, f_, g_);
    const double tol = p_.options.tol;
    if (measured_->marginal_error < tol || tol <= measured_->rounding_floor) {
      done_ = true;
      return true;
    }
    measured_.reset();
    target_ /= 4.0;
  }
  f_.swap(f_new_);
  return false;
}

StageResult PlainLoop::result() const {
  StageResult r;
  r.iterations = iterations_;
  if (done_) {
    r.f = f_;
    r.g = g_;
    r.marginal_error = error_;
    r.status = StageStatus::converged;
    r.plan = measured_;
  } else {
    r.f = best_f_.size() ? best_f_ : f_;
    r.g = best_g_.size() ? best_g_ : g_;
    r.marginal_error = best_error_;
  }
  return r;
}

namespace {

// The options of kernel_sinkhorn_stage for a stage of `budget` iterations stopping at tol.
KernelStageOptions kernel_options(const SinkhornProblem& p, double tol, int budget, int done_before) {
  const SinkhornOptions& options = p.options;
  KernelStageOptions ko;
  ko.tol = tol;
  ko.max_iterations = budget;
  ko.omega = options.overrelaxation;
  // Adaptive (0): Anderson acceleration, which needed 40-60 % fewer iterations than the adaptive
  // over-relaxation at n = 1000-4000 (docs/speed-sinkhorn.md); a fixed w >= 1: over-relaxation.
  ko.anderson_depth = options.overrelaxation == 0.0 ? options.anderson_depth : 0;
  if (options.progress)
    ko.progress = [&options, done_before](int done, double error) {
      return progress_allows(options, done_before + done, error);
    };
  return ko;
}

// The scaling iteration at s.epsilon for at most `budget` iterations, P~ held in Scalar. It
// starts as the log-domain stage does (f from s.g), adds the exact g of that f (by rows from the
// c-transform: kernel mode never forms C^T), so that P~ starts with exact columns, and runs
// kernel_sinkhorn_stage down to s.tol. The potentials returned are the kernel's when finite,
// else those of the start; the status is the kernel's.
template <class Scalar>
StageResult scaling_stage(const SinkhornProblem& p, const SinkhornStage& s, int budget, ScalingKernel<Scalar>& kernel) {
  const double eps = s.epsilon;
  StageResult r;
  const Eigen::VectorXd h_cols = p.log_b + s.g / eps;
  p.op.softmin_rows(eps, h_cols, r.f);
  column_c_transform(p.op, r.f, r.g);
  exact_columns(p, eps, r.f, r.g);
  check_finite(r.f);
  check_finite(r.g);
  const KernelStageOptions ko = kernel_options(p, s.tol, budget, s.done_before);
  Eigen::VectorXd f = r.f, g = r.g;
  const KernelStageResult k = kernel_sinkhorn_stage(p.op, p.a, p.b, eps, ko, f, g, kernel);
  if (f.allFinite() && g.allFinite()) {
    r.f.swap(f);
    r.g.swap(g);
  }
  r.iterations = k.iterations;
  r.marginal_error = k.marginal_error;
  r.status = k.status;
  r.kernel = KernelStats{k.iterations, k.absorptions, k.omega, ko.anderson_depth};
  return r;
}

// The final stage's check of a converged kernel result in float64, as one more iteration: the
// exact g of the kernel's f (the plan's columns exact, as in the log-domain loop), then the row
// error of the plan measured in the pass that forms its cost, objective and plan (kept in
// r.plan). converged when that error is below s.tol, else out_of_iterations.
StageResult float64_check(const SinkhornProblem& p, const SinkhornStage& s, StageResult r) {
  // Centered on the kernel's g (close to the exact one); center_potentials then makes g exact for
  // the shifted f, which a zero shift leaves to exact_columns: one pass over C either way.
  if (center_potentials(p, s.epsilon, r.f, r.g) == 0.0) exact_columns(p, s.epsilon, r.f, r.g);
  check_finite(r.g);
  ++r.iterations;
  r.plan = measure_plan(p, s.epsilon, p.options.want_plan, r.f, r.g);
  r.marginal_error = r.plan->marginal_error;
  report_progress(p.options, s.done_before + r.iterations, r.marginal_error);
  r.status = r.marginal_error < s.tol ? StageStatus::converged : StageStatus::out_of_iterations;
  return r;
}

// The log-domain loop from where the kernel left the stage (r, its iterations counted), with
// the rest of the stage's budget; r itself when none is left.
StageResult finish_in_log_domain(const SinkhornProblem& p, const SinkhornStage& s, StageResult r, WarmStart start) {
  if (r.iterations == s.budget) return r;
  SinkhornStage rest;
  rest.epsilon = s.epsilon;
  rest.tol = s.tol;
  rest.budget = s.budget - r.iterations;
  rest.done_before = s.done_before + r.iterations;
  rest.final = s.final;
  rest.start = start;
  rest.f = std::move(r.f);
  rest.g = std::move(r.g);
  StageResult l = log_domain_stage(p, std::move(rest));
  l.iterations += r.iterations;
  l.kernel = r.kernel;
  return l;
}

}  // namespace

// Kernel mode (SinkhornOptions::kernel_mode): the scaling iteration from s.g. An intermediate
// stage ends with it unless it failed. The final stage keeps one iteration of its budget for the
// float64 check of a converged kernel result; when the kernel failed, ran out of iterations or
// its result does not pass the check, the log-domain loop continues with what budget is left:
// from the kernel's f (g computed from it), or, after the check, from its exact g.
StageResult kernel_mode_stage(const SinkhornProblem& p, KernelStorage& kernels, SinkhornStage s) {
  const int kernel_budget = s.final ? s.budget - 1 : s.budget;
  if (kernel_budget == 0) return log_domain_stage(p, std::move(s));
  StageResult r = kernels.use_float ? scaling_stage(p, s, kernel_budget, kernels.single)
                                    : scaling_stage(p, s, kernel_budget, kernels.full);
  if (r.status != StageStatus::failed && !s.final) return r;
  if (r.status != StageStatus::converged) return finish_in_log_domain(p, s, std::move(r), WarmStart::from_f);
  r = float64_check(p, s, std::move(r));
  if (r.status == StageStatus::converged) return r;
  return finish_in_log_domain(p, s, std::move(r), WarmStart::from_g);
}

// Each iteration computes T(f) (softmin_rows of log a + f / eps, times tau when unbalanced) and the
// marginal error of the plan of f, 2 |pi 1 - a|_1 with pi 1 = a exp((f - T(f)) / eps) (unbalanced:
// against a e^{-f/rho}, row_error; the plan is symmetric, so the column error is the same); below
// s.tol the stage stops, else f <- (f + T(f)) / 2, the averaged (symmetric) update.
StageResult symmetric_stage(const SinkhornProblem& p, SinkhornStage s) {
  const Eigen::Index n = p.op.rows();
  const double eps = s.epsilon, tau = damping(p, eps);
  Eigen::VectorXd h(n), t(n);
  StageResult r;
  r.f = std::move(s.f);
  while (r.iterations < s.budget) {
    h = p.log_a + r.f / eps;
    p.op.softmin_rows(eps, h, t);  // T(f)
    if (tau != 1.0) t *= tau;
    check_finite(t);
    ++r.iterations;
    r.marginal_error = 2.0 * row_error(p, r.f, t, eps);
    report_progress(p.options, s.done_before + r.iterations, r.marginal_error);
    if (r.marginal_error < s.tol) {
      r.status = StageStatus::converged;
      break;
    }
    if (r.iterations < s.budget) r.f = 0.5 * (r.f + t);
  }
  return r;
}

}  // namespace tokenflow::stages
