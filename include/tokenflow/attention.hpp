// tokenflow/attention.hpp: attention velocity fields Gamma_mu(x), docs/design.md section 1.
//
// For a measure mu = sum_j a_j delta_{x_j} in R^d and H heads with blocks
// Q_h, K_h (k x d), V_h (kv x d), W_h (d x kv):
//   logits   s_h(x, y) = scale <Q_h x, K_h y>         (softmax, sigmoid, linear, sinkhorn)
//            s_h(x, y) = -scale |Q_h x - K_h y|^2      (l2)
//   weights  softmax, l2: a_j exp(s_ij) / sum_j' a_j' exp(s_ij')
//            sigmoid:     a_j sigma(s_ij + bias)       (bias default -ln n)
//            linear:      a_j s_ij
//            sinkhorn:    pi_ij / a_i, pi the entropic OT plan between (a, a) for cost -s_ij
//   Gamma(x_i) = sum_h W_h V_h sum_j w_h(x_i, x_j) x_j
// Causal mask: only j with pos_j <= pos_i take part. Attention sink m0: the token with the
// smallest position (position 0 by default) gets weight m0 in the measure and every other weight
// is scaled so that they sum to 1 - m0 (a Dirac mass m0 at position 0 of the positional marginal).
// normalize (the schemes of Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in Attention
// Dynamics", 2025; docs/design.md section 1, docs/normalization-schemes.md), with theta = x / |x|:
//   sphere (Post-LN): velocity P_x Gamma(x) = Gamma - <Gamma, x> x, tokens kept on the sphere;
//   pre  (Pre-LN):    velocity Gamma(theta), attention on the normalized tokens, x free in R^d;
//   peri (Peri-LN):   velocity Gamma(theta) / |Gamma(theta)|, x free in R^d;
//   ngpt (nGPT):      velocity P_x Gamma(x) / |Gamma(x)|, tokens kept on the sphere;
//   mix  (Mix-LN):    Post-LN (sphere) at times t < mix_until, Pre-LN (pre) from mix_until on: the
//                     tokens start on the sphere and leave it at mix_until (Mix-LN puts Post-LN in
//                     the first layers and Pre-LN in the others).
// A zero Gamma gives a zero velocity (peri, ngpt); a zero token has theta = 0 (pre, peri).
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenflow/measure.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

class Communicator;  // tokenflow/distributed.hpp

enum class AttentionKind { softmax, l2, sigmoid, linear, sinkhorn };
enum class Mask { none, causal };
enum class Normalize { none, sphere, pre, peri, ngpt, mix };
// Whether the scheme keeps the tokens on the unit sphere (sphere, ngpt: renormalized after steps;
// mix does until its mix_until: AttentionParams::on_sphere_at).
inline bool on_sphere(Normalize n) { return n == Normalize::sphere || n == Normalize::ngpt; }
// How softmax and l2 attention sum over keys (docs/fast-summation.md): dense (every pair),
// fast (the Taylor grid of fast_gauss.hpp: heads with k <= 3, no mask; l2 with scale > 0), or
// automatic: fast where it is possible and predicted faster, dense otherwise.
enum class Summation { dense, fast, automatic };

// ---- the registry of attention kinds -----------------------------------------------------------
// One entry a kind (src/attention/params.cpp), in the order help and docs list them. From it come
// the values of attention.kind (the schema: --help, docs/config.md, Python's config_keys),
// to_string and attention_kind_from_string, the Gaussian closure's refusal of a kind without one,
// the closure kinds in the help of `tokenflow gaussian` and `meanfield`, and Python's
// tokenflow.attention_kinds(). Besides its entry a kind needs an evaluator (evaluators.hpp, a case
// of with_evaluator in field.cpp), its literal formula (reference.cpp) and, where it has a
// Gaussian closure, its moment equations (src/gaussian/moments.cpp, reference.cpp): the switches
// over the kind have no default, so the compiler names each one that lacks it, and
// tests/cpp/test_attention_registry.cpp runs every entry through all of them.
struct AttentionKindInfo {
  AttentionKind kind;
  const char* name;
  const char* weights;          // w_ij, the weight of token j in token i's update (the formula above)
  bool normalized;              // every row of weights sums to one
  const char* no_causal_why;    // nullptr: takes mask = "causal"; else why not, as the refusal says it
  bool gaussian_closure;        // N(m, S) stays Gaussian: tokenflow gaussian and meanfield take it
  const char* no_closure_why;   // without a closure: why, as the refusal says it
};
const std::vector<AttentionKindInfo>& attention_kinds();
const AttentionKindInfo& attention_kind_info(AttentionKind kind);
const char* to_string(AttentionKind kind);
AttentionKind attention_kind_from_string(const std::string& s);  // throws InputError
const std::vector<std::string>& attention_kind_names();          // the registry's names, in order
std::string closure_kind_list();  // the kinds with a Gaussian closure: "softmax | l2 | sinkhorn | linear"

// The matrices of one head: Q, K (k x d), V (kv x d), W (d x kv).
struct HeadBlocks {
  Eigen::MatrixXd Q, K, V, W;
};

// Parameters valid on [previous until, until).
struct AttentionLayer {
  double until = std::numeric_limits<double>::infinity();
  std::vector<HeadBlocks> heads;
};

// Full, checked attention parameters. Build them with make_attention().
struct AttentionParams {
  AttentionKind kind = AttentionKind::softmax;
  int heads = 1;
  int dim = 0;        // d
  int key_dim = 0;    // k
  int value_dim = 0;  // kv
  double scale = 1.0;
  std::optional<double> bias;  // sigmoid; nullopt: -ln n
  double epsilon = 1.0;        // sinkhorn regularization
  // Sinkhorn attention's self-transport: ot.hpp's sinkhorn (Anderson-accelerated, warm-started
  // from the last evaluation), or, when K_h = Q_h and scale > 0 (a symmetric cost), its
  // sinkhorn_symmetric on the points sqrt(scale) K_h x, which converges where the alternating
  // loop creeps (n = 200, epsilon = 0.1: 39 iterations against 57 535).
  double sinkhorn_tol = 1e-12;  // l1 marginal error at which attention's Sinkhorn stops
  int sinkhorn_max_iter = kInnerSinkhornMaxIter;
  Mask mask = Mask::none;
  double sink = 0.0;
  Normalize normalize = Normalize::none;
  double mix_until =
      std::numeric_limits<double>::infinity();  // normalize = mix: Post-LN before, Pre-LN after
  Summation summation = Summation::automatic;
  double summation_tol = 1e-6;  // fast: |Gamma_h(x_i) - exact| <= tol sum_j P_ij |V_h x_j| per head
  // normalize = sphere: velocity() projects Gamma on the tangent space; false gives the raw Gamma
  // (run.sphere_step = retraction, which normalizes after each step instead). Other schemes: unused.
  bool tangent_projection = true;
  std::vector<AttentionLayer> layers;  // >= 1, increasing until, the last one until = +inf

  // The layer whose interval [previous until, until) contains t.
  const AttentionLayer& layer_at(double t) const;
  // The scheme in force at time t: normalize, except for mix (sphere before mix_until, pre after).
  Normalize scheme_at(double t) const {
    if (normalize != Normalize::mix) return normalize;
    return t < mix_until ? Normalize::sphere : Normalize::pre;
  }
  // Whether the tokens are kept on the unit sphere at time t (projected at the start of a run
  // when at t = 0, renormalized after every step that starts at t).
  bool on_sphere_at(double t) const { return on_sphere(scheme_at(t)); }
  // The times an integrator's steps must not cross (ascending): the finite `until` of the layers
  // and, for normalize = mix, mix_until (the field is discontinuous at each).
  std::vector<double> layer_ends() const;
  double sigmoid_bias(Eigen::Index n) const;
};

// What a user gives: any of the matrices may be missing (defaults: V = W = I_d, Q = K = I_d for
// one head), and [[layers]] give the matrices that change with time.
struct AttentionSpec {
  std::string kind = "softmax";
  int heads = 1;
  std::optional<Eigen::MatrixXd> Q, K, V, W;
  std::optional<double> scale, bias;
  double epsilon = 1.0;
  std::string mask = "none";
  double sink = 0.0;
  std::string normalize = "none";
  std::optional<double> mix_until;  // required by normalize = "mix", refused otherwise
  std::string summation = "auto";  // dense | fast | auto
  double summation_tol = 1e-6;
  double sinkhorn_tol = 1e-12;
  int sinkhorn_max_iter = kInnerSinkhornMaxIter;
  struct Layer {
    double until = std::numeric_limits<double>::infinity();
    std::optional<Eigen::MatrixXd> Q, K, V, W;
  };
  std::vector<Layer> layers;
};

// Empty when summation = fast can evaluate these params, else why not (one clause).
std::string fast_summation_obstacle(const AttentionParams& params);
// Sinkhorn attention through the grid needs sinkhorn_tol at least this: the grid's soft-mins are
// certified within grid_relative_tol(tol) = tol / 16 (ot_solve.hpp), counted twice in the
// marginal error, and its own rounding was measured at 1.5e-10 to 3e-11 (tokenflow ot --operator
// grid, 10^4 points, d = 2); at sinkhorn_tol 1e-11 every row fell back to the exact sum.
constexpr double kGridSinkhornMinTol = 1e-9;

// Checks shapes against d and fills the defaults. Errors are InputError with keys such as
// "attention.Q" or "layers[1].V".
AttentionParams make_attention(const AttentionSpec& spec, int d);

// The weights the attention sees: a with the sink applied (see the header comment).
template <class T>
Vec<T> attention_weights(const Measure<T>& mu, double sink);
// Index of the sink token: smallest position, first in input order among ties (0 if no positions).
template <class T>
Eigen::Index sink_index(const Measure<T>& mu);

// What velocity() did, summed over its calls and heads: evaluations of one head by the fast
// summation and densely, and the fast summation's rows certified from the grid or summed exactly.
struct SummationReport {
  long long fast_evaluations = 0, dense_evaluations = 0;
  long long rows_expanded = 0, rows_exact = 0;
};

// The velocity field of one measure's weights and positions, evaluated on moving points.
// Streams over keys: memory O(n (d + k + kv)) per head, never an n x n matrix. Thread-parallel
// over queries with a fixed order of summation for every query (results do not depend on the
// thread count). Workspaces are allocated once, in the constructor; the fast summation
// (attention.summation) allocates its grid in each call.
template <class T>
class AttentionField {
 public:
  // `mu` supplies weights and positions (and n, d); its points are not used.
  AttentionField(AttentionParams params, const Measure<T>& mu);
  ~AttentionField();
  AttentionField(AttentionField&&) noexcept;

  // out = Gamma_mu(x) at time t (n x d), projected on the sphere's tangent space if asked.
  void velocity(double t, const Points<T>& x, Points<T>& out);
  // E = 1/2 sum_h sum_ij a_i a_j exp(s_h(x_i, x_j)) with the logits of this attention (the
  // interaction energy of softmax attention; no mask); computed by streaming through the velocity's
  // kernel: logits in the working precision T, sums over tiles and rows in double.
  double interaction_energy(double t, const Points<T>& x) const;
  const AttentionParams& params() const { return params_; }
  const SummationReport& summation_report() const;

  // Splits velocity() over the ranks of `comm` (null or one rank: all on this process; `comm` must
  // outlive the field). Each rank computes the queries of its block of whole query tiles, with the
  // same kernel and summation order as one process, and the blocks are all-gathered, so that every
  // rank gets all of `out`, bit for bit the single-process result with the same thread count.
  // Exception: with several ranks the symmetric kernel (K_h = Q_h, no mask, k >= 16) is not used, so
  // such a field differs from the single-process one by the rounding of the logits of a pair
  // computed as (i, j) rather than (j, i) and of another order of its sums (tests/cpp/test_mpi.cpp
  // derives the tolerance). Sinkhorn attention splits its soft-min operator likewise
  // (DistributedSoftMin): bit for bit. Second exception: a head summed by the fast summation
  // (attention.summation) builds each rank's grid from all keys and the rank's own queries, so the
  // ranks agree with one process within twice summation_tol, not bit for bit.
  void set_communicator(const Communicator* comm);

  // Sinkhorn attention warm-starts each solve from the previous potentials (per head); a
  // checkpoint saves them so that a resumed run repeats the same iterations.
  void sinkhorn_potentials(std::vector<Eigen::VectorXd>& f, std::vector<Eigen::VectorXd>& g) const;
  void set_sinkhorn_potentials(const std::vector<Eigen::VectorXd>& f, const std::vector<Eigen::VectorXd>& g);

 private:
  struct Workspace;
  AttentionParams params_;
  Vec<T> weights_, positions_;
  std::unique_ptr<Workspace> work_;
};

// ---- reference (src/attention/reference.cpp) ---------------------------------------------------
// Plain double loops in float64, n x n matrices allowed: the oracle for every test.
// The n x n matrix w_h(x_i, x_j) of head h (rows: queries i, columns: keys j).
Eigen::MatrixXd reference_attention_matrix(const AttentionParams& params, const Measure<double>& mu,
                                           double t, int head);
// The velocity of every token, n x d: Gamma_mu(x_i) with the scheme of params.normalize applied.
Points<double> reference_velocity(const AttentionParams& params, const Measure<double>& mu,
                                  double t);

}  // namespace tokenflow
