// tokenflow/metastability.hpp: dynamic metastability of softmax attention on the circle
// (Geshkovski, Koubbi, Polyanskiy, Rigollet, "Dynamic metastability in the self-attention model",
// arXiv:2410.06833, 2024).
//
// The flow is that of attention.normalize = "sphere" in d = 2 with Q = K = V = W = I,
// attention.scale = beta and weights a (docs/design.md section 1). With x_i = (cos t_i, sin t_i)
// the tangent component of P_{x_i}(sum_j w_ij x_j) along (-sin t_i, cos t_i) is
//   Eq. (M1)  dt_i/dt = F_i = sum_j a_j k_ij sin(t_j - t_i) / sum_j a_j k_ij,
//             k_ij = exp(beta (cos(t_j - t_i) - 1)),
// written with differences of angles, so that the pull between clusters keeps its relative
// accuracy when it is far below the rounding of sum_j w_ij x_j (at beta = 4000 and clusters 0.5
// apart it is e^{-490}; the particle field in R^2 loses everything below 1e-16 of |x|).
// Energy: the interaction energy of AttentionField::interaction_energy scaled by 2 e^{-beta},
//   Eq. (M2)  E = sum_ij a_i a_j k_ij = 2 e^{-beta} * (1/2 sum_ij a_i a_j exp(beta <x_i, x_j>)),
// which lies in [sum_i a_i^2, 1]; tokens in tight, well separated clusters of weights m_c give
// E = sum_c m_c^2 (n = 5 uniform: 1/5, 7/25, 9/25, 13/25, 17/25, 1 ...): the staircase's levels.
// Rescaled time (the authors'): the arclength of the angles divided by log beta,
//   Eq. (M3)  ds = |dt_vector|_2 / log beta  (sum over the n original tokens),
// so that d theta / ds = log beta F / |F| moves at a fixed speed through every plateau, while the
// physical time dt = log beta ds / |F| grows exponentially in beta on each plateau.
// Two clusters of weights p and q at angle delta (every token of a cluster at one point; exact:
// coinciding tokens stay together) follow
//   Eq. (M4)  d delta / dt = -G(delta) = -k sin(delta) (q / (p + q k) + p / (q + p k)),
//             k = exp(-beta (1 - cos delta)),
// so the escape time from delta0 to delta1 is T = int_{delta1}^{delta0} du / G(u); for large beta
// T ~ e^{beta (1 - cos delta0)} / (beta sin^2 delta0 (p/q + q/p)) (Laplace at u = delta0), and
// log T / beta -> 1 - cos delta0: the slope of log escape time against beta.
//
// Everything here is float64. The library never prints; bad arguments are std::invalid_argument.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace tokenflow {

// Eq. (M1) at every token: angles (radians) and weights (positive, any sum; normalized inside).
std::vector<double> circle_velocity(const std::vector<double>& angles, const std::vector<double>& weights,
                                    double beta);
// Eq. (M2) (weights normalized to sum 1).
double circle_energy(const std::vector<double>& angles, const std::vector<double>& weights, double beta);

struct CircleFlowOptions {
  double beta = 1.0;               // inverse temperature (attention.scale), > 0
  double max_angle_step = 1e-3;    // largest |d t_i| of one step (radians)
  double stability = 0.1;          // h times the Jacobian's Gershgorin bound, at most (RK4 is stable to 2.78;
                                   // 0.1 keeps its relative error in the escape times near 1e-6)
  double merge_gap = 1e-12;        // two tokens closer than this (radians) become one weighted token
  double t_max = std::numeric_limits<double>::infinity();  // stop at this physical time (exactly)
  long max_steps = 10'000'000;
};

// One recorded step of the flow.
struct CircleFlowPath {
  std::vector<double> time;      // physical time t
  std::vector<double> rescaled;  // s of Eq. (M3)
  std::vector<double> energy;    // Eq. (M2)
  std::vector<int> clusters;     // tokens left after merging (tight clusters)
  std::vector<double> level;     // sum of their squared weights: the level E tends to
  std::vector<double> final_angles, final_weights;  // the merged tokens at the end
  long steps = 0;
  // "one_cluster": every token merged; "t_max": reached options.t_max; "frozen": the pull between
  // the clusters underflowed to 0 (k below 1e-308: beta (1 - cos delta) > 708), so the flow
  // stands still in float64; "max_steps".
  std::string status;
};

// Integrates Eq. (M1) by RK4 in physical time with h = min(2 h_prev, max_angle_step / max|F|,
// stability / Gershgorin bound of dF/dt), recording every step. After each step, tokens closer than
// merge_gap merge into one token of their summed weight at their weighted mean angle (they would
// keep approaching at rate ~1 while the pull between clusters is e^{-beta (1 - cos delta)}; the merge
// moves a token by less than merge_gap). Angles in radians, any real values; weights > 0.
CircleFlowPath run_circle_flow(std::vector<double> angles, std::vector<double> weights,
                               const CircleFlowOptions& options);

// A plateau of the staircase: the stretch between two merges (or the start and the first merge),
// with `clusters` tokens left.
struct Plateau {
  int clusters = 0;
  double s_start = 0, s_end = 0;  // rescaled time
  double t_start = 0, t_end = 0;  // physical time; t_end - t_start is the escape time
  double energy_level = 0;        // sum of the squared cluster weights (the level E tends to)
  double energy_end = 0;          // E just before the merge that ends it
};
std::vector<Plateau> find_plateaus(const CircleFlowPath& path);

// Eq. (M4): G(delta) for clusters of weights p, q (p + q need not be 1).
double two_cluster_rate(double p, double q, double beta, double delta);
// The escape time int_{delta1}^{delta0} du / G(u), 0 < delta1 <= delta0 < pi, by composite Simpson in
// v = log u on `panels` panels (even); the integrand u / G(u) is smooth in v.
double two_cluster_escape_time(double p, double q, double beta, double delta0, double delta1,
                               long panels = 1L << 20);
// The Laplace asymptotics of the same: e^{beta (1 - cos delta0)} / (beta sin^2 delta0 (p/q + q/p)).
double two_cluster_escape_asymptotic(double p, double q, double beta, double delta0);

// Least-squares line y = intercept + slope x.
struct LineFit {
  double slope = 0, intercept = 0, max_residual = 0;
};
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

// The authors' initial angles (n = 5): multiples {0, 1/4, 1, 2, 7/2} of log(beta) / sqrt(beta).
std::vector<double> staircase_angles(double beta);

// ---- the authors' protocol: normalized steps through the attention engine --------------------
// (src/metastability/normalized_steps.cpp) The authors' script (HugoKoubbi/2024-transformers-dotm)
// takes fixed-length steps along the normalized velocity. Here every step is
//   Eq. (M5)  x_i <- (x_i + h v_i / |v|) / |x_i + h v_i / |v||,   |v|^2 = sum_c count_c |v_c|^2,
// with x_i = (cos t_i, sin t_i) in R^2 and v_i = P_{x_i} Gamma(x_i) the velocity of the attention
// engine (AttentionField: softmax, Q = K = V = W = I, scale beta, normalize = "sphere", dense
// summation; the evaluation `simulate` makes), the merged tokens' weights as the measure's
// weights, taken along the tangent (-sin t_i, cos t_i) (the engine's projection leaves a radial
// rounding of order eps |Gamma|, which near the floor is a sizeable part of v). |v| is the norm of
// the whole velocity vector over the n original tokens (a merged token counts count_c times, as
// the authors' script keeps merged tokens as copies at one angle): the tokens' arclength grows by
// h per step (up to O(h^3): a token turns by atan(h |v_i| / |v|)),
// and the rescaled time of Eq. (M3) is s = steps h / log beta. Each token is renormalized on its
// own. After each step, tokens closer than merge_distance (radians) become one token of their summed
// weight at their normalized weighted mean (the authors merge below 1e-3). The energy is Eq. (M2)
// (circle_energy: AttentionField::interaction_energy exp(beta) overflows float64 past beta = 709).
// Float64's floor: the engine sums weights times points of norm 1, so its tangent velocity carries an
// absolute rounding of order n eps, while the pull between clusters delta apart is
// e^{-beta (1 - cos delta)} (e^{-86} at beta = 4000 on the staircase's third plateau): below it the
// engine's step direction is rounding. Every step compares the engine's angular velocity with
// Eq. (M1) (written with angle differences, accurate to its relative rounding); when their unit
// directions differ by more than direction_tolerance, the run has reached the floor: it stops with
// status "rounding_floor" or, with continue_with_angles, takes the remaining steps along Eq. (M1)
// itself (the same step, t_i += h F_i / |F|), and the path says from which step.
struct NormalizedStepOptions {
  double beta = 2.0;          // > 1 (the rescaled time divides by log beta)
  double step = 0.0;          // h (radians of arclength per step); 0: the authors' 1e-5 log beta
  long steps = 1'000'000;     // the authors' count
  long record_every = 1000;   // record every k steps, at every merge and at the last step
  double merge_distance = 1e-3;
  double direction_tolerance = 1e-3;  // |v_engine / |v_engine| - F / |F|| above which the engine is at its floor
  bool continue_with_angles = true;
  bool engine = true;         // false: every step along Eq. (M1) (no engine)
  // Called every record_every steps with the steps taken; false stops the run (throws Cancelled).
  std::function<bool(long)> progress;
};

// The recorded steps. Rows: every record_every steps, every merge (the state after it), the last step.
struct NormalizedStepPath {
  std::vector<long> step;          // steps taken
  std::vector<double> rescaled;    // s = step h / log beta
  std::vector<double> arclength;   // the tokens' measured arclength (sum over the n tokens) / log beta
  std::vector<double> time;        // physical time of the steps, sum of h / |v| (an Euler clock)
  std::vector<double> energy;      // Eq. (M2)
  std::vector<int> clusters;       // tokens left after merging
  std::vector<double> level;       // sum of their squared weights
  std::vector<double> speed;       // |v| of the step that ended at this record (0 at the start)
  std::vector<double> final_angles, final_weights;
  long steps = 0;
  long engine_steps = 0;           // steps along the engine's velocity (the first ones)
  int floor_clusters = 0;          // tokens left when the engine reached its floor (0: never)
  double max_direction_gap = 0.0;  // largest engine-against-(M1) direction gap over the engine's steps
  double max_norm_error = 0.0;     // largest ||x_i| - 1| after a step
  // "steps": took options.steps; "one_cluster": every token merged; "rounding_floor": the engine
  // reached its floor and continue_with_angles is false; "frozen": |v| = 0 (the pull underflowed).
  std::string status;
};

NormalizedStepPath run_normalized_steps(std::vector<double> angles, std::vector<double> weights,
                                        const NormalizedStepOptions& options);
// The plateaus of a normalized-step path (Plateau's t is its Euler clock `time`; s the rescaled time).
std::vector<Plateau> find_plateaus(const NormalizedStepPath& path);

// Reference (src/metastability/reference.cpp): the particle field in R^2 with plain loops
// (softmax weights, sum_j w_ij x_j, tangent projection), its component along (-sin t_i, cos t_i),
// and Eq. (M2) as 2 e^{-beta} times the interaction energy summed over pairs.
std::vector<double> reference_circle_velocity(const std::vector<double>& angles, const std::vector<double>& weights,
                                              double beta);
double reference_circle_energy(const std::vector<double>& angles, const std::vector<double>& weights, double beta);
// Eq. (M5) with the same merging, plain loops over the field in R^2 (no floor check, no records):
// the path's final angles and weights, steps and status ("steps" or "one_cluster").
NormalizedStepPath reference_normalized_steps(std::vector<double> angles, std::vector<double> weights,
                                              const NormalizedStepOptions& options);

}  // namespace tokenflow
