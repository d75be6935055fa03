// The network simplex on the implicit complete bipartite graph (transport_simplex.hpp). The steps
// and their names follow LEMON's NetworkSimplex (lemon/network_simplex.h, Boost Software License
// 1.0), specialised to uncapacitated arcs whose flow is stored on the tree node below them.
#include "transport_simplex.hpp"

#include "tokenflow/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace tokenflow::transport {

namespace {

constexpr signed char kUp = 1;     // the node's tree arc points from the node to its parent
constexpr signed char kDown = -1;  // ... from the parent to the node
constexpr std::int64_t kArtificial = -1;  // the tree arc joins the node to the root
constexpr std::int64_t kInfinite = std::numeric_limits<std::int64_t>::max();

class Simplex {
 public:
  Simplex(const double* cost, std::int64_t n, std::int64_t m, double scale, double cost_bound,
          const std::vector<std::int64_t>& supply, const std::vector<std::int64_t>& demand);
  Basis run(const std::function<bool()>& keep_going);

 private:
  // c_ij of arc i m + j; the one rounding used everywhere (the block search inlines the same).
  double arc_cost(std::int64_t arc) const { return std::nearbyint(cost_[arc] * scale_); }
  int source(std::int64_t arc) const { return static_cast<int>(arc / m_); }
  int target(std::int64_t arc) const { return static_cast<int>(n_ + arc % m_); }
  double reduced_cost(std::int64_t arc) const { return arc_cost(arc) + pi_[source(arc)] - pi_[target(arc)]; }

  void initial_pivots();
  bool find_entering_arc();
  double segment_min(std::int64_t i, std::int64_t j0, std::int64_t j1, double best, std::int64_t& arg) const;
  void pivot();
  void find_join_node();
  void find_leaving_arc();
  void change_flow();
  void update_tree_structure();
  void relink_stem();
  void update_successors(int old_rev_thread, int old_last_succ, int old_succ_num);
  void update_potential();

  const double* cost_;
  const std::vector<std::int64_t>& demand_;
  std::int64_t n_, m_;
  double scale_;
  int node_num_, root_;
  // The spanning tree (nodes 0..n-1 sources, n..n+m-1 sinks, n+m the root), as in LEMON.
  std::vector<int> parent_, thread_, rev_thread_, succ_num_, last_succ_, dirty_revs_;
  std::vector<std::int64_t> pred_;  // the node's tree arc: i m + j, or kArtificial
  std::vector<signed char> pred_dir_;
  std::vector<std::int64_t> flow_;  // flow on the node's tree arc
  std::vector<double> pi_;
  // The current pivot.
  std::int64_t in_arc_ = 0, delta_ = 0;
  int join_ = 0, u_in_ = 0, v_in_ = 0, u_out_ = 0, v_out_ = 0;
  // Block search.
  std::int64_t block_size_, next_arc_ = 0;
  long long pivots_ = 0;
};

// LEMON's init() for equal supply and demand: every node joined to the root by an artificial arc
// carrying its supply (cost 0, towards the root) or its demand (cost ART, from the root), with ART
// above any path of real arcs.
Simplex::Simplex(const double* cost, std::int64_t n, std::int64_t m, double scale, double cost_bound,
                 const std::vector<std::int64_t>& supply, const std::vector<std::int64_t>& demand)
    : cost_(cost), demand_(demand), n_(n), m_(m), scale_(scale), node_num_(static_cast<int>(n + m)), root_(node_num_),
      block_size_(std::max<std::int64_t>(static_cast<std::int64_t>(std::sqrt(static_cast<double>(n * m))), 10)) {
  const auto size = static_cast<std::size_t>(node_num_ + 1);
  parent_.resize(size), thread_.resize(size), rev_thread_.resize(size), succ_num_.resize(size);
  last_succ_.resize(size), pred_.resize(size), pred_dir_.resize(size), flow_.resize(size), pi_.resize(size);
  const double art_cost = (cost_bound + 1.0) * node_num_;
  parent_[root_] = -1;
  pred_[root_] = kArtificial;
  thread_[root_] = 0;
  rev_thread_[0] = root_;
  succ_num_[root_] = node_num_ + 1;
  last_succ_[root_] = root_ - 1;
  pi_[root_] = 0.0;
  for (int u = 0; u < node_num_; ++u) {
    parent_[u] = root_;
    pred_[u] = kArtificial;
    thread_[u] = u + 1;
    rev_thread_[u + 1] = u;
    succ_num_[u] = 1;
    last_succ_[u] = u;
    const std::int64_t s = u < n_ ? supply[static_cast<std::size_t>(u)] : -demand[static_cast<std::size_t>(u - n_)];
    pred_dir_[u] = s >= 0 ? kUp : kDown;
    pi_[u] = s >= 0 ? 0.0 : art_cost;
    flow_[u] = s >= 0 ? s : -s;
  }
}

// LEMON's initial pivots: the cheapest arc into each sink with demand, entered when improving.
void Simplex::initial_pivots() {
  const auto sinks = static_cast<std::size_t>(m_);
  std::vector<double> cheapest(sinks, std::numeric_limits<double>::infinity());
  std::vector<std::int64_t> from(sinks, 0);
  for (std::int64_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < sinks; ++j) {
      const double c = arc_cost(i * m_ + static_cast<std::int64_t>(j));
      if (c < cheapest[j]) cheapest[j] = c, from[j] = i;
    }
  for (std::size_t j = 0; j < sinks; ++j) {
    if (demand_[j] == 0) continue;
    in_arc_ = from[j] * m_ + static_cast<std::int64_t>(j);
    if (reduced_cost(in_arc_) < 0.0) pivot();
  }
}

// The least reduced cost on row i, columns [j0, j1), if below `best` (its first column in arg).
double Simplex::segment_min(std::int64_t i, std::int64_t j0, std::int64_t j1, double best,
                            std::int64_t& arg) const {
  const double* c = cost_ + i * m_;
  const double* pi_sink = pi_.data() + n_;
  const double pi_i = pi_[static_cast<std::size_t>(i)], scale = scale_;
  double least = best;
#pragma omp simd reduction(min : least)
  for (std::int64_t j = j0; j < j1; ++j) least = std::min(least, std::nearbyint(c[j] * scale) + pi_i - pi_sink[j]);
  if (least < best)
    for (std::int64_t j = j0; j < j1; ++j)
      if (std::nearbyint(c[j] * scale) + pi_i - pi_sink[j] == least) {
        arg = j;
        break;
      }
  return least;
}

// LEMON's block search: scan blocks of block_size_ arcs from where the last search stopped,
// cyclically, and enter the most negative reduced cost of the first block that has one.
bool Simplex::find_entering_arc() {
  const std::int64_t arcs = n_ * m_;
  double best = 0.0;
  std::int64_t count = block_size_, e = next_arc_;
  for (int pass = 0; pass < 2; ++pass) {
    const std::int64_t end = pass == 0 ? arcs : next_arc_;
    while (e < end) {
      const std::int64_t i = e / m_, j0 = e % m_;
      const std::int64_t stop = std::min({end, (i + 1) * m_, e + count});
      std::int64_t j = 0;
      const double least = segment_min(i, j0, j0 + (stop - e), best, j);
      if (least < best) best = least, in_arc_ = i * m_ + j;
      count -= stop - e;
      e = stop;
      if (count == 0) {
        if (best < 0.0) {
          next_arc_ = e;
          return true;
        }
        count = block_size_;
      }
    }
    if (pass == 0) e = 0;
  }
  next_arc_ = e;
  return best < 0.0;
}

void Simplex::pivot() {
  find_join_node();
  find_leaving_arc();
  change_flow();
  update_tree_structure();
  update_potential();
  ++pivots_;
}

void Simplex::find_join_node() {
  int u = source(in_arc_), v = target(in_arc_);
  while (u != v) {
    if (succ_num_[u] < succ_num_[v])
      u = parent_[u];
    else
      v = parent_[v];
  }
  join_ = u;
}

// The cycle is the entering arc (source -> target, flow increasing) closed through the tree; the
// leaving arc is the last blocking one met from the source side (strongly feasible trees).
void Simplex::find_leaving_arc() {
  const int first = source(in_arc_), second = target(in_arc_);
  delta_ = kInfinite;
  int result = 0;
  for (int u = first; u != join_; u = parent_[u]) {
    const std::int64_t d = pred_dir_[u] == kUp ? flow_[u] : kInfinite;
    if (d < delta_) delta_ = d, u_out_ = u, result = 1;
  }
  for (int u = second; u != join_; u = parent_[u]) {
    const std::int64_t d = pred_dir_[u] == kDown ? flow_[u] : kInfinite;
    if (d <= delta_) delta_ = d, u_out_ = u, result = 2;
  }
  if (delta_ == kInfinite) throw std::runtime_error("exact OT: the network simplex met an unbounded cycle");
  u_in_ = result == 1 ? first : second;
  v_in_ = result == 1 ? second : first;
}

void Simplex::change_flow() {
  if (delta_ == 0) return;
  for (int u = source(in_arc_); u != join_; u = parent_[u]) flow_[u] -= pred_dir_[u] * delta_;
  for (int u = target(in_arc_); u != join_; u = parent_[u]) flow_[u] += pred_dir_[u] * delta_;
}

// LEMON's updateTreeStructure: the subtree below the leaving arc hangs from the entering arc now,
// re-rooted at u_in; the flows move with the arcs along the re-rooted stem.
void Simplex::update_tree_structure() {
  const int old_rev_thread = rev_thread_[u_out_];
  const int old_succ_num = succ_num_[u_out_];
  const int old_last_succ = last_succ_[u_out_];
  v_out_ = parent_[u_out_];
  if (u_in_ == u_out_) {
    parent_[u_in_] = v_in_;
    if (thread_[v_in_] != u_out_) {
      int after = thread_[old_last_succ];
      thread_[old_rev_thread] = after;
      rev_thread_[after] = old_rev_thread;
      after = thread_[v_in_];
      thread_[v_in_] = u_out_;
      rev_thread_[u_out_] = v_in_;
      thread_[old_last_succ] = after;
      rev_thread_[after] = old_last_succ;
    }
  } else {
    relink_stem();
  }
  pred_[u_in_] = in_arc_;
  pred_dir_[u_in_] = u_in_ == source(in_arc_) ? kUp : kDown;
  flow_[u_in_] = delta_;
  if (u_in_ != u_out_) succ_num_[u_in_] = old_succ_num;
  update_successors(old_rev_thread, old_last_succ, old_succ_num);
}

// The stem (the tree path from u_in up to u_out) reversed: parents, threads and the arcs with
// their flows shift one node along it.
void Simplex::relink_stem() {
  const int old_rev_thread = rev_thread_[u_out_];
  const int thread_continue = old_rev_thread == v_in_ ? thread_[last_succ_[u_out_]] : thread_[v_in_];
  int stem = u_in_, par_stem = v_in_, last = last_succ_[u_in_];
  int after = thread_[last];
  thread_[v_in_] = u_in_;
  dirty_revs_.clear();
  dirty_revs_.push_back(v_in_);
  while (stem != u_out_) {
    const int next_stem = parent_[stem];
    thread_[last] = next_stem;
    dirty_revs_.push_back(last);
    const int before = rev_thread_[stem];
    thread_[before] = after;
    rev_thread_[after] = before;
    parent_[stem] = par_stem;
    par_stem = stem;
    stem = next_stem;
    last = last_succ_[stem] == last_succ_[par_stem] ? rev_thread_[par_stem] : last_succ_[stem];
    after = thread_[last];
  }
  parent_[u_out_] = par_stem;
  thread_[last] = thread_continue;
  rev_thread_[thread_continue] = last;
  last_succ_[u_out_] = last;
  if (old_rev_thread != v_in_) {
    thread_[old_rev_thread] = after;
    rev_thread_[after] = old_rev_thread;
  }
  for (const int u : dirty_revs_) rev_thread_[thread_[u]] = u;
  int sizes = 0;
  const int tail = last_succ_[u_out_];
  for (int u = u_out_, p = parent_[u]; u != u_in_; u = p, p = parent_[u]) {
    pred_[u] = pred_[p];
    pred_dir_[u] = static_cast<signed char>(-pred_dir_[p]);
    flow_[u] = flow_[p];
    sizes += succ_num_[u] - succ_num_[p];
    succ_num_[u] = sizes;
    last_succ_[p] = tail;
  }
}

// Last successors and subtree sizes on the paths from v_in and from the old parent of u_out up to
// the join node (LEMON's updateTreeStructure, second half).
void Simplex::update_successors(int old_rev_thread, int old_last_succ, int old_succ_num) {
  const int up_limit_out = last_succ_[join_] == v_in_ ? join_ : -1;
  const int last_succ_out = last_succ_[u_out_];
  for (int u = v_in_; u != -1 && last_succ_[u] == v_in_; u = parent_[u]) last_succ_[u] = last_succ_out;
  if (join_ != old_rev_thread && v_in_ != old_rev_thread) {
    for (int u = v_out_; u != up_limit_out && last_succ_[u] == old_last_succ; u = parent_[u])
      last_succ_[u] = old_rev_thread;
  } else if (last_succ_out != old_last_succ) {
    for (int u = v_out_; u != up_limit_out && last_succ_[u] == old_last_succ; u = parent_[u])
      last_succ_[u] = last_succ_out;
  }
  for (int u = v_in_; u != join_; u = parent_[u]) succ_num_[u] += old_succ_num;
  for (int u = v_out_; u != join_; u = parent_[u]) succ_num_[u] -= old_succ_num;
}

void Simplex::update_potential() {
  const double sigma = pi_[v_in_] - pi_[u_in_] - pred_dir_[u_in_] * arc_cost(in_arc_);
  const int end = thread_[last_succ_[u_in_]];
  for (int u = u_in_; u != end; u = thread_[u]) pi_[u] += sigma;
}

Basis Simplex::run(const std::function<bool()>& keep_going) {
  initial_pivots();
  while (find_entering_arc()) {
    pivot();
    if (keep_going && !keep_going()) throw Cancelled();
  }
  Basis basis;
  for (int u = 0; u < node_num_; ++u) {
    if (pred_[u] == kArtificial) {
      if (flow_[u] != 0) throw std::runtime_error("exact OT: the network simplex found no feasible flow");
    } else if (flow_[u] > 0) {
      basis.arcs.push_back(pred_[u]);
      basis.flows.push_back(flow_[u]);
    }
  }
  const double top = *std::max_element(pi_.begin(), pi_.begin() + node_num_);
  basis.potential.assign(pi_.begin(), pi_.begin() + node_num_);
  if (top > 0.0)
    for (double& p : basis.potential) p -= top;
  basis.pivots = pivots_;
  return basis;
}

}  // namespace

Basis solve(const double* cost, std::int64_t n, std::int64_t m, double scale, double cost_bound,
            const std::vector<std::int64_t>& supply, const std::vector<std::int64_t>& demand,
            const std::function<bool()>& keep_going) {
  return Simplex(cost, n, m, scale, cost_bound, supply, demand).run(keep_going);
}

}  // namespace tokenflow::transport
