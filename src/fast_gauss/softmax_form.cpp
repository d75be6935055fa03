// Softmax averages through a Gauss form chosen for the keys' cloud (tokenflow/fast_gauss.hpp has
// the choice and why), with retries on a stretched form for the rows its certificate rejects.

#include <stdexcept>

#include "tokenflow/fast_gauss.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {

SoftmaxGaussForm softmax_gauss_form(const GaussMatrix& queries, const GaussMatrix& keys,
                                    const Eigen::VectorXd& log_weights, double stretch) {
  const Eigen::Index n = keys.rows(), k = keys.cols();
  if (n < 1 || queries.cols() != k || log_weights.size() != n)
    throw std::invalid_argument("softmax_gauss_form: queries m x k, keys n x k (n >= 1), log_weights n");
  if (!(stretch > 0.0) || !std::isfinite(stretch)) throw std::invalid_argument("softmax_gauss_form: stretch must be positive");
  const Eigen::RowVectorXd mean = keys.colwise().mean();
  const Eigen::MatrixXd centred = keys.rowwise() - mean;
  const Eigen::MatrixXd covariance = centred.transpose() * centred / static_cast<double>(n);
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
  form.log_weights = log_weights + 0.5 * form.sources.rowwise().squaredNorm();
  form.row_offset = 0.5 * form.targets.rowwise().squaredNorm() + queries * mean.transpose();
  return form;
}

namespace {

GaussMatrix rows_of(const GaussMatrix& a, const std::vector<Eigen::Index>& rows) {
  GaussMatrix out(static_cast<Eigen::Index>(rows.size()), a.cols());
  for (std::size_t r = 0; r < rows.size(); ++r) out.row(static_cast<Eigen::Index>(r)) = a.row(rows[r]);
  return out;
}

}  // namespace

GaussAverageStats softmax_average(const GaussMatrix& queries, const GaussMatrix& keys,
                                  const Eigen::VectorXd& log_weights, const GaussMatrix& values,
                                  const GaussAverageOptions& options, GaussMatrix& out,
                                  Eigen::VectorXd* log_partition, const SoftmaxGaussForm* first_form) {
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
  // One pass over the pending rows; `last`: the exact sums of what is left (no grid).
  auto pass = [&](double stretch, bool last) {
    // The caller's form serves the first pass only (every row pending, stretch 1).
    const bool given = first_form && pending.size() == static_cast<std::size_t>(m) && stretch == 1.0 && !last;
    SoftmaxGaussForm built;
    if (!given) built = softmax_gauss_form(rows_of(queries, pending), keys, log_weights, stretch);
    const SoftmaxGaussForm& form = given ? *first_form : built;
    GaussAverageOptions o = deferring;
    if (last) {
      o.defer_rejected = false;
      o.max_cost_per_pair = 0.0;  // the grid never pays: every row summed exactly
    }
    GaussMatrix part;
    Eigen::VectorXd part_partition;
    GaussAverageStats stats = gauss_average(form.targets, form.sources, form.log_weights, values, 0.5, o, part,
                                            log_partition ? &part_partition : nullptr);
    std::vector<char> left(pending.size(), 0);
    for (const Eigen::Index r : stats.rejected) left[static_cast<std::size_t>(r)] = 1;
    std::vector<Eigen::Index> still;
    for (std::size_t r = 0; r < pending.size(); ++r) {
      if (left[r]) {
        still.push_back(pending[r]);
        continue;
      }
      const auto row = static_cast<Eigen::Index>(r);
      out.row(pending[r]) = part.row(row);
      if (log_partition) (*log_partition)[pending[r]] = part_partition[row] + form.row_offset[row];
    }
    if (total.passes == 0) {
      total.grid = stats.grid;
      total.plan = stats.plan;
      total.nodes = stats.nodes;
    }
    total.passes += stats.passes;
    total.rows_expanded += stats.rows_expanded;
    if (last) total.rows_exact = stats.rows_exact;
    pending.swap(still);
    return stats.grid;
  };
  double stretch = 1.0;
  bool grid = pass(stretch, false);
  for (int retry = 0; retry < kSoftmaxRetries && grid && !pending.empty(); ++retry) {
    stretch *= 2.0;
    grid = pass(stretch, false);
  }
  if (pending.empty()) return total;
  if (static_cast<double>(pending.size()) > options.max_exact_fraction * static_cast<double>(m)) {
    total.declined = true;
    total.rows_exact = static_cast<Eigen::Index>(pending.size());
    return total;
  }
  pass(1.0, true);
  return total;
}

}  // namespace tokenflow
