// Checkpoints: a run resumed from any checkpointed state ends bit for bit where the uninterrupted
// run ends; a SIGKILLed CLI run resumes to identical outputs; corrupt checkpoints are refused.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "test_util.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/simulation_checkpoint.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;

TEST(Checkpoint, ResumedStateEndsBitForBit) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (std::string kind : {"softmax", "sinkhorn"}) {
    for (Integrator integ : {Integrator::euler, Integrator::rk4, Integrator::dopri5}) {
      AttentionSpec s;
      s.kind = kind;
      s.Q = testing::random_matrix(rng, 2, 2, 0.6);
      s.K = testing::random_matrix(rng, 2, 2, 0.6);
      AttentionSpec::Layer layer;
      layer.until = 0.23;
      layer.V = testing::random_matrix(rng, 2, 2, 0.6);
      s.layers = {layer};
      const AttentionParams p = make_attention(s, 2);
      const Measure<double> mu = testing::random_measure(rng, 40, 2, true);
      RunSpec run;
      run.T = 0.6;
      run.dt = 0.02;
      run.integrator = integ;
      run.save_every = 4;
      run.checkpoint_every = 2;  // dopri5 may take only a handful of steps
      std::vector<SimulationState<double>> states;
      const auto full = simulate<double>(p, run, mu, {}, [&](const SimulationState<double>& st) { states.push_back(st); });
      ASSERT_GE(states.size(), 2u);
      // Through the file format too: write, read back, resume.
      const auto& middle = states[states.size() / 2];
      const std::string payload = simulation_checkpoint_payload("kind = 1\n", mu, middle);
      Measure<double> mu2;
      SimulationState<double> st2;
      read_simulation_checkpoint(payload, "mem", mu2, st2);
      const auto resumed = simulate<double>(p, run, mu2, {}, {}, &st2);
      EXPECT_EQ(resumed.positions, full.positions) << kind << " " << to_string(integ);
      EXPECT_EQ(resumed.steps, full.steps);
      ASSERT_EQ(resumed.frames.size(), full.frames.size());
      for (std::size_t f = 0; f < full.frames.size(); ++f) EXPECT_EQ(resumed.frames[f], full.frames[f]);
      EXPECT_EQ(resumed.times, full.times);
    }
  }
}

TEST(Checkpoint, AStoppedRunCheckpointsTheStepItStoppedAfterAndResumesBitForBit) {
  // Ctrl-C: the progress callback returns false; the run writes the state of the step it stopped
  // after (between the periodic checkpoints) and throws Cancelled.
  std::mt19937_64 rng(testing::fresh_seed());
  for (Integrator integ : {Integrator::euler, Integrator::rk4, Integrator::dopri5}) {
    AttentionSpec s;
    s.Q = testing::random_matrix(rng, 2, 2, 0.6);
    s.K = testing::random_matrix(rng, 2, 2, 0.6);
    const AttentionParams p = make_attention(s, 2);
    const Measure<double> mu = testing::random_measure(rng, 30, 2, true);
    RunSpec run;
    run.T = 0.5;
    run.dt = 0.02;
    run.integrator = integ;
    run.save_every = 3;
    run.checkpoint_every = 1000;  // no periodic checkpoint before the stop
    const auto full = simulate<double>(p, run, mu);
    ASSERT_GE(full.steps, 3) << to_string(integ);
    const long stop_at = std::uniform_int_distribution<long>(1, full.steps - 1)(rng);
    std::vector<SimulationState<double>> states;
    EXPECT_THROW(simulate<double>(p, run, mu, [&](const Progress& pr) { return pr.steps < stop_at; },
                                  [&](const SimulationState<double>& st) { states.push_back(st); }),
                 Cancelled);
    ASSERT_EQ(states.size(), 1u) << to_string(integ);
    EXPECT_EQ(states[0].partial.steps, stop_at);
    const auto resumed = simulate<double>(p, run, mu, {}, {}, &states[0]);
    EXPECT_EQ(resumed.positions, full.positions) << to_string(integ) << " stopped after step " << stop_at;
    EXPECT_EQ(resumed.steps, full.steps);
    EXPECT_EQ(resumed.times, full.times);
  }
}


TEST(Checkpoint, KilledCliRunResumesToIdenticalOutputs) {
  const auto dir = testing::temp_dir("kill");
  // The kill must land after the first checkpoint (step 10) and before the last of 150 steps: the
  // 140 steps left take about 2.4 s at n = 1000 (AMD EPYC Zen 3, 2 threads), far above the 5 ms
  // polling; the whole test costs about two such runs.
  std::ofstream(dir / "cfg.toml") << "seed = 3\n[init]\nn = 1000\n[attention]\nkind = \"softmax\"\n"
                                     "Q = [[1.0, 0.2], [0.0, 0.8]]\nK = [[0.5, 0.0], [0.3, 1.0]]\n"
                                     "[run]\nT = 1.5\ndt = 0.01\nsave_every = 25\ncheckpoint_every = 10\n";
  const std::string args = "simulate --config " + (dir / "cfg.toml").string() + " --out ";
  ASSERT_EQ(testing::run_cli(args + (dir / "whole").string()).exit_code, 0);
  EXPECT_FALSE(fs::exists(dir / "whole" / "checkpoint.bin"));  // removed once the run is complete

  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string out = (dir / "killed").string(), cfg = (dir / "cfg.toml").string();
    ::setenv("CI", "1", 1);
    ::execl(TOKENFLOW_CLI, TOKENFLOW_CLI, "simulate", "--config", cfg.c_str(), "--out", out.c_str(), nullptr);
    ::_exit(127);
  }
  // Kill it as soon as a checkpoint exists (it is written atomically, so it is whole).
  for (int i = 0; i < 6000 && !fs::exists(dir / "killed" / "checkpoint.bin"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed; make it longer";
  ASSERT_TRUE(fs::exists(dir / "killed" / "checkpoint.bin"));
  EXPECT_FALSE(fs::exists(dir / "killed" / "positions.npy"));  // nothing committed yet

  const auto r = testing::run_cli("resume --out " + (dir / "killed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  for (const char* f : {"positions.npy", "initial.npy", "trajectory.npy", "times.npy", "diagnostics.csv"})
    EXPECT_EQ(testing::read_file_bytes(dir / "killed" / f), testing::read_file_bytes(dir / "whole" / f)) << f;
  // No staging debris of the killed process is left.
  for (const auto& e : fs::directory_iterator(dir / "killed"))
    EXPECT_NE(e.path().filename().string().rfind(".staging-", 0), 0u) << e.path();
}

TEST(Checkpoint, CorruptOrMissingCheckpointIsRefused) {
  const auto dir = testing::temp_dir("corrupt");
  std::ofstream(dir / "cfg.toml") << "[init]\nn = 50\n[run]\nT = 0.5\ndt = 0.01\ncheckpoint_every = 10\n";
  // A complete run removes its checkpoint; write one by hand from a library run instead.
  std::mt19937_64 rng(testing::fresh_seed());
  const Measure<double> mu = testing::random_measure(rng, 50, 2, false);
  SimulationState<double> state;
  RunSpec run;
  run.T = 0.5;
  run.checkpoint_every = 10;
  simulate<double>(make_attention(AttentionSpec{}, 2), run, mu, {}, [&](const SimulationState<double>& s) {
    if (s.partial.steps == 20) state = s;
  });
  fs::create_directories(dir / "run");
  write_checkpoint_file(dir / "run" / "checkpoint.bin", CheckpointKind::simulate,
                        simulation_checkpoint_payload("[run]\nT = 0.5\ndt = 0.01\ncheckpoint_every = 10\n", mu, state));
  // It resumes...
  fs::copy(dir / "run", dir / "ok");
  EXPECT_EQ(testing::run_cli("resume --out " + (dir / "ok").string()).exit_code, 0);
  EXPECT_TRUE(fs::exists(dir / "ok" / "positions.npy"));
  // ...but not after one flipped byte, nor truncated, nor when missing.
  std::string bytes = testing::read_file_bytes(dir / "run" / "checkpoint.bin");
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(dir / "run" / "checkpoint.bin", std::ios::binary | std::ios::trunc) << bytes;
  auto r = testing::run_cli("resume --out " + (dir / "run").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("checkpoint.bin: checkpoint: is corrupt"), std::string::npos) << r.stderr_text;
  std::ofstream(dir / "run" / "checkpoint.bin", std::ios::binary | std::ios::trunc) << bytes.substr(0, 40);
  EXPECT_EQ(testing::run_cli("resume --out " + (dir / "run").string()).exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "run" / "positions.npy"));
  r = testing::run_cli("resume --out " + (dir / "nothing").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("no checkpoint"), std::string::npos) << r.stderr_text;
}

}  // namespace
}  // namespace tokenflow
