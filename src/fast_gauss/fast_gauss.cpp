// Weighted Gaussian averages on a Taylor grid, with a per-row error certificate
// (tokenflow/fast_gauss.hpp has the method; docs/fast-summation.md derives the bound).
//
// Written by hand: Debian packages no fast Gauss transform library (FIGTree is not packaged), and
// none certifies a relative error per row, which attention needs because its weights span many
// orders of magnitude (softmax's Gauss form multiplies them by exp(|k|^2 / 2)). The dense algebra
// of the grid passes is Eigen's GEMM.
#include "tokenflow/fast_gauss.hpp"

#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "../simd/exp.hpp"
#include "tokenflow/parallel.hpp"
#include "../simd/sum.hpp"

namespace tokenflow {

namespace {
// Whether a parallel region of about `multiply_adds` multiply-adds uses threads: from 16 per pair
// of the library's threshold on (tokenflow/parallel.hpp, 2^15 pairs: 2^19 multiply-adds, a few
// tenths of a millisecond). A region much shorter than that is slower on two threads, and while
// another process shares a core its barrier can wait a scheduler slice (milliseconds): one grid
// Sinkhorn call at n = 10^4 ran about 1500 regions, 1400 of them under 64 microseconds, and took
// 3 times as long on two threads as on one. Above it, the calling thread's governor decides
// (tokenflow/parallel.hpp).
bool parallel_work(double multiply_adds) {
  return multiply_adds >= 16.0 * static_cast<double>(parallel_min_pairs()) && threads_pay();
}
}  // namespace

namespace {

// Cramer's inequality: |H_n(x)| exp(-x^2 / 2) <= kCramer 2^(n/2) sqrt(n!) for the physicists'
// Hermite polynomials (Abramowitz and Stegun 22.14.17; the constant is 1.086435).
constexpr double kCramer = 1.086435;
// Node offsets beyond the band are not summed: their pairs' kernel is below exp(-kBandExponent).
constexpr double kBandExponent = 69.07755278982137;  // ln(1e30)
// Weights below this (relative to the largest) are dropped; the certificate accounts for them.
constexpr double kSmallestWeight = 1e-300;
constexpr double kUnitRoundoff = std::numeric_limits<double>::epsilon() / 2;

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// sum_{a >= from} rho^a / sqrt(a!), the terms computed through logs (no overflow of a!).
double scaled_series_tail(double rho, int from) {
  double sum = 0.0;
  for (int a = from; a < from + 2000; ++a) {
    const double term = std::exp(a * std::log(rho) - 0.5 * std::lgamma(a + 1.0));
    sum += term;
    if (a > from + 8 && term < 1e-40 * sum) break;
  }
  return sum;
}

// Nodes along one dimension, capped at 2^40 + 1: no grid that large fits in memory (the planner
// then refuses it), and a larger ceil(extent / rho), or a non-finite one, has no integer value.
Eigen::Index nodes_for(double extent, double rho) {
  constexpr Eigen::Index kNodeCap = Eigen::Index{1} << 40;
  const double cells = std::ceil(extent / rho);
  return (cells < static_cast<double>(kNodeCap) ? static_cast<Eigen::Index>(cells) : kNodeCap) + 1;
}
int band_for(double rho) { return static_cast<int>(std::ceil(std::sqrt(kBandExponent) / rho)); }

// The translation between nodes m (source) and m' (target), |m' - m| <= band, is the p x p block
// T_ab = (-1)^a H_{a+b}(D) exp(-D^2) / (a! b!) with D = rho (m' - m); beyond the band it is 0.
// With p = 1 and `envelope`, the entry is exp(-D^2 / 2) instead (the envelope's kernel). The block
// depends on m' - m only, so one strip holds them all: p x (2 band + 1) p, column block q for
// m' - m = band - q. The blocks of a target's sources lo..hi (ascending) are then contiguous, from
// column block band - (m' - lo).
RowMatrix translation_strip(int p, double rho, int band, bool envelope) {
  RowMatrix strip(p, (2 * band + 1) * p);
  std::vector<double> h(static_cast<std::size_t>(2 * p));
  std::vector<double> factorial(static_cast<std::size_t>(p), 1.0);
  for (int a = 1; a < p; ++a) factorial[static_cast<std::size_t>(a)] = factorial[static_cast<std::size_t>(a - 1)] * a;
  for (int q = 0; q <= 2 * band; ++q) {
    const double D = rho * (band - q);
    if (envelope) {
      strip(0, q) = std::exp(-0.5 * D * D);
      continue;
    }
    // h_n = H_n(D) exp(-D^2): h_{n+1} = 2 D h_n - 2 n h_{n-1}.
    h[0] = std::exp(-D * D);
    if (2 * p > 1) h[1] = 2.0 * D * h[0];
    for (int j = 1; j + 1 < 2 * p; ++j)
      h[static_cast<std::size_t>(j + 1)] = 2.0 * D * h[static_cast<std::size_t>(j)] - 2.0 * j * h[static_cast<std::size_t>(j - 1)];
    for (int a = 0; a < p; ++a)
      for (int b = 0; b < p; ++b)
        strip(a, q * p + b) = (a % 2 == 0 ? 1.0 : -1.0) * h[static_cast<std::size_t>(a + b)] /
                              (factorial[static_cast<std::size_t>(a)] * factorial[static_cast<std::size_t>(b)]);
  }
  return strip;
}

// The grid: G_e nodes per dimension, p terms per node and dimension, C channels; entry
// (m_0, a_0, ..., m_{k-1}, a_{k-1}, ch) at sum_e (m_e p + a_e) stride_e + ch.
struct GridShape {
  std::vector<Eigen::Index> nodes;  // G_e
  int p = 1, channels = 1;
  std::vector<Eigen::Index> stride;

  GridShape(std::vector<Eigen::Index> nodes_, int p_, int channels_) : nodes(std::move(nodes_)), p(p_), channels(channels_) {
    stride.assign(nodes.size(), 0);
    Eigen::Index s = channels;
    for (std::size_t e = nodes.size(); e-- > 0;) {
      stride[e] = s;
      s *= nodes[e] * p;
    }
  }
  Eigen::Index size() const { return stride[0] * nodes[0] * p; }
  Eigen::Index node_offset(const Eigen::Index* m) const {
    Eigen::Index o = 0;
    for (std::size_t e = 0; e < nodes.size(); ++e) o += m[e] * p * stride[e];
    return o;
  }
};

// data <- (T x T x ... x T) data, T the banded translation of `strip` along each dimension. Along
// dimension e the rows (m_e p + a_e) of every (outer, inner) slab are multiplied by T: one GEMM per
// slab and output node over its band's inputs. Along the last dimension with one channel (inner =
// 1, Sinkhorn's soft-mins) the slabs are single columns, so all of them go at once instead, as
// (outer x width) times the block's transpose: a GEMM, not outer matrix-vector products. (A map
// with a run-time inner stride would be copied whole by Eigen before each product, so C > 1 keeps
// the per-slab products.)
void apply_translations(const GridShape& g, const RowMatrix& strip, int band, std::vector<double>& data,
                        std::vector<double>& scratch) {
  using Map = Eigen::Map<RowMatrix>;
  using ConstMap = Eigen::Map<const RowMatrix>;
  const int p = g.p;
  const std::size_t last = g.nodes.size() - 1;
  for (std::size_t e = 0; e <= last; ++e) {
    const Eigen::Index G = g.nodes[e], rows = G * p, inner = g.stride[e];
    const Eigen::Index outer = static_cast<Eigen::Index>(data.size()) / (rows * inner);
    auto block = [&](Eigen::Index target, Eigen::Index lo, Eigen::Index width) {
      return strip.middleCols((band - (target - lo)) * p, width);
    };
    // The strip's products: p x width x inner multiply-adds per target node and slab.
    const bool threads = parallel_work(static_cast<double>(data.size()) * static_cast<double>((2 * band + 1) * p));
    if (e < last || inner > 1) {
#pragma omp parallel for collapse(2) schedule(dynamic) if (threads)
      for (Eigen::Index o = 0; o < outer; ++o) {
        for (Eigen::Index target = 0; target < G; ++target) {
          ConstMap X(data.data() + o * rows * inner, rows, inner);
          Map Y(scratch.data() + o * rows * inner, rows, inner);
          const Eigen::Index lo = std::max<Eigen::Index>(0, target - band), hi = std::min(G - 1, target + band);
          const Eigen::Index width = (hi - lo + 1) * p;
          Y.middleRows(target * p, p).noalias() = block(target, lo, width) * X.middleRows(lo * p, width);
        }
      }
    } else {
      ConstMap X(data.data(), outer, rows);  // row o: slab o (inner = 1, so contiguous)
      Map Y(scratch.data(), outer, rows);
#pragma omp parallel for schedule(dynamic) if (threads)
      for (Eigen::Index target = 0; target < G; ++target) {
        const Eigen::Index lo = std::max<Eigen::Index>(0, target - band), hi = std::min(G - 1, target + band);
        const Eigen::Index width = (hi - lo + 1) * p;
        Y.middleCols(target * p, p).noalias() = X.middleCols(lo * p, width) * block(target, lo, width).transpose();
      }
    }
    data.swap(scratch);
  }
}

// pw[e][a] = u_e^a for the k <= 3 offsets u and a in [0, p).
void offset_powers(const double* u, int k, int p, double (*pw)[64]) {
  for (int e = 0; e < k; ++e) {
    pw[e][0] = 1.0;
    for (int a = 1; a < p; ++a) pw[e][a] = pw[e][a - 1] * u[e];
  }
}

// The coefficient of leading multi-index r (row-major over the first k - 1 dimensions, p^(k-1) of
// them): prod_{e < k-1} pw[e][r_e]; 1 for k = 1.
double leading_monomial(const double (*pw)[64], int k, int p, Eigen::Index r) {
  if (k == 1) return 1.0;
  if (k == 2) return pw[0][r];
  return pw[0][r / p] * pw[1][r % p];
}

// The grid's channels for c value columns: the weight, the values and their norms; the weight
// alone when there are no values (a log-partition only, Sinkhorn's soft-min).
int grid_channels(int c) { return c == 0 ? 1 : c + 2; }
int value_columns(int channels) { return channels == 1 ? 0 : channels - 2; }

// The grid offset of multi-index alpha (row-major in [0, p)^k) relative to its node's offset.
Eigen::Index term_offset(const GridShape& g, int k, Eigen::Index alpha) {
  Eigen::Index o = 0;
  for (int e = k - 1; e >= 0; --e) {
    o += (alpha % g.p) * g.stride[static_cast<std::size_t>(e)];
    alpha /= g.p;
  }
  return o;
}

}  // namespace

namespace {

// The truncation bound from the series S = sum_{a >= 0} rho^a / sqrt(a!) and its tail from p.
double expansion_bound(double rho, double S, double tail, int p, int k, int nodes_per_dim) {
  const double Sp = S - tail;
  const double one_dim = kCramer * tail * (S + Sp);                 // K (S^2 - S_p^2)
  const double A = std::max(std::exp(rho * rho), kCramer * S * S);  // bounds |kernel|, |truncated kernel|
  double bound = k * one_dim * std::pow(A, k - 1);
  // Rounding: every computed quantity is a sum of at most k (band width) p + 2 p^k products, each
  // bounded by the term bounds, whose sum is (K S^2)^k exp(-|D|^2 / 2) (Higham's gamma_N, doubled).
  const double terms = k * static_cast<double>(nodes_per_dim) * p + 2.0 * std::pow(p, k);
  bound += 4.0 * terms * kUnitRoundoff * std::pow(kCramer * S * S, k);
  return bound;
}

// The planner's spacings rho = 0.25, 0.30, ..., 1.50 and orders p <= 48.
constexpr int kSpacings = 26, kMaxOrder = 48;
double planner_spacing(int i) { return 0.25 + 0.05 * i; }

// scaled_series_tail(planner_spacing(i), from) for every spacing and from <= kMaxOrder + 1, computed
// once per process (the planner runs on every call of gauss_average; the series' exp and lgamma per
// term were 2 % of a Sinkhorn solve through the grid).
double planner_series_tail(int i, int from) {
  static const std::vector<double> table = [] {
    std::vector<double> t(static_cast<std::size_t>(kSpacings * (kMaxOrder + 2)));
    for (int s = 0; s < kSpacings; ++s)
      for (int tail_from = 0; tail_from <= kMaxOrder + 1; ++tail_from)
        t[static_cast<std::size_t>(s * (kMaxOrder + 2) + tail_from)] = scaled_series_tail(planner_spacing(s), tail_from);
    return t;
  }();
  return table[static_cast<std::size_t>(i * (kMaxOrder + 2) + from)];
}

}  // namespace

double gauss_expansion_bound(double rho, int p, int k, int nodes_per_dim) {
  return expansion_bound(rho, scaled_series_tail(rho, 0), scaled_series_tail(rho, p), p, k, nodes_per_dim);
}

double gauss_first_target(double tol, int k) { return tol / (8.0 * std::pow(2.0, 0.5 * k)); }

GaussGridPlan gauss_grid_plan(double target, const Eigen::VectorXd& extent, Eigen::Index n, int c,
                              std::size_t max_grid_bytes) {
  const int k = static_cast<int>(extent.size());
  GaussGridPlan best;
  best.cost = std::numeric_limits<double>::infinity();
  for (int spacing = 0; spacing < kSpacings; ++spacing) {
    const double rho = planner_spacing(spacing), S = planner_series_tail(spacing, 0);
    const int band = band_for(rho);
    Eigen::Index widest = 1;
    double nodes = 1.0;
    for (int e = 0; e < k; ++e) {
      widest = std::max(widest, nodes_for(extent[e], rho));
      nodes *= static_cast<double>(nodes_for(extent[e], rho));
    }
    const int window = static_cast<int>(std::min<Eigen::Index>(widest, 2 * band + 1));
    int p = 1;
    while (p <= kMaxOrder && expansion_bound(rho, S, planner_series_tail(spacing, p), p, k, window) > target) ++p;
    if (p > kMaxOrder) continue;
    const double terms = std::pow(p, k), entries = nodes * terms * grid_channels(c);
    // The two grid buffers, the envelope's two (2 doubles a node) and the translation strips
    // (translation_strip), held together.
    const double held = 2.0 * entries + 4.0 * nodes + (2.0 * band + 1.0) * (p * p + 1.0);
    if (8.0 * held > static_cast<double>(max_grid_bytes)) continue;
    // Spreading and evaluation: n p^k C each; the passes: entries x (band window) p each.
    double cost = 2.0 * static_cast<double>(n) * terms * grid_channels(c);
    for (int e = 0; e < k; ++e)
      cost += entries * static_cast<double>(std::min<Eigen::Index>(nodes_for(extent[e], rho), 2 * band + 1)) * p;
    if (cost < best.cost) {
      best.cost = cost;
      best.spacing = rho;
      best.order = p;
      best.band = band;
      best.bound = expansion_bound(rho, S, planner_series_tail(spacing, p), p, k, window);
    }
  }
  if (best.order == 0) best.cost = 0.0;
  return best;
}

namespace {

// The problem in scaled coordinates (the kernel exp(-|z - z'|^2)) with the weights divided by the
// largest, those below kSmallestWeight dropped.
struct ScaledProblem {
  GaussMatrix zt, zs;
  const Eigen::VectorXd* log_weights = nullptr;
  const GaussMatrix* values = nullptr;
  std::vector<double> weight, value_norm;
  double weight_sum = 0.0, weighted_norm_sum = 0.0, largest_norm = 0.0;
  Eigen::Index dropped = 0;
  // The grid's box [lo, lo + extent]: sources outside it are summed exactly into every row, targets
  // outside it are exact rows.
  Eigen::VectorXd lo, extent;
  std::vector<char> source_inside, target_inside;
  std::vector<Eigen::Index> outside_sources;
};

// The exact sums of a pair cost about this many multiply-adds of the grid (an exp and a distance).
constexpr double kExactPairCost = 4.0;
// The box's edges come from at most about this many points (choose_box).
constexpr Eigen::Index kBoxSample = 1 << 15;
// Box trims tried: the fraction of points cut off each side of each coordinate.
constexpr double kTrims[] = {0.0, 1e-4, 1e-3, 1e-2};

// Chooses the grid's box (the trim whose grid plus exact sums costs least) and fills sp's box
// members; returns the plan for the first target, order 0 when no box has a grid.
GaussGridPlan choose_box(ScaledProblem& sp, double target, int c, std::size_t max_grid_bytes) {
  const Eigen::Index m = sp.zt.rows(), n = sp.zs.rows();
  const int k = static_cast<int>(sp.zt.cols());
  // Per dimension the coordinates' order statistics at the trims' cuts (nth_element: O(m + n)
  // each, where a sort was O((m + n) log(m + n)) per call), on every stride-th point: any box is
  // valid (the points outside it are summed exactly, and counted exactly below), so its edges may
  // come from a sample of kBoxSample points, a fixed one (the same box on every run). The untrimmed
  // box is the whole bounding box (edges over every point).
  const Eigen::Index total_points = m + n;
  const Eigen::Index stride = std::max<Eigen::Index>(1, total_points / kBoxSample);
  const auto total = static_cast<std::size_t>((total_points + stride - 1) / stride);
  std::vector<std::vector<double>> sorted(static_cast<std::size_t>(k));
  Eigen::VectorXd lowest(k), highest(k);
  std::vector<std::size_t> cuts;
  for (double trim : kTrims) {
    const auto cut = static_cast<std::size_t>(trim * static_cast<double>(total));
    if (cut < total) {
      cuts.push_back(cut);
      cuts.push_back(total - 1 - cut);
    }
  }
  std::sort(cuts.begin(), cuts.end());
#pragma omp parallel for schedule(static) if (parallel_work(8.0 * static_cast<double>(total * cuts.size())))
  for (int e = 0; e < k; ++e) {
    auto& v = sorted[static_cast<std::size_t>(e)];
    v.resize(total);
    for (std::size_t u = 0; u < total; ++u) {
      const Eigen::Index at = static_cast<Eigen::Index>(u) * stride;
      v[u] = at < m ? sp.zt(at, e) : sp.zs(at - m, e);
    }
    lowest[e] = std::min(m > 0 ? sp.zt.col(e).minCoeff() : INFINITY, n > 0 ? sp.zs.col(e).minCoeff() : INFINITY);
    highest[e] = std::max(m > 0 ? sp.zt.col(e).maxCoeff() : -INFINITY, n > 0 ? sp.zs.col(e).maxCoeff() : -INFINITY);
    // Ascending cuts, each selected within the part above the previous one: v[cut] is then the
    // cut-th smallest for every cut (what the loop below reads), the rest in no order.
    auto from = v.begin();
    for (const std::size_t cut : cuts) {
      const auto at = v.begin() + static_cast<std::ptrdiff_t>(cut);
      if (at < from) continue;  // a repeated cut
      std::nth_element(from, at, v.end());
      from = at + 1;
    }
  }
  GaussGridPlan best;
  double best_cost = std::numeric_limits<double>::infinity();
  Eigen::VectorXd lo(k), hi(k);
  auto inside = [&](const GaussMatrix& z, Eigen::Index i) {
    for (int e = 0; e < k; ++e)
      if (z(i, e) < lo[e] || z(i, e) > hi[e]) return false;
    return true;
  };
  for (double trim : kTrims) {
    const auto cut = static_cast<std::size_t>(trim * static_cast<double>(total));
    for (int e = 0; e < k; ++e) {
      lo[e] = cut == 0 ? lowest[e] : sorted[static_cast<std::size_t>(e)][cut];
      hi[e] = cut == 0 ? highest[e] : sorted[static_cast<std::size_t>(e)][total - 1 - cut];
    }
    Eigen::Index out_sources = 0, out_targets = 0;
#pragma omp parallel for schedule(static) reduction(+ : out_sources) if (parallel_work(static_cast<double>(n * k)))
    for (Eigen::Index j = 0; j < n; ++j) out_sources += !inside(sp.zs, j);
#pragma omp parallel for schedule(static) reduction(+ : out_targets) if (parallel_work(static_cast<double>(m * k)))
    for (Eigen::Index i = 0; i < m; ++i) out_targets += !inside(sp.zt, i);
    const GaussGridPlan plan = gauss_grid_plan(target, hi - lo, std::max(n, m), c, max_grid_bytes);
    if (plan.order == 0) continue;
    const double cost = plan.cost + kExactPairCost * (static_cast<double>(m) * static_cast<double>(out_sources) +
                                                      static_cast<double>(n) * static_cast<double>(out_targets));
    if (cost < best_cost) {
      best_cost = cost;
      best = plan;
      best.cost = cost;
      sp.lo = lo;
      sp.extent = hi - lo;
    }
    if (cut == 0 && trim > 0.0) break;  // too few points to trim
  }
  if (best.order == 0) return best;
  hi = sp.lo + sp.extent;
  lo = sp.lo;
  sp.source_inside.assign(static_cast<std::size_t>(n), 1);
  sp.target_inside.assign(static_cast<std::size_t>(m), 1);
  sp.outside_sources.clear();
  for (Eigen::Index j = 0; j < n; ++j)
    if (!inside(sp.zs, j)) {
      sp.source_inside[static_cast<std::size_t>(j)] = 0;
      if (sp.weight[static_cast<std::size_t>(j)] > 0.0) sp.outside_sources.push_back(j);
    }
  for (Eigen::Index i = 0; i < m; ++i) sp.target_inside[static_cast<std::size_t>(i)] = inside(sp.zt, i) ? 1 : 0;
  return best;
}

// The nodes of one pass's grid (spacing rho over sp's box) and where a point lies on it.
struct PassGrid {
  const ScaledProblem& sp;
  double rho;
  int k;
  std::vector<Eigen::Index> nodes;  // per dimension
  Eigen::Index widest = 1, node_count = 1;

  PassGrid(const ScaledProblem& problem, double spacing)
      : sp(problem), rho(spacing), k(static_cast<int>(problem.zt.cols())), nodes(static_cast<std::size_t>(k)) {
    for (int e = 0; e < k; ++e) {
      nodes[static_cast<std::size_t>(e)] = nodes_for(sp.extent[e], rho);
      widest = std::max(widest, nodes[static_cast<std::size_t>(e)]);
      node_count *= nodes[static_cast<std::size_t>(e)];
    }
  }
  // A point's node (per dimension, the nearest; offsets within rho / 2) and its linear index.
  Eigen::Index locate(const GaussMatrix& z, Eigen::Index i, Eigen::Index* node, double* offset) const {
    Eigen::Index linear = 0;
    for (int e = 0; e < k; ++e) {
      const double t = (z(i, e) - sp.lo[e]) / rho;
      Eigen::Index me = static_cast<Eigen::Index>(std::llround(t));
      me = std::clamp<Eigen::Index>(me, 0, nodes[static_cast<std::size_t>(e)] - 1);
      node[e] = me;
      offset[e] = z(i, e) - (sp.lo[e] + rho * static_cast<double>(me));
      linear = linear * nodes[static_cast<std::size_t>(e)] + me;
    }
    return linear;
  }
};

// The sources sorted by node (counting sort), so that one thread writes each node's moments: node
// g's sources are order[start[g]], ..., order[start[g + 1] - 1].
struct SourcesByNode {
  std::vector<Eigen::Index> start, order;
};

SourcesByNode sources_by_node(const PassGrid& pg) {
  const GaussMatrix& zs = pg.sp.zs;
  const Eigen::Index n = zs.rows(), node_count = pg.node_count;
  SourcesByNode s;
  std::vector<Eigen::Index> source_node(static_cast<std::size_t>(n));
  s.start.assign(static_cast<std::size_t>(node_count + 1), 0);
  {
    Eigen::Index node[3];
    double offset[3];
    for (Eigen::Index j = 0; j < n; ++j) {
      source_node[static_cast<std::size_t>(j)] = pg.locate(zs, j, node, offset);
      ++s.start[static_cast<std::size_t>(source_node[static_cast<std::size_t>(j)] + 1)];
    }
  }
  for (Eigen::Index g = 0; g < node_count; ++g) s.start[static_cast<std::size_t>(g + 1)] += s.start[static_cast<std::size_t>(g)];
  s.order.resize(static_cast<std::size_t>(n));
  std::vector<Eigen::Index> fill(s.start.begin(), s.start.end() - 1);
  for (Eigen::Index j = 0; j < n; ++j)
    s.order[static_cast<std::size_t>(fill[static_cast<std::size_t>(source_node[static_cast<std::size_t>(j)])]++)] = j;
  return s;
}

// One pass's expansion: the Taylor coefficients at every node (grid: p terms per dimension,
// C = grid_channels(c) channels: 1, the values, their norms) and the envelope at every node
// (envelope_grid: the weight and the weighted norm). A node's coefficients are p^(k-1) runs of
// W = p C contiguous doubles (the last dimension's terms, channels inside); lead[r] is the offset
// of run r (leading multi-index r, row-major) in a node.
struct GridExpansion {
  GridShape grid, envelope_grid;
  std::vector<double> moments, envelope;
  std::vector<Eigen::Index> lead;
  // Per dimension e and node index m_e: the sums of b_j and b_j |v_j| over the sources whose node
  // lies more than `band` nodes from m_e along e (2 G_e entries, band_tails). A pair the band
  // leaves out is more than band nodes apart along some dimension, so the sum over e of a row's
  // entries bounds the weight of its pairs left out.
  std::vector<std::vector<double>> beyond;
};

// GridExpansion::beyond from the envelope's node sums (before their translation): the node sums
// added up along every dimension but e (the marginal along e), then per m_e the marginal's prefix
// below m_e - band and its suffix above m_e + band, each a sum of positive terms in a fixed order
// (no cancellation, the same on any thread count).
std::vector<std::vector<double>> band_tails(const std::vector<Eigen::Index>& nodes, const std::vector<double>& node_sums,
                                            int band) {
  const std::size_t k = nodes.size();
  std::vector<std::vector<double>> beyond(k);
  Eigen::Index count = 1;
  for (const Eigen::Index G : nodes) count *= G;
  for (std::size_t e = 0; e < k; ++e) {
    const Eigen::Index G = nodes[e];
    beyond[e].assign(static_cast<std::size_t>(2 * G), 0.0);
    if (G <= band + 1) continue;  // every pair within the band along e
    Eigen::Index inner = 1;  // nodes per step of m_e (row-major)
    for (std::size_t f = e + 1; f < k; ++f) inner *= nodes[f];
    std::vector<double> marginal(static_cast<std::size_t>(2 * G), 0.0);
    for (Eigen::Index g = 0; g < count; ++g) {
      const auto at = static_cast<std::size_t>(2 * ((g / inner) % G));
      marginal[at] += node_sums[static_cast<std::size_t>(2 * g)];
      marginal[at + 1] += node_sums[static_cast<std::size_t>(2 * g + 1)];
    }
    // prefix[m] = sum over m' < m, suffix[m] = sum over m' >= m (2 channels each).
    std::vector<double> prefix(static_cast<std::size_t>(2 * (G + 1)), 0.0), suffix(prefix.size(), 0.0);
    for (Eigen::Index m = 0; m < G; ++m)
      for (int ch = 0; ch < 2; ++ch)
        prefix[static_cast<std::size_t>(2 * (m + 1) + ch)] =
            prefix[static_cast<std::size_t>(2 * m + ch)] + marginal[static_cast<std::size_t>(2 * m + ch)];
    for (Eigen::Index m = G; m-- > 0;)
      for (int ch = 0; ch < 2; ++ch)
        suffix[static_cast<std::size_t>(2 * m + ch)] =
            suffix[static_cast<std::size_t>(2 * (m + 1) + ch)] + marginal[static_cast<std::size_t>(2 * m + ch)];
    for (Eigen::Index m = 0; m < G; ++m) {
      const Eigen::Index below = std::max<Eigen::Index>(0, m - band), above = std::min<Eigen::Index>(G, m + band + 1);
      for (int ch = 0; ch < 2; ++ch)
        beyond[e][static_cast<std::size_t>(2 * m + ch)] =
            prefix[static_cast<std::size_t>(2 * below + ch)] + suffix[static_cast<std::size_t>(2 * above + ch)];
    }
  }
  return beyond;
}

// Moments per node: sum_j b_j (1, v_j, |v_j|) w_j^beta; the envelope's node sums b_j (1, |v_j|).
// Per source, the run of the last dimension (its powers times the channels) is formed once and
// added to each leading run times that run's monomial: contiguous, vectorized multiply-adds.
void node_moments(const PassGrid& pg, const SourcesByNode& sources, GridExpansion& x) {
  const ScaledProblem& sp = pg.sp;
  const GaussMatrix& zs = sp.zs;
  const GaussMatrix& values = *sp.values;
  const int k = pg.k, p = x.grid.p, C = x.grid.channels, c = value_columns(C), W = p * C;
  const Eigen::Index L = static_cast<Eigen::Index>(x.lead.size()), node_count = pg.node_count;
  const std::vector<Eigen::Index>& start = sources.start;
  const std::vector<Eigen::Index>& order = sources.order;
  // Per source, L runs of W multiply-adds.
#pragma omp parallel if (parallel_work(static_cast<double>(zs.rows()) * static_cast<double>(L * W)))
  {
    std::vector<double> local(static_cast<std::size_t>(L * W)), run(static_cast<std::size_t>(W));
    std::vector<double> bv(static_cast<std::size_t>(C));
    Eigen::Index node[3];
    double offset[3], pw[3][64];
#pragma omp for schedule(dynamic, 16)
    for (Eigen::Index g = 0; g < node_count; ++g) {
      const Eigen::Index first = start[static_cast<std::size_t>(g)], last = start[static_cast<std::size_t>(g + 1)];
      if (first == last) continue;
      std::fill(local.begin(), local.end(), 0.0);
      double env_weight = 0.0, env_norm = 0.0;
      for (Eigen::Index r = first; r < last; ++r) {
        const Eigen::Index j = order[static_cast<std::size_t>(r)];
        const double b = sp.weight[static_cast<std::size_t>(j)];
        if (b == 0.0 || !sp.source_inside[static_cast<std::size_t>(j)]) continue;
        pg.locate(zs, j, node, offset);
        offset_powers(offset, k, p, pw);
        bv[0] = b;
        if (C > 1) {
          for (int e = 0; e < c; ++e) bv[static_cast<std::size_t>(e + 1)] = b * values(j, e);
          bv[static_cast<std::size_t>(c + 1)] = b * sp.value_norm[static_cast<std::size_t>(j)];
        }
        for (int a = 0; a < p; ++a)
          for (int ch = 0; ch < C; ++ch)
            run[static_cast<std::size_t>(a * C + ch)] = pw[k - 1][a] * bv[static_cast<std::size_t>(ch)];
        for (Eigen::Index l = 0; l < L; ++l) {
          const double coefficient = leading_monomial(pw, k, p, l);
          double* out = local.data() + l * W;
          const double* in = run.data();
#pragma omp simd
          for (int t = 0; t < W; ++t) out[t] += coefficient * in[t];
        }
        env_weight += b;
        env_norm += b * sp.value_norm[static_cast<std::size_t>(j)];
      }
      pg.locate(zs, order[static_cast<std::size_t>(first)], node, offset);
      const Eigen::Index base = x.grid.node_offset(node);
      for (Eigen::Index l = 0; l < L; ++l)
        std::copy_n(local.data() + l * W, W, x.moments.data() + base + x.lead[static_cast<std::size_t>(l)]);
      const Eigen::Index env_base = x.envelope_grid.node_offset(node);
      x.envelope[static_cast<std::size_t>(env_base)] = env_weight;
      x.envelope[static_cast<std::size_t>(env_base + 1)] = env_norm;
    }
  }
}

// The sources' moments on the grid of pg (order p, translations within `band` nodes), translated
// into the Taylor coefficients and the envelope at every node.
GridExpansion expand_sources(const PassGrid& pg, int p, int band) {
  const int k = pg.k, C = grid_channels(static_cast<int>(pg.sp.values->cols()));
  GridExpansion x{GridShape(pg.nodes, p, C), GridShape(pg.nodes, 1, 2), {}, {}, {}, {}};
  const SourcesByNode sources = sources_by_node(pg);
  const Eigen::Index L = static_cast<Eigen::Index>(std::llround(std::pow(p, k - 1)));
  x.moments.assign(static_cast<std::size_t>(x.grid.size()), 0.0);
  x.envelope.assign(static_cast<std::size_t>(x.envelope_grid.size()), 0.0);
  std::vector<double> scratch(x.moments.size()), envelope_scratch(x.envelope.size());
  x.lead.resize(static_cast<std::size_t>(L));
  for (Eigen::Index l = 0; l < L; ++l) x.lead[static_cast<std::size_t>(l)] = term_offset(x.grid, k, l * p);
  node_moments(pg, sources, x);
  x.beyond = band_tails(pg.nodes, x.envelope, band);

  // Moments -> Taylor coefficients at every node; node sums -> the envelope at every node.
  apply_translations(x.grid, translation_strip(p, pg.rho, band, false), band, x.moments, scratch);
  apply_translations(x.envelope_grid, translation_strip(1, pg.rho, band, true), band, x.envelope, envelope_scratch);
  return x;
}

// Where a pass writes: the rows it accepts get out(i) (and log_partition, shifted by log_scale)
// and exact[i] = 0; a rejected row's ratio goes to ratio[i].
struct PassOutput {
  GaussMatrix& out;
  Eigen::VectorXd* log_partition;
  double log_scale;
  std::vector<char>& exact;
  std::vector<double>& ratio;
};

// Pairs of an exact sum whose kernel exp(-r2) has r2 beyond this (simd::exp_poly's domain) are left
// out: each below exp(-707) = 9e-308 times its weight.
constexpr double kFarExponent = 707.0;

// The sources outside the grid's box, by column (coordinates with the dimensions beyond k zero,
// weight, values, norm), summed exactly into a row: contiguous runs that the distance and
// simd::exp_poly loops vectorize over (where a libm exp per pair was most of a d = 3 pass).
class OutsideSources {
 public:
  OutsideSources(const ScaledProblem& sp, int c)
      : k_(static_cast<int>(sp.zs.cols())), c_(c),
        columns_(Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(sp.outside_sources.size()), 3 + c + 2)) {
    for (Eigen::Index q = 0; q < columns_.rows(); ++q) {
      const Eigen::Index j = sp.outside_sources[static_cast<std::size_t>(q)];
      for (int e = 0; e < k_; ++e) columns_(q, e) = sp.zs(j, e);
      columns_(q, 3) = sp.weight[static_cast<std::size_t>(j)];
      for (int e = 0; e < c_; ++e) columns_(q, 4 + e) = (*sp.values)(j, e);
      columns_(q, 4 + c_) = sp.value_norm[static_cast<std::size_t>(j)];
    }
  }
  Eigen::Index count() const { return columns_.rows(); }
  // For the target t (k coordinates, row-major): F[0] += sum_q w_q, F[1 + e] += sum_q w_q v_qe,
  // F[c + 1] += sum_q w_q |v_q|, with w_q = b_q exp(-|t - z_q|^2), and 0 where |t - z_q|^2 >
  // kFarExponent (below simd::exp_poly's domain; those pairs are left out). The kernel by
  // simd::exp_poly (within 2 ulp, src/simd/exp.hpp), far below the 0.1 tol of slack the acceptance
  // keeps; the sums in simd::ordered_sum's fixed order (the same on any thread count). `w`,
  // `left`: count() doubles each. left_out[0], left_out[1]: the sums of b_q and b_q |v_q| over
  // the pairs left out (each pair's kernel below exp(-kFarExponent)).
  void add(const double* t, double* F, double* w, double* left, double* left_out) const {
    left_out[0] = left_out[1] = 0.0;
    const Eigen::Index n = count();
    if (n == 0) return;
    const double t0 = t[0], t1 = k_ > 1 ? t[1] : 0.0, t2 = k_ > 2 ? t[2] : 0.0;
    const double *s0 = columns_.col(0).data(), *s1 = columns_.col(1).data(), *s2 = columns_.col(2).data(),
                 *weight = columns_.col(3).data();
#pragma omp simd
    for (Eigen::Index q = 0; q < n; ++q) {
      const double r2 = (t0 - s0[q]) * (t0 - s0[q]) + (t1 - s1[q]) * (t1 - s1[q]) + (t2 - s2[q]) * (t2 - s2[q]);
      const double kernel = weight[q] * simd::exp_poly(-r2);
      w[q] = r2 > kFarExponent ? 0.0 : kernel;
      left[q] = r2 > kFarExponent ? weight[q] : 0.0;
    }
    F[0] += simd::ordered_sum(n, [w](Eigen::Index q) { return w[q]; });
    const double* norm = columns_.col(4 + c_).data();
    left_out[0] = simd::ordered_sum(n, [left](Eigen::Index q) { return left[q]; });
    left_out[1] = simd::ordered_sum(n, [left, norm](Eigen::Index q) { return left[q] * norm[q]; });
    for (int ch = 1; ch < c_ + 2; ++ch) {
      const double* column = columns_.col(3 + ch).data();
      F[ch] += simd::ordered_sum(n, [w, column](Eigen::Index q) { return w[q] * column[q]; });
    }
  }

 private:
  int k_, c_;
  Eigen::MatrixXd columns_;  // column-major: each column contiguous
};

// Evaluates the expansion x at every row still exact inside the box (plus the sources outside the
// box, exactly) and accepts the rows whose certificate holds (expansion bound `bound`, band `band`,
// tol); returns the rows accepted.
Eigen::Index accept_rows(const PassGrid& pg, const GridExpansion& x, double bound, int band, double tol,
                         PassOutput& o) {
  const ScaledProblem& sp = pg.sp;
  const GaussMatrix& zt = sp.zt;
  const Eigen::Index m = zt.rows();
  const int k = pg.k, p = x.grid.p, C = x.grid.channels, c = value_columns(C), W = p * C;
  const Eigen::Index L = static_cast<Eigen::Index>(x.lead.size());
  const double rho = pg.rho;
  // Pairs beyond the band: kernel below exp(-(band rho)^2), each; dropped weights: below 1e-300
  // each. The pairs a row leaves out weigh at most what x.beyond and the sources outside the box
  // count for it (and at most every weight): a bound per row, where the sum of all weights, a
  // single bound for every row, exceeded by e^30 and more the sums of rows whose sources weigh
  // far less than the heaviest ones (the whitened form of tokens gathered into three clusters in
  // d = 3, whose covariance is nearly flat: every row of the first pass rejected at n = 5 10^4).
  const double band_r2 = (band * rho) * (band * rho), cut = std::exp(-band_r2), far_cut = std::exp(-kFarExponent);
  const double dropped_weight = static_cast<double>(sp.dropped) * kSmallestWeight;
  const double dropped_norm = dropped_weight * sp.largest_norm;
  const double eps = bound * 1.001;  // 1.001: the envelope's own rounding (a sum of positive terms)
  const double accept = 0.9 * tol;
  const OutsideSources outside(sp, c);
  Eigen::Index accepted = 0;
  // Per row, L runs of W multiply-adds and the outside sources' distances and exps.
#pragma omp parallel reduction(+ : accepted) \
    if (parallel_work(static_cast<double>(m) * static_cast<double>(L * W + 16 * outside.count())))
  {
    // F[0 .. c + 1]: the sum, the values' sums, the norms' sum (F[c + 1] stays 0 without values).
    std::vector<double> F(static_cast<std::size_t>(c + 2)), acc(static_cast<std::size_t>(W));
    std::vector<double> pair_weight(static_cast<std::size_t>(outside.count())), pair_left(pair_weight.size());
    Eigen::Index node[3];
    double offset[3], pw[3][64];
    // Dynamic: rows left to other passes cost nothing here, and a thread whose core another
    // process shares takes fewer chunks (each row writes only its own outputs).
#pragma omp for schedule(dynamic, 64)
    for (Eigen::Index i = 0; i < m; ++i) {
      if (!o.exact[static_cast<std::size_t>(i)] || !sp.target_inside[static_cast<std::size_t>(i)]) continue;
      pg.locate(zt, i, node, offset);
      offset_powers(offset, k, p, pw);
      // The leading runs weighted by their monomials, summed into acc (contiguous, vectorized
      // multiply-adds), then F_ch = sum_a pw_{k-1}[a] acc[a C + ch].
      const double* base = x.moments.data() + x.grid.node_offset(node);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (Eigen::Index l = 0; l < L; ++l) {
        const double coefficient = leading_monomial(pw, k, p, l);
        const double* in = base + x.lead[static_cast<std::size_t>(l)];
        double* out = acc.data();
#pragma omp simd
        for (int t = 0; t < W; ++t) out[t] += coefficient * in[t];
      }
      std::fill(F.begin(), F.end(), 0.0);
      for (int a = 0; a < p; ++a)
        for (int ch = 0; ch < C; ++ch)
          F[static_cast<std::size_t>(ch)] += pw[k - 1][a] * acc[static_cast<std::size_t>(a * C + ch)];
      // Sources outside the box, exactly (pairs beyond exp_poly's domain left out, counted in
      // `far`); the grid's pairs beyond the band, counted in x.beyond: absolute_weight and
      // absolute_norm bound every pair left out, of any source.
      double far[2], left_out[2] = {0.0, 0.0};
      outside.add(zt.row(i).data(), F.data(), pair_weight.data(), pair_left.data(), far);
      for (int e = 0; e < k; ++e) {
        left_out[0] += x.beyond[static_cast<std::size_t>(e)][static_cast<std::size_t>(2 * node[e])];
        left_out[1] += x.beyond[static_cast<std::size_t>(e)][static_cast<std::size_t>(2 * node[e] + 1)];
      }
      // 1.001: the rounding of these sums of positive terms. Every pair left out also has its
      // kernel below `cut` (e^-707 <= cut), so cut times the sum of all weights bounds them too:
      // the smaller bound is taken, and no row is certified less often than under that one alone
      // (with the factor on it, rows of tight clusters, alike to the last bits, were rejected
      // together where that bound was the binding term).
      const double absolute_weight =
          std::min(1.001 * (cut * left_out[0] + far_cut * far[0]), cut * sp.weight_sum) + dropped_weight;
      const double absolute_norm =
          std::min(1.001 * (cut * left_out[1] + far_cut * far[1]), cut * sp.weighted_norm_sum) + dropped_norm;
      const double* env = x.envelope.data() + x.envelope_grid.node_offset(node);
      // The certificate (docs/fast-summation.md): with |D - F0| <= E0, |N - FN| <= EN (2-norm) and
      // |A - FA| <= EN for A = sum_j b_j K_ij |v_j|, the average's error is at most
      // (EN + |v| E0) / F0 with |v| <= A / D, and the bound asked for is tol A / D.
      const double F0 = F[0], FA = F[static_cast<std::size_t>(c + 1)];
      const double E0 = eps * env[0] + absolute_weight, EN = eps * env[1] + absolute_norm;
      double r = std::numeric_limits<double>::infinity();
      if (F0 - E0 > 0.0 && std::isfinite(F0) && std::isfinite(FA)) {
        const double upper = (FA + EN) / (F0 - E0), lower = (FA - EN) / (F0 + E0);
        const double error = (EN + upper * E0) / F0;
        // Also the sum itself within tol (log_partition; E0 / F0 bounds its log's error).
        const double excess = std::max(lower > 0.0 ? error / (accept * lower) : (error > 0.0 ? INFINITY : 0.0),
                                       E0 / (accept * F0));
        r = excess <= 1.0 ? 0.0 : excess;
      }
      if (r > 0.0) {
        o.ratio[static_cast<std::size_t>(i)] = r;
        continue;
      }
      for (int e = 0; e < c; ++e) o.out(i, e) = F[static_cast<std::size_t>(e + 1)] / F0;
      if (o.log_partition) (*o.log_partition)[i] = std::log(F0) + o.log_scale;
      o.exact[static_cast<std::size_t>(i)] = 0;
      ++accepted;
    }
  }
  return accepted;
}

// One grid pass with `plan`: every row i with exact[i] set whose certificate holds gets out(i) and
// exact[i] = 0; a rejected row's ratio (its error bound over the bound asked for; +inf when the
// sum's lower bound is not positive) goes to `ratio`. Returns the rows accepted.
Eigen::Index grid_pass(const ScaledProblem& sp, const GaussGridPlan& plan, double tol, GaussMatrix& out,
                       Eigen::VectorXd* log_partition, double log_scale, std::vector<char>& exact,
                       std::vector<double>& ratio, Eigen::Index& node_count) {
  const PassGrid pg(sp, plan.spacing);
  node_count = pg.node_count;
  const int p = plan.order, band = plan.band;
  // The certificate's bound from the grid actually built (plan.bound holds the planner's value of
  // the same formula): a plan that did not match its grid could not loosen it. A few microseconds.
  const double bound =
      gauss_expansion_bound(pg.rho, p, pg.k, static_cast<int>(std::min<Eigen::Index>(pg.widest, 2 * band + 1)));
  const GridExpansion x = expand_sources(pg, p, band);
  PassOutput o{out, log_partition, log_scale, exact, ratio};
  return accept_rows(pg, x, bound, band, tol, o);
}

}  // namespace

namespace {

// Checks gauss_average's arguments; returns the largest log weight.
double check_gauss_arguments(const GaussMatrix& targets, const GaussMatrix& sources, const Eigen::VectorXd& log_weights,
                             const GaussMatrix& values, double s, const GaussAverageOptions& options) {
  const Eigen::Index n = sources.rows();
  const int k = static_cast<int>(targets.cols());
  if (k < 1 || k > 3 || sources.cols() != k || log_weights.size() != n || values.rows() != n)
    throw std::invalid_argument("gauss_average: targets m x k and sources n x k with k in 1..3, log_weights n, values n x c");
  if (!(s > 0.0) || !std::isfinite(s)) throw std::invalid_argument("gauss_average: s must be positive and finite");
  if (!(options.tol > 0.0 && options.tol < 1.0)) throw std::invalid_argument("gauss_average: tol must lie in (0, 1)");
  double largest = -std::numeric_limits<double>::infinity();
  for (Eigen::Index j = 0; j < n; ++j) {
    if (std::isnan(log_weights[j]) || log_weights[j] == std::numeric_limits<double>::infinity())
      throw std::invalid_argument("gauss_average: log_weights must be finite or -inf");
    largest = std::max(largest, log_weights[j]);
  }
  if (!std::isfinite(largest)) throw std::invalid_argument("gauss_average: every weight is 0");
  if (!targets.allFinite() || !sources.allFinite() || !values.allFinite())
    throw std::invalid_argument("gauss_average: targets, sources and values must be finite");
  return largest;
}

// The problem scaled to the kernel exp(-|z - z'|^2) (z = sqrt(s) x), the weights divided by the
// largest, exp(largest).
ScaledProblem scaled_problem(const GaussMatrix& targets, const GaussMatrix& sources, const Eigen::VectorXd& log_weights,
                             const GaussMatrix& values, double s, double largest) {
  const Eigen::Index n = sources.rows();
  ScaledProblem sp;
  const double root = std::sqrt(s);
  sp.zt = root * targets;
  sp.zs = root * sources;
  sp.log_weights = &log_weights;
  sp.values = &values;
  sp.weight.resize(static_cast<std::size_t>(n));
  sp.value_norm.resize(static_cast<std::size_t>(n));
  // The exps and norms in parallel; the sums after, in order (the same on any thread count).
#pragma omp parallel for schedule(static) if (parallel_work(16.0 * static_cast<double>(n)))
  for (Eigen::Index j = 0; j < n; ++j) {
    const double b = std::exp(log_weights[j] - largest);
    const auto u = static_cast<std::size_t>(j);
    sp.weight[u] = b >= kSmallestWeight ? b : 0.0;
    sp.value_norm[u] = values.cols() > 0 ? values.row(j).norm() : 0.0;
  }
  for (Eigen::Index j = 0; j < n; ++j) {
    const auto u = static_cast<std::size_t>(j);
    sp.dropped += sp.weight[u] == 0.0 && log_weights[j] > -std::numeric_limits<double>::infinity();
    sp.largest_norm = std::max(sp.largest_norm, sp.value_norm[u]);
    sp.weight_sum += sp.weight[u];
    sp.weighted_norm_sum += sp.weight[u] * sp.value_norm[u];
  }
  return sp;
}

// The grid passes, when a grid pays (stats.grid, plan, passes, nodes): the first with the plan of
// the first target; a second, finer one when over 1% of the rows were rejected. Returns the rows
// accepted; o.exact marks the others.
Eigen::Index grid_passes(ScaledProblem& sp, const GaussAverageOptions& options, PassOutput& o, GaussAverageStats& stats) {
  const Eigen::Index m = sp.zt.rows(), n = sp.zs.rows();
  const int k = static_cast<int>(sp.zt.cols()), c = static_cast<int>(sp.values->cols());
  const Eigen::Index points = std::max(n, m);
  const GaussGridPlan plan = choose_box(sp, gauss_first_target(options.tol, k), c, options.max_grid_bytes);
  Eigen::Index accepted = 0;
  if (plan.order > 0 && plan.cost <= options.max_cost_per_pair * static_cast<double>(m) * static_cast<double>(n)) {
    stats.grid = true;
    stats.plan = plan;
    stats.passes = 1;
    accepted = grid_pass(sp, plan, options.tol, o.out, o.log_partition, o.log_scale, o.exact, o.ratio, stats.nodes);
    // Rows rejected by the certificate (not outside the box): once more with the bound that would
    // have accepted 99% of them (the error bound scales with the truncation bound), if such a grid
    // exists (rounding floors it) and its pass costs less than their exact sums would. (Without
    // the pass, 0.5% of the rows of each Sinkhorn soft-min at n = 10^6 went to exact sums over all
    // 10^6 sources: 77% of the solve's time. Run whatever its cost, it took 6.9 s where the exact
    // sums of its 32370 rows took 1.6, at n = 5 10^4 in d = 3.)
    const Eigen::Index rejected = m - accepted;
    std::vector<double> finite;
    for (Eigen::Index i = 0; i < m; ++i)
      if (o.exact[static_cast<std::size_t>(i)] && o.ratio[static_cast<std::size_t>(i)] > 0.0 &&
          std::isfinite(o.ratio[static_cast<std::size_t>(i)]))
        finite.push_back(o.ratio[static_cast<std::size_t>(i)]);
    if (!finite.empty() && (rejected <= m / 100 || finite.size() >= static_cast<std::size_t>(rejected) / 2)) {
      const auto q = finite.begin() + static_cast<std::ptrdiff_t>(0.99 * static_cast<double>(finite.size() - 1));
      std::nth_element(finite.begin(), q, finite.end());
      const GaussGridPlan finer = gauss_grid_plan(plan.bound / (2.0 * *q), sp.extent, points, c, options.max_grid_bytes);
      const double exact_cost = kExactPairCost * static_cast<double>(finite.size()) * static_cast<double>(n);
      if (finer.order > 0 && finer.cost < exact_cost) {
        stats.plan = finer;
        stats.passes = 2;
        accepted += grid_pass(sp, finer, options.tol, o.out, o.log_partition, o.log_scale, o.exact, o.ratio, stats.nodes);
      }
    }
  }
  return accepted;
}

// The sources in cells of a uniform grid over their bounding box (about kSourcesPerCell each),
// each cell's sources contiguous, with per cell the bounding box, the largest log-weight and the
// coordinates of a source that has it. exact_rows leaves out the cells whose every term is below
// e^-kDropExponent times the row's largest.
constexpr double kSourcesPerCell = 64.0;
struct SourceCells {
  int k = 0;
  std::vector<std::vector<double>> coordinate;  // per dimension, cell by cell (unit stride)
  std::vector<std::vector<double>> value;       // per value column, cell by cell (unit stride)
  std::vector<double> log_weight;               // cell by cell
  std::vector<Eigen::Index> start;              // cell c holds entries start[c] .. start[c + 1] - 1
  std::vector<double> lo, hi, top,
      top_at;  // per cell: box (k each), largest log-weight, its point (k)
};

SourceCells source_cells(const GaussMatrix& zs, const Eigen::VectorXd& log_weights, const GaussMatrix& values) {
  const Eigen::Index n = zs.rows();
  const int k = static_cast<int>(zs.cols());
  SourceCells cells;
  cells.k = k;
  const Eigen::RowVectorXd lo = zs.colwise().minCoeff(), hi = zs.colwise().maxCoeff();
  const auto per_dim = static_cast<Eigen::Index>(std::clamp(
      std::floor(std::pow(static_cast<double>(n) / kSourcesPerCell, 1.0 / k)), 1.0, 1024.0));
  Eigen::Index count = 1;
  for (int e = 0; e < k; ++e) count *= per_dim;
  auto cell_of = [&](Eigen::Index j) {
    Eigen::Index c = 0;
    for (int e = 0; e < k; ++e) {
      const double width = hi[e] - lo[e];
      const auto at =
          width > 0.0
              ? static_cast<Eigen::Index>((zs(j, e) - lo[e]) / width * static_cast<double>(per_dim))
              : 0;
      c = c * per_dim + std::clamp<Eigen::Index>(at, 0, per_dim - 1);
    }
    return c;
  };
  std::vector<Eigen::Index> cell(static_cast<std::size_t>(n));
  cells.start.assign(static_cast<std::size_t>(count + 1), 0);
  for (Eigen::Index j = 0; j < n; ++j) {
    cell[static_cast<std::size_t>(j)] = cell_of(j);
    ++cells.start[static_cast<std::size_t>(cell[static_cast<std::size_t>(j)] + 1)];
  }
  for (Eigen::Index c = 0; c < count; ++c)
    cells.start[static_cast<std::size_t>(c + 1)] += cells.start[static_cast<std::size_t>(c)];
  std::vector<Eigen::Index> fill(cells.start.begin(), cells.start.end() - 1);
  std::vector<Eigen::Index> original(static_cast<std::size_t>(n));  // the source of each entry
  for (Eigen::Index j = 0; j < n; ++j)
    original[static_cast<std::size_t>(fill[static_cast<std::size_t>(cell[static_cast<std::size_t>(j)])]++)] = j;
  cells.value.assign(static_cast<std::size_t>(values.cols()), std::vector<double>(static_cast<std::size_t>(n)));
  for (std::size_t r = 0; r < original.size(); ++r)
    for (Eigen::Index e = 0; e < values.cols(); ++e)
      cells.value[static_cast<std::size_t>(e)][r] = values(original[r], e);
  cells.coordinate.assign(static_cast<std::size_t>(k),
                          std::vector<double>(static_cast<std::size_t>(n)));
  cells.log_weight.resize(static_cast<std::size_t>(n));
  const auto cell_count = static_cast<std::size_t>(count), dims = static_cast<std::size_t>(k);
  cells.lo.assign(cell_count * dims, std::numeric_limits<double>::infinity());
  cells.hi.assign(cell_count * dims, -std::numeric_limits<double>::infinity());
  cells.top.assign(cell_count, -std::numeric_limits<double>::infinity());
  cells.top_at.assign(cell_count * dims, 0.0);
  for (std::size_t c = 0; c < cell_count; ++c)
    for (Eigen::Index r = cells.start[c]; r < cells.start[c + 1]; ++r) {
      const Eigen::Index j = original[static_cast<std::size_t>(r)];
      cells.log_weight[static_cast<std::size_t>(r)] = log_weights[j];
      for (std::size_t e = 0; e < dims; ++e) {
        const double z = zs(j, static_cast<Eigen::Index>(e));
        cells.coordinate[e][static_cast<std::size_t>(r)] = z;
        cells.lo[c * dims + e] = std::min(cells.lo[c * dims + e], z);
        cells.hi[c * dims + e] = std::max(cells.hi[c * dims + e], z);
      }
      if (log_weights[j] > cells.top[c]) {
        cells.top[c] = log_weights[j];
        for (std::size_t e = 0; e < dims; ++e)
          cells.top_at[c * dims + e] = zs(j, static_cast<Eigen::Index>(e));
      }
    }
  return cells;
}

// A term e^{x_j - top} below e^-kDropExponent is left out of an exact row: n of them add at most
// n e^-kDropExponent of the sum, e^-40 = 4e-18 with kDropExponent = 40 + log n, below the rounding
// of the sum itself (n u relative).
constexpr double kDropMargin = 40.0;

// The cells of `cells` that may hold a term within e^-drop of the row's largest, for the target
// t (k entries): a term that exists (each cell's heaviest source) gives a floor, and a cell is
// kept when its largest log-weight minus its box's squared distance to t reaches within `drop`
// of it.
void cells_near(const SourceCells& cells, const double* t, double drop, std::vector<Eigen::Index>& kept) {
  const auto dims = static_cast<std::size_t>(cells.k);
  const auto cell_count = static_cast<Eigen::Index>(cells.top.size());
  auto empty = [&](Eigen::Index q) {
    return cells.start[static_cast<std::size_t>(q)] == cells.start[static_cast<std::size_t>(q + 1)];
  };
  double found = -std::numeric_limits<double>::infinity();
  for (Eigen::Index q = 0; q < cell_count; ++q) {
    if (empty(q)) continue;
    double r2 = 0.0;
    for (std::size_t e = 0; e < dims; ++e) {
      const double d = t[e] - cells.top_at[static_cast<std::size_t>(q) * dims + e];
      r2 += d * d;
    }
    found = std::max(found, cells.top[static_cast<std::size_t>(q)] - r2);
  }
  kept.clear();
  for (Eigen::Index q = 0; q < cell_count; ++q) {
    if (empty(q)) continue;
    double r2 = 0.0;  // from the target to the cell's box
    for (std::size_t e = 0; e < dims; ++e) {
      const auto at = static_cast<std::size_t>(q) * dims + e;
      const double d = std::max({cells.lo[at] - t[e], 0.0, t[e] - cells.hi[at]});
      r2 += d * d;
    }
    if (cells.top[static_cast<std::size_t>(q)] - r2 >= found - drop) kept.push_back(q);
  }
}

// One thread's buffers for exact rows.
struct ExactRowBuffers {
  std::vector<double> exponent;  // the kept terms' exponents, packed (up to n)
  std::vector<double> lanes;     // (c + 1) x simd::kSumLanes partial sums
  std::vector<Eigen::Index> kept;
};

// The lanes of exp(x_j - top) and of its products with the c value columns over the cells `kept`
// (x packed cell after cell), each cell from lane 0: an order fixed by the cells, so the same
// result at any address and thread count. out: (c + 1) x kSumLanes, the weights' lanes first.
// C = c known at compile time keeps the lanes in registers (-1: any c, lanes in `out`).
template <int C>
void sum_kept_cells(const SourceCells& cells, const std::vector<Eigen::Index>& kept, const double* x, double top,
                    int c, double* out) {
  constexpr int L = simd::kSumLanes;
  constexpr int held = C < 0 ? 1 : C + 1;
  double local[held][L] = {};
  if constexpr (C < 0) std::fill_n(out, (c + 1) * L, 0.0);
  for (const Eigen::Index q : kept) {
    const Eigen::Index a = cells.start[static_cast<std::size_t>(q)], len = cells.start[static_cast<std::size_t>(q + 1)] - a;
    auto block = [&](Eigen::Index j0, int width) {
      double w[L];
#pragma omp simd
      for (int l = 0; l < width; ++l) w[l] = simd::exp_poly(x[j0 + l] - top);
      double* weight_lanes = C < 0 ? out : local[0];
#pragma omp simd
      for (int l = 0; l < width; ++l) weight_lanes[l] += w[l];
      for (int e = 0; e < (C < 0 ? c : C); ++e) {
        const double* v = cells.value[static_cast<std::size_t>(e)].data() + a + j0;
        double* acc;
        if constexpr (C < 0)
          acc = out + (e + 1) * L;
        else
          acc = local[e + 1];
#pragma omp simd
        for (int l = 0; l < width; ++l) acc[l] += w[l] * v[l];
      }
    };
    Eigen::Index j0 = 0;
    for (; j0 + L <= len; j0 += L) block(j0, L);
    if (j0 < len) block(j0, static_cast<int>(len - j0));
    x += len;
  }
  if constexpr (C >= 0) std::copy_n(&local[0][0], (C + 1) * L, out);
}

// Row i of out (and log_partition) from the sources of the cells `buffers.kept`, for the target t:
// packs x_j = l_j - |t - z_j|^2, then one pass over the same cells of exp(x_j - max x) summed with
// its products with each value column (read in place). The sums run in kSumLanes lanes, each cell
// from lane 0 (an order fixed by the cells, so the same result at any address and thread count),
// added as simd::add_lanes does; exp by simd::exp_poly (within 2 ulp, vectorized where std::exp is
// a call per pair).
void exact_row(const SourceCells& cells, const double* t, Eigen::Index i, ExactRowBuffers& buffers,
               GaussMatrix& out, Eigen::VectorXd* log_partition) {
  const int k = cells.k, c = static_cast<int>(cells.value.size());
  constexpr int L = simd::kSumLanes;
  double* ex = buffers.exponent.data();
  Eigen::Index count = 0;
  for (const Eigen::Index q : buffers.kept) {
    const Eigen::Index a = cells.start[static_cast<std::size_t>(q)], len = cells.start[static_cast<std::size_t>(q + 1)] - a;
    const double* lw = cells.log_weight.data() + a;
    double* x = ex + count;
    const double* c0 = cells.coordinate[0].data() + a;
    const double t0 = t[0];
#pragma omp simd
    for (Eigen::Index j = 0; j < len; ++j) x[j] = lw[j] - (t0 - c0[j]) * (t0 - c0[j]);
    for (int e = 1; e < k; ++e) {
      const double* col = cells.coordinate[static_cast<std::size_t>(e)].data() + a;
      const double te = t[e];
#pragma omp simd
      for (Eigen::Index j = 0; j < len; ++j) x[j] -= (te - col[j]) * (te - col[j]);
    }
    count += len;
  }
  double top = -std::numeric_limits<double>::infinity();
  {
    // The largest exponent, in L independent lanes (one chain of max would not vectorize).
    double m[L];
    std::fill_n(m, L, top);
    Eigen::Index j = 0;
    for (; j + L <= count; j += L)
#pragma omp simd
      for (int l = 0; l < L; ++l) m[l] = ex[j + l] > m[l] ? ex[j + l] : m[l];
    for (; j < count; ++j) top = std::max(top, ex[j]);
    for (int l = 0; l < L; ++l) top = std::max(top, m[l]);
  }
  double* lanes = buffers.lanes.data();  // lanes[e L + l], e = 0 the weights, e > 0 value e - 1
  switch (c) {  // the common value counts with their lanes in registers
    case 0: sum_kept_cells<0>(cells, buffers.kept, ex, top, 0, lanes); break;
    case 1: sum_kept_cells<1>(cells, buffers.kept, ex, top, 1, lanes); break;
    case 2: sum_kept_cells<2>(cells, buffers.kept, ex, top, 2, lanes); break;
    case 3: sum_kept_cells<3>(cells, buffers.kept, ex, top, 3, lanes); break;
    default: sum_kept_cells<-1>(cells, buffers.kept, ex, top, c, lanes);
  }
  const double total = simd::add_lanes(lanes);
  for (int e = 0; e < c; ++e) out(i, e) = simd::add_lanes(lanes + (e + 1) * L) / total;
  if (log_partition) (*log_partition)[i] = top + std::log(total);
}

// The rows `rows`: exact sums over the sources in the log domain. A cell whose terms are all below
// e^-(40 + log n) times a term already found is left out (cells_near); the sums over the rest run
// over unit-stride columns (exact_row).
void exact_rows(const ScaledProblem& sp, const Eigen::VectorXd& log_weights, const std::vector<Eigen::Index>& rows,
                GaussMatrix& out, Eigen::VectorXd* log_partition) {
  if (rows.empty()) return;
  const GaussMatrix& zt = sp.zt;
  const Eigen::Index n = sp.zs.rows();
  const auto c = static_cast<std::size_t>(sp.values->cols());
  const SourceCells cells = source_cells(sp.zs, log_weights, *sp.values);
  const double drop = kDropMargin + std::log(static_cast<double>(n));
  // At most n exps and distances a row.
#pragma omp parallel if (parallel_work(16.0 * static_cast<double>(rows.size()) * static_cast<double>(n)))
  {
    ExactRowBuffers buffers;
    buffers.exponent.resize(static_cast<std::size_t>(n));
    buffers.lanes.resize((c + 1) * simd::kSumLanes);
#pragma omp for schedule(dynamic, 4)
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Eigen::Index i = rows[r];
      const double* t = zt.data() + i * zt.cols();  // row-major
      cells_near(cells, t, drop, buffers.kept);
      exact_row(cells, t, i, buffers, out, log_partition);
    }
  }
}

}  // namespace

GaussAverageStats gauss_average(const GaussMatrix& targets, const GaussMatrix& sources,
                                const Eigen::VectorXd& log_weights, const GaussMatrix& values, double s,
                                const GaussAverageOptions& options, GaussMatrix& out,
                                Eigen::VectorXd* log_partition) {
  const double largest = check_gauss_arguments(targets, sources, log_weights, values, s, options);
  const Eigen::Index m = targets.rows();
  out.resize(m, values.cols());
  if (log_partition) log_partition->resize(m);

  ScaledProblem sp = scaled_problem(targets, sources, log_weights, values, s, largest);
  GaussAverageStats stats;
  std::vector<char> exact(static_cast<std::size_t>(m), 1);
  std::vector<double> ratio(static_cast<std::size_t>(m), 0.0);
  PassOutput o{out, log_partition, largest, exact, ratio};
  const Eigen::Index accepted = grid_passes(sp, options, o, stats);
  stats.rows_expanded = accepted;
  stats.rows_exact = m - accepted;
  if (static_cast<double>(stats.rows_exact) > options.max_exact_fraction * static_cast<double>(m)) {
    stats.declined = true;
    return stats;
  }

  // The rows the certificate did not accept: exact sums over all sources, in the log domain (or
  // left to the caller).
  std::vector<Eigen::Index> rows;
  for (Eigen::Index i = 0; i < m; ++i)
    if (exact[static_cast<std::size_t>(i)]) rows.push_back(i);
  if (options.defer_rejected) {
    stats.rejected = std::move(rows);
    return stats;
  }
  exact_rows(sp, log_weights, rows, out, log_partition);
  return stats;
}

}  // namespace tokenflow
