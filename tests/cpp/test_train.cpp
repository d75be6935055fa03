// Coupling tasks, the W_1 metric on X x Y, training (determinism across thread counts, checkpoint
// and resume, learning at all), and texts as measures (tokenflow/tasks.hpp, train.hpp, embed.hpp).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <numeric>

#include "test_util.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/train_checkpoint.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/embed.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/train.hpp"

namespace tokenflow {
namespace {

using testing::kUnit64;

TaskSpec task(const std::string& kind, int n) {
  Config c;
  c.set("task.kind=\"" + kind + "\"");
  c.set("task.n=" + std::to_string(n));
  return read_task_spec(c);
}

// ---- tasks
// ------------------------------------------------------------------------------------------
TEST(Tasks, MatchingIsAShuffledAffineCopy) {
  TaskSpec t = task("matching", 12);
  t.noise = 0.0;
  const CouplingPair p = make_pair(t, testing::fresh_seed());
  ASSERT_EQ(p.assignment.size(), 12u);
  // The target is the permutation coupling of the assignment, with the uniform marginals.
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 12; ++j) EXPECT_EQ(p.target(i, j), j == p.assignment[i] ? 1.0 / 12 : 0.0);
  std::vector<int> sorted = p.assignment;
  std::sort(sorted.begin(), sorted.end());
  for (int j = 0; j < 12; ++j) EXPECT_EQ(sorted[j], j);
  // Without noise, y_{assignment(i)} = s x_i + t exactly: fit s and t on two points, check all.
  const Eigen::RowVectorXd dx = p.x.row(1) - p.x.row(0),
                           dy = p.y.row(p.assignment[1]) - p.y.row(p.assignment[0]);
  const double s = dy.norm() / dx.norm();
  EXPECT_GE(s, 0.5 - 1e-12);
  EXPECT_LE(s, 2.0 + 1e-12);
  const Eigen::RowVectorXd shift = p.y.row(p.assignment[0]) - s * p.x.row(0);
  for (int i = 0; i < 12; ++i)
    EXPECT_LE((p.y.row(p.assignment[i]) - (s * p.x.row(i) + shift)).cwiseAbs().maxCoeff(), 1e-12);
  // The shuffle: the pairs are not in order (12! permutations; the identity has probability 1/12!).
  std::vector<int> identity(12);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(p.assignment, identity);
}

TEST(Tasks, SortingMatchesPointsToTheirRanks) {
  const CouplingPair p = make_pair(task("sorting", 10), testing::fresh_seed());
  ASSERT_EQ(p.x.cols(), 1);
  for (int i = 0; i < 10; ++i)
    for (int k = 0; k < 10; ++k)
      if (p.x(i, 0) < p.x(k, 0)) {
        EXPECT_LT(p.assignment[i], p.assignment[k]);
      }
  for (int j = 1; j < 10; ++j) EXPECT_GT(p.y(j, 0), p.y(j - 1, 0));
}

TEST(Tasks, EntropicTargetIsTheSinkhornPlanOfThePowerCost) {
  for (int power : {1, 2}) {
    TaskSpec t = task("entropic-ot", 9);
    t.m = 7;
    t.min_m = 7;
    t.p = power;
    t.random_weights = true;
    const CouplingPair p = make_pair(t, testing::fresh_seed());
    ASSERT_EQ(p.target.rows(), 9);
    ASSERT_EQ(p.target.cols(), 7);
    EXPECT_TRUE(p.assignment.empty());
    Eigen::MatrixXd cost(9, 7);
    for (int i = 0; i < 9; ++i)
      for (int j = 0; j < 7; ++j) cost(i, j) = std::pow((p.x.row(i) - p.y.row(j)).norm(), power);
    const SinkhornResult ref = reference_sinkhorn(cost, p.a, p.b, t.target_epsilon, 1e-13, 100000);
    // Both within their marginal tolerance of the same fixed point: entries agree to ~ tol.
    EXPECT_LE((p.target - RowMatrix(ref.plan)).cwiseAbs().maxCoeff(), 1e-8) << "p = " << power;
    EXPECT_LE((p.target.colwise().sum().transpose() - p.b).cwiseAbs().sum(), 1e-12);
    EXPECT_LE((p.target.rowwise().sum() - p.a).cwiseAbs().sum(), 1e-9);
  }
}

TEST(Tasks, WhitenedTargetIsTheOptimalPermutationOfTheWhitenedMeasures) {
  const CouplingPair p = make_pair(task("whitened-ot", 6), testing::fresh_seed());
  ASSERT_EQ(p.assignment.size(), 6u);
  // Whiten independently (the symmetric inverse square root of the covariance) and check by
  // brute force over the 720 permutations that the target's cost is the minimum.
  auto whiten = [](const Points<double>& x) {
    const Eigen::RowVectorXd mean = x.colwise().mean();
    const Eigen::MatrixXd c = x.rowwise() - mean;
    const Eigen::MatrixXd cov = c.transpose() * c / static_cast<double>(x.rows());
    const linalg::SymmetricEigen eig = linalg::symmetric_eigen(cov);
    const Eigen::MatrixXd w = c * eig.vectors * eig.values.cwiseSqrt().cwiseInverse().asDiagonal() * eig.vectors.transpose();
    // Invariant: identity covariance.
    EXPECT_LE((w.transpose() * w / static_cast<double>(x.rows()) -
               Eigen::MatrixXd::Identity(x.cols(), x.cols()))
                  .cwiseAbs()
                  .maxCoeff(),
              1e-10);
    return w;
  };
  const Eigen::MatrixXd xw = whiten(p.x), yw = whiten(p.y);
  std::vector<int> perm(6);
  std::iota(perm.begin(), perm.end(), 0);
  double best = INFINITY;
  do {
    double c = 0.0;
    for (int i = 0; i < 6; ++i) c += (xw.row(i) - yw.row(perm[i])).squaredNorm();
    best = std::min(best, c);
  } while (std::next_permutation(perm.begin(), perm.end()));
  double target_cost = 0.0;
  for (int i = 0; i < 6; ++i) target_cost += (xw.row(i) - yw.row(p.assignment[i])).squaredNorm();
  EXPECT_NEAR(target_cost, best, 1e-9 * best);
}

TEST(Tasks, BadKeysAreRefusedWithTheirName) {
  auto refused = [](const std::string& assignment, const std::string& key) {
    Config c;
    c.set(assignment);
    try {
      read_train_config(c);
      ADD_FAILURE() << assignment << " accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.key(), key) << e.what();
    }
  };
  refused("task.kind=\"matchin\"", "task.kind");
  refused("task.m=5", "task.m");  // matching needs m = n
  refused("task.p=3", "task.p");
  refused("model.heads=3", "model.heads");  // does not divide the width 64
  refused("train.step=10", "train.step");   // unknown key (did you mean train.steps?)
  refused("task.random_weights=true", "task.random_weights");  // matching needs uniform weights
}

// ---- W_1 on X x Y
// ---------------------------------------------------------------------------------
TEST(CouplingW1, AgreesWithBruteForceOnPermutationCouplings) {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  const int n = 5;
  const Points<double> x = testing::random_matrix(rng, n, 2, 1.0),
                       y = testing::random_matrix(rng, n, 2, 1.0);
  std::vector<int> p(n), q(n);
  std::iota(p.begin(), p.end(), 0);
  std::iota(q.begin(), q.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  std::shuffle(q.begin(), q.end(), rng);
  RowMatrix pi = RowMatrix::Zero(n, n), sigma = RowMatrix::Zero(n, n);
  for (int i = 0; i < n; ++i) pi(i, p[i]) = sigma(i, q[i]) = 1.0 / n;
  // Between two uniform measures of n atoms, OT is an assignment: brute force over n! of them.
  auto atom = [&](int i, int j) {
    Eigen::VectorXd z(4);
    z << x(i, 0), x(i, 1), y(j, 0), y(j, 1);
    return z;
  };
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  double best = INFINITY;
  do {
    double c = 0.0;
    for (int i = 0; i < n; ++i) c += (atom(i, p[i]) - atom(perm[i], q[perm[i]])).norm() / n;
    best = std::min(best, c);
  } while (std::next_permutation(perm.begin(), perm.end()));
  const double w = coupling_w1(x, y, pi, sigma);
  // LEMON's optimum on masses quantized to 2^-52, costs summed over n atoms.
  EXPECT_NEAR(w, best, 16 * n * kUnit64 * (1.0 + best)) << "seed " << seed;
  EXPECT_NEAR(coupling_w1(x, y, sigma, pi), w, 16 * n * kUnit64 * (1.0 + best));
  EXPECT_EQ(coupling_w1(x, y, pi, pi), 0.0);
  EXPECT_EQ(assignment_accuracy(pi, p), 1.0);
  EXPECT_NEAR(assignment_accuracy(pi, q),
              static_cast<double>(std::inner_product(p.begin(), p.end(), q.begin(), 0,
                                                     std::plus<>(), std::equal_to<>())) /
                  n,
              0.0);
}

// W_1 is homogeneous: points scaled by 2^k (exactly) give 2^k W_1, also where their squared
// distances leave double's range (2^600: overflow; 2^-600: underflow to 0 before, W_1 = 0).
TEST(CouplingW1, ScalesWithThePointsBeyondTheRangeOfTheirSquares) {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  const int n = 2 + static_cast<int>(rng() % 6), m = 2 + static_cast<int>(rng() % 6);
  const Points<double> x = testing::random_matrix(rng, n, 2, 1.0), y = testing::random_matrix(rng, m, 3, 1.0);
  // Two couplings with random positive entries (each normalized: mass 1).
  RowMatrix pi = testing::random_matrix(rng, n, m, 1.0).cwiseAbs(), sigma = testing::random_matrix(rng, n, m, 1.0).cwiseAbs();
  pi /= pi.sum();
  sigma /= sigma.sum();
  const double w = coupling_w1(x, y, pi, sigma);
  ASSERT_GT(w, 0.0) << "seed " << seed;
  for (const int k : {600, 1000, -600, -900}) {
    const double s = std::ldexp(1.0, k);
    const double ws = coupling_w1(Points<double>(x * s), Points<double>(y * s), pi, sigma);
    // The network simplex's optimum on masses quantized to 2^-52 (as above), and the costs' own
    // rounding (a few units in hypot's and the norms' last places, within the same bound).
    EXPECT_NEAR(ws / s, w, 16 * (n + m) * kUnit64 * (1.0 + w)) << "seed " << seed << ", scale 2^" << k;
  }
}

// ---- training
// ------------------------------------------------------------------------------------------
TrainConfig tiny_config(const std::string& kind = "matching") {
  Config c;
  for (const char* s :
       {"task.n=6", "model.width=8", "model.layers=1", "model.heads=2", "model.k=4",
        "model.sinkhorn_iters=8", "train.batch=10", "train.steps=6", "train.test_pairs=8",
        "train.eval_every=2", "train.lr=1e-2", "train.weight_decay=0.01"})
    c.set(s);
  c.set("task.kind=\"" + kind + "\"");
  return read_train_config(c);
}

TEST(Train, SameParametersWithOneOrTwoThreads) {
  TrainConfig config = tiny_config();
  config.train.seed = testing::fresh_seed() % 1000000;
  const auto test_pairs = make_test_pairs(config);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const TrainResult one = train(config, initial_state(config, test_pairs), test_pairs);
  omp_set_num_threads(2);
  const TrainResult two = train(config, initial_state(config, test_pairs), test_pairs);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.state.params, two.state.params);  // bit for bit
  EXPECT_EQ(one.final.w1, two.final.w1);
}

TEST(Train, ResumingFromACheckpointGivesTheUninterruptedRun) {
  for (bool float32 : {false, true}) {
    TrainConfig config = tiny_config("entropic-ot");
    config.float32 = float32;
    config.train.checkpoint_every = 3;
    const auto test_pairs = make_test_pairs(config);
    const auto dir = testing::temp_dir("resume");
    const TrainResult straight = train(config, initial_state(config, test_pairs), test_pairs);
    // Stop at step 4 (Ctrl-C): the run writes the checkpoint of step 4, between the periodic ones
    // (every 3 steps), then stops; resume from the file.
    TrainCallbacks cb;
    cb.checkpoint = [&](const TrainState& s) {
      write_checkpoint(dir / "checkpoint.bin", config, s);
    };
    cb.progress = [](long step, long, double, double) { return step < 4; };
    EXPECT_THROW(train(config, initial_state(config, test_pairs), test_pairs, cb), Cancelled);
    TrainState state = read_checkpoint(dir / "checkpoint.bin", config);
    EXPECT_EQ(state.step, 4);
    const TrainResult resumed = train(config, std::move(state), test_pairs);
    EXPECT_EQ(resumed.state.params, straight.state.params) << (float32 ? "f32" : "f64");
    EXPECT_EQ(resumed.state.adam_v, straight.state.adam_v);
    ASSERT_EQ(resumed.state.metrics.size(), straight.state.metrics.size());
    for (std::size_t i = 0; i < straight.state.metrics.size(); ++i) {
      EXPECT_EQ(resumed.state.metrics[i].step, straight.state.metrics[i].step);
      EXPECT_EQ(resumed.state.metrics[i].loss, straight.state.metrics[i].loss);
      EXPECT_EQ(resumed.state.metrics[i].test_w1, straight.state.metrics[i].test_w1);
    }
    // The best model and the warnings travel with the checkpoint.
    EXPECT_EQ(resumed.state.best_step, straight.state.best_step);
    EXPECT_EQ(resumed.state.best.loss, straight.state.best.loss);
    EXPECT_EQ(resumed.state.best_params, straight.state.best_params);
    EXPECT_EQ(resumed.state.warnings, straight.state.warnings);
    // Another configuration's checkpoint is refused, and so is a damaged one.
    TrainConfig other = config;
    other.train.lr *= 2;
    EXPECT_THROW(read_checkpoint(dir / "checkpoint.bin", other), InputError);
    std::string bytes;
    {
      std::ifstream in(dir / "checkpoint.bin", std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[bytes.size() / 2] ^= 0x10;
    std::ofstream(dir / "checkpoint.bin", std::ios::binary) << bytes;
    EXPECT_THROW(read_checkpoint(dir / "checkpoint.bin", config), InputError);
  }
}

// A stop request (TrainCallbacks::keep_going, Ctrl-C) at any of its polls, inside a step's batch or
// an evaluation (the untrained one, a periodic one, the final one): the run stops, and resuming from
// the checkpoint it wrote gives the uninterrupted run (parameters, moments, every metrics row).
TEST(Train, StoppingAtAnyPollAndResumingGivesTheUninterruptedRun) {
  TrainConfig config = tiny_config("entropic-ot");
  config.train.seed = testing::fresh_seed() % 1000000;
  config.train.checkpoint_every = 4;
  const auto test_pairs = make_test_pairs(config);
  const TrainResult straight = train(config, initial_state(config, test_pairs), test_pairs);
  long polls = 0;
  TrainCallbacks counting;
  counting.keep_going = [&] { return ++polls > 0; };
  const TrainResult counted = train(config, initial_state(config, test_pairs, counting.keep_going), test_pairs, counting);
  EXPECT_EQ(counted.state.params, straight.state.params);  // polling changes nothing
  ASSERT_GE(polls, config.train.steps + 1);  // each step's batch and each evaluation polls at least once
  for (long stop_at = 1; stop_at <= polls; ++stop_at) {
    const auto dir = testing::temp_dir("stop-" + std::to_string(stop_at));
    long calls = 0;
    TrainCallbacks cb;
    cb.keep_going = [&] { return ++calls < stop_at; };
    cb.checkpoint = [&](const TrainState& s) { write_checkpoint(dir / "checkpoint.bin", config, s); };
    bool stopped = false;
    try {
      train(config, initial_state(config, test_pairs, cb.keep_going), test_pairs, cb);
    } catch (const Cancelled&) {
      stopped = true;
    }
    // The polls' count depends on timing (every 20 ms at most): a late stop may find the run done.
    if (!stopped) continue;
    if (!std::filesystem::exists(dir / "checkpoint.bin")) {
      EXPECT_LE(calls, 2) << "only the untrained evaluation stops without a checkpoint (stop at poll " << stop_at << ")";
      continue;
    }
    const TrainResult resumed = train(config, read_checkpoint(dir / "checkpoint.bin", config), test_pairs);
    EXPECT_EQ(resumed.state.params, straight.state.params) << "stop at poll " << stop_at;
    EXPECT_EQ(resumed.state.adam_m, straight.state.adam_m);
    EXPECT_EQ(resumed.final.w1, straight.final.w1);
    ASSERT_EQ(resumed.state.metrics.size(), straight.state.metrics.size()) << "stop at poll " << stop_at;
    for (std::size_t i = 0; i < straight.state.metrics.size(); ++i) {
      EXPECT_EQ(resumed.state.metrics[i].step, straight.state.metrics[i].step);
      EXPECT_EQ(resumed.state.metrics[i].loss, straight.state.metrics[i].loss);
      EXPECT_EQ(resumed.state.metrics[i].test_loss, straight.state.metrics[i].test_loss);
    }
  }
}

TEST(Train, ACheckpointOfTheEarlierFormatIsReadAsTheSameState) {
  // The earlier training checkpoint: magic "TFCKPT01", the payload that the container holds today,
  // then the FNV-1a hash of both. `resume` must read it as a training checkpoint of the same state.
  TrainConfig config = tiny_config();
  config.train.steps = 2;  // a state with AdamW moments, as checkpoints hold
  const auto test_pairs = make_test_pairs(config);
  const TrainState state = train(config, initial_state(config, test_pairs), test_pairs).state;
  const auto dir = testing::temp_dir("legacy-checkpoint");
  write_checkpoint(dir / "checkpoint.bin", config, state);
  EXPECT_EQ(checkpoint_kind(dir / "checkpoint.bin"), CheckpointKind::train);
  std::string legacy = "TFCKPT01" + read_checkpoint_file(dir / "checkpoint.bin", CheckpointKind::train);
  const std::uint64_t seal = fnv1a64(legacy.data(), legacy.size());
  legacy.append(reinterpret_cast<const char*>(&seal), sizeof seal);
  std::ofstream(dir / "legacy.bin", std::ios::binary) << legacy;
  EXPECT_EQ(checkpoint_kind(dir / "legacy.bin"), CheckpointKind::train);
  EXPECT_EQ(read_checkpoint_config(dir / "legacy.bin"), to_toml(config));
  const TrainState back = read_checkpoint(dir / "legacy.bin", config);
  EXPECT_EQ(back.step, state.step);
  EXPECT_EQ(back.params, state.params);
  EXPECT_EQ(back.adam_m, state.adam_m);
  // A training checkpoint is not a simulate checkpoint.
  EXPECT_THROW(read_checkpoint_file(dir / "legacy.bin", CheckpointKind::simulate), InputError);
  legacy[legacy.size() / 2] ^= 0x10;
  std::ofstream(dir / "legacy.bin", std::ios::binary) << legacy;
  EXPECT_THROW(read_checkpoint(dir / "legacy.bin", config), InputError);
}

TEST(Train, TrainingLowersTheTestErrorBelowTheUntrainedAndIndependentCouplings) {
  TrainConfig config = tiny_config();
  config.train.steps = 40;
  config.train.eval_every = 40;
  config.train.test_pairs = 32;
  const auto test_pairs = make_test_pairs(config);
  const TrainResult r = train(config, initial_state(config, test_pairs), test_pairs);
  EXPECT_LT(r.final.loss, r.state.untrained.loss);
  EXPECT_LT(r.final.w1, r.state.untrained.w1);
  EXPECT_LT(r.final.w1, r.state.independent.w1);
  EXPECT_GT(r.final.accuracy, r.state.untrained.accuracy);
  // The independent coupling puts 1/n on the right column: its accuracy is that of argmax ties
  // (the first column), 1/n on average; the metrics rows are at 0, 40.
  ASSERT_EQ(r.state.metrics.size(), 2u);
  EXPECT_EQ(r.state.metrics.back().step, 40);
}

TEST(Train, TheBestModelIsTheEvaluationOfLowestTestLossAndItsParameters) {
  // A learning rate far too large for the model (0.3 with AdamW: every weight moves by about 0.3
  // a step) makes the test loss wander; whatever it does, the best is the lowest row and its
  // parameters evaluate to that row again, bit for bit (evaluate is deterministic).
  TrainConfig config = tiny_config();
  config.train.seed = testing::fresh_seed() % 1000000;
  config.train.steps = 24;
  config.train.eval_every = 3;
  config.train.lr = 0.3;
  const auto test_pairs = make_test_pairs(config);
  const TrainResult r = train(config, initial_state(config, test_pairs), test_pairs);
  double lowest = r.state.metrics.front().test_loss;
  long lowest_step = 0;
  for (const MetricsRow& row : r.state.metrics)
    if (row.test_loss < lowest) lowest = row.test_loss, lowest_step = row.step;
  EXPECT_EQ(r.state.best_step, lowest_step);
  EXPECT_EQ(r.state.best.loss, lowest);
  const ParameterLayout layout(config.model);
  EXPECT_EQ(r.best_model.params, r.state.best_params);
  EXPECT_EQ(evaluate(layout, r.best_model.params, test_pairs, true).loss, lowest);
  EXPECT_EQ(r.model.params, r.state.params);  // model.bin stays the last state
  // Every row far above the best seen so far was warned of, once per excursion.
  double best = r.state.metrics.front().test_loss;
  bool far = false;
  std::size_t expected = 0;
  for (const MetricsRow& row : r.state.metrics) {
    best = std::min(best, row.test_loss);
    const bool now = test_loss_far_above_best(row.test_loss, best, r.state.untrained.loss);
    expected += now && !far;
    far = now;
  }
  EXPECT_EQ(r.state.warnings.size(), expected);
  for (const std::string& w : r.state.warnings) EXPECT_NE(w.find("far above its best"), std::string::npos) << w;
}

TEST(Train, TheFarAboveRuleIsADoublingLargeOnTheScaleOfTheUntrainedLoss) {
  EXPECT_FALSE(test_loss_far_above_best(0.04, 0.018, 2.9));  // noise near 0: doubled, but small
  EXPECT_FALSE(test_loss_far_above_best(0.5, 0.3, 2.9));     // large, but not doubled
  EXPECT_TRUE(test_loss_far_above_best(12.7, 0.034, 2.9));   // a collapse
  EXPECT_TRUE(test_loss_far_above_best(std::nan(""), 0.1, 2.9));
  EXPECT_TRUE(test_loss_far_above_best(std::numeric_limits<double>::infinity(), 0.1, 2.9));
}

TEST(Train, ANonFiniteLossStopsTheRunAsFailedWithTheBestModelKept) {
  // A NaN weight (as an overflow upstream would leave) makes the first step's loss NaN: the run stops
  // at its first step with status "failed" and no update, and the best model is the untrained one
  // of initial_state. (The model itself does not overflow on large weights or data: layer norms
  // and the log-domain Sinkhorn layer keep a loss of 1e23 finite.)
  for (bool float32 : {false, true}) {
    TrainConfig config = tiny_config();
    config.float32 = float32;
    const auto test_pairs = make_test_pairs(config);
    TrainState state = initial_state(config, test_pairs);
    const std::vector<double> untrained = state.params;
    state.params[state.params.size() / 2] = std::nan("");
    const std::vector<double> broken = state.params;
    std::vector<std::string> seen;
    TrainCallbacks cb;
    cb.warning = [&](const std::string& line) { seen.push_back(line); };
    const TrainResult r = train(config, std::move(state), test_pairs, cb);
    EXPECT_EQ(r.status, "failed");
    EXPECT_NE(r.reason.find("loss is not finite at step 1"), std::string::npos) << r.reason;
    EXPECT_EQ(r.state.step, 0);
    ASSERT_EQ(r.model.params.size(), broken.size());  // the last state: no update was applied
    for (std::size_t i = 0; i < broken.size(); ++i) {
      if (!std::isnan(broken[i])) {
        EXPECT_EQ(r.model.params[i], broken[i]) << i;
      }
    }
    EXPECT_EQ(r.best_model.params, untrained);
    EXPECT_EQ(r.state.best_step, 0);
    ASSERT_EQ(seen.size(), 1u);  // said as it happened, and kept for summary.json
    EXPECT_EQ(r.state.warnings, seen);
  }
}

TEST(Train, TheConfigTextOfCheckpointsAndModelFilesKeepsItsForm) {
  // model.bin and checkpoint.bin keep this text, and a checkpoint resumes only a run whose text
  // hashes the same: the writer must give exactly these lines (order, number format) for files
  // written earlier to keep working.
  const std::string full =
      "dtype = \"f64\"\n"
      "\n"
      "[task]\n"
      "kind = \"matching\"\n"
      "n = 16\n"
      "m = 16\n"
      "min_n = 16\n"
      "min_m = 16\n"
      "d = 2\n"
      "noise = 0.02\n"
      "scale_range = [0.5, 2.0]\n"
      "shift = 1.0\n"
      "p = 1\n"
      "target_epsilon = 0.10000000000000001\n"
      "random_weights = false\n"
      "\n"
      "[model]\n"
      "d = 2\n"
      "width = 64\n"
      "layers = 2\n"
      "heads = 4\n"
      "k = 32\n"
      "mlp_ratio = 4\n"
      "epsilon = 1.0\n"
      "sinkhorn_iters = 30\n"
      "share_encoders = false\n"
      "sinkhorn_grad = \"unrolled\"\n"
      "sinkhorn_tol = 1.0000000000000001e-09\n"
      "sinkhorn_max_iter = 10000\n"
      "# marginal_penalty = inf\n"
      "learn_marginal_penalty = false\n"
      "\n"
      "[train]\n"
      "steps = 3000\n"
      "batch = 32\n"
      "lr = 0.001\n"
      "seed = 0\n"
      "test_pairs = 128\n"
      "weight_decay = 0.0\n"
      "beta1 = 0.90000000000000002\n"
      "beta2 = 0.999\n"
      "warmup = 100\n"
      "schedule = \"cosine\"\n"
      "grad_clip = 1.0\n"
      "eval_every = 0\n"
      "checkpoint_every = 0\n";
  EXPECT_EQ(to_toml(TrainConfig{}), full);
  TrainConfig c;
  c.float32 = true;
  c.task.kind = "whitened-ot";
  c.task.random_weights = true;
  c.task.scale_min = 0.25;
  c.model.share_encoders = true;
  c.train.lr = 0.1 + 1e-17;  // steps is hashed only with the cosine schedule (the default)
  c.train.seed = 7;
  const std::string hashed =
      "dtype = \"f32\"\n"
      "\n"
      "[task]\n"
      "kind = \"whitened-ot\"\n"
      "n = 16\n"
      "m = 16\n"
      "min_n = 16\n"
      "min_m = 16\n"
      "d = 2\n"
      "noise = 0.02\n"
      "scale_range = [0.25, 2.0]\n"
      "shift = 1.0\n"
      "p = 1\n"
      "target_epsilon = 0.10000000000000001\n"
      "random_weights = true\n"
      "\n"
      "[model]\n"
      "d = 2\n"
      "width = 64\n"
      "layers = 2\n"
      "heads = 4\n"
      "k = 32\n"
      "mlp_ratio = 4\n"
      "epsilon = 1.0\n"
      "sinkhorn_iters = 30\n"
      "share_encoders = true\n"
      "\n"
      "[train]\n"
      "steps = 3000\n"
      "batch = 32\n"
      "lr = 0.10000000000000002\n"
      "seed = 7\n"
      "test_pairs = 128\n"
      "weight_decay = 0.0\n"
      "beta1 = 0.90000000000000002\n"
      "beta2 = 0.999\n"
      "warmup = 100\n"
      "schedule = \"cosine\"\n"
      "grad_clip = 1.0\n";
  EXPECT_EQ(config_hash(c), fnv1a64(hashed.data(), hashed.size()));
}

TEST(Train, ConfigRoundTripsThroughItsToml) {
  TrainConfig c = tiny_config("whitened-ot");
  c.task.random_weights = true;
  c.model.share_encoders = true;
  c.train.schedule = "cosine";
  c.train.lr = 0.1 + 1e-17;
  const TrainConfig back = read_train_config(Config::from_text(to_toml(c), "round trip"));
  EXPECT_EQ(to_toml(back), to_toml(c));
  EXPECT_EQ(config_hash(back), config_hash(c));
}

// ---- texts as measures
// ------------------------------------------------------------------------------------
TEST(Embed, RepeatedWordsWeighMoreAndUnknownWordsAreReported) {
  const auto dir = testing::temp_dir("embed");
  std::ofstream(dir / "vec.txt") << "4 2\nthe 0.5 1.5\nCat 1 0\ndog 0 1\nsat -1e-3 2\n";
  const WordVectors v = read_word_vectors(dir / "vec.txt");
  EXPECT_EQ(v.dim, 2);
  EXPECT_EQ(v.words.size(), 4u);
  EXPECT_EQ(tokenize("The cat's  DOG,sat!"),
            (std::vector<std::string>{"the", "cat's", "dog", "sat"}));
  const TextMeasure t = text_to_measure(v, "The cat sat on the mat; the cat.");
  EXPECT_EQ(t.words, (std::vector<std::string>{"the", "cat", "sat"}));
  EXPECT_EQ(t.counts, (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(t.unknown, (std::vector<std::string>{"on", "mat"}));
  EXPECT_EQ(t.tokens, 8);
  EXPECT_DOUBLE_EQ(t.weights[0], 0.5);
  EXPECT_DOUBLE_EQ(t.weights[1], 2.0 / 6.0);
  EXPECT_EQ(t.points(1, 0), 1.0);  // "cat" read as "Cat"
  EXPECT_EQ(t.points(2, 0), -1e-3);
  EXPECT_THROW(text_to_measure(v, "nothing known here"), InputError);
  // A line with the wrong number of values names the file and the line.
  std::ofstream(dir / "bad.txt") << "the 1 2\ncat 1 2 3\n";
  try {
    read_word_vectors(dir / "bad.txt");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt: line 2"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "nan.txt") << "the 1 nan\n";
  EXPECT_THROW(read_word_vectors(dir / "nan.txt"), InputError);
}

}  // namespace
}  // namespace tokenflow
