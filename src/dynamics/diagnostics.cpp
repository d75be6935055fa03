// Per-frame diagnostics: moments, spectrum, effective rank, clusters, energy, largest norm.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <unordered_map>

#include "tokenflow/dynamics.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {

namespace {

struct UnionFind {
  std::vector<Eigen::Index> parent;
  explicit UnionFind(Eigen::Index n) : parent(static_cast<std::size_t>(n)) {
    std::iota(parent.begin(), parent.end(), Eigen::Index{0});
  }
  Eigen::Index find(Eigen::Index i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  }
  void join(Eigen::Index a, Eigen::Index b) {
    a = find(a), b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

std::int64_t cell_coordinate(double value, double side) {
  const double c = std::floor(value / side);
  return static_cast<std::int64_t>(std::clamp(c, -4e18, 4e18));
}

}  // namespace

template <class T>
long count_clusters(const Points<T>& x, double tol) {
  const Eigen::Index n = x.rows(), d = x.cols();
  if (n == 0) return 0;
  const double tol2 = tol * tol;
  // Level 1: micro-cells of side tol / m, m = ceil(sqrt(d)), on all coordinates: their diameter
  // is at most tol, and they nest exactly inside the coarse cells of level 2.
  const auto m = static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(d))));
  const double micro_side = tol / static_cast<double>(m);
  std::map<std::vector<std::int64_t>, std::vector<Eigen::Index>> micro;
  std::vector<std::int64_t> key(static_cast<std::size_t>(d));
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index c = 0; c < d; ++c) key[c] = cell_coordinate(static_cast<double>(x(i, c)), micro_side);
    micro[key].push_back(i);
  }
  UnionFind uf(n);
  std::vector<const std::vector<Eigen::Index>*> cells;
  std::vector<const std::vector<std::int64_t>*> micro_keys;
  for (const auto& [k, members] : micro) {
    for (std::size_t r = 1; r < members.size(); ++r) uf.join(members[0], members[r]);
    cells.push_back(&members);
    micro_keys.push_back(&k);
  }
  // Level 2: coarse cells of side tol on the first p = min(d, 3) coordinates (integer division
  // of the micro-cell coordinates); two points within tol lie in the same or neighbouring ones.
  const int p = static_cast<int>(std::min<Eigen::Index>(d, 3));
  struct KeyHash {
    std::size_t operator()(const std::array<std::int64_t, 3>& k) const {
      // Unsigned arithmetic: the products wrap around instead of overflowing.
      const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
      return static_cast<std::size_t>(u(k[0]) * 73856093u ^ u(k[1]) * 19349663u ^ u(k[2]) * 83492791u);
    }
  };
  std::unordered_map<std::array<std::int64_t, 3>, std::vector<std::size_t>, KeyHash> coarse;
  std::vector<std::array<std::int64_t, 3>> coarse_of(cells.size());
  for (std::size_t c = 0; c < cells.size(); ++c) {
    std::array<std::int64_t, 3> k{0, 0, 0};
    for (int q = 0; q < p; ++q) {
      const std::int64_t v = (*micro_keys[c])[q];
      k[q] = v >= 0 ? v / m : -((-v + m - 1) / m);  // floor division
    }
    coarse_of[c] = k;
    coarse[k].push_back(c);
  }
  auto within = [&](Eigen::Index i, Eigen::Index j) {
    double s = 0.0;
    for (Eigen::Index c = 0; c < d; ++c) {
      const double diff = static_cast<double>(x(i, c)) - static_cast<double>(x(j, c));
      s += diff * diff;
    }
    return s <= tol2;
  };
  for (std::size_t c = 0; c < cells.size(); ++c) {
    const auto& k = coarse_of[c];
    for (int dx = -1; dx <= 1; ++dx)
      for (int dy = (p > 1 ? -1 : 0); dy <= (p > 1 ? 1 : 0); ++dy)
        for (int dz = (p > 2 ? -1 : 0); dz <= (p > 2 ? 1 : 0); ++dz) {
          auto it = coarse.find({k[0] + dx, k[1] + dy, k[2] + dz});
          if (it == coarse.end()) continue;
          for (std::size_t other : it->second) {
            if (other <= c) continue;  // each pair of cells once
            if (uf.find(cells[c]->front()) == uf.find(cells[other]->front())) continue;
            bool joined = false;
            for (Eigen::Index i : *cells[c]) {
              for (Eigen::Index j : *cells[other])
                if (within(i, j)) {
                  uf.join(i, j);
                  joined = true;
                  break;
                }
              if (joined) break;
            }
          }
        }
  }
  long count = 0;
  for (Eigen::Index i = 0; i < n; ++i) count += uf.find(i) == i;
  return count;
}

template <class T>
double rms_radius(const Points<T>& x, const Vec<T>& weights) {
  const Eigen::Index n = x.rows(), d = x.cols();
  if (n == 0 || d == 0) return 0.0;
  const double scale = static_cast<double>(x.cwiseAbs().maxCoeff());
  if (!(scale > 0.0) || !std::isfinite(scale)) return scale == 0.0 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  Eigen::VectorXd mean = Eigen::VectorXd::Zero(d);
  for (Eigen::Index i = 0; i < n; ++i)
    mean += static_cast<double>(weights[i]) * (x.row(i).template cast<double>().transpose() / scale);
  double sum = 0.0;
  for (Eigen::Index i = 0; i < n; ++i)
    sum += static_cast<double>(weights[i]) *
           (x.row(i).template cast<double>().transpose() / scale - mean).squaredNorm();
  return scale * std::sqrt(sum);
}

template <class T>
long count_frame_clusters(const Points<T>& x, const Vec<T>& weights, const RunSpec& run, double initial_radius) {
  if (run.cluster_scale == ClusterScale::absolute) return count_clusters(x, run.cluster_tol);
  const double radius = std::max(rms_radius(x, weights), initial_radius);
  if (!(radius > 0.0)) return radius == 0.0 ? std::min<long>(x.rows(), 1) : -1;
  const double tol = run.cluster_tol * radius;
  // A normal tolerance: the grid's cells (side tol / sqrt(d)) and their coordinates x / side are
  // those of x / radius at cluster_tol, up to rounding. Below it (radii near double's smallest),
  // the points are counted about their mean in units of the radius instead.
  if (tol >= 0x1p-960) return count_clusters(x, tol);
  Points<double> scaled = x.template cast<double>();
  const Eigen::RowVectorXd mean = weights.template cast<double>().transpose() * scaled;
  scaled.rowwise() -= mean;
  scaled /= radius;
  return count_clusters(scaled, run.cluster_tol);
}

template <class T>
FrameDiagnostics measure_frame(double t, const Points<T>& x, const Vec<T>& weights, const RunSpec& run,
                               const AttentionField<T>* field, double initial_radius) {
  FrameDiagnostics f;
  f.t = t;
  const Eigen::Index n = x.rows(), d = x.cols();
  f.mean = Eigen::VectorXd::Zero(d);
  for (Eigen::Index i = 0; i < n; ++i) f.mean += static_cast<double>(weights[i]) * x.row(i).template cast<double>().transpose();
  Eigen::MatrixXd S = Eigen::MatrixXd::Zero(d, d);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::VectorXd y = x.row(i).template cast<double>().transpose() - f.mean;
    S.noalias() += static_cast<double>(weights[i]) * y * y.transpose();
  }
  S = 0.5 * (S + S.transpose());
  if (S.allFinite()) {
    f.cov_eigenvalues = linalg::symmetric_eigenvalues(S);
    const Eigen::VectorXd positive = f.cov_eigenvalues.cwiseMax(0.0);
    const double total = positive.sum(), largest = positive.maxCoeff();
    double entropy = 0.0;
    for (double lambda : positive)
      if (lambda > 0.0) entropy -= (lambda / total) * std::log(lambda / total);
    f.effective_rank = total > 0.0 ? std::exp(entropy) : 0.0;
    f.rank = static_cast<int>((positive.array() > run.rank_tol * largest).count());
    if (largest == 0.0) f.rank = 0;
  } else {
    f.cov_eigenvalues = Eigen::VectorXd::Constant(d, std::numeric_limits<double>::quiet_NaN());
    f.effective_rank = std::numeric_limits<double>::quiet_NaN();
  }
  f.max_norm = max_row_norm(x);
  f.cluster_count = x.allFinite() ? count_frame_clusters(x, weights, run, initial_radius) : -1;
  f.energy = (field && field->params().kind == AttentionKind::softmax)
                 ? field->interaction_energy(t, x)
                 : std::numeric_limits<double>::quiet_NaN();
  return f;
}

template <class T>
double max_row_norm(const Points<T>& x) {
  double largest = 0.0;
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const double r = static_cast<double>(x.row(i).norm());
    if (!(r <= largest)) largest = r;  // NaN is never <= anything, so it is kept
    if (std::isnan(largest)) return largest;
  }
  return largest;
}

template double max_row_norm<float>(const Points<float>&);
template double max_row_norm<double>(const Points<double>&);
template long count_clusters<float>(const Points<float>&, double);
template long count_clusters<double>(const Points<double>&, double);
template double rms_radius<float>(const Points<float>&, const Vec<float>&);
template double rms_radius<double>(const Points<double>&, const Vec<double>&);
template long count_frame_clusters<float>(const Points<float>&, const Vec<float>&, const RunSpec&, double);
template long count_frame_clusters<double>(const Points<double>&, const Vec<double>&, const RunSpec&, double);
template FrameDiagnostics measure_frame<float>(double, const Points<float>&, const Vec<float>&, const RunSpec&,
                                               const AttentionField<float>*, double);
template FrameDiagnostics measure_frame<double>(double, const Points<double>&, const Vec<double>&, const RunSpec&,
                                                const AttentionField<double>*, double);

}  // namespace tokenflow
