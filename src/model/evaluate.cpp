// Evaluating a Sinkhorn Transformer on held-out pairs: W_1 to the target coupling, KL, accuracy
// (tokenflow/train.hpp).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "../kernel/parallel_for.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/layers.hpp"
#include "tokenflow/ot_solve.hpp"
#include "tokenflow/train.hpp"

namespace tokenflow {

namespace {

double kl(const RowMatrix& target, const RowMatrix& plan) {
  double s = 0.0;
  for (Eigen::Index i = 0; i < target.size(); ++i)
    if (target.data()[i] > 0.0) s += target.data()[i] * std::log(target.data()[i] / plan.data()[i]);
  return s;
}

Evaluation mean_of(const std::vector<Evaluation>& per_pair, bool has_assignment, bool converged) {
  Evaluation e;
  e.marginal_error = e.w1_converged = e.accuracy_converged = e.converged_fraction = 0.0;
  for (const Evaluation& p : per_pair) {
    e.w1 += p.w1;
    e.loss += p.loss;
    e.accuracy += p.accuracy;
    if (converged) {
      e.marginal_error += p.marginal_error;
      e.w1_converged += p.w1_converged;
      e.accuracy_converged += p.accuracy_converged;
      e.converged_fraction += p.converged_fraction;
    }
  }
  const double count = static_cast<double>(std::max<std::size_t>(1, per_pair.size()));
  e.w1 /= count;
  e.loss /= count;
  e.accuracy = has_assignment ? e.accuracy / count : std::nan("");
  if (converged) {
    e.marginal_error /= count;
    e.w1_converged /= count;
    e.accuracy_converged = has_assignment ? e.accuracy_converged / count : std::nan("");
    e.converged_fraction /= count;
  } else {
    e.marginal_error = e.w1_converged = e.accuracy_converged = e.converged_fraction = std::nan("");
  }
  return e;
}

// The alignment scores of the plans of pairs with gold links (texts), and their mean link mass
// (tokenflow/tasks.hpp); NaN when no pair has any.
AlignmentScores alignment_of(const std::vector<CouplingPair>& pairs, const std::vector<AlignmentCounts>& counts,
                             const std::vector<double>& link_masses) {
  AlignmentCounts total;
  double mass = 0.0;
  long with_links = 0;
  for (std::size_t i = 0; i < pairs.size(); ++i)
    if (!pairs[i].sure.empty()) total += counts[i], mass += link_masses[i], ++with_links;
  if (with_links == 0) return AlignmentScores{};
  AlignmentScores scores = alignment_scores(total);
  scores.link_mass = mass / static_cast<double>(with_links);
  return scores;
}

}  // namespace

std::vector<CouplingPair> make_test_pairs(const TrainConfig& config) {
  std::vector<CouplingPair> pairs(static_cast<std::size_t>(config.train.test_pairs));
  parallel_for(static_cast<long>(pairs.size()), [&](long i) {
    pairs[static_cast<std::size_t>(i)] =
        make_pair(config.task, pair_seed(config.train.seed, 1, static_cast<std::uint64_t>(i)));
  });
  return pairs;
}

Evaluation evaluate(const ParameterLayout& layout, const std::vector<double>& params,
                    const std::vector<CouplingPair>& pairs, bool has_assignment, bool converged,
                    const std::function<bool()>& keep_going) {
  StopPoll poll(keep_going);
  std::vector<Evaluation> per_pair(pairs.size());
  std::vector<AlignmentCounts> counts(pairs.size());
  std::vector<double> link_masses(pairs.size(), 0.0);
  std::vector<PairWorkspace<double>> workspaces(static_cast<std::size_t>(omp_get_max_threads()));
  const AlignedVector<double> theta(params.begin(),
                                    params.end());  // a fixed alignment: see model.hpp
  // Within a pair, the long parts (W_1's network simplex, the converged solve) poll it too: a stop
  // request lands within a pivot's or ten iterations' time, not a pair's.
  const std::function<bool()> going = [&poll] { return !poll.stopped(); };
  parallel_for(static_cast<long>(pairs.size()), [&](long i) {
    if (poll.stopped()) return;
    const CouplingPair& p = pairs[static_cast<std::size_t>(i)];
    const Eigen::VectorXd log_a = p.a.array().log(), log_b = p.b.array().log();
    PairInput<double> in;
    in.x = p.x.data();
    in.y = p.y.data();
    in.log_a = log_a.data();
    in.log_b = log_b.data();
    in.n = static_cast<int>(p.x.rows());
    in.m = static_cast<int>(p.y.rows());
    PairWorkspace<double>& ws = workspaces[static_cast<std::size_t>(omp_get_thread_num())];
    pair_forward(layout, theta.data(), in, ws);
    RowMatrix plan(in.n, in.m);
    for (Eigen::Index k = 0; k < plan.size(); ++k) plan.data()[k] = std::exp(ws.log_plan[k]);
    Evaluation& e = per_pair[static_cast<std::size_t>(i)];
    e.w1 = coupling_w1(p.x, p.y, plan, p.target, keep_going ? going : std::function<bool()>());
    e.loss = nn::kl_forward(p.target.data(), ws.log_plan, in.n, in.m, layout.config().relaxed());
    e.accuracy = has_assignment ? assignment_accuracy(plan, p.assignment) : 0.0;
    if (!p.sure.empty()) {
      counts[static_cast<std::size_t>(i)] = alignment_counts(plan, p.sure, p.possible);
      link_masses[static_cast<std::size_t>(i)] = link_mass(plan, p.possible);
    }
    if (!converged) return;
    e.marginal_error = plan_marginal_error(plan, p.a / p.a.sum(), p.b / p.b.sum());
    RowMatrix solved;
    if (layout.config().implicit()) {
      solved = plan;
      e.converged_fraction = ws.converged_layer.converged ? 1.0 : 0.0;
    } else {
      // The converged plan of the same learned cost, as tokenflow couple computes it by default.
      std::vector<double> log_solved(static_cast<std::size_t>(plan.size()));
      SinkhornOptions solve = couple_sinkhorn_options(final_layer_config(layout, theta.data()));
      if (keep_going) solve.progress = [&going](int, double) { return going(); };
      const nn::ConvergedSinkhornStats stats = nn::sinkhorn_converged_forward(
          log_solved.data(), ws.cost, in.log_a, in.log_b, solve, in.n, in.m);
      solved.resize(in.n, in.m);
      for (Eigen::Index k = 0; k < solved.size(); ++k) solved.data()[k] = std::exp(log_solved[static_cast<std::size_t>(k)]);
      e.converged_fraction = stats.converged ? 1.0 : 0.0;
    }
    e.w1_converged = coupling_w1(p.x, p.y, solved, p.target, keep_going ? going : std::function<bool()>());
    e.accuracy_converged = has_assignment ? assignment_accuracy(solved, p.assignment) : 0.0;
  });
  if (poll.stopped()) throw Cancelled();
  Evaluation mean = mean_of(per_pair, has_assignment, converged);
  mean.alignment = alignment_of(pairs, counts, link_masses);
  return mean;
}

Evaluation evaluate_independent(const std::vector<CouplingPair>& pairs, bool has_assignment) {
  std::vector<Evaluation> per_pair(pairs.size());
  std::vector<AlignmentCounts> counts(pairs.size());
  std::vector<double> link_masses(pairs.size(), 0.0);
  parallel_for(static_cast<long>(pairs.size()), [&](long i) {
    const CouplingPair& p = pairs[static_cast<std::size_t>(i)];
    const RowMatrix plan = p.a * p.b.transpose();
    if (!p.sure.empty()) {
      counts[static_cast<std::size_t>(i)] = alignment_counts(plan, p.sure, p.possible);
      link_masses[static_cast<std::size_t>(i)] = link_mass(plan, p.possible);
    }
    Evaluation& e = per_pair[static_cast<std::size_t>(i)];
    e.w1 = coupling_w1(p.x, p.y, plan, p.target);
    e.loss = kl(p.target, plan);
    e.accuracy = has_assignment ? assignment_accuracy(plan, p.assignment) : 0.0;
  });
  Evaluation mean = mean_of(per_pair, has_assignment, false);
  mean.alignment = alignment_of(pairs, counts, link_masses);
  return mean;
}

}  // namespace tokenflow
