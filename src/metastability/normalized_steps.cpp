// The authors' protocol through the attention engine: fixed-length steps along the normalized
// velocity, Eq. (M5) of include/tokenflow/metastability.hpp.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "tokenflow/attention.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/metastability.hpp"

namespace tokenflow {

namespace {

// The merged tokens: points on the unit circle (n x 2), weights (sum 1) and how many of the original
// tokens each holds.
struct CircleTokens {
  Points<double> x;
  std::vector<double> weight, count;

  std::size_t size() const { return weight.size(); }
  std::vector<double> angles() const {
    std::vector<double> t(size());
    for (std::size_t i = 0; i < size(); ++i) t[i] = std::atan2(x(Eigen::Index(i), 1), x(Eigen::Index(i), 0));
    return t;
  }
};

// sqrt(sum_i count_i |f_i|^2) for f with `width` numbers per token, scaled by the largest |f| so
// that velocities of e^{-490} (beta = 4000, clusters 0.5 apart) do not underflow when squared.
double count_norm(const double* f, const std::vector<double>& count, int width) {
  double top = 0.0, s = 0.0;
  for (std::size_t i = 0; i < count.size() * std::size_t(width); ++i) top = std::max(top, std::abs(f[i]));
  if (!(top > 0.0) || !std::isfinite(top)) return top;
  for (std::size_t i = 0; i < count.size(); ++i)
    for (int c = 0; c < width; ++c) s += count[i] * (f[i * width + c] / top) * (f[i * width + c] / top);
  return top * std::sqrt(s);
}

// Merges every pair closer than `gap` (the angle between them) into one token at the normalized
// weighted mean of the two; returns whether any merged.
bool merge_close_points(CircleTokens& tok, double gap) {
  bool merged = false;
  for (Eigen::Index i = 0; i < Eigen::Index(tok.size()); ++i) {
    for (Eigen::Index j = i + 1; j < Eigen::Index(tok.size());) {
      const double cross = tok.x(i, 0) * tok.x(j, 1) - tok.x(i, 1) * tok.x(j, 0);
      const double dot = tok.x(i, 0) * tok.x(j, 0) + tok.x(i, 1) * tok.x(j, 1);
      if (std::abs(std::atan2(cross, dot)) >= gap) {
        ++j;
        continue;
      }
      const auto ui = std::size_t(i), uj = std::size_t(j);
      Eigen::RowVector2d mean = tok.weight[ui] * tok.x.row(i) + tok.weight[uj] * tok.x.row(j);
      tok.x.row(i) = mean / mean.norm();
      tok.weight[ui] += tok.weight[uj];
      tok.count[ui] += tok.count[uj];
      const Eigen::Index rest = Eigen::Index(tok.size()) - j - 1;
      tok.x.middleRows(j, rest) = tok.x.bottomRows(rest).eval();
      tok.x.conservativeResize(tok.x.rows() - 1, Eigen::NoChange);
      tok.weight.erase(tok.weight.begin() + j);
      tok.count.erase(tok.count.begin() + j);
      merged = true;
    }
  }
  return merged;
}

// The engine's field for the current tokens (rebuilt after each merge: the measure's weights change).
class EngineField {
 public:
  explicit EngineField(double beta) {
    AttentionSpec spec;
    spec.scale = beta;
    spec.normalize = "sphere";
    spec.summation = "dense";
    params_ = make_attention(spec, 2);
  }
  void rebuild(const CircleTokens& tok) {
    Vec<double> a(Eigen::Index(tok.size()));
    for (std::size_t i = 0; i < tok.size(); ++i) a[Eigen::Index(i)] = tok.weight[i];
    field_.reset();
    field_.emplace(params_, make_measure<double>(tok.x, a));
  }
  void velocity(const Points<double>& x, Points<double>& v) {
    v.resize(x.rows(), 2);
    field_->velocity(0.0, x, v);
  }

 private:
  AttentionParams params_;
  std::optional<AttentionField<double>> field_;
};

// One step's direction. Engine: v from the attention field, with the gap between its angular
// component's unit direction and that of Eq. (M1) (F); angles: F itself. Returns |direction|.
struct StepDirection {
  Points<double> v;           // engine: n x 2 tangent velocity
  std::vector<double> F;      // Eq. (M1)
  double norm = 0.0, gap = 0.0;
};

void engine_direction(EngineField& field, const CircleTokens& tok, double beta, StepDirection& dir) {
  field.velocity(tok.x, dir.v);
  dir.F = circle_velocity(tok.angles(), tok.weight, beta);
  std::vector<double> omega(tok.size());
  for (std::size_t i = 0; i < tok.size(); ++i) {
    const auto r = Eigen::Index(i);
    omega[i] = tok.x(r, 0) * dir.v(r, 1) - tok.x(r, 1) * dir.v(r, 0);
  }
  const double nf = count_norm(dir.F.data(), tok.count, 1), nw = count_norm(omega.data(), tok.count, 1);
  double gap = 0.0;
  for (std::size_t i = 0; i < tok.size(); ++i) {
    const double d = (nw > 0.0 ? omega[i] / nw : 0.0) - (nf > 0.0 ? dir.F[i] / nf : 0.0);
    gap += tok.count[i] * d * d;
  }
  dir.gap = std::sqrt(gap);
  // The step goes along the velocity's tangent component omega_i (-x_i1, x_i0): the engine's
  // projection P_x leaves a radial rounding of order eps |Gamma(x_i)|, a sizeable part of v near the
  // floor (tangent speeds down to ~100 eps |Gamma|), which the renormalization would drop from the
  // turn while |v| still counted it: steps shorter than h.
  for (std::size_t i = 0; i < tok.size(); ++i) {
    const auto r = Eigen::Index(i);
    dir.v.row(r) << -omega[i] * tok.x(r, 1), omega[i] * tok.x(r, 0);
  }
  dir.norm = nw;
}

// Takes the step of Eq. (M5) (engine) or t_i += h F_i / |F| (angles); returns the tokens' arclength
// sqrt(sum_i count_i dtheta_i^2) and the largest ||x_i| - 1| after the step.
double take_step(CircleTokens& tok, const StepDirection& dir, bool engine, double h, double& norm_error) {
  double arc = 0.0;
  norm_error = 0.0;
  for (std::size_t i = 0; i < tok.size(); ++i) {
    const auto r = Eigen::Index(i);
    const Eigen::RowVector2d old = tok.x.row(r);
    if (engine) {
      const Eigen::RowVector2d y = old + h / dir.norm * dir.v.row(r);
      tok.x.row(r) = y / y.norm();
    } else {
      const double t = std::atan2(old(1), old(0)) + h * dir.F[i] / dir.norm;
      tok.x.row(r) << std::cos(t), std::sin(t);
    }
    const double turn = std::atan2(old(0) * tok.x(r, 1) - old(1) * tok.x(r, 0), old.dot(tok.x.row(r)));
    arc += tok.count[i] * turn * turn;
    norm_error = std::max(norm_error, std::abs(tok.x.row(r).norm() - 1.0));
  }
  return std::sqrt(arc);
}

struct Clock {
  long step = 0;
  double arclength = 0.0, time = 0.0, speed = 0.0;
};

void record_state(NormalizedStepPath& path, const CircleTokens& tok, const Clock& clock, double h, double beta) {
  const double log_beta = std::log(beta);
  path.step.push_back(clock.step);
  path.rescaled.push_back(double(clock.step) * h / log_beta);
  path.arclength.push_back(clock.arclength / log_beta);
  path.time.push_back(clock.time);
  path.energy.push_back(circle_energy(tok.angles(), tok.weight, beta));
  path.clusters.push_back(int(tok.size()));
  double level = 0.0;
  for (double w : tok.weight) level += w * w;
  path.level.push_back(level);
  path.speed.push_back(clock.speed);
}

CircleTokens start_tokens(const std::vector<double>& angles, const std::vector<double>& weights, double gap) {
  CircleTokens tok;
  tok.x.resize(Eigen::Index(angles.size()), 2);
  for (std::size_t i = 0; i < angles.size(); ++i) tok.x.row(Eigen::Index(i)) << std::cos(angles[i]), std::sin(angles[i]);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (double w : weights) tok.weight.push_back(w / total);
  tok.count.assign(angles.size(), 1.0);
  merge_close_points(tok, gap);
  return tok;
}

void check_options(const std::vector<double>& angles, const std::vector<double>& weights,
                   const NormalizedStepOptions& o) {
  circle_energy(angles, weights, o.beta);  // checks the tokens and beta
  if (!(o.beta > 1.0)) throw std::invalid_argument("normalized steps: the rescaled time needs beta > 1");
  if (!(o.step >= 0.0) || !std::isfinite(o.step) || o.steps < 0 || o.record_every < 1 || !(o.merge_distance >= 0.0) ||
      !(o.direction_tolerance > 0.0))
    throw std::invalid_argument(
        "normalized steps: step and merge_distance must be >= 0, steps >= 0, record_every >= 1 and "
        "direction_tolerance > 0");
}

}  // namespace

NormalizedStepPath run_normalized_steps(std::vector<double> angles, std::vector<double> weights,
                                        const NormalizedStepOptions& o) {
  check_options(angles, weights, o);
  const double h = o.step > 0.0 ? o.step : 1e-5 * std::log(o.beta);
  CircleTokens tok = start_tokens(angles, weights, o.merge_distance);
  EngineField field(o.beta);
  bool engine = o.engine;
  if (engine) field.rebuild(tok);
  NormalizedStepPath path;
  Clock clock;
  StepDirection dir;
  record_state(path, tok, clock, h, o.beta);
  path.status = "steps";
  while (clock.step < o.steps) {
    if (tok.size() == 1) {
      path.status = "one_cluster";
      break;
    }
    if (engine) {
      engine_direction(field, tok, o.beta, dir);
      if (!(dir.gap <= o.direction_tolerance)) {  // the engine's direction is rounding (or NaN)
        path.floor_clusters = int(tok.size());
        if (!o.continue_with_angles) {
          path.status = "rounding_floor";
          break;
        }
        engine = false;
      } else {
        path.max_direction_gap = std::max(path.max_direction_gap, dir.gap);
      }
    }
    if (!engine) {
      dir.F = circle_velocity(tok.angles(), tok.weight, o.beta);
      dir.norm = count_norm(dir.F.data(), tok.count, 1);
    }
    if (!(dir.norm > 0.0)) {
      path.status = "frozen";
      break;
    }
    double norm_error = 0.0;
    clock.arclength += take_step(tok, dir, engine, h, norm_error);
    path.max_norm_error = std::max(path.max_norm_error, norm_error);
    clock.time += h / dir.norm;
    clock.speed = dir.norm;
    ++clock.step;
    path.engine_steps += engine ? 1 : 0;
    const bool merged = merge_close_points(tok, o.merge_distance);
    if (merged && engine) field.rebuild(tok);
    if (merged || clock.step % o.record_every == 0) record_state(path, tok, clock, h, o.beta);
    if (o.progress && clock.step % o.record_every == 0 && !o.progress(clock.step)) throw Cancelled();
  }
  if (path.step.back() != clock.step) record_state(path, tok, clock, h, o.beta);
  if (tok.size() == 1) path.status = "one_cluster";  // also when the last step's merge left one
  path.steps = clock.step;
  path.final_angles = tok.angles();
  path.final_weights = tok.weight;
  return path;
}

}  // namespace tokenflow
