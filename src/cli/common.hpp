// Shared pieces of the CLI: loading a config with --set overrides, the progress bar, JSON and CSV
// output. The CLI only parses, calls the library and writes outputs.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenflow/config.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/readers.hpp"

namespace CLI {
class App;
}

namespace tokenflow::cli {

// The help of every command's --out: the rule that protects what DIR already holds.
inline constexpr const char* kOutHelp =
    "Output directory. A run replaces only the files an earlier run of the same command wrote there (listed "
    "in DIR/.tokenflow-outputs) and leaves everything else alone (tokenflow --help says more)";

struct CommonOptions {
  std::string config_path;
  std::vector<std::string> sets;
  std::string out;
};

// The config of --config (or an empty one) with every --set applied.
Config load_config(const CommonOptions& options);

// The subcommand `name` of a command that reads a config, with --config, --set (its help shows
// `set_example`, a key=value) and --out, parsed into `options`.
CLI::App* add_config_command(CLI::App& app, const std::string& name, const std::string& description,
                             CommonOptions& options, const std::string& set_example);

// A one-line progress bar on stderr, drawn only on a terminal and never when CI is set.
class ProgressBar {
 public:
  // Whether bars are drawn: stderr is a terminal, and neither CI nor TOKENFLOW_QUIET is set. Where
  // they are not, a long command that runs several parts (demo) prints a line after each instead.
  static bool drawn_on_stderr();
  static bool quiet() { return std::getenv("TOKENFLOW_QUIET") != nullptr; }
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

// A Sinkhorn progress callback (SinkhornOptions::progress) that draws `bar` on a log scale of the
// marginal error, from 1 down to tol, and stops the solve once interrupted().
std::function<bool(int, double)> sinkhorn_progress(ProgressBar& bar, double tol);

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
// A rows x cols matrix of independent N(0, sd^2) entries drawn from rng (row by row).
Eigen::MatrixXd normal_matrix(Random& rng, Eigen::Index rows, Eigen::Index cols, double sd = 1.0);
// Writes summary.json into the staging area of `out` (NaN/inf become null).
void write_summary(const OutputDir& out, const nlohmann::json& summary);
// Where a measurement was made: /proc/cpuinfo's model name ("unknown" without it), and today's
// date in UTC (YYYY-MM-DD).
std::string cpu_model();
// "help (default V)" with V the default the library's options struct holds (so --help never repeats
// a literal that could drift from it), written short: 1e-9, 0.1, 10000.
std::string with_default(const std::string& help, double value);
// `help` with @KINDS@ replaced by the attention kinds that have a Gaussian closure (the registry's).
std::string with_closure_kinds(std::string help);
std::string utc_date();
// Writes `text` to `path` (a staged file: no rename needed) durably; throws WriteError when it cannot.
void write_text(const std::filesystem::path& path, const std::string& text);

// SIGINT and SIGTERM, handled once for every command (src/cli/common.cpp): main() calls
// start_signal_watcher() before anything else. The first signal makes interrupted() true (progress
// callbacks return false, the library throws Cancelled, the staged outputs are removed, the CLI
// prints "tokenflow: interrupted" and exits 130 for SIGINT, 143 for SIGTERM). Commands that write
// checkpoints call stop_only_at_safe_points(): they are given the time to reach their next step;
// other commands that have not stopped within two seconds are stopped by the watcher, which
// removes their staging folder and temporary files. A second signal stops any command at once.
void start_signal_watcher();
void stop_only_at_safe_points();
bool interrupted();
int interrupt_signal();  // 0 before a signal, else SIGINT or SIGTERM
// In a child process between fork and exec: the child gets the default signal mask back.
void unblock_stop_signals();

// study(progress) behind a progress bar labelled `label`: progress(fraction) draws it and returns
// false once interrupted(); an InputError of the study is located in `source` (file and key).
template <class Study>
auto run_with_progress(const std::string& label, const Config& source, const Study& study) {
  ProgressBar bar(label);
  try {
    auto result = study([&](double fraction) {
      bar.update(fraction);
      return !interrupted();
    });
    bar.finish();
    return result;
  } catch (const InputError& e) {
    throw located_in(e, source);
  }
}

}  // namespace tokenflow::cli
