// tokenflow/coupling_source.hpp: the training pairs of a coupling task, read by index.
//
// Training draws each batch's pairs by index (tokenflow/train.hpp): a source hands out pair i when a
// batch needs it, so a dataset read from disk (tokenflow/dataset.hpp: one .npz per pair, or the
// single-file form of tokenflow/packed_pairs.hpp) holds in memory only the pairs of one batch.
// Every pair a source returns is checked (check_coupling_pair): a and b filled in, assignment set.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "tokenflow/tasks.hpp"

namespace tokenflow {

class CouplingSource {
 public:
  virtual ~CouplingSource() = default;
  // The number of pairs; 0 for the generated kinds (training makes its pairs from seeds).
  virtual std::size_t size() const = 0;
  // Pair i (i < size()), checked. A source that reads files throws InputError naming the file and
  // the array when the pair is unreadable or fails a check. Called from one thread at a time.
  virtual CouplingPair pair(std::size_t i) const = 0;
};

// Pairs held in memory (checked by whoever made them).
class PairsInMemory final : public CouplingSource {
 public:
  explicit PairsInMemory(std::vector<CouplingPair> pairs = {}) : pairs_(std::move(pairs)) {}
  std::size_t size() const override { return pairs_.size(); }
  CouplingPair pair(std::size_t i) const override { return pairs_.at(i); }

 private:
  std::vector<CouplingPair> pairs_;
};

// Reads every pair of `source` once (each is checked on the way; none is kept): a run finds a bad
// pair before it writes anything.
inline void check_every_pair(const CouplingSource& source) {
  for (std::size_t i = 0; i < source.size(); ++i) (void)source.pair(i);
}

}  // namespace tokenflow
