// The Sinkhorn Transformer: parameter layout, initialization, the forward and backward passes of
// one pair of texts, and inference (tokenflow/model.hpp).
#include "tokenflow/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/layers.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/ot_solve.hpp"
#include <fmt/format.h>

namespace tokenflow {

ModelSize model_size(const ModelConfig& c) {
  // In long double (a 64-bit mantissa on x86): exact for every size that can be held, and no
  // overflow for any int shapes (mlp_ratio * width alone may exceed an int).
  using L = long double;
  const L C = c.width, d = c.d, F = static_cast<L>(c.mlp_ratio) * c.width, layers = c.layers, k = c.k;
  const L encoders = c.share_encoders ? 1 : 2;
  const L block = 4 * C * C + 2 * F * C + 9 * C + F;
  ModelSize s;
  s.parameters = encoders * (C * d + C + layers * block + 2 * C + k * C) + (c.learn_marginal_penalty ? 1 : 0);
  s.tensors = encoders * (5 + 12 * layers) + (c.learn_marginal_penalty ? 1 : 0);
  // What the parameters take once in double, plus the layout's per-tensor records (a name, a shape,
  // offsets: about 128 bytes each), which outweigh the parameters of a model of width 1.
  s.bytes = 8 * s.parameters + 128 * s.tensors;
  return s;
}

// ---- layout -------------------------------------------------------------------------------------
ParameterLayout::ParameterLayout(const ModelConfig& config) : config_(config) {
  if (config.d < 1 || config.width < 1 || config.heads < 1 || config.k < 1 || config.layers < 0 ||
      config.mlp_ratio < 1 || config.width % config.heads != 0)
    throw InputError("", "model", "invalid shapes (d, width, heads, k, layers, mlp_ratio)");
  // The shapes are ints (mlp_ratio * width must be one too) and the total a size_t.
  const ModelSize size = model_size(config);
  if (static_cast<long double>(config.mlp_ratio) * config.width > std::numeric_limits<int>::max() ||
      !(size.parameters < 0x1p62L) || !(size.tensors < 0x1p31L))
    throw InputError("", "model", "the shapes (width, layers, mlp_ratio, k, d) are too large");
  if (config.share_encoders) {
    q_ = add_encoder("encoder.");
    k_ = q_;
  } else {
    q_ = add_encoder("q_encoder.");
    k_ = add_encoder("k_encoder.");
  }
  if (config.learn_marginal_penalty) {
    add("final.marginal_relaxation", {1}, false);
    relaxation_ = tensors_.back().offset;
  }
}

template <class T>
double marginal_relaxation(const ParameterLayout& layout, const T* params) {
  const ModelConfig& c = layout.config();
  if (c.learn_marginal_penalty)
    return std::max(0.0, static_cast<double>(params[layout.relaxation()]));
  return c.sinkhorn.epsilon / c.sinkhorn.marginal_penalty;  // 0 when balanced (rho = inf)
}
template double marginal_relaxation(const ParameterLayout&, const float*);
template double marginal_relaxation(const ParameterLayout&, const double*);

template <class T>
double final_marginal_penalty(const ParameterLayout& layout, const T* params) {
  const ModelConfig& c = layout.config();
  if (!c.learn_marginal_penalty) return c.sinkhorn.marginal_penalty;
  const double lambda = marginal_relaxation(layout, params);
  return lambda > 0.0 ? c.sinkhorn.epsilon / lambda : kSinkhornBalanced;
}
template double final_marginal_penalty(const ParameterLayout&, const float*);
template double final_marginal_penalty(const ParameterLayout&, const double*);

ModelConfig final_layer_config(const ParameterLayout& layout, const double* params) {
  ModelConfig c = layout.config();
  c.sinkhorn.marginal_penalty = final_marginal_penalty(layout, params);
  return c;
}

void ParameterLayout::add(const std::string& name, std::vector<int> shape, bool decays) {
  ParameterTensor t;
  t.name = name;
  t.size = 1;
  for (int s : shape) t.size *= static_cast<std::size_t>(s);
  t.shape = std::move(shape);
  t.offset = size_;
  t.decays = decays;
  size_ += t.size;
  tensors_.push_back(std::move(t));
}

EncoderOffsets ParameterLayout::add_encoder(const std::string& p) {
  const int C = config_.width, F = config_.mlp_ratio * config_.width;
  EncoderOffsets e;
  auto at = [&](const std::string& name, std::vector<int> shape, bool decays) {
    add(p + name, std::move(shape), decays);
    return tensors_.back().offset;
  };
  e.embed_w = at("embed.weight", {C, config_.d}, true);
  e.embed_b = at("embed.bias", {C}, false);
  for (int l = 0; l < config_.layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    EncoderOffsets::Block o{};
    o.ln1_w = at(b + "ln1.weight", {C}, false);
    o.ln1_b = at(b + "ln1.bias", {C}, false);
    o.qkv_w = at(b + "qkv.weight", {3 * C, C}, true);
    o.qkv_b = at(b + "qkv.bias", {3 * C}, false);
    o.proj_w = at(b + "proj.weight", {C, C}, true);
    o.proj_b = at(b + "proj.bias", {C}, false);
    o.ln2_w = at(b + "ln2.weight", {C}, false);
    o.ln2_b = at(b + "ln2.bias", {C}, false);
    o.fc_w = at(b + "fc.weight", {F, C}, true);
    o.fc_b = at(b + "fc.bias", {F}, false);
    o.fc_proj_w = at(b + "fc_proj.weight", {C, F}, true);
    o.fc_proj_b = at(b + "fc_proj.bias", {C}, false);
    e.blocks.push_back(o);
  }
  e.ln_f_w = at("ln_f.weight", {C}, false);
  e.ln_f_b = at("ln_f.bias", {C}, false);
  e.out_w = at("out.weight", {config_.k, C}, true);
  return e;
}

std::vector<double> init_parameters(const ParameterLayout& layout, std::uint64_t seed) {
  std::vector<double> p(layout.size(), 0.0);
  Random rng(seed);
  const double residual_scale = 1.0 / std::sqrt(2.0 * std::max(1, layout.config().layers));
  for (const ParameterTensor& t : layout.tensors()) {
    const bool is_layernorm_weight = t.name.find(".ln") != std::string::npos &&
                                     t.shape.size() == 1 && t.name.size() > 7 &&
                                     t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    if (is_layernorm_weight) {
      std::fill_n(p.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, 1.0);
    } else if (t.shape.size() == 2) {
      const bool residual = t.name.find(".proj.weight") != std::string::npos ||
                            t.name.find(".fc_proj.weight") != std::string::npos;
      const double sd =
          (residual ? residual_scale : 1.0) / std::sqrt(static_cast<double>(t.shape[1]));
      for (std::size_t i = 0; i < t.size; ++i) p[t.offset + i] = sd * rng.normal();
    }
  }
  if (layout.config().learn_marginal_penalty) {  // lambda = eps / rho; 1 (rho = eps) when not given
    const ModelConfig& c = layout.config();
    p[layout.relaxation()] = c.unbalanced() ? c.sinkhorn.epsilon / c.sinkhorn.marginal_penalty : 1.0;
  }
  return p;
}

// ---- workspace ----------------------------------------------------------------------------------
namespace {

// Assigns consecutive slices of `base` (or only counts them when base is null).
template <class T>
struct Bump {
  T* base;
  std::size_t used = 0;
  // Each tensor starts on a 64-byte boundary (memory itself is 64-byte aligned).
  static constexpr std::size_t kAlign = 64 / sizeof(T);
  T* take(std::size_t count) {
    T* p = base ? base + used : nullptr;
    used += (count + kAlign - 1) / kAlign * kAlign;
    return p;
  }
};

template <class T>
void lay_out_encoder(EncoderTensors<T>& e, Bump<T>& bump, const ModelConfig& c, int n) {
  const auto N = static_cast<std::size_t>(n), C = static_cast<std::size_t>(c.width),
             F = static_cast<std::size_t>(c.mlp_ratio * c.width),
             H = static_cast<std::size_t>(c.heads);
  e.h0 = bump.take(N * C);
  e.blocks.resize(static_cast<std::size_t>(c.layers));
  for (auto& b : e.blocks) {
    b.ln1 = bump.take(N * C);
    b.ln1_mean = bump.take(N);
    b.ln1_rstd = bump.take(N);
    b.qkv = bump.take(3 * N * C);
    b.att = bump.take(H * N * N);
    b.atty = bump.take(N * C);
    b.res1 = bump.take(N * C);
    b.ln2 = bump.take(N * C);
    b.ln2_mean = bump.take(N);
    b.ln2_rstd = bump.take(N);
    b.fch = bump.take(N * F);
    b.fch_gelu = bump.take(N * F);
    b.res2 = bump.take(N * C);
  }
  e.lnf = bump.take(N * C);
  e.lnf_mean = bump.take(N);
  e.lnf_rstd = bump.take(N);
  e.out = bump.take(N * static_cast<std::size_t>(c.k));
}

}  // namespace

template <class T>
std::size_t PairWorkspace<T>::lay_out(const ModelConfig& c, int n_, int m_, T* base) {
  Bump<T> bump{base};
  const auto nm = static_cast<std::size_t>(n_) * static_cast<std::size_t>(m_);
  const auto iters = static_cast<std::size_t>(c.implicit() ? 0 : c.sinkhorn_iters);
  lay_out_encoder(q_acts, bump, c, n_);
  lay_out_encoder(k_acts, bump, c, m_);
  cost = bump.take(nm);
  log_plan = bump.take(nm);
  row_weights = bump.take(iters * nm);
  col_weights = bump.take(iters * nm);
  u = bump.take(static_cast<std::size_t>(n_));
  v = bump.take(static_cast<std::size_t>(m_));
  potential_history = bump.take(c.learn_marginal_penalty ? iters * static_cast<std::size_t>(n_ + m_) : 0);
  const auto big = static_cast<std::size_t>(std::max(n_, m_));
  scratch = bump.take(big * big + static_cast<std::size_t>(n_ + 2 * m_));
  // The gradients last, contiguous, so that one fill zeroes them.
  lay_out_encoder(q_grads, bump, c, n_);
  lay_out_encoder(k_grads, bump, c, m_);
  dlog_plan = bump.take(nm);
  dcost = bump.take(nm);
  return bump.used;
}

template <class T>
std::size_t PairWorkspace<T>::numbers(const ModelConfig& c, int n, int m) {
  return PairWorkspace<T>().lay_out(c, n, m, nullptr);
}

template <class T>
void PairWorkspace<T>::prepare(const ModelConfig& c, int n_, int m_) {
  const std::size_t total = lay_out(c, n_, m_, nullptr);
  // The activations of one pair (n x m Sinkhorn weights per iteration, heads x n x n attention, n x
  // mlp_ratio width per block...) must fit in memory: refused before the allocation, naming the keys.
  if (memory.size() < total)
    check_memory(static_cast<long double>(total) * sizeof(T),
                 "the activations of a pair of " + std::to_string(n_) + " and " + std::to_string(m_) +
                     " tokens (task.n, task.m, model.sinkhorn_iters, model.heads, model.layers, model.width, "
                     "model.mlp_ratio)",
                 "", "task.n");
  if (memory.size() < total) memory.resize(total);
  lay_out(c, n_, m_, memory.data());
  n = n_;
  m = m_;
}

// ---- forward and backward of one encoder
// -----------------------------------------------------------
namespace {

template <class T>
void encoder_forward(const ModelConfig& c, const EncoderOffsets& o, const T* params, const T* x,
                     const T* log_a, int n, EncoderTensors<T>& a) {
  const int C = c.width, F = c.mlp_ratio * c.width, H = c.heads;
  const T* P = params;
  // h0 (n, C) = x (n, d) W_in^T + b_in
  nn::linear_forward(a.h0, x, P + o.embed_w, P + o.embed_b, n, c.d, C);
  const T* h = a.h0;
  for (std::size_t l = 0; l < o.blocks.size(); ++l) {
    const auto& w = o.blocks[l];
    auto& b = a.blocks[l];
    nn::layernorm_forward(b.ln1, b.ln1_mean, b.ln1_rstd, h, P + w.ln1_w, P + w.ln1_b, n, C);
    nn::linear_forward(b.qkv, b.ln1, P + w.qkv_w, P + w.qkv_b, n, C, 3 * C);
    nn::attention_forward(b.atty, b.att, b.qkv, log_a, n, C, H);
    // res1 = h + proj(atty)
    nn::linear_forward(b.res1, b.atty, P + w.proj_w, P + w.proj_b, n, C, C);
    for (int i = 0; i < n * C; ++i) b.res1[i] += h[i];
    nn::layernorm_forward(b.ln2, b.ln2_mean, b.ln2_rstd, b.res1, P + w.ln2_w, P + w.ln2_b, n, C);
    nn::linear_forward(b.fch, b.ln2, P + w.fc_w, P + w.fc_b, n, C, F);
    nn::gelu_forward(b.fch_gelu, b.fch, n * F);
    // res2 = res1 + fc_proj(gelu(fc(ln2)))
    nn::linear_forward(b.res2, b.fch_gelu, P + w.fc_proj_w, P + w.fc_proj_b, n, F, C);
    for (int i = 0; i < n * C; ++i) b.res2[i] += b.res1[i];
    h = b.res2;
  }
  nn::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, h, P + o.ln_f_w, P + o.ln_f_b, n, C);
  // out (n, k) = lnf W_out^T
  nn::linear_forward<T>(a.out, a.lnf, P + o.out_w, nullptr, n, C, c.k);
}

// g.out must hold d loss / d out; the other gradient tensors must be zero. grads += d loss / d
// params.
template <class T>
void encoder_backward(const ModelConfig& c, const EncoderOffsets& o, const T* params, T* grads,
                      const T* x, int n, const EncoderTensors<T>& a, EncoderTensors<T>& g,
                      T* scratch) {
  const int C = c.width, F = c.mlp_ratio * c.width, H = c.heads;
  const T* P = params;
  T* G = grads;
  const std::size_t L = o.blocks.size();
  const T* h_last = L > 0 ? a.blocks[L - 1].res2 : a.h0;
  T* dh_last = L > 0 ? g.blocks[L - 1].res2 : g.h0;
  // "out = lnf W_out^T"
  nn::linear_backward<T>(g.lnf, G + o.out_w, nullptr, g.out, a.lnf, P + o.out_w, n, C, c.k);
  // "lnf = LN_f(h)"
  nn::layernorm_backward(dh_last, G + o.ln_f_w, G + o.ln_f_b, g.lnf, h_last, P + o.ln_f_w,
                         a.lnf_mean, a.lnf_rstd, n, C);
  for (std::size_t l = L; l-- > 0;) {
    const auto& w = o.blocks[l];
    const auto& b = a.blocks[l];
    auto& d = g.blocks[l];
    const T* h = l > 0 ? a.blocks[l - 1].res2 : a.h0;
    T* dh = l > 0 ? g.blocks[l - 1].res2 : g.h0;
    // "res2 = res1 + fc_proj(fch_gelu)"
    for (int i = 0; i < n * C; ++i) d.res1[i] += d.res2[i];
    nn::linear_backward(d.fch_gelu, G + w.fc_proj_w, G + w.fc_proj_b, d.res2, b.fch_gelu,
                        P + w.fc_proj_w, n, F, C);
    // "fch_gelu = gelu(fch)"
    nn::gelu_backward(d.fch, b.fch, d.fch_gelu, n * F);
    // "fch = ln2 W_fc^T + b_fc"
    nn::linear_backward(d.ln2, G + w.fc_w, G + w.fc_b, d.fch, b.ln2, P + w.fc_w, n, C, F);
    // "ln2 = LN2(res1)"
    nn::layernorm_backward(d.res1, G + w.ln2_w, G + w.ln2_b, d.ln2, b.res1, P + w.ln2_w, b.ln2_mean,
                           b.ln2_rstd, n, C);
    // "res1 = h + proj(atty)"
    for (int i = 0; i < n * C; ++i) dh[i] += d.res1[i];
    nn::linear_backward(d.atty, G + w.proj_w, G + w.proj_b, d.res1, b.atty, P + w.proj_w, n, C, C);
    // "atty = attention(qkv)"
    nn::attention_backward(d.qkv, scratch, d.atty, b.qkv, b.att, n, C, H);
    // "qkv = ln1 W_qkv^T + b_qkv"
    nn::linear_backward(d.ln1, G + w.qkv_w, G + w.qkv_b, d.qkv, b.ln1, P + w.qkv_w, n, C, 3 * C);
    // "ln1 = LN1(h)"
    nn::layernorm_backward(dh, G + w.ln1_w, G + w.ln1_b, d.ln1, h, P + w.ln1_w, b.ln1_mean,
                           b.ln1_rstd, n, C);
  }
  // "h0 = x W_in^T + b_in" (no gradient for the data x)
  nn::linear_backward<T>(nullptr, G + o.embed_w, G + o.embed_b, g.h0, x, P + o.embed_w, n, c.d, C);
}

// The unrolled layer's damping tau = 1 / (1 + lambda) = rho / (rho + eps) (layers.hpp).
template <class T>
T damping(const ParameterLayout& layout, const T* params) {
  return static_cast<T>(1.0 / (1.0 + marginal_relaxation(layout, params)));
}

}  // namespace

template <class T>
T pair_forward(const ParameterLayout& layout, const T* params, const PairInput<T>& in,
               PairWorkspace<T>& ws) {
  const ModelConfig& c = layout.config();
  ws.prepare(c, in.n, in.m);
  encoder_forward(c, layout.q_encoder(), params, in.x, in.log_a, in.n, ws.q_acts);
  encoder_forward(c, layout.k_encoder(), params, in.y, in.log_b, in.m, ws.k_acts);
  nn::cost_forward(ws.cost, ws.q_acts.out, ws.k_acts.out, in.n, in.m, c.k);
  if (c.implicit()) {
    SinkhornOptions solve = c.sinkhorn;
    solve.marginal_penalty = final_marginal_penalty(layout, params);
    if (c.learn_marginal_penalty) ws.potentials.resize(static_cast<std::size_t>(in.n + in.m));
    ws.converged_layer = nn::sinkhorn_converged_forward(ws.log_plan, ws.cost, in.log_a, in.log_b, solve, in.n,
                                                        in.m, c.learn_marginal_penalty ? ws.potentials.data() : nullptr);
  } else {
    nn::sinkhorn_forward(ws.log_plan, ws.row_weights, ws.col_weights, ws.u, ws.v, ws.cost, in.log_a,
                         in.log_b, static_cast<T>(c.sinkhorn.epsilon), c.sinkhorn_iters, in.n,
                         in.m, damping(layout, params),
                         c.learn_marginal_penalty ? ws.potential_history : nullptr);
  }
  return in.target ? nn::kl_forward(in.target, ws.log_plan, in.n, in.m, c.relaxed()) : T(0);
}

template <class T>
void pair_backward(const ParameterLayout& layout, const T* params, T* grads, const PairInput<T>& in,
                   PairWorkspace<T>& ws, T loss_scale) {
  const ModelConfig& c = layout.config();
  // Zero every gradient tensor: they are laid out contiguously from q_grads.h0 to dcost's end.
  std::fill(ws.q_grads.h0, ws.dcost + static_cast<std::ptrdiff_t>(in.n) * in.m, T(0));
  nn::kl_backward(ws.dlog_plan, in.target, loss_scale, in.n, in.m,
                  c.relaxed() ? static_cast<const T*>(ws.log_plan) : nullptr);
  double dlambda = 0.0;  // d loss / d lambda (learned relaxation)
  const bool learned = c.learn_marginal_penalty;
  if (c.implicit()) {
    nn::sinkhorn_implicit_backward(ws.dcost, ws.dlog_plan, ws.log_plan, c.sinkhorn.epsilon, in.n, in.m,
                                   final_marginal_penalty(layout, params),
                                   learned ? &dlambda : nullptr, learned ? ws.potentials.data() : nullptr);
  } else {
    const T tau = damping(layout, params);
    T dtau = 0;
    nn::sinkhorn_backward(ws.dcost, ws.scratch, ws.dlog_plan, ws.row_weights, ws.col_weights,
                          static_cast<T>(c.sinkhorn.epsilon), c.sinkhorn_iters, in.n, in.m, tau,
                          learned ? &dtau : nullptr, learned ? ws.potential_history : nullptr);
    dlambda = -static_cast<double>(dtau) * static_cast<double>(tau) * static_cast<double>(tau);  // tau' = -tau^2
  }
  // The parameter is clamped at 0 in the forward: below 0 its gradient is 0 (a step can only
  // bring it back up; train.cpp keeps it >= 0 anyway).
  if (learned && params[layout.relaxation()] >= T(0)) grads[layout.relaxation()] += static_cast<T>(dlambda);
  nn::cost_backward(ws.q_grads.out, ws.k_grads.out, ws.dcost, ws.q_acts.out, ws.k_acts.out, in.n,
                    in.m, c.k);
  encoder_backward(c, layout.q_encoder(), params, grads, in.x, in.n, ws.q_acts, ws.q_grads,
                   ws.scratch);
  encoder_backward(c, layout.k_encoder(), params, grads, in.y, in.m, ws.k_acts, ws.k_grads,
                   ws.scratch);
}

template struct PairWorkspace<float>;
template struct PairWorkspace<double>;
template float pair_forward(const ParameterLayout&, const float*, const PairInput<float>&,
                            PairWorkspace<float>&);
template double pair_forward(const ParameterLayout&, const double*, const PairInput<double>&,
                             PairWorkspace<double>&);
template void pair_backward(const ParameterLayout&, const float*, float*, const PairInput<float>&,
                            PairWorkspace<float>&, float);
template void pair_backward(const ParameterLayout&, const double*, double*,
                            const PairInput<double>&, PairWorkspace<double>&, double);

// ---- inference
// ------------------------------------------------------------------------------------
SinkhornOptions couple_sinkhorn_options(const ModelConfig& config, const CoupleOptions& options) {
  SinkhornOptions solve = config.sinkhorn;
  solve.tol = options.tol;
  solve.max_iter = options.max_iter;
  return solve;
}

Coupling couple_measures(const SinkhornTransformer& model, const Points<double>& x, const Points<double>& y,
                         const Eigen::VectorXd& a, const Eigen::VectorXd& b, const CoupleOptions& options) {
  if (!options.unrolled && !(options.tol > 0.0)) throw InputError("", "tol", "must be positive");
  if (!options.unrolled && options.max_iter < 1) throw InputError("", "max_iter", "must be at least 1");
  // The encoders and the unrolled layer, whatever the model was trained with: an implicit model's
  // own forward would solve the cost to its sinkhorn_tol, which is neither the unrolled plan nor
  // (at options.tol) the converged one asked for. The layout does not depend on sinkhorn_grad.
  ModelConfig forward_config = model.config;
  forward_config.sinkhorn_grad = "unrolled";
  const ParameterLayout layout(forward_config);
  if (model.params.size() != layout.size())
    throw InputError("", "model",
                     "has " + std::to_string(model.params.size()) + " parameters, its layout " +
                         std::to_string(layout.size()));
  // A learned relaxation: the penalty the parameters hold (model.learn_marginal_penalty).
  const ModelConfig final_config = final_layer_config(layout, model.params.data());
  const auto d = static_cast<Eigen::Index>(model.config.d);
  if (x.cols() != d)
    throw InputError(
        "", "x", "has dimension " + std::to_string(x.cols()) + ", the model " + std::to_string(d));
  if (y.cols() != d)
    throw InputError(
        "", "y", "has dimension " + std::to_string(y.cols()) + ", the model " + std::to_string(d));
  // Errors name the argument: x, a (first measure), y, b (second).
  auto checked = [](const Points<double>& points, const Eigen::VectorXd& w, const char* point_key,
                    const char* weight_key) {
    try {
      return make_measure<double>(points, w);
    } catch (const InputError& e) {
      throw InputError(e.source(), e.key() == "weights" ? weight_key : point_key, e.detail());
    }
  };
  const Measure<double> mu = checked(x, a, "x", "a"), nu = checked(y, b, "y", "b");
  const Eigen::VectorXd log_a = mu.weights.array().log(), log_b = nu.weights.array().log();
  PairInput<double> in;
  in.x = mu.points.data();
  in.y = nu.points.data();
  in.log_a = log_a.data();
  in.log_b = log_b.data();
  in.n = static_cast<int>(x.rows());
  in.m = static_cast<int>(y.rows());
  PairWorkspace<double> ws;
  const AlignedVector<double> params(model.params.begin(), model.params.end());
  pair_forward(layout, params.data(), in, ws);
  // The final Sinkhorn layer divides the costs by epsilon: past max|c| / epsilon = 2^50 no entry
  // of the plan keeps a correct digit (check_cost_range, ot_solve.hpp). Non-finite costs are left
  // to the caller's check of the plan.
  double largest = 0.0;
  for (Eigen::Index i = 0; i < Eigen::Index(in.n) * in.m; ++i) largest = std::max(largest, std::abs(ws.cost[i]));
  if (std::isfinite(largest))
    check_epsilon_resolves(
        largest, model.config.sinkhorn.epsilon, "model",
        fmt::format("this model's costs on these points (up to |c| = {:g}; model.epsilon = {:g})",
                    largest, model.config.sinkhorn.epsilon));
  Coupling c;
  c.unrolled = options.unrolled;
  if (options.unrolled) {
    c.plan.resize(in.n, in.m);
    for (Eigen::Index i = 0; i < c.plan.size(); ++i) c.plan.data()[i] = std::exp(ws.log_plan[i]);
    c.iterations = model.config.sinkhorn_iters;
    if (final_config.unbalanced()) {  // against the fixed point's marginals a e^{-f/rho}, b e^{-g/rho} (ot.hpp)
      const double eps = final_config.sinkhorn.epsilon, rho = final_config.sinkhorn.marginal_penalty;
      const Eigen::Map<const Eigen::VectorXd> u(ws.u, in.n), v(ws.v, in.m);  // f / eps, g / eps
      const Eigen::VectorXd t = mu.weights.array() * (-eps * u.array() / rho).exp(),
                            s = nu.weights.array() * (-eps * v.array() / rho).exp();
      c.marginal_error = (c.plan.rowwise().sum() - t).cwiseAbs().sum() +
                         (c.plan.colwise().sum().transpose() - s).cwiseAbs().sum();
    } else {
      c.marginal_error = plan_marginal_error(c.plan, mu.weights, nu.weights);
    }
    return c;
  }
  // The converged plan of the same cost (ws.cost, what the unrolled layer divides by epsilon), by
  // the converged layer itself (layers.hpp), as the implicit model trains and the final
  // evaluation scores it.
  std::vector<double> log_plan(static_cast<std::size_t>(in.n) * static_cast<std::size_t>(in.m));
  const SinkhornOptions solve = couple_sinkhorn_options(final_config, options);
  const nn::ConvergedSinkhornStats stats = nn::sinkhorn_converged_forward(
      log_plan.data(), ws.cost, in.log_a, in.log_b, solve, in.n, in.m);
  c.plan = Eigen::Map<const RowMatrix>(log_plan.data(), in.n, in.m).array().exp();
  c.iterations = stats.iterations;
  c.converged = stats.converged;
  c.marginal_error = stats.marginal_error;
  return c;
}

ModelConfig final_layer_config(const SinkhornTransformer& model) {
  const ParameterLayout layout(model.config);
  if (model.params.size() != layout.size())
    throw InputError("", "model",
                     fmt::format("has {} parameters, its layout {}", model.params.size(), layout.size()));
  return final_layer_config(layout, model.params.data());
}

RowMatrix couple(const SinkhornTransformer& model, const Points<double>& x, const Points<double>& y,
                 const Eigen::VectorXd& a, const Eigen::VectorXd& b, const CoupleOptions& options) {
  return couple_measures(model, x, y, a, b, options).plan;
}

}  // namespace tokenflow
