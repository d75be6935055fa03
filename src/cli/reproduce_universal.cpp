// reproduce universal-approximation: test W_1 of Sinkhorn Transformers of growing capacity on
// entropic-ot with p = 1 (a cost that is not an inner product, so no single attention layer
// represents it). Writes sweep.csv (one row per model) and the config; the figure (test W_1
// against the number of parameters) is drawn by tokenflow.figures.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "common.hpp"
#include "reproductions.hpp"
#include "tokenflow/config.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/train.hpp"

namespace tokenflow::cli {

nlohmann::json reproduce_universal_approximation(const ReproductionContext& ctx) {
  // Full run: six models, 1500 steps each (about 15 minutes on 2 cores); the demo's tour: three
  // models, 400 steps; tests (--quick): two tiny models, a handful of steps.
  const long steps = ctx.quick ? 6 : ctx.tour ? 400 : 1500;
  const std::vector<std::pair<int, int>> grid =
      ctx.quick ? std::vector<std::pair<int, int>>{{4, 1}, {8, 1}}
      : ctx.tour ? std::vector<std::pair<int, int>>{{4, 1}, {16, 1}, {32, 2}}
                 : std::vector<std::pair<int, int>>{{4, 1}, {8, 1}, {16, 1}, {32, 1}, {32, 2}, {64, 2}};
  Config source;
  for (const std::string& assignment :
       {std::string("dtype=\"f32\""), std::string("task.kind=\"entropic-ot\""),
        std::string("task.n=") + (ctx.quick ? "6" : "16"), std::string("task.d=2"), std::string("task.p=1"),
        std::string("task.target_epsilon=0.1"), std::string("model.heads=2"), std::string("model.epsilon=1.0"),
        std::string("model.sinkhorn_iters=30"), "train.steps=" + std::to_string(steps), std::string("train.batch=32"),
        std::string("train.lr=2e-3"), std::string("train.warmup=") + (ctx.quick ? "0" : "100"),
        std::string("train.schedule=\"cosine\""), std::string("train.test_pairs=") + (ctx.quick ? "4" : "64"),
        "train.eval_every=" + std::to_string(steps)})
    source.set(assignment);
  const TrainConfig base = read_train_config(source);
  write_text(ctx.dir / "config.toml", to_toml(base));

  ProgressBar bar(ctx.label);
  std::size_t done = 0;
  TrainCallbacks callbacks;
  callbacks.progress = [&](long step, long total, double loss, double) {
    bar.update((static_cast<double>(done) + static_cast<double>(step) / static_cast<double>(std::max(1L, total))) /
                   static_cast<double>(grid.size()),
               fmt::format("model {}/{} ({}x{}) step {}/{} loss {:.4g}", done + 1, grid.size(), grid[done].first,
                           grid[done].second, step, total, loss));
    return !interrupted();
  };
  const auto points = capacity_sweep(base, grid, callbacks, [&](const SweepPoint&) { ++done; });
  bar.finish();

  std::string csv = "width,layers,k,parameters,test_w1,test_w1_untrained,test_w1_independent,test_loss,seconds\n";
  for (const auto& p : points)
    csv += fmt::format("{},{},{},{},{:.17g},{:.17g},{:.17g},{:.17g},{:.3f}\n", p.width, p.layers,
                       std::max(1, p.width / 2), p.parameters, p.trained.w1, p.untrained.w1, p.independent.w1,
                       p.trained.loss, p.seconds);
  write_text(ctx.dir / "sweep.csv", csv);

  // The claim under test, reported and not assumed: W_1 of the largest model against the smallest,
  // and whether W_1 never rises by more than 10% from one size to the next larger one.
  std::vector<SweepPoint> by_size = points;
  std::sort(by_size.begin(), by_size.end(), [](const auto& p, const auto& q) { return p.parameters < q.parameters; });
  bool monotone = true;
  for (std::size_t i = 1; i < by_size.size(); ++i)
    monotone = monotone && by_size[i].trained.w1 <= 1.1 * by_size[i - 1].trained.w1;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : points)
    rows.push_back({{"width", p.width},
                    {"layers", p.layers},
                    {"parameters", p.parameters},
                    {"test_w1", p.trained.w1},
                    {"test_w1_untrained", p.untrained.w1},
                    {"test_w1_independent", p.independent.w1},
                    {"seconds", p.seconds}});
  return {{"points", rows},
          {"w1_smallest_model", by_size.front().trained.w1},
          {"w1_largest_model", by_size.back().trained.w1},
          {"w1_falls_with_capacity", by_size.back().trained.w1 < by_size.front().trained.w1 && monotone}};
}

}  // namespace tokenflow::cli
