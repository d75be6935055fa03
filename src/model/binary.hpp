// Little-endian binary records for model.bin and checkpoint.bin (internal to src/model): a writer
// that appends to a byte string, a reader that refuses to read past the end (InputError naming the
// file), the FNV-1a 64-bit hash that seals each file, and an atomic, durable file write.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenflow/error.hpp"

namespace tokenflow::binary {

static_assert(std::endian::native == std::endian::little, "model files are written little-endian");

// FNV-1a, 64 bits (Fowler, Noll, Vo): a checksum against truncation and corruption, not a MAC.
inline std::uint64_t fnv1a(const char* data, std::size_t size) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

class Writer {
 public:
  void bytes(const void* p, std::size_t size) { out_.append(static_cast<const char*>(p), size); }
  void u64(std::uint64_t v) { bytes(&v, sizeof v); }
  void i64(std::int64_t v) { bytes(&v, sizeof v); }
  void f64(double v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  template <class T>
  void f64_array(const T* data, std::size_t count) {
    u64(count);
    for (std::size_t i = 0; i < count; ++i) f64(static_cast<double>(data[i]));
  }
  // Appends the hash of everything written so far and returns the finished file.
  std::string seal() {
    u64(fnv1a(out_.data(), out_.size()));
    return out_;
  }

 private:
  std::string out_;
};

class Reader {
 public:
  // Checks the trailing hash first: a corrupt or truncated file is refused before any parsing.
  Reader(std::string data, std::string source, const char magic[8]);
  void bytes(void* p, std::size_t size, const char* what);
  std::uint64_t u64(const char* what) {
    std::uint64_t v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::int64_t i64(const char* what) {
    std::int64_t v;
    bytes(&v, sizeof v, what);
    return v;
  }
  double f64(const char* what) {
    double v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::string str(const char* what, std::size_t max_size = std::size_t{1} << 30);
  std::vector<double> f64_array(const char* what);
  // The bytes not read yet (before the hash): counts read from the file are checked against it
  // before anything is allocated.
  std::size_t remaining() const { return end_ - pos_; }
  // Throws unless every byte before the hash has been read.
  void finish();
  [[noreturn]] void fail(const std::string& what) const;
  const std::string& source() const { return source_; }

 private:
  std::string data_, source_;
  std::size_t pos_ = 0, end_ = 0;
};

// Reads a whole file through read_input_file (InputError when missing, unreadable, or not a
// regular file).
std::string read_file(const std::filesystem::path& path, const std::string& key);

}  // namespace tokenflow::binary
