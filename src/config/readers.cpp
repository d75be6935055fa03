// The library's types read from a Config: the keys of docs/design.md section 2.
#include "tokenflow/readers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/memory_budget.hpp"

namespace tokenflow {

const std::vector<KeySpec>& simulation_schema() {
  using K = KeyType;
  static const std::vector<KeySpec> keys{
      {"dtype", K::string, "\"f64\"", {}, {"f64", "f32"}, "", "arithmetic of the particle flow"},
      {"seed", K::integer, "0", at_least(0), {}, "", "seed of the sampled initial measure"},
      {"init.kind", K::string, "\"gaussian\"", {}, {"gaussian", "sphere", "file"}, "", "the initial measure"},
      {"init.n", K::integer, "4096", at_least(1), {}, "tokens", "number of tokens (gaussian, sphere)"},
      {"init.mean", K::vector, "[0, 0]", {}, {}, "", "gaussian: the mean m0 (its length is d)"},
      {"init.cov", K::matrix, "I", {}, {}, "", "gaussian: the covariance S0 (symmetric positive semi-definite)"},
      {"init.d", K::integer, "3", at_least(1), {}, "", "sphere: tokens uniform on S^{d-1}"},
      {"init.path", K::path, "", {}, {}, "", "file: the tokens, an n x d .npy (required for kind = file)"},
      {"init.weights", K::path, "uniform", {}, {}, "", "file: the tokens' weights, a .npy of n positive numbers"},
      {"init.positions", K::path, "i / n", {}, {}, "",
       "file: the tokens' positions (causal masks), a .npy of n values in [0, 1]"},
      {"attention.kind", K::string, "\"softmax\"", {}, attention_kind_names(), "", "the attention"},
      {"attention.heads", K::integer, "1", at_least(1), {}, "", "number of heads"},
      {"attention.Q", K::matrix, "I", {}, {}, "", "queries: (heads k) x d, rows inline or the path of a .npy file"},
      {"attention.K", K::matrix, "I", {}, {}, "", "keys: (heads k) x d, rows inline or the path of a .npy file"},
      {"attention.V", K::matrix, "I", {}, {}, "", "values: (heads kv) x d, rows inline or the path of a .npy file"},
      {"attention.W", K::matrix, "I", {}, {}, "", "output: d x (heads kv), rows inline or the path of a .npy file"},
      {"attention.scale", K::number, "1/sqrt(k)", {}, {}, "", "the inverse temperature beta of the scores"},
      {"attention.bias", K::number, "-ln n", {}, {}, "", "sigmoid: the bias of the scores"},
      {"attention.epsilon", K::number, "1.0", positive(), {}, "", "sinkhorn: the entropic regularization"},
      {"attention.mask", K::string, "\"none\"", {}, {"none", "causal"}, "", "causal: token i attends to j <= i"},
      {"attention.sink", K::number, "0.0", {0, 1, false, true}, {}, "", "causal: weight of the attention sink (token 0)"},
      {"attention.normalize", K::string, "\"none\"", {}, {"none", "sphere", "pre", "peri", "ngpt", "mix"}, "",
       "sphere (Post-LN), ngpt: dynamics on the unit sphere; pre, peri: Pre-LN, Peri-LN (attention on x / |x|); "
       "mix (Mix-LN): sphere before attention.mix_until, pre after"},
      {"attention.mix_until", K::number, "", at_least(0.0), {}, "time",
       "normalize = mix (required there): the time at which Post-LN gives way to Pre-LN"},
      {"attention.summation", K::string, "\"auto\"", {}, {"dense", "fast", "auto"}, "",
       "softmax, l2, sinkhorn: sum over every pair, or in O(n) on a Taylor grid (heads with k <= 3, no mask; "
       "sinkhorn: sinkhorn_tol >= 1e-9; docs/fast-summation.md); auto: the grid where it is faster"},
      {"attention.summation_tol", K::number, "1e-6", {0, 1, true, true}, {}, "",
       "summation = fast: per token and head, |error| <= tol sum_j P_ij |V x_j|"},
      {"attention.sinkhorn_tol", K::number, "1e-12", positive(), {}, "", "sinkhorn attention: tolerance of the inner solve"},
      {"attention.sinkhorn_max_iter", K::integer, std::to_string(kInnerSinkhornMaxIter), at_least(1), {}, "iterations",
       "sinkhorn attention: iteration budget of the inner solve"},
      {"layers.until", K::number, "", positive(), {}, "time",
       "[[layers]]: this entry's Q, K, V, W hold on [previous until, until); [attention]'s after the last"},
      {"layers.Q", K::matrix, "attention.Q", {}, {}, "", "[[layers]]: queries of this time interval (inline or a .npy file)"},
      {"layers.K", K::matrix, "attention.K", {}, {}, "", "[[layers]]: keys of this time interval (inline or a .npy file)"},
      {"layers.V", K::matrix, "attention.V", {}, {}, "", "[[layers]]: values of this time interval (inline or a .npy file)"},
      {"layers.W", K::matrix, "attention.W", {}, {}, "", "[[layers]]: output of this time interval (inline or a .npy file)"},
      {"attention.layers.until", K::number, "", positive(), {}, "", "the same as [[layers]]", true},
      {"attention.layers.Q", K::matrix, "", {}, {}, "", "", true},
      {"attention.layers.K", K::matrix, "", {}, {}, "", "", true},
      {"attention.layers.V", K::matrix, "", {}, {}, "", "", true},
      {"attention.layers.W", K::matrix, "", {}, {}, "", "", true},
      {"run.T", K::number, "1.0", at_least(0), {}, "time", "final time"},
      {"run.dt", K::number, "0.01", positive(), {}, "time", "time step (dopri5: the first trial step)"},
      {"run.integrator", K::string, "\"rk4\"", {}, {"euler", "rk4", "dopri5"}, "", "the time integrator"},
      {"run.save_every", K::integer, "0", closed(0, 2147483647), {}, "steps",
       "trajectory.npy holds every k-th step (0: final positions only)"},
      {"run.blowup", K::number, "1e8", {0, kNoLimit, true, false}, {}, "", "status blowup once max |x_i| exceeds this"},
      {"run.tol", K::number, "1e-10", positive(), {}, "", "dopri5: atol = rtol"},
      {"run.rank_tol", K::number, "1e-3", positive(), {}, "", "numerical rank: eigenvalues above rank_tol * largest"},
      {"run.checkpoint_every", K::integer, "0", closed(0, 2147483647), {}, "steps",
       "checkpoint.bin every k steps (0: never; continue with tokenflow resume)"},
      {"run.cluster_tol", K::number, "1e-2", positive(), {}, "",
       "tokens joined by a chain of steps shorter than this (times the RMS radius, see cluster_scale) are one "
       "cluster"},
      {"run.cluster_scale", K::string, "\"spread\"", {}, {"spread", "absolute"}, "",
       "cluster_tol's unit: spread (the cloud's RMS radius about its mean: the count does not depend on the "
       "cloud's scale) or absolute (the coordinates' units)"},
      {"run.sphere_step", K::string, "\"projected\"", {}, {"projected", "retraction"}, "",
       "attention.normalize = sphere: projected (tangent velocity, then normalize) or retraction "
       "(x <- normalize(x + dt Gamma), as Geshkovski et al.'s code)"}};
  return keys;
}

const std::vector<std::string>& simulation_keys() {
  static const std::vector<std::string> keys = key_names(simulation_schema());
  return keys;
}

namespace {

// The spec of a simulate key (the schema above lists it).
const KeySpec& spec(const std::string& key) {
  for (const KeySpec& k : simulation_schema())
    if (k.key == key) return k;
  throw std::logic_error("no simulate key " + key);
}

// A key without a fixed default (its default depends on others): absent, or within its bounds.
std::optional<double> optional_number(const Config& c, const std::string& key) {
  if (!c.has(key)) return std::nullopt;
  return read_number(c, spec(key), 0.0);
}

// Refuses a run whose arrays cannot be held in this machine's memory, before they are allocated
// (init.n = 10^12 allocated until the kernel killed the process). A lower bound: the tokens
// (n x d) about six times over (the initial and current points, the integrator's stages) and,
// with run.save_every, every saved frame of a fixed-step run. The error names the keys.
// The head matrices of the attention or of one of its layers (AttentionSpec or AttentionSpec::Layer):
// the keys prefix + "Q", "K", "V", "W", each absent, an inline array or a .npy path.
template <class Heads>
void read_head_matrices(const Config& c, const std::string& prefix, Heads& heads) {
  heads.Q = c.get_matrix(prefix + "Q");
  heads.K = c.get_matrix(prefix + "K");
  heads.V = c.get_matrix(prefix + "V");
  heads.W = c.get_matrix(prefix + "W");
}

void check_particles_fit(const SimulationConfig& s, const Config& c, long double n, long double d) {
  const long double item = s.dtype == Dtype::f32 ? 4 : 8;
  long double frames = 0;
  if (s.run.save_every > 0 && s.run.integrator != Integrator::dopri5)
    frames = std::floor(std::ceil(static_cast<long double>(s.run.T) / s.run.dt) / s.run.save_every) + 1;
  const long double tokens = item * n * d * 6, saved = item * n * d * frames;
  if (fits_in_memory(tokens + saved)) return;
  const std::string d_key = s.init.kind == "sphere" ? "init.d" : s.init.kind == "file" ? "init.path" : "init.mean";
  const std::string key = saved > tokens ? "run.save_every" : d > n ? d_key : "init.n";
  char size[64];
  std::snprintf(size, sizeof size, "%.0Lf x %.0Lf", n, d);
  check_memory(tokens + saved,
               std::string("the run (") + size + " tokens from init.n and " + d_key +
                   (frames > 0 ? ", " + format_bytes(static_cast<double>(saved)) +
                                     " of frames from run.T / run.dt / run.save_every"
                               : std::string()) +
                   ")",
               c.source_of(key), key);
}

}  // namespace

SimulationConfig read_simulation_config(const Config& c, const std::vector<std::string>& extra_keys) {
  if (extra_keys.empty()) {
    c.check_keys(simulation_keys());
  } else {
    std::vector<std::string> keys = simulation_keys();
    keys.insert(keys.end(), extra_keys.begin(), extra_keys.end());
    c.check_keys(keys);
  }
  SimulationConfig s;
  // Every scalar key through its schema entry (type, choices, range: one message a kind), with the
  // struct's own default as the value of an absent key.
  auto read_key = [&](const char* key, FieldRef field) { read_field(c, spec(key), field); };
  const std::string dtype = read_string(c, spec("dtype"), s.dtype == Dtype::f32 ? "f32" : "f64");
  s.dtype = dtype == "f32" ? Dtype::f32 : Dtype::f64;
  read_key("seed", &s.seed);

  InitSpec& init = s.init;
  read_key("init.kind", &init.kind);
  read_key("init.n", &init.n);
  init.mean = c.get_vector("init.mean").value_or(Eigen::VectorXd());
  init.cov = c.get_matrix("init.cov").value_or(Eigen::MatrixXd());
  if (init.kind == "gaussian") {
    // The covariance is d x d (the identity by default, and its Cholesky factor): a long init.mean
    // must not allocate beyond the machine's memory.
    const long double d = std::max<long double>({2, static_cast<long double>(init.mean.size()),
                                                 static_cast<long double>(init.cov.rows())});
    check_memory(16 * d * d,
                 "the covariance of a Gaussian of dimension " + std::to_string(static_cast<long>(d)) +
                     " (and its Cholesky factor)",
                 c.source_of("init.mean"), "init.mean");
    if (init.mean.size() == 0) init.mean = Eigen::VectorXd::Zero(init.cov.size() ? init.cov.rows() : 2);
    if (init.cov.size() == 0) init.cov = Eigen::MatrixXd::Identity(init.mean.size(), init.mean.size());
  }
  read_key("init.d", &init.d);
  auto path_key = [&](const std::string& key) {
    const std::string p = read_string(c, spec(key), "");
    return p.empty() ? p : c.resolve_path(p);
  };
  init.path = path_key("init.path");
  init.weights = path_key("init.weights");
  init.positions = path_key("init.positions");
  if (init.kind == "file" && init.path.empty())
    throw InputError(c.source(), "init.path", "is required when init.kind = \"file\"");

  AttentionSpec& a = s.attention;
  read_key("attention.kind", &a.kind);
  read_key("attention.heads", &a.heads);
  read_head_matrices(c, "attention.", a);
  a.scale = optional_number(c, "attention.scale");
  a.bias = optional_number(c, "attention.bias");
  read_key("attention.epsilon", &a.epsilon);
  read_key("attention.sinkhorn_tol", &a.sinkhorn_tol);
  read_key("attention.sinkhorn_max_iter", &a.sinkhorn_max_iter);
  read_key("attention.mask", &a.mask);
  read_key("attention.sink", &a.sink);
  read_key("attention.normalize", &a.normalize);
  a.mix_until = optional_number(c, "attention.mix_until");
  read_key("attention.summation", &a.summation);
  read_key("attention.summation_tol", &a.summation_tol);
  for (const std::string table : {"layers", "attention.layers"}) {
    for (const Config& layer : c.get_tables(table)) {
      AttentionSpec::Layer l;
      if (!layer.has("until"))
        throw InputError(c.source_of(table), table + ".until", "every [[" + table + "]] entry needs until = t");
      KeySpec until = spec("layers.until");
      until.key = "until";  // read from the entry's own table
      l.until = read_number(layer, until, 1.0);
      read_head_matrices(layer, "", l);
      a.layers.push_back(std::move(l));
    }
  }

  RunSpec& r = s.run;
  read_key("run.T", &r.T);
  read_key("run.dt", &r.dt);
  const std::string integrator = read_string(c, spec("run.integrator"), to_string(r.integrator));
  r.integrator = integrator == "euler" ? Integrator::euler : integrator == "rk4" ? Integrator::rk4 : Integrator::dopri5;
  read_key("run.save_every", &r.save_every);
  read_key("run.blowup", &r.blowup);
  read_key("run.tol", &r.tol);
  read_key("run.rank_tol", &r.rank_tol);
  read_key("run.checkpoint_every", &r.checkpoint_every);
  read_key("run.cluster_tol", &r.cluster_tol);
  r.cluster_scale = read_string(c, spec("run.cluster_scale"), to_string(r.cluster_scale)) == "absolute"
                        ? ClusterScale::absolute
                        : ClusterScale::spread;
  r.sphere_step = read_string(c, spec("run.sphere_step"), to_string(r.sphere_step)) == "retraction"
                      ? SphereStep::retraction
                      : SphereStep::projected;
  return s;
}

Measure<double> make_initial_measure(const SimulationConfig& s, const Config& c) {
  const InitSpec& init = s.init;
  Points<double> x;
  Eigen::VectorXd weights, positions;
  try {
    if (init.kind == "gaussian") {
      check_particles_fit(s, c, init.n, std::max<long double>(init.mean.size(), 1));
      x = sample_gaussian(init.n, init.mean, init.cov, s.seed);
    } else if (init.kind == "sphere") {
      check_particles_fit(s, c, init.n, init.d);
      x = sample_sphere(init.n, init.d, s.seed);
    } else {
      x = read_points(init.path, "init.path");
      check_particles_fit(s, c, x.rows(), x.cols());
      if (!init.weights.empty()) weights = read_vector(init.weights, "init.weights", x.rows());
      if (!init.positions.empty()) positions = read_vector(init.positions, "init.positions", x.rows());
    }
    return make_measure<double>(std::move(x), std::move(weights), std::move(positions));
  } catch (const InputError& e) {
    // Keys from the measure checks ("weights") are named as the config keys that gave them.
    const std::string key = e.key() == "points" ? "init.path" : e.key() == "weights" ? "init.weights"
                            : e.key() == "positions" ? "init.positions" : e.key();
    throw InputError(e.source().empty() ? c.source_of(key) : e.source(), key, e.detail());
  }
}

AttentionParams read_attention(const SimulationConfig& s, const Config& c, int d) {
  // Each head holds d x d matrices (Q, K, V and W, and their defaults, the identity): a d from a
  // file of one long row, or a large init.d, must not allocate them beyond the machine's memory.
  const long double layers = 1 + static_cast<long double>(s.attention.layers.size());
  const long double matrices = 8.0L * 4 * s.attention.heads * layers * d * d;
  if (!fits_in_memory(matrices)) {
    const std::string key = s.attention.heads > 1 ? "attention.heads" : s.init.kind == "sphere" ? "init.d" : "init";
    check_memory(matrices,
                 "the attention's matrices (attention.heads = " + std::to_string(s.attention.heads) +
                     " heads of d x d with d = " + std::to_string(d) + ")",
                 c.source_of(key), key);
  }
  try {
    return make_attention(s.attention, d);
  } catch (const InputError& e) {
    std::string key = e.key();
    // make_attention names layers "layers[i].Q"; the source of that key is the table's.
    const std::string lookup = key.rfind("layers[", 0) == 0 ? "layers" : key;
    throw e.located(c.source_of(lookup));
  }
}

}  // namespace tokenflow
