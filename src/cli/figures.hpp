// How the C++ commands draw figures: they compute and write data (.npy, .csv, summary.json), then
// run  PYTHON -m tokenflow.figures NAME DIR  with PYTHONPATH pointing at the tokenflow package
// that was built (build/python) or installed next to this executable. matplotlib lives only in
// Python; the data never depends on it (--no-figures writes the data alone).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tokenflow::cli {

// Raised when Python, numpy, matplotlib or the tokenflow package cannot be found: the message
// says what is missing and how to install it.
class FiguresUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PythonFigures {
  std::string python;       // the interpreter: $TOKENFLOW_PYTHON, else the one found by CMake (/usr/bin/python3)
  std::string package_dir;  // the directory that holds tokenflow/ (goes first on PYTHONPATH)
};

// Finds the interpreter and the package and checks that `import numpy, matplotlib,
// tokenflow.figures` works. Search order for the package: $TOKENFLOW_PYTHONPATH, <exe dir>/python
// (the build tree), <exe dir>/../<TOKENFLOW_PYTHON_INSTALL_DIR> (the installed tree).
PythonFigures find_python_figures();

// Runs `python -m tokenflow.figures ARGS...` (stdout and stderr go to the terminal); throws
// std::runtime_error when it fails.
void draw_figures(const PythonFigures& python, const std::vector<std::string>& args);

}  // namespace tokenflow::cli
