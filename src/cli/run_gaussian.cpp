#include "run_gaussian.hpp"

#include <iostream>

#include "common.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

void write_frames(const std::filesystem::path& dir, const GaussianResult& r, std::size_t d) {
  const std::size_t F = r.times.size();
  std::vector<double> means, covs;
  means.reserve(F * d);
  covs.reserve(F * d * d);
  for (std::size_t f = 0; f < F; ++f) {
    for (std::size_t i = 0; i < d; ++i) means.push_back(r.means[f][static_cast<Eigen::Index>(i)]);
    for (std::size_t i = 0; i < d; ++i)  // row-major (C order)
      for (std::size_t j = 0; j < d; ++j)
        covs.push_back(r.covs[f](static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)));
  }
  write_npy(dir / "times.npy", r.times.data(), {F});
  write_npy(dir / "means.npy", means.data(), {F, d});
  write_npy(dir / "covs.npy", covs.data(), {F, d, d});
}

}  // namespace

GaussianRun run_gaussian(const GaussianSetup& setup, const Config& source,
                         const std::filesystem::path& dir, const ProgressCallback& progress,
                         bool print_warnings) {
  Stopwatch clock;
  GaussianRun run;
  try {
    run.result = solve_moments(setup.attention, setup.spec, setup.initial, [&](const Progress& p) {
      return !interrupted() && (!progress || progress(p));
    });
  } catch (const InputError& e) {
    throw located_in(e, source);
  }
  write_frames(dir, run.result, static_cast<std::size_t>(setup.initial.mean.size()));
  if (print_warnings)
    for (const auto& w : gaussian_warnings(run.result))
      std::cerr << "tokenflow: warning: " << w << "\n";
  run.summary = gaussian_summary_json(run.result, setup, clock.seconds());
  write_text(dir / "summary.json", run.summary + "\n");
  return run;
}

GaussianRun run_gaussian_config(const std::string& toml, const std::filesystem::path& dir,
                                const ProgressCallback& progress) {
  std::filesystem::create_directories(dir);
  write_text(dir / "config.toml", toml);
  const Config source = Config::from_text(toml, (dir / "config.toml").string());
  return run_gaussian(read_gaussian_setup(source), source, dir, progress, /*print_warnings=*/false);
}

}  // namespace tokenflow::cli
