// tokenflow/packed_pairs.hpp: the single-file form of a coupling dataset (tokenflow/dataset.hpp),
// one .npz holding every pair of a part (DIR/train.npz, DIR/test.npz), read a pair at a time.
//
// The archive (np.savez, members stored without compression) holds, for P pairs of sizes n_i, m_i:
//   x          (sum n_i, d)     the pairs' first measures, one after the other   float64 or float32
//   y          (sum m_i, d)     the second measures
//   target     (sum n_i m_i,)   each pair's n_i x m_i coupling in C order, one after the other
//   x_offsets  (P + 1,) int64   pair i's rows of x are [x_offsets[i], x_offsets[i + 1])
//   y_offsets  (P + 1,) int64   pair i's rows of y (and entries of b)
//   a          (sum n_i,)       optional: the weights of x's points (pair i's at x_offsets)
//   b          (sum m_i,)       optional: the weights of y's points
// and nothing else. Pair i's target starts at sum_{k < i} n_k m_k (no offsets array to disagree).
//
// Opening reads the members' .npy headers and the two offsets arrays (16 bytes a pair), and checks
// them, each an InputError naming the file and the array: a compressed member (np.savez_compressed:
// a pair in the middle of a deflate stream is reached only by inflating everything before it; write
// the file with np.savez), a missing, unknown or repeated member, a shape or dtype that does not fit
// (offsets int64 and one longer than the pairs; x 2-D; y with x's d; target, a, b 1-D), offsets that
// do not start at 0, do not increase strictly (a pair needs a point on each side), or do not end at
// the rows of x and y, a target whose length is not sum n_i m_i, a member whose header promises
// other bytes than it holds. Offsets are checked before anything is sized by them: a hostile file
// allocates at most its own size and reads nothing outside its arrays.
// pair(i) seeks to pair i's slices (zip_fseek), reads them and checks the pair (check_coupling_pair,
// the source named "FILE (pair i)").
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

#include "tokenflow/coupling_source.hpp"

namespace tokenflow {

class PackedPairs final : public CouplingSource {
 public:
  // Opens and checks `file` (named by the config key `key` in errors about the file itself). `d`:
  // the dataset's dimension (-1: x's own).
  PackedPairs(const std::filesystem::path& file, int d, const std::string& key);
  ~PackedPairs() override;
  PackedPairs(const PackedPairs&) = delete;
  PackedPairs& operator=(const PackedPairs&) = delete;

  std::size_t size() const override;
  CouplingPair pair(std::size_t i) const override;
  int dimension() const;  // the columns of x

 private:
  struct Archive;
  std::unique_ptr<Archive> archive_;
};

}  // namespace tokenflow
