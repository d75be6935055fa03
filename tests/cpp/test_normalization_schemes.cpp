// Normalization schemes (attention.normalize = pre, peri, ngpt, mix; include/tokenflow/
// normalization_schemes.hpp): the speed factors of the optimized field, the invariants of the
// flow, the equiangular reduction against the particles of the reference and of `simulate`, and
// the closed forms at the cluster.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "equiangular_run.hpp"
#include "test_util.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/normalization_schemes.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::simulate_equiangular;
using testing::kEps;
using testing::kEquiangularRunT;

const std::vector<Normalize> kSchemes{Normalize::sphere, Normalize::pre, Normalize::peri, Normalize::ngpt};

AttentionParams random_params(std::mt19937_64& rng, int d, const char* normalize) {
  AttentionSpec spec;
  spec.normalize = normalize;
  spec.summation = "dense";
  spec.Q = testing::random_matrix(rng, d, d, 0.7);
  spec.K = testing::random_matrix(rng, d, d, 0.7);
  return make_attention(spec, d);
}

// The speed factors on the optimized field: at any tokens x = r theta (random radii), the
// tangent part of the Pre-LN velocity is the Post-LN velocity at theta, that of Peri-LN is it
// divided by |Gamma(theta)|, |v_peri| = 1, and nGPT at theta is Post-LN divided by |Gamma(theta)|.
// The two sides run the same kernels on the same theta (the test normalizes as the field does,
// in double): they differ by the rounding of the projection and of the division, a few eps
// relative to |Gamma| <= |V| max |theta_j| (V = I here: |Gamma| <= 1), so 16 (d + 4) eps / |Gamma|.
TEST(NormalizationSchemes, SpeedFactorsOfTheField) {
  const auto seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int d = std::uniform_int_distribution<int>(2, 6)(rng);
    const Eigen::Index n = std::uniform_int_distribution<int>(2, 80)(rng);
    Measure<double> mu = testing::random_measure(rng, n, d, true, false);
    Points<double> theta(n, d);
    for (Eigen::Index i = 0; i < n; ++i) {
      mu.points.row(i) *= std::exp(std::uniform_real_distribution<double>(-2.0, 2.0)(rng)) / mu.points.row(i).norm();
      const double norm = mu.points.row(i).norm();
      for (int e = 0; e < d; ++e) theta(i, e) = mu.points(i, e) / norm;
    }
    std::mt19937_64 same = rng;
    auto velocity = [&](const char* normalize, const Points<double>& at) {
      std::mt19937_64 r = same;  // the same Q, K for every scheme
      AttentionField<double> field(random_params(r, d, normalize), mu);
      Points<double> v;
      field.velocity(0.0, at, v);
      return v;
    };
    const Points<double> gamma = velocity("none", theta), post = velocity("sphere", theta);
    const Points<double> pre = velocity("pre", mu.points), peri = velocity("peri", mu.points);
    const Points<double> ngpt = velocity("ngpt", theta);
    for (Eigen::Index i = 0; i < n; ++i) {
      const Eigen::RowVectorXd th = theta.row(i);
      auto tangent = [&](const Points<double>& v) -> Eigen::RowVectorXd { return v.row(i) - v.row(i).dot(th) * th; };
      const double g = gamma.row(i).norm(), tol = 16.0 * (d + 4) * kEps / g;
      EXPECT_LE((tangent(pre) - post.row(i)).norm(), tol * g) << "seed " << seed;
      EXPECT_LE((pre.row(i) - gamma.row(i)).norm(), tol * g) << "seed " << seed;
      EXPECT_LE((tangent(peri) - post.row(i) / g).norm(), tol) << "seed " << seed;
      EXPECT_NEAR(peri.row(i).norm(), 1.0, tol) << "seed " << seed;
      EXPECT_LE((ngpt.row(i) - post.row(i) / g).norm(), tol) << "seed " << seed;
      EXPECT_LE(ngpt.row(i).norm(), 1.0 + tol) << "seed " << seed;
    }
  }
}

// Eq. (N1)-(N3) against d rho/dt and dr/dt of the reference particles (double loops), for every
// scheme on fresh equiangular configurations and radii. Error budget as in test_equiangular.cpp's
// VelocityIsThePairRateOfTheParticles (the points within 4 n eps of rho, |dF/drho| <= 2 (beta +
// 2 n)), times the speed factor's own sensitivity (|A| >= 1/n at worst on these draws: the
// division by |A| amplifies by n), over r0 for the rates divided by r.
TEST(NormalizationSchemes, ReductionIsThePairRateOfTheParticles) {
  const auto seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    const long n = std::uniform_int_distribution<long>(2, 24)(rng);
    const double beta = std::uniform_real_distribution<double>(0.0, 6.0)(rng);
    const double rho = std::uniform_real_distribution<double>(-1.0 / static_cast<double>(n - 1) + 1e-3, 0.999)(rng);
    const double r = std::exp(std::uniform_real_distribution<double>(-1.0, 2.0)(rng));
    const EquiangularModel model{static_cast<double>(n), beta};
    const double nd = static_cast<double>(n);
    for (Normalize scheme : kSchemes) {
      const double r0 = on_sphere(scheme) ? 1.0 : r;
      const SchemePairRate got = reference_scheme_pair_rate(n, beta, scheme, rho, r0);
      const double s = scheme_speed_factor(model, scheme, rho, r0);
      const double a = equiangular_attention_norm(model, rho);
      const double want = equiangular_velocity(model, rho) / s;
      const double bound = 4.0 * (8.0 * nd * (beta + 2.0 * nd) + 16.0 * nd) * kEps * nd / (r0 * std::max(a, 1.0 / nd));
      EXPECT_NEAR(got.rho_rate, want, bound) << to_string(scheme) << " n " << n << " beta " << beta << " rho " << rho
                                             << " r " << r0 << " seed " << seed;
      const double radial = scheme == Normalize::pre    ? equiangular_radial_rate(model, rho)
                            : scheme == Normalize::peri ? equiangular_radial_rate(model, rho) / a
                                                        : 0.0;
      EXPECT_NEAR(got.radius_rate, radial, bound) << to_string(scheme) << " seed " << seed;
    }
  }
}

// A clustering problem of the tests below: n in [2, 200], beta in [0, 8], rho0 in [0.05, 0.9] and a
// target gap from 1e-8 to 1e-2.
struct ClusteringCase {
  EquiangularModel model;
  double rho0, target;
};
ClusteringCase draw_clustering_case(std::mt19937_64& rng) {
  const double n = std::uniform_int_distribution<int>(2, 200)(rng);
  const double beta = std::uniform_real_distribution<double>(0.0, 8.0)(rng);
  const double rho0 = std::uniform_real_distribution<double>(0.05, 0.9)(rng);
  const double target = std::pow(10.0, std::uniform_real_distribution<double>(-8.0, -2.0)(rng));
  return {{n, beta}, rho0, target};
}

// The orderings the speed factors imply (|A| <= 1): nGPT clusters no later than Post-LN, Peri-LN
// no later than Pre-LN; Pre-LN from r0 = 1 is slower than Post-LN (r >= 1 grows: c > 0 for
// rho > 0). Pre-LN and Peri-LN share the radius along rho (dr/drho = c r / F for both).
TEST(NormalizationSchemes, ClusteringTimesAreOrderedAndShareTheRadius) {
  const auto seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const auto [model, rho0, target] = draw_clustering_case(rng);
    const double n = model.n, beta = model.beta;
    const SchemeClustering post = scheme_clustering_time(model, Normalize::sphere, rho0, 1.0, target);
    const SchemeClustering pre = scheme_clustering_time(model, Normalize::pre, rho0, 1.0, target);
    const SchemeClustering peri = scheme_clustering_time(model, Normalize::peri, rho0, 1.0, target);
    const SchemeClustering ngpt = scheme_clustering_time(model, Normalize::ngpt, rho0, 1.0, target);
    // Post-LN against the equiangular module's own functional (two integrations at tol 1e-12 in
    // different variables: relative 1e-9 covers their sums of local errors).
    EXPECT_NEAR(post.time, equiangular_clustering_time(model, rho0, 1.0 - target), 1e-9 * post.time)
        << n << " " << beta << " " << rho0 << " " << target << " seed " << seed;
    EXPECT_LE(ngpt.time, post.time * (1.0 + 1e-9)) << seed;
    EXPECT_LE(peri.time, pre.time * (1.0 + 1e-9)) << seed;
    EXPECT_GE(pre.time, post.time * (1.0 - 1e-9)) << seed;
    EXPECT_NEAR(pre.radius, peri.radius, 1e-9 * pre.radius) << seed;
    EXPECT_GE(pre.radius, 1.0) << seed;
  }
}

// The closed forms at the cluster on the reduction: -d log(1 - rho)/dt -> 2 for sphere and ngpt,
// -d log(1 - rho)/d log r -> 2 for pre and peri. Finite differences over the gap window
// [1e-9, 1e-6]: G(u) = 2 + O(u (beta + 1)), c = 1 - O(u), |A| = 1 - O(u), so within 1e-4 there
// (n <= 50, beta <= 5), plus the dopri5 error (tol 1e-13 per step over ~1e3 steps on log u ~ 20).
TEST(NormalizationSchemes, RatesAtTheClusterMatchTheClosedForms) {
  const auto seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 5; ++trial) {
    const double n = std::uniform_int_distribution<int>(2, 50)(rng);
    const double beta = std::uniform_real_distribution<double>(0.0, 5.0)(rng);
    const double rho0 = std::uniform_real_distribution<double>(0.1, 0.8)(rng);
    const EquiangularModel model{n, beta};
    for (Normalize scheme : kSchemes) {
      const SchemeClustering a = scheme_clustering_time(model, scheme, rho0, 1.0, 1e-6, 1e-13);
      const SchemeClustering b = scheme_clustering_time(model, scheme, rho0, 1.0, 1e-9, 1e-13);
      const double dlog_gap = std::log(1e-6) - std::log(1e-9);
      if (on_sphere(scheme)) {
        EXPECT_NEAR(dlog_gap / (b.time - a.time), kSchemeExpRate, 1e-4) << to_string(scheme) << " seed " << seed;
      } else {
        EXPECT_NEAR(dlog_gap / (std::log(b.radius) - std::log(a.radius)), kSchemePowerExponent, 1e-4)
            << to_string(scheme) << " seed " << seed;
      }
    }
  }
}

// The particles through `simulate` (dopri5 at 1e-12) against the reduction for every scheme,
// from equiangular tokens of radius r0 (pre, peri) or 1: the directions stay equiangular at the
// reduction's rho, the radii equal its r; |x| = 1 at every frame for sphere and ngpt (mix: up
// to mix_until, drawn within the run), and
// |x_i(t) - x_i(0)| <= t for peri (unit speed). Error budget of test_equiangular.cpp's
// ParticlesFollowTheReduction (global error <= 4 x the sum of the local errors, plus rounding).
TEST(NormalizationSchemes, ParticlesFollowTheReduction) {
  const auto seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const long n = std::uniform_int_distribution<long>(3, 10)(rng);
  const double beta = std::uniform_real_distribution<double>(0.5, 4.0)(rng);
  const double rho0 = std::uniform_real_distribution<double>(0.0, 0.8)(rng);
  const double r = std::exp(std::uniform_real_distribution<double>(-1.0, 1.0)(rng));
  // Mix-LN leaves the sphere at a time within the run (a step boundary there).
  const double mix_until = std::uniform_real_distribution<double>(0.2, 0.8)(rng) * kEquiangularRunT;
  std::vector<Normalize> schemes = kSchemes;
  schemes.push_back(Normalize::mix);
  for (Normalize scheme : schemes) {
    const bool mix = scheme == Normalize::mix;
    const double r0 = on_sphere(scheme) || mix ? 1.0 : r;
    const SimulationResult<double> res =
        simulate_equiangular(n, beta, rho0, r0, to_string(scheme),
                             mix ? std::optional<double>(mix_until) : std::nullopt);
    ASSERT_EQ(res.status, "finished") << to_string(scheme);
    ASSERT_EQ(res.times.front(), 0.0);  // frame 0 is the start
    const EquiangularModel model{static_cast<double>(n), beta};
    const SchemePath path = mix ? solve_mix_equiangular(model, rho0, mix_until, res.times)
                                : solve_scheme_equiangular(model, scheme, rho0, r0, res.times);
    // |y| <= max(r0, 1) + 4 for the points (r grows by at most t = 4), 31 for the ODE's log u, log r.
    const double size = std::max(r0, 1.0) + kEquiangularRunT;
    const double bound = 4.0 * (static_cast<double>(res.steps) * 1e-12 * (1.0 + size) * size +
                                static_cast<double>(path.steps) * 1e-13 * 31.0 * size) +
                         8.0 * static_cast<double>(n * res.steps) * kEps * size;
    for (std::size_t f = 0; f < res.frames.size(); ++f) {
      const Points<double>& x = res.frames[f];
      Points<double> theta = x;
      theta.rowwise().normalize();
      EXPECT_LE(equiangular_deviation(theta, path.rho[f]), bound) << to_string(scheme) << " frame " << f << " seed " << seed;
      for (Eigen::Index i = 0; i < x.rows(); ++i) {
        EXPECT_NEAR(x.row(i).norm(), path.radius[f], bound) << to_string(scheme) << " seed " << seed;
        if (on_sphere(scheme) || (mix && res.times[f] <= mix_until)) {
          EXPECT_NEAR(x.row(i).norm(), 1.0, 4.0 * n * kEps)
              << to_string(scheme) << " t " << res.times[f];
        }
        if (scheme == Normalize::peri) {
          EXPECT_LE((x.row(i) - res.frames.front().row(i)).norm(), res.times[f] * (1.0 + 1e-9) + bound);
        }
      }
    }
  }
}

// Mix-LN is Post-LN before mix_until and Pre-LN from it on: the optimized field and the reference
// at any t are those of sphere and pre at the same t, bit for bit (one code path each, chosen by
// AttentionParams::scheme_at), on random Q, K and tokens of random radii.
TEST(NormalizationSchemes, MixIsPostLnThenPreLn) {
  const auto seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 10; ++trial) {
    const int d = std::uniform_int_distribution<int>(2, 5)(rng);
    const Eigen::Index n = std::uniform_int_distribution<int>(2, 40)(rng);
    Measure<double> mu = testing::random_measure(rng, n, d, true, false);
    for (Eigen::Index i = 0; i < n; ++i)
      mu.points.row(i) *= std::exp(std::uniform_real_distribution<double>(-1.0, 1.0)(rng)) /
                          mu.points.row(i).norm();
    const double mix_until = std::uniform_real_distribution<double>(0.1, 3.0)(rng);
    const std::mt19937_64 same = rng;
    auto params = [&](const char* normalize) {
      std::mt19937_64 r = same;  // the same Q, K for every scheme
      AttentionSpec spec;
      spec.normalize = normalize;
      spec.summation = "dense";
      spec.Q = testing::random_matrix(r, d, d, 0.7);
      spec.K = testing::random_matrix(r, d, d, 0.7);
      if (std::string(normalize) == "mix") spec.mix_until = mix_until;
      return make_attention(spec, d);
    };
    const AttentionParams mix = params("mix");
    EXPECT_EQ(mix.layer_ends(), std::vector<double>{mix_until});
    for (double t :
         {0.0, 0.5 * mix_until, std::nextafter(mix_until, 0.0), mix_until, 2.0 * mix_until}) {
      const AttentionParams same_scheme = params(t < mix_until ? "sphere" : "pre");
      AttentionField<double> mixed(mix, mu), plain(same_scheme, mu);
      Points<double> v_mix, v_plain;
      mixed.velocity(t, mu.points, v_mix);
      plain.velocity(t, mu.points, v_plain);
      EXPECT_EQ(v_mix, v_plain) << "t " << t << " mix_until " << mix_until << " seed " << seed;
      EXPECT_EQ(reference_velocity(mix, mu, t), reference_velocity(same_scheme, mu, t))
          << "t " << t << " seed " << seed;
    }
  }
}

// The Mix-LN reduction: Post-LN's path before mix_until, then Pre-LN's from r = 1 (the same
// integrations, so equal to rounding); its clustering time lies between Post-LN's and Pre-LN's
// (the speed factor is 1 <= r_mix(rho) <= r_pre(rho) at every rho, since dr/drho = c r / F >= 0
// for rho0 >= 0 and r_mix starts at 1 later); mix_until = 0 is Pre-LN and mix_until past
// Post-LN's time is Post-LN; and the path at the clustering time has the target gap (two
// integrations in different variables, t and s = -log(1 - rho), each at tol 1e-12 to 1e-13:
// relative 1e-8 of the gap covers their local errors, summed over ~1e3 steps).
TEST(NormalizationSchemes, MixReductionJoinsPostLnToPreLn) {
  const auto seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const auto [model, rho0, target] = draw_clustering_case(rng);
    const double n = model.n, beta = model.beta;
    const SchemeClustering post =
        scheme_clustering_time(model, Normalize::sphere, rho0, 1.0, target);
    const SchemeClustering pre = scheme_clustering_time(model, Normalize::pre, rho0, 1.0, target);
    const double mix_until = std::uniform_real_distribution<double>(0.0, 1.2)(rng) * post.time;
    const SchemeClustering mix = mix_clustering_time(model, rho0, mix_until, target);
    const std::string where = " n " + std::to_string(n) + " beta " + std::to_string(beta) +
                              " rho0 " + std::to_string(rho0) + " seed " + std::to_string(seed);
    EXPECT_GE(mix.time, post.time * (1.0 - 1e-9)) << where;
    EXPECT_LE(mix.time, pre.time * (1.0 + 1e-9)) << where;
    EXPECT_NEAR(mix_clustering_time(model, rho0, 0.0, target).time, pre.time, 1e-12 * pre.time)
        << where;
    EXPECT_EQ(mix_clustering_time(model, rho0, 1.5 * post.time, target).time, post.time) << where;
    // Before mix_until the path is Post-LN's at r = 1; at the clustering time the gap is the
    // target. (The path is integrated in t: over the metastable times of few tokens at large beta,
    // 1e28 at n = 4, beta = 8, its steps reach dopri5's floor; those draws check the times above
    // only.)
    if (mix.time > 1e4) continue;
    const std::vector<double> times{0.0, 0.5 * mix_until, mix.time};
    const SchemePath path = solve_mix_equiangular(model, rho0, mix_until, times, 1e-13);
    const SchemePath post_path =
        solve_scheme_equiangular(model, Normalize::sphere, rho0, 1.0, {0.0, 0.5 * mix_until});
    // (The same ODE at the same tolerance, but to a different end time when mix.time < mix_until,
    // so a different first step: both within dopri5's global error, 1e-13 times ~1e3 steps.)
    EXPECT_NEAR(path.gap[1], post_path.gap[1], 1e-10 * post_path.gap[1]) << where;
    EXPECT_EQ(path.radius[1], 1.0) << where;
    EXPECT_NEAR(path.gap[2], target, 1e-8 * target) << where;
    EXPECT_NEAR(path.radius[2], mix.radius, 1e-8 * mix.radius) << where;
  }
}

TEST(NormalizationSchemes, RefusesBadArguments) {
  const EquiangularModel model{8.0, 1.0};
  EXPECT_THROW(solve_scheme_equiangular(model, Normalize::none, 0.2, 1.0, {1.0}), std::invalid_argument);
  EXPECT_THROW(solve_scheme_equiangular(model, Normalize::ngpt, 0.2, 2.0, {1.0}), std::invalid_argument);
  EXPECT_THROW(solve_scheme_equiangular(model, Normalize::pre, 0.2, 0.0, {1.0}), std::invalid_argument);
  EXPECT_THROW(solve_scheme_equiangular(model, Normalize::pre, 1.0, 1.0, {1.0}), std::invalid_argument);
  EXPECT_THROW(scheme_clustering_time(model, Normalize::peri, 0.2, 1.0, 0.9), std::invalid_argument);
  EXPECT_THROW(solve_scheme_equiangular(model, Normalize::mix, 0.2, 1.0, {1.0}),
               std::invalid_argument);
  EXPECT_THROW(scheme_speed_factor(model, Normalize::mix, 0.2, 1.0), std::invalid_argument);
  EXPECT_THROW(solve_mix_equiangular(model, 0.2, -1.0, {1.0}), std::invalid_argument);
  EXPECT_THROW(mix_clustering_time(model, 0.2, NAN, 1e-3), std::invalid_argument);
  AttentionSpec spec;
  spec.normalize = "post";
  EXPECT_THROW(make_attention(spec, 3), InputError);
  spec.normalize = "mix";  // without mix_until
  EXPECT_THROW(make_attention(spec, 3), InputError);
  spec.mix_until = -0.5;
  EXPECT_THROW(make_attention(spec, 3), InputError);
  spec.normalize = "sphere";  // mix_until belongs to mix only
  spec.mix_until = 1.0;
  EXPECT_THROW(make_attention(spec, 3), InputError);
}

}  // namespace
}  // namespace tokenflow
