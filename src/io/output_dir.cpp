// Atomic output directories: stage, then rename into place.
#include <fstream>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow {
namespace fs = std::filesystem;

OutputDir::OutputDir(fs::path dir) : dir_(std::move(dir)) {
  if (dir_.empty()) throw InputError("", "--out", "an output directory is required");
  std::error_code ec;
  if (fs::exists(dir_, ec)) {
    if (!fs::is_directory(dir_, ec)) throw InputError("", "--out", dir_.string() + " is not a directory");
  } else {
    fs::create_directories(dir_, ec);
    if (ec) throw InputError("", "--out", "cannot create " + dir_.string() + ": " + ec.message());
    created_dir_ = true;
  }
  // Staging directories of runs that were killed (their process is gone) are debris: remove them.
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".staging-", 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + 9, nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove_all(entry.path(), ec);
  }
  staging_ = dir_ / (".staging-" + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  fs::create_directory(staging_, ec);
  if (ec) throw InputError("", "--out", "cannot write in " + dir_.string() + ": " + ec.message());
}

OutputDir::~OutputDir() {
  std::error_code ec;
  fs::remove_all(staging_, ec);
  if (!committed_ && created_dir_ && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
}

fs::path OutputDir::staged(const std::string& name) const { return staging_ / name; }

void OutputDir::commit() {
  // Every file is complete in the staging directory; each rename is atomic on one file system.
  for (const auto& entry : fs::directory_iterator(staging_)) {
    const fs::path target = dir_ / entry.path().filename();
    std::error_code ec;
    if (fs::is_directory(target, ec) && entry.is_directory()) fs::remove_all(target, ec);
    fs::rename(entry.path(), target);
  }
  committed_ = true;
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, path);
}

}  // namespace tokenflow
