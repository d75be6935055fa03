// Binary records (src/model/binary.hpp).
#include "binary.hpp"

#include "tokenflow/input_file.hpp"

namespace tokenflow::binary {

Reader::Reader(std::string data, std::string source, const char magic[8])
    : data_(std::move(data)), source_(std::move(source)) {
  if (data_.size() < 16 || std::memcmp(data_.data(), magic, 8) != 0)
    fail(std::string("not a tokenflow ") + (magic[2] == 'M' ? "model" : "checkpoint") +
         " file (wrong magic number or too short)");
  end_ = data_.size() - 8;
  std::uint64_t stored;
  std::memcpy(&stored, data_.data() + end_, 8);
  if (stored != fnv1a(data_.data(), end_)) fail("corrupt or truncated (checksum mismatch)");
  pos_ = 8;
}

void Reader::fail(const std::string& what) const {
  throw InputError(source_, "", what);
}

void Reader::bytes(void* p, std::size_t size, const char* what) {
  if (size == 0) return;  // p may be null (an empty array); memcpy with it is undefined
  if (size > end_ - pos_) fail(std::string("truncated while reading ") + what);
  std::memcpy(p, data_.data() + pos_, size);
  pos_ += size;
}

std::string Reader::str(const char* what, std::size_t max_size) {
  const std::uint64_t size = u64(what);
  if (size > max_size || size > end_ - pos_) fail(std::string("bad length of ") + what);
  std::string s(data_.data() + pos_, static_cast<std::size_t>(size));
  pos_ += static_cast<std::size_t>(size);
  return s;
}

std::vector<double> Reader::f64_array(const char* what) {
  const std::uint64_t count = u64(what);
  if (count > (end_ - pos_) / 8) fail(std::string("bad length of ") + what);
  std::vector<double> v(static_cast<std::size_t>(count));
  bytes(v.data(), v.size() * 8, what);
  return v;
}

void Reader::finish() {
  if (pos_ != end_) fail("unexpected bytes after the last record");
}

std::string read_file(const std::filesystem::path& path, const std::string& key) {
  // A regular file only, no larger than this machine's memory (tokenflow/input_file.hpp).
  return read_input_file(path, key);
}

}  // namespace tokenflow::binary
