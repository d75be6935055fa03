// tokenflow/durable_file.hpp: files that are either written completely and on disk, or reported.
//
// Every output of a run goes through DurableFile: each write(2) is checked, the data is fsynced
// before close(2), and any failure (a full disk, a quota, an I/O error) throws WriteError naming
// the file and the system's reason ("No space left on device"). A run that catches it fails
// with exit code 1 and commits nothing. ofstream is not used for outputs because it reports a
// failed write only as a bit, often after the data is gone, and never fsyncs.
#pragma once

#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tokenflow {

// A failed write of an output file (exit code 1 in the CLI: not bad input).
class WriteError : public std::runtime_error {
 public:
  WriteError(const std::filesystem::path& path, const std::string& cause)
      : std::runtime_error("cannot write " + path.string() + ": " + cause) {}
};

class DurableFile {
 public:
  // Creates (or truncates) `path` for writing, mode 0644.
  explicit DurableFile(const std::filesystem::path& path);
  // Closes the descriptor without syncing when close() was not reached (an exception unwinds).
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  // Writes all n bytes (retrying short writes and EINTR); throws WriteError.
  void write(const void* data, std::size_t n);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, then close; throws WriteError (data that a delayed allocation could not place shows
  // up here as ENOSPC or EIO).
  void close();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Writes `bytes` to `path` durably (DurableFile, then close).
void write_file_durably(const std::filesystem::path& path, std::string_view bytes);
// Writes `bytes` to a temporary file, then renames it over `path` and syncs the folder: a reader
// sees the old file or the new one, never half of one. The temporary file is new (O_EXCL, named
// NAME.tmp-PID-TOKEN with a random token, so it never takes or truncates a file that exists), in
// `temp_dir` when given (a folder of tokenflow's on the same file system: an output folder's
// staging area, which goes with the run) and beside `path` otherwise; it is registered with
// run_files so that an interrupt removes it.
void replace_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                             const std::filesystem::path& temp_dir = {});
// 32 hexadecimal digits from the system's random source: a name no one else can have chosen.
std::string random_token();
// Renames `from` to `to` unless `to` exists (renameat2's RENAME_NOREPLACE; on a file system that
// lacks it, link and unlink for a file, an existence check for a folder). Throws WriteError naming
// `to` ("File exists" when it is taken).
void rename_no_replace(const std::filesystem::path& from, const std::filesystem::path& to);
// fsync of a folder, so that renames and new entries in it survive a crash; throws WriteError.
void sync_directory(const std::filesystem::path& dir);
// fsync of every regular file and folder under `root` (files written by other processes, such
// as the figures drawn by Python, are made durable before they are committed); throws WriteError.
void sync_tree(const std::filesystem::path& root);

}  // namespace tokenflow
