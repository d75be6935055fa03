// Softmax attention on the circle at large beta: Eq. (M1)-(M4) of include/tokenflow/metastability.hpp.
#include "tokenflow/metastability.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace tokenflow {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

void check_tokens(const std::vector<double>& angles, const std::vector<double>& weights, double beta) {
  if (angles.empty() || angles.size() != weights.size())
    throw std::invalid_argument("metastability: angles and weights must be nonempty and of one length");
  for (std::size_t i = 0; i < angles.size(); ++i)
    if (!std::isfinite(angles[i]) || !(weights[i] > 0.0) || !std::isfinite(weights[i]))
      throw std::invalid_argument("metastability: angles must be finite and weights positive");
  if (!(beta > 0.0) || !std::isfinite(beta)) throw std::invalid_argument("metastability: beta must be positive");
}

std::vector<double> normalized(const std::vector<double>& w) {
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<double> out(w);
  for (double& x : out) x /= total;
  return out;
}

// F (Eq. M1) and, when `bound` is not null, the Gershgorin bound 2 max_i sum_{j != i} |dF_i/dt_j|:
// with N_i = sum_j a_j k_ij s_ij, D_i = sum_j a_j k_ij (s = sin, c = cos of t_j - t_i),
//   dF_i/dt_j = a_j k_ij ((c_ij - beta s_ij^2) D_i + beta s_ij N_i) / D_i^2   (j != i),
// and dF_i/dt_i = -sum_{j != i} dF_i/dt_j (F depends on differences only).
void field(const std::vector<double>& t, const std::vector<double>& a, double beta, std::vector<double>& f,
           double* bound) {
  const std::size_t n = t.size();
  f.assign(n, 0.0);
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    double num = 0.0, den = a[i];
    for (std::size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const double u = t[j] - t[i], k = std::exp(beta * (std::cos(u) - 1.0));
      num += a[j] * k * std::sin(u);
      den += a[j] * k;
    }
    f[i] = num / den;
    if (bound == nullptr) continue;
    double row = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const double u = t[j] - t[i], k = std::exp(beta * (std::cos(u) - 1.0)), s = std::sin(u);
      row += std::abs(a[j] * k * ((std::cos(u) - beta * s * s) * den + beta * s * num)) / (den * den);
    }
    worst = std::max(worst, 2.0 * row);
  }
  if (bound != nullptr) *bound = worst;
}

// Merges every pair closer than `gap` (radians, on the circle) into one token; returns whether any did.
bool merge_close(std::vector<double>& t, std::vector<double>& a, std::vector<double>& count, double gap) {
  bool merged = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    for (std::size_t j = i + 1; j < t.size();) {
      const double d = std::remainder(t[j] - t[i], kTwoPi);
      if (std::abs(d) >= gap) {
        ++j;
        continue;
      }
      t[i] += a[j] / (a[i] + a[j]) * d;
      a[i] += a[j];
      count[i] += count[j];
      t.erase(t.begin() + static_cast<long>(j));
      a.erase(a.begin() + static_cast<long>(j));
      count.erase(count.begin() + static_cast<long>(j));
      merged = true;
    }
  }
  return merged;
}

double squared_weights(const std::vector<double>& a) {
  double s = 0.0;
  for (double w : a) s += w * w;
  return s;
}

void record(CircleFlowPath& path, double t, double s, const std::vector<double>& angles,
            const std::vector<double>& a, double beta) {
  path.time.push_back(t);
  path.rescaled.push_back(s);
  path.energy.push_back(circle_energy(angles, a, beta));
  path.clusters.push_back(static_cast<int>(angles.size()));
  path.level.push_back(squared_weights(a));
}

// One RK4 step of size h; returns the increment.
std::vector<double> rk4_increment(const std::vector<double>& t, const std::vector<double>& a, double beta, double h,
                                  const std::vector<double>& k1) {
  const std::size_t n = t.size();
  std::vector<double> y(n), k2, k3, k4, inc(n);
  for (std::size_t i = 0; i < n; ++i) y[i] = t[i] + 0.5 * h * k1[i];
  field(y, a, beta, k2, nullptr);
  for (std::size_t i = 0; i < n; ++i) y[i] = t[i] + 0.5 * h * k2[i];
  field(y, a, beta, k3, nullptr);
  for (std::size_t i = 0; i < n; ++i) y[i] = t[i] + h * k3[i];
  field(y, a, beta, k4, nullptr);
  for (std::size_t i = 0; i < n; ++i) inc[i] = h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]);
  return inc;
}

}  // namespace

std::vector<double> circle_velocity(const std::vector<double>& angles, const std::vector<double>& weights,
                                    double beta) {
  check_tokens(angles, weights, beta);
  std::vector<double> f;
  field(angles, weights, beta, f, nullptr);
  return f;
}

double circle_energy(const std::vector<double>& angles, const std::vector<double>& weights, double beta) {
  check_tokens(angles, weights, beta);
  const std::vector<double> a = normalized(weights);
  double e = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double row = a[i];  // k_ii = 1
    for (std::size_t j = 0; j < a.size(); ++j)
      if (j != i) row += a[j] * std::exp(beta * (std::cos(angles[j] - angles[i]) - 1.0));
    e += a[i] * row;
  }
  return e;
}

CircleFlowPath run_circle_flow(std::vector<double> t, std::vector<double> a, const CircleFlowOptions& o) {
  check_tokens(t, a, o.beta);
  if (!(o.beta > 1.0)) throw std::invalid_argument("metastability: the rescaled time needs beta > 1");
  if (!(o.max_angle_step > 0.0) || !(o.stability > 0.0) || !(o.merge_gap >= 0.0) || !(o.t_max > 0.0))
    throw std::invalid_argument("metastability: max_angle_step, stability and t_max must be positive");
  a = normalized(a);
  std::vector<double> count(t.size(), 1.0), f;
  const double log_beta = std::log(o.beta);
  CircleFlowPath path;
  double now = 0.0, s = 0.0, h_prev = std::numeric_limits<double>::infinity();
  merge_close(t, a, count, o.merge_gap);
  record(path, now, s, t, a, o.beta);
  while (true) {
    if (t.size() == 1) {
      path.status = "one_cluster";
      break;
    }
    if (path.steps >= o.max_steps) {
      path.status = "max_steps";
      break;
    }
    double bound = 0.0;
    field(t, a, o.beta, f, &bound);
    double fmax = 0.0;
    for (double v : f) fmax = std::max(fmax, std::abs(v));
    if (fmax == 0.0) {
      path.status = "frozen";
      break;
    }
    double h = std::min({2.0 * h_prev, o.max_angle_step / fmax, bound > 0.0 ? o.stability / bound : INFINITY});
    const bool last = now + h >= o.t_max;
    if (last) h = o.t_max - now;
    const std::vector<double> inc = rk4_increment(t, a, o.beta, h, f);
    double arc = 0.0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      t[i] += inc[i];
      arc += count[i] * inc[i] * inc[i];
    }
    now = last ? o.t_max : now + h;
    s += std::sqrt(arc) / log_beta;
    h_prev = h;
    ++path.steps;
    merge_close(t, a, count, o.merge_gap);
    record(path, now, s, t, a, o.beta);
    if (last) {
      path.status = "t_max";
      break;
    }
  }
  path.final_angles = t;
  path.final_weights = a;
  return path;
}

namespace {

// The stretches of equal cluster counts in a recorded path (CircleFlowPath or NormalizedStepPath).
// A plateau ends at its last record, or with `to_next_merge` at the record of the merge that ends it
// (the normalized steps record every k steps but always at a merge).
template <class Path>
std::vector<Plateau> plateaus_of(const Path& path, bool to_next_merge) {
  std::vector<Plateau> out;
  std::size_t start = 0;
  for (std::size_t k = 1; k <= path.time.size(); ++k) {
    if (k < path.time.size() && path.clusters[k] == path.clusters[start]) continue;
    const std::size_t end = to_next_merge && k < path.time.size() ? k : k - 1;
    Plateau p;
    p.clusters = path.clusters[start];
    p.s_start = path.rescaled[start];
    p.t_start = path.time[start];
    p.s_end = path.rescaled[end];
    p.t_end = path.time[end];
    p.energy_level = path.level[start];
    p.energy_end = path.energy[k - 1];
    out.push_back(p);
    start = k;
  }
  return out;
}

}  // namespace

std::vector<Plateau> find_plateaus(const CircleFlowPath& path) { return plateaus_of(path, false); }
std::vector<Plateau> find_plateaus(const NormalizedStepPath& path) { return plateaus_of(path, true); }

double two_cluster_rate(double p, double q, double beta, double delta) {
  const double k = std::exp(-beta * (1.0 - std::cos(delta)));
  return k * std::sin(delta) * (q / (p + q * k) + p / (q + p * k));
}

double two_cluster_escape_time(double p, double q, double beta, double delta0, double delta1, long panels) {
  if (!(delta1 > 0.0) || !(delta1 <= delta0) || !(delta0 < kTwoPi / 2) || panels < 2 || panels % 2 != 0)
    throw std::invalid_argument("two_cluster_escape_time: needs 0 < delta1 <= delta0 < pi and an even panel count");
  // In v = log u: int du / G(u) = int u / G(u) dv, and u / G(u) = u (q/(p + q k) + p/(q + p k))^{-1} e^{beta (1 - cos u)} / sin u.
  const double v0 = std::log(delta1), v1 = std::log(delta0), h = (v1 - v0) / static_cast<double>(panels);
  auto g = [&](double v) {
    const double u = std::exp(v), k = std::exp(-beta * (1.0 - std::cos(u)));
    return u / std::sin(u) * std::exp(beta * (1.0 - std::cos(u))) / (q / (p + q * k) + p / (q + p * k));
  };
  double sum = g(v0) + g(v1);
  for (long i = 1; i < panels; ++i) sum += (i % 2 == 1 ? 4.0 : 2.0) * g(v0 + h * static_cast<double>(i));
  return sum * h / 3.0;
}

double two_cluster_escape_asymptotic(double p, double q, double beta, double delta0) {
  const double s = std::sin(delta0);
  return std::exp(beta * (1.0 - std::cos(delta0))) / (beta * s * s * (p / q + q / p));
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) throw std::invalid_argument("fit_line: needs two points or more");
  const double n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxx = 0.0, sxy = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  LineFit fit;
  fit.slope = sxy / sxx;
  fit.intercept = my - fit.slope * mx;
  for (std::size_t i = 0; i < x.size(); ++i)
    fit.max_residual = std::max(fit.max_residual, std::abs(y[i] - fit.intercept - fit.slope * x[i]));
  return fit;
}

std::vector<double> staircase_angles(double beta) {
  const double unit = std::log(beta) / std::sqrt(beta);
  return {0.0, 0.25 * unit, 1.0 * unit, 2.0 * unit, 3.5 * unit};
}

}  // namespace tokenflow
