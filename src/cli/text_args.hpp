// A text given on the command line, as the text itself (--text) or as a file (--text-file): the
// arguments of `embed` (--text, --text-file) and `couple` (--x-text, --x-text-file, and y's).
#pragma once

#include <string>

#include "tokenflow/embed.hpp"

namespace tokenflow::cli {

// The largest text file read: a text is tokenized whole in memory (each distinct word is a token
// of the measure); 64 MiB is far beyond a document and bounds what a wrong path can cost.
inline constexpr unsigned long long kMaxTextFileBytes = 64ull << 20;

struct TextArgument {
  std::string text, file;            // at most one of them given
  std::string text_key, file_key;    // "--text", "--text-file"
};

// Whether either form was given.
bool given(const TextArgument& arg);
// The text: `text`, or the content of `file` (read_input_file, at most kMaxTextFileBytes).
// InputError naming both flags when both are given.
std::string text_of(const TextArgument& arg);
// text_to_measure of the argument's text, with the error of a text in which no word is known
// telling that --text takes the text itself when it names an existing file.
TextMeasure text_measure(const WordVectors& vectors, const TextArgument& arg);

}  // namespace tokenflow::cli
