// The Gaussian closure's affine field and moment rates (the production path; the literal
// formulas are in reference.cpp), the checks on what has a closure, and the closed forms.
#include <fmt/format.h>

#include <Eigen/Dense>
#include <cmath>

#include "tokenflow/error.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/wasserstein.hpp"

namespace tokenflow {

namespace {

// A_h = scale K^T Q, C_h = W V of one head.
Eigen::MatrixXd head_A(const AttentionParams& p, const HeadBlocks& b) { return p.scale * b.K.transpose() * b.Q; }
Eigen::MatrixXd head_C(const HeadBlocks& b) { return b.W * b.V; }

// Config key of layer l's matrices: the [attention] table for the last (default) layer.
std::string layer_key(const AttentionParams& p, std::size_t l, const char* name) {
  return l + 1 == p.layers.size() ? std::string("attention.") + name : "layers[" + std::to_string(l) + "]." + name;
}

// f(X) for a symmetric X through its eigendecomposition.
template <class F>
Eigen::MatrixXd symmetric_function(const Eigen::MatrixXd& X, F f) {
  const linalg::SymmetricEigen eig = linalg::symmetric_eigen(0.5 * (X + X.transpose()));
  Eigen::VectorXd values = eig.values;
  for (auto& v : values) v = f(v);
  return eig.vectors * values.asDiagonal() * eig.vectors.transpose();
}

}  // namespace

void check_gaussian_closure(const AttentionParams& p) {
  if (const AttentionKindInfo& info = attention_kind_info(p.kind); !info.gaussian_closure)
    throw InputError("", "attention.kind",
                     std::string(info.name) + " attention has no Gaussian closure: " + info.no_closure_why +
                         " (docs/design.md section 1); use `tokenflow simulate`");
  if (p.mask == Mask::causal)
    throw InputError("", "attention.mask",
                     "masked (causal) attention has no Gaussian closure: each token sees only part of the "
                     "measure (docs/design.md section 1); use mask = \"none\" or `tokenflow simulate`");
  if (p.sink > 0.0)
    throw InputError("", "attention.sink",
                     "an attention sink (a Dirac mass at position 0) has no Gaussian closure; use sink = 0");
  if (p.normalize != Normalize::none)
    throw InputError("", "attention.normalize",
                     "the normalized dynamics (sphere, pre, peri, ngpt) have no Gaussian closure; use normalize = \"none\"");
  if (p.kind == AttentionKind::sinkhorn) {
    for (std::size_t l = 0; l < p.layers.size(); ++l)
      for (std::size_t h = 0; h < p.layers[l].heads.size(); ++h) {
        const Eigen::MatrixXd A = head_A(p, p.layers[l].heads[h]);
        const Eigen::VectorXd sv = linalg::singular_values(A);
        // Singular to working precision: the inverse in the closed form would amplify rounding
        // by more than 1e12.
        if (!(sv.minCoeff() > 1e-12 * sv.maxCoeff()))
          throw InputError("", layer_key(p, l, "Q"),
                           "the Sinkhorn Gaussian closure needs A_h = scale K_h^T Q_h invertible (docs/design.md section 1: "
                           "M_h = (A_h^T)^{-1} S^{-1} C_S), but head " + std::to_string(h) +
                               " has singular values down to " + fmt::format("{:g}", sv.minCoeff()) +
                               " (largest " + fmt::format("{:g}", sv.maxCoeff()) + "); check " +
                               layer_key(p, l, "Q") + " and " + layer_key(p, l, "K") +
                               " (k >= d and full rank are needed)");
      }
  }
}

void check_gaussian(const GaussianMoments& g, const std::string& mean_key, const std::string& cov_key) {
  const Eigen::Index d = g.mean.size();
  if (d < 1) throw InputError("", mean_key, "is empty");
  if (!g.mean.allFinite()) throw InputError("", mean_key, "has a non-finite entry");
  if (g.cov.rows() != d || g.cov.cols() != d)
    throw InputError("", cov_key, "is " + std::to_string(g.cov.rows()) + " x " + std::to_string(g.cov.cols()) +
                                      " but the mean has dimension " + std::to_string(d));
  if (!g.cov.allFinite()) throw InputError("", cov_key, "has a non-finite entry");
  // The criteria of sample_gaussian: symmetric to 1e-12 of max(1, |S|_max), eigenvalues above
  // -1e-12 d max(1, |lambda|_max) (the eigensolver's rounding is ~ d eps |S|).
  const double scale = std::max(1.0, g.cov.cwiseAbs().maxCoeff());
  if ((g.cov - g.cov.transpose()).cwiseAbs().maxCoeff() > 1e-12 * scale)
    throw InputError("", cov_key, "is not symmetric");
  const Eigen::VectorXd lambda =
      linalg::symmetric_eigenvalues(g.cov);
  if (lambda.minCoeff() < -1e-12 * std::max(1.0, lambda.cwiseAbs().maxCoeff()) * double(d))
    throw InputError("", cov_key, fmt::format("is not positive semidefinite (smallest eigenvalue {:g})",
                                              lambda.minCoeff()));
}

MomentField::MomentField(const AttentionParams& params) : params_(params) {
  check_gaussian_closure(params_);
  const double g = params_.scale;
  for (const auto& layer : params_.layers) {
    std::vector<Head> heads;
    for (const auto& b : layer.heads) {
      Head h;
      h.A = head_A(params_, b);
      if (params_.kind == AttentionKind::sinkhorn) h.A /= params_.epsilon;  // epsilon = 1 with A / epsilon
      h.C = head_C(b);
      if (params_.kind == AttentionKind::l2) {
        h.KtK2g = 2.0 * g * b.K.transpose() * b.K;
        h.KtQ2g = 2.0 * g * b.K.transpose() * b.Q;
      }
      heads.push_back(std::move(h));
    }
    layers_.push_back(std::move(heads));
  }
}

const std::vector<MomentField::Head>& MomentField::heads_at(double t) const {
  // The same layer as the particle field's: AttentionParams::layer_at, by index.
  return layers_[static_cast<std::size_t>(&params_.layer_at(t) - params_.layers.data())];
}

AffineField MomentField::affine(double t, const Eigen::VectorXd& m, const Eigen::MatrixXd& S) const {
  const Eigen::Index d = m.size();
  AffineField f{Eigen::VectorXd::Zero(d), Eigen::MatrixXd::Zero(d, d)};
  const auto& heads = heads_at(t);
  switch (params_.kind) {
    case AttentionKind::softmax:
      // E_h[y | x] = m + S A_h x
      for (const Head& h : heads) {
        f.offset.noalias() += h.C * m;
        f.slope.noalias() += h.C * (S * h.A);
      }
      break;
    case AttentionKind::l2: {
      // E_h[y | x] = R (m + 2 g S K^T Q x), R = (I + 2 g S K^T K)^{-1}: one LU solve for both.
      Eigen::MatrixXd rhs(d, d + 1);
      for (const Head& h : heads) {
        const Eigen::MatrixXd lhs = Eigen::MatrixXd::Identity(d, d) + S * h.KtK2g;
        rhs.col(0) = m;
        rhs.rightCols(d).noalias() = S * h.KtQ2g;
        const Eigen::MatrixXd X = linalg::lu_solve(lhs, rhs);
        f.offset.noalias() += h.C * X.col(0);
        f.slope.noalias() += h.C * X.rightCols(d);
      }
      break;
    }
    case AttentionKind::linear: {
      const Eigen::MatrixXd second = S + m * m.transpose();  // E[y y^T]
      for (const Head& h : heads) f.slope.noalias() += h.C * (second * h.A);
      break;
    }
    case AttentionKind::sinkhorn: {
      // M_h = (A^T)^{-1} S^{-1} C_S rewritten without inverses: with R = S^{1/2}, N = R A R and
      // g(X) = ((4 X + I)^{1/2} + I)^{-1},
      //   S^{-1} C_S = 1/2 R^{-1} ((4 N^T N + I)^{1/2} - I) R^{-1} = 2 R^{-1} N^T g(N N^T) N R^{-1}
      //             = 2 A^T R g(N N^T) R A,      so  M_h = 2 R g(N N^T) R A
      // ((4P + I)^{1/2} - I = 4 P g(P) and P g(P) = N^T g(N N^T) N for P = N^T N). Tested against
      // the literal formula in reference.cpp.
      const Eigen::MatrixXd R = psd_sqrt(S);
      for (const Head& h : heads) {
        const Eigen::MatrixXd N = R * h.A * R;
        const Eigen::MatrixXd G =
            symmetric_function(N * N.transpose(), [](double x) { return 1.0 / (std::sqrt(4.0 * std::max(x, 0.0) + 1.0) + 1.0); });
        const Eigen::MatrixXd Mh = 2.0 * R * G * R * h.A;
        f.offset.noalias() += h.C * (m - Mh * m);
        f.slope.noalias() += h.C * Mh;
      }
      break;
    }
    case AttentionKind::sigmoid:
      throw InputError("", "attention.kind", "sigmoid attention has no Gaussian closure");
  }
  return f;
}

void MomentField::rates(double t, const Eigen::VectorXd& m, const Eigen::MatrixXd& S, Eigen::VectorXd& dm,
                        Eigen::MatrixXd& dS) const {
  const AffineField f = affine(t, m, S);
  dm = f.offset + f.slope * m;
  const Eigen::MatrixXd MS = f.slope * S;
  dS = MS + MS.transpose();  // M S + S M^T, symmetric by construction (S symmetric)
}

// ---- closed forms -------------------------------------------------------------------------------

int covariance_rank(const Eigen::MatrixXd& S, double rank_tol) {
  const Eigen::VectorXd lambda =
      linalg::symmetric_eigenvalues(0.5 * (S + S.transpose()));
  const double largest = lambda.maxCoeff();
  if (!(largest > 0.0)) return 0;
  return static_cast<int>((lambda.array() > rank_tol * largest).count());
}

double bures_wasserstein(const GaussianMoments& a, const GaussianMoments& b) {
  return bures_wasserstein_psd(a.mean, a.cov, b.mean, b.cov);
}

std::optional<Eigen::MatrixXd> identity_value_softmax_matrix(const AttentionParams& p) {
  if (p.kind != AttentionKind::softmax || p.layers.size() != 1 || p.mask != Mask::none || p.sink > 0.0 ||
      p.normalize != Normalize::none)
    return std::nullopt;
  const Eigen::Index d = p.dim;
  Eigen::MatrixXd A = Eigen::MatrixXd::Zero(d, d);
  for (const auto& b : p.layers[0].heads) {
    const Eigen::MatrixXd C = head_C(b);
    if ((C - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff() > 1e-12) return std::nullopt;
    A += head_A(p, b);
  }
  return A;
}

std::optional<double> predicted_blowup_time(const AttentionParams& p, const Eigen::MatrixXd& S0) {
  const auto A = identity_value_softmax_matrix(p);
  if (!A) return std::nullopt;
  const Eigen::MatrixXd R = psd_sqrt(S0);
  const Eigen::MatrixXd B = *A + A->transpose();
  const Eigen::VectorXd lambdas =
      linalg::symmetric_eigenvalues(R * B * R);
  const double lambda = lambdas.maxCoeff();
  // Positive beyond the eigensolver's rounding (~ d eps of the largest magnitude).
  if (!(lambda > 1e-12 * lambdas.cwiseAbs().maxCoeff())) return std::nullopt;
  return 1.0 / lambda;
}

std::optional<ClusteringPrediction> predicted_clustering_limit(const AttentionParams& p, const Eigen::MatrixXd& S0,
                                                               double rank_tol) {
  const auto A = identity_value_softmax_matrix(p);
  if (!A) return std::nullopt;
  const Eigen::MatrixXd negative = -(*A + A->transpose());  // = B^T B when A + A^T <= 0
  const linalg::SymmetricEigen eig = linalg::symmetric_eigen(negative);
  const Eigen::VectorXd& mu = eig.values;
  const double size = mu.cwiseAbs().maxCoeff();
  if (mu.minCoeff() < -1e-12 * size) return std::nullopt;  // A + A^T has a positive eigenvalue
  // B = diag(sqrt(mu)) U^T over the eigenvalues above 1e-12 of the largest.
  std::vector<Eigen::Index> keep;
  for (Eigen::Index i = 0; i < mu.size(); ++i)
    if (mu[i] > 1e-12 * size) keep.push_back(i);
  Eigen::MatrixXd B(static_cast<Eigen::Index>(keep.size()), p.dim);
  for (std::size_t r = 0; r < keep.size(); ++r)
    B.row(static_cast<Eigen::Index>(r)) = std::sqrt(mu[keep[r]]) * eig.vectors.col(keep[r]).transpose();
  ClusteringPrediction pred;
  if (B.rows() == 0) {
    pred.cov = S0;
  } else {
    const Eigen::MatrixXd BSB = B * S0 * B.transpose();
    const Eigen::MatrixXd pinv = linalg::pseudo_inverse(BSB);
    pred.cov = S0 - S0 * B.transpose() * pinv * B * S0;
    pred.cov = 0.5 * (pred.cov + pred.cov.transpose());
  }
  pred.rank = covariance_rank(pred.cov, rank_tol);
  return pred;
}

Eigen::MatrixXd closed_form_covariance(const Eigen::MatrixXd& A, const Eigen::MatrixXd& S0, double t) {
  // (S0^{-1} - t B)^{-1} = R (I - t R B R)^{-1} R with R = S0^{1/2}, B = A + A^T (also for singular S0).
  const Eigen::Index d = A.rows();
  const Eigen::MatrixXd R = psd_sqrt(S0);
  const Eigen::MatrixXd inner = Eigen::MatrixXd::Identity(d, d) - t * R * (A + A.transpose()) * R;
  const Eigen::MatrixXd S = R * linalg::lu_solve(inner, R);
  return 0.5 * (S + S.transpose());
}

}  // namespace tokenflow
