// Shared by the fuzz targets whose readers take a path (model.bin, training checkpoints): the
// input is put in an in-memory file (memfd) and its path /proc/self/fd/N handed to the reader, so
// the whole read path (read_input_file's checks included) runs without touching the disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace fuzz {

class MemoryFile {
 public:
  MemoryFile() {
    fd_ = ::memfd_create("tokenflow-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  // Replaces the file's contents with `bytes`; returns its path.
  const std::string& write(const std::string& bytes) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (w <= 0) std::abort();
      done += static_cast<std::size_t>(w);
    }
    return path_;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// FNV-1a 64 (the seal of model.bin and training checkpoints), appended so that a mutated input
// reaches the parser: whoever crafts a file can recompute a checksum just as well.
inline std::string sealed(std::string bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  bytes.append(reinterpret_cast<const char*>(&h), 8);
  return bytes;
}

}  // namespace fuzz
