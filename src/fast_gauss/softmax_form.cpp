// Softmax averages through a Gauss form chosen for the keys' cloud (tokenflow/fast_gauss.hpp has
// the choice and why), with retries on a stretched form for the rows its certificate rejects.

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include "tokenflow/fast_gauss.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {

SoftmaxGaussForm softmax_gauss_form(const GaussMatrix& queries, const GaussMatrix& keys,
                                    const Eigen::VectorXd& log_weights, double stretch,
                                    const Eigen::RowVectorXd* centre, bool weighted_moments) {
  const Eigen::Index n = keys.rows(), k = keys.cols();
  if (n < 1 || queries.cols() != k || log_weights.size() != n)
    throw std::invalid_argument("softmax_gauss_form: queries m x k, keys n x k (n >= 1), log_weights n");
  if (!(stretch > 0.0) || !std::isfinite(stretch)) throw std::invalid_argument("softmax_gauss_form: stretch must be positive");
  // The keys' moments: uniform, or weighted by a_j / sum a (shifted by the largest log a_j).
  Eigen::VectorXd share = Eigen::VectorXd::Constant(n, 1.0 / static_cast<double>(n));
  if (weighted_moments) {
    const double top = log_weights.maxCoeff();
    if (!std::isfinite(top)) throw std::invalid_argument("softmax_gauss_form: no finite log-weight");
    share = (log_weights.array() - top).exp();
    share /= share.sum();
  }
  const Eigen::RowVectorXd mean = share.transpose() * keys;
  const Eigen::MatrixXd centred = keys.rowwise() - mean;
  const Eigen::MatrixXd covariance = centred.transpose() * share.asDiagonal() * centred;
  const linalg::SymmetricEigen eigen = linalg::symmetric_eigen(covariance);
  const double largest = eigen.values.maxCoeff();
  SoftmaxGaussForm form;
  if (!(largest > 0.0) || !std::isfinite(largest)) {  // one key, or all keys equal: M = f I
    form.sources = stretch * centred;
    form.targets = queries / stretch;
  } else {
    const Eigen::VectorXd root = eigen.values.cwiseMax(1e-12 * largest).cwiseSqrt();
    const Eigen::MatrixXd& U = eigen.vectors;
    const Eigen::MatrixXd M = stretch * U * root.cwiseInverse().asDiagonal() * U.transpose();  // symmetric
    const Eigen::MatrixXd M_inverse = U * root.asDiagonal() * U.transpose() / stretch;
    form.sources = centred * M;  // rows: (M (k_j - mu))^T, M symmetric
    form.targets = queries * M_inverse;
  }
  if (centre) {
    if (centre->size() != k)
      throw std::invalid_argument("softmax_gauss_form: centre must have k entries");
    form.sources.rowwise() -= *centre;  // <q~, k~> = <q~, c> + <q~, k~ - c>
  }
  form.log_weights = log_weights + 0.5 * form.sources.rowwise().squaredNorm();
  form.row_offset = 0.5 * form.targets.rowwise().squaredNorm() + queries * mean.transpose();
  if (centre) form.row_offset += form.targets * centre->transpose();
  return form;
}

namespace {

GaussMatrix rows_of(const GaussMatrix& a, const std::vector<Eigen::Index>& rows) {
  GaussMatrix out(static_cast<Eigen::Index>(rows.size()), a.cols());
  for (std::size_t r = 0; r < rows.size(); ++r) out.row(static_cast<Eigen::Index>(r)) = a.row(rows[r]);
  return out;
}

// The groups of the centred passes: the rows (indices into `targets`) whose whitened targets q~
// fall in the same cube of side kCentredCell, largest group first (ties by cell), at most
// kCentredGroups groups of at least kCentredMinRows rows; the other rows are in no group.
std::vector<std::vector<Eigen::Index>> centred_groups(const GaussMatrix& targets) {
  std::map<std::vector<long>, std::vector<Eigen::Index>> cells;
  std::vector<long> cell(static_cast<std::size_t>(targets.cols()));
  for (Eigen::Index i = 0; i < targets.rows(); ++i) {
    bool representable = true;  // a cell index a long holds (not so for huge or non-finite targets)
    for (Eigen::Index e = 0; e < targets.cols(); ++e) {
      const double index = std::floor(targets(i, e) / kCentredCell);
      representable = representable && std::abs(index) < 1e15;
      if (representable) cell[static_cast<std::size_t>(e)] = static_cast<long>(index);
    }
    if (representable) cells[cell].push_back(i);
  }
  std::vector<std::vector<Eigen::Index>> groups;
  for (auto& [key, rows] : cells)
    if (static_cast<Eigen::Index>(rows.size()) >= kCentredMinRows)
      groups.push_back(std::move(rows));
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  if (groups.size() > static_cast<std::size_t>(kCentredGroups))
    groups.resize(static_cast<std::size_t>(kCentredGroups));
  return groups;
}

// The heaviest key k~* = argmax_j (log a_j + <t, k~_j>) of the whitened form (stretch 1) for a
// query whose whitened target is t (ties: the first such key).
Eigen::RowVectorXd heaviest_key(const SoftmaxGaussForm& whitened,
                                const Eigen::VectorXd& log_weights, const Eigen::RowVectorXd& t) {
  Eigen::Index best = 0;
  double top = -std::numeric_limits<double>::infinity();
  for (Eigen::Index j = 0; j < whitened.sources.rows(); ++j) {
    const double v = log_weights[j] + whitened.sources.row(j).dot(t);
    if (v > top) {
      top = v;
      best = j;
    }
  }
  return whitened.sources.row(best);
}

// The centred passes of softmax_average (tokenflow/fast_gauss.hpp): per group of the rows
// `pending` (ascending) left by the stretched forms, the whitened form at stretch f, shifted so
// that the group's heaviest key sits on its mean target (softmax_gauss_form's centre); f = 1, then
// smaller for the rows still left (fewer bandwidths between a target and the keys whose logits are
// near its largest). sum_rows(rows, form, last) is softmax_average's: it writes the rows the
// form's certificate accepts and returns {the others, whether a grid ran, the grid's predicted
// work}. Removes the rows summed from `pending`.
// `least_grid_cost` is a lower bound on any grid's predicted work for these keys (gauss_average
// builds no grid for r rows whose work would exceed max_cost_per_pair r n): a group too small to
// pay even for it is not tried, nor are the smaller ones after it.
template <class FormOf, class SumRows>
void centred_passes(const GaussMatrix& queries, const GaussMatrix& keys,
                    const Eigen::VectorXd& log_weights, std::vector<Eigen::Index>& pending,
                    double max_cost_per_pair, double least_grid_cost, FormOf&& form_of, SumRows&& sum_rows) {
  auto may_pay = [&](std::size_t rows) {
    return least_grid_cost <= max_cost_per_pair * static_cast<double>(rows) * static_cast<double>(keys.rows());
  };
  // A budget for all of them together: what one pass may spend on these rows (max_cost_per_pair
  // multiply-adds a pair, gauss_average's rule), so that rows no form certifies cost at most that
  // plus their exact sums, where each group alone may spend it on its own rows at every stretch.
  const double budget =
      max_cost_per_pair * static_cast<double>(pending.size()) * static_cast<double>(keys.rows());
  double spent = 0.0;
  for (const double f : kCentredStretches) {
    if (static_cast<Eigen::Index>(pending.size()) < kCentredMinRows || spent >= budget ||
        !may_pay(pending.size()))
      break;
    const SoftmaxGaussForm whitened = form_of(rows_of(queries, pending), 1.0, nullptr);
    std::vector<char> left(pending.size(), 1);
    for (const auto& group : centred_groups(whitened.targets / f)) {
      if (spent >= budget || !may_pay(group.size())) break;  // groups come largest first
      std::vector<Eigen::Index> rows;  // indices into `queries`, ascending
      Eigen::RowVectorXd mean = Eigen::RowVectorXd::Zero(keys.cols());
      for (const Eigen::Index r : group) {
        rows.push_back(pending[static_cast<std::size_t>(r)]);
        mean += whitened.targets.row(r);
      }
      mean /= static_cast<double>(group.size());
      const Eigen::RowVectorXd centre = f * heaviest_key(whitened, log_weights, mean) - mean / f;
      const auto [still, used_grid, work] = sum_rows(
          rows, form_of(rows_of(queries, rows), f, &centre), false);
      spent += work;
      if (!used_grid) continue;
      std::size_t s = 0;
      for (std::size_t r = 0; r < rows.size(); ++r) {
        if (s < still.size() && still[s] == rows[r]) {
          ++s;
          continue;
        }
        left[static_cast<std::size_t>(group[r])] = 0;
      }
    }
    std::vector<Eigen::Index> still;
    for (std::size_t r = 0; r < pending.size(); ++r)
      if (left[r]) still.push_back(pending[r]);
    pending.swap(still);
  }
}

}  // namespace

GaussAverageStats softmax_average(const GaussMatrix& queries, const GaussMatrix& keys,
                                  const Eigen::VectorXd& log_weights, const GaussMatrix& values,
                                  const GaussAverageOptions& options, GaussMatrix& out,
                                  Eigen::VectorXd* log_partition, const SoftmaxGaussForm* first_form,
                                  bool weighted_moments) {
  const Eigen::Index m = queries.rows();
  if (first_form && (first_form->targets.rows() != m || first_form->sources.rows() != keys.rows()))
    throw std::invalid_argument("softmax_average: first_form is not the form of these queries and keys");
  if (values.rows() != keys.rows()) throw std::invalid_argument("softmax_average: values must have a row per key");
  if (!queries.allFinite() || !keys.allFinite()) throw std::invalid_argument("softmax_average: queries and keys must be finite");
  out.resize(m, values.cols());
  if (log_partition) log_partition->resize(m);
  GaussAverageStats total;
  std::vector<Eigen::Index> pending(static_cast<std::size_t>(m));  // rows not yet summed, ascending
  for (Eigen::Index i = 0; i < m; ++i) pending[static_cast<std::size_t>(i)] = i;
  GaussAverageOptions deferring = options;
  deferring.defer_rejected = true;
  deferring.max_exact_fraction = 1.0;
  // The form for the queries `rows` (softmax_gauss_form's stretch and centre).
  auto form_of = [&](const GaussMatrix& rows, double stretch, const Eigen::RowVectorXd* centre) {
    return softmax_gauss_form(rows, keys, log_weights, stretch, centre, weighted_moments);
  };
  // Sums the rows `rows` (ascending) by `form` (built for exactly those rows); writes the rows its
  // certificate accepts (every row when `last`) and returns the others, ascending.
  auto sum_rows = [&](const std::vector<Eigen::Index>& rows, const SoftmaxGaussForm& form,
                      bool last) {
    GaussAverageOptions o = deferring;
    if (last) {
      o.defer_rejected = false;
      o.max_cost_per_pair = 0.0;  // the grid never pays: every row summed exactly
    }
    GaussMatrix part;
    Eigen::VectorXd part_partition;
    GaussAverageStats stats = gauss_average(form.targets, form.sources, form.log_weights, values, 0.5, o, part,
                                            log_partition ? &part_partition : nullptr);
    std::vector<char> left(rows.size(), 0);
    for (const Eigen::Index r : stats.rejected) left[static_cast<std::size_t>(r)] = 1;
    std::vector<Eigen::Index> still;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (left[r]) {
        still.push_back(rows[r]);
        continue;
      }
      const auto row = static_cast<Eigen::Index>(r);
      out.row(rows[r]) = part.row(row);
      if (log_partition) (*log_partition)[rows[r]] = part_partition[row] + form.row_offset[row];
    }
    if (total.passes == 0) {
      total.grid = stats.grid;
      total.plan = stats.plan;
      total.nodes = stats.nodes;
    }
    total.passes += stats.passes;
    total.rows_expanded += stats.rows_expanded;
    if (last) total.rows_exact = stats.rows_exact;
    // The grid's predicted work (gauss_grid_plan's cost, in multiply-adds), once per pass run.
    const double work = stats.grid ? stats.plan.cost * stats.passes : 0.0;
    return std::make_tuple(still, stats.grid, work);
  };
  // One pass over the pending rows at `stretch`; `last`: the exact sums of what is left (no grid).
  auto pass = [&](double stretch, bool last) {
    // The caller's form serves the first pass only (every row pending, stretch 1).
    const bool given =
        first_form && pending.size() == static_cast<std::size_t>(m) && stretch == 1.0 && !last;
    SoftmaxGaussForm built;
    if (!given) built = form_of(rows_of(queries, pending), stretch, nullptr);
    auto [still, grid, work] = sum_rows(pending, given ? *first_form : built, last);
    (void)work;
    pending.swap(still);
    return grid;
  };
  double stretch = 1.0;
  bool grid = pass(stretch, false);
  for (int retry = 0; retry < kSoftmaxRetries && grid && !pending.empty(); ++retry) {
    stretch *= 2.0;
    grid = pass(stretch, false);
  }
  // The cheapest grid of any extent (gauss_grid_plan's cost grows with the extent) at the first
  // pass's target (a retry's is stricter); order 0: none fits max_grid_bytes.
  const GaussGridPlan least = gauss_grid_plan(gauss_first_target(options.tol, static_cast<int>(keys.cols())),
                                              Eigen::VectorXd::Zero(keys.cols()), keys.rows(),
                                              static_cast<int>(values.cols()), options.max_grid_bytes);
  const double least_grid_cost = least.order > 0 ? least.cost : std::numeric_limits<double>::infinity();
  centred_passes(queries, keys, log_weights, pending, options.max_cost_per_pair, least_grid_cost, form_of, sum_rows);
  if (pending.empty()) return total;
  if (static_cast<double>(pending.size()) > options.max_exact_fraction * static_cast<double>(m)) {
    total.declined = true;
    total.rows_exact = static_cast<Eigen::Index>(pending.size());
    return total;
  }
  pass(1.0, true);
  return total;
}

GaussAverageStats gauss_average_retried(const GaussMatrix& targets, const GaussMatrix& sources,
                                        const Eigen::VectorXd& log_weights, const GaussMatrix& values, double s,
                                        const GaussAverageOptions& options, GaussMatrix& out,
                                        Eigen::VectorXd* log_partition) {
  if (options.defer_rejected)
    throw std::invalid_argument("gauss_average_retried: defer_rejected is not an option here");
  const Eigen::Index m = targets.rows();
  GaussAverageOptions first = options;
  first.defer_rejected = true;
  first.max_exact_fraction = 1.0;
  GaussAverageStats stats = gauss_average(targets, sources, log_weights, values, s, first, out, log_partition);
  if (stats.rejected.empty()) return stats;
  const std::vector<Eigen::Index> rejected = std::move(stats.rejected);
  stats.rejected.clear();
  const auto r = static_cast<Eigen::Index>(rejected.size());
  // The softmax problem of the rejected rows (scale folded into queries and keys), both clouds
  // moved by the sources' mean c (|y - x| is unchanged): the log-weights l_j - s |x_j - c|^2 and the
  // offsets s |y_i - c|^2 are then of the clouds' own size, not of their distance to the origin
  // (whose rounding they would carry), and the weighted moments below weigh the sources near c.
  const Eigen::RowVectorXd centre = sources.colwise().mean();
  const double root = std::sqrt(2.0 * s);
  const GaussMatrix moved_targets = rows_of(targets, rejected).rowwise() - centre;
  const GaussMatrix moved_sources = sources.rowwise() - centre;
  const GaussMatrix queries = root * moved_targets;
  const GaussMatrix keys = root * moved_sources;
  const Eigen::VectorXd key_log_weights = log_weights - s * moved_sources.rowwise().squaredNorm();
  GaussAverageOptions retry = options;
  // Of all m rows at most max_exact_fraction exact: of these r, the same count.
  retry.max_exact_fraction = std::min(1.0, options.max_exact_fraction * static_cast<double>(m) / static_cast<double>(r));
  GaussMatrix part;
  Eigen::VectorXd part_partition;
  GaussAverageStats again;
  if (!queries.allFinite() || !keys.allFinite() || !(key_log_weights.maxCoeff() > -std::numeric_limits<double>::infinity())) {
    // |x - c|^2 beyond double's range: no softmax form; the exact sums gauss_average would do.
    retry.max_cost_per_pair = 0.0;
    again = gauss_average(rows_of(targets, rejected), sources, log_weights, values, s, retry, part,
                          log_partition ? &part_partition : nullptr);
  } else {
    // The forms' moments weighted by a_j exp(-s |x_j - c|^2): for Gaussian sources N(mu, C), the
    // sources so weighted are Gaussian with covariance (C^-1 + 2s I)^-1, and whitening by it puts
    // each row's heaviest sources on its target (the softmax form's reason, above). The uniform
    // moments whiten by C, too wide once C spans several bandwidths (measured: d = 3, random Q, K,
    // V, n = 2 10^5, 12 rows left to exact sums against 2598).
    again = softmax_average(queries, keys, key_log_weights, values, retry, part,
                            log_partition ? &part_partition : nullptr, nullptr, true);
    if (log_partition) part_partition -= s * moved_targets.rowwise().squaredNorm();
  }
  stats.rows_exact = again.rows_exact;
  stats.rows_expanded = m - r + again.rows_expanded;
  if (again.declined) {
    stats.declined = true;
    return stats;
  }
  for (Eigen::Index q = 0; q < r; ++q) {
    const Eigen::Index i = rejected[static_cast<std::size_t>(q)];
    out.row(i) = part.row(q);
    if (log_partition) (*log_partition)[i] = part_partition[q];
  }
  return stats;
}

}  // namespace tokenflow
