// No exit 0 over a result that is not a result, and no silent non-convergence: inputs the
// arithmetic cannot carry are refused up front (exit 2, one line naming the key), results are
// verified before they are committed (status "failed" with a reason, exit 1), dopri5 stalls are
// reported as such (status "stalled", exit 1), and a Sinkhorn solve stopped at max_iter says so on
// stderr. Each test drives the CLI as a user does, or the library where the CLI cannot reach.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/model.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/ot_solve.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;
using testing::read_summary;
using testing::run_cli;
using testing::RowMatrix;
using testing::save_npy;


long lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

// Two small clouds in R^2 written to dir/x.npy and dir/y.npy, scaled by `scale`.
std::string clouds(const fs::path& dir, double scale, Eigen::Index n = 6) {
  std::mt19937_64 rng(testing::fresh_seed());
  save_npy(dir / "x.npy", RowMatrix(scale * testing::random_matrix(rng, n, 2, 1.0)));
  save_npy(dir / "y.npy", RowMatrix(scale * (testing::random_matrix(rng, n, 2, 1.0).array() + 1.0).matrix()));
  return "--x " + (dir / "x.npy").string() + " --y " + (dir / "y.npy").string();
}

// Exit 2, one line on stderr naming `key`, no output directory left.
void expect_refused(const testing::CliResult& r, const fs::path& out, const std::string& key) {
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_EQ(lines(r.stderr_text), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find(key + ": "), std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find("0.000000"), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(fs::exists(out / "summary.json"));
}

// ---- ot -------------------------------------------------------------------------------------------

TEST(NonResultOt, EpsilonBelowWhatTheCostsAllowIsRefused) {
  const fs::path dir = testing::temp_dir("nonresult-ot-eps");
  const std::string xy = clouds(dir, 1.0);
  for (const char* eps : {"1e-300", "1e-320", "1e-17"}) {
    const auto r = run_cli("ot " + xy + " --epsilon " + eps + " --out " + (dir / "out").string());
    expect_refused(r, dir / "out", "--epsilon");
  }
  // The message names the smallest epsilon the costs allow (max|C| 2^-50), in %g style.
  const auto r = run_cli("ot " + xy + " --epsilon 1e-300 --out " + (dir / "out").string());
  EXPECT_NE(r.stderr_text.find("use epsilon >= "), std::string::npos) << r.stderr_text;
}

TEST(NonResultOt, CostsOutOfRangeAreRefused) {
  const fs::path dir = testing::temp_dir("nonresult-ot-cost");
  // A cost matrix of -1e300: Sinkhorn's "plan" summed to 20 with marginal error 0 before.
  save_npy(dir / "C.npy", RowMatrix(RowMatrix::Constant(4, 5, -1e300)));
  for (const char* method : {"sinkhorn", "exact"}) {
    const auto r = run_cli("ot --cost-matrix " + (dir / "C.npy").string() + " --method " + method + " --out " +
                           (dir / "out").string());
    expect_refused(r, dir / "out", "--cost-matrix");
    EXPECT_NE(r.stderr_text.find("1e+300"), std::string::npos) << r.stderr_text;
  }
  // Points whose squared distances overflow: refused naming the cloud with the larger
  // coordinates (and its file); here x is 1e160 and y of order 1.
  std::mt19937_64 rng(testing::fresh_seed());
  save_npy(dir / "x.npy", RowMatrix(1e160 * testing::random_matrix(rng, 6, 2, 1.0)));
  save_npy(dir / "y.npy", RowMatrix(testing::random_matrix(rng, 5, 2, 1.0)));
  const auto r = run_cli("ot --x " + (dir / "x.npy").string() + " --y " + (dir / "y.npy").string() + " --out " +
                         (dir / "out").string());
  expect_refused(r, dir / "out", "--x");
  EXPECT_NE(r.stderr_text.find((dir / "x.npy").string()), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("not finite"), std::string::npos) << r.stderr_text;
}

TEST(NonResultOt, SmallEpsilonWithSmallCostsStillSolves) {
  // max|C| ~ 1e-11 at epsilon 1e-12: C / epsilon ~ 10, an ordinary problem at another scale.
  const fs::path dir = testing::temp_dir("nonresult-ot-small");
  const std::string xy = clouds(dir, 1e-6);
  const auto r = run_cli("ot " + xy + " --epsilon 1e-12 --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_summary(dir / "out")["status"], "converged");
  EXPECT_EQ(r.stderr_text, "");
}

TEST(NonResultOt, MaxIterSaysSoOnStderrInOneLine) {
  const fs::path dir = testing::temp_dir("nonresult-ot-maxiter");
  const std::string xy = clouds(dir, 1.0);
  const auto r = run_cli("ot " + xy + " --epsilon 0.01 --max-iter 2 --out " + (dir / "out").string());
  // Exit 0 as documented (docs/ot.md: the unconverged potentials are reported honestly), but the
  // status and a warning line say it did not converge.
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = read_summary(dir / "out");
  EXPECT_EQ(s["status"], "max_iter");
  EXPECT_EQ(s["converged"], false);
  EXPECT_EQ(lines(r.stderr_text), 1) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.rfind("tokenflow: warning: Sinkhorn stopped at max_iter = 2 with marginal error ", 0), 0u)
      << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("> tol 1e-09"), std::string::npos) << r.stderr_text;
}

TEST(NonResultOt, ResultChecksFlagWhatIsNotAPlan) {
  const Eigen::VectorXd a = Eigen::VectorXd::Constant(4, 0.25), b = Eigen::VectorXd::Constant(5, 0.2);
  // An honest plan (the product coupling) passes; then each way of not being a plan is named.
  SinkhornResult r;
  r.f = Eigen::VectorXd::Zero(4);
  r.g = Eigen::VectorXd::Zero(5);
  r.plan = a * b.transpose();
  r.plan_mass = 1.0;
  EXPECT_EQ(sinkhorn_result_defect(r, a, b, 1.0, 0.1), "");
  SinkhornResult inf = r;
  inf.plan(1, 2) = INFINITY;
  EXPECT_NE(sinkhorn_result_defect(inf, a, b, 1.0, 0.1).find("non-finite entry"), std::string::npos);
  SinkhornResult heavy = r;  // what the -1e300 cost matrix gave: mass 20, marginal error 0
  heavy.plan *= 20.0;
  heavy.plan_mass = 20.0;
  EXPECT_NE(sinkhorn_result_defect(heavy, a, b, 1.0, 0.1).find("mass"), std::string::npos);
  SinkhornResult nan_cost = r;
  nan_cost.cost = NAN;
  EXPECT_NE(sinkhorn_result_defect(nan_cost, a, b, 1.0, 0.1).find("cost"), std::string::npos);
  EXPECT_NE(coupling_defect(heavy.plan, a, b, 1e-9, 1e-9).find("row sums"), std::string::npos);
  // The summary of a failed solve carries the status and the reason.
  OTSolution s;
  s.method = "sinkhorn";
  s.status = "failed";
  s.reason = "the plan has a non-finite entry";
  const auto j = nlohmann::json::parse(ot_summary_json(s, 0.0));
  EXPECT_EQ(j["status"], "failed");
  EXPECT_EQ(j["reason"], s.reason);
  EXPECT_EQ(ot_convergence_warning(s), "");
}

// ---- simulate -------------------------------------------------------------------------------------

TEST(NonResultSimulate, StepsThatCannotAdvanceTimeAreRefused) {
  const fs::path dir = testing::temp_dir("nonresult-dt");
  // t + 1e-300 == t: this run reported "finished" at t = 0 for T = 1 before.
  for (const char* integrator : {"rk4", "euler"}) {
    const auto r = run_cli(std::string("simulate --set init.n=8 --set run.dt=1e-300 --set run.integrator=") +
                           integrator + " --out " + (dir / "out").string());
    expect_refused(r, dir / "out", "run.dt");
  }
  // A step larger than T is one step to T (it took none before).
  const auto r = run_cli("simulate --set init.n=8 --set run.dt=1e10 --out " + (dir / "big").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = read_summary(dir / "big");
  EXPECT_EQ(s["status"], "finished");
  EXPECT_EQ(s["t_final"], 1.0);
  EXPECT_EQ(s["steps"], 1);
}

TEST(NonResultSimulate, ToleranceBelowDoublePrecisionIsRefused) {
  const fs::path dir = testing::temp_dir("nonresult-tol");
  for (const char* command : {"simulate --set init.n=8", "gaussian"}) {
    const auto r = run_cli(std::string(command) + " --set run.integrator=dopri5 --set run.tol=1e-300 --out " +
                           (dir / "out").string());
    expect_refused(r, dir / "out", "run.tol");
  }
}

// dx/dt = -1e17 (softmax average): stable but so stiff that explicit steps must stay below
// ~3.3e-17 (dopri5's stability interval on the negative axis is ~3.3), under the floor at t = 0,
// 2^-46 dt = 1.4e-16: a stall, not a blow-up (nothing grows).
constexpr const char* kStiff = "--set 'attention.V=[[-1e17, 0.0], [0.0, -1e17]]' --set run.integrator=dopri5";

TEST(NonResultSimulate, Dopri5StallIsReportedAsStalled) {
  AttentionSpec spec;
  spec.V = -1e17 * Eigen::MatrixXd::Identity(2, 2);
  const AttentionParams p = make_attention(spec, 2);
  std::mt19937_64 rng(testing::fresh_seed());
  const Measure<double> mu = testing::random_measure(rng, 8, 2, false);
  RunSpec run;
  run.integrator = Integrator::dopri5;
  const SimulationResult<double> r = simulate(p, run, mu);
  EXPECT_EQ(r.status, "stalled");
  EXPECT_LT(r.t_final, run.T);
  EXPECT_NE(r.reason.find("dopri5 stalled at t = "), std::string::npos) << r.reason;
  EXPECT_TRUE(r.positions.allFinite());

  const fs::path dir = testing::temp_dir("nonresult-stall");
  const auto cli = run_cli(std::string("simulate --set init.n=8 ") + kStiff + " --out " + (dir / "out").string());
  EXPECT_EQ(cli.exit_code, 1) << cli.stderr_text;
  EXPECT_EQ(lines(cli.stderr_text), 1) << cli.stderr_text;
  EXPECT_NE(cli.stderr_text.find("simulate stalled: dopri5 stalled at t = "), std::string::npos) << cli.stderr_text;
  const auto s = read_summary(dir / "out");
  EXPECT_EQ(s["status"], "stalled");
  EXPECT_NE(s["reason"].get<std::string>().find("floor"), std::string::npos);
}

TEST(NonResultSimulate, BlowupIsStillBlowup) {
  // Linear attention blows up in finite time: dopri5 reports "blowup", not "stalled", with the
  // default threshold and with one so large that the step floor is reached first.
  AttentionSpec spec;
  spec.kind = "linear";
  const AttentionParams p = make_attention(spec, 2);
  std::mt19937_64 rng(testing::fresh_seed());
  const Measure<double> mu = testing::random_measure(rng, 8, 2, false);
  for (double threshold : {1e6, 1e300}) {
    RunSpec run;
    run.T = 100.0;
    run.integrator = Integrator::dopri5;
    run.blowup = threshold;
    const auto r = simulate(p, run, mu);
    EXPECT_EQ(r.status, "blowup") << threshold << " " << r.reason;
    EXPECT_LT(r.t_final, run.T);
  }
}

// ---- gaussian -------------------------------------------------------------------------------------

TEST(NonResultGaussian, MomentsOutOfRangeAreRefused) {
  const fs::path dir = testing::temp_dir("nonresult-gaussian");
  // cov = 1e300 I: the rates S A S overflow; this reported "converged" at t = 0 before.
  auto r = run_cli("gaussian --set 'init.cov=[[1e300, 0.0], [0.0, 1e300]]' --set run.blowup=1e308 --out " +
                   (dir / "out").string());
  expect_refused(r, dir / "out", "init.cov");
  EXPECT_NE(r.stderr_text.find("overflow"), std::string::npos) << r.stderr_text;
  // Past run.blowup before the first step.
  r = run_cli("gaussian --set 'init.cov=[[1e300, 0.0], [0.0, 1e300]]' --out " + (dir / "out").string());
  expect_refused(r, dir / "out", "init.cov");
  EXPECT_NE(r.stderr_text.find("run.blowup"), std::string::npos) << r.stderr_text;
}

TEST(NonResultGaussian, Dopri5StallIsReportedAsStalled) {
  const fs::path dir = testing::temp_dir("nonresult-gaussian-stall");
  const auto r = run_cli(std::string("gaussian ") + kStiff + " --out " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 1) << r.stderr_text;
  EXPECT_EQ(lines(r.stderr_text), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("gaussian stalled: dopri5 stalled at t = "), std::string::npos) << r.stderr_text;
  const auto s = read_summary(dir / "out");
  EXPECT_EQ(s["status"], "stalled");
  EXPECT_TRUE(s["blowup_time"].is_null());
}

// ---- couple ---------------------------------------------------------------------------------------

fs::path model_file(const fs::path& dir, double epsilon, double fill) {
  ModelConfig c;
  c.width = 8;
  c.heads = 2;
  c.k = 4;
  c.layers = 1;
  c.sinkhorn.epsilon = epsilon;
  SinkhornTransformer model;
  model.config = c;
  model.params = init_parameters(ParameterLayout(c), 3);
  if (fill != 0.0) std::fill(model.params.begin(), model.params.end(), fill);
  model.config_toml = fmt::format("[model]\nd = 2\nwidth = 8\nlayers = 1\nheads = 2\nk = 4\nepsilon = {:g}\n", epsilon);
  save_model(dir / "model.bin", model);
  return dir / "model.bin";
}

TEST(NonResultCouple, EpsilonTooSmallForTheCostsIsRefused) {
  const fs::path dir = testing::temp_dir("nonresult-couple-eps");
  const fs::path model = model_file(dir, 1e-300, 0.0);
  const std::string xy = clouds(dir, 1.0);
  const auto r = run_cli("couple --model " + model.string() + " " + xy + " --out " + (dir / "out").string());
  expect_refused(r, dir / "out", "--model");
  EXPECT_NE(r.stderr_text.find("model.epsilon = 1e-300"), std::string::npos) << r.stderr_text;
}

TEST(NonResultCouple, NonFinitePlanFails) {
  // Parameters of 1e308 overflow the encoders: the plan is NaN, which was written with status
  // "finished" before.
  const fs::path dir = testing::temp_dir("nonresult-couple-nan");
  const fs::path model = model_file(dir, 1.0, 1e308);
  const std::string xy = clouds(dir, 1.0);
  const auto r = run_cli("couple --model " + model.string() + " " + xy + " --out " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 1) << r.stderr_text;
  EXPECT_EQ(lines(r.stderr_text), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("couple failed: "), std::string::npos) << r.stderr_text;
  const auto s = read_summary(dir / "out");
  EXPECT_EQ(s["status"], "failed");
  EXPECT_FALSE(s["reason"].get<std::string>().empty());
  EXPECT_FALSE(fs::exists(dir / "out" / "plan.npy"));
}

}  // namespace
}  // namespace tokenflow
