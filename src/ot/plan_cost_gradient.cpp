// The cost gradient of an entropic plan's implicit backward without the potentials: the flow of
// the adjoint system in the fundamental-cut basis of a maximum spanning tree
// (tokenflow/plan_adjoint.hpp, plan_cost_gradient).
//
// Written by hand: no library solves a graph Laplacian in a cut basis. Why this basis: the adjoint
// system is the Laplacian of the bipartite graph whose edge (i, j) has conductance pi_ij, and
// D = pi o (w1 + w2^T) - P is f - P with f the electrical flow that carries the demands P 1 out of
// the rows and P^T 1 into the columns. On a near-permutation plan the potentials w reach 1e15-1e50
// while f is their small differences, so any route through w loses the digits. A maximum spanning
// tree T (Prim) gives the flow in other unknowns: for each tree edge c, the potential drop
// delta_c across it. Every edge e = (i, j) crosses the fundamental cuts of the tree edges on the
// tree path from row i to column j, so f_e = pi_e sum_{c on path(e)} s(e, c) delta_c, and
// conservation is one equation per cut: the flow out of c's subtree equals the subtree's demand,
//   sum_e s(e, c) f_e = d_c,   i.e.   (S diag(pi) S^T) delta = d,
// S the cut-edge incidence (s(e, c) = +1 when e's row lies in the subtree of c and its column does
// not, -1 the other way). Scaled by the tree edges' own conductances, z_c = sqrt(pi_c) delta_c,
// the matrix has entries sum_e s s' pi_e / sqrt(pi_c pi_c') whose terms are at most 1 (the cut
// property: every edge crossing c's cut weighs at most pi_c), and f_e = pi_e sum s z_c / sqrt(pi_c)
// has terms pi_e / pi_c <= 1 times the tree flows: nothing large is formed, nothing cancels.
// Cost: (n + m)^2 for the tree, sum over edges of (path length)^2 for the matrix, (n + m)^3 / 3
// for its Cholesky factor.
#include <Eigen/Cholesky>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenflow/plan_adjoint.hpp"

namespace tokenflow {

namespace {

// Nodes 0..n-1 are the rows, n..n+m-1 the columns; the root is the last column.
struct SpanningTree {
  std::vector<Eigen::Index> parent;  // -1 at the root
  std::vector<Eigen::Index> depth;
  std::vector<Eigen::Index> order;   // the order Prim added them: parents before children
  std::vector<double> weight;        // conductance of the edge to the parent
};

double edge_weight(const PlanMatrix& plan, Eigen::Index u, Eigen::Index v) {
  const Eigen::Index n = plan.rows();
  return u < n ? plan(u, v - n) : plan(v, u - n);
}

// Prim's algorithm on the complete bipartite graph: O((n + m) max(n, m)).
SpanningTree maximum_spanning_tree(const PlanMatrix& plan) {
  const Eigen::Index n = plan.rows(), m = plan.cols(), N = n + m;
  SpanningTree t;
  t.parent.assign(N, -1);
  t.depth.assign(N, 0);
  t.weight.assign(N, 1.0);
  std::vector<double> best(N, -1.0);
  std::vector<Eigen::Index> from(N, -1);
  std::vector<char> in_tree(N, 0);
  Eigen::Index current = N - 1;
  in_tree[current] = 1;
  t.order.push_back(current);
  for (Eigen::Index added = 1; added < N; ++added) {
    // The new node's edges go to the other side only.
    const Eigen::Index lo = current < n ? n : 0, hi = current < n ? N : n;
    for (Eigen::Index v = lo; v < hi; ++v)
      if (!in_tree[v]) {
        const double w = edge_weight(plan, current, v);
        if (w > best[v]) {
          best[v] = w;
          from[v] = current;
        }
      }
    Eigen::Index next = -1;
    for (Eigen::Index v = 0; v < N; ++v)
      if (!in_tree[v] && (next < 0 || best[v] > best[next])) next = v;
    // Every row and column has positive mass, so some edge to the other side is positive; a node
    // whose best is still -1 has no node of the other side in the tree yet (only on the first
    // step from a column to a column-less tree, impossible: the root is a column).
    t.parent[next] = from[next];
    t.weight[next] = best[next];
    t.depth[next] = t.depth[from[next]] + 1;
    in_tree[next] = 1;
    t.order.push_back(next);
    current = next;
  }
  return t;
}

}  // namespace

PlanMatrix plan_cost_gradient_by_tree(const PlanView& plan_in, const PlanView& weighted_in) {
  if (plan_in.rows() < 1 || plan_in.cols() < 1 || weighted_in.rows() != plan_in.rows() ||
      weighted_in.cols() != plan_in.cols())
    throw std::invalid_argument("plan_cost_gradient_by_tree: the plan (" + std::to_string(plan_in.rows()) + " x " +
                                std::to_string(plan_in.cols()) + ") and G o plan (" +
                                std::to_string(weighted_in.rows()) + " x " + std::to_string(weighted_in.cols()) +
                                ") must be non-empty and of one shape");
  const PlanMatrix plan = plan_in, weighted = weighted_in;  // owned: bits independent of the caller's memory
  if (!(plan.array() >= 0.0 && plan.array() < std::numeric_limits<double>::infinity()).all())
    throw std::invalid_argument("plan_cost_gradient_by_tree: the plan's entries must be finite and >= 0");
  if (plan.rowwise().sum().minCoeff() <= 0.0 || plan.colwise().sum().minCoeff() <= 0.0)
    throw std::invalid_argument("plan_cost_gradient_by_tree: the plan has a row or column of zero mass (solve on the support)");
  const Eigen::Index n = plan.rows(), m = plan.cols(), N = n + m;
  const SpanningTree tree = maximum_spanning_tree(plan);
  // Tree edges are numbered by their child node: index[v] for v != root.
  std::vector<Eigen::Index> index(N, -1);
  Eigen::Index K = 0;
  for (Eigen::Index v = 0; v < N; ++v)
    if (tree.parent[v] >= 0) index[v] = K++;
  // The demand of each subtree: rows push P 1 out, columns take P^T 1 in.
  std::vector<double> demand(N);
  for (Eigen::Index i = 0; i < n; ++i) demand[i] = weighted.row(i).sum();
  for (Eigen::Index j = 0; j < m; ++j) demand[n + j] = -weighted.col(j).sum();
  for (auto it = tree.order.rbegin(); it != tree.order.rend(); ++it)
    if (tree.parent[*it] >= 0) demand[tree.parent[*it]] += demand[*it];
  // A tree edge of weight 0 joins parts the plan does not connect (entries that underflowed to 0):
  // no edge crosses its cut (the cut property), so no flow does; z = 0 there (an identity row).
  std::vector<double> inv_sqrt(N, 0.0);
  for (Eigen::Index v = 0; v < N; ++v)
    if (tree.parent[v] >= 0 && tree.weight[v] > 0.0) inv_sqrt[v] = 1.0 / std::sqrt(tree.weight[v]);
  // The path of edge (i, j): the tree edges from row i up to the common ancestor (sign +1) and
  // from column j up to it (sign -1).
  std::vector<std::pair<Eigen::Index, double>> path;
  auto walk = [&](Eigen::Index i, Eigen::Index j) {
    path.clear();
    Eigen::Index a = i, b = n + j;
    while (a != b) {
      if (tree.depth[a] >= tree.depth[b]) {
        path.emplace_back(a, 1.0);
        a = tree.parent[a];
      } else {
        path.emplace_back(b, -1.0);
        b = tree.parent[b];
      }
    }
  };
  Eigen::MatrixXd M = Eigen::MatrixXd::Zero(K, K);  // lower triangle of diag(1/sqrt) S diag(pi) S^T diag(1/sqrt)
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) {
      if (plan(i, j) == 0.0) continue;
      walk(i, j);
      for (const auto& [c, s] : path) {
        const double left = s * plan(i, j) * inv_sqrt[c];
        for (const auto& [c2, s2] : path)
          if (index[c2] <= index[c]) M(index[c], index[c2]) += left * s2 * inv_sqrt[c2];
      }
    }
  Eigen::VectorXd rhs(K);
  for (Eigen::Index v = 0; v < N; ++v)
    if (tree.parent[v] >= 0) {
      rhs[index[v]] = demand[v] * inv_sqrt[v];
      if (tree.weight[v] == 0.0) M(index[v], index[v]) = 1.0;
    }
  // Positive definite (S has full row rank: the tree edges' own columns are the identity).
  const Eigen::LLT<Eigen::MatrixXd, Eigen::Lower> factor(M);
  Eigen::VectorXd z;
  if (factor.info() == Eigen::Success) {
    z = factor.solve(rhs);
  } else {  // rounding left it indefinite: pivoted LDL^T
    z = Eigen::LDLT<Eigen::MatrixXd, Eigen::Lower>(M).solve(rhs);
  }
  PlanMatrix out(n, m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) {
      double drop = 0.0;
      if (plan(i, j) != 0.0) {
        walk(i, j);
        for (const auto& [c, s] : path) drop += s * z[index[c]] * inv_sqrt[c];
      }
      out(i, j) = plan(i, j) * drop - weighted(i, j);
    }
  return out;
}

PlanMatrix plan_cost_gradient(const PlanView& plan, const PlanView& weighted) {
  const PlanAdjoint w = plan_adjoint(plan, weighted);  // checks the inputs as plan_cost_gradient promises
  const Eigen::Index n = plan.rows(), m = plan.cols();
  PlanMatrix D(n, m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) D(i, j) = plan(i, j) * (w.w1[i] + w.w2[j]) - weighted(i, j);
  // D's rows and columns sum to 0 (the system's equations). The flow f = D + P is acyclic, so each
  // |f_ij| is at most the total demand |P|_1 and a row's sum of |f_ij| at most twice it: an accurate
  // D sums to 0 within (n + m + 2) u (2 |P|_1 + |P|_1) per row or column. The potentials' route
  // misses that by orders of magnitude where they have lost their digits (or overflowed: NaN
  // fails the test too); then the tree's route, which forms no potentials.
  const double tolerance = 16.0 * static_cast<double>(n + m) * std::numeric_limits<double>::epsilon() *
                           weighted.cwiseAbs().sum();
  const double residual =
      std::max(D.rowwise().sum().cwiseAbs().maxCoeff(), D.colwise().sum().cwiseAbs().maxCoeff());
  if (residual <= tolerance) return D;
  return plan_cost_gradient_by_tree(plan, weighted);
}

}  // namespace tokenflow
