// tokenflow/ot.hpp: entropic and exact optimal transport, DESIGN.md section 1 "Optimal transport".
//
// Sinkhorn solves  min_{pi in Pi(a, b)} <C, pi> + epsilon KL(pi | a b^T)  in the log domain:
//   pi_ij = a_i b_j exp((f_i + g_j - C_ij) / epsilon),
//   f_i = -epsilon log sum_j b_j exp((g_j - C_ij) / epsilon)      (soft-min over j)
//   g_j = -epsilon log sum_i a_i exp((f_i - C_ij) / epsilon)      (soft-min over i)
// The loop is written once against a SoftMin operator (GeomLoss style, Feydy et al. 2019,
// Eq. (23)); the operator decides how C is held: dense (an n x m matrix) or online (recomputed
// from the points in tiles, memory O(n + m)). The marginal error is |pi 1 - a|_1 + |pi^T 1 - b|_1.
#pragma once

#include <Eigen/Core>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tokenflow {

enum class CostKind { sqeuclidean, euclidean, dot };
const char* to_string(CostKind cost);
CostKind cost_kind_from_string(const std::string& s);  // throws InputError(key "cost")

// c(x, y) for one pair of points of dimension p.
double pair_cost(CostKind cost, const double* x, const double* y, Eigen::Index p);

// The soft-min operator of one cost matrix C (n x m):
//   rows: out_i = -eps log sum_j exp(h_j - C_ij / eps)   (h of size m)
//   cols: out_j = -eps log sum_i exp(h_i - C_ij / eps)   (h of size n)
class SoftMin {
 public:
  virtual ~SoftMin() = default;
  virtual Eigen::Index rows() const = 0;
  virtual Eigen::Index cols() const = 0;
  virtual void softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const = 0;
  virtual void softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const = 0;
  // Calls visit(i, j, C_ij) for every pair, row by row (row i's pairs in increasing j); used to
  // form the plan and the transport cost. Rows may be visited concurrently from several threads
  // (each row by one thread), so visit must only write to per-row state.
  virtual void for_each_row(const std::function<void(Eigen::Index i, const double* c_row)>& visit) const = 0;
};

// C held in memory (n x m, row-major), the fastest when it fits.
class DenseSoftMin final : public SoftMin {
 public:
  explicit DenseSoftMin(Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> cost);
  Eigen::Index rows() const override { return cost_.rows(); }
  Eigen::Index cols() const override { return cost_.cols(); }
  void softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const override;
  const auto& cost() const { return cost_; }

 private:
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> cost_;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> cost_t_;  // C^T for cols
};

// C_ij = c(x_i, y_j) recomputed on the fly in tiles: memory O((n + m) p).
class OnlineSoftMin final : public SoftMin {
 public:
  using PointMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  OnlineSoftMin(PointMatrix x, PointMatrix y, CostKind cost);
  Eigen::Index rows() const override { return x_.rows(); }
  Eigen::Index cols() const override { return y_.rows(); }
  void softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const override;

 private:
  PointMatrix x_, y_;
  CostKind cost_;
};

struct SinkhornOptions {
  double epsilon = 0.1;
  double tol = 1e-9;      // stop when the l1 marginal error is below tol
  int max_iter = 10000;
  bool want_plan = false;  // the dense plan (n x m) in the result
  // Warm start (both empty or sizes n and m).
  Eigen::VectorXd f_init, g_init;
  // Epsilon-scaling: start at epsilon_start (if > epsilon) and divide by epsilon_decay per
  // stage down to epsilon (each intermediate stage runs until its error is below
  // sqrt(tol) or for max_iter iterations).
  double epsilon_start = 0.0;
  double epsilon_decay = 2.0;
  // Called every `progress_every` iterations with (iteration, marginal error); false cancels.
  std::function<bool(int, double)> progress;
  int progress_every = 10;
};

struct SinkhornResult {
  Eigen::VectorXd f, g;   // dual potentials
  double cost = 0.0;      // <C, pi>
  double objective = 0.0; // <C, pi> + epsilon KL(pi | a b^T)
  int iterations = 0;
  double marginal_error = 0.0;
  bool converged = false;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> plan;  // when asked
};

// The log-domain Sinkhorn loop. a (n) and b (m) positive, each summing to 1.
SinkhornResult sinkhorn(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                        const SinkhornOptions& options);

// ---- exact OT (src/ot/exact.cpp): LEMON's network simplex ------------------------------------
struct ExactOTResult {
  double cost = 0.0;  // <C, pi>, minimal
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> plan;  // n x m
  Eigen::VectorXd f, g;  // dual potentials: f_i + g_j <= C_ij, equality on the plan's support
};
// a (n), b (m) positive, each summing to 1. The masses are carried as integers (multiples of
// 2^-52) so the network simplex runs exactly on them; costs stay in double.
ExactOTResult exact_ot(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost,
                       const Eigen::VectorXd& a, const Eigen::VectorXd& b);

// ---- reference (src/ot/reference.cpp) -----------------------------------------------------------
// Plain double loops over a dense cost matrix, log-sum-exp written out; the oracle for tests.
SinkhornResult reference_sinkhorn(const Eigen::MatrixXd& cost, const Eigen::VectorXd& a,
                                  const Eigen::VectorXd& b, double epsilon, double tol,
                                  int max_iter);

}  // namespace tokenflow
