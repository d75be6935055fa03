// `tokenflow ot` and `tokenflow wasserstein` end to end: the outputs of docs/design.md section 2 against
// the library, the marginals of plan.npy, and bad inputs (exit 2, one line, nothing written).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/wasserstein.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;
using testing::read_summary;
using testing::run_cli;
using testing::RowMatrix;
using testing::save_npy;

using testing::cost_matrix;

RowMatrix load_matrix(const fs::path& path) {
  const NpyArray arr = read_npy(path);
  EXPECT_EQ(arr.shape.size(), 2u);
  RowMatrix m(static_cast<Eigen::Index>(arr.shape[0]), static_cast<Eigen::Index>(arr.shape[1]));
  std::copy(arr.data.begin(), arr.data.end(), m.data());
  return m;
}

// The int64 array of a version-1.0 .npy file (tokenflow's reader takes floats only): the 10-byte
// preamble gives the header's length, the data follows it.
std::vector<std::int64_t> load_int64_npy(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GE(bytes.size(), 10u);
  const std::size_t header = 10 + static_cast<unsigned char>(bytes[8]) + 256 * static_cast<unsigned char>(bytes[9]);
  EXPECT_NE(bytes.substr(10, header - 10).find("'descr': '<i8'"), std::string::npos);
  std::vector<std::int64_t> values((bytes.size() - header) / sizeof(std::int64_t));
  std::memcpy(values.data(), bytes.data() + header, values.size() * sizeof(std::int64_t));
  return values;
}

Eigen::VectorXd load_vector(const fs::path& path) {
  const NpyArray arr = read_npy(path);
  return Eigen::Map<const Eigen::VectorXd>(arr.data.data(), static_cast<Eigen::Index>(arr.size()));
}

struct Clouds {
  fs::path dir;
  RowMatrix x, y;
  Eigen::VectorXd a, b;  // normalized as the CLI normalizes them
};

Clouds make_clouds(const std::string& name, Eigen::Index n, Eigen::Index m, Eigen::Index d) {
  std::mt19937_64 rng(testing::fresh_seed());
  Clouds c{testing::temp_dir(name),
           testing::random_matrix(rng, n, d, 1.0),
           testing::random_matrix(rng, m, d, 1.0),
           {},
           {}};
  std::uniform_real_distribution<double> uni(0.5, 1.5);
  c.a.resize(n);
  c.b.resize(m);
  for (auto& v : c.a) v = uni(rng);
  for (auto& v : c.b) v = uni(rng);
  save_npy(c.dir / "x.npy", c.x);
  save_npy(c.dir / "y.npy", c.y);
  save_npy(c.dir / "a.npy", c.a);  // unnormalized on disk: the CLI normalizes
  save_npy(c.dir / "b.npy", c.b);
  // Normalized as the CLI does (make_measure), so that library runs on them are the same
  // computation.
  c.a = make_measure<double>(c.x, c.a).weights;
  c.b = make_measure<double>(c.y, c.b).weights;
  return c;
}

std::string files(const Clouds& c) {
  return "--x " + (c.dir / "x.npy").string() + " --y " + (c.dir / "y.npy").string() + " --a " +
         (c.dir / "a.npy").string() + " --b " + (c.dir / "b.npy").string();
}

TEST(OtCli, SinkhornWritesTheContractOutputsAndMatchesTheLibrary) {
  const Clouds c = make_clouds("ot-sinkhorn", 40, 25, 3);
  const fs::path out = c.dir / "out";
  // The iterations Sinkhorn needs to reach tol depend on the clouds, without a bound worth using
  // (at epsilon = 0.2 one draw of these Gaussian clouds needed 30 943): the run may stop at
  // max_iter, and must then say so. Either way the outputs are the contract's.
  const auto r = run_cli("ot " + files(c) + " --epsilon 0.2 --tol 1e-10 --max-iter 100000 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = read_summary(out);
  for (const char* k : {"command", "status", "wall_seconds", "cost", "objective", "iterations",
                        "marginal_error", "method", "converged", "epsilon", "operator"})
    EXPECT_TRUE(s.contains(k)) << k;
  EXPECT_EQ(s["command"], "ot");
  const bool converged = s["marginal_error"].get<double>() < 1e-10;
  EXPECT_EQ(s["converged"].get<bool>(), converged);
  EXPECT_EQ(s["status"], converged ? "converged" : "max_iter");
  if (!converged) {
    EXPECT_EQ(s["iterations"].get<int>(), 100000);
  }
  EXPECT_EQ(s["operator"], "dense");
  const RowMatrix plan = load_matrix(out / "plan.npy");
  ASSERT_EQ(plan.rows(), 40);
  ASSERT_EQ(plan.cols(), 25);
  EXPECT_EQ(load_vector(out / "f.npy").size(), 40);
  EXPECT_EQ(load_vector(out / "g.npy").size(), 25);
  // Marginals of plan.npy: columns exact (sums of 40 rounded entries), rows within tol, and the
  // reported marginal error is the plan's own (computed two ways, agreeing to rounding).
  EXPECT_LE((plan.colwise().sum().transpose() - c.b).cwiseAbs().sum(), 1e-14);
  const double row_error = (plan.rowwise().sum() - c.a).cwiseAbs().sum();
  if (converged) {
    EXPECT_LE(row_error, 1e-10 + 1e-13);
  }
  EXPECT_NEAR(s["marginal_error"].get<double>(), row_error, 1e-13);
  // The same computation as the library with the CLI's defaults (automatic epsilon-scaling).
  const DenseSoftMin op(cost_matrix(CostKind::sqeuclidean, c.x, c.y));
  SinkhornOptions opt;
  opt.epsilon = 0.2;
  opt.tol = 1e-10;
  opt.max_iter = 100000;
  opt.epsilon_start = automatic_epsilon_start(op, opt.epsilon);
  EXPECT_EQ(s["epsilon_start"].get<double>(), opt.epsilon_start);
  const SinkhornResult lib = sinkhorn(op, c.a, c.b, opt);
  EXPECT_EQ(s["iterations"].get<int>(), lib.iterations);
  EXPECT_DOUBLE_EQ(s["cost"].get<double>(), lib.cost);
  EXPECT_DOUBLE_EQ(s["objective"].get<double>(), lib.objective);
  // Only the outputs: no staging directory left behind.
  EXPECT_EQ(testing::output_entries(out), 4);
}

TEST(OtCli, ExactMatchesTheLibrary) {
  const Clouds c = make_clouds("ot-exact", 30, 35, 2);
  const fs::path out = c.dir / "out";
  const auto r =
      run_cli("ot " + files(c) + " --method exact --cost euclidean --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = read_summary(out);
  EXPECT_EQ(s["status"], "optimal");
  EXPECT_TRUE(s["iterations"].is_null());
  const ExactOTResult lib = exact_ot(cost_matrix(CostKind::euclidean, c.x, c.y), c.a, c.b);
  // Up to the rounding of the weights' normalization (~1e-16 relative per mass).
  EXPECT_NEAR(s["cost"].get<double>(), lib.cost, 1e-13 * lib.cost);
  EXPECT_EQ(s["objective"].get<double>(), s["cost"].get<double>());
  // The plan is written sparse by default: its entries that are not zero, in row order, at most
  // n + m - 1 of them (a vertex of the transport polytope).
  EXPECT_EQ(s["plan_format"], "sparse");
  EXPECT_FALSE(fs::exists(out / "plan.npy"));
  const std::vector<std::int64_t> indices = load_int64_npy(out / "plan_indices.npy");
  const Eigen::VectorXd masses = load_vector(out / "plan_masses.npy");
  const auto k = static_cast<std::size_t>(masses.size());
  ASSERT_EQ(indices.size(), 2 * k);
  EXPECT_EQ(s["plan_entries"].get<std::size_t>(), k);
  EXPECT_LE(k, static_cast<std::size_t>(30 + 35 - 1));
  RowMatrix plan = RowMatrix::Zero(30, 35);
  for (std::size_t e = 0; e < k; ++e) {
    if (e > 0) {
      EXPECT_LT(indices[2 * (e - 1)] * 35 + indices[2 * e - 1], indices[2 * e] * 35 + indices[2 * e + 1]);
    }
    EXPECT_GT(masses(static_cast<Eigen::Index>(e)), 0.0);
    plan(indices[2 * e], indices[2 * e + 1]) = masses(static_cast<Eigen::Index>(e));
  }
  // Masses in units of 2^-52, one unit of rounding per mass; sums of at most n + m flows.
  EXPECT_LE((plan.rowwise().sum() - c.a).cwiseAbs().maxCoeff(), 2 * 0x1p-52);
  EXPECT_LE((plan.colwise().sum().transpose() - c.b).cwiseAbs().maxCoeff(), 2 * 0x1p-52);
  // --dense-plan: plan.npy, the same plan.
  const fs::path dense = c.dir / "dense";
  ASSERT_EQ(run_cli("ot " + files(c) + " --method exact --cost euclidean --dense-plan --out " + dense.string()).exit_code,
            0);
  EXPECT_EQ(read_summary(dense)["plan_format"], "dense");
  EXPECT_FALSE(fs::exists(dense / "plan_indices.npy"));
  EXPECT_EQ(load_matrix(dense / "plan.npy"), plan);
}

TEST(OtCli, OnlineOperatorAndCostMatrixAgreeWithDense) {
  const Clouds c = make_clouds("ot-online", 35, 30, 3);
  const std::string common = files(c) + " --cost dot --epsilon 0.5 --tol 1e-11 --epsilon-start off";
  ASSERT_EQ(
      run_cli("ot " + common + " --operator dense --out " + (c.dir / "dense").string()).exit_code,
      0);
  const auto r =
      run_cli("ot " + common + " --operator online --out " + (c.dir / "online").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_summary(c.dir / "online")["operator"], "online");
  // The same iteration, summation order only (see test_ot.cpp, DenseOnlineAndReferenceAgree).
  const RowMatrix dense = load_matrix(c.dir / "dense" / "plan.npy"),
                  online = load_matrix(c.dir / "online" / "plan.npy");
  EXPECT_LE((dense - online).cwiseAbs().maxCoeff(), 1e-12);
  // The same cost given as a matrix: the dense run up to the rounding of the weights' normalization
  // (summed in another order: ~1e-16 relative, carried through a contraction).
  save_npy(c.dir / "C.npy", cost_matrix(CostKind::dot, c.x, c.y));
  const auto rc = run_cli("ot --cost-matrix " + (c.dir / "C.npy").string() + " --a " +
                          (c.dir / "a.npy").string() + " --b " + (c.dir / "b.npy").string() +
                          " --epsilon 0.5 --tol 1e-11 --epsilon-start off --out " +
                          (c.dir / "matrix").string());
  ASSERT_EQ(rc.exit_code, 0) << rc.stderr_text;
  EXPECT_EQ(read_summary(c.dir / "matrix")["ground_cost"], "matrix");
  EXPECT_LE((load_matrix(c.dir / "matrix" / "plan.npy") - dense).cwiseAbs().maxCoeff(), 1e-12);
}

TEST(OtCli, DivergenceOfACloudWithItselfIsZero) {
  Clouds c = make_clouds("ot-divergence", 30, 30, 2);
  save_npy(c.dir / "y.npy", c.x);
  save_npy(c.dir / "b.npy", c.a);
  const fs::path out = c.dir / "out";
  const auto r =
      run_cli("ot " + files(c) + " --divergence --epsilon 0.1 --tol 1e-7 --max-iter 20000 --out " +
              out.string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = read_summary(out);
  const auto& t = s["divergence_terms"];
  // Each term is within (its marginal error) R / 2 of OT_eps (test_ot.cpp), R the cost range,
  // converged or not (the cross term is a self-transport, where the alternating loop creeps).
  const RowMatrix C = cost_matrix(CostKind::sqeuclidean, c.x, c.x);
  const double R = C.maxCoeff() - C.minCoeff();
  const double bound =
      0.5 * R *
          (s["marginal_error"].get<double>() + 0.5 * t["xx_marginal_error"].get<double>() +
           0.5 * t["yy_marginal_error"].get<double>()) +
      1e-12 * std::abs(s["objective"].get<double>());
  EXPECT_LE(std::abs(s["divergence"].get<double>()), bound);
  EXPECT_LE(bound, 1e-3);
}

TEST(WassersteinCli, MethodsMatchTheLibrary) {
  const Clouds line = make_clouds("w-line", 50, 40, 1);
  ASSERT_EQ(run_cli("wasserstein " + files(line) + " --p 3 --out " + (line.dir / "out").string())
                .exit_code,
            0);
  auto s = read_summary(line.dir / "out");
  EXPECT_EQ(s["method"], "sorted");
  // The library on the same data, up to the rounding of the weights' normalization (~1e-16).
  const double want_1d = wasserstein_1d(line.x.col(0), line.y.col(0), line.a, line.b, 3.0);
  EXPECT_NEAR(s["value"].get<double>(), want_1d, 1e-13 * want_1d);

  const Clouds c = make_clouds("w-exact", 30, 20, 2);
  ASSERT_EQ(
      run_cli("wasserstein " + files(c) + " --p 1.5 --out " + (c.dir / "exact").string()).exit_code,
      0);
  s = read_summary(c.dir / "exact");
  EXPECT_EQ(s["method"], "exact");
  EXPECT_EQ(s["status"], "optimal");
  const double want_exact = wasserstein_exact(c.x, c.y, c.a, c.b, 1.5);
  EXPECT_NEAR(s["value"].get<double>(), want_exact, 1e-13 * want_exact);

  ASSERT_EQ(run_cli("wasserstein " + files(c) + " --method sinkhorn --out " +
                    (c.dir / "sinkhorn").string())
                .exit_code,
            0);
  s = read_summary(c.dir / "sinkhorn");
  EXPECT_EQ(s["method"], "sinkhorn");
  for (const char* k : {"epsilon", "iterations", "marginal_error", "entropic_bias_bound"})
    EXPECT_TRUE(s.contains(k)) << k;
  EXPECT_GE(s["value"].get<double>(), 0.0);

  // Conditional: one token per position, the same weights.
  Clouds pc = make_clouds("w-conditional", 20, 20, 2);
  save_npy(pc.dir / "b.npy", pc.a);
  const Eigen::VectorXd pos = default_positions<double>(20);
  save_npy(pc.dir / "pos.npy", pos);
  const std::string p = (pc.dir / "pos.npy").string();
  ASSERT_EQ(run_cli("wasserstein " + files(pc) + " --pos-x " + p + " --pos-y " + p + " --out " +
                    (pc.dir / "out").string())
                .exit_code,
            0);
  s = read_summary(pc.dir / "out");
  EXPECT_EQ(s["method"], "conditional");
  const double want = conditional_wasserstein(make_measure<double>(pc.x, pc.a, pos),
                                              make_measure<double>(pc.y, pc.a, pos), 2.0);
  EXPECT_NEAR(s["value"].get<double>(), want, 1e-13 * want);
}

struct OtBadInput {
  std::string name, args, expect_in_message;
};

void PrintTo(const OtBadInput& b, std::ostream* os) {
  *os << b.name;
}

class OtCliBadInput : public ::testing::TestWithParam<OtBadInput> {};

TEST_P(OtCliBadInput, ExitsTwoWithOneLineAndWritesNothing) {
  const OtBadInput& b = GetParam();
  const auto dir = testing::temp_dir("ot-bad-" + b.name);
  const std::vector<double> x{0.0, 1.0, 1.0, 0.0, 2.0, 2.0}, y3{0.0, 1.0, 2.0, 1.0, 0.0, 1.0};
  write_npy(dir / "x.npy", x.data(), {3, 2});
  write_npy(dir / "y.npy", x.data(), {3, 2});
  write_npy(dir / "y3d.npy", y3.data(), {2, 3});
  const std::vector<double> nan_data{0.0, 1.0, std::nan(""), 2.0};
  write_npy(dir / "nan.npy", nan_data.data(), {2, 2});
  const std::vector<double> two{1.0, 2.0}, neg{1.0, -1.0, 1.0}, pos_other{0.0, 0.5, 0.9};
  write_npy(dir / "two.npy", two.data(), {2});
  write_npy(dir / "neg.npy", neg.data(), {3});
  write_npy(dir / "pos.npy", neg.data(), {3});  // -1 is outside [0, 1]
  const std::vector<double> pos_ok{0.0, 0.5, 1.0};
  write_npy(dir / "pos_ok.npy", pos_ok.data(), {3});
  write_npy(dir / "pos_other.npy", pos_other.data(), {3});
  const std::vector<double> c32{1.0, 2.0, 3.0, 4.0, 5.0, 6.0};
  write_npy(dir / "C32.npy", c32.data(), {3, 2});
  write_npy(dir / "Cnan.npy", nan_data.data(), {2, 2});
  constexpr double kForbidden = std::numeric_limits<double>::infinity();
  const std::vector<double> c_row_forbidden{kForbidden, kForbidden, 1.0, 0.0};  // row 0: every pair forbidden
  write_npy(dir / "Cinf.npy", c_row_forbidden.data(), {2, 2});
  std::ofstream(dir / "corrupt.npy") << "\x93NUMPY garbage";
  std::string args = b.args;
  for (std::size_t p; (p = args.find("DIR")) != std::string::npos;)
    args.replace(p, 3, dir.string());
  const auto out = dir / "out";
  const auto r = run_cli(args + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find(b.expect_in_message), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(fs::exists(out)) << "output directory was created";
}

const std::string kXY = "--x DIR/x.npy --y DIR/y.npy";

INSTANTIATE_TEST_SUITE_P(
    Cases, OtCliBadInput,
    ::testing::Values(
        OtBadInput{"nan_points", "ot --x DIR/nan.npy --y DIR/y.npy", "nan.npy: --x: non-finite"},
        OtBadInput{"dimension", "ot --x DIR/x.npy --y DIR/y3d.npy",
                 "y3d.npy: --y: points of dimension 3"},
        OtBadInput{"weights_length", "ot " + kXY + " --a DIR/two.npy",
                 "two.npy: --a: has 2 entries, expected 3"},
        OtBadInput{"negative_weight", "ot " + kXY + " --b DIR/neg.npy", "neg.npy: --b:"},
        OtBadInput{"unknown_cost", "ot " + kXY + " --cost l3", "--cost: unknown cost 'l3'"},
        OtBadInput{"unknown_method", "ot " + kXY + " --method emd", "--method: unknown method 'emd'"},
        OtBadInput{"unknown_operator", "ot " + kXY + " --operator gpu",
                 "--operator: unknown operator"},
        OtBadInput{"cost_and_matrix", "ot " + kXY + " --cost euclidean --cost-matrix DIR/C32.npy",
                 "--cost: give either"},
        OtBadInput{"points_and_matrix", "ot " + kXY + " --cost-matrix DIR/C32.npy",
                 "C32.npy: --cost-matrix: give either points (--x and --y) or a cost matrix, not both"},
        OtBadInput{"matrix_and_x", "ot --x DIR/x.npy --cost-matrix DIR/C32.npy", "--cost-matrix: give either"},
        OtBadInput{"matrix_nan", "ot --cost-matrix DIR/Cnan.npy",
                 "Cnan.npy: --cost-matrix: invalid value nan at row 1, column 0"},
        OtBadInput{"matrix_row_forbidden", "ot --cost-matrix DIR/Cinf.npy --method exact",
                 "Cinf.npy: --cost-matrix: row 0 (weight 0.5) has no allowed pair"},
        OtBadInput{"matrix_weights", "ot --cost-matrix DIR/C32.npy --b DIR/neg.npy", "neg.npy: --b:"},
        OtBadInput{"epsilon", "ot " + kXY + " --epsilon -0.1", "--epsilon: must be positive"},
        OtBadInput{"tol", "ot " + kXY + " --tol 0", "--tol: must be positive"},
        OtBadInput{"max_iter", "ot " + kXY + " --max-iter 0", "--max-iter: must be at least 1"},
        OtBadInput{"epsilon_start", "ot " + kXY + " --epsilon-start soon",
                 "--epsilon-start: 'soon' is not"},
        OtBadInput{"missing_y", "ot --x DIR/x.npy", "--y: is required"},
        OtBadInput{"missing_file", "ot --x DIR/none.npy --y DIR/y.npy", "none.npy: --x: cannot open"},
        OtBadInput{"corrupt_file", "ot --x DIR/x.npy --y DIR/corrupt.npy", "corrupt.npy"},
        OtBadInput{"divergence_dot", "ot " + kXY + " --cost dot --divergence",
                 "--divergence: needs a cost"},
        OtBadInput{"divergence_exact", "ot " + kXY + " --method exact --divergence", "--divergence"},
        OtBadInput{"unknown_flag", "ot " + kXY + " --epsilom 0.1",
                 "tokenflow ot: unknown flag '--epsilom' (did you mean '--epsilon'?)"},
        OtBadInput{"pot_reg", "ot " + kXY + " --reg 0.1", "unknown flag '--reg' (did you mean '--epsilon'?)"},
        OtBadInput{"pot_stop", "ot " + kXY + " --stopThr=1e-6", "unknown flag '--stopThr' (did you mean '--tol'?)"},
        OtBadInput{"w_p", "wasserstein " + kXY + " --p 0.5", "--p: must be a finite number >= 1"},
        OtBadInput{"w_sorted_2d", "wasserstein " + kXY + " --method sorted",
                 "--method: sorted needs points of dimension 1"},
        OtBadInput{"w_method", "wasserstein " + kXY + " --method emd",
                 "--method: unknown method 'emd'"},
        OtBadInput{"w_pos_one", "wasserstein " + kXY + " --pos-x DIR/pos_ok.npy",
                 "--pos-y: conditional W_p needs both"},
        OtBadInput{"w_pos_range", "wasserstein " + kXY + " --pos-x DIR/pos.npy --pos-y DIR/pos.npy",
                 "pos.npy: --pos-x:"},
        OtBadInput{"w_pos_mismatch",
                 "wasserstein " + kXY + " --pos-x DIR/pos_ok.npy --pos-y DIR/pos_other.npy",
                 "pos_other.npy: --pos-y: position"},
        OtBadInput{"w_nan", "wasserstein --x DIR/nan.npy --y DIR/y.npy", "nan.npy: --x: non-finite"}),
    [](const auto& test_param) { return test_param.param.name; });

}  // namespace
}  // namespace tokenflow
