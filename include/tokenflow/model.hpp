// tokenflow/model.hpp: the Sinkhorn Transformer, docs/design.md section 2 ("Sinkhorn Transformer", [model]).
//
// Two texts are measures mu = sum_i a_i delta_{x_i} (n points of R^d) and nu = sum_j b_j
// delta_{y_j} (m points). Two transformer encoders compute Q(mu, x_i) and K(nu, y_j) in R^k:
//   h = x W_in^T + b_in                                              (n, width)
//   `layers` pre-LN blocks:  h += Attn(LN1(h));  h += MLP(LN2(h))
//     Attn: `heads` heads of size width/heads; softmax weights over the tokens of the SAME text,
//           weighted by the measure: a_j exp(s_ij) / sum_j' a_j' exp(s_ij') (docs/design.md section 1),
//     MLP:  width -> mlp_ratio*width -> width with GELU;
//   out = LN_f(h) W_out^T                                            (n, k), no bias: a bias in Q
//         or K only adds a per-row or per-column constant to the cost, which the Sinkhorn
//         potentials absorb at convergence, so it would be a parameter without a purpose.
// The cost is c_ij = -<Q_i, K_j> / sqrt(k), and the final layer is `sinkhorn_iters` log-domain
// Sinkhorn iterations at `epsilon` (tokenflow/layers.hpp), returning the coupling of (a, b):
//   pi_ij = a_i b_j exp((f_i + g_j - c_ij) / epsilon),   columns summing exactly to b.
// Training minimizes KL(pi* | pi_theta) over pairs (tokenflow/train.hpp).
//
// The two encoders: Q and K have their own weights by default (share_encoders = false): the two
// texts play different roles (source and target; a coupling system F(mu, nu) need not be
// symmetric, e.g. matching nu = s mu + t; docs/design.md section 2). share_encoders = true
// uses one set of weights for both (fewer parameters; the coupling of (mu, mu) is then symmetric).
//
// Parameters are one flat array (float or double) described by a ParameterLayout whose names and
// order are those of the PyTorch reference (tests/fixtures/torch_sinkhorn_transformer.py):
//   q_encoder.embed.weight (width, d), .embed.bias (width),
//   q_encoder.blocks.L.{ln1.weight, ln1.bias, qkv.weight (3 width, width), qkv.bias, proj.weight
//     (width, width), proj.bias, ln2.weight, ln2.bias, fc.weight (F, width), fc.bias (F),
//     fc_proj.weight (width, F), fc_proj.bias}   with F = mlp_ratio width,
//   q_encoder.ln_f.weight, q_encoder.ln_f.bias, q_encoder.out.weight (k, width),
//   then the same for k_encoder (absent when the encoders are shared; the prefix is then
//   "encoder."), and final.marginal_relaxation (1) when model.learn_marginal_penalty.
#pragma once

#include <Eigen/Core>
#include <Eigen/StdVector>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenflow/layers.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

// Vectors whose data start on a 64-byte boundary (Eigen's aligned allocator). Eigen's vectorized
// reductions peel a different number of leading elements depending on the address of the data,
// which changes the order of summation: the passes below give bit-identical results from one run
// to the next only when the parameters and the inputs sit at the same address alignment, so the
// training loop keeps everything in AlignedVector.
template <class T>
using AlignedVector = std::vector<T, Eigen::aligned_allocator<T>>;

struct ModelConfig {
  int d = 2;  // dimension of the tokens (set by the task)
  int width = 64;
  int layers = 2;
  int heads = 4;
  int k = 32;
  int mlp_ratio = 4;
  int sinkhorn_iters = 30;
  bool share_encoders = false;
  // The final layer in training (layers.hpp): "unrolled", sinkhorn_iters iterations
  // differentiated step by step (memory 2 sinkhorn_iters n m); or "implicit", the plan solved to
  // sinkhorn.tol (at most sinkhorn.max_iter iterations) and differentiated at its fixed point
  // (memory O(n m), the same plan as tokenflow couple's default).
  std::string sinkhorn_grad = "unrolled";
  // The final Sinkhorn layer, in the one Sinkhorn options type (ot.hpp): epsilon (key
  // model.epsilon) for both layers; for the converged one (implicit training, couple(), the final
  // evaluation) also tol and max_iter (model.sinkhorn_tol, model.sinkhorn_max_iter), the
  // epsilon-scaling of every solve on a learned cost (kLearnedCostEpsilonStart) and ot.hpp's
  // acceleration.
  SinkhornOptions sinkhorn{.epsilon = 1.0, .epsilon_start = nn::kLearnedCostEpsilonStart};
  bool implicit() const { return sinkhorn_grad == "implicit"; }
  // Unbalanced final layer (model.marginal_penalty = sinkhorn.marginal_penalty < inf, ot.hpp Eq. (U1)).
  bool unbalanced() const { return !std::isinf(sinkhorn.marginal_penalty); }
  // model.learn_marginal_penalty: the final layer's relaxation lambda = eps / rho >= 0 is a
  // parameter ("final.marginal_relaxation", the layout's last), trained with the encoders from
  // eps / marginal_penalty (1, rho = eps, when marginal_penalty is left out) and kept >= 0 after
  // every step (0: the balanced layer). Texts whose every word has a counterpart drive it towards
  // 0, texts with unaligned words keep it away (docs/sinkhorn-transformer.md). Started small
  // (rho = 10 eps) it tends to stay small even where words are unaligned: the loss is not convex
  // in (theta, lambda). tau = 1 / (1 + lambda), kappa = 1 + lambda.
  bool learn_marginal_penalty = false;
  // Whether the plan's mass is free (the loss's mass term, layers.hpp kl_forward).
  bool relaxed() const { return unbalanced() || learn_marginal_penalty; }
};

// The size of a model computed from its shapes alone, before any allocation (long double: no
// overflow for any shapes). bytes: the parameters once in float64 plus the layout's records.
struct ModelSize {
  long double parameters = 0, tensors = 0, bytes = 0;
};
ModelSize model_size(const ModelConfig& config);

// The [model] keys and their reader: tokenflow/train_config.hpp.

struct ParameterTensor {
  std::string name;
  std::vector<int> shape;
  std::size_t offset = 0, size = 0;
  bool decays = false;  // AdamW's weight decay applies (the matrices, not biases or LayerNorm)
};

// Offsets (into the flat parameter array) of one encoder's tensors.
struct EncoderOffsets {
  struct Block {
    std::size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w,
        fc_proj_b;
  };
  std::size_t embed_w = 0, embed_b = 0, ln_f_w = 0, ln_f_b = 0, out_w = 0;
  std::vector<Block> blocks;
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);  // throws InputError for bad shapes
  const ModelConfig& config() const { return config_; }
  const std::vector<ParameterTensor>& tensors() const { return tensors_; }
  std::size_t size() const { return size_; }
  const EncoderOffsets& q_encoder() const { return q_; }
  const EncoderOffsets& k_encoder() const { return k_; }  // == q_encoder() when shared
  // The offset of final.marginal_relaxation (only with model.learn_marginal_penalty).
  std::size_t relaxation() const { return relaxation_; }

 private:
  EncoderOffsets add_encoder(const std::string& prefix);
  void add(const std::string& name, std::vector<int> shape, bool decays);
  ModelConfig config_;
  std::vector<ParameterTensor> tensors_;
  std::size_t size_ = 0;
  EncoderOffsets q_, k_;
  std::size_t relaxation_ = 0;
};

// The final layer's relaxation lambda = eps / rho (0: balanced): the learned parameter clamped at 0
// (model.learn_marginal_penalty), else eps / model.marginal_penalty. The unrolled layer's damping
// is tau = 1 / (1 + lambda) = rho / (rho + eps), the implicit layer's kappa = 1 + lambda.
template <class T>
double marginal_relaxation(const ParameterLayout& layout, const T* params);
// The final layer's penalty rho: model.marginal_penalty, or eps / lambda of the learned relaxation
// (+inf, balanced, at lambda = 0).
template <class T>
double final_marginal_penalty(const ParameterLayout& layout, const T* params);
// The model's config with model.marginal_penalty = eps / lambda (inf at 0) of these parameters:
// what couple() and the evaluation solve with; the config itself when nothing is learned.
ModelConfig final_layer_config(const ParameterLayout& layout, const double* params);

// Initial parameters: linear weights N(0, 1/fan_in) (the residual projections proj and fc_proj
// scaled by 1/sqrt(2 layers), GPT-2's rule), biases 0, LayerNorm weight 1 and bias 0.
std::vector<double> init_parameters(const ParameterLayout& layout, std::uint64_t seed);

// ---- one pair of texts ------------------------------------------------------------------------
// Inputs of one pair in precision T: x (n, d), y (m, d) row-major; log_a (n), log_b (m);
// target (n, m) or nullptr (inference).
template <class T>
struct PairInput {
  const T* x = nullptr;
  const T* y = nullptr;
  const T* log_a = nullptr;
  const T* log_b = nullptr;
  const T* target = nullptr;
  int n = 0, m = 0;
};

// The activations (or their gradients) of one encoder over n tokens: pointers into a
// PairWorkspace's memory, shapes as in the comments (C = width, F = mlp_ratio width, H = heads).
template <class T>
struct EncoderTensors {
  struct Block {
    T *ln1, *ln1_mean, *ln1_rstd;  // (n, C), (n), (n)
    T* qkv;                        // (n, 3C)
    T* att;                        // (H, n, n)
    T* atty;                       // (n, C)  attention output before the projection
    T* res1;                       // (n, C)  h + proj(atty)
    T *ln2, *ln2_mean, *ln2_rstd;  // (n, C), (n), (n)
    T *fch, *fch_gelu;             // (n, F), (n, F)
    T* res2;                       // (n, C)  res1 + fc_proj(fch_gelu): the block's output
  };
  T* h0 = nullptr;  // (n, C)  the embedded tokens
  std::vector<Block> blocks;
  T *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;  // (n, C), (n), (n)
  T* out = nullptr;                                            // (n, k)  Q or K
};

// Everything one pair needs (llm.c's activation and gradient tensors), in one allocation that
// grows to the largest (n, m) seen and is then reused: a training step does not allocate once
// every size has been seen. One workspace per thread.
template <class T>
struct PairWorkspace {
  AlignedVector<T> memory;  // every tensor starts on a 64-byte boundary
  int n = 0, m = 0;
  EncoderTensors<T> q_acts, k_acts, q_grads, k_grads;
  T* cost = nullptr;             // (n, m)
  T* log_plan = nullptr;         // (n, m)  the model's coupling, log pi_theta
  T* row_weights = nullptr;      // (iters, n, m)  Sinkhorn's saved softmax weights (unrolled;
  T* col_weights = nullptr;      // (iters, n, m)   none when implicit)
  T *u = nullptr, *v = nullptr;  // (n), (m)  the last potentials / epsilon
  T* potential_history = nullptr;  // (iters, n + m)  u^t, v^t (unrolled, learned relaxation; else none)
  std::vector<double> potentials;  // (n + m)  implicit, learned relaxation: f / eps, g / eps
  T* dlog_plan = nullptr;        // (n, m)
  nn::ConvergedSinkhornStats converged_layer;  // implicit: the last forward's solve
  T* dcost = nullptr;            // (n, m)
  T* scratch = nullptr;          // max(n, m)^2 + n + 2m
  // Points the tensors at memory for a pair of sizes (n, m), growing memory when needed (InputError
  // when it would not fit in memory: tokenflow/memory_budget.hpp).
  void prepare(const ModelConfig& config, int n, int m);
  // The numbers (of T) prepare lays out for a pair of sizes (n, m): for memory estimates.
  static std::size_t numbers(const ModelConfig& config, int n, int m);

 private:
  std::size_t lay_out(const ModelConfig& config, int n, int m, T* base);
};

// Forward pass of one pair: fills ws (log_plan, Q = q_acts.out, K = k_acts.out); returns KL(target
// | pi_theta) when input.target is given, else 0.
template <class T>
T pair_forward(const ParameterLayout& layout, const T* params, const PairInput<T>& input,
               PairWorkspace<T>& ws);
// Backward pass of the last pair_forward on ws: grads (layout.size()) += loss_scale * d loss /
// d params. Needs input.target.
template <class T>
void pair_backward(const ParameterLayout& layout, const T* params, T* grads,
                   const PairInput<T>& input, PairWorkspace<T>& ws, T loss_scale);

// ---- a trained model --------------------------------------------------------------------------
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct SinkhornTransformer {
  ModelConfig config;
  std::vector<double> params;  // layout(config).size() values
  std::string config_toml;  // the full configuration it was trained with (informative; the CLI and Python
                            // fill it from the run's config, train() leaves it empty)
};

// How couple() forms the plan from the learned cost c_ij = -<Q_i, K_j> / sqrt(k).
//   converged (the default): the entropic-OT plan of c, solved by ot.hpp's sinkhorn with the
//     model's own Sinkhorn options (ModelConfig::sinkhorn: model.epsilon, epsilon-scaling from the
//     cost range, Anderson acceleration) but this tol and max_iter, until the l1 marginal error is
//     below tol: a coupling of (a, b), the limit that the universal-approximation theorem is about.
//   unrolled: the training-time plan, model.sinkhorn_iters unrolled iterations (layers.hpp): its
//     columns sum to b, its rows only approximately to a.
struct CoupleOptions {
  bool unrolled = false;
  double tol = kSinkhornTol;
  int max_iter = kInnerSinkhornMaxIter;
};
// The options of couple()'s converged solve: the model's own (ModelConfig::sinkhorn) with the
// tol and max_iter of `options` (the final evaluation uses the defaults, as tokenflow couple does).
SinkhornOptions couple_sinkhorn_options(const ModelConfig& config, const CoupleOptions& options = {});
struct Coupling {
  RowMatrix plan;               // n x m
  double marginal_error = 0.0;  // |pi 1 - a|_1 + |pi^T 1 - b|_1 of the returned plan
  int iterations = 0;           // Sinkhorn iterations (the unrolled count when unrolled)
  bool converged = false;       // converged: marginal_error < tol reached; unrolled: false
  bool unrolled = false;
};

// The coupling pi_theta (n x m) of the measures (x, a) and (y, b) (weights normalized; empty =
// uniform). Throws InputError when the dimension differs from the model's.
Coupling couple_measures(const SinkhornTransformer& model, const Points<double>& x, const Points<double>& y,
                         const Eigen::VectorXd& a = {}, const Eigen::VectorXd& b = {},
                         const CoupleOptions& options = {});
// final_layer_config of a model's own layout and parameters (its final layer as couple() solves it).
ModelConfig final_layer_config(const SinkhornTransformer& model);
// couple_measures(...).plan.
RowMatrix couple(const SinkhornTransformer& model, const Points<double>& x, const Points<double>& y,
                 const Eigen::VectorXd& a = {}, const Eigen::VectorXd& b = {}, const CoupleOptions& options = {});

// model.bin (save_model, load_model): tokenflow/model_file.hpp.

}  // namespace tokenflow
