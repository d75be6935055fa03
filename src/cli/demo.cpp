// tokenflow demo --out DIR: a tour of every available reproduction, with an HTML report.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "commands.hpp"
#include "common.hpp"
#include "figures.hpp"
#include "reproductions.hpp"

namespace tokenflow::cli {

void add_demo_command(CLI::App& app) {
  struct Options {
    std::string out;
    bool quick = false, no_figures = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("demo", "Run every available reproduction and write DIR/report.html");
  cmd->add_option("--out", options->out, std::string(kOutHelp) + " (make demo: out/demo)")->required();
  cmd->add_flag("--quick", options->quick, "Smaller sizes (seconds; for tests)");
  cmd->add_flag("--no-figures", options->no_figures, "Write the data only (no Python needed, no report)");
  cmd->footer("Writes DIR/<name>/ (data and summary.json of each reproduction), DIR/*.png, DIR/report.html\n"
              "(figures embedded, each with its explanation and numbers) and DIR/summary.json.");
  cmd->callback([options] {
    std::optional<PythonFigures> python;
    if (!options->no_figures) python = find_python_figures();
    Stopwatch clock;
    std::vector<const Reproduction*> available;
    nlohmann::json pending = nlohmann::json::array(), done = nlohmann::json::array();
    OutputPlan plan{"demo", {"summary.json"}, {}};
    for (const auto& r : reproductions()) {
      if (r.run) available.push_back(&r);
      else pending.push_back({{"name", r.name}, {"title", r.title}, {"needs", r.needs}});
      if (r.run) plan.outputs.push_back(std::string(r.name) + "/");
    }
    OutputDir out(options->out, plan);
    for (std::size_t k = 0; k < available.size(); ++k) {
      const Reproduction& r = *available[k];
      const auto dir = out.staged(r.name);
      std::filesystem::create_directory(dir);
      const nlohmann::json s =
          run_reproduction(r, {dir, options->quick, /*tour=*/true, fmt::format("demo {}/{} {}", k + 1, available.size(), r.name)});
      done.push_back({{"name", r.name}, {"title", r.title}, {"wall_seconds", s["wall_seconds"]}});
      // Without a progress bar (output to a file or a pipe, as under make), a line per reproduction.
      if (!ProgressBar::drawn_on_stderr() && !ProgressBar::quiet())
        fmt::print(stderr, "tokenflow demo: {}/{} {} done ({:.1f} s)\n", k + 1, available.size(), r.name,
                   s["wall_seconds"].get<double>());
    }
    nlohmann::json summary = {{"command", "demo"},  {"status", "finished"}, {"quick", options->quick},
                              {"reproductions", done}, {"pending", pending}, {"date", utc_date()},
                              {"cpu", cpu_model()}};
    summary["wall_seconds"] = clock.seconds();  // computing; drawing comes after
    write_text(out.staged("summary.json"), summary.dump(2) + "\n");
    if (python) draw_figures(*python, {"demo", out.staged("").string()});
    out.commit();
    std::cout << "tokenflow demo: " << (python ? "report " + (std::filesystem::path(options->out) / "report.html").string()
                                              : "data in " + options->out)
              << " (" << fmt::format("{:.1f}", clock.seconds()) << " s)\n";
  });
}

}  // namespace tokenflow::cli
