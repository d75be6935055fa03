// tokenflow/input_file.hpp: every input file is read through here, with bounds.
//
// A path given as input (a config, an .npy array, a checkpoint, model.bin, word vectors) may name
// anything: /dev/zero (endless bytes), a fifo (an open that blocks forever), a directory, a file of
// many gigabytes. read_input_file reads only regular files, never blocks, never reads more than
// the file's size at open time, and refuses a file above a limit: each refusal is an InputError
// naming the file and the option or key that gave it (exit code 2 in the CLI, InputError in
// Python).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tokenflow {

// The largest configuration (TOML text) read: a real config is a few kilobytes; matrices written
// out in TOML stay far below this.
inline constexpr std::uint64_t kMaxConfigBytes = std::uint64_t{16} << 20;

// The machine's physical memory in bytes (sysconf), or 2^64 - 1 when it cannot be told. Nothing
// larger can be held in memory at once: the default limit for a file, and the bound the config
// readers check their memory estimates against.
std::uint64_t physical_memory_bytes();
// "1.5 GiB", "512 KiB", "123 bytes": for messages.
std::string format_bytes(double bytes);
// A number's text for a message: long digit strings are cut to their first 20 digits and "...",
// so a 5000-digit dimension in a hostile header does not flood the terminal.
std::string shorten_number(const std::string& digits);

// The whole of the regular file `path`. Refused with InputError(path, key, ...):
//   a missing or unreadable file ("cannot open the file: <reason>"),
//   a directory, a device, a fifo or a socket ("is not a regular file (a fifo)"),
//   a file larger than max_bytes ("is N, larger than the M allowed for <what>").
// A fifo put in the path's place between the check and the open does not block (the open is
// non-blocking and its result is checked again with fstat). At most the size fstat reports is read:
// a file that shrinks meanwhile is refused ("changed while it was read").
std::string read_input_file(const std::filesystem::path& path, const std::string& key,
                            std::uint64_t max_bytes = physical_memory_bytes(),
                            const std::string& what = "an input file (this machine's memory)");

// At most the first `count` bytes of the regular file `path` (fewer when it is shorter), with the
// same checks on what the path names (for sniffing a file's magic number).
std::string read_input_prefix(const std::filesystem::path& path, const std::string& key, std::size_t count);

// The regular files this process has read through the two functions above (each once, by device and
// inode, with the path and key that first named it). An output folder refuses a run that would
// replace or remove one of them (tokenflow/output_dir.hpp): a run never destroys its own input.
struct InputFileRead {
  std::uint64_t device = 0, inode = 0;
  std::string path;
  std::string key;
};
// Whether this process has read any input file.
bool any_input_file_read();

// The input file that `path` (not followed when it is a symbolic link) is now, or nullopt: a file
// read with the same device and inode whose recorded path still names it. An input
// deleted after it was read is not matched by the new file that received its inode.
std::optional<InputFileRead> input_file_named_by(const std::filesystem::path& path);

}  // namespace tokenflow
