// tokenflow/equiangular.hpp: the equiangular reduction of softmax attention on the sphere, and the
// long-context transition it shows (Rigollet, "The Mean-Field Dynamics of Transformers",
// arXiv:2512.01868, 2025: the equiangular reduction and the long-context phase transition;
// Chen, Lin, Polyanskiy, Rigollet, "Critical attention scaling in long-context transformers",
// arXiv:2510.05554, 2025, for the critical scaling gamma_c = 1 / (1 - rho)).
//
// The particle flow is that of attention.normalize = "sphere" with Q = K = V = W = I and
// attention.scale = beta, uniform weights (docs/design.md section 1):
//   dx_i/dt = P_{x_i}( sum_j w_ij x_j ),  w_ij = exp(beta <x_i, x_j>) / sum_k exp(beta <x_i, x_k>),
// P_x v = v - <v, x> x. If all pairwise inner products equal rho at t = 0, they stay equal (the
// flow commutes with the permutations of the tokens, and an orthogonal map permutes equiangular
// tokens), and rho(t) solves the scalar ODE (derivation in docs/equiangular.md):
//   Eq. (E1)  rho' = F(rho) = 2 e^{beta rho} (1 - rho) (1 + (n - 1) rho) / (e^beta + (n - 1) e^{beta rho}).
// Its fixed points are rho = 1 (one cluster, attracting) and rho = -1/(n - 1) (the regular simplex).
// With u = 1 - rho (the gap), written without overflow for any beta:
//   Eq. (E2)  -(d/dt) log u = G(u) = 2 e^{-beta u} (n - (n - 1) u) / (1 + (n - 1) e^{-beta u}),
// and G(0) = 2: near the cluster 1 - rho(t) ~ C e^{-2 t} for every n and beta (the rate).
// Long context: beta = gamma log n. Starting from rho0, the time to reach a fixed gap grows like
// n^{gamma (1 - rho0) - 1} (up to a factor log n) when gamma (1 - rho0) > 1 and like log n at most
// below: the critical gamma is 1 / (1 - rho0).
//
// Everything here is float64; n is a real number >= 2 so that the reduction runs at n = 10^12.
// The library never prints; errors on bad arguments are std::invalid_argument.
#pragma once

#include <vector>

#include "tokenflow/measure.hpp"

namespace tokenflow {

struct EquiangularModel {
  double n = 2.0;     // number of tokens (>= 2, finite; need not be an integer for the ODE)
  double beta = 1.0;  // inverse temperature (attention.scale), finite, >= 0
};
// Throws std::invalid_argument unless n >= 2 and beta >= 0, both finite.
void check_equiangular_model(const EquiangularModel& model);

// Eq. (E1): d rho / dt at rho in [-1/(n - 1), 1].
double equiangular_velocity(const EquiangularModel& model, double rho);
// Eq. (E2): -(d/dt) log(1 - rho) as a function of the gap u = 1 - rho in [0, n / (n - 1)].
double equiangular_log_gap_rate(const EquiangularModel& model, double u);
// The decay rate of 1 - rho(t) at the cluster: G(0) = 2 for every n and beta.
constexpr double kEquiangularRate = 2.0;

// rho(t) at the given times (ascending, >= 0) from rho(0) = rho0 in [-1/(n - 1), 1), integrated by
// the library's Dormand-Prince 5(4) stepper on v = log(1 - rho) (dv/dt = -G(1 - rho)), relative
// tolerance `tol` (error per step <= tol (1 + |v|), Hairer's norm); the gap u = 1 - rho is returned
// beside rho because it keeps its relative accuracy as rho -> 1.
struct EquiangularPath {
  std::vector<double> times, rho, gap;  // one entry per requested time
  long steps = 0;                       // accepted dopri5 steps
};
EquiangularPath solve_equiangular(const EquiangularModel& model, double rho0, const std::vector<double>& times,
                                  double tol = 1e-13);

// The clustering-time functional: the time at which rho(t), started at rho0, reaches rho_target
// (rho0 <= rho_target < 1; 0 when they are equal; +inf from the simplex rho0 = -1/(n - 1)). As
// the ODE is autonomous and rho increases, t(rho_target) = int_{rho0}^{rho_target} d rho / F(rho),
// integrated by the same stepper in sigma = log(1 + (n - 1) rho) up to rho = 1/2 (the stretch
// rho < 1/n from orthogonal tokens is of order one there) and in s = -log(1 - rho) above (the gap
// keeps its digits), each time carried in units of its initial rate, so that times from 1e-3 to
// 1e60 keep their relative accuracy (about tol per step) up to n = 1e30 and beyond.
double equiangular_clustering_time(const EquiangularModel& model, double rho0, double rho_target,
                                   double tol = 1e-12);

// ---- long context: beta = gamma log n ------------------------------------------------------------
EquiangularModel long_context_model(double n, double gamma);
// The exponent of the clustering time in n: max(0, gamma (1 - rho0) - 1).
double long_context_exponent_theory(double gamma, double rho0);
// gamma_c = 1 / (1 - rho0), rho0 < 1.
double long_context_critical_gamma(double rho0);

// ---- the particles ----------------------------------------------------------------------------------
// n unit vectors in R^n with pairwise inner products rho0 in [-1/(n - 1), 1): x_i = a e_i + b 1,
// a = sqrt(1 - rho0), b = rho0 / (a + sqrt(a^2 + n rho0)) (the root of n b^2 + 2 a b = rho0 that
// keeps its digits). Rows are exactly equiangular up to rounding (a few units in the last place).
Points<double> equiangular_points(long n, double rho0);
// max over pairs i < j of |<x_i, x_j> - rho| (the distance of x from the equiangular set at rho).
double equiangular_deviation(const Points<double>& x, double rho);
// The mean over pairs i < j of the gap 1 - cos(x_i, x_j), computed as
// (|x_i - x_j|^2 - (|x_i| - |x_j|)^2) / (2 |x_i| |x_j|), which keeps its relative accuracy when the
// gap is tiny (1 - <x_i, x_j> itself cancels to a few ulps of 1).
double mean_pair_gap(const Points<double>& x);

// ---- reference (src/equiangular/reference.cpp) ---------------------------------------------------
// Eq. (E1) as written, with e^beta and e^{beta rho} formed (beta <= 700).
double reference_equiangular_velocity(double n, double beta, double rho);
// d<x_1, x_2>/dt of the particle flow itself at equiangular_points(n, rho), with plain double
// loops (weights, the tangent projection, both terms <P v_1, x_2> + <x_1, P v_2>): shares no code
// with Eq. (E1), so that a test of one against the other checks the derivation.
double reference_equiangular_pair_rate(long n, double beta, double rho);

}  // namespace tokenflow
