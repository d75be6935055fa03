#include "test_util.hpp"

#include "tokenflow/io.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace tokenflow::testing {
namespace {

// The folders temp_dir made, removed when the test process exits (TOKENFLOW_KEEP_TEST_DIRS set, to
// any value, keeps them for a look after a failure). Only the process that made them removes them: a forked child
// that exits normally leaves its parent's folders alone.
struct TempDirs {
  pid_t owner = ::getpid();
  std::vector<std::filesystem::path> paths;
  ~TempDirs() {
    if (::getpid() != owner || std::getenv("TOKENFLOW_KEEP_TEST_DIRS")) return;
    std::error_code ec;
    for (const auto& p : paths) std::filesystem::remove_all(p, ec);
  }
};

TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

std::filesystem::path temp_dir(const std::string& name) {
  const auto p = std::filesystem::temp_directory_path() /
                 ("tokenflow-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  auto& dirs = temp_dirs();
  if (std::find(dirs.paths.begin(), dirs.paths.end(), p) == dirs.paths.end()) dirs.paths.push_back(p);
  return p;
}

std::string read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void save_npy(const std::filesystem::path& path, const RowMatrix& m) {
  write_npy(path, m.data(), {static_cast<std::size_t>(m.rows()), static_cast<std::size_t>(m.cols())});
}

void save_npy(const std::filesystem::path& path, const Eigen::VectorXd& v) {
  write_npy(path, v.data(), {static_cast<std::size_t>(v.size())});
}

RowMatrix cost_matrix(CostKind cost, const RowMatrix& x, const RowMatrix& y) {
  RowMatrix C(x.rows(), y.rows());
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < y.rows(); ++j) C(i, j) = pair_cost(cost, &x(i, 0), &y(j, 0), x.cols());
  return C;
}

nlohmann::json read_summary(const std::filesystem::path& dir) {
  std::ifstream in(dir / "summary.json");
  return nlohmann::json::parse(in);
}

long output_entries(const std::filesystem::path& dir) {
  long count = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) count += e.path().filename() != ".tokenflow-outputs";
  return count;
}

CliResult run_cli(const std::string& args) {
  const auto err_file = std::filesystem::temp_directory_path() / ("tokenflow-stderr-" + std::to_string(::getpid()));
  const std::string cmd = std::string("CI=1 ") + TOKENFLOW_CLI + " " + args + " 2> " + err_file.string() + " >/dev/null";
  const int status = std::system(cmd.c_str());
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::filesystem::remove(err_file);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

}  // namespace tokenflow::testing
