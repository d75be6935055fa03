// tokenflow/echo.hpp: how a message quotes what the user gave (a key, a value, an argument).
//
// A message names the user's value so that they can find it, but a value may be a 10 MB string
// or hold newlines and control bytes: every message echoes values through echo(), which keeps
// them short and on one line. bounded_line() is the last guard of what the CLI prints and Python
// raises, for messages composed by libraries (CLI11, toml++) that echo values themselves.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tokenflow {

// The most characters of a user's value a message quotes (then "...").
inline constexpr std::size_t kEchoLimit = 80;

// `value` with newlines, tabs and other control bytes written as \n, \t, \xNN, cut after `limit`
// characters (at a UTF-8 character boundary, then "...").
inline std::string escaped(std::string_view value, std::size_t limit) {
  std::string out;
  std::size_t kept = 0;
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (kept >= limit && (c & 0xC0) != 0x80) return out + "...";  // not inside a UTF-8 sequence
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
    ++kept;
  }
  return out;
}

// `value` as a message quotes it: at most kEchoLimit characters, then "...", on one line.
inline std::string echo(std::string_view value) { return escaped(value, kEchoLimit); }

// A list of the user's values as a message quotes it: the first `shown`, each through echo(),
// joined by ", ", then ", ..." when there are more (a text's 10^5 unknown words, each of any length,
// make a line of at most shown (kEchoLimit + 5) characters).
inline std::string echo_list(const std::vector<std::string>& values, std::size_t shown = 5) {
  std::string out;
  for (std::size_t k = 0; k < values.size() && k < shown; ++k) out += (k ? ", " : "") + echo(values[k]);
  return values.size() > shown ? out + ", ..." : out;
}

// A message as one bounded line: control bytes escaped as echo() does, and every run of more than
// 2 kEchoLimit characters without a space (a value a library echoed whole) cut to kEchoLimit
// characters and "...". Paths and words of ordinary length pass unchanged.
inline std::string bounded_line(std::string_view message) {
  std::string out;
  std::size_t start = 0;
  for (;;) {
    std::size_t end = message.find(' ', start);
    if (end == std::string_view::npos) end = message.size();
    const std::string_view word = message.substr(start, end - start);
    if (start > 0) out += ' ';
    out += escaped(word, word.size() > 2 * kEchoLimit ? kEchoLimit : word.size());
    if (end == message.size()) return out;
    start = end + 1;
  }
}

}  // namespace tokenflow
