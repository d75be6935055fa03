// tokenflow/config.hpp: TOML configurations with strict keys.
//
// A Config is a TOML document (toml++) plus where each value came from (the config file or a
// `--set key=value` override). Every command declares the keys it accepts; an unknown key is an
// InputError that names the key and suggests the nearest valid one. Getters check types and
// name the file and key on error. Python dicts reach the same reader as TOML text.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tokenflow {

class Config {
 public:
  Config();  // empty: every key at its default
  ~Config();
  Config(const Config&);
  Config& operator=(const Config&);
  Config(Config&&) noexcept;
  Config& operator=(Config&&) noexcept;

  static Config from_file(const std::string& path);
  static Config from_text(const std::string& toml_text, const std::string& source);

  // Applies `key=value` (dotted key; value parsed as TOML, or taken as a string when it does not
  // parse, so --set attention.kind=l2 works unquoted).
  void set(const std::string& assignment);

  // Throws InputError for the first key not in `known` (dotted paths; array-of-table members are
  // written "layers.Q"), suggesting the nearest known key by edit distance.
  void check_keys(const std::vector<std::string>& known) const;

  bool has(const std::string& key) const;
  double get_double(const std::string& key, double fallback) const;
  std::optional<double> get_optional_double(const std::string& key) const;
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
  // get_int for counts held in an int: a value outside [INT_MIN, INT_MAX] is an InputError (a
  // narrowing cast would wrap task.n = 4294967312 to 16 and pass every later check).
  int get_int32(const std::string& key, int fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // `choices` non-empty: the value must be one of them (error suggests the nearest).
  std::string get_string(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& choices = {}) const;
  // A number is a 1 x 1 matrix; otherwise an array of equal-length arrays of numbers. The keys Q,
  // K, V and W (attention.Q, ..., and those of [[layers]]) may instead hold the path of a .npy
  // file (2-D, or 1-D for one row), relative to the config file's folder, or to the working
  // directory for --set and configs without a file (DESIGN.md section 7).
  std::optional<Eigen::MatrixXd> get_matrix(const std::string& key) const;
  // Replaces each such path of attention.{Q,K,V,W} and [[layers]] by the matrix it holds, so that
  // to_toml() (checkpoints) keeps the values read and a resume reads no file again.
  void inline_matrix_files();
  std::optional<Eigen::VectorXd> get_vector(const std::string& key) const;
  std::vector<std::int64_t> get_int_list(const std::string& key,
                                         const std::vector<std::int64_t>& fallback) const;
  std::vector<double> get_double_list(const std::string& key,
                                      const std::vector<double>& fallback) const;
  // Members of an array of tables ([[layers]]), each as its own Config with the same source.
  std::vector<Config> get_tables(const std::string& key) const;

  // Where `key` came from: the file name, "--set", or the source given to from_text. A table
  // that holds keys given with --set is "--set" (with no file: "defaults" gave nothing else)
  // or "FILE and --set".
  std::string source_of(const std::string& key) const;
  const std::string& source() const;
  // The whole document as TOML (defaults not included), for model files and checkpoints.
  std::string to_toml() const;
  // Relative paths in the config are resolved against the config file's directory.
  std::string resolve_path(const std::string& path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Levenshtein distance, used for "did you mean" suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);
// The nearest of `candidates` to `word`, or "" when none is reasonably close.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace tokenflow
