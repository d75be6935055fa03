#include "figures.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "common.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/run_files.hpp"

#ifndef TOKENFLOW_PYTHON_EXECUTABLE
#define TOKENFLOW_PYTHON_EXECUTABLE "/usr/bin/python3"
#endif
#ifndef TOKENFLOW_PYTHON_INSTALL_DIR
#define TOKENFLOW_PYTHON_INSTALL_DIR "lib/python3/dist-packages"
#endif

extern char** environ;

namespace tokenflow::cli {

namespace fs = std::filesystem;

namespace {

struct ProcessResult {
  int exit_code = -1;
  std::string captured;  // stderr (and stdout) when captured
};

// fork + execv with PYTHONPATH prepended; captures stdout and stderr when `capture`.
ProcessResult run_python(const PythonFigures& py, const std::vector<std::string>& args, bool capture) {
  std::vector<std::string> env_strings;
  const char* old_path = std::getenv("PYTHONPATH");
  env_strings.push_back("PYTHONPATH=" + py.package_dir + (old_path && *old_path ? std::string(":") + old_path : ""));
  // Figures are drawn off-screen.
  env_strings.push_back("MPLBACKEND=Agg");
  for (char** e = environ; *e; ++e) {
    const std::string s(*e);
    if (s.rfind("PYTHONPATH=", 0) != 0 && s.rfind("MPLBACKEND=", 0) != 0) env_strings.push_back(s);
  }
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings{py.python};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int pipe_fds[2] = {-1, -1};
  if (capture && ::pipe(pipe_fds) != 0) throw std::runtime_error("cannot create a pipe");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("cannot start " + py.python);
  if (pid == 0) {
    unblock_stop_signals();  // the parent's watcher thread takes them; the child has no watcher
    if (capture) {
      ::dup2(pipe_fds[1], 1);
      ::dup2(pipe_fds[1], 2);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  run_files::add_child(static_cast<int>(pid));
  ProcessResult result;
  if (capture) {
    ::close(pipe_fds[1]);
    char buffer[4096];
    for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
      result.captured.append(buffer, static_cast<std::size_t>(got));
    ::close(pipe_fds[0]);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run_files::forget_child(static_cast<int>(pid));
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  const auto pos = t.find_last_of('\n');
  return pos == std::string::npos ? t : t.substr(pos + 1);
}

}  // namespace

PythonFigures find_python_figures() {
  PythonFigures py;
  const char* env_python = std::getenv("TOKENFLOW_PYTHON");
  py.python = env_python && *env_python ? env_python : TOKENFLOW_PYTHON_EXECUTABLE;
  if (::access(py.python.c_str(), X_OK) != 0)
    throw FiguresUnavailable("figures need Python 3 with matplotlib, and " + py.python +
                             " was not found (Debian: apt-get install python3 python3-numpy python3-matplotlib;"
                             " or set TOKENFLOW_PYTHON; --no-figures writes the data only)");

  std::vector<fs::path> candidates;
  if (const char* env_path = std::getenv("TOKENFLOW_PYTHONPATH"); env_path && *env_path) candidates.emplace_back(env_path);
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (!ec) {
    candidates.push_back(exe_dir / "python");
    candidates.push_back(exe_dir / ".." / TOKENFLOW_PYTHON_INSTALL_DIR);
  }
  for (const auto& c : candidates) {
    if (fs::exists(c / "tokenflow" / "figures.py", ec)) {
      py.package_dir = fs::weakly_canonical(c, ec).string();
      break;
    }
  }
  if (py.package_dir.empty()) {
    std::string where;
    for (const auto& c : candidates) where += (where.empty() ? "" : ", ") + c.string();
    throw FiguresUnavailable("figures need the tokenflow Python package, not found in " + where +
                             " (build it with `make build`, which needs pybind11-dev; or set TOKENFLOW_PYTHONPATH;"
                             " --no-figures writes the data only)");
  }
  const ProcessResult check = run_python(py, {"-c", "import numpy, matplotlib, tokenflow.figures"}, true);
  if (check.exit_code != 0)
    throw FiguresUnavailable("figures need numpy and matplotlib for " + py.python + ": " + last_line(check.captured) +
                             " (Debian: apt-get install python3-numpy python3-matplotlib; --no-figures writes the"
                             " data only)");
  return py;
}

void draw_figures(const PythonFigures& py, const std::vector<std::string>& args) {
  std::vector<std::string> full{"-m", "tokenflow.figures"};
  full.insert(full.end(), args.begin(), args.end());
  const ProcessResult r = run_python(py, full, false);
  if (interrupted()) throw Cancelled();
  if (r.exit_code != 0)
    throw std::runtime_error("drawing the figures failed (" + py.python + " -m tokenflow.figures exited with " +
                             std::to_string(r.exit_code) + ")");
}

}  // namespace tokenflow::cli
