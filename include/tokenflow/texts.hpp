// tokenflow/texts.hpp: pairs of texts with word alignments ([task] kind = "texts" of `tokenflow
// train`, docs/design.md section 2), read into coupling pairs.
//
// On disk: task.path (training pairs) and task.test_path (held-out pairs), JSON lines, one pair a
// line (blank lines are skipped), and task.vectors, a word-vector file as `embed` reads it
// (tokenflow/embed.hpp). A line:
//   {"x": "first text", "y": "second text", "links": [[i, j], ...],
//    "weights": [w, ...], "possible": [[i, j], ...]}
// i and j are 0-based positions in tokenize(x) and tokenize(y) (tokenflow/embed.hpp: lowercased
// maximal runs of ASCII letters, digits, '_', '\'' and bytes >= 0x80; everything else separates
// words). "links" are the sure gold links; "weights" (optional, one number >= 0 a link, at least one
// positive) their masses, default 1 each; "possible" (optional) links that are possible but not
// sure (Och and Ney; a link given in both is sure). No other key.
//
// A text becomes a measure as `embed` makes it: one point per distinct word with a vector (the
// word's vector), linked or not, in order of first occurrence. The target coupling puts on (p, q)
// the total weight of the links (i, j) whose words are p and q, normalized to total 1. A known
// word occurrence that no link of positive weight names is unaligned and keeps its mass: with N
// the known occurrences a kept link names and U the others, a = N/(N+U) pi* 1 + u/(N+U), u_p the
// unaligned occurrences of point p (so with one link of weight 1 a word every occurrence weighs
// 1/(N+U)); b alike. Without unaligned occurrences a = pi* 1, b = pi*^T 1 (the dataset kind's
// rule); with them the target's marginals differ from a and b (a balanced plan must transport the
// unaligned words' mass, an unbalanced one need not).
// A word without a vector is unknown: its links are left out, and the unknown words are counted
// and reported (TextPairs). A pair none of whose links is left is refused.
//
// Checks (InputError(file, "line N: KEY", ...), one line naming the file, the line and the key):
// a line that is not a JSON object, a missing or unknown key, a text that is not a string or has no
// word, a link that is not a pair of integers, a position out of range, a link given twice, a
// weights list of another length than links, a weight that is negative or not a number, all
// weights zero, no link left (every linked word unknown).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tokenflow/embed.hpp"
#include "tokenflow/tasks.hpp"

namespace tokenflow {

struct TextPairs {
  std::vector<CouplingPair> pairs;  // checked (check_coupling_pair), with sure and possible links
  long unknown_tokens = 0;          // word occurrences without a vector, in x and y of every pair
  long unknown_words = 0;           // distinct such words
  std::vector<std::string> unknown_first;  // the first few (at most kUnknownShown), in order
  long dropped_links = 0;           // links left out because a word of theirs is unknown
};
inline constexpr std::size_t kUnknownShown = 5;

// Parses JSON lines held in `bytes` (`file` names them in errors).
TextPairs parse_text_pairs(const std::string& bytes, const WordVectors& vectors, const std::string& file);
// Reads `path` through read_input_file (key names the config key that gave it) and parses it.
TextPairs read_text_pairs(const std::filesystem::path& path, const WordVectors& vectors, const std::string& key);

// One line, e.g. "3 unknown words (5 occurrences, 2 links left out): foo, bar, baz"; empty when none.
std::string describe_unknown(const TextPairs& t);

}  // namespace tokenflow
