// The single-file form of a coupling dataset: one stored .npz read a pair at a time by seeking
// inside its members (tokenflow/packed_pairs.hpp).
#include "tokenflow/packed_pairs.hpp"

#include <fmt/format.h>
#include <zip.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "tokenflow/dataset.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/npy_header.hpp"

namespace tokenflow {

namespace {

const char* const kMembers[] = {"x", "y", "target", "a", "b", "x_offsets", "y_offsets"};

struct Member {
  zip_file_t* handle = nullptr;  // open for the archive's life; zip_fseek moves inside it
  NpyHeader header;
};

}  // namespace

struct PackedPairs::Archive {
  std::string file;
  zip_t* zip = nullptr;
  std::map<std::string, Member> members;
  std::vector<std::int64_t> x_offsets, y_offsets;
  std::vector<std::uint64_t> target_offsets;
  int d = -1;
  mutable std::mutex mutex;  // libzip's handles are not shared between threads

  ~Archive() {
    for (auto& [name, m] : members)
      if (m.handle) zip_fclose(m.handle);
    if (zip) zip_discard(zip);
  }

  // `count` bytes from byte `at` of member `name` (the offsets were checked against its size).
  std::string read_bytes(const std::string& name, std::uint64_t at, std::uint64_t count) const {
    const Member& m = members.at(name);
    std::string raw(count, '\0');
    if (zip_fseek(m.handle, static_cast<zip_int64_t>(at), SEEK_SET) != 0)
      throw InputError(file, name, std::string("cannot seek inside the member: ") + zip_file_strerror(m.handle));
    const zip_int64_t got = count ? zip_fread(m.handle, raw.data(), count) : 0;
    if (got != static_cast<zip_int64_t>(count))
      throw InputError(file, name, std::string("cannot read the member: ") +
                                       (got < 0 ? zip_file_strerror(m.handle) : "truncated"));
    return raw;
  }

  // Entries [first, first + count) of member `name` as double.
  std::vector<double> read_entries(const std::string& name, std::uint64_t first, std::uint64_t count) const {
    const NpyHeader& h = members.at(name).header;
    const std::string raw = read_bytes(name, h.data_offset + first * h.item, count * h.item);
    std::vector<double> out(count);
    if (h.item == 8) {
      std::memcpy(out.data(), raw.data(), raw.size());
    } else {
      std::vector<float> tmp(count);
      std::memcpy(tmp.data(), raw.data(), raw.size());
      for (std::uint64_t k = 0; k < count; ++k) out[k] = tmp[k];
    }
    return out;
  }

  void open_member(zip_int64_t index, std::uint64_t file_size);
  std::vector<std::int64_t> read_offsets(const std::string& name, std::size_t rows);
  void check_shapes(int dataset_d);
};

void PackedPairs::Archive::open_member(zip_int64_t index, std::uint64_t file_size) {
  zip_stat_t st;
  if (zip_stat_index(zip, static_cast<zip_uint64_t>(index), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
      !(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_COMP_METHOD))
    throw InputError(file, "", fmt::format("corrupt .npz file (member {}): {}", index, zip_strerror(zip)));
  std::string name = st.name;
  if (name.size() < 5 || name.compare(name.size() - 4, 4, ".npy") != 0)
    throw InputError(file, name, "is not an .npy array (a single-file dataset holds x, y, target, x_offsets, y_offsets, a, b)");
  name.resize(name.size() - 4);
  if (std::find(std::begin(kMembers), std::end(kMembers), name) == std::end(kMembers))
    throw InputError(file, name, "unknown array (a single-file dataset holds x, y, target, x_offsets, y_offsets and optionally a, b)");
  if (members.count(name)) throw InputError(file, name, "appears twice in the archive");
  if (st.comp_method != ZIP_CM_STORE)
    throw InputError(file, name, "is compressed (np.savez_compressed): a single-file dataset is read by seeking to "
                                 "each pair, which a compressed member does not allow; write it with np.savez");
  if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
    throw InputError(file, name, "is encrypted");
  if (st.size > file_size)
    throw InputError(file, name, fmt::format("claims {} bytes, more than the file holds", st.size));
  Member& m = members[name];
  m.handle = zip_fopen_index(zip, static_cast<zip_uint64_t>(index), 0);
  if (m.handle == nullptr) throw InputError(file, name, std::string("cannot read the member: ") + zip_strerror(zip));
  const std::string prefix = read_bytes(name, 0, std::min<std::uint64_t>(st.size, 12));
  const std::size_t header_size = npy_header_size(prefix, file, name);
  if (header_size > st.size) throw InputError(file, name, "truncated .npy header");
  const bool offsets = name == "x_offsets" || name == "y_offsets";
  m.header = parse_npy_header(read_bytes(name, 0, header_size), file, name, offsets);
  if (offsets != (m.header.descr == "<i8"))
    throw InputError(file, name, fmt::format("has dtype {}; {}", m.header.descr,
                                             offsets ? "offsets are int64 ('<i8')" : "the points, target and weights are float32 or float64"));
  // The data must be exactly what the header promises: every slice the offsets allow is inside.
  if (st.size - header_size != m.header.count * m.header.item)
    throw InputError(file, name, fmt::format("is corrupt: the header promises {} bytes of data, the member holds {}",
                                             m.header.count * m.header.item, st.size - header_size));
}

// A checked offsets array of `rows` rows: 1-D, x_offsets' length, starting at 0, strictly increasing, ending at rows.
std::vector<std::int64_t> PackedPairs::Archive::read_offsets(const std::string& name, std::size_t rows) {
  const NpyHeader& h = members.at(name).header;
  const char* points = name == "x_offsets" ? "x" : "y";
  if (h.shape.size() != 1 || h.shape[0] < 2)
    throw InputError(file, name, fmt::format("has shape ({}), expected (pairs + 1,) with at least one pair", fmt::join(h.shape, ", ")));
  const std::string raw = read_bytes(name, h.data_offset, h.count * 8);
  std::vector<std::int64_t> v(h.count);
  std::memcpy(v.data(), raw.data(), raw.size());
  if (v[0] != 0) throw InputError(file, name, fmt::format("starts at {}, expected 0", v[0]));
  for (std::size_t i = 0; i + 1 < v.size(); ++i)
    if (!(v[i + 1] > v[i]))
      throw InputError(file, name, fmt::format("entry {} ({}) is not above entry {} ({}): pair {} needs at least one "
                                               "point of {}", i + 1, v[i + 1], i, v[i], i, points));
  if (static_cast<std::uint64_t>(v.back()) != rows)
    throw InputError(file, name, fmt::format("ends at {}, {} has {} rows", v.back(), points, rows));
  return v;
}

void PackedPairs::Archive::check_shapes(int dataset_d) {
  for (const char* required : {"x", "y", "target", "x_offsets", "y_offsets"})
    if (!members.count(required))
      throw InputError(file, required, "is missing (a single-file dataset holds x, y, target, x_offsets, y_offsets)");
  const NpyHeader &x = members.at("x").header, &y = members.at("y").header, &t = members.at("target").header;
  if (x.shape.size() != 2 || x.shape[1] == 0)
    throw InputError(file, "x", fmt::format("has shape ({}), expected (sum n, d)", fmt::join(x.shape, ", ")));
  d = static_cast<int>(x.shape[1]);
  if (dataset_d >= 0 && d != dataset_d)
    throw InputError(file, "x", fmt::format("has d = {}, the dataset's d is {}", d, dataset_d));
  if (y.shape.size() != 2 || y.shape[1] != x.shape[1])
    throw InputError(file, "y", fmt::format("has shape ({}), expected (sum m, {})", fmt::join(y.shape, ", "), d));
  if (t.shape.size() != 1)
    throw InputError(file, "target", fmt::format("has shape ({}), expected (sum n m,): the pairs' couplings "
                                                 "flattened one after the other", fmt::join(t.shape, ", ")));
  for (const auto& [name, rows] : {std::pair{"a", x.shape[0]}, std::pair{"b", y.shape[0]}})
    if (members.count(name) && members.at(name).header.shape != std::vector<std::size_t>{rows})
      throw InputError(file, name, fmt::format("has shape ({}), expected ({},), a weight for each row of {}",
                                               fmt::join(members.at(name).header.shape, ", "), rows, name[0] == 'a' ? "x" : "y"));
  x_offsets = read_offsets("x_offsets", x.shape[0]);
  if (members.at("x_offsets").header.shape != members.at("y_offsets").header.shape)
    throw InputError(file, "y_offsets", fmt::format("has {} entries, x_offsets has {} (both are pairs + 1)",
                                                    members.at("y_offsets").header.count, members.at("x_offsets").header.count));
  y_offsets = read_offsets("y_offsets", y.shape[0]);
  // Pair i's target starts at sum_{k < i} n_k m_k; each step is checked against what is left, so
  // nothing overflows (n_k and m_k are at most 2^40 each).
  target_offsets.assign(x_offsets.size(), 0);
  for (std::size_t i = 0; i + 1 < x_offsets.size(); ++i) {
    const auto n = static_cast<std::uint64_t>(x_offsets[i + 1] - x_offsets[i]);
    const auto m = static_cast<std::uint64_t>(y_offsets[i + 1] - y_offsets[i]);
    if (n > (t.count - target_offsets[i]) / m)
      throw InputError(file, "target", fmt::format("has {} entries, fewer than the {} x {} coupling of pair {} needs "
                                                   "after the {} of the pairs before it", t.count, n, m, i, target_offsets[i]));
    target_offsets[i + 1] = target_offsets[i] + n * m;
  }
  if (target_offsets.back() != t.count)
    throw InputError(file, "target", fmt::format("has {} entries, the pairs' couplings take sum n m = {}", t.count,
                                                 target_offsets.back()));
}

PackedPairs::PackedPairs(const std::filesystem::path& path, int d, const std::string& key)
    : archive_(std::make_unique<Archive>()) {
  Archive& a = *archive_;
  a.file = path.string();
  // A regular file, recorded as this run's input (never an output's target), before libzip opens it.
  if (read_input_prefix(path, key, 4).empty()) throw InputError(a.file, "", "not a .npz file (a zip archive of .npy arrays): the file is empty");
  std::error_code ec;
  const std::uint64_t file_size = std::filesystem::file_size(path, ec);
  int error = 0;
  a.zip = zip_open(a.file.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (a.zip == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, error);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    throw InputError(a.file, "", "not a .npz file (a zip archive of .npy arrays): " + why);
  }
  const zip_int64_t count = zip_get_num_entries(a.zip, 0);
  for (zip_int64_t i = 0; i < count; ++i) a.open_member(i, file_size);
  a.check_shapes(d);
}

PackedPairs::~PackedPairs() = default;

std::size_t PackedPairs::size() const { return archive_->x_offsets.size() - 1; }

int PackedPairs::dimension() const { return archive_->d; }

CouplingPair PackedPairs::pair(std::size_t i) const {
  const Archive& a = *archive_;
  if (i >= size()) throw std::out_of_range("PackedPairs::pair: index beyond the pairs");
  const auto x0 = static_cast<std::uint64_t>(a.x_offsets[i]), n = static_cast<std::uint64_t>(a.x_offsets[i + 1]) - x0;
  const auto y0 = static_cast<std::uint64_t>(a.y_offsets[i]), m = static_cast<std::uint64_t>(a.y_offsets[i + 1]) - y0;
  const auto d = static_cast<std::uint64_t>(a.d);
  const std::lock_guard<std::mutex> lock(a.mutex);
  CouplingPair p;
  const auto rows = [](const std::vector<double>& v, std::uint64_t r, std::uint64_t c) {
    return RowMatrix(Eigen::Map<const RowMatrix>(v.data(), static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)));
  };
  p.x = rows(a.read_entries("x", x0 * d, n * d), n, d);
  p.y = rows(a.read_entries("y", y0 * d, m * d), m, d);
  p.target = rows(a.read_entries("target", a.target_offsets[i], n * m), n, m);
  const auto vector = [](const std::vector<double>& v) { return Eigen::VectorXd(Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size()))); };
  if (a.members.count("a")) p.a = vector(a.read_entries("a", x0, n));
  if (a.members.count("b")) p.b = vector(a.read_entries("b", y0, m));
  check_coupling_pair(p, fmt::format("{} (pair {})", a.file, i), a.d);
  return p;
}

}  // namespace tokenflow
