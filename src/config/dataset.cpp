// Coupling datasets: .npz pair files read with libzip and checked (tokenflow/dataset.hpp).
#include "tokenflow/dataset.hpp"

#include <fmt/format.h>
#include <zip.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>

#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/npy_header.hpp"
#include "tokenflow/packed_pairs.hpp"
#include "tokenflow/records.hpp"
#include "tokenflow/texts.hpp"

namespace tokenflow {

namespace {

const std::vector<std::string>& array_names() {
  static const std::vector<std::string> names{"x", "y", "target", "a", "b"};
  return names;
}

// The most deflate expands its input: 258 bytes of output for each 2-bit code, about 1032 times
// (zlib's technical notes); a stored member is its own size.
constexpr long double kMaxInflation = 1032;

// The .npy members of a .npz archive held in `bytes`, by array name ("x.npy" -> "x").
std::map<std::string, NpyArray> read_npz_arrays(const std::string& bytes, const std::string& file) {
  // libzip opens an empty buffer as an empty archive (one to write into): an empty file is no .npz.
  if (bytes.empty()) throw InputError(file, "", "not a .npz file (a zip archive of .npy arrays): the file is empty");
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  zip_t* archive = source ? zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error) : nullptr;
  if (archive == nullptr) {
    if (source) zip_source_free(source);
    const std::string why = zip_error_strerror(&error);
    zip_error_fini(&error);
    throw InputError(file, "", "not a .npz file (a zip archive of .npy arrays): " + why);
  }
  zip_error_fini(&error);
  const std::unique_ptr<zip_t, void (*)(zip_t*)> owner(archive, zip_discard);
  std::map<std::string, NpyArray> arrays;
  // Members are inflated one at a time; together they may not exceed the memory limit (a small
  // archive may claim gigabytes).
  long double claimed = 0.0L;
  const zip_int64_t count = zip_get_num_entries(archive, 0);
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t st;
    if (zip_stat_index(archive, static_cast<zip_uint64_t>(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE))
      throw InputError(file, "", fmt::format("corrupt .npz file (member {}): {}", i, zip_strerror(archive)));
    std::string name = st.name;
    if (name.size() < 5 || name.compare(name.size() - 4, 4, ".npy") != 0)
      throw InputError(file, name, "is not an .npy array (a .npz pair file holds x, y, target, a, b)");
    name.resize(name.size() - 4);
    if (std::find(array_names().begin(), array_names().end(), name) == array_names().end())
      throw InputError(file, name, "unknown array (a pair file holds x, y, target and optionally a, b)");
    if (arrays.count(name)) throw InputError(file, name, "appears twice in the archive");
    // A member's size is what its header claims: checked against the compressed bytes present (deflate
    // expands at most kMaxInflation times) and the memory limit before anything is inflated (a
    // 646-byte file claiming a 600 MiB member was allocated first and refused after).
    const long double stored = (st.valid & ZIP_STAT_COMP_SIZE) ? static_cast<long double>(st.comp_size) : -1;
    if (stored < 0 || static_cast<long double>(st.size) > kMaxInflation * stored + 1024)
      throw InputError(file, name,
                       fmt::format("its header claims {} from {} of compressed data, more than deflate can expand "
                                   "(at most {:g} times): a corrupt archive",
                                   format_bytes(static_cast<double>(st.size)),
                                   stored < 0 ? std::string("an unknown amount") : format_bytes(static_cast<double>(stored)),
                                   static_cast<double>(kMaxInflation)));
    zip_file_t* member = zip_fopen_index(archive, static_cast<zip_uint64_t>(i), 0);
    if (member == nullptr) throw InputError(file, name, std::string("cannot read the member: ") + zip_strerror(archive));
    const std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> member_owner(member, zip_fclose);
    const auto read_into = [&](char* to, std::size_t want) {
      const zip_int64_t got = zip_fread(member, to, want);
      if (got != static_cast<zip_int64_t>(want))
        throw InputError(file, name, std::string("cannot read the member: ") + (got < 0 ? zip_file_strerror(member) : "truncated"));
    };
    // The .npy header first (at most 1 MiB): the member must hold what it promises, so that a member
    // of another format or of a shape that does not match its size (600 MiB of zeros deflate to a
    // 600 KiB file) is refused before it is inflated.
    const auto size = static_cast<std::size_t>(st.size);
    std::string head(std::min<std::size_t>(12, size), '\0');
    read_into(head.data(), head.size());
    const std::size_t header_size = npy_header_size(head, file, name);
    if (header_size > size) throw InputError(file, name, "truncated .npy header");
    if (header_size > head.size()) {
      const std::size_t had = head.size();
      head.resize(header_size);
      read_into(head.data() + had, header_size - had);
    }
    const NpyHeader h = parse_npy_header(head, file, name);
    if (h.data_offset + h.count * h.item != size)
      throw InputError(file, name,
                       fmt::format("is corrupt: its .npy header promises {} bytes of data (shape {}), the member holds {}",
                                   h.count * h.item, fmt::join(h.shape, " x "), size - h.data_offset));
    // The arrays kept (float64) and this member's bytes while it is parsed.
    const long double kept = claimed + 8.0L * static_cast<long double>(h.count);
    check_memory(kept + static_cast<long double>(size),
                 fmt::format("the arrays of {} (its members as their headers claim)", file), file, name);
    claimed = kept;
    std::string data(size, '\0');
    std::copy(head.begin(), head.end(), data.begin());
    read_into(data.data() + head.size(), size - head.size());
    arrays.emplace(name, parse_npy(data, file, name));
  }
  return arrays;
}

Eigen::VectorXd as_vector(const NpyArray& v, Eigen::Index size, const std::string& file, const std::string& name,
                          const std::string& expected) {
  if (v.shape.size() != 1 || static_cast<Eigen::Index>(v.shape[0]) != size)
    throw InputError(file, name, fmt::format("has shape {}, expected ({},) ({})", fmt::join(v.shape, " x "), size,
                                             expected));
  return Eigen::Map<const Eigen::VectorXd>(v.data.data(), size);
}

void check_finite(const double* data, Eigen::Index size, const std::string& file, const std::string& name) {
  for (Eigen::Index k = 0; k < size; ++k)
    if (!std::isfinite(data[k]))
      throw InputError(file, name, fmt::format("entry {} is {} (every entry must be finite)", k, data[k]));
}

// A weight vector given with the pair: finite, positive, the target's marginal within kMarginalTol.
void check_weights(const Eigen::VectorXd& w, const Eigen::VectorXd& marginal, const std::string& file,
                   const std::string& name, const char* marginal_name) {
  check_finite(w.data(), w.size(), file, name);
  const double error = (w - marginal).lpNorm<1>();
  if (!(error <= kMarginalTol))
    throw InputError(file, name, fmt::format("differs from the target's {} by {:.3g} in l1 (allowed: {:g})",
                                             marginal_name, error, kMarginalTol));
}

// A measure's own weights (check_coupling_pair's own_weights): `size` finite entries of total 1.
void check_own_weights(const Eigen::VectorXd& w, Eigen::Index size, const std::string& file, const std::string& name) {
  if (w.size() != size) throw InputError(file, name, fmt::format("has {} entries, expected {}", w.size(), size));
  check_finite(w.data(), w.size(), file, name);
  if (!(std::abs(w.sum() - 1.0) <= kTargetMassTol))
    throw InputError(file, name, fmt::format("has total mass {:.17g}, expected 1 (within {:g})", w.sum(), kTargetMassTol));
}

void check_positive(const Eigen::VectorXd& w, const std::string& file, const std::string& name, const char* points) {
  for (Eigen::Index k = 0; k < w.size(); ++k)
    if (!(w[k] > 0.0))
      throw InputError(file, name, fmt::format("entry {} is {:g}: every token needs a positive mass (leave a token "
                                               "without mass out of {})", k, w[k], points));
}

std::vector<int> link_assignment(const RowMatrix& target) {
  std::vector<int> assignment(static_cast<std::size_t>(target.rows()), -1);
  bool any = false;
  for (Eigen::Index i = 0; i < target.rows(); ++i) {
    Eigen::Index positive = 0, column = -1;
    for (Eigen::Index j = 0; j < target.cols(); ++j)
      if (target(i, j) > 0.0) ++positive, column = j;
    if (positive == 1) assignment[static_cast<std::size_t>(i)] = static_cast<int>(column), any = true;
  }
  if (!any) assignment.clear();
  return assignment;
}

}  // namespace

void check_coupling_pair(CouplingPair& p, const std::string& file, int d, bool own_weights) {
  const Eigen::Index n = p.x.rows(), m = p.y.rows();
  if (n < 1 || p.x.cols() < 1) throw InputError(file, "x", "is empty (a measure needs at least one point)");
  if (m < 1) throw InputError(file, "y", "is empty (a measure needs at least one point)");
  if (d >= 0 && p.x.cols() != d)
    throw InputError(file, "x", fmt::format("has d = {}, the dataset's d is {}", p.x.cols(), d));
  if (p.y.cols() != p.x.cols())
    throw InputError(file, "y", fmt::format("has d = {}, x has d = {}", p.y.cols(), p.x.cols()));
  if (p.target.rows() != n || p.target.cols() != m)
    throw InputError(file, "target", fmt::format("has shape {} x {}, expected n x m = {} x {} (rows: x, columns: y)",
                                                 p.target.rows(), p.target.cols(), n, m));
  check_finite(p.x.data(), p.x.size(), file, "x");
  check_finite(p.y.data(), p.y.size(), file, "y");
  check_finite(p.target.data(), p.target.size(), file, "target");
  for (Eigen::Index k = 0; k < p.target.size(); ++k)
    if (p.target.data()[k] < 0.0)
      throw InputError(file, "target", fmt::format("entry ({}, {}) is {:g} (a coupling has no negative mass)", k / m,
                                                   k % m, p.target.data()[k]));
  const double mass = p.target.sum();
  if (!(std::abs(mass - 1.0) <= kTargetMassTol))
    throw InputError(file, "target", fmt::format("has total mass {:.17g}, expected 1 (within {:g}): a coupling of two "
                                                 "probability measures", mass, kTargetMassTol));
  const Eigen::VectorXd rows = p.target.rowwise().sum(), cols = p.target.colwise().sum().transpose();
  if (own_weights) {
    check_own_weights(p.a, n, file, "a");
    check_own_weights(p.b, m, file, "b");
  } else {
    if (p.a.size() == 0) p.a = rows;
    else if (p.a.size() != n)
      throw InputError(file, "a", fmt::format("has {} entries, expected n = {}", p.a.size(), n));
    else
      check_weights(p.a, rows, file, "a", "row sums");
    if (p.b.size() == 0) p.b = cols;
    else if (p.b.size() != m)
      throw InputError(file, "b", fmt::format("has {} entries, expected m = {}", p.b.size(), m));
    else
      check_weights(p.b, cols, file, "b", "column sums");
  }
  check_positive(p.a, file, "a", "x");
  check_positive(p.b, file, "b", "y");
  p.assignment = link_assignment(p.target);
}

double largest_coordinate(const CouplingPair& p) {
  return std::max(p.x.size() ? p.x.cwiseAbs().maxCoeff() : 0.0, p.y.size() ? p.y.cwiseAbs().maxCoeff() : 0.0);
}

double largest_coordinate(const std::vector<CouplingPair>& pairs) {
  double largest = 0.0;
  for (const CouplingPair& p : pairs) largest = std::max(largest, largest_coordinate(p));
  return largest;
}

CouplingPair read_coupling_pair(const std::filesystem::path& path, int d) {
  const std::string file = path.string();
  std::map<std::string, NpyArray> arrays = read_npz_arrays(read_input_file(path, "task.path"), file);
  for (const char* required : {"x", "y", "target"})
    if (!arrays.count(required)) throw InputError(file, required, "is missing (a pair file holds x, y and target)");
  auto matrix = [&](const std::string& name) {
    const NpyArray& v = arrays.at(name);
    if (v.shape.size() != 2)
      throw InputError(file, name, fmt::format("has {} dimensions, expected 2 (shape {})", v.shape.size(),
                                               name == "target" ? "n x m" : (name == "x" ? "n x d" : "m x d")));
    return RowMatrix(Eigen::Map<const RowMatrix>(v.data.data(), static_cast<Eigen::Index>(v.shape[0]),
                                                 static_cast<Eigen::Index>(v.shape[1])));
  };
  CouplingPair p;
  p.x = matrix("x");
  p.y = matrix("y");
  p.target = matrix("target");
  if (arrays.count("a")) p.a = as_vector(arrays.at("a"), p.x.rows(), file, "a", "n, the points of x");
  if (arrays.count("b")) p.b = as_vector(arrays.at("b"), p.y.rows(), file, "b", "m, the points of y");
  check_coupling_pair(p, file, d);
  return p;
}

DatasetFiles::DatasetFiles(std::filesystem::path folder, std::vector<std::string> names) : folder_(std::move(folder)) {
  std::sort(names.begin(), names.end());
  std::size_t total = 0;
  for (const std::string& name : names) total += name.size();
  names_.reserve(total);
  ends_.reserve(names.size());
  for (const std::string& name : names) {
    names_ += name;
    ends_.push_back(names_.size());
  }
}

std::filesystem::path DatasetFiles::operator[](std::size_t i) const {
  const std::size_t begin = i == 0 ? 0 : ends_.at(i - 1);
  return folder_ / names_.substr(begin, ends_.at(i) - begin);
}

DatasetFiles dataset_files(const std::filesystem::path& dir, const std::string& part, const std::string& key_source,
                           const std::string& key) {
  const std::filesystem::path folder = dir / part, single = dir / (part + ".npz");
  std::error_code ec;
  const bool is_folder = std::filesystem::is_directory(folder, ec);
  if (std::filesystem::exists(single, ec)) {
    if (is_folder)
      throw InputError(key_source, key, fmt::format("{} holds both {}/ and {}.npz: keep one form of the {} pairs",
                                                    dir.string(), part, part, part));
    return DatasetFiles(dir, {part + ".npz"});
  }
  if (!is_folder)
    throw InputError(key_source, key, fmt::format("{} is not a folder and {} does not exist (a dataset holds train/ "
                                                  "and test/ with one .npz per pair, or train.npz and test.npz)",
                                                  folder.string(), single.string()));
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec))
    if (entry.path().extension() == ".npz") names.push_back(entry.path().filename().string());
  if (ec) throw InputError(key_source, key, fmt::format("cannot list {}: {}", folder.string(), ec.message()));
  if (names.empty()) throw InputError(key_source, key, fmt::format("{} holds no .npz pair file", folder.string()));
  return DatasetFiles(folder, std::move(names));
}

PairFiles::PairFiles(DatasetFiles files, int d) : files_(std::move(files)), d_(d) {
  if (d_ < 0) d_ = static_cast<int>(read_coupling_pair(files_[0]).x.cols());
}

CouplingPair PairFiles::pair(std::size_t i) const { return read_coupling_pair(files_[i], d_); }

std::unique_ptr<CouplingSource> open_dataset_part(const std::filesystem::path& dir, const std::string& part, int d,
                                                  const std::string& key_source, const std::string& key) {
  DatasetFiles files = dataset_files(dir, part, key_source, key);
  if (files.folder() == dir) return std::make_unique<PackedPairs>(files[0], d, key);  // DIR/part.npz
  return std::make_unique<PairFiles>(std::move(files), d);
}

int dataset_dimension(const std::filesystem::path& dir, const std::string& key_source, const std::string& key) {
  return static_cast<int>(open_dataset_part(dir, "train", -1, key_source, key)->pair(0).x.cols());
}

std::size_t dataset_part_size(const std::filesystem::path& dir, const std::string& part, const std::string& key_source,
                              const std::string& key) {
  return open_dataset_part(dir, part, -1, key_source, key)->size();
}

namespace {

std::vector<CouplingPair> read_all(const CouplingSource& source) {
  std::vector<CouplingPair> pairs;
  pairs.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) pairs.push_back(source.pair(i));
  return pairs;
}

// The training part, every pair checked once (none kept), and the test pairs, with one d.
CouplingDataset open_coupling_dataset(const std::filesystem::path& dir, int d, const std::string& key_source,
                                      const std::string& key) {
  CouplingDataset data;
  data.train_source = open_dataset_part(dir, "train", d, key_source, key);
  // Every training pair read once (each is checked on the way; none is kept): a run finds a bad
  // pair before it writes anything.
  for (std::size_t i = 0; i < data.train_source->size(); ++i)
    data.largest_coordinate = std::max(data.largest_coordinate, largest_coordinate(data.train_source->pair(i)));
  d = static_cast<int>(data.train_source->pair(0).x.cols());
  data.test = read_all(*open_dataset_part(dir, "test", d, key_source, key));
  data.largest_coordinate = std::max(data.largest_coordinate, largest_coordinate(data.test));
  return data;
}

// FNV-1a 64 of a file's bytes, read a `chunk` at a time (the same value as over the whole).
std::uint64_t hash_input_file(const std::filesystem::path& path, const std::string& key, std::vector<char>& chunk) {
  (void)read_input_prefix(path, key, 0);  // a regular file, recorded as this run's input
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string(), key, "cannot open the file");
  std::uint64_t hash = fnv1a64(nullptr, 0);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    hash = fnv1a64(chunk.data(), static_cast<std::size_t>(in.gcount()), hash);
  }
  if (in.bad()) throw InputError(path.string(), key, "cannot read the file");
  return hash;
}

}  // namespace

CouplingDataset read_coupling_dataset(const std::filesystem::path& dir, int d, const std::string& key_source,
                                      const std::string& key) {
  CouplingDataset data;
  data.train = read_all(*open_dataset_part(dir, "train", d, key_source, key));
  d = static_cast<int>(data.train.front().x.cols());
  data.test = read_all(*open_dataset_part(dir, "test", d, key_source, key));
  return data;
}

CouplingDataset read_text_dataset(const TaskSpec& task) {
  const WordVectors vectors = read_word_vectors(task.vectors, "task.vectors");
  CouplingDataset data;
  for (const auto& [path, key, part] : {std::tuple{task.path, "task.path", &data.train},
                                        std::tuple{task.test_path, "task.test_path", &data.test}}) {
    TextPairs t = read_text_pairs(path, vectors, key);
    if (const std::string unknown = describe_unknown(t); !unknown.empty())
      data.notes.push_back(fmt::format("{}: {}", path, unknown));
    *part = std::move(t.pairs);
  }
  return data;
}

CouplingDataset training_data(const TrainConfig& config, const std::string& key_source) {
  if (config.task.kind == "dataset") {
    CouplingDataset data = open_coupling_dataset(config.task.path, config.task.d, key_source, "task.path");
    check_pairs_fit_dtype(config, data, key_source, "task.path");
    return data;
  }
  CouplingDataset data;
  if (config.task.kind == "texts") {
    data = read_text_dataset(config.task);
    data.largest_coordinate = std::max(largest_coordinate(data.train), largest_coordinate(data.test));
    check_pairs_fit_dtype(config, data, key_source, "task.vectors");
    data.train_source = std::make_unique<PairsInMemory>(std::move(data.train));
    data.train.clear();
    return data;
  }
  data.test = make_test_pairs(config);
  data.train_source = std::make_unique<PairsInMemory>();
  return data;
}

void check_pairs_fit_dtype(const TrainConfig& config, const CouplingDataset& data, const std::string& source,
                           const std::string& key) {
  const double largest =
      std::max({data.largest_coordinate, largest_coordinate(data.train), largest_coordinate(data.test)});
  if (!config.float32 || largest <= static_cast<double>(std::numeric_limits<float>::max())) return;
  throw InputError(source, key,
                   fmt::format("holds coordinates up to |x| = {:g}, beyond float32's range ({:g}), and dtype is \"f32\": "
                               "use dtype = \"f64\" (or rescale the data)",
                               largest, static_cast<double>(std::numeric_limits<float>::max())));
}

std::vector<DataFile> dataset_fingerprint(const TaskSpec& task) {
  std::vector<DataFile> out;
  std::vector<char> chunk(std::size_t{1} << 20);  // one buffer for every file
  auto add = [&](const std::filesystem::path& path, const char* key) {
    out.push_back({path.string(), key, hash_input_file(path, key, chunk)});
  };
  if (task.kind == "dataset")
    for (const char* part : {"train", "test"}) {
      const DatasetFiles files = dataset_files(task.path, part, "task.path", "task.path");
      out.reserve(out.size() + files.size());
      for (std::size_t i = 0; i < files.size(); ++i) add(files[i], "task.path");
    }
  if (task.kind == "texts") {
    add(task.path, "task.path");
    add(task.test_path, "task.test_path");
    add(task.vectors, "task.vectors");
  }
  return out;
}

void check_same_data(const std::vector<DataFile>& recorded, const std::vector<DataFile>& now,
                     const std::string& checkpoint) {
  if (recorded.empty() || recorded == now) return;
  const std::string advice = fmt::format("the run in {} trained on other data; restore it, or train into a new --out",
                                         checkpoint);
  for (const DataFile& r : recorded) {
    const auto same_path = std::find_if(now.begin(), now.end(), [&](const DataFile& n) { return n.path == r.path; });
    if (same_path == now.end()) throw InputError(r.path, r.key, "is gone since the checkpoint: " + advice);
    if (same_path->hash != r.hash) throw InputError(r.path, r.key, "changed since the checkpoint: " + advice);
  }
  for (const DataFile& n : now)
    if (std::none_of(recorded.begin(), recorded.end(), [&](const DataFile& r) { return r.path == n.path; }))
      throw InputError(n.path, n.key, "is new since the checkpoint: " + advice);
}

}  // namespace tokenflow
