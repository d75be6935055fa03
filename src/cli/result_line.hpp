// The result line: what a command prints on stdout when it succeeds, read back from the
// summary.json it just committed (so the line and the file cannot disagree): the command, its
// headline numbers, its status, the wall time and the output folder, e.g.
//   tokenflow ot: method sinkhorn, cost 0.137503, objective 0.2121, iterations 50,
//   marginal error 7.04089e-10, status converged (0.00616 s) -> out/ot
// (one line). Progress and warnings go to stderr, so stdout holds only this line.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace tokenflow::cli {

std::string result_line(const nlohmann::json& summary, const std::string& out_dir);

// Prints the result line of the run that wrote out_dir: nothing when out_dir is empty or its
// summary.json is older than `started` (the process's start; 2 s of slack for coarse file
// timestamps), i.e. was not written by this run. demo and embed print their own line instead.
void print_result_line(const std::string& out_dir, std::ostream& os, std::filesystem::file_time_type started);

}  // namespace tokenflow::cli
