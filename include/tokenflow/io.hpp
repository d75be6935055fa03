// tokenflow/io.hpp: .npy arrays and atomic output directories.
//
// .npy: numpy's format version 1.0/2.0/3.0, little-endian float32 ('<f4') or float64 ('<f8'),
// C order. Anything else (Fortran order, big-endian, integer dtypes, truncated data) is refused
// with an InputError that names the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
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

// An output directory that never destroys what tokenflow did not write.
//
// Files are staged in DIR/.staging-PID and moved into place by commit(). DIR/.tokenflow-outputs
// (the manifest) lists what the last run wrote; a run writes only names that are free or listed
// there, replaces the listed names as a whole (its predecessor's outputs that it does not write
// are removed with them, so no run's outputs stand beside another's) and leaves everything else in
// DIR alone. A name in DIR that tokenflow did not write is refused with an InputError (exit 2):
// summary.json up front, any other name at commit (then the results are kept in
// DIR/tokenflow-results-PID). commit() is all or nothing: every staged file is fsynced first; on
// any failure DIR is rolled back to what it held before. If commit() is never reached the staging
// folder is removed, and so is DIR itself when this object created it and it is empty.
class OutputDir {
 public:
  explicit OutputDir(std::filesystem::path dir);
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  // Path where to write `name` now; it appears as dir/name after commit().
  std::filesystem::path staged(const std::string& name) const;
  // A file written into dir directly (replace_file_atomically): checkpoints, which must survive a
  // crash before commit(). The name is checked like a staged one and listed in the manifest
  // before the path is returned.
  std::filesystem::path final_path(const std::string& name);
  void commit();
  const std::filesystem::path& dir() const { return dir_; }

 private:
  void recover_debris();
  std::set<std::string> read_manifest() const;
  void write_manifest(const std::set<std::string>& names) const;
  void refuse_foreign(const std::string& name) const;

  std::filesystem::path dir_, staging_;
  std::set<std::string> previous_;  // names the manifest lists: the last run's outputs
  std::set<std::string> claimed_;   // names this run writes into dir directly
  bool created_dir_ = false, committed_ = false;
};

}  // namespace tokenflow
