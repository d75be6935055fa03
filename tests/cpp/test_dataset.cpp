// Coupling datasets (tokenflow/dataset.hpp): .npz pair files read back exactly, every defect of a
// hostile file refused with the file and the array named, and `tokenflow train` on a dataset (exit
// 2 with nothing written for a bad file, resume bit for bit).
#include <gtest/gtest.h>
#include <zip.h>

#include <fmt/format.h>

#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "test_util.hpp"
#include "tokenflow/dataset.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/model.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

struct Array {
  Array() = default;
  Array(std::vector<double> values, std::vector<std::size_t> dims) : data(std::move(values)), shape(std::move(dims)) {}
  Array(std::vector<double> values, std::vector<std::size_t> dims, std::vector<std::int64_t> int64)
      : data(std::move(values)), shape(std::move(dims)), ints(std::move(int64)) {}
  std::vector<double> data;
  std::vector<std::size_t> shape;
  std::vector<std::int64_t> ints;  // an int64 array (offsets) when not empty; then data is unused
};
using Arrays = std::map<std::string, Array>;

// An .npz: one NAME.npy member per array (written by write_npy, zipped by libzip with
// `compression`: ZIP_CM_STORE is np.savez, deflate np.savez_compressed).
void write_npz(const fs::path& file, const Arrays& arrays, zip_int32_t compression = ZIP_CM_DEFAULT) {
  const fs::path scratch = file.parent_path() / (file.filename().string() + ".members");
  fs::create_directories(scratch);
  int error = 0;
  zip_t* archive = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  ASSERT_NE(archive, nullptr) << "zip_open error " << error;
  for (const auto& [name, array] : arrays) {
    const fs::path member = scratch / (name + ".npy");
    if (array.ints.empty())
      write_npy(member, array.data.data(), array.shape);
    else
      write_npy(member, array.ints.data(), array.shape);
    zip_source_t* source = zip_source_file(archive, member.c_str(), 0, -1);
    ASSERT_NE(source, nullptr);
    const zip_int64_t index = zip_file_add(archive, (name + ".npy").c_str(), source, ZIP_FL_OVERWRITE);
    ASSERT_GE(index, 0);
    ASSERT_EQ(zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), compression, 0), 0);
  }
  ASSERT_EQ(zip_close(archive), 0);
  fs::remove_all(scratch);
}

Array matrix_array(const RowMatrix& m) {
  return {std::vector<double>(m.data(), m.data() + m.size()),
          {static_cast<std::size_t>(m.rows()), static_cast<std::size_t>(m.cols())}};
}

// A random pair of sizes n x m in dimension d: points N(0, 1), a target that is a random
// permutation coupling when `permutation` (n = m), else a dense random coupling normalized to mass 1.
Arrays random_pair(std::mt19937_64& rng, int n, int m, int d, bool permutation) {
  RowMatrix x = testing::random_matrix(rng, n, d, 1.0), y = testing::random_matrix(rng, m, d, 1.0);
  RowMatrix target = RowMatrix::Zero(n, m);
  if (permutation) {
    std::vector<int> sigma(static_cast<std::size_t>(n));
    std::iota(sigma.begin(), sigma.end(), 0);
    std::shuffle(sigma.begin(), sigma.end(), rng);
    for (int i = 0; i < n; ++i) target(i, sigma[static_cast<std::size_t>(i)]) = 1.0 / n;
  } else {
    std::uniform_real_distribution<double> u(0.1, 1.0);
    for (Eigen::Index k = 0; k < target.size(); ++k) target.data()[k] = u(rng);
    target /= target.sum();
  }
  return {{"x", matrix_array(x)}, {"y", matrix_array(y)}, {"target", matrix_array(target)}};
}

RowMatrix as_matrix(const Array& a) {
  return Eigen::Map<const RowMatrix>(a.data.data(), static_cast<Eigen::Index>(a.shape[0]),
                                     static_cast<Eigen::Index>(a.shape[1]));
}

TEST(Dataset, ReadsPairsExactlyWithMarginalsAndLinks) {
  const std::uint64_t seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  const fs::path dir = testing::temp_dir("dataset-read");
  const int d = std::uniform_int_distribution<int>(1, 3)(rng);
  std::uniform_int_distribution<int> size(1, 9);
  std::vector<Arrays> written;
  for (int k = 0; k < 6; ++k) {
    const bool permutation = k % 2 == 0;
    const int n = size(rng), m = permutation ? n : size(rng);
    written.push_back(random_pair(rng, n, m, d, permutation));
    write_npz(dir / (k < 4 ? "train" : "test") / fmt::format("pair{}.npz", k), written.back());
  }
  std::ofstream(dir / "train" / "README") << "not a pair file: ignored\n";
  const CouplingDataset data = read_coupling_dataset(dir, -1, "test", "task.path");
  ASSERT_EQ(data.train.size(), 4u);
  ASSERT_EQ(data.test.size(), 2u);
  for (int k = 0; k < 6; ++k) {
    const CouplingPair& p = k < 4 ? data.train[static_cast<std::size_t>(k)] : data.test[static_cast<std::size_t>(k - 4)];
    const Arrays& w = written[static_cast<std::size_t>(k)];
    SCOPED_TRACE(fmt::format("seed {} pair {}", seed, k));
    // The arrays are float64 in the file: read back bit for bit.
    EXPECT_EQ(RowMatrix(p.x), as_matrix(w.at("x")));
    EXPECT_EQ(RowMatrix(p.y), as_matrix(w.at("y")));
    EXPECT_EQ(p.target, as_matrix(w.at("target")));
    // a and b default to the target's marginals, summed in the same order: equal exactly.
    EXPECT_EQ(p.a, Eigen::VectorXd(p.target.rowwise().sum()));
    EXPECT_EQ(p.b, Eigen::VectorXd(p.target.colwise().sum().transpose()));
    if (k % 2 == 0) {  // a permutation: every row is a link to its one positive column
      ASSERT_EQ(p.assignment.size(), static_cast<std::size_t>(p.x.rows()));
      for (Eigen::Index i = 0; i < p.x.rows(); ++i) EXPECT_GT(p.target(i, p.assignment[static_cast<std::size_t>(i)]), 0.0);
      EXPECT_EQ(assignment_accuracy(p.target, p.assignment), 1.0);
    } else if (p.y.rows() > 1) {  // every entry positive: no row is a link
      EXPECT_TRUE(p.assignment.empty());
    }
  }
}

TEST(Dataset, AccuracyCountsTheLinkRowsOnly) {
  // A partial coupling: rows 0 and 2 are links (to columns 1 and 0); row 1 spreads its mass.
  RowMatrix target(3, 2);
  target << 0.0, 1.0 / 3, 1.0 / 6, 1.0 / 6, 1.0 / 3, 0.0;
  CouplingPair p;
  p.x = RowMatrix::Zero(3, 1);
  p.y = RowMatrix::Zero(2, 1);
  p.target = target;
  check_coupling_pair(p, "memory");
  EXPECT_EQ(p.assignment, (std::vector<int>{1, -1, 0}));
  RowMatrix plan(3, 2);
  plan << 0.1, 0.2, 0.3, 0.0, 0.2, 0.2;  // row 0 right, row 2 a tie (maxCoeff takes the first: right)
  EXPECT_EQ(assignment_accuracy(plan, p.assignment), 1.0);
  plan(0, 0) = 0.5;  // row 0 wrong now; row 1 never counts
  EXPECT_EQ(assignment_accuracy(plan, p.assignment), 0.5);
}

// Each defect of a pair file: InputError naming the file and the array.
TEST(Dataset, RefusesEveryDefectNamingTheFileAndTheArray) {
  const std::uint64_t seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  const fs::path dir = testing::temp_dir("dataset-hostile");
  const Arrays good = random_pair(rng, 4, 5, 2, false);
  struct Case {
    std::string name, array, says;
    std::function<void(Arrays&)> spoil;
  };
  const double nan = std::nan("");
  const std::vector<Case> cases{
      {"missing target", "target", "missing", [](Arrays& a) { a.erase("target"); }},
      {"unknown array", "targets", "unknown array", [](Arrays& a) { a["targets"] = a.at("target"); }},
      {"x not 2-D", "x", "2", [](Arrays& a) { a["x"].shape = {8}; }},
      {"y of another d", "y", "d = 1", [](Arrays& a) { a["y"] = Array{std::vector<double>(5, 0.5), {5, 1}}; }},
      {"target not n x m", "target", "4 x 5", [](Arrays& a) { a["target"].shape = {5, 4}; }},
      {"NaN in x", "x", "finite", [&](Arrays& a) { a["x"].data[3] = nan; }},
      {"infinite y", "y", "finite", [](Arrays& a) { a["y"].data[0] = INFINITY; }},
      {"negative target", "target", "negative", [](Arrays& a) { a["target"].data[6] = -a["target"].data[6]; }},
      {"target mass 2", "target", "total mass", [](Arrays& a) { for (double& v : a["target"].data) v *= 2; }},
      {"a off by 1e-8", "a", "row sums",
       [](Arrays& a) {
         std::vector<double> rows(4, 0.0);
         for (int k = 0; k < 20; ++k) rows[static_cast<std::size_t>(k / 5)] += a["target"].data[static_cast<std::size_t>(k)];
         rows[0] += 1e-8;
         a["a"] = Array{rows, {4}};
       }},
      {"b of the wrong size", "b", "expected (5,)", [](Arrays& a) { a["b"] = Array{std::vector<double>(4, 0.25), {4}}; }},
      {"b not a vector", "b", "shape", [](Arrays& a) { a["b"] = Array{std::vector<double>(5, 0.2), {5, 1}}; }},
      {"a token without mass", "a", "positive mass",
       [](Arrays& a) {
         RowMatrix t = as_matrix(a["target"]);
         t.row(3).setZero();
         t /= t.sum();
         a["target"] = matrix_array(t);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + fmt::format(" (seed {})", seed));
    Arrays arrays = good;
    c.spoil(arrays);
    const fs::path file = dir / (std::to_string(&c - cases.data()) + ".npz");
    write_npz(file, arrays);
    try {
      read_coupling_pair(file);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.source(), file.string()) << e.what();
      EXPECT_EQ(e.key(), c.array) << e.what();
      EXPECT_NE(e.detail().find(c.says), std::string::npos) << e.what();
    }
  }
  // Not a zip archive at all, and an empty file.
  for (const std::string& bytes : {std::string("\x93NUMPY not a zip"), std::string()}) {
    std::ofstream(dir / "junk.npz", std::ios::binary) << bytes;
    try {
      read_coupling_pair(dir / "junk.npz");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.source(), (dir / "junk.npz").string());
      EXPECT_NE(e.detail().find("not a .npz file"), std::string::npos) << e.what();
    }
  }
}

TEST(Dataset, RefusesMixedDimensionsAndMissingFolders) {
  std::mt19937_64 rng(testing::fresh_seed());
  const fs::path dir = testing::temp_dir("dataset-mixed");
  try {
    read_coupling_dataset(dir, -1, "run.toml", "task.path");
    ADD_FAILURE() << "accepted a folder without train/";
  } catch (const InputError& e) {
    EXPECT_EQ(e.source(), "run.toml");
    EXPECT_EQ(e.key(), "task.path");
    EXPECT_NE(e.detail().find("train"), std::string::npos) << e.what();
  }
  write_npz(dir / "train" / "a.npz", random_pair(rng, 3, 3, 2, true));
  write_npz(dir / "train" / "b.npz", random_pair(rng, 3, 4, 3, false));
  write_npz(dir / "test" / "c.npz", random_pair(rng, 3, 3, 2, true));
  try {
    read_coupling_dataset(dir, -1, "run.toml", "task.path");
    ADD_FAILURE() << "accepted mixed d";
  } catch (const InputError& e) {
    EXPECT_EQ(e.source(), (dir / "train" / "b.npz").string());
    EXPECT_EQ(e.key(), "x");
    EXPECT_NE(e.detail().find("d = 3, the dataset's d is 2"), std::string::npos) << e.what();
  }
}

// The folder form's file list: sorted by name whatever order the folder lists them in, each file
// the folder joined with its name (names of every length, one after another in one buffer), only
// .npz files; the single-file form is the one file.
TEST(Dataset, FileListIsTheSortedNpzFilesOfTheFolder) {
  std::mt19937_64 rng(testing::fresh_seed());
  const fs::path dir = testing::temp_dir("dataset-files");
  fs::create_directories(dir / "train");
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) {
    const int length = std::uniform_int_distribution<int>(1, 40)(rng);
    std::string stem;
    for (int c = 0; c < length; ++c) stem += static_cast<char>('a' + std::uniform_int_distribution<int>(0, 25)(rng));
    names.push_back(stem + "_" + std::to_string(i) + ".npz");
    std::ofstream(dir / "train" / names.back()).put('x');
  }
  std::ofstream(dir / "train" / "notes.txt").put('x');
  std::sort(names.begin(), names.end());
  const DatasetFiles files = dataset_files(dir, "train", "run.toml", "task.path");
  ASSERT_EQ(files.size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(files[i], dir / "train" / names[i]) << i;
  std::ofstream(dir / "test.npz").put('x');
  const DatasetFiles single = dataset_files(dir, "test", "run.toml", "task.path");
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0], dir / "test.npz");
}

// `tokenflow train` on a dataset: trains (test W1 below the untrained model's), resumes bit for bit,
// and a bad file is exit 2 with one line naming it, before anything is written.
TEST(CliTrain, DatasetTrainsResumesAndRefusesBadFiles) {
  std::mt19937_64 rng(testing::fresh_seed());
  const fs::path dir = testing::temp_dir("cli-dataset");
  std::uniform_int_distribution<int> size(3, 6);
  for (int k = 0; k < 12; ++k) {
    const int n = size(rng);
    write_npz(dir / "data" / (k < 8 ? "train" : "test") / fmt::format("{:02d}.npz", k), random_pair(rng, n, n, 2, true));
  }
  const std::string common = "train --set task.kind=dataset --set task.path=" + (dir / "data").string() +
                             " --set model.width=8 --set model.layers=1 --set model.heads=2 --set model.k=4"
                             " --set model.sinkhorn_iters=8 --set train.batch=4 --set train.lr=1e-2"
                             " --set train.checkpoint_every=3"
                             " --set train.schedule=\\\"constant\\\"";  // steps grows on resume: kept out of the hash
  auto r = run_cli(common + " --set train.steps=6 --out " + (dir / "straight").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = testing::read_summary(dir / "straight");
  EXPECT_EQ(s["task"], "dataset");
  EXPECT_EQ(s["test_pairs"], 4);
  EXPECT_TRUE(s.contains("test_accuracy"));  // permutation targets
  r = run_cli(common + " --set train.steps=3 --out " + (dir / "resumed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  r = run_cli("train --resume --set train.steps=6 --out " + (dir / "resumed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(load_model(dir / "resumed" / "model.bin").params, load_model(dir / "straight" / "model.bin").params);
  EXPECT_EQ(testing::read_summary(dir / "resumed")["test_w1"], s["test_w1"]);
  // The checkpoint records the files' hashes: a changed training file stops the resume (exit 2).
  write_npz(dir / "data" / "train" / "00.npz", random_pair(rng, 3, 3, 2, true));
  r = run_cli("train --resume --set train.steps=9 --out " + (dir / "resumed").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((dir / "data" / "train" / "00.npz").string() + ": task.path: changed since the checkpoint"),
            std::string::npos)
      << r.stderr_text;

  // A NaN in one test file: exit 2, one line naming the file and the array, no output folder.
  Arrays bad = random_pair(rng, 3, 3, 2, true);
  bad["y"].data[1] = std::nan("");
  write_npz(dir / "data" / "test" / "99.npz", bad);
  r = run_cli(common + " --set train.steps=1 --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((dir / "data" / "test" / "99.npz").string() + ": y: "), std::string::npos)
      << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_FALSE(fs::exists(dir / "bad" / "summary.json"));
  // A given task.d or train.test_pairs must agree with the files.
  fs::remove(dir / "data" / "test" / "99.npz");
  r = run_cli(common + " --set task.d=3 --set train.steps=1 --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("task.d: is 3, the dataset's points have d = 2"), std::string::npos) << r.stderr_text;
  r = run_cli("train --set task.kind=dataset --set train.steps=1 --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("task.path: is required"), std::string::npos) << r.stderr_text;
  r = run_cli("train --set task.path=" + (dir / "data").string() + " --set train.steps=1 --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("task.path: is read only for kind = \"dataset\""), std::string::npos) << r.stderr_text;
}

// ---- the single-file form and training read from disk
// -----------------------------------------------------------------------

// The single-file form of `pairs` (tokenflow/packed_pairs.hpp): x, y, target concatenated, a and b
// when every pair has them, x_offsets and y_offsets.
Arrays pack_pairs(const std::vector<Arrays>& pairs) {
  Arrays out{{"x", {}}, {"y", {}}, {"target", {}}, {"x_offsets", {{}, {pairs.size() + 1}, {0}}},
             {"y_offsets", {{}, {pairs.size() + 1}, {0}}}};
  const bool weights = std::all_of(pairs.begin(), pairs.end(), [](const Arrays& p) { return p.count("a") > 0; });
  if (weights) out["a"] = {}, out["b"] = {};
  std::size_t n_total = 0, m_total = 0, d = 0;
  for (const Arrays& p : pairs) {
    d = p.at("x").shape[1];
    for (const char* name : {"x", "y", "target", "a", "b"})
      if (out.count(name)) out[name].data.insert(out[name].data.end(), p.at(name).data.begin(), p.at(name).data.end());
    n_total += p.at("x").shape[0];
    m_total += p.at("y").shape[0];
    out["x_offsets"].ints.push_back(static_cast<std::int64_t>(n_total));
    out["y_offsets"].ints.push_back(static_cast<std::int64_t>(m_total));
  }
  out["x"].shape = {n_total, d};
  out["y"].shape = {m_total, d};
  out["target"].shape = {out["target"].data.size()};
  if (weights) out["a"].shape = {n_total}, out["b"].shape = {m_total};
  return out;
}

// `count` random pairs of sizes 2..7 (odd ones permutations, even ones dense with n != m), each with
// its a and b when `weights`.
std::vector<Arrays> random_pairs(std::mt19937_64& rng, int count, int d, bool weights) {
  std::uniform_int_distribution<int> size(2, 7);
  std::vector<Arrays> pairs;
  for (int k = 0; k < count; ++k) {
    const int n = size(rng);
    pairs.push_back(random_pair(rng, n, k % 2 ? n : size(rng), d, k % 2 == 1));
    if (weights) {
      const RowMatrix t = as_matrix(pairs.back()["target"]);
      const Eigen::VectorXd a = t.rowwise().sum(), b = t.colwise().sum().transpose();
      pairs.back()["a"] = {std::vector<double>(a.data(), a.data() + a.size()), {static_cast<std::size_t>(a.size())}};
      pairs.back()["b"] = {std::vector<double>(b.data(), b.data() + b.size()), {static_cast<std::size_t>(b.size())}};
    }
  }
  return pairs;
}

// The same pairs in both forms: DIR/folders/{train,test}/NN.npz and DIR/single/{train,test}.npz.
void write_both_forms(const fs::path& dir, const std::vector<Arrays>& train, const std::vector<Arrays>& test) {
  for (const auto& [part, pairs] : {std::pair{"train", &train}, std::pair{"test", &test}}) {
    for (std::size_t k = 0; k < pairs->size(); ++k)
      write_npz(dir / "folders" / part / fmt::format("{:03d}.npz", k), (*pairs)[k]);
    write_npz(dir / "single" / (std::string(part) + ".npz"), pack_pairs(*pairs), ZIP_CM_STORE);
  }
}

void expect_same_pairs(const std::vector<CouplingPair>& got, const std::vector<CouplingPair>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].x, want[k].x) << k;  // bit for bit: the same bytes read from other offsets
    EXPECT_EQ(got[k].y, want[k].y) << k;
    EXPECT_EQ(got[k].target, want[k].target) << k;
    EXPECT_EQ(got[k].a, want[k].a) << k;
    EXPECT_EQ(got[k].b, want[k].b) << k;
    EXPECT_EQ(got[k].assignment, want[k].assignment) << k;
  }
}

TEST(Dataset, SingleFileHoldsThePairsOfTheFolderForm) {
  std::mt19937_64 rng(testing::fresh_seed());
  const fs::path dir = testing::temp_dir("dataset-single");
  write_both_forms(dir, random_pairs(rng, 9, 3, true), random_pairs(rng, 4, 3, true));
  const CouplingDataset folders = read_coupling_dataset(dir / "folders", -1, "test", "task.path");
  const CouplingDataset single = read_coupling_dataset(dir / "single", -1, "test", "task.path");
  expect_same_pairs(single.train, folders.train);
  expect_same_pairs(single.test, folders.test);
  EXPECT_EQ(dataset_part_size(dir / "single", "train", "test", "task.path"), 9u);
  EXPECT_EQ(dataset_dimension(dir / "single", "test", "task.path"), 3);
  // A part in both forms is refused, naming the key.
  write_npz(dir / "folders" / "train.npz", pack_pairs(random_pairs(rng, 2, 3, false)), ZIP_CM_STORE);
  try {
    read_coupling_dataset(dir / "folders", -1, "run.toml", "task.path");
    ADD_FAILURE() << "a part in both forms was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("run.toml: task.path: " + (dir / "folders").string() +
                                         " holds both train/ and train.npz"),
              std::string::npos)
        << e.what();
  }
}

// Each defect of a single file, written over good pairs, and the array its error must name.
TEST(Dataset, SingleFileRefusesHostileOffsetsNamingTheFileAndTheArray) {
  std::mt19937_64 rng(testing::fresh_seed());
  const fs::path dir = testing::temp_dir("dataset-single-bad");
  const std::vector<Arrays> pairs = random_pairs(rng, 5, 2, true);
  const Arrays good = pack_pairs(pairs);
  const std::int64_t rows = static_cast<std::int64_t>(good.at("x").shape[0]);
  const std::int64_t huge = std::int64_t{1} << 62;
  struct Case {
    const char* what;
    const char* array;
    std::function<void(Arrays&)> spoil;
    zip_int32_t compression = ZIP_CM_STORE;
  };
  const std::vector<Case> cases = {
      {"offsets decreasing", "x_offsets", [](Arrays& a) { std::swap(a["x_offsets"].ints[1], a["x_offsets"].ints[2]); }},
      {"an empty pair", "y_offsets", [](Arrays& a) { a["y_offsets"].ints[2] = a["y_offsets"].ints[1]; }},
      {"not starting at 0", "x_offsets", [](Arrays& a) { a["x_offsets"].ints[0] = 1; }},
      {"beyond the array", "x_offsets", [&](Arrays& a) { a["x_offsets"].ints.back() = rows + 1; }},
      {"short of the array", "x_offsets", [&](Arrays& a) { a["x_offsets"].ints.back() = rows - 1; }},
      {"a huge count", "x_offsets", [&](Arrays& a) { a["x_offsets"].ints[1] = huge; }},
      {"a huge last count", "y_offsets", [&](Arrays& a) { a["y_offsets"].ints.back() = huge; }},
      {"negative", "y_offsets", [](Arrays& a) { a["y_offsets"].ints[1] = -3; }},
      {"lengths differ", "y_offsets", [](Arrays& a) { a["y_offsets"].ints.push_back(a["y_offsets"].ints.back() + 1); a["y_offsets"].shape[0]++; }},
      {"target too short", "target", [](Arrays& a) { a["target"].data.pop_back(); a["target"].shape[0]--; }},
      {"target too long", "target", [](Arrays& a) { a["target"].data.push_back(0.0); a["target"].shape[0]++; }},
      {"target 2-D", "target", [](Arrays& a) { a["target"].shape = {1, a["target"].shape[0]}; }},
      {"float offsets", "x_offsets", [](Arrays& a) { a["x_offsets"].data.assign(a["x_offsets"].ints.begin(), a["x_offsets"].ints.end()); a["x_offsets"].ints.clear(); }},
      {"no offsets", "y_offsets", [](Arrays& a) { a.erase("y_offsets"); }},
      {"one offset", "x_offsets", [](Arrays& a) { a["x_offsets"].ints = {0}; a["x_offsets"].shape = {1}; }},
      {"y of another d", "y", [](Arrays& a) { a["y"].shape = {a["y"].shape[0] * 2, 1}; }},
      {"a of another length", "a", [](Arrays& a) { a["a"].data.push_back(0.5); a["a"].shape[0]++; }},
      {"an unknown array", "z", [](Arrays& a) { a["z"] = {{1.0}, {1}}; }},
      {"a NaN in pair 3's x", "x", [](Arrays& a) { a["x"].data[static_cast<std::size_t>(a["x_offsets"].ints[3]) * 2] = std::nan(""); }},
      {"a compressed member", "a", [](Arrays&) {}, ZIP_CM_DEFLATE},  // the first member
  };
  for (const Case& c : cases) {
    Arrays bad = good;
    c.spoil(bad);
    fs::remove_all(dir / "data");
    write_npz(dir / "data" / "train.npz", bad, c.compression);
    write_npz(dir / "data" / "test.npz", good, ZIP_CM_STORE);
    const std::string file = (dir / "data" / "train.npz").string();
    try {
      read_coupling_dataset(dir / "data", -1, "run.toml", "task.path");
      ADD_FAILURE() << c.what << ": read without an error";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(file, 0), 0u) << c.what << ": " << what;  // the file first
      EXPECT_NE(what.find(std::string(": ") + c.array + ": "), std::string::npos) << c.what << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << c.what << ": " << what;
    }
  }
}

TrainConfig dataset_config(const fs::path& data, int batch, int steps, std::uint64_t seed) {
  Config c;
  for (const std::string& s : std::vector<std::string>{"task.kind=\"dataset\"", "task.path=\"" + data.string() + "\"", "model.width=8",
                              "model.layers=1", "model.heads=2", "model.k=4", "model.sinkhorn_iters=8",
                              "train.lr=1e-2", "train.eval_every=2", "train.batch=" + std::to_string(batch),
                              "train.steps=" + std::to_string(steps)})
    c.set(s);
  TrainConfig config = read_train_config(c);
  config.train.seed = seed;
  return config;
}

// Training that reads each batch from disk (either form) is bit for bit training on the pairs in
// memory: the same pairs drawn by the same seeds, read back exactly.
TEST(Dataset, TrainingFromDiskIsTrainingInMemoryBitForBit) {
  std::mt19937_64 rng(testing::fresh_seed());
  const fs::path dir = testing::temp_dir("dataset-stream");
  write_both_forms(dir, random_pairs(rng, 11, 2, false), random_pairs(rng, 3, 2, false));
  const CouplingDataset data = read_coupling_dataset(dir / "folders", -1, "test", "task.path");
  const PairsInMemory in_memory(data.train);
  const std::uint64_t seed = testing::fresh_seed() % 1000000;
  const TrainConfig config = dataset_config(dir / "folders", 5, 4, seed);
  const TrainResult want = train(config, initial_state(config, data.test), data.test, {}, nullptr, &in_memory);
  for (const char* form : {"folders", "single"}) {
    const TrainConfig c = dataset_config(dir / form, 5, 4, seed);
    const auto source = open_dataset_part(dir / form, "train", -1, "test", "task.path");
    const TrainResult got = train(c, initial_state(c, data.test), data.test, {}, nullptr, source.get());
    EXPECT_EQ(got.state.params, want.state.params) << form;
    EXPECT_EQ(got.state.adam_v, want.state.adam_v) << form;
    EXPECT_EQ(got.final.w1, want.final.w1) << form;
  }
}

TEST(CliTrain, SingleFileDatasetTrainsLikeTheFolderFormAndResumesBitForBit) {
  std::mt19937_64 rng(testing::fresh_seed());
  const fs::path dir = testing::temp_dir("cli-dataset-single");
  std::vector<Arrays> train_pairs, test_pairs;
  for (int k = 0; k < 12; ++k) {
    std::uniform_int_distribution<int> size(3, 6);
    const int n = size(rng);
    (k < 8 ? train_pairs : test_pairs).push_back(random_pair(rng, n, n, 2, true));
  }
  write_both_forms(dir, train_pairs, test_pairs);
  const std::string common = " --set task.kind=dataset --set model.width=8 --set model.layers=1 --set model.heads=2"
                             " --set model.k=4 --set model.sinkhorn_iters=8 --set train.batch=4 --set train.lr=1e-2"
                             " --set train.checkpoint_every=3"
                             " --set train.schedule=\\\"constant\\\"";  // steps grows on resume: kept out of the hash
  auto run = [&](const std::string& form, long steps, const std::string& out) {
    return run_cli("train --set task.path=" + (dir / form).string() + common + " --set train.steps=" +
                   std::to_string(steps) + " --out " + (dir / out).string());
  };
  auto r = run("folders", 6, "folders-run");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  r = run("single", 6, "single-run");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto params = load_model(dir / "folders-run" / "model.bin").params;
  EXPECT_EQ(load_model(dir / "single-run" / "model.bin").params, params);
  EXPECT_EQ(testing::read_summary(dir / "single-run")["test_pairs"], 4);
  r = run("single", 3, "resumed");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  r = run_cli("train --resume --set train.steps=6 --out " + (dir / "resumed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(load_model(dir / "resumed" / "model.bin").params, params);
  // The checkpoint records the single file's hash: another train.npz stops the resume (exit 2).
  train_pairs[0] = random_pair(rng, 3, 3, 2, true);
  write_npz(dir / "single" / "train.npz", pack_pairs(train_pairs), ZIP_CM_STORE);
  r = run_cli("train --resume --set train.steps=9 --out " + (dir / "resumed").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((dir / "single" / "train.npz").string() + ": task.path: changed since the checkpoint"),
            std::string::npos)
      << r.stderr_text;
  // A compressed single file: exit 2, one line naming the file and the array, nothing written.
  write_npz(dir / "single" / "train.npz", pack_pairs(train_pairs), ZIP_CM_DEFLATE);
  r = run("single", 1, "bad");
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((dir / "single" / "train.npz").string() + ": target: is compressed"), std::string::npos)
      << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_FALSE(fs::exists(dir / "bad"));
}

}  // namespace
}  // namespace tokenflow
