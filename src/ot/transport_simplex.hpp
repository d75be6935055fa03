// The network simplex for the transportation problem on the complete bipartite graph, with the
// arcs implicit (src/ot/transport_simplex.cpp); exact_ot (src/ot/exact.cpp) is its one caller.
//
// Problem: n sources with integer supplies s_i, m sinks with integer demands t_j, sum s = sum t;
// arc (i, j) for every pair, uncapacitated, with the integer cost c_ij = nearbyint(C_ij * scale)
// read from the caller's row-major n x m matrix C at each use (C is neither copied nor rounded
// in place). Minimize sum_ij c_ij x_ij over x >= 0 with row sums s and column sums t.
//
// Why not LEMON's NetworkSimplex (liblemon-dev), which exact_ot used before: it copies every arc
// into its own per-arc arrays (source, target, upper bound, capacity, cost, flow, state: 45 bytes
// an arc for 64-bit values) beside the graph's arcs (12 bytes) and a cost map (8 bytes); at
// 3000 x 3000 that was 838 MB against POT's emd2's 297 MB (bench/exact_vs_emd2.py). Here nothing
// is stored per arc: uncapacitated arcs carry flow only while they are in the spanning tree, so
// the flows live on the tree's nodes (the flow on the arc to the node's parent), and a tree arc's
// reduced cost is exactly zero, so the pivot search needs no arc state. Memory beyond C is
// O(n + m). The block search walks C row by row, the reduced costs of a row segment in one
// vectorized loop.
//
// The algorithm follows LEMON's NetworkSimplex (Boost Software License 1.0; Peter Kovacs's
// implementation): an artificial root joined to every node, Cunningham's strongly feasible
// spanning trees (the leaving arc is the last blocking arc met from the entering arc's source),
// the tree stored as parent, thread, reverse thread, subtree size and last successor, the block
// search pivot rule with blocks of sqrt(n m) arcs, and LEMON's initial pivots (the cheapest arc
// into each sink).
//
// Exactness: costs and potentials are integers held in doubles. With N = n + m nodes and
// c = max |c_ij|, the artificial arcs cost (c + 1) N, a potential is one artificial cost plus a
// tree path of at most N arc costs, |pi| <= (2c + 1) N, and a reduced cost c_ij + pi_i - pi_j is
// at most c + 2 (2c + 1) N < 4 (c + 1)(N + 1) in magnitude. The caller bounds that by 2^53, so
// every sum is an integer computed exactly, tree arcs have reduced cost exactly 0, and with
// integer data the strongly feasible trees make the pivots terminate.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace tokenflow::transport {

// An optimal basic solution.
struct Basis {
  // The basic arcs that carry flow: arc = i * m + j, flow in the supplies' integer units; at
  // most n + m - 1 entries, each (i, j) at most once.
  std::vector<std::int64_t> arcs;
  std::vector<std::int64_t> flows;
  // Node potentials in cost units (integers), nodes 0..n-1 the sources and n..n+m-1 the sinks:
  // c_ij + pi_i - pi_{n+j} >= 0 for every arc, = 0 on the basic ones; shifted (as LEMON does) so
  // that max pi = 0.
  std::vector<double> potential;
  long long pivots = 0;  // simplex pivots, initial ones included
};

// cost: n x m row-major, finite or +inf (a forbidden arc: its reduced cost is +inf, so it never
// enters); scale: the cost unit's inverse (a power of two keeps C_ij * scale exact); cost_bound >=
// max |nearbyint(C_ij * scale)| over the finite entries (an integer), with
// (cost_bound + 1) * (n + m + 1) * 4 <= 2^53 (see above). supply (n) and demand (m) non-negative with
// equal sums below 2^62. Throws std::runtime_error if no feasible flow is found (impossible for
// valid input without forbidden arcs: the graph is then complete). keep_going (when given) is
// asked after every pivot: Cancelled (tokenflow/error.hpp) when it returns false.
Basis solve(const double* cost, std::int64_t n, std::int64_t m, double scale, double cost_bound,
            const std::vector<std::int64_t>& supply, const std::vector<std::int64_t>& demand,
            const std::function<bool()>& keep_going = {});

}  // namespace tokenflow::transport
