// Block partitions and the distributed soft-min (tokenflow/distributed.hpp). No MPI here: the
// library talks to the ranks through Communicator only.
#include <algorithm>

#include "tokenflow/distributed.hpp"

namespace tokenflow {

std::vector<Eigen::Index> block_offsets(Eigen::Index units, int size, Eigen::Index granule) {
  std::vector<Eigen::Index> offsets(static_cast<std::size_t>(size) + 1);
  for (int r = 0; r < size; ++r) {
    const Eigen::Index even = units * r / size;
    offsets[static_cast<std::size_t>(r)] = std::min(units, even / granule * granule);
  }
  offsets[static_cast<std::size_t>(size)] = units;
  return offsets;
}

namespace {
OnlineSoftMin::PointMatrix rows_of(const OnlineSoftMin::PointMatrix& x, Eigen::Index begin, Eigen::Index end) {
  return x.middleRows(begin, end - begin);
}
}  // namespace

DistributedSoftMin::DistributedSoftMin(const Communicator& comm, PointMatrix x, PointMatrix y, CostKind cost)
    : comm_(comm),
      row_offsets_(block_offsets(x.rows(), comm.size())),
      col_offsets_(block_offsets(y.rows(), comm.size())),
      own_rows_(rows_of(x, row_offsets_[static_cast<std::size_t>(comm.rank())],
                        row_offsets_[static_cast<std::size_t>(comm.rank()) + 1]),
                y, cost),
      own_cols_(x,
                rows_of(y, col_offsets_[static_cast<std::size_t>(comm.rank())],
                        col_offsets_[static_cast<std::size_t>(comm.rank()) + 1]),
                cost),
      full_(std::move(x), std::move(y), cost) {}

void DistributedSoftMin::gathered(const OnlineSoftMin& own, SoftMinPart part, const std::vector<Eigen::Index>& offsets,
                                  Eigen::Index size, double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  Eigen::VectorXd block;
  (own.*part)(eps, h, block);
  out.resize(size);
  out.segment(offsets[static_cast<std::size_t>(comm_.rank())], block.size()) = block;
  allgather_rows(&comm_, out.data(), offsets, 1);
}

void DistributedSoftMin::softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  gathered(own_rows_, &SoftMin::softmin_rows, row_offsets_, rows(), eps, h, out);
}

void DistributedSoftMin::softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  gathered(own_cols_, &SoftMin::softmin_cols, col_offsets_, cols(), eps, h, out);
}

void DistributedSoftMin::softmin_rows_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  gathered(own_rows_, &SoftMin::softmin_rows_coarse, row_offsets_, rows(), eps, h, out);
}

void DistributedSoftMin::softmin_cols_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  gathered(own_cols_, &SoftMin::softmin_cols_coarse, col_offsets_, cols(), eps, h, out);
}

void DistributedSoftMin::for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const {
  full_.for_each_row(visit);
}

}  // namespace tokenflow
