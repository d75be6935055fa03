// Hostile input files: every path a user (or an attacker) hands to tokenflow is read with bounds.
// Each case asserts what the user sees: exit code 2, one line naming the file and the key or
// field, an answer within a bounded time (never a crash, a hang or gigabytes allocated), and no
// output directory left behind.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "test_util.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/simulation_checkpoint.hpp"
#include "tokenflow/train_checkpoint.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/config.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/echo.hpp"
#include "tokenflow/embed.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/model.hpp"
#include "tokenflow/train.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;

struct BoundedResult {
  int exit_code;  // -1: killed by a signal (a crash, or the time limit)
  std::string stderr_text;
  double seconds;
};

// Runs `tokenflow args` with stderr captured, killed after `limit` seconds (a hang shows as a kill,
// not as a test that never ends).
BoundedResult run_bounded(const std::string& args, int limit = 60) {
  const auto err_file = fs::temp_directory_path() / ("tokenflow-hostile-stderr-" + std::to_string(::getpid()));
  const std::string cmd = "CI=1 timeout -s KILL " + std::to_string(limit) + " " + TOKENFLOW_CLI + " " + args +
                          " 2> " + err_file.string() + " >/dev/null </dev/null";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  fs::remove(err_file);
  // timeout exits 137 when it kills; a signal inside the CLI shows as 128 + signal through the shell.
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return {code >= 128 ? -1 : code, ss.str(), seconds};
}

// The user's view of a refusal: exit 2, one line, naming what is asked, within `seconds`.
void expect_refused(const BoundedResult& r, const std::vector<std::string>& in_message, double seconds = 30) {
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  for (const auto& s : in_message) EXPECT_NE(r.stderr_text.find(s), std::string::npos) << s << " not in: " << r.stderr_text;
  EXPECT_LT(r.seconds, seconds) << r.stderr_text;
}

std::string deep_header(int parts) {
  std::string s = "[a";
  for (int i = 1; i < parts; ++i) s += ".a";
  return s + "]\nx = 1\n";
}

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// ---- 1. deep TOML -----------------------------------------------------------------------------
TEST(HostileInputToml, DeepTomlIsRefusedByEveryCommand) {
  const auto dir = testing::temp_dir("hostile-toml");
  write(dir / "header.toml", deep_header(50000));
  write(dir / "arrays.toml", "a = " + std::string(100000, '[') + "1" + std::string(100000, ']') + "\n");
  std::string inline_tables = "a = ";
  for (int i = 0; i < 20000; ++i) inline_tables += "{b = ";
  write(dir / "inline.toml", inline_tables + "1" + std::string(20000, '}') + "\n");
  std::string dotted = "a";
  for (int i = 0; i < 50000; ++i) dotted += ".b";
  write(dir / "dotted.toml", dotted + " = 1\n");
  for (const char* file : {"header.toml", "arrays.toml", "inline.toml", "dotted.toml"}) {
    for (const char* command : {"simulate", "gaussian", "train"}) {
      const auto out = dir / (std::string("out-") + command);
      const auto r = run_bounded(std::string(command) + " --config " + (dir / file).string() + " --out " + out.string());
      SCOPED_TRACE(std::string(command) + " " + file);
      expect_refused(r, {(dir / file).string(), "levels deep"}, 10);
      EXPECT_FALSE(fs::exists(out));
    }
  }
  // --set parses its value as TOML too; its key's parts count the same.
  const auto r = run_bounded("simulate --set 'init.n=" + std::string(5000, '[') + "' --out " + (dir / "o").string());
  expect_refused(r, {"--set", "levels deep"}, 10);
  const auto r2 = run_bounded("simulate --set '" + dotted.substr(0, 20000) + "=1' --out " + (dir / "o").string());
  expect_refused(r2, {"--set", "levels deep"}, 10);
}

TEST(HostileInputToml, LibraryRefusesDeepAndHugeTextAndKeepsRealConfigs) {
  EXPECT_THROW(Config::from_text(deep_header(65), "deep.toml"), InputError);
  EXPECT_NO_THROW(Config::from_text(deep_header(40), "ok.toml"));
  try {
    Config::from_text(deep_header(50000), "deep.toml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.source(), "deep.toml");
  }
  // Brackets, dots and '#' inside strings and comments do not count.
  const std::string strings = "a = \"" + std::string(500, '[') + std::string(500, '.') + "\"\n" +
                              "b = '" + std::string(500, '{') + "'\n" + "c = \"\"\"\n" + std::string(500, '[') +
                              "\n\"\"\"\n" + "d = '''" + std::string(300, '.') + "'''\n# " +
                              std::string(500, '[') + "\ne = \"\\\"[[[[\"\n";
  EXPECT_NO_THROW(Config::from_text(strings, "strings.toml"));
  // An inline table with many keys is not deep.
  std::string wide = "t = {";
  for (int i = 0; i < 200; ++i) wide += (i ? ", k" : "k") + std::to_string(i) + " = [1, [2]]";
  EXPECT_NO_THROW(Config::from_text(wide + "}\n", "wide.toml"));
  // Larger than a config may be.
  EXPECT_THROW(Config::from_text(std::string(kMaxConfigBytes + 1, '\n'), "big.toml"), InputError);
  // Every config of the experiments still parses.
  for (const auto& e : fs::directory_iterator(fs::path(TOKENFLOW_SOURCE_DIR) / "experiments"))
    if (e.path().extension() == ".toml") {
      EXPECT_NO_THROW(Config::from_file(e.path().string())) << e.path();
    }
}

// ---- 2. only regular files ----------------------------------------------------------------------
TEST(HostileInputFile, DevicesFifosAndDirectoriesAreRefusedWithoutBlocking) {
  const auto dir = testing::temp_dir("hostile-fifo");
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<double> ok{0.0, 1.0, 1.0, 0.0};
  write_npy(dir / "x.npy", ok.data(), {2, 2});
  for (const fs::path& bad : {fs::path("/dev/zero"), fifo, dir}) {
    SCOPED_TRACE(bad.string());
    const auto out = dir / "out";
    // A directory given to --config, --model or --vectors is already refused by the command line
    // parser ("File is actually a directory"); every other case by read_input_file.
    const std::string refusal = bad == dir ? "" : "not a regular file";
    expect_refused(run_bounded("simulate --config " + bad.string() + " --out " + out.string()),
                   {bad.string(), refusal}, 10);
    write(dir / "cfg.toml", "[init]\nkind = \"file\"\npath = \"" + bad.string() + "\"\n");
    expect_refused(run_bounded("simulate --config " + (dir / "cfg.toml").string() + " --out " + out.string()),
                   {bad.string(), "init.path", "not a regular file"}, 10);
    expect_refused(run_bounded("ot --x " + bad.string() + " --y " + (dir / "x.npy").string() + " --out " + out.string()),
                   {bad.string(), "--x", "not a regular file"}, 10);
    expect_refused(run_bounded("couple --model " + bad.string() + " --x " + (dir / "x.npy").string() + " --y " +
                               (dir / "x.npy").string() + " --out " + out.string()),
                   {bad.string(), "--model", refusal}, 10);
    expect_refused(run_bounded("embed --vectors " + bad.string() + " --text hello --out " + out.string()),
                   {bad.string(), "--vectors", refusal}, 10);
    EXPECT_FALSE(fs::exists(out));
  }
  // A fifo or /dev/zero in the place of a checkpoint (simulate's resume and train --resume).
  for (const fs::path& bad : {fs::path("/dev/zero"), fifo}) {
    fs::create_directories(dir / "run");
    fs::remove(dir / "run" / "checkpoint.bin");
    fs::create_symlink(bad, dir / "run" / "checkpoint.bin");
    expect_refused(run_bounded("resume --out " + (dir / "run").string()), {"checkpoint.bin", "not a regular file"}, 10);
    expect_refused(run_bounded("train --resume --out " + (dir / "run").string()),
                   {"checkpoint.bin", "not a regular file"}, 10);
  }
  // The library's readers say the same.
  EXPECT_THROW(read_input_file(fifo, "k"), InputError);
  EXPECT_THROW(read_input_prefix("/dev/zero", "k", 8), InputError);
  EXPECT_THROW(read_npy(fifo, "--x"), InputError);
  EXPECT_THROW(read_word_vectors(fifo), InputError);
  EXPECT_THROW(load_model(fifo), InputError);
  try {
    read_input_file(dir / "x.npy", "--x", 16, "a test");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_input_file(dir / "x.npy", "--x").size(), fs::file_size(dir / "x.npy"));
}

// ---- 3. sizes checked against the bytes present, and configs against the memory -----------------
std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

std::string sealed(std::string bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return bytes + u64(h);
}

std::string model_file(const std::string& config) {
  return sealed("TFMODEL1" + u64(config.size()) + config + u64(0) + u64(0));
}

TEST(HostileInputSizes, ModelFileSizesAreCheckedAgainstItsBytes) {
  const auto dir = testing::temp_dir("hostile-model");
  const std::vector<double> x{0.1, 0.2, -0.5, 0.3};
  write_npy(dir / "x.npy", x.data(), {2, 2});
  // A small file whose configuration promises gigabytes (or more than any machine has).
  for (const std::string layers : {"200000000", "100000"}) {
    const std::string bytes = model_file("[model]\nd = 2\nwidth = 8\nheads = 2\nk = 4\nlayers = " + layers + "\n");
    ASSERT_LT(bytes.size(), 600u);
    write(dir / "model.bin", bytes);
    const auto out = dir / "out";
    const auto r = run_bounded("couple --model " + (dir / "model.bin").string() + " --x " + (dir / "x.npy").string() +
                               " --y " + (dir / "x.npy").string() + " --out " + out.string());
    SCOPED_TRACE(layers);
    expect_refused(r, {(dir / "model.bin").string()}, 5);
    EXPECT_NE(r.stderr_text.find(layers == "100000" ? "bytes left in the file" : "model.layers"), std::string::npos)
        << r.stderr_text;
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST(HostileInputSizes, ConfigsLargerThanMemoryAreRefusedNamingTheKey) {
  const auto dir = testing::temp_dir("hostile-memory");
  struct Case {
    std::string args, key;
  };
  for (const Case& c : {Case{"train --set model.layers=200000000", "model.layers"},
                        Case{"train --set model.mlp_ratio=1048576", "model.mlp_ratio"},
                        Case{"train --set model.width=1048576", "model.width"},
                        Case{"simulate --set init.n=1000000000000", "init.n"},
                        Case{"simulate --set init.kind=sphere --set init.d=1000000", "init.d"},
                        Case{"simulate --set init.n=1000000 --set run.T=100000 --set run.dt=0.001 --set run.save_every=1",
                             "run.save_every"}}) {
    SCOPED_TRACE(c.args);
    const auto out = dir / "out";
    const auto r = run_bounded(c.args + " --out " + out.string());
    expect_refused(r, {"--set", c.key, "memory"}, 2);
    EXPECT_EQ(r.stderr_text.find("max_size"), std::string::npos) << r.stderr_text;
    EXPECT_FALSE(fs::exists(out));
  }
  // What works today is not refused: the default model, and its size is what the layout says.
  ModelConfig m;
  EXPECT_EQ(static_cast<std::size_t>(model_size(m).parameters), ParameterLayout(m).size());
  m.share_encoders = true;
  m.layers = 5;
  m.mlp_ratio = 3;
  EXPECT_EQ(static_cast<std::size_t>(model_size(m).parameters), ParameterLayout(m).size());
}

TEST(HostileInputSizes, WordVectorHeaderMustMatchTheRows) {
  const auto dir = testing::temp_dir("hostile-vectors");
  struct Case {
    std::string text, in_message;
  };
  for (const Case& c : {Case{"3 2\ncat 1 2\ndog 3 4\n", "line 3"},              // too few rows
                        Case{"2 2\ncat 1 2\ndog 3 4\nbird 5 6\n", "line 4"},     // too many
                        Case{"2 2\ncat 1 2 3\ndog 3 4\n", "line 2"},             // a row of 3 numbers
                        Case{"2 2\ncat 1 2\ndog 3\n", "line 3"},                 // a row of 1
                        Case{"1000000000 300\ncat 1 2\n", "line 1"},             // a promise of 2.4 TB
                        Case{"99999999999999999999999 2\ncat 1 2\n", "line 1"}}) {
    SCOPED_TRACE(c.text.substr(0, 30));
    write(dir / "vectors.txt", c.text);
    const auto out = dir / "out";
    const auto r = run_bounded("embed --vectors " + (dir / "vectors.txt").string() + " --text cat --out " + out.string());
    expect_refused(r, {(dir / "vectors.txt").string(), c.in_message}, 5);
    EXPECT_LT(r.stderr_text.size(), 400u) << r.stderr_text;
    EXPECT_FALSE(fs::exists(out));
  }
  // A header that keeps its promise is read, as a file without a header is.
  write(dir / "vectors.txt", "2 2\ncat 1 2\ndog 3 4\n");
  EXPECT_EQ(read_word_vectors(dir / "vectors.txt").words.size(), 2u);
  write(dir / "vectors.txt", "cat 1 2\ndog 3 4\n");
  EXPECT_EQ(read_word_vectors(dir / "vectors.txt").dim, 2);
}

// ---- 4. .npy headers ----------------------------------------------------------------------------
std::string npy_with_header(std::string dict) {
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  dict += '\n';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

TEST(HostileInputNpy, ShapeErrorsNameTheKeyAndStayShort) {
  const auto dir = testing::temp_dir("hostile-npy");
  const std::string huge(5000, '7');
  write(dir / "huge.npy", npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (" + huge + ", 2), }"));
  write(dir / "open.npy", npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (0,), ") + "");
  write(dir / "garbage.npy", npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (" +
                                             std::string(3000, 'x') + "), }"));
  for (const char* file : {"huge.npy", "open.npy", "garbage.npy"}) {
    SCOPED_TRACE(file);
    write(dir / "cfg.toml", "[init]\nkind = \"file\"\npath = \"" + (dir / file).string() + "\"\n");
    const auto out = dir / "out";
    const auto r = run_bounded("simulate --config " + (dir / "cfg.toml").string() + " --out " + out.string());
    expect_refused(r, {(dir / file).string(), "init.path", "corrupt .npy header"}, 5);
    EXPECT_LT(r.stderr_text.size(), 300u) << r.stderr_text;
    EXPECT_EQ(r.stderr_text.find(std::string(30, '7')), std::string::npos);
    EXPECT_FALSE(fs::exists(out));
    // The ot command names its own option.
    const auto r2 = run_bounded("ot --x " + (dir / file).string() + " --y " + (dir / file).string() + " --out " + out.string());
    expect_refused(r2, {(dir / file).string(), "--x"}, 5);
  }
  // An unclosed dict is refused, even when the size-0 array it describes would parse.
  EXPECT_THROW(parse_npy(npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (0,), "), "m", "k"),
               InputError);
  EXPECT_NO_THROW(parse_npy(npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }"), "m", "k"));
}

// ---- 5. crafted checkpoints -----------------------------------------------------------------
struct SimulateCheckpoint {
  Measure<double> mu;
  SimulationState<double> state;
};

SimulateCheckpoint real_state(Integrator integrator) {
  std::mt19937_64 rng(testing::fresh_seed());
  SimulateCheckpoint c;
  c.mu = testing::random_measure(rng, 30, 2, false);
  RunSpec run;
  run.T = 0.5;
  run.integrator = integrator;
  run.checkpoint_every = 1;  // dopri5 takes only a handful of steps
  run.save_every = 5;
  bool taken = false;
  // The first checkpointed state is enough: the progress callback stops the run right after it.
  try {
    simulate<double>(
        make_attention(AttentionSpec{}, 2), run, c.mu, [&](const Progress&) { return !taken; },
        [&](const SimulationState<double>& s) {
          if (!taken) c.state = s, taken = true;
        });
  } catch (const Cancelled&) {
  }
  EXPECT_TRUE(taken);
  return c;
}

TEST(HostileInputCheckpoint, CraftedSimulateCheckpointsAreRefusedQuickly) {
  const auto dir = testing::temp_dir("hostile-ckpt");
  struct Case {
    std::string name, integrator, field;
    std::function<void(SimulateCheckpoint&)> craft;
  };
  const double nan = std::nan("");
  const std::vector<Case> cases{
      {"h_zero", "dopri5", "step size h", [](SimulateCheckpoint& c) { c.state.h = 0.0; }},
      {"h_nan", "dopri5", "step size h", [nan](SimulateCheckpoint& c) { c.state.h = nan; }},
      {"h_negative", "dopri5", "step size h", [](SimulateCheckpoint& c) { c.state.h = -0.01; }},
      {"steps_negative", "rk4", "step count", [](SimulateCheckpoint& c) { c.state.partial.steps = -1000000000000L; }},
      {"steps_beyond", "rk4", "step count", [](SimulateCheckpoint& c) { c.state.partial.steps = 1000000; }},
      {"t_beyond_T", "dopri5", "time t", [](SimulateCheckpoint& c) { c.state.t = 7.0; }},
      {"t_nan", "rk4", "time t", [nan](SimulateCheckpoint& c) { c.state.t = nan; }},
      {"positions_shape", "rk4", "positions shape",
       [](SimulateCheckpoint& c) { c.state.partial.positions = Points<double>::Zero(3, 2); }},
      {"positions_nan", "rk4", "positions", [nan](SimulateCheckpoint& c) { c.state.partial.positions(0, 0) = nan; }},
      {"weights_negative", "rk4", "weights", [](SimulateCheckpoint& c) { c.mu.weights[0] = -1.0; }},
      {"frames_shape", "rk4", "frame shape",
       [](SimulateCheckpoint& c) { c.state.partial.frames.push_back(Points<double>::Zero(30, 5)); }},
      {"times_mismatch", "rk4", "frame times", [](SimulateCheckpoint& c) { c.state.partial.times.push_back(0.1); }},
      {"potentials", "rk4", "Sinkhorn potentials", [](SimulateCheckpoint& c) {
         c.state.sinkhorn_f.assign(1, Eigen::VectorXd::Zero(7));
         c.state.sinkhorn_g.assign(1, Eigen::VectorXd::Zero(7));
       }}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SimulateCheckpoint ckpt = real_state(c.integrator == "dopri5" ? Integrator::dopri5 : Integrator::rk4);
    c.craft(ckpt);
    const std::string config = "[run]\nT = 0.5\nintegrator = \"" + c.integrator + "\"\ncheckpoint_every = 1\nsave_every = 5\n";
    const auto run = dir / c.name;
    fs::create_directories(run);
    write_checkpoint_file(run / "checkpoint.bin", CheckpointKind::simulate,
                          simulation_checkpoint_payload(config, ckpt.mu, ckpt.state));
    const auto r = run_bounded("resume --out " + run.string(), 60);
    expect_refused(r, {(run / "checkpoint.bin").string(), c.field}, 10);
    EXPECT_FALSE(fs::exists(run / "positions.npy"));
  }
  // The untouched state resumes (the checks refuse only what is wrong).
  const SimulateCheckpoint ok = real_state(Integrator::dopri5);
  fs::create_directories(dir / "ok");
  write_checkpoint_file(dir / "ok" / "checkpoint.bin", CheckpointKind::simulate,
                        simulation_checkpoint_payload("[run]\nT = 0.5\nintegrator = \"dopri5\"\ncheckpoint_every = 1\nsave_every = 5\n",
                                                      ok.mu, ok.state));
  const auto r = run_bounded("resume --out " + (dir / "ok").string(), 120);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_TRUE(fs::exists(dir / "ok" / "positions.npy"));
}

TEST(HostileInputCheckpoint, CraftedTrainingCheckpointsAreRefusedQuickly) {
  const auto dir = testing::temp_dir("hostile-train-ckpt");
  const std::string toml =
      "[task]\nn = 6\n[model]\nwidth = 8\nlayers = 1\nheads = 2\nk = 4\nsinkhorn_iters = 8\n"
      "[train]\nsteps = 10\nbatch = 8\ntest_pairs = 8\ncheckpoint_every = 2\n";
  const TrainConfig config = read_train_config(Config::from_text(toml, "cfg"));
  const std::size_t P = ParameterLayout(config.model).size();
  auto fresh = [&] {
    TrainState s;
    s.step = 4;
    s.params.assign(P, 0.01);
    s.adam_m.assign(P, 0.0);
    s.adam_v.assign(P, 0.0);
    s.best_step = 2;
    s.best_params.assign(P, 0.02);
    s.metrics.push_back(MetricsRow{});
    s.loss_count = 2;
    return s;
  };
  struct Case {
    std::string name, field;
    std::function<void(TrainState&)> craft;
  };
  const double nan = std::nan("");
  const std::vector<Case> cases{
      {"step_negative", "the step", [](TrainState& s) { s.step = -3; }},
      {"step_beyond", "beyond train.steps", [](TrainState& s) { s.step = 1000000000; }},
      {"params_nan", "parameters", [nan](TrainState& s) { s.params[3] = nan; }},
      {"second_moments_negative", "second moments", [](TrainState& s) { s.adam_v[0] = -1.0; }},
      {"seconds_nan", "seconds", [nan](TrainState& s) { s.seconds = nan; }},
      {"loss_count", "loss count", [](TrainState& s) { s.loss_count = -7; }},
      {"metrics_order", "metrics row", [](TrainState& s) { s.metrics.push_back(MetricsRow{99, 0, 0, 0, 0, 0, {}}); }},
      {"params_count", "does not match", [](TrainState& s) { s.params.pop_back(); }},
      {"best_params_nan", "best parameters", [nan](TrainState& s) { s.best_params[1] = nan; }},
      {"best_step_beyond", "best step", [](TrainState& s) { s.best_step = 5; }},
      {"best_params_count", "does not match", [](TrainState& s) { s.best_params.pop_back(); }}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainState s = fresh();
    c.craft(s);
    const auto run = dir / c.name;
    fs::create_directories(run);
    write_checkpoint(run / "checkpoint.bin", config, s);
    for (const char* command : {"resume --out ", "train --resume --out "}) {
      const auto r = run_bounded(command + run.string(), 60);
      expect_refused(r, {(run / "checkpoint.bin").string(), c.field}, 10);
      EXPECT_FALSE(fs::exists(run / "model.bin"));
    }
  }
}

// ---- 8. non-finite is not blow-up -------------------------------------------------------------
// A blow-up is a finite trajectory whose norm passes run.blowup; a step that overflows to inf or
// NaN is status "failed" naming the step and the first non-finite quantity, and the result is the
// last finite state (the failing step's start).
template <class T>
void expect_overflow_fails(const AttentionParams& p, Integrator integrator, const Measure<double>& mu64,
                           double fails_after) {
  const Measure<T> mu{mu64.points.cast<T>(), mu64.weights.cast<T>(), mu64.positions.cast<T>()};
  RunSpec run;
  run.T = 0.2;
  run.dt = 0.01;
  run.integrator = integrator;
  const SimulationResult<T> r = simulate(p, run, mu);
  EXPECT_EQ(r.status, "failed") << r.reason;
  EXPECT_NE(r.reason.find("step "), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("not finite"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("overflow"), std::string::npos) << r.reason;
  EXPECT_TRUE(r.positions.allFinite());
  // The last finite state is the start of the failing step, at or before the time the overflowing
  // parameters take over (dopri5's steps may be shorter than dt, euler's and rk4's end on it).
  EXPECT_LE(r.t_final, fails_after + 1e-12) << r.reason;
  if (integrator != Integrator::dopri5) {
    EXPECT_NEAR(r.t_final, fails_after, 1e-12) << r.reason;
  }
  for (const auto& frame : r.diagnostics) EXPECT_TRUE(std::isfinite(frame.max_norm)) << frame.t;
}

TEST(HostileInputNonFinite, OverflowIsFailedNotBlowUpForEveryIntegratorDtypeAndShape) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Measure<double> mu = testing::random_measure(rng, 24, 3, true);
  const Eigen::MatrixXd huge = 1e200 * Eigen::MatrixXd::Identity(3, 3);
  struct Shape {
    const char* name;
    AttentionSpec spec;
    double fails_after;
  };
  std::vector<Shape> shapes(3);
  shapes[0].name = "scale 1e308";
  shapes[0].spec.scale = 1e308;
  shapes[0].fails_after = 0.0;
  shapes[1].name = "sphere, Q = K = 1e200 I";  // unit norms, logits 1e400
  shapes[1].spec.normalize = "sphere";
  shapes[1].spec.Q = shapes[1].spec.K = huge;
  shapes[1].fails_after = 0.0;
  shapes[2].name = "layers: Q = K = 1e200 I from t = 0.05";
  shapes[2].spec.layers.resize(2);
  shapes[2].spec.layers[0].until = 0.05;
  shapes[2].spec.layers[1].Q = shapes[2].spec.layers[1].K = huge;
  shapes[2].fails_after = 0.05;
  for (const Shape& shape : shapes)
    for (Integrator integrator : {Integrator::euler, Integrator::rk4, Integrator::dopri5}) {
      SCOPED_TRACE(std::string(shape.name) + ", " + to_string(integrator));
      const AttentionParams p = make_attention(shape.spec, 3);
      expect_overflow_fails<double>(p, integrator, mu, shape.fails_after);
      expect_overflow_fails<float>(p, integrator, mu, shape.fails_after);
    }
}

TEST(HostileInputNonFinite, SimulateScale1e308ExitsOneNamingTheStepAndCommitsNoNonFiniteArray) {
  const auto dir = testing::temp_dir("hostile-nonfinite-cli");
  for (const char* integrator : {"euler", "rk4", "dopri5"})
    for (const char* dtype : {"f64", "f32"}) {
      SCOPED_TRACE(std::string(integrator) + " " + dtype);
      const fs::path out = dir / (std::string(integrator) + dtype);
      const auto r = run_bounded(std::string("simulate --set attention.scale=1e308 --set init.n=16 --set run.save_every=1 ") +
                                 "--set 'run.integrator=\"" + integrator + "\"' --set 'dtype=\"" + dtype + "\"' --out " +
                                 out.string());
      EXPECT_EQ(r.exit_code, 1) << r.stderr_text;
      EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
      EXPECT_NE(r.stderr_text.find("simulate failed: step 1 (t = 0 to "), std::string::npos) << r.stderr_text;
      EXPECT_NE(r.stderr_text.find("the attention velocity Gamma(x) is not finite"), std::string::npos);
      const auto summary = testing::read_summary(out);
      EXPECT_EQ(summary.value("status", ""), "failed");
      EXPECT_EQ(summary.value("t_final", -1.0), 0.0);
      for (const auto& entry : fs::directory_iterator(out)) {
        if (entry.path().extension() != ".npy") continue;
        const NpyArray a = read_npy(entry.path());
        for (double v : a.data) EXPECT_TRUE(std::isfinite(v)) << entry.path();
      }
    }
}

// ---- 9. messages: what they echo and whom they blame ------------------------------------------
TEST(HostileInputMessages, HugeKeysAndValuesAreEchoedCappedOnOneLine) {
  const auto dir = testing::temp_dir("hostile-echo");
  const std::string huge(100000, 'K');
  // 1 MiB: four orders of magnitude past the 80 characters echoed, and below kMaxConfigBytes so
  // that the reader parses it (a 10 MiB value took 21 s to parse under the sanitizers' coverage).
  write(dir / "big_value.toml", "[attention]\nkind = \"" + std::string(1 << 20, 'A') + "\"\n");
  const std::vector<std::string> commands{
      "simulate --set " + huge + "=1 --out " + (dir / "o1").string(),
      "simulate --set attention.kind=" + huge + " --out " + (dir / "o2").string(),
      "simulate --config " + (dir / "big_value.toml").string() + " --out " + (dir / "o3").string(),
      "ot --x a.npy --y b.npy --operator " + huge + " --out " + (dir / "o4").string(),
      "wasserstein --x a.npy --y b.npy --p " + huge + " --out " + (dir / "o5").string(),
      "gaussian --set 'run.integrator=\"" + huge + "\"' --out " + (dir / "o6").string()};
  for (const std::string& args : commands) {
    SCOPED_TRACE(args.substr(0, 60));
    const auto r = run_bounded(args, 60);
    expect_refused(r, {"..."});
    // "tokenflow: SOURCE: KEY: " (the source a path under the temp folder) and the detail, with at
    // most 80 characters of the value (echo.hpp, kEchoLimit).
    EXPECT_LT(r.stderr_text.size(), 400u) << r.stderr_text;
  }
}

TEST(HostileInputMessages, EchoKeepsShortValuesAndEscapesControlBytes) {
  EXPECT_EQ(echo("attention.kind"), "attention.kind");
  EXPECT_EQ(echo(std::string(80, 'a')), std::string(80, 'a'));
  EXPECT_EQ(echo(std::string(81, 'a')), std::string(80, 'a') + "...");
  EXPECT_EQ(echo("a\nb\tc\x01"), "a\\nb\\tc\\x01");
  // A cut never splits a UTF-8 character: 79 ASCII bytes then a 2-byte character are 80 kept.
  const std::string utf8 = std::string(79, 'a') + "\xc3\xa9" + "zzz";
  EXPECT_EQ(echo(utf8), std::string(79, 'a') + "\xc3\xa9...");
  const std::string path = "/some/path/of/ordinary/length/" + std::string(100, 'p') + ".npy";
  EXPECT_EQ(bounded_line("tokenflow: " + path + ": bad"), "tokenflow: " + path + ": bad");
  EXPECT_EQ(bounded_line("x " + std::string(1000, 'v') + " \ny"), "x " + std::string(80, 'v') + "... \\ny");
}

TEST(HostileInputMessages, UnknownKeyGivenWithSetBlamesSet) {
  const auto dir = testing::temp_dir("hostile-blame-set");
  for (const char* command : {"simulate", "gaussian", "meanfield", "stability", "train"}) {
    SCOPED_TRACE(command);
    const auto r = run_bounded(std::string(command) + " --set nosuch.key=1 --out " + (dir / command).string());
    expect_refused(r, {"tokenflow: --set: nosuch: unknown key"});
    EXPECT_EQ(r.stderr_text.find("defaults"), std::string::npos) << r.stderr_text;
  }
  // With a config file too, the key that only --set gave is blamed on --set.
  write(dir / "c.toml", "[run]\nT = 0.1\n");
  const auto r = run_bounded("simulate --config " + (dir / "c.toml").string() + " --set run.nosuch=1 --out " +
                             (dir / "with-file").string());
  expect_refused(r, {"tokenflow: --set: run.nosuch: unknown key"});
  // A value that overflows the moment ODE's rates with moderate moments blames the attention.
  const auto g = run_bounded("gaussian --set attention.scale=1e308 --out " + (dir / "g").string());
  expect_refused(g, {"tokenflow: --set: attention: its parameters"});
}

TEST(HostileInputMessages, SetNumberOutOfRangeSaysSoNotNotAString) {
  const auto dir = testing::temp_dir("hostile-range");
  const auto r = run_bounded("simulate --set run.T=1e999 --out " + (dir / "a").string());
  expect_refused(r, {"--set: run.T: 1e999 is out of the range of a double"});
  EXPECT_EQ(r.stderr_text.find("string"), std::string::npos) << r.stderr_text;
  const auto negative = run_bounded("simulate --set run.dt=-1e999 --out " + (dir / "b").string());
  expect_refused(negative, {"--set: run.dt: -1e999 is out of the range of a double"});
  const auto big = run_bounded("simulate --set init.n=99999999999999999999999 --out " + (dir / "c").string());
  expect_refused(big, {"--set: init.n: 99999999999999999999999 is out of the range of a 64-bit integer"});
}

TEST(HostileInputMessages, WassersteinBlamesTheFileThatIsBad) {
  const auto dir = testing::temp_dir("hostile-wasserstein-blame");
  std::mt19937_64 rng(testing::fresh_seed());
  testing::save_npy(dir / "good.npy", testing::RowMatrix(testing::random_matrix(rng, 6, 2, 1.0)));
  testing::save_npy(dir / "three.npy", testing::RowMatrix(testing::random_matrix(rng, 6, 3, 1.0)));
  testing::RowMatrix nan = testing::random_matrix(rng, 6, 2, 1.0);
  nan(2, 1) = NAN;
  testing::save_npy(dir / "nan.npy", nan);
  write(dir / "corrupt.npy", "\x93NUMPY garbage");
  testing::save_npy(dir / "huge.npy", testing::RowMatrix(testing::RowMatrix::Constant(6, 2, 1e200)));  // costs overflow
  for (const char* bad : {"nan.npy", "corrupt.npy", "huge.npy"}) {
    SCOPED_TRACE(bad);
    for (const char* method : {"auto", "exact", "sinkhorn"}) {
      const auto r = run_bounded("wasserstein --x " + (dir / bad).string() + " --y " + (dir / "good.npy").string() +
                                 " --method " + method + " --out " + (dir / "o").string());
      expect_refused(r, {(dir / bad).string() + ": --x:"});
      EXPECT_EQ(r.stderr_text.find("--y"), std::string::npos) << r.stderr_text;
      // The same file as --y is blamed as --y.
      const auto ry = run_bounded("wasserstein --x " + (dir / "good.npy").string() + " --y " + (dir / bad).string() +
                                  " --method " + method + " --out " + (dir / "o").string());
      expect_refused(ry, {(dir / bad).string() + ": --y:"});
    }
  }
  // Dimensions that differ: neither file alone is bad, the message names both.
  const auto r = run_bounded("wasserstein --x " + (dir / "three.npy").string() + " --y " + (dir / "good.npy").string() +
                             " --out " + (dir / "o").string());
  expect_refused(r, {"--x, --y:", "--x have dimension 3", "--y dimension 2"});
}

TEST(HostileInputMessages, EmbedRefusesTheSameWordTwiceNamingBothLines) {
  const auto dir = testing::temp_dir("hostile-embed-twice");
  write(dir / "v.txt", "the 0.1 0.2\ncat 0.3 0.4\nsat 0.5 0.6\nthe 0.7 0.8\n");
  const auto r = run_bounded("embed --vectors " + (dir / "v.txt").string() + " --text 'the cat' --out " +
                             (dir / "o").string());
  expect_refused(r, {(dir / "v.txt").string() + ": line 4: the word 'the' already has a vector on line 1"});
  EXPECT_FALSE(fs::exists(dir / "o" / "summary.json"));
  // Words that differ only in case are distinct entries (the first is looked up).
  const WordVectors v = parse_word_vectors("The 1 2\nthe 3 4\n", "mixed.txt");
  EXPECT_EQ(v.words.size(), 2u);
}

TEST(HostileInputNpy, HeaderWithADuplicatedOrExtraKeyIsRefused) {
  const auto npy = [](const std::string& dict) {
    std::string header = dict;
    while ((header.size() + 11) % 64 != 0) header += ' ';
    header += '\n';
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    bytes += header;
    const double values[2] = {1.0, 2.0};
    bytes.append(reinterpret_cast<const char*>(values), sizeof values);
    return bytes;
  };
  // numpy's own header reads (spaces and the trailing comma as numpy writes them).
  const NpyArray ok = parse_npy(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }"), "ok.npy", "--x");
  EXPECT_EQ(ok.data, (std::vector<double>{1.0, 2.0}));
  struct Case {
    const char* dict;
    const char* message;
  };
  for (const Case& c : {Case{"{'descr': '<f8', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                             "the key 'descr' appears more than once"},
                        Case{"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'shape': (1,), }",
                             "the key 'shape' appears more than once"},
                        Case{"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1, }",
                             "unexpected key 'extra'"},
                        Case{"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 7: 1}", "a key that is not a string"}}) {
    SCOPED_TRACE(c.dict);
    try {
      parse_npy(npy(c.dict), "dup.npy", "--x");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.source(), "dup.npy");
      EXPECT_EQ(e.key(), "--x");
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tokenflow
