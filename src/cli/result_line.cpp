// The line a command prints on stdout when it succeeds (src/cli/result_line.hpp).
#include "result_line.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

namespace tokenflow::cli {

namespace {

// A summary entry as printed: numbers with 6 significant digits, null as "n/a".
std::string value_text(const nlohmann::json& v) {
  if (v.is_null()) return "n/a";
  if (v.is_number_float()) return fmt::format("{:.6g}", v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// The entry at a dotted path ("final.effective_rank"), or null.
const nlohmann::json* find_entry(const nlohmann::json& summary, const std::string& path) {
  const nlohmann::json* node = &summary;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

// The headline entries of each command's summary.json: (label, dotted key), in the order printed.
const std::vector<std::pair<std::string, std::string>>& headline(const std::string& command) {
  using Entries = std::vector<std::pair<std::string, std::string>>;
  static const Entries simulate{{"n", "n"}, {"d", "d"}, {"kind", "kind"}, {"t", "t_final"}, {"steps", "steps"},
                                {"effective rank", "final.effective_rank"}, {"clusters", "final.clusters"}};
  static const Entries gaussian{{"kind", "kind"},   {"t", "t_final"},
                                {"blow-up time", "blowup_time"}, {"predicted", "predicted_blowup_time"}};
  static const Entries meanfield{{"slope", "slope"}, {"theory", "theory_slope"}};
  static const Entries stability{{"growth rate", "growth_rate"}, {"growth constant", "growth_constant"},
                                 {"W2 at t = 0", "w2_initial"}};
  static const Entries train{{"steps", "steps"}, {"test W1", "test_w1"}, {"accuracy", "test_accuracy"},
                             {"independent coupling W1", "test_w1_independent"}};
  static const Entries couple{{"n", "n"}, {"m", "m"}, {"marginal error", "marginal_error"}};
  static const Entries ot{{"method", "method"},   {"cost", "cost"},
                          {"objective", "objective"}, {"divergence", "divergence"},
                          {"iterations", "iterations"}, {"marginal error", "marginal_error"}};
  static const Entries wasserstein{{"W_p", "value"}, {"p", "p"}, {"method", "method"}};
  static const Entries moments{{"n", "n"}, {"d", "d"}};
  static const Entries reproduce{{"", "title"}};
  static const Entries none;
  if (command == "simulate") return simulate;
  if (command == "gaussian") return gaussian;
  if (command == "meanfield") return meanfield;
  if (command == "stability") return stability;
  if (command == "train") return train;
  if (command == "couple") return couple;
  if (command == "ot") return ot;
  if (command == "wasserstein") return wasserstein;
  if (command == "moments") return moments;
  if (command == "reproduce") return reproduce;
  return none;
}

}  // namespace

std::string result_line(const nlohmann::json& summary, const std::string& out_dir) {
  const std::string command = summary.value("command", std::string("tokenflow"));
  std::string line = "tokenflow " + command;
  if (command == "reproduce") line += " " + summary.value("name", std::string());
  line += ":";
  std::string sep = " ";
  for (const auto& [label, key] : headline(command)) {
    const nlohmann::json* v = find_entry(summary, key);
    if (v == nullptr) continue;
    line += sep + (label.empty() ? "" : label + " ") + value_text(*v);
    sep = ", ";
  }
  if (const nlohmann::json* status = find_entry(summary, "status")) line += sep + "status " + value_text(*status);
  if (const nlohmann::json* wall = find_entry(summary, "wall_seconds"); wall && wall->is_number())
    line += fmt::format(" ({:.3g} s)", wall->get<double>());
  return line + " -> " + out_dir;
}

void print_result_line(const std::string& out_dir, std::ostream& os, std::filesystem::file_time_type started) {
  namespace fs = std::filesystem;
  if (out_dir.empty()) return;
  const fs::path file = fs::path(out_dir) / "summary.json";
  std::error_code error;
  const fs::file_time_type written = fs::last_write_time(file, error);
  if (error || written < started - std::chrono::seconds(2)) return;
  std::ifstream in(file);
  nlohmann::json summary;
  if (in) summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!summary.is_object()) return;
  try {
    os << result_line(summary, out_dir) << "\n";
  } catch (const nlohmann::json::exception&) {
    // A summary without the usual types (not one tokenflow wrote): the run stands, no line.
  }
}

}  // namespace tokenflow::cli
