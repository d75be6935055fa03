// Attention parameters: defaults, shape checks, time-dependent layers, the attention sink.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tokenflow/attention.hpp"
#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"

namespace tokenflow {

const std::vector<AttentionKindInfo>& attention_kinds() {
  static const std::vector<AttentionKindInfo> kinds{
      {AttentionKind::softmax, "softmax", "a_j exp(s_ij) / sum_j' a_j' exp(s_ij')", true, nullptr, true, nullptr},
      {AttentionKind::l2, "l2", "a_j exp(s_ij) / sum_j' a_j' exp(s_ij'), s_ij = -scale |Q x_i - K x_j|^2", true,
       nullptr, true, nullptr},
      {AttentionKind::sinkhorn, "sinkhorn", "pi_ij / a_i, pi the entropic OT plan between (a, a) for the cost -s_ij",
       true, "it is doubly stochastic over all tokens, so it has no causal form", true, nullptr},
      {AttentionKind::sigmoid, "sigmoid", "a_j sigma(s_ij + bias)", false, nullptr, false,
       "its weights a_j sigma(s_ij + bias) are not normalized, so N(m, S) does not stay Gaussian"},
      {AttentionKind::linear, "linear", "a_j s_ij", false, nullptr, true, nullptr},
  };
  return kinds;
}

const AttentionKindInfo& attention_kind_info(AttentionKind kind) {
  for (const AttentionKindInfo& info : attention_kinds())
    if (info.kind == kind) return info;
  throw std::logic_error("attention kind " + std::to_string(static_cast<int>(kind)) + " has no registry entry");
}

const char* to_string(AttentionKind kind) { return attention_kind_info(kind).name; }

AttentionKind attention_kind_from_string(const std::string& s) {
  for (const AttentionKindInfo& info : attention_kinds())
    if (s == info.name) return info.kind;
  throw InputError("", "attention.kind", "unknown attention kind '" + echo(s) + "'");
}

const std::vector<std::string>& attention_kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const AttentionKindInfo& info : attention_kinds()) v.emplace_back(info.name);
    return v;
  }();
  return names;
}

std::string closure_kind_list() {
  std::string list;
  for (const AttentionKindInfo& info : attention_kinds())
    if (info.gaussian_closure) list += (list.empty() ? "" : " | ") + std::string(info.name);
  return list;
}

std::vector<double> AttentionParams::layer_ends() const {
  std::vector<double> times;
  for (const auto& layer : layers)
    if (std::isfinite(layer.until)) times.push_back(layer.until);
  if (normalize == Normalize::mix && std::isfinite(mix_until)) {
    times.insert(std::upper_bound(times.begin(), times.end(), mix_until), mix_until);
  }
  return times;
}

const AttentionLayer& AttentionParams::layer_at(double t) const {
  for (const auto& layer : layers)
    if (t < layer.until) return layer;
  return layers.back();
}

double AttentionParams::sigmoid_bias(Eigen::Index n) const {
  return bias ? *bias : -std::log(static_cast<double>(n));
}

namespace {

std::string shape(const Eigen::MatrixXd& m) {
  return std::to_string(m.rows()) + " x " + std::to_string(m.cols());
}

// Splits the given (or default) matrices of one layer into head blocks, checking every shape.
// `where` is the config prefix for messages ("attention" or "layers[2]").
std::vector<HeadBlocks> split_heads(const std::string& where, int heads, int d,
                                    const std::optional<Eigen::MatrixXd>& Qin,
                                    const std::optional<Eigen::MatrixXd>& Kin,
                                    const std::optional<Eigen::MatrixXd>& Vin,
                                    const std::optional<Eigen::MatrixXd>& Win, int& k, int& kv) {
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(d, d);
  auto require = [&](const std::optional<Eigen::MatrixXd>& m, const char* name) -> Eigen::MatrixXd {
    if (m) return *m;
    if (heads == 1) return I;
    throw InputError("", where + "." + name, std::string("is required when heads > 1 (") + name +
                                                 " stacks one k x d block per head)");
  };
  const Eigen::MatrixXd Q = require(Qin, "Q"), K = require(Kin, "K");
  const Eigen::MatrixXd V = Vin ? *Vin : I;
  const Eigen::MatrixXd W = Win ? *Win : I;
  auto check_stacked = [&](const Eigen::MatrixXd& m, const char* name) {
    if (m.cols() != d)
      throw InputError("", where + "." + name, "is " + shape(m) + " but the tokens have dimension d = " +
                                                   std::to_string(d) + " (expected " + std::to_string(d) +
                                                   " columns)");
    if (m.rows() % heads != 0)
      throw InputError("", where + "." + name, "has " + std::to_string(m.rows()) +
                                                   " rows, not a multiple of heads = " + std::to_string(heads));
  };
  check_stacked(Q, "Q");
  check_stacked(K, "K");
  check_stacked(V, "V");
  if (K.rows() != Q.rows())
    throw InputError("", where + ".K", "is " + shape(K) + " but Q is " + shape(Q) + "; they must match");
  k = static_cast<int>(Q.rows()) / heads;
  kv = static_cast<int>(V.rows()) / heads;
  if (W.rows() != d || W.cols() != V.rows())
    throw InputError("", where + ".W", "is " + shape(W) + "; expected d x (heads kv) = " +
                                           std::to_string(d) + " x " + std::to_string(V.rows()) +
                                           (Win ? "" : " (W defaults to I_d, so give W when V has other than d rows)"));
  std::vector<HeadBlocks> blocks(heads);
  for (int h = 0; h < heads; ++h) {
    blocks[h].Q = Q.middleRows(h * k, k);
    blocks[h].K = K.middleRows(h * k, k);
    blocks[h].V = V.middleRows(h * kv, kv);
    blocks[h].W = W.middleCols(h * kv, kv);
  }
  return blocks;
}

}  // namespace

AttentionParams make_attention(const AttentionSpec& spec, int d) {
  AttentionParams p;
  p.kind = attention_kind_from_string(spec.kind);
  if (spec.heads < 1) throw InputError("", "attention.heads", "must be at least 1");
  if (d < 1) throw InputError("", "init", "the tokens must have dimension d >= 1");
  p.heads = spec.heads;
  p.dim = d;
  if (spec.mask == "none") p.mask = Mask::none;
  else if (spec.mask == "causal") p.mask = Mask::causal;
  else throw InputError("", "attention.mask", "unknown mask '" + spec.mask + "'; one of: none, causal");
  if (spec.normalize == "none") p.normalize = Normalize::none;
  else if (spec.normalize == "sphere") p.normalize = Normalize::sphere;
  else if (spec.normalize == "pre") p.normalize = Normalize::pre;
  else if (spec.normalize == "peri") p.normalize = Normalize::peri;
  else if (spec.normalize == "ngpt") p.normalize = Normalize::ngpt;
  else if (spec.normalize == "mix")
    p.normalize = Normalize::mix;
  else
    throw InputError(
        "", "attention.normalize",
        "unknown value '" + spec.normalize + "'; one of: none, sphere, pre, peri, ngpt, mix");
  if (p.normalize == Normalize::mix) {
    if (!spec.mix_until)
      throw InputError(
          "", "attention.mix_until",
          "normalize = \"mix\" needs mix_until, the time at which Post-LN gives way to Pre-LN");
    if (!(std::isfinite(*spec.mix_until) && *spec.mix_until >= 0.0))
      throw InputError("", "attention.mix_until", "must be finite and >= 0");
    p.mix_until = *spec.mix_until;
  } else if (spec.mix_until) {
    throw InputError("", "attention.mix_until", "applies to normalize = \"mix\" only");
  }
  if (!(spec.sink >= 0.0 && spec.sink < 1.0)) throw InputError("", "attention.sink", "must lie in [0, 1)");
  p.sink = spec.sink;
  if (!(spec.epsilon > 0.0)) throw InputError("", "attention.epsilon", "must be positive");
  p.epsilon = spec.epsilon;
  if (!(spec.sinkhorn_tol > 0.0))
    throw InputError("", "attention.sinkhorn_tol", "must be positive");
  if (spec.sinkhorn_max_iter < 1)
    throw InputError("", "attention.sinkhorn_max_iter", "must be at least 1");
  p.sinkhorn_tol = spec.sinkhorn_tol;
  p.sinkhorn_max_iter = spec.sinkhorn_max_iter;
  p.bias = spec.bias;
  if (const AttentionKindInfo& info = attention_kind_info(p.kind); p.mask == Mask::causal && info.no_causal_why)
    throw InputError("", "attention.mask", std::string(info.name) + " attention takes no causal mask: " +
                                               info.no_causal_why + " (use mask = \"none\")");

  int k = 0, kv = 0;
  AttentionLayer base;  // [attention]: valid after the last [[layers]] entry
  base.heads = split_heads("attention", p.heads, d, spec.Q, spec.K, spec.V, spec.W, k, kv);
  double previous = 0.0;
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    const auto& in = spec.layers[l];
    const std::string where = "layers[" + std::to_string(l) + "]";
    if (!(in.until > previous))
      throw InputError("", where + ".until",
                       fmt::format("must be larger than the previous layer's until ({:g})", previous));
    previous = in.until;
    int lk = 0, lkv = 0;
    AttentionLayer layer;
    layer.until = in.until;
    layer.heads = split_heads(where, p.heads, d, in.Q ? in.Q : spec.Q, in.K ? in.K : spec.K,
                              in.V ? in.V : spec.V, in.W ? in.W : spec.W, lk, lkv);
    if (lk != k || lkv != kv)
      throw InputError("", where, "changes the head dimensions (k, kv) from (" + std::to_string(k) + ", " +
                                      std::to_string(kv) + ") to (" + std::to_string(lk) + ", " +
                                      std::to_string(lkv) + ")");
    p.layers.push_back(std::move(layer));
  }
  p.layers.push_back(std::move(base));
  p.key_dim = k;
  p.value_dim = kv;
  p.scale = spec.scale ? *spec.scale : 1.0 / std::sqrt(static_cast<double>(k));
  if (!std::isfinite(p.scale)) throw InputError("", "attention.scale", "must be finite");
  if (spec.summation == "dense") p.summation = Summation::dense;
  else if (spec.summation == "fast") p.summation = Summation::fast;
  else if (spec.summation == "auto") p.summation = Summation::automatic;
  else throw InputError("", "attention.summation", "unknown value '" + spec.summation + "'; one of: dense, fast, auto");
  if (!(spec.summation_tol > 0.0 && spec.summation_tol < 1.0))
    throw InputError("", "attention.summation_tol", fmt::format("must lie in (0, 1), not {:g}", spec.summation_tol));
  p.summation_tol = spec.summation_tol;
  if (p.summation == Summation::fast) {
    const std::string why = fast_summation_obstacle(p);
    if (!why.empty())
      throw InputError("", "attention.summation",
                       "\"fast\" " + why + "; use summation = \"dense\" (or \"auto\", which falls back to it)");
  }
  return p;
}

std::string fast_summation_obstacle(const AttentionParams& p) {
  if (p.kind != AttentionKind::softmax && p.kind != AttentionKind::l2 &&
      p.kind != AttentionKind::sinkhorn)
    return std::string("sums softmax, l2 and sinkhorn attention only, not ") + to_string(p.kind);
  if (p.mask == Mask::causal) return "has no causal mask (every query sees every key)";
  if (p.key_dim > 3)
    return fmt::format("needs heads of key dimension k <= 3 (a Gauss transform in R^k), not k = {}", p.key_dim);
  if (p.kind == AttentionKind::sinkhorn && !(p.sinkhorn_tol >= kGridSinkhornMinTol))
    return fmt::format(
        "needs attention.sinkhorn_tol >= {:g} for sinkhorn attention (the grid's certified "
        "soft-min error counts in Sinkhorn's marginal error), not {:g}",
        kGridSinkhornMinTol, p.sinkhorn_tol);
  if (p.kind == AttentionKind::l2 && !(p.scale > 0.0))
    return fmt::format("needs attention.scale > 0 for l2 attention (exp(-scale |q - k|^2) is a Gaussian), not {:g}",
                       p.scale);
  return "";
}

template <class T>
Eigen::Index sink_index(const Measure<T>& mu) {
  if (!mu.has_positions()) return 0;
  Eigen::Index best = 0;
  for (Eigen::Index i = 1; i < mu.n(); ++i)
    if (mu.positions[i] < mu.positions[best]) best = i;
  return best;
}

template <class T>
Vec<T> attention_weights(const Measure<T>& mu, double sink) {
  if (sink <= 0.0 || mu.n() == 1) return mu.weights;
  const Eigen::Index s = sink_index(mu);
  const double rest = 1.0 - static_cast<double>(mu.weights[s]);
  Vec<T> a(mu.n());
  for (Eigen::Index j = 0; j < mu.n(); ++j)
    a[j] = static_cast<T>(j == s ? sink : (1.0 - sink) * static_cast<double>(mu.weights[j]) / rest);
  return a;
}

template Eigen::Index sink_index<float>(const Measure<float>&);
template Eigen::Index sink_index<double>(const Measure<double>&);
template Vec<float> attention_weights<float>(const Measure<float>&, double);
template Vec<double> attention_weights<double>(const Measure<double>&, double);

}  // namespace tokenflow
