// Seconds per training step of the Sinkhorn Transformer (the C++ half of bench/train_vs_torch.py).
//   build/bench/tokenflow_bench_train_step [--set key=value ...] [--steps N] [--warmup W]
// Runs train() on the configuration (defaults of docs/design.md section 2 for [task], [model],
// [train]) and times the steps between the end of step W and the end of step W + N through the
// progress callback, so the evaluations before and after are excluded. Prints one JSON line.
// Threads: OMP_NUM_THREADS.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "tokenflow/error.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/train.hpp"

int main(int argc, char** argv) {
  using namespace tokenflow;
  try {
    Config source;
    long steps = 20, warmup = 3;  // warmup >= 1: the clock starts at the end of step `warmup`
    for (int i = 1; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--set") && i + 1 < argc)
        source.set(argv[++i]);
      else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
        steps = std::stol(argv[++i]);
      else if (!std::strcmp(argv[i], "--warmup") && i + 1 < argc)
        warmup = std::max(1L, std::stol(argv[++i]));
      else {
        std::fprintf(stderr, "usage: %s [--set key=value ...] [--steps N] [--warmup W]\n", argv[0]);
        return 2;
      }
    }
    source.set("train.steps=" + std::to_string(steps + warmup));
    source.set("train.eval_every=" + std::to_string(steps + warmup));
    if (!source.has("train.test_pairs")) source.set("train.test_pairs=1");
    const TrainConfig config = read_train_config(source);
    const auto test_pairs = make_test_pairs(config);
    std::chrono::steady_clock::time_point t0, t1;
    std::clock_t c0 = 0, c1 = 0;  // process CPU time (all threads)
    TrainCallbacks cb;
    cb.progress = [&](long step, long, double, double) {
      if (step == warmup) t0 = std::chrono::steady_clock::now(), c0 = std::clock();
      if (step == warmup + steps) t1 = std::chrono::steady_clock::now(), c1 = std::clock();
      return true;
    };
    const auto r = train(config, initial_state(config, test_pairs), test_pairs, cb);
    const double per_step =
        std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(steps);
    const double cpu_per_step =
        static_cast<double>(c1 - c0) / CLOCKS_PER_SEC / static_cast<double>(steps);
    std::printf(
        "{\"dtype\": \"%s\", \"threads\": %d, \"batch\": %d, \"n\": %d, \"width\": %d, \"layers\": "
        "%d, "
        "\"parameters\": %zu, \"seconds_per_step\": %.6g, \"cpu_seconds_per_step\": %.6g, "
        "\"pairs_per_second\": %.6g, "
        "\"final_loss\": %.6g}\n",
        config.float32 ? "f32" : "f64", omp_get_max_threads(), config.train.batch, config.task.n,
        config.model.width, config.model.layers, ParameterLayout(config.model).size(), per_step,
        cpu_per_step, config.train.batch / per_step, r.state.metrics.back().loss);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
