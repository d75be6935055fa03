// The reference exact OT (exact_reference.hpp): LEMON's NetworkSimplex on an explicit graph.
#include "exact_reference.hpp"

#include <lemon/network_simplex.h>
#include <lemon/smart_graph.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "integer_masses.hpp"

namespace tokenflow {

ExactOTResult reference_exact_ot(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost,
                                 const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  const Eigen::Index n = cost.rows(), m = cost.cols();
  const auto qa = integer_masses(a, "a"), qb = integer_masses(b, "b");

  using Graph = lemon::SmartDigraph;
  Graph graph;
  graph.reserveNode(static_cast<int>(n + m));
  graph.reserveArc(static_cast<int>(n * m));
  std::vector<Graph::Node> left, right;
  for (Eigen::Index i = 0; i < n; ++i) left.push_back(graph.addNode());
  for (Eigen::Index j = 0; j < m; ++j) right.push_back(graph.addNode());
  // Integer costs (LEMON's strongly feasible trees terminate on integer data): the unit is
  // max|C| / 2^k with (n + m) 2^k <= 2^60, so that potentials (sums of at most n + m costs) and
  // LEMON's artificial cost (2^62 for exact types) stay below 2^63. The plan's true cost is within
  // `unit` of the true optimum.
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
