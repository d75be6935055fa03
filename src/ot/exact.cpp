// Exact optimal transport with LEMON's network simplex (liblemon-dev): the transportation
// problem as a min-cost flow on the complete bipartite graph.
#include <lemon/network_simplex.h>
#include <lemon/smart_graph.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

namespace {

// Masses as integer multiples of 2^-52 (LEMON's flows must be integers), rounded by the largest
// remainder method so that they sum to exactly 2^52 and each is within one unit (2^-52, double
// precision) of the given mass.
std::vector<std::int64_t> quantize(const Eigen::VectorXd& w, const char* key) {
  constexpr double kScale = 4503599627370496.0;  // 2^52
  const double total = w.sum();
  const auto count = static_cast<std::size_t>(w.size());
  std::vector<std::int64_t> q(count);
  std::vector<std::pair<double, std::size_t>> remainders(count);
  std::int64_t sum = 0;
  for (double wi : w)
    if (!(wi >= 0.0) || !std::isfinite(wi)) throw InputError("", key, "weights must be finite and non-negative");
  if (!(total > 0.0) || !std::isfinite(total)) throw InputError("", key, "weights must have a positive, finite sum");
  for (std::size_t i = 0; i < count; ++i) {
    const double wi = w[static_cast<Eigen::Index>(i)];
    const double scaled = wi / total * kScale;
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

}  // namespace

ExactOTResult exact_ot(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost,
                       const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  const Eigen::Index n = cost.rows(), m = cost.cols();
  if (a.size() != n) throw InputError("", "a", "has " + std::to_string(a.size()) + " entries for " + std::to_string(n) + " rows");
  if (b.size() != m) throw InputError("", "b", "has " + std::to_string(b.size()) + " entries for " + std::to_string(m) + " columns");
  if (!cost.allFinite()) throw InputError("", "cost", "has a non-finite entry");
  const auto qa = quantize(a, "a"), qb = quantize(b, "b");

  using Graph = lemon::SmartDigraph;
  Graph graph;
  graph.reserveNode(static_cast<int>(n + m));
  graph.reserveArc(static_cast<int>(n * m));
  std::vector<Graph::Node> left, right;
  for (Eigen::Index i = 0; i < n; ++i) left.push_back(graph.addNode());
  for (Eigen::Index j = 0; j < m; ++j) right.push_back(graph.addNode());
  // Costs as integers too. With floating-point costs the simplex's potentials carry rounding, a
  // reduced cost of -1e-17 looks improving, and the pivots can cycle for ever (seen: a 37 x 53
  // problem with the cost |x - y| ran for minutes). With integer costs LEMON's strongly feasible
  // trees guarantee termination. The unit is max|C| / 2^k with (n + m) 2^k <= 2^60, so that
  // potentials (sums of at most n + m costs) and LEMON's artificial cost (2^62 for exact types)
  // stay below 2^63. The plan is optimal for the rounded costs, each within unit / 2 of C_ij, so
  // its true cost is within `unit` (plans have mass 1) of the true optimum: unit / max|C| =
  // 2^-k <= 2^-43 for n + m <= 2^17.
  const double max_abs_cost = cost.cwiseAbs().maxCoeff();
  const int k = 60 - static_cast<int>(std::ceil(std::log2(static_cast<double>(n + m) + 1.0)));
  const double unit = max_abs_cost > 0.0 ? std::ldexp(max_abs_cost, -k) : 1.0;
  Graph::ArcMap<std::int64_t> arc_cost(graph);
  Graph::NodeMap<std::int64_t> supply(graph);
  for (Eigen::Index i = 0; i < n; ++i) {
    supply[left[i]] = qa[static_cast<std::size_t>(i)];
    for (Eigen::Index j = 0; j < m; ++j)
      arc_cost[graph.addArc(left[i], right[j])] = std::llround(cost(i, j) / unit);
  }
  for (Eigen::Index j = 0; j < m; ++j) supply[right[j]] = -qb[static_cast<std::size_t>(j)];

  using Simplex = lemon::NetworkSimplex<Graph, std::int64_t, std::int64_t>;
  Simplex simplex(graph);
  simplex.costMap(arc_cost).supplyMap(supply);
  const auto status = simplex.run();
  if (status != Simplex::OPTIMAL)
    throw std::runtime_error("exact OT: the network simplex found no optimal plan");

  ExactOTResult r;
  constexpr double kInvScale = 1.0 / 4503599627370496.0;
  r.plan.setZero(n, m);
  r.cost = 0.0;
  for (Graph::ArcIt arc(graph); arc != lemon::INVALID; ++arc) {
    const std::int64_t flow = simplex.flow(arc);
    if (flow == 0) continue;
    const auto i = static_cast<Eigen::Index>(graph.id(graph.source(arc)));
    const auto j = static_cast<Eigen::Index>(graph.id(graph.target(arc))) - n;
    r.plan(i, j) = static_cast<double>(flow) * kInvScale;
    r.cost += r.plan(i, j) * cost(i, j);
  }
  // LEMON's potentials pi satisfy C_ij + pi_i - pi_j >= 0 (reduced costs); in the usual OT
  // convention f_i + g_j <= C_ij: f = -pi on the left, g = pi on the right.
  r.f.resize(n);
  r.g.resize(m);
  // The potentials are exact in units of `unit`: dual feasible for the rounded costs.
  for (Eigen::Index i = 0; i < n; ++i) r.f[i] = -static_cast<double>(simplex.potential(left[i])) * unit;
  for (Eigen::Index j = 0; j < m; ++j) r.g[j] = static_cast<double>(simplex.potential(right[j])) * unit;
  return r;
}

}  // namespace tokenflow
