// Binary records and the FNV-1a seal (tokenflow/records.hpp).
#include "tokenflow/records.hpp"

#include <cstring>

#include "tokenflow/error.hpp"

namespace tokenflow {

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void ByteWriter::bytes(const void* p, std::size_t n) {
  if (n > 0) buffer_.append(static_cast<const char*>(p), n);  // p may be null for empty matrices
}

void ByteWriter::string(const std::string& s) {
  scalar<std::uint64_t>(s.size());
  bytes(s.data(), s.size());
}

std::string ByteWriter::seal() {
  scalar<std::uint64_t>(fnv1a64(buffer_.data(), buffer_.size()));
  return buffer_;
}

ByteReader::ByteReader(const std::string& data, std::string file, std::string key, std::string advice)
    : data_(data), file_(std::move(file)), key_(std::move(key)), advice_(std::move(advice)), end_(data.size()) {}

void ByteReader::open_sealed(const std::string& magic, const std::string& kind) {
  if (data_.size() < magic.size() + 8 || data_.compare(0, magic.size(), magic) != 0)
    fail("not a tokenflow " + kind + " file (wrong magic number or too short)");
  end_ = data_.size() - 8;
  std::uint64_t stored;
  std::memcpy(&stored, data_.data() + end_, 8);
  if (stored != fnv1a64(data_.data(), end_)) fail("corrupt or truncated (checksum mismatch)");
  pos_ = magic.size();
}

void ByteReader::bytes(void* p, std::size_t n) {
  if (n == 0) return;  // p may be null for empty matrices; memcpy with it is undefined
  if (n > remaining()) corrupt("truncated payload");
  std::memcpy(p, data_.data() + pos_, n);
  pos_ += n;
}

std::string ByteReader::string(std::size_t max_size) {
  const auto n = scalar<std::uint64_t>();
  if (n > remaining() || n > max_size) corrupt("string length");
  std::string s(data_.data() + pos_, n);
  pos_ += n;
  return s;
}

std::vector<double> ByteReader::f64_array() {
  const auto count = scalar<std::uint64_t>();
  if (count > remaining() / 8) corrupt("array length");
  std::vector<double> v(static_cast<std::size_t>(count));
  bytes(v.data(), v.size() * 8);
  return v;
}

void ByteReader::finish() const {
  if (pos_ != end_) corrupt("unexpected bytes after the last record");
}

void ByteReader::corrupt(const std::string& what) const {
  throw InputError(file_, key_, "is corrupt (" + what + ")" + advice_);
}

void ByteReader::fail(const std::string& what) const {
  throw InputError(file_, key_, what);
}

}  // namespace tokenflow
