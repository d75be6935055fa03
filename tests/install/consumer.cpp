// One Euler step of softmax attention through the installed library.
#include <tokenflow/dynamics.hpp>

#include <cstdio>

int main() {
  using namespace tokenflow;
  AttentionSpec spec;
  const AttentionParams params = make_attention(spec, 2);
  const Measure<double> mu = make_measure<double>(sample_gaussian(16, Eigen::Vector2d::Zero(), Eigen::Matrix2d::Identity(), 1));
  RunSpec run;
  run.T = run.dt = 0.1;
  run.integrator = Integrator::euler;
  const auto r = simulate(params, run, mu);
  std::printf("%s %ld\n", r.status.c_str(), r.steps);
  return r.status == "finished" && r.steps == 1 ? 0 : 1;
}
