// JSON values of the summaries (summary.json of every command): a non-finite number is null
// (JSON has no inf or nan); vectors and matrices (row by row) of such numbers. Internal to src/.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <nlohmann/json.hpp>

namespace tokenflow::json_values {

inline nlohmann::json json_number(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

inline nlohmann::json json_vector(const Eigen::VectorXd& v) {
  nlohmann::json j = nlohmann::json::array();
  for (double x : v) j.push_back(json_number(x));
  return j;
}

inline nlohmann::json json_matrix(const Eigen::MatrixXd& m) {
  nlohmann::json j = nlohmann::json::array();
  for (Eigen::Index r = 0; r < m.rows(); ++r) j.push_back(json_vector(m.row(r).transpose()));
  return j;
}

}  // namespace tokenflow::json_values
