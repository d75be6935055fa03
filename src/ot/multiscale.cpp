// Multiscale Sinkhorn (ot_multiscale.hpp): cells, their centroids, the coarse solves and the
// extrapolation of the potentials between clouds.
#include "tokenflow/ot_multiscale.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <utility>

#include "tokenflow/error.hpp"
#include "tokenflow/ot_solve.hpp"
#include "stages.hpp"

namespace tokenflow {

namespace {

// A cell's integer coordinates, kBits per dimension, packed into one key (k <= 3).
constexpr int kBits = 21;
constexpr std::uint64_t kCoordinateMask = (std::uint64_t{1} << kBits) - 1;

// The centroids of one grid of cells: the cloud and each centroid's cell key.
struct Cells {
  WeightedCloud cloud;
  std::vector<std::uint64_t> keys;
  double cell = 0.0;
};

// Sums the points (rows of `points`, weights w) whose keys are equal into centroids; `order` lists
// the rows sorted by key. Cells of zero weight are dropped.
Cells sum_cells(const CloudPoints& points, const Eigen::VectorXd& w,
                const std::vector<std::pair<std::uint64_t, Eigen::Index>>& order, double cell) {
  const Eigen::Index k = points.cols();
  Cells c;
  c.cell = cell;
  std::vector<double> sums;
  std::vector<double> masses;
  for (std::size_t s = 0; s < order.size();) {
    std::size_t e = s;
    std::vector<double> sum(static_cast<std::size_t>(k), 0.0);
    double mass = 0.0;
    for (; e < order.size() && order[e].first == order[s].first; ++e) {
      const Eigen::Index i = order[e].second;
      mass += w[i];
      for (Eigen::Index d = 0; d < k; ++d) sum[static_cast<std::size_t>(d)] += w[i] * points(i, d);
    }
    if (mass > 0.0) {
      for (double v : sum) sums.push_back(v / mass);
      masses.push_back(mass);
      c.keys.push_back(order[s].first);
    }
    s = e;
  }
  const auto count = static_cast<Eigen::Index>(masses.size());
  c.cloud.points = Eigen::Map<const CloudPoints>(sums.data(), count, k);
  c.cloud.weights = Eigen::Map<const Eigen::VectorXd>(masses.data(), count);
  return c;
}

// The cells of side `cell` from `origin` over the points; nullopt when a coordinate needs more
// than kBits bits (a box wider than 2^21 cells).
std::optional<Cells> cells_of_points(const CloudPoints& points, const Eigen::VectorXd& w, double cell,
                                     const Eigen::RowVectorXd& origin) {
  const Eigen::Index n = points.rows(), k = points.cols();
  std::vector<std::pair<std::uint64_t, Eigen::Index>> order(static_cast<std::size_t>(n));
  for (Eigen::Index i = 0; i < n; ++i) {
    std::uint64_t key = 0;
    for (Eigen::Index d = 0; d < k; ++d) {
      const double c = std::floor((points(i, d) - origin[d]) / cell);
      if (!(c >= 0.0 && c <= static_cast<double>(kCoordinateMask))) return std::nullopt;
      key = (key << kBits) | static_cast<std::uint64_t>(c);
    }
    order[static_cast<std::size_t>(i)] = {key, i};
  }
  std::sort(order.begin(), order.end());
  return sum_cells(points, w, order, cell);
}

// The cells of side 2 c.cell (each the union of up to 2^k cells of c): the centroids' centroids.
Cells coarsened(const Cells& c, Eigen::Index k) {
  std::vector<std::pair<std::uint64_t, Eigen::Index>> order(c.keys.size());
  for (std::size_t i = 0; i < c.keys.size(); ++i) {
    std::uint64_t key = 0;
    for (Eigen::Index d = 0; d < k; ++d) {
      const std::uint64_t coordinate = (c.keys[i] >> (kBits * (k - 1 - d))) & kCoordinateMask;
      key = (key << kBits) | (coordinate >> 1);
    }
    order[i] = {key, static_cast<Eigen::Index>(i)};
  }
  std::sort(order.begin(), order.end());
  return sum_cells(c.cloud.points, c.cloud.weights, order, 2.0 * c.cell);
}

// The largest pairs count of a coarse solve held as a dense cost matrix (32 MB); larger ones run
// on the grid.
constexpr double kDenseLevelMaxPairs = 1 << 22;

std::unique_ptr<SoftMin> level_operator(const CloudPoints& x, const CloudPoints& y, double relative_tol) {
  if (static_cast<double>(x.rows()) * static_cast<double>(y.rows()) <= kDenseLevelMaxPairs) {
    return std::make_unique<DenseSoftMin>(cost_matrix(x, y, CostKind::sqeuclidean));
  }
  return std::make_unique<GridSoftMin>(x, y, relative_tol);
}

// A cloud's potential and where it lives.
struct Potentials {
  const WeightedCloud* x = nullptr;
  const WeightedCloud* y = nullptr;
  Eigen::VectorXd f, g;
};

// f on `x` from the last cloud's g and g on `y` from its f, at eps (the extrapolation of
// ot_multiscale.hpp).
void extrapolate(const Potentials& from, const CloudPoints& x, const CloudPoints& y, double eps, double relative_tol,
                 Eigen::VectorXd& f, Eigen::VectorXd& g) {
  const Eigen::VectorXd h_cols = from.y->weights.array().log() + from.g.array() / eps;
  const Eigen::VectorXd h_rows = from.x->weights.array().log() + from.f.array() / eps;
  level_operator(x, from.y->points, relative_tol)->softmin_rows(eps, h_cols, f);
  level_operator(from.x->points, y, relative_tol)->softmin_cols(eps, h_rows, g);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The level (cell = base 2^level) of a stage at e: the coarsest with cell <= factor sqrt(e),
// base = factor sqrt(epsilon): floor(log2(sqrt(e / epsilon))).
int level_of(double e, double epsilon) {
  return static_cast<int>(std::floor(0.5 * std::log2(e / epsilon) + 1e-12));
}

// The most grids finer than the final epsilon's cells (each halves the cell side).
constexpr std::size_t kFinerLevels = 8;

// The grids of cells from the level `finest` (cell = base 2^level, base = cell_factor
// sqrt(epsilon)) up to `coarsest`: the finest is the first level whose clouds keep at most
// finest_share of the points, and below 0 (finer than the final epsilon needs) while they still
// do. Stages of a level below `finest` run on the given points.
struct Ladder {
  std::vector<Cells> x, y;
  int finest = 0;
};

std::optional<Ladder> build_ladder(const CloudPoints& x, const CloudPoints& y, const Eigen::VectorXd& a,
                                   const Eigen::VectorXd& b, double epsilon, int coarsest,
                                   const MultiscaleOptions& ms) {
  const Eigen::RowVectorXd origin = x.colwise().minCoeff().cwiseMin(y.colwise().minCoeff());
  const double box = (x.colwise().maxCoeff().cwiseMax(y.colwise().maxCoeff()) - origin).maxCoeff();
  const double base = ms.cell_factor * std::sqrt(epsilon);
  auto fits = [&](const Cells& cx, const Cells& cy) {
    return static_cast<double>(cx.cloud.points.rows()) <= ms.finest_share * static_cast<double>(x.rows()) &&
           static_cast<double>(cy.cloud.points.rows()) <= ms.finest_share * static_cast<double>(y.rows());
  };
  // The first level whose cells number fewer than 2^20 along the box (their keys fit).
  int level = 0;
  while (level < coarsest && box / (base * std::ldexp(1.0, level)) >= 0x1p20) ++level;
  std::optional<Cells> cx = cells_of_points(x, a, base * std::ldexp(1.0, level), origin);
  std::optional<Cells> cy = cells_of_points(y, b, base * std::ldexp(1.0, level), origin);
  if (!cx || !cy) return std::nullopt;
  const Eigen::Index k = x.cols();
  for (; !fits(*cx, *cy); ++level) {
    if (level >= coarsest) return std::nullopt;
    cx = coarsened(*cx, k);
    cy = coarsened(*cy, k);
  }
  Ladder ladder;
  ladder.finest = level;
  if (level == 0) {  // finer grids at the final epsilon while they shrink the clouds enough
    std::vector<Cells> finer_x, finer_y;
    // At most kFinerLevels (clouds of repeated points never grow past finest_share).
    for (double cell = base / 2.0; finer_x.size() < kFinerLevels; cell /= 2.0) {
      std::optional<Cells> fx = cells_of_points(x, a, cell, origin), fy = cells_of_points(y, b, cell, origin);
      if (!fx || !fy || !fits(*fx, *fy)) break;
      finer_x.push_back(std::move(*fx));
      finer_y.push_back(std::move(*fy));
    }
    ladder.finest = -static_cast<int>(finer_x.size());
    ladder.x.assign(std::make_move_iterator(finer_x.rbegin()), std::make_move_iterator(finer_x.rend()));
    ladder.y.assign(std::make_move_iterator(finer_y.rbegin()), std::make_move_iterator(finer_y.rend()));
  }
  ladder.x.push_back(std::move(*cx));
  ladder.y.push_back(std::move(*cy));
  for (; level < coarsest; ++level) {
    ladder.x.push_back(coarsened(ladder.x.back(), k));
    ladder.y.push_back(coarsened(ladder.y.back(), k));
  }
  return ladder;
}

// One coarse solve: stages [first, last] of the schedule on the clouds (cx, cy), from the last
// cloud's potentials (none for the first solve); its potentials replace `state`.
void solve_level(const Cells& cx, const Cells& cy, const std::vector<double>& schedule, std::size_t first,
                 std::size_t last, double tol, int max_iter, const SinkhornOptions& options, Potentials& state,
                 std::vector<MultiscaleLevel>* levels) {
  const auto clock = std::chrono::steady_clock::now();
  const double relative_tol = grid_relative_tol(tol);  // as solve_ot's grid operator
  SinkhornOptions o;
  o.epsilon = schedule[last];
  o.epsilon_start = last > first ? schedule[first] : 0.0;
  o.epsilon_decay = options.epsilon_decay;
  o.epsilon_stage_tol = options.epsilon_stage_tol;
  o.tol = tol;
  o.max_iter = max_iter;
  o.overrelaxation = options.overrelaxation;
  o.anderson_depth = options.anderson_depth;
  if (state.x != nullptr)
    extrapolate(state, cx.cloud.points, cy.cloud.points, schedule[first], relative_tol, o.f_init, o.g_init);
  const auto op = level_operator(cx.cloud.points, cy.cloud.points, relative_tol);
  SinkhornResult r = sinkhorn(*op, cx.cloud.weights, cy.cloud.weights, o);
  state = Potentials{&cx.cloud, &cy.cloud, std::move(r.f), std::move(r.g)};
  if (levels != nullptr)
    levels->push_back(MultiscaleLevel{cx.cell, cx.cloud.points.rows(), cy.cloud.points.rows(), schedule[first],
                                      schedule[last], r.iterations, r.marginal_error, seconds_since(clock)});
}

}  // namespace

WeightedCloud cell_centroids(const CloudPoints& points, const Eigen::VectorXd& weights, double cell,
                             const Eigen::RowVectorXd& origin) {
  if (!(cell > 0.0) || origin.size() != points.cols() || weights.size() != points.rows() || points.cols() > 3)
    throw InputError("", "cell", "cell_centroids needs cell > 0, points of dimension <= 3 and matching sizes");
  std::optional<Cells> c = cells_of_points(points, weights, cell, origin);
  if (!c) throw InputError("", "cell", "the points span more than 2^21 cells in some dimension");
  return std::move(c->cloud);
}

std::optional<SinkhornResult> sinkhorn_multiscale(const SoftMin& fine, const CloudPoints& x, const CloudPoints& y,
                                                  const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                                                  const SinkhornOptions& options,
                                                  const MultiscaleOptions& multiscale,
                                                  std::vector<MultiscaleLevel>* levels) {
  check_sinkhorn_options(options);
  const std::vector<double> schedule = stages::epsilon_schedule(fine, options);
  if (schedule.size() < 2 || !std::isinf(options.marginal_penalty) || options.f_init.size() > 0 ||
      options.g_init.size() > 0 || x.cols() < 1 || x.cols() > 3 || y.cols() != x.cols() ||
      std::min(x.rows(), y.rows()) < multiscale.min_points)
    return std::nullopt;
  const int coarsest = level_of(schedule.front(), options.epsilon);
  std::optional<Ladder> ladder = build_ladder(x, y, a, b, options.epsilon, coarsest, multiscale);
  if (!ladder) return std::nullopt;
  auto cells_at = [&](int level, const std::vector<Cells>& side) -> const Cells& {
    return side[static_cast<std::size_t>(level - ladder->finest)];
  };
  // The schedule, each run of stages of one level on that level's clouds, down to the first stage
  // whose level is below the ladder's.
  Potentials state;
  const double stage_tol = std::max(options.tol, options.epsilon_stage_tol);
  std::size_t first = 0;
  while (first < schedule.size() && level_of(schedule[first], options.epsilon) >= ladder->finest) {
    const int level = level_of(schedule[first], options.epsilon);
    std::size_t last = first;
    while (last + 1 < schedule.size() && level_of(schedule[last + 1], options.epsilon) == level) ++last;
    solve_level(cells_at(level, ladder->x), cells_at(level, ladder->y), schedule, first, last, stage_tol,
                multiscale.level_max_iter, options, state, levels);
    first = last + 1;
  }
  // The finer clouds at epsilon, each from the last.
  const std::vector<double> final_epsilon{options.epsilon};
  const double finest_tol = std::max(options.tol, multiscale.finest_tol);
  for (int level = -1; level >= ladder->finest; --level)
    solve_level(cells_at(level, ladder->x), cells_at(level, ladder->y), final_epsilon, 0, 0, finest_tol,
                multiscale.finest_max_iter, options, state, levels);
  // The given points from there: the stages left (at least the final one), from the last cloud.
  const double resume = first < schedule.size() ? schedule[first] : options.epsilon;
  SinkhornOptions last = options;
  last.epsilon_start = resume > options.epsilon ? resume : 0.0;
  extrapolate(state, x, y, resume, grid_relative_tol(options.tol), last.f_init, last.g_init);
  return sinkhorn(fine, a, b, last);
}

}  // namespace tokenflow
