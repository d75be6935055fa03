// The simulate checkpoint's payload (tokenflow/simulation_checkpoint.hpp) inside the checkpoint
// container of tokenflow/checkpoint.hpp.
#include "tokenflow/simulation_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tokenflow/error.hpp"
#include "tokenflow/records.hpp"

namespace tokenflow {

template <class T>
std::string simulation_checkpoint_payload(const std::string& config_toml, const Measure<T>& initial,
                                          const SimulationState<T>& s) {
  ByteWriter w;
  w.string(config_toml);
  w.scalar<std::uint64_t>(fnv1a64(config_toml.data(), config_toml.size()));
  w.scalar<std::uint8_t>(sizeof(T));
  w.matrix(initial.points);
  w.matrix(initial.weights);
  w.matrix(initial.positions);
  const SimulationResult<T>& p = s.partial;
  w.string(p.status);
  w.scalar<double>(p.t_final);
  w.scalar<std::int64_t>(p.steps);
  w.scalar<std::int64_t>(p.rejected_steps);
  w.matrix(p.positions);
  w.scalar<std::uint64_t>(p.frames.size());
  for (const auto& f : p.frames) w.matrix(f);
  w.scalar<std::uint64_t>(p.times.size());
  for (double t : p.times) w.scalar<double>(t);
  w.scalar<std::uint64_t>(p.diagnostics.size());
  for (const auto& f : p.diagnostics) {
    w.scalar<double>(f.t);
    w.matrix(f.mean);
    w.matrix(f.cov_eigenvalues);
    w.scalar<double>(f.effective_rank);
    w.scalar<std::int32_t>(f.rank);
    w.scalar<std::int64_t>(f.cluster_count);
    w.scalar<double>(f.energy);
    w.scalar<double>(f.max_norm);
  }
  w.scalar<double>(s.t);
  w.scalar<double>(s.h);
  w.scalar<std::uint8_t>(s.saved_last);
  w.scalar<std::uint8_t>(s.have_first_stage);
  w.matrix(s.first_stage);
  w.scalar<std::uint64_t>(s.sinkhorn_f.size());
  for (std::size_t h = 0; h < s.sinkhorn_f.size(); ++h) {
    w.matrix(s.sinkhorn_f[h]);
    w.matrix(s.sinkhorn_g[h]);
  }
  return w.data();
}

SimulationCheckpointHeader read_simulation_checkpoint_header(const std::string& payload, const std::string& file) {
  ByteReader r(payload, file);
  SimulationCheckpointHeader h;
  h.config_toml = r.string();
  if (r.scalar<std::uint64_t>() != fnv1a64(h.config_toml.data(), h.config_toml.size()))
    r.corrupt("config hash mismatch");
  const auto size = r.scalar<std::uint8_t>();
  if (size != 4 && size != 8) r.corrupt("dtype");
  h.float32 = size == 4;
  return h;
}

namespace {

// A checkpoint's seal is a checksum, which whoever crafts a file can recompute: every field is
// checked like user input (a step size of 0 or NaN, a negative step count, a time beyond T made
// `tokenflow resume` run forever). Each failure names the field.
[[noreturn]] void bad_field(const std::string& file, const std::string& field, const std::string& what) {
  throw InputError(file, "checkpoint", "is not a valid checkpoint: " + field + " " + what +
                                           "; delete it to start the run afresh");
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

template <class M>
bool all_finite(const M& m) {
  for (Eigen::Index i = 0; i < m.size(); ++i)
    if (!std::isfinite(static_cast<double>(m.data()[i]))) return false;
  return true;
}

}  // namespace

template <class T>
void read_simulation_checkpoint(const std::string& payload, const std::string& file, Measure<T>& initial,
                                SimulationState<T>& s) {
  ByteReader r(payload, file);
  (void)r.string();
  (void)r.scalar<std::uint64_t>();
  if (r.scalar<std::uint8_t>() != sizeof(T)) r.corrupt("dtype");
  r.matrix(initial.points);
  r.matrix(initial.weights);
  r.matrix(initial.positions);
  const auto n = initial.points.rows(), d = initial.points.cols();
  if (initial.weights.size() != n || (initial.positions.size() != 0 && initial.positions.size() != n))
    r.corrupt("measure sizes");
  if (initial.weights.cols() != 1 || (initial.positions.size() != 0 && initial.positions.cols() != 1))
    r.corrupt("measure sizes");
  if (n < 1 || d < 1) bad_field(file, "the initial measure", "is empty");
  if (!all_finite(initial.points)) bad_field(file, "the initial points", "are not finite");
  for (Eigen::Index i = 0; i < n; ++i)
    if (!(initial.weights[i] > T(0)) || !std::isfinite(static_cast<double>(initial.weights[i])))
      bad_field(file, "the weights", "must be finite and positive");
  for (Eigen::Index i = 0; i < initial.positions.size(); ++i)
    if (!(initial.positions[i] >= T(0) && initial.positions[i] <= T(1)))
      bad_field(file, "the positions", "must lie in [0, 1]");
  SimulationResult<T>& p = s.partial;
  p.status = r.string();
  if (p.status.empty() || p.status.size() > 32 ||
      p.status.find_first_not_of("abcdefghijklmnopqrstuvwxyz_-") != std::string::npos)
    bad_field(file, "the status", "is not a status");
  p.t_final = r.scalar<double>();
  if (!std::isfinite(p.t_final)) bad_field(file, "t_final", "is not finite");
  const auto steps = r.scalar<std::int64_t>(), rejected = r.scalar<std::int64_t>();
  if (steps < 0) bad_field(file, "the step count", "is negative");
  if (rejected < 0) bad_field(file, "the rejected step count", "is negative");
  p.steps = static_cast<long>(steps);
  p.rejected_steps = static_cast<long>(rejected);
  r.matrix(p.positions);
  if (p.positions.rows() != n || p.positions.cols() != d) r.corrupt("positions shape");
  if (!all_finite(p.positions)) bad_field(file, "the positions of the tokens", "are not finite");
  // Each count is bounded by the bytes left (a record takes at least 16 bytes: no count can ask for
  // more records than the payload holds) before anything is allocated.
  const auto frames = r.scalar<std::uint64_t>();
  if (frames > r.remaining() / 16) r.corrupt("frame count");
  p.frames.resize(frames);
  for (auto& f : p.frames) {
    r.matrix(f);
    if (f.rows() != n || f.cols() != d) r.corrupt("frame shape");
  }
  const auto times = r.scalar<std::uint64_t>();
  if (times > r.remaining() / sizeof(double)) r.corrupt("time count");
  p.times.resize(times);
  for (auto& t : p.times) t = r.scalar<double>();
  if (p.times.size() != p.frames.size()) bad_field(file, "the frame times", "do not match the frames");
  for (std::size_t k = 0; k < p.times.size(); ++k)
    if (!std::isfinite(p.times[k]) || p.times[k] < 0.0 || (k > 0 && p.times[k] < p.times[k - 1]))
      bad_field(file, "the frame times", "are not finite and increasing");
  const auto diags = r.scalar<std::uint64_t>();
  if (diags > r.remaining() / 16) r.corrupt("diagnostics count");
  p.diagnostics.resize(diags);
  for (auto& f : p.diagnostics) {
    f.t = r.scalar<double>();
    r.matrix(f.mean);
    r.matrix(f.cov_eigenvalues);
    f.effective_rank = r.scalar<double>();
    f.rank = r.scalar<std::int32_t>();
    f.cluster_count = static_cast<long>(r.scalar<std::int64_t>());
    f.energy = r.scalar<double>();
    f.max_norm = r.scalar<double>();
    if (!std::isfinite(f.t) || f.t < 0.0) bad_field(file, "a diagnostics time", "is not finite and >= 0");
    if (f.mean.size() != d || f.cov_eigenvalues.size() != d) bad_field(file, "a diagnostics row", "has the wrong dimension");
    if (f.rank < 0 || f.rank > d) bad_field(file, "a diagnostics rank", "is out of range");
  }
  s.t = r.scalar<double>();
  s.h = r.scalar<double>();
  if (!std::isfinite(s.t) || s.t < 0.0) bad_field(file, "the time t", "must be finite and >= 0");
  if (!std::isfinite(s.h) || s.h < 0.0) bad_field(file, "the step size h", "must be finite and >= 0");
  s.saved_last = r.scalar<std::uint8_t>() != 0;
  s.have_first_stage = r.scalar<std::uint8_t>() != 0;
  r.matrix(s.first_stage);
  if (s.have_first_stage && (s.first_stage.rows() != n || s.first_stage.cols() != d)) r.corrupt("integrator state");
  if (s.have_first_stage && !all_finite(s.first_stage)) bad_field(file, "the integrator state", "is not finite");
  const auto heads = r.scalar<std::uint64_t>();
  if (heads > r.remaining() / 32) r.corrupt("head count");
  s.sinkhorn_f.resize(heads);
  s.sinkhorn_g.resize(heads);
  for (std::size_t h = 0; h < heads; ++h) {
    r.matrix(s.sinkhorn_f[h]);
    r.matrix(s.sinkhorn_g[h]);
    for (const Eigen::VectorXd* v : {&s.sinkhorn_f[h], &s.sinkhorn_g[h]})
      if ((v->size() != 0 && v->size() != n) || v->cols() > 1 || !all_finite(*v))
        bad_field(file, "the Sinkhorn potentials", "do not match the tokens");
  }
  if (r.remaining() != 0) r.corrupt("trailing bytes");
}

template <class T>
void check_simulation_checkpoint_state(const SimulationState<T>& s, const RunSpec& run, const std::string& file) {
  // The run's own config (in the same checkpoint) bounds the state: a step count or a time past
  // the end, or a dopri5 step of 0, would never finish.
  const SimulationResult<T>& p = s.partial;
  const double slack = 1e-9 * std::max(1.0, run.T);
  if (s.t > run.T + slack)
    bad_field(file, "the time t", "is " + number(s.t) + ", beyond run.T = " + number(run.T));
  if (run.integrator != Integrator::dopri5) {
    const double steps = std::ceil(run.T / run.dt - 1e-9);
    if (static_cast<double>(p.steps) > steps)
      bad_field(file, "the step count", "is " + std::to_string(p.steps) + ", beyond the run's " +
                                            std::to_string(static_cast<long long>(steps)) + " steps");
  } else if (s.t < run.T && !(s.h > 0.0)) {
    bad_field(file, "the step size h", "must be positive before the end of the run");
  }
  const double bound = static_cast<double>(p.steps) + 2.0;
  if (run.save_every == 0 && !p.frames.empty()) bad_field(file, "the frames", "exist although run.save_every = 0");
  if (static_cast<double>(p.frames.size()) > bound || static_cast<double>(p.diagnostics.size()) > bound)
    bad_field(file, "the frame count", "exceeds the steps taken");
  for (double t : p.times)
    if (t > run.T + slack) bad_field(file, "the frame times", "go beyond run.T");
}

template std::string simulation_checkpoint_payload<float>(const std::string&, const Measure<float>&,
                                                          const SimulationState<float>&);
template std::string simulation_checkpoint_payload<double>(const std::string&, const Measure<double>&,
                                                           const SimulationState<double>&);
template void read_simulation_checkpoint<float>(const std::string&, const std::string&, Measure<float>&,
                                                SimulationState<float>&);
template void read_simulation_checkpoint<double>(const std::string&, const std::string&, Measure<double>&,
                                                 SimulationState<double>&);
template void check_simulation_checkpoint_state<float>(const SimulationState<float>&, const RunSpec&, const std::string&);
template void check_simulation_checkpoint_state<double>(const SimulationState<double>&, const RunSpec&, const std::string&);

}  // namespace tokenflow
