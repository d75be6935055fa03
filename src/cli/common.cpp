#include "common.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <csignal>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "tokenflow/attention.hpp"
#include "tokenflow/durable_file.hpp"
#include "tokenflow/run_files.hpp"

namespace tokenflow::cli {

Config load_config(const CommonOptions& options) {
  Config c = options.config_path.empty() ? Config() : Config::from_file(options.config_path);
  for (const auto& s : options.sets) c.set(s);
  c.inline_matrix_files();  // .npy paths of Q, K, V, W read now: checkpoints hold their values
  return c;
}

CLI::App* add_config_command(CLI::App& app, const std::string& name, const std::string& description,
                             CommonOptions& options, const std::string& set_example) {
  CLI::App* cmd = app.add_subcommand(name, description);
  cmd->add_option("--config", options.config_path, "TOML config file")->check(CLI::ExistingFile);
  cmd->add_option("--set", options.sets, "Override a key: --set " + set_example + " (repeatable)")->take_all();
  cmd->add_option("--out", options.out, kOutHelp)->required();
  return cmd;
}

bool ProgressBar::drawn_on_stderr() { return ::isatty(2) && std::getenv("CI") == nullptr && !quiet(); }

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)),
      enabled_(drawn_on_stderr()),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

std::function<bool(int, double)> sinkhorn_progress(ProgressBar& bar, double tol) {
  return [&bar, tol](int iteration, double error) {
    const double fraction = error <= tol ? 1.0 : error >= 1.0 ? 0.0 : std::log(error) / std::log(tol);
    bar.update(fraction, fmt::format("iteration {} error {:.2e}", iteration, error));
    return !interrupted();
  };
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(double fraction, const std::string& detail) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_ < std::chrono::milliseconds(100) && fraction < 1.0) return;
  last_ = now;
  drawn_ = true;
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int width = 30, filled = static_cast<int>(fraction * width);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = fraction > 0.0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
  std::fprintf(stderr, "\r%s [%s%s] %5.1f%% %s  %.0fs elapsed, ~%.0fs left  ", label_.c_str(),
               std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(width - filled), '.').c_str(), 100.0 * fraction,
               detail.c_str(), elapsed, eta);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) {
    std::fprintf(stderr, "\n");
    drawn_ = false;
  }
}

nlohmann::json to_json(const Eigen::VectorXd& v) {
  nlohmann::json j = nlohmann::json::array();
  for (double x : v) j.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
  return j;
}

nlohmann::json to_json(const Eigen::MatrixXd& m) {
  nlohmann::json j = nlohmann::json::array();
  for (Eigen::Index r = 0; r < m.rows(); ++r) j.push_back(to_json(Eigen::VectorXd(m.row(r).transpose())));
  return j;
}

std::string toml_vector(const Eigen::VectorXd& v) {
  std::string s = "[";
  for (Eigen::Index i = 0; i < v.size(); ++i) s += fmt::format("{}{:.17g}", i ? ", " : "", v[i]);
  return s + "]";
}

std::string toml_matrix(const Eigen::MatrixXd& m) {
  std::string s = "[";
  for (Eigen::Index r = 0; r < m.rows(); ++r) s += (r ? ", " : "") + toml_vector(m.row(r).transpose());
  return s + "]";
}

Eigen::MatrixXd normal_matrix(Random& rng, Eigen::Index rows, Eigen::Index cols, double sd) {
  Eigen::MatrixXd m(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = sd * rng.normal();
  return m;
}

void write_summary(const OutputDir& out, const nlohmann::json& summary) {
  // Non-finite numbers are not JSON: nlohmann writes them as null.
  write_file_durably(out.staged("summary.json"), summary.dump(2) + "\n");
}

std::string with_default(const std::string& help, double value) {
  std::string shown = fmt::format("{:g}", value);  // 1e-09: drop the exponent's leading zeros
  if (const auto e = shown.find('e'); e != std::string::npos) {
    std::size_t digits = e + 2;  // after the sign
    while (digits + 1 < shown.size() && shown[digits] == '0') shown.erase(digits, 1);
  }
  return help + " (default " + shown + ")";
}

std::string with_closure_kinds(std::string help) {
  const std::string mark = "@KINDS@";
  if (const auto at = help.find(mark); at != std::string::npos) help.replace(at, mark.size(), closure_kind_list());
  return help;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(" \t"));
      return name;
    }
  return "unknown";
}

std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &utc);
  return text;
}

void write_text(const std::filesystem::path& path, const std::string& text) { write_file_durably(path, text); }

// ---- signals -----------------------------------------------------------------------------------
// SIGINT and SIGTERM are blocked in every thread from the start of main() and taken by one watcher
// thread with sigwait(), so no code runs in signal context and every command gets the same
// handling. The first signal sets the flag that the runs' progress callbacks poll (the library then
// throws Cancelled; the staging folder goes with the unwinding OutputDir). A command that writes
// checkpoints waits for its next safe point however long the step takes; any other command gets
// kGraceSeconds. A second signal, or the end of the grace, stops the process at once: the watcher
// removes the registered staging folders and temporary files (after any commit in progress) and
// exits with 128 + the signal.
namespace {
constexpr int kGraceSeconds = 2;
std::atomic<int> received_signal{0};
std::atomic<bool> waits_for_safe_point{false};

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

[[noreturn]] void stop_now(int sig) {
  std::lock_guard commit(run_files::commit_lock());
  run_files::remove_registered();
  const char* line = "\ntokenflow: interrupted\n";
  if (::write(2, line + (::isatty(2) ? 0 : 1), std::strlen(line) - (::isatty(2) ? 0 : 1)) < 0) {
  }
  std::_Exit(128 + sig);
}

void watch_signals() {
  const sigset_t set = stop_signals();
  int sig = 0;
  while (::sigwait(&set, &sig) != 0) {
  }
  received_signal = sig;
  run_files::signal_children(sig);
  if (waits_for_safe_point) {
    const char* line = "\ntokenflow: stopping at the next checkpoint-safe step (a second signal stops at once)\n";
    if (::write(2, line, std::strlen(line)) < 0) {
    }
    int second = 0;
    while (::sigwait(&set, &second) != 0) {
    }
    stop_now(sig);
  }
  const timespec grace{kGraceSeconds, 0};
  ::sigtimedwait(&set, nullptr, &grace);  // a second signal or the end of the grace
  stop_now(sig);
}
}  // namespace

void start_signal_watcher() {
  const sigset_t set = stop_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(watch_signals).detach();
}

void stop_only_at_safe_points() { waits_for_safe_point = true; }
bool interrupted() { return received_signal.load() != 0; }
int interrupt_signal() { return received_signal.load(); }

void unblock_stop_signals() {
  const sigset_t set = stop_signals();
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

}  // namespace tokenflow::cli
