// tokenflow/train.hpp: training a Sinkhorn Transformer on a coupling task (`tokenflow train`,
// docs/design.md section 2), its evaluation, checkpoints, and the universal-approximation sweep.
//
// One step: `batch` fresh pairs of the task (pair b of step s has the seed pair_seed(seed, 0,
// s batch + b), so the data never depends on threads or on a resume; a dataset's training pairs are
// drawn with replacement, pair b of step s being number seed mod N of the N pairs), the loss
//   L = 1/batch sum_pairs KL(pi* | pi_theta),
// its gradient by the hand-written backward pass (tokenflow/model.hpp), then one AdamW step. Pairs
// run in parallel (OpenMP) in 8 fixed groups whose gradients are summed in a fixed order, so a run
// gives the same parameters, bit for bit, with any number of threads on one machine.
// Evaluation (always in float64): over `test_pairs` held-out pairs (stream 1 of the seed), the
// mean exact W_1 between pi_theta and pi* on X x Y (tokenflow/tasks.hpp), the mean loss, and the
// hard-assignment accuracy for permutation targets, the alignment scores (AER, precision, recall)
// for pairs with gold links (texts); the same W_1 for the independent coupling
// a b^T and for the untrained model is computed once.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tokenflow/model.hpp"
#include "tokenflow/tasks.hpp"

namespace tokenflow {

class Communicator;    // tokenflow/distributed.hpp
class CouplingSource;  // tokenflow/coupling_source.hpp

inline constexpr long kDefaultWarmup = 100;  // steps; min(100, steps / 10) when a config leaves it out

struct TrainSpec {
  long steps = 3000;
  int batch = 32;
  double lr = 1e-3;
  std::uint64_t seed = 0;
  int test_pairs = 128;
  double weight_decay = 0.0;  // AdamW's decoupled decay on the weight matrices
  double beta1 = 0.9, beta2 = 0.999;
  // Warm-up, cosine and clipping by default (docs/sinkhorn-transformer.md, "Training health"):
  // without them rare batches give gradients 10^6 times the usual, whose Adam step wrecks the model
  // and whose second moment then freezes it.
  long warmup = kDefaultWarmup;     // linear warm-up of the learning rate over this many steps
                                    // (a config that leaves it out: min(100, steps / 10))
  std::string schedule = "cosine";  // constant | cosine (to lr / 10 at the last step)
  double grad_clip = 1.0;           // clip the gradient's 2-norm to this (0: no clipping)
  long eval_every = 0;                // test metrics every k steps (0: 20 rows over the run)
  long checkpoint_every = 0;          // checkpoint every k steps (0: never)
};

struct TrainConfig {
  bool float32 = false;  // dtype = "f32": parameters, activations and gradients in float32
  TaskSpec task;
  ModelConfig model;
  TrainSpec train;
};
// The keys, the readers and the TOML writer of a TrainConfig: tokenflow/train_config.hpp.

struct Evaluation {
  double w1 = 0.0;        // mean W_1(pi, pi*) over the test pairs
  double loss = 0.0;      // mean KL(pi* | pi)
  double accuracy = 0.0;  // mean hard-assignment accuracy (NaN without permutation targets)
  // With converged = true (the final evaluation): the model's plan's mean l1 marginal error, and
  // W_1 and accuracy of the converged plan of the learned cost (tokenflow couple's default plan;
  // the model's own plan when model.sinkhorn_grad = "implicit"). NaN otherwise.
  double marginal_error = std::nan("");
  double w1_converged = std::nan(""), accuracy_converged = std::nan("");
  double converged_fraction = std::nan("");  // test pairs whose converged solve reached its tol
  // Texts (pairs with gold links): the alignment scores of the plans, from the counts summed over
  // the test pairs (tokenflow/tasks.hpp's alignment_scores); NaN otherwise.
  AlignmentScores alignment;
};

// The held-out pairs of a run (stream 1 of train.seed).
std::vector<CouplingPair> make_test_pairs(const TrainConfig& config);
// pi_theta of `params` (float64) on each pair, compared with the targets (parallel over pairs).
// keep_going is polled between pairs (StopPoll: by the calling thread, every 20 ms at most); when it
// returns false the remaining pairs are skipped and evaluate throws Cancelled.
Evaluation evaluate(const ParameterLayout& layout, const std::vector<double>& params,
                    const std::vector<CouplingPair>& pairs, bool has_assignment, bool converged = false,
                    const std::function<bool()>& keep_going = {});
// The independent coupling a b^T on each pair.
Evaluation evaluate_independent(const std::vector<CouplingPair>& pairs, bool has_assignment);

struct MetricsRow {
  long step = 0;
  double loss = 0.0;  // mean training loss since the previous row (the test loss at step 0)
  double test_w1 = 0.0;
  double seconds = 0.0;  // training time so far
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  AlignmentScores test_alignment;  // texts: AER, precision, recall (else NaN)
};

// A file of a dataset or texts task and the FNV-1a 64 hash of its bytes (tokenflow/dataset.hpp's
// dataset_fingerprint): a checkpoint resumes only with the data it was trained on.
struct DataFile {
  std::string path;
  std::string key;  // the config key that names it (task.path, task.test_path, task.vectors)
  std::uint64_t hash = 0;
  bool operator==(const DataFile&) const = default;
};

// The test loss is "far above its best" when it exceeds both kTestLossRiseFactor times the best
// and the best plus kTestLossRiseShare of the untrained model's test loss: a doubling that is also
// large on the scale of what training removed (a collapse, not the noise of a loss near 0).
constexpr double kTestLossRiseFactor = 2.0;
constexpr double kTestLossRiseShare = 0.1;
bool test_loss_far_above_best(double test_loss, double best_test_loss, double untrained_test_loss);

// Everything a checkpoint holds: the run continues from it exactly.
struct TrainState {
  long step = 0;
  std::vector<double> params, adam_m, adam_v;
  std::vector<MetricsRow> metrics;
  Evaluation untrained, independent;
  double seconds = 0.0;
  double loss_sum = 0.0;  // training losses since the last metrics row
  long loss_count = 0;
  std::vector<DataFile> data_files;  // dataset and texts tasks: the files read (empty otherwise)
  // The evaluation of lowest test loss so far (step 0, the untrained model, included) and its
  // parameters (best_model.bin); `far_above`: the last evaluation was far above it (a warning is
  // given once per excursion); `warnings`: every warning of the run, in order (summary.json).
  long best_step = 0;
  Evaluation best;
  std::vector<double> best_params;
  bool far_above = false;
  std::vector<std::string> warnings;
};

// A fresh run: initial parameters (seed train.seed) and the untrained and independent evaluations
// (keep_going as in evaluate: Cancelled when it returns false).
TrainState initial_state(const TrainConfig& config, const std::vector<CouplingPair>& test_pairs,
                         const std::function<bool()>& keep_going = {});

struct TrainCallbacks {
  // After every step; returning false stops the run (train throws Cancelled).
  std::function<bool(long step, long steps, double loss, double pairs_per_second)> progress;
  // Every checkpoint_every steps, with the state to save.
  std::function<void(const TrainState&)> checkpoint;
  std::function<void(const MetricsRow&)> metrics;
  // When a warning is added to the state's `warnings` (the test loss far above its best, a
  // non-finite loss or gradient), as it happens.
  std::function<void(const std::string&)> warning;
  // Polled during the long parts of a step and of the evaluations (between pairs, and inside an
  // evaluated pair's W_1 network simplex and converged solve; by the calling thread, every 20 ms
  // at most) on one process: returning false stops an evaluation within a pivot's or a few
  // iterations' time, a step within a pair's. A step cut short is not taken (the checkpoint holds the state before it), an evaluation
  // cut short is redone on resume. Under MPI only progress stops a run (at a step's end, on every
  // rank alike).
  std::function<bool()> keep_going;
};

struct TrainResult {
  TrainState state;
  Evaluation final;  // on the test pairs after the last step (the last finite parameters)
  SinkhornTransformer model;       // the last state (model.bin)
  SinkhornTransformer best_model;  // the parameters of state.best_step (best_model.bin)
  // "finished", or "failed" when a non-finite training loss or gradient stopped the run: `reason`
  // says where; the model is then the last finite state (before the failing step's update).
  std::string status = "finished";
  std::string reason;
};

// Trains from `state` (a fresh one, or a checkpoint's) to config.train.steps, or until the training
// loss or its gradient is not finite (status "failed"; the update is not applied).
// Data-parallel with `comm` (several MPI ranks, tokenflow/distributed.hpp; every rank calls train
// with the same arguments): the 8 gradient groups of a batch are split over the ranks, every rank
// receives all groups' gradients (all-gather) and sums them in the single-process order, so all
// ranks hold the same parameters, bit for bit those of one process. At most min(batch, 8) ranks do
// work; the evaluations run in full on every rank. The callbacks run on every rank.
// train_pairs: the pairs of a dataset or texts task (tokenflow/coupling_source.hpp), which batches
// are drawn from: each step reads its batch's pairs (on several ranks, each rank the pairs of its
// own groups) before the gradient, and holds no others; null or empty for the generated kinds.
TrainResult train(const TrainConfig& config, TrainState state,
                  const std::vector<CouplingPair>& test_pairs,
                  const TrainCallbacks& callbacks = {}, const Communicator* comm = nullptr,
                  const CouplingSource* train_pairs = nullptr);

// checkpoint.bin of a training run (write_checkpoint, read_checkpoint): tokenflow/train_checkpoint.hpp.

// ---- universal approximation: test W_1 against capacity -----------------------------------------
struct SweepPoint {
  int width = 0, layers = 0;
  std::size_t parameters = 0;
  Evaluation trained, untrained, independent;
  double seconds = 0.0;
};
// Trains `base` once per (width, layers) of `grid` (k = width / 2, heads as in base when they
// divide the width, else 1) and evaluates each on the same test pairs. on_point is called after
// each.
std::vector<SweepPoint> capacity_sweep(const TrainConfig& base,
                                       const std::vector<std::pair<int, int>>& grid,
                                       const TrainCallbacks& callbacks = {},
                                       const std::function<void(const SweepPoint&)>& on_point = {});

}  // namespace tokenflow
