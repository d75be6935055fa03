#include "common.hpp"

#include <fmt/format.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

namespace tokenflow::cli {

Config load_config(const CommonOptions& options) {
  Config c = options.config_path.empty() ? Config() : Config::from_file(options.config_path);
  for (const auto& s : options.sets) c.set(s);
  return c;
}

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)),
      enabled_(::isatty(2) && std::getenv("CI") == nullptr && std::getenv("TOKENFLOW_QUIET") == nullptr),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

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

void write_summary(const OutputDir& out, const nlohmann::json& summary) {
  std::ofstream f(out.staged("summary.json"));
  // Non-finite numbers are not JSON: nlohmann writes them as null.
  f << summary.dump(2) << "\n";
  if (!f) throw std::runtime_error("cannot write summary.json");
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

namespace {
volatile std::sig_atomic_t interrupt_flag = 0;
extern "C" void on_interrupt(int) {
  interrupt_flag = 1;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}
}  // namespace

void install_interrupt_handler() { std::signal(SIGINT, on_interrupt); }
bool interrupted() { return interrupt_flag != 0; }

}  // namespace tokenflow::cli
