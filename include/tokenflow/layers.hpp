// tokenflow/layers.hpp: the Sinkhorn Transformer's layers as forward/backward pairs (llm.c style).
//
// Every layer works on plain row-major arrays of one text (n tokens) in the working precision T
// (float or double); shapes are written beside each argument, (n, C) meaning n rows of C values.
// Conventions:
//   - forward writes its outputs (and the few values the backward pass needs, e.g. the softmax
//     weights of attention, the mean and 1/std of LayerNorm);
//   - backward ACCUMULATES (+=) into the gradients of its inputs and parameters, as llm.c does, so
//     a tensor used twice (a residual stream, weights shared between two encoders) collects both
//     contributions; pass nullptr for a gradient that is not wanted;
//   - no layer allocates, except sinkhorn_backward's caller-provided workspace and the converged
//     Sinkhorn layer (its solver's buffers).
// The reference versions (namespace reference, src/model/reference.cpp) are plain double loops in
// float64; the optimized ones (src/model/layers.cpp, Eigen GEMMs and vectorized exp) are tested
// against them and against finite differences (tokenflow/gradient_check.hpp).
#pragma once

#include "tokenflow/ot.hpp"

namespace tokenflow::nn {

// ---- linear ---------------------------------------------------------------------------------
// out (n, OC) = inp (n, C) weight^T + bias;  weight (OC, C), bias (OC) or nullptr.
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int n, int C, int OC);
// dinp (n, C), dweight (OC, C), dbias (OC) (each may be nullptr) += from dout (n, OC).
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int n, int C, int OC);

// ---- LayerNorm (Ba et al. 2016), over the C features of each token, eps = 1e-5 -----------------
// out (n, C) = (inp - mean) * rstd * weight + bias; mean (n), rstd (n) = 1/sqrt(var + eps) saved.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int n, int C);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int n, int C);

// ---- multi-head softmax self-attention within one text ----------------------------------------
// qkv (n, 3C): row i = [q_i | k_i | v_i], each C = H * hs (head h uses columns h*hs .. h*hs+hs-1).
// log_a (n): log token weights, so that the weights are those of the measure (docs/design.md section 1):
//   att[h, i, j] = a_j exp(s_hij) / sum_j' a_j' exp(s_hij'),  s_hij = <q_hi, k_hj> / sqrt(hs)
//   out[i, h*hs + c] = sum_j att[h, i, j] v[j, h*hs + c]
// att (H, n, n) is saved for the backward pass.
template <class T>
void attention_forward(T* out, T* att, const T* qkv, const T* log_a, int n, int C, int H);
// dqkv (n, 3C) += from dout (n, C); scratch (n, n) is workspace.
template <class T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int n,
                        int C, int H);

// ---- GELU, tanh form (Hendrycks & Gimpel 2016, Eq. for GELU(x) ~ 0.5 x (1 + tanh(...))) ------
// out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T>
void gelu_forward(T* out, const T* inp, int N);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int N);

// ---- the Sinkhorn Transformer's cost ----------------------------------------------------------
// cost (n, m): C_ij = -<Q_i, K_j> / sqrt(k);  Q (n, k), K (m, k).
template <class T>
void cost_forward(T* cost, const T* Q, const T* K, int n, int m, int k);
template <class T>
void cost_backward(T* dQ, T* dK, const T* dcost, const T* Q, const T* K, int n, int m, int k);

// ---- the unrolled log-domain Sinkhorn layer ----------------------------------------------------
// The differentiable twin of ot.hpp's sinkhorn(): the same update order (f from g, then g), a
// fixed number of iterations, every iterate kept for the backward pass. With S = -C / eps,
// u = f / eps, v = g / eps, v^0 = 0 and t = 1 .. iters (Eq. (23) of Feydy et al. 2019):
//   u^t_i = -log sum_j exp(log b_j + v^{t-1}_j + S_ij)
//   v^t_j = -log sum_i exp(log a_i + u^t_i + S_ij)
//   log_plan_ij = log a_i + log b_j + u^T_i + v^T_j + S_ij        (columns sum exactly to b)
// The softmax weights of each half step are saved for the backward pass:
//   row_weights[t] (n, m): exp(log b_j + v^{t-1}_j + u^t_i + S_ij)   (each row sums to 1)
//   col_weights[t] (n, m): exp(log a_i + u^t_i + v^t_j + S_ij)       (each column sums to 1)
// so row_weights and col_weights are (iters, n, m) each: memory 2 iters n m.
// cost (n, m), log_a (n), log_b (m); log_plan (n, m); u, v (n), (m): the last potentials.
// Unbalanced (model.marginal_penalty rho, ot.hpp Eq. (U1)): tau = rho / (rho + eps) multiplies
// both half steps, u^t_i = -tau log sum_j ..., v^t_j = -tau log sum_i ... (the weights saved are
// still the softmaxes); tau = 1 is the balanced layer.
// potential_history (iters (n + m), or nullptr): u^t then v^t of every iteration t, which the
// backward pass needs for the gradient in tau (a learned marginal penalty, tokenflow/model.hpp).
template <class T>
void sinkhorn_forward(T* log_plan, T* row_weights, T* col_weights, T* u, T* v, const T* cost,
                      const T* log_a, const T* log_b, T epsilon, int iters, int n, int m, T tau = T(1),
                      T* potential_history = nullptr);
// dcost (n, m) += from dlog_plan (n, m). Reverses the iterations:
//   dS = dlog_plan, du = rowsum(dlog_plan), dv = colsum(dlog_plan); for t = iters .. 1:
//     "v^t_j = -log sum_i ..."  ->  dS_ij -= dv_j col_ij;  du_i -= sum_j dv_j col_ij
//     "u^t_i = -log sum_j ..."  ->  dS_ij -= du_i row_ij;  dv_j  = -sum_i du_i row_ij
//   dcost = -dS / eps.
// With tau (unbalanced) every dv_j and du_i above is first multiplied by tau (each half step is
// tau times a negative log-sum-exp).
// dtau (or nullptr) += d loss / d tau: since u^t = tau (-lse), d u^t / d tau = u^t / tau, so
// dtau += sum_t (du^t . u^t + dv^t . v^t) / tau with du^t, dv^t the gradients reaching the
// potentials, from the forward's potential_history.
// scratch: n + 2 m values of workspace.
template <class T>
void sinkhorn_backward(T* dcost, T* scratch, const T* dlog_plan, const T* row_weights,
                       const T* col_weights, T epsilon, int iters, int n, int m, T tau = T(1),
                       T* dtau = nullptr, const T* potential_history = nullptr);

// ---- the converged Sinkhorn layer with implicit gradients (model.sinkhorn_grad = "implicit") -----
// Forward (src/model/implicit_sinkhorn.cpp): the entropic-OT plan of the cost itself, not of a
// fixed number of iterations. ot.hpp's sinkhorn (Anderson-accelerated log domain, epsilon-scaling
// from the cost range: kLearnedCostEpsilonStart) runs in float64 on the cost until the l1
// marginal error is below tol or max_iter iterations are spent, and
//   log_plan_ij = log a_i + log b_j + (f_i + g_j - c_ij) / eps      (columns sum exactly to b).
// Memory O(n m), whatever the iterations; it allocates (the solver's own buffers), unlike the
// unrolled layer.
// The epsilon_start (ot.hpp) of every solve on a learned cost (this layer, couple(), the final
// evaluation): -1, scaling from the cost range, whatever the ratio epsilon / range. A trained
// matching model's costs are near-permutation (range ~160 at epsilon 1 after 500 steps): on 20 test
// pairs the unscaled loop took 241 to 81 275 iterations to 1e-9, the scaled one 119 to 233. On
// clouds, POT's 1-D problem and self-transport the scaling costs at most about 2x iterations at
// epsilon / range >= 1e-3, where tokenflow ot's automatic choice does not scale (docs/ot.md).
constexpr double kLearnedCostEpsilonStart = -1.0;

struct ConvergedSinkhornStats {
  int iterations = 0;
  double marginal_error = 0.0;
  bool converged = false;
};
// potentials (n + m, or nullptr): f / eps then g / eps of the fixed point, in float64, for the
// gradient in the relaxation; a balanced solve's gauge is set to <a, f> = <b, g>, the limit of the
// unbalanced potentials as rho -> inf (their masses sum_i a_i e^{-f_i/rho} = sum_j b_j e^{-g_j/rho}).
template <class T>
ConvergedSinkhornStats sinkhorn_converged_forward(T* log_plan, const T* cost, const T* log_a,
                                                  const T* log_b, const SinkhornOptions& options,
                                                  int n, int m, double* potentials = nullptr);
// Backward: implicit differentiation of the fixed point (Luise et al. 2018, "Differential
// properties of Sinkhorn approximation for learning with Wasserstein distance", Sec. 4;
// Eisenberger et al. 2022, "A unified framework for implicit Sinkhorn differentiation", Eq. (9)),
// in float64. With P = exp(log_plan), r = P 1 (= a within tol), b = P^T 1 and G = dlog_plan: the
// plan satisfies P 1 = r, P^T 1 = b, and differentiating these conditions in (f, g, c) gives
//   dc_ij = (P_ij (alpha_i + beta_j) - G_ij) / eps,
//   [diag(r) P; P^T diag(b)] [alpha; beta] = [G 1; G^T 1].
// The system is singular along the gauge (1, -1) (f + t, g - t is the same plan) and consistent
// (both halves of the right side sum to sum G). It is plan_adjoint's system
// (tokenflow/plan_adjoint.hpp, whose P is G here), solved through its Schur complement onto the
// smaller side, e.g. for m <= n
//   (diag(b) - P^T diag(1 / r) P) beta = G^T 1 - P^T (G 1 / r),   alpha = (G 1 - P beta) / r,
// with the gauge beta_{m-1} = 0 (Cholesky of the leading (m - 1) block). dcost += the result.
// Unbalanced (rho = options.marginal_penalty < inf): the fixed point is P 1 = a e^{-f/rho}, P^T 1 =
// b e^{-g/rho}, and differentiating it gives the same dc with the diagonal blocks multiplied by
// kappa = 1 + eps / rho: [kappa diag(r) P; P^T kappa diag(b)] (positive definite: no gauge; the
// derivation is python/tokenflow/torch.py's (6)-(7)), solved through the same Schur complement,
// kappa diag(c) - P^T diag(1 / (kappa r)) P, by Cholesky (unbalanced_plan_adjoint, plan_adjoint.hpp).
// The relaxation lambda = eps / rho (0: balanced; a learned marginal penalty, tokenflow/model.hpp):
// with phi = f / eps, gamma = g / eps the fixed point is log r_i - log a_i + lambda phi_i = 0 (and
// the same for the columns), so d phi / d lambda solves H_kappa d = -[r o phi; c o gamma] and
//   d loss / d lambda = -(sum_i alpha_i r_i phi_i + sum_j beta_j c_j gamma_j).
// drelaxation (or nullptr) += that, from sinkhorn_converged_forward's potentials. At rho = inf the
// gauge of (alpha, beta) drops out since <r, phi> = <c, gamma> there (the forward's gauge).
template <class T>
void sinkhorn_implicit_backward(T* dcost, const T* dlog_plan, const T* log_plan, double epsilon, int n, int m,
                                double rho = kSinkhornBalanced, double* drelaxation = nullptr,
                                const double* potentials = nullptr);

// ---- the loss KL(pi* | pi_theta) ---------------------------------------------------------------
// loss = sum_ij target_ij (log target_ij - log_plan_ij), with 0 log 0 = 0; target (n, m) >= 0.
// With `mass` (an unbalanced final layer, whose plan's mass is free) the generalized KL of two
// measures, loss += sum_ij (exp(log_plan_ij) - target_ij): >= 0 and 0 only at pi = pi*. Without
// it an unbalanced plan lowers the loss without bound by growing its mass on the target's support
// (its rows grow like a_i (sum_j b_j e^{-c_ij/eps})^{eps/(rho+eps)} as a cost falls); a balanced
// plan has mass 1 = sum target, so the term is 0 and left out.
template <class T>
T kl_forward(const T* target, const T* log_plan, int n, int m, bool mass = false);
// dlog_plan (n, m) += scale * (-target + (mass ? exp(log_plan) : 0)) (the gradient of scale * loss).
template <class T>
void kl_backward(T* dlog_plan, const T* target, T scale, int n, int m, const T* log_plan = nullptr);

// ---- reference: plain double loops in float64, the oracle of the tests ------------------------
namespace reference {
void linear_forward(double* out, const double* inp, const double* weight, const double* bias, int n,
                    int C, int OC);
void linear_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                     const double* inp, const double* weight, int n, int C, int OC);
void layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                       const double* weight, const double* bias, int n, int C);
void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                        const double* inp, const double* weight, const double* mean,
                        const double* rstd, int n, int C);
void attention_forward(double* out, double* att, const double* qkv, const double* log_a, int n,
                       int C, int H);
void attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                        int n, int C, int H);
void gelu_forward(double* out, const double* inp, int N);
void gelu_backward(double* dinp, const double* inp, const double* dout, int N);
void cost_forward(double* cost, const double* Q, const double* K, int n, int m, int k);
void cost_backward(double* dQ, double* dK, const double* dcost, const double* Q, const double* K,
                   int n, int m, int k);
// Keeps the potentials (u^t, v^t) instead of the weights and recomputes the weights backward
// (with tau: a softmax weight is exp(z_ij + v_j / tau), the half step being v_j = -tau lse_i z_ij).
void sinkhorn_forward(double* log_plan, double* u_history, double* v_history, const double* cost,
                      const double* log_a, const double* log_b, double epsilon, int iters, int n,
                      int m, double tau = 1.0);
void sinkhorn_backward(double* dcost, const double* dlog_plan, const double* u_history,
                       const double* v_history, const double* cost, const double* log_a,
                       const double* log_b, double epsilon, int iters, int n, int m, double tau = 1.0);
double kl_forward(const double* target, const double* log_plan, int n, int m, bool mass = false);
// The implicit backward of the converged layer by the full (n + m) x (n + m) system, solved by
// Eigen's complete orthogonal decomposition (the minimum-norm solution; any solution gives the
// same dcost, since the gauge direction adds t - t to alpha_i + beta_j).
void sinkhorn_implicit_backward(double* dcost, const double* dlog_plan, const double* log_plan, double epsilon,
                                int n, int m, double rho = kSinkhornBalanced);
}  // namespace reference

}  // namespace tokenflow::nn
