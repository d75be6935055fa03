// tokenflow/energy.hpp: the interaction energy of softmax attention as a Lyapunov function.
//
// E(mu) = 1/2 sum_ij a_i a_j exp(s(x_i, x_j)), s(x, y) = scale <Q x, K y> = y^T A x with
// A = scale K^T Q. For one head with A symmetric and C = W V = c A (c > 0):
//   grad_{x_i} E = a_i Z_i A ybar_i,   Z_i = sum_j a_j exp(s_ij),  ybar_i = sum_j w_ij x_j,
// while dx_i/dt = C ybar_i = c A ybar_i, so dE/dt = c sum_i a_i Z_i |A ybar_i|^2 >= 0: the flow is
// a gradient ascent of E (in the metric weighted by 1 / (a_i Z_i)) and E never decreases. On the
// sphere (normalize = "sphere") the same holds with both sides projected on the tangent space, e.g.
// Q = K = V = I (A = scale I, C = I). Several heads, layers, masks or sinks break the identity.
//
// The energy-dissipation identity (docs/gradient-flow.md). For any A, with
//   grad_{x_i} E = 1/2 a_i (Z_i A^T ybar_i + Z'_i A ybar'_i),   Z'_i = sum_k a_k exp(s_ki),
//   ybar'_i = sum_k a_k exp(s_ki) x_k / Z'_i   (x_i as a key; = Z_i A ybar_i for A symmetric)
// the chain rule gives, along dx_i/dt = Gamma_i = C ybar_i,
//   dE/dt = sum_i <grad_{x_i} E, Gamma_i>,                                            Eq. (1)
// and the metric slope of E in the weighted metric g_i = a_i Z_i / c (c = |C|_F / |A|_F) is
//   |dE|^2 = sum_i |grad_{x_i} E|^2 / g_i = c sum_i a_i Z_i |A ybar_i|^2 (A symmetric). Eq. (2)
// For A symmetric and C = c A (c > 0), Gamma_i = grad_{x_i} E / g_i: the flow is the gradient
// flow of E in that metric and dE/dt = |dE|^2 (the energy-dissipation identity); otherwise
// dE/dt = <grad E, Gamma>_g differs from |dE|^2 (e.g. C = R A with R a rotation by 90 degrees in
// d = 2: dE/dt = 0 while |dE|^2 > 0).
#pragma once

#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/dynamics.hpp"

namespace tokenflow {

// Softmax, one layer, one head, no mask, no sink, A symmetric and W V = c A with c > 0 (both to
// 1e-9 relative): the cases where E must not decrease along the flow.
bool has_energy_gradient_structure(const AttentionParams& params);

struct EnergyMonotonicity {
  bool monotone = true;                   // no decrease between consecutive frames beyond `allowance`
  double largest_relative_decrease = 0.0; // max_k (E_k - E_{k+1}) / E_k over frames (<= 0: none)
  double allowance = 0.0;                 // relative rounding allowance (see energy.cpp)
};

// Monotonicity (non-decrease) of the energies recorded in `frames` (simulate's diagnostics).
// `single_precision`: the positions were float32.
EnergyMonotonicity energy_monotonicity(const std::vector<FrameDiagnostics>& frames, const AttentionParams& params,
                                       Eigen::Index n, bool single_precision);

// E, dE/dt along the flow (Eq. 1) and the squared metric slope (Eq. 2) at one measure.
struct EnergyRates {
  double energy = 0.0;         // E(mu) = 1/2 sum_ij a_i a_j exp(s_ij)
  double rate = 0.0;           // dE/dt along Gamma, Eq. (1)
  double slope_squared = 0.0;  // |dE|^2, Eq. (2)
};

// Softmax, the layer active at time t with one head, no mask, no sink, no sphere (InputError
// naming attention.kind, attention.heads, attention.mask, attention.sink or attention.normalize
// otherwise), A and C = W V nonzero (InputError on attention.K / attention.V). Plain float64 over
// the n x n logits (O(n^2 d) time and n^2 memory); the exponentials are shifted by the largest
// logit, so only E itself can overflow (to +inf).
EnergyRates energy_rates(const AttentionParams& params, const Measure<double>& mu, double t = 0.0);

}  // namespace tokenflow
