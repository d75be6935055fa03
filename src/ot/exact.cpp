// Exact optimal transport: the transportation problem solved by the network simplex on the
// implicit complete bipartite graph (transport_simplex.hpp, LEMON's algorithm without its per-arc
// arrays), on integer masses and integer costs.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "integer_masses.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/measure.hpp"
#include "transport_simplex.hpp"

namespace tokenflow {

// The largest remainder method (integer_masses.hpp).
std::vector<std::int64_t> integer_masses(const Eigen::VectorXd& w, const char* key) {
  constexpr double kScale = 4503599627370496.0;  // 2^52
  const auto count = static_cast<std::size_t>(w.size());
  std::vector<std::int64_t> q(count);
  std::vector<std::pair<double, std::size_t>> remainders(count);
  std::int64_t sum = 0;
  for (double wi : w)
    if (!(wi >= 0.0) || !std::isfinite(wi)) throw InputError("", key, "weights must be finite and non-negative");
  if (w.size() == 0 || !(w.maxCoeff() > 0.0))
    throw InputError("", key, "weights are all zero: there is no mass to transport");
  const Eigen::VectorXd p = normalized_weights(w);  // without overflow (1e308 each)
  for (std::size_t i = 0; i < count; ++i) {
    const double scaled = p[static_cast<Eigen::Index>(i)] * kScale;
    q[i] = static_cast<std::int64_t>(std::floor(scaled));
    remainders[i] = {scaled - std::floor(scaled), i};
    sum += q[i];
  }
  // The units lost to the floors go to the largest remainders, and only to bins with mass: an
  // empty bin (weight 0) stays empty.
  std::sort(remainders.begin(), remainders.end(), std::greater<>());
  std::size_t with_mass = 0;
  for (std::size_t k = 0; k < count; ++k) with_mass += w[static_cast<Eigen::Index>(remainders[k].second)] > 0.0;
  std::stable_partition(remainders.begin(), remainders.end(),
                        [&](const auto& r) { return w[static_cast<Eigen::Index>(r.second)] > 0.0; });
  for (std::size_t k = 0; sum < static_cast<std::int64_t>(kScale); ++k, ++sum) ++q[remainders[k % with_mass].second];
  return q;
}

// The network simplex; with forbidden pairs, no feasible flow is the user's problem (a, b and the
// allowed pairs admit no plan), said as such.
transport::Basis solve_forbidding(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost,
                                  double scale, double cost_bound, const std::vector<std::int64_t>& qa,
                                  const std::vector<std::int64_t>& qb, const std::function<bool()>& keep_going) {
  try {
    return transport::solve(cost.data(), cost.rows(), cost.cols(), scale, cost_bound, qa, qb, keep_going);
  } catch (const Cancelled&) {
    throw;
  } catch (const std::runtime_error&) {
    if (!has_forbidden_pairs(cost)) throw;
    // The key of a user's cost matrix (solve_ot's): forbidden pairs come only from one.
    throw InputError("", "cost_matrix", "no transport plan between a and b avoids the forbidden (+inf) pairs");
  }
}

ExactOTResult exact_ot(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost,
                       const Eigen::VectorXd& a, const Eigen::VectorXd& b, const std::function<bool()>& keep_going) {
  const Eigen::Index n = cost.rows(), m = cost.cols();
  if (a.size() != n) throw InputError("", "a", "has " + std::to_string(a.size()) + " entries for " + std::to_string(n) + " rows");
  if (b.size() != m) throw InputError("", "b", "has " + std::to_string(b.size()) + " entries for " + std::to_string(m) + " columns");
  // +inf entries are forbidden pairs (ot.hpp): their reduced costs are +inf, so no pivot ever
  // enters them; NaN and -inf are invalid.
  // keep_going is asked between the passes over C (each a second or so at 10^8 entries) and in
  // the simplex's pivots.
  const auto poll = [&keep_going] {
    if (keep_going && !keep_going()) throw Cancelled();
  };
  const double max_abs_cost = allowed_cost_magnitude(cost);
  if (!std::isfinite(max_abs_cost)) throw InputError("", "cost", "has a NaN or -inf entry");
  poll();
  const auto qa = integer_masses(a, "a"), qb = integer_masses(b, "b");

  // Costs as integers too. With floating-point costs the simplex's potentials carry rounding, a
  // reduced cost of -1e-17 looks improving, and the pivots can cycle for ever (seen with LEMON: a
  // 37 x 53 problem with the cost |x - y| ran for minutes). With integer costs the strongly
  // feasible trees guarantee termination. The unit is a power of two, 2^e / 2^k with
  // max|C| < 2^e and 2^k (n + m + 1) <= 2^50, which keeps every potential and reduced cost an
  // exact integer in double (transport_simplex.hpp); C_ij / unit is exact, its rounding the one
  // error. The plan is optimal for the rounded costs, each within unit / 2 of C_ij, so its true
  // cost is within `unit` (plans have mass 1) of the true optimum: unit / max|C| < 2^(1 - k),
  // 2^-35 for n + m < 2^14, 2^-32 for n + m < 2^17. The unit is at least 2^-1022 (the smallest
  // normal double), so that its inverse, the scale, is finite: costs below about 2^(k - 1022)
  // (1e-293) then round on that unit instead (an error of at most 2^-1023 per unit of mass).
  poll();
  const int k = 50 - static_cast<int>(std::ceil(std::log2(static_cast<double>(n + m) + 1.0)));
  int e = 0;
  std::frexp(max_abs_cost, &e);  // max|C| < 2^e
  const double unit = max_abs_cost > 0.0 ? std::ldexp(1.0, std::max(e - k, -1022)) : 1.0;
  const transport::Basis basis = solve_forbidding(cost, 1.0 / unit, std::ldexp(1.0, k), qa, qb, keep_going);
  poll();

  ExactOTResult r;
  r.pivots = basis.pivots;
  constexpr double kInvScale = 1.0 / 4503599627370496.0;
  r.plan.setZero(n, m);
  r.cost = 0.0;
  for (std::size_t t = 0; t < basis.arcs.size(); ++t) {
    const Eigen::Index i = basis.arcs[t] / m, j = basis.arcs[t] % m;
    r.plan(i, j) = static_cast<double>(basis.flows[t]) * kInvScale;
    r.cost += r.plan(i, j) * cost(i, j);
  }
  // The potentials pi satisfy C_ij + pi_i - pi_j >= 0 (reduced costs); in the usual OT
  // convention f_i + g_j <= C_ij: f = -pi on the left, g = pi on the right.
  r.f.resize(n);
  r.g.resize(m);
  // The potentials are exact in units of `unit`: dual feasible for the rounded costs.
  for (Eigen::Index i = 0; i < n; ++i) r.f[i] = -basis.potential[static_cast<std::size_t>(i)] * unit;
  for (Eigen::Index j = 0; j < m; ++j) r.g[j] = basis.potential[static_cast<std::size_t>(n + j)] * unit;
  return r;
}

}  // namespace tokenflow
