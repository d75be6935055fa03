#include "run_simulation.hpp"

#include <fmt/format.h>

#include <fstream>

#include "common.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

template <class T>
std::string run_typed(const SimulationConfig& config, const AttentionParams& attention, const Measure<double>& mu64,
                      const std::filesystem::path& dir, const std::string& label, const Stopwatch& clock) {
  const Measure<T> mu{mu64.points.cast<T>(), mu64.weights.cast<T>(), mu64.positions.cast<T>()};
  ProgressBar bar(label);
  const SimulationResult<T> r = simulate(attention, config.run, mu, [&](const Progress& p) {
    bar.update(p.T > 0 ? p.t / p.T : 1.0, fmt::format("t={:.4g} step {}", p.t, p.steps));
    return !interrupted();
  });
  bar.finish();

  write_points(dir / "initial.npy", mu.points);
  write_points(dir / "positions.npy", r.positions);
  if (!r.frames.empty()) {
    const auto n = static_cast<std::size_t>(mu.n()), d = static_cast<std::size_t>(mu.d());
    std::vector<T> trajectory;
    trajectory.reserve(r.frames.size() * n * d);
    for (const auto& f : r.frames) trajectory.insert(trajectory.end(), f.data(), f.data() + f.size());
    write_npy(dir / "trajectory.npy", trajectory.data(), {r.frames.size(), n, d});
    write_npy(dir / "times.npy", r.times.data(), {r.times.size()}, std::is_same_v<T, float>);
  }
  write_text(dir / "diagnostics.csv", diagnostics_csv(diagnostics_table(r.diagnostics, mu.d())));
  std::string summary = simulation_summary_json(r, mu, config, attention, clock.seconds());
  write_text(dir / "summary.json", summary + "\n");
  return summary;
}

}  // namespace

PreparedSimulation prepare_simulation(const Config& source) {
  PreparedSimulation s;
  s.config = read_simulation_config(source);
  s.initial = make_initial_measure(s.config, source);
  s.attention = read_attention(s.config, source, static_cast<int>(s.initial.d()));
  return s;
}

std::string run_simulation(const PreparedSimulation& s, const std::filesystem::path& dir, const std::string& label) {
  Stopwatch clock;
  if (s.config.dtype == Dtype::f32) return run_typed<float>(s.config, s.attention, s.initial, dir, label, clock);
  return run_typed<double>(s.config, s.attention, s.initial, dir, label, clock);
}

}  // namespace tokenflow::cli
