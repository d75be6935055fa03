// .npy reading and writing. Hand-written because Debian packages no maintained C++ .npy library
// (cnpy is not packaged); the format is small: magic, version, header length, a Python dict
// literal with 'descr', 'fortran_order', 'shape', then the raw data.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/npy_header.hpp"

namespace tokenflow {
namespace {

static_assert(std::endian::native == std::endian::little, "tokenflow assumes a little-endian host");

// Header text for a message: a hostile header may hold a 5000-digit "dimension" or a megabyte of
// garbage; messages quote at most 60 characters of it (long digit runs cut to 20 digits).
std::string excerpt(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && out.size() < 60;) {
    if (text[i] >= '0' && text[i] <= '9') {
      const std::size_t end = std::min(text.find_first_not_of("0123456789", i), text.size());
      out += shorten_number(text.substr(i, end - i));
      i = end;
    } else {
      out += text[i++];
    }
  }
  return out.size() < text.size() && out.size() >= 60 ? out + "..." : out;
}

// The header dict "{...}" must hold the keys numpy writes, each once and nothing else
// ('descr', 'fortran_order', 'shape'): numpy's reader takes the last of two equal keys, and a
// reader that took the first would read the same file differently. Scans the keys at depth 1,
// skipping each value (strings, tuples) up to its ',' or the closing '}'.
void check_header_keys(const std::string& dict, const std::string& file, const std::string& key) {
  std::vector<std::string> keys;
  std::size_t i = 1;
  const auto skip_space = [&] {
    while (i < dict.size() && (dict[i] == ' ' || dict[i] == '\t' || dict[i] == '\r' || dict[i] == '\n')) ++i;
  };
  const auto skip_string = [&]() -> std::string {  // a quoted string at i; returns its text
    const char quote = dict[i];
    const std::size_t end = dict.find(quote, i + 1);
    if (end == std::string::npos) throw InputError(file, key, "corrupt .npy header: an unclosed string");
    std::string text = dict.substr(i + 1, end - i - 1);
    i = end + 1;
    return text;
  };
  for (;;) {
    skip_space();
    if (i + 1 >= dict.size()) break;  // at the closing '}'
    if (dict[i] != '\'' && dict[i] != '"')
      throw InputError(file, key, "corrupt .npy header: a key that is not a string near '" + excerpt(dict.substr(i)) + "'");
    keys.push_back(skip_string());
    skip_space();
    if (i >= dict.size() || dict[i] != ':') throw InputError(file, key, "corrupt .npy header: no ':' after a key");
    ++i;
    int depth = 0;
    for (; i + 1 < dict.size(); ++i) {
      const char c = dict[i];
      if (c == '\'' || c == '"') {
        skip_string();
        --i;
      } else if (c == '(' || c == '[') {
        ++depth;
      } else if (c == ')' || c == ']') {
        --depth;
      } else if (c == ',' && depth == 0) {
        ++i;
        break;
      }
    }
  }
  for (const char* expected : {"descr", "fortran_order", "shape"})
    if (std::count(keys.begin(), keys.end(), expected) > 1)
      throw InputError(file, key, std::string("corrupt .npy header: the key '") + expected +
                                      "' appears more than once (numpy writes each key once)");
  for (const std::string& k : keys)
    if (k != "descr" && k != "fortran_order" && k != "shape")
      throw InputError(file, key, "corrupt .npy header: unexpected key '" + excerpt(k) +
                                      "' (numpy writes only 'descr', 'fortran_order' and 'shape')");
}

// The value of `field` in the header dict, as raw text up to the next ',' at depth 0 or '}'.
std::string header_field(const std::string& header, const std::string& field, const std::string& file,
                         const std::string& key) {
  const std::string quoted1 = "'" + field + "'", quoted2 = "\"" + field + "\"";
  std::size_t pos = header.find(quoted1);
  if (pos == std::string::npos) pos = header.find(quoted2);
  if (pos == std::string::npos) throw InputError(file, key, "corrupt .npy header: no '" + field + "'");
  pos = header.find(':', pos);
  if (pos == std::string::npos) throw InputError(file, key, "corrupt .npy header near '" + field + "'");
  ++pos;
  int depth = 0;
  std::string value;
  for (; pos < header.size(); ++pos) {
    const char c = header[pos];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    value += c;
  }
  const auto first = value.find_first_not_of(" \t");
  const auto last = value.find_last_not_of(" \t");
  return first == std::string::npos ? "" : value.substr(first, last - first + 1);
}

std::vector<std::size_t> parse_shape(const std::string& text, const std::string& file, const std::string& key) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    throw InputError(file, key, "corrupt .npy header: shape is " + excerpt(text));
  std::vector<std::size_t> shape;
  std::stringstream ss(text.substr(1, text.size() - 2));
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto f = item.find_first_not_of(" \t");
    if (f == std::string::npos) continue;
    const std::string t = item.substr(f, item.find_last_not_of(" \tL") - f + 1);
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
      throw InputError(file, key, "corrupt .npy header: shape is " + excerpt(text));
    // 15 digits keep stoull in range (it throws std::out_of_range past 2^64; found by the fuzzer);
    // parse_npy refuses any total above 2^40 elements anyway.
    if (t.size() > 15)
      throw InputError(file, key, "corrupt .npy header: dimension " + shorten_number(t) + " is too large");
    shape.push_back(std::stoull(t));
  }
  return shape;
}

std::string make_header(const std::string& descr, const std::vector<std::size_t>& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t k = 0; k < shape.size(); ++k) dict += std::to_string(shape[k]) + (shape.size() == 1 ? "," : (k + 1 < shape.size() ? ", " : ""));
  dict += "), }";
  // Total header (magic 6 + version 2 + length 2 + dict + newline) padded to a multiple of 64.
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict += std::string((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const auto len = static_cast<std::uint16_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  return out + dict;
}

template <class S>
void write_raw(const std::filesystem::path& path, const std::string& descr, const S* data,
               const std::vector<std::size_t>& shape) {
  std::size_t count = 1;
  for (auto s : shape) count *= s;
  DurableFile out(path);  // every write checked, fsynced on close (a full disk is an error here)
  out.write(make_header(descr, shape));
  out.write(data, count * sizeof(S));
  out.close();
}

}  // namespace

NpyArray read_npy(const std::filesystem::path& path, const std::string& key) {
  // A regular file only (not /dev/zero, not a fifo), no larger than this machine's memory; the
  // header is then checked against the bytes the file holds before the array is allocated.
  return parse_npy(read_input_file(path, key), path.string(), key);
}

std::size_t npy_header_size(const std::string& prefix, const std::string& file, const std::string& key) {
  if (prefix.size() < 8 || std::memcmp(prefix.data(), "\x93NUMPY", 6) != 0)
    throw InputError(file, key, "not a .npy file (bad magic string)");
  const auto byte = [&](std::size_t k) { return static_cast<std::size_t>(static_cast<unsigned char>(prefix[k])); };
  const int major = static_cast<unsigned char>(prefix[6]);
  std::size_t header_len = 0, length_bytes = 0;
  if (major == 1) {
    length_bytes = 2;
    if (prefix.size() < 10) throw InputError(file, key, "truncated .npy header");
    header_len = byte(8) | (byte(9) << 8);
  } else if (major == 2 || major == 3) {
    length_bytes = 4;
    if (prefix.size() < 12) throw InputError(file, key, "truncated .npy header");
    header_len = byte(8) | (byte(9) << 8) | (byte(10) << 16) | (byte(11) << 24);
  } else {
    throw InputError(file, key, "unsupported .npy version " + std::to_string(major));
  }
  if (header_len > (1u << 20)) throw InputError(file, key, "corrupt .npy header (length)");
  return 8 + length_bytes + header_len;
}

NpyHeader parse_npy_header(const std::string& bytes, const std::string& file, const std::string& key,
                           bool allow_int64) {
  NpyHeader h;
  h.data_offset = npy_header_size(bytes.substr(0, 12), file, key);
  const std::size_t dict_start = static_cast<unsigned char>(bytes[6]) == 1 ? 10 : 12;  // after the length
  if (bytes.size() < h.data_offset) throw InputError(file, key, "truncated .npy header");
  const std::string header = bytes.substr(dict_start, h.data_offset - dict_start);

  // The header is one Python dict literal, "{...}", padded with spaces and a newline: a dict that
  // never closes is a truncated or foreign header.
  const auto open = header.find_first_not_of(" \t\r\n"), close = header.find_last_not_of(" \t\r\n");
  if (open == std::string::npos || header[open] != '{' || header[close] != '}')
    throw InputError(file, key, "corrupt .npy header: not a dict {...}");
  check_header_keys(header.substr(open, close - open + 1), file, key);
  std::string descr = header_field(header, "descr", file, key);
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"')) descr = descr.substr(1, descr.size() - 2);
  const std::string fortran = header_field(header, "fortran_order", file, key);
  if (fortran != "False") {
    if (fortran == "True")
      throw InputError(file, key, "is in Fortran order; save it in C order (numpy.ascontiguousarray)");
    throw InputError(file, key, "corrupt .npy header: fortran_order is " + excerpt(fortran));
  }
  h.shape = parse_shape(header_field(header, "shape", file, key), file, key);
  h.count = 1;
  for (auto s : h.shape) {
    if (s != 0 && h.count > (std::size_t(1) << 40) / s) throw InputError(file, key, "corrupt .npy header (shape too large)");
    h.count *= s;
  }
  if (descr == "<f8" || descr == "=f8" || (allow_int64 && (descr == "<i8" || descr == "=i8"))) {
    h.item = 8;
  } else if (descr == "<f4" || descr == "=f4") {
    h.item = 4;
  } else if (descr == ">f8" || descr == ">f4" || descr == ">i8") {
    throw InputError(file, key, "is big-endian (" + descr + "); tokenflow reads little-endian float32/float64" +
                                    std::string(allow_int64 ? "/int64" : ""));
  } else if (allow_int64) {
    throw InputError(file, key, "has dtype " + excerpt(descr) + "; tokenflow reads float32 ('<f4'), float64 ('<f8') or int64 ('<i8') arrays");
  } else {
    throw InputError(file, key, "has dtype " + excerpt(descr) + "; tokenflow reads float32 ('<f4') or float64 ('<f8') arrays");
  }
  if (descr.front() == '=') descr.front() = '<';
  h.descr = descr;
  return h;
}

NpyArray parse_npy(const std::string& bytes, const std::string& file, const std::string& key) {
  const NpyHeader h = parse_npy_header(bytes, file, key);
  NpyArray arr;
  arr.shape = h.shape;
  arr.was_float32 = h.item == 4;
  const std::size_t count = h.count, item = h.item, pos = h.data_offset;
  // The data must be exactly what the header promises: no truncation, nothing trailing.
  const std::size_t available = bytes.size() - pos;
  if (available != count * item)
    throw InputError(file, key, "is corrupt: the header promises " + std::to_string(count * item) +
                                    " bytes of data, the file holds " + std::to_string(available));
  arr.data.resize(count);
  if (count == 0) return arr;  // memcpy from/to a null pointer is undefined even for 0 bytes
  if (item == 8) {
    std::memcpy(arr.data.data(), bytes.data() + pos, count * 8);
  } else {
    std::vector<float> tmp(count);
    std::memcpy(tmp.data(), bytes.data() + pos, count * 4);
    for (std::size_t i = 0; i < count; ++i) arr.data[i] = tmp[i];
  }
  return arr;
}

void write_npy(const std::filesystem::path& path, const double* data,
               const std::vector<std::size_t>& shape, bool as_float32) {
  if (!as_float32) return write_raw(path, "<f8", data, shape);
  std::size_t count = 1;
  for (auto s : shape) count *= s;
  std::vector<float> tmp(data, data + count);
  write_raw(path, "<f4", tmp.data(), shape);
}

void write_npy(const std::filesystem::path& path, const float* data,
               const std::vector<std::size_t>& shape) {
  write_raw(path, "<f4", data, shape);
}

void write_npy(const std::filesystem::path& path, const std::int64_t* data,
               const std::vector<std::size_t>& shape) {
  write_raw(path, "<i8", data, shape);
}

template <class T>
void write_points(const std::filesystem::path& path, const Points<T>& x) {
  write_npy(path, x.data(), {static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())});
}
template void write_points<float>(const std::filesystem::path&, const Points<float>&);
template void write_points<double>(const std::filesystem::path&, const Points<double>&);

Points<double> read_points(const std::filesystem::path& path, const std::string& key) {
  const NpyArray arr = read_npy(path, key);
  if (arr.shape.size() != 2 && arr.shape.size() != 1)
    throw InputError(path.string(), key, "must be a 2-D array (n x d); it has " +
                                             std::to_string(arr.shape.size()) + " dimensions");
  const std::size_t n = arr.shape[0], d = arr.shape.size() == 2 ? arr.shape[1] : 1;
  if (n == 0 || d == 0) throw InputError(path.string(), key, "is empty");
  Points<double> x(n, d);
  std::memcpy(x.data(), arr.data.data(), n * d * sizeof(double));
  for (std::size_t i = 0; i < n * d; ++i)
    if (!std::isfinite(arr.data[i]))
      throw InputError(path.string(), key, "non-finite value at row " + std::to_string(i / d) +
                                               ", column " + std::to_string(i % d));
  return x;
}

Eigen::VectorXd read_vector(const std::filesystem::path& path, const std::string& key,
                            Eigen::Index expected_size) {
  const NpyArray arr = read_npy(path, key);
  const bool vector_shaped = arr.shape.size() == 1 ||
                             (arr.shape.size() == 2 && (arr.shape[0] == 1 || arr.shape[1] == 1));
  if (!vector_shaped)
    throw InputError(path.string(), key, "must be a 1-D array");
  if (expected_size >= 0 && static_cast<Eigen::Index>(arr.size()) != expected_size)
    throw InputError(path.string(), key, "has " + std::to_string(arr.size()) + " entries, expected " +
                                             std::to_string(expected_size));
  Eigen::VectorXd v(static_cast<Eigen::Index>(arr.size()));
  for (std::size_t i = 0; i < arr.size(); ++i) {
    if (!std::isfinite(arr.data[i]))
      throw InputError(path.string(), key, "non-finite value at entry " + std::to_string(i));
    v[static_cast<Eigen::Index>(i)] = arr.data[i];
  }
  return v;
}

}  // namespace tokenflow
