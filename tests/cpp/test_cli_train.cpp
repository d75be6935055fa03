// The train, couple, embed and reproduce commands end to end: the outputs of docs/design.md section 2,
// resume, and bad inputs (exit 2, one line naming the file and key, nothing written).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/model.hpp"
#include "tokenflow/model_file.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;
using testing::read_summary;
using testing::run_cli;
using testing::kUnit64;

const std::string kTiny =
    " --set task.n=6 --set model.width=8 --set model.layers=1 --set model.heads=2 --set model.k=4"
    " --set model.sinkhorn_iters=8 --set train.batch=8 --set train.test_pairs=8 --set train.lr=1e-2"
    " --set train.eval_every=3";


TEST(CliTrain, WritesTheContractOutputsAndCoupleUsesTheModel) {
  const auto dir = testing::temp_dir("cli-train");
  auto r = run_cli("train" + kTiny + " --set train.steps=6 --out " + (dir / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  for (const char* f : {"model.bin", "best_model.bin", "metrics.csv", "summary.json"})
    EXPECT_TRUE(fs::exists(dir / "run" / f)) << f;
  const auto s = read_summary(dir / "run");
  for (const char* k : {"command", "status", "wall_seconds", "test_w1", "test_w1_untrained",
                        "test_w1_independent", "test_accuracy", "steps", "best_step", "best_test_loss"})
    EXPECT_TRUE(s.contains(k)) << k;
  // best_model.bin: the parameters of the evaluation of lowest test loss, with the run's config.
  const SinkhornTransformer best = load_model(dir / "run" / "best_model.bin");
  EXPECT_EQ(best.config_toml, load_model(dir / "run" / "model.bin").config_toml);
  EXPECT_EQ(best.params.size(), load_model(dir / "run" / "model.bin").params.size());
  EXPECT_EQ(s["steps"], 6);
  EXPECT_GE(s["test_w1"].get<double>(), 0.0);
  std::ifstream metrics(dir / "run" / "metrics.csv");
  std::string header, line;
  std::getline(metrics, header);
  EXPECT_EQ(header.rfind("step,loss,test_w1,seconds", 0), 0u) << header;
  int rows = 0;
  while (std::getline(metrics, line)) ++rows;
  EXPECT_EQ(rows, 3);  // steps 0, 3, 6

  // couple: the trained model on new inputs.
  const std::vector<double> x{0.1, 0.2, -0.5, 0.3, 0.9, -0.4},
      y{0.0, 1.0, 1.0, 0.0, 0.5, 0.5, -1.0, -1.0};
  write_npy(dir / "x.npy", x.data(), {3, 2});
  write_npy(dir / "y.npy", y.data(), {4, 2});
  r = run_cli("couple --model " + (dir / "run" / "model.bin").string() + " --x " +
              (dir / "x.npy").string() + " --y " + (dir / "y.npy").string() + " --out " +
              (dir / "couple").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const NpyArray plan = read_npy(dir / "couple" / "plan.npy");
  ASSERT_EQ(plan.shape, (std::vector<std::size_t>{3, 4}));
  // The same plan as the library's couple() on the loaded model; columns sum to 1/4.
  const SinkhornTransformer model = load_model(dir / "run" / "model.bin");
  const RowMatrix want = couple(model, Eigen::Map<const Points<double>>(x.data(), 3, 2),
                                Eigen::Map<const Points<double>>(y.data(), 4, 2));
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(plan.data[i], want.data()[i]);
  for (int j = 0; j < 4; ++j)
    EXPECT_NEAR(plan.data[j] + plan.data[4 + j] + plan.data[8 + j], 0.25, 1e-15);
  // The default plan is the converged one: its rows hold too, to tol 1e-9 plus the rounding of
  // the row sums (4 terms).
  const auto summary = read_summary(dir / "couple");
  EXPECT_EQ(summary["command"], "couple");
  EXPECT_EQ(summary["plan_kind"], "converged");
  EXPECT_TRUE(summary["converged"].get<bool>());
  EXPECT_LT(summary["marginal_error"].get<double>(), 1e-9);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(plan.data[4 * i] + plan.data[4 * i + 1] + plan.data[4 * i + 2] + plan.data[4 * i + 3], 1.0 / 3,
                1e-9 + 8 * kUnit64);
  // --unrolled: the training-time plan, the library's couple with unrolled = true.
  r = run_cli("couple --model " + (dir / "run" / "model.bin").string() + " --x " + (dir / "x.npy").string() +
              " --y " + (dir / "y.npy").string() + " --unrolled --out " + (dir / "couple-unrolled").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_summary(dir / "couple-unrolled")["plan_kind"], "unrolled");
  const NpyArray unrolled = read_npy(dir / "couple-unrolled" / "plan.npy");
  CoupleOptions options;
  options.unrolled = true;
  const RowMatrix want_unrolled = couple(model, Eigen::Map<const Points<double>>(x.data(), 3, 2),
                                         Eigen::Map<const Points<double>>(y.data(), 4, 2), {}, {}, options);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(unrolled.data[i], want_unrolled.data()[i]);
  // couple takes best_model.bin as it takes model.bin.
  r = run_cli("couple --model " + (dir / "run" / "best_model.bin").string() + " --x " + (dir / "x.npy").string() +
              " --y " + (dir / "y.npy").string() + " --out " + (dir / "couple-best").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const RowMatrix want_best = couple(best, Eigen::Map<const Points<double>>(x.data(), 3, 2),
                                     Eigen::Map<const Points<double>>(y.data(), 4, 2));
  const NpyArray best_plan = read_npy(dir / "couple-best" / "plan.npy");
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(best_plan.data[i], want_best.data()[i]);
}

TEST(CliTrain, ACollapseIsWarnedAsItHappensAndTheBestModelIsKept) {
  // lr 1e5: AdamW moves every weight by about 1e5 in the first step; the test loss leaves its best
  // (the untrained model's, at step 0) by orders of magnitude and never comes back.
  const auto dir = testing::temp_dir("cli-train-collapse");
  auto r = run_cli("train" + kTiny + " --set train.steps=6 --set train.eval_every=1 --set train.lr=1e5 --out " +
                   (dir / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const std::string said = "tokenflow: warning: train: at step 1 the test loss is ";
  EXPECT_NE(r.stderr_text.find(said), std::string::npos) << r.stderr_text;
  const auto s = read_summary(dir / "run");
  EXPECT_EQ(s["status"], "finished");
  EXPECT_EQ(s["best_step"], 0);
  EXPECT_EQ(s["best_test_loss"], s["test_loss_untrained"]);
  ASSERT_TRUE(s.contains("warnings"));
  ASSERT_EQ(s["warnings"].size(), 1u);  // once per excursion
  EXPECT_NE(r.stderr_text.find(s["warnings"][0].get<std::string>()), std::string::npos);
  // best_model.bin: the untrained model, which evaluates to the untrained test loss.
  const SinkhornTransformer best = load_model(dir / "run" / "best_model.bin");
  EXPECT_NE(best.params, load_model(dir / "run" / "model.bin").params);
}

TEST(CliTrain, ResumeContinuesToTheSameModelAsAnUninterruptedRun) {
  const auto dir = testing::temp_dir("cli-resume");
  const std::string common =
      "train" + kTiny + " --set train.checkpoint_every=3 --set task.kind=\\\"entropic-ot\\\""
      " --set train.schedule=\\\"constant\\\"";  // steps grows on resume: kept out of the hash
  auto r = run_cli(common + " --set train.steps=6 --out " + (dir / "straight").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  // A run that stops at step 3 (its checkpoint), then continued to 6 with --resume alone.
  r = run_cli(common + " --set train.steps=3 --out " + (dir / "resumed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_TRUE(fs::exists(dir / "resumed" / "checkpoint.bin"));
  r = run_cli("train --resume --set train.steps=6 --out " + (dir / "resumed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(load_model(dir / "resumed" / "model.bin").params,
            load_model(dir / "straight" / "model.bin").params);
  EXPECT_EQ(read_summary(dir / "resumed")["resumed_from_step"], 3);
  EXPECT_EQ(read_summary(dir / "resumed")["test_w1"], read_summary(dir / "straight")["test_w1"]);
  // Another configuration does not resume this run.
  r = run_cli(common + " --set train.lr=0.5 --set train.steps=6 --resume --out " +
              (dir / "resumed").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("checkpoint.bin"), std::string::npos) << r.stderr_text;
}

TEST(CliTrain, TextsAsMeasuresEndToEnd) {
  const auto dir = testing::temp_dir("cli-text");
  std::ofstream(dir / "vectors.txt")
      << "the 0.1 0.2\ncat 1.0 0.0\ndog 0.9 0.1\nsat -1.0 0.5\nran -0.8 0.6\n";
  auto r =
      run_cli("embed --vectors " + (dir / "vectors.txt").string() +
              " --text \"The cat sat, the cat ran; a bird\" --out " + (dir / "embed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("a, bird"), std::string::npos)
      << r.stderr_text;  // unknown words reported
  const NpyArray points = read_npy(dir / "embed" / "points.npy"),
                 weights = read_npy(dir / "embed" / "weights.npy");
  EXPECT_EQ(points.shape, (std::vector<std::size_t>{4, 2}));  // the, cat, sat, ran
  EXPECT_EQ(weights.data, (std::vector<double>{2.0 / 6, 2.0 / 6, 1.0 / 6, 1.0 / 6}));
  r = run_cli("train" + kTiny + " --set train.steps=2 --out " + (dir / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  r = run_cli("couple --model " + (dir / "run" / "model.bin").string() + " --vectors " +
              (dir / "vectors.txt").string() +
              " --x-text \"the cat sat\" --y-text \"a dog ran\" --top 3 --out " +
              (dir / "couple").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = read_summary(dir / "couple");
  EXPECT_EQ(s["links"].size(), 3u);
  EXPECT_EQ(s["x_words"], (std::vector<std::string>{"the", "cat", "sat"}));
  EXPECT_EQ(s["y_words"], (std::vector<std::string>{"dog", "ran"}));
  EXPECT_EQ(read_npy(dir / "couple" / "plan.npy").shape, (std::vector<std::size_t>{3, 2}));
}

// Texts from files: embed --text-file gives the same measure as --text with the file's content,
// couple --x-text-file/--y-text-file the same plan; --text naming a file says to use --text-file,
// and both forms at once are refused.
TEST(CliTrain, TextsFromFiles) {
  const auto dir = testing::temp_dir("cli-text-file");
  std::ofstream(dir / "vectors.txt") << "the 0.1 0.2\ncat 1.0 0.0\ndog 0.9 0.1\nsat -1.0 0.5\nran -0.8 0.6\n";
  std::ofstream(dir / "x.txt") << "The cat sat,\nthe cat ran.\n";
  std::ofstream(dir / "y.txt") << "a dog ran";
  const std::string vectors = " --vectors " + (dir / "vectors.txt").string();
  auto r = run_cli("embed" + vectors + " --text-file " + (dir / "x.txt").string() + " --out " + (dir / "f").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_summary(dir / "f")["n"], 4);
  EXPECT_EQ(read_summary(dir / "f")["tokens"], 6);
  r = run_cli("embed" + vectors + " --text \"The cat sat, the cat ran.\" --out " + (dir / "t").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_npy(dir / "f" / "points.npy").data, read_npy(dir / "t" / "points.npy").data);
  EXPECT_EQ(read_npy(dir / "f" / "weights.npy").data, read_npy(dir / "t" / "weights.npy").data);
  // --text with a file's name: no word of the text "x.txt" has a vector, and the error says why.
  r = run_cli("embed" + vectors + " --text " + (dir / "x.txt").string() + " --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("is a file: use --text-file"), std::string::npos) << r.stderr_text;
  r = run_cli("embed" + vectors + " --text cat --text-file " + (dir / "x.txt").string() + " --out " +
              (dir / "both").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("not both"), std::string::npos) << r.stderr_text;
  r = run_cli("train" + kTiny + " --set train.steps=2 --out " + (dir / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const std::string model = " --model " + (dir / "run" / "model.bin").string() + vectors;
  r = run_cli("couple" + model + " --x-text-file " + (dir / "x.txt").string() + " --y-text-file " +
              (dir / "y.txt").string() + " --out " + (dir / "cf").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  r = run_cli("couple" + model + " --x-text \"The cat sat, the cat ran.\" --y-text \"a dog ran\" --out " +
              (dir / "ct").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_npy(dir / "cf" / "plan.npy").data, read_npy(dir / "ct" / "plan.npy").data);
}

struct BadTrainInput {
  std::string name, args, expect_in_message;
};
void PrintTo(const BadTrainInput& b, std::ostream* os) {
  *os << b.name;
}
class CliTrainBadInput : public ::testing::TestWithParam<BadTrainInput> {};

TEST_P(CliTrainBadInput, ExitsTwoWithOneLineAndWritesNothing) {
  const BadTrainInput& b = GetParam();
  const auto dir = testing::temp_dir("cli-train-bad-" + b.name);
  std::ofstream(dir / "corrupt.bin") << "TFMODEL1 but not really a model file";
  std::ofstream(dir / "cfg.toml") << "[task]\nkind = \"matching\"\nn = 4\n[train]\nstep = 3\n";
  const std::vector<double> x3{1, 2, 3, 4, 5, 6};
  write_npy(dir / "x3.npy", x3.data(), {2, 3});
  std::string args = b.args;
  for (std::size_t pos; (pos = args.find("DIR")) != std::string::npos;)
    args.replace(pos, 3, dir.string());
  const auto out = dir / "out";
  const auto r = run_cli(args + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find(b.expect_in_message), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(fs::exists(out)) << "output directory was created";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliTrainBadInput,
    ::testing::Values(
        BadTrainInput{"unknown_key", "train --config DIR/cfg.toml", "cfg.toml: train.step"},
        BadTrainInput{"bad_kind", "train --set task.kind=sortin", "task.kind"},
        BadTrainInput{"heads", "train --set model.heads=5", "model.heads"},
        BadTrainInput{"m_for_matching", "train --set task.m=3", "task.m"},
        BadTrainInput{"no_checkpoint", "train --resume", "--resume"},
        BadTrainInput{"corrupt_model",
                      "couple --model DIR/corrupt.bin --x DIR/x3.npy --y DIR/x3.npy",
                      "corrupt.bin"},
        BadTrainInput{"couple_no_y", "couple --model DIR/corrupt.bin --x DIR/x3.npy",
                      "--y: is required"},
        BadTrainInput{"vectors_missing", "embed --vectors DIR/none.txt --text hi", "none.txt"},
        BadTrainInput{"grid", "reproduce universal-approximation --grid 8x", "--grid"}),
    [](const ::testing::TestParamInfo<BadTrainInput>& p) { return p.param.name; });

}  // namespace
}  // namespace tokenflow
