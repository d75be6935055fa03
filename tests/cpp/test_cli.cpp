// The CLI end to end: outputs of docs/design.md section 2, and bad inputs that must exit 2 with one
// line naming the file and key and leave nothing in the output directory.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

TEST(Cli, SimulateWritesTheContractOutputs) {
  const auto dir = testing::temp_dir("cli-ok");
  const auto r = run_cli("simulate --set init.n=64 --set run.T=0.2 --set run.save_every=5 --out " +
                         (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  for (const char* f : {"initial.npy", "positions.npy", "trajectory.npy", "times.npy", "diagnostics.csv", "summary.json"})
    EXPECT_TRUE(fs::exists(dir / "out" / f)) << f;
  const auto s = testing::read_summary(dir / "out");
  for (const char* k : {"command", "status", "wall_seconds", "t_final", "steps", "n", "d", "final"}) EXPECT_TRUE(s.contains(k)) << k;
  for (const char* k : {"mean", "cov", "cov_eigenvalues"}) EXPECT_TRUE(s["final"].contains(k)) << k;
  EXPECT_EQ(s["status"], "finished");
  EXPECT_EQ(s["steps"], 20);
  const NpyArray traj = read_npy(dir / "out" / "trajectory.npy");
  EXPECT_EQ(traj.shape, (std::vector<std::size_t>{5, 64, 2}));
  // Only the outputs: no staging directory left behind.
  EXPECT_EQ(testing::output_entries(dir / "out"), 6);
}

// A misspelled command is named, with the nearest command and the list (CLI11 alone says only
// that a subcommand is required); an unrelated word gets the list without a guess.
TEST(Cli, MisspelledCommandSuggestsTheNearest) {
  const auto r = run_cli("simulat --out " + (testing::temp_dir("cli-simulat") / "out").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.stderr_text.rfind("tokenflow: unknown command 'simulat' (did you mean 'simulate'?); one of: ", 0), 0u)
      << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  const auto other = run_cli("xyzzy");
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(other.stderr_text.find("unknown command 'xyzzy'; one of: simulate"), std::string::npos) << other.stderr_text;
  const auto huge = run_cli(std::string(300, 'q'));
  EXPECT_LT(huge.stderr_text.size(), 400u) << "the echoed word is capped";
}

TEST(Cli, Float32OutputsAreFloat32) {
  const auto dir = testing::temp_dir("cli-f32");
  const auto r = run_cli("simulate --set dtype=\\\"f32\\\" --set init.n=32 --set run.T=0.1 --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_TRUE(read_npy(dir / "out" / "positions.npy").was_float32);
}

struct BadInput {
  std::string name, config, args, expect_in_message;
};

void PrintTo(const BadInput& b, std::ostream* os) { *os << b.name; }

class CliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, ExitsTwoWithOneLineAndWritesNothing) {
  const BadInput& b = GetParam();
  const auto dir = testing::temp_dir("cli-bad-" + b.name);
  // Input files the cases refer to.
  const std::vector<double> nan_data{0.0, 1.0, std::nan(""), 2.0};
  write_npy(dir / "nan.npy", nan_data.data(), {2, 2});
  const std::vector<double> three{1.0, 2.0, 3.0};
  write_npy(dir / "three.npy", three.data(), {3});
  const std::vector<double> ok{0.0, 1.0, 1.0, 0.0};
  write_npy(dir / "ok.npy", ok.data(), {2, 2});
  std::ofstream(dir / "corrupt.npy") << "\x93NUMPY garbage";
  std::string config = b.config;
  for (std::size_t pos; (pos = config.find("DIR")) != std::string::npos;) config.replace(pos, 3, dir.string());
  std::ofstream(dir / "cfg.toml") << config;
  const auto out = dir / "out";
  const auto r = run_cli("simulate --config " + (dir / "cfg.toml").string() + " " + b.args + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find(b.expect_in_message), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(fs::exists(out)) << "output directory was created";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInput,
    ::testing::Values(
        BadInput{"nan_points", "[init]\nkind = \"file\"\npath = \"DIR/nan.npy\"\n", "", "nan.npy: init.path: non-finite"},
        BadInput{"nan_config", "[init]\nmean = [0.0, nan]\n", "", "init.mean"},
        BadInput{"inf_matrix", "[attention]\nQ = [[1.0, inf], [0.0, 1.0]]\n", "", "attention.Q"},
        BadInput{"wrong_shape", "[attention]\nQ = [[1.0, 0.0, 0.0]]\n", "", "cfg.toml: attention.Q: is 1 x 3"},
        BadInput{"weights_length", "[init]\nkind = \"file\"\npath = \"DIR/ok.npy\"\nweights = \"DIR/three.npy\"\n", "", "three.npy: init.weights"},
        BadInput{"not_psd", "[init]\ncov = [[1.0, 2.0], [2.0, 1.0]]\n", "", "cfg.toml: init.cov: is not positive semidefinite"},
        BadInput{"not_symmetric", "[init]\ncov = [[1.0, 0.5], [0.0, 1.0]]\n", "", "init.cov: is not symmetric"},
        BadInput{"negative_n", "[init]\nn = -5\n", "", "cfg.toml: init.n"},
        BadInput{"unknown_key", "[run]\nstep = 0.1\n", "", "cfg.toml: run.step: unknown key"},
        BadInput{"unknown_kind", "[attention]\nkind = \"softmx\"\n", "", "did you mean 'softmax'"},
        BadInput{"dt_zero", "[run]\ndt = 0.0\n", "", "cfg.toml: run.dt: must be positive"},
        BadInput{"dt_negative_set", "", "--set run.dt=-1", "--set: run.dt: must be positive"},
        BadInput{"corrupt_npy", "[init]\nkind = \"file\"\npath = \"DIR/corrupt.npy\"\n", "", "corrupt.npy: init.path"},
        BadInput{"missing_npy", "[init]\nkind = \"file\"\npath = \"DIR/none.npy\"\n", "", "none.npy: init.path: cannot open"},
        BadInput{"bad_toml", "[run\nT = 1\n", "", "cfg.toml: invalid TOML"},
        BadInput{"heads_no_k", "[attention]\nheads = 2\nQ = [[1.0, 0.0], [0.0, 1.0]]\n", "", "attention.K"},
        BadInput{"sink_range", "[attention]\nsink = 1.5\n", "", "attention.sink"},
        BadInput{"sinkhorn_causal", "[attention]\nkind = \"sinkhorn\"\nmask = \"causal\"\n", "", "attention.mask"},
        BadInput{"layer_order", "[[layers]]\nuntil = 0.5\n[[layers]]\nuntil = 0.2\n", "", "layers[1].until"},
        BadInput{"wrong_type", "[init]\nn = \"many\"\n", "", "init.n: must be an integer"}),
    [](const auto& test_param) { return test_param.param.name; });

}  // namespace
}  // namespace tokenflow

namespace tokenflow {
namespace {
TEST(CliMoments, WritesTheWeightedMeanAndCovariance) {
  const auto dir = testing::temp_dir("cli-moments");
  using testing::RowMatrix;
  RowMatrix x(3, 2);
  x << 0.0, 0.0, 2.0, 0.0, 0.0, 4.0;
  Eigen::VectorXd w(3);
  w << 0.5, 0.25, 0.25;
  testing::save_npy(dir / "x.npy", x);
  testing::save_npy(dir / "w.npy", w);
  const auto r = run_cli("moments --points " + (dir / "x.npy").string() + " --weights " + (dir / "w.npy").string() +
                         " --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const nlohmann::json s = testing::read_summary(dir / "out");
  // mean = (0.5, 1); cov = sum_i w_i (x_i - m)(x_i - m)^T.
  EXPECT_DOUBLE_EQ(s["mean"][0].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s["mean"][1].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["cov"][0][0].get<double>(), 0.5 * 0.25 + 0.25 * 2.25 + 0.25 * 0.25);
  EXPECT_EQ(s["n"].get<int>(), 3);
  EXPECT_EQ(s["d"].get<int>(), 2);
  // Ascending eigenvalues with the covariance's trace.
  const double c00 = s["cov"][0][0].get<double>(), c11 = s["cov"][1][1].get<double>();
  EXPECT_LE(s["cov_eigenvalues"][0].get<double>(), s["cov_eigenvalues"][1].get<double>());
  EXPECT_NEAR(s["cov_eigenvalues"][0].get<double>() + s["cov_eigenvalues"][1].get<double>(), c00 + c11,
              8 * testing::kEps * (c00 + c11));
  // Bad inputs: exit 2, one line naming the file and flag, nothing written.
  RowMatrix bad = x;
  bad(1, 1) = std::nan("");
  testing::save_npy(dir / "nan.npy", bad);
  Eigen::VectorXd short_w(2);
  short_w << 0.5, 0.5;
  testing::save_npy(dir / "short.npy", short_w);
  RowMatrix huge = 1e200 * x;
  testing::save_npy(dir / "huge.npy", huge);
  const std::string points = " --points " + (dir / "x.npy").string();
  for (const auto& [args, names] : std::vector<std::pair<std::string, std::string>>{
           {" --points " + (dir / "missing.npy").string(), "--points"},
           {" --points " + (dir / "nan.npy").string(), "nan.npy"},
           {points + " --weights " + (dir / "short.npy").string(), "--weights"},
           {" --points " + (dir / "huge.npy").string(), "overflows"}}) {
    const auto bad_run = run_cli("moments" + args + " --out " + (dir / "bad").string());
    EXPECT_EQ(bad_run.exit_code, 2) << args;
    EXPECT_NE(bad_run.stderr_text.find(names), std::string::npos) << bad_run.stderr_text;
    EXPECT_EQ(std::count(bad_run.stderr_text.begin(), bad_run.stderr_text.end(), '\n'), 1) << bad_run.stderr_text;
    EXPECT_FALSE(fs::exists(dir / "bad" / "summary.json")) << args;
  }
}
}  // namespace
}  // namespace tokenflow
