// reproduce normalization-schemes: normalization as speed regulation (Karagodin, Ge, Polyanskiy,
// Rigollet, "Normalization in Attention Dynamics", NeurIPS 2025, arXiv:2510.22026). The same
// tokens under attention.normalize = sphere (Post-LN), pre (Pre-LN), peri (Peri-LN), ngpt (nGPT)
// and mix (Mix-LN, Post-LN for the first kMixFraction of the time Post-LN takes to reach
// kTargetGap, Pre-LN after), softmax with Q = K = V = I, scale beta:
//   runs/<case>-<scheme>/  whole `tokenflow simulate` directories (init.kind = "file", dopri5 at
//                          tol 1e-11, a frame every step); for the equiangular cases (orthogonal
//                          tokens, rho0 = 0, d = n) reduction.npy in each: per frame t, the
//                          reduction's rho, 1 - rho and r
//                          (include/tokenflow/normalization_schemes.hpp), the particles' mean gap
//                          and mean radius, max_ij |<theta_i, theta_j> - rho|
//   reduction.npy          per equiangular case and scheme the reduction at 400 times (0, then
//                          geometric up to the time of kFinalGap): t, 1 - rho, r (cases x schemes x
//                          400 x 3)
//   random.npy             the random start (n tokens uniform on S^{d-1}): per scheme and frame
//                          t, mean gap (schemes x frames, padded with NaN: rows scheme-major, t,
//                          gap)
// Summary: per scheme (the first equiangular case) the clustering time to a mean gap of
// kTargetGap measured on the particles beside the reduction's, the speed factor at the start, the
// fitted law at the cluster beside the closed form (rate 2 in t for sphere and ngpt, exponent 2 in
// r for pre, peri and mix); max_abs_gap (particles against the reduction over every case, scheme,
// frame and pair); the random start's clustering times.
#include <fmt/format.h>

#include <cmath>
#include <random>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_simulation.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/normalization_schemes.hpp"

namespace tokenflow::cli {

namespace schemes_reproduction {  // named: the unity build shares one file with other reproductions

constexpr double kRho0 = 0.0, kTargetGap = 1e-3, kFinalGap = 1e-8, kTol = 1e-11;
constexpr double kFitLow = 1e-7, kFitHigh = 1e-4;  // the gap window of the fits at the cluster
// Post-LN first: mix's switch time is a fraction of Post-LN's clustering time.
const std::vector<Normalize> kSchemes{Normalize::sphere, Normalize::pre, Normalize::peri,
                                      Normalize::ngpt, Normalize::mix};
// Mix-LN puts Post-LN in the first layers and Pre-LN in the others; here Post-LN runs for this
// fraction of the time it takes alone to reach a mean gap of kTargetGap.
constexpr double kMixFraction = 0.25;

const char* paper_name(Normalize s) {
  switch (s) {
    case Normalize::sphere: return "Post-LN";
    case Normalize::pre: return "Pre-LN";
    case Normalize::peri: return "Peri-LN";
    case Normalize::ngpt: return "nGPT";
    case Normalize::mix:
      return "Mix-LN";
    default: return "none";
  }
}

double fitted_slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  }
  return x.size() >= 2 ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : std::nan("");
}

// The first time the gap falls to `target` (NaN: never), interpolated between the frames around
// it: log gap linear in t (sphere, ngpt: exponential decay) or in log t (pre, peri, mix: a power
// law; their dopri5 steps grow like t).
double crossing_time(Normalize scheme, const std::vector<double>& t, const std::vector<double>& gap, double target) {
  for (std::size_t f = 1; f < t.size(); ++f)
    if (gap[f] <= target && gap[f - 1] > target) {
      const double a = std::log(gap[f - 1]), b = std::log(gap[f]), w = (a - std::log(target)) / (a - b);
      if (on_sphere(scheme) || !(t[f - 1] > 0.0)) return t[f - 1] + (t[f] - t[f - 1]) * w;
      return std::exp(std::log(t[f - 1]) + (std::log(t[f]) - std::log(t[f - 1])) * w);
    }
  return gap.empty() || gap[0] > target ? std::nan("") : 0.0;
}

struct Run {
  std::vector<double> t, gap, radius, deviation;
  long steps = 0;
};

// One scheme's particles through `simulate` from x0 into dir; per frame the mean pair gap, the
// mean radius and (rho given) max_ij |<theta_i, theta_j> - rho(t)|.
Run run_particles(const Points<double>& x0, Normalize scheme, double beta, double T,
                  const std::filesystem::path& dir, const std::string& label,
                  const std::string& what, double mix_until) {
  std::filesystem::create_directories(dir);
  write_npy(dir / "x0.npy", x0.data(), {static_cast<std::size_t>(x0.rows()), static_cast<std::size_t>(x0.cols())});
  write_text(dir / "config.toml",
             sphere_particle_config(
                 fmt::format("reproduce normalization-schemes: {}, normalize = {} ({})", what,
                             to_string(scheme), paper_name(scheme)),
                 beta, T, kTol, 1, to_string(scheme),
                 scheme == Normalize::mix ? std::optional<double>(mix_until) : std::nullopt));
  const auto summary = nlohmann::json::parse(
      run_simulation(prepare_simulation(Config::from_file((dir / "config.toml").string())), dir, label));
  if (summary.at("status") != "finished")
    throw std::runtime_error("reproduce normalization-schemes: the " + std::string(to_string(scheme)) +
                             " run ended with status " + summary.at("status").get<std::string>());
  const NpyArray traj = read_npy(dir / "trajectory.npy"), times = read_npy(dir / "times.npy");
  const auto n = x0.rows(), d = x0.cols();
  Run r;
  r.steps = summary.at("steps").get<long>();
  for (std::size_t f = 0; f < times.size(); ++f) {
    const Points<double> x = Eigen::Map<const Points<double>>(traj.data.data() + f * n * d, n, d);
    r.t.push_back(times.data[f]);
    r.gap.push_back(mean_pair_gap(x));
    r.radius.push_back(x.rowwise().norm().mean());
  }
  return r;
}

// The fitted law at the cluster: -d log gap / dt (sphere, ngpt) or -d log gap / d log r (pre, peri).
double fitted_law(Normalize scheme, const Run& r) {
  std::vector<double> x, y;
  for (std::size_t f = 0; f < r.t.size(); ++f)
    if (r.gap[f] >= kFitLow && r.gap[f] <= kFitHigh) {
      x.push_back(on_sphere(scheme) ? r.t[f] : std::log(r.radius[f]));
      y.push_back(std::log(r.gap[f]));
    }
  return -fitted_slope(x, y);
}

// One equiangular case (n orthogonal tokens in R^n, scale beta): every scheme's particles beside
// the reduction; appends the reduction's grid to `grid`.
nlohmann::json equiangular_case(const ReproductionContext& ctx, long n, double beta, std::vector<double>& grid,
                                double& max_gap) {
  const EquiangularModel model{static_cast<double>(n), beta};
  const Points<double> x0 = equiangular_points(n, kRho0);
  const double mix_until =
      kMixFraction * scheme_clustering_time(model, Normalize::sphere, kRho0, 1.0, kTargetGap).time;
  // The reduction under each scheme (mix: Post-LN, then Pre-LN at mix_until).
  auto clustering = [&](Normalize scheme, double gap) {
    return scheme == Normalize::mix ? mix_clustering_time(model, kRho0, mix_until, gap)
                                    : scheme_clustering_time(model, scheme, kRho0, 1.0, gap);
  };
  auto reduction = [&](Normalize scheme, const std::vector<double>& times) {
    return scheme == Normalize::mix ? solve_mix_equiangular(model, kRho0, mix_until, times)
                                    : solve_scheme_equiangular(model, scheme, kRho0, 1.0, times);
  };
  nlohmann::json out = nlohmann::json::object();
  for (Normalize scheme : kSchemes) {
    const SchemeClustering end = clustering(scheme, kFinalGap);
    const std::string name = fmt::format("n{}-beta{:g}-{}", n, beta, to_string(scheme));
    const Run r = run_particles(
        x0, scheme, beta, end.time * 1.05, ctx.dir / "runs" / name, ctx.label + " " + name,
        fmt::format("{} orthogonal tokens in R^{}, beta = {}", n, n, beta), mix_until);
    const SchemePath path = reduction(scheme, r.t);
    const NpyArray traj = read_npy(ctx.dir / "runs" / name / "trajectory.npy");
    std::vector<double> table;
    for (std::size_t f = 0; f < r.t.size(); ++f) {
      Points<double> theta = Eigen::Map<const Points<double>>(traj.data.data() + f * n * n, n, n);
      theta.rowwise().normalize();
      const double deviation = equiangular_deviation(theta, path.rho[f]);
      max_gap = std::max(max_gap, deviation);
      table.insert(table.end(), {r.t[f], path.rho[f], path.gap[f], path.radius[f], r.gap[f], r.radius[f], deviation});
    }
    write_npy(ctx.dir / "runs" / name / "reduction.npy", table.data(), {r.t.size(), 7});
    // The reduction on 400 times: 0, then geometric from 1e-3 T to T (one integration).
    std::vector<double> times{0.0};
    for (int k = 0; k < 399; ++k) times.push_back(end.time * std::pow(1e3, k / 398.0 - 1.0));
    const SchemePath fine = reduction(scheme, times);
    for (int k = 0; k < 400; ++k) grid.insert(grid.end(), {times[k], fine.gap[k], fine.radius[k]});
    const double law = fitted_law(scheme, r), theory_time = clustering(scheme, kTargetGap).time;
    out[to_string(scheme)] = {
        {"paper_name", paper_name(scheme)},
        {"clustering_time", crossing_time(scheme, r.t, r.gap, kTargetGap)},
        {"clustering_time_theory", theory_time},
        {"speed_factor_at_start",
         scheme_speed_factor(model, scheme == Normalize::mix ? Normalize::sphere : scheme, kRho0,
                             1.0)},
        {"law",
         on_sphere(scheme) ? "1 - rho ~ C exp(-rate t)" : "1 - rho ~ C r^(-exponent), r ~ t"},
        {on_sphere(scheme) ? "rate_fitted" : "exponent_fitted", law},
        {on_sphere(scheme) ? "rate_theory" : "exponent_theory",
         on_sphere(scheme) ? kSchemeExpRate : kSchemePowerExponent},
        {"final_radius", r.radius.back()},
        {"steps", r.steps},
        {"dir", name}};
    if (scheme == Normalize::mix) out[to_string(scheme)]["mix_until"] = mix_until;
  }
  return out;
}

// n tokens uniform on S^{d-1} (a fixed seed), every scheme: the clustering time (no closed form).
nlohmann::json random_start(const ReproductionContext& ctx, long n, long d, double beta, double T) {
  std::mt19937_64 rng(20251024);
  std::normal_distribution<double> normal;
  Points<double> x0(n, d);
  for (long i = 0; i < n; ++i) {
    for (long c = 0; c < d; ++c) x0(i, c) = normal(rng);
    x0.row(i).normalize();
  }
  nlohmann::json out = nlohmann::json::object();
  std::vector<Run> runs;
  std::size_t frames = 0;
  double mix_until =
      NAN;  // kMixFraction of Post-LN's measured clustering time (Post-LN runs first)
  for (Normalize scheme : kSchemes) {
    const std::string name = fmt::format("random-n{}-d{}-{}", n, d, to_string(scheme));
    runs.push_back(run_particles(
        x0, scheme, beta, T, ctx.dir / "runs" / name, ctx.label + " " + name,
        fmt::format("{} tokens uniform on S^{} (seed 20251024), beta = {}", n, d - 1, beta),
        mix_until));
    if (scheme == Normalize::sphere) {
      mix_until = kMixFraction * crossing_time(scheme, runs.back().t, runs.back().gap, kTargetGap);
      if (!std::isfinite(mix_until))
        throw std::runtime_error(
            "reproduce normalization-schemes: Post-LN did not reach the target gap by T");
    }
    frames = std::max(frames, runs.back().t.size());
    out[to_string(scheme)] = {{"clustering_time", crossing_time(scheme, runs.back().t, runs.back().gap, kTargetGap)},
                              {"final_gap", runs.back().gap.back()},
                              {"final_radius", runs.back().radius.back()},
                              {"dir", name}};
    if (scheme == Normalize::mix) out[to_string(scheme)]["mix_until"] = mix_until;
  }
  std::vector<double> table;
  for (const Run& r : runs)
    for (std::size_t f = 0; f < frames; ++f)
      table.insert(table.end(), {f < r.t.size() ? r.t[f] : NAN, f < r.t.size() ? r.gap[f] : NAN});
  write_npy(ctx.dir / "random.npy", table.data(), {runs.size(), frames, 2});
  return {{"n", n}, {"d", d}, {"beta", beta}, {"T", T}, {"schemes", out}};
}

nlohmann::json run(const ReproductionContext& ctx) {
  struct Case {
    long n;
    double beta;
  };
  const std::vector<Case> cases = ctx.quick ? std::vector<Case>{{6, 1.0}} : std::vector<Case>{{32, 1.0}, {32, 4.0}};
  std::vector<double> grid;
  double max_gap = 0.0;
  nlohmann::json per_case = nlohmann::json::array();
  for (const Case& c : cases)
    per_case.push_back({{"n", c.n}, {"beta", c.beta}, {"schemes", equiangular_case(ctx, c.n, c.beta, grid, max_gap)}});
  write_npy(ctx.dir / "reduction.npy", grid.data(), {cases.size(), kSchemes.size(), 400, 3});
  const nlohmann::json random = ctx.quick ? random_start(ctx, 16, 3, 1.0, 400.0) : random_start(ctx, 128, 3, 1.0, 400.0);
  return {{"schemes", per_case[0]["schemes"]},
          {"n", cases[0].n},
          {"beta", cases[0].beta},
          {"rho0", kRho0},
          {"target_gap", kTargetGap},
          {"final_gap", kFinalGap},
          {"fit_window", {kFitLow, kFitHigh}},
          {"mix_fraction", kMixFraction},
          {"particle_tol", kTol},
          {"max_abs_gap", max_gap},
          {"cases", per_case},
          {"random_start", random}};
}

}  // namespace schemes_reproduction

nlohmann::json reproduce_normalization_schemes(const ReproductionContext& ctx) { return schemes_reproduction::run(ctx); }

}  // namespace tokenflow::cli
