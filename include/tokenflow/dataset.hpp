// tokenflow/dataset.hpp: coupling datasets, the user's own pairs of measures with target couplings
// ([task] kind = "dataset" of `tokenflow train`, docs/design.md section 2).
//
// On disk: DIR/train/*.npz and DIR/test/*.npz, one pair per file, read in the order of the file
// names (other files are ignored; each folder needs at least one .npz). Each .npz (numpy's
// np.savez or np.savez_compressed: a zip archive of .npy arrays, read with libzip) holds
//   x       (n, d)  the first measure's points        float64 or float32
//   y       (m, d)  the second measure's points
//   target  (n, m)  the coupling to learn, pi* >= 0, total mass 1
//   a       (n)     optional: the first measure's weights (default: target's row sums)
//   b       (m)     optional: the second measure's weights (default: target's column sums)
// and nothing else. Sizes differ freely between pairs; d is the same in every file of the dataset.
//
// Checks (each an InputError naming the file and the array): a missing or unknown array, a shape
// that does not fit (x not 2-D, y's d not x's, target not n x m, a not n, b not m), a d other than
// the dataset's, a NaN or infinite entry, a negative entry of target, a total mass of target that
// differs from 1 by more than kTargetMassTol, a given a or b that differs from target's marginals
// by more than kMarginalTol (l1, |pi 1 - a|_1 and |pi^T 1 - b|_1), a weight that is not positive
// (a token without mass is no token of the measure: leave it out of x or y).
//
// assignment: row i of a pair is a link when target's row i has exactly one positive entry j
// (assignment[i] = j; else -1); the pair's assignment is empty when no row is a link. A permutation
// target has a link in every row; a partial coupling (tokens without a partner spread their mass)
// has links in the rows of the tokens that have one. Test accuracy is the fraction of link rows
// whose largest plan entry is the linked column (tokenflow/tasks.hpp's assignment_accuracy).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenflow/tasks.hpp"
#include "tokenflow/train.hpp"

namespace tokenflow {

// l1 distance allowed between a given weight vector and the target's marginal.
inline constexpr double kMarginalTol = 1e-9;
// |sum target - 1| allowed: a float32 file rounds each entry by at most 2^-24 relative, so the sum
// of its entries (total 1) is off by at most about 6e-8 from the float64 one; 1e-6 admits float32
// files and refuses targets that are not normalized (a link count, a percentage).
inline constexpr double kTargetMassTol = 1e-6;

// Checks a pair (given in memory or read from `source`) as above and completes it: empty a and b
// become the target's marginals, assignment is computed. `d` is the dataset's dimension (-1: the
// pair's own). InputError(source, array name, ...) on the first problem.
void check_coupling_pair(CouplingPair& pair, const std::string& source, int d = -1);

// Reads one .npz pair file and checks it (check_coupling_pair). `d` as there.
CouplingPair read_coupling_pair(const std::filesystem::path& file, int d = -1);

// The .npz files of DIR/train or DIR/test, sorted by name; InputError(key_source, key) when the
// folder is missing or holds none.
std::vector<std::filesystem::path> dataset_files(const std::filesystem::path& dir, const std::string& part,
                                                 const std::string& key_source, const std::string& key);

// d of a dataset: the columns of x in its first training file.
int dataset_dimension(const std::filesystem::path& dir, const std::string& key_source, const std::string& key);

struct CouplingDataset {
  std::vector<CouplingPair> train, test;
  std::vector<std::string> notes;  // what the run reports (texts: unknown words, tokenflow/texts.hpp)
};
// Every pair of DIR/train and DIR/test, checked, with one d (`d`, or the first file's when -1).
CouplingDataset read_coupling_dataset(const std::filesystem::path& dir, int d, const std::string& key_source,
                                      const std::string& key);

// The pairs a `train` run learns from and is tested on: for kind = "dataset", the files of
// task.path; for kind = "texts", the JSON lines of task.path and task.test_path with the vectors of
// task.vectors (tokenflow/texts.hpp); for the generated kinds, no training pairs (train draws them) and the test pairs of
// make_test_pairs. `key_source` names where task.path came from (for errors).
CouplingDataset training_data(const TrainConfig& config, const std::string& key_source);

// The files a dataset or texts task reads (dataset: those of task.path's train/ and test/; texts:
// task.path, task.test_path, task.vectors), each with the FNV-1a 64 hash of its bytes; empty for
// the generated kinds.
std::vector<DataFile> dataset_fingerprint(const TaskSpec& task);
// Refuses (InputError naming the changed, missing or new file and `checkpoint`) to resume with
// data other than the checkpoint's. A checkpoint without a record (written before there was one)
// is not checked.
void check_same_data(const std::vector<DataFile>& recorded, const std::vector<DataFile>& now,
                     const std::string& checkpoint);

}  // namespace tokenflow
