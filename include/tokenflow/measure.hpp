// tokenflow/measure.hpp: weighted empirical measures mu = sum_i a_i delta_{x_i}.
//
// Points are an n x d row-major matrix (row i = x_i) in the working precision T (float or double);
// weights a (n, positive, normalized to sum 1) and optional positions pos (n, in [0, 1], used by
// causal masks) are kept in the same precision. See docs/design.md section 1, "Measure".
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>

namespace tokenflow {

template <class T>
using Points = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
struct Measure {
  Points<T> points;  // n x d
  Vec<T> weights;    // n, > 0, sum 1
  Vec<T> positions;  // empty, or n values in [0, 1]; held in T like the points, so in float32
                     // two positions closer than ~6e-8 are one position (a tie under the
                     // causal mask); the defaults i / n stay distinct for n < 2^24

  Eigen::Index n() const { return points.rows(); }
  Eigen::Index d() const { return points.cols(); }
  bool has_positions() const { return positions.size() > 0; }
};

// Builds a measure and checks it: finite points, n >= 1, weights (if given, size n) finite and
// positive (they are normalized to sum 1; uniform when empty), positions (if given) finite, in
// [0, 1]. Throws InputError with key "points" / "weights" / "positions".
template <class T>
Measure<T> make_measure(Points<T> points, Vec<T> weights = {}, Vec<T> positions = {});

// w / sum(w) without overflow: when the sum overflows, the entries are divided by the largest one
// first (their sum is then at most n), so weights up to the largest double (1e308 each, any number
// of them) normalize as small ones do. The entries must be finite and >= 0 with one of them > 0
// (the callers check, in their own words); an all-zero w is returned as it is.
Eigen::VectorXd normalized_weights(const Eigen::VectorXd& w);

// Default positions pos_i = i / n (input order), docs/design.md section 1.
template <class T>
Vec<T> default_positions(Eigen::Index n);

// Samples: n points of N(mean, cov). cov must be symmetric positive semidefinite: asymmetric or
// indefinite covariances throw InputError(key = cov_key). Deterministic for a given seed.
Points<double> sample_gaussian(Eigen::Index n, const Eigen::VectorXd& mean,
                               const Eigen::MatrixXd& cov, std::uint64_t seed,
                               const std::string& cov_key = "init.cov");
// n points uniform on the unit sphere S^{d-1} of R^d.
Points<double> sample_sphere(Eigen::Index n, Eigen::Index d, std::uint64_t seed);

// Moments of a weighted measure (always accumulated in double).
template <class T>
Eigen::VectorXd weighted_mean(const Measure<T>& mu);
template <class T>
Eigen::MatrixXd weighted_covariance(const Measure<T>& mu);

// A small, portable random generator (splitmix64 + Box-Muller) so that samples for a given seed
// are the same with every standard library.
class Random {
 public:
  // The seed is mixed first: splitmix64 states s and s + k * gamma give the same stream shifted by
  // k draws, so consecutive seeds must not map to nearby states.
  explicit Random(std::uint64_t seed) : state_(mix(seed + 0x632BE59BD9B4E019ull)) {}
  std::uint64_t next_u64();
  double uniform();  // in (0, 1)
  double normal();   // standard normal
  std::uint64_t state() const { return state_; }
  static std::uint64_t mix(std::uint64_t z) {  // the splitmix64 finalizer
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  void set_state(std::uint64_t s) { state_ = s; has_spare_ = false; }

 private:
  std::uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace tokenflow
