// The attention field's driver: per head, project the tokens into the fused kernel's layout
// (queries q = scale Q x for inner-product kinds, keys transposed and packed by tile, values), run
// the kernel of sweep.hpp (its symmetric variant when K_h = Q_h, no mask and k >= 16), and add
// W_h y to Gamma in double as each query tile finishes. Under a causal mask the tokens are sorted by
// position once, in the constructor, so that every query sees a prefix of the keys.
// Memory O(n (k + kv + d)); never an n x n matrix. Every buffer is sized in the constructor:
// velocity() allocates nothing (tests/cpp/alloc/test_attention_alloc.cpp counts), except for the
// Sinkhorn kind, whose potentials come from the OT loop (src/ot, unchanged).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "evaluators.hpp"
#include "exact_row_limit.hpp"
#include "../kernel/sweep.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/distributed.hpp"
#include "tokenflow/fast_gauss.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/ot_solve.hpp"
#include "tokenflow/parallel.hpp"

namespace tokenflow {

namespace {

using detail::SweepScratch;
using detail::SweepTokens;

// Products of a few rows by a small matrix (the projections Q x, K x, V x and W y) go through the
// kernel's logit register block: kRowBlock rows at a time, the matrix padded to whole blocks of
// columns (zeros), so every row is one register-blocked pass.
template <class S>
constexpr int kRowBlock = detail::SweepShape<S>::kLogitRows;

template <class S>
int padded_cols(int cols) {
  constexpr int w = detail::SweepShape<S>::kLogitVectors * detail::SweepShape<S>::kLanes;
  return (cols + w - 1) / w * w;
}

// out (kRowBlock x cols_pad, row-major) = x (kRowBlock x d, stride ldx) M (d x cols_pad, row-major).
// Each entry's sum runs over e in order.
template <class S>
inline void multiply_rows(const S* x, int ldx, int d, const S* M, int cols_pad, S* out) {
  detail::logit_block<S, detail::LogitForm::inner_product, kRowBlock<S>, detail::SweepShape<S>::kLogitVectors>(
      x, ldx, d, M, cols_pad, cols_pad, out, cols_pad);
}

using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// M (r x c) into a row-major r x padded_cols(c) matrix in precision S, zeros on the right.
template <class S>
Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> pad_columns(const Eigen::MatrixXd& M) {
  Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> out =
      Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>::Zero(M.rows(), padded_cols<S>(static_cast<int>(M.cols())));
  out.leftCols(M.cols()) = M.cast<S>();
  return out;
}

// The matrices of one head, transposed and column-padded, in the precision S: q (d x k, scale
// folded in for inner-product kinds), k (d x k), v (d x kv); w (kv x d) in double.
template <class S>
struct HeadMatrices {
  Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> q, k, v;
  RowMatrixD w;
};

template <class S>
HeadMatrices<S> head_matrices(const AttentionParams& p, const HeadBlocks& b) {
  const double q_scale = p.kind == AttentionKind::l2 ? 1.0 : p.scale;
  HeadMatrices<S> m;
  m.q = pad_columns<S>(q_scale * b.Q.transpose());
  m.k = pad_columns<S>(b.K.transpose());
  m.v = pad_columns<S>(b.V.transpose());
  m.w = pad_columns<double>(b.W.transpose());
  return m;
}

// Threads for a field over n tokens: n^2 pairs per head, each pass ending in a barrier; a small
// flow (a few dozen tokens) runs thousands of steps whose passes take microseconds, so it runs on
// one thread, with the threshold of the transport passes (tokenflow/parallel.hpp).
int thread_count(Eigen::Index n) {
  return static_cast<double>(n) * static_cast<double>(n) >= static_cast<double>(parallel_min_pairs())
             ? std::max(1, omp_get_max_threads())
             : 1;
}

// The symmetric kernel computes each pair's logit once: when the logits are symmetric (K_h = Q_h, no
// mask) and the key dimension is large enough for the saved logit products to outweigh its extra
// bookkeeping (bench: measured at k = 2, 3, 16, 64).
constexpr int kSymmetricMinKeyDim = 16;
bool uses_symmetric_kernel(const AttentionParams& p, const HeadBlocks& b) {
  return p.mask == Mask::none && b.Q == b.K && b.Q.rows() >= kSymmetricMinKeyDim;
}

// The kernel's token buffers for one head (precision S), sized once for n tokens in R^d and
// `threads` threads.
template <class S>
struct TokenBuffers {
  Eigen::Index n = 0;
  int d = 0, k = 0, kv = 0, threads = 1;
  std::vector<S> q, kt, v, a;
  std::vector<S> rows_in, rows_out;  // per thread: kRowBlock gathered tokens, their products

  TokenBuffers(Eigen::Index n_, int d_, int k_, int kv_, int threads_)
      : n(n_), d(d_), k(k_), kv(kv_), threads(threads_) {
    const Eigen::Index ldk = detail::key_stride<S>(n);
    q.assign(static_cast<std::size_t>(detail::padded_queries<S>(n) * k), S(0));
    kt.assign(static_cast<std::size_t>(k * ldk), S(0));
    v.assign(static_cast<std::size_t>(ldk * detail::value_stride<S>(kv)), S(0));
    a.assign(static_cast<std::size_t>(ldk), S(0));
    rows_in.assign(static_cast<std::size_t>(threads * kRowBlock<S> * d), S(0));
    rows_out.assign(static_cast<std::size_t>(threads * kRowBlock<S> * padded_cols<S>(std::max(k, kv))), S(0));
  }

  // Projects x (n x d, row-major) with the head's matrices; sweep position r holds token row(r).
  // One parallel pass over blocks of kRowBlock tokens.
  template <class Row>
  void project(const S* x, const Row& row, const HeadMatrices<S>& m) {
    constexpr int R = kRowBlock<S>;
    const Eigen::Index ldk = detail::key_stride<S>(n), blocks = (n + R - 1) / R;
    const bool small_values = kv <= detail::SweepShape<S>::kSmallValues;
    const int v_stride = detail::value_stride<S>(kv);
    const int k_pad = static_cast<int>(m.k.cols()), q_pad = static_cast<int>(m.q.cols());
    const int v_pad = static_cast<int>(m.v.cols());
#pragma omp parallel num_threads(threads)
    {
      const int tid = omp_get_thread_num();
      S* xs = rows_in.data() + tid * R * d;
      S* out = rows_out.data() + tid * R * padded_cols<S>(std::max(k, kv));
#pragma omp for schedule(static)
      for (Eigen::Index b = 0; b < blocks; ++b) {
        const Eigen::Index r0 = b * R;
        const int count = static_cast<int>(std::min<Eigen::Index>(R, n - r0));
        for (int rr = 0; rr < R; ++rr)
          for (int e = 0; e < d; ++e) xs[rr * d + e] = rr < count ? x[row(r0 + rr) * d + e] : S(0);
        multiply_rows(xs, d, d, m.q.data(), q_pad, out);
        for (int rr = 0; rr < count; ++rr) std::copy(out + rr * q_pad, out + rr * q_pad + k, q.data() + (r0 + rr) * k);
        multiply_rows(xs, d, d, m.k.data(), k_pad, out);
        for (int rr = 0; rr < count; ++rr) {
          const Eigen::Index r = r0 + rr;
          for (int c = 0; c < k; ++c) kt[detail::packed_key<S>(k, r, c)] = out[rr * k_pad + c];
        }
        if (kv == 0) continue;
        multiply_rows(xs, d, d, m.v.data(), v_pad, out);
        for (int rr = 0; rr < count; ++rr) {
          const Eigen::Index r = r0 + rr;
          if (small_values)  // values transposed
            for (int c = 0; c < kv; ++c) v[c * ldk + r] = out[rr * v_pad + c];
          else
            std::copy(out + rr * v_pad, out + rr * v_pad + kv, v.data() + r * v_stride);
        }
      }
    }
  }

  SweepTokens<S> tokens(const Eigen::Index* visible_end) const {
    SweepTokens<S> t;
    t.n = n;
    t.k = k;
    t.kv = kv;
    t.q = q.data();
    t.kt = kt.data();
    if (kv > detail::SweepShape<S>::kSmallValues)
      t.v = v.data();
    else
      t.vt = v.data();
    t.a = a.data();
    t.visible_end = visible_end;
    return t;
  }
};

template <class S>
std::vector<SweepScratch<S>> make_scratch(int kv, int threads) {
  return std::vector<SweepScratch<S>>(static_cast<std::size_t>(threads), SweepScratch<S>(kv));
}

// Runs the kernel with the evaluator of the params' kind (not Sinkhorn: its potentials come first).
template <class S, class Fn>
void with_evaluator(const AttentionParams& p, Eigen::Index n, const Fn& fn) {
  switch (p.kind) {
    case AttentionKind::softmax: fn(detail::SoftmaxEvaluator<S>{}); break;
    case AttentionKind::l2: fn(detail::L2Evaluator<S>{static_cast<S>(p.scale)}); break;
    case AttentionKind::sigmoid: fn(detail::SigmoidEvaluator<S>{static_cast<S>(p.sigmoid_bias(n))}); break;
    case AttentionKind::linear: fn(detail::LinearEvaluator<S>{}); break;
    case AttentionKind::sinkhorn: throw std::logic_error("with_evaluator: sinkhorn needs its potentials");
  }
}

// summation = auto takes the grid from this many tokens on, when its predicted multiply-adds
// (GaussGridPlan::cost) plus kGridCostPerToken per token are below the dense kernel's pairs. Measured
// on an AMD EPYC (Zen 5, AVX-512), 2 threads, d = 2 and 3 (bench/fast_summation.py and one
// gauss_average per size): the dense kernel ~0.6 ns a pair (softmax, l2, f64, k = 2), the grid
// ~0.6 ns a multiply-add plus ~1 us a token (sorting, the box, spreading's overhead); the
// whole-process crossover is near n = 10^4 in d = 2 and between 2 10^4 and 2 10^5 in d = 3.
constexpr Eigen::Index kFastMinTokens = 4096;
constexpr double kGridCostPerToken = 2000.0;

// One head by the fast summation: y_i (i in [begin, end)) = sum_j P_ij V x_j in double. l2: the
// Gauss form of fast_gauss.hpp with targets Q x, sources K x, s = scale (gauss_average_retried: the
// rows its certificate rejects go through the softmax forms). softmax: softmax_average
// with queries sign(scale) sqrt|scale| Q x and keys sqrt|scale| K x (it picks the Gauss form for the
// keys' cloud). With `log_partition` instead of y: L_i = log sum_j a_j exp(s_ij). Returns false
// (nothing set) when `automatic` and the grid is predicted slower or declines.
template <class T>
bool fast_head(const AttentionParams& p, const HeadBlocks& b, const Vec<T>& weights, const Points<T>& x,
               Eigen::Index begin, Eigen::Index end, bool automatic, GaussMatrix* y, Eigen::VectorXd* log_partition,
               SummationReport* report) {
  const Eigen::Index n = x.rows();
  const GaussMatrix xd = x.template cast<double>();
  GaussMatrix targets = xd.middleRows(begin, end - begin) * b.Q.transpose();
  GaussMatrix sources = xd * b.K.transpose();
  const GaussMatrix values = y ? GaussMatrix(xd * b.V.transpose()) : GaussMatrix(n, 0);
  Eigen::VectorXd log_weights(n);
  for (Eigen::Index j = 0; j < n; ++j) log_weights[j] = std::log(static_cast<double>(weights[j]));
  const bool softmax = p.kind == AttentionKind::softmax;
  if (softmax) {
    const double root = std::sqrt(std::abs(p.scale));
    targets *= p.scale < 0.0 ? -root : root;
    sources *= root;
  }
  GaussAverageOptions options;
  options.tol = p.summation_tol;
  // The grid's two buffers: at most a quarter of this machine's memory (beyond, rows are exact).
  options.max_grid_bytes = std::min<std::size_t>(options.max_grid_bytes, memory_limit_bytes() / 4);
  SoftmaxGaussForm form;  // softmax under auto: built once for the plan, handed to softmax_average
  if (automatic) {
    // The plan of the first grid pass, on the Gauss form's clouds (softmax: the form it picks).
    const double s = softmax ? 0.5 : p.scale;
    Eigen::VectorXd extent(targets.cols());
    auto predict = [&](const GaussMatrix& t, const GaussMatrix& src) {
      for (Eigen::Index e = 0; e < t.cols(); ++e)
        extent[e] = std::sqrt(s) * (std::max(t.col(e).maxCoeff(), src.col(e).maxCoeff()) -
                                    std::min(t.col(e).minCoeff(), src.col(e).minCoeff()));
    };
    if (softmax) {
      form = softmax_gauss_form(targets, sources, log_weights);
      predict(form.targets, form.sources);
    } else {
      predict(targets, sources);
    }
    const GaussGridPlan plan = gauss_grid_plan(gauss_first_target(options.tol, static_cast<int>(extent.size())), extent,
                                               n, static_cast<int>(values.cols()), options.max_grid_bytes);
    if (plan.order == 0 ||
        plan.cost + kGridCostPerToken * static_cast<double>(n) > static_cast<double>(n) * static_cast<double>(end - begin))
      return false;
    options.max_exact_fraction = kFastExactRowLimit;  // auto: the dense kernel beyond
  }
  GaussMatrix averages;
  GaussMatrix& result = y ? *y : averages;
  const GaussAverageStats stats =
      softmax ? softmax_average(targets, sources, log_weights, values, options, result, log_partition,
                                automatic ? &form : nullptr)
              : gauss_average_retried(targets, sources, log_weights, values, p.scale, options, result, log_partition);
  if (stats.declined) return false;
  if (report) {
    ++report->fast_evaluations;
    report->rows_expanded += stats.rows_expanded;
    report->rows_exact += stats.rows_exact;
  }
  return true;
}

// One token's velocity from its Gamma g (d entries): g - <g, x> x if `project`, then divided by
// |g| if `unit_length` (|g| = 0: velocity 0).
template <class T>
void scheme_velocity(const double* g, const T* x, int d, bool project, bool unit_length, T* out) {
  double radial = 0.0, length = 1.0;
  if (project)
    for (int e = 0; e < d; ++e) radial += g[e] * static_cast<double>(x[e]);
  if (unit_length) {
    double sq = 0.0;
    for (int e = 0; e < d; ++e) sq += g[e] * g[e];
    length = sq > 0.0 ? std::sqrt(sq) : INFINITY;
  }
  for (int e = 0; e < d; ++e) out[e] = static_cast<T>((g[e] - radial * static_cast<double>(x[e])) / length);
}

// unit_i = x_i / |x_i| (0 for x_i = 0), normalized in double and then rounded to T.
template <class T>
void unit_rows(const Points<T>& x, Points<T>& unit) {
  unit.resize(x.rows(), x.cols());
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const double norm = x.row(i).template cast<double>().norm();
    for (Eigen::Index e = 0; e < x.cols(); ++e)
      unit(i, e) = norm > 0.0 ? static_cast<T>(static_cast<double>(x(i, e)) / norm) : T(0);
  }
}

// Whether velocity() and interaction_energy() try the fast summation for these params and n.
bool tries_fast(const AttentionParams& p, Eigen::Index n) {
  if (p.summation == Summation::fast) return true;
  if (p.summation != Summation::automatic || n < kFastMinTokens ||
      !fast_summation_obstacle(p).empty())
    return false;
  // Sinkhorn: from 4096 tokens (2^24 pairs, where tokenflow ot's auto leaves the dense operator)
  // and in 1 or 2 dimensions, as ot's auto takes the grid; in 3 its p^3 Taylor terms per point
  // make it often the slower one (docs/ot.md), so it runs there only when asked for.
  return p.kind != AttentionKind::sinkhorn || p.key_dim <= 2;
}

// The options of attention's Sinkhorn solves, warm-started from f, g (the last evaluation's
// potentials for op's cost; empty at the first). The solver of tokenflow ot (Anderson-accelerated
// log domain, ot.hpp); a cold start scales epsilon down from the cost range when epsilon is small
// against it, as tokenflow ot's default does.
SinkhornOptions attention_sinkhorn_options(const AttentionParams& params, const SoftMin& op,
                                           const Eigen::VectorXd& f, const Eigen::VectorXd& g) {
  SinkhornOptions opt;
  opt.epsilon = params.epsilon;
  opt.tol = params.sinkhorn_tol;
  opt.max_iter = params.sinkhorn_max_iter;
  opt.f_init = f;
  opt.g_init = g;
  if (f.size() == 0) opt.epsilon_start = automatic_epsilon_start(op, opt.epsilon);
  // Warm-started solves take a few iterations: the plain loop beside (ot.hpp) would double
  // each one's cost at every step of the flow.
  opt.plain_beside = false;
  return opt;
}

// The self-transport of (a, a) on op (symmetric: op's cost is symmetric, solved as its symmetric
// fixed point). Throws NumericalFailure (Python: FloatingPointError) when Sinkhorn does not converge.
SinkhornResult solve_self_transport(const SoftMin& op, const Eigen::VectorXd& a, bool symmetric,
                                    const SinkhornOptions& opt) {
  SinkhornResult r = symmetric ? sinkhorn_symmetric(op, a, opt) : sinkhorn(op, a, a, opt);
  if (r.below_floor)
    throw NumericalFailure(
        fmt::format("sinkhorn attention: attention.sinkhorn_tol = {:g} is below what this solve's "
                    "arithmetic can honour (rounding floor {:g}{}, marginal error {:g} after {} iterations, epsilon "
                    "{:g}); raise attention.sinkhorn_tol",
                    opt.tol, r.rounding_floor,
                    op.softmin_relative_error() > 0.0 ? ", with the grid's certified error" : "",
                    r.marginal_error, r.iterations, opt.epsilon));
  if (!r.converged)
    throw NumericalFailure(fmt::format(
        "sinkhorn attention: Sinkhorn did not reach attention.sinkhorn_tol = {:g} in {} iterations "
        "(marginal error {:g}, epsilon {:g}); raise attention.sinkhorn_tol or "
        "attention.sinkhorn_max_iter, or raise attention.epsilon",
        opt.tol, r.iterations, r.marginal_error, opt.epsilon));
  return r;
}

// Sinkhorn attention's potentials for one head (tokens tok, n of them, weights a): the
// self-transport of (a, a) for the cost -s_ij = -<scale Q x_i, K x_j>, solved online (memory
// O(n k)) and warm-started from f, g (the last evaluation's potentials; empty at the first), which
// it replaces. same_qk: Q_h = K_h; comm: several ranks. Throws when Sinkhorn does not converge.
template <class T>
void solve_head_potentials(const AttentionParams& params, const Eigen::VectorXd& a, const SweepTokens<T>& tok,
                           Eigen::Index n, bool same_qk, const Communicator* comm, Eigen::VectorXd& f,
                           Eigen::VectorXd& g) {
  // A dot cost between the scaled queries and the keys. No mask: order is identity.
  using PointMatrix = OnlineSoftMin::PointMatrix;
  using MapT = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  PointMatrix queries = MapT(tok.q, n, params.key_dim).template cast<double>();
  PointMatrix keys(n, params.key_dim);  // unpacked from the kernel's key tiles
  for (Eigen::Index j = 0; j < n; ++j)
    for (int c = 0; c < params.key_dim; ++c)
      keys(j, c) = static_cast<double>(tok.kt[detail::packed_key<T>(params.key_dim, j, c)]);
  // Q_h = K_h with scale > 0: the cost -scale <K x_i, K x_j> is symmetric, and the
  // self-transport is the symmetric fixed point (ot.hpp's sinkhorn_symmetric) of the points
  // sqrt(scale) K x_i, an exactly symmetric operator. Its averaged update converges where the
  // alternating loop creeps: n = 200, epsilon = 0.1 at t = 0.7 of the default dynamics (cost
  // range 55), 39 iterations against 57 535 (tol 1e-12).
  const bool symmetric_cost = same_qk && params.scale > 0.0;
  if (symmetric_cost) {
    queries = keys * std::sqrt(params.scale);
    keys = queries;
  }
  // Several ranks: each computes its block of every soft-min's outputs (bit for bit).
  std::unique_ptr<SoftMin> op;
  if (comm)
    op = std::make_unique<DistributedSoftMin>(*comm, std::move(queries), std::move(keys), CostKind::dot);
  else
    op = std::make_unique<OnlineSoftMin>(std::move(queries), std::move(keys), CostKind::dot);
  SinkhornResult r =
      solve_self_transport(*op, a, symmetric_cost, attention_sinkhorn_options(params, *op, f, g));
  f = std::move(r.f);
  g = std::move(r.g);
}

// Sinkhorn attention's head through the grid (fast_summation_obstacle: k <= 3 and
// attention.sinkhorn_tol >= kGridSinkhornMinTol): y_i = sum_j (pi_ij / a_i) V x_j for every token
// (n rows), f and g as solve_head_potentials leaves them. With q = scale Q x and k = K x (Q = K,
// scale > 0: both sqrt(scale) K x, the symmetric cost), the dot cost is a squared distance plus
// terms of one index each,
//   -<q_i, k_j> = |q_i - k_j|^2 / 2 - |q_i|^2 / 2 - |k_j|^2 / 2,
// so the plan is the one of the cost |q_i / sqrt 2 - k_j / sqrt 2|^2 (GridSoftMin's), whose
// potentials are f'_i = f_i + |q_i|^2 / 2 and g'_j = g_j + |k_j|^2 / 2. The solve's soft-mins are
// within ot's grid tolerance (grid_relative_tol(sinkhorn_tol): their certified error is counted in
// the marginal error it must bring below sinkhorn_tol). Then one more transform, with values V x
// and h_j = log a_j + g'_j / eps, gives the row means m_i and the soft-min s_i:
//   y_i = r_i m_i,   r_i = sum_j pi_ij / a_i = exp((f'_i - s_i) / eps).
// Each of m_i and the sum behind s_i is within e = summation_tol / 3 relative (GridSoftMin's row
// bound), so |y_i - exact_i| <= (e + e (1 + e) / (1 - e)) sum_j (pi_ij / a_i) |V x_j|, below
// summation_tol times it: attention.summation_tol's per-row bound, for these potentials.
template <class T>
void fast_sinkhorn_head(const AttentionParams& p, const HeadBlocks& b, const Vec<T>& weights,
                        const Points<T>& x, bool same_qk, Eigen::VectorXd& f, Eigen::VectorXd& g,
                        GaussMatrix& y, SummationReport* report) {
  const GaussMatrix xd = x.template cast<double>();
  GaussMatrix keys = xd * b.K.transpose();
  GaussMatrix queries = p.scale * (xd * b.Q.transpose());
  const bool symmetric_cost = same_qk && p.scale > 0.0;
  if (symmetric_cost) {
    keys *= std::sqrt(p.scale);
    queries = keys;
  }
  const Eigen::VectorXd q_half = 0.5 * queries.rowwise().squaredNorm(),
                        k_half = 0.5 * keys.rowwise().squaredNorm();
  const double root_half = std::sqrt(0.5);
  const GridSoftMin op(root_half * queries, root_half * keys, grid_relative_tol(p.sinkhorn_tol));
  const Eigen::VectorXd a = weights.template cast<double>();
  const bool warm = f.size() == a.size() && g.size() == a.size();
  SinkhornOptions opt =
      attention_sinkhorn_options(p, op, warm ? Eigen::VectorXd(f + q_half) : Eigen::VectorXd(),
                                 warm ? Eigen::VectorXd(g + k_half) : Eigen::VectorXd());
  const SinkhornResult r = solve_self_transport(op, a, symmetric_cost, opt);
  const GridSoftMin out_op(root_half * queries, root_half * keys,
                           std::min(1e-2, p.summation_tol / 3.0));
  const double eps = p.epsilon;
  const Eigen::VectorXd h = a.array().log() + r.g.array() / eps;
  Eigen::VectorXd softmin;
  out_op.softmin_rows_and_means(eps, h, GaussMatrix(xd * b.V.transpose()), y, softmin);
  for (Eigen::Index i = 0; i < y.rows(); ++i) y.row(i) *= std::exp((r.f[i] - softmin[i]) / eps);
  f = r.f - q_half;
  g = r.g - k_half;
  if (report) {
    ++report->fast_evaluations;
    const long long exact = op.rows_exact() + out_op.rows_exact();
    report->rows_exact += exact;
    report->rows_expanded += op.rows_total() + out_op.rows_total() - exact;
  }
}

// Several ranks: every rank filled the rows of its sweep positions [offsets[rank],
// offsets[rank + 1]) of out; all-gathers them, in sweep order (order: sweep position r holds token
// order[r]; nullptr when the sweep order is the tokens', else `gathered`, n x d, carries them).
template <class T>
void gather_sweep_rows(const Communicator* comm, const std::vector<Eigen::Index>& offsets,
                       const Eigen::Index* order, Points<T>& gathered, Points<T>& out) {
  const Eigen::Index n = out.rows();
  const int d = static_cast<int>(out.cols());
  if (!order) {
    allgather_rows(comm, out.data(), offsets, d);
    return;
  }
  const auto rank = static_cast<std::size_t>(comm->rank());
  for (Eigen::Index r = offsets[rank]; r < offsets[rank + 1]; ++r) gathered.row(r) = out.row(order[r]);
  allgather_rows(comm, gathered.data(), offsets, d);
  for (Eigen::Index r = 0; r < n; ++r) out.row(order[r]) = gathered.row(r);
}

}  // namespace

template <class T>
struct AttentionField<T>::Workspace {
  std::vector<std::vector<HeadMatrices<T>>> layers;  // [layer][head]
  std::vector<Eigen::Index> order;        // sweep position r holds token order[r]
  std::vector<Eigen::Index> visible_end;  // causal: sweep position r sees positions [0, visible_end[r])
  bool sorted = false;
  TokenBuffers<T> tokens;
  Points<double> gamma;   // n x d: sum over the heads done so far
  std::vector<double> head_out;  // per thread: one query tile's W_h y, kQueryTile x padded_cols(d)
  std::vector<SweepScratch<T>> scratch;
  detail::SweepRows rows;                    // every query's running sums (symmetric kernel)
  std::vector<std::vector<char>> symmetric;  // [layer][head]: Q_h = K_h and no mask
  std::vector<std::vector<char>> same_qk;    // [layer][head]: Q_h = K_h (symmetric Sinkhorn cost)
  std::vector<Eigen::VectorXd> f, g;  // Sinkhorn potentials per head (warm start between calls)
  // Several ranks: this rank computes sweep positions [offsets[rank], offsets[rank + 1]);
  // `gathered` (n x d, sweep order) carries the blocks when the sweep order is not the tokens'.
  const Communicator* comm = nullptr;
  std::vector<Eigen::Index> offsets;
  Points<T> gathered;
  SummationReport report;
  GaussMatrix fast_out;  // a head's averages by the fast summation
  Points<T> unit;        // normalize = pre, peri: theta_i = x_i / |x_i| (in double, then rounded to T)

  Workspace(Eigen::Index n, int d, int k, int kv, int threads)
      : tokens(n, d, k, kv, threads), rows(detail::SweepRows::make<T>(n, kv)) {}
};

template <class T>
AttentionField<T>::AttentionField(AttentionParams params, const Measure<T>& mu)
    : params_(std::move(params)), weights_(attention_weights(mu, params_.sink)) {
  const Eigen::Index n = mu.n();
  const int threads = thread_count(n);
  work_ = std::make_unique<Workspace>(n, static_cast<int>(mu.d()), params_.key_dim, params_.value_dim, threads);
  Workspace& w = *work_;
  for (const AttentionLayer& layer : params_.layers) {
    std::vector<HeadMatrices<T>> heads;
    std::vector<char> symmetric, same_qk;
    for (const HeadBlocks& b : layer.heads) {
      heads.push_back(head_matrices<T>(params_, b));
      symmetric.push_back(uses_symmetric_kernel(params_, b));
      same_qk.push_back(b.Q == b.K);
    }
    w.layers.push_back(std::move(heads));
    w.symmetric.push_back(std::move(symmetric));
    w.same_qk.push_back(std::move(same_qk));
  }
  w.order.resize(static_cast<std::size_t>(n));
  std::iota(w.order.begin(), w.order.end(), Eigen::Index{0});
  if (params_.mask == Mask::causal) {
    positions_ = mu.has_positions() ? mu.positions : default_positions<T>(n);
    std::stable_sort(w.order.begin(), w.order.end(),
                     [&](Eigen::Index i, Eigen::Index j) { return positions_[i] < positions_[j]; });
    w.sorted = true;
    w.visible_end.resize(static_cast<std::size_t>(n));
    // Sorted positions are nondecreasing: position r sees every key up to the last tie of its own.
    Eigen::Index end = 0;
    for (Eigen::Index r = 0; r < n; ++r) {
      end = std::max(end, r + 1);
      while (end < n && positions_[w.order[end]] <= positions_[w.order[r]]) ++end;
      w.visible_end[r] = end;
    }
  }
  for (Eigen::Index r = 0; r < n; ++r) w.tokens.a[r] = weights_[w.order[r]];
  w.gamma.resize(n, mu.d());
  w.head_out.assign(static_cast<std::size_t>(threads * detail::SweepShape<T>::kQueryTile *
                                             padded_cols<double>(static_cast<int>(mu.d()))),
                    0.0);
  w.scratch = make_scratch<T>(params_.value_dim, threads);
  w.f.assign(params_.heads, Eigen::VectorXd());
  w.g.assign(params_.heads, Eigen::VectorXd());
}

template <class T>
AttentionField<T>::~AttentionField() = default;
template <class T>
AttentionField<T>::AttentionField(AttentionField&&) noexcept = default;

template <class T>
void AttentionField<T>::velocity(double t, const Points<T>& x, Points<T>& out) {
  Workspace& w = *work_;
  const AttentionLayer& layer = params_.layer_at(t);
  const auto layer_index = static_cast<std::size_t>(&layer - params_.layers.data());
  const auto& mats = w.layers[layer_index];
  const Eigen::Index n = x.rows();
  const int d = static_cast<int>(x.cols()), kv = params_.value_dim;
  const Eigen::Index* order = w.order.data();
  const bool sorted = w.sorted;
  auto row = [order, sorted](Eigen::Index r) { return sorted ? order[r] : r; };
  const Eigen::Index* visible_end = w.sorted ? w.visible_end.data() : nullptr;
  const Normalize scheme = params_.scheme_at(t);  // mix: Post-LN, then Pre-LN
  const bool project = (scheme == Normalize::sphere && params_.tangent_projection) || scheme == Normalize::ngpt;
  const bool unit_length = scheme == Normalize::peri || scheme == Normalize::ngpt;  // divide by |Gamma|
  // Pre-LN, Peri-LN: attention sees theta = x / |x| (normalized in double, then rounded to T).
  const bool on_theta = scheme == Normalize::pre || scheme == Normalize::peri;
  if (on_theta) unit_rows(x, w.unit);
  const Points<T>& input = on_theta ? w.unit : x;
  out.resize(n, d);
  const bool distributed = w.comm != nullptr;
  for (int h = 0; h < params_.heads; ++h) {
    const HeadMatrices<T>& m = mats[static_cast<std::size_t>(h)];
    w.tokens.project(input.data(), row, m);
    SweepTokens<T> tok = w.tokens.tokens(visible_end);
    tok.symmetric = !distributed && w.symmetric[layer_index][static_cast<std::size_t>(h)] != 0;
    if (distributed) {
      tok.query_begin = w.offsets[static_cast<std::size_t>(w.comm->rank())];
      tok.query_end = w.offsets[static_cast<std::size_t>(w.comm->rank()) + 1];
    }
    // Per query tile (sweep positions i0 .., tokens i = row(r)): Gamma_i += W_h y_r in double;
    // after the last head, out_i = Gamma_i (projected on the sphere's tangent space if asked).
    const bool first = h == 0, last = h + 1 == params_.heads;
    const int d_pad = static_cast<int>(m.w.cols());
    // Gamma_i += W_h y (one token's row wyr), and after the last head out_i.
    auto store = [&, first, last](Eigen::Index i, const double* wyr) {
      double* gi = w.gamma.data() + i * d;
      for (int e = 0; e < d; ++e) gi[e] = first ? wyr[e] : gi[e] + wyr[e];
      if (!last) return;
      scheme_velocity(gi, x.data() + i * d, d, project, unit_length, out.data() + i * d);
    };
    auto finish = [&, d_pad](Eigen::Index i0, int rows, const double* y, int y_stride, const double*) {
      constexpr int R = kRowBlock<double>;
      double* wy = w.head_out.data() + omp_get_thread_num() * detail::SweepShape<T>::kQueryTile * d_pad;
      for (int r0 = 0; r0 < rows; r0 += R) multiply_rows(y + r0 * y_stride, y_stride, kv, m.w.data(), d_pad, wy + r0 * d_pad);
      for (int r = 0; r < rows; ++r) store(row(i0 + r), wy + r * d_pad);
    };
    // The fast summation (no mask, so sweep position r is token r).
    if (kv > 0 && tries_fast(params_, n)) {
      const Eigen::Index begin = distributed ? tok.query_begin : 0, end = distributed ? tok.query_end : n;
      const HeadBlocks& blocks = layer.heads[static_cast<std::size_t>(h)];
      if (params_.kind == AttentionKind::sinkhorn) {  // every rank solves the whole transport
        fast_sinkhorn_head(params_, blocks, weights_, input,
                           w.same_qk[layer_index][static_cast<std::size_t>(h)] != 0, w.f[h], w.g[h],
                           w.fast_out, &w.report);
        const GaussMatrix wy = w.fast_out * blocks.W.transpose();
#pragma omp parallel for schedule(static)
        for (Eigen::Index i = begin; i < end; ++i) store(i, wy.data() + i * d);
        continue;
      }
      if (fast_head(params_, blocks, weights_, input, begin, end, params_.summation == Summation::automatic, &w.fast_out,
                    nullptr, &w.report)) {
        const GaussMatrix wy = w.fast_out * blocks.W.transpose();
#pragma omp parallel for schedule(static)
        for (Eigen::Index i = begin; i < end; ++i) store(i, wy.data() + (i - begin) * d);
        continue;
      }
    }
    ++w.report.dense_evaluations;
    if (params_.kind == AttentionKind::sinkhorn) {
      solve_head_potentials<T>(params_, weights_.template cast<double>(), tok, n,
                               w.same_qk[layer_index][static_cast<std::size_t>(h)] != 0, w.comm, w.f[h], w.g[h]);
      detail::sweep(detail::SinkhornEvaluator<T>{params_.epsilon, w.f[h].data(), w.g[h].data()}, tok, w.scratch,
                    &w.rows, finish);
    } else {
      with_evaluator<T>(params_, n, [&](const auto& ev) { detail::sweep(ev, tok, w.scratch, &w.rows, finish); });
    }
  }
  if (distributed) gather_sweep_rows(w.comm, w.offsets, sorted ? order : nullptr, w.gathered, out);
}

template <class T>
const SummationReport& AttentionField<T>::summation_report() const {
  return work_->report;
}

template <class T>
void AttentionField<T>::set_communicator(const Communicator* comm) {
  Workspace& w = *work_;
  if (comm == nullptr || comm->size() == 1) {
    w.comm = nullptr;
    return;
  }
  w.comm = comm;
  const Eigen::Index n = weights_.size();
  w.offsets = block_offsets(n, comm->size(), detail::SweepShape<T>::kQueryTile);
  if (w.sorted) w.gathered.resize(n, w.gamma.cols());
}

template <class T>
void AttentionField<T>::sinkhorn_potentials(std::vector<Eigen::VectorXd>& f, std::vector<Eigen::VectorXd>& g) const {
  f = work_->f;
  g = work_->g;
}

template <class T>
void AttentionField<T>::set_sinkhorn_potentials(const std::vector<Eigen::VectorXd>& f,
                                                const std::vector<Eigen::VectorXd>& g) {
  if (f.size() == work_->f.size() && g.size() == work_->g.size()) {
    work_->f = f;
    work_->g = g;
  }
}

template <class T>
double AttentionField<T>::interaction_energy(double t, const Points<T>& x) const {
  // Through the same kernel with no values, in the working precision: per query the
  // log-partition L_i = log sum_j a_j exp(s_ij) (tile sums in T, the rest in double), and
  // E = 1/2 sum_h sum_i a_i exp(L_i) (no mask).
  const AttentionLayer& layer = params_.layer_at(t);
  const Eigen::Index n = x.rows();
  const int d = static_cast<int>(x.cols());
  const int threads = thread_count(n);
  TokenBuffers<T> buffers(n, d, params_.key_dim, 0, threads);
  for (Eigen::Index i = 0; i < n; ++i) buffers.a[i] = weights_[i];
  auto scratch = make_scratch<T>(0, threads);
  detail::SweepRows running = detail::SweepRows::make<T>(n, 0);
  std::vector<double> log_partition(static_cast<std::size_t>(n));
  AttentionParams p = params_;
  if (p.kind != AttentionKind::l2) p.kind = AttentionKind::softmax;  // the energy of the logits exp(s)
  double energy = 0.0;
  for (const HeadBlocks& b : layer.heads) {
    Eigen::VectorXd fast_partition;
    if (tries_fast(p, n) &&
        fast_head(p, b, weights_, x, 0, n, p.summation == Summation::automatic, nullptr, &fast_partition, nullptr)) {
      double head = 0.0;
      for (Eigen::Index i = 0; i < n; ++i) head += static_cast<double>(weights_[i]) * std::exp(fast_partition[i]);
      energy += 0.5 * head;
      continue;
    }
    buffers.project(x.data(), [](Eigen::Index r) { return r; }, head_matrices<T>(p, b));
    SweepTokens<T> tok = buffers.tokens(nullptr);
    tok.symmetric = uses_symmetric_kernel(p, b);
    with_evaluator<T>(p, n, [&](const auto& ev) {
      detail::sweep(ev, tok, scratch, &running,
                    [&](Eigen::Index i0, int rows, const double*, int, const double* lp) {
                      std::copy(lp, lp + rows, log_partition.begin() + i0);
                    });
    });
    double head = 0.0;  // fixed order: the same for every thread count
    for (Eigen::Index i = 0; i < n; ++i) head += static_cast<double>(weights_[i]) * std::exp(log_partition[i]);
    energy += 0.5 * head;
  }
  return energy;
}

template class AttentionField<float>;
template class AttentionField<double>;

}  // namespace tokenflow
