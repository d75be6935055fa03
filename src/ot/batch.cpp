// solve_ot_batch (tokenflow/ot_batch.hpp): independent problems, one per thread at a time.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "../kernel/parallel_for.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/ot_batch.hpp"

namespace tokenflow {

std::vector<OTSolution> solve_ot_batch(std::vector<CostMatrixProblem>& problems,
                                       const OTSolveOptions& options) {
  check_ot_options(options, true, CostKind::sqeuclidean);
  // Every plan is kept, and each thread holds one problem's n x m working matrix at a time (C^T, or
  // the kernel): refused before any solve when they do not fit (memory_budget.hpp).
  long double plans = 0, largest = 0;
  for (const CostMatrixProblem& p : problems) {
    const long double matrix = 8.0L * static_cast<long double>(p.cost.rows()) * static_cast<long double>(p.cost.cols());
    plans += options.want_plan.value_or(true) ? matrix : 0;
    largest = std::max(largest, matrix);
  }
  const long double threads = std::min<long double>(static_cast<long double>(problems.size()), omp_get_max_threads());
  check_memory(plans + threads * largest,
               fmt::format("the batch's {} plans and {} problems' working matrices at once (float64)", problems.size(),
                           static_cast<long>(threads)),
               "", "C");
  std::vector<OTSolution> solutions(problems.size());
  const auto solve_one = [](CostMatrixProblem& p, const OTSolveOptions& o) {
    return p.symmetric ? solve_ot_symmetric(std::move(p.cost), p.a, o) : solve_ot(std::move(p.cost), p.a, p.b, o);
  };
  if (problems.size() == 1) {  // one problem keeps the threads for its own row loops
    solutions[0] = solve_one(problems[0], options);
    return solutions;
  }
  OTSolveOptions each = options;
  std::mutex progress_mutex;
  std::atomic<bool> cancelled{false};
  if (options.sinkhorn.progress) {
    each.sinkhorn.progress = [&](int iteration, double error) {
      if (cancelled.load()) return false;
      const std::lock_guard<std::mutex> lock(progress_mutex);
      if (!options.sinkhorn.progress(iteration, error)) cancelled.store(true);
      return !cancelled.load();
    };
  }
  parallel_for(static_cast<long>(problems.size()), [&](long k) {
    CostMatrixProblem& p = problems[static_cast<std::size_t>(k)];
    solutions[static_cast<std::size_t>(k)] = solve_one(p, each);
  });
  return solutions;
}

}  // namespace tokenflow
