// The capacity sweep of `reproduce universal-approximation`: test W_1 against model size
// (tokenflow/train.hpp).
#include <algorithm>
#include <chrono>

#include "tokenflow/train.hpp"

namespace tokenflow {

// ---- capacity sweep
// ----------------------------------------------------------------------------------
std::vector<SweepPoint> capacity_sweep(const TrainConfig& base,
                                       const std::vector<std::pair<int, int>>& grid,
                                       const TrainCallbacks& callbacks,
                                       const std::function<void(const SweepPoint&)>& on_point) {
  const std::vector<CouplingPair> test_pairs = make_test_pairs(base);
  std::vector<SweepPoint> points;
  for (const auto& [width, layers] : grid) {
    TrainConfig c = base;
    c.model.width = width;
    c.model.layers = layers;
    c.model.k = std::max(1, width / 2);
    if (width % c.model.heads != 0) c.model.heads = 1;
    const auto start = std::chrono::steady_clock::now();
    TrainResult r = train(c, initial_state(c, test_pairs), test_pairs, callbacks);
    SweepPoint p;
    p.width = width;
    p.layers = layers;
    p.parameters = ParameterLayout(c.model).size();
    p.trained = r.final;
    p.untrained = r.state.untrained;
    p.independent = r.state.independent;
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    points.push_back(p);
    if (on_point) on_point(p);
  }
  return points;
}

}  // namespace tokenflow
