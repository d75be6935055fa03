// Coupling tasks and the metrics of a predicted coupling (tokenflow/tasks.hpp).
#include "tokenflow/tasks.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "tokenflow/error.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

const std::vector<std::string>& task_kind_names() {
  static const std::vector<std::string> names{"matching", "entropic-ot", "whitened-ot", "sorting",
                                                 "dataset", "texts"};
  return names;
}

bool task_has_assignment(const TaskSpec& t) {
  if (t.kind == "matching" || t.kind == "sorting") return true;
  // whitened-ot between uniform measures of one fixed size n = m: the exact plan is a permutation.
  return t.kind == "whitened-ot" && !t.random_weights && t.n == t.m && t.min_n == t.n &&
         t.min_m == t.m;
}

bool task_reads_pairs(const TaskSpec& t) { return t.kind == "dataset" || t.kind == "texts"; }

bool reports_accuracy(const TaskSpec& t, const std::vector<CouplingPair>& test_pairs) {
  if (!task_reads_pairs(t)) return task_has_assignment(t);
  return !test_pairs.empty() && std::all_of(test_pairs.begin(), test_pairs.end(),
                                            [](const CouplingPair& p) { return !p.assignment.empty(); });
}

std::uint64_t pair_seed(std::uint64_t seed, int stream, std::uint64_t index) {
  // splitmix64 finalizer over a combination of the three: distinct streams never collide in
  // practice and nearby indices give unrelated generators.
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull ^
                    (static_cast<std::uint64_t>(stream) + 1) * 0xBF58476D1CE4E5B9ull ^
                    (index + 0x632BE59BD9B4E019ull) * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

double uniform(Random& rng, double lo, double hi) {
  return lo + (hi - lo) * rng.uniform();
}

int uniform_int(Random& rng, int lo, int hi) {  // in [lo, hi]
  return lo + static_cast<int>(rng.next_u64() % static_cast<std::uint64_t>(hi - lo + 1));
}

std::vector<int> random_permutation(Random& rng, int n) {
  std::vector<int> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (int i = n - 1; i > 0; --i)
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(uniform_int(rng, 0, i))]);
  return p;
}

Points<double> uniform_cube(Random& rng, int n, int d) {
  Points<double> x(n, d);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = uniform(rng, -1.0, 1.0);
  return x;
}

Eigen::VectorXd weights(Random& rng, int n, bool random) {
  Eigen::VectorXd w = Eigen::VectorXd::Constant(n, 1.0);
  if (random)
    for (auto& v : w) v = uniform(rng, 0.5, 1.5);
  return w / w.sum();
}

// S^{-1/2} (x - mean) with the weighted moments of (x, w).
Points<double> whiten(const Points<double>& x, const Eigen::VectorXd& w) {
  const Eigen::RowVectorXd mean = w.transpose() * x;
  const Points<double> centered = x.rowwise() - mean;
  const Eigen::MatrixXd cov = centered.transpose() * w.asDiagonal() * centered;
  const linalg::SymmetricEigen eig = linalg::symmetric_eigen(cov);
  const Eigen::VectorXd ev = eig.values.cwiseMax(1e-300);
  const Eigen::MatrixXd inv_sqrt = eig.vectors * ev.cwiseSqrt().cwiseInverse().asDiagonal() * eig.vectors.transpose();
  return centered * inv_sqrt;  // inv_sqrt is symmetric
}

std::vector<int> assignment_of(const RowMatrix& target) {
  std::vector<int> a(static_cast<std::size_t>(target.rows()));
  for (Eigen::Index i = 0; i < target.rows(); ++i) {
    Eigen::Index j;
    target.row(i).maxCoeff(&j);
    a[static_cast<std::size_t>(i)] = static_cast<int>(j);
  }
  return a;
}

}  // namespace

std::string describe_task(const TaskSpec& t) {
  if (t.kind == "dataset")
    return t.path.empty() ? "dataset: the pairs given in memory"
                          : fmt::format("dataset: the pairs of {}/train (one .npz a pair)", t.path);
  if (t.kind == "texts")
    return fmt::format("texts: the aligned text pairs of {} (word vectors {})", t.path, t.vectors);
  const auto sizes = [](const char* name, int lo, int hi) {
    return lo == hi ? fmt::format("{} = {}", name, hi) : fmt::format("{} ~ U{{{}, ..., {}}}", name, lo, hi);
  };
  const bool square = t.kind == "matching" || t.kind == "sorting";
  const std::string n = sizes("n", t.min_n, t.n), m = square ? "m = n" : sizes("m", t.min_m, t.m);
  const std::string weights = t.random_weights ? "weights ~ U[0.5, 1.5], normalized" : "uniform weights";
  const std::string affine = fmt::format("s ~ U[{:g}, {:g}], t ~ N(0, {:g}^2 I)", t.scale_min, t.scale_max, t.shift);
  if (t.kind == "matching")
    return fmt::format("matching: x_i ~ U[-1, 1]^{}, {}; y_j = s x_sigma(j) + t + {:g} N(0, I), {}, sigma a "
                       "random permutation; target: the permutation coupling; uniform weights",
                       t.d, n, t.noise, affine);
  if (t.kind == "sorting")
    return fmt::format("sorting: x_i ~ U[-1, 1], {}; y_j = -1 + (2j + 1)/n (the ranks); target: x_i to its rank; "
                       "uniform weights", n);
  if (t.kind == "entropic-ot")
    return fmt::format("entropic-ot: x_i ~ U[-1, 1]^{}, {}; y_j = s u_j + t, u_j ~ U[-1, 1]^{}, {}, {}; target: the "
                       "Sinkhorn plan for |x - y|^{} at epsilon = {:g}; {}",
                       t.d, n, t.d, m, affine, t.p, t.target_epsilon, weights);
  return fmt::format("whitened-ot: x_i = A u_i + t, y_j = B w_j + t', u, w ~ U[-1, 1]^{}, A, B with N(0, 1) "
                     "entries, t, t' ~ N(0, {:g}^2 I), {}, {}; target: the exact OT plan between the whitened "
                     "measures; {}",
                     t.d, t.shift, n, m, weights);
}

CouplingPair make_pair(const TaskSpec& t, std::uint64_t seed) {
  if (task_reads_pairs(t))  // read, not drawn: tokenflow/dataset.hpp, tokenflow/texts.hpp
    throw InputError("", "task.kind", t.kind + " pairs are read from files or given, not drawn");
  Random rng(seed);
  const int n = uniform_int(rng, t.min_n, t.n);
  const bool square = t.kind == "matching" || t.kind == "sorting";
  const int m = square ? n : uniform_int(rng, t.min_m, t.m);
  const int d = t.d;
  CouplingPair p;
  p.a = weights(rng, n, t.random_weights);
  p.b = weights(rng, m, t.random_weights);
  if (t.kind == "matching") {
    p.x = uniform_cube(rng, n, d);
    const double s = uniform(rng, t.scale_min, t.scale_max);
    Eigen::RowVectorXd shift(d);
    for (auto& v : shift) v = t.shift * rng.normal();
    const std::vector<int> sigma = random_permutation(rng, n);
    p.y.resize(m, d);
    p.target = RowMatrix::Zero(n, m);
    p.assignment.assign(static_cast<std::size_t>(n), 0);
    for (int j = 0; j < m; ++j) {
      const int i = sigma[static_cast<std::size_t>(j)];
      for (int c = 0; c < d; ++c) p.y(j, c) = s * p.x(i, c) + shift[c] + t.noise * rng.normal();
      p.target(i, j) = 1.0 / n;
      p.assignment[static_cast<std::size_t>(i)] = j;
    }
  } else if (t.kind == "sorting") {
    p.x = uniform_cube(rng, n, 1);
    p.y.resize(m, 1);
    for (int j = 0; j < m; ++j) p.y(j, 0) = -1.0 + (2.0 * j + 1.0) / m;
    std::vector<int> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int i, int k) { return p.x(i, 0) < p.x(k, 0); });
    p.target = RowMatrix::Zero(n, m);
    p.assignment.assign(static_cast<std::size_t>(n), 0);
    for (int r = 0; r < n; ++r) {
      p.target(order[static_cast<std::size_t>(r)], r) = 1.0 / n;
      p.assignment[static_cast<std::size_t>(order[static_cast<std::size_t>(r)])] = r;
    }
  } else if (t.kind == "entropic-ot") {
    p.x = uniform_cube(rng, n, d);
    const double s = uniform(rng, t.scale_min, t.scale_max);
    Eigen::RowVectorXd shift(d);
    for (auto& v : shift) v = t.shift * rng.normal();
    p.y = (s * uniform_cube(rng, m, d)).rowwise() + shift;
    RowMatrix cost(n, m);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) {
        const double dist = (p.x.row(i) - p.y.row(j)).norm();
        cost(i, j) = t.p == 1 ? dist : dist * dist;
      }
    SinkhornOptions opt;
    opt.epsilon = t.target_epsilon;
    opt.tol = 1e-9;  // l1 marginal error of the target; far below what a model reaches
    opt.max_iter = kInnerSinkhornMaxIter;
    opt.want_plan = true;
    p.target = sinkhorn(DenseSoftMin(std::move(cost)), p.a, p.b, opt).plan;
  } else {  // whitened-ot
    auto affine = [&](int count) {
      Eigen::MatrixXd A(d, d);
      for (auto& v : A.reshaped()) v = rng.normal();
      Eigen::RowVectorXd shift(d);
      for (auto& v : shift) v = t.shift * rng.normal();
      return Points<double>((uniform_cube(rng, count, d) * A.transpose()).rowwise() + shift);
    };
    p.x = affine(n);
    p.y = affine(m);
    const Points<double> xw = whiten(p.x, p.a), yw = whiten(p.y, p.b);
    RowMatrix cost(n, m);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) cost(i, j) = (xw.row(i) - yw.row(j)).squaredNorm();
    p.target = exact_ot(cost, p.a, p.b).plan;
    if (n == m && !t.random_weights) p.assignment = assignment_of(p.target);
  }
  return p;
}

long double coupling_w1_bytes(long double atoms, long double target_atoms) { return 16.0L * atoms * target_atoms; }

double coupling_w1(const Points<double>& x, const Points<double>& y, const RowMatrix& pi,
                   const RowMatrix& sigma, const std::function<bool()>& keep_going) {
  const Eigen::Index n = pi.rows(), m = pi.cols();
  struct Atom {
    Eigen::Index i, j;
  };
  auto support = [&](const RowMatrix& plan, std::vector<Atom>& atoms, Eigen::VectorXd& mass) {
    std::vector<double> w;
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < m; ++j)
        if (plan(i, j) > 0.0) {
          atoms.push_back({i, j});
          w.push_back(plan(i, j));
        }
    mass = Eigen::Map<const Eigen::VectorXd>(w.data(), static_cast<Eigen::Index>(w.size()));
  };
  std::vector<Atom> p_atoms, s_atoms;
  Eigen::VectorXd p_mass, s_mass;
  support(pi, p_atoms, p_mass);
  support(sigma, s_atoms, s_mass);
  check_memory(coupling_w1_bytes(static_cast<long double>(p_atoms.size()), static_cast<long double>(s_atoms.size())),
               fmt::format("W_1 between two couplings of {} and {} tokens (exact OT between {} and {} atoms, its cost "
                           "matrix and plan)",
                           n, m, p_atoms.size(), s_atoms.size()),
               "", "task.n");
  // Points whose squared distances may leave double's range (an entry beyond 2^480, or all below
  // 2^-480, where they vanish) are measured by norms that never square (stableNorm, hypot) and in
  // halves (exact), so that differences up to the largest double stay finite: W_1 is homogeneous.
  const double largest = std::max(x.size() ? x.cwiseAbs().maxCoeff() : 0.0, y.size() ? y.cwiseAbs().maxCoeff() : 0.0);
  const bool wide = !(largest <= 0x1p480) || (largest > 0.0 && largest < 0x1p-480);
  const double unit = wide ? 2.0 : 1.0;
  // |x_i - x_i'| and |y_j - y_j'| tables (squared unless wide), then |(x, y) - (x', y')|.
  Eigen::MatrixXd dx(n, n), dy(m, m);
  const auto distances = [&](const Points<double>& p, Eigen::MatrixXd& out) {
    for (Eigen::Index i = 0; i < p.rows(); ++i)
      for (Eigen::Index k = 0; k < p.rows(); ++k)
        out(i, k) = wide ? (p.row(i) / unit - p.row(k) / unit).stableNorm() : (p.row(i) - p.row(k)).squaredNorm();
  };
  distances(x, dx);
  distances(y, dy);
  RowMatrix cost(static_cast<Eigen::Index>(p_atoms.size()),
                 static_cast<Eigen::Index>(s_atoms.size()));
  for (std::size_t r = 0; r < p_atoms.size(); ++r) {
    if (keep_going && !keep_going()) throw Cancelled();  // (n m) x atoms entries take seconds
    for (std::size_t c = 0; c < s_atoms.size(); ++c) {
      const double u = dx(p_atoms[r].i, s_atoms[c].i), v = dy(p_atoms[r].j, s_atoms[c].j);
      cost(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = wide ? std::hypot(u, v) : std::sqrt(u + v);
    }
  }
  return exact_ot(cost, p_mass / p_mass.sum(), s_mass / s_mass.sum(), keep_going).cost * unit;
}

double assignment_accuracy(const RowMatrix& pi, const std::vector<int>& assignment) {
  int correct = 0, rows = 0;
  for (Eigen::Index i = 0; i < pi.rows() && !assignment.empty(); ++i) {
    if (assignment[static_cast<std::size_t>(i)] < 0) continue;  // no link in this row
    Eigen::Index j;
    pi.row(i).maxCoeff(&j);
    correct += static_cast<int>(j) == assignment[static_cast<std::size_t>(i)];
    ++rows;
  }
  return rows == 0 ? std::nan("") : static_cast<double>(correct) / static_cast<double>(rows);
}

AlignmentCounts& AlignmentCounts::operator+=(const AlignmentCounts& o) {
  predicted += o.predicted;
  sure += o.sure;
  predicted_sure += o.predicted_sure;
  predicted_possible += o.predicted_possible;
  return *this;
}

AlignmentCounts alignment_counts(const RowMatrix& pi, const std::vector<std::pair<int, int>>& sure,
                                 const std::vector<std::pair<int, int>>& possible) {
  // Eigen's maxCoeff returns the first index of the maximum: ties go to the first row or column.
  std::vector<Eigen::Index> column_max(static_cast<std::size_t>(pi.cols()));
  for (Eigen::Index j = 0; j < pi.cols(); ++j) pi.col(j).maxCoeff(&column_max[static_cast<std::size_t>(j)]);
  const std::set<std::pair<int, int>> s(sure.begin(), sure.end()), p(possible.begin(), possible.end());
  AlignmentCounts c;
  c.sure = static_cast<long>(s.size());
  for (Eigen::Index i = 0; i < pi.rows(); ++i) {
    Eigen::Index j;
    pi.row(i).maxCoeff(&j);
    if (column_max[static_cast<std::size_t>(j)] != i) continue;
    const std::pair<int, int> link{static_cast<int>(i), static_cast<int>(j)};
    ++c.predicted;
    c.predicted_sure += s.count(link) > 0;
    c.predicted_possible += s.count(link) > 0 || p.count(link) > 0;
  }
  return c;
}

double link_mass(const RowMatrix& pi, const std::vector<std::pair<int, int>>& links) {
  const double total = pi.sum();
  if (!(total > 0.0)) return std::nan("");
  double on_links = 0.0;
  for (const auto& [i, j] : std::set<std::pair<int, int>>(links.begin(), links.end())) on_links += pi(i, j);
  return on_links / total;
}

AlignmentScores alignment_scores(const AlignmentCounts& c) {
  AlignmentScores r;
  if (c.predicted > 0) r.precision = static_cast<double>(c.predicted_possible) / static_cast<double>(c.predicted);
  if (c.sure > 0) r.recall = static_cast<double>(c.predicted_sure) / static_cast<double>(c.sure);
  if (c.predicted + c.sure > 0)
    r.aer = 1.0 - static_cast<double>(c.predicted_sure + c.predicted_possible) / static_cast<double>(c.predicted + c.sure);
  return r;
}

}  // namespace tokenflow
