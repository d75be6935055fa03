// tokenflow/output_manifest.hpp: DIR/.tokenflow-outputs, the record of what tokenflow wrote in an
// output folder.
//
// Format (text, one record a line, '#' starts a comment line):
//   tokenflow-outputs 2
//   command simulate                      the command whose outputs these are
//   dir snapshots                         a folder tokenflow created (removed only when empty)
//   file SIZE MTIME_NS FNV1A64 PATH       a file it wrote: bytes, modification time (ns since the
//                                         epoch), FNV-1a 64 of the content (16 hex digits), path
//   inplace PATH                          written in place by the run in progress (a checkpoint);
//                                         its content is recorded when the run commits
// PATH is relative to DIR with '/' between folders (it may contain spaces; it is the rest of the
// line). A file named .tokenflow-outputs without the header line is not tokenflow's (the earlier
// format of one name a line, with no records, cannot prove what it names was written by
// tokenflow): reading it is an InputError, and tokenflow leaves it and the files it names alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace tokenflow {

inline constexpr const char* kManifestFileName = ".tokenflow-outputs";

// What identifies the content tokenflow wrote at a path.
struct FileRecord {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t hash = 0;  // FNV-1a 64 of the bytes
};

struct OutputManifest {
  std::string command;                       // "" in an empty manifest
  std::map<std::string, FileRecord> files;   // path -> content
  std::set<std::string> dirs;                // folders tokenflow created
  std::set<std::string> in_place;            // files a run writes in place (content not recorded)

  bool empty() const { return command.empty() && files.empty() && in_place.empty(); }
};

// A relative path tokenflow may write or remove: not empty, no "." or ".." component, no
// absolute path, no control characters, not one of tokenflow's own bookkeeping names at the top
// (the manifest, .staging-*, and the names earlier versions used: .tokenflow-lock, .rollback-*,
// .tokenflow-outputs.tmp-*). A hand-edited manifest cannot make a run touch anything outside DIR.
bool is_output_path(const std::string& path);

// Parses the text of `file` (for messages). Throws InputError(file, "--out", ...) on a line it
// cannot read.
OutputManifest parse_output_manifest(const std::string& text, const std::string& file);
std::string output_manifest_text(const OutputManifest& manifest);

// DIR/.tokenflow-outputs (an empty manifest when there is none; InputError when it is not a small
// regular file or does not parse).
OutputManifest read_output_manifest(const std::filesystem::path& dir);
// Replaces DIR/.tokenflow-outputs atomically and durably (the folder is synced too); the
// temporary file is written in temp_dir (the run's staging area).
void write_output_manifest(const std::filesystem::path& dir, const OutputManifest& manifest,
                           const std::filesystem::path& temp_dir);

// The record of the regular file at `path` (lstat, then its bytes hashed); nullopt when the path is
// not a regular file (missing, a folder, a link).
std::optional<FileRecord> record_file(const std::filesystem::path& path);
// Whether the regular file at `path` still holds the recorded content: size and modification time
// equal, or size equal and the hash of its bytes equal.
bool file_matches(const std::filesystem::path& path, const FileRecord& record);

}  // namespace tokenflow
