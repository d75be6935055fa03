// tokenflow/io.hpp: .npy arrays and atomic output directories.
//
// .npy: numpy's format version 1.0/2.0/3.0, little-endian float32 ('<f4') or float64 ('<f8'),
// C order. Anything else (Fortran order, big-endian, integer dtypes, truncated data) is refused
// with an InputError that names the file.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenflow/measure.hpp"

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

// Helpers for the library's types.
template <class T>
void write_points(const std::filesystem::path& path, const Points<T>& x);
// Reads an n x d array (a 1-D array of length n is read as n x 1).
Points<double> read_points(const std::filesystem::path& path, const std::string& key);
// Reads a vector of length n (n x 1 and 1 x n are accepted too).
Eigen::VectorXd read_vector(const std::filesystem::path& path, const std::string& key,
                            Eigen::Index expected_size = -1);

// An output directory written atomically: files are staged in a hidden directory inside `dir`
// and moved into place by commit(); if commit() is never reached (an error, an exception) the
// staging directory is removed, and so is `dir` itself when this object created it and it is
// empty. Nothing half-written is ever visible under its final name.
class OutputDir {
 public:
  explicit OutputDir(std::filesystem::path dir);
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  // Path where to write `name` now; it appears as dir/name after commit().
  std::filesystem::path staged(const std::string& name) const;
  // Files written to dir directly and atomically (write to a temporary name, then rename): used
  // for checkpoints, which must survive a crash before commit().
  std::filesystem::path final_path(const std::string& name) const { return dir_ / name; }
  void commit();
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_, staging_;
  bool created_dir_ = false, committed_ = false;
};

// Writes `text` to `path` through a temporary file and a rename.
void write_text_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace tokenflow
