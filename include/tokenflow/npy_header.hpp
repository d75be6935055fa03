// tokenflow/npy_header.hpp: the header of a .npy array, parsed without its data, for readers that
// take slices of an array (the single-file dataset form, tokenflow/dataset.hpp) and for parse_npy.
//
// Layout (numpy format 1.0, 2.0, 3.0): the magic "\x93NUMPY", the version (major, minor), the dict's
// length (2 bytes in 1.0, 4 in 2.0/3.0, little-endian), the dict {'descr', 'fortran_order',
// 'shape'}, then prod(shape) entries in C order. The same checks as parse_npy (tokenflow/io.hpp):
// each InputError names `file` and `key`.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tokenflow {

struct NpyHeader {
  std::vector<std::size_t> shape;
  std::string descr;            // "<f8", "<f4" or (when allowed) "<i8"; numpy's "=" is written "<"
  std::size_t item = 0;         // bytes per entry: 8 or 4
  std::size_t count = 0;        // entries: prod(shape), at most 2^40
  std::size_t data_offset = 0;  // bytes from the start of the .npy to its first entry
};

// The bytes the header takes (data_offset), from the first 12 bytes of a .npy (`prefix`, at least
// 10; 12 for versions 2 and 3): a reader of a stream reads this much before parse_npy_header.
// InputError for a bad magic, an unknown version or a header longer than 1 MiB.
std::size_t npy_header_size(const std::string& prefix, const std::string& file, const std::string& key);

// Parses the header at the start of `bytes` (what follows it is not read). dtypes: little-endian
// float64 and float32, and int64 when `allow_int64`; C order only.
NpyHeader parse_npy_header(const std::string& bytes, const std::string& file, const std::string& key,
                           bool allow_int64 = false);

}  // namespace tokenflow
