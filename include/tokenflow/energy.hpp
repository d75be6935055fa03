// tokenflow/energy.hpp: the interaction energy of softmax attention as a Lyapunov function.
//
// E(mu) = 1/2 sum_ij a_i a_j exp(s(x_i, x_j)), s(x, y) = scale <Q x, K y> = y^T A x with
// A = scale K^T Q. For one head with A symmetric and C = W V = c A (c > 0):
//   grad_{x_i} E = a_i Z_i A ybar_i,   Z_i = sum_j a_j exp(s_ij),  ybar_i = sum_j w_ij x_j,
// while dx_i/dt = C ybar_i = c A ybar_i, so dE/dt = c sum_i a_i Z_i |A ybar_i|^2 >= 0: the flow is
// a gradient ascent of E (in the metric weighted by 1 / (a_i Z_i)) and E never decreases. On the
// sphere (normalize = "sphere") the same holds with both sides projected on the tangent space, e.g.
// Q = K = V = I (A = scale I, C = I). Several heads, layers, masks or sinks break the identity.
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

}  // namespace tokenflow
