// tokenflow/records.hpp: the little-endian binary records of tokenflow's own files (model.bin and
// checkpoints), and the FNV-1a hash that seals them.
//
// ByteWriter appends records to a byte string; ByteReader reads them back and refuses to read past
// the end: every length read from a file is checked against the bytes it holds before anything is
// allocated, and a failure is an InputError naming the file. Records:
//   scalar<S>   sizeof(S) bytes, as stored in memory (little-endian; checked at compile time)
//   string      u64 length, then the bytes
//   matrix      i64 rows, i64 cols, then rows * cols scalars in the matrix's storage order
//   f64_array   u64 count, then count f64 values
#pragma once

#include <Eigen/Core>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

namespace tokenflow {

static_assert(std::endian::native == std::endian::little, "tokenflow's files are written little-endian");

// FNV-1a, 64 bits (Fowler, Noll, Vo): a checksum against truncation and corruption, not a MAC.
std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed = 0xcbf29ce484222325ull);

class ByteWriter {
 public:
  void bytes(const void* p, std::size_t n);
  template <class S>
  void scalar(S v) { bytes(&v, sizeof(S)); }
  void string(const std::string& s);
  template <class M>  // any dense Eigen matrix/vector: rows, cols, data (its storage order)
  void matrix(const M& m) {
    scalar<std::int64_t>(m.rows());
    scalar<std::int64_t>(m.cols());
    bytes(m.data(), sizeof(typename M::Scalar) * static_cast<std::size_t>(m.size()));
  }
  template <class T>  // converted to f64 (exact for float and double)
  void f64_array(const T* data, std::size_t count) {
    scalar<std::uint64_t>(count);
    for (std::size_t i = 0; i < count; ++i) scalar<double>(static_cast<double>(data[i]));
  }
  // Appends the FNV-1a hash of everything written so far (a sealed file) and returns the bytes.
  std::string seal();
  const std::string& data() const { return buffer_; }

 private:
  std::string buffer_;
};

class ByteReader {
 public:
  // Reads `data` (kept by reference: it must outlive the reader). Failures are
  // InputError(file, key, ...): fail(what) says `what`; the reads' own failures (a truncated record,
  // a length beyond the bytes present) say "is corrupt (what)" followed by `advice`.
  ByteReader(const std::string& data, std::string file, std::string key = "checkpoint",
             std::string advice = "; delete it to start the run afresh");
  // A sealed file (ByteWriter::seal): checks that it starts with `magic` and that its trailing hash
  // matches before anything is parsed; reads stop before the hash. `kind` names the file kind in
  // the message for a wrong magic ("not a tokenflow <kind> file").
  void open_sealed(const std::string& magic, const std::string& kind);

  void bytes(void* p, std::size_t n);
  template <class S>
  S scalar() {
    S v;
    bytes(&v, sizeof(S));
    return v;
  }
  // `max_size` bounds a string that is quoted in messages (a tensor name), beyond the bytes present.
  std::string string(std::size_t max_size = std::size_t{1} << 40);
  template <class M>
  void matrix(M& m) {
    const auto r = scalar<std::int64_t>(), c = scalar<std::int64_t>();
    if (r < 0 || c < 0 || (r > 0 && c > static_cast<std::int64_t>(remaining() / sizeof(typename M::Scalar)) / r))
      corrupt("matrix size");
    // A vector (one dimension fixed at compile time) must be read with that dimension: resizing
    // VectorXd to r x 0 leaves size() = r over no storage (a fuzz finding: memcpy to null).
    if ((M::RowsAtCompileTime != Eigen::Dynamic && r != M::RowsAtCompileTime) ||
        (M::ColsAtCompileTime != Eigen::Dynamic && c != M::ColsAtCompileTime))
      corrupt("matrix shape");
    m.resize(r, c);
    bytes(m.data(), sizeof(typename M::Scalar) * static_cast<std::size_t>(m.size()));
  }
  std::vector<double> f64_array();
  // The bytes not read yet (before the hash of a sealed file).
  std::size_t remaining() const { return end_ - pos_; }
  // Throws unless every byte (before the hash) has been read.
  void finish() const;
  [[noreturn]] void corrupt(const std::string& what) const;
  [[noreturn]] void fail(const std::string& what) const;
  const std::string& file() const { return file_; }

 private:
  const std::string& data_;
  std::string file_, key_, advice_;
  std::size_t pos_ = 0, end_ = 0;
};

}  // namespace tokenflow
