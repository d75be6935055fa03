// tokenflow/normalization_schemes.hpp: normalization as speed regulation (Karagodin, Ge,
// Polyanskiy, Rigollet, "Normalization in Attention Dynamics", NeurIPS 2025, arXiv:2510.22026),
// on the equiangular reduction of include/tokenflow/equiangular.hpp.
//
// The schemes are the values of attention.normalize (attention.hpp, docs/design.md section 1).
// Write each token x_i = r_i theta_i (r_i = |x_i|, theta_i on the sphere) and let
// A_i = sum_j w_ij V theta_j be attention at the directions. Every scheme moves the direction by
// the Post-LN velocity divided by a speed factor s_i, and some move the radius:
//   dtheta_i/dt = P_{theta_i}(A_i) / s_i,
//   sphere (Post-LN): s_i = 1,              r_i = 1;
//   pre    (Pre-LN):  s_i = r_i,            dr_i/dt = <theta_i, A_i>;
//   peri   (Peri-LN): s_i = r_i |A_i|,      dr_i/dt = <theta_i, A_i> / |A_i|  (|dx_i/dt| = 1);
//   ngpt   (nGPT):    s_i = |A_i|,          r_i = 1;
//   mix    (Mix-LN):  sphere's before mix_until, then pre's from r_i = 1 (solve_mix_equiangular).
// Under softmax with Q = K = V = I, scale beta and equal radii, equiangular directions stay
// equiangular (the argument of equiangular.hpp holds for every scheme: all of them commute with
// permutations and orthogonal maps), and with q = e^{-beta (1 - rho)}, Z = 1 + (n - 1) q:
//   Eq. (N1)  rho' = F(rho) / s(rho, r)             (F: Eq. (E1) of equiangular.hpp)
//   Eq. (N2)  c(rho)   = <theta_i, A_i> = (1 + (n - 1) rho q) / Z
//   Eq. (N3)  |A(rho)| = sqrt(1 + 2 (n - 1) rho q + (n - 1) q^2 (1 + (n - 2) rho)) / Z
//   r' = c (pre), c / |A| (peri); for both dr/drho = c r / F: the same radius along rho.
// Closed forms at the cluster (u = 1 - rho -> 0, G(0) = 2, c -> 1, |A| -> 1):
//   sphere, ngpt: 1 - rho ~ C e^{-2 t}                         (kSchemeExpRate = 2);
//   pre, peri:    d log(1 - rho) / d log r = -G(u) / c(rho) -> -2, r ~ t: 1 - rho ~ C t^{-2}
//                 (kSchemePowerExponent = 2).
// Since |A| <= 1 (a convex combination of unit vectors), nGPT is never slower than Post-LN and
// Peri-LN never slower than Pre-LN at the same state; Pre-LN and Peri-LN slow down as r grows.
//
// Everything is float64; errors on bad arguments are std::invalid_argument; nothing prints.
#pragma once

#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/equiangular.hpp"

namespace tokenflow {

constexpr double kSchemeExpRate = 2.0;        // sphere, ngpt: -d log(1 - rho)/dt -> 2
constexpr double kSchemePowerExponent = 2.0;  // pre, peri: -d log(1 - rho)/d log r -> 2

// The scheme's name as attention.normalize spells it ("sphere", "pre", "peri", "ngpt", "mix",
// "none").
const char* to_string(Normalize scheme);
// Eq. (N2) and Eq. (N3) at rho in [-1/(n - 1), 1].
double equiangular_radial_rate(const EquiangularModel& model, double rho);
double equiangular_attention_norm(const EquiangularModel& model, double rho);
// s(rho, r) of the table above; std::invalid_argument for Normalize::none (no reduction there)
// and Normalize::mix (its factor depends on t: sphere's, then pre's).
double scheme_speed_factor(const EquiangularModel& model, Normalize scheme, double rho, double radius);

// rho(t) and r(t) under a scheme from rho0 in (-1/(n - 1), 1) and radius r0 > 0 (r stays r0 = 1
// for sphere and ngpt, which need r0 = 1), at the given times (ascending, >= 0): dopri5 on
// v = log(1 - rho), w = log r, relative tolerance `tol`.
struct SchemePath {
  std::vector<double> times, rho, gap, radius;
  long steps = 0;
};
SchemePath solve_scheme_equiangular(const EquiangularModel& model, Normalize scheme, double rho0, double r0,
                                    const std::vector<double>& times, double tol = 1e-13);

// The time at which 1 - rho falls to target_gap (0 < target_gap <= 1 - rho0), and the radius
// then: t = int s(rho, r) / F(rho) drho, integrated by dopri5 in s = -log(1 - rho) (with
// dw/ds = c / G for pre and peri). The curve in the figure of `reproduce normalization-schemes`.
struct SchemeClustering {
  double time = 0.0, radius = 1.0;
};
SchemeClustering scheme_clustering_time(const EquiangularModel& model, Normalize scheme, double rho0, double r0,
                                        double target_gap, double tol = 1e-12);

// Mix-LN (normalize = mix): Post-LN on [0, mix_until) from rho0 (r = 1), then Pre-LN from the state
// at mix_until with r = 1; path and clustering time as above (mix_until finite, >= 0; the other
// functions refuse Normalize::mix with std::invalid_argument).
SchemePath solve_mix_equiangular(const EquiangularModel& model, double rho0, double mix_until,
                                 const std::vector<double>& times, double tol = 1e-13);
SchemeClustering mix_clustering_time(const EquiangularModel& model, double rho0, double mix_until,
                                     double target_gap, double tol = 1e-12);

// ---- reference (src/equiangular/reference.cpp) ---------------------------------------------------
// d rho/dt and d r/dt of the particle flow itself, at r0 * equiangular_points(n, rho): the
// velocity of reference_velocity (attention/reference.cpp, double loops) with Q = K = V = W = I,
// scale beta, the scheme's normalize; then dtheta_i = P_{theta_i}(v_i) / r_i for tokens 0 and 1,
// d rho = <dtheta_0, theta_1> + <theta_0, dtheta_1>, dr_0 = <theta_0, v_0>. Shares no code with
// Eq. (N1)-(N3), so that a test of one against the other checks the derivation.
struct SchemePairRate {
  double rho_rate = 0.0, radius_rate = 0.0;
};
SchemePairRate reference_scheme_pair_rate(long n, double beta, Normalize scheme, double rho, double r0);

}  // namespace tokenflow
