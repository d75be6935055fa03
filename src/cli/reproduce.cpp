// tokenflow reproduce universal-approximation: test W_1 of Sinkhorn Transformers of growing
// capacity on entropic-ot with p = 1 (a cost that is not an inner product), DESIGN.md item 2.
// Writes sweep.csv and summary.json, then draws sweep.png with
// python/tokenflow/figures_universal.py when Debian's python3 and matplotlib are there (a later
// `reproduce` gathers every experiment).
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/train.hpp"

#ifndef TOKENFLOW_SOURCE_DIR
#define TOKENFLOW_SOURCE_DIR ""
#endif

namespace tokenflow::cli {

namespace {

// The experiment's defaults (`train` keys); --config and --set override any of them.
const std::vector<std::string>& universal_defaults() {
  static const std::vector<std::string> d{"dtype=\"f32\"",
                                          "task.kind=\"entropic-ot\"",
                                          "task.n=16",
                                          "task.d=2",
                                          "task.p=1",
                                          "task.target_epsilon=0.1",
                                          "model.heads=2",
                                          "model.epsilon=1.0",
                                          "model.sinkhorn_iters=30",
                                          "train.steps=1500",
                                          "train.batch=32",
                                          "train.lr=2e-3",
                                          "train.warmup=100",
                                          "train.schedule=\"cosine\"",
                                          "train.test_pairs=64",
                                          "train.eval_every=500"};
  return d;
}

constexpr const char* kDefaultGrid = "4x1,8x1,16x1,32x1,32x2,64x2";

struct ReproduceOptions : CommonOptions {
  std::string experiment, grid = kDefaultGrid;
  bool figure = true;
};

std::vector<std::pair<int, int>> parse_grid(const std::string& text) {
  std::vector<std::pair<int, int>> grid;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    int w = 0, l = -1;
    char x = 0;
    std::istringstream is(item);
    if (!(is >> w >> x >> l) || x != 'x' || w < 1 || l < 0 || !is.eof())
      throw InputError("", "--grid", "'" + item + "' is not WIDTHxLAYERS (e.g. 32x2)");
    grid.emplace_back(w, l);
  }
  if (grid.empty()) throw InputError("", "--grid", "is empty");
  return grid;
}

void run_universal(const ReproduceOptions& o) {
  Stopwatch clock;
  Config source = o.config_path.empty() ? Config() : Config::from_file(o.config_path);
  for (const auto& assignment : universal_defaults())
    if (!source.has(assignment.substr(0, assignment.find('=')))) source.set(assignment);
  for (const auto& s : o.sets) source.set(s);
  const TrainConfig base = read_train_config(source);
  const auto grid = parse_grid(o.grid);
  OutputDir out(o.out);
  ProgressBar bar("universal-approximation");
  std::size_t done = 0;
  TrainCallbacks cb;
  cb.progress = [&](long step, long steps, double loss, double) {
    bar.update((static_cast<double>(done) +
                static_cast<double>(step) / static_cast<double>(std::max(1L, steps))) /
                   static_cast<double>(grid.size()),
               fmt::format("model {}/{} ({}x{}) step {}/{} loss {:.4g}", done + 1, grid.size(),
                           grid[done].first, grid[done].second, step, steps, loss));
    return true;
  };
  const auto points = capacity_sweep(base, grid, cb, [&](const SweepPoint&) { ++done; });
  bar.finish();
  {
    std::ofstream csv(out.staged("sweep.csv"));
    csv << "width,layers,k,parameters,test_w1,test_w1_untrained,test_w1_independent,test_loss,"
           "seconds\n";
    for (const auto& p : points)
      csv << fmt::format("{},{},{},{},{:.17g},{:.17g},{:.17g},{:.17g},{:.3f}\n", p.width, p.layers,
                         std::max(1, p.width / 2), p.parameters, p.trained.w1, p.untrained.w1,
                         p.independent.w1, p.trained.loss, p.seconds);
  }
  nlohmann::json s;
  s["command"] = "reproduce";
  s["experiment"] = "universal-approximation";
  s["status"] = "finished";
  s["config"] = to_toml(base);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : points)
    rows.push_back({{"width", p.width},
                    {"layers", p.layers},
                    {"parameters", p.parameters},
                    {"test_w1", p.trained.w1},
                    {"test_w1_untrained", p.untrained.w1},
                    {"test_w1_independent", p.independent.w1},
                    {"seconds", p.seconds}});
  s["points"] = rows;
  // The claim under test: the error falls as capacity grows. Reported, not assumed: the W_1 of
  // the largest model against the smallest, and whether W_1 never rises by more than 10% from
  // one size to the next larger one.
  std::vector<SweepPoint> by_size = points;
  std::sort(by_size.begin(), by_size.end(),
            [](const auto& p, const auto& q) { return p.parameters < q.parameters; });
  bool monotone = true;
  for (std::size_t i = 1; i < by_size.size(); ++i)
    monotone = monotone && by_size[i].trained.w1 <= 1.1 * by_size[i - 1].trained.w1;
  s["w1_smallest_model"] = by_size.front().trained.w1;
  s["w1_largest_model"] = by_size.back().trained.w1;
  s["w1_falls_with_capacity"] = by_size.back().trained.w1 < by_size.front().trained.w1 && monotone;
  s["wall_seconds"] = clock.seconds();
  write_summary(out, s);
  out.commit();
  for (const auto& p : points)
    std::cout << fmt::format(
        "width {:3d} layers {}  {:8d} parameters  test W_1 {:.4f}  (untrained {:.4f}, independent "
        "{:.4f})\n",
        p.width, p.layers, p.parameters, p.trained.w1, p.untrained.w1, p.independent.w1);
  if (o.figure) {
    const std::string script =
        std::string(TOKENFLOW_SOURCE_DIR) + "/python/tokenflow/figures_universal.py";
    if (std::string(TOKENFLOW_SOURCE_DIR).empty() || !std::filesystem::exists(script)) {
      std::cerr << "tokenflow: figure skipped (python/tokenflow/figures_universal.py not found)\n";
    } else {
      const std::string cmd = "/usr/bin/python3 '" + script + "' '" + o.out + "'";
      if (std::system(cmd.c_str()) != 0)
        std::cerr << "tokenflow: figure skipped (" << cmd << " failed; needs python3-matplotlib)\n";
    }
  }
}

}  // namespace

void add_reproduce_command(CLI::App& app) {
  auto o = std::make_shared<ReproduceOptions>();
  CLI::App* cmd =
      app.add_subcommand("reproduce", "Reproduce an experiment (for now: universal-approximation)");
  cmd->add_option("experiment", o->experiment, "universal-approximation")
      ->required()
      ->check(CLI::IsMember({"universal-approximation"}));
  cmd->add_option("--config", o->config_path,
                  "TOML keys of `train` on top of the experiment's defaults")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", o->sets, "Override a key: --set train.steps=500 (repeatable)")
      ->take_all();
  cmd->add_option(
      "--grid", o->grid,
      std::string("Models as WIDTHxLAYERS,... (k = width/2; default ") + kDefaultGrid + ")");
  cmd->add_flag("!--no-figure", o->figure, "Do not draw sweep.png");
  cmd->add_option("--out", o->out, "Output directory")->required();
  std::string footer = "Defaults (`train` keys):";
  for (const auto& d : universal_defaults()) footer += " " + d;
  cmd->footer(
      footer +
      "\nOutputs: sweep.csv (width,layers,k,parameters,test_w1,...), summary.json, sweep.png.");
  cmd->callback([o] { run_universal(*o); });
}

}  // namespace tokenflow::cli
