// tokenflow/tasks.hpp: coupling systems F(mu, nu) to learn ([task] of docs/design.md section 2), and
// the metrics of a predicted coupling.
//
// Each pair is generated on the fly from a 64-bit seed (deterministic, independent of threads):
//   matching     x_i ~ U[-1, 1]^d; s ~ U[scale_range]; t ~ N(0, shift^2 I);
//                y_j = s x_sigma(j) + t + noise N(0, I), sigma a random permutation (the shuffle);
//                target pi*_{sigma(j), j} = 1/n (the permutation coupling). m = n, uniform weights.
//   entropic-ot  x_i ~ U[-1, 1]^d; y_j = s u_j + t, u_j ~ U[-1, 1]^d, s and t as in matching;
//                target = the Sinkhorn plan (tokenflow/ot.hpp's loop, marginal tol 1e-9) between
//                (x, a) and (y, b) for the cost |x - y|^p, p = 1 or 2, at target_epsilon.
//   whitened-ot  x_i = A u_i + t, y_j = B w_j + t' with u, w ~ U[-1, 1]^d, A, B random Gaussian
//                matrices (entries N(0, 1)) and t, t' ~ N(0, shift^2 I); target = the exact OT plan
//                (network simplex, cost |x~ - y~|^2) between the whitened measures
//                x~ = S_x^{-1/2} (x - mean_x), y~ = S_y^{-1/2} (y - mean_y) (weighted moments).
//   sorting      d = 1; x_i ~ U[-1, 1]; y_j = -1 + (2j + 1)/n (the ranks, as quantiles of
//                U[-1, 1]); target pi*_{i, rank(x_i)} = 1/n. m = n, uniform weights.
//   dataset      the user's pairs, read from files (tokenflow/dataset.hpp) or given in memory
//                (Python); never generated: make_pair refuses it.
//   texts        pairs of texts with word alignments, read from JSON lines and a word-vector file
//                (tokenflow/texts.hpp); never generated.
// Weights are uniform unless random_weights (entropic-ot, whitened-ot only): a_i ~ U[0.5, 1.5],
// normalized. Sizes: n (and m, default n) per text, or, with min_n (min_m), drawn uniformly in
// [min_n, n] ([min_m, m]) for each pair, so a batch mixes texts of different sizes.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tokenflow/measure.hpp"

namespace tokenflow {

struct TaskSpec {
  std::string kind = "matching";  // matching | entropic-ot | whitened-ot | sorting | dataset | texts
  std::string path;               // dataset: the folder of train/ and test/ pair files; texts: the
                                  // training pairs (JSON lines)
  std::string test_path;          // texts: the held-out pairs (JSON lines)
  std::string vectors;            // texts: the word-vector file
  int n = 16, m = 16, min_n = 16, min_m = 16;
  int d = 2;
  double noise = 0.02;
  double scale_min = 0.5, scale_max = 2.0;
  double shift = 1.0;
  int p = 1;                    // entropic-ot: cost |x - y|^p
  double target_epsilon = 0.1;  // entropic-ot
  bool random_weights = false;
};

const std::vector<std::string>& task_kind_names();
// The [task] keys and their reader: tokenflow/train_config.hpp.

// Whether the task's targets are permutation couplings (hard-assignment accuracy is reported):
// matching, sorting, and whitened-ot between uniform measures of one fixed size n = m.
bool task_has_assignment(const TaskSpec& task);

// Whether the task's pairs are read (dataset, texts) rather than drawn.
bool task_reads_pairs(const TaskSpec& task);

struct CouplingPair;
// Whether test accuracy is reported on these pairs: task_has_assignment for the generated kinds;
// for a dataset or texts, when every test pair has a link row (tokenflow/dataset.hpp).
bool reports_accuracy(const TaskSpec& task, const std::vector<CouplingPair>& test_pairs);

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct CouplingPair {
  Points<double> x, y;   // (n, d), (m, d)
  Eigen::VectorXd a, b;  // weights, each summing to 1
  RowMatrix target;      // pi* (n, m)
  // Permutation targets: assignment[i] = j with pi*_ij > 0. Dataset pairs: j for the rows with
  // exactly one positive entry (links), -1 for the others (tokenflow/dataset.hpp). Else empty.
  std::vector<int> assignment;
  // Texts (tokenflow/texts.hpp): the gold links as (row, column) of target, sure (target's support)
  // and possible (a superset of sure); empty for the other kinds.
  std::vector<std::pair<int, int>> sure, possible;
};

CouplingPair make_pair(const TaskSpec& task, std::uint64_t seed);

// The distribution make_pair draws from, with this spec's numbers, in one line ("matching: x_i ~
// U[-1, 1]^2, n = 16; ..."): train's summary.json reports it ("training_distribution"), since a
// model is trained for this distribution and no other.
std::string describe_task(const TaskSpec& task);

// A seed for item `index` of stream `stream` (0: training, 1: test) of run seed `seed`.
std::uint64_t pair_seed(std::uint64_t seed, int stream, std::uint64_t index);

// W_1 between two couplings of the same pair seen as measures on X x Y: the points (x_i, y_j) of
// R^{2d} with masses pi_ij, ground cost |(x, y) - (x', y')| (Euclidean in R^{2d}), solved exactly
// by the network simplex (tokenflow/ot.hpp's exact_ot) over the entries with positive mass. Its
// matrices (coupling_w1_bytes) are checked against the memory limit first (InputError on task.n).
// keep_going is asked for every row of that cost matrix and by exact_ot (Cancelled when it
// returns false).
double coupling_w1(const Points<double>& x, const Points<double>& y, const RowMatrix& pi,
                   const RowMatrix& sigma, const std::function<bool()>& keep_going = {});
// The bytes coupling_w1 holds at once for couplings of `atoms` and `target_atoms` positive
// entries: exact OT's cost matrix and plan between them, float64 (a model's plan is dense: n m
// atoms; an exact-OT target has at most n + m - 1, an entropic one n m).
long double coupling_w1_bytes(long double atoms, long double target_atoms);

// Fraction of the rows i with assignment[i] >= 0 whose largest entry of pi is in column
// assignment[i] (NaN when there is none).
double assignment_accuracy(const RowMatrix& pi, const std::vector<int>& assignment);

// Word-alignment metrics of a plan against gold links (Och and Ney). The plan's strongest links A
// are the entries that are the largest of their row and of their column (argmax per row
// intersected with argmax per column; ties go to the first index), so each point has at most one.
// With S the sure links and P the possible ones (P contains S):
//   precision = |A & P| / |A|, recall = |A & S| / |S|,
//   AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)   (= 1 - F1 when P = S).
// Counts add over pairs; the scores of a set of pairs are those of the summed counts. A point that
// no gold link names (an unaligned word, texts.hpp) is in no link of S or P: a predicted link of
// it lowers precision and AER, and a plan that links it to nothing (no mutual argmax) is right.
// link_mass: the share of the plan's total mass on the gold links P, sum_{(i,j) in P} pi_ij /
// sum_ij pi_ij (link_mass below), averaged over the pairs (each pair counts once, as W_1 does).
// A balanced plan sends each unaligned word its whole weight off P, so its link mass is at most 1
// minus the larger of the unaligned words' total weights in a and in b; an unbalanced plan may drop them.
struct AlignmentCounts {
  long predicted = 0, sure = 0, predicted_sure = 0, predicted_possible = 0;
  AlignmentCounts& operator+=(const AlignmentCounts& o);
};
struct AlignmentScores {
  double aer = std::nan(""), precision = std::nan(""), recall = std::nan("");
  double link_mass = std::nan("");
};
// sum of pi over `links` (each once) / sum of pi; NaN when pi has no mass.
double link_mass(const RowMatrix& pi, const std::vector<std::pair<int, int>>& links);
AlignmentCounts alignment_counts(const RowMatrix& pi, const std::vector<std::pair<int, int>>& sure,
                                 const std::vector<std::pair<int, int>>& possible);
AlignmentScores alignment_scores(const AlignmentCounts& counts);

}  // namespace tokenflow
