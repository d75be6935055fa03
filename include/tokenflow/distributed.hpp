// tokenflow/distributed.hpp: a group of processes (MPI ranks) running one job together.
//
// The library knows only this interface: no MPI type or header appears in it, so Python and
// non-MPI users are unaffected. The MPI implementation lives in src/distributed/ and is built into
// the CLI and the tests when CMake finds MPI (TOKENFLOW_MPI); without MPI there is no such
// implementation and every driver runs on one process.
//
// Drivers (AttentionField::velocity, the soft-min of Sinkhorn attention, train) split work by
// contiguous blocks of *outputs* (query tokens, soft-min entries, gradient groups). Every output is
// computed by the same code, in the same summation order, as on one process, and the blocks are
// all-gathered so that every rank holds the full result; reductions over outputs (max |x|,
// dopri5's error norm, diagnostics, the gradient sum) then run on the full arrays in the
// single-process order on every rank. Hence the guarantee (see docs/mpi.md): a run on P ranks
// gives the single-process result bit for bit for the same OpenMP thread count per rank, with two
// exceptions that agree within a derived bound (attention.hpp, AttentionField::set_communicator):
// the symmetric attention kernel, and the fast summation, which summation = "auto" (the default)
// takes from n = 4096 tokens on, within twice summation_tol.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <memory>
#include <vector>

#include "tokenflow/ot.hpp"

namespace tokenflow {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: `data` holds the whole array on every rank; rank r's block is the bytes
  // [byte_offsets[r], byte_offsets[r + 1]) (size() + 1 nondecreasing offsets, the same on every
  // rank), filled by rank r; afterwards every rank holds every block.
  virtual void allgather_in_place(void* data, const std::vector<std::size_t>& byte_offsets) const = 0;
  // `bytes` bytes of `data` from rank `root` to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) const = 0;
  // The largest value over the ranks (to agree on an error).
  virtual int max_over_ranks(int value) const = 0;
  virtual void barrier() const = 0;
};

// Contiguous blocks: unit counts [offsets[r], offsets[r+1]) for rank r, offsets[r] = units r / size
// rounded down to a multiple of `granule` (the last one ends at `units`).
std::vector<Eigen::Index> block_offsets(Eigen::Index units, int size, Eigen::Index granule = 1);

// All-gathers blocks of rows: data is `units` rows of `row_len` T's, rank r filled its rows
// [offsets[r], offsets[r+1]). Does nothing when comm is null or has one rank.
template <class T>
void allgather_rows(const Communicator* comm, T* data, const std::vector<Eigen::Index>& offsets,
                    Eigen::Index row_len) {
  if (comm == nullptr || comm->size() == 1) return;
  std::vector<std::size_t> bytes(offsets.size());
  for (std::size_t r = 0; r < offsets.size(); ++r)
    bytes[r] = static_cast<std::size_t>(offsets[r] * row_len) * sizeof(T);
  comm->allgather_in_place(data, bytes);
}

// The online soft-min of OnlineSoftMin (C_ij = c(x_i, y_j)) split over the ranks of `comm`, which
// all hold the same x (n x p) and y (m x p): each rank computes the outputs of its block of rows
// (softmin_rows) and of its block of columns (softmin_cols) with OnlineSoftMin's code, and the
// blocks are all-gathered. An output's log-sum-exp runs over all of C's row or column in the same
// tiles and order as on one process, so every output, and so the whole Sinkhorn loop, is bit for bit
// the single-process one. (Splitting the sum of a column over row blocks instead, with an
// all-reduce of (max, sum of exp) pairs, would be deterministic but round differently.) Per
// iteration each rank computes n m / P pairs twice and receives (n + m) doubles.
// for_each_row and cost_range (once per solve, not per iteration) run on every rank in full.
class DistributedSoftMin final : public SoftMin {
 public:
  using PointMatrix = OnlineSoftMin::PointMatrix;
  DistributedSoftMin(const Communicator& comm, PointMatrix x, PointMatrix y, CostKind cost);
  Eigen::Index rows() const override { return full_.rows(); }
  Eigen::Index cols() const override { return full_.cols(); }
  void softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  // The online operator's float32 soft-mins, block by block as above (the same bits as one process).
  double coarse_error(double logit_size) const override { return full_.coarse_error(logit_size); }
  void softmin_rows_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void softmin_cols_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const override;
  const double* cost_row(Eigen::Index i, double* buffer) const override { return full_.cost_row(i, buffer); }
  double cost_range() const override { return full_.cost_range(); }
  double cost_magnitude() const override { return full_.cost_magnitude(); }

 private:
  // The soft-min `part`, each rank computing its own block of out with `own` (its rows or its
  // columns, at offsets[rank]), gathered into out (size entries).
  void gathered(const OnlineSoftMin& own, SoftMinPart part, const std::vector<Eigen::Index>& offsets,
                Eigen::Index size, double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const;
  const Communicator& comm_;
  std::vector<Eigen::Index> row_offsets_, col_offsets_;
  OnlineSoftMin own_rows_, own_cols_, full_;  // x[own rows] vs y; x vs y[own cols]; x vs y
};

}  // namespace tokenflow
