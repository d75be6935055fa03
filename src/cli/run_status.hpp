// The end of a run whose summary.json says it computed no complete result: status "stalled" or
// "failed" (docs/design.md section 3). The outputs are committed (summary.json carries "reason"), and
// the command then exits with code 1 and one line on stderr, never 0.
#pragma once

#include <nlohmann/json.hpp>
#include <iostream>
#include <stdexcept>
#include <string>

namespace tokenflow::cli {

// Throws std::runtime_error ("<command> <status>: <reason> (see DIR/summary.json)") when the
// summary's status is "stalled" or "failed"; returns otherwise.
inline void throw_unless_result(const std::string& summary_json, const std::string& command,
                                const std::string& out_dir) {
  const nlohmann::json s = nlohmann::json::parse(summary_json);
  const std::string status = s.value("status", "");
  if (status != "stalled" && status != "failed") return;
  throw std::runtime_error(command + " " + status + ": " + s.value("reason", "no reason given") + " (status \"" +
                           status + "\" in " + out_dir + "/summary.json)");
}

// Prints each line of the summary's "warnings" (a choice that did not do what was asked, such as
// a fast summation that summed most rows exactly) on stderr as "tokenflow: warning: LINE".
inline void print_summary_warnings(const std::string& summary_json) {
  const nlohmann::json s = nlohmann::json::parse(summary_json);
  if (const auto w = s.find("warnings"); w != s.end())
    for (const auto& line : *w) std::cerr << "tokenflow: warning: " << line.get<std::string>() << "\n";
}

}  // namespace tokenflow::cli
