// Texts from the command line (text_args.hpp).
#include "text_args.hpp"

#include <filesystem>

#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"

namespace tokenflow::cli {

bool given(const TextArgument& arg) { return !arg.text.empty() || !arg.file.empty(); }

std::string text_of(const TextArgument& arg) {
  if (!arg.text.empty() && !arg.file.empty())
    throw InputError("", arg.text_key, "give the text (" + arg.text_key + ") or a file (" + arg.file_key + "), not both");
  if (arg.file.empty()) return arg.text;
  return read_input_file(arg.file, arg.file_key, kMaxTextFileBytes, "a text file (64 MiB)");
}

TextMeasure text_measure(const WordVectors& vectors, const TextArgument& arg) {
  const std::string text = text_of(arg);
  const std::string key = arg.file.empty() ? arg.text_key : arg.file_key;
  try {
    return text_to_measure(vectors, text, key);
  } catch (const InputError& e) {
    std::error_code ec;
    if (!arg.text.empty() && std::filesystem::is_regular_file(arg.text, ec))
      throw InputError(e.source(), e.key(),
                       e.detail() + "; " + arg.text_key + " takes the text itself, and " + echo(arg.text) +
                           " is a file: use " + arg.file_key + " " + echo(arg.text));
    throw;
  }
}

}  // namespace tokenflow::cli
