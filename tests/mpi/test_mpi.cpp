// 2 ranks against 1 process (run under `mpirun -np 2`, OMP_NUM_THREADS=1): every rank computes the
// single-process result (no communicator) and the distributed one (the world) on the same fresh
// random input and compares them. Where distributed.hpp promises bit for bit, the comparison is
// exact (EXPECT_EQ on every entry); the one exception (the symmetric kernel) has a derived bound.
#include <gtest/gtest.h>


#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "../../src/distributed/world/world.hpp"
#include "../cpp/test_util.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/coupling_source.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/distributed.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/train.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::random_matrix;
using testing::random_measure;

const Communicator& world() {
  const Communicator* comm = distributed::world();
  if (comm == nullptr) throw std::runtime_error("the MPI tests must run on several ranks (mpirun -np 2)");
  return *comm;
}

TEST(MpiWorld, RunsOnSeveralRanks) {
  ASSERT_NE(distributed::world(), nullptr);
  EXPECT_GE(world().size(), 2);
  EXPECT_TRUE(distributed::built_with_mpi());
}

TEST(MpiWorld, BlockOffsetsCoverEveryUnitOnceInWholeGranules) {
  for (Eigen::Index units : {0, 1, 23, 24, 100, 1000})
    for (int size : {1, 2, 3, 7})
      for (Eigen::Index granule : {1, 24}) {
        const auto o = block_offsets(units, size, granule);
        ASSERT_EQ(o.size(), static_cast<std::size_t>(size) + 1);
        EXPECT_EQ(o.front(), 0);
        EXPECT_EQ(o.back(), units);
        for (int r = 0; r < size; ++r) {
          EXPECT_LE(o[r], o[r + 1]);
          if (r > 0) {
            EXPECT_TRUE(o[r] % granule == 0 || o[r] == units);
          }
        }
      }
}

TEST(MpiWorld, AllGatherPutsEveryRanksBlockEverywhere) {
  const Communicator& comm = world();
  const Eigen::Index n = 37, len = 3;
  const auto offsets = block_offsets(n, comm.size());
  std::vector<double> data(static_cast<std::size_t>(n * len), -1.0);
  for (Eigen::Index i = offsets[comm.rank()]; i < offsets[comm.rank() + 1]; ++i)
    for (Eigen::Index c = 0; c < len; ++c) data[static_cast<std::size_t>(i * len + c)] = static_cast<double>(i * 10 + c);
  allgather_rows(&comm, data.data(), offsets, len);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index c = 0; c < len; ++c) EXPECT_EQ(data[static_cast<std::size_t>(i * len + c)], static_cast<double>(i * 10 + c));
}

AttentionParams random_params(std::mt19937_64& rng, const std::string& kind, int d, int heads, int k, bool causal,
                              bool sphere, bool layers) {
  AttentionSpec s;
  s.kind = kind;
  s.heads = heads;
  s.Q = random_matrix(rng, heads * k, d, 0.6);
  s.K = random_matrix(rng, heads * k, d, 0.6);
  s.V = random_matrix(rng, heads * d, d, 0.5);
  s.W = random_matrix(rng, d, heads * d, 0.5);
  s.mask = causal ? "causal" : "none";
  s.normalize = sphere ? "sphere" : "none";
  if (kind == "sinkhorn") s.epsilon = 1.0;
  if (layers) {
    AttentionSpec::Layer l;
    l.until = 0.013;  // inside a step: the integrators cut the step there
    l.Q = random_matrix(rng, heads * k, d, 0.6);
    l.V = random_matrix(rng, heads * d, d, 0.5);
    s.layers = {l};
  }
  return make_attention(s, d);
}

// max_i |row i| (a loop: GCC 12 reports a false -Wuninitialized in Eigen's AVX-512 rowwise().norm()).
double max_row_norm(const Eigen::MatrixXd& m) {
  double largest = 0.0;
  for (Eigen::Index i = 0; i < m.rows(); ++i) largest = std::max(largest, std::sqrt(m.row(i).squaredNorm()));
  return largest;
}

template <class T>
Measure<T> cast_measure(const Measure<double>& mu) {
  return Measure<T>{mu.points.cast<T>(), mu.weights.cast<T>(), mu.positions.cast<T>()};
}

template <class M>
void expect_bitwise_equal(const M& got, const M& want, const std::string& what) {
  ASSERT_EQ(got.rows(), want.rows()) << what;
  ASSERT_EQ(got.cols(), want.cols()) << what;
  long differing = 0;
  for (Eigen::Index i = 0; i < got.size(); ++i)
    if (!(got.data()[i] == want.data()[i]) && !(std::isnan(got.data()[i]) && std::isnan(want.data()[i]))) ++differing;
  EXPECT_EQ(differing, 0) << what << ": entries that differ from the single-process result";
}

template <class T>
void check_velocity(const std::string& kind, bool causal, bool sphere, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  // n = 100: query tiles of 24 split 48 | 52 on 2 ranks (a partial last tile); causal masks get
  // random positions, so the sweep order is not the tokens' order.
  const Measure<double> mu64 = random_measure(rng, 100, 3, true, causal);
  const AttentionParams p = random_params(rng, kind, 3, 2, 4, causal, sphere, false);
  const Measure<T> mu = cast_measure<T>(mu64);
  AttentionField<T> one(p, mu), split(p, mu);
  split.set_communicator(&world());
  Points<T> x = mu.points, want, got;
  if (sphere) x.rowwise().normalize();
  for (int call = 0; call < 2; ++call) {  // the second call: Sinkhorn's warm start
    one.velocity(0.0, x, want);
    split.velocity(0.0, x, got);
    expect_bitwise_equal(got, want, kind + (causal ? " causal" : "") + (sphere ? " sphere" : "") +
                                         (sizeof(T) == 4 ? " f32" : " f64"));
  }
}

TEST(MpiVelocity, EveryKindMatchesOneProcessBitForBit) {
  for (const std::string kind : {"softmax", "l2", "sigmoid", "linear", "sinkhorn"})
    for (bool causal : {false, true})
      for (bool sphere : {false, true}) {
        if (kind == "sinkhorn" && causal) continue;  // Sinkhorn attention has no mask
        check_velocity<double>(kind, causal, sphere, fresh_seed());
        check_velocity<float>(kind, causal, sphere, fresh_seed());
      }
}

TEST(MpiVelocity, SymmetricKernelCaseAgreesToTheRoundingOfThePairLogits) {
  // K_h = Q_h, no mask, k >= 16: one process uses the symmetric kernel, which reuses the logit of
  // (i, j) for (j, i) and sums a query's key blocks in another order; the ranks use the tile kernel.
  // Bound: a logit <q, k> of k terms differs by at most 2 gamma_k |q| |k| between the two orders and
  // roles (gamma_k = k u / (1 - k u), u the unit roundoff; q' = scale Q x and k = K x differ by a
  // rounding in the scale too, absorbed by the factor 2); the weights w = exp(s - max) / Z then
  // differ relatively by at most twice the largest logit error (numerator and normalizer), and the
  // sums of n terms reordered by 2 gamma_n relatively: |dGamma_i| <= (4 gamma_k max|q||k| + 4 gamma_n)
  // * sum_h max_j |W_h V_h x_j|, times 2 for the double accumulation and the tile sums in T.
  for (bool f32 : {false, true}) {
    std::mt19937_64 rng(fresh_seed());
    const int d = 3, k = 16, n = 100;
    AttentionSpec s;
    s.Q = random_matrix(rng, k, d, 0.3);
    s.K = s.Q;
    s.V = random_matrix(rng, d, d, 0.5);
    const AttentionParams p = make_attention(s, d);
    const Measure<double> mu = random_measure(rng, n, d, true);
    const double u = f32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
    const Eigen::MatrixXd q = mu.points * (p.scale * p.layers[0].heads[0].Q.transpose());
    const Eigen::MatrixXd kk = mu.points * p.layers[0].heads[0].K.transpose();
    const double qk = max_row_norm(q) * max_row_norm(kk);
    const double values = max_row_norm(mu.points * (p.layers[0].heads[0].W * p.layers[0].heads[0].V).transpose());
    auto gamma = [u](double m) { return m * u / (1 - m * u); };
    const double bound = 2 * (4 * gamma(k) * qk + 4 * gamma(n)) * values;
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const Measure<T> m = cast_measure<T>(mu);
      AttentionField<T> one(p, m), split(p, m);
      split.set_communicator(&world());
      Points<T> a, b;
      one.velocity(0.0, m.points, a);
      split.velocity(0.0, m.points, b);
      return (a.template cast<double>() - b.template cast<double>()).cwiseAbs().maxCoeff();
    };
    const double diff = f32 ? run(float{}) : run(double{});
    EXPECT_LE(diff, bound) << (f32 ? "f32" : "f64");
  }
}

TEST(MpiVelocity, FastSummationAgreesWithOneProcessWithinTwiceItsTolerance) {
  // attention.summation = fast: each rank builds the grid from all keys and its own queries (the
  // grid's box and refinement depend on the queries), so the ranks' rows are not the single
  // process's bit for bit; both are within tol sum_j P_ij |V_h x_j| per head of the exact sum, so
  // they differ by at most twice that, mapped by |W_h| (plus the output rounding of T).
  std::mt19937_64 rng(fresh_seed());
  const int d = 3, k = 2, heads = 2, n = 2000;
  AttentionSpec s;
  s.kind = "l2";
  s.heads = heads;
  s.summation = "fast";
  s.Q = random_matrix(rng, heads * k, d, 0.35);
  s.K = random_matrix(rng, heads * k, d, 0.35);
  s.V = random_matrix(rng, heads * d, d, 0.5);
  s.W = random_matrix(rng, d, heads * d, 0.5);
  const AttentionParams p = make_attention(s, d);
  const Measure<double> mu = random_measure(rng, n, d, true);
  Eigen::VectorXd allowed = Eigen::VectorXd::Zero(n);
  for (int h = 0; h < heads; ++h) {
    const HeadBlocks& b = p.layers[0].heads[static_cast<std::size_t>(h)];
    const Eigen::MatrixXd P = reference_attention_matrix(p, mu, 0.0, h);
    Eigen::VectorXd vnorm(n);
    const Eigen::MatrixXd v = mu.points * b.V.transpose();
    for (Eigen::Index j = 0; j < n; ++j) vnorm[j] = std::sqrt(v.row(j).squaredNorm());
    const double wnorm = linalg::spectral_norm(b.W);
    allowed += 2.0 * p.summation_tol * wnorm * (P * vnorm);
  }
  AttentionField<double> one(p, mu), split(p, mu);
  split.set_communicator(&world());
  Points<double> a, b;
  one.velocity(0.0, mu.points, a);
  split.velocity(0.0, mu.points, b);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double diff = std::sqrt((a.row(i) - b.row(i)).squaredNorm());
    ASSERT_LE(diff, allowed[i] * (1.0 + 1e-9) + 1e-14 * std::sqrt(a.row(i).squaredNorm())) << "token " << i;
  }
  EXPECT_EQ(split.summation_report().fast_evaluations, heads);
}

TEST(MpiSoftMin, DistributedSoftMinIsTheOnlineOneBitForBit) {
  std::mt19937_64 rng(fresh_seed());
  for (CostKind cost : {CostKind::sqeuclidean, CostKind::euclidean, CostKind::dot}) {
    const OnlineSoftMin::PointMatrix x = random_matrix(rng, 61, 3, 1.0), y = random_matrix(rng, 45, 3, 1.0);
    const OnlineSoftMin one(x, y, cost);
    const DistributedSoftMin split(world(), x, y, cost);
    const Eigen::VectorXd h_cols = random_matrix(rng, 45, 1, 1.0), h_rows = random_matrix(rng, 61, 1, 1.0);
    Eigen::VectorXd a, b;
    one.softmin_rows(0.3, h_cols, a);
    split.softmin_rows(0.3, h_cols, b);
    expect_bitwise_equal(b, a, "rows");
    one.softmin_cols(0.3, h_rows, a);
    split.softmin_cols(0.3, h_rows, b);
    expect_bitwise_equal(b, a, "cols");
    // The whole loop, then: the same potentials and iterations.
    SinkhornOptions opt;
    opt.epsilon = 0.5;
    opt.tol = 1e-10;
    const Eigen::VectorXd wa = Eigen::VectorXd::Constant(61, 1.0 / 61), wb = Eigen::VectorXd::Constant(45, 1.0 / 45);
    const SinkhornResult r1 = sinkhorn(one, wa, wb, opt), r2 = sinkhorn(split, wa, wb, opt);
    EXPECT_EQ(r1.iterations, r2.iterations);
    expect_bitwise_equal(r2.f, r1.f, "f");
    expect_bitwise_equal(r2.g, r1.g, "g");
    EXPECT_EQ(r1.cost, r2.cost);
  }
}

template <class T>
void check_simulation(const std::string& kind, Integrator integrator, bool causal, bool sphere, bool layers,
                      std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Measure<double> mu64 = random_measure(rng, 60, 3, true, causal);
  const AttentionParams p = random_params(rng, kind, 3, 1, 3, causal, sphere, layers);
  RunSpec run;
  run.T = 0.05;
  run.dt = 0.01;
  run.integrator = integrator;
  run.save_every = 2;
  run.tol = 1e-8;
  const Measure<T> mu = cast_measure<T>(mu64);
  const SimulationResult<T> one = simulate(p, run, mu);
  const SimulationResult<T> split = simulate<T>(p, run, mu, {}, {}, nullptr, &world());
  const std::string what = kind + " " + to_string(integrator) + (causal ? " causal" : "") + (sphere ? " sphere" : "") +
                           (layers ? " layers" : "") + (sizeof(T) == 4 ? " f32" : " f64");
  EXPECT_EQ(one.status, split.status) << what;
  EXPECT_EQ(one.steps, split.steps) << what;
  EXPECT_EQ(one.rejected_steps, split.rejected_steps) << what;
  EXPECT_EQ(one.t_final, split.t_final) << what;
  expect_bitwise_equal(split.positions, one.positions, what);
  ASSERT_EQ(one.frames.size(), split.frames.size()) << what;
  for (std::size_t f = 0; f < one.frames.size(); ++f) expect_bitwise_equal(split.frames[f], one.frames[f], what);
  ASSERT_EQ(one.diagnostics.size(), split.diagnostics.size()) << what;
  for (std::size_t f = 0; f < one.diagnostics.size(); ++f) {
    EXPECT_EQ(one.diagnostics[f].max_norm, split.diagnostics[f].max_norm) << what;
    EXPECT_EQ(one.diagnostics[f].cluster_count, split.diagnostics[f].cluster_count) << what;
    const double e1 = one.diagnostics[f].energy, e2 = split.diagnostics[f].energy;
    EXPECT_TRUE(e1 == e2 || (std::isnan(e1) && std::isnan(e2))) << what;
    expect_bitwise_equal(split.diagnostics[f].cov_eigenvalues, one.diagnostics[f].cov_eigenvalues, what);
  }
}

TEST(MpiSimulate, EveryKindAndIntegratorMatchesOneProcessBitForBit) {
  for (Integrator integrator : {Integrator::euler, Integrator::rk4, Integrator::dopri5})
    for (const std::string kind : {"softmax", "l2", "sigmoid", "linear", "sinkhorn"}) {
      check_simulation<double>(kind, integrator, false, false, false, fresh_seed());
      check_simulation<float>(kind, integrator, false, false, false, fresh_seed());
    }
  // Masks, the sphere and layers, on softmax (every kind shares the driver), both precisions.
  for (Integrator integrator : {Integrator::euler, Integrator::rk4, Integrator::dopri5}) {
    check_simulation<double>("softmax", integrator, true, false, false, fresh_seed());
    check_simulation<float>("l2", integrator, true, false, true, fresh_seed());
    check_simulation<double>("softmax", integrator, false, true, true, fresh_seed());
    check_simulation<float>("sinkhorn", integrator, false, true, false, fresh_seed());
  }
}

TEST(MpiSimulate, ResumingADistributedRunFromItsStateGivesTheUninterruptedRun) {
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 50, 2, true);
  const AttentionParams p = random_params(rng, "sinkhorn", 2, 1, 2, false, false, false);
  RunSpec run;
  run.T = 0.06;
  run.dt = 0.01;
  run.integrator = Integrator::dopri5;
  run.checkpoint_every = 2;
  const SimulationResult<double> one = simulate(p, run, mu);
  SimulationState<double> saved;
  bool have = false;
  // The distributed run stops after its first checkpoint (as if killed), then continues on one
  // process from that state.
  try {
    simulate<double>(p, run, mu, [&](const Progress&) { return !have; },
                     [&](const SimulationState<double>& s) { saved = s; have = true; }, nullptr, &world());
  } catch (const Cancelled&) {
  }
  ASSERT_TRUE(have);
  const SimulationResult<double> resumed = simulate<double>(p, run, mu, {}, {}, &saved);
  expect_bitwise_equal(resumed.positions, one.positions, "resumed on one process");
  const SimulationResult<double> resumed_split = simulate<double>(p, run, mu, {}, {}, &saved, &world());
  expect_bitwise_equal(resumed_split.positions, one.positions, "resumed on the ranks");
}

TEST(MpiTrain, DataParallelTrainingGivesTheSingleProcessParametersBitForBit) {
  for (bool float32 : {false, true}) {
    Config c;
    for (const char* s : {"task.n=6", "model.width=8", "model.layers=1", "model.heads=2", "model.k=4",
                          "model.sinkhorn_iters=8", "train.batch=10", "train.steps=4", "train.test_pairs=8",
                          "train.eval_every=2", "train.lr=1e-2", "train.weight_decay=0.01"})
      c.set(s);
    TrainConfig config = read_train_config(c);
    config.float32 = float32;
    config.train.seed = fresh_seed() % 1000000;
    const auto test_pairs = make_test_pairs(config);
    const TrainResult one = train(config, initial_state(config, test_pairs), test_pairs);
    const TrainResult split = train(config, initial_state(config, test_pairs), test_pairs, {}, &world());
    EXPECT_EQ(one.state.params, split.state.params) << (float32 ? "f32" : "f64");
    EXPECT_EQ(one.state.adam_v, split.state.adam_v);
    ASSERT_EQ(one.state.metrics.size(), split.state.metrics.size());
    for (std::size_t i = 0; i < one.state.metrics.size(); ++i) {
      EXPECT_EQ(one.state.metrics[i].loss, split.state.metrics[i].loss);
      EXPECT_EQ(one.state.metrics[i].test_w1, split.state.metrics[i].test_w1);
    }
  }
}

// Training pairs in memory that count the reads (a dataset's training pairs are read the same way,
// tokenflow/coupling_source.hpp).
class CountingPairs final : public CouplingSource {
 public:
  explicit CountingPairs(std::vector<CouplingPair> pairs) : pairs_(std::move(pairs)) {}
  std::size_t size() const override { return pairs_.size(); }
  CouplingPair pair(std::size_t i) const override {
    ++reads;
    return pairs_.at(i);
  }
  mutable long reads = 0;

 private:
  std::vector<CouplingPair> pairs_;
};

// Each rank reads only the pairs of its own gradient groups (a batch of 8 is 8 groups of one pair,
// split evenly over 2 ranks), and the run is the single process's bit for bit.
TEST(MpiTrain, EachRankReadsItsShareOfADatasetsBatches) {
  Config c;
  for (const char* s : {"task.n=5", "model.width=8", "model.layers=1", "model.heads=2", "model.k=4",
                        "model.sinkhorn_iters=8", "train.batch=8", "train.steps=3", "train.test_pairs=4",
                        "train.lr=1e-2"})
    c.set(s);
  TrainConfig config = read_train_config(c);
  config.train.seed = fresh_seed() % 1000000;
  const auto test_pairs = make_test_pairs(config);
  std::vector<CouplingPair> pairs;
  for (std::uint64_t k = 0; k < 13; ++k) pairs.push_back(make_pair(config.task, pair_seed(config.train.seed, 2, k)));
  const CountingPairs alone(pairs), shared(pairs);
  const TrainResult one = train(config, initial_state(config, test_pairs), test_pairs, {}, nullptr, &alone);
  const TrainResult split = train(config, initial_state(config, test_pairs), test_pairs, {}, &world(), &shared);
  EXPECT_EQ(one.state.params, split.state.params);
  EXPECT_EQ(alone.reads, 8 * 3);
  if (8 % world().size() == 0) {
    EXPECT_EQ(shared.reads, 8 * 3 / world().size()) << "rank " << world().rank();
  }
}

}  // namespace
}  // namespace tokenflow
