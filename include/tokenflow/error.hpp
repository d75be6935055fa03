// tokenflow/error.hpp: the one exception type for bad input.
//
// Every check on user input (config keys, .npy files, matrix shapes, covariances) throws
// InputError. It carries where the problem is (a source: a config file, "--set", a .npy path)
// and which key, so the CLI can print one line and exit with code 2, and Python can raise
// ValueError with the same text.
#pragma once

#include <stdexcept>
#include <string>

namespace tokenflow {

class InputError : public std::runtime_error {
 public:
  // source: file name or "--set" or "config" (may be empty); key: dotted config key or array name.
  InputError(std::string source, std::string key, std::string what)
      : std::runtime_error(compose(source, key, what)),
        source_(std::move(source)),
        key_(std::move(key)),
        what_(std::move(what)) {}

  const std::string& source() const { return source_; }
  const std::string& key() const { return key_; }
  const std::string& detail() const { return what_; }

  // The same error, located in `source` when it did not know its file yet.
  InputError located(const std::string& source) const {
    return source_.empty() ? InputError(source, key_, what_) : *this;
  }

 private:
  static std::string compose(const std::string& source, const std::string& key,
                             const std::string& what) {
    std::string s;
    if (!source.empty()) s += source + ": ";
    if (!key.empty()) s += key + ": ";
    return s + what;
  }
  std::string source_, key_, what_;
};

// A request the library cannot honour for a reason other than bad input (never thrown for input).
class Cancelled : public std::runtime_error {
 public:
  Cancelled() : std::runtime_error("cancelled") {}
};

}  // namespace tokenflow
