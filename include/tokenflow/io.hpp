// tokenflow/io.hpp: .npy arrays (and, through tokenflow/output_dir.hpp, output folders).
//
// .npy: numpy's format version 1.0/2.0/3.0, little-endian float32 ('<f4') or float64 ('<f8'),
// C order. Anything else (Fortran order, big-endian, integer dtypes, truncated data) is refused
// with an InputError that names the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenflow/measure.hpp"
#include "tokenflow/output_dir.hpp"

namespace tokenflow {

struct NpyArray {
  std::vector<std::size_t> shape;
  std::vector<double> data;  // C order, converted to double
  bool was_float32 = false;

  std::size_t size() const { return data.size(); }
};

// Reads a .npy file. `key` names the option that gave the path (for the error message).
NpyArray read_npy(const std::filesystem::path& path, const std::string& key = "");
// The same from bytes in memory (`file` names them in errors).
NpyArray parse_npy(const std::string& bytes, const std::string& file, const std::string& key = "");

// Writes data (C order, prod(shape) values) as '<f8' or, when as_float32, '<f4'.
void write_npy(const std::filesystem::path& path, const double* data,
               const std::vector<std::size_t>& shape, bool as_float32 = false);
void write_npy(const std::filesystem::path& path, const float* data,
               const std::vector<std::size_t>& shape);
// Indices, as '<i8' (the rows and columns of a sparse plan).
void write_npy(const std::filesystem::path& path, const std::int64_t* data,
               const std::vector<std::size_t>& shape);

// Helpers for the library's types.
template <class T>
void write_points(const std::filesystem::path& path, const Points<T>& x);
// Reads an n x d array (a 1-D array of length n is read as n x 1).
Points<double> read_points(const std::filesystem::path& path, const std::string& key);
// Reads a vector of length n (n x 1 and 1 x n are accepted too).
Eigen::VectorXd read_vector(const std::filesystem::path& path, const std::string& key,
                            Eigen::Index expected_size = -1);

}  // namespace tokenflow
