// .npy reading/writing, strict TOML keys, --set overrides, atomic output directories.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "test_util.hpp"
#include "tokenflow/command_keys.hpp"
#include "tokenflow/config.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/tasks.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string npy_header(const std::string& dict) {
  std::string d = dict;
  while ((10 + d.size() + 1) % 64) d += ' ';
  d += '\n';
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  h += static_cast<char>(d.size() & 0xff);
  h += static_cast<char>(d.size() >> 8);
  return h + d;
}

TEST(Npy, RoundTripFloat64AndFloat32) {
  const auto dir = testing::temp_dir("npy");
  std::mt19937_64 rng(testing::fresh_seed());
  const Points<double> x = testing::random_matrix(rng, 7, 3, 1.0);
  write_points(dir / "x.npy", x);
  const NpyArray a = read_npy(dir / "x.npy");
  ASSERT_EQ(a.shape, (std::vector<std::size_t>{7, 3}));
  EXPECT_FALSE(a.was_float32);
  EXPECT_EQ(read_points(dir / "x.npy", "x"), x);
  const Points<float> y = x.cast<float>();
  write_points(dir / "y.npy", y);
  EXPECT_TRUE(read_npy(dir / "y.npy").was_float32);
  EXPECT_EQ(read_points(dir / "y.npy", "y"), y.cast<double>());
  const std::vector<double> v{1.0, 2.0, 3.0};
  write_npy(dir / "v.npy", v.data(), {3});
  EXPECT_EQ(read_vector(dir / "v.npy", "v", 3), Eigen::Vector3d(1, 2, 3));
}

TEST(Npy, RefusesWhatItCannotRead) {
  const auto dir = testing::temp_dir("npybad");
  const std::string eight(8 * 4, '\0');
  write_bytes(dir / "fortran.npy", npy_header("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }") + eight);
  write_bytes(dir / "big.npy", npy_header("{'descr': '>f8', 'fortran_order': False, 'shape': (2, 2), }") + eight);
  write_bytes(dir / "int.npy", npy_header("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }") + eight);
  write_bytes(dir / "short.npy", npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }") + eight);
  write_bytes(dir / "junk.npy", "this is not a numpy file at all");
  write_bytes(dir / "trailing.npy", npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }") + eight + "xx");
  for (const char* name : {"fortran.npy", "big.npy", "int.npy", "short.npy", "junk.npy", "trailing.npy", "missing.npy"}) {
    try {
      read_npy(dir / name, "init.path");
      ADD_FAILURE() << name << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_EQ(e.key(), "init.path");
    }
  }
  // NaN in the data is refused by read_points.
  const std::vector<double> bad{1.0, std::nan(""), 0.0, 1.0};
  write_npy(dir / "nan.npy", bad.data(), {2, 2});
  EXPECT_THROW(read_points(dir / "nan.npy", "init.path"), InputError);
}

TEST(Config, UnknownKeysSuggestTheNearest) {
  const Config c = Config::from_text("[run]\ndtt = 0.1\n", "cfg.toml");
  try {
    c.check_keys(simulation_keys());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.key(), "run.dtt");
    EXPECT_NE(std::string(e.what()).find("did you mean 'run.dt'"), std::string::npos) << e.what();
    EXPECT_EQ(e.source(), "cfg.toml");
  }
  const Config c2 = Config::from_text("[init]\nT = 2.0\n", "cfg.toml");
  try {
    c2.check_keys(simulation_keys());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("run.T"), std::string::npos) << e.what();
  }
}

TEST(Config, SetOverridesAndTypes) {
  Config c = Config::from_text("[attention]\nkind = \"softmax\"\n[run]\nT = 1.0\n", "cfg.toml");
  c.set("attention.kind=l2");
  c.set("run.T=2.5");
  c.set("init.cov=[[2.0, 0.0], [0.0, 1.0]]");
  const SimulationConfig s = read_simulation_config(c);
  EXPECT_EQ(s.attention.kind, "l2");
  EXPECT_EQ(s.run.T, 2.5);
  EXPECT_EQ(s.init.cov(0, 0), 2.0);
  EXPECT_EQ(c.source_of("run.T"), "--set");
  c.set("run.dt=\"fast\"");
  try {
    read_simulation_config(c);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.key(), "run.dt");
    EXPECT_EQ(e.source(), "--set");
  }
}

// Q, K, V, W may name a .npy file (relative to the config file's folder; to the working directory
// for --set); inline_matrix_files() writes the values read into the document, so to_toml() (the text
// checkpoints keep) reads back to the same matrices, bit for bit, without the files.
TEST(Config, MatrixKeysTakeNpyFilesAndInlineThem) {
  std::mt19937_64 rng(testing::fresh_seed());
  const auto dir = testing::temp_dir("matrixfiles");
  fs::create_directories(dir / "cfg" / "weights");
  const Eigen::MatrixXd Q = testing::random_matrix(rng, 3, 2, 1.0), K = testing::random_matrix(rng, 3, 2, 1.0);
  const Eigen::MatrixXd V = testing::random_matrix(rng, 2, 2, 1.0);
  const auto save = [](const fs::path& path, const Eigen::MatrixXd& m) {
    const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows = m;
    write_npy(path, rows.data(), {static_cast<std::size_t>(m.rows()), static_cast<std::size_t>(m.cols())});
  };
  save(dir / "cfg" / "weights" / "Q.npy", Q);
  save(dir / "cfg" / "weights" / "K.npy", K);
  save(dir / "V.npy", V);
  {
    std::ofstream f(dir / "cfg" / "run.toml");
    f << "[attention]\nQ = \"weights/Q.npy\"\n[[layers]]\nuntil = 1.0\nK = \"weights/K.npy\"\n";
  }
  Config c = Config::from_file((dir / "cfg" / "run.toml").string());
  c.set("attention.V=" + (dir / "V.npy").string());  // --set: absolute here (relative: the working directory)
  EXPECT_EQ(*c.get_matrix("attention.Q"), Q);
  EXPECT_EQ(*c.get_tables("layers")[0].get_matrix("K"), K);
  c.inline_matrix_files();
  const Config back = Config::from_text(c.to_toml(), "checkpoint.bin");
  EXPECT_EQ(c.to_toml().find(".npy"), std::string::npos) << c.to_toml();
  EXPECT_EQ(*back.get_matrix("attention.Q"), Q);  // exact: the values, not the path
  EXPECT_EQ(*back.get_matrix("attention.V"), V);
  EXPECT_EQ(*back.get_tables("layers")[0].get_matrix("K"), K);
  // A path that is not there, or not a matrix file, names the file and the key.
  Config missing = Config::from_text("[attention]\nK = \"nowhere/K.npy\"\n", "cfg.toml");
  try {
    missing.get_matrix("attention.K");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.key(), "attention.K");
    EXPECT_NE(std::string(e.what()).find("nowhere/K.npy"), std::string::npos) << e.what();
  }
  // Keys other than Q, K, V, W take no path.
  try {
    Config::from_text("[init]\ncov = \"cov.npy\"\n", "cfg.toml").get_matrix("init.cov");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find(".npy file"), std::string::npos) << e.what();
  }
}

// Counts beyond an int are refused by name, not wrapped: 4294967312 = 2^32 + 16 would read as 16.
// ---- the schemas (tokenflow/schema.hpp, command_keys.hpp) ------------------------------------------
TEST(Schema, EveryKeyIsDocumentedOnceWithItsDefault) {
  for (const CommandKeys& command : all_command_keys()) {
    std::set<std::string> seen;
    for (const KeySpec& k : command.keys) {
      EXPECT_TRUE(seen.insert(k.key).second) << command.command << ": " << k.key << " twice";
      if (k.hidden) continue;
      EXPECT_FALSE(k.doc.empty()) << command.command << ": " << k.key;
      EXPECT_NE(keys_help(command.keys).find(k.doc), std::string::npos) << k.key;
    }
  }
  EXPECT_THROW(command_keys("simulat"), InputError);
}

// The defaults each study's key list shows are the ones its reader uses on an empty config (the
// keys a study takes from simulate keep simulate's default unless its table says otherwise).
TEST(Schema, StudyKeyListsShowTheDefaultsTheirReadersUse) {
  auto default_of = [](const std::string& command, const std::string& key) {
    for (const KeySpec& k : command_keys(command).keys)
      if (k.key == key) return k.default_text;
    ADD_FAILURE() << command << " has no key " << key;
    return std::string();
  };
  const Config empty;
  EXPECT_EQ(default_of("gaussian", "run.integrator"), "\"dopri5\"");
  EXPECT_EQ(read_gaussian_setup(empty).spec.run.integrator, Integrator::dopri5);
  EXPECT_EQ(default_of("meanfield", "run.T"), "0.1");
  EXPECT_EQ(default_of("meanfield", "run.dt"), "run.T");
  const MeanFieldSetup meanfield = read_meanfield_setup(empty);
  EXPECT_EQ(meanfield.run.T, 0.1);
  EXPECT_EQ(meanfield.run.dt, meanfield.run.T);
  EXPECT_EQ(default_of("stability", "init.n"), "512");
  EXPECT_EQ(read_stability_setup(empty).initial.points.rows(), 512);
  // Every other key of simulate's keeps its default in each study.
  const std::vector<KeySpec>& simulate = simulation_schema();
  for (const auto& [command, table] : {std::pair{"gaussian", gaussian_defaults()},
                                       std::pair{"meanfield", meanfield_defaults()},
                                       std::pair{"stability", stability_defaults()}})
    for (const KeySpec& k : simulate) {
      bool overridden = false;
      for (const StudyDefault& d : table) overridden = overridden || d.key == k.key;
      if (!overridden) {
        EXPECT_EQ(default_of(command, k.key), k.default_text) << command << ": " << k.key;
      }
    }
  // A value the config gives wins over the study's default.
  Config given;
  given.set("run.integrator=\"rk4\"");
  EXPECT_EQ(read_gaussian_setup(given).spec.run.integrator, Integrator::rk4);
}

// Whether all of `text` is a number (1e-9, 0.001, 10000), and its value.
bool whole_number_text(const std::string& text, double& v) {
  char* end = nullptr;
  v = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

// One source for train's and the studies' own defaults: the schema's default text (docs/config.md,
// --help, Python's config_keys) is the value the struct field holds before any key is read, for
// every key bound to a field whose default is a literal (not "task.n", which names another key).
template <class S>
void expect_schema_defaults_are_the_structs(const std::vector<Key<S>>& keys, const std::string& section) {
  S s{};
  int compared = 0;
  for (const Key<S>& k : keys) {
    if (k.default_from) continue;  // its default is another key's value
    const std::string line = field_toml(k.spec, k.field(s));
    const std::string value = line.substr(line.find(" = ") + 3);
    double shown = 0, held = 0;
    if (whole_number_text(k.spec.default_text, shown) && whole_number_text(value, held)) {
      EXPECT_EQ(shown, held) << section << ": " << k.spec.key;
      ++compared;
    } else if (k.spec.default_text.front() == '"' || k.spec.default_text == "true" || k.spec.default_text == "false") {
      EXPECT_EQ(k.spec.default_text, value) << section << ": " << k.spec.key;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0) << section;
}

// One source for simulate's defaults: every key whose schema default is a literal (a number or a
// quoted string) reads, from an empty config, to exactly that value: the struct initializers the
// reader falls back on agree with what --help, docs/config.md and Python's config_keys show. A new
// key with a literal default needs its line in `value` (the test names it otherwise).
TEST(Schema, SimulateDefaultsAreWhatTheReaderReadsFromAnEmptyConfig) {
  const Config empty;
  const SimulationConfig s = read_simulation_config(empty);
  const AttentionParams p = read_attention(s, empty, 2);
  auto num = [](double v) { return fmt::format("{}", v); };
  auto str = [](const std::string& v) { return "\"" + v + "\""; };
  const std::map<std::string, std::function<std::string()>> value{
      {"dtype", [&] { return str(s.dtype == Dtype::f64 ? "f64" : "f32"); }},
      {"seed", [&] { return num(static_cast<double>(s.seed)); }},
      {"init.kind", [&] { return str(s.init.kind); }},
      {"init.n", [&] { return num(static_cast<double>(s.init.n)); }},
      {"init.d", [&] { return num(s.init.d); }},
      {"attention.kind", [&] { return str(s.attention.kind); }},
      {"attention.heads", [&] { return num(s.attention.heads); }},
      {"attention.epsilon", [&] { return num(s.attention.epsilon); }},
      {"attention.mask", [&] { return str(s.attention.mask); }},
      {"attention.sink", [&] { return num(s.attention.sink); }},
      {"attention.normalize", [&] { return str(s.attention.normalize); }},
      {"attention.summation", [&] { return str(s.attention.summation); }},
      {"attention.summation_tol", [&] { return num(s.attention.summation_tol); }},
      {"attention.sinkhorn_tol", [&] { return num(p.sinkhorn_tol); }},
      {"attention.sinkhorn_max_iter", [&] { return num(p.sinkhorn_max_iter); }},
      {"run.T", [&] { return num(s.run.T); }},
      {"run.dt", [&] { return num(s.run.dt); }},
      {"run.integrator", [&] { return str(to_string(s.run.integrator)); }},
      {"run.save_every", [&] { return num(s.run.save_every); }},
      {"run.blowup", [&] { return num(s.run.blowup); }},
      {"run.tol", [&] { return num(s.run.tol); }},
      {"run.rank_tol", [&] { return num(s.run.rank_tol); }},
      {"run.checkpoint_every", [&] { return num(s.run.checkpoint_every); }},
      {"run.cluster_tol", [&] { return num(s.run.cluster_tol); }},
      {"run.cluster_scale", [&] { return str(to_string(s.run.cluster_scale)); }},
      {"run.sphere_step", [&] { return str(to_string(s.run.sphere_step)); }},
  };
  int compared = 0;
  for (const KeySpec& k : simulation_schema()) {
    double shown = 0;
    const bool numeric = whole_number_text(k.default_text, shown);
    if (!numeric && (k.default_text.empty() || k.default_text.front() != '"')) continue;  // "I", "1/sqrt(k)", ...
    const auto it = value.find(k.key);
    if (it == value.end()) {
      ADD_FAILURE() << k.key << " (default " << k.default_text << ") has no line in this test's table";
      continue;
    }
    const std::string held = it->second();
    double read = 0;
    if (numeric) {
      EXPECT_TRUE(whole_number_text(held, read) && read == shown) << k.key << ": schema " << k.default_text << ", reader " << held;
    } else {
      EXPECT_EQ(k.default_text, held) << k.key;
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(value.size()));
}

TEST(Schema, TrainAndStudyDefaultsAreTheStructFieldsDefaults) {
  expect_schema_defaults_are_the_structs(task_schema(), "task");
  expect_schema_defaults_are_the_structs(model_schema(), "model");
  expect_schema_defaults_are_the_structs(train_spec_schema(), "train");
  // The studies' own keys likewise (their defaults of simulate's keys: the test above).
  expect_schema_defaults_are_the_structs(gaussian_extra_bindings(), "gaussian");
  expect_schema_defaults_are_the_structs(meanfield_extra_bindings(), "meanfield");
  expect_schema_defaults_are_the_structs(stability_extra_bindings(), "stability");
}

// A value just outside the bounds of the schema of a number or integer key (for an open end: the
// end itself; for a closed one: one below/above), the bounds being what docs/config.md states.
std::vector<std::string> outside_values(const KeySpec& k) {
  std::vector<std::string> v;
  const Bounds& b = k.bounds;
  const bool integer = k.type == KeyType::integer;
  auto text = [&](double x) { return integer ? std::to_string(static_cast<long long>(x)) : fmt::format("{}", x); };
  // The next representable value beyond a closed end (an integer: the next integer).
  const double below = integer ? b.lo - 1 : std::nextafter(b.lo, -kNoLimit);
  const double above = integer ? b.hi + 1 : std::nextafter(b.hi, kNoLimit);
  if (std::isfinite(b.lo)) v.push_back(text(b.lo_open ? b.lo : below));
  if (std::isfinite(b.hi)) v.push_back(text(b.hi_open ? b.hi : above));
  if (!integer) v.push_back("nan");
  return v;
}

TEST(Schema, TheReadersRefuseEveryValueOutsideTheStatedRange) {
  struct Reader {
    std::string command;
    std::function<void(const Config&)> read;
  };
  const std::vector<Reader> readers{
      {"train", [](const Config& c) { read_train_config(c); }},
      {"simulate",
       [](const Config& c) {
         const SimulationConfig s = read_simulation_config(c);
         read_attention(s, c, 2);
       }},
      {"gaussian", [](const Config& c) { read_gaussian_setup(c); }},
      {"meanfield", [](const Config& c) { read_meanfield_setup(c); }},
      {"stability", [](const Config& c) { read_stability_setup(c); }}};
  int checked = 0;
  for (const Reader& reader : readers) {
    for (const KeySpec& k : command_keys(reader.command).keys) {
      if (k.hidden || (k.type != KeyType::integer && k.type != KeyType::number) ||
          k.key.rfind("layers.", 0) == 0)
        continue;
      for (const std::string& value : outside_values(k)) {
        Config c;
        c.set(k.key + "=" + value);
        try {
          reader.read(c);
          ADD_FAILURE() << reader.command << ": " << k.key << " = " << value << " was accepted";
        } catch (const InputError& e) {
          EXPECT_EQ(e.key(), k.key) << reader.command << ": " << k.key << " = " << value << ": " << e.what();
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 60);
}

TEST(Schema, BoundsSayWhatTheyRequire) {
  EXPECT_EQ(positive().requirement(), "must be positive");
  EXPECT_EQ(at_least(1).requirement(), "must be at least 1");
  EXPECT_EQ(closed(1, 1 << 20).requirement(), "must be in [1, 1048576]");
  EXPECT_EQ((Bounds{0, 1, false, true}).requirement(), "must be in [0, 1)");
  EXPECT_FALSE(positive().contains(0.0));
  EXPECT_FALSE(positive().contains(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(at_least(0).contains(std::nan("")));
  EXPECT_TRUE((Bounds{0, kNoLimit, true, false}).contains(std::numeric_limits<double>::infinity()));
}

TEST(Config, CountsOutsideAnIntAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"init.d", "[init]\nkind = \"sphere\"\nd = 4294967299\n"},
      {"attention.heads", "[attention]\nheads = 4294967297\n"},
      {"run.save_every", "[run]\nsave_every = -4294967296\n"},
  };
  for (const auto& [key, text] : cases) {
    const Config c = Config::from_text(text, "cfg.toml");
    try {
      read_simulation_config(c);
      ADD_FAILURE() << key << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.key(), key);
      EXPECT_EQ(e.source(), "cfg.toml");
      EXPECT_NE(std::string(e.what()).find("32-bit"), std::string::npos) << e.what();
    }
  }
  const Config task = Config::from_text("[task]\nn = 4294967312\n", "task.toml");
  try {
    read_task_spec(task);
    ADD_FAILURE() << "task.n was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.key(), "task.n");
  }
  EXPECT_EQ(Config::from_text("x = 2147483647\n", "c").get_int32("x", 0), 2147483647);
  EXPECT_EQ(Config::from_text("x = -2147483648\n", "c").get_int32("x", 0), -2147483647 - 1);
}

TEST(Config, LayersAreRead) {
  const Config c = Config::from_text(
      "[attention]\nQ = [[1.0, 0.0], [0.0, 1.0]]\n[[layers]]\nuntil = 0.5\nQ = [[2.0, 0.0], [0.0, 1.0]]\n"
      "[[layers]]\nuntil = 1.0\nV = [[0.5, 0.0], [0.0, 0.5]]\n",
      "cfg.toml");
  const SimulationConfig s = read_simulation_config(c);
  const AttentionParams p = read_attention(s, c, 2);
  ASSERT_EQ(p.layers.size(), 3u);
  EXPECT_EQ(p.layer_at(0.2).heads[0].Q(0, 0), 2.0);
  EXPECT_EQ(p.layer_at(0.5).heads[0].Q(0, 0), 1.0);  // layer 2 inherits Q from [attention]
  EXPECT_EQ(p.layer_at(0.7).heads[0].V(0, 0), 0.5);
  EXPECT_EQ(p.layer_at(3.0).heads[0].V(0, 0), 1.0);  // after the last until: [attention]
}

TEST(OutputDir, NothingAppearsWithoutCommit) {
  const auto dir = testing::temp_dir("outdir") / "run";
  {
    OutputDir out(dir, {"test", {}, {}});
    std::ofstream(out.staged("a.txt")) << "half";
  }
  EXPECT_FALSE(fs::exists(dir));  // created by OutputDir, removed again as it stayed empty
  {
    OutputDir out(dir, {"test", {}, {}});
    std::ofstream(out.staged("a.txt")) << "whole";
    out.commit();
  }
  EXPECT_TRUE(fs::exists(dir / "a.txt"));
  EXPECT_EQ(testing::output_entries(dir), 1);
}

}  // namespace
}  // namespace tokenflow

namespace tokenflow {
namespace {

TEST(Random, ConsecutiveSeedsGiveUnrelatedStreams) {
  // Seeds s and s + k must not give the same stream shifted by k draws: the first 64 draws of
  // seeds 0..15 share no value with each other's streams.
  std::set<std::uint64_t> seen;
  for (std::uint64_t seed = 0; seed < 16; ++seed) {
    Random r(seed);
    for (int k = 0; k < 64; ++k) EXPECT_TRUE(seen.insert(r.next_u64()).second) << seed;
  }
  // And the sample covariances of two consecutive seeds differ at the sampling scale.
  const auto x0 = sample_gaussian(4000, Eigen::Vector2d::Zero(), Eigen::Matrix2d::Identity(), 0);
  const auto x1 = sample_gaussian(4000, Eigen::Vector2d::Zero(), Eigen::Matrix2d::Identity(), 1);
  EXPECT_GT((x0.transpose() * x0 - x1.transpose() * x1).norm() / 4000, 1e-4);
}

}  // namespace
}  // namespace tokenflow
