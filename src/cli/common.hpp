// Shared pieces of the CLI: loading a config with --set overrides, the progress bar, JSON and CSV
// output. The CLI only parses, calls the library and writes outputs.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenflow/config.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow::cli {

struct CommonOptions {
  std::string config_path;
  std::vector<std::string> sets;
  std::string out;
};

// The config of --config (or an empty one) with every --set applied.
Config load_config(const CommonOptions& options);

// A one-line progress bar on stderr, drawn only on a terminal and never when CI is set.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  void update(double fraction, const std::string& detail = "");
  void finish();

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

// Wall clock from the start of the command.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

nlohmann::json to_json(const Eigen::VectorXd& v);
nlohmann::json to_json(const Eigen::MatrixXd& m);
// A matrix as a TOML array of rows, every number printed to round-trip ("%.17g"): a config
// written with it reads back to the same doubles.
std::string toml_matrix(const Eigen::MatrixXd& m);
std::string toml_vector(const Eigen::VectorXd& v);
// Writes summary.json into the staging area of `out` (NaN/inf become null).
void write_summary(const OutputDir& out, const nlohmann::json& summary);
// Writes `text` to `path` (a staged file: no rename needed); throws when it cannot.
void write_text(const std::filesystem::path& path, const std::string& text);

// Ctrl-C: the first SIGINT sets a flag that progress callbacks read (they return false, the
// library throws Cancelled, the staged outputs are removed and the CLI exits 130); a second
// SIGINT kills the process.
void install_interrupt_handler();
bool interrupted();

}  // namespace tokenflow::cli
