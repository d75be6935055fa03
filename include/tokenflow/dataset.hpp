// tokenflow/dataset.hpp: coupling datasets, the user's own pairs of measures with target couplings
// ([task] kind = "dataset" of `tokenflow train`, docs/design.md section 2).
//
// On disk, each part (train, test) in one of two forms:
//   folder form       DIR/train/*.npz and DIR/test/*.npz, one pair per file, read in the order of
//                     the file names (other files are ignored; each folder needs at least one .npz);
//   single-file form  DIR/train.npz and DIR/test.npz, every pair of the part in one archive of
//                     concatenated arrays and offsets (tokenflow/packed_pairs.hpp), for large datasets.
// A part in both forms at once is refused. Training reads its pairs on demand (training_data): the
// memory it holds is a batch's pairs, the test pairs and the file list (or the offsets), never the
// training set. In the folder form, each .npz (numpy's
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
#include <memory>
#include <string>
#include <vector>

#include "tokenflow/coupling_source.hpp"
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
// own_weights: a and b are the measures' own weights, not the target's marginals (texts with
// unaligned words, tokenflow/texts.hpp): both given, finite, positive, each summing to 1 within
// kTargetMassTol.
void check_coupling_pair(CouplingPair& pair, const std::string& source, int d = -1, bool own_weights = false);

// Reads one .npz pair file and checks it (check_coupling_pair). `d` as there.
CouplingPair read_coupling_pair(const std::filesystem::path& file, int d = -1);

// The files of one part: a folder and the names in it, sorted, held as one buffer of names (a
// std::filesystem::path a file would also keep its parsed components, about 250 bytes a file: at
// 10^5 pair files the list would outweigh the batch).
class DatasetFiles {
 public:
  DatasetFiles(std::filesystem::path folder, std::vector<std::string> names);  // names in any order
  std::size_t size() const { return ends_.size(); }
  std::filesystem::path operator[](std::size_t i) const;  // folder / name i; i < size()
  const std::filesystem::path& folder() const { return folder_; }

 private:
  std::filesystem::path folder_;
  std::string names_;               // the names, one after the other
  std::vector<std::size_t> ends_;   // where each name ends in names_
};

// The files of a part ("train" or "test"): DIR/part.npz alone in the single-file form, else the .npz
// files of DIR/part/ sorted by name. InputError(key_source, key) when the part is missing, holds no
// .npz, or is in both forms.
DatasetFiles dataset_files(const std::filesystem::path& dir, const std::string& part, const std::string& key_source,
                           const std::string& key);

// The folder form's pairs, one file each, read (and checked) when asked for.
class PairFiles final : public CouplingSource {
 public:
  // `d`: the dataset's dimension; -1 takes the first file's (which is then read).
  PairFiles(DatasetFiles files, int d);
  std::size_t size() const override { return files_.size(); }
  CouplingPair pair(std::size_t i) const override;
  int dimension() const { return d_; }

 private:
  DatasetFiles files_;
  int d_;
};

// A part of DIR in either form, opened (the single file's offsets checked) but not read; `d` as
// above. Pairs are checked as they are read (check_every_pair reads them all once).
std::unique_ptr<CouplingSource> open_dataset_part(const std::filesystem::path& dir, const std::string& part, int d,
                                                  const std::string& key_source, const std::string& key);

// d of a dataset: the columns of x in its first training pair.
int dataset_dimension(const std::filesystem::path& dir, const std::string& key_source, const std::string& key);
// The pairs of a part (the files of the folder form, the offsets' pairs of the single file).
std::size_t dataset_part_size(const std::filesystem::path& dir, const std::string& part, const std::string& key_source,
                              const std::string& key);

struct CouplingDataset {
  std::vector<CouplingPair> train, test;
  std::vector<std::string> notes;  // what the run reports (texts: unknown words, tokenflow/texts.hpp)
  // training_data's training pairs (then `train` is empty): a dataset's read from disk on demand,
  // the texts' in memory, none for the generated kinds.
  std::unique_ptr<CouplingSource> train_source;
  // The largest |entry| of the points (x, y) of every pair read: whether they fit float32.
  double largest_coordinate = 0.0;
};

// The largest |entry| of the points x and y of a pair, of pairs.
double largest_coordinate(const CouplingPair& pair);
double largest_coordinate(const std::vector<CouplingPair>& pairs);

// Refuses (InputError naming `key`, exit 2) a float32 run (dtype = "f32") on pairs whose coordinates
// do not fit float32 (|entry| above 3.4e38 becomes infinite): "use dtype = \"f64\"".
void check_pairs_fit_dtype(const TrainConfig& config, const CouplingDataset& data, const std::string& source,
                           const std::string& key);
// Every pair of DIR/train and DIR/test (either form) in memory, checked, with one d (`d`, or the
// first training pair's when -1).
CouplingDataset read_coupling_dataset(const std::filesystem::path& dir, int d, const std::string& key_source,
                                      const std::string& key);

// The pairs a `train` run learns from (train_source) and is tested on (test): for kind = "dataset",
// the parts of task.path, every training pair read and checked once here (none kept: training reads
// each batch's pairs again), the test pairs held; for kind = "texts", the JSON lines of task.path and task.test_path with the vectors of
// task.vectors (tokenflow/texts.hpp); for the generated kinds, no training pairs (train draws them) and the test pairs of
// make_test_pairs. `key_source` names where task.path came from (for errors).
CouplingDataset training_data(const TrainConfig& config, const std::string& key_source);

// The files a dataset or texts task reads (dataset: dataset_files of task.path's train and test;
// texts: task.path, task.test_path, task.vectors), each with the FNV-1a 64 hash of its bytes (read
// in chunks: a single-file dataset is never held whole); empty for the generated kinds.
std::vector<DataFile> dataset_fingerprint(const TaskSpec& task);
// Refuses (InputError naming the changed, missing or new file and `checkpoint`) to resume with
// data other than the checkpoint's. A checkpoint without a record (written before there was one)
// is not checked.
void check_same_data(const std::vector<DataFile>& recorded, const std::vector<DataFile>& now,
                     const std::string& checkpoint);

}  // namespace tokenflow
